//! `subscribe`: an overview, then [`Event`] lines pushed as things happen
//! (runs started and ended, a job's summary changed, pause and resume,
//! reloads, one-shots, this node's lease), and the output of one run the
//! subscriber follows: one running, or one waiting to start (for a slot or
//! for its job's previous run), which waits in `follow`'s list like
//! `trigger --follow` and is handed its run's tap when the run spawns, so
//! its output comes from the first byte. The wait is bounded by the
//! subscriber's own slot.
//!
//! The loop never waits for a subscriber. It puts each event, once
//! serialized, into every interested subscriber's queue, bounded in items
//! and bytes ([`QUEUE_ITEMS`], [`QUEUE_BYTES`]); an event that does not fit
//! is dropped and counted, and the subscriber's next line is
//! [`Event::Lost`]. Each subscriber is a task that waits on its queue's
//! `Notify` (no timer: an idle subscriber costs no wakeup) and hands lines
//! to its connection through a small channel, so a slow client holds at
//! most its queue and the connection's buffer in the daemon. A client
//! that hangs up closes that channel: its task ends at once, giving back
//! its slot, and the loop forgets it on its next event.
//!
//! A user's subscription gets her jobs' events only (by owner, as
//! [`Scope::owns`] decides, never by the names her file holds now), and
//! its lines are localized like every answer to her. Subscribers are
//! counted against [`MAX_SUBSCRIBERS`], a user against her share
//! (`crate::quota`).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rea_core::engine::Source;
use rea_core::record::{Event as RecordEvent, Record};
use rea_core::tenant::Tenant;
use rea_proto::live::{Event, Subscription};
use serde_json::Value;
use tokio::sync::{mpsc, Notify};

use super::live::summary_of;
use super::users::Scope;
use super::Loop;
use crate::control::protocol::Ts;
use crate::control::{Reply, Response};
use crate::quota::{Holder, Permit, Quota, Refused};
use rea_exec::Follower;

/// Subscribers at once, daemon-wide; a user holds at most a quarter, and
/// an eighth are root's alone.
pub(super) const MAX_SUBSCRIBERS: usize = 64;

/// Events a subscriber's queue holds at most...
const QUEUE_ITEMS: usize = 1024;
/// ...and bytes (their lines' length).
const QUEUE_BYTES: usize = 256 * 1024;

/// Lines handed to the connection and not yet written.
const LINES_QUEUED: usize = 16;

/// The loop's side of the subscribers.
pub(super) struct Subscribers {
    slots: Quota<String>,
    list: Vec<Subscriber>,
}

impl Default for Subscribers {
    fn default() -> Self {
        Subscribers {
            slots: Quota::new(MAX_SUBSCRIBERS),
            list: Vec::new(),
        }
    }
}

struct Subscriber {
    scope: Scope,
    queue: Arc<Queue>,
}

/// One subscriber's queue, shared by the loop (which pushes) and its task
/// (which takes). Short critical sections only, never across an await.
#[derive(Default)]
struct Queue {
    inner: Mutex<Held>,
    wake: Notify,
    /// Set by the task when its client is gone.
    gone: AtomicBool,
}

#[derive(Default)]
struct Held {
    lines: VecDeque<Line>,
    bytes: usize,
    /// Events dropped since the last `lost` line was queued.
    lost: u64,
}

/// An event ready to go: its value and the length of its line.
#[derive(Clone)]
struct Line {
    value: Value,
    len: usize,
}

impl Line {
    fn of(event: &Event) -> Line {
        let value = serde_json::to_value(event).unwrap_or(Value::Null);
        // The line's length as written (`{"v":1,"ok":true,"data":...}`).
        let len = value.to_string().len() + 24;
        Line { value, len }
    }
}

impl Queue {
    /// Queues `line`, or drops and counts it when the queue is full. A
    /// `lost` line goes first once there is room for it.
    fn push(&self, line: Line) {
        let mut held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let lost = (held.lost > 0).then(|| Line::of(&Event::Lost { events: held.lost }));
        let need_items = 1 + usize::from(lost.is_some());
        let need_bytes = line.len + lost.as_ref().map_or(0, |l| l.len);
        if held.lines.len() + need_items > QUEUE_ITEMS || held.bytes + need_bytes > QUEUE_BYTES {
            held.lost += 1;
            return;
        }
        if let Some(lost) = lost {
            held.lost = 0;
            held.bytes += lost.len;
            held.lines.push_back(lost);
        }
        held.bytes += line.len;
        held.lines.push_back(line);
        drop(held);
        self.wake.notify_one();
    }

    /// Everything queued, and a `lost` line after it when events were
    /// dropped since.
    fn take(&self) -> VecDeque<Line> {
        let mut held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = std::mem::take(&mut held.lines);
        held.bytes = 0;
        if held.lost > 0 {
            lines.push_back(Line::of(&Event::Lost { events: held.lost }));
            held.lost = 0;
        }
        lines
    }
}

impl Subscribers {
    /// Whether anyone listens (the loop builds no event otherwise).
    pub(super) fn any(&self) -> bool {
        !self.list.is_empty()
    }

    /// Sends `event` to every subscriber for whom `visible` holds (given
    /// its scope); forgets the ones whose clients left.
    fn publish(&mut self, event: &Event, visible: impl Fn(&Scope) -> bool) {
        self.list.retain(|s| !s.queue.gone.load(Ordering::Relaxed));
        let mut line: Option<Line> = None;
        for s in &self.list {
            if visible(&s.scope) {
                let line = line.get_or_insert_with(|| Line::of(event));
                s.queue.push(line.clone());
            }
        }
    }

    /// Sends each subscriber the event `make` builds for it (None: nothing
    /// for this one), e.g. the part of a list of jobs it may see.
    fn publish_each(&mut self, make: impl Fn(&Scope) -> Option<Event>) {
        self.list.retain(|s| !s.queue.gone.load(Ordering::Relaxed));
        for s in &self.list {
            if let Some(event) = make(&s.scope) {
                s.queue.push(Line::of(&event));
            }
        }
    }
}

impl Loop {
    /// `subscribe`: the overview now, then events as they come.
    pub(super) fn subscribe(&mut self, sub: Subscription, scope: &Scope) -> Reply {
        let holder = match scope {
            Scope::Admin => Holder::Admin,
            Scope::User(me) => Holder::Other(me.clone()),
        };
        self.subscribers
            .list
            .retain(|s| !s.queue.gone.load(Ordering::Relaxed));
        let slot = match self.subscribers.slots.try_acquire(holder) {
            Ok(slot) => slot,
            Err(refused) => return Reply::Done(too_many(refused)),
        };
        let output = match &sub.follow {
            None => Output::None,
            Some(run) => match self.followed(run, scope) {
                Some(output) => output,
                None => {
                    return Reply::Done(Response::err(
                        "unknown_run",
                        format!("no run {run:?} is running or waiting to start; see `rea status`"),
                    ))
                }
            },
        };
        let overview = self.overview(rea_store::clock::now(), scope);
        let queue = Arc::new(Queue::default());
        self.subscribers.list.push(Subscriber {
            scope: scope.clone(),
            queue: Arc::clone(&queue),
        });
        let (tx, rx) = mpsc::channel(LINES_QUEUED);
        tokio::spawn(feed(queue, output, tx, slot));
        Reply::Stream(Response::with(&overview), rx)
    }

    /// The output of `run` for a subscriber in `scope`: at once if it
    /// runs, once it starts if it waits for a slot or for its job's
    /// previous run. None when `scope` may not see it (one-shots are
    /// root's) or no such run is running or waiting.
    fn followed(&mut self, run: &str, scope: &Scope) -> Option<Output> {
        let visible = |source: &Source| {
            scope.owns(source.name()) && (source.oneshot().is_none() || *scope == Scope::Admin)
        };
        if let Some(r) = self.engine.run_views().find(|r| r.run == run) {
            return visible(r.source)
                .then(|| self.runs.follow(run))
                .flatten()
                .map(|f| Output::Following(run.to_string(), f));
        }
        if !visible(self.engine.queued_run(run)?) {
            return None;
        }
        Some(Output::Waiting(
            run.to_string(),
            Box::pin(self.await_start(run)),
        ))
    }

    /// What a history record the daemon writes tells subscribers: a run
    /// started or ended, a job's summary changed, a one-shot's state.
    pub(super) fn publish_record(&mut self, rec: &Record, summary_changed: bool) {
        if !self.subscribers.any() {
            return;
        }
        let Some(name) = rec.job.as_deref() else {
            return;
        };
        let is_job = self.engine.has_job(name);
        // One-shots are root's.
        let visible = |scope: &Scope| scope.owns(name) && (is_job || *scope == Scope::Admin);
        let mut changed = summary_changed;
        if rec.event == RecordEvent::Run {
            let (Some(run), Some(status)) = (rec.run.as_deref(), rec.status) else {
                return;
            };
            let event = if status.is_final() {
                Event::RunEnded {
                    run: run.to_string(),
                    job: name.to_string(),
                    status: status.as_str().to_string(),
                    at: Ts(rec.ended.unwrap_or(rec.ts)),
                    duration_ms: rec.duration_ms.unwrap_or(0),
                    exit_code: rec.exit_code,
                }
            } else {
                changed = true;
                Event::RunStarted {
                    run: run.to_string(),
                    job: name.to_string(),
                    at: Ts(rec.started.unwrap_or(rec.ts)),
                    node: self.node_name(),
                }
            };
            self.subscribers.publish(&event, visible);
            if !is_job {
                let state = if status.is_final() {
                    status.as_str()
                } else {
                    "running"
                };
                self.publish_oneshot(name, state);
            }
        }
        if is_job && changed {
            if let Some(v) = self.engine.job_view(name) {
                let event = Event::Job {
                    summary: Box::new(summary_of(&v)),
                };
                self.subscribers.publish(&event, visible);
            }
        }
    }

    /// A one-shot's state changed (submitted, started, ended, cancelled).
    pub(super) fn publish_oneshot(&mut self, id: &str, state: &str) {
        if !self.subscribers.any() {
            return;
        }
        let event = Event::OneShot {
            id: id.to_string(),
            state: state.to_string(),
        };
        self.subscribers
            .publish(&event, |scope| *scope == Scope::Admin);
    }

    /// Jobs were paused or resumed: each subscriber hears of hers, and of
    /// their summaries.
    pub(super) fn publish_pause(&mut self, jobs: &[String], paused: bool) {
        if !self.subscribers.any() || jobs.is_empty() {
            return;
        }
        self.subscribers.publish_each(|scope| {
            let jobs: Vec<String> = jobs.iter().filter(|j| scope.owns(j)).cloned().collect();
            (!jobs.is_empty()).then_some(if paused {
                Event::Paused { jobs }
            } else {
                Event::Resumed { jobs }
            })
        });
    }

    /// The job files were read again: each subscriber is told how many
    /// jobs it sees now.
    pub(super) fn publish_reload(&mut self) {
        if !self.subscribers.any() {
            return;
        }
        let at = Ts(rea_store::clock::now());
        let all = self.config.jobs.len();
        let users: Vec<String> = self
            .subscribers
            .list
            .iter()
            .filter_map(|s| match &s.scope {
                Scope::User(me) => Some(me.clone()),
                Scope::Admin => None,
            })
            .collect();
        let mut per_user: HashMap<&str, usize> = users.iter().map(|u| (u.as_str(), 0)).collect();
        if !per_user.is_empty() {
            for j in &self.config.jobs {
                if let Tenant::User(u) = Tenant::of(&j.name) {
                    if let Some(n) = per_user.get_mut(u) {
                        *n += 1;
                    }
                }
            }
        }
        self.subscribers.publish_each(|scope| {
            let jobs = match scope {
                Scope::Admin => all,
                Scope::User(me) => per_user.get(me.as_str()).copied().unwrap_or(0),
            };
            Some(Event::Reloaded { at, jobs })
        });
    }

    /// A run started on another node (cluster mode: `peers.rs`): told as
    /// this node's own starts are, with its node.
    pub(super) fn publish_peer_start(&mut self, r: &rea_store::cluster::PeerRun) {
        if !self.subscribers.any() {
            return;
        }
        let is_job = self.engine.has_job(&r.job);
        let event = Event::RunStarted {
            run: r.run.clone(),
            job: r.job.clone(),
            at: Ts(r.since),
            node: Some(r.node.clone()),
        };
        // One-shots are root's.
        self.subscribers.publish(&event, |scope: &Scope| {
            scope.owns(&r.job) && (is_job || *scope == Scope::Admin)
        });
    }

    /// Another node joined, left, went silent or was declared dead
    /// (cluster mode: `peers.rs`): everyone is told.
    pub(super) fn publish_peer_node(&mut self, node: &str, state: &str) {
        if !self.subscribers.any() {
            return;
        }
        let event = Event::Node {
            node: node.to_string(),
            state: state.to_string(),
        };
        self.subscribers.publish(&event, |_| true);
    }

    /// This node's lease changed (cluster mode): everyone is told.
    pub(super) fn publish_node(&mut self, state: &str) {
        if !self.subscribers.any() {
            return;
        }
        let event = Event::Node {
            node: self.node_name().unwrap_or_default(),
            state: state.to_string(),
        };
        self.subscribers.publish(&event, |_| true);
    }
}

fn too_many(refused: Refused) -> Response {
    let why = match refused {
        Refused::Full => format!(
            "too many subscribers: the daemon serves {MAX_SUBSCRIBERS} already; try again later"
        ),
        Refused::Share(share) => format!(
            "too many subscriptions of yours: each user may hold {share} at once; close one and try again"
        ),
    };
    Response::err("refused", why)
}

/// The run a subscriber follows.
enum Output {
    None,
    /// It waits to start: its output once it does (None: it never will).
    Waiting(
        String,
        Pin<Box<dyn Future<Output = Option<Follower>> + Send>>,
    ),
    Following(String, Follower),
}

/// A subscriber's task: its queue's lines, and its followed run's output,
/// to its connection, until the client is gone.
async fn feed(
    queue: Arc<Queue>,
    mut output: Output,
    tx: mpsc::Sender<Response>,
    _slot: Permit<String>,
) {
    'serve: loop {
        for line in queue.take() {
            if tx.send(Response::ok(line.value)).await.is_err() {
                break 'serve;
            }
        }
        // Registered before the queue is looked at again, so a push in
        // between is not missed (`Notify` keeps one permit anyway).
        let woken = queue.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if !queue
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines
            .is_empty()
        {
            continue;
        }
        let (run, chunk) = match &mut output {
            Output::Following(run, follower) => tokio::select! {
                () = &mut woken => continue,
                () = tx.closed() => break,
                chunk = follower.next() => (run.clone(), chunk),
            },
            Output::Waiting(run, started) => {
                let follower = tokio::select! {
                    () = &mut woken => continue,
                    () = tx.closed() => break,
                    follower = started => follower,
                };
                // Started (its output from the first byte), or ended
                // without starting (its end comes as `run_ended`).
                output = match follower {
                    Some(f) => Output::Following(std::mem::take(run), f),
                    None => Output::None,
                };
                continue;
            }
            Output::None => tokio::select! {
                () = &mut woken => continue,
                () = tx.closed() => break,
            },
        };
        let Some(chunk) = chunk else {
            // The run's output is over; its end comes as `run_ended`.
            output = Output::None;
            continue;
        };
        let event = Event::Output {
            run,
            text: chunk.text,
            skipped: chunk.skipped,
        };
        if tx.send(Response::ok(Line::of(&event).value)).await.is_err() {
            break;
        }
    }
    queue.gone.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(i: usize) -> Line {
        Line::of(&Event::Reloaded {
            at: Ts(chrono::DateTime::from_timestamp(i as i64, 0).unwrap()),
            jobs: i,
        })
    }

    #[test]
    fn a_full_queue_drops_and_counts_then_says_so_in_order() {
        let q = Queue::default();
        for i in 0..QUEUE_ITEMS + 5 {
            q.push(started(i));
        }
        let lines = q.take();
        // Everything that fitted, then how many were lost.
        assert_eq!(lines.len(), QUEUE_ITEMS + 1);
        assert_eq!(lines[QUEUE_ITEMS].value["event"], "lost");
        assert_eq!(lines[QUEUE_ITEMS].value["events"], 5);
        // Room again: a new event comes alone, nothing more was lost.
        q.push(started(1));
        let lines = q.take();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].value["event"], "reloaded");
    }

    #[test]
    fn the_lost_line_comes_before_newer_events() {
        let q = Queue::default();
        for i in 0..QUEUE_ITEMS + 3 {
            q.push(started(i));
        }
        // The client read some: the next event fits, after a `lost`.
        {
            let mut held = q.inner.lock().unwrap();
            for _ in 0..10 {
                let l = held.lines.pop_front().unwrap();
                held.bytes -= l.len;
            }
        }
        q.push(started(7));
        let lines = q.take();
        let n = lines.len();
        assert_eq!(lines[n - 2].value["event"], "lost");
        assert_eq!(lines[n - 2].value["events"], 3);
        assert_eq!(lines[n - 1].value["jobs"], 7);
    }

    #[test]
    fn a_queue_is_bounded_in_bytes_too() {
        let q = Queue::default();
        let big = Line::of(&Event::Output {
            run: "r".into(),
            text: "x".repeat(100_000),
            skipped: 0,
        });
        for _ in 0..5 {
            q.push(big.clone());
        }
        let lines = q.take();
        assert_eq!(lines.len(), 3, "two fit in 256 KiB, then a lost line");
        assert_eq!(lines[2].value["events"], 3);
    }
}
