//! `rea status [JOB]`: per job, the last result, consecutive failures and the
//! next fire. This is the offline view, computed from the job file and the
//! history log; it needs no daemon.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use crate::cli::{exit, Global, StatusArgs};
use crate::history::{HistoryReader, JobSummary, JsonlReader};
use crate::state_dir;
use crate::table::Table;

pub fn run(global: &Global, args: &StatusArgs) -> i32 {
    let cfg = match super::load_config(global) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let dir = match state_dir::resolve(global.state_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return super::fail(exit::INVALID, e),
    };
    if let Some(name) = &args.job {
        if !cfg.jobs.iter().any(|j| &j.name == name) {
            let names: Vec<&str> = cfg.jobs.iter().map(|j| j.name.as_str()).collect();
            let hint = crate::suggest::did_you_mean(name, names)
                .map(|h| format!(" ({h})"))
                .unwrap_or_default();
            return super::fail(
                exit::NOT_FOUND,
                format!("no job named {name:?} in {}{hint}", cfg.path.display()),
            );
        }
    }
    let reader = JsonlReader::new(&dir);
    let summaries = match reader.job_summaries() {
        Ok(s) => s,
        Err(e) => {
            return super::fail(
                exit::FAILURE,
                format!("cannot read the history log in {}: {e}", dir.display()),
            )
        }
    };
    let daemon_pid = state_dir::holder(&dir);
    let now = Utc::now();
    let empty = JobSummary::default();
    let jobs: Vec<_> = cfg
        .jobs
        .iter()
        .filter(|j| args.job.as_ref().is_none_or(|n| &j.name == n))
        .collect();

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
                    "total_runs": s.total_runs,
                    "last_success": s.last_success.map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
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
        return exit::OK;
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
                    .map(|ms| crate::duration::format(std::time::Duration::from_millis(ms)))
                    .unwrap_or_default(),
            ),
            None => ("never run".to_string(), String::new(), String::new()),
        };
        let next = if !j.enabled {
            "disabled".to_string()
        } else if j.schedule.is_reboot() {
            "at daemon start".to_string()
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
    exit::OK
}

fn next_fire(j: &crate::config::Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if !j.enabled {
        return None;
    }
    j.schedule.next_after(now, j.timezone)
}
