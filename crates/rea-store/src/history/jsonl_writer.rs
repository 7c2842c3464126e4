//! The embedded history writer: `history.jsonl` in the state directory,
//! one line per record, rotated by size, with a bounded backlog when the
//! disk refuses writes.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chrono::Utc;
use rea_core::record::{Record, MAX_LINE_BYTES};

use super::{
    log_path, rotated_path, HistoryWriter, JsonlReader, WriteFailure, WriterHealth,
    BACKLOG_MAX_BYTES, BACKLOG_MAX_RECORDS,
};

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
    /// The daily roll-up beside the log (`days/`); `None` if it could not
    /// be opened (then `last_error` says why and the heatmap is empty).
    rollup: Option<super::days::Rollup>,
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
            rollup: None,
        };
        history
            .ensure_open()
            .map_err(|e| history.contextualise(e))?;
        // Rotated files without an index a query can use (one of the
        // first format, a rotation's thread cut short by a stop) get one,
        // off this thread.
        super::index::reindex_in_background(state_dir);
        match super::days::Rollup::open(state_dir) {
            Ok(rollup) => history.rollup = Some(rollup),
            Err(e) => history.note_error(format!(
                "cannot open the daily roll-up in {}: {e}",
                state_dir.join(super::DAYS_DIR).display()
            )),
        }
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
        let file = crate::files::open_owned(
            &self.path,
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                // Job output can hold secrets; the socket is 0600 for the same reason.
                .mode(0o600),
        )?;
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
        ignore_not_found(fs::rename(&self.path, rotated_path(&self.dir, 1)))?;
        // The file just rotated is never written again: it gets its index
        // (see `index`), off this thread.
        super::index::index_in_background(&self.dir, rotated_path(&self.dir, 1));
        Ok(())
    }
}

impl HistoryWriter for JsonlHistory {
    /// Queues the record behind any backlog and writes everything it can.
    /// On error the record stays queued (see `backlog_len`) and the error,
    /// naming the file, is returned; nothing panics.
    fn append(&mut self, record: &Record) -> io::Result<()> {
        let mut line = encode(record)?;
        line.push(b'\n');
        self.push_backlog(line);
        if let Some(rollup) = &mut self.rollup {
            if let Err(e) = rollup.add(record) {
                let message = format!(
                    "cannot write the daily roll-up in {}: {e}",
                    self.dir.join(super::DAYS_DIR).display()
                );
                self.note_error(message);
            }
        }
        self.flush_backlog()
    }

    fn set_rotation(&mut self, max_bytes: u64, max_files: u32) {
        JsonlHistory::set_rotation(self, max_bytes, max_files);
    }

    fn health(&self) -> WriterHealth {
        WriterHealth {
            backlog: self.backlog_len(),
            dropped: self.dropped(),
            last_error: self.last_error().cloned(),
        }
    }
}

/// One record as a line, within `MAX_LINE_BYTES` (what readers hold): an
/// output that escapes to more (control bytes become six characters each)
/// is cut until the line fits, and says so.
fn encode(record: &Record) -> io::Result<Vec<u8>> {
    let line = serde_json::to_vec(record).map_err(io::Error::other)?;
    if line.len() < MAX_LINE_BYTES {
        return Ok(line);
    }
    let mut cut = record.clone();
    let output = cut.output.take().unwrap_or_default();
    let mut keep = output.len();
    loop {
        keep /= 2;
        while !output.is_char_boundary(keep) {
            keep -= 1;
        }
        cut.output = Some(format!(
            "{}\n… {} bytes of output not kept: the history line would be too long …\n",
            &output[..keep],
            output.len() - keep
        ));
        let line = serde_json::to_vec(&cut).map_err(io::Error::other)?;
        if line.len() < MAX_LINE_BYTES || keep == 0 {
            return Ok(line);
        }
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
pub(crate) fn rotated_files(dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
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
