//! The live views through the real daemon: per-job summaries, pages of
//! jobs (filters, sorts, cursors), the overview, a user's own view, and
//! the subscription's deltas (a run's end, a slow client, a client that
//! hangs up).

use serde_json::Value;

use crate::support::{Conn, Env};

/// 30 jobs: `job-00`..`job-29`, every third tagged `db`, `boom` (fails at
/// start), `fine` (succeeds at start), `off` (disabled).
fn many_jobs() -> String {
    let mut toml = String::new();
    for i in 0..30 {
        let tags = if i % 3 == 0 { "tags = [\"db\"]\n" } else { "" };
        toml.push_str(&format!(
            "[jobs.job-{i:02}]\nschedule = \"{} {} * * *\"\ncommand = \"true\"\n{tags}\n",
            i % 60,
            i % 24
        ));
    }
    toml.push_str("[jobs.boom]\nschedule = \"@reboot\"\ncommand = \"sleep 0.2; exit 3\"\n\n");
    toml.push_str("[jobs.fine]\nschedule = \"@reboot\"\ncommand = \"sleep 0.1\"\n\n");
    toml.push_str("[jobs.off]\nschedule = \"@daily\"\ncommand = \"true\"\nenabled = false\n");
    toml
}

fn ask(env: &Env, request: &str) -> Value {
    let answer = Conn::open(&env.socket())
        .ask(request)
        .unwrap_or_else(|| panic!("no answer to {request}"));
    assert_eq!(answer["ok"], true, "{request}: {answer}");
    answer["data"].clone()
}

fn names(page: &Value) -> Vec<String> {
    page["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pages_filters_and_cursors_through_the_daemon() {
    let env = Env::new();
    env.jobs(&many_jobs());
    let _d = env.daemon();
    env.wait_until("the start-up runs", || {
        !env.finals("boom").is_empty() && !env.finals("fine").is_empty()
    });

    // The default page: file order, everything.
    let page = ask(&env, r#"{"v":1,"op":"jobs"}"#);
    assert_eq!(page["matching"], 33);
    assert_eq!(names(&page).len(), 33);
    assert_eq!(names(&page)[0], "job-00");
    assert!(page.get("next").is_none());

    // Pages of 10 by name, followed through their cursors, cover every
    // job once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let request = match &cursor {
            None => r#"{"v":1,"op":"jobs","sort":"name","limit":10}"#.to_string(),
            Some(c) => format!(
                r#"{{"v":1,"op":"jobs","sort":"name","limit":10,"cursor":{}}}"#,
                serde_json::to_string(c).unwrap()
            ),
        };
        let page = ask(&env, &request);
        assert_eq!(page["matching"], 33);
        pages += 1;
        seen.extend(names(&page));
        match page.get("next").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, 4);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "each job once, by name");
    assert_eq!(seen.len(), 33);

    // Descending.
    let page = ask(
        &env,
        r#"{"v":1,"op":"jobs","sort":"name","descending":true,"limit":2}"#,
    );
    assert_eq!(names(&page), ["off", "job-29"]);

    // Filters: text (case-insensitive), tag, state, failing.
    let page = ask(&env, r#"{"v":1,"op":"jobs","text":"JOB-1"}"#);
    assert_eq!(page["matching"], 10);
    let page = ask(&env, r#"{"v":1,"op":"jobs","tag":"db","text":"job-2"}"#);
    assert_eq!(names(&page), ["job-21", "job-24", "job-27"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","state":"disabled"}"#);
    assert_eq!(names(&page), ["off"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","failing":true}"#);
    assert_eq!(names(&page), ["boom"]);

    // The summaries: outcomes, durations, last success and failure.
    let boom = &page["jobs"][0];
    assert_eq!(boom["outcomes"], "f");
    assert_eq!(boom["consecutive_failures"], 1);
    assert!(boom["last_duration_ms"].as_u64().unwrap() >= 200, "{boom}");
    assert!(boom["p95_ms"].as_u64().is_some());
    assert!(boom["last_failure"].is_string());
    assert!(boom.get("last_success").is_none_or(Value::is_null));
    let fine = ask(&env, r#"{"v":1,"op":"jobs","text":"fine"}"#)["jobs"][0].clone();
    assert_eq!(fine["outcomes"], "s");
    assert!(fine["last_success"].is_string());
    assert_eq!(fine["state"], "idle");
    assert_eq!(fine["schedule"], "@reboot");

    // Sorted by failures: the failing job first; by next fire: soonest.
    let page = ask(&env, r#"{"v":1,"op":"jobs","sort":"failures","limit":1}"#);
    assert_eq!(names(&page), ["boom"]);
    let page = ask(&env, r#"{"v":1,"op":"jobs","sort":"last_run","limit":2}"#);
    let mut two = names(&page);
    two.sort();
    assert_eq!(two, ["boom", "fine"]);
    let page = ask(
        &env,
        r#"{"v":1,"op":"jobs","sort":"next_fire","descending":true,"limit":3}"#,
    );
    // Jobs with no next fire come last, so first when descending.
    assert!(names(&page).contains(&"off".to_string()), "{page}");

    // Bad input is told clearly.
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","state":"sleeping"}"#)
        .unwrap();
    assert_eq!(bad["ok"], false);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("unknown state \"sleeping\""),
        "{bad}"
    );
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","sort":"failures","cursor":"name:0:job-03"}"#)
        .unwrap();
    assert!(
        bad["error"].as_str().unwrap().contains("sorted by name"),
        "{bad}"
    );
    let bad = Conn::open(&env.socket())
        .ask(r#"{"v":1,"op":"jobs","limit":0}"#)
        .unwrap();
    assert!(bad["error"].as_str().unwrap().contains("limit"), "{bad}");
    // A limit past the maximum is cut to it, not refused.
    let page = ask(&env, r#"{"v":1,"op":"jobs","limit":100000}"#);
    assert_eq!(names(&page).len(), 33);
}

#[test]
fn the_overview_counts_and_lists_what_matters() {
    let env = Env::new();
    env.jobs(&format!(
        "{}\n[jobs.long]\nschedule = \"@reboot\"\ncommand = \"sleep 30\"\nkill_grace = \"1s\"\n",
        many_jobs()
    ));
    let _d = env.daemon();
    env.wait_until("the start-up runs", || {
        !env.finals("boom").is_empty() && !env.finals("fine").is_empty()
    });
    env.rea(&["pause", "job-05"]).ok();
    let o = ask(&env, r#"{"v":1,"op":"overview"}"#);
    assert_eq!(o["counts"]["jobs"], 34);
    assert_eq!(o["counts"]["running"], 1, "{o}");
    assert_eq!(o["counts"]["paused"], 1);
    assert_eq!(o["counts"]["disabled"], 1);
    assert_eq!(o["counts"]["failing"], 1);
    assert_eq!(o["running"][0]["job"], "long");
    assert!(o["running"][0]["pid"].is_u64());
    assert_eq!(o["failing"][0]["name"], "boom");
    assert_eq!(o["next_due"].as_array().unwrap().len(), 10);
    let firsts: Vec<&str> = o["next_due"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["at"].as_str().unwrap())
        .collect();
    let mut sorted = firsts.clone();
    sorted.sort();
    assert_eq!(firsts, sorted, "soonest first");
    assert_eq!(o["daemon"]["running"], true);
}
