//! The control socket: how `rea trigger`, `pause`, `resume`, `reload`,
//! `status` (and services submitting one-shot jobs) talk to a running daemon.
//!
//! A Unix stream socket `<state-dir>/rea.sock`, mode 0600 inside the 0700
//! state directory, and every peer's uid checked with `SO_PEERCRED`: only
//! the daemon's own user and root may use it. The protocol is one JSON
//! object per line each way, versioned with `"v": 1`; requests on one
//! connection are answered in order, so clients may pipeline them. The
//! README documents it for services that speak it directly.
//!
//! This module holds the wire types, the accept loop (which only forwards
//! requests to the daemon loop), and the blocking client used by the CLI.
//! It decides nothing: the daemon answers.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream as StdStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

/// Protocol version spoken by this build.
pub const VERSION: u32 = 1;

/// Requests a connection forwards (and answers it writes) before it lets
/// other tasks run: the daemon loop then group-commits up to this many
/// submissions at once.
const READ_SLICE: u32 = 1024;

/// Longest request line accepted; a peer sending more is cut off.
const MAX_LINE: usize = 1 << 20;

/// The socket of a state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("rea.sock")
}

/// Which jobs a pause/resume names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// A request line: `{"v":1,"op":"trigger","job":"backup","force":false,"wait":true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Is anybody there?
    Ping,
    /// Live status of every job, or one.
    Status {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job: Option<String>,
    },
    /// Run a job now. With `wait`, a second response line follows when the
    /// run ends, carrying its final history record.
    Trigger {
        job: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        wait: bool,
    },
    Pause(Selector),
    Resume(Selector),
    /// Re-read the job file now.
    Reload,
    /// A one-shot job; acknowledged once it is durable.
    Submit(Submission),
    /// Cancel pending one-shots (running ones only with `kill`).
    Cancel {
        ids: Vec<String>,
        #[serde(default)]
        kill: bool,
    },
    /// Pending one-shots, by due time.
    Pending {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
}

/// `rea submit` on the wire. Exactly one of `at` and `in_ms` says when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Submission {
    /// Unique among pending one-shots; generated when absent. A duplicate is
    /// refused with code `duplicate`, which makes retried submissions safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Program and arguments (no shell), or with `shell` one script.
    pub argv: Vec<String>,
    #[serde(default)]
    pub shell: bool,
    /// Working directory (absolute).
    pub dir: PathBuf,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub retry: crate::oneshot::OneShotRetry,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The envelope every request travels in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub v: u32,
    #[serde(flatten)]
    pub request: Request,
}

/// A response line: `{"v":1,"ok":true,"data":{…}}` or
/// `{"v":1,"ok":false,"error":"…","code":"unknown_job","suggestions":[…]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Machine-readable error kind: `bad_request`, `unknown_job`,
    /// `unsupported_version`, `refused`, `invalid_config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
}

impl Response {
    pub fn ok(data: Value) -> Response {
        Response {
            v: VERSION,
            ok: true,
            data: Some(data),
            error: None,
            code: None,
            suggestions: Vec::new(),
        }
    }

    pub fn err(code: &str, error: impl Into<String>) -> Response {
        Response {
            v: VERSION,
            ok: false,
            data: None,
            error: Some(error.into()),
            code: Some(code.to_string()),
            suggestions: Vec::new(),
        }
    }

    pub fn with_suggestions(mut self, s: Vec<String>) -> Response {
        self.suggestions = s;
        self
    }
}

/// How the daemon answers one request.
pub enum Reply {
    /// One response line.
    Done(Response),
    /// A first line now, and a second when the receiver yields (trigger --wait).
    Follow(Response, oneshot::Receiver<Value>),
}

/// A request handed to the daemon loop, with the way back.
pub struct Incoming {
    pub request: Request,
    pub reply: oneshot::Sender<Reply>,
}

/// Binds the socket (replacing a stale one: the caller holds the state
/// directory's lock, so no live daemon owns it) with mode 0600.
pub fn bind(state_dir: &Path) -> Result<UnixListener, String> {
    let path = socket_path(state_dir);
    if path.as_os_str().len() >= 108 {
        return Err(format!(
            "the control socket path {} is too long for a Unix socket (108 bytes); use a shorter --state-dir",
            path.display()
        ));
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "cannot remove the stale socket {}: {e}",
                path.display()
            ))
        }
    }
    let listener = UnixListener::bind(&path)
        .map_err(|e| format!("cannot create the control socket {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict the control socket {}: {e}", path.display()))?;
    Ok(listener)
}

/// Accepts connections forever, forwarding each request line to `tx`.
pub async fn serve(listener: UnixListener, tx: mpsc::UnboundedSender<Incoming>) {
    let me = rustix::process::geteuid().as_raw();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let allowed = stream
            .peer_cred()
            .map(|c| c.uid() == me || c.uid() == 0)
            .unwrap_or(false);
        let tx = tx.clone();
        tokio::spawn(async move {
            if allowed {
                // Outside tokio's cooperative budget, which would make the
                // reader yield every ~40 requests and so cut a pipelined
                // burst into tiny group commits; `connection` yields on its
                // own every READ_SLICE requests instead.
                tokio::task::coop::unconstrained(connection(stream, tx)).await;
            } else {
                let (_, mut w) = stream.into_split();
                let r = Response::err(
                    "refused",
                    "permission denied: only the daemon's user and root may control it",
                );
                let _ = w.write_all(line(&r).as_bytes()).await;
            }
        });
    }
}

fn line<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).unwrap_or_else(|_| "{}".to_string());
    s.push('\n');
    s
}

/// An answer the connection's writer must send, in request order.
enum Queued {
    Ready(Response),
    Waiting(oneshot::Receiver<Reply>),
}

/// Requests are read and forwarded as fast as they arrive (pipelining: the
/// daemon can then group-commit a burst of submissions); a writer task
/// sends the answers back in request order. The queue between them is
/// bounded, so a client that never reads cannot grow the daemon's memory.
async fn connection(stream: UnixStream, tx: mpsc::UnboundedSender<Incoming>) {
    let (r, mut w) = stream.into_split();
    let (order_tx, mut order_rx) = mpsc::channel::<Queued>(4096);
    // Answers that are ready go out together in one write, and the writer
    // frees the queue as fast as the loop answers: draining it one line per
    // budget slice made a pipelining client's burst trickle in ~40 requests
    // at a time, each its own group commit and fdatasync.
    let writer = tokio::spawn(tokio::task::coop::unconstrained(async move {
        let mut out: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut slice = 0u32;
        while let Some(first) = order_rx.recv().await {
            let mut next = Some(first);
            while let Some(q) = next.take() {
                let reply = match q {
                    Queued::Ready(resp) => Reply::Done(resp),
                    Queued::Waiting(mut rx) => match rx.try_recv() {
                        Ok(r) => r,
                        Err(oneshot::error::TryRecvError::Closed) => {
                            Reply::Done(Response::err("refused", "the daemon is shutting down"))
                        }
                        Err(oneshot::error::TryRecvError::Empty) => {
                            // Nothing may sit unsent while we wait.
                            if !flush(&mut w, &mut out).await {
                                return;
                            }
                            match rx.await {
                                Ok(r) => r,
                                Err(_) => Reply::Done(Response::err(
                                    "refused",
                                    "the daemon is shutting down",
                                )),
                            }
                        }
                    },
                };
                match reply {
                    Reply::Done(resp) => out.extend_from_slice(line(&resp).as_bytes()),
                    Reply::Follow(first, rest) => {
                        out.extend_from_slice(line(&first).as_bytes());
                        if !flush(&mut w, &mut out).await {
                            return;
                        }
                        let second = match rest.await {
                            Ok(v) => Response::ok(v),
                            Err(_) => {
                                Response::err("refused", "the daemon stopped before the run ended")
                            }
                        };
                        out.extend_from_slice(line(&second).as_bytes());
                    }
                }
                if out.len() >= 64 * 1024 && !flush(&mut w, &mut out).await {
                    return;
                }
                slice += 1;
                if slice == READ_SLICE {
                    slice = 0;
                    if !flush(&mut w, &mut out).await {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
                next = order_rx.try_recv().ok();
            }
            if !flush(&mut w, &mut out).await {
                return;
            }
        }
    }));
    let mut reader = tokio::io::BufReader::with_capacity(64 * 1024, r);
    let mut buf = Vec::new();
    let mut slice = 0u32;
    loop {
        slice += 1;
        if slice == READ_SLICE {
            slice = 0;
            tokio::task::yield_now().await;
        }
        buf.clear();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        match tokio::io::AsyncBufReadExt::read_until(&mut limited, b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.len() > MAX_LINE {
            let _ = order_tx
                .send(Queued::Ready(Response::err(
                    "bad_request",
                    "request line too long",
                )))
                .await;
            break;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let queued = match parse_request(&buf) {
            Err(resp) => Queued::Ready(resp),
            Ok(request) => {
                let (reply_tx, reply_rx) = oneshot::channel();
                if tx
                    .send(Incoming {
                        request,
                        reply: reply_tx,
                    })
                    .is_err()
                {
                    break;
                }
                Queued::Waiting(reply_rx)
            }
        };
        if order_tx.send(queued).await.is_err() {
            break;
        }
    }
    drop(order_tx);
    let _ = writer.await;
}

/// Writes and empties `out`; false once the peer is gone.
async fn flush(w: &mut tokio::net::unix::OwnedWriteHalf, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = w.write_all(out).await.is_ok();
    out.clear();
    ok
}

fn parse_request(bytes: &[u8]) -> Result<Request, Response> {
    // The common case in one parse; the slow path below only explains
    // what is wrong with a request that does not fit.
    if let Ok(env) = serde_json::from_slice::<Envelope>(bytes) {
        if env.v == VERSION {
            return Ok(env.request);
        }
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        Response::err(
            "bad_request",
            format!("the request is not a JSON object: {e}"),
        )
    })?;
    let version = v.get("v").and_then(Value::as_u64).unwrap_or(0);
    if version != VERSION as u64 {
        return Err(Response::err(
            "unsupported_version",
            format!("protocol version {version} is not supported; this daemon speaks v{VERSION}"),
        ));
    }
    let env: Envelope = serde_json::from_value(v)
        .map_err(|e| Response::err("bad_request", format!("invalid request: {e}")))?;
    Ok(env.request)
}

/// Why a client could not talk to the daemon.
#[derive(Debug)]
pub enum ClientError {
    /// No daemon listens for this state directory.
    NoDaemon(String),
    Io(String),
}

/// A blocking connection to the daemon, used by the CLI.
pub struct Client {
    reader: BufReader<StdStream>,
    writer: StdStream,
}

impl Client {
    pub fn connect(state_dir: &Path) -> Result<Client, ClientError> {
        let path = socket_path(state_dir);
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
        let writer = stream
            .try_clone()
            .map_err(|e| ClientError::Io(e.to_string()))?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
        })
    }

    /// Sends one request and reads its (first) response.
    pub fn request(&mut self, request: &Request) -> Result<Response, ClientError> {
        let env = Envelope {
            v: VERSION,
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

    /// Reads the next response line (the second line of a trigger --wait).
    pub fn read_response(&mut self) -> Result<Response, ClientError> {
        let mut text = String::new();
        let n = self
            .reader
            .read_line(&mut text)
            .map_err(|e| ClientError::Io(format!("cannot read from the daemon: {e}")))?;
        if n == 0 {
            return Err(ClientError::Io("the daemon closed the connection".into()));
        }
        serde_json::from_str(&text)
            .map_err(|e| ClientError::Io(format!("unreadable answer from the daemon: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_in_the_documented_shape() {
        let env = Envelope {
            v: 1,
            request: Request::Trigger {
                job: "backup".into(),
                force: false,
                wait: true,
            },
        };
        let text = serde_json::to_string(&env).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"op":"trigger","job":"backup","force":false,"wait":true}"#
        );
        assert_eq!(serde_json::from_str::<Envelope>(&text).unwrap(), env);
        let pause = r#"{"v":1,"op":"pause","tag":"billing"}"#;
        assert_eq!(
            parse_request(pause.as_bytes()).unwrap(),
            Request::Pause(Selector {
                tag: Some("billing".into()),
                ..Selector::default()
            })
        );
        assert_eq!(
            parse_request(br#"{"v":1,"op":"status"}"#).unwrap(),
            Request::Status { job: None }
        );
    }

    #[test]
    fn bad_requests_get_clear_errors() {
        assert_eq!(
            parse_request(b"nope").unwrap_err().code.as_deref(),
            Some("bad_request")
        );
        assert_eq!(
            parse_request(br#"{"v":2,"op":"ping"}"#)
                .unwrap_err()
                .code
                .as_deref(),
            Some("unsupported_version")
        );
        let e = parse_request(br#"{"v":1,"op":"explode"}"#).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("bad_request"));
        assert!(e.error.unwrap().contains("explode"));
    }
}
