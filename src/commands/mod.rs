//! One file per subcommand; each is thin and delegates to the crates below
//! and the program's modules. Each returns `CommandResult` (`Result<ExitCode,
//! Failure>`): only `main` prints a failure and exits.

pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod check;
pub(crate) mod cluster;
pub(crate) mod complete;
pub(crate) mod edit;
pub(crate) mod generate;
pub(crate) mod history;
pub(crate) mod import;
pub(crate) mod kill;
pub(crate) mod list;
pub(crate) mod logs;
pub(crate) mod next;
pub(crate) mod pause;
pub(crate) mod pending;
pub(crate) mod probe;
pub(crate) mod reload;
pub(crate) mod run;
mod run_end;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod top;
pub(crate) mod trigger;
pub(crate) mod web;

use std::path::PathBuf;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use rea_config::{Config, Diagnostic, LoadOptions};

use rea_daemon::jobfiles::{HostChecks, JobFiles};
use rea_proto::protocol::PingReply;
use serde::de::DeserializeOwned;

use crate::cli::{exit, Global};
use crate::failure::Failure;
use rea_proto::{Client, ClientError, Request, Response};

/// The main job file: `--file`, `$REA_FILE` (both via clap), else
/// `/etc/rea/jobs.toml` for root and `./jobs.toml` for others.
pub(crate) fn job_file(global: &Global) -> PathBuf {
    global
        .file
        .clone()
        .unwrap_or_else(rea_daemon::jobfiles::default_main)
}

/// The main job file a command reads: `--file`/`$REA_FILE`, else the one
/// the running daemon of the state directory uses, else the default.
pub(crate) fn job_file_in_use(global: &Global) -> PathBuf {
    if let Some(f) = &global.file {
        return f.clone();
    }
    let daemons = state_dir(global).ok().and_then(|dir| {
        let mut client = Client::connect(&dir, global.client_timeout).ok()?;
        let ping = ask::<PingReply>(&mut client, &Request::Ping).ok()?;
        ping.data.file.map(PathBuf::from)
    });
    daemons.unwrap_or_else(rea_daemon::jobfiles::default_main)
}

/// Loads the job files (the main file and the ones beside it) for a
/// command that only reads them (`list`, `next`, offline `status`). A bad
/// main file is a failure with every diagnostic; a bad drop-in or user's
/// file is reported on stderr and left out. What the machine says (a job's
/// user missing here) does not stop these: it is a warning in the result,
/// and `rea check` is where it is an error.
pub(crate) fn load_config(global: &Global) -> Result<Config, Failure> {
    let path = job_file_in_use(global);
    // A user cannot read root's job files: her view (`rea list`, `rea
    // next`) is her own file, which the daemon hands her.
    if !rea_host::user::is_root() && std::fs::File::open(&path).is_err() {
        if let Some(cfg) = own_file(global)? {
            return Ok(cfg);
        }
    }
    let mut files = JobFiles::new(&path, LoadOptions::default(), rea_host::user::is_root())
        .host_checks(HostChecks::Lenient);
    match files.load(true) {
        Ok(Some(loaded)) => {
            for (_, diags) in &loaded.refused {
                for d in diags {
                    eprintln!("{d}");
                }
            }
            for (file, _) in &loaded.refused {
                eprintln!("rea: note: {} is left out (it has errors)", file.display());
            }
            Ok(loaded.config)
        }
        Ok(None) => Err(Failure::runtime(format!("cannot read {}", path.display()))),
        Err(diags) => Err(invalid_file(&diags, None)),
    }
}

/// The caller's own job file, through the daemon, with her jobs named as
/// she names them; None when no daemon runs for the state directory.
fn own_file(global: &Global) -> Result<Option<Config>, Failure> {
    let dir = state_dir(global)?;
    let mut client = match Client::connect(&dir, global.client_timeout) {
        Ok(c) => c,
        Err(ClientError::NoDaemon(_)) => return Ok(None),
        Err(e) => return Err(client_failure(e)),
    };
    let reply =
        ask::<rea_proto::protocol::EditGetReply>(&mut client, &Request::EditGet { user: None })?
            .data;
    let kind = rea_config::FileKind::User(reply.user.clone());
    let mut cfg = rea_config::parse_as(
        reply.content.as_bytes(),
        std::path::Path::new(&reply.path),
        &kind,
    )
    .map_err(|diags| invalid_file(&diags, None))?;
    let me = rea_core::tenant::Tenant::User(&reply.user);
    let local = |name: &str| me.local(name).unwrap_or(name).to_string();
    for job in &mut cfg.jobs {
        let mut j = (**job).clone();
        j.name = local(&j.name);
        for dep in &mut j.after {
            dep.job = local(&dep.job);
        }
        *job = std::sync::Arc::new(j);
    }
    Ok(Some(cfg))
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

/// The state directory for client commands: as the daemon resolves it,
/// except that a user without a daemon of their own talks to the system's
/// (`/var/lib/rea`), where their own jobs are.
pub(crate) fn state_dir(global: &Global) -> Result<PathBuf, Failure> {
    let dir =
        rea_host::state_dir::resolve(global.state_dir.as_deref()).map_err(Failure::invalid)?;
    if global.state_dir.is_none() && !rea_host::user::is_root() {
        let system = PathBuf::from(rea_host::state_dir::SYSTEM);
        if !rea_proto::socket_path(&dir).exists() && rea_proto::socket_path(&system).exists() {
            return Ok(system);
        }
    }
    Ok(dir)
}

/// The history to query: the cluster's (`[cluster]` in the job file), or
/// the state directory `dir`'s, read from its files when this user may
/// (their own directory, or root), else asked of its daemon (a user of a
/// root daemon sees their own jobs' history that way).
pub(crate) fn history_reader(
    global: &Global,
    dir: &std::path::Path,
) -> Result<Box<dyn rea_store::history::HistoryReader>, Failure> {
    use std::os::unix::fs::MetadataExt;
    if let Some(s) = cluster::settings(global)? {
        return cluster::history_reader(&s);
    }
    let me = rustix::process::geteuid().as_raw();
    let readable = me == 0 || std::fs::metadata(dir).map_or(true, |m| m.uid() == me);
    if readable {
        return Ok(rea_store::Local::history_reader(dir));
    }
    let client = Client::connect(dir, global.client_timeout).map_err(client_failure)?;
    Ok(Box::new(rea_proto::RemoteHistory::new(client)))
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
        ClientError::Io(m) | ClientError::Timeout(m) => Failure::runtime(m),
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
        // Parameters the job does not take: the command line is wrong.
        Some("bad_params") => exit::INVALID,
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
