//! The live views' wire types (`rea top`, the web console, `rea status`):
//! an overview, pages of job summaries filtered and sorted by the daemon,
//! and a subscription that pushes what changes. They are built so that no
//! answer holds every job: a page is at most [`MAX_PAGE`] summaries, and a
//! subscriber gets deltas, never the job set again.

use serde::{Deserialize, Serialize};

use crate::protocol::{DaemonInfo, Ts};

/// The most summaries one `jobs` page carries, whatever `limit` asks.
pub const MAX_PAGE: usize = 1000;
/// A page's size when `limit` is absent.
pub const DEFAULT_PAGE: usize = 100;
/// How many outcomes a summary keeps (its sparkline).
pub const OUTCOMES: usize = 64;

/// One job as the live views show it: what the daemon keeps per job
/// (updated as runs end, not read from history) plus what the engine knows
/// now. `outcomes` is the last [`OUTCOMES`] final runs, oldest first, one
/// character each: `s` success, `f` failed, `t` timeout, `k` killed, `i`
/// interrupted, `o` out of memory, `x` skipped, `m` missed, `e` spawn
/// error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    pub name: String,
    /// The job's tenant: absent for the system's jobs, the user's name for
    /// hers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `running`, `queued`, `retry_pending`, `disabled`, `paused` or `idle`
    /// (as `status`).
    pub state: String,
    pub paused: bool,
    /// Its schedule as the file writes it (`@reboot`, `*/5 * * * *`, ...);
    /// absent for a job that only runs `after` others or by trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The zone its schedule is read in (IANA name; absent: the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub next_fire: Option<Ts>,
    /// When its pending retry is due (state `retry_pending`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Ts>,
    /// Runs in progress now.
    pub running: u32,
    /// Runs waiting (for a slot, or for the job's previous run).
    #[serde(default)]
    pub queued: u32,
    /// The jobs it runs after (its `after` list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The same entries with their condition (`{"job": .., "on":
    /// "success" | "failure" | "always"}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<rea_core::job::Dependency>,
    pub outcomes: String,
    pub consecutive_failures: u32,
    pub last_duration_ms: Option<u64>,
    /// Over the runs in `outcomes` that ran.
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    pub last_success: Option<Ts>,
    pub last_failure: Option<Ts>,
    /// When the last final run that was not skipped ended, whatever its
    /// outcome (the `last_run` sort's key).
    #[serde(default)]
    pub last_run: Option<Ts>,
}

/// How a `jobs` page is ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobSort {
    /// File order (the system's files, then users' by name).
    #[default]
    File,
    Name,
    /// Soonest first; jobs with no next fire last.
    NextFire,
    /// Most consecutive failures first.
    Failures,
    /// Longest p95 first.
    Duration,
    /// Most recent end (of a run that was not skipped) first.
    LastRun,
}

impl JobSort {
    /// Its name on the wire (and in a cursor, a URL).
    pub fn as_str(self) -> &'static str {
        match self {
            JobSort::File => "file",
            JobSort::Name => "name",
            JobSort::NextFire => "next_fire",
            JobSort::Failures => "failures",
            JobSort::Duration => "duration",
            JobSort::LastRun => "last_run",
        }
    }
}

/// `jobs`: a page of summaries. Filters combine with "and".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobsQuery {
    /// A case-insensitive substring of the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Exactly this name (a user's as she writes it): one job, found by a
    /// lookup, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// One tenant's jobs (root's view only; a user sees her own anyway):
    /// a user's name, or `system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Only jobs in this state (see [`JobSummary::state`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only jobs whose last final run failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failing: bool,
    #[serde(default)]
    pub sort: JobSort,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub descending: bool,
    /// Where the previous page ended (its `next`); absent: the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// At most this many ([`DEFAULT_PAGE`] when absent, [`MAX_PAGE`] at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// A page of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsPage {
    pub jobs: Vec<JobSummary>,
    /// How many jobs match the filters, over all pages.
    pub matching: usize,
    /// The cursor of the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Counts over the jobs the asker may see.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub jobs: usize,
    pub running: usize,
    pub queued: usize,
    pub paused: usize,
    pub disabled: usize,
    /// Jobs whose last final run failed.
    pub failing: usize,
    pub oneshots_pending: usize,
}

/// A run in progress, as the overview lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunNow {
    pub run: String,
    pub job: String,
    pub since: Option<Ts>,
    pub pid: Option<u32>,
    /// What it has used so far, from its cgroup (where the daemon has
    /// one per run): CPU, and the memory peak where that controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_kb: Option<u64>,
    /// The node running it, in cluster mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A fire to come.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Due {
    pub job: String,
    pub at: Ts,
}

/// `overview`: what `rea status` opens with and `rea top` shows first; a
/// bounded answer whatever the number of jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub daemon: DaemonInfo,
    pub counts: Counts,
    /// Runs in progress, longest running first, at most 50.
    pub running: Vec<RunNow>,
    /// Failing jobs, most consecutive failures first, at most 20.
    pub failing: Vec<JobSummary>,
    /// The next fires, soonest first, at most 10.
    pub next_due: Vec<Due>,
    /// Set when the answer holds one user's jobs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// `subscribe`: an [`Overview`] first, then [`Event`] lines as things
/// happen, until the client hangs up. `follow` adds the output of that run
/// (a run id) as [`Event::Output`] lines: a run in progress, or one that
/// waits to start (for a slot, or for its job's previous run), whose
/// output then comes from its first byte once it starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<String>,
}

/// What a subscriber is told, one per line after the overview. A subscriber
/// that reads too slowly is not waited for: what it missed is dropped and
/// counted, and the next line it gets is [`Event::Lost`] (after which a
/// client should ask for a fresh overview or page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run: String,
        job: String,
        at: Ts,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    RunEnded {
        run: String,
        job: String,
        /// The record's status (`success`, `failed`, ...).
        status: String,
        at: Ts,
        duration_ms: u64,
        exit_code: Option<i32>,
    },
    /// A job's summary changed (a run started or ended, it was paused or
    /// resumed, its next fire moved).
    Job {
        summary: Box<JobSummary>,
    },
    Paused {
        jobs: Vec<String>,
    },
    Resumed {
        jobs: Vec<String>,
    },
    /// The job file was read again: `jobs` is the count now; a client
    /// refreshes its pages.
    Reloaded {
        at: Ts,
        jobs: usize,
    },
    /// A one-shot was submitted, started, ended or cancelled.
    OneShot {
        id: String,
        state: String,
    },
    /// A cluster node joined, left or was declared dead; this node's lease.
    Node {
        node: String,
        state: String,
    },
    /// Output of the followed run. `skipped`: bytes of its output this
    /// subscriber lost before `text` (it read too slowly; the run's record
    /// keeps its captured output).
    Output {
        run: String,
        text: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        skipped: u64,
    },
    /// Events this subscriber missed because it read too slowly.
    Lost {
        events: u64,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
