//! `rea status --check`: the monitoring probe. One line on standard output
//! and the exit status of the Nagios plugin convention, which Icinga,
//! Zabbix's and Sensu's check runners and most home-made cron'd checks
//! read the same way:
//!
//! | exit | word | when |
//! |---|---|---|
//! | 0 | OK | the daemon runs and no job's last run failed |
//! | 1 | WARNING | no job is failing, but the daemon keeps an older job file because the new one is invalid, or its history writes fail |
//! | 2 | CRITICAL | a job's last run failed or timed out (its failure streak is not over), or no daemon runs for the state directory |
//! | 3 | UNKNOWN | the caller cannot see the jobs it asks about (a user with no jobs of her own, or asking for the system's) |
//!
//! Whose jobs count: a user's probe counts her own jobs; root's (and a
//! `[daemon] monitor_group` member's) counts the system tenant's by
//! default, says how the users' jobs fare beside it without counting them,
//! and `--tenant NAME` or `--tenant all` chooses otherwise. So a user's
//! failing job never pages whoever watches the system.
//!
//! A failure is what the engine retries and counts: `failed`,
//! `timed_out` and `oom_killed`. A run killed by a shutdown or by `overlap = "replace"`, or
//! interrupted by a daemon's death, is not the command failing. Disabled
//! jobs are left out (they do not run); paused ones are not (pausing does
//! not fix them).

use std::process::ExitCode;

use crate::failure::CommandResult;
use rea_core::tenant::Tenant;
use rea_proto::protocol::{JobInfo, StatusReply};

/// The probe's verdict, worst wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    Ok = 0,
    Warning = 1,
    Critical = 2,
    Unknown = 3,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Warning => "WARNING",
            Verdict::Critical => "CRITICAL",
            Verdict::Unknown => "UNKNOWN",
        }
    }
}

/// A job whose last run failed, as the summary names it.
pub(crate) struct Failing {
    pub(crate) name: String,
    pub(crate) status: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) streak: u64,
}

impl Failing {
    fn describe(&self) -> String {
        let mut parts = vec![self.status.clone()];
        if let Some(c) = self.exit_code {
            parts.push(format!("exit {c}"));
        }
        if self.streak > 1 {
            parts.push(format!("{} in a row", self.streak));
        }
        format!("{} ({})", self.name, parts.join(", "))
    }
}

/// Whether a final status is a failure in the probe's sense.
pub(crate) fn is_failure(status: &str) -> bool {
    matches!(status, "failed" | "timed_out" | "oom_killed")
}

/// The jobs of a live answer whose last run failed.
fn failing_live<'a>(jobs: impl Iterator<Item = &'a JobInfo>) -> Vec<Failing> {
    jobs.filter(|j| j.enabled)
        .filter_map(|j| {
            let last = j.last.as_ref();
            let failed = last.is_some_and(|l| is_failure(&l.status));
            (failed || j.consecutive_failures > 0).then(|| Failing {
                name: j.name.clone(),
                status: last.map_or_else(|| "failed".to_string(), |l| l.status.clone()),
                exit_code: last.and_then(|l| l.exit_code),
                streak: u64::from(j.consecutive_failures),
            })
        })
        .collect()
}

/// Which tenants' jobs a probe counts: `--tenant` (`system`, a user's
/// name, or `all`), the system's by default.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counted<'a> {
    All,
    One(Tenant<'a>),
}

impl<'a> Counted<'a> {
    pub(crate) fn from_arg(arg: Option<&'a str>) -> Counted<'a> {
        match arg {
            None | Some("system") => Counted::One(Tenant::System),
            Some("all") => Counted::All,
            Some(user) => Counted::One(Tenant::User(user)),
        }
    }

    fn counts(&self, name: &str) -> bool {
        self.includes(Tenant::of(name))
    }

    fn includes(&self, tenant: Tenant<'_>) -> bool {
        match self {
            Counted::All => true,
            Counted::One(t) => tenant == *t,
        }
    }

    fn whose(&self) -> String {
        match self {
            Counted::All => "every tenant's".to_string(),
            Counted::One(Tenant::System) => "the system's".to_string(),
            Counted::One(Tenant::User(u)) => format!("{u}'s"),
        }
    }
}

/// The tenant whose file a refusal (`PATH:LINE:COL: …`) is about: a
/// user's file is `users/NAME.toml`.
fn refusal_tenant(error: &str) -> Tenant<'_> {
    let path = error.split(':').next().unwrap_or("");
    let user = path
        .rsplit_once("/users/")
        .and_then(|(_, file)| file.strip_suffix(".toml"));
    user.map_or(Tenant::System, Tenant::User)
}

/// The probe over a running daemon's answer; `tenant` is `--tenant`.
pub(crate) fn live(data: &StatusReply, tenant: Option<&str>) -> CommandResult {
    let errors = data
        .daemon
        .config_error
        .as_ref()
        .map_or(&[][..], |e| e.errors.as_slice());
    // A user's answer holds her jobs only, named as she names them.
    if let Some(me) = &data.tenant {
        if let Some(other) = tenant.filter(|t| t != me) {
            return report(
                Verdict::Unknown,
                &[format!(
                    "{other}'s jobs are not {me}'s to see (root, or a member of [daemon] monitor_group, may check them)"
                )],
            );
        }
        if data.jobs.is_empty() {
            return report(
                Verdict::Unknown,
                &[format!(
                    "{me} has no jobs here, and the system's are not {me}'s to see (root, or a member of [daemon] monitor_group, may check them)"
                )],
            );
        }
        let all: Vec<&JobInfo> = data.jobs.iter().collect();
        return verdict(data, &all, &[], Some(format!("{me}'s")), errors.len());
    }
    let counted = Counted::from_arg(tenant);
    let (mine, others): (Vec<&JobInfo>, Vec<&JobInfo>) =
        data.jobs.iter().partition(|j| counted.counts(&j.name));
    let broken = errors
        .iter()
        .filter(|e| counted.includes(refusal_tenant(e)))
        .count();
    // Whose jobs count goes without saying on a machine of one tenant.
    let whose = (tenant.is_some() || !others.is_empty()).then(|| counted.whose());
    verdict(data, &mine, &others, whose, broken)
}

/// The verdict over the `counted` jobs (`whose` they are, when it needs
/// saying), with `broken` refusals of their files; `others` are said, not
/// counted.
fn verdict(
    data: &StatusReply,
    counted: &[&JobInfo],
    others: &[&JobInfo],
    whose: Option<String>,
    broken: usize,
) -> CommandResult {
    let failing = failing_live(counted.iter().copied());
    let enabled = counted.iter().filter(|j| j.enabled).count();
    let whose_ = whose.as_ref().map(|w| format!("{w} ")).unwrap_or_default();
    let mut notes = Vec::new();
    let mut verdict = Verdict::Ok;
    if !failing.is_empty() {
        verdict = Verdict::Critical;
        notes.push(format!("{whose_}{}", failing_text(&failing, enabled)));
    } else if whose.is_some() {
        notes.push(format!(
            "{whose_}{enabled} job{}, none failing",
            plural(enabled)
        ));
    }
    if broken > 0 {
        verdict = verdict.max(Verdict::Warning);
        notes.push(format!(
            "the job file is invalid ({broken} error{}); the daemon runs the last good one",
            plural(broken)
        ));
    }
    let h = &data.daemon.history;
    if let Some(err) = h
        .last_error
        .as_ref()
        .filter(|_| h.backlog > 0 || h.dropped > 0)
    {
        verdict = verdict.max(Verdict::Warning);
        notes.push(format!("history writes are failing ({})", err.message));
    }
    if notes.is_empty() {
        notes.push(format!("{enabled} job{}, none failing", plural(enabled)));
    }
    // Said, not counted: how the other tenants' jobs fare.
    let elsewhere = failing_live(others.iter().copied());
    if !elsewhere.is_empty() {
        notes.push(format!(
            "not counted: {} of the other tenants' jobs failing ({}); --tenant all counts them",
            elsewhere.len(),
            elsewhere
                .iter()
                .take(3)
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    report(verdict, &notes)
}

/// The probe in cluster mode, from the database: CRITICAL when no node is
/// live or a job's last run (on whichever node) failed; WARNING when a
/// node's job definitions differ from the others'. This node's clock
/// (`clock_ms`, the database's less this machine's, when its daemon
/// measured it): WARNING past the claims' tolerance, CRITICAL past the
/// `lease`.
pub(crate) fn cluster(
    st: &rea_pg::ClusterStatus,
    tenant: Option<&str>,
    clock_ms: Option<i64>,
    lease: std::time::Duration,
) -> CommandResult {
    let counted = Counted::from_arg(tenant);
    let failing: Vec<Failing> = st
        .jobs
        .iter()
        .filter(|j| counted.counts(&j.job))
        .filter_map(|j| {
            let last = j.last.as_ref()?;
            let status = last.status?.as_str().to_string();
            is_failure(&status).then(|| Failing {
                name: j.job.clone(),
                status,
                exit_code: last.exit_code,
                streak: 1,
            })
        })
        .collect();
    let live = st.nodes.iter().filter(|n| n.state == "live").count();
    let mut notes = Vec::new();
    let mut verdict = Verdict::Ok;
    if live == 0 {
        verdict = Verdict::Critical;
        notes.push(format!("no live node in cluster {:?}", st.cluster));
    }
    if !failing.is_empty() {
        verdict = Verdict::Critical;
        notes.push(failing_text(&failing, st.jobs.len()));
    }
    let differ: Vec<&str> = st
        .nodes
        .iter()
        .filter(|n| n.differs)
        .map(|n| n.node.as_str())
        .collect();
    if !differ.is_empty() {
        verdict = verdict.max(Verdict::Warning);
        notes.push(format!("job definitions differ on {}", differ.join(", ")));
    }
    let orphaned: Vec<&str> = st
        .jobs
        .iter()
        .filter(|j| j.orphaned && counted.counts(&j.job))
        .map(|j| j.job.as_str())
        .collect();
    if !orphaned.is_empty() {
        verdict = verdict.max(Verdict::Warning);
        notes.push(format!(
            "no live node defines {} (its nodes died or left): it does not run",
            orphaned.join(", ")
        ));
    }
    if let Some(ms) = clock_ms.filter(|ms| ms.abs() > rea_store::clock::TOLERANCE_MS) {
        let past_lease = u128::from(ms.unsigned_abs()) > lease.as_millis();
        verdict = verdict.max(if past_lease {
            Verdict::Critical
        } else {
            Verdict::Warning
        });
        notes.push(format!(
            "this machine's clock is {:.3} s {} the cluster database's{}",
            ms.abs() as f64 / 1000.0,
            if ms < 0 { "ahead of" } else { "behind" },
            if past_lease {
                " (more than the lease: fix its time synchronisation)"
            } else {
                ""
            }
        ));
    }
    if notes.is_empty() {
        notes.push(format!(
            "{live} live node{}, {} job{}, none failing",
            plural(live),
            st.jobs.len(),
            plural(st.jobs.len())
        ));
    }
    report(verdict, &notes)
}

/// The probe when the cluster's database cannot be read: CRITICAL.
pub(crate) fn unreachable(why: &str) -> CommandResult {
    report(Verdict::Critical, &[why.to_string()])
}

/// The probe without a daemon: CRITICAL, with what the history says.
pub(crate) fn offline(failing: &[Failing], enabled: usize, state_dir: &str) -> CommandResult {
    let mut notes = vec![format!("no daemon runs for {state_dir}")];
    if !failing.is_empty() {
        notes.push(failing_text(failing, enabled));
    }
    report(Verdict::Critical, &notes)
}

fn failing_text(failing: &[Failing], enabled: usize) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = failing.iter().take(SHOWN).map(Failing::describe).collect();
    if failing.len() > SHOWN {
        names.push(format!("and {} more", failing.len() - SHOWN));
    }
    format!(
        "{} of {enabled} job{} failing: {}",
        failing.len(),
        plural(enabled),
        names.join(", ")
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn report(verdict: Verdict, notes: &[String]) -> CommandResult {
    println!("rea {}: {}", verdict.word(), notes.join("; "));
    Ok(ExitCode::from(verdict as u8))
}
