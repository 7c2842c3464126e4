//! Cluster mode in the daemon loop (`[cluster]` in the job file): the node
//! (a `rea_store::cluster::ClusterNode`; the program chose its backend)
//! holds the lease and talks to the database on its own tasks; the loop only sends it requests and takes its events, so a
//! database round trip never blocks scheduling. What the events mean is the
//! engine's business (`rea_core::engine`, cluster mode).
//!
//! Control requests that change cluster-wide state (pause, resume,
//! one-shot submissions) go to the database and are answered when it has
//! them; `pending` and `cancel` are answered from the database by the
//! commands themselves.

use std::collections::{BTreeMap, VecDeque};

use rea_config::Config;
use rea_core::engine::Action;
use rea_core::oneshot::OneShot;
use rea_store::claims::{ClaimAnswer, ClaimRequest, OccurrenceClaims};
use rea_store::cluster::{ClusterNode, JobDef, NodeEvent, SubmitError};
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::users::Scope;
use super::Loop;
use crate::control::protocol::{ClusterNodeInfo, PauseReply, SubmitReply, Ts, WriteError};
use crate::control::{Incoming, Reply, Request, Response, Selector};

/// The loop's cluster side.
pub(crate) struct Cluster {
    pub(crate) node: Box<dyn ClusterNode>,
    claims: Box<dyn OccurrenceClaims>,
    /// One-shots the node has handed to the engine so far (the node counts
    /// those still on their way against the free slots).
    oneshots_taken: u64,
    /// Claims answered since the daemon started, by outcome.
    claims_answered: BTreeMap<&'static str, u64>,
    /// The other nodes as the node's watch last saw them (`peers.rs`).
    pub(crate) peers: crate::peers::Peers,
}

impl Cluster {
    pub(crate) fn new(node: Box<dyn ClusterNode>) -> Cluster {
        Cluster {
            claims: node.claims(),
            node,
            oneshots_taken: 0,
            claims_answered: BTreeMap::new(),
            peers: Default::default(),
        }
    }
}

/// Digests of the job definitions this node runs: one per job, and one
/// over all of them (nodes whose definitions differ are flagged by
/// `rea status`; the `[cluster]` table itself, which names the node, is
/// not part of it).
pub(crate) fn digests(cfg: &Config) -> (String, Vec<JobDef>) {
    use std::hash::{Hash, Hasher};
    let mut jobs: Vec<JobDef> = cfg
        .jobs
        .iter()
        .map(|j| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            format!("{j:?}").hash(&mut h);
            JobDef {
                name: j.name.clone(),
                digest: format!("{:016x}", h.finish()),
                overlap: j.overlap,
            }
        })
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for j in &jobs {
        (&j.name, &j.digest).hash(&mut h);
    }
    (format!("{:016x}", h.finish()), jobs)
}

impl Loop {
    /// `Action::Claim`: ask the store; the answer comes back as an event
    /// (or at once, from a store that decides locally).
    pub(super) fn claim(&mut self, c: ClaimRequest, actions: &mut VecDeque<Action>) {
        let answer = match self.backend.node_mut() {
            Some(cl) => cl.claims.claim(&c),
            None => ClaimAnswer::Now(rea_store::claims::ClaimOutcome::Unavailable(
                "no cluster store".into(),
            )),
        };
        if let ClaimAnswer::Now(outcome) = answer {
            actions.extend(
                self.engine
                    .claimed(&c.run, outcome, rea_store::clock::now()),
            );
        }
    }

    /// Tells the node how many runs this daemon could start now (due
    /// one-shots are claimed up to that many; none while stopping).
    pub(super) fn cluster_slots(&self) {
        if let Some(cl) = self.backend.node() {
            let busy = self.engine.running() + self.engine.hooks_running() + self.engine.queued();
            let free = if self.stopping.is_stopping() {
                0
            } else {
                self.engine.max_concurrent().saturating_sub(busy)
            };
            cl.node.set_free_slots(free, cl.oneshots_taken);
        }
    }

    /// This node's name in its cluster (None in local mode).
    pub(super) fn node_name(&self) -> Option<String> {
        Some(self.backend.node()?.node.node().to_string())
    }

    /// This node as `rea status` shows it (None in local mode).
    pub(super) fn cluster_info(&self) -> Option<ClusterNodeInfo> {
        let cl = self.backend.node()?;
        let h = cl.node.health();
        Some(ClusterNodeInfo {
            cluster: cl.node.cluster().to_string(),
            node: cl.node.node().to_string(),
            epoch: h.epoch,
            lease_live: h.lease_live,
            lease_age_ms: h.lease_age.as_millis() as u64,
            lease_left_ms: h.lease_left.as_millis() as u64,
            backlog: h.backlog,
            dropped: h.dropped,
            clock_offset_ms: h.clock_offset_ms,
            last_error: h.last_error.map(|(at, message)| WriteError {
                at: Ts(at),
                message,
            }),
            claims: cl
                .claims_answered
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
        })
    }

    pub(super) fn on_cluster_event(&mut self, ev: NodeEvent, actions: &mut VecDeque<Action>) {
        let now = rea_store::clock::now();
        match ev {
            NodeEvent::Claimed { run, outcome } => {
                if let rea_store::claims::ClaimOutcome::Unavailable(e) = &outcome {
                    warn!(run = run.as_str(), "claim not answered: {e}");
                }
                if let Some(cl) = self.backend.node_mut() {
                    *cl.claims_answered.entry(outcome.as_str()).or_default() += 1;
                }
                if let Some(m) = &self.metrics {
                    m.claimed(outcome.as_str());
                }
                actions.extend(self.engine.claimed(&run, outcome, now));
            }
            NodeEvent::Adopted {
                job,
                trigger,
                attempt,
                scheduled,
                grant,
                params,
            } => actions.extend(
                self.engine
                    .adopt(&job, trigger, attempt, scheduled, grant, params, now),
            ),
            NodeEvent::OneShot {
                shot,
                attempt,
                grant,
            } => {
                if let Some(cl) = self.backend.node_mut() {
                    cl.oneshots_taken += 1;
                }
                actions.extend(self.engine.adopt_oneshot(*shot, attempt, grant, now));
            }
            NodeEvent::Stop { fence } => actions.extend(self.engine.stop_fence(fence, now)),
            NodeEvent::LeaseLost { why } => {
                warn!("cluster: {why}; no scheduled run starts until the lease is back");
                actions.extend(self.engine.lease_lost(now));
                self.publish_node("lease_lost");
            }
            NodeEvent::LeaseBack { epoch } => {
                info!(
                    epoch,
                    "cluster: lease held; catching up what could not be claimed"
                );
                actions.extend(self.engine.cluster_back(now));
                self.publish_node("lease_held");
            }
            NodeEvent::Peers(view) => self.on_peers(*view),
            NodeEvent::Seeded(ended) => self.on_seeded(&ended),
            NodeEvent::ClockCorrected { by_ms } => {
                // The clock the engine schedules on moved (the timer is
                // re-armed on the next turn in any case). Forward, what
                // it passed over goes through each job's catch-up policy,
                // as after a step of the machine's clock; back, what was
                // planned on the clock that was ahead is planned again.
                let tolerance = rea_store::clock::TOLERANCE_MS;
                if by_ms.abs() > tolerance {
                    warn!(
                        by_ms,
                        "the clock was corrected to the cluster database's; re-planning every job"
                    );
                }
                if by_ms > tolerance {
                    actions.extend(self.engine.wake(now, true));
                } else if by_ms < 0 {
                    let settled = std::time::Duration::from_millis(2 * tolerance as u64);
                    actions.extend(self.engine.clock_set_back(now, settled));
                }
            }
        }
    }

    /// Control requests answered by the database in cluster mode; others
    /// are handed back.
    pub(super) fn cluster_incoming(
        &mut self,
        incoming: Incoming,
        scope: &Scope,
    ) -> Option<Incoming> {
        if self.backend.node().is_none() {
            return Some(incoming);
        }
        match incoming.request {
            Request::Pause(sel) => self.cluster_pause(sel, true, incoming.reply, scope),
            Request::Resume(sel) => self.cluster_pause(sel, false, incoming.reply, scope),
            Request::Submit(sub) => match self.prepare_submission(sub, &[]) {
                Ok(shot) => self.cluster_submit(shot, incoming.reply),
                Err(resp) => {
                    let _ = incoming.reply.send(Reply::Done(resp));
                }
            },
            Request::Cancel { .. } | Request::Pending { .. } => {
                let _ = incoming.reply.send(Reply::Done(Response::err(
                    "refused",
                    "cluster mode: one-shots live in the cluster database; use `rea pending` and `rea cancel`, which ask it",
                )));
            }
            request => {
                return Some(Incoming {
                    request,
                    reply: incoming.reply,
                    peer: incoming.peer,
                    source: incoming.source,
                })
            }
        }
        None
    }

    fn cluster_submit(&mut self, shot: OneShot, reply: oneshot::Sender<Reply>) {
        let Some(cl) = self.backend.node() else {
            return;
        };
        let (id, due) = (shot.id.to_string(), shot.due);
        cl.node.submit(
            shot,
            Box::new(move |answer| {
                let resp = match answer {
                    Ok(()) => Response::with(&SubmitReply { id, due: Ts(due) }),
                    Err(e @ SubmitError::Duplicate { .. }) => {
                        Response::err("duplicate", e.to_string())
                    }
                    Err(SubmitError::Refused(e)) => Response::err(
                        "refused",
                        format!("cannot queue the one-shot in the cluster database: {e}"),
                    ),
                    Err(SubmitError::Unconfirmed(e)) => Response::err(
                        "unconfirmed",
                        format!(
                            "the cluster database did not confirm one-shot {id:?} ({e}); \
                             it may have been queued all the same: `rea pending` lists it if so, \
                             and a second one-shot named {id:?} is refused while it is pending"
                        ),
                    ),
                };
                let _ = reply.send(Reply::Done(resp));
            }),
        );
    }

    fn cluster_pause(
        &mut self,
        sel: Selector,
        pause: bool,
        reply: oneshot::Sender<Reply>,
        scope: &Scope,
    ) {
        let names = match self.selected(&sel, scope) {
            Ok(names) => names,
            Err(resp) => {
                let _ = reply.send(Reply::Done(resp));
                return;
            }
        };
        // `--all` of an admin is every job of the cluster (the store's
        // None); anyone else's is their own jobs, by name.
        let everything = sel.all && *scope == Scope::Admin;
        let Some(cl) = self.backend.node() else {
            return;
        };
        let all_names: Vec<String> = self.config.jobs.iter().map(|j| j.name.clone()).collect();
        cl.node.pause(
            (!everything).then_some(names),
            pause,
            Box::new(move |answer| {
                let resp = match answer {
                    Ok(changed) => {
                        let changed = if changed.is_empty() && everything {
                            all_names
                        } else {
                            changed
                        };
                        for n in &changed {
                            info!(
                                job = n.as_str(),
                                "{} cluster-wide",
                                if pause { "paused" } else { "resumed" }
                            );
                        }
                        let paused = if pause { changed.clone() } else { Vec::new() };
                        Response::with(&PauseReply { changed, paused })
                    }
                    Err(e) => {
                        Response::err("refused", format!("the cluster database refused: {e}"))
                    }
                };
                let _ = reply.send(Reply::Done(resp));
            }),
        );
    }
}
