//! Shares: how the `max_concurrent` slots are divided between tenants.
//!
//! Every tenant (the system, each user with a job file) has its own queue of
//! what waits for a slot: finished runs' hook sequences first, then runs in
//! due order. A slot that frees goes round robin among the tenants that
//! have something waiting, so one tenant's backlog, however long, delays
//! another's runs by one turn at most. Two limits bound a user:
//!
//! - `max_concurrent_per_user`: slots one user's runs and hooks hold at once;
//! - `reserve_system`: slots only the system's jobs may take, so users
//!   together never hold more than `max_concurrent - reserve_system`.
//!
//! A tenant that may not take a slot now (its share is full) keeps its turn
//! in the ring and is passed over; choosing the next run costs O(tenants),
//! never O(waiting runs). What does not live here: the overlap policy and
//! the job's own queue (`admission.rs`), the hooks in progress
//! (`hook_queue.rs`).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use super::{AfterRun, Pending};
use crate::tenant::Tenant;

/// Who holds or waits for a slot: a user's name, None for the system.
pub(super) type Owner = Option<Arc<str>>;

/// The limits of [`Shares`], as `[daemon]` sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareLimits {
    /// Slots one user's runs and hooks may hold at once.
    pub per_user: usize,
    /// Slots only the system's jobs may take.
    pub reserve_system: usize,
    /// Runs of one user that may wait for a slot before her manual
    /// triggers and retries are refused.
    pub queued_per_user: usize,
}

impl ShareLimits {
    /// The defaults for `max_concurrent`: half of the slots per user (at
    /// least one), one slot reserved for the system, 100 waiting runs per
    /// user.
    pub fn defaults(max_concurrent: usize) -> ShareLimits {
        ShareLimits {
            per_user: (max_concurrent / 2).max(1),
            reserve_system: 1,
            queued_per_user: DEFAULT_QUEUED_PER_USER,
        }
    }
}

/// `[daemon] max_queued_per_user` unless set.
pub const DEFAULT_QUEUED_PER_USER: usize = 100;

/// Why a run (or a tenant's next run) cannot take a slot now: what a skip
/// or a wait records as its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Blocker {
    /// Every slot is taken.
    AllSlots { max_concurrent: usize },
    /// The user's own share is full.
    UserShare { user: Arc<str>, per_user: usize },
    /// Users together hold every slot that is not the system's reserve.
    UsersShare {
        max_concurrent: usize,
        reserve_system: usize,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::AllSlots { max_concurrent } => {
                write!(f, "all {max_concurrent} slots are in use (max_concurrent = {max_concurrent})")
            }
            Blocker::UserShare { user, per_user } => write!(
                f,
                "{user}'s share is full ({per_user} running, max_concurrent_per_user = {per_user})"
            ),
            Blocker::UsersShare {
                max_concurrent,
                reserve_system,
            } => write!(
                f,
                "the users' slots are full ({} of max_concurrent = {max_concurrent} running; reserve_system = {reserve_system} kept for the system's jobs)",
                max_concurrent - reserve_system
            ),
        }
    }
}

/// What got a slot.
#[derive(Debug)]
pub(super) enum Granted {
    Run(Pending),
    Hooks(Box<AfterRun>),
}

/// One tenant's waiting work and the slots it holds.
#[derive(Debug, Default)]
struct TenantQueue {
    hooks: VecDeque<Box<AfterRun>>,
    runs: VecDeque<Pending>,
    /// Slots held by its runs and hook sequences.
    held: usize,
    /// In `Shares::ring`.
    in_ring: bool,
}

impl TenantQueue {
    fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.runs.is_empty()
    }
}

/// The slots and who waits for them. See the module documentation.
#[derive(Debug)]
pub(super) struct Shares {
    max_concurrent: usize,
    limits: ShareLimits,
    tenants: HashMap<Owner, TenantQueue>,
    /// Tenants with something waiting, in turn order.
    ring: VecDeque<Owner>,
    /// Slots held, by everyone and by users.
    held: usize,
    held_by_users: usize,
    /// Runs waiting, every tenant's.
    waiting_runs: usize,
}

impl Shares {
    pub(super) fn new(max_concurrent: usize, limits: ShareLimits) -> Shares {
        let mut shares = Shares {
            max_concurrent: 1,
            limits,
            tenants: HashMap::new(),
            ring: VecDeque::new(),
            held: 0,
            held_by_users: 0,
            waiting_runs: 0,
        };
        shares.set_limits(max_concurrent, limits);
        shares
    }

    /// New limits (a reload): slots already held stay held.
    ///
    /// The reserve is at most `max_concurrent - 1` and a user's share at
    /// least one slot and at most what the reserve leaves, so a user's job
    /// can always run eventually.
    pub(super) fn set_limits(&mut self, max_concurrent: usize, limits: ShareLimits) {
        let max = max_concurrent.max(1);
        let reserve_system = limits.reserve_system.min(max - 1);
        self.max_concurrent = max;
        self.limits = ShareLimits {
            reserve_system,
            per_user: limits.per_user.clamp(1, max - reserve_system),
            queued_per_user: limits.queued_per_user,
        };
    }

    pub(super) fn limits(&self) -> ShareLimits {
        self.limits
    }

    /// Slots held (runs handed to the daemon and hook sequences).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Runs waiting for a slot, every tenant's.
    pub(super) fn waiting_runs(&self) -> usize {
        self.waiting_runs
    }

    /// Runs of `owner` waiting for a slot.
    pub(super) fn waiting_runs_of(&self, owner: &Owner) -> usize {
        self.tenants.get(owner).map_or(0, |t| t.runs.len())
    }

    /// Slots `owner` holds.
    pub(super) fn held_by(&self, owner: &Owner) -> usize {
        self.tenants.get(owner).map_or(0, |t| t.held)
    }

    /// Each tenant the shares know (holding or waiting now, or lately),
    /// with the slots it holds and its runs waiting.
    pub(super) fn per_tenant(&self) -> impl Iterator<Item = (&Owner, usize, usize)> {
        self.tenants.iter().map(|(o, t)| (o, t.held, t.runs.len()))
    }

    /// A run waits for a slot, behind its tenant's earlier ones.
    pub(super) fn push_run(&mut self, p: Pending) {
        let owner = p.owner.clone();
        self.waiting_runs += 1;
        self.tenant(owner).runs.push_back(p);
    }

    /// A finished run's hooks wait for a slot, ahead of its tenant's runs.
    pub(super) fn push_hooks(&mut self, owner: Owner, after: AfterRun) {
        self.tenant(owner).hooks.push_back(Box::new(after));
    }

    fn tenant(&mut self, owner: Owner) -> &mut TenantQueue {
        let t = self.tenants.entry(owner.clone()).or_default();
        if !t.in_ring {
            t.in_ring = true;
            self.ring.push_back(owner);
        }
        t
    }

    /// Why `owner` may not take a slot now, None if it may: the narrowest
    /// limit that holds it back (a user whose own share is full would wait
    /// even if every other slot were free).
    pub(super) fn blocker(&self, owner: &Owner) -> Option<Blocker> {
        if let Some(user) = owner {
            if self.held_by(owner) >= self.limits.per_user {
                return Some(Blocker::UserShare {
                    user: user.clone(),
                    per_user: self.limits.per_user,
                });
            }
            if self.held_by_users >= self.max_concurrent - self.limits.reserve_system {
                return Some(Blocker::UsersShare {
                    max_concurrent: self.max_concurrent,
                    reserve_system: self.limits.reserve_system,
                });
            }
        }
        (self.held >= self.max_concurrent).then_some(Blocker::AllSlots {
            max_concurrent: self.max_concurrent,
        })
    }

    /// The next thing to start, from the next tenant in turn that may take
    /// a slot (which it then holds), or None. At most one pass of the ring.
    pub(super) fn next(&mut self) -> Option<(Owner, Granted)> {
        if self.held >= self.max_concurrent {
            return None;
        }
        for _ in 0..self.ring.len() {
            let owner = self.ring.pop_front()?;
            let empty = self.tenants.get(&owner).is_none_or(|t| t.is_empty());
            if empty {
                self.forget_if_idle(&owner);
                continue;
            }
            if self.blocker(&owner).is_some() {
                self.ring.push_back(owner);
                continue;
            }
            let t = self.tenants.get_mut(&owner)?;
            let granted = match t.hooks.pop_front() {
                Some(h) => Granted::Hooks(h),
                None => {
                    let p = t.runs.pop_front()?;
                    self.waiting_runs -= 1;
                    Granted::Run(p)
                }
            };
            t.held += 1;
            if t.is_empty() {
                t.in_ring = false;
            } else {
                self.ring.push_back(owner.clone());
            }
            self.held += 1;
            if owner.is_some() {
                self.held_by_users += 1;
            }
            return Some((owner, granted));
        }
        None
    }

    /// A tenant out of the ring with nothing held is dropped, so a user
    /// who left costs nothing.
    fn forget_if_idle(&mut self, owner: &Owner) {
        if let Some(t) = self.tenants.get_mut(owner) {
            t.in_ring = false;
            if t.held == 0 && t.is_empty() {
                self.tenants.remove(owner);
            }
        }
    }

    /// `owner` gave back a slot.
    pub(super) fn release(&mut self, owner: &Owner) {
        let Some(t) = self.tenants.get_mut(owner) else {
            return;
        };
        if t.held == 0 {
            return;
        }
        t.held -= 1;
        self.held -= 1;
        if owner.is_some() {
            self.held_by_users -= 1;
        }
        if !t.in_ring {
            self.forget_if_idle(owner);
        }
    }

    /// Drops `owner`'s waiting runs for which `drop` says so; returns them.
    pub(super) fn remove_runs(
        &mut self,
        owner: &Owner,
        mut drop: impl FnMut(&Pending) -> bool,
    ) -> Vec<Pending> {
        let Some(t) = self.tenants.get_mut(owner) else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        let mut kept = VecDeque::with_capacity(t.runs.len());
        for p in t.runs.drain(..) {
            if drop(&p) {
                removed.push(p);
            } else {
                kept.push_back(p);
            }
        }
        t.runs = kept;
        self.waiting_runs -= removed.len();
        removed
    }

    /// The daemon stops: every waiting run and hook sequence, handed back.
    pub(super) fn drain(&mut self) -> (Vec<Pending>, Vec<AfterRun>) {
        let mut runs = Vec::new();
        let mut hooks = Vec::new();
        // In turn order, so hooks are reported in a stable order.
        for owner in self.ring.drain(..) {
            if let Some(t) = self.tenants.get_mut(&owner) {
                t.in_ring = false;
                hooks.extend(t.hooks.drain(..).map(|h| *h));
                runs.extend(t.runs.drain(..));
            }
        }
        self.tenants.retain(|_, t| t.held > 0);
        self.waiting_runs = 0;
        (runs, hooks)
    }

    /// Every waiting run, tenant by tenant.
    pub(super) fn runs(&self) -> impl Iterator<Item = &Pending> {
        self.tenants.values().flat_map(|t| t.runs.iter())
    }

    /// `owner`'s waiting runs.
    pub(super) fn runs_of(&self, owner: &Owner) -> impl Iterator<Item = &Pending> {
        self.tenants
            .get(owner)
            .into_iter()
            .flat_map(|t| t.runs.iter())
    }

    /// The waiting run `run` of `owner`, to note why it waits.
    pub(super) fn last_run_mut(&mut self, owner: &Owner) -> Option<&mut Pending> {
        self.tenants.get_mut(owner)?.runs.back_mut()
    }
}

/// The owner of a job, as a key of [`Shares`].
pub(super) fn owner_of_job(owner: Option<&str>) -> Owner {
    Tenant::from_owner(owner).user().map(Arc::from)
}

/// The owner of a one-shot (or anything keyed by a qualified name).
pub(super) fn owner_of_name(name: &str) -> Owner {
    Tenant::of(name).user().map(Arc::from)
}
