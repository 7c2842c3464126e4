//! Start-up: lock the state directory, load the job file, open the
//! stores, bind the sockets, and recover what the previous daemon left in
//! the history (interrupted runs, missed occurrences, last results).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use rea_config::Config;
use rea_core::engine::{Action, Engine, LastRun, Recovered};
use rea_core::record::{Event, Record};
use rea_store::history::{HistoryReader, JobSummary, RunSummary};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::backend::{Backend, Opened};
use super::{metrics, release_freed_memory, Loop, Msg, Options, StartError, Stopping};
use crate::control::Incoming;
use crate::jobfiles::{JobFiles, Loaded};
use rea_host::state_dir;

/// What the loop waits on, besides its timer and signals.
pub(super) struct Inputs {
    /// Kept alive while the job file is watched.
    pub(super) watcher: Option<crate::watch::Watcher>,
    pub(super) changes: mpsc::UnboundedReceiver<crate::watch::Change>,
    pub(super) scrapes: mpsc::Receiver<metrics::Scrape>,
    pub(super) finished: mpsc::UnboundedReceiver<Msg>,
    pub(super) control: mpsc::UnboundedReceiver<Incoming>,
    /// Cluster mode's events (never yields in local mode).
    pub(super) cluster: mpsc::UnboundedReceiver<rea_store::cluster::NodeEvent>,
}

/// A daemon ready to run its loop.
pub(super) struct Booted {
    pub(super) d: Loop,
    pub(super) inputs: Inputs,
    /// What the engine decided at start (interrupted runs, catch-up,
    /// `@reboot`, late one-shots).
    pub(super) actions: VecDeque<Action>,
    /// The state directory's lock, held until the daemon ends.
    pub(super) lock: state_dir::Lock,
}

pub(super) async fn start(opts: &Options) -> Result<Booted, StartError> {
    state_dir::ensure(&opts.state_dir).map_err(StartError::Other)?;
    let lock = state_dir::lock(&opts.state_dir).map_err(|e| match e {
        state_dir::LockError::Held { pid, path } => StartError::Locked(format!(
            "another rea daemon{} is already running with state directory {} (lock {})",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
            opts.state_dir.display(),
            path.display()
        )),
        state_dir::LockError::Io(m) => StartError::Other(m),
    })?;
    // Watch before the first load: an edit in between then causes one
    // harmless extra reload instead of being lost. The drop-ins and the
    // users' files are watched with the main file.
    let set = rea_config::FileSet::of(&opts.file, rea_host::user::is_root());
    let others: Vec<std::path::PathBuf> = std::iter::once(set.dropins).chain(set.users).collect();
    let (watcher, changes) =
        match crate::watch::watch_files(&opts.file, &others, crate::watch::Timing::default()) {
            Ok((w, rx)) => (Some(w), rx),
            Err(e) => {
                warn!("{e}; the job file is not watched (reload with SIGHUP or `rea reload`)");
                (None, mpsc::unbounded_channel().1)
            }
        };
    let mut files = JobFiles::new(
        &opts.file,
        rea_config::LoadOptions {
            allow_insecure_permissions: opts.allow_insecure,
        },
        rea_host::user::is_root(),
    );
    let Loaded {
        config,
        refused: refused_at_start,
    } = load(&mut files, true)
        .map_err(StartError::Config)?
        .ok_or_else(|| StartError::Other("the job file could not be loaded".into()))?;
    let Opened {
        backend,
        events: cluster_events,
        pending,
        paused,
    } = Backend::open(opts, &config).map_err(StartError::Other)?;
    let pending_ids: HashSet<&str> = pending.iter().map(|s| &*s.id).collect();
    super::reload::name_clashes(&config, |name| pending_ids.contains(name))
        .map_err(StartError::Config)?;
    // Bound now, so a taken metrics address fails the start
    // (before the control socket, which would be left behind).
    let (mut metrics, scrapes) = metrics::start(&config).await.map_err(StartError::Other)?;
    // Users' files mean users talk to the daemon about their jobs.
    let others = files.set().users.as_ref().is_some_and(|d| d.is_dir());
    let web = crate::web::bind(&opts.state_dir, &config, others)
        .await
        .map_err(StartError::Other)?;
    let listener = crate::control::bind(&opts.state_dir, others).map_err(StartError::Other)?;

    let containment = rea_exec::cgroup::Containment::detect(
        config.daemon.cgroups,
        &rea_core::tenant::Tenant::System.key(),
    );
    info!(mode = %containment.mode(), "runs are contained by {}", containment.kind().replace('_', " "));
    warn_unenforceable(&config, &containment);
    apply_tenant_limits(&config, &containment);
    if let Some(m) = &metrics {
        m.set_containment(&containment);
    }
    let reader = rea_store::Local::history_reader(&opts.state_dir);
    let (mut recovered, summaries) = recover(reader.as_ref(), &config);
    recovered.paused = paused;
    recovered.terminated = super::orphans::terminate(
        &recovered.unfinished,
        super::orphans::GRACE,
        containment.tree(),
    );
    if let Some(tree) = containment.tree() {
        tree.sweep(std::time::Duration::from_secs(60));
    }
    let started_at = rea_store::clock::now();
    let mut engine = Engine::new(&config.plan(), fastrand::u64(..));
    engine.set_decisions(backend.decisions());
    if let Some(cl) = backend.node() {
        // One run id everywhere: unique cluster-wide, it is the id the
        // store's row keeps and every node's `rea history` shows.
        engine.set_run_id_node(cl.node.node());
    }
    for (name, s) in summaries {
        if let Some(m) = metrics.as_mut() {
            m.seed(&name, &s);
        }
        if let Some(last) = s.last.as_ref().and_then(last_run_of) {
            engine.seed_last(&name, last, s.consecutive_failures as u32);
        }
        // The live views' summary starts from what this scan found (the
        // last final run and the last success); its outcomes fill as runs
        // end.
        let last = s.last.as_ref().map(|r| record_of(&name, r));
        engine.seed_summary(&name, last.as_ref(), s.last_success);
    }
    let (tx, finished) = mpsc::unbounded_channel::<Msg>();
    let (ctl_tx, control) = mpsc::unbounded_channel::<Incoming>();
    let connections = crate::control::Connections::new();
    let web = crate::web::serve(web, &config, others, ctl_tx.clone());
    tokio::spawn(crate::control::serve(
        listener,
        ctl_tx,
        others,
        connections.clone(),
    ));
    let audit = crate::audit::Audit::start(
        &opts.state_dir,
        backend.node().map(|cl| cl.node.audit_sink()),
    )
    .map_err(StartError::Other)?;
    let webhooks = crate::webhooks::Notifier::new(config.daemon.webhook_private_targets);
    let mut d = Loop {
        audit,
        engine,
        backend,
        runs: super::runs::Runs::new(tx),
        connections,
        hook_batches: HashMap::new(),
        alert_hooks: crate::alerts::HOOK_IDS,
        follows: Default::default(),
        subscribers: Default::default(),
        journald: crate::journal_for(config.daemon.job_output),
        config,
        opts: opts.clone(),
        started_at,
        metrics,
        notify: rea_host::notify::Notifier::from_env(),
        last_shape: None,
        stopping: Stopping::No,
        files: super::reload::FileState::new(files, started_at),
        containment: std::sync::Arc::new(containment),
        accounts: Default::default(),
        mail: Default::default(),
        webhooks,
        web,
        others,
    };
    let mut rec = Record::new(Event::DaemonStarted, started_at);
    rec.detail = Some(json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "file": opts.file.display().to_string(),
    }));
    d.append(&rec);
    if !refused_at_start.is_empty() {
        let errors = refused_at_start
            .iter()
            .flat_map(|(_, diags)| diags.iter().map(ToString::to_string))
            .collect();
        d.reject(errors, started_at);
    }
    d.backend.publish(&d.config);
    let mut actions: VecDeque<Action> = d.engine.start(started_at, recovered).into();
    let restored = pending.len();
    actions.extend(d.engine.restore(pending, started_at));
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
    Ok(Booted {
        d,
        inputs: Inputs {
            watcher,
            changes,
            scrapes,
            finished,
            control,
            cluster: cluster_events,
        },
        actions,
        lock,
    })
}

/// Says which jobs ask for limits this host cannot enforce: at start, and
/// again for each configuration a reload applies.
pub(super) fn warn_unenforceable(config: &Config, containment: &rea_exec::cgroup::Containment) {
    for job in &config.jobs {
        let missing = containment.unenforceable(&job.extras().limits);
        if !missing.is_empty() {
            warn!(
                job = job.name.as_str(),
                "limits this host cannot enforce, not applied: {}",
                missing.join(", ")
            );
        }
    }
}

/// The users whose subtree has limits: those named in `[tenants.NAME]`,
/// and (with `[tenants."*"]`) every user with jobs.
pub(super) fn limited_tenants(config: &Config) -> Vec<(String, rea_core::run::TenantLimits)> {
    let policy = &config.daemon.tenants;
    let mut users: Vec<&str> = policy.users.keys().map(String::as_str).collect();
    if !policy.every_user.is_empty() {
        for job in &config.jobs {
            if let rea_core::tenant::Tenant::User(u) = rea_core::tenant::Tenant::of(&job.name) {
                users.push(u);
            }
        }
    }
    users.sort_unstable();
    users.dedup();
    users
        .into_iter()
        .map(|u| (u.to_string(), policy.for_user(u)))
        .filter(|(_, l)| l.cgroup != rea_core::run::Limits::NONE)
        .collect()
}

/// Writes the tenants' subtree limits to their cgroup directories (at
/// start, and for each configuration a reload applies), saying once per
/// load which this host cannot enforce, as for a job's.
pub(super) fn apply_tenant_limits(config: &Config, containment: &rea_exec::cgroup::Containment) {
    let limited = limited_tenants(config);
    for (user, limits) in &limited {
        let missing = containment.unenforceable(&limits.cgroup);
        if !missing.is_empty() {
            warn!(
                tenant = user.as_str(),
                "limits this host cannot enforce, not applied: {}",
                missing.join(", ")
            );
        }
    }
    let wanted: Vec<(String, rea_core::run::Limits)> = limited
        .into_iter()
        .map(|(u, l)| (rea_core::tenant::Tenant::User(&u).key(), l.cgroup))
        .collect();
    for refused in containment.set_tenant_limits(&wanted) {
        warn!("{refused}");
    }
}

/// Loads the job files (`force`: parse even unchanged ones); logs the
/// machine's warnings about a newly loaded configuration.
pub(super) fn load(
    files: &mut JobFiles,
    force: bool,
) -> Result<Option<Loaded>, Vec<rea_config::Diagnostic>> {
    let loaded = files.load(force)?;
    for w in loaded.iter().flat_map(|l| &l.config.warnings) {
        warn!("{w}");
    }
    Ok(loaded)
}

/// What the previous daemon left in the history log: when each job's
/// schedule was last dealt with, runs it left unfinished, each job's last
/// result.
fn recover(
    reader: &dyn HistoryReader,
    config: &Config,
) -> (Recovered, HashMap<String, JobSummary>) {
    let names: HashSet<String> = config.jobs.iter().map(|j| j.name.clone()).collect();
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
            paused: Default::default(),
            terminated: Default::default(),
        },
        summaries,
    )
}

/// The record a run summary of the history stands for (what the engine's
/// per-job summary reads).
fn record_of(job: &str, s: &RunSummary) -> Record {
    let mut rec = Record::new(Event::Run, s.ended.or(s.started).unwrap_or_default());
    rec.job = Some(job.to_string());
    rec.run = s.run.clone();
    rec.status = Some(s.status);
    rec.started = s.started;
    rec.ended = s.ended;
    rec.duration_ms = s.duration_ms;
    rec.exit_code = s.exit_code;
    rec.signal = s.signal;
    rec
}

fn last_run_of(s: &RunSummary) -> Option<LastRun> {
    let ended = s.ended.or(s.started)?;
    Some(LastRun {
        run: s.run.clone().unwrap_or_default(),
        status: s.status,
        ended,
        duration: Duration::from_millis(s.duration_ms.unwrap_or(0)),
        exit_code: s.exit_code,
    })
}
