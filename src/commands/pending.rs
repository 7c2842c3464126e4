//! `rea pending`: one-shots waiting to run, by due time.

use chrono::{DateTime, Utc};

use crate::cli::{exit, Global, PendingArgs};
use crate::control::Request;
use crate::table::Table;

pub fn run(global: &Global, args: &PendingArgs) -> i32 {
    let request = Request::Pending {
        tag: args.tag.clone(),
        limit: args.limit,
    };
    let data = match super::request(global, &request) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if args.json {
        println!("{data}");
        return exit::OK;
    }
    let now = Utc::now();
    let mut table = Table::new(["ID", "STATE", "DUE", "", "TAGS", "COMMAND"]);
    for s in data["oneshots"].as_array().into_iter().flatten() {
        let due = s["due"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        let argv: Vec<String> = s["argv"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        let tags: Vec<String> = s["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(|t| format!("#{t}")))
            .collect();
        table.row([
            s["id"].as_str().unwrap_or("").to_string(),
            s["state"].as_str().unwrap_or("").to_string(),
            due.map(|d| {
                d.with_timezone(&Utc)
                    .format("%Y-%m-%d %H:%M:%S UTC")
                    .to_string()
            })
            .unwrap_or_default(),
            due.map(|d| super::relative(d.with_timezone(&Utc), now))
                .unwrap_or_default(),
            tags.join(" "),
            argv.join(" "),
        ]);
    }
    if table.is_empty() {
        println!("no pending one-shots");
    } else {
        print!("{}", table.render());
    }
    exit::OK
}
