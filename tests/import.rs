//! `rea import`: crontabs through the real binary. Every entry line of every
//! fixture is either converted or reported, with the user and `MAILTO` of
//! its line; the output passes `rea check` (or fails it only for users this
//! machine lacks); and each converted job fires at exactly the instants the
//! crontab line would over a year, checked against a brute-force matcher
//! written here, independently of `rea::schedule`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::support::{rea_bin, Env};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/crontabs")
        .join(rel)
}

const USER_FIXTURES: [&str; 2] = ["user.crontab", "crlf.crontab"];
const SYSTEM_FIXTURES: [&str; 9] = [
    "etc/crontab",
    "etc/cron.d/e2scrub_all",
    "etc/cron.d/php",
    "etc/cron.d/sysstat",
    "etc/cron.d/certbot",
    "etc/cron.d/popularity-contest",
    "etc/cron.d/broken",
    "etc/cron.d/backup.dpkg-old",
    "etc/cron.d/nonewline",
];

// ---------------------------------------------------------------------------
// An independent cron matcher: Vixie's field syntax and day rule.

struct Line {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    days_and: bool,
    fixed: bool,
}

fn field(text: &str, lo: u32, hi: u32, names: &[&str], base: u32) -> u64 {
    let value = |t: &str| -> u32 {
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(t))
            .map(|i| i as u32 + base)
            .unwrap_or_else(|| t.parse().expect("number"))
    };
    let mut bits = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().expect("step")),
            None => (item, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a), value(b))
        } else {
            (value(range), value(range))
        };
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    bits
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn compile(fields: &[&str]) -> Line {
    let mut dow = field(fields[4], 0, 7, &DAYS, 0);
    if dow & (1 << 7) != 0 {
        dow |= 1;
    }
    Line {
        minute: field(fields[0], 0, 59, &[], 0),
        hour: field(fields[1], 0, 23, &[], 0),
        dom: field(fields[2], 1, 31, &[], 0),
        month: field(fields[3], 1, 12, &MONTHS, 1),
        dow,
        days_and: fields[2].starts_with('*') || fields[4].starts_with('*'),
        fixed: !fields[0].starts_with('*') && !fields[1].starts_with('*'),
    }
}

impl Line {
    fn matches(&self, t: &NaiveDateTime) -> bool {
        let bit = |set: u64, v: u32| set & (1 << v) != 0;
        let dom = bit(self.dom, t.day());
        let dow = bit(self.dow, t.weekday().num_days_from_sunday());
        let day = if self.days_and {
            dom && dow
        } else {
            dom || dow
        };
        bit(self.minute, t.minute())
            && bit(self.hour, t.hour())
            && bit(self.month, t.month())
            && day
    }
}

/// Local wall-clock times of every minute of 2026 (UTC), shared by all jobs
/// in one zone.
fn year_of_minutes(tz: Tz) -> (Vec<DateTime<Utc>>, Vec<NaiveDateTime>) {
    let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let end = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
    let mut utc = Vec::new();
    let mut local = Vec::new();
    let mut t = start - Duration::minutes(1);
    while t < end {
        utc.push(t);
        local.push(t.with_timezone(&tz).naive_local());
        t += Duration::minutes(1);
    }
    (utc, local)
}

/// cronie's DST policy, minute by minute: a fixed-time line fires at the
/// end of a gap for matching times the gap swallowed, and only on the first
/// pass through repeated times; other lines follow real time.
fn brute_force(line: &Line, utc: &[DateTime<Utc>], local: &[NaiveDateTime]) -> Vec<DateTime<Utc>> {
    let mut fires = Vec::new();
    let mut max_seen = local[0];
    for i in 1..utc.len() {
        let (prev, now) = (local[i - 1], local[i]);
        let mut fire = false;
        if line.fixed && now - prev > Duration::minutes(1) {
            let mut m = prev + Duration::minutes(1);
            while m < now {
                fire |= line.matches(&m);
                m += Duration::minutes(1);
            }
        }
        if line.matches(&now) && (now > max_seen || !line.fixed) {
            fire = true;
        }
        if now > max_seen {
            max_seen = now;
        }
        if fire {
            fires.push(utc[i]);
        }
    }
    fires
}

// ---------------------------------------------------------------------------
// Reading the fixtures and the output.

/// A line that is neither blank, a comment, nor an assignment.
struct EntryLine {
    n: usize,
    fields: Vec<String>,
    /// CRON_TZ in force.
    tz: Option<String>,
    /// MAILTO's addresses in force (none for ""); None when unset.
    mailto: Option<Vec<String>>,
    /// The word after the schedule: a system crontab's user.
    sixth: String,
}

fn entry_lines(text: &str) -> Vec<EntryLine> {
    let mut tz = None;
    let mut mailto = None;
    let mut out = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.trim_end_matches('\r').trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        let second = line.split_whitespace().nth(1).unwrap_or("");
        if first.contains('=') || second.starts_with('=') {
            if let Some(v) = line.strip_prefix("CRON_TZ=") {
                tz = Some(v.trim().to_string());
            }
            if let Some(v) = line.strip_prefix("MAILTO=") {
                mailto = Some(
                    v.trim()
                        .trim_matches('"')
                        .split(',')
                        .filter(|a| !a.is_empty())
                        .map(str::to_string)
                        .collect(),
                );
            }
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let sixth = words
            .get(if first.starts_with('@') { 1 } else { 5 })
            .unwrap_or(&"")
            .to_string();
        let fields: Vec<String> = if first.starts_with('@') {
            let expansion = match first {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" | "@DAILY" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                other => other,
            };
            expansion.split_whitespace().map(str::to_string).collect()
        } else {
            line.split_whitespace()
                .take(5)
                .map(str::to_string)
                .collect()
        };
        out.push(EntryLine {
            n: i + 1,
            fields,
            tz: tz.clone(),
            mailto: mailto.clone(),
            sixth,
        });
    }
    out
}

/// Job name by origin line, from the `# FILE:LINE` comment above each table.
fn origins(toml: &str, file: &str) -> BTreeMap<usize, String> {
    let mut map = BTreeMap::new();
    let mut pending = None;
    for line in toml.lines() {
        if let Some(n) = line
            .strip_prefix("# ")
            .and_then(|l| l.strip_prefix(file))
            .and_then(|l| l.strip_prefix(':'))
            .and_then(|l| l.parse::<usize>().ok())
        {
            pending = Some(n);
        } else if let (Some(n), Some(name)) = (pending, line.strip_prefix("[jobs.")) {
            map.insert(n, name.trim_end_matches(']').to_string());
            pending = None;
        }
    }
    map
}

/// Runs `rea check` on an imported file. The import cannot know which users
/// exist where the file will run, so the only errors allowed are about
/// users: one this machine does not have, or (when the tests do not run as
/// root) one rea may not switch to.
fn check_but_for_users(env: &Env, file: &str) {
    let run = env.rea(&["check", "-f", file]);
    if run.code == 0 {
        return;
    }
    assert_eq!(run.code, 2, "{run:?}");
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with(file) && !l.ends_with(" error") && !l.ends_with(" errors"))
        .collect();
    assert!(!errors.is_empty(), "{run:?}");
    for e in errors {
        let absent = e.split("no user \"").nth(1).and_then(|r| {
            r.strip_suffix("\" on this machine")
                .filter(|u| crate::support::user_home(u).is_none())
        });
        let foreign = !crate::support::is_root() && e.ends_with("only root can switch users");
        assert!(absent.is_some() || foreign, "rea check: {e}\n{run:?}");
    }
}

/// Imports one fixture, checks the output with `rea check`, and compares
/// every entry line with its job over 2026, and its user and mail with the
/// line's. Returns the number of jobs.
fn import_and_compare(rel: &str, system: bool) -> usize {
    let env = Env::new();
    let path = fixture(rel);
    let file = path.display().to_string();
    let out = env.path("out.toml").display().to_string();
    let mut args = vec!["import", "--timezone", "UTC", &file, "-o", &out];
    if system {
        args.push("--system");
    }
    let run = env.rea(&args);
    assert!(run.code == 0 || run.code == 2, "{rel}: {run:?}");
    check_but_for_users(&env, &out);

    let toml = env.read("out.toml");
    let cfg = rea_config::parse(toml.as_bytes(), Path::new(&out)).expect("valid output");
    let by_line = origins(&toml, &file);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let mut zones: BTreeMap<String, (Vec<DateTime<Utc>>, Vec<NaiveDateTime>)> = BTreeMap::new();
    let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let end = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap();
    for EntryLine {
        n,
        fields,
        tz: cron_tz,
        mailto,
        sixth,
    } in entry_lines(&text)
    {
        let Some(name) = by_line.get(&n) else {
            assert!(
                run.stderr.contains(&format!("{file}:{n}: not converted: ")),
                "{rel}:{n} is neither converted nor reported:\n{}",
                run.stderr
            );
            continue;
        };
        let job = cfg.jobs.iter().find(|j| &j.name == name).expect("job");
        let zone = cron_tz.unwrap_or_else(|| "UTC".to_string());
        assert_eq!(&*job.timezone_name, zone.as_str(), "{rel}:{n}");
        let user = system.then_some(sixth);
        assert_eq!(job.user, user, "{rel}:{n}");
        // Without MAILTO, cron mails the job's user.
        let mailto = mailto.unwrap_or_else(|| user.iter().cloned().collect());
        assert_eq!(job.extras().mailto, mailto, "{rel}:{n}");
        if !mailto.is_empty() {
            assert_eq!(
                job.extras().mail_on,
                rea_core::job::MailOn::Output,
                "{rel}:{n}"
            );
        }
        if fields.first().map(String::as_str) == Some("@reboot") {
            assert!(job.is_reboot(), "{rel}:{n}");
            continue;
        }
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        let line = compile(&fields);
        let (utc, local) = zones
            .entry(zone.clone())
            .or_insert_with(|| year_of_minutes(zone.parse().expect("zone")));
        let expected = brute_force(&line, utc, local);
        let actual: Vec<DateTime<Utc>> = job
            .schedule
            .as_ref()
            .expect("imported jobs have a schedule")
            .iter_after(start - Duration::seconds(1), job.timezone)
            .take_while(|t| *t < end)
            .collect();
        assert_eq!(
            actual, expected,
            "{rel}:{n} ({fields:?} in {zone}) fires differently"
        );
    }
    cfg.jobs.len()
}

#[test]
fn every_line_of_the_user_fixtures_fires_as_cron_would() {
    let jobs: usize = USER_FIXTURES
        .iter()
        .map(|f| import_and_compare(f, false))
        .sum();
    assert_eq!(jobs, 14);
}

#[test]
fn every_line_of_the_system_fixtures_fires_as_cron_would() {
    let jobs: usize = SYSTEM_FIXTURES
        .iter()
        .map(|f| import_and_compare(f, true))
        .sum();
    assert_eq!(jobs, 16);
}

#[test]
fn the_brute_force_matcher_knows_vixies_day_rule() {
    let utc = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).unwrap(); // a Monday
    let at = |d: u32| (utc + Duration::days(i64::from(d) - 1)).naive_utc();
    let or = compile(&["0", "0", "1", "*", "mon"]);
    assert!(or.matches(&at(1)) && or.matches(&at(8)) && !or.matches(&at(2)));
    let and = compile(&["0", "0", "*/2", "*", "1"]);
    assert!(and.matches(&at(1)) && !and.matches(&at(8)) && and.matches(&at(15)));
    let sunday = compile(&["0", "0", "*", "*", "7"]);
    assert!(sunday.matches(&at(7)));
}

// ---------------------------------------------------------------------------
// The command line.

#[test]
fn all_debian_files_at_once_print_toml_to_stdout_and_the_report_to_stderr() {
    let env = Env::new();
    let mut args = vec!["import".to_string(), "--system".to_string()];
    args.extend(
        SYSTEM_FIXTURES
            .iter()
            .map(|f| fixture(f).display().to_string()),
    );
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = env.rea(&refs);
    run.code(2);
    assert!(run
        .stdout
        .starts_with("# Converted from crontab by `rea import`"));
    for name in [
        "[jobs.run-parts-cron-hourly]",
        "[jobs.run-parts-cron-daily]",
        "[jobs.run-parts-cron-weekly]",
        "[jobs.run-parts-cron-monthly]",
        "[jobs.e2scrub_all_cron]",
        "[jobs.sessionclean]",
        "[jobs.debian-sa1]",
        "[jobs.debian-sa1-2]",
        "[jobs.certbot]",
        "[jobs.popularity-contest]",
    ] {
        assert!(run.stdout.contains(name), "{name} missing:\n{}", run.stdout);
    }
    assert!(run.stdout.contains(
        "[defaults]\ntimezone = \"local\"   # cron reads schedules in the machine's zone\nuser = \"root\"\n"
    ));
    assert!(run
        .stdout
        .contains("# Jobs run as their `user` (root) with its groups"));
    assert!(!run.stdout.contains("not supported"), "{}", run.stdout);
    assert!(!run.stderr.contains("not supported"), "{}", run.stderr);
    run.stderr_has("broken:3: not converted: schedule \"0 5/10 * * *\": step without a range")
        .stderr_has("broken:4: not converted: schedule \"0 22-2 * * *\": backwards range")
        .stderr_has("backup.dpkg-old: warning: cron ignores files in cron.d")
        .stderr_has("nonewline:1: warning: the file does not end with a newline")
        .stderr_has("rea: 16 jobs from 9 files; 6 lines not converted")
        .stderr_has("rea: jobs run as root (`user`): the daemon must run as root for that, as cron does; `rea check` also verifies that these users exist on this machine\n");
    let all = env.path("all.toml");
    env.write("all.toml", &run.stdout);
    std::fs::set_permissions(&all, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    check_but_for_users(&env, all.to_str().unwrap());
    if crate::support::is_root() {
        env.rea(&["check", "-f", all.to_str().unwrap()])
            .ok()
            .stdout_has("16 jobs OK");
    }
}

#[test]
fn mailto_becomes_mailto_and_users_become_user() {
    let env = Env::new();
    let tab = env.write(
        "crontab",
        "MAILTO=ops@example.com,dev@example.com\nMAILFROM=cron@example.com\n@daily root /bin/a\n@daily www-data /bin/b\nMAILTO=\"\"\n@daily nobody /bin/c\n",
    );
    let out = env.path("out.toml");
    let out = out.to_str().unwrap();
    let run = env.rea(&["import", "--system", tab.to_str().unwrap(), "-o", out]);
    run.ok()
        .stderr_has(":2: warning: MAILFROM=cron@example.com: not supported by this rea version")
        .stderr_has("rea: 3 jobs from 1 file; 0 lines not converted, 1 warning,")
        .stderr_has("rea: jobs run as nobody, root, www-data (`user`)");
    assert!(!run.stderr.contains("MAILTO"), "{}", run.stderr);
    let text = env.read("out.toml");
    assert!(
        text.contains("mail_on = \"output\"   # as cron: mail whenever a job prints something\n"),
        "{text}"
    );
    assert!(text.contains("[jobs.a]\nschedule = \"@daily\"\ncommand = \"/bin/a\"\nuser = \"root\"\nmailto = [\"ops@example.com\", \"dev@example.com\"]   # MAILTO\n# MAILFROM=\"cron@example.com\"   (not converted; see the import warnings)\n"), "{text}");
    assert!(
        text.contains(
            "[jobs.c]\nschedule = \"@daily\"\ncommand = \"/bin/c\"\nuser = \"nobody\"\n# MAILFROM"
        ),
        "{text}"
    );
    check_but_for_users(&env, out);
    let cfg = rea_config::parse(text.as_bytes(), Path::new(out)).expect("valid");
    let users: Vec<Option<&str>> = cfg.jobs.iter().map(|j| j.user.as_deref()).collect();
    assert_eq!(users, [Some("root"), Some("www-data"), Some("nobody")]);
    assert_eq!(
        cfg.jobs[1].extras().mailto,
        ["ops@example.com", "dev@example.com"]
    );
    assert!(cfg.jobs[2].extras().mailto.is_empty());
}

/// cron mails a job's output to the user it runs as when no MAILTO is
/// set: the imported jobs do too, with `mail_on = "output"`; `MAILTO=""`
/// still means no mail, and jobs whose user is unknown say why they send
/// none.
#[test]
fn without_mailto_the_jobs_user_gets_the_mail_as_under_cron() {
    let env = Env::new();
    let tab = env.write(
        "crontab",
        "@daily root /bin/a
@daily www-data /bin/b
MAILTO=\"\"
@daily nobody /bin/c
",
    );
    let out = env.path("out.toml");
    let out = out.to_str().unwrap();
    env.rea(&["import", "--system", tab.to_str().unwrap(), "-o", out])
        .ok();
    let text = env.read("out.toml");
    assert!(
        text.contains("user = \"root\"\nmailto = [\"root\"]   # no MAILTO: cron mails the output to the job's user\n"),
        "{text}"
    );
    assert!(text.contains("mail_on = \"output\""), "{text}");
    assert!(
        text.contains("# Without MAILTO, cron mails a job's output to the user it runs as"),
        "{text}"
    );
    // The header says where jobs run: their user's home, as the daemon does
    // (it used to say rea's working directory).
    assert!(
        text.contains("# As under cron, a job runs in its user's home directory unless `dir` says"),
        "{text}"
    );
    let cfg = rea_config::parse(text.as_bytes(), Path::new(out)).expect("valid");
    let mailto: Vec<Vec<String>> = cfg.jobs.iter().map(|j| j.extras().mailto.clone()).collect();
    assert_eq!(
        mailto,
        [
            vec!["root".to_string()],
            vec!["www-data".to_string()],
            vec![]
        ]
    );

    // A user crontab's owner is known only with --owner.
    let tab = env.write("tab", "@daily /bin/a\n");
    let run = env.rea(&[
        "import",
        "--user",
        "--owner",
        "alice",
        tab.to_str().unwrap(),
    ]);
    run.ok().stdout_has("mailto = [\"alice\"]");
    let run = env.rea(&["import", "--user", tab.to_str().unwrap()]);
    run.ok();
    assert!(!run.stdout.contains("mailto ="), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("# Jobs without `user` and without MAILTO send no mail"),
        "{}",
        run.stdout
    );
}

/// Jobs are named after what they do: a program that says little alone
/// (`echo`, `curl`) with its first arguments, a command that names nothing
/// after its line; no `echo`, `echo-2`, `job`, `job-2`.
#[test]
fn imported_jobs_get_names_that_tell_them_apart() {
    let env = Env::new();
    let tab = env.write(
        "tab",
        "*/5 * * * * echo hello >> /tmp/a\n0 * * * * echo goodbye\n0 1 * * * curl -fsS https://example.com/cron/backup.php\n0 2 * * * curl -fsS https://example.com/cron/report.php\n0 3 * * * true\n0 4 * * * :\n",
    );
    let out = env.rea(&["import", "--user", tab.to_str().unwrap()]);
    out.ok();
    let cfg = rea_config::parse(out.stdout.as_bytes(), Path::new("out.toml")).expect("valid");
    let names: Vec<&str> = cfg.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "echo-hello",
            "echo-goodbye",
            "curl-backup",
            "curl-report",
            "line-5",
            "line-6"
        ]
    );
}

/// Issue #25 item 10: cron's jobs get PAM's environment (pam_env:
/// /etc/environment, /etc/default/locale); rea opens no PAM session, and
/// the converted file says so.
#[test]
fn the_import_says_that_pam_environment_is_not_carried() {
    let env = Env::new();
    let tab = env.write("tab", "@daily /bin/a\n");
    let out = env.rea(&["import", "--user", tab.to_str().unwrap()]);
    out.ok();
    assert!(
        out.stdout
            .contains("# cron runs jobs in a PAM session: on Debian its pam_env gives them the"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("/etc/environment"), "{}", out.stdout);
}

#[test]
fn a_user_crontab_runs_as_its_owner_only_when_told() {
    let env = Env::new();
    let tab = env.write("tab", "@daily /bin/a\n");
    let tab = tab.to_str().unwrap();
    let run = env.rea(&["import", "--user", "--owner", "alice", tab]);
    run.ok().stderr_has("rea: jobs run as alice (`user`)");
    assert!(
        run.stdout
            .contains("[defaults]\ntimezone = \"local\"   # cron reads schedules in the machine's zone\nuser = \"alice\"\n"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout.contains("Jobs without `user`"),
        "{}",
        run.stdout
    );
    let out = env.path("alice.toml");
    env.rea(&[
        "import",
        "--user",
        "--owner",
        "alice",
        tab,
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    check_but_for_users(&env, out.to_str().unwrap());

    let run = env.rea(&["import", "--user", tab]);
    run.ok();
    assert!(!run.stdout.contains("user ="), "{}", run.stdout);
    assert!(!run.stderr.contains("jobs run as"), "{}", run.stderr);
    assert!(
        run.stdout.contains("# Jobs without `user` come from a user crontab, which does not name its owner:\n# they run as the user rea runs as (`rea import --user --owner NAME` sets it).\n"),
        "{}",
        run.stdout
    );

    env.rea(&["import", "--owner", "alice", tab])
        .code(2)
        .stderr_has("--user");
    env.rea(&["import", "--user", "--owner", "a b", tab])
        .code(2)
        .stderr_has("--owner: \"a b\" is not a user name");
}

#[test]
fn a_clean_crontab_exits_zero_and_writes_a_private_file() {
    let env = Env::new();
    let tab = env.write(
        "tab",
        "# nightly\n30 2 * * * /usr/local/bin/backup-db --full\n",
    );
    let out = env.path("jobs-new.toml");
    let run = env.rea(&["import", tab.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    run.ok()
        .stderr_has("rea: 1 job from 1 file; 0 lines not converted, 0 warnings");
    assert_eq!(run.stdout, "");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "mode {mode:o}");
    let text = env.read("jobs-new.toml");
    assert!(text.contains("[jobs.backup-db]\nschedule = \"30 2 * * *\"\ncommand = \"/usr/local/bin/backup-db --full\"\ndescription = \"nightly\"\n"), "{text}");
}

#[test]
fn an_existing_output_is_not_overwritten_without_force() {
    let env = Env::new();
    let tab = env.write("tab", "@daily /bin/echo hi\n");
    let out = env.write("out.toml", "keep me\n");
    let (tab, out) = (tab.to_str().unwrap(), out.to_str().unwrap());
    env.rea(&["import", tab, "-o", out])
        .code(1)
        .stderr_has("exists; pass --force to overwrite it");
    assert_eq!(env.read("out.toml"), "keep me\n");
    env.rea(&["import", tab, "-o", out, "--force"]).ok();
    assert!(env.read("out.toml").contains("[jobs.echo-hi]"));
}

#[test]
fn a_system_crontab_outside_etc_is_detected_by_its_user_field() {
    let env = Env::new();
    let tab = env.write(
        "crontab",
        "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n",
    );
    let run = env.rea(&["import", tab.to_str().unwrap()]);
    run.ok().stderr_has(
        "read as a system crontab (field 6 is always a user name); pass --user if it is not",
    );
    assert!(run
        .stdout
        .contains("command = \"cd / && run-parts --report /etc/cron.hourly\""));
    let run = env.rea(&["import", "--user", tab.to_str().unwrap()]);
    run.ok();
    assert!(run
        .stdout
        .contains("command = \"root cd / && run-parts --report /etc/cron.hourly\""));
}

#[test]
fn standard_input_is_read_with_a_dash() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(rea_bin())
        .args(["import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"0 1 * * * /bin/x\nbad\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("# <stdin>:1\n[jobs.x]"), "{stdout}");
    assert!(stderr.contains("<stdin>:2: not converted: "), "{stderr}");
}

#[test]
fn the_percent_input_reaches_the_command_through_a_real_shell() {
    let env = Env::new();
    let tab = env.write(
        "tab",
        "0 1 * * * cd . && cat > got; echo \"100\\% done\" > status%line 1%it's \\%2%%end\n",
    );
    let run = env.rea(&["import", tab.to_str().unwrap()]);
    run.ok();
    env.write("jobs.toml", &run.stdout);
    let cfg = rea_config::parse(run.stdout.as_bytes(), Path::new("x")).expect("valid");
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&cfg.jobs[0].command)
        .current_dir(env.dir.path())
        .status()
        .expect("sh");
    assert!(status.success());
    assert_eq!(env.read("got"), "line 1\nit's %2\n\nend\n");
    assert_eq!(env.read("status"), "100% done\n");
}

#[test]
fn an_unknown_zone_is_refused() {
    let env = Env::new();
    let tab = env.write("tab", "@daily x\n");
    env.rea(&[
        "import",
        "--timezone",
        "Mars/Olympus",
        tab.to_str().unwrap(),
    ])
    .code(2)
    .stderr_has("--timezone: unknown timezone \"Mars/Olympus\"");
}
