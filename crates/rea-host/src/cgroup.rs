//! The machine's cgroup v2 hierarchy as this process sees it: where it is
//! mounted (read from `/proc/self/mountinfo`, never assumed: a hybrid host
//! mounts it at `/sys/fs/cgroup/unified`), which cgroup this process is in
//! (`/proc/self/cgroup`), and which controllers a cgroup offers. Creating
//! and governing cgroups is `rea-exec`'s business, not this module's.

use std::path::{Path, PathBuf};

/// The v2 hierarchy and our place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Where the cgroup2 file system is mounted.
    pub mount: PathBuf,
    /// The directory of the cgroup this process is in.
    pub own: PathBuf,
}

/// Finds the v2 hierarchy and this process's cgroup in it; an error is a
/// sentence saying why there is none.
pub fn find() -> Result<Hierarchy, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let (root, mount) = v2_mount(&mountinfo)
        .ok_or_else(|| "no cgroup v2 hierarchy is mounted (cgroup2 file system)".to_string())?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let own = own_path(&cgroup).ok_or_else(|| {
        "this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)".to_string()
    })?;
    let own = own_dir(&mount, &root, &own).ok_or_else(|| {
        format!(
            "this process's cgroup {own} is outside the cgroup2 mount at {} (root {root})",
            mount.display()
        )
    })?;
    Ok(Hierarchy { mount, own })
}

/// The controllers a cgroup offers its children (`cgroup.controllers`).
pub fn controllers(dir: &Path) -> Vec<String> {
    words(&dir.join("cgroup.controllers"))
}

/// The controllers a cgroup has enabled for its children
/// (`cgroup.subtree_control`).
pub fn enabled(dir: &Path) -> Vec<String> {
    words(&dir.join("cgroup.subtree_control"))
}

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `(root within the hierarchy, mount point)` of the first cgroup2 mount.
/// A mountinfo line is `id parent major:minor root mountpoint options
/// [optional fields] - fstype source super-options`, with spaces and other
/// odd bytes in paths written as octal escapes (`\040`).
fn v2_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut fields = before.split_whitespace();
        let root = fields.nth(3)?;
        let mount = fields.next()?;
        Some((unescape(root), PathBuf::from(unescape(mount))))
    })
}

/// Undoes the kernel's octal escapes in mountinfo paths.
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path of the `0::` line (the v2 hierarchy's), without a
/// ` (deleted)` suffix.
fn own_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let path = l.strip_prefix("0::")?;
        Some(path.trim_end_matches(" (deleted)").to_string())
    })
}

/// The directory of cgroup `path` (as /proc/self/cgroup names it, relative
/// to our cgroup namespace) under a mount of the hierarchy's `root`.
fn own_dir(mount: &Path, root: &str, path: &str) -> Option<PathBuf> {
    let relative = if root == "/" {
        path
    } else {
        // The mount shows a subtree; our cgroup must be inside it.
        path.strip_prefix(root)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))?
    };
    let relative = relative.trim_start_matches('/');
    if relative.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if relative.is_empty() {
        mount.to_path_buf()
    } else {
        mount.join(relative)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";

    #[test]
    fn the_v2_mount_is_found_wherever_it_is() {
        assert_eq!(
            v2_mount(HYBRID),
            Some(("/".to_string(), PathBuf::from("/sys/fs/cgroup/unified")))
        );
        let odd = "50 1 0:40 / /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(
            v2_mount(odd).map(|(_, m)| m),
            Some(PathBuf::from("/mnt/my cgroups"))
        );
        assert_eq!(
            v2_mount("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            None
        );
    }

    #[test]
    fn our_cgroup_is_the_zero_line() {
        let text = "4:memory:/x\n0::/system.slice/rea.service\n";
        assert_eq!(own_path(text).as_deref(), Some("/system.slice/rea.service"));
        assert_eq!(own_path("0::/gone (deleted)\n").as_deref(), Some("/gone"));
        assert_eq!(own_path("4:memory:/x\n"), None);
        let mount = Path::new("/sys/fs/cgroup");
        assert_eq!(own_dir(mount, "/", "/"), Some(mount.to_path_buf()));
        assert_eq!(
            own_dir(mount, "/", "/system.slice/rea.service"),
            Some(mount.join("system.slice/rea.service"))
        );
        assert_eq!(
            own_dir(mount, "/lxc/c1", "/lxc/c1/init"),
            Some(mount.join("init"))
        );
        assert_eq!(own_dir(mount, "/lxc/c1", "/lxc/c2"), None);
        assert_eq!(own_dir(mount, "/", "/a/../b"), None);
    }
}
