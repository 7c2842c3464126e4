//! Where a daemon keeps its files (history log, control socket, lock,
//! paused set), and the lock that allows one daemon per directory.
//!
//! Resolution order: `--state-dir`, `$REA_STATE_DIR` (both arrive through
//! clap), `$XDG_STATE_HOME/rea`, `$HOME/.local/state/rea`, and `/var/lib/rea`
//! for root.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The state directory to use, from the command line or the environment.
pub(crate) fn resolve(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/rea"));
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("rea"));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home).join(".local/state/rea"));
    }
    Err("cannot choose a state directory: pass --state-dir DIR or set REA_STATE_DIR".into())
}

/// Creates the directory (0700) if needed. An existing directory keeps its
/// mode but must not be writable by others.
pub(crate) fn ensure(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
    }
    let meta = fs::metadata(dir)
        .map_err(|e| format!("cannot use the state directory {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "the state directory {} is not a directory",
            dir.display()
        ));
    }
    if meta.permissions().mode() & 0o002 != 0 {
        return Err(format!(
            "the state directory {} is writable by everyone; fix it with: chmod o-w {}",
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Held for the daemon's lifetime; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct Lock {
    _file: File,
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another daemon holds it; its pid if it wrote one.
    Held {
        pid: Option<u32>,
        path: PathBuf,
    },
    Io(String),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { pid, path } => write!(
                f,
                "another rea daemon{} holds the lock {}",
                pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                path.display()
            ),
            LockError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for LockError {}

/// Takes `<dir>/rea.lock` (flock, non-blocking) and writes our pid into it.
/// The kernel releases a flock when its holder dies, so a daemon killed with
/// SIGKILL never leaves a stale lock behind.
pub(crate) fn lock(dir: &Path) -> Result<Lock, LockError> {
    let path = dir.join("rea.lock");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| LockError::Io(format!("cannot open the lock file {}: {e}", path.display())))?;
    if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        return Err(LockError::Held {
            pid: text.trim().parse().ok(),
            path,
        });
    }
    let pid = std::process::id();
    let written = file
        .set_len(0)
        .and_then(|_| file.seek(SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{pid}"));
    written.map_err(|e| {
        LockError::Io(format!(
            "cannot write the lock file {}: {e}",
            path.display()
        ))
    })?;
    Ok(Lock { _file: file })
}

/// The pid of the daemon holding `dir`'s lock, if one does.
pub(crate) fn holder(dir: &Path) -> Option<u32> {
    let path = dir.join("rea.lock");
    let mut file = File::open(&path).ok()?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => None,
        Err(_) => {
            let mut text = String::new();
            file.read_to_string(&mut text).ok()?;
            text.trim().parse().ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        match lock(dir.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("second lock must fail, got {other:?}"),
        }
        assert_eq!(holder(dir.path()), Some(std::process::id()));
        drop(held);
        assert_eq!(holder(dir.path()), None);
        assert!(lock(dir.path()).is_ok());
    }
}
