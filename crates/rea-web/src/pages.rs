//! The pages, rendered here from the daemon's answers to the viewer's own
//! requests, and the actions (each a POST checked by the caller for its
//! origin, CSRF token and role). Every page reads with JavaScript off; the
//! embedded script only keeps it current (`/events`).

use std::fmt::Write;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use rea_core::record::{Record, RunStatus};
use rea_proto::live::{JobSort, JobSummary, JobsPage, JobsQuery, Overview};
use rea_proto::protocol::{PendingReply, StatusReply};
use rea_proto::{Request, Selector};

use crate::http::{self, encode, esc, Response};
use crate::svg;
use crate::{Refusal, Viewer, Web};

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");

/// An embedded asset's address names its content (`?v=` a hash of it), so
/// a browser keeps it for a year and asks again only when the daemon is a
/// build with other assets: a page load is the page alone, not the page
/// and two more connections.
static STYLE_URL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("/static/style.css?v={:016x}", fnv(STYLE)));
static SCRIPT_URL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("/static/app.js?v={:016x}", fnv(SCRIPT)));

/// FNV-1a of `s`, 64 bits.
const fn fnv(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// The embedded assets, by path (any `?v=` is the page's, to name the
/// version; the daemon serves the one it has).
pub(crate) fn asset(path: &str) -> Option<Response> {
    let (ct, body) = match path {
        "/static/style.css" => ("text/css; charset=utf-8", STYLE),
        "/static/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        _ => return None,
    };
    Some(Response {
        status: 200,
        content_type: ct,
        headers: vec![("Cache-Control", "max-age=31536000, immutable".to_string())],
        body: body.as_bytes().to_vec(),
    })
}

/// A duration in milliseconds, short.
pub(crate) fn ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn job_link(name: &str) -> String {
    format!("<a href=\"/job/{}\">{}</a>", encode(name), esc(name))
}

fn run_link(run: &str) -> String {
    format!("<a href=\"/run/{}\">{}</a>", encode(run), esc(run))
}

/// The page around a body.
fn layout(
    viewer: &Viewer,
    title: &str,
    live: Option<&str>,
    flash: Option<&str>,
    attrs: &str,
    body: &str,
) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>rea · {}</title><link rel=\"stylesheet\" href=\"{}\"><script src=\"{}\" defer></script></head><body",
        esc(title),
        *STYLE_URL,
        *SCRIPT_URL
    );
    if let Some(l) = live {
        let _ = write!(out, " data-live=\"{}\"", esc(l));
    }
    out.push_str(attrs);
    let role = if viewer.read_only {
        " (read-only)"
    } else if viewer.admin {
        " (all tenants)"
    } else {
        ""
    };
    let _ = write!(
        out,
        "><header><nav><b>rea</b> <a href=\"/\">Overview</a> <a href=\"/jobs\">Jobs</a> <a href=\"/timeline\">Timeline</a> <a href=\"/oneshots\">One-shots</a> <a href=\"/nodes\">Nodes</a> <a href=\"/audit\">Audit</a></nav><span class=\"who\">{}{role} <span id=\"live\"></span></span></header><main><h1>{}</h1>",
        esc(&viewer.name),
        esc(title)
    );
    if let Some(f) = flash {
        let _ = write!(out, "<p class=\"flash\" role=\"status\">{}</p>", esc(f));
    }
    out.push_str(body);
    out.push_str("</main></body></html>\n");
    out
}

fn error_page(viewer: &Viewer, r: &Refusal) -> Response {
    let status = match r.code.as_str() {
        "unknown_job" | "unknown_run" => 404,
        "refused" => 403,
        "bad_request" => 400,
        _ => 502,
    };
    Response::html(
        status,
        layout(
            viewer,
            "Not available",
            None,
            None,
            "",
            &format!("<p class=\"error\">{}</p>", esc(&r.message)),
        ),
    )
}

/// What `GET` shows.
pub(crate) async fn page(web: &Web, viewer: &Viewer, req: &http::Request) -> Response {
    let params = Params(req.params());
    let param = |k: &str| params.get(k);
    let flash = param("msg");
    let segs: Vec<String> = req
        .path
        .split('/')
        .skip(1)
        .map(|s| http::decode(s.as_bytes(), false))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    // What the script needs to tell which events concern this page.
    let attrs = match segs.as_slice() {
        ["jobs"] => " data-page=\"jobs\"".to_string(),
        ["job", name] => format!(" data-job=\"{}\"", esc(name)),
        ["run", id] => format!(" data-run=\"{}\"", esc(id)),
        _ => String::new(),
    };
    if let ["job", name, "heatmap.svg"] = segs.as_slice() {
        return match heatmap(web, viewer, name).await {
            Ok(image) => Response {
                status: 200,
                content_type: "image/svg+xml",
                headers: Vec::new(),
                body: image.into_bytes(),
            },
            Err(r) => error_page(viewer, &r),
        };
    }
    let result = match segs.as_slice() {
        [""] => overview(web, viewer).await,
        ["jobs"] => jobs(web, viewer, &params).await,
        ["job", name] => job(web, viewer, name, param("before")).await,
        ["run", id] => run(web, viewer, id).await,
        ["timeline"] => timeline(web, viewer).await,
        ["oneshots"] => oneshots(web, viewer).await,
        ["nodes"] => nodes(web, viewer).await,
        ["audit"] => audit(web, viewer).await,
        _ => Err(Refusal {
            code: "unknown_job".into(),
            message: "no such page".into(),
        }),
    };
    match result {
        Ok((title, live, body)) => Response::html(
            200,
            layout(viewer, &title, live.as_deref(), flash, &attrs, &body),
        ),
        Err(r) => error_page(viewer, &r),
    }
}

type Page = Result<(String, Option<String>, String), Refusal>;

async fn overview(web: &Web, viewer: &Viewer) -> Page {
    let ov: Overview = web.ask_as(viewer.uid, Request::Overview).await?;
    let c = &ov.counts;
    let mut b = String::new();
    let _ = write!(
        b,
        "<section class=\"counts\"><div><b>{}</b> jobs</div><div><b>{}</b> running</div><div><b>{}</b> queued</div><div><b>{}</b> paused</div><div><b>{}</b> disabled</div><div class=\"{}\"><b>{}</b> failing</div><div><b>{}</b> one-shots pending</div></section>",
        c.jobs,
        c.running,
        c.queued,
        c.paused,
        c.disabled,
        if c.failing > 0 { "bad" } else { "" },
        c.failing,
        c.oneshots_pending
    );
    let _ = write!(
        b,
        "<p class=\"daemon\">daemon pid {} · version {} · up {} · file {}</p>",
        ov.daemon.pid,
        esc(&ov.daemon.version),
        ms(u64::try_from(ov.daemon.uptime_s).unwrap_or(0) * 1000),
        esc(&ov.daemon.file)
    );
    b.push_str("<h2>Running</h2>");
    if ov.running.is_empty() {
        b.push_str("<p class=\"none\">Nothing is running.</p>");
    } else {
        b.push_str(
            "<table id=\"running\"><tr><th>run</th><th>job</th><th>since</th><th>pid</th></tr>",
        );
        for r in &ov.running {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                run_link(&r.run),
                job_link(&r.job),
                r.since.as_ref().map(|t| when(t.0)).unwrap_or_default(),
                r.pid.map(|p| p.to_string()).unwrap_or_default()
            );
        }
        b.push_str("</table>");
    }
    b.push_str("<h2>Failing</h2>");
    if ov.failing.is_empty() {
        b.push_str("<p class=\"none\">No job is failing.</p>");
    } else {
        b.push_str("<table id=\"failing\"><tr><th>job</th><th>failures in a row</th><th>recent</th><th>last failure</th></tr>");
        for j in &ov.failing {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                job_link(&j.name),
                j.consecutive_failures,
                svg::sparkline(&j.outcomes),
                j.last_failure
                    .as_ref()
                    .map(|t| when(t.0))
                    .unwrap_or_default()
            );
        }
        b.push_str("</table>");
    }
    b.push_str("<h2>Next due</h2>");
    if ov.next_due.is_empty() {
        b.push_str("<p class=\"none\">Nothing is due.</p>");
    } else {
        b.push_str("<table id=\"next\"><tr><th>job</th><th>at</th></tr>");
        for d in &ov.next_due {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td></tr>",
                job_link(&d.job),
                when(d.at.0)
            );
        }
        b.push_str("</table>");
    }
    Ok(("Overview".into(), Some("/events".into()), b))
}

fn sort_of(s: &str) -> JobSort {
    match s {
        "name" => JobSort::Name,
        "next_fire" => JobSort::NextFire,
        "failures" => JobSort::Failures,
        "duration" => JobSort::Duration,
        "last_run" => JobSort::LastRun,
        _ => JobSort::File,
    }
}

/// A page of jobs, filtered and sorted by the daemon.
async fn jobs_page(web: &Web, viewer: &Viewer, q: JobsQuery) -> Result<JobsPage, Refusal> {
    web.ask_as(viewer.uid, Request::Jobs(q)).await
}

/// A query string's pairs; an empty value is no value.
struct Params(Vec<(String, String)>);

impl Params {
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

async fn jobs(web: &Web, viewer: &Viewer, params: &Params) -> Page {
    let param = |k: &str| params.get(k);
    let sort = sort_of(param("sort").unwrap_or(""));
    let descending = param("desc") == Some("1");
    let limit = param("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(100usize)
        .clamp(1, 100);
    let q = JobsQuery {
        text: param("q").map(str::to_string),
        name: None,
        tag: param("tag").map(str::to_string),
        tenant: param("tenant").map(str::to_string),
        state: param("state").map(str::to_string),
        failing: param("failing") == Some("1"),
        sort,
        descending,
        cursor: param("cursor").map(str::to_string),
        limit: Some(limit),
    };
    let page = jobs_page(web, viewer, q.clone()).await?;
    // The query string of this page without its cursor and sort.
    let keep = |skip: &[&str]| {
        let mut s = String::new();
        for (k, v) in [
            ("q", q.text.as_deref()),
            ("tag", q.tag.as_deref()),
            ("tenant", q.tenant.as_deref()),
            ("state", q.state.as_deref()),
            ("failing", q.failing.then_some("1")),
            ("sort", Some(sort.as_str())),
            ("desc", descending.then_some("1")),
        ] {
            if let (Some(v), false) = (v, skip.contains(&k)) {
                let _ = write!(s, "&{k}={}", encode(v));
            }
        }
        s
    };
    let mut b = String::new();
    let _ = write!(
        b,
        "<form class=\"filters\" method=\"get\" action=\"/jobs\"><input name=\"q\" placeholder=\"name contains\" value=\"{}\"> <input name=\"tag\" placeholder=\"tag\" value=\"{}\"> <select name=\"state\"><option value=\"\">any state</option>",
        esc(q.text.as_deref().unwrap_or("")),
        esc(q.tag.as_deref().unwrap_or(""))
    );
    for s in [
        "running",
        "queued",
        "retry_pending",
        "paused",
        "disabled",
        "idle",
    ] {
        let sel = if q.state.as_deref() == Some(s) {
            " selected"
        } else {
            ""
        };
        let _ = write!(b, "<option{sel}>{s}</option>");
    }
    let _ = write!(
        b,
        "</select> <label><input type=\"checkbox\" name=\"failing\" value=\"1\"{}> failing</label> <input type=\"hidden\" name=\"sort\" value=\"{}\"> <button>Filter</button></form>",
        if q.failing { " checked" } else { "" },
        sort.as_str()
    );
    let _ = write!(b, "<p id=\"matching\">{} matching jobs</p>", page.matching);
    let base = keep(&["sort", "desc"]);
    let head = |label: &str, key: JobSort| {
        let desc = if sort == key && !descending {
            "&desc=1"
        } else {
            ""
        };
        let mark = if sort == key {
            if descending {
                " ▾"
            } else {
                " ▴"
            }
        } else {
            ""
        };
        format!(
            "<a href=\"/jobs?sort={}{desc}{base}\">{label}{mark}</a>",
            key.as_str()
        )
    };
    let _ = write!(
        b,
        "<table id=\"jobs\"><tr><th>{}</th><th>state</th><th>schedule</th><th>{}</th><th>recent</th><th>{}</th><th>{}</th></tr>",
        head("job", JobSort::Name),
        head("next", JobSort::NextFire),
        head("failures", JobSort::Failures),
        head("p95", JobSort::Duration)
    );
    for j in &page.jobs {
        let _ = write!(
            b,
            "<tr data-job=\"{}\"><td>{}</td><td class=\"st-{}\">{}{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&j.name),
            job_link(&j.name),
            esc(&j.state),
            esc(&j.state),
            if j.running > 0 { format!(" ({})", j.running) } else { String::new() },
            esc(j.schedule.as_deref().unwrap_or("")),
            j.next_fire.as_ref().map(|t| when(t.0)).unwrap_or_default(),
            svg::sparkline(&j.outcomes),
            j.consecutive_failures,
            j.p95_ms.map(ms).unwrap_or_default()
        );
    }
    b.push_str("</table>");
    if let Some(next) = &page.next {
        let _ = write!(
            b,
            "<p><a rel=\"next\" href=\"/jobs?cursor={}&limit={limit}{}\">Next page</a></p>",
            encode(next),
            keep(&[])
        );
    }
    Ok(("Jobs".into(), Some("/events".into()), b))
}

/// The summary of the job named exactly `name`, if the daemon has one
/// (a lookup by name in the daemon).
async fn summary(web: &Web, viewer: &Viewer, name: &str) -> Option<JobSummary> {
    let q = JobsQuery {
        name: Some(name.to_string()),
        limit: Some(1),
        ..JobsQuery::default()
    };
    let page: JobsPage = web.ask_as(viewer.uid, Request::Jobs(q)).await.ok()?;
    page.jobs.into_iter().find(|j| j.name == name)
}

fn status_class(s: Option<RunStatus>) -> &'static str {
    match s {
        Some(RunStatus::Succeeded) => "ok",
        Some(RunStatus::Skipped) | Some(RunStatus::Cancelled) => "skip",
        Some(RunStatus::Started) => "run",
        _ => "bad",
    }
}

fn status_name(s: Option<RunStatus>) -> String {
    s.map(|s| {
        serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    })
    .unwrap_or_default()
}

fn history_table(records: &[Record]) -> String {
    let mut b = String::from("<table id=\"history\"><tr><th>run</th><th>status</th><th>started</th><th>duration</th><th>exit</th><th>trigger</th></tr>");
    for r in records {
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.run.as_deref().map(run_link).unwrap_or_default(),
            status_class(r.status),
            esc(&status_name(r.status)),
            r.started.map(when).unwrap_or_else(|| when(r.ts)),
            r.duration_ms.map(ms).unwrap_or_default(),
            r.exit_code.map(|c| c.to_string()).unwrap_or_default(),
            r.trigger
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .map(|s| esc(&s))
                .unwrap_or_default()
        );
    }
    b.push_str("</table>");
    b
}

fn action_button(viewer: &Viewer, path: &str, label: &str) -> String {
    if viewer.read_only {
        return String::new();
    }
    format!(
        "<form class=\"act\" method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button>{}</button></form>",
        esc(path),
        esc(&viewer.csrf),
        esc(label)
    )
}

async fn job(web: &Web, viewer: &Viewer, name: &str, before: Option<&str>) -> Page {
    let st: StatusReply = web
        .ask_as(
            viewer.uid,
            Request::Status {
                job: Some(name.to_string()),
            },
        )
        .await?;
    let Some(info) = st.jobs.iter().find(|j| j.name == name).or(st.jobs.first()) else {
        return Err(Refusal {
            code: "unknown_job".into(),
            message: format!("no job named {name:?}"),
        });
    };
    let sum = summary(web, viewer, name).await;
    let now = Utc::now();
    let mut b = String::new();
    let enc = encode(name);
    let _ = write!(
        b,
        "<p class=\"state\">state <b class=\"st-{}\" id=\"state\">{}</b>{} · failures in a row: {}</p><div class=\"actions\">{}{}</div>",
        esc(&info.state),
        esc(&info.state),
        if info.paused { " (paused)" } else { "" },
        info.consecutive_failures,
        action_button(viewer, &format!("/job/{enc}/trigger"), "Run now"),
        if info.paused {
            action_button(viewer, &format!("/job/{enc}/resume"), "Resume")
        } else {
            action_button(viewer, &format!("/job/{enc}/pause"), "Pause")
        }
    );
    if !info.running.is_empty() {
        b.push_str("<h2>Running</h2><ul id=\"running\">");
        for r in &info.running {
            let _ = write!(
                b,
                "<li>{} since {} {}</li>",
                run_link(&r.run),
                r.since.as_ref().map(|t| when(t.0)).unwrap_or_default(),
                action_button(viewer, &format!("/run/{}/kill", encode(&r.run)), "Kill")
            );
        }
        b.push_str("</ul>");
    }
    b.push_str("<h2>Schedule</h2>");
    match sum.as_ref().and_then(|s| s.schedule.clone()) {
        Some(expr) => {
            let zone_name = sum
                .as_ref()
                .and_then(|s| s.timezone.clone())
                .unwrap_or_else(|| web.settings().zone.clone());
            let tz: chrono_tz::Tz = zone_name.parse().unwrap_or(chrono_tz::UTC);
            let _ = write!(
                b,
                "<p><code>{}</code> in {} — {}</p>",
                esc(&expr),
                esc(&zone_name),
                esc(&in_words(&expr))
            );
            if let Ok(schedule) = rea_core::schedule::Schedule::parse(&expr) {
                b.push_str("<ol id=\"fires\">");
                let mut cursor = now;
                for _ in 0..10 {
                    let Some(t) = schedule.next_after(cursor, tz) else {
                        break;
                    };
                    let _ = write!(
                        b,
                        "<li>{}</li>",
                        t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z (%a)")
                    );
                    cursor = t;
                }
                b.push_str("</ol>");
            }
        }
        None => {
            let _ = write!(
                b,
                "<p>No schedule of its own{}.</p>",
                if info.after.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; runs after {}",
                        info.after
                            .iter()
                            .map(|a| job_link(a))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            );
            if let Some(t) = &info.next_fire {
                let _ = write!(b, "<p>Next: {}</p>", when(t.0));
            }
        }
    }
    // The newest runs only: the trend and the first page (a job's 90 days
    // can be tens of thousands of runs; the heatmap is an image of its
    // own, so the page does not wait for it).
    let query = rea_store::history::Query {
        job: Some(name.to_string()),
        statuses: RunStatus::FINAL.to_vec(),
        until: before
            .and_then(|b| DateTime::parse_from_rfc3339(b).ok())
            .map(|t| t.with_timezone(&Utc)),
        limit: Some(101),
        runs_only: true,
        ..Default::default()
    };
    let paging = query.until.is_some();
    let records = web.history(viewer.uid, query).await?;
    if !paging {
        let _ = write!(
            b,
            "<h2>Last 90 days</h2><img class=\"heat\" src=\"/job/{enc}/heatmap.svg\" width=\"{}\" height=\"77\" alt=\"success by day over 90 days\">",
            svg::HEATMAP_WIDTH
        );
        let durations: Vec<u64> = records
            .iter()
            .filter_map(|r| r.duration_ms)
            .take(100)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !durations.is_empty() {
            b.push_str("<h2>Duration, last runs</h2>");
            b.push_str(&svg::trend(&durations));
        }
    }
    b.push_str("<h2>History</h2>");
    let shown: Vec<Record> = records.iter().take(50).cloned().collect();
    b.push_str(&history_table(&shown));
    if records.len() > 50 {
        if let Some(last) = shown.last() {
            let _ = write!(
                b,
                "<p><a rel=\"next\" href=\"/job/{enc}?before={}\">Older runs</a></p>",
                encode(&last.ts.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            );
        }
    }
    Ok((name.to_string(), Some("/events".into()), b))
}

/// A job's last 90 days, a day a cell, the days cut in the job's zone
/// (the daemon's answer says which, and its today there): counts from the
/// history's daily roll-up (`Request::Days`), which reads none of the
/// job's records. Kept
/// a minute per viewer and job, so an open page's refreshes do not ask
/// again.
async fn heatmap(web: &Web, viewer: &Viewer, name: &str) -> Result<String, Refusal> {
    // Only a job the viewer may see (her question would be refused for
    // another's, but the page says "no such job" as the CLI does).
    web.ask(
        viewer.uid,
        Request::Status {
            job: Some(name.to_string()),
        },
    )
    .await?;
    let key = (viewer.uid, name.to_string());
    if let Some(image) = web.heatmaps.get(&key) {
        return Ok(image);
    }
    // In the job's zone, which the daemon knows (asked for a day more on
    // each side of today in UTC, so that its today is within).
    let utc_today = rea_store::clock::now().date_naive();
    let counted: rea_proto::protocol::DaysReply = web
        .ask_as(
            viewer.uid,
            Request::Days {
                job: name.to_string(),
                zone: None,
                from: utc_today - Duration::days(90),
                to: utc_today + Duration::days(1),
            },
        )
        .await?;
    let start = counted.today - Duration::days(89);
    let mut days: Vec<(NaiveDate, svg::Day)> = (0..90)
        .map(|i| (start + Duration::days(i), svg::Day::default()))
        .collect();
    for c in &counted.days {
        let idx = (c.day - start).num_days();
        if let Some((_, d)) = usize::try_from(idx).ok().and_then(|i| days.get_mut(i)) {
            d.ok =
                d.ok.saturating_add(u32::try_from(c.succeeded).unwrap_or(u32::MAX));
            d.bad = d
                .bad
                .saturating_add(u32::try_from(c.failed).unwrap_or(u32::MAX));
        }
    }
    let image = svg::heatmap(&days);
    web.heatmaps.put(key, image.clone());
    Ok(image)
}

/// A few common schedules said in words; others are shown as written.
fn in_words(expr: &str) -> String {
    let f: Vec<&str> = expr.split_whitespace().collect();
    let num = |s: &str| s.parse::<u32>().ok();
    match f.as_slice() {
        ["@reboot"] => "when the daemon starts".into(),
        ["@hourly"] => "every hour".into(),
        ["@daily"] | ["@midnight"] => "every day at midnight".into(),
        ["@weekly"] => "every Sunday at midnight".into(),
        ["@monthly"] => "on the first of every month at midnight".into(),
        ["*", "*", "*", "*", "*"] => "every minute".into(),
        [m, "*", "*", "*", "*"] if m.starts_with("*/") => format!("every {} minutes", &m[2..]),
        [m, "*", "*", "*", "*"] if num(m).is_some() => format!("every hour at minute {m}"),
        [m, h, "*", "*", "*"] if num(m).is_some() && num(h).is_some() => {
            format!("every day at {h:0>2}:{m:0>2}")
        }
        [m, h, "*", "*", d] if num(m).is_some() && num(h).is_some() => {
            format!("at {h:0>2}:{m:0>2} on days of week {d}")
        }
        _ => "as written".into(),
    }
}

async fn run(web: &Web, viewer: &Viewer, id: &str) -> Page {
    let found: Option<Record> = web
        .ask_as(
            viewer.uid,
            Request::FindRun {
                run: id.to_string(),
            },
        )
        .await?;
    let Some(r) = found else {
        return Err(Refusal {
            code: "unknown_run".into(),
            message: format!("no run {id:?}"),
        });
    };
    let running = r.status == Some(RunStatus::Started);
    let mut b = String::new();
    let job = r.job.clone().unwrap_or_default();
    let _ = write!(
        b,
        "<p>job {} · status <b id=\"status\" class=\"{}\">{}</b> · started {} {}{}</p>",
        job_link(&job),
        status_class(r.status),
        esc(&status_name(r.status)),
        r.started.map(when).unwrap_or_else(|| when(r.ts)),
        r.duration_ms
            .map(|d| format!("· took {}", ms(d)))
            .unwrap_or_default(),
        r.exit_code
            .map(|c| format!(" · exit {c}"))
            .unwrap_or_default()
    );
    if running {
        b.push_str(&action_button(
            viewer,
            &format!("/run/{}/kill", encode(id)),
            "Kill",
        ));
    }
    let _ = write!(
        b,
        "<h2>Output</h2><pre id=\"output\">{}</pre>",
        esc(r.output.as_deref().unwrap_or(""))
    );
    if let Some(n) = r.output_bytes {
        let _ = write!(b, "<p class=\"none\">{n} bytes of output</p>");
    }
    let live = running.then(|| format!("/events?follow={}", encode(id)));
    Ok((format!("Run {id}"), live.or(Some("/events".into())), b))
}

async fn timeline(web: &Web, viewer: &Viewer) -> Page {
    let now = Utc::now();
    let from = now - Duration::hours(24);
    let to = now + Duration::hours(6);
    let records = web
        .history(
            viewer.uid,
            rea_store::history::Query {
                since: Some(from),
                statuses: RunStatus::FINAL.to_vec(),
                runs_only: true,
                limit: Some(5000),
                ..Default::default()
            },
        )
        .await?;
    let due = jobs_page(
        web,
        viewer,
        JobsQuery {
            sort: JobSort::NextFire,
            limit: Some(60),
            ..JobsQuery::default()
        },
    )
    .await
    .map(|p| p.jobs)
    .unwrap_or_default();
    let mut labels: Vec<String> = Vec::new();
    let mut bars = Vec::new();
    let row_of = |name: &str, labels: &mut Vec<String>| -> Option<usize> {
        if let Some(i) = labels.iter().position(|l| l == name) {
            return Some(i);
        }
        if labels.len() >= 60 {
            return None;
        }
        labels.push(name.to_string());
        Some(labels.len() - 1)
    };
    for r in &records {
        let (Some(job), Some(start)) = (r.job.as_deref(), r.started) else {
            continue;
        };
        let Some(row) = row_of(job, &mut labels) else {
            continue;
        };
        let end = r
            .ended
            .unwrap_or_else(|| start + Duration::milliseconds(r.duration_ms.unwrap_or(0) as i64));
        bars.push(svg::Bar {
            row,
            start,
            end,
            class: status_class(r.status),
            title: format!(
                "{job} {} {}",
                status_name(r.status),
                r.duration_ms.map(ms).unwrap_or_default()
            ),
        });
    }
    for j in &due {
        let Some(t) = &j.next_fire else { continue };
        if t.0 > to {
            continue;
        }
        let Some(row) = row_of(&j.name, &mut labels) else {
            continue;
        };
        bars.push(svg::Bar {
            row,
            start: t.0,
            end: t.0 + Duration::minutes(2),
            class: "due",
            title: format!("{} due {}", j.name, when(t.0)),
        });
    }
    let mut b = format!(
        "<p>Runs since {} ({} shown), and the fires to come until {}.</p>",
        when(from),
        bars.iter().filter(|b| b.class != "due").count(),
        when(to)
    );
    b.push_str(&svg::gantt(&labels, &bars, from, to, now));
    Ok(("Timeline".into(), Some("/events".into()), b))
}

async fn oneshots(web: &Web, viewer: &Viewer) -> Page {
    let p: PendingReply = web
        .ask_as(
            viewer.uid,
            Request::Pending {
                tag: None,
                limit: Some(500),
            },
        )
        .await?;
    let mut b = format!("<p>{} pending</p>", p.pending);
    b.push_str("<table id=\"oneshots\"><tr><th>id</th><th>state</th><th>due</th><th>command</th><th></th></tr>");
    for s in &p.oneshots {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&s.id),
            esc(&s.state),
            when(s.due.0),
            esc(&s.argv.join(" ")),
            action_button(
                viewer,
                &format!("/oneshot/{}/cancel", encode(&s.id)),
                "Cancel"
            )
        );
    }
    b.push_str("</table>");
    Ok(("One-shots".into(), Some("/events".into()), b))
}

async fn nodes(web: &Web, viewer: &Viewer) -> Page {
    let ov = web
        .ask_as::<Overview>(viewer.uid, Request::Overview)
        .await?
        .daemon;
    let mut b = String::new();
    match &ov.cluster {
        None => b.push_str("<p>This daemon runs alone (local mode): no cluster nodes.</p>"),
        Some(c) => {
            let _ = write!(
                b,
                "<table id=\"nodes\"><tr><th>cluster</th><td>{}</td></tr><tr><th>node</th><td>{}</td></tr><tr><th>lease</th><td>{} (age {}, {} left)</td></tr><tr><th>backlog</th><td>{} ({} dropped)</td></tr><tr><th>last error</th><td>{}</td></tr></table>",
                esc(&c.cluster),
                esc(&c.node),
                if c.lease_live { "live" } else { "lost" },
                ms(c.lease_age_ms),
                ms(c.lease_left_ms),
                c.backlog,
                c.dropped,
                c.last_error.as_ref().map(|e| esc(&e.message)).unwrap_or_default()
            );
        }
    }
    Ok(("Nodes".into(), Some("/events".into()), b))
}

async fn audit(web: &Web, viewer: &Viewer) -> Page {
    let entries: Vec<serde_json::Value> = web
        .ask_as(
            viewer.uid,
            Request::Audit {
                query: rea_core::audit::Query {
                    limit: Some(200),
                    ..Default::default()
                },
            },
        )
        .await?;
    let mut b = String::from("<table id=\"audit\"><tr><th>when</th><th>who</th><th>source</th><th>action</th><th>target</th><th>result</th></tr>");
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => esc(s),
        serde_json::Value::Null => String::new(),
        other => esc(&other.to_string()),
    };
    for e in &entries {
        let target = e["target"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let who = if e["user"].is_null() {
            e["uid"].to_string()
        } else {
            s(&e["user"])
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>",
            s(&e["ts"]),
            who,
            s(&e["source"]),
            s(&e["action"]),
            esc(&target),
            s(&e["result"]),
            e["message"]
                .as_str()
                .map(|m| format!(": {}", esc(m)))
                .unwrap_or_default()
        );
    }
    b.push_str("</table>");
    Ok(("Audit log".into(), None, b))
}

/// A POST: the action, then back to the page it came from with what the
/// daemon said.
pub(crate) async fn act(
    web: &Web,
    viewer: &Viewer,
    path: &str,
    _form: &[(String, String)],
) -> Response {
    let segs: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|s| http::decode(s.as_bytes(), false))
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (request, back, done) = match segs.as_slice() {
        ["job", name, "trigger"] => (
            Request::Trigger {
                job: name.to_string(),
                force: false,
                wait: false,
                follow: false,
                params: Default::default(),
            },
            format!("/job/{}", encode(name)),
            "triggered",
        ),
        ["job", name, "pause"] => (
            Request::Pause(Selector {
                jobs: vec![name.to_string()],
                ..Selector::default()
            }),
            format!("/job/{}", encode(name)),
            "paused",
        ),
        ["job", name, "resume"] => (
            Request::Resume(Selector {
                jobs: vec![name.to_string()],
                ..Selector::default()
            }),
            format!("/job/{}", encode(name)),
            "resumed",
        ),
        ["run", id, "kill"] => (
            Request::Kill {
                target: id.to_string(),
            },
            format!("/run/{}", encode(id)),
            "kill sent",
        ),
        ["oneshot", id, "cancel"] => (
            Request::Cancel {
                ids: vec![id.to_string()],
                kill: false,
            },
            "/oneshots".to_string(),
            "cancelled",
        ),
        _ => return Response::text(404, "no such action"),
    };
    let msg = match web.ask(viewer.uid, request).await {
        Ok(v) => match v.get("run").and_then(|r| r.as_str()) {
            Some(run) if done == "triggered" => format!("triggered: run {run}"),
            _ => done.to_string(),
        },
        Err(r) => {
            if r.code == "unknown_job" {
                return error_page(viewer, &r);
            }
            format!("refused: {}", r.message)
        }
    };
    Response::redirect(format!("{back}?msg={}", encode(&msg)))
}

/// What a TCP visitor without a session sees.
pub(crate) fn login_needed() -> String {
    format!("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>rea · log in</title><link rel=\"stylesheet\" href=\"{}\"></head><body><main><h1>Log in</h1><p>Run <code>rea web</code> on the server for a one-time login link (it logs you in as the user who runs it).</p></main></body></html>\n", *STYLE_URL)
}
