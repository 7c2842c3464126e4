//! What survives a restart of the rea daemon, behind traits, so that the
//! daemon loop and the query commands never name a backend:
//!
//! | trait | what | embedded backend (a state directory) |
//! |---|---|---|
//! | [`history::HistoryWriter`], [`history::HistoryReader`] | every run's history | `history.jsonl` (+ rotated files) for the system, `tenants/NAME/history.jsonl` for each user |
//! | [`oneshots::OneShotJournal`] | pending one-shots | `oneshots.jsonl` |
//! | [`paused::PausedStore`] | paused jobs | `paused.json` |
//! | [`audit::AuditReader`] (and [`audit::AuditFile`], its writer) | who asked the daemon for which change | `audit.jsonl` (+ rotated files) |
//! | [`claims::OccurrenceClaims`] | who starts a run, cluster-wide | none: one node decides alone |
//! | [`cluster::ClusterNode`] | a node's live side of a shared store: lease, claims, one-shots, pauses | none: local mode has no cluster |
//!
//! [`Local::open`] opens all of them in one state directory. A shared
//! backend (several nodes on one database) implements the same traits; the
//! history part must pass [`conformance`] (feature `conformance`).
//!
//! No tokio and no job-file reader here (`.ci/layers` checks it): the
//! stores are plain blocking code that the daemon calls from its loop.

use std::io;
use std::path::Path;

use rea_core::oneshot::OneShot;

pub mod audit;
pub mod claims;
pub mod clock;
pub mod cluster;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod files;
pub mod history;
pub mod oneshots;
pub mod paused;

/// The embedded backend: everything in one state directory.
pub struct Local {
    pub history: Box<dyn history::HistoryWriter>,
    pub oneshots: Box<dyn oneshots::OneShotJournal>,
    pub paused: Box<dyn paused::PausedStore>,
    /// The one-shots the journal holds (to restore at start).
    pub pending: Vec<OneShot>,
    /// Journal lines that did not parse (a torn last write).
    pub malformed_journal_lines: u64,
}

impl Local {
    /// Opens (creating what is missing) every store in `state_dir`, with
    /// the history rotated at `history_max_bytes`, keeping `history_files`.
    /// Errors name the file.
    pub fn open(state_dir: &Path, history_max_bytes: u64, history_files: u32) -> io::Result<Local> {
        let history = history::TenantLogs::open(state_dir, history_max_bytes, history_files)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open the history log in {}: {e}",
                        state_dir.display()
                    ),
                )
            })?;
        let replayed = oneshots::Journal::open(state_dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open the one-shot journal {}: {e}",
                    oneshots::journal_path(state_dir).display()
                ),
            )
        })?;
        Ok(Local {
            history: Box::new(history),
            oneshots: Box::new(replayed.journal),
            paused: Box::new(paused::PausedFile::new(state_dir)),
            pending: replayed.pending,
            malformed_journal_lines: replayed.malformed,
        })
    }

    /// A reader of the history in `state_dir`; needs no daemon.
    pub fn history_reader(state_dir: &Path) -> Box<dyn history::HistoryReader> {
        Box::new(history::JsonlReader::new(state_dir))
    }
}
