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

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::config::{CatchUp, Config, Job, Overlap};
use crate::dispatcher::{Dispatcher, EntryId};
use crate::executor::{Outcome, Started, Termination};
use crate::history::{Event, Record, RunStatus, Trigger};
use crate::oneshot::OneShot;

/// Occurrences counted one by one when the daemon finds it has passed many;
/// beyond this the count is reported as a lower bound.
const MISSED_COUNT_CAP: u64 = 100_000;

/// What the daemon must do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Spawn a run; answer with `Engine::spawned`.
    Start(StartRun),
    /// SIGTERM → grace → SIGKILL the run's process group.
    Terminate { run: String },
    /// Append to the history log.
    Record(Box<Record>),
    /// A one-shot is done for good (ran, cancelled or expired): remove it
    /// from the durable journal.
    OneShotDone { id: String },
    /// A job's run ended: run its hooks and send its mail, as decided here.
    AfterRun(Box<AfterRun>),
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
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Success => "on_success",
            Hook::Failure => "on_failure",
            Hook::RetryExhausted => "on_retry_exhausted",
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
}

/// Why a run was asked to stop early; becomes the `reason` of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Replaced,
    Shutdown,
    Operator,
}

impl StopReason {
    fn as_str(self) -> &'static str {
        match self {
            StopReason::Replaced => "replaced by a newer run (overlap = \"replace\")",
            StopReason::Shutdown => "daemon shutdown",
            StopReason::Operator => "killed by operator",
        }
    }
}

/// A heap entry.
#[derive(Debug, Clone)]
enum Due {
    /// A schedule occurrence; `at` is the occurrence, the entry is due at
    /// `at + jitter`.
    Occurrence {
        job: String,
        at: DateTime<Utc>,
        jitter: Duration,
    },
    Retry {
        job: String,
        scheduled: DateTime<Utc>,
        attempt: u32,
    },
    /// A one-shot's run (first attempt or a retry).
    OneShot {
        shot: Arc<OneShot>,
        attempt: u32,
        trigger: Trigger,
    },
}

/// A run that is decided but not yet spawned (waiting for its job's previous
/// run, or for a global slot).
#[derive(Debug, Clone)]
struct Pending {
    run: String,
    job: String,
    /// `job` names a one-shot, not a job of the file.
    oneshot: bool,
    attempt: u32,
    trigger: Trigger,
    scheduled: DateTime<Utc>,
    jitter: Duration,
    /// When it entered the global queue (for `waited_ms`).
    ready_at: DateTime<Utc>,
}

/// A run that has been handed to the daemon to spawn.
#[derive(Debug, Clone)]
struct Active {
    pending: Pending,
    def: Def,
    started: Option<Started>,
    stop: Option<StopReason>,
}

/// The last final result of a job, for status.
#[derive(Debug, Clone, PartialEq)]
pub struct LastRun {
    pub run: String,
    pub status: RunStatus,
    pub ended: DateTime<Utc>,
    pub duration: Duration,
    pub exit_code: Option<i32>,
}

#[derive(Debug)]
struct JobState {
    def: Arc<Job>,
    /// No longer in the file (kept while a run of it finishes).
    removed: bool,
    next: Option<EntryId>,
    /// The latest occurrence already dealt with (fired, skipped or missed):
    /// occurrences at or before it are never run again, which is what keeps
    /// a backward clock step from repeating one.
    last_occurrence: Option<DateTime<Utc>>,
    retry: Option<EntryId>,
    /// Runs of this job in the global queue or spawned.
    active: usize,
    /// Runs waiting for this job's active run to end (overlap = queue or
    /// replace, catch-up backlog).
    waiting: VecDeque<Pending>,
    consecutive_failures: u32,
    last: Option<LastRun>,
    /// Jobs of its `after` list that succeeded since it last ran for them.
    deps_done: BTreeSet<String>,
}

/// A job's live state as `rea status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    pub name: String,
    pub enabled: bool,
    pub paused: bool,
    pub next_fire: Option<DateTime<Utc>>,
    pub retry_at: Option<DateTime<Utc>>,
    /// (run id, pid, since) of runs in progress.
    pub running: Vec<RunningRun>,
    /// Runs waiting (for the job's previous run or a global slot).
    pub queued: usize,
    pub consecutive_failures: u32,
    pub last: Option<LastRun>,
    /// Jobs it runs after (its `after` list).
    pub after: Vec<String>,
}

/// Why a one-shot submission or cancellation was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitError {
    /// A pending one-shot has this name already (idempotent submitters:
    /// this means "you already submitted it").
    Duplicate(String),
    /// A job of the file has this name.
    NameTaken(String),
    Unknown(String),
    Running(String),
}

impl SubmitError {
    pub fn message(&self) -> &str {
        match self {
            SubmitError::Duplicate(m)
            | SubmitError::NameTaken(m)
            | SubmitError::Unknown(m)
            | SubmitError::Running(m) => m,
        }
    }
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    Cancelled,
    /// The run is being terminated; it ends as `killed`.
    Killing,
}

/// A pending one-shot as `rea pending` shows it.
#[derive(Debug, Clone)]
pub struct OneShotStatus {
    pub def: Arc<OneShot>,
    /// When its next attempt is due (None while running).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub running: bool,
}

/// What the operator's `trigger` achieved.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerResult {
    Started { run: String },
    Queued { run: String },
    Skipped { reason: String },
    UnknownJob { suggestions: Vec<String> },
}

/// (run id, pid, since) of a run in progress.
pub type RunningRun = (String, Option<u32>, Option<DateTime<Utc>>);

fn running_run(id: &str, a: &Active) -> RunningRun {
    (
        id.to_string(),
        a.started.map(|s| s.pid),
        a.started.map(|s| s.at),
    )
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
}

/// The state machine. See the module documentation.
pub struct Engine {
    jobs: BTreeMap<String, JobState>,
    /// File order, for display.
    order: Vec<String>,
    heap: Dispatcher<Due>,
    runs: HashMap<String, Active>,
    /// Runs waiting for a global slot, in due order.
    ready: VecDeque<Pending>,
    max_concurrent: usize,
    paused: BTreeSet<String>,
    stopping: bool,
    rng: fastrand::Rng,
    run_counter: u32,
    /// The job file, for records.
    file: String,
    /// Job name → the jobs whose `after` lists it (derived from `jobs` on
    /// start and reload), so a success looks up its dependents instead of
    /// scanning every job.
    dependents: HashMap<String, Vec<String>>,
    /// Pending and running one-shots by id.
    oneshots: HashMap<ShotKey, ShotState>,
}

/// A one-shot's id as a map key without a copy of the string: a million
/// pending one-shots would otherwise hold every id twice more (here and in
/// the heap entry).
#[derive(Debug, Clone)]
struct ShotKey(Arc<OneShot>);

impl std::borrow::Borrow<str> for ShotKey {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl std::hash::Hash for ShotKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // Must hash exactly as `str` does, for lookups by `&str`.
        self.0.id.as_str().hash(h)
    }
}

impl PartialEq for ShotKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ShotKey {}

/// A one-shot the engine knows about.
#[derive(Debug)]
struct ShotState {
    def: Arc<OneShot>,
    /// Its heap entry while it waits (first attempt or a retry).
    entry: Option<EntryId>,
    running: bool,
}

impl Engine {
    /// An engine for `config`; nothing is scheduled until `start`.
    pub fn new(config: &Config, seed: u64) -> Engine {
        let mut rng = fastrand::Rng::with_seed(seed);
        let run_counter = rng.u32(..);
        let mut engine = Engine {
            jobs: BTreeMap::new(),
            order: Vec::new(),
            heap: Dispatcher::new(),
            runs: HashMap::new(),
            ready: VecDeque::new(),
            max_concurrent: config.daemon.max_concurrent.max(1),
            paused: BTreeSet::new(),
            stopping: false,
            rng,
            run_counter,
            file: config.path.display().to_string(),
            oneshots: HashMap::new(),
            dependents: HashMap::new(),
        };
        for job in &config.jobs {
            engine.order.push(job.name.clone());
            engine
                .jobs
                .insert(job.name.clone(), JobState::new(job.clone()));
        }
        engine.rebuild_dependents();
        engine
    }

    /// Schedules every job, records interrupted runs of the previous daemon,
    /// applies catch-up for occurrences missed while it was down, and starts
    /// `@reboot` jobs.
    pub fn start(&mut self, now: DateTime<Utc>, recovered: Recovered) -> Vec<Action> {
        let mut out = Vec::new();
        let mut rec = Record::new(Event::ConfigLoaded, now);
        rec.count = Some(self.order.len() as u64);
        rec.detail = Some(
            json!({ "file": self.file, "added": self.order.len(), "changed": 0, "removed": 0, "unchanged": 0 }),
        );
        out.push(Action::Record(Box::new(rec)));
        self.paused = recovered
            .paused
            .into_iter()
            .filter(|n| self.jobs.contains_key(n))
            .collect();
        for started in recovered.unfinished {
            let mut rec = started.clone();
            rec.ts = now;
            rec.status = Some(RunStatus::Interrupted);
            rec.ended = None;
            rec.reason = Some(
                "the daemon stopped while this run was in progress (crash, kill -9 or power loss)"
                    .into(),
            );
            out.push(Action::Record(Box::new(rec)));
        }
        let names = self.order.clone();
        for name in names {
            let Some(state) = self.jobs.get(&name) else {
                continue;
            };
            if !state.def.enabled {
                continue;
            }
            if state.def.is_reboot() {
                self.dispatch(
                    &name,
                    Trigger::Reboot,
                    1,
                    now,
                    Duration::ZERO,
                    now,
                    &mut out,
                );
                continue;
            }
            let horizon = recovered
                .last_occurrences
                .get(&name)
                .copied()
                .or(recovered.previous_start);
            if let Some(since) = horizon {
                self.set_last_occurrence(&name, since);
                self.catch_up(&name, since, now, false, &mut out);
            }
            self.schedule_next(&name, now);
        }
        self.fill_slots(now, &mut out);
        out
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

    /// The daemon spawned (or failed to spawn) a run from `Action::Start`.
    pub fn spawned(
        &mut self,
        run: &str,
        result: Result<Started, String>,
        now: DateTime<Utc>,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        match result {
            Ok(started) => {
                if let Some(active) = self.runs.get_mut(run) {
                    active.started = Some(started);
                    let mut rec = run_record(&active.pending, RunStatus::Started, now);
                    rec.started = Some(started.at);
                    rec.pid = Some(started.pid);
                    rec.waited_ms = Some(ms(started.at - active.pending.ready_at));
                    out.push(Action::Record(Box::new(rec)));
                }
            }
            Err(error) => {
                if let Some(active) = self.runs.remove(run) {
                    let mut rec = run_record(&active.pending, RunStatus::Failed, now);
                    rec.reason = Some(error);
                    rec.ended = Some(now);
                    self.finish(active, rec, RunStatus::Failed, now, &mut out);
                }
            }
        }
        out
    }

    /// A spawned run ended.
    pub fn finished(&mut self, run: &str, outcome: &Outcome, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let Some(active) = self.runs.remove(run) else {
            return out;
        };
        let status = if outcome.terminated {
            RunStatus::Killed
        } else if outcome.timed_out {
            RunStatus::TimedOut
        } else if outcome.termination == Termination::Exited(0) {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        };
        let mut rec = run_record(&active.pending, status, now);
        rec.started = Some(outcome.started.at);
        rec.ended = Some(outcome.ended);
        rec.duration_ms = Some(ms(outcome.ended - outcome.started.at));
        rec.waited_ms = Some(ms(outcome.started.at - active.pending.ready_at));
        rec.pid = Some(outcome.started.pid);
        match outcome.termination {
            Termination::Exited(code) => rec.exit_code = Some(code),
            Termination::Signaled(sig) => rec.signal = Some(sig),
        }
        rec.output = Some(outcome.output.text.clone());
        rec.output_bytes = Some(outcome.output.total_bytes);
        rec.max_rss_kb = Some(outcome.usage.max_rss_kb);
        rec.user_cpu_ms = Some(outcome.usage.user_ms);
        rec.sys_cpu_ms = Some(outcome.usage.sys_ms);
        if status == RunStatus::TimedOut {
            if let Some(t) = active.def.timeout() {
                rec.reason = Some(format!("timed out after {}", crate::duration::format(t)));
            }
        }
        if let Some(stop) = active.stop {
            rec.reason = Some(stop.as_str().to_string());
        }
        self.finish(active, rec, status, now, &mut out);
        out
    }

    /// A new valid configuration: apply the difference by job name.
    pub fn reload(&mut self, config: &Config, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let (mut added, mut changed, mut unchanged) = (0u64, 0u64, 0u64);
        let new_names: BTreeSet<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        let removed: Vec<String> = self
            .jobs
            .keys()
            .filter(|n| !new_names.contains(n.as_str()))
            .cloned()
            .collect();
        for name in &removed {
            self.retire(name);
        }
        self.order = config.jobs.iter().map(|j| j.name.clone()).collect();
        for job in &config.jobs {
            let name = job.name.clone();
            match self.jobs.get_mut(&name) {
                Some(state) if !state.removed && *state.def == **job => unchanged += 1,
                Some(state) => {
                    let was_removed = state.removed;
                    state.def = job.clone();
                    state.removed = false;
                    if let Some(id) = state.next.take() {
                        self.heap.cancel(id);
                    }
                    if !job.enabled {
                        if let Some(id) = state.retry.take() {
                            self.heap.cancel(id);
                        }
                        state.waiting.clear();
                    }
                    if was_removed {
                        added += 1;
                    } else {
                        changed += 1;
                    }
                    self.schedule_next(&name, now);
                }
                None => {
                    added += 1;
                    self.jobs.insert(name.clone(), JobState::new(job.clone()));
                    self.schedule_next(&name, now);
                }
            }
        }
        self.paused.retain(|n| new_names.contains(n.as_str()));
        self.rebuild_dependents();
        self.max_concurrent = config.daemon.max_concurrent.max(1);
        self.file = config.path.display().to_string();
        let mut rec = Record::new(Event::ConfigLoaded, now);
        rec.count = Some(config.jobs.len() as u64);
        rec.detail = Some(json!({
            "file": config.path.display().to_string(),
            "added": added,
            "changed": changed,
            "removed": removed.len(),
            "unchanged": unchanged,
        }));
        out.push(Action::Record(Box::new(rec)));
        self.fill_slots(now, &mut out);
        out
    }

    /// Runs a job now (trigger `manual`), subject to its overlap policy
    /// unless `force`. Paused and disabled jobs can still be triggered: a
    /// trigger is an explicit human decision, pause only stops the schedule.
    pub fn trigger(
        &mut self,
        name: &str,
        force: bool,
        now: DateTime<Utc>,
    ) -> (TriggerResult, Vec<Action>) {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let known = self.jobs.get(name).is_some_and(|s| !s.removed);
        if !known {
            let names: Vec<&str> = self.order.iter().map(String::as_str).collect();
            let suggestions = crate::suggest::closest(name, names, 3);
            return (TriggerResult::UnknownJob { suggestions }, out);
        }
        if self.stopping {
            return (
                TriggerResult::Skipped {
                    reason: "the daemon is shutting down".into(),
                },
                out,
            );
        }
        let run = if force {
            let pending = self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
            let run = pending.run.clone();
            self.enqueue(pending, now, &mut out);
            Some(run)
        } else {
            self.dispatch(name, Trigger::Manual, 1, now, Duration::ZERO, now, &mut out)
        };
        self.fill_slots(now, &mut out);
        let result = match run {
            Some(run) if self.runs.contains_key(&run) => TriggerResult::Started { run },
            Some(run) => TriggerResult::Queued { run },
            None => TriggerResult::Skipped {
                reason: "a previous run is still running and the job's overlap policy is \"skip\" (use --force to run anyway)"
                    .into(),
            },
        };
        (result, out)
    }

    /// Pauses the schedule of the named jobs. Returns the names that changed.
    pub fn pause(&mut self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| self.jobs.contains_key(*n) && self.paused.insert((*n).clone()))
            .cloned()
            .collect()
    }

    /// Resumes the named jobs. Returns the names that changed.
    pub fn resume(&mut self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|n| self.paused.remove(*n))
            .cloned()
            .collect()
    }

    pub fn paused(&self) -> &BTreeSet<String> {
        &self.paused
    }

    /// Stop starting runs: waiting ones are dropped, running ones go on
    /// until `terminate_all` (after the shutdown grace).
    pub fn shutdown(&mut self) {
        self.stopping = true;
        for p in self.ready.drain(..) {
            if let Some(s) = self.jobs.get_mut(&p.job) {
                s.active = s.active.saturating_sub(1);
            }
        }
        for s in self.jobs.values_mut() {
            s.waiting.clear();
        }
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
        self.ready.len()
    }

    /// Live status of every job in file order. Runs and queued runs are
    /// grouped by job in one pass, not searched once per job.
    pub fn status(&self) -> Vec<JobStatus> {
        let mut running: HashMap<&str, Vec<RunningRun>> = HashMap::new();
        for (id, a) in &self.runs {
            running
                .entry(a.pending.job.as_str())
                .or_default()
                .push(running_run(id, a));
        }
        let mut queued: HashMap<&str, usize> = HashMap::new();
        for p in &self.ready {
            *queued.entry(p.job.as_str()).or_default() += 1;
        }
        self.order
            .iter()
            .filter_map(|name| {
                let runs = running.remove(name.as_str()).unwrap_or_default();
                let in_ready = queued.get(name.as_str()).copied().unwrap_or(0);
                self.job_status_with(name, runs, in_ready)
            })
            .collect()
    }

    /// Live status of one job.
    pub fn job_status(&self, name: &str) -> Option<JobStatus> {
        let runs = self
            .runs
            .iter()
            .filter(|(_, a)| a.pending.job == name)
            .map(|(id, a)| running_run(id, a))
            .collect();
        let in_ready = self.ready.iter().filter(|p| p.job == name).count();
        self.job_status_with(name, runs, in_ready)
    }

    fn job_status_with(
        &self,
        name: &str,
        mut running: Vec<RunningRun>,
        in_ready: usize,
    ) -> Option<JobStatus> {
        let s = self.jobs.get(name)?;
        running.sort_by_key(|a| a.2);
        Some(JobStatus {
            name: name.to_string(),
            enabled: s.def.enabled,
            paused: self.paused.contains(name),
            next_fire: s.next.and_then(|id| match self.heap.get(id) {
                Some(Due::Occurrence { at, .. }) => Some(*at),
                _ => None,
            }),
            retry_at: s.retry.and_then(|id| self.heap.due_of(id)),
            running,
            queued: s.waiting.len() + in_ready,
            consecutive_failures: s.consecutive_failures,
            last: s.last.clone(),
            after: s.def.after.clone(),
        })
    }

    /// Seeds status from the history log at start (last result, failures).
    pub fn seed_last(&mut self, name: &str, last: LastRun, consecutive_failures: u32) {
        if let Some(s) = self.jobs.get_mut(name) {
            s.last = Some(last);
            s.consecutive_failures = consecutive_failures;
        }
    }

    // ---- one-shots -------------------------------------------------------

    /// A fresh id for an unnamed one-shot (time-sortable, like run ids).
    pub fn new_id(&mut self, now: DateTime<Utc>) -> String {
        self.run_counter = self.run_counter.wrapping_add(1);
        run_id(now, self.run_counter)
    }

    /// Whether a one-shot with this id could be submitted now.
    pub fn check_submit(&self, id: &str) -> Result<(), SubmitError> {
        if self.jobs.get(id).is_some_and(|s| !s.removed) {
            return Err(SubmitError::NameTaken(format!(
                "{id:?} is the name of a job in the job file; choose another --name"
            )));
        }
        if self.oneshots.contains_key(id) {
            return Err(SubmitError::Duplicate(format!(
                "a one-shot named {id:?} is already pending"
            )));
        }
        Ok(())
    }

    /// Accepts a new one-shot. The caller makes it durable (journal) before
    /// acknowledging. A due time in the past runs it now.
    pub fn submit(
        &mut self,
        shot: OneShot,
        now: DateTime<Utc>,
    ) -> Result<Vec<Action>, SubmitError> {
        self.check_submit(&shot.id)?;
        let mut out = Vec::new();
        self.advance(now, &mut out);
        self.schedule_oneshot(shot, Trigger::Oneshot, now);
        self.advance(now, &mut out);
        Ok(out)
    }

    /// One-shots replayed from the journal at start. Those whose time passed
    /// while the daemon was down run now (trigger `catch_up`) unless they
    /// expired.
    pub fn restore(&mut self, shots: Vec<OneShot>, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        for shot in shots {
            if shot.due <= now {
                let late = (now - shot.due).to_std().unwrap_or_default();
                if shot.expire().is_some_and(|e| late > e) {
                    let mut rec = Record::new(Event::Run, now);
                    rec.job = Some(shot.id.clone());
                    rec.trigger = Some(Trigger::Oneshot);
                    rec.status = Some(RunStatus::Skipped);
                    rec.scheduled = Some(shot.due);
                    rec.reason = Some(format!(
                        "expired: the daemon was down at its time and came back {} late (--expire {})",
                        crate::duration::format(late),
                        crate::duration::format(shot.expire().unwrap_or_default())
                    ));
                    out.push(Action::Record(Box::new(rec)));
                    out.push(Action::OneShotDone { id: shot.id });
                    continue;
                }
                self.schedule_oneshot(shot, Trigger::CatchUp, now);
            } else {
                self.schedule_oneshot(shot, Trigger::Oneshot, now);
            }
        }
        self.advance(now, &mut out);
        out
    }

    /// Cancels pending one-shots; running ones only with `kill`. Every id
    /// is checked before any is cancelled, so a typo among several cancels
    /// nothing. The actions are returned in both cases: what came due at
    /// `now` must be started even when the request is refused.
    #[allow(clippy::type_complexity)]
    pub fn cancel_oneshots(
        &mut self,
        ids: &[String],
        kill: bool,
        now: DateTime<Utc>,
    ) -> (Result<Vec<CancelResult>, SubmitError>, Vec<Action>) {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        for id in ids {
            let problem = match self.oneshots.get(id.as_str()) {
                None => {
                    let known: Vec<&str> = self.oneshots.keys().map(|k| k.0.id.as_str()).collect();
                    let mut msg = format!("no pending one-shot {id:?}");
                    if let Some(h) = crate::suggest::did_you_mean(id, known) {
                        msg.push_str(&format!(" ({h})"));
                    }
                    Some(SubmitError::Unknown(msg))
                }
                Some(s) if s.running && !kill => Some(SubmitError::Running(format!(
                    "one-shot {id:?} is running; use --kill to terminate it"
                ))),
                Some(_) => None,
            };
            if let Some(e) = problem {
                return (Err(e), out);
            }
        }
        let results = ids
            .iter()
            .map(|id| self.cancel_checked(id, now, &mut out))
            .collect();
        (Ok(results), out)
    }

    /// `cancel_oneshots` for one id (benchmarks and tests).
    pub fn cancel_oneshot(
        &mut self,
        id: &str,
        kill: bool,
        now: DateTime<Utc>,
    ) -> Result<(CancelResult, Vec<Action>), SubmitError> {
        let (result, out) = self.cancel_oneshots(&[id.to_string()], kill, now);
        result.map(|r| (r[0], out))
    }

    /// Cancels a one-shot `cancel_oneshots` has checked.
    fn cancel_checked(
        &mut self,
        id: &str,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> CancelResult {
        let Some(shot) = self.oneshots.get_mut(id) else {
            return CancelResult::Cancelled;
        };
        if shot.running {
            // Its run ends as `killed`; no retry follows an operator's kill.
            for (run, active) in self.runs.iter_mut() {
                if active.pending.oneshot && active.pending.job == id && active.stop.is_none() {
                    active.stop = Some(StopReason::Operator);
                    out.push(Action::Terminate { run: run.clone() });
                }
            }
            return CancelResult::Killing;
        }
        if let Some(e) = shot.entry.take() {
            self.heap.cancel(e);
        }
        let due = shot.def.due;
        self.oneshots.remove(id);
        self.ready.retain(|p| !(p.oneshot && p.job == id));
        let mut rec = Record::new(Event::Run, now);
        rec.job = Some(id.to_string());
        rec.trigger = Some(Trigger::Oneshot);
        rec.status = Some(RunStatus::Cancelled);
        rec.scheduled = Some(due);
        rec.reason = Some("cancelled by operator".into());
        out.push(Action::Record(Box::new(rec)));
        out.push(Action::OneShotDone { id: id.to_string() });
        CancelResult::Cancelled
    }

    /// Pending one-shots (waiting or running), by due time.
    pub fn oneshots(&self) -> Vec<OneShotStatus> {
        let mut v: Vec<OneShotStatus> = self
            .oneshots
            .values()
            .map(|s| OneShotStatus {
                def: s.def.clone(),
                next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
                running: s.running,
            })
            .collect();
        v.sort_by(|a, b| {
            a.def
                .due
                .cmp(&b.def.due)
                .then_with(|| a.def.id.cmp(&b.def.id))
        });
        v
    }

    /// The first `limit` pending one-shots by due time, only those tagged
    /// `tag` if given: `oneshots` without sorting all of them (a `pending`
    /// request with a million waiting sorted a million to show a few).
    pub fn oneshots_first(&self, tag: Option<&str>, limit: usize) -> Vec<OneShotStatus> {
        let mut v: Vec<&ShotState> = self
            .oneshots
            .values()
            .filter(|s| tag.is_none_or(|t| s.def.tags.iter().any(|x| x == t)))
            .collect();
        let order = |a: &&ShotState, b: &&ShotState| {
            a.def
                .due
                .cmp(&b.def.due)
                .then_with(|| a.def.id.cmp(&b.def.id))
        };
        if limit < v.len() {
            v.select_nth_unstable_by(limit, order);
            v.truncate(limit);
        }
        v.sort_by(order);
        v.into_iter()
            .map(|s| OneShotStatus {
                def: s.def.clone(),
                next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
                running: s.running,
            })
            .collect()
    }

    /// One pending one-shot.
    pub fn oneshot(&self, id: &str) -> Option<OneShotStatus> {
        self.oneshots.get(id).map(|s| OneShotStatus {
            def: s.def.clone(),
            next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
            running: s.running,
        })
    }

    /// How many one-shots are pending.
    pub fn oneshot_count(&self) -> usize {
        self.oneshots.len()
    }

    // ---- internals -------------------------------------------------------

    /// Pops and handles every heap entry due at `now`.
    fn advance(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        while let Some((id, _due, entry)) = self.heap.pop_due(now) {
            match entry {
                Due::Occurrence { job, at, jitter } => {
                    self.on_occurrence(&job, id, at, jitter, now, out)
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
                    self.dispatch(
                        &job,
                        Trigger::Retry,
                        attempt,
                        scheduled,
                        Duration::ZERO,
                        now,
                        out,
                    );
                }
            }
        }
        self.fill_slots(now, out);
    }

    /// `name` succeeded: jobs that run `after` it (and all their other
    /// dependencies) start now.
    fn rebuild_dependents(&mut self) {
        self.dependents.clear();
        for (name, state) in &self.jobs {
            for dep in &state.def.after {
                self.dependents
                    .entry(dep.clone())
                    .or_default()
                    .push(name.clone());
            }
        }
    }

    fn dependents_of(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping {
            return;
        }
        let Some(candidates) = self.dependents.get(name) else {
            return;
        };
        let mut ready = Vec::new();
        for dep_name in candidates {
            let Some(state) = self.jobs.get_mut(dep_name) else {
                continue;
            };
            if state.removed || !state.def.enabled {
                continue;
            }
            state.deps_done.insert(name.to_string());
            if state.def.after.iter().all(|a| state.deps_done.contains(a)) {
                state.deps_done.clear();
                ready.push(dep_name.clone());
            }
        }
        for dep in ready {
            if self.paused.contains(&dep) {
                let p = self.new_pending(&dep, Trigger::Dependency, 1, now, Duration::ZERO, now);
                out.push(skip_record(
                    &p,
                    "the job is paused (rea resume to resume)",
                    now,
                ));
                continue;
            }
            self.dispatch(&dep, Trigger::Dependency, 1, now, Duration::ZERO, now, out);
        }
    }

    fn schedule_oneshot(&mut self, shot: OneShot, trigger: Trigger, now: DateTime<Utc>) {
        let due = shot.due.max(now);
        let def = Arc::new(shot);
        let entry = self.heap.insert(
            due,
            Due::OneShot {
                shot: def.clone(),
                attempt: 1,
                trigger,
            },
        );
        self.oneshots.insert(
            ShotKey(def.clone()),
            ShotState {
                def,
                entry: Some(entry),
                running: false,
            },
        );
    }

    fn on_oneshot_due(
        &mut self,
        id: &str,
        attempt: u32,
        trigger: Trigger,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.stopping {
            return;
        }
        let Some(shot) = self.oneshots.get_mut(id) else {
            return;
        };
        shot.entry = None;
        let scheduled = shot.def.due;
        let mut p = self.new_pending(id, trigger, attempt, scheduled, Duration::ZERO, now);
        p.oneshot = true;
        self.enqueue(p, now, out);
    }

    /// A one-shot's run ended: retry per its policy, or it is done.
    fn finish_oneshot(
        &mut self,
        active: &Active,
        mut rec: Record,
        status: RunStatus,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let id = active.pending.job.clone();
        let retryable = matches!(status, RunStatus::Failed | RunStatus::TimedOut);
        let mut done = true;
        if let Some(shot) = self.oneshots.get_mut(id.as_str()) {
            shot.running = false;
            if retryable && !self.stopping && active.stop.is_none() {
                let attempt = active.pending.attempt;
                let policy = shot.def.retry_policy();
                if let Some(delay) = policy.delay_for(attempt, self.rng.f64()) {
                    let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
                    let entry = self.heap.insert(
                        at,
                        Due::OneShot {
                            shot: shot.def.clone(),
                            attempt: attempt + 1,
                            trigger: Trigger::Retry,
                        },
                    );
                    shot.entry = Some(entry);
                    rec.detail = Some(json!({
                        "retry_at": crate::history::format_ts(at)
                    }));
                    done = false;
                } else if policy.attempts > 0 {
                    rec.detail = Some(json!({ "retries_exhausted": true }));
                }
            }
            if self.stopping && active.stop == Some(StopReason::Shutdown) {
                // Terminated by shutdown: still pending, it runs again at the
                // next start (at-least-once).
                done = false;
            }
        }
        out.push(Action::Record(Box::new(rec)));
        if done {
            self.oneshots.remove(id.as_str());
            out.push(Action::OneShotDone { id });
        }
    }

    fn on_occurrence(
        &mut self,
        name: &str,
        id: EntryId,
        at: DateTime<Utc>,
        jitter: Duration,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.next == Some(id) {
            state.next = None;
        }
        state.last_occurrence = Some(state.last_occurrence.map_or(at, |l| l.max(at)));
        if self.stopping {
            return;
        }
        // Occurrences after `at` that have also passed (the daemon was
        // stalled): the first one fires, the rest follow the catch-up policy.
        self.catch_up(name, at, now, true, out);
        self.schedule_next(name, now);
        if self.paused.contains(name) {
            let pending = self.new_pending(name, Trigger::Schedule, 1, at, jitter, now);
            out.push(skip_record(
                &pending,
                "the job is paused (rea resume to resume)",
                now,
            ));
            return;
        }
        // A fresh occurrence supersedes a retry still waiting from the previous
        // one: both would do the same work, and the newer run carries the
        // newer data.
        if let Some(state) = self.jobs.get_mut(name) {
            if let Some(rid) = state.retry.take() {
                self.heap.cancel(rid);
            }
        }
        self.dispatch(name, Trigger::Schedule, 1, at, jitter, now, out);
    }

    /// Occurrences strictly after `after` up to `now`, oldest first, at most
    /// `keep` of the newest kept, plus the total count.
    fn passed(
        &self,
        name: &str,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
        keep: usize,
    ) -> (Vec<DateTime<Utc>>, u64) {
        let Some(state) = self.jobs.get(name) else {
            return (Vec::new(), 0);
        };
        let def = &state.def;
        let mut kept = VecDeque::new();
        let mut count = 0u64;
        let mut cursor = after;
        while let Some(next) = def.next_after(cursor) {
            if next > now || count >= MISSED_COUNT_CAP {
                break;
            }
            count += 1;
            kept.push_back(next);
            if kept.len() > keep.max(1) {
                kept.pop_front();
            }
            cursor = next;
        }
        (kept.into_iter().collect(), count)
    }

    /// Every occurrence in (since, now] was missed (the daemon was down or
    /// stalled, or the clock jumped): apply the job's policy. `covered`: a run
    /// starting now for the occurrence at `since` already does what "once"
    /// asks (the stall case), so only "all" adds runs then.
    fn catch_up(
        &mut self,
        name: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
        covered: bool,
        out: &mut Vec<Action>,
    ) {
        let Some(def) = self.jobs.get(name).map(|s| s.def.clone()) else {
            return;
        };
        let (kept, count) = self.passed(name, since, now, def.catch_up_limit as usize);
        if count == 0 {
            return;
        }
        let latest = *kept.last().unwrap_or(&since);
        self.set_last_occurrence(name, latest);
        match def.catch_up {
            _ if self.paused.contains(name) => out.push(missed_record(name, &kept, count, now)),
            CatchUp::None => out.push(missed_record(name, &kept, count, now)),
            CatchUp::Once if covered => out.push(missed_record(name, &kept, count, now)),
            CatchUp::Once => {
                if count > 1 {
                    out.push(missed_record(name, &kept[..kept.len() - 1], count - 1, now));
                }
                let p = self.new_pending(name, Trigger::CatchUp, 1, latest, Duration::ZERO, now);
                self.push_waiting(name, p, now, out);
            }
            CatchUp::All => self.run_missed(name, &kept, count, now, out),
        }
    }

    /// `catch_up = "all"`: the newest `catch_up_limit` missed occurrences
    /// run one after another; older ones are recorded as missed.
    fn run_missed(
        &mut self,
        name: &str,
        kept: &[DateTime<Utc>],
        count: u64,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let dropped = count.saturating_sub(kept.len() as u64);
        if dropped > 0 {
            out.push(missed_record(name, &[], dropped, now));
        }
        for at in kept {
            let p = self.new_pending(name, Trigger::CatchUp, 1, *at, Duration::ZERO, now);
            self.push_waiting(name, p, now, out);
        }
    }

    fn replan_after_clock_change(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let due: Vec<(String, EntryId, DateTime<Utc>)> = self
            .jobs
            .iter()
            .filter_map(|(name, s)| {
                let id = s.next?;
                match self.heap.get(id) {
                    Some(Due::Occurrence { at, .. }) if *at <= now => Some((name.clone(), id, *at)),
                    _ => None,
                }
            })
            .collect();
        for (name, id, at) in due {
            self.heap.cancel(id);
            if let Some(s) = self.jobs.get_mut(&name) {
                s.next = None;
            }
            // `at` itself is among the missed: look from just before it.
            let since = at - chrono::Duration::milliseconds(1);
            if !self.stopping {
                self.catch_up(&name, since, now, false, out);
            }
            self.schedule_next(&name, now);
        }
    }

    fn set_last_occurrence(&mut self, name: &str, at: DateTime<Utc>) {
        if let Some(s) = self.jobs.get_mut(name) {
            s.last_occurrence = Some(s.last_occurrence.map_or(at, |l| l.max(at)));
        }
    }

    /// Puts the job's next occurrence strictly after both `now` and its last
    /// dealt-with occurrence into the heap.
    fn schedule_next(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.removed || !state.def.enabled || state.def.is_reboot() || state.next.is_some() {
            return;
        }
        let after = state.last_occurrence.map_or(now, |l| l.max(now));
        let Some(at) = state.def.next_after(after) else {
            return;
        };
        let jitter = sample_jitter(&mut self.rng, state.def.jitter);
        let due = at + chrono::Duration::from_std(jitter).unwrap_or_default();
        let id = self.heap.insert(
            due,
            Due::Occurrence {
                job: name.to_string(),
                at,
                jitter,
            },
        );
        state.next = Some(id);
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
        Pending {
            run: run_id(now, self.run_counter),
            job: name.to_string(),
            oneshot: false,
            attempt,
            trigger,
            scheduled,
            jitter,
            ready_at: now,
        }
    }

    /// Applies the job's overlap policy to a new run. Returns the run id if
    /// the run was started or queued.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        name: &str,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        jitter: Duration,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Option<String> {
        let pending = self.new_pending(name, trigger, attempt, scheduled, jitter, now);
        let state = self.jobs.get_mut(name)?;
        if state.active == 0 {
            let run = pending.run.clone();
            self.enqueue(pending, now, out);
            return Some(run);
        }
        match state.def.overlap {
            Overlap::Skip => {
                out.push(skip_record(
                    &pending,
                    "the previous run is still running (overlap = \"skip\")",
                    now,
                ));
                None
            }
            Overlap::Allow => {
                let run = pending.run.clone();
                self.enqueue(pending, now, out);
                Some(run)
            }
            Overlap::Queue => {
                if state.waiting.is_empty() {
                    let run = pending.run.clone();
                    state.waiting.push_back(pending);
                    Some(run)
                } else {
                    out.push(skip_record(
                        &pending,
                        "the previous run is still running and one run is already queued (overlap = \"queue\")",
                        now,
                    ));
                    None
                }
            }
            Overlap::Replace => {
                for old in std::mem::take(&mut state.waiting) {
                    out.push(skip_record(
                        &old,
                        "replaced by a newer run (overlap = \"replace\")",
                        now,
                    ));
                }
                state.waiting.push_back(pending.clone());
                // Not yet spawned: drop it from the global queue.
                let mut i = 0;
                while i < self.ready.len() {
                    if self.ready[i].job == name {
                        if let Some(old) = self.ready.remove(i) {
                            out.push(skip_record(
                                &old,
                                "replaced by a newer run (overlap = \"replace\")",
                                now,
                            ));
                            state.active = state.active.saturating_sub(1);
                        }
                    } else {
                        i += 1;
                    }
                }
                for (run, active) in self.runs.iter_mut() {
                    if active.pending.job == name && active.stop.is_none() {
                        active.stop = Some(StopReason::Replaced);
                        out.push(Action::Terminate { run: run.clone() });
                    }
                }
                if state.active == 0 {
                    if let Some(p) = state.waiting.pop_front() {
                        self.enqueue(p, now, out);
                    }
                }
                Some(pending.run)
            }
        }
    }

    /// Waits behind the job's active run (or starts if there is none).
    fn push_waiting(&mut self, name: &str, p: Pending, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        state.waiting.push_back(p);
        self.kick(name, now, out);
    }

    /// Starts the job's next waiting run if it has no active one.
    fn kick(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.active > 0 || self.stopping {
            return;
        }
        if let Some(mut p) = state.waiting.pop_front() {
            p.ready_at = now;
            self.enqueue(p, now, out);
        }
    }

    /// Into the global queue (counts as active for the job's overlap).
    fn enqueue(&mut self, mut p: Pending, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if let Some(state) = self.jobs.get_mut(&p.job) {
            state.active += 1;
        }
        p.ready_at = now;
        self.ready.push_back(p);
        self.fill_slots(now, out);
    }

    fn fill_slots(&mut self, _now: DateTime<Utc>, out: &mut Vec<Action>) {
        while !self.stopping && self.runs.len() < self.max_concurrent {
            let Some(p) = self.ready.pop_front() else {
                break;
            };
            let def = if p.oneshot {
                match self.oneshots.get_mut(p.job.as_str()) {
                    Some(shot) => {
                        shot.running = true;
                        Def::OneShot(shot.def.clone())
                    }
                    None => continue,
                }
            } else {
                match self.jobs.get(&p.job) {
                    Some(state) => Def::Job(state.def.clone()),
                    None => continue,
                }
            };
            out.push(Action::Start(StartRun {
                run: p.run.clone(),
                name: p.job.clone(),
                def: def.clone(),
                attempt: p.attempt,
                trigger: p.trigger,
                scheduled: p.scheduled,
            }));
            self.runs.insert(
                p.run.clone(),
                Active {
                    pending: p,
                    def,
                    started: None,
                    stop: None,
                },
            );
        }
    }

    /// Bookkeeping common to every end of a run.
    fn finish(
        &mut self,
        active: Active,
        mut rec: Record,
        status: RunStatus,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let name = active.pending.job.clone();
        if active.pending.oneshot {
            self.finish_oneshot(&active, rec, status, now, out);
            self.fill_slots(now, out);
            return;
        }
        let Some(state) = self.jobs.get_mut(&name) else {
            out.push(Action::Record(Box::new(rec)));
            return;
        };
        state.active = state.active.saturating_sub(1);
        match status {
            RunStatus::Succeeded => state.consecutive_failures = 0,
            RunStatus::Failed | RunStatus::TimedOut => state.consecutive_failures += 1,
            _ => {}
        }
        if let (Some(ended), Some(started)) = (rec.ended, rec.started.or(rec.ended)) {
            state.last = Some(LastRun {
                run: active.pending.run.clone(),
                status,
                ended,
                duration: (ended - started).to_std().unwrap_or_default(),
                exit_code: rec.exit_code,
            });
        }
        let retryable = matches!(status, RunStatus::Failed | RunStatus::TimedOut);
        let mut exhausted = false;
        if retryable && !state.removed && !self.stopping {
            let attempt = active.pending.attempt;
            let unit = self.rng.f64();
            if let Some(delay) = state.def.retry.delay_for(attempt, unit) {
                let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
                if let Some(old) = state.retry.take() {
                    self.heap.cancel(old);
                }
                let id = self.heap.insert(
                    at,
                    Due::Retry {
                        job: name.clone(),
                        scheduled: active.pending.scheduled,
                        attempt: attempt + 1,
                    },
                );
                state.retry = Some(id);
                rec.detail = Some(json!({ "retry_at": crate::history::format_ts(at) }));
            } else if state.def.retry.attempts > 0 {
                rec.detail = Some(json!({ "retries_exhausted": true }));
                exhausted = true;
            }
        }
        let after_run = after_run(&state.def, &rec, status, exhausted);
        out.push(Action::Record(Box::new(rec)));
        if let Some(a) = after_run {
            out.push(Action::AfterRun(Box::new(a)));
        }
        if status == RunStatus::Succeeded {
            self.dependents_of(&name, now, out);
        }
        let Some(state) = self.jobs.get_mut(&name) else {
            return;
        };
        if state.removed && state.active == 0 {
            self.jobs.remove(&name);
        } else {
            self.kick(&name, now, out);
        }
        self.fill_slots(now, out);
    }

    /// The job left the file: cancel what is pending, let runs finish.
    fn retire(&mut self, name: &str) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        state.removed = true;
        for id in [state.next.take(), state.retry.take()]
            .into_iter()
            .flatten()
        {
            self.heap.cancel(id);
        }
        state.waiting.clear();
        let before = self.ready.len();
        self.ready.retain(|p| p.job != name);
        state.active = state.active.saturating_sub(before - self.ready.len());
        if state.active == 0 {
            self.jobs.remove(name);
        }
    }
}

impl JobState {
    fn new(def: Arc<Job>) -> JobState {
        JobState {
            def,
            removed: false,
            next: None,
            last_occurrence: None,
            retry: None,
            active: 0,
            waiting: VecDeque::new(),
            consecutive_failures: 0,
            last: None,
            deps_done: BTreeSet::new(),
        }
    }
}

/// The hooks and mail a finished run calls for.
fn after_run(def: &Arc<Job>, rec: &Record, status: RunStatus, exhausted: bool) -> Option<AfterRun> {
    let mut hooks = Vec::new();
    let failed = matches!(status, RunStatus::Failed | RunStatus::TimedOut);
    if status == RunStatus::Succeeded {
        if let Some(h) = &def.on_success {
            hooks.push((Hook::Success, h.clone()));
        }
    }
    if failed {
        if let Some(h) = &def.on_failure {
            hooks.push((Hook::Failure, h.clone()));
        }
        if exhausted {
            if let Some(h) = &def.on_retry_exhausted {
                hooks.push((Hook::RetryExhausted, h.clone()));
            }
        }
    }
    let mail = !def.mailto.is_empty()
        && match def.mail_on {
            crate::config::MailOn::Failure => {
                matches!(
                    status,
                    RunStatus::Failed | RunStatus::TimedOut | RunStatus::Killed
                )
            }
            crate::config::MailOn::Output => rec.output.as_deref().is_some_and(|o| !o.is_empty()),
            crate::config::MailOn::Always => status != RunStatus::Skipped,
        };
    (!hooks.is_empty() || mail).then(|| AfterRun {
        job: def.clone(),
        record: rec.clone(),
        hooks,
        mail,
    })
}

fn sample_jitter(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let ms = max.as_millis().min(u64::MAX as u128) as u64;
    Duration::from_millis(rng.u64(0..=ms))
}

fn ms(d: chrono::Duration) -> u64 {
    d.num_milliseconds().max(0) as u64
}

fn run_record(p: &Pending, status: RunStatus, now: DateTime<Utc>) -> Record {
    let mut rec = Record::new(Event::Run, now);
    rec.job = Some(p.job.clone());
    rec.run = Some(p.run.clone());
    rec.attempt = Some(p.attempt);
    rec.trigger = Some(p.trigger);
    rec.status = Some(status);
    rec.scheduled = Some(p.scheduled);
    if !p.jitter.is_zero() {
        rec.jitter_ms = Some(p.jitter.as_millis() as u64);
    }
    rec
}

fn skip_record(p: &Pending, reason: &str, now: DateTime<Utc>) -> Action {
    let mut rec = run_record(p, RunStatus::Skipped, now);
    rec.reason = Some(reason.to_string());
    Action::Record(Box::new(rec))
}

fn missed_record(name: &str, kept: &[DateTime<Utc>], count: u64, now: DateTime<Utc>) -> Action {
    let mut rec = Record::new(Event::Missed, now);
    rec.job = Some(name.to_string());
    rec.count = Some(count);
    rec.scheduled = kept.last().copied();
    rec.reason = Some(if count >= MISSED_COUNT_CAP {
        format!("at least {count} occurrences passed while the daemon was not running them (catch_up policy)")
    } else {
        format!(
            "{count} occurrence(s) passed while the daemon was not running them (catch_up policy)"
        )
    });
    if let Some(first) = kept.first() {
        rec.detail =
            Some(json!({ "first": first.to_rfc3339_opts(chrono::SecondsFormat::Secs, true) }));
    }
    Action::Record(Box::new(rec))
}

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Run ids sort by creation time: 10 base32 digits of milliseconds since the
/// epoch and 4 of a per-daemon counter that starts at a random value, so ids
/// from successive daemons in one state directory do not collide.
fn run_id(now: DateTime<Utc>, counter: u32) -> String {
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
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
