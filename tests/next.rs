//! `rea next`: fire instants as a user sees them. Tables of the classic
//! traps, then DST in several zones, then the output formats and errors.

use crate::support::Env;

/// `rea next EXPR --tz TZ --after AFTER -n N`, one instant per line.
fn fires(expr: &str, tz: &str, after: &str, n: usize) -> Vec<String> {
    let env = Env::new();
    let count = n.to_string();
    let out = env.rea(&["next", expr, "--tz", tz, "--after", after, "-n", &count]);
    out.ok();
    assert_eq!(out.stderr, "", "for {expr:?}");
    out.stdout.lines().map(str::to_string).collect()
}

/// Each case: expression, zone, after, expected fires.
fn table(cases: &[(&str, &str, &str, &[&str])]) {
    let mut failures = Vec::new();
    for (expr, tz, after, want) in cases {
        let got = fires(expr, tz, after, want.len());
        if got != *want {
            failures.push(format!(
                "{expr:?} in {tz} after {after}:\n  want {want:?}\n  got  {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn calendar_traps() {
    table(&[
        // Feb 29 only in leap years.
        (
            "0 0 29 2 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
        ),
        // Day 31 skips the short months.
        (
            "0 0 31 * *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &[
                "2026-01-31T00:00:00+00:00",
                "2026-03-31T00:00:00+00:00",
                "2026-05-31T00:00:00+00:00",
            ],
        ),
        // DOM and DOW both restricted: either (the 1st and every Monday).
        (
            "0 0 1 * MON",
            "UTC",
            "2026-06-28T00:00:00Z",
            &[
                "2026-06-29T00:00:00+00:00",
                "2026-07-01T00:00:00+00:00",
                "2026-07-06T00:00:00+00:00",
            ],
        ),
        // `*/2` starts with `*`: both must match (odd days that are Mondays).
        (
            "0 0 */2 * 1",
            "UTC",
            "2026-06-01T00:00:00Z",
            &[
                "2026-06-15T00:00:00+00:00",
                "2026-06-29T00:00:00+00:00",
                "2026-07-13T00:00:00+00:00",
            ],
        ),
        // 7 and 0 are Sunday.
        (
            "0 0 * * 7",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-07T00:00:00+00:00"],
        ),
        (
            "0 0 * * 0",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-07T00:00:00+00:00"],
        ),
        // Names, any case.
        (
            "0 0 * jan-Feb sun",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2027-01-03T00:00:00+00:00", "2027-01-10T00:00:00+00:00"],
        ),
        (
            "@yearly",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"],
        ),
        (
            "@annually",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2027-01-01T00:00:00+00:00"],
        ),
        (
            "@monthly",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-07-01T00:00:00+00:00"],
        ),
        (
            "@weekly",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-07T00:00:00+00:00"],
        ),
        (
            "@daily",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-02T00:00:00+00:00"],
        ),
        (
            "@midnight",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-02T00:00:00+00:00"],
        ),
        (
            "@hourly",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T01:00:00+00:00"],
        ),
        (
            "59 23 31 12 *",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-12-31T23:59:00+00:00", "2027-12-31T23:59:00+00:00"],
        ),
        // Seconds form.
        (
            "*/20 * * * * *",
            "UTC",
            "2026-06-01T00:00:00Z",
            &[
                "2026-06-01T00:00:20+00:00",
                "2026-06-01T00:00:40+00:00",
                "2026-06-01T00:01:00+00:00",
            ],
        ),
        (
            "30 0 0 * * *",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T00:00:30+00:00", "2026-06-02T00:00:30+00:00"],
        ),
    ]);
}

#[test]
fn after_is_exclusive() {
    table(&[
        (
            "0 0 1 1 *",
            "UTC",
            "2027-01-01T00:00:00Z",
            &["2028-01-01T00:00:00+00:00"],
        ),
        (
            "0 0 1 1 *",
            "UTC",
            "2027-01-01T01:00:00+01:00",
            &["2028-01-01T00:00:00+00:00"],
        ),
        (
            "0 0 1 1 *",
            "UTC",
            "2026-12-31T23:59:59.999Z",
            &["2027-01-01T00:00:00+00:00"],
        ),
        (
            "* * * * * *",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T00:00:01+00:00"],
        ),
    ]);
}

#[test]
fn every_is_aligned_to_the_epoch() {
    table(&[
        (
            "@every 90s",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T00:01:30+00:00", "2026-06-01T00:03:00+00:00"],
        ),
        // Starting later does not shift the grid.
        (
            "@every 90s",
            "UTC",
            "2026-06-01T00:00:30Z",
            &["2026-06-01T00:01:30+00:00"],
        ),
        (
            "@every 90s",
            "UTC",
            "1970-01-01T00:00:00Z",
            &["1970-01-01T00:01:30+00:00"],
        ),
        (
            "@every 7m",
            "UTC",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T00:01:00+00:00", "2026-06-01T00:08:00+00:00"],
        ),
        // The zone changes the display only.
        (
            "@every 90s",
            "Asia/Kolkata",
            "2026-06-01T00:00:00Z",
            &["2026-06-01T05:31:30+05:30"],
        ),
    ]);
}

#[test]
fn spring_forward() {
    table(&[
        // Fixed-time: once, when the gap ends.
        (
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T00:00:00Z",
            &["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00"],
        ),
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00:00Z",
            &["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
        ),
        (
            "0 3 * * *",
            "Pacific/Chatham",
            "2026-09-26T00:00:00Z",
            &["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"],
        ),
        (
            "30 2 * * *",
            "Australia/Sydney",
            "2026-10-03T00:00:00Z",
            &["2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
        ),
        // `*`-prefixed: times in the gap do not exist.
        (
            "30 * * * *",
            "America/New_York",
            "2026-03-08T05:00:00Z",
            &[
                "2026-03-08T00:30:00-05:00",
                "2026-03-08T01:30:00-05:00",
                "2026-03-08T03:30:00-04:00",
            ],
        ),
        (
            "*/30 * * * *",
            "Australia/Sydney",
            "2026-10-03T15:00:00Z",
            &["2026-10-04T01:30:00+10:00", "2026-10-04T03:00:00+11:00"],
        ),
    ]);
}

#[test]
fn fall_back() {
    table(&[
        // Fixed-time: once, on the first (summer) pass.
        (
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T00:00:00Z",
            &[
                "2026-10-24T02:30:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-26T02:30:00+01:00",
            ],
        ),
        (
            "15 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T00:00:00Z",
            &["2026-04-05T01:15:00+11:00", "2026-04-06T01:15:00+10:30"],
        ),
        (
            "0 3 * * *",
            "Pacific/Chatham",
            "2026-04-04T00:00:00Z",
            &["2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"],
        ),
        (
            "30 2 * * *",
            "Australia/Sydney",
            "2026-04-04T00:00:00Z",
            &["2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
        ),
        // `*`-prefixed: repeated times fire on both passes.
        (
            "30 * * * *",
            "America/New_York",
            "2026-11-01T04:00:00Z",
            &[
                "2026-11-01T00:30:00-04:00",
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:30:00-05:00",
            ],
        ),
        (
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-25T00:00:00Z",
            &[
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-25T03:00:00+01:00",
            ],
        ),
        (
            "*/15 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T14:00:00Z",
            &[
                "2026-04-05T01:15:00+11:00",
                "2026-04-05T01:30:00+11:00",
                "2026-04-05T01:45:00+11:00",
                "2026-04-05T01:30:00+10:30",
                "2026-04-05T01:45:00+10:30",
                "2026-04-06T01:00:00+10:30",
            ],
        ),
        (
            "*/30 * * * *",
            "Pacific/Chatham",
            "2026-04-04T13:00:00Z",
            &[
                "2026-04-05T03:00:00+13:45",
                "2026-04-05T03:30:00+13:45",
                "2026-04-05T03:00:00+12:45",
                "2026-04-05T03:30:00+12:45",
            ],
        ),
        (
            "*/30 * * * *",
            "Australia/Sydney",
            "2026-04-04T15:00:00Z",
            &[
                "2026-04-05T02:30:00+11:00",
                "2026-04-05T02:00:00+10:00",
                "2026-04-05T02:30:00+10:00",
            ],
        ),
    ]);
}

#[test]
fn default_count_is_five_and_default_zone_is_utc() {
    let env = Env::new();
    env.rea(&["next", "@daily", "--after", "2026-06-01T00:00:00Z"])
        .ok()
        .stdout_is(
            "2026-06-02T00:00:00+00:00\n2026-06-03T00:00:00+00:00\n2026-06-04T00:00:00+00:00\n2026-06-05T00:00:00+00:00\n2026-06-06T00:00:00+00:00\n",
        );
}

#[test]
fn without_after_fires_are_in_the_future() {
    let env = Env::new();
    let before = chrono::Utc::now();
    let out = env.rea(&["next", "* * * * * *", "-n", "3"]);
    out.ok();
    let times: Vec<chrono::DateTime<chrono::FixedOffset>> = out
        .stdout
        .lines()
        .map(|l| chrono::DateTime::parse_from_rfc3339(l).expect("RFC 3339"))
        .collect();
    assert_eq!(times.len(), 3);
    assert!(times[0] > before);
    assert_eq!((times[1] - times[0]).num_seconds(), 1);
    assert_eq!((times[2] - times[1]).num_seconds(), 1);
}

#[test]
fn json_output() {
    let env = Env::new();
    let out = env.rea(&[
        "next",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T12:00:00Z",
        "-n",
        "2",
        "--json",
    ]);
    out.ok();
    assert_eq!(
        out.json(),
        serde_json::json!({
            "expression": "30 2 * * *",
            "job": null,
            "timezone": "America/New_York",
            "after": "2026-03-07T12:00:00Z",
            "fires": ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        })
    );
}

const JOBS: &str = "[jobs.backup]\nschedule = \"30 2 * * *\"\ncommand = \"x\"\ntimezone = \"Europe/Berlin\"\n\n[jobs.backup-logs]\nschedule = \"@daily\"\ncommand = \"x\"\n";

#[test]
fn a_job_uses_its_own_zone() {
    let env = Env::new();
    env.jobs(JOBS);
    env.rea(&[
        "next",
        "backup",
        "--after",
        "2026-03-28T00:00:00Z",
        "-n",
        "2",
    ])
    .ok()
    .stdout_is("2026-03-28T02:30:00+01:00\n2026-03-29T03:00:00+02:00\n");
    let out = env.rea(&[
        "next",
        "backup",
        "--after",
        "2026-03-28T00:00:00Z",
        "-n",
        "1",
        "--json",
    ]);
    out.ok();
    assert_eq!(out.json()["job"], "backup");
    assert_eq!(out.json()["timezone"], "Europe/Berlin");
    assert_eq!(out.json()["expression"], "30 2 * * *");
    // --tz does not override it, and says so.
    env.rea(&[
        "next",
        "backup",
        "--tz",
        "UTC",
        "--after",
        "2026-03-28T00:00:00Z",
        "-n",
        "1",
    ])
    .ok()
    .stdout_is("2026-03-28T02:30:00+01:00\n")
    .stderr_is("rea: note: --tz is ignored for a job; it uses its own timezone (Europe/Berlin)\n");
}

#[test]
fn an_unknown_job_names_the_closest_and_exits_5() {
    let env = Env::new();
    env.jobs(JOBS);
    let out = env.rea(&["next", "bakup"]);
    out.code(5);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "rea: no job named \"bakup\" in {} (did you mean one of \"backup\", \"backup-logs\"?)\n",
            env.jobs_path().display()
        )
    );
    let out = env.rea(&["next", "zzz"]);
    out.code(5);
    assert_eq!(
        out.stderr,
        format!(
            "rea: no job named \"zzz\" in {}\n",
            env.jobs_path().display()
        )
    );
}

#[test]
fn a_bad_zone_suggests_and_exits_2() {
    let env = Env::new();
    env.rea(&["next", "@daily", "--tz", "Europe/Berln"])
        .code(2)
        .stdout_is("")
        .stderr_is("rea: unknown timezone \"Europe/Berln\"\n  hint: did you mean one of \"Europe/Berlin\", \"Europe/Dublin\", \"Europe/Belgrade\"?\n");
    env.rea(&["next", "@daily", "--tz", "Nowhere"])
        .code(2)
        .stderr_is("rea: unknown timezone \"Nowhere\"\n  hint: use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"\n");
}

#[test]
fn a_bad_after_exits_2() {
    let env = Env::new();
    env.rea(&["next", "@daily", "--after", "yesterday"])
        .code(2)
        .stdout_is("")
        .stderr_is("rea: --after \"yesterday\" is not an RFC 3339 instant (premature end of input); write e.g. 2026-03-08T01:30:00-05:00\n");
}

#[test]
fn a_bad_expression_exits_2() {
    let env = Env::new();
    env.rea(&["next", "0 0 * * 8"])
        .code(2)
        .stderr_is("rea: invalid expression \"0 0 * * 8\": day-of-week value 8 is out of range (allowed: 0-7 or SUN-SAT; 0 and 7 are Sunday)\n");
}

#[test]
fn an_impossible_expression_says_it_never_fires() {
    let env = Env::new();
    env.rea(&["next", "0 0 30 2 *", "--after", "2026-01-01T00:00:00Z"])
        .ok()
        .stdout_is("")
        .stderr_is("rea: \"0 0 30 2 *\" never fires: no date matches its day-of-month, month and day-of-week fields together\n");
    env.rea(&["next", "0 0 31 4,6 *"])
        .ok()
        .stdout_is("")
        .stderr_has("never fires: no date matches");
    // A schedule that ends is not called impossible.
    env.rea(&["next", "@yearly", "--after", "9999-06-01T00:00:00Z"])
        .ok()
        .stderr_has("never fires again after");
    env.rea(&["next", "@reboot"])
        .ok()
        .stdout_is("")
        .stderr_is("rea: \"@reboot\" fires only when the daemon starts\n");
}
