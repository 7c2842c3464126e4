//! "Did you mean …?" for every place a user names something: fields, jobs,
//! timezones, subcommand arguments. One implementation so hints read alike.

/// Inputs longer than this get no suggestions. No name rea knows is half
/// this long, and Jaro-Winkler costs |input| × |candidate| per candidate:
/// a 1 MB timezone string against ~600 zone names took 30 s in a debug
/// build (seconds in release), all of it on the daemon's loop during a
/// reload.
const MAX_INPUT: usize = 128;

/// The candidates closest to `input`, best first, at most `max`. Only
/// plausible ones are returned: a hint that suggests nonsense is worse than none.
pub fn closest<'a, I>(input: &str, candidates: I, max: usize) -> Vec<String>
where
    I: IntoIterator<Item = &'a str>,
{
    if input.len() > MAX_INPUT {
        return Vec::new();
    }
    let needle = input.to_ascii_lowercase();
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .filter_map(|c| {
            let hay = c.to_ascii_lowercase();
            let mut score = strsim::jaro_winkler(&needle, &hay);
            // A candidate that contains the input (or its last path segment, for
            // timezones such as "Shanghai") is a strong hint even when short.
            let tail = hay.rsplit('/').next().unwrap_or(&hay);
            if needle.chars().count() >= 3 && (hay.contains(&needle) || tail == needle) {
                score = score.max(0.9);
            }
            (score >= 0.8).then_some((score, c))
        })
        .collect();
    scored.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.1.cmp(b.1))
    });
    scored
        .into_iter()
        .take(max)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// `closest`, phrased as a hint: `did you mean "command"?` or None.
pub fn did_you_mean<'a, I>(input: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    phrase(&closest(input, candidates, 3))
}

/// Names already found, phrased as a hint: `did you mean "a"?`,
/// `did you mean one of "a", "b"?`, or None.
pub fn phrase(found: &[String]) -> Option<String> {
    match found {
        [] => None,
        [one] => Some(format!("did you mean {one:?}?")),
        many => Some(format!(
            "did you mean one of {}?",
            many.iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos_and_nothing_silly() {
        let fields = ["command", "schedule", "timezone", "timeout"];
        assert_eq!(
            did_you_mean("comand", fields).unwrap(),
            "did you mean \"command\"?"
        );
        assert_eq!(closest("timezon", fields, 1), vec!["timezone"]);
        assert!(did_you_mean("zzzzzz", fields).is_none());
    }

    #[test]
    // A regression guard against a search that ran for 30 s: the bound is
    // 1,000 times what the search takes, not a speed figure.
    #[allow(clippy::disallowed_methods)]
    fn huge_inputs_get_no_suggestion_quickly() {
        // Regression (found by tests/torture.rs): 30 s for one 1 MB zone name.
        let huge = format!("Europe/Berlin{}", "x".repeat(1 << 20));
        let zones: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
        let started = std::time::Instant::now();
        assert!(closest(&huge, zones.iter().copied(), 3).is_empty());
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn matches_timezone_tails() {
        let zones = ["Asia/Shanghai", "Europe/Berlin", "America/New_York"];
        assert_eq!(closest("Shanghai", zones, 1), vec!["Asia/Shanghai"]);
        assert_eq!(closest("Europe/Berln", zones, 1), vec!["Europe/Berlin"]);
    }
}
