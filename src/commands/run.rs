//! `rea run`: the foreground daemon.

use rea_daemon::{Options, StartError};
use rea_host::state_dir;

use crate::cli::{exit, Global, LogFormat, RunArgs};
use crate::failure::{self, CommandResult, Failure};

pub(crate) fn run(global: &Global, args: &RunArgs) -> CommandResult {
    init_logging(args.log_format);
    let state_dir = state_dir::resolve(global.state_dir.as_deref()).map_err(Failure::invalid)?;
    let opts = Options {
        file: super::job_file(global),
        state_dir,
        allow_insecure: args.allow_insecure,
        cluster: Some(crate::cluster::start_node()),
    };
    match rea_daemon::run(opts) {
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
///
/// Under systemd, stderr is usually a stream into the journal, which stamps
/// each line itself and reads a leading `<N>` as its syslog priority (what
/// `sd-daemon.h` defines). So when stderr is that stream (see
/// [`stderr_is_the_journal`]) each line starts with its level's priority
/// and carries no timestamp of ours: `journalctl -p warning` then finds
/// the warnings and errors, and the journal's time is the only one.
fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let journal = stderr_is_the_journal();
    let ansi = !journal
        && std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi);
    let plain = tracing_subscriber::fmt::format()
        .with_target(false)
        .with_ansi(false);
    let _ = match (format, journal) {
        (LogFormat::Human, false) => builder.try_init(),
        (LogFormat::Json, false) => builder.json().flatten_event(true).try_init(),
        (LogFormat::Human, true) => builder
            .event_format(journal::Prefixed(plain.without_time().with_level(false)))
            .try_init(),
        (LogFormat::Json, true) => builder
            .event_format(journal::Prefixed(
                plain.json().flatten_event(true).without_time(),
            ))
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .try_init(),
    };
}

/// Whether stderr is the journal's stream. systemd sets `JOURNAL_STREAM`
/// to `DEVICE:INODE` of the stream it connected stdout/stderr to; stderr
/// counts only if it is still that very file (a redirect in a wrapper
/// script, or a child that inherited the variable, makes it not).
fn stderr_is_the_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // `st_dev` and `st_ino` are u64 here, narrower on some platforms.
    #[allow(clippy::useless_conversion)]
    match rustix::fs::fstat(std::io::stderr()) {
        Ok(st) => u64::from(st.st_dev) == dev && u64::from(st.st_ino) == ino,
        Err(_) => false,
    }
}

/// The journal's line format.
mod journal {

    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
    use tracing_subscriber::registry::LookupSpan;

    /// The syslog priority of a level, as `sd-daemon.h` spells it: `<3>`
    /// SD_ERR, `<4>` SD_WARNING, `<6>` SD_INFO, `<7>` SD_DEBUG.
    fn priority(level: Level) -> &'static str {
        match level {
            Level::ERROR => "<3>",
            Level::WARN => "<4>",
            Level::INFO => "<6>",
            _ => "<7>",
        }
    }

    /// An inner format with the event's priority before every line: the
    /// journal makes one entry per line, and a continuation line (an
    /// error's `hint:`) must keep the priority of its first line.
    pub(super) struct Prefixed<F>(pub(super) F);

    impl<S, N, F> FormatEvent<S, N> for Prefixed<F>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
        F: FormatEvent<S, N>,
    {
        fn format_event(
            &self,
            ctx: &FmtContext<'_, S, N>,
            mut writer: Writer<'_>,
            event: &Event<'_>,
        ) -> std::fmt::Result {
            let mut text = String::new();
            self.0.format_event(ctx, Writer::new(&mut text), event)?;
            let prefix = priority(*event.metadata().level());
            for line in text.lines() {
                writer.write_str(prefix)?;
                writer.write_str(line)?;
                writer.write_char('\n')?;
            }
            Ok(())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn levels_map_to_sd_daemon_priorities() {
            assert_eq!(priority(Level::ERROR), "<3>");
            assert_eq!(priority(Level::WARN), "<4>");
            assert_eq!(priority(Level::INFO), "<6>");
            assert_eq!(priority(Level::DEBUG), "<7>");
            assert_eq!(priority(Level::TRACE), "<7>");
        }
    }
}
