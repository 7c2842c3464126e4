//! Facts about the machine that a job file depends on but cannot say
//! itself: who we run as, the user database, where `sendmail` is. Kept apart
//! from `rea_config` (which reads only the job file) so validation of the
//! file stays pure and these lookups are explicit: [`load`] is the job file
//! as `rea_config` reads it plus these checks, done once per load.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use rea_config::{Config, Diagnostic};

/// An entry of the user database, as cron uses it to run a job as a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) home: PathBuf,
    pub(crate) shell: PathBuf,
}

/// A user's groups (primary and supplementary) from the group database, as
/// `initgroups` would set them. Looked up in the daemon, before a fork:
/// the child only calls `setgroups` (async-signal-safe) with this list,
/// whereas `initgroups` reads /etc/group and NSS modules, which may take
/// locks or allocate and is not safe between fork and exec.
pub(crate) fn groups(user: &User) -> Result<Vec<libc::gid_t>, String> {
    let name = CString::new(user.name.clone())
        .map_err(|_| format!("invalid user name {:?}", user.name))?;
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    for _ in 0..8 {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `name` is NUL-terminated and outlives the call; `groups`
        // has room for `n` entries, and `n` says so.
        let rc = unsafe {
            libc::getgrouplist(name.as_ptr(), user.gid as _, groups.as_mut_ptr(), &mut n)
        };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            return Ok(groups);
        }
        // Too small: `n` now holds the number needed.
        let needed = (n.max(0) as usize).max(groups.len() * 2);
        groups.resize(needed.min(1 << 16), 0);
    }
    Err(format!("cannot list the groups of user {:?}", user.name))
}

/// Raises the daemon's soft limit on open files to its hard limit: client
/// connections, history files and every run's pipes and pidfds must not run
/// out of descriptors at 1,024 (systemd's default soft limit).
/// Jobs get the original limit back ([`job_open_files`]), as systemd
/// recommends: programs that still use select(2) break above 1,024.
pub(crate) fn raise_open_files() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let original = getrlimit(Resource::Nofile);
    if let Some(soft) = original.current {
        let _ = JOB_OPEN_FILES.set(soft);
    }
    // "Unlimited" is not a value the kernel takes for open files (it caps at
    // fs.nr_open, 1,048,576 by default).
    let hard = original.maximum.unwrap_or(1 << 20);
    if original.current.is_some_and(|soft| soft < hard) {
        let raised = Rlimit {
            current: Some(hard),
            maximum: original.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// The soft open-file limit the daemon started with (unset: unlimited, or
/// [`raise_open_files`] was not called).
static JOB_OPEN_FILES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The soft open-file limit a job starts with: the daemon's before
/// [`raise_open_files`] raised it; `None` keeps the daemon's.
pub(crate) fn job_open_files() -> Option<u64> {
    JOB_OPEN_FILES.get().copied()
}

/// The daemon's own user, looked up once: whose HOME, USER and LOGNAME
/// its jobs without `user` get, as cron gives a crontab's owner. None if the
/// user database does not know our uid (a container's arbitrary uid).
pub(crate) fn own_user() -> Option<&'static User> {
    static OWN: std::sync::OnceLock<Option<User>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| user_by_uid(own_uid())).as_ref()
}

/// The daemon's effective uid, read once (it never changes it).
pub(crate) fn own_uid() -> u32 {
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Whether this process runs as root (and may switch users).
pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Our own user name, if the user database knows it.
pub(crate) fn current_user_name() -> Option<String> {
    user_by_uid(rustix::process::geteuid().as_raw()).map(|u| u.name)
}

/// Looks a user up by name (getpwnam_r).
pub(crate) fn user(name: &str) -> Result<User, String> {
    let c = CString::new(name).map_err(|_| format!("invalid user name {name:?}"))?;
    lookup(&|pwd, buf, len, out| {
        // SAFETY: `c` is a NUL-terminated string that outlives the call;
        // `lookup` passes a `passwd`, a buffer of `len` bytes and an out
        // pointer that are all valid for writes.
        unsafe { libc::getpwnam_r(c.as_ptr(), pwd, buf, len, out) }
    })
    .ok_or_else(|| format!("no user {name:?} on this machine"))
}

pub(crate) fn user_by_uid(uid: u32) -> Option<User> {
    lookup(&|pwd, buf, len, out| {
        // SAFETY: `lookup` passes a `passwd`, a buffer of `len` bytes and an
        // out pointer that are all valid for writes.
        unsafe { libc::getpwuid_r(uid, pwd, buf, len, out) }
    })
}

type PwCall<'a> =
    dyn Fn(*mut libc::passwd, *mut libc::c_char, usize, *mut *mut libc::passwd) -> i32 + 'a;

fn lookup(call: &PwCall) -> Option<User> {
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: passwd is plain data; getpw*_r fills it, pointing its
        // strings into `buf`, which outlives every read below.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc = call(&mut pwd, buf.as_mut_ptr(), buf.len(), &mut out);
        if rc == libc::ERANGE && size < (1 << 20) {
            size *= 4;
            continue;
        }
        if rc != 0 || out.is_null() {
            return None;
        }
        let text = |p: *const libc::c_char| -> String {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: non-null strings from getpw*_r are NUL-terminated in `buf`.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        return Some(User {
            name: text(pwd.pw_name),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            home: PathBuf::from(text(pwd.pw_dir)),
            shell: PathBuf::from(text(pwd.pw_shell)),
        });
    }
}

/// Where cron (and every MTA package) puts sendmail.
const SENDMAIL: &[&str] = &["/usr/sbin/sendmail", "/usr/lib/sendmail"];

/// The sendmail program, if one is installed.
pub(crate) fn sendmail() -> Option<PathBuf> {
    SENDMAIL
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .map(Path::to_path_buf)
}

/// The sendmail a job file uses: `[daemon] sendmail`, else the usual one.
pub(crate) fn sendmail_for(cfg: &Config) -> Option<PathBuf> {
    match &cfg.daemon.sendmail {
        Some(p) => p.exists().then(|| p.clone()),
        None => sendmail(),
    }
}

/// The places `sendmail` is looked for, for messages.
pub(crate) fn sendmail_places() -> String {
    SENDMAIL.join(" or ")
}

/// The machine's host name, for mail subjects.
pub(crate) fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// `cfg` checked against this machine for commands that only read the
/// schedule (`rea list`, `rea next`, offline `rea status`): the machine's
/// errors become warnings, so a CI runner or a workstation without a job's
/// `user` can still list the file, and one job's missing user does not hide
/// another job's next fire.
pub(crate) fn with_lenient_host_checks(mut cfg: Config) -> Result<Config, Vec<Diagnostic>> {
    let host = check(&cfg);
    cfg.warnings
        .extend(host.errors.into_iter().map(Diagnostic::warning));
    cfg.warnings.extend(host.warnings);
    Ok(cfg)
}

/// `cfg` checked against this machine: users must exist (and be
/// switchable to), `mailto` needs a sendmail (a warning). The machine's
/// warnings travel with the configuration.
pub(crate) fn with_host_checks(mut cfg: Config) -> Result<Config, Vec<Diagnostic>> {
    let host = check(&cfg);
    if host.errors.is_empty() {
        cfg.warnings.extend(host.warnings);
        Ok(cfg)
    } else {
        Err(host.errors)
    }
}

/// What the machine says about a valid job file.
#[derive(Debug, Default)]
pub(crate) struct Check {
    /// The file cannot work here (a user that does not exist, or that this
    /// daemon may not switch to).
    pub(crate) errors: Vec<Diagnostic>,
    /// It works, but not entirely as written (mail without sendmail).
    pub(crate) warnings: Vec<Diagnostic>,
}

/// Checks the job file against this machine: `user` must exist, and unless
/// we are root it must be our own user; `mailto` needs a sendmail.
pub(crate) fn check(cfg: &Config) -> Check {
    let mut out = Check::default();
    let root = is_root();
    let me = current_user_name();
    let mut mail_warned = false;
    for job in &cfg.jobs {
        if let Some(name) = &job.user {
            match user(name) {
                Err(e) => out.errors.push(cfg.diagnostic_at(
                    &job.name,
                    "user",
                    e,
                    Some("create the user, or fix the name (see /etc/passwd)".into()),
                )),
                Ok(_) if !root && me.as_deref() != Some(name.as_str()) => {
                    out.errors.push(cfg.diagnostic_at(
                        &job.name,
                        "user",
                        format!(
                            "job {:?} runs as {name:?}, but rea runs as {:?} and only root can switch users",
                            job.name,
                            me.clone().unwrap_or_else(|| "an unknown user".into())
                        ),
                        Some("run the daemon as root, or remove \"user\"".into()),
                    ))
                }
                Ok(_) => {}
            }
        }
        if !job.extras().mailto.is_empty() && !mail_warned && sendmail_for(cfg).is_none() {
            mail_warned = true;
            out.warnings.push(cfg.diagnostic_at(
                &job.name,
                "mailto",
                format!(
                    "job {:?} mails its output, but there is no sendmail ({}): no mail will be sent",
                    job.name,
                    cfg.daemon
                        .sendmail
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(sendmail_places)
                ),
                Some("install a mail transfer agent (e.g. msmtp-mta, postfix, exim4) or remove \"mailto\"".into()),
            ).warning());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_exists_and_nobody_does_not_exist_twice() {
        let root = user("root").expect("root is in every user database");
        assert_eq!(root.uid, 0);
        assert!(user("no-such-user-rea-test")
            .unwrap_err()
            .contains("no user"));
        assert!(user("a\0b").is_err());
    }

    #[test]
    fn groups_include_the_primary_group_and_match_id() {
        for name in ["root", "nobody"] {
            let u = user(name).expect("in every user database");
            let groups = groups(&u).expect("groups");
            assert!(groups.contains(&u.gid), "{name}: {groups:?}");
            let out = std::process::Command::new("id")
                .args(["-G", name])
                .output()
                .expect("id -G");
            let mut want: Vec<u32> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect();
            let mut got: Vec<u32> = groups.clone();
            want.sort_unstable();
            want.dedup();
            got.sort_unstable();
            got.dedup();
            assert_eq!(got, want, "{name}");
        }
    }
}
