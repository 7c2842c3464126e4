//! Webhooks and pings to an unreachable server against none, in the same
//! run of the benchmark, in halves ABBA so drifting load hits both alike:
//! the lateness of jobs due every second while every job's webhooks and
//! ping point at a listener that never accepts (each attempt waits out its
//! timeout; once its backlog is full, connections time out) and at a port
//! that refuses connections. The deliveries are sent by the daemon's
//! worker threads; the loop only queues them, so the lateness must not move.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::report::Figure;
use super::{daemon_parts, util, Settings};

/// Jobs due every second.
const JOBS: usize = 8;

pub(crate) fn webhooks(s: &Settings) -> Vec<Figure> {
    // Never accepts: a silent endpoint.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| util::die(e));
    let silent = silent
        .local_addr()
        .map(|a| (silent, a))
        .unwrap_or_else(|e| util::die(e));
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| util::die(e));
        l.local_addr().unwrap_or_else(|e| util::die(e))
    };
    let defaults = format!(
        "webhook = [{{ url = \"http://{}/hook\", on = [\"start\", \"end\"], timeout = \"2s\" }}, \
         {{ url = \"http://{refused}/hook\", on = [\"start\", \"end\"] }}]\n\
         ping = \"http://{refused}/ping\"\n",
        silent.1
    );
    let secs = s.precision_secs;
    let half = (secs / 2).max(1);
    eprintln!("webhooks: lateness, {JOBS} jobs every second, {secs} s with and {secs} s without webhooks to an unreachable server");
    let metrics_port = free_port();
    let daemon_with = format!("metrics = \"127.0.0.1:{metrics_port}\"\n");
    let mut scraped = String::new();
    let (mut off_late, mut off_started) = daemon_parts::precision_phase_with(JOBS, half, "");
    let (mut on_late, mut on_started) =
        daemon_parts::precision_phase_edit(JOBS, half, &daemon_with, &defaults, &mut || {
            scraped = scrape(metrics_port)
        });
    let mut last = String::new();
    let (late, started) =
        daemon_parts::precision_phase_edit(JOBS, half, &daemon_with, &defaults, &mut || {
            last = scrape(metrics_port)
        });
    on_late.extend(late);
    on_started.extend(started);
    let (late, started) = daemon_parts::precision_phase_with(JOBS, half, "");
    off_late.extend(late);
    off_started.extend(started);
    drop(silent);

    let p = |xs: &[f64], q: f64| util::percentile(xs, q);
    let (p99_on, p99_off) = (p(&on_late, 99.0), p(&off_late, 99.0));
    let moved = p99_on - p99_off;
    let mut out = vec![
        Figure::check(
            "webhooks",
            format!(
                "lateness p99, {JOBS} jobs every second, each with 2 webhooks (start and end) and a ping to an unreachable server (job's first clock read − scheduled)"
            ),
            format!("{p99_on:.2} ms ({moved:+.2} ms against no webhooks)"),
            "within +1 ms or +10% of no webhooks",
            (moved <= 1.0 || p99_on <= p99_off * 1.1) && !on_late.is_empty(),
        ),
        Figure::info(
            "webhooks",
            "  no webhooks, same phase length",
            format!("p99 {p99_off:.2} ms, median {:.2} ms", p(&off_late, 50.0)),
        ),
        Figure::info(
            "webhooks",
            "  median lateness with webhooks",
            format!("{:.2} ms", p(&on_late, 50.0)),
        ),
        Figure::info(
            "webhooks",
            "  the daemon's started − scheduled p99: with, without",
            format!(
                "{:.2} ms, {:.2} ms",
                p(&on_started, 99.0),
                p(&off_started, 99.0)
            ),
        ),
    ];
    for text in [&scraped, &last] {
        let get = |series: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(series))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        out.push(Figure::info(
            "webhooks",
            format!("  deliveries in one {half} s phase with webhooks (rea_webhook_*)"),
            format!(
                "{:.0} webhooks and {:.0} pings failed, {:.0} dropped (queue full), {:.0} retries, {:.0} queued at the end",
                get("rea_webhook_deliveries_total{kind=\"webhook\",result=\"failed\"}"),
                get("rea_webhook_deliveries_total{kind=\"ping\",result=\"failed\"}"),
                get("rea_webhook_dropped_total{tenant=\"system\"}"),
                get("rea_webhook_retries_total{kind=\"webhook\"}")
                    + get("rea_webhook_retries_total{kind=\"ping\"}"),
                get("rea_webhook_queued"),
            ),
        ));
    }
    out
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| util::die(e))
}

/// `GET /metrics` of the daemon's endpoint; empty if it does not answer.
fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}
