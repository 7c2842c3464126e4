//! `rea list`: jobs, schedules, next fire times.

use chrono::Utc;
use serde_json::json;

use crate::cli::{Global, ListArgs};
use crate::failure::{self, CommandResult};
use crate::table::Table;

pub(crate) fn run(global: &Global, args: &ListArgs) -> CommandResult {
    let cfg = super::load_config(global)?;
    let now = Utc::now();
    if args.json {
        let jobs: Vec<_> = cfg
            .jobs
            .iter()
            .map(|j| {
                let next = if j.enabled { j.next_after(now) } else { None };
                json!({
                    "name": j.name,
                    "schedule": j.schedule_text(),
                    "after": j.after_names(),
                    "dependencies": j.after,
                    "timezone": &*j.timezone_name,
                    "command": j.command,
                    "next": next.map(|t| super::rfc3339_in(t, j.timezone)),
                    "enabled": j.enabled,
                    "tags": j.tags,
                    "description": j.extras().description,
                    // What `rea trigger --param` may pass.
                    "params": j.extras().params.iter().map(|p| json!({
                        "name": p.name,
                        "default": p.default,
                        "pattern": p.pattern.as_ref().map(|p| p.as_str()),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(jobs));
        return failure::ok();
    }
    let mut table = Table::new(["NAME", "SCHEDULE", "ZONE", "NEXT", "", "FLAGS"]);
    for j in &cfg.jobs {
        let (abs, rel) = if !j.enabled {
            ("-".to_string(), String::new())
        } else if j.is_reboot() {
            ("at daemon start".to_string(), String::new())
        } else {
            match j.next_after(now) {
                Some(t) => (
                    t.with_timezone(&j.timezone)
                        .format("%Y-%m-%d %H:%M:%S %Z")
                        .to_string(),
                    super::relative(t, now),
                ),
                None if j.schedule.is_none() => {
                    let all_success = j.after.iter().all(|d| d.on == rea_core::job::On::Success);
                    let when = if all_success {
                        "when its dependencies succeed"
                    } else {
                        "when its dependencies end as it asks"
                    };
                    (when.to_string(), String::new())
                }
                None => ("never".to_string(), String::new()),
            }
        };
        let mut flags = Vec::new();
        if !j.enabled {
            flags.push("disabled".to_string());
        }
        flags.extend(j.tags.iter().map(|t| format!("#{t}")));
        table.row([
            j.name.clone(),
            j.schedule_text(),
            j.timezone_name.to_string(),
            abs,
            rel,
            flags.join(" "),
        ]);
    }
    print!("{}", table.render());
    failure::ok()
}
