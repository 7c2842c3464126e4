//! Alerts for what did not happen (`alert.*` of a job): each is raised
//! once and resolved once, as an [`Action::Alert`]. Deadlines are entries
//! of the engine's own heap ([`Due::Alert`]), so the daemon's timer wakes
//! for them as for an occurrence: no polling.
//!
//! | kind | armed | raised | resolved |
//! |---|---|---|---|
//! | `late` | when an occurrence comes due (or is found passed at start or after a clock step) | its deadline passes and no run of the job started since its due instant | a run of the job starts |
//! | `running_over` | when a run starts (fixed, or N× the p95 of its last successful durations) | the run still runs at its deadline | the runs over the limit have ended |
//! | `no_success_within` | at start, when the job is added, at each success | the deadline passes without a success | a success |
//! | `failures` | — | the Nth failure in a row | a success |
//!
//! A job's alert state lives in its `JobState` and so survives a reload
//! that keeps the job; a changed job keeps what still applies (a kind no
//! longer armed is resolved), a removed job's raised alerts are resolved.

use super::*;
use crate::alert::{AlertEvent, AlertKind, AlertRules, AlertState, Durations};

/// A job's alert state, allocated only for jobs with alerts armed (or
/// raised).
#[derive(Debug, Default)]
pub(super) struct JobAlerts {
    /// Kinds raised and not yet resolved (a bit per kind).
    raised: u8,
    /// The due instant watched for `late`, and its deadline's heap entry
    /// (None while raised: the due instant stays for the overdue gauge).
    late_due: Option<DateTime<Utc>>,
    late_entry: Option<EntryId>,
    /// Why the watched instant was not run, when the engine knows it
    /// before the deadline (the daemon was not running then).
    late_cause: Option<&'static str>,
    /// The latest start of a run of the job.
    last_start: Option<DateTime<Utc>>,
    /// The last success, else when the job was first seen (start, reload).
    since_success: Option<DateTime<Utc>>,
    no_success_entry: Option<EntryId>,
    /// Successful runs' durations, for `running_over = "Nx p95"`.
    durations: Durations,
}

impl JobAlerts {
    fn is_raised(&self, kind: AlertKind) -> bool {
        self.raised & kind.bit() != 0
    }
}

/// What `rea status` and the metrics show of a job's alerts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertStatus {
    pub job: String,
    /// Kinds armed by the job's rules.
    pub armed: Vec<AlertKind>,
    /// Kinds raised now.
    pub raised: Vec<AlertKind>,
    /// The due instant of its oldest occurrence not started, while watched
    /// for `late` (the overdue gauge counts from it).
    pub overdue_since: Option<DateTime<Utc>>,
}

fn rules(def: &Job) -> &AlertRules {
    &def.extras().alert
}

fn armed(r: &AlertRules) -> Vec<AlertKind> {
    let mut v = Vec::new();
    if r.late.is_some() {
        v.push(AlertKind::Late);
    }
    if r.running_over.is_some() {
        v.push(AlertKind::RunningOver);
    }
    if r.no_success_within.is_some() {
        v.push(AlertKind::NoSuccessWithin);
    }
    if r.failures.is_some() {
        v.push(AlertKind::Failures);
    }
    v
}

fn kinds(bits: u8) -> Vec<AlertKind> {
    AlertKind::ALL
        .into_iter()
        .filter(|k| bits & k.bit() != 0)
        .collect()
}

fn secs(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// How long from `from` to `to` as a person reads it (`3m10s`; nothing
/// when `to` is not after `from`).
fn took(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    crate::duration::format((to - from).to_std().unwrap_or_default())
}

/// Why `late` is resolved: a run started, this long after `due`.
fn started_after(due: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!(
        "started {} after its due instant {}",
        took(due, now),
        secs(due)
    )
}

/// Whether the heap entry `id` that came due is the deadline `entry`
/// waits for; if so the deadline is spent and cleared. An entry that was
/// moved or cancelled since comes due under an old id and is ignored.
fn came_due(entry: &mut Option<EntryId>, id: EntryId) -> bool {
    let current = *entry == Some(id);
    if current {
        *entry = None;
    }
    current
}

impl Engine {
    /// Every job's alerts that are armed or raised, in file order.
    pub fn alert_status(&self) -> Vec<AlertStatus> {
        self.order
            .iter()
            .filter_map(|name| {
                let s = self.jobs.get(name)?;
                let a = s.alerts.as_deref();
                let armed = armed(rules(&s.def));
                let raised = a.map_or(0, |a| a.raised);
                if armed.is_empty() && raised == 0 {
                    return None;
                }
                Some(AlertStatus {
                    job: name.to_string(),
                    armed,
                    raised: kinds(raised),
                    overdue_since: a.and_then(|a| a.late_due),
                })
            })
            .collect()
    }

    /// Raises or resolves `kind` of `name` (once: a change to the state it
    /// is already in is nothing).
    #[allow(clippy::too_many_arguments)]
    fn set_alert(
        &mut self,
        name: &str,
        kind: AlertKind,
        state: AlertState,
        reason: String,
        due: Option<DateTime<Utc>>,
        run: Option<&str>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(s) = self.jobs.get_mut(name) else {
            return;
        };
        let a = s.alerts.get_or_insert_with(Box::default);
        let raised = a.is_raised(kind);
        match state {
            AlertState::Raised if !raised => a.raised |= kind.bit(),
            AlertState::Resolved if raised => a.raised &= !kind.bit(),
            _ => return,
        }
        out.push(Action::Alert(Box::new(AlertNotice {
            job: s.def.clone(),
            event: AlertEvent {
                job: name.to_string(),
                kind,
                state,
                reason,
                at: now,
                due,
                run: run.map(str::to_string),
            },
        })));
    }

    /// The job's alert state, created if its rules arm any alert.
    fn alerts_of(&mut self, name: &str) -> Option<&mut JobAlerts> {
        let s = self.jobs.get_mut(name)?;
        if s.alerts.is_none() && !rules(&s.def).any() {
            return None;
        }
        Some(s.alerts.get_or_insert_with(Box::default))
    }

    /// The job is first seen (start, or added by a reload): `no_success_within`
    /// counts from now.
    pub(super) fn alerts_job_seen(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(a) = self.alerts_of(name) else {
            return;
        };
        a.since_success.get_or_insert(now);
        self.arm_no_success(name, now);
    }

    /// (Re)arms the `no_success_within` deadline from the last success.
    fn arm_no_success(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(s) = self.jobs.get_mut(name) else {
            return;
        };
        let limit = rules(&s.def).no_success_within;
        let active = s.def.enabled && !s.removed;
        let job = s.name.clone();
        let Some(a) = s.alerts.as_deref_mut() else {
            return;
        };
        if let Some(id) = a.no_success_entry.take() {
            self.heap.cancel(id);
        }
        let (Some(limit), true, false) = (limit, active, a.is_raised(AlertKind::NoSuccessWithin))
        else {
            return;
        };
        let since = *a.since_success.get_or_insert(now);
        a.no_success_entry = Some(self.heap.insert(
            later(since, limit),
            Due::Alert {
                job,
                kind: AlertKind::NoSuccessWithin,
                run: None,
            },
        ));
    }

    /// An occurrence of `name` due at `due` has come (or was found passed,
    /// with `cause` known): watch it for `late` unless one is watched or
    /// raised already.
    pub(super) fn alerts_due(
        &mut self,
        name: &str,
        due: DateTime<Utc>,
        cause: Option<&'static str>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(s) = self.jobs.get(name) else {
            return;
        };
        let Some(limit) = rules(&s.def).late else {
            return;
        };
        let job = s.name.clone();
        let Some(a) = self.alerts_of(name) else {
            return;
        };
        if a.late_due.is_some() || a.is_raised(AlertKind::Late) {
            return;
        }
        a.late_due = Some(due);
        a.late_cause = cause;
        let deadline = later(due, limit);
        if deadline <= now {
            self.late_deadline(name, now, out);
            return;
        }
        let id = self.heap.insert(
            deadline,
            Due::Alert {
                job,
                kind: AlertKind::Late,
                run: None,
            },
        );
        if let Some(a) = self.alerts_of(name) {
            a.late_entry = Some(id);
        }
    }

    /// A heap entry of an alert came due.
    pub(super) fn on_alert_due(
        &mut self,
        name: &str,
        kind: AlertKind,
        run: Option<&str>,
        id: EntryId,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        match kind {
            AlertKind::Late => {
                let Some(a) = self.alerts_of(name) else {
                    return;
                };
                if !came_due(&mut a.late_entry, id) {
                    return;
                }
                self.late_deadline(name, now, out);
            }
            AlertKind::NoSuccessWithin => {
                let Some(s) = self.jobs.get_mut(name) else {
                    return;
                };
                let limit = rules(&s.def).no_success_within;
                let Some(a) = s.alerts.as_deref_mut() else {
                    return;
                };
                if !came_due(&mut a.no_success_entry, id) {
                    return;
                }
                let (Some(limit), Some(since)) = (limit, a.since_success) else {
                    return;
                };
                let reason = format!(
                    "no successful run within {} (none since {})",
                    crate::duration::format(limit),
                    secs(since)
                );
                self.set_alert(
                    name,
                    AlertKind::NoSuccessWithin,
                    AlertState::Raised,
                    reason,
                    None,
                    None,
                    now,
                    out,
                );
            }
            AlertKind::RunningOver => {
                let Some(run) = run else {
                    return;
                };
                let Some(active) = self.runs.get_mut(run) else {
                    return;
                };
                if !came_due(&mut active.over_entry, id) {
                    return;
                }
                active.over = true;
                let since = active.started.map_or(active.pending.ready_at, |s| s.at);
                let limit = self
                    .jobs
                    .get(name)
                    .and_then(|s| {
                        let r = rules(&s.def).running_over?;
                        let a = s.alerts.as_deref()?;
                        Some(r.describe_with(&a.durations))
                    })
                    .unwrap_or_default();
                let reason = format!(
                    "run {run} still running after {} (started {}; limit {limit})",
                    took(since, now),
                    secs(since),
                );
                self.set_alert(
                    name,
                    AlertKind::RunningOver,
                    AlertState::Raised,
                    reason,
                    None,
                    Some(run),
                    now,
                    out,
                );
            }
            AlertKind::Failures => {}
        }
    }

    /// The `late` deadline of the watched due instant passed with no run
    /// started since it.
    fn late_deadline(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(s) = self.jobs.get(name) else {
            return;
        };
        let (Some(limit), Some(a)) = (rules(&s.def).late, s.alerts.as_deref()) else {
            return;
        };
        let Some(due) = a.late_due else {
            return;
        };
        if a.last_start.is_some_and(|t| t >= due) {
            return;
        }
        let why = if let Some(cause) = a.late_cause {
            cause.to_string()
        } else if self.paused.contains(name) {
            "the job is paused".to_string()
        } else if s.queued > 0 {
            "its run is waiting for a free slot (max_concurrent)".to_string()
        } else if s.active > 0 && !s.waiting.is_empty() {
            "its run waits for the previous run to end".to_string()
        } else if s.active > 0 {
            format!(
                "the previous run is still running (overlap = \"{}\")",
                s.def.overlap.as_str()
            )
        } else if let Arbiter::Store(_) = self.arbiter {
            "no node of the cluster started it".to_string()
        } else {
            "no run was started".to_string()
        };
        let reason = format!(
            "not started within {} of its due instant {}: {why}",
            crate::duration::format(limit),
            secs(due)
        );
        self.set_alert(
            name,
            AlertKind::Late,
            AlertState::Raised,
            reason,
            Some(due),
            None,
            now,
            out,
        );
    }

    /// A run of `name` starts (or, in cluster mode, started on another
    /// node): `late` is resolved.
    pub(super) fn alerts_run_started(
        &mut self,
        name: &str,
        run: Option<&str>,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(a) = self
            .jobs
            .get_mut(name)
            .and_then(|s| s.alerts.as_deref_mut())
        else {
            return;
        };
        a.last_start = Some(now);
        let due = a.late_due.take();
        a.late_cause = None;
        if let Some(id) = a.late_entry.take() {
            self.heap.cancel(id);
        }
        let raised = a.is_raised(AlertKind::Late);
        // Cluster mode: another node's engine may have raised it (this one
        // lost those claims); the store tells the resolve once, if any
        // node raised it.
        let store = matches!(self.arbiter, Arbiter::Store(_));
        if store && !raised {
            // Only once the deadline has passed can a node have raised it.
            let def = self.jobs.get(name).map(|s| s.def.clone());
            let limit = def.as_ref().and_then(|d| rules(d).late);
            if let (Some(due), Some(limit)) = (due, limit) {
                if let Some(def) = def.filter(|_| later(due, limit) <= now) {
                    out.push(Action::Alert(Box::new(AlertNotice {
                        job: def,
                        event: AlertEvent {
                            job: name.to_string(),
                            kind: AlertKind::Late,
                            state: AlertState::Resolved,
                            reason: started_after(due, now),
                            at: now,
                            due: Some(due),
                            run: run.map(str::to_string),
                        },
                    })));
                }
            }
            return;
        }
        if raised {
            let due = due.unwrap_or(now);
            let reason = started_after(due, now);
            self.set_alert(
                name,
                AlertKind::Late,
                AlertState::Resolved,
                reason,
                Some(due),
                run,
                now,
                out,
            );
        }
    }

    /// Cluster mode: another node took the occurrence of `name` at
    /// `scheduled` (`ClaimOutcome::Lost`). Whether it started is that
    /// node's to know: this node stops watching it. A `late` it raised
    /// stays raised here until it starts a run itself (the store holds
    /// who told it; the node that starts a run, having raised it too,
    /// tells the resolve).
    pub(super) fn alerts_taken_elsewhere(&mut self, name: &str, scheduled: DateTime<Utc>) {
        let Some(a) = self
            .jobs
            .get_mut(name)
            .and_then(|s| s.alerts.as_deref_mut())
        else {
            return;
        };
        if a.late_due.is_some_and(|due| due <= scheduled) {
            a.late_due = None;
            a.late_cause = None;
            if let Some(id) = a.late_entry.take() {
                self.heap.cancel(id);
            }
        }
    }

    /// The run `run` of `name` was handed to the daemon: arm its
    /// `running_over` deadline.
    pub(super) fn alerts_arm_run(&mut self, name: &str, run: &str, now: DateTime<Utc>) {
        let Some(s) = self.jobs.get(name) else {
            return;
        };
        let Some(r) = rules(&s.def).running_over else {
            return;
        };
        let durations = s.alerts.as_deref().map(|a| &a.durations);
        let Some(limit) = r.limit(durations.unwrap_or(&Durations::default())) else {
            return;
        };
        let job = s.name.clone();
        let id = self.heap.insert(
            later(now, limit),
            Due::Alert {
                job,
                kind: AlertKind::RunningOver,
                run: Some(run.into()),
            },
        );
        if let Some(active) = self.runs.get_mut(run) {
            active.over_entry = Some(id);
        }
    }

    /// A run of `name` ended with `status`: `running_over`, `failures` and
    /// `no_success_within` follow.
    pub(super) fn alerts_run_ended(
        &mut self,
        name: &str,
        active: &Active,
        status: RunStatus,
        rec: &Record,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if let Some(id) = active.over_entry {
            self.heap.cancel(id);
        }
        let run = active.pending.run.as_str();
        let Some(s) = self.jobs.get(name) else {
            return;
        };
        let failures_limit = rules(&s.def).failures;
        let relative = matches!(
            rules(&s.def).running_over,
            Some(crate::alert::RunningOver::P95 { .. })
        );
        let streak = s.consecutive_failures;
        let Some(a) = self.alerts_of(name) else {
            return;
        };
        let running_over = a.is_raised(AlertKind::RunningOver);
        let success = status == RunStatus::Succeeded;
        if success {
            // Kept only where a relative limit reads them.
            if let (Some(d), true) = (rec.duration_ms, relative) {
                a.durations.push(Duration::from_millis(d));
            }
            a.since_success = Some(now);
        }
        if running_over && active.over {
            let still = self
                .runs
                .values()
                .any(|r| r.over && r.pending.source.name() == name);
            if !still {
                let reason = format!("run {run} ended ({})", status.as_str());
                self.set_alert(
                    name,
                    AlertKind::RunningOver,
                    AlertState::Resolved,
                    reason,
                    None,
                    Some(run),
                    now,
                    out,
                );
            }
        }
        if success {
            let reason = format!("run {run} succeeded");
            for kind in [AlertKind::NoSuccessWithin, AlertKind::Failures] {
                self.set_alert(
                    name,
                    kind,
                    AlertState::Resolved,
                    reason.clone(),
                    None,
                    Some(run),
                    now,
                    out,
                );
            }
            self.arm_no_success(name, now);
        } else if let Some(n) = failures_limit {
            if streak >= n {
                let how = match (rec.exit_code, rec.signal) {
                    (Some(c), _) => format!("exit code {c}"),
                    (_, Some(sig)) => format!("signal {sig}"),
                    _ => rec.reason.clone().unwrap_or_else(|| status.as_str().into()),
                };
                let reason = format!(
                    "{streak} consecutive failures (alert.failures = {n}); the last: run {run}, {} ({how})",
                    status.as_str()
                );
                self.set_alert(
                    name,
                    AlertKind::Failures,
                    AlertState::Raised,
                    reason,
                    None,
                    Some(run),
                    now,
                    out,
                );
            }
        }
    }

    /// A reload changed the job's definition: kinds no longer armed are
    /// resolved, deadlines follow the new limits.
    pub(super) fn alerts_changed(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(s) = self.jobs.get_mut(name) else {
            return;
        };
        let r = rules(&s.def).clone();
        let Some(a) = s.alerts.as_deref_mut() else {
            self.alerts_job_seen(name, now);
            return;
        };
        if r.late.is_none() {
            a.late_due = None;
            if let Some(id) = a.late_entry.take() {
                self.heap.cancel(id);
            }
        } else if let (Some(due), Some(id)) = (a.late_due, a.late_entry.take()) {
            // The watched instant keeps its place, its deadline moves.
            self.heap.cancel(id);
            a.late_due = None;
            let cause = a.late_cause;
            self.alerts_due(name, due, cause, now, out);
        }
        let armed = armed(&r);
        for kind in AlertKind::ALL {
            if !armed.contains(&kind) {
                self.set_alert(
                    name,
                    kind,
                    AlertState::Resolved,
                    format!("alert.{} is no longer set for the job", kind.as_str()),
                    None,
                    None,
                    now,
                    out,
                );
            }
        }
        self.alerts_job_seen(name, now);
    }

    /// The job left the job file: its raised alerts are resolved.
    pub(super) fn alerts_retired(&mut self, name: &str, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let Some(a) = self
            .jobs
            .get_mut(name)
            .and_then(|s| s.alerts.as_deref_mut())
        else {
            return;
        };
        for id in [a.late_entry.take(), a.no_success_entry.take()]
            .into_iter()
            .flatten()
        {
            self.heap.cancel(id);
        }
        a.late_due = None;
        for kind in AlertKind::ALL {
            self.set_alert(
                name,
                kind,
                AlertState::Resolved,
                "the job left the job file".to_string(),
                None,
                None,
                now,
                out,
            );
        }
    }
}

impl crate::alert::RunningOver {
    /// The limit as configured, with its value now for a relative one.
    fn describe_with(&self, durations: &Durations) -> String {
        match (self, self.limit(durations)) {
            (crate::alert::RunningOver::P95 { .. }, Some(l)) => {
                format!("{} = {}", self.describe(), crate::duration::format(l))
            }
            _ => self.describe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_comes_due_once_and_a_moved_one_not_at_all() {
        let mut heap = crate::due_queue::DueQueue::new();
        let t = DateTime::from_timestamp(0, 0).unwrap();
        let (old, new) = (heap.insert(t, ()), heap.insert(t, ()));
        // The deadline was moved: the old entry coming due is ignored.
        let mut entry = Some(new);
        assert!(!came_due(&mut entry, old));
        assert_eq!(entry, Some(new));
        assert!(came_due(&mut entry, new));
        assert_eq!(entry, None, "spent");
        assert!(!came_due(&mut entry, new), "once");
    }

    #[test]
    fn reasons_say_how_late_in_words() {
        let due = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let now = due + chrono::Duration::seconds(190);
        assert_eq!(
            started_after(due, now),
            "started 3m10s after its due instant 2027-01-15T08:00:00Z"
        );
        assert_eq!(took(now, due), "0s", "never negative");
    }
}
