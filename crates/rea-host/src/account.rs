//! Whether a user's account may run jobs today, as PAM's account stage
//! (pam_unix's) decides it for cron's jobs: the account exists, has not
//! expired (`sp_expire`, or a password left inactive past `sp_inact`),
//! and is not locked. Read from `/etc/shadow` (only root can), parsed
//! again only when the file changes (its mtime, size and inode), so a
//! check before each run costs a `stat`.
//!
//! "Locked" is an account whose password was set and then locked
//! (`usermod -L`, `passwd -l`: a `!` before a password hash). An account
//! that never had a password (`!`, `!!`, `*`, as `useradd` leaves system
//! and service accounts) is not locked: it cannot log in with a password,
//! and cron runs its jobs, so rea does too. A user the user database
//! knows but `/etc/shadow` does not (a directory service) is not checked
//! further, as pam_unix does not either.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The shadow file of this machine.
pub const SHADOW: &str = "/etc/shadow";

/// Why an account may not run jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not in the user database.
    NoAccount(String),
    /// Expired on that day (days since the epoch, `chage -E`).
    Expired { user: String, day: i64 },
    /// Its password has been inactive too long (`chage -I`).
    Inactive { user: String },
    /// Its password is locked (`usermod -L`, `passwd -l`).
    Locked(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoAccount(user) => write!(f, "there is no account {user:?} on this machine"),
            Refusal::Expired { user, day } => {
                let date = chrono::DateTime::from_timestamp(day.saturating_mul(86_400), 0)
                    .map(|d| d.date_naive().to_string())
                    .unwrap_or_else(|| format!("day {day}"));
                write!(f, "the account {user:?} expired on {date}")
            }
            Refusal::Inactive { user } => write!(
                f,
                "the account {user:?} is expired: its password has been inactive too long"
            ),
            Refusal::Locked(user) => write!(f, "the account {user:?} is locked"),
        }
    }
}

/// One account's entry, as far as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// `sp_expire`: the day (since the epoch) it expires; None: never.
    expire: Option<i64>,
    /// The day its password becomes inactive (`sp_lstchg + sp_max +
    /// sp_inact`), when all three are set.
    inactive: Option<i64>,
    locked: bool,
}

/// What identifies a version of the shadow file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime: (i64, i64),
    len: u64,
    ino: u64,
}

/// The shadow file, parsed once per version.
#[derive(Debug)]
pub struct Accounts {
    path: PathBuf,
    cache: Option<(Stamp, HashMap<String, Entry>)>,
}

impl Default for Accounts {
    fn default() -> Accounts {
        Accounts::at(Path::new(SHADOW))
    }
}

impl Accounts {
    /// The accounts of the shadow file `path` (tests; else [`SHADOW`]).
    pub fn at(path: &Path) -> Accounts {
        Accounts {
            path: path.to_path_buf(),
            cache: None,
        }
    }

    /// Whether `user`'s account may run a job on `today` (days since the
    /// epoch, UTC, as pam_unix counts them).
    pub fn check(&mut self, user: &str, today: i64) -> Result<(), Refusal> {
        if crate::user::user(user).is_err() {
            return Err(Refusal::NoAccount(user.to_string()));
        }
        let Some(entry) = self.entry(user) else {
            return Ok(());
        };
        if entry.expire.is_some_and(|day| today >= day) {
            return Err(Refusal::Expired {
                user: user.to_string(),
                day: entry.expire.unwrap_or_default(),
            });
        }
        if entry.inactive.is_some_and(|day| today >= day) {
            return Err(Refusal::Inactive {
                user: user.to_string(),
            });
        }
        if entry.locked {
            return Err(Refusal::Locked(user.to_string()));
        }
        Ok(())
    }

    /// `user`'s entry in the current version of the file (re-read if it
    /// changed); None if it has none or the file cannot be read.
    fn entry(&mut self, user: &str) -> Option<Entry> {
        let meta = std::fs::metadata(&self.path).ok()?;
        let stamp = Stamp {
            mtime: (meta.mtime(), meta.mtime_nsec()),
            len: meta.len(),
            ino: meta.ino(),
        };
        if self.cache.as_ref().is_none_or(|(s, _)| *s != stamp) {
            let text = std::fs::read_to_string(&self.path).ok()?;
            self.cache = Some((stamp, parse(&text)));
        }
        self.cache.as_ref()?.1.get(user).cloned()
    }
}

/// `name:password:lastchg:min:max:warn:inactive:expire:reserved` lines.
fn parse(text: &str) -> HashMap<String, Entry> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 8 || fields[0].is_empty() {
            continue;
        }
        let day = |i: usize| fields[i].trim().parse::<i64>().ok().filter(|d| *d >= 0);
        let inactive = match (day(2), day(4), day(6)) {
            (Some(last), Some(max), Some(inact)) if last > 0 => Some(last + max + inact),
            _ => None,
        };
        out.insert(
            fields[0].to_string(),
            Entry {
                expire: day(7),
                inactive,
                locked: is_locked(fields[1]),
            },
        );
    }
    out
}

/// A password set, then locked: `!` before a hash. Not `!`, `!!`, `*` or
/// `!*` (never had one).
fn is_locked(password: &str) -> bool {
    let rest = password.trim_start_matches('!');
    rest.len() < password.len() && !rest.is_empty() && !rest.starts_with('*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_means_a_password_set_then_locked() {
        for (password, locked) in [
            ("!$6$salt$hash", true),
            ("!!$y$j9T$abc", true),
            ("$6$salt$hash", false),
            ("!", false),
            ("!!", false),
            ("*", false),
            ("!*", false),
            ("", false),
        ] {
            assert_eq!(is_locked(password), locked, "{password:?}");
        }
    }

    #[test]
    fn expiry_and_inactivity_as_pam_unix_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let shadow = dir.path().join("shadow");
        // root exists on every machine; its entry here is the test's.
        std::fs::write(&shadow, "root:*:19000:0:99999:7::20000:\n").unwrap();
        let mut a = Accounts::at(&shadow);
        assert_eq!(a.check("root", 19_999), Ok(()));
        assert_eq!(
            a.check("root", 20_000),
            Err(Refusal::Expired {
                user: "root".into(),
                day: 20_000
            })
        );
        assert_eq!(
            a.check("root", 20_000).unwrap_err().to_string(),
            "the account \"root\" expired on 2024-10-04"
        );
        // `chage -E 0`: expired since the epoch. A new version of the
        // file is read again (a different size).
        std::fs::write(&shadow, "root:*:19000:0:99999:7::0:\n").unwrap();
        assert!(matches!(
            a.check("root", 1),
            Err(Refusal::Expired { day: 0, .. })
        ));
        // Changed 19000, at most 10 days, then 5 inactive: from 19015.
        std::fs::write(&shadow, "root:$6$x$y:19000:0:10:7:5::\n").unwrap();
        assert_eq!(a.check("root", 19_014), Ok(()));
        assert!(matches!(
            a.check("root", 19_015),
            Err(Refusal::Inactive { .. })
        ));
        std::fs::write(&shadow, "root:!$6$x$y:19000:0:99999:7:::\n").unwrap();
        assert_eq!(a.check("root", 19_014), Err(Refusal::Locked("root".into())));
        assert_eq!(
            a.check("rea-nobody-such-user", 19_014),
            Err(Refusal::NoAccount("rea-nobody-such-user".into()))
        );
        // Not in the file: not checked further.
        std::fs::write(&shadow, "").unwrap();
        assert_eq!(a.check("root", 30_000), Ok(()));
    }
}
