//! `rea status [JOB]`: per job, its state, the last result, consecutive
//! failures and the next fire. Live from the daemon when one runs for the
//! state directory; otherwise the offline view, computed from the job file
//! and the history log, clearly labelled as such.
//!
//! Live, without a job named, it asks for the `overview` and the first
//! page of `jobs` (the daemon's per-job summaries, bounded answers
//! whatever the number of jobs); `--all` follows the pages' cursor to the
//! end, a page at a time. `--json` and `--check` still read the complete
//! `status` answer (every job): its schema is what scripts and probes read.

use chrono::{DateTime, SecondsFormat, Utc};
use rea_core::job::Job;
use rea_store::history::JobSummary;
use serde_json::json;

use crate::cli::{Global, StatusArgs};
use crate::failure::{self, CommandResult, Failure};
use crate::table::Table;
use rea_host::state_dir;
use rea_proto::live::{
    JobSummary as LiveJob, JobsPage, JobsQuery, Overview, RunNow, DEFAULT_PAGE, MAX_PAGE,
};
use rea_proto::protocol::{DaemonInfo, StatusReply, Ts};
use rea_proto::{Client, ClientError, Request};

pub(crate) fn run(global: &Global, args: &StatusArgs) -> CommandResult {
    if let Some(s) = super::cluster::settings(global)? {
        return super::cluster::status(global, &s, args);
    }
    let dir = super::state_dir(global)?;
    match Client::connect(&dir, global.client_timeout) {
        Ok(mut client) if args.job.is_none() && !args.json && !args.check => {
            paged(&mut client, args.all, crate::time_text::zone(args.utc))
        }
        Ok(mut client) => {
            let request = Request::Status {
                job: args.job.clone(),
            };
            let answer = super::ask::<StatusReply>(&mut client, &request)?;
            if args.check {
                return super::probe::live(&answer.data, args.tenant.as_deref());
            }
            if args.json {
                println!("{}", answer.raw);
                return failure::ok();
            }
            live(&answer.data, crate::time_text::zone(args.utc));
            failure::ok()
        }
        // No daemon: the offline view says so itself.
        Err(ClientError::NoDaemon(_)) => offline(global, args, &dir),
        Err(e) => Err(super::client_failure(e)),
    }
}

fn ago(t: Option<Ts>, now: DateTime<Utc>) -> String {
    t.map(|t| super::relative(t.0, now)).unwrap_or_default()
}

/// The overview, then the jobs a page at a time: the first page only, or
/// every page with `all`.
fn paged(client: &mut Client, all: bool, tz: chrono_tz::Tz) -> CommandResult {
    let now = Utc::now();
    let o = super::ask::<Overview>(client, &Request::Overview)?.data;
    header(&o.daemon, now);
    let c = &o.counts;
    println!(
        "jobs: {} ({} running, {} queued, {} paused, {} disabled, {} failing)",
        c.jobs, c.running, c.queued, c.paused, c.disabled, c.failing
    );
    if !o.failing.is_empty() {
        let names: Vec<String> = o
            .failing
            .iter()
            .map(|j| format!("{} ({})", j.name, j.consecutive_failures))
            .collect();
        let more = c.failing.saturating_sub(o.failing.len());
        println!(
            "failing: {}{}",
            names.join(", "),
            if more > 0 {
                format!(" and {more} more (rea status --all)")
            } else {
                String::new()
            }
        );
    }
    if let Some(first) = o.next_due.first() {
        let soon: Vec<String> = o
            .next_due
            .iter()
            .take(3)
            .map(|d| format!("{} {}", d.job, ago(Some(d.at), now)))
            .collect();
        println!(
            "next: {} ({})",
            soon.join(", "),
            crate::time_text::show(first.at.0, tz)
        );
    }
    let mut query = JobsQuery {
        limit: Some(if all { MAX_PAGE } else { DEFAULT_PAGE }),
        ..JobsQuery::default()
    };
    let mut first = true;
    let mut shown = 0usize;
    loop {
        let page = super::ask::<JobsPage>(client, &Request::Jobs(query.clone()))?.data;
        let table = rows(&page.jobs, &o.running, now);
        let text = table.render();
        // The header once; each page is aligned on its own.
        let text = if first {
            text.as_str()
        } else {
            text.split_once('\n').map_or("", |(_, rest)| rest)
        };
        print!("{text}");
        first = false;
        shown += page.jobs.len();
        match page.next {
            Some(next) if all => query.cursor = Some(next),
            Some(_) => {
                println!(
                    "... and {} more job(s): rea status --all, or rea status JOB",
                    page.matching.saturating_sub(shown)
                );
                break;
            }
            None => break,
        }
    }
    failure::ok()
}

/// A page of jobs as a table for people.
fn rows(jobs: &[LiveJob], running: &[RunNow], now: DateTime<Utc>) -> Table {
    let mut table = Table::new(["JOB", "STATE", "LAST", "WHEN", "FAILS", "NEXT", "RECENT"]);
    for j in jobs {
        let state = match j.state.as_str() {
            "running" => match running.iter().find(|r| r.job == j.name) {
                Some(r) => format!(
                    "running {} (pid {}{}){}",
                    ago(r.since, now).trim_end_matches(" ago"),
                    r.pid
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "null".into()),
                    used(r.cpu_ms, r.memory_peak_kb),
                    match j.running {
                        0 | 1 => String::new(),
                        n => format!(" +{} more", n - 1),
                    }
                ),
                None => "running".to_string(),
            },
            "retry_pending" => format!("retry {}", ago(j.retry_at, now)),
            "queued" => format!("queued ({})", j.queued),
            other => other.to_string(),
        };
        let state = if j.paused && !state.starts_with("paused") {
            format!("{state}, paused")
        } else {
            state
        };
        let next = if j.paused || j.state == "disabled" {
            "-".to_string()
        } else if j.next_fire.is_none() && !j.dependencies.is_empty() {
            format!("after {}", rea_core::job::after_text(&j.dependencies))
        } else if j.next_fire.is_none() && !j.after.is_empty() {
            format!("after {}", j.after.join(", "))
        } else {
            ago(j.next_fire, now)
        };
        let last = j
            .outcomes
            .chars()
            .rev()
            .find(|c| *c != 'x' && *c != 'm')
            .map_or("never run", outcome_word);
        // The last 16 outcomes, newest last.
        let recent: String = j
            .outcomes
            .chars()
            .skip(j.outcomes.chars().count().saturating_sub(16))
            .collect();
        table.row([
            j.name.clone(),
            state,
            last.to_string(),
            ago(j.last_run, now),
            j.consecutive_failures.to_string(),
            next,
            recent,
        ]);
    }
    table
}

/// What a summary's outcome letter says, as the history's status.
fn outcome_word(c: char) -> &'static str {
    match c {
        's' => "succeeded",
        'f' | 'e' => "failed",
        't' => "timed_out",
        'k' => "killed",
        'i' => "interrupted",
        'o' => "oom_killed",
        _ => "?",
    }
}

/// `, cpu 1.20s, mem 35.2 MiB`: what a running run has used so far.
fn used(cpu_ms: Option<u64>, memory_peak_kb: Option<u64>) -> String {
    let mut out = String::new();
    if let Some(ms) = cpu_ms {
        out.push_str(&format!(", cpu {:.2}s", ms as f64 / 1000.0));
    }
    if let Some(kb) = memory_peak_kb {
        out.push_str(&format!(", mem {:.1} MiB", kb as f64 / 1024.0));
    }
    out
}

/// The daemon's lines: its state, its file, how runs are contained, and
/// what is wrong.
fn header(d: &DaemonInfo, now: DateTime<Utc>) {
    daemon_line(d);
    trouble(d, now);
}

/// `daemon: running (pid N, up 3h); 2/8 running, 0 waiting for a slot`.
fn daemon_line(d: &DaemonInfo) {
    let up = rea_core::duration::format(std::time::Duration::from_secs(d.uptime_s.max(0) as u64));
    println!(
        "daemon: running (pid {}, up {up}); {}/{} running{}, {} waiting for a slot{}",
        d.pid,
        d.running_runs + d.running_hooks,
        d.max_concurrent,
        match d.running_hooks {
            0 => String::new(),
            n => format!(" ({n} of them hooks)"),
        },
        d.queued,
        match d.oneshots_pending {
            n if n > 0 => format!("; {n} one-shot(s) pending (rea pending)"),
            _ => String::new(),
        }
    );
}

/// The daemon's file, how it contains runs, and what is wrong with it.
fn trouble(d: &DaemonInfo, now: DateTime<Utc>) {
    println!(
        "file: {} (loaded {})",
        d.file,
        ago(Some(d.last_reload), now)
    );
    if !d.containment.is_empty() {
        println!("runs: {}", d.containment);
    }
    for line in &d.unenforced_tenant_limits {
        println!("limits: {line}");
    }
    if let Some(err) = &d.config_error {
        println!(
            "!! the job file is invalid (since {}); the daemon keeps running the last good configuration:",
            ago(Some(err.at), now)
        );
        for e in &err.errors {
            println!("   {}", e.replace('\n', "\n   "));
        }
    }
    let h = &d.history;
    if let Some(err) = &h.last_error {
        if h.backlog > 0 || h.dropped > 0 {
            println!(
                "!! history writes are failing ({}, {}): {} record(s) waiting in memory, {} dropped",
                err.message,
                ago(Some(err.at), now),
                h.backlog,
                h.dropped
            );
        }
    }
}

/// Renders the daemon's answer for people.
fn live(data: &StatusReply, tz: chrono_tz::Tz) {
    let now = Utc::now();
    let d = &data.daemon;
    daemon_line(d);
    if let Some(o) = &data.oneshot {
        println!(
            "one-shot {}: {}, due {} ({})",
            o.id,
            o.state,
            crate::time_text::show(o.due.0, tz),
            ago(Some(o.due), now)
        );
    }
    trouble(d, now);
    if data.oneshot.is_some() {
        // `rea status ONE-SHOT-ID`: its line above is the answer.
        return;
    }
    let mut table = Table::new(["JOB", "STATE", "LAST", "WHEN", "FAILS", "NEXT"]);
    for j in &data.jobs {
        let state = match j.state.as_str() {
            "running" => match j.running.first() {
                Some(r) => format!(
                    "running {} (pid {}{}){}",
                    ago(r.since, now).trim_end_matches(" ago"),
                    r.pid
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "null".into()),
                    used(r.cpu_ms, r.memory_peak_kb),
                    match j.running.len() {
                        0 | 1 => String::new(),
                        n => format!(" +{} more", n - 1),
                    }
                ),
                None => "running".to_string(),
            },
            _ if !j.hooks.is_empty() => {
                let h = &j.hooks[0];
                format!(
                    "{} {} (pid {})",
                    h.hook,
                    ago(Some(h.since), now).trim_end_matches(" ago"),
                    h.pid
                )
            }
            "retry_pending" => format!("retry {}", ago(j.retry_at, now)),
            "queued" => format!("queued ({})", j.queued),
            other => other.to_string(),
        };
        let state = if j.paused && !state.starts_with("paused") {
            format!("{state}, paused")
        } else {
            state
        };
        let next = if j.paused || !j.enabled {
            "-".to_string()
        } else if j.next_fire.is_none() && !j.after.is_empty() {
            after_text(j)
        } else {
            ago(j.next_fire, now)
        };
        table.row([
            j.name.clone(),
            state,
            j.last
                .as_ref()
                .map(|l| l.status.clone())
                .unwrap_or_else(|| "never run".to_string()),
            ago(j.last.as_ref().map(|l| l.ended), now),
            j.consecutive_failures.to_string(),
            next,
        ]);
    }
    print!("{}", table.render());
}

/// The view without a daemon: the job file plus the history log.
fn offline(global: &Global, args: &StatusArgs, dir: &std::path::Path) -> CommandResult {
    let cfg = super::load_config(global)?;
    if let Some(name) = &args.job {
        if !cfg.jobs.iter().any(|j| &j.name == name) {
            return Err(super::unknown_job(&cfg, name));
        }
    }
    let reader = rea_store::Local::history_reader(dir);
    let names: std::collections::HashSet<String> =
        cfg.jobs.iter().map(|j| j.name.clone()).collect();
    let summaries = reader.recent_summaries(&names).map_err(|e| {
        Failure::runtime(format!(
            "cannot read the history log in {}: {e}",
            dir.display()
        ))
    })?;
    let daemon_pid = state_dir::holder(dir);
    let now = Utc::now();
    let empty = JobSummary::default();
    let jobs: Vec<_> = cfg
        .jobs
        .iter()
        .filter(|j| args.job.as_ref().is_none_or(|n| &j.name == n))
        .collect();

    if args.check {
        let enabled: Vec<_> = jobs.iter().filter(|j| j.enabled).collect();
        let failing: Vec<super::probe::Failing> = enabled
            .iter()
            .filter_map(|j| {
                let s = summaries.get(&j.name)?;
                let last = s.last.as_ref();
                let failed = last.is_some_and(|l| super::probe::is_failure(l.status.as_str()));
                (failed || s.consecutive_failures > 0).then(|| super::probe::Failing {
                    name: j.name.clone(),
                    status: last.map_or_else(|| "failed".into(), |l| l.status.as_str().into()),
                    exit_code: last.and_then(|l| l.exit_code),
                    streak: s.consecutive_failures,
                })
            })
            .collect();
        return super::probe::offline(&failing, enabled.len(), &dir.display().to_string());
    }

    if args.json {
        let rows: Vec<_> = jobs
            .iter()
            .map(|j| {
                let s = summaries.get(&j.name).unwrap_or(&empty);
                let next = next_fire(j, now);
                json!({
                    "name": j.name,
                    "enabled": j.enabled,
                    "next_fire": next.map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
                    "consecutive_failures": s.consecutive_failures,
                    "last_success": s.last_success.map(rea_core::record::format_ts),
                    "last": s.last,
                })
            })
            .collect();
        let out = json!({
            "live": false,
            "daemon": { "running": daemon_pid.is_some(), "pid": daemon_pid },
            "state_dir": dir.display().to_string(),
            "file": cfg.path.display().to_string(),
            "jobs": rows,
        });
        println!("{out}");
        return failure::ok();
    }

    match daemon_pid {
        Some(pid) => println!(
            "daemon: running (pid {pid}); offline view from {} and the history in {}",
            cfg.path.display(),
            dir.display()
        ),
        None => println!(
            "daemon: not running; offline view from {} and the history in {}",
            cfg.path.display(),
            dir.display()
        ),
    }
    let mut table = Table::new(["JOB", "LAST", "WHEN", "DURATION", "FAILS", "NEXT"]);
    for j in jobs {
        let s = summaries.get(&j.name).unwrap_or(&empty);
        let (last, when, dur) = match &s.last {
            Some(l) => (
                l.status.as_str().to_string(),
                l.ended
                    .or(l.started)
                    .map(|t| super::relative(t, now))
                    .unwrap_or_default(),
                l.duration_ms
                    .map(|ms| rea_core::duration::format(std::time::Duration::from_millis(ms)))
                    .unwrap_or_default(),
            ),
            None => ("never run".to_string(), String::new(), String::new()),
        };
        let next = if !j.enabled {
            "disabled".to_string()
        } else if j.is_reboot() {
            "at daemon start".to_string()
        } else if j.schedule.is_none() {
            format!("after {}", rea_core::job::after_text(&j.after))
        } else {
            next_fire(j, now)
                .map(|t| super::relative(t, now))
                .unwrap_or_else(|| "never".into())
        };
        table.row([
            j.name.clone(),
            last,
            when,
            dur,
            s.consecutive_failures.to_string(),
            next,
        ]);
    }
    print!("{}", table.render());
    failure::ok()
}

fn next_fire(j: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if !j.enabled {
        return None;
    }
    j.next_after(now)
}

/// `after a, b (on failure)` from a daemon's answer; an older daemon's,
/// without conditions, as names.
fn after_text(j: &rea_proto::protocol::JobInfo) -> String {
    if j.dependencies.is_empty() {
        format!("after {}", j.after.join(", "))
    } else {
        format!("after {}", rea_core::job::after_text(&j.dependencies))
    }
}
