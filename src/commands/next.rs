//! `rea next EXPR|JOB`: the next fire instants, one per line.

use chrono::{DateTime, Utc};
use serde_json::json;

use rea_config::zone;
use rea_core::schedule::Schedule;

use crate::cli::{Global, NextArgs};
use crate::failure::{self, CommandResult, Failure};

/// A job name never contains whitespace and never starts with `@`; an
/// expression always does one or the other (`@daily`, `0 3 * * *`).
fn is_expression(target: &str) -> bool {
    target.trim().starts_with('@') || target.trim().contains(char::is_whitespace)
}

pub(crate) fn run(global: &Global, args: &NextArgs) -> CommandResult {
    let after: DateTime<Utc> = match &args.after {
        None => Utc::now(),
        Some(text) => match DateTime::parse_from_rfc3339(text.trim()) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => {
                return Err(Failure::invalid(format!(
                    "--after {text:?} is not an RFC 3339 instant ({e}); write e.g. 2026-03-08T01:30:00-05:00"
                )))
            }
        },
    };
    let (schedule, tz, tz_name, job) = if is_expression(&args.target) {
        // Read in the machine's zone by default, as cron reads a crontab.
        let name = args.tz.clone().unwrap_or_else(|| "local".to_string());
        let tz = match zone::resolve(&name) {
            Ok(tz) => tz,
            Err(e) => {
                let msg = format!("{}\n  hint: {}", e.message, e.hint());
                return Err(Failure::invalid(msg));
            }
        };
        let shown = if args.tz.is_some() {
            name
        } else {
            tz.name().to_string()
        };
        match Schedule::parse(&args.target) {
            Ok(s) => (s, tz, shown, None),
            Err(e) => {
                let mut msg = format!("invalid expression {:?}: {}", args.target, e.message);
                if let Some(h) = e.hint {
                    msg.push_str(&format!("\n  hint: {h}"));
                }
                return Err(Failure::invalid(msg));
            }
        }
    } else {
        let cfg = super::load_config(global)?;
        let Some(job) = cfg.jobs.iter().find(|j| j.name == args.target) else {
            return Err(super::unknown_job(&cfg, &args.target));
        };
        if args.tz.is_some() {
            eprintln!(
                "rea: note: --tz is ignored for a job; it uses its own timezone ({})",
                job.timezone_name
            );
        }
        let Some(schedule) = job.schedule.clone() else {
            // Not an error: the job fires when the jobs it runs after succeed.
            if args.json {
                println!(
                    "{}",
                    json!({ "job": job.name, "after": job.after_names(), "dependencies": job.after, "timezone": &*job.timezone_name, "fires": [] })
                );
            } else {
                eprintln!(
                    "rea: job {:?} has no schedule of its own: it runs after {}",
                    job.name,
                    rea_core::job::after_text(&job.after)
                );
            }
            return failure::ok();
        };
        (
            schedule,
            job.timezone,
            job.timezone_name.to_string(),
            Some(job.name.clone()),
        )
    };

    let mut fires = Vec::with_capacity(args.count.min(10_000));
    let mut cursor = after;
    while fires.len() < args.count {
        match schedule.next_after(cursor, tz) {
            Some(t) => {
                fires.push(t);
                cursor = t;
            }
            None => break,
        }
    }
    if args.json {
        let out = json!({
            "expression": schedule.source(),
            "job": job,
            "timezone": tz_name,
            "after": after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "fires": fires.iter().map(|t| super::rfc3339_in(*t, tz)).collect::<Vec<_>>(),
        });
        println!("{out}");
        return failure::ok();
    }
    for t in &fires {
        println!("{}", super::rfc3339_in(*t, tz));
    }
    if fires.len() < args.count {
        if schedule.is_reboot() {
            eprintln!(
                "rea: {:?} fires only when the daemon starts",
                schedule.source()
            );
        } else if fires.is_empty() && schedule.next_after(DateTime::UNIX_EPOCH, tz).is_none() {
            // Nothing since 1970 means nothing ever: the day fields contradict
            // each other (every single field value is valid by parsing).
            eprintln!(
                "rea: {:?} never fires: no date matches its day-of-month, month and day-of-week fields together",
                schedule.source()
            );
        } else {
            eprintln!(
                "rea: {:?} never fires again after {}",
                schedule.source(),
                super::rfc3339_in(cursor, tz)
            );
        }
    }
    failure::ok()
}
