//! Who decides whether a run this engine wants to start does start.
//!
//! [`Decisions::Engine`]: the engine itself applies the overlap policy,
//! pauses and catch-up (one daemon on one state directory, whose lock
//! already makes it the only scheduler). [`Decisions::Store`]: a store that
//! several nodes share takes those decisions on the job's shared row; the
//! engine asks it about every run (`Action::Claim`) and carries out the
//! answer (`Engine::claimed`, in `cluster.rs`). The store's side keeps its
//! own state here ([`Claims`]); nothing else in the engine knows which
//! arbiter it has but the four places that route a run to it: a trigger
//! and a due run (`admission`), a due occurrence and a catch-up
//! (`occurrences`).
//!
//! Facts about a run that the store granted (its `grant`, the record's
//! `cluster_run`) are the run's own: a granted run is retried or put back
//! by the store whatever the arbiter, so completion asks the run, not the
//! mode.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::Pending;

/// Who takes the decisions to start runs (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decisions {
    /// This engine (local mode; the default).
    #[default]
    Engine,
    /// A store several nodes share (cluster mode).
    Store,
}

/// The arbiter in force, with the store's side's state.
#[derive(Debug)]
pub(super) enum Arbiter {
    Engine,
    Store(Claims),
}

impl Arbiter {
    pub(super) fn new(decisions: Decisions) -> Arbiter {
        match decisions {
            Decisions::Engine => Arbiter::Engine,
            Decisions::Store => Arbiter::Store(Claims::default()),
        }
    }

    /// The store's claims (None: the engine decides, and has none).
    pub(super) fn claims(&mut self) -> Option<&mut Claims> {
        match self {
            Arbiter::Store(c) => Some(c),
            Arbiter::Engine => None,
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        match self {
            Arbiter::Store(c) => c.asked.len(),
            Arbiter::Engine => 0,
        }
    }
}

/// What the engine has asked the store and not heard back, and what it
/// could not ask.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Runs asked of the store, not answered yet, with the occurrences a
    /// `missed` claim stands for.
    asked: HashMap<String, (Pending, u64)>,
    /// Per job, the oldest and the newest occurrence no node could claim
    /// from here (no lease), for its `catch_up` once the node is back: the
    /// schedule gives those between (bounded, without a list).
    parked: BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)>,
    /// `catch_up = "all"`: per job, the caught-up occurrences still to
    /// claim, oldest first, one after the other (each once the previous
    /// one's run has ended here or the store decided it otherwise), so
    /// they run in turn whatever the job's overlap policy. Present while
    /// one is undecided; the job's occurrences due meanwhile join the
    /// queue (claimed before them, they would move the store's mark past
    /// the rest, which could then not be claimed).
    pub(super) catching_up: HashMap<String, std::collections::VecDeque<DateTime<Utc>>>,
}

impl Claims {
    pub(super) fn asked(&mut self, p: Pending, count: u64) {
        self.asked.insert(p.run.clone(), (p, count.max(1)));
    }

    /// The claim of `run`, now answered.
    pub(super) fn answered(&mut self, run: &str) -> Option<(Pending, u64)> {
        self.asked.remove(run)
    }

    /// `at` of `job` could not be claimed: the newest such occurrence is
    /// kept for the job's catch-up.
    pub(super) fn park(&mut self, job: &str, at: DateTime<Utc>) {
        let (oldest, newest) = self.parked.get(job).copied().unwrap_or((at, at));
        self.parked
            .insert(job.to_string(), (oldest.min(at), newest.max(at)));
    }

    /// Occurrences parked past `now` are forgotten (they were parked on a
    /// clock that was ahead: they have not happened).
    pub(super) fn forget_after(&mut self, now: DateTime<Utc>) {
        self.parked.retain(|_, (oldest, _)| *oldest <= now);
        for (_, newest) in self.parked.values_mut() {
            *newest = (*newest).min(now);
        }
    }

    pub(super) fn any_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    pub(super) fn take_parked(&mut self) -> BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)> {
        std::mem::take(&mut self.parked)
    }

    #[cfg(test)]
    pub(super) fn parked(&self) -> &BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)> {
        &self.parked
    }
}
