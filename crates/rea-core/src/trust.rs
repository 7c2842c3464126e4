//! Whom rea trusts with what it runs. Whoever can change the job file, the
//! state directory (one-shots, the socket) or a directory above them can
//! make rea run commands as its own user (root, for a system daemon); so
//! those must be owned by root or by rea's user and writable by nobody
//! else. A directory others may write is tolerated only with the sticky bit
//! (as `/tmp` has it): then they cannot replace an entry they do not own.
//!
//! Pure: the facts (owner, mode bits, who rea runs as) are passed in; the
//! readers and the program gather them.

use std::fmt;

/// Why a path is not to be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distrust {
    /// Owned by this uid, which is neither root nor rea's user.
    Owner(u32),
    /// Writable by group and/or others (the mode bits).
    Writable { mode: u32 },
}

impl Distrust {
    /// "group", "others" or "group and others".
    pub fn who(mode: u32) -> &'static str {
        match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, false) => "group",
            (false, true) => "others",
            _ => "group and others",
        }
    }
}

impl fmt::Display for Distrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Distrust::Owner(uid) => write!(f, "is owned by uid {uid}"),
            Distrust::Writable { mode } => {
                write!(
                    f,
                    "is writable by {} (mode {:04o})",
                    Distrust::who(mode),
                    mode & 0o7777
                )
            }
        }
    }
}

/// A file that decides what runs as `me` (the job file, the journal):
/// owned by root or `me`, writable by its owner only.
pub fn file(uid: u32, mode: u32, me: u32) -> Option<Distrust> {
    if uid != 0 && uid != me {
        return Some(Distrust::Owner(uid));
    }
    (mode & 0o022 != 0).then_some(Distrust::Writable { mode })
}

/// A directory above such a file: owned by root or `me`, and writable by
/// nobody else unless it is sticky.
pub fn directory(uid: u32, mode: u32, me: u32) -> Option<Distrust> {
    if uid != 0 && uid != me {
        return Some(Distrust::Owner(uid));
    }
    let sticky = mode & 0o1000 != 0;
    (mode & 0o022 != 0 && !sticky).then_some(Distrust::Writable { mode })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_modes() {
        let me = 1000;
        assert_eq!(file(0, 0o644, me), None);
        assert_eq!(file(me, 0o600, me), None);
        assert_eq!(file(1001, 0o600, me), Some(Distrust::Owner(1001)));
        assert_eq!(file(0, 0o664, me), Some(Distrust::Writable { mode: 0o664 }));
        assert_eq!(directory(0, 0o755, me), None);
        assert_eq!(directory(0, 0o1777, me), None, "sticky, like /tmp");
        assert_eq!(
            directory(0, 0o777, me),
            Some(Distrust::Writable { mode: 0o777 })
        );
        assert_eq!(
            directory(0, 0o775, me),
            Some(Distrust::Writable { mode: 0o775 })
        );
        assert_eq!(directory(1001, 0o700, me), Some(Distrust::Owner(1001)));
        assert_eq!(
            Distrust::Writable { mode: 0o40777 }.to_string(),
            "is writable by group and others (mode 0777)"
        );
    }
}
