//! `rea web`: where the web console is, and a one-time login link for its
//! TCP address (`[daemon] web_listen`). The link is asked of the daemon on
//! `web.sock`, which knows who asks by the socket's peer credentials: it
//! logs its opener in as the user who ran `rea web`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::cli::Global;
use crate::failure::{self, CommandResult, Failure};

pub(crate) fn run(global: &Global) -> CommandResult {
    let dir = super::state_dir(global)?;
    let socket = dir.join("web.sock");
    let mut s = UnixStream::connect(&socket).map_err(|e| {
        Failure::runtime(format!(
            "cannot reach the web console at {}: {e}",
            socket.display()
        ))
        .hint("is the daemon running (rea status)?")
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    s.write_all(
        b"POST /login-link HTTP/1.1\r\nHost: localhost\r\nX-Rea-Login: 1\r\nContent-Length: 0\r\n\r\n",
    )
    .map_err(|e| Failure::runtime(format!("cannot ask the web console: {e}")))?;
    let mut answer = Vec::new();
    s.take(64 * 1024)
        .read_to_end(&mut answer)
        .map_err(|e| Failure::runtime(format!("cannot read the web console's answer: {e}")))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).unwrap_or("");
    match status {
        "200" => {
            println!("{}", body.trim());
            eprintln!("(a one-time link, good for two minutes: open it in your browser)");
            failure::ok()
        }
        "404" => {
            println!("the console has no TCP address; forward its socket:");
            println!(
                "  ssh -L 8080:{} {}",
                socket.display(),
                rustix::system::uname().nodename().to_string_lossy()
            );
            println!("  then open http://localhost:8080/");
            failure::ok()
        }
        _ => Err(Failure::runtime(format!(
            "the web console refused: {}",
            body.trim()
        ))),
    }
}
