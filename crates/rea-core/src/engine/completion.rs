//! A run's end: its final record, the job's failure streak, a retry (one
//! helper for jobs and one-shots), the hooks and mail it calls for, and the
//! runs waiting behind it.

use super::*;
use crate::backoff::RetryPolicy;

/// What [`plan_retry`] decided for a failed run.
enum Retry {
    /// The next attempt is this heap entry.
    Scheduled(EntryId),
    /// The policy's attempts are used up.
    Exhausted,
    /// The policy has no retries.
    NotAllowed,
    /// Cluster mode: the store queues it for any node (its delay is in the
    /// record's `retry_at`).
    Elsewhere,
}

/// See [`RunStatus::is_failure`].
fn is_failure(status: RunStatus) -> bool {
    status.is_failure()
}

/// The one retry rule, for jobs and one-shots alike: after `attempt`
/// failed, `policy` says whether and when the next attempt runs; if it
/// does, `next` goes into the heap for that instant. The failed run's
/// record says which (`retry_at`, or `retries_exhausted`).
#[allow(clippy::too_many_arguments)]
fn plan_retry(
    heap: &mut DueQueue<Due>,
    rng: &mut fastrand::Rng,
    policy: &RetryPolicy,
    attempt: u32,
    next: Due,
    now: DateTime<Utc>,
    rec: &mut Record,
) -> Retry {
    match policy.delay_for(attempt, rng.f64()) {
        Some(delay) => {
            let at = later(now, delay);
            rec.set_retry_at(at);
            // A run the shared store granted is retried by the store, on
            // whichever node is free (the record carries the delay).
            if rec.cluster_run.is_some() {
                return Retry::Elsewhere;
            }
            Retry::Scheduled(heap.insert(at, next))
        }
        None if policy.attempts > 0 => {
            rec.detail = Some(json!({ "retries_exhausted": true }));
            Retry::Exhausted
        }
        None => Retry::NotAllowed,
    }
}

/// The hooks and mail a finished run calls for.
fn after_run(def: &Arc<Job>, rec: &Record, status: RunStatus, exhausted: bool) -> Option<AfterRun> {
    let mut hooks = Vec::new();
    if status == RunStatus::Succeeded {
        if let Some(h) = &def.extras().on_success {
            hooks.push((Hook::Success, h.clone()));
        }
    }
    if is_failure(status) {
        if let Some(h) = &def.extras().on_failure {
            hooks.push((Hook::Failure, h.clone()));
        }
        if exhausted {
            if let Some(h) = &def.extras().on_retry_exhausted {
                hooks.push((Hook::RetryExhausted, h.clone()));
            }
        }
    }
    let mail = !def.extras().mailto.is_empty()
        && match def.extras().mail_on {
            crate::job::MailOn::Failure => {
                matches!(
                    status,
                    RunStatus::Failed
                        | RunStatus::TimedOut
                        | RunStatus::Killed
                        | RunStatus::OomKilled
                )
            }
            crate::job::MailOn::Output => rec.output.as_deref().is_some_and(|o| !o.is_empty()),
            crate::job::MailOn::Always => status != RunStatus::Skipped,
        };
    (!hooks.is_empty() || mail).then(|| AfterRun {
        job: def.clone(),
        record: rec.clone(),
        hooks,
        mail,
    })
}

impl Engine {
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
                    rec.waited_for = active.pending.waited_for();
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
        // An operator's (or the daemon's) kill says why the run ended even
        // if the OOM killer struck first; an OOM kill says it before a
        // timeout (the run was likely stuck after losing a process); a run
        // that exits 0 after losing a child to it succeeded (the record
        // still says `oom_killed`).
        let status = if outcome.terminated {
            RunStatus::Killed
        } else if outcome.usage.oom_killed && outcome.termination != Termination::Exited(0) {
            RunStatus::OomKilled
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
        rec.waited_for = active.pending.waited_for();
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
        let u = &outcome.usage;
        rec.cpu_from_cgroup = u.from_cgroup.then_some(true);
        rec.memory_peak_kb = u.memory_peak_kb;
        rec.io_read_bytes = u.io_read_bytes;
        rec.io_write_bytes = u.io_write_bytes;
        rec.tasks_peak = u.tasks_peak;
        rec.oom_killed = u.oom_killed.then_some(true);
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

    /// Bookkeeping common to every end of a run.
    pub(super) fn finish(
        &mut self,
        active: Active,
        mut rec: Record,
        status: RunStatus,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        self.shares.release(&active.pending.owner);
        let name = active.pending.source.name().to_string();
        if active.pending.source.oneshot().is_some() {
            self.finish_oneshot(&active, rec, status, now, out);
            self.fill_slots(now, out);
            return;
        }
        let Some(state) = self.jobs.get_mut(name.as_str()) else {
            out.push(Action::Record(Box::new(rec)));
            return;
        };
        state.active = state.active.saturating_sub(1);
        match status {
            RunStatus::Succeeded => state.consecutive_failures = 0,
            s if is_failure(s) => state.consecutive_failures += 1,
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
        let mut exhausted = false;
        // A failure is final unless a retry follows, here or elsewhere.
        let mut retried = false;
        if is_failure(status) && !state.removed && !self.stopping {
            let retry = Due::Retry {
                job: state.name.clone(),
                scheduled: active.pending.scheduled,
                attempt: active.pending.attempt + 1,
                params: active.pending.params.clone(),
            };
            match plan_retry(
                &mut self.heap,
                &mut self.rng,
                &state.def.retry,
                active.pending.attempt,
                retry,
                now,
                &mut rec,
            ) {
                Retry::Scheduled(id) => {
                    retried = true;
                    if let Some(old) = state.retry.replace(id) {
                        self.heap.cancel(old);
                    }
                }
                Retry::Exhausted => exhausted = true,
                Retry::Elsewhere => retried = true,
                Retry::NotAllowed => {}
            }
        }
        let after_run = after_run(&state.def, &rec, status, exhausted);
        let mut alerts = Vec::new();
        self.alerts_run_ended(&name, &active, status, &rec, now, &mut alerts);
        out.push(Action::Record(Box::new(rec)));
        out.append(&mut alerts);
        if let Some(a) = after_run {
            // Hooks wait for a slot (filled below); mail goes now. While
            // stopping, the hooks stay in the action for the daemon to log
            // as not run.
            if !a.hooks.is_empty() && !self.stopping {
                if a.mail {
                    out.push(Action::AfterRun(Box::new(AfterRun {
                        job: a.job.clone(),
                        record: a.record.clone(),
                        hooks: Vec::new(),
                        mail: true,
                    })));
                }
                let owner = shares::owner_of_job(a.job.owner.as_deref());
                self.shares.push_hooks(owner, AfterRun { mail: false, ..a });
            } else {
                out.push(Action::AfterRun(Box::new(a)));
            }
        }
        let end = match status {
            RunStatus::Succeeded => Some(dependencies::End::Succeeded),
            s if is_failure(s) && !retried => Some(dependencies::End::FailedForGood),
            RunStatus::Killed => Some(dependencies::End::Killed),
            _ => None,
        };
        if let Some(end) = end {
            self.dependents_of(&name, end, now, out);
        }
        // `catch_up = "all"` in cluster mode: the next caught-up occurrence.
        if active.pending.trigger == Trigger::CatchUp && active.pending.grant.is_some() {
            self.next_caught_up(&name, now, out);
        }
        let Some(state) = self.jobs.get_mut(name.as_str()) else {
            return;
        };
        if state.removed && state.active == 0 {
            self.jobs.remove(name.as_str());
        } else {
            self.kick(&name, now, out);
        }
        self.fill_slots(now, out);
    }

    /// A one-shot's run ended: retry per its policy, or it is done.
    pub(super) fn finish_oneshot(
        &mut self,
        active: &Active,
        mut rec: Record,
        status: RunStatus,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let id = active.pending.source.name().to_string();
        let mut done = true;
        let def = self.shot_def(&id);
        if let (Some(shot), Some(def)) = (self.oneshots.get_mut(id.as_str()), def) {
            shot.running = false;
            // An operator's cancel --kill is final: no retry follows it.
            if is_failure(status) && !self.stopping && active.stop.is_none() {
                let policy = def.retry_policy();
                let retry = Due::OneShot {
                    shot: def,
                    attempt: active.pending.attempt + 1,
                    trigger: Trigger::Retry,
                };
                if let Retry::Scheduled(entry) = plan_retry(
                    &mut self.heap,
                    &mut self.rng,
                    &policy,
                    active.pending.attempt,
                    retry,
                    now,
                    &mut rec,
                ) {
                    shot.entry = Some(entry);
                    done = false;
                }
            }
            if self.stopping && active.stop == Some(StopReason::Shutdown) {
                // Terminated by shutdown: still pending, it runs again at the
                // next start (at-least-once); one the shared store granted
                // is put back by the store for any node at once.
                if active.pending.grant.is_some() {
                    rec.set_retry_at(now);
                } else {
                    done = false;
                }
            }
        }
        out.push(Action::Record(Box::new(rec)));
        if done {
            self.oneshots.remove(id.as_str());
            out.push(Action::OneShotDone { id });
        }
    }
}
