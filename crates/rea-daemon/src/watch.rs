//! Watching the job file for changes, so `rea run` can hot-reload it.
//!
//! What lives here: turning the kernel's directory events (inotify) into at
//! most one [`Change`] per edit. What does not: reading or
//! applying the config (the daemon does that when it receives a change).
//!
//! Almost nobody edits a config file in place. Editors rename the original
//! to a backup and write a new file, `sed -i` and configuration management
//! write a temporary file and rename it over, and a Kubernetes ConfigMap is a
//! symlink `jobs.toml -> ..data/jobs.toml` whose `..data` symlink is swapped
//! by rename. A watch on the file itself would follow the old inode and go
//! deaf after the first such save, so we watch *directories*: every directory
//! whose entries decide what the path resolves to (the file's own directory,
//! each directory that holds a symlink on the way, and the directory of the
//! final target), re-resolved after every change.
//!
//! Each edit is a burst of events, so they are debounced: a check runs once
//! the directory has been quiet for [`Timing::quiet`], or at the latest
//! [`Timing::cap`] after the burst began, so a file saved again and again is
//! still checked about once a second. A check compares the file's content
//! with what was last reported, so touching another file in the directory,
//! an editor's swap file, or rewriting identical bytes reports nothing.
//!
//! Only events that can change what the path holds are asked of the kernel
//! (a writer closing the file, creations, deletions, renames, attribute
//! changes): opening or reading a neighbour of the job file (a `cat`, a
//! backup tool, a log shipper) does not wake the daemon at all, and neither
//! does each `write` to a neighbour (a log file kept open beside the job
//! file, the daemon's own stderr redirected there): a write is seen when its
//! writer closes the file, so a file is never checked half-way through a
//! `cp`. The `notify` crate was used
//! before and cannot be told so: it always asks for `IN_OPEN`, which woke
//! two threads for every read in the directory.
//!
//! The directories of the job files beside the main one (`jobs.d/` and, for
//! a root daemon, `users/`) are watched too, when they exist (their
//! creation in the main file's directory is seen): an event for one of
//! their `*.toml` files starts a burst like an event for the job file, and
//! a check compares each of those files' content with what was last
//! reported. A drop-in that is a symlink is seen when the link changes, not
//! when its target is edited in another directory.
//!
//! Idle costs nothing: one thread blocks in `poll` on the inotify descriptor
//! and a stop pipe, with a timeout only while a burst (or a missing file's
//! grace) is pending.

use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::hash::Hasher;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use tokio::sync::mpsc;

/// What the daemon is told about the job file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// The file's content (or its readability) differs from the last time it
    /// was reported, or it is back after being reported missing: reload it.
    Modified,
    /// Only these job files beside the main one (drop-ins, users' files;
    /// absolute paths) changed, appeared or went: reload them alone. The
    /// main file was not even read.
    Parts(Vec<PathBuf>),
    /// The file has been gone for a while (not just mid-replace). Keep the
    /// last good config; a `Modified` follows when it comes back.
    Missing,
    /// Watching is degraded (for example a symlink now points into a
    /// directory that could not be watched), so some changes may be missed.
    /// A sentence for people, to log as a warning.
    Warning(String),
}

/// How long to wait; the defaults suit people and tools editing a config
/// file. Tests shorten some of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Quiet period that ends a burst of events (one editor save).
    pub quiet: Duration,
    /// Longest a burst may delay a check, so a file saved again and again
    /// (a loop of `sed -i`, a tool rewriting it) is still checked.
    pub cap: Duration,
    /// How long a file may stay missing after a burst before `Missing` is
    /// reported; a replace leaves it missing for well under this.
    pub missing_grace: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            quiet: Duration::from_millis(150),
            cap: Duration::from_secs(1),
            missing_grace: Duration::from_secs(1),
        }
    }
}

/// Keeps the file watched. Dropping it removes every inotify watch and stops
/// the watching thread (it waits for the thread, which at worst is finishing
/// one read of the job file).
pub(crate) struct Watcher {
    /// The write end of the thread's stop pipe: closing it stops the thread.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// Shared with the thread for tests: how many checks it ran, and its
    /// kernel thread id (to count its wakeups).
    #[cfg(test)]
    probe: Arc<Probe>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // The thread polls the pipe's read end, which reports a hang-up
        // once this end is closed.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Default)]
struct Probe {
    checks: AtomicU64,
    #[cfg(test)]
    tid: std::sync::atomic::AtomicI32,
}

#[cfg(test)]
impl Probe {
    /// Called on the watching thread: `/proc/thread-self` names its task.
    fn record_tid(&self) {
        let tid = fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .unwrap_or(0);
        self.tid.store(tid, Ordering::Relaxed);
    }
}

/// What the kernel is asked to report for each watched directory: what
/// can change which file a name leads to, or its content or mode. Not
/// opens, reads or closes without a write, and not each write (`MODIFY`):
/// content is checked once its writer closes the file.
fn watch_mask() -> WatchFlags {
    WatchFlags::ATTRIB
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
}

/// Starts watching `file` (relative paths are taken from the current
/// directory, now). Changes arrive on the receiver, which stays open for as
/// long as the [`Watcher`] lives.
///
/// Call it *before* loading the file for the first time: the content seen
/// here is the baseline, so an edit between this call and the load is
/// reported (a harmless extra reload) instead of lost.
///
/// In the daemon's loop: `Modified` → reload (keeping the old config if the
/// new one is invalid); `Missing` → warn that the file is gone and keep the
/// last good config; `Warning(m)` → log `m`. Keep the `Watcher` alive for as
/// long as the receiver is polled: once it is dropped the channel closes and
/// `recv()` returns `None` at once, every time.
#[cfg(test)]
pub(crate) fn watch(file: &Path) -> Result<(Watcher, mpsc::UnboundedReceiver<Change>), String> {
    watch_with(file, Timing::default())
}

/// [`watch`] with explicit timing.
#[cfg(test)]
pub(crate) fn watch_with(
    file: &Path,
    timing: Timing,
) -> Result<(Watcher, mpsc::UnboundedReceiver<Change>), String> {
    watch_files(file, &[], timing)
}

/// [`watch`] for the main job file and the directories of the job files
/// beside it (`dirs`: `jobs.d/`, `users/`; each may be missing, now or
/// later). A change to one of their `*.toml` files is reported as
/// `Modified` too.
pub(crate) fn watch_files(
    file: &Path,
    dirs: &[PathBuf],
    timing: Timing,
) -> Result<(Watcher, mpsc::UnboundedReceiver<Change>), String> {
    let shown = file.display();
    let file = std::path::absolute(file)
        .map_err(|e| format!("cannot watch {shown}: cannot tell the current directory ({e})"))?;
    let parent = match file.parent() {
        Some(p) if file.file_name().is_some() => p.to_path_buf(),
        _ => return Err(format!("cannot watch {shown}: it does not name a file")),
    };
    match fs::metadata(&parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "cannot watch {shown}: {} is not a directory",
                parent.display()
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "cannot watch {shown}: directory {} does not exist",
                parent.display()
            ))
        }
        Err(e) => {
            return Err(format!(
                "cannot watch {shown}: cannot read directory {}: {e}",
                parent.display()
            ))
        }
    }

    let inotify = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .map_err(|e| describe(&e.into(), "start watching", &file))?;
    let (stop_read, stop_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("cannot watch {shown}: {e}"))?;

    let mut extra = BTreeSet::new();
    for dir in dirs {
        extra.insert(
            std::path::absolute(dir).map_err(|e| format!("cannot watch {}: {e}", dir.display()))?,
        );
    }
    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    let probe = Arc::new(Probe::default());
    let mut worker = Worker {
        file: file.clone(),
        extra,
        last_extra: BTreeMap::new(),
        hits: Hits::default(),
        inotify,
        stop: stop_read,
        dirs: HashMap::new(),
        watched: BTreeSet::new(),
        relevant: BTreeSet::new(),
        timing,
        burst: Debounce::default(),
        missing_deadline: None,
        last: Fingerprint::Missing,
        changes: changes_tx,
        probe: probe.clone(),
    };
    // Watches first, baseline second: an edit in between is then seen as an
    // event and compared against the baseline, never lost.
    let resolution = resolve(&file);
    for dir in &resolution.dirs {
        let wd = inotify::add_watch(&worker.inotify, dir.as_path(), watch_mask())
            .map_err(|e| describe(&e.into(), "watch", dir))?;
        worker.dirs.insert(wd, dir.clone());
    }
    worker.watched = resolution.dirs;
    worker.relevant = resolution.entries;
    for dir in worker.extra.clone() {
        worker.watch_extra(&dir);
    }
    worker.last = fingerprint(&file);
    worker.last_extra = worker.extra_fingerprints();

    let thread = std::thread::Builder::new()
        .name("rea-watch".into())
        .spawn(move || worker.run())
        .map_err(|e| format!("cannot watch {shown}: cannot start a thread ({e})"))?;
    Ok((
        Watcher {
            stop: Some(stop_write),
            thread: Some(thread),
            #[cfg(test)]
            probe,
        },
        changes_rx,
    ))
}

/// An inotify error as a sentence for people; `doing` is e.g. "watch".
fn describe(err: &io::Error, doing: &str, path: &Path) -> String {
    let path = path.display();
    match err.raw_os_error() {
        // inotify_add_watch says ENOSPC when max_user_watches is reached.
        Some(libc::ENOSPC) => format!(
            "cannot {doing} {path}: the system limit on inotify watches is reached; \
             raise it (for example `sysctl fs.inotify.max_user_watches=524288`) \
             or stop programs that watch many files"
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => format!(
            "cannot {doing} {path}: the system limit on inotify instances (or open files) \
             is reached; raise it (for example `sysctl fs.inotify.max_user_instances=1024`) \
             or stop programs that watch files"
        ),
        Some(libc::EACCES) => format!("cannot {doing} {path}: permission denied"),
        Some(libc::ENOENT) => format!("cannot {doing} {path}: it does not exist"),
        _ => format!("cannot {doing} {path}: {err}"),
    }
}

/// The timing of one burst of events, kept pure so it can be tested with
/// plain instants.
#[derive(Debug, Default)]
struct Debounce {
    /// First and latest event of the burst in progress.
    burst: Option<(Instant, Instant)>,
}

impl Debounce {
    fn event(&mut self, now: Instant) {
        let first = self.burst.map_or(now, |(first, _)| first);
        self.burst = Some((first, now));
    }

    /// When the burst in progress is due for a check; `None` when idle.
    fn deadline(&self, timing: &Timing) -> Option<Instant> {
        self.burst
            .map(|(first, last)| (last + timing.quiet).min(first + timing.cap))
    }

    /// Ends the burst if it is due at `now`.
    fn take_due(&mut self, now: Instant, timing: &Timing) -> bool {
        match self.deadline(timing) {
            Some(due) if due <= now => {
                self.burst = None;
                true
            }
            _ => false,
        }
    }
}

/// What the file looked like at a check. Compared by content, not by inode
/// or mtime: replacing a file with identical bytes needs no reload, and
/// timestamps are too coarse (a jiffy) to prove two quick writes differ.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fingerprint {
    Missing,
    Content {
        len: u64,
        hash: u64,
    },
    /// There but not readable as a file (permissions, a directory, a FIFO);
    /// reported as `Modified` so the daemon's load explains the problem.
    Unreadable(io::ErrorKind),
}

/// Reads and hashes the file the path resolves to now. The job file is
/// small; it is streamed anyway so a huge one costs no memory.
fn fingerprint(file: &Path) -> Fingerprint {
    // O_NONBLOCK: a FIFO put in place of the file must not hang the thread.
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Fingerprint::Missing,
        Err(e) => return Fingerprint::Unreadable(e.kind()),
    };
    match f.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(m) if m.is_dir() => return Fingerprint::Unreadable(io::ErrorKind::IsADirectory),
        Ok(_) => return Fingerprint::Unreadable(io::ErrorKind::InvalidInput),
        Err(e) => return Fingerprint::Unreadable(e.kind()),
    }
    let mut hasher = std::hash::DefaultHasher::new();
    let mut len = 0u64;
    let mut buf = [0u8; 8192];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.write(&buf[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Fingerprint::Unreadable(e.kind()),
        }
    }
    Fingerprint::Content {
        len,
        hash: hasher.finish(),
    }
}

/// Which directory entries decide what a path resolves to.
#[derive(Debug, Default, PartialEq, Eq)]
struct Resolution {
    /// Directories to watch (symlink-free paths).
    dirs: BTreeSet<PathBuf>,
    /// The entries in those directories whose events matter: each symlink
    /// followed, the final file, or the first name that was missing.
    entries: BTreeSet<PathBuf>,
}

/// Resolves `path` (absolute) one component at a time, like the kernel
/// does, remembering every entry that is a symlink or the end of the road.
/// Plain directories on the way are not remembered: renaming `/etc` is out
/// of scope, and watching it would wake us for every package install.
fn resolve(path: &Path) -> Resolution {
    // Symlink loops end here; the read of the file then reports ELOOP.
    const MAX_HOPS: usize = 40;
    let mut res = Resolution::default();
    let mut note = |dir: &Path, name: &OsStr| {
        res.dirs.insert(dir.to_path_buf());
        res.entries.insert(dir.join(name));
    };
    // A stack: the next component to resolve is the last element.
    let mut pending: Vec<Step> = Vec::new();
    push_front(&mut pending, path);
    let mut cur = PathBuf::from("/");
    let mut hops = 0;
    while let Some(step) = pending.pop() {
        let name = match step {
            Step::Root => {
                cur = PathBuf::from("/");
                continue;
            }
            Step::Parent => {
                cur.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        let candidate = cur.join(&name);
        match fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                note(&cur, &name);
                hops += 1;
                match fs::read_link(&candidate) {
                    Ok(target) if hops <= MAX_HOPS => push_front(&mut pending, &target),
                    _ => break,
                }
            }
            Ok(_) if pending.is_empty() => note(&cur, &name),
            Ok(_) => cur = candidate,
            // Missing (or not a directory): watch where it would appear;
            // the rest of the path cannot be known yet.
            Err(_) => {
                note(&cur, &name);
                break;
            }
        }
    }
    res
}

/// One component of a path still to resolve.
enum Step {
    Root,
    Parent,
    Name(OsString),
}

/// Puts `path`'s components on top of the stack `pending`, first on top.
fn push_front(pending: &mut Vec<Step>, path: &Path) {
    let steps: Vec<Step> = path
        .components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(Step::Root),
            Component::CurDir => None,
            Component::ParentDir => Some(Step::Parent),
            Component::Normal(n) => Some(Step::Name(n.to_os_string())),
        })
        .collect();
    pending.extend(steps.into_iter().rev());
}

/// What the events of a burst touched: the main file (or anything that
/// can change what its path resolves to, or what the other directories
/// hold), or only some of the job files in the other directories.
#[derive(Debug, Default)]
struct Hits {
    main: bool,
    parts: BTreeSet<PathBuf>,
}

/// The watching thread's state.
struct Worker {
    /// The job file as given, made absolute.
    file: PathBuf,
    /// The directories of the other job files (absolute; each may be
    /// missing).
    extra: BTreeSet<PathBuf>,
    /// Their job files as last reported (or the baseline), by path.
    last_extra: BTreeMap<PathBuf, Fingerprint>,
    /// What the burst in progress touched.
    hits: Hits,
    inotify: OwnedFd,
    /// The read end of the stop pipe (see [`Watcher`]).
    stop: OwnedFd,
    /// Watch descriptor → the directory it watches.
    dirs: HashMap<i32, PathBuf>,
    /// Directories currently watched.
    watched: BTreeSet<PathBuf>,
    /// Entries whose events start a burst (see [`Resolution::entries`]).
    relevant: BTreeSet<PathBuf>,
    timing: Timing,
    burst: Debounce,
    /// When to report `Missing` if the file is still gone.
    missing_deadline: Option<Instant>,
    /// What was last reported (or the baseline).
    last: Fingerprint,
    changes: mpsc::UnboundedSender<Change>,
    probe: Arc<Probe>,
}

impl Worker {
    fn run(mut self) {
        #[cfg(test)]
        self.probe.record_tid();
        // Room for a few hundred events per read.
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
        loop {
            let deadline = match (self.burst.deadline(&self.timing), self.missing_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Without a deadline, block without a timeout: no idle wakeups.
            let timeout = deadline.map(|at| {
                let left = at.saturating_duration_since(Instant::now());
                rustix::event::Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: i64::from(left.subsec_nanos()),
                }
            });
            let mut fds = [
                PollFd::new(&self.inotify, PollFlags::IN),
                PollFd::new(&self.stop, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    self.send(Change::Warning(format!(
                        "watching the job file stopped: {e}; reload with SIGHUP or `rea reload`"
                    )));
                    return;
                }
            }
            if !fds[1].revents().is_empty() {
                return;
            }
            if !fds[0].revents().is_empty() {
                if let Some((hits, warning)) = self.read_events(&mut buf) {
                    self.hits.main |= hits.main;
                    self.hits.parts.extend(hits.parts);
                    self.burst.event(Instant::now());
                    if let Some(w) = warning {
                        self.send(Change::Warning(w));
                    }
                }
            }
            // Checked after every wakeup, so a burst that never goes quiet is
            // still cut at the cap.
            let now = Instant::now();
            let ok = if self.burst.take_due(now, &self.timing) {
                self.check(false)
            } else if self.missing_deadline.is_some_and(|at| at <= now) {
                self.check(true)
            } else {
                true
            };
            if !ok {
                return;
            }
        }
    }

    /// Reads every queued event; `Some` when one of them can concern the
    /// job files: which, with a warning to pass on.
    fn read_events(&self, buf: &mut [std::mem::MaybeUninit<u8>]) -> Option<(Hits, Option<String>)> {
        let mut reader = inotify::Reader::new(&self.inotify, buf);
        let mut hits = Hits::default();
        let mut found: Option<Option<String>> = None;
        let everything = Hits {
            main: true,
            parts: BTreeSet::new(),
        };
        loop {
            let event = match reader.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => return found.map(|w| (hits, w)),
                Err(rustix::io::Errno::INTR) => continue,
                // A read error: we may have lost events, so check.
                Err(e) => return Some((everything, Some(format!("watching the job file: {e}")))),
            };
            let flags = event.events();
            // A queue overflow may hide anything.
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                found.get_or_insert(None);
                hits.main = true;
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd()) else {
                // A watch we removed ourselves (its IGNORED event).
                continue;
            };
            match event.file_name() {
                Some(name) if !name.to_bytes().is_empty() => {
                    use std::os::unix::ffi::OsStrExt;
                    let name = OsStr::from_bytes(name.to_bytes());
                    let path = dir.join(name);
                    if self.relevant.contains(&path)
                        || self.watched.contains(&path)
                        || self.extra.contains(&path)
                    {
                        hits.main = true;
                        found.get_or_insert(None);
                    } else if self.extra.contains(dir) && rea_config::is_job_file_name(name) {
                        hits.parts.insert(path);
                        found.get_or_insert(None);
                    }
                }
                // The directory itself was deleted or moved.
                _ => {
                    hits.main = true;
                    found.get_or_insert(None);
                }
            }
        }
    }

    /// Re-resolves and re-watches, then compares the file with what was
    /// last reported. Returns false when the daemon is gone.
    fn check(&mut self, grace_over: bool) -> bool {
        self.probe.checks.fetch_add(1, Ordering::Relaxed);
        let hits = std::mem::take(&mut self.hits);
        if !hits.main && !grace_over && !hits.parts.is_empty() {
            return self.check_parts(hits.parts);
        }
        if let Some(warning) = self.rewatch() {
            if !self.send(Change::Warning(warning)) {
                return false;
            }
        }
        let now = fingerprint(&self.file);
        let extra = self.extra_fingerprints();
        if now == self.last && extra == self.last_extra {
            self.missing_deadline = None;
            return true;
        }
        if now == Fingerprint::Missing {
            if grace_over {
                self.missing_deadline = None;
                self.last = now;
                return self.send(Change::Missing);
            }
            // Not extended by later bursts: a busy directory still gets its
            // Missing report in bounded time.
            if self.missing_deadline.is_none() {
                self.missing_deadline = Some(Instant::now() + self.timing.missing_grace);
            }
            return true;
        }
        self.missing_deadline = None;
        self.last = now;
        self.last_extra = extra;
        self.send(Change::Modified)
    }

    /// Compares only the files `parts` (of the other directories) with
    /// what was last reported: the main file and the other parts are not
    /// read. Returns false when the daemon is gone.
    fn check_parts(&mut self, parts: BTreeSet<PathBuf>) -> bool {
        let mut changed = Vec::new();
        for path in parts {
            let now = fingerprint(&path);
            let last = self.last_extra.get(&path).unwrap_or(&Fingerprint::Missing);
            if now == *last {
                continue;
            }
            if now == Fingerprint::Missing {
                self.last_extra.remove(&path);
            } else {
                self.last_extra.insert(path.clone(), now);
            }
            changed.push(path);
        }
        changed.is_empty() || self.send(Change::Parts(changed))
    }

    /// The job files of the other directories, each with its fingerprint.
    /// A missing directory has none.
    fn extra_fingerprints(&self) -> BTreeMap<PathBuf, Fingerprint> {
        let mut out = BTreeMap::new();
        for dir in &self.extra {
            for f in rea_config::toml_files(dir) {
                let print = fingerprint(&f);
                out.insert(f, print);
            }
        }
        out
    }

    /// Watches one of the other job files' directories if it is there (its
    /// creation is seen in the main file's directory). Returns why it could
    /// not be watched, if it exists.
    fn watch_extra(&mut self, dir: &Path) -> Option<String> {
        match inotify::add_watch(&self.inotify, dir, watch_mask()) {
            Ok(wd) => {
                self.dirs.retain(|old, d| *old == wd || d != dir);
                self.dirs.insert(wd, dir.to_path_buf());
                None
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => None,
            Err(e) => Some(format!(
                "{}; changes to the job files in it may be missed",
                describe(&e.into(), "watch", dir)
            )),
        }
    }

    /// Follows the path's current resolution: watches new directories,
    /// drops stale ones. Directories still wanted are watched again too: one
    /// deleted and re-created under the same name within a burst would
    /// otherwise keep a dead watch (adding an existing watch is a no-op).
    fn rewatch(&mut self) -> Option<String> {
        let resolution = resolve(&self.file);
        let mut failure = None;
        for dir in &resolution.dirs {
            match inotify::add_watch(&self.inotify, dir.as_path(), watch_mask()) {
                Ok(wd) => {
                    // A re-created directory gets a new descriptor; the old
                    // one is dead.
                    self.dirs.retain(|old, d| *old == wd || d != dir);
                    self.dirs.insert(wd, dir.clone());
                }
                Err(e) => {
                    failure.get_or_insert_with(|| {
                        format!(
                            "{}; changes to {} made there may be missed",
                            describe(&e.into(), "watch", dir),
                            self.file.display()
                        )
                    });
                }
            }
        }
        for dir in self.extra.clone() {
            if let Some(problem) = self.watch_extra(&dir) {
                failure.get_or_insert(problem);
            }
        }
        let stale: Vec<i32> = self
            .dirs
            .iter()
            .filter(|(_, d)| !resolution.dirs.contains(*d) && !self.extra.contains(*d))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in stale {
            // Already gone if the directory was deleted or moved.
            let _ = inotify::remove_watch(&self.inotify, wd);
            self.dirs.remove(&wd);
        }
        self.watched = resolution.dirs;
        self.relevant = resolution.entries;
        failure
    }

    fn send(&self, change: Change) -> bool {
        self.changes.send(change).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;
    use tokio::time::timeout;

    /// Long enough for any notification to arrive on a loaded machine.
    const PATIENCE: Duration = Duration::from_secs(10);
    /// After a notification, how long to listen for a spurious second one:
    /// a few quiet periods.
    const AFTERWARDS: Duration = Duration::from_millis(400);

    struct Setup {
        dir: tempfile::TempDir,
        file: PathBuf,
        watcher: Watcher,
        rx: mpsc::UnboundedReceiver<Change>,
    }

    /// A temporary directory with `jobs.toml` holding `content`, watched.
    fn setup(content: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, content).unwrap();
        let (watcher, rx) = watch(&file).unwrap();
        Setup {
            dir,
            file,
            watcher,
            rx,
        }
    }

    /// Exactly one `want` arrives, and nothing else shortly after.
    async fn expect_one(rx: &mut mpsc::UnboundedReceiver<Change>, want: Change) {
        let got = timeout(PATIENCE, rx.recv()).await;
        assert_eq!(got, Ok(Some(want)), "expected one notification");
        expect_none(rx).await;
    }

    async fn expect_none(rx: &mut mpsc::UnboundedReceiver<Change>) {
        if let Ok(got) = timeout(AFTERWARDS, rx.recv()).await {
            panic!("unexpected notification: {got:?}");
        }
    }

    /// Writes `content` to a temporary file in `dir` and renames it over `to`.
    fn replace(dir: &Path, to: &Path, content: &str) {
        let tmp = dir.join(".jobs.toml.tmp");
        fs::write(&tmp, content).unwrap();
        fs::rename(&tmp, to).unwrap();
    }

    /// The drop-in directory's job files are watched with the main file,
    /// also when the directory appears later; other files there are not.
    #[tokio::test]
    async fn drop_in_files_are_watched() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, "a = 1\n").unwrap();
        let dropins = dir.path().join("jobs.d");
        let (_w, mut rx) =
            watch_files(&file, std::slice::from_ref(&dropins), Timing::default()).unwrap();
        fs::create_dir(&dropins).unwrap();
        expect_none(&mut rx).await;
        fs::write(dropins.join("pkg.toml"), "b = 1\n").unwrap();
        // Only the drop-in is named (the main file is not even read).
        let pkg = || Change::Parts(vec![dropins.join("pkg.toml")]);
        expect_one(&mut rx, pkg()).await;
        fs::write(dropins.join("notes.txt"), "x").unwrap();
        fs::write(dropins.join(".pkg.toml.swp"), "x").unwrap();
        expect_none(&mut rx).await;
        replace(&dropins, &dropins.join("pkg.toml"), "b = 2\n");
        expect_one(&mut rx, pkg()).await;
        fs::remove_file(dropins.join("pkg.toml")).unwrap();
        expect_one(&mut rx, pkg()).await;
        fs::remove_dir_all(&dropins).unwrap();
        expect_none(&mut rx).await;
        fs::write(&file, "a = 2\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn in_place_write() {
        let mut s = setup("a = 1\n");
        fs::write(&s.file, "a = 2\n").unwrap();
        expect_one(&mut s.rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn temp_then_rename_over() {
        let mut s = setup("a = 1\n");
        replace(s.dir.path(), &s.file, "a = 2\n");
        expect_one(&mut s.rx, Change::Modified).await;
        // The new inode is followed: a second edit is seen too.
        replace(s.dir.path(), &s.file, "a = 3\n");
        expect_one(&mut s.rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn sed_in_place() {
        let mut s = setup("name = \"old\"\n");
        let status = Command::new("sed")
            .args(["-i", "s/old/new/"])
            .arg(&s.file)
            .status()
            .unwrap();
        assert!(status.success());
        expect_one(&mut s.rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn vim_style_backup_and_rename() {
        let mut s = setup("a = 1\n");
        let dir = s.dir.path();
        let swap = dir.join(".jobs.toml.swp");
        let backup = dir.join("jobs.toml~");
        fs::write(&swap, "swap").unwrap();
        fs::write(dir.join("4913"), "").unwrap();
        fs::remove_file(dir.join("4913")).unwrap();
        fs::rename(&s.file, &backup).unwrap();
        fs::write(&s.file, "a = 2\n").unwrap();
        fs::remove_file(&backup).unwrap();
        fs::remove_file(&swap).unwrap();
        expect_one(&mut s.rx, Change::Modified).await;
    }

    /// Kubernetes ConfigMap volume layout and its atomic update.
    #[tokio::test]
    async fn configmap_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let publish = |stamp: &str, content: &str| {
            fs::create_dir(d.join(stamp)).unwrap();
            fs::write(d.join(stamp).join("jobs.toml"), content).unwrap();
            symlink(stamp, d.join("..data_tmp")).unwrap();
            fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        };
        publish("..2024_01_01", "a = 1\n");
        symlink("..data/jobs.toml", d.join("jobs.toml")).unwrap();
        let (_w, mut rx) = watch(&d.join("jobs.toml")).unwrap();

        publish("..2024_02_01", "a = 2\n");
        fs::remove_dir_all(d.join("..2024_01_01")).unwrap();
        expect_one(&mut rx, Change::Modified).await;
        // Twice: the watches must have followed the first swap.
        publish("..2024_03_01", "a = 3\n");
        fs::remove_dir_all(d.join("..2024_02_01")).unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn symlink_to_another_directory() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let link = a.path().join("jobs.toml");
        let target = b.path().join("real.toml");
        fs::write(&target, "a = 1\n").unwrap();
        symlink(&target, &link).unwrap();
        let (_w, mut rx) = watch(&link).unwrap();
        // Replaced in the target's directory, which only a watch there sees.
        replace(b.path(), &target, "a = 2\n");
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn symlink_pointed_elsewhere() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let link = a.path().join("jobs.toml");
        let (in_b, in_c) = (b.path().join("real.toml"), c.path().join("real.toml"));
        fs::write(&in_b, "a = 1\n").unwrap();
        symlink(&in_b, &link).unwrap();
        let (_w, mut rx) = watch(&link).unwrap();
        fs::write(&in_c, "a = 2\n").unwrap();
        symlink(&in_c, a.path().join("jobs.toml.new")).unwrap();
        fs::rename(a.path().join("jobs.toml.new"), &link).unwrap();
        expect_one(&mut rx, Change::Modified).await;
        // The new target's directory is watched now.
        fs::write(&in_c, "a = 3\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn deleted_then_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, "a = 1\n").unwrap();
        let timing = Timing {
            missing_grace: Duration::from_secs(5),
            ..Timing::default()
        };
        let (_w, mut rx) = watch_with(&file, timing).unwrap();
        fs::remove_file(&file).unwrap();
        // Long enough for a check to find the file missing.
        std::thread::sleep(Duration::from_millis(300));
        fs::write(&file, "a = 2\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn directory_deleted_then_recreated() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("rea");
        let file = dir.join("jobs.toml");
        fs::create_dir(&dir).unwrap();
        fs::write(&file, "a = 1\n").unwrap();
        let timing = Timing {
            missing_grace: Duration::from_secs(5),
            ..Timing::default()
        };
        let (_w, mut rx) = watch_with(&file, timing).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        // Long enough for a check to move the watch up to `top`.
        std::thread::sleep(Duration::from_millis(300));
        fs::create_dir(&dir).unwrap();
        fs::write(&file, "a = 2\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
        // And the re-created directory is watched again.
        fs::write(&file, "a = 3\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn stays_missing_then_returns() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, "a = 1\n").unwrap();
        let timing = Timing {
            missing_grace: Duration::from_millis(300),
            ..Timing::default()
        };
        let (_w, mut rx) = watch_with(&file, timing).unwrap();
        fs::remove_file(&file).unwrap();
        expect_one(&mut rx, Change::Missing).await;
        // Back with the same content: still reported, the daemon logged it gone.
        fs::write(&file, "a = 1\n").unwrap();
        expect_one(&mut rx, Change::Modified).await;
    }

    #[tokio::test]
    async fn unrelated_files_are_ignored() {
        let mut s = setup("a = 1\n");
        let dir = s.dir.path();
        fs::write(dir.join("other.toml"), "b = 1\n").unwrap();
        fs::write(dir.join(".jobs.toml.swp"), "swap").unwrap();
        fs::create_dir(dir.join("sub")).unwrap();
        fs::rename(dir.join("other.toml"), dir.join("sub/other.toml")).unwrap();
        fs::read_to_string(&s.file).unwrap();
        expect_none(&mut s.rx).await;
        // Filtered before any check, not just found unchanged by one.
        assert_eq!(s.watcher.probe.checks.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn identical_content_is_not_a_change() {
        let mut s = setup("a = 1\n");
        fs::write(&s.file, "a = 1\n").unwrap();
        replace(s.dir.path(), &s.file, "a = 1\n");
        expect_none(&mut s.rx).await;
        assert!(s.watcher.probe.checks.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn burst_of_writes_is_coalesced() {
        let mut s = setup("a = 0\n");
        for i in 1..=50 {
            fs::write(&s.file, format!("a = {i}\n")).unwrap();
        }
        let first = timeout(PATIENCE, s.rx.recv()).await;
        assert_eq!(first, Ok(Some(Change::Modified)));
        let mut count = 1;
        while let Ok(Some(change)) = timeout(AFTERWARDS, s.rx.recv()).await {
            assert_eq!(change, Change::Modified);
            count += 1;
        }
        assert!(count <= 3, "50 writes gave {count} notifications");
    }

    /// A writer that never pauses for the quiet period is still reported
    /// (after `cap`) before it stops.
    #[tokio::test]
    async fn continuous_writer_is_reported_before_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, "a = 0\n").unwrap();
        let timing = Timing {
            cap: Duration::from_millis(300),
            ..Timing::default()
        };
        let (_w, mut rx) = watch_with(&file, timing).unwrap();
        // The writer stops on its own after 2 s, or when told to.
        let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let writer = {
            let (file, writing) = (file.clone(), writing.clone());
            std::thread::spawn(move || {
                for i in 1..=40 {
                    if !writing.load(Ordering::SeqCst) {
                        return true;
                    }
                    fs::write(&file, format!("a = {i}\n")).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
                false
            })
        };
        let first = timeout(PATIENCE, rx.recv()).await;
        writing.store(false, Ordering::SeqCst);
        assert_eq!(first, Ok(Some(Change::Modified)));
        assert!(
            writer.join().unwrap(),
            "no notification until the writer stopped"
        );
    }

    #[tokio::test]
    async fn relative_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobs.toml");
        fs::write(&file, "a = 1\n").unwrap();
        // The same file, spelled from the current directory.
        let cwd = std::env::current_dir().unwrap();
        let mut relative = PathBuf::new();
        for _ in cwd.components().skip(1) {
            relative.push("..");
        }
        relative.push(file.strip_prefix("/").unwrap());
        assert!(relative.is_relative());
        let (_w, mut rx) = watch(&relative).unwrap();
        replace(dir.path(), &file, "a = 2\n");
        expect_one(&mut rx, Change::Modified).await;
    }

    /// The watching thread sleeps in the kernel while nothing happens.
    #[tokio::test]
    async fn idle_watcher_does_not_wake_up() {
        let s = setup("a = 1\n");
        // Let the events of the baseline read (open, close) drain.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tid = s.watcher.probe.tid.load(Ordering::Relaxed);
        assert_ne!(tid, 0);
        let switches = || {
            let status = fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let before = switches();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(before, switches());
    }

    /// Opening and reading a neighbour of the job file wakes nothing (the
    /// kernel is not asked for opens and reads), and neither does a write
    /// to a neighbour reach a check.
    #[tokio::test]
    async fn neighbour_reads_do_not_wake_the_watcher() {
        let s = setup("a = 1\n");
        let neighbour = s.dir.path().join("notes.txt");
        fs::write(&neighbour, "hello\n").unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tid = s.watcher.probe.tid.load(Ordering::Relaxed);
        let switches = || fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let switches = || {
            switches()
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let checks = s.watcher.probe.checks.load(Ordering::Relaxed);
        let before = switches();
        for _ in 0..10 {
            fs::read(&neighbour).unwrap();
            fs::read(&s.file).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(before, switches());
        fs::write(&neighbour, "changed\n").unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(s.watcher.probe.checks.load(Ordering::Relaxed), checks);
    }

    /// A log kept open beside the job file (the daemon's own stderr
    /// redirected there, say) wakes nothing however much it is written:
    /// only its close is reported.
    #[tokio::test]
    async fn writes_to_an_open_neighbour_do_not_wake_the_watcher() {
        let s = setup("a = 1\n");
        let mut log = fs::File::create(s.dir.path().join("daemon.log")).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tid = s.watcher.probe.tid.load(Ordering::Relaxed);
        let switches = || {
            fs::read_to_string(format!("/proc/self/task/{tid}/status"))
                .unwrap()
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // Until the creation's wakeup is over (on a loaded machine it may
        // come late).
        let mut before = switches();
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = switches();
            if now == before {
                break;
            }
            before = now;
        }
        for i in 0..100 {
            std::io::Write::write_all(&mut log, format!("line {i}\n").as_bytes()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(before, switches());
    }

    #[test]
    fn missing_directory_is_an_error_for_people() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nope").join("jobs.toml");
        let err = watch(&file).unwrap_err();
        assert_eq!(
            err,
            format!(
                "cannot watch {}: directory {} does not exist",
                file.display(),
                dir.path().join("nope").display()
            )
        );
    }

    #[test]
    fn inotify_limits_suggest_sysctl() {
        let dir = Path::new("/etc/rea");
        let watches = describe(&io::Error::from_raw_os_error(libc::ENOSPC), "watch", dir);
        assert!(
            watches.starts_with("cannot watch /etc/rea: the system limit on inotify watches")
                && watches.contains("sysctl fs.inotify.max_user_watches="),
            "{watches}"
        );
        let instances = describe(
            &io::Error::from_raw_os_error(libc::EMFILE),
            "start watching",
            dir,
        );
        assert!(
            instances.contains("sysctl fs.inotify.max_user_instances="),
            "{instances}"
        );
    }

    #[test]
    fn debounce_waits_for_quiet_but_not_past_the_cap() {
        let timing = Timing::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut d = Debounce::default();
        assert_eq!(d.deadline(&timing), None);
        d.event(t0);
        assert_eq!(d.deadline(&timing), Some(ms(150)));
        d.event(ms(100));
        assert!(!d.take_due(ms(200), &timing));
        assert_eq!(d.deadline(&timing), Some(ms(250)));
        // An event every 100 ms never leaves 150 ms of quiet: the cap.
        for n in 2..=20 {
            d.event(ms(n * 100));
        }
        assert_eq!(d.deadline(&timing), Some(ms(1000)));
        assert!(d.take_due(ms(2000), &timing));
        assert_eq!(d.deadline(&timing), None);
    }

    #[test]
    fn configmap_resolution_watches_each_link_and_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let d = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir(d.join("..2024")).unwrap();
        fs::write(d.join("..2024/jobs.toml"), "").unwrap();
        symlink("..2024", d.join("..data")).unwrap();
        symlink("..data/jobs.toml", d.join("jobs.toml")).unwrap();
        let r = resolve(&d.join("jobs.toml"));
        assert_eq!(
            r.dirs,
            BTreeSet::from([d.clone(), d.join("..2024")]),
            "{r:?}"
        );
        assert_eq!(
            r.entries,
            BTreeSet::from([
                d.join("jobs.toml"),
                d.join("..data"),
                d.join("..2024/jobs.toml")
            ])
        );
        // Dangling: watch where the missing name would appear.
        fs::remove_dir_all(d.join("..2024")).unwrap();
        let r = resolve(&d.join("jobs.toml"));
        assert_eq!(r.dirs, BTreeSet::from([d.clone()]));
        assert!(r.entries.contains(&d.join("..2024")));
    }
}
