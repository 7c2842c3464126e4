//! Admission: whether a run that is due may start now. The job's overlap
//! policy (`skip`, `queue`, `allow`, `replace`) first, then the global
//! `max_concurrent` limit, in due order. Operator triggers enter here too.

use super::*;

/// What the operator's `trigger` achieved.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerResult {
    Started { run: String },
    Queued { run: String },
    Skipped { reason: String },
    UnknownJob { suggestions: Vec<String> },
}

/// Manual runs accepted while fewer than this many runs wait for a slot (or
/// for the job's previous run): a client pipelining triggers cannot grow the
/// daemon's queues without bound.
pub const MAX_WAITING_TRIGGERS: usize = 50_000;

impl Engine {
    /// Runs a job now (trigger `manual`), subject to its overlap policy
    /// unless `force`. Paused and disabled jobs can still be triggered: a
    /// trigger is an explicit human decision, pause only stops the schedule.
    pub fn trigger(
        &mut self,
        name: &str,
        force: bool,
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
        if self.stopping {
            return (
                TriggerResult::Skipped {
                    reason: "the daemon is shutting down".into(),
                },
                out,
            );
        }
        let waiting = self.ready.len() + self.jobs.get(name).map_or(0, |s| s.waiting.len());
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
        let run = match self.arbiter {
            Arbiter::Store(_) => {
                let pending = self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
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
                let pending = self.new_pending(name, Trigger::Manual, 1, now, Duration::ZERO, now);
                let run = pending.run.clone();
                self.enqueue(pending, now, &mut out);
                Some(run)
            }
            Arbiter::Engine => {
                self.dispatch(name, Trigger::Manual, 1, now, Duration::ZERO, now, &mut out)
            }
        };
        self.fill_slots(now, &mut out);
        let result = match run {
            Some(run) if self.runs.contains_key(&run) => TriggerResult::Started { run },
            Some(run) => TriggerResult::Queued { run },
            None => TriggerResult::Skipped {
                reason: "a previous run is still running and the job's overlap policy is \"skip\" (use --force to run anyway)"
                    .into(),
            },
        };
        (result, out)
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
        let state = self.jobs.get_mut(name)?;
        if state.active == 0 {
            let run = pending.run.clone();
            self.enqueue(pending, now, out);
            return Some(run);
        }
        match state.def.overlap {
            Overlap::Skip => {
                out.push(skip_record(
                    &pending,
                    "the previous run is still running (overlap = \"skip\")",
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
                        "the previous run is still running and one run is already queued (overlap = \"queue\")",
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
                let mut i = 0;
                while i < self.ready.len() {
                    if self.ready[i].source.name() == name {
                        if let Some(old) = self.ready.remove(i) {
                            out.push(skip_record(
                                &old,
                                "replaced by a newer run (overlap = \"replace\")",
                                now,
                            ));
                            state.active = state.active.saturating_sub(1);
                        }
                    } else {
                        i += 1;
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
    pub(super) fn enqueue(&mut self, mut p: Pending, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if let Some(state) = self.jobs.get_mut(p.source.name()) {
            state.active += 1;
        }
        p.ready_at = now;
        self.ready.push_back(p);
        self.fill_slots(now, out);
    }

    /// Starts what waits for a global slot while one is free: finished
    /// runs' hooks first (their run already waited its turn), then runs in
    /// due order. Hooks and runs share `max_concurrent`.
    pub(super) fn fill_slots(&mut self, _now: DateTime<Utc>, out: &mut Vec<Action>) {
        while !self.stopping && self.runs.len() + self.hooks.running() < self.max_concurrent {
            if let Some((id, after)) = self.hooks.start_next() {
                out.push(Action::StartHooks {
                    id,
                    after: Box::new(after),
                });
                continue;
            }
            let Some(p) = self.ready.pop_front() else {
                break;
            };
            let def = match &p.source {
                Source::OneShot(id) => {
                    let Some(def) = self.shot_def(id) else {
                        continue;
                    };
                    if let Some(shot) = self.oneshots.get_mut(id.as_str()) {
                        shot.running = true;
                    }
                    Def::OneShot(def)
                }
                Source::Job(name) => match self.jobs.get(name.as_str()) {
                    Some(state) => Def::Job(state.def.clone()),
                    None => continue,
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
            }));
            self.runs.insert(
                p.run.clone(),
                Active {
                    pending: p,
                    def,
                    started: None,
                    stop: None,
                },
            );
        }
    }
}
