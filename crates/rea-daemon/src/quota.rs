//! Shares of a cap the daemon's users have in common (control connections,
//! followers, history queries): a cap is counted per holder, no holder
//! other than root (and the daemon's own user) may take more than its
//! share, and the last few slots are kept for root, so that one user
//! holding what she may can lock neither another user nor root out.
//!
//! What is counted and for how long is the caller's: a [`Permit`] holds one
//! slot until it is dropped. The metrics endpoint has no user to count (it
//! is TCP) and is bounded otherwise (`metrics::http`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// A cap of `limit` slots, shared by holders of key `K`.
pub(crate) struct Quota<K: Hash + Eq + Clone> {
    inner: Arc<Inner<K>>,
}

impl<K: Hash + Eq + Clone> Clone for Quota<K> {
    fn clone(&self) -> Self {
        Quota {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<K> {
    limit: usize,
    /// Most slots one holder other than root may take.
    share: usize,
    /// Slots only root may take.
    reserve: usize,
    /// Short critical sections only (a count up or down), never held
    /// across an await: a std mutex, as mini-redis's `Db`.
    used: Mutex<Used<K>>,
}

struct Used<K> {
    total: usize,
    by_holder: HashMap<K, usize>,
}

/// Who takes a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder<K> {
    /// Root or the daemon's own user: the whole cap, reserve included.
    Admin,
    /// Anyone else: their share, outside the reserve.
    Other(K),
}

/// Why a slot was refused, for the refusal's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Every slot open to this holder is taken.
    Full,
    /// This holder has its share already.
    Share(usize),
}

impl<K: Hash + Eq + Clone> Quota<K> {
    /// `limit` slots; a holder other than root gets at most a quarter of
    /// them, and an eighth are kept for root (at least one each).
    pub(crate) fn new(limit: usize) -> Quota<K> {
        let limit = limit.max(2);
        Quota::with_shares(limit, (limit / 4).max(1), (limit / 8).max(1))
    }

    pub(crate) fn with_shares(limit: usize, share: usize, reserve: usize) -> Quota<K> {
        Quota {
            inner: Arc::new(Inner {
                limit,
                share,
                reserve: reserve.min(limit.saturating_sub(1)),
                used: Mutex::new(Used {
                    total: 0,
                    by_holder: HashMap::new(),
                }),
            }),
        }
    }

    /// A slot for `holder`, if one is open to it.
    pub(crate) fn try_acquire(&self, holder: Holder<K>) -> Result<Permit<K>, Refused> {
        let inner = &self.inner;
        let mut used = inner.used.lock().unwrap_or_else(|p| p.into_inner());
        match &holder {
            Holder::Admin if used.total >= inner.limit => return Err(Refused::Full),
            Holder::Admin => {}
            Holder::Other(_) if used.total >= inner.limit - inner.reserve => {
                return Err(Refused::Full)
            }
            Holder::Other(key) => {
                let mine = used.by_holder.entry(key.clone()).or_insert(0);
                if *mine >= inner.share {
                    return Err(Refused::Share(inner.share));
                }
                *mine += 1;
            }
        }
        used.total += 1;
        drop(used);
        Ok(Permit {
            quota: Arc::clone(&self.inner),
            holder,
        })
    }

    /// Slots taken now, by everyone.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.inner
            .used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total
    }
}

/// One slot, given back when dropped.
pub(crate) struct Permit<K: Hash + Eq + Clone> {
    quota: Arc<Inner<K>>,
    holder: Holder<K>,
}

impl<K: Hash + Eq + Clone> Drop for Permit<K> {
    fn drop(&mut self) {
        let mut used = self.quota.used.lock().unwrap_or_else(|p| p.into_inner());
        used.total -= 1;
        if let Holder::Other(key) = &self.holder {
            if let Some(mine) = used.by_holder.get_mut(key) {
                *mine -= 1;
                if *mine == 0 {
                    used.by_holder.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_takes_its_share_and_root_keeps_its_reserve() {
        let quota: Quota<u32> = Quota::new(16);
        assert_eq!((quota.inner.share, quota.inner.reserve), (4, 2));
        let alice: Vec<_> = (0..4)
            .map(|_| quota.try_acquire(Holder::Other(1000)).expect("her share"))
            .collect();
        assert_eq!(
            quota.try_acquire(Holder::Other(1000)).err(),
            Some(Refused::Share(4))
        );
        // Others fill what is left outside the reserve...
        let others: Vec<_> = (0..10)
            .map(|i| {
                quota
                    .try_acquire(Holder::Other(2000 + i / 4))
                    .expect("their shares")
            })
            .collect();
        assert_eq!(quota.in_use(), 14);
        assert_eq!(
            quota.try_acquire(Holder::Other(3000)).err(),
            Some(Refused::Full)
        );
        // ...and root still gets the reserve, and no more.
        let root: Vec<_> = (0..2)
            .map(|_| quota.try_acquire(Holder::Admin).expect("the reserve"))
            .collect();
        assert_eq!(quota.try_acquire(Holder::Admin).err(), Some(Refused::Full));
        drop(alice);
        assert_eq!(quota.in_use(), 12);
        let again = quota.try_acquire(Holder::Other(1000));
        assert!(again.is_ok(), "a slot given back is open again");
        drop((others, root, again));
        assert_eq!(quota.in_use(), 0);
        assert!(quota.inner.used.lock().unwrap().by_holder.is_empty());
    }

    #[test]
    fn a_tiny_cap_still_has_a_slot_for_others_and_one_for_root() {
        let quota: Quota<u32> = Quota::new(2);
        let user = quota.try_acquire(Holder::Other(7)).expect("one for users");
        assert!(quota.try_acquire(Holder::Other(8)).is_err());
        let root = quota.try_acquire(Holder::Admin).expect("one for root");
        drop((user, root));
    }
}
