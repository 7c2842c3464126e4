//! A 100,000-job file: validation, daemon start, memory, reload; and the
//! dispatcher heap on its own.

use std::fs;
use std::io::Write;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rea_core::due_queue::{DueQueue, EntryId};

use super::report::Figure;
use super::util::{self, Client, Daemon, TempDir};
use super::Settings;

/// The shape of the generated scale file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shape {
    /// What a real server's file looks like: distinct minutes, hours and
    /// days, lists, ranges, steps, names, 20% of the jobs in a zone of their
    /// own, some seconds fields, `@every` and macros (about a third of the
    /// expressions are distinct).
    Realistic,
    /// `m h * * *` spread over the day (1,440 distinct expressions), the
    /// benchmark's original file.
    Easy,
    /// Both, realistic first.
    Both,
}

impl Shape {
    /// The shapes this setting stands for.
    pub(crate) fn each(self) -> &'static [Shape] {
        match self {
            Shape::Realistic => &[Shape::Realistic],
            Shape::Easy => &[Shape::Easy],
            Shape::Both => &[Shape::Realistic, Shape::Easy],
        }
    }
}

/// The generated job file of `n` jobs (seeded: the same on every run).
pub(crate) fn big_file(n: usize, shape: Shape) -> String {
    match shape {
        Shape::Easy => easy_file(n),
        Shape::Realistic | Shape::Both => realistic_file(n),
    }
}

fn easy_file(n: usize) -> String {
    let mut s = String::with_capacity(n * 64);
    s.push_str("[daemon]\nmax_concurrent = 8\n\n");
    for i in 0..n {
        // Spread over the day; a few hundred jobs fall in any hour.
        let (m, h) = (i % 60, (i / 60) % 24);
        s.push_str(&format!(
            "[jobs.job-{i:06}]\nschedule = \"{m} {h} * * *\"\ncommand = \"true\"\n\n"
        ));
    }
    s
}

/// Zones a fleet's jobs are written in (the file's default is UTC).
const ZONES: &[&str] = &[
    "Europe/Berlin",
    "Europe/London",
    "Europe/Paris",
    "America/New_York",
    "America/Chicago",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Asia/Tokyo",
    "Asia/Shanghai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Australia/Sydney",
    "Africa/Johannesburg",
    "America/Denver",
    "Europe/Madrid",
    "Asia/Dubai",
];
const DOW_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];

/// One realistic cron expression.
fn realistic_schedule(rng: &mut fastrand::Rng) -> String {
    let r = rng.u32(0..1000);
    if r < 20 {
        let base = [30, 45, 60, 90, 120, 300, 600, 900][rng.usize(0..8)];
        return format!("@every {}s", base + rng.u32(0..60));
    }
    if r < 35 {
        return ["@hourly", "@daily", "@weekly", "@monthly", "@midnight"][rng.usize(0..5)]
            .to_string();
    }
    let minute = match rng.u32(0..100) {
        // Most fixed minutes are on a multiple of five.
        0..=59 if rng.u32(0..100) < 90 => (5 * rng.u32(0..12)).to_string(),
        0..=59 => rng.u32(0..60).to_string(),
        60..=71 => {
            let a = rng.u32(0..30);
            format!("{a},{}", a + 30)
        }
        72..=81 => format!("*/{}", [2, 5, 10, 15, 20, 30][rng.usize(0..6)]),
        82..=89 => {
            let a = rng.u32(0..10);
            format!("{a}-59/{}", [5, 10, 15][rng.usize(0..3)])
        }
        90..=94 => "*".to_string(),
        _ => {
            let a = rng.u32(0..20);
            format!("{a},{},{}", a + 20, a + 40)
        }
    };
    let hour = match rng.u32(0..100) {
        0..=49 => rng.u32(0..24).to_string(),
        50..=64 => "*".to_string(),
        65..=74 => format!("*/{}", [2, 3, 4, 6, 8, 12][rng.usize(0..6)]),
        75..=86 => ["9-17", "8-18", "0-6", "6-22", "7-19"][rng.usize(0..5)].to_string(),
        _ => {
            let a = rng.u32(0..12);
            format!("{a},{}", a + 12)
        }
    };
    let star = || "*".to_string();
    let (dom, dow) = match rng.u32(0..100) {
        0..=69 => (star(), star()),
        70..=76 => (
            star(),
            ["1-5", "MON-FRI", "mon-fri", "1-5"][rng.usize(0..4)].to_string(),
        ),
        77..=81 => (star(), DOW_NAMES[rng.usize(0..7)].to_string()),
        82..=84 => (star(), rng.u32(0..8).to_string()),
        85..=91 => (
            [1, 1, 15, 28, rng.u32(1..29)][rng.usize(0..5)].to_string(),
            star(),
        ),
        92..=95 => ("1,15".to_string(), star()),
        96..=97 => ("*/2".to_string(), star()),
        _ => (
            rng.u32(1..8).to_string(),
            DOW_NAMES[rng.usize(0..7)].to_string(),
        ),
    };
    let month = match rng.u32(0..100) {
        0..=91 => star(),
        92..=93 => "JAN,APR,JUL,OCT".to_string(),
        94..=96 => ["1-6", "7-12", "3-10"][rng.usize(0..3)].to_string(),
        _ => MONTH_NAMES[rng.usize(0..12)].to_string(),
    };
    let expr = format!("{minute} {hour} {dom} {month} {dow}");
    if rng.u32(0..100) < 5 {
        format!("{} {expr}", [0, 15, 30, 45][rng.usize(0..4)])
    } else {
        expr
    }
}

/// A server's job file: mostly distinct schedules, `[defaults]` with a
/// shell, a timeout and `env.PATH`; 20% of the jobs set `timezone`, 30%
/// `tags`, 10% `timeout`, 10% `retry`, 5% their own `env`.
fn realistic_file(n: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(13);
    let mut s = String::with_capacity(n * 160);
    s.push_str(
        "[defaults]\nshell = \"/bin/sh\"\ntimeout = \"1h\"\nenv = { PATH = \"/usr/local/bin:/usr/bin:/bin\" }\n\n\
         [daemon]\nmax_concurrent = 8\n\n",
    );
    for i in 0..n {
        let team = ["billing", "search", "ops", "data", "web", "mail"][i % 6];
        s.push_str(&format!("[jobs.{team}-task-{i:06}]\n"));
        s.push_str(&format!(
            "schedule = \"{}\"\n",
            realistic_schedule(&mut rng)
        ));
        s.push_str(&format!(
            "command = \"/usr/local/bin/{team}-task --shard {} --id {i}\"\n",
            i % 97
        ));
        if rng.u32(0..100) < 20 {
            s.push_str(&format!(
                "timezone = \"{}\"\n",
                ZONES[rng.usize(0..ZONES.len())]
            ));
        }
        if rng.u32(0..100) < 30 {
            s.push_str(&format!("tags = [\"{team}\"]\n"));
        }
        if rng.u32(0..100) < 10 {
            s.push_str(&format!("timeout = \"{}m\"\n", 5 * rng.u32(1..12)));
        }
        if rng.u32(0..100) < 10 {
            s.push_str("retry = { attempts = 3, delay = \"30s\" }\n");
        }
        if rng.u32(0..100) < 5 {
            s.push_str(&format!("env = {{ SHARD = \"{}\" }}\n", i % 97));
        }
        s.push('\n');
    }
    s
}

/// Distinct schedule expressions in a generated file.
pub(crate) fn distinct_schedules(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("schedule = "))
        .collect::<std::collections::HashSet<_>>()
        .len()
}

fn config_loaded_lines(dir: &TempDir) -> usize {
    util::count_history_lines(&dir.state(), &["\"event\":\"config_loaded\""])
}

fn add_job(dir: &TempDir, name: &str) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.jobs())
        .unwrap_or_else(|e| util::die(e));
    let _ = f.write_all(
        format!("[jobs.{name}]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\n").as_bytes(),
    );
}

fn job_is_live(c: &mut Client, name: &str) -> bool {
    c.call(&format!(r#"{{"v":1,"op":"status","job":"{name}"}}"#))
        .is_some_and(|r| r["ok"] == true)
}

pub(crate) fn scale(s: &Settings, heap: &[Figure]) -> Vec<Figure> {
    let mut out = Vec::new();
    for shape in s.scale_shape.each() {
        out.extend(scale_of(s, *shape));
    }
    out.extend(heap.iter().filter(|f| f.what.contains("steady")).map(|f| {
        let mut f = f.clone();
        f.part = "scale";
        f
    }));
    out
}

/// How a generated file is described in the table.
fn describe(n: usize, shape: Shape, text: &str) -> String {
    let shape = match shape {
        Shape::Easy => "easy",
        Shape::Realistic | Shape::Both => "realistic",
    };
    format!(
        "{n} jobs, {shape} file ({} distinct schedules)",
        distinct_schedules(text)
    )
}

fn scale_of(s: &Settings, shape: Shape) -> Vec<Figure> {
    let n = s.scale_jobs;
    let text = big_file(n, shape);
    let shown = describe(n, shape, &text);
    eprintln!("scale: {shown}, {} runs", s.reps);
    let dir = TempDir::new("scale");
    dir.write_jobs(&text);
    let mut out = Vec::new();

    let mut check = Vec::new();
    for _ in 0..s.reps {
        let c = util::measure(&mut util::rea(&dir, &["check"]));
        if !c.status.success() {
            util::die(format!("rea check failed on the generated {n}-job file"));
        }
        check.push(c.wall);
    }
    let check = util::median(&check);
    out.push(Figure::check(
        "scale",
        format!("`rea check`, {shown}, median of {}", s.reps),
        util::ms(check),
        "≤ 1 s",
        check <= Duration::from_secs(1),
    ));

    let mut ready = Vec::new();
    // RSS after the first and after the last of `scale_reloads` reloads,
    // and the peak, per repetition.
    let mut reload_rss: Vec<(f64, f64, f64)> = Vec::new();
    let mut loaded = Vec::new();
    let mut rss = Vec::new();
    let mut hwm = Vec::new();
    let mut hup = Vec::new();
    let mut reload = Vec::new();
    let mut watcher: Option<Vec<Duration>> = None;
    for rep in 0..s.reps {
        let _ = fs::remove_dir_all(dir.state());
        let d = Daemon::spawn(&dir);
        let mut seen_loaded = None;
        let mut seen_ready = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen_loaded.is_none() || seen_ready.is_none() {
            if seen_loaded.is_none() && config_loaded_lines(&dir) > 0 {
                seen_loaded = Some(d.spawned_at.elapsed());
            }
            if seen_ready.is_none() {
                if let Ok(mut c) = Client::connect(&dir.state()) {
                    if c.call(r#"{"v":1,"op":"ping"}"#)
                        .is_some_and(|r| r["ok"] == true)
                    {
                        seen_ready = Some(d.spawned_at.elapsed());
                    }
                }
            }
            if Instant::now() > deadline {
                util::die("the daemon did not start within 60 s");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ready.extend(seen_ready);
        loaded.extend(seen_loaded);
        std::thread::sleep(Duration::from_millis(300));
        rss.push(util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0) as f64);
        hwm.push(util::proc_status_kb(d.pid(), "VmHWM").unwrap_or(0) as f64);
        let mut c = d.client();

        // The watcher (if this build has one): edit, then wait for the
        // daemon's config_loaded line without telling it anything.
        if rep == 0 || watcher.is_some() {
            let before = config_loaded_lines(&dir);
            let name = format!("new-watch-{rep}");
            let t = Instant::now();
            add_job(&dir, &name);
            if util::wait_until(Duration::from_secs(3), Duration::from_millis(1), || {
                config_loaded_lines(&dir) > before
            }) {
                watcher.get_or_insert_with(Vec::new).push(t.elapsed());
                let _ = job_is_live(&mut c, &name);
            }
        }

        // SIGHUP: edit, signal, wait for the config_loaded line (polling the
        // file, not the socket, so the measurement does not queue requests
        // in front of the reload).
        let before = config_loaded_lines(&dir);
        let name = format!("new-hup-{rep}");
        add_job(&dir, &name);
        let t = Instant::now();
        d.signal(libc::SIGHUP);
        if !util::wait_until(Duration::from_secs(30), Duration::from_millis(1), || {
            config_loaded_lines(&dir) > before
        }) {
            util::die("SIGHUP reload did not complete in 30 s");
        }
        hup.push(t.elapsed());
        if !job_is_live(&mut c, &name) {
            util::die(format!("{name} is not live after SIGHUP"));
        }

        // `rea reload`: the command returns when the new file is in force.
        let name = format!("new-reload-{rep}");
        add_job(&dir, &name);
        let r = util::measure(&mut util::rea(&dir, &["reload"]));
        if !r.status.success() || !job_is_live(&mut c, &name) {
            util::die(format!("{name} is not live after `rea reload`"));
        }
        reload.push(r.wall);

        // Memory across reloads: each after a one-line edit, so each one
        // parses and applies a new file.
        if s.scale_reloads > 0 {
            let mut after_first = 0.0;
            for k in 0..s.scale_reloads {
                let before = config_loaded_lines(&dir);
                add_job(&dir, &format!("new-rss-{rep}-{k}"));
                d.signal(libc::SIGHUP);
                if !util::wait_until(Duration::from_secs(30), Duration::from_millis(1), || {
                    config_loaded_lines(&dir) > before
                }) {
                    util::die("SIGHUP reload did not complete in 30 s");
                }
                std::thread::sleep(Duration::from_millis(300));
                if k == 0 {
                    after_first = util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0) as f64;
                }
            }
            reload_rss.push((
                after_first,
                util::proc_status_kb(d.pid(), "VmRSS").unwrap_or(0) as f64,
                util::proc_status_kb(d.pid(), "VmHWM").unwrap_or(0) as f64,
            ));
        }
        d.stop();
        // Back to the generated file for the next start.
        dir.write_jobs(&text);
    }
    let ready = util::median(&ready);
    let loaded = util::median(&loaded);
    out.push(Figure::check(
        "scale",
        format!(
            "daemon start → control socket answers, {shown}, median of {}",
            s.reps
        ),
        util::ms(ready),
        "≤ 1 s",
        ready <= Duration::from_secs(1),
    ));
    out.push(Figure::info(
        "scale",
        "daemon start → `config_loaded` line in the history",
        util::ms(loaded),
    ));
    let rss_kb = util::median_f(&rss) as u64;
    out.push(Figure::check(
        "scale",
        format!(
            "RSS after load, {n} jobs (VmHWM {})",
            util::mb(util::median_f(&hwm) as u64)
        ),
        util::mb(rss_kb),
        "≤ 150 MB",
        rss_kb <= 150 * 1024,
    ));
    if !reload_rss.is_empty() {
        let col = |f: fn(&(f64, f64, f64)) -> f64| {
            util::median_f(&reload_rss.iter().map(f).collect::<Vec<_>>()) as u64
        };
        let (one, last, peak) = (col(|r| r.0), col(|r| r.1), col(|r| r.2));
        out.push(Figure::check(
            "scale",
            "RSS after 1 reload (SIGHUP after a one-line edit)",
            util::mb(one),
            "≤ 150 MB",
            one <= 150 * 1024,
        ));
        out.push(Figure::check(
            "scale",
            format!(
                "RSS after {} reloads (VmHWM {})",
                s.scale_reloads,
                util::mb(peak)
            ),
            util::mb(last),
            "≤ 150 MB, flat",
            last <= 150 * 1024,
        ));
    }
    let hup = util::median(&hup);
    out.push(Figure::check(
        "scale",
        "one-line edit live: SIGHUP → `config_loaded` written",
        util::ms(hup),
        "≤ 1 s",
        hup <= Duration::from_secs(1),
    ));
    let reload = util::median(&reload);
    out.push(Figure::check(
        "scale",
        "one-line edit live: `rea reload` wall time (returns when in force)",
        util::ms(reload),
        "≤ 1 s",
        reload <= Duration::from_secs(1),
    ));
    match watcher {
        Some(w) => {
            let w = util::median(&w);
            out.push(Figure::check(
                "scale",
                "one-line edit live: file watcher (edit → `config_loaded`)",
                util::ms(w),
                "≤ 1 s",
                w <= Duration::from_secs(1),
            ))
        }
        None => out.push(Figure::info(
            "scale",
            "one-line edit live: file watcher",
            "not in this build (no reload within 3 s of an edit)",
        )),
    }
    out
}

fn t0() -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000, 0)
        .single()
        .unwrap_or_else(Utc::now)
}

fn per_op(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e9 / n as f64
}

/// One round over `n` entries: ns per insert, pop_due, cancel, and a
/// steady-state pop+insert pair.
fn heap_round(n: usize, seed: u64) -> [f64; 4] {
    let mut rng = fastrand::Rng::with_seed(seed);
    let base = t0();
    let dues: Vec<DateTime<Utc>> = (0..n)
        .map(|_| base + chrono::Duration::milliseconds(rng.i64(0..86_400_000)))
        .collect();

    let mut d: DueQueue<u32> = DueQueue::new();
    let t = Instant::now();
    for (i, due) in dues.iter().enumerate() {
        d.insert(*due, i as u32);
    }
    let insert = per_op(t.elapsed(), n);

    // Steady state at n entries: pop the earliest, insert a later one
    // (what the daemon does when a job fires and is rescheduled).
    let mut now = base;
    let t = Instant::now();
    for i in 0..n {
        now = d.next_due().unwrap_or(now);
        if let Some((_, due, v)) = d.pop_due(now) {
            d.insert(due + chrono::Duration::seconds(86_400), v);
        }
        std::hint::black_box(i);
    }
    let steady = per_op(t.elapsed(), 2 * n);

    let far = base + chrono::Duration::days(365);
    let t = Instant::now();
    let mut popped = 0;
    while let Some(e) = d.pop_due(far) {
        std::hint::black_box(e);
        popped += 1;
    }
    let pop = per_op(t.elapsed(), popped.max(1));

    let ids: Vec<EntryId> = dues
        .iter()
        .enumerate()
        .map(|(i, due)| d.insert(*due, i as u32))
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    let t = Instant::now();
    for i in order {
        std::hint::black_box(d.cancel(ids[i]));
    }
    let cancel = per_op(t.elapsed(), n);
    [insert, pop, cancel, steady]
}

pub(crate) fn heap(s: &Settings) -> Vec<Figure> {
    let n = s.heap_entries;
    eprintln!("heap: {n} entries, {} rounds", s.reps);
    let rounds: Vec<[f64; 4]> = (0..s.reps).map(|r| heap_round(n, 7 + r as u64)).collect();
    let col = |k: usize| util::median_f(&rounds.iter().map(|r| r[k]).collect::<Vec<_>>());
    let names = [
        "insert (into an empty heap, up to",
        "pop_due (draining",
        "cancel (random order, compaction included,",
        "steady pop_due + insert (at",
    ];
    let mut out = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let ns = col(k);
        out.push(Figure::check(
            "heap",
            format!("{name} {n} entries), per op, median of {}", s.reps),
            format!("{:.0} ns ({:.1} M ops/s)", ns, 1e3 / ns),
            "≤ 2 µs",
            ns <= 2000.0,
        ));
    }
    out
}

/// Where `rea check`'s time and memory go for the generated file, measured
/// in-process through the library: (phase, wall, bytes still allocated).
pub(crate) fn load_phases(s: &Settings) -> Vec<Figure> {
    s.scale_shape
        .each()
        .iter()
        .flat_map(|shape| load_phases_of(s, *shape))
        .collect()
}

fn load_phases_of(s: &Settings, shape: Shape) -> Vec<Figure> {
    use super::alloc::live_bytes;
    let n = s.scale_jobs;
    let dir = TempDir::new("phases");
    let text = big_file(n, shape);
    dir.write_jobs(&text);
    let exprs: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("schedule = \""))
        .map(|l| l.trim_end_matches('"'))
        .collect();
    let mut out = vec![Figure::info(
        "scale",
        format!("phases in-process, {}", describe(n, shape, &text)),
        "",
    )];
    let mut phase = |what: String, f: &mut dyn FnMut()| {
        let before = live_bytes();
        let t = Instant::now();
        f();
        let took = t.elapsed();
        let grew = live_bytes().saturating_sub(before);
        out.push(Figure::info(
            "scale",
            what,
            format!(
                "{} ({:.0} bytes/job held)",
                util::ms(took),
                grew as f64 / n as f64
            ),
        ));
    };
    let mut doc = None;
    phase(
        format!("  phase: TOML parse with spans (`DeTable::parse`), {n} jobs"),
        &mut || {
            doc = Some(toml::de::DeTable::parse(&text));
        },
    );
    drop(doc);
    let mut schedules = Vec::new();
    phase(format!("  phase: `Schedule::parse` × {n}"), &mut || {
        for e in &exprs {
            schedules.push(rea_core::schedule::Schedule::parse(e));
        }
    });
    let per = std::mem::size_of::<rea_core::schedule::Schedule>();
    drop(schedules);
    let mut cfg = None;
    phase(
        format!("  phase: whole `config::load_with` (size_of Schedule = {per} B)"),
        &mut || {
            cfg = config_load(&dir);
        },
    );
    if let Some(Ok(cfg)) = &cfg {
        let mut engine = None;
        phase("  phase: `Engine::new` on that config".into(), &mut || {
            engine = Some(rea_core::engine::Engine::new(&cfg.plan(), 1));
        });
        let mut actions = Vec::new();
        phase(
            "  phase: `Engine::start` (first fire of every job into the heap)".into(),
            &mut || {
                if let Some(e) = engine.as_mut() {
                    actions = e.start(Utc::now(), Default::default());
                }
            },
        );
        drop(actions);
        // A reload of the same file with one job added, as the daemon does
        // it: parse beside the configuration in force, then apply.
        let mut text2 = text.clone();
        text2.push_str("[jobs.extra-one]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
        dir.write_jobs(&text2);
        let mut new_cfg = None;
        phase(
            "  phase: reload parse (`load_if_changed` beside the config in force)".into(),
            &mut || {
                new_cfg = Some(reload_load(&dir, cfg));
            },
        );
        if let (Some(Ok(Some(new))), Some(e)) = (&new_cfg, engine.as_mut()) {
            let mut actions = Vec::new();
            phase("  phase: `Engine::reload`".into(), &mut || {
                actions = e.reload(&new.plan(), Utc::now());
            });
        }
    }
    out
}

/// The daemon's reload of the main file: parsed unless its bytes are
/// those of `current`, the configuration in force, whose unchanged jobs
/// are reused.
fn reload_load(
    dir: &TempDir,
    current: &rea_config::Config,
) -> Result<Option<rea_config::Config>, Vec<rea_config::Diagnostic>> {
    rea_config::load_if_changed(
        &dir.jobs(),
        rea_config::LoadOptions::default(),
        None,
        Some(current),
    )
}

fn config_load(dir: &TempDir) -> Option<Result<rea_config::Config, Vec<rea_config::Diagnostic>>> {
    Some(rea_config::load_with(
        &dir.jobs(),
        rea_config::LoadOptions {
            allow_insecure_permissions: false,
        },
    ))
}
