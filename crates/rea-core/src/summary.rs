//! A job's recent record as the live views show it (`rea status`, `rea
//! top`, the web console): its last 64 outcomes, the last, p50 and p95
//! durations, its last success and last failure. It is fed every history
//! record of the job as the daemon writes it ([`Summary::observe`]), so a
//! query reads it instead of the history.
//!
//! It is held per job by the engine, beside what the engine already knows
//! of the job (its next fire, pause, failure streak, tenant), so it is
//! small by design: 56 bytes (`size_of` is asserted below), whatever the
//! job's history. Outcomes are 4-bit codes in a ring; the quantiles are
//! streaming estimates on a log scale (two bytes each), which is what a
//! sparkline and a "p95 got worse" column need, not an exact order
//! statistic; instants are whole seconds since the epoch in a `u32`
//! (until 2106).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::record::{Event, Record, RunStatus};

/// How many outcomes a summary keeps.
pub const OUTCOMES: usize = 64;

/// How a final run (or an occurrence) ended, as the sparkline shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    Success = 1,
    Failed,
    TimedOut,
    Killed,
    Interrupted,
    OutOfMemory,
    Skipped,
    Missed,
    SpawnError,
}

impl Outcome {
    /// Its letter on the wire (`rea_proto::live::JobSummary::outcomes`).
    pub fn letter(self) -> char {
        match self {
            Outcome::Success => 's',
            Outcome::Failed => 'f',
            Outcome::TimedOut => 't',
            Outcome::Killed => 'k',
            Outcome::Interrupted => 'i',
            Outcome::OutOfMemory => 'o',
            Outcome::Skipped => 'x',
            Outcome::Missed => 'm',
            Outcome::SpawnError => 'e',
        }
    }

    fn from_code(code: u8) -> Option<Outcome> {
        Some(match code {
            1 => Outcome::Success,
            2 => Outcome::Failed,
            3 => Outcome::TimedOut,
            4 => Outcome::Killed,
            5 => Outcome::Interrupted,
            6 => Outcome::OutOfMemory,
            7 => Outcome::Skipped,
            8 => Outcome::Missed,
            9 => Outcome::SpawnError,
            _ => return None,
        })
    }

    /// The outcome a final run record says (None: not a final run).
    pub fn of(rec: &Record) -> Option<Outcome> {
        if rec.event != Event::Run {
            return None;
        }
        Some(match rec.status? {
            RunStatus::Started | RunStatus::Cancelled => return None,
            RunStatus::Succeeded => Outcome::Success,
            RunStatus::Failed
                if rec.started.is_none() && rec.exit_code.is_none() && rec.signal.is_none() =>
            {
                Outcome::SpawnError
            }
            RunStatus::OomKilled => Outcome::OutOfMemory,
            // A record from before `oom_killed` was a status.
            _ if rec.oom_killed == Some(true) => Outcome::OutOfMemory,
            RunStatus::Failed => Outcome::Failed,
            RunStatus::TimedOut => Outcome::TimedOut,
            RunStatus::Killed => Outcome::Killed,
            RunStatus::Skipped => Outcome::Skipped,
            RunStatus::Interrupted => Outcome::Interrupted,
        })
    }

    /// Whether it counts as a failure (last failure, "failing").
    pub fn is_failure(self) -> bool {
        !matches!(
            self,
            Outcome::Success | Outcome::Skipped | Outcome::Missed | Outcome::Killed
        )
    }
}

/// Fixed-point scale of the log-scale quantile estimates: `log2(1 + ms)`
/// times this fits a `u16` for any duration (`log2` of `u64::MAX` is 64).
const LOG_SCALE: f64 = 1024.0;

/// The smallest step of a quantile estimate, in `log2` units: an eighth
/// of a doubling (about 9%), the resolution of the estimate once settled.
const MIN_STEP: f64 = 0.125;

/// A job's recent record. See the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// 4-bit outcome codes, a ring: code `i` is nibble `i % 2` of byte
    /// `i / 2`.
    outcomes: [u8; OUTCOMES / 2],
    /// Where the next outcome goes.
    head: u8,
    /// Outcomes held (at most [`OUTCOMES`]).
    len: u8,
    /// Durations seen, saturating: the quantiles' step shrinks with it.
    samples: u8,
    /// The last run's duration in milliseconds, saturating.
    last_ms: u32,
    /// `log2(1 + ms) * LOG_SCALE` estimates of the median and the 95th
    /// percentile.
    p50: u16,
    p95: u16,
    /// Seconds since the epoch; 0: never.
    last_success: u32,
    last_failure: u32,
    /// The last final run's end (any outcome but skipped).
    last_run: u32,
}

impl Summary {
    /// Adds what a history record of the job says: a final run's outcome,
    /// duration and end; a `missed` line's occurrences. Other records
    /// change nothing.
    pub fn observe(&mut self, rec: &Record) {
        if rec.event == Event::Missed {
            let missed = rec.count.unwrap_or(1).min(OUTCOMES as u64);
            for _ in 0..missed {
                self.push(Outcome::Missed);
            }
            return;
        }
        let Some(outcome) = Outcome::of(rec) else {
            return;
        };
        self.push(outcome);
        let ended = rec.ended.unwrap_or(rec.ts);
        if outcome != Outcome::Skipped {
            self.last_run = secs(ended);
        }
        if outcome == Outcome::Success {
            self.last_success = secs(ended);
        } else if outcome.is_failure() {
            self.last_failure = secs(ended);
        }
        if let (Some(ms), Some(_)) = (rec.duration_ms, rec.started) {
            self.ran(Duration::from_millis(ms));
        }
    }

    /// Seeds what the start-up's scan of the history knows: the last
    /// final run (its outcome and duration) and the last success.
    pub fn seed(&mut self, last: Option<&Record>, last_success: Option<DateTime<Utc>>) {
        if let Some(rec) = last {
            self.observe(rec);
        }
        if let Some(at) = last_success {
            self.last_success = self.last_success.max(secs(at));
        }
    }

    /// Appends an outcome, forgetting the oldest past [`OUTCOMES`].
    pub fn push(&mut self, outcome: Outcome) {
        let i = usize::from(self.head);
        let shift = (i % 2) * 4;
        let byte = &mut self.outcomes[i / 2];
        *byte = (*byte & !(0xf << shift)) | ((outcome as u8) << shift);
        self.head = ((i + 1) % OUTCOMES) as u8;
        self.len = (usize::from(self.len) + 1).min(OUTCOMES) as u8;
    }

    /// A run took `d`: the last duration and the quantile estimates.
    pub fn ran(&mut self, d: Duration) {
        let ms = d.as_millis();
        self.last_ms = u32::try_from(ms).unwrap_or(u32::MAX);
        let x = ((ms as f64) + 1.0).log2() * LOG_SCALE;
        if self.samples == 0 {
            self.p50 = to_u16(x);
            self.p95 = to_u16(x);
        } else {
            // Large steps while few durations are known, so the estimate
            // reaches the right scale fast; then fine ones.
            let step = (4.0 / f64::from(self.samples)).max(MIN_STEP) * LOG_SCALE;
            self.p50 = nudge(self.p50, x, 0.5, step);
            self.p95 = nudge(self.p95, x, 0.95, step);
        }
        self.samples = self.samples.saturating_add(1);
    }

    /// The outcomes, oldest first.
    pub fn outcomes(&self) -> impl Iterator<Item = Outcome> + '_ {
        let len = usize::from(self.len);
        let start = (usize::from(self.head) + OUTCOMES - len) % OUTCOMES;
        (0..len).filter_map(move |k| {
            let i = (start + k) % OUTCOMES;
            Outcome::from_code((self.outcomes[i / 2] >> ((i % 2) * 4)) & 0xf)
        })
    }

    /// The newest outcome.
    pub fn last_outcome(&self) -> Option<Outcome> {
        self.outcomes().last()
    }

    /// The outcomes as their letters, oldest first.
    pub fn outcome_letters(&self) -> String {
        self.outcomes().map(Outcome::letter).collect()
    }

    pub fn last_duration(&self) -> Option<Duration> {
        (self.samples > 0).then(|| Duration::from_millis(u64::from(self.last_ms)))
    }

    /// The estimated median duration.
    pub fn p50(&self) -> Option<Duration> {
        (self.samples > 0).then(|| from_log(self.p50))
    }

    /// The estimated 95th percentile of the durations.
    pub fn p95(&self) -> Option<Duration> {
        (self.samples > 0).then(|| from_log(self.p95))
    }

    pub fn last_success(&self) -> Option<DateTime<Utc>> {
        instant(self.last_success)
    }

    pub fn last_failure(&self) -> Option<DateTime<Utc>> {
        instant(self.last_failure)
    }

    /// When the last final run (any outcome but skipped) ended.
    pub fn last_run(&self) -> Option<DateTime<Utc>> {
        instant(self.last_run)
    }
}

/// Moves an estimate of the `q` quantile towards `x`: up by `q * step`
/// when `x` is above it, down by `(1 - q) * step` otherwise, so it settles
/// where a fraction `q` of the values lies below (a stochastic-gradient
/// quantile estimate).
fn nudge(estimate: u16, x: f64, q: f64, step: f64) -> u16 {
    let e = f64::from(estimate);
    let moved = if x > e {
        (e + q * step).min(x)
    } else if x < e {
        (e - (1.0 - q) * step).max(x)
    } else {
        e
    };
    to_u16(moved)
}

fn to_u16(x: f64) -> u16 {
    x.round().clamp(0.0, f64::from(u16::MAX)) as u16
}

fn from_log(v: u16) -> Duration {
    let ms = (f64::from(v) / LOG_SCALE).exp2() - 1.0;
    Duration::from_millis(ms.round().max(0.0) as u64)
}

fn secs(t: DateTime<Utc>) -> u32 {
    u32::try_from(t.timestamp().max(1)).unwrap_or(u32::MAX)
}

fn instant(s: u32) -> Option<DateTime<Utc>> {
    (s != 0)
        .then(|| DateTime::from_timestamp(i64::from(s), 0))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn run(status: RunStatus, end: i64, ms: u64) -> Record {
        let mut rec = Record::new(Event::Run, at(end));
        rec.job = Some("j".into());
        rec.status = Some(status);
        rec.started = Some(at(end));
        rec.ended = Some(at(end));
        rec.duration_ms = Some(ms);
        rec.exit_code = Some(i32::from(status != RunStatus::Succeeded));
        rec
    }

    #[test]
    fn fits_its_budget() {
        assert!(std::mem::size_of::<Summary>() <= 64);
        assert_eq!(std::mem::size_of::<Summary>(), 56);
    }

    #[test]
    fn keeps_the_last_64_outcomes_oldest_first() {
        let mut s = Summary::default();
        assert_eq!(s.outcome_letters(), "");
        s.observe(&run(RunStatus::Failed, 10, 5));
        for i in 0..70 {
            s.observe(&run(RunStatus::Succeeded, 20 + i, 5));
        }
        s.observe(&run(RunStatus::TimedOut, 100, 5));
        let letters = s.outcome_letters();
        assert_eq!(letters.len(), 64);
        assert!(letters.starts_with("sss"));
        assert!(letters.ends_with("st"));
        assert_eq!(s.last_outcome(), Some(Outcome::TimedOut));
        assert_eq!(s.last_success(), Some(at(89)));
        assert_eq!(s.last_failure(), Some(at(100)));
        assert_eq!(s.last_run(), Some(at(100)));
    }

    #[test]
    fn every_outcome_has_its_letter() {
        let mut s = Summary::default();
        let mut spawn = run(RunStatus::Failed, 1, 0);
        spawn.started = None;
        spawn.exit_code = None;
        s.observe(&spawn);
        // A record from before `oom_killed` was a status.
        let mut oom = run(RunStatus::Killed, 2, 1);
        oom.oom_killed = Some(true);
        s.observe(&oom);
        s.observe(&run(RunStatus::Skipped, 3, 0));
        s.observe(&run(RunStatus::Interrupted, 4, 0));
        s.observe(&run(RunStatus::Killed, 5, 0));
        let mut missed = Record::new(Event::Missed, at(6));
        missed.count = Some(2);
        s.observe(&missed);
        s.observe(&run(RunStatus::Started, 7, 0));
        let mut oom = run(RunStatus::OomKilled, 8, 1);
        oom.oom_killed = Some(true);
        s.observe(&oom);
        assert_eq!(s.outcome_letters(), "eoxikmmo");
        assert_eq!(s.last_failure(), Some(at(8)));
        assert!(Outcome::OutOfMemory.is_failure());
    }

    #[test]
    fn quantiles_settle_near_the_truth() {
        let mut s = Summary::default();
        assert_eq!(s.p50(), None);
        // 1..=100 seconds, shuffled deterministically, several rounds.
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20 {
            let mut xs: Vec<u64> = (1..=100).collect();
            rng.shuffle(&mut xs);
            for x in xs {
                s.ran(Duration::from_secs(x));
            }
        }
        let p50 = s.p50().unwrap().as_secs_f64();
        let p95 = s.p95().unwrap().as_secs_f64();
        assert!((35.0..=70.0).contains(&p50), "p50 {p50}");
        assert!((75.0..=100.0).contains(&p95), "p95 {p95}");
        assert!(p95 > p50);
        s.ran(Duration::from_millis(1234));
        assert_eq!(s.last_duration(), Some(Duration::from_millis(1234)));
    }

    #[test]
    fn a_constant_duration_is_its_own_quantiles() {
        let mut s = Summary::default();
        for _ in 0..10 {
            s.ran(Duration::from_secs(3));
        }
        let p50 = s.p50().unwrap().as_millis() as i64;
        assert!((p50 - 3000).abs() <= 3, "{p50}");
        let p95 = s.p95().unwrap().as_millis() as i64;
        assert!((p95 - 3000).abs() <= 3, "{p95}");
    }
}
