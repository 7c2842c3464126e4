//! Creating a job's process without forking the daemon.
//!
//! `std::process::Command` uses posix_spawn (vfork semantics) only when it
//! has nothing to do between fork and exec; a new session, a parent-death
//! signal, closing inherited descriptors or switching users all make it
//! fork the whole daemon, whose page tables grow with the job set. So the
//! job's process is created here the way glibc's posix_spawn creates one:
//!
//! - Everything the child needs is prepared in the daemon first ([`Launch`]):
//!   argv and envp as C strings, the executable resolved through PATH (the
//!   job's PATH, as execvp in the child would see it), the working directory,
//!   the user's groups (NSS lookups are not async-signal-safe).
//! - `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD)` starts the child on a
//!   small stack of its own ([`Stack`]), sharing the daemon's memory, while
//!   the calling thread waits (with every signal blocked) until the child has
//!   called execve or exited. No page table is copied, and the pidfd comes
//!   with the process, so its exit can always be watched without a thread.
//!   A run with a cgroup is created in it by `clone3` with the same flags
//!   and `CLONE_INTO_CGROUP` (`process/clone3.rs`), where the kernel and the
//!   architecture allow.
//! - The child ([`child_main`]) makes only raw, async-signal-safe system calls
//!   on that prepared memory: it never allocates, takes no lock and cannot
//!   panic. `setuid` and friends are made as raw syscalls: glibc's wrappers
//!   would signal every thread of the *daemon* (they share its memory) to
//!   change their credentials too.
//! - A failing step writes which step and its errno into [`ChildArgs`]
//!   (shared memory, read by the parent once it resumes) and exits 127; the
//!   parent reaps it and turns the pair into a sentence for people.
//!
//! What the child sets up, in order: stdin, stdout + stderr and the optional
//! fd 3, then every other descriptor closed at once (the daemon may have
//! inherited descriptors without CLOEXEC from whoever started it; and closed
//! now rather than at execve, a child still starting when the daemon is
//! killed does not hold the daemon's lock on its state directory a moment
//! longer), default dispositions for every signal (the daemon ignores
//! SIGPIPE and has handlers that must never run in the child), a new session
//! (no controlling terminal, so a job cannot inject keystrokes into the
//! daemon's terminal with TIOCSTI; the session and the process group are
//! both the child's pid), the user's groups, gid and uid, the working
//! directory, `PR_SET_PDEATHSIG = SIGKILL` (after the uid switch, which
//! clears it; then `getppid()` catches a daemon that died before it was
//! set), an empty signal mask, then execve.
//!
//! Needs Linux 5.3 or later (pidfds that can be polled; close_range from
//! 5.9, with a slower fallback before).

use std::cell::RefCell;
use std::convert::Infallible;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use rea_core::run::Program;
use rustix::process::Pid;

use super::RunSpec;

pub(crate) mod clone3;

/// The PATH a job sees when its environment has none, as cron sets it.
pub const DEFAULT_PATH: &str = "/usr/bin:/bin";

/// What the child runs and how, prepared in the daemon before the clone.
pub(super) struct Launch {
    /// The executable as execve takes it (resolved through PATH).
    path: CString,
    /// The name as the job wrote it, for messages.
    program: String,
    what: &'static str,
    /// Own the strings that `argv_ptrs` and `env_ptrs` point into.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// `NAME=value\0` one after the other, which `env_ptrs` point into.
    _env: Vec<u8>,
    env_ptrs: Vec<*const libc::c_char>,
    dir: Option<CString>,
    /// `dir` is the owner's home, tried: the child stays where it is if it
    /// cannot enter it.
    dir_optional: bool,
    dir_shown: Option<PathBuf>,
    identity: Option<Identity>,
    limits: rea_core::run::Limits,
}

/// The user a job runs as, with its groups looked up beforehand.
struct Identity {
    name: String,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

/// The descriptors a child gets: 0, 1 and 2, and optionally 3.
pub(super) struct Stdio<'a> {
    pub(super) stdin: BorrowedFd<'a>,
    pub(super) output: BorrowedFd<'a>,
    pub(super) fd3: Option<BorrowedFd<'a>>,
}

/// Why [`Launch::start`] created no job process.
#[derive(Debug)]
pub(super) enum StartError {
    /// The child was killed as it was created, before it ran an
    /// instruction: on Linux 6.18, by the kernel, in a cgroup that had been
    /// killed (`cgroup.kill`) from outside, as by an operator's kill of a
    /// tenant's directory (see `Leaf::killed` in `cgroup.rs`).
    Unborn,
    /// Anything else, as a sentence for people.
    Failed(String),
}

impl From<String> for StartError {
    fn from(e: String) -> StartError {
        StartError::Failed(e)
    }
}

impl From<StartError> for String {
    fn from(e: StartError) -> String {
        match e {
            StartError::Unborn => {
                "the job's process was killed as it was created (its cgroup had been killed from outside)"
                    .to_string()
            }
            StartError::Failed(e) => e,
        }
    }
}

/// A started child: its pid, the pidfd that reports its exit, and the
/// daemon's own peak resident size once the child had called execve (see
/// [`super::job_peak_rss`]).
pub(super) struct Child {
    pub(super) pid: Pid,
    pub(super) pidfd: Option<OwnedFd>,
    pub(super) spawner_peak_rss_kb: u64,
}

impl Launch {
    /// Everything but the process: the spawn errors people can act on (a
    /// missing program in PATH, a NUL in the command) are found here; a
    /// directory or shell that cannot be used is reported by the child.
    pub(super) fn prepare(spec: &RunSpec) -> Result<Launch, String> {
        let (what, program, args): (&'static str, &str, Vec<&str>) = match &spec.program {
            Program::Shell { shell, script } => ("shell", shell, vec![shell, "-c", script]),
            Program::Argv(argv) => match argv.first() {
                Some(first) => ("program", first, argv.iter().map(String::as_str).collect()),
                None => return Err("nothing to run: the command is empty".to_string()),
            },
        };
        let argv = args
            .iter()
            .map(|a| CString::new(*a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| "the command contains a NUL byte, which cannot be passed".to_string())?;
        let env = environment(spec)?;
        // A directory the child cannot enter is found by its chdir (as the
        // job's user), which reports why; nothing is checked here.
        let start_in = spec.dir.as_ref().or(spec.home.as_ref());
        let path = resolve(
            what,
            program,
            search_path(&env),
            start_in.map(PathBuf::as_path),
        )?;
        let dir =
            match start_in {
                Some(d) => Some(CString::new(d.as_os_str().as_bytes()).map_err(|_| {
                    format!("working directory {} contains a NUL byte", d.display())
                })?),
                None => None,
            };
        let identity = match &spec.user {
            Some(u) => Some(Identity {
                name: u.name.clone(),
                uid: u.uid,
                gid: u.gid,
                groups: rea_host::user::groups(u)?,
            }),
            None => None,
        };
        let argv_ptrs = pointers(&argv);
        let env_ptrs = env.pointers();
        Ok(Launch {
            path,
            program: program.to_string(),
            what,
            _argv: argv,
            argv_ptrs,
            _env: env.bytes,
            env_ptrs,
            dir,
            dir_optional: spec.dir.is_none(),
            dir_shown: spec.dir.clone(),
            identity,
            limits: spec.limits,
        })
    }

    /// Creates the process. Blocks the calling thread until the child has
    /// called execve (or failed before), as vfork does.
    ///
    /// The thread that calls this must outlive the child's run: Linux sends
    /// the parent-death signal when the *thread* that created a process
    /// exits, not when the whole daemon does (the daemon spawns from its
    /// one loop thread).
    pub(super) fn start(
        &self,
        stdio: Stdio<'_>,
        cgroup: Option<CgroupFds>,
    ) -> Result<Child, StartError> {
        // Sources must not sit on the descriptor numbers they are copied to
        // (a daemon started with 0, 1 or 2 closed gets them for its own
        // files): the child would overwrite one with another.
        let mut moved = Vec::new();
        let mut source = |fd: BorrowedFd<'_>| -> Result<RawFd, String> {
            if fd.as_raw_fd() > LAST_PASSED_FD {
                return Ok(fd.as_raw_fd());
            }
            let copy = rustix::io::fcntl_dupfd_cloexec(fd, LAST_PASSED_FD + 1)
                .map_err(|e| format!("cannot pass descriptors to the job: {e}"))?;
            let raw = copy.as_raw_fd();
            moved.push(copy);
            Ok(raw)
        };
        let stdin = source(stdio.stdin)?;
        let output = source(stdio.output)?;
        let fd3 = stdio.fd3.map(&mut source).transpose()?.unwrap_or(-1);
        let (switch_user, uid, gid, groups) = match &self.identity {
            Some(i) => (true, i.uid, i.gid, i.groups.as_slice()),
            None => (false, 0, 0, &[][..]),
        };
        // The soft limit the daemon started with, under the hard limit in
        // force now (lowering the soft limit needs no privilege).
        let nofile = rea_host::limits::job_open_files()
            .filter(|_| self.limits.nofile.is_none())
            .map(|soft| {
                let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
                libc::rlimit {
                    rlim_cur: hard.map_or(soft, |h| soft.min(h)) as libc::rlim_t,
                    rlim_max: hard.map_or(libc::RLIM_INFINITY, |h| h as libc::rlim_t),
                }
            });
        let mut rlimits = [(
            0,
            libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            },
        ); 5];
        let mut rlimits_len = 0;
        let asked = [
            (libc::RLIMIT_NOFILE, self.limits.nofile),
            (libc::RLIMIT_NPROC, self.limits.nproc),
            (libc::RLIMIT_CORE, self.limits.core),
            (libc::RLIMIT_STACK, self.limits.stack),
            (libc::RLIMIT_AS, self.limits.address_space),
        ];
        for (resource, value) in asked {
            if let (Some(v), Some(slot)) = (value, rlimits.get_mut(rlimits_len)) {
                // u64::MAX is RLIM64_INFINITY: "unlimited".
                *slot = (
                    resource as libc::c_int,
                    libc::rlimit64 {
                        rlim_cur: v,
                        rlim_max: v,
                    },
                );
                rlimits_len += 1;
            }
        }
        let ionice = self.limits.ionice.map_or(-1, |n| {
            // IOPRIO_PRIO_VALUE(class, level): the class in the top 3 of 16 bits.
            let (class, level) = match n {
                rea_core::run::IoNice::Realtime(l) => (1, l),
                rea_core::run::IoNice::BestEffort(l) => (2, l),
                rea_core::run::IoNice::Idle => (3, 0),
            };
            (class << 13) | libc::c_long::from(level.min(7))
        });
        let args = ChildArgs {
            cgroup_procs: AtomicI32::new(-1),
            rlimits,
            rlimits_len,
            rlimits_as_user: self.limits.rlimits_as_user && switch_user,
            nice: self.limits.nice,
            ionice,
            path: self.path.as_ptr(),
            argv: self.argv_ptrs.as_ptr(),
            envp: self.env_ptrs.as_ptr(),
            dir: self.dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
            dir_optional: self.dir_optional,
            sources: [stdin, output, output, fd3],
            first_closed: if fd3 >= 0 { 4 } else { 3 },
            switch_user,
            uid,
            gid,
            groups: groups.as_ptr(),
            groups_len: groups.len(),
            reset_signals: signals_to_reset(),
            nofile: nofile
                .as_ref()
                .map_or(std::ptr::null(), |l| l as *const libc::rlimit),
            parent: own_pid(),
            ran: std::sync::atomic::AtomicBool::new(false),
            failed_step: AtomicU8::new(Step::None as u8),
            failed_errno: AtomicI32::new(0),
        };
        let pid_and_fd = STACK.with(|cell| match cell.try_borrow_mut() {
            Ok(mut cached) => {
                if cached.is_none() {
                    *cached = Some(Stack::new()?);
                }
                match cached.as_ref() {
                    Some(stack) => clone_child(stack, &args, cgroup),
                    None => Err(io::Error::from(io::ErrorKind::OutOfMemory)),
                }
            }
            // Re-entered (cannot happen: the child runs no Rust code of
            // ours that spawns): a stack for this call alone.
            Err(_) => clone_child(&Stack::new()?, &args, cgroup),
        });
        drop(moved);
        let (pid, pidfd) = pid_and_fd.map_err(|e| self.start_error(e))?;
        if !args.ran.load(Ordering::Acquire) {
            // Gone before its first instruction (the clone returns once
            // the child has exited): ours to reap.
            reap_blocking(pid);
            return Err(StartError::Unborn);
        }
        let failed = Step::from(args.failed_step.load(Ordering::Acquire));
        if failed != Step::None {
            // The child exited (127) after writing its report; it is ours to
            // reap, and exiting takes it no time.
            reap_blocking(pid);
            let errno = io::Error::from_raw_os_error(args.failed_errno.load(Ordering::Acquire));
            return Err(self.step_error(failed, errno).into());
        }
        let spawner_peak_rss_kb = own_peak_rss_kb();
        let Some(pid) = Pid::from_raw(pid) else {
            // clone returned a pid, which is positive; nothing to supervise
            // otherwise.
            return Err(format!("the job started with an unusable pid {pid}").into());
        };
        Ok(Child {
            pid,
            pidfd,
            spawner_peak_rss_kb,
        })
    }

    fn start_error(&self, e: io::Error) -> String {
        spawn_error(self.what, &self.program, e)
    }

    /// A child's failed step as a sentence; the messages people know from
    /// the spawn errors (missing shell, program or directory) stay the same.
    fn step_error(&self, step: Step, e: io::Error) -> String {
        let user = self.identity.as_ref().map_or("", |i| i.name.as_str());
        match step {
            Step::Exec => spawn_error(self.what, &self.program, e),
            Step::Dir => {
                let shown = self
                    .dir_shown
                    .as_deref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                match e.raw_os_error() {
                    Some(libc::ENOENT) => format!("working directory {shown} does not exist"),
                    Some(libc::ENOTDIR) => format!("working directory {shown} is not a directory"),
                    Some(libc::EACCES) if !user.is_empty() => format!(
                        "working directory {shown} is not accessible to user {user} \
                         (permission denied to enter it)"
                    ),
                    Some(libc::EACCES) => format!(
                        "working directory {shown} is not accessible (permission denied to enter it)"
                    ),
                    _ => format!("cannot use working directory {shown}: {e}"),
                }
            }
            Step::Groups | Step::Gid | Step::Uid => {
                format!("cannot switch to user {user} ({}): {e}", step.name())
            }
            Step::ParentGone => "the daemon exited while the job was starting".to_string(),
            Step::Cgroup => format!("cannot place the job in its cgroup: {e}"),
            Step::Limits if e.raw_os_error() == Some(libc::EPERM) => format!(
                "cannot set the job's resource limits (prlimit64): {e}: a limit above the \
                 hard limit the daemon runs with, which only a job of root's file may raise \
                 (with CAP_SYS_RESOURCE), or open files above fs.nr_open"
            ),
            Step::Limits => format!("cannot set the job's resource limits (prlimit64): {e}"),
            Step::Nice => format!("cannot set the job's nice value: {e}"),
            Step::IoNice => format!("cannot set the job's IO priority (ionice): {e}"),
            _ => format!("cannot prepare the job's process ({}): {e}", step.name()),
        }
    }
}

/// The highest descriptor number a child is given (fd 3, for hooks).
const LAST_PASSED_FD: RawFd = super::PASSED_FD;

/// Null-terminated pointer array over `strings`, as execve takes it.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The daemon's environment as runs inherit it, as `NAME=value` entries
/// with the length of the name: read once (the daemon never changes its
/// own), without `NOTIFY_SOCKET` (a job must not talk to systemd as if it
/// were rea).
fn daemon_env() -> &'static [(usize, Box<[u8]>)] {
    static ENV: OnceLock<Vec<(usize, Box<[u8]>)>> = OnceLock::new();
    ENV.get_or_init(|| {
        std::env::vars_os()
            .filter(|(k, _)| k != rea_host::notify::NOTIFY_SOCKET)
            .map(|(k, v)| {
                let mut entry = k.into_vec();
                let name_len = entry.len();
                entry.push(b'=');
                entry.extend_from_slice(v.as_bytes());
                (name_len, entry.into_boxed_slice())
            })
            .collect()
    })
}

/// Whether the daemon's own environment has PATH.
pub fn daemon_has_path() -> bool {
    daemon_env()
        .iter()
        .any(|(name_len, entry)| &entry[..*name_len] == b"PATH")
}

/// A child's environment as execve takes it: `NAME=value\0` entries in one
/// buffer (one allocation, not one per variable).
struct EnvBlock {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl EnvBlock {
    fn push(&mut self, parts: &[&[u8]]) {
        self.starts.push(self.bytes.len());
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
        self.bytes.push(0);
    }

    /// The entries, last first.
    fn entries_rev(&self) -> impl Iterator<Item = &[u8]> {
        self.starts.iter().rev().map(|&at| {
            let entry = &self.bytes[at..];
            &entry[..entry.iter().position(|&b| b == 0).unwrap_or(entry.len())]
        })
    }

    /// Null-terminated pointer array into `bytes`, valid while `bytes` is
    /// neither changed nor dropped (moving the Vec does not move its buffer).
    fn pointers(&self) -> Vec<*const libc::c_char> {
        self.starts
            .iter()
            .map(|&at| self.bytes[at..].as_ptr().cast::<libc::c_char>())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }
}

/// The child's environment: the daemon's own ([`daemon_env`]) or nothing,
/// overlaid with the spec's variables, a later one replacing an earlier one.
fn environment(spec: &RunSpec) -> Result<EnvBlock, String> {
    let mut own: Vec<(&str, &str)> = Vec::with_capacity(spec.env.len());
    for (k, v) in &spec.env {
        if k.contains('\0') || v.contains('\0') {
            return Err(format!(
                "environment variable {k} contains a NUL byte, which cannot be passed"
            ));
        }
        match own.iter_mut().find(|(have, _)| have == k) {
            Some(slot) => slot.1 = v,
            None => own.push((k, v)),
        }
    }
    let inherited = if spec.inherit_env { daemon_env() } else { &[] };
    let mut env = EnvBlock {
        bytes: Vec::with_capacity(
            inherited.iter().map(|(_, e)| e.len() + 1).sum::<usize>()
                + own
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>(),
        ),
        starts: Vec::with_capacity(inherited.len() + own.len()),
    };
    for (name_len, entry) in inherited {
        let name = &entry[..*name_len];
        if !own.iter().any(|(k, _)| k.as_bytes() == name) {
            env.push(&[entry]);
        }
    }
    for (k, v) in own {
        env.push(&[k.as_bytes(), b"=", v.as_bytes()]);
    }
    Ok(env)
}

/// PATH as the child will see it, or cron's default.
fn search_path(env: &EnvBlock) -> OsString {
    env.entries_rev()
        .find_map(|e| e.strip_prefix(b"PATH="))
        .map(|p| OsStr::from_bytes(p).to_os_string())
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH))
}

/// The signals a child must reset before it unblocks them: those this
/// process handles or ignores, looked up once (64 queries) rather than
/// reset one by one in every child (64 system calls per run, while the
/// daemon waits for the child's execve). The daemon sets its dispositions
/// before it starts any run and never changes them; a test that does calls
/// `signal_dispositions_changed`. glibc's own signals (32 and 33, which
/// its `sigaction` hides) are always reset.
fn signals_to_reset() -> u64 {
    const UNKNOWN: u64 = u64::MAX;
    let known = RESET_SIGNALS.load(Ordering::Acquire);
    if known != UNKNOWN {
        return known;
    }
    let mut set: u64 = (1 << 31) | (1 << 32);
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a query only (null new action); `old` is valid for writing.
        let handler = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            old.sa_sigaction
        };
        if handler != libc::SIG_DFL {
            set |= 1 << (signal - 1);
        }
    }
    RESET_SIGNALS.store(set, Ordering::Release);
    set
}

/// See [`signals_to_reset`]; `u64::MAX` = not looked up yet.
static RESET_SIGNALS: AtomicU64 = AtomicU64::new(u64::MAX);

/// A signal's disposition changed after runs had started: the next spawn
/// looks them up again.
#[cfg(test)]
pub(super) fn signal_dispositions_changed() {
    RESET_SIGNALS.store(u64::MAX, Ordering::Release);
}

/// The daemon's pid, read once (it never forks itself).
fn own_pid() -> libc::pid_t {
    static PID: OnceLock<libc::pid_t> = OnceLock::new();
    *PID.get_or_init(|| rustix::process::getpid().as_raw_nonzero().get())
}

/// The executable for `program`: itself if it names a path, else the first
/// executable regular file of that name in `path`, as execvp searches it
/// (an empty entry is the working directory). Relative entries are taken
/// from the job's working directory, where the child will be.
fn resolve(
    what: &str,
    program: &str,
    path: OsString,
    dir: Option<&Path>,
) -> Result<CString, String> {
    let nul = || format!("the {what} name contains a NUL byte, which cannot be passed");
    if program.contains('/') {
        return CString::new(program).map_err(|_| nul());
    }
    if program.is_empty() {
        return Err(format!("{what} name is empty"));
    }
    let mut denied = false;
    for entry in path.as_bytes().split(|&b| b == b':') {
        let entry = Path::new(OsStr::from_bytes(if entry.is_empty() {
            b"."
        } else {
            entry
        }));
        let mut candidate = match dir {
            Some(d) if entry.is_relative() => d.join(entry),
            _ => entry.to_path_buf(),
        };
        candidate.push(program);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                let executable =
                    rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok();
                if executable {
                    return CString::new(candidate.into_os_string().into_vec()).map_err(|_| nul());
                }
                denied = true;
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => denied = true,
            Err(_) => {}
        }
    }
    let kind = if denied {
        io::ErrorKind::PermissionDenied
    } else {
        io::ErrorKind::NotFound
    };
    Err(spawn_error(what, program, io::Error::from(kind)))
}

/// A program that cannot be run, as people read it.
fn spawn_error(what: &str, program: &str, e: io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound if program.contains('/') => {
            format!("{what} {program} does not exist")
        }
        io::ErrorKind::NotFound => format!("{what} {program} was not found in PATH"),
        io::ErrorKind::PermissionDenied => format!(
            "permission denied running {what} {program}: it is not executable, \
             or a directory on its path cannot be entered"
        ),
        _ => format!("cannot start {what} {program}: {e}"),
    }
}

/// The daemon's peak resident size in KiB (`ru_maxrss` of RUSAGE_SELF).
pub(super) fn own_peak_rss_kb() -> u64 {
    // getrusage's figure is the larger of this process's memory peak and
    // what it inherited through execve: the peak of whatever forked it (a
    // test binary of 300 MB, say). Only the former is what a leader that
    // shared our memory reports, so when getrusage has not grown past
    // what it said at first, the peak is read from the memory itself.
    static FIRST: OnceLock<u64> = OnceLock::new();
    // SAFETY: rusage is plain integers, for which all-zero is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid and exclusive for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let now = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    if now > *FIRST.get_or_init(|| now) {
        return now;
    }
    memory_peak_kb().unwrap_or(now)
}

/// `VmHWM` of /proc/self/status: the peak of this process's own memory.
fn memory_peak_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Reaps a child that has exited (or is exiting), retrying EINTR.
fn reap_blocking(pid: libc::pid_t) {
    loop {
        let mut status = 0;
        // SAFETY: a valid pointer to an int; `pid` is our own child.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

// ---------------------------------------------------------------------------
// The clone and the child.

/// What the child reads (and, on failure, writes). Lives on the stack of
/// the thread that clones, which is suspended until the child calls execve
/// or exits, so it stays valid and unchanged for the child's whole life.
struct ChildArgs {
    /// The run's `cgroup.procs`, written "0" first thing; -1 = no cgroup,
    /// or the child was created in it (`clone3` with `CLONE_INTO_CGROUP`).
    /// Set by the parent before the clone.
    cgroup_procs: AtomicI32,
    /// Resource limits to set (the first `rlimits_len`).
    rlimits: [(libc::c_int, libc::rlimit64); 5],
    rlimits_len: usize,
    /// Set them after the user switch (a user's own file asked for them).
    rlimits_as_user: bool,
    nice: Option<i32>,
    /// The IO priority value for ioprio_set; -1 = the daemon's.
    ionice: libc::c_long,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Null: stay in the daemon's working directory.
    dir: *const libc::c_char,
    /// A failed chdir to `dir` is not an error: the child stays where it is.
    dir_optional: bool,
    /// Copied to descriptors 0, 1, 2 and 3; -1 = none (only for 3). Every
    /// source is above 3, so no copy overwrites a later source.
    sources: [RawFd; 4],
    /// Descriptors from here up are closed.
    first_closed: RawFd,
    switch_user: bool,
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: *const libc::gid_t,
    groups_len: usize,
    /// The open-file limit to set before execve (the daemon raised its
    /// own); null keeps the daemon's.
    nofile: *const libc::rlimit,
    /// Bit `n - 1` set: signal `n` is to be reset to its default action
    /// ([`signals_to_reset`]).
    reset_signals: u64,
    /// The daemon's pid, to notice a daemon that died before the
    /// parent-death signal was armed.
    parent: libc::pid_t,
    /// Set by the child as its first act: a child that exits without it
    /// never ran (killed as it was created: see [`StartError::Unborn`]).
    ran: std::sync::atomic::AtomicBool,
    /// Written by the child before it exits 127; read after the clone.
    failed_step: AtomicU8,
    failed_errno: AtomicI32,
}

/// The child's steps, named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    None = 0,
    Cgroup,
    Limits,
    Nice,
    IoNice,
    Session,
    Stdio,
    CloseFds,
    OpenFiles,
    Groups,
    Gid,
    Uid,
    Dir,
    DeathSignal,
    ParentGone,
    SignalMask,
    Exec,
}

impl Step {
    const ALL: [Step; 17] = [
        Step::None,
        Step::Cgroup,
        Step::Limits,
        Step::Nice,
        Step::IoNice,
        Step::Session,
        Step::Stdio,
        Step::CloseFds,
        Step::OpenFiles,
        Step::Groups,
        Step::Gid,
        Step::Uid,
        Step::Dir,
        Step::DeathSignal,
        Step::ParentGone,
        Step::SignalMask,
        Step::Exec,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::None => "none",
            Step::Cgroup => "entering its cgroup",
            Step::Limits => "prlimit64",
            Step::Nice => "setpriority",
            Step::IoNice => "ioprio_set",
            Step::Session => "setsid",
            Step::Stdio => "dup2",
            Step::CloseFds => "close_range",
            Step::OpenFiles => "setrlimit(RLIMIT_NOFILE)",
            Step::Groups => "setgroups",
            Step::Gid => "setgid",
            Step::Uid => "setuid",
            Step::Dir => "chdir",
            Step::DeathSignal => "PR_SET_PDEATHSIG",
            Step::ParentGone => "getppid",
            Step::SignalMask => "sigprocmask",
            Step::Exec => "execve",
        }
    }
}

impl From<u8> for Step {
    fn from(raw: u8) -> Step {
        Step::ALL
            .into_iter()
            .find(|s| *s as u8 == raw)
            .unwrap_or(Step::None)
    }
}

/// Usable size of the child's stack. The child's frames are a few hundred
/// bytes (no allocation, no formatting); this leaves room for glibc's
/// syscall wrappers and for unoptimised builds.
const STACK_SIZE: usize = 64 * 1024;

/// A stack for the child, with a guard page below it so an overflow faults
/// instead of writing over the daemon's memory.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf only reads a system constant.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = STACK_SIZE + page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just made, which nothing
        // uses yet.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer: the end of the mapping (stacks grow down;
    /// page-aligned, so 16-byte aligned as every ABI wants).
    fn top(&self) -> *mut libc::c_void {
        self.base.wrapping_byte_add(self.len)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, used by no child any more (the
        // clone returns only once the child has left it).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

thread_local! {
    /// One stack per spawning thread, reused: the thread is suspended while
    /// its child runs on it, so two children never share it.
    static STACK: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

/// The kernel's signal set for `rt_sigprocmask`: 64 bits on Linux.
const SIGSET_SIZE: usize = 8;

/// Blocks every signal (glibc's internal ones too) on this thread until
/// dropped, so that the child, which starts with this thread's mask, can
/// run none of the daemon's handlers before it has reset them.
struct AllSignalsBlocked {
    old: u64,
}

impl AllSignalsBlocked {
    fn new() -> AllSignalsBlocked {
        let all: u64 = !0;
        let mut old: u64 = 0;
        // SAFETY: both pointers are valid for SIGSET_SIZE bytes; the raw
        // syscall (not pthread_sigmask) also blocks glibc's internal
        // signals, as posix_spawn does.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &all as *const u64,
                &mut old as *mut u64,
                SIGSET_SIZE,
            );
        }
        AllSignalsBlocked { old }
    }
}

impl Drop for AllSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`; the pointer is valid.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &self.old as *const u64,
                std::ptr::null_mut::<u64>(),
                SIGSET_SIZE,
            );
        }
    }
}

/// A run's cgroup as the clone needs it: its directory, open, for
/// `clone3`'s `CLONE_INTO_CGROUP`; where `clone3` cannot be used, its
/// `cgroup.procs` is opened through it for the child to write to. Not kept
/// open with the leaf: every descriptor the daemon holds is copied into
/// each child's table and closed there again (`close_range`), which made a
/// spawn measurably slower with many leaves open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CgroupFds {
    pub(crate) dir: RawFd,
}

/// clone(2) with the child on `stack`: `(pid, pidfd)`. Returns once the
/// child has called execve or exited.
///
/// With a cgroup, the child is created in it by `clone3` with
/// `CLONE_INTO_CGROUP` (x86_64, Linux 5.7) where the kernel takes it; else
/// the child writes itself into it first thing. Both put the child in the
/// cgroup before it runs any code of the job, but a write to `cgroup.procs`
/// takes the cgroup core's thread-group lock for writing, and once no
/// migration has happened for an RCU grace period that waits for a full
/// grace period (measured here: 9–13 ms per spawn when spawns are 20 ms
/// apart, 0.15 ms back to back); a task born into its cgroup takes the lock
/// for reading only (0.3–0.5 ms either way). See BENCHMARKS.md.
fn clone_child(
    stack: &Stack,
    args: &ChildArgs,
    cgroup: Option<CgroupFds>,
) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    let mut pidfd: libc::c_int = -1;
    let blocked = AllSignalsBlocked::new();
    if let Some(fds) = cgroup {
        if fds.dir < 0 {
            // The leaf is not open (cannot happen while a run holds it):
            // no child is created outside it.
            drop(blocked);
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        args.cgroup_procs.store(-1, Ordering::Relaxed);
        if let Some(pid) = clone3::into_cgroup(stack, args, fds.dir, &mut pidfd) {
            drop(blocked);
            // SAFETY: as in `clone_plain`: a new descriptor the kernel stored
            // for us.
            let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
            return Ok((pid, pidfd));
        }
        // SAFETY: `fds.dir` is not -1 (checked above) and is the leaf's
        // directory, open from the leaf's `take` until its run is over,
        // which is after this call.
        let dir = unsafe { BorrowedFd::borrow_raw(fds.dir) };
        let opened = rustix::fs::openat(
            dir,
            "cgroup.procs",
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        );
        let procs = match opened {
            Ok(fd) => fd,
            Err(e) => {
                drop(blocked);
                return Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("cannot open its cgroup's cgroup.procs: {e}"),
                ));
            }
        };
        args.cgroup_procs
            .store(procs.as_raw_fd(), Ordering::Relaxed);
        let cloned = clone_plain(stack, args);
        // The child has written itself in (or failed to) and gone on to
        // execve or exited: the descriptor is no longer needed.
        drop(procs);
        drop(blocked);
        return cloned;
    }
    let cloned = clone_plain(stack, args);
    drop(blocked);
    cloned
}

/// clone(2) with the child on `stack` (every signal blocked by the caller).
fn clone_plain(stack: &Stack, args: &ChildArgs) -> io::Result<(libc::pid_t, Option<OwnedFd>)> {
    let mut pidfd: libc::c_int = -1;
    // SAFETY: `child_main` is the entry point written for this clone: it
    // runs on `stack` (a mapping of its own, unused by anyone else while this
    // thread is suspended), reads `args` (which outlives the child's use of
    // it: CLONE_VFORK suspends this thread, and with it this frame, until the
    // child has called execve or exited) and makes only async-signal-safe
    // system calls; it never returns into Rust code of the daemon. Without
    // CLONE_FILES and CLONE_SIGHAND the child has its own copies of the
    // descriptor table and the signal handlers, so closing descriptors and
    // resetting handlers there leaves the daemon's alone. `pidfd` is valid
    // for the kernel to write the pidfd into (CLONE_PIDFD uses the
    // parent_tid argument).
    let pid = unsafe {
        libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            (args as *const ChildArgs).cast_mut().cast(),
            &mut pidfd as *mut libc::c_int,
        )
    };
    let error = io::Error::last_os_error();
    if pid < 0 {
        return Err(error);
    }
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor that
    // nothing else owns; -1 (left as it was) means it did not.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    Ok((pid, pidfd))
}

/// The child's entry point. Runs on the child's own stack, sharing the
/// daemon's memory until execve: see the module documentation for what it
/// may and may not do.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `clone_child` passed, alive and
    // unchanged while the cloning thread is suspended (CLONE_VFORK).
    let args = unsafe { &*(arg as *const ChildArgs) };
    args.ran.store(true, Ordering::Release);
    // SAFETY: `args` was prepared for exactly this: valid C strings,
    // null-terminated pointer arrays, open descriptors, a group list of
    // `groups_len` entries.
    let Err((step, errno)) = unsafe { child_steps(args) };
    args.failed_errno.store(errno, Ordering::Release);
    args.failed_step.store(step as u8, Ordering::Release);
    // SAFETY: _exit is async-signal-safe and ends only the child.
    unsafe { libc::_exit(127) }
}

/// The errno of the failed call just made (in this thread's slot, which the
/// child shares with the suspended thread that cloned it; nobody else reads
/// it meanwhile).
fn errno() -> libc::c_int {
    // SAFETY: __errno_location always returns this thread's valid slot.
    unsafe { *libc::__errno_location() }
}

/// `Err((step, errno))` if a system call returned -1.
fn check(step: Step, ret: libc::c_long) -> Result<(), (Step, libc::c_int)> {
    if ret < 0 {
        Err((step, errno()))
    } else {
        Ok(())
    }
}

#[cfg(target_pointer_width = "64")]
const SETGROUPS: libc::c_long = libc::SYS_setgroups;
#[cfg(target_pointer_width = "64")]
const SETGID: libc::c_long = libc::SYS_setgid;
#[cfg(target_pointer_width = "64")]
const SETUID: libc::c_long = libc::SYS_setuid;
// 32-bit ABIs keep 16-bit ids on the old numbers.
#[cfg(target_pointer_width = "32")]
const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
#[cfg(target_pointer_width = "32")]
const SETGID: libc::c_long = libc::SYS_setgid32;
#[cfg(target_pointer_width = "32")]
const SETUID: libc::c_long = libc::SYS_setuid32;

/// The child's work; returns only on failure (execve does not return).
///
/// # Safety
///
/// Only for `child_main`, in a child created by `clone_child`.
unsafe fn child_steps(a: &ChildArgs) -> Result<Infallible, (Step, libc::c_int)> {
    // Into the run's cgroup before anything else (and as root, before the
    // user switch): whatever the job starts is created in it.
    let procs = a.cgroup_procs.load(Ordering::Relaxed);
    if procs >= 0 {
        let zero = b"0";
        check(
            Step::Cgroup,
            libc::write(procs, zero.as_ptr().cast(), 1) as libc::c_long,
        )?;
    }
    for (target, source) in (0..).zip(a.sources) {
        if source >= 0 {
            check(Step::Stdio, libc::dup2(source, target) as libc::c_long)?;
        }
    }
    close_from(a.first_closed)?;
    if !a.nofile.is_null() {
        check(
            Step::OpenFiles,
            libc::setrlimit(libc::RLIMIT_NOFILE, a.nofile) as libc::c_long,
        )?;
    }
    // Root's limits while still privileged: root may raise a hard limit or
    // lower the nice value, the job's user may not. A user's own file gets
    // hers after the switch (below), where the kernel holds her to the hard
    // limits the daemon passes on; her nice is checked by the loader.
    if !a.rlimits_as_user {
        set_rlimits(a)?;
    }
    if let Some(nice) = a.nice {
        check(
            Step::Nice,
            libc::syscall(
                libc::SYS_setpriority,
                libc::PRIO_PROCESS as libc::c_long,
                0 as libc::c_long,
                nice as libc::c_long,
            ),
        )?;
    }
    if a.ionice >= 0 {
        // IOPRIO_WHO_PROCESS, this process.
        check(
            Step::IoNice,
            libc::syscall(
                libc::SYS_ioprio_set,
                1 as libc::c_long,
                0 as libc::c_long,
                a.ionice,
            ),
        )?;
    }
    // Every signal the daemon handles or ignores to its default action,
    // while all are still blocked: the daemon's handlers must not run here,
    // and what it ignores (SIGPIPE) would stay ignored across execve. Zeroed
    // is SIG_DFL in the kernel's struct sigaction on every architecture.
    let default_action = [0u64; 4];
    let mut pending = a.reset_signals;
    while pending != 0 {
        let signal = pending.trailing_zeros() + 1;
        pending &= pending - 1;
        libc::syscall(
            libc::SYS_rt_sigaction,
            signal as libc::c_long,
            default_action.as_ptr(),
            std::ptr::null_mut::<u64>(),
            SIGSET_SIZE,
        );
    }
    check(Step::Session, libc::setsid() as libc::c_long)?;
    if a.switch_user {
        check(
            Step::Groups,
            libc::syscall(SETGROUPS, a.groups_len as libc::c_long, a.groups),
        )?;
        check(Step::Gid, libc::syscall(SETGID, a.gid as libc::c_long))?;
        check(Step::Uid, libc::syscall(SETUID, a.uid as libc::c_long))?;
        if a.rlimits_as_user {
            set_rlimits(a)?;
        }
    }
    if !a.dir.is_null() && libc::chdir(a.dir) < 0 && !a.dir_optional {
        return Err((Step::Dir, errno()));
    }
    // After the uid switch, which clears it.
    check(
        Step::DeathSignal,
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) as libc::c_long,
    )?;
    if libc::getppid() != a.parent {
        return Err((Step::ParentGone, 0));
    }
    let empty: u64 = 0;
    check(
        Step::SignalMask,
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            SIGSET_SIZE,
        ),
    )?;
    libc::execve(a.path, a.argv, a.envp);
    Err((Step::Exec, errno()))
}

/// Sets the run's rlimits on this process.
///
/// # Safety
///
/// Only for `child_steps`.
unsafe fn set_rlimits(a: &ChildArgs) -> Result<(), (Step, libc::c_int)> {
    for (resource, limit) in a.rlimits.iter().take(a.rlimits_len) {
        check(
            Step::Limits,
            libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::c_long,
                *resource as libc::c_long,
                limit as *const libc::rlimit64,
                std::ptr::null_mut::<libc::rlimit64>(),
            ),
        )?;
    }
    Ok(())
}

/// Closes every descriptor from `first` up: with close_range (Linux 5.9),
/// or one by one below the descriptor limit (older kernels). The child has
/// its own descriptor table: the daemon's stays as it is.
///
/// # Safety
///
/// Only in the child, between clone and execve.
unsafe fn close_from(first: RawFd) -> Result<(), (Step, libc::c_int)> {
    let first = first as libc::c_long;
    let last = libc::c_uint::MAX as libc::c_long;
    if libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_long) == 0 {
        return Ok(());
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    check(
        Step::CloseFds,
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) as libc::c_long,
    )?;
    let mut fd = first;
    while (fd as u64) < limit.rlim_cur.min(1 << 20) {
        // EBADF for the many that are not open is expected.
        libc::close(fd as RawFd);
        fd += 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// A cgroup's keeper.

/// A process that keeps a waiting pooled cgroup populated (see
/// `cgroup.rs`): created in the cgroup by [`Keeper::start`], ended by
/// SIGKILL only, reaped by its owner. It is the daemon's child and is
/// reaped only here, so its pid cannot be anyone else's until then: it is
/// known by its pid alone (a pidfd each would be one more descriptor that
/// every job's clone copies and closes). Its stack mapping (which it never
/// uses, but the clone wants one) is unmapped only once it is reaped.
pub(crate) struct Keeper {
    pid: Pid,
    killed: bool,
    reaped: bool,
    _stack: Stack,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper")
            .field("pid", &self.pid)
            .field("killed", &self.killed)
            .field("reaped", &self.reaped)
            .finish()
    }
}

// SAFETY: the stack mapping is only unmapped (on drop, once the keeper is
// reaped); nothing reads or writes it through this value.
unsafe impl Send for Keeper {}
// SAFETY: as for Send: no access to the mapping through a shared reference.
unsafe impl Sync for Keeper {}

impl Keeper {
    /// A keeper in the cgroup whose directory is open as `dir`; None where
    /// this cannot be done (not x86_64, no `clone3`, a kernel before 5.9,
    /// which lacks `close_range`, or the cgroup refuses a process). As for
    /// [`Launch::start`], the calling thread must outlive it: its
    /// parent-death signal follows the thread that created it (the daemon
    /// makes keepers on its one loop thread, where leaves are taken and
    /// runs finish).
    pub(crate) fn start(dir: BorrowedFd<'_>) -> Option<Keeper> {
        if KEEPERS_REFUSED.load(Ordering::Relaxed) {
            return None;
        }
        let stack = Stack::new().ok()?;
        let blocked = AllSignalsBlocked::new();
        let cloned = clone3::keeper(&stack, dir.as_raw_fd(), own_pid());
        drop(blocked);
        let pid = match cloned? {
            Ok(pid) => pid,
            // Out of processes or memory now: maybe not at the next run.
            Err(libc::EAGAIN | libc::ENOMEM) => return None,
            // Refused for good (a seccomp filter, a flag this kernel lacks).
            Err(_) => {
                KEEPERS_REFUSED.store(true, Ordering::Relaxed);
                return None;
            }
        };
        let pid = Pid::from_raw(pid)?;
        KEEPERS.fetch_add(1, Ordering::Relaxed);
        let mut keeper = Keeper {
            pid,
            killed: false,
            reaped: false,
            _stack: stack,
        };
        // One that exited at once (close_range refused, the daemon dying)
        // is reaped here.
        if keeper.exited() {
            return None;
        }
        Some(keeper)
    }

    /// How many keepers this daemon has (alive or not yet reaped).
    pub(crate) fn count() -> usize {
        KEEPERS.load(Ordering::Relaxed)
    }

    /// Its pid while it keeps its cgroup: not once it was killed (it may
    /// still be there a moment; its pid is not reused until it is reaped).
    pub(crate) fn keeping(&self) -> Option<u32> {
        (!self.killed && !self.reaped).then(|| self.pid.as_raw_nonzero().get().unsigned_abs())
    }

    /// SIGKILL (to our own unreaped child, so never to a recycled pid).
    pub(crate) fn kill(&mut self) {
        if !self.reaped {
            let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::KILL);
        }
        self.killed = true;
    }

    /// It was killed (by [`Keeper::kill`], or with its whole cgroup).
    pub(crate) fn mark_killed(&mut self) {
        self.killed = true;
    }

    /// Whether it has exited; reaps it if so (without waiting).
    /// One that exited of itself (not killed) failed a step this kernel
    /// refuses (`close_range` before Linux 5.9): no keeper is made again,
    /// rather than one per run that dies at once.
    pub(crate) fn exited(&mut self) -> bool {
        if !self.reaped {
            let got =
                rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::NOHANG);
            if let Ok(Some((_, status))) = &got {
                if status.exit_status().is_some() {
                    KEEPERS_REFUSED.store(true, Ordering::Relaxed);
                }
            }
            self.reaped = !matches!(got, Ok(None));
        }
        self.reaped
    }

    /// Kills it and waits until it is reaped (it sleeps with every signal
    /// blocked, so it dies at once, but the wait lasts as long as the
    /// kernel takes to tear it down: not on the loop's thread).
    pub(crate) fn end(&mut self) {
        if self.reaped {
            return;
        }
        self.kill();
        reap_blocking(self.pid.as_raw_nonzero().get());
        self.reaped = true;
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // Its stack is unmapped right after: it must be gone by then.
        self.end();
        KEEPERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Set once a keeper exited of itself (see [`Keeper::exited`]) or the
/// kernel refused one for good.
static KEEPERS_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keepers started and not dropped.
static KEEPERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
