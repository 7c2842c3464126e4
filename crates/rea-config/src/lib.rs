//! rea's job-file readers: `jobs.toml` (and crontabs, for `rea import`)
//! into `rea-core`'s types, with every problem reported at once as
//! `FILE:LINE:COL: message` and a hint. They read the file they are given
//! (and its permission bits) and nothing else: no clock, no user database
//! (whether a job's `user` exists is the program's check, `rea::host`).
//!
//! The job file is walked as a spanned TOML document rather than
//! deserialized with serde, because serde stops at the first problem and
//! forgets where values were. Each section has one table of known fields
//! (`JOB_FIELDS`, `DAEMON_FIELDS`, `RETRY_FIELDS` in `fields.rs`); an entry
//! names the field, says whether `[defaults]` may set it, and holds the one
//! function that reads it. The same tables drive "did you mean" hints, so
//! adding a job field is one entry there plus the field on `rea_core::job::Job`.
//!
//! | file | owns |
//! |---|---|
//! | `lib.rs` | [`Config`]: a whole valid file, `[daemon]` settings |
//! | `load.rs` | reading the file: size limit, permissions, digest |
//! | `walk.rs` | walking the TOML document, typed values with positions |
//! | `fields.rs` | the schema: one table of known fields per section |
//! | `diagnostic.rs` | [`Diagnostic`], one for the job file and crontabs |
//! | `zone.rs` | the machine's zone, for `timezone = "local"` |
//! | `crontab.rs` | crontab → jobs.toml (`rea import`) |

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rea_core::engine::Plan;
use rea_core::job::Job;

pub mod crontab;
mod diagnostic;
mod fields;
mod load;
mod notify;
mod set;
mod walk;
pub mod zone;

pub use diagnostic::{Diagnostic, Severity};
pub use load::{
    check_permissions, digest, load, load_as_if_changed, load_if_changed, load_with, read_file,
};
pub use set::{combine, files_of, is_job_file_name, toml_files, FileSet};
pub use walk::{parse, parse_as};

/// Which kind of job file: what it may say, whose jobs it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileKind {
    /// The main job file (`/etc/rea/jobs.toml`, `--file`): `[daemon]`,
    /// `[defaults]`, `[jobs.NAME]`.
    Main,
    /// A file of the drop-in directory (`jobs.d/*.toml` next to the main
    /// file), written by packages and configuration management: its own
    /// `[defaults]` and `[jobs.NAME]`, no `[daemon]`.
    DropIn,
    /// A user's own job file (`users/NAME.toml` next to the main file,
    /// read by a root daemon): like a drop-in, and every job runs as that
    /// user, who may manage them through the daemon (cron's user crontab).
    User(String),
}

/// A whole, valid job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The path as the user gave it (used in messages and status).
    pub path: PathBuf,
    pub daemon: DaemonConfig,
    /// Jobs in file order, shared with the daemon's engine (no copy per
    /// job: a 100,000-job file is loaded once).
    pub jobs: Vec<Arc<Job>>,
    /// Where some of each job's fields are written (`user`, `mailto`,
    /// `after`): (job, field) → (line, col); field "" is the job's table
    /// header. Kept out of `Job` so moving a
    /// job in the file does not make a reload see it as changed.
    pub positions: BTreeMap<(String, String), (usize, usize)>,
    /// Hash of the bytes parsed (reloads skip a file that did not change).
    pub digest: u64,
    /// What is accepted but probably not meant: from `parse` (a cron step
    /// larger than its field) and from the machine's checks (mail without
    /// sendmail).
    pub warnings: Vec<Diagnostic>,
    /// Jobs that come from another file than `path` (a drop-in, a user's
    /// file, see [`combine`]): job name → that file. Empty for one file.
    pub other_files: BTreeMap<String, Arc<Path>>,
    /// Every file this configuration was read from, with the digest of
    /// its bytes, the main file first.
    pub files: Vec<(PathBuf, u64)>,
    /// `[cluster]`: several nodes on one database. None: this machine
    /// schedules alone (the default, unchanged by cluster mode).
    pub cluster: Option<ClusterConfig>,
}

impl Config {
    /// What the engine runs from this file.
    pub fn plan(&self) -> Plan<'_> {
        Plan {
            source: self.path.to_string_lossy(),
            jobs: &self.jobs,
            max_concurrent: self.daemon.max_concurrent,
            shares: self.daemon.share_limits(),
        }
    }

    /// An error at a job's field (or its header when the field is absent);
    /// `.warning()` it for a warning.
    pub fn diagnostic_at(
        &self,
        job: &str,
        field: &str,
        message: String,
        hint: Option<String>,
    ) -> Diagnostic {
        let (line, col) = self
            .positions
            .get(&(job.to_string(), field.to_string()))
            .or_else(|| self.positions.get(&(job.to_string(), String::new())))
            .copied()
            .unwrap_or((1, 1));
        let file = self
            .other_files
            .get(job)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| self.path.display().to_string());
        Diagnostic {
            file,
            severity: crate::Severity::Error,
            line: Some(line),
            col: Some(col),
            message,
            hint,
        }
    }
}

/// `[daemon]`: settings of `rea run` itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// Runs allowed at once across all jobs. Default 8.
    pub max_concurrent: usize,
    /// Slots one user's jobs may hold at once. Default (None): half of
    /// `max_concurrent`, at least 1.
    pub max_concurrent_per_user: Option<usize>,
    /// Slots only the system's jobs (root's file and drop-ins) may take.
    /// Default 1 (at most `max_concurrent - 1` applies).
    pub reserve_system: usize,
    /// Runs of one user that may wait for a slot before her manual
    /// triggers and retries are refused. Default 100.
    pub max_queued_per_user: usize,
    /// On SIGTERM, how long running jobs may finish before their groups are
    /// terminated. Default 30s.
    pub shutdown_grace: Duration,
    /// Rotate `history.jsonl` when it grows past this. Default 64 MiB.
    pub history_max_bytes: u64,
    /// Rotated history files kept (`history.jsonl.1` ..). Default 5.
    pub history_files: u32,
    /// The sendmail program for `mailto`; None = look in the usual places.
    pub sendmail: Option<PathBuf>,
    /// Where `GET /metrics` (Prometheus) is served. Default: nowhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// Where runs' output goes besides the history. Default: nowhere else.
    pub job_output: JobOutput,
    /// Each run in a cgroup of its own where the host has a writable
    /// cgroup v2 (`cgroups = "auto"`, the default), or process groups only
    /// (`"off"`).
    pub cgroups: bool,
    /// Members of this group may read every tenant's status (`rea status`,
    /// `rea status --check`) through the socket, and act on none: a
    /// monitoring user. Default: none (a user sees her own jobs only).
    pub monitor_group: Option<String>,
    /// Whether users' webhooks and pings may reach loopback, private,
    /// link-local and other non-public addresses (the daemon's own
    /// endpoints, the host's services, the cloud's metadata server).
    /// Default false: a user's delivery to such an address is refused. The
    /// system's jobs may always.
    pub webhook_private_targets: bool,
    /// A TCP address where the web console is also served (`web.sock` in
    /// the state directory always is): loopback, or any address with
    /// `web_proxy`. Default: none.
    pub web_listen: Option<std::net::SocketAddr>,
    /// The trusted reverse proxy in front of `web_listen`: its identity
    /// header and the addresses it connects from. Default: none (the TCP
    /// console's users log in with `rea web`'s one-time link).
    pub web_proxy: Option<WebProxy>,
    /// Host names the web console answers to besides `localhost`,
    /// `127.0.0.1` and `[::1]` (the `Host` header's allow-list, against
    /// DNS rebinding). Default: none.
    pub web_hosts: Vec<String>,
    /// Users whose web console is read-only (pages, no actions).
    pub web_viewers: Vec<String>,
    /// `[tenants.NAME]` and `[tenants."*"]`: limits on a user's whole
    /// subtree of runs and caps on each of her runs. Root's main file
    /// only.
    pub tenants: rea_core::run::TenantPolicy,
}

/// `[daemon] web_proxy`: a reverse proxy that authenticates the console's
/// users and names each in a header. On `web_listen` a request is then
/// served only if it comes from one of `from`, as the local user its
/// `header` names (every request: no login link), and refused otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebProxy {
    /// The header's name, lower case (`x-forwarded-user`).
    pub header: String,
    /// The proxy's addresses: the only peers whose requests are served.
    pub from: Vec<std::net::IpAddr>,
}

impl DaemonConfig {
    /// How the engine shares the slots between tenants.
    pub fn share_limits(&self) -> rea_core::engine::ShareLimits {
        let defaults = rea_core::engine::ShareLimits::defaults(self.max_concurrent);
        rea_core::engine::ShareLimits {
            per_user: self.max_concurrent_per_user.unwrap_or(defaults.per_user),
            reserve_system: self.reserve_system,
            queued_per_user: self.max_queued_per_user,
        }
    }
}

/// `[daemon] job_output`: where each run's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobOutput {
    /// Kept in the run's history record (bounded by `output_limit`).
    #[default]
    History,
    /// Also sent to the systemd journal, line by line as it comes, each
    /// line tagged with the job and the run.
    Journal,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            max_concurrent: 8,
            max_concurrent_per_user: None,
            reserve_system: 1,
            max_queued_per_user: rea_core::engine::DEFAULT_QUEUED_PER_USER,
            shutdown_grace: Duration::from_secs(30),
            history_max_bytes: 64 * 1024 * 1024,
            history_files: 5,
            sendmail: None,
            metrics: None,
            job_output: JobOutput::History,
            cgroups: true,
            monitor_group: None,
            webhook_private_targets: false,
            web_listen: None,
            web_proxy: None,
            web_hosts: Vec::new(),
            web_viewers: Vec::new(),
            tenants: rea_core::run::TenantPolicy::default(),
        }
    }
}

/// `[cluster]`: run this node in a cluster of rea nodes sharing one
/// PostgreSQL database. Every field may be overridden by the program's
/// environment (`REA_CLUSTER_URL`, `REA_NODE`), so a password need not be
/// in the file.
#[derive(Clone, PartialEq)]
pub struct ClusterConfig {
    /// The database (libpq URL or key=value string). Never logged or shown:
    /// it may carry a password.
    pub url: Option<String>,
    /// The cluster's name (several clusters may share a database).
    /// Default "default".
    pub name: String,
    /// This node's name; None: the machine's host name.
    pub node: Option<String>,
    /// How long a node's lease lasts without renewal. Default 10s.
    pub lease: Duration,
    /// How often the lease is renewed. Default 2s.
    pub heartbeat: Duration,
    /// How long after its lease ended a silent node is declared dead and
    /// its runs recorded interrupted. Default 2s.
    pub grace: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            url: None,
            name: "default".to_string(),
            node: None,
            lease: Duration::from_secs(10),
            heartbeat: Duration::from_secs(2),
            grace: Duration::from_secs(2),
        }
    }
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("url", &self.url.as_ref().map(|_| "(hidden)"))
            .field("name", &self.name)
            .field("node", &self.node)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("grace", &self.grace)
            .finish()
    }
}

/// How `load_with` treats the file beyond its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// Accept a job file that group or others may write. Off by default:
    /// whoever can edit the file can run commands as rea's user, which is
    /// why cron refuses such crontabs too.
    pub allow_insecure_permissions: bool,
}

#[cfg(test)]
mod tests;
