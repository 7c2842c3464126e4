//! `rea submit` and `rea at`: one-shot jobs. The command is stored as an
//! argv (no shell unless `--shell`), with this shell's working directory and
//! only the `--env` variables given. The daemon answers once the one-shot is
//! durable.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration as CDuration, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use serde_json::json;

use rea_core::oneshot::OneShotRetry;

use crate::cli::{AtArgs, Global, OneShotOpts, SubmitArgs};
use crate::failure::{self, CommandResult, Failure};
use rea_proto::protocol::{FieldNames, SubmitReply};
use rea_proto::{Request, Submission};

/// When a one-shot runs.
enum When {
    In(std::time::Duration),
    At(DateTime<Utc>),
}

pub(crate) fn submit(global: &Global, args: &SubmitArgs) -> CommandResult {
    let when = match (&args.in_, &args.at) {
        (Some(d), None) => When::In(
            rea_core::duration::parse(d).map_err(|e| Failure::invalid(format!("--in: {e}")))?,
        ),
        (None, Some(t)) => {
            parse_time(t, args.tz.as_deref(), Utc::now()).map_err(Failure::invalid)?
        }
        _ => return Err(Failure::invalid("say when: --in DURATION or --at TIME")),
    };
    send(global, &args.opts, when)
}

pub(crate) fn at(global: &Global, args: &AtArgs) -> CommandResult {
    // `rea at now + 30m` and `rea at 2026-12-01 10:00`: at(1) takes the
    // time as several words.
    let time = args.time.join(" ");
    let when = parse_time(&time, args.tz.as_deref(), Utc::now()).map_err(Failure::invalid)?;
    send(global, &args.opts, when)
}

fn duration_ms(flag: &str, v: &Option<String>) -> Result<Option<u64>, String> {
    v.as_deref()
        .map(|t| {
            rea_core::duration::parse(t)
                .map(|d| d.as_millis() as u64)
                .map_err(|e| format!("{flag}: {e}"))
        })
        .transpose()
}

fn send(global: &Global, o: &OneShotOpts, when: When) -> CommandResult {
    let mut env = BTreeMap::new();
    for kv in &o.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                env.insert(k.to_string(), v.to_string());
            }
            _ => return Err(Failure::invalid(format!("--env {kv:?}: write KEY=VALUE"))),
        }
    }
    let dir = std::env::current_dir()
        .map_err(|e| Failure::runtime(format!("cannot read the working directory: {e}")))?;
    let parsed = (|| -> Result<_, String> {
        Ok((
            duration_ms("--timeout", &o.timeout)?,
            duration_ms("--expire", &o.expire)?,
            duration_ms("--retry-delay", &o.retry_delay)?,
            duration_ms("--retry-max-delay", &o.retry_max_delay)?,
        ))
    })();
    let (timeout_ms, expire_ms, delay_ms, max_delay_ms) = parsed.map_err(Failure::invalid)?;
    let argv = if o.shell {
        vec![o.command.join(" ")]
    } else {
        o.command.clone()
    };
    let (at, in_ms) = match when {
        When::In(d) => (None, Some(d.as_millis() as u64)),
        When::At(t) => (Some(t), None),
    };
    let sub = Submission {
        name: o.name.clone(),
        argv,
        shell: o.shell,
        dir,
        env,
        at,
        in_ms,
        expire_ms,
        timeout_ms,
        retry: OneShotRetry {
            attempts: o.retry,
            delay_ms,
            max_delay_ms,
        },
        tags: o.tags.clone(),
    };
    // The daemon checks again; checking here says what is wrong without
    // needing one.
    sub.due(Utc::now(), &FieldNames::FLAGS)
        .map_err(Failure::invalid)?;
    let mut client = super::connect(global)?;
    let answer = match client.request(&Request::Submit(sub)) {
        Ok(resp) => super::answer::<SubmitReply>(resp)?,
        Err(rea_proto::ClientError::Timeout(m)) => return Err(late_answer(&m, o.name.as_deref())),
        Err(e) => return Err(super::client_failure(e)),
    };
    if o.json {
        println!(
            "{}",
            json!({ "id": answer.raw["id"], "due": answer.raw["due"] })
        );
    } else {
        println!("{}", answer.data.id);
    }
    failure::ok()
}

/// No answer in time: the daemon answers a submission only once it is
/// durable, but it may have become durable after the client stopped
/// waiting; saying "failed" would invite a retry that runs it twice.
fn late_answer(why: &str, name: Option<&str>) -> Failure {
    let again = match name {
        Some(n) => format!(
            "submitting it again is safe: a one-shot named {n:?} is refused while it is pending"
        ),
        None => "before submitting it again, check; next time give it a --name: a second \
                 one-shot of that name is refused while the first is pending"
            .to_string(),
    };
    Failure::runtime(format!(
        "{why}\n  the one-shot may have been queued all the same: `rea pending` lists it if so \
         (and `rea history` once it ran); {again}"
    ))
}

/// `rea at` times: `now + 30m` / `now + 30 minutes` / `+30m` / `in 2
/// hours`, RFC 3339, `YYYY-MM-DD HH:MM[:SS]` (or with `T`) in `zone`,
/// `HH:MM[:SS]`, `noon` and `midnight` (the next such time) in `zone`.
/// `zone` defaults to the machine's (`local`), as `at(1)` does.
fn parse_time(text: &str, zone: Option<&str>, now: DateTime<Utc>) -> Result<When, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let rel = lower
        .strip_prefix("now")
        .map(str::trim_start)
        .unwrap_or(&lower);
    if let Some(d) = rel.strip_prefix('+').or_else(|| rel.strip_prefix("in ")) {
        return crate::time_text::human_duration(d).map(When::In);
    }
    if lower == "now" {
        return Ok(When::In(std::time::Duration::ZERO));
    }
    let t = match lower.as_str() {
        "noon" => "12:00",
        "midnight" => "00:00",
        _ => t,
    };
    if let Ok(i) = DateTime::parse_from_rfc3339(t) {
        return Ok(When::At(i.with_timezone(&Utc)));
    }
    let tz: Tz = rea_config::zone::resolve(zone.unwrap_or("local"))
        .map_err(|e| format!("--tz: {}\n  hint: {}", e.message, e.hint()))?;
    let local = |naive: NaiveDateTime| crate::time_text::local(naive, tz, text);
    if let Some(n) = crate::time_text::naive_date_time(t) {
        return local(n).map(When::At);
    }
    for fmt in ["%H:%M:%S", "%H:%M"] {
        if let Ok(time) = NaiveTime::parse_from_str(t, fmt) {
            let today: NaiveDate = now.with_timezone(&tz).date_naive();
            let mut at = local(today.and_time(time))?;
            if at <= now {
                at = local((today + CDuration::days(1)).and_time(time))?;
            }
            return Ok(When::At(at));
        }
    }
    Err(format!(
        "cannot read the time {text:?}: write \"14:30\", \"noon\", \"2026-12-01 10:00\", \"2026-12-01T10:00:00+08:00\", \"now + 30 minutes\" or \"+30m\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn at(text: &str) -> String {
        match parse_time(text, Some("Asia/Shanghai"), now()).unwrap() {
            When::At(t) => t.to_rfc3339(),
            When::In(d) => format!("in {}", d.as_secs()),
        }
    }

    #[test]
    fn reads_the_familiar_spellings() {
        assert_eq!(at("now + 30m"), "in 1800");
        assert_eq!(at("now+30m"), "in 1800");
        assert_eq!(at("+1h"), "in 3600");
        assert_eq!(at("2026-12-01T10:00:00+08:00"), "2026-12-01T02:00:00+00:00");
        assert_eq!(at("2026-12-01 10:00"), "2026-12-01T02:00:00+00:00");
        // 12:00Z is 20:00 in Shanghai: 21:30 is today, 19:00 tomorrow.
        assert_eq!(at("21:30"), "2026-11-29T13:30:00+00:00");
        assert_eq!(at("19:00"), "2026-11-30T11:00:00+00:00");
        assert!(parse_time("teatime", Some("UTC"), now()).is_err());
        // at(1)'s words.
        assert_eq!(at("now + 30 minutes"), "in 1800");
        assert_eq!(at("now + 2 hours"), "in 7200");
        assert_eq!(at("NOW + 1 day"), "in 86400");
        assert_eq!(at("in 5 min"), "in 300");
        // 20:00 in Shanghai: noon is tomorrow's, midnight tonight's.
        assert_eq!(at("noon"), "2026-11-30T04:00:00+00:00");
        assert_eq!(at("midnight"), "2026-11-29T16:00:00+00:00");
        let e = parse_time("now + 30", Some("UTC"), now())
            .err()
            .unwrap_or_default();
        assert!(e.contains("a unit is missing after 30"), "{e}");
    }
}
