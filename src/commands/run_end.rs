//! How a run that a command waited for ended, for people and for the
//! command's exit status (`rea trigger --wait`, `rea logs --follow`).

use std::process::ExitCode;
use std::time::Duration;

use rea_core::record::{Record, RunStatus};

use crate::cli::exit;
use crate::failure::exit_code;

/// `db-backup run 01m8k9j81t6nbw failed in 2.0s (exit 3)`: how a run ended.
pub(super) fn ended(job: &str, record: &Record) -> String {
    let run = record.run.as_deref().unwrap_or("");
    let status = record.status.map(RunStatus::as_str).unwrap_or("unknown");
    let dur = record
        .duration_ms
        .map(|ms| {
            format!(
                " in {}",
                rea_core::duration::format(Duration::from_millis(ms))
            )
        })
        .unwrap_or_default();
    let how = match (record.exit_code, record.signal) {
        (Some(c), _) => format!(" (exit {c})"),
        (None, Some(s)) => format!(" (signal {s})"),
        _ => String::new(),
    };
    let reason = record
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    format!("{job} run {run} {status}{dur}{how}{reason}")
}

/// The exit status of a command that waited for a run: the job's own exit
/// code passes through; a signal becomes 128+N as in shells; a run that
/// never got an exit status (spawn failure, skipped) is 1.
pub(super) fn exit_status(record: &Record) -> ExitCode {
    match (record.status, record.exit_code, record.signal) {
        (Some(RunStatus::Succeeded), _, _) => exit_code(exit::OK),
        (_, Some(c), _) => exit_code(c),
        (_, None, Some(s)) => exit_code(128 + s),
        _ => exit_code(exit::FAILURE),
    }
}
