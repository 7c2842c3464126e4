//! The run history: an append-only JSON-lines log in the state directory
//! (`history.jsonl`, rotated by size to `history.jsonl.1` …), read backwards
//! by the query commands so they stay fast on a huge log. Readers never need
//! the daemon and tolerate a torn last line.
//!
//! The daemon only sees the narrow `HistoryStore` trait (append an event) and
//! the query commands only the `HistoryReader` trait, so a shared database
//! backend can replace the file later without touching either side.
//!
//! What lives here: the line schema (`Record`), the file writer
//! (`JsonlHistory`: single-write appends, size rotation, an in-memory backlog
//! when the disk misbehaves), the backwards line reader (`RevLines`) and the
//! queries built on it (`JsonlReader`). What does not: formatting for people
//! (the commands) and deciding what to do with the answers (the daemon).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Version of the line schema below; bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// What a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A state change of a run; `status` says which.
    Run,
    /// Occurrences that passed while the daemon was down or the clock jumped,
    /// not run because of the job's `catch_up` policy.
    Missed,
    DaemonStarted,
    DaemonStopped,
    ConfigLoaded,
    ConfigRejected,
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Schedule,
    Retry,
    Manual,
    CatchUp,
    Reboot,
    Oneshot,
    /// The jobs named in its `after` succeeded.
    Dependency,
}

impl Trigger {
    /// The name the history, `REA_TRIGGER` and the logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Retry => "retry",
            Trigger::Manual => "manual",
            Trigger::CatchUp => "catch_up",
            Trigger::Reboot => "reboot",
            Trigger::Oneshot => "oneshot",
            Trigger::Dependency => "dependency",
        }
    }
}

/// The states of a run. `Started` is the only non-final one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Started,
    Succeeded,
    Failed,
    TimedOut,
    Killed,
    Skipped,
    Interrupted,
    /// A pending one-shot cancelled by the operator before it ran.
    Cancelled,
}

impl RunStatus {
    /// The final statuses of a scheduled job's run (`cancelled` only
    /// happens to one-shots).
    pub const FINAL: [RunStatus; 6] = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::TimedOut,
        RunStatus::Killed,
        RunStatus::Skipped,
        RunStatus::Interrupted,
    ];

    pub fn is_final(self) -> bool {
        self != RunStatus::Started
    }
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Started => "started",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Killed => "killed",
            RunStatus::Skipped => "skipped",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Cancelled => "cancelled",
        }
    }
}

/// One line of the log. Fields that do not apply to an event are omitted
/// from the JSON. A final run line is self-contained (it repeats what the
/// `started` line said) so a reader never has to join lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    /// When the line was written.
    #[serde(with = "ms_time")]
    pub ts: DateTime<Utc>,
    pub event: Event,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// The occurrence this run belongs to (for retries: the original one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub scheduled: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub started: Option<DateTime<Utc>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ms_time::opt"
    )]
    pub ended: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Time spent waiting for a `max_concurrent` slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// Random start delay applied (job `jitter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Captured stdout+stderr, bounded (head … marker … tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Bytes the run wrote in total (may exceed what `output` keeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_cpu_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_cpu_ms: Option<u64>,
    /// Why: skip reason, spawn error, config error text, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Counts: missed occurrences, jobs loaded, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Event-specific extras (config_loaded counts, daemon pid/version, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// An instant as the log writes it: RFC 3339, UTC, milliseconds. The status
/// and control answers use the same form.
pub fn format_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Instants in the log are RFC 3339 UTC with milliseconds
/// (`2026-11-29T09:12:17.000Z`): precise enough for lateness, short, and
/// sortable as text.
mod ms_time {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ts(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        DateTime::<Utc>::deserialize(d)
    }

    pub mod opt {
        use super::*;

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<DateTime<Utc>>::deserialize(d)
        }
    }
}

impl Record {
    /// A line of `event` at `ts` with every optional field empty.
    pub fn new(event: Event, ts: DateTime<Utc>) -> Record {
        Record {
            v: SCHEMA_VERSION,
            ts,
            event,
            job: None,
            run: None,
            attempt: None,
            trigger: None,
            status: None,
            scheduled: None,
            started: None,
            ended: None,
            duration_ms: None,
            waited_ms: None,
            jitter_ms: None,
            pid: None,
            exit_code: None,
            signal: None,
            output: None,
            output_bytes: None,
            max_rss_kb: None,
            user_cpu_ms: None,
            sys_cpu_ms: None,
            reason: None,
            count: None,
            detail: None,
        }
    }
}

/// What the daemon needs from a history backend: append one event. Kept this
/// narrow on purpose (see module doc).
pub trait HistoryStore: Send {
    fn append(&mut self, record: &Record) -> io::Result<()>;
}

/// The path of the live log in a state directory.
pub fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("history.jsonl")
}

/// The path of rotated log number `n` (1 = the most recently rotated).
pub fn rotated_path(state_dir: &Path, n: u32) -> PathBuf {
    state_dir.join(format!("history.jsonl.{n}"))
}

/// Records kept in memory while the log cannot be written (disk full, EIO…).
pub const BACKLOG_MAX_RECORDS: usize = 10_000;
/// Bytes kept in memory for the same reason: a record may carry 64 KiB+ of
/// output, so a record count alone could pin hundreds of MiB.
pub const BACKLOG_MAX_BYTES: usize = 64 << 20;
/// How much the backwards reader reads per `pread`.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

/// The most recent failure of the writer, for `rea status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    pub at: DateTime<Utc>,
    pub message: String,
}

/// The embedded history backend: `history.jsonl` in the state directory.
///
/// Each record is one line written with a single `write` on an `O_APPEND`
/// descriptor, so concurrent readers see either nothing or the whole line
/// (a short write is finished by further writes, it is just not atomic then).
///
/// There is no fsync per line, on purpose: the daemon loop would stall for
/// a disk flush on every state change of every run, and what a crash can
/// lose is the last few lines, which readers already tolerate (a torn last
/// line is skipped, a run whose final line is lost is found by
/// `unfinished_runs` and recorded as interrupted). Durability is best-effort
/// per line; the kernel writes the page cache back within seconds.
///
/// Writes that fail do not lose the record at once: it waits, in order, in a
/// bounded in-memory backlog that is flushed before the next record (or by
/// `flush_backlog`), so a full disk that gets cleaned up loses nothing.
pub struct JsonlHistory {
    dir: PathBuf,
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    /// `None` after any write error, so the next attempt reopens the path and
    /// re-checks how the file ends (a failed write may have left half a line).
    file: Option<OpenLog>,
    /// Serialised lines (with their `\n`) not yet written, oldest first.
    backlog: VecDeque<Vec<u8>>,
    backlog_bytes: usize,
    backlog_max_records: usize,
    backlog_max_bytes: usize,
    dropped: u64,
    last_error: Option<WriteFailure>,
}

/// The live file as opened, with its identity so a file deleted or replaced
/// under the daemon (an operator's `rm`, an external logrotate) is noticed
/// and reopened instead of written into the void.
struct OpenLog {
    file: File,
    dev: u64,
    ino: u64,
    /// The file did not end with `\n` when opened (a torn line from a crash):
    /// the next write starts with `\n` so the fragment stays its own
    /// (malformed, skipped) line instead of corrupting the next record.
    needs_newline: bool,
}

impl JsonlHistory {
    /// Opens (creating it and the state directory if needed) the live log.
    /// Fails if the file cannot be opened now: at start-up that is a
    /// misconfiguration to report, not something to paper over.
    ///
    /// `max_bytes`: rotate before the live file would grow past this.
    /// `max_files`: rotated files kept (`history.jsonl.1` ..= `.max_files`),
    /// besides the live one; 0 keeps none (the live file is deleted when full).
    pub fn open(state_dir: &Path, max_bytes: u64, max_files: u32) -> io::Result<JsonlHistory> {
        fs::create_dir_all(state_dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", state_dir.display()),
            )
        })?;
        let mut history = JsonlHistory {
            dir: state_dir.to_path_buf(),
            path: log_path(state_dir),
            max_bytes,
            max_files,
            file: None,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            backlog_max_records: BACKLOG_MAX_RECORDS,
            backlog_max_bytes: BACKLOG_MAX_BYTES,
            dropped: 0,
            last_error: None,
        };
        history
            .ensure_open()
            .map_err(|e| history.contextualise(e))?;
        Ok(history)
    }

    /// New rotation limits (a reloaded `[daemon]` section); applied from
    /// the next append on.
    pub fn set_rotation(&mut self, max_bytes: u64, max_files: u32) {
        self.max_bytes = max_bytes;
        self.max_files = max_files;
    }

    /// Changes the backlog bounds (tests, or a config knob later). At least
    /// the newest record is always kept.
    pub fn set_backlog_limits(&mut self, max_records: usize, max_bytes: usize) {
        self.backlog_max_records = max_records;
        self.backlog_max_bytes = max_bytes;
        self.trim_backlog();
    }

    /// A reader over this log (the same files, default chunk size).
    pub fn reader(&self) -> JsonlReader {
        JsonlReader::new(&self.dir)
    }

    /// Records waiting in memory because writing failed.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// Records lost because the backlog was full (oldest dropped first).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The most recent write or rotation failure, kept (with its time) after
    /// recovery so `rea status` can say what happened.
    pub fn last_error(&self) -> Option<&WriteFailure> {
        self.last_error.as_ref()
    }

    /// Writes the backlog, oldest first, stopping at the first failure (the
    /// order of lines is the order of events; it is never reshuffled).
    pub fn flush_backlog(&mut self) -> io::Result<()> {
        while let Some(line) = self.backlog.pop_front() {
            match self.write_line(&line) {
                Ok(()) => self.backlog_bytes -= line.len(),
                Err(e) => {
                    self.backlog.push_front(line);
                    let e = self.contextualise(e);
                    self.note_error(e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn contextualise(&self, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("cannot write history {}: {e}", self.path.display()),
        )
    }

    fn note_error(&mut self, message: String) {
        self.last_error = Some(WriteFailure {
            at: Utc::now(),
            message,
        });
    }

    fn push_backlog(&mut self, line: Vec<u8>) {
        self.backlog_bytes += line.len();
        self.backlog.push_back(line);
        self.trim_backlog();
    }

    fn trim_backlog(&mut self) {
        while self.backlog.len() > 1
            && (self.backlog.len() > self.backlog_max_records
                || self.backlog_bytes > self.backlog_max_bytes)
        {
            if let Some(old) = self.backlog.pop_front() {
                self.backlog_bytes -= old.len();
                self.dropped += 1;
            }
        }
    }

    /// Makes sure `self.file` is the file now at `self.path` and returns its
    /// size. One `stat` per write: cheap next to a process spawn.
    fn ensure_open(&mut self) -> io::Result<u64> {
        match fs::metadata(&self.path) {
            Ok(meta) => {
                if let Some(open) = &self.file {
                    if open.dev == meta.dev() && open.ino == meta.ino() {
                        return Ok(if meta.is_file() { meta.len() } else { 0 });
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                self.file = None;
                return Err(e);
            }
        }
        self.file = None;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            // Job output can hold secrets; the socket is 0600 for the same reason.
            .mode(0o600)
            .open(&self.path)?;
        let meta = file.metadata()?;
        let size = if meta.is_file() { meta.len() } else { 0 };
        let needs_newline = if size > 0 {
            let mut last = [0u8];
            FileExt::read_exact_at(&file, &mut last, size - 1)?;
            last[0] != b'\n'
        } else {
            false
        };
        self.file = Some(OpenLog {
            file,
            dev: meta.dev(),
            ino: meta.ino(),
            needs_newline,
        });
        Ok(size)
    }

    /// Writes one serialised line (ending in `\n`), rotating first if it
    /// would push the live file past `max_bytes`.
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let size = self.ensure_open()?;
        if size > 0 && size + line.len() as u64 > self.max_bytes {
            // A failed rotation must not lose the record: note it and keep
            // appending to whatever file is at the path (oversized beats lost).
            if let Err(e) = self.rotate() {
                self.note_error(format!(
                    "cannot rotate history {}: {e}",
                    self.path.display()
                ));
            }
            self.ensure_open()?;
        }
        let Some(open) = self.file.as_mut() else {
            return Err(io::Error::other("history file not open"));
        };
        let result = if open.needs_newline {
            let mut buf = Vec::with_capacity(line.len() + 1);
            buf.push(b'\n');
            buf.extend_from_slice(line);
            // `write_all` is one `write(2)` unless the kernel writes short;
            // then it writes the rest (the line is no longer atomic, but whole).
            open.file.write_all(&buf)
        } else {
            open.file.write_all(line)
        };
        match result {
            Ok(()) => {
                open.needs_newline = false;
                Ok(())
            }
            Err(e) => {
                self.file = None;
                Err(e)
            }
        }
    }

    /// `.{n-1}` → `.{n}` … live → `.1`, dropping what falls off the end.
    /// A crash half-way leaves a gap in the numbering, which readers
    /// tolerate; the next write creates a fresh live file.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        if self.max_files == 0 {
            return ignore_not_found(fs::remove_file(&self.path));
        }
        // Files beyond the limit (it may have been lowered) go too, or
        // readers would keep reading them forever.
        for (n, path) in rotated_files(&self.dir)? {
            if n >= self.max_files {
                ignore_not_found(fs::remove_file(path))?;
            }
        }
        for n in (1..self.max_files).rev() {
            ignore_not_found(fs::rename(
                rotated_path(&self.dir, n),
                rotated_path(&self.dir, n + 1),
            ))?;
        }
        ignore_not_found(fs::rename(&self.path, rotated_path(&self.dir, 1)))
    }
}

impl HistoryStore for JsonlHistory {
    /// Queues the record behind any backlog and writes everything it can.
    /// On error the record stays queued (see `backlog_len`) and the error,
    /// naming the file, is returned; nothing panics.
    fn append(&mut self, record: &Record) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.push_backlog(line);
        self.flush_backlog()
    }
}

fn ignore_not_found(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The rotated files present in `dir`, by number ascending (newest first).
/// Gaps in the numbering are fine.
fn rotated_files(dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|name| name.strip_prefix("history.jsonl."))
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u32>().ok())
        else {
            continue;
        };
        if n > 0 {
            found.push((n, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

// ---------------------------------------------------------------------------
// Backwards line reader
// ---------------------------------------------------------------------------

/// Positional reads, so the backwards reader works on files and, in tests,
/// on plain byte slices.
pub trait ReadAt {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = self
            .get(start..start + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// The lines of the first `len` bytes of a source, last line first, read in
/// chunks of `chunk` bytes from the end. Memory is one chunk plus the line
/// being assembled, so a line longer than a chunk works and a huge file
/// costs nothing. Empty lines are skipped; the `\n` is not included; a last
/// line without `\n` (torn) is returned like any other.
pub struct RevLines<R> {
    src: R,
    /// Offset of the first byte not yet read from `src`.
    pos: u64,
    chunk: usize,
    buf: Vec<u8>,
    /// `buf[..filled]` is read but not yet returned.
    filled: usize,
}

impl<R: ReadAt> RevLines<R> {
    pub fn new(src: R, len: u64, chunk: usize) -> RevLines<R> {
        RevLines {
            src,
            pos: len,
            chunk: chunk.max(1),
            buf: Vec::new(),
            filled: 0,
        }
    }

    /// The previous line, or `None` at the start of the source.
    pub fn prev_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        // Pieces of a line that spans chunks, last piece first.
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        loop {
            if self.filled == 0 {
                if self.pos == 0 {
                    return Ok((!pieces.is_empty()).then(|| join_reversed(pieces)));
                }
                let n = self.pos.min(self.chunk as u64) as usize;
                self.buf.resize(n, 0);
                let offset = self.pos - n as u64;
                if let Err(e) = self.src.read_exact_at(&mut self.buf[..n], offset) {
                    self.pos = 0;
                    return Err(e);
                }
                self.pos = offset;
                self.filled = n;
            }
            let data = &self.buf[..self.filled];
            match data.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    let tail = &data[i + 1..];
                    self.filled = i;
                    if pieces.is_empty() {
                        if !tail.is_empty() {
                            return Ok(Some(tail.to_vec()));
                        }
                    } else {
                        pieces.push(tail.to_vec());
                        return Ok(Some(join_reversed(pieces)));
                    }
                }
                None => {
                    pieces.push(data.to_vec());
                    self.filled = 0;
                }
            }
        }
    }
}

impl<R: ReadAt> Iterator for RevLines<R> {
    type Item = io::Result<Vec<u8>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.prev_line().transpose()
    }
}

fn join_reversed(pieces: Vec<Vec<u8>>) -> Vec<u8> {
    let mut pieces = pieces.into_iter().rev();
    let mut line = pieces.next().unwrap_or_default();
    for piece in pieces {
        line.extend_from_slice(&piece);
    }
    line
}

// ---------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------

/// What `rea history` asks for. Results are newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    pub job: Option<String>,
    /// Empty = any; otherwise only run lines with one of these statuses.
    pub statuses: Vec<RunStatus>,
    /// Only lines written at or after this instant.
    pub since: Option<DateTime<Utc>>,
    pub limit: Option<usize>,
    /// Only `event: run` lines (no daemon/config/missed events).
    pub runs_only: bool,
    /// Also `missed` lines, whatever `statuses` and `runs_only` say
    /// (`rea history` shows them: they answer "why did it not run?").
    pub with_missed: bool,
}

impl Query {
    /// Whether a record passes every filter (`limit` aside).
    pub fn matches(&self, record: &Record) -> bool {
        self.job
            .as_deref()
            .is_none_or(|job| record.job.as_deref() == Some(job))
            && self.since.is_none_or(|since| record.ts >= since)
            && ((self.with_missed && record.event == Event::Missed)
                || ((self.statuses.is_empty()
                    || record.status.is_some_and(|s| self.statuses.contains(&s)))
                    && (!self.runs_only || record.event == Event::Run)))
    }
}

/// The last final run of a job, as `rea status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub run: Option<String>,
    pub attempt: Option<u32>,
    pub trigger: Option<Trigger>,
    pub status: RunStatus,
    pub scheduled: Option<DateTime<Utc>>,
    pub started: Option<DateTime<Utc>>,
    pub ended: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// Per-job totals for the offline `rea status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSummary {
    /// The newest final run line that is not `skipped`.
    pub last: Option<RunSummary>,
    /// `failed`/`timed_out` final lines since the last `succeeded` one
    /// (each retry attempt counts; killed/interrupted neither count nor reset).
    pub consecutive_failures: u64,
    /// Final run lines other than `skipped` in the whole history.
    pub total_runs: u64,
    /// `skipped` run lines (overlap policy) in the whole history.
    pub skipped: u64,
    pub last_success: Option<DateTime<Utc>>,
}

/// Per job, the latest occurrence the schedule already took care of; and
/// when the previous daemon started.
pub type LastOccurrences = (HashMap<String, DateTime<Utc>>, Option<DateTime<Utc>>);

/// The questions the commands and the daemon's start-up ask the history.
/// The JSON-lines file answers them by reading backwards; a database
/// backend would answer them with indexed queries.
pub trait HistoryReader {
    /// Matching records, newest first.
    fn query(&self, query: &Query) -> io::Result<Vec<Record>>;

    /// The newest line of a run: its final line, or its `started` line if
    /// it has not ended (`rea logs --run ID`).
    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>>;

    /// The newest final, not `skipped`, run line of a job (`rea logs JOB`:
    /// a skipped run has no output to show).
    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>>;

    /// `started` lines without a final line, written since the newest
    /// `daemon_started` line; newest first. Call before appending this
    /// daemon's own `daemon_started`, or nothing will be found.
    fn unfinished_runs(&self) -> io::Result<Vec<Record>>;

    /// For each named job the latest `scheduled` instant of a run triggered
    /// by `schedule` or `catch_up`, or of a `missed` line; plus the `ts` of
    /// the newest `daemon_started`. Call before appending this daemon's own
    /// `daemon_started`.
    fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences>;

    /// Per-job totals over the whole history, keyed by job name.
    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>>;

    /// Like `job_summaries`, but may stop reading once every job in `jobs`
    /// has its last run and a success (so its failure streak is known): what
    /// `rea status` and the daemon's start need, without reading a huge log
    /// to its beginning. `total_runs` and `skipped` then count only what was
    /// read.
    fn recent_summaries(&self, jobs: &HashSet<String>) -> io::Result<HashMap<String, JobSummary>> {
        let _ = jobs;
        self.job_summaries()
    }

    /// Lines the last call skipped because they did not parse (a torn last
    /// line after kill -9, garbage). Lines a query's cheap pre-filter ruled
    /// out are never parsed, so they are not counted. Backends that cannot
    /// have malformed lines say 0.
    fn malformed(&self) -> u64 {
        0
    }
}

/// Reads the JSON-lines history of a state directory, newest first, across
/// the live file and the rotated ones. Needs no daemon; missing files are
/// an empty history.
pub struct JsonlReader {
    dir: PathBuf,
    chunk: usize,
    malformed: AtomicU64,
}

/// What a scan does with a raw line before paying for a full parse.
enum Pre {
    Parse,
    Skip,
    Stop,
}

/// The fields the summary scans need; `output` and `detail` are skipped by
/// the parser without being allocated.
#[derive(Deserialize)]
struct RunHead {
    ts: DateTime<Utc>,
    event: Event,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    trigger: Option<Trigger>,
    #[serde(default)]
    status: Option<RunStatus>,
    #[serde(default)]
    scheduled: Option<DateTime<Utc>>,
    #[serde(default)]
    started: Option<DateTime<Utc>>,
    #[serde(default)]
    ended: Option<DateTime<Utc>>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
}

impl JsonlReader {
    pub fn new(state_dir: &Path) -> JsonlReader {
        JsonlReader {
            dir: state_dir.to_path_buf(),
            chunk: DEFAULT_CHUNK_SIZE,
            malformed: AtomicU64::new(0),
        }
    }

    /// Bytes per backwards read (tests use tiny ones to hit chunk edges).
    pub fn with_chunk_size(mut self, chunk: usize) -> JsonlReader {
        self.chunk = chunk.max(1);
        self
    }

    /// Opens the live file and every rotated one up front, newest first, and
    /// notes their lengths: renames don't affect open files, so a rotation
    /// while a query runs can't make it read a file twice or lines written
    /// later. A rotation between two opens can show the same file under two
    /// names; the (device, inode) check drops the second.
    fn open_files(&self) -> io::Result<Vec<(File, u64)>> {
        let mut paths = vec![log_path(&self.dir)];
        paths.extend(rotated_files(&self.dir)?.into_iter().map(|(_, path)| path));
        let mut seen = HashSet::new();
        let mut files = Vec::new();
        for path in paths {
            let file = match File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot read history {}: {e}", path.display()),
                    ))
                }
            };
            let meta = file.metadata()?;
            if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                files.push((file, meta.len()));
            }
        }
        Ok(files)
    }

    fn scan<T: serde::de::DeserializeOwned>(
        &self,
        pre: impl Fn(&str) -> Pre,
        mut visit: impl FnMut(T) -> ControlFlow<()>,
    ) -> io::Result<()> {
        self.malformed.store(0, Ordering::Relaxed);
        for (file, len) in self.open_files()? {
            for line in RevLines::new(file, len, self.chunk) {
                let line = line?;
                let Ok(line) = std::str::from_utf8(&line) else {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                match pre(line) {
                    Pre::Parse => {}
                    Pre::Skip => continue,
                    Pre::Stop => return Ok(()),
                }
                match serde_json::from_str::<T>(line) {
                    Ok(record) => {
                        if visit(record).is_break() {
                            return Ok(());
                        }
                    }
                    Err(_) => {
                        self.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The `ts` of a line as rea writes it (`{"v":1,"ts":"…",…`) without a full
/// parse; `None` for anything else, which then gets the full parse.
fn fast_ts(line: &str) -> Option<DateTime<Utc>> {
    let head = line.get(..line.len().min(24))?;
    let at = head.find(",\"ts\":\"")? + 7;
    let rest = &line[at..];
    let end = rest.get(..rest.len().min(48))?.find('"')?;
    DateTime::parse_from_rfc3339(&rest[..end])
        .ok()
        .map(|ts| ts.with_timezone(&Utc))
}

/// `"value"` as it appears in a line rea wrote: a cheap substring test that
/// rules lines out before parsing. Sound for any whitespace layout; only a
/// hand-written line spelling printable characters as `\u` escapes could be
/// missed, and rea never writes those.
fn quoted(value: &str) -> io::Result<String> {
    serde_json::to_string(value).map_err(io::Error::other)
}

impl HistoryReader for JsonlReader {
    fn query(&self, query: &Query) -> io::Result<Vec<Record>> {
        let mut found = Vec::new();
        if query.limit == Some(0) {
            self.malformed.store(0, Ordering::Relaxed);
            return Ok(found);
        }
        let job = query.job.as_deref().map(quoted).transpose()?;
        let mut statuses: Vec<String> = query
            .statuses
            .iter()
            .map(|s| format!("\"{}\"", s.as_str()))
            .collect();
        if query.with_missed && !statuses.is_empty() {
            statuses.push("\"missed\"".to_string());
        }
        self.scan(
            |line| {
                if let (Some(since), Some(ts)) = (query.since, fast_ts(line)) {
                    if ts < since {
                        return Pre::Stop;
                    }
                }
                if job.as_ref().is_some_and(|job| !line.contains(job.as_str()))
                    || (!statuses.is_empty() && !statuses.iter().any(|s| line.contains(s.as_str())))
                {
                    return Pre::Skip;
                }
                Pre::Parse
            },
            |record: Record| {
                // The log is in `ts` order (rotation keeps it), so the first
                // line older than `since` ends the search.
                if query.since.is_some_and(|since| record.ts < since) {
                    return ControlFlow::Break(());
                }
                if query.matches(&record) {
                    found.push(record);
                    if query.limit.is_some_and(|limit| found.len() >= limit) {
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(found)
    }

    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
        self.newest(run_id, |r| {
            r.event == Event::Run && r.run.as_deref() == Some(run_id)
        })
    }

    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
        self.newest(job, |r| {
            r.event == Event::Run
                && r.job.as_deref() == Some(job)
                && r.status
                    .is_some_and(|s| s.is_final() && s != RunStatus::Skipped)
        })
    }

    fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
        // Runs whose final line was seen (we read newest first, and a final
        // line comes after its `started` line). An entry leaves the set when
        // its `started` line is reached, so the set holds only the runs in
        // flight at that point (plus skipped runs, which never started).
        let mut finished: HashSet<(String, Option<u32>)> = HashSet::new();
        let mut unfinished = Vec::new();
        self.scan(
            |_| Pre::Parse,
            |record: Record| {
                if record.event == Event::DaemonStarted {
                    return ControlFlow::Break(());
                }
                if record.event != Event::Run {
                    return ControlFlow::Continue(());
                }
                let (Some(run), Some(status)) = (&record.run, record.status) else {
                    return ControlFlow::Continue(());
                };
                let key = (run.clone(), record.attempt);
                if status.is_final() {
                    finished.insert(key);
                } else if !finished.remove(&key) {
                    unfinished.push(record);
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(unfinished)
    }

    fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences> {
        let mut latest: HashMap<String, DateTime<Utc>> = HashMap::new();
        let mut daemon_started = None;
        // The oldest of the per-job answers once every job has one: a line
        // is never written before its `scheduled` instant, so once lines are
        // older than every answer none can be improved.
        let mut settle_below: Option<DateTime<Utc>> = None;
        self.scan(
            |_| Pre::Parse,
            |head: RunHead| {
                if head.event == Event::DaemonStarted && daemon_started.is_none() {
                    daemon_started = Some(head.ts);
                }
                let counts = match head.event {
                    Event::Missed => true,
                    Event::Run => {
                        matches!(head.trigger, Some(Trigger::Schedule | Trigger::CatchUp))
                    }
                    _ => false,
                };
                if let (true, Some(job), Some(scheduled)) = (counts, &head.job, head.scheduled) {
                    if jobs.contains(job) {
                        let best = latest.entry(job.clone()).or_insert(scheduled);
                        if scheduled > *best {
                            *best = scheduled;
                        }
                        if latest.len() == jobs.len() {
                            settle_below = latest.values().min().copied();
                        }
                    }
                }
                let settled =
                    latest.len() == jobs.len() && settle_below.is_none_or(|below| head.ts < below);
                if settled && daemon_started.is_some() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        Ok((latest, daemon_started))
    }

    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
        self.summaries_until(None)
    }

    fn recent_summaries(&self, jobs: &HashSet<String>) -> io::Result<HashMap<String, JobSummary>> {
        self.summaries_until(Some(jobs))
    }

    fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
}

impl JsonlReader {
    /// The newest record that `wanted` accepts, parsing only lines that
    /// contain `text` as a JSON string (a job name or a run id).
    fn newest(&self, text: &str, wanted: impl Fn(&Record) -> bool) -> io::Result<Option<Record>> {
        let needle = quoted(text)?;
        let mut found = None;
        self.scan(
            |line| {
                if line.contains(needle.as_str()) {
                    Pre::Parse
                } else {
                    Pre::Skip
                }
            },
            |record: Record| {
                if wanted(&record) {
                    found = Some(record);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(found)
    }

    /// Per-job summaries, newest first; with `stop_when`, reading ends once
    /// each of those jobs has a complete failure streak.
    fn summaries_until(
        &self,
        stop_when: Option<&HashSet<String>>,
    ) -> io::Result<HashMap<String, JobSummary>> {
        // The bool: a success was seen, so the failure streak is complete.
        let mut summaries: HashMap<String, (JobSummary, bool)> = HashMap::new();
        let mut open: usize = stop_when.map_or(usize::MAX, HashSet::len);
        self.scan(
            // Half of a log is `started` lines, which never count here: skip
            // them before the parse. The pattern cannot occur inside a string
            // value (its quotes would be escaped there).
            |line| {
                if line.contains(r#""status":"started""#) {
                    Pre::Skip
                } else {
                    Pre::Parse
                }
            },
            |head: RunHead| {
                let (Event::Run, Some(job), Some(status)) = (head.event, &head.job, head.status)
                else {
                    return ControlFlow::Continue(());
                };
                if !status.is_final() {
                    return ControlFlow::Continue(());
                }
                let (summary, streak_done) = match summaries.get_mut(job.as_str()) {
                    Some(entry) => entry,
                    None => summaries.entry(job.clone()).or_default(),
                };
                if status == RunStatus::Skipped {
                    summary.skipped += 1;
                    return ControlFlow::Continue(());
                }
                summary.total_runs += 1;
                if summary.last.is_none() {
                    summary.last = Some(RunSummary {
                        run: head.run.clone(),
                        attempt: head.attempt,
                        trigger: head.trigger,
                        status,
                        scheduled: head.scheduled,
                        started: head.started,
                        ended: head.ended,
                        duration_ms: head.duration_ms,
                        exit_code: head.exit_code,
                        signal: head.signal,
                    });
                }
                match status {
                    RunStatus::Succeeded => {
                        if summary.last_success.is_none() {
                            summary.last_success = Some(head.started.unwrap_or(head.ts));
                        }
                        if !*streak_done && stop_when.is_some_and(|w| w.contains(job.as_str())) {
                            open = open.saturating_sub(1);
                        }
                        *streak_done = true;
                        if open == 0 {
                            return ControlFlow::Break(());
                        }
                    }
                    RunStatus::Failed | RunStatus::TimedOut if !*streak_done => {
                        summary.consecutive_failures += 1;
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(summaries
            .into_iter()
            .map(|(job, (summary, _))| (job, summary))
            .collect())
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;

    #[test]
    fn recent_summaries_stop_once_every_job_has_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = JsonlHistory::open(dir.path(), 1 << 30, 1).unwrap();
        let t0 = DateTime::parse_from_rfc3339("2026-11-29T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let run = |job: &str, status: RunStatus, i: i64| {
            let mut r = Record::new(Event::Run, t0 + chrono::Duration::seconds(i));
            r.job = Some(job.into());
            r.run = Some(format!("r{i}"));
            r.status = Some(status);
            r
        };
        // Old history: many runs of `a` that a bounded read never reaches.
        for i in 0..100 {
            h.append(&run("a", RunStatus::Failed, i)).unwrap();
        }
        h.append(&run("a", RunStatus::Succeeded, 100)).unwrap();
        h.append(&run("b", RunStatus::Succeeded, 101)).unwrap();
        h.append(&run("a", RunStatus::Failed, 102)).unwrap();
        let reader = JsonlReader::new(dir.path());
        let jobs: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let recent = reader.recent_summaries(&jobs).unwrap();
        assert_eq!(recent["a"].consecutive_failures, 1);
        assert_eq!(recent["a"].last.as_ref().unwrap().status, RunStatus::Failed);
        assert_eq!(recent["b"].consecutive_failures, 0);
        assert_eq!(recent["a"].total_runs, 2, "stopped at a's success");
        let all = reader.job_summaries().unwrap();
        assert_eq!(all["a"].total_runs, 102);
        assert_eq!(all["a"].consecutive_failures, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::BufWriter;

    fn ts(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("valid timestamp")
    }

    fn run(at: i64, job: &str, id: &str, status: RunStatus, trigger: Trigger) -> Record {
        let mut r = Record::new(Event::Run, ts(at));
        r.job = Some(job.to_string());
        r.run = Some(id.to_string());
        r.attempt = Some(1);
        r.status = Some(status);
        r.trigger = Some(trigger);
        r.scheduled = Some(ts(at));
        r.started = Some(ts(at));
        r
    }

    fn daemon_started(at: i64) -> Record {
        Record::new(Event::DaemonStarted, ts(at))
    }

    /// Every parseable record of every file, oldest first, the simple way.
    fn forward_read(dir: &Path) -> Vec<Record> {
        let mut paths: Vec<PathBuf> = rotated_files(dir)
            .expect("list")
            .into_iter()
            .rev()
            .map(|(_, p)| p)
            .collect();
        paths.push(log_path(dir));
        let mut records = Vec::new();
        for path in paths {
            let Ok(bytes) = fs::read(&path) else { continue };
            for line in bytes.split(|&b| b == b'\n') {
                if let Ok(r) = serde_json::from_slice::<Record>(line) {
                    records.push(r);
                }
            }
        }
        records
    }

    fn all(reader: &JsonlReader) -> Vec<Record> {
        reader.query(&Query::default()).expect("query")
    }

    fn line_of(record: &Record) -> String {
        format!("{}\n", serde_json::to_string(record).expect("serialise"))
    }

    fn mixed_records(n: i64) -> Vec<Record> {
        (0..n)
            .map(|i| match i % 5 {
                0 => daemon_started(i),
                1 => run(
                    i,
                    "backup",
                    &format!("r{i}"),
                    RunStatus::Started,
                    Trigger::Schedule,
                ),
                2 => {
                    let mut r = run(
                        i,
                        "report",
                        &format!("r{i}"),
                        RunStatus::Failed,
                        Trigger::Manual,
                    );
                    r.output = Some(format!("line {i}\nwith \"quotes\" and ünïcode"));
                    r
                }
                3 => run(
                    i,
                    "backup",
                    &format!("r{i}"),
                    RunStatus::Succeeded,
                    Trigger::Retry,
                ),
                _ => {
                    let mut r = Record::new(Event::Missed, ts(i));
                    r.job = Some("report".into());
                    r.scheduled = Some(ts(i - 1));
                    r.count = Some(2);
                    r
                }
            })
            .collect()
    }

    #[test]
    fn roundtrip_newest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(100);
        for r in &records {
            h.append(r).expect("append");
        }
        let mut expected = records.clone();
        expected.reverse();
        for chunk in [7, 64, DEFAULT_CHUNK_SIZE] {
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            assert_eq!(all(&reader), expected, "chunk {chunk}");
            assert_eq!(reader.malformed(), 0);
        }
        assert_eq!(all(&h.reader()), expected);
    }

    #[test]
    fn each_append_adds_exactly_one_whole_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let mut expected = String::new();
        for r in mixed_records(20) {
            h.append(&r).expect("append");
            expected.push_str(&line_of(&r));
            assert_eq!(
                fs::read_to_string(log_path(dir.path())).expect("read"),
                expected
            );
        }
        let mode = fs::metadata(log_path(dir.path())).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn torn_last_line_is_skipped_and_the_next_append_starts_a_new_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records = mixed_records(3);
        {
            let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
            for r in &records {
                h.append(r).expect("append");
            }
        }
        let path = log_path(dir.path());
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(b"{\"v\":1,\"ts\":\"2023-11-").expect("write");
        drop(f);

        let reader = JsonlReader::new(dir.path()).with_chunk_size(16);
        let mut expected: Vec<Record> = records.iter().rev().cloned().collect();
        assert_eq!(all(&reader), expected);
        assert_eq!(reader.malformed(), 1);

        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("reopen");
        let next = run(10, "backup", "r10", RunStatus::Succeeded, Trigger::Schedule);
        h.append(&next).expect("append");
        let text = fs::read_to_string(&path).expect("read");
        assert!(
            text.ends_with(&format!("2023-11-\n{}", line_of(&next))),
            "{text}"
        );
        expected.insert(0, next);
        assert_eq!(all(&reader), expected);
        assert_eq!(reader.malformed(), 1);
    }

    #[test]
    fn garbage_and_missing_files_are_not_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        assert_eq!(all(&JsonlReader::new(&missing)), vec![]);
        assert_eq!(all(&JsonlReader::new(dir.path())), vec![]);

        let a = run(1, "a", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let b = run(2, "a", "r2", RunStatus::Failed, Trigger::Schedule);
        let mut bytes = line_of(&a).into_bytes();
        bytes.extend_from_slice(b"not json at all\n\xff\xfe binary\n\n{\"v\":1}\n");
        bytes.extend_from_slice(line_of(&b).as_bytes());
        fs::write(log_path(dir.path()), bytes).expect("write");
        let reader = JsonlReader::new(dir.path()).with_chunk_size(5);
        assert_eq!(all(&reader), vec![b, a]);
        assert_eq!(reader.malformed(), 3);
    }

    #[test]
    fn rotation_keeps_max_files_and_queries_span_them_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records: Vec<Record> = (0..40)
            .map(|i| {
                run(
                    i,
                    "job",
                    &format!("r{i:02}"),
                    RunStatus::Succeeded,
                    Trigger::Schedule,
                )
            })
            .collect();
        let line_len = line_of(&records[0]).len() as u64;
        let max_bytes = line_len * 3 + 1;
        let mut h = JsonlHistory::open(dir.path(), max_bytes, 3).expect("open");
        for r in &records {
            h.append(r).expect("append");
        }
        let rotated: Vec<u32> = rotated_files(dir.path())
            .expect("list")
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(rotated, vec![1, 2, 3]);
        for path in [
            log_path(dir.path()),
            rotated_path(dir.path(), 1),
            rotated_path(dir.path(), 3),
        ] {
            assert!(fs::metadata(&path).expect("stat").len() <= max_bytes);
        }
        // 4 files of 3 lines, except the live one which has 40 % 3 = 1.
        let expected: Vec<Record> = records.iter().rev().take(10).cloned().collect();
        for chunk in [7, 64, 4096] {
            assert_eq!(
                all(&JsonlReader::new(dir.path()).with_chunk_size(chunk)),
                expected
            );
        }
        let mut forward = forward_read(dir.path());
        forward.reverse();
        assert_eq!(forward, expected);

        // A rotated file missing in the middle: the others still read, in order.
        fs::remove_file(rotated_path(dir.path(), 2)).expect("rm");
        let got = all(&JsonlReader::new(dir.path()).with_chunk_size(64));
        let want: Vec<Record> = expected[..4]
            .iter()
            .chain(&expected[7..])
            .cloned()
            .collect();
        assert_eq!(got, want);
        // Writing on fills the gap again through renames.
        for r in &records[..3] {
            let mut r = r.clone();
            r.ts = ts(100);
            h.append(&r).expect("append");
        }
        assert!(log_path(dir.path()).exists());
    }

    #[test]
    fn rotation_with_no_rotated_files_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = run(1, "job", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let mut h = JsonlHistory::open(dir.path(), line_of(&r).len() as u64, 0).expect("open");
        for i in 0..5 {
            let mut r = r.clone();
            r.ts = ts(i);
            h.append(&r).expect("append");
        }
        assert!(rotated_files(dir.path()).expect("list").is_empty());
        assert_eq!(all(&h.reader()).len(), 1);
    }

    #[test]
    fn lowering_max_files_removes_the_extra_rotated_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in 1..=5 {
            fs::write(rotated_path(dir.path(), n), "").expect("write");
        }
        let r = run(1, "job", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let mut h = JsonlHistory::open(dir.path(), 10, 2).expect("open");
        h.append(&r).expect("append");
        h.append(&r).expect("append");
        let rotated: Vec<u32> = rotated_files(dir.path())
            .expect("list")
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(rotated, vec![1, 2]);
    }

    fn rev_lines_of(bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        RevLines::new(bytes, bytes.len() as u64, chunk)
            .collect::<io::Result<Vec<_>>>()
            .expect("read")
    }

    #[test]
    fn rev_lines_handles_chunk_edges_and_long_lines() {
        let long = "x".repeat(300);
        let text = format!("a\n\nbb\n{long}\nccc\n{long}y");
        let want: Vec<Vec<u8>> = text
            .split('\n')
            .filter(|l| !l.is_empty())
            .rev()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        for chunk in 1..40 {
            assert_eq!(rev_lines_of(text.as_bytes(), chunk), want, "chunk {chunk}");
        }
        assert_eq!(rev_lines_of(b"", 7), Vec::<Vec<u8>>::new());
        assert_eq!(rev_lines_of(b"\n\n", 7), Vec::<Vec<u8>>::new());

        // Same through a real file.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(&path, &text).expect("write");
        let file = File::open(&path).expect("open");
        let got: Vec<Vec<u8>> = RevLines::new(file, text.len() as u64, 64)
            .collect::<io::Result<_>>()
            .expect("read");
        assert_eq!(got, want);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn rev_lines_is_a_reversed_forward_read(
            lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..150), 0..30),
            trailing in any::<bool>(),
            chunk in 1usize..100,
        ) {
            let lines: Vec<Vec<u8>> = lines
                .into_iter()
                .map(|l| l.into_iter().filter(|&b| b != b'\n').collect())
                .collect();
            let mut bytes = lines.join(&b'\n');
            if trailing {
                bytes.push(b'\n');
            }
            let want: Vec<Vec<u8>> = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .rev()
                .map(<[u8]>::to_vec)
                .collect();
            prop_assert_eq!(rev_lines_of(&bytes, chunk), want);
        }
    }

    /// Records with increasing `ts`, random jobs, events and statuses.
    fn arb_history() -> impl Strategy<Value = Vec<Record>> {
        let statuses = [
            RunStatus::Started,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Skipped,
        ];
        prop::collection::vec((0usize..4, 0usize..6, 0usize..2, 0usize..200), 0..120).prop_map(
            move |items| {
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, (job, kind, extra, out_len))| {
                        let job = ["a", "b", "c", "a\"b"][job];
                        let mut r = if kind < statuses.len() {
                            run(
                                i as i64,
                                job,
                                &format!("r{i}"),
                                statuses[kind],
                                Trigger::Schedule,
                            )
                        } else {
                            Record::new(Event::DaemonStarted, ts(i as i64))
                        };
                        if extra == 1 {
                            // Another job's name inside the output must not confuse the pre-filter.
                            r.output = Some(format!("\"job\":\"b\" {}", "o".repeat(out_len)));
                        }
                        r
                    })
                    .collect()
            },
        )
    }

    fn arb_query() -> impl Strategy<Value = Query> {
        (
            prop::option::of(prop::sample::select(vec!["a", "b", "c", "a\"b", "zz"])),
            prop::sample::subsequence(
                vec![
                    RunStatus::Started,
                    RunStatus::Succeeded,
                    RunStatus::Failed,
                    RunStatus::Skipped,
                ],
                0..3,
            ),
            prop::option::of(0i64..130),
            prop::option::of(0usize..20),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(job, statuses, since, limit, runs_only, with_missed)| Query {
                    job: job.map(str::to_string),
                    statuses,
                    since: since.map(ts),
                    limit,
                    runs_only,
                    with_missed,
                },
            )
    }

    /// The query semantics written out naively over a forward read.
    fn naive(records: &[Record], q: &Query) -> Vec<Record> {
        let mut out: Vec<Record> = records
            .iter()
            .rev()
            .filter(|r| q.job.is_none() || r.job == q.job)
            .filter(|r| {
                (q.with_missed && r.event == Event::Missed)
                    || ((q.statuses.is_empty()
                        || r.status.is_some_and(|s| q.statuses.contains(&s)))
                        && (!q.runs_only || r.event == Event::Run))
            })
            .filter(|r| q.since.is_none_or(|since| r.ts >= since))
            .cloned()
            .collect();
        if let Some(limit) = q.limit {
            out.truncate(limit);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        #[test]
        fn query_equals_a_naive_filter_of_a_forward_read(
            records in arb_history(),
            queries in prop::collection::vec(arb_query(), 1..8),
            max_bytes in prop::sample::select(vec![300u64, 2_000, u64::MAX]),
            chunk in prop::sample::select(vec![7usize, 64, 1000]),
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut h = JsonlHistory::open(dir.path(), max_bytes, 1000).expect("open");
            for r in &records {
                h.append(r).expect("append");
            }
            prop_assert_eq!(&forward_read(dir.path()), &records);
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            for q in &queries {
                prop_assert_eq!(reader.query(q).expect("query"), naive(&records, q), "{:?}", q);
            }
        }
    }

    #[test]
    fn queries_on_a_large_log_stop_early() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = BufWriter::new(File::create(log_path(dir.path())).expect("create"));
        let mut records = Vec::with_capacity(50_000);
        for i in 0..50_000 {
            let job = if i % 1000 == 0 { "rare" } else { "often" };
            let status = if i % 7 == 0 {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            let r = run(i, job, &format!("r{i}"), status, Trigger::Schedule);
            out.write_all(line_of(&r).as_bytes()).expect("write");
            records.push(r);
        }
        out.flush().expect("flush");
        drop(out);
        let reader = JsonlReader::new(dir.path()).with_chunk_size(4096);
        let queries = [
            Query {
                limit: Some(10),
                ..Query::default()
            },
            Query {
                job: Some("rare".into()),
                limit: Some(3),
                ..Query::default()
            },
            Query {
                job: Some("rare".into()),
                since: Some(ts(45_500)),
                ..Query::default()
            },
            Query {
                statuses: vec![RunStatus::Failed],
                since: Some(ts(49_900)),
                ..Query::default()
            },
        ];
        for q in &queries {
            assert_eq!(reader.query(q).expect("query"), naive(&records, q), "{q:?}");
        }
        assert_eq!(
            reader.find_run("r49000").expect("find").map(|r| r.ts),
            Some(ts(49_000))
        );
        assert_eq!(
            reader.find_run("r123").expect("find").map(|r| r.ts),
            Some(ts(123))
        );
        assert_eq!(reader.find_run("nope").expect("find"), None);
    }

    #[test]
    fn find_run_and_latest_final_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = [
            run(1, "a", "r1", RunStatus::Started, Trigger::Schedule),
            run(2, "a", "r1", RunStatus::Failed, Trigger::Schedule),
            run(3, "a", "r2", RunStatus::Started, Trigger::Manual),
            run(4, "a", "r3", RunStatus::Skipped, Trigger::Schedule),
            run(5, "b", "r4", RunStatus::Started, Trigger::Schedule),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(32);
        assert_eq!(
            reader.find_run("r1").expect("find").as_ref(),
            Some(&records[1])
        );
        assert_eq!(
            reader.find_run("r2").expect("find").as_ref(),
            Some(&records[2])
        );
        assert_eq!(reader.find_run("r9").expect("find"), None);
        assert_eq!(
            reader.latest_final_run("a").expect("latest").as_ref(),
            Some(&records[1])
        );
        assert_eq!(reader.latest_final_run("b").expect("latest"), None);
    }

    #[test]
    fn unfinished_runs_since_the_last_daemon_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 400, 5).expect("open");
        let mut retry = run(8, "c", "r3", RunStatus::Started, Trigger::Retry);
        retry.attempt = Some(2);
        let records = [
            daemon_started(0),
            run(1, "old", "r0", RunStatus::Started, Trigger::Schedule),
            daemon_started(2),
            run(3, "a", "r1", RunStatus::Started, Trigger::Schedule),
            run(4, "b", "r2", RunStatus::Started, Trigger::Schedule),
            run(5, "c", "r3", RunStatus::Started, Trigger::Schedule),
            run(6, "a", "r1", RunStatus::Succeeded, Trigger::Schedule),
            run(7, "c", "r3", RunStatus::Failed, Trigger::Schedule),
            retry.clone(),
            run(9, "d", "r4", RunStatus::Skipped, Trigger::Schedule),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(64);
        assert_eq!(
            reader.unfinished_runs().expect("scan"),
            vec![retry, records[4].clone()]
        );
        h.append(&daemon_started(10)).expect("append");
        assert_eq!(reader.unfinished_runs().expect("scan"), vec![]);
        assert_eq!(
            JsonlReader::new(&dir.path().join("none"))
                .unfinished_runs()
                .expect("scan"),
            vec![]
        );
    }

    #[test]
    fn last_occurrences_per_job() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let mut missed = Record::new(Event::Missed, ts(50));
        missed.job = Some("m".into());
        missed.scheduled = Some(ts(45));
        let mut catch_up = run(52, "c", "r7", RunStatus::Succeeded, Trigger::CatchUp);
        catch_up.scheduled = Some(ts(30));
        // `a` runs with overlap allowed: the final line of an older occurrence
        // is written after the start of a newer one.
        let mut a_old_final = run(61, "a", "r8", RunStatus::Succeeded, Trigger::Schedule);
        a_old_final.scheduled = Some(ts(40));
        let records = [
            run(10, "a", "r1", RunStatus::Succeeded, Trigger::Schedule),
            daemon_started(20),
            run(35, "z", "r2", RunStatus::Succeeded, Trigger::Schedule),
            run(40, "a", "r3", RunStatus::Started, Trigger::Schedule),
            missed,
            catch_up,
            run(60, "a", "r4", RunStatus::Started, Trigger::Schedule),
            a_old_final,
            run(70, "a", "r5", RunStatus::Failed, Trigger::Retry),
            run(71, "c", "r6", RunStatus::Succeeded, Trigger::Manual),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(50);
        let jobs: HashSet<String> = ["a", "c", "m", "never"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (latest, started) = reader.last_occurrences(&jobs).expect("scan");
        let want: HashMap<String, DateTime<Utc>> = [("a", ts(60)), ("c", ts(30)), ("m", ts(45))]
            .iter()
            .map(|(j, t)| (j.to_string(), *t))
            .collect();
        assert_eq!(latest, want);
        assert_eq!(started, Some(ts(20)));

        let (latest, started) = reader.last_occurrences(&HashSet::new()).expect("scan");
        assert!(latest.is_empty());
        assert_eq!(started, Some(ts(20)));
    }

    #[test]
    fn job_summaries_over_the_whole_history() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 500, 10).expect("open");
        let mut failed = run(7, "a", "r7", RunStatus::Failed, Trigger::Schedule);
        failed.duration_ms = Some(1500);
        failed.exit_code = Some(3);
        let records = [
            run(1, "a", "r1", RunStatus::Failed, Trigger::Schedule),
            run(2, "a", "r2", RunStatus::Succeeded, Trigger::Schedule),
            run(3, "a", "r3", RunStatus::TimedOut, Trigger::Schedule),
            run(4, "a", "r4", RunStatus::Killed, Trigger::Manual),
            run(5, "a", "r5", RunStatus::Skipped, Trigger::Schedule),
            run(6, "a", "r6", RunStatus::Started, Trigger::Schedule),
            failed,
            run(8, "b", "r8", RunStatus::Succeeded, Trigger::Schedule),
            daemon_started(9),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let summaries = h
            .reader()
            .with_chunk_size(100)
            .job_summaries()
            .expect("scan");
        assert_eq!(summaries.len(), 2);
        let a = &summaries["a"];
        assert_eq!(a.total_runs, 5);
        assert_eq!(a.skipped, 1);
        assert_eq!(a.consecutive_failures, 2);
        assert_eq!(a.last_success, Some(ts(2)));
        let last = a.last.as_ref().expect("last");
        assert_eq!(
            (last.status, last.duration_ms, last.exit_code),
            (RunStatus::Failed, Some(1500), Some(3))
        );
        assert_eq!(last.run.as_deref(), Some("r7"));
        let b = &summaries["b"];
        assert_eq!((b.total_runs, b.consecutive_failures), (1, 0));
    }

    #[test]
    fn job_summaries_skip_started_lines_but_not_outputs_that_mention_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 1 << 20, 2).expect("open");
        let mut sneaky = run(2, "a", "r2", RunStatus::Failed, Trigger::Schedule);
        sneaky.output = Some(r#"{"status":"started"}"#.into());
        for r in [
            run(1, "a", "r2", RunStatus::Started, Trigger::Schedule),
            sneaky,
            run(3, "b", "r3", RunStatus::Started, Trigger::Schedule),
        ] {
            h.append(&r).expect("append");
        }
        let summaries = h.reader().job_summaries().expect("scan");
        let a = &summaries["a"];
        assert_eq!((a.total_runs, a.consecutive_failures), (1, 1));
        assert_eq!(a.last.as_ref().map(|l| l.status), Some(RunStatus::Failed));
        assert!(
            !summaries.contains_key("b"),
            "a run in progress is no result"
        );
    }

    #[test]
    fn write_errors_keep_records_in_the_backlog_until_writing_works() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(6);
        h.append(&records[0]).expect("append");

        // Disk full: the path now leads to /dev/full.
        let aside = dir.path().join("aside");
        fs::rename(&path, &aside).expect("rename");
        std::os::unix::fs::symlink("/dev/full", &path).expect("symlink");
        let err = h.append(&records[1]).expect_err("disk full");
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("history.jsonl"), "{err}");
        assert!(h.append(&records[2]).is_err());
        assert_eq!(h.backlog_len(), 2);
        assert!(h.last_error().expect("error").message.contains("No space"));

        // Something in the way that cannot be opened at all.
        fs::remove_file(&path).expect("rm");
        fs::create_dir(&path).expect("mkdir");
        assert!(h.append(&records[3]).is_err());
        assert!(h.flush_backlog().is_err());
        assert_eq!(h.backlog_len(), 3);

        // The file is back: everything is written, in order.
        fs::remove_dir(&path).expect("rmdir");
        fs::rename(&aside, &path).expect("rename back");
        h.flush_backlog().expect("flush");
        assert_eq!(h.backlog_len(), 0);
        h.append(&records[4]).expect("append");
        let want: Vec<Record> = records[..5].iter().rev().cloned().collect();
        assert_eq!(all(&h.reader()), want);
        assert_eq!(h.dropped(), 0);
        assert!(h.last_error().is_some(), "kept for rea status");
    }

    #[test]
    fn a_full_backlog_drops_the_oldest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        h.set_backlog_limits(3, usize::MAX);
        fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink("/dev/full", &path).expect("symlink");
        let records = mixed_records(5);
        for r in &records {
            assert!(h.append(r).is_err());
        }
        assert_eq!((h.backlog_len(), h.dropped()), (3, 2));
        fs::remove_file(&path).expect("rm");
        h.flush_backlog().expect("flush");
        let want: Vec<Record> = records[2..].iter().rev().cloned().collect();
        assert_eq!(all(&h.reader()), want);

        // The byte bound keeps at least the newest record.
        h.set_backlog_limits(100, 1);
        fs::remove_file(&path).expect("rm");
        fs::create_dir(&path).expect("mkdir");
        assert!(h.append(&records[0]).is_err());
        assert!(h.append(&records[1]).is_err());
        assert_eq!((h.backlog_len(), h.dropped()), (1, 3));
    }

    #[test]
    fn a_deleted_file_is_recreated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(3);
        h.append(&records[0]).expect("append");
        fs::remove_file(&path).expect("rm");
        h.append(&records[1]).expect("append");
        // Replaced by another file (an external logrotate's `create`).
        fs::rename(&path, dir.path().join("history.jsonl-old")).expect("mv");
        fs::write(&path, "").expect("create");
        h.append(&records[2]).expect("append");
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            line_of(&records[2])
        );
    }

    #[test]
    fn open_reports_an_unusable_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(log_path(dir.path())).expect("mkdir");
        let err = JsonlHistory::open(dir.path(), u64::MAX, 3)
            .err()
            .expect("error");
        assert!(err.to_string().contains("history.jsonl"), "{err}");
    }

    #[test]
    fn fast_ts_reads_what_the_writer_writes() {
        let r = run(5, "a", "r1", RunStatus::Started, Trigger::Schedule);
        assert_eq!(fast_ts(&line_of(&r)), Some(ts(5)));
        assert_eq!(fast_ts("{\"ts\":\"2023-01-01T00:00:00Z\"}"), None);
        assert_eq!(fast_ts("garbage"), None);
        assert_eq!(fast_ts(""), None);
    }
}
