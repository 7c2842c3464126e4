//! The schema: one table of known fields per section of the job file.
//! An entry names the field, says whether `[defaults]` may set it, and
//! holds the one function that reads it into the draft.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use rea_core::alert::{AlertRules, RunningOver};
use rea_core::backoff::RetryPolicy;
use rea_core::job::{name_problem, CatchUp, Job, MailOn, Overlap};
use rea_core::schedule::{Schedule, ScheduleError};
use toml::de::DeValue;
use toml::Spanned;

use crate::walk::{in_file_order, Ctx};
use crate::{ClusterConfig, DaemonConfig, JobOutput};

// ---------------------------------------------------------------------------
// The schema: one table of known fields per section.

pub(crate) type Value<'i> = Spanned<DeValue<'i>>;
pub(crate) type Key<'i> = Spanned<Cow<'i, str>>;

/// The sections a job file may have, in the order they are documented.
pub(crate) const SECTIONS: &[&str] = &["defaults", "daemon", "cluster", "tenants", "jobs"];

/// The fields of a `[tenants.NAME]` table: the cgroup limits of a job
/// (read by the job's own field, so they take the same values and fail
/// with the same messages), and `min_nice`.
pub(crate) const TENANT_FIELDS: &[&str] = &[
    "memory_max",
    "memory_high",
    "cpu_max",
    "cpu_weight",
    "io_weight",
    "tasks_max",
    "min_nice",
];

/// A field of a job (and, if `inheritable`, of `[defaults]`).
pub(crate) struct Field {
    pub(crate) name: &'static str,
    /// Whether `[defaults]` may set it for every job.
    pub(crate) inheritable: bool,
    /// Reads the value into the draft, reporting problems; fields that merge
    /// with `[defaults]` (env, retry) merge here.
    pub(crate) apply: fn(&mut Ctx, &Value, &mut Draft),
}

pub(crate) const JOB_FIELDS: &[Field] = &[
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
                d.job.command = s;
            }
        },
    },
    Field {
        name: "description",
        inheritable: false,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.string(v, "a string") {
                d.job.extras_mut().description = Some(s.to_string());
            }
        },
    },
    Field {
        name: "enabled",
        inheritable: false,
        apply: |ctx, v, d| {
            if let Some(b) = ctx.boolean(v) {
                d.job.enabled = b;
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
                d.job.shell = ctx.intern(&s);
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
                d.job.timeout = None;
            } else if let Some(t) = ctx.duration(v, "timeout") {
                if t.is_zero() {
                    ctx.error(
                        v.span().start,
                        "\"timeout\" must be longer than 0s",
                        Some("write timeout = \"none\" for no timeout".to_string()),
                    );
                } else {
                    d.job.timeout = Some(t);
                }
            }
        },
    },
    Field {
        name: "kill_grace",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "kill_grace") {
                d.job.kill_grace = t;
            }
        },
    },
    Field {
        name: "overlap",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(o) = ctx.choice(v, "overlap", &Overlap::ALL) {
                d.job.overlap = o;
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
                d.job.catch_up = c;
            }
        },
    },
    Field {
        name: "catch_up_limit",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "catch_up_limit", 1, 1000) {
                d.job.catch_up_limit = n as u32;
            }
        },
    },
    Field {
        name: "jitter",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "jitter") {
                d.job.jitter = t;
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
                    d.job.dir = Some(PathBuf::from(s));
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
                d.job.output_limit = usize::try_from(n).unwrap_or(usize::MAX);
            }
        },
    },
    Field {
        name: "user",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "user") {
                d.job.user = Some(s);
            }
        },
    },
    Field {
        name: "kill_stragglers",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(b) = ctx.boolean(v) {
                d.job.kill_stragglers = b;
            }
        },
    },
    Field {
        name: "memory_max",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.size(v, "memory_max", 1 << 20, u64::MAX) {
                d.job.extras_mut().limits.memory_max = Some(n);
            }
        },
    },
    Field {
        name: "memory_high",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.size(v, "memory_high", 1 << 20, u64::MAX) {
                d.job.extras_mut().limits.memory_high = Some(n);
            }
        },
    },
    Field {
        name: "cpu_max",
        inheritable: true,
        apply: apply_cpu_max,
    },
    Field {
        name: "cpu_weight",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "cpu_weight", 1, 10_000) {
                d.job.extras_mut().limits.cpu_weight = Some(n as u32);
            }
        },
    },
    Field {
        name: "io_weight",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "io_weight", 1, 10_000) {
                d.job.extras_mut().limits.io_weight = Some(n as u32);
            }
        },
    },
    Field {
        name: "tasks_max",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "tasks_max", 1, 4_194_304) {
                d.job.extras_mut().limits.tasks_max = Some(n as u64);
            }
        },
    },
    Field {
        name: "nice",
        inheritable: true,
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "nice", -20, 19) {
                d.job.extras_mut().limits.nice = Some(n as i32);
            }
        },
    },
    Field {
        name: "ionice",
        inheritable: true,
        apply: apply_ionice,
    },
    Field {
        name: "nofile",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().limits.nofile = rlimit(ctx, v, "nofile", false),
    },
    Field {
        name: "nproc",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().limits.nproc = rlimit(ctx, v, "nproc", false),
    },
    Field {
        name: "core",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().limits.core = rlimit(ctx, v, "core", true),
    },
    Field {
        name: "stack",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().limits.stack = rlimit(ctx, v, "stack", true),
    },
    Field {
        name: "as",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().limits.address_space = rlimit(ctx, v, "as", true),
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
                d.job.extras_mut().mail_on = m;
            }
        },
    },
    Field {
        name: "webhook",
        inheritable: true,
        apply: crate::notify::apply_webhook,
    },
    Field {
        name: "ping",
        inheritable: true,
        apply: crate::notify::apply_ping,
    },
    Field {
        name: "on_failure",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().on_failure = ctx.text_field(v, "on_failure"),
    },
    Field {
        name: "on_alert",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().on_alert = ctx.text_field(v, "on_alert"),
    },
    Field {
        name: "alert",
        inheritable: true,
        apply: apply_alert,
    },
    Field {
        name: "on_success",
        inheritable: true,
        apply: |ctx, v, d| d.job.extras_mut().on_success = ctx.text_field(v, "on_success"),
    },
    Field {
        name: "on_retry_exhausted",
        inheritable: true,
        apply: |ctx, v, d| {
            d.job.extras_mut().on_retry_exhausted = ctx.text_field(v, "on_retry_exhausted")
        },
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
                    d.job.extras_mut().hook_timeout = t;
                }
            }
        },
    },
    Field {
        name: "on_lease_lost",
        inheritable: true,
        apply: |ctx, v, d| {
            let choices = [
                ("keep", rea_core::claim::OnLeaseLost::Keep),
                ("kill", rea_core::claim::OnLeaseLost::Kill),
            ];
            if let Some(c) = ctx.choice(v, "on_lease_lost", &choices) {
                d.job.on_lease_lost = c;
            }
        },
    },
    Field {
        name: "after",
        inheritable: false,
        apply: apply_after,
    },
    Field {
        name: "params",
        inheritable: false,
        apply: apply_params,
    },
];

/// `after = ["extract", { job = "load", on = "failure" }]`: a plain name
/// means `on = "success"`; both forms mix in one list. A job listed twice
/// with the same condition counts once; with two conditions it is refused
/// (a join would wait for both ends of one run, which never comes).
fn apply_after(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    const EXPECTED: &str =
        "an array of job names or tables, like [\"extract\", { job = \"load\", on = \"failure\" }]";
    let DeValue::Array(items) = v.get_ref() else {
        ctx.type_error(v, EXPECTED, None);
        return;
    };
    let mut deps: Vec<rea_core::job::Dependency> = Vec::new();
    for item in items {
        let dep = match item.get_ref() {
            DeValue::String(s) => Some(rea_core::job::Dependency {
                job: s.to_string(),
                on: rea_core::job::On::Success,
            }),
            DeValue::Table(t) => after_entry(ctx, item, t),
            _ => {
                ctx.type_error(
                    item,
                    "a job name, or a table like { job = \"extract\", on = \"failure\" }",
                    None,
                );
                None
            }
        };
        let Some(dep) = dep else { continue };
        match deps.iter().find(|d| d.job == dep.job) {
            Some(d) if d.on == dep.on => {}
            Some(d) => ctx.error(
                item.span().start,
                format!(
                    "\"after\" lists {:?} twice, on {} and on {}",
                    dep.job,
                    d.on.as_str(),
                    dep.on.as_str()
                ),
                Some(format!(
                    "list it once: {{ job = {:?}, on = \"always\" }} runs after either end",
                    dep.job
                )),
            ),
            None => deps.push(dep),
        }
    }
    if deps.is_empty() && items.is_empty() {
        ctx.error(
            v.span().start,
            "\"after\" lists no job",
            Some("write after = [\"extract\"], or remove the field".into()),
        );
    }
    d.job.after = deps;
}

/// `{ job = "extract", on = "failure" }`; `on` defaults to success.
fn after_entry(
    ctx: &mut Ctx,
    item: &Value,
    table: &toml::de::DeTable,
) -> Option<rea_core::job::Dependency> {
    let mut job = None;
    let mut on = rea_core::job::On::Success;
    let mut ok = true;
    for (key, value) in in_file_order(table) {
        match key.get_ref().as_ref() {
            "job" => job = ctx.string(value, "a job name").map(str::to_string),
            "on" => match ctx.choice(value, "on", &rea_core::job::On::ALL) {
                Some(o) => on = o,
                None => ok = false,
            },
            _ => {
                ctx.unknown_field(
                    key,
                    ["job", "on"].into_iter(),
                    "fields of an \"after\" entry",
                    None,
                );
                ok = false;
            }
        }
    }
    if job.is_none() && ok {
        ctx.error(
            item.span().start,
            "an \"after\" entry names no job",
            Some("write { job = \"extract\", on = \"failure\" }".into()),
        );
    }
    Some(rea_core::job::Dependency { job: job?, on }).filter(|_| ok)
}

/// `params = ["DATE", "REGION"]`, or
/// `params = { DATE = { default = "today", pattern = "[0-9-]+" }, REGION = {} }`:
/// what `rea trigger --param` may pass ([`rea_core::params`]).
fn apply_params(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    use rea_core::params::{name_problem, value_problem, Param, Pattern, MAX_PARAMS};
    const EXAMPLE: &str =
        "write params = [\"DATE\"] or params = { DATE = { default = \"today\", pattern = \"[0-9-]+\" } }";
    let mut params: Vec<Param> = Vec::new();
    let mut declare = |ctx: &mut Ctx, at: usize, param: Param| {
        if let Some(problem) = name_problem(&param.name) {
            ctx.error(
                at,
                format!("invalid parameter name: {problem}"),
                Some(EXAMPLE.into()),
            );
        } else if params.iter().any(|p| p.name == param.name) {
            ctx.error(
                at,
                format!("parameter {:?} is declared twice", param.name),
                None,
            );
        } else if params.len() == MAX_PARAMS {
            ctx.error(at, format!("more than {MAX_PARAMS} parameters"), None);
        } else {
            params.push(param);
        }
    };
    match v.get_ref() {
        DeValue::Array(items) => {
            for item in items {
                if let Some(name) = ctx.string(item, "a parameter name like \"DATE\"") {
                    let param = Param {
                        name: name.to_string(),
                        default: None,
                        pattern: None,
                    };
                    declare(ctx, item.span().start, param);
                }
            }
        }
        DeValue::Table(table) => {
            for (key, value) in in_file_order(table) {
                let Some(spec) = ctx.table(
                    value,
                    "a table like { default = \"today\", pattern = \"[0-9-]+\" }",
                ) else {
                    continue;
                };
                let mut param = Param {
                    name: key.get_ref().to_string(),
                    default: None,
                    pattern: None,
                };
                let mut default_at = value.span().start;
                for (k, field) in in_file_order(spec) {
                    match k.get_ref().as_ref() {
                        "default" => {
                            if let Some(s) = ctx.string(field, "a string") {
                                param.default = Some(s.to_string());
                                default_at = field.span().start;
                            }
                        }
                        "pattern" => {
                            if let Some(s) = ctx.string(field, "a regular expression") {
                                match Pattern::new(s) {
                                    Ok(p) => param.pattern = Some(p),
                                    Err(e) => ctx.error(
                                        field.span().start,
                                        format!("invalid pattern for {:?}: {e}", param.name),
                                        Some("the whole value must match; write e.g. pattern = \"[0-9]{4}-[0-9]{2}-[0-9]{2}\"".into()),
                                    ),
                                }
                            }
                        }
                        _ => ctx.unknown_field(
                            k,
                            ["default", "pattern"].into_iter(),
                            "fields of a parameter",
                            None,
                        ),
                    }
                }
                if let Some(problem) = param
                    .default
                    .as_deref()
                    .and_then(|dv| value_problem(&param, dv))
                {
                    ctx.error(
                        default_at,
                        format!(
                            "the default of {:?} is not a value it accepts: {problem}",
                            param.name
                        ),
                        None,
                    );
                }
                declare(ctx, key.span().start, param);
            }
        }
        _ => ctx.type_error(
            v,
            "an array of names or a table of parameters",
            Some(EXAMPLE.into()),
        ),
    }
    d.job.extras_mut().params = params;
}

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
    d.job.extras_mut().mailto = out;
}

/// Fields whose positions `Config::positions` keeps (see `host::check` and
/// the dependency check).
pub(crate) const LOCATED: &[&str] = &["user", "mailto", "after"];

/// Output is held in memory while a job runs; more than this per run is
/// surely a typo (and `max_concurrent` multiplies it).
const MAX_OUTPUT_LIMIT: u64 = rea_core::record::MAX_OUTPUT_BYTES as u64;

/// A field of `[daemon]` or of a `retry` table.
pub(crate) struct SubField<T> {
    pub(crate) name: &'static str,
    pub(crate) apply: fn(&mut Ctx, &Value, &mut T),
}

pub(crate) const DAEMON_FIELDS: &[SubField<DaemonConfig>] = &[
    SubField {
        name: "max_concurrent",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "max_concurrent", 1, 10_000) {
                d.max_concurrent = n as usize;
            }
        },
    },
    SubField {
        name: "max_concurrent_per_user",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "max_concurrent_per_user", 1, 10_000) {
                d.max_concurrent_per_user = Some(n as usize);
            }
        },
    },
    SubField {
        name: "reserve_system",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "reserve_system", 0, 10_000) {
                d.reserve_system = n as usize;
            }
        },
    },
    SubField {
        name: "max_queued_per_user",
        apply: |ctx, v, d| {
            if let Some(n) = ctx.integer(v, "max_queued_per_user", 1, 50_000) {
                d.max_queued_per_user = n as usize;
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
    SubField {
        name: "job_output",
        apply: |ctx, v, d| {
            let choices = [
                ("history", JobOutput::History),
                ("journal", JobOutput::Journal),
            ];
            if let Some(o) = ctx.choice(v, "job_output", &choices) {
                d.job_output = o;
            }
        },
    },
    SubField {
        name: "cgroups",
        apply: |ctx, v, d| {
            let choices = [("auto", true), ("off", false)];
            if let Some(on) = ctx.choice(v, "cgroups", &choices) {
                d.cgroups = on;
            }
        },
    },
    SubField {
        name: "monitor_group",
        apply: |ctx, v, d| {
            if let Some(s) = ctx.text_field(v, "monitor_group") {
                d.monitor_group = Some(s);
            }
        },
    },
    SubField {
        name: "webhook_private_targets",
        apply: |ctx, v, d| {
            if let Some(b) = ctx.boolean(v) {
                d.webhook_private_targets = b;
            }
        },
    },
    SubField {
        name: "web_listen",
        apply: |ctx, v, d| {
            let Some(s) = ctx.string(v, "a string like \"127.0.0.1:8080\"") else {
                return;
            };
            match s.parse::<std::net::SocketAddr>() {
                // A non-loopback address needs `web_proxy`, wherever it
                // is written in [daemon]: checked once the table is read
                // (`check_web_listen`).
                Ok(addr) => d.web_listen = Some(addr),
                Err(_) => ctx.error(
                    v.span().start,
                    format!("invalid web_listen address {s:?}"),
                    Some(
                        "write IP:PORT, e.g. \"127.0.0.1:8080\" (an address, not a host name)"
                            .to_string(),
                    ),
                ),
            }
        },
    },
    SubField {
        name: "web_proxy",
        apply: |ctx, v, d| {
            let Some(table) = ctx.table(v, WEB_PROXY_EXAMPLE) else {
                return;
            };
            let mut header = None;
            let mut from = None;
            let mut seen = (false, false);
            for (key, field) in in_file_order(table) {
                match key.get_ref().as_ref() {
                    "header" => {
                        seen.0 = true;
                        let Some(h) = ctx.string(field, "a header name like \"X-Forwarded-User\"")
                        else {
                            continue;
                        };
                        let token = !h.is_empty()
                            && h.len() <= 64
                            && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
                        // Headers every browser sends or rea reads itself
                        // would let the browser, not the proxy, say who
                        // it is.
                        let taken = [
                            "host",
                            "cookie",
                            "origin",
                            "referer",
                            "user-agent",
                            "content-type",
                            "content-length",
                            "sec-fetch-site",
                            "x-rea-login",
                        ]
                        .contains(&h.to_ascii_lowercase().as_str());
                        if !token || taken {
                            ctx.error(
                                field.span().start,
                                format!("web_proxy header {h:?} cannot name the user"),
                                Some("a header only your proxy sets, after it authenticated the user, e.g. \"X-Forwarded-User\" (letters, digits and '-')".into()),
                            );
                        } else {
                            header = Some(h.to_ascii_lowercase());
                        }
                    }
                    "from" => {
                        seen.1 = true;
                        let Some(items) = string_list(ctx, field, "[\"10.0.0.9\"]") else {
                            continue;
                        };
                        let mut addrs = Vec::new();
                        let written = items.len();
                        for (at, a) in items {
                            match a.parse::<std::net::IpAddr>() {
                                Ok(ip) => addrs.push(ip),
                                Err(_) => ctx.error(
                                    at,
                                    format!("invalid proxy address {a:?}"),
                                    Some("the IP address the proxy connects from, e.g. \"10.0.0.9\" or \"::1\" (no port, no host name)".into()),
                                ),
                            }
                        }
                        if written == 0 {
                            ctx.error(
                                field.span().start,
                                "web_proxy from lists no address",
                                Some("name the address your proxy connects from, e.g. from = [\"127.0.0.1\"]".into()),
                            );
                        }
                        from = Some(addrs);
                    }
                    _ => ctx.unknown_field(
                        key,
                        ["header", "from"].into_iter(),
                        "fields of web_proxy",
                        None,
                    ),
                }
            }
            if seen != (true, true) {
                ctx.error(
                    v.span().start,
                    "web_proxy needs both header and from",
                    Some(format!("write {WEB_PROXY_EXAMPLE}")),
                );
            }
            if let (Some(header), Some(from)) = (header, from) {
                if !from.is_empty() {
                    d.web_proxy = Some(crate::WebProxy { header, from });
                }
            }
        },
    },
    SubField {
        name: "web_hosts",
        apply: |ctx, v, d| {
            if let Some(names) = string_list(ctx, v, "[\"rea.example.org\"]") {
                for (at, n) in &names {
                    let ok = !n.is_empty()
                        && n.len() <= 253
                        && n.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b));
                    if !ok {
                        ctx.error(
                            *at,
                            format!("invalid host name {n:?}"),
                            Some("a DNS name or an IP address, without a port".into()),
                        );
                    }
                }
                d.web_hosts = names
                    .into_iter()
                    .map(|(_, n)| n.to_ascii_lowercase())
                    .collect();
            }
        },
    },
    SubField {
        name: "web_viewers",
        apply: |ctx, v, d| {
            if let Some(names) = string_list(ctx, v, "[\"alice\"]") {
                d.web_viewers = names.into_iter().map(|(_, n)| n).collect();
            }
        },
    },
];

const WEB_PROXY_EXAMPLE: &str =
    "a table like { header = \"X-Forwarded-User\", from = [\"10.0.0.9\"] }";

/// `[daemon] web_listen` off loopback needs `web_proxy` (see
/// [`crate::WebProxy`]): the console's TCP identity is otherwise a session
/// cookie made by `rea web`'s one-time link, which anyone who can reach
/// the address could try, and nothing encrypts. `at` is where
/// `web_listen`'s value is written.
pub(crate) fn check_web_listen(ctx: &mut Ctx, d: &crate::DaemonConfig, at: usize) {
    if let Some(addr) = d.web_listen {
        if !addr.ip().is_loopback() && d.web_proxy.is_none() {
            ctx.error(
                at,
                format!("web_listen \"{addr}\" is not a loopback address"),
                Some(format!(
                    "off loopback the console needs a trusted proxy that names each user: add web_proxy = {{ header = \"X-Forwarded-User\", from = [\"PROXY-IP\"] }} to [daemon]; or serve \"127.0.0.1:{}\" and reach it through ssh -L",
                    addr.port()
                )),
            );
        }
    }
}

/// An array of non-empty strings, each with where it is written.
fn string_list(ctx: &mut Ctx, v: &Value, example: &str) -> Option<Vec<(usize, String)>> {
    let DeValue::Array(items) = v.get_ref() else {
        ctx.type_error(v, &format!("an array of strings like {example}"), None);
        return None;
    };
    let mut out = Vec::new();
    for item in items.iter() {
        if let Some(s) = ctx.string(item, "a string") {
            if s.trim().is_empty() || s.contains('\0') {
                ctx.error(item.span().start, "an empty name".to_string(), None);
            } else {
                out.push((item.span().start, s.to_string()));
            }
        }
    }
    Some(out)
}

/// `[cluster]`, with where `lease` and `heartbeat` were written (their
/// relation is checked once the table is read).
pub(crate) struct ClusterDraft {
    pub(crate) cluster: ClusterConfig,
    pub(crate) lease_at: Option<usize>,
    pub(crate) heartbeat_at: Option<usize>,
    pub(crate) grace_at: Option<usize>,
}

pub(crate) const CLUSTER_FIELDS: &[SubField<ClusterDraft>] = &[
    SubField {
        name: "url",
        apply: |ctx, v, d| {
            // Never echo the value: it may carry a password.
            if let Some(s) = ctx.string(
                v,
                "a PostgreSQL URL like \"postgresql://rea@db.example/rea\"",
            ) {
                if s.trim().is_empty() || s.contains('\0') {
                    ctx.error(
                        v.span().start,
                        "\"url\" must name a database",
                        Some("write url = \"postgresql://rea@db.example/rea\", or leave it out and set REA_CLUSTER_URL".into()),
                    );
                } else {
                    d.cluster.url = Some(s.to_string());
                }
            }
        },
    },
    SubField {
        name: "name",
        apply: |ctx, v, d| {
            if let Some(s) = ctx.string(v, "a cluster name") {
                match name_problem(s) {
                    Some(hint) => ctx.error(
                        v.span().start,
                        format!("invalid cluster name {s:?}"),
                        Some(hint),
                    ),
                    None => d.cluster.name = s.to_string(),
                }
            }
        },
    },
    SubField {
        name: "node",
        apply: |ctx, v, d| {
            if let Some(s) = ctx.string(v, "a node name") {
                match name_problem(s) {
                    Some(hint) => ctx.error(
                        v.span().start,
                        format!("invalid node name {s:?}"),
                        Some(hint),
                    ),
                    None => d.cluster.node = Some(s.to_string()),
                }
            }
        },
    },
    SubField {
        name: "lease",
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "lease") {
                d.cluster.lease = t;
                d.lease_at = Some(v.span().start);
            }
        },
    },
    SubField {
        name: "heartbeat",
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "heartbeat") {
                d.cluster.heartbeat = t;
                d.heartbeat_at = Some(v.span().start);
            }
        },
    },
    SubField {
        name: "grace",
        apply: |ctx, v, d| {
            if let Some(t) = ctx.duration(v, "grace") {
                d.cluster.grace = t;
                d.grace_at = Some(v.span().start);
            }
        },
    },
];

/// The relations between `[cluster]`'s timings (the database refuses a
/// lease that a stall of two heartbeats could end).
pub(crate) fn check_cluster(ctx: &mut Ctx, d: &ClusterDraft, table_at: usize) {
    let c = &d.cluster;
    let ms = |t: std::time::Duration| t.as_millis();
    if ms(c.heartbeat) < 50 || ms(c.heartbeat) > 600_000 {
        ctx.error(
            d.heartbeat_at.unwrap_or(table_at),
            format!(
                "\"heartbeat\" must be between 50ms and 10m, not {}",
                rea_core::duration::format_exact(c.heartbeat)
            ),
            None,
        );
    } else if ms(c.lease) < 3 * ms(c.heartbeat) + 100 || ms(c.lease) > 3_600_000 {
        ctx.error(
            d.lease_at.or(d.heartbeat_at).unwrap_or(table_at),
            format!(
                "\"lease\" ({}) must be at least 3 heartbeats + 100ms ({}) and at most 1h",
                rea_core::duration::format_exact(c.lease),
                rea_core::duration::format_exact(
                    c.heartbeat * 3 + std::time::Duration::from_millis(100)
                )
            ),
            Some("a lease must survive a database stall of two heartbeats".into()),
        );
    }
    if ms(c.grace) > 3_600_000 {
        ctx.error(
            d.grace_at.unwrap_or(table_at),
            "\"grace\" must be at most 1h",
            None,
        );
    }
}

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
            if let Some(n) = ctx.integer(v, "retry.attempts", 0, RetryPolicy::MAX_ATTEMPTS as i64) {
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

/// A job being assembled: built-in defaults (`Job::default`), then
/// `[defaults]`, then the job's own table. Job-only fields stay unset in
/// the `[defaults]` draft. Adding a job field is a field on `Job` and one
/// entry in `JOB_FIELDS`; nothing here repeats them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Draft {
    pub(crate) job: Job,
    /// Byte offset of each field written for this job (for later checks).
    pub(crate) offsets: BTreeMap<&'static str, usize>,
}

impl Draft {
    /// The finished job, if the required fields were read successfully
    /// (`command` is never empty once read: an empty one is an error).
    pub(crate) fn into_job(self, name: &str) -> Option<Job> {
        if self.job.schedule.is_none() && self.job.after.is_empty() || self.job.command.is_empty() {
            return None;
        }
        let mut job = Job {
            name: name.to_string(),
            ..self.job
        };
        job.settle();
        Some(job)
    }
}

fn apply_schedule(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(expr) = ctx.string(v, "a cron expression like \"*/15 * * * *\"") else {
        return;
    };
    // Large files repeat a few expressions many times: parse each once and
    // share its compiled matcher.
    let known = ctx.schedules.get(expr).cloned();
    let fresh = known.is_none();
    match known.map_or_else(|| Schedule::parse(expr), Ok) {
        Ok(schedule) => {
            // Each job written with such an expression is warned about.
            for w in schedule.warnings() {
                let at = schedule_error_offset(ctx.text, v.span(), expr, w);
                ctx.warning(at, w.message.clone(), w.hint.clone());
            }
            if fresh {
                ctx.schedules.insert(expr.to_string(), schedule.clone());
            }
            d.job.schedule = Some(schedule);
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
pub(crate) fn schedule_error_offset(
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
            d.job.timezone = tz;
            d.job.timezone_name = ctx.intern(name);
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
        policy: d.job.retry.clone(),
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
                    rea_core::duration::format_exact(p.max_delay),
                    rea_core::duration::format_exact(p.delay)
                ),
                None,
            );
        }
    }
    d.job.retry = draft.policy;
}

/// An `alert` duration: `"5m"`, or `"none"` to unset what `[defaults]` set.
fn alert_duration(ctx: &mut Ctx, v: &Value, what: &str) -> Option<Option<std::time::Duration>> {
    if v.get_ref().as_str() == Some("none") {
        return Some(None);
    }
    let t = ctx.duration(v, what)?;
    if t.is_zero() {
        ctx.error(
            v.span().start,
            format!("\"{what}\" must be longer than 0s"),
            Some(format!("write {what} = \"none\" for no such alert")),
        );
        return None;
    }
    Some(Some(t))
}

const ALERT_FIELDS: &[SubField<AlertRules>] = &[
    SubField {
        name: "late",
        apply: |ctx, v, r| {
            if let Some(t) = alert_duration(ctx, v, "alert.late") {
                r.late = t;
            }
        },
    },
    SubField {
        name: "running_over",
        apply: |ctx, v, r| {
            let Some(text) = ctx.string(
                v,
                "a duration like \"30m\" or a multiple of the job's p95 duration like \"3x p95\"",
            ) else {
                return;
            };
            if text == "none" {
                r.running_over = None;
                return;
            }
            match RunningOver::parse(text) {
                Ok(o) => r.running_over = Some(o),
                Err(e) => ctx.error(
                    v.span().start,
                    e,
                    Some("write alert.running_over = \"30m\", or \"3x p95\" for three times the job's usual (95th percentile) duration".to_string()),
                ),
            }
        },
    },
    SubField {
        name: "no_success_within",
        apply: |ctx, v, r| {
            if let Some(t) = alert_duration(ctx, v, "alert.no_success_within") {
                r.no_success_within = t;
            }
        },
    },
    SubField {
        name: "failures",
        apply: |ctx, v, r| {
            if let Some(n) = ctx.integer(v, "alert.failures", 0, 1_000_000) {
                r.failures = (n > 0).then_some(n as u32);
            }
        },
    },
    SubField {
        name: "mail",
        apply: |ctx, v, r| {
            if let Some(b) = ctx.boolean(v) {
                r.mail = b;
            }
        },
    },
];

/// `alert = { late = "5m", failures = 3 }` (or `alert.late = "5m"`): a
/// job's table overlays `[defaults]`' field by field, as `retry` does.
fn apply_alert(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(table) = ctx.table(
        v,
        "a table like { late = \"5m\", running_over = \"3x p95\", no_success_within = \"26h\", failures = 3 }",
    ) else {
        return;
    };
    let mut rules = d.job.extras().alert.clone();
    for (key, value) in in_file_order(table) {
        match ALERT_FIELDS
            .iter()
            .find(|f| f.name == key.get_ref().as_ref())
        {
            Some(field) => (field.apply)(ctx, value, &mut rules),
            None => ctx.unknown_field(
                key,
                ALERT_FIELDS.iter().map(|f| f.name),
                "fields of alert",
                None,
            ),
        }
    }
    d.job.extras_mut().alert = rules;
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
                std::sync::Arc::make_mut(&mut d.job.env).insert(name.to_string(), s.to_string());
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
    d.job.tags = tags;
}

/// `cpu_max = "50%"`: a share of one CPU per 100 ms period ("200%" is two
/// CPUs).
fn apply_cpu_max(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let Some(s) = ctx.string(v, "a percentage like \"50%\"") else {
        return;
    };
    let pct = s
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<u32>().ok())
        .filter(|n| (1..=100_000).contains(n));
    match pct {
        Some(p) => d.job.extras_mut().limits.cpu_max_percent = Some(p),
        None => ctx.error(
            v.span().start,
            format!("\"cpu_max\" must be a percentage of one CPU from 1% up, found {s:?}"),
            Some("e.g. \"50%\" for half a CPU, \"200%\" for two".to_string()),
        ),
    }
}

/// `ionice = "idle" | "best-effort" | "best-effort:N" | "realtime:N"`, as
/// ionice(1)'s classes, N from 0 (highest) to 7.
fn apply_ionice(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    use rea_core::run::IoNice;
    let Some(s) = ctx.string(v, "an IO class like \"idle\" or \"best-effort:7\"") else {
        return;
    };
    let (class, level) = match s.split_once(':') {
        Some((c, l)) => (c, l.trim().parse::<u8>().ok().filter(|l| *l <= 7)),
        None => (s, Some(4)),
    };
    let parsed = match (class.trim(), level) {
        ("idle", _) if !s.contains(':') => Some(IoNice::Idle),
        ("best-effort", Some(l)) => Some(IoNice::BestEffort(l)),
        ("realtime", Some(l)) => Some(IoNice::Realtime(l)),
        _ => None,
    };
    match parsed {
        Some(n) => d.job.extras_mut().limits.ionice = Some(n),
        None => ctx.error(
            v.span().start,
            format!("\"ionice\" must be \"idle\", \"best-effort[:0-7]\" or \"realtime[:0-7]\", found {s:?}"),
            None,
        ),
    }
}

/// A resource limit (soft and hard): a number (a size for `core`, `stack`
/// and `as`), or "unlimited".
fn rlimit(ctx: &mut Ctx, v: &Value, field: &str, is_size: bool) -> Option<u64> {
    if v.get_ref().as_str() == Some("unlimited") {
        return Some(u64::MAX);
    }
    if is_size {
        ctx.size(v, field, 0, u64::MAX - 1)
    } else {
        ctx.integer(v, field, 0, i64::MAX).map(|n| n as u64)
    }
}
