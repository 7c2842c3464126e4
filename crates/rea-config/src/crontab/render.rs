//! The converted crontab written out as a job file: `[defaults]` factored
//! out, each job's comments above it, everything quoted for TOML.

use std::collections::BTreeMap;

use super::*;

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

pub(super) fn toml_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        toml_string(k)
    }
}

pub(super) fn inline_table(map: &BTreeMap<String, String>) -> String {
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

pub(super) fn toml_array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| toml_string(i)).collect();
    format!("[{}]", items.join(", "))
}

/// The comment after a job's `mailto`: where it came from.
fn mail_comment(j: &Job) -> &'static str {
    if j.mailto_is_user {
        "   # no MAILTO: cron mails the output to the job's user"
    } else {
        "   # MAILTO"
    }
}

/// The header's review notes: how the converted jobs differ from cron in
/// what rea does with users, directories and mail. Only what this file
/// contains is mentioned, and each sentence stays true of every job.
pub(super) fn header(import: &Import) -> String {
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
        "As under cron, a job runs in its user's home directory unless `dir` says otherwise (a job without `user`: the home of the user rea runs as).".to_string(),
    );
    if jobs.iter().any(|j| j.mailto_is_user) {
        notes.push(
            "Without MAILTO, cron mails a job's output to the user it runs as: so do these jobs (`mailto` = their user; the local mail system delivers it, or forwards it as /etc/aliases says). MAILTO=\"\" (no mail) is kept.".to_string(),
        );
    }
    if ownerless && jobs.iter().any(|j| j.mailto.is_empty()) {
        notes.push(
            "Jobs without `user` and without MAILTO send no mail: cron mailed the crontab's owner, whom a user crontab does not name (set `mailto`, or import with --owner NAME). Every run's output is kept in rea's history (`rea logs JOB`).".to_string(),
        );
    }
    notes.push(
        "cron runs jobs in a PAM session: on Debian its pam_env gives them the variables of /etc/environment and the locale of /etc/default/locale (LANG, LC_*). rea opens no PAM session: a job gets its user's HOME, USER, LOGNAME and SHELL, a PATH, rea's REA_* variables and its `env`, nothing else.".to_string(),
    );
    let mut out = String::new();
    for note in notes {
        out.push_str(&wrap_comment(&note, 78));
    }
    if !import.pam_env.is_empty() {
        out.push_str(&wrap_comment(
            "On this machine that environment is the line below; to keep it, add it to `env` in [defaults]:",
            78,
        ));
        out.push_str(&format!("#   env = {}\n", inline_table(&import.pam_env)));
    }
    out.push('\n');
    out
}

/// `text` as `# ` comment lines of at most `width` characters (longer words
/// stay whole).
pub(super) fn wrap_comment(text: &str, width: usize) -> String {
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
    let mailto = shared(&|j| {
        (!j.mailto.is_empty()).then(|| format!("{}{}", toml_array(&j.mailto), mail_comment(j)))
    });
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
        s.push_str(&format!("mailto = {m}\n"));
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
        if !j.kill_stragglers {
            s.push_str("kill_stragglers = false   # the command backgrounds a process (&)\n");
        }
        if user.is_none() {
            if let Some(u) = &j.user {
                s.push_str(&format!("user = {}\n", toml_string(u)));
            }
        }
        if mailto.is_none() && !j.mailto.is_empty() {
            s.push_str(&format!(
                "mailto = {}{}\n",
                toml_array(&j.mailto),
                mail_comment(j)
            ));
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
