//! The daemon's decisions as a pure state machine: it is fed events
//! (time passed, a run started or ended, a new configuration, an operator's
//! request) together with "now", and answers with actions (start a run,
//! terminate one, append a history record). It never reads the clock, never
//! sleeps and does no I/O, so days of schedule, DST transitions and clock
//! steps are tested in milliseconds with plain instants (`tests/` drives the
//! real processes through the binary instead).
//!
//! What lives here: overlap policy, the global concurrency limit, retries,
//! catch-up of missed occurrences, pause, reload diffing. What does not:
//! spawning (executor), writing the log (history), sockets, signals and
//! timers (daemon).
//!
//! Invariant: every public handler first dispatches everything due at `now`,
//! so an event never observes a stale heap (a job due in the same instant as
//! a reload is fired by the old definition exactly once, never lost).
//!
//! The files, by concern (each adds methods to [`Engine`]):
//!
//! | file | what it decides |
//! |---|---|
//! | `mod.rs` | the state, the vocabulary (actions, heap entries), `advance` |
//! | `occurrences.rs` | start-up, schedule occurrences, catch-up, clock steps |
//! | `admission.rs` | overlap policy, the global concurrency limit, triggers |
//! | `completion.rs` | a run's end: status, retry (one helper for jobs and one-shots), hooks and mail |
//! | `reload.rs` | a new job set, diffed by name |
//! | `oneshots.rs` | one-shots: submit, restore, cancel, list |
//! | `shares.rs` | the slots divided between tenants: who waits, whose turn, whose share is full |
//! | `hook_queue.rs` | finished runs' hooks holding a slot |
//! | `alerts.rs` | `alert.*`: deadlines in the heap, each alert raised once and resolved once |
//! | `dependencies.rs` | `after = [...]`: who runs when a job succeeds |
//! | `status.rs` | what `rea status` shows |
//! | `arbiter.rs` | who decides whether a run starts: the engine, or a shared store |
//! | `cluster.rs` | cluster mode: claims out, the store's answers in, lease loss |
//!
//! Cluster mode (several nodes on one database,
//! `Engine::set_decisions(Decisions::Store)`):
//! every run is asked of the store first (`Action::Claim`), and the store's
//! answer (`Engine::claimed`) says whether this node starts it — the
//! overlap and pause decisions are the store's, taken on the job's shared
//! row. Retries of failed runs are queued in the store for any node
//! (`Engine::adopt`). Local mode never emits a claim and is unchanged.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::claim::{ClaimMode, ClaimOutcome, ClaimRequest, Grant, OnLeaseLost};
use crate::due_queue::{DueQueue, EntryId};
use crate::job::{CatchUp, Job, Overlap};
use crate::oneshot::OneShot;
use crate::params::Values;
use crate::record::{Event, Record, RunStatus, Trigger};
use crate::run::{Outcome, Started, Termination};

use arbiter::Arbiter;
pub use arbiter::Decisions;
use hook_queue::HookQueue;
use shares::{Blocker, Granted, Owner, Shares};

mod admission;
mod alerts;
mod arbiter;
mod cluster;
mod completion;
mod dependencies;
mod hook_queue;
mod live;
mod occurrences;
mod oneshots;
mod reload;
mod shares;
mod status;

pub use admission::{TriggerResult, MAX_WAITING_TRIGGERS};
pub use alerts::AlertStatus;
pub use live::{Brief, Live, LiveState, Tally};
pub use oneshots::{CancelResult, OneShotStatus, SubmitError};
use oneshots::{ShotKey, ShotState};
pub use shares::{ShareLimits, DEFAULT_QUEUED_PER_USER};
pub use status::{JobStatus, JobView, LastRun, RunView, RunningRun};

/// What the engine runs: the jobs in file order and the limits that apply
/// to all of them, borrowed from the configuration in force.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// Where the jobs come from (the job file), named in `config_loaded`
    /// records.
    pub source: Cow<'a, str>,
    pub jobs: &'a [Arc<Job>],
    /// Runs allowed at once across all jobs (at least one is).
    pub max_concurrent: usize,
    /// How the slots are shared between tenants.
    pub shares: ShareLimits,
}

/// What the daemon must do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Spawn a run; answer with `Engine::spawned`.
    Start(StartRun),
    /// Cluster mode: ask the shared store whether this node starts this
    /// run; answer with `Engine::claimed` (the answer may come later: the
    /// daemon never waits for it).
    Claim(ClaimRequest),
    /// SIGTERM → grace → SIGKILL the run's process group.
    Terminate { run: String },
    /// Append to the history log.
    Record(Box<Record>),
    /// A one-shot is done for good (ran, cancelled or expired): remove it
    /// from the durable journal.
    OneShotDone { id: String },
    /// A job's run ended: send its mail (as decided here). Its hooks come
    /// in [`Action::StartHooks`], when a slot is free; here only while the
    /// daemon stops, when they are not run (for the daemon to say so).
    AfterRun(Box<AfterRun>),
    /// Run a finished run's hooks, in order, one at a time: they hold one of
    /// the `max_concurrent` slots until the last has ended. Answer with
    /// `Engine::hooks_done(id)`.
    StartHooks { id: u64, after: Box<AfterRun> },
    /// An alert of a job was raised or resolved: record it in the history
    /// (`AlertEvent::record`) and tell the job's alert channels. Nothing
    /// answers it.
    Alert(Box<AlertNotice>),
}

/// An alert event and the job it is about (for its channels: `on_alert`,
/// `mailto`, its user).
#[derive(Debug, Clone)]
pub struct AlertNotice {
    pub job: Arc<Job>,
    pub event: crate::alert::AlertEvent,
}

/// Side effects of a finished run that the job file asks for.
#[derive(Debug, Clone)]
pub struct AfterRun {
    pub job: Arc<Job>,
    pub record: Record,
    /// Hook commands to run, in order.
    pub hooks: Vec<(Hook, String)>,
    /// Mail the output to the job's `mailto`.
    pub mail: bool,
}

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Success,
    Failure,
    RetryExhausted,
    /// `on_alert`: run by the daemon for an [`Action::Alert`], outside the
    /// `max_concurrent` slots (a job late for want of a slot must still be
    /// told).
    Alert,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Success => "on_success",
            Hook::Failure => "on_failure",
            Hook::RetryExhausted => "on_retry_exhausted",
            Hook::Alert => "on_alert",
        }
    }
}

/// What a run executes: a job of the file, or a one-shot.
#[derive(Debug, Clone)]
pub enum Def {
    Job(Arc<Job>),
    OneShot(Arc<OneShot>),
}

impl Def {
    /// The job of the file, if this is one (tests, status).
    pub fn job(&self) -> Option<&Arc<Job>> {
        match self {
            Def::Job(j) => Some(j),
            Def::OneShot(_) => None,
        }
    }

    fn timeout(&self) -> Option<Duration> {
        match self {
            Def::Job(j) => j.timeout,
            Def::OneShot(s) => s.timeout(),
        }
    }
}

/// A run the daemon must spawn now.
#[derive(Debug, Clone)]
pub struct StartRun {
    pub run: String,
    /// The job's name, or the one-shot's id.
    pub name: String,
    pub def: Def,
    pub attempt: u32,
    pub trigger: Trigger,
    /// The occurrence this run serves (for retries: the original one).
    pub scheduled: DateTime<Utc>,
    /// Cluster mode: the run's id and fence in the shared store.
    pub grant: Option<Grant>,
    /// Its parameters, passed to it as environment variables.
    pub params: Option<Arc<Values>>,
}

/// A run in progress, as `Engine::runs_in_progress` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInProgress {
    pub run: String,
    /// The job or the one-shot it runs.
    pub source: Source,
}

/// Why a run was asked to stop early; becomes the `reason` of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Replaced,
    Shutdown,
    Operator,
    /// Cluster mode: the node lost its lease and the job says
    /// `on_lease_lost = "kill"`.
    LeaseLost,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::Replaced => "replaced by a newer run (overlap = \"replace\")",
            StopReason::Shutdown => "daemon shutdown",
            StopReason::Operator => "killed by operator",
            StopReason::LeaseLost => "this node lost its cluster lease (on_lease_lost = \"kill\")",
        }
    }
}

/// A heap entry.
#[derive(Debug, Clone)]
enum Due {
    /// A schedule occurrence; `at` is the occurrence, the entry is due at
    /// `at + jitter`.
    Occurrence {
        job: Arc<str>,
        at: DateTime<Utc>,
        jitter: Duration,
    },
    Retry {
        job: Arc<str>,
        scheduled: DateTime<Utc>,
        attempt: u32,
        /// The failed run's, so each attempt gets the same.
        params: Option<Arc<Values>>,
    },
    /// An alert's deadline (`alerts.rs`): `run` for `running_over`.
    Alert {
        job: Arc<str>,
        kind: crate::alert::AlertKind,
        run: Option<Box<str>>,
    },
    /// A one-shot's run (first attempt or a retry).
    OneShot {
        shot: Arc<OneShot>,
        attempt: u32,
        trigger: Trigger,
    },
}

/// What a run runs: a job of the file, or a one-shot (the two share one
/// namespace: a job may not take a pending one-shot's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Job(String),
    OneShot(String),
}

impl Source {
    /// The job's name or the one-shot's id.
    pub fn name(&self) -> &str {
        match self {
            Source::Job(n) | Source::OneShot(n) => n,
        }
    }

    /// The one-shot's id, if it is one.
    pub fn oneshot(&self) -> Option<&str> {
        match self {
            Source::OneShot(id) => Some(id),
            Source::Job(_) => None,
        }
    }
}

/// A run that is decided but not yet spawned (waiting for its job's previous
/// run, or for a global slot).
#[derive(Debug, Clone)]
struct Pending {
    run: String,
    source: Source,
    attempt: u32,
    trigger: Trigger,
    scheduled: DateTime<Utc>,
    jitter: Duration,
    /// When it entered the global queue (for `waited_ms`).
    ready_at: DateTime<Utc>,
    /// Its tenant: whose share of the slots it takes.
    owner: Owner,
    /// Why it could not start when it entered the global queue (for
    /// `waited_for`).
    blocked: Option<Blocker>,
    /// Cluster mode: granted by the store.
    grant: Option<Grant>,
    /// Its parameters' values (a trigger's, else the defaults); None for a
    /// job that declares none.
    params: Option<Arc<Values>>,
}

impl Pending {
    /// What its record says it waited for, if it waited for a slot.
    fn waited_for(&self) -> Option<String> {
        self.blocked.as_ref().map(|b| format!("a free slot: {b}"))
    }
}

/// A run that has been handed to the daemon to spawn.
#[derive(Debug, Clone)]
struct Active {
    pending: Pending,
    def: Def,
    started: Option<Started>,
    stop: Option<StopReason>,
    /// Its `running_over` deadline, while armed.
    over_entry: Option<EntryId>,
    /// It ran past its `running_over` limit.
    over: bool,
}

#[derive(Debug)]
struct JobState {
    /// The name, shared with the map's key, `order` and heap entries (one
    /// allocation per job instead of a copy in each).
    name: Arc<str>,
    def: Arc<Job>,
    /// No longer in the file (kept while a run of it finishes).
    removed: bool,
    /// Seen in the plan being applied (`reload`'s mark, so it needs no set
    /// of 100,000 names).
    listed: bool,
    /// Its place in `order` (file order), kept with it so the live views
    /// walk `jobs` without a lookup per name (`Engine::job_views_indexed`).
    position: usize,
    next: Option<EntryId>,
    /// The latest occurrence already dealt with (fired, skipped or missed):
    /// occurrences at or before it are never run again, which is what keeps
    /// a backward clock step from repeating one.
    last_occurrence: Option<DateTime<Utc>>,
    retry: Option<EntryId>,
    /// Runs of this job in the global queue or spawned.
    active: usize,
    /// Of those, the runs still waiting for a slot in the global queue
    /// (so a skip can say the previous run waits, not that it runs).
    queued: usize,
    /// Runs waiting for this job's active run to end (overlap = queue or
    /// replace, catch-up backlog).
    waiting: VecDeque<Pending>,
    /// Its runs in progress on other nodes of the cluster, as the node's
    /// last look at them saw (`Engine::set_elsewhere`): the live views
    /// count them as running; nothing here waits for them (the cluster's
    /// store decides overlap).
    elsewhere: u32,
    consecutive_failures: u32,
    last: Option<LastRun>,
    /// Its recent record for the live views, fed every history record of
    /// the job the daemon writes (`Engine::observe`).
    summary: crate::summary::Summary,
    /// Jobs of its `after` list that succeeded since it last ran for them.
    deps_done: BTreeSet<String>,
    /// Its alerts' state, for a job with alerts armed (`alerts.rs`).
    alerts: Option<Box<alerts::JobAlerts>>,
}

/// Information from the history log that the engine needs at start.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// Latest occurrence dealt with, per job.
    pub last_occurrences: HashMap<String, DateTime<Utc>>,
    /// When the previous daemon started (the horizon for jobs that have no
    /// occurrence in the log yet).
    pub previous_start: Option<DateTime<Utc>>,
    /// `started` records without a final one: the previous daemon died.
    pub unfinished: Vec<Record>,
    /// Jobs paused when the previous daemon stopped.
    pub paused: BTreeSet<String>,
    /// Unfinished runs whose processes were still running at start and were
    /// terminated, by run id: how many processes.
    pub terminated: BTreeMap<String, usize>,
}

/// The state machine. See the module documentation.
pub struct Engine {
    /// Boxed: a B-tree node holds 11 entries inline and sequential inserts
    /// leave nodes half full, so an inline state of a few hundred bytes
    /// cost ~500 bytes per job; a pointer costs ~100. Changes to a job
    /// go through it and are marked for the live index (`live.rs`).
    jobs: live::JobMap,
    /// What the live views read: a brief per job, counts per tenant.
    live: live::LiveIndex,
    /// The largest jitter of an occurrence ever put in the heap: how much
    /// later than its occurrence an entry can be due (`Live::next_due`).
    max_jitter: Duration,
    /// File order, for display (the names held by `jobs`).
    order: Vec<Arc<str>>,
    heap: DueQueue<Due>,
    runs: HashMap<String, Active>,
    /// Runs and hooks waiting for a slot, by tenant, and the slots each
    /// tenant holds.
    shares: Shares,
    max_concurrent: usize,
    paused: BTreeSet<String>,
    stopping: bool,
    rng: fastrand::Rng,
    run_counter: u32,
    /// In cluster mode, `-NODE` after each run id this engine makes, so
    /// that ids are unique cluster-wide and one id names a run on every
    /// node and in the shared store (`set_run_id_node`).
    run_id_node: Option<Arc<str>>,
    /// The job file, for records.
    file: String,
    /// Job name → the jobs whose `after` lists it (derived from `jobs` on
    /// start and reload), so a success looks up its dependents instead of
    /// scanning every job.
    dependents: HashMap<String, Vec<String>>,
    /// Pending and running one-shots by id.
    oneshots: HashMap<ShotKey, ShotState>,
    /// Finished runs' hooks holding a slot.
    hooks: HookQueue,
    /// Who decides whether a run starts: this engine, or a shared store
    /// (cluster mode), with that store's claims in flight.
    arbiter: Arbiter,
}

impl Engine {
    /// An engine for `config`; nothing is scheduled until `start`.
    pub fn new(plan: &Plan, seed: u64) -> Engine {
        let mut rng = fastrand::Rng::with_seed(seed);
        let run_counter = rng.u32(..);
        let mut engine = Engine {
            jobs: live::JobMap::default(),
            live: live::LiveIndex::default(),
            max_jitter: Duration::ZERO,
            order: Vec::new(),
            heap: DueQueue::new(),
            runs: HashMap::new(),
            shares: Shares::new(plan.max_concurrent, plan.shares),
            max_concurrent: plan.max_concurrent.max(1),
            paused: BTreeSet::new(),
            stopping: false,
            rng,
            run_counter,
            run_id_node: None,
            file: plan.source.to_string(),
            oneshots: HashMap::new(),
            dependents: HashMap::new(),
            hooks: HookQueue::default(),
            arbiter: Arbiter::Engine,
        };
        for job in plan.jobs {
            let name: Arc<str> = job.name.as_str().into();
            let mut state = JobState::new(name.clone(), job.clone());
            state.position = engine.order.len();
            engine.order.push(name.clone());
            engine.jobs.insert(name, state);
        }
        engine.rebuild_dependents();
        engine
    }

    /// The instant the daemon must wake at next, if any.
    pub fn next_wake(&mut self) -> Option<DateTime<Utc>> {
        self.heap.next_due()
    }

    /// Time has passed. `clock_changed` says the wall clock was stepped (or
    /// the machine resumed) since the last wake: occurrences that were skipped
    /// over then go through each job's catch-up policy instead of firing.
    pub fn wake(&mut self, now: DateTime<Utc>, clock_changed: bool) -> Vec<Action> {
        let mut out = Vec::new();
        if clock_changed {
            self.replan_after_clock_change(now, &mut out);
        }
        self.advance(now, &mut out);
        out
    }

    /// Pauses the schedule of the named jobs. Returns the names that changed.
    pub fn pause(&mut self, names: &[String]) -> Vec<String> {
        let changed: Vec<String> = names
            .iter()
            .filter(|n| self.jobs.contains_key(n.as_str()) && self.paused.insert((*n).clone()))
            .cloned()
            .collect();
        for n in &changed {
            self.jobs.touch(n);
        }
        changed
    }

    /// Resumes the named jobs. Returns the names that changed.
    pub fn resume(&mut self, names: &[String]) -> Vec<String> {
        let changed: Vec<String> = names
            .iter()
            .filter(|n| self.paused.remove(*n))
            .cloned()
            .collect();
        for n in &changed {
            self.jobs.touch(n);
        }
        changed
    }

    pub fn paused(&self) -> &BTreeSet<String> {
        &self.paused
    }

    /// Stop starting runs and hooks: waiting ones are dropped (hooks come
    /// back as [`Action::AfterRun`] for the daemon to log), running ones go
    /// on until `terminate_all` (after the shutdown grace).
    pub fn shutdown(&mut self) -> Vec<Action> {
        self.stopping = true;
        let (runs, hooks) = self.shares.drain();
        for p in runs {
            if let Some(s) = self.jobs.get_mut(p.source.name()) {
                s.active = s.active.saturating_sub(1);
                s.queued = s.queued.saturating_sub(1);
            }
        }
        for s in self.jobs.values_mut() {
            s.waiting.clear();
        }
        hooks
            .into_iter()
            .map(|a| Action::AfterRun(Box::new(a)))
            .collect()
    }

    /// The daemon has run (or given up on) the hooks of
    /// [`Action::StartHooks`] `id`: their slot is free.
    pub fn hooks_done(&mut self, id: u64, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(owner) = self.hooks.done(id) {
            self.shares.release(&owner);
            self.fill_slots(now, &mut out);
        }
        out
    }

    /// Hook sequences holding a slot.
    pub fn hooks_running(&self) -> usize {
        self.hooks.running()
    }

    /// Whether nothing runs: no run and no hook (the daemon may exit once
    /// stopping).
    pub fn idle(&self) -> bool {
        self.runs.is_empty() && self.hooks.running() == 0
    }

    /// Terminates every run still in progress (shutdown grace expired).
    pub fn terminate_all(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        for (run, active) in self.runs.iter_mut() {
            if active.stop.is_none() {
                active.stop = Some(StopReason::Shutdown);
                out.push(Action::Terminate { run: run.clone() });
            }
        }
        out
    }

    /// The runs in progress (handed to the daemon to spawn, not ended),
    /// oldest first: for `rea kill`, which decides which of them the
    /// asker may stop.
    pub fn runs_in_progress(&self) -> Vec<RunInProgress> {
        let mut runs: Vec<RunInProgress> = self
            .runs
            .iter()
            .map(|(run, active)| RunInProgress {
                run: run.clone(),
                source: active.pending.source.clone(),
            })
            .collect();
        runs.sort_by(|a, b| a.run.cmp(&b.run));
        runs
    }

    /// An operator's kill (`rea kill`): each of `runs` still in progress is
    /// asked to stop (TERM, its grace, KILL) and ends as `killed`, "killed
    /// by operator": no retry and no `on_failure` follow, as after `rea
    /// cancel --kill`. A run already being stopped is left to that stop.
    /// Returns the runs now being killed.
    pub fn kill_runs(&mut self, runs: &[String], now: DateTime<Utc>) -> (Vec<String>, Vec<Action>) {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let mut killing = Vec::new();
        for run in runs {
            let Some(active) = self.runs.get_mut(run.as_str()) else {
                continue;
            };
            if active.stop.is_none() {
                active.stop = Some(StopReason::Operator);
                out.push(Action::Terminate { run: run.clone() });
            }
            killing.push(run.clone());
        }
        (killing, out)
    }

    /// Whether `run` has been handed to the daemon to spawn (not waiting).
    pub fn running_run(&self, run: &str) -> bool {
        self.runs.contains_key(run)
    }

    /// Runs spawned and not yet finished.
    pub fn running(&self) -> usize {
        self.runs.len()
    }

    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    /// Runs waiting for a global slot.
    pub fn queued(&self) -> usize {
        self.shares.waiting_runs()
    }

    /// How the slots are shared between tenants, as in force (the reserve
    /// and the share clamped to what `max_concurrent` allows).
    pub fn share_limits(&self) -> ShareLimits {
        self.shares.limits()
    }

    // ---- internals -------------------------------------------------------

    /// Pops and handles every heap entry due at `now`.
    fn advance(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        while let Some((id, _due, entry)) = self.heap.pop_due(now) {
            match entry {
                Due::Occurrence { job, at, jitter } => {
                    self.on_occurrence(&job, id, at, jitter, now, out)
                }
                Due::Alert { job, kind, run } => {
                    self.on_alert_due(&job, kind, run.as_deref(), id, now, out)
                }
                Due::OneShot {
                    shot,
                    attempt,
                    trigger,
                } => self.on_oneshot_due(&shot.id, attempt, trigger, now, out),
                Due::Retry {
                    job,
                    scheduled,
                    attempt,
                    params,
                } => {
                    let Some(state) = self.jobs.get_mut(&job) else {
                        continue;
                    };
                    if state.retry == Some(id) {
                        state.retry = None;
                    }
                    if state.removed || self.stopping {
                        continue;
                    }
                    let owner = shares::owner_of_job(state.def.owner.as_deref());
                    if let Some(full) = self.queue_full(&owner) {
                        let p = self.new_pending(
                            &job,
                            Trigger::Retry,
                            attempt,
                            scheduled,
                            Duration::ZERO,
                            now,
                        );
                        out.push(skip_record(&p, &format!("retry not queued: {full}"), now));
                        continue;
                    }
                    let mut p = self.new_pending(
                        &job,
                        Trigger::Retry,
                        attempt,
                        scheduled,
                        Duration::ZERO,
                        now,
                    );
                    if params.is_some() {
                        p.params = params;
                    }
                    self.dispatch_pending(p, now, out);
                }
            }
        }
        self.fill_slots(now, out);
    }

    /// A run of the one-shot `id`.
    fn new_oneshot_pending(
        &mut self,
        id: &str,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Pending {
        let mut p = self.new_pending(id, trigger, attempt, scheduled, Duration::ZERO, now);
        p.source = Source::OneShot(id.to_string());
        p.owner = shares::owner_of_name(id);
        p
    }

    fn new_pending(
        &mut self,
        name: &str,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        jitter: Duration,
        now: DateTime<Utc>,
    ) -> Pending {
        self.run_counter = self.run_counter.wrapping_add(1);
        let owner = self.jobs.get(name).map_or_else(
            || shares::owner_of_name(name),
            |s| shares::owner_of_job(s.def.owner.as_deref()),
        );
        // A run that passes none gets the defaults.
        let params = self
            .jobs
            .get(name)
            .map(|s| &s.def.extras().params)
            .filter(|p| !p.is_empty())
            .map(|p| Arc::new(crate::params::defaults(p)));
        Pending {
            run: self.run_id(now),
            source: Source::Job(name.to_string()),
            attempt,
            trigger,
            scheduled,
            jitter,
            ready_at: now,
            owner,
            blocked: None,
            grant: None,
            params,
        }
    }
}

impl JobState {
    fn new(name: Arc<str>, def: Arc<Job>) -> Box<JobState> {
        Box::new(JobState {
            name,
            def,
            removed: false,
            listed: false,
            position: 0,
            next: None,
            last_occurrence: None,
            retry: None,
            active: 0,
            queued: 0,
            waiting: VecDeque::new(),
            elsewhere: 0,
            consecutive_failures: 0,
            last: None,
            summary: Default::default(),
            deps_done: BTreeSet::new(),
            alerts: None,
        })
    }
}

/// `t + d`, saturating: no input (a delay, a jitter) can make the engine
/// panic on an instant out of chrono's range.
fn later(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn ms(d: chrono::Duration) -> u64 {
    d.num_milliseconds().max(0) as u64
}

fn run_record(p: &Pending, status: RunStatus, now: DateTime<Utc>) -> Record {
    let mut rec = Record::new(Event::Run, now);
    rec.job = Some(p.source.name().to_string());
    rec.run = Some(p.run.clone());
    rec.attempt = Some(p.attempt);
    rec.trigger = Some(p.trigger);
    rec.status = Some(status);
    rec.scheduled = Some(p.scheduled);
    if !p.jitter.is_zero() {
        rec.jitter_ms = Some(p.jitter.as_millis() as u64);
    }
    if let Some(g) = p.grant {
        rec.cluster_run = Some(g.run_id);
        rec.fence = Some(g.fence);
    }
    rec.params = p.params.as_deref().cloned();
    rec
}

fn skip_record(p: &Pending, reason: &str, now: DateTime<Utc>) -> Action {
    let mut rec = run_record(p, RunStatus::Skipped, now);
    rec.reason = Some(reason.to_string());
    Action::Record(Box::new(rec))
}

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Run ids sort by creation time: 10 base32 digits of milliseconds since the
/// epoch and 4 of a per-daemon counter that starts at a random value, so ids
/// from successive daemons in one state directory do not collide.
/// With `node` (cluster mode), `-NODE` follows: node names are unique in
/// a cluster, so two nodes never make the same id.
fn run_id(now: DateTime<Utc>, counter: u32, node: Option<&str>) -> String {
    let mut ms = now.timestamp_millis().max(0) as u64;
    let mut c = counter as u64;
    let mut buf = [0u8; 14];
    for i in (0..10).rev() {
        buf[i] = CROCKFORD[(ms & 31) as usize];
        ms >>= 5;
    }
    for i in (10..14).rev() {
        buf[i] = CROCKFORD[(c & 31) as usize];
        c >>= 5;
    }
    let id = String::from_utf8_lossy(&buf);
    match node {
        Some(node) => format!("{id}-{node}"),
        None => id.into_owned(),
    }
}

#[cfg(test)]
mod tests;
