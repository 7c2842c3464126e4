//! A user's history query through a root daemon (issue #19, finding 6):
//! users cannot read the state directory, so the daemon reads their
//! history for them, and streams the answer. The figure is the daemon's
//! peak RSS growth during her `rea history --json` over ~150 MB of her own
//! records, and what stays after it; beside it, in the same run, the same
//! query made by root through the file reader, a process that holds the
//! whole answer (what the daemon held before the answer was streamed).
//!
//! Needs root (a throwaway user, `rea-bench-tq`, is created on first use,
//! as the integration tests do); reports why it did not run otherwise.

use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::Figure;
use super::util::{self, Daemon, TempDir};
use super::Settings;

const PART: &str = "tenant-query";
const USER: &str = "rea-bench-tq";
/// Output bytes per record: most of a record is its output.
const OUTPUT: usize = 4000;
/// What the daemon's peak may grow by during the query.
const BOUND_MB: u64 = 32;

pub(crate) fn tenant_query(s: &Settings) -> Vec<Figure> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return vec![Figure::info(
            PART,
            "a user's history query through the daemon",
            "not run: needs root (it runs rea as a throwaway user)",
        )];
    }
    let Some((uid, gid)) = util::throwaway_user(USER) else {
        return vec![Figure::info(
            PART,
            "a user's history query through the daemon",
            format!("not run: cannot create the user {USER} (useradd)"),
        )];
    };
    let megabytes: usize = if s.quick { 40 } else { 150 };
    let records = megabytes * 1_000_000 / (OUTPUT + 300);
    let dir = TempDir::new("tenant-query");
    let _ = fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711));
    let job = "[jobs.hers]\nschedule = \"@yearly\"\ncommand = \"true\"\n";
    dir.write_jobs("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    fs::create_dir_all(dir.path().join("users")).unwrap_or_else(|e| util::die(e));
    let file = dir.path().join("users").join(format!("{USER}.toml"));
    util::write_file(&file, job.as_bytes());
    let _ = fs::set_permissions(&file, fs::Permissions::from_mode(0o600));
    let bytes = write_history(&dir, records);

    let mut daemon = Daemon::spawn(&dir);
    daemon.wait_ready(Duration::from_secs(60));
    let pid = daemon.pid();
    let rss = |key| util::proc_status_kb(pid, key).unwrap_or(0);
    // Forget the start-up's peak: what follows is the query's (proc(5)).
    let _ = fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let before = rss("VmRSS");
    let limit = records.to_string();
    let started = Instant::now();
    let user_cli = util::measure(
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(util::rea_bin())
            .args(["history", "hers", "--json", "--limit", &limit])
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("REA_STATE_DIR", dir.state())
            .stdin(Stdio::null()),
    );
    let took = started.elapsed();
    let peak = rss("VmHWM");
    std::thread::sleep(Duration::from_secs(1));
    let after = rss("VmRSS");
    let shown = user_cli
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    daemon.stop();
    if !user_cli.status.success() || shown != records {
        util::die(format!(
            "{PART}: the user's query showed {shown} of {records} records ({})",
            user_cli.status
        ));
    }
    // The baseline: root reads the same files itself, holding the answer.
    let qualified = format!("{USER}/hers");
    let root_cli = util::peak_rss_kb(&dir, &["history", &qualified, "--json", "--limit", &limit]);

    let grew = peak.saturating_sub(before);
    vec![
        Figure::check(
            PART,
            format!(
                "daemon peak RSS growth during a user's `history --json` over {} MB of her records ({records} records, {:.1} s)",
                bytes / 1_000_000,
                took.as_secs_f64()
            ),
            format!("+{} (from {})", util::mb(grew), util::mb(before)),
            format!("≤ {BOUND_MB} MB"),
            grew <= BOUND_MB * 1024,
        ),
        Figure::check(
            PART,
            "daemon RSS 1 s after the query, beside before it",
            format!("{} (before: {})", util::mb(after), util::mb(before)),
            "returns (≤ before + 8 MB)",
            after <= before + 8 * 1024,
        ),
        Figure::info(
            PART,
            "baseline, same run: peak RSS of root's `rea history --json` reading the files itself (the whole answer in one process, as the daemon held it before streaming)",
            util::mb(root_cli),
        ),
        Figure::info(
            PART,
            "the user's own `rea` process, which now holds what it reads",
            util::mb(user_cli.max_rss_kb),
        ),
    ]
}

/// `records` runs of the user's job, oldest first, in the live history
/// file; its size in bytes.
fn write_history(dir: &TempDir, records: usize) -> u64 {
    let state = dir.state();
    fs::create_dir_all(&state).unwrap_or_else(|e| util::die(e));
    let _ = fs::set_permissions(&state, fs::Permissions::from_mode(0o700));
    let path = state.join("history.jsonl");
    let file = fs::File::create(&path).unwrap_or_else(|e| util::die(e));
    let mut out = BufWriter::new(file);
    let text = "x".repeat(OUTPUT);
    let start = chrono::Utc::now() - chrono::Duration::seconds(records as i64 + 60);
    for i in 0..records {
        let ts = (start + chrono::Duration::seconds(i as i64))
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        writeln!(
            out,
            r#"{{"v":1,"ts":"{ts}","event":"run","job":"{USER}/hers","run":"r{i}","attempt":1,"trigger":"manual","status":"succeeded","started":"{ts}","ended":"{ts}","duration_ms":1,"exit_code":0,"output":"{text}","output_bytes":{OUTPUT}}}"#
        )
        .unwrap_or_else(|e| util::die(e));
    }
    out.flush().unwrap_or_else(|e| util::die(e));
    fs::metadata(&path).map_or(0, |m| m.len())
}
