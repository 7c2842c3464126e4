//! Per-file indexes of rotated history files, and the chunked search for
//! one job's lines.
//!
//! A rotated file is never written again, so when it is rotated the daemon
//! writes, on a thread of its own, an index of it: for each job, where its
//! lines are by status (run lines) or event (other lines naming the job),
//! as spans of whole lines (lines of one job and status closer than
//! [`GAP`] share a span). A query for one job skips the rotated files
//! without it and reads only the spans of what it asks for. An index is
//! named by the file's inode, not by its name (rotation renames), and
//! records the file's length and modification time: an index that does
//! not match them is ignored (an inode can be reused once a file is
//! deleted), and so is one that is missing, cut short or written by
//! someone other than the file's owner — the file is then read whole, as
//! before.
//!
//! The index is text: a header line, `#rea-history-index 2 LEN MTIME_S
//! MTIME_NS BODY` (the format, the file's length and modification time,
//! and the length of what follows, so an index cut short is never taken
//! for one without the job), then one line per job sorted by the job's
//! JSON-quoted name, `"job"\tstatus=START+LEN,START+LEN event=START+LEN`.
//! A query finds its job's line by bisection (`sorted`), a few `pread`s:
//! at 100,000 jobs an index is megabytes, and the first format (one JSON
//! object, still read) had every query for a job parse every rotated
//! file's index whole, some 120 ms a file. When the writer opens a log, it
//! rewrites in the background the index of every rotated file whose index
//! is missing, stale or of the first format.
//!
//! The live file is never indexed (it is still being written). For it, and
//! for the spans left to read, [`rev_lines_containing`] searches whole
//! chunks for the job's quoted name, so the lines of other jobs are never
//! cut out, copied or checked.
//!
//! What does not live here: the queries' own filters (`jsonl_reader`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rea_core::record::{Event, RunStatus};
use serde::Deserialize;

use super::jsonl_writer::rotated_files;
use super::sorted;
use super::ReadAt;

/// The first word of an index's header, and the format it names.
const MAGIC: &str = "#rea-history-index";
const VERSION: u32 = 2;

/// A job's lines of one status (or event) closer than this share a span
/// of the index: a busy job's lines are a few spans, not thousands, and a
/// query reads at most this much of other jobs' lines between two of its
/// own (a chunk of the backwards reader).
const GAP: u64 = 64 << 10;

/// Byte ranges of a file, each from a line's start to a line's end.
type Spans = Vec<(u64, u64)>;

/// Where the index of the file with inode `ino` lives.
fn index_path(dir: &Path, ino: u64) -> PathBuf {
    dir.join(format!("history.idx.{ino}"))
}

/// The first format: one JSON object, for each job the byte range of its
/// lines by status or event, plus `"*"`: all of them. Still read (a log
/// indexed before is re-indexed when the writer next opens it).
#[derive(Deserialize)]
struct JsonIndex {
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
    let mut jobs: HashMap<String, BTreeMap<&'static str, Spans>> = HashMap::new();
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
        let spans = jobs.entry(job).or_default().entry(key).or_default();
        match spans.last_mut() {
            Some(last) if start <= last.1 + GAP => last.1 = end,
            _ => spans.push((start, end)),
        }
    }
    let mut sorted_jobs: Vec<(Vec<u8>, BTreeMap<&str, Spans>)> = jobs
        .into_iter()
        .map(|(job, keys)| Ok((serde_json::to_vec(&job)?, keys)))
        .collect::<Result<_, serde_json::Error>>()
        .map_err(io::Error::other)?;
    sorted_jobs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut body = Vec::new();
    for (job, keys) in &sorted_jobs {
        body.extend_from_slice(job);
        body.push(b'\t');
        for (i, (key, spans)) in keys.iter().enumerate() {
            if i > 0 {
                body.push(b' ');
            }
            let _ = write!(body, "{key}=");
            for (j, (start, end)) in spans.iter().enumerate() {
                if j > 0 {
                    body.push(b',');
                }
                let _ = write!(body, "{start}+{}", end - start);
            }
        }
        body.push(b'\n');
    }
    let header = format!(
        "{MAGIC} {VERSION} {} {} {} {}\n",
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        body.len()
    );
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
        out.write_all(header.as_bytes())?;
        out.write_all(&body)?;
        // On disk before its name: after a crash an index is whole or
        // absent (and its header's length catches the rest).
        out.sync_all()?;
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
    in_background(dir, move |dir| {
        let _ = index_file(dir, &path);
    });
}

/// Indexes, on a thread of its own, each rotated file in `dir` of rea's
/// user that has no index a query can use (missing, stale, cut short, or
/// of the first format), then removes the indexes of files that are gone:
/// what the writer does when it opens a log.
pub(crate) fn reindex_in_background(dir: &Path) {
    in_background(dir, reindex);
}

/// Indexes each rotated file in `dir` of rea's user that has no index a
/// query can use.
pub(crate) fn reindex(dir: &Path) {
    let me = rustix::process::geteuid().as_raw();
    for (_, path) in rotated_files(dir).unwrap_or_default() {
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_file() && meta.uid() == me && !indexed(dir, &meta) {
            let _ = index_file(dir, &path);
        }
    }
}

/// Runs `work` in `dir` on a thread of its own, one such thread at a time,
/// then removes the indexes of files that are gone.
fn in_background(dir: &Path, work: impl FnOnce(&Path) + Send + 'static) {
    let dir = dir.to_path_buf();
    // If no thread can be created the files stay unindexed: queries are
    // slower, never wrong.
    let _ = std::thread::Builder::new()
        .name("rea-index".into())
        .spawn(move || {
            // One thread at a time: a cleanup running beside the next
            // rotation's thread would take the index that thread just
            // wrote for a file it did not see yet as stale.
            static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
            let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            work(&dir);
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

/// The index of `file` (its metadata) in `dir`, opened, if it is a file of
/// the file's owner, with its length.
fn open_index(dir: &Path, file: &fs::Metadata) -> Option<(File, u64)> {
    let index = crate::files::open_read(&index_path(dir, file.ino())).ok()?;
    let meta = index.metadata().ok()?;
    (meta.is_file() && meta.uid() == file.uid()).then_some((index, meta.len()))
}

/// Where the body of an index of the current format begins, if its header
/// says it describes `file` whole: the file's length and modification
/// time, and the index's own length (an index cut short never says a job
/// is not in the file).
fn body_start(index: &File, index_len: u64, file: &fs::Metadata) -> Option<u64> {
    let (head, body) = sorted::line_at(index, 0, index_len).ok()?;
    let text = std::str::from_utf8(&head).ok()?;
    let fields: Vec<&str> = text.split(' ').collect();
    let [magic, version, len, secs, nanos, body_len] = fields[..] else {
        return None;
    };
    let matches = magic == MAGIC
        && version.parse::<u32>().ok()? == VERSION
        && len.parse::<u64>().ok()? == file.len()
        && (secs.parse::<i64>().ok()?, nanos.parse::<i64>().ok()?)
            == (file.mtime(), file.mtime_nsec())
        && index_len.checked_sub(body) == Some(body_len.parse::<u64>().ok()?);
    matches.then_some(body)
}

/// Whether `file` (its metadata) has an index of the current format that
/// describes it.
fn indexed(dir: &Path, file: &fs::Metadata) -> bool {
    open_index(dir, file).is_some_and(|(index, len)| body_start(&index, len, file).is_some())
}

/// The parts of a rotated file (`file` is its metadata) a query for `job`
/// with `keys` (statuses or events; empty = any) must read, in order and
/// apart: none to skip the file, the whole file when it has no index a
/// query can use (missing, of another file, cut short, or written by
/// someone other than the file's owner).
pub(crate) fn narrow(dir: &Path, file: &fs::Metadata, job: &str, keys: &[&str]) -> Spans {
    let len = file.len();
    let Some(spans) = open_index(dir, file).and_then(|(index, index_len)| {
        let mut first = [0u8; 1];
        match index.read_at(&mut first, 0) {
            Ok(1) if first[0] == b'{' => from_json(index, file, job, keys),
            _ => from_sorted(&index, index_len, file, job, keys),
        }
    }) else {
        return vec![(0, len)];
    };
    spans
        .into_iter()
        .map(|(start, end)| (start.min(len), end.min(len)))
        .filter(|(start, end)| start < end)
        .collect()
}

/// The spans of `job`'s lines with one of `keys` (empty = any) in an index
/// of the current format, merged; `None` if the index does not describe
/// `file` or does not read.
fn from_sorted(
    index: &File,
    index_len: u64,
    file: &fs::Metadata,
    job: &str,
    keys: &[&str],
) -> Option<Spans> {
    body_start(index, index_len, file)?;
    let want = serde_json::to_vec(job).ok()?;
    let Some(rest) = sorted::bisect(index, index_len, &want).ok()? else {
        return Some(Vec::new());
    };
    let mut spans = Vec::new();
    for part in std::str::from_utf8(&rest).ok()?.split(' ') {
        let (key, list) = part.split_once('=')?;
        let wanted = keys.is_empty() || keys.contains(&key);
        for span in list.split(',') {
            let (start, n) = span.split_once('+')?;
            let start = start.parse::<u64>().ok()?;
            let end = start.checked_add(n.parse::<u64>().ok()?)?;
            if wanted {
                spans.push((start, end));
            }
        }
    }
    spans.sort_unstable();
    let mut merged: Spans = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    Some(merged)
}

/// The range of `job`'s lines with one of `keys` (empty = any) in an index
/// of the first format (read whole); `None` if it does not describe `file`
/// or does not parse.
fn from_json(index: File, file: &fs::Metadata, job: &str, keys: &[&str]) -> Option<Spans> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(index, 64 << 20), &mut bytes).ok()?;
    let index = serde_json::from_slice::<JsonIndex>(&bytes)
        .ok()
        .filter(|i| i.len == file.len() && i.mtime == (file.mtime(), file.mtime_nsec()))?;
    let Some(ranges) = index.jobs.get(job) else {
        return Some(Vec::new());
    };
    let wanted: Vec<&(u64, u64)> = if keys.is_empty() {
        ranges.get("*").into_iter().collect()
    } else {
        keys.iter().filter_map(|k| ranges.get(*k)).collect()
    };
    let start = wanted.iter().map(|r| r.0).min();
    let end = wanted.iter().map(|r| r.1).max();
    Some(start.zip(end).into_iter().collect())
}

/// The lines of the first `len` bytes of `src` that contain `needle`, last
/// first, given to `f` until it breaks. Like [`super::RevLines`], but each
/// chunk is searched whole; only lines with a match are cut out. The
/// needle holds no newline (a JSON string as rea writes it).
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
    // No bigger than the source: a query reads many small spans.
    let chunk = chunk.min(usize::try_from(len).unwrap_or(usize::MAX)).max(1);
    // Forwards within a chunk, then its matches last first: the forward
    // search has a vectorised prefilter, the reverse one none (about three
    // times slower on a log).
    let finder = memchr::memmem::Finder::new(needle);
    let mut matches: Vec<usize> = Vec::new();
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
        matches.clear();
        matches.extend(finder.find_iter(&region));
        for &m in matches.iter().rev() {
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
