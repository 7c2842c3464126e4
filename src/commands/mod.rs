//! One file per subcommand; each is thin and delegates to the modules.

pub mod check;
pub mod import;
pub mod list;
pub mod next;
pub mod run;
pub mod status;

use std::path::PathBuf;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;

use crate::cli::{exit, Global};
use crate::config::{self, Config};

/// The job file: `--file`, `$REA_FILE` (both via clap), else `./jobs.toml`.
pub fn job_file(global: &Global) -> PathBuf {
    global
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from("jobs.toml"))
}

/// Loads the job file or prints every diagnostic; Err carries the exit code.
pub fn load_config(global: &Global) -> Result<Config, i32> {
    let path = job_file(global);
    config::load(&path).map_err(|diags| {
        print_diagnostics(&diags);
        exit::INVALID
    })
}

pub fn print_diagnostics(diags: &[config::Diagnostic]) {
    for d in diags {
        eprintln!("{d}");
    }
}

/// `2026-03-08T03:00:00-04:00`: RFC 3339, seconds, the zone's offset.
pub fn rfc3339_in(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// `in 3h12m` / `2m ago` / `now`.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t - now;
    let abs = d.abs().to_std().unwrap_or_default();
    if abs < std::time::Duration::from_secs(1) {
        return "now".into();
    }
    let s = crate::duration::format(std::time::Duration::from_secs(abs.as_secs()));
    if d > chrono::Duration::zero() {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

/// Prints an error for people and returns the exit code.
pub fn fail(code: i32, message: impl std::fmt::Display) -> i32 {
    eprintln!("rea: {message}");
    code
}
