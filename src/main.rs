//! The `rea` binary: parse the command line and hand over to one command.
//! The layers below it are crates of their own (see `rea_core`'s crate
//! documentation for the map of the workspace); this crate is the program:
//!
//! | module | owns |
//! |---|---|
//! | `cli` | the clap definitions (also used for man pages and completions) |
//! | `commands/*` | one file per subcommand, thin |
//! | `daemon/*` | `rea run`: the event loop and what it does with the engine's actions |
//! | `executor` | spawning and supervising one run's process group |
//! | `control/*` | the local socket: typed protocol, server, blocking client |
//! | `host` | facts about the machine: users, sendmail, the job file's checks |
//! | `journald` | runs' output in the systemd journal (`job_output = "journal"`) |
//! | `state_dir`, `watch`, `timer`, `notify` | the state directory and its lock, the job-file watcher, the wall-clock timer, systemd notification |
//! | `failure`, `table`, `time_text` | how commands fail; aligned tables for people; instants as people read and type them |

mod cli;
mod cluster;
mod commands;
mod control;
mod daemon;
mod executor;
mod failure;
mod host;
mod jobfiles;
mod journald;
mod notify;
mod state_dir;
mod table;
mod time_text;
mod timer;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        if let Some(hint) = hint_for(&e) {
            let _ = e.print();
            eprintln!("{hint}");
            std::process::exit(cli::exit::INVALID);
        }
        e.exit()
    });
    if !matches!(cli.command, Command::Run(_)) {
        // `rea status | head`: a closed pipe ends a command quietly, as it
        // ends `cat` or `grep`. Rust ignores SIGPIPE, which turns every
        // later print into a panic; the daemon keeps ignoring it (a client
        // hanging up must not kill it).
        // SAFETY: restoring a default disposition, before any thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let g = &cli.global;
    let result = match &cli.command {
        Command::Run(a) => commands::run::run(g, a),
        Command::Check(a) => commands::check::run(g, a),
        Command::List(a) => commands::list::run(g, a),
        Command::Next(a) => commands::next::run(g, a),
        Command::Status(a) => commands::status::run(g, a),
        Command::Trigger(a) => commands::trigger::run(g, a),
        Command::Pause(a) => commands::pause::run(g, a, true),
        Command::Resume(a) => commands::pause::run(g, a, false),
        Command::Reload => commands::reload::run(g),
        Command::History(a) => commands::history::run(g, a),
        Command::Logs(a) => commands::logs::run(g, a),
        Command::Submit(a) => commands::submit::submit(g, a),
        Command::At(a) => commands::submit::at(g, a),
        Command::Cancel(a) => commands::cancel::run(g, a),
        Command::Pending(a) => commands::pending::run(g, a),
        Command::Import(a) => commands::import::run(g, a),
        Command::Edit(a) => commands::edit::run(g, a),
        Command::Generate(a) => commands::generate::run(a),
        Command::Complete(a) => commands::complete::run(g, a),
    };
    match result {
        Ok(code) => code,
        Err(failure) => {
            let text = failure.to_string();
            if !text.is_empty() {
                eprintln!("{text}");
            }
            failure.exit_code()
        }
    }
}

/// `rea logs -f JOB` reads JOB as the job file (`-f` is `--file` for every
/// command), then misses the job: say what was meant.
fn hint_for(e: &clap::Error) -> Option<&'static str> {
    let args: Vec<String> = std::env::args().collect();
    let logs = args.iter().position(|a| a == "logs")?;
    let missing = e.kind() == clap::error::ErrorKind::MissingRequiredArgument;
    (missing && args[logs..].iter().any(|a| a == "-f"))
        .then_some("hint: -f is --file; to follow a job's output: rea logs --follow JOB (or -F)")
}
