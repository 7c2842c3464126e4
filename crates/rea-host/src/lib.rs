//! Facts about the machine rea runs on, that no job file can say itself:
//! the user database, resource limits, where `sendmail` is, the host's
//! name, the state directory (its files, its lock, its control socket's
//! path) and systemd's readiness protocol. Knows nothing of jobs, the
//! engine or the daemon's loop: `rea-exec`, `rea-proto`, `rea-daemon` and
//! the CLI all ask it.
//!
//! | module | owns |
//! |---|---|
//! | `user` | the user database: lookups, groups, who we are |
//! | `account` | whether an account may run jobs today (expired, locked), from the shadow file |
//! | `limits` | the open-file limit raised for the daemon, restored for jobs |
//! | `state_dir` | where a daemon keeps its files; the one-daemon lock |
//! | `notify` | `sd_notify` datagrams for `Type=notify` units |
//! | `cgroup` | where cgroup v2 is mounted, our cgroup, its controllers |

use std::path::{Path, PathBuf};

pub mod account;
pub mod cgroup;
pub mod limits;
pub mod notify;
pub mod state_dir;
pub mod user;

/// Where cron (and every MTA package) puts sendmail.
const SENDMAIL: &[&str] = &["/usr/sbin/sendmail", "/usr/lib/sendmail"];

/// The sendmail program, if one is installed.
pub fn sendmail() -> Option<PathBuf> {
    SENDMAIL
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .map(Path::to_path_buf)
}

/// The places `sendmail` is looked for, for messages.
pub fn sendmail_places() -> String {
    SENDMAIL.join(" or ")
}

/// The machine's host name, for mail subjects.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}
