//! `rea run`: runs start on time, are recorded, and cannot hurt the daemon.

use crate::support::Env;

#[test]
fn runs_are_recorded_with_their_fields() {
    let env = Env::new();
    env.jobs("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo hello from $REA_JOB\"\n");
    let d = env.daemon();
    env.wait_until("two runs", || env.runs("tick", "succeeded").len() >= 2);
    assert_eq!(d.stop(), 0);
    let run = &env.runs("tick", "succeeded")[0];
    assert_eq!(run["output"], "hello from tick\n");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["trigger"], "schedule");
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["v"], 1);
    for field in [
        "ts",
        "scheduled",
        "started",
        "ended",
        "duration_ms",
        "run",
        "pid",
        "max_rss_kb",
    ] {
        assert!(!run[field].is_null(), "{field} missing in {run}");
    }
    assert_eq!(env.events("daemon_stopped").len(), 1);
}
