//! The control protocol: one JSON object per line each way, versioned with
//! `"v": 1`. These types are the only definition of the wire format: the
//! daemon serialises them and the CLI deserialises the same types, so the
//! two cannot drift, and the README's protocol section documents them.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use rea_core::oneshot::OneShotRetry;
use rea_core::record::format_ts;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;

/// Which jobs a pause/resume names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// A request line: `{"v":1,"op":"trigger","job":"backup","force":false,"wait":true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Is anybody there?
    Ping,
    /// Live status of every job, or one.
    Status {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
    },
    /// Run a job now. With `wait`, a second response line follows when the
    /// run ends, carrying its final history record; with `follow` (which
    /// implies `wait`), its output comes first, as [`StreamLine`]s.
    Trigger {
        job: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        wait: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        follow: bool,
        /// Values of the job's declared parameters (`--param NAME=VALUE`),
        /// passed to the run as environment variables; the daemon refuses
        /// undeclared, missing or non-matching ones (`bad_params`).
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        params: std::collections::BTreeMap<String, String>,
    },
    /// A job's output as it comes: its running run (the newest, if
    /// several), or else its next run once it starts. The answer
    /// ([`FollowReply`]) is followed by [`StreamLine`]s, then the run's
    /// final history record.
    Follow {
        job: String,
    },
    Pause(Selector),
    Resume(Selector),
    /// Re-read the job file now.
    Reload,
    /// A one-shot job; acknowledged once it is durable.
    Submit(Submission),
    /// Cancel pending one-shots (running ones only with `kill`).
    Cancel {
        ids: Vec<String>,
        #[serde(default)]
        kill: bool,
    },
    /// Stop runs in progress (`rea kill`): every running run of the job
    /// named `target`, or the one run whose id it is. They end as
    /// `killed`, with no retry. A user may name only her own jobs' runs.
    Kill {
        target: String,
    },
    /// Pending one-shots, by due time.
    Pending {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// History records (newest first), as `rea history` reads them; for a
    /// user's own jobs only, when a user asks. The answer is streamed: lines
    /// of [`HistoryChunk::Records`] as the daemon reads them, then one
    /// [`HistoryChunk::End`]; an error line (`ok: false`) instead of `End`
    /// means the answer stopped there and is incomplete.
    History {
        query: rea_store::history::Query,
    },
    /// The newest record of a run (its final one, or `started`).
    FindRun {
        run: String,
    },
    /// The newest final, not skipped, run record of a job.
    LatestFinalRun {
        job: String,
    },
    /// A job's final runs counted day by day (`succeeded`, the others,
    /// their durations) from `from` to `to` inclusive (at most 92 days),
    /// the days cut in `zone` (an IANA name; absent: the job's own zone,
    /// which the daemon knows, UTC for a job it does not have): the web
    /// console's heatmap. Answered from the history's daily roll-up
    /// without reading the job's records, under the same authorization as
    /// `history` (a user: her own jobs only). The answer is a
    /// [`DaysReply`].
    Days {
        job: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        zone: Option<String>,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    },
    /// A user's own job file (`users/NAME.toml`), as it is now: `user` for
    /// root and the daemon's user; anyone else gets their own.
    EditGet {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
    /// Replaces a user's own job file with `content` if it is valid (as
    /// that user's file), then reloads; invalid content changes nothing
    /// and the answer lists why.
    EditPut {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        content: String,
    },
    /// Entries of the audit log (newest first), as `rea audit` reads
    /// them; a user gets her own tenant's only.
    Audit {
        query: rea_core::audit::Query,
    },
    /// Counts, runs in progress, failing jobs and the next fires: a bounded
    /// answer ([`crate::live::Overview`]) whatever the number of jobs.
    Overview,
    /// A page of job summaries, filtered and sorted by the daemon
    /// ([`crate::live::JobsPage`]).
    Jobs(crate::live::JobsQuery),
    /// An overview, then [`crate::live::Event`] lines as things happen,
    /// until the client hangs up.
    Subscribe(crate::live::Subscription),
}

/// `rea submit` on the wire. Exactly one of `at` and `in_ms` says when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Submission {
    /// Unique among pending one-shots; generated when absent. A duplicate is
    /// refused with code `duplicate`, which makes retried submissions safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Program and arguments (no shell), or with `shell` one script.
    pub argv: Vec<String>,
    #[serde(default)]
    pub shell: bool,
    /// Working directory (absolute).
    pub dir: PathBuf,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub retry: OneShotRetry,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The envelope every request travels in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub v: u32,
    /// What sends it, for the audit log: `cli` for the rea command, the
    /// consoles their own names; absent is `socket` (any other client).
    /// Self-declared: the daemon trusts only the peer's uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(flatten)]
    pub request: Request,
}

/// A response line: `{"v":1,"ok":true,"data":{…}}` or
/// `{"v":1,"ok":false,"error":"…","code":"unknown_job","suggestions":[…]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Machine-readable error kind: `bad_request`, `unknown_job`,
    /// `unsupported_version`, `refused`, `invalid_config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
}

impl Response {
    pub fn ok(data: Value) -> Response {
        Response {
            v: VERSION,
            ok: true,
            data: Some(data),
            error: None,
            code: None,
            suggestions: Vec::new(),
        }
    }

    pub fn err(code: &str, error: impl Into<String>) -> Response {
        Response {
            v: VERSION,
            ok: false,
            data: None,
            error: Some(error.into()),
            code: Some(code.to_string()),
            suggestions: Vec::new(),
        }
    }

    pub fn with_suggestions(mut self, s: Vec<String>) -> Response {
        self.suggestions = s;
        self
    }
}

impl Request {
    /// Whether the answer is small and cheap to make, so a client may
    /// pipeline many (submissions in bursts, a script triggering many
    /// runs); other requests are answered one at a time per connection.
    /// A trigger is, unless it waits for its run or follows its output.
    pub fn is_cheap(&self) -> bool {
        matches!(
            self,
            Request::Ping
                | Request::Submit(_)
                | Request::Cancel { .. }
                | Request::Trigger {
                    wait: false,
                    follow: false,
                    ..
                }
        )
    }
}

/// What a submission's fields are called where they came from, for errors.
pub struct FieldNames {
    pub at: &'static str,
    pub in_ms: &'static str,
    pub expire: &'static str,
    pub timeout: &'static str,
    /// Attempts, delay, max delay.
    pub retry: [&'static str; 3],
}

impl FieldNames {
    /// As the protocol names them (the daemon's checks).
    pub const WIRE: FieldNames = FieldNames {
        at: "\"at\"",
        in_ms: "\"in_ms\"",
        expire: "\"expire_ms\"",
        timeout: "\"timeout_ms\"",
        retry: [
            "\"retry.attempts\"",
            "\"retry.delay_ms\"",
            "\"retry.max_delay_ms\"",
        ],
    };

    /// As `rea submit` and `rea at` name them.
    pub const FLAGS: FieldNames = FieldNames {
        at: "--at",
        in_ms: "--in",
        expire: "--expire",
        timeout: "--timeout",
        retry: ["--retry", "--retry-delay", "--retry-max-delay"],
    };
}

impl Submission {
    /// When the one-shot is due, with every numeric field in range: the
    /// same rules as the job file (durations within 100 years, retries
    /// within `RetryPolicy::MAX_ATTEMPTS`, the retry cap not below the
    /// delay), and an `at` within 100 years of `now`. The CLI checks before
    /// it sends; the daemon checks again, since anything may write to the
    /// socket. The error is a sentence for people naming the field as
    /// `names` calls it.
    pub fn due(&self, now: DateTime<Utc>, names: &FieldNames) -> Result<DateTime<Utc>, String> {
        use rea_core::duration::{from_millis_checked, MAX};
        let century = chrono::Duration::from_std(MAX).unwrap_or_default();
        let due = match (self.at, self.in_ms) {
            (Some(at), None) => {
                if at > now + century || at < now - century {
                    return Err(format!(
                        "{} {} is more than 100 years away",
                        names.at,
                        format_ts(at)
                    ));
                }
                at
            }
            (None, Some(ms)) => {
                let d = from_millis_checked(ms, names.in_ms).map_err(|e| e.message)?;
                now + chrono::Duration::from_std(d).unwrap_or_default()
            }
            _ => return Err("say when: exactly one of \"at\" and \"in_ms\"".to_string()),
        };
        for (what, ms) in [
            (names.expire, self.expire_ms),
            (names.timeout, self.timeout_ms),
        ] {
            if let Some(ms) = ms {
                from_millis_checked(ms, what).map_err(|e| e.message)?;
            }
        }
        if self.timeout_ms == Some(0) {
            return Err(format!(
                "{} must be more than 0 (leave it out for no timeout)",
                names.timeout
            ));
        }
        self.retry.check(names.retry)?;
        Ok(due)
    }
}

/// An instant on the wire: RFC 3339, UTC, milliseconds (as the history
/// writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ts(pub DateTime<Utc>);

impl Serialize for Ts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_ts(self.0))
    }
}

impl<'de> Deserialize<'de> for Ts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ts, D::Error> {
        DateTime::<Utc>::deserialize(d).map(Ts)
    }
}

/// `status`: the daemon and every job (or one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    /// Always true from a daemon (the offline view says false).
    pub live: bool,
    pub daemon: DaemonInfo,
    pub jobs: Vec<JobInfo>,
    /// `status ID` of a pending one-shot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneshot: Option<OneShotInfo>,
    /// Set when the answer holds one user's jobs only (the asker's own,
    /// named as she names them); absent, every tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonInfo {
    pub running: bool,
    pub pid: u32,
    pub version: String,
    pub started_at: Ts,
    pub uptime_s: i64,
    pub file: String,
    pub state_dir: String,
    pub last_reload: Ts,
    /// Set while the job file on disk is invalid.
    pub config_error: Option<ConfigError>,
    pub running_runs: usize,
    /// Finished runs' hooks running now (they count against
    /// `max_concurrent` like runs).
    #[serde(default)]
    pub running_hooks: usize,
    pub max_concurrent: usize,
    /// Runs waiting for a `max_concurrent` slot.
    pub queued: usize,
    pub oneshots_pending: usize,
    pub history: HistoryInfo,
    /// How runs are contained, as one line: `cgroup: contained (…)` with
    /// the limits this host cannot enforce, or `process groups …: why`.
    #[serde(default)]
    pub containment: String,
    /// Tenants' subtree limits (`[tenants.NAME]`) this host cannot
    /// enforce, a sentence each (`tenant alice: memory_max (memory
    /// controller: controller not enabled)`); a user sees her own only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unenforced_tenant_limits: Vec<String>,
    /// This node, in cluster mode (absent in local mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterNodeInfo>,
}

/// How this daemon's cluster node is doing, as it sees itself (the other
/// nodes are in the database: `rea status` shows both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterNodeInfo {
    pub cluster: String,
    pub node: String,
    /// The node's registration (absent until it has one).
    pub epoch: Option<i64>,
    pub lease_live: bool,
    /// Since the database last renewed the lease (since the node started
    /// when it never did).
    pub lease_age_ms: u64,
    /// Until the lease ends by the node's own clock; 0 without a live lease.
    pub lease_left_ms: u64,
    /// Run starts and ends waiting for the database.
    pub backlog: usize,
    /// Starts and ends dropped because the backlog was full.
    pub dropped: u64,
    /// The last database error (it stays until the next one).
    pub last_error: Option<WriteError>,
    /// The database's clock less this machine's, in milliseconds, as the
    /// last heartbeat measured it (round trip corrected); absent before
    /// the first. The node schedules on the database's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// Claims answered since the daemon started, by outcome (`started`,
    /// `lost`, `skipped`, ...).
    pub claims: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigError {
    pub at: Ts,
    pub errors: Vec<String>,
}

/// How writing the history goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryInfo {
    pub backlog: usize,
    pub dropped: u64,
    pub last_error: Option<WriteError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteError {
    pub at: Ts,
    pub message: String,
}

/// One job's live state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub name: String,
    /// `running`, `queued`, `retry_pending`, `disabled`, `paused` or `idle`.
    pub state: String,
    pub enabled: bool,
    pub paused: bool,
    pub running: Vec<RunningInfo>,
    /// Hooks of its finished runs running now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookInfo>,
    pub queued: usize,
    pub retry_at: Option<Ts>,
    pub next_fire: Option<Ts>,
    pub consecutive_failures: u32,
    /// The names of the jobs it runs after (whatever their condition).
    pub after: Vec<String>,
    /// The same entries with their condition (`{"job": .., "on":
    /// "success" | "failure" | "always"}`); absent from older daemons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<rea_core::job::Dependency>,
    pub last: Option<LastInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningInfo {
    pub run: String,
    pub pid: Option<u32>,
    pub since: Option<Ts>,
    /// CPU (user + system) the run's processes have used so far, from its
    /// cgroup; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    /// The run's memory peak so far, where the memory controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_kb: Option<u64>,
}

/// A hook process: which hook, of which run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookInfo {
    /// `on_success`, `on_failure` or `on_retry_exhausted`.
    pub hook: String,
    pub run: String,
    pub pid: u32,
    pub since: Ts,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastInfo {
    pub run: String,
    pub status: String,
    pub ended: Ts,
    pub duration_ms: u64,
    pub exit_code: Option<i32>,
}

/// A pending one-shot (`pending`, `status ID`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneShotInfo {
    pub id: String,
    /// `pending` or `running`.
    pub state: String,
    pub due: Ts,
    pub next_attempt_at: Option<Ts>,
    pub argv: Vec<String>,
    pub shell: bool,
    pub dir: String,
    pub tags: Vec<String>,
    pub submitted: Ts,
    pub timeout_ms: Option<u64>,
    pub expire_ms: Option<u64>,
    pub retry: OneShotRetry,
}

/// `pending`: how many are pending, and the first ones by due time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingReply {
    pub pending: usize,
    pub oneshots: Vec<OneShotInfo>,
}

/// `trigger`: the run, and whether it started or waits for a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerReply {
    pub run: String,
    pub job: String,
    /// `started` or `queued`.
    pub state: String,
}

/// `follow`: whose output follows, or that it waits for the next run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowReply {
    pub job: String,
    /// The run followed; none yet while `waiting`.
    pub run: Option<String>,
    /// `running` or `waiting`.
    pub state: String,
}

/// A line of a streamed answer (`follow`, `trigger` with `follow`), until
/// the last one, which carries the run's final history record instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stream", rename_all = "snake_case")]
pub enum StreamLine {
    /// The run whose output follows (it started, or was running).
    Run { run: String, job: String },
    /// Output, as the run wrote it (UTF-8; bytes that are not become
    /// U+FFFD, as in the history).
    Output { text: String },
    /// Output that did not reach this client: it fell behind the run by
    /// more than the daemon keeps, or the run's capture had left it out
    /// before the client came.
    Skipped { bytes: u64 },
}

/// A line of a streamed history answer (`history`): records in bounded
/// chunks as the daemon reads them, newest first, so that no answer is
/// ever whole in the daemon's memory; the last line is `End` (or an error
/// line, if reading failed midway).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "history", rename_all = "snake_case")]
pub enum HistoryChunk {
    /// The next records.
    Records {
        records: Vec<rea_core::record::Record>,
    },
    /// The answer is complete: `count` records in all.
    End { count: u64 },
}

/// `submit`: the one-shot is durable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitReply {
    pub id: String,
    pub due: Ts,
}

/// `cancel`: what happened to each id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelReply {
    pub cancelled: Vec<Cancelled>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cancelled {
    pub id: String,
    /// `cancelled`, or `killing` (a running one, with `kill`).
    pub result: String,
}

/// `kill`: the runs being stopped (they end as `killed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillReply {
    pub killed: Vec<KilledRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KilledRun {
    pub run: String,
    /// The job's name, or the one-shot's id.
    pub job: String,
}

/// `pause` / `resume`: the jobs that changed, and all paused now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseReply {
    pub changed: Vec<String>,
    pub paused: Vec<String>,
}

/// `reload`: jobs in force; `unchanged` when the file had not changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadReply {
    pub jobs: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
}

/// `edit_get`: the file and what it holds now (empty when it does not
/// exist yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditGetReply {
    pub user: String,
    pub path: String,
    pub content: String,
}

/// `edit_put`: installed and in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditPutReply {
    pub path: String,
    /// The user's jobs now.
    pub jobs: usize,
}

/// `ping`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingReply {
    pub pid: u32,
    /// The main job file the daemon runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl Response {
    /// A successful answer carrying `data`.
    pub fn with<T: Serialize>(data: &T) -> Response {
        match serde_json::to_value(data) {
            Ok(v) => Response::ok(v),
            Err(e) => Response::err("refused", format!("cannot encode the answer: {e}")),
        }
    }

    /// The data of a successful answer as `T`.
    pub fn data_as<T: for<'de> Deserialize<'de>>(&self) -> Result<T, String> {
        let data = self.data.clone().unwrap_or(Value::Null);
        serde_json::from_value(data).map_err(|e| format!("unreadable answer from the daemon: {e}"))
    }
}

/// One line of the protocol.
pub fn line<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_else(|_| "{}".to_string());
    s.push('\n');
    s
}

/// Reads a request line: the envelope, the version, the operation.
pub fn parse_request(bytes: &[u8]) -> Result<Request, Response> {
    parse_envelope(bytes).map(|env| env.request)
}

/// Reads a request line whole, its envelope's fields (the source) too.
pub fn parse_envelope(bytes: &[u8]) -> Result<Envelope, Response> {
    // The common case in one parse; the slow path below only explains
    // what is wrong with a request that does not fit.
    if let Ok(env) = serde_json::from_slice::<Envelope>(bytes) {
        if env.v == VERSION {
            return Ok(env);
        }
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        Response::err(
            "bad_request",
            format!("the request is not a JSON object: {e}"),
        )
    })?;
    let version = v.get("v").and_then(Value::as_u64).unwrap_or(0);
    if version != VERSION as u64 {
        return Err(Response::err(
            "unsupported_version",
            format!("protocol version {version} is not supported; this daemon speaks v{VERSION}"),
        ));
    }
    serde_json::from_value(v)
        .map_err(|e| Response::err("bad_request", format!("invalid request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_the_documented_shape() {
        let env = Envelope {
            v: 1,
            source: None,
            request: Request::Trigger {
                job: "backup".into(),
                force: false,
                wait: true,
                follow: false,
                params: Default::default(),
            },
        };
        let text = serde_json::to_string(&env).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"op":"trigger","job":"backup","force":false,"wait":true}"#
        );
        assert_eq!(serde_json::from_str::<Envelope>(&text).unwrap(), env);
        // A trigger's parameters: an object of strings, absent when none.
        let with_params = parse_request(
            br#"{"v":1,"op":"trigger","job":"report","params":{"DATE":"2026-11-30"}}"#,
        )
        .unwrap();
        assert_eq!(
            with_params,
            Request::Trigger {
                job: "report".into(),
                force: false,
                wait: false,
                follow: false,
                params: [("DATE".to_string(), "2026-11-30".to_string())].into(),
            }
        );
        let from_cli = parse_envelope(br#"{"v":1,"source":"cli","op":"reload"}"#).unwrap();
        assert_eq!(
            (from_cli.source.as_deref(), from_cli.request),
            (Some("cli"), Request::Reload)
        );
        let pause = r#"{"v":1,"op":"pause","tag":"billing"}"#;
        assert_eq!(
            parse_request(pause.as_bytes()).unwrap(),
            Request::Pause(Selector {
                tag: Some("billing".into()),
                ..Selector::default()
            })
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"status"}"#).unwrap(),
            Request::Status { job: None }
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"follow","job":"backup"}"#).unwrap(),
            Request::Follow {
                job: "backup".into()
            }
        );
        let lines = [
            StreamLine::Run {
                run: "r1".into(),
                job: "backup".into(),
            },
            StreamLine::Output {
                text: "50%\n".into(),
            },
            StreamLine::Skipped { bytes: 4096 },
        ];
        let text: Vec<String> = lines
            .iter()
            .map(|l| serde_json::to_string(l).unwrap())
            .collect();
        assert_eq!(
            text,
            [
                r#"{"stream":"run","run":"r1","job":"backup"}"#,
                r#"{"stream":"output","text":"50%\n"}"#,
                r#"{"stream":"skipped","bytes":4096}"#,
            ]
        );
    }

    #[test]
    fn bad_requests_get_clear_errors() {
        assert_eq!(
            parse_request(b"nope").unwrap_err().code.as_deref(),
            Some("bad_request")
        );
        assert_eq!(
            parse_request(br#"{"v":2,"op":"ping"}"#)
                .unwrap_err()
                .code
                .as_deref(),
            Some("unsupported_version")
        );
        let e = parse_request(br#"{"v":1,"op":"explode"}"#).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("bad_request"));
        assert!(e.error.unwrap().contains("explode"));
    }
}

/// The answer to [`Request::Days`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaysReply {
    /// The zone the days are cut in.
    pub zone: String,
    /// Today in that zone, on the daemon's clock.
    pub today: chrono::NaiveDate,
    /// The days with runs, oldest first.
    pub days: Vec<rea_store::history::DayCount>,
}
