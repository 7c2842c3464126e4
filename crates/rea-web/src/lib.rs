//! The web console the daemon serves: HTTP on `<state-dir>/web.sock`
//! (always) and on `[daemon] web_listen` (loopback, optional), pages
//! rendered here from the answers of control requests.
//!
//! This crate never reads the daemon's state. Every piece of data comes
//! from a [`Request`] asked *as the viewer* through the [`Daemon`] trait,
//! which the daemon implements by handing the request to the same code
//! that answers its control socket: authorization by uid (a user sees and
//! acts on her own jobs only, names localized), the shares of history
//! queries, and the audit log (source `web`) apply unchanged. What this
//! crate adds is the HTTP edge: who the viewer is (the peer's uid on the
//! socket, a session made by a one-time login link on TCP), the checks a
//! browser needs (Host allow-list, Origin, a CSRF token on every POST,
//! cookies HttpOnly and SameSite=Strict, no CORS), the read-only viewer
//! role, and bounds on connections, request sizes and slow clients.

mod http;
mod pages;
mod session;
mod svg;

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rea_proto::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;

use crate::http::{esc, ReadError};
use crate::session::{Sessions, Shares};

/// What the daemon answers to one request: a line, or a first line and
/// more as they come (history chunks, a subscription's events). Dropping
/// the receiver tells the daemon nobody listens any more.
pub enum Answer {
    One(Response),
    Lines(Response, mpsc::Receiver<Response>),
}

/// An answer to come.
pub type Asked = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// The daemon as the console sees it: a control request asked as `uid`,
/// authorized, answered and audited exactly as the same request on the
/// control socket from that uid (the envelope's source: `web`).
pub trait Daemon: Send + Sync + 'static {
    fn ask(&self, uid: u32, request: Request) -> Asked;
}

/// What the console is told by the daemon's configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Host names accepted in `Host` besides `localhost`, `127.0.0.1` and
    /// `[::1]` (`[daemon] web_hosts`).
    pub hosts: Vec<String>,
    /// Users who may look and not act (`[daemon] web_viewers`, resolved).
    pub viewers: Vec<u32>,
    /// Whether users other than root and the daemon's own may connect to
    /// `web.sock` (the daemon reads users' files), as the control socket.
    pub open_to_users: bool,
    /// The TCP address served, for the login links.
    pub tcp: Option<SocketAddr>,
    /// The zone a job without `timezone` is read in (IANA name).
    pub zone: String,
    /// `[daemon] web_proxy`: on TCP, requests only from these addresses,
    /// each as the user its header names.
    pub proxy: Option<Proxy>,
}

/// The trusted reverse proxy in front of the TCP address: only its
/// connections are served, each request as the local user `header` names
/// (on every request: no login link, no session identity), and the
/// session cookie then carries only the CSRF token.
#[derive(Debug, Clone, Default)]
pub struct Proxy {
    /// The header, lower case.
    pub header: String,
    /// The proxy's addresses.
    pub from: Vec<std::net::IpAddr>,
}

/// The console: its settings, sessions and connection shares.
pub struct Web {
    daemon: Arc<dyn Daemon>,
    settings: Mutex<Arc<Settings>>,
    sessions: Sessions,
    connections: Shares,
    streams: Shares,
    names: Mutex<std::collections::HashMap<u32, String>>,
    /// Heatmaps made in the last minute, by viewer and job.
    pub(crate) heatmaps: Recent,
}

/// Images kept for a minute (at most 256: the oldest go first).
#[derive(Default)]
pub(crate) struct Recent(
    Mutex<std::collections::HashMap<(u32, String), (std::time::Instant, String)>>,
);

impl Recent {
    const KEEP: Duration = Duration::from_secs(60);

    pub(crate) fn get(&self, key: &(u32, String)) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .filter(|(at, _)| at.elapsed() < Self::KEEP)
            .map(|(_, v)| v.clone())
    }

    pub(crate) fn put(&self, key: (u32, String), value: String) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (at, _)| at.elapsed() < Self::KEEP);
        if map.len() >= 256 {
            let oldest = map
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(key, (std::time::Instant::now(), value));
    }
}

/// Connections served at once on both listeners together (a user holds at
/// most a quarter, an eighth is root's alone).
const MAX_CONNECTIONS: usize = 128;
/// Event streams (one per open page) at once, shared the same way.
const MAX_STREAMS: usize = 64;
/// How often an open event stream is written to when nothing happens, so
/// a closed page is noticed and its subscription dropped.
const KEEPALIVE: Duration = Duration::from_secs(15);

const NO_TOKEN: &str = "cannot read /dev/urandom for a session token; try again";

/// The web socket's path in a state directory.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("web.sock")
}

/// Binds `web.sock` as the control socket is bound: mode 0600, or 0666
/// when `others` (every user may connect and each is served as herself);
/// the state directory's mode is the control socket's business.
pub fn bind(state_dir: &Path, others: bool) -> Result<UnixListener, String> {
    let path = socket_path(state_dir);
    if path.as_os_str().len() >= 108 {
        return Err(format!(
            "the web socket path {} is too long for a Unix socket (108 bytes); use a shorter --state-dir",
            path.display()
        ));
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "cannot remove the stale socket {}: {e}",
                path.display()
            ))
        }
    }
    let listener = UnixListener::bind(&path)
        .map_err(|e| format!("cannot create the web socket {}: {e}", path.display()))?;
    let mode = if others { 0o666 } else { 0o600 };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot restrict the web socket {}: {e}", path.display()))?;
    Ok(listener)
}

/// How a connection reached the console.
#[derive(Clone, Copy)]
enum Via {
    /// `web.sock`: the peer's uid.
    Socket(u32),
    /// `web_listen`: identity from the session cookie only.
    Tcp,
    /// `web_listen` behind `web_proxy`, from one of its addresses:
    /// identity from its header, on every request.
    Proxied,
}

/// The viewer of one request.
pub(crate) struct Viewer {
    pub(crate) uid: u32,
    pub(crate) name: String,
    pub(crate) admin: bool,
    /// The read-only role: pages, no actions.
    pub(crate) read_only: bool,
    pub(crate) csrf: String,
}

impl Web {
    pub fn new(daemon: Box<dyn Daemon>, settings: Settings) -> Arc<Web> {
        Arc::new(Web {
            daemon: Arc::from(daemon),
            settings: Mutex::new(Arc::new(settings)),
            sessions: Sessions::default(),
            connections: Shares::new(MAX_CONNECTIONS),
            streams: Shares::new(MAX_STREAMS),
            names: Mutex::default(),
            heatmaps: Recent::default(),
        })
    }

    /// New settings (after a reload).
    pub fn configure(&self, settings: Settings) {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(settings);
    }

    /// A uid's name, read from the user database once (a rename shows
    /// after a restart).
    fn user_name(&self, uid: u32) -> String {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if names.len() > 4096 {
            names.clear();
        }
        names
            .entry(uid)
            .or_insert_with(|| {
                rea_host::user::user_by_uid(uid)
                    .map(|u| u.name)
                    .unwrap_or_else(|| format!("uid {uid}"))
            })
            .clone()
    }

    /// The TCP address served (it changes only with a restart).
    pub fn tcp_address(&self) -> Option<SocketAddr> {
        self.settings().tcp
    }

    fn settings(&self) -> Arc<Settings> {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Serves `web.sock` forever.
    pub async fn serve_socket(self: Arc<Web>, listener: UnixListener) {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let web = self.clone();
            tokio::spawn(async move {
                let uid = stream.peer_cred().ok().map(|c| c.uid());
                let allowed = uid.filter(|&u| is_admin(u) || web.settings().open_to_users);
                let Some(uid) = allowed else {
                    refuse(
                        &mut stream,
                        403,
                        "only the daemon's user and root may use this console",
                    )
                    .await;
                    return;
                };
                let Some(_held) = web.connections.take(uid, is_admin(uid)) else {
                    refuse(
                        &mut stream,
                        429,
                        "too many connections from your user; close some pages and try again",
                    )
                    .await;
                    return;
                };
                web.connection(&mut stream, Via::Socket(uid), None).await;
            });
        }
    }

    /// Serves `web_listen` forever (loopback, or behind `web_proxy`:
    /// checked by the configuration).
    pub async fn serve_tcp(self: Arc<Web>, listener: TcpListener) {
        loop {
            let Ok((mut stream, peer)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let web = self.clone();
            tokio::spawn(async move {
                // Behind a proxy, its header is trusted from its
                // addresses only: anyone else could write it.
                let via = match &web.settings().proxy {
                    None => Via::Tcp,
                    Some(p) if p.from.contains(&peer.ip().to_canonical()) => Via::Proxied,
                    Some(_) => {
                        refuse(
                            &mut stream,
                            403,
                            "this console is served through its proxy only ([daemon] web_proxy)",
                        )
                        .await;
                        return;
                    }
                };
                // Nobody is known before the request is read: those
                // connections share the cap as one anonymous holder (its
                // quarter), and the head must come within HEAD_TIMEOUT.
                let Some(held) = web.connections.take(u32::MAX, false) else {
                    refuse(&mut stream, 429, "too many connections; try again later").await;
                    return;
                };
                web.connection(&mut stream, via, Some(held)).await;
            });
        }
    }

    /// One request on `stream`; `anonymous`, a TCP connection's share
    /// before its user is known (given up for hers once she is).
    async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        via: Via,
        anonymous: Option<session::Held<'_>>,
    ) {
        let mut anonymous = anonymous;
        let req = match http::read_request(stream).await {
            Ok(r) => r,
            Err(ReadError::Gone) => return,
            Err(ReadError::Bad(status, why)) => {
                refuse(stream, status, why).await;
                linger(stream).await;
                return;
            }
        };
        let settings = self.settings();
        // DNS rebinding: a page of another site that resolves its name to
        // this address still sends its own name as Host.
        let host = match req.one("host") {
            Ok(Some(h)) if host_allowed(h, &settings) => h.to_string(),
            _ => {
                refuse(stream, 421, "this Host is not one the console answers to").await;
                return;
            }
        };
        if req.method != "GET" && req.method != "POST" && req.method != "HEAD" {
            refuse(stream, 405, "GET and POST only").await;
            return;
        }
        // Static assets carry no data: served to anyone who passed the
        // Host check (the login page needs its style).
        if let Some(asset) = pages::asset(&req.path) {
            http::write_response(stream, &asset).await;
            return;
        }
        let mut set_cookie = None;
        let from_tcp = !matches!(via, Via::Socket(_));
        let via = match via {
            Via::Proxied => match self.proxied_user(&req, &settings).await {
                Ok(uid) => Via::Socket(uid),
                Err((status, why)) => {
                    refuse(stream, status, &why).await;
                    return;
                }
            },
            via => via,
        };
        let session = match via {
            Via::Socket(uid) => {
                if req.path == "/login-link" {
                    if let Err(why) = same_origin(&req, &host) {
                        refuse(stream, 403, why).await;
                        return;
                    }
                    let r = self.login_link(&req, uid, &settings);
                    http::write_response(stream, &r).await;
                    return;
                }
                match self.sessions.find(req.cookie("rea_session"), Some(uid)) {
                    Some(s) => s,
                    None => {
                        let Some(s) = self.sessions.create(uid) else {
                            refuse(stream, 503, NO_TOKEN).await;
                            return;
                        };
                        set_cookie = Some(cookie(&s.id));
                        s
                    }
                }
            }
            Via::Proxied => return,
            Via::Tcp => {
                if req.path == "/login" && req.method == "GET" {
                    let r = self.login(&req);
                    http::write_response(stream, &r).await;
                    return;
                }
                match self.sessions.find(req.cookie("rea_session"), None) {
                    Some(s) => s,
                    None => {
                        let body = pages::login_needed();
                        http::write_response(stream, &http::Response::html(401, body)).await;
                        return;
                    }
                }
            }
        };
        let uid = session.uid;
        // A TCP viewer, now known, holds her own share as well; behind a
        // proxy (whose connections are everyone's) hers alone, so one
        // user's open pages never take the others' way in.
        let _share = if from_tcp {
            match self.connections.take(uid, is_admin(uid)) {
                Some(h) => Some(h),
                None => {
                    refuse(stream, 429, "too many connections from your user").await;
                    return;
                }
            }
        } else {
            None
        };
        if settings.proxy.is_some() && from_tcp {
            anonymous.take();
        }
        let viewer = Viewer {
            uid,
            name: self.user_name(uid),
            admin: is_admin(uid),
            read_only: settings.viewers.contains(&uid),
            csrf: session.csrf.clone(),
        };
        if req.method == "POST" {
            if let Err(why) = same_origin(&req, &host) {
                refuse(stream, 403, why).await;
                return;
            }
            let form = req.form();
            let token = form
                .iter()
                .find(|(k, _)| k == "csrf")
                .map(|(_, v)| v.as_str());
            if !token.is_some_and(|t| session::same(t, &session.csrf)) {
                refuse(
                    stream,
                    403,
                    "missing or wrong CSRF token: reload the page and try again",
                )
                .await;
                return;
            }
            if viewer.read_only {
                refuse(stream, 403, "your role on this console is read-only").await;
                return;
            }
            let mut r = pages::act(self, &viewer, &req.path, &form).await;
            if let Some(c) = set_cookie {
                r.headers.push(("Set-Cookie", c));
            }
            http::write_response(stream, &r).await;
            return;
        }
        if req.path == "/events" {
            self.events(stream, &viewer, &req, set_cookie).await;
            return;
        }
        let mut r = pages::page(self, &viewer, &req).await;
        if let Some(c) = set_cookie {
            r.headers.push(("Set-Cookie", c));
        }
        if req.method == "HEAD" {
            r.body.clear();
        }
        http::write_response(stream, &r).await;
    }

    /// The local user a proxied request's header names, as a uid; or why
    /// the request is refused (no header, two, a name with no account, a
    /// user the console is not open to).
    async fn proxied_user(
        &self,
        req: &http::Request,
        settings: &Settings,
    ) -> Result<u32, (u16, String)> {
        let Some(proxy) = &settings.proxy else {
            return Err((403, "no proxy is trusted".into()));
        };
        let name = match req.one(&proxy.header) {
            Ok(Some(name)) if !name.is_empty() => name.to_string(),
            Ok(_) => {
                return Err((
                    401,
                    format!(
                        "no {} header: the proxy names the user ([daemon] web_proxy)",
                        proxy.header
                    ),
                ))
            }
            Err(()) => return Err((400, format!("two {} headers", proxy.header))),
        };
        // The user database may be NSS over the network: off the runtime's
        // threads.
        let looked = name.clone();
        let user = tokio::task::spawn_blocking(move || rea_host::user::user(&looked))
            .await
            .map_err(|e| (500, e.to_string()))?;
        let Ok(user) = user else {
            return Err((403, format!("{name:?} is no user of this machine")));
        };
        if !is_admin(user.uid) && !settings.open_to_users {
            return Err((
                403,
                "only the daemon's user and root may use this console".into(),
            ));
        }
        Ok(user.uid)
    }

    /// `POST /login-link` on `web.sock` (with `X-Rea-Login: 1`, which no
    /// page of another origin can send without a CORS preflight this
    /// console never answers): a one-time link for the TCP address that
    /// logs its opener in as the socket's peer.
    fn login_link(&self, req: &http::Request, uid: u32, settings: &Settings) -> http::Response {
        if req.method != "POST" || req.header("x-rea-login") != Some("1") {
            return http::Response::text(400, "POST with X-Rea-Login: 1 (rea web does)");
        }
        let Some(addr) = settings.tcp else {
            return http::Response::text(
                404,
                "the console has no TCP address: set [daemon] web_listen, or forward web.sock (ssh -L 8080:/path/web.sock host)",
            );
        };
        if settings.proxy.is_some() {
            return http::Response::text(
                404,
                format!("http://{addr} takes its users from its proxy's header ([daemon] web_proxy): open the console through the proxy, no link needed"),
            );
        }
        let Some(t) = self.sessions.login_link(uid) else {
            return http::Response::text(503, NO_TOKEN);
        };
        http::Response::text(200, format!("http://{addr}/login?t={t}\n"))
    }

    /// `GET /login?t=TOKEN[&next=/PATH]` on TCP: spends the token, sets
    /// the session cookie, and goes to `next` (the overview by default).
    fn login(&self, req: &http::Request) -> http::Response {
        let params = req.params();
        let get = |k: &str| {
            params
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        // Where to go next: a path of this console, never another site.
        let next = get("next");
        let next = if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') {
            http::encode_path(&next)
        } else {
            "/".to_string()
        };
        match self.sessions.redeem(&get("t")) {
            Some(uid) => {
                let Some(s) = self.sessions.create(uid) else {
                    return http::Response::text(503, NO_TOKEN);
                };
                let mut r = http::Response::redirect(next);
                r.headers.push(("Set-Cookie", cookie(&s.id)));
                r
            }
            None => http::Response::html(401, pages::login_needed()),
        }
    }

    /// `GET /events[?follow=RUN]`: server-sent events fed by a
    /// subscription asked as the viewer, until the page goes away.
    async fn events<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: &mut S,
        viewer: &Viewer,
        req: &http::Request,
        set_cookie: Option<String>,
    ) {
        let Some(_held) = self.streams.take(viewer.uid, viewer.admin) else {
            refuse(stream, 429, "too many open pages from your user").await;
            return;
        };
        let follow = req
            .params()
            .into_iter()
            .find(|(k, _)| k == "follow")
            .map(|(_, v)| v)
            .filter(|v| !v.is_empty());
        let answer = self
            .daemon
            .ask(
                viewer.uid,
                Request::Subscribe(rea_proto::live::Subscription { follow }),
            )
            .await;
        let (first, mut lines) = match answer {
            Answer::Lines(first, lines) if first.ok => (first, lines),
            Answer::One(r) | Answer::Lines(r, _) => {
                // A run this viewer may not see is not found, as on its
                // run page; anything else is the daemon's refusal.
                let status = if r.code.as_deref() == Some("unknown_run") {
                    404
                } else {
                    503
                };
                let why = r.error.unwrap_or_else(|| "the daemon refused".into());
                refuse(stream, status, &why).await;
                return;
            }
        };
        let mut head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n{}{}",
            http::NO_STORE,
            http::SECURITY_HEADERS
        );
        if let Some(c) = set_cookie {
            head.push_str(&format!("Set-Cookie: {c}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        push_event(&mut out, &first);
        // A closed page is noticed at once (its end of file), not at the
        // next write: its subscription and share go with it.
        let (mut r, mut w) = tokio::io::split(stream);
        let mut sink = [0u8; 512];
        loop {
            let ok = matches!(
                tokio::time::timeout(http::WRITE_TIMEOUT, async {
                    w.write_all(&out).await?;
                    w.flush().await
                })
                .await,
                Ok(Ok(()))
            );
            out.clear();
            if !ok {
                return;
            }
            let next = tokio::select! {
                next = tokio::time::timeout(KEEPALIVE, lines.recv()) => next,
                read = tokio::io::AsyncReadExt::read(&mut r, &mut sink) => match read {
                    // A client has nothing more to say on this connection.
                    Ok(n) if n > 0 => continue,
                    _ => return,
                },
            };
            match next {
                Ok(Some(line)) => {
                    push_event(&mut out, &line);
                    while out.len() < 64 * 1024 {
                        let Ok(more) = lines.try_recv() else { break };
                        push_event(&mut out, &more);
                    }
                }
                Ok(None) => return,
                Err(_) => out.extend_from_slice(b": keep-alive\n\n"),
            }
        }
    }

    /// Asks the daemon as `uid`; the first line's data, or the refusal.
    pub(crate) async fn ask(
        &self,
        uid: u32,
        request: Request,
    ) -> Result<serde_json::Value, Refusal> {
        let first = match self.daemon.ask(uid, request).await {
            Answer::One(r) | Answer::Lines(r, _) => r,
        };
        if first.ok {
            Ok(first.data.unwrap_or(serde_json::Value::Null))
        } else {
            Err(Refusal {
                code: first.code.unwrap_or_default(),
                message: first.error.unwrap_or_else(|| "the daemon refused".into()),
            })
        }
    }

    /// A typed answer.
    pub(crate) async fn ask_as<T: serde::de::DeserializeOwned>(
        &self,
        uid: u32,
        request: Request,
    ) -> Result<T, Refusal> {
        let v = self.ask(uid, request).await?;
        serde_json::from_value(v).map_err(|e| Refusal {
            code: "bad_answer".into(),
            message: format!("cannot read the daemon's answer: {e}"),
        })
    }

    /// History records, as the daemon streams them (at most `query.limit`).
    pub(crate) async fn history(
        &self,
        uid: u32,
        query: rea_store::history::Query,
    ) -> Result<Vec<rea_core::record::Record>, Refusal> {
        use rea_proto::protocol::HistoryChunk;
        let answer = self.daemon.ask(uid, Request::History { query }).await;
        let (first, mut rest) = match answer {
            Answer::One(r) => (r, None),
            Answer::Lines(r, rx) => (r, Some(rx)),
        };
        let mut records = Vec::new();
        let mut line = Some(first);
        while let Some(r) = line.take() {
            if !r.ok {
                return Err(Refusal {
                    code: r.code.unwrap_or_default(),
                    message: r.error.unwrap_or_else(|| "the daemon refused".into()),
                });
            }
            let chunk: HistoryChunk =
                serde_json::from_value(r.data.unwrap_or_default()).map_err(|e| Refusal {
                    code: "bad_answer".into(),
                    message: format!("cannot read the daemon's answer: {e}"),
                })?;
            match chunk {
                HistoryChunk::Records { records: more } => records.extend(more),
                HistoryChunk::End { .. } => return Ok(records),
            }
            line = match &mut rest {
                Some(rx) => rx.recv().await,
                None => None,
            };
        }
        Ok(records)
    }
}

/// A refusal from the daemon.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: String,
    pub(crate) message: String,
}

fn push_event(out: &mut Vec<u8>, line: &Response) {
    let data = if line.ok {
        line.data.clone().unwrap_or_default()
    } else {
        serde_json::json!({"event": "error", "error": line.error})
    };
    out.extend_from_slice(b"data: ");
    // JSON has no raw newlines: one data line per event.
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

fn cookie(id: &str) -> String {
    format!("rea_session={id}; Path=/; HttpOnly; SameSite=Strict")
}

/// Root and the daemon's own user: every tenant's pages (as the control
/// socket's `Peer::is_admin`).
fn is_admin(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// Whether `Host` (with or without a port) names this console.
fn host_allowed(host: &str, settings: &Settings) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || valid_port(port) => format!("[{v6}]"),
            _ => return false,
        }
    } else {
        match host.split_once(':') {
            Some((n, port)) if valid_port(port) => n.to_string(),
            Some(_) => return false,
            None => host.to_string(),
        }
    }
    .to_ascii_lowercase();
    ["localhost", "127.0.0.1", "[::1]"].contains(&name.as_str())
        || settings.hosts.iter().any(|h| h.eq_ignore_ascii_case(&name))
}

fn valid_port(p: &str) -> bool {
    p.strip_prefix(':').unwrap_or(p).parse::<u16>().is_ok()
}

/// A POST must come from a page of this console: `Origin`, when the
/// browser sends it (every current one does on POST), is this `Host`, and
/// `Sec-Fetch-Site` is not cross-site.
fn same_origin(req: &http::Request, host: &str) -> Result<(), &'static str> {
    match req.one("origin") {
        Err(()) => return Err("two Origin headers"),
        Ok(Some(o)) if o != format!("http://{host}") && o != format!("https://{host}") => {
            return Err("cross-origin request refused")
        }
        _ => {}
    }
    match req.header("sec-fetch-site") {
        Some("same-origin") | Some("none") | None => Ok(()),
        Some(_) => Err("cross-site request refused"),
    }
}

/// After refusing a request whose bytes were not all read: stop writing
/// and read a little more (bounded in bytes and time), so the client gets
/// the refusal instead of a reset for the bytes left unread.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    use tokio::io::AsyncReadExt;
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 8192];
    let mut left = 256 * 1024usize;
    let drain = async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, status: u16, why: &str) {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>{status}</title><p>{}</p>\n",
        esc(why)
    );
    http::write_response(stream, &http::Response::html(status, body)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_checked_with_their_ports() {
        let s = Settings {
            hosts: vec!["rea.example".into()],
            ..Settings::default()
        };
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
            "REA.example",
        ] {
            assert!(host_allowed(ok, &s), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1:x",
            "[::2]:80",
            "",
            "localhost:",
        ] {
            assert!(!host_allowed(bad, &s), "{bad}");
        }
    }
}
