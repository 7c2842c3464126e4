//! What `rea status` shows of each job: next fire, pending retry, runs in
//! progress and queued, the last result and the failure streak.

use super::*;

/// The last final result of a job, for status.
#[derive(Debug, Clone, PartialEq)]
pub struct LastRun {
    pub run: String,
    pub status: RunStatus,
    pub ended: DateTime<Utc>,
    pub duration: Duration,
    pub exit_code: Option<i32>,
}

/// A job's live state as `rea status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    pub name: String,
    pub enabled: bool,
    pub paused: bool,
    pub next_fire: Option<DateTime<Utc>>,
    pub retry_at: Option<DateTime<Utc>>,
    /// (run id, pid, since) of runs in progress.
    pub running: Vec<RunningRun>,
    /// Runs waiting (for the job's previous run or a global slot).
    pub queued: usize,
    pub consecutive_failures: u32,
    pub last: Option<LastRun>,
    /// Jobs it runs after, and on which end of their runs (its `after`
    /// list).
    pub after: Vec<crate::job::Dependency>,
}

/// (run id, pid, since) of a run in progress.
pub type RunningRun = (String, Option<u32>, Option<DateTime<Utc>>);

fn running_run(id: &str, a: &Active) -> RunningRun {
    (
        id.to_string(),
        a.started.map(|s| s.pid),
        a.started.map(|s| s.at),
    )
}

impl Engine {
    /// Live status of every job in file order. Runs and queued runs are
    /// grouped by job in one pass, not searched once per job.
    pub fn status(&self) -> Vec<JobStatus> {
        let mut running: HashMap<&str, Vec<RunningRun>> = HashMap::new();
        for (id, a) in &self.runs {
            running
                .entry(a.pending.source.name())
                .or_default()
                .push(running_run(id, a));
        }
        let mut queued: HashMap<&str, usize> = HashMap::new();
        for p in self.shares.runs() {
            *queued.entry(p.source.name()).or_default() += 1;
        }
        self.order
            .iter()
            .filter_map(|name| {
                let runs = running.remove(&**name).unwrap_or_default();
                let in_ready = queued.get(&**name).copied().unwrap_or(0);
                self.job_status_with(name, runs, in_ready)
            })
            .collect()
    }

    /// Per tenant (`None`: the system), the slots it holds and its runs
    /// waiting for one; the system is always listed.
    pub fn tenant_slots(&self) -> Vec<(Option<String>, usize, usize)> {
        let mut out: Vec<(Option<String>, usize, usize)> = self
            .shares
            .per_tenant()
            .map(|(o, held, waiting)| (o.as_deref().map(str::to_string), held, waiting))
            .collect();
        if !out.iter().any(|(o, _, _)| o.is_none()) {
            out.push((None, 0, 0));
        }
        out.sort();
        out
    }

    /// Whether a job of the file is named `name` (a map lookup).
    pub fn has_job(&self, name: &str) -> bool {
        self.jobs.contains_key(name)
    }

    /// The definition in force of the job named `name` (a map lookup): for
    /// the daemon's webhooks and pings, sent as its records go by.
    pub fn job_def(&self, name: &str) -> Option<&Arc<Job>> {
        self.jobs.get(name).map(|s| &s.def)
    }

    /// Live status of one job.
    pub fn job_status(&self, name: &str) -> Option<JobStatus> {
        let runs = self
            .runs
            .iter()
            .filter(|(_, a)| a.pending.source.name() == name)
            .map(|(id, a)| running_run(id, a))
            .collect();
        let owner = self.jobs.get(name).map_or_else(
            || shares::owner_of_name(name),
            |s| shares::owner_of_job(s.def.owner.as_deref()),
        );
        let in_ready = self
            .shares
            .runs_of(&owner)
            .filter(|p| p.source.name() == name)
            .count();
        self.job_status_with(name, runs, in_ready)
    }

    pub(super) fn job_status_with(
        &self,
        name: &str,
        mut running: Vec<RunningRun>,
        in_ready: usize,
    ) -> Option<JobStatus> {
        let s = self.jobs.get(name)?;
        running.sort_by_key(|a| a.2);
        Some(JobStatus {
            name: name.to_string(),
            enabled: s.def.enabled,
            paused: self.paused.contains(name),
            next_fire: s.next.and_then(|id| match self.heap.get(id) {
                Some(Due::Occurrence { at, .. }) => Some(*at),
                _ => None,
            }),
            retry_at: s.retry.and_then(|id| self.heap.due_of(id)),
            running,
            queued: s.waiting.len() + in_ready,
            consecutive_failures: s.consecutive_failures,
            last: s.last.clone(),
            after: s.def.after.clone(),
        })
    }

    /// Seeds status from the history log at start (last result, failures).
    pub fn seed_last(&mut self, name: &str, last: LastRun, consecutive_failures: u32) {
        if let Some(s) = self.jobs.get_mut(name) {
            s.last = Some(last);
            s.consecutive_failures = consecutive_failures;
        }
    }
}
