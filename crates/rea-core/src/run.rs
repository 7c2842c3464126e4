//! A run as plain data: what to execute ([`Program`]) and how it went
//! ([`Outcome`]). The executor in the `rea` program produces these from
//! real processes; the engine turns them into history records.

use chrono::{DateTime, Utc};

/// What to execute.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// `shell -c script`.
    Shell { shell: String, script: String },
    /// Executed directly, no shell (one-shot jobs).
    Argv(Vec<String>),
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
    /// When the leader exited (stragglers may have been cleaned up after).
    pub ended: DateTime<Utc>,
    pub termination: Termination,
    /// The timeout fired (the group was terminated because of it).
    pub timed_out: bool,
    /// `RunHandle::terminate` or `RunHandle::kill` was called before the
    /// outcome was settled (replace, shutdown, kill).
    pub terminated: bool,
    pub output: Output,
    pub usage: Usage,
}
