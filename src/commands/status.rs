//! `rea status [JOB]`: per job, its state, the last result, consecutive
//! failures and the next fire. Live from the daemon when one runs for the
//! state directory; otherwise the offline view, computed from the job file
//! and the history log, clearly labelled as such.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use crate::cli::{exit, Global, StatusArgs};
use crate::history::{HistoryReader, JobSummary, JsonlReader};
use crate::state_dir;
use crate::table::Table;

pub fn run(global: &Global, args: &StatusArgs) -> i32 {
    let dir = match super::state_dir(global) {
        Ok(d) => d,
        Err(code) => return code,
    };
    match crate::control::Client::connect(&dir) {
        Ok(mut client) => {
            let request = crate::control::Request::Status {
                job: args.job.clone(),
            };
            match super::ask(&mut client, &request) {
                Ok(data) => live(&data, args.json),
                Err(code) => code,
            }
        }
        // No daemon: the offline view says so itself.
        Err(crate::control::ClientError::NoDaemon(_)) => offline(global, args, &dir),
        Err(e) => super::client_error(e),
    }
}

fn ago(text: Option<&str>, now: DateTime<Utc>) -> String {
    text.and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| super::relative(t.with_timezone(&Utc), now))
        .unwrap_or_default()
}

/// Renders the daemon's answer.
fn live(data: &serde_json::Value, json: bool) -> i32 {
    if json {
        println!("{data}");
        return exit::OK;
    }
    let now = Utc::now();
    let d = &data["daemon"];
    let up = crate::duration::format(std::time::Duration::from_secs(
        d["uptime_s"].as_u64().unwrap_or(0),
    ));
    println!(
        "daemon: running (pid {}, up {up}); {}/{} running, {} waiting for a slot{}",
        d["pid"],
        d["running_runs"],
        d["max_concurrent"],
        d["queued"],
        match d["oneshots_pending"].as_u64() {
            Some(n) if n > 0 => format!("; {n} one-shot(s) pending (rea pending)"),
            _ => String::new(),
        }
    );
    if let Some(o) = data["oneshot"].as_object() {
        println!(
            "one-shot {}: {}, due {} ({})",
            o.get("id").and_then(|v| v.as_str()).unwrap_or(""),
            o.get("state").and_then(|v| v.as_str()).unwrap_or(""),
            o.get("due").and_then(|v| v.as_str()).unwrap_or(""),
            ago(o.get("due").and_then(|v| v.as_str()), now)
        );
    }
    println!(
        "file: {} (loaded {})",
        d["file"].as_str().unwrap_or(""),
        ago(d["last_reload"].as_str(), now)
    );
    if let Some(err) = d["config_error"].as_object() {
        println!(
            "!! the job file is invalid (since {}); the daemon keeps running the last good configuration:",
            ago(err.get("at").and_then(|v| v.as_str()), now)
        );
        for e in err
            .get("errors")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            println!("   {}", e.as_str().unwrap_or("").replace('\n', "\n   "));
        }
    }
    let h = &d["history"];
    if let Some(err) = h["last_error"].as_object() {
        let backlog = h["backlog"].as_u64().unwrap_or(0);
        let dropped = h["dropped"].as_u64().unwrap_or(0);
        if backlog > 0 || dropped > 0 {
            println!(
                "!! history writes are failing ({}, {}): {backlog} record(s) waiting in memory, {dropped} dropped",
                err.get("message").and_then(|v| v.as_str()).unwrap_or(""),
                ago(err.get("at").and_then(|v| v.as_str()), now)
            );
        }
    }
    if data["oneshot"].is_object() {
        // `rea status ONE-SHOT-ID`: its line above is the answer.
        return exit::OK;
    }
    let mut table = Table::new(["JOB", "STATE", "LAST", "WHEN", "FAILS", "NEXT"]);
    for j in data["jobs"].as_array().into_iter().flatten() {
        let state = match j["state"].as_str().unwrap_or("") {
            "running" => {
                let r = &j["running"][0];
                format!(
                    "running {} (pid {}){}",
                    ago(r["since"].as_str(), now).trim_end_matches(" ago"),
                    r["pid"],
                    match j["running"].as_array().map(|a| a.len()).unwrap_or(0) {
                        0 | 1 => String::new(),
                        n => format!(" +{} more", n - 1),
                    }
                )
            }
            "retry_pending" => format!("retry {}", ago(j["retry_at"].as_str(), now)),
            "queued" => format!("queued ({})", j["queued"]),
            other => other.to_string(),
        };
        let state = if j["paused"] == true && !state.starts_with("paused") {
            format!("{state}, paused")
        } else {
            state
        };
        let last = &j["last"];
        let after: Vec<&str> = j["after"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str())
            .collect();
        let next = if j["paused"] == true || j["enabled"] == false {
            "-".to_string()
        } else if j["next_fire"].is_null() && !after.is_empty() {
            format!("after {}", after.join(", "))
        } else {
            ago(j["next_fire"].as_str(), now)
        };
        table.row([
            j["name"].as_str().unwrap_or("").to_string(),
            state,
            last["status"].as_str().unwrap_or("never run").to_string(),
            ago(last["ended"].as_str(), now),
            j["consecutive_failures"].to_string(),
            next,
        ]);
    }
    print!("{}", table.render());
    exit::OK
}

/// The view without a daemon: the job file plus the history log.
fn offline(global: &Global, args: &StatusArgs, dir: &std::path::Path) -> i32 {
    let cfg = match super::load_config(global) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(name) = &args.job {
        if !cfg.jobs.iter().any(|j| &j.name == name) {
            return super::unknown_job(&cfg, name);
        }
    }
    let reader = JsonlReader::new(dir);
    let names: std::collections::HashSet<String> =
        cfg.jobs.iter().map(|j| j.name.clone()).collect();
    let summaries = match reader.recent_summaries(&names) {
        Ok(s) => s,
        Err(e) => {
            return super::fail(
                exit::FAILURE,
                format!("cannot read the history log in {}: {e}", dir.display()),
            )
        }
    };
    let daemon_pid = state_dir::holder(dir);
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
                    "last_success": s.last_success.map(crate::history::format_ts),
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
        } else if j.is_reboot() {
            "at daemon start".to_string()
        } else if j.schedule.is_none() {
            format!("after {}", j.after.join(", "))
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
    j.next_after(now)
}
