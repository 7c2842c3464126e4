//! Finished runs' hook sequences holding a slot. A hook sequence (every
//! hook of one finished run, one after the other) takes one of the
//! `max_concurrent` slots of its run's tenant, ahead of that tenant's
//! waiting runs (it waits in `shares.rs`); the daemon reports it done by
//! its id, and the slot goes back to its tenant.

use std::collections::BTreeMap;

use super::shares::Owner;

#[derive(Debug, Default)]
pub(super) struct HookQueue {
    /// Started and not yet reported done (each holds a slot of its owner).
    running: BTreeMap<u64, Owner>,
    /// The last id handed out.
    counter: u64,
}

impl HookQueue {
    /// A sequence of `owner` starts: its id; it holds a slot from now.
    pub(super) fn start(&mut self, owner: Owner) -> u64 {
        self.counter += 1;
        self.running.insert(self.counter, owner);
        self.counter
    }

    /// `id` is done: the owner of the slot it held, None if it was not
    /// running.
    pub(super) fn done(&mut self, id: u64) -> Option<Owner> {
        self.running.remove(&id)
    }

    /// Sequences holding a slot.
    pub(super) fn running(&self) -> usize {
        self.running.len()
    }
}
