//! Running one job: `shell -c command` (or an argv) in its own process group,
//! stdin from /dev/null (or given bytes), bounded output capture that never
//! blocks the child, timeout with SIGTERM → grace → SIGKILL to the whole group,
//! and the child's rusage from wait4. Decides no policy: the daemon says what
//! and when.
//!
//! # How a run is supervised
//!
//! [`spawn`] starts the child with `std::process::Command` (process group of
//! its own, stdout and stderr on one pipe so their order is the order of
//! arrival) and spawns two Tokio tasks: one reads the pipe continuously into a
//! bounded [`Capture`], the other supervises the process. The future that
//! `spawn` returns only waits for the supervisor, so dropping it does not
//! abandon the child: the run still ends, is cleaned up and reaped.
//!
//! The supervisor learns that the leader exited from a pidfd (readable on
//! exit) and `waitid(WNOWAIT)`, which looks at the exit **without reaping**.
//! The zombie leader keeps its pid, and with it the process-group id, from
//! being recycled, so every `kill(-pgid)` we send goes to the job's group and
//! nobody else's. Only when the group is empty and the output is read does
//! `wait4` reap the leader and collect its rusage; after that we never signal
//! again (the handle talks to the supervisor through a channel, which is
//! closed by then).
//!
//! # Stragglers
//!
//! When the leader exits while other processes remain in its group (a
//! forgotten `cmd &`), they get the same TERM, grace, KILL sequence, like
//! systemd's `KillMode=control-group`. The outcome keeps the leader's status
//! and exit time. Processes that left the group (`setsid`, `setpgid`) escape;
//! if one of them holds the output pipe, reading stops [`DRAIN_AFTER_GROUP`]
//! after the group is gone.
//!
//! # Requirements on the rest of the process
//!
//! - Nothing else may reap our children: no `wait()` / `waitpid(-1)` /
//!   `waitid(P_ALL)` anywhere (e.g. in a SIGCHLD handler), no `SIGCHLD` set
//!   to `SIG_IGN`, no `SA_NOCLDWAIT`. Otherwise the exit status and rusage
//!   are lost (the run then reports `Exited(-1)` and says so in its output),
//!   and worse, the pgid could be recycled while we still signal it. Do not
//!   use `tokio::process` for jobs either: it reaps without rusage.
//! - The Tokio runtime must have IO and time enabled (`enable_all`).
//! - SIGPIPE must be ignored in the daemon (Rust binaries do this by default;
//!   std restores the default disposition in children), since writing stdin
//!   to a job that exited raises it.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::Utc;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use rea_core::run::{Outcome, Output, Program, Started, Termination, Usage};

/// Everything the executor needs for one run.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub(crate) program: Program,
    /// Added to (and overriding) the daemon's own environment.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) timeout: Option<Duration>,
    /// SIGTERM → this long → SIGKILL.
    pub(crate) kill_grace: Duration,
    /// Bytes of combined stdout+stderr kept (head and tail).
    pub(crate) output_limit: usize,
    /// Fed to the child's stdin, then closed; None = /dev/null.
    pub(crate) stdin: Option<Vec<u8>>,
    /// Run as this user (uid, gid and supplementary groups), as cron does
    /// for a crontab's owner. Needs root; None = the daemon's own user.
    pub(crate) user: Option<crate::host::User>,
}

/// Lets the daemon stop a run early. Cloneable, cheap. Calling it after the
/// run ended does nothing: it never signals a pid itself, it asks the run's
/// supervisor, which is gone once the child is reaped.
#[derive(Debug, Clone)]
pub(crate) struct RunHandle {
    control: mpsc::UnboundedSender<Control>,
}

impl RunHandle {
    /// SIGTERM to the group, then SIGKILL after the spec's grace.
    pub(crate) fn terminate(&self) {
        // A closed channel means the run is over: nothing to stop.
        let _ = self.control.send(Control::Terminate);
    }

    /// SIGKILL to the group now (the supervisor's kill path, which the
    /// daemon reaches through `terminate` once a grace runs out).
    #[cfg(test)]
    pub(crate) fn kill(&self) {
        let _ = self.control.send(Control::Kill);
    }
}

/// A request from a [`RunHandle`] to the supervisor.
#[derive(Debug, Clone, Copy)]
enum Control {
    Terminate,
    #[cfg(test)]
    Kill,
}

/// How often the group is checked for remaining members while it is being
/// stopped.
const GROUP_POLL: Duration = Duration::from_millis(25);

/// How long reading continues once the group is gone and the pipe still has
/// a writer (a process that left the group). The data already in the pipe is
/// read in any case.
pub(crate) const DRAIN_AFTER_GROUP: Duration = Duration::from_millis(250);

/// How long to wait for the group to vanish after SIGKILL before giving up
/// (a process stuck in uninterruptible sleep, e.g. on a dead NFS server).
const KILL_WAIT_MAX: Duration = Duration::from_secs(5);

/// Size of one read from the output pipe.
const READ_CHUNK: usize = 64 * 1024;

/// Larger than the default 64 KiB so chatty jobs block less often on a busy
/// daemon; the kernel may refuse, which is harmless.
const PIPE_SIZE: usize = 1024 * 1024;

/// Starts the run. Must be called inside a Tokio runtime (IO and time
/// enabled). Errors are spawn failures (shell missing, dir missing) as a
/// sentence for people.
///
/// The returned future resolves when the leader has been reaped, its group
/// is empty and the output has been read. It may be dropped: the run is
/// supervised by a task of its own and still ends and is reaped.
#[allow(clippy::type_complexity)]
pub(crate) fn spawn(
    spec: RunSpec,
) -> Result<
    (
        Started,
        RunHandle,
        Pin<Box<dyn Future<Output = Outcome> + Send>>,
    ),
    String,
> {
    let (program, args) = match &spec.program {
        Program::Shell { shell, script } => (shell.as_str(), vec!["-c", script.as_str()]),
        Program::Argv(argv) => match argv.split_first() {
            Some((first, rest)) => (first.as_str(), rest.iter().map(String::as_str).collect()),
            None => return Err("nothing to run: the command is empty".to_string()),
        },
    };
    if let Some(dir) = &spec.dir {
        check_dir(dir)?;
    }

    let io_err = |what: &str, e: io::Error| format!("cannot {what} for the job: {e}");
    let (out_read, out_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_err("create the output pipe", e.into()))?;
    let _ = rustix::pipe::fcntl_setpipe_size(&out_read, PIPE_SIZE);
    let out_write_2 = out_write
        .try_clone()
        .map_err(|e| io_err("create the output pipe", e))?;
    let output_pipe =
        pipe::Receiver::from_owned_fd(out_read).map_err(|e| io_err("watch the output pipe", e))?;

    let (stdin, stdin_feed) = match &spec.stdin {
        None => (Stdio::null(), None),
        Some(bytes) => {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| io_err("create the stdin pipe", e.into()))?;
            let sender = pipe::Sender::from_owned_fd(write)
                .map_err(|e| io_err("watch the stdin pipe", e))?;
            (Stdio::from(read), Some((sender, bytes.clone())))
        }
    };

    // The Command owns our copies of the pipes' child ends; it is dropped at
    // the end of this block so that the output pipe sees EOF once the
    // job's processes are gone.
    let child = {
        let mut command = Command::new(program);
        command
            .args(&args)
            // A job must not talk to systemd as if it were rea.
            .env_remove(crate::notify::NOTIFY_SOCKET)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(stdin)
            .stdout(Stdio::from(out_write))
            .stderr(Stdio::from(out_write_2))
            .process_group(0);
        if let Some(dir) = &spec.dir {
            command.current_dir(dir);
        }
        let identity = match &spec.user {
            Some(u) => Some((crate::host::groups(u)?, u.uid, u.gid)),
            None => None,
        };
        // Only when switching users: any pre_exec hook makes std fork the
        // whole daemon instead of using posix_spawn/vfork, which is much
        // slower for a daemon holding a large job set.
        if let Some((groups, uid, gid)) = identity {
            // SAFETY: the closure runs between fork and exec in the child and
            // calls only async-signal-safe functions (setgroups, setgid,
            // setuid) on memory prepared before the fork (the group list
            // above); it allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        command
            .spawn()
            .map_err(|e| spawn_error(&spec.program, program, e))?
    };
    let started = Started {
        pid: child.id(),
        at: Utc::now(),
    };
    // std's Child neither waits nor kills on drop; we reap by pid ourselves.
    drop(child);
    let Some(pid) = i32::try_from(started.pid).ok().and_then(Pid::from_raw) else {
        // Cannot happen on Linux (pids are positive i32); nothing sensible
        // to signal or wait for either.
        return Err(format!(
            "the job started with an unusable pid {}",
            started.pid
        ));
    };

    let stdin_task = stdin_feed.map(|(mut sender, bytes)| {
        tokio::spawn(async move {
            // EPIPE (the job exited or closed stdin) is the job's business.
            let _ = sender.write_all(&bytes).await;
        })
    });
    let (stop_reading, stop_rx) = oneshot::channel();
    let reader = tokio::spawn(read_output(
        output_pipe,
        Capture::new(spec.output_limit),
        stop_rx,
    ));
    let (control, control_rx) = mpsc::unbounded_channel();
    let supervisor = tokio::spawn(supervise(Supervised {
        pid,
        started,
        timeout: spec.timeout,
        grace: spec.kill_grace,
        reader,
        stop_reading,
        stdin_task,
        control: control_rx,
    }));

    let outcome = async move {
        match supervisor.await {
            Ok(outcome) => outcome,
            // Only reachable if the supervisor panicked; the status is lost.
            Err(e) => Outcome {
                started,
                ended: Utc::now(),
                termination: Termination::Exited(-1),
                timed_out: false,
                terminated: false,
                output: Output {
                    text: format!("rea: the run's supervisor failed: {e}\n"),
                    total_bytes: 0,
                },
                usage: Usage::default(),
            },
        }
    };
    let handle = RunHandle { control };
    Ok((started, handle, Box::pin(outcome)))
}

/// Says which part of the working directory is wrong, before spawning: std
/// reports a missing directory and a missing program with the same ENOENT.
fn check_dir(dir: &Path) -> Result<(), String> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("working directory {shown} does not exist"))
        }
        Err(e) => Err(format!("cannot use working directory {shown}: {e}")),
        Ok(meta) if !meta.is_dir() => Err(format!("working directory {shown} is not a directory")),
        Ok(_) => rustix::fs::access(dir, rustix::fs::Access::EXEC_OK).map_err(|_| {
            format!("working directory {shown} is not accessible (permission denied to enter it)")
        }),
    }
}

fn spawn_error(spec_program: &Program, program: &str, e: io::Error) -> String {
    let what = match spec_program {
        Program::Shell { .. } => "shell",
        Program::Argv(_) => "program",
    };
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

/// What the supervisor task owns.
struct Supervised {
    pid: Pid,
    started: Started,
    timeout: Option<Duration>,
    grace: Duration,
    reader: JoinHandle<Capture>,
    stop_reading: oneshot::Sender<()>,
    stdin_task: Option<JoinHandle<()>>,
    control: mpsc::UnboundedReceiver<Control>,
}

async fn supervise(run: Supervised) -> Outcome {
    let Supervised {
        pid,
        started,
        timeout,
        grace,
        mut reader,
        stop_reading,
        stdin_task,
        mut control,
    } = run;
    let mut group = Group::new(pid, grace);
    let mut timed_out = false;
    let mut terminated = false;
    let mut control_open = true;
    let timeout_at = timeout.and_then(|t| Instant::now().checked_add(t));

    // Until the leader exits.
    let exit = leader_exit(pid);
    tokio::pin!(exit);
    let seen = loop {
        tokio::select! {
            seen = &mut exit => break seen,
            () = sleep_until_opt(timeout_at.filter(|_| !group.stopping())) => {
                timed_out = true;
                group.terminate();
            }
            () = sleep_until_opt(group.kill_deadline()) => group.kill(),
            msg = control.recv(), if control_open => {
                on_control(msg, &mut group, &mut terminated, &mut control_open);
            }
        }
    };
    let ended = Utc::now();

    // Until the rest of the group is gone. The zombie leader pins the pgid.
    let mut capture = None;
    let mut members = group_has_members(pid).await;
    if members != Some(false) {
        group.terminate();
    }
    while members != Some(false) {
        tokio::select! {
            () = tokio::time::sleep(GROUP_POLL) => {}
            () = sleep_until_opt(group.kill_deadline()) => group.kill(),
            msg = control.recv(), if control_open => {
                on_control(msg, &mut group, &mut terminated, &mut control_open);
            }
            done = &mut reader, if capture.is_none() => capture = Some(done.unwrap_or_default()),
        }
        if group
            .killed_at
            .is_some_and(|at| at.elapsed() > KILL_WAIT_MAX)
        {
            break;
        }
        members = group_has_members(pid).await;
        // Without /proc, the pipe's EOF or the SIGKILL has to do.
        if members.is_none() && (capture.is_some() || group.killed_at.is_some()) {
            break;
        }
    }

    // Until the output is read.
    let capture = match capture {
        Some(capture) => capture,
        None => tokio::select! {
            done = &mut reader => done.unwrap_or_default(),
            () = tokio::time::sleep(DRAIN_AFTER_GROUP) => {
                let _ = stop_reading.send(());
                (&mut reader).await.unwrap_or_default()
            }
        },
    };
    if let Some(task) = stdin_task {
        task.abort();
    }

    let (status, usage) = reap(pid).await;
    let mut output = capture.finish();
    let termination = match status.or(seen) {
        Some(termination) => termination,
        None => {
            output
                .text
                .push_str("\nrea: the exit status was lost (the process was reaped elsewhere)\n");
            Termination::Exited(-1)
        }
    };
    Outcome {
        started,
        ended,
        termination,
        timed_out,
        terminated,
        output,
        usage,
    }
}

fn on_control(msg: Option<Control>, group: &mut Group, terminated: &mut bool, open: &mut bool) {
    match msg {
        Some(Control::Terminate) => {
            *terminated = true;
            group.terminate();
        }
        #[cfg(test)]
        Some(Control::Kill) => {
            *terminated = true;
            group.kill();
        }
        None => *open = false,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The job's process group and how far stopping it has gone. Only used while
/// the leader is unreaped, so the pgid cannot belong to anyone else.
struct Group {
    pgid: Pid,
    grace: Duration,
    kill_at: Option<Instant>,
    killed_at: Option<Instant>,
}

impl Group {
    fn new(pgid: Pid, grace: Duration) -> Group {
        Group {
            pgid,
            grace,
            kill_at: None,
            killed_at: None,
        }
    }

    fn stopping(&self) -> bool {
        self.kill_at.is_some() || self.killed_at.is_some()
    }

    /// SIGTERM (and SIGCONT, so stopped processes see it) now, SIGKILL after
    /// the grace. Does nothing if stopping already began.
    fn terminate(&mut self) {
        if self.stopping() {
            return;
        }
        self.signal(Signal::TERM);
        self.signal(Signal::CONT);
        let now = Instant::now();
        self.kill_at = Some(now.checked_add(self.grace).unwrap_or(now));
    }

    fn kill(&mut self) {
        self.signal(Signal::KILL);
        self.killed_at.get_or_insert_with(Instant::now);
    }

    fn kill_deadline(&self) -> Option<Instant> {
        self.kill_at.filter(|_| self.killed_at.is_none())
    }

    fn signal(&self, signal: Signal) {
        // ESRCH (group already empty) is the expected way for this to fail.
        let _ = rustix::process::kill_process_group(self.pgid, signal);
    }
}

/// Waits until the leader has exited, without reaping it, and returns how.
/// `None` if the status cannot be seen (someone else reaped it).
async fn leader_exit(pid: Pid) -> Option<Termination> {
    if let Some(pidfd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .ok()
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open until the
        // AsyncFd (and with it the registration) is dropped.
        .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok())
    {
        loop {
            match peek_exit(pid, WaitIdOptions::NOHANG) {
                Ok(Some(seen)) => return seen,
                Ok(None) => {}
                Err(_) => return None,
            }
            match pidfd.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(_) => break,
            }
        }
    }
    exit_via_thread(pid).await
}

/// Without a pidfd (Linux < 5.3, or a seccomp filter refusing it): a
/// blocking `waitid` on a thread of the blocking pool.
async fn exit_via_thread(pid: Pid) -> Option<Termination> {
    tokio::task::spawn_blocking(move || loop {
        match peek_exit(pid, WaitIdOptions::empty()) {
            Ok(Some(seen)) => return seen,
            Ok(None) => {}
            Err(_) => return None,
        }
    })
    .await
    .ok()
    .flatten()
}

/// `waitid(WEXITED | WNOWAIT)`: `Ok(None)` while running (with NOHANG),
/// `Ok(Some(how))` once exited. Retries EINTR.
fn peek_exit(pid: Pid, extra: WaitIdOptions) -> io::Result<Option<Option<Termination>>> {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | extra;
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), options) {
            Ok(None) => return Ok(None),
            Ok(Some(status)) => {
                let how = match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) => Some(Termination::Exited(code)),
                    (None, Some(signal)) => Some(Termination::Signaled(signal)),
                    (None, None) => None,
                };
                return Ok(Some(how));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reaps the (already exited) leader with wait4 for its status and rusage.
async fn reap(pid: Pid) -> (Option<Termination>, Usage) {
    let raw = pid.as_raw_nonzero().get();
    match wait4(raw, libc::WNOHANG) {
        Some((0, _, _)) => {
            // Not exited after all (cannot happen after waitid said so);
            // wait for it on a pool thread rather than leave a zombie.
            tokio::task::spawn_blocking(move || wait4(raw, 0))
                .await
                .ok()
                .flatten()
                .map_or((None, Usage::default()), |(_, status, usage)| {
                    (termination(status), usage)
                })
        }
        Some((_, status, usage)) => (termination(status), usage),
        None => (None, Usage::default()),
    }
}

/// `wait4(pid)`, retrying EINTR: `(returned pid, status, usage)`, or `None`
/// on error (ECHILD).
fn wait4(pid: libc::pid_t, flags: libc::c_int) -> Option<(libc::pid_t, libc::c_int, Usage)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain integers, for which all-zero is valid.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid and exclusive for the call.
        let got = unsafe { libc::wait4(pid, &mut status, flags, &mut rusage) };
        if got >= 0 {
            return Some((got, status, usage(&rusage)));
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

fn termination(status: libc::c_int) -> Option<Termination> {
    if libc::WIFEXITED(status) {
        Some(Termination::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(Termination::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

fn usage(rusage: &libc::rusage) -> Usage {
    let ms = |t: libc::timeval| {
        let ms = t
            .tv_sec
            .saturating_mul(1000)
            .saturating_add(t.tv_usec / 1000);
        u64::try_from(ms).unwrap_or(0)
    };
    Usage {
        // Linux reports ru_maxrss in KiB.
        max_rss_kb: u64::try_from(rusage.ru_maxrss).unwrap_or(0),
        user_ms: ms(rusage.ru_utime),
        sys_ms: ms(rusage.ru_stime),
    }
}

/// Whether any live process other than the (zombie) leader is in the group,
/// from /proc; `None` if /proc cannot be read. `kill(-pgid, 0)` cannot tell,
/// because the unreaped leader still counts as a member.
async fn group_has_members(leader: Pid) -> Option<bool> {
    tokio::task::spawn_blocking(move || scan_group(leader))
        .await
        .ok()
        .flatten()
}

fn scan_group(leader: Pid) -> Option<bool> {
    let pgid = leader.as_raw_nonzero().get();
    // Every member of the job's group was created after its leader, so its
    // pid lies between the leader's and the last pid the kernel handed out,
    // unless the pid counter wrapped around since (then the last pid is below
    // the leader's, and every process is looked at). Reading only those stat
    // files keeps the end of each run cheap on a server with thousands of
    // processes. (A job outliving a whole cycle of the pid space while its
    // stragglers hide below its pid is not covered; its group still gets
    // every signal the timeout and shutdown send.)
    let last = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok());
    let window = last.filter(|l| *l >= pgid);
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
        })
        .filter(|pid| window.is_none_or(|last| *pid > pgid && *pid <= last))
        .collect();
    for pid in pids {
        if pid == pgid {
            continue;
        }
        // A process that vanished meanwhile is simply not a member.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if stat_is_live_member(&stat, pgid) {
            return Some(true);
        }
    }
    // Distinguish "no members" from "no /proc".
    std::fs::metadata("/proc/self/stat").ok().map(|_| false)
}

/// `/proc/PID/stat` is `pid (comm) state ppid pgrp ...`; comm may contain
/// spaces and parentheses, so fields are counted after the last `)`.
fn stat_is_live_member(stat: &str, pgid: i32) -> bool {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next();
    let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
    pgrp == Some(pgid) && !matches!(state, Some("Z" | "X" | "x"))
}

/// Reads the combined output pipe until EOF, or until told to stop (then it
/// takes what is already in the pipe and returns).
///
/// One read per `readable()`: that call counts against Tokio's cooperative
/// budget, so a job flooding its output cannot starve the daemon's other
/// tasks, even on a current-thread runtime.
async fn read_output(
    pipe: pipe::Receiver,
    mut capture: Capture,
    mut stop: oneshot::Receiver<()>,
) -> Capture {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        tokio::select! {
            ready = pipe.readable() => {
                if ready.is_err() {
                    return capture;
                }
            }
            _ = &mut stop => {
                drain(&pipe, &mut buf, &mut capture);
                return capture;
            }
        }
        match pipe.try_read(&mut buf) {
            Ok(0) => return capture,
            Ok(n) => capture.push(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return capture,
        }
    }
}

/// Takes what the pipe holds now. Bounded, because a writer outside the
/// group may keep it from ever being empty.
fn drain(pipe: &pipe::Receiver, buf: &mut [u8], capture: &mut Capture) {
    for _ in 0..=PIPE_SIZE / READ_CHUNK {
        match pipe.try_read(buf) {
            Ok(0) => return,
            Ok(n) => capture.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Bounded capture: the first half of the limit, and a ring of the last half.
/// Memory never exceeds the limit, however much the job writes.
#[derive(Debug, Default)]
struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    fn new(limit: usize) -> Capture {
        let tail_cap = limit / 2;
        Capture {
            head: Vec::new(),
            head_cap: limit - tail_cap,
            tail: VecDeque::new(),
            tail_cap,
            total: 0,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = (self.head_cap - self.head.len()).min(data.len());
        let wanted = grown_capacity(
            self.head.capacity(),
            self.head.len() + to_head,
            self.head_cap,
        );
        self.head.reserve_exact(wanted - self.head.len());
        self.head.extend_from_slice(&data[..to_head]);
        let rest = &data[to_head..];
        // Make room first, so the ring never holds (or reserves) more than
        // its share of the limit.
        let keep = if rest.len() >= self.tail_cap {
            self.tail.clear();
            &rest[rest.len() - self.tail_cap..]
        } else {
            let excess = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..excess);
            rest
        };
        let wanted = grown_capacity(
            self.tail.capacity(),
            self.tail.len() + keep.len(),
            self.tail_cap,
        );
        self.tail.reserve_exact(wanted - self.tail.len());
        self.tail.extend(keep);
    }

    fn finish(self) -> Output {
        let Capture {
            mut head,
            tail,
            total,
            ..
        } = self;
        let mut tail = Vec::from(tail);
        let kept = (head.len() + tail.len()) as u64;
        if kept == total {
            head.extend_from_slice(&tail);
            return Output {
                text: String::from_utf8_lossy(&head).into_owned(),
                total_bytes: total,
            };
        }
        // Cut at character boundaries, counting the cut bytes as omitted.
        let head_len = utf8_complete_prefix(&head);
        head.truncate(head_len);
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| is_continuation(b))
            .count();
        tail.drain(..skip);
        let omitted = total - (head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(&head).into_owned();
        text.push_str(&omission_marker(omitted));
        text.push_str(&String::from_utf8_lossy(&tail));
        Output {
            text,
            total_bytes: total,
        }
    }
}

/// The capacity to reserve for `needed` bytes: doubling as usual, but never
/// beyond `cap`, so a capture's memory stays within its limit.
fn grown_capacity(capacity: usize, needed: usize, cap: usize) -> usize {
    if needed <= capacity {
        capacity
    } else {
        needed.max(capacity.saturating_mul(2)).min(cap).max(needed)
    }
}

/// The line put between the head and the tail of a capped output.
pub(crate) fn omission_marker(omitted: u64) -> String {
    format!("\n… {omitted} bytes omitted …\n")
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Length of `bytes` without a UTF-8 character cut off at its end.
fn utf8_complete_prefix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let at = bytes.len() - back;
        let byte = bytes[at];
        if is_continuation(byte) {
            continue;
        }
        let width = match byte {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            // Not UTF-8 anyway; lossy conversion will deal with it.
            _ => return bytes.len(),
        };
        return if width > back { at } else { bytes.len() };
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> RunSpec {
        RunSpec {
            program: Program::Shell {
                shell: "/bin/sh".to_string(),
                script: script.to_string(),
            },
            env: Vec::new(),
            dir: None,
            // A safety net so a broken test fails instead of hanging.
            timeout: Some(Duration::from_secs(20)),
            kill_grace: Duration::from_millis(200),
            output_limit: 64 * 1024,
            stdin: None,
            user: None,
        }
    }

    async fn run(spec: RunSpec) -> Outcome {
        let (_, _, outcome) = spawn(spec).expect("spawn");
        outcome.await
    }

    /// Alive = exists and is not a zombie (a reparented zombie may wait for
    /// an init that never reaps, e.g. in a container).
    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_ascii_whitespace().next());
                !matches!(state, Some("Z" | "X"))
            }
            Err(_) => false,
        }
    }

    fn read_pid(path: &Path) -> i32 {
        std::fs::read_to_string(path)
            .expect("pidfile")
            .trim()
            .parse()
            .expect("pid")
    }

    #[tokio::test]
    async fn exit_codes() {
        let ok = run(sh("exit 0")).await;
        assert_eq!(ok.termination, Termination::Exited(0));
        assert!(!ok.timed_out && !ok.terminated);
        assert!(ok.ended >= ok.started.at);
        assert_eq!(run(sh("exit 3")).await.termination, Termination::Exited(3));
    }

    #[tokio::test]
    async fn killed_by_signal() {
        let outcome = run(sh("kill -9 $$")).await;
        assert_eq!(outcome.termination, Termination::Signaled(9));
    }

    #[tokio::test]
    async fn stdout_and_stderr_in_arrival_order() {
        let outcome = run(sh("echo one; echo two >&2; echo three; echo four >&2")).await;
        assert_eq!(outcome.output.text, "one\ntwo\nthree\nfour\n");
        assert_eq!(outcome.output.total_bytes, 19);
    }

    #[tokio::test]
    async fn output_cap_keeps_head_and_tail() {
        let mut spec = sh("i=0; while [ $i -lt 100 ]; do printf '%03d|' $i; i=$((i+1)); done");
        spec.output_limit = 40;
        let outcome = run(spec).await;
        assert_eq!(outcome.output.total_bytes, 400);
        let expected = format!(
            "000|001|002|003|004|{}095|096|097|098|099|",
            omission_marker(360)
        );
        assert_eq!(outcome.output.text, expected);
    }

    #[tokio::test]
    async fn flood_is_bounded() {
        let mut spec = sh("head -c 200000000 /dev/zero; echo end");
        spec.output_limit = 1000;
        let outcome = run(spec).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.output.total_bytes, 200_000_004);
        assert!(outcome.output.text.len() <= 1000 + omission_marker(200_000_004).len());
        assert!(outcome.output.text.ends_with("\0\0end\n"));
    }

    #[tokio::test]
    async fn timeout_kills_the_grandchild() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let mut spec = sh(&format!(
            "sleep 1000 & echo $! > {}; sleep 1000",
            pidfile.display()
        ));
        spec.timeout = Some(Duration::from_millis(300));
        let outcome = run(spec).await;
        assert!(outcome.timed_out);
        assert!(!outcome.terminated);
        assert_eq!(outcome.termination, Termination::Signaled(libc::SIGTERM));
        assert!(!alive(read_pid(&pidfile)), "the background sleep survived");
    }

    #[tokio::test]
    async fn term_ignoring_job_is_killed_after_grace() {
        let mut spec = sh("trap '' TERM; sleep 1000; sleep 1000");
        spec.timeout = Some(Duration::from_millis(100));
        spec.kill_grace = Duration::from_millis(200);
        let outcome = run(spec).await;
        assert!(outcome.timed_out);
        assert_eq!(outcome.termination, Termination::Signaled(libc::SIGKILL));
        let lived = (outcome.ended - outcome.started.at).num_milliseconds();
        assert!(lived >= 250, "killed before the grace ended ({lived} ms)");
    }

    #[tokio::test]
    async fn straggler_holding_stdout_is_cleaned_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let mut spec = sh(&format!(
            "sleep 1000 & echo $! > {}; echo done; exit 4",
            pidfile.display()
        ));
        spec.timeout = None;
        let outcome = run(spec).await;
        assert_eq!(outcome.termination, Termination::Exited(4));
        assert!(!outcome.timed_out && !outcome.terminated);
        assert_eq!(outcome.output.text, "done\n");
        assert!(!alive(read_pid(&pidfile)), "the straggler survived");
    }

    #[tokio::test]
    async fn straggler_ignoring_term_is_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let mut spec = sh(&format!(
            "(trap '' TERM; sleep 1000; sleep 1000) >/dev/null 2>&1 & echo $! > {}",
            pidfile.display()
        ));
        spec.timeout = None;
        let outcome = run(spec).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert!(!alive(read_pid(&pidfile)), "the straggler survived");
    }

    #[tokio::test]
    async fn terminate_mid_run() {
        let mut spec = sh("echo started; sleep 1000");
        spec.timeout = None;
        let (_, handle, outcome) = spawn(spec).expect("spawn");
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.terminate();
        let outcome = outcome.await;
        assert!(outcome.terminated && !outcome.timed_out);
        assert_eq!(outcome.termination, Termination::Signaled(libc::SIGTERM));
        assert_eq!(outcome.output.text, "started\n");
        // The run is over: both are no-ops, and must not panic or signal.
        handle.terminate();
        handle.kill();
    }

    #[tokio::test]
    async fn kill_mid_run() {
        let mut spec = sh("trap '' TERM; sleep 1000; sleep 1000");
        spec.timeout = None;
        spec.kill_grace = Duration::from_secs(1000);
        let (_, handle, outcome) = spawn(spec).expect("spawn");
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.terminate();
        handle.kill();
        let outcome = outcome.await;
        assert!(outcome.terminated);
        assert_eq!(outcome.termination, Termination::Signaled(libc::SIGKILL));
    }

    #[tokio::test]
    async fn dropped_outcome_future_still_reaps() {
        let (started, handle, outcome) = spawn(sh("exit 0")).expect("spawn");
        drop(outcome);
        drop(handle);
        let pid = started.pid as i32;
        for _ in 0..200 {
            if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("pid {pid} was never reaped");
    }

    #[tokio::test]
    async fn stdin_is_dev_null() {
        let outcome = run(sh("cat; readlink /proc/self/fd/0")).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.output.text, "/dev/null\n");
    }

    #[tokio::test]
    async fn stdin_bytes_are_delivered() {
        let mut spec = sh("cat");
        spec.stdin = Some(b"hello\nworld\n".to_vec());
        assert_eq!(run(spec).await.output.text, "hello\nworld\n");

        // Larger than any pipe buffer: written without blocking the runtime.
        let mut spec = sh("wc -c");
        spec.stdin = Some(vec![b'x'; 3_000_000]);
        assert_eq!(run(spec).await.output.text.trim(), "3000000");
    }

    #[tokio::test]
    async fn stdin_not_read_does_not_hang() {
        let mut spec = sh("exit 0");
        spec.stdin = Some(vec![b'x'; 3_000_000]);
        assert_eq!(run(spec).await.termination, Termination::Exited(0));
    }

    #[tokio::test]
    async fn env_overlay_and_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spec = sh("echo \"$REA_JOB\"; pwd -P; test -n \"$PATH\" && echo path");
        spec.env = vec![("REA_JOB".to_string(), "backup".to_string())];
        spec.dir = Some(dir.path().to_path_buf());
        let outcome = run(spec).await;
        let real = std::fs::canonicalize(dir.path()).expect("canonicalize");
        assert_eq!(
            outcome.output.text,
            format!("backup\n{}\npath\n", real.display())
        );
    }

    #[tokio::test]
    async fn rusage_memory_and_cpu() {
        let outcome = run(sh("perl -e '$x = \"a\" x 50_000_000; print length $x'")).await;
        assert_eq!(outcome.output.text, "50000000");
        assert!(
            outcome.usage.max_rss_kb > 40_000,
            "max_rss_kb = {}",
            outcome.usage.max_rss_kb
        );

        let outcome = run(sh("perl -e '1 until (times)[0] >= 0.05'")).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert!(outcome.usage.user_ms > 0, "{:?}", outcome.usage);
    }

    #[tokio::test]
    async fn spawn_errors_name_what_is_missing() {
        let mut spec = sh("true");
        spec.program = Program::Shell {
            shell: "/nonexistent/sh".to_string(),
            script: "true".to_string(),
        };
        let err = spawn(spec).err().expect("error");
        assert_eq!(err, "shell /nonexistent/sh does not exist");

        let mut spec = sh("true");
        spec.dir = Some(PathBuf::from("/nonexistent/dir"));
        let err = spawn(spec).err().expect("error");
        assert_eq!(err, "working directory /nonexistent/dir does not exist");

        let mut spec = sh("true");
        spec.program = Program::Argv(vec!["rea-no-such-program".to_string()]);
        let err = spawn(spec).err().expect("error");
        assert_eq!(err, "program rea-no-such-program was not found in PATH");

        let mut spec = sh("true");
        spec.program = Program::Argv(vec!["/dev/null".to_string()]);
        let err = spawn(spec).err().expect("error");
        assert!(
            err.starts_with("permission denied running program /dev/null"),
            "{err}"
        );

        let mut spec = sh("true");
        spec.program = Program::Argv(Vec::new());
        assert!(spawn(spec).is_err());
    }

    #[tokio::test]
    async fn argv_runs_without_a_shell() {
        let mut spec = sh("");
        spec.program = Program::Argv(vec![
            "printf".to_string(),
            "%s|".to_string(),
            "a b".to_string(),
            "$HOME".to_string(),
        ]);
        let outcome = run(spec).await;
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.output.text, "a b|$HOME|");
    }

    #[tokio::test]
    async fn child_inherits_none_of_our_fds() {
        // While another run holds a pidfd and pipes, a new child's fds above
        // 2 are only those the test process itself leaves inheritable.
        let mut busy = sh("sleep 1000");
        busy.stdin = Some(Vec::new());
        busy.timeout = None;
        let (_, busy_handle, busy_outcome) = spawn(busy).expect("spawn");
        let mut spec = sh("");
        spec.program = Program::Argv(["ls", "-l", "/proc/self/fd"].map(String::from).to_vec());
        let outcome = run(spec).await;
        busy_handle.kill();
        busy_outcome.await;
        let ours = inheritable_fd_targets();
        let mut fds: Vec<(i32, &str)> = outcome
            .output
            .text
            .lines()
            .filter_map(|line| {
                let (left, target) = line.split_once(" -> ")?;
                let fd = left.rsplit(' ').next()?.parse().ok()?;
                Some((fd, target))
            })
            .collect();
        fds.sort();
        assert_eq!(fds.first(), Some(&(0, "/dev/null")), "{fds:?}");
        assert!(
            fds[1].1.starts_with("pipe:") && fds[1].1 == fds[2].1,
            "{fds:?}"
        );
        for &(fd, target) in &fds[3..] {
            // ls's own handle on the directory it lists.
            if target.starts_with("/proc/") {
                continue;
            }
            assert!(ours.iter().any(|t| t == target), "leaked fd {fd}: {target}");
        }
    }

    fn inheritable_fd_targets() -> Vec<String> {
        let mut targets = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fd")
            .expect("fd dir")
            .flatten()
        {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: F_GETFD on any number is harmless; an invalid fd gives -1.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                if let Ok(target) = std::fs::read_link(entry.path()) {
                    targets.push(target.display().to_string());
                }
            }
        }
        targets
    }

    #[tokio::test]
    // Reaped by pid through `reap`, which is what is being tested.
    #[allow(clippy::zombie_processes)]
    async fn exit_is_seen_without_a_pidfd_too() {
        let child = Command::new("/bin/sh")
            .args(["-c", "exit 5"])
            .process_group(0)
            .spawn()
            .expect("spawn");
        let pid = Pid::from_raw(child.id() as i32).expect("pid");
        // Seen without reaping, so it can be seen again, then reaped.
        assert_eq!(exit_via_thread(pid).await, Some(Termination::Exited(5)));
        assert_eq!(leader_exit(pid).await, Some(Termination::Exited(5)));
        let (status, _) = reap(pid).await;
        assert_eq!(status, Some(Termination::Exited(5)));
        assert_eq!(reap(pid).await.0, None, "reaped twice");
    }

    #[test]
    fn capture_without_limit_hit_is_verbatim() {
        let mut capture = Capture::new(10);
        capture.push(b"abc");
        capture.push(b"defghij");
        assert_eq!(
            capture.finish(),
            Output {
                text: "abcdefghij".to_string(),
                total_bytes: 10
            }
        );
    }

    #[test]
    fn capture_ring_keeps_the_last_bytes_across_pushes() {
        let mut capture = Capture::new(6);
        for chunk in [&b"abcd"[..], b"efgh", b"ijklmnop", b"q", b"rs"] {
            capture.push(chunk);
        }
        let output = capture.finish();
        assert_eq!(output.total_bytes, 19);
        assert_eq!(output.text, format!("abc{}qrs", omission_marker(13)));
    }

    #[test]
    fn capture_memory_stays_within_the_limit() {
        let mut capture = Capture::new(1000);
        for size in [1, 7, 300, 64 * 1024, 3, 499, 501, 10_000] {
            capture.push(&vec![b'x'; size]);
            assert!(
                capture.head.capacity() <= 500,
                "{}",
                capture.head.capacity()
            );
            assert!(
                capture.tail.capacity() <= 500,
                "{}",
                capture.tail.capacity()
            );
        }
        assert_eq!(capture.total, 76_847);
    }

    #[test]
    fn capture_does_not_split_characters() {
        // "é" is 2 bytes, "€" is 3: the head cut falls inside "é", the tail
        // cut inside "€".
        let mut capture = Capture::new(8);
        capture.push("aaaé".as_bytes());
        capture.push(&[b'-'; 10]);
        capture.push("€bc".as_bytes());
        let output = capture.finish();
        assert_eq!(output.total_bytes, 20);
        assert_eq!(output.text, format!("aaa{}bc", omission_marker(15)));
    }

    #[test]
    fn capture_with_zero_limit_keeps_only_the_count() {
        let mut capture = Capture::new(0);
        capture.push(b"xyz");
        let output = capture.finish();
        assert_eq!(output.text, omission_marker(3));
        assert_eq!(output.total_bytes, 3);
        assert_eq!(Capture::new(0).finish(), Output::default());
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "4242 (we ird) (x) S 1 777 777 0 -1";
        assert!(stat_is_live_member(stat, 777));
        assert!(!stat_is_live_member(stat, 4242));
        assert!(!stat_is_live_member("4242 (z) Z 1 777 777", 777));
    }
}

#[cfg(test)]
mod user_tests {
    use super::*;

    /// As root, a job runs with the user's uid, gid and groups.
    #[tokio::test]
    async fn a_job_runs_as_its_user() {
        if !crate::host::is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let nobody = crate::host::user("nobody").expect("nobody exists");
        let spec = RunSpec {
            program: Program::Shell {
                shell: "/bin/sh".into(),
                script: "id -u; id -g".into(),
            },
            env: Vec::new(),
            dir: Some("/".into()),
            timeout: Some(Duration::from_secs(20)),
            kill_grace: Duration::from_millis(200),
            output_limit: 4096,
            stdin: None,
            user: Some(nobody.clone()),
        };
        let (_, _, fut) = spawn(spec).expect("spawn");
        let o = fut.await;
        assert_eq!(o.output.text, format!("{}\n{}\n", nobody.uid, nobody.gid));
    }
}
