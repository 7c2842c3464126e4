//! User or system crontab: in a system crontab, field 6 is always a user
//! name.

use super::lines::token;
use super::*;

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
