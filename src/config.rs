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
    let permissions = if options.allow_insecure_permissions {
        Ok(())
    } else {
        check_permissions(path)
    };
    match (permissions, parse(&bytes, path)) {
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
            Config {
                path: path.to_path_buf(),
                daemon,
                jobs,
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
];

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
        }
    }
}

impl Draft {
    /// The finished job, if the required fields were read successfully.
    fn into_job(self, name: &str) -> Option<Job> {
        Some(Job {
            name: name.to_string(),
            schedule: self.schedule?,
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
        })
    }
}

fn apply_schedule(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(expr) = ctx.string(v, "a cron expression like \"*/15 * * * *\"") else {
        return;
    };
    match Schedule::parse(expr) {
        Ok(schedule) => d.schedule = Some(schedule),
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
            let hint = match e.suggestions.as_slice() {
                [] => Some(
                    "use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"".to_string(),
                ),
                [one] => Some(format!("did you mean {one:?}?")),
                many => Some(format!(
                    "did you mean one of {}?",
                    quote_list(many.iter().map(String::as_str))
                )),
            };
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
fn name_problem(name: &str) -> Option<String> {
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
            message: message.into(),
            hint,
        });
    }

    fn raw(&self, span: Range<usize>) -> &'a str {
        self.text.get(span).unwrap_or("")
    }

    fn syntax_error(&mut self, e: &toml::de::Error) {
        let at = e.span().map_or(0, |s| s.start);
        let mut message = e.message().trim().to_string();
        let mut hint = None;
        if message == "duplicate key" {
            let key = e.span().map(|s| self.raw(s)).unwrap_or("");
            message = format!("duplicate key {key}");
            hint = Some("a key or table may be defined only once; merge the two".to_string());
        }
        self.error(at, format!("invalid TOML: {message}"), hint);
    }

    fn document(&mut self, root: &DeTable) -> (DaemonConfig, Vec<Job>) {
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

    fn jobs(&mut self, value: &Value, defaults: &Draft) -> Vec<Job> {
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
            self.fields(fields, &mut draft, Some(name));
            for required in ["schedule", "command"] {
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
                jobs.push(job);
            }
        }
        jobs
    }

    /// Applies the known fields of a job table (`job` = its name) or of
    /// `[defaults]` (`job` = None) to `draft`.
    fn fields(&mut self, table: &DeTable, draft: &mut Draft, job: Option<&str>) {
        for (key, value) in in_file_order(table) {
            let name = key.get_ref().as_ref();
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

    /// `unknown field "comand"`, hinting the closest known field, else
    /// `fallback`, else the list of known fields.
    fn unknown_field<'f>(
        &mut self,
        key: &Key,
        known: impl Iterator<Item = &'f str> + Clone,
        listing: &str,
        fallback: Option<String>,
    ) {
        let name = key.get_ref().as_ref();
        let hint = crate::suggest::did_you_mean(name, known.clone())
            .or(fallback)
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

fn suggest_or<'f>(input: &str, known: impl IntoIterator<Item = &'f str>) -> Option<String> {
    crate::suggest::did_you_mean(input, known)
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
