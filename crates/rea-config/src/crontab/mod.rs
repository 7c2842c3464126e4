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
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the types, a file's conversion line by line, comments → descriptions |
//! | `lines.rs` | one line: an assignment or an entry, `%` and stdin |
//! | `names.rs` | a job's name from its command |
//! | `detect.rs` | user or system crontab |
//! | `render.rs` | the job file written out |

use std::collections::{BTreeMap, HashSet};

use rea_core::schedule::Schedule;

use crate::{Diagnostic, Severity};

mod detect;
mod lines;
mod names;
mod render;

pub use detect::{looks_like_system, plausible_user};
pub use lines::split_percent;
pub use names::{derive_name, unique_name};
pub use render::{command_with_stdin, render, shell_quote, toml_string};

use lines::{assign, build_job, parse_assignment, parse_entry, Assignment};

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
    /// What PAM's pam_env gives cron's jobs on this machine (Debian's
    /// /etc/pam.d/cron: /etc/environment and the locale of
    /// /etc/default/locale), read by the caller. rea opens no PAM session,
    /// so the header says which variables the jobs lose.
    pub pam_env: BTreeMap<String, String>,
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
    /// `MAILTO` in force for this entry; empty for `""` (no mail). Without
    /// a `MAILTO` above it, the job's user, as cron mails the crontab's
    /// owner (empty when the user is unknown: see [`render`]'s header).
    pub mailto: Vec<String>,
    /// `mailto` is the job's user, for want of a `MAILTO`.
    pub mailto_is_user: bool,
    /// Mail settings rea has no field for (`MAILFROM`, ..., and a `MAILTO`
    /// rea cannot use), kept as comments.
    pub mail: BTreeMap<String, String>,
    pub enabled: bool,
    /// False when the command puts a process in the background (`cmd &`):
    /// cron lets it outlive the line, rea would stop it with the run.
    pub kill_stragglers: bool,
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
    /// [`Options::pam_env`], for the header.
    pub pam_env: BTreeMap<String, String>,
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
        pam_env: options.pam_env.clone(),
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
    /// A `MAILTO` was set above (even `""`, or one rea cannot use).
    mailto_set: bool,
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

#[cfg(test)]
mod tests;
