//! The command line, as clap definitions only: used by `main` to parse, and
//! by the man page and completion generators. No behaviour lives here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit statuses shared by every command (documented in rea(1)).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// A runtime failure (I/O error, a triggered job that failed without an
    /// exit code of its own).
    pub const FAILURE: i32 = 1;
    /// The job file is invalid, or the command line is wrong.
    pub const INVALID: i32 = 2;
    /// No daemon is running for this state directory.
    pub const NO_DAEMON: i32 = 3;
    /// Another daemon already holds this state directory.
    pub const LOCKED: i32 = 4;
    /// A named job (or run) does not exist.
    pub const NOT_FOUND: i32 = 5;
}

#[derive(Debug, Parser)]
#[command(
    name = "rea",
    version,
    about = "A cron replacement for servers: exact schedules, retries, timeouts, and a history you can query",
    long_about = None,
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand understands.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// The job file [default: ./jobs.toml]
    #[arg(
        short = 'f',
        long = "file",
        env = "REA_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub file: Option<PathBuf>,
    /// Where the history log, control socket and lock live
    /// [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]
    #[arg(
        long = "state-dir",
        env = "REA_STATE_DIR",
        global = true,
        value_name = "DIR"
    )]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground (for systemd, containers, a terminal)
    Run(RunArgs),
    /// Validate the job file; exit 2 with every error as FILE:LINE:COL
    Check(CheckArgs),
    /// Jobs, their schedules and next fire times
    List(ListArgs),
    /// The next fire instants of a cron expression or of a job
    Next(NextArgs),
    /// Live state of jobs (from the daemon, or offline from the history log)
    Status(StatusArgs),
    /// Convert crontabs (crontab -l, /etc/crontab, /etc/cron.d/*) into a job file
    Import(ImportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Aligned text for people
    Human,
    /// One JSON object per line
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Format of the daemon's own log on stderr
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Accept a job file that group or others can write
    #[arg(long)]
    pub allow_insecure: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Machine-readable output (one JSON array)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NextArgs {
    /// A cron expression ("*/15 * * * *", "@daily", "@every 90s") or a job name
    #[arg(value_name = "EXPR|JOB")]
    pub target: String,
    /// Timezone for an expression (a job uses its own) [default: UTC]
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// List fires strictly after this instant (RFC 3339) [default: now]
    #[arg(long, value_name = "RFC3339")]
    pub after: Option<String>,
    /// How many fire instants to print
    #[arg(short = 'n', long, default_value_t = 5, value_name = "N")]
    pub count: usize,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this job
    pub job: Option<String>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Crontabs to convert; "-" reads standard input (e.g. `crontab -l | rea import -`)
    #[arg(value_name = "FILE|-", required = true)]
    pub files: Vec<String>,
    /// Read every file as a system crontab (a user name after the time fields)
    /// [default: files under /etc, or whose 6th field is always a known user]
    #[arg(long, conflicts_with = "user")]
    pub system: bool,
    /// Read every file as a user crontab (`crontab -l` output)
    #[arg(long)]
    pub user: bool,
    /// Write the job file here instead of standard output
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Overwrite the --output file if it exists
    #[arg(long)]
    pub force: bool,
    /// Zone for jobs without CRON_TZ (cron uses the machine's zone)
    #[arg(long, value_name = "ZONE", default_value = "local")]
    pub timezone: String,
}
