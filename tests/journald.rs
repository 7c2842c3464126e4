//! Logging into the journal: when stderr is the stream `$JOURNAL_STREAM`
//! names (as systemd sets it for a service), each line carries its syslog
//! priority as a `<N>` prefix and no timestamp of rea's own. Tested with
//! a pipe standing in for the journal's stream: its device and inode go
//! into `JOURNAL_STREAM`, exactly as systemd would set them.
//!
//! Runs' output in the journal (`[daemon] job_output = "journal"`): one
//! entry per line, in journald's native protocol, tagged with JOB and RUN.
//! Tested with a datagram socket standing in for journald's
//! (`REA_JOURNAL_SOCKET`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::support::{wait_until, Env, PATIENCE};

/// A pipe: (read end, write end).
fn pipe() -> (File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Lines read from `read` by a thread, as they arrive.
fn collect(read: File) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(read).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

const JOBS: &str = "[jobs.fails]\nschedule = \"@yearly\"\ncommand = \"exit 3\"\n";

/// Starts a daemon whose stderr is a pipe; `stream` chooses what
/// `JOURNAL_STREAM` says (given the pipe's real `DEV:INO`).
fn daemon_on_a_pipe(
    env: &Env,
    stream: impl FnOnce(&str) -> String,
) -> (crate::support::Daemon, Arc<Mutex<Vec<String>>>) {
    let (read, write) = pipe();
    let meta = File::from(write.try_clone().unwrap()).metadata().unwrap();
    let value = stream(&format!("{}:{}", meta.dev(), meta.ino()));
    let d = env.daemon_configured(&[], move |c| {
        c.stderr(Stdio::from(write))
            .env("JOURNAL_STREAM", value)
            .env("RUST_LOG", "debug");
    });
    (d, collect(read))
}

fn text(lines: &Arc<Mutex<Vec<String>>>) -> String {
    lines.lock().unwrap().join("\n")
}

#[test]
fn under_the_journal_lines_carry_their_priority_and_no_timestamp() {
    let env = Env::new();
    env.jobs(JOBS);
    let (_d, lines) = daemon_on_a_pipe(&env, |real| real.to_string());
    // A failed run is a warning; a rejected file an error, with a hint on a
    // line of its own.
    env.rea(&["trigger", "fails", "--wait"]).code(3);
    env.jobs(&format!("{JOBS}comand = \"x\"\n"));
    env.rea(&["reload"]).code(2);
    wait_until("an error line", || text(&lines).contains("<3>"));
    let all = lines.lock().unwrap().clone();
    let joined = all.join("\n");
    for line in &all {
        let prio = line.get(..3).unwrap_or("");
        assert!(
            ["<3>", "<4>", "<6>", "<7>"].contains(&prio),
            "a line without a priority prefix: {line:?}\n{joined}"
        );
        // No timestamp: the journal has its own.
        let rest = &line[3..];
        assert!(
            !rest.starts_with("20") && !rest.contains("Z "),
            "a timestamp in {line:?}"
        );
        // No level word either: the priority says it.
        assert!(
            !rest.trim_start().starts_with("INFO") && !rest.trim_start().starts_with("WARN"),
            "a level word in {line:?}"
        );
    }
    assert!(
        all.iter()
            .any(|l| l.starts_with("<6>") && l.contains("daemon started")),
        "no info line:\n{joined}"
    );
    assert!(
        all.iter()
            .any(|l| l.starts_with("<4>") && l.contains("run failed")),
        "no warning for the failed run:\n{joined}"
    );
    assert!(
        all.iter()
            .any(|l| l.starts_with("<3>") && l.contains("unknown field \"comand\"")),
        "no error for the rejected file:\n{joined}"
    );
    // The hint continues the error: same priority, its own journal entry.
    assert!(
        all.iter()
            .any(|l| l.starts_with("<3>") && l.contains("hint: did you mean \"command\"?")),
        "the hint line lost its priority:\n{joined}"
    );
}

#[test]
fn a_journal_stream_that_is_not_stderr_changes_nothing() {
    let env = Env::new();
    env.jobs(JOBS);
    // Inherited from a parent whose stderr was the journal, but ours is
    // another file: plain lines with timestamps, as on a terminal.
    let (_d, lines) = daemon_on_a_pipe(&env, |_| "1:1".to_string());
    env.rea(&["trigger", "fails", "--wait"]).code(3);
    wait_until("the failed run's line", || {
        text(&lines).contains("run failed")
    });
    let all = lines.lock().unwrap().clone();
    let failed = all
        .iter()
        .find(|l| l.contains("run failed"))
        .unwrap()
        .clone();
    assert!(!failed.starts_with('<'), "{failed}");
    assert!(failed.starts_with("20"), "no timestamp: {failed}");
    assert!(failed.contains("WARN"), "no level: {failed}");
}

/// A socket standing in for journald's: (socket, its path).
fn fake_journal(env: &Env) -> (UnixDatagram, String) {
    let path = env.path("journal.socket");
    let socket = UnixDatagram::bind(&path).expect("bind the journal socket");
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    (socket, path.display().to_string())
}

/// One entry of the native protocol: `KEY=value` lines, or `KEY`, a
/// newline, a 64-bit little-endian length, the value, a newline.
fn parse_entry(mut bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut fields = BTreeMap::new();
    while !bytes.is_empty() {
        let end = bytes
            .iter()
            .position(|&b| b == b'\n')
            .expect("a field line");
        let line = &bytes[..end];
        match line.iter().position(|&b| b == b'=') {
            Some(eq) => {
                let key = String::from_utf8(line[..eq].to_vec()).unwrap();
                fields.insert(key, line[eq + 1..].to_vec());
                bytes = &bytes[end + 1..];
            }
            None => {
                let key = String::from_utf8(line.to_vec()).unwrap();
                let rest = &bytes[end + 1..];
                let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
                fields.insert(key, rest[8..8 + len].to_vec());
                assert_eq!(rest[8 + len], b'\n');
                bytes = &rest[9 + len..];
            }
        }
    }
    fields
}

/// The next entry the daemon sent, as text fields.
fn next_entry(socket: &UnixDatagram) -> BTreeMap<String, String> {
    let mut buf = vec![0u8; 1 << 20];
    let n = socket.recv(&mut buf).expect("an entry in the journal");
    parse_entry(&buf[..n])
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect()
}

#[test]
fn with_job_output_journal_each_line_is_an_entry_tagged_with_job_and_run() {
    let env = Env::new();
    env.jobs(
        r#"
[daemon]
job_output = "journal"

[jobs.backup]
schedule = "@yearly"
command = "echo early; while [ ! -e @ROOT@/go ]; do sleep 0.01; done; echo 'second line' >&2; echo; printf 'résumé'"
"#,
    );
    let (journal, path) = fake_journal(&env);
    let d = env.daemon_with_env(&[], &[("REA_JOURNAL_SOCKET", &path)]);
    env.rea(&["trigger", "backup"]).ok();
    // Live: the first line is in the journal while the run still runs.
    let early = next_entry(&journal);
    assert_eq!(early["MESSAGE"], "early");
    assert!(env.finals("backup").is_empty(), "the run has not ended yet");
    std::fs::write(env.path("go"), "").unwrap();
    let rest: Vec<BTreeMap<String, String>> = (0..3).map(|_| next_entry(&journal)).collect();
    let messages: Vec<&str> = rest.iter().map(|e| e["MESSAGE"].as_str()).collect();
    // The last line, without its newline, when the output ends.
    assert_eq!(messages, ["second line", "", "résumé"]);
    env.wait_until("the run's end", || !env.finals("backup").is_empty());
    let run = env.finals("backup")[0]["run"].as_str().unwrap().to_string();
    for entry in std::iter::once(&early).chain(&rest) {
        assert_eq!(entry["JOB"], "backup", "{entry:?}");
        assert_eq!(entry["RUN"], run, "{entry:?}");
        assert_eq!(entry["PRIORITY"], "6", "{entry:?}");
        assert_eq!(entry["SYSLOG_IDENTIFIER"], "backup", "{entry:?}");
    }
    // The history keeps the output as ever.
    assert_eq!(
        env.finals("backup")[0]["output"],
        "early\nsecond line\n\nrésumé"
    );
    assert!(!d.log_text().contains("journal socket"), "{}", d.log_text());
}

#[test]
fn without_a_journal_socket_output_stays_in_the_history_after_one_warning() {
    let env = Env::new();
    env.jobs(
        "[daemon]\njob_output = \"journal\"\n[jobs.a]\nschedule = \"@yearly\"\ncommand = \"echo kept\"\n",
    );
    let missing = env.path("no-journal-here").display().to_string();
    let d = env.daemon_with_env(&[], &[("REA_JOURNAL_SOCKET", &missing)]);
    env.rea(&["trigger", "a", "--wait"]).ok();
    env.rea(&["trigger", "a", "--wait"]).ok();
    let runs = env.runs("a", "succeeded");
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["output"] == "kept\n"));
    let log = d.log_text();
    assert_eq!(
        log.matches("no journal socket").count(),
        1,
        "one warning, not one per run:\n{log}"
    );
    assert!(
        log.contains(&missing),
        "the warning names the socket:\n{log}"
    );
}

#[test]
fn a_journal_that_takes_nothing_cannot_hold_a_run_up_or_lose_its_history() {
    let env = Env::new();
    env.jobs(
        "[daemon]\njob_output = \"journal\"\n[jobs.flood]\nschedule = \"@yearly\"\ncommand = \"seq 1 5000\"\n",
    );
    // Bound and never read: its queue fills after a few hundred entries,
    // as a stuck journald's would.
    let (_journal, path) = fake_journal(&env);
    let d = env.daemon_with_env(&[], &[("REA_JOURNAL_SOCKET", &path)]);
    env.rea(&["trigger", "flood", "--wait"]).ok();
    let runs = env.runs("flood", "succeeded");
    assert_eq!(runs.len(), 1);
    let output = runs[0]["output"].as_str().unwrap();
    assert!(output.starts_with("1\n2\n"), "{output:.40}");
    assert!(output.ends_with("4999\n5000\n"), "the history has it all");
    let log = d.log_text();
    assert_eq!(
        log.matches("cannot send the run's output to the journal")
            .count(),
        1,
        "{log}"
    );
    // A second run while it is still stuck: no second warning.
    env.rea(&["trigger", "flood", "--wait"]).ok();
    assert_eq!(env.runs("flood", "succeeded").len(), 2);
    assert_eq!(
        d.log_text()
            .matches("cannot send the run's output to the journal")
            .count(),
        1
    );
}

#[test]
fn a_flood_sends_the_journal_a_bounded_burst_and_counts_the_rest() {
    let env = Env::new();
    env.jobs(
        "[daemon]\njob_output = \"journal\"\n[jobs.flood]\nschedule = \"@yearly\"\ncommand = \"seq 1 30000\"\n",
    );
    let (journal, path) = fake_journal(&env);
    // Read as fast as journald would, until nothing has come for 2 s.
    let reader = std::thread::spawn(move || {
        let mut messages = vec![next_entry(&journal)["MESSAGE"].clone()];
        journal
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = journal.recv(&mut buf) {
            let entry = parse_entry(&buf[..n]);
            messages.push(String::from_utf8_lossy(&entry["MESSAGE"]).into_owned());
        }
        messages
    });
    let _d = env.daemon_with_env(&[], &[("REA_JOURNAL_SOCKET", &path)]);
    env.rea(&["trigger", "flood", "--wait"]).ok();
    let messages = reader.join().expect("the journal's reader");
    let notices: Vec<&String> = messages
        .iter()
        .filter(|m| m.contains("not sent to the journal"))
        .collect();
    assert!(!notices.is_empty(), "a flood is held back and said so");
    assert!(
        messages.len() < 20_000,
        "at most a burst and what a second adds: {} entries",
        messages.len()
    );
    // Every line is either in the journal or counted as held back.
    let held: u64 = notices
        .iter()
        .map(|n| {
            n.trim_start_matches("… ")
                .split(' ')
                .next()
                .and_then(|k| k.parse::<u64>().ok())
                .expect("a count")
        })
        .sum();
    let lines = (messages.len() - notices.len()) as u64;
    assert_eq!(lines + held, 30_000, "{lines} sent, {held} held back");
    assert_eq!(messages[0], "1");
    // The history keeps the output as ever.
    let runs = env.runs("flood", "succeeded");
    assert!(runs[0]["output"]
        .as_str()
        .unwrap()
        .ends_with("29999\n30000\n"));
}

#[test]
fn a_misspelt_job_output_is_refused_with_its_place_and_the_daemon_keeps_its_file() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@yearly\"\ncommand = \"echo kept\"\n");
    let _d = env.daemon();
    env.jobs(
        "[daemon]\njob_output = \"journald\"\n[jobs.a]\nschedule = \"@yearly\"\ncommand = \"echo changed\"\n",
    );
    let file = env.path("jobs.toml").display().to_string();
    env.rea(&["check"])
        .code(2)
        .stderr_has(&format!("{file}:2:14:"))
        .stderr_has("\"job_output\" must be one of \"history\", \"journal\"")
        .stderr_has("did you mean \"journal\"?");
    env.rea(&["reload"])
        .code(2)
        .stderr_has(&format!("{file}:2:14:"));
    // The last good file is still in force.
    env.rea(&["trigger", "a", "--wait"]).ok();
    assert_eq!(env.runs("a", "succeeded")[0]["output"], "kept\n");
}

#[test]
fn job_output_changed_by_a_reload_applies_to_the_next_run() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@yearly\"\ncommand = \"echo one\"\n");
    let (journal, path) = fake_journal(&env);
    let _d = env.daemon_with_env(&[], &[("REA_JOURNAL_SOCKET", &path)]);
    env.jobs(
        "[daemon]\njob_output = \"journal\"\n[jobs.a]\nschedule = \"@yearly\"\ncommand = \"echo two\"\n",
    );
    env.rea(&["reload"]).ok();
    env.rea(&["trigger", "a", "--wait"]).ok();
    let entry = next_entry(&journal);
    assert_eq!(entry["MESSAGE"], "two");
    assert_eq!(entry["JOB"], "a");
}
