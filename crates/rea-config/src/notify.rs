//! The `webhook` and `ping` fields of a job (and of `[defaults]`): URLs
//! checked where they are written (http or https, a host, no spaces),
//! filters by name with a "did you mean", timeouts within bounds.
//!
//! ```toml
//! webhook = { url = "https://hooks.example/rea", on = ["failure", "alert"], timeout = "10s" }
//! webhook = [{ url = "…" }, { url = "…", on = ["success"] }]
//! ping = "https://hc-ping.com/UUID"
//! ping = { url = "https://cronitor.link/p/KEY/backup", style = "cronitor", attempts = 3 }
//! ```
//!
//! A job's `webhook` replaces the one of `[defaults]` (as `mailto` does);
//! `webhook = []` and `ping = ""` turn an inherited one off.

use std::sync::Arc;
use std::time::Duration;

use rea_core::notify::{
    Filter, Ping, PingStyle, Webhook, DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT, MAX_ATTEMPTS,
};
use toml::de::DeValue;

use crate::fields::{Draft, Value};
use crate::walk::{in_file_order, Ctx};

/// A URL longer than this is surely not meant (and it is held per job).
const MAX_URL: usize = 2048;
/// Webhooks per job.
const MAX_WEBHOOKS: usize = 8;
/// The longest timeout of one attempt.
const MAX_TIMEOUT: Duration = Duration::from_secs(120);

const WEBHOOK_FIELDS: &[&str] = &["url", "on", "timeout", "attempts"];
const PING_FIELDS: &[&str] = &["url", "style", "timeout", "attempts"];

/// `webhook = { … }` or a list of them.
pub(crate) fn apply_webhook(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let mut hooks = Vec::new();
    match v.get_ref() {
        DeValue::Table(_) => hooks.extend(webhook(ctx, v)),
        DeValue::Array(items) => {
            if items.len() > MAX_WEBHOOKS {
                ctx.error(
                    v.span().start,
                    format!(
                        "at most {MAX_WEBHOOKS} webhooks per job, found {}",
                        items.len()
                    ),
                    None,
                );
                return;
            }
            for item in items {
                hooks.extend(webhook(ctx, item));
            }
        }
        _ => {
            ctx.type_error(
                v,
                "a table like { url = \"https://…\", on = [\"failure\"] } or a list of them",
                None,
            );
            return;
        }
    }
    let extras = d.job.extras_mut();
    let mut notify = extras.notify.as_deref().cloned().unwrap_or_default();
    notify.webhooks = hooks;
    extras.notify = (!notify.is_empty()).then(|| Arc::new(notify));
}

/// `ping = "URL"` or `ping = { url = "URL", style = "cronitor" }`.
pub(crate) fn apply_ping(ctx: &mut Ctx, v: &Value, d: &mut Draft) {
    let ping = match v.get_ref() {
        DeValue::String(s) if s.is_empty() => None,
        DeValue::String(_) => url(ctx, v, "ping").map(|url| Ping {
            url,
            style: PingStyle::Healthchecks,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
        }),
        DeValue::Table(t) => {
            let mut url_field = None;
            let mut ping = Ping {
                url: String::new(),
                style: PingStyle::Healthchecks,
                timeout: DEFAULT_TIMEOUT,
                attempts: DEFAULT_ATTEMPTS,
            };
            for (key, value) in in_file_order(t) {
                match key.get_ref().as_ref() {
                    "url" => url_field = Some(url(ctx, value, "ping.url")),
                    "style" => {
                        if let Some(s) = ctx.choice(value, "ping.style", &PingStyle::ALL) {
                            ping.style = s;
                        }
                    }
                    "timeout" => {
                        if let Some(t) = timeout(ctx, value, "ping.timeout") {
                            ping.timeout = t;
                        }
                    }
                    "attempts" => {
                        if let Some(n) =
                            ctx.integer(value, "ping.attempts", 1, i64::from(MAX_ATTEMPTS))
                        {
                            ping.attempts = n as u32;
                        }
                    }
                    _ => {
                        ctx.unknown_field(key, PING_FIELDS.iter().copied(), "fields of ping", None)
                    }
                }
            }
            match url_field {
                Some(Some(url)) => Some(Ping { url, ..ping }),
                Some(None) => None,
                None => {
                    ctx.error(
                        v.span().start,
                        "ping has no \"url\"",
                        Some("write ping = { url = \"https://hc-ping.com/UUID\" }".into()),
                    );
                    None
                }
            }
        }
        _ => {
            ctx.type_error(
                v,
                "a URL like \"https://hc-ping.com/UUID\" or a table",
                None,
            );
            return;
        }
    };
    let extras = d.job.extras_mut();
    let mut notify = extras.notify.as_deref().cloned().unwrap_or_default();
    notify.ping = ping;
    extras.notify = (!notify.is_empty()).then(|| Arc::new(notify));
}

fn webhook(ctx: &mut Ctx, v: &Value) -> Option<Webhook> {
    let table = ctx.table(
        v,
        "a table like { url = \"https://…\", on = [\"failure\"] }",
    )?;
    let mut hook = Webhook {
        url: String::new(),
        on: Filter::DEFAULT,
        timeout: DEFAULT_TIMEOUT,
        attempts: DEFAULT_ATTEMPTS,
    };
    let mut url_field = None;
    let mut ok = true;
    for (key, value) in in_file_order(table) {
        match key.get_ref().as_ref() {
            "url" => url_field = Some(url(ctx, value, "webhook.url")),
            "on" => match filter(ctx, value) {
                Some(f) => hook.on = f,
                None => ok = false,
            },
            "timeout" => match timeout(ctx, value, "webhook.timeout") {
                Some(t) => hook.timeout = t,
                None => ok = false,
            },
            "attempts" => {
                match ctx.integer(value, "webhook.attempts", 1, i64::from(MAX_ATTEMPTS)) {
                    Some(n) => hook.attempts = n as u32,
                    None => ok = false,
                }
            }
            _ => {
                ctx.unknown_field(
                    key,
                    WEBHOOK_FIELDS.iter().copied(),
                    "fields of webhook",
                    None,
                );
                ok = false;
            }
        }
    }
    match url_field {
        Some(Some(url)) if ok => Some(Webhook { url, ..hook }),
        Some(_) => None,
        None => {
            ctx.error(
                v.span().start,
                "webhook has no \"url\"",
                Some("write webhook = { url = \"https://hooks.example/rea\" }".into()),
            );
            None
        }
    }
}

/// `on = ["failure", "alert:late"]` (or one name).
fn filter(ctx: &mut Ctx, v: &Value) -> Option<Filter> {
    let names = || Filter::NAMES.iter().map(|(n, _)| *n);
    let one = |ctx: &mut Ctx, item: &Value| -> Option<Filter> {
        let s = ctx.string(item, "an event name like \"failure\"")?;
        match Filter::parse(s) {
            Some(f) => Some(f),
            None => {
                let hint = rea_core::suggest::did_you_mean(s, names()).unwrap_or_else(|| {
                    format!("events: {}", names().collect::<Vec<_>>().join(", "))
                });
                ctx.error(
                    item.span().start,
                    format!("unknown webhook event {s:?}"),
                    Some(hint),
                );
                None
            }
        }
    };
    match v.get_ref() {
        DeValue::String(_) => one(ctx, v),
        DeValue::Array(items) => {
            let mut out = Filter::NONE;
            let mut ok = true;
            for item in items {
                match one(ctx, item) {
                    Some(f) => out = out.union(f),
                    None => ok = false,
                }
            }
            if ok && out.is_empty() {
                ctx.error(
                    v.span().start,
                    "\"on\" lists no event",
                    Some("write on = [\"failure\", \"alert\"], or remove it for every problem and alert".into()),
                );
                return None;
            }
            ok.then_some(out)
        }
        _ => {
            ctx.type_error(
                v,
                "a list of event names like [\"failure\", \"alert\"]",
                None,
            );
            None
        }
    }
}

fn timeout(ctx: &mut Ctx, v: &Value, field: &str) -> Option<Duration> {
    let t = ctx.duration(v, field)?;
    if t.is_zero() || t > MAX_TIMEOUT {
        ctx.error(
            v.span().start,
            format!(
                "{field:?} must be longer than 0s and at most {}",
                rea_core::duration::format(MAX_TIMEOUT)
            ),
            None,
        );
        return None;
    }
    Some(t)
}

/// An `http://` or `https://` URL with a host. The URL itself is never
/// echoed: a ping URL's path is its secret.
fn url(ctx: &mut Ctx, v: &Value, field: &str) -> Option<String> {
    let s = ctx.string(v, "a URL like \"https://…\"")?;
    let at = v.span().start;
    let problem = url_problem(s);
    if let Some((message, hint)) = problem {
        ctx.error(at, format!("{field:?} {message}"), hint);
        return None;
    }
    Some(s.to_string())
}

/// What is wrong with `s` as a webhook's or a ping's URL.
pub(crate) fn url_problem(s: &str) -> Option<(String, Option<String>)> {
    let hint = || Some("write a URL like \"https://hooks.example/rea\"".to_string());
    if s.len() > MAX_URL {
        return Some((format!("is longer than {MAX_URL} bytes"), None));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some((
            "contains a space or a control character".into(),
            Some("percent-encode it (%20)".into()),
        ));
    }
    let Some((scheme, rest)) = s.split_once("://") else {
        return Some(("is not a URL".into(), hint()));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Some((
            format!("must be http:// or https://, found {scheme:?}"),
            hint(),
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']').map_or("", |(h, _)| h)
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    if host.is_empty() {
        return Some(("has no host".into(), hint()));
    }
    if let Some(port) = host_port
        .rsplit_once(']')
        .map_or(host_port, |(_, p)| p)
        .split_once(':')
        .map(|(_, p)| p)
    {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Some((format!("has an invalid port {port:?}"), None));
        }
    }
    if s.contains('#') {
        return Some((
            "has a fragment (#…), which is never sent".into(),
            Some("remove it".into()),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::url_problem;

    #[test]
    fn urls() {
        for ok in [
            "https://hc-ping.com/5c2a8b7e-1f0e-4b0e-9d5e-2f3c4a5b6c7d",
            "http://127.0.0.1:8080/hook?x=1",
            "HTTPS://[::1]:443/",
            "https://user:pw@hooks.example/a",
        ] {
            assert!(url_problem(ok).is_none(), "{ok}");
        }
        for (bad, says) in [
            ("ftp://host/x", "must be http"),
            ("hooks.example/x", "is not a URL"),
            ("https:///x", "no host"),
            ("https://h:99999/", "invalid port"),
            ("https://h/a b", "space"),
            ("https://h/#x", "fragment"),
        ] {
            let (m, _) = url_problem(bad).expect(bad);
            assert!(m.contains(says), "{bad}: {m}");
        }
    }
}
