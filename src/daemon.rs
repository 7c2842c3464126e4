//! `rea run`: the event loop. It owns every piece of mutable state (the
//! engine, the run handles, the history writer) on one thread and turns the
//! engine's actions into I/O: spawning runs, signalling process groups,
//! appending history lines. Everything that happens (a timer, a finished run,
//! a signal) arrives here as an event; nothing here decides policy.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::config::{self, Config};
use crate::engine::{Action, Engine, Recovered, StartRun};
use crate::executor::{self, Outcome, Program, RunHandle, RunSpec};
use crate::history::{
    self, Event, HistoryReader, HistoryStore, JsonlHistory, JsonlReader, Record, RunStatus,
};
use crate::state_dir;
use crate::timer::{Wake, WallTimer};

/// What `rea run` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub file: PathBuf,
    pub state_dir: PathBuf,
}

/// Why the daemon could not start; each carries a message for people.
#[derive(Debug)]
pub enum StartError {
    Config(Vec<config::Diagnostic>),
    Locked(String),
    Other(String),
}

/// Messages from tasks to the loop.
enum Msg {
    Finished { run: String, outcome: Box<Outcome> },
}

/// Runs the daemon until SIGTERM/SIGINT. Blocks the calling thread.
pub fn run(opts: Options) -> Result<(), StartError> {
    // One thread: the loop is the only owner of state, and child processes
    // are awaited through pidfds, so more threads would buy nothing.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Other(format!("cannot start the runtime: {e}")))?;
    rt.block_on(main_loop(opts))
}

async fn main_loop(opts: Options) -> Result<(), StartError> {
    state_dir::ensure(&opts.state_dir).map_err(StartError::Other)?;
    let _lock = state_dir::lock(&opts.state_dir).map_err(|e| match e {
        state_dir::LockError::Held { pid, path } => StartError::Locked(match pid {
            Some(pid) => format!(
                "another rea daemon (pid {pid}) is already running with state directory {} (lock {})",
                opts.state_dir.display(),
                path.display()
            ),
            None => format!(
                "another rea daemon is already running with state directory {} (lock {})",
                opts.state_dir.display(),
                path.display()
            ),
        }),
        state_dir::LockError::Io(m) => StartError::Other(m),
    })?;
    let config = config::load(&opts.file).map_err(StartError::Config)?;
    let mut history = JsonlHistory::open(
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

    let recovered = recover(&opts, &config);
    let started_at = Utc::now();
    let mut rec = Record::new(Event::DaemonStarted, started_at);
    rec.detail = Some(serde_json::json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "file": opts.file.display().to_string(),
    }));
    append(&mut history, &rec);

    let mut engine = Engine::new(&config, fastrand::u64(..));
    let mut actions: VecDeque<Action> = engine.start(started_at, recovered).into();
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut loop_state = Loop {
        engine,
        history,
        handles: HashMap::new(),
        tx,
    };
    info!(
        jobs = config.jobs.len(),
        file = %opts.file.display(),
        state_dir = %opts.state_dir.display(),
        "rea daemon started"
    );

    let mut timer =
        WallTimer::new().map_err(|e| StartError::Other(format!("cannot create a timer: {e}")))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| StartError::Other(e.to_string()))?;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| StartError::Other(e.to_string()))?;
    let mut shutdown_deadline: Option<tokio::time::Instant> = None;
    let grace = config.daemon.shutdown_grace;

    loop {
        loop_state.execute(&mut actions);
        if shutdown_deadline.is_some() && loop_state.engine.running() == 0 {
            break;
        }
        let next = loop_state.engine.next_wake();
        if let Err(e) = timer.arm(next) {
            error!("cannot arm the timer: {e}");
        }
        let deadline = shutdown_deadline;
        tokio::select! {
            biased;
            _ = sigterm.recv() => loop_state.on_stop_signal("SIGTERM", &mut shutdown_deadline, grace, &mut actions),
            _ = sigint.recv() => loop_state.on_stop_signal("SIGINT", &mut shutdown_deadline, grace, &mut actions),
            msg = rx.recv() => match msg {
                Some(Msg::Finished { run, outcome }) => {
                    loop_state.handles.remove(&run);
                    actions.extend(loop_state.engine.finished(&run, &outcome, Utc::now()));
                }
                None => {}
            },
            wake = timer.wait() => {
                let changed = matches!(wake, Ok(Wake::ClockChanged));
                if changed {
                    warn!("the wall clock was changed; re-planning every job");
                }
                if let Err(e) = &wake {
                    error!("timer error: {e}");
                }
                actions.extend(loop_state.engine.wake(Utc::now(), changed));
            },
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)).await }, if deadline.is_some() => {
                warn!(running = loop_state.engine.running(), "shutdown grace expired; terminating running jobs");
                actions.extend(loop_state.engine.terminate_all());
                // Terminated runs still report; wait for them without a deadline
                // (their groups get SIGKILL after each job's kill_grace).
                shutdown_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(365 * 86_400));
            },
        }
    }
    let mut rec = Record::new(Event::DaemonStopped, Utc::now());
    rec.reason = Some("signal".into());
    append(&mut loop_state.history, &rec);
    info!("rea daemon stopped");
    Ok(())
}

/// What the previous daemon left in the history log.
fn recover(opts: &Options, config: &Config) -> Recovered {
    let dir = &opts.state_dir;
    let names: std::collections::HashSet<String> =
        config.jobs.iter().map(|j| j.name.clone()).collect();
    let reader = JsonlReader::new(dir);
    let (last_occurrences, previous_start) = reader.last_occurrences(&names).unwrap_or_else(|e| {
        warn!("cannot read the history log for catch-up ({e}); missed occurrences will not be caught up");
        Default::default()
    });
    let unfinished = reader.unfinished_runs().unwrap_or_else(|e| {
        warn!("cannot read the history log for interrupted runs: {e}");
        Vec::new()
    });
    Recovered {
        last_occurrences,
        previous_start,
        unfinished,
        paused: Default::default(),
    }
}

struct Loop {
    engine: Engine,
    history: JsonlHistory,
    handles: HashMap<String, RunHandle>,
    tx: mpsc::UnboundedSender<Msg>,
}

impl Loop {
    fn on_stop_signal(
        &mut self,
        name: &str,
        deadline: &mut Option<tokio::time::Instant>,
        grace: Duration,
        actions: &mut VecDeque<Action>,
    ) {
        if deadline.is_none() {
            info!(
                signal = name,
                running = self.engine.running(),
                grace = %crate::duration::format(grace),
                "stopping: no new runs; waiting for running jobs (send the signal again to stop them now)"
            );
            self.engine.shutdown();
            *deadline = Some(tokio::time::Instant::now() + grace);
        } else {
            warn!(signal = name, "second signal: terminating running jobs now");
            actions.extend(self.engine.terminate_all());
        }
    }

    /// Carries out actions until none are left (an action's answer may
    /// produce more, e.g. a failed spawn frees a slot).
    fn execute(&mut self, actions: &mut VecDeque<Action>) {
        while let Some(action) = actions.pop_front() {
            match action {
                Action::Record(rec) => {
                    log_record(&rec);
                    append(&mut self.history, &rec);
                }
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

    fn spawn(&mut self, start: StartRun) -> Result<executor::Started, String> {
        let job = &start.job;
        let mut env: Vec<(String, String)> = job
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.push(("REA_JOB".into(), job.name.clone()));
        env.push(("REA_RUN_ID".into(), start.run.clone()));
        env.push((
            "REA_SCHEDULED_AT".into(),
            start.scheduled.to_rfc3339_opts(SecondsFormat::Secs, true),
        ));
        env.push(("REA_ATTEMPT".into(), start.attempt.to_string()));
        env.push(("REA_TRIGGER".into(), trigger_name(start.trigger)));
        let spec = RunSpec {
            program: Program::Shell {
                shell: job.shell.clone(),
                script: job.command.clone(),
            },
            env,
            dir: job.dir.clone(),
            timeout: job.timeout,
            kill_grace: job.kill_grace,
            output_limit: job.output_limit,
            stdin: None,
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

fn append(history: &mut JsonlHistory, rec: &Record) {
    if let Err(e) = history.append(rec) {
        // Scheduling goes on: the record waits in the writer's backlog and is
        // written when the disk accepts it again.
        error!("cannot write the history log (kept in memory, retried on the next write): {e}");
    }
}

pub fn trigger_name(t: history::Trigger) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn fmt_time(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// One log line per history record about a run, naming job, run and attempt.
fn log_record(rec: &Record) {
    let job = rec.job.as_deref().unwrap_or("");
    let run = rec.run.as_deref().unwrap_or("");
    let attempt = rec.attempt.unwrap_or(0);
    let trigger = rec.trigger.map(trigger_name).unwrap_or_default();
    match (rec.event, rec.status) {
        (Event::Run, Some(RunStatus::Started)) => {
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
        (Event::Run, Some(RunStatus::Skipped)) => {
            info!(
                job,
                run,
                attempt,
                reason = rec.reason.as_deref().unwrap_or(""),
                "run skipped"
            )
        }
        (Event::Run, Some(status)) => warn!(
            job,
            run,
            attempt,
            status = status.as_str(),
            exit_code = rec.exit_code,
            signal = rec.signal,
            reason = rec.reason.as_deref().unwrap_or(""),
            "run {}",
            status.as_str().replace('_', " ")
        ),
        (Event::Missed, _) => {
            warn!(
                job,
                count = rec.count.unwrap_or(0),
                reason = rec.reason.as_deref().unwrap_or(""),
                "occurrences missed"
            )
        }
        _ => {}
    }
}
