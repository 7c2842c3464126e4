//! Many short runs through the daemon, against `xargs -P` doing the same.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::Figure;
use super::util::{self, Daemon, TempDir};
use super::Settings;

/// Counts final run lines appended to the live history since the last call.
#[derive(Default)]
pub(crate) struct Tail {
    file: Option<fs::File>,
    pos: u64,
    partial: Vec<u8>,
    pub(crate) finals: usize,
    pub(crate) failed: usize,
}

impl Tail {
    pub(crate) fn poll(&mut self, path: &std::path::Path) {
        if self.file.is_none() {
            self.file = fs::File::open(path).ok();
        }
        let Some(f) = self.file.as_mut() else {
            return;
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.read_to_end(&mut buf) else {
            return;
        };
        self.pos += n as u64;
        self.partial.extend_from_slice(&buf);
        let Some(last_nl) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let rest = self.partial.split_off(last_nl + 1);
        for line in self.partial.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            if line.contains("\"event\":\"run\"") && !line.contains("\"status\":\"started\"") {
                self.finals += 1;
                if !line.contains("\"status\":\"succeeded\"") {
                    self.failed += 1;
                }
            }
        }
        self.partial = rest;
    }
}

/// Seconds for `n` forced triggers of a `true` job to reach the history.
fn rea_round(n: usize) -> Duration {
    rea_round_with(n, "")
}

/// [`rea_round`] with `daemon` added to the `[daemon]` table (e.g.
/// `cgroups = "off"`).
pub(crate) fn rea_round_with(n: usize, daemon: &str) -> Duration {
    let dir = TempDir::new("throughput");
    dir.write_jobs(&format!(
        "[daemon]\nmax_concurrent = 64\n{daemon}\n[jobs.t]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n"
    ));
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    let mut client = d.client();
    let mut writer = client.try_clone_writer();
    let history = dir.state().join("history.jsonl");
    let mut tail = Tail::default();
    tail.poll(&history);
    let base = tail.finals;
    let start = Instant::now();
    let sender = std::thread::spawn(move || {
        let line = b"{\"v\":1,\"op\":\"trigger\",\"job\":\"t\",\"force\":true,\"wait\":false}\n";
        let mut buf = Vec::with_capacity(line.len() * 256);
        for i in 0..n {
            buf.extend_from_slice(line);
            if buf.len() >= line.len() * 256 || i + 1 == n {
                if writer.write_all(&buf).is_err() {
                    return;
                }
                buf.clear();
            }
        }
    });
    let reader = std::thread::spawn(move || {
        let mut refused = 0;
        for _ in 0..n {
            match client.recv() {
                Some(r) if r["ok"] == true => {}
                _ => refused += 1,
            }
        }
        refused
    });
    let deadline = start + Duration::from_secs(600);
    while tail.finals - base < n {
        if Instant::now() > deadline {
            util::die(format!(
                "throughput: only {} of {n} runs finished in 600 s",
                tail.finals - base
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
        tail.poll(&history);
    }
    let took = start.elapsed();
    let _ = sender.join();
    let refused = reader.join().unwrap_or(0);
    if refused > 0 || tail.failed > 0 {
        util::die(format!(
            "throughput: {refused} triggers refused, {} runs did not succeed",
            tail.failed
        ));
    }
    d.stop();
    took
}

fn xargs_round(n: usize, dir: &TempDir) -> Duration {
    let input = dir.path().join("xargs-input");
    util::write_file(&input, "true\n".repeat(n).as_bytes());
    let start = Instant::now();
    let status = Command::new("xargs")
        .args(["-P", "64", "-n", "1", "sh", "-c"])
        .stdin(fs::File::open(&input).unwrap_or_else(|e| util::die(e)))
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| util::die(format!("xargs: {e}")));
    if !status.success() {
        util::die("xargs failed");
    }
    start.elapsed()
}

pub(crate) fn throughput(s: &Settings) -> Vec<Figure> {
    let n = s.throughput_runs;
    eprintln!("throughput: {n} runs, {} rounds each", s.reps);
    let scratch = TempDir::new("xargs");
    let mut rea = Vec::new();
    let mut xargs = Vec::new();
    // Interleaved, so drifting load from other processes hits both alike.
    for _ in 0..s.reps {
        xargs.push(xargs_round(n, &scratch));
        rea.push(rea_round(n));
    }
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    let (r, x) = (util::median(&rea), util::median(&xargs));
    let ratio = rate(r) / rate(x);
    vec![
        Figure::check(
            "throughput",
            format!(
                "{n} forced triggers of `true`, max_concurrent = 64, until {n} final history lines; median of {}",
                s.reps
            ),
            format!("{:.2} s = {:.0} runs/s; {ratio:.2}× xargs", r.as_secs_f64(), rate(r)),
            "≥ 1.0× xargs",
            ratio >= 1.0,
        ),
        Figure::info(
            "throughput",
            format!("baseline: `xargs -P 64 -n 1 sh -c` over {n} lines `true`, same rounds"),
            format!("{:.2} s = {:.0} runs/s", x.as_secs_f64(), rate(x)),
        ),
    ]
}
