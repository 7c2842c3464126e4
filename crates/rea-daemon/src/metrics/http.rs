//! The small HTTP/1.x server inside the daemon that serves `GET /metrics`
//! (and nothing else), bounded in connections, head size and time.
//!
//! The endpoint is TCP: it cannot tell users apart (a local user and a
//! local Prometheus both come from 127.0.0.1), so its cap is not shared by
//! uid as the control socket's is. What holds a slot without being served
//! is a connection that has not sent its request yet; a scraper sends its
//! request at once. So when every slot is taken, a new connection takes the
//! slot of one still waiting for its request: of the peer address holding
//! the most slots, its oldest. Connections whose request has come are
//! being answered (a few milliseconds) and are never displaced. Idle
//! connections then cannot keep a scrape out, however many they are.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rea_config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::registry::{render, Metrics};

/// `Content-Type`s of the two text formats `prometheus-client` encodes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The request head (request line and headers) may not be larger; real
/// scrapers send a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;
/// A client that has not sent its whole head by then is dropped, so a slow
/// or silent connection cannot hold a slot.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (the endpoint is for one or two scrapers, not
/// a crowd); a new one displaces one still waiting for its request, else
/// it is closed at once.
const MAX_CONNECTIONS: usize = 16;
/// How long a scrape waits for the loop to refresh the state gauges before
/// rendering what it has (the loop only lags while it is busy).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// A scrape asking the loop to refresh the state gauges; answer with
/// [`Scrape::done`] once they are.
pub(crate) struct Scrape(oneshot::Sender<()>);

impl Scrape {
    pub(crate) fn done(self) {
        let _ = self.0.send(());
    }
}

/// Binds `[daemon] metrics` (if set) and starts serving it; the loop
/// answers the returned channel's [`Scrape`]s. Without the setting: no
/// metrics and a channel that never delivers. A taken address is an error
/// for the start-up to report.
pub(crate) async fn start(
    config: &Config,
) -> Result<(Option<Metrics>, mpsc::Receiver<Scrape>), String> {
    let (tx, rx) = mpsc::channel(MAX_CONNECTIONS);
    let Some(addr) = config.daemon.metrics else {
        return Ok((None, rx));
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, &e))?;
    let local = listener.local_addr().unwrap_or(addr);
    info!("metrics endpoint listening on {local}");
    let metrics = Metrics::new(config);
    tokio::spawn(serve(listener, metrics.registry(), tx));
    Ok((Some(metrics), rx))
}

fn bind_error(addr: SocketAddr, e: &io::Error) -> String {
    let why = match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            "the address is already in use (another process listens on port {}; find it with `ss -ltnp`)",
            addr.port()
        ),
        io::ErrorKind::AddrNotAvailable => {
            "no network interface of this machine has that address".to_string()
        }
        io::ErrorKind::PermissionDenied => format!(
            "permission denied (ports below 1024 need privileges; {} is one)",
            addr.port()
        ),
        _ => e.to_string(),
    };
    format!("cannot serve metrics on {addr} ([daemon] metrics): {why}")
}

/// The connections being served, each until its task ends.
#[derive(Default)]
struct Slots {
    /// Short critical sections only, never across an await.
    held: Mutex<Vec<Held>>,
    next_id: std::sync::atomic::AtomicU64,
}

struct Held {
    id: u64,
    peer: IpAddr,
    since: Instant,
    /// Set while the connection waits for its request: sending on it (or
    /// dropping it) ends the connection, to make room for a new one.
    displace: Option<oneshot::Sender<()>>,
}

/// A connection's slot; given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection from `peer`, displacing a connection still
    /// waiting for its request when all are taken; with the receiver that
    /// tells the new one it is displaced in turn. `None`: every slot is
    /// being answered.
    fn take(self: &Arc<Self>, peer: IpAddr) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut held = self.lock();
        if held.len() >= MAX_CONNECTIONS {
            let crowded = |p: &IpAddr| {
                held.iter()
                    .filter(|h| h.displace.is_some() && h.peer == *p)
                    .count()
            };
            let victim = held
                .iter()
                .enumerate()
                .filter(|(_, h)| h.displace.is_some())
                .max_by_key(|(_, h)| (crowded(&h.peer), std::cmp::Reverse(h.since)))
                .map(|(i, _)| i)?;
            let gone = held.swap_remove(victim);
            if let Some(tx) = gone.displace {
                let _ = tx.send(());
            }
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        held.push(Held {
            id,
            peer,
            since: Instant::now(),
            displace: Some(tx),
        });
        Some((
            Slot {
                slots: Arc::clone(self),
                id,
            },
            rx,
        ))
    }
}

impl Slot {
    /// The request has come: the connection is being answered and keeps
    /// its slot.
    fn answering(&self) {
        if let Some(h) = self.slots.lock().iter_mut().find(|h| h.id == self.id) {
            h.displace = None;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().retain(|h| h.id != self.id);
    }
}

/// Accepts connections forever; one request each.
async fn serve(listener: TcpListener, registry: Arc<Registry>, loop_tx: mpsc::Sender<Scrape>) {
    let slots = Arc::new(Slots::default());
    let mut warned = false;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, typically: back off instead of
                // spinning, and say so once.
                if !warned {
                    warn!("metrics endpoint: cannot accept a connection: {e}");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some((slot, displaced)) = slots.take(peer.ip()) else {
            continue;
        };
        let registry = Arc::clone(&registry);
        let loop_tx = loop_tx.clone();
        tokio::spawn(async move {
            let _ = connection(stream, &slot, displaced, &registry, &loop_tx).await;
        });
    }
}

async fn connection(
    mut stream: TcpStream,
    slot: &Slot,
    displaced: oneshot::Receiver<()>,
    registry: &Registry,
    loop_tx: &mpsc::Sender<Scrape>,
) -> io::Result<()> {
    let head = tokio::select! {
        head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)) => head,
        _ = displaced => return Ok(()),
    };
    let head = match head {
        Ok(Ok(Some(head))) => head,
        Ok(Ok(None)) => Vec::new(),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    slot.answering();
    let response = match route(&head) {
        Route::Metrics {
            openmetrics,
            head_only,
        } => {
            let (tx, rx) = oneshot::channel();
            if loop_tx.send(Scrape(tx)).await.is_ok() {
                let _ = tokio::time::timeout(REFRESH_TIMEOUT, rx).await;
            }
            let body = render(registry, openmetrics);
            let content_type = if openmetrics {
                OPENMETRICS
            } else {
                PROMETHEUS_TEXT
            };
            response("200 OK", content_type, &[], body.as_bytes(), head_only)
        }
        Route::Error(status, extra) => response(
            status,
            "text/plain; charset=utf-8",
            extra,
            format!("{status}\n").as_bytes(),
            false,
        ),
    };
    tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await
    .unwrap_or(Ok(()))
}

/// Reads up to the blank line that ends the head. `None`: the head is too
/// large (answered with 431).
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Some(buf));
        }
        buf.extend_from_slice(&chunk[..n]);
        if head_end(&buf).is_some() {
            return Ok(Some(buf));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    crlf.or(lf)
}

/// What a request asks for.
#[derive(Debug, PartialEq)]
enum Route {
    Metrics {
        openmetrics: bool,
        head_only: bool,
    },
    /// Status line text and extra header lines.
    Error(&'static str, &'static [&'static str]),
}

fn route(head: &[u8]) -> Route {
    if head.is_empty() || head.len() > MAX_HEAD {
        return Route::Error("431 Request Header Fields Too Large", &[]);
    }
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::Error("400 Bad Request", &[]);
    };
    let mut lines = text.lines();
    let mut parts = lines.next().unwrap_or("").split_ascii_whitespace();
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Error("400 Bad Request", &[]);
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Error("505 HTTP Version Not Supported", &[]);
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    if path != "/metrics" {
        return Route::Error("404 Not Found", &[]);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::Error("405 Method Not Allowed", &["Allow: GET, HEAD"]),
    };
    // Prometheus asks for OpenMetrics first; curl and browsers get the
    // classic format, which reads better.
    let openmetrics = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("accept")
                && value.contains("application/openmetrics-text")
        })
    });
    Route::Metrics {
        openmetrics,
        head_only,
    }
}

fn response(
    status: &str,
    content_type: &str,
    extra: &[&str],
    body: &[u8],
    head_only: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in extra {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let get = |head: &str| route(head.as_bytes());
        assert_eq!(
            get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics {
                openmetrics: false,
                head_only: false
            }
        );
        assert_eq!(
            get("GET /metrics?x=1 HTTP/1.0\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n"),
            Route::Metrics {
                openmetrics: true,
                head_only: false
            }
        );
        assert_eq!(
            get("HEAD /metrics HTTP/1.1\n\n"),
            Route::Metrics {
                openmetrics: false,
                head_only: true
            }
        );
        assert_eq!(
            get("GET / HTTP/1.1\r\n\r\n"),
            Route::Error("404 Not Found", &[])
        );
        assert_eq!(
            get("GET /metrics/ HTTP/1.1\r\n\r\n"),
            Route::Error("404 Not Found", &[])
        );
        assert_eq!(
            get("POST /metrics HTTP/1.1\r\n\r\n"),
            Route::Error("405 Method Not Allowed", &["Allow: GET, HEAD"])
        );
        assert_eq!(
            get("GET /metrics\r\n\r\n"),
            Route::Error("400 Bad Request", &[])
        );
        assert_eq!(
            get("GET /metrics HTTP/2\r\n\r\n"),
            Route::Error("505 HTTP Version Not Supported", &[])
        );
        assert_eq!(
            route(&[0xff, b'\r', b'\n', b'\r', b'\n']),
            Route::Error("400 Bad Request", &[])
        );
        assert_eq!(
            route(&vec![b'a'; MAX_HEAD + 1]),
            Route::Error("431 Request Header Fields Too Large", &[])
        );
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\n"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }

    #[test]
    fn bind_errors_say_what_to_do() {
        let addr: SocketAddr = "127.0.0.1:9746".parse().unwrap();
        let e = io::Error::from(io::ErrorKind::AddrInUse);
        assert_eq!(
            bind_error(addr, &e),
            "cannot serve metrics on 127.0.0.1:9746 ([daemon] metrics): the address is already in use (another process listens on port 9746; find it with `ss -ltnp`)"
        );
    }
}
