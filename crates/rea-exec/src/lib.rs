//! Running one job: `shell -c command` (or an argv) as the leader of a new
//! session, stdin from /dev/null (or given bytes), bounded output capture
//! that never blocks the child, timeout with SIGTERM → grace → SIGKILL to the
//! whole process group, and the child's rusage from wait4. Decides no
//! policy: the daemon says what and when.
//!
//! - `process`: creating the child without forking the daemon (clone with
//!   CLONE_VM | CLONE_VFORK, as posix_spawn does), and what it starts with.
//! - `group`: signalling the job's process group and finding out whether
//!   anyone is left in it.
//! - `capture`: reading the output pipe into a bounded buffer.
//! - `tap`: the same output as it comes, for followers (`rea logs -f`).
//! - `journald`: output lines sent to the systemd journal as they come
//!   (`job_output = "journal"`).
//!
//! The crate knows nothing of jobs, schedules or the daemon's loop: it is
//! handed a [`RunSpec`] and hands back an [`Outcome`].
//!
//! # How a run is supervised
//!
//! [`spawn`] creates the child (a session and process group of its own,
//! stdout and stderr on one pipe so their order is the order of arrival,
//! every other descriptor closed, default signal dispositions, killed with
//! SIGKILL if the daemon dies) and spawns Tokio tasks, never threads: one
//! reads the pipe into a bounded capture, one supervises the process. The
//! future that `spawn` returns only waits for the supervisor, so dropping it
//! does not abandon the child: the run still ends, is cleaned up and reaped.
//!
//! The supervisor learns that the leader exited from its pidfd (created with
//! the process, readable on exit) and `waitid(WNOWAIT)`, which looks at the
//! exit without reaping; until then the leader's pid, and with it the
//! process-group id, cannot be recycled, so every `kill(-pgid)` sent while
//! it runs (timeout, terminate) goes to the job's group and nobody else's.
//! Then `wait4` reaps the leader and collects its rusage. From there on the
//! pgid is held by the group's remaining members (Linux does not hand out
//! a number while any process uses it as its group), so `kill(-pgid, 0)`
//! failing with ESRCH means the group is empty: the common case needs no
//! /proc scan and no thread. Only if someone is left does the group module
//! look in /proc whether they are alive or zombies, and every signal is
//! preceded by the same check, so none reaches a recycled group. Once the
//! group is empty we never signal again (the handle talks to the supervisor
//! through a channel, which is closed when the run ends). If the child
//! exists but cannot be supervised (its pidfd cannot be watched), its group
//! is killed and reaped and the spawn fails: a run is never left unwatched.
//!
//! # Stragglers
//!
//! When the leader exits while other processes remain in its group (a
//! forgotten `cmd &`), they get the same TERM, grace, KILL sequence, like
//! systemd's `KillMode=control-group`; the outcome keeps the leader's status
//! and exit time. With `kill_stragglers = false` (cron's behaviour, for
//! `nohup cmd &` lines) the run ends with its leader and the rest of the
//! group is left alone, unless the run was being stopped (timeout,
//! terminate) when the leader exited.
//!
//! # A cgroup per run
//!
//! With [`RunSpec::cgroup`] the run is its cgroup, not its process group
//! (see [`cgroup`]): TERM goes to every process in it, KILL is `cgroup.kill`,
//! and "anyone left" is `populated` in `cgroup.events`, waited for through
//! `EPOLLPRI` on it rather than polled. A run's leaf is reused by the
//! tenant's next runs once empty, where its figures allow
//! ([`cgroup::Pool`]). Processes that left the process group
//! (`setsid`, `setpgid`, double forks) are still in the cgroup, so they are
//! stopped with the rest, and the CPU figures are the cgroup's (every
//! process the run had). Leftovers of `kill_stragglers = false` stay in the
//! run's cgroup, which is left in place until it empties (then removed);
//! they are not stopped by a daemon stop either, as before.
//!
//! Without a cgroup, processes that left the group escape; if one of them
//! (or a straggler left alone) holds the output pipe, reading stops
//! [`DRAIN_AFTER_GROUP`] after the group is gone (or the leader exited):
//! what it writes later gets EPIPE.
//!
//! # Requirements on the rest of the process
//!
//! - Linux 5.3 or later (pidfds; `close_range` from 5.9 is used when there).
//! - Nothing else may reap our children: no `wait()` / `waitpid(-1)` /
//!   `waitid(P_ALL)` anywhere (e.g. in a SIGCHLD handler), no `SIGCHLD` set
//!   to `SIG_IGN`, no `SA_NOCLDWAIT`. Otherwise the exit status and rusage
//!   are lost (the run then reports `Exited(-1)` and says so in its output),
//!   and worse, the pgid could be recycled while we still signal it. Do not
//!   use `tokio::process` for jobs either: it reaps without rusage.
//! - The Tokio runtime must have IO and time enabled (`enable_all`).
//! - [`spawn`] must be called on a thread that outlives the runs it starts
//!   (the daemon's loop thread): the parent-death signal is sent when the
//!   thread that created a process exits.

mod capture;
pub mod cgroup;
mod group;
pub mod journald;
mod process;
mod tap;
mod utf8;

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::Utc;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use rea_core::run::{Limits, Outcome, Output, Program, Started, Termination, Usage};

use capture::{read_output, Capture};
use group::Group;
pub use process::{daemon_has_path, DEFAULT_PATH};
pub use tap::Follower;

/// Everything the executor needs for one run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub program: Program,
    /// The child's variables: added to (and overriding) the daemon's own
    /// environment if `inherit_env`, else all it gets.
    pub env: Vec<(String, String)>,
    /// Whether the child starts from the daemon's environment.
    pub inherit_env: bool,
    /// Where the child starts; it fails to start if it cannot enter it.
    pub dir: Option<PathBuf>,
    /// Where the child starts when `dir` is None, if it can enter it (the
    /// owner's home, as cron); else it stays in the daemon's directory.
    /// Tried by the child itself, as the job's user: no check here.
    pub home: Option<PathBuf>,
    pub timeout: Option<Duration>,
    /// SIGTERM → this long → SIGKILL.
    pub kill_grace: Duration,
    /// Bytes of combined stdout+stderr kept (head and tail).
    pub output_limit: usize,
    /// Fed to the child's stdin, then closed; None = /dev/null.
    pub stdin: Option<Vec<u8>>,
    /// Given to the child as descriptor [`PASSED_FD`] (a hook's output
    /// file); every other descriptor above 2 is closed.
    pub pass_fd: Option<Arc<OwnedFd>>,
    /// Run as this user (uid, gid and supplementary groups), as cron does
    /// for a crontab's owner. Needs root; None = the daemon's own user.
    pub user: Option<rea_host::user::User>,
    /// When the leader exits on its own, stop what is left of its group
    /// (true), or leave it running and end the run (false).
    pub kill_stragglers: bool,
    /// Also send the output, line by line as it comes, to the journal
    /// (`[daemon] job_output = "journal"`).
    pub journald: Option<crate::journald::Lines>,
    /// The run's own cgroup; None = its process group only.
    pub cgroup: Option<cgroup::CgroupSpec>,
    /// Limits: the cgroup ones go to the run's cgroup (skipped without
    /// one, or without the controller: the daemon says so), the process
    /// ones are set in the child before it executes the command.
    pub limits: Limits,
}

/// The descriptor number at which the child finds [`RunSpec::pass_fd`].
pub const PASSED_FD: i32 = 3;

/// Lets the daemon stop a run early. Cloneable, cheap. Calling it after the
/// run ended does nothing: it never signals a pid itself, it asks the run's
/// supervisor, which is gone once the child is reaped.
#[derive(Debug, Clone)]
pub struct RunHandle {
    control: mpsc::UnboundedSender<Control>,
    tap: tap::Tap,
    /// The run's cgroup, while it has one, and which of the leaf's runs
    /// this is (a pooled leaf serves later runs once this one is over):
    /// what it has used so far.
    leaf: Option<(Arc<cgroup::Leaf>, u64)>,
}

impl RunHandle {
    /// What the run has used so far, from its cgroup (CPU always, memory
    /// and the rest where their controllers are on); None in process-group
    /// mode. A few small reads: for `rea status`, not for a hot path.
    pub fn usage_now(&self) -> Option<Usage> {
        let (leaf, run) = self.leaf.as_ref()?;
        let mut usage = Usage::default();
        leaf.usage_of(*run, &mut usage);
        usage.from_cgroup.then_some(usage)
    }

    /// Follows the run's output: what was captured so far, then what comes.
    pub fn follow(&self) -> Follower {
        self.tap.follow()
    }

    /// SIGTERM to the group, then SIGKILL after the spec's grace.
    pub fn terminate(&self) {
        // A closed channel means the run is over: nothing to stop.
        let _ = self.control.send(Control::Terminate);
    }

    /// SIGKILL to the group now (the supervisor's kill path, which the
    /// daemon reaches through `terminate` once a grace runs out).
    #[cfg(test)]
    pub fn kill(&self) {
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
pub const DRAIN_AFTER_GROUP: Duration = Duration::from_millis(250);

/// How long to wait for the group to vanish after SIGKILL before giving up
/// (a process stuck in uninterruptible sleep, e.g. on a dead NFS server).
const KILL_WAIT_MAX: Duration = Duration::from_secs(5);

/// The longest pause between two looks at an exited child that could not
/// be reaped yet (see [`reap`]).
const REAP_POLL_MAX: Duration = Duration::from_secs(1);

/// The future [`spawn`] returns: the run's outcome once it is over.
pub type Running = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// Starts the run. Must be called inside a Tokio runtime (IO and time
/// enabled), on a thread that outlives the run (see the module
/// documentation). Errors are spawn failures (shell missing, dir missing, no
/// process could be created, the child could not be supervised) as a
/// sentence for people.
///
/// The returned future resolves when the leader has been reaped, its group
/// is empty (or left alone) and the output has been read. It may be
/// dropped: the run is supervised by a task of its own and still ends and
/// is reaped.
pub fn spawn(spec: RunSpec) -> Result<(Started, RunHandle, Running), String> {
    let launch = process::Launch::prepare(&spec)?;
    // Before the child: it is created in the leaf (or places itself there
    // first thing).
    let mut leaf = match &spec.cgroup {
        Some(place) => Some(cgroup::Leaf::take(place, &spec.limits)?),
        None => None,
    };
    // Given back (to its pool, where it may wait again) if the spawn fails
    // from here on, rather than made and removed again at every failure.
    let mut taken = Taken(leaf.clone());

    let io_err = |what: &str, e: io::Error| format!("cannot {what} for the job: {e}");
    let (out_read, out_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io_err("create the output pipe", e.into()))?;
    // Our end only is non-blocking: the job's stays as programs expect.
    rustix::fs::fcntl_setfl(&out_read, rustix::fs::OFlags::NONBLOCK)
        .map_err(|e| io_err("watch the output pipe", e.into()))?;
    // What `from_owned_fd` would check (a pipe, readable) is known here.
    let output_pipe = pipe::Receiver::from_owned_fd_unchecked(out_read)
        .map_err(|e| io_err("watch the output pipe", e))?;

    let (stdin_pipe, stdin_feed) = match &spec.stdin {
        None => (None, None),
        Some(bytes) => {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| io_err("create the stdin pipe", e.into()))?;
            let sender = pipe::Sender::from_owned_fd(write)
                .map_err(|e| io_err("watch the stdin pipe", e))?;
            (Some(read), Some((sender, bytes.clone())))
        }
    };
    let stdin = match &stdin_pipe {
        Some(read) => read.as_fd(),
        None => dev_null().map_err(|e| io_err("open /dev/null", e))?,
    };

    let stdio = || process::Stdio {
        stdin,
        output: out_write.as_fd(),
        fd3: spec.pass_fd.as_deref().map(AsFd::as_fd),
    };
    let mut child = launch.start(stdio(), leaf.as_deref().map(cgroup::Leaf::fds));
    // Killed as it was created: its leaf had been killed from outside
    // while it waited in its pool. The leaf goes, and the run is created
    // once more in a new one (the child ran nothing of the job's).
    if let (Err(process::StartError::Unborn), Some(place)) = (&child, &spec.cgroup) {
        let Some(old) = leaf.take() else {
            return Err(String::from(process::StartError::Unborn));
        };
        taken.0 = None;
        old.retire();
        old.finish(&mut Usage::default(), true);
        let fresh = cgroup::Leaf::take(place, &spec.limits)?;
        taken.0 = Some(fresh.clone());
        child = launch.start(stdio(), Some(fresh.fds()));
        leaf = Some(fresh);
    }
    let child = child.map_err(String::from)?;
    // The child has its copies: ours would keep the output pipe from
    // reaching EOF once the job's processes are gone.
    drop(out_write);
    drop(stdin_pipe);
    let pid = child.pid;
    let started = Started {
        pid: pid.as_raw_nonzero().get().unsigned_abs(),
        at: Utc::now(),
    };
    let pidfd = match watch_exit(pid, child.pidfd) {
        Ok(pidfd) => pidfd,
        Err(e) => {
            if let Some(leaf) = &leaf {
                leaf.kill();
            }
            abandon(pid);
            return Err(format!(
                "cannot supervise the job ({e}): its process group was killed"
            ));
        }
    };

    taken.0 = None;

    let stdin_task = stdin_feed.map(|(mut sender, bytes)| {
        tokio::spawn(async move {
            // EPIPE (the job exited or closed stdin) is the job's business.
            let _ = sender.write_all(&bytes).await;
        })
    });
    let (stop_reading, stop_rx) = oneshot::channel();
    let tap = tap::Tap::new(Capture::new(spec.output_limit));
    let reader = tokio::spawn(read_output(
        output_pipe,
        tap.clone(),
        spec.journald,
        stop_rx,
    ));
    let (control, control_rx) = mpsc::unbounded_channel();
    let live_leaf = leaf.clone().map(|l| {
        let run = l.current();
        (l, run)
    });
    let supervisor = tokio::spawn(supervise(Supervised {
        pid,
        pidfd,
        started,
        timeout: spec.timeout,
        grace: spec.kill_grace,
        kill_stragglers: spec.kill_stragglers,
        leaf,
        spawner_peak_rss_kb: child.spawner_peak_rss_kb,
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
    let handle = RunHandle {
        control,
        tap,
        leaf: live_leaf,
    };
    Ok((started, handle, Box::pin(outcome)))
}

/// A run's leaf between [`cgroup::Leaf::take`] and its supervision: if the
/// spawn fails on the way, the leaf (empty: a child that failed a step has
/// been reaped, one that could not be watched was killed with its leaf)
/// is finished as a run's would be.
struct Taken(Option<Arc<cgroup::Leaf>>);

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(leaf) = self.0.take() {
            leaf.finish(&mut Usage::default(), true);
        }
    }
}

/// /dev/null for stdin, opened once (close-on-exec, like every descriptor
/// of ours).
fn dev_null() -> io::Result<std::os::fd::BorrowedFd<'static>> {
    static DEV_NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = DEV_NULL.get() {
        return Ok(fd.as_fd());
    }
    let fd = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok(DEV_NULL.get_or_init(|| fd).as_fd())
}

/// The child's pidfd, registered with the runtime so its exit wakes the
/// supervisor. Without one from the clone (a kernel that ignores
/// CLONE_PIDFD), pidfd_open.
fn watch_exit(pid: Pid, pidfd: Option<OwnedFd>) -> io::Result<AsyncFd<OwnedFd>> {
    let pidfd = match pidfd {
        Some(fd) => fd,
        None => rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?,
    };
    // SAFETY: the AsyncFd owns the OwnedFd, which stays open (and the same
    // pidfd) until the AsyncFd, and with it the registration, is dropped.
    unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// The child exists but cannot be supervised: kill its group now, and reap
/// it (polling with timers, which need neither a descriptor nor a thread).
/// The leader is unreaped until then, so the pgid is still the job's.
fn abandon(pid: Pid) {
    let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    tokio::spawn(async move {
        reap(pid).await;
    });
}

/// What the supervisor task owns.
struct Supervised {
    pid: Pid,
    pidfd: AsyncFd<OwnedFd>,
    started: Started,
    timeout: Option<Duration>,
    grace: Duration,
    kill_stragglers: bool,
    leaf: Option<Arc<cgroup::Leaf>>,
    spawner_peak_rss_kb: u64,
    reader: JoinHandle<Capture>,
    stop_reading: oneshot::Sender<()>,
    stdin_task: Option<JoinHandle<()>>,
    control: mpsc::UnboundedReceiver<Control>,
}

async fn supervise(run: Supervised) -> Outcome {
    let Supervised {
        pid,
        pidfd,
        started,
        timeout,
        grace,
        kill_stragglers,
        leaf,
        spawner_peak_rss_kb,
        mut reader,
        stop_reading,
        stdin_task,
        mut control,
    } = run;
    let mut group = Group::new(pid, grace, leaf.clone());
    let mut timed_out = false;
    let mut terminated = false;
    let mut control_open = true;
    let timeout_at = timeout.and_then(|t| Instant::now().checked_add(t));

    // Until the leader exits.
    let seen = {
        let exit = leader_exit(pid, &pidfd);
        tokio::pin!(exit);
        loop {
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
        }
    };
    let ended = Utc::now();
    drop(pidfd);
    let (status, mut usage) = reap(pid).await;
    usage.max_rss_kb = job_peak_rss(usage.max_rss_kb, spawner_peak_rss_kb);
    // From here on only the group's members hold the pgid.
    group.leader_reaped();

    // Until the rest of the group is gone, unless it is to be left alone.
    let mut capture = None;
    let leave_group = !kill_stragglers && !group.stopping();
    let mut members = if leave_group {
        Some(false)
    } else {
        group.has_members().await
    };
    if members != Some(false) {
        group.terminate();
    }
    while members != Some(false) {
        tokio::select! {
            () = group::changed(leaf.as_deref()) => {}
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
        members = group.has_members().await;
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
    drop(group);
    if let Some(leaf) = leaf {
        if status.or(seen) == Some(Termination::Signaled(libc::SIGKILL)) {
            leaf.retire();
        }
        // Everything the run ever started, measured whole.
        if leave_group {
            leaf.usage(&mut usage);
            // `kill_stragglers = false`: what the leader left keeps running
            // in the run's cgroup, which stays until it is empty.
            leaf.remove_when_empty();
        } else {
            leaf.finish(&mut usage, members == Some(false));
        }
    }

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

/// The job's peak resident size from what wait4 reported, or 0 when it
/// cannot be told apart from the daemon's memory.
///
/// wait4's `ru_maxrss` is the largest of the leader's and of every
/// descendant it waited for. The descendants' figures are their own. The
/// leader's is not: it began life sharing the daemon's memory (CLONE_VM; a
/// forked child starts with the daemon's resident pages instead), and
/// execve folds the high-water mark of the memory it leaves into the
/// process's `maxrss`, so the leader reports at least the daemon's peak at
/// the time, however little the job used. Linux keeps no separate figure
/// for the leader's own memory after execve once it has exited. So a
/// figure above the daemon's peak (read once the child had called execve)
/// is the job's own — its leader's or a descendant's — and is reported;
/// anything else is at most the daemon's peak and is reported as 0, "not
/// measurable", rather than as the daemon's memory.
fn job_peak_rss(reported_kb: u64, spawner_peak_kb: u64) -> u64 {
    if reported_kb > spawner_peak_kb {
        reported_kb
    } else {
        0
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

/// Waits until the leader has exited, without reaping it, and returns how.
/// `None` if the status cannot be seen (someone else reaped it).
async fn leader_exit(pid: Pid, pidfd: &AsyncFd<OwnedFd>) -> Option<Termination> {
    loop {
        match peek_exit(pid) {
            Ok(Some(seen)) => return seen,
            Ok(None) => {}
            Err(_) => return None,
        }
        match pidfd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            // The runtime's IO driver is gone (shutting down): look now
            // and then instead, still without a thread.
            Err(_) => tokio::time::sleep(GROUP_POLL).await,
        }
    }
}

/// `waitid(WEXITED | WNOWAIT | WNOHANG)`: `Ok(None)` while running,
/// `Ok(Some(how))` once exited. Retries EINTR.
fn peek_exit(pid: Pid) -> io::Result<Option<Option<Termination>>> {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
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

/// Reaps the leader with wait4 for its status and rusage. It has exited
/// (or was just killed), so this is immediate; should it not be yet, it is
/// looked at again after a growing pause, never waited for on a thread.
/// `None` status if someone else reaped it.
async fn reap(pid: Pid) -> (Option<Termination>, Usage) {
    let raw = pid.as_raw_nonzero().get();
    let mut pause = Duration::from_millis(5);
    loop {
        match wait4(raw, libc::WNOHANG) {
            Some((0, _, _)) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REAP_POLL_MAX);
            }
            Some((_, status, usage)) => return (termination(status), usage),
            None => return (None, Usage::default()),
        }
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
        ..Usage::default()
    }
}

#[cfg(test)]
mod tests;
