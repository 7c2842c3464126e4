//! `rea run`: the daemon. The event loop owns every piece of mutable state
//! (the engine, the run handles, the stores, the configuration in force) on
//! one thread and turns the engine's actions into I/O: spawning runs,
//! signalling process groups, appending history records. Everything that
//! happens (a timer, a finished run, a signal, a control request, a changed
//! job file) arrives here as an event; nothing here decides policy (that is
//! `rea_core::engine`) or parses anything (`rea_config`).
//!
//! The daemon names no storage backend: the embedded one is
//! `rea_store::Local`, and cluster mode's node arrives as a
//! `Box<dyn rea_store::cluster::ClusterNode>` from the [`StartNode`] the
//! program passes in [`Options`] (`.ci/layers`: no rea-pg here).
//!
//! | file | what it does for the loop |
//! |---|---|
//! | `lib.rs` | the loop itself: waiting for the next event |
//! | `startup.rs` | lock, load, open the backend, recover from the history |
//! | `backend.rs` | the stores behind one seam, opened once as local or as a cluster node |
//! | `shutdown.rs` | the stopping states: drain, then terminate |
//! | `actions.rs` | carrying out the engine's actions (spawn, terminate, record) |
//! | `requests.rs` | control requests: trigger, pause, one-shots, status |
//! | `reload.rs` | re-reading the job files (watcher, SIGHUP, `rea reload`), their guards |
//! | `hooks.rs` | hooks and mail after a run |
//! | `mail.rs` | mail deliveries bounded per tenant: slots, a bounded queue |
//! | `webhooks/` | webhooks and pings: built on the loop, queued (bounded, per-tenant shares), sent by worker threads with retries |
//! | `environment.rs` | the variables every run and hook starts with, and its directory |
//! | `runs.rs` | the runs and hooks spawned and not seen end, and who waits for their end |
//! | `follow.rs` | runs' output streamed live to clients (`logs --follow`, `trigger --follow`) |
//! | `cluster.rs` | cluster mode: claims to the node, its events back to the engine |
//! | `status.rs` | what `rea status` and systemd are told |
//! | `live.rs` | the live views: `overview` and pages of job summaries (`jobs`) |
//! | `subscribe.rs` | `subscribe`: events pushed to bounded per-subscriber queues |
//! | `users.rs` | who is asking (a user's scope) and users' job files |
//! | `quota.rs` | each user's share of a shared cap (connections, followers, queries), a reserve for root |
//! | `audit.rs` | every state-changing request and its answer, to the audit log |
//! | `orphans.rs` | runs a killed daemon left behind, ended at start |
//! | `metrics/` | the Prometheus registry and its HTTP endpoint |
//! | `control.rs` | the control socket's server side |
//! | `watch.rs`, `timer.rs`, `guard.rs` | the job-file watcher; the wall-clock timer; the state directory's deletion noticed |
//! | `jobfiles.rs`, `host_checks.rs` | which job files are read, and their checks against this machine (shared with the CLI) |

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use rea_config::Config;
use rea_core::engine::Engine;
use rea_core::oneshot::OneShot;
use rea_core::record::{Event, Record};
use rea_core::run::Outcome;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use crate::control::Reply;
use crate::timer::{Wake, WallTimer};

mod actions;
mod alerts;
mod audit;
mod backend;
mod cluster;
mod control;
mod environment;
mod follow;
mod guard;
mod hooks;
pub mod host_checks;
pub mod jobfiles;
mod live;
mod mail;
mod metrics;
mod orphans;
mod peers;
mod quota;
mod reload;
mod requests;
mod runs;
mod shutdown;
mod startup;
mod status;
mod subscribe;
mod timer;
mod users;
mod watch;
mod web;
mod webhooks;

use reload::ReloadCause;
use shutdown::Stopping;

/// What `rea run` was asked to do.
#[derive(Clone)]
pub struct Options {
    pub file: PathBuf,
    pub state_dir: PathBuf,
    pub allow_insecure: bool,
    /// Starts this daemon's node when the job file has `[cluster]`; None:
    /// the program has no cluster backend, and such a file is refused.
    pub cluster: Option<StartNode>,
}

/// Starts a cluster node on the daemon's runtime: given the job file's
/// `[cluster]`, the state directory (the node's host identity lives
/// there) and where its events go. The one place that names a backend is
/// the program that builds the daemon's [`Options`].
pub type StartNode = std::sync::Arc<
    dyn Fn(
            &rea_config::ClusterConfig,
            &std::path::Path,
            mpsc::UnboundedSender<rea_store::cluster::NodeEvent>,
        ) -> Result<Box<dyn rea_store::cluster::ClusterNode>, String>
        + Send
        + Sync,
>;

/// Why the daemon could not start; each carries a message for people.
#[derive(Debug)]
pub enum StartError {
    Config(Vec<rea_config::Diagnostic>),
    Locked(String),
    Other(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(diags) => {
                write!(f, "the job file has {} error(s)", diags.len())
            }
            StartError::Locked(m) | StartError::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StartError {}

/// Requests handled in one loop iteration at most (a flood of pipelined
/// submissions or triggers must not starve timers and finished runs: at
/// 20,000, one user's 3,000 pipelined triggers held another tenant's due
/// run for about 100 ms on a loaded machine).
const MAX_BATCH: usize = 1_000;

/// Messages from tasks to the loop.
enum Msg {
    Finished {
        run: String,
        outcome: Box<Outcome>,
    },
    HookFinished {
        id: u64,
        outcome: Box<Outcome>,
    },
    /// A sendmail of the tenant (its key) ended.
    MailEnded {
        tenant: String,
    },
    /// Cluster mode: the store said whether this node tells an alert.
    AlertTold {
        notice: Box<rea_core::engine::AlertNotice>,
        claim: rea_store::cluster::AlertClaim,
    },
}

/// Does nothing; see [`run`] for why SIGXFSZ is caught rather than ignored.
extern "C" fn on_sigxfsz(_: libc::c_int) {}

/// Where `[daemon] job_output` sends runs' output besides the history:
/// the journal (if it has a socket here), or nowhere.
fn journal_for(output: rea_config::JobOutput) -> Option<rea_exec::journald::Journal> {
    match output {
        rea_config::JobOutput::Journal => rea_exec::journald::Journal::open(),
        rea_config::JobOutput::History => None,
    }
}

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
    rea_host::limits::raise_open_files();
    // One thread: the loop is the only owner of state, and child processes
    // are awaited through pidfds, so more threads would buy nothing.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StartError::Other(format!("cannot start the runtime: {e}")))?;
    rt.block_on(main_loop(opts))
}

/// One turn of control requests: `first` and up to [`MAX_BATCH`] more
/// already waiting, their submissions committed together.
fn take_requests(
    d: &mut Loop,
    first: control::Incoming,
    rx: &mut mpsc::UnboundedReceiver<control::Incoming>,
    actions: &mut std::collections::VecDeque<rea_core::engine::Action>,
) {
    let mut batch: Vec<(OneShot, oneshot::Sender<Reply>)> = Vec::new();
    d.incoming(first, &mut batch, actions);
    for _ in 0..MAX_BATCH {
        match rx.try_recv() {
            Ok(more) => d.incoming(more, &mut batch, actions),
            Err(_) => break,
        }
    }
    d.commit_submissions(&mut batch, actions);
}

async fn main_loop(opts: Options) -> Result<(), StartError> {
    // Handlers first: a SIGTERM that arrives while the daemon starts (right
    // after `systemctl start`, say) must stop it cleanly, not kill it.
    let sig = |kind| signal(kind).map_err(|e| StartError::Other(e.to_string()));
    let mut sigterm = sig(SignalKind::terminate())?;
    let mut sigint = sig(SignalKind::interrupt())?;
    let mut sighup = sig(SignalKind::hangup())?;
    let startup::Booted {
        mut d,
        mut inputs,
        mut actions,
        lock,
    } = startup::start(&opts).await?;
    let guard = crate::guard::Guard::new(&opts.state_dir, &lock)
        .map_err(|e| StartError::Other(format!("cannot watch the state directory: {e}")))?;
    let mut lost_state_dir = false;
    let mut timer =
        WallTimer::new().map_err(|e| StartError::Other(format!("cannot create a timer: {e}")))?;
    d.execute(&mut actions);
    d.notify_ready();
    // Whether requests waited while this turn went to finished runs or the
    // timer: the next turn is theirs (below).
    let mut requests_waited = false;

    loop {
        d.execute(&mut actions);
        d.cluster_slots();
        d.notify_summary();
        if d.stopping.is_stopping() && d.engine.idle() && d.engine.claims_in_flight() == 0 {
            break;
        }
        if let Err(e) = timer.arm(d.engine.next_wake()) {
            error!("cannot arm the timer: {e}");
        }
        let grace_ends = d.stopping.grace_ends();
        let settles = d.files.settles_at();
        let user_reload = d.files.user_reloads.next_due();
        let watched = inputs.watcher.is_some();
        // Turns alternate while runs end and fall due in bursts: requests
        // that waited behind one busy turn get the next, so an answer (a
        // page for `rea top`, the web console) waits one batch of run work,
        // not the whole burst. The turn after is the runs' again: a flood
        // of requests (bounded per user) cannot hold the schedule either.
        if std::mem::take(&mut requests_waited) {
            if let Ok(incoming) = inputs.control.try_recv() {
                take_requests(&mut d, incoming, &mut inputs.control, &mut actions);
                continue;
            }
        }
        tokio::select! {
            biased;
            _ = sigterm.recv() => d.on_stop_signal("SIGTERM", &mut actions),
            _ = sigint.recv() => d.on_stop_signal("SIGINT", &mut actions),
            Some(msg) = inputs.finished.recv() => {
                // Runs that ended together are taken together: the runs
                // they free slots for then start in one pass, and the
                // answers of clients waiting for them leave together.
                d.on_finished(msg, &mut actions);
                for _ in 0..MAX_BATCH {
                    match inputs.finished.try_recv() {
                        Ok(more) => d.on_finished(more, &mut actions),
                        Err(_) => break,
                    }
                }
                requests_waited = !inputs.control.is_empty();
            },
            wake = timer.wait() => {
                let changed = matches!(wake, Ok(Wake::ClockChanged));
                if changed {
                    warn!("the wall clock was changed; re-planning every job");
                }
                if let Err(e) = &wake {
                    error!("timer error: {e}");
                }
                actions.extend(d.engine.wake(rea_store::clock::now(), changed));
                requests_waited = !inputs.control.is_empty();
            },
            Some(change) = inputs.changes.recv(), if watched => match change {
                crate::watch::Change::Modified => {
                    info!("a job file changed; reloading");
                    let _ = d.reload(&mut actions, ReloadCause::Watcher);
                }
                crate::watch::Change::Parts(parts) => {
                    info!(files = parts.len(), "job files beside the main one changed; reloading them");
                    let _ = d.reload_parts(&mut actions, ReloadCause::Watcher, &parts);
                }
                crate::watch::Change::Missing => warn!(
                    file = %opts.file.display(),
                    "the job file is gone; still running the last good configuration"
                ),
                crate::watch::Change::Warning(m) => warn!("{m}"),
            },
            _ = sighup.recv() => {
                info!("SIGHUP: reloading the job file");
                let _ = d.reload(&mut actions, ReloadCause::Signal);
            },
            Some(scrape) = inputs.scrapes.recv(), if d.metrics.is_some() => d.on_scrape(scrape),
            Some(ev) = inputs.cluster.recv() => d.on_cluster_event(ev, &mut actions),
            Some(incoming) = inputs.control.recv() => {
                take_requests(&mut d, incoming, &mut inputs.control, &mut actions);
            },
            _ = shutdown::sleep_until(settles), if settles.is_some() => {
                let _ = match d.files.settling_parts() {
                    Some(parts) => d.reload_parts(&mut actions, ReloadCause::Settled, &parts),
                    None => d.reload(&mut actions, ReloadCause::Settled),
                };
            },
            _ = shutdown::sleep_until(user_reload), if user_reload.is_some() => {
                d.due_user_reloads(&mut actions);
            },
            _ = shutdown::sleep_until(grace_ends), if grace_ends.is_some() => {
                d.on_grace_expired(&mut actions);
            },
            () = guard.lost(&lock), if !lost_state_dir => {
                lost_state_dir = true;
                error!(
                    state_dir = %opts.state_dir.display(),
                    "the state directory or its lock file was deleted or replaced: another daemon could take over and run every job a second time; stopping"
                );
                d.on_stop_signal("lost state directory", &mut actions);
            },
        }
    }
    let mut rec = Record::new(Event::DaemonStopped, rea_store::clock::now());
    rec.reason = Some("signal".into());
    d.append(&rec);
    if let Some(tree) = d.containment.tree() {
        // Every run has ended: the subtree goes unless something (another
        // daemon's runs, leftovers of kill_stragglers = false) is in it.
        tree.tidy();
    }
    d.backend.leave().await;
    if lost_state_dir {
        return Err(StartError::Other(format!(
            "stopped: the state directory {} (or its lock file) was deleted or replaced while the daemon ran",
            opts.state_dir.display()
        )));
    }
    // Followers and `trigger --wait`s told that nothing more will come get
    // that answer before the runtime, and their connections, go away.
    d.connections.ended(std::time::Duration::from_secs(1)).await;
    // The last answers' entries are written before the process ends.
    d.audit.drained(std::time::Duration::from_secs(2)).await;
    let _ = std::fs::remove_file(rea_host::state_dir::socket_path(&opts.state_dir));
    let _ = std::fs::remove_file(rea_web::socket_path(&opts.state_dir));
    info!("rea daemon stopped");
    drop(lock);
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

/// Frees the configuration a reload replaced, and gives the memory back,
/// off the loop: with 100,000 jobs that is tens of milliseconds of `free`
/// and `malloc_trim` the new configuration need not wait for. Without a
/// thread to be had (the daemon's user out of processes), here and now.
fn free_in_background(old: Config) {
    let freeing = std::thread::Builder::new()
        .name("rea-free".into())
        .spawn(move || {
            drop(old);
            release_freed_memory();
        });
    if freeing.is_err() {
        // The closure, and the configuration in it, is already dropped.
        release_freed_memory();
    }
}

/// The loop's state. Only the loop touches it.
struct Loop {
    engine: Engine,
    /// Everything that survives a restart (history, one-shots, pauses,
    /// and in cluster mode the node): opened once as local or cluster.
    backend: backend::Backend,
    /// Runs and hooks spawned and not finished, and who waits for them.
    runs: runs::Runs,
    /// The control connections, for their last answers at shutdown.
    connections: crate::control::Connections,
    /// Hooks running (or about to), by the engine's `StartHooks` id.
    hook_batches: HashMap<u64, hooks::HookBatch>,
    /// The last id given to an `on_alert` hook's batch (from
    /// [`alerts::HOOK_IDS`] up, apart from the engine's).
    alert_hooks: u64,
    /// Clients following runs' output, and the runs they may follow.
    follows: follow::Follows,
    /// Clients subscribed to the live views' events.
    subscribers: subscribe::Subscribers,
    /// Where runs' output is copied as it comes (`job_output = "journal"`,
    /// with a journal socket there).
    journald: Option<rea_exec::journald::Journal>,
    /// The configuration in force (the last good one).
    config: Config,
    opts: Options,
    started_at: DateTime<Utc>,
    /// The Prometheus endpoint's metrics (`[daemon] metrics`), if served.
    metrics: Option<metrics::Metrics>,
    /// systemd's `NOTIFY_SOCKET`, if set.
    notify: rea_host::notify::Notifier,
    /// The last submission's argv and directory (see `prepare_submission`).
    last_shape: Option<(std::sync::Arc<[String]>, std::sync::Arc<std::path::Path>)>,
    stopping: Stopping,
    /// The job files between reloads: each part's last good version,
    /// the last reload, a refusal in force, a change settling.
    files: reload::FileState,
    /// A cgroup per run, or process groups (`rea_exec::cgroup`).
    containment: std::sync::Arc<rea_exec::cgroup::Containment>,
    /// Mail deliveries running and waiting, per tenant.
    mail: mail::Mailer,
    /// Webhooks and pings waiting and in flight (sent by threads of their own).
    webhooks: webhooks::Notifier,
    /// The shadow file, for the account check before a user's job runs.
    accounts: rea_host::account::Accounts,
    /// Where state-changing requests are recorded with their answers.
    audit: audit::Audit,
    /// The web console, told of each configuration a reload applies.
    web: std::sync::Arc<rea_web::Web>,
    /// Whether users other than root and the daemon's may connect.
    others: bool,
}
