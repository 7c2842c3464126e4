//! The shared store's live side: what a daemon running as one node of a
//! cluster asks of it and hears from it. The daemon's loop holds a
//! `Box<dyn ClusterNode>` and never names the backend that implements it
//! (`rea_pg::Node` for PostgreSQL); the program chooses it once, at start.
//!
//! Nothing here blocks: a request is handed to the backend's own tasks
//! and its answer comes back later, either as an [`NodeEvent`] on the channel
//! the backend was started with, or through a [`Done`] callback called on
//! the backend's task (which must not block either: the daemon's callbacks
//! send a reply on a channel). No runtime is named (`.ci/layers`: no tokio
//! in rea-store); the backend brings its own.
//!
//! Errors and decisions that cross this seam are types ([`SubmitError`],
//! [`crate::claims::ClaimOutcome`]), never text to match.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::claim::Grant;
use rea_core::job::Overlap;
use rea_core::oneshot::OneShot;
use rea_core::record::{Record, Trigger};

use crate::claims::{ClaimOutcome, OccurrenceClaims};

/// What the cluster tells the daemon's loop.
#[derive(Debug, Clone)]
pub enum NodeEvent {
    /// The answer to a claim (`ClaimRequest::run`).
    Claimed { run: String, outcome: ClaimOutcome },
    /// The store handed this node a run it decided: a retry (of a failed
    /// run, or of one whose node died), or an occurrence that waited for
    /// its job's run (`overlap = "queue"`).
    Adopted {
        job: String,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        grant: Grant,
        /// A retry's: the failed run's parameters (None: the defaults).
        params: Option<rea_core::params::Values>,
    },
    /// A due one-shot, claimed by this node only.
    OneShot {
        shot: Box<OneShot>,
        attempt: u32,
        grant: Grant,
    },
    /// Stop the run holding this fence (another node replaced it).
    Stop { fence: i64 },
    /// The lease is gone (database unreachable past it, or this node was
    /// declared dead): nothing is claimed until [`NodeEvent::LeaseBack`].
    LeaseLost { why: String },
    /// The node holds a live lease (again).
    LeaseBack { epoch: i64 },
    /// What the store saw of the other nodes since it last looked (once a
    /// heartbeat): the live views' cluster-wide side.
    Peers(Box<PeerView>),
    /// Each job's last final run where another node ended it (skipped
    /// aside), oldest end first, read once when the node starts: the live
    /// views' last runs and failing jobs are the cluster's from the start,
    /// not from the first run another node ends.
    Seeded(Vec<SeedRun>),
    /// The daemon's clock ([`crate::clock::now`]) was corrected to the
    /// database's by this many milliseconds: the loop re-plans if it moved
    /// far (a step of the clock it schedules on).
    ClockCorrected { by_ms: i64 },
}

/// A job's last final run another node ended, as a node starting reads it
/// ([`NodeEvent::Seeded`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRun {
    pub last: Record,
    /// The job's failures since its last success, on every node (0 unless
    /// `last` failed; counted over its last 1,000 runs at most).
    pub streak: u32,
}

/// The other nodes as the store last saw them: the runs they have in
/// progress (all of them, up to [`PeerView::RUNNING_MAX`]: a run missing
/// from the next view has ended or was interrupted), the runs that ended
/// since the last view (each once, as a history record with the run's one
/// id), and every node's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerView {
    pub running: Vec<PeerRun>,
    /// Whether `running` was cut at [`PeerView::RUNNING_MAX`].
    pub running_cut: bool,
    pub ended: Vec<Record>,
    /// (node, state): `live`, `silent` (its lease ran out), `convicted`
    /// or `left`; this node included.
    pub nodes: Vec<(String, String)>,
}

impl PeerView {
    /// The most runs in progress of other nodes one view holds.
    pub const RUNNING_MAX: usize = 1000;
    /// The most ended runs one view holds (more ended since: the oldest
    /// are left out, and the next view goes on from there).
    pub const ENDED_MAX: usize = 1000;
}

/// A run in progress on another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRun {
    /// The run's one id (what its `rea trigger` printed).
    pub run: String,
    pub job: String,
    pub node: String,
    pub since: DateTime<Utc>,
    pub pid: Option<u32>,
}

/// How the node is doing, for `rea status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub epoch: Option<i64>,
    pub lease_live: bool,
    /// Since the database last renewed the lease (since the node started
    /// when it never did): past the lease, the node is not scheduling.
    pub lease_age: Duration,
    /// Until the lease ends by the node's own (monotonic) deadline; zero
    /// without a live lease.
    pub lease_left: Duration,
    /// Run starts and ends waiting for the database.
    pub backlog: usize,
    /// Dropped because the backlog was full.
    pub dropped: u64,
    /// The last error from the database, and when (it stays until the
    /// next one: whether the node is fine now is `lease_live`).
    pub last_error: Option<(DateTime<Utc>, String)>,
    /// How far the database's clock is from this machine's (database −
    /// machine, milliseconds, corrected for the round trip), as the last
    /// heartbeat measured it; None before the first.
    pub clock_offset_ms: Option<i64>,
}

/// A job as this node defines it, for the store.
#[derive(Debug, Clone)]
pub struct JobDef {
    pub name: String,
    /// Digest of the job's definition (nodes whose definitions differ are
    /// flagged by `rea status`).
    pub digest: String,
    pub overlap: Overlap,
}

/// Why a one-shot was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitError {
    /// A one-shot of that name is already pending (in the store, or
    /// earlier in the same batch).
    Duplicate { id: String },
    /// The store could not take it (the message says why).
    Refused(String),
    /// The store did not confirm in time (no answer, a broken connection
    /// after the request was sent): it may have been queued all the same,
    /// so the submitter is told so, never that it failed.
    Unconfirmed(String),
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::Duplicate { id } => {
                write!(f, "a one-shot named {id:?} is already pending")
            }
            SubmitError::Refused(why) => f.write_str(why),
            SubmitError::Unconfirmed(why) => write!(
                f,
                "the store did not confirm it ({why}): it may have been queued all the same"
            ),
        }
    }
}

impl std::error::Error for SubmitError {}

/// Where a node sends the audit log's entries (the daemon's audit writer
/// calls it from its own thread, never the loop). It must not block: an
/// entry the store cannot take now is the backend's to queue, bounded, or
/// to drop and count.
pub trait AuditSink: Send {
    fn record(&self, entry: &rea_core::audit::Entry);
}

/// Where an answer goes: called once, on the backend's task.
pub type Done<T> = Box<dyn FnOnce(T) + Send>;

/// One node of a cluster, as the daemon's loop uses it. Every method
/// returns at once; the work happens on the backend's tasks.
pub trait ClusterNode: Send {
    /// The cluster's name and this node's (for `rea status`, metrics).
    fn cluster(&self) -> &str;
    fn node(&self) -> &str;
    /// The claims seam: each claim is answered by an [`NodeEvent::Claimed`].
    fn claims(&self) -> Box<dyn OccurrenceClaims>;
    /// How many more runs the daemon could start now, having taken
    /// `oneshots_taken` one-shots from [`NodeEvent::OneShot`] so far.
    fn set_free_slots(&self, free: usize, oneshots_taken: u64);
    /// A history record of this node (the store keeps those of the runs
    /// it granted).
    fn record(&self, rec: &Record);
    /// This node's job definitions (at start and after each reload).
    fn publish(&self, digest: String, jobs: Vec<JobDef>);
    /// Queues a one-shot cluster-wide; `done` hears when it is durable.
    fn submit(&self, shot: OneShot, done: Done<Result<(), SubmitError>>);
    /// Cluster-wide pause (`jobs` None: every job, and jobs first seen
    /// later) or resume; `done` hears the jobs that changed.
    fn pause(
        &self,
        jobs: Option<Vec<String>>,
        paused: bool,
        done: Done<Result<Vec<String>, String>>,
    );
    /// Clean shutdown once this node's runs have ended: flushes what the
    /// store has not taken yet and frees the name (waits at most `limit`;
    /// says whether it got that far).
    fn leave(&self, limit: Duration) -> Pin<Box<dyn Future<Output = bool> + '_>>;
    fn health(&self) -> NodeHealth;
    /// Where this node writes audit entries to the store.
    fn audit_sink(&self) -> Box<dyn AuditSink>;
    /// Whether this node tells `job`'s alert `kind` being raised (or
    /// resolved): the store decides, so that each alert is told by one
    /// node. `no_success_within` (raising that kind): a success of the job
    /// on any node within it means there is nothing to tell. A store that
    /// keeps no alerts answers [`AlertClaim::Mine`].
    fn alert(
        &self,
        job: &str,
        kind: &str,
        raised: bool,
        no_success_within: Option<Duration>,
        done: Done<AlertClaim>,
    ) {
        let _ = (job, kind, raised, no_success_within);
        done(AlertClaim::Mine);
    }
}

/// The store's answer to [`ClusterNode::alert`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertClaim {
    /// This node tells it.
    Mine,
    /// Another node raised it (named), or it is already resolved (None).
    Elsewhere(Option<String>),
    /// The store did not answer: the node tells it itself (a duplicate is
    /// better than silence).
    Unavailable(String),
}
