//! Tests of the job-file reader: every field, every error message, and
//! property tests that hostile input never panics and is always located.

#![allow(unused_imports)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use rea_core::backoff::RetryPolicy;
use rea_core::job::{CatchUp, Job, MailOn, Overlap};

use std::ops::Range;

use rea_core::schedule::ScheduleError;

use crate::fields::schedule_error_offset;
use crate::load::shell_quote;
use crate::walk::{format_size, parse_size, Ctx};
use crate::*;

mod unit {
    use super::*;

    fn parse_str(src: &str) -> Result<Config, Vec<Diagnostic>> {
        parse(src.as_bytes(), Path::new("jobs.toml"))
    }

    pub(super) fn ok(src: &str) -> Config {
        match parse_str(src) {
            Ok(config) => config,
            Err(diags) => panic!("unexpected errors:\n{}", render(&diags)),
        }
    }

    /// The diagnostics as `rea check` prints them, one per line plus hints.
    pub(super) fn errors(src: &str) -> String {
        match parse_str(src) {
            Ok(_) => panic!("expected errors, the file was accepted"),
            Err(diags) => render(&diags),
        }
    }

    fn render(diags: &[Diagnostic]) -> String {
        diags.iter().map(|d| format!("{d}\n")).collect()
    }

    #[test]
    fn a_step_larger_than_its_field_is_a_located_warning_for_each_job() {
        let c = ok("[jobs.a]\nschedule = \"*/61 * * * *\"\ncommand = \"x\"\n\
                    [jobs.b]\nschedule = \"*/61 * * * *\"\ncommand = \"x\"\n");
        assert_eq!(
            render(&c.warnings),
            "jobs.toml:2:15: warning: step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron\n  hint: write 0 if that is what you mean\n\
             jobs.toml:5:15: warning: step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron\n  hint: write 0 if that is what you mean\n"
        );
        assert!(c.warnings.iter().all(|w| !w.is_error()));
    }

    fn job<'c>(config: &'c Config, name: &str) -> &'c Job {
        config
            .jobs
            .iter()
            .find(|j| j.name == name)
            .expect("job exists")
    }

    const MINIMAL: &str = "[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n";

    #[test]
    fn example_file_is_valid() {
        let config = match parse(
            include_bytes!("../../../jobs.example.toml"),
            Path::new("jobs.example.toml"),
        ) {
            Ok(config) => config,
            Err(diags) => panic!("{}", render(&diags)),
        };
        assert_eq!(config.jobs.len(), 13);
        assert_eq!(config.daemon.max_concurrent, 4);
        let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names[..3],
            ["prepare", "health-ping", "disk-usage"],
            "jobs keep file order"
        );
        let report = job(&config, "nightly-report");
        assert_eq!(report.timezone, chrono_tz::America::New_York);
        assert_eq!(
            report.env.get("PATH").map(String::as_str),
            Some("/usr/local/bin:/usr/bin:/bin")
        );
        assert_eq!(
            report.env.get("REPORT_FORMAT").map(String::as_str),
            Some("csv")
        );
        assert_eq!(job(&config, "weekly-vacuum").timeout, None);
        assert!(!job(&config, "legacy-export").enabled);
        let backup = job(&config, "db-backup");
        assert_eq!(backup.retry.attempts, 3);
        assert_eq!(backup.retry.factor, 2.0, "factor inherited from [defaults]");
        assert_eq!(backup.retry.jitter, 0.1);
    }

    #[test]
    fn empty_file_has_no_jobs() {
        for src in ["", "\n\n", "# only a comment\n", "\u{feff}"] {
            let config = ok(src);
            assert!(config.jobs.is_empty());
            assert_eq!(config.daemon, DaemonConfig::default());
        }
    }

    #[test]
    fn built_in_defaults() {
        let config = ok(MINIMAL);
        let a = &config.jobs[0];
        assert_eq!(a.name, "a");
        assert_eq!(a.schedule.as_ref().unwrap().source(), "* * * * *");
        assert_eq!(a.command, "true");
        assert_eq!(&*a.shell, "/bin/sh");
        assert_eq!(a.timezone, Tz::UTC);
        assert_eq!(&*a.timezone_name, "UTC");
        assert_eq!(a.timeout, None);
        assert_eq!(a.kill_grace, Duration::from_secs(10));
        assert_eq!(a.overlap, Overlap::Skip);
        assert_eq!(a.retry, RetryPolicy::default());
        assert_eq!(a.retry.attempts, 0);
        assert_eq!(a.catch_up, CatchUp::None);
        assert_eq!(a.catch_up_limit, 10);
        assert_eq!(a.jitter, Duration::ZERO);
        assert!(a.env.is_empty());
        assert_eq!(a.dir, None);
        assert!(a.tags.is_empty());
        assert_eq!(a.extras().description, None);
        assert!(a.enabled);
        assert_eq!(a.output_limit, 64 * 1024);
        assert!(a.kill_stragglers);
        assert_eq!(config.path, PathBuf::from("jobs.toml"));
    }

    #[test]
    fn every_field_of_the_documented_example() {
        let config = ok(r#"
[defaults]
timezone = "Europe/Berlin"
shell = "/bin/sh"
timeout = "1h"
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }

[daemon]
max_concurrent = 8
shutdown_grace = "30s"
history_max_bytes = "64MiB"
history_files = 5

[jobs.sync-orders]
schedule = "*/15 * * * *"
command = "/usr/local/bin/sync-orders --full"
timezone = "Asia/Shanghai"
timeout = "10m"
kill_grace = "10s"
overlap = "queue"
retry = { attempts = 5, delay = "30s", max_delay = "10m", factor = 2.0, jitter = 0.2 }
catch_up = "all"
catch_up_limit = 20
jitter = "5s"
env = { RUST_LOG = "info" }
dir = "/srv/app"
tags = ["billing"]
description = "pull orders from the shop API"
enabled = true
output_limit = "64KiB"

[jobs.other]
schedule = "@hourly"
command = "date"
"#);
        assert_eq!(
            config.daemon,
            DaemonConfig {
                max_concurrent: 8,
                max_concurrent_per_user: None,
                reserve_system: 1,
                max_queued_per_user: 100,
                shutdown_grace: Duration::from_secs(30),
                history_max_bytes: 64 << 20,
                history_files: 5,
                sendmail: None,
                metrics: None,
                job_output: JobOutput::History,
                monitor_group: None,
                cgroups: true,
                webhook_private_targets: false,
                web_listen: None,
                web_proxy: None,
                web_hosts: Vec::new(),
                web_viewers: Vec::new(),
                tenants: rea_core::run::TenantPolicy::default(),
            }
        );
        let j = job(&config, "sync-orders");
        assert_eq!(j.timezone, chrono_tz::Asia::Shanghai);
        assert_eq!(&*j.timezone_name, "Asia/Shanghai");
        assert_eq!(j.timeout, Some(Duration::from_secs(600)));
        assert_eq!(j.overlap, Overlap::Queue);
        assert_eq!(
            j.retry,
            RetryPolicy {
                attempts: 5,
                delay: Duration::from_secs(30),
                max_delay: Duration::from_secs(600),
                factor: 2.0,
                jitter: 0.2
            }
        );
        assert_eq!(j.catch_up, CatchUp::All);
        assert_eq!(j.catch_up_limit, 20);
        assert_eq!(j.jitter, Duration::from_secs(5));
        assert_eq!(j.dir, Some(PathBuf::from("/srv/app")));
        assert_eq!(j.tags, ["billing"]);
        assert_eq!(
            j.extras().description.as_deref(),
            Some("pull orders from the shop API")
        );
        assert_eq!(j.output_limit, 65536);
        let other = job(&config, "other");
        assert_eq!(
            other.timezone,
            chrono_tz::Europe::Berlin,
            "inherited from [defaults]"
        );
        assert_eq!(other.timeout, Some(Duration::from_secs(3600)));
    }

    #[test]
    fn env_is_overlaid_key_by_key() {
        let config = ok(r#"
[defaults]
env = { PATH = "/bin", LANG = "C" }
[jobs.a]
schedule = "* * * * *"
command = "true"
env = { LANG = "de_DE.UTF-8", EXTRA = "1" }
[jobs.b]
schedule = "* * * * *"
command = "true"
"#);
        let a: Vec<(&str, &str)> = job(&config, "a")
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            a,
            [("EXTRA", "1"), ("LANG", "de_DE.UTF-8"), ("PATH", "/bin")]
        );
        let b: Vec<(&str, &str)> = job(&config, "b")
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(b, [("LANG", "C"), ("PATH", "/bin")]);
    }

    #[test]
    fn retry_is_overridden_key_by_key() {
        let config = ok(r#"
[defaults.retry]
attempts = 3
delay = "1m"
factor = 3
[jobs.a]
schedule = "* * * * *"
command = "true"
retry.attempts = 7
[jobs.b]
schedule = "* * * * *"
command = "true"
retry = { jitter = 0, max_delay = "1h" }
"#);
        let a = &job(&config, "a").retry;
        assert_eq!(
            (a.attempts, a.delay, a.factor),
            (7, Duration::from_secs(60), 3.0)
        );
        let b = &job(&config, "b").retry;
        assert_eq!(
            (b.attempts, b.jitter, b.max_delay),
            (3, 0.0, Duration::from_secs(3600))
        );
    }

    #[test]
    fn defaults_apply_wherever_the_section_is() {
        let config = ok("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n[defaults]\nshell = \"/bin/bash\"\n");
        assert_eq!(&*config.jobs[0].shell, "/bin/bash");
    }

    /// Mail, hooks and a description are boxed apart: a job without them
    /// holds none, and one that spells out only defaults equals it.
    #[test]
    fn jobs_without_extras_hold_none() {
        let config = ok("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n[jobs.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\nhook_timeout = \"5m\"\nmail_on = \"failure\"\n[jobs.c]\nschedule = \"* * * * *\"\ncommand = \"true\"\non_failure = \"page\"\n");
        let (a, b, c) = (&config.jobs[0], &config.jobs[1], &config.jobs[2]);
        assert!(a.extras.is_none() && b.extras.is_none());
        assert_eq!(
            Job {
                name: "a".into(),
                ..(**b).clone()
            },
            **a
        );
        assert_eq!(c.extras().on_failure.as_deref(), Some("page"));
        assert_eq!(c.extras().hook_timeout, Duration::from_secs(300));
    }

    /// What many jobs repeat is held once: the inherited env map, the
    /// shell and the zone name; a job's own env is its own copy.
    #[test]
    fn jobs_share_what_they_repeat() {
        let config = ok("[defaults]\nenv = { PATH = \"/bin\" }\ntimezone = \"Europe/Berlin\"\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n[jobs.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\nshell = \"/bin/sh\"\n[jobs.c]\nschedule = \"* * * * *\"\ncommand = \"true\"\nenv = { X = \"1\" }\n");
        let (a, b, c) = (&config.jobs[0], &config.jobs[1], &config.jobs[2]);
        assert!(std::sync::Arc::ptr_eq(&a.env, &b.env));
        assert!(std::sync::Arc::ptr_eq(&a.timezone_name, &c.timezone_name));
        assert!(!std::sync::Arc::ptr_eq(&a.env, &c.env));
        assert_eq!(c.env.len(), 2);
        assert_eq!(a.env.len(), 1);
        assert!(std::sync::Arc::ptr_eq(&a.shell, &c.shell));
        assert_eq!(&*b.shell, "/bin/sh");
    }

    #[test]
    fn kill_stragglers_is_a_boolean_defaults_may_set() {
        let config = ok("[defaults]\nkill_stragglers = false\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n[jobs.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\nkill_stragglers = true\n");
        assert!(!config.jobs[0].kill_stragglers);
        assert!(config.jobs[1].kill_stragglers);
        assert_eq!(
            errors(
                "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\nkill_stragglers = \"no\"\n"
            ),
            "jobs.toml:4:19: expected true or false, found a string\n"
        );
    }

    #[test]
    fn timeout_none_cancels_the_default() {
        let config = ok("[defaults]\ntimeout = \"1h\"\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntimeout = \"none\"\n");
        assert_eq!(config.jobs[0].timeout, None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("2KB"), Ok(2000));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("99999999999999999999999").is_err());
        assert!(parse_size("99999999999GiB").is_err());
        assert_eq!(
            parse_size("64mib"),
            Err((
                "invalid size \"64mib\": unknown unit \"mib\" (write e.g. \"64KiB\", \"10MB\" or a number of bytes; units: B KB MB GB KiB MiB GiB)".to_string(),
                Some("did you mean \"MiB\"?".to_string())
            ))
        );
        let config = ok("[daemon]\nhistory_max_bytes = 1048576\n");
        assert_eq!(config.daemon.history_max_bytes, 1 << 20);
    }

    #[test]
    fn unknown_field_with_hint() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncomand = \"true\"\ncommand = \"x\"\n"),
            "jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurent = 3\n"),
            "jobs.toml:2:1: unknown field \"max_concurent\"\n  hint: did you mean one of \"max_concurrent\", \"max_concurrent_per_user\"?\n"
        );
        assert_eq!(
            errors("[defaults]\nretry = { atempts = 3 }\n"),
            "jobs.toml:2:11: unknown field \"atempts\"\n  hint: did you mean \"attempts\"?\n"
        );
        assert_eq!(
            errors("[daemon]\nzzz = 1\n"),
            "jobs.toml:2:1: unknown field \"zzz\"\n  hint: fields of [daemon]: max_concurrent, max_concurrent_per_user, reserve_system, max_queued_per_user, shutdown_grace, history_max_bytes, history_files, sendmail, metrics, job_output, cgroups, monitor_group, webhook_private_targets, web_listen, web_proxy, web_hosts, web_viewers\n"
        );
    }

    #[test]
    fn fields_in_the_wrong_section() {
        assert_eq!(
            errors("[defaults]\nschedule = \"* * * * *\"\ntags = []\n"),
            "jobs.toml:2:1: \"schedule\" cannot be set in [defaults]\n  hint: it describes one job: set it in each [jobs.NAME] table\n\
             jobs.toml:3:1: \"tags\" cannot be set in [defaults]\n  hint: it describes one job: set it in each [jobs.NAME] table\n"
        );
        assert_eq!(
            errors("[defaults]\nmax_concurrent = 3\n"),
            "jobs.toml:2:1: unknown field \"max_concurrent\"\n  hint: \"max_concurrent\" belongs in [daemon]\n"
        );
        assert_eq!(
            errors("[daemon]\ntimeout = \"1m\"\n"),
            "jobs.toml:2:1: unknown field \"timeout\"\n  hint: it belongs in [defaults] or a [jobs.NAME] table\n"
        );
    }

    #[test]
    fn unknown_section() {
        assert_eq!(
            errors("[job.a]\nschedule = \"* * * * *\"\n"),
            "jobs.toml:1:2: unknown section \"job\"\n  hint: did you mean \"jobs\"?\n"
        );
        assert_eq!(
            errors("command = \"true\"\n[xyz]\n"),
            "jobs.toml:1:1: unknown section \"command\"\n  hint: fields of a job go under its [jobs.NAME] header\n\
             jobs.toml:2:2: unknown section \"xyz\"\n  hint: the sections are [defaults], [daemon], [cluster], [tenants.NAME] and [jobs.NAME]\n"
        );
    }

    #[test]
    fn cluster_section() {
        let c = ok("[cluster]\nurl = \"postgresql://rea:pw@db/rea\"\nname = \"prod\"\nnode = \"n1\"\nlease = \"1s\"\nheartbeat = \"250ms\"\ngrace = \"250ms\"\n");
        let cl = c.cluster.expect("[cluster] read");
        assert_eq!(cl.url.as_deref(), Some("postgresql://rea:pw@db/rea"));
        assert_eq!((cl.name.as_str(), cl.node.as_deref()), ("prod", Some("n1")));
        assert_eq!(
            (cl.lease, cl.heartbeat, cl.grace),
            (
                Duration::from_secs(1),
                Duration::from_millis(250),
                Duration::from_millis(250)
            )
        );
        assert!(!format!("{cl:?}").contains("pw"), "the url is never shown");
        assert!(ok(MINIMAL).cluster.is_none(), "no [cluster]: local mode");
        let d = ok("[cluster]\n").cluster.unwrap();
        assert_eq!(
            (d.name.as_str(), d.lease, d.heartbeat),
            ("default", Duration::from_secs(10), Duration::from_secs(2))
        );
    }

    #[test]
    fn cluster_errors_are_located() {
        assert_eq!(
            errors("[cluster]\nhearbeat = \"1s\"\n"),
            "jobs.toml:2:1: unknown field \"hearbeat\"\n  hint: did you mean \"heartbeat\"?\n"
        );
        assert_eq!(
            errors("[cluster]\nheartbeat = \"1s\"\nlease = \"2s\"\n"),
            "jobs.toml:3:9: \"lease\" (2s) must be at least 3 heartbeats + 100ms (3s100ms) and at most 1h\n  hint: a lease must survive a database stall of two heartbeats\n"
        );
        assert_eq!(
            errors("[cluster]\nnode = \"web 1\"\n"),
            "jobs.toml:2:8: invalid node name \"web 1\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"web-1\"\n"
        );
        let e = errors("[cluster]\nurl = 5\n");
        assert!(e.starts_with("jobs.toml:2:7: "), "{e}");
        assert_eq!(
            errors(&format!("{MINIMAL}on_lease_lost = \"stop\"\n")),
            "jobs.toml:4:17: \"on_lease_lost\" must be one of \"keep\", \"kill\", found \"stop\"\n"
        );
        let c = ok(&format!("[defaults]\non_lease_lost = \"kill\"\n{MINIMAL}"));
        assert_eq!(
            job(&c, "a").on_lease_lost,
            rea_core::claim::OnLeaseLost::Kill
        );
    }

    #[test]
    fn bad_duration() {
        assert_eq!(
            errors("[defaults]\ntimeout = \"10x\"\n"),
            "jobs.toml:2:11: invalid duration \"10x\": unknown unit \"x\" (write e.g. \"90s\", \"10m\", \"1h30m\", \"2d\"; units: ms s m h d w)\n"
        );
        assert_eq!(
            errors("[defaults]\ntimeout = \"0s\"\n"),
            "jobs.toml:2:11: \"timeout\" must be longer than 0s\n  hint: write timeout = \"none\" for no timeout\n"
        );
    }

    #[test]
    fn wrong_types() {
        assert_eq!(
            errors("[defaults]\ntimeout = 10\n"),
            "jobs.toml:2:11: expected a string like \"10m\", found an integer\n  hint: durations need a unit: write timeout = \"10s\" for 10 seconds\n"
        );
        assert_eq!(
            errors("[defaults]\nkill_grace = true\nenv = { PORT = 8080 }\nretry = 3\n"),
            "jobs.toml:2:14: expected a string like \"10m\", found a boolean\n\
             jobs.toml:3:16: expected a string, found an integer\n  hint: quote it: PORT = \"8080\"\n\
             jobs.toml:4:9: expected a table like { attempts = 3, delay = \"30s\" }, found an integer\n"
        );
        assert_eq!(
            errors("[jobs.a]\nschedule = 5\ncommand = [\"ls\"]\nenabled = \"false\"\n"),
            "jobs.toml:2:12: expected a cron expression like \"*/15 * * * *\", found an integer\n\
             jobs.toml:3:11: expected a string, found an array\n\
             jobs.toml:4:11: expected true or false, found a string\n  hint: drop the quotes: false\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurrent = \"4\"\nhistory_max_bytes = 1.5\n"),
            "jobs.toml:2:18: expected an integer, found a string\n  hint: drop the quotes: 4\n\
             jobs.toml:3:21: expected a size like \"64KiB\" or a number of bytes, found a float\n"
        );
        assert_eq!(
            errors("daemon = 1979-05-27\n"),
            "jobs.toml:1:10: expected a table like [daemon], found a date-time\n"
        );
    }

    #[test]
    fn bad_enum_value() {
        assert_eq!(
            errors("[defaults]\noverlap = \"skp\"\ncatch_up = \"al\"\n"),
            "jobs.toml:2:11: \"overlap\" must be one of \"skip\", \"queue\", \"allow\", \"replace\", found \"skp\"\n  hint: did you mean \"skip\"?\n\
             jobs.toml:3:12: \"catch_up\" must be one of \"none\", \"once\", \"all\", found \"al\"\n  hint: did you mean \"all\"?\n"
        );
        assert_eq!(
            errors("[defaults]\noverlap = 1\n"),
            "jobs.toml:2:11: expected one of \"skip\", \"queue\", \"allow\", \"replace\", found an integer\n"
        );
    }

    #[test]
    fn out_of_range_numbers() {
        assert_eq!(
            errors("[defaults]\nretry = { attempts = -1 }\n"),
            "jobs.toml:2:22: \"retry.attempts\" must be between 0 and 100, found -1\n"
        );
        assert_eq!(
            errors("[defaults]\nretry = { attempts = 99999999999999999999999999999999999999999, factor = 0.5, jitter = 1.5 }\n"),
            "jobs.toml:2:22: \"retry.attempts\" must be between 0 and 100, found 99999999999999999999999999999999999999999\n\
             jobs.toml:2:74: \"retry.factor\" must be between 1.0 and 1000.0, found 0.5\n\
             jobs.toml:2:88: \"retry.jitter\" must be between 0.0 and 1.0, found 1.5\n"
        );
        assert_eq!(
            errors("[defaults.retry]\nfactor = inf\njitter = nan\n"),
            "jobs.toml:2:10: \"retry.factor\" must be between 1.0 and 1000.0, found inf\n\
             jobs.toml:3:10: \"retry.jitter\" must be between 0.0 and 1.0, found nan\n"
        );
        assert_eq!(
            errors("[daemon]\nmax_concurrent = 0\nhistory_max_bytes = \"1KiB\"\n[defaults]\noutput_limit = \"2GiB\"\ncatch_up_limit = 0x7fffffffffffffff\n"),
            "jobs.toml:2:18: \"max_concurrent\" must be between 1 and 10000, found 0\n\
             jobs.toml:3:21: \"history_max_bytes\" must be at least 4KiB, found \"1KiB\"\n\
             jobs.toml:5:16: \"output_limit\" must be at least 0B and at most 4MiB, found \"2GiB\"\n\
             jobs.toml:6:18: \"catch_up_limit\" must be between 1 and 1000, found 0x7fffffffffffffff\n"
        );
    }

    #[test]
    fn max_delay_below_delay() {
        assert_eq!(
            errors("[defaults]\nretry = { delay = \"20m\" }\n"),
            "jobs.toml:2:19: \"retry.max_delay\" (10m) must be at least \"retry.delay\" (20m)\n"
        );
        // Reported once, at the table that broke the rule, not at every job.
        assert_eq!(
            errors("[defaults]\nretry = { delay = \"1m\" }\n[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\nretry = { max_delay = \"30s\" }\n"),
            "jobs.toml:6:23: \"retry.max_delay\" (30s) must be at least \"retry.delay\" (1m)\n"
        );
    }

    #[test]
    fn invalid_job_names() {
        assert_eq!(
            errors("[jobs.\"a b\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"a b\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"a-b\"\n"
        );
        assert_eq!(
            errors("[jobs.\"\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\", and must not be empty\n"
        );
        assert_eq!(
            errors("[jobs.\"día\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: invalid job name \"día\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"d-a\"\n"
        );
        // A quoted name with a dot is the way to name a job "a.b".
        assert_eq!(
            ok("[jobs.\"a.b\"]\nschedule = \"* * * * *\"\ncommand = \"true\"\n").jobs[0].name,
            "a.b"
        );
        assert_eq!(
            errors("[jobs.a.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"),
            "jobs.toml:1:7: job \"a\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n\
             jobs.toml:1:7: job \"a\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:1:9: unknown field \"b\"\n  hint: to name a job \"a.b\", quote it: [jobs.\"a.b\"]\n"
        );
    }

    #[test]
    fn missing_required_fields() {
        assert_eq!(
            errors("[jobs.backup]\nschedule = \"0 3 * * *\"\n\n[jobs.sync]\ncommand = \"true\"\n"),
            "jobs.toml:1:1: job \"backup\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:4:1: job \"sync\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n"
        );
        assert_eq!(
            errors("[jobs]\nx = {}\ny = 3\n"),
            "jobs.toml:2:5: job \"x\" has no \"schedule\"\n  hint: add e.g. schedule = \"0 3 * * *\" (minute hour day-of-month month day-of-week)\n\
             jobs.toml:2:5: job \"x\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:3:5: expected a job table like [jobs.NAME], found an integer\n"
        );
        assert_eq!(
            errors("[[jobs]]\nschedule = \"* * * * *\"\n"),
            "jobs.toml:1:1: expected a table of jobs like [jobs.NAME], found an array\n  hint: write each job as [jobs.NAME] with a unique NAME, not [[jobs]]\n"
        );
    }

    #[test]
    fn string_fields_are_checked() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"  \"\ndir = \"srv\"\nshell = \"/bin/sh\\u0000\"\ntags = [\"ok\", \"not ok\", 1]\nenv = { \"A=B\" = \"1\" }\n"),
            "jobs.toml:3:11: \"command\" is empty\n\
             jobs.toml:4:7: \"dir\" must be an absolute path, found \"srv\"\n  hint: a relative directory would depend on where rea was started\n\
             jobs.toml:5:9: \"shell\" contains a NUL character\n\
             jobs.toml:6:15: invalid tag \"not ok\"\n  hint: names may contain only letters, digits, \"_\", \".\" and \"-\"; e.g. \"not-ok\"\n\
             jobs.toml:6:25: expected a string, found an integer\n\
             jobs.toml:7:9: invalid environment variable name \"A=B\"\n  hint: names must be non-empty and contain no \"=\" or NUL\n"
        );
    }

    #[test]
    fn huge_values_are_not_repeated_in_full() {
        let big = "x".repeat(100_000);
        let text = errors(&format!("[defaults]\ntimeout = \"{big}\"\n"));
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert!(text.contains("more bytes)"), "{text}");
    }

    #[test]
    fn unknown_timezone() {
        assert_eq!(
            errors("[defaults]\ntimezone = \"Europe/Berln\"\n"),
            "jobs.toml:2:12: unknown timezone \"Europe/Berln\"\n  hint: did you mean one of \"Europe/Berlin\", \"Europe/Dublin\", \"Europe/Belgrade\"?\n"
        );
        assert_eq!(
            errors("[defaults]\ntimezone = \"Mars/Olympus_Mons\"\n"),
            "jobs.toml:2:12: unknown timezone \"Mars/Olympus_Mons\"\n  hint: use an IANA name such as \"Europe/Berlin\", \"UTC\", or \"local\"\n"
        );
    }

    #[test]
    fn syntax_error_position() {
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\ncommand = \"true\"\n"),
            "jobs.toml:2:22: invalid TOML: string is not closed on this line\n  hint: end it with \" (a string over several lines is written \"\"\"...\"\"\")\n"
        );
        assert_eq!(
            errors("[jobs.a\n"),
            "jobs.toml:1:8: invalid TOML: unclosed table, expected `]`\n"
        );
        assert_eq!(
            errors("# ü\n  ünquoted = 1\n"),
            "jobs.toml:2:3: invalid TOML: invalid unquoted key, expected letters, numbers, `-`, `_`\n"
        );
    }

    #[test]
    fn duplicate_keys_and_tables() {
        assert_eq!(
            errors("[jobs.a]\ncommand = \"a\"\ncommand = \"b\"\n"),
            "jobs.toml:3:1: invalid TOML: duplicate key \"command\"\n  hint: each key may appear once per table\n"
        );
        assert_eq!(
            errors("[jobs.a]\ncommand = \"a\"\n\n[jobs.a]\n"),
            "jobs.toml:4:7: invalid TOML: duplicate table [jobs.a]\n  hint: each table may appear once; merge the two\n"
        );
        assert_eq!(
            errors("[jobs]\n\"a b\" = {}\n'a b' = {} # again\n"),
            "jobs.toml:3:1: invalid TOML: duplicate key 'a b'\n  hint: each key may appear once per table\n"
        );
    }

    #[test]
    fn syntax_errors_read_well() {
        assert_eq!(
            errors("[jobs.a]\ncommand =   # TODO\n"),
            "jobs.toml:2:13: invalid TOML: missing value after \"=\"\n  hint: write e.g. key = \"value\"\n"
        );
        assert_eq!(errors("a = \"\0\"\n"), "jobs.toml:1:6: invalid TOML: control character U+0000 is not allowed here\n  hint: remove it; inside a string it can be written escaped, e.g. \"\\u0000\"\n");
        assert_eq!(
            errors("x = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["),
            "jobs.toml:1:85: invalid TOML: cannot recurse further; max recursion depth met\n"
        );
    }

    #[test]
    fn invalid_utf8_is_located() {
        let src = b"[jobs.a]\ncommand = \"caf\xc3\xa9 \xff\"\n";
        let diags = parse(src, Path::new("jobs.toml")).unwrap_err();
        assert_eq!(
            render(&diags),
            "jobs.toml:2:17: the job file is not valid UTF-8 (byte 0xFF)\n  hint: save the file as UTF-8\n"
        );
        let diags = parse(b"\xfe", Path::new("j")).unwrap_err();
        assert_eq!((diags[0].line, diags[0].col), (Some(1), Some(1)));
    }

    #[test]
    fn every_problem_at_once_in_file_order() {
        let src = r#"[jobs.zeta]
schedule = "* * * * *"
comand = "true"

[daemon]
max_concurrent = 0

[jobs.alpha]
schedule = "* * * * *"
command = "true"
overlap = "never"
retry = { attempts = 101 }

[extra]
"#;
        assert_eq!(
            errors(src),
            "jobs.toml:1:1: job \"zeta\" has no \"command\"\n  hint: add e.g. command = \"/usr/local/bin/backup\"\n\
             jobs.toml:3:1: unknown field \"comand\"\n  hint: did you mean \"command\"?\n\
             jobs.toml:6:18: \"max_concurrent\" must be between 1 and 10000, found 0\n\
             jobs.toml:11:11: \"overlap\" must be one of \"skip\", \"queue\", \"allow\", \"replace\", found \"never\"\n\
             jobs.toml:12:22: \"retry.attempts\" must be between 0 and 100, found 101\n\
             jobs.toml:14:2: unknown section \"extra\"\n  hint: the sections are [defaults], [daemon], [cluster], [tenants.NAME] and [jobs.NAME]\n"
        );
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(
            errors("[jobs.a] # ünïcödé\nschedule = \"* * * * *\"\ncommand = \"true\"\ndescription = \"ü\"; overlap = 1\n"),
            "jobs.toml:4:18: invalid TOML: unexpected key or value, expected newline, `#`\n"
        );
        assert_eq!(
            errors("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\nenv = { \"ü\" = \"x\", B = 1 }\n"),
            "jobs.toml:4:24: expected a string, found an integer\n  hint: quote it: B = \"1\"\n"
        );
    }

    #[test]
    fn cron_errors_point_into_the_string() {
        let e = |span: Option<Range<usize>>| ScheduleError {
            message: "bad".into(),
            hint: None,
            span,
        };
        let text = "schedule = \"*/15 * 99 * *\"\n";
        let value = 11..26;
        assert_eq!(&text[value.clone()], "\"*/15 * 99 * *\"");
        assert_eq!(
            schedule_error_offset(text, value.clone(), "*/15 * 99 * *", &e(Some(7..9))),
            19
        );
        assert_eq!(&text[19..21], "99");
        assert_eq!(
            schedule_error_offset(text, value.clone(), "*/15 * 99 * *", &e(None)),
            11
        );
        // Literal strings have no escapes either.
        let text = "schedule = '0 0 * * XYZ'";
        assert_eq!(
            schedule_error_offset(text, 11..24, "0 0 * * XYZ", &e(Some(8..11))),
            20
        );
        // Escapes break the mapping: point at the string.
        let text = "schedule = \"0 0 * *\\t1\"";
        assert_eq!(
            schedule_error_offset(text, 11..23, "0 0 * *\t1", &e(Some(8..9))),
            11
        );
        // Multi-line strings too.
        let text = "schedule = \"\"\"0 0 * * 9\"\"\"";
        assert_eq!(
            schedule_error_offset(text, 11..26, "0 0 * * 9", &e(Some(8..9))),
            11
        );
        // A span past the end (a buggy parser) never points outside the value.
        let text = "schedule = \"0\"";
        assert_eq!(
            schedule_error_offset(text, 11..14, "0", &e(Some(50..51))),
            11
        );
    }

    #[test]
    fn positions() {
        let ctx = Ctx::new("f".into(), "ab\nçd\n\nx");
        assert_eq!(ctx.position(0), (1, 1));
        assert_eq!(ctx.position(2), (1, 3));
        assert_eq!(ctx.position(3), (2, 1));
        assert_eq!(ctx.position(5), (2, 2), "after the two-byte ç");
        assert_eq!(ctx.position(4), (2, 1), "inside ç: its start");
        assert_eq!(ctx.position(7), (3, 1));
        assert_eq!(ctx.position(8), (4, 1));
        assert_eq!(ctx.position(9), (4, 2));
        assert_eq!(ctx.position(999), (4, 2), "past the end: the end");
        assert_eq!(Ctx::new("f".into(), "").position(0), (1, 1));
    }

    #[test]
    fn hostile_input_never_panics() {
        let mut inputs: Vec<Vec<u8>> = vec![
            vec![0u8; 100],
            b"a = \"\0\"".to_vec(),
            b"[jobs.a]\nschedule = \"* * * * *\0\"".to_vec(),
            (0..=255u8).collect(),
            (0..=255u8).rev().cycle().take(10_000).collect(),
            b"\xef\xbb\xbf[jobs.a]\nschedule = 1".to_vec(),
            b"\r\n\r\n[jobs.a]\r\ncommand = 1\r\n".to_vec(),
            format!("[jobs.a]\ncommand = \"{}\"\n", "x".repeat(1 << 20)).into_bytes(),
            format!("# {}\n[jobs.a]\nx = 1", "é".repeat(1 << 19)).into_bytes(),
            format!("x = {}", "[".repeat(100_000)).into_bytes(),
            format!("x = {}{}", "[".repeat(70), "]".repeat(70)).into_bytes(),
            format!("x = {}", "{a=".repeat(50_000)).into_bytes(),
            format!("{}= 1", "a.".repeat(10_000)).into_bytes(),
            format!("[{}]", "a.".repeat(10_000)).into_bytes(),
            b"[daemon]\nmax_concurrent = 18446744073709551616\nhistory_max_bytes = -1\nhistory_files = -9223372036854775808".to_vec(),
            b"[defaults]\nretry = { factor = 1e999, jitter = -0.0, attempts = 0b1111 }".to_vec(),
            b"[jobs.a]\nschedule = \"\"\"\n".to_vec(),
            b"[[jobs.a]]\n[jobs.a.retry]\n".to_vec(),
            b"jobs = []\ndefaults = []\n".to_vec(),
            b"[jobs]\na = 1\nb = \"x\"\nc = []\nd.e.f = 1\n".to_vec(),
        ];
        let example = include_bytes!("../../../jobs.example.toml");
        for cut in 0..example.len() {
            inputs.push(example[..cut].to_vec());
        }
        for input in &inputs {
            let result = parse(input, Path::new("jobs.toml"));
            if let Err(diags) = result {
                assert!(!diags.is_empty());
                for d in diags {
                    assert!(d.line >= Some(1) && d.col >= Some(1), "{d}");
                    assert!(!d.message.contains('\n'), "one-line messages: {d:?}");
                }
            }
        }
    }

    #[test]
    fn one_mebibyte_line_is_located() {
        let src = format!(
            "[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"{}\" x\n",
            "é".repeat(1 << 20)
        );
        assert_eq!(
            errors(&src),
            format!(
                "jobs.toml:3:{}: invalid TOML: unexpected key or value, expected newline, `#`\n",
                12 + (1 << 20) + 2
            )
        );
    }

    /// Who may own the file and the directories above it (needs root to
    /// give a file away).
    #[test]
    fn ownership_of_the_file_and_its_directories() {
        use std::os::unix::fs::{chown, PermissionsExt};
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root to give files away");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let open = dir.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        let path = open.join("jobs.toml");
        std::fs::write(&path, MINIMAL).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(check_permissions(&path).is_ok());

        chown(&path, Some(65534), None).expect("chown");
        let d = &check_permissions(&path).unwrap_err()[0];
        assert_eq!(
            d.message,
            "refusing a job file owned by uid 65534: its owner can make it run commands as root"
        );
        chown(&path, Some(0), None).expect("chown");

        // World-writable without the sticky bit: anyone can replace the file.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let d = &check_permissions(&path).unwrap_err()[0];
        assert!(
            d.message.starts_with(&format!(
                "refusing a job file in directory {}, which is writable by group and others (mode 0777)",
                open.display()
            )),
            "{d}"
        );
        // With it (like /tmp), only the file's owner may replace it.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        assert!(check_permissions(&path).is_ok());
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        chown(&open, Some(65534), None).expect("chown");
        assert!(check_permissions(&path).unwrap_err()[0]
            .message
            .contains("which is owned by uid 65534"));
        // A symlink from a safe place into an unsafe one: the real path counts.
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(check_permissions(&link).unwrap_err()[0]
            .message
            .contains("which is owned by uid 65534"));
        let relaxed = LoadOptions {
            allow_insecure_permissions: true,
        };
        assert_eq!(load_with(&link, relaxed).expect("allowed").jobs.len(), 1);
    }

    /// A reload keeps the `Arc` of every job that did not change (as
    /// written: a respelled schedule is a new job, so `rea list` shows the
    /// new spelling).
    #[test]
    fn a_reload_reuses_the_jobs_that_did_not_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.toml");
        let relaxed = LoadOptions {
            allow_insecure_permissions: true,
        };
        let job = |name: &str, expr: &str| {
            format!("[jobs.{name}]\nschedule = \"{expr}\"\ncommand = \"true\"\n")
        };
        std::fs::write(
            &path,
            job("a", "0 0 * * 1") + &job("b", "0 0 * * 1") + &job("c", "@daily"),
        )
        .expect("write");
        let old = load_with(&path, relaxed).expect("valid");
        std::fs::write(
            &path,
            job("a", "0 0 * * 1") + &job("b", "0 0 * * MON") + &job("c", "@hourly"),
        )
        .expect("write");
        let new = load_if_changed(&path, relaxed, Some(old.digest), Some(&old))
            .expect("valid")
            .expect("changed");
        assert!(std::sync::Arc::ptr_eq(&old.jobs[0], &new.jobs[0]));
        assert!(!std::sync::Arc::ptr_eq(&old.jobs[1], &new.jobs[1]));
        assert_eq!(new.jobs[1].schedule_text(), "0 0 * * MON");
        assert!(!std::sync::Arc::ptr_eq(&old.jobs[2], &new.jobs[2]));
        assert_eq!(new.jobs[2].schedule_text(), "@hourly");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.toml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let d = &load(&path).unwrap_err()[0];
        assert_eq!(
            d.message,
            "the job file is not a regular file (it is a FIFO)"
        );
        assert!(load(dir.path()).unwrap_err()[0]
            .message
            .contains("a directory"));
    }

    #[test]
    fn permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, MINIMAL).expect("write");
        let chmod = |mode| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };

        chmod(0o644);
        assert!(check_permissions(&path).is_ok());
        assert_eq!(load(&path).expect("valid").jobs.len(), 1);
        chmod(0o600);
        assert!(check_permissions(&path).is_ok());

        chmod(0o664);
        let d = check_permissions(&path).unwrap_err().remove(0);
        assert_eq!(
            d.message,
            "refusing a job file writable by group (mode 0664): whoever can edit it can run commands as rea's user"
        );
        assert_eq!(
            d.hint.as_deref(),
            Some(format!("run: chmod go-w {}", path.display()).as_str())
        );
        assert_eq!(load(&path).unwrap_err(), vec![d]);
        let relaxed = LoadOptions {
            allow_insecure_permissions: true,
        };
        assert_eq!(load_with(&path, relaxed).expect("allowed").jobs.len(), 1);

        chmod(0o646);
        assert!(check_permissions(&path).unwrap_err()[0]
            .message
            .contains("writable by others (mode 0646)"));
        chmod(0o666);
        assert!(check_permissions(&path).unwrap_err()[0]
            .message
            .contains("writable by group and others (mode 0666)"));

        // A bad file is reported with its permission problem, all at once.
        std::fs::write(&path, "[jobs.a]\n").expect("write");
        let diags = load(&path).unwrap_err();
        assert_eq!(diags.len(), 3);
        assert!(diags[0]
            .message
            .starts_with("refusing a job file writable by group and others"));

        let missing = dir.path().join("nope.toml");
        let diags = load(&missing).unwrap_err();
        assert!(
            diags[0].message.starts_with("cannot read the job file: "),
            "{}",
            diags[0]
        );
    }

    #[test]
    fn hint_quotes_odd_paths() {
        assert_eq!(shell_quote("/etc/rea/jobs.toml"), "/etc/rea/jobs.toml");
        assert_eq!(shell_quote("my jobs.toml"), "'my jobs.toml'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn duplicate_tags_collapse() {
        let config = ok("[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\ntags = [\"x\", \"y\", \"x\"]\n");
        assert_eq!(config.jobs[0].tags, ["x", "y"]);
    }

    #[test]
    fn web_console_keys() {
        let config = ok("[daemon]\nweb_listen = \"127.0.0.1:8080\"\nweb_hosts = [\"Rea.Example\"]\nweb_viewers = [\"alice\"]\n");
        assert_eq!(
            config.daemon.web_listen,
            Some(([127, 0, 0, 1], 8080).into())
        );
        assert_eq!(config.daemon.web_hosts, vec!["rea.example".to_string()]);
        assert_eq!(config.daemon.web_viewers, vec!["alice".to_string()]);
        assert_eq!(ok("[daemon]\n").daemon.web_listen, None);
        let e = errors("[daemon]\nweb_listen = \"0.0.0.0:8080\"\n");
        assert!(
            e.starts_with("jobs.toml:2:14: web_listen \"0.0.0.0:8080\" is not a loopback address"),
            "{e}"
        );
        let e = errors("[daemon]\nweb_hosts = [\"a b\"]\n");
        assert!(
            e.starts_with("jobs.toml:2:14: invalid host name \"a b\""),
            "{e}"
        );
        let e = errors("[daemon]\nweb_viewers = \"alice\"\n");
        assert!(e.starts_with("jobs.toml:2:15: "), "{e}");
    }

    #[test]
    fn a_non_loopback_web_listen_needs_a_trusted_proxy() {
        let e = errors("[daemon]\nweb_listen = \"0.0.0.0:8080\"\n");
        assert!(e.contains("hint: off loopback the console needs a trusted proxy that names each user: add web_proxy = { header = \"X-Forwarded-User\", from = [\"PROXY-IP\"] }"), "{e}");
        // Written before or after web_listen, the proxy opts in.
        for text in [
            "[daemon]\nweb_listen = \"0.0.0.0:8080\"\nweb_proxy = { header = \"X-Forwarded-User\", from = [\"10.0.0.9\", \"::1\"] }\n",
            "[daemon]\nweb_proxy = { header = \"X-Forwarded-User\", from = [\"10.0.0.9\", \"::1\"] }\nweb_listen = \"0.0.0.0:8080\"\n",
        ] {
            let d = ok(text).daemon;
            assert_eq!(d.web_listen, Some(([0, 0, 0, 0], 8080).into()));
            assert_eq!(
                d.web_proxy,
                Some(crate::WebProxy {
                    header: "x-forwarded-user".into(),
                    from: vec![[10, 0, 0, 9].into(), std::net::Ipv6Addr::LOCALHOST.into()],
                })
            );
        }
        for (text, want) in [
            (
                "web_proxy = { header = \"Cookie\", from = [\"10.0.0.9\"] }",
                "jobs.toml:2:24: web_proxy header \"Cookie\" cannot name the user",
            ),
            (
                "web_proxy = { header = \"X-User\", from = [\"proxy.lan\"] }",
                "jobs.toml:2:42: invalid proxy address \"proxy.lan\"",
            ),
            (
                "web_proxy = { header = \"X-User\", from = [] }",
                "jobs.toml:2:41: web_proxy from lists no address",
            ),
            (
                "web_proxy = { header = \"X-User\" }",
                "jobs.toml:2:13: web_proxy needs both header and from",
            ),
            (
                "web_proxy = { header = \"X-User\", from = [\"::1\"], form = 1 }",
                "jobs.toml:2:50: unknown field \"form\"",
            ),
        ] {
            let e = errors(&format!("[daemon]\n{text}\n"));
            assert!(e.starts_with(want), "{text}: {e}");
            assert!(e.contains("hint: "), "{text}: {e}");
        }
    }

    #[test]
    fn metrics_address() {
        let config = ok("[daemon]\nmetrics = \"127.0.0.1:9746\"\n");
        assert_eq!(config.daemon.metrics, Some(([127, 0, 0, 1], 9746).into()));
        let config = ok("[daemon]\nmetrics = \"[::1]:0\"\n");
        assert_eq!(config.daemon.metrics.map(|a| a.is_ipv6()), Some(true));
        assert_eq!(ok("[daemon]\n").daemon.metrics, None);
        assert_eq!(
            errors("[daemon]\nmetrics = \"localhost:9746\"\n"),
            "jobs.toml:2:11: invalid metrics address \"localhost:9746\"\n  hint: write IP:PORT, e.g. \"127.0.0.1:9746\" or \"[::1]:9746\" (an address, not a host name)\n"
        );
        assert_eq!(
            errors("[daemon]\nmetrics = 9746\n"),
            "jobs.toml:2:11: expected a string like \"127.0.0.1:9746\", found an integer\n"
        );
    }

    #[test]
    fn job_output() {
        assert_eq!(ok("[daemon]\n").daemon.job_output, JobOutput::History);
        assert_eq!(
            ok("[daemon]\njob_output = \"journal\"\n").daemon.job_output,
            JobOutput::Journal
        );
        assert_eq!(
            ok("[daemon]\njob_output = \"history\"\n").daemon.job_output,
            JobOutput::History
        );
        assert_eq!(
            errors("[daemon]\njob_output = \"journald\"\n"),
            "jobs.toml:2:14: \"job_output\" must be one of \"history\", \"journal\", found \"journald\"\n  hint: did you mean \"journal\"?\n"
        );
        assert_eq!(
            errors("[daemon]\njob_output = true\n"),
            "jobs.toml:2:14: expected one of \"history\", \"journal\", found a boolean\n"
        );
    }
}

mod limits {
    use super::unit::{errors, ok};
    use super::*;
    use rea_core::run::IoNice;

    #[test]
    fn limits_are_read_per_job_and_from_defaults() {
        let config = ok(r#"
[defaults]
nice = 5
memory_max = "512MiB"
[daemon]
cgroups = "off"
[jobs.a]
schedule = "@daily"
command = "true"
cpu_max = "50%"
cpu_weight = 200
io_weight = 50
tasks_max = 100
memory_high = "256MiB"
ionice = "best-effort:6"
nofile = 4096
nproc = "unlimited"
core = 0
stack = "8MiB"
as = "2GiB"
[jobs.b]
schedule = "@daily"
command = "true"
nice = -3
ionice = "idle"
"#);
        assert!(!config.daemon.cgroups);
        let a = config.jobs[0].extras().limits;
        assert_eq!(a.nice, Some(5));
        assert_eq!(a.memory_max, Some(512 << 20));
        assert_eq!(a.memory_high, Some(256 << 20));
        assert_eq!(a.cpu_max_percent, Some(50));
        assert_eq!(a.cpu_weight, Some(200));
        assert_eq!(a.io_weight, Some(50));
        assert_eq!(a.tasks_max, Some(100));
        assert_eq!(a.ionice, Some(IoNice::BestEffort(6)));
        assert_eq!(a.nofile, Some(4096));
        assert_eq!(a.nproc, Some(u64::MAX));
        assert_eq!(a.core, Some(0));
        assert_eq!(a.stack, Some(8 << 20));
        assert_eq!(a.address_space, Some(2 << 30));
        let b = config.jobs[1].extras().limits;
        assert_eq!(b.nice, Some(-3));
        assert_eq!(b.ionice, Some(IoNice::Idle));
        assert_eq!(b.memory_max, Some(512 << 20));
    }

    #[test]
    fn bad_limits_are_located_and_explained() {
        let job =
            |field: &str| format!("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n{field}\n");
        assert!(errors(&job("cpu_max = \"half\"")).contains("percentage of one CPU"));
        assert!(errors(&job("cpu_max = \"0%\"")).contains("percentage of one CPU"));
        assert!(errors(&job("nice = 20")).contains("nice"));
        assert!(errors(&job("ionice = \"lazy\"")).contains("\"ionice\" must be"));
        assert!(errors(&job("ionice = \"realtime:9\"")).contains("\"ionice\" must be"));
        assert!(errors(&job("cpu_weight = 0")).contains("cpu_weight"));
        assert!(errors(&job("memory_max = \"1KiB\"")).contains("memory_max"));
        assert!(errors("[daemon]\ncgroups = \"yes\"\n").contains("cgroups"));
    }
}

mod tenants {
    use super::unit::{errors, ok};
    use super::*;

    fn as_alice(src: &str) -> String {
        match parse_as(
            src.as_bytes(),
            Path::new("users/alice.toml"),
            &FileKind::User("alice".into()),
        ) {
            Ok(_) => panic!("expected errors, the file was accepted"),
            Err(diags) => diags.iter().map(|d| format!("{d}\n")).collect(),
        }
    }

    #[test]
    fn root_sets_a_tenants_subtree_and_every_users_default() {
        let config = ok(r#"
[tenants."*"]
memory_max = "2GiB"
tasks_max = 512
min_nice = 5
[tenants.alice]
memory_max = "8GiB"
cpu_max = "150%"
cpu_weight = 50
io_weight = 20
memory_high = "6GiB"
[jobs.a]
schedule = "@daily"
command = "true"
"#);
        let t = &config.daemon.tenants;
        assert_eq!(t.every_user.cgroup.memory_max, Some(2 << 30));
        assert_eq!(t.every_user.min_nice, Some(5));
        let alice = t.for_user("alice");
        assert_eq!(alice.cgroup.memory_max, Some(8 << 30));
        assert_eq!(alice.cgroup.memory_high, Some(6 << 30));
        assert_eq!(alice.cgroup.cpu_max_percent, Some(150));
        assert_eq!(alice.cgroup.cpu_weight, Some(50));
        assert_eq!(alice.cgroup.io_weight, Some(20));
        assert_eq!(alice.cgroup.tasks_max, Some(512), "from \"*\"");
        assert_eq!(alice.min_nice, Some(5), "from \"*\"");
        assert_eq!(t.for_user("bob"), t.every_user);
        // A job's own limits stay its own.
        assert_eq!(config.jobs[0].extras().limits.memory_max, None);
    }

    #[test]
    fn tenant_errors_are_located_with_hints() {
        let e = errors("[tenants.alice]\nmemory_max = \"lots\"\n");
        assert!(e.starts_with("jobs.toml:2:14: "), "{e}");
        let e = errors("[tenants.alice]\ntasks_mx = \"1GiB\"\n");
        assert!(
            e.contains("jobs.toml:2:1: unknown field") && e.contains("did you mean \"tasks_max\"?"),
            "{e}"
        );
        let e = errors("[tenants.alice]\nnice = 5\n");
        assert!(e.contains("min_nice = N"), "{e}");
        let e = errors("[tenants.alice]\ncommand = \"x\"\n");
        assert!(
            e.contains("is a job's field; a tenant takes: memory_max"),
            "{e}"
        );
        let e = errors("[tenants.alice]\nmin_nice = -5\n");
        assert!(
            e.contains("jobs.toml:2:12: ") && e.contains("min_nice"),
            "{e}"
        );
        let e = errors("[tenants.root]\nmemory_max = \"1GiB\"\n");
        assert!(
            e.contains("invalid tenant \"root\"") && e.contains("the system's"),
            "{e}"
        );
        let e = errors("[tenants.\"a/b\"]\nmemory_max = \"1GiB\"\n");
        assert!(
            e.contains("invalid tenant") && e.contains("[tenants.\"*\"]"),
            "{e}"
        );
        let e = errors("[tenant.alice]\nmemory_max = \"1GiB\"\n");
        assert!(e.contains("did you mean \"tenants\"?"), "{e}");
    }

    #[test]
    fn a_users_file_can_neither_set_tenant_limits_nor_lower_nice() {
        let e = as_alice("[tenants.alice]\nmemory_max = \"64GiB\"\n");
        assert!(
            e.starts_with("users/alice.toml:1:2: [tenants] belongs in root's main job file"),
            "{e}"
        );
        let e = as_alice("[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\nnice = -5\n");
        assert!(
            e.contains(
                "users/alice.toml:4:1: nice = -5: only root may run a job at a nice value below 0"
            ),
            "{e}"
        );
        let e = as_alice(
            "[defaults]\nnice = -1\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n",
        );
        assert!(e.contains("users/alice.toml:3:7: nice = -1"), "{e}");
        let e = as_alice(
            "[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\nionice = \"realtime:0\"\n",
        );
        assert!(
            e.contains("users/alice.toml:4:1: ionice = realtime: only root may give a job the realtime IO class")
                && e.contains("best-effort"),
            "{e}"
        );
        assert!(parse_as(
            b"[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\nnice = 5\n",
            Path::new("users/alice.toml"),
            &FileKind::User("alice".into()),
        )
        .is_ok());
    }
}

mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes, and TOML-ish soup, never panic and always locate.
        #[test]
        fn arbitrary_bytes(src in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Err(diags) = parse(&src, Path::new("j")) {
                prop_assert!(diags.iter().all(|d| d.line >= Some(1) && d.col >= Some(1)));
            }
        }

        #[test]
        fn toml_soup(parts in proptest::collection::vec(prop::sample::select(vec![
            "[", "]", "[[", "]]", "jobs", "defaults", "daemon", ".", "a", "\"", "'", "=", " ", "\n",
            "{", "}", ",", "1", "-1", "2.5", "\"x\"", "\"10m\"", "retry", "env", "schedule", "command",
            "true", "#", "\\", "\"\"\"", "é", "\0", "attempts", "timezone", "\"UTC\"", "tags",
        ]), 0..60)) {
            let src: String = parts.concat();
            if let Err(diags) = parse(src.as_bytes(), Path::new("j")) {
                prop_assert!(diags.iter().all(|d| d.line >= Some(1) && d.col >= Some(1)));
            }
        }
    }
}

/// `after` entries with a condition, and `params`.
mod conditions_and_params {
    use super::unit::{errors, ok};
    use rea_core::job::{Dependency, On};

    const EXTRACT: &str = "[jobs.extract]\nschedule = \"@daily\"\ncommand = \"x\"\n";

    #[test]
    fn after_mixes_names_and_tables_and_defaults_to_success() {
        let c = ok(&format!(
            "{EXTRACT}[jobs.load]\nschedule = \"@daily\"\ncommand = \"x\"\n\
             [jobs.tidy]\ncommand = \"x\"\n\
             after = [\"load\", {{ job = \"extract\", on = \"failure\" }}, {{ job = \"load\" }}]\n\
             [jobs.audit]\ncommand = \"x\"\nafter = [{{ job = \"extract\", on = \"always\" }}]\n"
        ));
        let dep = |job: &str, on| Dependency {
            job: job.into(),
            on,
        };
        assert_eq!(
            c.jobs[2].after,
            vec![dep("load", On::Success), dep("extract", On::Failure)]
        );
        assert_eq!(
            c.jobs[2].schedule_text(),
            "after load, extract (on failure)"
        );
        assert_eq!(c.jobs[3].after, vec![dep("extract", On::Always)]);
    }

    #[test]
    fn bad_after_entries_are_located_with_a_hint() {
        assert_eq!(
            errors(&format!(
                "{EXTRACT}[jobs.t]\ncommand = \"x\"\nafter = [{{ job = \"extract\", on = \"failed\" }}]\n"
            )),
            "jobs.toml:6:34: \"on\" must be one of \"success\", \"failure\", \"always\", found \"failed\"\n  hint: did you mean \"failure\"?\n"
        );
        assert_eq!(
            errors(&format!(
                "{EXTRACT}[jobs.t]\ncommand = \"x\"\nafter = [{{ on = \"failure\" }}]\n"
            )),
            "jobs.toml:6:10: an \"after\" entry names no job\n  hint: write { job = \"extract\", on = \"failure\" }\n"
        );
        let e = errors(&format!(
            "{EXTRACT}[jobs.t]\ncommand = \"x\"\nafter = [{{ job = \"extract\", when = \"failure\" }}]\n"
        ));
        assert!(
            e.starts_with("jobs.toml:6:29: unknown field \"when\""),
            "{e}"
        );
        assert_eq!(
            errors(&format!(
                "{EXTRACT}[jobs.t]\ncommand = \"x\"\nafter = [\"extract\", {{ job = \"extract\", on = \"failure\" }}]\n"
            )),
            "jobs.toml:6:21: \"after\" lists \"extract\" twice, on success and on failure\n  hint: list it once: { job = \"extract\", on = \"always\" } runs after either end\n"
        );
        assert_eq!(
            errors(&format!("{EXTRACT}[jobs.t]\ncommand = \"x\"\nafter = [3]\n")),
            "jobs.toml:6:10: expected a job name, or a table like { job = \"extract\", on = \"failure\" }, found an integer\n"
        );
    }

    #[test]
    fn a_cycle_through_conditional_entries_is_refused_where_it_starts() {
        let e = errors(
            "[jobs.a]\ncommand = \"x\"\nafter = [{ job = \"b\", on = \"failure\" }]\n\
             [jobs.b]\ncommand = \"x\"\nafter = [{ job = \"a\", on = \"always\" }]\n",
        );
        assert_eq!(
            e,
            "jobs.toml:3:1: jobs depend on each other in a cycle: a → b → a\n  hint: remove one of these \"after\" entries\n"
        );
        let e =
            errors("[jobs.a]\ncommand = \"x\"\nafter = [{ job = \"nope\", on = \"failure\" }]\n");
        assert!(
            e.starts_with(
                "jobs.toml:3:1: job \"a\" runs after \"nope\", which is not a job of this file"
            ),
            "{e}"
        );
    }

    #[test]
    fn params_are_a_list_of_names_or_a_table_with_defaults_and_patterns() {
        let c = ok("[jobs.a]\ncommand = \"x\"\nschedule = \"@daily\"\nparams = [\"DATE\", \"REGION\"]\n\
                    [jobs.b]\ncommand = \"x\"\nschedule = \"@daily\"\n\
                    params = { DATE = { default = \"2026-01-01\", pattern = \"[0-9]{4}-[0-9]{2}-[0-9]{2}\" }, REGION = { default = \"eu\" } }\n");
        let names = |i: usize| -> Vec<String> {
            c.jobs[i]
                .extras()
                .params
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names(0), ["DATE", "REGION"]);
        assert_eq!(names(1), ["DATE", "REGION"]);
        let date = &c.jobs[1].extras().params[0];
        assert_eq!(date.default.as_deref(), Some("2026-01-01"));
        assert_eq!(
            date.pattern.as_ref().map(|p| p.as_str()),
            Some("[0-9]{4}-[0-9]{2}-[0-9]{2}")
        );
        // Job a runs on a schedule with two parameters that have no default.
        assert_eq!(
            c.warnings.iter().map(|w| format!("{w}\n")).collect::<String>(),
            "jobs.toml:4:1: warning: job \"a\" also runs on its own (its schedule or after), where parameters DATE, REGION are unset\n  hint: give it a default: params = { DATE = { default = \"…\" } }\n"
        );
    }

    #[test]
    fn bad_params_are_located_with_a_hint() {
        let job = "[jobs.a]\ncommand = \"x\"\nschedule = \"@daily\"\n";
        assert_eq!(
            errors(&format!("{job}params = [\"REA_JOB\", \"1X\"]\n")),
            "jobs.toml:4:11: invalid parameter name: names starting with \"REA_\" are reserved (rea's own variables, the loader's)\n  hint: write params = [\"DATE\"] or params = { DATE = { default = \"today\", pattern = \"[0-9-]+\" } }\n\
             jobs.toml:4:22: invalid parameter name: \"1X\" is not an environment variable name (letters, digits and \"_\", not starting with a digit)\n  hint: write params = [\"DATE\"] or params = { DATE = { default = \"today\", pattern = \"[0-9-]+\" } }\n"
        );
        assert_eq!(
            errors(&format!("{job}params = {{ PATH = {{}} }}\n")),
            "jobs.toml:4:12: invalid parameter name: \"PATH\" is set by rea or the shell for every run and cannot be a parameter\n  hint: write params = [\"DATE\"] or params = { DATE = { default = \"today\", pattern = \"[0-9-]+\" } }\n"
        );
        let e = errors(&format!(
            "{job}params = {{ D = {{ pattern = \"[0-9\" }} }}\n"
        ));
        assert!(
            e.starts_with("jobs.toml:4:28: invalid pattern for \"D\": "),
            "{e}"
        );
        assert_eq!(
            errors(&format!("{job}params = {{ D = {{ default = \"x\", pattern = \"[0-9]+\" }} }}\n")),
            "jobs.toml:4:28: the default of \"D\" is not a value it accepts: D=\"x\" does not match its pattern \"[0-9]+\"\n"
        );
        let e = errors(&format!("{job}params = {{ D = {{ defualt = \"x\" }} }}\n"));
        assert!(
            e.starts_with("jobs.toml:4:18: unknown field \"defualt\""),
            "{e}"
        );
        assert!(e.contains("did you mean \"default\""), "{e}");
        assert_eq!(
            errors(&format!("{job}params = \"DATE\"\n")),
            "jobs.toml:4:10: expected an array of names or a table of parameters, found a string\n  hint: write params = [\"DATE\"] or params = { DATE = { default = \"today\", pattern = \"[0-9-]+\" } }\n"
        );
    }
}

mod alerts {
    use super::unit::{errors, ok};
    use rea_core::alert::{AlertRules, RunningOver, P95_FLOOR};
    use std::time::Duration;

    #[test]
    fn alert_fields_merge_with_defaults_field_by_field() {
        let c = ok("[defaults]\nalert = { late = \"5m\", failures = 3 }\non_alert = \"notify\"\n\
                    [jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.running_over = \"3x p95\"\nalert.failures = 0\n\
                    [jobs.b]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.late = \"none\"\nalert.no_success_within = \"26h\"\nalert.running_over = \"30m\"\nalert.mail = false\n");
        let a = &c.jobs[0].extras().alert;
        assert_eq!(
            *a,
            AlertRules {
                late: Some(Duration::from_secs(300)),
                running_over: Some(RunningOver::P95 {
                    factor: 3.0,
                    floor: P95_FLOOR
                }),
                failures: None,
                ..AlertRules::NONE
            }
        );
        assert_eq!(c.jobs[0].extras().on_alert.as_deref(), Some("notify"));
        let b = &c.jobs[1].extras().alert;
        assert_eq!(b.late, None);
        assert_eq!(b.failures, Some(3));
        assert_eq!(b.no_success_within, Some(Duration::from_secs(26 * 3600)));
        assert_eq!(
            b.running_over,
            Some(RunningOver::Fixed(Duration::from_secs(1800)))
        );
        assert!(!b.mail);
    }

    #[test]
    fn bad_alert_fields_are_located_with_a_hint() {
        let e = errors("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.lat = \"5m\"\n");
        assert!(
            e.starts_with("jobs.toml:4:7: unknown field \"lat\"\n  hint: did you mean \"late\"?"),
            "{e}"
        );
        let e = errors(
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.running_over = \"3 p95\"\n",
        );
        assert!(
            e.starts_with("jobs.toml:4:22: invalid running_over \"3 p95\""),
            "{e}"
        );
        assert!(
            e.contains("hint: write alert.running_over = \"30m\", or \"3x p95\""),
            "{e}"
        );
        let e = errors(
            "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert = { late = \"0s\" }\n",
        );
        assert!(
            e.starts_with("jobs.toml:4:18: \"alert.late\" must be longer than 0s"),
            "{e}"
        );
        let e =
            errors("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert.failures = \"3\"\n");
        assert!(e.starts_with("jobs.toml:4:18: "), "{e}");
        assert!(e.contains("drop the quotes: 3"), "{e}");
        let e = errors("[jobs.a]\nschedule = \"@hourly\"\ncommand = \"x\"\nalert = \"5m\"\n");
        assert!(e.starts_with("jobs.toml:4:9: "), "{e}");
    }
}

mod notify {
    use super::unit::{errors, ok};
    use rea_core::notify::{Filter, PingStyle};
    use rea_core::record::RunStatus;
    use std::time::Duration;

    const JOB: &str = "[jobs.a]\nschedule = \"* * * * *\"\ncommand = \"true\"\n";

    #[test]
    fn webhooks_and_pings_are_read_and_inherited() {
        let c = ok(&format!(
            "[defaults]\nping = \"https://hc-ping.com/abc\"\n\
             webhook = {{ url = \"https://hooks.example/all\" }}\n\
             {JOB}\
             [jobs.b]\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
             webhook = [{{ url = \"http://127.0.0.1:9/x\", on = [\"success\", \"alert:late\"], timeout = \"2s\", attempts = 2 }}]\n\
             ping = {{ url = \"https://cronitor.link/p/k/b\", style = \"cronitor\" }}\n\
             [jobs.c]\nschedule = \"* * * * *\"\ncommand = \"true\"\nwebhook = []\nping = \"\"\n"
        ));
        let a = c.jobs[0].extras().notify.clone().expect("a inherits");
        assert_eq!(a.webhooks.len(), 1);
        assert_eq!(a.webhooks[0].on, Filter::DEFAULT);
        assert_eq!(a.webhooks[0].timeout, Duration::from_secs(10));
        assert_eq!(a.ping.as_ref().unwrap().style, PingStyle::Healthchecks);
        let b = c.jobs[1].extras().notify.clone().expect("b has its own");
        assert_eq!(b.webhooks[0].url, "http://127.0.0.1:9/x");
        assert!(b.webhooks[0].on.matches_run(RunStatus::Succeeded));
        assert!(!b.webhooks[0].on.matches_run(RunStatus::Failed));
        assert!(b.webhooks[0].on.matches_alert("late"));
        assert_eq!(b.webhooks[0].timeout, Duration::from_secs(2));
        assert_eq!(b.webhooks[0].attempts, 2);
        assert_eq!(a.webhooks[0].attempts, 5);
        assert_eq!(b.ping.as_ref().unwrap().style, PingStyle::Cronitor);
        assert!(c.jobs[2].extras().notify.is_none(), "turned off");
        assert!(c.jobs[2].extras.is_none(), "no extras left");
        let d = ok("[daemon]\nwebhook_private_targets = true\n");
        assert!(d.daemon.webhook_private_targets);
    }

    #[test]
    fn bad_webhooks_and_pings_are_located_with_a_hint() {
        let e = errors(&format!(
            "{JOB}webhook = {{ url = \"ftp://h/x\", on = [\"failur\"], timout = \"1s\" }}\n"
        ));
        assert_eq!(
            e,
            "jobs.toml:4:19: \"webhook.url\" must be http:// or https://, found \"ftp\"\n  hint: write a URL like \"https://hooks.example/rea\"\n\
             jobs.toml:4:38: unknown webhook event \"failur\"\n  hint: did you mean one of \"failure\", \"alert:failures\"?\n\
             jobs.toml:4:49: unknown field \"timout\"\n  hint: did you mean \"timeout\"?\n"
        );
        let e = errors(&format!("{JOB}webhook = {{ on = [] }}\n"));
        assert!(e.contains("jobs.toml:4:18: \"on\" lists no event"), "{e}");
        assert!(e.contains("jobs.toml:4:11: webhook has no \"url\""), "{e}");
        let e = errors(&format!("{JOB}ping = \"hc-ping.com/x\"\n"));
        assert!(e.contains("jobs.toml:4:8: \"ping\" is not a URL"), "{e}");
        let e = errors(&format!(
            "{JOB}ping = {{ url = \"https://h/x\", style = \"cronitr\", timeout = \"10m\" }}\n"
        ));
        assert!(e.contains("\"ping.style\" must be one of"), "{e}");
        assert!(e.contains("did you mean \"cronitor\"?"), "{e}");
        assert!(
            e.contains("\"ping.timeout\" must be longer than 0s and at most 2m"),
            "{e}"
        );
        let e = errors(&format!(
            "{JOB}webhook = {{ url = \"https://h/x\", attempts = 0 }}\n"
        ));
        assert!(
            e.contains("\"webhook.attempts\" must be between 1 and 10, found 0"),
            "{e}"
        );
        let e = errors(&format!("{JOB}webhook = \"https://h/x\"\n"));
        assert!(e.contains("jobs.toml:4:11: expected a table like"), "{e}");
    }
}
