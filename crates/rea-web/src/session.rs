//! Sessions and their CSRF tokens, login links, and the connection shares.
//!
//! A session is a random cookie bound to one uid, with its own random CSRF
//! token. On `web.sock` the uid is the peer's (`SO_PEERCRED`) and a session
//! only carries the CSRF token: a cookie presented by another uid's
//! connection (two users forwarding to the same browser) is ignored and a
//! new session made. On TCP the session *is* the identity: it is made only
//! by a one-time login link, which only `web.sock` hands out, to its peer.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions kept at most, all users together (the oldest goes first), and
/// per user.
const MAX_SESSIONS: usize = 4096;
const MAX_SESSIONS_PER_UID: usize = 64;
/// A session unused for this long is forgotten.
const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// A login link is good once, for this long.
const LOGIN_TTL: Duration = Duration::from_secs(120);
const MAX_LOGINS: usize = 256;

/// 32 random bytes from the kernel, as 64 hex digits; `None` when the
/// kernel gives none (the request is then refused, never served with a
/// guessable token).
pub(crate) fn token() -> Option<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Compares two tokens in time independent of where they differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) uid: u32,
    pub(crate) csrf: String,
    used: Instant,
}

#[derive(Default)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<String, Session>,
    logins: HashMap<String, (u32, Instant)>,
}

impl Sessions {
    /// The session of this cookie, if it is live (and `uid`'s when given).
    pub(crate) fn find(&self, cookie: Option<&str>, uid: Option<u32>) -> Option<Session> {
        let cookie = cookie?;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = inner.sessions.get_mut(cookie)?;
        if s.used.elapsed() > SESSION_IDLE || uid.is_some_and(|u| u != s.uid) {
            return None;
        }
        s.used = Instant::now();
        Some(s.clone())
    }

    /// A new session for `uid`; its oldest beyond the caps are dropped.
    pub(crate) fn create(&self, uid: u32) -> Option<Session> {
        let s = Session {
            id: token()?,
            uid,
            csrf: token()?,
            used: Instant::now(),
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .sessions
            .retain(|_, s| s.used.elapsed() <= SESSION_IDLE);
        let mine: Vec<(Instant, String)> = inner
            .sessions
            .values()
            .filter(|o| o.uid == uid)
            .map(|o| (o.used, o.id.clone()))
            .collect();
        if mine.len() >= MAX_SESSIONS_PER_UID {
            if let Some((_, id)) = mine.into_iter().min() {
                inner.sessions.remove(&id);
            }
        }
        if inner.sessions.len() >= MAX_SESSIONS {
            let oldest = inner
                .sessions
                .values()
                .min_by_key(|o| o.used)
                .map(|o| o.id.clone());
            if let Some(id) = oldest {
                inner.sessions.remove(&id);
            }
        }
        inner.sessions.insert(s.id.clone(), s.clone());
        Some(s)
    }

    /// A one-time login token for `uid`.
    pub(crate) fn login_link(&self, uid: u32) -> Option<String> {
        let t = token()?;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.logins.retain(|_, (_, at)| at.elapsed() <= LOGIN_TTL);
        if inner.logins.len() >= MAX_LOGINS {
            let oldest = inner
                .logins
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.logins.remove(&k);
            }
        }
        inner.logins.insert(t.clone(), (uid, Instant::now()));
        Some(t)
    }

    /// Spends a login token: its uid, once.
    pub(crate) fn redeem(&self, t: &str) -> Option<u32> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (uid, at) = inner.logins.remove(t)?;
        (at.elapsed() <= LOGIN_TTL).then_some(uid)
    }
}

/// Connections counted per uid against shares of a cap, as the control
/// socket's: a user other than the administrators holds at most a quarter,
/// and an eighth is kept for the administrators. Event streams (one per
/// open page) have their own, smaller cap with the same shares.
pub(crate) struct Shares {
    limit: usize,
    inner: Mutex<(usize, HashMap<u32, usize>)>,
}

/// A held share; given back when dropped.
pub(crate) struct Held<'a> {
    shares: &'a Shares,
    uid: u32,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut inner = self.shares.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0 = inner.0.saturating_sub(1);
        if let Some(n) = inner.1.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                inner.1.remove(&self.uid);
            }
        }
    }
}

impl Shares {
    pub(crate) fn new(limit: usize) -> Shares {
        Shares {
            limit,
            inner: Mutex::new((0, HashMap::new())),
        }
    }

    /// A share for `uid`, or `None` when its share or the cap is used up.
    pub(crate) fn take(&self, uid: u32, admin: bool) -> Option<Held<'_>> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let reserve = (self.limit / 8).max(1);
        let per_user = (self.limit / 4).max(1);
        let mine = inner.1.get(&uid).copied().unwrap_or(0);
        let fits = if admin {
            inner.0 < self.limit
        } else {
            inner.0 + reserve < self.limit && mine < per_user
        };
        if !fits {
            return None;
        }
        inner.0 += 1;
        *inner.1.entry(uid).or_default() += 1;
        Some(Held { shares: self, uid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_keep_a_reserve_and_a_cap_per_user() {
        let shares = Shares::new(16);
        let alice: Vec<_> = (0..4).filter_map(|_| shares.take(1000, false)).collect();
        assert_eq!(alice.len(), 4);
        assert!(shares.take(1000, false).is_none(), "a quarter each");
        let bob: Vec<_> = (0..4).filter_map(|_| shares.take(1001, false)).collect();
        let carol: Vec<_> = (0..4).filter_map(|_| shares.take(1002, false)).collect();
        let dave: Vec<_> = (0..4).filter_map(|_| shares.take(1003, false)).collect();
        assert_eq!(
            (bob.len(), carol.len(), dave.len()),
            (4, 4, 2),
            "two kept for root"
        );
        let root: Vec<_> = (0..4).filter_map(|_| shares.take(0, true)).collect();
        assert_eq!(root.len(), 2);
        drop(alice);
        assert!(shares.take(1000, false).is_some());
    }

    #[test]
    fn a_login_link_is_good_once_and_sessions_are_per_uid() {
        let s = Sessions::default();
        let t = s.login_link(7).unwrap();
        assert_eq!(s.redeem(&t), Some(7));
        assert_eq!(s.redeem(&t), None);
        let a = s.create(7).unwrap();
        assert!(s.find(Some(&a.id), Some(7)).is_some());
        assert!(s.find(Some(&a.id), Some(8)).is_none());
        assert!(s.find(Some("nope"), None).is_none());
        assert!(same(&a.csrf, &a.csrf.clone()) && !same(&a.csrf, &a.id));
    }
}
