//! The `rea` binary: parse the command line and hand over to one command.
//! The layers below it are crates of their own (see `rea_core`'s crate
//! documentation for the map of the workspace); this crate is the program:
//!
//! | module | owns |
//! |---|---|
//! | `cli` | the clap definitions (also used for man pages and completions) |
//! | `commands/*` | one file per subcommand, thin |
//! | `cluster` | cluster mode's settings, and the one place a backend is chosen (`rea_pg`) |
//! | `failure`, `table`, `time_text` | how commands fail; aligned tables for people; instants as people read and type them |

mod cli;
mod cluster;
mod commands;
mod failure;
mod table;
mod time_text;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::try_parse_from(logs_follow_short(std::env::args_os().collect()))
        .unwrap_or_else(|e| e.exit());
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
        Command::Kill(a) => commands::kill::run(g, a),
        Command::Pause(a) => commands::pause::run(g, a, true),
        Command::Resume(a) => commands::pause::run(g, a, false),
        Command::Reload => commands::reload::run(g),
        Command::Web => commands::web::run(g),
        Command::History(a) => commands::history::run(g, a),
        Command::Logs(a) => commands::logs::run(g, a),
        Command::Audit(a) => commands::audit::run(g, a),
        Command::Submit(a) => commands::submit::submit(g, a),
        Command::At(a) => commands::submit::at(g, a),
        Command::Cancel(a) => commands::cancel::run(g, a),
        Command::Pending(a) => commands::pending::run(g, a),
        Command::Import(a) => commands::import::run(g, a),
        Command::Edit(a) => commands::edit::run(g, a),
        Command::Top(a) => commands::top::run(g, a),
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

/// In `rea logs`, `-f` is `--follow`, as in `tail -f`, `journalctl -f`
/// and `docker logs -f` (for every other command `-f` is `--file`; `rea
/// logs` still takes `--file`, and `-f` before the command).
fn logs_follow_short(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    // Every other command line is left alone without building clap's tree
    // an extra time.
    if !(args.iter().any(|a| a == "logs") && args.iter().any(|a| a == "-f")) {
        return args;
    }
    let cli = Cli::command();
    // Global options that take a value: the word after them is not the
    // command.
    let valued: Vec<String> = cli
        .get_arguments()
        .filter(|a| a.get_action().takes_values())
        .flat_map(|a| {
            let long = a.get_long().map(|l| format!("--{l}"));
            let short = a.get_short().map(|s| format!("-{s}"));
            long.into_iter().chain(short)
        })
        .collect();
    let mut i = 1;
    while i < args.len() {
        let word = args[i].to_string_lossy();
        if word == "--" || !word.starts_with('-') {
            break;
        }
        i += if valued.iter().any(|v| *v == word) {
            2
        } else {
            1
        };
    }
    if args.get(i).is_some_and(|w| w == "logs") {
        for word in args.iter_mut().skip(i + 1) {
            if word == "--" {
                break;
            }
            if word == "-f" {
                *word = "--follow".into();
            }
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::logs_follow_short;

    fn rewrite(line: &str) -> String {
        let args = line.split(' ').map(Into::into).collect();
        let out: Vec<String> = logs_follow_short(args)
            .into_iter()
            .map(|w| w.into_string().unwrap())
            .collect();
        out.join(" ")
    }

    #[test]
    fn in_rea_logs_dash_f_is_follow_and_elsewhere_file() {
        assert_eq!(rewrite("rea logs -f backup"), "rea logs --follow backup");
        assert_eq!(rewrite("rea logs backup -f"), "rea logs backup --follow");
        assert_eq!(
            rewrite("rea -f logs logs -f backup"),
            "rea -f logs logs --follow backup"
        );
        assert_eq!(
            rewrite("rea --state-dir /s logs -f backup"),
            "rea --state-dir /s logs --follow backup"
        );
        // A job named logs, and -f as --file, elsewhere.
        assert_eq!(rewrite("rea trigger logs -f x"), "rea trigger logs -f x");
        assert_eq!(rewrite("rea -f x.toml list"), "rea -f x.toml list");
        assert_eq!(
            rewrite("rea submit -- logs -f x"),
            "rea submit -- logs -f x"
        );
        assert_eq!(rewrite("rea -- logs -f"), "rea -- logs -f");
    }
}
