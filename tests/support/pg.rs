//! A private PostgreSQL for the cluster tests: `initdb` and `postgres`
//! run by the test itself (never a server it did not start), as an
//! unprivileged user when the tests run as root, in a temporary directory,
//! listening only on a unix socket there. The server is the test's direct
//! child (no `pg_ctl`: a daemonised postmaster is reparented to PID 1, and
//! on machines whose PID 1 reaps slowly a killed one stays a zombie that
//! blocks the restart a chaos test needs), is reaped by `wait`, and dies
//! with the thread that started it (`PR_SET_PDEATHSIG`).
//!
//! Test settings only: `fsync=off` and friends (a kill of the server loses
//! nothing with them; a crash of the machine could).
//!
//! Without PostgreSQL the cluster tests skip with a loud message; with
//! `REA_REQUIRE_POSTGRES=1` (CI) that is a failure.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::PATIENCE;

/// The socket "port" (only names the socket file: no TCP is opened).
const PORT: u16 = 5432;

/// Where the server binaries are, if PostgreSQL is installed.
fn bindir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("PG_BINDIR") {
        let d = PathBuf::from(d);
        if d.join("initdb").exists() {
            return Some(d);
        }
    }
    if let Ok(out) = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
    {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !p.is_empty() {
            if let Ok(real) = fs::canonicalize(&p) {
                if let Some(dir) = real.parent() {
                    if dir.join("postgres").exists() {
                        return Some(dir.to_path_buf());
                    }
                }
            }
        }
    }
    let mut dirs: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .collect();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop()
}

/// The binaries, or None after a loud message (a panic under
/// `REA_REQUIRE_POSTGRES=1`).
pub fn available(test: &str) -> Option<PathBuf> {
    match bindir() {
        Some(d) => Some(d),
        None => {
            let msg = format!(
                "SKIPPED {test}: PostgreSQL is not installed (no initdb; Debian: apt-get install postgresql)"
            );
            if std::env::var("REA_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                panic!("{msg}, and REA_REQUIRE_POSTGRES=1 demands it");
            }
            eprintln!("\n!!!!!!!! {msg} !!!!!!!!\n");
            None
        }
    }
}

/// Who runs the server: `nobody` when the tests run as root (PostgreSQL
/// refuses root), else ourselves.
fn owner() -> Option<(u32, u32)> {
    if !super::is_root() {
        return None;
    }
    super::user_ids("nobody").or(Some((65534, 65534)))
}

fn as_owner(cmd: &mut Command, pdeathsig: bool) {
    let owner = owner();
    // SAFETY: only async-signal-safe calls between fork and exec (prctl,
    // setgroups, setgid, setuid), on plain integers.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = owner {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After the credential change, which clears it.
            if pdeathsig {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            }
            Ok(())
        });
    }
}

fn chown(path: &Path) {
    if let Some((uid, gid)) = owner() {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string and plain ids.
        unsafe {
            libc::chown(c.as_ptr(), uid, gid);
        }
    }
}

/// One private server.
pub struct Pg {
    dir: tempfile::TempDir,
    bin: PathBuf,
    child: Option<Child>,
}

impl Pg {
    /// initdb + start; None if PostgreSQL is not installed (see
    /// [`available`]).
    pub fn start(test: &str) -> Option<Pg> {
        let bin = available(test)?;
        let dir = tempfile::Builder::new()
            .prefix("rea-pg-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let data = dir.path().join("data");
        let sock = dir.path().join("sock");
        for d in [&data, &sock] {
            fs::create_dir(d).expect("mkdir");
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).expect("chmod");
            chown(d);
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "rea",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.path().join("initdb.log")).expect("log"));
        as_owner(&mut initdb, false);
        let status = initdb.status().expect("run initdb");
        assert!(
            status.success(),
            "initdb failed: {}",
            fs::read_to_string(dir.path().join("initdb.log")).unwrap_or_default()
        );
        let mut pg = Pg {
            dir,
            bin,
            child: None,
        };
        pg.launch();
        pg.psql_db("postgres", "create database rea");
        Some(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn sock(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The URL the nodes use (socket, no password).
    pub fn url(&self) -> String {
        format!(
            "postgresql://rea@/rea?host={}&port={PORT}",
            self.sock().display()
        )
    }

    /// Starts `postgres` as this thread's child and waits until it answers.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("log");
        chown(&self.dir.path().join("server.log"));
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.data())
            .arg("-k")
            .arg(self.sock())
            .args(["-p", &PORT.to_string()])
            .args(["-c", "listen_addresses="])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .args([
                "-c",
                "max_connections=100",
                "-c",
                "log_min_messages=warning",
            ])
            .args(["-c", "idle_in_transaction_session_timeout=60s"])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        as_owner(&mut cmd, true);
        self.child = Some(cmd.spawn().expect("spawn postgres"));
        let deadline = Instant::now() + PATIENCE;
        loop {
            if self.try_psql("postgres", "select 1").is_some() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "postgres exited ({status}): {}",
                    fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "postgres did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server like a crash (SIGQUIT: immediate shutdown) and
    /// reaps it.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGQUIT);
            }
            let deadline = Instant::now() + PATIENCE;
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The postmaster's own children (backends, background workers).
    fn children(postmaster: i32) -> Vec<i32> {
        let mut pids = Vec::new();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...: comm may hold spaces, so from the
            // last ')'.
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// A database stall of `d`: this test's own server frozen whole
    /// (SIGSTOP to the postmaster first, so it forks nothing meanwhile,
    /// then to each of its children), then thawed in the reverse order.
    /// Connections stay open; nothing is answered.
    pub fn stall(&self, d: Duration) {
        let postmaster = self.child.as_ref().expect("the server is running").id() as i32;
        let signal = |pid: i32, sig: i32| {
            // SAFETY: kill(2) on our own server's processes.
            unsafe {
                libc::kill(pid, sig);
            }
        };
        signal(postmaster, libc::SIGSTOP);
        let children = Self::children(postmaster);
        for &pid in &children {
            signal(pid, libc::SIGSTOP);
        }
        std::thread::sleep(d);
        for &pid in &children {
            signal(pid, libc::SIGCONT);
        }
        signal(postmaster, libc::SIGCONT);
    }

    fn psql_bin(&self) -> PathBuf {
        let own = self.bin.join("psql");
        if own.exists() {
            own
        } else {
            PathBuf::from("psql")
        }
    }

    fn try_psql(&self, db: &str, sql: &str) -> Option<String> {
        let out = Command::new(self.psql_bin())
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h"])
            .arg(self.sock())
            .args(["-p", &PORT.to_string(), "-U", "rea", "-d", db, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn psql_db(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql)
            .unwrap_or_else(|| panic!("psql failed: {sql}"))
    }

    /// [`Pg::psql`], None on an error (no schema yet, server down).
    pub fn psql_opt(&self, sql: &str) -> Option<String> {
        self.try_psql("rea", sql)
    }

    /// Runs SQL on database `rea`; its rows as `a|b` lines.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db("rea", sql)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The server shared by the tests of this process that do not stop it:
/// started once, from a thread that lives as long as the process (so the
/// death signal fires when the test binary ends, not when one test ends).
/// Each test uses its own cluster name in it.
pub fn shared(test: &str) -> Option<&'static SharedPg> {
    static SHARED: OnceLock<Option<SharedPg>> = OnceLock::new();
    available(test)?;
    SHARED
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let pg = Pg::start("shared").expect("postgres is installed");
                // The process ends without dropping statics: stop the
                // server and remove its directory on exit.
                let pid = pg.child.as_ref().map_or(0, |c| c.id() as i32);
                let _ = CLEANUP.set((pid, pg.dir.path().to_path_buf()));
                // SAFETY: registers a plain `extern "C" fn()`.
                unsafe {
                    libc::atexit(cleanup_shared);
                }
                let info = SharedPg {
                    url: pg.url(),
                    sock: pg.sock(),
                    psql: pg.psql_bin(),
                };
                tx.send(info).expect("send");
                // Keep the server (and this thread) for the process's life.
                let _pg = pg;
                loop {
                    std::thread::park();
                }
            });
            Some(rx.recv().expect("shared postgres started"))
        })
        .as_ref()
}

/// The shared server's pid and directory, for [`cleanup_shared`].
static CLEANUP: OnceLock<(i32, PathBuf)> = OnceLock::new();

extern "C" fn cleanup_shared() {
    if let Some((pid, dir)) = CLEANUP.get() {
        if *pid > 0 {
            // SAFETY: kill(2) and waitpid(2) on our own child's pid.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
                libc::waitpid(*pid, std::ptr::null_mut(), 0);
            }
        }
        let _ = fs::remove_dir_all(dir);
    }
}

/// What the tests need of the shared server.
pub struct SharedPg {
    pub url: String,
    sock: PathBuf,
    psql: PathBuf,
}

impl SharedPg {
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new(&self.psql)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.sock)
            .args(["-p", &PORT.to_string(), "-U", "rea", "-d", "rea", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql failed: {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
