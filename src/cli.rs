//! The command line, as clap definitions only: used by `main` to parse, and
//! by the man page and completion generators. No behaviour lives here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Exit statuses shared by every command (documented in rea(1)).
pub(crate) mod exit {
    /// Success.
    pub(crate) const OK: i32 = 0;
    /// A runtime failure (I/O error, a triggered job that failed without an
    /// exit code of its own).
    pub(crate) const FAILURE: i32 = 1;
    /// The job file is invalid, or the command line is wrong.
    pub(crate) const INVALID: i32 = 2;
    /// No daemon is running for this state directory.
    pub(crate) const NO_DAEMON: i32 = 3;
    /// Another daemon already holds this state directory.
    pub(crate) const LOCKED: i32 = 4;
    /// A named job (or run) does not exist.
    pub(crate) const NOT_FOUND: i32 = 5;
    /// A one-shot with this name is already pending (`rea submit --name`).
    pub(crate) const DUPLICATE: i32 = 6;
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
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every subcommand understands.
#[derive(Debug, Args, Clone)]
pub(crate) struct Global {
    /// The main job file (with jobs.d/*.toml beside it) [default: the
    /// running daemon's file, else ./jobs.toml, else /etc/rea/jobs.toml for
    /// root]
    #[arg(
        short = 'f',
        long = "file",
        env = "REA_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub(crate) file: Option<PathBuf>,
    /// Where the history log, control socket and lock live
    /// [default: $XDG_STATE_HOME/rea, ~/.local/state/rea, or /var/lib/rea for root]
    #[arg(
        long = "state-dir",
        env = "REA_STATE_DIR",
        global = true,
        value_name = "DIR"
    )]
    pub(crate) state_dir: Option<PathBuf>,
    /// How long a command waits for the daemon to answer
    #[arg(
        long = "client-timeout",
        env = "REA_CLIENT_TIMEOUT",
        global = true,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_timeout
    )]
    pub(crate) client_timeout: std::time::Duration,
}

/// `--client-timeout`: a duration as the job file writes them, more than
/// zero.
fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    match rea_core::duration::parse(text) {
        Ok(d) if d.is_zero() => Err("the timeout must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Run a job now through the daemon
    Trigger(TriggerArgs),
    /// Stop a job's run in progress (or one run by its id); it ends as killed
    ///
    /// Every run in progress of the job JOB, or the run RUN (an id from `rea
    /// status` or `rea history`), gets SIGTERM, then SIGKILL after the job's
    /// kill_grace, to its whole process group. The run is recorded as
    /// killed, "killed by operator": it is not retried and calls no
    /// on_failure hook. The job's schedule is untouched (to stop that too:
    /// rea pause). A user may kill only the runs of her own jobs.
    Kill(KillArgs),
    /// Stop starting jobs on their schedule (kept across daemon restarts)
    Pause(SelectArgs),
    /// Undo pause
    Resume(SelectArgs),
    /// Make the daemon re-read the job file now
    Reload,
    /// Where the web console is, and a one-time login link for it
    ///
    /// The daemon serves its web console on web.sock in the state
    /// directory (reach it with ssh -L 8080:/var/lib/rea/web.sock HOST),
    /// and also on [daemon] web_listen when it is set (off loopback only
    /// behind [daemon] web_proxy, whose header names the user: no link there).
    /// For that address this prints a link, good once and for two minutes,
    /// that logs its opener in as the user who ran rea web: each user sees
    /// and acts on her own jobs only, as with the CLI; users in [daemon]
    /// web_viewers may look and not act.
    Web,
    /// Past runs from the history log, newest first
    History(HistoryArgs),
    /// The captured output of a job's latest run (or of one run)
    Logs(LogsArgs),
    /// Who asked the daemon for which change, and what it answered, newest
    /// first
    ///
    /// Every state-changing request (trigger, pause, resume, cancel,
    /// submit, edit, reload, kill), refused ones included, is one entry:
    /// time, uid and user, tenant, source (cli, socket, ...), action,
    /// target and result. Root reads the state directory's audit.jsonl (in
    /// cluster mode the cluster database); any other user asks the daemon
    /// and sees only her own tenant's entries, her jobs named as she names
    /// them.
    Audit(AuditArgs),
    /// Run a command once, later: `rea submit --in 30m -- cmd args`
    Submit(SubmitArgs),
    /// Run a command once at a time: `rea at 14:30 -- cmd args`
    At(AtArgs),
    /// Cancel pending one-shot jobs
    Cancel(CancelArgs),
    /// Pending one-shot jobs, by due time
    Pending(PendingArgs),
    /// Convert crontabs (crontab -l, /etc/crontab, /etc/cron.d/*) into a job file
    Import(ImportArgs),
    /// Edit a job file safely, as crontab -e: your own jobs (through the
    /// daemon), or as root the main job file or a user's
    ///
    /// Opens a private copy in $VISUAL, else $EDITOR, else vi, and checks what
    /// you saved before anything is installed: the editor opens again with
    /// the errors (FILE:LINE:COL, counted in the lines it shows) in a comment
    /// at the top, which is taken off again; save it unchanged to give up.
    /// The copy lives in a directory of its own under $TMPDIR (else /tmp)
    /// with a random name, and is removed however the edit ends. As root
    /// without --user the main job file is replaced in place, keeping its
    /// owner and mode (a symbolic link stays one: the file it points to is
    /// replaced), and a running daemon reloads it. Anyone else, and root
    /// with --user NAME, edits users/NAME.toml through the daemon, which
    /// checks it as that user's file and installs it owned by root, mode
    /// 0600.
    Edit(EditArgs),
    /// A live view of the daemon in the terminal: overview, jobs, timeline,
    /// a run's output, one-shots, cluster nodes
    ///
    /// Talks to the daemon through its control socket only, as the other
    /// commands do: a user sees and acts on her own jobs. The job table is
    /// paged, filtered and sorted by the daemon, so it opens as fast with
    /// 100,000 jobs as with ten; changes are pushed by the daemon as they
    /// happen. Every action (run, pause, resume, cancel, kill, edit) asks
    /// y/n first and is recorded in the audit log with source "top". Keys:
    /// 1-6 or tab switch views, ? shows them all, q quits. Respects
    /// NO_COLOR; works at 80x24 and over ssh.
    Top(TopArgs),
    /// Write the man pages or the shell completions (for packagers)
    #[command(hide = true)]
    Generate(GenerateArgs),
    /// Job names, one-shot ids or tags for the word under the cursor (called
    /// by the shell completions)
    #[command(hide = true)]
    Complete(CompleteArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Aligned text for people
    Human,
    /// One JSON object per line
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Accept a job file that group or others can write
    #[arg(long)]
    pub(crate) allow_insecure: bool,
    /// Format of the daemon's own log on stderr
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    pub(crate) log_format: LogFormat,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Accept a job file that group or others can write
    #[arg(long)]
    pub(crate) allow_insecure: bool,
    /// Machine-readable output (for editors and CI): every error and warning
    /// with its position; the exit status is the same
    #[arg(long)]
    pub(crate) json: bool,
    /// Check the file alone, not this machine: do not look up each job's
    /// user or a sendmail (for CI machines that lack the production users)
    #[arg(long)]
    pub(crate) no_host_checks: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Machine-readable output (one JSON array)
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct NextArgs {
    /// A cron expression ("*/15 * * * *", "@daily", "@every 90s") or a job name
    #[arg(value_name = "EXPR|JOB")]
    pub(crate) target: String,
    /// Timezone for an expression (a job uses its own) [default: the
    /// machine's, as cron reads a crontab]
    #[arg(long, value_name = "ZONE")]
    pub(crate) tz: Option<String>,
    /// List fires strictly after this instant (RFC 3339) [default: now]
    #[arg(long, value_name = "RFC3339")]
    pub(crate) after: Option<String>,
    /// How many fire instants to print
    #[arg(short = 'n', long, default_value_t = 5, value_name = "N")]
    pub(crate) count: usize,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Only this job (or pending one-shot)
    pub(crate) job: Option<String>,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
    /// A monitoring probe (Nagios, Icinga, a cron'd check): print one line
    /// and exit 0 (OK), 1 (WARNING: the daemon runs an older job file
    /// because the new one is invalid, or cannot write its history) or 2
    /// (CRITICAL: a job's last run failed or timed out, or no daemon runs)
    #[arg(long, conflicts_with = "json")]
    pub(crate) check: bool,
    /// With --check: whose jobs count: `system` (root's default), a user's
    /// name, or `all`; a user's probe counts her own
    #[arg(long, requires = "check", value_name = "TENANT")]
    pub(crate) tenant: Option<String>,
    /// Show times in UTC instead of the machine's zone
    #[arg(long)]
    pub(crate) utc: bool,
    /// Every job, page after page (live, the first 100 are shown unless
    /// this is given; the offline view always shows every job)
    #[arg(long, conflicts_with_all = ["json", "check"])]
    pub(crate) all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TriggerArgs {
    /// The job to run
    pub(crate) job: String,
    /// Wait for the run to end and exit with its exit code
    #[arg(long)]
    pub(crate) wait: bool,
    /// Show the run's output as it comes (implies --wait)
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: write the output byte for byte even to a terminal
    #[arg(long, requires = "follow")]
    pub(crate) raw: bool,
    /// Run even if the job's overlap policy would skip or queue it
    #[arg(long)]
    pub(crate) force: bool,
    /// Pass a value of one of the job's declared parameters (its `params`)
    /// to the run as an environment variable; repeat for each. The daemon
    /// refuses undeclared names, values that do not match the parameter's
    /// pattern, and missing parameters that have no default
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub(crate) params: Vec<(String, String)>,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--param NAME=VALUE`: split at the first `=` (the value may hold more).
fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err("expected NAME=VALUE, e.g. --param DATE=2026-11-30".into()),
    }
}

#[derive(Debug, Args)]
pub(crate) struct KillArgs {
    /// A job (all its runs in progress) or a run id
    #[arg(value_name = "JOB|RUN")]
    pub(crate) target: String,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["jobs", "tag", "all"])))]
pub(crate) struct SelectArgs {
    /// Jobs by name
    pub(crate) jobs: Vec<String>,
    /// Every job with this tag
    #[arg(long, value_name = "TAG")]
    pub(crate) tag: Option<String>,
    /// Every job
    #[arg(long)]
    pub(crate) all: bool,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatusFilter {
    Started,
    Succeeded,
    Failed,
    /// As the history spells it (`timed-out` works too)
    #[value(name = "timed_out", alias = "timed-out")]
    TimedOut,
    Killed,
    Skipped,
    Interrupted,
    /// One-shots cancelled before they ran
    Cancelled,
    /// Runs the kernel's out-of-memory killer ended (`oom-killed` works too)
    #[value(name = "oom_killed", alias = "oom-killed")]
    OomKilled,
    /// Occurrences missed while the daemon was down (catch-up policy)
    Missed,
    /// Alerts raised and resolved (alert.* of the job file)
    Alert,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only this job
    pub(crate) job: Option<String>,
    /// Only runs with this status (repeatable)
    #[arg(long, value_enum, value_name = "STATUS")]
    pub(crate) status: Vec<StatusFilter>,
    /// Only runs that did not succeed (failed, timed_out, killed, interrupted, oom_killed)
    #[arg(long)]
    pub(crate) failed: bool,
    /// Only since this long ago ("2h", "-2h", "2 hours ago", "7d") or this
    /// instant: "today", "yesterday", a date ("2026-11-29") or local time
    /// ("08:00", "2026-11-29 08:00") in the machine's zone, or RFC 3339
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub(crate) since: Option<String>,
    /// Only before this long ago or this instant (the forms of --since)
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub(crate) until: Option<String>,
    /// At most this many lines
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub(crate) limit: usize,
    /// Only the runs of this user's jobs (root; a user's history is her own)
    #[arg(long, value_name = "USER")]
    pub(crate) tenant: Option<String>,
    /// Machine-readable output (JSON lines, the history schema; times in UTC)
    #[arg(long)]
    pub(crate) json: bool,
    /// Show times in UTC, and read --since/--until dates in UTC, instead of
    /// the machine's zone
    #[arg(long)]
    pub(crate) utc: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuditAction {
    Trigger,
    Pause,
    Resume,
    Cancel,
    Submit,
    Edit,
    Reload,
    Kill,
}

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Only since this long ago ("2h", "7d") or this instant (the forms of
    /// rea history --since)
    #[arg(
        long,
        visible_alias = "last",
        value_name = "DURATION|TIME",
        allow_hyphen_values = true
    )]
    pub(crate) since: Option<String>,
    /// Only before this long ago or this instant
    #[arg(long, value_name = "DURATION|TIME", allow_hyphen_values = true)]
    pub(crate) until: Option<String>,
    /// Only requests of this user (a name or a uid)
    #[arg(long, value_name = "USER")]
    pub(crate) user: Option<String>,
    /// Only this tenant's entries: "system" or a user's name
    #[arg(long, value_name = "TENANT")]
    pub(crate) tenant: Option<String>,
    /// Only this action (repeatable)
    #[arg(long, value_enum, value_name = "ACTION")]
    pub(crate) action: Vec<AuditAction>,
    /// Only entries naming this job (root names a user's job USER/JOB)
    #[arg(long, value_name = "JOB")]
    pub(crate) job: Option<String>,
    /// Only refused requests
    #[arg(long)]
    pub(crate) refused: bool,
    /// At most this many entries
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub(crate) limit: usize,
    /// Machine-readable output (JSON lines, the audit log's schema; times
    /// in UTC)
    #[arg(long)]
    pub(crate) json: bool,
    /// Show times in UTC, and read --since/--until dates in UTC
    #[arg(long)]
    pub(crate) utc: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The job
    pub(crate) job: String,
    /// A run id from `rea history` (default: the latest finished run)
    #[arg(long, value_name = "ID")]
    pub(crate) run: Option<String>,
    /// Follow the job's running run as it writes (or wait for its next
    /// run), then exit with its exit code, as `rea trigger --wait` does
    /// (in `rea logs`, -f is --follow, as in tail -f; the job file is --file)
    #[arg(short = 'F', long, conflicts_with = "run")]
    pub(crate) follow: bool,
    /// The whole record as JSON
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the output byte for byte even to a terminal (by default, on a
    /// terminal, control characters are shown as ^X, M-^X or <U+202E> so a
    /// job's output cannot drive the terminal or reorder what it shows)
    #[arg(long)]
    pub(crate) raw: bool,
}

/// What every one-shot submission may say.
#[derive(Debug, Args, Clone)]
pub(crate) struct OneShotOpts {
    /// Its id: unique among pending one-shots (a duplicate is refused, so
    /// retried submissions are safe) [default: generated]
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// Retries after a failure or timeout
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) retry: u32,
    /// Delay before the first retry (doubling after each)
    #[arg(long, value_name = "DURATION")]
    pub(crate) retry_delay: Option<String>,
    /// Cap on the retry delay
    #[arg(long, value_name = "DURATION")]
    pub(crate) retry_max_delay: Option<String>,
    /// Terminate the run after this long
    #[arg(long, value_name = "DURATION")]
    pub(crate) timeout: Option<String>,
    /// If the daemon was down when it was due and comes back more than this
    /// late, drop it instead of running it
    #[arg(long, value_name = "DURATION")]
    pub(crate) expire: Option<String>,
    /// A label for `rea pending --tag` (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub(crate) tags: Vec<String>,
    /// An environment variable for the command (repeatable); nothing else
    /// of this shell's environment is passed
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// Run the command as one `/bin/sh -c` script instead of an argv
    #[arg(long)]
    pub(crate) shell: bool,
    /// Machine-readable output
    #[arg(long)]
    pub(crate) json: bool,
    /// The command and its arguments (after --)
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["in_", "at"])))]
pub(crate) struct SubmitArgs {
    /// Run after this long ("30m", "1h30m")
    #[arg(long = "in", id = "in_", value_name = "DURATION")]
    pub(crate) in_: Option<String>,
    /// Run at this instant (RFC 3339, "YYYY-MM-DD HH:MM", "HH:MM")
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,
    /// Zone for a --at time without an offset [default: local]
    #[arg(long, value_name = "ZONE")]
    pub(crate) tz: Option<String>,
    #[command(flatten)]
    pub(crate) opts: OneShotOpts,
}

#[derive(Debug, Args)]
pub(crate) struct AtArgs {
    /// When: 14:30, 2026-12-01 10:00, an RFC 3339 instant, or now + 30m
    /// (one word or several, quoted or not)
    #[arg(value_name = "TIME", required = true, num_args = 1..)]
    pub(crate) time: Vec<String>,
    /// Zone for a time without an offset [default: local]
    #[arg(long, value_name = "ZONE")]
    pub(crate) tz: Option<String>,
    #[command(flatten)]
    pub(crate) opts: OneShotOpts,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// One-shot ids (from `rea submit` or `rea pending`)
    #[arg(required = true, value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Also terminate one that is running now
    #[arg(long)]
    pub(crate) kill: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PendingArgs {
    /// Only one-shots with this tag
    #[arg(long, value_name = "TAG")]
    pub(crate) tag: Option<String>,
    /// At most this many
    #[arg(short = 'n', long, value_name = "N")]
    pub(crate) limit: Option<usize>,
    /// Machine-readable output (times in UTC)
    #[arg(long)]
    pub(crate) json: bool,
    /// Show due times in UTC instead of the machine's zone
    #[arg(long)]
    pub(crate) utc: bool,
}

#[derive(Debug, Args)]
pub(crate) struct EditArgs {
    /// Edit this user's own job file (root only; others edit their own)
    #[arg(long, value_name = "NAME")]
    pub(crate) user: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Show times in UTC instead of the machine's zone (a job's next fire
    /// is shown in its own zone either way)
    #[arg(long)]
    pub(crate) utc: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// Crontabs to convert; "-" reads standard input (e.g. `crontab -l | rea import -`)
    #[arg(value_name = "FILE|-", required = true)]
    pub(crate) files: Vec<String>,
    /// Read every file as a system crontab (a user name after the time fields)
    /// [default: files under /etc, or whose 6th field is always a known user]
    #[arg(long, conflicts_with = "user")]
    pub(crate) system: bool,
    /// Read every file as a user crontab (`crontab -l` output)
    #[arg(long)]
    pub(crate) user: bool,
    /// The user whose crontab this is: its jobs get `user = NAME`.
    /// `crontab -l -u alice` output does not say whose it is, so without
    /// --owner the jobs have no `user` and run as rea's user. Needs --user
    #[arg(long, value_name = "NAME", requires = "user")]
    pub(crate) owner: Option<String>,
    /// Write the job file here instead of standard output
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        conflicts_with = "install"
    )]
    pub(crate) output: Option<PathBuf>,
    /// Install the result as a user's own job file (users/NAME.toml) through
    /// the daemon, replacing it: your own (`crontab -l | rea import --user
    /// --install -`), or as root the --owner's
    #[arg(long, requires = "user")]
    pub(crate) install: bool,
    /// With --install: install even a crontab with no jobs, which empties
    /// the user's job file (`crontab -l` of someone with no crontab prints
    /// nothing, so by default that is refused)
    #[arg(long, requires = "install")]
    pub(crate) allow_empty: bool,
    /// Overwrite the --output file if it exists
    #[arg(long)]
    pub(crate) force: bool,
    /// Zone for jobs without CRON_TZ (cron uses the machine's zone)
    #[arg(long, value_name = "ZONE", default_value = "local")]
    pub(crate) timezone: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Generated {
    /// rea.1, one rea-COMMAND.1 per subcommand, rea-jobs.5
    Man,
    /// bash (rea.bash), zsh (_rea), fish (rea.fish)
    Completions,
}

#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// What to write
    #[arg(value_enum)]
    pub(crate) what: Generated,
    /// The directory to write into (created if missing)
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    /// Which of WORDS is under the cursor (0 is the command's name)
    #[arg(long, value_name = "N")]
    pub(crate) index: usize,
    /// The command line as the shell split it
    #[arg(last = true, value_name = "WORDS")]
    pub(crate) words: Vec<String>,
}
