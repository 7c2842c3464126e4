//! Plumbing shared by the benchmarks: scratch directories, a `rea run`
//! daemon under test, a raw control-socket client, `/proc` readers,
//! children timed with their own rusage, and small statistics.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A scratch directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("rea-bench-{}-{n}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| die(format!("{}: {e}", path.display())));
        let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o700));
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.0.join("state")
    }

    pub(crate) fn jobs(&self) -> PathBuf {
        self.0.join("jobs.toml")
    }

    /// Writes the job file, which rea refuses if group or others can write it.
    pub(crate) fn write_jobs(&self, text: &str) {
        write_file(&self.jobs(), text.as_bytes());
        let _ = fs::set_permissions(self.jobs(), fs::Permissions::from_mode(0o644));
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("rea-bench: {msg}");
    std::process::exit(1)
}

pub(crate) fn write_file(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| die(format!("{}: {e}", path.display())));
}

/// The release `rea` next to this binary (`cargo build --release` builds both).
pub(crate) fn rea_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| die(format!("current_exe: {e}")));
    let bin = exe.with_file_name("rea");
    if !bin.is_file() {
        die(format!(
            "{} not found: build it first with `cargo build --release`",
            bin.display()
        ));
    }
    bin
}

/// `rea -f JOBS --state-dir STATE ARGS…` for a scratch directory.
pub(crate) fn rea(dir: &TempDir, args: &[&str]) -> Command {
    let mut c = Command::new(rea_bin());
    c.arg("-f")
        .arg(dir.jobs())
        .arg("--state-dir")
        .arg(dir.state())
        .args(args)
        .env_remove("REA_FILE")
        .env_remove("REA_STATE_DIR")
        .stdin(Stdio::null());
    c
}

/// What a finished child cost: wall time and its own rusage.
pub(crate) struct ChildCost {
    pub(crate) status: ExitStatus,
    pub(crate) wall: Duration,
    pub(crate) max_rss_kb: u64,
    pub(crate) stdout: Vec<u8>,
}

/// Runs a command to completion, timing it and reading its own peak RSS
/// with wait4 (per child, unlike RUSAGE_CHILDREN which keeps a running max).
/// Stdout is captured; stderr is discarded.
pub(crate) fn measure(cmd: &mut Command) -> ChildCost {
    use std::io::Read;
    let start = Instant::now();
    // Reaped below with wait4, which std's Child cannot see.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| die(format!("spawn {cmd:?}: {e}")));
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    let (status, rusage) = wait4(&child);
    ChildCost {
        status,
        wall: start.elapsed(),
        max_rss_kb: rusage.ru_maxrss as u64,
        stdout,
    }
}

/// Peak RSS of `rea ARGS` in kB. Linux carries the parent's RSS into a
/// vforked child's `ru_maxrss` at exec, so a child of this (possibly large)
/// process would report our size; `/usr/bin/time` is a small parent that
/// forks, so its `%M` is rea's own. Falls back to wait4 without it.
pub(crate) fn peak_rss_kb(dir: &TempDir, args: &[&str]) -> u64 {
    let time = Path::new("/usr/bin/time");
    if !time.is_file() {
        return measure(&mut rea(dir, args)).max_rss_kb;
    }
    let out = dir.path().join("time-output");
    let mut c = Command::new(time);
    c.arg("-f").arg("%M").arg("-o").arg(&out).arg(rea_bin());
    c.arg("-f")
        .arg(dir.jobs())
        .arg("--state-dir")
        .arg(dir.state())
        .args(args);
    c.env_remove("REA_FILE")
        .env_remove("REA_STATE_DIR")
        .stdin(Stdio::null());
    let _ = measure(&mut c);
    fs::read_to_string(&out)
        .ok()
        .and_then(|t| t.lines().last().and_then(|l| l.trim().parse().ok()))
        .unwrap_or(0)
}

fn wait4(child: &Child) -> (ExitStatus, libc::rusage) {
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our unreaped child; pointers are valid for the call.
        let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        if r >= 0 {
            break;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            die("wait4 failed");
        }
    }
    (ExitStatus::from_raw(status), usage)
}

/// A `rea run` under test; stopped with SIGTERM on drop.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) spawned_at: Instant,
    state: PathBuf,
}

impl Daemon {
    /// Starts `rea run` on the scratch directory; logs go to `daemon.log`.
    pub(crate) fn spawn(dir: &TempDir) -> Daemon {
        Daemon::spawn_with_env(dir, &[])
    }

    /// [`Daemon::spawn`] with `vars` added to its environment.
    pub(crate) fn spawn_with_env(dir: &TempDir, vars: &[(&str, &str)]) -> Daemon {
        let log = fs::File::create(dir.path().join("daemon.log"))
            .unwrap_or_else(|e| die(format!("daemon.log: {e}")));
        let spawned_at = Instant::now();
        let child = rea(dir, &["run"])
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| die(format!("spawn rea run: {e}")));
        Daemon {
            child,
            spawned_at,
            state: dir.state(),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the control socket answers a ping; the time since spawn.
    pub(crate) fn wait_ready(&mut self, timeout: Duration) -> Duration {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(mut c) = Client::connect(&self.state) {
                if c.call(r#"{"v":1,"op":"ping"}"#)
                    .is_some_and(|r| r["ok"] == true)
                {
                    return self.spawned_at.elapsed();
                }
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                die(format!(
                    "rea run exited early ({st}); see its log in the scratch directory"
                ));
            }
            if Instant::now() > deadline {
                die("rea run did not become ready in time");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub(crate) fn client(&self) -> Client {
        Client::connect(&self.state).unwrap_or_else(|e| die(format!("connect: {e}")))
    }

    pub(crate) fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// SIGKILL and wait (a crash, for restart measurements).
    pub(crate) fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// SIGTERM and wait.
    pub(crate) fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            while let Ok(None) = self.child.try_wait() {
                if Instant::now() > deadline {
                    self.signal(libc::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The control socket spoken directly: one JSON line each way, pipelining allowed.
pub(crate) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub(crate) fn connect(state: &Path) -> std::io::Result<Client> {
        let s = UnixStream::connect(state.join("rea.sock"))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Client {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    pub(crate) fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.writer.write_all(line.as_bytes())?;
        self.writer.write_all(b"\n")
    }

    pub(crate) fn recv(&mut self) -> Option<Value> {
        let mut text = String::new();
        match self.reader.read_line(&mut text) {
            Ok(n) if n > 0 => serde_json::from_str(&text).ok(),
            _ => None,
        }
    }

    pub(crate) fn call(&mut self, line: &str) -> Option<Value> {
        self.send(line).ok()?;
        self.recv()
    }

    /// A writer half for pipelining from another thread.
    pub(crate) fn try_clone_writer(&self) -> UnixStream {
        self.writer
            .try_clone()
            .unwrap_or_else(|e| die(format!("socket clone: {e}")))
    }
}

/// `Key:   123 kB` from /proc/PID/status, in kB.
pub(crate) fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Context switches (voluntary, involuntary) summed over every thread.
pub(crate) fn ctxt_switches(pid: u32) -> (u64, u64, usize) {
    let mut vol = 0;
    let mut invol = 0;
    let mut threads = 0;
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let Ok(text) = fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            threads += 1;
            for l in text.lines() {
                let n = || {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                };
                if l.starts_with("voluntary_ctxt_switches:") {
                    vol += n();
                } else if l.starts_with("nonvoluntary_ctxt_switches:") {
                    invol += n();
                }
            }
        }
    }
    (vol, invol, threads)
}

/// utime + stime of a process, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

pub(crate) fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Median of durations (sorted copy).
pub(crate) fn median(xs: &[Duration]) -> Duration {
    let mut v = xs.to_vec();
    v.sort();
    if v.is_empty() {
        Duration::ZERO
    } else {
        v[v.len() / 2]
    }
}

pub(crate) fn median_f(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// Nearest-rank percentile.
pub(crate) fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

pub(crate) fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1e3;
    if m < 10.0 {
        format!("{m:.2} ms")
    } else if m < 1000.0 {
        format!("{m:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

pub(crate) fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

/// Waits until `f` holds, polling every `step`; false on timeout.
pub(crate) fn wait_until(timeout: Duration, step: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// Lines in the history log containing every needle (live file only).
pub(crate) fn count_history_lines(state: &Path, needles: &[&str]) -> usize {
    let Ok(text) = fs::read_to_string(state.join("history.jsonl")) else {
        return 0;
    };
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

/// `name`'s (uid, gid), creating it as a system user without a home or a
/// login shell on first use, as the integration tests do.
pub(crate) fn throwaway_user(name: &str) -> Option<(u32, u32)> {
    let ids = || {
        let out = Command::new("id").arg(name).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let field = |k: &str| -> Option<u32> {
            let rest = text.split(&format!("{k}=")).nth(1)?;
            rest.split('(').next()?.parse().ok()
        };
        out.status.success().then_some(())?;
        Some((field("uid")?, field("gid")?))
    };
    if let Some(found) = ids() {
        return Some(found);
    }
    let made = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ])
        .status()
        .ok()?;
    made.success().then(ids).flatten()
}
