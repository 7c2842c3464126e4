//! `rea cancel ID...`: pending one-shots are cancelled; a running one only
//! with `--kill`.

use crate::cli::{CancelArgs, Global};
use crate::failure::{self, CommandResult};
use rea_proto::protocol::CancelReply;
use rea_proto::Request;

pub(crate) fn run(global: &Global, args: &CancelArgs) -> CommandResult {
    if let Some(s) = super::cluster::settings(global)? {
        return super::cluster::cancel(&s, args);
    }
    let request = Request::Cancel {
        ids: args.ids.clone(),
        kill: args.kill,
    };
    let reply = super::request::<CancelReply>(global, &request)?.data;
    for c in &reply.cancelled {
        let verb = if c.result == "killing" {
            "killing"
        } else {
            "cancelled"
        };
        println!("{verb} {}", c.id);
    }
    failure::ok()
}
