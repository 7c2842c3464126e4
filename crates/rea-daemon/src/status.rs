//! What the daemon tells about itself: the `status` answer (typed, see
//! `control::protocol`) and systemd's one-line status.

use chrono::{DateTime, Utc};
use rea_core::engine::{JobStatus, OneShotStatus};

use super::users::Scope;
use super::Loop;
use crate::control::protocol::{
    ConfigError, DaemonInfo, HistoryInfo, HookInfo, JobInfo, LastInfo, OneShotInfo, RunningInfo,
    StatusReply, Ts, WriteError,
};

impl Loop {
    /// Every job's live state (or one job's).
    pub(super) fn status_reply(
        &self,
        only: Option<&str>,
        now: DateTime<Utc>,
        scope: &Scope,
    ) -> StatusReply {
        let mut statuses: Vec<JobStatus> = match only {
            Some(name) => self.engine.job_status(name).into_iter().collect(),
            None => self.engine.status(),
        };
        statuses.retain(|s| scope.owns(&s.name));
        StatusReply {
            live: true,
            daemon: self.daemon_info(now, scope),
            jobs: statuses
                .iter()
                .map(|s| {
                    let mut info = job_info(s);
                    info.hooks = self.hooks_of(&s.name);
                    // What each running run has used so far (its cgroup).
                    for r in &mut info.running {
                        if let Some(u) = self.runs.usage_now(&r.run) {
                            r.cpu_ms = Some(u.user_ms + u.sys_ms);
                            r.memory_peak_kb = u.memory_peak_kb;
                        }
                    }
                    info
                })
                .collect(),
            oneshot: None,
            tenant: scope.tenant().and_then(|t| t.user()).map(str::to_string),
        }
    }

    /// What the daemon tells of itself (the refusals of the job files
    /// only as far as they are the asker's).
    pub(super) fn daemon_info(&self, now: DateTime<Utc>, scope: &Scope) -> DaemonInfo {
        // A user sees the refusals of her own file only: another file's
        // may quote values that are not hers to read.
        let errors = self.files.error().and_then(|(at, errors)| {
            let errors: Vec<String> = match scope {
                Scope::Admin => errors.clone(),
                Scope::User(me) => {
                    let hers = self.files.files().set().user_file(me)?;
                    let hers = hers.display().to_string();
                    errors
                        .iter()
                        .filter(|e| e.starts_with(&hers))
                        .cloned()
                        .collect()
                }
            };
            (!errors.is_empty()).then_some(ConfigError {
                at: Ts(*at),
                errors,
            })
        });
        let health = self.backend.history_health();
        DaemonInfo {
            running: true,
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: Ts(self.started_at),
            uptime_s: (now - self.started_at).num_seconds().max(0),
            file: self.shown_file(),
            state_dir: absolute(&self.opts.state_dir),
            last_reload: Ts(self.files.last_reload()),
            config_error: errors,
            running_runs: self.engine.running(),
            running_hooks: self.engine.hooks_running(),
            max_concurrent: self.engine.max_concurrent(),
            queued: self.engine.queued(),
            oneshots_pending: self.engine.oneshot_count(),
            history: HistoryInfo {
                backlog: health.backlog,
                dropped: health.dropped,
                last_error: health.last_error.map(|e| WriteError {
                    at: Ts(e.at),
                    message: e.message,
                }),
            },
            containment: self.containment.mode(),
            unenforced_tenant_limits: self.unenforced_tenant_limits(scope),
            cluster: self.cluster_info(),
        }
    }

    /// The tenants' subtree limits this host cannot enforce (no I/O: what
    /// the daemon's subtree got at start); a user's answer names hers only.
    fn unenforced_tenant_limits(&self, scope: &Scope) -> Vec<String> {
        super::startup::limited_tenants(&self.config)
            .into_iter()
            .filter(|(user, _)| match scope {
                Scope::Admin => true,
                Scope::User(me) => me == user,
            })
            .filter_map(|(user, limits)| {
                let missing = self.containment.unenforceable(&limits.cgroup);
                (!missing.is_empty()).then(|| {
                    format!(
                        "tenant {user}: limits this host cannot enforce, not applied: {}",
                        missing.join(", ")
                    )
                })
            })
            .collect()
    }

    /// The hook processes of `job`'s finished runs, oldest first.
    fn hooks_of(&self, job: &str) -> Vec<HookInfo> {
        let mut hooks: Vec<HookInfo> = self
            .hook_batches
            .values()
            .filter(|b| b.job.name == job)
            .filter_map(|b| {
                b.current.as_ref().map(|h| HookInfo {
                    hook: h.hook.name().to_string(),
                    run: b.run.clone(),
                    pid: h.pid,
                    since: Ts(h.since),
                })
            })
            .collect();
        hooks.sort_by_key(|h| h.since.0);
        hooks
    }

    pub(super) fn notify_ready(&mut self) {
        if self.notify.enabled() {
            let line = rea_host::notify::status_line(
                self.config.jobs.len(),
                self.engine.next_wake(),
                self.files.error().map(|(_, e)| e.len()),
            );
            self.notify.ready(&line);
        }
    }

    /// Once per loop iteration; sends only when the summary changed.
    pub(super) fn notify_summary(&mut self) {
        if self.notify.enabled() {
            self.notify.summary(
                self.config.jobs.len(),
                self.engine.next_wake(),
                self.files.error().map(|(_, e)| e.len()),
            );
        }
    }
}

/// A pending one-shot as the protocol shows it.
pub(super) fn oneshot_info(s: &OneShotStatus) -> OneShotInfo {
    let d = &s.def;
    OneShotInfo {
        id: d.id.to_string(),
        state: if s.running { "running" } else { "pending" }.to_string(),
        due: Ts(d.due),
        next_attempt_at: s.next_attempt_at.map(Ts),
        argv: d.argv.to_vec(),
        shell: d.shell,
        dir: d.dir.display().to_string(),
        tags: d.rare().tags.clone(),
        submitted: Ts(d.submitted),
        timeout_ms: d.rare().timeout_ms,
        expire_ms: d.rare().expire_ms,
        retry: d.rare().retry.clone(),
    }
}

fn job_info(s: &JobStatus) -> JobInfo {
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
    JobInfo {
        name: s.name.clone(),
        state: state.to_string(),
        enabled: s.enabled,
        paused: s.paused,
        hooks: Vec::new(),
        running: s
            .running
            .iter()
            .map(|(run, pid, since)| RunningInfo {
                run: run.clone(),
                pid: *pid,
                since: since.map(Ts),
                cpu_ms: None,
                memory_peak_kb: None,
            })
            .collect(),
        queued: s.queued,
        retry_at: s.retry_at.map(Ts),
        next_fire: s.next_fire.map(Ts),
        consecutive_failures: s.consecutive_failures,
        after: s.after.iter().map(|d| d.job.clone()).collect(),
        dependencies: s.after.clone(),
        last: s.last.as_ref().map(|l| LastInfo {
            run: l.run.clone(),
            status: l.status.as_str().to_string(),
            ended: Ts(l.ended),
            duration_ms: l.duration.as_millis() as u64,
            exit_code: l.exit_code,
        }),
    }
}

impl Loop {
    /// The main job file as clients are told it: absolute (not canonical:
    /// a symlink swapped as a ConfigMap swaps it is still followed at its
    /// path), so a command run in another directory than the daemon's
    /// finds the same file. Messages keep the path as it was given.
    pub(super) fn shown_file(&self) -> String {
        absolute(&self.opts.file)
    }
}

fn absolute(path: &std::path::Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
