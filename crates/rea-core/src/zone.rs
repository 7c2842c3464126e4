//! Timezone names from job files and the command line → `chrono_tz::Tz`.
//! `"local"` is the only way the machine's zone is ever consulted; what the
//! machine says is passed in as a [`MachineZone`] (read by `rea-config`), so
//! the choice between its sources is pure and tested with plain values.

use std::path::Path;

use chrono_tz::{Tz, TZ_VARIANTS};

/// A named zone could not be resolved; `suggestions` are close IANA names.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneError {
    pub message: String,
    pub suggestions: Vec<String>,
}

impl ZoneError {
    /// What to write instead: the closest zone names, else how names look.
    pub fn hint(&self) -> String {
        crate::suggest::phrase(&self.suggestions).unwrap_or_else(|| {
            "use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"".to_string()
        })
    }
}

impl std::fmt::Display for ZoneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match crate::suggest::phrase(&self.suggestions) {
            Some(h) => write!(f, "{} ({h})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ZoneError {}

/// Resolves an IANA name (case-insensitive), `UTC`, or `local` (the machine's
/// zone: `$TZ`, then `/etc/localtime`, then `/etc/timezone`, then the
/// platform's answer; `machine` is asked only for `local`).
pub fn resolve(name: &str, machine: impl FnOnce() -> MachineZone) -> Result<Tz, ZoneError> {
    let trimmed = name.trim();
    if trimmed.eq_ignore_ascii_case("local") {
        return resolve_local(&machine());
    }
    by_name(trimmed).ok_or_else(|| unknown(trimmed))
}

/// An IANA name, exact or case-insensitive.
pub fn by_name(name: &str) -> Option<Tz> {
    if name.is_empty() {
        return None;
    }
    name.parse::<Tz>().ok().or_else(|| {
        TZ_VARIANTS
            .iter()
            .copied()
            .find(|tz| tz.name().eq_ignore_ascii_case(name))
    })
}

fn unknown(name: &str) -> ZoneError {
    ZoneError {
        message: format!("unknown timezone {name:?}"),
        suggestions: crate::suggest::closest(name, TZ_VARIANTS.iter().map(|tz| tz.name()), 3),
    }
}

/// Everything the machine says about its zone, read once (by the caller)
/// so the choice between the sources can be tested with plain values.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MachineZone {
    /// `$TZ`.
    pub tz_env: Option<String>,
    /// Where `/etc/localtime` links to.
    pub localtime_link: Option<String>,
    /// The contents of `/etc/timezone`.
    pub etc_timezone: Option<String>,
    /// The platform's own answer (e.g. from `iana-time-zone`).
    pub platform: Option<String>,
}

/// `Europe/Berlin` from `/usr/share/zoneinfo/Europe/Berlin` (also the
/// `posix/` and `right/` variants) or from a bare name.
fn zone_from_path_or_name(value: &str) -> Option<Tz> {
    let value = value.trim().trim_start_matches(':');
    if let Some(tz) = by_name(value) {
        return Some(tz);
    }
    let path = Path::new(value);
    let text = path.to_str()?;
    let (_, tail) = text.split_once("zoneinfo/")?;
    let tail = tail
        .strip_prefix("posix/")
        .or_else(|| tail.strip_prefix("right/"))
        .unwrap_or(tail);
    by_name(tail)
}

/// The machine's zone from what it says, in order of precedence.
pub fn resolve_local(machine: &MachineZone) -> Result<Tz, ZoneError> {
    let sources = [
        machine.tz_env.as_deref(),
        machine.localtime_link.as_deref(),
        machine.etc_timezone.as_deref(),
        machine.platform.as_deref(),
    ];
    sources.into_iter().flatten().find_map(zone_from_path_or_name).ok_or_else(|| ZoneError {
        message: "timezone \"local\": cannot tell this machine's zone ($TZ, /etc/localtime and /etc/timezone name none)"
            .to_string()
            + "; name the zone in the job file instead, e.g. timezone = \"Europe/Berlin\"",
        suggestions: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_name(name: &str) -> Result<Tz, ZoneError> {
        resolve(name, || panic!("only \"local\" asks the machine"))
    }

    #[test]
    fn resolves_names_case_insensitively() {
        assert_eq!(resolve_name("Europe/Berlin").unwrap(), Tz::Europe__Berlin);
        assert_eq!(resolve_name("europe/berlin").unwrap(), Tz::Europe__Berlin);
        assert_eq!(
            resolve_name("AMERICA/NEW_YORK").unwrap(),
            Tz::America__New_York
        );
        assert_eq!(resolve_name("UTC").unwrap(), Tz::UTC);
        assert_eq!(resolve_name("utc").unwrap(), Tz::UTC);
        assert_eq!(resolve_name(" Asia/Tokyo ").unwrap(), Tz::Asia__Tokyo);
    }

    #[test]
    fn unknown_names_suggest_close_ones() {
        let e = resolve_name("Shanghai").unwrap_err();
        assert_eq!(
            e.suggestions.first().map(String::as_str),
            Some("Asia/Shanghai")
        );
        assert!(
            e.message.contains("unknown timezone \"Shanghai\""),
            "{}",
            e.message
        );
        let e = resolve_name("Europe/Berln").unwrap_err();
        assert_eq!(
            e.suggestions.first().map(String::as_str),
            Some("Europe/Berlin")
        );
        assert!(e.suggestions.len() <= 3);
        assert!(e.to_string().contains("did you mean"), "{e}");
        let e = resolve_name("zzzzzzzz").unwrap_err();
        assert!(e.suggestions.is_empty());
        assert!(resolve_name("").is_err());
    }

    #[test]
    fn local_prefers_tz_then_localtime_then_etc_timezone_then_platform() {
        let all = MachineZone {
            tz_env: Some(":Asia/Tokyo".into()),
            localtime_link: Some("/usr/share/zoneinfo/Europe/Berlin".into()),
            etc_timezone: Some("America/New_York\n".into()),
            platform: Some("Australia/Sydney".into()),
        };
        assert_eq!(resolve_local(&all).unwrap(), Tz::Asia__Tokyo);
        let no_env = MachineZone {
            tz_env: None,
            ..all
        };
        assert_eq!(resolve_local(&no_env).unwrap(), Tz::Europe__Berlin);
        let posix_link = MachineZone {
            localtime_link: Some("../usr/share/zoneinfo/posix/Pacific/Chatham".into()),
            ..Default::default()
        };
        assert_eq!(resolve_local(&posix_link).unwrap(), Tz::Pacific__Chatham);
        let bad_env = MachineZone {
            tz_env: Some("not a zone".into()),
            etc_timezone: Some("America/New_York\n".into()),
            ..Default::default()
        };
        assert_eq!(resolve_local(&bad_env).unwrap(), Tz::America__New_York);
        let platform = MachineZone {
            platform: Some("Australia/Sydney".into()),
            ..Default::default()
        };
        assert_eq!(resolve_local(&platform).unwrap(), Tz::Australia__Sydney);
        let tz_path = MachineZone {
            tz_env: Some("/usr/share/zoneinfo/Europe/Paris".into()),
            ..Default::default()
        };
        assert_eq!(resolve_local(&tz_path).unwrap(), Tz::Europe__Paris);
    }

    #[test]
    fn local_with_nothing_to_go_on_tells_the_user_what_to_do() {
        let e = resolve_local(&MachineZone::default()).unwrap_err();
        assert!(
            e.message.contains("name the zone in the job file"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("timezone = \"Europe/Berlin\""),
            "{}",
            e.message
        );
    }
}
