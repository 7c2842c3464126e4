//! What a finished run's job asks for beyond its record: hook commands
//! (`on_success`, `on_failure`, `on_retry_exhausted`) and mail to `mailto`
//! through sendmail, as cron mails MAILTO. Hooks run one after the other in
//! one of the `max_concurrent` slots (the engine hands them out), show in
//! `rea status`, and are stopped at shutdown like runs; they are never
//! retried, and their failures are only logged: a hook can never cause
//! another run or another hook. Mail goes outside the limit, bounded per
//! tenant (`mail.rs`).
//!
//! A `user =` job's hooks run as that user, and read the run's output from
//! a sealed memfd on their descriptor 3 ([`output_file`]). What every run
//! and hook finds in its environment is `environment.rs`'s.

use rea_core::tenant::Tenant;
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rea_core::engine::{Action, AfterRun, Hook};
use rea_core::job::Job;
use rea_core::record::{Record, RunStatus, Trigger};
use rea_core::run::{Outcome, Program, Termination};
use tracing::{error, info, warn};

use super::actions::fmt_time;
use super::environment::{home_dir, inherits_daemon_env, run_env};
use super::shutdown::Stopping;
use super::Loop;
use rea_exec::{self as executor, RunHandle, RunSpec};
use rea_host::user::{self as host, User};

/// A finished run's hooks being run, one after the other, in one of the
/// `max_concurrent` slots (`Action::StartHooks`).
pub(super) struct HookBatch {
    pub(super) job: Arc<Job>,
    pub(super) run: String,
    /// Hooks not started yet, in order.
    remaining: VecDeque<(Hook, String)>,
    env: Vec<(String, String)>,
    user: Option<User>,
    inherit_env: bool,
    output_file: Option<Arc<OwnedFd>>,
    /// The hook running now.
    pub(super) current: Option<RunningHook>,
}

/// A hook process, for `rea status` and for stopping it.
pub(super) struct RunningHook {
    pub(super) hook: Hook,
    pub(super) pid: u32,
    pub(super) since: DateTime<Utc>,
    handle: RunHandle,
}

impl Loop {
    /// Mail of a finished run. Hooks come here only when the daemon is
    /// stopping and will not run them.
    pub(super) fn after_run(&mut self, a: AfterRun) {
        let run = a.record.run.clone().unwrap_or_default();
        if a.mail {
            self.send_mail(&a.job, &a.record);
        }
        if !a.hooks.is_empty() {
            let names: Vec<&str> = a.hooks.iter().map(|(h, _)| h.name()).collect();
            warn!(
                job = a.job.name.as_str(),
                run = run.as_str(),
                hooks = names.join(", ").as_str(),
                "the daemon is stopping: hooks not run"
            );
        }
    }

    /// Starts the hooks of `Action::StartHooks`; the engine is told
    /// (`hooks_done`) when the last has ended or none could start.
    pub(super) fn start_hooks(&mut self, id: u64, a: AfterRun, actions: &mut VecDeque<Action>) {
        let job = a.job;
        let rec = a.record;
        let run = rec.run.clone().unwrap_or_default();
        // An account refused its runs is refused its hooks too.
        let user = match self
            .account_check(&job)
            .and_then(|()| job.user.as_deref().map(host::user).transpose())
        {
            Ok(u) => u,
            Err(e) => {
                error!(
                    job = job.name.as_str(),
                    run = run.as_str(),
                    "cannot run hooks: {e}"
                );
                actions.extend(self.engine.hooks_done(id, rea_store::clock::now()));
                return;
            }
        };
        let output_file = match output_file(rec.output.as_deref().unwrap_or("")) {
            Ok(file) => Some(Arc::new(file)),
            Err(e) => {
                warn!(
                    job = job.name.as_str(),
                    run = run.as_str(),
                    "cannot hold the output for hooks: {e}"
                );
                None
            }
        };
        let mut env = run_env(
            user.as_ref(),
            &job.shell,
            &job.extras().mailto,
            &job.env,
            &job.name,
            &run,
        );
        // The run's parameters, as the run itself had them.
        if let Some(params) = &rec.params {
            env.extend(params.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
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
        let shown = if output_file.is_some() {
            OUTPUT_FILE
        } else {
            "/dev/null"
        };
        env.push(("REA_OUTPUT_FILE".into(), shown.to_string()));
        let inherit_env = inherits_daemon_env(user.as_ref());
        self.hook_batches.insert(
            id,
            HookBatch {
                job,
                run,
                remaining: a.hooks.into(),
                env,
                user,
                inherit_env,
                output_file,
                current: None,
            },
        );
        self.next_hook(id, actions);
    }

    /// Starts a job's `on_alert` hook for `event`, as its other hooks run
    /// (its user, shell, dir, env, `hook_timeout`, a cgroup of its own) but
    /// outside the `max_concurrent` slots: batch `id` is the daemon's
    /// (`alerts::HOOK_IDS`), not the engine's.
    pub(super) fn start_alert_hook(
        &mut self,
        id: u64,
        job: Arc<Job>,
        event: &rea_core::alert::AlertEvent,
        command: String,
        actions: &mut VecDeque<Action>,
    ) {
        let user = match self
            .account_check(&job)
            .and_then(|()| job.user.as_deref().map(host::user).transpose())
        {
            Ok(u) => u,
            Err(e) => {
                error!(job = job.name.as_str(), "cannot run on_alert: {e}");
                return;
            }
        };
        // Named like a run for its cgroup and `rea status`: the alert's kind
        // and a per-daemon number.
        let run = format!(
            "alert-{}-{}",
            event.kind.as_str(),
            id - super::alerts::HOOK_IDS
        );
        let mut env = run_env(
            user.as_ref(),
            &job.shell,
            &job.extras().mailto,
            &job.env,
            &job.name,
            event.run.as_deref().unwrap_or(""),
        );
        env.extend(super::alerts::alert_env(event));
        env.push(("REA_OUTPUT_FILE".into(), "/dev/null".into()));
        let inherit_env = inherits_daemon_env(user.as_ref());
        self.hook_batches.insert(
            id,
            HookBatch {
                job,
                run,
                remaining: VecDeque::from([(Hook::Alert, command)]),
                env,
                user,
                inherit_env,
                output_file: None,
                current: None,
            },
        );
        self.next_hook(id, actions);
    }

    /// A hook process ended: log how, then start the batch's next one.
    pub(super) fn hook_finished(&mut self, id: u64, o: &Outcome, actions: &mut VecDeque<Action>) {
        let Some(batch) = self.hook_batches.get_mut(&id) else {
            return;
        };
        let Some(current) = batch.current.take() else {
            return;
        };
        let (job, run, hook) = (
            batch.job.name.as_str(),
            batch.run.as_str(),
            current.hook.name(),
        );
        let first = o.output.text.lines().next().unwrap_or("");
        match (o.timed_out, o.termination) {
            (false, Termination::Exited(0)) => info!(job, run, hook, "hook succeeded"),
            (true, _) => warn!(
                job,
                run,
                hook,
                "hook timed out after {}",
                rea_core::duration::format(batch.job.extras().hook_timeout)
            ),
            (_, t) => warn!(job, run, hook, output = first, "hook failed ({t:?})"),
        }
        self.next_hook(id, actions);
    }

    /// Starts the batch's next hook that can start; when none is left, the
    /// batch is over and its slot goes back to the engine.
    fn next_hook(&mut self, id: u64, actions: &mut VecDeque<Action>) {
        let terminating = self.stopping == Stopping::Terminating;
        let Some(batch) = self.hook_batches.get_mut(&id) else {
            return;
        };
        if terminating {
            batch.remaining.clear();
        }
        while let Some((hook, command)) = batch.remaining.pop_front() {
            let mut env = batch.env.clone();
            env.push(("REA_HOOK".into(), hook.name().to_string()));
            let job = &batch.job;
            let spec = RunSpec {
                program: Program::Shell {
                    shell: job.shell.to_string(),
                    script: command,
                },
                env,
                inherit_env: batch.inherit_env,
                dir: job.dir.clone(),
                home: home_dir(batch.user.as_ref()),
                timeout: Some(job.extras().hook_timeout),
                kill_grace: job.kill_grace,
                output_limit: 16 * 1024,
                stdin: None,
                pass_fd: batch.output_file.as_ref().map(own_view),
                user: batch.user.clone(),
                kill_stragglers: true,
                journald: None,
                // A cgroup of its own beside its run's, with the job's limits.
                cgroup: self.containment.place(
                    &Tenant::of(&job.name).key(),
                    &format!("{}.{}", batch.run, hook.name()),
                ),
                // Her tenant's caps too (`min_nice`), as for her runs.
                limits: self
                    .config
                    .daemon
                    .tenants
                    .govern(&job.name, job.extras().limits),
            };
            match executor::spawn(spec) {
                Err(e) => warn!(
                    job = job.name.as_str(),
                    run = batch.run.as_str(),
                    hook = hook.name(),
                    "hook could not start: {e}"
                ),
                Ok((started, handle, running)) => {
                    batch.current = Some(RunningHook {
                        hook,
                        pid: started.pid,
                        since: started.at,
                        handle,
                    });
                    self.runs.hook_spawned(id, running);
                    return;
                }
            }
        }
        self.hook_batches.remove(&id);
        actions.extend(self.engine.hooks_done(id, rea_store::clock::now()));
    }

    /// At shutdown, after the grace: running hooks are terminated (TERM,
    /// their job's `kill_grace`, KILL to their group) and the rest of each
    /// batch is dropped.
    pub(super) fn terminate_hooks(&mut self) {
        for batch in self.hook_batches.values_mut() {
            if !batch.remaining.is_empty() {
                warn!(
                    job = batch.job.name.as_str(),
                    run = batch.run.as_str(),
                    "the daemon is stopping: {} hook(s) not run",
                    batch.remaining.len()
                );
                batch.remaining.clear();
            }
            if let Some(current) = &batch.current {
                current.handle.terminate();
            }
        }
    }

    /// The run's output through sendmail, as cron mails MAILTO: sendmail
    /// runs as the job's user (so the mail is from them, not from root),
    /// with nothing of the daemon's environment when that is another user.
    pub(super) fn send_mail(&mut self, job: &Job, rec: &Record) {
        let run = rec.run.clone().unwrap_or_default();
        let mailto = job.extras().mailto.join(", ");
        if let Err(e) = self.account_check(job) {
            warn!(
                job = job.name.as_str(),
                run = run.as_str(),
                "mail to {mailto} not sent: {e}"
            );
            return;
        }
        let Some(sendmail) = crate::host_checks::sendmail_for(&self.config) else {
            warn!(
                job = job.name.as_str(),
                run = run.as_str(),
                "no sendmail ({}): mail to {mailto} not sent",
                rea_host::sendmail_places(),
            );
            return;
        };
        let user = match job.user.as_deref().map(host::user).transpose() {
            Ok(user) => user,
            Err(e) => {
                warn!(
                    job = job.name.as_str(),
                    run = run.as_str(),
                    "mail to {mailto} not sent: {e}"
                );
                return;
            }
        };
        let from = user
            .as_ref()
            .or_else(|| host::own_user())
            .map_or_else(|| "root".to_string(), |u| u.name.clone());
        let mut argv = vec![
            sendmail.display().to_string(),
            "-i".to_string(),
            "--".to_string(),
        ];
        argv.extend(job.extras().mailto.iter().cloned());
        let inherit_env = inherits_daemon_env(user.as_ref());
        let env = if inherit_env {
            Vec::new()
        } else {
            run_env(
                user.as_ref(),
                "/bin/sh",
                &[],
                &Default::default(),
                &job.name,
                &run,
            )
        };
        let spec = RunSpec {
            program: Program::Argv(argv),
            env,
            inherit_env,
            dir: None,
            home: home_dir(user.as_ref()),
            timeout: Some(super::mail::TIMEOUT),
            kill_grace: super::mail::KILL_GRACE,
            output_limit: 4096,
            stdin: Some(mail_message(job, rec, &from, rea_store::clock::now()).into_bytes()),
            pass_fd: None,
            user,
            kill_stragglers: true,
            journald: None,
            cgroup: self
                .containment
                .place(&Tenant::of(&job.name).key(), &format!("{}.mail", run)),
            limits: rea_core::run::Limits::NONE,
        };
        let tenant = Tenant::of(&job.name).key();
        let delivery = super::mail::Delivery {
            job: job.name.clone(),
            run,
            spec,
        };
        match self.mail.offer(&tenant, delivery) {
            super::mail::Offered::Start(d) => self.deliver(tenant, d),
            super::mail::Offered::Queued => {}
            super::mail::Offered::Dropped(d) => {
                let dropped = self.mail.dropped(&tenant);
                warn!(
                    job = d.job.as_str(),
                    run = d.run.as_str(),
                    tenant = tenant.as_str(),
                    dropped,
                    "mail to {mailto} not sent: this tenant's mail queue is full ({} messages or {} bytes waiting behind {} sendmails)",
                    super::mail::QUEUE,
                    super::mail::QUEUE_BYTES,
                    super::mail::CONCURRENT,
                );
                if let Some(m) = &self.metrics {
                    m.mail_dropped(&tenant);
                }
            }
        }
    }

    /// Starts sendmail for `d`, in a slot of `tenant`'s; its end (or its
    /// failure to start) hands the slot to the tenant's next delivery.
    fn deliver(&mut self, tenant: String, d: super::mail::Delivery) {
        let mut next = Some(d);
        while let Some(d) = next.take() {
            match executor::spawn(d.spec) {
                Ok((_, _, running)) => {
                    self.runs.mail_spawned(tenant, d.job, d.run, running);
                    return;
                }
                Err(e) => {
                    warn!(
                        job = d.job.as_str(),
                        run = d.run.as_str(),
                        "cannot start sendmail: {e}"
                    );
                    next = self.mail.ended(&tenant);
                }
            }
        }
    }

    /// A sendmail of `tenant` ended: the next of its deliveries starts.
    pub(super) fn mail_ended(&mut self, tenant: String) {
        if let Some(next) = self.mail.ended(&tenant) {
            self.deliver(tenant, next);
        }
    }
}

/// A plain-text mail about a run, headers included (for `sendmail -i`):
/// from the job's user (`from`), dated `now`, marked as sent by a machine
/// (`Auto-Submitted`, RFC 3834, so that vacation responders stay quiet), as
/// cron's mails are.
fn mail_message(job: &Job, rec: &Record, from: &str, now: DateTime<Utc>) -> String {
    if let Some(alert) = rec.alert {
        return alert_message(job, rec, alert, from, now);
    }
    let host = rea_host::hostname();
    let status = rec.status.map(RunStatus::as_str).unwrap_or("");
    let how = match (rec.exit_code, rec.signal) {
        (Some(c), _) => format!(" (exit {c})"),
        (None, Some(s)) => format!(" (signal {s})"),
        _ => String::new(),
    };
    let output = rec.output.as_deref().unwrap_or("");
    let mut m = mail_headers(job, &host, from, &format!("{status}{how}"), now);
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
        rec.trigger.map(Trigger::as_str).unwrap_or_default()
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

/// The headers every mail of a job carries (the `X-Rea-*` line of what it
/// is about follows): `Subject: rea: JOB WHAT on HOST`.
fn mail_headers(job: &Job, host: &str, from: &str, what: &str, now: DateTime<Utc>) -> String {
    let mut m = String::new();
    m.push_str(&format!("From: \"rea on {host}\" <{from}>\n"));
    m.push_str(&format!("To: {}\n", job.extras().mailto.join(", ")));
    m.push_str(&format!("Subject: rea: {} {what} on {host}\n", job.name));
    m.push_str(&format!("Date: {}\n", now.to_rfc2822()));
    m.push_str("MIME-Version: 1.0\n");
    m.push_str("Content-Type: text/plain; charset=utf-8\n");
    m.push_str("Content-Transfer-Encoding: 8bit\n");
    m.push_str("Auto-Submitted: auto-generated\n");
    m.push_str("Precedence: bulk\n");
    m.push_str(&format!("X-Rea-Job: {}\n", job.name));
    m
}

/// A mail about an alert raised or resolved, with the same headers as a
/// run's.
fn alert_message(
    job: &Job,
    rec: &Record,
    alert: rea_core::alert::AlertField,
    from: &str,
    now: DateTime<Utc>,
) -> String {
    let host = rea_host::hostname();
    let (kind, state) = (alert.kind.as_str(), alert.state.as_str());
    let reason = rec.reason.as_deref().unwrap_or("");
    let mut m = mail_headers(job, &host, from, &format!("alert {kind} {state}"), now);
    m.push_str(&format!("X-Rea-Alert: {kind} {state}\n\n"));
    m.push_str(&format!("job:       {}\n", job.name));
    m.push_str(&format!("alert:     {kind} ({state})\n"));
    m.push_str(&format!("reason:    {reason}\n"));
    if rec.scheduled.is_some() {
        m.push_str(&format!("due:       {}\n", fmt_time(rec.scheduled)));
    }
    if let Some(run) = &rec.run {
        m.push_str(&format!("run:       {run}\n"));
    }
    m.push_str(&format!("at:        {}\n", fmt_time(Some(rec.ts))));
    m.push_str(&format!("host:      {host}\n"));
    m
}

/// Where a hook finds the run's output: [`executor::PASSED_FD`], opened
/// again by name (so each open reads from the start).
const OUTPUT_FILE: &str = "/proc/self/fd/3";

/// The run's output for its hooks, in a sealed memfd handed to each hook as
/// descriptor 3 (`REA_OUTPUT_FILE=/proc/self/fd/3`).
///
/// Chosen over a file in a directory because it is the safest way to give
/// the output to a hook running as another user: no path that user (or any
/// other) could race, replace or pre-create with a symlink, nothing written
/// to disk that a crash could leave behind (output may hold secrets), no
/// directory whose permissions would have to let the user in, and nothing
/// to clean up. The seals make it read-only for everyone; reopening
/// `/proc/self/fd/3` is allowed to the hook's own user (it is the hook's own
/// descriptor). The one limit: the name means "descriptor 3 of the process
/// that opens it", so a program the hook starts sees the file only if it
/// inherits descriptor 3 (sudo, su and Python's subprocess close inherited
/// descriptors): pass such programs the content, or a copy.
fn output_file(text: &str) -> std::io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "rea-output",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes())?;
    let fd = OwnedFd::from(file);
    // Kernels without seals (before 3.17) still give a working file.
    let _ = rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    );
    Ok(fd)
}

/// A read-only description of the output file of its own, so one hook's
/// reading position (a hook reading descriptor 3 directly) is not the
/// next one's; the shared one if /proc cannot give it.
fn own_view(file: &Arc<OwnedFd>) -> Arc<OwnedFd> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::open(
        path.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => Arc::new(fd),
        Err(_) => Arc::clone(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A hook of a `user =` job, running as that user, reads the output.
    #[tokio::test]
    async fn the_output_file_is_readable_by_a_hook_of_another_user() {
        if !host::is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let nobody = host::user("nobody").expect("nobody exists");
        let file = Arc::new(output_file("line one\nline two\n").expect("memfd"));
        let mut outputs = Vec::new();
        // Two hooks in a row, one reading descriptor 3 directly: each starts
        // at the beginning.
        for script in [
            "cat <&3; cat \"$REA_OUTPUT_FILE\"",
            "cat \"$REA_OUTPUT_FILE\"; echo x >> \"$REA_OUTPUT_FILE\" || echo read-only",
        ] {
            let spec = RunSpec {
                program: Program::Shell {
                    shell: "/bin/sh".into(),
                    script: script.into(),
                },
                env: vec![("REA_OUTPUT_FILE".into(), OUTPUT_FILE.into())],
                inherit_env: false,
                dir: Some("/".into()),
                home: None,
                timeout: Some(Duration::from_secs(20)),
                kill_grace: Duration::from_millis(200),
                output_limit: 4096,
                stdin: None,
                pass_fd: Some(own_view(&file)),
                user: Some(nobody.clone()),
                kill_stragglers: true,
                journald: None,
                cgroup: None,
                limits: rea_core::run::Limits::NONE,
            };
            let (_, _, running) = executor::spawn(spec).expect("spawn");
            outputs.push(running.await.output.text);
        }
        assert_eq!(outputs[0], "line one\nline two\nline one\nline two\n");
        assert!(
            outputs[1].starts_with("line one\nline two\n"),
            "{}",
            outputs[1]
        );
        assert!(outputs[1].ends_with("read-only\n"), "{}", outputs[1]);
    }
}
