//! `rea cancel ID...`: pending one-shots are cancelled; a running one only
//! with `--kill`.

use crate::cli::{exit, CancelArgs, Global};
use crate::control::Request;

pub fn run(global: &Global, args: &CancelArgs) -> i32 {
    let request = Request::Cancel {
        ids: args.ids.clone(),
        kill: args.kill,
    };
    match super::request(global, &request) {
        Ok(data) => {
            for c in data["cancelled"].as_array().into_iter().flatten() {
                let verb = if c["result"] == "killing" {
                    "killing"
                } else {
                    "cancelled"
                };
                println!("{verb} {}", c["id"].as_str().unwrap_or(""));
            }
            exit::OK
        }
        Err(code) => code,
    }
}
