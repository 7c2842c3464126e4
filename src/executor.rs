//! Running one job: `shell -c command` (or an argv) in its own process group,
//! stdin from /dev/null, bounded output capture that never blocks the child,
//! timeout with SIGTERM → grace → SIGKILL to the whole group, and the child's
//! rusage from wait4. Decides no policy: the daemon says what and when.
//!
//! INTERFACE STUB — the executor helper fills in the bodies.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// What to execute.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// `shell -c script`.
    Shell { shell: String, script: String },
    /// Executed directly, no shell (one-shot jobs).
    Argv(Vec<String>),
}

/// Everything the executor needs for one run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub program: Program,
    /// Added to (and overriding) the daemon's own environment.
    pub env: Vec<(String, String)>,
    pub dir: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// SIGTERM → this long → SIGKILL.
    pub kill_grace: Duration,
    /// Bytes of combined stdout+stderr kept (head and tail).
    pub output_limit: usize,
    /// Fed to the child's stdin, then closed; None = /dev/null.
    pub stdin: Option<Vec<u8>>,
}

/// The child is running.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub pid: u32,
    pub at: DateTime<Utc>,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
}

/// Resource use of the child (its whole tree that was waited for), from wait4.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub max_rss_kb: u64,
    pub user_ms: u64,
    pub sys_ms: u64,
}

/// Captured output: `text` holds the head, a `… N bytes omitted …` marker
/// when needed, and the tail; `total_bytes` is all the child wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub text: String,
    pub total_bytes: u64,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub started: Started,
    pub ended: DateTime<Utc>,
    pub termination: Termination,
    /// The timeout fired (the group was terminated because of it).
    pub timed_out: bool,
    /// `RunHandle::terminate` was called (replace, shutdown, kill).
    pub terminated: bool,
    pub output: Output,
    pub usage: Usage,
}

/// Lets the daemon stop a run early. Cloneable, cheap.
#[derive(Debug, Clone)]
pub struct RunHandle {
    pub pid: u32,
}

impl RunHandle {
    /// SIGTERM to the group, then SIGKILL after the spec's grace.
    pub fn terminate(&self) {}
    /// SIGKILL to the group now.
    pub fn kill(&self) {}
}

/// Starts the run. Must be called inside a Tokio runtime. Errors are spawn
/// failures (shell missing, dir missing) as a sentence for people.
#[allow(clippy::type_complexity)]
pub fn spawn(
    _spec: RunSpec,
) -> Result<(Started, RunHandle, std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>), String> {
    Err("executor stub".to_string())
}
