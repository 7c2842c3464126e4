//! One file per subcommand; each is thin and delegates to the modules.

pub mod cancel;
pub mod check;
pub mod generate;
pub mod history;
pub mod import;
pub mod list;
pub mod logs;
pub mod next;
pub mod pause;
pub mod pending;
pub mod reload;
pub mod run;
pub mod status;
pub mod submit;
pub mod trigger;

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

/// `FILE:LINE:COL: warning: message` (and the hint line).
pub fn warning_text(d: &config::Diagnostic) -> String {
    let mut w = d.clone();
    w.message = format!("warning: {}", w.message);
    w.to_string()
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

/// The state directory for client commands, or the exit code.
pub fn state_dir(global: &Global) -> Result<PathBuf, i32> {
    crate::state_dir::resolve(global.state_dir.as_deref()).map_err(|e| fail(exit::INVALID, e))
}

/// Connects to the daemon of the state directory, or explains why not.
pub fn connect(global: &Global) -> Result<crate::control::Client, i32> {
    let dir = state_dir(global)?;
    crate::control::Client::connect(&dir).map_err(client_error)
}

/// Prints a client error; returns its exit code.
pub fn client_error(e: crate::control::ClientError) -> i32 {
    match e {
        crate::control::ClientError::NoDaemon(m) => fail(exit::NO_DAEMON, m),
        crate::control::ClientError::Io(m) => fail(exit::FAILURE, m),
    }
}

/// Connects and sends one request (the commands that need nothing else of
/// the connection).
pub fn request(
    global: &Global,
    request: &crate::control::Request,
) -> Result<serde_json::Value, i32> {
    let mut client = connect(global)?;
    ask(&mut client, request)
}

/// `no job named "x" in FILE (did you mean "y"?)`, exit 5.
pub fn unknown_job(cfg: &Config, name: &str) -> i32 {
    let names: Vec<&str> = cfg.jobs.iter().map(|j| j.name.as_str()).collect();
    let hint = crate::suggest::did_you_mean(name, names)
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    fail(
        exit::NOT_FOUND,
        format!("no job named {name:?} in {}{hint}", cfg.path.display()),
    )
}

/// Sends one request; an error response is printed and becomes the exit code.
pub fn ask(
    client: &mut crate::control::Client,
    request: &crate::control::Request,
) -> Result<serde_json::Value, i32> {
    let resp = client.request(request).map_err(client_error)?;
    response_data(resp)
}

/// The data of a response, or the printed error's exit code.
pub fn response_data(resp: crate::control::Response) -> Result<serde_json::Value, i32> {
    if resp.ok {
        return Ok(resp.data.unwrap_or(serde_json::Value::Null));
    }
    let code = match resp.code.as_deref() {
        Some("unknown_job") => exit::NOT_FOUND,
        // Idempotent submitters: "already pending" has its own status.
        Some("duplicate") => exit::DUPLICATE,
        Some("invalid_config") => exit::INVALID,
        _ => exit::FAILURE,
    };
    let mut msg = resp
        .error
        .unwrap_or_else(|| "the daemon refused the request".into());
    match (resp.code.as_deref(), resp.suggestions.as_slice()) {
        (_, []) => {}
        (Some("unknown_job"), s) => msg.push_str(&format!(
            " (did you mean {}?)",
            s.iter()
                .map(|x| format!("{x:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (_, lines) => {
            for l in lines {
                msg.push('\n');
                msg.push_str(l);
            }
        }
    }
    Err(fail(code, msg))
}
