//! `rea-bench cluster`, at volume: durable one-shot submissions into the
//! cluster database (one statement per group of submissions) against one
//! INSERT per submission on the same server; one-shots due at once drained
//! by three nodes against one daemon in local mode; 300 jobs `@every 1s`
//! on three nodes against the same jobs in local mode; `rea history JOB
//! --failed` with a million runs in the database, with and without the
//! index it uses; and fires under chaos (SIGKILLs, restarts, a SIGSTOP
//! past the lease) checked for duplicates from a witness file.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};

use crate::cluster::{cluster_table, describe, lateness, PrivatePg};
use crate::oneshots::pipeline;
use crate::report::Figure;
use crate::util::{self, Daemon, TempDir};
use crate::Settings;

/// Timings of the nodes where detection time does not matter.
const CALM: &str = "lease = \"3s\"\nheartbeat = \"500ms\"\n";

pub(crate) fn cluster_scale(
    s: &Settings,
    pg: &PrivatePg,
    want: &dyn Fn(&str) -> bool,
) -> Vec<Figure> {
    let mut out = Vec::new();
    if want("submit") {
        out.extend(submissions(s));
    }
    if want("drain") {
        out.extend(drain(s, pg));
    }
    if want("every") {
        out.extend(every_second(s, pg));
    }
    if want("history") {
        out.extend(history_failed(s, pg));
    }
    if want("peers") {
        out.extend(peers_look(s, pg));
    }
    if want("chaos") {
        out.extend(chaos(s, pg));
    }
    out
}

/// Waits until `n` nodes of `cluster` hold live leases (the database's clock).
fn wait_live(pg: &PrivatePg, cluster: &str, n: usize) {
    let ok = util::wait_until(Duration::from_secs(60), Duration::from_millis(50), || {
        pg.psql(
            "rea",
            &format!(
                "select count(*) from rea.nodes where cluster = '{cluster}' and state = 'live' \
                 and lease_until > clock_timestamp()"
            ),
        )
        .and_then(|c| c.parse::<usize>().ok())
            == Some(n)
    });
    if !ok {
        util::die(format!("cluster bench: {n} nodes of {cluster} not live"));
    }
}

fn count(pg: &PrivatePg, sql: &str) -> u64 {
    pg.psql("rea", sql)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| util::die(format!("cluster bench: {sql}")))
}

/// WAL flushes of the server so far (`pg_stat_wal.wal_sync`).
fn wal_syncs(pg: &PrivatePg) -> u64 {
    count(pg, "select wal_sync from pg_stat_wal")
}

fn die<T>(e: tokio_postgres::Error) -> T {
    util::die(format!("cluster bench: baseline: {e}"))
}

/// A client of the bench's database, its connection driven on the
/// runtime it is made in.
async fn connected(url: &str) -> tokio_postgres::Client {
    let cfg: tokio_postgres::Config = url
        .parse()
        .unwrap_or_else(|e| util::die(format!("cluster bench: url: {e}")));
    let (client, conn) = cfg
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| util::die(format!("cluster bench: connect: {e}")));
    tokio::spawn(conn);
    client
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| util::die(e))
}

/// The baseline: `n` one-shots queued with one INSERT each (what a node
/// did before submissions were grouped), on one connection, each its own
/// transaction; `pipelined` sends them all before reading an answer.
fn insert_each(pg: &PrivatePg, cluster: &str, n: usize, pipelined: bool) -> Duration {
    runtime().block_on(async {
        let client = connected(&pg.url()).await;
        client
            .batch_execute("set synchronous_commit = on")
            .await
            .unwrap_or_else(die);
        let stmt = client
            .prepare(
                "insert into rea.pending (cluster, kind, job, attempt, due_at, spec, submitted_by)
                 values ($1, 'oneshot', $2, 1, clock_timestamp() + interval '1 hour',
                         $3::text::jsonb, 'bench')
                 returning id",
            )
            .await
            .unwrap_or_else(die);
        let args: Vec<(String, String)> = (0..n)
            .map(|i| {
                let id = format!("{cluster}-{i}");
                let spec = format!(
                    r#"{{"id":"{id}","argv":["true"],"dir":"/","due":"2030-01-01T00:00:00Z","submitted":"2030-01-01T00:00:00Z"}}"#
                );
                (id, spec)
            })
            .collect();
        let t0 = Instant::now();
        if pipelined {
            let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 3]> = args
                .iter()
                .map(|(id, spec)| {
                    [
                        &cluster as &(dyn tokio_postgres::types::ToSql + Sync),
                        id,
                        spec,
                    ]
                })
                .collect();
            let futs = params.iter().map(|p| client.query_one(&stmt, p)).collect();
            for answer in rea_pg::pipelined(futs).await {
                answer.unwrap_or_else(die);
            }
        } else {
            for (id, spec) in &args {
                client
                    .query_one(&stmt, &[&cluster, id, spec])
                    .await
                    .unwrap_or_else(die);
            }
        }
        t0.elapsed()
    })
}

/// Durable submissions: `rea submit` requests pipelined on one control
/// connection to a cluster node, each answered once its one-shot is
/// committed, on a server with PostgreSQL's durable defaults; beside them,
/// one INSERT per submission on the same server.
fn submissions(s: &Settings) -> Vec<Figure> {
    let Some(pg) = PrivatePg::start_durable() else {
        return Vec::new();
    };
    let n = s.oneshots_submits;
    let dir = TempDir::new("cluster-submit");
    dir.write_jobs(&format!(
        "{}[daemon]\nmax_concurrent = 64\n",
        cluster_table(&pg.url(), "submit", "n0", CALM)
    ));
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    wait_live(&pg, "submit", 1);
    let mut took = Vec::new();
    let mut syncs = Vec::new();
    for r in 0..s.reps {
        eprintln!(
            "cluster: {n} durable submissions pipelined to a node ({}/{})",
            r + 1,
            s.reps
        );
        let before = wal_syncs(&pg);
        took.push(pipeline(&dir.state(), n, move |i| {
            format!(
                r#"{{"v":1,"op":"submit","name":"r{r}-s{i}","argv":["true"],"dir":"/","in_ms":3600000}}"#
            )
        }));
        syncs.push(wal_syncs(&pg) - before);
    }
    d.stop();
    let queued = count(
        &pg,
        "select count(*) from rea.pending where cluster = 'submit' and kind = 'oneshot'",
    );
    if queued != (n * s.reps) as u64 {
        util::die(format!(
            "cluster bench: {queued} one-shots queued of {} acknowledged",
            n * s.reps
        ));
    }
    let t = util::median(&took);
    let rate = n as f64 / t.as_secs_f64();
    let per_sync =
        n as f64 / util::median_f(&syncs.iter().map(|x| *x as f64).collect::<Vec<_>>()).max(1.0);

    let nb = n.min(5000);
    eprintln!("cluster: baseline, {nb} submissions as one INSERT each");
    let before = wal_syncs(&pg);
    let one = insert_each(&pg, "base-seq", nb, false);
    let one_syncs = wal_syncs(&pg) - before;
    let piped = insert_each(&pg, "base-pipe", nb, true);
    let one_rate = nb as f64 / one.as_secs_f64();
    let piped_rate = nb as f64 / piped.as_secs_f64();
    vec![
        Figure::check(
            "cluster",
            format!(
                "**durable submissions**: {n} `submit`s pipelined on one connection to a node, until the {n}th `ok` (committed, fsync on); median of {}",
                s.reps
            ),
            format!(
                "{} = {rate:.0}/s, {:.1}× the baseline; {per_sync:.0} submissions per WAL flush",
                util::ms(t),
                rate / one_rate
            ),
            "≥ 50,000/s",
            rate >= 50_000.0,
        ),
        Figure::info(
            "cluster",
            format!("  baseline: {nb} one-shots queued with one INSERT each (a transaction each), one at a time, same server"),
            format!(
                "{} = {one_rate:.0}/s; {:.2} WAL flushes per submission",
                util::ms(one),
                one_syncs as f64 / nb as f64
            ),
        ),
        Figure::info(
            "cluster",
            format!("  the same {nb} INSERTs pipelined on the connection"),
            format!("{} = {piped_rate:.0}/s", util::ms(piped)),
        ),
    ]
}

/// A job command (or one-shot) that appends its name, occurrence, attempt
/// and fence to `witness`.
fn witness_line(witness: &Path) -> String {
    format!(
        "echo \"$REA_JOB $REA_SCHEDULED_AT $REA_ATTEMPT $REA_FENCE\" >> {}",
        witness.display()
    )
}

/// Lines of the witness, split in fields.
fn witness(witness: &Path) -> Vec<Vec<String>> {
    fs::read_to_string(witness)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// `n` one-shots due at the same instant: submitted through one node, run
/// by `nodes` daemons (0: one daemon in local mode), each appending to a
/// witness. The time from due to the last end, and the witness's lines by
/// one-shot (each must be exactly one); in cluster mode the runs' nodes.
struct Drained {
    span: Duration,
    distinct: usize,
    lines: usize,
    by_node: BTreeMap<String, u64>,
}

fn drain_once(pg: &PrivatePg, nodes: usize, n: usize, name: &str) -> Drained {
    let wdir = TempDir::new("drain-witness");
    let wpath = wdir.path().join("runs");
    let limit = 64;
    let dirs: Vec<TempDir> = (0..nodes.max(1)).map(|_| TempDir::new("drain")).collect();
    for (i, d) in dirs.iter().enumerate() {
        let head = if nodes == 0 {
            String::new()
        } else {
            cluster_table(&pg.url(), name, &format!("n{i}"), CALM)
        };
        d.write_jobs(&format!("{head}[daemon]\nmax_concurrent = {limit}\n"));
    }
    let mut daemons: Vec<Daemon> = dirs.iter().map(Daemon::spawn).collect();
    for d in &mut daemons {
        d.wait_ready(Duration::from_secs(30));
    }
    if nodes > 0 {
        wait_live(pg, name, nodes);
    }
    let at_ms = (Utc::now() + chrono::Duration::seconds(5)).timestamp() * 1000 + 1000;
    let at = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_else(Utc::now);
    let at_text = at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let cmd = serde_json::to_string(&witness_line(&wpath)).unwrap_or_default();
    let text = at_text.clone();
    pipeline(&dirs[0].state(), n, move |i| {
        format!(
            r#"{{"v":1,"op":"submit","name":"d{i:05}","argv":["/bin/sh","-c",{cmd}],"dir":"/","at":"{text}"}}"#
        )
    });
    if Utc::now() >= at {
        util::die(format!(
            "cluster bench: the {n} submissions took past their due time {at_text}"
        ));
    }
    let ok = util::wait_until(Duration::from_secs(600), Duration::from_millis(50), || {
        witness(&wpath).len() >= n
    });
    if !ok {
        util::die(format!(
            "cluster bench: {} of {n} one-shots ran in 600 s",
            witness(&wpath).len()
        ));
    }
    // Every end recorded (cluster: in the database; local: the history).
    let ended = || {
        if nodes > 0 {
            count(
                pg,
                &format!(
                    "select count(*) from rea.runs where cluster = '{name}' and ended_at is not null"
                ),
            ) >= n as u64
        } else {
            util::count_history_lines(&dirs[0].state(), &["\"status\":\"succeeded\""]) >= n
        }
    };
    if !util::wait_until(Duration::from_secs(120), Duration::from_millis(20), ended) {
        util::die("cluster bench: not every one-shot's end was recorded");
    }
    // A second run of anything would come right behind: give it time.
    std::thread::sleep(Duration::from_millis(1000));
    let last_end: DateTime<Utc> = if nodes > 0 {
        let us = count(
            pg,
            &format!("select (extract(epoch from max(ended_at)) * 1000000)::bigint from rea.runs where cluster = '{name}'"),
        );
        DateTime::<Utc>::from_timestamp_micros(us as i64)
            .unwrap_or_else(|| util::die("cluster bench: no end time"))
    } else {
        fs::read_to_string(dirs[0].state().join("history.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["ended"].as_str().and_then(|t| t.parse().ok()))
            .max()
            .unwrap_or_else(|| util::die("cluster bench: no end time"))
    };
    for d in daemons {
        d.stop();
    }
    let lines = witness(&wpath);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for l in &lines {
        *seen
            .entry(l.first().cloned().unwrap_or_default())
            .or_default() += 1;
    }
    let mut by_node = BTreeMap::new();
    if nodes > 0 {
        for row in pg
            .psql(
                "rea",
                &format!("select node, count(*) from rea.runs where cluster = '{name}' group by node order by node"),
            )
            .unwrap_or_default()
            .lines()
        {
            if let Some((node, c)) = row.split_once('|') {
                by_node.insert(node.to_string(), c.parse().unwrap_or(0));
            }
        }
    }
    Drained {
        span: (last_end - at).to_std().unwrap_or_default(),
        distinct: seen.len(),
        lines: lines.len(),
        by_node,
    }
}

/// `oneshots_fire` one-shots due at once, drained by three nodes, against
/// one daemon in local mode.
fn drain(s: &Settings, pg: &PrivatePg) -> Vec<Figure> {
    let n = s.oneshots_fire;
    eprintln!("cluster: {n} one-shots due at once, 3 nodes");
    let three = drain_once(pg, 3, n, "drain");
    eprintln!("cluster: {n} one-shots due at once, local mode");
    let local = drain_once(pg, 0, n, "drain-local");
    let once = three.distinct == n && three.lines == n;
    vec![
        Figure::check(
            "cluster",
            format!("**{n} one-shots due at the same instant, drained by 3 nodes** (max_concurrent 64 each; a shell appending to a witness): due → last end"),
            format!(
                "{} ({:.0} runs/s); {} of {n} ran, {} witness lines; by node {:?}",
                util::ms(three.span),
                n as f64 / three.span.as_secs_f64(),
                three.distinct,
                three.lines,
                three.by_node
            ),
            "each exactly once",
            once,
        ),
        Figure::info(
            "cluster",
            "  baseline: the same on one daemon in local mode",
            format!(
                "{} ({:.0} runs/s); {} of {n} ran, {} witness lines",
                util::ms(local.span),
                n as f64 / local.span.as_secs_f64(),
                local.distinct,
                local.lines
            ),
        ),
    ]
}

/// 300 jobs `@every 1s` on three nodes, against the same jobs on one
/// daemon in local mode and on one cluster node (what the claims add).
fn every_second(s: &Settings, pg: &PrivatePg) -> Vec<Figure> {
    let secs = if s.quick { 8 } else { 20 };
    let jobs = 300;
    eprintln!("cluster: {jobs} jobs @every 1s for {secs} s: local mode");
    let local = lateness(pg, 0, jobs, "@every 1s", secs, "every-local");
    eprintln!("cluster: {jobs} jobs @every 1s for {secs} s: 1 node");
    let one = lateness(pg, 1, jobs, "@every 1s", secs, "every-1");
    eprintln!("cluster: {jobs} jobs @every 1s for {secs} s: 3 nodes");
    let three = lateness(pg, 3, jobs, "@every 1s", secs, "every-3");
    // The floor: the same number of processes started at one instant by a
    // program that does nothing else (each probe's first clock read −
    // the instant), one round per second.
    eprintln!(
        "cluster: {jobs} probes spawned directly at once, {} rounds",
        secs / 2
    );
    let direct = crate::daemon_parts::exec_baseline(jobs, (secs / 2) as usize);
    let expected = jobs * secs as usize;
    let p99 = if three.is_empty() {
        f64::NAN
    } else {
        util::percentile(&three, 99.0)
    };
    vec![
        Figure::check(
            "cluster",
            format!("**{jobs} jobs `@every 1s` on 3 nodes**, started − scheduled over {secs} s (about {expected} starts)"),
            describe(&three),
            "p99 ≤ 50 ms",
            p99 <= 50.0,
        ),
        Figure::info(
            "cluster",
            format!("  baseline: the same {jobs} jobs on one daemon in local mode"),
            describe(&local),
        ),
        Figure::info(
            "cluster",
            format!("  the same {jobs} jobs on 1 cluster node (a claim before each start)"),
            describe(&one),
        ),
        Figure::info(
            "cluster",
            format!("  floor, same run: {jobs} probes spawned directly at one instant, no rea (first clock read − instant)"),
            describe(&direct),
        ),
    ]
}

/// `rea history JOB --failed` against the cluster database holding
/// `history_lines` runs: 100 jobs, about 1% failed, and `j42` failed only
/// in the oldest 1% of its runs (the local-mode benchmark's worst case).
/// The process's wall time, median and p99 of 20; beside it the same
/// without the partial index `runs_failed`, and for a job with no runs
/// (the floor: start, connect, one round trip).
fn history_failed(s: &Settings, pg: &PrivatePg) -> Vec<Figure> {
    let n = s.history_lines;
    let dir = TempDir::new("cluster-history");
    dir.write_jobs(&format!(
        "{}[jobs.j42]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n",
        cluster_table(&pg.url(), "hist", "n0", CALM)
    ));
    // A node creates the schema; its runs are then written directly.
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    wait_live(pg, "hist", 1);
    d.stop();
    eprintln!("cluster: {n} runs into the database");
    let per_job = n / 100;
    let insert = format!(
        "insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch,
                               claimed_at, started_at, ended_at, exit_code)
         select 'hist', 'j' || (g % 100), ts, 1, 'schedule', st, 'n0', 1, ts, ts, ts, case when st = 'succeeded' then 0 else 1 end
         from (select g, timestamptz '2026-01-01' + g * interval '1 second' as ts,
                      case when g % 100 = 42 then (case when g / 100 < {per_job} / 100 then 'failed' else 'succeeded' end)
                           when g % 97 = 0 then 'failed' else 'succeeded' end as st
               from generate_series(0, {n} - 1) g) x;
         analyze rea.runs"
    );
    if pg.psql("rea", &insert).is_none() {
        util::die("cluster bench: inserting the runs failed");
    }
    let failed42 = count(
        pg,
        "select count(*) from rea.runs where cluster = 'hist' and job = 'j42' and status = 'failed'",
    );
    let time = |job: &str| -> (Vec<f64>, usize) {
        let mut xs = Vec::new();
        let mut lines = 0;
        for _ in 0..20 {
            let t = Instant::now();
            let out = util::rea(&dir, &["history", job, "--failed", "--json"])
                .output()
                .unwrap_or_else(|e| util::die(format!("rea history: {e}")));
            xs.push(t.elapsed().as_secs_f64() * 1e3);
            if !out.status.success() {
                util::die(format!(
                    "rea history failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            lines = String::from_utf8_lossy(&out.stdout).lines().count();
        }
        (xs, lines)
    };
    let (with, shown) = time("j42");
    let (floor, _) = time("nosuchjob");
    pg.psql("rea", "drop index rea.runs_failed");
    let (without, _) = time("j42");
    pg.psql(
        "rea",
        "create index runs_failed on rea.runs (cluster, job, id desc)
           where status in ('failed', 'timed_out', 'killed', 'interrupted')",
    );
    let pair = |xs: &[f64]| {
        format!(
            "p50 {:.1} / p99 {:.1} ms",
            util::percentile(xs, 50.0),
            util::percentile(xs, 99.0)
        )
    };
    let p50 = util::percentile(&with, 50.0);
    vec![
        Figure::check(
            "cluster",
            format!("**`rea history j42 --failed`** with {n} runs in the database (j42: {failed42} failures, all among its oldest runs; {shown} shown), the process's wall time, 20 runs"),
            pair(&with),
            "≤ 20 ms",
            p50 <= 20.0,
        ),
        Figure::info(
            "cluster",
            "  floor: the same command for a job with no runs (start, connect, one query)",
            pair(&floor),
        ),
        Figure::info(
            "cluster",
            "  baseline: the same without the partial index `runs_failed`",
            pair(&without),
        ),
    ]
}

/// Fires under chaos: jobs every second on three nodes (lease 1s), and
/// every few seconds a seeded choice of SIGKILL (restart at once or after
/// two seconds) or SIGSTOP for two seconds (past the lease), until the
/// witness holds the target count of starts. No (job, occurrence,
/// attempt) may start twice.
fn chaos(s: &Settings, pg: &PrivatePg) -> Vec<Figure> {
    let (jobs, target) = if s.quick { (25, 2000) } else { (100, 10_000) };
    let seed = std::env::var("REA_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let wdir = TempDir::new("chaos-witness");
    let wpath = wdir.path().join("starts");
    let cmd = witness_line(&wpath).replace('"', "\\\"");
    let mut body = String::from("[daemon]\nmax_concurrent = 256\n");
    for j in 0..jobs {
        body.push_str(&format!(
            "[jobs.c{j}]\nschedule = \"* * * * * *\"\ncommand = \"{cmd}\"\n"
        ));
    }
    let timings = "lease = \"1s\"\nheartbeat = \"250ms\"\ngrace = \"250ms\"\n";
    let dirs: Vec<TempDir> = (0..3).map(|_| TempDir::new("chaos")).collect();
    for (i, d) in dirs.iter().enumerate() {
        d.write_jobs(&format!(
            "{}{body}",
            cluster_table(&pg.url(), "chaos", &format!("n{i}"), timings)
        ));
    }
    let mut daemons: Vec<Option<Daemon>> = dirs.iter().map(|d| Some(Daemon::spawn(d))).collect();
    for d in daemons.iter_mut().flatten() {
        d.wait_ready(Duration::from_secs(30));
    }
    wait_live(pg, "chaos", 3);
    eprintln!(
        "cluster: chaos, {jobs} jobs every second on 3 nodes until {target} starts (seed {seed})"
    );
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(target as u64 / jobs as u64 * 3 + 120);
    let (mut kills, mut stops) = (0, 0);
    let mut actions = Vec::new();
    while witness(&wpath).len() < target {
        if Instant::now() > deadline {
            util::die(format!(
                "cluster bench: chaos: {} of {target} starts before the deadline",
                witness(&wpath).len()
            ));
        }
        std::thread::sleep(Duration::from_millis(2000 + rng.u64(0..2000)));
        let i = rng.usize(0..3);
        match rng.u8(0..3) {
            0 | 1 => {
                kills += 1;
                let later = rng.bool();
                actions.push(format!(
                    "kill n{i}{}",
                    if later { " (restart after 2 s)" } else { "" }
                ));
                if let Some(d) = daemons[i].take() {
                    d.kill();
                }
                if later {
                    std::thread::sleep(Duration::from_secs(2));
                }
                let mut d = Daemon::spawn(&dirs[i]);
                d.wait_ready(Duration::from_secs(30));
                daemons[i] = Some(d);
            }
            _ => {
                stops += 1;
                actions.push(format!("stop n{i} 2 s"));
                if let Some(d) = &daemons[i] {
                    d.signal(libc::SIGSTOP);
                    std::thread::sleep(Duration::from_secs(2));
                    d.signal(libc::SIGCONT);
                }
            }
        }
    }
    let took = t0.elapsed();
    eprintln!("cluster: chaos: {}", actions.join(", "));
    for d in daemons.into_iter().flatten() {
        d.stop();
    }
    let starts = witness(&wpath);
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    for l in &starts {
        if l.len() >= 3 {
            *seen
                .entry((l[0].clone(), l[1].clone(), l[2].clone()))
                .or_default() += 1;
        }
    }
    let dups = seen.values().filter(|c| **c > 1).count();
    let interrupted = count(
        pg,
        "select count(*) from rea.runs where cluster = 'chaos' and status = 'interrupted'",
    );
    vec![Figure::check(
        "cluster",
        format!(
            "**fires under chaos**: {jobs} jobs every second on 3 nodes (lease 1s), {kills} SIGKILLs (restarted) and {stops} SIGSTOPs of 2 s at random (seed {seed}), until {target} starts"
        ),
        format!(
            "{} starts in {:.0} s, {} distinct (job, occurrence, attempt), {dups} started twice; {interrupted} runs recorded interrupted",
            starts.len(),
            took.as_secs_f64(),
            seen.len()
        ),
        "0 duplicates",
        dups == 0,
    )]
}

/// The live views' cluster-wide side (#21): one look of a node's watch of
/// its peers (`rea_pg::bench_look`, the statements the watch sends once a
/// heartbeat) against a database holding 10,000 jobs and `history_lines`
/// runs (at least 100,000), 100 of them in progress on another node and
/// 20 ended since the watch's last look. Median and p99 of 200 looks;
/// beside it, in the same run, a bare round trip (the floor), the same
/// look without the index on ended runs (migration 6), and the
/// cluster-wide `rea status` query (`Reader::status`, every job's last
/// run) for scale.
fn peers_look(s: &Settings, pg: &PrivatePg) -> Vec<Figure> {
    let n = s.history_lines.max(100_000);
    let jobs = 10_000;
    let dir = TempDir::new("cluster-peers");
    dir.write_jobs(&format!(
        "{}[jobs.j0]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n",
        cluster_table(&pg.url(), "peers", "n0", CALM)
    ));
    // A node creates the schema; the rows are then written directly.
    let mut d = Daemon::spawn(&dir);
    d.wait_ready(Duration::from_secs(30));
    wait_live(pg, "peers", 1);
    d.stop();
    eprintln!("cluster: {jobs} jobs and {n} runs into the database");
    let fill = format!(
        "insert into rea.jobs (cluster, job) select 'peers', 'j' || g from generate_series(1, {jobs} - 1) g
           on conflict do nothing;
         insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch,
                               claimed_at, started_at, ended_at, exit_code, detail)
         select 'peers', 'j' || (g % {jobs}), ts, 1, 'schedule', 'succeeded', 'n1', 1, ts, ts, ts, 0,
                jsonb_build_object('run', 'r' || g || '-n1')
         from (select g, clock_timestamp() - interval '1 day' + g * interval '1 ms' as ts
               from generate_series(0, {n} - 1) g) x;
         insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch,
                               claimed_at, started_at, fence, detail)
         select 'peers', 'j' || g, clock_timestamp(), 1, 'manual', 'started', 'n1', 1,
                clock_timestamp(), clock_timestamp(), 1000000 + g, jsonb_build_object('run', 's' || g || '-n1')
         from generate_series(1, 100) g;
         insert into rea.runs (cluster, job, scheduled, attempt, trigger, status, node, epoch,
                               claimed_at, started_at, ended_at, exit_code, detail)
         select 'peers', 'j' || g, clock_timestamp(), 1, 'manual', 'failed', 'n1', 1,
                clock_timestamp(), clock_timestamp(), clock_timestamp() + interval '1 hour', 1,
                jsonb_build_object('run', 'e' || g || '-n1')
         from generate_series(1, 20) g;
         analyze rea.runs; analyze rea.jobs"
    );
    if pg.psql("rea", &fill).is_none() {
        util::die("cluster bench: inserting the runs failed");
    }
    let looks = |reps: usize| -> (Vec<f64>, (usize, usize, usize)) {
        runtime().block_on(async {
            let client = connected(&pg.url()).await;
            // The last look was a minute ago: the 20 runs "ended" an hour
            // from now are the news.
            let from = Utc::now() + chrono::Duration::minutes(30);
            let mut xs = Vec::with_capacity(reps);
            let mut got = (0, 0, 0);
            for _ in 0..reps {
                let t = Instant::now();
                got = rea_pg::bench_look(&client, "peers", "n0", from)
                    .await
                    .unwrap_or_else(|e| util::die(format!("cluster bench: look: {e}")));
                xs.push(t.elapsed().as_secs_f64() * 1e3);
            }
            (xs, got)
        })
    };
    let floor = || -> Vec<f64> {
        runtime().block_on(async {
            let client = connected(&pg.url()).await;
            let mut xs = Vec::new();
            for _ in 0..200 {
                let t = Instant::now();
                client
                    .query_one("select clock_timestamp()", &[])
                    .await
                    .unwrap_or_else(die);
                xs.push(t.elapsed().as_secs_f64() * 1e3);
            }
            xs
        })
    };
    // A node starting reads each job's last run ended elsewhere, once.
    let seeds = || -> (Vec<f64>, usize) {
        runtime().block_on(async {
            let client = connected(&pg.url()).await;
            let mut xs = Vec::new();
            let mut told = 0;
            for _ in 0..5 {
                let t = Instant::now();
                told = rea_pg::bench_seed(&client, "peers", "n0")
                    .await
                    .unwrap_or_else(|e| util::die(format!("cluster bench: seed: {e}")));
                xs.push(t.elapsed().as_secs_f64() * 1e3);
            }
            (xs, told)
        })
    };
    let (seeded, told) = seeds();
    let (with, (running, ended, nodes)) = looks(200);
    let bare = floor();
    pg.psql("rea", "drop index rea.runs_ended");
    let (without, _) = looks(20);
    pg.psql(
        "rea",
        "create index runs_ended on rea.runs (cluster, ended_at) where ended_at is not null",
    );
    let settings = rea_pg::Settings {
        url: pg.url(),
        cluster: "peers".into(),
        node: "bench".into(),
        host_id: "bench".into(),
        lease: Duration::from_secs(3),
        heartbeat: Duration::from_millis(500),
        grace: Duration::from_secs(1),
    };
    let reader = rea_pg::Reader::connect(&settings)
        .unwrap_or_else(|e| util::die(format!("cluster bench: reader: {e}")));
    let mut status = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        reader
            .status(None)
            .unwrap_or_else(|e| util::die(format!("cluster bench: status: {e}")));
        status.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let pair = |xs: &[f64]| {
        format!(
            "p50 {:.2} / p99 {:.2} ms",
            util::percentile(xs, 50.0),
            util::percentile(xs, 99.0)
        )
    };
    vec![
        Figure::info(
            "cluster",
            format!("**the live views' look at the other nodes** (once a heartbeat per node), {jobs} jobs, {n} runs in the database: it read {running} runs in progress, {ended} ended, {nodes} node(s); 200 looks"),
            pair(&with),
        ),
        Figure::info(
            "cluster",
            "  floor: one round trip (`select clock_timestamp()`), same connection kind, 200",
            pair(&bare),
        ),
        Figure::info(
            "cluster",
            "  baseline: the same look without the index on ended runs (migration 6), 20",
            pair(&without),
        ),
        Figure::info(
            "cluster",
            format!("  once, as a node starts: each job's last run ended elsewhere and the streaks (it told {told} jobs), 5"),
            pair(&seeded),
        ),
        Figure::info(
            "cluster",
            format!("  for scale: the cluster-wide `rea status` query (`Reader::status`, each of {jobs} jobs' last run), 5"),
            pair(&status),
        ),
    ]
}
