//! Webhooks and pings (`webhook`, `ping`): the loop only builds the request
//! and queues it ([`Notifier::send`], a short lock and no I/O); worker
//! threads of their own ([`queue::WORKERS`], started at the first
//! delivery) send it with a timeout per attempt, retry it with backoff and
//! jitter, and give up when attempts or age run out. The queue is bounded
//! in items and bytes with a share per tenant and a reserve for the system
//! (`queue.rs`); what it drops and what fails is counted
//! (`rea_webhook_*`, rea-metrics(7)) and logged.
//!
//! Hooking another event in: build a [`Notification`] and call
//! [`Loop::notify`] (alerts: `Notification::Alert`); the job's `webhook`
//! filters (`alert`, `alert:KIND`) decide which endpoints get it.
//!
//! Deliveries live in memory only: those waiting when the daemon stops
//! are not sent.

mod body;
mod http;
pub(crate) mod queue;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use rea_core::notify::{Notification, Notify};
use rea_core::record::{Record, RunStatus};
use rea_core::tenant::Tenant;
use tracing::{debug, info, warn};

use queue::{Attempt, Fate, LaneKey, Method, Next, Queue, Request, Ticket};

use super::Loop;

/// What a delivery is about, borrowed.
#[derive(Clone, Copy)]
enum Event<'a> {
    Run(&'a Record),
    Alert(&'a Notification),
}

/// The loop's handle on the deliveries.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    host: String,
    /// Makes each delivery's id unique in this daemon's life.
    sequence: u64,
    /// This daemon's start, in the ids (so two daemons' ids differ).
    epoch: u64,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// `[daemon] webhook_private_targets`.
    private_targets: AtomicBool,
    started: AtomicBool,
    clients: OnceLock<http::Clients>,
    counts: Mutex<Counts>,
    queued: AtomicU64,
}

/// What the metrics show (`rea_webhook_*`), since the daemon started.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    /// (kind, result) → deliveries that ended so: `delivered`, `failed`
    /// (attempts or age used up, or a permanent answer), `refused` (a
    /// user's delivery to a private address), `expired` (waited too long
    /// to start), `dropped` (the queue was full).
    pub(crate) deliveries: BTreeMap<(&'static str, &'static str), u64>,
    /// kind → attempts after the first.
    pub(crate) retries: BTreeMap<&'static str, u64>,
    /// tenant key → deliveries dropped because the queue was full.
    pub(crate) dropped: BTreeMap<String, u64>,
    /// Deliveries waiting or in flight now.
    pub(crate) queued: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Notifier {
    pub(crate) fn new(private_targets: bool) -> Notifier {
        Notifier {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                wake: Condvar::new(),
                private_targets: AtomicBool::new(private_targets),
                started: AtomicBool::new(false),
                clients: OnceLock::new(),
                counts: Mutex::new(Counts::default()),
                queued: AtomicU64::new(0),
            }),
            host: rea_host::hostname(),
            sequence: 0,
            epoch: rea_store::clock::now().timestamp_millis() as u64,
        }
    }

    /// `[daemon] webhook_private_targets` after a reload.
    pub(crate) fn set_private_targets(&self, allowed: bool) {
        self.shared
            .private_targets
            .store(allowed, Ordering::Relaxed);
    }

    /// Queues what `notify` asks for `n`; never waits for the network.
    pub(crate) fn send(&mut self, notify: &Notify, n: &Notification) {
        match n {
            Notification::Run { record } => self.send_run(notify, record),
            Notification::Alert { .. } => self.send_event(notify, n.job(), Event::Alert(n)),
        }
    }

    /// The same for a run's record, borrowed.
    pub(crate) fn send_run(&mut self, notify: &Notify, record: &Record) {
        self.send_event(notify, record.job.as_deref(), Event::Run(record));
    }

    fn send_event(&mut self, notify: &Notify, job: Option<&str>, e: Event<'_>) {
        let Some(job) = job else { return };
        for (i, hook) in notify.webhooks.iter().enumerate() {
            let (event, body) = match e {
                Event::Run(record) => {
                    let Some(status) = record.status.filter(|s| hook.on.matches_run(*s)) else {
                        continue;
                    };
                    (
                        body::event_name(status).to_string(),
                        body::run_body(record, &self.host),
                    )
                }
                Event::Alert(n) => {
                    let Notification::Alert {
                        job,
                        kind,
                        state,
                        reason,
                        at,
                    } = n
                    else {
                        continue;
                    };
                    if !hook.on.matches_alert(kind) {
                        continue;
                    }
                    (
                        format!("alert:{kind}"),
                        body::alert_body(job, kind, *state, reason, *at, &self.host),
                    )
                }
            };
            let request = Request {
                method: Method::Post,
                url: hook.url.clone(),
                body,
                content_type: "application/json",
                id: self.next_id(),
                event,
                timeout: hook.timeout,
                attempts: hook.attempts,
                job: job.to_string(),
                kind: "webhook",
            };
            self.offer(job, i as u8, request);
        }
        if let (Some(ping), Event::Run(record)) = (&notify.ping, e) {
            let status = record.status.unwrap_or(RunStatus::Started);
            if let Some((post, url, body)) = body::ping(ping.style, &ping.url, record) {
                let request = Request {
                    method: if post { Method::Post } else { Method::Get },
                    url,
                    body,
                    content_type: "text/plain; charset=utf-8",
                    id: self.next_id(),
                    event: body::event_name(status).to_string(),
                    timeout: ping.timeout,
                    attempts: ping.attempts,
                    job: job.to_string(),
                    kind: "ping",
                };
                self.offer(job, queue::PING, request);
            }
        }
    }

    fn next_id(&mut self) -> String {
        self.sequence += 1;
        format!("{:x}-{}", self.epoch, self.sequence)
    }

    fn offer(&mut self, job: &str, slot: u8, request: Request) {
        let tenant = Tenant::of(job).key();
        let kind = request.kind;
        let lane = LaneKey {
            job: job.to_string(),
            slot,
        };
        let result = lock(&self.shared.queue).offer(&tenant, lane, request, Instant::now());
        match result {
            Ok(()) => {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
                self.start_workers();
                self.shared.wake.notify_one();
            }
            Err(full) => {
                let mut c = lock(&self.shared.counts);
                *c.deliveries.entry((kind, "dropped")).or_default() += 1;
                let dropped = c.dropped.entry(tenant.clone()).or_default();
                *dropped += 1;
                let dropped = *dropped;
                drop(c);
                // The 1st, 2nd, 4th, 8th, ... drop of a tenant is logged: a
                // dead endpoint behind jobs due every second must not turn
                // into a log line per event written by the loop.
                if dropped.is_power_of_two() {
                    warn!(
                        job,
                        tenant = tenant.as_str(),
                        kind,
                        dropped,
                        "{kind} not sent: {} (at most {} per endpoint, {} deliveries or {} bytes per tenant, {} in all); {dropped} dropped so far for this tenant (rea_webhook_dropped_total)",
                        match full {
                            queue::Full::Lane => "this endpoint is behind",
                            queue::Full::Tenant => "this tenant's delivery queue is full",
                            queue::Full::Total => "the delivery queue is full",
                        },
                        queue::LANE_ITEMS,
                        queue::TENANT_ITEMS,
                        queue::TENANT_BYTES,
                        queue::TOTAL_ITEMS,
                    );
                }
            }
        }
    }

    /// The workers, at the first delivery: a daemon without webhooks has
    /// no thread for them.
    fn start_workers(&self) {
        if self.shared.started.swap(true, Ordering::AcqRel) {
            return;
        }
        for i in 0..queue::WORKERS {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name(format!("rea-webhook-{i}"))
                .spawn(move || worker(&shared));
            if let Err(e) = spawned {
                warn!("cannot start a webhook worker: {e}");
                if i == 0 {
                    // Try again at the next delivery.
                    self.shared.started.store(false, Ordering::Release);
                }
                return;
            }
        }
    }

    /// The counts, for a scrape.
    pub(crate) fn counts(&self) -> Counts {
        let mut c = lock(&self.shared.counts).clone();
        c.queued = self.shared.queued.load(Ordering::Relaxed);
        c
    }
}

/// A worker: takes the next head it may send, sends it, says how it went.
fn worker(shared: &Shared) {
    let mut expired = Vec::new();
    loop {
        let ticket = {
            let mut q = lock(&shared.queue);
            loop {
                let now = Instant::now();
                match q.next(now, &mut expired) {
                    Next::Send(t) => break t,
                    Next::Wait(until) => {
                        if !expired.is_empty() {
                            break_expired(shared, &mut expired);
                        }
                        q = match until {
                            Some(at) => {
                                shared
                                    .wake
                                    .wait_timeout(q, at.saturating_duration_since(now))
                                    .unwrap_or_else(|p| p.into_inner())
                                    .0
                            }
                            None => shared.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
                        };
                    }
                }
            }
        };
        break_expired(shared, &mut expired);
        let clients = shared.clients.get_or_init(http::Clients::new);
        let public_only =
            ticket.tenant != "system" && !shared.private_targets.load(Ordering::Relaxed);
        let (how, said) = clients.send(&ticket.request, ticket.attempt, public_only);
        let fate = lock(&shared.queue).finish(&ticket, how, Instant::now(), fastrand::f64());
        shared.wake.notify_all();
        account(shared, &ticket, how, fate, &said);
    }
}

/// Counts and logs the heads given up for their age.
fn break_expired(shared: &Shared, expired: &mut Vec<Arc<Request>>) {
    for r in expired.drain(..) {
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        *lock(&shared.counts)
            .deliveries
            .entry((r.kind, "expired"))
            .or_default() += 1;
        warn!(
            job = r.job.as_str(),
            kind = r.kind,
            event = r.event.as_str(),
            "{} not sent: it waited longer than {}s",
            r.kind,
            queue::MAX_AGE.as_secs()
        );
    }
}

fn account(shared: &Shared, t: &Ticket, how: Attempt, fate: Fate, said: &str) {
    let r = &t.request;
    let mut c = lock(&shared.counts);
    if t.attempt > 1 {
        *c.retries.entry(r.kind).or_default() += 1;
    }
    let result = match fate {
        Fate::Retry(_) => None,
        Fate::Delivered => Some("delivered"),
        Fate::Failed if how == Attempt::Permanent && said.starts_with("refused") => Some("refused"),
        Fate::Failed => Some("failed"),
    };
    if let Some(result) = result {
        *c.deliveries.entry((r.kind, result)).or_default() += 1;
    }
    drop(c);
    let (job, event) = (r.job.as_str(), r.event.as_str());
    match fate {
        Fate::Delivered => {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            debug!(
                job,
                event,
                attempt = t.attempt,
                "{} delivered ({said})",
                r.kind
            );
        }
        Fate::Retry(at) => info!(
            job,
            event,
            attempt = t.attempt,
            "{} attempt failed ({said}); retried in {}ms",
            r.kind,
            at.saturating_duration_since(Instant::now()).as_millis()
        ),
        Fate::Failed => {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            warn!(
                job,
                event,
                attempts = t.attempt,
                "{} not delivered: {said}",
                r.kind
            );
        }
    }
}

impl Loop {
    /// A history record went by: its job's webhooks and ping, if it has
    /// any (one map lookup otherwise).
    pub(super) fn notify_record(&mut self, rec: &Record) {
        if rec.status.is_none() {
            return;
        }
        let Some(notify) = rec
            .job
            .as_deref()
            .and_then(|name| self.engine.job_def(name))
            .and_then(|def| def.extras().notify.clone())
        else {
            return;
        };
        self.webhooks.send_run(&notify, rec);
    }

    /// Sends `n` to its job's webhooks (and, for a run, its ping): the one
    /// entry for events other than history records (alerts).
    pub(super) fn notify(&mut self, n: &Notification) {
        let Some(notify) = n
            .job()
            .and_then(|name| self.engine.job_def(name))
            .and_then(|def| def.extras().notify.clone())
        else {
            return;
        };
        self.webhooks.send(&notify, n);
    }
}
