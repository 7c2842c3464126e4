//! The run history: an append-only JSON-lines log in the state directory
//! (`history.jsonl`, rotated by size to `history.jsonl.1` …), read backwards
//! by the query commands so they stay fast on a huge log. Readers never need
//! the daemon and tolerate a torn last line.
//!
//! The daemon only sees the narrow `HistoryStore` trait, so a shared
//! database backend can replace the file later without touching the loop.
//!
//! INTERFACE STUB — the history helper fills in the bodies.

use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Version of the line schema below; bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// What a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A state change of a run; `status` says which.
    Run,
    /// Occurrences that passed while the daemon was down or the clock jumped,
    /// not run because of the job's `catch_up` policy.
    Missed,
    DaemonStarted,
    DaemonStopped,
    ConfigLoaded,
    ConfigRejected,
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Schedule,
    Retry,
    Manual,
    CatchUp,
    Reboot,
    Oneshot,
}

/// The states of a run. `Started` is the only non-final one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Started,
    Succeeded,
    Failed,
    TimedOut,
    Killed,
    Skipped,
    Interrupted,
}

impl RunStatus {
    pub fn is_final(self) -> bool {
        self != RunStatus::Started
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Started => "started",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Killed => "killed",
            RunStatus::Skipped => "skipped",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// One line of the log. Fields that do not apply to an event are omitted
/// from the JSON. A final run line is self-contained (it repeats what the
/// `started` line said) so a reader never has to join lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    /// When the line was written.
    pub ts: DateTime<Utc>,
    pub event: Event,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// The occurrence this run belongs to (for retries: the original one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Time spent waiting for a `max_concurrent` slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// Random start delay applied (job `jitter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Captured stdout+stderr, bounded (head … marker … tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Bytes the run wrote in total (may exceed what `output` keeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_cpu_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_cpu_ms: Option<u64>,
    /// Why: skip reason, spawn error, config error text, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Counts: missed occurrences, jobs loaded, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Event-specific extras (config_loaded counts, daemon pid/version, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl Record {
    /// A line of `event` at `ts` with every optional field empty.
    pub fn new(event: Event, ts: DateTime<Utc>) -> Record {
        Record {
            v: SCHEMA_VERSION,
            ts,
            event,
            job: None,
            run: None,
            attempt: None,
            trigger: None,
            status: None,
            scheduled: None,
            started: None,
            ended: None,
            duration_ms: None,
            waited_ms: None,
            jitter_ms: None,
            pid: None,
            exit_code: None,
            signal: None,
            output: None,
            output_bytes: None,
            max_rss_kb: None,
            user_cpu_ms: None,
            sys_cpu_ms: None,
            reason: None,
            count: None,
            detail: None,
        }
    }
}

/// What the daemon needs from a history backend: append one event. Kept this
/// narrow on purpose (see module doc).
pub trait HistoryStore: Send {
    fn append(&mut self, record: &Record) -> io::Result<()>;
}

/// The path of the live log in a state directory.
pub fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("history.jsonl")
}
