//! `rea logs JOB [--run ID]`: the captured output of a run. The output goes
//! to stdout untouched (pipe it anywhere); a one-line header goes to stderr.

use chrono::SecondsFormat;

use rea_core::record::RunStatus;

use crate::cli::{exit, Global, LogsArgs};
use crate::failure::{self, Failure, Outcome};

pub(crate) fn run(global: &Global, args: &LogsArgs) -> Outcome {
    let dir = super::state_dir(global)?;
    let reader = rea_store::Local::history_reader(&dir);
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
                    Some(id) => format!("no run {id:?} in the history in {}", dir.display()),
                    None => format!(
                        "no finished run of {:?} in the history in {} (see `rea history`)",
                        args.job,
                        dir.display()
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
    print!("{}", record.output.as_deref().unwrap_or(""));
    failure::ok()
}
