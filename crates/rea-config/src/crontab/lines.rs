//! One crontab line: an environment assignment (`NAME = value`, as
//! cronie's `env.c` reads it) or an entry (time fields or a macro, the user
//! in a system crontab, the command with its `%` input).

use rea_core::schedule::Schedule;

use super::*;

#[derive(Debug, PartialEq)]
pub(super) enum Assignment {
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
pub(super) fn parse_assignment(line: &str) -> Assignment {
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

pub(super) fn assign(
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
            state.mailto_set = true;
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
pub(super) fn mail_addresses(value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for addr in value.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if addr.contains(char::is_whitespace) || addr.starts_with('-') || addr.contains('\0') {
            return Err(addr.to_string());
        }
        out.push(addr.to_string());
    }
    Ok(out)
}

#[derive(Debug, PartialEq)]
pub(super) struct Entry {
    pub(super) schedule: String,
    pub(super) user: Option<String>,
    /// The rest of the line, untouched.
    pub(super) raw_command: String,
    /// A macro written in another case than cron accepts (`@Daily`).
    pub(super) macro_case: Option<String>,
}

/// Splits off one whitespace-separated token (cron separates fields with
/// spaces and tabs); `s` has no leading whitespace.
pub(super) fn token(s: &str) -> Option<(&str, &str)> {
    if s.is_empty() {
        return None;
    }
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    Some((&s[..end], s[end..].trim_start_matches([' ', '\t'])))
}

type EntryError = (String, Option<String>);

pub(super) fn parse_entry(line: &str, format: Format) -> Result<Entry, EntryError> {
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
pub(super) fn build_job(
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
    let parsed = Schedule::parse(&entry.schedule).ok();
    for w in parsed.iter().flat_map(Schedule::warnings) {
        out.diagnostics.push(warning(
            file,
            n,
            format!("schedule {:?}: {}", entry.schedule, w.message),
            w.hint.clone(),
        ));
    }
    let never = parsed.is_some_and(|s| {
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
    let backgrounds = backgrounds_a_process(&command);
    if backgrounds {
        out.diagnostics.push(warning(
            file,
            n,
            "the command puts a process in the background (&), which cron lets outlive the line; converted with kill_stragglers = false so rea does not stop it when the line's shell exits".to_string(),
            Some("rea cannot time out or stop what such a run leaves running: if it is meant to finish, drop the & and kill_stragglers = false".to_string()),
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
    // A command that names nothing (`true`, a lone guard) is named after
    // its line, which the `# FILE:LINE` comment above the job shows.
    let derived = derive_name(&command);
    let derived = if derived == "job" {
        format!("line-{n}")
    } else {
        derived
    };
    let name = unique_name(&derived, names);
    let user = entry.user.or_else(|| options.owner.clone());
    let (mailto, mailto_is_user) = match &user {
        Some(u) if !state.mailto_set => (vec![u.clone()], true),
        _ => (state.mailto.clone(), false),
    };
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
        mailto,
        mailto_is_user,
        user,
        mail: state.mail.clone(),
        enabled: true,
        kill_stragglers: !backgrounds,
    }
}

/// Whether a shell command line uses `&` as the background operator (not
/// `&&`, `|&` or a redirection like `2>&1`, `&>`, `>&`, nor quoted,
/// escaped or in a comment).
pub(super) fn backgrounds_a_process(command: &str) -> bool {
    let chars: Vec<char> = command.chars().collect();
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                }
            }
            Some(_) => match c {
                '\\' => i += 1,
                '"' => quote = None,
                _ => {}
            },
            None => match c {
                '\\' => i += 1,
                '\'' | '"' => quote = Some(c),
                // A comment starts at a word's start.
                '#' if i == 0 || chars[i - 1].is_whitespace() => return false,
                '&' => {
                    let prev = if i > 0 { chars[i - 1] } else { ' ' };
                    let next = chars.get(i + 1).copied().unwrap_or(' ');
                    if next == '&' {
                        i += 1;
                    } else if !matches!(prev, '>' | '<' | '|') && next != '>' {
                        return true;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    false
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
pub(super) fn stdin_text(input: &str) -> Option<String> {
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
