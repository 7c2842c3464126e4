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

/// One job as the live views see it, borrowed from the engine: nothing is
/// copied until a page keeps it.
#[derive(Debug, Clone, Copy)]
pub struct JobView<'a> {
    pub name: &'a str,
    pub job: &'a Job,
    pub paused: bool,
    pub next_fire: Option<DateTime<Utc>>,
    /// When its pending retry is due.
    pub retry_at: Option<DateTime<Utc>>,
    /// Runs handed to the daemon (spawned or being claimed).
    pub running: usize,
    /// Runs waiting for a slot or for the job's previous run.
    pub queued: usize,
    pub consecutive_failures: u32,
    pub summary: &'a crate::summary::Summary,
}

impl JobView<'_> {
    /// `running`, `queued`, `retry_pending`, `disabled`, `paused` or
    /// `idle`, as `rea status` says it.
    pub fn state(&self) -> &'static str {
        self.live_state().as_str()
    }

    /// The same as a word of its own.
    pub fn live_state(&self) -> super::LiveState {
        use super::LiveState;
        if self.running > 0 {
            LiveState::Running
        } else if self.queued > 0 {
            LiveState::Queued
        } else if self.retry_at.is_some() {
            LiveState::RetryPending
        } else if !self.job.enabled {
            LiveState::Disabled
        } else if self.paused {
            LiveState::Paused
        } else {
            LiveState::Idle
        }
    }
}

impl Engine {
    /// Every job of the file in file order, as the live views see it.
    pub fn job_views(&self) -> impl Iterator<Item = JobView<'_>> + '_ {
        self.order.iter().filter_map(|name| self.job_view(name))
    }

    /// Every job of the file with its place in file order, in *name*
    /// order: one walk of the job map beside the paused set (both sorted
    /// by name), so no job is looked up by its name. For answers whose
    /// order is decided by their own keys (counts, bounded pages), where
    /// [`Engine::job_views`]' lookup per job is most of a 100,000-job
    /// pass.
    pub fn job_views_indexed(&self) -> impl Iterator<Item = (usize, JobView<'_>)> + '_ {
        let mut paused = self.paused.iter().peekable();
        self.jobs.values().filter_map(move |s| {
            // Both walks go up by name: skip paused names with no job.
            while paused.next_if(|p| p.as_str() < &*s.name).is_some() {}
            let is_paused = paused.next_if(|p| p.as_str() == &*s.name).is_some();
            (!s.removed).then(|| (s.position, self.view_of(s, is_paused)))
        })
    }

    /// One job as the live views see it.
    pub fn job_view(&self, name: &str) -> Option<JobView<'_>> {
        let s = self.jobs.get(name)?;
        if s.removed {
            return None;
        }
        Some(self.view_of(s, self.paused.contains(name)))
    }

    fn view_of<'a>(&'a self, s: &'a JobState, paused: bool) -> JobView<'a> {
        JobView {
            name: &s.name,
            job: &s.def,
            paused,
            next_fire: s.next.and_then(|id| match self.heap.get(id) {
                Some(Due::Occurrence { at, .. }) => Some(*at),
                _ => None,
            }),
            retry_at: s.retry.and_then(|id| self.heap.due_of(id)),
            running: s.active.saturating_sub(s.queued) + s.elsewhere as usize,
            queued: s.queued + s.waiting.len(),
            consecutive_failures: s.consecutive_failures,
            summary: &s.summary,
        }
    }

    /// The number of jobs of the file.
    pub fn job_count(&self) -> usize {
        self.order.len()
    }

    /// The first jobs of the file in file order, from `from`: for a page
    /// in file order, which reads only the jobs it shows.
    pub fn job_views_from(&self, from: usize) -> impl Iterator<Item = (usize, JobView<'_>)> + '_ {
        self.order
            .iter()
            .enumerate()
            .skip(from)
            .filter_map(|(i, name)| self.job_view(name).map(|v| (i, v)))
    }

    /// Feeds a history record the daemon writes to its job's summary.
    /// Returns whether a summary changed (the record was a job's final
    /// run or missed occurrences).
    pub fn observe(&mut self, rec: &Record) -> bool {
        let Some(name) = rec.job.as_deref() else {
            return false;
        };
        let Some(s) = self.jobs.get_mut(name) else {
            return false;
        };
        let before = s.summary.clone();
        s.summary.observe(rec);
        s.summary != before
    }

    /// A final run another node of the cluster ended: its summary as
    /// [`Engine::observe`], and the job's last run and failure streak, so
    /// that the failing jobs and streaks the live views show (and the
    /// streak a failure alert counts) are the cluster's, not this node's
    /// share of its runs. Ends arrive late and out of order with this
    /// node's own: an end newer than the last run known replaces it; an
    /// older failure still lengthens the streak when no success is known
    /// after it (the streak it belongs to is the current one).
    pub fn observe_peer(&mut self, rec: &Record) -> bool {
        let mut changed = self.observe(rec);
        let (Event::Run, Some(name), Some(status), Some(ended)) =
            (rec.event, rec.job.as_deref(), rec.status, rec.ended)
        else {
            return changed;
        };
        if !status.is_final() || status == RunStatus::Skipped {
            return changed;
        }
        let Some(s) = self.jobs.get_mut(name) else {
            return changed;
        };
        let newer = s.last.as_ref().is_none_or(|l| ended > l.ended);
        if newer {
            match status {
                RunStatus::Succeeded => s.consecutive_failures = 0,
                st if st.is_failure() => s.consecutive_failures += 1,
                _ => {}
            }
            let started = rec.started.unwrap_or(ended);
            s.last = Some(LastRun {
                run: rec.run.clone().unwrap_or_default(),
                status,
                ended,
                duration: (ended - started).to_std().unwrap_or_default(),
                exit_code: rec.exit_code,
            });
            changed = true;
        } else if status.is_failure()
            && s.consecutive_failures > 0
            && s.summary.last_success().is_none_or(|ok| ok < ended)
        {
            s.consecutive_failures += 1;
            changed = true;
        }
        changed
    }

    /// How many runs of `job` other nodes of the cluster have in progress,
    /// as the node's last look saw: the live views show a job running
    /// elsewhere as running, its state, counts and `state = running`
    /// filter alike. The caller tells only the jobs whose count changed
    /// (each call marks the job for the live index).
    pub fn set_elsewhere(&mut self, job: &str, running: u32) {
        if let Some(s) = self.jobs.get_mut(job) {
            s.elsewhere = running;
        }
    }

    /// A job's last run another node ended before this node started, and
    /// the cluster's failure streak then: taken where newer than the last
    /// run this node knows (its own, from its history), as
    /// [`Engine::observe_peer`] takes an end, the streak the store's.
    pub fn seed_peer(&mut self, rec: &Record, streak: u32) -> bool {
        let (Some(name), Some(ended)) = (rec.job.as_deref(), rec.ended) else {
            return false;
        };
        let known = self
            .jobs
            .get(name)
            .map(|s| s.last.as_ref().map(|l| l.ended));
        match known {
            None => return false,
            Some(Some(last)) if last >= ended => return false,
            Some(_) => {}
        }
        self.observe_peer(rec);
        if let Some(s) = self.jobs.get_mut(name) {
            s.consecutive_failures = streak;
        }
        true
    }

    /// Seeds a job's summary from the start-up's scan of the history.
    pub fn seed_summary(
        &mut self,
        name: &str,
        last: Option<&Record>,
        last_success: Option<DateTime<Utc>>,
    ) {
        if let Some(s) = self.jobs.get_mut(name) {
            s.summary.seed(last, last_success);
        }
    }
}

/// A run in progress as the live views list it.
#[derive(Debug, Clone, Copy)]
pub struct RunView<'a> {
    pub run: &'a str,
    pub source: &'a Source,
    pub pid: Option<u32>,
    pub since: Option<DateTime<Utc>>,
}

impl Engine {
    /// The runs handed to the daemon and not ended, in no order.
    pub fn run_views(&self) -> impl Iterator<Item = RunView<'_>> + '_ {
        self.runs.iter().map(|(id, a)| RunView {
            run: id,
            source: &a.pending.source,
            pid: a.started.map(|s| s.pid),
            since: a.started.map(|s| s.at),
        })
    }

    /// The source of `run` if it waits to start: for a slot (the shares'
    /// queues) or for its job's previous run (`overlap = "queue"`). One
    /// pass over the jobs' queues, like the overview a subscription
    /// starts with.
    pub fn queued_run(&self, run: &str) -> Option<&Source> {
        let mut waiting = self
            .shares
            .runs()
            .chain(self.jobs.values().flat_map(|s| s.waiting.iter()));
        waiting.find(|p| p.run == run).map(|p| &p.source)
    }
}
