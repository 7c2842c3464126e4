//! One attempt of one request, on a worker thread (never the loop):
//! `ureq`'s blocking client with rustls, a timeout for the whole attempt
//! (name resolution, connect, TLS, sending, the answer), no redirects, no
//! proxy from the environment, and for users' deliveries a resolver that
//! refuses any address that is not public ([`is_public`]), checked on the
//! addresses it connects to, so a name that resolves to 127.0.0.1 (or
//! changes to it) is refused as the literal is.
//!
//! Roots of trust: the system's CA bundle where it is
//! (`/etc/ssl/certs/ca-certificates.crt`, so an organisation's own CA
//! works), else the Mozilla roots built in (webpki-roots).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ureq::config::Config;
use ureq::http::Uri;
use ureq::tls::{RootCerts, TlsConfig};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};
use ureq::Agent;

use super::queue::{Attempt, Method, Request};

/// Bytes of an answer read (and dropped): enough to keep the connection.
const ANSWER_BYTES: u64 = 64 * 1024;

/// The system's CA bundle (Debian's, and what most distributions link).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The two clients: one for the system's jobs, one for users' (which
/// refuses non-public addresses unless `[daemon] webhook_private_targets`).
pub(crate) struct Clients {
    any: Agent,
    public: Agent,
}

impl Clients {
    pub(crate) fn new() -> Clients {
        let tls = TlsConfig::builder().root_certs(roots()).build();
        let config = || {
            Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .proxy(None)
                .user_agent(concat!("rea/", env!("CARGO_PKG_VERSION")))
                .tls_config(tls.clone())
                .max_idle_connections(32)
                .max_idle_connections_per_host(2)
                .build()
        };
        Clients {
            any: Agent::with_parts(
                config(),
                DefaultConnector::new(),
                DefaultResolver::default(),
            ),
            public: Agent::with_parts(config(), DefaultConnector::new(), PublicOnly::default()),
        }
    }

    /// One attempt. `public_only`: a user's delivery the daemon does not
    /// let reach private addresses.
    pub(crate) fn send(&self, r: &Request, attempt: u32, public_only: bool) -> (Attempt, String) {
        let agent = if public_only { &self.public } else { &self.any };
        let attempt_s = attempt.to_string();
        let result = match r.method {
            Method::Post => agent
                .post(&r.url)
                .config()
                .timeout_global(Some(r.timeout))
                .build()
                .header("Content-Type", r.content_type)
                .header("X-Rea-Event", &r.event)
                .header("X-Rea-Delivery", &r.id)
                .header("X-Rea-Attempt", &attempt_s)
                .send(&r.body[..]),
            Method::Get => agent
                .get(&r.url)
                .config()
                .timeout_global(Some(r.timeout))
                .build()
                .header("X-Rea-Event", &r.event)
                .header("X-Rea-Delivery", &r.id)
                .header("X-Rea-Attempt", &attempt_s)
                .call(),
        };
        match result {
            Ok(mut answer) => {
                let code = answer.status().as_u16();
                // Read a little of the answer so the connection can be
                // reused; what it says is not kept.
                let _ = io::copy(
                    &mut io::Read::take(answer.body_mut().as_reader(), ANSWER_BYTES),
                    &mut io::sink(),
                );
                let how = match code {
                    200..=299 => Attempt::Delivered,
                    408 | 425 | 429 | 500..=599 => Attempt::Transient,
                    _ => Attempt::Permanent,
                };
                (how, format!("HTTP {code}"))
            }
            Err(ureq::Error::Io(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                (Attempt::Permanent, e.to_string())
            }
            Err(e @ (ureq::Error::BadUri(_) | ureq::Error::Http(_))) => {
                (Attempt::Permanent, e.to_string())
            }
            Err(e) => (Attempt::Transient, e.to_string()),
        }
    }
}

/// The system's roots, else the built-in ones.
fn roots() -> RootCerts {
    let Ok(pem) = std::fs::read(CA_BUNDLE) else {
        return RootCerts::WebPki;
    };
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        RootCerts::WebPki
    } else {
        RootCerts::Specific(Arc::new(certs))
    }
}

/// Resolves as usual, then refuses the lot if any address is not public.
#[derive(Debug, Default)]
struct PublicOnly {
    inner: DefaultResolver,
}

impl Resolver for PublicOnly {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.inner.resolve(uri, config, timeout)?;
        if let Some(a) = addrs.iter().find(|a| !is_public(a.ip())) {
            return Err(ureq::Error::Io(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refused: {} is not a public address (a user's webhooks and pings may not reach it unless [daemon] webhook_private_targets = true)",
                    a.ip()
                ),
            )));
        }
        Ok(addrs)
    }
}

/// Whether a user's delivery may go to `ip`: not loopback, private,
/// link-local (the cloud's metadata server), carrier-grade NAT,
/// unspecified, multicast, broadcast or reserved; IPv4 inside IPv6
/// (mapped, NAT64) judged as IPv4.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => public_v6(v6),
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, _, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (b == 18 || b == 19)))
}

fn public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96): the IPv4 address it carries.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || s[0..5] == [0, 0, 0, 0, 0]) // IPv4-compatible and the rest of ::/80
}

#[cfg(test)]
mod tests {
    use super::is_public;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "64:ff9b::808:808"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
