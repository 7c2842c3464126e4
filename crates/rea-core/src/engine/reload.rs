//! A new job set replaces the old one, diffed by job name: unchanged jobs
//! keep their next fire, pending retry and running runs; changed ones are
//! rescheduled; removed ones are cancelled while their runs finish.

use super::*;

impl Engine {
    /// A new valid configuration: apply the difference by job name.
    pub fn reload(&mut self, plan: &Plan, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        // Positions, tags and definitions change: the live index is
        // rebuilt when next read.
        self.jobs.all_changed();
        let (mut added, mut changed, mut unchanged) = (0u64, 0u64, 0u64);
        for state in self.jobs.values_mut() {
            state.listed = false;
        }
        for job in plan.jobs {
            let name: &str = &job.name;
            match self.jobs.get_mut(name) {
                // The job file's reader hands back the very `Arc` of a job
                // that did not change: no need to compare it field by field.
                Some(state)
                    if !state.removed && (Arc::ptr_eq(&state.def, job) || *state.def == **job) =>
                {
                    // Same definition: keep its schedule, but hold the new
                    // plan's copy, so the old configuration's jobs (and
                    // compiled schedules) are freed when it is dropped
                    // instead of living on beside the new ones.
                    state.def = job.clone();
                    state.listed = true;
                    unchanged += 1;
                }
                Some(state) => {
                    let was_removed = state.removed;
                    state.def = job.clone();
                    state.removed = false;
                    state.listed = true;
                    if let Some(id) = state.next.take() {
                        self.heap.cancel(id);
                    }
                    if !job.enabled {
                        if let Some(id) = state.retry.take() {
                            self.heap.cancel(id);
                        }
                        state.waiting.clear();
                    }
                    if was_removed {
                        added += 1;
                    } else {
                        changed += 1;
                    }
                    self.schedule_next(name, now);
                    self.alerts_changed(name, now, &mut out);
                }
                None => {
                    added += 1;
                    let key: Arc<str> = name.into();
                    let mut state = JobState::new(key.clone(), job.clone());
                    state.listed = true;
                    self.jobs.insert(key, state);
                    self.schedule_next(name, now);
                    self.alerts_job_seen(name, now);
                }
            }
        }
        // The jobs the plan did not list left the file.
        let removed: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, s)| !s.listed)
            .map(|(n, _)| n.to_string())
            .collect();
        for name in &removed {
            self.alerts_retired(name, now, &mut out);
            self.retire(name);
        }
        // The names already held, in the new file order: no new strings for
        // the jobs that stayed.
        self.order = plan
            .jobs
            .iter()
            .filter_map(|j| self.jobs.get(j.name.as_str()).map(|s| s.name.clone()))
            .collect();
        for (i, name) in self.order.iter().enumerate() {
            if let Some(s) = self.jobs.get_mut(&**name) {
                s.position = i;
            }
        }
        let jobs = &self.jobs;
        self.paused
            .retain(|n| jobs.get(n.as_str()).is_some_and(|s| s.listed));
        self.rebuild_dependents();
        self.max_concurrent = plan.max_concurrent.max(1);
        self.shares.set_limits(plan.max_concurrent, plan.shares);
        self.file = plan.source.to_string();
        let mut rec = Record::new(Event::ConfigLoaded, now);
        rec.count = Some(plan.jobs.len() as u64);
        rec.detail = Some(json!({
            "file": self.file,
            "added": added,
            "changed": changed,
            "removed": removed.len(),
            "unchanged": unchanged,
        }));
        out.push(Action::Record(Box::new(rec)));
        self.fill_slots(now, &mut out);
        out
    }

    /// The job left the file: cancel what is pending, let runs finish.
    pub(super) fn retire(&mut self, name: &str) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        state.removed = true;
        for id in [state.next.take(), state.retry.take()]
            .into_iter()
            .flatten()
        {
            self.heap.cancel(id);
        }
        state.waiting.clear();
        if state.queued > 0 {
            let owner = shares::owner_of_job(state.def.owner.as_deref());
            let dropped = self
                .shares
                .remove_runs(&owner, |p| p.source.name() == name)
                .len();
            state.active = state.active.saturating_sub(dropped);
            state.queued = state.queued.saturating_sub(dropped);
        }
        if state.active == 0 {
            self.jobs.remove(name);
        }
    }
}
