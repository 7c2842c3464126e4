//! The job file (`jobs.toml`): its schema, defaults, and validation that
//! reports every problem at once as `FILE:LINE:COL: message` with a hint.
//! Reads the file (and its permission bits) and nothing else: no clock, no
//! other disk access. Compiling schedules into a plan is the daemon's job.
//!
//! The file is walked as a spanned TOML document rather than deserialized
//! with serde, because serde stops at the first problem and forgets where
//! values were. Each section has one table of known fields (`JOB_FIELDS`,
//! `DAEMON_FIELDS`, `RETRY_FIELDS`); an entry names the field, says whether
//! `[defaults]` may set it, and holds the one function that reads it. The
//! same tables drive "did you mean" hints, so adding a field is one entry.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::backoff::RetryPolicy;
use crate::schedule::{Schedule, ScheduleError};

/// A whole, valid job file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The path as the user gave it (used in messages and status).
    pub path: PathBuf,
    pub daemon: DaemonConfig,
    /// Jobs in file order, shared with the daemon's engine (no copy per
    /// job: a 100,000-job file is loaded once).
    pub jobs: Vec<std::sync::Arc<Job>>,
    /// Where some of each job's fields are written (`user`, `mailto`,
    /// `after`): (job, field) → (line, col); field "" is the job's table
    /// header. Kept out of `Job` so moving a
    /// job in the file does not make a reload see it as changed.
    pub positions: BTreeMap<(String, String), (usize, usize)>,
    /// Hash of the bytes parsed (reloads skip a file that did not change).
    pub digest: u64,
    /// What the machine says about the file without refusing it (mail
    /// without sendmail); filled by `load_with`, empty from `parse`.
    pub warnings: Vec<Diagnostic>,
}

impl Config {
    /// A diagnostic at a job's field (or its header when the field is absent).
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
        Diagnostic {
            file: self.path.display().to_string(),
            line,
            col,
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
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            max_concurrent: 8,
            shutdown_grace: Duration::from_secs(30),
            history_max_bytes: 64 * 1024 * 1024,
            history_files: 5,
            sendmail: None,
            metrics: None,
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
    /// The parsed schedule; None for a job that only runs `after` others.
    pub schedule: Option<Schedule>,
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
    /// Run as this user (the daemon must be root, or be this user).
    pub user: Option<String>,
    /// Mail the run's output here through sendmail, as cron's MAILTO.
    pub mailto: Vec<String>,
    pub mail_on: MailOn,
    /// Hook commands (run with the job's shell, user, dir and env).
    pub on_failure: Option<String>,
    pub on_success: Option<String>,
    pub on_retry_exhausted: Option<String>,
    /// A hook running longer is terminated. Default 5m.
    pub hook_timeout: Duration,
    /// Run when each of these jobs has succeeded (since this job's last
    /// run so triggered).
    pub after: Vec<String>,
}

/// When `mailto` sends a mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailOn {
    /// A run that did not succeed (failed, timed out, killed).
    #[default]
    Failure,
    /// Every run that printed something, as cron does.
    Output,
    /// Every run.
    Always,
}

impl Job {
    /// The first fire strictly after `after`; None for `@reboot`, jobs
    /// without a schedule, and schedules that never fire again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after, self.timezone)
    }

    pub fn is_reboot(&self) -> bool {
        self.schedule.as_ref().is_some_and(Schedule::is_reboot)
    }

    /// The schedule as written, or `after a, b` for a dependent job.
    pub fn schedule_text(&self) -> String {
        match &self.schedule {
            Some(s) if self.after.is_empty() => s.source().to_string(),
            Some(s) => format!("{} + after {}", s.source(), self.after.join(", ")),
            None => format!("after {}", self.after.join(", ")),
        }
    }
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
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
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

/// Job files larger than this are refused before parsing, so that pointing
/// `--file` at `/dev/zero` or a log file fails fast instead of eating memory.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads and validates the file at `path`, refusing it if group or others
/// may write it (see [`check_permissions`]).
pub fn load(path: &Path) -> Result<Config, Vec<Diagnostic>> {
    load_with(path, LoadOptions::default())
}

/// [`load`] with options. Every problem is reported at once: a permission
/// problem does not hide problems in the contents.
pub fn load_with(path: &Path, options: LoadOptions) -> Result<Config, Vec<Diagnostic>> {
    let bytes = read_limited(path).map_err(|message| vec![file_diagnostic(path, message, None)])?;
    finish_load(path, &bytes, options)
}

/// `load_with`, reading the file once: `Ok(None)` when its bytes are those
/// `known` (a `Config::digest`) was computed from, so nothing is parsed.
pub fn load_if_changed(
    path: &Path,
    options: LoadOptions,
    known: Option<u64>,
) -> Result<Option<Config>, Vec<Diagnostic>> {
    let bytes = read_limited(path).map_err(|message| vec![file_diagnostic(path, message, None)])?;
    if known == Some(digest(&bytes)) {
        return Ok(None);
    }
    finish_load(path, &bytes, options).map(Some)
}

/// A hash of a job file's bytes (see `Config::digest`).
pub fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn finish_load(path: &Path, bytes: &[u8], options: LoadOptions) -> Result<Config, Vec<Diagnostic>> {
    let permissions = if options.allow_insecure_permissions {
        Ok(())
    } else {
        check_permissions(path)
    };
    // The machine's view of a valid file (users, sendmail) is checked once
    // here; its warnings travel with the configuration.
    let parsed = parse(bytes, path).and_then(|mut cfg| {
        let host = crate::host::check(&cfg);
        if host.errors.is_empty() {
            cfg.warnings = host.warnings;
            Ok(cfg)
        } else {
            Err(host.errors)
        }
    });
    match (permissions, parsed) {
        (Ok(()), parsed) => parsed,
        (Err(denied), Ok(_)) => Err(vec![denied]),
        (Err(denied), Err(mut diags)) => {
            diags.insert(0, denied);
            Err(diags)
        }
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the job file: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the job file: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "the job file is larger than {} MiB; is it the right file?",
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// Refuses a job file that group or others may write, as cron does: anyone
/// who can edit it can run commands as the user rea runs as.
pub fn check_permissions(path: &Path) -> Result<(), Diagnostic> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        file_diagnostic(
            path,
            format!("cannot read the job file's permissions: {e}"),
            None,
        )
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "group",
        (false, true) => "others",
        (true, true) => "group and others",
    };
    Err(file_diagnostic(
        path,
        format!(
            "refusing a job file writable by {who} (mode {mode:04o}): whoever can edit it can run commands as rea's user"
        ),
        Some(format!("run: chmod go-w {}", shell_quote(&path.display().to_string()))),
    ))
}

fn file_diagnostic(path: &Path, message: String, hint: Option<String>) -> Diagnostic {
    Diagnostic {
        file: path.display().to_string(),
        line: 1,
        col: 1,
        message,
        hint,
    }
}

/// Quotes a path for a copy-pasteable hint, only when it needs it.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Validates the file's contents; `path` is used for messages.
pub fn parse(src: &[u8], path: &Path) -> Result<Config, Vec<Diagnostic>> {
    let file = path.display().to_string();
    let text = match std::str::from_utf8(src) {
        Ok(text) => text,
        Err(e) => {
            let valid = &src[..e.valid_up_to()];
            // The prefix is valid UTF-8 by definition; the fallback is unreachable.
            let prefix = std::str::from_utf8(valid).unwrap_or("");
            let ctx = Ctx::new(file, prefix);
            let (line, col) = ctx.position(prefix.len());
            let byte = src.get(e.valid_up_to()).copied().unwrap_or(0);
            return Err(vec![Diagnostic {
                file: ctx.file,
                line,
                col,
                message: format!("the job file is not valid UTF-8 (byte 0x{byte:02X})"),
                hint: Some("save the file as UTF-8".to_string()),
            }]);
        }
    };
    // Editors on some systems write a byte-order mark; columns are counted
    // as the editor shows them, without it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut ctx = Ctx::new(file, text);
    let config = match DeTable::parse(text) {
        Ok(doc) => {
            let (daemon, jobs) = ctx.document(doc.get_ref());
            ctx.check_dependencies(&jobs);
            Config {
                path: path.to_path_buf(),
                daemon,
                jobs,
                positions: std::mem::take(&mut ctx.positions),
                digest: digest(src),
                warnings: Vec::new(),
            }
        }
        Err(e) => {
            ctx.syntax_error(&e);
            return Err(ctx.diags);
        }
    };
    if ctx.diags.is_empty() {
        Ok(config)
    } else {
        ctx.diags.sort_by_key(|d| (d.line, d.col));
        Err(ctx.diags)
    }
}

// ---------------------------------------------------------------------------
// The schema: one table of known fields per section.

type Value<'i> = Spanned<DeValue<'i>>;
type Key<'i> = Spanned<Cow<'i, str>>;

/// The sections a job file may have, in the order they are documented.
const SECTIONS: &[&str] = &["defaults", "daemon", "jobs"];

/// A field of a job (and, if `inheritable`, of `[defaults]`).
struct Field {
    name: &'static str,
    /// Whether `[defaults]` may set it for every job.
    inheritable: bool,
    /// Reads the value into the draft, reporting problems; fields that merge
    /// with `[defaults]` (env, retry) merge here.
    apply: fn(&mut Ctx, &Value, &mut Draft),
}

const JOB_FIELDS: &[Field] = &[
    Field {
        name: "schedule",
        inheritable: false,
        apply: apply_schedule,
    },
    Field {
        name: "command",
        inheritable: false,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "command") {
                d.command = Some(s);
            }
        },
    },
    Field {
        name: "description",
        inheritable: false,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.string(v, "a string") {
                d.description = Some(s.to_string());
            }
        },
    },
    Field {
        name: "enabled",
        inheritable: false,
        apply: |ctx, v, d| {
            if let Some(b) = ctx.boolean(v) {
                d.enabled = b;
            }
        },
    },
    Field {
        name: "tags",
        inheritable: false,
        apply: apply_tags,
    },
    Field {
        name: "shell",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "shell") {
                d.shell = s;
            }
        },
    },
    Field {
        name: "timezone",
        inheritable: true,
        apply: apply_timezone,
    },
    Field {
        name: "timeout",
        inheritable: true,
        apply: |ctx, v, d| {
            if v.get_ref().as_str() == Some("none") {
                d.timeout = None;
            } else if let Some(t) = ctx.duration(v, "timeout") {
                if t.is_zero() {
                    ctx.error(
                        v.span().start,
                        "\"timeout\" must be longer than 0s",
                        Some("write timeout = \"none\" for no timeout".to_string()),
                    );
                } else {
                    d.timeout = Some(t);
                }
            }
        },
    },
    Field {
        name: "kill_grace",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "kill_grace") {
                d.kill_grace = t;
            }
        },
    },
    Field {
        name: "overlap",
        inheritable: true,
        apply: |ctx, v, d| {
            let choices = [
                ("skip", Overlap::Skip),
                ("queue", Overlap::Queue),
                ("allow", Overlap::Allow),
                ("replace", Overlap::Replace),
            ];
            if let Some(o) = ctx.choice(v, "overlap", &choices) {
                d.overlap = o;
            }
        },
    },
    Field {
        name: "retry",
        inheritable: true,
        apply: apply_retry,
    },
    Field {
        name: "catch_up",
        inheritable: true,
        apply: |ctx, v, d| {
            let choices = [
                ("none", CatchUp::None),
                ("once", CatchUp::Once),
                ("all", CatchUp::All),
            ];
            if let Some(c) = ctx.choice(v, "catch_up", &choices) {
                d.catch_up = c;
            }
        },
    },
    Field {
        name: "catch_up_limit",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "catch_up_limit", 1, 1000) {
                d.catch_up_limit = n as u32;
            }
        },
    },
    Field {
        name: "jitter",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "jitter") {
                d.jitter = t;
            }
        },
    },
    Field {
        name: "env",
        inheritable: true,
        apply: apply_env,
    },
    Field {
        name: "dir",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "dir") {
                if Path::new(&s).is_absolute() {
                    d.dir = Some(PathBuf::from(s));
                } else {
                    ctx.error(
                        v.span().start,
                        format!("\"dir\" must be an absolute path, found {s:?}"),
                        Some(
                            "a relative directory would depend on where rea was started"
                                .to_string(),
                        ),
                    );
                }
            }
        },
    },
    Field {
        name: "output_limit",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.size(v, "output_limit", 0, MAX_OUTPUT_LIMIT) {
                d.output_limit = usize::try_from(n).unwrap_or(usize::MAX);
            }
        },
    },
    Field {
        name: "user",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "user") {
                d.user = Some(s);
            }
        },
    },
    Field {
        name: "mailto",
        inheritable: true,
        apply: apply_mailto,
    },
    Field {
        name: "mail_on",
        inheritable: true,
        apply: |ctx, v, d| {
            let choices = [
                ("failure", MailOn::Failure),
                ("output", MailOn::Output),
                ("always", MailOn::Always),
            ];
            if let Some(m) = ctx.choice(v, "mail_on", &choices) {
                d.mail_on = m;
            }
        },
    },
    Field {
        name: "on_failure",
        inheritable: true,
        apply: |ctx, v, d| d.on_failure = ctx.text_field(v, "on_failure"),
    },
    Field {
        name: "on_success",
        inheritable: true,
        apply: |ctx, v, d| d.on_success = ctx.text_field(v, "on_success"),
    },
    Field {
        name: "on_retry_exhausted",
        inheritable: true,
        apply: |ctx, v, d| d.on_retry_exhausted = ctx.text_field(v, "on_retry_exhausted"),
    },
    Field {
        name: "hook_timeout",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "hook_timeout") {
                if t.is_zero() {
                    ctx.error(
                        v.span().start,
                        "\"hook_timeout\" must be longer than 0s",
                        None,
                    );
                } else {
                    d.hook_timeout = t;
                }
            }
        },
    },
    Field {
        name: "after",
        inheritable: false,
        apply: |ctx, v, d| {
            let DeValue::Array(items) = v.get_ref() else {
                ctx.type_error(v, "an array of job names like [\"extract\"]", None);
                return;
            };
            let mut names = Vec::new();
            for item in items {
                if let Some(s) = ctx.string(item, "a job name") {
                    if !names.iter().any(|n| n == s) {
                        names.push(s.to_string());
                    }
                }
            }
            if names.is_empty() {
                ctx.error(
                    v.span().start,
                    "\"after\" lists no job",
                    Some("write after = [\"extract\"], or remove the field".into()),
                );
            }
            d.after = names;
        },
    },
];

/// `mailto = "ops@example.com"` or a list; `""` (as cron's MAILTO="") = none.
fn apply_mailto(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let mut out = Vec::new();
    let mut push = |ctx: &mut Ctx, v: &Value, s: &str| {
        for addr in s.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            if addr.contains(char::is_whitespace) || addr.starts_with('-') || addr.contains('\0') {
                ctx.error(
                    v.span().start,
                    format!("invalid mail address {addr:?}"),
                    Some("write mailto = \"ops@example.com\" or a list of addresses".into()),
                );
            } else {
                out.push(addr.to_string());
            }
        }
    };
    match v.get_ref() {
        DeValue::String(s) => push(ctx, v, s),
        DeValue::Array(items) => {
            for item in items {
                if let Some(s) = ctx.string(item, "a mail address") {
                    let s = s.to_string();
                    push(ctx, item, &s);
                }
            }
        }
        _ => ctx.type_error(v, "a mail address or a list of them", None),
    }
    d.mailto = out;
}

/// Fields whose positions `Config::positions` keeps (see `host::check` and
/// the dependency check).
const LOCATED: &[&str] = &["user", "mailto", "after"];

/// Messages quote the offending value; a megabyte of it would flood the
/// terminal, the log and the `config_rejected` history line, so long
/// messages keep their start and say how much was cut.
fn shorten(message: String) -> String {
    const MAX: usize = 300;
    if message.len() <= MAX {
        return message;
    }
    let mut cut = MAX;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} more bytes)", &message[..cut], message.len() - cut)
}

/// Output is held in memory while a job runs; more than this per run is
/// surely a typo (and `max_concurrent` multiplies it).
const MAX_OUTPUT_LIMIT: u64 = 1 << 30;

/// A field of `[daemon]` or of a `retry` table.
struct SubField<T> {
    name: &'static str,
    apply: fn(&mut Ctx, &Value, &mut T),
}

const DAEMON_FIELDS: &[SubField<DaemonConfig>] = &[
    SubField {
        name: "max_concurrent",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "max_concurrent", 1, 10_000) {
                d.max_concurrent = n as usize;
            }
        },
    },
    SubField {
        name: "shutdown_grace",
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "shutdown_grace") {
                d.shutdown_grace = t;
            }
        },
    },
    SubField {
        name: "history_max_bytes",
        // Smaller than this and rotation would discard history almost at once.
        apply: |ctx, v, d| {
            if let Some(n) = ctx.size(v, "history_max_bytes", 4096, u64::MAX) {
                d.history_max_bytes = n;
            }
        },
    },
    SubField {
        name: "history_files",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "history_files", 0, 100) {
                d.history_files = n as u32;
            }
        },
    },
    SubField {
        name: "sendmail",
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "sendmail") {
                if Path::new(&s).is_absolute() {
                    d.sendmail = Some(PathBuf::from(s));
                } else {
                    ctx.error(
                        v.span().start,
                        format!("\"sendmail\" must be an absolute path, found {s:?}"),
                        None,
                    );
                }
            }
        },
    },
    SubField {
        name: "metrics",
        apply: |ctx, v, d| {
            if let Some(s) = ctx.string(v, "a string like \"127.0.0.1:9746\"") {
                match s.parse() {
                    Ok(addr) => d.metrics = Some(addr),
                    Err(_) => ctx.error(
                        v.span().start,
                        format!("invalid metrics address {s:?}"),
                        Some(
                            "write IP:PORT, e.g. \"127.0.0.1:9746\" or \"[::1]:9746\" (an address, not a host name)"
                                .to_string(),
                        ),
                    ),
                }
            }
        },
    },
];

/// The retry fields being read from one `retry` table, with where this
/// table set `delay` and `max_delay` so their relation is checked once, at
/// the table that broke it.
struct RetryDraft {
    policy: RetryPolicy,
    delay_at: Option<usize>,
    max_delay_at: Option<usize>,
}

const RETRY_FIELDS: &[SubField<RetryDraft>] = &[
    SubField {
        name: "attempts",
        apply: |ctx, v, r| {
            if let Some(n) = ctx.integer(v, "retry.attempts", 0, 100) {
                r.policy.attempts = n as u32;
            }
        },
    },
    SubField {
        name: "delay",
        apply: |ctx, v, r| {
            if let Some(t) = ctx.duration(v, "retry.delay") {
                r.policy.delay = t;
                r.delay_at = Some(v.span().start);
            }
        },
    },
    SubField {
        name: "max_delay",
        apply: |ctx, v, r| {
            if let Some(t) = ctx.duration(v, "retry.max_delay") {
                r.policy.max_delay = t;
                r.max_delay_at = Some(v.span().start);
            }
        },
    },
    SubField {
        name: "factor",
        apply: |ctx, v, r| {
            if let Some(f) = ctx.float(v, "retry.factor", 1.0, 1000.0) {
                r.policy.factor = f;
            }
        },
    },
    SubField {
        name: "jitter",
        apply: |ctx, v, r| {
            if let Some(f) = ctx.float(v, "retry.jitter", 0.0, 1.0) {
                r.policy.jitter = f;
            }
        },
    },
];

/// A job being assembled: built-in defaults, then `[defaults]`, then the
/// job's own table. Job-only fields stay unset in the `[defaults]` draft.
#[derive(Debug, Clone)]
struct Draft {
    schedule: Option<Schedule>,
    command: Option<String>,
    shell: String,
    timezone: Tz,
    timezone_name: String,
    timeout: Option<Duration>,
    kill_grace: Duration,
    overlap: Overlap,
    retry: RetryPolicy,
    catch_up: CatchUp,
    catch_up_limit: u32,
    jitter: Duration,
    env: BTreeMap<String, String>,
    dir: Option<PathBuf>,
    tags: Vec<String>,
    description: Option<String>,
    enabled: bool,
    output_limit: usize,
    user: Option<String>,
    mailto: Vec<String>,
    mail_on: MailOn,
    on_failure: Option<String>,
    on_success: Option<String>,
    on_retry_exhausted: Option<String>,
    hook_timeout: Duration,
    after: Vec<String>,
    /// Byte offset of each field written for this job (for later checks).
    offsets: BTreeMap<&'static str, usize>,
}

impl Default for Draft {
    fn default() -> Self {
        Draft {
            schedule: None,
            command: None,
            shell: "/bin/sh".to_string(),
            timezone: Tz::UTC,
            timezone_name: "UTC".to_string(),
            timeout: None,
            kill_grace: Duration::from_secs(10),
            overlap: Overlap::Skip,
            retry: RetryPolicy::default(),
            catch_up: CatchUp::None,
            catch_up_limit: 10,
            jitter: Duration::ZERO,
            env: BTreeMap::new(),
            dir: None,
            tags: Vec::new(),
            description: None,
            enabled: true,
            output_limit: 64 * 1024,
            user: None,
            mailto: Vec::new(),
            mail_on: MailOn::Failure,
            on_failure: None,
            on_success: None,
            on_retry_exhausted: None,
            hook_timeout: Duration::from_secs(300),
            after: Vec::new(),
            offsets: BTreeMap::new(),
        }
    }
}

impl Draft {
    /// The finished job, if the required fields were read successfully.
    fn into_job(self, name: &str) -> Option<Job> {
        if self.schedule.is_none() && self.after.is_empty() {
            return None;
        }
        Some(Job {
            name: name.to_string(),
            schedule: self.schedule,
            command: self.command?,
            shell: self.shell,
            timezone: self.timezone,
            timezone_name: self.timezone_name,
            timeout: self.timeout,
            kill_grace: self.kill_grace,
            overlap: self.overlap,
            retry: self.retry,
            catch_up: self.catch_up,
            catch_up_limit: self.catch_up_limit,
            jitter: self.jitter,
            env: self.env,
            dir: self.dir,
            tags: self.tags,
            description: self.description,
            enabled: self.enabled,
            output_limit: self.output_limit,
            user: self.user,
            mailto: self.mailto,
            mail_on: self.mail_on,
            on_failure: self.on_failure,
            on_success: self.on_success,
            on_retry_exhausted: self.on_retry_exhausted,
            hook_timeout: self.hook_timeout,
            after: self.after,
        })
    }
}

fn apply_schedule(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(expr) = ctx.string(v, "a cron expression like \"*/15 * * * *\"") else {
        return;
    };
    // Large files repeat a few expressions many times: parse each once and
    // share its compiled matcher.
    if let Some(known) = ctx.schedules.get(expr) {
        d.schedule = Some(known.clone());
        return;
    }
    match Schedule::parse(expr) {
        Ok(schedule) => {
            ctx.schedules.insert(expr.to_string(), schedule.clone());
            d.schedule = Some(schedule);
        }
        Err(e) => {
            let at = schedule_error_offset(ctx.text, v.span(), expr, &e);
            ctx.error(at, e.message, e.hint);
        }
    }
}

/// Where in the file a cron error points: into the string at the bad field
/// when the string is written plainly (quotes around exactly the value, no
/// escapes, one line), else at the string's start, since escapes and
/// multi-line strings break the mapping from value bytes to file bytes.
fn schedule_error_offset(
    text: &str,
    value_span: Range<usize>,
    expr: &str,
    e: &ScheduleError,
) -> usize {
    let start = value_span.start;
    let Some(inner) = &e.span else {
        return start;
    };
    let raw = text.get(value_span).unwrap_or("");
    let quoted = raw.len() == expr.len() + 2
        && (raw.starts_with('"') || raw.starts_with('\''))
        && raw.get(1..raw.len() - 1) == Some(expr);
    if quoted && inner.start <= expr.len() {
        start + 1 + inner.start
    } else {
        start
    }
}

fn apply_timezone(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(name) = ctx.string(v, "a zone name like \"Europe/Berlin\"") else {
        return;
    };
    match crate::zone::resolve(name) {
        Ok(tz) => {
            d.timezone = tz;
            d.timezone_name = name.to_string();
        }
        Err(e) => {
            let hint = Some(e.hint());
            ctx.error(v.span().start, e.message, hint);
        }
    }
}

fn apply_retry(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(table) = ctx.table(v, "a table like { attempts = 3, delay = \"30s\" }") else {
        return;
    };
    let mut draft = RetryDraft {
        policy: d.retry.clone(),
        delay_at: None,
        max_delay_at: None,
    };
    for (key, value) in in_file_order(table) {
        match RETRY_FIELDS
            .iter()
            .find(|f| f.name == key.get_ref().as_ref())
        {
            Some(field) => (field.apply)(ctx, value, &mut draft),
            None => ctx.unknown_field(
                key,
                RETRY_FIELDS.iter().map(|f| f.name),
                "fields of retry",
                None,
            ),
        }
    }
    let p = &draft.policy;
    if p.max_delay < p.delay {
        if let Some(at) = draft.max_delay_at.or(draft.delay_at) {
            ctx.error(
                at,
                format!(
                    "\"retry.max_delay\" ({}) must be at least \"retry.delay\" ({})",
                    crate::duration::format_exact(p.max_delay),
                    crate::duration::format_exact(p.delay)
                ),
                None,
            );
        }
    }
    d.retry = draft.policy;
}

fn apply_env(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(table) = ctx.table(v, "a table like { NAME = \"value\" }") else {
        return;
    };
    for (key, value) in in_file_order(table) {
        let name = key.get_ref().as_ref();
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            ctx.error(
                key.span().start,
                format!("invalid environment variable name {name:?}"),
                Some("names must be non-empty and contain no \"=\" or NUL".to_string()),
            );
            continue;
        }
        match value.get_ref() {
            DeValue::String(s) if s.contains('\0') => {
                ctx.error(
                    value.span().start,
                    format!("the value of {name:?} contains a NUL character"),
                    None,
                );
            }
            DeValue::String(s) => {
                d.env.insert(name.to_string(), s.to_string());
            }
            DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => {
                let raw = ctx.raw(value.span()).to_string();
                ctx.type_error(
                    value,
                    "a string",
                    Some(format!("quote it: {name} = \"{raw}\"")),
                );
            }
            _ => ctx.type_error(value, "a string", None),
        }
    }
}

fn apply_tags(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let DeValue::Array(items) = v.get_ref() else {
        ctx.type_error(v, "an array of strings like [\"billing\"]", None);
        return;
    };
    let mut tags = Vec::new();
    for item in items.iter() {
        let Some(tag) = ctx.string(item, "a string") else {
            continue;
        };
        if let Some(hint) = name_problem(tag) {
            ctx.error(
                item.span().start,
                format!("invalid tag {tag:?}"),
                Some(hint),
            );
        } else if !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_string());
        }
    }
    d.tags = tags;
}

/// Why a job or tag name is refused, phrased as a hint; None if it is fine.
/// Names end up in command lines and file names, so they stay plain.
/// Why a job (or one-shot) name is not allowed, with a corrected example.
pub fn name_problem(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() {
        return Some(
            "names may contain only letters, digits, \"_\", \".\" and \"-\", and must not be empty"
                .to_string(),
        );
    }
    if name.chars().all(allowed) {
        return None;
    }
    let fixed: String = name
        .chars()
        .map(|c| if allowed(c) { c } else { '-' })
        .collect();
    Some(format!(
        "names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. {fixed:?}"
    ))
}

/// A table's entries in the order they appear in the file (the parsed
/// table is sorted by key).
fn in_file_order<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Key<'i>, &'t Value<'i>)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    entries
}

fn quote_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------
// Walking the document.

/// What the walk needs: the text for positions and raw values, and the
/// problems found so far.
struct Ctx<'a> {
    file: String,
    text: &'a str,
    /// Byte offset of the start of each line.
    line_starts: Vec<usize>,
    diags: Vec<Diagnostic>,
    /// See `Config::positions`.
    positions: BTreeMap<(String, String), (usize, usize)>,
    /// Expressions already parsed in this file.
    schedules: std::collections::HashMap<String, Schedule>,
}

impl<'a> Ctx<'a> {
    fn new(file: String, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ctx {
            file,
            text,
            line_starts,
            diags: Vec::new(),
            positions: BTreeMap::new(),
            schedules: std::collections::HashMap::new(),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts.get(line - 1).copied().unwrap_or(0);
        let col = self
            .text
            .get(start..offset)
            .map_or(0, |s| s.chars().count())
            + 1;
        (line, col)
    }

    fn error(&mut self, at: usize, message: impl Into<String>, hint: Option<String>) {
        let (line, col) = self.position(at);
        self.diags.push(Diagnostic {
            file: self.file.clone(),
            line,
            col,
            message: shorten(message.into()),
            hint: hint.map(shorten),
        });
    }

    fn raw(&self, span: Range<usize>) -> &'a str {
        self.text.get(span).unwrap_or("")
    }

    /// A TOML syntax error: the parser's one-line message (never its
    /// multi-line rendering), reworded where the parser's words mislead.
    fn syntax_error(&mut self, e: &toml::de::Error) {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim();
        let line_start = self.text[..span.start.min(self.text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let line = self.text[line_start..].lines().next().unwrap_or("");
        let rest = self
            .text
            .get(span.start..)
            .and_then(|r| r.lines().next())
            .unwrap_or("");
        let (message, hint) = if message == "duplicate key" {
            let key = self.raw(span.clone());
            let key = if key.starts_with(['"', '\'']) {
                key.to_string()
            } else {
                format!("{key:?}")
            };
            let header = line
                .trim_start()
                .starts_with('[')
                .then(|| line.rfind(']'))
                .flatten();
            match header {
                Some(end) => (
                    format!("duplicate table {}", line[..=end].trim()),
                    "each table may appear once; merge the two".to_string(),
                ),
                None => (
                    format!("duplicate key {key}"),
                    "each key may appear once per table".to_string(),
                ),
            }
        } else if message.starts_with("string values must be quoted")
            && (rest.trim().is_empty() || rest.trim_start().starts_with('#'))
        {
            (
                "missing value after \"=\"".to_string(),
                "write e.g. key = \"value\"".to_string(),
            )
        } else if let Some(c) = rest.chars().next().filter(|c| c.is_control() && *c != '\t') {
            (
                format!(
                    "control character U+{:04X} is not allowed here",
                    u32::from(c)
                ),
                "remove it; inside a string it can be written escaped, e.g. \"\\u0000\""
                    .to_string(),
            )
        } else if message.starts_with("invalid basic string, expected `\"`") {
            (
                "string is not closed on this line".to_string(),
                "end it with \" (a string over several lines is written \"\"\"...\"\"\")"
                    .to_string(),
            )
        } else {
            self.error(span.start, format!("invalid TOML: {message}"), None);
            return;
        };
        self.error(span.start, format!("invalid TOML: {message}"), Some(hint));
    }

    fn document(&mut self, root: &DeTable) -> (DaemonConfig, Vec<std::sync::Arc<Job>>) {
        let mut daemon = DaemonConfig::default();
        let mut defaults = Draft::default();
        // [defaults] applies to every job wherever it appears in the file.
        if let Some(v) = root.get("defaults") {
            if let Some(table) = self.table(v, "a table like [defaults]") {
                self.fields(table, &mut defaults, None);
            }
        }
        let mut jobs = Vec::new();
        for (key, value) in in_file_order(root) {
            match key.get_ref().as_ref() {
                "defaults" => {}
                "daemon" => {
                    if let Some(table) = self.table(value, "a table like [daemon]") {
                        for (key, value) in in_file_order(table) {
                            match DAEMON_FIELDS
                                .iter()
                                .find(|f| f.name == key.get_ref().as_ref())
                            {
                                Some(field) => (field.apply)(self, value, &mut daemon),
                                None => {
                                    let elsewhere = JOB_FIELDS
                                        .iter()
                                        .any(|f| f.name == key.get_ref().as_ref())
                                        .then(|| {
                                            "it belongs in [defaults] or a [jobs.NAME] table"
                                                .to_string()
                                        });
                                    self.unknown_field(
                                        key,
                                        DAEMON_FIELDS.iter().map(|f| f.name),
                                        "fields of [daemon]",
                                        elsewhere,
                                    )
                                }
                            }
                        }
                    }
                }
                "jobs" => jobs = self.jobs(value, &defaults),
                other => {
                    let hint = crate::suggest::did_you_mean(other, SECTIONS.iter().copied())
                        .unwrap_or_else(|| {
                            if JOB_FIELDS.iter().any(|f| f.name == other) {
                                "fields of a job go under its [jobs.NAME] header".to_string()
                            } else {
                                "the sections are [defaults], [daemon] and [jobs.NAME]".to_string()
                            }
                        });
                    self.error(
                        key.span().start,
                        format!("unknown section {other:?}"),
                        Some(hint),
                    );
                }
            }
        }
        (daemon, jobs)
    }

    fn jobs(&mut self, value: &Value, defaults: &Draft) -> Vec<std::sync::Arc<Job>> {
        let DeValue::Table(table) = value.get_ref() else {
            let hint = value.get_ref().is_array().then(|| {
                "write each job as [jobs.NAME] with a unique NAME, not [[jobs]]".to_string()
            });
            self.type_error(value, "a table of jobs like [jobs.NAME]", hint);
            return Vec::new();
        };
        let mut jobs = Vec::new();
        for (key, value) in in_file_order(table) {
            let name = key.get_ref().as_ref();
            if let Some(hint) = name_problem(name) {
                self.error(
                    key.span().start,
                    format!("invalid job name {name:?}"),
                    Some(hint),
                );
            }
            let Some(fields) = self.table(value, "a job table like [jobs.NAME]") else {
                continue;
            };
            let mut draft = defaults.clone();
            draft.offsets.clear();
            self.fields(fields, &mut draft, Some(name));
            // Only what checks after parsing point at (users, mail,
            // dependencies; the header when such a field comes from
            // [defaults]): a position per field of a 100,000-job file would
            // cost more memory than the jobs themselves.
            if draft.user.is_some() || !draft.mailto.is_empty() || !draft.after.is_empty() {
                let header = self.position(key.span().start);
                self.positions
                    .insert((name.to_string(), String::new()), header);
            }
            for (field, offset) in draft.offsets.iter().filter(|(f, _)| LOCATED.contains(f)) {
                let at = self.position(*offset);
                self.positions
                    .insert((name.to_string(), field.to_string()), at);
            }
            for required in ["schedule", "command"] {
                if required == "schedule" && fields.contains_key("after") {
                    continue;
                }
                if !fields.contains_key(required) {
                    let example = match required {
                        "schedule" => {
                            "schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)"
                        }
                        _ => "command = \"/usr/local/bin/backup\"",
                    };
                    self.error(
                        value.span().start,
                        format!("job {name:?} has no {required:?}"),
                        Some(format!("add e.g. {example}")),
                    );
                }
            }
            if let Some(job) = draft.into_job(name) {
                jobs.push(std::sync::Arc::new(job));
            }
        }
        jobs
    }

    /// Applies the known fields of a job table (`job` = its name) or of
    /// `[defaults]` (`job` = None) to `draft`.
    fn fields(&mut self, table: &DeTable, draft: &mut Draft, job: Option<&str>) {
        for (key, value) in in_file_order(table) {
            let name = key.get_ref().as_ref();
            if let Some(field) = JOB_FIELDS.iter().find(|f| f.name == name) {
                draft.offsets.insert(field.name, key.span().start);
            }
            match (JOB_FIELDS.iter().find(|f| f.name == name), job) {
                (Some(field), Some(_)) => (field.apply)(self, value, draft),
                (Some(field), None) if field.inheritable => (field.apply)(self, value, draft),
                (Some(_), None) => self.error(
                    key.span().start,
                    format!("{name:?} cannot be set in [defaults]"),
                    Some("it describes one job: set it in each [jobs.NAME] table".to_string()),
                ),
                (None, Some(job)) => {
                    // `[jobs.a.b]` makes a field "b" of job "a": most likely
                    // a job name with a dot that needed quotes.
                    let dotted_name = (value.get_ref().is_table()
                        && self.raw(value.span()).starts_with('['))
                    .then(|| {
                        format!("to name a job \"{job}.{name}\", quote it: [jobs.\"{job}.{name}\"]")
                    });
                    self.unknown_field(
                        key,
                        JOB_FIELDS.iter().map(|f| f.name),
                        "fields of a job",
                        dotted_name,
                    )
                }
                (None, None) => {
                    let elsewhere = DAEMON_FIELDS
                        .iter()
                        .any(|f| f.name == name)
                        .then(|| format!("{name:?} belongs in [daemon]"));
                    let inheritable = JOB_FIELDS.iter().filter(|f| f.inheritable).map(|f| f.name);
                    self.unknown_field(key, inheritable, "fields of [defaults]", elsewhere)
                }
            }
        }
    }

    /// `after` names jobs of this file, and the dependencies have no cycle.
    fn check_dependencies(&mut self, jobs: &[std::sync::Arc<Job>]) {
        let index: std::collections::HashMap<&str, &Job> =
            jobs.iter().map(|j| (j.name.as_str(), &**j)).collect();
        if jobs.iter().all(|j| j.after.is_empty()) {
            return;
        }
        let at = |ctx: &Ctx, job: &str| -> (usize, usize) {
            ctx.positions
                .get(&(job.to_string(), "after".to_string()))
                .copied()
                .unwrap_or((1, 1))
        };
        for job in jobs {
            for dep in &job.after {
                let problem = if dep == &job.name {
                    Some((format!("job {:?} cannot run after itself", job.name), None))
                } else if !index.contains_key(dep.as_str()) {
                    Some((
                        format!(
                            "job {:?} runs after {dep:?}, which is not a job of this file",
                            job.name
                        ),
                        crate::suggest::did_you_mean(dep, jobs.iter().map(|j| j.name.as_str())),
                    ))
                } else {
                    None
                };
                if let Some((message, hint)) = problem {
                    let (line, col) = at(self, &job.name);
                    self.diags.push(Diagnostic {
                        file: self.file.clone(),
                        line,
                        col,
                        message,
                        hint,
                    });
                }
            }
        }
        // A cycle: depth-first search over `after` edges, reported once at
        // the job where it was found, naming the whole loop.
        let mut state: std::collections::HashMap<&str, u8> = std::collections::HashMap::new();
        fn visit<'j>(
            name: &'j str,
            index: &std::collections::HashMap<&'j str, &'j Job>,
            state: &mut std::collections::HashMap<&'j str, u8>,
            path: &mut Vec<&'j str>,
        ) -> Option<Vec<String>> {
            match state.get(name) {
                Some(2) => return None,
                Some(1) => {
                    let start = path.iter().position(|n| *n == name).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[start..].iter().map(|s| s.to_string()).collect();
                    cycle.push(name.to_string());
                    return Some(cycle);
                }
                _ => {}
            }
            state.insert(name, 1);
            path.push(name);
            if let Some(job) = index.get(name) {
                for dep in &job.after {
                    if dep != name && index.contains_key(dep.as_str()) {
                        if let Some(c) = visit(dep, index, state, path) {
                            return Some(c);
                        }
                    }
                }
            }
            path.pop();
            state.insert(name, 2);
            None
        }
        for job in jobs {
            let mut path = Vec::new();
            if let Some(cycle) = visit(&job.name, &index, &mut state, &mut path) {
                let first = cycle[0].clone();
                let (line, col) = at(self, &first);
                self.diags.push(Diagnostic {
                    file: self.file.clone(),
                    line,
                    col,
                    message: format!(
                        "jobs depend on each other in a cycle: {}",
                        cycle.join(" → ")
                    ),
                    hint: Some("remove one of these \"after\" entries".into()),
                });
                break;
            }
        }
    }

    /// `unknown field "comand"`. The hint is `certain` when the caller knows
    /// better (the name is a field of another section), else the closest
    /// known field, else the list of known fields.
    fn unknown_field<'f>(
        &mut self,
        key: &Key,
        known: impl Iterator<Item = &'f str> + Clone,
        listing: &str,
        certain: Option<String>,
    ) {
        let name = key.get_ref().as_ref();
        let hint = certain
            .or_else(|| crate::suggest::did_you_mean(name, known.clone()))
            .unwrap_or_else(|| format!("{listing}: {}", known.collect::<Vec<_>>().join(", ")));
        self.error(
            key.span().start,
            format!("unknown field {name:?}"),
            Some(hint),
        );
    }

    // --- typed readers: each reports its own problem and returns None ---

    fn type_error(&mut self, v: &Value, expected: &str, hint: Option<String>) {
        let found = match v.get_ref() {
            DeValue::String(_) => "a string",
            DeValue::Integer(_) => "an integer",
            DeValue::Float(_) => "a float",
            DeValue::Boolean(_) => "a boolean",
            DeValue::Datetime(_) => "a date-time",
            DeValue::Array(_) => "an array",
            DeValue::Table(_) => "a table",
        };
        self.error(
            v.span().start,
            format!("expected {expected}, found {found}"),
            hint,
        );
    }

    fn table<'v, 'i>(&mut self, v: &'v Value<'i>, expected: &str) -> Option<&'v DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                self.type_error(v, expected, None);
                None
            }
        }
    }

    fn string<'v>(&mut self, v: &'v Value, expected: &str) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s),
            _ => {
                self.type_error(v, expected, None);
                None
            }
        }
    }

    /// A string that is handed to the OS: not blank, no NUL.
    fn text_field(&mut self, v: &Value, field: &str) -> Option<String> {
        let s = self.string(v, "a string")?;
        if s.trim().is_empty() {
            self.error(v.span().start, format!("{field:?} is empty"), None);
            None
        } else if s.contains('\0') {
            self.error(
                v.span().start,
                format!("{field:?} contains a NUL character"),
                None,
            );
            None
        } else {
            Some(s.to_string())
        }
    }

    fn boolean(&mut self, v: &Value) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            DeValue::String(s) if s == "true" || s == "false" => {
                self.type_error(v, "true or false", Some(format!("drop the quotes: {s}")));
                None
            }
            _ => {
                self.type_error(v, "true or false", None);
                None
            }
        }
    }

    fn integer(&mut self, v: &Value, field: &str, min: i64, max: i64) -> Option<i64> {
        let DeValue::Integer(i) = v.get_ref() else {
            let hint = v
                .get_ref()
                .as_str()
                .filter(|s| s.parse::<i64>().is_ok())
                .map(|s| format!("drop the quotes: {s}"));
            self.type_error(v, "an integer", hint);
            return None;
        };
        // Anything that does not fit i128 is out of every range we accept.
        match i128::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) if (i128::from(min)..=i128::from(max)).contains(&n) => i64::try_from(n).ok(),
            _ => {
                let raw = self.raw(v.span());
                self.error(
                    v.span().start,
                    format!("{field:?} must be between {min} and {max}, found {raw}"),
                    None,
                );
                None
            }
        }
    }

    /// A float (integers accepted: `factor = 2`) within `min..=max`.
    fn float(&mut self, v: &Value, field: &str, min: f64, max: f64) -> Option<f64> {
        let n = match v.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            _ => {
                self.type_error(v, "a number", None);
                return None;
            }
        };
        match n {
            Some(n) if n.is_finite() && (min..=max).contains(&n) => Some(n),
            _ => {
                let raw = self.raw(v.span());
                self.error(
                    v.span().start,
                    format!("{field:?} must be between {min:?} and {max:?}, found {raw}"),
                    None,
                );
                None
            }
        }
    }

    fn duration(&mut self, v: &Value, field: &str) -> Option<Duration> {
        let s = match v.get_ref() {
            DeValue::String(s) => s,
            DeValue::Integer(_) => {
                let raw = self.raw(v.span());
                let hint =
                    format!("durations need a unit: write {field} = \"{raw}s\" for {raw} seconds");
                self.type_error(v, "a string like \"10m\"", Some(hint));
                return None;
            }
            _ => {
                self.type_error(v, "a string like \"10m\"", None);
                return None;
            }
        };
        match crate::duration::parse(s) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(v.span().start, e.message, None);
                None
            }
        }
    }

    /// A byte size: an integer number of bytes or a string like "64KiB".
    fn size(&mut self, v: &Value, field: &str, min: u64, max: u64) -> Option<u64> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix()).ok(),
            DeValue::String(s) => match parse_size(s) {
                Ok(n) => Some(n.into()),
                Err((message, hint)) => {
                    self.error(v.span().start, message, hint);
                    return None;
                }
            },
            _ => {
                self.type_error(v, "a size like \"64KiB\" or a number of bytes", None);
                return None;
            }
        };
        match n.and_then(|n| u64::try_from(n).ok()) {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                let raw = self.raw(v.span());
                let max = if max == u64::MAX {
                    String::new()
                } else {
                    format!(" and at most {}", format_size(max))
                };
                self.error(
                    v.span().start,
                    format!(
                        "{field:?} must be at least {}{max}, found {raw}",
                        format_size(min)
                    ),
                    None,
                );
                None
            }
        }
    }

    fn choice<T: Copy>(&mut self, v: &Value, field: &str, choices: &[(&str, T)]) -> Option<T> {
        let names = || choices.iter().map(|(n, _)| *n);
        let expected = format!("one of {}", quote_list(names()));
        let s = self.string(v, &expected)?;
        if let Some((_, value)) = choices.iter().find(|(n, _)| *n == s) {
            return Some(*value);
        }
        let hint = crate::suggest::did_you_mean(s, names());
        self.error(
            v.span().start,
            format!("{field:?} must be {expected}, found {s:?}"),
            hint,
        );
        None
    }
}

/// Units of sizes: IEC units are powers of 1024, SI units powers of 1000,
/// as their standards define them (unlike some tools that treat "MB" as
/// 1024²); a bare integer is bytes.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KB", 1000),
    ("MB", 1000 * 1000),
    ("GB", 1000 * 1000 * 1000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

/// Parses `"64KiB"`, `"10MB"`, `"512B"`, `"4096"` (an optional single space
/// between number and unit). The error is a message and a hint.
fn parse_size(input: &str) -> Result<u64, (String, Option<String>)> {
    let help = "write e.g. \"64KiB\", \"10MB\" or a number of bytes; units: B KB MB GB KiB MiB GiB";
    let fail =
        |why: &str, hint: Option<String>| (format!("invalid size {input:?}: {why} ({help})"), hint);
    let s = input.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(fail("expected a number", None));
    }
    let (number, unit) = s.split_at(digits);
    let unit = unit.strip_prefix(' ').unwrap_or(unit);
    let number: u64 = number
        .parse()
        .map_err(|_| fail("the number is too large", None))?;
    if unit.is_empty() {
        return Ok(number);
    }
    let Some((_, scale)) = SIZE_UNITS.iter().find(|(u, _)| *u == unit) else {
        let hint = crate::suggest::did_you_mean(unit, SIZE_UNITS.iter().map(|(u, _)| *u));
        return Err(fail(&format!("unknown unit {unit:?}"), hint));
    };
    number
        .checked_mul(*scale)
        .ok_or_else(|| fail("the size is too large", None))
}

/// The largest exact binary unit, for messages: 65536 → "64KiB".
fn format_size(n: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= scale && n % scale == 0 {
            return format!("{}{unit}", n / scale);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(src: &str) -> Result<Config, Vec<Diagnostic>> {
        parse(src.as_bytes(), Path::new("jobs.toml"))
    }

    fn ok(src: &str) -> Config {
        match parse_str(src) {
            Ok(config) => config,
            Err(diags) => panic!("unexpected errors:\n{}", render(&diags)),
        }
    }

    /// The diagnostics as `rea check` prints them, one per line plus hints.
    fn errors(src: &str) -> String {
        match parse_str(src) {
            Ok(_) => panic!("expected errors, the file was accepted"),
            Err(diags) => render(&diags),
        }
    }

    fn render(diags: &[Diagnostic]) -> String {
        diags.iter().map(|d| format!("{d}\n")).collect()
    }

    fn job<'c>(config: &'c Config, name: &str) -> &'c Job {
        config
            .jobs
            .iter()
            .find(|j| j.name == name)
            .expect("job exists")
    }

    const MINIMAL: &str = "[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n";

    #[test]
    fn example_file_is_valid() {
        let config = match parse(
            include_bytes!("../jobs.example.toml"),
            Path::new("jobs.example.toml"),
        ) {
            Ok(config) => config,
            Err(diags) => panic!("{}", render(&diags)),
        };
        assert_eq!(config.jobs.len(), 13);
        assert_eq!(config.daemon.max_concurrent, 4);
        let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names[..3],
            ["prepare", "health-ping", "disk-usage"],
            "jobs keep file order"
        );
        let report = job(&config, "nightly-report");
        assert_eq!(report.timezone, chrono_tz::America::New_York);
        assert_eq!(
            report.env.get("PATH").map(String::as_str),
            Some("/usr/local/bin:/usr/bin:/bin")
        );
        assert_eq!(
            report.env.get("REPORT_FORMAT").map(String::as_str),
            Some("csv")
        );
        assert_eq!(job(&config, "weekly-vacuum").timeout, None);
        assert!(!job(&config, "legacy-export").enabled);
        let backup = job(&config, "db-backup");
        assert_eq!(backup.retry.attempts, 3);
        assert_eq!(backup.retry.factor, 2.0, "factor inherited from [defaults]");
        assert_eq!(backup.retry.jitter, 0.1);
    }

    #[test]
    fn empty_file_has_no_jobs() {
        for src in ["", "\n\n", "# only a comment\n", "\u{feff}"] {
            let config = ok(src);
            assert!(config.jobs.is_empty());
            assert_eq!(config.daemon, DaemonConfig::default());
        }
    }

    #[test]
    fn built_in_defaults() {
        let config = ok(MINIMAL);
        let a = &config.jobs[0];
        assert_eq!(a.name, "a");
        assert_eq!(a.schedule.as_ref().unwrap().source(), "* * * * *");
        assert_eq!(a.command, "true");
        assert_eq!(a.shell, "/bin/sh");
        assert_eq!(a.timezone, Tz::UTC);
        assert_eq!(a.timezone_name, "UTC");
        assert_eq!(a.timeout, None);
        assert_eq!(a.kill_grace, Duration::from_secs(10));
        assert_eq!(a.overlap, Overlap::Skip);
        assert_eq!(a.retry, RetryPolicy::default());
        assert_eq!(a.retry.attempts, 0);
        assert_eq!(a.catch_up, CatchUp::None);
        assert_eq!(a.catch_up_limit, 10);
        assert_eq!(a.jitter, Duration::ZERO);
        assert!(a.env.is_empty());
        assert_eq!(a.dir, None);
        assert!(a.tags.is_empty());
        assert_eq!(a.description, None);
        assert!(a.enabled);
        assert_eq!(a.output_limit, 64 * 1024);
        assert_eq!(config.path, PathBuf::from("jobs.toml"));
    }

    #[test]
    fn every_field_of_the_documented_example() {
        let config = ok(r#"
[defaults]
timezone = "Europe/Berlin"
shell = "/bin/sh"
timeout = "1h"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }

[daemon]
max_concurrent = 8
shutdown_grace = "30s"
history_max_bytes = "64MiB"
history_files = 5

[jobs.sync-orders]
schedule = "*/15 * * * *"
command = "/usr/local/bin/sync-orders --full"
timezone = "Asia/Shanghai"
timeout = "10m"
kill_grace = "10s"
overlap = "queue"
retry = { attempts = 5, delay = "30s", max_delay = "10m", factor = 2.0, jitter = 0.2 }
catch_up = "all"
catch_up_limit = 20
jitter = "5s"
env = { RUST_LOG = "info" }
dir = "/srv/app"
tags = ["billing"]
description = "pull orders from the shop API"
enabled = true
output_limit = "64KiB"

[jobs.other]
schedule = "@hourly"
command = "date"
"#);
        assert_eq!(
            config.daemon,
            DaemonConfig {
                max_concurrent: 8,
                shutdown_grace: Duration::from_secs(30),
                history_max_bytes: 64 << 20,
                history_files: 5,
                sendmail: None,
                metrics: None,
            }
        );
        let j = job(&config, "sync-orders");
        assert_eq!(j.timezone, chrono_tz::Asia::Shanghai);
        assert_eq!(j.timezone_name, "Asia/Shanghai");
        assert_eq!(j.timeout, Some(Duration::from_secs(600)));
        assert_eq!(j.overlap, Overlap::Queue);
        assert_eq!(
            j.retry,
            RetryPolicy {
                attempts: 5,
                delay: Duration::from_secs(30),
                max_delay: Duration::from_secs(600),
                factor: 2.0,
                jitter: 0.2
            }
        );
        assert_eq!(j.catch_up, CatchUp::All);
        assert_eq!(j.catch_up_limit, 20);
        assert_eq!(j.jitter, Duration::from_secs(5));
        assert_eq!(j.dir, Some(PathBuf::from("/srv/app")));
        assert_eq!(j.tags, ["billing"]);
        assert_eq!(
            j.description.as_deref(),
            Some("pull orders from the shop API")
        );
        assert_eq!(j.output_limit, 65536);
        let other = job(&config, "other");
        assert_eq!(
            other.timezone,
            chrono_tz::Europe::Berlin,
            "inherited from [defaults]"
        );
        assert_eq!(other.timeout, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn env_is_overlaid_key_by_key() {
        let config = ok(r#"
[defaults]
env = { PATH = "/bin", LANG = "C" }
[jobs.a]
schedule = "* * * * *"
command = "true"
env = { LANG = "de_DE.UTF-8", EXTRA = "1" }
[jobs.b]
schedule = "* * * * *"
command = "true"
"#);
        let a: Vec<(&str, &str)> = job(&config, "a")
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            a,
            [("EXTRA", "1"), ("LANG", "de_DE.UTF-8"), ("PATH", "/bin")]
        );
        let b: Vec<(&str, &str)> = job(&config, "b")
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(b, [("LANG", "C"), ("PATH", "/bin")]);
    }

    #[test]
    fn retry_is_overridden_key_by_key() {
        let config = ok(r#"
[defaults.retry]
attempts = 3
delay = "1m"
factor = 3
[jobs.a]
schedule = "* * * * *"
command = "true"
retry.attempts = 7
[jobs.b]
schedule = "* * * * *"
command = "true"
retry = { jitter = 0, max_delay = "1h" }
"#);
        let a = &job(&config, "a").retry;
        assert_eq!(
            (a.attempts, a.delay, a.factor),
            (7, Duration::from_secs(60), 3.0)
        );
        let b = &job(&config, "b").retry;
        assert_eq!(
            (b.attempts, b.jitter, b.max_delay),
            (3, 0.0, Duration::from_secs(3600))
        );
    }

    #[test]
    fn defaults_apply_wherever_the_section_is() {
        let config = ok("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n[defaults]\nshell = \"/bin/bash\"\n");
        assert_eq!(config.jobs[0].shell, "/bin/bash");
    }

    #[test]
    fn timeout_none_cancels_the_default() {
        let config = ok("[defaults]\ntimeout = \"1h\"\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntimeout = \"none\"\n");
        assert_eq!(config.jobs[0].timeout, None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("2KB"), Ok(2000));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("99999999999999999999999").is_err());
        assert!(parse_size("99999999999GiB").is_err());
        assert_eq!(
            parse_size("64mib"),
            Err((
                "invalid size \"64mib\": unknown unit \"mib\" (write e.g. \"64KiB\", \"10MB\" or a number of bytes; units: B KB MB GB KiB MiB GiB)".to_string(),
                Some("did you mean \"MiB\"?".to_string())
            ))
        );
        let config = ok("[daemon]\nhistory_max_bytes = 1048576\n");
        assert_eq!(config.daemon.history_max_bytes, 1 << 20);
    }

    #[test]
    fn unknown_field_with_hint() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncomand = \"true\"\ncommand = \"x\"\n"),
            "jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurent = 3\n"),
            "jobs.toml:2:1: unknown field \"max_concurent\"\n  hint: did you mean \"max_concurrent\"?\n"
        );
        assert_eq!(
            errors("[defaults]\nretry = { atempts = 3 }\n"),
            "jobs.toml:2:11: unknown field \"atempts\"\n  hint: did you mean \"attempts\"?\n"
        );
        assert_eq!(
            errors("[daemon]\nzzz = 1\n"),
            "jobs.toml:2:1: unknown field \"zzz\"\n  hint: fields of [daemon]: max_concurrent, shutdown_grace, history_max_bytes, history_files, sendmail, metrics\n"
        );
    }

    #[test]
    fn fields_in_the_wrong_section() {
        assert_eq!(
            errors("[defaults]\nschedule = \"* * * * *\"\ntags = []\n"),
            "jobs.toml:2:1: \"schedule\" cannot be set in [defaults]\n  hint: it describes one job: set it in each [jobs.NAME] table\n\
             jobs.toml:3:1: \"tags\" cannot be set in [defaults]\n  hint: it describes one job: set it in each [jobs.NAME] table\n"
        );
        assert_eq!(
            errors("[defaults]\nmax_concurrent = 3\n"),
            "jobs.toml:2:1: unknown field \"max_concurrent\"\n  hint: \"max_concurrent\" belongs in [daemon]\n"
        );
        assert_eq!(
            errors("[daemon]\ntimeout = \"1m\"\n"),
            "jobs.toml:2:1: unknown field \"timeout\"\n  hint: it belongs in [defaults] or a [jobs.NAME] table\n"
        );
    }

    #[test]
    fn unknown_section() {
        assert_eq!(
            errors("[job.a]\nschedule = \"* * * * *\"\n"),
            "jobs.toml:1:2: unknown section \"job\"\n  hint: did you mean \"jobs\"?\n"
        );
        assert_eq!(
            errors("command = \"true\"\n[xyz]\n"),
            "jobs.toml:1:1: unknown section \"command\"\n  hint: fields of a job go under its [jobs.NAME] header\n\
             jobs.toml:2:2: unknown section \"xyz\"\n  hint: the sections are [defaults], [daemon] and [jobs.NAME]\n"
        );
    }

    #[test]
    fn bad_duration() {
        assert_eq!(
            errors("[defaults]\ntimeout = \"10x\"\n"),
            "jobs.toml:2:11: invalid duration \"10x\": unknown unit \"x\" (write e.g. \"90s\", \"10m\", \"1h30m\", \"2d\"; units: ms s m h d w)\n"
        );
        assert_eq!(
            errors("[defaults]\ntimeout = \"0s\"\n"),
            "jobs.toml:2:11: \"timeout\" must be longer than 0s\n  hint: write timeout = \"none\" for no timeout\n"
        );
    }

    #[test]
    fn wrong_types() {
        assert_eq!(
            errors("[defaults]\ntimeout = 10\n"),
            "jobs.toml:2:11: expected a string like \"10m\", found an integer\n  hint: durations need a unit: write timeout = \"10s\" for 10 seconds\n"
        );
        assert_eq!(
            errors("[defaults]\nkill_grace = true\nenv = { PORT = 8080 }\nretry = 3\n"),
            "jobs.toml:2:14: expected a string like \"10m\", found a boolean\n\
             jobs.toml:3:16: expected a string, found an integer\n  hint: quote it: PORT = \"8080\"\n\
             jobs.toml:4:9: expected a table like { attempts = 3, delay = \"30s\" }, found an integer\n"
        );
        assert_eq!(
            errors("[jobs.a]\nschedule = 5\ncommand = [\"ls\"]\nenabled = \"false\"\n"),
            "jobs.toml:2:12: expected a cron expression like \"*/15 * * * *\", found an integer\n\
             jobs.toml:3:11: expected a string, found an array\n\
             jobs.toml:4:11: expected true or false, found a string\n  hint: drop the quotes: false\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurrent = \"4\"\nhistory_max_bytes = 1.5\n"),
            "jobs.toml:2:18: expected an integer, found a string\n  hint: drop the quotes: 4\n\
             jobs.toml:3:21: expected a size like \"64KiB\" or a number of bytes, found a float\n"
        );
        assert_eq!(
            errors("daemon = 1979-05-27\n"),
            "jobs.toml:1:10: expected a table like [daemon], found a date-time\n"
        );
    }

    #[test]
    fn bad_enum_value() {
        assert_eq!(
            errors("[defaults]\noverlap = \"skp\"\ncatch_up = \"al\"\n"),
            "jobs.toml:2:11: \"overlap\" must be one of \"skip\", \"queue\", \"allow\", \"replace\", found \"skp\"\n  hint: did you mean \"skip\"?\n\
             jobs.toml:3:12: \"catch_up\" must be one of \"none\", \"once\", \"all\", found \"al\"\n  hint: did you mean \"all\"?\n"
        );
        assert_eq!(
            errors("[defaults]\noverlap = 1\n"),
            "jobs.toml:2:11: expected one of \"skip\", \"queue\", \"allow\", \"replace\", found an integer\n"
        );
    }

    #[test]
    fn out_of_range_numbers() {
        assert_eq!(
            errors("[defaults]\nretry = { attempts = -1 }\n"),
            "jobs.toml:2:22: \"retry.attempts\" must be between 0 and 100, found -1\n"
        );
        assert_eq!(
            errors("[defaults]\nretry = { attempts = 99999999999999999999999999999999999999999, factor = 0.5, jitter = 1.5 }\n"),
            "jobs.toml:2:22: \"retry.attempts\" must be between 0 and 100, found 99999999999999999999999999999999999999999\n\
             jobs.toml:2:74: \"retry.factor\" must be between 1.0 and 1000.0, found 0.5\n\
             jobs.toml:2:88: \"retry.jitter\" must be between 0.0 and 1.0, found 1.5\n"
        );
        assert_eq!(
            errors("[defaults.retry]\nfactor = inf\njitter = nan\n"),
            "jobs.toml:2:10: \"retry.factor\" must be between 1.0 and 1000.0, found inf\n\
             jobs.toml:3:10: \"retry.jitter\" must be between 0.0 and 1.0, found nan\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurrent = 0\nhistory_max_bytes = \"1KiB\"\n[defaults]\noutput_limit = \"2GiB\"\ncatch_up_limit = 0x7fffffffffffffff\n"),
            "jobs.toml:2:18: \"max_concurrent\" must be between 1 and 10000, found 0\n\
             jobs.toml:3:21: \"history_max_bytes\" must be at least 4KiB, found \"1KiB\"\n\
             jobs.toml:5:16: \"output_limit\" must be at least 0B and at most 1GiB, found \"2GiB\"\n\
             jobs.toml:6:18: \"catch_up_limit\" must be between 1 and 1000, found 0x7fffffffffffffff\n"
        );
    }

    #[test]
    fn max_delay_below_delay() {
        assert_eq!(
            errors("[defaults]\nretry = { delay = \"20m\" }\n"),
            "jobs.toml:2:19: \"retry.max_delay\" (10m) must be at least \"retry.delay\" (20m)\n"
        );
        // Reported once, at the table that broke the rule, not at every job.
        assert_eq!(
            errors("[defaults]\nretry = { delay = \"1m\" }\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\nretry = { max_delay = \"30s\" }\n"),
            "jobs.toml:6:23: \"retry.max_delay\" (30s) must be at least \"retry.delay\" (1m)\n"
        );
    }

    #[test]
    fn invalid_job_names() {
        assert_eq!(
            errors("[jobs.\"a b\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"a b\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"a-b\"\n"
        );
        assert_eq!(
            errors("[jobs.\"\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\", and must not be empty\n"
        );
        assert_eq!(
            errors("[jobs.\"día\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"día\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"d-a\"\n"
        );
        // A quoted name with a dot is the way to name a job "a.b".
        assert_eq!(
            ok("[jobs.\"a.b\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n").jobs[0].name,
            "a.b"
        );
        assert_eq!(
            errors("[jobs.a.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: job \"a\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n\
             jobs.toml:1:7: job \"a\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:1:9: unknown field \"b\"\n  hint: to name a job \"a.b\", quote it: [jobs.\"a.b\"]\n"
        );
    }

    #[test]
    fn missing_required_fields() {
        assert_eq!(
            errors("[jobs.backup]\nschedule = \"0 3 * * *\"\n\n[jobs.sync]\ncommand = \"true\"\n"),
            "jobs.toml:1:1: job \"backup\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:4:1: job \"sync\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n"
        );
        assert_eq!(
            errors("[jobs]\nx = {}\ny = 3\n"),
            "jobs.toml:2:5: job \"x\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n\
             jobs.toml:2:5: job \"x\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:3:5: expected a job table like [jobs.NAME], found an integer\n"
        );
        assert_eq!(
            errors("[[jobs]]\nschedule = \"* * * * *\"\n"),
            "jobs.toml:1:1: expected a table of jobs like [jobs.NAME], found an array\n  hint: write each job as [jobs.NAME] with a unique NAME, not [[jobs]]\n"
        );
    }

    #[test]
    fn string_fields_are_checked() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"  \"\ndir = \"srv\"\nshell = \"/bin/sh\\u0000\"\ntags = [\"ok\", \"not ok\", 1]\nenv = { \"A=B\" = \"1\" }\n"),
            "jobs.toml:3:11: \"command\" is empty\n\
             jobs.toml:4:7: \"dir\" must be an absolute path, found \"srv\"\n  hint: a relative directory would depend on where rea was started\n\
             jobs.toml:5:9: \"shell\" contains a NUL character\n\
             jobs.toml:6:15: invalid tag \"not ok\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"not-ok\"\n\
             jobs.toml:6:25: expected a string, found an integer\n\
             jobs.toml:7:9: invalid environment variable name \"A=B\"\n  hint: names must be non-empty and contain no \"=\" or NUL\n"
        );
    }

    #[test]
    fn huge_values_are_not_repeated_in_full() {
        let big = "x".repeat(100_000);
        let text = errors(&format!("[defaults]\ntimeout = \"{big}\"\n"));
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert!(text.contains("more bytes)"), "{text}");
    }

    #[test]
    fn unknown_timezone() {
        assert_eq!(
            errors("[defaults]\ntimezone = \"Europe/Berln\"\n"),
            "jobs.toml:2:12: unknown timezone \"Europe/Berln\"\n  hint: did you mean one of \"Europe/Berlin\", \"Europe/Dublin\", \"Europe/Belgrade\"?\n"
        );
        assert_eq!(
            errors("[defaults]\ntimezone = \"Mars/Olympus_Mons\"\n"),
            "jobs.toml:2:12: unknown timezone \"Mars/Olympus_Mons\"\n  hint: use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"\n"
        );
    }

    #[test]
    fn syntax_error_position() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\ncommand = \"true\"\n"),
            "jobs.toml:2:22: invalid TOML: string is not closed on this line\n  hint: end it with \" (a string over several lines is written \"\"\"...\"\"\")\n"
        );
        assert_eq!(
            errors("[jobs.a\n"),
            "jobs.toml:1:8: invalid TOML: unclosed table, expected `]`\n"
        );
        assert_eq!(
            errors("# ü\n  ünquoted = 1\n"),
            "jobs.toml:2:3: invalid TOML: invalid unquoted key, expected letters, numbers, `-`, `_`\n"
        );
    }

    #[test]
    fn duplicate_keys_and_tables() {
        assert_eq!(
            errors("[jobs.a]\ncommand = \"a\"\ncommand = \"b\"\n"),
            "jobs.toml:3:1: invalid TOML: duplicate key \"command\"\n  hint: each key may appear once per table\n"
        );
        assert_eq!(
            errors("[jobs.a]\ncommand = \"a\"\n\n[jobs.a]\n"),
            "jobs.toml:4:7: invalid TOML: duplicate table [jobs.a]\n  hint: each table may appear once; merge the two\n"
        );
        assert_eq!(
            errors("[jobs]\n\"a b\" = {}\n'a b' = {} # again\n"),
            "jobs.toml:3:1: invalid TOML: duplicate key 'a b'\n  hint: each key may appear once per table\n"
        );
    }

    #[test]
    fn syntax_errors_read_well() {
        assert_eq!(
            errors("[jobs.a]\ncommand =   # TODO\n"),
            "jobs.toml:2:13: invalid TOML: missing value after \"=\"\n  hint: write e.g. key = \"value\"\n"
        );
        assert_eq!(errors("a = \"\0\"\n"), "jobs.toml:1:6: invalid TOML: control character U+0000 is not allowed here\n  hint: remove it; inside a string it can be written escaped, e.g. \"\\u0000\"\n");
        assert_eq!(
            errors("x = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["),
            "jobs.toml:1:85: invalid TOML: cannot recurse further; max recursion depth met\n"
        );
    }

    #[test]
    fn invalid_utf8_is_located() {
        let src = b"[jobs.a]\ncommand = \"caf\xc3\xa9 \xff\"\n";
        let diags = parse(src, Path::new("jobs.toml")).unwrap_err();
        assert_eq!(
            render(&diags),
            "jobs.toml:2:17: the job file is not valid UTF-8 (byte 0xFF)\n  hint: save the file as UTF-8\n"
        );
        let diags = parse(b"\xfe", Path::new("j")).unwrap_err();
        assert_eq!((diags[0].line, diags[0].col), (1, 1));
    }

    #[test]
    fn every_problem_at_once_in_file_order() {
        let src = r#"[jobs.zeta]
schedule = "* * * * *"
comand = "true"

[daemon]
max_concurrent = 0

[jobs.alpha]
schedule = "* * * * *"
command = "true"
overlap = "never"
retry = { attempts = 101 }

[extra]
"#;
        assert_eq!(
            errors(src),
            "jobs.toml:1:1: job \"zeta\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n\
             jobs.toml:6:18: \"max_concurrent\" must be between 1 and 10000, found 0\n\
             jobs.toml:11:11: \"overlap\" must be one of \"skip\", \"queue\", \"allow\", \"replace\", found \"never\"\n\
             jobs.toml:12:22: \"retry.attempts\" must be between 0 and 100, found 101\n\
             jobs.toml:14:2: unknown section \"extra\"\n  hint: the sections are [defaults], [daemon] and [jobs.NAME]\n"
        );
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(
            errors("[jobs.a] # ünïcödé\nschedule = \"* * * * *\"\ncommand = \"true\"\ndescription = \"ü\"; overlap = 1\n"),
            "jobs.toml:4:18: invalid TOML: unexpected key or value, expected newline, `#`\n"
        );
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\nenv = { \"ü\" = \"x\", B = 1 }\n"),
            "jobs.toml:4:24: expected a string, found an integer\n  hint: quote it: B = \"1\"\n"
        );
    }

    #[test]
    fn cron_errors_point_into_the_string() {
        let e = |span: Option<Range<usize>>| ScheduleError {
            message: "bad".into(),
            hint: None,
            span,
        };
        let text = "schedule = \"*/15 * 99 * *\"\n";
        let value = 11..26;
        assert_eq!(&text[value.clone()], "\"*/15 * 99 * *\"");
        assert_eq!(
            schedule_error_offset(text, value.clone(), "*/15 * 99 * *", &e(Some(7..9))),
            19
        );
        assert_eq!(&text[19..21], "99");
        assert_eq!(
            schedule_error_offset(text, value.clone(), "*/15 * 99 * *", &e(None)),
            11
        );
        // Literal strings have no escapes either.
        let text = "schedule = '0 0 * * XYZ'";
        assert_eq!(
            schedule_error_offset(text, 11..24, "0 0 * * XYZ", &e(Some(8..11))),
            20
        );
        // Escapes break the mapping: point at the string.
        let text = "schedule = \"0 0 * *\\t1\"";
        assert_eq!(
            schedule_error_offset(text, 11..23, "0 0 * *\t1", &e(Some(8..9))),
            11
        );
        // Multi-line strings too.
        let text = "schedule = \"\"\"0 0 * * 9\"\"\"";
        assert_eq!(
            schedule_error_offset(text, 11..26, "0 0 * * 9", &e(Some(8..9))),
            11
        );
        // A span past the end (a buggy parser) never points outside the value.
        let text = "schedule = \"0\"";
        assert_eq!(
            schedule_error_offset(text, 11..14, "0", &e(Some(50..51))),
            11
        );
    }

    #[test]
    fn positions() {
        let ctx = Ctx::new("f".into(), "ab\nçd\n\nx");
        assert_eq!(ctx.position(0), (1, 1));
        assert_eq!(ctx.position(2), (1, 3));
        assert_eq!(ctx.position(3), (2, 1));
        assert_eq!(ctx.position(5), (2, 2), "after the two-byte ç");
        assert_eq!(ctx.position(4), (2, 1), "inside ç: its start");
        assert_eq!(ctx.position(7), (3, 1));
        assert_eq!(ctx.position(8), (4, 1));
        assert_eq!(ctx.position(9), (4, 2));
        assert_eq!(ctx.position(999), (4, 2), "past the end: the end");
        assert_eq!(Ctx::new("f".into(), "").position(0), (1, 1));
    }

    #[test]
    fn hostile_input_never_panics() {
        let mut inputs: Vec<Vec<u8>> = vec![
            vec![0u8; 100],
            b"a = \"\0\"".to_vec(),
            b"[jobs.a]\nschedule = \"* * * * *\0\"".to_vec(),
            (0..=255u8).collect(),
            (0..=255u8).rev().cycle().take(10_000).collect(),
            b"\xef\xbb\xbf[jobs.a]\nschedule = 1".to_vec(),
            b"\r\n\r\n[jobs.a]\r\ncommand = 1\r\n".to_vec(),
            format!("[jobs.a]\ncommand = \"{}\"\n", "x".repeat(1 << 20)).into_bytes(),
            format!("# {}\n[jobs.a]\nx = 1", "é".repeat(1 << 19)).into_bytes(),
            format!("x = {}", "[".repeat(100_000)).into_bytes(),
            format!("x = {}{}", "[".repeat(70), "]".repeat(70)).into_bytes(),
            format!("x = {}", "{a=".repeat(50_000)).into_bytes(),
            format!("{}= 1", "a.".repeat(10_000)).into_bytes(),
            format!("[{}]", "a.".repeat(10_000)).into_bytes(),
            b"[daemon]\nmax_concurrent = 18446744073709551616\nhistory_max_bytes = -1\nhistory_files = -9223372036854775808".to_vec(),
            b"[defaults]\nretry = { factor = 1e999, jitter = -0.0, attempts = 0b1111 }".to_vec(),
            b"[jobs.a]\nschedule = \"\"\"\n".to_vec(),
            b"[[jobs.a]]\n[jobs.a.retry]\n".to_vec(),
            b"jobs = []\ndefaults = []\n".to_vec(),
            b"[jobs]\na = 1\nb = \"x\"\nc = []\nd.e.f = 1\n".to_vec(),
        ];
        let example = include_bytes!("../jobs.example.toml");
        for cut in 0..example.len() {
            inputs.push(example[..cut].to_vec());
        }
        for input in &inputs {
            let result = parse(input, Path::new("jobs.toml"));
            if let Err(diags) = result {
                assert!(!diags.is_empty());
                for d in diags {
                    assert!(d.line >= 1 && d.col >= 1, "{d}");
                    assert!(!d.message.contains('\n'), "one-line messages: {d:?}");
                }
            }
        }
    }

    #[test]
    fn one_mebibyte_line_is_located() {
        let src = format!(
            "[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"{}\" x\n",
            "é".repeat(1 << 20)
        );
        assert_eq!(
            errors(&src),
            format!(
                "jobs.toml:3:{}: invalid TOML: unexpected key or value, expected newline, `#`\n",
                12 + (1 << 20) + 2
            )
        );
    }

    #[test]
    fn permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, MINIMAL).expect("write");
        let chmod = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };

        chmod(0o644);
        assert!(check_permissions(&path).is_ok());
        assert_eq!(load(&path).expect("valid").jobs.len(), 1);
        chmod(0o600);
        assert!(check_permissions(&path).is_ok());

        chmod(0o664);
        let d = check_permissions(&path).unwrap_err();
        assert_eq!(
            d.message,
            "refusing a job file writable by group (mode 0664): whoever can edit it can run commands as rea's user"
        );
        assert_eq!(
            d.hint.as_deref(),
            Some(format!("run: chmod go-w {}", path.display()).as_str())
        );
        assert_eq!(load(&path).unwrap_err(), vec![d]);
        let relaxed = LoadOptions {
            allow_insecure_permissions: true,
        };
        assert_eq!(load_with(&path, relaxed).expect("allowed").jobs.len(), 1);

        chmod(0o646);
        assert!(check_permissions(&path)
            .unwrap_err()
            .message
            .contains("writable by others (mode 0646)"));
        chmod(0o666);
        assert!(check_permissions(&path)
            .unwrap_err()
            .message
            .contains("writable by group and others (mode 0666)"));

        // A bad file is reported with its permission problem, all at once.
        std::fs::write(&path, "[jobs.a]\n").expect("write");
        let diags = load(&path).unwrap_err();
        assert_eq!(diags.len(), 3);
        assert!(diags[0]
            .message
            .starts_with("refusing a job file writable by group and others"));

        let missing = dir.path().join("nope.toml");
        let diags = load(&missing).unwrap_err();
        assert!(
            diags[0].message.starts_with("cannot read the job file: "),
            "{}",
            diags[0]
        );
    }

    #[test]
    fn hint_quotes_odd_paths() {
        assert_eq!(shell_quote("/etc/rea/jobs.toml"), "/etc/rea/jobs.toml");
        assert_eq!(shell_quote("my jobs.toml"), "'my jobs.toml'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn duplicate_tags_collapse() {
        let config = ok("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntags = [\"x\", \"y\", \"x\"]\n");
        assert_eq!(config.jobs[0].tags, ["x", "y"]);
    }

    #[test]
    fn metrics_address() {
        let config = ok("[daemon]\nmetrics = \"127.0.0.1:9746\"\n");
        assert_eq!(config.daemon.metrics, Some(([127, 0, 0, 1], 9746).into()));
        let config = ok("[daemon]\nmetrics = \"[::1]:0\"\n");
        assert_eq!(config.daemon.metrics.map(|a| a.is_ipv6()), Some(true));
        assert_eq!(ok("[daemon]\n").daemon.metrics, None);
        assert_eq!(
            errors("[daemon]\nmetrics = \"localhost:9746\"\n"),
            "jobs.toml:2:11: invalid metrics address \"localhost:9746\"\n  hint: write IP:PORT, e.g. \"127.0.0.1:9746\" or \"[::1]:9746\" (an address, not a host name)\n"
        );
        assert_eq!(
            errors("[daemon]\nmetrics = 9746\n"),
            "jobs.toml:2:11: expected a string like \"127.0.0.1:9746\", found an integer\n"
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes, and TOML-ish soup, never panic and always locate.
        #[test]
        fn arbitrary_bytes(src in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Err(diags) = parse(&src, Path::new("j")) {
                prop_assert!(diags.iter().all(|d| d.line >= 1 && d.col >= 1));
            }
        }

        #[test]
        fn toml_soup(parts in proptest::collection::vec(prop::sample::select(vec![
            "[", "]", "[[", "]]", "jobs", "defaults", "daemon", ".", "a", "\"", "'", "=", " ", "\n",
            "{", "}", ",", "1", "-1", "2.5", "\"x\"", "\"10m\"", "retry", "env", "schedule", "command",
            "true", "#", "\\", "\"\"\"", "é", "\0", "attempts", "timezone", "\"UTC\"", "tags",
        ]), 0..60)) {
            let src: String = parts.concat();
            if let Err(diags) = parse(src.as_bytes(), Path::new("j")) {
                prop_assert!(diags.iter().all(|d| d.line >= 1 && d.col >= 1));
            }
        }
    }
}
