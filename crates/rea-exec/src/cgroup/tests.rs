//! The cgroup module on real processes, in a subtree of this test's own
//! (`<our cgroup>/rea-test-<pid>-<name>`), removed by a guard even when a
//! test fails. Skipped, saying so, where no writable cgroup v2 is found.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rea_core::run::Termination;

use super::{CgroupSpec, Tree};
use crate::RunSpec;

/// A test's own subtree; on drop, everything left in it is killed and
/// every directory removed, deepest first.
struct Scratch {
    tree: Tree,
}

impl Scratch {
    /// None (and a line on stderr) where no cgroup v2 is writable here.
    fn new(name: &str) -> Option<Scratch> {
        let own = match rea_host::cgroup::find() {
            Ok(h) => h.own,
            Err(e) => {
                eprintln!("SKIPPED: {e}");
                return None;
            }
        };
        let root = own.join(format!("rea-test-{}-{name}", std::process::id()));
        match Tree::at(root) {
            Ok(tree) => Some(Scratch { tree }),
            Err(e) => {
                eprintln!("SKIPPED: no writable cgroup v2 here: {e}");
                None
            }
        }
    }

    fn place(&self, run: &str) -> CgroupSpec {
        CgroupSpec {
            parent: self.tree.tenant("system").expect("tenant"),
            name: run.to_string(),
            controllers: self.tree.enabled().to_vec().into(),
            pool: None,
        }
    }
}

impl Scratch {
    /// Where a run goes as the daemon places it: the tenant's pool.
    fn pooled(&self, run: &str) -> CgroupSpec {
        let dir = self.tree.tenant_dir("system").expect("tenant");
        CgroupSpec {
            parent: dir.path,
            name: run.to_string(),
            controllers: self.tree.enabled().to_vec().into(),
            pool: Some(dir.pool),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_all(self.tree.root());
    }
}

fn remove_all(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                remove_all(&e.path());
            }
        }
    }
    super::kill_dir(dir);
    for _ in 0..100 {
        if !super::populated_dir(dir).unwrap_or(false) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir(dir);
}

/// The executor tests' run of `sh -c script`, in `cgroup`.
fn sh(script: &str, cgroup: Option<CgroupSpec>) -> RunSpec {
    RunSpec {
        kill_grace: Duration::from_millis(300),
        cgroup,
        ..crate::tests::sh(script)
    }
}

use crate::tests::alive;

/// The pids a job printed, one per line.
fn pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Jobs that leave their process group (or their session) one way or
/// another; each prints its escapees' pids and then waits.
const ESCAPES: [(&str, &str); 4] = [
    (
        "double fork and setsid",
        "(setsid sh -c 'echo $$; exec sleep 60' &) ; sleep 0.2; sleep 60",
    ),
    (
        "setpgid",
        "perl -e '$|=1; setpgrp(0,0); print \"$$\\n\"; sleep 60' & sleep 0.2; sleep 60",
    ),
    (
        "late setsid",
        "sh -c 'sleep 0.1; exec setsid sh -c \"echo \\$\\$; exec sleep 60\"' & sleep 0.4; sleep 60",
    ),
    (
        "1,000 children",
        "i=0; while [ $i -lt 1000 ]; do sleep 60 & i=$((i+1)); done; echo $!; sleep 60",
    ),
];

#[tokio::test]
async fn a_timeout_ends_every_escapee() {
    let Some(scratch) = Scratch::new("timeout") else {
        return;
    };
    for (i, (case, script)) in ESCAPES.iter().enumerate() {
        let place = scratch.place(&format!("run{i}"));
        let leaf = place.parent.join(&place.name);
        let mut spec = sh(script, Some(place));
        // Long enough for the escapee to print its pid on a loaded machine
        // (800 ms was not, with eight compilers sharing two cores).
        spec.timeout = Some(Duration::from_millis(if i == 3 { 8000 } else { 2500 }));
        let (_, _, running) = crate::spawn(spec).expect("spawn");
        let outcome = running.await;
        assert!(outcome.timed_out, "{case}: {outcome:?}");
        let escaped = pids(&outcome.output.text);
        assert!(!escaped.is_empty(), "{case}: printed no pid: {outcome:?}");
        for pid in escaped {
            assert!(!alive(pid), "{case}: {pid} outlived the run");
        }
        assert!(!leaf.exists(), "{case}: the run's cgroup was not removed");
    }
}

/// The cgroup the job itself is in, from its `/proc/self/cgroup`.
async fn cgroup_of_job(place: CgroupSpec) -> String {
    let outcome = crate::spawn(sh("cat /proc/self/cgroup", Some(place)))
        .expect("spawn")
        .2
        .await;
    outcome
        .output
        .text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_job_is_in_its_cgroup_whichever_way_it_got_there() {
    let Some(scratch) = Scratch::new("born") else {
        return;
    };
    // clone3 with CLONE_INTO_CGROUP (where the kernel has it), then the
    // child's own write to cgroup.procs (this thread only).
    let born = cgroup_of_job(scratch.place("born")).await;
    assert!(born.ends_with("/system/born"), "{born:?}");
    if cfg!(target_arch = "x86_64") && crate::process::clone3::unavailable() {
        eprintln!("NOTE: clone3 with CLONE_INTO_CGROUP is refused here; the write was used");
    }
    crate::process::clone3::force_off(true);
    let moved = cgroup_of_job(scratch.place("moved")).await;
    crate::process::clone3::force_off(false);
    assert!(moved.ends_with("/system/moved"), "{moved:?}");
}

#[tokio::test]
async fn terminate_ends_every_escapee() {
    let Some(scratch) = Scratch::new("terminate") else {
        return;
    };
    let place = scratch.place("run");
    let leaf = place.parent.join(&place.name);
    // TERM is ignored everywhere: only cgroup.kill ends them.
    let spec = sh(
        "trap '' TERM; (setsid sh -c 'trap \"\" TERM; echo $$; while :; do sleep 1; done' &); sleep 60",
        Some(place),
    );
    let (_, handle, running) = crate::spawn(spec).expect("spawn");
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.terminate();
    let outcome = running.await;
    assert!(outcome.terminated);
    assert_eq!(outcome.termination, Termination::Signaled(libc::SIGKILL));
    for pid in pids(&outcome.output.text) {
        assert!(!alive(pid), "{pid} outlived the run");
    }
    assert!(!leaf.exists());
}

#[tokio::test]
async fn cpu_of_every_process_is_counted() {
    let Some(scratch) = Scratch::new("cpu") else {
        return;
    };
    // Two escaped children burn CPU for a while; the leader never waits for
    // them, so its rusage cannot see them.
    let script = "for i in 1 2; do setsid sh -c 'end=$(($(date +%s)+1)); while [ $(date +%s) -lt $end ]; do :; done' & done; exit 0";
    let mut spec = sh(script, Some(scratch.place("run")));
    spec.kill_stragglers = true;
    let outcome = crate::spawn(spec).expect("spawn").2.await;
    assert!(outcome.usage.from_cgroup, "{outcome:?}");
    // Killed at the leader's exit, they still ran a little; what matters is
    // that the figure is the cgroup's. A job that waits for its children is
    // compared against /proc through the binary (tests/governed.rs).
    let cpu = outcome.usage.user_ms + outcome.usage.sys_ms;
    assert!(cpu < 10_000, "{outcome:?}");
}

#[tokio::test]
async fn stragglers_left_alone_stay_in_the_cgroup_until_they_end() {
    let Some(scratch) = Scratch::new("stragglers") else {
        return;
    };
    let place = scratch.place("run");
    let leaf = place.parent.join(&place.name);
    let mut spec = sh("sleep 1 & echo $!", Some(place));
    spec.kill_stragglers = false;
    let outcome = crate::spawn(spec).expect("spawn").2.await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    let straggler = pids(&outcome.output.text)[0];
    assert!(alive(straggler), "left alone");
    assert!(leaf.exists(), "its cgroup stays while it runs");
    let procs = std::fs::read_to_string(leaf.join("cgroup.procs")).expect("procs");
    assert!(procs.lines().any(|l| l.trim() == straggler.to_string()));
    // Removed once it ends (watched through cgroup.events).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while leaf.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!leaf.exists(), "removed once empty");
}

#[tokio::test]
async fn a_leftover_is_ended_by_the_next_daemon() {
    let Some(scratch) = Scratch::new("leftover") else {
        return;
    };
    let place = scratch.place("old-run");
    let leaf = place.parent.join(&place.name);
    std::fs::create_dir(&leaf).expect("mkdir");
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 0.3; setsid sleep 60 & sleep 60"])
        .spawn()
        .expect("spawn");
    std::fs::write(leaf.join("cgroup.procs"), child.id().to_string()).expect("move");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        scratch
            .tree
            .end_leftover("system", "old-run", Duration::from_secs(5)),
        Some(3),
        "the shell and its two sleeps"
    );
    assert!(!child.wait().expect("wait").success());
    assert!(!leaf.exists());
    assert_eq!(
        scratch
            .tree
            .end_leftover("system", "no-such-run", Duration::from_secs(1)),
        None
    );
}

#[tokio::test]
async fn the_mode_names_missing_controllers() {
    let Some(scratch) = Scratch::new("mode") else {
        return;
    };
    let mode = scratch.tree.mode();
    assert!(mode.starts_with("cgroup: contained ("), "{mode}");
    for c in super::CONTROLLERS {
        if !scratch.tree.has(c) {
            assert!(mode.contains(c), "{mode}");
            eprintln!("NOTE: the {c} controller is not enabled here: its limits are untested");
        }
    }
}

#[tokio::test]
async fn limits_reach_the_cgroup_where_the_controller_is() {
    let Some(scratch) = Scratch::new("limits") else {
        return;
    };
    let place = scratch.place("run");
    let mut spec = sh("cat /proc/self/cgroup; sleep 0.2", Some(place));
    spec.limits.memory_max = Some(64 << 20);
    spec.limits.tasks_max = Some(50);
    spec.limits.cpu_max_percent = Some(50);
    let leaf: Arc<Path> = Arc::from(scratch.tree.root().join("system").join("run"));
    let (_, _, running) = crate::spawn(spec).expect("spawn");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let read = |f: &str| std::fs::read_to_string(leaf.join(f)).ok();
    for (controller, file, want) in [
        ("memory", "memory.max", "67108864"),
        ("pids", "pids.max", "50"),
        ("cpu", "cpu.max", "50000 100000"),
    ] {
        if scratch.tree.has(controller) {
            assert_eq!(read(file).as_deref().map(str::trim), Some(want));
        } else {
            eprintln!("SKIPPED: {file}: the {controller} controller is not enabled here");
        }
    }
    let outcome = running.await;
    assert!(outcome.output.text.contains("/rea-test-"), "{outcome:?}");
}

#[tokio::test]
async fn tenant_limits_reach_its_directory_and_are_lifted_when_removed() {
    let Some(scratch) = Scratch::new("tenant-limits") else {
        return;
    };
    let tree = &scratch.tree;
    let mut limits = rea_core::run::Limits::NONE;
    limits.memory_max = Some(256 << 20);
    limits.memory_high = Some(192 << 20);
    limits.tasks_max = Some(64);
    limits.cpu_max_percent = Some(150);
    limits.cpu_weight = Some(50);
    limits.io_weight = Some(20);
    // Set before any run of hers: the directory is made with them.
    assert!(tree
        .set_tenant_limits(&[("user-x".to_string(), limits)])
        .is_empty());
    let dir = tree.root().join("user-x");
    assert!(dir.is_dir());
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .map(|t| t.trim().to_string())
    };
    let files = [
        ("memory", "memory.max", "268435456", "max"),
        ("memory", "memory.high", "201326592", "max"),
        ("pids", "pids.max", "64", "max"),
        ("cpu", "cpu.max", "150000 100000", "max 100000"),
        ("cpu", "cpu.weight", "50", "100"),
        ("io", "io.weight", "default 20", "default 100"),
    ];
    for (controller, file, want, _) in files {
        if tree.has(controller) {
            assert_eq!(read(file).as_deref(), Some(want), "{file}");
        } else {
            eprintln!("SKIPPED: tenant {file}: the {controller} controller is not enabled here");
        }
    }
    // A run of hers is a leaf of that directory.
    let place = CgroupSpec {
        parent: tree.tenant("user-x").expect("tenant"),
        name: "run".to_string(),
        controllers: tree.enabled().to_vec().into(),
        pool: None,
    };
    let outcome = crate::spawn(sh("cat /proc/self/cgroup", Some(place)))
        .expect("spawn")
        .2
        .await;
    assert!(outcome.output.text.contains("/user-x/run"), "{outcome:?}");
    // Removed from the file: the kernel's defaults again.
    assert!(tree.set_tenant_limits(&[]).is_empty());
    for (controller, file, _, default) in files {
        if tree.has(controller) {
            assert_eq!(read(file).as_deref(), Some(default), "{file}");
        }
    }
}

#[tokio::test]
async fn a_tenant_directory_removed_meanwhile_is_made_again() {
    let Some(scratch) = Scratch::new("remade") else {
        return;
    };
    let place = scratch.place("run");
    // Another daemon sharing the subtree removed it, empty, as it stopped.
    std::fs::remove_dir(&place.parent).expect("rmdir the tenant");
    std::fs::remove_dir(scratch.tree.root()).expect("rmdir the root");
    let outcome = crate::spawn(sh("exit 0", Some(place.clone())))
        .expect("spawn")
        .2
        .await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert!(outcome.usage.from_cgroup);
    assert!(place.parent.is_dir());
}

#[tokio::test]
async fn only_old_empty_cgroups_are_swept() {
    let Some(scratch) = Scratch::new("sweep") else {
        return;
    };
    let place = scratch.place("fresh");
    std::fs::create_dir(place.parent.join("fresh")).expect("mkdir");
    assert_eq!(scratch.tree.sweep(Duration::from_secs(60)), 0, "too young");
    assert_eq!(scratch.tree.sweep(Duration::ZERO), 1);
    assert!(!place.parent.join("fresh").exists());
}

#[test]
fn an_oom_kill_is_read_from_memory_events() {
    use super::oom_killed;
    // What a leaf says after its memory.max made the kernel kill a process
    // (Linux 6.1, a job allocating 64 MB under memory_max = 16M).
    let killed = "low 0\nhigh 0\nmax 1843\noom 1\noom_kill 1\noom_group_kill 0\n";
    assert!(oom_killed(killed));
    // memory.oom.group = 1: the whole group went, counted on its own line.
    assert!(oom_killed(
        "low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\noom_group_kill 1\n"
    ));
    // Kernels before 5.18 have no oom_group_kill line.
    assert!(oom_killed("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"));
    // The limit was reached and reclaim coped, or the allocation failed
    // without a kill: not an OOM kill.
    assert!(!oom_killed(
        "low 0\nhigh 12\nmax 40\noom 0\noom_kill 0\noom_group_kill 0\n"
    ));
    assert!(!oom_killed("low 0\nhigh 0\nmax 1\noom 1\noom_kill 0\n"));
    // A field name that merely starts like one is not it; nothing readable
    // is nothing.
    assert!(!oom_killed("oom_killer_disabled 1\n"));
    assert!(!oom_killed(""));
    assert!(!oom_killed("oom_kill x\n"));
}

/// A cgroup's `user.rea.run`, if it has one.
fn run_xattr(dir: &Path) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = rustix::fs::getxattr(dir, super::RUN_XATTR, &mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test]
async fn a_runs_leaf_is_reused_by_the_next_run_which_is_counted_alone() {
    let Some(scratch) = Scratch::new("pool") else {
        return;
    };
    let pool = scratch.pooled("x").pool.expect("pool");
    if scratch.tree.enabled().iter().any(|c| c != "cpu") {
        eprintln!(
            "SKIPPED: run cgroups here have controllers whose figures keep them from being reused"
        );
        return;
    }
    // Close to a second of CPU (the shell and its `date`s), then where it is.
    let burn = "end=$(($(date +%s%N)/1000000+800)); while [ $(($(date +%s%N)/1000000)) -lt $end ]; do :; done; cat /proc/self/cgroup";
    let (_, first_handle, first) =
        crate::spawn(sh(burn, Some(scratch.pooled("first")))).expect("spawn");
    let first = first.await;
    assert_eq!(pool.idle_count(), 1, "back in the pool once empty");
    assert!(
        pool.idle()
            .iter()
            .all(|l| l.dir_fd().is_none() && l.events().is_none()),
        "a waiting leaf holds no descriptor"
    );
    let (_, _, second) =
        crate::spawn(sh("cat /proc/self/cgroup", Some(scratch.pooled("second")))).expect("spawn");
    assert_eq!(pool.idle_count(), 0, "taken by the second run");
    // The first run's handle reads nothing of the second's.
    assert_eq!(first_handle.usage_now(), None);
    let second = second.await;
    let cgroup = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_default()
            .to_string()
    };
    let (a, b) = (cgroup(&first.output.text), cgroup(&second.output.text));
    let name = format!("/system/pool.{}.1", std::process::id());
    assert!(a.ends_with(&name), "{a}");
    assert_eq!(a, b, "the same leaf");
    let dir = scratch
        .tree
        .root()
        .join("system")
        .join(format!("pool.{}.1", std::process::id()));
    assert_eq!(run_xattr(&dir).as_deref(), Some("second"));
    let cpu = |o: &crate::Outcome| o.usage.user_ms + o.usage.sys_ms;
    assert!(first.usage.from_cgroup && second.usage.from_cgroup);
    assert!(cpu(&first) >= 200, "{:?}", first.usage);
    assert!(
        cpu(&second) < 100,
        "the first run's CPU is not the second's: {:?}",
        second.usage
    );
    // A stopping daemon removes what waits.
    scratch.tree.tidy();
    assert!(!dir.exists());
}

#[tokio::test]
async fn a_dead_daemons_pooled_leaves_are_removed_and_only_the_named_run_is_ended() {
    let Some(scratch) = Scratch::new("deadpool") else {
        return;
    };
    let tenant = scratch.tree.tenant("system").expect("tenant");
    // A pid no process has now: a child that has been reaped.
    let mut gone = std::process::Command::new("true").spawn().expect("spawn");
    gone.wait().expect("wait");
    let dead = gone.id();
    let make = |name: &str, run: Option<&str>| {
        let dir = tenant.join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        if let Some(run) = run {
            rustix::fs::setxattr(
                &dir,
                super::RUN_XATTR,
                run.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            )
            .expect("setxattr");
        }
        dir
    };
    // The dead daemon's leaf of a run it left running, a spare of it that
    // names no run, one that names a run that ended, and a leaf of a daemon
    // that lives (pid 1 here) naming a run too.
    let running = make(&format!("pool.{dead}.1"), Some("old-run"));
    let spare = make(&format!("pool.{dead}.2"), None);
    let ended = make(&format!("pool.{dead}.3"), Some("ended-run"));
    let live = make("pool.1.1", Some("live-run"));
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 0.3; setsid sleep 60 & sleep 60"])
        .spawn()
        .expect("spawn");
    std::fs::write(running.join("cgroup.procs"), child.id().to_string()).expect("move");
    std::thread::sleep(Duration::from_millis(600));
    let wait = Duration::from_secs(5);
    // A spare is no run's; a run's leaf is found by its attribute alone.
    assert_eq!(
        scratch.tree.end_leftover("system", "no-such-run", wait),
        None
    );
    assert_eq!(scratch.tree.end_leftover("system", "2", wait), None);
    assert!(spare.exists() && ended.exists() && live.exists());
    assert_eq!(
        scratch.tree.end_leftover("system", "old-run", wait),
        Some(3),
        "the shell and its two sleeps"
    );
    assert!(!child.wait().expect("wait").success());
    assert!(!running.exists());
    // The next start's sweep: the dead daemon's empty leaves go however
    // young; the living one's stays however old.
    assert_eq!(scratch.tree.sweep(Duration::from_secs(3600)), 2);
    assert!(!spare.exists() && !ended.exists());
    assert!(live.exists());
    assert_eq!(scratch.tree.sweep(Duration::ZERO), 0);
    assert!(live.exists());
}

/// The pids in a cgroup's `cgroup.procs`.
fn members(dir: &Path) -> Vec<i32> {
    pids(&std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default())
}

/// A field of `/proc/PID/status`, e.g. `PPid`.
fn status_field(pid: i32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The leaf's keeper: its one member, named `rea-keeper`, our child, with
/// no descriptor open and every signal blocked.
#[track_caller]
fn keeper_of(dir: &Path) -> i32 {
    let members = members(dir);
    assert_eq!(
        members.len(),
        1,
        "only the keeper waits in the leaf: {members:?}"
    );
    let pid = members[0];
    // A keeper started a moment ago may not have named itself yet.
    for _ in 0..200 {
        if status_field(pid, "Name") == "rea-keeper" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        status_field(pid, "Name"),
        "rea-keeper",
        "{}",
        std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
    );
    assert_eq!(status_field(pid, "PPid"), std::process::id().to_string());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(usize::MAX);
    assert_eq!(fds, 0, "the keeper holds none of the daemon's descriptors");
    assert_eq!(
        u64::from_str_radix(&status_field(pid, "SigBlk"), 16).unwrap_or(0) & 0x4000, // SIGTERM
        0x4000,
        "every signal blocked"
    );
    pid
}

/// The one pooled leaf under `tenant` once the others are removed.
#[track_caller]
fn waiting_leaf(tenant: &Path) -> std::path::PathBuf {
    let mut leaves = Vec::new();
    for _ in 0..200 {
        leaves = std::fs::read_dir(tenant)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(super::pool_owner).is_some())
            .collect();
        if leaves.len() == 1 {
            return leaves.remove(0);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("not one waiting leaf: {leaves:?}");
}

/// Waits until `pid` is no unreaped keeper of ours (gone, or a pid reused
/// by someone else).
fn reaped(pid: i32) -> bool {
    let ours = || {
        status_field(pid, "PPid") == std::process::id().to_string()
            && status_field(pid, "Name") == "rea-keeper"
    };
    for _ in 0..200 {
        if !ours() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[tokio::test]
async fn a_waiting_leaf_is_kept_by_a_keeper_that_no_run_counts_or_stops() {
    let Some(scratch) = Scratch::new("keeper") else {
        return;
    };
    if scratch.tree.enabled().iter().any(|c| c != "cpu") {
        eprintln!(
            "SKIPPED: run cgroups here have controllers whose figures keep them from being reused"
        );
        return;
    }
    if !cfg!(target_arch = "x86_64") || crate::process::clone3::unavailable() {
        eprintln!("SKIPPED: no keepers without clone3 on x86_64");
        return;
    }
    let pool = scratch.pooled("x").pool.expect("pool");
    let tenant = scratch.tree.root().join("system");
    let dir = tenant.join(format!("pool.{}.1", std::process::id()));
    let procs = dir.join("cgroup.procs");
    let procs = procs.display();
    let run = |name: &str, script: &str| {
        let (_, _, running) = crate::spawn(sh(script, Some(scratch.pooled(name)))).expect("spawn");
        running
    };
    let first = run("first", "true").await;
    assert_eq!(first.termination, Termination::Exited(0));
    assert_eq!(pool.idle_count(), 1);
    let keeper = keeper_of(&dir);

    // A run sees the keeper among its cgroup's members and ends when its
    // own processes do; what it leaves behind is stopped, the keeper goes
    // with that (so the leaf can say when it is empty) and a new one
    // keeps the leaf after.
    let second = run(
        "second",
        &format!("cat {procs}; sleep 60 & echo straggler $!"),
    )
    .await;
    assert_eq!(second.termination, Termination::Exited(0), "{second:?}");
    assert!(
        pids(&second.output.text).contains(&keeper),
        "the run sees the keeper: {}",
        second.output.text
    );
    let straggler: i32 = second
        .output
        .text
        .lines()
        .find_map(|l| l.strip_prefix("straggler "))
        .and_then(|p| p.trim().parse().ok())
        .expect("the straggler's pid");
    assert!(
        !alive(straggler),
        "the straggler outlived the run: {} {:?}",
        std::fs::read_to_string(format!("/proc/{straggler}/status")).unwrap_or_default(),
        std::fs::read_to_string(format!("/proc/{straggler}/cgroup")).unwrap_or_default()
    );
    assert!(
        reaped(keeper),
        "the released keeper {keeper} was not reaped"
    );
    // Kept again at the latest once the next run has ended.
    assert_eq!(
        run("again", "true").await.termination,
        Termination::Exited(0)
    );
    let keeper = keeper_of(&dir);
    assert_eq!(pool.idle_count(), 1);

    // A timeout's SIGTERM is not the keeper's; the SIGKILL of a run that
    // ignores it is `cgroup.kill`, keeper and all. A root job can kill it
    // too. Either way the run ends as it should and the leaf is kept again
    // after.
    let timed_out = |script: &str| {
        let mut spec = sh(script, Some(scratch.pooled("timed-out")));
        spec.timeout = Some(Duration::from_millis(200));
        let (_, _, running) = crate::spawn(spec).expect("spawn");
        running
    };
    assert!(timed_out("exec sleep 60").await.timed_out);
    assert_eq!(keeper_of(&dir), keeper, "SIGTERM is not the keeper's");
    // The leaf of a run that needed `cgroup.kill` is not reused (see
    // `Leaf::killed`): the next run is well, in a new leaf.
    assert!(timed_out("trap '' TERM; sleep 60").await.timed_out);
    assert!(reaped(keeper), "the killed keeper {keeper} was not reaped");
    assert_eq!(pool.idle_count(), 0, "a killed leaf is not reused");
    for _ in 0..200 {
        if !dir.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!dir.exists(), "the killed leaf was not removed");
    let after = run("after-kill", "echo well").await;
    assert_eq!(after.termination, Termination::Exited(0), "{after:?}");
    assert_eq!(after.output.text, "well\n");
    let dir = waiting_leaf(&tenant);
    let procs = dir.join("cgroup.procs");
    let procs = procs.display();
    let keeper = keeper_of(&dir);
    let killer = run(
        "fourth",
        &format!("for p in $(cat {procs}); do [ \"$(cat /proc/$p/comm)\" = rea-keeper ] && kill -9 $p && echo killed $p; done; true"),
    )
    .await;
    assert_eq!(killer.termination, Termination::Exited(0), "{killer:?}");
    assert!(
        killer.output.text.contains(&format!("killed {keeper}")),
        "{killer:?}"
    );
    // The dead keeper is reaped by the next run's end at the latest (the
    // leaf may be retired, as one killed from outside would be).
    let fifth = run("fifth", "true").await;
    assert_eq!(fifth.termination, Termination::Exited(0));
    assert!(
        reaped(keeper),
        "the keeper {keeper} a job killed was not reaped"
    );
    let dir = waiting_leaf(&tenant);
    let keeper = keeper_of(&dir);
    let sixth = run("sixth", "true").await;
    assert_eq!(sixth.termination, Termination::Exited(0));
    assert_eq!(keeper_of(&dir), keeper, "a live keeper stays");

    // Killed from outside: a root job's `cgroup.kill` of its own leaf (the
    // run ends with SIGKILL), or an operator's while the leaf waits (its
    // keeper dies, and on this kernel the next process created in it would
    // be killed at birth). Either poisons the leaf (`Leaf::killed`), which
    // is then not reused: the next runs are well, in a new leaf.
    let killed = run(
        "self-kill",
        &format!("echo 1 > {}/cgroup.kill; sleep 5", dir.display()),
    )
    .await;
    assert_eq!(killed.termination, Termination::Signaled(9), "{killed:?}");
    assert_eq!(
        pool.idle_count(),
        0,
        "a leaf killed from inside is not reused"
    );
    let after = run("after-self-kill", "echo well").await;
    assert_eq!(after.output.text, "well\n", "{after:?}");
    let killed_dir = waiting_leaf(&tenant);
    assert_ne!(killed_dir, dir);
    let keeper = keeper_of(&killed_dir);
    std::fs::write(killed_dir.join("cgroup.kill"), "1").expect("cgroup.kill");
    let after = run("after-outside-kill", "echo well").await;
    assert_eq!(after.output.text, "well\n", "{after:?}");
    assert!(reaped(keeper));
    let dir = waiting_leaf(&tenant);
    assert_ne!(dir, killed_dir);
    let keeper = keeper_of(&dir);

    // A stopping daemon ends the keepers and removes the leaves.
    scratch.tree.tidy();
    assert!(reaped(keeper));
    assert!(!dir.exists());
}
