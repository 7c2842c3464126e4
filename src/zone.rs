//! Timezone names from job files and the command line → `chrono_tz::Tz`.
//! `"local"` is the only way the machine's zone is ever consulted.
//!
//! INTERFACE STUB — the schedule helper replaces the bodies.

use chrono_tz::Tz;

/// A named zone could not be resolved; `suggestions` are close IANA names.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneError {
    pub message: String,
    pub suggestions: Vec<String>,
}

/// Resolves an IANA name (case-insensitive), `UTC`, or `local`.
pub fn resolve(name: &str) -> Result<Tz, ZoneError> {
    name.parse::<Tz>().map_err(|_| ZoneError { message: format!("unknown timezone {name:?}"), suggestions: vec![] })
}
