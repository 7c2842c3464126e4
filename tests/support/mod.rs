//! The harness every integration test uses: a sandbox directory with a job
//! file and a state directory, the real `rea` binary, and a daemon handle
//! that is killed when the test ends. Waiting is always "poll until a
//! condition holds or a generous deadline passes", never a fixed sleep that
//! assumes a fast machine.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod pg;

/// Generous: a loaded 2-core CI machine must never make a test flaky.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn rea_bin() -> &'static str {
    env!("CARGO_BIN_EXE_rea")
}

/// A sandbox: `<dir>/jobs.toml` and `<dir>/state`.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Default for Env {
    fn default() -> Self {
        Self::new()
    }
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::Builder::new()
                .prefix("rea-test-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn state(&self) -> PathBuf {
        self.path("state")
    }

    pub fn jobs_path(&self) -> PathBuf {
        self.path("jobs.toml")
    }

    /// Writes `jobs.toml` (mode 0600, as a careful admin would). `@ROOT@`
    /// stands for the sandbox's absolute path (job `dir`s must be absolute).
    pub fn jobs(&self, toml: &str) -> &Env {
        let root = self.dir.path().display().to_string();
        self.write("jobs.toml", &toml.replace("@ROOT@", &root));
        fs::set_permissions(self.jobs_path(), fs::Permissions::from_mode(0o600)).expect("chmod");
        self
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(&p, content).expect("write");
        p
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// Writes `jobs.toml` from raw bytes (mode 0600).
    pub fn jobs_bytes(&self, bytes: &[u8]) -> &Env {
        fs::write(self.jobs_path(), bytes).expect("write");
        fs::set_permissions(self.jobs_path(), fs::Permissions::from_mode(0o600)).expect("chmod");
        self
    }

    /// `rea ARGS` with the sandbox's job file and state directory.
    pub fn rea(&self, args: &[&str]) -> Run {
        self.rea_env(
            args,
            &[("REA_FILE", self.jobs_path().to_str().expect("utf-8 path"))],
        )
    }

    /// `rea ARGS` in the sandbox with the state directory set and exactly
    /// `vars` added (no `REA_FILE` unless given): for file resolution tests.
    pub fn rea_env(&self, args: &[&str], vars: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(rea_bin());
        cmd.args(args)
            .current_dir(self.dir.path())
            .env_remove("REA_FILE")
            .env("REA_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            // Shown times are in the machine's zone: pin it, so no test
            // depends on the zone of the machine it runs on (a test of
            // local time passes its own TZ in `vars`).
            .env("TZ", "UTC")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run rea");
        let run = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert!(
            !run.stderr.contains("panicked"),
            "rea panicked:\n{}",
            run.stderr
        );
        run
    }

    /// `rea ARGS` as [`Env::rea`] does, with `vars` added, killed if it has
    /// not exited after `limit`: `None` then. For clients that may hang on a
    /// daemon that does not answer.
    pub fn rea_within(&self, args: &[&str], vars: &[(&str, &str)], limit: Duration) -> Option<Run> {
        let n = fastrand::u64(..);
        let (out_path, err_path) = (
            self.path(&format!(".out-{n:016x}")),
            self.path(&format!(".err-{n:016x}")),
        );
        let mut cmd = Command::new(rea_bin());
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("REA_FILE", self.jobs_path())
            .env("REA_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .env("TZ", "UTC")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out_path).expect("stdout file"))
            .stderr(fs::File::create(&err_path).expect("stderr file"));
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("run rea");
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read =
            |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
        let run = Run {
            code: status.and_then(|s| s.code()).unwrap_or(-1),
            stdout: read(&out_path),
            stderr: read(&err_path),
        };
        let _ = fs::remove_file(&out_path);
        let _ = fs::remove_file(&err_path);
        assert!(
            !run.stderr.contains("panicked"),
            "rea panicked:\n{}",
            run.stderr
        );
        status.map(|_| run)
    }

    /// The control socket of the sandbox's state directory.
    pub fn socket(&self) -> PathBuf {
        self.state().join("rea.sock")
    }

    /// `rea check -f jobs.toml` (a relative name, so messages start with
    /// `jobs.toml:`) on `toml`; asserts exit 2 and returns stderr.
    pub fn check_fails(&self, toml: &str) -> String {
        self.jobs(toml);
        let out = self.rea(&["check", "-f", "jobs.toml"]);
        out.code(2);
        assert_eq!(out.stdout, "", "nothing on stdout for an invalid file");
        out.stderr
    }

    /// Starts `rea run` and waits until its `daemon_started` line is in the
    /// history.
    pub fn daemon(&self) -> Daemon {
        self.daemon_with(&[])
    }

    pub fn daemon_with(&self, extra: &[&str]) -> Daemon {
        self.daemon_configured(extra, |_| {})
    }

    /// `daemon_with`, with `vars` added to the daemon's environment.
    pub fn daemon_with_env(&self, extra: &[&str], vars: &[(&str, &str)]) -> Daemon {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.daemon_configured(extra, move |c| {
            c.envs(vars);
        })
    }

    /// [`Env::daemon_with`], with `configure` applied to the command last
    /// (extra environment, resource limits in a `pre_exec` hook, ...).
    pub fn daemon_configured(
        &self,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Daemon {
        let starts_before = self.events("daemon_started").len();
        let log =
            fs::File::create(self.path(&format!("daemon-{starts_before}.log"))).expect("log file");
        let mut command = Command::new(rea_bin());
        command
            .arg("run")
            .args(extra)
            .current_dir(self.dir.path())
            .env("REA_FILE", self.jobs_path())
            .env("REA_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .env("TZ", "UTC")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        configure(&mut command);
        let child = command.spawn().expect("spawn rea run");
        let d = Daemon {
            child: Some(child),
            log: self.path(&format!("daemon-{starts_before}.log")),
        };
        let mut d = d;
        let deadline = Instant::now() + PATIENCE;
        while self.events("daemon_started").len() <= starts_before {
            if let Some(status) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "rea run exited ({status}) instead of starting; log:\n{}",
                    d.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the daemon to start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// Every parsed history line (live file and rotated ones, of the
    /// system's log and of each tenant's in `tenants/NAME/`), oldest first.
    pub fn history(&self) -> Vec<Value> {
        let mut roots = vec![self.state()];
        if let Ok(tenants) = fs::read_dir(self.state().join("tenants")) {
            roots.extend(tenants.flatten().map(|e| e.path()));
        }
        let mut out = Vec::new();
        for root in roots {
            let mut files: Vec<PathBuf> = Vec::new();
            for n in (1..=20).rev() {
                let p = root.join(format!("history.jsonl.{n}"));
                if p.exists() {
                    files.push(p);
                }
            }
            files.push(root.join("history.jsonl"));
            for f in files {
                for line in fs::read_to_string(&f).unwrap_or_default().lines() {
                    if let Ok(v) = serde_json::from_str::<Value>(line) {
                        out.push(v);
                    }
                }
            }
        }
        // Each log is in `ts` order; so is their merge (a stable sort keeps
        // each log's order among equal instants).
        out.sort_by(|a, b| a["ts"].as_str().cmp(&b["ts"].as_str()));
        out
    }

    /// History lines with `event == name`.
    pub fn events(&self, name: &str) -> Vec<Value> {
        self.history()
            .into_iter()
            .filter(|v| v["event"] == name)
            .collect()
    }

    /// Run lines of `job` with `status`.
    pub fn runs(&self, job: &str, status: &str) -> Vec<Value> {
        self.history()
            .into_iter()
            .filter(|v| v["event"] == "run" && v["job"] == job && v["status"] == status)
            .collect()
    }

    /// Final run lines of `job` (anything but `started`).
    pub fn finals(&self, job: &str) -> Vec<Value> {
        self.history()
            .into_iter()
            .filter(|v| v["event"] == "run" && v["job"] == job && v["status"] != "started")
            .collect()
    }

    /// Polls `cond` until it holds; panics with `what` after PATIENCE.
    pub fn wait_until(&self, what: &str, cond: impl Fn() -> bool) {
        wait_until(what, cond)
    }
}

pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}

/// Whether the tests run as root (the `user =`, ownership and other-uid
/// tests need it, and skip loudly without it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A raw connection to a daemon's control socket, speaking its protocol:
/// one JSON object per line each way. For requests the CLI never sends.
pub struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Conn {
    /// Connects to `socket`; answers are awaited for up to PATIENCE.
    pub fn open(socket: &Path) -> Conn {
        let stream = UnixStream::connect(socket)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()));
        stream
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        let writer = stream.try_clone().expect("clone the stream");
        Conn {
            reader: BufReader::new(stream),
            writer,
        }
    }

    /// Sends one request line (`\n` added); false if the daemon hung up.
    pub fn send(&mut self, line: &str) -> bool {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.writer.write_all(&bytes).is_ok()
    }

    /// The next answer line, parsed; `None` on end of file, a timeout, or
    /// a line that is not JSON (the raw line is in the panic of callers
    /// that need it: see [`Conn::recv_raw`]).
    pub fn recv(&mut self) -> Option<Value> {
        serde_json::from_str(&self.recv_raw()?).ok()
    }

    /// The next answer line as sent (without its `\n`).
    pub fn recv_raw(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 => Some(line.trim_end_matches('\n').to_string()),
            _ => None,
        }
    }

    /// Sends one request and reads its answer.
    pub fn ask(&mut self, line: &str) -> Option<Value> {
        if !self.send(line) {
            return None;
        }
        self.recv()
    }

    /// Closes the sending side only, as `socat` does at the end of its
    /// input: answers still come.
    pub fn shutdown_write(&mut self) {
        self.writer
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
    }
}

/// The result of one `rea` command.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> &Run {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "unexpected exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn stdout_is(&self, expected: &str) -> &Run {
        assert_eq!(
            self.stdout, expected,
            "stdout differs; stderr:\n{}",
            self.stderr
        );
        self
    }

    pub fn stderr_is(&self, expected: &str) -> &Run {
        assert_eq!(
            self.stderr, expected,
            "stderr differs; stdout:\n{}",
            self.stdout
        );
        self
    }

    pub fn stdout_has(&self, needle: &str) -> &Run {
        assert!(
            self.stdout.contains(needle),
            "stdout lacks {needle:?}:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn stderr_has(&self, needle: &str) -> &Run {
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}\nstdout:\n{}",
            self.stderr,
            self.stdout
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// A running `rea run`; SIGKILLed on drop if still alive.
pub struct Daemon {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) takes plain integers; a stale pid is an error
        // return, not undefined behaviour.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGTERM, then waits for the exit; returns the exit code.
    pub fn stop(mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.wait()
    }

    /// Waits for the daemon to exit (up to PATIENCE); returns its exit code.
    pub fn wait(&mut self) -> i32 {
        let mut child = self.child.take().expect("daemon already reaped");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the daemon did not exit; log:\n{}",
                    fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9, and reap.
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Env {
    /// Runs of this sandbox's daemons get cgroups under the test process's
    /// own (`rea/<tenant>/<run>`, and `<run>.<hook>`, `<run>.mail`); a
    /// daemon killed outright (or leftovers of `kill_stragglers = false`)
    /// leaves them behind. The machine is left as found: what is still in
    /// them is killed, and they are removed, as are the tenants'
    /// directories and `rea` once no other test's runs are in them.
    fn drop(&mut self) {
        let Ok(hierarchy) = rea_host::cgroup::find() else {
            return;
        };
        let root = hierarchy.own.join("rea");
        if !root.is_dir() {
            return;
        }
        let runs = self.run_ids();
        let tenants = fs::read_dir(&root).into_iter().flatten().flatten();
        for tenant in tenants.filter(|t| t.file_type().is_ok_and(|t| t.is_dir())) {
            for entry in fs::read_dir(tenant.path()).into_iter().flatten().flatten() {
                // A run's own cgroup, or its hooks' and mail's (`<run>.on_failure`).
                let name = entry.file_name().to_string_lossy().into_owned();
                let run = name.split('.').next().unwrap_or_default();
                if runs.contains(run) {
                    remove_cgroup(&entry.path());
                } else if let Some(owner) = pool_owner(&name) {
                    // A daemon's reused leaf (`pool.<pid>.<n>`): ours if it
                    // names one of our runs; else removed only if empty and
                    // its daemon is gone (rmdir refuses one with processes).
                    let mut buf = [0u8; 256];
                    let named = rustix::fs::getxattr(entry.path(), "user.rea.run", &mut buf)
                        .ok()
                        .and_then(|n| std::str::from_utf8(&buf[..n]).ok().map(str::to_string));
                    if named.is_some_and(|r| runs.contains(&r)) {
                        remove_cgroup(&entry.path());
                    } else if !alive(owner) {
                        let _ = fs::remove_dir(entry.path());
                    }
                }
            }
            // Refused while another test's runs are in it.
            let _ = fs::remove_dir(tenant.path());
        }
        let _ = fs::remove_dir(&root);
    }
}

impl Env {
    /// The ids of every run in the sandbox's history logs: every state
    /// directory (tests give some daemons their own), every tenant's log.
    fn run_ids(&self) -> std::collections::HashSet<String> {
        let mut runs = std::collections::HashSet::new();
        let mut dirs = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(path);
                } else if name.starts_with("history.jsonl") {
                    for line in fs::read_to_string(&path).unwrap_or_default().lines() {
                        if let Ok(v) = serde_json::from_str::<Value>(line) {
                            if let Some(run) = v["run"].as_str() {
                                runs.insert(run.to_string());
                            }
                        }
                    }
                }
            }
        }
        runs
    }
}

/// The daemon pid in a reused leaf's name (`pool.<pid>.<n>`).
pub fn pool_owner(name: &str) -> Option<i32> {
    let (pid, n) = name.strip_prefix("pool.")?.split_once('.')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Kills what is in a leftover cgroup and removes it.
fn remove_cgroup(leaf: &std::path::Path) {
    let _ = fs::write(leaf.join("cgroup.kill"), "1");
    for _ in 0..100 {
        let events = fs::read_to_string(leaf.join("cgroup.events")).unwrap_or_default();
        if !events.contains("populated 1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = fs::remove_dir(leaf);
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether a process exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

pub fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A history line's RFC 3339 field as an instant (panics naming the line).
pub fn instant(v: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(
        v[field]
            .as_str()
            .unwrap_or_else(|| panic!("{field} in {v}")),
    )
    .unwrap_or_else(|e| panic!("{field} in {v}: {e}"))
    .with_timezone(&chrono::Utc)
}

/// A user's uid and gid from the user database (`getent passwd`), or
/// None if there is no such user.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let entry = passwd(name)?;
    let fields: Vec<&str> = entry.split(':').collect();
    Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?))
}

/// A user's home directory from the user database (`getent passwd`), or
/// None if there is no such user.
pub fn user_home(name: &str) -> Option<String> {
    passwd(name)?.split(':').nth(5).map(str::to_string)
}

/// `getent passwd NAME`'s line.
fn passwd(name: &str) -> Option<String> {
    let out = Command::new("getent")
        .args(["passwd", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    eprintln!("\n*** SKIPPED {test}: needs root (it runs something as another uid) ***\n");
    true
}

/// `user`'s (uid, gid), creating it as a system user without a home or a
/// login shell on first use. Only root can; `None` otherwise.
pub fn throwaway_user(name: &str) -> Option<(u32, u32)> {
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if !is_root() {
        return None;
    }
    let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ids) = user_ids(name) {
        return Some(ids);
    }
    let status = Command::new("useradd")
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
        .expect("run useradd");
    assert!(status.success(), "useradd {name}: {status}");
    Some(user_ids(name).expect("the user just created"))
}
