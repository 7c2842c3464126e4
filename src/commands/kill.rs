//! `rea kill JOB|RUN`: stop a hung scheduled run. The daemon terminates
//! the job's runs in progress (or the one run) and records them as
//! `killed`; no retry follows.

use crate::cli::{Global, KillArgs};
use crate::failure::{self, CommandResult};
use rea_proto::protocol::KillReply;
use rea_proto::Request;

pub(crate) fn run(global: &Global, args: &KillArgs) -> CommandResult {
    let request = Request::Kill {
        target: args.target.clone(),
    };
    let reply = super::request::<KillReply>(global, &request)?;
    if args.json {
        println!("{}", reply.raw);
        return failure::ok();
    }
    for k in &reply.data.killed {
        println!("killing run {} of {}", k.run, k.job);
    }
    failure::ok()
}
