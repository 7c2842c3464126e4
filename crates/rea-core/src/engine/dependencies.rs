//! `after = [...]`: a job that runs when each job it names has succeeded
//! since it last ran for them (a join, not a chain of triggers).

use super::*;

impl Engine {
    /// `name` succeeded: jobs that run `after` it (and all their other
    /// dependencies) start now.
    pub(super) fn rebuild_dependents(&mut self) {
        self.dependents.clear();
        for (name, state) in &self.jobs {
            for dep in &state.def.after {
                self.dependents
                    .entry(dep.clone())
                    .or_default()
                    .push(name.to_string());
            }
        }
    }

    pub(super) fn dependents_of(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        if self.stopping {
            return;
        }
        let Some(candidates) = self.dependents.get(name) else {
            return;
        };
        let mut ready = Vec::new();
        for dep_name in candidates {
            let Some(state) = self.jobs.get_mut(dep_name.as_str()) else {
                continue;
            };
            if state.removed || !state.def.enabled {
                continue;
            }
            state.deps_done.insert(name.to_string());
            if state.def.after.iter().all(|a| state.deps_done.contains(a)) {
                state.deps_done.clear();
                ready.push(dep_name.clone());
            }
        }
        for dep in ready {
            if self.paused.contains(&dep) {
                let p = self.new_pending(&dep, Trigger::Dependency, 1, now, Duration::ZERO, now);
                out.push(skip_record(
                    &p,
                    "the job is paused (rea resume to resume)",
                    now,
                ));
                continue;
            }
            self.dispatch(&dep, Trigger::Dependency, 1, now, Duration::ZERO, now, out);
        }
    }
}
