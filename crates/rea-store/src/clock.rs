//! The daemon's wall clock: the one place a daemon (its loop, its cluster
//! node, its timer) reads the time of day.
//!
//! In cluster mode time belongs to the database: at every heartbeat the
//! node measures how far the database's clock is from this machine's
//! (round-trip corrected) and sets the correction here, so the daemon
//! schedules, claims and records on the database's time even when the
//! machine's clock is seconds off (NTP down, a VM resumed). The timer is
//! armed through [`kernel_instant`], which maps an instant of this clock
//! back to the kernel's `CLOCK_REALTIME`.
//!
//! `REA_TEST_CLOCK_SKEW_MS` is for tests only: a signed number of
//! milliseconds added to the machine's clock as the daemon reads it, so the
//! real binary's scheduling, claims and timers see a skewed machine
//! (libfaketime cannot move a timerfd armed by a raw system call, and time
//! namespaces do not virtualize `CLOCK_REALTIME`). Unset, it costs nothing.
//!
//! Not here: measuring the offset (the cluster node's heartbeat).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use chrono::{DateTime, Duration, Utc};

/// How far ahead of the database's clock a claim may be before the database
/// refuses it (the node asks again at the occurrence's instant). A node's
/// clock further than this from the database's is a warning in `rea status`
/// (corrected all the same); further than the lease, CRITICAL.
pub const TOLERANCE_MS: i64 = 1000;

/// The test-only skew of the machine's clock, read once.
fn test_skew_ms() -> i64 {
    static SKEW: OnceLock<i64> = OnceLock::new();
    *SKEW.get_or_init(|| {
        std::env::var("REA_TEST_CLOCK_SKEW_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// Microseconds to add to the machine's clock to read the cluster
/// database's (0 in local mode and until the first measurement).
static CORRECTION_US: AtomicI64 = AtomicI64::new(0);

/// The machine's clock, as the daemon sees it (the test skew applied): what
/// the cluster node measures the database's clock against.
pub fn machine_now() -> DateTime<Utc> {
    Utc::now() + Duration::milliseconds(test_skew_ms())
}

/// The daemon's time: the machine's clock corrected to the cluster
/// database's.
pub fn now() -> DateTime<Utc> {
    machine_now() + Duration::microseconds(correction_us())
}

/// The correction in force, in microseconds (database − machine).
pub fn correction_us() -> i64 {
    CORRECTION_US.load(Ordering::Relaxed)
}

/// Sets the correction (database − machine, microseconds); the previous
/// one.
pub fn set_correction_us(us: i64) -> i64 {
    CORRECTION_US.swap(us, Ordering::Relaxed)
}

/// `t`, read from the kernel's `CLOCK_REALTIME` (by code that knows no
/// daemon: a run's start and end, taken by the executor), on [`now`]'s
/// clock.
pub fn from_kernel(t: DateTime<Utc>) -> DateTime<Utc> {
    t + Duration::milliseconds(test_skew_ms()) + Duration::microseconds(correction_us())
}

/// `at`, an instant of [`now`]'s clock, on the kernel's `CLOCK_REALTIME`
/// (where a timer must be armed to wake when [`now`] reads `at`).
pub fn kernel_instant(at: DateTime<Utc>) -> DateTime<Utc> {
    at - Duration::milliseconds(test_skew_ms()) - Duration::microseconds(correction_us())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The correction moves `now` and, the other way, the kernel's instant
    /// of a time on it.
    #[test]
    fn the_correction_moves_now_and_the_kernel_instant() {
        let before = set_correction_us(-3_000_000);
        let machine = machine_now();
        let corrected = now();
        let off = (corrected - machine).num_milliseconds();
        assert!((-3010..=-2990).contains(&off), "offset {off}");
        let at = corrected + Duration::seconds(10);
        assert_eq!(
            kernel_instant(at),
            at + Duration::milliseconds(3000 - test_skew_ms())
        );
        assert_eq!(from_kernel(kernel_instant(at)), at);
        set_correction_us(before);
    }
}
