//! `rea reload`: the daemon re-reads the job file now.

use crate::cli::Global;
use crate::failure::{self, CommandResult};
use rea_proto::protocol::ReloadReply;
use rea_proto::Request;

pub(crate) fn run(global: &Global) -> CommandResult {
    let reply = super::request::<ReloadReply>(global, &Request::Reload)?.data;
    if reply.unchanged {
        println!("the job file is unchanged: {} jobs in force", reply.jobs);
    } else {
        println!("reloaded: {} jobs", reply.jobs);
    }
    failure::ok()
}
