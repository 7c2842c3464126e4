//! Cluster mode: several rea nodes share one store (a database) and each
//! run is asked of it first. Every node computes every schedule; the
//! engine emits `Action::Claim` where local mode would decide, and the
//! store's answer comes back through [`Engine::claimed`]: started here,
//! skipped or queued (the overlap and pause decisions, taken on the job's
//! shared row), missed, or lost to another node. Retries, promotions of
//! queued occurrences and one-shots are handed out by the store to any
//! node ([`Engine::adopt`], [`Engine::adopt_oneshot`]). When the node has
//! no lease nothing starts; the occurrences it could not claim go through
//! their job's `catch_up` once it is back ([`Engine::cluster_back`]).

use super::*;

/// The least wait before an occurrence the store found early is asked
/// again.
const EARLY_AGAIN: Duration = Duration::from_millis(100);

impl Engine {
    /// Who decides whether runs start (before `start`): this engine (the
    /// default, which never emits a claim) or a shared store.
    pub fn set_decisions(&mut self, decisions: Decisions) {
        self.arbiter = Arbiter::new(decisions);
    }

    /// In cluster mode, this node's name: every run id (and unnamed
    /// one-shot id) this engine makes ends in `-NODE`, so it is unique
    /// cluster-wide and names the run in the shared store too.
    pub fn set_run_id_node(&mut self, node: &str) {
        self.run_id_node = Some(Arc::from(node));
    }

    /// A fresh run id at `now` (the counter already advanced).
    pub(super) fn run_id(&self, now: DateTime<Utc>) -> String {
        run_id(now, self.run_counter, self.run_id_node.as_deref())
    }

    /// Claims sent and not yet answered (the daemon waits for them before
    /// it stops, so no started run is left without an owner).
    pub fn claims_in_flight(&self) -> usize {
        self.arbiter.in_flight()
    }

    /// Asks the store about `p` (cluster mode).
    pub(super) fn request_claim(
        &mut self,
        p: Pending,
        overlap: Overlap,
        mode: ClaimMode,
        count: u64,
        out: &mut Vec<Action>,
    ) {
        let retry = self
            .jobs
            .get(p.source.name())
            .map(|s| s.def.retry.clone())
            .filter(|r| r.attempts > 0);
        out.push(Action::Claim(ClaimRequest {
            run: p.run.clone(),
            job: p.source.name().to_string(),
            scheduled: p.scheduled,
            attempt: p.attempt,
            trigger: p.trigger,
            overlap,
            mode,
            retry,
            count: count.max(1),
        }));
        if let Some(claims) = self.arbiter.claims() {
            claims.asked(p, count);
        }
    }

    /// The store answered the claim of `run`.
    pub fn claimed(&mut self, run: &str, outcome: ClaimOutcome, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let Some((mut p, count)) = self.arbiter.claims().and_then(|c| c.answered(run)) else {
            return out;
        };
        let answered = !matches!(
            outcome,
            ClaimOutcome::NoLease | ClaimOutcome::Unavailable(_) | ClaimOutcome::Early
        );
        if p.trigger == Trigger::CatchUp {
            self.caught_up_answered(&p, &outcome, now, &mut out);
        }
        match outcome {
            ClaimOutcome::Started { grant, .. } | ClaimOutcome::AlreadyYours { grant } => {
                p.grant = Some(grant);
                self.start_granted(p, now, &mut out);
            }
            ClaimOutcome::Skipped { reason } => {
                // The store has recorded it; this is the local line.
                out.push(skip_record(&p, &reason, now));
            }
            ClaimOutcome::Missed => {
                out.push(occurrences_missed(p.source.name(), p.scheduled, count, now));
            }
            ClaimOutcome::Queued => {}
            // Another node took it: its lateness is that node's to judge.
            ClaimOutcome::Lost => {
                if let Source::Job(name) = &p.source {
                    self.alerts_taken_elsewhere(name, p.scheduled);
                }
            }
            ClaimOutcome::Early => self.requeue_early(&p, now),
            ClaimOutcome::NoLease | ClaimOutcome::Unavailable(_) => {
                if matches!(p.trigger, Trigger::Schedule | Trigger::CatchUp) {
                    if let Some(claims) = self.arbiter.claims() {
                        claims.park(p.source.name(), p.scheduled);
                    }
                } else {
                    let why = match &outcome {
                        ClaimOutcome::Unavailable(e) => {
                            format!("not started: the cluster database did not answer ({e})")
                        }
                        _ => "not started: this node holds no cluster lease (is the database reachable?)"
                            .to_string(),
                    };
                    out.push(skip_record(&p, &why, now));
                }
            }
        }
        if answered && self.arbiter.claims().is_some_and(|c| c.any_parked()) {
            // The store answers again (a claim failed on a broken
            // connection while the lease held): catch up now.
            out.extend(self.cluster_back(now));
        }
        self.fill_slots(now, &mut out);
        out
    }

    /// A caught-up occurrence's claim was answered: the next one of a
    /// `catch_up = "all"` job is claimed now if this one will not run here
    /// (after the run otherwise, from its end); a newer occurrence claimed
    /// meanwhile makes the rest unclaimable (recorded missed here), and no
    /// lease parks the rest for when it is back.
    fn caught_up_answered(
        &mut self,
        p: &Pending,
        outcome: &ClaimOutcome,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let name = p.source.name();
        match outcome {
            // Started: the next waits for its end. Missed: the answer to
            // the claim standing for the older ones (a run's claim is
            // never answered so), sent before the first run's.
            ClaimOutcome::Started { .. }
            | ClaimOutcome::AlreadyYours { .. }
            | ClaimOutcome::Missed => {}
            ClaimOutcome::Lost => {
                let rest = self
                    .arbiter
                    .claims()
                    .and_then(|c| c.catching_up.remove(name))
                    .unwrap_or_default();
                if let Some(last) = rest.back() {
                    out.push(occurrences_missed(name, *last, rest.len() as u64, now));
                }
            }
            ClaimOutcome::NoLease | ClaimOutcome::Unavailable(_) => {
                if let Some(claims) = self.arbiter.claims() {
                    if let Some(last) = claims
                        .catching_up
                        .remove(name)
                        .and_then(|q| q.back().copied())
                    {
                        claims.park(name, last);
                    }
                }
            }
            _ => self.next_caught_up(name, now, out),
        }
    }

    /// The store found `p`'s occurrence still in its clock's future: it
    /// becomes the job's next occurrence again, due at its instant on this
    /// engine's clock (at least [`EARLY_AGAIN`] from now, so a clock still
    /// ahead asks again at that pace, not in a loop) — unless the job's
    /// schedule reaches it anyway. No one waits for it: the engine goes on.
    fn requeue_early(&mut self, p: &Pending, now: DateTime<Utc>) {
        if !matches!(p.trigger, Trigger::Schedule | Trigger::CatchUp) || self.stopping {
            return;
        }
        let Some(state) = self.jobs.get_mut(p.source.name()) else {
            return;
        };
        if state.removed {
            return;
        }
        if let Some(id) = state.next {
            if matches!(self.heap.get(id), Some(Due::Occurrence { at, .. }) if *at <= p.scheduled) {
                return;
            }
            self.heap.cancel(id);
        }
        let due = later(now, EARLY_AGAIN).max(p.scheduled);
        let jitter = (due - p.scheduled).to_std().unwrap_or_default();
        self.max_jitter = self.max_jitter.max(jitter);
        let id = self.heap.insert(
            due,
            Due::Occurrence {
                job: state.name.clone(),
                at: p.scheduled,
                jitter,
            },
        );
        state.next = Some(id);
    }

    /// The clock this engine is given was set back to the store's (this
    /// node's clock was ahead of the database's, and is now corrected):
    /// what it planned past `now` on the wrong clock has not happened.
    /// Occurrences parked for catch-up past `now` are forgotten, a job's
    /// last occurrence past `now + settled` is taken back there, and each
    /// job is planned again from then. `settled`: how far ahead of the store's clock the store
    /// grants a claim, with the correction's error — an occurrence up to
    /// there may have been granted to this node, and is never asked again
    /// (the store would answer "already yours" and it would start twice).
    pub fn clock_set_back(&mut self, now: DateTime<Utc>, settled: Duration) -> Vec<Action> {
        let mut out = Vec::new();
        if let Some(claims) = self.arbiter.claims() {
            claims.forget_after(now);
        }
        let from = later(now, settled);
        let names: Vec<Arc<str>> = self.jobs.keys().cloned().collect();
        for name in names {
            let Some(s) = self.jobs.get_mut(&name) else {
                continue;
            };
            if s.last_occurrence.is_some_and(|l| l > from) {
                s.last_occurrence = Some(from);
            }
            // The next occurrence from the corrected clock, if it comes
            // before the one planned (an early one re-queued comes first
            // and is kept).
            let after = s.last_occurrence.map_or(now, |l| l.max(now));
            let Some(first) = s.def.next_after(after) else {
                continue;
            };
            if let Some(id) = s.next {
                match self.heap.get(id) {
                    Some(Due::Occurrence { at, .. }) if *at > first => {
                        self.heap.cancel(id);
                        s.next = None;
                    }
                    _ => continue,
                }
            }
            self.schedule_next(&name, now);
        }
        self.advance(now, &mut out);
        out
    }

    /// A run the store granted this node: into the global queue, past the
    /// local overlap policy (the store decided it), or ended at once if the
    /// daemon is stopping (the store must not keep a `started` run nobody
    /// runs).
    fn start_granted(&mut self, p: Pending, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let known = match &p.source {
            Source::OneShot(_) => true,
            Source::Job(name) => self.jobs.get(name.as_str()).is_some_and(|s| !s.removed),
        };
        if self.stopping || !known {
            let why = if self.stopping {
                "the daemon is shutting down"
            } else {
                "the job is no longer in this node's job file"
            };
            let mut rec = run_record(&p, RunStatus::Skipped, now);
            rec.reason = Some(why.to_string());
            out.push(Action::Record(Box::new(rec)));
            return;
        }
        self.enqueue(p, now, out);
    }

    /// The store handed this node a run it decided: a retry of a failed or
    /// interrupted run, or an occurrence that waited (`overlap = "queue"`).
    /// A retry keeps the failed run's `params` (None: the defaults).
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        &mut self,
        job: &str,
        trigger: Trigger,
        attempt: u32,
        scheduled: DateTime<Utc>,
        grant: Grant,
        params: Option<Values>,
        now: DateTime<Utc>,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let mut p = self.new_pending(job, trigger, attempt, scheduled, Duration::ZERO, now);
        p.grant = Some(grant);
        if let Some(params) = params {
            p.params = Some(Arc::new(params));
        }
        if trigger == Trigger::Retry {
            if let Some(rid) = self.jobs.get_mut(job).and_then(|s| s.retry.take()) {
                self.heap.cancel(rid);
            }
        }
        self.start_granted(p, now, &mut out);
        out
    }

    /// The store handed this node a one-shot that is due (claimed from the
    /// shared queue: no other node has it).
    pub fn adopt_oneshot(
        &mut self,
        shot: OneShot,
        attempt: u32,
        grant: Grant,
        now: DateTime<Utc>,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let id = shot.id.clone();
        let trigger = if attempt > 1 {
            Trigger::Retry
        } else {
            Trigger::Oneshot
        };
        let def = Arc::new(shot);
        self.oneshots.insert(
            ShotKey(def.clone()),
            ShotState {
                entry: None,
                running: false,
            },
        );
        let mut p = self.new_oneshot_pending(&id, trigger, attempt, def.due, now);
        p.grant = Some(grant);
        self.start_granted(p, now, &mut out);
        out
    }

    /// The node lost its lease: runs of jobs with `on_lease_lost = "kill"`
    /// are terminated (another node may retry them).
    pub fn lease_lost(&mut self, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        for (run, active) in self.runs.iter_mut() {
            let kill = matches!(&active.def, Def::Job(j) if j.on_lease_lost == OnLeaseLost::Kill);
            if kill && active.stop.is_none() {
                active.stop = Some(StopReason::LeaseLost);
                out.push(Action::Terminate { run: run.clone() });
            }
        }
        out
    }

    /// The store asks to stop the run holding `fence` (another node
    /// replaced it: `overlap = "replace"`).
    pub fn stop_fence(&mut self, fence: i64, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        for (run, active) in self.runs.iter_mut() {
            if active.pending.grant.is_some_and(|g| g.fence == fence) && active.stop.is_none() {
                // A one-shot's stop comes from `rea cancel --kill`.
                active.stop = Some(if active.pending.source.oneshot().is_some() {
                    StopReason::Operator
                } else {
                    StopReason::Replaced
                });
                out.push(Action::Terminate { run: run.clone() });
            }
        }
        out
    }

    /// The node holds a lease again: each job whose occurrences it could
    /// not claim meanwhile catches them up through its `catch_up`
    /// ([`Engine::claim_caught_up`]). The store's mark makes one node win
    /// each, whichever asks first.
    pub fn cluster_back(&mut self, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        if self.stopping {
            return out;
        }
        let parked = self
            .arbiter
            .claims()
            .map(|c| c.take_parked())
            .unwrap_or_default();
        for (name, (oldest, newest)) in parked {
            let Some(def) = self
                .jobs
                .get(name.as_str())
                .filter(|s| !s.removed)
                .map(|s| s.def.clone())
            else {
                continue;
            };
            let before = oldest - chrono::Duration::nanoseconds(1);
            let (mut kept, mut count) = self.passed(&name, before, newest, caught_up_kept(&def));
            if count == 0 {
                // Its schedule changed since: the newest stands for them.
                (kept, count) = (vec![newest], 1);
            }
            self.claim_caught_up(&name, &def, kept, count, now, &mut out);
        }
        out
    }

    /// `count` occurrences of `name` passed unclaimed (the newest of them
    /// `kept`, oldest first, as [`caught_up_kept`] asks): claimed as the
    /// job's `catch_up` says. `none`: the newest, as missed, standing for
    /// all of them; `once`: the newest, to run; `all`: the newest
    /// `catch_up_limit`, to run one after the other (oldest first, each
    /// claimed once the previous one is decided, see
    /// [`Engine::next_caught_up`]), the older ones as one missed claim.
    pub(super) fn claim_caught_up(
        &mut self,
        name: &str,
        def: &Job,
        mut kept: Vec<DateTime<Utc>>,
        count: u64,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(&latest) = kept.last() else {
            return;
        };
        let limit = def.catch_up_limit.max(1) as usize;
        match def.catch_up {
            CatchUp::None | CatchUp::Once => {
                let mode = if def.catch_up == CatchUp::None {
                    ClaimMode::Missed
                } else {
                    ClaimMode::Run
                };
                let p = self.new_pending(name, Trigger::CatchUp, 1, latest, Duration::ZERO, now);
                self.request_claim(p, def.overlap, mode, count, out);
            }
            CatchUp::All => {
                if kept.len() > limit {
                    // The newest of those beyond the limit stands for them.
                    let dropped = kept.remove(0);
                    let older = count.saturating_sub(limit as u64).max(1);
                    let p =
                        self.new_pending(name, Trigger::CatchUp, 1, dropped, Duration::ZERO, now);
                    self.request_claim(p, def.overlap, ClaimMode::Missed, older, out);
                }
                let mut queue: std::collections::VecDeque<DateTime<Utc>> = kept.into();
                let Some(first) = queue.pop_front() else {
                    return;
                };
                // Kept (even empty) until the last one is decided: the
                // job's new occurrences wait behind them meanwhile.
                if let Some(claims) = self.arbiter.claims() {
                    claims.catching_up.insert(name.to_string(), queue);
                }
                let p = self.new_pending(name, Trigger::CatchUp, 1, first, Duration::ZERO, now);
                self.request_claim(p, def.overlap, ClaimMode::Run, 1, out);
            }
        }
    }

    /// `catch_up = "all"`: the previous caught-up occurrence of `name` is
    /// decided (its run ended here, or the store did not start it): claim
    /// the next one, if any.
    pub(super) fn next_caught_up(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(claims) = self.arbiter.claims() else {
            return;
        };
        let Some(queue) = claims.catching_up.get_mut(name) else {
            return;
        };
        let Some(at) = queue.pop_front() else {
            claims.catching_up.remove(name);
            return;
        };
        let Some(def) = self
            .jobs
            .get(name)
            .filter(|s| !s.removed && !self.stopping)
            .map(|s| s.def.clone())
        else {
            if let Some(claims) = self.arbiter.claims() {
                claims.catching_up.remove(name);
            }
            return;
        };
        let p = self.new_pending(name, Trigger::CatchUp, 1, at, Duration::ZERO, now);
        self.request_claim(p, def.overlap, ClaimMode::Run, 1, out);
    }

    /// Jobs with occurrences waiting for the node's lease.
    #[cfg(test)]
    pub(crate) fn unclaimed(&mut self) -> BTreeMap<String, (DateTime<Utc>, DateTime<Utc>)> {
        self.arbiter
            .claims()
            .map(|c| c.parked().clone())
            .unwrap_or_default()
    }
}

/// The local line for occurrences the store recorded as missed.
fn occurrences_missed(name: &str, at: DateTime<Utc>, count: u64, now: DateTime<Utc>) -> Action {
    let mut rec = Record::new(Event::Missed, now);
    rec.job = Some(name.to_string());
    rec.count = Some(count);
    rec.scheduled = Some(at);
    rec.reason = Some(format!(
        "{count} occurrence(s) passed while no node was running them (catch_up policy)"
    ));
    Action::Record(Box::new(rec))
}

/// How many of the newest passed occurrences [`Engine::claim_caught_up`]
/// needs: `all`, its limit and the newest beyond it (which stands for the
/// older ones); else the newest.
pub(super) fn caught_up_kept(def: &Job) -> usize {
    match def.catch_up {
        CatchUp::All => def.catch_up_limit.max(1) as usize + 1,
        CatchUp::None | CatchUp::Once => 1,
    }
}
