//! Occurrence claims: the right to start one run of a scheduled occurrence.
//! On one machine the daemon's own lock on its state directory already
//! makes it the only scheduler, so [`LocalClaims`] grants every claim. A
//! shared backend (several rea nodes on one database) implements
//! [`OccurrenceClaims`] so that each occurrence is started by exactly one
//! node: the daemon asks before it starts a run and skips the run when the
//! claim is lost (another node has it; that is not a failure).

use chrono::{DateTime, Utc};
use rea_core::record::Trigger;

/// One run the daemon is about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The job's name (or the one-shot's id).
    pub job: &'a str,
    /// The occurrence (for retries: the original one).
    pub scheduled: DateTime<Utc>,
    pub attempt: u32,
    pub trigger: Trigger,
    /// The run id the daemon will use.
    pub run: &'a str,
}

/// What a claim came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This node starts the run.
    Won,
    /// Another node has this occurrence; do not start it.
    Lost,
}

/// Decides who starts an occurrence.
pub trait OccurrenceClaims: Send {
    fn claim(&mut self, claim: &Claim<'_>) -> std::io::Result<ClaimOutcome>;
}

/// A single node: every claim is won.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalClaims;

impl OccurrenceClaims for LocalClaims {
    fn claim(&mut self, _claim: &Claim<'_>) -> std::io::Result<ClaimOutcome> {
        Ok(ClaimOutcome::Won)
    }
}
