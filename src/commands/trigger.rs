//! `rea trigger JOB [--wait | --follow]`: run a job now through the daemon
//! (trigger `manual`), subject to its overlap policy unless `--force`.

use std::io::IsTerminal;
use std::time::Duration;

use rea_core::record::Record;

use super::run_end::{ended, exit_status};
use crate::cli::{Global, TriggerArgs};
use crate::failure::{self, CommandResult};
use rea_proto::protocol::TriggerReply;
use rea_proto::Request;

pub(crate) fn run(global: &Global, args: &TriggerArgs) -> CommandResult {
    let mut params = std::collections::BTreeMap::new();
    for (name, value) in &args.params {
        if params.insert(name.clone(), value.clone()).is_some() {
            return Err(failure::Failure::invalid(format!(
                "--param {name} is given twice"
            )));
        }
    }
    let mut client = super::connect(global)?;
    let wait = args.wait || args.follow;
    let request = Request::Trigger {
        job: args.job.clone(),
        force: args.force,
        wait,
        follow: args.follow,
        params,
    };
    let first = super::ask::<TriggerReply>(&mut client, &request)?;
    let TriggerReply { run, state, .. } = &first.data;
    if !wait {
        if args.json {
            println!("{}", first.raw);
        } else {
            println!("{state} run {run} of {}", args.job);
        }
        return failure::ok();
    }
    if args.follow {
        if args.json {
            println!("{}", first.raw);
        } else {
            eprintln!(
                "rea: {state} run {run} of {}; following its output",
                args.job
            );
        }
        client.without_timeout();
        let announced = (state == "started").then_some(run.as_str());
        let record =
            super::logs::print_stream(&mut client, &args.job, announced, args.json, args.raw)?;
        if !args.json {
            eprintln!("{}", ended(&args.job, &record));
        }
        return Ok(exit_status(&record));
    }
    let spinner = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            pb.set_style(style);
        }
        pb.set_message(format!("{} run {run}", args.job));
        pb.enable_steady_tick(Duration::from_millis(100));
        Some(pb)
    } else {
        eprintln!(
            "rea: {state} run {run} of {}; waiting for it to end",
            args.job
        );
        None
    };
    client.without_timeout();
    let resp = client.read_response();
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    let end = super::answer::<Record>(resp.map_err(super::client_failure)?)?;
    let record = &end.data;
    if args.json {
        println!("{}", end.raw);
    } else {
        println!("{}", ended(&args.job, record));
        if let Some(at) = record.retry_at() {
            println!("retry scheduled at {}", rea_core::record::format_ts(at));
        }
    }
    Ok(exit_status(record))
}
