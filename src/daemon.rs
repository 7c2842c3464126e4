//! `rea run`: the event loop. It owns every piece of mutable state (the
//! engine, the run handles, the history writer, the current configuration)
//! on one thread and turns the engine's actions into I/O: spawning runs,
//! signalling process groups, appending history lines. Everything that
//! happens (a timer, a finished run, a signal, a control request, a changed
//! job file) arrives here as an event; nothing here decides policy.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::config::Job;
use crate::config::{self, Config};
use crate::control::{self, Incoming, Reply, Request, Response, Selector};
use crate::engine::{
    Action, AfterRun, CancelResult, Def, Engine, JobStatus, Recovered, StartRun, SubmitError,
    TriggerResult,
};
use crate::executor::{self, Outcome, Program, RunHandle, RunSpec};
use crate::history::{
    self, Event, HistoryReader, HistoryStore, JsonlHistory, JsonlReader, Record, RunStatus,
};
use crate::oneshot::{Journal, OneShot};
use crate::state_dir;
use crate::timer::{Wake, WallTimer};

/// What `rea run` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub file: PathBuf,
    pub state_dir: PathBuf,
    pub allow_insecure: bool,
}

/// Why the daemon could not start; each carries a message for people.
#[derive(Debug)]
pub enum StartError {
    Config(Vec<config::Diagnostic>),
    Locked(String),
    Other(String),
}

/// One-shots have no job file entry; these stand in for its defaults.
const ONESHOT_KILL_GRACE: Duration = Duration::from_secs(10);
const ONESHOT_OUTPUT_LIMIT: usize = 64 * 1024;

/// Requests handled in one loop iteration at most (a flood of pipelined
/// submissions must not starve timers and finished runs).
const MAX_BATCH: usize = 20_000;

/// Messages from tasks to the loop.
enum Msg {
    Finished { run: String, outcome: Box<Outcome> },
}

/// Does nothing; see [`run`] for why SIGXFSZ is caught rather than ignored.
extern "C" fn on_sigxfsz(_: libc::c_int) {}

/// Runs the daemon until SIGTERM/SIGINT. Blocks the calling thread.
pub fn run(opts: Options) -> Result<(), StartError> {
    // Under a file-size limit (`ulimit -f`, systemd's LimitFSIZE=) a write
    // past it raises SIGXFSZ, whose default action kills the daemon. With
    // the signal handled, the write fails with EFBIG instead and scheduling
    // goes on while history records wait in the backlog. Handled, not
    // ignored: exec resets handled signals to the default, so jobs keep
    // the usual SIGXFSZ semantics, whereas SIG_IGN would be inherited.
    // SAFETY: the handler does nothing, and no other thread exists yet.
    unsafe {
        libc::signal(libc::SIGXFSZ, on_sigxfsz as *const () as libc::sighandler_t);
    }
    // One thread: the loop is the only owner of state, and child processes
    // are awaited through pidfds, so more threads would buy nothing.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Other(format!("cannot start the runtime: {e}")))?;
    rt.block_on(main_loop(opts))
}

/// Loads the job file unless its bytes hash to `known`; logs the machine's
/// warnings about a newly loaded file.
fn load(opts: &Options, known: Option<u64>) -> Result<Option<Config>, Vec<config::Diagnostic>> {
    let options = config::LoadOptions {
        allow_insecure_permissions: opts.allow_insecure,
    };
    let cfg = config::load_if_changed(&opts.file, options, known)?;
    for w in cfg.iter().flat_map(|c| &c.warnings) {
        warn!("{w}");
    }
    Ok(cfg)
}

async fn main_loop(opts: Options) -> Result<(), StartError> {
    state_dir::ensure(&opts.state_dir).map_err(StartError::Other)?;
    let _lock = state_dir::lock(&opts.state_dir).map_err(|e| match e {
        state_dir::LockError::Held { pid, path } => StartError::Locked(format!(
            "another rea daemon{} is already running with state directory {} (lock {})",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            opts.state_dir.display(),
            path.display()
        )),
        state_dir::LockError::Io(m) => StartError::Other(m),
    })?;
    // Watch before the first load: an edit in between then causes one
    // harmless extra reload instead of being lost.
    let (watcher, mut changes) = match crate::watch::watch(&opts.file) {
        Ok((w, rx)) => (Some(w), rx),
        Err(e) => {
            warn!("{e}; the job file is not watched (reload with SIGHUP or `rea reload`)");
            (None, tokio::sync::mpsc::unbounded_channel().1)
        }
    };
    let config = load(&opts, None)
        .map_err(StartError::Config)?
        .ok_or_else(|| StartError::Other("the job file could not be loaded".into()))?;
    let history = JsonlHistory::open(
        &opts.state_dir,
        config.daemon.history_max_bytes,
        config.daemon.history_files,
    )
    .map_err(|e| {
        StartError::Other(format!(
            "cannot open the history log in {}: {e}",
            opts.state_dir.display()
        ))
    })?;
    let paused = state_dir::load_paused(&opts.state_dir).unwrap_or_else(|e| {
        warn!("{e}");
        BTreeSet::new()
    });
    let replayed = Journal::open(&opts.state_dir).map_err(|e| {
        StartError::Other(format!(
            "cannot open the one-shot journal {}: {e}",
            crate::oneshot::journal_path(&opts.state_dir).display()
        ))
    })?;
    if replayed.malformed > 0 {
        warn!(
            lines = replayed.malformed,
            "ignored unreadable lines in the one-shot journal (a torn last write)"
        );
    }
    // Bound now, so a taken metrics address fails the start
    // (before the control socket, which would be left behind).
    let (mut metrics, mut scrapes) = crate::metrics::start(&config)
        .await
        .map_err(StartError::Other)?;
    let listener = control::bind(&opts.state_dir).map_err(StartError::Other)?;

    let (recovered, summaries) = recover(&opts, &config, paused);
    let started_at = Utc::now();
    let mut engine = Engine::new(&config, fastrand::u64(..));
    for (name, s) in summaries {
        if let (Some(m), Some(at)) = (metrics.as_mut(), s.last_success) {
            m.seed_last_success(&name, at);
        }
        if let Some(last) = s.last.as_ref().and_then(last_run_of) {
            engine.seed_last(&name, last, s.consecutive_failures as u32);
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let (ctl_tx, mut ctl_rx) = mpsc::unbounded_channel::<Incoming>();
    tokio::spawn(control::serve(listener, ctl_tx));
    let mut d = Loop {
        engine,
        history,
        handles: HashMap::new(),
        tx,
        waiters: HashMap::new(),
        config,
        opts: opts.clone(),
        started_at,
        last_reload: started_at,
        config_error: None,
        journal: replayed.journal,
        metrics,
        notify: crate::notify::Notifier::from_env(),
    };
    let mut rec = Record::new(Event::DaemonStarted, started_at);
    rec.detail = Some(json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "file": opts.file.display().to_string(),
    }));
    d.append(&rec);
    let mut actions: VecDeque<Action> = d.engine.start(started_at, recovered).into();
    let restored = replayed.pending.len();
    actions.extend(d.engine.restore(replayed.pending, started_at));
    if restored > 0 {
        info!(pending = restored, "one-shots restored from the journal");
    }
    release_freed_memory();
    info!(
        jobs = d.config.jobs.len(),
        file = %opts.file.display(),
        state_dir = %opts.state_dir.display(),
        "rea daemon started"
    );

    let mut timer =
        WallTimer::new().map_err(|e| StartError::Other(format!("cannot create a timer: {e}")))?;
    let sig = |kind| signal(kind).map_err(|e| StartError::Other(e.to_string()));
    let mut sigterm = sig(SignalKind::terminate())?;
    let mut sigint = sig(SignalKind::interrupt())?;
    let mut sighup = sig(SignalKind::hangup())?;
    let mut shutdown_deadline: Option<tokio::time::Instant> = None;
    d.execute(&mut actions);
    d.notify_ready();

    loop {
        d.execute(&mut actions);
        d.notify_summary();
        if shutdown_deadline.is_some() && d.engine.running() == 0 {
            break;
        }
        if let Err(e) = timer.arm(d.engine.next_wake()) {
            error!("cannot arm the timer: {e}");
        }
        let deadline = shutdown_deadline;
        tokio::select! {
            biased;
            _ = sigterm.recv() => d.on_stop_signal("SIGTERM", &mut shutdown_deadline, &mut actions),
            _ = sigint.recv() => d.on_stop_signal("SIGINT", &mut shutdown_deadline, &mut actions),
            Some(Msg::Finished { run, outcome }) = rx.recv() => {
                d.handles.remove(&run);
                actions.extend(d.engine.finished(&run, &outcome, Utc::now()));
            },
            wake = timer.wait() => {
                let changed = matches!(wake, Ok(Wake::ClockChanged));
                if changed {
                    warn!("the wall clock was changed; re-planning every job");
                }
                if let Err(e) = &wake {
                    error!("timer error: {e}");
                }
                actions.extend(d.engine.wake(Utc::now(), changed));
            },
            Some(change) = changes.recv(), if watcher.is_some() => match change {
                crate::watch::Change::Modified => {
                    info!("the job file changed; reloading");
                    let _ = d.reload(&mut actions, false);
                }
                crate::watch::Change::Missing => warn!(
                    file = %opts.file.display(),
                    "the job file is gone; still running the last good configuration"
                ),
                crate::watch::Change::Warning(m) => warn!("{m}"),
            },
            _ = sighup.recv() => {
                info!("SIGHUP: reloading the job file");
                let _ = d.reload(&mut actions, true);
            },
            Some(scrape) = scrapes.recv(), if d.metrics.is_some() => d.on_scrape(scrape),
            Some(incoming) = ctl_rx.recv() => {
                let mut batch: Vec<(OneShot, oneshot::Sender<Reply>)> = Vec::new();
                d.incoming(incoming, &mut batch, &mut actions);
                for _ in 0..MAX_BATCH {
                    match ctl_rx.try_recv() {
                        Ok(more) => d.incoming(more, &mut batch, &mut actions),
                        Err(_) => break,
                    }
                }
                d.commit_submissions(&mut batch, &mut actions);
            },
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() => {
                warn!(running = d.engine.running(), "shutdown grace expired; terminating running jobs");
                actions.extend(d.engine.terminate_all());
                // Terminated runs still report; wait for them without a new
                // deadline (their groups get SIGKILL after each kill_grace).
                shutdown_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(365 * 86_400));
            },
        }
    }
    let mut rec = Record::new(Event::DaemonStopped, Utc::now());
    rec.reason = Some("signal".into());
    d.append(&rec);
    let _ = std::fs::remove_file(control::socket_path(&opts.state_dir));
    info!("rea daemon stopped");
    Ok(())
}

/// Parsing a large job file (its spanned TOML tree) or replaying a large
/// one-shot journal allocates far more than the daemon keeps; glibc holds
/// the freed memory in its arenas, so the process would keep the peak as its
/// RSS forever. Hand it back once the big work is done.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What the previous daemon left in the history log.
fn recover(
    opts: &Options,
    config: &Config,
    paused: BTreeSet<String>,
) -> (Recovered, HashMap<String, history::JobSummary>) {
    let reader = JsonlReader::new(&opts.state_dir);
    let names: std::collections::HashSet<String> =
        config.jobs.iter().map(|j| j.name.clone()).collect();
    let (last_occurrences, previous_start) =
        reader.last_occurrences(&names).unwrap_or_else(|e| {
            warn!("cannot read the history log for catch-up ({e}); missed occurrences will not be caught up");
            Default::default()
        });
    let unfinished = reader.unfinished_runs().unwrap_or_else(|e| {
        warn!("cannot read the history log for interrupted runs: {e}");
        Vec::new()
    });
    let summaries = reader.recent_summaries(&names).unwrap_or_else(|e| {
        warn!("cannot read the history log for the last results: {e}");
        Default::default()
    });
    (
        Recovered {
            last_occurrences,
            previous_start,
            unfinished,
            paused,
        },
        summaries,
    )
}

fn last_run_of(s: &history::RunSummary) -> Option<crate::engine::LastRun> {
    let ended = s.ended.or(s.started)?;
    Some(crate::engine::LastRun {
        run: s.run.clone().unwrap_or_default(),
        status: s.status,
        ended,
        duration: Duration::from_millis(s.duration_ms.unwrap_or(0)),
        exit_code: s.exit_code,
    })
}

struct Loop {
    engine: Engine,
    history: JsonlHistory,
    handles: HashMap<String, RunHandle>,
    tx: mpsc::UnboundedSender<Msg>,
    /// `trigger --wait` clients, by run id, told the final record.
    waiters: HashMap<String, Vec<oneshot::Sender<Value>>>,
    /// The configuration in force (the last good one).
    config: Config,
    opts: Options,
    started_at: DateTime<Utc>,
    last_reload: DateTime<Utc>,
    /// Set while the file on disk is invalid: (when, errors).
    config_error: Option<(DateTime<Utc>, Vec<String>)>,
    /// Durable pending one-shots.
    journal: Journal,
    /// The Prometheus endpoint's metrics (`[daemon] metrics`), if served.
    metrics: Option<crate::metrics::Metrics>,
    /// systemd's `NOTIFY_SOCKET`, if set.
    notify: crate::notify::Notifier,
}

impl Loop {
    fn on_stop_signal(
        &mut self,
        name: &str,
        deadline: &mut Option<tokio::time::Instant>,
        actions: &mut VecDeque<Action>,
    ) {
        let grace = self.config.daemon.shutdown_grace;
        if deadline.is_none() {
            info!(
                signal = name,
                running = self.engine.running(),
                grace = %crate::duration::format(grace),
                "stopping: no new runs; waiting for running jobs (send the signal again to stop them now)"
            );
            self.engine.shutdown();
            *deadline = Some(tokio::time::Instant::now() + grace);
            self.notify.stopping(&format!(
                "stopping: waiting for {} running job(s)",
                self.engine.running()
            ));
        } else {
            warn!(signal = name, "second signal: terminating running jobs now");
            actions.extend(self.engine.terminate_all());
        }
    }

    /// Re-reads the job file. An invalid file changes nothing but the banner.
    /// Unless `force` (SIGHUP), a file whose bytes are those of the
    /// configuration in force is not parsed again: an edit seen by the
    /// watcher and then by `rea reload` (or the other way round) costs one
    /// parse, which matters for a 100,000-job file.
    fn reload(
        &mut self,
        actions: &mut VecDeque<Action>,
        force: bool,
    ) -> Result<Value, Vec<String>> {
        let now = Utc::now();
        let known = (!force && self.config_error.is_none()).then_some(self.config.digest);
        self.notify.reloading();
        let result = match load(&self.opts, known) {
            Ok(None) => Ok(json!({ "jobs": self.config.jobs.len(), "unchanged": true })),
            Ok(Some(cfg)) => {
                if self.config_error.take().is_some() {
                    info!("the job file is valid again");
                }
                actions.extend(self.engine.reload(&cfg, now));
                crate::metrics::reloaded(self.metrics.as_mut(), &self.config, &cfg);
                self.history
                    .set_rotation(cfg.daemon.history_max_bytes, cfg.daemon.history_files);
                self.config = cfg;
                self.last_reload = now;
                release_freed_memory();
                info!(jobs = self.config.jobs.len(), "job file reloaded");
                Ok(json!({ "jobs": self.config.jobs.len() }))
            }
            Err(diags) => {
                let errors: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
                for e in &errors {
                    error!("{e}");
                }
                error!(
                    "the job file has {} error(s); still running the last good configuration",
                    errors.len()
                );
                let mut rec = Record::new(Event::ConfigRejected, now);
                rec.count = Some(errors.len() as u64);
                rec.reason = Some(errors.join("\n"));
                rec.detail = Some(json!({ "file": self.opts.file.display().to_string() }));
                self.append(&rec);
                self.config_error = Some((now, errors.clone()));
                Err(errors)
            }
        };
        self.notify_ready();
        result
    }

    /// Answers one control request.
    fn control(&mut self, request: Request, actions: &mut VecDeque<Action>) -> Reply {
        let now = Utc::now();
        match request {
            Request::Ping => Reply::Done(Response::ok(json!({ "pid": std::process::id() }))),
            Request::Submit(_) => Reply::Done(Response::err("bad_request", "submit is handled in batches")),
            Request::Cancel { ids, kill } => {
                let (result, acts) = self.engine.cancel_oneshots(&ids, kill, now);
                actions.extend(acts);
                match result {
                    Ok(results) => {
                        let done: Vec<Value> = ids
                            .iter()
                            .zip(results)
                            .map(|(id, r)| {
                                json!({
                                    "id": id,
                                    "result": match r {
                                        CancelResult::Cancelled => "cancelled",
                                        CancelResult::Killing => "killing",
                                    },
                                })
                            })
                            .collect();
                        Reply::Done(Response::ok(json!({ "cancelled": done })))
                    }
                    Err(e) => {
                        let code = match e {
                            SubmitError::Unknown(_) => "unknown_job",
                            _ => "refused",
                        };
                        Reply::Done(Response::err(code, e.message()))
                    }
                }
            }
            Request::Pending { tag, limit } => {
                let list: Vec<Value> = self
                    .engine
                    .oneshots_first(tag.as_deref(), limit.unwrap_or(usize::MAX))
                    .iter()
                    .map(oneshot_json)
                    .collect();
                Reply::Done(Response::ok(json!({
                    "pending": self.engine.oneshot_count(),
                    "oneshots": list,
                })))
            }
            Request::Status { job } => {
                if let Some(name) = &job {
                    if self.engine.job_status(name).is_none() {
                        if let Some(shot) = self.engine.oneshot(name) {
                            let mut v = self.status_json(Some(name), now);
                            v["oneshot"] = oneshot_json(&shot);
                            return Reply::Done(Response::ok(v));
                        }
                        return Reply::Done(self.unknown_job(name));
                    }
                }
                Reply::Done(Response::ok(self.status_json(job.as_deref(), now)))
            }
            Request::Reload => match self.reload(actions, false) {
                Ok(v) => Reply::Done(Response::ok(v)),
                Err(errors) => Reply::Done(
                    Response::err(
                        "invalid_config",
                        format!(
                            "the job file has {} error(s); the daemon keeps its last good configuration",
                            errors.len()
                        ),
                    )
                    .with_suggestions(errors),
                ),
            },
            Request::Pause(sel) => self.pause_resume(sel, true),
            Request::Resume(sel) => self.pause_resume(sel, false),
            Request::Trigger { job, force, wait } => {
                let (result, acts) = self.engine.trigger(&job, force, now);
                actions.extend(acts);
                match result {
                    TriggerResult::UnknownJob { suggestions } => Reply::Done(
                        Response::err("unknown_job", format!("no job named {job:?}"))
                            .with_suggestions(suggestions),
                    ),
                    TriggerResult::Skipped { reason } => {
                        Reply::Done(Response::err("refused", format!("not started: {reason}")))
                    }
                    TriggerResult::Started { run } | TriggerResult::Queued { run } => {
                        let state = if self.engine.running_run(&run) { "started" } else { "queued" };
                        let first = Response::ok(json!({ "run": run, "job": job, "state": state }));
                        if wait {
                            let (tx, rx) = oneshot::channel();
                            self.waiters.entry(run).or_default().push(tx);
                            Reply::Follow(first, rx)
                        } else {
                            Reply::Done(first)
                        }
                    }
                }
            }
        }
    }

    /// One control request. Submissions are validated and queued for the
    /// group commit; anything else first commits the queued ones, so a
    /// pipelined client sees its requests take effect in order.
    fn incoming(
        &mut self,
        incoming: Incoming,
        batch: &mut Vec<(OneShot, oneshot::Sender<Reply>)>,
        actions: &mut VecDeque<Action>,
    ) {
        match incoming.request {
            Request::Submit(sub) => match self.prepare_submission(sub, batch) {
                Ok(shot) => {
                    self.journal.add(&shot);
                    batch.push((shot, incoming.reply));
                }
                Err(resp) => {
                    let _ = incoming.reply.send(Reply::Done(resp));
                }
            },
            request => {
                self.commit_submissions(batch, actions);
                let reply = self.control(request, actions);
                let _ = incoming.reply.send(reply);
            }
        }
    }

    /// Validates a submission and turns it into a one-shot.
    fn prepare_submission(
        &mut self,
        sub: control::Submission,
        batch: &[(OneShot, oneshot::Sender<Reply>)],
    ) -> Result<OneShot, Response> {
        let now = Utc::now();
        let bad = |m: String| Response::err("bad_request", m);
        if sub.argv.is_empty() || sub.argv[0].is_empty() {
            return Err(bad("nothing to run: give a command after --".into()));
        }
        if sub.shell && sub.argv.len() != 1 {
            return Err(bad("with shell, argv must be exactly one script".into()));
        }
        if !sub.dir.is_absolute() {
            return Err(bad(format!(
                "dir must be an absolute path, not {:?}",
                sub.dir
            )));
        }
        let due = match (sub.at, sub.in_ms) {
            (Some(at), None) => at,
            (None, Some(ms)) => {
                now + chrono::Duration::milliseconds(ms.min(i64::MAX as u64 / 2) as i64)
            }
            _ => return Err(bad("say when: exactly one of \"at\" and \"in_ms\"".into())),
        };
        let id = match sub.name {
            Some(n) => {
                if let Some(why) = config::name_problem(&n) {
                    return Err(bad(format!("invalid name {n:?}: {why}")));
                }
                n
            }
            None => format!("oneshot-{}", self.engine.new_id(now)),
        };
        if batch.iter().any(|(s, _)| s.id == id) {
            return Err(Response::err(
                "duplicate",
                format!("a one-shot named {id:?} is already pending"),
            ));
        }
        if let Err(e) = self.engine.check_submit(&id) {
            let code = if matches!(e, SubmitError::Duplicate(_)) {
                "duplicate"
            } else {
                "bad_request"
            };
            return Err(Response::err(code, e.message()));
        }
        Ok(OneShot {
            id,
            argv: sub.argv,
            shell: sub.shell,
            dir: sub.dir,
            env: sub.env,
            due,
            submitted: now,
            expire_ms: sub.expire_ms,
            timeout_ms: sub.timeout_ms,
            retry: sub.retry,
            tags: sub.tags,
        })
    }

    /// Makes the queued submissions durable with one write and one sync,
    /// then hands them to the engine and acknowledges them.
    fn commit_submissions(
        &mut self,
        batch: &mut Vec<(OneShot, oneshot::Sender<Reply>)>,
        actions: &mut VecDeque<Action>,
    ) {
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.journal.commit() {
            error!("cannot write the one-shot journal: {e}");
            self.journal.discard();
            for (shot, reply) in batch.drain(..) {
                let _ = reply.send(Reply::Done(Response::err(
                    "refused",
                    format!("cannot make one-shot {:?} durable: {e}", shot.id),
                )));
            }
            return;
        }
        let now = Utc::now();
        for (shot, reply) in batch.drain(..) {
            let id = shot.id.clone();
            let due = shot.due;
            match self.engine.submit(shot, now) {
                Ok(acts) => {
                    actions.extend(acts);
                    let _ = reply.send(Reply::Done(Response::ok(json!({
                        "id": id,
                        "due": history::format_ts(due),
                    }))));
                }
                Err(e) => {
                    // Validated before the commit; only a race inside this very
                    // batch gets here. Undo the journal line.
                    self.journal.del(&id);
                    let _ = reply.send(Reply::Done(Response::err("refused", e.message())));
                }
            }
        }
    }

    fn unknown_job(&self, name: &str) -> Response {
        let names: Vec<&str> = self.config.jobs.iter().map(|j| j.name.as_str()).collect();
        Response::err("unknown_job", format!("no job named {name:?}"))
            .with_suggestions(crate::suggest::closest(name, names, 3))
    }

    fn pause_resume(&mut self, sel: Selector, pause: bool) -> Reply {
        let mut names: Vec<String> = Vec::new();
        for n in &sel.jobs {
            if !self.config.jobs.iter().any(|j| &j.name == n) {
                return Reply::Done(self.unknown_job(n));
            }
            names.push(n.clone());
        }
        if let Some(tag) = &sel.tag {
            let tagged: Vec<String> = self
                .config
                .jobs
                .iter()
                .filter(|j| j.tags.iter().any(|t| t == tag))
                .map(|j| j.name.clone())
                .collect();
            if tagged.is_empty() {
                return Reply::Done(Response::err(
                    "unknown_job",
                    format!("no job has the tag {tag:?}"),
                ));
            }
            names.extend(tagged);
        }
        if sel.all {
            names.extend(self.config.jobs.iter().map(|j| j.name.clone()));
        }
        if names.is_empty() {
            return Reply::Done(Response::err(
                "bad_request",
                "name jobs, --tag TAG or --all",
            ));
        }
        let changed = if pause {
            self.engine.pause(&names)
        } else {
            self.engine.resume(&names)
        };
        if let Err(e) = state_dir::save_paused(&self.opts.state_dir, self.engine.paused()) {
            error!("{e}");
            return Reply::Done(Response::err(
                "refused",
                format!("{e}; the change holds until the daemon restarts"),
            ));
        }
        for n in &changed {
            info!(
                job = n.as_str(),
                "{}",
                if pause { "paused" } else { "resumed" }
            );
        }
        Reply::Done(Response::ok(json!({
            "changed": changed,
            "paused": self.engine.paused().iter().collect::<Vec<_>>(),
        })))
    }

    fn status_json(&self, only: Option<&str>, now: DateTime<Utc>) -> Value {
        let statuses = match only {
            Some(name) => self.engine.job_status(name).into_iter().collect(),
            None => self.engine.status(),
        };
        let jobs: Vec<Value> = statuses.iter().map(job_json).collect();
        let fmt = history::format_ts;
        json!({
            "live": true,
            "daemon": {
                "running": true,
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "started_at": fmt(self.started_at),
                "uptime_s": (now - self.started_at).num_seconds().max(0),
                "file": self.opts.file.display().to_string(),
                "state_dir": self.opts.state_dir.display().to_string(),
                "last_reload": fmt(self.last_reload),
                "config_error": self.config_error.as_ref().map(|(at, errors)| json!({
                    "at": fmt(*at),
                    "errors": errors,
                })),
                "running_runs": self.engine.running(),
                "max_concurrent": self.engine.max_concurrent(),
                "queued": self.engine.queued(),
                "oneshots_pending": self.engine.oneshot_count(),
                "history": {
                    "backlog": self.history.backlog_len(),
                    "dropped": self.history.dropped(),
                    "last_error": self.history.last_error().map(|e| json!({
                        "at": fmt(e.at),
                        "message": e.message,
                    })),
                },
            },
            "jobs": jobs,
        })
    }

    /// Carries out actions until none are left (an action's answer may
    /// produce more, e.g. a failed spawn frees a slot).
    fn execute(&mut self, actions: &mut VecDeque<Action>) {
        self.execute_actions(actions);
        self.sync_journal();
    }

    fn execute_actions(&mut self, actions: &mut VecDeque<Action>) {
        while let Some(action) = actions.pop_front() {
            match action {
                Action::Record(rec) => {
                    if let Some(m) = &mut self.metrics {
                        m.observe(&rec);
                    }
                    log_record(&rec);
                    self.append(&rec);
                    self.notify_waiters(&rec);
                }
                Action::OneShotDone { id } => self.journal.del(&id),
                Action::AfterRun(a) => self.after_run(*a),
                Action::Terminate { run } => {
                    if let Some(h) = self.handles.get(&run) {
                        h.terminate();
                    }
                }
                Action::Start(start) => {
                    let run = start.run.clone();
                    let result = self.spawn(start);
                    actions.extend(self.engine.spawned(&run, result, Utc::now()));
                }
            }
        }
    }

    /// Makes queued journal deletions durable (they need no acknowledgement,
    /// so one sync per loop iteration serves them all).
    fn sync_journal(&mut self) {
        if self.journal.dirty() {
            if let Err(e) = self.journal.commit() {
                error!("cannot write the one-shot journal: {e}");
            }
        }
        if self.journal.should_compact(self.engine.oneshot_count()) {
            let pending = self.engine.oneshots();
            match self
                .journal
                .compact_with(pending.iter().map(|s| s.def.as_ref()))
            {
                Ok(()) => info!(pending = pending.len(), "one-shot journal compacted"),
                Err(e) => error!("cannot compact the one-shot journal: {e}"),
            }
        }
    }

    fn notify_waiters(&mut self, rec: &Record) {
        let is_final = rec.event == Event::Run && rec.status.is_some_and(|s| s.is_final());
        if !is_final {
            return;
        }
        let Some(run) = rec.run.as_deref() else {
            return;
        };
        if let Some(waiters) = self.waiters.remove(run) {
            let value = serde_json::to_value(rec).unwrap_or(Value::Null);
            for w in waiters {
                let _ = w.send(value.clone());
            }
        }
    }

    fn append(&mut self, rec: &Record) {
        if let Err(e) = self.history.append(rec) {
            // Scheduling goes on: the record waits in the writer's backlog and
            // is written when the disk accepts it again.
            error!("cannot write the history log (kept in memory, retried on the next write): {e}");
            if let Some(m) = &self.metrics {
                m.history_write_error();
            }
        }
    }

    /// Hooks and mail of a finished run. They run beside the jobs (outside
    /// `max_concurrent`), are never retried, and their failures are only
    /// logged: a hook can never cause another run or another hook.
    fn after_run(&mut self, a: AfterRun) {
        let job = a.job.clone();
        let rec = a.record;
        let run = rec.run.clone().unwrap_or_default();
        let user = match job.user.as_deref().map(crate::host::user).transpose() {
            Ok(u) => u,
            Err(e) => {
                error!(
                    job = job.name.as_str(),
                    run = run.as_str(),
                    "cannot run hooks or mail: {e}"
                );
                return;
            }
        };
        if a.mail {
            self.send_mail(&job, &rec);
        }
        if a.hooks.is_empty() {
            return;
        }
        let tmp = self.opts.state_dir.join("tmp");
        let output_file = tmp.join(format!("{run}.out"));
        let written = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&tmp)
            .and_then(|_| {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&output_file)?;
                std::io::Write::write_all(&mut f, rec.output.as_deref().unwrap_or("").as_bytes())
            });
        if let Err(e) = written {
            warn!(
                job = job.name.as_str(),
                run = run.as_str(),
                "cannot write the output file for hooks: {e}"
            );
        }
        let mut env = run_env(user.as_ref(), &job.shell, &job.env, &job.name, &run);
        let status = rec.status.map(RunStatus::as_str).unwrap_or("");
        env.push(("REA_STATUS".into(), status.to_string()));
        env.push((
            "REA_EXIT_CODE".into(),
            rec.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        ));
        env.push(("REA_ATTEMPT".into(), rec.attempt.unwrap_or(1).to_string()));
        env.push((
            "REA_DURATION_MS".into(),
            rec.duration_ms.unwrap_or(0).to_string(),
        ));
        env.push(("REA_OUTPUT_FILE".into(), output_file.display().to_string()));
        let hooks = a.hooks;
        tokio::spawn(async move {
            for (hook, command) in hooks {
                let mut env = env.clone();
                env.push(("REA_HOOK".into(), hook.name().to_string()));
                let spec = RunSpec {
                    program: Program::Shell {
                        shell: job.shell.clone(),
                        script: command,
                    },
                    env,
                    dir: job.dir.clone(),
                    timeout: Some(job.hook_timeout),
                    kill_grace: job.kill_grace,
                    output_limit: 16 * 1024,
                    stdin: None,
                    user: user.clone(),
                };
                let name = hook.name();
                match executor::spawn(spec) {
                    Err(e) => warn!(
                        job = job.name.as_str(),
                        run = run.as_str(),
                        hook = name,
                        "hook could not start: {e}"
                    ),
                    Ok((_, _, fut)) => {
                        let o = fut.await;
                        let first = o.output.text.lines().next().unwrap_or("").to_string();
                        match (o.timed_out, o.termination) {
                            (false, executor::Termination::Exited(0)) => {
                                info!(
                                    job = job.name.as_str(),
                                    run = run.as_str(),
                                    hook = name,
                                    "hook succeeded"
                                )
                            }
                            (true, _) => warn!(
                                job = job.name.as_str(),
                                run = run.as_str(),
                                hook = name,
                                "hook timed out after {}",
                                crate::duration::format(job.hook_timeout)
                            ),
                            (_, t) => warn!(
                                job = job.name.as_str(),
                                run = run.as_str(),
                                hook = name,
                                output = first.as_str(),
                                "hook failed ({t:?})"
                            ),
                        }
                    }
                }
            }
            let _ = std::fs::remove_file(&output_file);
        });
    }

    /// The run's output through sendmail, as cron mails MAILTO.
    fn send_mail(&mut self, job: &Job, rec: &Record) {
        let run = rec.run.clone().unwrap_or_default();
        let Some(sendmail) = crate::host::sendmail_for(&self.config) else {
            warn!(
                job = job.name.as_str(),
                run = run.as_str(),
                "no sendmail ({}): mail to {} not sent",
                crate::host::sendmail_places(),
                job.mailto.join(", ")
            );
            return;
        };
        let mut argv = vec![
            sendmail.display().to_string(),
            "-i".to_string(),
            "--".to_string(),
        ];
        argv.extend(job.mailto.iter().cloned());
        let spec = RunSpec {
            program: Program::Argv(argv),
            env: Vec::new(),
            dir: None,
            timeout: Some(Duration::from_secs(60)),
            kill_grace: Duration::from_secs(5),
            output_limit: 4096,
            stdin: Some(mail_message(job, rec).into_bytes()),
            user: None,
        };
        let name = job.name.clone();
        match executor::spawn(spec) {
            Err(e) => warn!(
                job = name.as_str(),
                run = run.as_str(),
                "cannot start sendmail: {e}"
            ),
            Ok((_, _, fut)) => {
                tokio::spawn(async move {
                    let o = fut.await;
                    if o.termination != executor::Termination::Exited(0) {
                        warn!(
                            job = name.as_str(),
                            run = run.as_str(),
                            output = o.output.text.trim(),
                            "sendmail failed ({:?})",
                            o.termination
                        );
                    }
                });
            }
        }
    }

    fn spawn(&mut self, start: StartRun) -> Result<executor::Started, String> {
        let (program, env_base, dir, timeout, kill_grace, output_limit) = match &start.def {
            Def::Job(job) => (
                Program::Shell {
                    shell: job.shell.clone(),
                    script: job.command.clone(),
                },
                &job.env,
                job.dir.clone(),
                job.timeout,
                job.kill_grace,
                job.output_limit,
            ),
            Def::OneShot(shot) => (
                shot.program(),
                &shot.env,
                Some(shot.dir.clone()),
                shot.timeout(),
                ONESHOT_KILL_GRACE,
                ONESHOT_OUTPUT_LIMIT,
            ),
        };
        let (user, shell) = match &start.def {
            Def::Job(job) => (
                job.user.as_deref().map(crate::host::user).transpose()?,
                job.shell.as_str(),
            ),
            Def::OneShot(_) => (None, "/bin/sh"),
        };
        // As cron does for a crontab's owner: the user database says who
        // the job is; the job's own env may still override.
        let mut env = run_env(user.as_ref(), shell, env_base, &start.name, &start.run);
        env.push((
            "REA_SCHEDULED_AT".into(),
            start.scheduled.to_rfc3339_opts(SecondsFormat::Secs, true),
        ));
        env.push(("REA_ATTEMPT".into(), start.attempt.to_string()));
        env.push(("REA_TRIGGER".into(), start.trigger.as_str().to_string()));
        let spec = RunSpec {
            program,
            env,
            dir,
            timeout,
            kill_grace,
            output_limit,
            stdin: None,
            user,
        };
        let (started, handle, fut) = executor::spawn(spec)?;
        self.handles.insert(start.run.clone(), handle);
        let tx = self.tx.clone();
        let run = start.run;
        tokio::spawn(async move {
            let outcome = fut.await;
            let _ = tx.send(Msg::Finished {
                run,
                outcome: Box::new(outcome),
            });
        });
        Ok(started)
    }
}

/// A plain-text mail about a run, headers included (for `sendmail -i`).
fn mail_message(job: &Job, rec: &Record) -> String {
    let host = crate::host::hostname();
    let status = rec.status.map(RunStatus::as_str).unwrap_or("");
    let how = match (rec.exit_code, rec.signal) {
        (Some(c), _) => format!(" (exit {c})"),
        (None, Some(s)) => format!(" (signal {s})"),
        _ => String::new(),
    };
    let output = rec.output.as_deref().unwrap_or("");
    let mut m = String::new();
    m.push_str(&format!("To: {}\n", job.mailto.join(", ")));
    m.push_str(&format!(
        "Subject: rea: {} {status}{how} on {host}\n",
        job.name
    ));
    m.push_str("Content-Type: text/plain; charset=utf-8\n");
    m.push_str(&format!("X-Rea-Job: {}\n", job.name));
    m.push_str(&format!(
        "X-Rea-Run: {}\n\n",
        rec.run.as_deref().unwrap_or("")
    ));
    m.push_str(&format!("job:       {}\n", job.name));
    m.push_str(&format!("command:   {}\n", job.command));
    m.push_str(&format!(
        "run:       {} (attempt {}, trigger {})\n",
        rec.run.as_deref().unwrap_or(""),
        rec.attempt.unwrap_or(1),
        rec.trigger
            .map(history::Trigger::as_str)
            .unwrap_or_default()
    ));
    m.push_str(&format!("status:    {status}{how}\n"));
    if let Some(r) = &rec.reason {
        m.push_str(&format!("reason:    {r}\n"));
    }
    m.push_str(&format!("scheduled: {}\n", fmt_time(rec.scheduled)));
    m.push_str(&format!("started:   {}\n", fmt_time(rec.started)));
    m.push_str(&format!("duration:  {} ms\n", rec.duration_ms.unwrap_or(0)));
    m.push_str(&format!("host:      {host}\n\n"));
    m.push_str(&format!(
        "output ({} bytes written):\n",
        rec.output_bytes.unwrap_or(0)
    ));
    m.push_str(output);
    if !output.ends_with('\n') {
        m.push('\n');
    }
    m
}

/// The environment of a job's run or hook on top of the daemon's: the
/// user's variables, the job's `env`, then `REA_JOB` and `REA_RUN_ID`.
fn run_env(
    user: Option<&crate::host::User>,
    shell: &str,
    job_env: &std::collections::BTreeMap<String, String>,
    name: &str,
    run: &str,
) -> Vec<(String, String)> {
    let mut env = user_env(user, shell);
    env.extend(job_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.push(("REA_JOB".into(), name.to_string()));
    env.push(("REA_RUN_ID".into(), run.to_string()));
    env
}

/// What cron sets for a crontab's owner: HOME, USER and LOGNAME from the
/// user database, and SHELL = the shell that runs the command (not the
/// user's login shell).
fn user_env(user: Option<&crate::host::User>, shell: &str) -> Vec<(String, String)> {
    let Some(u) = user else { return Vec::new() };
    vec![
        ("HOME".into(), u.home.display().to_string()),
        ("USER".into(), u.name.clone()),
        ("LOGNAME".into(), u.name.clone()),
        ("SHELL".into(), shell.to_string()),
    ]
}

/// The Prometheus endpoint and systemd notification.
impl Loop {
    /// A scrape is about to render: bring the state gauges up to date.
    fn on_scrape(&mut self, scrape: crate::metrics::Scrape) {
        if let Some(m) = &self.metrics {
            m.refresh(
                &self.engine,
                self.config_error.is_none(),
                self.history.backlog_len(),
            );
        }
        scrape.done();
    }

    fn notify_ready(&mut self) {
        if self.notify.enabled() {
            let line = crate::notify::status_line(
                self.config.jobs.len(),
                self.engine.next_wake(),
                self.config_error.as_ref().map(|(_, e)| e.len()),
            );
            self.notify.ready(&line);
        }
    }

    /// Once per loop iteration; sends only when the summary changed.
    fn notify_summary(&mut self) {
        if self.notify.enabled() {
            self.notify.summary(
                self.config.jobs.len(),
                self.engine.next_wake(),
                self.config_error.as_ref().map(|(_, e)| e.len()),
            );
        }
    }
}

fn oneshot_json(s: &crate::engine::OneShotStatus) -> Value {
    let fmt = history::format_ts;
    let d = &s.def;
    json!({
        "id": d.id,
        "state": if s.running { "running" } else { "pending" },
        "due": fmt(d.due),
        "next_attempt_at": s.next_attempt_at.map(fmt),
        "argv": d.argv,
        "shell": d.shell,
        "dir": d.dir.display().to_string(),
        "tags": d.tags,
        "submitted": fmt(d.submitted),
        "timeout_ms": d.timeout_ms,
        "expire_ms": d.expire_ms,
        "retry": d.retry,
    })
}

fn job_json(s: &JobStatus) -> Value {
    let fmt = history::format_ts;
    let state = if !s.running.is_empty() {
        "running"
    } else if s.queued > 0 {
        "queued"
    } else if s.retry_at.is_some() {
        "retry_pending"
    } else if !s.enabled {
        "disabled"
    } else if s.paused {
        "paused"
    } else {
        "idle"
    };
    json!({
        "name": s.name,
        "state": state,
        "enabled": s.enabled,
        "paused": s.paused,
        "running": s.running.iter().map(|(run, pid, since)| json!({
            "run": run,
            "pid": pid,
            "since": since.map(fmt),
        })).collect::<Vec<_>>(),
        "queued": s.queued,
        "retry_at": s.retry_at.map(fmt),
        "next_fire": s.next_fire.map(fmt),
        "consecutive_failures": s.consecutive_failures,
        "after": s.after,
        "last": s.last.as_ref().map(|l| json!({
            "run": l.run,
            "status": l.status.as_str(),
            "ended": fmt(l.ended),
            "duration_ms": l.duration.as_millis() as u64,
            "exit_code": l.exit_code,
        })),
    })
}

fn fmt_time(t: Option<DateTime<Utc>>) -> String {
    t.map(history::format_ts).unwrap_or_default()
}

/// One log line per history record about a run, naming job, run and attempt.
fn log_record(rec: &Record) {
    let job = rec.job.as_deref().unwrap_or("");
    let run = rec.run.as_deref().unwrap_or("");
    let attempt = rec.attempt.unwrap_or(0);
    let reason = rec.reason.as_deref().unwrap_or("");
    match (rec.event, rec.status) {
        (Event::Run, Some(RunStatus::Started)) => {
            let trigger = rec
                .trigger
                .map(history::Trigger::as_str)
                .unwrap_or_default();
            info!(job, run, attempt, trigger = %trigger, pid = rec.pid.unwrap_or(0), scheduled = %fmt_time(rec.scheduled), "run started")
        }
        (Event::Run, Some(RunStatus::Succeeded)) => {
            info!(
                job,
                run,
                attempt,
                duration_ms = rec.duration_ms.unwrap_or(0),
                "run succeeded"
            )
        }
        (Event::Run, Some(RunStatus::Skipped)) => info!(job, run, attempt, reason, "run skipped"),
        (Event::Run, Some(status)) => warn!(
            job,
            run,
            attempt,
            exit_code = rec.exit_code,
            signal = rec.signal,
            reason,
            "run {}",
            status.as_str().replace('_', " ")
        ),
        (Event::Missed, _) => {
            warn!(
                job,
                count = rec.count.unwrap_or(0),
                reason,
                "occurrences missed"
            )
        }
        _ => {}
    }
}
