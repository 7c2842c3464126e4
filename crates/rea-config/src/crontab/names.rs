//! A readable job name from a crontab command: the program that does the
//! work, not the wrapper around it (`nice`, `flock`, `cd … &&`, `bash -c`).

use std::collections::HashSet;

/// Programs that only check or prepare something; the job is named after
/// what comes next.
pub(super) const GUARDS: [&str; 12] = [
    "test", "[", "[[", "cd", "true", "false", ":", "sleep", "command", "type", "which", "exit",
];
/// Programs that run the next word as the command.
pub(super) const WRAPPERS: [&str; 12] = [
    "sudo", "nice", "ionice", "nohup", "exec", "env", "time", "timeout", "flock", "chronic",
    "cronic", "run-one",
];
/// Programs whose name alone says little about the job (a crontab has
/// several `echo`s and `curl`s): the job is named after their first
/// arguments too (`echo-hello`, `curl-backup`, `systemctl-restart-nginx`).
pub(super) const GENERIC: [&str; 24] = [
    "echo",
    "printf",
    "date",
    "touch",
    "rm",
    "find",
    "curl",
    "wget",
    "cp",
    "mv",
    "mkdir",
    "cat",
    "tar",
    "rsync",
    "logger",
    "kill",
    "pkill",
    "killall",
    "systemctl",
    "service",
    "docker",
    "podman",
    "wall",
    "truncate",
];
pub(super) const INTERPRETERS: [&str; 10] = [
    "sh", "bash", "dash", "zsh", "python", "python3", "perl", "ruby", "php", "node",
];
/// Shell words that separate commands like operators do.
pub(super) const RESERVED: [&str; 14] = [
    "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "case",
    "esac",
];

#[derive(Debug, PartialEq)]
pub(super) enum Tok {
    Word(String),
    /// `&&`, `||`, `;`, `&`, `(`, `)`, newline: a new command starts.
    Sep,
    /// `|`: the next command is a later pipeline stage.
    Pipe,
}

/// A rough shell tokenizer, enough to name jobs: quotes respected,
/// redirections and their targets dropped.
pub(super) fn shell_tokens(cmd: &str) -> Vec<Tok> {
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
pub(super) fn name_of(words: &[String]) -> Option<String> {
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
    if GENERIC.contains(&program.as_str()) {
        return Some(qualified(&program, args));
    }
    Some(strip_extension(&program))
}

/// `program` and its first two arguments that are not options, each cut to
/// its last path or URL segment without an extension: `echo-hello`,
/// `curl-backup` (for `https://example.com/cron/backup.php`).
fn qualified(program: &str, args: &[String]) -> String {
    let mut parts = vec![program.to_string()];
    for arg in args
        .iter()
        .filter(|a| !a.starts_with('-') && !a.starts_with("/dev/"))
        .take(2)
    {
        let last = arg
            .trim_end_matches('/')
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or(arg);
        let part = sanitize(&strip_extension(last));
        if !part.is_empty() {
            parts.push(part);
        }
    }
    parts.join("-")
}

pub(super) fn strip_extension(name: &str) -> String {
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
pub(super) fn sanitize(raw: &str) -> String {
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
