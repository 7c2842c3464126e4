//! The screens drawn at 80×24 into ratatui's `TestBackend`, read back as
//! text, as a terminal would show them.

use super::*;
use crate::app::tests::{now, summary};
use crate::app::{Msg, Prompt};
use chrono::TimeZone;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use rea_proto::live::{JobsPage, Overview, RunNow};
use rea_proto::protocol::Ts;

fn screen(app: &App, color: bool) -> (String, ratatui::buffer::Buffer) {
    let mut t = Terminal::new(TestBackend::new(80, 24)).unwrap();
    t.draw(|f| draw(f, app, Theme { color }, now())).unwrap();
    let buf = t.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            text.push_str(buf[(x, y)].symbol());
        }
        text.push('\n');
    }
    (text, buf)
}

fn overview() -> Overview {
    serde_json::from_value(serde_json::json!({
        "daemon": {
            "running": true, "pid": 42, "version": "0.1.0",
            "started_at": "2026-12-03T11:00:00.000Z", "uptime_s": 3600,
            "file": "/etc/rea/jobs.toml", "state_dir": "/var/lib/rea",
            "last_reload": "2026-12-03T11:00:00.000Z", "config_error": null,
            "running_runs": 1, "max_concurrent": 4, "queued": 0,
            "oneshots_pending": 2,
            "history": {"backlog": 0, "dropped": 0, "last_error": null}
        },
        "counts": {"jobs": 100000, "running": 1, "queued": 0, "paused": 3,
                   "disabled": 0, "failing": 1, "oneshots_pending": 2},
        "running": [],
        "failing": [],
        "next_due": [{"job": "rotate", "at": "2026-12-03T12:05:00.000Z"}],
    }))
    .unwrap()
}

fn app() -> App {
    let mut app = App::new(true);
    app.start();
    let mut o = overview();
    o.running.push(RunNow {
        run: "01abc".into(),
        job: "backup".into(),
        since: Some(Ts(now() - chrono::Duration::seconds(75))),
        pid: Some(7),
        cpu_ms: None,
        memory_peak_kb: None,
        node: None,
    });
    o.failing.push(summary("reports", "ssfff"));
    app.apply(Msg::Overview(Box::new(Ok(o))), now());
    let mut paris = summary("nightly-export", "sssssssssssssssssssf");
    paris.timezone = Some("Europe/Paris".into());
    paris.next_fire = Some(Ts(Utc.with_ymd_and_hms(2026, 12, 3, 23, 0, 0).unwrap()));
    let seq = app.jobs.seq;
    app.apply(
        Msg::Jobs {
            seq,
            append: false,
            page: Ok(JobsPage {
                jobs: vec![summary("backup", "sss"), paris],
                matching: 100_000,
                next: Some("c2".into()),
            }),
        },
        now(),
    );
    app
}

#[test]
fn the_overview_shows_counts_runs_failures_and_what_comes() {
    let (text, _) = screen(&app(), true);
    assert!(text.contains("1 Overview"), "{text}");
    assert!(
        text.contains("pid 42 up 1h · 100000 jobs · 1 running · 1 failing"),
        "{text}"
    );
    assert!(text.contains("failing 1  one-shots 2"), "{text}");
    assert!(
        text.contains("backup") && text.contains("1m15s") && text.contains("since 11:58:45"),
        "{text}"
    );
    assert!(text.contains("reports") && text.contains("3×"), "{text}");
    assert!(
        text.contains("rotate") && text.contains("12:05:00  in 5m"),
        "{text}"
    );
}

#[test]
fn the_job_table_shows_outcomes_trend_and_the_zone() {
    let mut a = app();
    a.view = View::Jobs;
    a.utc = false;
    let (text, buf) = screen(&a, true);
    assert!(text.contains("Jobs 1/100000 · sort file order"), "{text}");
    assert!(
        text.contains("NAME") && text.contains("OUTCOMES") && text.contains("P50/P95"),
        "{text}"
    );
    // 16 outcomes of 20, newest last; the trend; the fire in Paris.
    assert!(text.contains("▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁█"), "{text}");
    assert!(text.contains("1s/3s"), "{text}");
    assert!(text.contains("12-04 00:00 CET"), "{text}");
    // The selected row is reversed, colour or not.
    let row = text.lines().position(|l| l.starts_with("backup")).unwrap();
    assert!(buf[(0, row as u16)].modifier.contains(Modifier::REVERSED));
}

#[test]
fn no_color_means_no_colour_at_all() {
    let mut a = app();
    for view in View::ALL {
        a.view = view;
        let (_, buf) = screen(&a, false);
        for cell in buf.content() {
            assert_eq!(cell.fg, Color::Reset, "{view:?}: {cell:?}");
            assert_eq!(cell.bg, Color::Reset, "{view:?}: {cell:?}");
        }
    }
    let (_, buf) = screen(&app(), true);
    assert!(buf.content().iter().any(|c| c.fg == Color::Red));
}

#[test]
fn the_timeline_draws_runs_and_fires_on_one_axis() {
    let mut a = app();
    a.view = View::Timeline;
    let record: rea_core::record::Record = serde_json::from_value(serde_json::json!({
        "v": 1, "ts": "2026-12-03T11:00:05.000Z", "event": "run", "job": "reports",
        "run": "r0", "status": "failed", "started": "2026-12-03T10:50:00.000Z",
        "ended": "2026-12-03T11:00:05.000Z"
    }))
    .unwrap();
    a.timeline.since = Some(now() - chrono::Duration::hours(3));
    a.timeline.records = vec![record];
    let (text, _) = screen(&a, true);
    assert!(
        text.contains("Timeline: last 3h and the next 45m"),
        "{text}"
    );
    let line = |job: &str| {
        text.lines()
            .find(|l| l.starts_with(job))
            .unwrap_or_default()
            .to_string()
    };
    // Running now, up to the now mark.
    assert!(line("backup").contains('▒'), "{text}");
    assert!(line("reports").contains("XX"), "{text}");
    assert!(line("rotate").contains('◆'), "{text}");
}

#[test]
fn prompts_and_help_fit_the_screen() {
    let mut a = app();
    a.prompt = Some(Prompt::Confirm(crate::app::Action::Kill("01abc".into())));
    let (text, _) = screen(&a, true);
    assert!(
        text.lines()
            .nth(23)
            .unwrap()
            .starts_with("Kill 01abc (it ends as killed, no retry)? (y/n)"),
        "{text}"
    );
    a.prompt = None;
    a.help = true;
    let (text, _) = screen(&a, true);
    assert!(
        text.contains("rea top: keys") && text.contains("every job with a tag"),
        "{text}"
    );
}

#[test]
fn the_nodes_view_says_local_mode() {
    let mut a = app();
    a.view = View::Nodes;
    let (text, _) = screen(&a, true);
    assert!(text.contains("local mode"), "{text}");
}

#[test]
fn small_and_odd_terminals_draw_without_panicking() {
    let mut a = app();
    a.timeline.since = Some(now() - chrono::Duration::hours(3));
    for (w, h) in [(80, 24), (40, 10), (20, 5), (1, 1), (200, 3), (300, 80)] {
        for view in View::ALL {
            a.view = view;
            for help in [false, true] {
                a.help = help;
                let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
                t.draw(|f| draw(f, &a, Theme { color: true }, now()))
                    .unwrap();
            }
        }
    }
}
