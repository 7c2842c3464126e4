//! One file per subcommand; each is thin and delegates to the crates below
//! and the program's modules. Each returns `Outcome` (`Result<ExitCode,
//! Failure>`): only `main` prints a failure and exits.

pub(crate) mod cancel;
pub(crate) mod check;
pub(crate) mod cluster;
pub(crate) mod generate;
pub(crate) mod history;
pub(crate) mod import;
pub(crate) mod list;
pub(crate) mod logs;
pub(crate) mod next;
pub(crate) mod pause;
pub(crate) mod pending;
pub(crate) mod reload;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod trigger;

use std::path::PathBuf;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use rea_config::{Config, Diagnostic, LoadOptions};
use serde::de::DeserializeOwned;

use crate::cli::{exit, Global};
use crate::control::{Client, ClientError, Request, Response};
use crate::failure::Failure;

/// The job file: `--file`, `$REA_FILE` (both via clap), else `./jobs.toml`.
pub(crate) fn job_file(global: &Global) -> PathBuf {
    global
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from("jobs.toml"))
}

/// Loads the job file (with the machine's checks) or fails with every
/// diagnostic.
pub(crate) fn load_config(global: &Global) -> Result<Config, Failure> {
    let path = job_file(global);
    crate::host::load(&path, LoadOptions::default()).map_err(|diags| invalid_file(&diags, None))
}

/// A failure listing every diagnostic (exit 2), then `summary` if given.
pub(crate) fn invalid_file(diags: &[Diagnostic], summary: Option<String>) -> Failure {
    Failure::lines(exit::INVALID, diags, summary)
}

/// `2026-03-08T03:00:00-04:00`: RFC 3339, seconds, the zone's offset.
pub(crate) fn rfc3339_in(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// `in 3h12m` / `2m ago` / `now`.
pub(crate) fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let d = t - now;
    let abs = d.abs().to_std().unwrap_or_default();
    if abs < std::time::Duration::from_secs(1) {
        return "now".into();
    }
    let s = rea_core::duration::format(std::time::Duration::from_secs(abs.as_secs()));
    if d > chrono::Duration::zero() {
        format!("in {s}")
    } else {
        format!("{s} ago")
    }
}

/// The state directory for client commands.
pub(crate) fn state_dir(global: &Global) -> Result<PathBuf, Failure> {
    crate::state_dir::resolve(global.state_dir.as_deref()).map_err(Failure::invalid)
}

/// Connects to the daemon of the state directory, or explains why not.
pub(crate) fn connect(global: &Global) -> Result<Client, Failure> {
    let dir = state_dir(global)?;
    Client::connect(&dir, global.client_timeout).map_err(client_failure)
}

/// A client error as a failure (no daemon: exit 3).
pub(crate) fn client_failure(e: ClientError) -> Failure {
    match e {
        ClientError::NoDaemon(m) => Failure::new(exit::NO_DAEMON, m),
        ClientError::Io(m) => Failure::runtime(m),
    }
}

/// Connects and sends one request (the commands that need nothing else of
/// the connection); the answer's data as `T`.
pub(crate) fn request<T: DeserializeOwned>(
    global: &Global,
    request: &Request,
) -> Result<Answer<T>, Failure> {
    let mut client = connect(global)?;
    ask(&mut client, request)
}

/// A successful answer: typed, and as it came (what `--json` prints).
pub(crate) struct Answer<T> {
    pub(crate) data: T,
    pub(crate) raw: serde_json::Value,
}

/// Sends one request; an error response becomes the failure.
pub(crate) fn ask<T: DeserializeOwned>(
    client: &mut Client,
    request: &Request,
) -> Result<Answer<T>, Failure> {
    let resp = client.request(request).map_err(client_failure)?;
    answer(resp)
}

/// The data of a response, or the failure it reports.
pub(crate) fn answer<T: DeserializeOwned>(resp: Response) -> Result<Answer<T>, Failure> {
    if !resp.ok {
        return Err(refusal(resp));
    }
    let data = resp.data_as::<T>().map_err(Failure::runtime)?;
    Ok(Answer {
        data,
        raw: resp.data.unwrap_or(serde_json::Value::Null),
    })
}

/// An error response as a failure, with the exit status of its code.
fn refusal(resp: Response) -> Failure {
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
    Failure::new(code, msg)
}

/// `no job named "x" in FILE (did you mean "y"?)`, exit 5.
pub(crate) fn unknown_job(cfg: &Config, name: &str) -> Failure {
    let names: Vec<&str> = cfg.jobs.iter().map(|j| j.name.as_str()).collect();
    let hint = rea_core::suggest::did_you_mean(name, names)
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    Failure::new(
        exit::NOT_FOUND,
        format!("no job named {name:?} in {}{hint}", cfg.path.display()),
    )
}
