//! Zone names as the job file and the command line give them. Only
//! `"local"` consults the machine (`$TZ`, `/etc/localtime`,
//! `/etc/timezone`, then the platform's answer); the choice between those
//! sources is `rea_core::zone`'s, this reads them.

use chrono_tz::Tz;
use rea_core::zone::{MachineZone, ZoneError};

/// Resolves an IANA name (case-insensitive), `UTC`, or `local`.
pub fn resolve(name: &str) -> Result<Tz, ZoneError> {
    rea_core::zone::resolve(name, machine_zone)
}

/// What this machine says about its zone.
pub fn machine_zone() -> MachineZone {
    MachineZone {
        tz_env: std::env::var("TZ").ok(),
        localtime_link: std::fs::read_link("/etc/localtime")
            .ok()
            .map(|p| p.to_string_lossy().into_owned()),
        etc_timezone: std::fs::read_to_string("/etc/timezone").ok(),
        platform: iana_time_zone::get_timezone().ok(),
    }
}
