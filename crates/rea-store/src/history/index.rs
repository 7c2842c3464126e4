//! Per-file indexes of rotated history files, and the chunked search for
//! one job's lines.
//!
//! A rotated file is never written again, so when it is rotated the daemon
//! writes, on a thread of its own, an index of it: for each job, the byte
//! range of its lines by status (run lines) or event (other lines naming
//! the job). A query for one job skips the rotated files without it and
//! reads only the range that holds its matching lines. An index is named
//! by the file's inode, not by its name (rotation renames), and records the
//! file's length and modification time: an index that does not match them
//! is ignored (an inode can be reused once a file is deleted), and so is
//! one that is missing — the file is then read whole, as before.
//!
//! The live file is never indexed (it is still being written). For it, and
//! for the ranges left to read, [`rev_lines_containing`] searches whole
//! chunks for the job's quoted name, so the lines of other jobs are never
//! cut out, copied or checked.
//!
//! What does not live here: the queries' own filters (`jsonl_reader`).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rea_core::record::{Event, RunStatus};
use serde::{Deserialize, Serialize};

use super::jsonl_writer::rotated_files;
use super::ReadAt;

/// Where the index of the file with inode `ino` lives.
fn index_path(dir: &Path, ino: u64) -> PathBuf {
    dir.join(format!("history.idx.{ino}"))
}

/// For each job in a rotated file, the byte range of its lines by status
/// (run lines) or event (other lines naming the job), plus `"*"`: all of
/// them.
#[derive(Debug, Default, Serialize, Deserialize)]
struct FileIndex {
    /// The file indexed: its length and modification time.
    len: u64,
    mtime: (i64, i64),
    jobs: HashMap<String, HashMap<String, (u64, u64)>>,
}

/// The fields an index needs from a line.
#[derive(Deserialize)]
struct IndexHead {
    event: Event,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    status: Option<RunStatus>,
}

/// Writes the index of a rotated (no longer written) history file in the
/// state directory `dir`.
pub fn index_file(dir: &Path, path: &Path) -> io::Result<()> {
    let file = crate::files::open_read(path)?;
    let meta = file.metadata()?;
    let mut index = FileIndex {
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ..FileIndex::default()
    };
    let mut reader = io::BufReader::with_capacity(1 << 20, io::Read::take(file, meta.len()));
    let mut line = Vec::new();
    let mut at = 0u64;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let (start, end) = (at, at + n as u64);
        at = end;
        let Ok(head) = serde_json::from_slice::<IndexHead>(&line) else {
            continue;
        };
        let Some(job) = head.job else {
            continue;
        };
        let key = match head.status {
            Some(status) if head.event == Event::Run => status.as_str(),
            _ => head.event.as_str(),
        };
        let entry = index.jobs.entry(job).or_default();
        for k in [key, "*"] {
            let r = entry.entry(k.to_string()).or_insert((start, end));
            r.0 = r.0.min(start);
            r.1 = r.1.max(end);
        }
    }
    // A name of its own per writer: the same file may be indexed twice at
    // once (a rotation's thread and a command), and a shared temporary name
    // would let one rename the other's file away.
    static WRITERS: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".history.idx.{}.{}.{}.tmp",
        meta.ino(),
        std::process::id(),
        WRITERS.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        // `create_new` never follows or reuses what is at the name.
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        out.write_all(&serde_json::to_vec(&index).map_err(io::Error::other)?)?;
        fs::rename(&tmp, index_path(dir, meta.ino()))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Indexes the file rotated to `path` on a thread of its own (the caller
/// is the daemon's loop), then removes the indexes of files that are gone.
/// Until the index is written, readers read the file whole.
pub(crate) fn index_in_background(dir: &Path, path: PathBuf) {
    let dir = dir.to_path_buf();
    // If no thread can be created the file stays unindexed: queries are
    // slower, never wrong.
    let _ = std::thread::Builder::new()
        .name("rea-index".into())
        .spawn(move || {
            // One rotation's thread at a time: a cleanup running beside
            // the next rotation's thread would take the index that thread
            // just wrote for a file it did not see yet as stale.
            static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
            let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            let _ = index_file(&dir, &path);
            remove_stale_indexes(&dir);
        });
}

/// Removes the indexes whose file is gone (rotated off the end).
fn remove_stale_indexes(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    // The indexes are listed before the files: an index is written after
    // its file exists, so a file rotated in meanwhile is either in the
    // live set below or its index is not in this list.
    let indexes: Vec<(u64, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let ino = entry
                .file_name()
                .to_str()?
                .strip_prefix("history.idx.")?
                .parse::<u64>()
                .ok()?;
            Some((ino, entry.path()))
        })
        .collect();
    let live: HashSet<u64> = rotated_files(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, p)| fs::symlink_metadata(p).ok().map(|m| m.ino()))
        .collect();
    for (ino, path) in indexes {
        if !live.contains(&ino) {
            let _ = fs::remove_file(path);
        }
    }
}

/// The part of a rotated file (`file` is its metadata) a query for `job`
/// with `keys` (statuses or events; empty = any) must read: `None` to skip
/// the file, the whole file when it has no valid index (missing, of
/// another file, or written by someone other than the file's owner).
pub(crate) fn narrow(
    dir: &Path,
    file: &fs::Metadata,
    job: &str,
    keys: &[&str],
) -> Option<(u64, u64)> {
    let len = file.len();
    let read = || -> Option<FileIndex> {
        let index = crate::files::open_read(&index_path(dir, file.ino())).ok()?;
        let meta = index.metadata().ok()?;
        if !meta.is_file() || meta.uid() != file.uid() {
            return None;
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(index, 64 << 20), &mut bytes).ok()?;
        serde_json::from_slice::<FileIndex>(&bytes)
            .ok()
            .filter(|i| i.len == len && i.mtime == (file.mtime(), file.mtime_nsec()))
    };
    let Some(index) = read() else {
        return Some((0, len));
    };
    let ranges = index.jobs.get(job)?;
    let wanted: Vec<&(u64, u64)> = if keys.is_empty() {
        ranges.get("*").into_iter().collect()
    } else {
        keys.iter().filter_map(|k| ranges.get(*k)).collect()
    };
    let start = wanted.iter().map(|r| r.0).min()?;
    let end = wanted.iter().map(|r| r.1).max()?;
    Some((start.min(len), end.min(len)))
}

/// The lines of the first `len` bytes of `src` that contain `needle`, last
/// first, given to `f` until it breaks. Like [`super::RevLines`], but each
/// chunk is searched whole; only lines with a match are cut out.
///
/// A line longer than `max_line` is skipped without being held (no record
/// is that long): a crash can leave the end of a file as a long run of NUL
/// bytes without a newline (delayed allocation), and holding it, or
/// copying it again for every chunk, took minutes and the run's size in
/// memory. The part of a line not yet complete is kept as pieces, so a long
/// line costs one copy, not one per chunk.
pub(crate) fn rev_lines_containing<R: ReadAt>(
    src: R,
    len: u64,
    chunk: usize,
    max_line: usize,
    needle: &[u8],
    mut f: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> io::Result<()> {
    let chunk = chunk.max(1);
    let finder = memchr::memmem::FinderRev::new(needle);
    let mut buf = vec![0u8; chunk];
    // The end of a line whose beginning is in a chunk not read yet, as the
    // chunks' pieces, the latest read first.
    let mut tail: Vec<Vec<u8>> = Vec::new();
    let mut tail_len = 0usize;
    // The line being read grew past `max_line`: its pieces were dropped.
    let mut overlong = false;
    let mut pos = len;
    while pos > 0 {
        let n = pos.min(chunk as u64) as usize;
        let offset = pos - n as u64;
        src.read_exact_at(&mut buf[..n], offset)?;
        pos = offset;
        // Bytes before the chunk's first newline end a line that started
        // earlier (unless this is the start of the source).
        let split = match memchr::memchr(b'\n', &buf[..n]) {
            _ if pos == 0 => 0,
            Some(k) => k + 1,
            None => {
                tail_len += n;
                if overlong || tail_len > max_line {
                    overlong = true;
                    tail = Vec::new();
                } else {
                    tail.push(buf[..n].to_vec());
                }
                continue;
            }
        };
        let mut region = Vec::new();
        if overlong {
            // The chunk's last line is the start of the overlong one: only
            // the complete lines before it are searched.
            let last = memchr::memrchr(b'\n', &buf[split..n]).map_or(split, |i| split + i + 1);
            region.extend_from_slice(&buf[split..last]);
        } else {
            region.reserve(n - split + tail_len);
            region.extend_from_slice(&buf[split..n]);
            for piece in tail.iter().rev() {
                region.extend_from_slice(piece);
            }
        }
        let mut done_from = region.len();
        for m in finder.rfind_iter(&region) {
            if m >= done_from {
                continue;
            }
            let start = memchr::memrchr(b'\n', &region[..m]).map_or(0, |i| i + 1);
            let end = memchr::memchr(b'\n', &region[m..]).map_or(region.len(), |i| m + i);
            done_from = start;
            if end - start <= max_line && f(&region[start..end]).is_break() {
                return Ok(());
            }
        }
        tail = Vec::new();
        tail_len = 0;
        overlong = false;
        if split > 0 {
            tail.push(buf[..split - 1].to_vec());
            tail_len = split - 1;
            overlong = tail_len > max_line;
        }
    }
    Ok(())
}

/// A file seen from `start` on, for reading a range of it backwards.
pub(crate) struct Window<'f> {
    pub(crate) file: &'f File,
    pub(crate) start: u64,
}

impl ReadAt for Window<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self.file, buf, self.start + offset)
    }
}
