//! Time as people read it: `history`, `pending` and `status` show instants
//! in the machine's zone (`--utc` for UTC), `--since`/`--until` read
//! `today`, `yesterday` and local dates, `rea at` takes its time in several
//! words, and `--json` stays UTC. Every command here gets its zone from
//! `TZ` in its own environment: nothing depends on the machine's zone.

use chrono::{DateTime, Duration, NaiveTime, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::support::Env;

/// A zone where it is about noon now, so "today" and "yesterday" are far
/// from a midnight while the test runs. `Etc/GMT-N` is UTC+N.
fn noon_zone() -> (String, Tz) {
    let offset = 12 - i64::from(Utc::now().hour());
    let name = match offset {
        0 => "Etc/GMT".to_string(),
        n if n > 0 => format!("Etc/GMT-{n}"),
        n => format!("Etc/GMT+{}", -n),
    };
    let tz: Tz = name.parse().expect("an Etc zone");
    (name, tz)
}

fn shown(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A final run line as the daemon writes it.
fn run_line(job: &str, run: &str, started: DateTime<Utc>, ended: DateTime<Utc>) -> String {
    format!(
        "{{\"v\":1,\"ts\":\"{e}\",\"event\":\"run\",\"job\":\"{job}\",\"run\":\"{run}\",\"attempt\":1,\"trigger\":\"schedule\",\"status\":\"succeeded\",\"scheduled\":\"{s}\",\"started\":\"{s}\",\"ended\":\"{e}\",\"duration_ms\":{ms},\"exit_code\":0}}\n",
        s = rfc(started),
        e = rfc(ended),
        ms = (ended - started).num_milliseconds()
    )
}

/// The run ids in the order `rea history` printed them.
fn order(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("run-")))
        .map(str::to_string)
        .collect()
}

#[test]
fn history_shows_and_reads_the_machines_zone() {
    let env = Env::new();
    let (zone, tz) = noon_zone();
    let today = Utc::now().with_timezone(&tz).date_naive();
    let midnight = tz
        .from_local_datetime(&today.and_time(NaiveTime::MIN))
        .unwrap()
        .with_timezone(&Utc);
    let yesterday = midnight - Duration::days(1);
    // Written in `ts` order (a run's line when it ends): run-long started
    // first and ended last.
    let lines = [
        run_line(
            "a",
            "run-old",
            yesterday - Duration::hours(2),
            yesterday - Duration::hours(1),
        ),
        run_line(
            "a",
            "run-yday",
            yesterday + Duration::hours(3),
            yesterday + Duration::hours(4),
        ),
        run_line("a", "run-long", midnight, midnight + Duration::hours(2)),
        run_line(
            "b",
            "run-short",
            midnight + Duration::minutes(30),
            midnight + Duration::minutes(31),
        ),
    ];
    std::fs::create_dir_all(env.state()).unwrap();
    std::fs::write(env.state().join("history.jsonl"), lines.concat()).unwrap();
    let tz_env = [("TZ", zone.as_str())];

    let all = env.rea_env(&["history"], &tz_env);
    all.ok();
    // Newest first by the time shown (the start): the long run started
    // before the short one although its line was written after it.
    assert_eq!(
        order(&all.stdout),
        ["run-short", "run-long", "run-yday", "run-old"],
        "{}",
        all.stdout
    );
    all.stdout_has(&shown(midnight, tz))
        .stdout_has(&shown(midnight + Duration::minutes(30), tz));
    assert!(!all.stdout.contains(" UTC "), "{}", all.stdout);

    let utc = env.rea_env(&["history", "--utc"], &tz_env);
    utc.ok().stdout_has(&shown(midnight, Tz::UTC));

    let since_today = env.rea_env(&["history", "--since", "today"], &tz_env);
    assert_eq!(order(&since_today.stdout), ["run-short", "run-long"]);
    let yday = env.rea_env(
        &["history", "--since", "yesterday", "--until", "today"],
        &tz_env,
    );
    assert_eq!(order(&yday.stdout), ["run-yday"], "{}", yday.stdout);
    let local_minute = (yesterday + Duration::hours(3))
        .with_timezone(&tz)
        .format("%Y-%m-%d %H:%M")
        .to_string();
    let from = env.rea_env(&["history", "--since", &local_minute], &tz_env);
    assert_eq!(
        order(&from.stdout),
        ["run-short", "run-long", "run-yday"],
        "--since {local_minute:?}:\n{}",
        from.stdout
    );
    let date = today.format("%Y-%m-%d").to_string();
    let until = env.rea_env(&["history", "--until", &date], &tz_env);
    assert_eq!(order(&until.stdout), ["run-yday", "run-old"]);
    env.rea_env(&["history", "--until", "soon"], &tz_env)
        .code(2)
        .stderr_has("--until \"soon\": write a duration back from now");

    // --json: the history schema, UTC, whatever the zone.
    let json = env.rea_env(&["history", "--json", "--since", "today"], &tz_env);
    let first: serde_json::Value =
        serde_json::from_str(json.stdout.lines().next().expect("a line")).unwrap();
    assert_eq!(first["started"], rfc(midnight + Duration::minutes(30)));
}

#[test]
fn at_and_pending_speak_the_machines_zone() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let _d = env.daemon();
    let shanghai = [("TZ", "Asia/Shanghai")];

    // `rea at 14:30`: pending then shows 14:30 where it was typed.
    let id = env.rea_env(
        &["at", "14:30", "--name", "report", "--", "true"],
        &shanghai,
    );
    id.ok().stdout_is("report\n");
    let pending = env.rea_env(&["pending"], &shanghai);
    pending.ok().stdout_has(" 14:30:00 CST");
    // The same instant in UTC: 14:30 in Shanghai is 06:30 UTC.
    env.rea_env(&["pending", "--utc"], &shanghai)
        .ok()
        .stdout_has(" 06:30:00 UTC");
    let json = env.rea_env(&["pending", "--json"], &shanghai).json();
    let due = json["oneshots"][0]["due"]
        .as_str()
        .expect("due")
        .to_string();
    assert!(due.contains("T06:30:00") && due.ends_with('Z'), "{due}");
    // status of the one-shot: the same local time.
    env.rea_env(&["status", "report"], &shanghai)
        .ok()
        .stdout_has(" 14:30:00 CST");

    // at(1)'s spellings, unquoted: several words make one time.
    env.rea_env(
        &["at", "now", "+", "30m", "--name", "soon", "--", "true"],
        &shanghai,
    )
    .ok()
    .stdout_is("soon\n");
    env.rea_env(
        &["at", "2099-12-01", "10:00", "--name", "later", "--", "true"],
        &[("TZ", "Europe/Berlin")],
    )
    .ok();
    let berlin = env.rea_env(&["pending"], &[("TZ", "Europe/Berlin")]);
    berlin.ok().stdout_has("2099-12-01 10:00:00 CET");
    let soon = berlin
        .stdout
        .lines()
        .find(|l| l.starts_with("soon "))
        .unwrap_or_else(|| panic!("no soon in:\n{}", berlin.stdout));
    assert!(soon.contains("in 29m") || soon.contains("in 30m"), "{soon}");
    env.rea_env(&["at", "teatime", "--", "true"], &shanghai)
        .code(2)
        .stderr_has("cannot read the time \"teatime\"");
}

/// The time words people bring from `at(1)` and `journalctl`: `now + 30
/// minutes`, `noon`, `--since -1h`, `--since "2 hours ago"`, `--since
/// 08:00`; a number without a unit says so, not "unknown". And `rea next`
/// reads an expression in the machine's zone, as cron reads a crontab.
#[test]
fn at_and_journalctl_spellings_are_understood() {
    let env = Env::new();
    env.jobs("[jobs.a]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let _d = env.daemon();
    let berlin = [("TZ", "Europe/Berlin")];
    env.rea_env(
        &[
            "at", "now", "+", "30", "minutes", "--name", "words", "--", "true",
        ],
        &berlin,
    )
    .ok()
    .stdout_is("words\n");
    env.rea_env(&["at", "noon", "--name", "lunch", "--", "true"], &berlin)
        .ok();
    let pending = env.rea_env(&["pending"], &berlin);
    pending.ok().stdout_has(" 12:00:00 CET");
    let words = pending
        .stdout
        .lines()
        .find(|l| l.starts_with("words "))
        .unwrap_or_else(|| panic!("no words in:\n{}", pending.stdout));
    assert!(
        words.contains("in 29m") || words.contains("in 30m"),
        "{words}"
    );
    env.rea_env(&["at", "now", "+", "30", "--", "true"], &berlin)
        .code(2)
        .stderr_has("a unit is missing after 30 (write e.g. \"30m\" or \"30 minutes\")");
    for since in ["-1h", "2 hours ago", "08:00", "-30 min"] {
        env.rea_env(&["history", "--since", since], &berlin).ok();
    }
    env.rea_env(&["history", "--since", "-3 fortnights"], &berlin)
        .code(2)
        .stderr_has("unknown unit \"fortnights\"");
    env.rea_env(
        &[
            "next",
            "0 3 * * *",
            "--after",
            "2026-11-29T00:00:00Z",
            "-n",
            "1",
        ],
        &berlin,
    )
    .ok()
    .stdout_is("2026-11-29T03:00:00+01:00\n");
}
