//! `rea pause` / `rea resume`: by name, `--tag` or `--all`. The paused set
//! lives in the daemon and survives its restarts.

use crate::cli::{exit, Global, SelectArgs};
use crate::control::{Request, Selector};

pub fn run(global: &Global, args: &SelectArgs, pause: bool) -> i32 {
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
    let data = match super::request(global, &request) {
        Ok(d) => d,
        Err(code) => return code,
    };
    if args.json {
        println!("{data}");
        return exit::OK;
    }
    let names = |k: &str| -> Vec<String> {
        data[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let changed = names("changed");
    let verb = if pause { "paused" } else { "resumed" };
    if changed.is_empty() {
        println!("nothing to do: already {verb}");
    } else {
        println!("{verb}: {}", changed.join(", "));
    }
    let paused = names("paused");
    if !paused.is_empty() {
        println!("paused now: {}", paused.join(", "));
    }
    exit::OK
}
