//! Where a daemon keeps its files (history log, control socket, lock,
//! paused set), and the lock that allows one daemon per directory.
//!
//! Resolution order: `--state-dir`, `$REA_STATE_DIR` (both arrive through
//! clap), `$XDG_STATE_HOME/rea`, `$HOME/.local/state/rea`, and `/var/lib/rea`
//! for root.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The system daemon's state directory (root's default).
pub const SYSTEM: &str = "/var/lib/rea";

/// The control socket of a state directory (`rea.sock`).
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("rea.sock")
}

/// The state directory to use, from the command line or the environment.
pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if rustix::process::geteuid().is_root() {
        return Ok(PathBuf::from(SYSTEM));
    }
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("rea"));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home).join(".local/state/rea"));
    }
    Err("cannot choose a state directory: pass --state-dir DIR or set REA_STATE_DIR".into())
}

/// Creates the directory (0700) if needed, then makes sure it can be
/// trusted: whoever can write the state directory can plant one-shots that
/// run as rea's user, replace the control socket (and read what clients
/// send, secrets given with `rea submit --env`), or point files at others
/// through symlinks. So it must be owned by rea's user and writable by
/// nobody else, and no directory above it may be writable by others
/// (unless sticky, as `/tmp` is) or owned by anyone but root or rea's user.
pub fn ensure(dir: &Path) -> Result<(), String> {
    if fs::symlink_metadata(dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
    }
    let me = rustix::process::geteuid().as_raw();
    check(dir, |uid| uid == me)
}

/// What a client checks before it talks to a daemon through `dir`: the
/// directory and its socket belong to the client's own user or to root and
/// nobody else can write them, so a request (which may carry secrets) goes
/// to the daemon it was meant for.
pub fn verify_for_client(dir: &Path) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    let mine = |uid: u32| uid == me || uid == 0;
    check(dir, mine)?;
    let socket = socket_path(dir);
    match fs::symlink_metadata(&socket) {
        Ok(meta) if !meta.file_type().is_socket() => Err(format!(
            "refusing {}: it is not a socket (someone replaced it?)",
            socket.display()
        )),
        Ok(meta) if !mine(meta.uid()) => Err(format!(
            "refusing the control socket {}: it is owned by uid {}, not by you or root",
            socket.display(),
            meta.uid()
        )),
        _ => Ok(()),
    }
}

/// The state directory itself (owner accepted by `owner_ok`, writable by
/// its owner only, a real directory) and the directories above it.
fn check(dir: &Path, owner_ok: impl Fn(u32) -> bool) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    let meta = fs::metadata(dir)
        .map_err(|e| format!("cannot use the state directory {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "the state directory {} is not a directory",
            dir.display()
        ));
    }
    let shown = dir.display();
    if !owner_ok(meta.uid()) {
        return Err(format!(
            "refusing the state directory {shown}: it is owned by uid {}, and whoever owns it can make rea run commands; use a directory of your own (--state-dir) or fix it with: chown {me} {shown}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "refusing the state directory {shown}: it is writable by {} (mode {mode:04o}); fix it with: chmod go-w {shown}",
            rea_core::trust::Distrust::who(mode)
        ));
    }
    let real = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(dir))
            .unwrap_or_else(|_| dir.to_path_buf())
    };
    for above in absolute.ancestors().skip(1).chain(real.ancestors().skip(1)) {
        if above.as_os_str().is_empty() {
            continue;
        }
        let Ok(m) = fs::metadata(above) else { continue };
        if let Some(problem) = rea_core::trust::directory(m.uid(), m.mode(), me) {
            return Err(format!(
                "refusing the state directory {shown}: the directory {} above it {problem}, so others could replace it; use another --state-dir",
                above.display()
            ));
        }
    }
    Ok(())
}

/// Held for the daemon's lifetime; dropping it releases the lock.
#[derive(Debug)]
pub struct Lock {
    file: File,
    path: PathBuf,
}

impl Lock {
    /// Whether the lock file at its path is still the one this daemon
    /// holds. If the state directory (or the lock file) was deleted or
    /// replaced, a second daemon could lock a new one and run every job a
    /// second time: the daemon must stop scheduling then.
    pub fn still_ours(&self) -> bool {
        let Ok(ours) = self.file.metadata() else {
            return false;
        };
        match fs::symlink_metadata(&self.path) {
            Ok(there) => there.dev() == ours.dev() && there.ino() == ours.ino(),
            Err(_) => false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How long to keep trying a lock whose recorded holder is dead (defence in
/// depth: a POSIX lock dies with its process, but a daemon of an older
/// version held a `flock`, which its children could keep for a moment).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

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
/// The lock is a POSIX record lock (`fcntl(F_SETLK)`), not a `flock`: it
/// belongs to the daemon process itself, so a job child that inherited the
/// descriptor for the moment between its creation and its `exec` does not
/// keep it alive after a `kill -9` of the daemon (with `flock` it did, and
/// the restarted daemon found the state directory locked). The kernel
/// releases it when the daemon dies. One rule comes with it: a process
/// loses its POSIX locks on a file when it closes *any* descriptor of that
/// file, so the daemon opens `rea.lock` exactly once, here, and never again.
pub fn lock(dir: &Path) -> Result<Lock, LockError> {
    let path = dir.join("rea.lock");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| LockError::Io(format!("cannot open the lock file {}: {e}", path.display())))?;
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    while rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .is_err()
    {
        let mut text = String::new();
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.read_to_string(&mut text);
        let pid: Option<u32> = text.trim().parse().ok();
        let holder_alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if holder_alive || std::time::Instant::now() >= deadline {
            return Err(LockError::Held { pid, path });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
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
    Ok(Lock { file, path })
}

/// The pid of the daemon holding `dir`'s lock, if one does.
pub fn holder(dir: &Path) -> Option<u32> {
    let path = dir.join("rea.lock");
    let mut file = File::open(&path).ok()?;
    match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
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

    /// Exclusivity between processes is tested through the binary (a
    /// second `rea run` exits 4, tests/daemon.rs); a POSIX lock cannot
    /// conflict with its own process. Here: the pid is written, the lock
    /// file is found again by `still_ours`, and a replaced file is noticed.
    #[test]
    fn the_lock_records_its_pid_and_notices_a_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let text = fs::read_to_string(dir.path().join("rea.lock")).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        assert!(held.still_ours());
        fs::remove_file(dir.path().join("rea.lock")).unwrap();
        assert!(!held.still_ours());
        fs::write(dir.path().join("rea.lock"), "1\n").unwrap();
        assert!(
            !held.still_ours(),
            "another file at the path is not our lock"
        );
    }
}
