//! The embedded history of a state directory with tenants: the system's
//! log in the state directory and one log per user tenant in
//! `tenants/NAME/` (see [`super::TENANTS_DIR`]), each a [`JsonlHistory`]
//! rotated at the same size and count. A record goes to its tenant's log
//! (`Tenant::of` its job), so a user's runs, however much output they
//! write, rotate out only her own records: the rotation settings are each
//! tenant's quota. The reader merges the logs back in `ts` order
//! ([`super::JsonlReader`]).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rea_core::record::Record;
use rea_core::tenant::Tenant;

use super::{tenant_dir, HistoryWriter, JsonlHistory, WriteFailure, WriterHealth, TENANTS_DIR};

/// Every tenant's log in one state directory (see the module doc).
pub struct TenantLogs {
    dir: PathBuf,
    max_bytes: u64,
    max_files: u32,
    system: JsonlHistory,
    /// Users' logs, opened on their first record: as many as there are
    /// users' files, each holding one descriptor.
    users: HashMap<String, JsonlHistory>,
    /// A user's log that could not be opened: her records went to the
    /// system's log meanwhile (kept rather than lost), and this says why.
    last_error: Option<WriteFailure>,
}

impl TenantLogs {
    /// Opens the system's log (as [`JsonlHistory::open`]); users' logs
    /// are opened when they are first written.
    pub fn open(state_dir: &Path, max_bytes: u64, max_files: u32) -> io::Result<TenantLogs> {
        Ok(TenantLogs {
            dir: state_dir.to_path_buf(),
            max_bytes,
            max_files,
            system: JsonlHistory::open(state_dir, max_bytes, max_files)?,
            users: HashMap::new(),
            last_error: None,
        })
    }

    /// `user`'s log, opened (and its directory made, root's alone) if
    /// needed.
    fn user_log(&mut self, user: &str) -> io::Result<&mut JsonlHistory> {
        if !self.users.contains_key(user) {
            let Some(dir) = tenant_dir(&self.dir, user) else {
                return Err(io::Error::other(format!(
                    "{user:?} cannot name a directory"
                )));
            };
            private_dir(&self.dir.join(TENANTS_DIR))?;
            private_dir(&dir)?;
            let log = JsonlHistory::open(&dir, self.max_bytes, self.max_files)?;
            self.users.insert(user.to_string(), log);
        }
        self.users
            .get_mut(user)
            .ok_or_else(|| io::Error::other("a log just opened is gone"))
    }
}

/// Makes `dir` if it is missing, mode 0700 (the history holds job output,
/// which can hold secrets), and refuses anything there that is not a
/// directory (a symlink above all: links in the state directory are never
/// followed).
fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing {}: it is not a directory (links in the state directory are never followed)",
                dir.display()
            ),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

impl HistoryWriter for TenantLogs {
    fn append(&mut self, record: &Record) -> io::Result<()> {
        let tenant = record.job.as_deref().map_or(Tenant::System, Tenant::of);
        let Some(user) = tenant.user() else {
            return self.system.append(record);
        };
        match self.user_log(user) {
            Ok(log) => log.append(record),
            Err(e) => {
                let e = io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open {user}'s history log in {} (her record went to the system's log): {e}",
                        self.dir.join(TENANTS_DIR).display()
                    ),
                );
                self.last_error = Some(WriteFailure {
                    at: chrono::Utc::now(),
                    message: e.to_string(),
                });
                self.system.append(record)?;
                Err(e)
            }
        }
    }

    fn set_rotation(&mut self, max_bytes: u64, max_files: u32) {
        self.max_bytes = max_bytes;
        self.max_files = max_files;
        self.system.set_rotation(max_bytes, max_files);
        for log in self.users.values_mut() {
            log.set_rotation(max_bytes, max_files);
        }
    }

    /// Every log's backlog and drops added up, and the newest failure.
    fn health(&self) -> WriterHealth {
        let mut health = HistoryWriter::health(&self.system);
        let mut newest = health.last_error.take();
        let others = self.users.values().map(HistoryWriter::health);
        for h in others {
            health.backlog += h.backlog;
            health.dropped += h.dropped;
            newest = newest.into_iter().chain(h.last_error).max_by_key(|f| f.at);
        }
        health.last_error = newest
            .into_iter()
            .chain(self.last_error.clone())
            .max_by_key(|f| f.at);
        health
    }
}
