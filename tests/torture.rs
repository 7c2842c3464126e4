//! Torture: the real daemon under `kill -9`, hostile job files, jobs that
//! refuse to die, an output flood, a full disk and secrets that must not
//! leak. Every loop is sized to finish in seconds on a loaded 2-core CI
//! machine (the sizes are the constants below); randomness comes from one
//! fixed seed, printed, and `REA_TORTURE_SEED=N` replays another.
//!
//! Already covered elsewhere and not repeated here: the control socket is
//! 0600 in a 0700 directory and refuses other users
//! (`live.rs`, `the_socket_refuses_other_users`).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::support::{alive, instant as t, read_pid, wait_until, Env};

/// The seed of every random choice in this file.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("REA_TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0005_EED0_F2EA);
    eprintln!("{test}: seed {seed} (replay with REA_TORTURE_SEED={seed})");
    seed
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Polls `cond` for up to `limit` (for the few waits that legitimately take
/// longer than PATIENCE, such as a gigabyte through a debug build).
fn wait_long(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return;
        }
        sleep_ms(50);
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------------------
// 1. kill -9 at random moments
// ---------------------------------------------------------------------------

/// Runs started (over all daemon lives) before the loop stops.
const KILL_MIN_RUNS: usize = 100;
/// A daemon lives this long (ms, uniform) before its kill -9.
const KILL_LIFE_MS: std::ops::RangeInclusive<u64> = 50..=700;

const KILL_JOBS: &str = r#"
[daemon]
shutdown_grace = "10s"

[jobs.s0]
schedule = "* * * * * *"
command = "true"

[jobs.s1]
schedule = "* * * * * *"
command = "sleep 0.1"

[jobs.s2]
schedule = "* * * * * *"
command = "sleep 0.2; echo done"

[jobs.s3]
schedule = "* * * * * *"
command = "sleep 0.3; exit 1"

[jobs.poke]
schedule = "@yearly"
command = "sleep 0.15"
"#;

/// The live history file as raw lines (without their `\n`).
fn raw_lines(env: &Env) -> Vec<Vec<u8>> {
    let bytes = fs::read(env.state().join("history.jsonl")).unwrap_or_default();
    let mut lines: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    lines
}

fn find(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn kill_9_at_random_moments_never_corrupts_history_or_runs_an_occurrence_twice() {
    let seed = seed("kill -9");
    let mut rng = fastrand::Rng::with_seed(seed);
    let clock = Instant::now();
    let env = Env::new();
    env.jobs(KILL_JOBS);
    let started = |env: &Env| {
        env.history()
            .iter()
            .filter(|v| v["event"] == "run" && v["status"] == "started")
            .count()
    };
    let mut kills = 0usize;
    let mut triggers = 0usize;
    while started(&env) < KILL_MIN_RUNS {
        assert!(kills < 400, "too many lives for {KILL_MIN_RUNS} runs");
        let d = env.daemon();
        let life = rng.u64(KILL_LIFE_MS);
        if rng.u8(..4) == 0 {
            // Manual runs share the kill with scheduled ones; overlap =
            // "skip" may refuse one (exit 1) if its predecessor still runs.
            let out = env.rea(&["trigger", "poke"]);
            assert!(out.code == 0 || out.code == 1, "{out:?}");
            triggers += 1;
        }
        sleep_ms(life);
        d.kill9();
        kills += 1;
    }
    // One more life, stopped cleanly: it records what the last kill left
    // unfinished, and lets its own runs end.
    let d = env.daemon();
    sleep_ms(300);
    assert_eq!(d.stop(), 0);

    // Every line but torn ones parses; a torn fragment never swallowed the
    // start of the next record.
    let lines = raw_lines(&env);
    let mut malformed = 0;
    let mut records = Vec::new();
    for line in &lines {
        let glued = find(line, br#"{"v":"#);
        assert!(
            glued.iter().all(|&i| i == 0),
            "a torn fragment glued to a record: {}",
            String::from_utf8_lossy(line)
        );
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => records.push(v),
            Err(_) => malformed += 1,
        }
    }
    assert!(
        malformed <= kills,
        "{malformed} malformed lines, {kills} kills"
    );
    // The harness's reader sees the same records.
    assert_eq!(env.history().len(), records.len());

    // Per run: one `started` at most, one final line at most, and a run
    // started by a daemon that was killed before its end is `interrupted`,
    // recorded by a later daemon.
    #[derive(Default)]
    struct RunSeen {
        started_life: Option<usize>,
        finals: Vec<(usize, String)>,
    }
    let mut life = 0usize;
    let mut runs: BTreeMap<String, RunSeen> = BTreeMap::new();
    let mut occurrences: HashMap<(String, String), usize> = HashMap::new();
    for r in &records {
        if r["event"] == "daemon_started" {
            life += 1;
            continue;
        }
        if r["event"] != "run" {
            continue;
        }
        let id = r["run"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string();
        let seen = runs.entry(id.clone()).or_default();
        let status = r["status"].as_str().unwrap().to_string();
        if status == "started" {
            assert!(seen.started_life.is_none(), "run {id} started twice");
            assert!(seen.finals.is_empty(), "run {id} started after its end");
            seen.started_life = Some(life);
            if r["trigger"] == "schedule" {
                let key = (
                    r["job"].as_str().unwrap().to_string(),
                    r["scheduled"].as_str().unwrap().to_string(),
                );
                *occurrences.entry(key).or_default() += 1;
            }
        } else {
            seen.finals.push((life, status));
        }
    }
    let (mut interrupted, mut deferred) = (0, 0);
    for (id, seen) in &runs {
        assert!(seen.finals.len() <= 1, "run {id}: {:?}", seen.finals);
        let Some(started_life) = seen.started_life else {
            // A final line without a `started` one: a skipped run, or one
            // whose `started` line was the torn one.
            continue;
        };
        let [(final_life, status)] = &seen.finals[..] else {
            panic!("run {id} (started in life {started_life}) has no final line");
        };
        if *final_life > started_life {
            assert_eq!(status, "interrupted", "run {id}");
            interrupted += 1;
            // A daemon killed before it wrote its recoveries leaves them to
            // the one after.
            if *final_life > started_life + 1 {
                deferred += 1;
            }
        } else {
            assert_ne!(
                status, "interrupted",
                "run {id} interrupted by its own daemon"
            );
        }
    }
    let twice: Vec<_> = occurrences.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "occurrences run twice: {twice:?}");
    assert!(
        interrupted > 0,
        "some kill must have caught a run in flight"
    );
    eprintln!(
        "kill -9: {kills} kills, {triggers} triggers, {} runs started, {interrupted} interrupted \
         ({deferred} recorded two lives later), {malformed} torn lines, {} lines, {:.1}s",
        started(&env),
        lines.len(),
        clock.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// 2. Mutated job files
// ---------------------------------------------------------------------------

/// Mutated files checked in-process with `rea::config::parse`.
const MUTANTS: usize = 1000;
/// Every this-many-th mutant also goes through `rea check` (the binary).
const MUTANTS_BINARY_EVERY: usize = 10;
/// Invalid mutants written over a running daemon's job file.
const RELOAD_MUTANTS: usize = 50;

const SMALL_VALID: &str = r#"[defaults]
timezone = "Europe/Berlin"
retry = { delay = "30s", max_delay = "10m" }
env = { PATH = "/usr/bin:/bin" }

[daemon]
max_concurrent = 4
shutdown_grace = "2s"

[jobs.tick]
schedule = "* * * * * *"
command = "true"

[jobs.nightly]
schedule = "30 2 * * MON-FRI"
command = "echo nightly"
timezone = "America/New_York"
timeout = "10m"
kill_grace = "5s"
overlap = "queue"
retry = { attempts = 3, jitter = 0.1 }
catch_up = "all"
catch_up_limit = 5
env = { A = "b" }
tags = ["x", "y"]
output_limit = "1MiB"
dir = "/tmp"
"#;

const MINIMAL_VALID: &str = "[jobs.a]\nschedule = \"@every 90s\"\ncommand = \"true\"\n";

const BAD_CRON: &[&str] = &[
    "",
    " ",
    "* * * *",
    "* * * * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * * 8",
    "*/0 * * * *",
    "5-1 * * * *",
    "1-2-3 * * * *",
    "1,,2 * * * *",
    "* * 30 2 *",
    "* * 31 4,6,9,11 *",
    "@every 0s",
    "@every",
    "@every -5m",
    "@every 99999999999999999999s",
    "@fortnightly",
    "@reboot now",
    "L * * * *",
    "? * * * *",
    "* * * * MON#2",
    "* * * JANUARY *",
    "*/4294967296 * * * *",
    "18446744073709551616 * * * *",
    "\u{0}",
    "* * * * \u{fffd}",
    "* * * * * 1-7/0",
];

const BAD_ZONES: &[&str] = &[
    "",
    "Mars/Olympus_Mons",
    "UTC+25",
    "../../etc/passwd",
    "/etc/localtime",
    "Europe/",
    "europe/berlin ",
    "local\u{0}",
    "EST5EDT,M3.2.0,M11.1.0",
];

const FIELD_LINES: &[&str] = &[
    "overlap = \"never\"",
    "catch_up = \"sometimes\"",
    "retry = { attempts = 101 }",
    "retry = { delay = \"1h\", max_delay = \"1s\" }",
    "retry = { factor = nan, jitter = inf }",
    "[jobs.\"bad name\"]",
    "[jobs.\"\"]",
    "env = { \"A=B\" = \"x\", \"\" = \"y\" }",
    "dir = \"relative/dir\"",
    "output_limit = \"2GiB\"",
    "output_limit = -1",
    "[[jobs.a]]",
    "[jobs]",
    "jobs = 1",
    "timeout = \"0s\"",
    "timeout = \"ten minutes\"",
    "kill_grace = 1e400",
    "max_concurrent = 0",
    "history_max_bytes = \"1KiB\"",
    "history_files = -1",
    "tags = [1, [2], { a = 3 }]",
    "comand = \"typo\"",
    "[defaults]\nschedule = \"* * * * *\"",
    "a.b.c.d.e = 1",
    "x = 1979-05-27T07:32:00Z",
    "x = \"\"\"\nmulti\nline\n\"\"\"",
    "x = '''unterminated",
];

const VALUE_SWAPS: &[&str] = &[
    "42",
    "\"42\"",
    "true",
    "[1, \"a\"]",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    "07:32:00",
    "3.5",
    "-0",
    "nan",
    "-inf",
    "\"\"",
    "[]",
    "{}",
    "0x7fffffffffffffff",
    "1000000000000000000000000000000",
    "-1000000000000000000000000000000",
];

/// Line ranges (start, end) of `src`, without the `\n`.
fn line_spans(src: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in src.iter().enumerate() {
        if *b == b'\n' {
            spans.push((start, i));
            start = i + 1;
        }
    }
    spans.push((start, src.len()));
    spans
}

/// Replaces what follows the first `=` of a random `key = value` line.
fn replace_value(rng: &mut fastrand::Rng, src: &mut Vec<u8>, value: &[u8], key: Option<&str>) {
    let spans: Vec<(usize, usize)> = line_spans(src)
        .into_iter()
        .filter(|&(s, e)| {
            let line = &src[s..e];
            let has_eq = line.contains(&b'=') && !line.starts_with(b"#");
            has_eq && key.is_none_or(|k| line.trim_ascii_start().starts_with(k.as_bytes()))
        })
        .collect();
    if spans.is_empty() {
        if let Some(k) = key {
            let mut line = format!("\n{k} = ").into_bytes();
            line.extend_from_slice(value);
            line.push(b'\n');
            let at = rng.usize(..=src.len());
            src.splice(at..at, line);
        }
        return;
    }
    let (s, e) = spans[rng.usize(..spans.len())];
    let eq = s + src[s..e].iter().position(|b| *b == b'=').unwrap_or(0);
    src.splice(eq + 1..e, [b" ", value].concat());
}

/// One random edit of `src`; see the list in the module's brief.
fn mutate_once(rng: &mut fastrand::Rng, src: &mut Vec<u8>) {
    let pos = |rng: &mut fastrand::Rng, src: &Vec<u8>| rng.usize(..=src.len());
    match rng.u8(..16) {
        0 => {
            let at = pos(rng, src);
            src.truncate(at);
        }
        1 => {
            if !src.is_empty() {
                let i = rng.usize(..src.len());
                src[i] ^= 1 << rng.u8(..8);
            }
        }
        2 => {
            let at = pos(rng, src);
            let junk: Vec<u8> = (0..rng.usize(1..8)).map(|_| rng.u8(..)).collect();
            src.splice(at..at, junk);
        }
        3 => {
            let a = pos(rng, src);
            let b = (a + rng.usize(1..64)).min(src.len());
            src.drain(a..b);
        }
        4 => {
            let v = VALUE_SWAPS[rng.usize(..VALUE_SWAPS.len())];
            replace_value(rng, src, v.as_bytes(), None);
        }
        5 => {
            // A duplicated line: a duplicate key, or a duplicate table.
            let spans = line_spans(src);
            let (s, e) = spans[rng.usize(..spans.len())];
            let mut line = src[s..e].to_vec();
            line.push(b'\n');
            let (at, _) = spans[rng.usize(..spans.len())];
            src.splice(at..at, line);
        }
        6 => {
            let huge = format!("\"{}\"", "x".repeat(1 << 20));
            replace_value(rng, src, huge.as_bytes(), None);
        }
        7 => {
            let n = if rng.bool() {
                "1000000000000000000000000000000"
            } else {
                "-1000000000000000000000000000000"
            };
            let key = ["max_concurrent", "attempts", "output_limit", "timeout", "x"];
            let key = key[rng.usize(..key.len())];
            replace_value(rng, src, n.as_bytes(), Some(key));
        }
        8 => {
            let z = format!("{:?}", BAD_ZONES[rng.usize(..BAD_ZONES.len())]);
            replace_value(rng, src, z.as_bytes(), Some("timezone"));
        }
        9 => {
            let expr = if rng.bool() {
                BAD_CRON[rng.usize(..BAD_CRON.len())].to_string()
            } else {
                let alphabet = b"0123456789*/-,@ LWMONJAN?#";
                (0..rng.usize(0..20))
                    .map(|_| alphabet[rng.usize(..alphabet.len())] as char)
                    .collect()
            };
            replace_value(rng, src, format!("{expr:?}").as_bytes(), Some("schedule"));
        }
        10 => {
            let at = pos(rng, src);
            src.insert(at, 0);
        }
        11 => {
            let bad: &[&[u8]] = &[
                b"\xff",
                b"\xc3",
                b"\xe2\x82",
                b"\xc0\xaf",
                b"\xed\xa0\x80",
                b"\xf4\x90\x80\x80",
            ];
            let at = pos(rng, src);
            src.splice(at..at, bad[rng.usize(..bad.len())].iter().copied());
        }
        12 => {
            let depth = rng.usize(1..3000);
            let open = if rng.bool() { "[" } else { "{a=" };
            let nest = format!("\nx = {}\n", open.repeat(depth));
            let at = pos(rng, src);
            src.splice(at..at, nest.into_bytes());
        }
        13 => {
            if rng.bool() {
                *src = String::from_utf8_lossy(src)
                    .replace('\n', "\r\n")
                    .into_bytes();
            } else {
                src.splice(0..0, "\u{feff}".bytes());
            }
        }
        14 => {
            let line = format!("\n{}\n", FIELD_LINES[rng.usize(..FIELD_LINES.len())]);
            let at = pos(rng, src);
            src.splice(at..at, line.into_bytes());
        }
        _ => {
            // Swap two lines (moves keys out of their table).
            let spans = line_spans(src);
            let a = spans[rng.usize(..spans.len())];
            let b = spans[rng.usize(..spans.len())];
            let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            if first.1 <= second.0 {
                let mut out = src[..first.0].to_vec();
                out.extend_from_slice(&src[second.0..second.1]);
                out.extend_from_slice(&src[first.1..second.0]);
                out.extend_from_slice(&src[first.0..first.1]);
                out.extend_from_slice(&src[second.1..]);
                *src = out;
            }
        }
    }
}

fn mutant(rng: &mut fastrand::Rng, bases: &[&[u8]]) -> Vec<u8> {
    let mut src = bases[rng.usize(..bases.len())].to_vec();
    for _ in 0..rng.usize(1..=3) {
        mutate_once(rng, &mut src);
    }
    src
}

fn bases() -> Vec<&'static [u8]> {
    vec![
        include_bytes!("../jobs.example.toml"),
        SMALL_VALID.as_bytes(),
        MINIMAL_VALID.as_bytes(),
    ]
}

/// (lines, characters per line) of `src` as `parse` counts them: UTF-8
/// (invalid bytes count one character each at most), without a BOM.
fn shape(src: &[u8]) -> Vec<usize> {
    let text = String::from_utf8_lossy(src);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    text.split('\n').map(|l| l.chars().count()).collect()
}

fn within(shape: &[usize], line: usize, col: usize) -> bool {
    line >= 1 && col >= 1 && line <= shape.len() && col <= shape[line - 1] + 1
}

#[test]
fn a_thousand_mutated_job_files_never_panic_and_every_error_is_located() {
    let seed = seed("mutants");
    let mut rng = fastrand::Rng::with_seed(seed);
    let clock = Instant::now();
    let env = Env::new();
    let bases = bases();
    let (mut valid, mut invalid, mut through_binary) = (0, 0, 0);
    let mut parse_time = Duration::ZERO;
    for i in 0..MUTANTS {
        let src = mutant(&mut rng, &bases);
        let lines = shape(&src);
        let t0 = Instant::now();
        let parsed = std::panic::catch_unwind(|| rea_config::parse(&src, Path::new("jobs.toml")))
            .unwrap_or_else(|_| {
                fs::write(env.path("panic.toml"), &src).unwrap();
                panic!(
                    "parse panicked on mutant {i}; kept as {}",
                    env.path("panic.toml").display()
                )
            });
        parse_time += t0.elapsed();
        match &parsed {
            Ok(_) => valid += 1,
            Err(diags) => {
                invalid += 1;
                assert!(!diags.is_empty());
                for d in diags {
                    assert!(
                        within(&lines, d.line.unwrap_or(0), d.col.unwrap_or(0)),
                        "mutant {i}: {d} is outside the file ({} lines)",
                        lines.len()
                    );
                    assert!(!d.message.contains('\n'), "mutant {i}: {d:?}");
                }
            }
        }
        if i % MUTANTS_BINARY_EVERY == 0 {
            through_binary += 1;
            env.jobs_bytes(&src);
            let out = env.rea(&["check", "-f", "jobs.toml"]);
            assert!(out.code == 0 || out.code == 2, "mutant {i}: {out:?}");
            assert_eq!(out.code == 0, parsed.is_ok(), "mutant {i}: {out:?}");
            for line in out.stderr.lines() {
                if line.starts_with("  hint: ") || line.starts_with("jobs.toml: ") {
                    continue;
                }
                let located = line
                    .strip_prefix("jobs.toml:")
                    .and_then(|rest| {
                        let mut parts = rest.splitn(3, ':');
                        let l = parts.next()?.parse::<usize>().ok()?;
                        let c = parts.next()?.parse::<usize>().ok()?;
                        parts.next()?.starts_with(' ').then_some((l, c))
                    })
                    .unwrap_or_else(|| panic!("mutant {i}: unlocated line {line:?}"));
                assert!(
                    within(&lines, located.0, located.1),
                    "mutant {i}: {line:?} is outside the file"
                );
            }
        }
    }
    assert!(
        valid > 0 && invalid > MUTANTS / 2,
        "{valid} valid, {invalid} invalid"
    );
    eprintln!(
        "mutants: {MUTANTS} ({valid} valid, {invalid} invalid), {through_binary} through `rea check`, \
         parse total {:.2}s, {:.1}s in all",
        parse_time.as_secs_f64(),
        clock.elapsed().as_secs_f64()
    );
}

#[test]
fn invalid_hot_reloads_never_stop_a_good_job() {
    let seed = seed("hot reloads");
    let mut rng = fastrand::Rng::with_seed(seed);
    let clock = Instant::now();
    let env = Env::new();
    env.jobs(SMALL_VALID);
    let d = env.daemon();
    env.wait_until("a first tick", || !env.finals("tick").is_empty());
    let small: &[&[u8]] = &[SMALL_VALID.as_bytes()];
    let mut fed = 0;
    while fed < RELOAD_MUTANTS {
        let src = mutant(&mut rng, small);
        if rea_config::parse(&src, Path::new("jobs.toml")).is_ok() {
            // A valid mutant may legitimately drop or reschedule `tick`.
            continue;
        }
        env.jobs_bytes(&src);
        fed += 1;
        sleep_ms(rng.u64(50..=350));
    }
    let rejected = env.events("config_rejected").len();
    env.jobs(&format!(
        "{SMALL_VALID}\n[jobs.after]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n"
    ));
    env.wait_until("the restored file to load", || {
        !env.finals("after").is_empty()
    });
    let last_tick = env.finals("tick").len();
    env.wait_until("tick after the restore", || {
        env.finals("tick").len() > last_tick
    });
    assert!(alive(d.pid()), "the daemon died");
    assert_eq!(d.stop(), 0);

    assert!(rejected > 0, "no config_rejected events");
    let mut starts: Vec<DateTime<Utc>> = env
        .finals("tick")
        .iter()
        .filter(|r| r["trigger"] == "schedule")
        .map(|r| t(r, "started"))
        .collect();
    starts.sort();
    let gaps: Vec<i64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]).num_milliseconds())
        .collect();
    let max_gap = gaps.iter().copied().max().unwrap_or(0);
    assert!(
        max_gap <= 5000,
        "tick stopped for {max_gap} ms; gaps: {gaps:?}"
    );
    eprintln!(
        "hot reloads: {fed} invalid files, {rejected} rejected (writes closer than the \
         watcher's debounce are one reload), {} ticks, largest gap {max_gap} ms, {:.1}s",
        starts.len(),
        clock.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// 3. Jobs that fork and ignore SIGTERM
// ---------------------------------------------------------------------------

/// Live (non-zombie) processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the `(comm)`: state ppid pgrp ...
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

const STUBBORN: &str =
    "trap '' TERM; (trap '' TERM; sleep 1000) & echo $! > @ROOT@/grandchild; sleep 1000";

#[test]
fn a_timeout_kills_grandchildren_that_ignore_sigterm() {
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.stubborn]\nschedule = \"@reboot\"\ncommand = \"{STUBBORN}\"\ntimeout = \"1s\"\nkill_grace = \"300ms\"\n"
    ));
    let d = env.daemon();
    env.wait_until("the timeout", || !env.finals("stubborn").is_empty());
    let run = &env.finals("stubborn")[0];
    assert_eq!(run["status"], "timed_out", "{run}");
    assert_eq!(run["signal"], libc::SIGKILL, "TERM was ignored: {run}");
    let pgid = run["pid"].as_i64().unwrap() as i32;
    let grandchild = read_pid(&env.path("grandchild")).expect("the grandchild's pid");
    // The final line is written once the group is empty: nothing to wait for.
    assert!(!alive(grandchild), "grandchild {grandchild} survived");
    assert_eq!(group_members(pgid), Vec::<i32>::new());
    assert_eq!(d.stop(), 0);
}

#[test]
fn daemon_shutdown_kills_grandchildren_that_ignore_sigterm() {
    let env = Env::new();
    env.jobs(&format!(
        "[daemon]\nshutdown_grace = \"500ms\"\n\n[jobs.stubborn]\nschedule = \"@reboot\"\ncommand = \"{STUBBORN}\"\nkill_grace = \"300ms\"\n"
    ));
    let d = env.daemon();
    env.wait_until("the grandchild", || {
        read_pid(&env.path("grandchild")).is_some()
    });
    let grandchild = read_pid(&env.path("grandchild")).unwrap();
    // The `started` line is written off the loop: the run can be this far
    // before it reaches the file.
    env.wait_until("the started record", || {
        !env.runs("stubborn", "started").is_empty()
    });
    let pgid = env.runs("stubborn", "started")[0]["pid"].as_i64().unwrap() as i32;
    assert!(!group_members(pgid).is_empty());
    assert_eq!(d.stop(), 0);
    assert!(!alive(grandchild), "grandchild {grandchild} survived");
    assert_eq!(group_members(pgid), Vec::<i32>::new());
    let run = &env.finals("stubborn")[0];
    assert_eq!(run["status"], "killed", "{run}");
    assert_eq!(run["reason"], "daemon shutdown");
    assert_eq!(run["signal"], libc::SIGKILL, "{run}");
}

// ---------------------------------------------------------------------------
// 4. A gigabyte of output
// ---------------------------------------------------------------------------

/// (VmHWM, VmRSS) of `pid`, in KiB.
fn memory_kib(pid: i32) -> (u64, u64) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {status}"))
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn flood(bytes: u64) {
    let clock = Instant::now();
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.warmup]\nschedule = \"@yearly\"\ncommand = \"head -c 1000000 /dev/zero\"\n\n\
         [jobs.flood]\nschedule = \"@yearly\"\ncommand = \"head -c {bytes} /dev/zero\"\n"
    ));
    let d = env.daemon();
    // One small run first, so buffers every run needs are already counted.
    env.rea(&["trigger", "warmup", "--wait"]).ok();
    let (hwm_before, rss_before) = memory_kib(d.pid());
    let t0 = Instant::now();
    env.rea(&["trigger", "flood"]).ok();
    wait_long("the flood to end", Duration::from_secs(300), || {
        !env.finals("flood").is_empty()
    });
    let took = t0.elapsed();
    let (hwm_after, rss_after) = memory_kib(d.pid());
    assert_eq!(d.stop(), 0);
    let run = &env.finals("flood")[0];
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output_bytes"], bytes);
    eprintln!(
        "flood of {bytes} bytes: {:.1}s ({:.0} MB/s), VmHWM {hwm_before} -> {hwm_after} KiB, \
         VmRSS {rss_before} -> {rss_after} KiB; {:.1}s in all",
        took.as_secs_f64(),
        bytes as f64 / 1e6 / took.as_secs_f64(),
        clock.elapsed().as_secs_f64()
    );
    let limit = 16 * 1024;
    assert!(
        hwm_after.saturating_sub(hwm_before) < limit,
        "peak RSS grew by {} KiB",
        hwm_after - hwm_before
    );
    assert!(
        rss_after.saturating_sub(rss_before) < limit,
        "RSS grew by {} KiB",
        rss_after - rss_before
    );
}

/// 1 GB takes about a second through a debug build here; no need for a
/// smaller default.
#[test]
fn a_gigabyte_of_output_in_bounded_memory() {
    flood(1_000_000_000);
}

// ---------------------------------------------------------------------------
// 5. History on a full file system
// ---------------------------------------------------------------------------

/// RLIMIT_FSIZE of the daemon (and so of its jobs): a few runs fill it.
const FSIZE_LIMIT: u64 = 16 * 1024;

fn set_fsize(pid: i32, limit: u64) {
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid rlimit for the call; the old limit is not
    // asked for (null).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_FSIZE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn a_full_file_system_keeps_scheduling_and_the_backlog_is_written_later() {
    let clock = Instant::now();
    let env = Env::new();
    env.jobs(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo x >> @ROOT@/ticks; head -c 3000 /dev/zero | tr '\\\\0' y\"\n\n\
         [jobs.overflow]\nschedule = \"@yearly\"\ncommand = \"exec head -c 100000 /dev/zero > @ROOT@/big\"\n",
    );
    let d = env.daemon_configured(&[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs here.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: FSIZE_LIMIT,
                    rlim_max: libc::RLIM_INFINITY,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let status = || env.rea(&["status", "--json"]).json();
    let failing = || {
        let s = status();
        s["daemon"]["history"]["last_error"].is_object()
            && s["daemon"]["history"]["backlog"].as_u64().unwrap_or(0) > 0
    };
    let ticks = || env.read("ticks").lines().count();
    wait_until("history writes to fail", || {
        assert!(alive(d.pid()), "the daemon died:\n{}", d.log_text());
        failing()
    });
    let s = status();
    eprintln!(
        "full disk: status while failing: {}",
        s["daemon"]["history"]
    );
    let message = s["daemon"]["history"]["last_error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("File too large"), "{message}");
    // Scheduling goes on.
    let before = ticks();
    wait_until("three more ticks", || ticks() >= before + 3);
    assert!(alive(d.pid()), "the daemon died:\n{}", d.log_text());
    assert!(failing(), "{}", status());
    // Jobs keep the default SIGXFSZ: one that outgrows the limit dies of it.
    env.rea(&["trigger", "overflow"]).ok();
    // Space returns: the backlog is written.
    let at_restore = ticks();
    set_fsize(d.pid(), libc::RLIM_INFINITY);
    wait_until("the backlog to be written", || {
        let s = status();
        s["daemon"]["history"]["backlog"] == 0
            && env.finals("tick").len() >= at_restore
            && !env.finals("overflow").is_empty()
    });
    let s = status();
    assert_eq!(s["daemon"]["history"]["dropped"], 0, "{s}");
    assert!(d.log_text().contains("cannot write the history log"));
    assert_eq!(d.stop(), 0);
    let overflow = &env.finals("overflow")[0];
    assert_eq!(overflow["status"], "failed", "{overflow}");
    assert_eq!(overflow["signal"], libc::SIGXFSZ, "{overflow}");
    // Every record is there, in order; at most one line was cut by the limit.
    let malformed = raw_lines(&env)
        .iter()
        .filter(|l| serde_json::from_slice::<Value>(l).is_err())
        .count();
    assert!(malformed <= 1, "{malformed} malformed lines");
    let tick_runs = env.finals("tick").len();
    eprintln!(
        "full disk: {tick_runs} tick runs recorded, {malformed} cut line, {:.1}s",
        clock.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// 6. Security
// ---------------------------------------------------------------------------

#[test]
fn a_job_file_others_can_write_is_refused_by_rea_run() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    for (mode, who) in [
        (0o620, "group"),
        (0o602, "others"),
        (0o666, "group and others"),
    ] {
        fs::set_permissions(env.jobs_path(), fs::Permissions::from_mode(mode)).unwrap();
        env.rea(&["run"])
            .code(2)
            .stderr_has(&format!("refusing a job file writable by {who}"))
            .stderr_has("chmod go-w");
        assert!(env.events("daemon_started").is_empty());
    }
    let d = env.daemon_with(&["--allow-insecure"]);
    assert_eq!(d.stop(), 0);
}

#[test]
fn a_reload_of_a_job_file_others_can_write_is_refused() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let d = env.daemon();
    fs::set_permissions(env.jobs_path(), fs::Permissions::from_mode(0o666)).unwrap();
    fs::write(
        env.jobs_path(),
        "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n\n[jobs.b]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    )
    .unwrap();
    env.wait_until("the rejection", || {
        !env.events("config_rejected").is_empty()
    });
    let rejected = &env.events("config_rejected")[0];
    assert!(
        rejected["reason"]
            .as_str()
            .unwrap()
            .contains("refusing a job file writable by group and others"),
        "{rejected}"
    );
    sleep_ms(1500);
    assert!(env.finals("b").is_empty(), "the insecure file was loaded");
    assert_eq!(d.stop(), 0);
}

const SECRET: &str = "s3cr3t-value-xyz";
const ROTATED: &str = "r0tated-s3cr3t-abc";

fn secret_jobs(value: &str, broken: bool) -> String {
    format!(
        r#"[defaults]
env = {{ SECRET_TOKEN = "{value}" }}

[jobs.ok]
schedule = "* * * * * *"
command = "test -n \"$SECRET_TOKEN\" && echo token set"

[jobs.fail]
schedule = "@yearly"
command = "test -n \"$SECRET_TOKEN\" && exit 3"

[jobs.slow]
schedule = "@yearly"
command = "sleep 30"
timeout = "300ms"
kill_grace = "100ms"
env = {{ SECRET_TOKEN = "{value}", OTHER = "{value}"{broken} }}
"#,
        broken = if broken { " oops" } else { "" }
    )
}

/// Runs success, failure, timeout, a changed env, an invalid reload that
/// touches the env line, under one log format.
fn secret_life(env: &Env, format: &str) {
    env.jobs(&secret_jobs(SECRET, false));
    let d = env.daemon_configured(&["--log-format", format], |cmd| {
        cmd.env("RUST_LOG", "debug");
    });
    let mut client_output = String::new();
    let mut run = |args: &[&str], code: i32| {
        let out = env.rea(args);
        out.code(code);
        client_output.push_str(&out.stdout);
        client_output.push_str(&out.stderr);
    };
    // --force: `ok` also runs every second, and a scheduled run in
    // progress would make a plain trigger a skip (the test is about
    // secrets, not overlap).
    run(&["trigger", "ok", "--force", "--wait"], 0);
    run(&["trigger", "fail", "--wait"], 3);
    // 128 + SIGTERM, as a shell reports it.
    run(&["trigger", "slow", "--wait"], 143);
    let loaded = env.events("config_loaded").len();
    env.jobs(&secret_jobs(ROTATED, false));
    env.wait_until("the changed env to load", || {
        env.events("config_loaded").len() > loaded
    });
    run(&["trigger", "ok", "--wait"], 0);
    let rejected = env.events("config_rejected").len();
    env.jobs(&secret_jobs(ROTATED, true));
    env.wait_until("the broken env line to be rejected", || {
        env.events("config_rejected").len() > rejected
    });
    for args in [
        &["status", "--json"][..],
        &["status"],
        &["status", "ok", "--json"],
        &["history", "--json"],
        &["history"],
        &["logs", "ok"],
        &["logs", "slow"],
    ] {
        run(args, 0);
    }
    let log_path = d.log.clone();
    assert_eq!(d.stop(), 0);
    let log = fs::read_to_string(log_path).unwrap();
    assert!(
        log.contains("reloaded"),
        "the log is the one we think:\n{log}"
    );
    for secret in [SECRET, ROTATED] {
        assert!(!log.contains(secret), "{format} log leaks {secret}:\n{log}");
        assert!(
            !client_output.contains(secret),
            "client output leaks {secret}:\n{client_output}"
        );
    }
}

#[test]
fn environment_values_never_reach_logs_history_or_status() {
    let env = Env::new();
    secret_life(&env, "human");
    secret_life(&env, "json");
    let finals = env.history();
    assert!(
        ["succeeded", "failed", "timed_out"]
            .iter()
            .all(|s| finals.iter().any(|r| r["status"] == *s)),
        "every kind of end was exercised"
    );
    for entry in fs::read_dir(env.state()).unwrap().flatten() {
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let content = String::from_utf8_lossy(&fs::read(&path).unwrap()).into_owned();
        for secret in [SECRET, ROTATED] {
            assert!(
                !content.contains(secret),
                "{} leaks {secret}",
                path.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 7. The fuzz corpus, run as a regular test
// ---------------------------------------------------------------------------

#[path = "../fuzz/checks.rs"]
mod checks;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).expect("corpus file"),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 10,
        "{} holds {} inputs",
        dir.display(),
        out.len()
    );
    out
}

#[test]
fn the_job_file_fuzz_corpus_passes_the_fuzz_checks() {
    for (name, input) in corpus("job_file") {
        eprintln!("job_file/{name}");
        checks::job_file(&input);
    }
}

#[test]
fn the_cron_fuzz_corpus_passes_the_fuzz_checks() {
    for (name, input) in corpus("cron") {
        eprintln!("cron/{name}");
        checks::cron(&input);
    }
}

/// `REA_CLUSTER_URL` (which may carry the database's password) is read by
/// the daemon and never handed to a run or a hook of its own user, whose
/// environment is otherwise the daemon's.
#[test]
fn the_cluster_url_never_reaches_a_runs_environment() {
    let env = Env::new();
    env.jobs(
        "[jobs.printenv]\nschedule = \"@reboot\"\ncommand = \"env | grep -c '^REA_CLUSTER_URL=' || true\"\non_success = \"env | grep -q '^REA_CLUSTER_URL=' && echo LEAK >> hook.out || echo clean >> hook.out\"\ndir = \"@DIR@\"\n"
            .replace("@DIR@", env.dir.path().to_str().expect("utf-8"))
            .as_str(),
    );
    let _d = env.daemon_with_env(
        &[],
        &[("REA_CLUSTER_URL", "postgresql://rea:s3cr3t@db/rea")],
    );
    env.wait_until("the run", || !env.finals("printenv").is_empty());
    let rec = &env.finals("printenv")[0];
    assert_eq!(rec["output"].as_str().map(str::trim), Some("0"), "{rec}");
    // The shell makes the file (`>>`) a moment before it writes the line.
    env.wait_until("the hook", || env.read("hook.out").ends_with('\n'));
    assert_eq!(env.read("hook.out").trim(), "clean");
}
