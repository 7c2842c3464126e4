//! `rea logs JOB [--run ID]`: the captured output of a run. The output goes
//! to stdout untouched (pipe it anywhere); a one-line header goes to stderr.
//! `rea logs --follow JOB`: the output of the job's running (or next) run
//! as it comes, from the daemon, then how the run ended.

use std::io::{IsTerminal, Write};

use chrono::SecondsFormat;

use rea_core::record::{Record, RunStatus};
use rea_core::shown::{shown, Layout};

use crate::cli::{exit, Global, LogsArgs};
use crate::failure::{self, CommandResult, Failure};
use rea_proto::protocol::{FollowReply, StreamLine};
use rea_proto::{Client, Request};

pub(crate) fn run(global: &Global, args: &LogsArgs) -> CommandResult {
    if args.follow {
        return follow(global, args);
    }
    let dir = super::state_dir(global)?;
    let reader = super::history_reader(global, &dir)?;
    // Where the history was read: the cluster's database, or this
    // machine's state directory.
    let place = match super::cluster::settings(global)? {
        Some(s) => format!("cluster {:?}'s history", s.cluster),
        None => format!("the history in {}", dir.display()),
    };
    let found = match &args.run {
        Some(id) => reader.find_run(id),
        None => reader.latest_final_run(&args.job),
    };
    let record = match found {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(Failure::new(
                exit::NOT_FOUND,
                match &args.run {
                    Some(id) => format!("no run {id:?} in {place}"),
                    None => format!(
                        "no finished run of {:?} in {place} (see `rea history`)",
                        args.job
                    ),
                },
            ))
        }
        Err(e) => {
            return Err(Failure::runtime(format!(
                "cannot read the history log in {}: {e}",
                dir.display()
            )))
        }
    };
    if record.job.as_deref() != Some(args.job.as_str()) {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "run {:?} belongs to job {:?}, not {:?}",
                record.run.as_deref().unwrap_or(""),
                record.job.as_deref().unwrap_or(""),
                args.job
            ),
        ));
    }
    if args.json {
        println!("{}", serde_json::to_string(&record).unwrap_or_default());
        return failure::ok();
    }
    let status = record.status.map(RunStatus::as_str).unwrap_or("?");
    if record.status == Some(RunStatus::Started) {
        eprintln!(
            "rea: run {} of {} is still running; its output is recorded when it ends",
            record.run.as_deref().unwrap_or(""),
            args.job
        );
        return failure::ok();
    }
    let when = record
        .started
        .unwrap_or(record.ts)
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    let total = record.output_bytes.unwrap_or(0);
    let kept = record.output.as_deref().map(str::len).unwrap_or(0) as u64;
    let note = if total > kept {
        format!(", {total} bytes written, head and tail kept")
    } else {
        String::new()
    };
    eprintln!(
        "rea: {} run {} ({status}, started {when}{note})",
        args.job,
        record.run.as_deref().unwrap_or("")
    );
    if let Some(usage) = usage_line(&record) {
        eprintln!("rea: {usage}");
    }
    if let Some(params) = super::history::params_text(&record) {
        eprintln!("rea: params {params}");
    }
    let output = record.output.as_deref().unwrap_or("");
    if !args.raw && std::io::stdout().is_terminal() {
        print!("{}", shown(output, Layout::Print));
    } else {
        print!("{output}");
    }
    failure::ok()
}

/// `rea logs --follow JOB`: exits as `rea trigger --wait` does.
fn follow(global: &Global, args: &LogsArgs) -> CommandResult {
    let mut client = super::connect(global)?;
    let request = Request::Follow {
        job: args.job.clone(),
    };
    let first = super::ask::<FollowReply>(&mut client, &request)?;
    let FollowReply { run, .. } = &first.data;
    if args.json {
        println!("{}", first.raw);
    } else {
        match run {
            Some(run) => eprintln!("rea: following run {run} of {}", args.job),
            None => eprintln!("rea: waiting for the next run of {}", args.job),
        }
    }
    client.without_timeout();
    let record = print_stream(&mut client, &args.job, run.as_deref(), args.json, args.raw)?;
    if !args.json {
        eprintln!("{}", super::run_end::ended(&args.job, &record));
    }
    Ok(super::run_end::exit_status(&record))
}

/// Prints a streamed answer's lines as they come (output to stdout,
/// sanitised on a terminal unless `raw`; with `json`, each line's data)
/// until its last line, the run's final record, which it returns.
/// `announced` is the run already named to the user, if any.
pub(super) fn print_stream(
    client: &mut Client,
    job: &str,
    announced: Option<&str>,
    json: bool,
    raw: bool,
) -> Result<Record, Failure> {
    let sanitise = !raw && std::io::stdout().is_terminal();
    let mut out = std::io::stdout();
    loop {
        let resp = client.read_response().map_err(super::client_failure)?;
        let line = super::answer::<serde_json::Value>(resp)?.raw;
        if line.get("stream").is_none() {
            if json {
                println!("{line}");
            }
            return serde_json::from_value(line)
                .map_err(|e| Failure::runtime(format!("unreadable answer from the daemon: {e}")));
        }
        let text = if json {
            format!("{line}\n")
        } else {
            match serde_json::from_value::<StreamLine>(line) {
                Ok(StreamLine::Output { text }) if sanitise => shown(&text, Layout::Print),
                Ok(StreamLine::Output { text }) => text,
                Ok(StreamLine::Skipped { bytes }) => format!("\n… {bytes} bytes skipped …\n"),
                Ok(StreamLine::Run { run, .. }) => {
                    if announced != Some(run.as_str()) {
                        eprintln!("rea: run {run} of {job} started");
                    }
                    continue;
                }
                // A kind of line this build does not know: not for it.
                Err(_) => continue,
            }
        };
        // Output comes in pieces, not lines: each goes out at once.
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Err(Failure::runtime("cannot write the output"));
        }
    }
}

/// What the run used, as one line: CPU (the whole cgroup's, or the
/// leader's rusage), and the cgroup's memory, IO and task peaks where the
/// host's controllers measured them.
fn usage_line(r: &rea_core::record::Record) -> Option<String> {
    let (user, sys) = (r.user_cpu_ms?, r.sys_cpu_ms?);
    let mut parts = vec![format!(
        "cpu {:.2}s user, {:.2}s system ({})",
        user as f64 / 1000.0,
        sys as f64 / 1000.0,
        if r.cpu_from_cgroup == Some(true) {
            "the run's cgroup"
        } else {
            "its first process and what it waited for"
        }
    )];
    if let Some(kb) = r.memory_peak_kb {
        parts.push(format!("memory peak {kb} KiB"));
    }
    if let (Some(rd), Some(wr)) = (r.io_read_bytes, r.io_write_bytes) {
        parts.push(format!("io {rd} B read, {wr} B written"));
    }
    if let Some(n) = r.tasks_peak {
        parts.push(format!("{n} tasks at most"));
    }
    if r.oom_killed == Some(true) {
        parts.push("a process was killed by the OOM killer".to_string());
    }
    Some(parts.join("; "))
}
