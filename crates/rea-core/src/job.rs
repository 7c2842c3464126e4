//! A job of the job file as the engine sees it: a name, a schedule in a
//! zone, a command, and the policies of its runs (timeout, overlap, retry,
//! catch-up, hooks, mail). Plain data with its defaults; reading it from
//! TOML is `rea-config`'s work.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::backoff::RetryPolicy;
use crate::schedule::Schedule;

/// What to do when a job is due while a previous run of it still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Record a `skipped` run and do nothing (default).
    #[default]
    Skip,
    /// Run after the current one; at most one waits.
    Queue,
    /// Start another run alongside.
    Allow,
    /// Terminate the running one (as on timeout), then start.
    Replace,
}

impl Overlap {
    /// Every policy, as the job file and the cluster's statements name it.
    pub const ALL: [(&'static str, Overlap); 4] = [
        ("skip", Overlap::Skip),
        ("queue", Overlap::Queue),
        ("allow", Overlap::Allow),
        ("replace", Overlap::Replace),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
            Overlap::Allow => "allow",
            Overlap::Replace => "replace",
        }
    }
}

/// What to do with occurrences missed while the daemon was down (or the
/// wall clock jumped forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// cron's behaviour: missed occurrences are recorded as missed, not run.
    #[default]
    None,
    /// anacron / systemd `Persistent=`: one run if any occurrence was missed.
    Once,
    /// Each missed occurrence, up to `catch_up_limit`.
    All,
}

/// One `[jobs.NAME]` table with `[defaults]` applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    /// The parsed schedule; None for a job that only runs `after` others.
    pub schedule: Option<Schedule>,
    pub command: String,
    /// Shell that runs `command` as `shell -c command`. Default `/bin/sh`.
    /// Shared: jobs that inherit it (or write the same) hold one copy.
    pub shell: Arc<str>,
    /// Zone the schedule is evaluated in. Default UTC.
    pub timezone: Tz,
    /// The zone as written (`"local"` stays `"local"` for display); shared
    /// like `shell`.
    pub timezone_name: Arc<str>,
    /// None = no timeout.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL on timeout/replace/shutdown. Default 10s.
    pub kill_grace: Duration,
    pub overlap: Overlap,
    pub retry: RetryPolicy,
    pub catch_up: CatchUp,
    /// Bound for `catch_up = "all"`. Default 10.
    pub catch_up_limit: u32,
    /// Random start delay in [0, jitter]. Default 0.
    pub jitter: Duration,
    /// defaults.env overlaid with the job's env. Shared with `[defaults]`
    /// by every job that sets no env of its own (copied on write).
    pub env: Arc<BTreeMap<String, String>>,
    /// Working directory; None = the daemon's.
    pub dir: Option<PathBuf>,
    pub tags: Vec<String>,
    pub enabled: bool,
    /// Bytes of stdout+stderr kept per run (head and tail). Default 64 KiB.
    pub output_limit: usize,
    /// Run as this user (the daemon must be root, or be this user).
    pub user: Option<String>,
    /// When the command's leader exits, stop what it left running in its
    /// process group (true, like systemd's `KillMode=control-group`), or
    /// leave it running and end the run (false, cron's way: `nohup cmd &`).
    /// Default true.
    pub kill_stragglers: bool,
    /// `description`, mail and hooks (see [`JobExtras`]); None when all
    /// have their defaults, as for most jobs. Read it with
    /// [`Job::extras`].
    pub extras: Option<Box<JobExtras>>,
    /// Run when each of these jobs has ended as its entry's `on` asks
    /// (succeeded, by default), since this job's last run so triggered.
    pub after: Vec<Dependency>,
    /// The user whose own job file this job is in (`users/NAME.toml`):
    /// that user may see, trigger, pause and edit it through the daemon,
    /// and it always runs as them. None for the system's job files.
    pub owner: Option<String>,
    /// Cluster mode: what happens to a running run when its node loses its
    /// lease. Default keep.
    pub on_lease_lost: crate::claim::OnLeaseLost,
}

/// Which end of a job's run starts the jobs that run `after` it with this
/// condition (`after = [{ job = "extract", on = "failure" }]`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum On {
    /// The run succeeded (any attempt).
    #[default]
    Success,
    /// The run failed or timed out and will not be retried: its last
    /// attempt (or its only one, without `retry`). A killed run is not a
    /// failure (someone decided it should stop), as for `on_failure`.
    Failure,
    /// The run ended, whichever way (succeeded, failed or timed out after
    /// its last attempt, killed). A skipped or missed occurrence did not
    /// run, so it starts nothing.
    Always,
}

impl On {
    /// Every condition, as the job file names it.
    pub const ALL: [(&'static str, On); 3] = [
        ("success", On::Success),
        ("failure", On::Failure),
        ("always", On::Always),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            On::Success => "success",
            On::Failure => "failure",
            On::Always => "always",
        }
    }
}

/// One entry of `after`: a job of the same file, and which end of its run
/// counts. In JSON (`rea list --json`, `rea status --json`):
/// `{"job": "extract", "on": "failure"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Dependency {
    /// The job's name (qualified with its tenant, as every name).
    pub job: String,
    #[serde(default)]
    pub on: On,
}

impl Dependency {
    /// `extract`, `extract (on failure)` or `extract (always)`: how lists
    /// and messages show it.
    pub fn shown(&self, name: &str) -> String {
        match self.on {
            On::Success => name.to_string(),
            On::Failure => format!("{name} (on failure)"),
            On::Always => format!("{name} (always)"),
        }
    }
}

/// `after` as people read it: `a, b (on failure)`.
pub fn after_text(after: &[Dependency]) -> String {
    after
        .iter()
        .map(|d| d.shown(&d.job))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fields of a job that most jobs leave unset (a description, mail,
/// hooks, limits), boxed so that a job without them does not carry ~140 bytes of
/// empty ones: a 100,000-job file is a case the daemon must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct JobExtras {
    pub description: Option<String>,
    /// Mail the run's output here through sendmail, as cron's MAILTO.
    pub mailto: Vec<String>,
    pub mail_on: MailOn,
    /// Hook commands (run with the job's shell, user, dir and env).
    pub on_failure: Option<String>,
    pub on_success: Option<String>,
    pub on_retry_exhausted: Option<String>,
    /// Hook command run when one of the job's alerts is raised or resolved
    /// (`REA_ALERT_*` in its environment).
    pub on_alert: Option<String>,
    /// What the job expects of itself (`alert` table): see [`crate::alert`].
    pub alert: crate::alert::AlertRules,
    /// A hook running longer is terminated. Default 5m.
    pub hook_timeout: Duration,
    /// What the run's cgroup and process are limited to (none by default).
    pub limits: crate::run::Limits,
    /// What a trigger may pass to a run (`params`), in the order written.
    pub params: Vec<crate::params::Param>,
    /// Webhooks and a ping (`webhook`, `ping`); None when there are none.
    pub notify: Option<Arc<crate::notify::Notify>>,
}

/// Every extra at its default.
static NO_EXTRAS: JobExtras = JobExtras {
    description: None,
    mailto: Vec::new(),
    mail_on: MailOn::Failure,
    on_failure: None,
    on_success: None,
    on_retry_exhausted: None,
    on_alert: None,
    alert: crate::alert::AlertRules::NONE,
    hook_timeout: Duration::from_secs(300),
    limits: crate::run::Limits::NONE,
    params: Vec::new(),
    notify: None,
};

impl Default for JobExtras {
    fn default() -> Self {
        NO_EXTRAS.clone()
    }
}

/// When `mailto` sends a mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailOn {
    /// A run that did not succeed (failed, timed out, killed).
    #[default]
    Failure,
    /// Every run that printed something, as cron does.
    Output,
    /// Every run.
    Always,
}

impl Job {
    /// The description, mail and hook settings (defaults when none is set).
    pub fn extras(&self) -> &JobExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// The same, to set them. A reader calls [`Job::settle`] once done, so
    /// that a job with only default extras holds none (and compares equal
    /// to one that never had them).
    pub fn extras_mut(&mut self) -> &mut JobExtras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Drops extras that are all defaults (see [`Job::extras_mut`]).
    pub fn settle(&mut self) {
        if self.extras.as_deref() == Some(&NO_EXTRAS) {
            self.extras = None;
        }
    }

    /// The names of the jobs it runs after, in the order written.
    pub fn after_names(&self) -> Vec<&str> {
        self.after.iter().map(|d| d.job.as_str()).collect()
    }

    /// The first fire strictly after `after`; None for `@reboot`, jobs
    /// without a schedule, and schedules that never fire again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after, self.timezone)
    }

    pub fn is_reboot(&self) -> bool {
        self.schedule.as_ref().is_some_and(Schedule::is_reboot)
    }

    /// The schedule as written, or `after a, b` for a dependent job.
    pub fn schedule_text(&self) -> String {
        match &self.schedule {
            Some(s) if self.after.is_empty() => s.source().to_string(),
            Some(s) => format!("{} + after {}", s.source(), after_text(&self.after)),
            None => format!("after {}", after_text(&self.after)),
        }
    }
}

/// The built-in defaults of every field (what a job gets when neither the
/// job nor `[defaults]` sets it). `name` and `command` are empty and there
/// is no schedule: a reader fills those in.
impl Default for Job {
    fn default() -> Self {
        Job {
            name: String::new(),
            schedule: None,
            command: String::new(),
            shell: "/bin/sh".into(),
            timezone: Tz::UTC,
            timezone_name: "UTC".into(),
            timeout: None,
            kill_grace: Duration::from_secs(10),
            overlap: Overlap::Skip,
            retry: RetryPolicy::default(),
            catch_up: CatchUp::None,
            catch_up_limit: 10,
            jitter: Duration::ZERO,
            env: Arc::default(),
            dir: None,
            tags: Vec::new(),
            enabled: true,
            output_limit: 64 * 1024,
            user: None,
            kill_stragglers: true,
            extras: None,
            after: Vec::new(),
            owner: None,
            on_lease_lost: crate::claim::OnLeaseLost::Keep,
        }
    }
}

/// Why a job (or one-shot) name is not allowed, phrased as a hint with a
/// corrected example; None if it is fine. Names end up in command lines
/// and file names, so they stay plain.
pub fn name_problem(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() {
        return Some(
            "names may contain only letters, digits, \"_\", \".\" and \"-\", and must not be empty"
                .to_string(),
        );
    }
    if name.chars().all(allowed) {
        return None;
    }
    let fixed: String = name
        .chars()
        .map(|c| if allowed(c) { c } else { '-' })
        .collect();
    Some(format!(
        "names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. {fixed:?}"
    ))
}

/// Why a selection of jobs (`rea pause`/`resume`: names, `--tag`, `--all`)
/// selects nothing it may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// A name that is not one of the jobs.
    UnknownJob(String),
    /// No job has the tag.
    NoTag(String),
    /// No name, tag or `--all`.
    Nothing,
}

/// The jobs a selection names, among `jobs` (those its caller may touch):
/// the names given (each must be one), then those with the tag (at least
/// one must have it), then, with `all`, every job.
pub fn select<'a>(
    jobs: impl Iterator<Item = &'a Job> + Clone,
    names: &[String],
    tag: Option<&str>,
    all: bool,
) -> Result<Vec<String>, SelectError> {
    let mut out = Vec::new();
    for n in names {
        if !jobs.clone().any(|j| &j.name == n) {
            return Err(SelectError::UnknownJob(n.clone()));
        }
        out.push(n.clone());
    }
    if let Some(tag) = tag {
        let before = out.len();
        out.extend(
            jobs.clone()
                .filter(|j| j.tags.iter().any(|t| t == tag))
                .map(|j| j.name.clone()),
        );
        if out.len() == before {
            return Err(SelectError::NoTag(tag.to_string()));
        }
    }
    if all {
        out.extend(jobs.map(|j| j.name.clone()));
    }
    if out.is_empty() && !all {
        return Err(SelectError::Nothing);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn overlap_names_round_trip() {
        for (name, o) in Overlap::ALL {
            assert_eq!(o.as_str(), name);
        }
    }

    use super::*;

    #[test]
    fn a_selection_is_names_then_a_tag_then_everything() {
        let job = |name: &str, tags: &[&str]| Job {
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..Job::default()
        };
        let jobs = [job("a", &["x"]), job("b", &[]), job("c", &["x"])];
        let sel = |names: &[&str], tag: Option<&str>, all| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            select(jobs.iter(), &names, tag, all)
        };
        assert_eq!(
            sel(&["b"], Some("x"), false),
            Ok(vec!["b".into(), "a".into(), "c".into()])
        );
        assert_eq!(
            sel(&["z"], None, false),
            Err(SelectError::UnknownJob("z".into()))
        );
        assert_eq!(
            sel(&[], Some("y"), false),
            Err(SelectError::NoTag("y".into()))
        );
        assert_eq!(sel(&[], None, false), Err(SelectError::Nothing));
        assert_eq!(sel(&[], None, true).map(|v| v.len()), Ok(3));
    }
}
