//! The audit log in a state directory: `audit.jsonl`, one
//! [`rea_core::audit::Entry`] per line, root's (the daemon's user's) and
//! 0600, rotated by size to `audit.jsonl.1` … so it is bounded on disk
//! whatever clients send ([`MAX_BYTES`] × ([`MAX_FILES`] + 1)). Read
//! backwards, newest first, by [`JsonlAuditReader`]; needs no daemon.
//!
//! Blocking code: the daemon writes from a thread of its own, behind a
//! bounded queue (`rea_daemon::audit`), never from its loop. What an entry
//! holds and how a query selects is `rea_core::audit`'s.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rea_core::audit::{Entry, Query};

use crate::history::RevLines;

/// The live file's size past which it is rotated.
pub const MAX_BYTES: u64 = 8 << 20;
/// Rotated files kept beside the live one.
pub const MAX_FILES: u32 = 4;

/// The live audit log of a state directory.
pub fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("audit.jsonl")
}

fn rotated_path(state_dir: &Path, n: u32) -> PathBuf {
    state_dir.join(format!("audit.jsonl.{n}"))
}

/// Appends entries to `audit.jsonl`, rotating it by size.
pub struct AuditFile {
    dir: PathBuf,
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    /// The open live file and its size, as long as it is the file at
    /// `path` (a rotation or an operator moving it reopens).
    open: Option<(File, u64, u64, u64)>,
}

impl AuditFile {
    /// The audit log of `state_dir` (opened at the first append).
    pub fn new(state_dir: &Path) -> AuditFile {
        AuditFile {
            dir: state_dir.to_path_buf(),
            path: log_path(state_dir),
            max_bytes: MAX_BYTES,
            max_files: MAX_FILES,
            open: None,
        }
    }

    /// Rotation at `max_bytes`, keeping `max_files` (tests use small ones).
    pub fn with_rotation(mut self, max_bytes: u64, max_files: u32) -> AuditFile {
        self.max_bytes = max_bytes.max(1);
        self.max_files = max_files;
        self
    }

    /// Appends `entries` in one write (rotating first when the live file
    /// would pass its size). On error nothing is kept: the caller counts
    /// what was lost.
    pub fn append(&mut self, entries: &[Entry]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(256 * entries.len());
        for e in entries {
            serde_json::to_writer(&mut buf, e).map_err(io::Error::other)?;
            buf.push(b'\n');
        }
        if buf.is_empty() {
            return Ok(());
        }
        let mut size = self.ensure_open(&mut buf)?;
        if size > 0 && size + buf.len() as u64 > self.max_bytes {
            self.rotate()?;
            size = self.ensure_open(&mut buf)?;
        }
        let Some((file, _, _, len)) = self.open.as_mut() else {
            return Err(io::Error::other("the audit log is not open"));
        };
        match file.write_all(&buf) {
            Ok(()) => {
                *len = size + buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.open = None;
                Err(e)
            }
        }
    }

    /// The size of the file now at `path`, opening it (created 0600,
    /// never through a link, owned by rea's user) when it is not the one
    /// held. A file found ending in a torn line gets `buf` after a newline.
    fn ensure_open(&mut self, buf: &mut Vec<u8>) -> io::Result<u64> {
        match fs::symlink_metadata(&self.path) {
            Ok(meta) => {
                if let Some((_, dev, ino, len)) = &self.open {
                    if *dev == meta.dev() && *ino == meta.ino() {
                        return Ok(*len);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.open = None;
        let file = crate::files::open_owned(
            &self.path,
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600),
        )?;
        let meta = file.metadata()?;
        if meta.mode() & 0o077 != 0 {
            // Created by someone's umask or an old copy: who did what is
            // root's to read.
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
        if meta.len() > 0 {
            let mut last = [0u8];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut last, meta.len() - 1)?;
            if last[0] != b'\n' && buf.first() != Some(&b'\n') {
                buf.insert(0, b'\n');
            }
        }
        self.open = Some((file, meta.dev(), meta.ino(), meta.len()));
        Ok(meta.len())
    }

    /// `.{n-1}` → `.{n}` … live → `.1`; the oldest falls off the end.
    fn rotate(&mut self) -> io::Result<()> {
        self.open = None;
        let gone = |r: io::Result<()>| match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        if self.max_files == 0 {
            return gone(fs::remove_file(&self.path));
        }
        gone(fs::remove_file(rotated_path(&self.dir, self.max_files)))?;
        for n in (1..self.max_files).rev() {
            gone(fs::rename(
                rotated_path(&self.dir, n),
                rotated_path(&self.dir, n + 1),
            ))?;
        }
        gone(fs::rename(&self.path, rotated_path(&self.dir, 1)))
    }
}

/// What `rea audit` reads: the state directory's files, the cluster
/// database, or the daemon (for a user, who sees her own tenant's).
pub trait AuditReader {
    /// Entries `query` selects, newest first, at most its limit.
    fn query(&self, query: &Query) -> io::Result<Vec<Entry>>;
}

/// Reads a state directory's audit log backwards across the live file and
/// the rotated ones. Missing files are an empty log; lines that do not
/// parse (a torn last write) are skipped.
pub struct JsonlAuditReader {
    dir: PathBuf,
}

impl JsonlAuditReader {
    pub fn new(state_dir: &Path) -> JsonlAuditReader {
        JsonlAuditReader {
            dir: state_dir.to_path_buf(),
        }
    }

    /// Up to `limit` entries, newest first, each as `keep` returns it
    /// (None: left out), stopping once those kept took `max_bytes` of the
    /// log. Memory is the answer and one chunk of a file.
    pub fn scan(
        &self,
        limit: usize,
        max_bytes: usize,
        mut keep: impl FnMut(Entry) -> Option<Entry>,
    ) -> io::Result<Vec<Entry>> {
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let mut bytes = 0usize;
        let files = std::iter::once(log_path(&self.dir)).chain(
            (1..=MAX_FILES.max(rotated_count(&self.dir))).map(|n| rotated_path(&self.dir, n)),
        );
        for path in files {
            let file = match crate::files::open_read(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let len = file.metadata()?.len();
            for line in RevLines::new(&file, len, 64 * 1024) {
                let line = line?;
                let Ok(entry) = serde_json::from_slice::<Entry>(&line) else {
                    continue;
                };
                if let Some(e) = keep(entry) {
                    found.push(e);
                    bytes += line.len();
                    if found.len() >= limit || bytes >= max_bytes {
                        return Ok(found);
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The highest rotated file's number present (a lowered limit leaves
/// older ones, still read until they are rotated away).
fn rotated_count(dir: &Path) -> u32 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("audit.jsonl.")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

impl AuditReader for JsonlAuditReader {
    fn query(&self, query: &Query) -> io::Result<Vec<Entry>> {
        self.scan(query.limit.unwrap_or(usize::MAX), usize::MAX, |e| {
            query.matches(&e).then_some(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use rea_core::audit::{Action, Outcome};

    fn entry(i: i64) -> Entry {
        Entry {
            ts: DateTime::from_timestamp(1_800_000_000 + i, 0).unwrap(),
            uid: 0,
            user: Some("root".into()),
            tenant: None,
            source: "cli".into(),
            action: if i % 2 == 0 {
                Action::Trigger
            } else {
                Action::Pause
            },
            target: vec![format!("job{i}")],
            result: Outcome::Ok,
            code: None,
            message: None,
            node: None,
            params: None,
        }
    }

    #[test]
    fn entries_read_back_newest_first_across_rotations_and_the_disk_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = AuditFile::new(dir.path()).with_rotation(2000, 2);
        for i in 0..200 {
            log.append(&[entry(i)]).unwrap();
        }
        let total: u64 = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 3 * 2000, "{total} bytes on disk");
        let mode = fs::metadata(log_path(dir.path())).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600);
        let reader = JsonlAuditReader::new(dir.path());
        let all = reader.query(&Query::default()).unwrap();
        assert!(all.len() > 10, "{}", all.len());
        let numbers: Vec<String> = all.iter().map(|e| e.target[0].clone()).collect();
        assert_eq!(numbers[0], "job199");
        assert!(all.windows(2).all(|w| w[0].ts > w[1].ts));
        let pauses = reader
            .query(&Query {
                actions: vec![Action::Pause],
                limit: Some(3),
                ..Query::default()
            })
            .unwrap();
        let names: Vec<&str> = pauses.iter().map(|e| e.target[0].as_str()).collect();
        assert_eq!(names, ["job199", "job197", "job195"]);
    }

    /// The audit kit, on files rotated small (so queries cross files).
    #[test]
    fn the_state_directorys_audit_log_conforms() {
        crate::conformance::audit_backend(60, || {
            let dir = tempfile::tempdir().unwrap();
            let mut file = AuditFile::new(dir.path()).with_rotation(1500, 100);
            crate::conformance::FreshAudit {
                write: Box::new(move |entries| {
                    for e in entries {
                        file.append(std::slice::from_ref(e)).unwrap();
                    }
                }),
                reader: Box::new(JsonlAuditReader::new(dir.path())),
                keep: Box::new(dir),
            }
        });
    }

    #[test]
    fn a_torn_line_is_skipped_and_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = AuditFile::new(dir.path());
        log.append(&[entry(1)]).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(log_path(dir.path()))
            .unwrap();
        f.write_all(b"{\"ts\":\"2027").unwrap();
        let read = JsonlAuditReader::new(dir.path())
            .query(&Query::default())
            .unwrap();
        assert_eq!(read, [entry(1)]);
        AuditFile::new(dir.path()).append(&[entry(2)]).unwrap();
        let read = JsonlAuditReader::new(dir.path())
            .query(&Query::default())
            .unwrap();
        assert_eq!(read, [entry(2), entry(1)]);

        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), log_path(other.path())).unwrap();
        let err = AuditFile::new(other.path())
            .append(&[entry(2)])
            .unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}
