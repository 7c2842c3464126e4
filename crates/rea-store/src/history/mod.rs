//! The run history: what the daemon appends (one [`Record`] per event) and
//! the questions the commands and the daemon's start-up ask of it. The
//! daemon sees only [`HistoryWriter`] and the queries only
//! [`HistoryReader`]; the embedded backend is JSON lines in the state
//! directory (`history.jsonl`, rotated by size to `history.jsonl.1` …,
//! read backwards so queries stay fast on a huge log, needing no daemon and
//! tolerating a torn last line). A database backend implements the same two
//! traits and passes the same conformance kit (`crate::conformance`).
//!
//! What does not live here: formatting for people (the commands) and
//! deciding what to do with the answers (the daemon).

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use rea_core::record::{Event, Record, RunStatus, Trigger};
use serde::Serialize;

mod days;
mod index;
mod jsonl_reader;
mod jsonl_writer;
mod rev_lines;
mod sorted;
mod tenant_logs;

pub use days::{counted, naive_days, DayCount, DAYS_DIR, KEEP_DAYS};
pub use index::index_file;
pub use jsonl_reader::JsonlReader;
pub use jsonl_writer::JsonlHistory;
pub use rev_lines::{ReadAt, RevLines};
pub use tenant_logs::TenantLogs;

/// What the daemon needs from a history backend: append one event, and say
/// how writing goes. Kept this narrow on purpose (see the module doc).
pub trait HistoryWriter: Send {
    /// Appends one record. On error the backend keeps the record (in a
    /// bounded backlog) and tries again on the next append; the error is
    /// for the log.
    fn append(&mut self, record: &Record) -> io::Result<()>;

    /// `[daemon] history_max_bytes` / `history_files` changed. Backends
    /// without rotation ignore it.
    fn set_rotation(&mut self, max_bytes: u64, max_files: u32) {
        let _ = (max_bytes, max_files);
    }

    /// How writing goes, for `rea status` and the metrics.
    fn health(&self) -> WriterHealth;
}

/// How a history writer is doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterHealth {
    /// Records waiting in memory because writing failed.
    pub backlog: usize,
    /// Records dropped because the backlog was full.
    pub dropped: u64,
    /// The most recent failure, if any.
    pub last_error: Option<WriteFailure>,
}

/// The most recent failure of a writer, for `rea status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    pub at: DateTime<Utc>,
    pub message: String,
}

/// Where users' tenants keep their logs: `tenants/NAME/` in the state
/// directory, each a log of its own (`history.jsonl`, rotated and indexed
/// as the system's), so that a user's runs only ever rotate out her own
/// records. The system's log stays in the state directory itself, with
/// the records written before tenants had their own logs.
pub const TENANTS_DIR: &str = "tenants";

/// The directory of user `user`'s log in a state directory; `None` for a
/// name that cannot be one directory (empty, `.`, `..`, a `/` or a NUL),
/// whose records then stay in the system's log.
pub fn tenant_dir(state_dir: &Path, user: &str) -> Option<PathBuf> {
    let one_component =
        !user.is_empty() && user != "." && user != ".." && !user.contains(['/', '\0']);
    one_component.then(|| state_dir.join(TENANTS_DIR).join(user))
}

/// The path of the live log in a state directory.
pub fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("history.jsonl")
}

/// The path of rotated log number `n` (1 = the most recently rotated).
pub fn rotated_path(state_dir: &Path, n: u32) -> PathBuf {
    state_dir.join(format!("history.jsonl.{n}"))
}

/// Records kept in memory while the log cannot be written (disk full, EIO…).
pub const BACKLOG_MAX_RECORDS: usize = 10_000;
/// Bytes kept in memory for the same reason: a record may carry 64 KiB+ of
/// output, so a record count alone could pin hundreds of MiB.
pub const BACKLOG_MAX_BYTES: usize = 64 << 20;
/// How much the backwards reader reads per `pread`.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

/// What `rea history` asks for. Results are newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Query {
    pub job: Option<String>,
    /// Empty = any; otherwise only run lines with one of these statuses.
    pub statuses: Vec<RunStatus>,
    /// Only lines written at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Only lines written before this instant.
    pub until: Option<DateTime<Utc>>,
    pub limit: Option<usize>,
    /// Only `event: run` lines (no daemon/config/missed events).
    pub runs_only: bool,
    /// Also `missed` lines, whatever `statuses` and `runs_only` say
    /// (`rea history` shows them: they answer "why did it not run?").
    pub with_missed: bool,
    /// Also `alert` lines (an alert raised or resolved), whatever
    /// `statuses` and `runs_only` say (`rea history` shows them beside the
    /// runs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_alerts: bool,
    /// Only records of this user's jobs (qualified `NAME/job`, see
    /// `rea_core::tenant`): what a user's own `rea history` reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl Query {
    /// Whether a record passes every filter (`limit` aside).
    pub fn matches(&self, record: &Record) -> bool {
        self.job
            .as_deref()
            .is_none_or(|job| record.job.as_deref() == Some(job))
            && self.tenant.as_deref().is_none_or(|t| {
                record
                    .job
                    .as_deref()
                    .is_some_and(|j| rea_core::tenant::Tenant::User(t).owns(j))
            })
            && self.since.is_none_or(|since| record.ts >= since)
            && self.until.is_none_or(|until| record.ts < until)
            && ((self.with_missed && record.event == Event::Missed)
                || (self.with_alerts && record.event == Event::Alert)
                || ((self.statuses.is_empty()
                    || record.status.is_some_and(|s| self.statuses.contains(&s)))
                    && (!self.runs_only || record.event == Event::Run)))
    }
}

/// The last final run of a job, as `rea status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub run: Option<String>,
    pub attempt: Option<u32>,
    pub trigger: Option<Trigger>,
    pub status: RunStatus,
    pub scheduled: Option<DateTime<Utc>>,
    pub started: Option<DateTime<Utc>>,
    pub ended: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// Per-job totals for the offline `rea status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSummary {
    /// The newest final run line that is not `skipped`.
    pub last: Option<RunSummary>,
    /// `failed`/`timed_out`/`oom_killed` final lines since the last `succeeded` one
    /// (each retry attempt counts; killed/interrupted neither count nor reset).
    pub consecutive_failures: u64,
    /// Final run lines other than `skipped` in the whole history.
    pub total_runs: u64,
    /// `skipped` run lines (overlap policy) in the whole history.
    pub skipped: u64,
    pub last_success: Option<DateTime<Utc>>,
}

/// Per job, the latest occurrence the schedule already took care of; and
/// when the previous daemon started.
pub type LastOccurrences = (HashMap<String, DateTime<Utc>>, Option<DateTime<Utc>>);

/// The questions the commands and the daemon's start-up ask the history.
/// The JSON-lines file answers them by reading backwards; a database
/// backend answers them with indexed queries.
///
/// A backend keeps either lines or runs. A log of lines (the JSON-lines
/// file) answers with every record as appended. A store of runs (the
/// cluster database: a row per run, updated in place) keeps the runs it
/// granted and answers with one record per run, its newest line: a run
/// that ended is no longer `started`, "newest first" is the order in which
/// the store granted the runs, and the run's id (`cluster_run`, and `run`
/// unless the store keeps the id its node gave the run), `fence`,
/// `scheduled` and `ts` are the store's, on its clock; it keeps
/// no daemon starts, so a run is unfinished while its newest line is
/// `started`. `crate::conformance` checks each kind against the same
/// oracle.
/// Every record a streaming query hands out, gathered: the
/// [`HistoryReader::query`] of a backend that streams
/// ([`HistoryReader::query_each`]).
pub fn collect(
    each: impl FnOnce(&mut dyn FnMut(Record) -> ControlFlow<()>) -> io::Result<()>,
) -> io::Result<Vec<Record>> {
    let mut found = Vec::new();
    each(&mut |record| {
        found.push(record);
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

pub trait HistoryReader {
    /// Matching records, newest first.
    fn query(&self, query: &Query) -> io::Result<Vec<Record>>;

    /// [`Self::query`] handing each record to `visit` as it is read, until
    /// `visit` breaks: what a streamed answer needs, so that a query's cost
    /// never has to sit in memory whole. Backends that cannot stream
    /// answer from [`Self::query`].
    fn query_each(
        &self,
        query: &Query,
        visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
    ) -> io::Result<()> {
        for record in self.query(query)? {
            if visit(record).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// The newest line of a run: its final line, or its `started` line if
    /// it has not ended (`rea logs --run ID`).
    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>>;

    /// The newest final, not `skipped`, run line of a job (`rea logs JOB`:
    /// a skipped run has no output to show).
    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>>;

    /// `started` lines without a final line, written since the newest
    /// `daemon_started` line; newest first. Call before appending this
    /// daemon's own `daemon_started`, or nothing will be found.
    fn unfinished_runs(&self) -> io::Result<Vec<Record>>;

    /// For each named job the latest `scheduled` instant of a run triggered
    /// by `schedule` or `catch_up`, or of a `missed` line; plus the `ts` of
    /// the newest `daemon_started`. Call before appending this daemon's own
    /// `daemon_started`.
    fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences>;

    /// Per-job totals over the whole history, keyed by job name.
    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>>;

    /// Like `job_summaries`, but may stop reading once every job in `jobs`
    /// has its last run and a success (so its failure streak is known): what
    /// `rea status` and the daemon's start need, without reading a huge log
    /// to its beginning. `total_runs` and `skipped` then count only what was
    /// read.
    fn recent_summaries(&self, jobs: &HashSet<String>) -> io::Result<HashMap<String, JobSummary>> {
        let _ = jobs;
        self.job_summaries()
    }

    /// The final runs of `job` (`skipped` aside), counted day by day in
    /// `zone` from `from` to `to` inclusive, the days without runs left
    /// out: the web console's heatmap. A backend answers it without
    /// reading the job's records where it can (the JSON-lines log keeps a
    /// daily roll-up, see `days`; the cluster database a roll-up table
    /// kept by a trigger); this default reads them.
    fn days(
        &self,
        job: &str,
        zone: chrono_tz::Tz,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> io::Result<Vec<DayCount>> {
        let start = |d: chrono::NaiveDate| {
            d.and_time(chrono::NaiveTime::MIN)
                .and_local_timezone(zone)
                .earliest()
                .map(|t| t.to_utc())
        };
        let query = Query {
            job: Some(job.to_string()),
            statuses: RunStatus::FINAL.to_vec(),
            // A day either side: a zone's midnight may not exist (DST).
            since: start(from - chrono::Duration::days(1)),
            until: start(to + chrono::Duration::days(2)),
            runs_only: true,
            ..Default::default()
        };
        let records = self.query(&query)?;
        Ok(naive_days(&records, job, zone, from, to))
    }

    /// Lines the last call skipped because they did not parse (a torn last
    /// line after kill -9, garbage). Lines a query's cheap pre-filter ruled
    /// out are never parsed, so they are not counted. Backends that cannot
    /// have malformed lines say 0.
    fn malformed(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
