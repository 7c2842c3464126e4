//! Finished runs' hooks waiting for a slot and those holding one. A hook
//! sequence (every hook of one finished run, one after the other) takes one
//! of the `max_concurrent` slots ahead of waiting runs; the daemon reports
//! it done by its id.

use std::collections::{BTreeSet, VecDeque};

use super::AfterRun;

#[derive(Debug, Default)]
pub(super) struct HookQueue {
    /// Waiting for a slot, in the order the runs ended.
    ready: VecDeque<AfterRun>,
    /// Started and not yet reported done (each holds a slot).
    running: BTreeSet<u64>,
    /// The last id handed out.
    counter: u64,
}

impl HookQueue {
    pub(super) fn push(&mut self, after: AfterRun) {
        self.ready.push_back(after);
    }

    /// The next sequence to start, with its id; it holds a slot from now.
    pub(super) fn start_next(&mut self) -> Option<(u64, AfterRun)> {
        let after = self.ready.pop_front()?;
        self.counter += 1;
        self.running.insert(self.counter);
        Some((self.counter, after))
    }

    /// `id` is done; false if it was not running.
    pub(super) fn done(&mut self, id: u64) -> bool {
        self.running.remove(&id)
    }

    /// Sequences holding a slot.
    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// Those never started (the daemon stops): handed back.
    pub(super) fn drain_waiting(&mut self) -> impl Iterator<Item = AfterRun> + '_ {
        self.ready.drain(..)
    }
}
