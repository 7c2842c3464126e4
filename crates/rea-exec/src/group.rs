//! A job's process group: stopping it (SIGTERM, grace, SIGKILL) and finding
//! out whether anyone is still in it once its leader has been reaped. With
//! a cgroup of its own ([`crate::cgroup`]) the run is that cgroup instead:
//! TERM to every process in it, `cgroup.kill`, and `cgroup.events` for
//! "anyone left"; the process group is the fallback without one.
//!
//! `kill(-pgid, 0)` answers "nobody" (ESRCH) at the cost of one system
//! call, which is the answer at the end of almost every run. When it says
//! "somebody", that may be zombies whose parent has not reaped them yet,
//! which signals cannot stop; /proc tells them from live processes. Reading
//! /proc takes a while on a server with thousands of processes, so it is not
//! done on the daemon's loop thread: one long-lived scanner thread answers
//! every run's question, several at a time in one pass over /proc. No thread
//! is created per run. If the scanner cannot be started (the thread or
//! process limit is reached, which is when runs most need supervising), the
//! scan runs inline instead: slower, but the group is never left unwatched.

use std::fs::File;
use std::io::Read;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The job's process group and how far stopping it has gone. While the
/// leader is unreaped it holds the pgid; after that the members do, and a
/// signal is sent only if one is there (see [`Group::signal`]), so the
/// pgid cannot belong to anyone else.
pub(super) struct Group {
    pgid: Pid,
    /// The run's cgroup, when it has one.
    pub(super) leaf: Option<Arc<crate::cgroup::Leaf>>,
    grace: Duration,
    kill_at: Option<Instant>,
    pub(super) killed_at: Option<Instant>,
    leader_reaped: bool,
}

impl Group {
    pub(super) fn new(pgid: Pid, grace: Duration, leaf: Option<Arc<crate::cgroup::Leaf>>) -> Group {
        Group {
            pgid,
            leaf,
            grace,
            kill_at: None,
            killed_at: None,
            leader_reaped: false,
        }
    }

    /// The leader has been reaped: from now on only members hold the pgid.
    pub(super) fn leader_reaped(&mut self) {
        self.leader_reaped = true;
    }

    pub(super) fn stopping(&self) -> bool {
        self.kill_at.is_some() || self.killed_at.is_some()
    }

    /// SIGTERM (and SIGCONT, so stopped processes see it) now, SIGKILL after
    /// the grace. Does nothing if stopping already began.
    pub(super) fn terminate(&mut self) {
        if self.stopping() {
            return;
        }
        self.signal(Signal::TERM);
        self.signal(Signal::CONT);
        let now = Instant::now();
        self.kill_at = Some(now.checked_add(self.grace).unwrap_or(now));
    }

    pub(super) fn kill(&mut self) {
        match &self.leaf {
            Some(leaf) => leaf.kill(),
            None => self.signal(Signal::KILL),
        }
        self.killed_at.get_or_insert_with(Instant::now);
    }

    /// Whether any live process is left, the leader having been reaped;
    /// `None` if that cannot be told.
    pub(super) async fn has_members(&self) -> Option<bool> {
        match &self.leaf {
            Some(leaf) => leaf.populated(),
            None => has_members(self.pgid).await,
        }
    }

    pub(super) fn kill_deadline(&self) -> Option<Instant> {
        self.kill_at.filter(|_| self.killed_at.is_none())
    }

    /// Signals the group. Once the leader is reaped, only if the group is
    /// not empty: an empty group's number is free, and Linux could hand it
    /// out again (after going once round the whole pid space, so this check
    /// right before the signal leaves no practical window).
    fn signal(&self, signal: Signal) {
        if let Some(leaf) = &self.leaf {
            leaf.signal(signal);
            return;
        }
        if self.leader_reaped && !anyone_in(self.pgid) {
            return;
        }
        // ESRCH (group already empty) is the expected way for this to fail.
        let _ = rustix::process::kill_process_group(self.pgid, signal);
    }
}

/// Whether any process (live or zombie) has `pgid` as its group:
/// `kill(-pgid, 0)` fails with ESRCH only if none does (EPERM still means
/// somebody).
fn anyone_in(pgid: Pid) -> bool {
    rustix::process::test_kill_process_group(pgid) != Err(rustix::io::Errno::SRCH)
}

/// Whether any live process is in the group of `leader`, which has been
/// reaped; `None` if somebody is there and /proc cannot be read.
pub(super) async fn has_members(leader: Pid) -> Option<bool> {
    if !anyone_in(leader) {
        return Some(false);
    }
    let pgid = leader.as_raw_nonzero().get();
    if let Some(answer) = ask_scanner(pgid) {
        if let Ok(found) = answer.await {
            return found;
        }
    }
    scan(&[pgid]).and_then(|found| found.first().copied())
}

/// A question for the scanner thread.
struct Query {
    pgid: i32,
    answer: oneshot::Sender<Option<bool>>,
}

/// The scanner thread's queue, once it runs; when it cannot be started, the
/// time of the last attempt, so a machine out of threads is not asked for
/// one on every question.
struct Scanner {
    queue: Option<mpsc::Sender<Query>>,
    failed_at: Option<std::time::Instant>,
}

static SCANNER: Mutex<Scanner> = Mutex::new(Scanner {
    queue: None,
    failed_at: None,
});

/// How long to wait before trying again to start a scanner that could not
/// be started.
const SCANNER_RETRY: Duration = Duration::from_secs(1);

/// The scanner reads small files and keeps a few hundred bytes of buffers.
const SCANNER_STACK: usize = 128 * 1024;

/// Queues `pgid` for the scanner (starting it if needed); `None` if there is
/// no scanner to ask.
fn ask_scanner(pgid: i32) -> Option<oneshot::Receiver<Option<bool>>> {
    let mut scanner = SCANNER.lock().unwrap_or_else(PoisonError::into_inner);
    let (answer, answered) = oneshot::channel();
    let mut query = Query { pgid, answer };
    if let Some(queue) = &scanner.queue {
        match queue.send(query) {
            Ok(()) => return Some(answered),
            // The thread is gone (it cannot panic, but if it did): start
            // another.
            Err(mpsc::SendError(back)) => {
                query = back;
                scanner.queue = None;
            }
        }
    }
    if scanner
        .failed_at
        .is_some_and(|at| at.elapsed() < SCANNER_RETRY)
    {
        return None;
    }
    let (queue, queries) = mpsc::channel();
    let started = std::thread::Builder::new()
        .name("rea-groups".to_string())
        .stack_size(SCANNER_STACK)
        .spawn(move || serve(queries));
    match started {
        Ok(_) => {
            queue.send(query).ok()?;
            scanner.queue = Some(queue);
            scanner.failed_at = None;
            Some(answered)
        }
        Err(_) => {
            scanner.failed_at = Some(std::time::Instant::now());
            None
        }
    }
}

/// The scanner thread: answers every question queued meanwhile with one
/// pass over /proc.
fn serve(queries: mpsc::Receiver<Query>) {
    while let Ok(first) = queries.recv() {
        let mut batch = vec![first];
        batch.extend(queries.try_iter());
        let pgids: Vec<i32> = batch.iter().map(|q| q.pgid).collect();
        let found = scan(&pgids);
        for (i, query) in batch.into_iter().enumerate() {
            let answer = found.as_ref().and_then(|f| f.get(i).copied());
            // The run may have been dropped meanwhile: nobody to tell.
            let _ = query.answer.send(answer);
        }
    }
}

/// For each pgid, whether a live process other than its leader is in that
/// group; `None` if /proc cannot be read.
fn scan(pgids: &[i32]) -> Option<Vec<bool>> {
    let mut found = vec![false; pgids.len()];
    // Every member of a job's group was created after its leader (the job
    // leads a session of its own, and only processes of that session can
    // join), so its pid lies between the leader's and the last pid the
    // kernel handed out, unless the pid counter wrapped around since (then
    // the last pid is below the leader's, and every process is looked at).
    // Reading only those stat files keeps the scan cheap on a server with
    // thousands of processes.
    let last = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok());
    let lowest = pgids.iter().copied().min().unwrap_or(0);
    let window = last.filter(|l| pgids.iter().all(|p| p <= l));
    let dir = std::fs::read_dir("/proc").ok()?;
    let mut buf = [0u8; 512];
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if window.is_some_and(|last| pid <= lowest || pid > last) {
            continue;
        }
        // A process that vanished meanwhile is simply not a member.
        let Ok(mut file) = File::open(entry.path().join("stat")) else {
            continue;
        };
        let Ok(n) = file.read(&mut buf) else {
            continue;
        };
        let Some(stat) = buf.get(..n).and_then(|b| std::str::from_utf8(b).ok()) else {
            continue;
        };
        let Some((pgrp, live)) = stat_group(stat) else {
            continue;
        };
        if !live || pgrp == pid {
            continue;
        }
        if let Some(i) = pgids.iter().position(|&p| p == pgrp) {
            if let Some(slot) = found.get_mut(i) {
                *slot = true;
            }
            if found.iter().all(|&f| f) {
                break;
            }
        }
    }
    // Distinguish "no members" from "no /proc".
    std::fs::metadata("/proc/self/stat").ok().map(|_| found)
}

/// `(pgrp, live)` from `/proc/PID/stat` (`pid (comm) state ppid pgrp ...`);
/// comm may contain spaces and parentheses, so fields are counted after the
/// last `)`. The first 512 bytes always hold it: comm is at most 64 bytes.
fn stat_group(stat: &str) -> Option<(i32, bool)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1)?.parse::<i32>().ok()?;
    Some((pgrp, !matches!(state, "Z" | "X" | "x")))
}

/// Returns when whether anyone is left in the run may have changed: its
/// cgroup's `cgroup.events` changed, or, for a process group, after a short
/// pause (a process group's emptiness cannot be waited for).
pub(super) async fn changed(leaf: Option<&crate::cgroup::Leaf>) {
    match leaf {
        Some(leaf) => leaf.changed().await,
        None => tokio::time::sleep(super::GROUP_POLL).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_live_member(stat: &str, pgid: i32) -> bool {
        stat_group(stat).is_some_and(|(pgrp, live)| live && pgrp == pgid)
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "4242 (we ird) (x) S 1 777 777 0 -1";
        assert!(is_live_member(stat, 777));
        assert!(!is_live_member(stat, 4242));
        assert!(!is_live_member("4242 (z) Z 1 777 777", 777));
        assert_eq!(stat_group("garbage"), None);
    }

    #[test]
    fn an_unused_group_is_empty_without_a_scan() {
        // pid_max is at most 2^22: this number is nobody's group.
        let nobody = Pid::from_raw(i32::MAX).expect("pid");
        assert!(!anyone_in(nobody));
        assert!(anyone_in(rustix::process::getpgrp()));
    }

    #[test]
    fn one_pass_answers_several_groups() {
        // This process's group has members (us); a pid that leads no group
        // has none.
        let ours = rustix::process::getpgrp().as_raw_nonzero().get();
        let found = scan(&[ours, i32::MAX]).expect("/proc");
        assert_eq!(found.len(), 2);
        assert!(!found[1]);
    }
}
