//! Mail deliveries (`mailto`), bounded per tenant: each tenant (the
//! system, or a user of `users/NAME.toml`) has at most
//! [`CONCURRENT`] sendmail processes at once, each killed after
//! [`TIMEOUT`]; the deliveries waiting behind them are a queue of at most
//! [`QUEUE`] messages and [`QUEUE_BYTES`] bytes per tenant, and a delivery
//! that does not fit is dropped, logged and counted
//! (`rea_mail_dropped_total`). One user's jobs mailing every second cannot
//! start more than two sendmails, nor hold more than a megabyte of the
//! daemon's memory, nor delay another tenant's mail.
//!
//! What does not live here: the message and who sendmail runs as
//! (`hooks.rs`: the job's user, so a user's file mails as her), spawning
//! the process (`rea_exec`).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use rea_exec::RunSpec;

/// sendmail processes at once, per tenant.
pub(super) const CONCURRENT: usize = 2;
/// Deliveries waiting, per tenant.
pub(super) const QUEUE: usize = 64;
/// Bytes of message waiting, per tenant.
pub(super) const QUEUE_BYTES: usize = 1024 * 1024;
/// How long a sendmail may take before it is killed (TERM, then KILL
/// after [`KILL_GRACE`]).
pub(super) const TIMEOUT: Duration = Duration::from_secs(60);
/// Between TERM and KILL for a sendmail past its [`TIMEOUT`].
pub(super) const KILL_GRACE: Duration = Duration::from_secs(5);

/// A message to hand to sendmail: the process to start, and what it is
/// about (for the log).
pub(super) struct Delivery {
    pub(super) job: String,
    pub(super) run: String,
    pub(super) spec: RunSpec,
}

impl Delivery {
    fn bytes(&self) -> usize {
        self.spec.stdin.as_ref().map_or(0, Vec::len)
    }
}

/// What became of a delivery offered.
pub(super) enum Offered {
    /// Start it now (a slot of its tenant is taken for it).
    Start(Delivery),
    /// It waits for a slot of its tenant.
    Queued,
    /// The tenant's queue is full: not sent.
    Dropped(Delivery),
}

/// Every tenant's deliveries.
#[derive(Default)]
pub(super) struct Mailer {
    tenants: HashMap<String, TenantMail>,
}

#[derive(Default)]
struct TenantMail {
    /// sendmail processes running.
    running: usize,
    waiting: VecDeque<Delivery>,
    /// Bytes of the messages waiting.
    bytes: usize,
    /// Deliveries dropped since the daemon started.
    dropped: u64,
}

impl Mailer {
    /// `delivery`, of `tenant` (its key: `system`, `user-NAME`).
    pub(super) fn offer(&mut self, tenant: &str, delivery: Delivery) -> Offered {
        let t = self.tenants.entry(tenant.to_string()).or_default();
        if t.running < CONCURRENT {
            t.running += 1;
            return Offered::Start(delivery);
        }
        let size = delivery.bytes();
        if t.waiting.len() >= QUEUE || t.bytes + size > QUEUE_BYTES {
            t.dropped += 1;
            return Offered::Dropped(delivery);
        }
        t.bytes += size;
        t.waiting.push_back(delivery);
        Offered::Queued
    }

    /// A delivery of `tenant` ended (or could not start): its slot goes to
    /// the next waiting, returned to start.
    pub(super) fn ended(&mut self, tenant: &str) -> Option<Delivery> {
        let t = self.tenants.get_mut(tenant)?;
        t.running = t.running.saturating_sub(1);
        let next = t.waiting.pop_front();
        match &next {
            Some(d) => {
                t.bytes -= d.bytes();
                t.running += 1;
            }
            None if t.running == 0 && t.dropped == 0 => {
                self.tenants.remove(tenant);
            }
            None => {}
        }
        next
    }

    /// Deliveries of `tenant` dropped so far.
    pub(super) fn dropped(&self, tenant: &str) -> u64 {
        self.tenants.get(tenant).map_or(0, |t| t.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rea_core::run::Program;

    fn delivery(bytes: usize) -> Delivery {
        Delivery {
            job: "j".into(),
            run: "r".into(),
            spec: RunSpec {
                program: Program::Argv(vec!["/bin/true".into()]),
                env: Vec::new(),
                inherit_env: false,
                dir: None,
                home: None,
                timeout: Some(TIMEOUT),
                kill_grace: KILL_GRACE,
                output_limit: 0,
                stdin: Some(vec![b'x'; bytes]),
                pass_fd: None,
                user: None,
                kill_stragglers: true,
                journald: None,
                cgroup: None,
                limits: rea_core::run::Limits::NONE,
            },
        }
    }

    /// Two at once per tenant, then a queue bounded in messages and bytes;
    /// another tenant is not held by a full one.
    #[test]
    fn each_tenant_has_its_slots_and_its_bounded_queue() {
        let mut m = Mailer::default();
        let started = |o: Offered| matches!(o, Offered::Start(_));
        assert!(started(m.offer("user-a", delivery(10))));
        assert!(started(m.offer("user-a", delivery(10))));
        // Big messages: the bytes bound first.
        let big = QUEUE_BYTES / 3;
        for _ in 0..3 {
            assert!(matches!(m.offer("user-a", delivery(big)), Offered::Queued));
        }
        assert!(matches!(
            m.offer("user-a", delivery(big)),
            Offered::Dropped(_)
        ));
        assert_eq!(m.dropped("user-a"), 1);
        assert!(started(m.offer("system", delivery(10))));
        // Small ones: the count bound.
        let mut m2 = Mailer::default();
        for _ in 0..CONCURRENT + QUEUE {
            assert!(!matches!(m2.offer("t", delivery(1)), Offered::Dropped(_)));
        }
        assert!(matches!(m2.offer("t", delivery(1)), Offered::Dropped(_)));
        // An end hands its slot to the first waiting, in order.
        assert!(m.ended("user-a").is_some_and(|d| d.bytes() == big));
        assert!(matches!(m.offer("user-a", delivery(big)), Offered::Queued));
        for _ in 0..3 {
            assert!(m.ended("user-a").is_some());
        }
        assert!(m.ended("user-a").is_none());
        assert!(m.ended("user-a").is_none());
    }
}
