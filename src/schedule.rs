//! When a job fires: cron expressions (Vixie cron / cronie semantics, optional
//! leading seconds field), macros, `@every <duration>`, evaluated in a job's
//! timezone with cronie's DST policy. Pure: time is always passed in.
//!
//! INTERFACE STUB — the schedule helper replaces the bodies.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A parsed, validated schedule. Equality is by meaning of the source text
/// (used by reload to tell a changed job from an unchanged one).
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    source: String,
}

/// Why an expression was refused. `field` is the 0-based index of the field
/// (in the expression as written) and `span` the byte range inside the
/// expression, so the config module can point at the exact column.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleError {
    pub message: String,
    pub hint: Option<String>,
    pub span: Option<std::ops::Range<usize>>,
}

impl std::fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Schedule {
    pub fn parse(expr: &str) -> Result<Schedule, ScheduleError> {
        Ok(Schedule { source: expr.to_string() })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `@reboot`: fires once when the daemon starts, never from the clock.
    pub fn is_reboot(&self) -> bool {
        self.source.trim() == "@reboot"
    }

    /// The first fire instant strictly after `after`, in `tz`. None when the
    /// schedule never fires again (or is `@reboot`).
    pub fn next_after(&self, _after: DateTime<Utc>, _tz: Tz) -> Option<DateTime<Utc>> {
        unimplemented!("schedule helper")
    }
}
