//! `rea history`: past runs, newest first, read backwards from the log so it
//! stays fast on a huge history. Runs in progress are shown by `rea status`.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use rea_core::record::{Event, Record, RunStatus};
use rea_store::history::Query;

use crate::cli::{Global, HistoryArgs, StatusFilter};
use crate::failure::{self, Failure, Outcome};
use crate::table::Table;

const FINAL: [RunStatus; 6] = RunStatus::FINAL;

/// `--since`: a duration back from now, an RFC 3339 instant, or a UTC date.
pub(crate) fn parse_since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(d) = rea_core::duration::parse(t) {
        let d = chrono::Duration::from_std(d).map_err(|e| e.to_string())?;
        return Ok(now - d);
    }
    if let Ok(i) = DateTime::parse_from_rfc3339(t) {
        return Ok(i.with_timezone(&Utc));
    }
    if let Ok(day) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(midnight) = day.and_hms_opt(0, 0, 0) {
            return Ok(midnight.and_utc());
        }
    }
    Err(format!(
        "--since {text:?} is neither a duration (\"2h\", \"7d\") nor an instant (2026-11-29T08:00:00Z, 2026-11-29)"
    ))
}

pub(crate) fn run(global: &Global, args: &HistoryArgs) -> Outcome {
    let dir = super::state_dir(global)?;
    let now = Utc::now();
    let since = args
        .since
        .as_deref()
        .map(|s| parse_since(s, now))
        .transpose()
        .map_err(Failure::invalid)?;
    let mut statuses: Vec<RunStatus> = Vec::new();
    let mut with_missed = false;
    for s in &args.status {
        match s {
            StatusFilter::Started => statuses.push(RunStatus::Started),
            StatusFilter::Succeeded => statuses.push(RunStatus::Succeeded),
            StatusFilter::Failed => statuses.push(RunStatus::Failed),
            StatusFilter::TimedOut => statuses.push(RunStatus::TimedOut),
            StatusFilter::Killed => statuses.push(RunStatus::Killed),
            StatusFilter::Skipped => statuses.push(RunStatus::Skipped),
            StatusFilter::Interrupted => statuses.push(RunStatus::Interrupted),
            StatusFilter::Cancelled => statuses.push(RunStatus::Cancelled),
            StatusFilter::Missed => with_missed = true,
        }
    }
    if args.failed {
        statuses.extend([
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Killed,
            RunStatus::Interrupted,
        ]);
    }
    // `--status missed` alone: an empty status list means "any" to the
    // query, so ask for every line and keep only the missed ones.
    let only_missed = statuses.is_empty() && with_missed;
    if statuses.is_empty() && !with_missed {
        statuses.extend(FINAL);
        with_missed = true;
    }
    let query = Query {
        job: args.job.clone(),
        statuses,
        since,
        limit: if only_missed { None } else { Some(args.limit) },
        runs_only: !only_missed,
        with_missed,
    };
    let reader = super::cluster::history_reader(global, &dir)?;
    let records = reader.query(&query).map_err(|e| {
        Failure::runtime(format!(
            "cannot read the history log in {}: {e}",
            dir.display()
        ))
    })?;
    let records: Vec<Record> = records
        .into_iter()
        .filter(|r| !only_missed || r.event == Event::Missed)
        .take(args.limit)
        .collect();
    if reader.malformed() > 0 {
        eprintln!(
            "rea: note: skipped {} unreadable line(s) in the history log",
            reader.malformed()
        );
    }
    if args.json {
        for r in &records {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return failure::ok();
    }
    if records.is_empty() {
        eprintln!("rea: no matching runs in {}", dir.display());
        return failure::ok();
    }
    let mut table = Table::new([
        "TIME", "JOB", "RUN", "STATUS", "TRIGGER", "ATTEMPT", "DURATION", "EXIT", "NOTE",
    ]);
    for r in &records {
        let when = r.started.unwrap_or(r.ts);
        let status = match (r.event, r.status) {
            (Event::Missed, _) => format!("missed ×{}", r.count.unwrap_or(0)),
            (_, Some(s)) => s.as_str().to_string(),
            _ => String::new(),
        };
        let exit_text = match (r.exit_code, r.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => format!("sig {s}"),
            _ => String::new(),
        };
        table.row([
            when.to_rfc3339_opts(SecondsFormat::Secs, true),
            r.job.clone().unwrap_or_default(),
            r.run.clone().unwrap_or_default(),
            status,
            r.trigger
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            r.attempt.map(|a| a.to_string()).unwrap_or_default(),
            r.duration_ms
                .map(|ms| rea_core::duration::format(std::time::Duration::from_millis(ms)))
                .unwrap_or_default(),
            exit_text,
            r.reason
                .clone()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        ]);
    }
    print!("{}", table.render());
    failure::ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_durations_instants_and_dates() {
        let now = DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            parse_since("2h", now).unwrap().to_rfc3339(),
            "2026-11-29T10:00:00+00:00"
        );
        assert_eq!(
            parse_since("2026-11-01T08:00:00+01:00", now)
                .unwrap()
                .to_rfc3339(),
            "2026-11-01T07:00:00+00:00"
        );
        assert_eq!(
            parse_since("2026-11-28", now).unwrap().to_rfc3339(),
            "2026-11-28T00:00:00+00:00"
        );
        assert!(parse_since("yesterday", now)
            .unwrap_err()
            .contains("neither a duration"));
    }
}
