//! The `rea` binary: parse the command line and hand over to one command.

use clap::Parser;

use rea::cli::{Cli, Command};
use rea::commands;

fn main() {
    let cli = Cli::parse();
    let g = &cli.global;
    let code = match &cli.command {
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
        Command::Generate(a) => commands::generate::run(a),
    };
    std::process::exit(code);
}
