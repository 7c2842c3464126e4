//! `rea trigger JOB [--wait]`: run a job now through the daemon (trigger
//! `manual`), subject to its overlap policy unless `--force`.

use std::io::IsTerminal;
use std::time::Duration;

use crate::cli::{exit, Global, TriggerArgs};
use crate::control::Request;

pub fn run(global: &Global, args: &TriggerArgs) -> i32 {
    let mut client = match super::connect(global) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let request = Request::Trigger {
        job: args.job.clone(),
        force: args.force,
        wait: args.wait,
    };
    let first = match super::ask(&mut client, &request) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let run = first["run"].as_str().unwrap_or("").to_string();
    let state = first["state"].as_str().unwrap_or("started");
    if !args.wait {
        if args.json {
            println!("{first}");
        } else {
            println!("{state} run {run} of {}", args.job);
        }
        return exit::OK;
    }
    let spinner = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            pb.set_style(style);
        }
        pb.set_message(format!("{} run {run}", args.job));
        pb.enable_steady_tick(Duration::from_millis(100));
        Some(pb)
    } else {
        eprintln!(
            "rea: {state} run {run} of {}; waiting for it to end",
            args.job
        );
        None
    };
    let resp = client.read_response();
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    let record = match resp
        .map_err(super::client_error)
        .and_then(super::response_data)
    {
        Ok(r) => r,
        Err(code) => return code,
    };
    let status = record["status"].as_str().unwrap_or("unknown");
    let exit_code = record["exit_code"].as_i64();
    let signal = record["signal"].as_i64();
    if args.json {
        println!("{record}");
    } else {
        let dur = record["duration_ms"]
            .as_u64()
            .map(|ms| format!(" in {}", crate::duration::format(Duration::from_millis(ms))))
            .unwrap_or_default();
        let how = match (exit_code, signal) {
            (Some(c), _) => format!(" (exit {c})"),
            (None, Some(s)) => format!(" (signal {s})"),
            _ => String::new(),
        };
        let reason = record["reason"]
            .as_str()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        println!("{} run {run} {status}{dur}{how}{reason}", args.job);
        if let Some(at) = record["detail"]["retry_at"].as_str() {
            println!("retry scheduled at {at}");
        }
    }
    // The job's own exit code passes through; a signal becomes 128+N as in
    // shells; a run that never got an exit status (spawn failure) is 1.
    match (status, exit_code, signal) {
        ("succeeded", _, _) => exit::OK,
        (_, Some(c), _) => c.clamp(0, 255) as i32,
        (_, None, Some(s)) => (128 + s).clamp(0, 255) as i32,
        _ => exit::FAILURE,
    }
}
