//! The executor on real processes: groups, sessions, timeouts, stragglers,
//! descriptors, signals, users, rusage, and supervision without threads.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::capture::omission_marker;
use super::*;

pub(crate) fn sh(script: &str) -> RunSpec {
    RunSpec {
        program: Program::Shell {
            shell: "/bin/sh".to_string(),
            script: script.to_string(),
        },
        env: Vec::new(),
        inherit_env: true,
        dir: None,
        home: None,
        // A safety net so a broken test fails instead of hanging.
        timeout: Some(Duration::from_secs(20)),
        kill_grace: Duration::from_millis(200),
        output_limit: 64 * 1024,
        stdin: None,
        pass_fd: None,
        user: None,
        kill_stragglers: true,
        journald: None,
        cgroup: None,
        limits: Limits::NONE,
    }
}

async fn run(spec: RunSpec) -> Outcome {
    let (_, _, outcome) = spawn(spec).expect("spawn");
    outcome.await
}

/// Alive = exists and is not a zombie (a reparented zombie may wait for
/// an init that never reaps, e.g. in a container).
pub(crate) fn alive(pid: i32) -> bool {
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

/// A job's output pipe is Linux's default size until the job has written
/// 256 KiB; then it grows, so a chatty job blocks less often.
#[tokio::test]
async fn the_output_pipe_grows_once_a_job_is_chatty() {
    let size = "python3 -c 'import fcntl, sys; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ), file=sys.stderr)'";
    let outcome = run(sh(size)).await;
    assert_eq!(outcome.output.text, "65536\n");
    let flood = format!("head -c 8000000 /dev/zero | tr '\\0' x; {size}");
    let outcome = run(sh(&flood)).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert!(
        outcome.output.text.ends_with("x1048576\n"),
        "{}",
        &outcome.output.text[outcome.output.text.len() - 40..]
    );
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

/// Without `dir`, a run starts in `home` when it can enter it, else where
/// the daemon is; an explicit `dir` it cannot enter is an error instead.
#[tokio::test]
async fn home_is_entered_when_it_can_be() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut spec = sh("pwd -P");
    spec.home = Some(home.path().to_path_buf());
    let real = std::fs::canonicalize(home.path()).expect("canonicalize");
    assert_eq!(run(spec).await.output.text, format!("{}\n", real.display()));

    let here = std::fs::canonicalize(".").expect("cwd");
    for missing in ["/nonexistent/home", "/etc/hostname"] {
        let mut spec = sh("pwd -P");
        spec.home = Some(PathBuf::from(missing));
        let outcome = run(spec).await;
        assert_eq!(outcome.termination, Termination::Exited(0), "{missing}");
        assert_eq!(outcome.output.text, format!("{}\n", here.display()));
    }

    let mut spec = sh("pwd -P");
    spec.home = Some(home.path().to_path_buf());
    spec.dir = Some(PathBuf::from("/nonexistent/dir"));
    let err = spawn(spec).err().expect("error");
    assert_eq!(err, "working directory /nonexistent/dir does not exist");
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
async fn a_program_is_found_through_the_jobs_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("rea-test-hello");
    std::fs::write(&script, "#!/bin/sh\necho hello from \"$0\"\n").expect("write");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let noexec = dir.path().join("rea-test-noexec");
    std::fs::write(&noexec, "#!/bin/sh\n").expect("write");
    let garbage = dir.path().join("rea-test-garbage");
    std::fs::write(&garbage, [0x7f, b'E', b'L', b'F', 0, 0, 0, 0]).expect("write");
    std::fs::set_permissions(
        &garbage,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let path = format!("/nonexistent:{}", dir.path().display());

    let mut spec = sh("");
    spec.program = Program::Argv(vec!["rea-test-hello".to_string()]);
    spec.env = vec![("PATH".to_string(), path.clone())];
    let outcome = run(spec).await;
    assert_eq!(
        outcome.output.text,
        format!("hello from {}\n", script.display())
    );

    let mut spec = sh("");
    spec.program = Program::Argv(vec!["rea-test-noexec".to_string()]);
    spec.env = vec![("PATH".to_string(), path)];
    let err = spawn(spec).err().expect("error");
    assert!(
        err.starts_with("permission denied running program rea-test-noexec"),
        "{err}"
    );

    let mut spec = sh("");
    let shown = garbage.display().to_string();
    spec.program = Program::Argv(vec![shown.clone()]);
    let err = spawn(spec).err().expect("error");
    assert!(
        err.starts_with(&format!("cannot start program {shown}: Exec format error")),
        "{err}"
    );
}

#[tokio::test]
async fn a_run_leads_a_session_of_its_own_without_a_terminal() {
    let outcome = run(sh("cat /proc/$$/stat")).await;
    let stat = outcome.output.text.trim_end();
    let (pid, _) = stat.split_once(' ').expect("pid");
    let (_, rest) = stat.rsplit_once(')').expect("comm");
    // state ppid pgrp session tty_nr
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    assert_eq!(pid, outcome.started.pid.to_string());
    assert_eq!(fields[2], pid, "process group: {stat}");
    assert_eq!(fields[3], pid, "session: {stat}");
    assert_eq!(fields[4], "0", "controlling terminal: {stat}");
}

#[test]
fn a_job_is_killed_when_the_thread_that_started_it_exits() {
    // As if the daemon died: the runtime and the supervisor go away, then
    // the thread that created the job exits.
    let pid = std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut spec = sh("exec sleep 1000");
            spec.timeout = None;
            let (started, _, outcome) = spawn(spec).expect("spawn");
            drop(outcome);
            started.pid as i32
        })
    })
    .join()
    .expect("thread");
    // Still our child: a zombie until reaped here.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut status = 0;
        // SAFETY: a valid pointer; `pid` is our own child.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                "status {status:#x}"
            );
            return;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the job outlived the thread that started it");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(fd, target)` for each line of `ls -l /proc/self/fd`.
fn listed_fds(text: &str) -> Vec<(i32, String)> {
    let mut fds: Vec<(i32, String)> = text
        .lines()
        .filter_map(|line| {
            let (left, target) = line.split_once(" -> ")?;
            let fd = left.rsplit(' ').next()?.parse().ok()?;
            Some((fd, target.to_string()))
        })
        .collect();
    fds.sort();
    fds
}

#[tokio::test]
async fn child_inherits_none_of_our_fds() {
    // While another run holds a pidfd and pipes, and with a descriptor left
    // inheritable (as a careless parent of the daemon would leave one), a
    // new child has stdin, stdout and stderr, and nothing else.
    let mut busy = sh("sleep 1000");
    busy.stdin = Some(Vec::new());
    busy.timeout = None;
    let (_, busy_handle, busy_outcome) = spawn(busy).expect("spawn");
    // SAFETY: a valid C string; closed below.
    let leaky = unsafe { libc::open(c"/dev/zero".as_ptr(), libc::O_RDONLY) };
    assert!(leaky > 2, "open: {}", io::Error::last_os_error());
    let mut spec = sh("");
    spec.program = Program::Argv(["ls", "-l", "/proc/self/fd"].map(String::from).to_vec());
    let outcome = run(spec).await;
    // SAFETY: the descriptor opened above, used by nothing else.
    unsafe { libc::close(leaky) };
    busy_handle.kill();
    busy_outcome.await;
    let fds = listed_fds(&outcome.output.text);
    assert_eq!(fds.first(), Some(&(0, "/dev/null".to_string())), "{fds:?}");
    assert!(
        fds[1].1.starts_with("pipe:") && fds[1].1 == fds[2].1,
        "{fds:?}"
    );
    for (fd, target) in &fds[3..] {
        // ls's own handle on the directory it lists.
        assert!(target.starts_with("/proc/"), "leaked fd {fd}: {target}");
    }
}

#[tokio::test]
async fn a_passed_descriptor_is_fd_3() {
    let file = tempfile::tempfile().expect("tempfile");
    std::io::Write::write_all(&mut &file, b"kept").expect("write");
    let mut spec = sh("");
    spec.program = Program::Argv(["ls", "-l", "/proc/self/fd"].map(String::from).to_vec());
    spec.pass_fd = Some(Arc::new(OwnedFd::from(file)));
    let fds = listed_fds(&run(spec.clone()).await.output.text);
    assert!(
        fds.get(3)
            .is_some_and(|(fd, t)| *fd == 3 && t.contains("(deleted)")),
        "{fds:?}"
    );
    spec.program = Program::Shell {
        shell: "/bin/sh".to_string(),
        script: "cat /proc/self/fd/3".to_string(),
    };
    assert_eq!(run(spec).await.output.text, "kept");
}

#[tokio::test]
async fn signals_start_at_their_default_dispositions_unblocked() {
    // This process ignores SIGPIPE, as the daemon does; for the test it also
    // ignores SIGUSR2, and blocks it on the spawning thread.
    // SAFETY: sigset_t is plain data; every libc call gets valid pointers.
    let old_mask = unsafe {
        libc::signal(libc::SIGUSR2, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    process::signal_dispositions_changed();
    let outcome = run(sh("grep -E '^Sig(Blk|Ign):' /proc/self/status")).await;
    // SAFETY: restores what was saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
        libc::signal(libc::SIGUSR2, libc::SIG_DFL);
    }
    assert_eq!(
        outcome.output.text,
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}

#[tokio::test]
async fn a_clean_environment_is_all_the_job_gets() {
    let mut spec = sh("");
    spec.program = Program::Argv(vec!["/usr/bin/env".to_string()]);
    spec.inherit_env = false;
    spec.env = [("A", "1"), ("PATH", "/x"), ("A", "2")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
    assert_eq!(run(spec).await.output.text, "A=2\nPATH=/x\n");
}

#[tokio::test]
async fn stragglers_are_left_alone_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let mut spec = sh(&format!(
        "sleep 1000 & echo $! > {}; echo done",
        pidfile.display()
    ));
    spec.kill_stragglers = false;
    let outcome = run(spec).await;
    let pid = read_pid(&pidfile);
    let survived = alive(pid);
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert!(!outcome.timed_out && !outcome.terminated);
    // The background sleep holds the output pipe: reading stopped.
    assert_eq!(outcome.output.text, "done\n");
    assert!(survived, "the background process was stopped");
}

#[tokio::test]
async fn a_timeout_still_stops_the_group_left_alone_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let mut spec = sh(&format!(
        "sleep 1000 & echo $! > {}; sleep 1000",
        pidfile.display()
    ));
    spec.kill_stragglers = false;
    spec.timeout = Some(Duration::from_millis(300));
    let outcome = run(spec).await;
    assert!(outcome.timed_out);
    assert!(!alive(read_pid(&pidfile)), "the background sleep survived");
}

#[tokio::test]
async fn a_small_job_does_not_report_the_spawners_memory() {
    // `true` needs far less than this test process: what wait4 says for a
    // leader that small is the spawner's memory, not the job's.
    let outcome = run(sh("exec true")).await;
    assert_eq!(outcome.termination, Termination::Exited(0));
    assert_eq!(
        outcome.usage.max_rss_kb,
        0,
        "the spawner's peak is {} KiB",
        process::own_peak_rss_kb()
    );

    // A descendant's own peak is measured.
    let outcome = run(sh(
        "perl -e '$x = \"a\" x 60_000_000; print length $x'; echo",
    ))
    .await;
    assert_eq!(outcome.output.text, "60000000\n");
    assert!(
        outcome.usage.max_rss_kb > 55_000,
        "max_rss_kb = {}",
        outcome.usage.max_rss_kb
    );
}

#[test]
fn the_peak_is_reported_only_above_the_spawners() {
    assert_eq!(job_peak_rss(9_000, 8_000), 9_000);
    assert_eq!(job_peak_rss(8_000, 8_000), 0);
    assert_eq!(job_peak_rss(100, 8_000), 0);
}

#[tokio::test]
// Reaped by pid through `reap`, which is what is being tested.
#[allow(clippy::zombie_processes)]
async fn exit_is_seen_without_reaping_then_reaped_once() {
    let child = Command::new("/bin/sh")
        .args(["-c", "exit 5"])
        .spawn()
        .expect("spawn");
    let pid = Pid::from_raw(child.id() as i32).expect("pid");
    let pidfd = watch_exit(pid, None).expect("pidfd");
    // Seen without reaping, so it can be seen again, then reaped.
    assert_eq!(leader_exit(pid, &pidfd).await, Some(Termination::Exited(5)));
    assert_eq!(leader_exit(pid, &pidfd).await, Some(Termination::Exited(5)));
    let (status, _) = reap(pid).await;
    assert_eq!(status, Some(Termination::Exited(5)));
    assert_eq!(reap(pid).await.0, None, "reaped twice");
}

#[tokio::test]
// Reaped by `abandon`, which is what is being tested.
#[allow(clippy::zombie_processes)]
async fn an_abandoned_child_is_killed_with_its_group_and_reaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("pid");
    let child = Command::new("/bin/sh")
        .args([
            "-c",
            &format!("sleep 1000 & echo $! > {}; sleep 1000", pidfile.display()),
        ])
        .process_group(0)
        .spawn()
        .expect("spawn");
    let leader = child.id() as i32;
    for _ in 0..1000 {
        if pidfile.exists() && std::fs::read_to_string(&pidfile).is_ok_and(|t| t.ends_with('\n')) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let straggler = read_pid(&pidfile);
    abandon(Pid::from_raw(leader).expect("pid"));
    for _ in 0..1000 {
        // Reaped: gone from /proc (not even a zombie).
        if !Path::new(&format!("/proc/{leader}")).exists() && !alive(straggler) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the abandoned group was not killed and reaped");
}

/// A uid that no process uses, so that a process limit counts only the
/// probe's own processes and threads.
const PROBE_UID: u32 = 64_999;

/// Supervision needs no thread per run: as an unprivileged user whose
/// process limit the job itself exhausts (a bounded loop, never a fork
/// bomb), the run still ends with its leader's status and every straggler
/// stopped. Runs [`exhaustion_probe`] in a child test process.
#[test]
fn runs_stay_supervised_when_no_thread_can_be_created() {
    if !rea_host::user::is_root() {
        eprintln!("skipped: needs root (to run the probe as another user)");
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut probe = Command::new(exe);
    probe
        .args([
            "--exact",
            "tests::exhaustion_probe",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REA_EXHAUSTION_PROBE", "1")
        .env("TMPDIR", "/tmp")
        .uid(PROBE_UID)
        .gid(PROBE_UID);
    // SAFETY: setrlimit is async-signal-safe and touches no memory of ours
    // but the struct on this stack.
    unsafe {
        probe.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 24,
                rlim_max: 24,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = probe.output().expect("run the probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("probe passed"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "run by runs_stay_supervised_when_no_thread_can_be_created"]
async fn exhaustion_probe() {
    if std::env::var_os("REA_EXHAUSTION_PROBE").is_none() {
        return;
    }
    let threads = || std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    let threads_before = threads();
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // Stops at the first fork the limit refuses (dash then exits 2).
    let mut spec = sh(&format!(
        "i=0; while [ $i -lt 40 ]; do sleep 30 & echo $! >> {}; i=$((i+1)); done",
        pids.display()
    ));
    spec.kill_grace = Duration::from_secs(2);
    let outcome = run(spec).await;
    assert!(
        matches!(outcome.termination, Termination::Exited(0 | 2)),
        "{outcome:?}"
    );
    let written = std::fs::read_to_string(&pids).expect("pids");
    let stragglers: Vec<i32> = written.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(stragglers.len() > 5, "the job forked only {written:?}");
    for pid in &stragglers {
        assert!(!alive(*pid), "straggler {pid} survived: {outcome:?}");
    }
    assert!(
        threads() <= threads_before + 1,
        "threads: {threads_before} before, {} after",
        threads()
    );
    println!(
        "probe passed: {} stragglers stopped, leader {:?}, output {:?}",
        stragglers.len(),
        outcome.termination,
        outcome.output.text
    );
}

mod user_tests {
    use super::*;

    fn nobody() -> Option<rea_host::user::User> {
        if !rea_host::user::is_root() {
            eprintln!("skipped: needs root");
            return None;
        }
        Some(rea_host::user::user("nobody").expect("nobody exists"))
    }

    /// As root, a job runs with the user's uid, gid and groups.
    #[tokio::test]
    async fn a_job_runs_as_its_user() {
        let Some(nobody) = nobody() else { return };
        let mut spec = sh("id -u; id -g; id -G");
        spec.dir = Some("/".into());
        spec.user = Some(nobody.clone());
        let o = run(spec).await;
        assert_eq!(
            o.output.text,
            format!("{0}\n{1}\n{1}\n", nobody.uid, nobody.gid)
        );
    }

    #[tokio::test]
    async fn a_directory_the_user_cannot_enter_is_named() {
        let Some(nobody) = nobody() else { return };
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        let mut spec = sh("true");
        spec.dir = Some(dir.path().to_path_buf());
        spec.user = Some(nobody);
        let err = spawn(spec).err().expect("error");
        assert_eq!(
            err,
            format!(
                "working directory {} is not accessible to user nobody (permission denied to enter it)",
                dir.path().display()
            )
        );
    }
}
