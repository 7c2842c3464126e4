//! Control requests: what `rea reload`, `trigger`, `pause`, `resume`,
//! `status`, `submit`, `cancel`, `pending` and `logs --follow` ask of the
//! running daemon.
//! Submissions are validated one by one and made durable together (one
//! journal write and sync for a burst: group commit).

use std::collections::VecDeque;

use chrono::Utc;
use rea_core::engine::{Action, CancelResult, Source, SubmitError, TriggerResult};
use rea_core::job::name_problem;
use rea_core::oneshot::{OneShot, OneShotRare};
use tokio::sync::oneshot;
use tracing::{error, info};

use super::audit::Pending;
use super::reload::ReloadCause;
use super::status::oneshot_info;
use super::users::Scope;
use super::Loop;
use crate::control::protocol::{
    CancelReply, Cancelled, FieldNames, KillReply, KilledRun, PauseReply, PendingReply, PingReply,
    SubmitReply, TriggerReply, Ts,
};
use crate::control::{self, Incoming, Reply, Request, Response, Selector};

impl Loop {
    /// Answers one control request.
    pub(super) fn control(
        &mut self,
        request: Request,
        actions: &mut VecDeque<Action>,
        scope: &Scope,
    ) -> Reply {
        let now = rea_store::clock::now();
        match request {
            Request::Ping => Reply::Done(Response::with(&PingReply {
                pid: std::process::id(),
                file: Some(self.shown_file()),
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
            Request::Kill { target } => Reply::Done(self.kill(&target, actions, scope, now)),
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
                    let visible = scope.owns(name) && self.engine.has_job(name);
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
            Request::History { .. }
            | Request::FindRun { .. }
            | Request::LatestFinalRun { .. }
            | Request::Days { .. }
            | Request::Audit { .. } => {
                Reply::Done(Response::err("bad_request", "history requests are answered apart"))
            }
            Request::EditGet { user } => Reply::Done(self.edit_get(user)),
            Request::Overview => Reply::Done(Response::with(&self.overview(now, scope))),
            Request::Jobs(query) => Reply::Done(match self.jobs_page(&query, scope) {
                Ok(page) => Response::with(&page),
                Err(refusal) => refusal,
            }),
            Request::Subscribe(sub) => self.subscribe(sub, scope),
            Request::EditPut { .. } => Reply::Done(Response::err(
                "bad_request",
                "an edit is answered apart",
            )),
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
                if !(scope.owns(&job) && self.engine.has_job(&job)) =>
            {
                Reply::Done(self.unknown_job_in(&job, scope))
            }
            Request::Follow { job } => self.follow(job, scope),
            Request::Trigger {
                job,
                force,
                wait,
                follow,
                params,
            } => {
                let (result, acts) = self.engine.trigger(&job, force, &params, now);
                actions.extend(acts);
                match result {
                    TriggerResult::UnknownJob { suggestions } => Reply::Done(
                        Response::err("unknown_job", format!("no job named {job:?}"))
                            .with_suggestions(suggestions),
                    ),
                    TriggerResult::Skipped { reason } => {
                        Reply::Done(Response::err("refused", format!("not started: {reason}")))
                    }
                    TriggerResult::BadParams { reason } => Reply::Done(Response::err(
                        "bad_params",
                        format!("not started: {reason}"),
                    )),
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
                            self.follow_trigger(first, run, scope)
                        } else if wait {
                            Reply::Wait(first, self.runs.await_end(&run))
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
        let authorized = self.authorize(incoming.peer, &mut request);
        // A user's answers name her jobs as she does, whichever part of
        // the daemon makes them.
        let reply = match &authorized {
            Ok(Scope::User(me)) => super::users::localizing(incoming.reply, me.clone()),
            _ => incoming.reply,
        };
        // Every state-changing request's answer goes by the audit log
        // first, as the daemon made it (names as stored), refusals too;
        // its names are a user's qualified once authorized.
        let reply = match Pending::of(&request, incoming.peer, incoming.source.as_deref()) {
            Some(mut pending) => {
                if let Ok(scope) = &authorized {
                    pending.scoped(scope);
                }
                self.audit.watch(pending, reply)
            }
            None => reply,
        };
        let scope = match authorized {
            Ok(scope) => scope,
            Err(refusal) => {
                let _ = reply.send(Reply::Done(refusal));
                return;
            }
        };
        let Some(incoming) = self.cluster_incoming(
            Incoming {
                request,
                reply,
                peer: incoming.peer,
                source: incoming.source,
            },
            &scope,
        ) else {
            return;
        };
        match incoming.request {
            Request::Submit(sub) => match self.prepare_submission(sub, batch) {
                Ok(shot) => {
                    self.backend.journal().add(&shot);
                    batch.push((shot, incoming.reply));
                }
                Err(resp) => {
                    let _ = incoming.reply.send(Reply::Done(resp));
                }
            },
            mut request @ (Request::History { .. }
            | Request::FindRun { .. }
            | Request::LatestFinalRun { .. }
            | Request::Days { .. }
            | Request::Audit { .. }) => {
                // The job's own zone, which only the loop knows.
                if let Request::Days {
                    job,
                    zone: zone @ None,
                    ..
                } = &mut request
                {
                    *zone = self
                        .engine
                        .job_def(job)
                        .map(|j| j.timezone.name().to_string());
                }
                self.commit_submissions(batch, actions);
                self.history_request(request, &scope, incoming.reply);
            }
            Request::EditPut { user, content } => {
                self.commit_submissions(batch, actions);
                self.edit_put(user, content, incoming.reply, actions);
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
        let now = rea_store::clock::now();
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
        if let Err(e) = self.backend.journal().commit() {
            error!("cannot write the one-shot journal: {e}");
            self.backend.journal().discard();
            for (shot, reply) in batch.drain(..) {
                let _ = reply.send(Reply::Done(Response::err(
                    "refused",
                    format!("cannot make one-shot {:?} durable: {e}", shot.id),
                )));
            }
            return;
        }
        let now = rea_store::clock::now();
        for (shot, reply) in batch.drain(..) {
            let id = shot.id.to_string();
            let due = shot.due;
            match self.engine.submit(shot, now) {
                Ok(acts) => {
                    actions.extend(acts);
                    self.publish_oneshot(&id, "pending");
                    let _ = reply.send(Reply::Done(Response::with(&SubmitReply {
                        id,
                        due: Ts(due),
                    })));
                }
                Err(e) => {
                    // Validated before the commit; only a race inside this very
                    // batch gets here. Undo the journal line.
                    self.backend.journal().del(&id);
                    let _ = reply.send(Reply::Done(Response::err("refused", e.message())));
                }
            }
        }
    }

    /// `rea kill JOB|RUN`: the runs in progress of the job `target` (or
    /// the one run it names) that `scope` may act on are asked to stop and
    /// end as `killed`. A job of someone else's is answered as unknown; a
    /// one-shot's run is root's (its owner is root).
    fn kill(
        &mut self,
        target: &str,
        actions: &mut VecDeque<Action>,
        scope: &Scope,
        now: chrono::DateTime<Utc>,
    ) -> Response {
        // A user names her own jobs bare; a run id is no job name.
        let qualified = scope.qualify(target);
        let job = self
            .config
            .jobs
            .iter()
            .find(|j| j.name == qualified && scope.sees(j));
        let target = if job.is_some() {
            qualified.as_str()
        } else {
            target
        };
        // Root may kill any run; a user only the runs of her own jobs
        // (never a one-shot's: its owner is root).
        let may = |source: &Source| {
            *scope == Scope::Admin || matches!(source, Source::Job(name) if scope.owns(name))
        };
        let in_progress = self.engine.runs_in_progress();
        let chosen: Vec<&rea_core::engine::RunInProgress> = if job.is_some() {
            in_progress
                .iter()
                .filter(|r| r.source == Source::Job(target.to_string()))
                .collect()
        } else {
            in_progress
                .iter()
                .filter(|r| r.run == target && may(&r.source))
                .collect()
        };
        if chosen.is_empty() {
            if job.is_some() {
                return Response::err(
                    "refused",
                    format!("job {target:?} has no run in progress; nothing was killed"),
                );
            }
            return Response::err(
                "unknown_job",
                format!("no job and no run in progress named {target:?}"),
            )
            .with_suggestions(rea_core::suggest::closest(
                target,
                self.visible_names(scope),
                3,
            ));
        }
        let runs: Vec<String> = chosen.iter().map(|r| r.run.clone()).collect();
        let names: std::collections::HashMap<&str, &str> = chosen
            .iter()
            .map(|r| (r.run.as_str(), r.source.name()))
            .collect();
        let (killing, acts) = self.engine.kill_runs(&runs, now);
        actions.extend(acts);
        let killed = killing
            .into_iter()
            .map(|run| {
                let job = names
                    .get(run.as_str())
                    .copied()
                    .unwrap_or_default()
                    .to_string();
                info!(job = job.as_str(), run = run.as_str(), "killed by operator");
                KilledRun { run, job }
            })
            .collect();
        Response::with(&KillReply { killed })
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
        if let Err(e) = self.backend.save_paused(self.engine.paused()) {
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
        self.publish_pause(&changed, pause);
        Reply::Done(Response::with(&PauseReply {
            changed,
            paused: self.engine.paused().iter().cloned().collect(),
        }))
    }
}
