//! The daemon's side of the control socket: bind it (0600, inside the
//! 0700 state directory), check every peer's uid with `SO_PEERCRED` (only
//! the daemon's own user and root, or every user when the daemon reads
//! users' files), count each uid's connections against its share of the
//! cap (`crate::quota`: a user holds at most a quarter, an eighth is kept
//! for root), read request lines and forward them to
//! the daemon loop, write the answers back in request order (a streamed
//! answer, `follow`, holds the connection's later answers until it ends).
//! It decides nothing: the daemon answers.
//!
//! The wire types are `rea_proto`'s, re-exported here so the daemon's
//! modules name one `control`.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::quota::{Holder, Quota, Refused};
use rea_host::state_dir::socket_path;
use rea_proto::protocol::{line, parse_envelope};
pub(crate) use rea_proto::{protocol, Request, Response, Selector, Submission};

/// Requests a connection forwards (and answers it writes) before it lets
/// other tasks run: the daemon loop then group-commits up to this many
/// submissions at once.
const READ_SLICE: u32 = 1024;

/// Longest request line accepted; a peer sending more is cut off.
const MAX_LINE: usize = 1 << 20;

/// How the daemon answers one request.
pub(crate) enum Reply {
    /// One response line.
    Done(Response),
    /// A first line now, and a second when the receiver yields: the run's
    /// final record (`trigger --wait`).
    Wait(Response, oneshot::Receiver<Value>),
    /// A first line now, then each line the receiver yields until it
    /// closes (`follow`, `trigger --follow`). The sender is bounded: a
    /// client that reads slowly slows the stream's producer, nobody else.
    Stream(Response, mpsc::Receiver<Response>),
}

/// A request handed to the daemon loop, with the way back.
pub(crate) struct Incoming {
    pub request: Request,
    pub reply: oneshot::Sender<Reply>,
    /// Who asks (SO_PEERCRED): the daemon authorizes each request by it.
    pub peer: Peer,
    /// What the client says it is (the envelope's `source`), for the
    /// audit log.
    pub source: Option<String>,
}

/// The user at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer {
    pub uid: u32,
}

impl Peer {
    /// Root and the daemon's own user may do everything; other users only
    /// what concerns their own jobs (when the daemon reads users' files).
    pub(crate) fn is_admin(self) -> bool {
        self.uid == 0 || self.uid == rustix::process::geteuid().as_raw()
    }
}

/// Binds the socket (replacing a stale one: the caller holds the state
/// directory's lock, so no live daemon owns it) with mode 0600, or 0666
/// when `others` (a root daemon with users' files: every user may connect,
/// and each request is authorized by who sent it; the state directory is
/// then made 0711 so they can reach the socket and nothing else).
pub(crate) fn bind(state_dir: &Path, others: bool) -> Result<UnixListener, String> {
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
    let mode = if others { 0o666 } else { 0o600 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot restrict the control socket {}: {e}", path.display()))?;
    let dir_mode = if others { 0o711 } else { 0o700 };
    std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(dir_mode)).map_err(
        |e| {
            format!(
                "cannot set the mode of the state directory {}: {e}",
                state_dir.display()
            )
        },
    )?;
    Ok(listener)
}

/// Connections served at once, at most. More are answered with an error and
/// closed, so idle clients can never use up the daemon's file descriptors
/// (it needs them to spawn jobs): at most a quarter of the open-file limit
/// goes to connections. A user other than root holds at most a quarter of
/// them, and an eighth are root's alone (`crate::quota`).
pub(crate) const MAX_CONNECTIONS: usize = 256;

fn connection_limit() -> usize {
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
    quarter.clamp(4, MAX_CONNECTIONS)
}

/// Answers a connection may have requested and not yet received. Cheap
/// requests (submit, cancel, ping) pipeline up to this deep (the daemon
/// group-commits bursts of submissions); any other request waits until
/// every earlier answer is written, so a client that pipelines `status`
/// without reading holds at most one answer in the daemon's memory.
const MAX_PIPELINED: u32 = 1024;

/// A write to a client that makes no progress for this long ends the
/// connection (a client that does not read cannot pin memory).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection with nothing in flight that sends nothing for this long is
/// closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The connections being served (at most a quarter of the open-file
/// limit), so that a stopping daemon can let their last answers go out.
#[derive(Clone)]
pub(crate) struct Connections {
    slots: Arc<Semaphore>,
    limit: usize,
    /// Each uid's count against its share.
    shares: Quota<u32>,
}

impl Connections {
    pub(crate) fn new() -> Connections {
        let limit = connection_limit();
        Connections {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
            shares: Quota::new(limit),
        }
    }

    /// Waits until every connection has ended (its client read its last
    /// answer and closed it), for at most `patience`. New connections are
    /// refused meanwhile.
    pub(crate) async fn ended(&self, patience: Duration) {
        let all = u32::try_from(self.limit).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(patience, self.slots.acquire_many(all)).await;
    }
}

/// Accepts connections forever, forwarding each request line to `tx`.
pub(crate) async fn serve(
    listener: UnixListener,
    tx: mpsc::UnboundedSender<Incoming>,
    others: bool,
    connections: Connections,
) {
    let Connections {
        slots,
        limit,
        shares,
    } = connections;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // A peer whose credentials cannot be read is nobody: refused.
        let peer = stream
            .peer_cred()
            .ok()
            .map(|c| Peer { uid: c.uid() })
            .filter(|p| p.is_admin() || others);
        let slot = peer.map(|p| {
            let holder = if p.is_admin() {
                Holder::Admin
            } else {
                Holder::Other(p.uid)
            };
            shares
                .try_acquire(holder)
                .and_then(|share| match slots.clone().try_acquire_owned() {
                    Ok(slot) => Ok((share, slot)),
                    Err(_) => Err(Refused::Full),
                })
        });
        let tx = tx.clone();
        tokio::spawn(async move {
            let refusal = match (peer, &slot) {
                (None, _) | (_, None) => Response::err(
                    "refused",
                    "permission denied: only the daemon's user and root may control it",
                ),
                (Some(_), Some(Err(Refused::Full))) => Response::err(
                    "refused",
                    format!(
                        "too many connections: the daemon serves {limit} already; try again later"
                    ),
                ),
                (Some(_), Some(Err(Refused::Share(share)))) => Response::err(
                    "refused",
                    format!(
                        "too many connections from your user: each user may hold {share} at once; close some and try again"
                    ),
                ),
                // Outside tokio's cooperative budget, which would make the
                // reader yield every ~40 requests and so cut a pipelined
                // burst into tiny group commits; `connection` yields on its
                // own every READ_SLICE requests instead.
                (Some(peer), Some(Ok(_))) => {
                    tokio::task::coop::unconstrained(connection(stream, tx, peer)).await;
                    drop(slot);
                    return;
                }
            };
            let (_, mut w) = stream.into_split();
            let _ =
                tokio::time::timeout(WRITE_TIMEOUT, w.write_all(line(&refusal).as_bytes())).await;
            drop(slot);
        });
    }
}

/// An answer the connection's writer must send, in request order, with the
/// pipelining permits its request holds until it is written.
enum Queued {
    Ready(Response),
    Waiting(oneshot::Receiver<Reply>, OwnedSemaphorePermit),
}

/// Requests are read and forwarded as they arrive (pipelining: the daemon
/// can then group-commit a burst of submissions); a writer task sends the
/// answers back in request order. What a connection may have in flight is
/// bounded (see `MAX_PIPELINED`), and a client that stops reading is
/// dropped after `WRITE_TIMEOUT`.
async fn connection(stream: UnixStream, tx: mpsc::UnboundedSender<Incoming>, peer: Peer) {
    let (r, mut w) = stream.into_split();
    // Set when the client has closed its socket (not just its sending
    // side): an answer it waits for (a run's end, a next run that may be
    // a year away) is then given up, and its connection slot freed.
    let (gone_tx, mut gone) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(MAX_PIPELINED as usize));
    let (order_tx, mut order_rx) = mpsc::channel::<Queued>(MAX_PIPELINED as usize + 1);
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
                let (reply, permit) = match q {
                    Queued::Ready(resp) => (Reply::Done(resp), None),
                    Queued::Waiting(mut rx, permit) => {
                        let reply = match rx.try_recv() {
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
                        };
                        (reply, Some(permit))
                    }
                };
                match reply {
                    Reply::Done(resp) => out.extend_from_slice(line(&resp).as_bytes()),
                    Reply::Wait(first, rest) => {
                        out.extend_from_slice(line(&first).as_bytes());
                        if !flush(&mut w, &mut out).await {
                            return;
                        }
                        let second = tokio::select! {
                            second = rest => match second {
                                Ok(v) => Response::ok(v),
                                Err(_) => Response::err(
                                    "refused",
                                    "the daemon stopped before the run ended",
                                ),
                            },
                            () = hung_up(&mut gone) => return,
                        };
                        out.extend_from_slice(line(&second).as_bytes());
                    }
                    Reply::Stream(first, mut lines) => {
                        out.extend_from_slice(line(&first).as_bytes());
                        loop {
                            if !flush(&mut w, &mut out).await {
                                return;
                            }
                            let next = tokio::select! {
                                next = lines.recv() => next,
                                () = hung_up(&mut gone) => return,
                            };
                            let Some(next) = next else { break };
                            out.extend_from_slice(line(&next).as_bytes());
                            // Lines already there go out in the same write.
                            while out.len() < 64 * 1024 {
                                let Ok(more) = lines.try_recv() else { break };
                                out.extend_from_slice(line(&more).as_bytes());
                            }
                        }
                    }
                }
                // A large answer goes out before the next request may be
                // forwarded; small ones collect into one write.
                if out.len() >= 64 * 1024 && !flush(&mut w, &mut out).await {
                    return;
                }
                drop(permit);
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
    let mut subscribed = false;
    let mut slice = 0u32;
    loop {
        slice += 1;
        if slice == READ_SLICE {
            slice = 0;
            tokio::task::yield_now().await;
        }
        buf.clear();
        let mut limited = (&mut reader).take(MAX_LINE as u64 + 1);
        let read = tokio::io::AsyncBufReadExt::read_until(&mut limited, b'\n', &mut buf);
        // A subscription is never idle, and its connection arms no timer
        // while it waits (an idle subscriber costs the daemon no wakeup).
        let read = async {
            if subscribed {
                Ok(read.await)
            } else {
                tokio::time::timeout(IDLE_TIMEOUT, read).await
            }
        };
        match read.await {
            Ok(Ok(0)) => {
                if peer_closed(reader.get_ref()) {
                    let _ = gone_tx.send(true);
                }
                break;
            }
            Ok(Err(_)) => {
                let _ = gone_tx.send(true);
                break;
            }
            Ok(Ok(_)) => {}
            Err(_) if permits.available_permits() == MAX_PIPELINED as usize => break,
            // A long request (trigger --wait) is in flight: not idle.
            Err(_) => continue,
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
        let queued = match parse_envelope(&buf) {
            Err(resp) => Queued::Ready(resp),
            Ok(rea_proto::protocol::Envelope {
                request, source, ..
            }) => {
                // Heavy answers wait for every earlier one to be written.
                let wanted = if request.is_cheap() { 1 } else { MAX_PIPELINED };
                subscribed |= matches!(request, Request::Subscribe(_));
                let Ok(permit) = permits.clone().acquire_many_owned(wanted).await else {
                    break;
                };
                let (reply_tx, reply_rx) = oneshot::channel();
                if tx
                    .send(Incoming {
                        request,
                        reply: reply_tx,
                        peer,
                        source,
                    })
                    .is_err()
                {
                    break;
                }
                Queued::Waiting(reply_rx, permit)
            }
        };
        if order_tx.send(queued).await.is_err() {
            break;
        }
    }
    drop(order_tx);
    let _ = writer.await;
    drop(gone_tx);
}

/// Whether the client closed its socket: an end of file on a socket the
/// peer has closed entirely (a client that exits or is killed) comes with
/// POLLHUP; one that only shut down its sending side, to wait for its
/// answers, does not.
fn peer_closed(reader: &OwnedReadHalf) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let stream: &UnixStream = reader.as_ref();
    let mut fds = [PollFd::new(stream, PollFlags::empty())];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
        && fds[0].revents().contains(PollFlags::HUP)
}

/// Resolves once the connection's client is gone; never if it stays.
async fn hung_up(gone: &mut watch::Receiver<bool>) {
    if gone.wait_for(|&g| g).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Writes and empties `out`; false once the peer is gone or stopped
/// reading for `WRITE_TIMEOUT`.
async fn flush(w: &mut tokio::net::unix::OwnedWriteHalf, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let ok = matches!(
        tokio::time::timeout(WRITE_TIMEOUT, w.write_all(out)).await,
        Ok(Ok(()))
    );
    out.clear();
    ok
}
