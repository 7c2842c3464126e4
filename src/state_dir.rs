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
pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf, String> {
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
pub fn ensure(dir: &Path) -> Result<(), String> {
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
pub struct Lock {
    _file: File,
    pub path: PathBuf,
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another daemon holds it; its pid if it wrote one.
    Held {
        pid: Option<u32>,
        path: PathBuf,
    },
    Io(String),
}

/// Takes `<dir>/rea.lock` (flock, non-blocking) and writes our pid into it.
/// The kernel releases a flock when its holder dies, so a daemon killed with
/// SIGKILL never leaves a stale lock behind.
pub fn lock(dir: &Path) -> Result<Lock, LockError> {
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
    Ok(Lock { _file: file, path })
}

/// The pid of the daemon holding `dir`'s lock, if one does.
pub fn holder(dir: &Path) -> Option<u32> {
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

/// The paused set survives restarts in `<dir>/paused.json` (a JSON array of
/// job names), replaced atomically on every change.
pub fn load_paused(dir: &Path) -> Result<std::collections::BTreeSet<String>, String> {
    let path = dir.join("paused.json");
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is unreadable ({e}); remove it to resume every job",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes the paused set (temp file, fsync, rename: never a torn file).
pub fn save_paused(dir: &Path, paused: &std::collections::BTreeSet<String>) -> Result<(), String> {
    let path = dir.join("paused.json");
    let tmp = dir.join(".paused.json.tmp");
    let text = serde_json::to_vec(paused).map_err(|e| e.to_string())?;
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot save the paused jobs to {}: {e}", path.display()))
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

    #[test]
    fn paused_set_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_paused(dir.path()).unwrap().is_empty());
        let set: std::collections::BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        save_paused(dir.path(), &set).unwrap();
        assert_eq!(load_paused(dir.path()).unwrap(), set);
        fs::write(dir.path().join("paused.json"), "garbage").unwrap();
        assert!(load_paused(dir.path()).unwrap_err().contains("remove it"));
    }
}
