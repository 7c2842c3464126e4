//! Control requests: what `rea reload`, `trigger`, `pause`, `resume`,
//! `status`, `submit`, `cancel`, `pending` and `logs --follow` ask of the
//! running daemon.
//! Submissions are validated one by one and made durable together (one
//! journal write and sync for a burst: group commit).

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use rea_config::Config;
use rea_core::engine::{Action, CancelResult, SubmitError, TriggerResult};
use rea_core::job::name_problem;
use rea_core::oneshot::{OneShot, OneShotRare};
use rea_core::record::{Event, Record};
use serde_json::json;
use tokio::sync::oneshot;
use tracing::{error, info, warn};

use super::startup::load;
use super::status::oneshot_info;
use super::users::Scope;
use super::{free_in_background, metrics, Loop};
use crate::control::protocol::{
    CancelReply, Cancelled, FieldNames, PauseReply, PendingReply, PingReply, ReloadReply,
    SubmitReply, TriggerReply, Ts,
};
use crate::control::{self, Incoming, Reply, Request, Response, Selector};

/// How long a job file that would remove more than half of the jobs must
/// stay unchanged before the watcher applies it.
pub(super) const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Who asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReloadCause {
    /// The file watcher saw a change.
    Watcher,
    /// A shrinking change held by the watcher has stayed the same.
    Settled,
    /// SIGHUP: re-read even an unchanged file.
    Signal,
    /// `rea reload`.
    Request,
}

impl Loop {
    /// Re-reads the job file. An invalid file changes nothing but the banner.
    /// Unless forced (SIGHUP), a file whose bytes are those of the
    /// configuration in force is not parsed again: an edit seen by the
    /// watcher and then by `rea reload` (or the other way round) costs one
    /// parse, which matters for a 100,000-job file.
    ///
    /// What the watcher sees may be a file half written (`render >
    /// jobs.toml` truncates it first). So a change seen by the watcher that
    /// would remove every job is never applied (only `rea reload` or SIGHUP
    /// apply an empty file), and one that would remove more than half of
    /// them is applied only once the file has stayed the same for
    /// [`SETTLE`]; both are logged loudly.
    pub(super) fn reload(
        &mut self,
        actions: &mut VecDeque<Action>,
        cause: ReloadCause,
    ) -> Result<ReloadReply, Vec<String>> {
        let now = Utc::now();
        let force = cause == ReloadCause::Signal || cause == ReloadCause::Settled;
        if cause != ReloadCause::Settled {
            self.settling = None;
        }
        self.notify.reloading();
        // Put back if nothing is applied, so the next look sees the change.
        let before = self.files.clone();
        let loaded = load(&mut self.files, force).and_then(|l| match l {
            Some(l) => self.check_names(&l.config).map(|()| Some(l)),
            None => Ok(None),
        });
        let result = match loaded {
            Ok(None) => {
                self.settling = None;
                // Nothing new, but a file still refused is still an error
                // for whoever asked (logged and recorded when it was new).
                let still: Vec<String> = self
                    .files
                    .refused()
                    .iter()
                    .flat_map(|(_, diags)| diags.iter().map(ToString::to_string))
                    .collect();
                if still.is_empty() {
                    Ok(ReloadReply {
                        jobs: self.config.jobs.len(),
                        unchanged: true,
                    })
                } else {
                    Err(still)
                }
            }
            Ok(Some(loaded)) => {
                let refusals: Vec<String> = loaded
                    .refused
                    .iter()
                    .flat_map(|(_, diags)| diags.iter().map(ToString::to_string))
                    .collect();
                match self.shrink_guard(&loaded.config, cause, now) {
                    Some(held) => {
                        self.files = before;
                        held
                    }
                    None => {
                        super::startup::warn_unenforceable(&loaded.config, &self.containment);
                        let reply = self.apply(loaded.config, actions, now);
                        if refusals.is_empty() {
                            Ok(reply)
                        } else {
                            Err(self.reject(refusals, now))
                        }
                    }
                }
            }
            Err(diags) => {
                self.files = before;
                let errors: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
                Err(self.reject(errors, now))
            }
        };
        self.notify_ready();
        result
    }

    /// Puts a valid configuration in force.
    fn apply(
        &mut self,
        cfg: Config,
        actions: &mut VecDeque<Action>,
        now: DateTime<Utc>,
    ) -> ReloadReply {
        if self.config_error.take().is_some() {
            info!("the job file is valid again");
        }
        self.settling = None;
        let (before, after) = (self.config.jobs.len(), cfg.jobs.len());
        if after * 2 < before {
            warn!(
                before,
                after,
                "the job file now has {after} job(s) instead of {before}; the others are removed"
            );
        }
        actions.extend(self.engine.reload(&cfg.plan(), now));
        metrics::reloaded(self.metrics.as_mut(), &self.config, &cfg);
        let cluster_changed = self.cluster.is_some() && cfg.cluster != self.config.cluster;
        self.history
            .set_rotation(cfg.daemon.history_max_bytes, cfg.daemon.history_files);
        if cfg.daemon.job_output != self.config.daemon.job_output {
            self.journald = crate::journal_for(cfg.daemon.job_output);
        }
        let old = std::mem::replace(&mut self.config, cfg);
        self.last_reload = now;
        if cluster_changed {
            warn!("[cluster] changed: the new settings take effect when the daemon restarts");
        }
        self.cluster_publish();
        free_in_background(old);
        info!(jobs = self.config.jobs.len(), "job file reloaded");
        ReloadReply {
            jobs: self.config.jobs.len(),
            unchanged: false,
        }
    }

    /// What the watcher saw would remove every job, or more than half of
    /// them: hold it (see `reload`). None: apply it.
    fn shrink_guard(
        &mut self,
        cfg: &Config,
        cause: ReloadCause,
        now: DateTime<Utc>,
    ) -> Option<Result<ReloadReply, Vec<String>>> {
        let (before, after) = (self.config.jobs.len(), cfg.jobs.len());
        let from_watcher = matches!(cause, ReloadCause::Watcher | ReloadCause::Settled);
        if !from_watcher || before == 0 || after * 2 >= before {
            return None;
        }
        if after == 0 {
            let message = format!(
                "{}: the job file is now empty of jobs (it had {before}); a file seen half written is not applied: run `rea reload` (or send SIGHUP) to apply it",
                self.opts.file.display()
            );
            return Some(Err(self.reject(vec![message], now)));
        }
        match (cause, self.settling) {
            (ReloadCause::Settled, Some((digest, _))) if digest == cfg.digest => None,
            _ => {
                warn!(
                    before,
                    after,
                    "the job file would remove {} of {before} jobs; applying it once it has not changed for {}",
                    before - after,
                    rea_core::duration::format(SETTLE)
                );
                self.settling = Some((cfg.digest, tokio::time::Instant::now() + SETTLE));
                Some(Ok(ReloadReply {
                    jobs: before,
                    unchanged: true,
                }))
            }
        }
    }

    /// Job names must not be those of pending one-shots.
    fn check_names(&self, cfg: &Config) -> Result<(), Vec<rea_config::Diagnostic>> {
        name_clashes(cfg, |name| self.engine.oneshot(name).is_some())
    }

    /// The file on disk is not put in force: say why, everywhere.
    pub(super) fn reject(&mut self, errors: Vec<String>, now: DateTime<Utc>) -> Vec<String> {
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
        errors
    }

    /// Answers one control request.
    pub(super) fn control(
        &mut self,
        request: Request,
        actions: &mut VecDeque<Action>,
        scope: &Scope,
    ) -> Reply {
        let now = Utc::now();
        match request {
            Request::Ping => Reply::Done(Response::with(&PingReply {
                pid: std::process::id(),
                file: Some(self.opts.file.display().to_string()),
            })),
            Request::Submit(_) => Reply::Done(Response::err(
                "bad_request",
                "submit is handled in batches",
            )),
            Request::Cancel { ids, kill } => {
                let (result, acts) = self.engine.cancel_oneshots(&ids, kill, now);
                actions.extend(acts);
                match result {
                    Ok(results) => {
                        let cancelled = ids
                            .iter()
                            .zip(results)
                            .map(|(id, r)| Cancelled {
                                id: id.clone(),
                                result: match r {
                                    CancelResult::Cancelled => "cancelled",
                                    CancelResult::Killing => "killing",
                                }
                                .to_string(),
                            })
                            .collect();
                        Reply::Done(Response::with(&CancelReply { cancelled }))
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
                let oneshots = self
                    .engine
                    .oneshots_first(tag.as_deref(), limit.unwrap_or(usize::MAX))
                    .iter()
                    .map(oneshot_info)
                    .collect();
                Reply::Done(Response::with(&PendingReply {
                    pending: self.engine.oneshot_count(),
                    oneshots,
                }))
            }
            Request::Status { job } => {
                if let Some(name) = &job {
                    let visible = self.config.jobs.iter().any(|j| &j.name == name && scope.sees(j));
                    if !visible || self.engine.job_status(name).is_none() {
                        if *scope == Scope::Admin {
                            if let Some(shot) = self.engine.oneshot(name) {
                                let mut reply = self.status_reply(Some(name), now, scope);
                                reply.oneshot = Some(oneshot_info(&shot));
                                return Reply::Done(Response::with(&reply));
                            }
                        }
                        return Reply::Done(self.unknown_job_in(name, scope));
                    }
                }
                Reply::Done(Response::with(&self.status_reply(job.as_deref(), now, scope)))
            }
            Request::History { .. } | Request::FindRun { .. } | Request::LatestFinalRun { .. } => {
                Reply::Done(Response::err("bad_request", "history requests are answered apart"))
            }
            Request::EditGet { user } => Reply::Done(self.edit_get(user)),
            Request::EditPut { user, content } => {
                Reply::Done(self.edit_put(user, content, actions))
            }
            Request::Reload => match self.reload(actions, ReloadCause::Request) {
                Ok(reply) => Reply::Done(Response::with(&reply)),
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
            Request::Pause(sel) => self.pause_resume(sel, true, scope),
            Request::Resume(sel) => self.pause_resume(sel, false, scope),
            Request::Trigger { job, .. }
                if !self.config.jobs.iter().any(|j| j.name == job && scope.sees(j)) =>
            {
                Reply::Done(self.unknown_job_in(&job, scope))
            }
            Request::Follow { job } => self.follow(job, scope),
            Request::Trigger {
                job,
                force,
                wait,
                follow,
            } => {
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
                        let state = if self.engine.running_run(&run) {
                            "started"
                        } else {
                            "queued"
                        };
                        let first = Response::with(&TriggerReply {
                            run: run.clone(),
                            job,
                            state: state.to_string(),
                        });
                        if follow {
                            self.follow_trigger(first, run)
                        } else if wait {
                            let (tx, rx) = oneshot::channel();
                            self.waiters.entry(run).or_default().push(tx);
                            Reply::Wait(first, rx)
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
    pub(super) fn incoming(
        &mut self,
        incoming: Incoming,
        batch: &mut Vec<(OneShot, oneshot::Sender<Reply>)>,
        actions: &mut VecDeque<Action>,
    ) {
        let mut request = incoming.request;
        let scope = match self.authorize(incoming.peer, &mut request) {
            Ok(scope) => scope,
            Err(refusal) => {
                let _ = incoming.reply.send(Reply::Done(refusal));
                return;
            }
        };
        let Some(incoming) = self.cluster_incoming(
            Incoming {
                request,
                reply: incoming.reply,
                peer: incoming.peer,
            },
            &scope,
        ) else {
            return;
        };
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
            request @ (Request::History { .. }
            | Request::FindRun { .. }
            | Request::LatestFinalRun { .. }) => {
                self.commit_submissions(batch, actions);
                self.history_request(request, &scope, incoming.reply);
            }
            request => {
                self.commit_submissions(batch, actions);
                let reply = self.control(request, actions, &scope);
                let _ = incoming.reply.send(reply);
            }
        }
    }

    /// Validates a submission and turns it into a one-shot.
    pub(super) fn prepare_submission(
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
        let due = sub.due(now, &FieldNames::WIRE).map_err(bad)?;
        let id = match sub.name {
            Some(n) => {
                if let Some(why) = name_problem(&n) {
                    return Err(bad(format!("invalid name {n:?}: {why}")));
                }
                n
            }
            None => format!("oneshot-{}", self.engine.new_id(now)),
        };
        if batch.iter().any(|(s, _)| *s.id == *id) {
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
        // Submitters usually repeat the last command and directory: those
        // one-shots share one copy.
        let argv: std::sync::Arc<[String]> = match &self.last_shape {
            Some((argv, _)) if **argv == *sub.argv => argv.clone(),
            _ => sub.argv.into(),
        };
        let dir: std::sync::Arc<std::path::Path> = match &self.last_shape {
            Some((_, dir)) if **dir == *sub.dir => dir.clone(),
            _ => sub.dir.into(),
        };
        self.last_shape = Some((argv.clone(), dir.clone()));
        Ok(OneShot {
            id: id.into_boxed_str(),
            argv,
            shell: sub.shell,
            dir,
            due,
            submitted: now,
            rare: OneShotRare::boxed(sub.env, sub.expire_ms, sub.timeout_ms, sub.retry, sub.tags),
        })
    }

    /// Makes the queued submissions durable with one write and one sync,
    /// then hands them to the engine and acknowledges them.
    pub(super) fn commit_submissions(
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
            let id = shot.id.to_string();
            let due = shot.due;
            match self.engine.submit(shot, now) {
                Ok(acts) => {
                    actions.extend(acts);
                    let _ = reply.send(Reply::Done(Response::with(&SubmitReply {
                        id,
                        due: Ts(due),
                    })));
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

    pub(super) fn pause_resume(&mut self, sel: Selector, pause: bool, scope: &Scope) -> Reply {
        let names = match self.selected(&sel, scope) {
            Ok(names) => names,
            Err(refusal) => return Reply::Done(refusal),
        };
        let changed = if pause {
            self.engine.pause(&names)
        } else {
            self.engine.resume(&names)
        };
        if let Err(e) = self.paused.save(self.engine.paused()) {
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
        Reply::Done(Response::with(&PauseReply {
            changed,
            paused: self.engine.paused().iter().cloned().collect(),
        }))
    }
}

/// Job names must not be those of pending one-shots (`rea status NAME`,
/// `rea cancel NAME` would not know which is meant): one diagnostic per
/// clash, at the job.
pub(super) fn name_clashes(
    cfg: &Config,
    pending: impl Fn(&str) -> bool,
) -> Result<(), Vec<rea_config::Diagnostic>> {
    let clashes: Vec<rea_config::Diagnostic> = cfg
        .jobs
        .iter()
        .filter(|j| pending(&j.name))
        .map(|j| {
            cfg.diagnostic_at(
                &j.name,
                "",
                format!("job {:?} has the name of a pending one-shot", j.name),
                Some(format!(
                    "rename the job, or cancel the one-shot first: rea cancel {}",
                    j.name
                )),
            )
        })
        .collect();
    if clashes.is_empty() {
        Ok(())
    } else {
        Err(clashes)
    }
}
