//! Webhooks and pings (`webhook`, `ping`): a small HTTP server in the test
//! (a std listener on 127.0.0.1, a thread per connection, every request
//! recorded) stands in for the webhook's receiver and for the ping service;
//! it answers as scripted (500s, a slow answer), or is not there at all
//! (connection refused) or never answers (a listener that never accepts).

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::metrics::{endpoint, scrape};
use crate::support::{instant, skip_unless_root, throwaway_user, Env};

/// A request as the server read it.
#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Req {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// How the server answers a request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// Waits this long, then answers 200 (the client has long gone).
    Slow(Duration),
}

struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Req>>>,
    /// Answers to the next requests, in order; 200 when none is left.
    script: Arc<Mutex<VecDeque<Answer>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, sc, st) = (seen.clone(), script.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (s, sc) = (s.clone(), sc.clone());
                std::thread::spawn(move || serve(conn, &s, &sc));
            }
        });
        Server {
            addr,
            seen,
            script,
            stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn script(&self, answers: &[Answer]) {
        self.script.lock().unwrap().extend(answers.iter().copied());
    }

    fn requests(&self) -> Vec<Req> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests once there are at least `n` whose path starts with `prefix`.
    fn wait_for(&self, env: &Env, n: usize, prefix: &str) -> Vec<Req> {
        env.wait_until(&format!("{n} request(s) to {prefix}"), || {
            self.requests()
                .iter()
                .filter(|r| r.path.starts_with(prefix))
                .count()
                >= n
        });
        self.requests()
            .into_iter()
            .filter(|r| r.path.starts_with(prefix))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<Req>>, script: &Mutex<VecDeque<Answer>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    seen.lock().unwrap().push(Req {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let answer = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Answer::Status(200));
    let code = match answer {
        Answer::Status(c) => c,
        Answer::Slow(d) => {
            std::thread::sleep(d);
            200
        }
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK"
    );
}

/// An address where nothing listens: connections are refused.
fn refused_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/down")
}

/// `rea_webhook_deliveries_total{kind,result}` as the endpoint shows it.
fn deliveries(addr: &str, kind: &str, result: &str) -> u64 {
    counter(
        &scrape(addr),
        &format!("rea_webhook_deliveries_total{{kind=\"{kind}\",result=\"{result}\"}}"),
    )
}

fn counter(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[test]
fn a_failure_is_posted_with_its_body_and_headers_and_a_success_is_not() {
    let server = Server::start();
    let env = Env::new();
    env.jobs(&format!(
        "[defaults]\nwebhook = [{{ url = \"{fail}\", on = [\"failure\"] }}, {{ url = \"{ok}\", on = [\"success\"] }}]\n\
         [jobs.fails]\nschedule = \"@yearly\"\ncommand = \"echo starting; echo oops >&2; exit 3\"\n\
         [jobs.works]\nschedule = \"@yearly\"\ncommand = \"echo fine\"\n",
        fail = server.url("/failure"),
        ok = server.url("/success"),
    ));
    let d = env.daemon();
    env.rea(&["trigger", "fails", "--wait"]).code(3);
    env.rea(&["trigger", "works", "--wait"]).ok();
    let failures = server.wait_for(&env, 1, "/failure");
    let successes = server.wait_for(&env, 1, "/success");
    // The success went to its hook only, the failure to its own.
    std::thread::sleep(Duration::from_millis(500));
    let all = server.requests();
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(successes[0].json()["job"], "works");

    let r = &failures[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("x-rea-event"), "failure");
    assert_eq!(r.header("x-rea-attempt"), "1");
    assert!(!r.header("x-rea-delivery").is_empty());
    assert!(r.header("user-agent").starts_with("rea/"), "{r:?}");
    let body = r.json();
    let record = &env.finals("fails")[0];
    assert_eq!(body["v"], 1);
    assert_eq!(body["kind"], "run");
    assert_eq!(body["event"], "failure");
    assert_eq!(body["job"], "fails");
    assert_eq!(body["tenant"], Value::Null);
    assert_eq!(body["run"], record["run"]);
    assert_eq!(body["status"], "failed");
    assert_eq!(body["exit_code"], 3);
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["trigger"], "manual");
    assert_eq!(body["started"], record["started"]);
    assert_eq!(body["ended"], record["ended"]);
    assert_eq!(body["duration_ms"], record["duration_ms"]);
    assert!(body["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert_eq!(body["output"]["tail"], record["output"]);
    assert!(
        body["output"]["tail"].as_str().unwrap().contains("oops"),
        "{body}"
    );
    assert_eq!(body["output"]["truncated"], false);
    drop(d);
}

#[test]
fn an_endpoint_answering_500_is_retried_until_it_answers_200() {
    let server = Server::start();
    server.script(&[Answer::Status(500), Answer::Status(503)]);
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.fails]\nschedule = \"@yearly\"\ncommand = \"exit 1\"\nwebhook = {{ url = \"{}\" }}\n",
        server.url("/hook")
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "fails", "--wait"]).code(1);
    let seen = server.wait_for(&env, 3, "/hook");
    std::thread::sleep(Duration::from_millis(300));
    let seen_now = server.requests();
    assert_eq!(seen_now.len(), 3, "no attempt after the 200: {seen_now:#?}");
    let ids: Vec<&str> = seen.iter().map(|r| r.header("x-rea-delivery")).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one delivery: {ids:?}");
    let attempts: Vec<&str> = seen.iter().map(|r| r.header("x-rea-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert!(seen.iter().all(|r| r.body == seen[0].body));
}

#[test]
fn a_slow_endpoint_times_out_and_is_retried() {
    let server = Server::start();
    server.script(&[Answer::Slow(Duration::from_secs(4))]);
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.fails]\nschedule = \"@yearly\"\ncommand = \"exit 1\"\nwebhook = {{ url = \"{}\", timeout = \"1s\" }}\n",
        server.url("/slow")
    ));
    let d = env.daemon();
    env.rea(&["trigger", "fails", "--wait"]).code(1);
    let seen = server.wait_for(&env, 2, "/slow");
    assert_eq!(seen[1].header("x-rea-attempt"), "2");
    assert_eq!(
        seen[0].header("x-rea-delivery"),
        seen[1].header("x-rea-delivery")
    );
    env.wait_until("the timeout logged", || d.log_text().contains("timeout"));
}

/// Every job's webhooks point at an endpoint that refuses connections and
/// at one that never answers, while a job runs every second: its runs
/// start on time all along (the history's started vs scheduled), and the
/// deliveries are retried, given up and counted.
#[test]
fn a_down_or_silent_endpoint_is_retried_bounded_and_counted_and_scheduling_stays_on_time() {
    // Accepts no connection: each attempt waits out its timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/silent", silent.local_addr().unwrap());
    let env = Env::new();
    env.jobs(&format!(
        "[daemon]\nmetrics = \"127.0.0.1:0\"\n\
         [defaults]\nwebhook = [{{ url = \"{down}\", on = \"end\", attempts = 2 }}, {{ url = \"{silent_url}\", on = [\"start\", \"end\"], timeout = \"2s\", attempts = 2 }}]\n\
         ping = {{ url = \"{down}\", attempts = 3 }}\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.other]\nschedule = \"* * * * * *\"\ncommand = \"exit 1\"\n",
        down = refused_url(),
    ));
    let d = env.daemon();
    let metrics = endpoint(&d);
    env.wait_until("deliveries given up", || {
        deliveries(&metrics, "webhook", "failed") >= 4
            && deliveries(&metrics, "ping", "failed") >= 2
    });
    env.wait_until("eight runs of tick", || env.finals("tick").len() >= 8);
    let text = scrape(&metrics);
    assert!(
        counter(&text, "rea_webhook_retries_total{kind=\"webhook\"}") >= 4,
        "{text}"
    );
    assert_eq!(deliveries(&metrics, "webhook", "delivered"), 0);
    assert!(text.contains("rea_webhook_queued "), "{text}");
    d.stop();
    let late: Vec<i64> = env
        .finals("tick")
        .iter()
        .filter(|r| r["trigger"] == "schedule")
        .map(|r| (instant(r, "started") - instant(r, "scheduled")).num_milliseconds())
        .collect();
    eprintln!("lateness of tick with dead webhooks (ms): {late:?}");
    assert!(late.len() >= 8, "{late:?}");
    assert!(
        late.iter().all(|ms| (-100..1_000).contains(ms)),
        "runs started late while webhooks were failing: {late:?}"
    );
    drop(silent);
}

#[test]
fn pings_go_in_order_start_then_success_or_the_exit_code_with_the_output() {
    let server = Server::start();
    // The first start ping fails: its end must still come after it.
    server.script(&[Answer::Status(500)]);
    let env = Env::new();
    env.jobs(&format!(
        "[jobs.good]\nschedule = \"@yearly\"\ncommand = \"echo all good\"\nping = \"{good}\"\n\
         [jobs.bad]\nschedule = \"@yearly\"\ncommand = \"echo disk full; exit 7\"\nping = \"{bad}\"\n\
         [jobs.killed]\nschedule = \"@yearly\"\ncommand = \"sleep 30\"\ntimeout = \"1s\"\nkill_grace = \"1s\"\nping = \"{killed}\"\n",
        good = server.url("/hc/good-uuid"),
        bad = server.url("/hc/bad-uuid"),
        killed = server.url("/hc/killed-uuid"),
    ));
    let _d = env.daemon();
    env.rea(&["trigger", "good", "--wait"]).ok();
    let good = server.wait_for(&env, 3, "/hc/good-uuid");
    let paths: Vec<&str> = good.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/hc/good-uuid/start",
            "/hc/good-uuid/start",
            "/hc/good-uuid"
        ],
        "the start, retried, then the success"
    );
    assert!(good.iter().all(|r| r.method == "POST"));
    assert_eq!(good[2].body, "all good\n");

    env.rea(&["trigger", "bad", "--wait"]).code(7);
    let bad = server.wait_for(&env, 2, "/hc/bad-uuid");
    let paths: Vec<&str> = bad.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/hc/bad-uuid/start", "/hc/bad-uuid/7"]);
    assert!(bad[1].body.contains("disk full\n"), "{:?}", bad[1].body);
    assert!(bad[1].body.contains("failed (exit 7)"), "{:?}", bad[1].body);
    assert_eq!(bad[1].header("content-type"), "text/plain; charset=utf-8");

    env.rea(&["trigger", "killed", "--wait"]);
    let killed = server.wait_for(&env, 2, "/hc/killed-uuid");
    assert_eq!(killed[1].path, "/hc/killed-uuid/fail");
    assert!(killed[1].body.contains("timed_out"), "{:?}", killed[1].body);
}

#[test]
fn bad_webhooks_and_pings_are_located_by_rea_check() {
    let env = Env::new();
    let err = env.check_fails(
        "[jobs.a]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
         webhook = { url = \"file:///etc/passwd\", on = [\"sucess\"] }\nping = \"hc-ping.com/x\"\n",
    );
    assert!(
        err.contains("jobs.toml:4:19: \"webhook.url\" must be http:// or https://, found \"file\""),
        "{err}"
    );
    assert!(
        err.contains("unknown webhook event \"sucess\"")
            && err.contains("did you mean \"success\"?"),
        "{err}"
    );
    assert!(
        err.contains("jobs.toml:5:8: \"ping\" is not a URL"),
        "{err}"
    );
}

/// A user's webhook may not reach the machine's own addresses (the
/// daemon's, its neighbours' services, a cloud's metadata server) unless
/// root allows it in `[daemon]`; the system's jobs may.
#[test]
fn a_users_webhook_to_loopback_is_refused_unless_root_allows_it() {
    if skip_unless_root("a_users_webhook_to_loopback_is_refused_unless_root_allows_it") {
        return;
    }
    const USER: &str = "rea-wh-alice";
    let server = Server::start();
    let env = crate::users::shared_env(&format!(
        "[daemon]\nmetrics = \"127.0.0.1:0\"\n[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"exit 2\"\nwebhook = {{ url = \"{}\" }}\n",
        server.url("/sys")
    ));
    throwaway_user(USER).expect("user");
    let f = env.write(
        &format!("users/{USER}.toml"),
        &format!(
            "[jobs.mine]\nschedule = \"@yearly\"\ncommand = \"exit 2\"\nwebhook = {{ url = \"{}\" }}\n",
            server.url("/hers")
        ),
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let d = env.daemon();
    let metrics = endpoint(&d);
    let hers = format!("{USER}/mine");
    env.rea(&["trigger", "sys", "--wait"]).code(2);
    env.rea(&["trigger", &hers, "--wait"]).code(2);
    server.wait_for(&env, 1, "/sys");
    env.wait_until("her webhook refused", || {
        deliveries(&metrics, "webhook", "refused") == 1
    });
    assert!(
        d.log_text().contains("is not a public address"),
        "{}",
        d.log_text()
    );
    assert!(server
        .requests()
        .iter()
        .all(|r| !r.path.starts_with("/hers")));

    // Root allows it: her next failure is delivered, in her own words.
    let main = env.read("jobs.toml");
    env.jobs(&main.replace("[daemon]\n", "[daemon]\nwebhook_private_targets = true\n"));
    env.rea(&["reload"]).ok();
    env.rea(&["trigger", &hers, "--wait"]).code(2);
    let delivered = server.wait_for(&env, 1, "/hers");
    let body = delivered[0].json();
    assert_eq!(body["job"], "mine");
    assert_eq!(body["tenant"], USER);
}

/// One user's webhooks to an endpoint that never answers hold at most her
/// share of the senders: another user's delivery goes out while hers are
/// all still waiting out their timeouts (none has failed yet).
#[test]
fn one_users_silent_endpoint_does_not_hold_up_another_users_deliveries() {
    if skip_unless_root("one_users_silent_endpoint_does_not_hold_up_another_users_deliveries") {
        return;
    }
    const ALICE: &str = "rea-wh-alice";
    const BOB: &str = "rea-wh-bob";
    let server = Server::start();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/silent", silent.local_addr().unwrap());
    let env = crate::users::shared_env(
        "[daemon]\nmetrics = \"127.0.0.1:0\"\nwebhook_private_targets = true\n\
         [jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    throwaway_user(ALICE).expect("user");
    throwaway_user(BOB).expect("user");
    let hers: String = (0..10)
        .map(|i| {
            format!(
                "[jobs.j{i}]\nschedule = \"@yearly\"\ncommand = \"exit 1\"\n\
                 webhook = {{ url = \"{silent_url}\", timeout = \"20s\", attempts = 1 }}\n"
            )
        })
        .collect();
    let his = format!(
        "[jobs.his]\nschedule = \"@yearly\"\ncommand = \"exit 1\"\nwebhook = {{ url = \"{}\" }}\n",
        server.url("/bob")
    );
    for (user, text) in [(ALICE, hers.as_str()), (BOB, his.as_str())] {
        let f = env.write(&format!("users/{user}.toml"), text);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let d = env.daemon();
    let metrics = endpoint(&d);
    for i in 0..10 {
        env.rea(&["trigger", &format!("{ALICE}/j{i}"), "--wait"])
            .code(1);
    }
    env.rea(&["trigger", &format!("{BOB}/his"), "--wait"])
        .code(1);
    let got = server.wait_for(&env, 1, "/bob");
    assert_eq!(got[0].json()["tenant"], BOB);
    let text = scrape(&metrics);
    assert_eq!(
        deliveries(&metrics, "webhook", "failed"),
        0,
        "bob's delivery waited for alice's to fail:\n{text}"
    );
    assert!(
        counter(&text, "rea_webhook_queued ") >= 10,
        "alice's are still queued:\n{text}"
    );
    drop(d);
    drop(silent);
}
