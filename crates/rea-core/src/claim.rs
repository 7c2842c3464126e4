//! The vocabulary of occurrence claims (several rea nodes on one shared
//! store): what a node asks before it starts a run, and what the store
//! answers. Plain data; the engine speaks it in cluster mode
//! (`Action::Claim` out, `Engine::claimed` in), the store behind
//! `rea_store::claims::OccurrenceClaims` answers it, the daemon carries the
//! answer back to the engine as an event (a database round trip never
//! blocks the daemon's loop).
//!
//! In cluster mode the overlap and pause decisions are the store's: it
//! takes them on the job's shared row, so every node sees the same runs.

use chrono::{DateTime, Utc};

use crate::backoff::RetryPolicy;
use crate::job::Overlap;
use crate::record::Trigger;

/// Whether a claim asks to run the occurrence or only to record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// Run it (if the overlap and pause decisions allow).
    Run,
    /// Advance the job's mark past it and record it as missed
    /// (`catch_up = "none"`), without running it.
    Missed,
}

/// One run a node asks to start.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    /// The engine's id for the run (the answer names it).
    pub run: String,
    /// The job's name.
    pub job: String,
    /// The occurrence (for a manual, dependency or reboot run: now).
    pub scheduled: DateTime<Utc>,
    pub attempt: u32,
    /// `schedule` and `catch_up` claims advance the job's high-water mark
    /// (exactly one node wins each occurrence); `manual`, `dependency` and
    /// `reboot` runs were decided on this node and only take the overlap
    /// decision and a fence.
    pub trigger: Trigger,
    pub overlap: Overlap,
    pub mode: ClaimMode,
    /// The job's retry policy (the store queues the retry of a run whose
    /// node dies, so it must know it).
    pub retry: Option<RetryPolicy>,
    /// A `missed` claim: how many occurrences it stands for (it is the
    /// newest of them; the store records the count). 1 for a run.
    pub count: u64,
}

/// A started run's identity in the shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The store's id of the run (what `rea history` shows cluster-wide).
    pub run_id: i64,
    /// Cluster-wide increasing token, exported to the job as `REA_FENCE`:
    /// a job that writes somewhere can reject a write carrying a smaller
    /// fence than one it has seen (a stale run on a node that lost its
    /// lease).
    pub fence: i64,
}

/// What a claim came to.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// This node starts the run. `prev_scheduled` is the job's mark this
    /// claim replaced: occurrences between it and this one were missed.
    Started {
        grant: Grant,
        prev_scheduled: Option<DateTime<Utc>>,
    },
    /// This node had already claimed it (a retried request whose first
    /// answer was lost): start it as if just won.
    AlreadyYours { grant: Grant },
    /// Won, and recorded as skipped: the job is paused, or its previous
    /// run is still running somewhere (overlap).
    Skipped { reason: String },
    /// Won, and waiting in the store for the job's running run to end
    /// (`overlap = "queue"`); whichever node sees it free starts it.
    Queued,
    /// Won, and recorded as missed (`ClaimMode::Missed`).
    Missed,
    /// Another node claimed this occurrence or a newer one: not a failure.
    Lost,
    /// This node holds no live lease (the database is unreachable, or it
    /// was declared dead): nothing is started; the occurrence goes through
    /// the job's `catch_up` once the node is back.
    NoLease,
    /// The store could not answer (an error): as `NoLease`.
    Unavailable(String),
    /// The occurrence is still in the future on the store's clock (this
    /// node's clock is ahead of it by more than the store tolerates):
    /// nothing was decided; the engine asks again at its instant.
    Early,
}

impl ClaimOutcome {
    /// The run to start, if this node starts one.
    pub fn grant(&self) -> Option<Grant> {
        match self {
            ClaimOutcome::Started { grant, .. } | ClaimOutcome::AlreadyYours { grant } => {
                Some(*grant)
            }
            _ => None,
        }
    }

    /// A short name for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClaimOutcome::Started { .. } => "started",
            ClaimOutcome::AlreadyYours { .. } => "already_yours",
            ClaimOutcome::Skipped { .. } => "skipped",
            ClaimOutcome::Queued => "queued",
            ClaimOutcome::Missed => "missed",
            ClaimOutcome::Lost => "lost",
            ClaimOutcome::NoLease => "no_lease",
            ClaimOutcome::Unavailable(_) => "unavailable",
            ClaimOutcome::Early => "early",
        }
    }
}

/// What a node does with its running runs when it loses its lease (the
/// database is unreachable past the lease, or the node was frozen and
/// declared dead): another node may then retry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLeaseLost {
    /// Let them finish (default); a retry elsewhere may overlap them, told
    /// apart by `REA_FENCE`.
    #[default]
    Keep,
    /// Terminate them (as on timeout).
    Kill,
}
