//! `rea top` driven as a person would: the real binary in a tmux pane of
//! 80×24 (a private tmux server per test, on a socket in the sandbox,
//! killed when the test ends), keys sent with `send-keys`, the screen read
//! with `capture-pane`. Each view shows what the daemon holds; each action
//! is confirmed and then takes effect in the daemon (checked with `rea
//! status`, the history and the audit log); `q`, SIGTERM and a closed
//! terminal give the terminal back as it was. Skipped, loudly, without
//! tmux (.ci/run installs it).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{rea_bin, wait_until, Env, PATIENCE};

/// A private tmux server running `rea top` in one 80×24 pane.
struct Top {
    socket: PathBuf,
}

impl Top {
    /// `rea top ARGS` in the sandbox's environment; after it exits the
    /// pane prints its exit status and whether the terminal is back in
    /// canonical mode and echoes (`icanon` and `echo`, not `-icanon` or
    /// `-echo`), then waits.
    fn start(env: &Env, test: &str, args: &str, vars: &[(&str, &str)]) -> Option<Top> {
        Top::start_as(env, test, "", args, vars)
    }

    /// [`Top::start`], with `wrapper` before the command (to run it as
    /// another user).
    fn start_as(
        env: &Env,
        test: &str,
        wrapper: &str,
        args: &str,
        vars: &[(&str, &str)],
    ) -> Option<Top> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("SKIPPED {test}: tmux is not installed (apt-get install tmux)");
            return None;
        }
        let socket = env.path(&format!("tmux-{:08x}.sock", fastrand::u32(..)));
        let script = format!(
            "{wrapper} {} top {args}; echo \"rea top exited $?\"; stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon\\|-\\?echo'; exec sleep 600",
            rea_bin()
        );
        let mut cmd = Command::new("tmux");
        cmd.arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
            ])
            .arg(script)
            .current_dir(env.dir.path())
            .env("REA_FILE", env.jobs_path())
            .env("REA_STATE_DIR", env.state())
            .env("TZ", "UTC")
            .env("TERM", "xterm-256color")
            .env_remove("RUST_LOG")
            .env_remove("TMUX")
            .stdin(Stdio::null());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let status = cmd.status().expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        let top = Top { socket };
        top.wait_for("1 Overview");
        Some(top)
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    /// Each key on its own, as typed (Escape and a digit sent together
    /// would read as Alt-digit).
    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", k]);
            std::thread::sleep(Duration::from_millis(60));
        }
    }

    /// Waits until `rea top` has exited with `code` and the pane has said
    /// how it left the terminal; the screen.
    fn wait_exit(&self, code: i32) -> String {
        let said = format!("rea top exited {code}");
        let s = self.wait_until(&said, |s| {
            s.contains(&said) && s.lines().any(|l| l.ends_with("icanon"))
        });
        assert!(
            s.lines().any(|l| l == "icanon"),
            "the terminal is in canonical mode again:\n{s}"
        );
        assert!(
            !s.contains("1 Overview"),
            "the alternate screen is gone:\n{s}"
        );
        s
    }

    /// Waits until the screen shows `needle`; the screen.
    fn wait_for(&self, needle: &str) -> String {
        self.wait_until(needle, |s| s.contains(needle))
    }

    fn wait_until(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            if cond(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("the screen never showed {what}:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of `rea top` (the pane's shell's child).
    fn pid(&self) -> i32 {
        let shell = self.tmux(&["display-message", "-p", "#{pane_pid}"]);
        let shell: i32 = shell.trim().parse().expect("pane pid");
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("rea top runs in the pane")
    }

    /// The line of the screen that starts with `start` (trimmed).
    fn line(screen: &str, start: &str) -> String {
        screen
            .lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?}:\n{screen}"))
            .to_string()
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .stderr(Stdio::null())
            .status();
    }
}

const JOBS: &str = r#"
[jobs.backup]
schedule = "@hourly"
command = "echo backing up; echo done"
tags = ["nightly"]

[jobs.reports]
schedule = "0 23 * * *"
timezone = "Europe/Paris"
command = "echo no data >&2; exit 3"
tags = ["nightly"]

[jobs.hung]
schedule = "@yearly"
command = "echo started; exec sleep 300"
kill_grace = "1s"
"#;

fn paused(env: &Env, job: &str) -> bool {
    let status = env.rea(&["status", "--json"]).ok().json();
    status["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["name"] == job)
        .unwrap_or_else(|| panic!("no job {job}"))["paused"]
        == true
}

fn audit(env: &Env) -> Vec<serde_json::Value> {
    env.read("state/audit.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn top_shows_what_the_daemon_holds_in_each_view() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["trigger", "reports", "--wait"]).code(3);
    env.rea(&["trigger", "backup", "--wait"]).ok();
    env.rea(&["trigger", "hung"]).ok();
    env.wait_until("hung runs", || !env.runs("hung", "started").is_empty());
    env.rea(&[
        "submit",
        "--name",
        "later-cleanup",
        "--in",
        "2h",
        "--",
        "true",
    ])
    .ok();
    let Some(top) = Top::start(
        &env,
        "top_shows_what_the_daemon_holds_in_each_view",
        "--utc",
        &[],
    ) else {
        return;
    };

    // The overview: counts, the run in progress, what fails, what comes.
    let s = top.wait_for("Running (1)");
    assert!(s.contains("3 jobs · 1 running · 1 failing"), "{s}");
    assert!(s.contains("one-shots 1"), "{s}");
    assert!(Top::line(&s, "hung").contains("since"), "{s}");
    assert!(Top::line(&s, "reports").contains("1×"), "{s}");
    assert!(s.contains("Next due"), "{s}");

    // The job table: the daemon's page, outcomes, the trend, each job's
    // next fire in its own zone (--utc shows UTC).
    top.keys(&["2"]);
    let s = top.wait_for("Jobs 1/3");
    assert!(s.contains("NAME") && s.contains("OUTCOMES"), "{s}");
    assert!(Top::line(&s, "backup").contains('▁'), "{s}");
    assert!(Top::line(&s, "reports").contains('█'), "{s}");
    assert!(Top::line(&s, "reports").contains("failing"), "{s}");
    assert!(Top::line(&s, "hung").contains("running"), "{s}");
    // Filtered and sorted by the daemon.
    top.keys(&["/"]);
    for c in ["r", "e", "p"] {
        top.keys(&[c]);
    }
    top.keys(&["Enter"]);
    let s = top.wait_for("Jobs 1/1");
    assert!(s.contains("reports") && !s.contains("backup "), "{s}");
    top.keys(&["Escape"]);
    top.wait_for("Jobs 1/3");
    top.keys(&["s"]);
    let s = top.wait_for("sort name");
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| {
            ["backup", "hung", "reports"]
                .iter()
                .any(|n| l.starts_with(n))
        })
        .collect();
    assert!(
        rows[0].starts_with("backup") && rows[2].starts_with("reports"),
        "{s}"
    );

    // The timeline: the runs of the last hours, the one running now.
    top.keys(&["3"]);
    let s = top.wait_for("Timeline: last 3h");
    let s = if s.contains("loading") {
        top.wait_until("the history", |s| !s.contains("loading"))
    } else {
        s
    };
    assert!(Top::line(&s, "reports").contains('X'), "{s}");
    assert!(Top::line(&s, "backup").contains('█'), "{s}");
    assert!(Top::line(&s, "hung").contains('▒'), "{s}");

    // One-shots, nodes, help.
    top.keys(&["5"]);
    let s = top.wait_for("later-cleanup");
    assert!(s.contains("1 pending"), "{s}");
    top.keys(&["6"]);
    top.wait_for("local mode");
    top.keys(&["?"]);
    top.wait_for("rea top: keys");
    top.keys(&["Escape"]);
    // A run's output, followed.
    top.keys(&["1"]);
    top.wait_for("Running (1)");
    top.keys(&["o"]);
    let s = top.wait_for("Output of hung");
    assert!(s.contains("started"), "{s}");

    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_actions_are_confirmed_then_take_effect_and_are_audited() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["submit", "--name", "nope", "--in", "2h", "--", "true"])
        .ok();
    let Some(top) = Top::start(
        &env,
        "top_actions_are_confirmed_then_take_effect_and_are_audited",
        "",
        &[],
    ) else {
        return;
    };
    top.keys(&["2"]);
    top.wait_for("Jobs 1/3");

    // Pause: asked, refused with n, nothing changes; then yes.
    top.keys(&["p"]);
    top.wait_for("Pause job backup? (y/n)");
    top.keys(&["n"]);
    top.wait_for("cancelled: nothing was changed");
    assert!(!paused(&env, "backup"));
    top.keys(&["p"]);
    top.wait_for("Pause job backup? (y/n)");
    top.keys(&["y"]);
    top.wait_for("paused backup");
    assert!(paused(&env, "backup"));
    top.keys(&["r", "y"]);
    top.wait_for("resumed backup");
    assert!(!paused(&env, "backup"));

    // By tag: the job's tag is offered.
    top.keys(&["P"]);
    top.wait_for("pause every job tagged: nightly");
    top.keys(&["Enter"]);
    top.wait_for("Pause every job tagged nightly? (y/n)");
    top.keys(&["y"]);
    top.wait_for("paused backup, reports");
    assert!(paused(&env, "reports") && !paused(&env, "hung"));
    top.keys(&["R", "Enter", "y"]);
    top.wait_for("resumed backup, reports");
    assert!(!paused(&env, "reports"));

    // Trigger, and its output followed to the end.
    top.keys(&["t"]);
    top.wait_for("Run backup now and follow its output? (y/n)");
    top.keys(&["y"]);
    let s = top.wait_for("succeeded");
    assert!(
        s.contains("Output of backup") && s.contains("backing up"),
        "{s}"
    );
    // (Its hourly run may come too, across an hour.)
    let manual: Vec<_> = env
        .finals("backup")
        .into_iter()
        .filter(|r| r["trigger"] == "manual")
        .collect();
    assert_eq!(manual.len(), 1, "{manual:?}");
    assert_eq!(manual[0]["status"], "succeeded");

    // Kill a running run from the overview.
    env.rea(&["trigger", "hung"]).ok();
    top.keys(&["1"]);
    top.wait_for("Running (1)");
    top.keys(&["x"]);
    top.wait_for("(it ends as killed, no retry)? (y/n)");
    top.keys(&["y"]);
    // What the answer said, or (live) the run's end that followed it.
    top.wait_until("the kill", |s| {
        s.contains("killing run") || s.contains("killed after")
    });
    env.wait_until("the killed run", || !env.runs("hung", "killed").is_empty());

    // Cancel a one-shot.
    top.keys(&["5"]);
    top.wait_for("nope");
    top.keys(&["c"]);
    top.wait_for("Cancel one-shot nope? (y/n)");
    top.keys(&["y"]);
    top.wait_for("nope: cancelled");
    env.rea(&["pending"]).ok().stdout_has("no pending");

    // Each change is in the audit log as top's; the refusal sent nothing.
    let from_top: Vec<String> = audit(&env)
        .iter()
        .filter(|e| e["source"] == "top")
        .map(|e| e["action"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        from_top,
        ["pause", "resume", "pause", "resume", "trigger", "kill", "cancel"],
        "{:?}",
        audit(&env)
    );
    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_shows_what_happens_as_the_daemon_pushes_it() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let Some(top) = Top::start(
        &env,
        "top_shows_what_happens_as_the_daemon_pushes_it",
        "",
        &[],
    ) else {
        return;
    };
    let s = top.wait_for("· live");
    assert!(s.contains("0 running") && !s.contains("failing 1"), "{s}");
    // No key is pressed: the subscription's events redraw the screen.
    env.rea(&["trigger", "hung"]).ok();
    let s = top.wait_for("Running (1)");
    assert!(Top::line(&s, "hung").contains("since"), "{s}");
    env.rea(&["trigger", "reports", "--wait"]).code(3);
    let s = top.wait_for("reports: run");
    assert!(s.contains("failed (exit 3)"), "{s}");
    top.wait_for("failing 1");
    env.rea(&["pause", "backup"]).ok();
    top.keys(&["2"]);
    let s = top.wait_for("Jobs 1/3");
    assert!(Top::line(&s, "backup").contains("paused"), "{s}");
    env.rea(&["resume", "backup"]).ok();
    top.wait_until("backup resumed", |s| {
        !Top::line(s, "backup").contains("paused")
    });
    env.rea(&["kill", "hung"]).ok();
    top.wait_for("hung: run");
    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_goes_on_across_a_daemon_restart() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let Some(top) = Top::start(&env, "top_goes_on_across_a_daemon_restart", "", &[]) else {
        return;
    };
    top.wait_for("· live");
    let pid = d.pid();
    d.stop();
    top.wait_for("the subscription ended");
    let d = env.daemon();
    assert_ne!(d.pid(), pid);
    // Asked again on the timer: the new daemon's overview, and its events.
    let s = top.wait_for(&format!("pid {}", d.pid()));
    top.wait_until("live again", |s| s.contains("· live"));
    assert!(s.contains("3 jobs"), "{s}");
    env.rea(&["trigger", "reports", "--wait"]).code(3);
    top.wait_for("failed (exit 3)");
    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_leaves_the_screen_for_rea_edit_and_comes_back() {
    if !crate::support::is_root() {
        eprintln!(
            "SKIPPED top_leaves_the_screen_for_rea_edit_and_comes_back: root edits the main file"
        );
        return;
    }
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let editor = env.write(
        "editor.sh",
        "#!/bin/sh\nprintf '\\n[jobs.added]\\nschedule = \"@daily\"\\ncommand = \"true\"\\n' >> \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let editor = editor.display().to_string();
    let Some(top) = Top::start(
        &env,
        "top_leaves_the_screen_for_rea_edit_and_comes_back",
        "",
        &[("VISUAL", &editor)],
    ) else {
        return;
    };
    top.keys(&["e"]);
    top.wait_for("(rea edit)? (y/n)");
    top.keys(&["y"]);
    top.wait_for("rea edit: done");
    wait_until("the added job", || env.rea(&["status", "added"]).code == 0);
    top.keys(&["2"]);
    top.wait_for("added");
    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_gives_the_terminal_back_on_sigterm_and_hangup() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let Some(top) = Top::start(
        &env,
        "top_gives_the_terminal_back_on_sigterm_and_hangup",
        "",
        &[],
    ) else {
        return;
    };
    top.wait_for("3 jobs");
    let pid = top.pid();
    // SAFETY: a signal to the rea top this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let s = top.wait_exit(143);
    assert!(!s.contains("rea:"), "a signal is not an error:\n{s}");
    drop(top);

    // The terminal goes away under it (an ssh connection dropped): it ends.
    let top = Top::start(
        &env,
        "top_gives_the_terminal_back_on_sigterm_and_hangup",
        "",
        &[],
    )
    .expect("tmux");
    top.wait_for("3 jobs");
    let pid = top.pid();
    drop(top);
    wait_until("rea top to end with its terminal", || {
        !crate::support::alive(pid)
    });
}

#[test]
fn top_follows_a_triggered_run_that_waits_for_a_slot_from_its_first_line() {
    let env = Env::new();
    let (_d, go) =
        crate::summaries::one_slot_taken(&env, "echo first line; sleep 0.3; echo second line");
    let Some(top) = Top::start(
        &env,
        "top_follows_a_triggered_run_that_waits_for_a_slot_from_its_first_line",
        "",
        &[],
    ) else {
        return;
    };
    top.keys(&["2", "/", "t", "a", "l", "k", "Enter"]);
    top.wait_for("Jobs 1/1");
    top.keys(&["t"]);
    top.wait_for("Run talk now and follow its output? (y/n)");
    top.keys(&["y"]);
    let s = top.wait_for("Output of talk");
    assert!(!s.contains("first line"), "it waits for hold's slot:\n{s}");
    std::fs::write(&go, "").expect("release hold");
    let s = top.wait_for("second line");
    let first = s.find("first line").unwrap_or_else(|| panic!("{s}"));
    let second = s.find("second line").unwrap_or_else(|| panic!("{s}"));
    assert!(first < second, "{s}");
    top.keys(&["q"]);
    top.wait_exit(0);
}

#[test]
fn top_gives_the_terminal_back_after_a_panic() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let Some(top) = Top::start(
        &env,
        "top_gives_the_terminal_back_after_a_panic",
        "",
        &[("REA_TEST_TOP_PANIC_ON_KEY", "%"), ("RUST_BACKTRACE", "0")],
    ) else {
        return;
    };
    top.wait_for("3 jobs");
    top.keys(&["%"]);
    // A panic exits with 101, the message readable on the normal screen.
    let s = top.wait_exit(101);
    assert!(
        s.contains("REA_TEST_TOP_PANIC_ON_KEY=%: a test's panic"),
        "the panic message is shown:\n{s}"
    );
    top.wait_until("the terminal echoes again", |s| {
        s.lines().any(|l| l == "echo")
    });
    let flags = top.tmux(&["display-message", "-p", "#{alternate_on} #{cursor_flag}"]);
    assert_eq!(flags.trim(), "0 1", "alternate screen left, cursor shown");
    // What is typed now is echoed by the terminal, a line at a time.
    top.tmux(&["send-keys", "-l", "typed after the panic"]);
    top.wait_for("typed after the panic");
}

#[test]
fn a_users_top_shows_and_touches_her_own_jobs_only() {
    let test = "a_users_top_shows_and_touches_her_own_jobs_only";
    if crate::support::skip_unless_root(test) {
        return;
    }
    let env = crate::users::hung_jobs_env();
    let _d = env.daemon();
    for job in ["sys", "rea-alice/hers", "rea-bob/his"] {
        env.rea(&["trigger", job]).ok();
    }
    env.wait_until("three runs", || {
        ["sys", "rea-alice/hers", "rea-bob/his"]
            .iter()
            .all(|j| !env.runs(j, "started").is_empty())
    });
    let (uid, gid) = crate::support::throwaway_user("rea-alice").expect("user");
    let wrapper = format!(
        "setpriv --reuid={uid} --regid={gid} --clear-groups env -i PATH=/usr/bin:/bin HOME=/nonexistent TERM=xterm REA_STATE_DIR={} NO_COLOR=1 TZ=UTC",
        env.state().display()
    );
    let Some(top) = Top::start_as(&env, test, &wrapper, "", &[]) else {
        return;
    };
    // Her counts, her run, her names as she writes them.
    let s = top.wait_for("Running (1)");
    assert!(s.contains("1 jobs (rea-alice's) · 1 running"), "{s}");
    assert!(Top::line(&s, "hers").contains("since"), "{s}");
    assert!(!s.contains("his") && !s.contains("sys"), "{s}");
    top.keys(&["2"]);
    let s = top.wait_for("Jobs 1/1");
    assert!(
        s.contains("hers") && !s.contains("his") && !s.contains("sys"),
        "{s}"
    );
    // The other tenants' runs are not on the timeline either.
    top.keys(&["3"]);
    let s = top.wait_until("the history", |s| {
        s.contains("Timeline") && !s.contains("loading")
    });
    assert!(
        s.contains("hers") && !s.contains("his") && !s.contains("sys"),
        "{s}"
    );
    // Her own pause lands, on her job, as hers, from top.
    top.keys(&["2", "p"]);
    top.wait_for("Pause job hers? (y/n)");
    top.keys(&["y"]);
    top.wait_for("paused hers");
    assert!(paused(&env, "rea-alice/hers") && !paused(&env, "rea-bob/his"));
    let entry = audit(&env)
        .into_iter()
        .rfind(|e| e["action"] == "pause")
        .expect("audited");
    assert_eq!(
        (
            entry["user"].as_str(),
            entry["source"].as_str(),
            entry["tenant"].as_str()
        ),
        (Some("rea-alice"), Some("top"), Some("rea-alice")),
        "{entry}"
    );
    top.keys(&["q"]);
    top.wait_exit(0);
    for job in ["sys", "rea-alice/hers", "rea-bob/his"] {
        env.rea(&["kill", job]);
    }
}

#[test]
fn top_without_a_daemon_says_so_without_a_screen() {
    let env = Env::new();
    env.jobs(JOBS);
    env.rea(&["top"])
        .code(3)
        .stderr_has("no rea daemon is running");
}
