//! The run history's vocabulary as plain data: one [`Record`] per event
//! (a run's state change, missed occurrences, daemon and configuration
//! events), with the statuses and triggers it names. The engine speaks it,
//! the stores persist it (`rea-store` writes it as one JSON line each) and
//! the commands read it back; its serde form *is* the documented history
//! schema, so a field added here is a field added to every line.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The most output a run keeps in its record (`output_limit` may not ask
/// for more): a history line stays small enough for readers to hold.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// The longest line a history reader holds in memory; a longer line
/// (garbage, a torn write, a hand edit) is skipped as malformed without
/// being held. Writers keep their lines within it (a record whose output
/// would escape to more is written with less of it).
pub const MAX_LINE_BYTES: usize = 4 * MAX_OUTPUT_BYTES;

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
    /// An alert raised or resolved (`alert` says which kind and which,
    /// `reason` why): see [`crate::alert`].
    Alert,
}

impl Event {
    /// The name the history uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Run => "run",
            Event::Missed => "missed",
            Event::DaemonStarted => "daemon_started",
            Event::DaemonStopped => "daemon_stopped",
            Event::ConfigLoaded => "config_loaded",
            Event::ConfigRejected => "config_rejected",
            Event::Alert => "alert",
        }
    }
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
    /// The jobs named in its `after` succeeded.
    Dependency,
}

impl Trigger {
    /// The name the history, `REA_TRIGGER` and the logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Retry => "retry",
            Trigger::Manual => "manual",
            Trigger::CatchUp => "catch_up",
            Trigger::Reboot => "reboot",
            Trigger::Oneshot => "oneshot",
            Trigger::Dependency => "dependency",
        }
    }
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
    /// A pending one-shot cancelled by the operator before it ran.
    Cancelled,
    /// The kernel's out-of-memory killer killed a process of the run (its
    /// cgroup's `memory.events` counted an `oom_kill`) and the run did not
    /// succeed. A failure, retried like one. Records written before this
    /// status existed say `failed` or `killed` with `oom_killed: true`.
    OomKilled,
}

impl RunStatus {
    /// The final statuses of a scheduled job's run (`cancelled` only
    /// happens to one-shots).
    pub const FINAL: [RunStatus; 7] = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Killed,
        RunStatus::Skipped,
        RunStatus::Interrupted,
        RunStatus::OomKilled,
    ];

    /// The final statuses of a one-shot's run: a job's, and `cancelled`.
    pub const ONESHOT_FINAL: [RunStatus; 8] = {
        let mut all = [RunStatus::Cancelled; 8];
        let mut i = 0;
        while i < RunStatus::FINAL.len() {
            all[i] = RunStatus::FINAL[i];
            i += 1;
        }
        all
    };

    pub fn is_final(self) -> bool {
        self != RunStatus::Started
    }

    /// A failed, timed-out or out-of-memory run is a failure: it is
    /// retried, calls `on_failure`, extends the failure streak and counts
    /// in alerts and metrics as one. Killed, interrupted or skipped runs
    /// are not (someone or something decided they should stop).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            RunStatus::Failed | RunStatus::TimedOut | RunStatus::OomKilled
        )
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
            RunStatus::Cancelled => "cancelled",
            RunStatus::OomKilled => "oom_killed",
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
    #[serde(with = "ms_time")]
    pub ts: DateTime<Utc>,
    pub event: Event,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The values of the job's parameters this run got (a trigger's
    /// `--param`, else the defaults); absent for a job that declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<crate::params::Values>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// The occurrence this run belongs to (for retries: the original one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub scheduled: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub started: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub ended: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Time spent waiting for a `max_concurrent` slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// What the run waited for when it could not start at once ("a free
    /// slot: alice's share is full ..."); absent when it did not wait (and
    /// in records written before tenants shared the slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for: Option<String>,
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
    /// The CPU figures are the run's cgroup's (every process it had), not
    /// the leader's rusage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_from_cgroup: Option<bool>,
    /// The run's cgroup's `memory.peak`, where the memory controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_kb: Option<u64>,
    /// Bytes read and written (`io.stat`), where the io controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_read_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_write_bytes: Option<u64>,
    /// Most processes at once (`pids.peak`), where the pids controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_peak: Option<u64>,
    /// The kernel's out-of-memory killer killed a process of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_killed: Option<bool>,
    /// Why: skip reason, spawn error, config error text, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Counts: missed occurrences, jobs loaded, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Event-specific extras (config_loaded counts, daemon pid/version, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// Cluster mode: the run's id in the shared database (what `rea
    /// history` shows on every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_run: Option<i64>,
    /// Cluster mode: the run's fence token (`REA_FENCE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<i64>,
    /// An `alert` event: which alert, raised or resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<crate::alert::AlertField>,
}

/// An instant as the log writes it: RFC 3339, UTC, milliseconds. The status
/// and control answers use the same form.
pub fn format_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Instants in the log are RFC 3339 UTC with milliseconds
/// (`2026-11-29T09:12:17.000Z`): precise enough for lateness, short, and
/// sortable as text.
pub(crate) mod ms_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ts(*t))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        DateTime::<Utc>::deserialize(d)
    }

    pub(super) mod opt {
        use super::*;

        pub(in crate::record) fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub(in crate::record) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<DateTime<Utc>>::deserialize(d)
        }
    }
}

impl Record {
    /// Says in the record that the run is retried at `at` (`detail.retry_at`
    /// in the history format, rea-history(5)). The one writer of that key.
    pub fn set_retry_at(&mut self, at: DateTime<Utc>) {
        self.detail = Some(serde_json::json!({ "retry_at": format_ts(at) }));
    }

    /// When the run is retried, if the record says so: the one reader of
    /// `detail.retry_at` (the cluster store and the CLI read it here, so
    /// the key is no contract between crates).
    pub fn retry_at(&self) -> Option<DateTime<Utc>> {
        let text = self.detail.as_ref()?.get("retry_at")?.as_str()?;
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// A line of `event` at `ts` with every optional field empty.
    pub fn new(event: Event, ts: DateTime<Utc>) -> Record {
        Record {
            v: SCHEMA_VERSION,
            ts,
            event,
            job: None,
            params: None,
            run: None,
            attempt: None,
            trigger: None,
            status: None,
            scheduled: None,
            started: None,
            ended: None,
            duration_ms: None,
            waited_ms: None,
            waited_for: None,
            jitter_ms: None,
            pid: None,
            exit_code: None,
            signal: None,
            output: None,
            output_bytes: None,
            max_rss_kb: None,
            cpu_from_cgroup: None,
            memory_peak_kb: None,
            io_read_bytes: None,
            io_write_bytes: None,
            tasks_peak: None,
            oom_killed: None,
            user_cpu_ms: None,
            sys_cpu_ms: None,
            reason: None,
            count: None,
            detail: None,
            cluster_run: None,
            fence: None,
            alert: None,
        }
    }
}
