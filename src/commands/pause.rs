//! `rea pause` / `rea resume`: by name, `--tag` or `--all`. The paused set
//! lives in the daemon and survives its restarts.

use crate::cli::{Global, SelectArgs};
use crate::failure::{self, CommandResult};
use rea_proto::protocol::PauseReply;
use rea_proto::{Request, Selector};

pub(crate) fn run(global: &Global, args: &SelectArgs, pause: bool) -> CommandResult {
    if let Some(s) = super::cluster::settings(global)? {
        return super::cluster::pause(global, &s, args, pause);
    }
    let sel = Selector {
        jobs: args.jobs.clone(),
        tag: args.tag.clone(),
        all: args.all,
    };
    let request = if pause {
        Request::Pause(sel)
    } else {
        Request::Resume(sel)
    };
    let answer = super::request::<PauseReply>(global, &request)?;
    if args.json {
        println!("{}", answer.raw);
        return failure::ok();
    }
    let reply = answer.data;
    let verb = if pause { "paused" } else { "resumed" };
    if reply.changed.is_empty() {
        println!("nothing to do: already {verb}");
    } else {
        println!("{verb}: {}", reply.changed.join(", "));
    }
    if !reply.paused.is_empty() {
        println!("paused now: {}", reply.paused.join(", "));
    }
    failure::ok()
}
