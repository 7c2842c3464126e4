//! Carrying out the engine's actions: spawning runs (in cluster mode, once
//! the store granted them: `REA_FENCE`), signalling them, appending history records, telling
//! `trigger --wait` clients and followers, keeping the one-shot journal in step.

use rea_core::tenant::Tenant;
use std::collections::VecDeque;

use chrono::{DateTime, SecondsFormat, Utc};
use rea_core::engine::{Action, Def, StartRun};
use rea_core::record::{Event, Record, RunStatus, Trigger};
use rea_core::run::{Program, Started};
use serde_json::Value;
use tracing::{error, info, warn};

use super::environment::{home_dir, inherits_daemon_env, run_env};
use super::{Loop, Msg};
use rea_exec::{self as executor, RunSpec};
use rea_host::user as host;

impl Loop {
    /// Carries out actions until none are left (an action's answer may
    /// produce more, e.g. a failed spawn frees a slot).
    ///
    /// Runs start first, before the batch's records are written: one
    /// tenant's 2,000 jobs skipped in the same second (2,000 lines to log
    /// and append) must not hold up another tenant's run due then. The
    /// order of a run's own lines is unchanged (its `started` line comes
    /// from the spawn, after everything already in the batch).
    pub(super) fn execute(&mut self, actions: &mut VecDeque<Action>) {
        if actions.len() > 1 {
            let (starts, rest): (VecDeque<Action>, VecDeque<Action>) = actions
                .drain(..)
                .partition(|a| matches!(a, Action::Start(_)));
            actions.extend(starts);
            actions.extend(rest);
        }
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
                    let changed = self.engine.observe(&rec);
                    self.append(&rec);
                    self.publish_record(&rec, changed);
                    self.notify_waiters(&rec);
                    self.notify_record(&rec);
                }
                Action::Alert(n) => self.on_alert(*n, actions),
                Action::OneShotDone { id } => self.backend.oneshot_done(&id),
                Action::Claim(c) => self.claim(c, actions),
                Action::AfterRun(a) => self.after_run(*a),
                Action::StartHooks { id, after } => self.start_hooks(id, *after, actions),
                Action::Terminate { run } => {
                    self.runs.terminate(&run);
                }
                Action::Start(start) => {
                    let run = start.run.clone();
                    // The executor reads the kernel's clock; the daemon
                    // records on its own (in cluster mode, the database's).
                    let result = self.spawn(start).map(|s| Started {
                        at: rea_store::clock::from_kernel(s.at),
                        ..s
                    });
                    actions.extend(self.engine.spawned(&run, result, rea_store::clock::now()));
                }
            }
        }
    }

    /// Makes queued journal deletions durable (they need no acknowledgement,
    /// so one sync per loop iteration serves them all).
    pub(super) fn sync_journal(&mut self) {
        let journal = self.backend.journal();
        if journal.dirty() {
            if let Err(e) = journal.commit() {
                error!("cannot write the one-shot journal: {e}");
            }
        }
        if journal.should_compact(self.engine.oneshot_count()) {
            let pending = self.engine.oneshots();
            match journal.compact(&mut pending.iter().map(|s| s.def.as_ref())) {
                Ok(()) => info!(pending = pending.len(), "one-shot journal compacted"),
                Err(e) => error!("cannot compact the one-shot journal: {e}"),
            }
        }
    }

    pub(super) fn notify_waiters(&mut self, rec: &Record) {
        let is_final = rec.event == Event::Run && rec.status.is_some_and(|s| s.is_final());
        if !is_final {
            return;
        }
        let Some(run) = rec.run.as_deref() else {
            return;
        };
        let waiters = self.runs.take_waiters(run);
        if waiters.is_none() && !self.follows.awaited(run) {
            return;
        }
        let value = serde_json::to_value(rec).unwrap_or(Value::Null);
        for w in waiters.into_iter().flatten() {
            let _ = w.send(value.clone());
        }
        self.followed_run_ended(run, &value);
    }

    pub(super) fn append(&mut self, rec: &Record) {
        if let Err(e) = self.backend.record(rec) {
            // Scheduling goes on: the record waits in the writer's backlog and
            // is written when the disk accepts it again.
            error!("cannot write the history log (kept in memory, retried on the next write): {e}");
            if let Some(m) = &self.metrics {
                m.history_write_error();
            }
        }
    }

    /// A run or hook process ended.
    pub(super) fn on_finished(&mut self, msg: Msg, actions: &mut VecDeque<Action>) {
        match msg {
            Msg::Finished { run, mut outcome } => {
                self.runs.ended(&run);
                outcome.started.at = rea_store::clock::from_kernel(outcome.started.at);
                outcome.ended = rea_store::clock::from_kernel(outcome.ended);
                actions.extend(
                    self.engine
                        .finished(&run, &outcome, rea_store::clock::now()),
                );
            }
            Msg::HookFinished { id, outcome } => self.hook_finished(id, &outcome, actions),
            Msg::MailEnded { tenant } => self.mail_ended(tenant),
            Msg::AlertTold { notice, claim } => self.alert_told(*notice, claim, actions),
        }
    }

    pub(super) fn spawn(&mut self, start: StartRun) -> Result<Started, String> {
        let (program, env_base, dir, timeout, kill_grace, output_limit, kill_stragglers) =
            match &start.def {
                Def::Job(job) => (
                    Program::Shell {
                        shell: job.shell.to_string(),
                        script: job.command.clone(),
                    },
                    &*job.env,
                    job.dir.clone(),
                    job.timeout,
                    job.kill_grace,
                    job.output_limit,
                    job.kill_stragglers,
                ),
                Def::OneShot(shot) => (
                    shot.program(),
                    &shot.rare().env,
                    Some(shot.dir.to_path_buf()),
                    shot.timeout(),
                    rea_core::oneshot::KILL_GRACE,
                    rea_core::oneshot::OUTPUT_LIMIT,
                    true,
                ),
            };
        if let Def::Job(job) = &start.def {
            self.account_check(job)?;
        }
        let (user, shell) = match &start.def {
            Def::Job(job) => (
                job.user.as_deref().map(host::user).transpose()?,
                &*job.shell,
            ),
            Def::OneShot(_) => (None, "/bin/sh"),
        };
        // As cron: in the job's `dir`, else its owner's home.
        let home = match &start.def {
            Def::Job(_) if dir.is_none() => home_dir(user.as_ref()),
            _ => None,
        };
        // As cron does for a crontab's owner: the user database says who
        // the job is; the job's own env may still override. Another user's
        // job inherits nothing of the daemon's environment.
        let inherit_env = inherits_daemon_env(user.as_ref());
        let mailto: &[String] = match &start.def {
            Def::Job(job) => &job.extras().mailto,
            Def::OneShot(_) => &[],
        };
        let mut env = run_env(
            user.as_ref(),
            shell,
            mailto,
            env_base,
            &start.name,
            &start.run,
        );
        // The job declared them (none is a REA_ or PATH-like name) and
        // the engine checked their values; they come after its `env`.
        if let Some(params) = &start.params {
            env.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        env.push((
            "REA_SCHEDULED_AT".into(),
            start.scheduled.to_rfc3339_opts(SecondsFormat::Secs, true),
        ));
        env.push(("REA_ATTEMPT".into(), start.attempt.to_string()));
        env.push(("REA_TRIGGER".into(), start.trigger.as_str().to_string()));
        if let Some(g) = start.grant {
            env.push(("REA_FENCE".into(), g.fence.to_string()));
        }
        let journal = self
            .journald
            .as_ref()
            .map(|j| j.lines(&start.name, &start.run));
        let spec = RunSpec {
            program,
            env,
            inherit_env,
            dir,
            home,
            timeout,
            kill_grace,
            output_limit,
            stdin: None,
            pass_fd: None,
            user,
            kill_stragglers,
            journald: journal,
            cgroup: self
                .containment
                .place_run(&Tenant::of(&start.name).key(), &start.run),
            // Her tenant's caps (`[tenants.NAME] min_nice`) over the job's,
            // and her rlimits set as her.
            limits: self.config.daemon.tenants.govern(
                &start.name,
                match &start.def {
                    Def::Job(job) => job.extras().limits,
                    Def::OneShot(_) => rea_core::run::Limits::NONE,
                },
            ),
        };
        let (started, handle, running) = executor::spawn(spec)?;
        // Kept before followers waiting for this job's next run attach to it.
        self.runs
            .spawned(start.run.clone(), start.name.clone(), handle, running);
        self.run_spawned(&start.name, &start.run);
        Ok(started)
    }
}

impl Loop {
    /// A user's job runs only while her account may, as PAM's account
    /// stage lets cron's jobs run (`rea_host::account`): not expired, not
    /// locked, still there. Refused, the run is recorded as failed to
    /// start with why, and its hooks and mail do not run either. The
    /// system's jobs are not checked.
    pub(super) fn account_check(&mut self, job: &rea_core::job::Job) -> Result<(), String> {
        let rea_core::tenant::Tenant::User(user) =
            rea_core::tenant::Tenant::from_owner(job.owner.as_deref())
        else {
            return Ok(());
        };
        let today = rea_store::clock::now().timestamp().div_euclid(86_400);
        self.accounts.check(user, today).map_err(|refusal| {
            format!(
                "refused: {refusal}; the jobs of an expired, locked or removed account do not run"
            )
        })
    }
}

pub(super) fn fmt_time(t: Option<DateTime<Utc>>) -> String {
    t.map(rea_core::record::format_ts).unwrap_or_default()
}

/// One log line per history record about a run, naming job, run and attempt.
pub(super) fn log_record(rec: &Record) {
    let job = rec.job.as_deref().unwrap_or("");
    let run = rec.run.as_deref().unwrap_or("");
    let attempt = rec.attempt.unwrap_or(0);
    let reason = rec.reason.as_deref().unwrap_or("");
    match (rec.event, rec.status) {
        (Event::Run, Some(RunStatus::Started)) => {
            let trigger = rec.trigger.map(Trigger::as_str).unwrap_or_default();
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
