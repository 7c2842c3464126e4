//! systemd's readiness protocol: a `Type=notify` service manager is
//! played by a unix datagram socket in the sandbox.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::{Env, PATIENCE};

/// Datagrams until one contains `needle`; all of them, in order.
fn until(socket: &UnixDatagram, needle: &str) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match socket.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = msg.contains(needle);
                seen.push(msg);
                if done {
                    return seen;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    panic!("no {needle:?} from the daemon; got {seen:?}");
}

#[test]
fn ready_reloading_and_stopping_reach_the_service_manager() {
    let env = Env::new();
    env.jobs("[jobs.env]\nschedule = \"* * * * * *\"\ncommand = \"printenv NOTIFY_SOCKET\"\n");
    let path = env.path("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let d = env.daemon_with_env(&[], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);

    let ready = until(&socket, "READY=1").pop().unwrap();
    assert!(
        ready.contains(&format!("MAINPID={}\n", d.pid())),
        "{ready:?}"
    );
    assert!(ready.contains("STATUS=1 job, next run "), "{ready:?}");

    // The job does not see the variable: printenv exits 1.
    env.wait_until("a run of the job", || !env.finals("env").is_empty());
    let run = &env.finals("env")[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["exit_code"], 1, "{run}");

    d.signal(libc::SIGHUP);
    let reload = until(&socket, "READY=1");
    assert!(
        reload
            .iter()
            .any(|m| m.starts_with("RELOADING=1\nMONOTONIC_USEC=")),
        "{reload:?}"
    );

    d.signal(libc::SIGTERM);
    let stop = until(&socket, "STOPPING=1").pop().unwrap();
    assert!(stop.contains("STATUS=stopping"), "{stop:?}");
    let mut d = d;
    assert_eq!(d.wait(), 0);
}

#[test]
fn an_unreachable_socket_is_reported_once_and_never_fatal() {
    let env = Env::new();
    env.jobs("[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n");
    let missing = env.path("no-such-dir/notify.sock");
    let d = env.daemon_with_env(&[], &[("NOTIFY_SOCKET", missing.to_str().unwrap())]);
    env.wait_until("two runs", || env.runs("tick", "succeeded").len() >= 2);
    let log = d.log_text();
    assert_eq!(
        log.matches("cannot notify the service manager").count(),
        1,
        "{log}"
    );
    assert_eq!(d.stop(), 0);
}
