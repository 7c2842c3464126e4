//! `rea-bench`: the benchmark suite. It drives the release `rea` binary that
//! sits next to it (`cargo build --release` builds both) on local scratch
//! directories and the loopback control socket, prints a markdown table of
//! each figure against its target, and (for `all`) rewrites the generated
//! block of BENCHMARKS.md.
//!
//! ```text
//! cargo run --release -p rea-bench -- all [--quick]
//! cargo run --release -p rea-bench -- precision|idle|scale|throughput|queries|footprint|heap|oneshots|cluster|governed|tenants|tenant-query|alerts|webhooks|status|top|web
//! ```

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use clap::{Parser, ValueEnum};

mod alerts;
mod alloc;
mod cluster;
mod cluster_scale;
mod daemon_parts;
mod governed;
mod oneshots;
mod queries;
mod report;
mod scale;
mod status;
mod tenant_query;
mod tenants;
mod throughput;
mod top;
mod util;
mod web;
mod webhooks;

use report::Figure;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    All,
    Precision,
    Idle,
    Scale,
    Throughput,
    Queries,
    Footprint,
    Heap,
    Oneshots,
    Cluster,
    Governed,
    Tenants,
    TenantQuery,
    Alerts,
    Webhooks,
    /// `rea status` at 100,000 jobs, subscribers (issue 21)
    Status,
    /// `rea top` at 100,000 jobs (issue 21)
    Top,
    /// The web console at 100,000 jobs (issue 22)
    Web,
}

/// The rea benchmark suite (uses the release `rea` next to this binary).
#[derive(Debug, Parser)]
#[command(name = "rea-bench")]
struct Args {
    /// Which benchmark to run
    part: Part,
    /// Shorter runs and smaller sizes (about a minute in all); also REA_BENCH_QUICK=1
    #[arg(long)]
    quick: bool,
    /// Repetitions for median figures [default: 3, quick: 1]
    #[arg(long)]
    reps: Option<usize>,
    /// Seconds per fire-precision phase [default: 25, quick: 10]
    #[arg(long)]
    precision_secs: Option<u64>,
    /// Seconds of idle observation [default: 60, quick: 10]
    #[arg(long)]
    idle_secs: Option<u64>,
    /// Jobs in the scale test's job file [default: 100000]
    #[arg(long)]
    scale_jobs: Option<usize>,
    /// The scale file's shape: realistic (lists, ranges, steps, names,
    /// zones, about a third of the schedules distinct), easy (`m h * * *`)
    /// or both
    #[arg(long, value_enum, default_value = "both")]
    scale_shape: scale::Shape,
    /// Reloads (each a SIGHUP after a one-line edit) after which the scale
    /// part reads the daemon's RSS (after the first and the last)
    #[arg(long, default_value_t = 10)]
    scale_reloads: usize,
    /// Write the scale part's generated job file (of --scale-shape,
    /// realistic for both) here and exit
    #[arg(long)]
    dump_scale_file: Option<PathBuf>,
    /// Entries in the dispatcher heap benchmark [default: 1000000]
    #[arg(long)]
    heap_entries: Option<usize>,
    /// Runs in the throughput test [default: 10000, quick: 2000]
    #[arg(long)]
    throughput_runs: Option<usize>,
    /// Pending one-shots in the journal for the restart test [default: 1000000, quick: 200000]
    #[arg(long)]
    oneshots_pending: Option<usize>,
    /// Submissions pipelined over one connection [default: 100000, quick: 20000]
    #[arg(long)]
    oneshots_submits: Option<usize>,
    /// One-shots due in the same second [default: 10000, quick: 2000]
    #[arg(long)]
    oneshots_fire: Option<usize>,
    /// Lines of generated history (a tenth of it is measured too) [default: 1000000, quick: 200000]
    #[arg(long)]
    history_lines: Option<usize>,
    /// Cluster measurements to run, comma-separated: lateness skew claims
    /// kill submit drain every history peers chaos [default: all]
    #[arg(long, value_delimiter = ',')]
    cluster_parts: Vec<String>,
    /// Where to write the report [default: BENCHMARKS.md for `all`, nowhere otherwise]
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not write any report file
    #[arg(long)]
    no_write: bool,
}

/// Sizes and durations every part reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) precision_secs: u64,
    pub(crate) idle_secs: u64,
    pub(crate) scale_jobs: usize,
    pub(crate) scale_shape: scale::Shape,
    pub(crate) scale_reloads: usize,
    pub(crate) heap_entries: usize,
    pub(crate) throughput_runs: usize,
    pub(crate) history_lines: usize,
    pub(crate) oneshots_pending: usize,
    pub(crate) oneshots_submits: usize,
    pub(crate) oneshots_fire: usize,
    /// Cluster measurements to run (empty: all).
    pub(crate) cluster_parts: Vec<String>,
}

impl Settings {
    fn from(a: &Args) -> Settings {
        let quick = a.quick || std::env::var("REA_BENCH_QUICK").is_ok_and(|v| v == "1");
        let pick = |v: Option<u64>, full: u64, q: u64| v.unwrap_or(if quick { q } else { full });
        let picku =
            |v: Option<usize>, full: usize, q: usize| v.unwrap_or(if quick { q } else { full });
        Settings {
            quick,
            reps: picku(a.reps, 3, 1).max(1),
            precision_secs: pick(a.precision_secs, 25, 10),
            idle_secs: pick(a.idle_secs, 60, 10),
            scale_jobs: picku(a.scale_jobs, 100_000, 100_000),
            scale_shape: a.scale_shape,
            scale_reloads: a.scale_reloads,
            heap_entries: picku(a.heap_entries, 1_000_000, 1_000_000),
            throughput_runs: picku(a.throughput_runs, 10_000, 2_000),
            history_lines: picku(a.history_lines, 1_000_000, 200_000).max(20),
            oneshots_pending: picku(a.oneshots_pending, 1_000_000, 200_000).max(1),
            oneshots_submits: picku(a.oneshots_submits, 100_000, 20_000).max(1),
            oneshots_fire: picku(a.oneshots_fire, 10_000, 2_000).max(1),
            cluster_parts: a.cluster_parts.clone(),
        }
    }
}

fn main() {
    // Probe mode: the precision benchmark's jobs use this binary as their
    // shell, so the clock is read before anything else happens.
    let now = SystemTime::now();
    if std::env::args_os().nth(1).is_some_and(|a| a == "-c") {
        daemon_parts::probe(now);
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == tenants::CLIENT_FLAG)
    {
        tenants::client();
    }
    let args = Args::parse();
    let s = Settings::from(&args);
    if let Some(path) = &args.dump_scale_file {
        let text = scale::big_file(s.scale_jobs, s.scale_shape);
        util::write_file(path, text.as_bytes());
        eprintln!(
            "{}: {} jobs, {} distinct schedules, {} bytes",
            path.display(),
            s.scale_jobs,
            scale::distinct_schedules(&text),
            text.len()
        );
        return;
    }
    util::rea_bin();
    let began = Instant::now();
    let date = chrono::Utc::now();
    let want = |p: Part| args.part == Part::All || args.part == p;
    let mut figures: Vec<Figure> = Vec::new();
    let heap = if want(Part::Heap) || want(Part::Scale) || want(Part::Oneshots) {
        scale::heap(&s)
    } else {
        Vec::new()
    };
    if want(Part::Heap) {
        figures.extend(heap.iter().cloned());
    }
    if want(Part::Footprint) {
        figures.extend(daemon_parts::footprint(&s));
    }
    if want(Part::Idle) {
        figures.extend(daemon_parts::idle(&s));
    }
    if want(Part::Precision) {
        figures.extend(daemon_parts::precision(&s));
    }
    if want(Part::Scale) {
        figures.extend(scale::scale(&s, &heap));
        figures.extend(scale::load_phases(&s));
    }
    if want(Part::Throughput) {
        figures.extend(throughput::throughput(&s));
    }
    if want(Part::Governed) {
        figures.extend(governed::governed(&s));
    }
    if want(Part::Tenants) {
        figures.extend(tenants::tenants(&s));
    }
    if want(Part::Queries) {
        figures.extend(queries::queries(&s));
    }
    if want(Part::Oneshots) {
        figures.extend(oneshots::oneshots(&s, &heap));
    }
    if want(Part::Cluster) {
        figures.extend(cluster::cluster(&s));
    }
    if want(Part::TenantQuery) {
        figures.extend(tenant_query::tenant_query(&s));
    }
    if want(Part::Alerts) {
        figures.extend(alerts::alerts(&s));
    }
    if want(Part::Webhooks) {
        figures.extend(webhooks::webhooks(&s));
    }
    if want(Part::Status) {
        figures.extend(status::status(&s));
    }
    if want(Part::Top) {
        figures.extend(top::top(&s));
    }
    if want(Part::Web) {
        figures.extend(web::web(&s));
    }
    let table = report::table(&figures);
    println!("{table}");
    let took = began.elapsed();
    eprintln!("rea-bench: done in {:.0} s", took.as_secs_f64());

    let out = match (&args.out, args.part) {
        _ if args.no_write => None,
        (Some(p), _) => Some(p.clone()),
        (None, Part::All) => Some(PathBuf::from("BENCHMARKS.md")),
        (None, _) => None,
    };
    if let Some(path) = out {
        let block = format!(
            "## Results\n\n\
             Taken {} with `rea-bench {}{}` ({} repetition(s) per median, precision phases of {} s, \
             idle window {} s, {} runs for throughput, {} history lines, {} pending / {} submitted / {} same-second one-shots; \
             the whole suite took {:.0} s).\n\n\
             Machine: {}.\n\n{table}",
            date.format("%Y-%m-%d %H:%M UTC"),
            format!("{:?}", args.part).to_lowercase(),
            if s.quick { " --quick" } else { "" },
            s.reps,
            s.precision_secs,
            s.idle_secs,
            s.throughput_runs,
            s.history_lines,
            s.oneshots_pending,
            s.oneshots_submits,
            s.oneshots_fire,
            took.as_secs_f64(),
            report::machine(),
        );
        match report::write_markdown(&path, &block) {
            Ok(()) => eprintln!("rea-bench: wrote {}", path.display()),
            Err(e) => util::die(format!("{}: {e}", path.display())),
        }
    }
}
