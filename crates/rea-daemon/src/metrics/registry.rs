//! The metrics themselves: every series `GET /metrics` shows, fed by the
//! loop (see the module above for who writes what).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use rea_config::Config;
use rea_core::engine::Engine;
use rea_core::record::{Event, Record, RunStatus, Trigger};

/// Final statuses a run of a job of the file can end in, pre-created at
/// zero for every job so that `increase(rea_runs_total{status="failed"}[1h])`
/// sees the first failure (a series born at 1 has no increase).
/// `cancelled` only happens to one-shots.
const FINAL: [RunStatus; 7] = RunStatus::FINAL;

/// What `rea_last_run_status` can say: the final statuses a job's last run
/// (skipped runs aside: they are not runs of the command) may end in. One
/// series per status, 1 for the last run's and 0 for the others, so a rule
/// reads `rea_last_run_status{status="failed"} == 1`.
const LAST: [RunStatus; 6] = [
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::TimedOut,
    RunStatus::Killed,
    RunStatus::Interrupted,
    RunStatus::OomKilled,
];

/// A failure, for the last-failure timestamp: what the engine retries and
/// counts in `consecutive_failures` (a run killed by a shutdown or by
/// `overlap = "replace"`, or interrupted by a daemon's death, is not the
/// command failing; running out of memory is).
fn is_failure(status: RunStatus) -> bool {
    status.is_failure()
}

/// Upper bounds of `rea_run_duration_seconds`: 10 ms to 1 h, about three
/// per decade (cron jobs range from `true` to nightly backups).
const DURATION_BUCKETS: [f64; 13] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
];

type F64Gauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabel {
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    job: String,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    job: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    kind: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

/// What a claim can come back as (`ClaimOutcome::as_str`), pre-created at
/// zero like the runs.
const CLAIM_OUTCOMES: [&str; 9] = [
    "started",
    "already_yours",
    "skipped",
    "queued",
    "missed",
    "lost",
    "no_lease",
    "unavailable",
    "early",
];

/// Cluster mode's series (`[cluster]` in the job file).
struct ClusterSeries {
    lease_live: Gauge,
    lease_age: F64Gauge,
    backlog: Gauge,
    dropped: Counter,
    claims: Family<OutcomeLabel, Counter>,
    /// Created on the first database error.
    last_error: Family<NodeLabel, F64Gauge>,
    /// Created on the first measurement.
    clock_offset: Family<NodeLabel, F64Gauge>,
}

impl ClusterSeries {
    fn register(r: &mut Registry) -> ClusterSeries {
        let lease_live = Gauge::default();
        r.register(
            "cluster_lease_live",
            "1 while this node holds a live lease (it claims and starts scheduled runs), else 0",
            lease_live.clone(),
        );
        let lease_age = F64Gauge::default();
        r.register_with_unit(
            "cluster_lease_age",
            "Since the database last renewed this node's lease (since the start when it never did); past the lease, the node schedules nothing",
            Unit::Seconds,
            lease_age.clone(),
        );
        let backlog = Gauge::default();
        r.register(
            "cluster_backlog_records",
            "Run starts and ends waiting for the cluster database",
            backlog.clone(),
        );
        let dropped = Counter::default();
        r.register(
            "cluster_backlog_dropped",
            "Run starts and ends dropped because the backlog was full",
            dropped.clone(),
        );
        let claims = Family::<OutcomeLabel, Counter>::default();
        r.register(
            "cluster_claims",
            "Claims of occurrences answered, by outcome (started: this node runs it; lost: another node does)",
            claims.clone(),
        );
        for outcome in CLAIM_OUTCOMES {
            let _ = claims.get_or_create(&OutcomeLabel { outcome });
        }
        let last_error = Family::<NodeLabel, F64Gauge>::default();
        r.register_with_unit(
            "cluster_last_error_timestamp",
            "When this node last got an error from the cluster database (Unix time; absent until one)",
            Unit::Seconds,
            last_error.clone(),
        );
        let clock_offset = Family::<NodeLabel, F64Gauge>::default();
        r.register_with_unit(
            "cluster_clock_offset",
            "The cluster database's clock less this machine's, as the last heartbeat measured it (round trip corrected; absent before the first); the node schedules on the database's clock, past 1 s `rea status` warns",
            Unit::Seconds,
            clock_offset.clone(),
        );
        ClusterSeries {
            lease_live,
            lease_age,
            backlog,
            dropped,
            claims,
            last_error,
            clock_offset,
        }
    }
}

/// A tenant by its key: `system`, or `user-NAME`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabel {
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CpuLabels {
    job: String,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

fn new_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// One job's series, kept so a record finds them with one lookup by name.
/// They are clones of the ones in the families (shared atomics).
struct JobSeries {
    runs: [Counter; FINAL.len()],
    duration: Histogram,
    retries: Counter,
    missed: Counter,
    /// Created on the first success (or seeded): a job that never
    /// succeeded has no timestamp rather than 1970.
    last_success: Option<F64Gauge>,
    /// The same for failures.
    last_failure: Option<F64Gauge>,
}

/// Every metric the endpoint shows. Owned by the daemon loop.
pub(crate) struct Metrics {
    registry: Arc<Registry>,
    runs: Family<RunLabels, Counter>,
    duration: Family<JobLabel, Histogram, fn() -> Histogram>,
    retries: Family<JobLabel, Counter>,
    missed: Family<JobLabel, Counter>,
    last_success: Family<JobLabel, F64Gauge>,
    last_failure: Family<JobLabel, F64Gauge>,
    next_fire: Family<JobLabel, F64Gauge>,
    consecutive_failures: Family<JobLabel, Gauge>,
    last_status: Family<RunLabels, Gauge>,
    last_exit_code: Family<JobLabel, Gauge>,
    paused: Family<JobLabel, Gauge>,
    oneshot_runs: Family<StatusLabel, Counter>,
    running: Gauge,
    running_hooks: Gauge,
    queued: Gauge,
    tenant_slots: Family<TenantLabel, Gauge>,
    tenant_waiting: Family<TenantLabel, Gauge>,
    max_concurrent: Gauge,
    oneshots_pending: Gauge,
    config_valid: Gauge,
    history_backlog: Gauge,
    history_write_errors: Counter,
    /// Mail deliveries dropped because their tenant's queue was full.
    mail_dropped: Family<TenantLabel, Counter>,
    /// Webhooks and pings (`rea_daemon::webhooks`), copied from its counts
    /// at each scrape.
    webhook_deliveries: Family<DeliveryLabels, Counter>,
    webhook_retries: Family<KindLabel, Counter>,
    webhook_dropped: Family<TenantLabel, Counter>,
    webhook_queued: Gauge,
    /// 1 for how runs are contained (`cgroup` or `process_group`).
    containment: Family<ModeLabel, Gauge>,
    /// 1 for each controller runs' cgroups get, 0 for the others.
    cgroup_controllers: Family<ControllerLabel, Gauge>,
    /// CPU seconds of runs (the cgroup's figures where runs have one).
    run_cpu: Family<CpuLabels, Counter<f64, AtomicU64>>,
    /// Runs a process of which the kernel's OOM killer killed.
    oom_kills: Family<JobLabel, Counter>,
    /// 1 while a job's alert of a kind is raised, 0 while it is armed and
    /// quiet (`alert.*`).
    alert: Family<AlertLabels, Gauge>,
    /// Seconds since the due instant of a job's oldest occurrence not
    /// started, for jobs with `alert.late` (0 when none is waiting).
    overdue: Family<JobLabel, F64Gauge>,
    /// In cluster mode.
    cluster: Option<ClusterSeries>,
    /// Jobs of the file in force.
    jobs: HashMap<String, JobSeries>,
    /// Jobs the last reload removed: a run of theirs that was still going
    /// ends after their series are gone and is not counted (nor mistaken
    /// for a one-shot).
    retired: HashSet<String>,
}

impl Metrics {
    /// All series, with one set per job of `config`.
    pub(crate) fn new(config: &Config) -> Metrics {
        let mut r = Registry::with_prefix("rea");
        let runs = Family::<RunLabels, Counter>::default();
        r.register(
            "runs",
            "Runs of jobs of the file that ended, by final status (skipped runs included)",
            runs.clone(),
        );
        let duration = Family::new_with_constructor(new_histogram as fn() -> Histogram);
        r.register_with_unit(
            "run_duration",
            "How long runs took, from start to end (skipped and interrupted runs excluded)",
            Unit::Seconds,
            duration.clone(),
        );
        let retries = Family::<JobLabel, Counter>::default();
        r.register("retries", "Retry runs started", retries.clone());
        let missed = Family::<JobLabel, Counter>::default();
        r.register(
            "missed_occurrences",
            "Occurrences not run because the daemon was down or the clock jumped (catch_up policy)",
            missed.clone(),
        );
        let last_success = Family::<JobLabel, F64Gauge>::default();
        r.register_with_unit(
            "last_success_timestamp",
            "When the job's last successful run started (Unix time; seeded from the history log at start)",
            Unit::Seconds,
            last_success.clone(),
        );
        let last_failure = Family::<JobLabel, F64Gauge>::default();
        r.register_with_unit(
            "last_failure_timestamp",
            "When the job's last failed or timed-out run started (Unix time; absent until it fails)",
            Unit::Seconds,
            last_failure.clone(),
        );
        let next_fire = Family::<JobLabel, F64Gauge>::default();
        r.register_with_unit(
            "next_fire_timestamp",
            "The job's next scheduled occurrence (Unix time; absent when it has none, is paused or disabled)",
            Unit::Seconds,
            next_fire.clone(),
        );
        let consecutive_failures = Family::<JobLabel, Gauge>::default();
        r.register(
            "consecutive_failures",
            "Failed or timed-out runs since the job's last success (retries count)",
            consecutive_failures.clone(),
        );
        let last_status = Family::<RunLabels, Gauge>::default();
        r.register(
            "last_run_status",
            "1 for the final status of the job's last run, 0 for the others (all 0 before its first run)",
            last_status.clone(),
        );
        let last_exit_code = Family::<JobLabel, Gauge>::default();
        r.register(
            "last_exit_code",
            "Exit code of the job's last run (absent before its first run, and when a signal or a timeout ended it)",
            last_exit_code.clone(),
        );
        let paused = Family::<JobLabel, Gauge>::default();
        r.register(
            "paused",
            "1 while the job is paused (rea pause), else 0",
            paused.clone(),
        );
        let oneshot_runs = Family::<StatusLabel, Counter>::default();
        r.register(
            "oneshot_runs",
            "Runs of one-shots (rea submit/at) that ended, by final status",
            oneshot_runs.clone(),
        );
        let alert = Family::<AlertLabels, Gauge>::default();
        r.register(
            "job_alert",
            "1 while the job's alert of this kind (late, running_over, no_success_within, failures) is raised, 0 while armed and not raised",
            alert.clone(),
        );
        let overdue = Family::<JobLabel, F64Gauge>::default();
        r.register(
            "job_overdue_seconds",
            "Seconds since the due instant of the job's oldest occurrence not yet started (jobs with alert.late; 0 when none waits)",
            overdue.clone(),
        );
        let gauge = |r: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            r.register(name, help, g.clone());
            g
        };
        let running = gauge(&mut r, "running", "Runs in progress");
        let running_hooks = gauge(
            &mut r,
            "running_hooks",
            "Finished runs' hooks in progress (they take max_concurrent slots too)",
        );
        let queued = gauge(&mut r, "queued", "Runs waiting for a max_concurrent slot");
        let tenant_slots = Family::<TenantLabel, Gauge>::default();
        r.register(
            "tenant_slots",
            "max_concurrent slots a tenant's runs and hooks hold (system, or user-NAME)",
            tenant_slots.clone(),
        );
        let tenant_waiting = Family::<TenantLabel, Gauge>::default();
        r.register(
            "tenant_waiting",
            "A tenant's runs waiting for a max_concurrent slot",
            tenant_waiting.clone(),
        );
        let max_concurrent = gauge(&mut r, "max_concurrent", "[daemon] max_concurrent in force");
        let oneshots_pending = gauge(
            &mut r,
            "oneshots_pending",
            "One-shots submitted and not yet done",
        );
        let config_valid = gauge(
            &mut r,
            "config_valid",
            "1 while the job file on disk is valid; 0 while it is rejected and the last good one runs",
        );
        let history_backlog = gauge(
            &mut r,
            "history_backlog_records",
            "History records kept in memory because the disk refused them",
        );
        let history_write_errors = Counter::default();
        r.register(
            "history_write_errors",
            "Failed writes to the history log",
            history_write_errors.clone(),
        );
        let mail_dropped = Family::<TenantLabel, Counter>::default();
        r.register(
            "mail_dropped",
            "Mail deliveries not sent because their tenant's mail queue was full",
            mail_dropped.clone(),
        );
        let webhook_deliveries = Family::<DeliveryLabels, Counter>::default();
        r.register(
            "webhook_deliveries",
            "Webhook and ping deliveries that ended, by kind (webhook, ping) and result: delivered, failed (attempts or age used up, or a 4xx), refused (a user's delivery to a non-public address), expired (waited too long to start), dropped (the queue was full)",
            webhook_deliveries.clone(),
        );
        let webhook_retries = Family::<KindLabel, Counter>::default();
        r.register(
            "webhook_retries",
            "Attempts of webhooks and pings after their first",
            webhook_retries.clone(),
        );
        let webhook_dropped = Family::<TenantLabel, Counter>::default();
        r.register(
            "webhook_dropped",
            "Webhooks and pings not queued because their tenant's share of the delivery queue (or the queue) was full",
            webhook_dropped.clone(),
        );
        let webhook_queued = Gauge::default();
        r.register(
            "webhook_queued",
            "Webhooks and pings waiting or being sent",
            webhook_queued.clone(),
        );
        let containment = Family::<ModeLabel, Gauge>::default();
        r.register(
            "containment",
            "1 for how runs are contained: mode=\"cgroup\" (a cgroup v2 leaf per run) or \"process_group\" (the fallback)",
            containment.clone(),
        );
        let cgroup_controllers = Family::<ControllerLabel, Gauge>::default();
        r.register(
            "cgroup_controller",
            "1 if runs' cgroups get this controller (their limits are enforced), 0 if not",
            cgroup_controllers.clone(),
        );
        let run_cpu = Family::<CpuLabels, Counter<f64, AtomicU64>>::default();
        r.register_with_unit(
            "run_cpu",
            "CPU time of runs that ended, mode=\"user\" or \"system\" (from the run's cgroup where it has one)",
            Unit::Seconds,
            run_cpu.clone(),
        );
        let oom_kills = Family::<JobLabel, Counter>::default();
        r.register(
            "run_oom_kills",
            "Runs in which the kernel's out-of-memory killer killed a process",
            oom_kills.clone(),
        );
        let cluster = config
            .cluster
            .is_some()
            .then(|| ClusterSeries::register(&mut r));
        r.register(
            "build",
            "The running rea",
            Info::new(VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        let mut m = Metrics {
            registry: Arc::new(r),
            runs,
            duration,
            retries,
            missed,
            last_success,
            last_failure,
            next_fire,
            consecutive_failures,
            last_status,
            last_exit_code,
            paused,
            oneshot_runs,
            running,
            running_hooks,
            queued,
            tenant_slots,
            tenant_waiting,
            max_concurrent,
            oneshots_pending,
            config_valid,
            history_backlog,
            history_write_errors,
            mail_dropped,
            webhook_deliveries,
            webhook_retries,
            webhook_dropped,
            webhook_queued,
            containment,
            cgroup_controllers,
            run_cpu,
            oom_kills,
            alert,
            overdue,
            cluster,
            jobs: HashMap::new(),
            retired: HashSet::new(),
        };
        m.config_valid.set(1);
        for status in RunStatus::ONESHOT_FINAL {
            let _ = m.oneshot_runs.get_or_create(&StatusLabel {
                status: status.as_str(),
            });
        }
        m.set_jobs(config);
        m
    }

    /// What the HTTP task renders.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// A new configuration is in force: series of jobs that left the file
    /// disappear, new jobs get theirs (at zero). Kept jobs keep counting.
    pub(crate) fn set_jobs(&mut self, config: &Config) {
        let names: HashSet<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        let gone: Vec<String> = self
            .jobs
            .keys()
            .filter(|n| !names.contains(n.as_str()))
            .cloned()
            .collect();
        for name in &gone {
            self.jobs.remove(name);
            let label = JobLabel { job: name.clone() };
            for status in FINAL {
                self.runs.remove(&RunLabels {
                    job: name.clone(),
                    status: status.as_str(),
                });
            }
            self.duration.remove(&label);
            self.retries.remove(&label);
            self.missed.remove(&label);
            for status in LAST {
                self.last_status.remove(&RunLabels {
                    job: name.clone(),
                    status: status.as_str(),
                });
            }
            self.last_success.remove(&label);
            self.last_failure.remove(&label);
            self.next_fire.remove(&label);
            self.consecutive_failures.remove(&label);
            self.last_exit_code.remove(&label);
            self.paused.remove(&label);
            self.oom_kills.remove(&label);
            for mode in ["user", "system"] {
                self.run_cpu.remove(&CpuLabels {
                    job: name.clone(),
                    mode,
                });
            }
        }
        self.retired = gone.into_iter().collect();
        for name in names {
            if self.jobs.contains_key(name) {
                continue;
            }
            self.retired.remove(name);
            let label = JobLabel {
                job: name.to_string(),
            };
            let series = JobSeries {
                runs: FINAL.map(|status| {
                    self.runs.get_or_create_owned(&RunLabels {
                        job: name.to_string(),
                        status: status.as_str(),
                    })
                }),
                duration: self.duration.get_or_create_owned(&label),
                retries: self.retries.get_or_create_owned(&label),
                missed: self.missed.get_or_create_owned(&label),
                last_success: None,
                last_failure: None,
            };
            // The state series exist from the start, at zero, so a rule
            // over them sees every job before its first run.
            let _ = self.consecutive_failures.get_or_create(&label);
            let _ = self.paused.get_or_create(&label);
            for status in LAST {
                let _ = self.last_status.get_or_create(&RunLabels {
                    job: name.to_string(),
                    status: status.as_str(),
                });
            }
            self.jobs.insert(name.to_string(), series);
        }
    }

    /// What the history log says of a job, from before this daemon
    /// started: its newest success, and its last run if that failed (a
    /// failure older than the last success is not looked for: reading the
    /// log that far back would slow every start).
    pub(crate) fn seed(&mut self, job: &str, summary: &rea_store::history::JobSummary) {
        if let Some(at) = summary.last_success {
            self.set_last(job, at, true);
        }
        if let Some(last) = summary.last.as_ref().filter(|l| is_failure(l.status)) {
            if let Some(at) = last.started.or(last.ended) {
                self.set_last(job, at, false);
            }
        }
    }

    /// Moves the job's last success (or failure) timestamp forward to `at`.
    fn set_last(&mut self, job: &str, at: DateTime<Utc>, success: bool) {
        let Some(series) = self.jobs.get_mut(job) else {
            return;
        };
        let (slot, family) = if success {
            (&mut series.last_success, &self.last_success)
        } else {
            (&mut series.last_failure, &self.last_failure)
        };
        let gauge = slot.get_or_insert_with(|| {
            family.get_or_create_owned(&JobLabel {
                job: job.to_string(),
            })
        });
        let t = unix_seconds(at);
        if t > gauge.get() {
            gauge.set(t);
        }
    }

    /// Counts one history record (the loop calls this for each it executes).
    pub(crate) fn observe(&mut self, rec: &Record) {
        let Some(job) = rec.job.as_deref() else {
            return;
        };
        match rec.event {
            Event::Run => {}
            Event::Missed => {
                if let Some(s) = self.jobs.get(job) {
                    s.missed.inc_by(rec.count.unwrap_or(1));
                }
                return;
            }
            _ => return,
        }
        let Some(status) = rec.status else {
            return;
        };
        let Some(series) = self.jobs.get(job) else {
            if status.is_final() && !self.retired.contains(job) {
                self.oneshot_runs
                    .get_or_create(&StatusLabel {
                        status: status.as_str(),
                    })
                    .inc();
            }
            return;
        };
        if status == RunStatus::Started {
            if rec.trigger == Some(Trigger::Retry) {
                series.retries.inc();
            }
            return;
        }
        if let Some(i) = FINAL.iter().position(|s| *s == status) {
            series.runs[i].inc();
        }
        for (mode, ms) in [("user", rec.user_cpu_ms), ("system", rec.sys_cpu_ms)] {
            if let Some(ms) = ms {
                self.run_cpu
                    .get_or_create(&CpuLabels {
                        job: job.to_string(),
                        mode,
                    })
                    .inc_by(ms as f64 / 1000.0);
            }
        }
        if rec.oom_killed == Some(true) {
            self.oom_kills
                .get_or_create(&JobLabel {
                    job: job.to_string(),
                })
                .inc();
        }
        if matches!(
            status,
            RunStatus::Succeeded
                | RunStatus::Failed
                | RunStatus::TimedOut
                | RunStatus::Killed
                | RunStatus::OomKilled
        ) {
            if let Some(ms) = rec.duration_ms {
                series.duration.observe(ms as f64 / 1000.0);
            }
        }
        // The start, as the history's summaries have it: a daily job's
        // successes are then 24 h apart however long each one took.
        let at = rec.started.unwrap_or(rec.ts);
        if status == RunStatus::Succeeded {
            self.set_last(job, at, true);
        } else if is_failure(status) {
            self.set_last(job, at, false);
        }
    }

    /// How runs are contained, set once at start.
    pub(crate) fn set_containment(&self, c: &rea_exec::cgroup::Containment) {
        self.containment
            .get_or_create(&ModeLabel { mode: c.kind() })
            .set(1);
        for controller in rea_exec::cgroup::CONTROLLERS {
            let on = c.tree().is_some_and(|t| t.has(controller));
            self.cgroup_controllers
                .get_or_create(&ControllerLabel { controller })
                .set(i64::from(on));
        }
    }

    /// A history write failed (the record waits in memory).
    /// A mail delivery of `tenant` (its key) was dropped.
    pub(crate) fn mail_dropped(&self, tenant: &str) {
        self.mail_dropped
            .get_or_create(&TenantLabel {
                tenant: tenant.to_string(),
            })
            .inc();
    }

    /// The deliveries' counts (`rea_daemon::webhooks`), at a scrape: each
    /// counter is brought up to its total.
    pub(crate) fn refresh_webhooks(&self, c: &crate::webhooks::Counts) {
        let up_to = |counter: &Counter, total: u64| {
            let now = counter.get();
            if total > now {
                counter.inc_by(total - now);
            }
        };
        for (&(kind, result), &n) in &c.deliveries {
            up_to(
                &self
                    .webhook_deliveries
                    .get_or_create(&DeliveryLabels { kind, result }),
                n,
            );
        }
        for (&kind, &n) in &c.retries {
            up_to(&self.webhook_retries.get_or_create(&KindLabel { kind }), n);
        }
        for (tenant, &n) in &c.dropped {
            up_to(
                &self.webhook_dropped.get_or_create(&TenantLabel {
                    tenant: tenant.clone(),
                }),
                n,
            );
        }
        self.webhook_queued
            .set(i64::try_from(c.queued).unwrap_or(i64::MAX));
    }

    pub(crate) fn history_write_error(&self) {
        self.history_write_errors.inc();
    }

    /// Reads the state gauges from the engine (on each scrape).
    /// A claim came back (cluster mode).
    pub(crate) fn claimed(&self, outcome: &'static str) {
        if let Some(c) = &self.cluster {
            c.claims.get_or_create(&OutcomeLabel { outcome }).inc();
        }
    }

    /// The cluster node's state, at a scrape.
    pub(crate) fn refresh_cluster(&self, node: &str, h: &rea_store::cluster::NodeHealth) {
        let Some(c) = &self.cluster else {
            return;
        };
        c.lease_live.set(i64::from(h.lease_live));
        c.lease_age.set(h.lease_age.as_secs_f64());
        c.backlog.set(i64::try_from(h.backlog).unwrap_or(i64::MAX));
        let dropped = c.dropped.get();
        if h.dropped > dropped {
            c.dropped.inc_by(h.dropped - dropped);
        }
        if let Some((at, _)) = &h.last_error {
            c.last_error
                .get_or_create(&NodeLabel {
                    node: node.to_string(),
                })
                .set(unix_seconds(*at));
        }
        if let Some(ms) = h.clock_offset_ms {
            c.clock_offset
                .get_or_create(&NodeLabel {
                    node: node.to_string(),
                })
                .set(ms as f64 / 1000.0);
        }
    }

    pub(crate) fn refresh(&self, engine: &Engine, config_valid: bool, history_backlog: usize) {
        let int = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.running.set(int(engine.running()));
        self.running_hooks.set(int(engine.hooks_running()));
        self.queued.set(int(engine.queued()));
        // Tenants come and go with users' files: rebuilt each refresh.
        self.tenant_slots.clear();
        self.tenant_waiting.clear();
        for (owner, held, waiting) in engine.tenant_slots() {
            let label = TenantLabel {
                tenant: rea_core::tenant::Tenant::from_owner(owner.as_deref()).key(),
            };
            self.tenant_slots.get_or_create(&label).set(int(held));
            self.tenant_waiting.get_or_create(&label).set(int(waiting));
        }
        self.max_concurrent.set(int(engine.max_concurrent()));
        self.oneshots_pending.set(int(engine.oneshot_count()));
        self.config_valid.set(i64::from(config_valid));
        self.history_backlog.set(int(history_backlog));
        for status in engine.status() {
            if !self.jobs.contains_key(&status.name) {
                continue;
            }
            let label = JobLabel {
                job: status.name.clone(),
            };
            // A paused or disabled job will not fire at its next occurrence:
            // no series, so `time() > rea_next_fire_timestamp_seconds`
            // style rules do not fire for it.
            let next = status
                .next_fire
                .filter(|_| status.enabled && !status.paused);
            match next {
                Some(at) => {
                    self.next_fire.get_or_create(&label).set(unix_seconds(at));
                }
                None => {
                    self.next_fire.remove(&label);
                }
            }
            self.paused
                .get_or_create(&label)
                .set(i64::from(status.paused));
            self.consecutive_failures
                .get_or_create(&label)
                .set(i64::from(status.consecutive_failures));
            let last = status.last.as_ref();
            for s in LAST {
                let is_last = last.is_some_and(|l| l.status == s);
                self.last_status
                    .get_or_create(&RunLabels {
                        job: status.name.clone(),
                        status: s.as_str(),
                    })
                    .set(i64::from(is_last));
            }
            match last.and_then(|l| l.exit_code) {
                Some(code) => {
                    self.last_exit_code
                        .get_or_create(&label)
                        .set(i64::from(code));
                }
                None => {
                    self.last_exit_code.remove(&label);
                }
            }
        }
    }

    /// The alert gauges, from the engine's alert state at `now` (rebuilt
    /// each scrape: only jobs with alerts armed or raised have them).
    pub(crate) fn refresh_alerts(&self, engine: &Engine, now: DateTime<Utc>) {
        self.alert.clear();
        self.overdue.clear();
        for a in engine.alert_status() {
            for kind in rea_core::alert::AlertKind::ALL {
                let raised = a.raised.contains(&kind);
                if raised || a.armed.contains(&kind) {
                    self.alert
                        .get_or_create(&AlertLabels {
                            job: a.job.clone(),
                            kind: kind.as_str(),
                        })
                        .set(i64::from(raised));
                }
            }
            if a.armed.contains(&rea_core::alert::AlertKind::Late) {
                let overdue = a.overdue_since.map_or(0.0, |due| {
                    (now - due).num_milliseconds().max(0) as f64 / 1000.0
                });
                self.overdue
                    .get_or_create(&JobLabel { job: a.job })
                    .set(overdue);
            }
        }
    }

    /// The exposition, in OpenMetrics or the classic Prometheus text format.
    #[cfg(test)]
    pub(crate) fn render(&self, openmetrics: bool) -> String {
        render(&self.registry, openmetrics)
    }
}

fn unix_seconds(t: DateTime<Utc>) -> f64 {
    t.timestamp_millis() as f64 / 1000.0
}

pub(super) fn render(registry: &Registry, openmetrics: bool) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use rea_core::engine::Recovered;
    use std::path::Path;

    fn config(src: &str) -> Config {
        rea_config::parse(src.as_bytes(), Path::new("jobs.toml")).expect("valid config")
    }

    const TWO: &str = "[jobs.good]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
                       [jobs.bad]\nschedule = \"@daily\"\ncommand = \"false\"\n";

    fn at(s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, s).unwrap()
    }

    fn run(job: &str, status: RunStatus, trigger: Trigger, ms: Option<u64>) -> Record {
        let mut r = Record::new(Event::Run, at(30));
        r.job = Some(job.to_string());
        r.status = Some(status);
        r.trigger = Some(trigger);
        r.duration_ms = ms;
        r.started = Some(at(10));
        if status.is_final() {
            r.ended = Some(at(20));
        }
        r
    }

    /// The sample lines of `name` (exact metric name before `{` or space).
    fn samples(text: &str, name: &str) -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .map(str::to_string)
            .collect()
    }

    fn has(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }

    #[test]
    fn records_become_counters_histograms_and_timestamps() {
        let cfg = config(TWO);
        let mut m = Metrics::new(&cfg);
        m.observe(&run("good", RunStatus::Started, Trigger::Schedule, None));
        m.observe(&run(
            "good",
            RunStatus::Succeeded,
            Trigger::Schedule,
            Some(20),
        ));
        m.observe(&run("good", RunStatus::Skipped, Trigger::Schedule, None));
        m.observe(&run(
            "bad",
            RunStatus::Failed,
            Trigger::Schedule,
            Some(2_000),
        ));
        m.observe(&run("bad", RunStatus::Started, Trigger::Retry, None));
        m.observe(&run(
            "bad",
            RunStatus::TimedOut,
            Trigger::Retry,
            Some(4_000_000),
        ));
        let mut missed = Record::new(Event::Missed, at(0));
        missed.job = Some("bad".into());
        missed.count = Some(3);
        m.observe(&missed);
        // One-shots have no per-job series (their ids are unbounded).
        m.observe(&run(
            "oneshot-1",
            RunStatus::Failed,
            Trigger::Oneshot,
            Some(1),
        ));
        m.observe(&run(
            "oneshot-2",
            RunStatus::Cancelled,
            Trigger::Oneshot,
            None,
        ));
        m.history_write_error();

        let text = m.render(false);
        has(&text, "rea_runs_total{job=\"good\",status=\"succeeded\"} 1");
        has(&text, "rea_runs_total{job=\"good\",status=\"skipped\"} 1");
        has(&text, "rea_runs_total{job=\"good\",status=\"failed\"} 0");
        has(&text, "rea_runs_total{job=\"bad\",status=\"failed\"} 1");
        has(&text, "rea_runs_total{job=\"bad\",status=\"timed_out\"} 1");
        has(
            &text,
            "rea_runs_total{job=\"bad\",status=\"interrupted\"} 0",
        );
        has(&text, "rea_runs_total{job=\"bad\",status=\"oom_killed\"} 0");
        assert_eq!(samples(&text, "rea_runs_total").len(), 14);
        has(&text, "rea_retries_total{job=\"bad\"} 1");
        has(&text, "rea_retries_total{job=\"good\"} 0");
        has(&text, "rea_missed_occurrences_total{job=\"bad\"} 3");
        has(&text, "rea_oneshot_runs_total{status=\"failed\"} 1");
        has(&text, "rea_oneshot_runs_total{status=\"cancelled\"} 1");
        has(&text, "rea_history_write_errors_total 1");
        has(&text, "rea_build_info{version=\"0.1.0\"} 1");
        // Histogram: skipped runs are not timed; 4000 s is past the last bucket.
        has(&text, "rea_run_duration_seconds_count{job=\"good\"} 1");
        has(
            &text,
            "rea_run_duration_seconds_bucket{job=\"good\",le=\"0.01\"} 0",
        );
        has(
            &text,
            "rea_run_duration_seconds_bucket{job=\"good\",le=\"0.05\"} 1",
        );
        has(&text, "rea_run_duration_seconds_sum{job=\"bad\"} 4002.0");
        has(
            &text,
            "rea_run_duration_seconds_bucket{job=\"bad\",le=\"5\"} 1",
        );
        has(
            &text,
            "rea_run_duration_seconds_bucket{job=\"bad\",le=\"3600\"} 1",
        );
        has(
            &text,
            "rea_run_duration_seconds_bucket{job=\"bad\",le=\"+Inf\"} 2",
        );
        // Last success: only the job that succeeded, when it started.
        let started = unix_seconds(at(10));
        has(
            &text,
            &format!("rea_last_success_timestamp_seconds{{job=\"good\"}} {started:.1}"),
        );
        assert_eq!(
            samples(&text, "rea_last_success_timestamp_seconds").len(),
            1
        );
        // Both formats carry the same samples; OpenMetrics ends with EOF.
        let om = m.render(true);
        assert!(om.ends_with("# EOF\n"), "{om}");
        has(&om, "rea_runs_total{job=\"bad\",status=\"failed\"} 1");
        has(&om, "rea_build_info{version=\"0.1.0\"} 1");
    }

    #[test]
    fn seeded_success_only_moves_forward() {
        let mut m = Metrics::new(&config(TWO));
        let seeded = rea_store::history::JobSummary {
            last_success: Some(at(40)),
            ..Default::default()
        };
        m.seed("good", &seeded);
        m.seed("nosuchjob", &seeded);
        m.observe(&run("good", RunStatus::Succeeded, Trigger::Manual, Some(1)));
        let text = m.render(false);
        let seeded = unix_seconds(at(40));
        has(
            &text,
            &format!("rea_last_success_timestamp_seconds{{job=\"good\"}} {seeded:.1}"),
        );
        assert_eq!(
            samples(&text, "rea_last_success_timestamp_seconds").len(),
            1
        );
    }

    #[test]
    fn state_gauges_come_from_the_engine() {
        let cfg = config(
            "[daemon]\nmax_concurrent = 3\n\
             [jobs.good]\nschedule = \"0 * * * *\"\ncommand = \"true\"\n\
             [jobs.boot]\nschedule = \"@reboot\"\ncommand = \"true\"\n",
        );
        let m = Metrics::new(&cfg);
        let mut engine = Engine::new(&cfg.plan(), 1);
        let _ = engine.start(at(0), Recovered::default());
        m.refresh(&engine, false, 7);
        let text = m.render(false);
        has(&text, "rea_max_concurrent 3");
        // The @reboot run was handed out at start.
        has(&text, "rea_running 1");
        has(&text, "rea_queued 0");
        has(&text, "rea_tenant_slots{tenant=\"system\"} 1");
        has(&text, "rea_tenant_waiting{tenant=\"system\"} 0");
        has(&text, "rea_oneshots_pending 0");
        has(&text, "rea_config_valid 0");
        has(&text, "rea_history_backlog_records 7");
        let next = unix_seconds(Utc.with_ymd_and_hms(2026, 3, 1, 13, 0, 0).unwrap());
        has(
            &text,
            &format!("rea_next_fire_timestamp_seconds{{job=\"good\"}} {next:.1}"),
        );
        // @reboot has no next occurrence: no series rather than a fake one.
        assert_eq!(samples(&text, "rea_next_fire_timestamp_seconds").len(), 1);
        m.refresh(&engine, true, 0);
        has(&m.render(false), "rea_config_valid 1");
    }

    #[test]
    fn a_reload_removes_the_series_of_jobs_that_left() {
        let cfg = config(TWO);
        let mut m = Metrics::new(&cfg);
        let mut engine = Engine::new(&cfg.plan(), 1);
        let _ = engine.start(at(0), Recovered::default());
        m.observe(&run("bad", RunStatus::Failed, Trigger::Schedule, Some(5)));
        m.observe(&run(
            "good",
            RunStatus::Succeeded,
            Trigger::Schedule,
            Some(5),
        ));
        m.refresh(&engine, true, 0);
        assert!(m.render(false).contains("job=\"bad\""));

        let new = config(
            "[jobs.good]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
             [jobs.new]\nschedule = \"@hourly\"\ncommand = \"true\"\n",
        );
        super::super::reloaded(Some(&mut m), &cfg, &new);
        let _ = engine.reload(&new.plan(), at(1));
        // The removed job's last run ends after the reload: not counted,
        // and not taken for a one-shot either.
        m.observe(&run("bad", RunStatus::Failed, Trigger::Schedule, Some(5)));
        m.refresh(&engine, true, 0);
        let text = m.render(false);
        assert!(!text.contains("job=\"bad\""), "{text}");
        has(&text, "rea_oneshot_runs_total{status=\"failed\"} 0");
        // Kept jobs keep their counts; new ones start at zero.
        has(&text, "rea_runs_total{job=\"good\",status=\"succeeded\"} 1");
        has(&text, "rea_runs_total{job=\"new\",status=\"succeeded\"} 0");
        assert_eq!(samples(&text, "rea_next_fire_timestamp_seconds").len(), 2);
        assert_eq!(
            samples(&text, "rea_last_success_timestamp_seconds").len(),
            1
        );
    }
}
