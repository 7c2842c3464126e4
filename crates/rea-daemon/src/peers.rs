//! The live views' cluster-wide side (cluster mode): what the node's watch
//! of the other nodes tells the loop ([`NodeEvent::Peers`], at most once a
//! heartbeat and only when something changed; read on the node's own
//! task and connection, never on the loop's thread).
//!
//! - Runs in progress on other nodes are kept as the last view had them
//!   (bounded by [`PeerView::RUNNING_MAX`]) and added to the overview's
//!   running list beside this node's ([`Loop::add_peer_runs`], the one
//!   hook in `live.rs`).
//! - Runs that ended on other nodes go through `Engine::observe_peer`: the
//!   job's summary (its recent outcomes, durations, last success and
//!   failure), its last run and its failure streak are the cluster's, so
//!   a job failing on another node is failing here too.
//! - Once, when the node starts, each job's last run another node ended
//!   ([`NodeEvent::Seeded`]) goes the same way, untold.
//! - Subscribers hear of other nodes' run starts and ends and of node
//!   joins, leaves and deaths, each as its scope allows.
//!
//! Not here: this node's own runs and lease (`subscribe.rs`, `live.rs`).
//!
//! [`NodeEvent::Peers`]: rea_store::cluster::NodeEvent::Peers
//! [`NodeEvent::Seeded`]: rea_store::cluster::NodeEvent::Seeded

use std::collections::{BTreeMap, HashMap, HashSet};

use rea_proto::live::{Overview, RunNow};
use rea_store::cluster::{PeerRun, PeerView, SeedRun};

use super::users::Scope;
use super::Loop;
use crate::control::protocol::Ts;

/// What the last view of the other nodes held.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    /// Other nodes' runs in progress, oldest first.
    running: Vec<PeerRun>,
    /// Every node's state, by name.
    nodes: BTreeMap<String, String>,
}

impl Loop {
    /// A new view of the other nodes: kept, and told.
    pub(super) fn on_peers(&mut self, view: PeerView) {
        let me = self.node_name().unwrap_or_default();
        let Some(cl) = self.backend.node_mut() else {
            return;
        };
        let before = std::mem::take(&mut cl.peers);
        // A run that ended between the look's statements is in both.
        let ended: HashSet<&str> = view.ended.iter().filter_map(|r| r.run.as_deref()).collect();
        cl.peers = Peers {
            running: view
                .running
                .into_iter()
                .filter(|r| !ended.contains(r.run.as_str()))
                .collect(),
            nodes: view.nodes.into_iter().collect(),
        };
        // Each job's count of runs elsewhere, told to the engine where it
        // changed (the live views' state, counts and filters read it).
        let (old_counts, new_counts) = (counts(&before.running), counts(&cl.peers.running));
        let was: HashSet<&str> = before.running.iter().map(|r| r.run.as_str()).collect();
        let started: Vec<PeerRun> = cl
            .peers
            .running
            .iter()
            .filter(|r| !was.contains(r.run.as_str()))
            .cloned()
            .collect();
        let mut changed_nodes: Vec<(String, String)> = cl
            .peers
            .nodes
            .iter()
            .filter(|(n, state)| **n != me && before.nodes.get(*n) != Some(*state))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        changed_nodes.extend(
            before
                .nodes
                .keys()
                .filter(|n| !cl.peers.nodes.contains_key(*n))
                .map(|n| (n.clone(), "gone".to_string())),
        );
        for job in old_counts.keys().chain(new_counts.keys()) {
            let now = new_counts.get(job).copied().unwrap_or(0);
            if old_counts.get(job).copied().unwrap_or(0) != now {
                self.engine.set_elsewhere(job, now);
            }
        }
        for r in &started {
            self.publish_peer_start(r);
        }
        for rec in &view.ended {
            let changed = self.engine.observe_peer(rec);
            self.publish_record(rec, changed);
        }
        for (node, state) in changed_nodes {
            self.publish_peer_node(&node, &state);
        }
    }

    /// Each job's last run other nodes ended before this node started,
    /// with the cluster's streak: taken where newer than the last this
    /// node knows (`Engine::seed_peer`), and not told to subscribers (none
    /// of it is news).
    pub(super) fn on_seeded(&mut self, ended: &[SeedRun]) {
        let mut changed = 0usize;
        for seed in ended {
            changed += usize::from(self.engine.seed_peer(&seed.last, seed.streak));
        }
        tracing::debug!(
            jobs = ended.len(),
            changed,
            "cluster: a page of the last runs other nodes ended, read at start"
        );
    }

    /// Every job's count of runs elsewhere, told to the engine again
    /// (after a reload: a job new to the file may run on another node).
    pub(super) fn tell_elsewhere(&mut self) {
        let Some(cl) = self.backend.node() else {
            return;
        };
        for (job, n) in counts(&cl.peers.running) {
            self.engine.set_elsewhere(&job, n);
        }
    }

    /// The overview's running list with other nodes' runs beside this
    /// node's (those `scope` sees; one-shots are root's), longest running
    /// first, bounded as before. (A job running only elsewhere is already
    /// counted as running: the engine knows its runs elsewhere.)
    pub(super) fn add_peer_runs(&self, o: &mut Overview, scope: &Scope, bound: usize) {
        let Some(cl) = self.backend.node() else {
            return;
        };
        for r in &cl.peers.running {
            let is_job = self.engine.has_job(&r.job);
            if !scope.owns(&r.job) || (!is_job && *scope != Scope::Admin) {
                continue;
            }
            o.running.push(RunNow {
                run: r.run.clone(),
                job: r.job.clone(),
                since: Some(Ts(r.since)),
                pid: r.pid,
                cpu_ms: None,
                memory_peak_kb: None,
                node: Some(r.node.clone()),
            });
        }
        o.running
            .sort_by_key(|r| (r.since.is_none(), r.since.as_ref().map(|t| t.0)));
        o.running.truncate(bound);
    }
}

/// Runs in progress by job.
fn counts(runs: &[PeerRun]) -> HashMap<String, u32> {
    let mut n: HashMap<String, u32> = HashMap::new();
    for r in runs {
        *n.entry(r.job.clone()).or_default() += 1;
    }
    n
}
