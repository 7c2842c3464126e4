//! Runs' output in the systemd journal (`[daemon] job_output = "journal"`):
//! each line a run writes becomes a journal entry of its own, sent as it
//! comes (long jobs show up while they run) over journald's native
//! protocol: one datagram per entry to `/run/systemd/journal/socket`, with
//! `MESSAGE`, `PRIORITY` (6, info: stdout and stderr share one pipe, so an
//! error line cannot be told apart), `SYSLOG_IDENTIFIER` (the job), `JOB`
//! and `RUN`. `journalctl -u rea JOB=backup` then finds a job's output.
//!
//! The history keeps the output either way; the journal is a copy, and
//! never holds a run up for long: a line longer than [`LINE_MAX`] is split
//! into entries of at most that size (journald's own `LineMax=` default,
//! well within a datagram, so no memfd is ever needed), and if the journal
//! does not take an entry within [`STALL`] (journald busy or gone) the rest
//! of that run's output goes to the history only, with a warning.
//!
//! A run sends at most [`BURST`] entries at once and [`PER_SECOND`] a second
//! after that (journald itself drops what passes its per-service limit,
//! 10,000 per 30 s by default): a job flooding its output costs the
//! daemon's loop no more than that; the lines held back are counted in one
//! entry when the run may send again, or at its end.
//!
//! `REA_JOURNAL_SOCKET` names another socket: for tests and containers
//! whose journal socket is elsewhere.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UnixDatagram;
use tracing::warn;

/// systemd's socket for the native protocol.
const SOCKET: &str = "/run/systemd/journal/socket";

/// The longest entry: a longer line is split into entries of this size.
const LINE_MAX: usize = 48 * 1024;

/// How long an entry may wait for the journal before a run gives up on it.
const STALL: Duration = Duration::from_secs(1);

/// Entries one run may send at once...
const BURST: f64 = 10_000.0;
/// ...and per second after that.
const PER_SECOND: f64 = 1_000.0;

/// The daemon's way to the journal. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Unbound and unconnected: each entry is sent to the path, so a
    /// restarted journald is found again.
    socket: UnixDatagram,
    path: PathBuf,
    /// A failure was logged and nothing has been sent since: one warning
    /// per outage, not one per run.
    warned: AtomicBool,
}

impl Journal {
    /// The journal's socket, if there is one; `None` after one warning
    /// saying that output stays in the history only.
    pub fn open() -> Option<Journal> {
        let path = std::env::var_os("REA_JOURNAL_SOCKET")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(SOCKET));
        let is_socket = std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_socket());
        if !is_socket {
            warn!(
                socket = %path.display(),
                "job_output = \"journal\", but there is no journal socket here; runs' output is kept in the history only"
            );
            return None;
        }
        match UnixDatagram::unbound() {
            Ok(socket) => Some(Journal {
                inner: Arc::new(Inner {
                    socket,
                    path,
                    warned: AtomicBool::new(false),
                }),
            }),
            Err(e) => {
                warn!("job_output = \"journal\", but no socket can be created ({e}); runs' output is kept in the history only");
                None
            }
        }
    }

    /// The journal side of one run.
    pub fn lines(&self, job: &str, run: &str) -> Lines {
        let mut fields = Vec::new();
        for (key, value) in [
            ("PRIORITY", b"6".as_slice()),
            ("SYSLOG_IDENTIFIER", job.as_bytes()),
            ("JOB", job.as_bytes()),
            ("RUN", run.as_bytes()),
        ] {
            push_field(&mut fields, key, value);
        }
        Lines {
            journal: self.clone(),
            job: job.to_string(),
            run: run.to_string(),
            fields,
            entry: Vec::new(),
            partial: Vec::new(),
            stopped: false,
            tokens: BURST,
            refilled: Instant::now(),
            held_back: 0,
        }
    }
}

/// One run's output on its way to the journal: complete lines are sent as
/// they arrive; the last one, if it has no newline, when the output ends.
#[derive(Debug, Clone)]
pub struct Lines {
    journal: Journal,
    job: String,
    run: String,
    /// Every entry's fields but MESSAGE, encoded once.
    fields: Vec<u8>,
    /// The entry being sent, reused from line to line.
    entry: Vec<u8>,
    /// The start of a line whose newline has not come yet (less than
    /// [`LINE_MAX`]).
    partial: Vec<u8>,
    /// The journal failed this run: the rest goes to the history only.
    stopped: bool,
    /// Entries this run may send now (up to [`BURST`], [`PER_SECOND`] more
    /// each second), when they were last added, and the lines held back
    /// since the last entry that said so.
    tokens: f64,
    refilled: Instant,
    held_back: u64,
}

impl Lines {
    /// Bytes the run wrote.
    pub async fn push(&mut self, data: &[u8]) {
        let mut rest = data;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.send_line(&rest[..at]).await;
            } else {
                // The line's start came in an earlier read: completed in
                // its own buffer, which is kept (empty) for the next one.
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&rest[..at]);
                self.send_line(&line).await;
                line.clear();
                self.partial = line;
            }
            rest = &rest[at + 1..];
        }
        self.partial.extend_from_slice(rest);
        while self.partial.len() > LINE_MAX {
            let cut = char_boundary(&self.partial, LINE_MAX);
            let piece: Vec<u8> = self.partial.drain(..cut).collect();
            self.send(&piece).await;
        }
    }

    /// The output is over: a last line without its newline.
    pub async fn finish(&mut self) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.send(&line).await;
        }
        if self.held_back > 0 {
            self.tell_held_back().await;
        }
    }

    /// One line, in entries of at most [`LINE_MAX`] bytes.
    async fn send_line(&mut self, line: &[u8]) {
        let mut rest = line;
        while rest.len() > LINE_MAX {
            let cut = char_boundary(rest, LINE_MAX);
            self.send(&rest[..cut]).await;
            rest = &rest[cut..];
        }
        self.send(rest).await;
    }

    /// One entry, within the run's rate.
    async fn send(&mut self, message: &[u8]) {
        if self.stopped {
            return;
        }
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * PER_SECOND;
        self.tokens = (self.tokens + earned).min(BURST);
        self.refilled = now;
        if self.tokens < 1.0 {
            self.held_back += 1;
            return;
        }
        self.tokens -= 1.0;
        if self.held_back > 0 {
            self.tell_held_back().await;
            if self.tokens < 1.0 {
                self.held_back += 1;
                return;
            }
            self.tokens -= 1.0;
        }
        self.emit(message).await;
    }

    /// An entry counting the lines held back since the last one.
    async fn tell_held_back(&mut self) {
        let n = std::mem::take(&mut self.held_back);
        let notice = format!(
            "… {n} line(s) of this run's output not sent to the journal (more than {PER_SECOND} a second; the history keeps the output as ever) …"
        );
        self.emit(notice.as_bytes()).await;
    }

    /// Sends one entry: without waiting when the socket takes it at once,
    /// else for at most [`STALL`].
    async fn emit(&mut self, message: &[u8]) {
        if self.stopped {
            return;
        }
        let mut entry = std::mem::take(&mut self.entry);
        entry.clear();
        push_field(&mut entry, "MESSAGE", message);
        entry.extend_from_slice(&self.fields);
        let inner = &self.journal.inner;
        let sent = match inner.socket.try_send_to(&entry, &inner.path) {
            Ok(n) => Ok(Ok(n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::timeout(STALL, inner.socket.send_to(&entry, &inner.path)).await
            }
            Err(e) => Ok(Err(e)),
        };
        self.entry = entry;
        let problem = match sent {
            Ok(Ok(_)) => {
                inner.warned.store(false, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("it took no entry for {}", rea_core::duration::format(STALL)),
        };
        self.stopped = true;
        if !inner.warned.swap(true, Ordering::Relaxed) {
            warn!(
                job = self.job.as_str(),
                run = self.run.as_str(),
                socket = %inner.path.display(),
                "cannot send the run's output to the journal ({problem}); the rest of it is kept in the history only"
            );
        }
    }
}

/// Where to cut `bytes` (longer than `max`) at or before `max` so that no
/// UTF-8 character is split: the executor's own rule for output cut
/// between reads (at `max` if the text is not UTF-8 there anyway).
fn char_boundary(bytes: &[u8], max: usize) -> usize {
    match crate::utf8::utf8_complete_prefix(&bytes[..max.min(bytes.len())]) {
        0 => max,
        cut => cut,
    }
}

/// A whole entry of `fields`, in order.
#[cfg(test)]
fn entry(fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in fields {
        push_field(&mut out, key, value);
    }
    out
}

/// One field of a journal entry in the native protocol: a `KEY=value`
/// line, or for a value holding a newline `KEY`, a newline, its length as a
/// 64-bit little endian number, the value and a newline.
fn push_field(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.extend_from_slice(key.as_bytes());
    if value.contains(&b'\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_in_the_native_format() {
        assert_eq!(
            entry(&[("MESSAGE", b"hello"), ("JOB", b"backup")]),
            b"MESSAGE=hello\nJOB=backup\n"
        );
        let mut binary = b"MESSAGE\n".to_vec();
        binary.extend_from_slice(&5u64.to_le_bytes());
        binary.extend_from_slice(b"a\nb c\n");
        assert_eq!(entry(&[("MESSAGE", b"a\nb c")]), binary);
    }

    #[test]
    fn long_lines_are_cut_between_characters() {
        let text = "é".repeat(10);
        // 20 bytes; a cut at 5 would fall inside the third "é".
        assert_eq!(char_boundary(text.as_bytes(), 5), 4);
        assert_eq!(char_boundary(text.as_bytes(), 6), 6);
        assert_eq!(char_boundary(b"abc", 3), 3);
        assert_eq!(char_boundary(&[0x80; 8], 5), 5);
    }

    /// A socket standing in for journald, and the entries it received.
    fn journal() -> (tempfile::TempDir, Journal, std::os::unix::net::UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("socket");
        let server = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        server.set_nonblocking(true).unwrap();
        let journal = Journal {
            inner: Arc::new(Inner {
                socket: UnixDatagram::unbound().unwrap(),
                path,
                warned: AtomicBool::new(false),
            }),
        };
        (dir, journal, server)
    }

    fn messages(server: &std::os::unix::net::UnixDatagram) -> Vec<String> {
        let mut buf = vec![0u8; 1 << 17];
        let mut out = Vec::new();
        while let Ok(n) = server.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let message = text
                .lines()
                .find_map(|l| l.strip_prefix("MESSAGE="))
                .unwrap_or_default();
            out.push(message.to_string());
        }
        out
    }

    #[test]
    fn lines_become_entries_whatever_the_reads() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (_dir, journal, server) = journal();
            let mut lines = journal.lines("backup", "r1");
            for piece in [&b"one\ntw"[..], b"o\n\nthr", b"ee"] {
                lines.push(piece).await;
            }
            lines.finish().await;
            assert_eq!(messages(&server), ["one", "two", "", "three"]);
            let mut long = journal.lines("backup", "r2");
            long.push(&vec![b'x'; LINE_MAX * 2 + 10]).await;
            long.push(b"\n").await;
            let sizes: Vec<usize> = messages(&server).iter().map(String::len).collect();
            assert_eq!(sizes, [LINE_MAX, LINE_MAX, 10]);
        });
    }
}
