//! Retry policy: how long to wait before attempt `n`. Pure: it computes a
//! delay from a policy and a random number; it never sleeps and never reads
//! the clock. The daemon turns the delay into a heap entry.

use std::time::Duration;

/// What `retry = { ... }` in the job file says.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first run (0 = never retry). A run is therefore
    /// attempted at most `attempts + 1` times.
    pub attempts: u32,
    /// Delay before the first retry.
    pub delay: Duration,
    /// Upper bound for any delay, before jitter.
    pub max_delay: Duration,
    /// Growth per retry: delay * factor^(n-1).
    pub factor: f64,
    /// Fraction in [0, 1]: the delay is spread uniformly over
    /// `[d * (1 - jitter), d * (1 + jitter)]` so jobs that failed together
    /// do not retry together.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 0,
            delay: Duration::from_secs(30),
            max_delay: Duration::from_secs(600),
            factor: 2.0,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The most retries a job or a one-shot may ask for.
    pub const MAX_ATTEMPTS: u32 = 100;

    /// The delay before retry number `n` (1-based: the first retry is n = 1),
    /// given `unit`, a uniform random number in [0, 1). Returns None when the
    /// policy allows no such retry.
    pub fn delay_for(&self, n: u32, unit: f64) -> Option<Duration> {
        if n == 0 || n > self.attempts {
            return None;
        }
        let base = self.delay.as_secs_f64() * self.factor.powi(n.saturating_sub(1) as i32);
        let capped = if base.is_finite() {
            base.min(self.max_delay.as_secs_f64())
        } else {
            self.max_delay.as_secs_f64()
        };
        let spread = capped * self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let secs = (capped + spread).max(0.0);
        Some(Duration::from_secs_f64(secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            delay: Duration::from_secs(30),
            max_delay: Duration::from_secs(600),
            factor: 2.0,
            jitter: 0.0,
        }
    }

    #[test]
    fn grows_exponentially_up_to_the_cap() {
        let p = policy();
        let got: Vec<u64> = (1..=5)
            .map(|n| p.delay_for(n, 0.5).unwrap().as_secs())
            .collect();
        assert_eq!(got, vec![30, 60, 120, 240, 480]);
        let p = RetryPolicy {
            attempts: 10,
            ..policy()
        };
        assert_eq!(p.delay_for(10, 0.5).unwrap().as_secs(), 600);
        assert_eq!(p.delay_for(11, 0.5), None);
        assert_eq!(p.delay_for(0, 0.5), None);
    }

    #[test]
    fn jitter_stays_in_its_band_and_spreads() {
        let p = RetryPolicy {
            jitter: 0.2,
            ..policy()
        };
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..1000 {
            let u = i as f64 / 1000.0;
            let d = p.delay_for(1, u).unwrap().as_secs_f64();
            assert!((24.0..=36.0).contains(&d), "{d}");
            seen.insert((d * 10.0) as u64);
        }
        assert!(
            seen.len() > 100,
            "jitter must spread delays, got {} distinct",
            seen.len()
        );
    }

    #[test]
    fn huge_factors_do_not_overflow() {
        let p = RetryPolicy {
            attempts: 1000,
            factor: 1e9,
            ..policy()
        };
        assert_eq!(p.delay_for(1000, 0.5).unwrap().as_secs(), 600);
    }
}
