//! The user database, as cron uses it to run a job as a user: lookups by
//! name and uid, a user's groups (computed before a fork, so the child only
//! calls `setgroups`), and who this process is.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// An entry of the user database, as cron uses it to run a job as a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: PathBuf,
}

/// A user's groups (primary and supplementary) from the group database, as
/// `initgroups` would set them. Looked up in the daemon, before a fork:
/// the child only calls `setgroups` (async-signal-safe) with this list,
/// whereas `initgroups` reads /etc/group and NSS modules, which may take
/// locks or allocate and is not safe between fork and exec.
pub fn groups(user: &User) -> Result<Vec<libc::gid_t>, String> {
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

/// The daemon's own user, looked up once: whose HOME, USER and LOGNAME
/// its jobs without `user` get, as cron gives a crontab's owner. None if the
/// user database does not know our uid (a container's arbitrary uid).
pub fn own_user() -> Option<&'static User> {
    static OWN: std::sync::OnceLock<Option<User>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| user_by_uid(own_uid())).as_ref()
}

/// The daemon's effective uid, read once (it never changes it).
pub fn own_uid() -> u32 {
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Whether this process runs as root (and may switch users).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Our own user name, if the user database knows it.
pub fn current_user_name() -> Option<String> {
    user_by_uid(rustix::process::geteuid().as_raw()).map(|u| u.name)
}

/// Looks a user up by name (getpwnam_r).
pub fn user(name: &str) -> Result<User, String> {
    let c = CString::new(name).map_err(|_| format!("invalid user name {name:?}"))?;
    lookup(&|pwd, buf, len, out| {
        // SAFETY: `c` is a NUL-terminated string that outlives the call;
        // `lookup` passes a `passwd`, a buffer of `len` bytes and an out
        // pointer that are all valid for writes.
        unsafe { libc::getpwnam_r(c.as_ptr(), pwd, buf, len, out) }
    })
    .ok_or_else(|| format!("no user {name:?} on this machine"))
}

pub fn user_by_uid(uid: u32) -> Option<User> {
    lookup(&|pwd, buf, len, out| {
        // SAFETY: `lookup` passes a `passwd`, a buffer of `len` bytes and an
        // out pointer that are all valid for writes.
        unsafe { libc::getpwuid_r(uid, pwd, buf, len, out) }
    })
}

/// The id of the group `name` (getgrnam_r), or why not.
pub fn group_id(name: &str) -> Result<u32, String> {
    let c = CString::new(name).map_err(|_| format!("invalid group name {name:?}"))?;
    let mut size = 1024usize;
    loop {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: group is plain data; getgrnam_r fills it, pointing its
        // strings into `buf`; only the gid is read, before `buf` goes.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `c` is NUL-terminated; `grp`, `buf` (of `buf.len()`
        // bytes) and `out` are valid for writes for the whole call.
        let rc = unsafe {
            libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out)
        };
        if rc == libc::ERANGE && size < (1 << 20) {
            size *= 4;
            continue;
        }
        if rc != 0 || out.is_null() {
            return Err(format!("no group {name:?} on this machine"));
        }
        return Ok(grp.gr_gid);
    }
}

/// Whether `user` is a member of the group `gid` (as its primary group or
/// a supplementary one).
pub fn in_group(user: &User, gid: u32) -> bool {
    user.gid == gid || groups(user).is_ok_and(|g| g.contains(&gid))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_found_by_name_and_root_is_in_its_own() {
        let root = user("root").expect("root");
        let gid = group_id("root").expect("group root");
        assert_eq!(gid, 0);
        assert!(in_group(&root, gid));
        assert!(group_id("no-such-group-rea-test")
            .unwrap_err()
            .contains("no group"));
    }

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
