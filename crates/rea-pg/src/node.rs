//! The daemon's side of cluster mode. [`Node::start`] spawns two tasks on
//! the daemon's runtime, each with its own connection:
//!
//! - the **heartbeat** task registers the node (a new epoch per
//!   registration), renews its lease on the database clock every
//!   `heartbeat`, and keeps a local deadline on the monotonic clock from
//!   the *send* time of its last successful renewal: past it the node
//!   claims nothing and says so ([`NodeEvent::LeaseLost`]) without waiting for
//!   the socket. Renewal never queues behind a claim waiting on a job's row.
//! - the **main** task takes the daemon's commands one at a time: claims
//!   (answered as [`NodeEvent::Claimed`]: the daemon's loop never waits on the
//!   database), run starts and ends (kept in a bounded backlog and written
//!   in order when the database accepts them, those that arrived together
//!   pipelined; an end the cluster no longer takes — the node was declared
//!   dead meanwhile — becomes a late report),
//!   and on every heartbeat tick the sweeper, due one-shots, retries and
//!   queued occurrences.
//!
//! Every ownership write is conditional on this node's live lease in the
//! same statement (the SQL in `sql/raw/`).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_core::backoff::RetryPolicy;
use rea_core::claim::{ClaimMode, ClaimOutcome, ClaimRequest, Grant};
use rea_core::job::Overlap;
use rea_core::oneshot::OneShot;
use rea_core::record::{Record, RunStatus, Trigger};
use rea_store::claims::{ClaimAnswer, OccurrenceClaims};
use rea_store::cluster::{ClusterNode, Done, SubmitError};
use rea_store::cluster::{JobDef, NodeEvent, NodeHealth};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};
use tracing::{error, info, warn};

use crate::backlog::{Backlog, Weighed};
use crate::settings::{error_text, Settings};

const CLAIM: &str = include_str!("../sql/raw/claim.sql");
const ADOPT: &str = include_str!("../sql/raw/adopt.sql");
const HEARTBEAT: &str = include_str!("../sql/raw/heartbeat.sql");
const RUN_STARTED: &str = include_str!("../sql/raw/run_started.sql");
const RUN_ENDED: &str = include_str!("../sql/raw/run_ended.sql");
const LATE_REPORT: &str = include_str!("../sql/raw/late_report.sql");
const LEAVE: &str = include_str!("../sql/raw/leave.sql");
const CLAIM_ONESHOTS: &str = include_str!("../sql/raw/claim_oneshots.sql");
const CLAIM_RETRY: &str = include_str!("../sql/raw/claim_retry.sql");
const PROMOTE_QUEUED: &str = include_str!("../sql/raw/promote_queued.sql");
const SUBMIT_ONESHOTS: &str = include_str!("../sql/raw/submit_oneshots.sql");

const RUN_OUTPUT: &str = include_str!("../sql/raw/run_output.sql");
const NEXT_ONESHOT_DUE: &str = include_str!("../sql/raw/next_oneshot_due.sql");

/// Run starts and ends sent together by one flush of the backlog.
const FLUSH_BATCH: usize = 64;

/// A claim more than this in the database clock's future is refused
/// (`early`); the node asks again.
const MAX_EARLY_MS: i32 = 1000;
/// Most one-shots taken by one poll (fewer when the daemon has fewer free
/// slots: what a node cannot start is left to the others).
const ONESHOT_BATCH: usize = 256;
/// Submissions made durable by one statement (those that reached the node
/// together: a group commit).
const SUBMIT_BATCH: usize = 4096;

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
}

/// The daemon's handle on its cluster node.
pub struct Node {
    tx: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Mutex<Shared>>,
    settings: Settings,
    /// Wakes the main task when slots free up while due one-shots wait.
    slots: Arc<tokio::sync::Notify>,
}

/// A one-shot to queue and where to say whether it is durable.
type Submission = (Box<OneShot>, Done<Result<(), SubmitError>>);

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
        }));
        let slots = Arc::new(tokio::sync::Notify::new());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(heartbeat_loop(
            settings.clone(),
            shared.clone(),
            events.clone(),
        ));
        tokio::spawn(main_loop(
            settings.clone(),
            shared.clone(),
            events,
            rx,
            slots.clone(),
        ));
        Node {
            tx,
            shared,
            settings,
            slots,
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
        let _ = self.tx.send(Cmd::Submit {
            shot: Box::new(shot),
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

/// `e` on the way out of a statement: the text for the log.
fn db(e: tokio_postgres::Error) -> String {
    error_text(&e)
}

async fn within<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(db),
        Err(_) => Err(format!(
            "the cluster database did not answer within {} ms",
            limit.as_millis()
        )),
    }
}

// ---- heartbeat -----------------------------------------------------------

async fn heartbeat_loop(
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
) {
    let io = (s.lease / 2).max(Duration::from_millis(200));
    // Renewal is sent at t0; the lease ends at the database's
    // clock_timestamp() + lease, after t0 — so t0 + lease, less a margin
    // for our own scheduling, is a deadline the node can keep alone.
    let margin = s.heartbeat / 2;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut client: Option<(Client, Statement)> = None;
    loop {
        if lock(&shared).stopping {
            return;
        }
        let t0 = Instant::now();
        if client.is_none() {
            match connect_heartbeat(&s).await {
                Ok(c) => client = Some(c),
                Err(m) => {
                    warn!("cluster: {m}");
                    note_error(&shared, &m);
                }
            }
        }
        if let Some((c, hb)) = &client {
            let epoch = lock(&shared).epoch;
            let result = match epoch {
                None => register(c, &s, &hostname, io)
                    .await
                    .map(|r| r.map(|e| (e, Vec::new()))),
                Some(epoch) => within(io, c.query_opt(hb, &[&s.cluster, &s.node, &epoch]))
                    .await
                    .map(|row| {
                        row.map(|row| {
                            let fences: Option<Vec<i64>> = row.get(3);
                            (epoch, fences.unwrap_or_default())
                        })
                    }),
            };
            match result {
                Ok(Some((epoch, fences))) => {
                    let back = {
                        let mut sh = lock(&shared);
                        let was_live = sh.live_epoch().is_some();
                        sh.epoch = Some(epoch);
                        sh.deadline = Some(t0 + s.lease.saturating_sub(margin));
                        sh.renewed = t0;
                        sh.lease_live = true;
                        !was_live
                    };
                    if back {
                        info!(epoch, node = s.node.as_str(), "cluster: lease held");
                        let _ = events.send(NodeEvent::LeaseBack { epoch });
                    }
                    for fence in fences {
                        let _ = events.send(NodeEvent::Stop { fence });
                    }
                }
                Ok(None) if epoch.is_some() => {
                    // Zero rows: this epoch was declared dead (or replaced).
                    let was_live = {
                        let mut sh = lock(&shared);
                        let was = sh.lease_live;
                        sh.epoch = None;
                        sh.lease_live = false;
                        was
                    };
                    error!(
                        node = s.node.as_str(),
                        "cluster: this node was declared dead by the cluster (its lease ended); its runs are recorded as interrupted elsewhere; registering again"
                    );
                    if was_live {
                        let _ = events.send(NodeEvent::LeaseLost {
                            why: "this node was declared dead by the cluster".into(),
                        });
                    }
                    continue;
                }
                Ok(None) => {
                    // The name is held by a live node on another host.
                }
                Err(m) => {
                    warn!("cluster heartbeat: {m}");
                    note_error(&shared, &m);
                    client = None;
                }
            }
        }
        let lost = {
            let mut sh = lock(&shared);
            let expired = sh.lease_live && sh.deadline.is_some_and(|d| Instant::now() >= d);
            if expired {
                sh.lease_live = false;
            }
            expired
        };
        if lost {
            error!(
                node = s.node.as_str(),
                "cluster: lease not renewed in time (database unreachable?); no scheduled run starts until it is"
            );
            let _ = events.send(NodeEvent::LeaseLost {
                why: "the lease could not be renewed in time".into(),
            });
        }
        let next = t0 + s.heartbeat;
        tokio::time::sleep_until(next.max(Instant::now() + Duration::from_millis(20))).await;
    }
}

async fn connect_heartbeat(s: &Settings) -> Result<(Client, Statement), String> {
    let c = s.connect("rea heartbeat").await?;
    crate::migrate(&c, &s.node).await?;
    let hb = c.prepare(HEARTBEAT).await.map_err(db)?;
    Ok((c, hb))
}

/// Registers the node: Some(epoch), or None if the name is held by a live
/// node of another host (logged).
async fn register(
    c: &Client,
    s: &Settings,
    hostname: &str,
    io: Duration,
) -> Result<Option<i64>, String> {
    let lease_ms = s.lease.as_millis().min(i32::MAX as u128) as i32;
    let heartbeat_ms = s.heartbeat.as_millis().min(i32::MAX as u128) as i32;
    let pid = std::process::id() as i32;
    let row = within(
        io,
        c.query_one(
            "select outcome, epoch from rea.register($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &s.cluster,
                &s.node,
                &s.host_id,
                &lease_ms,
                &heartbeat_ms,
                &hostname,
                &pid,
                &env!("CARGO_PKG_VERSION"),
            ],
        ),
    )
    .await?;
    let outcome: String = row.get(0);
    if outcome == "registered" {
        let epoch: i64 = row.get(1);
        info!(
            node = s.node.as_str(),
            epoch,
            cluster = s.cluster.as_str(),
            "cluster: node registered"
        );
        Ok(Some(epoch))
    } else {
        warn!(
            node = s.node.as_str(),
            "cluster: the node name {:?} is held by a live node on another machine; waiting for it to leave or be declared dead",
            s.node
        );
        Ok(None)
    }
}

// ---- main task -------------------------------------------------------------

struct Stmts {
    claim: Statement,
    adopt: Statement,
    run_started: Statement,
    run_ended: Statement,
    late_report: Statement,
    claim_oneshots: Statement,
    claim_retry: Statement,
    promote_queued: Statement,
    submit_oneshots: Statement,
    run_output: Statement,
    next_oneshot_due: Statement,
}

/// A write of this node's, waiting in order.
enum Write {
    Started {
        run_id: i64,
        pid: i32,
        detail: Value,
    },
    Ended {
        run_id: i64,
        /// As the statements take it (`RunStatus::as_str`).
        status: &'static str,
        exit_code: Option<i32>,
        signal: Option<i32>,
        reason: Option<String>,
        detail: Value,
        output: Option<(String, i64)>,
        retry_delay_ms: Option<i64>,
    },
}

/// A statement parameter.
type P<'a> = &'a (dyn ToSql + Sync);

impl Weighed for Write {
    fn weight(&self) -> usize {
        let detail = |d: &Value| d.to_string().len();
        match self {
            Write::Started { detail: d, .. } => std::mem::size_of::<Write>() + detail(d),
            Write::Ended {
                detail: d,
                output,
                reason,
                ..
            } => {
                std::mem::size_of::<Write>()
                    + detail(d)
                    + output.as_ref().map_or(0, |(o, _)| o.len())
                    + reason.as_ref().map_or(0, String::len)
            }
        }
    }
}

impl Write {
    fn run_id(&self) -> i64 {
        match self {
            Write::Started { run_id, .. } | Write::Ended { run_id, .. } => *run_id,
        }
    }

    /// The statement that records it.
    fn statement<'s>(&self, st: &'s Stmts) -> &'s Statement {
        match self {
            Write::Started { .. } => &st.run_started,
            Write::Ended { .. } => &st.run_ended,
        }
    }

    /// That statement's parameters, for the node `cluster`/`node` in `epoch`.
    fn params<'a>(&'a self, cluster: &'a String, node: &'a String, epoch: &'a i64) -> Vec<P<'a>> {
        match self {
            Write::Started {
                run_id,
                pid,
                detail,
            } => vec![cluster, node, epoch, run_id, pid, detail],
            Write::Ended {
                run_id,
                status,
                exit_code,
                signal,
                reason,
                detail,
                retry_delay_ms,
                ..
            } => vec![
                cluster,
                node,
                epoch,
                run_id,
                status,
                exit_code,
                signal,
                reason,
                detail,
                retry_delay_ms,
            ],
        }
    }
}

struct Main {
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
    conn: Option<(Client, Stmts)>,
    io: Duration,
    backlog: Backlog<Write>,
    /// The epoch under which each granted run was claimed (its writes must
    /// name it: a later epoch does not own it).
    run_epochs: HashMap<i64, i64>,
    config: Option<(String, Vec<JobDef>)>,
    published: Option<i64>,
    /// When to poll for due one-shots before the next tick: at once (the
    /// last poll took a full batch), or at the earliest due one-shot.
    oneshot_poll: Option<Instant>,
}

async fn main_loop(
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    slots: Arc<tokio::sync::Notify>,
) {
    let io = s.lease.max(Duration::from_millis(500));
    let mut tick = tokio::time::interval(s.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut m = Main {
        s,
        shared,
        events,
        conn: None,
        io,
        backlog: Backlog::new(),
        run_epochs: HashMap::new(),
        config: None,
        published: None,
        oneshot_poll: None,
    };
    loop {
        // Due one-shots are polled between ticks only while this node has
        // free slots.
        let poll = m.oneshot_poll.filter(|_| lock(&m.shared).free_slots > 0);
        tokio::select! {
            // Commands (claims above all) before the tick's housekeeping.
            biased;
            cmd = rx.recv() => match cmd {
                None => return,
                Some(Cmd::Claim(req)) => {
                    // Claims that arrived together go out pipelined.
                    let (batch, next) = gather(&mut rx, req, 64, |c| match c {
                        Cmd::Claim(r) => Ok(r),
                        other => Err(Box::new(other)),
                    });
                    m.claims(batch).await;
                    if let Some(cmd) = next {
                        m.handle(cmd).await;
                    }
                }
                Some(Cmd::Submit { shot, reply }) => {
                    // Submissions that arrived together are made durable
                    // by one statement (one commit, one WAL flush).
                    let (batch, next) = gather(&mut rx, (shot, reply), SUBMIT_BATCH, |c| match c {
                        Cmd::Submit { shot, reply } => Ok((shot, reply)),
                        other => Err(Box::new(other)),
                    });
                    m.submit(batch).await;
                    if let Some(cmd) = next {
                        m.handle(cmd).await;
                    }
                }
                Some(Cmd::Record(rec)) => {
                    // Starts and ends that arrived together are written
                    // pipelined (in order: a run's start before its end).
                    let (batch, next) = gather(&mut rx, rec, FLUSH_BATCH, |c| match c {
                        Cmd::Record(rec) => Ok(rec),
                        other => Err(Box::new(other)),
                    });
                    let mut any = false;
                    for rec in &batch {
                        any |= m.enqueue(rec);
                    }
                    if any {
                        m.flush().await;
                    }
                    if let Some(cmd) = next {
                        m.handle(cmd).await;
                    }
                }
                Some(cmd) => m.handle(cmd).await,
            },
            _ = tick.tick() => m.tick().await,
            () = sleep_until_opt(poll), if poll.is_some() => m.poll_oneshots().await,
            // Slots free again: the next turn arms the due one-shots' poll
            // (if any are due: nothing to ask otherwise).
            () = slots.notified() => {}
        }
    }
}

/// `first` and the commands of its kind already waiting behind it (at most
/// `max` in all), to be sent together; and the first command of another
/// kind, which ends the batch and is handled after it.
fn gather<T>(
    rx: &mut mpsc::UnboundedReceiver<Cmd>,
    first: T,
    max: usize,
    same: impl Fn(Cmd) -> Result<T, Box<Cmd>>,
) -> (Vec<T>, Option<Cmd>) {
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv().map(&same) {
            Ok(Ok(t)) => batch.push(t),
            Ok(Err(other)) => return (batch, Some(*other)),
            Err(_) => break,
        }
    }
    (batch, None)
}

impl Main {
    fn live_epoch(&self) -> Option<i64> {
        lock(&self.shared).live_epoch()
    }

    fn fail(&mut self, m: &str) {
        warn!("cluster: {m}");
        note_error(&self.shared, m);
        self.conn = None;
    }

    async fn conn(&mut self) -> Result<&(Client, Stmts), String> {
        if self.conn.is_none() {
            let c = self.s.connect("rea node").await?;
            let p = |sql: &'static str| {
                let c = &c;
                async move { c.prepare(sql).await.map_err(db) }
            };
            let stmts = Stmts {
                claim: p(CLAIM).await?,
                adopt: p(ADOPT).await?,
                run_started: p(RUN_STARTED).await?,
                run_ended: p(RUN_ENDED).await?,
                late_report: p(LATE_REPORT).await?,
                claim_oneshots: p(CLAIM_ONESHOTS).await?,
                claim_retry: p(CLAIM_RETRY).await?,
                promote_queued: p(PROMOTE_QUEUED).await?,
                submit_oneshots: p(SUBMIT_ONESHOTS).await?,
                run_output: p(RUN_OUTPUT).await?,
                next_oneshot_due: p(NEXT_ONESHOT_DUE).await?,
            };
            self.conn = Some((c, stmts));
        }
        self.conn
            .as_ref()
            .ok_or_else(|| "no connection".to_string())
    }

    async fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Claim(req) => {
                let outcome = self.claim(&req).await;
                let _ = self.events.send(NodeEvent::Claimed {
                    run: req.run,
                    outcome,
                });
            }
            Cmd::Record(rec) => {
                if self.enqueue(&rec) {
                    self.flush().await;
                }
            }
            Cmd::Publish { digest, jobs } => {
                self.config = Some((digest, jobs));
                self.published = None;
                if let Some(epoch) = self.live_epoch() {
                    self.publish(epoch).await;
                }
            }
            Cmd::Submit { shot, reply } => self.submit(vec![(shot, reply)]).await,
            Cmd::Pause {
                jobs,
                paused,
                reply,
            } => {
                let r = self.pause(jobs, paused).await;
                reply(r);
            }
            Cmd::Leave { reply } => {
                self.flush().await;
                let left = match (self.live_epoch(), self.backlog.is_empty()) {
                    (Some(epoch), true) => {
                        let (cluster, node) = (self.s.cluster.clone(), self.s.node.clone());
                        let io = self.io;
                        match self.conn().await {
                            Ok((c, _)) => {
                                within(io, c.query_opt(LEAVE, &[&cluster, &node, &epoch]))
                                    .await
                                    .map(|r| r.is_some())
                                    .unwrap_or(false)
                            }
                            Err(_) => false,
                        }
                    }
                    _ => false,
                };
                if left {
                    info!(node = self.s.node.as_str(), "cluster: left the cluster");
                } else if !self.backlog.is_empty() {
                    warn!(
                        records = self.backlog.len(),
                        "cluster: stopping with run records the database has not taken; the runs will be recorded as interrupted"
                    );
                }
                let _ = reply.send(left);
            }
        }
    }

    async fn publish(&mut self, epoch: i64) {
        let Some((digest, jobs)) = self.config.clone() else {
            return;
        };
        let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
        let digests: Vec<String> = jobs.iter().map(|j| j.digest.clone()).collect();
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let r = match self.conn().await {
            Ok((c, _)) => {
                within(
                    io,
                    c.query_one(
                        "select rea.publish_config($1, $2, $3, $4, $5, $6)",
                        &[&cluster, &node, &epoch, &digest, &names, &digests],
                    ),
                )
                .await
            }
            Err(m) => Err(m),
        };
        match r {
            Ok(_) => self.published = Some(epoch),
            Err(m) => self.fail(&format!("cannot publish the job definitions: {m}")),
        }
    }

    /// Claims of scheduled occurrences that arrived together (8 jobs due
    /// in the same second): sent pipelined on the one connection, so the
    /// last waits one round trip, not eight. Anything unusual (an error,
    /// `early`) goes through [`Main::claim`] alone.
    async fn claims(&mut self, batch: Vec<ClaimRequest>) {
        let together = batch.len() > 1
            && batch
                .iter()
                .all(|r| matches!(r.trigger, Trigger::Schedule | Trigger::CatchUp));
        let epoch = self.live_epoch();
        if !together || epoch.is_none() || self.conn.is_none() {
            for req in batch {
                let outcome = self.claim(&req).await;
                let _ = self.events.send(NodeEvent::Claimed {
                    run: req.run,
                    outcome,
                });
            }
            return;
        }
        let epoch = epoch.unwrap_or_default();
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let params: Vec<ClaimParams> = batch.iter().map(ClaimParams::of).collect();
        let results = match &self.conn {
            Some((c, st)) => {
                let arrays: Vec<[P<'_>; 10]> = batch
                    .iter()
                    .zip(&params)
                    .map(|(req, p)| -> [P<'_>; 10] {
                        [
                            &cluster,
                            &node,
                            &epoch,
                            &req.job,
                            &req.scheduled,
                            &p.trigger,
                            &p.overlap,
                            &p.retry,
                            &p.mode,
                            &MAX_EARLY_MS,
                        ]
                    })
                    .collect();
                let futs: Vec<_> = arrays
                    .iter()
                    .map(|a| within(io, c.query_one(&st.claim, a)))
                    .collect();
                pipelined(futs).await
            }
            None => Vec::new(),
        };
        let mut again = Vec::new();
        for (req, result) in batch.into_iter().zip(results) {
            let outcome = match result {
                Ok(row) => {
                    let outcome: String = row.get(0);
                    self.outcome(
                        epoch,
                        &outcome,
                        row.get(1),
                        row.get(2),
                        row.get(3),
                        row.get(5),
                    )
                }
                Err(_) => None,
            };
            match outcome {
                Some(outcome) => {
                    let _ = self.events.send(NodeEvent::Claimed {
                        run: req.run,
                        outcome,
                    });
                }
                None => again.push(req),
            }
        }
        for req in again {
            let outcome = self.claim(&req).await;
            let _ = self.events.send(NodeEvent::Claimed {
                run: req.run,
                outcome,
            });
        }
    }

    /// A claim's answer; None for `early` and unknown answers (asked again
    /// alone).
    fn outcome(
        &mut self,
        epoch: i64,
        outcome: &str,
        run_id: Option<i64>,
        fence: Option<i64>,
        prev: Option<DateTime<Utc>>,
        reason: Option<String>,
    ) -> Option<ClaimOutcome> {
        let grant = run_id
            .zip(fence)
            .map(|(run_id, fence)| Grant { run_id, fence });
        Some(match (outcome, grant) {
            ("started", Some(grant)) => {
                self.run_epochs.insert(grant.run_id, epoch);
                ClaimOutcome::Started {
                    grant,
                    prev_scheduled: prev,
                }
            }
            ("already_yours", Some(grant)) => {
                self.run_epochs.insert(grant.run_id, epoch);
                ClaimOutcome::AlreadyYours { grant }
            }
            ("skipped", _) => ClaimOutcome::Skipped {
                reason: reason.unwrap_or_else(|| "skipped by the cluster".into()),
            },
            ("queued", _) => ClaimOutcome::Queued,
            ("missed", _) => ClaimOutcome::Missed,
            ("lost", _) => ClaimOutcome::Lost,
            ("no_lease", _) => ClaimOutcome::NoLease,
            _ => return None,
        })
    }

    async fn claim(&mut self, req: &ClaimRequest) -> ClaimOutcome {
        let Some(epoch) = self.live_epoch() else {
            return ClaimOutcome::NoLease;
        };
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        let adopt = matches!(
            req.trigger,
            Trigger::Manual | Trigger::Dependency | Trigger::Reboot
        );
        let ClaimParams {
            trigger,
            overlap,
            retry,
            mode,
        } = ClaimParams::of(req);
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let deadline = Instant::now() + Duration::from_secs(5);
        // A connection that broke while idle (the server restarted) fails
        // its next statement at once: one more try on a fresh one.
        let mut fresh = self.conn.is_none();
        loop {
            let result = match self.conn().await {
                Err(m) => Err(m),
                Ok((c, st)) => {
                    // Adopting takes the claim's first eight parameters and
                    // answers (outcome, run, fence, reason); a claim also
                    // says which occurrence it superseded, before its reason.
                    let params: [&(dyn ToSql + Sync); 10] = [
                        &cluster,
                        &node,
                        &epoch,
                        &req.job,
                        &req.scheduled,
                        &trigger,
                        &overlap,
                        &retry,
                        &mode,
                        &MAX_EARLY_MS,
                    ];
                    let (statement, params, prev_col, reason_col) = if adopt {
                        (&st.adopt, &params[..8], None, 3)
                    } else {
                        (&st.claim, &params[..], Some(3), 5)
                    };
                    within(io, c.query_one(statement, params)).await.map(|row| {
                        (
                            row.get::<_, String>(0),
                            row.get::<_, Option<i64>>(1),
                            row.get::<_, Option<i64>>(2),
                            prev_col.and_then(|i| row.get::<_, Option<DateTime<Utc>>>(i)),
                            row.get::<_, Option<String>>(reason_col),
                        )
                    })
                }
            };
            let (outcome, run_id, fence, prev, reason) = match result {
                Ok(r) => r,
                Err(m) if !fresh && self.live_epoch().is_some() => {
                    self.conn = None;
                    fresh = true;
                    let _ = m;
                    continue;
                }
                Err(m) => {
                    self.fail(&format!("claim of {} at {}: {m}", req.job, req.scheduled));
                    return ClaimOutcome::Unavailable(m);
                }
            };
            if outcome == "early" && Instant::now() < deadline {
                // This node's clock is ahead of the database's: ask again.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            return self
                .outcome(epoch, &outcome, run_id, fence, prev, reason)
                .unwrap_or_else(|| {
                    ClaimOutcome::Unavailable(format!("the claim answered {outcome:?}"))
                });
        }
    }

    /// Writes the backlog in order while the database takes it.
    /// A run start or end into the backlog (false: not one of those).
    fn enqueue(&mut self, rec: &Record) -> bool {
        let Some(w) = write_of(rec) else {
            return false;
        };
        let dropped = self.backlog.push(w);
        if dropped > 0 {
            lock(&self.shared).dropped += dropped;
        }
        true
    }

    async fn flush(&mut self) {
        while let Some(w) = self.backlog.front() {
            let run_id = w.run_id();
            let Some(live) = self.live_epoch() else {
                break;
            };
            if self.backlog.len() > 1 && self.flush_pipelined(live).await > 0 {
                continue;
            }
            let epoch = self.run_epochs.get(&run_id).copied().unwrap_or(live);
            match self.write(epoch).await {
                Ok(true) => {
                    if let Some(Write::Ended { .. }) = self.backlog.pop_front() {
                        self.run_epochs.remove(&run_id);
                    }
                }
                Ok(false) => break,
                Err(m) => {
                    self.fail(&format!("run {run_id}: {m}"));
                    break;
                }
            }
        }
        lock(&self.shared).backlog = self.backlog.len();
    }

    /// The backlog's first writes (up to [`FLUSH_BATCH`]) sent together,
    /// their answers taken in order while each is the common one (the
    /// start or end recorded; an end's output is then written, pipelined
    /// too). Returns how many were done and removed from the front; the
    /// first that was not is left to [`Main::write`], which may send its
    /// statement again: every write is conditional on the run's state, so
    /// a second send changes nothing (an end already recorded is found
    /// ended, and its output written then).
    async fn flush_pipelined(&mut self, live: i64) -> usize {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        // Without a connection, the one-at-a-time way connects (or says
        // why it cannot).
        let Some((c, st)) = &self.conn else {
            return 0;
        };
        let n = self.backlog.len().min(FLUSH_BATCH);
        let epochs: Vec<i64> = self
            .backlog
            .iter()
            .take(n)
            .map(|w| self.run_epochs.get(&w.run_id()).copied().unwrap_or(live))
            .collect();
        let params: Vec<(bool, Vec<P<'_>>)> = self
            .backlog
            .iter()
            .take(n)
            .zip(&epochs)
            .map(|(w, epoch)| {
                (
                    matches!(w, Write::Started { .. }),
                    w.params(&cluster, &node, epoch),
                )
            })
            .collect();
        let answers = pipelined(
            self.backlog
                .iter()
                .zip(&params)
                .map(|(w, (_, p))| within(io, c.query_opt(w.statement(st), p)))
                .collect(),
        )
        .await;
        // The common answers, in order, up to the first other one.
        let mut done = 0;
        for (a, (started, _)) in answers.iter().zip(&params) {
            let common = match a {
                Ok(Some(row)) => *started || row.get::<_, bool>(0),
                _ => false,
            };
            if !common {
                break;
            }
            done += 1;
        }
        let outputs: Vec<[P<'_>; 3]> = self
            .backlog
            .iter()
            .take(done)
            .filter_map(|w| match w {
                Write::Ended {
                    run_id,
                    output: Some((text, bytes)),
                    ..
                } => Some([run_id as P<'_>, text, bytes]),
                _ => None,
            })
            .collect();
        let written = pipelined(
            outputs
                .iter()
                .map(|p| within(io, c.execute(&st.run_output, p)))
                .collect(),
        )
        .await;
        if let Some(Err(m)) = written.into_iter().find(|r| r.is_err()) {
            // Their ends are recorded; sent again, each is found ended and
            // its output written then.
            self.fail(&format!("run output: {m}"));
            return 0;
        }
        for _ in 0..done {
            if let Some(Write::Ended { run_id, .. }) = self.backlog.pop_front() {
                self.run_epochs.remove(&run_id);
            }
        }
        lock(&self.shared).backlog = self.backlog.len();
        done
    }

    /// The backlog's first write. Ok(true): done with it; Ok(false): keep
    /// it (the lease is not live in the database yet).
    async fn write(&mut self, epoch: i64) -> Result<bool, String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        self.conn().await?;
        let Some(w) = self.backlog.front() else {
            return Ok(true);
        };
        let Some((c, st)) = &self.conn else {
            return Err("no connection".into());
        };
        let answer = within(
            io,
            c.query_opt(w.statement(st), &w.params(&cluster, &node, &epoch)),
        )
        .await?;
        match w {
            Write::Started { run_id, .. } => {
                if answer.is_some() {
                    return Ok(true);
                }
                Ok(run_status(c, *run_id, io).await?.as_deref() != Some("started"))
            }
            Write::Ended {
                run_id,
                status,
                exit_code,
                output,
                ..
            } => {
                let ended = answer.is_some_and(|row| row.get::<_, bool>(0));
                if ended {
                    if let Some((text, bytes)) = output {
                        within(io, c.execute(&st.run_output, &[run_id, text, bytes])).await?;
                    }
                    return Ok(true);
                }
                match run_status(c, *run_id, io).await?.as_deref() {
                    Some("interrupted") => {
                        // The cluster declared this node dead while the run
                        // ran and acted on it: keep what really happened
                        // beside the status it acted on.
                        let code = *exit_code;
                        within(
                            io,
                            c.query_opt(
                                &st.late_report,
                                &[&cluster, &node, &epoch, run_id, status, &code],
                            ),
                        )
                        .await?;
                        warn!(
                            run = run_id,
                            status = *status,
                            "cluster: the run had been recorded as interrupted (this node was declared dead); its real end is kept as a late report"
                        );
                        Ok(true)
                    }
                    Some("started") => Ok(false),
                    Some(_) => {
                        // Ended already: by this very write, sent before
                        // (pipelined, or before a lost connection) — its
                        // output may not be in yet.
                        if let Some((text, bytes)) = output {
                            within(io, c.execute(&st.run_output, &[run_id, text, bytes])).await?;
                        }
                        Ok(true)
                    }
                    None => {
                        error!(
                            run = run_id,
                            "cluster: the database has no such run (lost in a failover?); its end is only in this node's history"
                        );
                        Ok(true)
                    }
                }
            }
        }
    }

    async fn tick(&mut self) {
        let Some(epoch) = self.live_epoch() else {
            return;
        };
        if self.published != Some(epoch) {
            self.publish(epoch).await;
        }
        self.flush().await;
        if let Err(m) = self.pending_work(epoch).await {
            self.fail(&m);
        }
    }

    /// Between ticks: due one-shots, if the lease is live.
    async fn poll_oneshots(&mut self) {
        self.oneshot_poll = None;
        let Some(epoch) = self.live_epoch() else {
            return;
        };
        if let Err(m) = self.claim_oneshots(epoch).await {
            self.fail(&m);
        }
    }

    /// Claims due one-shots, as many as the daemon has free slots (up to
    /// [`ONESHOT_BATCH`]), and learns when the next one is due.
    async fn claim_oneshots(&mut self, epoch: i64) -> Result<(), String> {
        self.oneshot_poll = None;
        let limit = lock(&self.shared).free_slots.min(ONESHOT_BATCH);
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let (shared, heartbeat) = (self.shared.clone(), self.s.heartbeat);
        let mut granted = Vec::new();
        let mut events = Vec::new();
        let mut poll = None;
        {
            let (c, st) = self.conn().await?;
            if limit > 0 {
                let rows = within(
                    io,
                    c.query(
                        &st.claim_oneshots,
                        &[&cluster, &node, &epoch, &(limit as i32)],
                    ),
                )
                .await?;
                let full = rows.len() >= limit;
                for row in rows {
                    let run_id: i64 = row.get(0);
                    let id: String = row.get(1);
                    let fence: i64 = row.get(2);
                    let spec: Option<Value> = row.get(3);
                    let attempt: i32 = row.get(4);
                    granted.push(run_id);
                    match spec.and_then(|v| serde_json::from_value::<OneShot>(v).ok()) {
                        Some(shot) => events.push(NodeEvent::OneShot {
                            shot: Box::new(shot),
                            attempt: attempt.max(1) as u32,
                            grant: Grant { run_id, fence },
                        }),
                        None => error!(
                            oneshot = id.as_str(),
                            "cluster: a one-shot without a readable definition"
                        ),
                    }
                }
                {
                    let mut sh = lock(&shared);
                    sh.free_slots = sh.free_slots.saturating_sub(granted.len());
                    sh.oneshots_granted += events.len() as u64;
                }
                if full {
                    // More may be due: ask again as soon as slots allow.
                    poll = Some(Instant::now());
                }
            }
            if poll.is_none() {
                // The next due one-shot, on the database's clock: polled
                // for then rather than at the next tick.
                let row = within(io, c.query_one(&st.next_oneshot_due, &[&cluster, &node])).await?;
                let in_ms: Option<i64> = row.get(0);
                // One due now that this poll did not get is being taken
                // by another node (its rows are locked): look again soon,
                // not at once.
                let floor = if granted.is_empty() { 50 } else { 0 };
                poll = in_ms
                    .filter(|ms| *ms < heartbeat.as_millis() as i64)
                    .map(|ms| {
                        Instant::now() + Duration::from_millis((ms.max(0) as u64 + 2).max(floor))
                    });
            }
        }
        self.oneshot_poll = poll;
        for run_id in granted {
            self.run_epochs.insert(run_id, epoch);
        }
        for e in events {
            let _ = self.events.send(e);
        }
        Ok(())
    }

    /// The sweeper, then work any node may take: due one-shots, retries,
    /// occurrences that waited for their job's run.
    async fn pending_work(&mut self, epoch: i64) -> Result<(), String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let grace_ms = self.s.grace.as_millis().min(i32::MAX as u128) as i32;
        let jobs: Vec<(String, Overlap)> = self
            .config
            .as_ref()
            .map(|(_, j)| j.iter().map(|j| (j.name.clone(), j.overlap)).collect())
            .unwrap_or_default();
        let mut granted = Vec::new();
        let mut events = Vec::new();
        {
            let (c, st) = self.conn().await?;
            let row = within(
                io,
                c.query_one(
                    "select convicted, interrupted, retries from rea.sweep($1, $2, $3, $4)",
                    &[&cluster, &node, &epoch, &grace_ms],
                ),
            )
            .await?;
            let convicted: Option<Vec<String>> = row.get(0);
            let interrupted: i32 = row.get(1);
            if let Some(nodes) = convicted {
                warn!(
                    nodes = nodes.join(", "),
                    interrupted,
                    "cluster: declared dead (lease ended and not renewed); their runs are recorded as interrupted"
                );
            }
            for overlap in [
                Overlap::Skip,
                Overlap::Queue,
                Overlap::Allow,
                Overlap::Replace,
            ] {
                let names: Vec<String> = jobs
                    .iter()
                    .filter(|(_, o)| *o == overlap)
                    .map(|(n, _)| n.clone())
                    .collect();
                if names.is_empty() {
                    continue;
                }
                let o = overlap.as_str();
                for _ in 0..16 {
                    let Some(row) = within(
                        io,
                        c.query_opt(&st.claim_retry, &[&cluster, &node, &epoch, &names, &o]),
                    )
                    .await?
                    else {
                        break;
                    };
                    let outcome: String = row.get(0);
                    if outcome != "started" {
                        continue;
                    }
                    let run_id: i64 = row.get(1);
                    granted.push(run_id);
                    events.push(NodeEvent::Adopted {
                        job: row.get(2),
                        trigger: Trigger::Retry,
                        attempt: row.get::<_, i32>(5).max(1) as u32,
                        scheduled: row
                            .get::<_, Option<DateTime<Utc>>>(4)
                            .unwrap_or_else(Utc::now),
                        grant: Grant {
                            run_id,
                            fence: row.get(3),
                        },
                    });
                }
            }
            if !jobs.is_empty() {
                let names: Vec<String> = jobs.iter().map(|(n, _)| n.clone()).collect();
                let rows = within(
                    io,
                    c.query(&st.promote_queued, &[&cluster, &node, &epoch, &names]),
                )
                .await?;
                for row in rows {
                    let run_id: i64 = row.get(0);
                    granted.push(run_id);
                    events.push(NodeEvent::Adopted {
                        job: row.get(1),
                        trigger: Trigger::Schedule,
                        attempt: 1,
                        scheduled: row
                            .get::<_, Option<DateTime<Utc>>>(3)
                            .unwrap_or_else(Utc::now),
                        grant: Grant {
                            run_id,
                            fence: row.get(2),
                        },
                    });
                }
            }
        }
        for run_id in granted {
            self.run_epochs.insert(run_id, epoch);
        }
        for e in events {
            let _ = self.events.send(e);
        }
        self.claim_oneshots(epoch).await
    }

    /// Queues one-shots in the store with one statement; each reply says
    /// whether its one-shot is durable (or why not). A name already
    /// pending (in the store, or earlier in the batch) is refused alone.
    async fn submit(&mut self, batch: Vec<Submission>) {
        let duplicate = |id: &str| SubmitError::Duplicate { id: id.to_string() };
        let mut ids: Vec<String> = Vec::with_capacity(batch.len());
        let mut dues: Vec<DateTime<Utc>> = Vec::with_capacity(batch.len());
        let mut specs: Vec<Value> = Vec::with_capacity(batch.len());
        let mut retries: Vec<Option<Value>> = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        let mut seen = std::collections::HashSet::with_capacity(batch.len());
        for (shot, reply) in batch {
            if !seen.insert(shot.id.clone()) {
                reply(Err(duplicate(&shot.id)));
                continue;
            }
            let spec = match serde_json::to_value(&*shot) {
                Ok(v) => v,
                Err(e) => {
                    reply(Err(SubmitError::Refused(e.to_string())));
                    continue;
                }
            };
            retries.push(oneshot_retry(&shot));
            ids.push(shot.id.to_string());
            dues.push(shot.due);
            specs.push(spec);
            replies.push(reply);
        }
        if ids.is_empty() {
            return;
        }
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let r = match self.conn().await {
            Ok((c, st)) => {
                within(
                    io,
                    c.query(
                        &st.submit_oneshots,
                        &[&cluster, &node, &ids, &dues, &specs, &retries],
                    ),
                )
                .await
            }
            Err(m) => Err(m),
        };
        match r {
            Ok(rows) => {
                let queued: std::collections::HashSet<String> =
                    rows.iter().map(|r| r.get(0)).collect();
                for (id, reply) in ids.iter().zip(replies) {
                    reply(if queued.contains(id) {
                        Ok(())
                    } else {
                        Err(duplicate(id))
                    });
                }
            }
            Err(m) => {
                for reply in replies {
                    reply(Err(SubmitError::Refused(m.clone())));
                }
                self.fail(&format!("one-shot submissions: {m}"));
            }
        }
    }

    async fn pause(
        &mut self,
        jobs: Option<Vec<String>>,
        paused: bool,
    ) -> Result<Vec<String>, String> {
        let (cluster, node, io) = (self.s.cluster.clone(), self.s.node.clone(), self.io);
        let (c, _) = self.conn().await?;
        match jobs {
            Some(jobs) => {
                let rows = within(
                    io,
                    c.query(
                        "select * from rea.pause($1, $2, $3, $4)",
                        &[&cluster, &jobs, &node, &paused],
                    ),
                )
                .await?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
            None => {
                within(
                    io,
                    c.query_one(
                        "select rea.pause_all($1, $2, $3)",
                        &[&cluster, &node, &paused],
                    ),
                )
                .await?;
                Ok(Vec::new())
            }
        }
    }
}

async fn run_status(c: &Client, run_id: i64, io: Duration) -> Result<Option<String>, String> {
    Ok(within(
        io,
        c.query_opt("select status from rea.runs where id = $1", &[&run_id]),
    )
    .await?
    .map(|r| r.get(0)))
}

/// The store's write for a history record of a granted run.
fn write_of(rec: &Record) -> Option<Write> {
    let run_id = rec.cluster_run?;
    let status = rec.status?;
    let mut detail = serde_json::to_value(rec).ok()?;
    if let Some(o) = detail.as_object_mut() {
        o.remove("output");
    }
    if status == RunStatus::Started {
        return Some(Write::Started {
            run_id,
            pid: rec.pid.unwrap_or(0) as i32,
            detail,
        });
    }
    let retry_delay_ms = rec
        .retry_at()
        .map(|t| (t - rec.ts).num_milliseconds().max(0));
    Some(Write::Ended {
        run_id,
        status: status.as_str(),
        exit_code: rec.exit_code,
        signal: rec.signal,
        reason: rec.reason.clone(),
        detail,
        output: rec
            .output
            .clone()
            .map(|o| (o, rec.output_bytes.unwrap_or(0) as i64)),
        retry_delay_ms,
    })
}

/// A claim's parameters as the statement takes them.
struct ClaimParams {
    trigger: &'static str,
    overlap: &'static str,
    retry: Option<Value>,
    mode: &'static str,
}

impl ClaimParams {
    fn of(req: &ClaimRequest) -> ClaimParams {
        ClaimParams {
            trigger: req.trigger.as_str(),
            overlap: req.overlap.as_str(),
            retry: req.retry.as_ref().map(retry_json),
            mode: match req.mode {
                ClaimMode::Run => "run",
                ClaimMode::Missed => "missed",
            },
        }
    }
}

/// A retry policy as the cluster's statements take it.
fn retry_json(p: &RetryPolicy) -> Value {
    json!({
        // the store's rule is attempt < attempts: rea's
        // `attempts` counts retries, the store's counts runs
        "attempts": p.attempts + 1,
        "delay_ms": p.delay.as_millis() as u64,
        "max_delay_ms": p.max_delay.as_millis() as u64,
        "factor": p.factor,
        "jitter": p.jitter,
    })
}

/// A one-shot's retries, with the defaults and rules local mode applies
/// ([`OneShot::retry_policy`]); none without retries.
fn oneshot_retry(shot: &OneShot) -> Option<Value> {
    (shot.rare().retry.attempts > 0).then(|| retry_json(&shot.retry_policy()))
}

/// Sleeps until `at` (never, without one).
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Polls every future until all are ready, answers in order (tokio-postgres
/// sends a query when its future is first polled, so queries given here go
/// out pipelined on one connection).
pub async fn pipelined<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster one-shot retries as a local one would: a delay above the
    /// default maximum raises the maximum, and the jitter is the policy's.
    #[test]
    fn a_oneshots_retries_follow_local_modes_policy() {
        let now = chrono::Utc::now();
        let mut shot = OneShot {
            id: "s".into(),
            argv: vec!["true".to_string()].into(),
            shell: false,
            dir: std::path::Path::new("/").into(),
            due: now,
            submitted: now,
            rare: None,
        };
        assert_eq!(oneshot_retry(&shot), None);
        let mut rare = rea_core::oneshot::OneShotRare::default();
        rare.retry.attempts = 2;
        rare.retry.delay_ms = Some(900_000);
        shot.rare = Some(Box::new(rare));
        let policy = shot.retry_policy();
        assert_eq!(
            oneshot_retry(&shot),
            Some(json!({
                "attempts": 3,
                "delay_ms": 900_000,
                "max_delay_ms": 900_000,
                "factor": policy.factor,
                "jitter": policy.jitter,
            }))
        );
    }
}
