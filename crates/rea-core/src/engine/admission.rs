//! Admission: whether a run that is due may start now. The job's overlap
//! policy (`skip`, `queue`, `allow`, `replace`) first, then a slot of
//! `max_concurrent` as its tenant's share allows (`shares.rs`). Operator
//! triggers enter here too, capped per tenant.

use super::*;

/// What the operator's `trigger` achieved.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerResult {
    Started {
        run: String,
    },
    Queued {
        run: String,
    },
    Skipped {
        reason: String,
    },
    UnknownJob {
        suggestions: Vec<String>,
    },
    /// Its parameters are not the job's (undeclared, missing, not
    /// matching, too large): nothing was started or recorded.
    BadParams {
        reason: String,
    },
}

/// Manual runs accepted while fewer than this many runs wait for a slot (or
/// for the job's previous run): a client pipelining triggers cannot grow the
/// daemon's queues without bound.
pub const MAX_WAITING_TRIGGERS: usize = 50_000;

impl Engine {
    /// Runs a job now (trigger `manual`), subject to its overlap policy
    /// unless `force`. Paused and disabled jobs can still be triggered: a
    /// trigger is an explicit human decision, pause only stops the schedule.
    /// `params` are checked against what the job declares
    /// ([`crate::params::resolve`]) before anything else is decided.
    pub fn trigger(
        &mut self,
        name: &str,
        force: bool,
        params: &Values,
        now: DateTime<Utc>,
    ) -> (TriggerResult, Vec<Action>) {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let known = self.jobs.get(name).is_some_and(|s| !s.removed);
        if !known {
            let names: Vec<&str> = self.order.iter().map(|n| &**n).collect();
            let suggestions = crate::suggest::closest(name, names, 3);
            return (TriggerResult::UnknownJob { suggestions }, out);
        }
        let declared = self
            .jobs
            .get(name)
            .map(|s| s.def.clone())
            .expect("known job");
        let declared = &declared.extras().params;
        let values = match crate::params::resolve(declared, params, name) {
            Ok(_) if declared.is_empty() => None,
            Ok(v) => Some(Arc::new(v)),
            Err(reason) => return (TriggerResult::BadParams { reason }, out),
        };
        if self.stopping {
            return (
                TriggerResult::Skipped {
                    reason: "the daemon is shutting down".into(),
                },
                out,
            );
        }
        let waiting =
            self.shares.waiting_runs() + self.jobs.get(name).map_or(0, |s| s.waiting.len());
        if waiting >= MAX_WAITING_TRIGGERS {
            return (
                TriggerResult::Skipped {
                    reason: format!(
                        "{waiting} runs already wait to start (max_concurrent = {}); try again when fewer do",
                        self.max_concurrent
                    ),
                },
                out,
            );
        }
        let owner = shares::owner_of_job(self.jobs.get(name).and_then(|s| s.def.owner.as_deref()));
        if let Some(reason) = self.queue_full(&owner) {
            return (TriggerResult::Skipped { reason }, out);
        }
        let run = match self.arbiter {
            Arbiter::Store(_) => {
                let mut pending =
                    self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
                pending.params = values;
                let run = pending.run.clone();
                let overlap = if force {
                    Overlap::Allow
                } else {
                    self.jobs.get(name).map_or(Overlap::Skip, |s| s.def.overlap)
                };
                self.request_claim(pending, overlap, ClaimMode::Run, 1, &mut out);
                Some(run)
            }
            Arbiter::Engine if force => {
                let mut pending =
                    self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
                pending.params = values;
                let run = pending.run.clone();
                self.enqueue(pending, now, &mut out);
                Some(run)
            }
            Arbiter::Engine => {
                let mut pending =
                    self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
                pending.params = values;
                self.dispatch_pending(pending, now, &mut out)
            }
        };
        self.fill_slots(now, &mut out);
        let result = match run {
            Some(run) if self.runs.contains_key(&run) => TriggerResult::Started { run },
            Some(run) => TriggerResult::Queued { run },
            None => {
                let previous = self.jobs.get(name).map_or_else(
                    || "the previous run is still running".into(),
                    |s| self.previous_run(s),
                );
                TriggerResult::Skipped {
                    reason: format!(
                        "{previous} and the job's overlap policy is \"skip\" (use --force to run anyway)"
                    ),
                }
            }
        };
        (result, out)
    }

    /// Why a user's manual trigger or retry may not wait for a slot now:
    /// she already has `max_queued_per_user` runs waiting. None for the
    /// system (bounded by [`MAX_WAITING_TRIGGERS`] only).
    pub(super) fn queue_full(&self, owner: &shares::Owner) -> Option<String> {
        let user = owner.as_ref()?;
        let cap = self.shares.limits().queued_per_user;
        let mine = self.shares.waiting_runs_of(owner);
        (mine >= cap).then(|| {
            format!(
                "{user} already has {mine} runs waiting for a free slot (max_queued_per_user = {cap}); \
                 try again when fewer wait, or ask the administrator to raise max_queued_per_user in [daemon]"
            )
        })
    }

    /// Why a job's new run is skipped or queued behind its previous one:
    /// that run runs, or (all its runs are still in the global queue) it
    /// waits for a slot, and for whose.
    fn previous_run(&self, state: &JobState) -> String {
        if state.queued < state.active || state.queued == 0 {
            return "the previous run is still running".into();
        }
        let owner = shares::owner_of_job(state.def.owner.as_deref());
        match self.shares.blocker(&owner) {
            Some(b) => format!("the previous run is still waiting for a free slot: {b}"),
            None => "the previous run is still waiting to start".into(),
        }
    }

    /// Applies the job's overlap policy to a new run. Returns the run id if
    /// the run was started or queued.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch(
        &mut self,
        name: &str,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        jitter: Duration,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Option<String> {
        let pending = self.new_pending(name, trigger, attempt, scheduled, jitter, now);
        self.dispatch_pending(pending, now, out)
    }

    /// [`Engine::dispatch`] of a run already made (a trigger's, with its
    /// parameters; a retry's, with the failed run's).
    pub(super) fn dispatch_pending(
        &mut self,
        pending: Pending,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Option<String> {
        let name = pending.source.name().to_string();
        let name = name.as_str();
        match self.arbiter {
            // The store takes the overlap and pause decisions on the job's
            // shared row; this node only asks.
            Arbiter::Store(_) => {
                let overlap = self.jobs.get(name)?.def.overlap;
                let run = pending.run.clone();
                self.request_claim(pending, overlap, ClaimMode::Run, 1, out);
                return Some(run);
            }
            Arbiter::Engine => {}
        }
        let state = self.jobs.get(name)?;
        if state.active == 0 {
            let run = pending.run.clone();
            self.enqueue(pending, now, out);
            return Some(run);
        }
        // Said only when a run is skipped: what its predecessor is doing.
        let previous = match state.def.overlap {
            Overlap::Skip => self.previous_run(state),
            Overlap::Queue if !state.waiting.is_empty() => self.previous_run(state),
            _ => String::new(),
        };
        let state = self.jobs.get_mut(name)?;
        match state.def.overlap {
            Overlap::Skip => {
                out.push(skip_record(
                    &pending,
                    &format!("{previous} (overlap = \"skip\")"),
                    now,
                ));
                None
            }
            Overlap::Allow => {
                let run = pending.run.clone();
                self.enqueue(pending, now, out);
                Some(run)
            }
            Overlap::Queue => {
                if state.waiting.is_empty() {
                    let run = pending.run.clone();
                    state.waiting.push_back(pending);
                    Some(run)
                } else {
                    out.push(skip_record(
                        &pending,
                        &format!("{previous} and one run is already queued (overlap = \"queue\")"),
                        now,
                    ));
                    None
                }
            }
            Overlap::Replace => {
                for old in std::mem::take(&mut state.waiting) {
                    out.push(skip_record(
                        &old,
                        "replaced by a newer run (overlap = \"replace\")",
                        now,
                    ));
                }
                state.waiting.push_back(pending.clone());
                // Not yet spawned: drop it from the global queue.
                if state.queued > 0 {
                    let owner = pending.owner.clone();
                    for old in self.shares.remove_runs(&owner, |p| p.source.name() == name) {
                        out.push(skip_record(
                            &old,
                            "replaced by a newer run (overlap = \"replace\")",
                            now,
                        ));
                        state.active = state.active.saturating_sub(1);
                        state.queued = state.queued.saturating_sub(1);
                    }
                }
                for (run, active) in self.runs.iter_mut() {
                    if active.pending.source.name() == name && active.stop.is_none() {
                        active.stop = Some(StopReason::Replaced);
                        out.push(Action::Terminate { run: run.clone() });
                    }
                }
                if state.active == 0 {
                    if let Some(p) = state.waiting.pop_front() {
                        self.enqueue(p, now, out);
                    }
                }
                Some(pending.run)
            }
        }
    }

    /// Waits behind the job's active run (or starts if there is none).
    pub(super) fn push_waiting(
        &mut self,
        name: &str,
        p: Pending,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        state.waiting.push_back(p);
        self.kick(name, now, out);
    }

    /// Starts the job's next waiting run if it has no active one.
    pub(super) fn kick(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.active > 0 || self.stopping {
            return;
        }
        if let Some(mut p) = state.waiting.pop_front() {
            p.ready_at = now;
            self.enqueue(p, now, out);
        }
    }

    /// Into the global queue (counts as active for the job's overlap).
    /// A run that cannot start at once notes why, for its records.
    pub(super) fn enqueue(&mut self, mut p: Pending, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if let Source::Job(name) = &p.source {
            if let Some(state) = self.jobs.get_mut(name.as_str()) {
                state.active += 1;
                state.queued += 1;
            }
        }
        p.ready_at = now;
        let owner = p.owner.clone();
        let run = p.run.clone();
        self.shares.push_run(p);
        self.fill_slots(now, out);
        if let Some(blocker) = self.shares.blocker(&owner) {
            if let Some(last) = self.shares.last_run_mut(&owner) {
                if last.run == run {
                    last.blocked = Some(blocker);
                }
            }
        }
    }

    /// Starts what waits for a slot while its tenant's share allows:
    /// tenants in turn (`shares.rs`), within each its finished runs' hooks
    /// first (their run already waited its turn), then its runs in due
    /// order. Hooks and runs share `max_concurrent`.
    pub(super) fn fill_slots(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        while !self.stopping {
            let Some((owner, granted)) = self.shares.next() else {
                break;
            };
            let p = match granted {
                Granted::Hooks(after) => {
                    let id = self.hooks.start(owner);
                    out.push(Action::StartHooks { id, after });
                    continue;
                }
                Granted::Run(p) => p,
            };
            let def = match &p.source {
                Source::OneShot(id) => match self.shot_def(id) {
                    Some(def) => {
                        if let Some(shot) = self.oneshots.get_mut(id.as_str()) {
                            shot.running = true;
                        }
                        Def::OneShot(def)
                    }
                    None => {
                        self.shares.release(&owner);
                        continue;
                    }
                },
                Source::Job(name) => match self.jobs.get_mut(name.as_str()) {
                    Some(state) => {
                        state.queued = state.queued.saturating_sub(1);
                        Def::Job(state.def.clone())
                    }
                    None => {
                        self.shares.release(&owner);
                        continue;
                    }
                },
            };
            out.push(Action::Start(StartRun {
                run: p.run.clone(),
                name: p.source.name().to_string(),
                def: def.clone(),
                attempt: p.attempt,
                trigger: p.trigger,
                scheduled: p.scheduled,
                grant: p.grant,
                params: p.params.clone(),
            }));
            let job = match &p.source {
                Source::Job(name) => Some((name.clone(), p.run.clone())),
                Source::OneShot(_) => None,
            };
            self.runs.insert(
                p.run.clone(),
                Active {
                    pending: p,
                    def,
                    started: None,
                    stop: None,
                    over_entry: None,
                    over: false,
                },
            );
            if let Some((name, run)) = job {
                self.alerts_run_started(&name, Some(&run), now, out);
                self.alerts_arm_run(&name, &run, now);
            }
        }
    }
}
