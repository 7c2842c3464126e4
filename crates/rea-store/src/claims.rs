//! Occurrence claims: the right to start one run, asked of a store that
//! several rea nodes share (cluster mode). On one machine there is nothing
//! to ask: the daemon's lock on its state directory already makes it the
//! only scheduler, and its engine takes the overlap and pause decisions
//! itself (local mode has no claims at all, and is unchanged by them).
//!
//! In cluster mode the engine emits a [`ClaimRequest`] for every run it
//! would start; the daemon hands it to [`OccurrenceClaims::claim`]. A
//! database round trip must never block the daemon's loop, so a backend
//! may answer [`ClaimAnswer::Later`] and deliver the [`ClaimOutcome`] as an
//! event that the loop feeds to `Engine::claimed`. The outcome carries the
//! store's decisions: started here (run id, fence, the mark it replaced),
//! skipped (paused, overlap), queued, missed, lost to another node, already
//! this node's (a retried request), or no lease.

pub use rea_core::claim::{ClaimMode, ClaimOutcome, ClaimRequest, Grant, OnLeaseLost};

/// When the answer to a claim comes.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAnswer {
    /// Decided at once.
    Now(ClaimOutcome),
    /// The backend delivers it later, as an event of the daemon's loop
    /// naming `ClaimRequest::run`.
    Later,
}

/// Decides who starts a run, cluster-wide.
pub trait OccurrenceClaims: Send {
    fn claim(&mut self, claim: &ClaimRequest) -> ClaimAnswer;
}
