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
//!
//! A failure is what the engine retries and counts: `failed` and
//! `timed_out`. A run killed by a shutdown or by `overlap = "replace"`, or
//! interrupted by a daemon's death, is not the command failing. Disabled
//! jobs are left out (they do not run); paused ones are not (pausing does
//! not fix them).

use std::process::ExitCode;

use crate::failure::CommandResult;
use rea_proto::protocol::StatusReply;

/// The probe's verdict, worst wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    Ok = 0,
    Warning = 1,
    Critical = 2,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Warning => "WARNING",
            Verdict::Critical => "CRITICAL",
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
    matches!(status, "failed" | "timed_out")
}

/// The jobs of a live answer whose last run failed.
fn failing_live(data: &StatusReply) -> Vec<Failing> {
    data.jobs
        .iter()
        .filter(|j| j.enabled)
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

/// The probe over a running daemon's answer.
pub(crate) fn live(data: &StatusReply) -> CommandResult {
    let failing = failing_live(data);
    let enabled = data.jobs.iter().filter(|j| j.enabled).count();
    let mut notes = Vec::new();
    let mut verdict = Verdict::Ok;
    if !failing.is_empty() {
        verdict = Verdict::Critical;
        notes.push(failing_text(&failing, enabled));
    }
    if let Some(err) = &data.daemon.config_error {
        verdict = verdict.max(Verdict::Warning);
        notes.push(format!(
            "the job file is invalid ({} error{}); the daemon runs the last good one",
            err.errors.len(),
            if err.errors.len() == 1 { "" } else { "s" }
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
        notes.push(format!("{} job{}, none failing", enabled, plural(enabled)));
    }
    report(verdict, &notes)
}

/// The probe in cluster mode, from the database: CRITICAL when no node is
/// live or a job's last run (on whichever node) failed; WARNING when a
/// node's job definitions differ from the others'.
pub(crate) fn cluster(st: &rea_pg::ClusterStatus) -> CommandResult {
    let failing: Vec<Failing> = st
        .jobs
        .iter()
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
