//! The checks the fuzz targets run, shared with the main test suite
//! (`tests/torture.rs` runs every file of `fuzz/corpus/` through them), so
//! CI exercises exactly what the fuzzer does without a nightly toolchain.
//! A check panics when an invariant breaks; that is the fuzzer's crash.
#![allow(dead_code)] // each fuzz target uses one half

use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

use rea_config::{self as config, Config};
use rea_core::schedule::Schedule;

/// Zones with the awkward transitions: a gap and a repeat (New York), a
/// half-hour shift (Lord Howe), an odd offset (Chatham), no DST (Kathmandu).
const ZONES: [Tz; 5] = [
    Tz::UTC,
    Tz::America__New_York,
    Tz::Australia__Lord_Howe,
    Tz::Pacific__Chatham,
    Tz::Asia__Kathmandu,
];

/// Start instants: the epoch, just before a spring-forward and a fall-back
/// in New York, a leap day, and the last second chrono's calendar years
/// usually reach in practice.
fn starts() -> [DateTime<Utc>; 5] {
    let at = |y, mo, d, h, mi, s| {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .single()
            .expect("a valid instant")
    };
    [
        at(1970, 1, 1, 0, 0, 0),
        at(2026, 3, 8, 6, 59, 59),
        at(2026, 11, 1, 5, 30, 0),
        at(2028, 2, 29, 12, 0, 0),
        at(9999, 12, 31, 23, 59, 59),
    ]
}

/// `next_after` from every start in every zone, `steps` times: never a
/// panic, always strictly after the previous instant.
fn walk(schedule: &Schedule, zones: &[Tz], steps: usize) {
    for tz in zones {
        for start in starts() {
            let mut prev = start;
            for _ in 0..steps {
                match schedule.next_after(prev, *tz) {
                    Some(next) => {
                        assert!(
                            next > prev,
                            "{:?} in {tz}: {next} is not after {prev}",
                            schedule.source()
                        );
                        prev = next;
                    }
                    None => break,
                }
            }
        }
    }
}

/// (characters per line) of the text `parse` locates errors in.
fn shape(src: &[u8]) -> Vec<usize> {
    let text = String::from_utf8_lossy(src);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    text.split('\n').map(|l| l.chars().count()).collect()
}

/// Bytes → `config::parse`. Errors are located inside the file, on one
/// line each; an accepted file satisfies what the daemon relies on.
pub fn job_file(data: &[u8]) {
    let path = Path::new("jobs.toml");
    match config::parse(data, path) {
        Err(diags) => {
            assert!(!diags.is_empty(), "an error without a diagnostic");
            let lines = shape(data);
            for d in &diags {
                assert_eq!(d.file, "jobs.toml");
                let (Some(line), Some(col)) = (d.line, d.col) else {
                    panic!("{d} has no position");
                };
                assert!(
                    line >= 1 && col >= 1 && line <= lines.len() && col <= lines[line - 1] + 1,
                    "{d} is outside the file ({} lines)",
                    lines.len()
                );
                assert!(!d.message.contains('\n'), "a multi-line message: {d:?}");
                assert!(!d.message.trim().is_empty(), "an empty message: {d:?}");
            }
        }
        Ok(config) => {
            assert_eq!(
                config::parse(data, path).as_ref(),
                Ok(&config),
                "parsing is deterministic"
            );
            accepted(&config);
        }
    }
}

fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn accepted(config: &Config) {
    let d = &config.daemon;
    assert!((1..=10_000).contains(&d.max_concurrent), "{d:?}");
    assert!(d.history_max_bytes >= 4096, "{d:?}");
    let mut names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), config.jobs.len(), "job names are unique");
    for job in &config.jobs {
        assert!(plain_name(&job.name), "job name {:?}", job.name);
        assert!(
            job.tags.iter().all(|t| plain_name(t)),
            "tags {:?}",
            job.tags
        );
        // Everything handed to exec must be free of NUL, or the spawn fails.
        assert!(!job.command.trim().is_empty() && !job.command.contains('\0'));
        assert!(!job.shell.is_empty() && !job.shell.contains('\0'));
        for (k, v) in job.env.iter() {
            assert!(!k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
        }
        if let Some(dir) = &job.dir {
            assert!(dir.is_absolute(), "dir {}", dir.display());
        }
        assert!(job.timeout.is_none_or(|t| !t.is_zero()), "timeout 0");
        assert!(job.output_limit <= 1 << 30);
        assert!((1..=1000).contains(&job.catch_up_limit));
        let r = &job.retry;
        assert!(r.max_delay >= r.delay, "{r:?}");
        for n in 1..=r.attempts.min(100) {
            for unit in [0.0, 0.5, 0.999] {
                let delay = r.delay_for(n, unit).expect("a retry within attempts");
                assert!(delay <= r.max_delay.mul_f64(1.0 + r.jitter) + r.max_delay / 1000);
            }
        }
        // The schedule as written means the same thing when parsed again,
        // and can be planned in the job's zone.
        // A job without a schedule runs only `after` others.
        match &job.schedule {
            Some(schedule) => {
                let again = Schedule::parse(schedule.source()).expect("the schedule re-parses");
                assert_eq!(&again, schedule);
                walk(schedule, &[job.timezone], 2);
            }
            None => assert!(
                !job.after.is_empty(),
                "a job without a schedule must have `after`"
            ),
        }
    }
}

/// Bytes (UTF-8 only) → `Schedule::parse`; an accepted expression plans
/// strictly increasing instants from awkward starts in awkward zones.
pub fn cron(data: &[u8]) {
    let Ok(expr) = std::str::from_utf8(data) else {
        return;
    };
    match Schedule::parse(expr) {
        Err(e) => {
            assert!(
                !e.message.trim().is_empty() && !e.message.contains('\n'),
                "{e:?}"
            );
            if let Some(span) = &e.span {
                assert!(
                    span.start <= span.end && span.end <= expr.len(),
                    "{e:?} in {expr:?}"
                );
            }
        }
        Ok(schedule) => {
            assert_eq!(schedule.source(), expr);
            let again = Schedule::parse(expr).expect("parsing is deterministic");
            assert_eq!(again, schedule);
            walk(&schedule, &ZONES, 4);
        }
    }
}
