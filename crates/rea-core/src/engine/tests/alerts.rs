//! Alerts with an injected clock: each kind raised once and resolved once,
//! across a reload, and `late` for an occurrence the daemon was down for.

use super::*;
use crate::alert::{AlertEvent, AlertKind, AlertRules, AlertState, RunningOver};

fn with_alerts(mut j: Job, f: impl FnOnce(&mut AlertRules)) -> Job {
    f(&mut j.extras_mut().alert);
    j.settle();
    j
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// (kind, state) of each event, in order.
fn seen(alerts: &[AlertEvent]) -> Vec<(AlertKind, AlertState)> {
    alerts.iter().map(|a| (a.kind, a.state)).collect()
}

use AlertKind::*;
use AlertState::*;

#[test]
fn late_is_raised_once_while_paused_and_resolved_when_a_run_starts() {
    let j = with_alerts(job("p", "* * * * *"), |r| r.late = Some(secs(120)));
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:30Z"));
    sim.engine.pause(&["p".into()]);
    // Due at 00:01, deadline 00:03; paused for ten minutes, one alert.
    sim.run_until(at("2026-11-29T00:10:30Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised)]);
    let a = &sim.alerts[0];
    assert_eq!(
        a.at,
        at("2026-11-29T00:03:00Z"),
        "at its deadline, not polled"
    );
    assert_eq!(a.due, Some(at("2026-11-29T00:01:00Z")));
    assert!(a.reason.contains("paused"), "{}", a.reason);
    sim.engine.resume(&["p".into()]);
    sim.run_until(at("2026-11-29T00:11:30Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised), (Late, Resolved)]);
    assert!(
        sim.alerts[1].reason.contains("started 10m"),
        "{}",
        sim.alerts[1].reason
    );
    // On time from then on: nothing more.
    sim.run_until(at("2026-11-29T01:00:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(sim.alerts.len(), 2);
    let recs: Vec<Record> = sim.alerts.iter().map(AlertEvent::record).collect();
    assert_eq!(recs[0].event, Event::Alert);
    assert_eq!(recs[0].alert.unwrap().kind, Late);
}

#[test]
fn late_counts_a_run_skipped_for_overlap_and_a_run_waiting_for_a_slot() {
    let long = with_alerts(job("long", "0 * * * *"), |r| r.late = Some(secs(60)));
    let cfg = config(vec![long], 1);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    // Each run takes 90 minutes: the 02:00 occurrence is skipped.
    sim.run_until(at("2026-11-29T02:30:00Z"), chrono::Duration::minutes(90), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised)]);
    assert!(
        sim.alerts[0].reason.contains("still running"),
        "{}",
        sim.alerts[0].reason
    );
    sim.run_until(at("2026-11-29T03:00:00Z"), chrono::Duration::minutes(90), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised), (Late, Resolved)]);

    // A slot held by another job: the run waits.
    let a = job("hog", "0 * * * *");
    let b = with_alerts(job("b", "0 * * * *"), |r| r.late = Some(secs(60)));
    let cfg = config(vec![a, b], 1);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:05:00Z"), chrono::Duration::minutes(3), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised), (Late, Resolved)]);
    assert!(
        sim.alerts[0].reason.contains("free slot"),
        "{}",
        sim.alerts[0].reason
    );
}

#[test]
fn the_daemon_down_across_a_due_instant_is_late_at_start() {
    let j = with_alerts(job("d", "0 3 * * *"), |r| r.late = Some(secs(300)));
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let mut last = HashMap::new();
    last.insert("d".to_string(), at("2026-11-28T03:00:00Z"));
    let rec = Recovered {
        last_occurrences: last,
        ..Recovered::default()
    };
    // Down from before 03:00 until 04:00 (catch_up = none).
    let a = engine.start(at("2026-11-29T04:00:00Z"), rec);
    let alerts: Vec<&AlertEvent> = a
        .iter()
        .filter_map(|a| match a {
            Action::Alert(n) => Some(&n.event),
            _ => None,
        })
        .collect();
    assert_eq!(alerts.len(), 1, "{a:?}");
    assert_eq!(alerts[0].state, Raised);
    assert_eq!(alerts[0].due, Some(at("2026-11-29T03:00:00Z")));
    assert!(
        alerts[0].reason.contains("not running"),
        "{}",
        alerts[0].reason
    );

    // With catch_up = once, the catch-up run resolves it at once.
    let mut j = with_alerts(job("d", "0 3 * * *"), |r| r.late = Some(secs(300)));
    j.catch_up = CatchUp::Once;
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let mut last = HashMap::new();
    last.insert("d".to_string(), at("2026-11-28T03:00:00Z"));
    let a = engine.start(
        at("2026-11-29T04:00:00Z"),
        Recovered {
            last_occurrences: last,
            ..Recovered::default()
        },
    );
    let states: Vec<AlertState> = a
        .iter()
        .filter_map(|a| match a {
            Action::Alert(n) => Some(n.event.state),
            _ => None,
        })
        .collect();
    assert_eq!(states, [Raised, Resolved]);
    // Down for less than `late`: nothing, the catch-up started in time.
    let mut j = with_alerts(job("d", "0 3 * * *"), |r| r.late = Some(secs(300)));
    j.catch_up = CatchUp::Once;
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let mut last = HashMap::new();
    last.insert("d".to_string(), at("2026-11-28T03:00:00Z"));
    let a = engine.start(
        at("2026-11-29T03:02:00Z"),
        Recovered {
            last_occurrences: last,
            ..Recovered::default()
        },
    );
    assert!(!a.iter().any(|a| matches!(a, Action::Alert(_))));
}

#[test]
fn running_over_is_raised_while_the_run_runs_and_resolved_when_it_ends() {
    let j = with_alerts(job("r", "0 * * * *"), |r| {
        r.running_over = Some(RunningOver::Fixed(secs(600)))
    });
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:10:00Z"), chrono::Duration::minutes(25), 0);
    assert_eq!(seen(&sim.alerts), [(RunningOver, Raised)]);
    assert_eq!(sim.alerts[0].at, at("2026-11-29T01:10:00Z"));
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::minutes(25), 0);
    assert_eq!(
        seen(&sim.alerts),
        [(RunningOver, Raised), (RunningOver, Resolved)]
    );
    assert_eq!(sim.alerts[1].run, sim.alerts[0].run);
    // A short run arms and cancels its deadline: nothing.
    let j = with_alerts(job("r", "0 * * * *"), |r| {
        r.running_over = Some(RunningOver::Fixed(secs(600)))
    });
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T12:00:00Z"), chrono::Duration::minutes(1), 0);
    assert!(sim.alerts.is_empty());
}

#[test]
fn running_over_relative_to_p95_waits_for_five_durations() {
    let j = with_alerts(job("r", "0 * * * *"), |r| {
        r.running_over = Some(RunningOver::parse("3x p95").unwrap())
    });
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    // Five runs of 2 minutes: p95 = 2m, limit 6m.
    sim.run_until(at("2026-11-29T05:30:00Z"), chrono::Duration::minutes(2), 0);
    assert!(sim.alerts.is_empty());
    sim.run_until(at("2026-11-29T06:30:00Z"), chrono::Duration::minutes(10), 0);
    assert_eq!(
        seen(&sim.alerts),
        [(RunningOver, Raised), (RunningOver, Resolved)]
    );
    assert_eq!(sim.alerts[0].at, at("2026-11-29T06:06:00Z"));
    assert!(
        sim.alerts[0].reason.contains("3x p95 = 6m"),
        "{}",
        sim.alerts[0].reason
    );
}

#[test]
fn failures_are_raised_at_the_nth_in_a_row_and_resolved_by_a_success() {
    let j = with_alerts(job("f", "0 * * * *"), |r| r.failures = Some(2));
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 1);
    assert!(sim.alerts.is_empty(), "one failure");
    sim.run_until(at("2026-11-29T04:30:00Z"), chrono::Duration::seconds(1), 1);
    assert_eq!(seen(&sim.alerts), [(Failures, Raised)]);
    assert!(
        sim.alerts[0].reason.contains("2 consecutive failures"),
        "{}",
        sim.alerts[0].reason
    );
    assert!(sim.alerts[0].reason.contains("exit code 1"));
    sim.run_until(at("2026-11-29T06:30:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(
        seen(&sim.alerts),
        [(Failures, Raised), (Failures, Resolved)]
    );
}

#[test]
fn no_success_within_counts_from_start_and_is_resolved_by_a_success() {
    let j = with_alerts(job("n", "0 */6 * * *"), |r| {
        r.no_success_within = Some(secs(8 * 3600))
    });
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T12:00:00Z"), chrono::Duration::seconds(1), 1);
    assert_eq!(seen(&sim.alerts), [(NoSuccessWithin, Raised)]);
    assert_eq!(sim.alerts[0].at, at("2026-11-29T08:30:00Z"));
    sim.run_until(at("2026-11-29T13:00:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(
        seen(&sim.alerts),
        [(NoSuccessWithin, Raised), (NoSuccessWithin, Resolved)]
    );
    // Succeeding every 6h keeps it quiet, the deadline moving each time.
    sim.run_until(at("2026-12-02T00:00:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(sim.alerts.len(), 2);
}

#[test]
fn a_reload_keeps_raised_alerts_and_resolves_what_is_no_longer_armed() {
    let j = with_alerts(job("f", "0 * * * *"), |r| r.failures = Some(1));
    let cfg = config(vec![j.clone(), job("other", "0 * * * *")], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 1);
    assert_eq!(seen(&sim.alerts), [(Failures, Raised)]);
    // Unchanged job (another one changed): still raised, not raised again.
    let cfg2 = config(vec![j.clone(), job("other", "30 * * * *")], 8);
    let a = sim.engine.reload(&cfg2.plan(), sim.now);
    sim.apply(a);
    sim.run_until(at("2026-11-29T02:30:00Z"), chrono::Duration::seconds(1), 1);
    assert_eq!(seen(&sim.alerts), [(Failures, Raised)]);
    assert_eq!(sim.engine.alert_status()[0].raised, [Failures]);
    // Changed, still armed: kept.
    let mut changed = j.clone();
    changed.command = "false".into();
    let cfg3 = config(vec![changed.clone()], 8);
    let a = sim.engine.reload(&cfg3.plan(), sim.now);
    sim.apply(a);
    assert_eq!(seen(&sim.alerts), [(Failures, Raised)]);
    // The alert removed from the job: resolved, once.
    let mut unarmed = changed;
    unarmed.extras_mut().alert.failures = None;
    unarmed.settle();
    let cfg4 = config(vec![unarmed], 8);
    let a = sim.engine.reload(&cfg4.plan(), sim.now);
    sim.apply(a);
    assert_eq!(
        seen(&sim.alerts),
        [(Failures, Raised), (Failures, Resolved)]
    );
    assert!(sim.alerts[1].reason.contains("no longer set"));
    sim.run_until(at("2026-11-29T05:30:00Z"), chrono::Duration::seconds(1), 1);
    assert_eq!(sim.alerts.len(), 2);
}

#[test]
fn a_reload_keeps_a_late_watch_and_its_due_instant() {
    let j = with_alerts(job("p", "0 * * * *"), |r| r.late = Some(secs(600)));
    let cfg = config(vec![j.clone()], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.engine.pause(&["p".into()]);
    sim.run_until(at("2026-11-29T01:05:00Z"), chrono::Duration::seconds(1), 0);
    assert!(sim.alerts.is_empty());
    // Same job reloaded: the watch still fires at 01:10.
    let a = sim.engine.reload(&cfg.plan(), sim.now);
    sim.apply(a);
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(seen(&sim.alerts), [(Late, Raised)]);
    assert_eq!(sim.alerts[0].at, at("2026-11-29T01:10:00Z"));
    let st = sim.engine.alert_status();
    assert_eq!(st[0].overdue_since, Some(at("2026-11-29T01:00:00Z")));
    // The job leaves the file: resolved.
    let a = sim.engine.reload(&config(vec![], 8).plan(), sim.now);
    sim.apply(a);
    assert_eq!(seen(&sim.alerts), [(Late, Raised), (Late, Resolved)]);
}

#[test]
fn jobs_without_alerts_hold_no_alert_state() {
    let cfg = config(vec![job("a", "* * * * *")], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:30Z"));
    sim.run_until(at("2026-11-29T01:00:00Z"), chrono::Duration::seconds(1), 1);
    assert!(sim.alerts.is_empty());
    assert!(sim.engine.alert_status().is_empty());
    assert!(sim.engine.jobs.values().all(|s| s.alerts.is_none()));
}
