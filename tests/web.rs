//! The web console (`web.sock`, `[daemon] web_listen`, `rea web`): its
//! pages in headless Chromium (Debian's `chromium`; these tests skip
//! loudly by name without it), its actions, a live update arriving in an
//! open page without a reload (a run's start and end, a running run's
//! output as it is printed), and its refusals: a forged Host, a
//! cross-origin POST, a POST without its CSRF token, another tenant's job,
//! run or run's output by URL, and an action by a read-only viewer.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{skip_unless_root, throwaway_user, wait_until, Env, PATIENCE};
use crate::users::{shared_env, user_file};

/// An HTTP answer.
#[derive(Debug)]
struct Http {
    status: u16,
    head: String,
    body: String,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends `raw` on `stream` and reads the answer to its end.
fn exchange(mut s: UnixStream, raw: &str) -> Http {
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(raw.as_bytes()).expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Http {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// Connects to `sock` as `uid`/`gid`: a thread of ours takes those ids
/// (the raw system calls change the calling thread's only, unlike libc's
/// wrappers) and connects, so the daemon's SO_PEERCRED sees that user.
fn connect_as(sock: &Path, ids: Option<(u32, u32)>) -> UnixStream {
    let Some((uid, gid)) = ids else {
        return UnixStream::connect(sock).expect("connect to web.sock");
    };
    let sock = sock.to_path_buf();
    std::thread::spawn(move || {
        // SAFETY: plain system calls on this thread's credentials; the
        // thread ends right after.
        unsafe {
            assert_eq!(libc::syscall(libc::SYS_setresgid, gid, gid, gid), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
        }
        UnixStream::connect(&sock).expect("connect to web.sock as a user")
    })
    .join()
    .expect("connecting thread")
}

/// A browser's conversation with `web.sock`, as one user: it keeps the
/// session cookie and reads the CSRF token from the pages.
struct Client {
    sock: PathBuf,
    ids: Option<(u32, u32)>,
    cookie: Option<String>,
}

impl Client {
    fn new(env: &Env, ids: Option<(u32, u32)>) -> Client {
        Client {
            sock: env.state().join("web.sock"),
            ids,
            cookie: None,
        }
    }

    fn send(&mut self, raw: &str) -> Http {
        let r = exchange(connect_as(&self.sock, self.ids), raw);
        if let Some(c) = r.header("set-cookie") {
            self.cookie = c.split(';').next().map(str::to_string);
        }
        r
    }

    fn cookie_line(&self) -> String {
        self.cookie
            .as_ref()
            .map(|c| format!("Cookie: {c}\r\n"))
            .unwrap_or_default()
    }

    fn get(&mut self, path: &str) -> Http {
        let raw = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
            self.cookie_line()
        );
        self.send(&raw)
    }

    /// A form POST with `extra` headers.
    fn post(&mut self, path: &str, form: &str, extra: &str) -> Http {
        let raw = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\n{}{extra}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            self.cookie_line(),
            form.len()
        );
        self.send(&raw)
    }

    /// The page's CSRF token (opening it first makes the session).
    fn csrf(&mut self, page: &str) -> String {
        let r = self.get(page);
        assert_eq!(r.status, 200, "{page}: {}", r.body);
        csrf_of(&r.body).unwrap_or_else(|| panic!("no CSRF token on {page}:\n{}", r.body))
    }

    /// POSTs a form with this session's token, as the page's own form does.
    fn act(&mut self, page: &str, action: &str) -> Http {
        let token = self.csrf(page);
        self.post(
            action,
            &format!("csrf={token}"),
            "Origin: http://localhost\r\nSec-Fetch-Site: same-origin\r\n",
        )
    }
}

fn csrf_of(body: &str) -> Option<String> {
    let at = body.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    Some(body[at..].split('"').next()?.to_string())
}

fn chromium(test: &str) -> Option<&'static str> {
    let found = rea_testkit::chromium::find();
    if found.is_none() {
        eprintln!(
            "\n*** SKIPPED {test}: chromium is not installed (apt-get install chromium) ***\n"
        );
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A job file with `jobs` and the console on a free loopback port.
fn with_tcp(jobs: &str) -> (String, u16) {
    let port = free_port();
    (
        format!("[daemon]\nweb_listen = \"127.0.0.1:{port}\"\n\n{jobs}"),
        port,
    )
}

/// A one-time login link from `rea web`, going to `next`.
fn login(env: &Env, next: &str) -> String {
    let run = env.rea(&["web"]);
    run.ok();
    let url = run.stdout.trim().to_string();
    assert!(url.contains("/login?t="), "rea web printed {url:?}");
    format!("{url}&next={next}")
}

/// The DOM Chromium built for `url`, its scripts run.
fn dump_dom(browser: &str, env: &Env, url: &str) -> String {
    let profile = env.path("chromium-profile");
    let out = rea_testkit::chromium::command(browser, &profile)
        .arg("--dump-dom")
        .arg(url)
        .stdout(Stdio::piped())
        .output()
        .expect("run chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const JOBS: &str = r#"
[jobs.backup]
schedule = "30 2 * * *"
command = "echo backing up; echo done"
tags = ["nightly"]

[jobs.flaky]
schedule = "*/10 * * * *"
command = "echo oops >&2; exit 3"
"#;

#[test]
fn each_page_shows_what_the_daemon_holds_in_chromium() {
    let Some(browser) = chromium("web::each_page_shows_what_the_daemon_holds_in_chromium") else {
        return;
    };
    let env = Env::new();
    let (jobs, _) = with_tcp(JOBS);
    env.jobs(&jobs);
    let _d = env.daemon();
    env.rea(&["trigger", "--wait", "backup"]);
    env.rea(&["trigger", "--wait", "flaky"]);
    env.rea(&["submit", "--in", "1h", "--", "true"]).ok();
    let run = env.finals("backup")[0]["run"].as_str().unwrap().to_string();

    let page = |next: &str| dump_dom(browser, &env, &login(&env, next));
    let overview = page("/");
    assert!(overview.contains("<h1>Overview</h1>"), "{overview}");
    assert!(overview.contains("<b>2</b> jobs"), "{overview}");
    assert!(overview.contains("<b>1</b> failing"), "{overview}");
    assert!(overview.contains("href=\"/job/flaky\""), "{overview}");

    let jobs = page("/jobs?sort=name");
    assert!(jobs.contains("2 matching jobs"), "{jobs}");
    let (b, f) = (
        jobs.find("data-job=\"backup\""),
        jobs.find("data-job=\"flaky\""),
    );
    assert!(b.is_some() && b < f, "sorted by name: {jobs}");
    assert!(jobs.contains("<svg class=\"spark\""), "a sparkline: {jobs}");
    let filtered = page("/jobs?q=flak");
    assert!(
        filtered.contains("1 matching jobs") && !filtered.contains("data-job=\"backup\""),
        "{filtered}"
    );

    let job = page("/job/backup");
    assert!(
        job.contains("every day at 02:30"),
        "schedule in words: {job}"
    );
    assert_eq!(job.matches("<li>").count(), 10, "the next 10 fires: {job}");
    assert!(
        job.contains("<img class=\"heat\" src=\"/job/backup/heatmap.svg\""),
        "{job}"
    );
    assert!(
        job.contains(&format!("href=\"/run/{run}\"")),
        "history: {job}"
    );

    let run_page = page(&format!("/run/{run}"));
    assert!(run_page.contains("backing up\ndone"), "output: {run_page}");

    let timeline = page("/timeline");
    assert!(timeline.contains("<svg class=\"gantt\""), "{timeline}");
    assert!(timeline.contains(">backup<"), "{timeline}");

    let oneshots = page("/oneshots");
    assert!(oneshots.contains("1 pending"), "{oneshots}");

    let nodes = page("/nodes");
    assert!(nodes.contains("local mode"), "{nodes}");

    let audit = page("/audit");
    assert!(audit.contains("<td>trigger</td><td>backup</td>"), "{audit}");
    assert!(audit.contains("<td>cli</td>"), "{audit}");

    // Without a login link, TCP shows the way in and nothing else.
    let port = jobs_port(&env);
    let anon = dump_dom(browser, &env, &format!("http://127.0.0.1:{port}/jobs"));
    assert!(
        anon.contains("rea web") && !anon.contains("backup"),
        "{anon}"
    );
}

fn jobs_port(env: &Env) -> u16 {
    let text = env.read("jobs.toml");
    let at = text.find("127.0.0.1:").expect("web_listen") + "127.0.0.1:".len();
    text[at..].split('"').next().unwrap().parse().unwrap()
}

#[test]
fn each_action_takes_effect_and_is_audited_as_web() {
    let env = Env::new();
    env.jobs(&format!(
        "{JOBS}\n[jobs.long]\nschedule = \"@yearly\"\ncommand = \"sleep 300\"\nkill_grace = \"1s\"\n"
    ));
    let _d = env.daemon();
    let mut c = Client::new(&env, None);

    let r = c.act("/job/backup", "/job/backup/trigger");
    assert_eq!(r.status, 303, "{r:?}");
    assert!(r.header("location").unwrap().contains("triggered"), "{r:?}");
    env.wait_until("the triggered run", || !env.finals("backup").is_empty());
    let heat = c.get("/job/backup/heatmap.svg");
    assert_eq!(heat.status, 200, "{heat:?}");
    assert_eq!(heat.header("content-type"), Some("image/svg+xml"));
    assert_eq!(heat.body.matches("<rect ").count(), 90, "{}", heat.body);
    assert_eq!(
        heat.body.matches("fill=\"#40c463\"").count(),
        1,
        "today's run: {}",
        heat.body
    );

    assert_eq!(c.act("/job/backup", "/job/backup/pause").status, 303);
    assert!(env.rea(&["status", "backup"]).stdout.contains("paused"));
    let page = c.get("/job/backup").body;
    assert!(
        page.contains("(paused)") && page.contains("/job/backup/resume"),
        "{page}"
    );
    assert_eq!(c.act("/job/backup", "/job/backup/resume").status, 303);
    assert!(!env.rea(&["status", "backup"]).stdout.contains("paused"));

    env.rea(&["submit", "--in", "1h", "--", "true"]).ok();
    let oneshots = c.get("/oneshots").body;
    let at = oneshots
        .find("action=\"/oneshot/")
        .expect("a cancel button")
        + "action=\"".len();
    let cancel = oneshots[at..].split('"').next().unwrap().to_string();
    assert_eq!(c.act("/oneshots", &cancel).status, 303);
    assert!(c.get("/oneshots").body.contains("0 pending"));

    env.rea(&["trigger", "long"]).ok();
    env.wait_until("long to run", || {
        env.rea(&["status", "long"]).stdout.contains("running")
    });
    let page = c.get("/job/long").body;
    let at = page.find("action=\"/run/").expect("a kill button") + "action=\"".len();
    let kill = page[at..].split('"').next().unwrap().to_string();
    assert_eq!(c.act("/job/long", &kill).status, 303);
    env.wait_until("the killed run", || !env.runs("long", "killed").is_empty());

    let audit = env.rea(&["audit", "--json"]);
    let entries: Vec<serde_json::Value> = audit
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let web: Vec<&str> = entries
        .iter()
        .filter(|e| e["source"] == "web")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for action in ["trigger", "pause", "resume", "cancel", "kill"] {
        assert!(web.contains(&action), "{action} by the web in {audit:?}");
    }
}

#[test]
fn forged_host_cross_origin_and_missing_csrf_are_refused() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let mut c = Client::new(&env, None);
    let token = c.csrf("/job/backup");

    // DNS rebinding: another site's name in Host.
    for host in [
        "evil.example",
        "localhost.evil.example",
        "127.0.0.1.nip.io:8080",
    ] {
        let r = c.send(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 421, "Host {host}: {r:?}");
        assert!(!r.body.contains("backup"));
    }
    let r = c.send("GET / HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 421, "no Host: {r:?}");

    // A page of another origin posting the form (with a stolen token, even).
    let r = c.post(
        "/job/backup/trigger",
        &format!("csrf={token}"),
        "Origin: http://evil.example\r\n",
    );
    assert_eq!(r.status, 403, "{r:?}");
    let r = c.post(
        "/job/backup/trigger",
        &format!("csrf={token}"),
        "Sec-Fetch-Site: cross-site\r\n",
    );
    assert_eq!(r.status, 403, "{r:?}");
    // Same origin, no token or a wrong one.
    let r = c.post("/job/backup/trigger", "", "Origin: http://localhost\r\n");
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("CSRF"), "{r:?}");
    let r = c.post(
        "/job/backup/trigger",
        "csrf=0000",
        "Origin: http://localhost\r\n",
    );
    assert_eq!(r.status, 403, "{r:?}");
    // Another session's token is not this one's.
    let mut other = Client::new(&env, None);
    let r = other.post(
        "/job/backup/trigger",
        &format!("csrf={token}"),
        "Origin: http://localhost\r\n",
    );
    assert_eq!(r.status, 403, "{r:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(env.finals("backup").is_empty(), "nothing ran");

    // The headers every answer carries; no CORS, ever.
    let r = c.get("/");
    assert!(r
        .header("set-cookie")
        .is_none_or(|v| v.contains("HttpOnly") && v.contains("SameSite=Strict")));
    assert!(r.header("content-security-policy").is_some());
    assert!(r.header("x-frame-options") == Some("DENY"));
    assert!(
        !r.head.to_ascii_lowercase().contains("access-control-allow"),
        "{}",
        r.head
    );
    let fresh = Client::new(&env, None).get("/");
    let cookie = fresh.header("set-cookie").expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    // Bounded requests: a huge head, chunked bodies, a silent client.
    let r = c.send(&format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    ));
    assert_eq!(r.status, 431);
    let r = c.send("POST /job/backup/trigger HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    assert_eq!(r.status, 411);
    let r = c.send("GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999\r\n\r\n");
    assert_eq!(r.status, 413);
    // The login link is for rea web only: a page cannot ask for one.
    let r = c.post("/login-link", "", "Origin: http://localhost\r\n");
    assert_eq!(r.status, 400, "{r:?}");
}

#[test]
fn a_login_link_is_good_once_and_tcp_needs_one() {
    let env = Env::new();
    let (jobs, port) = with_tcp(JOBS);
    env.jobs(&jobs);
    let _d = env.daemon();
    let tcp = |raw: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(raw.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let anon = tcp(&format!(
        "GET /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    ));
    assert!(anon.starts_with("HTTP/1.1 401"), "{anon}");
    assert!(!anon.contains("backup"));
    let url = login(&env, "/jobs");
    let path = &url[url.find("/login").unwrap()..];
    let first = tcp(&format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    ));
    assert!(first.starts_with("HTTP/1.1 303"), "{first}");
    assert!(first.contains("Location: /jobs\r\n"), "{first}");
    let cookie = first
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let again = tcp(&format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    ));
    assert!(
        again.starts_with("HTTP/1.1 401"),
        "a link is good once: {again}"
    );
    let jobs = tcp(&format!(
        "GET /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n"
    ));
    assert!(
        jobs.starts_with("HTTP/1.1 200") && jobs.contains("data-job=\"backup\""),
        "{jobs}"
    );
    // An open redirect is not: `next` stays on this console.
    let url = login(&env, "//evil.example/");
    let path = &url[url.find("/login").unwrap()..];
    let r = tcp(&format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    ));
    assert!(r.contains("Location: /\r\n"), "{r}");
}

#[test]
fn a_tenant_cannot_open_another_tenants_job_or_run() {
    if skip_unless_root("web::a_tenant_cannot_open_another_tenants_job_or_run") {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"echo root-secret\"\n");
    let alice = throwaway_user("rea-alice").expect("user");
    let bob = throwaway_user("rea-bob").expect("user");
    for (user, job, secret) in [
        ("rea-alice", "hers", "alice-secret"),
        ("rea-bob", "his", "bob-secret"),
    ] {
        let f = env.write(
            &format!("users/{user}.toml"),
            &format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"echo {secret}\"\n"),
        );
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let _d = env.daemon();
    env.rea(&["trigger", "--wait", "rea-bob/his"]).ok();
    env.rea(&["trigger", "--wait", "sys"]).ok();
    let his_run = env.finals("rea-bob/his")[0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    let sys_run = env.finals("sys")[0]["run"].as_str().unwrap().to_string();

    let mut a = Client::new(&env, Some(alice));
    let mine = a.get("/jobs");
    assert_eq!(mine.status, 200, "{mine:?}");
    assert!(mine.body.contains("data-job=\"hers\""), "{}", mine.body);
    assert!(
        !mine.body.contains("his") && !mine.body.contains("sys"),
        "{}",
        mine.body
    );
    for path in [
        "/job/rea-bob%2Fhis".to_string(),
        "/job/rea-bob%2Fhis/heatmap.svg".to_string(),
        "/job/sys/heatmap.svg".to_string(),
        "/job/his".to_string(),
        "/job/sys".to_string(),
        format!("/run/{his_run}"),
        format!("/run/{sys_run}"),
    ] {
        let r = a.get(&path);
        assert!(r.status == 404 || r.status == 403, "{path}: {r:?}");
        assert!(
            !r.body.contains("bob-secret") && !r.body.contains("root-secret"),
            "{path}: {}",
            r.body
        );
    }
    // Nor act on them.
    let token = a.csrf("/job/hers");
    for action in [
        "/job/rea-bob%2Fhis/trigger",
        "/job/sys/pause",
        &format!("/run/{sys_run}/kill"),
    ] {
        let r = a.post(
            action,
            &format!("csrf={token}"),
            "Origin: http://localhost\r\n",
        );
        assert!(
            r.status == 404 || r.header("location").is_some_and(|l| l.contains("refused")),
            "{action}: {r:?}"
        );
    }
    assert_eq!(env.finals("rea-bob/his").len(), 1);
    assert!(!env.rea(&["status", "sys"]).stdout.contains("paused"));
    // Her own, she may.
    assert_eq!(a.act("/job/hers", "/job/hers/trigger").status, 303);
    env.wait_until("her run", || !env.finals("rea-alice/hers").is_empty());
    let _ = bob;
}

#[test]
fn the_viewer_role_cannot_act() {
    if skip_unless_root("web::the_viewer_role_cannot_act") {
        return;
    }
    let env = shared_env("[daemon]\nweb_viewers = [\"rea-alice\"]\n");
    let alice = throwaway_user("rea-alice").expect("user");
    let f = env.write(
        "users/rea-alice.toml",
        "[jobs.hers]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let _d = env.daemon();
    let mut a = Client::new(&env, Some(alice));
    let page = a.get("/job/hers");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("(read-only)"), "{}", page.body);
    assert!(
        !page.body.contains("<form class=\"act\""),
        "no buttons: {}",
        page.body
    );
    // A hand-made POST with her session's token is refused all the same.
    a.get("/job/hers");
    let cookie_only = a.cookie.clone();
    assert!(cookie_only.is_some());
    let r = a.post(
        "/job/hers/trigger",
        "csrf=x",
        "Origin: http://localhost\r\n",
    );
    assert_eq!(r.status, 403, "{r:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(env.finals("rea-alice/hers").is_empty());
    // The CLI is not the console: her role there is unchanged.
    let _ = Instant::now();
}

/// Chromium over the DevTools protocol (`rea_testkit::chromium`), its
/// errors a test's failure.
struct Devtools(rea_testkit::chromium::Devtools);

impl Devtools {
    fn eval(&mut self, expr: &str) -> serde_json::Value {
        self.0
            .eval(expr)
            .unwrap_or_else(|e| panic!("chromium: {e}"))
    }

    /// Chromium on `page` of the console, logged in by a link of `rea
    /// web`, once the element `id` is there and the live stream open; the
    /// document is marked so that [`Devtools::same_document`] tells a
    /// reload.
    fn open_live(browser: &str, env: &Env, page: &str, id: &str) -> Devtools {
        let mut dt = Devtools(
            rea_testkit::chromium::Devtools::start(browser, &env.path("chromium-live"))
                .expect("start chromium"),
        );
        dt.0.open(&login(env, page)).expect("open the page");
        dt.wait_for(
            &format!("{page}, its live stream open"),
            &format!("document.getElementById('{id}') !== null && document.getElementById('live').className === 'on'"),
        );
        dt.eval("window.__same_document = true");
        dt
    }

    /// Whether the page is still the document [`Devtools::open_live`]
    /// opened (not reloaded).
    fn same_document(&mut self) -> bool {
        self.eval("window.__same_document === true") == serde_json::Value::Bool(true)
    }

    fn wait_for(&mut self, what: &str, expr: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.eval(expr) != serde_json::Value::Bool(true) {
            if Instant::now() > deadline {
                let live = self.eval(
                    "document.getElementById('live') && document.getElementById('live').className",
                );
                let main = self.eval(
                    "document.querySelector('main') && document.querySelector('main').innerText",
                );
                panic!("timed out waiting for {what} ({expr}); live: {live}; the page:\n{main}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_live_update_arrives_in_an_open_page_without_a_reload() {
    let Some(browser) = chromium("web::a_live_update_arrives_in_an_open_page_without_a_reload")
    else {
        return;
    };
    let env = Env::new();
    let (jobs, _) =
        with_tcp("[jobs.slow]\nschedule = \"@yearly\"\ncommand = \"sleep 2; echo finished\"\n");
    env.jobs(&jobs);
    let _d = env.daemon();
    let mut dt = Devtools::open_live(browser, &env, "/job/slow", "state");
    env.rea(&["trigger", "slow"]).ok();
    dt.wait_for(
        "the run's start in the open page",
        "document.getElementById('state').textContent === 'running'",
    );
    wait_until("the run to end", || !env.finals("slow").is_empty());
    dt.wait_for(
        "the run's end in the open page",
        "document.getElementById('state').textContent === 'idle' && document.querySelectorAll('#history tr').length === 2",
    );
    assert!(dt.same_document(), "no reload");
}

/// A job command that prints `first`, waits for the file `gate`, then
/// prints `then`: output that comes while a test watches, at its pace.
fn gated(first: &str, gate: &Path, then: &str) -> String {
    format!(
        "echo {first}; while [ ! -e {} ]; do sleep 0.05; done; echo {then}",
        gate.display()
    )
}

#[test]
fn an_open_run_page_tails_the_output_live_then_shows_the_end() {
    let Some(browser) = chromium("web::an_open_run_page_tails_the_output_live_then_shows_the_end")
    else {
        return;
    };
    let env = Env::new();
    let (one, two) = (env.path("one"), env.path("two"));
    let command = format!(
        "{}; {}",
        gated("line-one", &one, "line-two"),
        gated("", &two, "line-three")
    );
    let (jobs, _) = with_tcp(&format!(
        "[jobs.talk]\nschedule = \"@yearly\"\ncommand = \"{command}\"\n"
    ));
    env.jobs(&jobs);
    let _d = env.daemon();
    let run = env.rea(&["trigger", "talk", "--json"]).json()["run"]
        .as_str()
        .unwrap()
        .to_string();
    env.wait_until("talk runs", || !env.runs("talk", "started").is_empty());
    let mut dt = Devtools::open_live(browser, &env, &format!("/run/{run}"), "output");
    let output = "document.getElementById('output').textContent";
    let status = "document.getElementById('status').textContent";
    assert_eq!(dt.eval(status), "started");
    assert!(!dt.eval(output).as_str().unwrap().contains("line-two"));
    std::fs::write(&one, "").expect("gate one");
    dt.wait_for(
        "the second line, appended while the run goes on",
        &format!("{output}.includes('line-two\\n') && {status} === 'started'"),
    );
    std::fs::write(&two, "").expect("gate two");
    dt.wait_for(
        "the run's end and all its output",
        &format!("{status} === 'succeeded' && {output}.includes('line-three')"),
    );
    assert!(dt.same_document(), "no reload");
}

/// Reads a server-sent event stream until its text holds `needle`; the
/// text so far.
fn read_stream_until(s: &mut UnixStream, needle: &str) -> String {
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains(needle) {
        let n = s.read(&mut buf).unwrap_or(0);
        assert!(n > 0, "the stream ended without {needle:?}:\n{text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text
}

#[test]
fn another_tenants_run_cannot_be_followed_through_the_console() {
    let test = "web::another_tenants_run_cannot_be_followed_through_the_console";
    if skip_unless_root(test) {
        return;
    }
    let env = shared_env("[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n");
    let alice = throwaway_user("rea-alice").expect("user");
    let bob = throwaway_user("rea-bob").expect("user");
    let gate = env.path("go");
    for (user, job, secret) in [("rea-alice", "hers", "alice"), ("rea-bob", "his", "bob")] {
        let command = gated(
            &format!("{secret}-secret-1"),
            &gate,
            &format!("{secret}-secret-2"),
        );
        user_file(
            &env,
            user,
            &format!("[jobs.{job}]\nschedule = \"@yearly\"\ncommand = \"{command}\"\n"),
        );
    }
    let _d = env.daemon();
    let his_run = env.rea(&["trigger", "rea-bob/his", "--json"]).json()["run"]
        .as_str()
        .unwrap()
        .to_string();
    env.wait_until("his run", || !env.runs("rea-bob/his", "started").is_empty());

    // Alice asks for his run's output: not found, and nothing of it.
    let mut a = Client::new(&env, Some(alice));
    let r = a.get(&format!("/events?follow={his_run}"));
    assert_eq!(r.status, 404, "{r:?}");
    assert!(!r.body.contains("bob-secret"), "{}", r.body);
    assert!(r.body.contains("no run"), "{}", r.body);

    // Bob follows his own run: its output comes as it is printed.
    let mut his = connect_as(&env.state().join("web.sock"), Some(bob));
    his.write_all(
        format!("GET /events?follow={his_run} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes(),
    )
    .expect("write");
    let head = read_stream_until(&mut his, "\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    std::fs::write(&gate, "").expect("gate");
    let text = read_stream_until(&mut his, "bob-secret-2");
    assert!(text.contains("\"event\":\"output\""), "{text}");
    assert!(!text.contains("rea-bob/"), "localized: {text}");
}

#[test]
fn a_closed_page_gives_its_event_stream_back_at_once() {
    let env = Env::new();
    env.jobs(JOBS);
    let _d = env.daemon();
    let sock = env.state().join("web.sock");
    // More than the cap of event streams (64), one after the other: each
    // closed page's subscription must be gone before long.
    for i in 0..80 {
        let mut s = UnixStream::connect(&sock).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(b"GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("read");
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(head.starts_with("HTTP/1.1 200"), "page {i}: {head}");
        assert!(head.contains("text/event-stream"), "page {i}: {head}");
        drop(s);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_taken_web_listen_address_refuses_the_start_and_leaves_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().unwrap();
    let env = Env::new();
    env.jobs(&format!("[daemon]\nweb_listen = \"{addr}\"\n\n{JOBS}"));
    let run = env.rea(&["run"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "cannot serve the web console on {addr} ([daemon] web_listen)"
        )),
        "{}",
        run.stderr
    );
    for sock in ["rea.sock", "web.sock"] {
        assert!(!env.state().join(sock).exists(), "{sock} left behind");
    }
}

/// A heatmap's cells as (day, ok, failed), from their titles.
fn heat_cells(svg: &str) -> Vec<(String, u32, u32)> {
    svg.split("<title>")
        .skip(1)
        .map(|t| {
            let t = t.split("</title>").next().unwrap();
            let (day, rest) = t.split_once(": ").unwrap();
            let mut n = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u32>().unwrap());
            (day.to_string(), n.next().unwrap(), n.next().unwrap())
        })
        .collect()
}

/// The heatmap counts each day's runs in the job's zone, from the daily
/// roll-up: a user's job run on three days (the daemon's clock set back two
/// days, then one, then not: a restart each time), each day's successes
/// and failures in its cell after every restart; and still there once her
/// log has rotated those runs' records out. Another user's heatmap is not
/// hers to see.
#[test]
fn the_heatmap_counts_each_day_in_the_jobs_zone_across_restarts_and_rotation() {
    if skip_unless_root(
        "web::the_heatmap_counts_each_day_in_the_jobs_zone_across_restarts_and_rotation",
    ) {
        return;
    }
    let env = shared_env(
        "[daemon]\nhistory_max_bytes = 4096\nhistory_files = 1\n\n[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"true\"\n",
    );
    let alice = throwaway_user("rea-alice").expect("user");
    let bob = throwaway_user("rea-bob").expect("user");
    let fail = env.path("fail");
    // A failure writes 3,000 bytes: her 4 KiB log rotates at about every
    // other record, keeping one rotated file.
    let f = env.write(
        "users/rea-alice.toml",
        &format!(
            "[jobs.flaky]\nschedule = \"@yearly\"\ntimezone = \"Pacific/Kiritimati\"\ncommand = \"if test -e {}; then head -c 3000 /dev/zero | tr '\\\\0' x; exit 1; fi\"\n",
            fail.display()
        ),
    );
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let zone: chrono_tz::Tz = "Pacific/Kiritimati".parse().unwrap();
    let mut want: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
    let mut runs = 0;
    for (days_back, ok, bad) in [(2i64, 2, 1), (1, 1, 2), (0, 1, 0)] {
        let skew = (-days_back * 86_400_000).to_string();
        let d = env.daemon_with_env(&[], &[("REA_TEST_CLOCK_SKEW_MS", skew.as_str())]);
        for failing in std::iter::repeat_n(false, ok).chain(std::iter::repeat_n(true, bad)) {
            if failing {
                std::fs::write(&fail, "").unwrap();
            } else {
                let _ = std::fs::remove_file(&fail);
            }
            env.rea(&["trigger", "--wait", "rea-alice/flaky"]);
            runs += 1;
            let last = env.finals("rea-alice/flaky").pop().expect("its record");
            assert_eq!(last["status"], if failing { "failed" } else { "succeeded" });
            let ts = chrono::DateTime::parse_from_rfc3339(last["ts"].as_str().unwrap()).unwrap();
            let day = ts.with_timezone(&zone).date_naive().to_string();
            let cell = want.entry(day).or_default();
            if failing {
                cell.1 += 1;
            } else {
                cell.0 += 1;
            }
        }
        // Seen by a daemon started afresh (the roll-up is on disk).
        drop(d);
        let _d = env.daemon_with_env(&[], &[("REA_TEST_CLOCK_SKEW_MS", skew.as_str())]);
        let heat = Client::new(&env, Some(alice)).get("/job/flaky/heatmap.svg");
        assert_eq!(heat.status, 200, "{heat:?}");
        let cells = heat_cells(&heat.body);
        assert_eq!(cells.len(), 90, "{}", heat.body);
        for (day, ok, bad) in &cells {
            let (want_ok, want_bad) = want.get(day).copied().unwrap_or_default();
            assert_eq!((*ok, *bad), (want_ok, want_bad), "{day}: {}", heat.body);
        }
        let shown: u32 = cells.iter().map(|c| c.1 + c.2).sum();
        assert_eq!(shown, runs, "every run in a cell: {}", heat.body);
        // Bob's view of her job: none.
        let his = Client::new(&env, Some(bob)).get("/job/rea-alice%2Fflaky/heatmap.svg");
        assert!(his.status == 404 || his.status == 403, "{his:?}");
    }
    assert_eq!(want.len(), 3, "three days: {want:?}");
    assert!(
        env.finals("rea-alice/flaky").len() < runs as usize,
        "her log has rotated runs out"
    );
}

/// One request to `ip:port` over TCP, read to its end.
fn over_tcp(ip: &str, port: u16, raw: &str) -> Http {
    let mut s = std::net::TcpStream::connect((ip, port)).expect("connect over TCP");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(raw.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Http {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// An IPv4 address of this machine off loopback (`hostname -I`), if any.
fn other_address() -> Option<String> {
    let out = Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .map(str::to_string)
}

/// `web_listen` off loopback (`0.0.0.0`) behind a trusted proxy
/// (`web_proxy`, from 127.0.0.1): the proxy's header names the user on
/// every request, and she sees her jobs only; without the header, with
/// two, with a name that is no user, or from any other address (this
/// machine's own, off loopback) nothing is served; Host, Origin and the
/// CSRF token are checked as ever, and an action with them works.
#[test]
fn behind_a_trusted_proxy_its_header_names_the_user_and_no_one_else_is_served() {
    if skip_unless_root(
        "web::behind_a_trusted_proxy_its_header_names_the_user_and_no_one_else_is_served",
    ) {
        return;
    }
    let port = free_port();
    let env = shared_env(&format!(
        "[daemon]\nweb_listen = \"0.0.0.0:{port}\"\nweb_proxy = {{ header = \"X-Forwarded-User\", from = [\"127.0.0.1\"] }}\nweb_hosts = [\"rea.example\"]\n\n[jobs.sys]\nschedule = \"@yearly\"\ncommand = \"echo root-secret\"\n"
    ));
    throwaway_user("rea-alice").expect("user");
    let f = env.write(
        "users/rea-alice.toml",
        "[jobs.hers]\nschedule = \"@yearly\"\ncommand = \"echo alice-secret\"\n",
    );
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let _d = env.daemon();
    let get = |ip: &str, path: &str, extra: &str| {
        over_tcp(
            ip,
            port,
            &format!("GET {path} HTTP/1.1\r\nHost: rea.example\r\n{extra}\r\n"),
        )
    };
    let hers = get("127.0.0.1", "/jobs", "X-Forwarded-User: rea-alice\r\n");
    assert_eq!(hers.status, 200, "{hers:?}");
    assert!(hers.body.contains("data-job=\"hers\""), "{}", hers.body);
    assert!(!hers.body.contains("data-job=\"sys\""), "{}", hers.body);
    let roots = get("127.0.0.1", "/jobs", "X-Forwarded-User: root\r\n");
    assert!(roots.body.contains("data-job=\"sys\""), "{}", roots.body);
    let no_sys = get("127.0.0.1", "/job/sys", "X-Forwarded-User: rea-alice\r\n");
    assert_eq!(no_sys.status, 404, "{no_sys:?}");

    for (extra, status) in [
        ("", 401),
        ("X-Forwarded-User: rea-nobody-here\r\n", 403),
        (
            "X-Forwarded-User: root\r\nX-Forwarded-User: rea-alice\r\n",
            400,
        ),
    ] {
        let r = get("127.0.0.1", "/jobs", extra);
        assert_eq!(r.status, status, "{extra:?}: {r:?}");
        assert!(!r.body.contains("data-job"), "{}", r.body);
    }
    // The header from anyone but the proxy is never trusted.
    match other_address() {
        Some(ip) => {
            let r = get(&ip, "/jobs", "X-Forwarded-User: root\r\n");
            assert_eq!(r.status, 403, "from {ip}: {r:?}");
            assert!(r.body.contains("through its proxy only"), "{}", r.body);
        }
        None => eprintln!("SKIPPED part: this machine has no address off loopback"),
    }
    // A forged Host, through the proxy all the same.
    let forged = over_tcp(
        "127.0.0.1",
        port,
        "GET /jobs HTTP/1.1\r\nHost: evil.example\r\nX-Forwarded-User: root\r\n\r\n",
    );
    assert_eq!(forged.status, 421, "{forged:?}");
    // No login link: the proxy's header is the identity.
    let link = env.rea(&["web"]);
    assert!(!link.stdout.contains("/login?t="), "{link:?}");

    // An action: her session's CSRF token, from her page, same origin.
    let page = get("127.0.0.1", "/job/hers", "X-Forwarded-User: rea-alice\r\n");
    let token = csrf_of(&page.body).expect("a CSRF token");
    let cookie = page
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let post = |origin: &str, form: &str| {
        over_tcp(
            "127.0.0.1",
            port,
            &format!(
                "POST /job/hers/trigger HTTP/1.1\r\nHost: rea.example\r\nX-Forwarded-User: rea-alice\r\nCookie: {cookie}\r\nOrigin: {origin}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
                form.len()
            ),
        )
    };
    assert_eq!(
        post("http://evil.example", &format!("csrf={token}")).status,
        403
    );
    assert_eq!(post("http://rea.example", "csrf=wrong").status, 403);
    assert!(env.finals("rea-alice/hers").is_empty());
    let ok = post("https://rea.example", &format!("csrf={token}"));
    assert_eq!(ok.status, 303, "{ok:?}");
    env.wait_until("her run", || !env.finals("rea-alice/hers").is_empty());
}

/// `rea check` refuses `web_listen` off loopback without `web_proxy`,
/// where it is written, and says what to add.
#[test]
fn a_web_listen_off_loopback_without_a_proxy_is_an_error() {
    let env = Env::new();
    env.jobs("[daemon]\nweb_listen = \"0.0.0.0:8080\"\n\n[jobs.a]\nschedule = \"@daily\"\ncommand = \"true\"\n");
    let r = env.rea(&["check"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("jobs.toml:2:14: web_listen \"0.0.0.0:8080\" is not a loopback address"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("web_proxy = { header = \"X-Forwarded-User\""),
        "{}",
        r.stderr
    );
}
