//! The web console's seam (`rea_web`): its requests enter the loop as the
//! control socket's do, as `Incoming`s from the viewer's uid with the
//! source `web`, so `requests::incoming` authorizes, localizes and audits
//! them as it does the CLI's. This file only binds the console's
//! listeners and translates the loop's `Reply` into `rea_web::Answer`.

use rea_config::Config;
use rea_proto::{Request, Response};
use rea_web::{Answer, Asked, Settings, Web};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::control::{Incoming, Peer, Reply};

/// The loop's control channel, as the console asks it.
struct Port {
    tx: mpsc::UnboundedSender<Incoming>,
}

impl rea_web::Daemon for Port {
    fn ask(&self, uid: u32, request: Request) -> Asked {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(Incoming {
            request,
            reply,
            peer: Peer { uid },
            source: Some("web".into()),
        });
        Box::pin(async move {
            if sent.is_err() {
                return Answer::One(stopping());
            }
            match answer.await {
                Err(_) => Answer::One(stopping()),
                Ok(Reply::Done(r)) => Answer::One(r),
                Ok(Reply::Stream(first, rest)) => Answer::Lines(first, rest),
                Ok(Reply::Wait(first, end)) => {
                    let (tx, rx) = mpsc::channel(1);
                    tokio::spawn(async move {
                        if let Ok(v) = end.await {
                            let _ = tx.send(Response::ok(v)).await;
                        }
                    });
                    Answer::Lines(first, rx)
                }
            }
        })
    }
}

fn stopping() -> Response {
    Response::err("refused", "the daemon is shutting down")
}

/// The console's settings from the configuration: the viewers' names
/// resolved to uids now (a name with no account is said and skipped).
pub(crate) fn settings(
    config: &Config,
    others: bool,
    tcp: Option<std::net::SocketAddr>,
) -> Settings {
    let viewers = config
        .daemon
        .web_viewers
        .iter()
        .filter_map(|name| match rea_host::user::user(name) {
            Ok(u) => Some(u.uid),
            Err(e) => {
                warn!("web_viewers: {e}; skipped");
                None
            }
        })
        .collect();
    Settings {
        hosts: config.daemon.web_hosts.clone(),
        viewers,
        open_to_users: others,
        tcp,
        zone: rea_config::zone::resolve("local")
            .map(|z| z.name().to_string())
            .unwrap_or_else(|_| "UTC".into()),
        proxy: config.daemon.web_proxy.as_ref().map(|p| rea_web::Proxy {
            header: p.header.clone(),
            from: p.from.clone(),
        }),
    }
}

/// The console's listeners, bound before the control socket so that a
/// taken `web_listen` fails the start with nothing left behind.
pub(crate) struct Bound {
    socket: tokio::net::UnixListener,
    tcp: Option<(tokio::net::TcpListener, std::net::SocketAddr)>,
}

/// Binds `web_listen` (if set), then `web.sock`.
pub(crate) async fn bind(
    state_dir: &std::path::Path,
    config: &Config,
    others: bool,
) -> Result<Bound, String> {
    let tcp = match config.daemon.web_listen {
        None => None,
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                format!("cannot serve the web console on {addr} ([daemon] web_listen): {e}")
            })?;
            let local = l.local_addr().unwrap_or(addr);
            Some((l, local))
        }
    };
    let socket = rea_web::bind(state_dir, others)?;
    Ok(Bound { socket, tcp })
}

/// Serves the console on the loop's control channel.
pub(crate) fn serve(
    bound: Bound,
    config: &Config,
    others: bool,
    tx: mpsc::UnboundedSender<Incoming>,
) -> std::sync::Arc<Web> {
    let Bound { socket, tcp } = bound;
    if let Some((_, local)) = &tcp {
        match &config.daemon.web_proxy {
            Some(p) => info!(
                "web console listening on http://{local} behind a proxy (users named by its {} header, from {:?})",
                p.header, p.from
            ),
            None => info!("web console listening on http://{local} (log in with `rea web`)"),
        }
    }
    let web = Web::new(
        Box::new(Port { tx }),
        settings(config, others, tcp.as_ref().map(|(_, a)| *a)),
    );
    tokio::spawn(web.clone().serve_socket(socket));
    if let Some((l, _)) = tcp {
        tokio::spawn(web.clone().serve_tcp(l));
    }
    web
}
