//! The Prometheus endpoint (`[daemon] metrics`): scraped over a raw TCP
//! connection, as Prometheus would, from a daemon running real jobs.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{rea_bin, Daemon, Env, PATIENCE};

const JOBS: &str = r#"
[daemon]
metrics = "127.0.0.1:0"

[jobs.tick]
schedule = "* * * * * *"
command = "true"

[jobs.fail]
schedule = "* * * * * *"
command = "exit 3"
"#;

/// The address the daemon logged (port 0 lets the kernel choose one).
pub(crate) fn endpoint(d: &Daemon) -> String {
    let mut found = None;
    let deadline = Instant::now() + PATIENCE;
    while found.is_none() && Instant::now() < deadline {
        found = d.log_text().lines().find_map(|l| {
            l.split_once("metrics endpoint listening on ")
                .map(|(_, a)| a.trim().to_string())
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    found.unwrap_or_else(|| panic!("no endpoint address in the log:\n{}", d.log_text()))
}

struct Response {
    status: String,
    headers: String,
    body: String,
}

fn request(addr: &str, head: &str) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = String::new();
    // The server closes after one response.
    s.read_to_string(&mut raw).expect("read the response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let r = Response {
        status: status.to_string(),
        headers: headers.to_string(),
        body: body.to_string(),
    };
    let length = r
        .headers
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse::<usize>().ok());
    assert_eq!(length, Some(r.body.len()), "Content-Length of {}", r.status);
    r
}

pub(crate) fn scrape(addr: &str) -> String {
    let r = request(addr, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(r.status, "HTTP/1.1 200 OK");
    assert!(
        r.headers
            .contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{}",
        r.headers
    );
    check_syntax(&r.body);
    r.body
}

/// Every line is a comment or `name{labels} value` with a number.
fn check_syntax(text: &str) {
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        assert!(
            value.parse::<f64>().is_ok() || value == "+Inf",
            "bad value in {line:?}"
        );
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(
                    labels.starts_with('{') && labels.ends_with('}'),
                    "bad labels in {line:?}"
                );
                for pair in labels[1..labels.len() - 1].split("\",") {
                    let (k, v) = pair
                        .split_once("=\"")
                        .unwrap_or_else(|| panic!("bad label in {line:?}"));
                    assert!(!k.is_empty() && !v.contains('\n'), "bad label in {line:?}");
                }
            }
        }
    }
}

/// The value of the sample `series` (name with labels, exactly).
pub(crate) fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_scrape_shows_runs_timestamps_and_gauges() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let addr = endpoint(&d);
    env.wait_until("two runs of each job", || {
        env.runs("tick", "succeeded").len() >= 2 && env.runs("fail", "failed").len() >= 2
    });
    let text = scrape(&addr);
    let ok = value(&text, "rea_runs_total{job=\"tick\",status=\"succeeded\"}").unwrap();
    let failed = value(&text, "rea_runs_total{job=\"fail\",status=\"failed\"}").unwrap();
    assert!(ok >= 2.0 && failed >= 2.0, "{text}");
    assert_eq!(
        value(&text, "rea_runs_total{job=\"fail\",status=\"succeeded\"}"),
        Some(0.0)
    );
    assert!(value(&text, "rea_run_duration_seconds_count{job=\"tick\"}").unwrap() >= 2.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let last = value(&text, "rea_last_success_timestamp_seconds{job=\"tick\"}")
        .unwrap_or_else(|| panic!("no last success for tick:\n{text}"));
    assert!((now - last).abs() < 60.0, "last success {last}, now {now}");
    assert!(
        !text.contains("rea_last_success_timestamp_seconds{job=\"fail\"}"),
        "fail never succeeded:\n{text}"
    );
    let next = value(&text, "rea_next_fire_timestamp_seconds{job=\"tick\"}").unwrap();
    assert!(next > now - 5.0 && next < now + 60.0, "next fire {next}");
    for gauge in [
        "rea_running",
        "rea_running_hooks",
        "rea_queued",
        "rea_oneshots_pending",
    ] {
        assert!(value(&text, gauge).is_some(), "no {gauge}:\n{text}");
    }
    assert_eq!(value(&text, "rea_max_concurrent"), Some(8.0));
    assert_eq!(value(&text, "rea_config_valid"), Some(1.0));
    assert_eq!(value(&text, "rea_history_write_errors_total"), Some(0.0));
    assert!(text.contains("rea_build_info{version=\""), "{text}");

    // Prometheus asks for OpenMetrics and gets it.
    let om = request(
        &addr,
        "GET /metrics HTTP/1.0\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
    );
    assert_eq!(om.status, "HTTP/1.1 200 OK");
    assert!(
        om.headers
            .contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{}",
        om.headers
    );
    assert!(om.body.ends_with("# EOF\n"));
    check_syntax(&om.body);

    let nope = request(&addr, "GET /nope HTTP/1.1\r\n\r\n");
    assert_eq!(nope.status, "HTTP/1.1 404 Not Found");
    let post = request(&addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(post.status, "HTTP/1.1 405 Method Not Allowed");
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    let huge = request(&addr, &huge);
    assert_eq!(huge.status, "HTTP/1.1 431 Request Header Fields Too Large");
}

#[test]
fn a_rejected_file_and_a_removed_job_show_in_the_metrics() {
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let addr = endpoint(&d);
    env.wait_until("a run of fail", || !env.finals("fail").is_empty());
    assert!(scrape(&addr).contains("job=\"fail\""));

    env.jobs(&format!("{JOBS}\n[jobs.broken]\n"));
    env.wait_until("the bad edit to be rejected", || {
        !env.events("config_rejected").is_empty()
    });
    assert_eq!(value(&scrape(&addr), "rea_config_valid"), Some(0.0));

    let loaded = env.events("config_loaded").len();
    env.jobs(&JOBS.replace("[jobs.fail]", "[jobs.other]"));
    env.wait_until("the good edit to be loaded", || {
        env.events("config_loaded").len() > loaded
    });
    let text = scrape(&addr);
    assert_eq!(value(&text, "rea_config_valid"), Some(1.0));
    assert!(!text.contains("job=\"fail\""), "{text}");
    assert!(text.contains("rea_runs_total{job=\"other\",status=\"failed\"}"));
    assert!(text.contains("job=\"tick\""));
}

#[test]
fn a_taken_address_stops_the_start_with_a_clear_message() {
    let env = Env::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    env.jobs(&JOBS.replace("127.0.0.1:0", &addr.to_string()));
    let mut child = Command::new(rea_bin())
        .arg("run")
        .current_dir(env.dir.path())
        .env("REA_FILE", env.jobs_path())
        .env("REA_STATE_DIR", env.state())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rea run started although the metrics address is taken");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot serve metrics on {addr} ([daemon] metrics): the address is already in use"
        )),
        "{stderr}"
    );
    assert!(env.events("daemon_started").is_empty());
    assert!(
        !env.state().join("rea.sock").exists(),
        "no control socket left behind"
    );
}

#[test]
fn the_last_success_survives_a_restart() {
    let env = Env::new();
    env.jobs("[daemon]\nmetrics = \"127.0.0.1:0\"\n[jobs.yearly]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let d = env.daemon();
    env.rea(&["trigger", "yearly", "--wait"]).ok();
    let before = value(
        &scrape(&endpoint(&d)),
        "rea_last_success_timestamp_seconds{job=\"yearly\"}",
    )
    .expect("a last success after the triggered run");
    assert_eq!(d.stop(), 0);

    let d = env.daemon();
    let text = scrape(&endpoint(&d));
    assert_eq!(
        value(&text, "rea_last_success_timestamp_seconds{job=\"yearly\"}"),
        Some(before),
        "seeded from the history log:\n{text}"
    );
    assert_eq!(
        value(&text, "rea_runs_total{job=\"yearly\",status=\"succeeded\"}"),
        Some(0.0),
        "counters start at zero"
    );
}

/// Whether `program` is on the PATH.
fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// `promtool check metrics` on an exposition (it lints names, units, help
/// and types as Prometheus' own tooling sees them). Skipped, loudly,
/// without promtool (`.ci/run` installs it from Debian's prometheus).
fn promtool_accepts(text: &str) {
    if !have("promtool") {
        eprintln!("SKIPPED: promtool is not installed: `promtool check metrics` not run (apt-get download prometheus, or run .ci/run)");
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics complains:\n{}{}\n--- exposition:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const ALERTING: &str = r#"
[daemon]
metrics = "127.0.0.1:0"

[jobs.tick]
schedule = "* * * * * *"
command = "true"

[jobs.fail]
schedule = "* * * * * *"
command = "exit 3"

[jobs.later]
schedule = "@yearly"
command = "true"

[jobs.off]
schedule = "@daily"
command = "true"
enabled = false
"#;

#[test]
fn alerting_series_say_what_failed_and_what_is_paused() {
    let env = Env::new();
    env.jobs(ALERTING);
    let d = env.daemon();
    let addr = endpoint(&d);

    // Before any run: every job's state series exist, at zero, and so do
    // the one-shot counters.
    let text = scrape(&addr);
    for job in ["tick", "fail", "later", "off"] {
        assert_eq!(
            value(&text, &format!("rea_consecutive_failures{{job=\"{job}\"}}")),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            value(&text, &format!("rea_paused{{job=\"{job}\"}}")),
            Some(0.0)
        );
        for status in ["succeeded", "failed", "timed_out", "killed", "interrupted"] {
            assert_eq!(
                value(
                    &text,
                    &format!("rea_last_run_status{{job=\"{job}\",status=\"{status}\"}}")
                ),
                Some(0.0),
                "{job} {status} before any run:\n{text}"
            );
        }
    }
    for status in ["succeeded", "failed", "timed_out", "cancelled"] {
        assert_eq!(
            value(
                &text,
                &format!("rea_oneshot_runs_total{{status=\"{status}\"}}")
            ),
            Some(0.0),
            "{text}"
        );
    }
    assert!(
        !text.contains("rea_last_exit_code{job=\"later\"}"),
        "{text}"
    );
    promtool_accepts(&text);

    env.wait_until("two failures of fail", || {
        env.runs("fail", "failed").len() >= 2 && !env.runs("tick", "succeeded").is_empty()
    });
    env.rea(&["pause", "later"]).ok();
    let text = scrape(&addr);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let failed_at = value(&text, "rea_last_failure_timestamp_seconds{job=\"fail\"}")
        .unwrap_or_else(|| panic!("no last failure for fail:\n{text}"));
    assert!((now - failed_at).abs() < 60.0, "{failed_at} vs {now}");
    assert!(
        !text.contains("rea_last_failure_timestamp_seconds{job=\"tick\"}"),
        "tick never failed:\n{text}"
    );
    assert!(value(&text, "rea_consecutive_failures{job=\"fail\"}").unwrap() >= 2.0);
    assert_eq!(
        value(&text, "rea_last_run_status{job=\"fail\",status=\"failed\"}"),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "rea_last_run_status{job=\"fail\",status=\"succeeded\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &text,
            "rea_last_run_status{job=\"tick\",status=\"succeeded\"}"
        ),
        Some(1.0)
    );
    assert_eq!(value(&text, "rea_last_exit_code{job=\"fail\"}"), Some(3.0));
    assert_eq!(value(&text, "rea_last_exit_code{job=\"tick\"}"), Some(0.0));
    // Paused and disabled jobs will not fire: no next-fire series.
    assert_eq!(value(&text, "rea_paused{job=\"later\"}"), Some(1.0));
    assert!(
        !text.contains("rea_next_fire_timestamp_seconds{job=\"later\"}"),
        "{text}"
    );
    assert!(
        !text.contains("rea_next_fire_timestamp_seconds{job=\"off\"}"),
        "{text}"
    );
    assert!(value(&text, "rea_next_fire_timestamp_seconds{job=\"tick\"}").is_some());
    promtool_accepts(&text);

    // Resumed: the next fire is back.
    env.rea(&["resume", "later"]).ok();
    let text = scrape(&addr);
    assert_eq!(value(&text, "rea_paused{job=\"later\"}"), Some(0.0));
    assert!(value(&text, "rea_next_fire_timestamp_seconds{job=\"later\"}").is_some());
}

#[test]
fn the_last_failure_survives_a_restart_while_the_job_still_fails() {
    let env = Env::new();
    env.jobs("[daemon]\nmetrics = \"127.0.0.1:0\"\n[jobs.yearly]\nschedule = \"@yearly\"\ncommand = \"exit 4\"\n");
    let d = env.daemon();
    env.rea(&["trigger", "yearly", "--wait"]).code(4);
    let before = value(
        &scrape(&endpoint(&d)),
        "rea_last_failure_timestamp_seconds{job=\"yearly\"}",
    )
    .expect("a last failure after the triggered run");
    assert_eq!(d.stop(), 0);

    let d = env.daemon();
    let text = scrape(&endpoint(&d));
    assert_eq!(
        value(&text, "rea_last_failure_timestamp_seconds{job=\"yearly\"}"),
        Some(before),
        "seeded from the history log:\n{text}"
    );
    assert_eq!(
        value(
            &text,
            "rea_last_run_status{job=\"yearly\",status=\"failed\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "rea_consecutive_failures{job=\"yearly\"}"),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "rea_last_exit_code{job=\"yearly\"}"),
        Some(4.0)
    );
}

#[test]
fn every_metric_is_documented_in_rea_metrics_7_and_the_readme() {
    let env = Env::new();
    env.jobs(ALERTING);
    let d = env.daemon();
    let text = scrape(&endpoint(&d));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("man/rea-metrics.7")).expect("man/rea-metrics.7");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    // Families without a series yet (no success so far) are not shown:
    // those are named here.
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() >= 15, "{names:?}");
    names.extend([
        "rea_last_success_timestamp_seconds",
        "rea_last_failure_timestamp_seconds",
        "rea_last_exit_code",
    ]);
    for name in names {
        assert!(
            page.contains(name),
            "man/rea-metrics.7 does not document {name}"
        );
        assert!(
            readme.contains(&format!("`{name}`")),
            "README.md does not list {name}"
        );
    }
}

/// The scrape config and alert rules shipped in `contrib/prometheus/` are
/// what Prometheus accepts (`promtool check config`, which checks the rule
/// file too), keep rea's `job` label (`honor_labels`), and name only series
/// a daemon serves (the cluster's: documented in rea-metrics(7)), so a
/// renamed metric cannot leave them silently dead.
#[test]
fn the_shipped_scrape_config_and_rules_are_valid_and_name_served_series() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus");
    let config = std::fs::read_to_string(dir.join("prometheus.yml")).expect("scrape config");
    assert!(config.contains("honor_labels: true"), "{config}");
    let rules = std::fs::read_to_string(dir.join("rea-rules.yml")).expect("rules");
    let mut named: Vec<&str> = rules
        .match_indices("rea_")
        .map(|(i, _)| {
            let rest = &rules[i..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    assert!(named.len() >= 6, "{named:?}");
    let env = Env::new();
    env.jobs(JOBS);
    let d = env.daemon();
    let addr = endpoint(&d);
    env.wait_until("a run of each job", || {
        !env.runs("tick", "succeeded").is_empty() && !env.runs("fail", "failed").is_empty()
    });
    let text = scrape(&addr);
    let man = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("man/rea-metrics.7"),
    )
    .expect("rea-metrics.7");
    for name in named {
        let served = text.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        });
        let cluster = name.starts_with("rea_cluster_") && man.contains(name);
        assert!(
            served || cluster,
            "{name} is in rea-rules.yml but not served:\n{text}"
        );
    }
    if !have("promtool") {
        eprintln!("SKIPPED: promtool is not installed: `promtool check config` not run (apt-get download prometheus, or run .ci/run)");
        return;
    }
    let out = Command::new("promtool")
        .args(["check", "config"])
        .arg(dir.join("prometheus.yml"))
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool check config:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
