//! Live output: `rea trigger --follow`, `rea logs --follow` and the
//! protocol's `follow`: output as the run writes it, then how it ended; a
//! slow follower loses output and is told how much; one that never reads
//! costs the daemon nothing; followers are bounded and freed when their
//! clients leave.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{rea_bin, wait_until, Conn, Env, PATIENCE};

const JOBS: &str = r#"
[jobs.talk]
schedule = "@yearly"
command = "echo one; echo two >&2; printf 'no newline'; exit 4"

[jobs.gated]
schedule = "@yearly"
command = "echo first; touch @ROOT@/wrote; while [ ! -e @ROOT@/go ]; do sleep 0.01; done; echo second; exit 3"

[jobs.cut]
schedule = "@yearly"
command = "printf 'a\\303'; touch @ROOT@/wrote; while [ ! -e @ROOT@/go ]; do sleep 0.01; done; printf '\\251b\\n'"

[jobs.flood]
schedule = "@yearly"
command = "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c $BYTES"
env = { BYTES = "20000000" }

[jobs.quick]
schedule = "@yearly"
command = "echo quick"
"#;

/// `rea ARGS` started in the background, its stdout and stderr collected
/// as they come.
struct Background {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Background {
    fn start(env: &Env, args: &[&str]) -> Background {
        let mut child = Command::new(rea_bin())
            .args(args)
            .current_dir(env.dir.path())
            .env("REA_FILE", env.jobs_path())
            .env("REA_STATE_DIR", env.state())
            .env("NO_COLOR", "1")
            .env("TZ", "UTC")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run rea");
        let collect = |mut from: Box<dyn Read + Send>| {
            let into = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&into);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
            into
        };
        let stdout = collect(Box::new(child.stdout.take().expect("stdout")));
        let stderr = collect(Box::new(child.stderr.take().expect("stderr")));
        Background {
            child,
            stdout,
            stderr,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits for the exit; (code, stdout, stderr).
    fn finish(mut self) -> (i32, String, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "rea did not exit\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The collecting threads see the end of the pipes right after.
        wait_until("the output's end", || {
            Arc::strong_count(&self.stdout) == 1 && Arc::strong_count(&self.stderr) == 1
        });
        let (out, err) = (self.stdout(), self.stderr());
        assert!(!err.contains("panicked"), "rea panicked:\n{err}");
        (status.code().unwrap_or(-1), out, err)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of a streamed answer after its first, up to and including
/// the final record.
fn rest_of_stream(conn: &mut Conn) -> Vec<Value> {
    let mut lines = Vec::new();
    loop {
        let line = conn.recv().expect("a stream line");
        assert_eq!(line["ok"], true, "{line}");
        let last = line["data"].get("stream").is_none();
        lines.push(line["data"].clone());
        if last {
            return lines;
        }
    }
}

/// The text of a stream's `output` lines, and the sum of its `skipped`.
fn output_of(lines: &[Value]) -> (String, u64) {
    let mut text = String::new();
    let mut skipped = 0;
    for l in lines {
        match l["stream"].as_str() {
            Some("output") => text.push_str(l["text"].as_str().unwrap()),
            Some("skipped") => skipped += l["bytes"].as_u64().unwrap(),
            _ => {}
        }
    }
    (text, skipped)
}

/// Peak resident memory of a process, in KiB.
fn peak_rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

#[test]
fn trigger_follow_streams_the_output_then_exits_with_the_runs_status() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let out = env.rea(&["trigger", "talk", "--follow"]);
    out.code(4);
    // stdout is the job's output, stdout and stderr as they came, nothing
    // else; how it ended goes to stderr.
    assert_eq!(out.stdout, "one\ntwo\nno newline");
    out.stderr_has("following its output")
        .stderr_has("talk run ")
        .stderr_has("failed")
        .stderr_has("(exit 4)");

    // --json: the trigger's answer, the stream's lines, the final record.
    let out = env.rea(&["trigger", "talk", "--follow", "--json"]);
    out.code(4);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let run = lines[0]["run"].as_str().expect("the run").to_string();
    assert_eq!(lines[1]["stream"], "run");
    assert_eq!(lines[1]["run"], run.as_str());
    assert_eq!(output_of(&lines), ("one\ntwo\nno newline".to_string(), 0));
    let last = lines.last().unwrap();
    assert_eq!(last["run"], run.as_str());
    assert_eq!(last["status"], "failed");
    assert_eq!(last["exit_code"], 4);
    assert_eq!(last["output"], "one\ntwo\nno newline");
}

#[test]
fn logs_follow_waits_for_the_next_run_and_exits_with_its_status() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let follower = Background::start(&env, &["logs", "--follow", "talk"]);
    wait_until("the follower to wait", || {
        follower
            .stderr()
            .contains("waiting for the next run of talk")
    });
    env.rea(&["trigger", "talk"]).ok();
    let (code, stdout, stderr) = follower.finish();
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(stdout, "one\ntwo\nno newline");
    assert!(stderr.contains("started"), "{stderr}");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("talk run ") && last.contains("failed") && last.ends_with("(exit 4)"),
        "the last line says how the run ended: {stderr}"
    );
}

#[test]
fn logs_follow_joins_a_running_run_with_what_it_wrote_so_far() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    env.rea(&["trigger", "gated"]).ok();
    wait_until("the run's first line", || env.path("wrote").exists());
    let follower = Background::start(&env, &["logs", "-f", "gated"]);
    // What it wrote before anyone followed comes first…
    wait_until("the output so far", || follower.stdout() == "first\n");
    assert!(follower.stderr().contains("following run "));
    // …then what it writes from now on.
    std::fs::write(env.path("go"), "").unwrap();
    let (code, stdout, stderr) = follower.finish();
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stdout, "first\nsecond\n");
    assert!(stderr.contains("(exit 3)"), "{stderr}");
}

/// A follower waiting for a job's next run when the daemon stops is told
/// that none will start (the answer goes out before the daemon exits), and
/// exits with an error rather than a closed connection.
#[test]
fn a_waiting_follower_is_told_when_the_daemon_stops() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let follower = Background::start(&env, &["logs", "-f", "quick"]);
    wait_until("the follower to wait", || {
        follower
            .stderr()
            .contains("waiting for the next run of quick")
    });
    assert_eq!(d.stop(), 0);
    let (code, stdout, stderr) = follower.finish();
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("the daemon is stopping: no run will start"),
        "{stderr}"
    );
}

#[test]
fn a_character_cut_between_two_writes_arrives_whole() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let mut conn = follow_waiting(&env, "cut");
    env.rea(&["trigger", "cut"]).ok();
    let run_line = conn.recv().expect("the run line");
    assert_eq!(run_line["data"]["stream"], "run", "{run_line}");
    // "a" and the first byte of "é" were written together: the text so far
    // is "a", the cut byte waits for the rest of its character.
    let a = conn.recv().expect("an output line");
    assert_eq!(
        a["data"],
        serde_json::json!({"stream": "output", "text": "a"})
    );
    std::fs::write(env.path("go"), "").unwrap();
    let rest = rest_of_stream(&mut conn);
    assert_eq!(output_of(&rest), ("éb\n".to_string(), 0));
    assert_eq!(rest.last().unwrap()["output"], "aéb\n");
}

#[test]
fn a_slow_follower_is_told_how_many_bytes_it_lost() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let mut conn = follow_waiting(&env, "flood");
    env.rea(&["trigger", "flood"]).ok();
    // Not reading while the whole run goes by.
    wait_until("the flood to end", || !env.finals("flood").is_empty());
    let rest = rest_of_stream(&mut conn);
    assert_eq!(rest[0]["stream"], "run");
    let (text, skipped) = output_of(&rest);
    assert!(skipped > 0, "a follower that did not read lost nothing?");
    // Every byte is accounted for: shown, or counted as skipped.
    assert_eq!(text.len() as u64 + skipped, 20_000_000);
    assert!(text.bytes().all(|b| b == b'x' || b == b'\n'));
    let last = rest.last().unwrap();
    assert_eq!(last["status"], "succeeded");
    assert_eq!(last["output_bytes"], 20_000_000);
}

#[test]
fn a_follower_that_never_reads_costs_the_daemon_nothing() {
    let env = Env::new();
    env.jobs(&JOBS.replace("20000000", "300000000"));
    let d = env.daemon();
    let before = peak_rss_kb(d.pid());
    let stalled = follow_waiting(&env, "flood");
    env.rea(&["trigger", "flood"]).ok();
    // Other jobs run meanwhile, and other clients are answered.
    env.rea(&["trigger", "quick", "--wait"])
        .ok()
        .stdout_has("succeeded");
    env.rea(&["status", "quick"]).ok();
    // The run is read to its end, whoever does not read its output.
    wait_until("the flood to end", || !env.finals("flood").is_empty());
    let flood = &env.finals("flood")[0];
    assert_eq!(flood["status"], "succeeded");
    assert_eq!(flood["output_bytes"], 300_000_000);
    // 300 MB went by a follower that read none of it: the daemon kept a
    // bounded window, not the backlog.
    let grew = peak_rss_kb(d.pid()).saturating_sub(before);
    assert!(grew < 32 * 1024, "the daemon grew by {grew} KiB");
    drop(stalled);
}

#[test]
fn a_stream_keeps_the_connections_answers_in_order() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let mut conn = Conn::open(&env.socket());
    // Pipelined: the ping is answered after the stream's last line.
    assert!(conn.send(r#"{"v":1,"op":"follow","job":"talk"}"#));
    assert!(conn.send(r#"{"v":1,"op":"ping"}"#));
    let first = conn.recv().expect("the follow answer");
    assert_eq!(first["data"]["state"], "waiting", "{first}");
    env.rea(&["trigger", "talk"]).ok();
    let rest = rest_of_stream(&mut conn);
    assert_eq!(rest.last().unwrap()["status"], "failed");
    let ping = conn.recv().expect("the ping answer");
    assert!(ping["data"]["pid"].is_u64(), "{ping}");
}

#[test]
fn a_client_that_only_closes_its_sending_side_still_gets_its_stream() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let mut conn = follow_waiting(&env, "talk");
    // As `socat` does at the end of its input.
    conn.shutdown_write();
    env.rea(&["trigger", "talk"]).ok();
    let rest = rest_of_stream(&mut conn);
    assert_eq!(output_of(&rest).0, "one\ntwo\nno newline");
}

#[test]
fn followers_are_bounded_and_freed_when_their_clients_leave() {
    const MAX_FOLLOWERS: usize = 64;
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let follow = r#"{"v":1,"op":"follow","job":"quick"}"#;
    let mut conns: Vec<Conn> = (0..MAX_FOLLOWERS)
        .map(|_| {
            let mut c = Conn::open(&env.socket());
            let a = c.ask(follow).expect("an answer");
            assert_eq!(a["data"]["state"], "waiting", "{a}");
            c
        })
        .collect();
    let mut one_more = Conn::open(&env.socket());
    let refused = one_more.ask(follow).expect("an answer");
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["code"], "refused");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("too many followers"),
        "{refused}"
    );
    env.rea(&["logs", "--follow", "quick"])
        .code(1)
        .stderr_has("too many followers");
    // Clients that leave (Ctrl-C on `rea logs --follow`) free their slots,
    // though the run they waited for never came.
    conns.truncate(MAX_FOLLOWERS - 2);
    wait_until("a freed slot", || {
        let mut c = Conn::open(&env.socket());
        c.ask(follow).is_some_and(|a| a["ok"] == true)
    });
    // Those still there get the run.
    env.rea(&["trigger", "quick"]).ok();
    let rest = rest_of_stream(&mut conns[0]);
    assert_eq!(output_of(&rest).0, "quick\n");
}

#[test]
fn following_an_unknown_job_or_without_a_daemon_fails_clearly() {
    let env = Env::new();
    env.jobs(JOBS);
    env.rea(&["logs", "--follow", "talk"]).code(3);
    let _d = env.daemon();
    env.rea(&["logs", "--follow", "tlak"])
        .code(5)
        .stderr_has("no job named \"tlak\"")
        .stderr_has("\"talk\"");
    env.rea(&["logs", "--follow", "talk", "--run", "x"]).code(2);
    // In rea logs, -f is --follow (as in tail -f); --file still works.
    env.rea(&["logs", "-f", "tlak"])
        .code(5)
        .stderr_has("no job named \"tlak\"");
    let file = env.path("jobs.toml").display().to_string();
    env.rea(&["logs", "--file", &file, "-f", "tlak"])
        .code(5)
        .stderr_has("no job named \"tlak\"");
}

/// A connection following `job`, answered `waiting` (no run yet).
fn follow_waiting(env: &Env, job: &str) -> Conn {
    let mut conn = Conn::open(&env.socket());
    let first = conn
        .ask(&format!(r#"{{"v":1,"op":"follow","job":"{job}"}}"#))
        .expect("an answer");
    assert_eq!(first["data"]["state"], "waiting", "{first}");
    conn
}
