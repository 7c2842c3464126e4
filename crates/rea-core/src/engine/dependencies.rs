//! `after = [...]`: a job that runs when each job it names has ended as
//! its entry asks (`on`: succeeded by default, failed for good, or ended
//! either way) since it last ran for them (a join, not a chain of
//! triggers).
//!
//! What counts: a success is any attempt that succeeded; a failure is a
//! failed or timed-out run that will not be retried (the last attempt, or
//! the only one), so a job with retries starts its `on = "failure"`
//! dependents once; `always` is either of those, or a killed run. A
//! skipped or missed occurrence did not run and starts nothing; neither
//! does an interrupted one (the daemon was stopping). An entry satisfied
//! stays satisfied until the dependent runs, as a success always has.

use super::*;
use crate::job::On;

/// How a job's run ended, for its dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Succeeded,
    /// Failed or timed out, and no retry follows.
    FailedForGood,
    /// Killed (by an operator, a replacing run, the lease's loss).
    Killed,
}

impl End {
    fn satisfies(self, on: On) -> bool {
        match on {
            On::Success => self == End::Succeeded,
            On::Failure => self == End::FailedForGood,
            On::Always => true,
        }
    }
}

impl Engine {
    /// Indexes who runs `after` whom.
    pub(super) fn rebuild_dependents(&mut self) {
        self.dependents.clear();
        for (name, state) in self.jobs.iter() {
            for dep in &state.def.after {
                let list = self.dependents.entry(dep.job.clone()).or_default();
                if !list.iter().any(|n| n == &**name) {
                    list.push(name.to_string());
                }
            }
        }
    }

    /// `name`'s run ended as `end`: jobs that run `after` it on that end
    /// (and whose other entries are all satisfied) start now.
    pub(super) fn dependents_of(
        &mut self,
        name: &str,
        end: End,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
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
            let counts = state
                .def
                .after
                .iter()
                .any(|d| d.job == name && end.satisfies(d.on));
            if !counts {
                continue;
            }
            state.deps_done.insert(name.to_string());
            if state
                .def
                .after
                .iter()
                .all(|a| state.deps_done.contains(&a.job))
            {
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
