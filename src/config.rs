//! The job file (`jobs.toml`): its schema, defaults, and validation that
//! reports every problem at once as `FILE:LINE:COL: message` with a hint.
//! Reads the file and nothing else: no clock, no other disk access.
//!
//! INTERFACE STUB — the config helper fills in `parse`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;

use crate::backoff::RetryPolicy;
use crate::schedule::Schedule;

/// A whole, valid job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The path as the user gave it (used in messages and status).
    pub path: PathBuf,
    pub daemon: DaemonConfig,
    /// Jobs in file order.
    pub jobs: Vec<Job>,
}

/// `[daemon]`: settings of `rea run` itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// Runs allowed at once across all jobs. Default 8.
    pub max_concurrent: usize,
    /// On SIGTERM, how long running jobs may finish before their groups are
    /// terminated. Default 30s.
    pub shutdown_grace: Duration,
    /// Rotate `history.jsonl` when it grows past this. Default 64 MiB.
    pub history_max_bytes: u64,
    /// Rotated history files kept (`history.jsonl.1` ..). Default 5.
    pub history_files: u32,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            max_concurrent: 8,
            shutdown_grace: Duration::from_secs(30),
            history_max_bytes: 64 * 1024 * 1024,
            history_files: 5,
        }
    }
}

/// What to do when a job is due while a previous run of it still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Record a `skipped` run and do nothing (default).
    #[default]
    Skip,
    /// Run after the current one; at most one waits.
    Queue,
    /// Start another run alongside.
    Allow,
    /// Terminate the running one (as on timeout), then start.
    Replace,
}

/// What to do with occurrences missed while the daemon was down (or the
/// wall clock jumped forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// cron's behaviour: missed occurrences are recorded as missed, not run.
    #[default]
    None,
    /// anacron / systemd `Persistent=`: one run if any occurrence was missed.
    Once,
    /// Each missed occurrence, up to `catch_up_limit`.
    All,
}

/// One `[jobs.NAME]` table with `[defaults]` applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    /// The parsed schedule.
    pub schedule: Schedule,
    pub command: String,
    /// Shell that runs `command` as `shell -c command`. Default `/bin/sh`.
    pub shell: String,
    /// Zone the schedule is evaluated in. Default UTC.
    pub timezone: Tz,
    /// The zone as written (`"local"` stays `"local"` for display).
    pub timezone_name: String,
    /// None = no timeout.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL on timeout/replace/shutdown. Default 10s.
    pub kill_grace: Duration,
    pub overlap: Overlap,
    pub retry: RetryPolicy,
    pub catch_up: CatchUp,
    /// Bound for `catch_up = "all"`. Default 10.
    pub catch_up_limit: u32,
    /// Random start delay in [0, jitter]. Default 0.
    pub jitter: Duration,
    /// defaults.env overlaid with the job's env.
    pub env: BTreeMap<String, String>,
    /// Working directory; None = the daemon's.
    pub dir: Option<PathBuf>,
    pub tags: Vec<String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// Bytes of stdout+stderr kept per run (head and tail). Default 64 KiB.
    pub output_limit: usize,
}

/// One problem in the file, located. `Display` is
/// `FILE:LINE:COL: message` followed by an indented `hint:` line if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub col: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Reads and validates the file at `path`.
pub fn load(path: &Path) -> Result<Config, Vec<Diagnostic>> {
    let display = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        vec![Diagnostic { file: display.clone(), line: 1, col: 1, message: format!("cannot read the job file: {e}"), hint: None }]
    })?;
    parse(&bytes, path)
}

/// Validates the file's contents; `path` is used for messages.
pub fn parse(_src: &[u8], _path: &Path) -> Result<Config, Vec<Diagnostic>> {
    unimplemented!("config helper")
}
