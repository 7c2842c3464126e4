//! The heartbeat task: registers the node (a new epoch per registration),
//! renews its lease on the database clock every `heartbeat` on a
//! connection of its own, and keeps a local deadline on the monotonic
//! clock from the send time of its last renewal; past it the node claims
//! nothing and says so. Stop requests for this node's runs come back with
//! each renewal, and the database's clock: each renewal measures this
//! machine's offset to it and corrects the daemon's clock
//! (`rea_store::clock`).
//!
//! Not here: anything sent on the main connection (the sweeper that
//! declares other nodes dead is `sweeper.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rea_store::cluster::NodeEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::{Client, Statement};
use tracing::{error, info, warn};

use super::statements::{db, within, HEARTBEAT};
use super::{lock, note_error, Shared};
use crate::settings::Settings;

pub(super) async fn heartbeat_loop(
    s: Settings,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<NodeEvent>,
) {
    let io = (s.lease / 2).max(Duration::from_millis(200));
    // Renewal is sent at t0; the lease ends at the database's
    // clock_timestamp() + lease, after t0 — so t0 + lease, less a margin
    // for our own scheduling, is a deadline the node can keep alone.
    let margin = s.heartbeat / 2;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut client: Option<(Client, Statement)> = None;
    loop {
        if lock(&shared).stopping {
            return;
        }
        let t0 = Instant::now();
        if client.is_none() {
            match connect_heartbeat(&s).await {
                Ok(c) => client = Some(c),
                Err(m) => {
                    warn!("cluster: {m}");
                    note_error(&shared, &m);
                }
            }
        }
        if let Some((c, hb)) = &client {
            let epoch = lock(&shared).epoch;
            let sent = rea_store::clock::machine_now();
            match renew(c, hb, &s, &hostname, io, epoch).await {
                Ok(Some((epoch, fences, db_now))) => {
                    let received = rea_store::clock::machine_now();
                    measured(&shared, &events, sent, received, db_now);
                    let deadline = t0 + s.lease.saturating_sub(margin);
                    renewed(&shared, &events, &s, epoch, t0, deadline);
                    for fence in fences {
                        let _ = events.send(NodeEvent::Stop { fence });
                    }
                }
                Ok(None) if epoch.is_some() => {
                    declared_dead(&shared, &events, &s);
                    continue;
                }
                Ok(None) => {
                    // The name is held by a live node on another host.
                }
                Err(m) => {
                    warn!("cluster heartbeat: {m}");
                    note_error(&shared, &m);
                    client = None;
                }
            }
        }
        expire(&shared, &events, &s);
        let next = t0 + s.heartbeat;
        tokio::time::sleep_until(next.max(Instant::now() + Duration::from_millis(20))).await;
    }
}

/// Round trips slower than this measure nothing: half of one is the error
/// of the measurement.
const MAX_MEASURING_RTT_MS: i64 = 400;

/// A correction this much nearer the last is not applied (the daemon's
/// clock does not jitter by the round trip's noise).
const CORRECTION_STEP_MS: i64 = 50;

/// The database's clock read `db_now` (the middle of its work) while a
/// statement sent at `sent` and answered at `received` (this machine's
/// clock) was in flight: its offset, the round trip corrected (taken at the
/// middle). It corrects the daemon's
/// clock when it moved by more than the noise; the daemon hears of it.
fn measured(
    shared: &Mutex<Shared>,
    events: &mpsc::UnboundedSender<NodeEvent>,
    sent: DateTime<Utc>,
    received: DateTime<Utc>,
    db_now: DateTime<Utc>,
) {
    let rtt = (received - sent).num_milliseconds();
    if !(0..=MAX_MEASURING_RTT_MS).contains(&rtt) {
        return;
    }
    let Some(offset_us) = (db_now - (sent + (received - sent) / 2)).num_microseconds() else {
        return;
    };
    // Rounded, not truncated: a node 2999.6 ms ahead is 3000 ms ahead.
    let offset = (offset_us as f64 / 1000.0).round() as i64;
    lock(shared).clock_offset_ms = Some(offset);
    let by_us = offset_us - rea_store::clock::correction_us();
    let by = (by_us as f64 / 1000.0).round() as i64;
    if by.abs() > CORRECTION_STEP_MS.max(rtt / 2) {
        rea_store::clock::set_correction_us(offset_us);
        if offset.abs() > rea_store::clock::TOLERANCE_MS {
            warn!(
                offset_ms = offset,
                "cluster: this machine's clock is {:.3} s {} the database's; scheduling on the database's",
                offset.abs() as f64 / 1000.0,
                if offset < 0 { "ahead of" } else { "behind" }
            );
        }
        let _ = events.send(NodeEvent::ClockCorrected { by_ms: by });
    }
}

/// The database's clock in the middle of a statement's work, from when it
/// arrived to when it answered: the reading that faces the middle of the
/// node's round trip (the work's own time is on neither side of it).
fn middle(arrived: DateTime<Utc>, answered: DateTime<Utc>) -> DateTime<Utc> {
    arrived + (answered - arrived) / 2
}

/// Registers (without an epoch) or renews the lease of `epoch`: the epoch
/// held, the fences of this node's runs someone asked to stop and the
/// database's clock in the middle of its work; None
/// when the name is another host's (registering) or the epoch was
/// declared dead or replaced (renewing: zero rows).
async fn renew(
    c: &Client,
    hb: &Statement,
    s: &Settings,
    hostname: &str,
    io: Duration,
    epoch: Option<i64>,
) -> Result<Option<(i64, Vec<i64>, DateTime<Utc>)>, String> {
    match epoch {
        None => register(c, s, hostname, io)
            .await
            .map(|r| r.map(|(e, at)| (e, Vec::new(), at))),
        Some(epoch) => within(io, c.query_opt(hb, &[&s.cluster, &s.node, &epoch]))
            .await
            .map(|row| {
                row.map(|row| {
                    let fences: Option<Vec<i64>> = row.get(3);
                    let (arrived, answered): (DateTime<Utc>, DateTime<Utc>) =
                        (row.get(4), row.get(2));
                    (epoch, fences.unwrap_or_default(), middle(arrived, answered))
                })
            }),
    }
}

/// The database renewed `epoch`'s lease, sent at `t0`: live until
/// `deadline`; the daemon hears of it if the lease was not live.
fn renewed(
    shared: &Mutex<Shared>,
    events: &mpsc::UnboundedSender<NodeEvent>,
    s: &Settings,
    epoch: i64,
    t0: Instant,
    deadline: Instant,
) {
    let back = {
        let mut sh = lock(shared);
        let was_live = sh.live_epoch().is_some();
        sh.epoch = Some(epoch);
        sh.deadline = Some(deadline);
        sh.renewed = t0;
        sh.lease_live = true;
        !was_live
    };
    if back {
        info!(epoch, node = s.node.as_str(), "cluster: lease held");
        let _ = events.send(NodeEvent::LeaseBack { epoch });
    }
}

/// Zero rows renewing: this epoch was declared dead (or replaced). The
/// node registers again; the daemon hears of it if the lease was live.
fn declared_dead(shared: &Mutex<Shared>, events: &mpsc::UnboundedSender<NodeEvent>, s: &Settings) {
    let was_live = {
        let mut sh = lock(shared);
        let was = sh.lease_live;
        sh.epoch = None;
        sh.lease_live = false;
        was
    };
    error!(
        node = s.node.as_str(),
        "cluster: this node was declared dead by the cluster (its lease ended); its runs are recorded as interrupted elsewhere; registering again"
    );
    if was_live {
        let _ = events.send(NodeEvent::LeaseLost {
            why: "this node was declared dead by the cluster".into(),
        });
    }
}

/// Past the local deadline a live lease is lost, without waiting for the
/// socket: the daemon hears of it once.
fn expire(shared: &Mutex<Shared>, events: &mpsc::UnboundedSender<NodeEvent>, s: &Settings) {
    let lost = {
        let mut sh = lock(shared);
        let expired = sh.lease_live && sh.deadline.is_some_and(|d| Instant::now() >= d);
        if expired {
            sh.lease_live = false;
        }
        expired
    };
    if lost {
        error!(
            node = s.node.as_str(),
            "cluster: lease not renewed in time (database unreachable?); no scheduled run starts until it is"
        );
        let _ = events.send(NodeEvent::LeaseLost {
            why: "the lease could not be renewed in time".into(),
        });
    }
}

pub(super) async fn connect_heartbeat(s: &Settings) -> Result<(Client, Statement), String> {
    let c = s.connect("rea heartbeat").await?;
    crate::migrate(&c, &s.node).await?;
    let hb = c.prepare(HEARTBEAT).await.map_err(db)?;
    Ok((c, hb))
}

/// Registers the node: Some(epoch and the database's clock), or None if the
/// name is held by a live node of another host (logged).
pub(super) async fn register(
    c: &Client,
    s: &Settings,
    hostname: &str,
    io: Duration,
) -> Result<Option<(i64, DateTime<Utc>)>, String> {
    let lease_ms = s.lease.as_millis().min(i32::MAX as u128) as i32;
    let heartbeat_ms = s.heartbeat.as_millis().min(i32::MAX as u128) as i32;
    let pid = std::process::id() as i32;
    let row = within(
        io,
        c.query_one(
            "select outcome, epoch, statement_timestamp(), clock_timestamp() from rea.register($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &s.cluster,
                &s.node,
                &s.host_id,
                &lease_ms,
                &heartbeat_ms,
                &hostname,
                &pid,
                &env!("CARGO_PKG_VERSION"),
            ],
        ),
    )
    .await?;
    let outcome: String = row.get(0);
    if outcome == "registered" {
        let epoch: i64 = row.get(1);
        info!(
            node = s.node.as_str(),
            epoch,
            cluster = s.cluster.as_str(),
            "cluster: node registered"
        );
        Ok(Some((epoch, middle(row.get(2), row.get(3)))))
    } else {
        warn!(
            node = s.node.as_str(),
            "cluster: the node name {:?} is held by a live node on another machine; waiting for it to leave or be declared dead",
            s.node
        );
        Ok(None)
    }
}
