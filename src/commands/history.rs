//! `rea history`: past runs, newest first, read backwards from the log so it
//! stays fast on a huge history. Runs in progress are shown by `rea status`.

use chrono::Utc;

use rea_core::record::{Event, Record, RunStatus};
use rea_store::history::Query;

use crate::cli::{Global, HistoryArgs, StatusFilter};
use crate::failure::{self, CommandResult, Failure};
use crate::table::Table;

const FINAL: [RunStatus; 7] = RunStatus::FINAL;

pub(crate) fn run(global: &Global, args: &HistoryArgs) -> CommandResult {
    let dir = super::state_dir(global)?;
    let now = Utc::now();
    let tz = crate::time_text::zone(args.utc);
    let bound = |flag: &str, text: &Option<String>| {
        text.as_deref()
            .map(|t| crate::time_text::parse_bound(flag, t, now, tz))
            .transpose()
            .map_err(Failure::invalid)
    };
    let since = bound("--since", &args.since)?;
    let until = bound("--until", &args.until)?;
    let mut statuses: Vec<RunStatus> = Vec::new();
    let mut with_missed = false;
    let mut with_alerts = false;
    for s in &args.status {
        match s {
            StatusFilter::Started => statuses.push(RunStatus::Started),
            StatusFilter::Succeeded => statuses.push(RunStatus::Succeeded),
            StatusFilter::Failed => statuses.push(RunStatus::Failed),
            StatusFilter::TimedOut => statuses.push(RunStatus::TimedOut),
            StatusFilter::Killed => statuses.push(RunStatus::Killed),
            StatusFilter::Skipped => statuses.push(RunStatus::Skipped),
            StatusFilter::Interrupted => statuses.push(RunStatus::Interrupted),
            StatusFilter::Cancelled => statuses.push(RunStatus::Cancelled),
            StatusFilter::OomKilled => statuses.push(RunStatus::OomKilled),
            StatusFilter::Missed => with_missed = true,
            StatusFilter::Alert => with_alerts = true,
        }
    }
    if args.failed {
        statuses.extend([
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Killed,
            RunStatus::Interrupted,
            RunStatus::OomKilled,
        ]);
    }
    // `--status missed` (or `alert`) alone: an empty status list means
    // "any" to the query, so ask for every line and keep only those.
    let only_events = statuses.is_empty() && (with_missed || with_alerts);
    if statuses.is_empty() && !only_events {
        statuses.extend(FINAL);
        with_missed = true;
        with_alerts = true;
    }
    let query = Query {
        job: args.job.clone(),
        statuses,
        since,
        until,
        limit: if only_events { None } else { Some(args.limit) },
        runs_only: !only_events,
        with_missed,
        with_alerts,
        tenant: args.tenant.clone(),
    };
    let reader = super::history_reader(global, &dir)?;
    let records = reader.query(&query).map_err(|e| {
        Failure::runtime(format!(
            "cannot read the history log in {}: {e}",
            dir.display()
        ))
    })?;
    let mut records: Vec<Record> = records
        .into_iter()
        .filter(|r| {
            !only_events
                || (with_missed && r.event == Event::Missed)
                || (with_alerts && r.event == Event::Alert)
        })
        .take(args.limit)
        .collect();
    if reader.malformed() > 0 {
        eprintln!(
            "rea: note: skipped {} unreadable line(s) in the history log",
            reader.malformed()
        );
    }
    if args.json {
        for r in &records {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return failure::ok();
    }
    if records.is_empty() {
        eprintln!("rea: no matching runs in {}", dir.display());
        return failure::ok();
    }
    // The log is in the order lines were written (a run's line when it
    // ended); people read the TIME column, a run's start: newest first by
    // that, so a long run sits where it began.
    let shown = |r: &Record| r.started.unwrap_or(r.ts);
    records.sort_by_key(|r| std::cmp::Reverse(shown(r)));
    let mut table = Table::new([
        "TIME", "JOB", "RUN", "STATUS", "TRIGGER", "ATTEMPT", "DURATION", "CPU", "EXIT", "NOTE",
    ]);
    for r in &records {
        let when = shown(r);
        let status = match (r.event, r.status) {
            (Event::Missed, _) => format!("missed ×{}", r.count.unwrap_or(0)),
            (Event::Alert, _) => match r.alert {
                Some(a) => format!("alert {} {}", a.kind.as_str(), a.state.as_str()),
                None => "alert".to_string(),
            },
            (_, Some(s)) => s.as_str().to_string(),
            _ => String::new(),
        };
        let exit_text = match (r.exit_code, r.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => format!("sig {s}"),
            _ => String::new(),
        };
        table.row([
            crate::time_text::show(when, tz),
            r.job.clone().unwrap_or_default(),
            r.run.clone().unwrap_or_default(),
            status,
            r.trigger
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            r.attempt.map(|a| a.to_string()).unwrap_or_default(),
            r.duration_ms
                .map(|ms| rea_core::duration::format(std::time::Duration::from_millis(ms)))
                .unwrap_or_default(),
            cpu_text(r),
            exit_text,
            note_with_params(
                // A record from before `oom_killed` was a status says
                // `failed` or `killed` and carries the flag.
                match (
                    r.oom_killed == Some(true) && r.status != Some(RunStatus::OomKilled),
                    r.reason.as_deref(),
                ) {
                    (true, reason) => {
                        let first = reason.unwrap_or("").lines().next().unwrap_or("");
                        format!("out of memory (OOM killer) {first}")
                            .trim()
                            .to_string()
                    }
                    (_, Some(reason)) => reason.lines().next().unwrap_or("").to_string(),
                    (_, None) => waited_text(r),
                },
                r,
            ),
        ]);
    }
    print!("{}", table.render());
    failure::ok()
}

/// The NOTE column: what it says, then the run's parameters.
fn note_with_params(note: String, r: &Record) -> String {
    match (note.is_empty(), params_text(r)) {
        (_, None) => note,
        (true, Some(p)) => p,
        (false, Some(p)) => format!("{note}; {p}"),
    }
}

/// A run's parameters as `DATE=2026-11-30 REGION=eu` (a value with a
/// space, a quote or a control character quoted and escaped, so one run
/// stays one line), or None for a job that declares none.
pub(super) fn params_text(r: &Record) -> Option<String> {
    let params = r.params.as_ref().filter(|p| !p.is_empty())?;
    let shown = |v: &str| {
        if v.is_empty()
            || v.chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '"')
        {
            format!("{v:?}")
        } else {
            v.to_string()
        }
    };
    Some(
        params
            .iter()
            .map(|(k, v)| format!("{k}={}", shown(v)))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// What a run waited for before it started, if it waited for a slot
/// ("waited 2s for a free slot: alice's share is full ...").
fn waited_text(r: &Record) -> String {
    match (r.waited_ms, r.waited_for.as_deref()) {
        (Some(ms), Some(what)) => format!(
            "waited {} for {what}",
            rea_core::duration::format(std::time::Duration::from_millis(ms))
        ),
        _ => String::new(),
    }
}

/// A run's CPU time (user + system), with a `*` when it is the leader's
/// rusage only (no cgroup: children it did not wait for are not in it).
pub(super) fn cpu_text(r: &Record) -> String {
    match (r.user_cpu_ms, r.sys_cpu_ms) {
        (Some(u), Some(s)) => {
            let mark = if r.cpu_from_cgroup == Some(true) {
                ""
            } else {
                "*"
            };
            format!("{:.2}s{mark}", (u + s) as f64 / 1000.0)
        }
        _ => String::new(),
    }
}
