//! The one-shot journal: what makes submitted one-shots durable. The daemon
//! sees the [`OneShotJournal`] trait; [`Journal`] is the embedded backend.
//!
//! The journal file is `<state-dir>/oneshots.jsonl`: one JSON line per change
//! (`add` with the whole job, `del` with its id). A submission is
//! acknowledged only after its line is written *and* `fdatasync`ed; lines of
//! submissions that arrive together are written with one `write` and one
//! sync (group commit), which is what makes tens of thousands of durable
//! submissions per second possible. A `del` (ran, cancelled, expired) is
//! written at once but not synced on its own: nobody waits for it, it
//! survives a crash of the daemon as soon as it is written, and the next
//! sync (of a submission, or the kernel's writeback) makes it survive a
//! power loss too. Until then a power loss can run a finished one-shot
//! again, which at-least-once delivery allows; syncing every completion
//! would cap one-shots at one run per `fdatasync`. When deleted lines outnumber the live
//! ones the journal is compacted (the pending set written to a new file,
//! synced, renamed over), so start-up replays O(pending), not O(everything
//! ever submitted). A torn last line (kill -9 mid-write) was never
//! acknowledged and is ignored.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rea_core::oneshot::OneShot;
use serde::{Deserialize, Serialize};

/// What the daemon needs to keep pending one-shots across restarts.
/// Changes are queued (`add`, `del`) and made durable together by
/// `commit`, so many submissions share one sync (group commit).
pub trait OneShotJournal: Send {
    /// Queues a new one-shot; durable after `commit`.
    fn add(&mut self, shot: &OneShot);
    /// Queues the end of a one-shot (ran, cancelled, expired).
    fn del(&mut self, id: &str);
    /// Drops what is queued and not committed (its submissions are refused).
    fn discard(&mut self);
    /// Whether changes wait for `commit`.
    fn dirty(&self) -> bool;
    /// Makes the queued changes durable. On error nothing queued may be
    /// acknowledged.
    fn commit(&mut self) -> io::Result<()>;
    /// Whether it is time to rewrite the journal with only what is pending.
    fn should_compact(&self, pending: usize) -> bool;
    /// Rewrites the journal with only `pending` in it.
    fn compact(&mut self, pending: &mut dyn Iterator<Item = &OneShot>) -> io::Result<()>;
}

/// One journal line, as written.
/// It borrows what it writes: a submission is serialised, not cloned.
#[derive(Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Line<'a> {
    Add { job: &'a OneShot },
    Del { id: &'a str },
}

/// A journal line as read back: a plain struct, which serde parses in one
/// pass (the internally tagged `Line` is buffered into an intermediate tree
/// first, which made replaying a million lines take seconds).
#[derive(Deserialize)]
struct RawLine {
    op: Op,
    #[serde(default)]
    job: Option<OneShot>,
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    Add,
    Del,
}

/// Journal file name in a state directory.
pub fn journal_path(state_dir: &Path) -> PathBuf {
    state_dir.join("oneshots.jsonl")
}

/// The durable set of pending one-shots.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Lines in the file (for the compaction decision).
    lines: u64,
    /// Encoded lines not yet written.
    buffer: Vec<u8>,
    buffered: u64,
    /// The buffer holds an `add`, which must be synced before it is
    /// acknowledged.
    must_sync: bool,
}

/// What replay found.
pub struct Replayed {
    pub journal: Journal,
    pub pending: Vec<OneShot>,
    /// Lines that did not parse (a torn last line).
    pub malformed: u64,
}

/// The shared copy of `value` in `seen`, adding it if new.
fn intern<T: ?Sized + Eq + std::hash::Hash>(seen: &mut HashSet<Arc<T>>, value: &Arc<T>) -> Arc<T> {
    if let Some(known) = seen.get(value) {
        return known.clone();
    }
    seen.insert(value.clone());
    value.clone()
}

impl Journal {
    /// Opens (creating) the journal and replays it into the pending set.
    pub fn open(state_dir: &Path) -> io::Result<Replayed> {
        let path = journal_path(state_dir);
        // Every `add` in file order, and the line of each id's last `del`:
        // an add is pending unless a del of its id follows it. No map keyed
        // by every id is built (a million pending would cost a String clone
        // and a map entry each), only one of the deleted ids.
        let mut adds: Vec<(u64, OneShot)> = Vec::new();
        let mut dels: HashMap<String, u64> = HashMap::new();
        let mut lines = 0u64;
        let mut malformed = 0u64;
        // Replayed one-shots that repeat a command or a directory share it.
        let mut argvs: HashSet<Arc<[String]>> = HashSet::new();
        let mut dirs: HashSet<Arc<Path>> = HashSet::new();
        let mut ends_clean = true;
        match crate::files::open_owned(&path, OpenOptions::new().read(true)) {
            Ok(f) => {
                let mut reader = BufReader::with_capacity(1 << 20, f);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    if reader.read_until(b'\n', &mut buf)? == 0 {
                        break;
                    }
                    ends_clean = buf.last() == Some(&b'\n');
                    lines += 1;
                    match serde_json::from_slice::<RawLine>(&buf) {
                        Ok(RawLine {
                            op: Op::Add,
                            job: Some(mut job),
                            ..
                        }) => {
                            job.argv = intern(&mut argvs, &job.argv);
                            job.dir = intern(&mut dirs, &job.dir);
                            adds.push((lines, job))
                        }
                        Ok(RawLine {
                            op: Op::Del,
                            id: Some(id),
                            ..
                        }) => {
                            dels.insert(id, lines);
                        }
                        _ => malformed += 1,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        adds.retain(|(line, job)| dels.get(&*job.id).is_none_or(|del| del < line));
        drop(dels);
        // Two live adds of one id (never written by rea, which refuses a
        // duplicate while one is pending): the later one wins, in the
        // earlier one's place.
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(adds.len());
        let mut later: Vec<(usize, usize)> = Vec::new();
        for (k, (_, job)) in adds.iter().enumerate() {
            if let Some(&at) = first.get(&*job.id) {
                later.push((at, k));
            } else {
                first.insert(&*job.id, k);
            }
        }
        drop(first);
        let mut pending: Vec<Option<OneShot>> = adds.into_iter().map(|(_, j)| Some(j)).collect();
        for (at, k) in later {
            pending[at] = pending[k].take();
        }
        let pending: Vec<OneShot> = pending.into_iter().flatten().collect();
        let mut file = crate::files::open_owned(
            &path,
            OpenOptions::new().create(true).append(true).mode(0o600),
        )?;
        if !ends_clean {
            // The torn fragment must not glue itself to the next line.
            file.write_all(b"\n")?;
        }
        let mut journal = Journal {
            path,
            file,
            lines,
            buffer: Vec::new(),
            buffered: 0,
            must_sync: false,
        };
        if journal.should_compact(pending.len()) {
            journal.compact_replayed(&pending)?;
        }
        Ok(Replayed {
            journal,
            pending,
            malformed,
        })
    }

    /// Queues an `add` line; durable after `commit`.
    pub fn add(&mut self, job: &OneShot) {
        self.push(&Line::Add { job });
        self.must_sync = true;
    }

    /// Queues a `del` line (ran, cancelled, expired); written by `commit`,
    /// synced by the next commit that carries an `add` (module docs).
    pub fn del(&mut self, id: &str) {
        self.push(&Line::Del { id });
    }

    fn push(&mut self, line: &Line) {
        if serde_json::to_writer(&mut self.buffer, line).is_ok() {
            self.buffer.push(b'\n');
            self.buffered += 1;
        }
    }

    /// Drops queued lines that could not be written (their submissions are
    /// refused, so they must never become durable later).
    pub fn discard(&mut self) {
        self.buffer.clear();
        self.buffered = 0;
        self.must_sync = false;
    }

    /// Whether lines wait for `commit`.
    pub fn dirty(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Writes every queued line with one write and, if an `add` is among
    /// them, makes the file durable with one fdatasync (deletions alone are
    /// only written: module docs). On error the lines stay queued (the
    /// caller must not acknowledge the submissions they carry).
    pub fn commit(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.file.write_all(&self.buffer)?;
        if self.must_sync {
            rustix::fs::fdatasync(&self.file)?;
        }
        self.lines += self.buffered;
        self.buffer.clear();
        self.buffered = 0;
        self.must_sync = false;
        Ok(())
    }

    /// Whether deleted lines dominate the file enough to rewrite it.
    pub fn should_compact(&self, pending_len: usize) -> bool {
        self.lines > 1000 && self.lines > 2 * pending_len as u64 + 1000
    }

    /// Rewrites the journal with only `pending` in it.
    pub fn compact_with<'a, I>(&mut self, pending: I) -> io::Result<()>
    where
        I: IntoIterator<Item = &'a OneShot>,
    {
        let items: Vec<&OneShot> = pending.into_iter().collect();
        self.compact_refs(&items)
    }

    fn compact_replayed(&mut self, pending: &[OneShot]) -> io::Result<()> {
        let refs: Vec<&OneShot> = pending.iter().collect();
        self.compact_refs(&refs)
    }

    fn compact_refs(&mut self, pending: &[&OneShot]) -> io::Result<()> {
        self.commit()?;
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut out = io::BufWriter::with_capacity(1 << 20, crate::files::create_owned(&tmp)?);
            for job in pending {
                serde_json::to_writer(&mut out, &Line::Add { job })?;
                out.write_all(b"\n")?;
            }
            let f = out.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = crate::files::open_owned(&self.path, OpenOptions::new().append(true))?;
        self.lines = pending.len() as u64;
        Ok(())
    }

    /// Lines in the journal file (tests, benchmarks).
    pub fn lines(&self) -> u64 {
        self.lines
    }
}

impl OneShotJournal for Journal {
    fn add(&mut self, shot: &OneShot) {
        Journal::add(self, shot);
    }

    fn del(&mut self, id: &str) {
        Journal::del(self, id);
    }

    fn discard(&mut self) {
        Journal::discard(self);
    }

    fn dirty(&self) -> bool {
        Journal::dirty(self)
    }

    fn commit(&mut self) -> io::Result<()> {
        Journal::commit(self)
    }

    fn should_compact(&self, pending: usize) -> bool {
        Journal::should_compact(self, pending)
    }

    fn compact(&mut self, pending: &mut dyn Iterator<Item = &OneShot>) -> io::Result<()> {
        self.compact_with(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use rea_core::oneshot::OneShotRetry;
    use std::collections::BTreeMap;

    fn shot(id: &str) -> OneShot {
        OneShot {
            id: id.into(),
            argv: vec!["echo".into(), format!("hello \"{id}\"")].into(),
            shell: false,
            dir: std::path::Path::new("/tmp").into(),
            due: DateTime::parse_from_rfc3339("2026-12-01T10:00:00+08:00")
                .unwrap()
                .with_timezone(&Utc),
            submitted: DateTime::parse_from_rfc3339("2026-11-29T00:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            rare: rea_core::oneshot::OneShotRare::boxed(
                BTreeMap::new(),
                None,
                Some(1000),
                OneShotRetry::default(),
                vec!["orders".into()],
            ),
        }
    }

    #[test]
    fn replay_returns_what_was_committed_and_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        j.add(&shot("a"));
        j.add(&shot("b"));
        j.add(&shot("c"));
        j.del("b");
        j.commit().unwrap();
        j.add(&shot("never-committed"));
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        let ids: Vec<_> = r.pending.iter().map(|s| &*s.id).collect();
        assert_eq!(ids, vec!["a", "c"]);
        assert_eq!(r.pending[0], shot("a"));
        // Replayed one-shots share what they repeat.
        assert!(Arc::ptr_eq(&r.pending[0].dir, &r.pending[1].dir));
    }

    #[test]
    fn replayed_one_shots_share_equal_commands() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        let same = |id: &str| OneShot {
            argv: vec!["true".into()].into(),
            ..shot(id)
        };
        j.add(&same("a"));
        j.add(&same("b"));
        j.add(&shot("c"));
        j.commit().unwrap();
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        assert!(Arc::ptr_eq(&r.pending[0].argv, &r.pending[1].argv));
        assert_eq!(
            *r.pending[2].argv,
            ["echo".to_string(), "hello \"c\"".to_string()]
        );
    }

    #[test]
    fn an_id_deleted_and_submitted_again_is_pending_once_with_its_new_definition() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        j.add(&shot("a"));
        j.add(&shot("b"));
        j.del("a");
        let mut again = shot("a");
        again.argv = vec!["second".into()].into();
        j.add(&again);
        j.del("gone-already");
        j.commit().unwrap();
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        let ids: Vec<_> = r.pending.iter().map(|s| &*s.id).collect();
        assert_eq!(ids, vec!["b", "a"]);
        assert_eq!(r.pending[1], again);
        assert_eq!(r.malformed, 0);
    }

    #[test]
    fn deletions_alone_are_written_without_waiting_for_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        j.add(&shot("a"));
        j.commit().unwrap();
        j.del("a");
        assert!(!j.must_sync);
        j.commit().unwrap();
        assert!(!j.dirty());
        drop(j);
        assert!(Journal::open(dir.path()).unwrap().pending.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_does_not_corrupt_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        j.add(&shot("a"));
        j.commit().unwrap();
        drop(j);
        let p = journal_path(dir.path());
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"op":"add","job":{"id":"tor"#).unwrap();
        drop(f);
        let r = Journal::open(dir.path()).unwrap();
        assert_eq!(r.malformed, 1);
        let mut j = r.journal;
        j.add(&shot("b"));
        j.commit().unwrap();
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        let ids: Vec<_> = r.pending.iter().map(|s| &*s.id).collect();
        assert_eq!(ids, vec!["a", "b"]);
    }

    #[test]
    fn compaction_keeps_only_pending() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        for i in 0..3000 {
            j.add(&shot(&format!("s{i}")));
            if i >= 10 {
                j.del(&format!("s{i}"));
            }
        }
        j.commit().unwrap();
        assert_eq!(j.lines(), 3000 + 2990);
        let live: Vec<OneShot> = (0..10).map(|i| shot(&format!("s{i}"))).collect();
        assert!(j.should_compact(live.len()));
        j.compact_with(live.iter()).unwrap();
        assert!(!j.should_compact(live.len()));
        assert_eq!(j.lines(), 10);
        j.add(&shot("after"));
        j.commit().unwrap();
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        assert_eq!(r.pending.len(), 11);
        assert_eq!(r.journal.lines(), 11);
    }

    #[test]
    fn open_compacts_a_journal_dominated_by_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap().journal;
        for i in 0..2000 {
            j.add(&shot(&format!("s{i}")));
            j.del(&format!("s{i}"));
        }
        j.add(&shot("kept"));
        j.commit().unwrap();
        drop(j);
        let r = Journal::open(dir.path()).unwrap();
        assert_eq!(r.pending.len(), 1);
        assert_eq!(r.journal.lines(), 1);
    }
}
