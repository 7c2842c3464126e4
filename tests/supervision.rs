//! How runs are started and supervised, through the real daemon: what a
//! run starts with and inherits from the daemon (session, terminal,
//! descriptors, signals, environment, the parent-death signal), what it may
//! leave behind, what is measured of it, and supervision that needs no
//! thread per run.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;

use serde_json::Value;

use crate::support::{alive, is_root, read_pid, wait_until, Env};

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The one final record of `job`, once it is there.
fn final_of(env: &Env, job: &str) -> Value {
    wait_until(&format!("the run of {job} to end"), || {
        !env.finals(job).is_empty()
    });
    env.finals(job).remove(0)
}

fn output(rec: &Value) -> String {
    rec["output"].as_str().unwrap_or_default().to_string()
}

/// SIGKILL to `pid` if it is still there (cleanup of background processes).
fn kill(pid: i32) {
    // SAFETY: kill(2) takes plain integers; a stale pid is an error return.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// `pid (comm) state ppid pgrp session tty_nr ...` → (pid, pgrp, session,
/// tty_nr).
fn stat_ids(stat: &str) -> (String, String, String, String) {
    let pid = stat.split(' ').next().unwrap_or_default().to_string();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let at = |i: usize| f.get(i).copied().unwrap_or_default().to_string();
    (pid, at(2), at(3), at(4))
}

#[test]
fn a_job_never_gets_the_daemons_controlling_terminal() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.tty]
schedule = "@reboot"
command = "if (exec 3</dev/tty) 2>/dev/null; then echo has-tty; else echo no-tty; fi; cat /proc/$$/stat"
"#,
    );
    // The daemon leads a session whose controlling terminal is a pty, as
    // when root starts `rea run` in a terminal.
    // SAFETY: plain libc calls on a descriptor owned here.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(master >= 0, "posix_openpt");
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: `master` is a pty master; `name` has room for the path.
    let ok = unsafe {
        libc::grantpt(master) == 0
            && libc::unlockpt(master) == 0
            && libc::ptsname_r(master, name.as_mut_ptr(), name.len()) == 0
    };
    assert!(ok, "cannot set up a pty");
    // SAFETY: ptsname_r wrote a NUL-terminated path.
    let slave_path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let slave = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&slave_path)
        .expect("open the pty");
    let d = env.daemon_configured(&[], |c| {
        c.stdin(slave);
        // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the pty.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let tty_nr = fs::read_to_string(format!("/proc/{}/stat", d.pid()))
        .map(|s| stat_ids(&s).3)
        .unwrap_or_default();
    assert_ne!(tty_nr, "0", "the daemon has a controlling terminal");
    let rec = final_of(&env, "tty");
    let out = output(&rec);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("no-tty"), "{rec}");
    let (pid, pgrp, session, tty) = stat_ids(lines.next().unwrap_or_default());
    assert_eq!(pid, rec["pid"].to_string(), "{rec}");
    assert_eq!(
        (pgrp.as_str(), session.as_str()),
        (pid.as_str(), pid.as_str())
    );
    assert_eq!(tty, "0");
    drop(d);
    // SAFETY: the master opened above.
    unsafe { libc::close(master) };
}

#[test]
fn a_running_job_dies_with_a_killed_daemon() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.long]
schedule = "@reboot"
command = "echo $$ > @ROOT@/pid; exec sleep 1000"
"#,
    );
    let d = env.daemon();
    wait_until("the job to start", || read_pid(&env.path("pid")).is_some());
    let pid = read_pid(&env.path("pid")).expect("pid");
    assert!(alive(pid));
    d.kill9();
    let died = (0..1500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        !alive(pid)
    });
    kill(pid);
    assert!(died, "the job outlived the daemon (no parent-death signal)");
}

#[test]
fn a_job_inherits_no_descriptor_and_no_signal_disposition_of_the_daemon() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.inherit]
schedule = "@reboot"
command = "ls -l /proc/self/fd; grep -E '^Sig(Blk|Ign):' /proc/self/status"
"#,
    );
    let leaked = fs::File::open("/dev/zero").expect("open");
    let d = env.daemon_configured(&[], |c| {
        use std::os::fd::AsRawFd;
        let raw = leaked.as_raw_fd();
        // SAFETY: dup2, signal and sigprocmask are async-signal-safe and
        // touch only this stack; `raw` is open until the spawn returns.
        unsafe {
            c.pre_exec(move || {
                // Whoever starts the daemon may leave it descriptors without
                // close-on-exec, ignored signals and a blocked mask.
                libc::dup2(raw, 9);
                libc::signal(libc::SIGQUIT, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
    });
    let status = fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap_or_default();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("SigIgn:") && !l.ends_with("0000000000000000")),
        "the daemon ignores signals:\n{status}"
    );
    let rec = final_of(&env, "inherit");
    let out = output(&rec);
    for line in out.lines().filter(|l| l.contains(" -> ")) {
        let fd = line
            .split(" -> ")
            .next()
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_default();
        let target = line.split(" -> ").nth(1).unwrap_or_default();
        // 0, 1, 2, and ls's own handle on the directory it lists.
        assert!(
            matches!(fd, "0" | "1" | "2") || target.starts_with("/proc/"),
            "inherited descriptor {fd} -> {target}:\n{out}"
        );
    }
    assert!(
        out.ends_with("SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"),
        "{out}"
    );
}

#[test]
fn a_user_job_gets_crons_environment_and_nothing_of_the_daemons() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    env.jobs(
        r#"[defaults]
env = { FROM_DEFAULTS = "d" }

[jobs.other]
schedule = "@reboot"
user = "nobody"
dir = "/"
command = "env"

[jobs.own]
schedule = "@reboot"
command = "env"
"#,
    );
    let _d = env.daemon_with_env(&[], &[("REA_TEST_SECRET", "hunter2")]);
    let out = output(&final_of(&env, "other"));
    let mut vars: Vec<&str> = out.lines().collect();
    vars.sort_unstable();
    let names: Vec<&str> = vars
        .iter()
        .map(|v| v.split('=').next().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "FROM_DEFAULTS",
            "HOME",
            "LOGNAME",
            "PATH",
            "PWD",
            "REA_ATTEMPT",
            "REA_JOB",
            "REA_RUN_ID",
            "REA_SCHEDULED_AT",
            "REA_TENANT",
            "REA_TRIGGER",
            "SHELL",
            "USER"
        ],
        "{out}"
    );
    for expected in [
        "HOME=/nonexistent",
        "USER=nobody",
        "LOGNAME=nobody",
        "SHELL=/bin/sh",
        "PATH=/usr/bin:/bin",
        "FROM_DEFAULTS=d",
    ] {
        assert!(vars.contains(&expected), "{expected} missing:\n{out}");
    }
    // A job of the daemon's own user still starts from its environment.
    let own = output(&final_of(&env, "own"));
    assert!(own.contains("REA_TEST_SECRET=hunter2"), "{own}");
}

#[test]
fn hooks_of_a_user_job_run_as_that_user_and_read_its_output() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    chmod(env.dir.path(), 0o755);
    let hook_dir = env.path("hook");
    fs::create_dir(&hook_dir).expect("mkdir");
    chmod(&hook_dir, 0o777);
    env.jobs(
        r#"[jobs.fails]
schedule = "@reboot"
user = "nobody"
dir = "/"
command = "echo the output; exit 3"
on_failure = "{ id -un; cat \"$REA_OUTPUT_FILE\"; } > @ROOT@/hook/out 2>&1; touch @ROOT@/hook/done"
"#,
    );
    let _d = env.daemon();
    wait_until("the hook", || env.path("hook/done").exists());
    assert_eq!(env.read("hook/out"), "nobody\nthe output\n");
}

#[test]
fn kill_stragglers_false_lets_a_background_process_outlive_its_run() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.left]
schedule = "@reboot"
kill_stragglers = false
command = "sleep 1000 >/dev/null 2>&1 & echo $! > @ROOT@/left; echo started"

[jobs.stopped]
schedule = "@reboot"
command = "sleep 1000 >/dev/null 2>&1 & echo $! > @ROOT@/stopped; echo started"
"#,
    );
    let d = env.daemon();
    let left = final_of(&env, "left");
    let stopped = final_of(&env, "stopped");
    let left_pid = read_pid(&env.path("left")).expect("pid");
    let stopped_pid = read_pid(&env.path("stopped")).expect("pid");
    let left_alive = alive(left_pid);
    let stopped_alive = alive(stopped_pid);
    let code = d.stop();
    let left_survived_shutdown = alive(left_pid);
    kill(left_pid);
    kill(stopped_pid);
    assert_eq!(code, 0);
    assert_eq!(left["status"], "succeeded", "{left}");
    assert_eq!(output(&left), "started\n");
    assert!(
        left_alive,
        "kill_stragglers = false: the background process was stopped"
    );
    assert!(
        left_survived_shutdown,
        "stopped at shutdown, though no run of it was running"
    );
    assert_eq!(stopped["status"], "succeeded", "{stopped}");
    assert!(
        !stopped_alive,
        "by default the background process is stopped"
    );
}

/// A uid no process uses, so that its process limit counts only the
/// daemon's own processes and threads.
const LIMITED_UID: u32 = 64_998;

#[test]
fn runs_stay_supervised_when_the_daemons_user_runs_out_of_processes() {
    if !is_root() {
        eprintln!("skipped: needs root (to run the daemon as another user)");
        return;
    }
    let env = Env::new();
    chmod(env.dir.path(), 0o755);
    let out = env.path("out");
    fs::create_dir(&out).expect("mkdir");
    std::os::unix::fs::chown(&out, Some(LIMITED_UID), Some(LIMITED_UID)).expect("chown");
    fs::create_dir(env.state()).expect("mkdir");
    chmod(&env.state(), 0o700);
    std::os::unix::fs::chown(env.state(), Some(LIMITED_UID), Some(LIMITED_UID)).expect("chown");
    // Bounded: at most 40 children, and the limit stops it earlier (dash
    // gives up at the first fork refused and exits 2), leaving no process
    // (or thread) to spare for the daemon.
    env.jobs(
        r#"[jobs.fill]
schedule = "@reboot"
command = "i=0; while [ $i -lt 40 ]; do sleep 60 & echo $! >> @ROOT@/out/pids; i=$((i+1)); done"
kill_grace = "2s"
"#,
    );
    chmod(&env.jobs_path(), 0o644);
    let d = env.daemon_configured(&[], |c| {
        c.uid(LIMITED_UID).gid(LIMITED_UID).env("HOME", "/");
        // SAFETY: setrlimit is async-signal-safe and touches only this
        // stack.
        unsafe {
            c.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 30,
                    rlim_max: 30,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let rec = final_of(&env, "fill");
    let pids: Vec<i32> = env
        .read("out/pids")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    let survivors: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    let log = d.log_text();
    drop(d);
    for pid in &pids {
        kill(*pid);
    }
    assert!(pids.len() > 5, "the job forked only {pids:?}");
    assert!(
        !log.contains("panicked") && !output(&rec).contains("supervisor failed"),
        "{rec}\n{log}"
    );
    assert_ne!(rec["exit_code"], -1, "{rec}");
    assert!(
        survivors.is_empty(),
        "stragglers {survivors:?} outlived their run: {rec}"
    );
}

#[test]
fn max_rss_kb_is_the_jobs_not_the_daemons() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.small]
schedule = "@reboot"
command = "exec true"

[jobs.big]
schedule = "@reboot"
command = "perl -e '$x = \"a\" x 100_000_000; print length $x'"
"#,
    );
    let d = env.daemon();
    let small = final_of(&env, "small");
    let big = final_of(&env, "big");
    let status = fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap_or_default();
    let daemon_peak: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    let small_kb = small["max_rss_kb"].as_u64().expect("max_rss_kb");
    assert!(
        small_kb < daemon_peak / 2,
        "`true` reported {small_kb} KiB, the daemon's peak is {daemon_peak} KiB"
    );
    let big_kb = big["max_rss_kb"].as_u64().expect("max_rss_kb");
    // perl builds the string, then copies it into $x: two of them at the
    // peak.
    assert!(
        (95_000..300_000).contains(&big_kb),
        "100 MB of perl (twice, briefly) reported as {big_kb} KiB: {big}"
    );
}

/// The daemon's own user from the user database: (name, home).
fn own_passwd() -> (String, String) {
    // SAFETY: getpwuid returns a pointer into static storage or null; it is
    // read at once, before any other call could overwrite it.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        assert!(!pw.is_null(), "the test's uid is in the user database");
        let s = |p: *const libc::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        (s((*pw).pw_name), s((*pw).pw_dir))
    }
}

/// Issue 14, item 5: under systemd a service has no HOME, USER or LOGNAME;
/// a job without `user` still gets them (its owner is the daemon's user),
/// SHELL is its shell, PATH cron's when the daemon has none, and it starts
/// in that home unless `dir` says otherwise, as cron runs jobs.
#[test]
fn a_job_without_user_gets_crons_variables_and_starts_in_its_owners_home() {
    let env = Env::new();
    env.jobs(
        r#"[jobs.own]
schedule = "@reboot"
command = "pwd; env"

[jobs.elsewhere]
schedule = "@reboot"
dir = "/tmp"
command = "pwd"
"#,
    );
    let _d = env.daemon_configured(&[], |cmd| {
        for name in ["HOME", "USER", "LOGNAME", "SHELL", "PATH"] {
            cmd.env_remove(name);
        }
    });
    let (name, home) = own_passwd();
    let out = output(&final_of(&env, "own"));
    let mut lines = out.lines();
    let cwd = lines.next().unwrap_or_default();
    if Path::new(&home).is_dir() {
        assert_eq!(cwd, home, "starts in the owner's home:\n{out}");
    }
    let vars: Vec<&str> = lines.collect();
    for expected in [
        format!("HOME={home}"),
        format!("USER={name}"),
        format!("LOGNAME={name}"),
        "SHELL=/bin/sh".to_string(),
        "PATH=/usr/bin:/bin".to_string(),
    ] {
        assert!(
            vars.contains(&expected.as_str()),
            "{expected} missing:\n{out}"
        );
    }
    let elsewhere = output(&final_of(&env, "elsewhere"));
    assert_eq!(elsewhere.trim(), "/tmp");
}
