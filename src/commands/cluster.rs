//! The query commands in cluster mode (`[cluster]` in the job file): `rea
//! status`, `history`, `logs`, `pending`, `cancel`, `pause` and `resume`
//! answer cluster-wide from the database, on any node, with or without a
//! daemon. The other commands' files only ask [`settings`] first.

use chrono::Utc;
use rea_core::audit::{Action, Entry, Outcome};
use rea_store::history::HistoryReader;
use serde_json::json;

use crate::cli::{exit, CancelArgs, Global, PendingArgs, SelectArgs, StatusArgs};
use crate::failure::{self, CommandResult, Failure};
use crate::table::Table;
use rea_proto::protocol::{ClusterNodeInfo, StatusReply};
use rea_proto::{Client, Request};

/// The cluster settings if the job file has `[cluster]`; None: local mode.
pub(crate) fn settings(global: &Global) -> Result<Option<rea_pg::Settings>, Failure> {
    match crate::cluster::for_commands(&super::job_file(global)) {
        None => Ok(None),
        Some(Ok(s)) => Ok(Some(s)),
        Some(Err(e)) => Err(Failure::invalid(e)),
    }
}

fn reader(s: &rea_pg::Settings) -> Result<rea_pg::Reader, Failure> {
    rea_pg::Reader::connect(s).map_err(|e| {
        Failure::runtime(format!(
            "cluster {:?}: {e} (database {})",
            s.cluster,
            rea_pg::redact(&s.url)
        ))
    })
}

/// The cluster's history, read from its database.
pub(crate) fn history_reader(s: &rea_pg::Settings) -> Result<Box<dyn HistoryReader>, Failure> {
    Ok(Box::new(reader(s)?))
}

/// Records a change this command made in the cluster database itself
/// (pause, resume, cancel: no daemon answers them) in its audit log. A
/// failure to record is said, and does not undo the change.
fn audit(
    db: &rea_pg::Reader,
    s: &rea_pg::Settings,
    action: Action,
    target: Vec<String>,
    error: Option<&String>,
) {
    let entry = Entry {
        ts: chrono::Utc::now(),
        uid: rustix::process::geteuid().as_raw(),
        user: rea_host::user::current_user_name(),
        tenant: rea_core::audit::admin_tenant(action, &target),
        source: "cli".into(),
        action,
        target,
        result: if error.is_some() {
            Outcome::Refused
        } else {
            Outcome::Ok
        },
        code: error.map(|_| "refused".to_string()),
        message: error.cloned(),
        params: None,
        node: None,
    }
    .bounded();
    if let Err(e) = db.audit(&s.node, &entry) {
        eprintln!("rea: warning: cannot record this change in the cluster's audit log: {e}");
    }
}

/// `rea audit`'s cluster-wide entries.
pub(crate) fn audit_reader(
    s: &rea_pg::Settings,
) -> Result<Box<dyn rea_store::audit::AuditReader>, Failure> {
    Ok(Box::new(reader(s)?))
}

fn db_failure(e: String) -> Failure {
    Failure::runtime(format!("the cluster database: {e}"))
}

/// This node as its daemon sees itself (lease, backlog, last database
/// error, claims); None without a daemon for the state directory.
fn this_node(global: &Global) -> Option<ClusterNodeInfo> {
    let dir = super::state_dir(global).ok()?;
    let mut client = Client::connect(&dir, global.client_timeout).ok()?;
    super::ask::<StatusReply>(&mut client, &Request::Status { job: None })
        .ok()?
        .data
        .daemon
        .cluster
}

/// One line on this node, first: it is what a node whose database is
/// unreachable can still tell.
fn node_line(node: Option<&ClusterNodeInfo>) -> String {
    let Some(n) = node else {
        return "this node: no daemon running for this state directory".to_string();
    };
    let ms = |ms: u64| rea_core::duration::format(std::time::Duration::from_millis(ms));
    let lease = if n.lease_live {
        format!(
            "lease live, renewed {} ago, {} left",
            ms(n.lease_age_ms),
            ms(n.lease_left_ms)
        )
    } else {
        format!(
            "NO LEASE (last renewed {} ago): not scheduling",
            ms(n.lease_age_ms)
        )
    };
    let claims = if n.claims.is_empty() {
        "none".to_string()
    } else {
        n.claims
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let error = match &n.last_error {
        Some(e) => format!("{} ({})", e.message, super::relative(e.at.0, Utc::now())),
        None => "none".to_string(),
    };
    format!(
        "this node: {}{}: {lease}; backlog {}{}; {}; claims: {claims}; last database error: {error}",
        n.node,
        n.epoch.map(|e| format!(" (epoch {e})")).unwrap_or_default(),
        n.backlog,
        match n.dropped {
            0 => String::new(),
            d => format!(" ({d} dropped)"),
        },
        clock_text(n.clock_offset_ms),
    )
}

/// This machine's clock beside the database's, as this node measured it.
fn clock_text(offset_ms: Option<i64>) -> String {
    let Some(ms) = offset_ms else {
        return "clock not measured yet".to_string();
    };
    let secs = ms.abs() as f64 / 1000.0;
    let side = if ms < 0 { "ahead of" } else { "behind" };
    if ms.abs() > rea_store::clock::TOLERANCE_MS {
        format!("CLOCK {secs:.3} s {side} the database's (scheduling on the database's)")
    } else {
        format!("clock {secs:.3} s {side} the database's")
    }
}

pub(crate) fn status(global: &Global, s: &rea_pg::Settings, args: &StatusArgs) -> CommandResult {
    // `--check` answers from the database, and from this node's daemon
    // only for its clock.
    let node = this_node(global);
    let st = match reader(s).and_then(|r| r.status(args.job.as_deref()).map_err(db_failure)) {
        Ok(st) => st,
        Err(e) if args.check => return super::probe::unreachable(&e.to_string()),
        Err(e) => {
            // What this node knows of itself is printed all the same (with
            // `--json`, as `this_node`, beside the database's error).
            if args.json {
                println!(
                    "{}",
                    json!({
                        "cluster": s.cluster,
                        "this_node": node,
                        "database_error": e.to_string(),
                    })
                );
            } else {
                println!("{}", node_line(node.as_ref()));
            }
            return Err(e);
        }
    };
    if let Some(job) = &args.job {
        if st.jobs.is_empty() {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!("no job named {job:?} in cluster {:?}", st.cluster),
            ));
        }
    }
    if args.check {
        let clock = node.as_ref().and_then(|n| n.clock_offset_ms);
        return super::probe::cluster(&st, args.tenant.as_deref(), clock, s.lease);
    }
    if args.json {
        let mut v = serde_json::to_value(&st).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("this_node".into(), json!(node));
        }
        println!("{v}");
        return failure::ok();
    }
    let now = st.db_now;
    println!("cluster: {} ({} node(s))", st.cluster, st.nodes.len());
    println!("{}", node_line(node.as_ref()));
    let mut nodes = Table::new(["NODE", "STATE", "LEASE", "HOST", "PID", "DEFINITIONS"]);
    for n in &st.nodes {
        let lease = if n.state != "live" {
            "-".to_string()
        } else if n.lease_left_ms >= 0 {
            format!("{}ms left", n.lease_left_ms)
        } else {
            format!("ended {}ms ago", -n.lease_left_ms)
        };
        nodes.row([
            n.node.clone(),
            n.state.clone(),
            lease,
            n.hostname.clone().unwrap_or_default(),
            n.pid.map(|p| p.to_string()).unwrap_or_default(),
            match (&n.digest, n.differs) {
                (_, true) => "DIFFERENT from the other nodes' (check its job file)".to_string(),
                (Some(d), false) => d.clone(),
                (None, _) => "-".to_string(),
            },
        ]);
    }
    print!("{}", nodes.render());
    println!();
    let mut jobs = Table::new(["JOB", "STATE", "LAST", "WHEN", "ON", "LAST CLAIMED"]);
    for j in &st.jobs {
        let mut state = if !j.running.is_empty() {
            let on: Vec<String> = j
                .running
                .iter()
                .map(|(run, n, _)| format!("{n} (run {run})"))
                .collect();
            format!("running on {}", on.join(", "))
        } else if j.paused {
            "paused".to_string()
        } else {
            "idle".to_string()
        };
        if j.paused && !j.running.is_empty() {
            state.push_str(", paused");
        }
        if j.drift.is_some() {
            state.push_str(", DEFINITIONS DIFFER");
        }
        let last = j.last.as_ref();
        jobs.row([
            j.job.clone(),
            state,
            last.and_then(|r| r.status)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|| "never run".into()),
            last.and_then(|r| r.ended.or(r.started))
                .map(|t| super::relative(t, now))
                .unwrap_or_default(),
            last.and_then(|r| r.detail.as_ref())
                .and_then(|d| d.get("node"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string(),
            j.last_scheduled
                .map(|t| super::relative(t, now))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    print!("{}", jobs.render());
    for j in st.jobs.iter().filter(|j| j.drift.is_some()) {
        println!(
            "!! {}: the nodes define it differently: {}",
            j.job,
            j.drift.as_ref().map(|d| d.to_string()).unwrap_or_default()
        );
    }
    failure::ok()
}

pub(crate) fn pending(s: &rea_pg::Settings, args: &PendingArgs) -> CommandResult {
    let (total, rows) = reader(s)?
        .pending(args.tag.as_deref(), args.limit.unwrap_or(usize::MAX))
        .map_err(db_failure)?;
    if args.json {
        println!("{}", json!({ "pending": total, "oneshots": rows }));
        return failure::ok();
    }
    let now = Utc::now();
    let mut table = Table::new(["ID", "STATE", "DUE", "", "TAGS", "COMMAND"]);
    for p in &rows {
        let shot = p.shot.as_ref();
        table.row([
            p.id.clone(),
            match &p.running_on {
                Some(n) => format!("running on {n}"),
                None => "pending".to_string(),
            },
            p.due.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            super::relative(p.due, now),
            shot.map(|s| {
                s.rare()
                    .tags
                    .iter()
                    .map(|t| format!("#{t}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
            shot.map(|s| s.argv.join(" ")).unwrap_or_default(),
        ]);
    }
    if table.is_empty() {
        println!("no pending one-shots");
    } else {
        print!("{}", table.render());
    }
    failure::ok()
}

pub(crate) fn cancel(s: &rea_pg::Settings, args: &CancelArgs) -> CommandResult {
    let db = reader(s)?;
    let done = db.cancel(&args.ids, args.kill);
    audit(
        &db,
        s,
        Action::Cancel,
        args.ids.clone(),
        done.as_ref().err(),
    );
    let done = done.map_err(|e| Failure::new(exit::NOT_FOUND, e))?;
    let mut missed = Vec::new();
    for (id, how) in done {
        match how {
            rea_pg::Cancel::Cancelled => println!("cancelled {id}"),
            rea_pg::Cancel::Killing => println!("killing {id}"),
            rea_pg::Cancel::Running => missed.push(format!(
                "one-shot {id:?} was claimed by a node and is running; use --kill to terminate it"
            )),
            rea_pg::Cancel::AlreadyRan => missed.push(format!(
                "one-shot {id:?} was claimed by a node and has already run"
            )),
        }
    }
    if missed.is_empty() {
        failure::ok()
    } else {
        Err(Failure::new(exit::FAILURE, missed.join("\n")))
    }
}

pub(crate) fn pause(
    global: &Global,
    s: &rea_pg::Settings,
    args: &SelectArgs,
    pause: bool,
) -> CommandResult {
    let cfg = super::load_config(global)?;
    use rea_core::job::SelectError;
    let jobs = cfg.jobs.iter().map(|j| &**j);
    let names = rea_core::job::select(jobs, &args.jobs, args.tag.as_deref(), args.all).map_err(
        |e| match e {
            SelectError::UnknownJob(n) => super::unknown_job(&cfg, &n),
            SelectError::NoTag(tag) => {
                Failure::new(exit::NOT_FOUND, format!("no job has the tag {tag:?}"))
            }
            SelectError::Nothing => Failure::invalid("name jobs, --tag TAG or --all".to_string()),
        },
    )?;
    let by = format!("{}@{}", s.node, rea_host::hostname());
    let db = reader(s)?;
    let done = db.pause((!args.all).then_some(names.as_slice()), pause, &by);
    let mut target = args.jobs.clone();
    target.extend(args.tag.iter().map(|t| format!("tag:{t}")));
    if args.all {
        target.push("*".into());
    }
    let action = if pause { Action::Pause } else { Action::Resume };
    audit(&db, s, action, target, done.as_ref().err());
    let (changed, paused) = done.map_err(db_failure)?;
    if args.json {
        println!("{}", json!({ "changed": changed, "paused": paused }));
        return failure::ok();
    }
    let verb = if pause { "paused" } else { "resumed" };
    if changed.is_empty() {
        println!("nothing to do: already {verb}");
    } else {
        println!("{verb} cluster-wide: {}", changed.join(", "));
    }
    if !paused.is_empty() {
        println!("paused now: {}", paused.join(", "));
    }
    failure::ok()
}
