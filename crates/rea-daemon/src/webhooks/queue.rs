//! The deliveries waiting and in flight, bounded, with each tenant's share:
//! what the workers take from and give back to. No clock and no I/O: `now`
//! is an argument, so the bounds, the order and the shares are tested with
//! plain values.
//!
//! - **Lanes keep order.** A job's deliveries to one endpoint (a webhook,
//!   its ping) are a lane: only the lane's head is sent, retried until it
//!   is delivered or given up, and only then the next. So a run's start
//!   ping always reaches the service before its end, whatever the retries.
//! - **Bounded in items and bytes**, per tenant ([`TENANT_ITEMS`],
//!   [`TENANT_BYTES`]), per lane ([`LANE_ITEMS`]: a dead endpoint fills its
//!   own lane, not the tenant's queue) and in all ([`TOTAL_ITEMS`], [`TOTAL_BYTES`]), of
//!   which users together may take all but an eighth: the system's jobs
//!   always find room. What does not fit is dropped and counted.
//! - **Shares of the workers.** A user's deliveries hold at most
//!   [`USER_IN_FLIGHT`] of the [`WORKERS`] at once, and users together all
//!   but [`SYSTEM_RESERVE`]: one user's dead endpoint (each attempt waiting
//!   out its timeout) slows only her own deliveries. Tenants are served in
//!   turn (round robin), so a tenant with a long queue does not delay the
//!   others either.
//! - **Retries are bounded**: the endpoint's `attempts` (at most
//!   [`MAX_ATTEMPTS`]), none started
//!   later than [`MAX_AGE`] after the event, spaced by an exponential
//!   backoff with jitter (the jitter is the caller's random number).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Worker threads (each sends one request at a time).
pub(crate) const WORKERS: usize = 8;
/// Workers one user's deliveries may hold at once.
pub(crate) const USER_IN_FLIGHT: usize = 2;
/// Workers only the system's deliveries may take.
pub(crate) const SYSTEM_RESERVE: usize = 2;
/// Deliveries waiting (or in flight) per tenant.
pub(crate) const TENANT_ITEMS: usize = 256;
/// Deliveries waiting in one lane (a job's endpoint): a dead endpoint fills
/// its lane, not its tenant's whole queue, and the tenant's other
/// endpoints go on.
pub(crate) const LANE_ITEMS: usize = 32;
/// Bytes of requests waiting per tenant.
pub(crate) const TENANT_BYTES: usize = 2 << 20;
/// Deliveries waiting in all; users together get all but an eighth.
pub(crate) const TOTAL_ITEMS: usize = 4096;
/// Bytes waiting in all; users together get all but an eighth.
pub(crate) const TOTAL_BYTES: usize = 16 << 20;
/// Attempts of one delivery at most, the first included (a job's
/// `attempts` is at most this).
pub(crate) const MAX_ATTEMPTS: u32 = rea_core::notify::MAX_ATTEMPTS;
/// No attempt starts later than this after the delivery was queued.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// The first retry's delay; doubled at each, up to [`MAX_DELAY`].
pub(crate) const FIRST_DELAY: Duration = Duration::from_secs(1);
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(60);

/// A request to send, as built when the event happened.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) body: Vec<u8>,
    pub(crate) content_type: &'static str,
    /// `X-Rea-Event` (and what the log says it was).
    pub(crate) event: String,
    /// `X-Rea-Delivery`: the same for every attempt, so a receiver can
    /// tell a retry from a new event.
    pub(crate) id: String,
    pub(crate) timeout: Duration,
    /// Attempts in all (at most [`MAX_ATTEMPTS`]).
    pub(crate) attempts: u32,
    pub(crate) job: String,
    /// `webhook` or `ping` (the metrics' label).
    pub(crate) kind: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
}

impl Request {
    pub(crate) fn bytes(&self) -> usize {
        self.url.len() + self.body.len() + self.event.len() + self.job.len() + 128
    }
}

/// A lane: one job's deliveries to one endpoint (`slot`: its webhook's
/// index, or [`PING`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LaneKey {
    pub(crate) job: String,
    pub(crate) slot: u8,
}

/// The ping's slot in [`LaneKey`].
pub(crate) const PING: u8 = u8::MAX;

struct Delivery {
    request: Arc<Request>,
    /// Attempts made so far.
    attempts: u32,
    queued: Instant,
    not_before: Instant,
}

#[derive(Default)]
struct Lane {
    items: VecDeque<Delivery>,
    /// Its head is being sent.
    busy: bool,
}

#[derive(Default)]
struct TenantQueue {
    lanes: HashMap<LaneKey, Lane>,
    items: usize,
    bytes: usize,
    in_flight: usize,
}

/// Why a delivery was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The lane's bound (its endpoint is behind).
    Lane,
    /// The tenant's own bound.
    Tenant,
    /// The bound of all (or of all users).
    Total,
}

/// A head taken by a worker: give it back with [`Queue::finish`].
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) tenant: String,
    pub(crate) lane: LaneKey,
    pub(crate) request: Arc<Request>,
    /// This attempt's number, from 1.
    pub(crate) attempt: u32,
}

/// How an attempt went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Delivered,
    /// Worth another attempt (connection, timeout, 5xx, 408, 429).
    Transient,
    /// Not worth another (4xx, a refused address).
    Permanent,
}

/// What became of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Delivered,
    /// Another attempt at this instant.
    Retry(Instant),
    /// Given up: a permanent failure, or attempts or age used up.
    Failed,
}

/// What a worker finds.
#[derive(Debug)]
pub(crate) enum Next {
    Send(Ticket),
    /// Nothing to send before this instant (None: until something is queued).
    Wait(Option<Instant>),
}

#[derive(Default)]
pub(crate) struct Queue {
    /// Ordered, for the round robin.
    tenants: BTreeMap<String, TenantQueue>,
    items: usize,
    bytes: usize,
    users_items: usize,
    users_bytes: usize,
    users_in_flight: usize,
    in_flight: usize,
    /// The tenant served last.
    last: Option<String>,
}

fn is_system(tenant: &str) -> bool {
    tenant == "system"
}

impl Queue {
    /// Queues `request` at the end of its lane.
    pub(crate) fn offer(
        &mut self,
        tenant: &str,
        lane: LaneKey,
        request: Request,
        now: Instant,
    ) -> Result<(), Full> {
        let size = request.bytes();
        let system = is_system(tenant);
        let reserve_items = TOTAL_ITEMS / 8;
        let reserve_bytes = TOTAL_BYTES / 8;
        if self.items >= TOTAL_ITEMS
            || self.bytes + size > TOTAL_BYTES
            || (!system
                && (self.users_items >= TOTAL_ITEMS - reserve_items
                    || self.users_bytes + size > TOTAL_BYTES - reserve_bytes))
        {
            return Err(Full::Total);
        }
        let t = self.tenants.entry(tenant.to_string()).or_default();
        if t.items >= TENANT_ITEMS || t.bytes + size > TENANT_BYTES {
            if t.items == 0 {
                self.tenants.remove(tenant);
            }
            return Err(Full::Tenant);
        }
        let l = t.lanes.entry(lane).or_default();
        if l.items.len() >= LANE_ITEMS {
            return Err(Full::Lane);
        }
        l.items.push_back(Delivery {
            request: Arc::new(request),
            attempts: 0,
            queued: now,
            not_before: now,
        });
        t.items += 1;
        t.bytes += size;
        self.items += 1;
        self.bytes += size;
        if !system {
            self.users_items += 1;
            self.users_bytes += size;
        }
        Ok(())
    }

    /// The next head to send, tenants in turn; heads too old to send are
    /// given up on the way (returned in `expired`).
    pub(crate) fn next(&mut self, now: Instant, expired: &mut Vec<Arc<Request>>) -> Next {
        self.expire(now, expired);
        if self.in_flight >= WORKERS {
            return Next::Wait(None);
        }
        let order: Vec<String> = match &self.last {
            Some(last) => self
                .tenants
                .range::<String, _>((
                    std::ops::Bound::Excluded(last.clone()),
                    std::ops::Bound::Unbounded,
                ))
                .chain(self.tenants.range::<String, _>(..=last.clone()))
                .map(|(k, _)| k.clone())
                .collect(),
            None => self.tenants.keys().cloned().collect(),
        };
        let mut wake: Option<Instant> = None;
        for tenant in order {
            let system = is_system(&tenant);
            if !system && self.users_in_flight >= WORKERS - SYSTEM_RESERVE {
                continue;
            }
            let Some(t) = self.tenants.get_mut(&tenant) else {
                continue;
            };
            if !system && t.in_flight >= USER_IN_FLIGHT {
                continue;
            }
            // The lane whose head is due first.
            let mut best: Option<(&LaneKey, Instant)> = None;
            for (key, lane) in &t.lanes {
                if lane.busy {
                    continue;
                }
                if let Some(head) = lane.items.front() {
                    if best.is_none_or(|(_, at)| head.not_before < at) {
                        best = Some((key, head.not_before));
                    }
                }
            }
            let Some((key, at)) = best else { continue };
            if at > now {
                wake = Some(wake.map_or(at, |w| w.min(at)));
                continue;
            }
            let key = key.clone();
            let lane = t.lanes.get_mut(&key).expect("the lane just found");
            lane.busy = true;
            let head = lane.items.front_mut().expect("its head");
            head.attempts += 1;
            let ticket = Ticket {
                tenant: tenant.clone(),
                lane: key,
                request: Arc::clone(&head.request),
                attempt: head.attempts,
            };
            t.in_flight += 1;
            self.in_flight += 1;
            if !system {
                self.users_in_flight += 1;
            }
            self.last = Some(tenant);
            return Next::Send(ticket);
        }
        Next::Wait(wake)
    }

    /// An attempt of `ticket` ended: the head is delivered, given up, or
    /// waits for its next attempt (`jitter` in [0, 1): a fraction of the
    /// delay added, so that deliveries that failed together do not retry
    /// together).
    pub(crate) fn finish(
        &mut self,
        ticket: &Ticket,
        how: Attempt,
        now: Instant,
        jitter: f64,
    ) -> Fate {
        let system = is_system(&ticket.tenant);
        self.in_flight -= 1;
        if !system {
            self.users_in_flight -= 1;
        }
        let Some(t) = self.tenants.get_mut(&ticket.tenant) else {
            return Fate::Failed;
        };
        t.in_flight -= 1;
        let Some(lane) = t.lanes.get_mut(&ticket.lane) else {
            return Fate::Failed;
        };
        lane.busy = false;
        let Some(head) = lane.items.front_mut() else {
            return Fate::Failed;
        };
        let fate = match how {
            Attempt::Delivered => Fate::Delivered,
            Attempt::Permanent => Fate::Failed,
            Attempt::Transient => {
                let at = now + retry_delay(head.attempts, jitter);
                if head.attempts >= head.request.attempts.clamp(1, MAX_ATTEMPTS)
                    || at > head.queued + MAX_AGE
                {
                    Fate::Failed
                } else {
                    head.not_before = at;
                    Fate::Retry(at)
                }
            }
        };
        if !matches!(fate, Fate::Retry(_)) {
            self.pop_head(&ticket.tenant, &ticket.lane);
        }
        fate
    }

    #[cfg(test)]
    /// Deliveries waiting or in flight.
    pub(crate) fn len(&self) -> usize {
        self.items
    }

    /// Removes the head of a lane, and what is left empty.
    fn pop_head(&mut self, tenant: &str, key: &LaneKey) {
        let system = is_system(tenant);
        let Some(t) = self.tenants.get_mut(tenant) else {
            return;
        };
        let Some(lane) = t.lanes.get_mut(key) else {
            return;
        };
        let Some(d) = lane.items.pop_front() else {
            return;
        };
        let size = d.request.bytes();
        t.items -= 1;
        t.bytes -= size;
        self.items -= 1;
        self.bytes -= size;
        if !system {
            self.users_items -= 1;
            self.users_bytes -= size;
        }
        if lane.items.is_empty() && !lane.busy {
            t.lanes.remove(key);
        }
        if t.items == 0 && t.in_flight == 0 {
            self.tenants.remove(tenant);
        }
    }

    /// Gives up heads (not in flight) that could not start before
    /// [`MAX_AGE`].
    fn expire(&mut self, now: Instant, expired: &mut Vec<Arc<Request>>) {
        let mut old = Vec::new();
        for (tenant, t) in &self.tenants {
            for (key, lane) in &t.lanes {
                if lane.busy {
                    continue;
                }
                if let Some(head) = lane.items.front() {
                    if now > head.queued + MAX_AGE {
                        old.push((tenant.clone(), key.clone()));
                    }
                }
            }
        }
        for (tenant, key) in old {
            if let Some(lane) = self.tenants.get(&tenant).and_then(|t| t.lanes.get(&key)) {
                if let Some(head) = lane.items.front() {
                    expired.push(Arc::clone(&head.request));
                }
            }
            self.pop_head(&tenant, &key);
        }
    }
}

/// The delay before attempt `attempts + 1`: 1s, 2s, 4s, … up to
/// [`MAX_DELAY`], plus up to half of it again (`jitter` in [0, 1)).
pub(crate) fn retry_delay(attempts: u32, jitter: f64) -> Duration {
    let base = FIRST_DELAY
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
        .min(MAX_DELAY);
    base + base.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(job: &str, bytes: usize) -> Request {
        Request {
            method: Method::Post,
            url: "http://h/".into(),
            body: vec![b'x'; bytes],
            content_type: "application/json",
            event: "failure".into(),
            id: "d".into(),
            timeout: Duration::from_secs(1),
            attempts: 5,
            job: job.into(),
            kind: "webhook",
        }
    }

    fn lane(job: &str) -> LaneKey {
        LaneKey {
            job: job.into(),
            slot: 0,
        }
    }

    fn take(q: &mut Queue, now: Instant) -> Option<Ticket> {
        match q.next(now, &mut Vec::new()) {
            Next::Send(t) => Some(t),
            Next::Wait(_) => None,
        }
    }

    #[test]
    fn a_lane_sends_in_order_and_retries_its_head_first() {
        let mut q = Queue::default();
        let t0 = Instant::now();
        let mut start = request("j", 1);
        start.event = "start".into();
        q.offer("system", lane("j"), start, t0).unwrap();
        q.offer("system", lane("j"), request("j", 1), t0).unwrap();
        let first = take(&mut q, t0).expect("the head");
        assert_eq!(first.request.event, "start");
        assert!(take(&mut q, t0).is_none(), "one at a time per lane");
        let fate = q.finish(&first, Attempt::Transient, t0, 0.0);
        assert_eq!(fate, Fate::Retry(t0 + Duration::from_secs(1)));
        assert!(
            matches!(q.next(t0, &mut Vec::new()), Next::Wait(Some(at)) if at == t0 + Duration::from_secs(1)),
            "the end waits behind its start's retry"
        );
        let again = take(&mut q, t0 + Duration::from_secs(1)).expect("the retry");
        assert_eq!((again.request.event.as_str(), again.attempt), ("start", 2));
        assert_eq!(
            q.finish(&again, Attempt::Delivered, t0, 0.0),
            Fate::Delivered
        );
        let end = take(&mut q, t0 + Duration::from_secs(1)).expect("then the end");
        assert_eq!(end.request.event, "failure");
        assert_eq!(q.finish(&end, Attempt::Permanent, t0, 0.0), Fate::Failed);
        assert_eq!(q.len(), 0);
        assert!(q.tenants.is_empty());
    }

    #[test]
    fn attempts_and_age_are_bounded() {
        let mut q = Queue::default();
        let mut now = Instant::now();
        q.offer("system", lane("j"), request("j", 1), now).unwrap();
        let mut fates = Vec::new();
        while let Some(t) = take(&mut q, now) {
            let fate = q.finish(&t, Attempt::Transient, now, 0.99);
            fates.push(fate);
            if let Fate::Retry(at) = fate {
                now = at;
            }
        }
        assert_eq!(fates.len(), 5);
        assert_eq!(fates.last(), Some(&Fate::Failed));
        // A head that waited past MAX_AGE is given up without an attempt.
        q.offer("system", lane("k"), request("k", 1), now).unwrap();
        let mut expired = Vec::new();
        assert!(matches!(
            q.next(now + MAX_AGE + Duration::from_secs(1), &mut expired),
            Next::Wait(None)
        ));
        assert_eq!(expired.len(), 1);
        assert_eq!(q.len(), 0);
        assert_eq!(retry_delay(1, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(3, 0.0), Duration::from_secs(4));
        assert_eq!(retry_delay(30, 0.0), MAX_DELAY);
        assert_eq!(retry_delay(1, 1.0), Duration::from_millis(1500));
    }

    #[test]
    fn a_tenant_is_bounded_in_items_bytes_and_workers_and_others_go_on() {
        let mut q = Queue::default();
        let now = Instant::now();
        for _ in 0..LANE_ITEMS {
            q.offer("user-a", lane("dead"), request("a", 1), now)
                .unwrap();
        }
        assert_eq!(
            q.offer("user-a", lane("dead"), request("a", 1), now),
            Err(Full::Lane),
            "a lane is bounded"
        );
        for i in LANE_ITEMS..TENANT_ITEMS {
            q.offer("user-a", lane(&format!("a{i}")), request("a", 1), now)
                .unwrap();
        }
        assert_eq!(
            q.offer("user-a", lane("a"), request("a", 1), now),
            Err(Full::Tenant)
        );
        let mut q2 = Queue::default();
        q2.offer("user-a", lane("a"), request("a", TENANT_BYTES / 2), now)
            .unwrap();
        assert_eq!(
            q2.offer("user-a", lane("a"), request("a", TENANT_BYTES / 2), now),
            Err(Full::Tenant)
        );
        // Her deliveries take at most USER_IN_FLIGHT workers...
        let hers: Vec<_> = std::iter::from_fn(|| take(&mut q, now)).collect();
        assert_eq!(hers.len(), USER_IN_FLIGHT);
        // ...so bob's and the system's are sent meanwhile.
        q.offer("user-b", lane("b"), request("b", 1), now).unwrap();
        q.offer("system", lane("s"), request("s", 1), now).unwrap();
        let tenants: Vec<String> = std::iter::from_fn(|| take(&mut q, now))
            .map(|t| t.tenant)
            .collect();
        assert_eq!(tenants.len(), 2, "{tenants:?}");
        assert!(tenants.contains(&"user-b".to_string()));
        assert!(tenants.contains(&"system".to_string()));
    }

    #[test]
    fn users_together_leave_the_system_its_reserve() {
        let mut q = Queue::default();
        let now = Instant::now();
        for u in 0..WORKERS {
            for j in 0..2 {
                q.offer(
                    &format!("user-{u}"),
                    lane(&format!("{j}")),
                    request("x", 1),
                    now,
                )
                .unwrap();
            }
        }
        let taken: Vec<_> = std::iter::from_fn(|| take(&mut q, now)).collect();
        assert_eq!(taken.len(), WORKERS - SYSTEM_RESERVE);
        q.offer("system", lane("s"), request("s", 1), now).unwrap();
        q.offer("system", lane("s2"), request("s", 1), now).unwrap();
        let system: Vec<_> = std::iter::from_fn(|| take(&mut q, now)).collect();
        assert_eq!(system.len(), SYSTEM_RESERVE);
        assert!(system.iter().all(|t| t.tenant == "system"));
        // The total bound leaves the system room too.
        let mut q = Queue::default();
        let per = TOTAL_BYTES / 64;
        let mut users = 0;
        while q
            .offer(&format!("user-{users}"), lane("x"), request("x", per), now)
            .is_ok()
        {
            users += 1;
        }
        assert!(users < 64);
        assert!(q.offer("system", lane("s"), request("s", per), now).is_ok());
    }
}
