//! Injected-clock tests of the engine: days of schedule, DST, clock steps,
//! overlap, concurrency, retries, catch-up and reloads, in milliseconds.
//! Alerts are `tests/alerts.rs`.

use super::*;
use crate::backoff::RetryPolicy;
use crate::run::{Output, Usage};
use crate::schedule::Schedule;
use crate::tenant::Tenant;

mod alerts;

/// A job with every field at its default (`Job::default`, the same
/// defaults the job file reader starts from), running `true`.
fn job(name: &str, expr: &str) -> Job {
    Job {
        name: name.to_string(),
        schedule: Some(Schedule::parse(expr).unwrap_or_else(|e| panic!("test job {name}: {e}"))),
        command: "true".to_string(),
        ..Job::default()
    }
}

/// What a job file would give the engine.
struct Jobs {
    jobs: Vec<Arc<Job>>,
    max_concurrent: usize,
}

impl Jobs {
    fn plan(&self) -> Plan<'_> {
        Plan {
            source: "jobs.toml".into(),
            jobs: &self.jobs,
            max_concurrent: self.max_concurrent,
            shares: ShareLimits::defaults(self.max_concurrent),
        }
    }
}

fn config(jobs: Vec<Job>, max_concurrent: usize) -> Jobs {
    Jobs {
        jobs: jobs.into_iter().map(Arc::new).collect(),
        max_concurrent,
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("test instant")
        .with_timezone(&Utc)
}

fn starts(actions: &[Action]) -> Vec<StartRun> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

fn records(actions: &[Action]) -> Vec<Record> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Record(r) => Some((**r).clone()),
            _ => None,
        })
        .collect()
}

fn outcome(pid: u32, started: DateTime<Utc>, ended: DateTime<Utc>, code: i32) -> Outcome {
    Outcome {
        started: Started { pid, at: started },
        ended,
        termination: Termination::Exited(code),
        timed_out: false,
        terminated: false,
        output: Output::default(),
        usage: Usage::default(),
    }
}

/// (run, job, scheduled, started, trigger)
type StartedRun = (String, String, DateTime<Utc>, DateTime<Utc>, Trigger);

/// A tiny simulated daemon: runs every Start for `run_for`, with `code`.
struct Sim {
    engine: Engine,
    now: DateTime<Utc>,
    /// (run, job, scheduled, started, trigger)
    started: Vec<StartedRun>,
    running: Vec<(String, DateTime<Utc>)>,
    records: Vec<Record>,
    max_seen_running: usize,
    /// Exit codes by job, over `run_until`'s own.
    codes: HashMap<String, i32>,
    /// Alert events, in order.
    alerts: Vec<crate::alert::AlertEvent>,
}

impl Sim {
    fn new(cfg: &Jobs, now: DateTime<Utc>) -> Sim {
        let mut engine = Engine::new(&cfg.plan(), 42);
        let actions = engine.start(now, Recovered::default());
        let mut sim = Sim {
            engine,
            now,
            started: vec![],
            running: vec![],
            records: vec![],
            max_seen_running: 0,
            codes: HashMap::new(),
            alerts: vec![],
        };
        sim.apply(actions);
        sim
    }

    fn apply(&mut self, actions: Vec<Action>) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(a) = queue.pop_front() {
            match a {
                Action::Start(s) => {
                    self.started.push((
                        s.run.clone(),
                        s.name.clone(),
                        s.scheduled,
                        self.now,
                        s.trigger,
                    ));
                    self.running.push((s.run.clone(), self.now));
                    self.max_seen_running = self.max_seen_running.max(self.running.len());
                    let more = self.engine.spawned(
                        &s.run,
                        Ok(Started {
                            pid: 100,
                            at: self.now,
                        }),
                        self.now,
                    );
                    queue.extend(more);
                }
                Action::Record(r) => self.records.push(*r),
                Action::Alert(a) => self.alerts.push(a.event),
                // Hooks take no time here.
                Action::StartHooks { id, .. } => queue.extend(self.engine.hooks_done(id, self.now)),
                Action::Claim(c) => panic!("local mode never claims: {c:?}"),
                Action::Terminate { .. } | Action::OneShotDone { .. } | Action::AfterRun(_) => {}
            }
        }
    }

    /// Advances to `until`, finishing each run `run_for` after it started
    /// with exit `code`.
    fn run_until(&mut self, until: DateTime<Utc>, run_for: chrono::Duration, code: i32) {
        loop {
            let next_finish = self.running.iter().map(|(_, s)| *s + run_for).min();
            let next_wake = self.engine.next_wake();
            let next = [next_finish, next_wake].into_iter().flatten().min();
            let Some(next) = next.filter(|n| *n <= until) else {
                break;
            };
            self.now = next.max(self.now);
            if next_finish == Some(next) {
                let idx = self
                    .running
                    .iter()
                    .position(|(_, s)| *s + run_for == next)
                    .expect("finishing run");
                let (run, started) = self.running.remove(idx);
                let code = self
                    .started
                    .iter()
                    .find(|s| s.0 == run)
                    .and_then(|s| self.codes.get(&s.1))
                    .copied()
                    .unwrap_or(code);
                let actions =
                    self.engine
                        .finished(&run, &outcome(100, started, self.now, code), self.now);
                self.apply(actions);
            } else {
                let actions = self.engine.wake(self.now, false);
                self.apply(actions);
            }
        }
        self.now = until.max(self.now);
    }

    fn starts_of(&self, name: &str) -> Vec<DateTime<Utc>> {
        self.started
            .iter()
            .filter(|s| s.1 == name)
            .map(|s| s.3)
            .collect()
    }
}

#[test]
fn fires_at_each_instant_over_a_day() {
    let cfg = config(vec![job("q", "*/15 * * * *")], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:00Z"));
    sim.run_until(at("2026-11-30T00:00:00Z"), chrono::Duration::seconds(1), 0);
    let s = sim.starts_of("q");
    assert_eq!(
        s.len(),
        96,
        "every 15 minutes for a day, the first at 00:15"
    );
    assert_eq!(s[0], at("2026-11-29T00:15:00Z"));
    assert_eq!(*s.last().unwrap(), at("2026-11-30T00:00:00Z"));
    let finals = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Succeeded))
        .count();
    assert_eq!(finals, 95, "the midnight run is still running at the end");
}

#[test]
fn dst_spring_forward_fixed_job_runs_once_after_the_gap() {
    let mut j = job("ny", "30 2 * * *");
    j.timezone = chrono_tz::America::New_York;
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-03-07T00:00:00Z"));
    sim.run_until(at("2026-03-10T00:00:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(
        sim.starts_of("ny"),
        vec![
            at("2026-03-07T07:30:00Z"),
            at("2026-03-08T07:00:00Z"),
            at("2026-03-09T06:30:00Z")
        ]
    );
}

#[test]
fn overlap_skip_records_a_skipped_run() {
    let cfg = config(vec![job("slow", "* * * * *")], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:00Z"));
    sim.run_until(
        at("2026-11-29T00:04:30Z"),
        chrono::Duration::seconds(150),
        0,
    );
    // Starts at :01, :04 (the :02 and :03 occurrences fall inside the first run).
    assert_eq!(
        sim.starts_of("slow"),
        vec![at("2026-11-29T00:01:00Z"), at("2026-11-29T00:04:00Z")]
    );
    let skipped: Vec<_> = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Skipped))
        .collect();
    assert_eq!(skipped.len(), 2);
    assert!(skipped[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("overlap = \"skip\""));
    assert_eq!(skipped[0].scheduled, Some(at("2026-11-29T00:02:00Z")));
}

#[test]
fn overlap_queue_keeps_at_most_one_waiting() {
    let mut j = job("q", "* * * * *");
    j.overlap = Overlap::Queue;
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:00Z"));
    sim.run_until(
        at("2026-11-29T00:04:30Z"),
        chrono::Duration::seconds(150),
        0,
    );
    // :01 runs to 03:30; :02 queued, :03 skipped (queue full); :02's run starts at 03:30.
    assert_eq!(
        sim.starts_of("q"),
        vec![at("2026-11-29T00:01:00Z"), at("2026-11-29T00:03:30Z")]
    );
    let skipped: Vec<_> = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Skipped))
        .collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].scheduled, Some(at("2026-11-29T00:03:00Z")));
    assert!(skipped[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("already queued"));
    let second = &sim.started[1];
    assert_eq!(
        second.2,
        at("2026-11-29T00:02:00Z"),
        "the queued run serves the :02 occurrence"
    );
}

#[test]
fn overlap_allow_runs_side_by_side() {
    let mut j = job("a", "* * * * *");
    j.overlap = Overlap::Allow;
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:00Z"));
    sim.run_until(
        at("2026-11-29T00:03:00Z"),
        chrono::Duration::seconds(150),
        0,
    );
    assert_eq!(sim.starts_of("a").len(), 3);
    assert_eq!(
        sim.max_seen_running, 3,
        "01 runs until 03:30, 02 and 03 join it"
    );
}

/// `rea kill`: the run is terminated once (a second kill is not a second
/// Terminate), ends as killed by operator, and is not retried.
#[test]
fn an_operators_kill_terminates_once_and_is_not_retried() {
    let mut j = job("hung", "0 * * * *");
    j.retry = RetryPolicy {
        attempts: 3,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(25),
        factor: 2.0,
        jitter: 0.0,
    };
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(at("2026-11-29T00:30:00Z"), Recovered::default());
    let t1 = at("2026-11-29T01:00:00Z");
    let first = starts(&engine.wake(t1, false)).pop().expect("a run");
    engine.spawned(&first.run, Ok(Started { pid: 10, at: t1 }), t1);
    let listed = engine.runs_in_progress();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].source.name(),
            listed[0].source.oneshot().is_some()
        ),
        ("hung", false)
    );
    let t2 = at("2026-11-29T01:05:00Z");
    let (killing, acts) = engine.kill_runs(&[first.run.clone(), "nope".into()], t2);
    assert_eq!(killing, vec![first.run.clone()]);
    assert!(matches!(&acts[..], [Action::Terminate { run }] if *run == first.run));
    let (again, acts) = engine.kill_runs(std::slice::from_ref(&first.run), t2);
    assert_eq!(again, vec![first.run.clone()]);
    assert!(acts.is_empty(), "already being stopped: {acts:?}");
    let mut o = outcome(10, t1, t2, -1);
    o.terminated = true;
    o.termination = Termination::Signaled(15);
    let recs = records(&engine.finished(&first.run, &o, t2));
    assert_eq!(recs[0].status, Some(RunStatus::Killed));
    assert_eq!(recs[0].reason.as_deref(), Some("killed by operator"));
    assert!(recs[0].retry_at().is_none());
    let later = engine.wake(at("2026-11-29T01:05:30Z"), false);
    assert!(starts(&later).is_empty(), "no retry: {later:?}");
}

#[test]
fn an_out_of_memory_end_is_its_own_failure_and_is_retried() {
    let mut j = job("hog", "0 * * * *");
    j.retry = RetryPolicy {
        attempts: 1,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(10),
        factor: 1.0,
        jitter: 0.0,
    };
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(at("2026-11-29T00:30:00Z"), Recovered::default());
    let t1 = at("2026-11-29T01:00:00Z");
    let first = starts(&engine.wake(t1, false)).pop().expect("a run");
    engine.spawned(&first.run, Ok(Started { pid: 10, at: t1 }), t1);
    // The leader was the OOM killer's victim: SIGKILL, oom_kill 1.
    let t2 = at("2026-11-29T01:00:02Z");
    let mut o = outcome(10, t1, t2, -1);
    o.termination = Termination::Signaled(9);
    o.usage.oom_killed = true;
    let recs = records(&engine.finished(&first.run, &o, t2));
    assert_eq!(recs[0].status, Some(RunStatus::OomKilled));
    assert_eq!(recs[0].oom_killed, Some(true));
    assert_eq!(recs[0].signal, Some(9));
    let retry_at = recs[0].retry_at().expect("retried like a failure");
    assert_eq!(retry_at, at("2026-11-29T01:00:12Z"));
    assert_eq!(
        engine.job_status("hog").map(|s| s.consecutive_failures),
        Some(1)
    );

    // The retry's child was killed but the command coped and exited 0:
    // a success, whose record still says a process ran out of memory.
    let second = starts(&engine.wake(retry_at, false))
        .pop()
        .expect("the retry");
    engine.spawned(
        &second.run,
        Ok(Started {
            pid: 11,
            at: retry_at,
        }),
        retry_at,
    );
    let t3 = at("2026-11-29T01:00:13Z");
    let mut o = outcome(11, retry_at, t3, 0);
    o.usage.oom_killed = true;
    let recs = records(&engine.finished(&second.run, &o, t3));
    assert_eq!(recs[0].status, Some(RunStatus::Succeeded));
    assert_eq!(recs[0].oom_killed, Some(true));

    // An operator's kill says why the run ended, whatever else happened;
    // an OOM kill is said before a timeout.
    for (hour, terminated, timed_out, status) in [
        ("02", true, false, RunStatus::Killed),
        ("03", false, true, RunStatus::OomKilled),
    ] {
        let t = at(&format!("2026-11-29T{hour}:00:00Z"));
        let run = starts(&engine.wake(t, false)).pop().expect("a run");
        engine.spawned(&run.run, Ok(Started { pid: 12, at: t }), t);
        if terminated {
            engine.kill_runs(std::slice::from_ref(&run.run), t);
        }
        let mut o = outcome(12, t, t, -1);
        o.termination = Termination::Signaled(9);
        o.usage.oom_killed = true;
        o.terminated = terminated;
        o.timed_out = timed_out;
        let recs = records(&engine.finished(&run.run, &o, t));
        assert_eq!(recs[0].status, Some(status));
    }
}

#[test]
fn overlap_replace_terminates_then_starts() {
    let mut j = job("r", "* * * * *");
    j.overlap = Overlap::Replace;
    let cfg = config(vec![j], 8);
    let now = at("2026-11-29T00:00:30Z");
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(now, Recovered::default());
    let t1 = at("2026-11-29T00:01:00Z");
    let a = engine.wake(t1, false);
    let first = starts(&a).pop().expect("first run");
    engine.spawned(&first.run, Ok(Started { pid: 10, at: t1 }), t1);
    let t2 = at("2026-11-29T00:02:00Z");
    let a = engine.wake(t2, false);
    assert!(
        starts(&a).is_empty(),
        "must not overlap while the old run dies"
    );
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::Terminate { run } if *run == first.run)));
    let mut o = outcome(10, t1, t2, -1);
    o.terminated = true;
    o.termination = Termination::Signaled(15);
    let a = engine.finished(&first.run, &o, t2);
    let recs = records(&a);
    assert_eq!(recs[0].status, Some(RunStatus::Killed));
    assert!(recs[0].reason.as_deref().unwrap().contains("replaced"));
    let second = starts(&a);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].scheduled, t2);
}

#[test]
fn the_global_limit_is_never_exceeded_and_queues_in_due_order() {
    let jobs: Vec<Job> = (0..10)
        .map(|i| job(&format!("j{i}"), "0 * * * *"))
        .collect();
    let cfg = config(jobs, 3);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:10:00Z"), chrono::Duration::seconds(60), 0);
    assert_eq!(sim.started.len(), 10);
    assert_eq!(sim.max_seen_running, 3);
    let order: Vec<_> = sim.started.iter().map(|s| s.1.clone()).collect();
    assert_eq!(order, (0..10).map(|i| format!("j{i}")).collect::<Vec<_>>());
    // The last three waited three minutes for a slot; it is recorded.
    let waited: Vec<u64> = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Started))
        .map(|r| r.waited_ms.unwrap())
        .collect();
    assert_eq!(waited.iter().filter(|w| **w == 180_000).count(), 1);
    assert_eq!(waited.iter().filter(|w| **w == 0).count(), 3);
}

/// `extract` every hour with two retries, and three jobs after it: on
/// success (a plain name), on failure, always.
fn pipeline() -> Jobs {
    let mut extract = job("extract", "0 * * * *");
    extract.retry = RetryPolicy {
        attempts: 2,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(10),
        factor: 1.0,
        jitter: 0.0,
    };
    let after = |name: &str, on: crate::job::On| {
        let mut j = job(name, "@hourly");
        j.schedule = None;
        j.after = vec![crate::job::Dependency {
            job: "extract".into(),
            on,
        }];
        j
    };
    config(
        vec![
            extract,
            after("report", crate::job::On::Success),
            after("cleanup", crate::job::On::Failure),
            after("audit", crate::job::On::Always),
        ],
        8,
    )
}

#[test]
fn on_failure_dependents_run_once_after_the_last_attempt() {
    let cfg = pipeline();
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.codes.insert("extract".into(), 1);
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 0);
    // 01:00:00 fails at :01, retried at :11 (fails at :12), at :22 (fails
    // at :23): only then, once, do the failure and always dependents run.
    assert_eq!(sim.starts_of("extract").len(), 3);
    assert_eq!(sim.starts_of("cleanup"), vec![at("2026-11-29T01:00:23Z")]);
    assert_eq!(sim.starts_of("audit"), vec![at("2026-11-29T01:00:23Z")]);
    assert!(sim.starts_of("report").is_empty());
    assert!(sim
        .started
        .iter()
        .filter(|s| s.1 != "extract")
        .all(|s| s.4 == Trigger::Dependency));
}

#[test]
fn on_success_and_always_dependents_run_after_a_success_and_failure_ones_do_not() {
    let cfg = pipeline();
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T02:30:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(
        sim.starts_of("report"),
        vec![at("2026-11-29T01:00:01Z"), at("2026-11-29T02:00:01Z")]
    );
    assert_eq!(sim.starts_of("audit"), sim.starts_of("report"));
    assert!(sim.starts_of("cleanup").is_empty());
}

#[test]
fn a_killed_run_starts_only_always_dependents_and_a_skipped_one_nothing() {
    let mut cfg = pipeline();
    let mut extract = (*cfg.jobs[0]).clone();
    extract.retry = RetryPolicy::default();
    cfg.jobs[0] = Arc::new(extract);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:59:59Z"));
    sim.run_until(at("2026-11-29T01:00:00Z"), chrono::Duration::hours(2), 0);
    let (run, started) = sim.running[0].clone();
    // The next occurrence finds it running: skipped, and nothing follows.
    sim.run_until(at("2026-11-29T02:00:00Z"), chrono::Duration::hours(2), 0);
    assert!(sim
        .records
        .iter()
        .any(|r| r.status == Some(RunStatus::Skipped)));
    assert_eq!(sim.started.len(), 1);
    let mut o = outcome(100, started, sim.now, -1);
    o.terminated = true;
    sim.running.clear();
    let actions = sim.engine.finished(&run, &o, sim.now);
    sim.apply(actions);
    let names: Vec<_> = sim.started.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(names, vec!["extract", "audit"]);
}

#[test]
fn a_join_waits_for_each_entry_on_its_own_condition() {
    let mut a = job("a", "0 * * * *");
    a.command = "false".into();
    let b = job("b", "0 * * * *");
    let mut join = job("join", "@hourly");
    join.schedule = None;
    join.after = vec![
        crate::job::Dependency {
            job: "a".into(),
            on: crate::job::On::Failure,
        },
        crate::job::Dependency {
            job: "b".into(),
            on: crate::job::On::Success,
        },
    ];
    let cfg = config(vec![a, b, join], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.codes.insert("a".into(), 1);
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(sim.starts_of("join"), vec![at("2026-11-29T01:00:01Z")]);
    // b failing next hour: a's failure alone does not start the join.
    sim.codes.insert("b".into(), 1);
    sim.run_until(at("2026-11-29T02:30:00Z"), chrono::Duration::seconds(1), 0);
    assert_eq!(sim.starts_of("join").len(), 1);
}

#[test]
fn failures_retry_with_backoff_until_exhausted() {
    let mut j = job("flaky", "0 * * * *");
    j.retry = RetryPolicy {
        attempts: 3,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(25),
        factor: 2.0,
        jitter: 0.0,
    };
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:30:00Z"));
    sim.run_until(at("2026-11-29T01:30:00Z"), chrono::Duration::seconds(1), 1);
    let s = sim.starts_of("flaky");
    // 01:00:00 fails at :01 → +10s → 01:00:11 fails at :12 → +20s → :32 → +25s (cap) → :58
    assert_eq!(
        s,
        vec![
            at("2026-11-29T01:00:00Z"),
            at("2026-11-29T01:00:11Z"),
            at("2026-11-29T01:00:32Z"),
            at("2026-11-29T01:00:58Z"),
        ]
    );
    let triggers: Vec<_> = sim.started.iter().map(|s| s.4).collect();
    assert_eq!(
        triggers,
        vec![
            Trigger::Schedule,
            Trigger::Retry,
            Trigger::Retry,
            Trigger::Retry
        ]
    );
    let attempts: Vec<_> = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Failed))
        .map(|r| r.attempt.unwrap())
        .collect();
    assert_eq!(attempts, vec![1, 2, 3, 4]);
    let last = sim
        .records
        .iter()
        .rev()
        .find(|r| r.status == Some(RunStatus::Failed))
        .unwrap();
    assert_eq!(last.detail.as_ref().unwrap()["retries_exhausted"], true);
    // Every retry serves the original occurrence.
    assert!(sim
        .started
        .iter()
        .all(|s| s.2 == at("2026-11-29T01:00:00Z")));
}

#[test]
fn fifty_jobs_failing_together_do_not_retry_in_lockstep() {
    let jobs: Vec<Job> = (0..50)
        .map(|i| {
            let mut j = job(&format!("j{i}"), "0 * * * *");
            j.retry = RetryPolicy {
                attempts: 1,
                delay: Duration::from_secs(60),
                jitter: 0.5,
                ..RetryPolicy::default()
            };
            j
        })
        .collect();
    let cfg = config(jobs, 64);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:59:00Z"));
    sim.run_until(at("2026-11-29T01:05:00Z"), chrono::Duration::seconds(1), 1);
    let retries: Vec<_> = sim
        .started
        .iter()
        .filter(|s| s.4 == Trigger::Retry)
        .map(|s| s.3)
        .collect();
    assert_eq!(retries.len(), 50);
    let distinct: std::collections::BTreeSet<_> = retries.iter().map(|t| t.timestamp()).collect();
    assert!(
        distinct.len() >= 25,
        "retries must spread, got {} distinct seconds",
        distinct.len()
    );
    let lo = at("2026-11-29T01:00:31Z");
    let hi = at("2026-11-29T01:01:31Z");
    assert!(
        retries.iter().all(|t| *t >= lo && *t <= hi),
        "all within delay ± 50%"
    );
}

#[test]
fn a_fresh_occurrence_supersedes_a_pending_retry() {
    let mut j = job("sync", "*/5 * * * *");
    j.retry = RetryPolicy {
        attempts: 5,
        delay: Duration::from_secs(600),
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:30Z"));
    sim.run_until(at("2026-11-29T00:20:30Z"), chrono::Duration::seconds(1), 1);
    let triggers: Vec<_> = sim.started.iter().map(|s| s.4).collect();
    assert!(
        triggers.iter().all(|t| *t == Trigger::Schedule),
        "retries 10 minutes out never beat the next 5-minute run"
    );
    assert_eq!(sim.started.len(), 4);
}

#[test]
fn catch_up_policies_after_downtime() {
    let now = at("2026-11-29T10:00:30Z");
    let mut rec = Recovered::default();
    for name in ["none", "once", "all"] {
        rec.last_occurrences
            .insert(name.to_string(), at("2026-11-29T06:00:00Z"));
    }
    let mut none = job("none", "0 * * * *");
    none.catch_up = CatchUp::None;
    let mut once = job("once", "0 * * * *");
    once.catch_up = CatchUp::Once;
    let mut all = job("all", "0 * * * *");
    all.catch_up = CatchUp::All;
    all.catch_up_limit = 3;
    let cfg = config(vec![none, once, all], 8);
    let mut engine = Engine::new(&cfg.plan(), 3);
    let actions = engine.start(now, rec);
    let recs = records(&actions);
    let s = starts(&actions);
    // none: 07,08,09,10 missed; nothing runs.
    let missed_none = recs
        .iter()
        .find(|r| r.event == Event::Missed && r.job.as_deref() == Some("none"))
        .unwrap();
    assert_eq!(missed_none.count, Some(4));
    assert!(s.iter().all(|x| x.name != "none"));
    // once: one catch-up run for the latest missed occurrence.
    let once_runs: Vec<_> = s.iter().filter(|x| x.name == "once").collect();
    assert_eq!(once_runs.len(), 1);
    assert_eq!(once_runs[0].trigger, Trigger::CatchUp);
    assert_eq!(once_runs[0].scheduled, at("2026-11-29T10:00:00Z"));
    // all: limit 3 → 08, 09, 10 run one after another; 07 recorded missed.
    let all_runs: Vec<_> = s.iter().filter(|x| x.name == "all").collect();
    assert_eq!(
        all_runs.len(),
        1,
        "catch-up runs of one job go one at a time"
    );
    assert_eq!(all_runs[0].scheduled, at("2026-11-29T08:00:00Z"));
    let missed_all = recs
        .iter()
        .find(|r| r.event == Event::Missed && r.job.as_deref() == Some("all"))
        .unwrap();
    assert_eq!(missed_all.count, Some(1));
    let run = all_runs[0].run.clone();
    engine.spawned(&run, Ok(Started { pid: 1, at: now }), now);
    let t = now + chrono::Duration::seconds(5);
    let next = starts(&engine.finished(&run, &outcome(1, now, t, 0), t));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].scheduled, at("2026-11-29T09:00:00Z"));
    // Nothing is missed twice: the next regular fire is 11:00.
    assert_eq!(
        engine.job_status("none").unwrap().next_fire,
        Some(at("2026-11-29T11:00:00Z"))
    );
}

#[test]
fn forward_clock_step_applies_catch_up_and_backward_never_repeats() {
    let mut once = job("once", "*/10 * * * *");
    once.catch_up = CatchUp::Once;
    let none = job("none", "*/10 * * * *");
    let cfg = config(vec![once, none], 8);
    let mut engine = Engine::new(&cfg.plan(), 9);
    let t0 = at("2026-11-29T00:01:00Z");
    engine.start(t0, Recovered::default());
    // The clock jumps from 00:01 to 01:05: 00:10 … 01:00 were skipped over.
    let t1 = at("2026-11-29T01:05:00Z");
    let a = engine.wake(t1, true);
    let s = starts(&a);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].name.as_str(), s[0].trigger),
        ("once", Trigger::CatchUp)
    );
    let missed = records(&a)
        .into_iter()
        .filter(|r| r.event == Event::Missed)
        .collect::<Vec<_>>();
    assert_eq!(missed.iter().map(|r| r.count.unwrap()).sum::<u64>(), 6 + 5);
    assert_eq!(
        engine.job_status("none").unwrap().next_fire,
        Some(at("2026-11-29T01:10:00Z"))
    );
    // Fire 01:10, then the clock steps back to 00:30: 01:10 must not run again.
    let t2 = at("2026-11-29T01:10:00Z");
    let a = engine.wake(t2, false);
    assert_eq!(
        starts(&a).len(),
        1,
        "only `none` is idle (the catch-up run of `once` is still running)"
    );
    let back = at("2026-11-29T00:30:00Z");
    let a = engine.wake(back, true);
    assert!(starts(&a).is_empty());
    assert_eq!(
        engine.job_status("none").unwrap().next_fire,
        Some(at("2026-11-29T01:20:00Z"))
    );
    assert!(engine
        .wake(at("2026-11-29T01:10:00Z"), false)
        .iter()
        .all(|a| !matches!(a, Action::Start(_))));
}

#[test]
fn reload_keeps_unchanged_reschedules_changed_and_cancels_removed() {
    let cfg = config(
        vec![
            job("keep", "0 * * * *"),
            job("change", "0 * * * *"),
            job("drop", "0 * * * *"),
        ],
        8,
    );
    let now = at("2026-11-29T00:10:00Z");
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(now, Recovered::default());
    let new = config(
        vec![
            job("keep", "0 * * * *"),
            job("change", "30 * * * *"),
            job("add", "*/5 * * * *"),
        ],
        8,
    );
    let a = engine.reload(&new.plan(), now);
    let rec = records(&a)
        .into_iter()
        .find(|r| r.event == Event::ConfigLoaded)
        .unwrap();
    let d = rec.detail.unwrap();
    assert_eq!(
        (
            d["added"].as_u64(),
            d["changed"].as_u64(),
            d["removed"].as_u64(),
            d["unchanged"].as_u64()
        ),
        (Some(1), Some(1), Some(1), Some(1))
    );
    assert_eq!(
        engine.job_status("keep").unwrap().next_fire,
        Some(at("2026-11-29T01:00:00Z"))
    );
    assert_eq!(
        engine.job_status("change").unwrap().next_fire,
        Some(at("2026-11-29T00:30:00Z"))
    );
    assert_eq!(
        engine.job_status("add").unwrap().next_fire,
        Some(at("2026-11-29T00:15:00Z"))
    );
    assert!(engine.job_status("drop").is_none());
    let names: Vec<_> = engine.status().into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["keep", "change", "add"]);
}

/// A reload keeps the pauses of the jobs still listed and forgets those of
/// jobs that left; a job removed while it runs and listed again comes back
/// with its run still counted (one copy, not two).
#[test]
fn reload_keeps_pauses_of_listed_jobs_and_a_job_listed_again_keeps_its_run() {
    let cfg = config(vec![job("a", "* * * * *"), job("b", "* * * * *")], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    engine.pause(&["a".into(), "b".into()]);
    let (r, _) = engine.trigger("b", false, &Values::new(), at("2026-11-29T00:00:40Z"));
    assert!(matches!(r, TriggerResult::Started { .. }));
    let only_a = config(vec![job("a", "* * * * *")], 8);
    engine.reload(&only_a.plan(), at("2026-11-29T00:00:41Z"));
    assert_eq!(engine.paused().iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        engine.job_status("b").unwrap().next_fire,
        None,
        "b left the file"
    );
    let both = config(vec![job("a", "* * * * *"), job("b", "* * * * *")], 8);
    let a = engine.reload(&both.plan(), at("2026-11-29T00:00:42Z"));
    let d = records(&a)
        .into_iter()
        .find(|r| r.event == Event::ConfigLoaded)
        .unwrap()
        .detail
        .unwrap();
    assert_eq!(
        (d["added"].as_u64(), d["unchanged"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(engine.paused().iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        engine.job_status("b").unwrap().running.len(),
        1,
        "its run still counts"
    );
}

/// After a reload the engine holds the new plan's copy of an unchanged job,
/// so the old configuration is freed with its last owner.
#[test]
fn reload_holds_the_new_plans_copy_of_an_unchanged_job() {
    let cfg = config(vec![job("keep", "0 * * * *")], 8);
    let now = at("2026-11-29T00:10:00Z");
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(now, Recovered::default());
    let new = config(vec![job("keep", "0 * * * *")], 8);
    engine.reload(&new.plan(), now);
    drop(cfg);
    assert_eq!(
        Arc::strong_count(&new.jobs[0]),
        2,
        "the plan's and the engine's"
    );
    assert_eq!(
        engine.job_status("keep").unwrap().next_fire,
        Some(at("2026-11-29T01:00:00Z"))
    );
}

#[test]
fn a_job_due_in_the_same_instant_as_a_reload_runs_exactly_once() {
    let cfg = config(vec![job("x", "0 * * * *")], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:59:00Z"), Recovered::default());
    let due = at("2026-11-29T01:00:00Z");
    let mut changed = job("x", "0 * * * *");
    changed.command = "echo changed".into();
    let a = engine.reload(&config(vec![changed], 8).plan(), due);
    let s = starts(&a);
    assert_eq!(s.len(), 1, "fired by the reload's own advance");
    assert_eq!(
        s[0].def.job().unwrap().command,
        "true",
        "a run already due belongs to the old definition"
    );
    assert!(
        starts(&engine.wake(due, false)).is_empty(),
        "and never twice"
    );
    assert_eq!(
        engine.job_status("x").unwrap().next_fire,
        Some(at("2026-11-29T02:00:00Z"))
    );
}

#[test]
fn paused_jobs_are_skipped_by_the_schedule_but_can_be_triggered() {
    let cfg = config(vec![job("p", "* * * * *")], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    assert_eq!(
        engine.pause(&["p".into(), "nope".into()]),
        vec!["p".to_string()]
    );
    let a = engine.wake(at("2026-11-29T00:01:00Z"), false);
    assert!(starts(&a).is_empty());
    assert!(records(&a)[0].reason.as_deref().unwrap().contains("paused"));
    let (r, a) = engine.trigger("p", false, &Values::new(), at("2026-11-29T00:01:10Z"));
    assert!(matches!(r, TriggerResult::Started { .. }));
    assert_eq!(starts(&a)[0].trigger, Trigger::Manual);
    let (r, _) = engine.trigger("q", false, &Values::new(), at("2026-11-29T00:01:10Z"));
    assert_eq!(
        r,
        TriggerResult::UnknownJob {
            suggestions: vec![]
        }
    );
    let (r, _) = engine.trigger("p", false, &Values::new(), at("2026-11-29T00:01:11Z"));
    assert!(
        matches!(r, TriggerResult::Skipped { .. }),
        "overlap skip applies to triggers"
    );
    let (r, _) = engine.trigger("p", true, &Values::new(), at("2026-11-29T00:01:12Z"));
    assert!(
        matches!(r, TriggerResult::Started { .. }),
        "--force bypasses overlap"
    );
    assert_eq!(engine.resume(&["p".into()]), vec!["p".to_string()]);
}

#[test]
fn triggers_stop_queueing_at_the_bound() {
    let cfg = config(vec![job("t", "0 0 1 1 *")], 1);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let now = at("2026-11-29T00:00:30Z");
    engine.start(now, Recovered::default());
    let (r, _) = engine.trigger("t", true, &Values::new(), now);
    assert!(matches!(r, TriggerResult::Started { .. }));
    for _ in 0..MAX_WAITING_TRIGGERS {
        let (r, _) = engine.trigger("t", true, &Values::new(), now);
        assert!(matches!(r, TriggerResult::Queued { .. }), "{r:?}");
    }
    let (r, a) = engine.trigger("t", true, &Values::new(), now);
    match r {
        TriggerResult::Skipped { reason } => {
            assert!(
                reason.starts_with("50000 runs already wait to start"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(starts(&a).is_empty());
}

#[test]
fn a_run_waiting_for_a_slot_is_found_by_its_id_until_it_starts() {
    let cfg = config(vec![job("a", "0 0 1 1 *"), job("b", "0 0 1 1 *")], 1);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let now = at("2026-11-29T00:00:30Z");
    engine.start(now, Recovered::default());
    let (first, _) = engine.trigger("a", true, &Values::new(), now);
    let TriggerResult::Started { run: first } = first else {
        panic!("{first:?}")
    };
    let (second, _) = engine.trigger("b", true, &Values::new(), now);
    let TriggerResult::Queued { run: second } = second else {
        panic!("{second:?}")
    };
    assert_eq!(engine.queued_run(&second).map(|s| s.name()), Some("b"));
    assert!(
        engine.queued_run(&first).is_none(),
        "a running run is not waiting"
    );
    assert!(engine.queued_run("no-such-run").is_none());
}

#[test]
fn reboot_jobs_run_at_start_only() {
    let cfg = config(vec![job("boot", "@reboot")], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    let now = at("2026-11-29T00:00:00Z");
    let a = engine.start(now, Recovered::default());
    assert_eq!(starts(&a)[0].trigger, Trigger::Reboot);
    assert!(starts(&engine.reload(&cfg.plan(), now)).is_empty());
    assert_eq!(engine.next_wake(), None, "nothing else is ever due");
}

#[test]
fn unfinished_runs_become_interrupted_at_start() {
    let cfg = config(vec![job("x", "0 * * * *")], 8);
    let mut started = Record::new(Event::Run, at("2026-11-29T00:00:00Z"));
    started.job = Some("x".into());
    started.run = Some("r1".into());
    started.status = Some(RunStatus::Started);
    let rec = Recovered {
        unfinished: vec![started],
        ..Recovered::default()
    };
    let mut engine = Engine::new(&cfg.plan(), 5);
    let a = engine.start(at("2026-11-29T00:10:00Z"), rec);
    let r = records(&a)
        .into_iter()
        .find(|r| r.status == Some(RunStatus::Interrupted))
        .unwrap();
    assert_eq!(r.run.as_deref(), Some("r1"));
}

#[test]
fn shutdown_stops_starting_and_terminates_on_request() {
    let cfg = config(vec![job("a", "* * * * *"), job("b", "* * * * *")], 1);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    let t = at("2026-11-29T00:01:00Z");
    let a = engine.wake(t, false);
    let s = starts(&a);
    assert_eq!(s.len(), 1);
    engine.spawned(&s[0].run, Ok(Started { pid: 1, at: t }), t);
    assert!(engine.shutdown().is_empty(), "no hooks were waiting");
    assert_eq!(engine.queued(), 0);
    let term = engine.terminate_all();
    assert_eq!(term.len(), 1);
    let mut o = outcome(1, t, t, -1);
    o.terminated = true;
    let a = engine.finished(&s[0].run, &o, t);
    assert!(starts(&a).is_empty());
    assert_eq!(records(&a)[0].reason.as_deref(), Some("daemon shutdown"));
    assert!(starts(&engine.wake(at("2026-11-29T00:05:00Z"), false)).is_empty());
}

#[test]
fn jitter_delays_within_its_bound_and_is_recorded() {
    let mut j = job("j", "0 * * * *");
    j.jitter = Duration::from_secs(30);
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:30Z"));
    sim.run_until(at("2026-11-29T10:00:30Z"), chrono::Duration::seconds(1), 0);
    let s = sim.started.clone();
    assert_eq!(s.len(), 10);
    for (_, _, scheduled, started, _) in &s {
        let d = *started - *scheduled;
        assert!(
            d >= chrono::Duration::zero() && d <= chrono::Duration::seconds(30),
            "{d}"
        );
    }
    let delays: std::collections::BTreeSet<_> =
        s.iter().map(|x| (x.3 - x.2).num_milliseconds()).collect();
    assert!(delays.len() > 5, "jitter varies");
    let rec = sim
        .records
        .iter()
        .find(|r| r.status == Some(RunStatus::Started))
        .unwrap();
    assert!(rec.jitter_ms.is_some());
}

#[test]
fn a_stalled_daemon_fires_the_first_due_and_counts_the_rest_missed() {
    let cfg = config(vec![job("m", "* * * * *")], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    let a = engine.wake(at("2026-11-29T00:10:10Z"), false);
    let s = starts(&a);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].scheduled, at("2026-11-29T00:01:00Z"));
    let m = records(&a)
        .into_iter()
        .find(|r| r.event == Event::Missed)
        .unwrap();
    assert_eq!(m.count, Some(9));
    assert_eq!(
        engine.job_status("m").unwrap().next_fire,
        Some(at("2026-11-29T00:11:00Z"))
    );
}

#[test]
fn run_ids_are_unique_and_sort_by_time() {
    let a = run_id(at("2026-11-29T00:00:00Z"), 1, None);
    let b = run_id(at("2026-11-29T00:00:00.001Z"), 0, None);
    assert_eq!(a.len(), 14);
    assert!(a < b);
    assert_ne!(
        run_id(at("2026-11-29T00:00:00Z"), 1, None),
        run_id(at("2026-11-29T00:00:00Z"), 2, None)
    );
}

/// In cluster mode two nodes never make the same id, whatever their
/// counters: the node's name (unique in the cluster) ends it.
#[test]
fn cluster_run_ids_name_their_node() {
    let t = at("2026-11-29T00:00:00Z");
    let a = run_id(t, 7, Some("web-1"));
    assert_eq!(a, format!("{}-web-1", run_id(t, 7, None)));
    assert_ne!(a, run_id(t, 7, Some("web-2")));
    let jobs = config(vec![job("x", "* * * * *")], 1);
    let mut e = Engine::new(&jobs.plan(), 1);
    e.set_run_id_node("b");
    assert!(e.new_id(t).ends_with("-b"));
}

fn shot(id: &str, due: &str) -> crate::oneshot::OneShot {
    crate::oneshot::OneShot {
        id: id.into(),
        argv: vec!["true".into()].into(),
        shell: false,
        dir: std::path::Path::new("/").into(),
        due: at(due),
        submitted: at("2026-11-29T00:00:00Z"),
        rare: None,
    }
}

#[test]
fn one_shots_fire_at_their_instant_and_are_then_done() {
    let cfg = config(vec![job("j", "@yearly")], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    assert!(engine
        .submit(shot("o", "2026-11-29T00:30:00Z"), now)
        .unwrap()
        .is_empty());
    assert_eq!(
        engine
            .submit(shot("o", "2026-11-29T00:30:00Z"), now)
            .unwrap_err(),
        SubmitError::Duplicate("a one-shot named \"o\" is already pending".into())
    );
    assert!(matches!(
        engine.submit(shot("j", "2026-11-29T00:30:00Z"), now),
        Err(SubmitError::NameTaken(_))
    ));
    assert_eq!(engine.next_wake(), Some(at("2026-11-29T00:30:00Z")));
    let t = at("2026-11-29T00:30:00Z");
    let a = engine.wake(t, false);
    let s = starts(&a);
    assert_eq!((s[0].name.as_str(), s[0].trigger), ("o", Trigger::Oneshot));
    engine.spawned(&s[0].run, Ok(Started { pid: 1, at: t }), t);
    let a = engine.finished(&s[0].run, &outcome(1, t, t, 0), t);
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::OneShotDone { id } if id == "o")));
    assert_eq!(engine.oneshot_count(), 0);
}

#[test]
fn restored_one_shots_catch_up_or_expire() {
    let cfg = config(vec![], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    let now = at("2026-11-29T01:00:00Z");
    engine.start(now, Recovered::default());
    let mut stale = shot("stale", "2026-11-29T00:00:00Z");
    stale.rare_mut().expire_ms = Some(60_000);
    let a = engine.restore(
        vec![
            shot("late", "2026-11-29T00:00:00Z"),
            stale,
            shot("future", "2026-11-29T02:00:00Z"),
        ],
        now,
    );
    let s = starts(&a);
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].name.as_str(), s[0].trigger),
        ("late", Trigger::CatchUp)
    );
    let r = records(&a);
    assert!(r
        .iter()
        .any(|r| r.job.as_deref() == Some("stale") && r.status == Some(RunStatus::Skipped)));
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::OneShotDone { id } if id == "stale")));
    assert_eq!(engine.oneshot_count(), 2);
}

#[test]
fn cancel_removes_a_pending_one_shot_and_refuses_a_running_one_without_kill() {
    let cfg = config(vec![], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    engine
        .submit(shot("p", "2026-11-29T05:00:00Z"), now)
        .unwrap();
    engine
        .submit(shot("r", "2026-11-29T00:00:00Z"), now)
        .unwrap();
    let (res, a) = engine.cancel_oneshot("p", false, now).unwrap();
    assert_eq!(res, CancelResult::Cancelled);
    assert_eq!(records(&a)[0].status, Some(RunStatus::Cancelled));
    assert_eq!(engine.next_wake(), None, "its heap entry is gone");
    assert!(matches!(
        engine.cancel_oneshot("r", false, now),
        Err(SubmitError::Running(_))
    ));
    let (res, a) = engine.cancel_oneshot("r", true, now).unwrap();
    assert_eq!(res, CancelResult::Killing);
    assert!(a.iter().any(|x| matches!(x, Action::Terminate { .. })));
    assert!(matches!(
        engine.cancel_oneshot("zz", false, now),
        Err(SubmitError::Unknown(_))
    ));
}

#[test]
fn the_first_pending_one_shots_are_the_earliest_of_the_tag() {
    let cfg = config(vec![], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    for i in 0..200 {
        let mut s = shot(
            &format!("s{i:03}"),
            &format!("2026-11-30T{:02}:{:02}:00Z", (i * 7) % 24, i % 60),
        );
        if i % 3 == 0 {
            s.rare_mut().tags = vec!["orders".into()];
        }
        engine.submit(s, now).unwrap();
    }
    let ids = |v: Vec<OneShotStatus>| v.into_iter().map(|s| s.def.id.clone()).collect::<Vec<_>>();
    let all = ids(engine.oneshots());
    assert_eq!(ids(engine.oneshots_first(None, usize::MAX)), all);
    assert_eq!(ids(engine.oneshots_first(None, 5)), all[..5]);
    assert!(engine.oneshots_first(None, 0).is_empty());
    let tagged: Vec<Box<str>> = engine
        .oneshots()
        .into_iter()
        .filter(|s| s.def.rare().tags.iter().any(|t| t == "orders"))
        .map(|s| s.def.id.clone())
        .take(10)
        .collect();
    assert_eq!(ids(engine.oneshots_first(Some("orders"), 10)), tagged);
}

#[test]
fn a_paused_job_catches_up_nothing_after_a_stall() {
    let mut j = job("p", "* * * * *");
    j.catch_up = CatchUp::All;
    let cfg = config(vec![j], 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    engine.pause(&["p".into()]);
    let a = engine.wake(at("2026-11-29T00:05:10Z"), false);
    assert!(starts(&a).is_empty(), "paused: no catch-up runs");
    let m = records(&a)
        .into_iter()
        .find(|r| r.event == Event::Missed)
        .unwrap();
    assert_eq!(m.count, Some(4));
}

#[test]
fn hooks_hold_a_slot_until_done_and_go_before_waiting_runs() {
    let mut hooked = job("h", "* * * * *");
    hooked.extras_mut().on_success = Some("notify".to_string());
    hooked.extras_mut().mailto = vec!["ops@example.com".to_string()];
    hooked.extras_mut().mail_on = crate::job::MailOn::Always;
    let cfg = config(vec![hooked, job("other", "* * * * *")], 2);
    let t0 = at("2026-11-29T00:00:00Z");
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(t0, Recovered::default());
    let t1 = at("2026-11-29T00:01:00Z");
    let first = starts(&engine.wake(t1, false));
    assert_eq!(first.len(), 2, "both jobs start in the two slots");
    for s in &first {
        engine.spawned(&s.run, Ok(Started { pid: 1, at: t1 }), t1);
    }
    let h = first.iter().find(|s| s.name == "h").expect("h started");
    let done = engine.finished(&h.run, &outcome(1, t1, t1, 0), t1);
    // Mail at once; the hook takes the freed slot.
    let mail: Vec<&AfterRun> = done
        .iter()
        .filter_map(|a| match a {
            Action::AfterRun(a) => Some(a.as_ref()),
            _ => None,
        })
        .collect();
    assert!(mail.len() == 1 && mail[0].mail && mail[0].hooks.is_empty());
    let hook_id = done
        .iter()
        .find_map(|a| match a {
            Action::StartHooks { id, after } => {
                assert_eq!(after.hooks, vec![(Hook::Success, "notify".to_string())]);
                assert!(!after.mail);
                Some(*id)
            }
            _ => None,
        })
        .expect("the hook starts in the freed slot");
    assert_eq!((engine.running(), engine.hooks_running()), (1, 1));
    // The next minute both jobs are due; the hook holds one slot.
    let t2 = at("2026-11-29T00:02:00Z");
    let other = first.iter().find(|s| s.name == "other").expect("other");
    let t15 = at("2026-11-29T00:01:30Z");
    assert!(starts(&engine.finished(&other.run, &outcome(1, t1, t15, 0), t15)).is_empty());
    let next = engine.wake(t2, false);
    assert_eq!(starts(&next).len(), 1, "one slot is free: {next:?}");
    assert_eq!(engine.queued(), 1, "the other run waits behind the hook");
    let freed = engine.hooks_done(hook_id, t2);
    assert_eq!(
        starts(&freed).len(),
        1,
        "the hook's slot goes to the waiting run"
    );
    assert!(
        engine.hooks_done(hook_id, t2).is_empty(),
        "done twice frees nothing"
    );
    assert!(!engine.idle());
}

#[test]
fn hooks_of_runs_ending_while_stopping_are_handed_back_not_started() {
    let mut hooked = job("h", "* * * * *");
    hooked.extras_mut().on_failure = Some("page".to_string());
    let cfg = config(vec![hooked], 2);
    let t0 = at("2026-11-29T00:00:00Z");
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(t0, Recovered::default());
    let t1 = at("2026-11-29T00:01:00Z");
    let s = starts(&engine.wake(t1, false));
    engine.spawned(&s[0].run, Ok(Started { pid: 1, at: t1 }), t1);
    assert!(engine.shutdown().is_empty(), "nothing was waiting");
    let done = engine.finished(&s[0].run, &outcome(1, t1, t1, 1), t1);
    assert!(!done.iter().any(|a| matches!(a, Action::StartHooks { .. })));
    let back: Vec<&AfterRun> = done
        .iter()
        .filter_map(|a| match a {
            Action::AfterRun(a) => Some(a.as_ref()),
            _ => None,
        })
        .collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].hooks, vec![(Hook::Failure, "page".to_string())]);
    assert!(engine.idle());
}

// ---- cluster mode ------------------------------------------------------------

fn claims(actions: &[Action]) -> Vec<ClaimRequest> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claim(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn cluster_engine(cfg: &Jobs, now: DateTime<Utc>) -> (Engine, Vec<Action>) {
    let mut engine = Engine::new(&cfg.plan(), 42);
    engine.set_decisions(Decisions::Store);
    let actions = engine.start(now, Recovered::default());
    (engine, actions)
}

fn grant(n: i64) -> ClaimOutcome {
    ClaimOutcome::Started {
        grant: Grant {
            run_id: n,
            fence: 1000 + n,
        },
        prev_scheduled: None,
    }
}

#[test]
fn cluster_occurrences_are_claimed_and_started_only_when_granted() {
    let cfg = config(vec![job("q", "* * * * *")], 8);
    let t0 = at("2026-11-29T00:00:30Z");
    let (mut e, acts) = cluster_engine(&cfg, t0);
    assert!(claims(&acts).is_empty() && starts(&acts).is_empty());
    let due = at("2026-11-29T00:01:00Z");
    let acts = e.wake(due, false);
    assert!(
        starts(&acts).is_empty(),
        "nothing starts before the store answers"
    );
    let c = claims(&acts);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].job.as_str(), c[0].scheduled, c[0].trigger, c[0].mode),
        ("q", due, Trigger::Schedule, ClaimMode::Run)
    );
    assert_eq!(e.claims_in_flight(), 1);
    let acts = e.claimed(&c[0].run, grant(7), due);
    let s = starts(&acts);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].run, c[0].run);
    assert_eq!(
        s[0].grant,
        Some(Grant {
            run_id: 7,
            fence: 1007
        })
    );
    let acts = e.spawned(&s[0].run, Ok(Started { pid: 9, at: due }), due);
    let r = records(&acts);
    assert_eq!(r[0].status, Some(RunStatus::Started));
    assert_eq!((r[0].cluster_run, r[0].fence), (Some(7), Some(1007)));
    assert_eq!(e.claims_in_flight(), 0);
}

#[test]
fn cluster_lost_queued_and_skipped_claims_start_nothing() {
    let cfg = config(vec![job("q", "* * * * *")], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    for (minute, outcome) in [
        (1, ClaimOutcome::Lost),
        (2, ClaimOutcome::Queued),
        (
            3,
            ClaimOutcome::Skipped {
                reason: "the job is paused (rea resume to resume)".into(),
            },
        ),
    ] {
        let now = at("2026-11-29T00:00:00Z") + chrono::Duration::minutes(minute);
        let c = claims(&e.wake(now, false));
        let acts = e.claimed(&c[0].run, outcome.clone(), now);
        assert!(starts(&acts).is_empty(), "{outcome:?} starts nothing");
        let r = records(&acts);
        match outcome {
            ClaimOutcome::Skipped { reason } => {
                assert_eq!(r.len(), 1);
                assert_eq!(r[0].status, Some(RunStatus::Skipped));
                assert_eq!(r[0].reason.as_deref(), Some(reason.as_str()));
            }
            _ => assert!(r.is_empty(), "{outcome:?} records nothing here: {r:?}"),
        }
    }
    assert_eq!(e.running(), 0);
}

#[test]
fn cluster_overlap_is_decided_by_the_store_not_locally() {
    let mut j = job("q", "* * * * *");
    j.overlap = Overlap::Skip;
    let cfg = config(vec![j], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let t1 = at("2026-11-29T00:01:00Z");
    let c = claims(&e.wake(t1, false));
    let s = starts(&e.claimed(&c[0].run, grant(1), t1));
    e.spawned(&s[0].run, Ok(Started { pid: 1, at: t1 }), t1);
    // Still running at the next occurrence: local mode would record a skip;
    // cluster mode asks the store (which sees every node's runs).
    let t2 = at("2026-11-29T00:02:00Z");
    let acts = e.wake(t2, false);
    assert!(records(&acts).is_empty());
    let c = claims(&acts);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].overlap, Overlap::Skip);
    // An `allow` answer from the store starts it alongside.
    let s = starts(&e.claimed(&c[0].run, grant(2), t2));
    assert_eq!(s.len(), 1);
    assert_eq!(e.running(), 2);
}

#[test]
fn cluster_without_a_lease_nothing_starts_and_the_newest_is_caught_up_once() {
    let mut once = job("once", "* * * * *");
    once.catch_up = CatchUp::Once;
    let none = job("none", "* * * * *");
    let cfg = config(vec![once, none], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    for minute in 1..=3 {
        let now = at("2026-11-29T00:00:00Z") + chrono::Duration::minutes(minute);
        let acts = e.wake(now, false);
        for c in claims(&acts) {
            let acts = e.claimed(&c.run, ClaimOutcome::NoLease, now);
            assert!(starts(&acts).is_empty() && records(&acts).is_empty());
        }
    }
    assert_eq!(e.unclaimed().len(), 2);
    let back = at("2026-11-29T00:03:10Z");
    let c = claims(&e.cluster_back(back));
    assert_eq!(c.len(), 2, "one claim per job: {c:?}");
    let newest = at("2026-11-29T00:03:00Z");
    for claim in &c {
        assert_eq!((claim.scheduled, claim.trigger), (newest, Trigger::CatchUp));
        let mode = if claim.job == "once" {
            ClaimMode::Run
        } else {
            ClaimMode::Missed
        };
        assert_eq!(claim.mode, mode, "{}", claim.job);
    }
    assert!(claims(&e.cluster_back(back)).is_empty(), "only once");
    let once_claim = c.iter().find(|c| c.job == "once").unwrap();
    let s = starts(&e.claimed(&once_claim.run, grant(3), back));
    assert_eq!(s[0].trigger, Trigger::CatchUp);
    let none_claim = c.iter().find(|c| c.job == "none").unwrap();
    let r = records(&e.claimed(&none_claim.run, ClaimOutcome::Missed, back));
    assert_eq!(r[0].event, Event::Missed);
}

/// #24: after an outage `catch_up = "all"` claims each occurrence up to
/// its limit, one after the other, the older ones as one missed claim
/// with their true count; `none` records the true count too.
#[test]
fn cluster_catch_up_all_after_an_outage_claims_each_in_turn_with_true_counts() {
    let mut all = job("all", "* * * * *");
    all.catch_up = CatchUp::All;
    all.catch_up_limit = 3;
    let none = job("none", "* * * * *");
    let cfg = config(vec![all, none], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let minute = |m: i64| at("2026-11-29T00:00:00Z") + chrono::Duration::minutes(m);
    for m in 1..=5 {
        for c in claims(&e.wake(minute(m), false)) {
            e.claimed(&c.run, ClaimOutcome::NoLease, minute(m));
        }
    }
    assert_eq!(e.unclaimed()["all"], (minute(1), minute(5)));
    let back = minute(5) + chrono::Duration::seconds(10);
    let c = claims(&e.cluster_back(back));
    let shown: Vec<_> = c
        .iter()
        .map(|c| (c.job.as_str(), c.scheduled, c.mode, c.count))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("all", minute(2), ClaimMode::Missed, 2),
            ("all", minute(3), ClaimMode::Run, 1),
            ("none", minute(5), ClaimMode::Missed, 5),
        ],
        "the first of the three to run, then one at a time"
    );
    e.claimed(&c[0].run, ClaimOutcome::Missed, back);
    let r = records(&e.claimed(&c[2].run, ClaimOutcome::Missed, back));
    assert_eq!(r[0].count, Some(5), "the true count");
    let s = starts(&e.claimed(&c[1].run, grant(1), back));
    assert_eq!(s.len(), 1);
    e.spawned(&s[0].run, Ok(Started { pid: 1, at: back }), back);
    // An occurrence due meanwhile waits behind the caught-up ones (claimed
    // now, it would move the store's mark past them).
    let due = claims(&e.wake(minute(6), false));
    assert_eq!(
        due.iter().map(|c| c.job.as_str()).collect::<Vec<_>>(),
        ["none"]
    );
    // The run ends: the next is claimed; the store skips that one: the
    // next is claimed at once.
    let end = minute(6) + chrono::Duration::seconds(1);
    let next = claims(&e.finished(&s[0].run, &outcome(1, back, end, 0), end));
    assert_eq!(next.len(), 1);
    assert_eq!(
        (next[0].scheduled, next[0].trigger),
        (minute(4), Trigger::CatchUp)
    );
    let skipped = ClaimOutcome::Skipped {
        reason: "the job is paused (rea resume to resume)".into(),
    };
    let last = claims(&e.claimed(&next[0].run, skipped, end));
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].scheduled, minute(5));
    let s = starts(&e.claimed(&last[0].run, grant(2), end));
    e.spawned(&s[0].run, Ok(Started { pid: 2, at: end }), end);
    let due = claims(&e.finished(&s[0].run, &outcome(2, end, end, 0), end));
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].scheduled, minute(6), "then the one that waited");
    let s = starts(&e.claimed(&due[0].run, grant(3), end));
    e.spawned(&s[0].run, Ok(Started { pid: 3, at: end }), end);
    assert!(
        claims(&e.finished(&s[0].run, &outcome(3, end, end, 0), end)).is_empty(),
        "all decided"
    );
    let next = claims(&e.wake(minute(7), false));
    assert!(
        next.iter()
            .any(|c| c.job == "all" && c.trigger == Trigger::Schedule),
        "the schedule goes on"
    );
}

/// An occurrence the store finds in its clock's future (this node's clock
/// ahead) is not waited for: it is put back in the heap for its instant,
/// the engine goes on, and it is claimed once more then, once.
#[test]
fn cluster_an_early_claim_is_requeued_for_its_instant() {
    let cfg = config(vec![job("q", "* * * * *")], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let due = at("2026-11-29T00:01:00Z");
    let c = claims(&e.wake(due, false));
    // The store's clock reads 00:00:58: two seconds early.
    let asked = at("2026-11-29T00:00:58Z");
    let acts = e.claimed(&c[0].run, ClaimOutcome::Early, asked);
    assert!(starts(&acts).is_empty() && records(&acts).is_empty());
    assert_eq!(e.claims_in_flight(), 0);
    assert_eq!(e.next_wake(), Some(due), "back in the heap at its instant");
    assert!(claims(&e.wake(asked, false)).is_empty());
    let again = claims(&e.wake(due, false));
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].scheduled, again[0].trigger),
        (due, Trigger::Schedule)
    );
    assert_ne!(again[0].run, c[0].run);
    let s = starts(&e.claimed(&again[0].run, grant(1), due));
    assert_eq!(s.len(), 1);
    // Then the schedule goes on from it.
    assert_eq!(e.next_wake(), Some(at("2026-11-29T00:02:00Z")));
    // Asked again while the store's clock is still behind: not before a
    // short wait, never in a loop.
    let t3 = at("2026-11-29T00:03:00Z");
    let c = claims(&e.wake(t3, false));
    e.claimed(&c[0].run, ClaimOutcome::Early, t3);
    assert_eq!(
        e.next_wake(),
        Some(t3 + chrono::Duration::milliseconds(100))
    );
}

/// The engine's clock was 30 s ahead (the node's machine), then corrected
/// back to the store's: what it planned and parked on the wrong clock is
/// planned again from the corrected time, but an occurrence the store may
/// have granted (up to `settled` ahead) is never asked again.
#[test]
fn cluster_a_clock_set_back_replans_from_the_corrected_time() {
    let mut j = job("s", "@every 10s");
    j.catch_up = CatchUp::Once;
    let cfg = config(vec![j], 8);
    // The machine says 00:00:35; the store 00:00:05.
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:35Z"));
    let skewed = at("2026-11-29T00:00:40Z");
    for c in claims(&e.wake(skewed, false)) {
        e.claimed(&c.run, ClaimOutcome::NoLease, skewed);
    }
    assert_eq!(e.unclaimed().len(), 1);
    let now = at("2026-11-29T00:00:05Z");
    let settled = Duration::from_secs(2);
    let acts = e.clock_set_back(now, settled);
    assert!(claims(&acts).is_empty());
    assert!(e.unclaimed().is_empty(), "parked in the future: forgotten");
    assert_eq!(e.next_wake(), Some(at("2026-11-29T00:00:10Z")));
    let c = claims(&e.wake(at("2026-11-29T00:00:10Z"), false));
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].scheduled, at("2026-11-29T00:00:10Z"));
    e.claimed(&c[0].run, grant(1), at("2026-11-29T00:00:10Z"));
    // Set back again by less than `settled`: the granted occurrence is not
    // asked again.
    let acts = e.clock_set_back(at("2026-11-29T00:00:09Z"), settled);
    assert!(claims(&acts).is_empty());
    assert_eq!(e.next_wake(), Some(at("2026-11-29T00:00:20Z")));
}

#[test]
fn cluster_retries_are_queued_in_the_store_and_adopted_by_any_node() {
    let mut j = job("r", "0 * * * *");
    j.retry = RetryPolicy {
        attempts: 2,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(10),
        factor: 1.0,
        jitter: 0.0,
    };
    let cfg = config(vec![j], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:30:00Z"));
    let t1 = at("2026-11-29T01:00:00Z");
    let c = claims(&e.wake(t1, false));
    assert_eq!(c[0].retry.as_ref().map(|r| r.attempts), Some(2));
    let s = starts(&e.claimed(&c[0].run, grant(1), t1));
    e.spawned(&s[0].run, Ok(Started { pid: 1, at: t1 }), t1);
    let end = t1 + chrono::Duration::seconds(1);
    let r = records(&e.finished(&s[0].run, &outcome(1, t1, end, 3), end));
    assert_eq!(r[0].status, Some(RunStatus::Failed));
    assert_eq!(
        r[0].detail.as_ref().unwrap()["retry_at"],
        "2026-11-29T01:00:11.000Z"
    );
    assert_eq!(
        e.next_wake(),
        Some(at("2026-11-29T02:00:00Z")),
        "no local retry: the store hands it to some node"
    );
    let later = at("2026-11-29T01:00:11Z");
    let acts = e.adopt(
        "r",
        Trigger::Retry,
        2,
        t1,
        Grant {
            run_id: 2,
            fence: 5,
        },
        None,
        later,
    );
    let s = starts(&acts);
    assert_eq!(
        (s[0].trigger, s[0].attempt, s[0].scheduled),
        (Trigger::Retry, 2, t1)
    );
}

#[test]
fn cluster_lease_loss_kills_only_jobs_that_ask_for_it() {
    let mut kill = job("kill", "* * * * *");
    kill.on_lease_lost = OnLeaseLost::Kill;
    let keep = job("keep", "* * * * *");
    let cfg = config(vec![kill, keep], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let t1 = at("2026-11-29T00:01:00Z");
    let mut runs = BTreeMap::new();
    for (i, c) in claims(&e.wake(t1, false)).into_iter().enumerate() {
        let s = starts(&e.claimed(&c.run, grant(i as i64), t1));
        e.spawned(&s[0].run, Ok(Started { pid: 1, at: t1 }), t1);
        runs.insert(c.job.clone(), c.run.clone());
    }
    let acts = e.lease_lost(t1 + chrono::Duration::seconds(5));
    let terminated: Vec<&String> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Terminate { run } => Some(run),
            _ => None,
        })
        .collect();
    assert_eq!(terminated, vec![&runs["kill"]]);
    let end = t1 + chrono::Duration::seconds(6);
    let mut o = outcome(1, t1, end, 143);
    o.terminated = true;
    let r = records(&e.finished(&runs["kill"], &o, end));
    assert_eq!(r[0].status, Some(RunStatus::Killed));
    assert!(r[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("lost its cluster lease"));
}

#[test]
fn cluster_replace_stops_the_run_holding_the_fence() {
    let cfg = config(vec![job("q", "* * * * *")], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let t1 = at("2026-11-29T00:01:00Z");
    let c = claims(&e.wake(t1, false));
    let s = starts(&e.claimed(&c[0].run, grant(4), t1));
    e.spawned(&s[0].run, Ok(Started { pid: 1, at: t1 }), t1);
    assert!(e.stop_fence(999, t1).is_empty());
    let acts = e.stop_fence(1004, t1);
    assert!(matches!(&acts[..], [Action::Terminate { run }] if *run == s[0].run));
}

#[test]
fn cluster_manual_trigger_and_one_shots_go_through_the_store() {
    let cfg = config(vec![job("q", "0 0 1 1 *")], 8);
    let t0 = at("2026-11-29T00:00:30Z");
    let (mut e, _) = cluster_engine(&cfg, t0);
    let (result, acts) = e.trigger("q", true, &Values::new(), t0);
    assert!(matches!(result, TriggerResult::Queued { .. }));
    let c = claims(&acts);
    assert_eq!(
        (c[0].trigger, c[0].overlap),
        (Trigger::Manual, Overlap::Allow)
    );
    let acts = e.claimed(&c[0].run, ClaimOutcome::NoLease, t0);
    let r = records(&acts);
    assert_eq!(
        r[0].status,
        Some(RunStatus::Skipped),
        "a manual run is not caught up"
    );
    let shot = OneShot {
        id: "s1".into(),
        argv: vec!["true".into()].into(),
        shell: false,
        dir: std::path::Path::new("/").into(),
        due: t0,
        submitted: t0,
        rare: None,
    };
    let s = starts(&e.adopt_oneshot(
        shot,
        1,
        Grant {
            run_id: 9,
            fence: 10,
        },
        t0,
    ));
    assert_eq!((s[0].name.as_str(), s[0].trigger), ("s1", Trigger::Oneshot));
    e.spawned(&s[0].run, Ok(Started { pid: 1, at: t0 }), t0);
    let acts = e.finished(&s[0].run, &outcome(1, t0, t0, 0), t0);
    assert!(acts
        .iter()
        .any(|a| matches!(a, Action::OneShotDone { id } if id == "s1")));
    assert_eq!(e.oneshot_count(), 0);
}

#[test]
fn cluster_a_claim_won_while_stopping_is_ended_not_run() {
    let cfg = config(vec![job("q", "* * * * *")], 8);
    let (mut e, _) = cluster_engine(&cfg, at("2026-11-29T00:00:30Z"));
    let t1 = at("2026-11-29T00:01:00Z");
    let c = claims(&e.wake(t1, false));
    e.shutdown();
    let acts = e.claimed(&c[0].run, grant(5), t1);
    assert!(starts(&acts).is_empty());
    let r = records(&acts);
    assert_eq!(r[0].status, Some(RunStatus::Skipped));
    assert_eq!(
        r[0].cluster_run,
        Some(5),
        "the store is told, so its run row ends"
    );
}

// ---- shares: slots divided between tenants ---------------------------------

/// A job of `user`'s file (None: the system's), named as the loader
/// qualifies it.
fn owned(user: Option<&str>, name: &str, expr: &str) -> Job {
    let mut j = job(&Tenant::from_owner(user).qualify(name), expr);
    j.owner = user.map(str::to_string);
    j
}

/// Drives an engine second by second: runs of jobs for which `lasts`
/// says Some end that long after they start, the others never end (long
/// sleepers). Checks after every event that the slots held are the runs
/// and hooks in progress.
struct Tenants {
    engine: Engine,
    now: DateTime<Utc>,
    /// (job, started)
    started: Vec<(String, DateTime<Utc>)>,
    /// (run, ends)
    ending: Vec<(String, DateTime<Utc>)>,
    records: Vec<Record>,
    lasts: fn(&str) -> Option<chrono::Duration>,
}

impl Tenants {
    fn new(
        plan: &Plan,
        now: DateTime<Utc>,
        lasts: fn(&str) -> Option<chrono::Duration>,
    ) -> Tenants {
        let mut engine = Engine::new(plan, 7);
        let a = engine.start(now, Recovered::default());
        let mut t = Tenants {
            engine,
            now,
            started: vec![],
            ending: vec![],
            records: vec![],
            lasts,
        };
        t.apply(a);
        t
    }

    fn apply(&mut self, actions: Vec<Action>) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(a) = queue.pop_front() {
            match a {
                Action::Start(s) => {
                    self.started.push((s.name.clone(), self.now));
                    if let Some(d) = (self.lasts)(&s.name) {
                        self.ending.push((s.run.clone(), self.now + d));
                    }
                    let at = self.now;
                    queue.extend(self.engine.spawned(&s.run, Ok(Started { pid: 1, at }), at));
                }
                Action::Record(r) => self.records.push(*r),
                Action::StartHooks { id, .. } => queue.extend(self.engine.hooks_done(id, self.now)),
                _ => {}
            }
            assert_eq!(
                self.engine.shares.held(),
                self.engine.runs.len() + self.engine.hooks.running(),
                "the slots held are the runs and hooks in progress"
            );
        }
    }

    /// Until `until`, ending runs when due and waking at every due instant.
    fn run_until(&mut self, until: DateTime<Utc>) {
        loop {
            let next_end = self.ending.iter().map(|e| e.1).min();
            let next = [next_end, self.engine.next_wake()]
                .into_iter()
                .flatten()
                .min();
            let Some(next) = next.filter(|n| *n <= until) else {
                break;
            };
            self.now = next.max(self.now);
            if next_end == Some(next) {
                let i = self
                    .ending
                    .iter()
                    .position(|e| e.1 == next)
                    .expect("ending run");
                let (run, ends) = self.ending.remove(i);
                let a = self
                    .engine
                    .finished(&run, &outcome(1, self.now, ends, 0), self.now);
                self.apply(a);
            } else {
                let a = self.engine.wake(self.now, false);
                self.apply(a);
            }
        }
        self.now = until;
    }

    fn starts_of(&self, name: &str) -> usize {
        self.started.iter().filter(|s| s.0 == name).count()
    }

    fn skips_of(&self, name: &str) -> Vec<String> {
        self.records
            .iter()
            .filter(|r| r.job.as_deref() == Some(name) && r.status == Some(RunStatus::Skipped))
            .map(|r| r.reason.clone().unwrap_or_default())
            .collect()
    }
}

fn flood_plan(jobs: Vec<Job>, max_concurrent: usize) -> Jobs {
    config(jobs, max_concurrent)
}

#[test]
fn a_users_flood_leaves_the_system_and_other_users_a_slot_every_second() {
    // alice: 300 per-second jobs that never end. bob and the system: one
    // per-second job each, that lasts 100 ms.
    let mut jobs: Vec<Job> = (0..300)
        .map(|i| owned(Some("alice"), &format!("flood{i}"), "* * * * * *"))
        .collect();
    jobs.push(owned(None, "tick", "* * * * * *"));
    jobs.push(owned(Some("bob"), "tick", "* * * * * *"));
    let cfg = flood_plan(jobs, 8);
    let mut t = Tenants::new(&cfg.plan(), at("2026-11-29T00:00:00Z"), |name| {
        (!name.starts_with("alice/")).then(|| chrono::Duration::milliseconds(100))
    });
    t.run_until(at("2026-11-29T00:00:10Z"));
    assert_eq!(
        t.starts_of("tick"),
        10,
        "the system's job runs every second"
    );
    assert_eq!(t.starts_of("bob/tick"), 10, "bob's job runs every second");
    assert!(t.skips_of("tick").is_empty(), "{:?}", t.skips_of("tick"));
    assert!(
        t.skips_of("bob/tick").is_empty(),
        "{:?}",
        t.skips_of("bob/tick")
    );
    let limits = t.engine.share_limits();
    assert_eq!((limits.per_user, limits.reserve_system), (4, 1));
    let alice: Owner = Some("alice".into());
    assert_eq!(
        t.engine.shares.held_by(&alice),
        4,
        "alice holds her share, no more"
    );
    assert_eq!(
        t.started
            .iter()
            .filter(|s| s.0.starts_with("alice/"))
            .count(),
        4
    );
    // Her waiting jobs' next occurrences are skipped for the true reason.
    let skips = t.skips_of("alice/flood299");
    assert_eq!(skips.len(), 9, "{skips:?}");
    assert_eq!(
        skips[0],
        "the previous run is still waiting for a free slot: alice's share is full \
         (4 running, max_concurrent_per_user = 4) (overlap = \"skip\")"
    );
    // No job that never got a slot is said to be running.
    for r in &t.records {
        let job = r.job.as_deref().unwrap_or_default();
        if r.reason
            .as_deref()
            .is_some_and(|r| r.contains("still running"))
        {
            assert!(t.starts_of(job) > 0, "{job}: {:?}", r.reason);
        }
    }
}

#[test]
fn a_slot_that_frees_goes_round_robin_among_waiting_tenants() {
    let cfg = config(
        vec![
            owned(None, "hold", "0 0 1 1 *"),
            owned(Some("alice"), "a", "0 0 1 1 *"),
            owned(Some("bob"), "b", "0 0 1 1 *"),
        ],
        3,
    );
    let mut plan = cfg.plan();
    plan.shares.reserve_system = 0;
    plan.shares.per_user = 3;
    let mut engine = Engine::new(&plan, 5);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    let mut running = VecDeque::new();
    for _ in 0..3 {
        let (r, _) = engine.trigger("hold", true, &Values::new(), now);
        let TriggerResult::Started { run } = r else {
            panic!("{r:?}")
        };
        running.push_back(run);
    }
    // alice queues 6 first, then bob 3: bob does not wait behind all of hers.
    for _ in 0..6 {
        assert!(matches!(
            engine.trigger("alice/a", true, &Values::new(), now).0,
            TriggerResult::Queued { .. }
        ));
    }
    for _ in 0..3 {
        assert!(matches!(
            engine.trigger("bob/b", true, &Values::new(), now).0,
            TriggerResult::Queued { .. }
        ));
    }
    let mut order = Vec::new();
    while let Some(run) = running.pop_front() {
        for s in starts(&engine.finished(&run, &outcome(1, now, now, 0), now)) {
            order.push(s.name.clone());
            running.push_back(s.run);
        }
    }
    assert_eq!(
        order,
        [
            "alice/a", "bob/b", "alice/a", "bob/b", "alice/a", "bob/b", "alice/a", "alice/a",
            "alice/a"
        ]
    );
}

#[test]
fn the_reserve_is_the_systems_and_users_share_the_rest() {
    // Users' jobs never end: alice (3, her share) and bob (1) fill the
    // users' 4 slots of 5; the system's job still gets the reserved one.
    let mut jobs: Vec<Job> = Vec::new();
    for user in ["alice", "bob"] {
        for i in 0..3 {
            jobs.push(owned(Some(user), &format!("j{i}"), "* * * * * *"));
        }
    }
    jobs.push(owned(None, "sys", "* * * * * *"));
    let cfg = flood_plan(jobs, 5);
    let mut plan = cfg.plan();
    plan.shares.per_user = 3;
    let mut t = Tenants::new(&plan, at("2026-11-29T00:00:00Z"), |_| None);
    t.run_until(at("2026-11-29T00:00:01Z"));
    let held = |t: &Tenants, u: Option<&str>| t.engine.shares.held_by(&u.map(Arc::from));
    assert_eq!((held(&t, Some("alice")), held(&t, Some("bob"))), (3, 1));
    assert_eq!(held(&t, None), 1, "the reserved slot is the system's");
    t.run_until(at("2026-11-29T00:00:02Z"));
    let skips = t.skips_of("bob/j2");
    assert_eq!(
        skips,
        vec![
            "the previous run is still waiting for a free slot: the users' slots are full \
             (4 of max_concurrent = 5 running; reserve_system = 1 kept for the system's jobs) \
             (overlap = \"skip\")"
                .to_string()
        ]
    );
    assert_eq!(
        t.skips_of("sys"),
        vec!["the previous run is still running (overlap = \"skip\")".to_string()],
        "the system's run does run"
    );
    // One slot: nothing is reserved, or users would never run.
    assert_eq!(
        Shares::new(1, ShareLimits::defaults(1))
            .limits()
            .reserve_system,
        0
    );
}

#[test]
fn a_run_that_waited_for_a_slot_records_what_it_waited_for() {
    let cfg = config(
        vec![owned(None, "a", "0 0 1 1 *"), owned(None, "b", "0 0 1 1 *")],
        1,
    );
    let mut engine = Engine::new(&cfg.plan(), 5);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    let (r, a) = engine.trigger("a", false, &Values::new(), now);
    let TriggerResult::Started { run: first } = r else {
        panic!("{r:?}")
    };
    let first_start = starts(&a);
    let _ = engine.spawned(&first, Ok(Started { pid: 1, at: now }), now);
    let (r, _) = engine.trigger("b", false, &Values::new(), now);
    let TriggerResult::Queued { run: second } = r else {
        panic!("{r:?}")
    };
    // While b waits, its next trigger says b waits, not that b runs.
    let (r, _) = engine.trigger("b", false, &Values::new(), now);
    assert_eq!(
        r,
        TriggerResult::Skipped {
            reason: "the previous run is still waiting for a free slot: all 1 slots are in use \
                     (max_concurrent = 1) and the job's overlap policy is \"skip\" (use --force to run anyway)"
                .into()
        }
    );
    let later = now + chrono::Duration::seconds(3);
    let a = engine.finished(&first, &outcome(1, now, later, 0), later);
    assert_eq!(starts(&a)[0].run, second);
    let a = engine.spawned(&second, Ok(Started { pid: 2, at: later }), later);
    let rec = &records(&a)[0];
    assert_eq!(rec.status, Some(RunStatus::Started));
    assert_eq!(rec.waited_ms, Some(3000));
    assert_eq!(
        rec.waited_for.as_deref(),
        Some("a free slot: all 1 slots are in use (max_concurrent = 1)")
    );
    assert_eq!(first_start.len(), 1);
}

#[test]
fn a_users_manual_triggers_and_retries_are_capped_but_the_systems_are_not() {
    let cfg = config(
        vec![
            owned(Some("alice"), "t", "0 0 1 1 *"),
            owned(None, "t", "0 0 1 1 *"),
        ],
        2,
    );
    let mut plan = cfg.plan();
    plan.shares.queued_per_user = 10;
    let mut engine = Engine::new(&plan, 5);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    let mut results = Vec::new();
    for _ in 0..20 {
        results.push(engine.trigger("alice/t", true, &Values::new(), now).0);
    }
    // Her share of max 2 (reserve 1) is 1 slot: one starts, ten wait.
    assert!(matches!(results[0], TriggerResult::Started { .. }));
    assert!(results[1..11]
        .iter()
        .all(|r| matches!(r, TriggerResult::Queued { .. })));
    for r in &results[11..] {
        assert_eq!(
            *r,
            TriggerResult::Skipped {
                reason: "alice already has 10 runs waiting for a free slot (max_queued_per_user = 10); \
                         try again when fewer wait, or ask the administrator to raise max_queued_per_user in [daemon]"
                    .into()
            }
        );
    }
    for _ in 0..20 {
        let (r, _) = engine.trigger("t", true, &Values::new(), now);
        assert!(!matches!(r, TriggerResult::Skipped { .. }), "{r:?}");
    }
}

#[test]
fn a_users_retry_is_not_queued_past_her_cap() {
    let mut flaky = owned(Some("alice"), "flaky", "0 0 1 1 *");
    flaky.retry = RetryPolicy {
        attempts: 3,
        delay: Duration::from_secs(1),
        ..flaky.retry.clone()
    };
    let cfg = config(vec![flaky, owned(Some("alice"), "t", "0 0 1 1 *")], 2);
    let mut plan = cfg.plan();
    plan.shares.queued_per_user = 2;
    let mut engine = Engine::new(&plan, 5);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    let (r, _) = engine.trigger("alice/flaky", false, &Values::new(), now);
    let TriggerResult::Started { run } = r else {
        panic!("{r:?}")
    };
    let _ = engine.spawned(&run, Ok(Started { pid: 1, at: now }), now);
    // Her one slot is taken by flaky; t's forced runs fill her queue.
    for _ in 0..2 {
        assert!(matches!(
            engine.trigger("alice/t", true, &Values::new(), now).0,
            TriggerResult::Queued { .. }
        ));
    }
    let a = engine.finished(&run, &outcome(1, now, now, 1), now);
    let mut recs = records(&a);
    // flaky's slot went to a waiting t; its retry comes a second later.
    for s in starts(&a) {
        let _ = engine.spawned(&s.run, Ok(Started { pid: 2, at: now }), now);
    }
    let _ = engine.trigger("alice/t", true, &Values::new(), now);
    let later = now + chrono::Duration::seconds(5);
    recs.extend(records(&engine.wake(later, false)));
    let skipped: Vec<_> = recs
        .iter()
        .filter(|r| r.status == Some(RunStatus::Skipped))
        .collect();
    assert_eq!(skipped.len(), 1, "{recs:?}");
    assert_eq!(skipped[0].trigger, Some(Trigger::Retry));
    assert_eq!(skipped[0].attempt, Some(2));
    assert!(
        skipped[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("retry not queued: alice already has 2 runs waiting")),
        "{:?}",
        skipped[0].reason
    );
}

#[test]
fn a_users_hooks_take_a_slot_of_her_share_ahead_of_her_runs() {
    let mut failing = owned(Some("alice"), "f", "0 0 1 1 *");
    failing.extras_mut().on_failure = Some("page".to_string());
    let cfg = config(
        vec![
            failing,
            owned(Some("alice"), "g", "0 0 1 1 *"),
            owned(None, "s", "0 0 1 1 *"),
        ],
        2,
    );
    let mut engine = Engine::new(&cfg.plan(), 5);
    let now = at("2026-11-29T00:00:00Z");
    engine.start(now, Recovered::default());
    // max 2, one reserved: alice's share is one slot.
    let TriggerResult::Started { run: f } = engine.trigger("alice/f", false, &Values::new(), now).0
    else {
        panic!("f starts")
    };
    let _ = engine.spawned(&f, Ok(Started { pid: 1, at: now }), now);
    let TriggerResult::Queued { run: g } = engine.trigger("alice/g", false, &Values::new(), now).0
    else {
        panic!("g waits for her slot")
    };
    let a = engine.finished(&f, &outcome(1, now, now, 1), now);
    let hooks: Vec<u64> = a
        .iter()
        .filter_map(|a| match a {
            Action::StartHooks { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(hooks.len(), 1, "f's hook takes her slot, ahead of g");
    assert!(starts(&a).is_empty(), "g still waits");
    assert_eq!(engine.shares.held_by(&Some("alice".into())), 1);
    // The system's job has the reserved slot meanwhile.
    assert!(matches!(
        engine.trigger("s", false, &Values::new(), now).0,
        TriggerResult::Started { .. }
    ));
    let a = engine.hooks_done(hooks[0], now);
    assert_eq!(
        starts(&a)[0].run,
        g,
        "her slot goes to g once the hook is done"
    );
    assert_eq!(
        engine.shares.held(),
        engine.runs.len() + engine.hooks.running()
    );
}

#[test]
fn a_triggers_params_reach_its_run_its_retries_and_records_and_bad_ones_start_nothing() {
    use crate::params::{Param, Pattern};
    let mut j = job("report", "0 * * * *");
    j.extras_mut().params = vec![
        Param {
            name: "DATE".into(),
            default: Some("today".into()),
            pattern: Some(Pattern::new("today|[0-9]{4}-[0-9]{2}-[0-9]{2}").unwrap()),
        },
        Param {
            name: "REGION".into(),
            default: None,
            pattern: None,
        },
    ];
    j.retry = RetryPolicy {
        attempts: 1,
        delay: Duration::from_secs(10),
        max_delay: Duration::from_secs(10),
        factor: 1.0,
        jitter: 0.0,
    };
    let cfg = config(vec![j], 8);
    let mut sim = Sim::new(&cfg, at("2026-11-29T00:10:00Z"));
    let values = |pairs: &[(&str, &str)]| -> Values {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let now = sim.now;
    for (bad, why) in [
        (
            values(&[("DATE", "yesterday"), ("REGION", "eu")]),
            "does not match",
        ),
        (values(&[("DATE", "today")]), "\"REGION\" is required"),
        (
            values(&[("REGION", "eu"), ("COLOUR", "red")]),
            "no parameter \"COLOUR\"",
        ),
    ] {
        let (r, actions) = sim.engine.trigger("report", false, &bad, now);
        match r {
            TriggerResult::BadParams { reason } => assert!(reason.contains(why), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(starts(&actions).is_empty() && records(&actions).is_empty());
    }
    let (r, actions) = sim
        .engine
        .trigger("report", false, &values(&[("REGION", "eu")]), now);
    assert!(matches!(r, TriggerResult::Started { .. }), "{r:?}");
    let expected = values(&[("DATE", "today"), ("REGION", "eu")]);
    assert_eq!(
        starts(&actions)[0].params.as_deref(),
        Some(&expected),
        "the defaults fill in"
    );
    sim.codes.insert("report".into(), 1);
    sim.apply(actions);
    sim.run_until(at("2026-11-29T00:11:00Z"), chrono::Duration::seconds(1), 0);
    // The first attempt and its retry both got the trigger's values.
    let finals: Vec<_> = sim
        .records
        .iter()
        .filter(|r| r.status == Some(RunStatus::Failed))
        .map(|r| (r.attempt, r.params.clone()))
        .collect();
    assert_eq!(
        finals,
        vec![(Some(1), Some(expected.clone())), (Some(2), Some(expected))]
    );
    // A scheduled run gets the defaults (REGION, without one, is unset).
    sim.codes.clear();
    sim.run_until(at("2026-11-29T01:00:30Z"), chrono::Duration::seconds(1), 0);
    let scheduled = sim
        .records
        .iter()
        .rfind(|r| r.trigger == Some(Trigger::Schedule))
        .unwrap();
    assert_eq!(scheduled.params, Some(values(&[("DATE", "today")])));
}

/// The live views' walk in name order (`job_views_indexed`) sees the same
/// jobs, places and pauses as the walk in file order, across reloads that
/// reorder the file and remove a job while it runs.
#[test]
fn job_views_in_name_order_agree_with_file_order() {
    fn both(engine: &Engine) -> (Vec<String>, Vec<String>) {
        let by_file: Vec<String> = engine
            .job_views()
            .enumerate()
            .map(|(i, v)| format!("{i} {} {} {} {}", v.name, v.paused, v.state(), v.running))
            .collect();
        let mut by_name: Vec<(usize, String)> = engine
            .job_views_indexed()
            .map(|(i, v)| {
                let line = format!("{i} {} {} {} {}", v.name, v.paused, v.state(), v.running);
                (i, line)
            })
            .collect();
        by_name.sort();
        (by_file, by_name.into_iter().map(|(_, l)| l).collect())
    }
    let names = ["m", "b", "z", "a", "q"];
    let cfg = config(names.iter().map(|n| job(n, "* * * * *")).collect(), 8);
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    engine.pause(&["a".into(), "q".into(), "z".into()]);
    let (r, _) = engine.trigger("b", false, &Values::new(), at("2026-11-29T00:00:40Z"));
    assert!(matches!(r, TriggerResult::Started { .. }));
    let (a, b) = both(&engine);
    assert_eq!(a, b);
    assert_eq!(a.len(), 5);
    assert_eq!(engine.job_count(), 5);
    // b leaves while it runs; the rest are reordered.
    let cfg = config(
        ["q", "z", "a", "m"]
            .iter()
            .map(|n| job(n, "* * * * *"))
            .collect(),
        8,
    );
    engine.reload(&cfg.plan(), at("2026-11-29T00:00:41Z"));
    let (a, b) = both(&engine);
    assert_eq!(a, b);
    assert_eq!(a[0], "0 q true paused 0");
    assert_eq!(engine.job_count(), 4);
    let from: Vec<_> = engine.job_views_from(2).map(|(i, v)| (i, v.name)).collect();
    assert_eq!(from, [(2, "a"), (3, "m")]);
}

/// Not a test of speed (none asserts one): prints how long a pass over
/// 100,000 jobs takes each way. `cargo test -p rea-core --release --
/// --ignored --nocapture views_at_scale`.
#[test]
#[ignore]
fn views_at_scale() {
    let cfg = config(
        (0..100_000)
            .map(|i| job(&format!("team-{}/job-{i:06}", i % 97), "*/5 * * * *"))
            .collect(),
        8,
    );
    let mut engine = Engine::new(&cfg.plan(), 5);
    engine.start(at("2026-11-29T00:00:30Z"), Recovered::default());
    let paused: Vec<String> = (0..100_000)
        .step_by(50)
        .map(|i| format!("team-{}/job-{i:06}", i % 97))
        .collect();
    engine.pause(&paused);
    let time = |what: &str, f: &dyn Fn() -> usize| {
        let mut best = std::time::Duration::MAX;
        let mut n = 0;
        for _ in 0..5 {
            #[allow(clippy::disallowed_methods)]
            let t = std::time::Instant::now();
            n = f();
            best = best.min(t.elapsed());
        }
        println!("{what}: {best:?} ({n})");
    };
    time("job_views (file order)", &|| {
        engine
            .job_views()
            .filter(|v| v.paused || v.next_fire.is_some())
            .count()
    });
    time("job_views_indexed (name order)", &|| {
        engine
            .job_views_indexed()
            .filter(|(_, v)| v.paused || v.next_fire.is_some())
            .count()
    });
    // The live index: its rebuild, then what a page's scan reads.
    #[allow(clippy::disallowed_methods)]
    let t = std::time::Instant::now();
    engine.refresh_live();
    println!("live index rebuilt: {:?}", t.elapsed());
    time("live briefs (one scan)", &|| {
        engine
            .live()
            .briefs()
            .iter()
            .filter(|b| b.has(Brief::PAUSED) || b.next_fire_ms != i64::MAX)
            .count()
    });
    time("live next_due(10) from the heap", &|| {
        engine.live().next_due(10).len()
    });
}

/// The live index (`live.rs`) against a recount from every job's view:
/// the briefs, the counts of all and of each tenant, the failing jobs and
/// the next fires read from the heap are what a full pass over the jobs
/// finds, after each step of random sequences of fires, triggers, runs
/// that succeed, fail and retry, kills, pauses and resumes, summaries fed,
/// clock steps and reloads that add, remove, reorder, disable, retag and
/// reschedule jobs of three tenants.
#[test]
fn the_live_index_agrees_with_a_recount_at_every_step() {
    use crate::engine::{Brief, Tally};
    use crate::job::Overlap;

    fn make(rng: &mut fastrand::Rng, name: &str) -> Job {
        let exprs = [
            "* * * * *",
            "*/2 * * * *",
            "*/5 * * * *",
            "30 * * * *",
            "@hourly",
        ];
        let mut j = job(name, exprs[rng.usize(..exprs.len())]);
        j.owner = Tenant::of(name).user().map(str::to_string);
        j.overlap = [
            Overlap::Skip,
            Overlap::Queue,
            Overlap::Allow,
            Overlap::Replace,
        ][rng.usize(..4)];
        j.enabled = rng.u8(..10) != 0;
        j.jitter = if rng.bool() {
            Duration::from_secs(rng.u64(0..90))
        } else {
            Duration::ZERO
        };
        j.tags = ["db", "web", "batch"]
            .iter()
            .filter(|_| rng.u8(..3) == 0)
            .map(|t| t.to_string())
            .collect();
        if rng.bool() {
            j.retry = RetryPolicy {
                attempts: rng.u32(1..4),
                delay: Duration::from_secs(20),
                max_delay: Duration::from_secs(60),
                factor: 2.0,
                jitter: 0.0,
            };
        }
        j
    }

    /// What a full pass finds: briefs, counts (all, per tenant user),
    /// failing positions, next fires.
    type Recount = (
        Vec<Brief>,
        Tally,
        BTreeMap<Option<String>, Tally>,
        Vec<u32>,
        Vec<(DateTime<Utc>, u32)>,
    );

    fn recount(engine: &Engine) -> Recount {
        let views: Vec<JobView<'_>> = engine.job_views().collect();
        let mut names: Vec<&str> = views.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let live = engine.live();
        let mut briefs = Vec::new();
        let mut total = Tally::default();
        let mut per: BTreeMap<Option<String>, Tally> = BTreeMap::new();
        let mut failing = Vec::new();
        let mut due = Vec::new();
        for (i, v) in views.iter().enumerate() {
            let rank = names.binary_search(&v.name).unwrap() as u32;
            let b = Brief {
                next_fire_ms: v.next_fire.map_or(i64::MAX, |t| t.timestamp_millis()),
                last_run_s: v.summary.last_run().map(|t| t.timestamp()),
                p95_ms: v.summary.p95().map(|d| d.as_millis() as u64),
                consecutive_failures: v.consecutive_failures,
                rank,
                tenant: live
                    .tenant(Tenant::of(v.name))
                    .expect("a tenant of the file"),
                state: v.live_state(),
                flags: (u8::from(v.running > 0) * Brief::RUNNING)
                    | (u8::from(v.queued > 0) * Brief::QUEUED)
                    | (u8::from(v.paused) * Brief::PAUSED)
                    | (u8::from(!v.job.enabled) * Brief::DISABLED),
            };
            for t in [
                &mut total,
                per.entry(Tenant::of(v.name).user().map(str::to_string))
                    .or_default(),
            ] {
                t.jobs += 1;
                t.running += usize::from(v.running > 0);
                t.queued += usize::from(v.queued > 0);
                t.paused += usize::from(v.paused);
                t.disabled += usize::from(!v.job.enabled);
                t.failing += usize::from(v.consecutive_failures > 0);
            }
            if v.consecutive_failures > 0 {
                failing.push((std::cmp::Reverse(v.consecutive_failures), i as u32));
            }
            if let Some(at) = v.next_fire {
                due.push((at, i as u32));
            }
            briefs.push(b);
        }
        failing.sort();
        due.sort();
        due.truncate(10);
        (
            briefs,
            total,
            per,
            failing.into_iter().map(|(_, p)| p).take(20).collect(),
            due,
        )
    }

    fn check(engine: &mut Engine, step: usize, what: &str) {
        engine.refresh_live();
        let (briefs, total, per, failing, due) = recount(engine);
        let live = engine.live();
        let at = format!("step {step} ({what})");
        assert_eq!(live.briefs(), &briefs[..], "{at}: briefs");
        assert_eq!(live.tally(None), total, "{at}: counts");
        for (user, tally) in &per {
            let t = match user {
                None => Tenant::System,
                Some(u) => Tenant::User(u),
            };
            let id = live.tenant(t).expect("tenant");
            assert_eq!(live.tally(Some(id)), *tally, "{at}: counts of {user:?}");
            let mine: Vec<u32> = (0..briefs.len() as u32)
                .filter(|&p| Tenant::of(live.name(p)) == t)
                .collect();
            assert_eq!(live.positions(id), &mine[..], "{at}: positions of {user:?}");
        }
        assert_eq!(live.failing(None, 20), failing, "{at}: failing");
        assert_eq!(live.next_due(10), due, "{at}: next due");
        assert_eq!(live.next_due_scanned(10), due, "{at}: next due, scanned");
        for tag in ["db", "web", "batch"] {
            let tagged: Vec<u32> = engine
                .job_views()
                .enumerate()
                .filter(|(_, v)| v.job.tags.iter().any(|t| t == tag))
                .map(|(i, _)| i as u32)
                .collect();
            assert_eq!(live.tagged(tag), &tagged[..], "{at}: tag {tag}");
        }
    }

    let tenants = ["", "alice/", "bob/"];
    for seed in 0..12u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut pool: Vec<String> = (0..40)
            .map(|i| format!("{}job-{i:02}", tenants[i % 3]))
            .collect();
        rng.shuffle(&mut pool);
        let mut file: Vec<Job> = pool[..24].iter().map(|n| make(&mut rng, n)).collect();
        let cfg = config(file.clone(), 3);
        let mut sim = Sim::new(&cfg, at("2026-11-29T00:00:30Z"));
        let mut fed = 0;
        check(&mut sim.engine, 0, "start");
        for step in 1..120 {
            let names: Vec<String> = file.iter().map(|j| j.name.clone()).collect();
            let pick = |rng: &mut fastrand::Rng| names[rng.usize(..names.len())].clone();
            let what = match rng.u8(..10) {
                0..=3 => {
                    for n in &names {
                        if rng.u8(..4) == 0 {
                            sim.codes.insert(n.clone(), i32::from(rng.bool()));
                        }
                    }
                    let until = sim.now + chrono::Duration::seconds(rng.i64(1..400));
                    let run_for = chrono::Duration::seconds(rng.i64(1..200));
                    sim.run_until(until, run_for, 0);
                    "time passes"
                }
                4 => {
                    let now = sim.now;
                    let (_, actions) =
                        sim.engine
                            .trigger(&pick(&mut rng), rng.bool(), &Values::new(), now);
                    sim.apply(actions);
                    "trigger"
                }
                5 => {
                    let some: Vec<String> = (0..rng.usize(1..5)).map(|_| pick(&mut rng)).collect();
                    if rng.bool() {
                        sim.engine.pause(&some);
                        "pause"
                    } else {
                        sim.engine.resume(&some);
                        "resume"
                    }
                }
                6 => {
                    let runs: Vec<String> = sim
                        .engine
                        .runs_in_progress()
                        .into_iter()
                        .map(|r| r.run)
                        .collect();
                    if let Some(r) = runs.first() {
                        let (_, actions) = sim.engine.kill_runs(std::slice::from_ref(r), sim.now);
                        sim.apply(actions);
                        // The killed run ends at once.
                        if let Some(i) = sim.running.iter().position(|(id, _)| id == r) {
                            let (run, started) = sim.running.remove(i);
                            let mut o = outcome(100, started, sim.now, -1);
                            o.termination = Termination::Signaled(9);
                            o.terminated = true;
                            let actions = sim.engine.finished(&run, &o, sim.now);
                            sim.apply(actions);
                        }
                    }
                    "kill"
                }
                7 => {
                    let now = sim.now + chrono::Duration::seconds(rng.i64(60..3000));
                    sim.now = now;
                    let actions = sim.engine.wake(now, true);
                    sim.apply(actions);
                    "clock step"
                }
                _ => {
                    // A new file: some jobs leave, some come, some change,
                    // the order is shuffled.
                    file.retain(|_| rng.u8(..6) != 0);
                    for n in &pool {
                        if !file.iter().any(|j| &j.name == n) && rng.u8(..4) == 0 {
                            file.push(make(&mut rng, n));
                        }
                    }
                    for j in file.iter_mut() {
                        if rng.u8(..5) == 0 {
                            *j = make(&mut rng, &j.name.clone());
                        }
                    }
                    rng.shuffle(&mut file);
                    let cfg = config(file.clone(), rng.usize(1..4));
                    let actions = sim.engine.reload(&cfg.plan(), sim.now);
                    sim.apply(actions);
                    "reload"
                }
            };
            // The daemon feeds every record it writes to the summaries.
            for rec in &sim.records[fed..] {
                sim.engine.observe(rec);
            }
            fed = sim.records.len();
            if step % 7 == 0 {
                // A read between some steps only: marks pile up between
                // reads as in a daemon nobody watches.
                continue;
            }
            check(&mut sim.engine, step, what);
        }
    }
}

/// A peer's final run (cluster mode): the job's last run and streak
/// become the cluster's; an end older than the last known still counts in
/// the streak when no success is known after it, and never replaces it.
#[test]
fn another_nodes_ends_make_the_streak_and_last_run_the_clusters() {
    let cfg = config(vec![job("x", "@yearly")], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    engine.start(at("2026-11-29T00:00:00Z"), Recovered::default());
    let end = |ended: &str, status: RunStatus, run: &str| {
        let mut rec = Record::new(Event::Run, at(ended));
        rec.job = Some("x".into());
        rec.run = Some(run.into());
        rec.status = Some(status);
        rec.started = Some(at(ended) - chrono::Duration::seconds(2));
        rec.ended = Some(at(ended));
        rec.exit_code = Some(i32::from(status != RunStatus::Succeeded));
        rec
    };
    let streak = |e: &Engine| e.job_status("x").map(|s| s.consecutive_failures);
    let last = |e: &Engine| e.job_status("x").and_then(|s| s.last).map(|l| l.run);

    assert!(engine.observe_peer(&end("2026-11-29T01:00:00Z", RunStatus::Failed, "a-b")));
    assert!(engine.observe_peer(&end("2026-11-29T02:00:00Z", RunStatus::TimedOut, "c-b")));
    assert_eq!(streak(&engine), Some(2));
    assert_eq!(last(&engine).as_deref(), Some("c-b"));
    // An end told late, older than the last: in the streak, not the last.
    assert!(engine.observe_peer(&end("2026-11-29T01:30:00Z", RunStatus::Failed, "b-c")));
    assert_eq!(streak(&engine), Some(3));
    assert_eq!(last(&engine).as_deref(), Some("c-b"));
    // A success ends the streak; a failure older than it does not start
    // one again; skipped and started lines change neither.
    assert!(engine.observe_peer(&end("2026-11-29T03:00:00Z", RunStatus::Succeeded, "d-b")));
    assert_eq!(streak(&engine), Some(0));
    engine.observe_peer(&end("2026-11-29T02:30:00Z", RunStatus::Failed, "e-c"));
    assert_eq!(streak(&engine), Some(0));
    for status in [RunStatus::Skipped, RunStatus::Started] {
        engine.observe_peer(&end("2026-11-29T04:00:00Z", status, "f-b"));
    }
    assert_eq!(last(&engine).as_deref(), Some("d-b"));
    assert_eq!(streak(&engine), Some(0));
    // A job this node does not have is ignored.
    let mut other = end("2026-11-29T05:00:00Z", RunStatus::Failed, "g-b");
    other.job = Some("y".into());
    assert!(!engine.observe_peer(&other));
}

/// What a cluster node starting reads of other nodes' last runs is taken
/// only where newer than its own last run, with the store's streak.
#[test]
fn a_seeded_last_run_from_elsewhere_is_taken_only_when_newer() {
    let cfg = config(vec![job("x", "@yearly"), job("y", "@yearly")], 8);
    let mut engine = Engine::new(&cfg.plan(), 1);
    let t0 = at("2026-11-29T00:00:00Z");
    engine.seed_last(
        "x",
        LastRun {
            run: "own".into(),
            status: RunStatus::Succeeded,
            ended: at("2026-11-29T02:00:00Z"),
            duration: Duration::from_secs(1),
            exit_code: Some(0),
        },
        0,
    );
    engine.start(t0, Recovered::default());
    let end = |job: &str, ended: &str| {
        let mut rec = Record::new(Event::Run, at(ended));
        rec.job = Some(job.into());
        rec.run = Some(format!("{job}-b"));
        rec.status = Some(RunStatus::Failed);
        rec.started = Some(at(ended));
        rec.ended = Some(at(ended));
        rec
    };
    let status = |e: &Engine, job: &str| {
        let s = e.job_status(job).expect("a job");
        (s.consecutive_failures, s.last.map(|l| l.run))
    };
    // Older than x's own last run: not taken.
    assert!(!engine.seed_peer(&end("x", "2026-11-29T01:00:00Z"), 4));
    assert_eq!(status(&engine, "x"), (0, Some("own".into())));
    // y has none here: taken, with the store's streak.
    assert!(engine.seed_peer(&end("y", "2026-11-29T01:00:00Z"), 4));
    assert_eq!(status(&engine, "y"), (4, Some("y-b".into())));
    assert!(!engine.seed_peer(&end("z", "2026-11-29T01:00:00Z"), 1));
}
