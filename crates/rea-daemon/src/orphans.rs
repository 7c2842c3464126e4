//! Runs a previous daemon left behind. A daemon killed outright (kill -9,
//! the OOM killer, a crash) cannot stop its runs; their process groups may
//! still be working when the next daemon starts. Starting the same jobs
//! again beside them would break `overlap = "skip"` and run work twice, so
//! the rule is: at start, every process still in the group of a run the
//! history shows unfinished is terminated (SIGTERM, then SIGKILL after a
//! grace), and that run is recorded `interrupted`, saying so.
//!
//! A run that had a cgroup of its own (`rea/<tenant>/<run id>`, or a reused
//! `rea/<tenant>/pool.<pid>.<n>` whose `user.rea.run` names it) is found by
//! that cgroup and ended exactly (`cgroup.kill`): no pid is guessed. A run
//! without one (process-group mode, or a daemon before cgroups) is
//! recognised by its leader: the process at the recorded pid must lead its
//! own group and have started when the run did (its start time read from
//! /proc against this boot's clock, so a process of a later boot or a
//! recycled pid does not match). Only then are the processes of that group
//! that started no earlier than the run signalled. A group whose leader has
//! exited cannot be told from a stranger's: it is left alone, and the log
//! says so.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rea_core::record::Record;
use rustix::process::{Pid, Signal};
use tracing::warn;

/// How long orphaned groups get between SIGTERM and SIGKILL.
pub(super) const GRACE: Duration = Duration::from_secs(10);

/// How far a leader's start time, read from /proc (whole seconds of boot
/// time plus clock ticks), may be from the run's recorded start.
const LEADER_START_SLACK_MS: i64 = 2_000;

/// How long a leftover cgroup gets to empty after `cgroup.kill`.
const CGROUP_KILL_WAIT: Duration = Duration::from_secs(5);

/// Terminates what is left of the unfinished runs; returns, per run id,
/// how many processes were found still running.
pub(super) fn terminate(
    unfinished: &[Record],
    grace: Duration,
    cgroups: Option<&rea_exec::cgroup::Tree>,
) -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    let mut rest = Vec::new();
    for rec in unfinished {
        let ended = rec.run.as_deref().and_then(|run| {
            let tenant = rea_core::tenant::Tenant::of(rec.job.as_deref().unwrap_or_default());
            let n = cgroups?.end_leftover(&tenant.key(), run, CGROUP_KILL_WAIT)?;
            Some((run, n))
        });
        match ended {
            Some((run, n)) => {
                if n > 0 {
                    warn!(
                        run,
                        processes = n,
                        "processes of a run the previous daemon left were still in its cgroup; killed them (cgroup.kill)"
                    );
                    found.insert(run.to_string(), n);
                }
            }
            None => rest.push(rec),
        }
    }
    let Some(clock) = Clock::read() else {
        return found;
    };
    let mut groups: Vec<(String, i32, DateTime<Utc>)> = Vec::new();
    for rec in rest {
        let (Some(run), Some(pid), Some(started)) = (&rec.run, rec.pid, rec.started) else {
            continue;
        };
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        if clock.is_leader_of_run(pid, started) {
            groups.push((run.clone(), pid, started));
        } else if Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
        {
            warn!(
                run = run.as_str(),
                pgid = pid,
                "a process group has the number of a run the previous daemon left, but its leader is not that run's (exited, or the pid was reused): left alone"
            );
        }
    }
    for (run, pgid, started) in &groups {
        let members = clock.members(*pgid, *started);
        if !members.is_empty() {
            warn!(
                run = run.as_str(),
                processes = members.len(),
                "processes of a run the previous daemon left are still running; terminating them"
            );
            signal_all(&members, Signal::TERM);
            found.insert(run.clone(), members.len());
        }
    }
    if found.is_empty() {
        return found;
    }
    let deadline = Instant::now() + grace;
    loop {
        let left: Vec<i32> = groups
            .iter()
            .flat_map(|(_, pgid, started)| clock.members(*pgid, *started))
            .collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            signal_all(&left, Signal::KILL);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    found
}

fn signal_all(pids: &[i32], signal: Signal) {
    for pid in pids.iter().filter_map(|p| Pid::from_raw(*p)) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// What turns `/proc/PID/stat` start times into instants.
struct Clock {
    /// Boot time, seconds since the epoch (`btime` in /proc/stat).
    boot: i64,
    ticks_per_second: i64,
}

impl Clock {
    fn read() -> Option<Clock> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let boot = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: sysconf only reads a configuration value.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (ticks > 0).then_some(Clock {
            boot,
            ticks_per_second: ticks as i64,
        })
    }

    /// Whether the process at `pid` leads its own group, is alive, and
    /// started when the run did (within [`LEADER_START_SLACK_MS`]).
    fn is_leader_of_run(&self, pid: i32, run_started: DateTime<Utc>) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        self.leader(&stat, pid, run_started.timestamp_millis())
    }

    fn leader(&self, stat: &str, pid: i32, run_started_ms: i64) -> bool {
        match self.start_of(stat) {
            Some((pgrp, started_ms)) => {
                pgrp == pid && (started_ms - run_started_ms).abs() <= LEADER_START_SLACK_MS
            }
            None => false,
        }
    }

    /// `(pgrp, start in ms since the epoch)` of a live process's stat line.
    fn start_of(&self, stat: &str) -> Option<(i32, i64)> {
        let (_, rest) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (state, pgrp, start) = (fields.first()?, fields.get(2)?, fields.get(19)?);
        if *state == "Z" {
            return None;
        }
        let ticks = start.parse::<i64>().ok()?;
        Some((
            pgrp.parse().ok()?,
            self.boot * 1000 + ticks * 1000 / self.ticks_per_second,
        ))
    }

    /// Live processes whose process group is `pgid` and that started no
    /// earlier than a second before `since`.
    fn members(&self, pgid: i32, since: DateTime<Utc>) -> Vec<i32> {
        let not_before = since.timestamp_millis() - 1_000;
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                self.member(&stat, pgid, not_before)
            })
            .collect()
    }

    /// `/proc/PID/stat` is `pid (comm) state ppid pgrp session tty tpgid
    /// flags minflt cminflt majflt cmajflt utime stime cutime cstime
    /// priority nice num_threads itrealvalue starttime ...`; comm may hold
    /// spaces and parentheses, so fields are counted after the last `)`.
    fn member(&self, stat: &str, pgid: i32, not_before_ms: i64) -> bool {
        self.start_of(stat)
            .is_some_and(|(pgrp, started_ms)| pgrp == pgid && started_ms >= not_before_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let clock = Clock {
            boot: 1_700_000_000,
            ticks_per_second: 100,
        };
        // Started 50 s after boot, in group 4242.
        let line = "4243 (sh (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5000 0 0";
        let at = 1_700_000_050_000;
        // `members` asks for processes started no earlier than a second
        // before the run's recorded start.
        let since = |run_started: i64| run_started - 1_000;
        assert!(clock.member(line, 4242, since(at - 500)));
        assert!(
            clock.member(line, 4242, since(at + 900)),
            "within the second of slack"
        );
        assert!(
            !clock.member(line, 4242, since(at + 2_000)),
            "started well before the run: not ours"
        );
        assert!(!clock.member(line, 4241, at), "another group");
        let zombie = line.replacen(" S ", " Z ", 1);
        assert!(!clock.member(&zombie, 4242, at));
        // The leader itself: pid 4242 leading group 4242, started at `at`.
        let leader = line.replacen("4243 ", "4242 ", 1);
        assert!(clock.leader(&leader, 4242, at - 300));
        assert!(
            !clock.leader(&leader, 4242, at - 10_000),
            "started 10 s after the run: a reused pid"
        );
        assert!(!clock.leader(line, 4243, at), "not a group leader");
    }

    /// A real group that outlived its daemon is found and terminated.
    #[test]
    fn an_orphaned_group_is_terminated() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & sleep 60"])
            .process_group(0)
            .spawn()
            .expect("spawn");
        let pid = child.id();
        let mut rec = Record::new(rea_core::record::Event::Run, Utc::now());
        rec.run = Some("r1".into());
        rec.pid = Some(pid);
        rec.started = Some(Utc::now());
        // Let the shell start its two sleeps.
        std::thread::sleep(Duration::from_millis(300));
        let found = terminate(&[rec], Duration::from_secs(5), None);
        assert!(found.get("r1").copied().unwrap_or(0) >= 2, "{found:?}");
        let status = child.wait().expect("wait");
        assert!(!status.success());
        let clock = Clock::read().expect("/proc");
        assert!(clock
            .members(pid as i32, Utc::now() - chrono::Duration::seconds(5))
            .is_empty());
    }
}
