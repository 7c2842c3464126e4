//! The CLI's side of the control socket: a blocking connection that sends
//! a request and reads its answer.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::path::Path;
use std::time::Duration;

use super::protocol::{line, Envelope, Request, Response, VERSION};
use rea_host::state_dir::socket_path;

/// Why a client could not talk to the daemon.
#[derive(Debug)]
pub enum ClientError {
    /// No daemon listens for this state directory.
    NoDaemon(String),
    Io(String),
    /// The request was sent and no answer came in time: the daemon may
    /// have done it all the same (a caller that changed something says so).
    Timeout(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NoDaemon(m) | ClientError::Io(m) | ClientError::Timeout(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// A blocking connection to the daemon, used by the CLI.
pub struct Client {
    reader: BufReader<StdStream>,
    writer: StdStream,
    timeout: Duration,
    /// What the requests say sent them (the audit log's source).
    source: Option<String>,
}

impl Client {
    /// Connects to the daemon of `state_dir` (after checking that nobody
    /// but the client's own user or root could have put its socket there).
    /// Every later read and write gives up after `timeout`, so a daemon
    /// that does not answer cannot hang a command.
    pub fn connect(state_dir: &Path, timeout: Duration) -> Result<Client, ClientError> {
        let path = socket_path(state_dir);
        if path.exists() {
            rea_host::state_dir::verify_for_client(state_dir).map_err(ClientError::Io)?;
        }
        let stream = StdStream::connect(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::NoDaemon(format!(
                "no rea daemon is running for state directory {} (start one with `rea run`, or pass the daemon's --state-dir)",
                state_dir.display()
            )),
            io::ErrorKind::PermissionDenied => ClientError::Io(format!(
                "permission denied on {}: the daemon runs as another user",
                path.display()
            )),
            _ => ClientError::Io(format!("cannot connect to {}: {e}", path.display())),
        })?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| ClientError::Io(e.to_string()))?;
        let writer = stream
            .try_clone()
            .map_err(|e| ClientError::Io(e.to_string()))?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            timeout,
            source: Some("cli".to_string()),
        })
    }

    /// Names what sends the requests, for the daemon's audit log (`cli`
    /// unless told; a console says `top` or `web`).
    pub fn with_source(mut self, source: &str) -> Client {
        self.source = Some(source.to_string());
        self
    }

    /// Sends one request and reads its (first) response.
    pub fn request(&mut self, request: &Request) -> Result<Response, ClientError> {
        let env = Envelope {
            v: VERSION,
            source: self.source.clone(),
            request: request.clone(),
        };
        if let Err(e) = self.writer.write_all(line(&env).as_bytes()) {
            // A daemon that refuses a peer answers and hangs up at once, maybe
            // before our request went out: its answer says why.
            return self
                .read_response()
                .map_err(|_| ClientError::Io(format!("cannot send to the daemon: {e}")));
        }
        self.read_response()
    }

    /// Waits for answers as long as they take from now on (`trigger
    /// --wait`: a run may last hours).
    pub fn without_timeout(&mut self) {
        let _ = self.reader.get_ref().set_read_timeout(None);
    }

    /// Reads the next response line (the second line of a trigger --wait).
    pub fn read_response(&mut self) -> Result<Response, ClientError> {
        let mut text = String::new();
        let timeout = self.timeout;
        let n = self
            .reader
            .read_line(&mut text)
            .map_err(|e| match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    ClientError::Timeout(format!(
                        "the daemon did not answer within {} (it may be overloaded or stuck); \
                     try again, or give it longer with --client-timeout",
                        rea_core::duration::format(timeout)
                    ))
                }
                _ => ClientError::Io(format!("cannot read from the daemon: {e}")),
            })?;
        if n == 0 {
            return Err(ClientError::Io("the daemon closed the connection".into()));
        }
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Io(format!("unreadable answer from the daemon: {e}")))
    }
}
