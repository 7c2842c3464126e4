//! The loop's storage: one component, opened once at start as the local
//! state directory or as a node of a shared store, after which the loop
//! never asks which. Everything that survives a restart goes through here:
//! history records, the one-shot journal, the paused set, and (cluster
//! mode) the node that claims runs and holds one-shots and pauses for the
//! whole cluster.
//!
//! | | local | cluster |
//! |---|---|---|
//! | history | `history.jsonl` | the same file, and the store for runs it granted |
//! | one-shots | the journal in the state directory | the store (the node answers submissions) |
//! | pauses | `paused.json` | the store's job rows |
//! | who decides a run | the engine | the store (`Decisions::Store`) |
//!
//! What does not live here: the requests the shared store answers and the
//! node's events back to the engine (`cluster.rs`), which reach the node
//! through [`Backend::node`].

use std::collections::BTreeSet;
use std::io;

use rea_config::Config;
use rea_core::engine::Decisions;
use rea_core::oneshot::OneShot;
use rea_core::record::Record;
use rea_store::cluster::NodeEvent;
use rea_store::history::{HistoryWriter, WriterHealth};
use rea_store::oneshots::OneShotJournal;
use rea_store::paused::PausedStore;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::cluster::{digests, Cluster};
use crate::Options;

pub(crate) struct Backend {
    history: Box<dyn HistoryWriter>,
    oneshots: Box<dyn OneShotJournal>,
    paused: Box<dyn PausedStore>,
    /// The node of the shared store (cluster mode), None: this state
    /// directory is all there is.
    node: Option<Cluster>,
}

/// What the backend held when it was opened.
pub(crate) struct Opened {
    pub(crate) backend: Backend,
    /// The node's events (never yields in local mode).
    pub(crate) events: mpsc::UnboundedReceiver<NodeEvent>,
    /// One-shots pending in the journal.
    pub(crate) pending: Vec<OneShot>,
    /// Jobs paused when the previous daemon stopped.
    pub(crate) paused: BTreeSet<String>,
}

impl Backend {
    /// Opens the state directory's stores and, when the job file has
    /// `[cluster]`, starts this daemon's node with the program's
    /// [`crate::StartNode`]. The one place local or cluster is chosen.
    pub(crate) fn open(opts: &Options, config: &Config) -> Result<Opened, String> {
        let local = rea_store::Local::open(
            &opts.state_dir,
            config.daemon.history_max_bytes,
            config.daemon.history_files,
        )
        .map_err(|e| e.to_string())?;
        if local.malformed_journal_lines > 0 {
            warn!(
                lines = local.malformed_journal_lines,
                "ignored unreadable lines in the one-shot journal (a torn last write)"
            );
        }
        let (node, events) =
            match (&config.cluster, &opts.cluster) {
                (Some(c), Some(start)) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    (Some(Cluster::new(start(c, &opts.state_dir, tx)?)), rx)
                }
                (Some(_), None) => return Err(
                    "the job file has [cluster], but this rea was built without a cluster backend"
                        .into(),
                ),
                (None, _) => (None, mpsc::unbounded_channel().1),
            };
        // Cluster mode: pauses are cluster-wide, in the store.
        let paused = match node {
            Some(_) => BTreeSet::new(),
            None => local.paused.load().unwrap_or_else(|e| {
                warn!("{e}");
                BTreeSet::new()
            }),
        };
        Ok(Opened {
            backend: Backend {
                history: local.history,
                oneshots: local.oneshots,
                paused: local.paused,
                node,
            },
            events,
            pending: local.pending,
            paused,
        })
    }

    /// Who decides whether runs start.
    pub(crate) fn decisions(&self) -> Decisions {
        match self.node {
            Some(_) => Decisions::Store,
            None => Decisions::Engine,
        }
    }

    /// Appends a history record (and hands a granted run's start or end to
    /// the store). An error leaves the record in the writer's backlog.
    pub(crate) fn record(&mut self, rec: &Record) -> io::Result<()> {
        let written = self.history.append(rec);
        if let Some(cl) = &self.node {
            cl.node.record(rec);
        }
        written
    }

    pub(crate) fn history_health(&self) -> WriterHealth {
        self.history.health()
    }

    /// A reloaded job file: new rotation settings; the node publishes its
    /// jobs again.
    pub(crate) fn reloaded(&mut self, old: &Config, new: &Config) {
        self.history
            .set_rotation(new.daemon.history_max_bytes, new.daemon.history_files);
        if self.node.is_some() && new.cluster != old.cluster {
            warn!("[cluster] changed: the new settings take effect when the daemon restarts");
        }
        self.publish(new);
    }

    /// This node's job definitions, at start and after each reload.
    pub(crate) fn publish(&self, config: &Config) {
        if let Some(cl) = &self.node {
            let (digest, jobs) = digests(config);
            cl.node.publish(digest, jobs);
        }
    }

    /// A one-shot is done: out of the journal (a shared store's one-shots
    /// are the store's to remove).
    pub(crate) fn oneshot_done(&mut self, id: &str) {
        if self.node.is_none() {
            self.oneshots.del(id);
        }
    }

    /// The one-shot journal, for submissions this daemon takes itself.
    pub(crate) fn journal(&mut self) -> &mut dyn OneShotJournal {
        self.oneshots.as_mut()
    }

    pub(crate) fn save_paused(&mut self, paused: &BTreeSet<String>) -> Result<(), String> {
        self.paused.save(paused)
    }

    /// The node of the shared store, in cluster mode.
    pub(crate) fn node(&self) -> Option<&Cluster> {
        self.node.as_ref()
    }

    pub(crate) fn node_mut(&mut self) -> Option<&mut Cluster> {
        self.node.as_mut()
    }

    /// Clean shutdown: a node frees its name at once (others need not wait
    /// out its lease), once the store has every run's end.
    pub(crate) async fn leave(&self) {
        if let Some(cl) = &self.node {
            if !cl.node.leave(std::time::Duration::from_secs(5)).await {
                info!("cluster: left without confirmation; the lease runs out instead");
            }
        }
    }
}
