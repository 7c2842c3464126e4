//! Headless Chromium: where it is ([`find`]), the command line every use
//! shares ([`command`]), and a session over the DevTools protocol on a
//! pipe ([`Devtools`]: `--remote-debugging-pipe`, commands on the
//! browser's fd 3, answers and events on its fd 4, each a JSON object
//! ended by a NUL), enough to open a page, evaluate script in it and read
//! the answer.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

/// The browser's program name, if one is on the PATH (Debian's package
/// is `chromium`; others name it `chromium-browser`).
pub fn find() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `browser` headless, with its own profile at `profile` and its stderr
/// in `profile.log` (where a test that fails looks).
pub fn command(browser: &str, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null())
    .stderr(
        File::create(profile.with_extension("log"))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null()),
    );
    c
}

/// A browser driven over the DevTools protocol; killed when dropped.
pub struct Devtools {
    child: Child,
    to: File,
    from: BufReader<File>,
    next: u64,
    /// The page's session, once [`Devtools::open`] attached to it.
    session: Option<String>,
}

impl Drop for Devtools {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipe, both ends close-on-exec.
fn pipe() -> io::Result<[i32; 2]> {
    let mut fds = [0; 2];
    // SAFETY: fds is two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds)
}

impl Devtools {
    /// Starts `browser` ([`command`]) with the protocol on its fds 3 and 4.
    pub fn start(browser: &str, profile: &Path) -> io::Result<Devtools> {
        let (cmd, out) = (pipe()?, pipe()?);
        // SAFETY: each fd is ours alone from here on; the OwnedFds close
        // them whatever happens below.
        let [cmd_r, cmd_w, out_r, out_w] =
            unsafe { [cmd[0], cmd[1], out[0], out[1]].map(|fd| OwnedFd::from_raw_fd(fd)) };
        let (child_reads, child_writes) = (
            std::os::fd::AsRawFd::as_raw_fd(&cmd_r),
            std::os::fd::AsRawFd::as_raw_fd(&out_w),
        );
        let mut c = command(browser, profile);
        c.arg("--remote-debugging-pipe").stdout(Stdio::null());
        // SAFETY: only fcntl and dup2 between fork and exec
        // (async-signal-safe).
        unsafe {
            c.pre_exec(move || {
                // Out of the way of 3 and 4 first, then onto them (dup2
                // clears close-on-exec on the copy).
                let r = libc::fcntl(child_reads, libc::F_DUPFD, 10);
                let w = libc::fcntl(child_writes, libc::F_DUPFD, 10);
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn()?;
        // The child's ends are the child's now.
        drop((cmd_r, out_w));
        Ok(Devtools {
            child,
            to: File::from(cmd_w),
            from: BufReader::new(File::from(out_r)),
            next: 0,
            session: None,
        })
    }

    /// Sends `method` (to the page's session once one is open) and waits
    /// for its answer, skipping the events between.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = Value::String(s.clone());
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .map_err(|e| format!("write to chromium: {e}"))?;
        loop {
            let mut buf = Vec::new();
            let n = self
                .from
                .read_until(0, &mut buf)
                .map_err(|e| format!("read from chromium: {e}"))?;
            if n == 0 {
                return Err("chromium went away".into());
            }
            buf.pop();
            let v: Value =
                serde_json::from_slice(&buf).map_err(|e| format!("devtools JSON: {e}"))?;
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    return Err(format!("{method}: {e}"));
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Opens `url` in a new page and attaches to it: later calls go to it.
    pub fn open(&mut self, url: &str) -> Result<(), String> {
        let t = self.call("Target.createTarget", json!({"url": url}))?;
        let s = self.call(
            "Target.attachToTarget",
            json!({"targetId": t["targetId"], "flatten": true}),
        )?;
        self.session = s["sessionId"].as_str().map(str::to_string);
        Ok(())
    }

    /// The value of `expr` evaluated in the page (null when it threw or
    /// its value cannot be sent as JSON).
    pub fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        )?;
        Ok(r["result"]["value"].clone())
    }
}
