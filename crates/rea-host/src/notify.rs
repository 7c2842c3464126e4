//! systemd's readiness protocol (`sd_notify`, for `Type=notify` units):
//! datagrams like `READY=1` sent to the socket named by `$NOTIFY_SOCKET`.
//! Without that variable every call here does nothing.
//!
//! Messages: `READY=1` (with `MAINPID=` and `STATUS=`) once the daemon is
//! running, `RELOADING=1` … `READY=1` around a reload, `STOPPING=1` when
//! shutdown begins, and `STATUS=` whenever the one-line summary changes
//! (`systemctl status rea` shows it). A failure to send is logged once and
//! never stops the daemon: supervision is a convenience, the jobs are not.
//!
//! What does not live here: deciding when to notify (daemon), keeping the
//! variable away from jobs (the executor removes it from their environment).

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use chrono::{DateTime, Utc};
use tracing::warn;

/// The variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// The connection to the service manager, if there is one.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    warned: bool,
    /// What the last summary said, so an unchanged one is neither
    /// formatted nor resent (it is offered on every loop iteration).
    last_summary: Option<Summary>,
    /// After `STOPPING=1` the summary stays as shutdown left it.
    stopping: bool,
}

/// The facts [`status_line`] formats: (jobs, next run in whole seconds,
/// errors of a rejected job file).
type Summary = (usize, Option<i64>, Option<usize>);

impl Notifier {
    /// From `$NOTIFY_SOCKET`: an absolute path, or `@name` for an abstract
    /// socket. Anything else is reported once and ignored.
    pub fn from_env() -> Notifier {
        let mut n = Notifier::disabled();
        if let Some(value) = std::env::var_os(NOTIFY_SOCKET) {
            match target(&value.to_string_lossy()) {
                Ok(t) => n.target = Some(t),
                Err(e) => n.fail(&format!("{NOTIFY_SOCKET}={value:?}: {e}")),
            }
        }
        n
    }

    pub fn disabled() -> Notifier {
        Notifier {
            target: None,
            warned: false,
            last_summary: None,
            stopping: false,
        }
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Start-up is complete, or a reload is done.
    pub fn ready(&mut self, status: &str) {
        let msg = format!(
            "READY=1\nMAINPID={}\nSTATUS={}\n",
            std::process::id(),
            one_line(status)
        );
        self.send(&msg);
    }

    /// A reload begins (`READY=1` ends it). `MONOTONIC_USEC` is what
    /// `Type=notify-reload` requires with it; plain `notify` ignores it.
    pub fn reloading(&mut self) {
        let usec = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let usec = (usec.tv_sec as u128) * 1_000_000 + (usec.tv_nsec as u128) / 1_000;
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}\n"));
    }

    pub fn stopping(&mut self, status: &str) {
        self.stopping = true;
        self.send(&format!("STOPPING=1\nSTATUS={}\n", one_line(status)));
    }

    /// Sends `STATUS=` with [`status_line`] if its facts changed since the
    /// last one. Cheap when nothing changed (no formatting, no syscall).
    pub fn summary(&mut self, jobs: usize, next: Option<DateTime<Utc>>, rejected: Option<usize>) {
        let key = (jobs, next.map(|t| t.timestamp()), rejected);
        if self.target.is_none() || self.stopping || self.last_summary == Some(key) {
            return;
        }
        self.last_summary = Some(key);
        let line = status_line(jobs, next, rejected);
        self.send(&format!("STATUS={line}\n"));
    }

    fn send(&mut self, msg: &str) {
        let Some((socket, addr)) = &self.target else {
            return;
        };
        if let Err(e) = socket.send_to_addr(msg.as_bytes(), addr) {
            self.fail(&format!("cannot notify the service manager: {e}"));
        }
    }

    fn fail(&mut self, message: &str) {
        if !self.warned {
            warn!("{message} (systemd will not see rea's state; reported once)");
            self.warned = true;
        }
    }
}

/// The socket to send to.
fn target(value: &str) -> io::Result<(UnixDatagram, SocketAddr)> {
    let addr = if let Some(name) = value.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())?
    } else if value.starts_with('/') {
        SocketAddr::from_pathname(value)?
    } else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "expected an absolute path or @name of a unix socket",
        ));
    };
    let socket = UnixDatagram::unbound()?;
    // The loop must never wait on systemd: a full queue loses a message
    // (reported once) instead of blocking every job.
    socket.set_nonblocking(true)?;
    Ok((socket, addr))
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// The summary `systemctl status` shows: job count, the next run, and a
/// rejected job file. The next run is an absolute time, not "in 3m": the
/// daemon sleeps until then and would leave a relative one going stale.
pub fn status_line(jobs: usize, next: Option<DateTime<Utc>>, rejected: Option<usize>) -> String {
    let mut s = format!("{jobs} job{}", if jobs == 1 { "" } else { "s" });
    match next {
        Some(t) => s.push_str(&format!(", next run {}", t.format("%Y-%m-%d %H:%M:%S UTC"))),
        None => s.push_str(", nothing scheduled"),
    }
    if let Some(n) = rejected {
        s.push_str(&format!(
            "; the job file on disk has {n} error{} (running the last good one)",
            if n == 1 { "" } else { "s" }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn listen() -> (tempfile::TempDir, UnixDatagram, Notifier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: Some(target(path.to_str().unwrap()).unwrap()),
            warned: false,
            last_summary: None,
            stopping: false,
        };
        (dir, server, n)
    }

    fn recv(server: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = server.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn messages_reach_a_path_socket() {
        let (_dir, server, mut n) = listen();
        n.ready("2 jobs");
        assert_eq!(
            recv(&server),
            format!("READY=1\nMAINPID={}\nSTATUS=2 jobs\n", std::process::id())
        );
        n.reloading();
        let msg = recv(&server);
        assert!(msg.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{msg}");
        n.summary(3, None, None);
        n.summary(3, None, None);
        n.summary(2, None, Some(1));
        assert_eq!(recv(&server), "STATUS=3 jobs, nothing scheduled\n");
        assert_eq!(
            recv(&server),
            "STATUS=2 jobs, nothing scheduled; the job file on disk has 1 error (running the last good one)\n"
        );
        n.stopping("stopping");
        assert_eq!(recv(&server), "STOPPING=1\nSTATUS=stopping\n");
    }

    #[test]
    fn abstract_sockets() {
        let name = format!("rea-notify-test-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        let mut n = Notifier {
            target: Some(target(&format!("@{name}")).unwrap()),
            warned: false,
            last_summary: None,
            stopping: false,
        };
        n.stopping("bye");
        assert_eq!(recv(&server), "STOPPING=1\nSTATUS=bye\n");
    }

    #[test]
    fn bad_targets_are_refused_and_failures_are_not_fatal() {
        assert!(target("relative/path").is_err());
        assert!(target("vsock:2:1234").is_err());
        let mut n = Notifier {
            target: Some(target("/nonexistent/rea/notify").unwrap()),
            warned: false,
            last_summary: None,
            stopping: false,
        };
        n.ready("x");
        assert!(n.warned);
        n.stopping("y");
        let mut off = Notifier::disabled();
        off.ready("x");
        off.summary(1, None, None);
        assert!(!off.enabled() && !off.warned);
    }

    #[test]
    fn status_lines() {
        let t = Utc.with_ymd_and_hms(2026, 3, 1, 14, 5, 0).unwrap();
        assert_eq!(
            status_line(12, Some(t), None),
            "12 jobs, next run 2026-03-01 14:05:00 UTC"
        );
        assert_eq!(
            status_line(1, None, Some(1)),
            "1 job, nothing scheduled; the job file on disk has 1 error (running the last good one)"
        );
    }
}
