//! Crontabs → a job file: what `rea import` converts. Pure: it is given the
//! crontabs' text and returns jobs, diagnostics, and the rendered TOML; the
//! command (`commands/import.rs`) reads files, decides nothing else, and
//! prints.
//!
//! Parsing follows cronie's `env.c` / `entry.c` / `do_command.c`, which
//! Debian's cron matches on every point handled here:
//!
//! - a line is tried as an assignment first (`NAME = value`, optional quotes
//!   around either, spaces around `=` trimmed, `#` inside a value kept), then
//!   as an entry;
//! - an entry is 5 time fields or a macro, then (system crontabs) a user
//!   name, then the command: the rest of the line;
//! - in the command, the first `%` not preceded by `\` ends the command and
//!   starts its standard input; `\%` becomes `%` and every other backslash
//!   is left for the shell (so `\\` reaches `sh` as `\\`, which the shell
//!   then reads as `\`: rea runs the same shell, so it does the same);
//! - in the input, `%` becomes a newline, `\%` becomes `%`, and a final
//!   newline is added when the input does not end with one.
//!
//! Every line ends up converted, counted as a comment or a blank line, or
//! reported as a [`Diagnostic`] naming the file and line. Whatever cron
//! would have ignored or done differently is converted anyway and reported
//! as a warning, so nothing is lost silently.
//!
//! A system crontab's user becomes the job's `user`, and `MAILTO` becomes
//! `mailto` with `mail_on = "output"`. Whether those users exist here is
//! not this module's business: it never looks at the machine, so the same
//! crontab converts the same way everywhere (`rea check` looks).

use std::collections::{BTreeMap, HashSet};

use rea_core::schedule::Schedule;

use crate::{Diagnostic, Severity};

/// Which of cron's two line formats a file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `crontab -l` output: time fields, then the command.
    User,
    /// `/etc/crontab`, `/etc/cron.d/*`: time fields, a user name, the command.
    System,
}

/// One crontab to convert.
#[derive(Debug, Clone)]
pub struct Source {
    /// As the user named it (`-` is shown as `<stdin>`); used in messages
    /// and in the `# FILE:LINE` comment above each job.
    pub name: String,
    pub text: Vec<u8>,
    pub format: Format,
    /// The file lives in a directory named `cron.d`, where cron skips files
    /// whose names contain anything but letters, digits, `_` and `-`.
    pub in_cron_d: bool,
}

/// Settings of the conversion itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// Zone for jobs without `CRON_TZ`: cron reads schedules in the
    /// machine's zone, so `rea import` defaults to `"local"`.
    pub timezone: String,
    /// The owner of the user crontabs (`--owner`): their jobs get this
    /// `user`. A user crontab does not name its owner (`crontab -l -u
    /// alice` prints the same text as alice's own `crontab -l`), so without
    /// it their jobs have no `user` and run as rea's own user.
    pub owner: Option<String>,
}

/// A converted crontab entry, before `[defaults]` are factored out.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    /// Where it came from: `(source name, 1-based line)`.
    pub origin: (String, usize),
    /// The time fields (or macro) exactly as written, validated by
    /// [`Schedule::parse`].
    pub schedule: String,
    /// The command as cron hands it to the shell (`\%` already `%`).
    pub command: String,
    /// What cron would write to the command's stdin (from `%`), translated.
    pub stdin: Option<String>,
    pub description: Option<String>,
    /// Every variable the crontab set above this entry, except the ones
    /// mapped to fields (`SHELL`, `CRON_TZ`, `MAILTO`) and the other mail
    /// settings.
    pub env: BTreeMap<String, String>,
    pub shell: Option<String>,
    pub timezone: String,
    /// `HOME` when the crontab sets it: cron runs the job in `$HOME`.
    pub dir: Option<String>,
    /// The user the job ran as: a system crontab's user field, or
    /// [`Options::owner`] for user crontabs.
    pub user: Option<String>,
    /// `MAILTO` in force for this entry; empty when unset or `""` (rea then
    /// mails nothing, see [`render`]'s header).
    pub mailto: Vec<String>,
    /// Mail settings rea has no field for (`MAILFROM`, ..., and a `MAILTO`
    /// rea cannot use), kept as comments.
    pub mail: BTreeMap<String, String>,
    pub enabled: bool,
}

/// What a conversion produced.
#[derive(Debug, Clone, Default)]
pub struct Import {
    pub jobs: Vec<Job>,
    pub diagnostics: Vec<Diagnostic>,
    /// Comment lines not carried over as a description.
    pub comments: usize,
    pub blanks: usize,
    /// The conversion's own zone (jobs without `CRON_TZ` use it).
    pub timezone: String,
    /// Source names, in order, for the header of the rendered file.
    pub sources: Vec<String>,
}

impl Import {
    pub fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::NotConverted)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }
}

/// cron's own default `PATH` (`_PATH_DEFPATH`): a job whose crontab does not
/// set `PATH` ran with exactly this, so the import says so explicitly.
pub const CRON_DEFAULT_PATH: &str = "/usr/bin:/bin";

/// Variables cron reads to mail a job's output that rea's mail has no
/// setting for (`MAILTO` becomes `mailto`), and what rea does instead.
const MAIL_VARS: [(&str, &str); 3] = [
    ("MAILFROM", "rea's mails are sent as the user rea runs as"),
    ("CONTENT_TYPE", "rea's mails are text/plain; charset=utf-8"),
    (
        "CONTENT_TRANSFER_ENCODING",
        "rea's mails are text/plain; charset=utf-8",
    ),
];

/// cron's macros (case-sensitive in cron) and what rea calls them.
const CRON_MACROS: [&str; 8] = [
    "@reboot",
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// Converts `sources` in order; job names are unique across all of them.
pub fn import(sources: &[Source], options: &Options) -> Import {
    let mut out = Import {
        timezone: options.timezone.clone(),
        ..Import::default()
    };
    let mut names = HashSet::new();
    for source in sources {
        out.sources.push(source.name.clone());
        convert_file(source, options, &mut names, &mut out);
    }
    out
}

/// The environment being built while a file is read, top to bottom: cron
/// gives each entry the assignments made above it.
#[derive(Default)]
struct FileState {
    env: BTreeMap<String, String>,
    shell: Option<String>,
    cron_tz: Option<String>,
    mailto: Vec<String>,
    mail: BTreeMap<String, String>,
    /// Comment lines directly above the current line.
    comments: Vec<String>,
}

fn convert_file(source: &Source, options: &Options, names: &mut HashSet<String>, out: &mut Import) {
    let file = source.name.as_str();
    let mut state = FileState::default();
    let first_job = out.jobs.len();
    let first_diag = out.diagnostics.len();
    let mut segments: Vec<&[u8]> = source.text.split(|b| *b == b'\n').collect();
    // A final "\n" leaves an empty last segment; anything else there is a
    // last line without its newline.
    let unterminated = match segments.last() {
        Some([]) => {
            segments.pop();
            false
        }
        Some(_) => true,
        None => false,
    };
    let count = segments.len();
    for (i, bytes) in segments.into_iter().enumerate() {
        let n = i + 1;
        let Ok(mut line) = std::str::from_utf8(bytes) else {
            state.comments.clear();
            out.diagnostics.push(error(
                file,
                n,
                "the line is not valid UTF-8".to_string(),
                Some("convert the file to UTF-8 (e.g. with iconv) and import it again".to_string()),
            ));
            continue;
        };
        if let Some(stripped) = line.strip_suffix('\r') {
            line = stripped;
            if !stripped.trim().is_empty() && !stripped.trim_start().starts_with('#') {
                out.diagnostics.push(warning(
                    file,
                    n,
                    "the line ends with a carriage return (Windows line ending); cron would pass it to the shell as part of the line; removed".to_string(),
                    None,
                ));
            }
        }
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.trim().is_empty() {
            out.blanks += 1;
            flush_comments(&mut state, out);
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            take_comment(text, &mut state, out);
            continue;
        }
        let last_unterminated = unterminated && n == count;
        if last_unterminated {
            out.diagnostics.push(warning(
                file,
                n,
                "the file does not end with a newline: cron refuses its last line (\"premature EOF\"); converted anyway".to_string(),
                Some("check that this line is meant to run".to_string()),
            ));
        }
        match parse_assignment(trimmed) {
            Assignment::Set(name, value) => {
                flush_comments(&mut state, out);
                assign(file, n, name, value, options, &mut state, out);
                continue;
            }
            Assignment::Empty(name) => {
                flush_comments(&mut state, out);
                out.diagnostics.push(warning(
                    file,
                    n,
                    format!("cron does not accept an empty unquoted value ({name}=) and reports this line as an error; converted as {name}=\"\""),
                    Some(format!("write {name}=\"\" in crontabs")),
                ));
                assign(file, n, name, String::new(), options, &mut state, out);
                continue;
            }
            Assignment::No => {}
        }
        let description = take_description(&mut state);
        match parse_entry(trimmed, source.format) {
            Err((message, hint)) => out.diagnostics.push(error(file, n, message, hint)),
            Ok(entry) => {
                let job = build_job(file, n, entry, description, &state, options, names, out);
                out.jobs.push(job);
            }
        }
    }
    flush_comments(&mut state, out);

    let jobs = out.jobs.len() - first_job;
    let bad = out.diagnostics[first_diag..]
        .iter()
        .filter(|d| d.severity == Severity::NotConverted)
        .count();
    if bad > 0 && jobs > 0 {
        out.diagnostics.push(Diagnostic {
            file: file.to_string(),
            line: None,
            col: None,
            severity: Severity::Warning,
            message: format!(
                "{bad} line{} could not be converted; cron ignores a crontab with a bad line, so the {jobs} converted job{} may never have run under cron",
                plural(bad),
                plural(jobs)
            ),
            hint: Some("check that they are meant to run before enabling this file".to_string()),
        });
    }
    // Line order, whole-file findings last.
    out.diagnostics[first_diag..].sort_by_key(|d| d.line.unwrap_or(usize::MAX));
    if source.in_cron_d {
        let base = file.rsplit('/').next().unwrap_or(file);
        let valid = !base.is_empty()
            && base
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid && jobs > 0 {
            for job in &mut out.jobs[first_job..] {
                job.enabled = false;
            }
            out.diagnostics.push(Diagnostic {
                file: file.to_string(),
                line: None,
                col: None,
                severity: Severity::Warning,
                message: format!(
                    "cron ignores files in cron.d whose names contain anything but letters, digits, \"_\" and \"-\" (like {base:?}), so its {jobs} job{} never ran; converted with enabled = false",
                    plural(jobs)
                ),
                hint: Some("names like foo.dpkg-old or foo.bak are package-manager or editor leftovers: delete the jobs if so".to_string()),
            });
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn error(file: &str, line: usize, message: String, hint: Option<String>) -> Diagnostic {
    Diagnostic {
        file: file.to_string(),
        line: Some(line),
        col: None,
        severity: Severity::NotConverted,
        message,
        hint,
    }
}

fn warning(file: &str, line: usize, message: String, hint: Option<String>) -> Diagnostic {
    Diagnostic {
        file: file.to_string(),
        line: Some(line),
        col: None,
        severity: Severity::Warning,
        message,
        hint,
    }
}

// ---------------------------------------------------------------------------
// Comments → descriptions.

/// A comment joins the block above the next line unless it is a drawing, a
/// column header or an example entry (Debian's `/etc/crontab` ends its
/// explanation with `# *  *  *  *  * user-name command to be executed`
/// right above the first job), which ends the block instead.
fn take_comment(text: &str, state: &mut FileState, out: &mut Import) {
    let text = text.trim();
    if text.is_empty() {
        out.comments += 1;
        return;
    }
    if looks_like_cron_syntax(text) || !text.chars().any(char::is_alphanumeric) {
        out.comments += 1;
        flush_comments(state, out);
        return;
    }
    state.comments.push(text.to_string());
}

fn looks_like_cron_syntax(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("m h ")
        || lower.starts_with("min hour")
        || lower.starts_with("minute hour")
    {
        return true;
    }
    let first = text.split_whitespace().next().unwrap_or("");
    if first.starts_with('@') {
        return CRON_MACROS.iter().any(|m| m.eq_ignore_ascii_case(first));
    }
    let fields: Vec<&str> = text.split_whitespace().take(5).collect();
    fields.len() == 5 && Schedule::parse(&fields.join(" ")).is_ok()
}

fn flush_comments(state: &mut FileState, out: &mut Import) {
    out.comments += state.comments.len();
    state.comments.clear();
}

fn take_description(state: &mut FileState) -> Option<String> {
    if state.comments.is_empty() {
        return None;
    }
    let text = state.comments.join(" ");
    state.comments.clear();
    Some(text)
}

// ---------------------------------------------------------------------------
// Assignments.

#[derive(Debug, PartialEq)]
enum Assignment {
    /// Not an assignment: parse the line as an entry.
    No,
    Set(String, String),
    /// `NAME=` with nothing after: cron rejects it (it is not an assignment
    /// to cron, and not an entry either).
    Empty(String),
}

/// cronie's `load_env`: `NAME=value`, `NAME = value`, `"NAME" = "value"`,
/// `'NAME'='value'`. Spaces around `=` and after an unquoted value are
/// dropped; after a closing quote only spaces may follow. A `#` is part of
/// the value. `line` has no leading whitespace.
fn parse_assignment(line: &str) -> Assignment {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    // The name: quoted, or up to whitespace or '='.
    let mut name = String::new();
    if let Some(&q) = chars.first().filter(|c| **c == '"' || **c == '\'') {
        i = 1;
        loop {
            match chars.get(i) {
                None => return Assignment::No,
                Some(&c) if c == q => {
                    i += 1;
                    break;
                }
                Some('=') => return Assignment::No,
                Some(&c) => name.push(c),
            }
            i += 1;
        }
    } else {
        while let Some(&c) = chars.get(i) {
            if c.is_whitespace() || c == '=' {
                break;
            }
            name.push(c);
            i += 1;
        }
    }
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    if chars.get(i) != Some(&'=') {
        return Assignment::No;
    }
    i += 1;
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    if i >= chars.len() {
        return Assignment::Empty(name);
    }
    let mut value = String::new();
    if chars[i] == '"' || chars[i] == '\'' {
        let q = chars[i];
        i += 1;
        loop {
            match chars.get(i) {
                None => return Assignment::No,
                Some(&c) if c == q => {
                    i += 1;
                    break;
                }
                Some(&c) => value.push(c),
            }
            i += 1;
        }
        if chars[i..].iter().any(|c| !c.is_whitespace()) {
            return Assignment::No;
        }
    } else {
        value = chars[i..].iter().collect::<String>().trim_end().to_string();
    }
    Assignment::Set(name, value)
}

fn assign(
    file: &str,
    n: usize,
    name: String,
    value: String,
    options: &Options,
    state: &mut FileState,
    out: &mut Import,
) {
    if name.is_empty() || name.contains('\0') || value.contains('\0') {
        out.diagnostics.push(error(
            file,
            n,
            "an assignment needs a variable name before \"=\"".to_string(),
            None,
        ));
        return;
    }
    match name.as_str() {
        "SHELL" => state.shell = Some(value),
        "CRON_TZ" => match crate::zone::resolve(&value) {
            Ok(_) => state.cron_tz = Some(value),
            Err(e) => {
                let now = state.cron_tz.clone().unwrap_or(options.timezone.clone());
                out.diagnostics.push(error(
                    file,
                    n,
                    format!(
                        "CRON_TZ: {}; the jobs below keep the zone {now:?}",
                        e.message
                    ),
                    Some(match e.suggestions.first() {
                        Some(s) => format!("did you mean {s:?}?"),
                        None => "use an IANA name such as \"Europe/Berlin\"".to_string(),
                    }),
                ));
            }
        },
        "MAILTO" => {
            state.mail.remove(&name);
            match mail_addresses(&value) {
                Ok(list) => state.mailto = list,
                Err(bad) => {
                    out.diagnostics.push(warning(
                        file,
                        n,
                        format!("MAILTO={value}: {bad:?} is not an address rea can mail (it has a space or starts with \"-\"); kept as a comment, and the jobs below send no mail"),
                        Some("write MAILTO=ops@example.com, or several addresses separated by commas".to_string()),
                    ));
                    state.mailto.clear();
                    state.mail.insert(name, value);
                }
            }
        }
        _ if MAIL_VARS.iter().any(|(v, _)| *v == name) => {
            if value.is_empty() {
                state.mail.remove(&name);
            } else {
                let instead = MAIL_VARS
                    .iter()
                    .find(|(v, _)| *v == name)
                    .map_or("", |(_, instead)| *instead);
                out.diagnostics.push(warning(
                    file,
                    n,
                    format!("{name}={value}: not supported by this rea version ({instead}); kept as a comment on the jobs below"),
                    None,
                ));
                state.mail.insert(name, value);
            }
        }
        _ => {
            if name == "RANDOM_DELAY" {
                out.diagnostics.push(warning(
                    file,
                    n,
                    "RANDOM_DELAY (cronie) is kept in the environment but does not delay jobs in rea".to_string(),
                    Some(format!("set jitter = \"{value}m\" on the jobs (rea picks a new delay for every run)")),
                ));
            }
            state.env.insert(name, value);
        }
    }
}

/// `MAILTO`'s addresses, as cron hands them to sendmail: separated by
/// commas, blanks around them dropped; none for `""`. Err is the first
/// address `rea check` would refuse (see `config`'s `mailto`), which cron
/// could not have mailed either without passing it through a shell.
fn mail_addresses(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for addr in value.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if addr.contains(char::is_whitespace) || addr.starts_with('-') || addr.contains('\0') {
            return Err(addr.to_string());
        }
        out.push(addr.to_string());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Entries.

#[derive(Debug, PartialEq)]
struct Entry {
    schedule: String,
    user: Option<String>,
    /// The rest of the line, untouched.
    raw_command: String,
    /// A macro written in another case than cron accepts (`@Daily`).
    macro_case: Option<String>,
}

/// Splits off one whitespace-separated token (cron separates fields with
/// spaces and tabs); `s` has no leading whitespace.
fn token(s: &str) -> Option<(&str, &str)> {
    if s.is_empty() {
        return None;
    }
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    Some((&s[..end], s[end..].trim_start_matches([' ', '\t'])))
}

type EntryError = (String, Option<String>);

fn parse_entry(line: &str, format: Format) -> Result<Entry, EntryError> {
    let mut rest = line;
    let mut macro_case = None;
    let schedule = if line.starts_with('@') {
        let (word, after) = token(rest).unwrap_or((rest, ""));
        rest = after;
        match CRON_MACROS.iter().find(|m| m.eq_ignore_ascii_case(word)) {
            Some(m) => {
                if *m != word {
                    macro_case = Some(word.to_string());
                }
                m.to_string()
            }
            None => {
                return Err((
                    format!("unknown macro {word:?}"),
                    Some(format!("cron's macros are {}", CRON_MACROS.join(" "))),
                ))
            }
        }
    } else {
        let mut fields = Vec::with_capacity(5);
        for _ in 0..5 {
            match token(rest) {
                Some((f, after)) => {
                    fields.push(f);
                    rest = after;
                }
                None => break,
            }
        }
        if fields.len() < 5 || rest.is_empty() {
            return Err((
                "not an assignment, and not an entry: expected 5 time fields, then a command"
                    .to_string(),
                Some(match format {
                    Format::User => "e.g. \"30 2 * * * /usr/local/bin/backup\"".to_string(),
                    Format::System => "e.g. \"30 2 * * * root /usr/local/bin/backup\"".to_string(),
                }),
            ));
        }
        fields.join(" ")
    };
    let user = match format {
        Format::User => None,
        Format::System => match token(rest) {
            Some((u, after)) => {
                rest = after;
                Some(u.to_string())
            }
            None => {
                return Err((
                    "missing the user name and the command".to_string(),
                    Some("system crontabs name a user after the time fields: \"30 2 * * * root /usr/local/bin/backup\"".to_string()),
                ))
            }
        },
    };
    if rest.trim().is_empty() {
        return Err((
            "the entry has no command".to_string(),
            (format == Format::System)
                .then(|| "in a system crontab the user name comes before the command".to_string()),
        ));
    }
    if let Err(e) = Schedule::parse(&schedule) {
        let mut message = format!("schedule {schedule:?}: {}", e.message);
        if e.message.contains("step without a range") || e.message.contains("backwards range") {
            message.push_str(" (rea follows Vixie cron here; some crons guess a meaning)");
        }
        return Err((message, e.hint));
    }
    Ok(Entry {
        schedule,
        user,
        raw_command: rest.to_string(),
        macro_case,
    })
}

#[allow(clippy::too_many_arguments)]
fn build_job(
    file: &str,
    n: usize,
    entry: Entry,
    description: Option<String>,
    state: &FileState,
    options: &Options,
    names: &mut HashSet<String>,
    out: &mut Import,
) -> Job {
    if let Some(written) = &entry.macro_case {
        out.diagnostics.push(warning(
            file,
            n,
            format!(
                "cron's macros are lowercase and cron refuses {written:?}; converted as {}",
                entry.schedule
            ),
            None,
        ));
    }
    if entry.schedule == "@reboot" {
        out.diagnostics.push(warning(
            file,
            n,
            "@reboot runs when the rea daemon starts (cron: once per boot); restarting rea runs it again".to_string(),
            None,
        ));
    }
    let (command, stdin) = split_percent(&entry.raw_command);
    if stdin.is_some() {
        out.diagnostics.push(warning(
            file,
            n,
            "the text after % is the command's input; it is fed with printf (rea has no stdin field yet)".to_string(),
            None,
        ));
    }
    let never = Schedule::parse(&entry.schedule).ok().is_some_and(|s| {
        !s.is_reboot()
            && s.next_after(chrono::DateTime::UNIX_EPOCH, chrono_tz::UTC)
                .is_none()
    });
    if never {
        out.diagnostics.push(warning(
            file,
            n,
            format!(
                "{:?} never fires (no such day); cron accepts it too",
                entry.schedule
            ),
            None,
        ));
    }
    let mut env = state.env.clone();
    env.entry("PATH".to_string())
        .or_insert_with(|| CRON_DEFAULT_PATH.to_string());
    let dir = state
        .env
        .get("HOME")
        .filter(|h| h.starts_with('/'))
        .cloned();
    let name = unique_name(&derive_name(&command), names);
    Job {
        name,
        origin: (file.to_string(), n),
        schedule: entry.schedule,
        command,
        stdin,
        description,
        env,
        // cron's default shell is rea's default too.
        shell: state.shell.clone().filter(|s| s != "/bin/sh"),
        timezone: state.cron_tz.clone().unwrap_or(options.timezone.clone()),
        dir,
        user: entry.user.or_else(|| options.owner.clone()),
        mailto: state.mailto.clone(),
        mail: state.mail.clone(),
        enabled: true,
    }
}

/// cron's split of a command at its first unescaped `%` (see the module
/// doc): the command as the shell gets it, and the input, translated.
pub fn split_percent(raw: &str) -> (String, Option<String>) {
    let mut command = String::with_capacity(raw.len());
    let mut escaped = false;
    for (i, c) in raw.char_indices() {
        if escaped {
            if c == '%' {
                command.pop();
            }
            command.push(c);
            escaped = false;
            continue;
        }
        if c == '%' {
            return (command, stdin_text(&raw[i + 1..]));
        }
        escaped = c == '\\';
        command.push(c);
    }
    (command, None)
}

/// cron's translation of the input part: `%` → newline, `\%` → `%`, any
/// other backslash kept; a final newline when the text does not end with
/// one. None when there is no text (cron then writes nothing at all).
fn stdin_text(input: &str) -> Option<String> {
    if input.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(input.len() + 1);
    let mut escaped = false;
    let mut need_newline = false;
    for mut c in input.chars() {
        if escaped {
            if c != '%' {
                out.push('\\');
            }
        } else if c == '%' {
            c = '\n';
        }
        escaped = c == '\\';
        if !escaped {
            out.push(c);
            need_newline = c != '\n';
        }
    }
    if escaped {
        out.push('\\');
    }
    if need_newline {
        out.push('\n');
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Names.

/// Programs that only check or prepare something; the job is named after
/// what comes next.
const GUARDS: [&str; 12] = [
    "test", "[", "[[", "cd", "true", "false", ":", "sleep", "command", "type", "which", "exit",
];
/// Programs that run the next word as the command.
const WRAPPERS: [&str; 12] = [
    "sudo", "nice", "ionice", "nohup", "exec", "env", "time", "timeout", "flock", "chronic",
    "cronic", "run-one",
];
const INTERPRETERS: [&str; 10] = [
    "sh", "bash", "dash", "zsh", "python", "python3", "perl", "ruby", "php", "node",
];
/// Shell words that separate commands like operators do.
const RESERVED: [&str; 14] = [
    "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "case",
    "esac",
];

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    /// `&&`, `||`, `;`, `&`, `(`, `)`, newline: a new command starts.
    Sep,
    /// `|`: the next command is a later pipeline stage.
    Pipe,
}

/// A rough shell tokenizer, enough to name jobs: quotes respected,
/// redirections and their targets dropped.
fn shell_tokens(cmd: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = cmd.chars().peekable();
    let end_word = |toks: &mut Vec<Tok>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            toks.push(Tok::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    let mut skip_next_word = false;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            ' ' | '\t' => {
                let was = in_word;
                end_word(&mut toks, &mut word, &mut in_word);
                if was && skip_next_word {
                    toks.pop();
                    skip_next_word = false;
                }
            }
            '>' | '<' => {
                // `2>&1`, `>/dev/null`, `<<EOF`: drop the fd number and the target.
                if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    end_word(&mut toks, &mut word, &mut in_word);
                }
                while chars.peek().is_some_and(|n| matches!(n, '>' | '<' | '&')) {
                    chars.next();
                }
                if chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                {
                    while chars
                        .peek()
                        .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                    {
                        chars.next();
                    }
                } else {
                    skip_next_word = true;
                    while chars.peek().is_some_and(|n| *n == ' ' || *n == '\t') {
                        chars.next();
                    }
                }
            }
            '|' | '&' | ';' | '(' | ')' | '\n' | '#' if !in_word || c != '#' => {
                let was = in_word;
                end_word(&mut toks, &mut word, &mut in_word);
                if was && skip_next_word {
                    toks.pop();
                    skip_next_word = false;
                }
                if c == '#' {
                    break;
                }
                if c == '|' && chars.peek() != Some(&'|') {
                    toks.push(Tok::Pipe);
                } else {
                    if matches!(c, '|' | '&') && chars.peek() == Some(&c) {
                        chars.next();
                    }
                    toks.push(Tok::Sep);
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    let was = in_word;
    end_word(&mut toks, &mut word, &mut in_word);
    if was && skip_next_word {
        toks.pop();
    }
    toks
}

/// A readable job name from a command: the program of the first command
/// that is not a guard (`test -x ... &&`, `cd / &&`), without wrappers
/// (`nice`, `sudo`, `VAR=value`), named after the script for interpreters
/// and after the directory for `run-parts`.
pub fn derive_name(command: &str) -> String {
    let mut simple: Vec<Vec<String>> = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut later_stage = false;
    let mut finish = |current: &mut Vec<String>, later: bool| {
        if !current.is_empty() && !later {
            simple.push(std::mem::take(current));
        }
        current.clear();
    };
    for tok in shell_tokens(command) {
        match tok {
            // `!`, `{`, `if` ... are keywords only where a command starts.
            Tok::Word(w) if current.is_empty() && RESERVED.contains(&w.as_str()) => {
                finish(&mut current, later_stage);
                later_stage = false;
            }
            Tok::Word(w) => current.push(w),
            Tok::Sep => {
                finish(&mut current, later_stage);
                later_stage = false;
            }
            Tok::Pipe => {
                finish(&mut current, later_stage);
                later_stage = true;
            }
        }
    }
    finish(&mut current, later_stage);

    let named: Vec<String> = simple.iter().filter_map(|words| name_of(words)).collect();
    let raw = named.first().cloned().unwrap_or_default();
    let clean = sanitize(&raw);
    if clean.is_empty() {
        "job".to_string()
    } else {
        clean
    }
}

/// The name one simple command contributes, None for guards.
fn name_of(words: &[String]) -> Option<String> {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let mut i = 0;
    // Assignments and wrappers with their options.
    loop {
        let w = words.get(i)?;
        let is_assignment = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment {
            i += 1;
            continue;
        }
        let b = base(w);
        if WRAPPERS.contains(&b.as_str()) {
            i += 1;
            // Options, and the bare numbers/durations/files some of them take.
            while let Some(o) = words.get(i) {
                let numeric = o.chars().next().is_some_and(|c| c.is_ascii_digit());
                if b == "sudo" && (o == "-u" || o == "-g") {
                    i += 2;
                } else if o.starts_with('-') || numeric || o.contains('=') {
                    i += 1;
                } else if b == "flock" && i + 1 < words.len() {
                    i += 1; // the lock file
                    break;
                } else {
                    break;
                }
            }
            continue;
        }
        break;
    }
    let program = base(&words[i]);
    let args = &words[i + 1..];
    if GUARDS.contains(&program.as_str()) {
        return None;
    }
    if INTERPRETERS.contains(&program.as_str()) {
        let inline = args
            .iter()
            .position(|a| a == "-c" || a == "-e" || a == "-r");
        if let Some(p) = inline {
            let code = args.get(p + 1).map(String::as_str).unwrap_or("");
            if code.trim_start().starts_with("sleep") || code.contains("sleep int(rand") {
                return None;
            }
            return Some(program);
        }
        if let Some(script) = args.iter().find(|a| !a.starts_with('-')) {
            return Some(strip_extension(&base(script)));
        }
        return Some(program);
    }
    if program == "run-parts" {
        if let Some(dir) = args.iter().rev().find(|a| !a.starts_with('-')) {
            return Some(format!("run-parts-{}", base(dir.trim_end_matches('/'))));
        }
    }
    Some(strip_extension(&program))
}

fn strip_extension(name: &str) -> String {
    for ext in [".sh", ".bash", ".py", ".pl", ".rb", ".php", ".js"] {
        if let Some(stem) = name.strip_suffix(ext) {
            if !stem.is_empty() {
                return stem.to_string();
            }
        }
    }
    name.to_string()
}

/// Letters, digits, `_` and `-` (a dot reads badly in `rea status a.b`);
/// anything else becomes one `-`; at most 48 characters.
fn sanitize(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-');
    let mut short: String = trimmed.chars().take(48).collect();
    while short.ends_with('-') {
        short.pop();
    }
    short
}

/// `name`, else `name-2`, `name-3`, ...
pub fn unique_name(name: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.to_string();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{name}-{n}");
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

// ---------------------------------------------------------------------------
// Format detection.

/// Whether `line` is a plausible user name for field 6 (POSIX portable
/// user names, as `useradd` accepts them by default).
pub fn plausible_user(word: &str) -> bool {
    let mut chars = word.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    word.len() <= 32
        && (first.is_ascii_lowercase() || first == '_')
        && word
            .trim_end_matches('$')
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// The content test for files that are neither under `/etc` nor named by
/// `--system`/`--user`: a system crontab when it has entries and, in every
/// one, field 6 is a user the machine knows (`is_user`) and a command
/// follows it. A user crontab's commands start with a program name, which
/// is rarely a user name too.
pub fn looks_like_system(text: &str, is_user: &dyn Fn(&str) -> bool) -> bool {
    let mut entries = 0;
    for line in String::from_utf8_lossy(text.as_bytes()).lines() {
        let t = line.trim_start_matches([' ', '\t']);
        if t.trim().is_empty() || t.starts_with('#') || parse_assignment(t) != Assignment::No {
            continue;
        }
        let Ok(entry) = parse_entry(t, Format::User) else {
            continue;
        };
        entries += 1;
        match token(&entry.raw_command) {
            Some((user, rest))
                if plausible_user(user) && is_user(user) && !rest.trim().is_empty() => {}
            _ => return false,
        }
    }
    entries > 0
}

// ---------------------------------------------------------------------------
// Rendering.

/// A TOML basic string: quotes, backslashes and control characters escaped,
/// everything else (unicode included) as is.
pub fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        toml_string(k)
    }
}

fn inline_table(map: &BTreeMap<String, String>) -> String {
    let items: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_key(k), toml_string(v)))
        .collect();
    format!("{{ {} }}", items.join(", "))
}

/// POSIX shell single quotes: everything literal, `'` written as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command that gives `command` the input cron would have written to
/// its stdin. A command with operators, background jobs or a comment is
/// grouped with `{ ...` and a newline before `}`, so the whole of it reads
/// the input, as under cron, and a trailing `&` or `# comment` cannot
/// swallow the closing brace.
pub fn command_with_stdin(command: &str, stdin: &str) -> String {
    let feed = format!("printf '%s' {}", shell_quote(stdin));
    if command.contains([';', '&', '|', '#', '\n']) {
        format!("{feed} | {{ {command}\n}}")
    } else {
        format!("{feed} | {command}")
    }
}

fn toml_array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| toml_string(i)).collect();
    format!("[{}]", items.join(", "))
}

/// The header's review notes: how the converted jobs differ from cron in
/// what rea does with users, directories and mail. Only what this file
/// contains is mentioned, and each sentence stays true of every job.
fn header(import: &Import) -> String {
    let jobs = &import.jobs;
    let mut users: Vec<&str> = jobs.iter().filter_map(|j| j.user.as_deref()).collect();
    users.sort_unstable();
    users.dedup();
    let ownerless = jobs.iter().any(|j| j.user.is_none());
    let mut notes = vec!["Review before use.".to_string()];
    if !users.is_empty() {
        notes.push(format!(
            "Jobs run as their `user` ({}) with its groups, HOME, USER and LOGNAME, as under cron; for that the rea daemon must run as root, as cron does. `rea check` verifies that these users exist on this machine.",
            users.join(", ")
        ));
    }
    if ownerless {
        notes.push(
            "Jobs without `user` come from a user crontab, which does not name its owner: they run as the user rea runs as (`rea import --user --owner NAME` sets it).".to_string(),
        );
    }
    notes.push(
        "cron ran each job in its user's home directory; rea runs it in rea's working directory unless `dir` says otherwise.".to_string(),
    );
    notes.push(
        "Without MAILTO, cron mailed a job's output to the user it ran as; rea mails only the addresses in `mailto`, so jobs without it send no mail. Every run's output is kept in rea's history (`rea logs JOB`).".to_string(),
    );
    let mut out = String::new();
    for note in notes {
        out.push_str(&wrap_comment(&note, 78));
    }
    out.push('\n');
    out
}

/// `text` as `# ` comment lines of at most `width` characters (longer words
/// stay whole).
fn wrap_comment(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from("#");
    for word in text.split(' ') {
        if line.len() > 1 && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The job file: a header, `[defaults]` holding what every job shares, then
/// one table per job preceded by `# FILE:LINE`.
pub fn render(import: &Import) -> String {
    let jobs = &import.jobs;
    let mut s = String::new();
    s.push_str("# Converted from crontab by `rea import`:\n");
    for src in &import.sources {
        s.push_str(&format!("#   {src}\n"));
    }
    s.push_str(&header(import));
    // [defaults]: the zone of the conversion, and every environment
    // variable that all jobs have with the same value.
    let mut common: BTreeMap<String, String> =
        jobs.first().map(|j| j.env.clone()).unwrap_or_default();
    for j in jobs {
        common.retain(|k, v| j.env.get(k) == Some(v));
    }
    let shared = |f: &dyn Fn(&Job) -> Option<String>| -> Option<String> {
        let first = f(jobs.first()?)?;
        jobs.iter()
            .all(|j| f(j).as_ref() == Some(&first))
            .then_some(first)
    };
    let shell = shared(&|j| j.shell.clone());
    let dir = shared(&|j| j.dir.clone());
    let user = shared(&|j| j.user.clone());
    let mailto = shared(&|j| (!j.mailto.is_empty()).then(|| toml_array(&j.mailto)));
    let mails = jobs.iter().any(|j| !j.mailto.is_empty());
    s.push_str("[defaults]\n");
    s.push_str(&format!(
        "timezone = {}{}\n",
        toml_string(&import.timezone),
        if import.timezone == "local" {
            "   # cron reads schedules in the machine's zone"
        } else {
            ""
        }
    ));
    if let Some(sh) = &shell {
        s.push_str(&format!("shell = {}\n", toml_string(sh)));
    }
    if let Some(d) = &dir {
        s.push_str(&format!(
            "dir = {}   # HOME: cron runs jobs there\n",
            toml_string(d)
        ));
    }
    if let Some(u) = &user {
        s.push_str(&format!("user = {}\n", toml_string(u)));
    }
    if let Some(m) = &mailto {
        s.push_str(&format!("mailto = {m}   # MAILTO\n"));
    }
    if mails {
        s.push_str("mail_on = \"output\"   # as cron: mail whenever a job prints something\n");
    }
    if !common.is_empty() {
        s.push_str(&format!("env = {}\n", inline_table(&common)));
    }
    for j in jobs {
        s.push_str(&format!("\n# {}:{}\n", j.origin.0, j.origin.1));
        s.push_str(&format!("[jobs.{}]\n", j.name));
        s.push_str(&format!("schedule = {}\n", toml_string(&j.schedule)));
        match &j.stdin {
            None => s.push_str(&format!("command = {}\n", toml_string(&j.command))),
            Some(input) => {
                s.push_str(
                    "# cron fed the text after % to the command's stdin; printf does it here\n",
                );
                s.push_str(&format!(
                    "command = {}\n",
                    toml_string(&command_with_stdin(&j.command, input))
                ));
            }
        }
        if let Some(d) = &j.description {
            s.push_str(&format!("description = {}\n", toml_string(d)));
        }
        if j.timezone != import.timezone {
            s.push_str(&format!(
                "timezone = {}   # CRON_TZ\n",
                toml_string(&j.timezone)
            ));
        }
        if shell.is_none() {
            if let Some(sh) = &j.shell {
                s.push_str(&format!("shell = {}\n", toml_string(sh)));
            }
        }
        if dir.is_none() {
            if let Some(d) = &j.dir {
                s.push_str(&format!(
                    "dir = {}   # HOME: cron runs jobs there\n",
                    toml_string(d)
                ));
            }
        }
        let own: BTreeMap<String, String> = j
            .env
            .iter()
            .filter(|(k, _)| !common.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !own.is_empty() {
            s.push_str(&format!("env = {}\n", inline_table(&own)));
        }
        if !j.enabled {
            s.push_str("enabled = false   # cron never ran this file (see the import warnings)\n");
        }
        if user.is_none() {
            if let Some(u) = &j.user {
                s.push_str(&format!("user = {}\n", toml_string(u)));
            }
        }
        if mailto.is_none() && !j.mailto.is_empty() {
            s.push_str(&format!("mailto = {}   # MAILTO\n", toml_array(&j.mailto)));
        }
        for (k, v) in &j.mail {
            s.push_str(&format!(
                "# {k}={}   (not converted; see the import warnings)\n",
                toml_string(v)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            timezone: "UTC".to_string(),
            owner: None,
        }
    }

    fn user(text: &str) -> Import {
        import(
            &[Source {
                name: "tab".to_string(),
                text: text.as_bytes().to_vec(),
                format: Format::User,
                in_cron_d: false,
            }],
            &opts(),
        )
    }

    fn system_at(name: &str, text: &str, in_cron_d: bool) -> Import {
        import(
            &[Source {
                name: name.to_string(),
                text: text.as_bytes().to_vec(),
                format: Format::System,
                in_cron_d,
            }],
            &opts(),
        )
    }

    fn messages(i: &Import) -> Vec<String> {
        i.diagnostics.iter().map(|d| d.to_string()).collect()
    }

    fn has(i: &Import, needle: &str) {
        let all = messages(i);
        assert!(
            all.iter().any(|m| m.contains(needle)),
            "no diagnostic contains {needle:?}; got {all:#?}"
        );
    }

    // -- % and backslashes, as cronie's do_command.c does them --------------

    #[test]
    fn percent_splits_command_and_input() {
        assert_eq!(
            split_percent("mail -s hi bob%line 1%line 2"),
            (
                "mail -s hi bob".to_string(),
                Some("line 1\nline 2\n".to_string())
            )
        );
    }

    #[test]
    fn input_gets_a_final_newline_only_when_missing() {
        assert_eq!(split_percent("cat%a%").1.as_deref(), Some("a\n"));
        assert_eq!(split_percent("cat%a").1.as_deref(), Some("a\n"));
        assert_eq!(split_percent("cat%%").1.as_deref(), Some("\n"));
    }

    #[test]
    fn empty_input_means_no_input() {
        assert_eq!(split_percent("cat%"), ("cat".to_string(), None));
    }

    #[test]
    fn escaped_percent_is_a_literal_percent_in_the_command() {
        assert_eq!(
            split_percent(r"date +\%Y-\%m-\%d"),
            ("date +%Y-%m-%d".to_string(), None)
        );
    }

    #[test]
    fn other_backslashes_are_left_to_the_shell() {
        // cron does not touch `\\` or `\n` in the command: `sh` reads them,
        // and rea runs the same shell.
        assert_eq!(
            split_percent(r"printf 'a\nb' \\ x"),
            (r"printf 'a\nb' \\ x".to_string(), None)
        );
        // The second backslash of `\\` is what cron treats as escaped, so
        // the `%` after it is unescaped and starts the input.
        assert_eq!(
            split_percent(r"echo \\%in"),
            (r"echo \\".to_string(), Some("in\n".to_string()))
        );
    }

    #[test]
    fn escapes_in_the_input() {
        assert_eq!(
            split_percent(r"cat%100\% sure").1.as_deref(),
            Some("100% sure\n")
        );
        assert_eq!(split_percent(r"cat%a\b").1.as_deref(), Some("a\\b\n"));
        assert_eq!(split_percent(r"cat%a\\%b").1.as_deref(), Some("a\\%b\n"));
        assert_eq!(split_percent(r"cat%end\").1.as_deref(), Some("end\\\n"));
    }

    #[test]
    fn input_is_fed_with_printf_and_quoted_for_the_shell() {
        assert_eq!(
            command_with_stdin("mail bob", "it's\n"),
            "printf '%s' 'it'\\''s\n' | mail bob"
        );
        assert_eq!(
            command_with_stdin("cd / && cat # note", "x\n"),
            "printf '%s' 'x\n' | { cd / && cat # note\n}"
        );
    }

    // -- assignments, as cronie's load_env reads them -----------------------

    fn set(n: &str, v: &str) -> Assignment {
        Assignment::Set(n.to_string(), v.to_string())
    }

    #[test]
    fn assignment_spaces_around_equals_are_trimmed() {
        assert_eq!(
            parse_assignment("PATH = /bin:/usr/bin  "),
            set("PATH", "/bin:/usr/bin")
        );
        assert_eq!(parse_assignment("A=b c"), set("A", "b c"));
    }

    #[test]
    fn assignment_quotes_are_stripped() {
        assert_eq!(parse_assignment("MAILTO=\"\""), set("MAILTO", ""));
        assert_eq!(parse_assignment("A = ' x y '"), set("A", " x y "));
        assert_eq!(parse_assignment("\"A B\"=1"), set("A B", "1"));
    }

    #[test]
    fn hash_inside_a_value_is_not_a_comment() {
        assert_eq!(parse_assignment("A=x # y"), set("A", "x # y"));
        assert_eq!(parse_assignment("A=\"#x\""), set("A", "#x"));
    }

    #[test]
    fn not_assignments() {
        for line in [
            "0 * * * * a=b",
            "@daily x=y",
            "A=\"unterminated",
            "A=\"x\" trailing",
            "A B=c",
        ] {
            assert_eq!(parse_assignment(line), Assignment::No, "{line}");
        }
        assert_eq!(parse_assignment("A="), Assignment::Empty("A".to_string()));
    }

    // -- names --------------------------------------------------------------

    #[test]
    fn names_come_from_the_program() {
        let cases = [
            ("/usr/local/bin/backup-db --full", "backup-db"),
            (
                "test -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )",
                "run-parts-cron-daily",
            ),
            ("cd / && run-parts --report /etc/cron.hourly", "run-parts-cron-hourly"),
            ("cd /srv && ./bin/sync.sh --quiet 2>&1 | logger -t sync", "sync"),
            ("nice -n 10 ionice -c3 /usr/bin/pg_dump db > /tmp/x", "pg_dump"),
            ("sudo -u www-data php /var/www/artisan schedule:run", "artisan"),
            ("FOO=1 BAR=2 /opt/tool", "tool"),
            ("[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; then /usr/lib/php/sessionclean; fi", "sessionclean"),
            ("test -x /usr/bin/certbot -a \\! -d /run/systemd/system && perl -e 'sleep int(rand(43200))' && certbot -q renew", "certbot"),
            ("command -v debian-sa1 > /dev/null && debian-sa1 1 1", "debian-sa1"),
            ("flock -n /tmp/lock /usr/local/bin/import.py", "import"),
            ("/opt/weird name/x.sh", "weird"),
            ("/opt/ünï.sh", "n"),
            ("true", "job"),
        ];
        for (cmd, want) in cases {
            assert_eq!(derive_name(cmd), want, "{cmd}");
        }
    }

    #[test]
    fn names_are_made_unique() {
        let mut taken = HashSet::new();
        assert_eq!(unique_name("a", &mut taken), "a");
        assert_eq!(unique_name("a", &mut taken), "a-2");
        assert_eq!(unique_name("a", &mut taken), "a-3");
        assert_eq!(unique_name("a-2", &mut taken), "a-2-2");
    }

    #[test]
    fn names_are_unique_across_files() {
        let i = import(
            &[
                Source {
                    name: "a".into(),
                    text: b"@daily /bin/x\n".to_vec(),
                    format: Format::User,
                    in_cron_d: false,
                },
                Source {
                    name: "b".into(),
                    text: b"@daily /bin/x\n".to_vec(),
                    format: Format::User,
                    in_cron_d: false,
                },
            ],
            &opts(),
        );
        let names: Vec<&str> = i.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["x", "x-2"]);
    }

    // -- entries, environment and descriptions ------------------------------

    #[test]
    fn environment_applies_to_the_entries_below_it() {
        let i = user("A=1\n@daily one\nA=2\nSHELL=/bin/bash\nCRON_TZ=Europe/Berlin\n@daily two\n");
        assert_eq!(i.jobs[0].env["A"], "1");
        assert_eq!(i.jobs[0].shell, None);
        assert_eq!(i.jobs[0].timezone, "UTC");
        assert_eq!(i.jobs[1].env["A"], "2");
        assert_eq!(i.jobs[1].shell.as_deref(), Some("/bin/bash"));
        assert_eq!(i.jobs[1].timezone, "Europe/Berlin");
        assert_eq!(i.jobs[0].env["PATH"], CRON_DEFAULT_PATH);
    }

    #[test]
    fn comments_directly_above_become_the_description() {
        let i = user("# not this\n\n# Nightly\n# backup\n  0 1 * * * b\n0 2 * * * c\n");
        assert_eq!(i.jobs[0].description.as_deref(), Some("Nightly backup"));
        assert_eq!(i.jobs[1].description, None);
        assert_eq!(i.comments, 1);
    }

    #[test]
    fn example_lines_and_drawings_are_not_descriptions() {
        let i = user("# m h  dom mon dow   command\n0 1 * * * a\n# |  |  |\n# *  *  *  *  * user-name command\n0 2 * * * b\n");
        assert_eq!(i.jobs[0].description, None);
        assert_eq!(i.jobs[1].description, None);
    }

    #[test]
    fn system_entries_keep_their_user() {
        let i = system_at(
            "/etc/crontab",
            "17 * * * * root cd / && run-parts /etc/cron.hourly\n@reboot www-data /bin/warm\n",
            false,
        );
        assert_eq!(i.jobs[0].user.as_deref(), Some("root"));
        assert_eq!(i.jobs[0].command, "cd / && run-parts /etc/cron.hourly");
        assert_eq!(i.jobs[1].schedule, "@reboot");
        assert_eq!(i.jobs[1].user.as_deref(), Some("www-data"));
    }

    #[test]
    fn format_detection_by_content() {
        let is_user = |u: &str| ["root", "www-data"].contains(&u);
        assert!(looks_like_system(
            "SHELL=/bin/sh\n0 1 * * * root /bin/x\n@daily www-data y z\n",
            &is_user
        ));
        assert!(!looks_like_system(
            "0 1 * * * root /bin/x\n0 2 * * * /bin/y\n",
            &is_user
        ));
        assert!(!looks_like_system("0 1 * * * rm -rf /tmp/x\n", &is_user));
        assert!(!looks_like_system("# nothing\n", &is_user));
        assert!(
            plausible_user("www-data")
                && plausible_user("_apt")
                && !plausible_user("/bin/x")
                && !plausible_user("Root")
        );
    }

    // -- every warning and error text ---------------------------------------

    #[test]
    fn error_texts() {
        has(&user("0 5/10 * * * x\n"), "tab:1: not converted: schedule \"0 5/10 * * *\": step without a range: \"5/10\" in the hour field (rea follows Vixie cron here; some crons guess a meaning)");
        has(&user("0 22-2 * * * x\n"), "tab:1: not converted: schedule \"0 22-2 * * *\": backwards range \"22-2\" in the hour field");
        has(
            &user("61 * * * * x\n"),
            "tab:1: not converted: schedule \"61 * * * *\": minute value 61 is out of range",
        );
        has(
            &user("@every 5m x\n"),
            "tab:1: not converted: unknown macro \"@every\"\n  hint: cron's macros are @reboot",
        );
        has(&user("0 1 * *\n"), "tab:1: not converted: not an assignment, and not an entry: expected 5 time fields, then a command");
        has(
            &system_at("s", "0 1 * * *\n", false),
            "s:1: not converted: not an assignment, and not an entry",
        );
        has(&system_at("s", "0 1 * * * root\n", false), "s:1: not converted: the entry has no command\n  hint: in a system crontab the user name comes before the command");
        has(
            &system_at("s", "@daily\n", false),
            "s:1: not converted: missing the user name and the command",
        );
        has(&user("CRON_TZ=Europe/Berln\n"), "tab:1: not converted: CRON_TZ: unknown timezone \"Europe/Berln\"; the jobs below keep the zone \"UTC\"\n  hint: did you mean \"Europe/Berlin\"?");
        has(
            &user("=x\n"),
            "tab:1: not converted: an assignment needs a variable name before \"=\"",
        );
        let bad = import(
            &[Source {
                name: "tab".into(),
                text: b"0 1 * * * \xff\n".to_vec(),
                format: Format::User,
                in_cron_d: false,
            }],
            &opts(),
        );
        has(&bad, "tab:1: not converted: the line is not valid UTF-8");
    }

    #[test]
    fn warning_texts() {
        has(&user("MAILFROM=cron@example.com\n@daily x\n"), "tab:1: warning: MAILFROM=cron@example.com: not supported by this rea version (rea's mails are sent as the user rea runs as); kept as a comment on the jobs below");
        has(&user("CONTENT_TYPE=text/html\n"), "tab:1: warning: CONTENT_TYPE=text/html: not supported by this rea version (rea's mails are text/plain; charset=utf-8); kept as a comment on the jobs below");
        has(&user("MAILTO=ops@example.com,-oi\n@daily x\n"), "tab:1: warning: MAILTO=ops@example.com,-oi: \"-oi\" is not an address rea can mail (it has a space or starts with \"-\"); kept as a comment, and the jobs below send no mail\n  hint: write MAILTO=ops@example.com, or several addresses separated by commas");
        has(&user("RANDOM_DELAY=5\n"), "tab:1: warning: RANDOM_DELAY (cronie) is kept in the environment but does not delay jobs in rea\n  hint: set jitter = \"5m\"");
        has(&user("A=\n"), "tab:1: warning: cron does not accept an empty unquoted value (A=) and reports this line as an error; converted as A=\"\"");
        has(&user("@Daily x\n"), "tab:1: warning: cron's macros are lowercase and cron refuses \"@Daily\"; converted as @daily");
        has(&user("@reboot x\n"), "tab:1: warning: @reboot runs when the rea daemon starts (cron: once per boot); restarting rea runs it again");
        has(&user("0 1 * * * mail bob%hi\n"), "tab:1: warning: the text after % is the command's input; it is fed with printf (rea has no stdin field yet)");
        has(
            &user("0 0 30 2 * x\n"),
            "tab:1: warning: \"0 0 30 2 *\" never fires (no such day); cron accepts it too",
        );
        has(&user("0 1 * * * x\r\n"), "tab:1: warning: the line ends with a carriage return (Windows line ending); cron would pass it to the shell as part of the line; removed");
        has(&user("0 1 * * * x"), "tab:1: warning: the file does not end with a newline: cron refuses its last line (\"premature EOF\"); converted anyway");
        has(&user("0 1 * * * a\nbad line\n"), "tab: warning: 1 line could not be converted; cron ignores a crontab with a bad line, so the 1 converted job may never have run under cron");
        let old = system_at("/etc/cron.d/x.dpkg-old", "0 1 * * * root a\n", true);
        has(&old, "/etc/cron.d/x.dpkg-old: warning: cron ignores files in cron.d whose names contain anything but letters, digits, \"_\" and \"-\" (like \"x.dpkg-old\"), so its 1 job never ran; converted with enabled = false");
        assert!(!old.jobs[0].enabled);
        assert!(system_at("/etc/cron.d/x_y-z", "0 1 * * * root a\n", true).jobs[0].enabled);
    }

    #[test]
    fn users_and_mail_are_fields_not_warnings() {
        let i = system_at(
            "s",
            "MAILTO=a@b\n0 1 * * * root a\n0 2 * * * www-data b\n",
            false,
        );
        assert_eq!(messages(&i), Vec::<String>::new());
        assert_eq!(i.jobs[1].user.as_deref(), Some("www-data"));
        assert_eq!(i.jobs[1].mailto, ["a@b"]);
        assert!(i.jobs[1].mail.is_empty());
    }

    #[test]
    fn mailto_lists_and_empty_mailto() {
        let i = user("MAILTO= a@b , c ,\n@daily a\nMAILTO=\"\"\n@daily b\nMAILTO=d\n@daily c\n");
        assert_eq!(i.jobs[0].mailto, ["a@b", "c"]);
        assert!(i.jobs[1].mailto.is_empty());
        assert_eq!(i.jobs[2].mailto, ["d"]);
        // An unusable MAILTO mails nothing and is kept as a comment until a
        // later MAILTO replaces it.
        let i = user("MAILTO=a b\n@daily a\nMAILTO=c\n@daily b\n");
        assert!(i.jobs[0].mailto.is_empty());
        assert_eq!(i.jobs[0].mail["MAILTO"], "a b");
        assert_eq!(i.jobs[1].mailto, ["c"]);
        assert!(i.jobs[1].mail.is_empty());
    }

    #[test]
    fn the_owner_becomes_the_user_of_user_crontab_jobs_only() {
        let owner = Options {
            owner: Some("alice".to_string()),
            ..opts()
        };
        let i = import(
            &[
                Source {
                    name: "tab".into(),
                    text: b"@daily a\n".to_vec(),
                    format: Format::User,
                    in_cron_d: false,
                },
                Source {
                    name: "/etc/crontab".into(),
                    text: b"@daily root b\n".to_vec(),
                    format: Format::System,
                    in_cron_d: false,
                },
            ],
            &owner,
        );
        assert_eq!(i.jobs[0].user.as_deref(), Some("alice"));
        assert_eq!(i.jobs[1].user.as_deref(), Some("root"));
        assert_eq!(user("@daily a\n").jobs[0].user, None);
    }

    #[test]
    fn a_clean_crontab_has_no_diagnostics() {
        let i = user("PATH=/bin\n# nightly\n30 2 * * * /bin/backup\n@hourly /bin/ping\n");
        assert_eq!(messages(&i), Vec::<String>::new());
        assert_eq!(i.jobs.len(), 2);
    }

    // -- rendering ----------------------------------------------------------

    #[test]
    fn toml_escaping() {
        assert_eq!(
            toml_string("a\"b\\c\nd\te\u{1}\u{7f}é☃"),
            "\"a\\\"b\\\\c\\nd\\te\\u0001\\u007Fé☃\""
        );
    }

    #[test]
    fn rendered_file_passes_check_and_round_trips() {
        let text = "SHELL=/bin/bash\nX = 'q\"uote \\ back ☃'\nMAILTO=a@b\n\"WEIRD KEY\"=1\n# say \"hi\"\n0 1 * * * echo \"$X\" '\\\\'%line\\%1%line 2\nCRON_TZ=America/New_York\n@reboot /bin/up\n";
        let i = user(text);
        let toml = render(&i);
        let cfg = crate::parse(toml.as_bytes(), std::path::Path::new("out.toml"))
            .unwrap_or_else(|d| panic!("{toml}\n{d:#?}"));
        assert_eq!(cfg.jobs.len(), 2);
        let j = &cfg.jobs[0];
        assert_eq!(
            j.command,
            "printf '%s' 'line%1\nline 2\n' | echo \"$X\" '\\\\'"
        );
        assert_eq!(j.env["X"], "q\"uote \\ back ☃");
        assert_eq!(j.env["WEIRD KEY"], "1");
        assert_eq!(j.shell, "/bin/bash");
        assert_eq!(j.description.as_deref(), Some("say \"hi\""));
        assert_eq!(cfg.jobs[1].timezone_name, "America/New_York");
        assert_eq!(j.mailto, ["a@b"]);
        assert_eq!(j.mail_on, rea_core::job::MailOn::Output);
        assert_eq!(j.user, None);
        assert!(
            toml.contains("[defaults]\ntimezone = \"UTC\"\nshell = \"/bin/bash\"\nmailto = [\"a@b\"]   # MAILTO\nmail_on = \"output\"   # as cron: mail whenever a job prints something\n"),
            "{toml}"
        );
        assert!(
            toml.contains("\n# Jobs without `user` come from a user crontab"),
            "{toml}"
        );
        assert!(!toml.contains("Jobs run as their `user`"), "{toml}");
    }

    #[test]
    fn users_and_mail_render_as_fields() {
        let i = system_at(
            "s",
            "MAILFROM=cron@x\n0 1 * * * root a\nMAILTO=ops@x,dev@x\n0 2 * * * www-data b\n",
            false,
        );
        let toml = render(&i);
        let cfg = crate::parse(toml.as_bytes(), std::path::Path::new("out.toml"))
            .unwrap_or_else(|d| panic!("{toml}\n{d:#?}"));
        assert_eq!(cfg.jobs[0].user.as_deref(), Some("root"));
        assert!(cfg.jobs[0].mailto.is_empty());
        assert_eq!(cfg.jobs[1].user.as_deref(), Some("www-data"));
        assert_eq!(cfg.jobs[1].mailto, ["ops@x", "dev@x"]);
        assert_eq!(cfg.jobs[1].mail_on, rea_core::job::MailOn::Output);
        assert!(
            toml.contains("[jobs.a]\nschedule = \"0 1 * * *\"\ncommand = \"a\"\nuser = \"root\"\n# MAILFROM=\"cron@x\"   (not converted; see the import warnings)\n"),
            "{toml}"
        );
        assert!(
            toml.contains("user = \"www-data\"\nmailto = [\"ops@x\", \"dev@x\"]   # MAILTO\n"),
            "{toml}"
        );
        assert!(
            toml.contains("# Jobs run as their `user` (root, www-data) with its groups"),
            "{toml}"
        );
        assert!(!toml.contains("Jobs without `user`"), "{toml}");
        assert!(!toml.contains("not supported"), "{toml}");
        // Shared by every job: [defaults].
        let toml = render(&system_at(
            "s",
            "MAILTO=o@x\n@daily root a\n@daily root b\n",
            false,
        ));
        assert!(
            toml.contains("[defaults]\ntimezone = \"UTC\"\nuser = \"root\"\nmailto = [\"o@x\"]   # MAILTO\nmail_on = \"output\""),
            "{toml}"
        );
        assert!(!toml.contains("\nuser = \"root\"\n\n"), "{toml}");
        assert_eq!(toml.matches("user = ").count(), 1, "{toml}");
    }

    #[test]
    fn header_comment_lines_are_short() {
        let i = system_at("s", "@daily root a\n", false);
        for line in render(&i).lines().take_while(|l| l.starts_with('#')) {
            assert!(line.chars().count() <= 78, "{line:?}");
        }
    }

    #[test]
    fn shared_settings_go_to_defaults() {
        let i = user("PATH=/p\nA=1\n@daily a\nA=2\n@daily b\n");
        let toml = render(&i);
        assert!(
            toml.contains("[defaults]\ntimezone = \"UTC\"\nenv = { PATH = \"/p\" }\n"),
            "{toml}"
        );
        assert!(
            toml.contains(
                "[jobs.a]\nschedule = \"@daily\"\ncommand = \"a\"\nenv = { A = \"1\" }\n"
            ),
            "{toml}"
        );
    }
}
