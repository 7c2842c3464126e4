//! Opening the files of a state directory. Never through a symlink
//! (`O_NOFOLLOW`): the state directory is checked to be rea's own, but a
//! symlink planted while it was not must still not make the daemon append
//! to, truncate or read another file. Files that decide what runs (the
//! one-shot journal) or that the daemon writes must also be owned by rea's
//! user.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` with `options`, refusing symlinks and files owned by
/// anyone but rea's user.
pub(crate) fn open_owned(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| refine(path, e))?;
    let me = rustix::process::geteuid().as_raw();
    let uid = file.metadata()?.uid();
    if uid != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing {}: it is owned by uid {uid}, not by rea's user (uid {me}); someone else wrote it",
                path.display()
            ),
        ));
    }
    Ok(file)
}

/// Creates (or empties) `path` as a file of rea's own, 0600: the
/// temporary side of a file replaced whole.
pub(crate) fn create_owned(path: &Path) -> io::Result<File> {
    open_owned(
        path,
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600),
    )
}

/// Replaces `path` with `bytes` durably: written to `tmp` beside it,
/// synced, renamed over it, and the directory synced.
pub(crate) fn replace_owned(path: &Path, tmp: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = create_owned(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, path)?;
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Opens `path` for reading, refusing symlinks (readers may run as root on
/// another user's state directory, so the owner is not checked).
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| refine(path, e))
}

/// ELOOP from `O_NOFOLLOW` says "a symlink is there": say it in words.
fn refine(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing {}: it is a symbolic link, and links in the state directory are never followed",
                path.display()
            ),
        )
    } else {
        e
    }
}
