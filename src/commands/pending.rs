//! `rea pending`: one-shots waiting to run, by due time.

use chrono::Utc;

use crate::cli::{Global, PendingArgs};
use crate::failure::{self, CommandResult};
use crate::table::Table;
use rea_proto::protocol::PendingReply;
use rea_proto::Request;

pub(crate) fn run(global: &Global, args: &PendingArgs) -> CommandResult {
    if let Some(s) = super::cluster::settings(global)? {
        return super::cluster::pending(&s, args);
    }
    let request = Request::Pending {
        tag: args.tag.clone(),
        limit: args.limit,
    };
    let answer = super::request::<PendingReply>(global, &request)?;
    if args.json {
        println!("{}", answer.raw);
        return failure::ok();
    }
    let now = Utc::now();
    let tz = crate::time_text::zone(args.utc);
    let mut table = Table::new(["ID", "STATE", "DUE", "", "TAGS", "COMMAND"]);
    for s in &answer.data.oneshots {
        let due = s.due.0;
        let tags: Vec<String> = s.tags.iter().map(|t| format!("#{t}")).collect();
        table.row([
            s.id.clone(),
            s.state.clone(),
            crate::time_text::show(due, tz),
            super::relative(due, now),
            tags.join(" "),
            s.argv.join(" "),
        ]);
    }
    if table.is_empty() {
        println!("no pending one-shots");
    } else {
        print!("{}", table.render());
    }
    failure::ok()
}
