use super::*;
use chrono::TimeZone;
use ratatui::crossterm::event::KeyEvent;
use rea_proto::live::Counts;
use rea_proto::protocol::Ts;

pub(crate) fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 3, 12, 0, 0).unwrap()
}

fn key(c: char) -> KeyEvent {
    KeyEvent::from(KeyCode::Char(c))
}

fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::from(c)
}

pub(crate) fn summary(name: &str, outcomes: &str) -> JobSummary {
    JobSummary {
        name: name.into(),
        tenant: None,
        state: "idle".into(),
        paused: false,
        schedule: Some("*/5 * * * *".into()),
        timezone: None,
        tags: vec!["nightly".into()],
        next_fire: Some(Ts(now() + Duration::minutes(5))),
        retry_at: None,
        running: 0,
        queued: 0,
        after: Vec::new(),
        dependencies: Vec::new(),
        outcomes: outcomes.into(),
        consecutive_failures: outcomes.chars().rev().take_while(|c| *c == 'f').count() as u32,
        last_duration_ms: Some(1200),
        p50_ms: Some(1000),
        p95_ms: Some(3000),
        last_success: None,
        last_failure: None,
        last_run: None,
    }
}

fn page(names: &[&str], next: Option<&str>, matching: usize) -> JobsPage {
    JobsPage {
        jobs: names.iter().map(|n| summary(n, "ss")).collect(),
        matching,
        next: next.map(String::from),
    }
}

/// An app that has its first page: `rows` jobs named job0, job1, ...
fn loaded(rows: usize, next: Option<&str>) -> App {
    let mut app = App::new(true);
    let cmds = app.start();
    assert!(matches!(cmds[1], Command::Jobs { .. }));
    let names: Vec<String> = (0..rows).map(|i| format!("job{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let seq = app.jobs.seq;
    app.apply(
        Msg::Jobs {
            seq,
            append: false,
            page: Ok(page(&names, next, 100_000)),
        },
        now(),
    );
    app.view = View::Jobs;
    app
}

#[test]
fn number_keys_and_tab_switch_views_and_q_quits() {
    let mut app = App::new(false);
    app.key(key('3'), now());
    assert_eq!(app.view, View::Timeline);
    app.key(code(KeyCode::Tab), now());
    assert_eq!(app.view, View::Output);
    app.key(code(KeyCode::BackTab), now());
    app.key(code(KeyCode::BackTab), now());
    assert_eq!(app.view, View::Jobs);
    app.key(key('?'), now());
    assert!(app.help);
    // A key closes the help and does nothing else.
    app.key(key('1'), now());
    assert!(!app.help);
    assert_eq!(app.view, View::Jobs);
    assert_eq!(app.key(key('q'), now()), vec![Command::Quit]);
}

#[test]
fn every_action_is_confirmed_first() {
    let mut app = loaded(3, None);
    app.key(code(KeyCode::Down), now());
    assert!(app.key(key('p'), now()).is_empty());
    let pause = Action::Pause(Selector {
        jobs: vec!["job1".into()],
        ..Selector::default()
    });
    assert_eq!(app.prompt, Some(Prompt::Confirm(pause.clone())));
    // Anything but y gives up.
    assert!(app.key(key('n'), now()).is_empty());
    assert_eq!(app.prompt, None);
    app.key(key('p'), now());
    assert_eq!(app.key(key('y'), now()), vec![Command::Act(pause)]);

    app.key(key('t'), now());
    assert_eq!(
        app.key(key('y'), now()),
        vec![Command::Act(Action::Trigger("job1".into()))]
    );
    // A tag: asked for (the job's first tag offered), then confirmed.
    app.key(key('R'), now());
    assert_eq!(
        app.prompt,
        Some(Prompt::Input {
            purpose: Input::ResumeTag,
            text: "nightly".into()
        })
    );
    app.key(code(KeyCode::Enter), now());
    assert_eq!(
        app.key(key('y'), now()),
        vec![Command::Act(Action::Resume(Selector {
            tag: Some("nightly".into()),
            ..Selector::default()
        }))]
    );
    // Nothing runs: nothing to kill, and no question asked.
    app.key(key('x'), now());
    assert_eq!(app.prompt, None);
    assert!(app
        .message
        .as_ref()
        .is_some_and(|(m, bad)| *bad && m.contains("no run")));
    app.key(key('e'), now());
    assert_eq!(app.key(key('y'), now()), vec![Command::Act(Action::Edit)]);
}

#[test]
fn the_filter_and_the_sort_are_the_daemons() {
    let mut app = loaded(3, None);
    app.key(key('/'), now());
    for c in "tag:db state:running back".chars() {
        app.key(key(c), now());
    }
    let cmds = app.key(code(KeyCode::Enter), now());
    let [Command::Jobs { query, .. }] = cmds.as_slice() else {
        panic!("{cmds:?}")
    };
    assert_eq!(query.tag.as_deref(), Some("db"));
    assert_eq!(query.state.as_deref(), Some("running"));
    assert_eq!(query.text.as_deref(), Some("back"));
    assert_eq!(query.cursor, None);
    let cmds = app.key(key('s'), now());
    let [Command::Jobs { query, .. }] = cmds.as_slice() else {
        panic!("{cmds:?}")
    };
    assert_eq!(
        (query.sort, query.tag.as_deref()),
        (JobSort::Name, Some("db"))
    );
    let cmds = app.key(key('f'), now());
    assert!(matches!(&cmds[..], [Command::Jobs { query, .. }] if query.failing));
    // Esc drops every filter.
    let cmds = app.key(code(KeyCode::Esc), now());
    assert!(
        matches!(&cmds[..], [Command::Jobs { query, .. }] if *query == JobsQuery { limit: Some(PAGE), ..JobsQuery::default() })
    );
}

#[test]
fn pages_come_by_cursor_and_old_answers_are_dropped() {
    let mut app = loaded(40, Some("c40"));
    let mut asked = None;
    for _ in 0..12 {
        for c in app.key(code(KeyCode::Down), now()) {
            if let Command::Jobs { seq, query } = c {
                asked = Some((seq, query));
            }
        }
    }
    let (seq, query) = asked.expect("the next page is asked for near the end");
    assert_eq!(query.cursor.as_deref(), Some("c40"));
    // An answer to an older question is not shown.
    app.apply(
        Msg::Jobs {
            seq: seq - 1,
            append: true,
            page: Ok(page(&["stale"], None, 1)),
        },
        now(),
    );
    assert_eq!(app.jobs.rows.len(), 40);
    app.apply(
        Msg::Jobs {
            seq,
            append: true,
            page: Ok(page(&["job40", "job41"], None, 42)),
        },
        now(),
    );
    assert_eq!(app.jobs.rows.len(), 42);
    assert_eq!(app.jobs.next, None);
}

fn overview() -> Overview {
    serde_json::from_value(serde_json::json!({
        "daemon": {
            "running": true, "pid": 42, "version": "0.1.0",
            "started_at": "2026-12-03T11:00:00.000Z", "uptime_s": 3600,
            "file": "/etc/rea/jobs.toml", "state_dir": "/var/lib/rea",
            "last_reload": "2026-12-03T11:00:00.000Z", "config_error": null,
            "running_runs": 0, "max_concurrent": 4, "queued": 0,
            "oneshots_pending": 0,
            "history": {"backlog": 0, "dropped": 0, "last_error": null}
        },
        "counts": Counts::default(),
        "running": [],
        "failing": [],
        "next_due": [],
    }))
    .unwrap()
}

#[test]
fn events_change_the_views_without_asking_again() {
    let mut app = App::new(true);
    app.start();
    app.apply(Msg::Overview(Box::new(Ok(overview()))), now());
    app.apply(
        Msg::Event(Event::RunStarted {
            run: "r1".into(),
            job: "backup".into(),
            at: Ts(now()),
            node: None,
        }),
        now(),
    );
    let o = app.overview.as_ref().unwrap();
    assert_eq!(o.running.len(), 1);
    assert_eq!(app.live, Some(true));
    // The counts come again, once.
    assert_eq!(app.catch_up(), vec![Command::Overview]);
    assert_eq!(app.catch_up(), vec![]);
    app.apply(Msg::Overview(Box::new(Ok(overview()))), now());
    app.apply(
        Msg::Event(Event::RunStarted {
            run: "r1".into(),
            job: "backup".into(),
            at: Ts(now()),
            node: None,
        }),
        now(),
    );
    app.apply(
        Msg::Event(Event::RunEnded {
            run: "r1".into(),
            job: "backup".into(),
            status: "failed".into(),
            at: Ts(now()),
            duration_ms: 1500,
            exit_code: Some(3),
        }),
        now(),
    );
    assert!(app.overview.as_ref().unwrap().running.is_empty());
    let (m, bad) = app.message.clone().unwrap();
    assert!(bad);
    assert_eq!(m, "backup: run r1 failed (exit 3) after 1.5s");
    // Told it missed some: everything is asked again.
    let cmds = app.apply(Msg::Event(Event::Lost { events: 7 }), now());
    assert!(cmds.contains(&Command::Overview));
    assert!(cmds.iter().any(|c| matches!(c, Command::Jobs { .. })));
}

#[test]
fn a_summary_event_replaces_its_row() {
    let mut app = loaded(3, None);
    let mut s = summary("job2", "ssf");
    s.state = "paused".into();
    app.apply(
        Msg::Event(Event::Job {
            summary: Box::new(s.clone()),
        }),
        now(),
    );
    assert_eq!(app.jobs.rows[2], s);
}

#[test]
fn followed_output_is_kept_in_lines_and_made_safe() {
    let mut app = App::new(true);
    let id = app.new_follow("backup");
    let text = |t: &str| Msg::Output {
        follow: id,
        line: OutputLine::Text(t.into()),
    };
    app.apply(text("one\ntw"), now());
    app.apply(text("o\n\x1b]0;owned\x07three"), now());
    assert_eq!(app.output.lines, ["one", "two"]);
    assert_eq!(app.output.partial, "^[]0;owned^Gthree");
    // A follow that was replaced is not shown.
    app.apply(
        Msg::Output {
            follow: id - 1,
            line: OutputLine::Text("old\n".into()),
        },
        now(),
    );
    assert_eq!(app.output.lines.len(), 2);
}
