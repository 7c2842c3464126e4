//! The daemon's side of cluster mode. [`Node::start`] spawns two tasks on
//! the daemon's runtime, each with its own connection:
//!
//! - the **heartbeat** task registers the node (a new epoch per
//!   registration), renews its lease on the database clock every
//!   `heartbeat`, and keeps a local deadline on the monotonic clock from
//!   the *send* time of its last successful renewal: past it the node
//!   claims nothing and says so ([`NodeEvent::LeaseLost`]) without waiting for
//!   the socket. Renewal never queues behind a claim waiting on a job's row.
//! - the **main** task takes the daemon's commands one at a time
//!   (submissions first, from a channel of their own: a burst of claims
//!   never holds a submitter's answer; after each, one waiting command, so
//!   submissions never starve claims): claims
//!   (answered as [`NodeEvent::Claimed`]: the daemon's loop never waits on the
//!   database), run starts and ends (kept in a bounded backlog and written
//!   in order when the database accepts them, those that arrived together
//!   pipelined; an end the cluster no longer takes — the node was declared
//!   dead meanwhile — becomes a late report),
//!   and on every heartbeat tick the sweeper, due one-shots, retries and
//!   queued occurrences.
//!
//! - the **peers** task, on a third connection, looks at the other nodes
//!   once a heartbeat (their runs in progress, the runs that ended, every
//!   node's state) for the live views, and tells the daemon what changed
//!   ([`NodeEvent::Peers`]).
//!
//! Every ownership write is conditional on this node's live lease in the
//! same statement (the SQL in `sql/raw/`).
//!
//! | file | owns | not there |
//! |---|---|---|
//! | `mod.rs` | [`Node`], the daemon's handle, and its [`ClusterNode`] side; the state the two tasks share with it; the commands it sends the main task | any statement |
//! | `heartbeat.rs` | the heartbeat task: registration, renewal, the local deadline | anything sent on the main connection |
//! | `task.rs` | the main task: its state, its command loop, batching of commands that arrived together, the tick | what each command does |
//! | `claims.rs` | claims of occurrences and of runs decided here, pipelined when they arrive together | retries and one-shots the store hands out |
//! | `runs.rs` | run starts and ends: the write of a record, the backlog's flush (pipelined, then one at a time), late reports | the backlog's bounds (`crate::backlog`) |
//! | `sweeper.rs` | each tick's housekeeping: the sweeper, retries and queued occurrences any node may take | one-shots |
//! | `oneshots.rs` | one-shots: submission (a group commit), claiming due ones up to the free slots, when to poll next | one-shot retries (the store queues them) |
//! | `peers.rs` | the watch of the other nodes for the live views: one look a heartbeat, told when it changed | anything the daemon does with it |
//! | `audit.rs` | the audit log's entries to `rea.audit`: a bounded queue, a task and a connection of their own, trimming | the local `audit.jsonl` (the daemon's) |
//! | `jobs.rs` | the job definitions this node publishes and cluster-wide pauses | claims on the jobs' rows |
//! | `statements.rs` | the SQL text, the prepared statements, a statement's time limit, pipelining, the parameters shared by several statements | what any answer means |

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::claim::{ClaimOutcome, ClaimRequest};
use rea_core::oneshot::OneShot;
use rea_core::record::Record;
use rea_store::claims::{ClaimAnswer, OccurrenceClaims};
use rea_store::cluster::{AlertClaim, ClusterNode, Done, SubmitError};
use rea_store::cluster::{JobDef, NodeEvent, NodeHealth};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::settings::Settings;
use heartbeat::heartbeat_loop;
use oneshots::ONESHOT_BATCH;
use task::main_loop;

mod alerts;
pub(crate) mod audit;
mod claims;
mod heartbeat;
mod jobs;
mod oneshots;
pub(crate) mod peers;
mod runs;
mod statements;
mod sweeper;
mod task;

pub use statements::pipelined;

/// What the handle and the two tasks share, behind a mutex held for a
/// few assignments at a time (never across an await).
#[derive(Debug)]
struct Shared {
    epoch: Option<i64>,
    deadline: Option<Instant>,
    lease_live: bool,
    backlog: usize,
    dropped: u64,
    last_error: Option<(DateTime<Utc>, String)>,
    /// When the database last renewed the lease (sent at), or when the node
    /// started.
    renewed: Instant,
    stopping: bool,
    /// Slots the daemon has free for runs (`max_concurrent` less running,
    /// hooks and queued runs), as it last said, less the one-shots granted
    /// since that it had not yet taken.
    free_slots: usize,
    /// One-shots this node has granted to the daemon, ever: what the
    /// daemon has not yet taken still counts against its free slots.
    oneshots_granted: u64,
    /// The database's clock less this machine's, as last measured.
    clock_offset_ms: Option<i64>,
}

impl Shared {
    /// The epoch, if the lease is live by the local deadline.
    fn live_epoch(&self) -> Option<i64> {
        match (self.epoch, self.deadline) {
            (Some(e), Some(d)) if self.lease_live && Instant::now() < d => Some(e),
            _ => None,
        }
    }
}

enum Cmd {
    Claim(ClaimRequest),
    Record(Box<Record>),
    Publish {
        digest: String,
        jobs: Vec<JobDef>,
    },
    Submit {
        shot: Box<OneShot>,
        reply: Done<Result<(), SubmitError>>,
    },
    Pause {
        jobs: Option<Vec<String>>,
        paused: bool,
        reply: Done<Result<Vec<String>, String>>,
    },
    Leave {
        reply: oneshot::Sender<bool>,
    },
    Alert {
        job: String,
        kind: String,
        raised: bool,
        /// Raising `no_success_within`: its limit in ms.
        no_success_ms: Option<i64>,
        reply: Done<AlertClaim>,
    },
}

/// The daemon's handle on its cluster node.
pub struct Node {
    tx: mpsc::UnboundedSender<Cmd>,
    /// Submissions, apart: the main task takes them before any command
    /// waiting (a burst of claims never holds a submitter's answer). Each
    /// is a client waiting on the control socket, bounded there.
    submits: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Mutex<Shared>>,
    settings: Settings,
    /// Wakes the main task when slots free up while due one-shots wait.
    slots: Arc<tokio::sync::Notify>,
    /// The audit task's queue, and what it dropped (`audit.rs`).
    audit: mpsc::Sender<rea_core::audit::Entry>,
    audit_dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl Node {
    /// Starts the node's tasks on the current (tokio) runtime; events go
    /// to `events`.
    pub fn start(settings: Settings, events: mpsc::UnboundedSender<NodeEvent>) -> Node {
        let shared = Arc::new(Mutex::new(Shared {
            epoch: None,
            deadline: None,
            lease_live: false,
            backlog: 0,
            dropped: 0,
            last_error: None,
            renewed: Instant::now(),
            stopping: false,
            free_slots: ONESHOT_BATCH,
            oneshots_granted: 0,
            clock_offset_ms: None,
        }));
        let slots = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let (submits, submits_rx) = mpsc::unbounded_channel();
        tokio::spawn(heartbeat_loop(
            settings.clone(),
            shared.clone(),
            events.clone(),
        ));
        tokio::spawn(peers::peers_loop(
            settings.clone(),
            shared.clone(),
            events.clone(),
        ));
        tokio::spawn(main_loop(
            settings.clone(),
            shared.clone(),
            events,
            rx,
            submits_rx,
            slots.clone(),
        ));
        let (audit, audit_rx) = mpsc::channel(audit::QUEUE);
        let audit_dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        tokio::spawn(audit::audit_loop(
            settings.clone(),
            audit_rx,
            audit_dropped.clone(),
        ));
        Node {
            tx,
            submits,
            shared,
            settings,
            slots,
            audit,
            audit_dropped,
        }
    }
}

/// Claims go to the node's main task; answers come back as events.
struct Claims {
    tx: mpsc::UnboundedSender<Cmd>,
}

impl OccurrenceClaims for Claims {
    fn claim(&mut self, claim: &ClaimRequest) -> ClaimAnswer {
        match self.tx.send(Cmd::Claim(claim.clone())) {
            Ok(()) => ClaimAnswer::Later,
            Err(_) => {
                ClaimAnswer::Now(ClaimOutcome::Unavailable("the cluster node stopped".into()))
            }
        }
    }
}

impl ClusterNode for Node {
    fn cluster(&self) -> &str {
        &self.settings.cluster
    }

    fn node(&self) -> &str {
        &self.settings.node
    }

    /// How many more runs the daemon could start now, having taken
    /// `oneshots_taken` one-shots from [`NodeEvent::OneShot`] so far: due
    /// one-shots are claimed up to that many (the rest are left to other
    /// nodes; those granted but still on their way to the daemon count as
    /// taken), and a node that had to leave some behind asks again when
    /// slots free up.
    fn set_free_slots(&self, free: usize, oneshots_taken: u64) {
        let wake = {
            let mut s = lock(&self.shared);
            let in_flight = s.oneshots_granted.saturating_sub(oneshots_taken);
            let free = free.saturating_sub(usize::try_from(in_flight).unwrap_or(usize::MAX));
            let wake = s.free_slots == 0 && free > 0;
            s.free_slots = free;
            wake
        };
        if wake {
            self.slots.notify_one();
        }
    }

    /// The claims seam for the daemon.
    fn claims(&self) -> Box<dyn OccurrenceClaims> {
        Box::new(Claims {
            tx: self.tx.clone(),
        })
    }

    /// A history record of this node: `started` and final lines of runs
    /// the store granted (`cluster_run`) are written to the store, in
    /// order, through the backlog. Others are this node's own.
    fn record(&self, rec: &Record) {
        if rec.cluster_run.is_some() && rec.status.is_some() {
            let _ = self.tx.send(Cmd::Record(Box::new(rec.clone())));
        }
    }

    /// This node's job definitions (at start and after each reload): the
    /// store creates the jobs' rows and keeps the digests for `rea status`.
    fn publish(&self, digest: String, jobs: Vec<JobDef>) {
        let _ = self.tx.send(Cmd::Publish { digest, jobs });
    }

    /// Queues a one-shot in the store (any node may run it); the reply
    /// says when it is durable.
    fn submit(&self, shot: OneShot, reply: Done<Result<(), SubmitError>>) {
        let _ = self.submits.send(Cmd::Submit {
            shot: Box::new(shot),
            reply,
        });
    }

    /// Who tells an alert: decided on `rea.alerts` (`alerts.rs`).
    fn alert(
        &self,
        job: &str,
        kind: &str,
        raised: bool,
        no_success_within: Option<Duration>,
        reply: Done<AlertClaim>,
    ) {
        let _ = self.tx.send(Cmd::Alert {
            job: job.to_string(),
            kind: kind.to_string(),
            raised,
            no_success_ms: no_success_within.map(|d| d.as_millis().min(i64::MAX as u128) as i64),
            reply,
        });
    }

    /// Cluster-wide pause (`jobs` None: every job, and jobs first seen
    /// later) or resume; the reply lists the jobs that changed.
    fn pause(
        &self,
        jobs: Option<Vec<String>>,
        paused: bool,
        reply: Done<Result<Vec<String>, String>>,
    ) {
        let _ = self.tx.send(Cmd::Pause {
            jobs,
            paused,
            reply,
        });
    }

    /// Clean shutdown, once this node's runs have ended: flushes the
    /// backlog and frees the name (waits at most `limit`).
    fn leave(&self, limit: Duration) -> Pin<Box<dyn Future<Output = bool> + '_>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            if self.tx.send(Cmd::Leave { reply: tx }).is_err() {
                return false;
            }
            let left = tokio::time::timeout(limit, rx)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(false);
            if let Ok(mut s) = self.shared.lock() {
                s.stopping = true;
            }
            left
        })
    }

    /// The audit log's entries go to `rea.audit` through a bounded queue
    /// and a connection of their own.
    fn audit_sink(&self) -> Box<dyn rea_store::cluster::AuditSink> {
        Box::new(audit::Sink {
            tx: self.audit.clone(),
            dropped: self.audit_dropped.clone(),
        })
    }

    fn health(&self) -> NodeHealth {
        match self.shared.lock() {
            Ok(s) => NodeHealth {
                epoch: s.epoch,
                lease_live: s.live_epoch().is_some(),
                lease_age: s.renewed.elapsed(),
                lease_left: match (s.live_epoch(), s.deadline) {
                    (Some(_), Some(d)) => d.saturating_duration_since(Instant::now()),
                    _ => Duration::ZERO,
                },
                backlog: s.backlog,
                dropped: s.dropped,
                last_error: s.last_error.clone(),
                clock_offset_ms: s.clock_offset_ms,
            },
            Err(_) => NodeHealth::default(),
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn note_error(shared: &Mutex<Shared>, m: &str) {
    lock(shared).last_error = Some((Utc::now(), m.to_string()));
}
