//! Alerts for what did not happen: a job's expectations (`alert.late`,
//! `alert.running_over`, `alert.no_success_within`, `alert.failures`) as
//! plain data, and the one event every channel receives when an alert is
//! raised or resolved ([`AlertEvent`]). The engine decides (`engine/alerts.rs`);
//! the daemon records the event in the history and hands it to the channels
//! (hook, mail, metrics, and whatever is added later).

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::record::{Event, Record};

/// What a job expects of itself, from its `alert` table (or `[defaults]`).
/// Each field unset is an alert not armed.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRules {
    /// Not started within this long of its due instant.
    pub late: Option<Duration>,
    /// A run still running after this long.
    pub running_over: Option<RunningOver>,
    /// No successful run for this long (since the daemon started or the job
    /// was added, when it has not succeeded since).
    pub no_success_within: Option<Duration>,
    /// This many failures in a row (failed or timed out).
    pub failures: Option<u32>,
    /// Mail the alert to the job's `mailto` (default true; nothing is sent
    /// without a `mailto`).
    pub mail: bool,
}

impl AlertRules {
    /// No alert armed; alerts mailed where a `mailto` is.
    pub const NONE: AlertRules = AlertRules {
        late: None,
        running_over: None,
        no_success_within: None,
        failures: None,
        mail: true,
    };

    /// Whether any alert is armed.
    pub fn any(&self) -> bool {
        self.late.is_some()
            || self.running_over.is_some()
            || self.no_success_within.is_some()
            || self.failures.is_some()
    }
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules::NONE
    }
}

/// How long is too long for a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunningOver {
    /// A fixed limit: `"30m"`.
    Fixed(Duration),
    /// A multiple of the job's own p95 duration: `"3x p95"`, from the
    /// durations of its last [`DURATIONS_KEPT`] successful runs (none armed
    /// before [`P95_MIN_SAMPLES`] of them), never under `floor`.
    P95 { factor: f64, floor: Duration },
}

/// Successful runs' durations kept per job for its p95.
pub const DURATIONS_KEPT: usize = 20;
/// Durations needed before a relative `running_over` is armed.
pub const P95_MIN_SAMPLES: usize = 5;
/// The least limit a relative `running_over` gives (a job that takes 10 ms
/// is not "running over" at 30 ms).
pub const P95_FLOOR: Duration = Duration::from_secs(1);

impl RunningOver {
    /// Parses `"30m"` or `"3x p95"` (`"1.5x p95"`; a factor in (1, 1000]).
    pub fn parse(text: &str) -> Result<RunningOver, String> {
        let t = text.trim();
        if let Some(factor) = t.strip_suffix("p95") {
            let factor = factor.trim_end();
            let Some(n) = factor.strip_suffix('x') else {
                return Err(format!(
                    "invalid running_over {text:?}: write a multiple of the job's p95 duration as \"3x p95\", or a duration as \"30m\""
                ));
            };
            return match n.trim().parse::<f64>() {
                Ok(f) if (1.0..=1000.0).contains(&f) => Ok(RunningOver::P95 {
                    factor: f,
                    floor: P95_FLOOR,
                }),
                _ => Err(format!(
                    "invalid running_over {text:?}: the factor must be a number from 1 to 1000, e.g. \"3x p95\""
                )),
            };
        }
        if t.contains('x') && t.contains('p') {
            return Err(format!(
                "invalid running_over {text:?}: only the job's p95 duration is kept (write e.g. \"3x p95\")"
            ));
        }
        match crate::duration::parse(t) {
            Ok(d) if !d.is_zero() => Ok(RunningOver::Fixed(d)),
            Ok(_) => Err(format!(
                "invalid running_over {text:?}: must be more than zero (e.g. \"30m\" or \"3x p95\")"
            )),
            Err(e) => Err(format!("{e}; or a multiple of the job's p95: \"3x p95\"")),
        }
    }

    /// The limit now, given the job's recent durations (None: not enough
    /// of them yet for a relative limit).
    pub fn limit(&self, durations: &Durations) -> Option<Duration> {
        match *self {
            RunningOver::Fixed(d) => Some(d),
            RunningOver::P95 { factor, floor } => {
                let p95 = durations.p95()?;
                Some(p95.mul_f64(factor).max(floor).min(crate::duration::MAX))
            }
        }
    }

    /// As the job file writes it.
    pub fn describe(&self) -> String {
        match *self {
            RunningOver::Fixed(d) => crate::duration::format(d),
            RunningOver::P95 { factor, .. } => format!("{factor}x p95"),
        }
    }
}

/// A job's recent successful durations (bounded), for its p95.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durations {
    ms: VecDeque<u64>,
}

impl Durations {
    /// Adds one, dropping the oldest beyond [`DURATIONS_KEPT`].
    pub fn push(&mut self, d: Duration) {
        if self.ms.len() == DURATIONS_KEPT {
            self.ms.pop_front();
        }
        self.ms
            .push_back(d.as_millis().min(u64::MAX as u128) as u64);
    }

    /// The nearest-rank 95th percentile, once [`P95_MIN_SAMPLES`] are kept.
    pub fn p95(&self) -> Option<Duration> {
        if self.ms.len() < P95_MIN_SAMPLES {
            return None;
        }
        let mut v: Vec<u64> = self.ms.iter().copied().collect();
        v.sort_unstable();
        let rank = (v.len() * 95).div_ceil(100).max(1);
        Some(Duration::from_millis(v[rank - 1]))
    }
}

/// Which expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    Late,
    RunningOver,
    NoSuccessWithin,
    Failures,
}

impl AlertKind {
    pub const ALL: [AlertKind; 4] = [
        AlertKind::Late,
        AlertKind::RunningOver,
        AlertKind::NoSuccessWithin,
        AlertKind::Failures,
    ];

    /// The name the job file, the history, `REA_ALERT_KIND` and the metrics
    /// use.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Late => "late",
            AlertKind::RunningOver => "running_over",
            AlertKind::NoSuccessWithin => "no_success_within",
            AlertKind::Failures => "failures",
        }
    }

    /// A bit of a set of kinds.
    pub(crate) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// Raised or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    Raised,
    Resolved,
}

impl AlertState {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Raised => "raised",
            AlertState::Resolved => "resolved",
        }
    }
}

/// An alert's part of a history record (`alert` in rea-history(5)); the
/// reason is the record's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertField {
    pub kind: AlertKind,
    pub state: AlertState,
}

/// An alert raised or resolved: what every channel receives
/// (`Action::Alert`). One per change, never repeated.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertEvent {
    /// The job's qualified name (`alice/backup` for a user's).
    pub job: String,
    pub kind: AlertKind,
    pub state: AlertState,
    /// A sentence for people: what was expected and what happened.
    pub reason: String,
    /// When the engine decided it.
    pub at: DateTime<Utc>,
    /// The due instant that was not started (`late`), when there is one.
    pub due: Option<DateTime<Utc>>,
    /// The run concerned (`running_over`, `failures`; the run that
    /// resolved it), when there is one.
    pub run: Option<String>,
}

impl AlertEvent {
    /// Its history record: event `alert`, `alert: {kind, state}`, the
    /// reason, the due instant as `scheduled`, and the run.
    pub fn record(&self) -> Record {
        let mut rec = Record::new(Event::Alert, self.at);
        rec.job = Some(self.job.clone());
        rec.run = self.run.clone();
        rec.scheduled = self.due;
        rec.reason = Some(self.reason.clone());
        rec.alert = Some(AlertField {
            kind: self.kind,
            state: self.state,
        });
        rec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_over_reads_a_duration_or_a_multiple_of_p95() {
        assert_eq!(
            RunningOver::parse("30m"),
            Ok(RunningOver::Fixed(Duration::from_secs(1800)))
        );
        assert_eq!(
            RunningOver::parse("3x p95"),
            Ok(RunningOver::P95 {
                factor: 3.0,
                floor: P95_FLOOR
            })
        );
        assert!(RunningOver::parse("1.5xp95").is_ok());
        assert!(RunningOver::parse("0x p95").is_err());
        assert!(RunningOver::parse("3 p95").is_err());
        assert!(RunningOver::parse("0s").is_err());
        assert!(RunningOver::parse("30").is_err());
    }

    #[test]
    fn p95_needs_five_durations_and_keeps_twenty() {
        let mut d = Durations::default();
        for s in 1..=4 {
            d.push(Duration::from_secs(s));
        }
        assert_eq!(d.p95(), None);
        d.push(Duration::from_secs(5));
        assert_eq!(d.p95(), Some(Duration::from_secs(5)));
        for s in 6..=100 {
            d.push(Duration::from_secs(s));
        }
        // The last 20 are 81..=100: the 19th of them is 99.
        assert_eq!(d.p95(), Some(Duration::from_secs(99)));
        let r = RunningOver::parse("2x p95").unwrap();
        assert_eq!(r.limit(&d), Some(Duration::from_secs(198)));
    }
}
