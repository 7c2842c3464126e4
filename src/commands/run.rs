//! `rea run`: the foreground daemon.

use crate::cli::{exit, Global, LogFormat, RunArgs};
use crate::daemon::{self, Options, StartError};
use crate::failure::{self, Failure, Outcome};
use crate::state_dir;

pub(crate) fn run(global: &Global, args: &RunArgs) -> Outcome {
    init_logging(args.log_format);
    let state_dir = state_dir::resolve(global.state_dir.as_deref()).map_err(Failure::invalid)?;
    let opts = Options {
        file: super::job_file(global),
        state_dir,
        allow_insecure: args.allow_insecure,
    };
    match daemon::run(opts) {
        Ok(()) => failure::ok(),
        Err(StartError::Config(diags)) => Err(super::invalid_file(
            &diags,
            Some(format!(
                "not starting: the job file has {} error(s)",
                diags.len()
            )),
        )),
        Err(StartError::Locked(m)) => Err(Failure::new(exit::LOCKED, m)),
        Err(StartError::Other(m)) => Err(Failure::runtime(m)),
    }
}

/// Logs go to stderr: human lines by default, JSON with `--log-format json`.
/// `RUST_LOG` may narrow or widen them (default `info`).
fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Human => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
