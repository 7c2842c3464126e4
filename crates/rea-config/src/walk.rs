//! Walking the spanned TOML document: each value read with its type,
//! range and position checked, every problem recorded (never the first
//! only), positions kept for the checks that come after parsing.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use chrono_tz::Tz;
use rea_core::job::{name_problem, Job};
use rea_core::schedule::Schedule;
use toml::de::{DeTable, DeValue};

use crate::fields::{
    check_cluster, ClusterDraft, Draft, Key, Value, CLUSTER_FIELDS, DAEMON_FIELDS, JOB_FIELDS,
    LOCATED, SECTIONS, TENANT_FIELDS,
};
use crate::{digest, ClusterConfig, Config, DaemonConfig, Diagnostic, FileKind};

/// Validates the contents of a main job file; `path` is used for messages.
pub fn parse(src: &[u8], path: &Path) -> Result<Config, Vec<Diagnostic>> {
    parse_as(src, path, &FileKind::Main)
}

/// Validates the contents of a job file of `kind`.
pub fn parse_as(src: &[u8], path: &Path, kind: &FileKind) -> Result<Config, Vec<Diagnostic>> {
    parse_reusing(src, digest(src), path, kind, None)
}

/// [`parse_as`], sharing the jobs that equal one of `previous` (see
/// `load_if_changed`). `src_digest` is `digest(src)`, which the caller has
/// already computed (hashing a 13 MB file costs ~10 ms a time).
pub(crate) fn parse_reusing(
    src: &[u8],
    src_digest: u64,
    path: &Path,
    kind: &FileKind,
    previous: Option<&Config>,
) -> Result<Config, Vec<Diagnostic>> {
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
                severity: crate::Severity::Error,
                line: Some(line),
                col: Some(col),
                message: format!("the job file is not valid UTF-8 (byte 0x{byte:02X})"),
                hint: Some("save the file as UTF-8".to_string()),
            }]);
        }
    };
    // Editors on some systems write a byte-order mark; columns are counted
    // as the editor shows them, without it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut ctx = Ctx::new(file, text);
    ctx.kind = kind.clone();
    ctx.previous = previous
        .map(|p| p.jobs.iter().map(|j| (j.name.as_str(), j)).collect())
        .unwrap_or_default();
    let config = match DeTable::parse(text) {
        Ok(doc) => {
            let (daemon, cluster, jobs) = ctx.document(doc.get_ref());
            ctx.check_dependencies(&jobs);
            Config {
                path: path.to_path_buf(),
                daemon,
                jobs,
                positions: std::mem::take(&mut ctx.positions),
                digest: src_digest,
                warnings: std::mem::take(&mut ctx.warnings),
                other_files: BTreeMap::new(),
                files: vec![(path.to_path_buf(), src_digest)],
                cluster,
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
// Walking the document.

/// What the walk needs: the text for positions and raw values, and the
/// problems found so far.
pub(crate) struct Ctx<'a> {
    pub(crate) file: String,
    pub(crate) text: &'a str,
    /// Byte offset of the start of each line.
    line_starts: Vec<usize>,
    pub(crate) diags: Vec<Diagnostic>,
    /// What is accepted but probably not meant (see `Config::warnings`).
    pub(crate) warnings: Vec<Diagnostic>,
    /// See `Config::positions`.
    pub(crate) positions: BTreeMap<(String, String), (usize, usize)>,
    /// Expressions already parsed in this file.
    pub(crate) schedules: std::collections::HashMap<String, Schedule>,
    /// The shortest gap between fires, by expression and zone, for jobs
    /// with a start delay (`jitter`): computed once per pair.
    gaps: std::collections::HashMap<(String, Tz), Option<Duration>>,
    /// Shells and zone names already seen, so jobs share one copy.
    strings: std::collections::HashSet<std::sync::Arc<str>>,
    /// What kind of job file this is.
    pub(crate) kind: FileKind,
    /// The jobs of the configuration in force, by name (reloads only).
    previous: std::collections::HashMap<&'a str, &'a std::sync::Arc<Job>>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(file: String, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Ctx {
            file,
            text,
            line_starts,
            diags: Vec::new(),
            warnings: Vec::new(),
            positions: BTreeMap::new(),
            schedules: std::collections::HashMap::new(),
            gaps: std::collections::HashMap::new(),
            strings: std::collections::HashSet::new(),
            kind: FileKind::Main,
            previous: std::collections::HashMap::new(),
        }
    }

    /// One shared copy of a string that many jobs repeat.
    pub(crate) fn intern(&mut self, s: &str) -> std::sync::Arc<str> {
        if let Some(known) = self.strings.get(s) {
            return known.clone();
        }
        let new: std::sync::Arc<str> = s.into();
        self.strings.insert(new.clone());
        new
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub(crate) fn position(&self, offset: usize) -> (usize, usize) {
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

    pub(crate) fn error(&mut self, at: usize, message: impl Into<String>, hint: Option<String>) {
        let (line, col) = self.position(at);
        self.diags.push(Diagnostic {
            file: self.file.clone(),
            severity: crate::Severity::Error,
            line: Some(line),
            col: Some(col),
            message: shorten(message.into()),
            hint: hint.map(shorten),
        });
    }

    pub(crate) fn warning(&mut self, at: usize, message: impl Into<String>, hint: Option<String>) {
        let (line, col) = self.position(at);
        self.warnings.push(Diagnostic {
            file: self.file.clone(),
            severity: crate::Severity::Warning,
            line: Some(line),
            col: Some(col),
            message: shorten(message.into()),
            hint: hint.map(shorten),
        });
    }

    pub(crate) fn raw(&self, span: Range<usize>) -> &'a str {
        self.text.get(span).unwrap_or("")
    }

    /// A TOML syntax error: the parser's one-line message (never its
    /// multi-line rendering), reworded where the parser's words mislead.
    pub(crate) fn syntax_error(&mut self, e: &toml::de::Error) {
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

    pub(crate) fn document(
        &mut self,
        root: &DeTable,
    ) -> (
        DaemonConfig,
        Option<ClusterConfig>,
        Vec<std::sync::Arc<Job>>,
    ) {
        let mut daemon = DaemonConfig::default();
        let mut cluster = None;
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
                "daemon" if self.kind != FileKind::Main => self.error(
                    key.span().start,
                    "[daemon] belongs in the main job file, not in a drop-in or a user's file"
                        .to_string(),
                    Some(
                        "move these settings to the main job file (e.g. /etc/rea/jobs.toml)".into(),
                    ),
                ),
                "daemon" => {
                    if let Some(table) = self.table(value, "a table like [daemon]") {
                        let mut listen_at = None;
                        for (key, value) in in_file_order(table) {
                            if key.get_ref().as_ref() == "web_listen" {
                                listen_at = Some(value.span().start);
                            }
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
                        if let Some(at) = listen_at {
                            crate::fields::check_web_listen(self, &daemon, at);
                        }
                    }
                }
                "cluster" => {
                    if let Some(table) = self.table(value, "a table like [cluster]") {
                        let mut draft = ClusterDraft {
                            cluster: ClusterConfig::default(),
                            lease_at: None,
                            heartbeat_at: None,
                            grace_at: None,
                        };
                        for (key, value) in in_file_order(table) {
                            match CLUSTER_FIELDS
                                .iter()
                                .find(|f| f.name == key.get_ref().as_ref())
                            {
                                Some(field) => (field.apply)(self, value, &mut draft),
                                None => self.unknown_field(
                                    key,
                                    CLUSTER_FIELDS.iter().map(|f| f.name),
                                    "fields of [cluster]",
                                    None,
                                ),
                            }
                        }
                        check_cluster(self, &draft, key.span().start);
                        cluster = Some(draft.cluster);
                    }
                }
                "tenants" if self.kind != FileKind::Main => self.error(
                    key.span().start,
                    "[tenants] belongs in root's main job file: a tenant's limits are not hers to set"
                        .to_string(),
                    Some(
                        "ask root to set them in the main job file (e.g. /etc/rea/jobs.toml)"
                            .into(),
                    ),
                ),
                "tenants" => daemon.tenants = self.tenants(value),
                "jobs" => jobs = self.jobs(value, &defaults),
                other => {
                    let hint = rea_core::suggest::did_you_mean(other, SECTIONS.iter().copied())
                        .unwrap_or_else(|| {
                            if JOB_FIELDS.iter().any(|f| f.name == other) {
                                "fields of a job go under its [jobs.NAME] header".to_string()
                            } else {
                                "the sections are [defaults], [daemon], [cluster], [tenants.NAME] and [jobs.NAME]"
                                    .to_string()
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
        (daemon, cluster, jobs)
    }

    /// `[tenants.NAME]` tables (NAME a user, or `"*"` for every user).
    fn tenants(&mut self, value: &Value) -> rea_core::run::TenantPolicy {
        let mut policy = rea_core::run::TenantPolicy::default();
        let Some(table) = self.table(value, "a table of tenants like [tenants.alice]") else {
            return policy;
        };
        for (key, value) in in_file_order(table) {
            let name = key.get_ref().as_ref();
            if let Some(hint) = tenant_name_problem(name) {
                self.error(
                    key.span().start,
                    format!("invalid tenant {name:?}"),
                    Some(hint),
                );
                continue;
            }
            let Some(fields) = self.table(value, "a table like [tenants.alice]") else {
                continue;
            };
            let mut limits = rea_core::run::TenantLimits::default();
            let mut draft = Draft::default();
            for (key, value) in in_file_order(fields) {
                let field = key.get_ref().as_ref();
                if field == "min_nice" {
                    limits.min_nice = self.integer(value, "min_nice", 0, 19).map(|n| n as i32);
                    continue;
                }
                match JOB_FIELDS
                    .iter()
                    .find(|f| f.name == field && TENANT_FIELDS.contains(&f.name))
                {
                    Some(f) => (f.apply)(self, value, &mut draft),
                    None => {
                        let certain = match field {
                            "nice" => Some(
                                "a tenant's runs get a floor, not a value: min_nice = N (0-19)"
                                    .to_string(),
                            ),
                            _ if JOB_FIELDS.iter().any(|f| f.name == field) => Some(format!(
                                "{field} is a job's field; a tenant takes: {}",
                                TENANT_FIELDS.join(", ")
                            )),
                            _ => None,
                        };
                        self.unknown_field(
                            key,
                            TENANT_FIELDS.iter().copied(),
                            "fields of [tenants.NAME]",
                            certain,
                        );
                    }
                }
            }
            limits.cgroup = draft.job.extras().limits;
            if name == "*" {
                policy.every_user = limits;
            } else {
                policy.users.insert(name.to_string(), limits);
            }
        }
        policy
    }

    pub(crate) fn jobs(&mut self, value: &Value, defaults: &Draft) -> Vec<std::sync::Arc<Job>> {
        let DeValue::Table(table) = value.get_ref() else {
            let hint = value.get_ref().is_array().then(|| {
                "write each job as [jobs.NAME] with a unique NAME, not [[jobs]]".to_string()
            });
            self.type_error(value, "a table of jobs like [jobs.NAME]", hint);
            return Vec::new();
        };
        let mut jobs = Vec::new();
        let owner = match &self.kind {
            FileKind::User(owner) => Some(owner.clone()),
            _ => None,
        };
        let tenant = rea_core::tenant::Tenant::from_owner(owner.as_deref());
        for (key, value) in in_file_order(table) {
            let name = key.get_ref().as_ref();
            // A job's identity is (tenant, name): a user's jobs are known
            // everywhere past this file by their qualified names.
            let qualified = tenant.qualify(name);
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
            if draft.job.user.is_some()
                || !draft.job.extras().mailto.is_empty()
                || !draft.job.after.is_empty()
            {
                let header = self.position(key.span().start);
                self.positions
                    .insert((qualified.clone(), String::new()), header);
            }
            for (field, offset) in draft.offsets.iter().filter(|(f, _)| LOCATED.contains(f)) {
                let at = self.position(*offset);
                self.positions
                    .insert((qualified.clone(), field.to_string()), at);
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
            if let FileKind::User(owner) = self.kind.clone() {
                if let Some(user) = draft.job.user.clone().filter(|u| *u != owner) {
                    let at = draft
                        .offsets
                        .get("user")
                        .copied()
                        .unwrap_or(key.span().start);
                    self.error(
                        at,
                        format!("the jobs of {owner}'s file run as {owner}, not as {user:?}"),
                        Some("remove \"user\": it is implied by the file".to_string()),
                    );
                }
                // The daemon sets a run's nice while it is still root: a
                // user's file may only raise it, as she could herself.
                if let Some(n) = draft.job.extras().limits.nice.filter(|n| *n < 0) {
                    let at = draft
                        .offsets
                        .get("nice")
                        .copied()
                        .unwrap_or(key.span().start);
                    self.error(
                        at,
                        format!("nice = {n}: only root may run a job at a nice value below 0"),
                        Some("use 0 to 19 (higher is gentler)".to_string()),
                    );
                }
                // Likewise its IO class: the realtime class needs privilege.
                if let Some(rea_core::run::IoNice::Realtime(_)) = draft.job.extras().limits.ionice {
                    let at = draft
                        .offsets
                        .get("ionice")
                        .copied()
                        .unwrap_or(key.span().start);
                    self.error(
                        at,
                        "ionice = realtime: only root may give a job the realtime IO class"
                            .to_string(),
                        Some("use \"best-effort:0\" to \"best-effort:7\", or \"idle\"".to_string()),
                    );
                }
                draft.job.user = Some(owner.clone());
                draft.job.owner = Some(owner.clone());
            }
            self.check_jitter(&draft, name, key.span().start);
            // A run no trigger started gets the defaults: one without is
            // unset there, which a job that runs on its own should know.
            if draft.job.schedule.is_some() || !draft.job.after.is_empty() {
                let missing: Vec<&str> = draft
                    .job
                    .extras()
                    .params
                    .iter()
                    .filter(|p| p.default.is_none())
                    .map(|p| p.name.as_str())
                    .collect();
                if let (false, Some(at)) = (missing.is_empty(), draft.offsets.get("params")) {
                    self.warning(
                        *at,
                        format!(
                            "job {name:?} also runs on its own (its schedule or after), where {} unset",
                            match missing.as_slice() {
                                [one] => format!("parameter {one:?} is"),
                                more => format!("parameters {} are", more.join(", ")),
                            }
                        ),
                        Some(format!(
                            "give it a default: params = {{ {} = {{ default = \"…\" }} }}",
                            missing[0]
                        )),
                    );
                }
            }
            // `after` names jobs of this file, so of this tenant.
            for dep in &mut draft.job.after {
                dep.job = tenant.qualify(&dep.job);
            }
            if let Some(job) = draft.into_job(&qualified) {
                // Equal as written: schedules compare by meaning, and the
                // spelling shown by `rea list` must be the new one.
                let same = |old: &Job| {
                    *old == job
                        && old.schedule.as_ref().map(Schedule::source)
                            == job.schedule.as_ref().map(Schedule::source)
                };
                match self.previous.get(qualified.as_str()) {
                    Some(old) if same(old) => jobs.push(std::sync::Arc::clone(old)),
                    _ => jobs.push(std::sync::Arc::new(job)),
                }
            }
        }
        jobs
    }

    /// Applies the known fields of a job table (`job` = its name) or of
    /// `[defaults]` (`job` = None) to `draft`.
    /// A start delay as long as the time between two fires makes runs
    /// start after the next occurrence is due: accepted, with a warning.
    fn check_jitter(&mut self, draft: &Draft, name: &str, header: usize) {
        let job = &draft.job;
        let Some(schedule) = job.schedule.as_ref().filter(|_| !job.jitter.is_zero()) else {
            return;
        };
        // A fixed week: the answer must not depend on when the file is read.
        let from = chrono::DateTime::from_timestamp(1_767_571_200, 0).unwrap_or_default();
        let gap = *self
            .gaps
            .entry((schedule.source().to_string(), job.timezone))
            .or_insert_with(|| schedule.shortest_gap(from, job.timezone, 64));
        let Some(gap) = gap.filter(|g| job.jitter >= *g) else {
            return;
        };
        let at = draft.offsets.get("jitter").copied().unwrap_or(header);
        self.warning(
            at,
            format!(
                "job {name:?}: jitter {} is not shorter than the time between two of its runs ({}): a delayed run starts after the next one is due",
                rea_core::duration::format(job.jitter),
                rea_core::duration::format(gap)
            ),
            Some("make jitter smaller than the schedule's period (say, a tenth of it)".into()),
        );
    }

    pub(crate) fn fields(&mut self, table: &DeTable, draft: &mut Draft, job: Option<&str>) {
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
    pub(crate) fn check_dependencies(&mut self, jobs: &[std::sync::Arc<Job>]) {
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
        // Messages name jobs as the file writes them.
        fn shown(name: &str) -> &str {
            name.split_once(rea_core::tenant::SEPARATOR)
                .map_or(name, |(_, local)| local)
        }
        for job in jobs {
            for dep in job.after.iter().map(|d| &d.job) {
                let problem = if dep == &job.name {
                    Some((
                        format!("job {:?} cannot run after itself", shown(&job.name)),
                        None,
                    ))
                } else if !index.contains_key(dep.as_str()) {
                    let dep = shown(dep);
                    Some((
                        format!(
                            "job {:?} runs after {dep:?}, which is not a job of this file",
                            shown(&job.name)
                        ),
                        rea_core::suggest::did_you_mean(dep, jobs.iter().map(|j| shown(&j.name))),
                    ))
                } else {
                    None
                };
                if let Some((message, hint)) = problem {
                    let (line, col) = at(self, &job.name);
                    self.diags.push(Diagnostic {
                        file: self.file.clone(),
                        severity: crate::Severity::Error,
                        line: Some(line),
                        col: Some(col),
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
                for dep in job.after.iter().map(|d| &d.job) {
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
                    severity: crate::Severity::Error,
                    line: Some(line),
                    col: Some(col),
                    message: format!(
                        "jobs depend on each other in a cycle: {}",
                        cycle
                            .iter()
                            .map(|n| shown(n))
                            .collect::<Vec<_>>()
                            .join(" → ")
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
    pub(crate) fn unknown_field<'f>(
        &mut self,
        key: &Key,
        known: impl Iterator<Item = &'f str> + Clone,
        listing: &str,
        certain: Option<String>,
    ) {
        let name = key.get_ref().as_ref();
        let hint = certain
            .or_else(|| rea_core::suggest::did_you_mean(name, known.clone()))
            .unwrap_or_else(|| format!("{listing}: {}", known.collect::<Vec<_>>().join(", ")));
        self.error(
            key.span().start,
            format!("unknown field {name:?}"),
            Some(hint),
        );
    }

    // --- typed readers: each reports its own problem and returns None ---

    pub(crate) fn type_error(&mut self, v: &Value, expected: &str, hint: Option<String>) {
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

    pub(crate) fn table<'v, 'i>(
        &mut self,
        v: &'v Value<'i>,
        expected: &str,
    ) -> Option<&'v DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                self.type_error(v, expected, None);
                None
            }
        }
    }

    pub(crate) fn string<'v>(&mut self, v: &'v Value, expected: &str) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s),
            _ => {
                self.type_error(v, expected, None);
                None
            }
        }
    }

    /// A string that is handed to the OS: not blank, no NUL.
    pub(crate) fn text_field(&mut self, v: &Value, field: &str) -> Option<String> {
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

    pub(crate) fn boolean(&mut self, v: &Value) -> Option<bool> {
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

    pub(crate) fn integer(&mut self, v: &Value, field: &str, min: i64, max: i64) -> Option<i64> {
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
    pub(crate) fn float(&mut self, v: &Value, field: &str, min: f64, max: f64) -> Option<f64> {
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

    pub(crate) fn duration(&mut self, v: &Value, field: &str) -> Option<Duration> {
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
        match rea_core::duration::parse(s) {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(v.span().start, e.message, None);
                None
            }
        }
    }

    /// A byte size: an integer number of bytes or a string like "64KiB".
    pub(crate) fn size(&mut self, v: &Value, field: &str, min: u64, max: u64) -> Option<u64> {
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

    pub(crate) fn choice<T: Copy>(
        &mut self,
        v: &Value,
        field: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let names = || choices.iter().map(|(n, _)| *n);
        let expected = format!("one of {}", quote_list(names()));
        let s = self.string(v, &expected)?;
        if let Some((_, value)) = choices.iter().find(|(n, _)| *n == s) {
            return Some(*value);
        }
        let hint = rea_core::suggest::did_you_mean(s, names());
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
pub(crate) fn parse_size(input: &str) -> Result<u64, (String, Option<String>)> {
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
        let hint = rea_core::suggest::did_you_mean(unit, SIZE_UNITS.iter().map(|(u, _)| *u));
        return Err(fail(&format!("unknown unit {unit:?}"), hint));
    };
    number
        .checked_mul(*scale)
        .ok_or_else(|| fail("the size is too large", None))
}

/// The largest exact binary unit, for messages: 65536 → "64KiB".
pub(crate) fn format_size(n: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= scale && n % scale == 0 {
            return format!("{}{unit}", n / scale);
        }
    }
    format!("{n}B")
}

/// A table's entries in the order they appear in the file (the parsed
/// table is sorted by key).
pub(crate) fn in_file_order<'t, 'i>(table: &'t DeTable<'i>) -> Vec<(&'t Key<'i>, &'t Value<'i>)> {
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

/// Why `name` cannot head a `[tenants.NAME]` table, as a hint; None if it
/// can (`*`, or a user name as useradd takes it).
fn tenant_name_problem(name: &str) -> Option<String> {
    if name == "*" {
        return None;
    }
    if name == "root" || name == "system" {
        return Some(
            "root's jobs are the system's, which these limits do not apply to; name a user, or \"*\" for every user".to_string(),
        );
    }
    let ok = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (!ok).then(|| {
        "name a user (letters, digits, _ - .), or write [tenants.\"*\"] for every user".to_string()
    })
}
