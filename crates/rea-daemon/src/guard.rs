//! The daemon's guard on its state directory: the lock keeps a second
//! daemon out only while the directory and the lock file are the ones it
//! locked.

use std::path::Path;

use rea_host::state_dir::Lock;

/// Notices when the state directory or the lock file is deleted or
/// replaced (an operator's `rm -rf`, a cleanup script): the lock no longer
/// keeps a second daemon out, so this one must stop scheduling before the
/// two run every job twice. inotify on the directory and on the lock file:
/// nothing is polled, and nothing happens until one of them changes.
pub(crate) struct Guard {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl Guard {
    pub(crate) fn new(dir: &Path, lock: &Lock) -> std::io::Result<Guard> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        inotify::add_watch(&fd, dir, WatchFlags::DELETE_SELF | WatchFlags::MOVE_SELF)?;
        // Unlinking the lock file changes its link count (IN_ATTRIB); its
        // IN_DELETE_SELF would only come once we close it.
        inotify::add_watch(
            &fd,
            lock.path(),
            WatchFlags::ATTRIB | WatchFlags::MOVE_SELF | WatchFlags::DELETE_SELF,
        )?;
        // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it until
        // it is dropped, so the descriptor stays open and never changes.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Guard { fd })
    }

    /// Resolves once the lock at its path is no longer the one `lock`
    /// holds.
    pub(crate) async fn lost(&self, lock: &Lock) {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
        loop {
            let Ok(mut ready) = self.fd.readable().await else {
                return std::future::pending().await;
            };
            let mut reader = rustix::fs::inotify::Reader::new(self.fd.get_ref(), &mut buf);
            while reader.next().is_ok() {}
            ready.clear_ready();
            if !lock.still_ours() {
                return;
            }
        }
    }
}
