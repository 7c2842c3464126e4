//! Logging into the journal: when stderr is the stream `$JOURNAL_STREAM`
//! names (as systemd sets it for a service), each line carries its syslog
//! priority as a `<N>` prefix and no timestamp of rea's own. Tested with
//! a pipe standing in for the journal's stream: its device and inode go
//! into `JOURNAL_STREAM`, exactly as systemd would set them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::support::{wait_until, Env};

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
