//! When a job fires: cron expressions (Vixie cron / cronie semantics, optional
//! leading seconds field), macros, `@every <duration>`, evaluated in a job's
//! timezone with cronie's DST policy. Pure: time is always passed in.
//!
//! The work is split in three so each part can be checked on its own:
//!
//! 1. Parsing and validation are done here, field by field, so every error can
//!    name the field, the allowed range and the exact byte span. The result is
//!    one bit set per field, with Vixie's rules already applied (`7` is Sunday,
//!    a day-of-month or day-of-week field that *starts with* `*` makes a day
//!    match both fields, otherwise either).
//! 2. The next matching wall-clock time is found on the bit sets directly
//!    (`Fields::next_local`): a day that matches, then the first allowed
//!    hour, minute and second on it. The bit sets are the whole compiled
//!    schedule (56 bytes), so a file with tens of thousands of distinct
//!    expressions costs a few megabytes, not a calendar object each.
//!    (`croner`, the matcher used before, is the reference of a test.)
//! 3. The mapping of wall-clock matches to UTC instants (gaps and folds) is
//!    written once, below, in [`Schedule::next_after`].
//!
//! What does not live here: jobs, jitter decisions, the clock.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// A parsed, validated schedule. Equality is by meaning (two spellings of the
/// same schedule are equal), used by reload to tell a changed job from an
/// unchanged one. A pointer: jobs with the same expression share one (the
/// job-file reader parses each distinct expression once).
#[derive(Debug, Clone)]
pub struct Schedule(std::sync::Arc<Compiled>);

#[derive(Debug)]
struct Compiled {
    source: Box<str>,
    kind: Kind,
    /// What cron accepts but probably does not mean what it says (a step
    /// larger than its field): the schedule works, `rea check` warns.
    warnings: Vec<ScheduleError>,
}

#[derive(Debug, Clone)]
enum Kind {
    Cron(Fields),
    /// `@every`: whole seconds, at least one.
    Every(u64),
    Reboot,
}

/// The meaning of a cron expression: one bit per allowed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fields {
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days: u64,
    /// Bits 1..=12.
    months: u64,
    /// Bits 0..=6, Sunday = 0 (a written `7` is folded into 0).
    weekdays: u64,
    /// Vixie: a day must match both day fields when either starts with `*`.
    days_and: bool,
    /// cronie: neither the minute nor the hour field starts with `*`.
    fixed: bool,
    /// Some day of some month can match at all (`30 2` and `31 4` cannot).
    satisfiable: bool,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        if std::sync::Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        match (&self.0.kind, &other.0.kind) {
            (Kind::Cron(a), Kind::Cron(b)) => a == b,
            (Kind::Every(a), Kind::Every(b)) => a == b,
            (Kind::Reboot, Kind::Reboot) => true,
            _ => false,
        }
    }
}

/// Why an expression was refused. `span` is the byte range inside the
/// expression of the offending field or token, so the config module can
/// point at the exact column.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleError {
    pub message: String,
    pub hint: Option<String>,
    pub span: Option<Range<usize>>,
}

/// The message alone: callers show `hint` on its own line and use `span`
/// for the column.
impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScheduleError {}

/// Findings that accompany an accepted expression; the same shape as an
/// error (message, hint, span), reported as a warning.
pub type ScheduleWarning = ScheduleError;

fn error(message: String, hint: Option<String>, span: Range<usize>) -> ScheduleError {
    ScheduleError {
        message,
        hint,
        span: Some(span),
    }
}

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Field {
    fn label(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    fn allowed(self) -> String {
        let (lo, hi) = self.bounds();
        match self {
            Field::Month => format!("allowed: {lo}-{hi} or JAN-DEC"),
            Field::DayOfWeek => format!("allowed: {lo}-{hi} or SUN-SAT; 0 and 7 are Sunday"),
            _ => format!("allowed: {lo}-{hi}"),
        }
    }

    /// Names and the number each stands for.
    fn names(self) -> &'static [&'static str] {
        match self {
            Field::Month => &MONTH_NAMES,
            Field::DayOfWeek => &DAY_NAMES,
            _ => &[],
        }
    }

    fn name_value(self, index: usize) -> u32 {
        match self {
            Field::Month => index as u32 + 1,
            _ => index as u32,
        }
    }
}

impl Schedule {
    /// Parses a cron expression (5 fields, or 6 with leading seconds), a macro
    /// (`@daily`, ...), `@every <duration>` or `@reboot`.
    pub fn parse(expr: &str) -> Result<Schedule, ScheduleError> {
        let trimmed = expr.trim();
        let lead = expr.len() - expr.trim_start().len();
        if trimmed.is_empty() {
            return Err(ScheduleError {
                message: "the schedule is empty".to_string(),
                hint: Some(
                    "write a cron expression such as \"30 2 * * *\" or a macro such as \"@daily\""
                        .to_string(),
                ),
                span: Some(0..expr.len()),
            });
        }
        let mut warnings = Vec::new();
        let kind = if trimmed.starts_with('@') {
            parse_macro(trimmed, lead)?
        } else {
            Kind::Cron(parse_cron(expr, &mut warnings)?)
        };
        Ok(Schedule(std::sync::Arc::new(Compiled {
            source: expr.into(),
            kind,
            warnings,
        })))
    }

    /// What cron accepts in this expression but the reader probably did not
    /// mean: a step larger than its field's range (`*/61`, `1-7/9`), which
    /// cron takes as "only the first value". Empty for most expressions.
    pub fn warnings(&self) -> &[ScheduleWarning] {
        &self.0.warnings
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.0.source
    }

    /// `@reboot`: fires once when the daemon starts, never from the clock.
    pub fn is_reboot(&self) -> bool {
        matches!(self.0.kind, Kind::Reboot)
    }

    /// cronie's notion of a fixed-time job: neither the minute nor the hour
    /// field starts with `*` (`@daily`, `@weekly`, ... are fixed; `@hourly`
    /// and `@every` are not). Fixed-time jobs fire once across DST changes.
    pub fn is_fixed_time(&self) -> bool {
        match &self.0.kind {
            Kind::Cron(c) => c.fixed,
            Kind::Every(_) | Kind::Reboot => false,
        }
    }

    /// The spacing of an `@every` schedule.
    pub fn every(&self) -> Option<Duration> {
        match self.0.kind {
            Kind::Every(secs) => Some(Duration::from_secs(secs)),
            _ => None,
        }
    }

    /// The first fire instant strictly after `after`, in `tz`. None when the
    /// schedule never fires again (or is `@reboot`).
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        match &self.0.kind {
            Kind::Reboot => None,
            Kind::Every(period) => next_every(*period, after),
            Kind::Cron(c) => c.next_after(after, tz),
        }
    }

    /// The shortest time between two of the first `fires` fire instants
    /// after `after` (None: fewer than two). What a random start delay must
    /// stay under, or a delayed run starts after the next one is due.
    pub fn shortest_gap(&self, after: DateTime<Utc>, tz: Tz, fires: usize) -> Option<Duration> {
        if let Some(every) = self.every() {
            return Some(every);
        }
        let times: Vec<DateTime<Utc>> = self.iter_after(after, tz).take(fires).collect();
        times
            .windows(2)
            .filter_map(|w| (w[1] - w[0]).to_std().ok())
            .min()
    }

    /// The fire instants strictly after `after`, in order.
    pub fn iter_after(
        &self,
        after: DateTime<Utc>,
        tz: Tz,
    ) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after, tz), move |prev| {
            self.next_after(*prev, tz)
        })
    }
}

fn next_every(period: u64, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Multiples of the period since the Unix epoch, so a restart never shifts
    // the grid. Fire instants are whole seconds: `after`'s fraction is moot.
    let period = i64::try_from(period).ok()?;
    let k = after.timestamp().div_euclid(period).checked_add(1)?;
    DateTime::from_timestamp(k.checked_mul(period)?, 0)
}

fn parse_macro(trimmed: &str, lead: usize) -> Result<Kind, ScheduleError> {
    let word_len = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
    let word = &trimmed[..word_len];
    let rest = trimmed[word_len..].trim();
    let word_span = lead..lead + word_len;
    let rest_start = lead + trimmed.len() - trimmed[word_len..].trim_start().len();
    let rest_span = rest_start..lead + trimmed.len();

    if word.eq_ignore_ascii_case("@every") {
        if rest.is_empty() {
            return Err(error(
                "@every needs a duration".to_string(),
                Some("write e.g. \"@every 90s\" or \"@every 1h30m\"".to_string()),
                word_span,
            ));
        }
        let d =
            crate::duration::parse(rest).map_err(|e| error(e.message, None, rest_span.clone()))?;
        if d.subsec_nanos() != 0 || d.as_secs() == 0 {
            return Err(error(
                format!(
                    "@every {rest}: the interval must be a whole number of seconds, at least 1s"
                ),
                Some("write e.g. \"@every 1s\" or \"@every 90s\"".to_string()),
                rest_span,
            ));
        }
        return Ok(Kind::Every(d.as_secs()));
    }
    let known = MACROS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(word));
    let is_reboot = word.eq_ignore_ascii_case("@reboot");
    if known.is_none() && !is_reboot {
        let mut all: Vec<&str> = MACROS.iter().map(|(n, _)| *n).collect();
        all.extend(["@reboot", "@every"]);
        let hint = crate::suggest::did_you_mean(word, all.iter().copied())
            .or_else(|| Some(format!("known macros: {}", all.join(" "))));
        return Err(error(format!("unknown macro {word:?}"), hint, word_span));
    }
    if !rest.is_empty() {
        return Err(error(
            format!("{word} takes no arguments, found {rest:?}"),
            Some("a macro replaces the whole expression".to_string()),
            rest_span,
        ));
    }
    match known {
        Some((_, expansion)) => Ok(Kind::Cron(parse_cron(expansion, &mut Vec::new())?)),
        None => Ok(Kind::Reboot),
    }
}

/// Splits on whitespace, keeping each field's byte range in `expr`.
fn split_fields(expr: &str) -> Vec<(&str, Range<usize>)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, ch) in expr.char_indices() {
        match (ch.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((&expr[s..i], s..i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((&expr[s..], s..expr.len()));
    }
    out
}

fn parse_cron(expr: &str, warnings: &mut Vec<ScheduleWarning>) -> Result<Fields, ScheduleError> {
    let parts = split_fields(expr);
    let layout: &[Field] = match parts.len() {
        5 => &[Field::Minute, Field::Hour, Field::DayOfMonth, Field::Month, Field::DayOfWeek],
        6 => &[Field::Second, Field::Minute, Field::Hour, Field::DayOfMonth, Field::Month, Field::DayOfWeek],
        7 => {
            return Err(error(
                "7 fields: Vixie cron has no year field".to_string(),
                Some("remove the last field; write 5 fields (minute hour day-of-month month day-of-week), or 6 with a leading seconds field".to_string()),
                parts[6].1.clone(),
            ))
        }
        n => {
            return Err(error(
                format!("expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, found {n}"),
                Some("e.g. \"30 2 * * *\" is 02:30 every day".to_string()),
                0..expr.len(),
            ))
        }
    };
    let mut bits = [0u64; 6];
    let offset = 6 - layout.len();
    if offset == 1 {
        bits[0] = 1; // second 0
    }
    for (i, (field, (text, span))) in layout.iter().zip(&parts).enumerate() {
        bits[i + offset] = parse_field(text, span.start, *field, warnings)?;
    }
    // Vixie's bit 7 of the day-of-week set is Sunday, like bit 0.
    let mut weekdays = bits[5];
    if weekdays & (1 << 7) != 0 {
        weekdays = (weekdays & !(1 << 7)) | 1;
    }
    let text_of = |f: Field| parts[layout.iter().position(|x| *x == f).unwrap_or(0)].0;
    let days_and =
        text_of(Field::DayOfMonth).starts_with('*') || text_of(Field::DayOfWeek).starts_with('*');
    let fixed = !text_of(Field::Minute).starts_with('*') && !text_of(Field::Hour).starts_with('*');
    let mut fields = Fields {
        seconds: bits[0],
        minutes: bits[1],
        hours: bits[2],
        days: bits[3],
        months: bits[4],
        weekdays,
        days_and,
        fixed,
        satisfiable: true,
    };
    fields.satisfiable = satisfiable(&fields);
    if !fields.satisfiable {
        // Cron takes it and never runs it; say so where it is written.
        let at = layout
            .iter()
            .position(|f| *f == Field::DayOfMonth)
            .unwrap_or(0);
        warnings.push(error(
            "this schedule never fires: none of its days exists in its months".to_string(),
            Some(
                "February has at most 29 days; April, June, September and November 30".to_string(),
            ),
            parts[at].1.clone(),
        ));
    }
    Ok(fields)
}

/// With OR semantics every month has every weekday, so only AND can make a
/// schedule impossible: then some allowed day must exist in some allowed
/// month (February has 29 days: leap years exist, and each date falls on
/// every weekday within 28 years of the Gregorian cycle).
fn satisfiable(f: &Fields) -> bool {
    if !f.days_and {
        return true;
    }
    const LENGTHS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    (1..=12u32).any(|m| {
        f.months & (1 << m) != 0 && (1..=LENGTHS[m as usize - 1]).any(|d| f.days & (1 << d) != 0)
    })
}

fn parse_field(
    text: &str,
    base: usize,
    field: Field,
    warnings: &mut Vec<ScheduleWarning>,
) -> Result<u64, ScheduleError> {
    let mut bits = 0u64;
    let mut pos = 0;
    for item in text.split(',') {
        let start = base + pos;
        pos += item.len() + 1;
        if item.is_empty() {
            return Err(error(
                format!("empty list item in the {} field {text:?}", field.label()),
                Some("remove the extra comma".to_string()),
                base..base + text.len(),
            ));
        }
        bits |= parse_item(item, start, field, warnings)?;
    }
    Ok(bits)
}

fn parse_item(
    item: &str,
    start: usize,
    field: Field,
    warnings: &mut Vec<ScheduleWarning>,
) -> Result<u64, ScheduleError> {
    let span = start..start + item.len();
    let (lo, hi) = field.bounds();
    let (range_text, step_text) = match item.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (item, None),
    };
    let (first, last, is_range) = if range_text == "*" {
        (lo, hi, true)
    } else if let Some((a, b)) = range_text.split_once('-') {
        let first = value(a, start, field)?;
        let last = value(b, start + a.len() + 1, field)?;
        if first > last {
            let hint = if field == Field::DayOfWeek && last == 0 {
                format!("Sunday is also 7: write {a}-7")
            } else {
                format!("write {first}-{hi},{lo}-{last}")
            };
            return Err(error(
                format!("backwards range {range_text:?} in the {} field: cron ranges do not wrap around", field.label()),
                Some(hint),
                start..start + range_text.len(),
            ));
        }
        (first, last, true)
    } else {
        let v = value(range_text, start, field)?;
        (v, v, false)
    };
    let step = match step_text {
        None => 1,
        Some(s) => {
            let step_start = start + range_text.len() + 1;
            let step_span = step_start..step_start + s.len();
            if !is_range {
                return Err(error(
                    format!("step without a range: {item:?} in the {} field", field.label()),
                    Some(format!("Vixie cron needs a range before a step: write {first}-{hi}/{s} (every {s} from {first}) or */{s}")),
                    span,
                ));
            }
            let span_len = hi - lo + 1;
            let step = if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                s.parse::<u32>().ok()
            };
            match step {
                Some(n) if (1..=span_len).contains(&n) => n,
                // Vixie cron and cronie take any step from 1 up: one larger
                // than the field leaves the range's first value only. Kept
                // (a crontab that cron runs must convert), with a warning.
                Some(n) if n > span_len => {
                    let only = if field == Field::DayOfWeek && first == 7 {
                        0
                    } else {
                        first
                    };
                    warnings.push(error(
                        format!(
                            "step {n} in {item:?} is larger than the {} field ({lo}-{hi}): only {} {only} matches, as in cron",
                            field.label(),
                            field.label()
                        ),
                        Some(format!("write {first} if that is what you mean")),
                        step_span,
                    ));
                    n
                }
                _ => {
                    return Err(error(
                        format!(
                        "invalid step {s:?} in the {} field: a step is a whole number, at least 1",
                        field.label()
                    ),
                        None,
                        step_span,
                    ))
                }
            }
        }
    };
    let mut bits = 0u64;
    let mut v = first;
    while v <= last {
        bits |= 1 << v;
        // A step may be anything up to u32::MAX (see above).
        let Some(next) = v.checked_add(step) else {
            break;
        };
        v = next;
    }
    Ok(bits)
}

/// One number or name inside an item; `start` is its byte offset.
fn value(token: &str, start: usize, field: Field) -> Result<u32, ScheduleError> {
    let span = start..start + token.len();
    let label = field.label();
    let (lo, hi) = field.bounds();
    if token.is_empty() {
        return Err(error(
            format!("missing a number in the {label} field"),
            Some(field.allowed()),
            span,
        ));
    }
    if token.bytes().all(|b| b.is_ascii_digit()) {
        return match token.parse::<u32>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(error(
                format!(
                    "{label} value {token} is out of range ({})",
                    field.allowed()
                ),
                None,
                span,
            )),
        };
    }
    if token.bytes().all(|b| b.is_ascii_alphabetic()) {
        let upper = token.to_ascii_uppercase();
        let names = field.names();
        if let Some(i) = names.iter().position(|n| *n == upper) {
            return Ok(field.name_value(i));
        }
        if let Some(e) = extension(token, label, span.clone()) {
            return Err(e);
        }
        if names.is_empty() {
            return Err(error(
                format!("the {label} field takes numbers, not names like {token:?}"),
                Some(field.allowed()),
                span,
            ));
        }
        let hint = match names
            .iter()
            .find(|n| upper.len() > 3 && upper.starts_with(*n))
        {
            Some(n) => format!("names are three letters: write {n}"),
            None => match crate::suggest::closest(&upper, names.iter().copied(), 1).first() {
                Some(n) => format!("did you mean {n}? names are {}", names.join(" ")),
                None => format!("names are {}", names.join(" ")),
            },
        };
        return Err(error(
            format!("unknown {label} name {token:?}"),
            Some(hint),
            span,
        ));
    }
    if let Some(e) = extension(token, label, span.clone()) {
        return Err(e);
    }
    Err(error(
        format!("unexpected {token:?} in the {label} field"),
        Some(format!(
            "{}; use numbers, ranges a-b, lists a,b and steps */n or a-b/n",
            field.allowed()
        )),
        span,
    ))
}

/// Quartz / croner extensions that Vixie cron refuses, named so the user
/// knows why a common-looking expression fails.
fn extension(token: &str, label: &str, span: Range<usize>) -> Option<ScheduleError> {
    let upper = token.to_ascii_uppercase();
    let (what, hint) = if upper.contains('#') {
        (
            "\"#\" (nth weekday of the month)",
            "run on days 1-7 (or 8-14, ...) and test the weekday in the command",
        )
    } else if upper.contains('?') {
        ("\"?\" (no specific value)", "write * instead")
    } else if upper.ends_with('W') && upper.len() > 1 {
        (
            "\"W\" (nearest weekday)",
            "list the days explicitly, e.g. 1-5",
        )
    } else if upper == "L"
        || upper == "LW"
        || (upper.ends_with('L') && upper[..upper.len() - 1].bytes().all(|b| b.is_ascii_digit()))
    {
        (
            "\"L\" (last day)",
            "run on days 28-31 and test for the last day in the command",
        )
    } else {
        return None;
    };
    Some(error(
        format!(
            "{what} in the {label} field is a Quartz extension that Vixie cron does not support"
        ),
        Some(hint.to_string()),
        span,
    ))
}

/// How a wall-clock time exists in a zone.
enum Local {
    Single(DateTime<Utc>),
    /// A fold: the time happens twice, earlier instant first.
    Twice(DateTime<Utc>, DateTime<Utc>),
    /// A gap: the time never happens.
    Never,
}

fn resolve(tz: Tz, local: &NaiveDateTime) -> Local {
    match tz.from_local_datetime(local) {
        LocalResult::Single(t) => Local::Single(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.with_timezone(&Utc), b.with_timezone(&Utc));
            Local::Twice(a.min(b), a.max(b))
        }
        LocalResult::None => Local::Never,
    }
}

fn offset_secs(tz: Tz, t: DateTime<Utc>) -> i64 {
    i64::from(
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

fn wall(tz: Tz, t: DateTime<Utc>) -> NaiveDateTime {
    t.naive_utc() + chrono::TimeDelta::seconds(offset_secs(tz, t))
}

/// The smallest whole-second instant in `(lo, hi]` for which `pred` holds,
/// given that it holds at `hi`, fails at `lo` and flips once in between.
fn first_where(mut lo: i64, mut hi: i64, pred: impl Fn(i64) -> bool) -> i64 {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

fn at(ts: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(ts, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The first instant after the gap that swallows the wall-clock time `local`:
/// the transition itself. UTC offsets stay within ±16 h and no zone has two
/// transitions within a day of each other, so wall time grows monotonically
/// over the searched window.
fn end_of_gap(tz: Tz, local: &NaiveDateTime) -> DateTime<Utc> {
    let guess = local.and_utc().timestamp();
    let window = 16 * 3600;
    at(first_where(guess - window, guess + window, |ts| {
        wall(tz, at(ts)) >= *local
    }))
}

/// The smallest value at or above `from` whose bit is set.
fn next_bit(bits: u64, from: u32) -> Option<u32> {
    let rest = bits.checked_shr(from)?;
    (rest != 0).then(|| from + rest.trailing_zeros())
}

/// Searches stop here, as the calendar matcher used before did: a schedule
/// that is satisfiable at all fires within 28 years of any date.
const YEAR_HORIZON: i32 = 5000;

impl Fields {
    /// The next wall-clock time matching the expression, after `from` (or at
    /// it when `inclusive`); `from`'s fraction of a second is ignored. None
    /// past the year 5000.
    fn next_local(&self, from: &NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        let mut t = from.with_nanosecond(0)?;
        if !inclusive {
            t = t.checked_add_signed(chrono::TimeDelta::seconds(1))?;
        }
        let mut date = t.date();
        let mut time = (t.hour(), t.minute(), t.second());
        loop {
            if date.year() > YEAR_HORIZON {
                return None;
            }
            if self.months & (1 << date.month()) == 0 {
                // The first day of the next month.
                let (y, m) = if date.month() == 12 {
                    (date.year() + 1, 1)
                } else {
                    (date.year(), date.month() + 1)
                };
                date = NaiveDate::from_ymd_opt(y, m, 1)?;
                time = (0, 0, 0);
                continue;
            }
            if self.day_matches(date) {
                if let Some((h, m, s)) = self.first_time(time) {
                    return date.and_hms_opt(h, m, s);
                }
            }
            date = date.succ_opt()?;
            time = (0, 0, 0);
        }
    }

    /// Vixie's day rule on one date.
    fn day_matches(&self, date: NaiveDate) -> bool {
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().num_days_from_sunday()) != 0;
        if self.days_and {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first allowed time of day at or after `(h, m, s)`.
    fn first_time(&self, (h, m, s): (u32, u32, u32)) -> Option<(u32, u32, u32)> {
        let mut hour = next_bit(self.hours, h)?;
        loop {
            let from_minute = if hour == h { m } else { 0 };
            let mut minute = next_bit(self.minutes, from_minute);
            while let Some(mi) = minute {
                let from_second = if hour == h && mi == m { s } else { 0 };
                if let Some(se) = next_bit(self.seconds, from_second) {
                    return Some((hour, mi, se));
                }
                minute = next_bit(self.minutes, mi + 1);
            }
            hour = next_bit(self.hours, hour + 1)?;
        }
    }

    /// Walks matching wall-clock times from `from` and returns the first fire
    /// strictly after `after`, applying the DST policy to each:
    /// - a time that happens once fires then;
    /// - a time that happens twice fires on the first pass; a non-fixed job
    ///   also fires on the second pass;
    /// - a time that never happens fires, for a fixed-time job only, at the
    ///   end of the gap.
    ///
    /// The first fire found is the earliest when the walk starts outside a
    /// fold or on its first pass (see `next_after` for the one other case).
    fn walk(
        &self,
        from: NaiveDateTime,
        inclusive: bool,
        after: DateTime<Utc>,
        tz: Tz,
    ) -> Option<DateTime<Utc>> {
        let mut m = self.next_local(&from, inclusive)?;
        loop {
            let fire = match resolve(tz, &m) {
                Local::Single(t) => Some(t),
                Local::Twice(first, _) if first > after => Some(first),
                Local::Twice(_, second) if !self.fixed => Some(second),
                Local::Twice(..) => None,
                Local::Never if self.fixed => Some(end_of_gap(tz, &m)),
                Local::Never => None,
            };
            match fire {
                Some(t) if t > after => return Some(t),
                _ => m = self.next_local(&m, false)?,
            }
        }
    }

    fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        if !self.satisfiable {
            return None;
        }
        // Fires are whole seconds: strictly after `after` is strictly after
        // its whole second.
        let after = after.with_nanosecond(0)?;
        let here = wall(tz, after);
        let found = self.walk(here, false, after, tz);
        // Only one case has a fire that the forward walk from `here` cannot
        // see first: `after` on the first pass of a fold, where a non-fixed
        // job's second pass over the earlier part of the fold (wall times
        // before `here`) comes after the rest of the first pass but before
        // anything past the fold.
        if self.fixed {
            return found;
        }
        let Local::Twice(first, second) = resolve(tz, &here) else {
            return found;
        };
        if first != after {
            return found;
        }
        let before = offset_secs(tz, first);
        let ts = first_where(first.timestamp(), second.timestamp(), |ts| {
            offset_secs(tz, at(ts)) != before
        });
        let transition = at(ts);
        if found.is_some_and(|t| t < transition) {
            return found;
        }
        let fold_start = wall(tz, transition);
        let replay = self.walk(fold_start, true, after, tz);
        match (found, replay) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use chrono_tz::Tz::{
        America__New_York as NEW_YORK, America__Santiago as SANTIAGO,
        Australia__Lord_Howe as LORD_HOWE, Australia__Sydney as SYDNEY, Europe__Berlin as BERLIN,
        Pacific__Chatham as CHATHAM, UTC,
    };
    use croner::parser::{CronParser, Seconds};

    fn instant(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .with_timezone(&Utc)
    }

    /// The next `n` fires after `after`, as RFC 3339 in the job's zone.
    fn fires(expr: &str, tz: Tz, after: &str, n: usize) -> Vec<String> {
        let s = Schedule::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        s.iter_after(instant(after), tz)
            .take(n)
            .map(|t| t.with_timezone(&tz).to_rfc3339())
            .collect()
    }

    fn check(expr: &str, tz: Tz, after: &str, expected: &[&str]) {
        assert_eq!(
            fires(expr, tz, after, expected.len()),
            expected,
            "{expr} in {tz} after {after}"
        );
    }

    #[test]
    fn calendar_traps() {
        check(
            "0 0 29 2 *",
            UTC,
            "2025-01-01T00:00:00Z",
            &[
                "2028-02-29T00:00:00+00:00",
                "2032-02-29T00:00:00+00:00",
                "2036-02-29T00:00:00+00:00",
            ],
        );
        check(
            "0 0 29 2 *",
            UTC,
            "2096-03-01T00:00:00Z",
            &["2104-02-29T00:00:00+00:00"],
        );
        check(
            "0 0 31 * *",
            UTC,
            "2025-01-01T00:00:00Z",
            &[
                "2025-01-31T00:00:00+00:00",
                "2025-03-31T00:00:00+00:00",
                "2025-05-31T00:00:00+00:00",
                "2025-07-31T00:00:00+00:00",
                "2025-08-31T00:00:00+00:00",
                "2025-10-31T00:00:00+00:00",
            ],
        );
        // OR: the 1st and every Monday (2025-09-01 is a Monday).
        check(
            "0 0 1 * MON",
            UTC,
            "2025-09-20T00:00:00Z",
            &[
                "2025-09-22T00:00:00+00:00",
                "2025-09-29T00:00:00+00:00",
                "2025-10-01T00:00:00+00:00",
                "2025-10-06T00:00:00+00:00",
            ],
        );
        // AND because the day-of-month field starts with `*`: odd days that are Mondays.
        check(
            "0 0 */2 * 1",
            UTC,
            "2025-09-01T00:00:00Z",
            &[
                "2025-09-15T00:00:00+00:00",
                "2025-09-29T00:00:00+00:00",
                "2025-10-13T00:00:00+00:00",
                "2025-10-27T00:00:00+00:00",
            ],
        );
        // AND because the day-of-week field starts with `*`: the 1st, only on even weekdays.
        check(
            "0 0 1 * */2",
            UTC,
            "2025-01-01T00:00:00Z",
            &[
                "2025-02-01T00:00:00+00:00",
                "2025-03-01T00:00:00+00:00",
                "2025-04-01T00:00:00+00:00",
                "2025-05-01T00:00:00+00:00",
            ],
        );
        check(
            "0 0 * * 1",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2025-09-08T00:00:00+00:00"],
        );
        // 0 and 7 are Sunday, also in ranges.
        for expr in [
            "0 12 * * 7",
            "0 12 * * 0",
            "0 12 * * sun",
            "0 12 * * SUN",
            "0 12 * * 7-7",
        ] {
            check(
                expr,
                UTC,
                "2025-09-01T00:00:00Z",
                &["2025-09-07T12:00:00+00:00", "2025-09-14T12:00:00+00:00"],
            );
        }
        check(
            "0 12 * * 5-7",
            UTC,
            "2025-09-01T00:00:00Z",
            &[
                "2025-09-05T12:00:00+00:00",
                "2025-09-06T12:00:00+00:00",
                "2025-09-07T12:00:00+00:00",
                "2025-09-12T12:00:00+00:00",
            ],
        );
        check(
            "0 9 * * Mon-Fri",
            UTC,
            "2025-09-05T10:00:00Z",
            &["2025-09-08T09:00:00+00:00"],
        );
        check(
            "0 0 1 jan,Jul *",
            UTC,
            "2025-02-01T00:00:00Z",
            &["2025-07-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"],
        );
        check(
            "0 0 1 feb-apr/2 *",
            UTC,
            "2025-01-01T00:00:00Z",
            &[
                "2025-02-01T00:00:00+00:00",
                "2025-04-01T00:00:00+00:00",
                "2026-02-01T00:00:00+00:00",
            ],
        );
        check(
            "@yearly",
            UTC,
            "2025-06-01T00:00:00Z",
            &["2026-01-01T00:00:00+00:00", "2027-01-01T00:00:00+00:00"],
        );
        check(
            "@annually",
            UTC,
            "2025-06-01T00:00:00Z",
            &["2026-01-01T00:00:00+00:00"],
        );
        check(
            "@monthly",
            UTC,
            "2025-06-01T00:00:00Z",
            &["2025-07-01T00:00:00+00:00"],
        );
        check(
            "@weekly",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2025-09-07T00:00:00+00:00"],
        );
        check(
            "@daily",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2025-09-02T00:00:00+00:00"],
        );
        check(
            "@midnight",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2025-09-02T00:00:00+00:00"],
        );
        check(
            "@hourly",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2025-09-01T01:00:00+00:00"],
        );
        check(
            "59 23 31 12 *",
            UTC,
            "2025-06-01T00:00:00Z",
            &["2025-12-31T23:59:00+00:00", "2026-12-31T23:59:00+00:00"],
        );
        check(
            "59 23 31 12 *",
            UTC,
            "2025-12-31T23:59:00Z",
            &["2026-12-31T23:59:00+00:00"],
        );
        // Steps over ranges and lists of mixed items.
        check(
            "10-30/10,45 8 * * *",
            UTC,
            "2025-09-01T00:00:00Z",
            &[
                "2025-09-01T08:10:00+00:00",
                "2025-09-01T08:20:00+00:00",
                "2025-09-01T08:30:00+00:00",
                "2025-09-01T08:45:00+00:00",
                "2025-09-02T08:10:00+00:00",
            ],
        );
        check(
            "*/25 * * * *",
            UTC,
            "2025-09-01T00:00:00Z",
            &[
                "2025-09-01T00:25:00+00:00",
                "2025-09-01T00:50:00+00:00",
                "2025-09-01T01:00:00+00:00",
            ],
        );
    }

    #[test]
    fn seconds_field_and_exclusive_after() {
        check(
            "*/20 * * * * *",
            UTC,
            "2025-09-01T00:00:00Z",
            &[
                "2025-09-01T00:00:20+00:00",
                "2025-09-01T00:00:40+00:00",
                "2025-09-01T00:01:00+00:00",
            ],
        );
        check(
            "30 0 12 * * *",
            UTC,
            "2025-09-01T12:00:30Z",
            &["2025-09-02T12:00:30+00:00"],
        );
        check(
            "30 0 12 * * *",
            UTC,
            "2025-09-01T12:00:29.999Z",
            &["2025-09-01T12:00:30+00:00"],
        );
        // Exactly on a fire: that fire is not "after".
        check(
            "0 3 * * *",
            UTC,
            "2025-09-01T03:00:00Z",
            &["2025-09-02T03:00:00+00:00"],
        );
        // A fraction past a fire is past it too.
        check(
            "0 3 * * *",
            UTC,
            "2025-09-01T03:00:00.5Z",
            &["2025-09-02T03:00:00+00:00"],
        );
        check(
            "0 3 * * *",
            UTC,
            "2025-09-01T02:59:59.5Z",
            &["2025-09-01T03:00:00+00:00"],
        );
    }

    #[test]
    fn every_is_aligned_to_the_epoch() {
        let s = Schedule::parse("@every 90s").unwrap();
        assert_eq!(s.every(), Some(Duration::from_secs(90)));
        assert!(!s.is_fixed_time());
        // 1735689600 (2025-01-01T00:00:00Z) is a multiple of 90.
        let next: Vec<String> = s
            .iter_after(instant("2025-01-01T00:00:00Z"), NEW_YORK)
            .take(3)
            .map(|t| t.to_rfc3339())
            .collect();
        assert_eq!(
            next,
            [
                "2025-01-01T00:01:30+00:00",
                "2025-01-01T00:03:00+00:00",
                "2025-01-01T00:04:30+00:00"
            ]
        );
        assert_eq!(
            s.next_after(instant("2025-01-01T00:00:45.7Z"), UTC),
            Some(instant("2025-01-01T00:01:30Z"))
        );
        assert_eq!(
            s.next_after(instant("1969-12-31T23:59:00Z"), UTC),
            Some(instant("1970-01-01T00:00:00Z"))
        );
        let s = Schedule::parse("@every 1h30m").unwrap();
        assert_eq!(
            s.next_after(instant("2025-01-01T00:10:00Z"), SYDNEY),
            Some(instant("2025-01-01T01:30:00Z"))
        );
    }

    #[test]
    fn reboot_never_fires_from_the_clock() {
        let s = Schedule::parse("@reboot").unwrap();
        assert!(s.is_reboot());
        assert_eq!(s.next_after(instant("2025-01-01T00:00:00Z"), UTC), None);
        assert!(!Schedule::parse("@daily").unwrap().is_reboot());
    }

    #[test]
    // A regression guard against a search that ran for 30 s: the bound is
    // 1,000 times what the search takes, not a speed figure.
    #[allow(clippy::disallowed_methods)]
    fn impossible_dates_answer_none_at_once() {
        for expr in [
            "0 0 30 2 *",
            "0 0 31 4,6,9,11 *",
            "0 0 30,31 2 *",
            "0 0 31 2 */2",
            "0 0 31 4 *",
        ] {
            let s = Schedule::parse(expr).unwrap();
            let started = std::time::Instant::now();
            assert_eq!(
                s.next_after(instant("2025-01-01T00:00:00Z"), BERLIN),
                None,
                "{expr}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_millis(5),
                "{expr} took {:?}",
                started.elapsed()
            );
        }
        // OR semantics: the Mondays of February make it possible.
        check(
            "0 0 30 2 1",
            UTC,
            "2025-09-01T00:00:00Z",
            &["2026-02-02T00:00:00+00:00", "2026-02-09T00:00:00+00:00"],
        );
        check(
            "0 0 29 2 1",
            UTC,
            "2027-03-01T00:00:00Z",
            &[
                "2028-02-07T00:00:00+00:00",
                "2028-02-14T00:00:00+00:00",
                "2028-02-21T00:00:00+00:00",
                "2028-02-28T00:00:00+00:00",
                "2028-02-29T00:00:00+00:00",
            ],
        );
        // AND (`*/7` is 0,7: Sunday) with a Feb 29 that is a Sunday.
        check(
            "0 0 29 2 */7",
            UTC,
            "2025-01-01T00:00:00Z",
            &["2032-02-29T00:00:00+00:00", "2060-02-29T00:00:00+00:00"],
        );
        check(
            "0 0 29 2 *",
            UTC,
            "2025-01-01T00:00:00Z",
            &["2028-02-29T00:00:00+00:00"],
        );
    }

    #[test]
    fn fixed_time_is_decided_by_minute_and_hour() {
        for (expr, fixed) in [
            ("30 2,14 * * *", true),
            ("0-59/10 2 * * *", true),
            ("*/15 * * * *", false),
            ("30 * * * *", false),
            ("0 */2 * * *", false),
            ("* 2 * * *", false),
            ("@hourly", false),
            ("@daily", true),
            ("@weekly", true),
            ("@monthly", true),
            ("@yearly", true),
            ("* 30 2 * * *", true),
            ("*/5 30 2 * * *", true),
            ("0 30 */2 * * *", false),
            ("@reboot", false),
        ] {
            assert_eq!(
                Schedule::parse(expr).unwrap().is_fixed_time(),
                fixed,
                "{expr}"
            );
        }
    }

    #[test]
    fn equality_is_by_meaning() {
        let p = |s: &str| Schedule::parse(s).unwrap();
        assert_eq!(p("0 0 * * 7"), p("0 0 * * sun"));
        assert_eq!(p("@daily"), p("0 0 * * *"));
        assert_eq!(p("0 0 * * *"), p("0 0 0 * * *"));
        assert_eq!(p("*/30 * * * *"), p("0,30 * * * *").clone());
        assert_ne!(p("0 0 * * *"), p("0 1 * * *"));
        assert_ne!(p("@every 90s"), p("@every 91s"));
        assert_eq!(p("@every 90s"), p("@every 1m30s"));
        assert_eq!(p("0 0 * * *").source(), "0 0 * * *");
    }

    fn list(bits: u64, lo: u32, hi: u32) -> String {
        (lo..=hi)
            .filter(|v| bits & (1 << v) != 0)
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `croner` (the matcher rea used before its own, now a reference in
    /// tests) fed the canonical form of `f`: explicit lists, so its notion
    /// of "`*` means ignore this field" never applies, and a `+` where Vixie
    /// ANDs the day fields.
    fn to_croner(f: &Fields) -> croner::Cron {
        let pattern = format!(
            "{} {} {} {} {} {}{}",
            list(f.seconds, 0, 59),
            list(f.minutes, 0, 59),
            list(f.hours, 0, 23),
            list(f.days, 1, 31),
            list(f.months, 1, 12),
            if f.days_and { "+" } else { "" },
            list(f.weekdays, 0, 6),
        );
        CronParser::builder()
            .seconds(Seconds::Required)
            .build()
            .parse(&pattern)
            .unwrap_or_else(|e| panic!("croner refused {pattern:?}: {e}"))
    }

    /// The bit-set matcher against croner's on the canonical form, from
    /// random instants (croner's search is the reference for plain calendar
    /// matching; DST is ours alone and tested below).
    #[test]
    fn next_local_agrees_with_croner() {
        let exprs = [
            "0 0 29 2 *",
            "0 0 31 * *",
            "0 0 1 * MON",
            "0 0 */2 * 1",
            "*/7 * * * *",
            "30 15 10 1-10/3 JAN,JUL *",
            "0 12 * * sun",
            "0 0 * * 1-7/2",
            "0 0 13 * 5",
            "5,35 */3 * * *",
            "0 9-17 * * MON-FRI",
            "59 23 31 12 *",
            "0 0 30 2 *",
            "0 0 */28 2 1",
            "15 30 0 * * *",
            "*/20 5-59/10 8,20 1,15 * *",
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        let base = NaiveDate::from_ymd_opt(2024, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap();
        for expr in exprs {
            let Kind::Cron(f) = &Schedule::parse(expr).unwrap().0.kind else {
                unreachable!()
            };
            let theirs = f.satisfiable.then(|| to_croner(f));
            for i in 0..400 {
                let from = base + TimeDelta::seconds(rng.i64(0..10 * 366 * 86_400));
                let inclusive = i % 2 == 0;
                let want = theirs
                    .as_ref()
                    .and_then(|c| c.find_next_occurrence(&from, inclusive).ok());
                let got = if f.satisfiable {
                    f.next_local(&from, inclusive)
                } else {
                    None
                };
                assert_eq!(got, want, "{expr} from {from} inclusive {inclusive}");
            }
        }
    }

    /// croner's field syntax is checked against ours (it is the reference of
    /// `next_local_agrees_with_croner`): dow 7, names, ranges and steps
    /// agree; the day rule differs (croner ANDs only for a field that is
    /// exactly `*`) and croner refuses `*` inside a list, which is why it is
    /// fed canonical lists and a `+`.
    #[test]
    fn croner_field_syntax_agrees_and_day_rule_differs() {
        let plain = |expr: &str| {
            CronParser::builder()
                .seconds(Seconds::Optional)
                .build()
                .parse(expr)
                .unwrap_or_else(|e| panic!("croner refused {expr:?}: {e}"))
        };
        let agree = [
            "0 0 * * 7",
            "0 0 * * 5-7",
            "0 0 * jan-mar mon-fri",
            "*/7 * * * *",
            "0 0 1-10/3 * *",
            "0 12 * * sun",
            "0 0 * * 1-7/2",
            "0 0 13 * 5",
        ];
        let differ = ["0 0 */2 * 1", "0 0 1 * */2"];
        // Vixie takes `*` as a list item; croner does not.
        assert!(CronParser::new().parse("0 0 *,15 * 1").is_err());
        assert!(Schedule::parse("0 0 *,15 * 1").is_ok());
        let start = NaiveDate::from_ymd_opt(2025, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap();
        let hours: Vec<NaiveDateTime> =
            (0..24 * 120).map(|h| start + TimeDelta::hours(h)).collect();
        let mismatches = |expr: &str| {
            let ours = Schedule::parse(expr).unwrap();
            let Kind::Cron(c) = &ours.0.kind else {
                unreachable!()
            };
            let c = to_croner(c);
            let theirs = plain(expr);
            hours
                .iter()
                .filter(|t| c.is_time_matching(*t).unwrap() != theirs.is_time_matching(*t).unwrap())
                .count()
        };
        for expr in agree {
            assert_eq!(mismatches(expr), 0, "{expr}");
        }
        for expr in differ {
            assert!(
                mismatches(expr) > 0,
                "{expr}: croner now follows Vixie's day rule; the `+` workaround may go"
            );
        }
    }

    // --- DST ---------------------------------------------------------------

    #[test]
    fn new_york() {
        // Spring forward 2026-03-08 02:00 EST -> 03:00 EDT.
        check(
            "30 2 * * *",
            NEW_YORK,
            "2026-03-07T12:00:00Z",
            &["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        );
        check(
            "0 2,3 * * *",
            NEW_YORK,
            "2026-03-08T06:59:59Z",
            &["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
        );
        check(
            "0-59/10 2 * * *",
            NEW_YORK,
            "2026-03-08T00:00:00Z",
            &["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
        );
        check(
            "0 3 * * *",
            NEW_YORK,
            "2026-03-08T07:00:00Z",
            &["2026-03-09T03:00:00-04:00"],
        );
        check(
            "0 2 * * *",
            NEW_YORK,
            "2026-03-08T07:00:00Z",
            &["2026-03-09T02:00:00-04:00"],
        );
        check(
            "*/30 * * * *",
            NEW_YORK,
            "2026-03-08T01:00:00-05:00",
            &[
                "2026-03-08T01:30:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-08T03:30:00-04:00",
            ],
        );
        check(
            "30 2 * * *",
            NEW_YORK,
            "2026-03-08T03:00:00-04:00",
            &["2026-03-09T02:30:00-04:00"],
        );
        // Fall back 2026-11-01 02:00 EDT -> 01:00 EST.
        check(
            "30 1 * * *",
            NEW_YORK,
            "2026-10-31T12:00:00Z",
            &["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        );
        check(
            "30 * * * *",
            NEW_YORK,
            "2026-11-01T00:45:00-04:00",
            &[
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:30:00-05:00",
            ],
        );
        // Queries from inside the fold, on either pass.
        check(
            "*/20 * * * *",
            NEW_YORK,
            "2026-11-01T01:50:00-05:00",
            &["2026-11-01T02:00:00-05:00"],
        );
        check(
            "*/20 * * * *",
            NEW_YORK,
            "2026-11-01T01:50:00-04:00",
            &["2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00"],
        );
        check(
            "*/20 * * * *",
            NEW_YORK,
            "2026-11-01T01:30:00-04:00",
            &["2026-11-01T01:40:00-04:00", "2026-11-01T01:00:00-05:00"],
        );
        check(
            "0-59/20 1 * * *",
            NEW_YORK,
            "2026-11-01T01:10:00-04:00",
            &[
                "2026-11-01T01:20:00-04:00",
                "2026-11-01T01:40:00-04:00",
                "2026-11-02T01:00:00-05:00",
            ],
        );
        check(
            "0-59/20 1 * * *",
            NEW_YORK,
            "2026-11-01T01:10:00-05:00",
            &["2026-11-02T01:00:00-05:00"],
        );
        check(
            "* 1 * * *",
            NEW_YORK,
            "2026-11-01T01:59:00-04:00",
            &["2026-11-01T01:00:00-05:00", "2026-11-01T01:01:00-05:00"],
        );
        check(
            "15 1 * * *",
            NEW_YORK,
            "2026-11-01T01:50:00-04:00",
            &["2026-11-02T01:15:00-05:00"],
        );
        check(
            "15 * * * *",
            NEW_YORK,
            "2026-11-01T01:50:00-04:00",
            &["2026-11-01T01:15:00-05:00", "2026-11-01T02:15:00-05:00"],
        );
    }

    #[test]
    fn berlin() {
        // Spring forward 2026-03-29 02:00 CET -> 03:00 CEST; fall back 2026-10-25 03:00 CEST -> 02:00 CET.
        check(
            "30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
        );
        check(
            "*/30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-30T02:00:00+02:00"],
        );
        check(
            "30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            &["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        );
        check(
            "*/30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            &[
                "2026-10-25T02:00:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-26T02:00:00+01:00",
            ],
        );
        check(
            "0 30 2 * * *",
            BERLIN,
            "2026-03-29T00:59:59Z",
            &["2026-03-29T03:00:00+02:00"],
        );
    }

    #[test]
    fn lord_howe_half_hour_shift() {
        // 2026-10-04 02:00 +10:30 -> 02:30 +11:00; 2026-04-05 02:00 +11:00 -> 01:30 +10:30.
        check(
            "15 2 * * *",
            LORD_HOWE,
            "2026-10-03T12:00:00Z",
            &["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
        );
        check(
            "*/15 2 * * *",
            LORD_HOWE,
            "2026-10-03T12:00:00Z",
            &["2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"],
        );
        check(
            "45 1 * * *",
            LORD_HOWE,
            "2026-04-04T12:00:00Z",
            &["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
        );
        check(
            "*/15 1 * * *",
            LORD_HOWE,
            "2026-04-04T12:00:00Z",
            &[
                "2026-04-05T01:00:00+11:00",
                "2026-04-05T01:15:00+11:00",
                "2026-04-05T01:30:00+11:00",
                "2026-04-05T01:45:00+11:00",
                "2026-04-05T01:30:00+10:30",
                "2026-04-05T01:45:00+10:30",
                "2026-04-06T01:00:00+10:30",
            ],
        );
    }

    #[test]
    fn chatham_quarter_hour_offset() {
        // 2026-09-27 02:45 +12:45 -> 03:45 +13:45; 2026-04-05 03:45 +13:45 -> 02:45 +12:45.
        check(
            "0 3 * * *",
            CHATHAM,
            "2026-09-26T00:00:00Z",
            &["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"],
        );
        check(
            "0 * * * *",
            CHATHAM,
            "2026-09-27T01:30:00+12:45",
            &["2026-09-27T02:00:00+12:45", "2026-09-27T04:00:00+13:45"],
        );
        check(
            "0 3 * * *",
            CHATHAM,
            "2026-04-04T00:00:00Z",
            &["2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"],
        );
        check(
            "0 * * * *",
            CHATHAM,
            "2026-04-05T01:30:00+13:45",
            &[
                "2026-04-05T02:00:00+13:45",
                "2026-04-05T03:00:00+13:45",
                "2026-04-05T03:00:00+12:45",
                "2026-04-05T04:00:00+12:45",
            ],
        );
    }

    #[test]
    fn santiago_midnight_transitions() {
        // 2026-09-06 00:00 -04 -> 01:00 -03 (Sunday midnight does not exist).
        check(
            "@daily",
            SANTIAGO,
            "2026-09-05T12:00:00Z",
            &["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"],
        );
        check(
            "0 0 * * 0",
            SANTIAGO,
            "2026-09-01T12:00:00Z",
            &["2026-09-06T01:00:00-03:00", "2026-09-13T00:00:00-03:00"],
        );
        check(
            "0 0 * * 6",
            SANTIAGO,
            "2026-09-01T12:00:00Z",
            &["2026-09-05T00:00:00-04:00", "2026-09-12T00:00:00-03:00"],
        );
        check(
            "0 * * * *",
            SANTIAGO,
            "2026-09-05T22:30:00-04:00",
            &["2026-09-05T23:00:00-04:00", "2026-09-06T01:00:00-03:00"],
        );
        // 2026-04-04 24:00 -03 -> 23:00 -04 (Saturday 23:00-24:00 happens twice).
        check(
            "30 23 * * *",
            SANTIAGO,
            "2026-04-04T12:00:00Z",
            &["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"],
        );
        check(
            "30 * * * *",
            SANTIAGO,
            "2026-04-04T22:45:00-03:00",
            &[
                "2026-04-04T23:30:00-03:00",
                "2026-04-04T23:30:00-04:00",
                "2026-04-05T00:30:00-04:00",
            ],
        );
        check(
            "@daily",
            SANTIAGO,
            "2026-04-04T12:00:00Z",
            &["2026-04-05T00:00:00-04:00"],
        );
    }

    #[test]
    fn sydney() {
        // 2026-10-04 02:00 +10 -> 03:00 +11; 2026-04-05 03:00 +11 -> 02:00 +10.
        check(
            "30 2 * * *",
            SYDNEY,
            "2026-10-03T00:00:00Z",
            &["2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
        );
        check(
            "30 * * * *",
            SYDNEY,
            "2026-10-04T01:00:00+10:00",
            &["2026-10-04T01:30:00+10:00", "2026-10-04T03:30:00+11:00"],
        );
        check(
            "30 2 * * *",
            SYDNEY,
            "2026-04-04T00:00:00Z",
            &["2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
        );
        check(
            "30 * * * *",
            SYDNEY,
            "2026-04-05T02:00:00+11:00",
            &["2026-04-05T02:30:00+11:00", "2026-04-05T02:30:00+10:00"],
        );
    }

    // --- errors --------------------------------------------------------------

    fn refused(expr: &str) -> ScheduleError {
        match Schedule::parse(expr) {
            Ok(_) => panic!("{expr:?} should be refused"),
            Err(e) => e,
        }
    }

    /// Expression, message, hint, span.
    type ErrorCase = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<Range<usize>>,
    );

    #[test]
    fn error_messages() {
        // (expression, message, hint, span)
        let cases: &[ErrorCase] = &[
            ("", "the schedule is empty", Some("write a cron expression such as \"30 2 * * *\" or a macro such as \"@daily\""), Some(0..0)),
            ("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading seconds field, found 4", Some("e.g. \"30 2 * * *\" is 02:30 every day"), Some(0..7)),
            ("0 0 0 1 1 * 2026", "7 fields: Vixie cron has no year field", Some("remove the last field; write 5 fields (minute hour day-of-month month day-of-week), or 6 with a leading seconds field"), Some(12..16)),
            ("60 * * * *", "minute value 60 is out of range (allowed: 0-59)", None, Some(0..2)),
            ("0 24 * * *", "hour value 24 is out of range (allowed: 0-23)", None, Some(2..4)),
            ("0 0 0 * *", "day-of-month value 0 is out of range (allowed: 1-31)", None, Some(4..5)),
            ("0 0 * 13 *", "month value 13 is out of range (allowed: 1-12 or JAN-DEC)", None, Some(6..8)),
            ("0 0 * * 8", "day-of-week value 8 is out of range (allowed: 0-7 or SUN-SAT; 0 and 7 are Sunday)", None, Some(8..9)),
            ("60 0 0 * * *", "second value 60 is out of range (allowed: 0-59)", None, Some(0..2)),
            ("0 0 * * 1-9", "day-of-week value 9 is out of range (allowed: 0-7 or SUN-SAT; 0 and 7 are Sunday)", None, Some(10..11)),
            ("5/15 * * * *", "step without a range: \"5/15\" in the minute field", Some("Vixie cron needs a range before a step: write 5-59/15 (every 15 from 5) or */15"), Some(0..4)),
            ("0 5/2 * * *", "step without a range: \"5/2\" in the hour field", Some("Vixie cron needs a range before a step: write 5-23/2 (every 2 from 5) or */2"), Some(2..5)),
            ("*/0 * * * *", "invalid step \"0\" in the minute field: a step is a whole number, at least 1", None, Some(2..3)),
            ("*/x * * * *", "invalid step \"x\" in the minute field: a step is a whole number, at least 1", None, Some(2..3)),
            ("*/99999999999 * * * *", "invalid step \"99999999999\" in the minute field: a step is a whole number, at least 1", None, Some(2..13)),
            ("0 0 L * *", "\"L\" (last day) in the day-of-month field is a Quartz extension that Vixie cron does not support", Some("run on days 28-31 and test for the last day in the command"), Some(4..5)),
            ("0 0 15W * *", "\"W\" (nearest weekday) in the day-of-month field is a Quartz extension that Vixie cron does not support", Some("list the days explicitly, e.g. 1-5"), Some(4..7)),
            ("0 0 * * 1#2", "\"#\" (nth weekday of the month) in the day-of-week field is a Quartz extension that Vixie cron does not support", Some("run on days 1-7 (or 8-14, ...) and test the weekday in the command"), Some(8..11)),
            ("0 0 ? * 1", "\"?\" (no specific value) in the day-of-month field is a Quartz extension that Vixie cron does not support", Some("write * instead"), Some(4..5)),
            ("0 0 * * 5L", "\"L\" (last day) in the day-of-week field is a Quartz extension that Vixie cron does not support", Some("run on days 28-31 and test for the last day in the command"), Some(8..10)),
            ("0 0 * * monday", "unknown day-of-week name \"monday\"", Some("names are three letters: write MON"), Some(8..14)),
            ("0 0 * * mom", "unknown day-of-week name \"mom\"", Some("did you mean MON? names are SUN MON TUE WED THU FRI SAT"), Some(8..11)),
            ("0 0 * foo *", "unknown month name \"foo\"", Some("names are JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC"), Some(6..9)),
            ("0 mon * * *", "the hour field takes numbers, not names like \"mon\"", Some("allowed: 0-23"), Some(2..5)),
            ("30-10 * * * *", "backwards range \"30-10\" in the minute field: cron ranges do not wrap around", Some("write 30-59,0-10"), Some(0..5)),
            ("0 0 * * sat-sun", "backwards range \"sat-sun\" in the day-of-week field: cron ranges do not wrap around", Some("Sunday is also 7: write sat-7"), Some(8..15)),
            ("1,,2 * * * *", "empty list item in the minute field \"1,,2\"", Some("remove the extra comma"), Some(0..4)),
            ("0 0 * * 1-", "missing a number in the day-of-week field", Some("allowed: 0-7 or SUN-SAT; 0 and 7 are Sunday"), Some(10..10)),
            ("0 0 * * +1", "unexpected \"+1\" in the day-of-week field", Some("allowed: 0-7 or SUN-SAT; 0 and 7 are Sunday; use numbers, ranges a-b, lists a,b and steps */n or a-b/n"), Some(8..10)),
            ("*5 * * * *", "unexpected \"*5\" in the minute field", Some("allowed: 0-59; use numbers, ranges a-b, lists a,b and steps */n or a-b/n"), Some(0..2)),
            ("99999999999 * * * *", "minute value 99999999999 is out of range (allowed: 0-59)", None, Some(0..11)),
            ("@dialy", "unknown macro \"@dialy\"", Some("did you mean \"@daily\"?"), Some(0..6)),
            ("@daily 5", "@daily takes no arguments, found \"5\"", Some("a macro replaces the whole expression"), Some(7..8)),
            ("@every", "@every needs a duration", Some("write e.g. \"@every 90s\" or \"@every 1h30m\""), Some(0..6)),
            ("@every 1500ms", "@every 1500ms: the interval must be a whole number of seconds, at least 1s", Some("write e.g. \"@every 1s\" or \"@every 90s\""), Some(7..13)),
            ("@every 0s", "@every 0s: the interval must be a whole number of seconds, at least 1s", Some("write e.g. \"@every 1s\" or \"@every 90s\""), Some(7..9)),
        ];
        for (expr, message, hint, span) in cases {
            let e = refused(expr);
            assert_eq!(e.message, *message, "message for {expr:?}");
            assert_eq!(e.hint.as_deref(), *hint, "hint for {expr:?}");
            assert_eq!(e.span, *span, "span for {expr:?}");
        }
        let e = refused("@every 10");
        assert!(
            e.message.contains("invalid duration \"10\""),
            "{}",
            e.message
        );
        assert_eq!(e.span, Some(7..9));
        // Spans are byte ranges in the expression as written, leading blanks included.
        assert_eq!(refused("  0 0 * * 9").span, Some(10..11));
        assert_eq!(refused("0\t0  *  * 9").span, Some(10..11));
        assert_eq!(
            refused("% 0 * * *").to_string(),
            "unexpected \"%\" in the minute field"
        );
    }

    #[test]
    fn a_schedule_that_never_fires_is_accepted_with_a_warning_at_its_day_field() {
        for (expr, span) in [
            ("0 0 31 2 *", 4..6),
            ("0 0 30 2 *", 4..6),
            ("0 0 0 31 4,6 *", 6..8),
            ("0 0 31 4,6,9,11 *", 4..6),
        ] {
            let s = Schedule::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            assert_eq!(
                s.next_after(instant("2026-01-01T00:00:00Z"), BERLIN),
                None,
                "{expr}"
            );
            let w = s.warnings();
            assert_eq!(w.len(), 1, "{expr}: {w:?}");
            assert!(w[0].message.contains("never fires"), "{expr}: {w:?}");
            assert_eq!(w[0].span, Some(span), "{expr}");
        }
        // Rare is not never: Feb 29 fires in leap years, `31 2 MON` on
        // Mondays (either day field matches), `30 2 *` with a step too.
        for expr in ["0 0 29 2 *", "0 0 31 2 1", "0 0 31 * *"] {
            let s = Schedule::parse(expr).unwrap();
            assert!(s.warnings().is_empty(), "{expr}: {:?}", s.warnings());
            assert!(s
                .next_after(instant("2026-01-01T00:00:00Z"), BERLIN)
                .is_some());
        }
    }

    #[test]
    fn the_shortest_gap_is_the_period_a_start_delay_must_stay_under() {
        let from = instant("2026-01-05T00:00:00Z");
        let gap = |e: &str| Schedule::parse(e).unwrap().shortest_gap(from, Tz::UTC, 16);
        assert_eq!(gap("*/5 * * * *"), Some(Duration::from_secs(300)));
        assert_eq!(gap("0,10 * * * *"), Some(Duration::from_secs(600)));
        assert_eq!(gap("@every 90s"), Some(Duration::from_secs(90)));
        assert_eq!(gap("@daily"), Some(Duration::from_secs(86_400)));
        assert_eq!(gap("0 0 31 2 *"), None);
        assert_eq!(gap("@reboot"), None);
    }

    #[test]
    fn a_step_larger_than_its_field_keeps_only_the_first_value_with_a_warning() {
        // (expression, what it means, the warning, its span)
        let cases = [
            ("*/61 * * * *", "0 * * * *", "step 61 in \"*/61\" is larger than the minute field (0-59): only minute 0 matches, as in cron", 2..4),
            ("0 */25 * * *", "0 0 * * *", "step 25 in \"*/25\" is larger than the hour field (0-23): only hour 0 matches, as in cron", 4..6),
            ("0 0 * * 1-7/9", "0 0 * * 1", "step 9 in \"1-7/9\" is larger than the day-of-week field (0-7): only day-of-week 1 matches, as in cron", 12..13),
            ("0 0 * * 7-7/9", "0 0 * * 0", "step 9 in \"7-7/9\" is larger than the day-of-week field (0-7): only day-of-week 0 matches, as in cron", 12..13),
        ];
        for (expr, same_as, message, span) in cases {
            let s = Schedule::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            // Same fires (not equal schedules: `*/25` starts with `*`, which
            // changes cronie's DST policy, not the matching).
            assert_eq!(
                fires(expr, Tz::UTC, "2026-03-01T00:00:00Z", 4),
                fires(same_as, Tz::UTC, "2026-03-01T00:00:00Z", 4),
                "{expr}"
            );
            let w = s.warnings();
            assert_eq!(w.len(), 1, "{expr}: {w:?}");
            assert_eq!(w[0].message, message, "{expr}");
            assert_eq!(w[0].span, Some(span), "{expr}");
        }
        // In range: no warning (`*/60` matches minute 0 only too, but it
        // is in range and cron users write it for "hourly").
        for expr in ["*/60 * * * *", "*/15 * * * *", "@daily", "0 0 1-31/31 * *"] {
            let s = Schedule::parse(expr).unwrap();
            assert!(s.warnings().is_empty(), "{expr}: {:?}", s.warnings());
        }
        // A huge step never overflows.
        assert_eq!(
            fires("0 0 * * 0-7/4294967295", Tz::UTC, "2026-03-01T00:00:00Z", 3),
            fires("0 0 * * 0", Tz::UTC, "2026-03-01T00:00:00Z", 3)
        );
    }

    #[test]
    fn accepts_what_vixie_accepts() {
        for expr in [
            "* * * * *",
            "0 0 * * 0-7",
            "0 0 * * 1-7/2",
            "*/60 * * * *",
            "0 0 1-31/31 * *",
            "05 08 * * *",
            "0 0 * JAN-DEC SUN-SAT",
            "0 0 * * Fri-7",
            "*/2,5 * * * *",
            "  30 2 * * *  ",
            "@DAILY",
            "@every 1s",
            "@every 2d",
            "0 0 0 * * *",
        ] {
            assert!(
                Schedule::parse(expr).is_ok(),
                "{expr:?}: {:?}",
                Schedule::parse(expr).err()
            );
        }
    }
}

/// An independent reference: expressions are generated as structured fields,
/// rendered to text for `Schedule::parse`, and matched directly from the
/// structure here; fires are found by stepping minute by minute over real time
/// and applying the DST policy from its definition.
#[cfg(test)]
mod reference {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    #[derive(Debug, Clone)]
    enum Item {
        Star(Option<u32>),
        Value(u32),
        Range(u32, u32, Option<u32>),
    }

    #[derive(Debug, Clone)]
    struct Gen {
        /// minute, hour, day-of-month, month, day-of-week
        fields: [Vec<Item>; 5],
        /// Write month and weekday values as names where possible.
        names: bool,
    }

    const BOUNDS: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];

    fn contains(items: &[Item], i: usize, v: u32) -> bool {
        let (lo, hi) = BOUNDS[i];
        items.iter().any(|item| match *item {
            Item::Star(step) => (v - lo) % step.unwrap_or(1) == 0 && v >= lo && v <= hi,
            Item::Value(x) => x == v,
            Item::Range(a, b, step) => v >= a && v <= b && (v - a) % step.unwrap_or(1) == 0,
        })
    }

    impl Gen {
        fn render_value(&self, i: usize, v: u32) -> String {
            match (self.names, i) {
                (true, 3) => MONTH_NAMES[v as usize - 1].to_ascii_lowercase(),
                (true, 4) if v < 7 => DAY_NAMES[v as usize].to_string(),
                _ => v.to_string(),
            }
        }

        fn render_field(&self, i: usize) -> String {
            let step = |s: Option<u32>| s.map(|s| format!("/{s}")).unwrap_or_default();
            self.fields[i]
                .iter()
                .map(|item| match *item {
                    Item::Star(s) => format!("*{}", step(s)),
                    Item::Value(v) => self.render_value(i, v),
                    Item::Range(a, b, s) => format!(
                        "{}-{}{}",
                        self.render_value(i, a),
                        self.render_value(i, b),
                        step(s)
                    ),
                })
                .collect::<Vec<_>>()
                .join(",")
        }

        fn render(&self) -> String {
            (0..5)
                .map(|i| self.render_field(i))
                .collect::<Vec<_>>()
                .join(" ")
        }

        fn starts_with_star(&self, i: usize) -> bool {
            matches!(self.fields[i].first(), Some(Item::Star(_)))
        }

        fn fixed(&self) -> bool {
            !self.starts_with_star(0) && !self.starts_with_star(1)
        }

        fn matches(&self, t: &NaiveDateTime) -> bool {
            let f = &self.fields;
            let weekday = t.weekday().num_days_from_sunday();
            let dom = contains(&f[2], 2, t.day());
            let dow = contains(&f[4], 4, weekday) || (weekday == 0 && contains(&f[4], 4, 7));
            let day = if self.starts_with_star(2) || self.starts_with_star(4) {
                dom && dow
            } else {
                dom || dow
            };
            t.second() == 0
                && contains(&f[0], 0, t.minute())
                && contains(&f[1], 1, t.hour())
                && contains(&f[3], 3, t.month())
                && day
        }
    }

    use chrono::{Datelike, TimeDelta};

    /// Fires in `(start, end]` by the policy's definition.
    fn brute(g: &Gen, tz: Tz, start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let minute = TimeDelta::minutes(1);
        let mut t = at(start.timestamp().div_euclid(60) * 60) + minute;
        let mut prev_offset = offset_secs(tz, t - minute);
        let mut out = Vec::new();
        while t <= end {
            let offset = offset_secs(tz, t);
            let local = t.naive_utc() + TimeDelta::seconds(offset);
            let mut fire = false;
            if g.matches(&local) {
                // A fixed-time job fires on the first pass over a wall time only.
                let first_pass = tz
                    .from_local_datetime(&local)
                    .earliest()
                    .map(|x| x.with_timezone(&Utc))
                    == Some(t);
                fire = !g.fixed() || first_pass;
            }
            if g.fixed() && offset > prev_offset {
                // The clock just jumped forward over [t + prev_offset, t + offset).
                let mut skipped = t.naive_utc() + TimeDelta::seconds(prev_offset);
                while skipped < local {
                    fire |= g.matches(&skipped);
                    skipped += minute;
                }
            }
            if fire {
                out.push(t);
            }
            prev_offset = offset;
            t += minute;
        }
        out
    }

    const ZONES: [Tz; 18] = [
        Tz::America__New_York,
        Tz::Europe__Berlin,
        Tz::Australia__Lord_Howe,
        Tz::Pacific__Chatham,
        Tz::Australia__Sydney,
        Tz::America__Santiago,
        Tz::Europe__London,
        Tz::America__Havana,
        Tz::Africa__Cairo,
        Tz::Pacific__Auckland,
        Tz::America__St_Johns,
        Tz::Asia__Gaza,
        Tz::Africa__Casablanca,
        Tz::Europe__Dublin,
        Tz::America__Scoresbysund,
        Tz::Asia__Kolkata,
        Tz::America__Los_Angeles,
        Tz::UTC,
    ];

    /// Every offset change in 2025-2027, per zone of `ZONES`.
    fn transitions() -> &'static Vec<Vec<i64>> {
        static CACHE: OnceLock<Vec<Vec<i64>>> = OnceLock::new();
        CACHE.get_or_init(|| {
            let (from, to) = (
                instant_ts("2025-01-01T00:00:00Z"),
                instant_ts("2028-01-01T00:00:00Z"),
            );
            ZONES
                .iter()
                .map(|&tz| {
                    let mut out = Vec::new();
                    let mut t = from;
                    while t < to {
                        let before = offset_secs(tz, at(t));
                        if offset_secs(tz, at(t + 3600)) != before {
                            out.push(first_where(t, t + 3600, |x| {
                                offset_secs(tz, at(x)) != before
                            }));
                        }
                        t += 3600;
                    }
                    out
                })
                .collect()
        })
    }

    fn instant_ts(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.timestamp())
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// Compares every fire in a window and `next_after` from probes inside it.
    fn compare(
        g: &Gen,
        tz: Tz,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        extra_probes: &[DateTime<Utc>],
    ) -> Result<(), String> {
        let text = g.render();
        let s = Schedule::parse(&text).map_err(|e| format!("{text:?} refused: {e}"))?;
        if s.is_fixed_time() != g.fixed() {
            return Err(format!(
                "{text:?}: fixed-time {} but the reference says {}",
                s.is_fixed_time(),
                g.fixed()
            ));
        }
        let want = brute(g, tz, start, end);
        let got: Vec<_> = s
            .iter_after(start, tz)
            .take_while(|t| *t <= end)
            .take(want.len() + 1)
            .collect();
        let show = |v: &[DateTime<Utc>]| {
            v.iter()
                .map(|t| t.with_timezone(&tz).to_rfc3339())
                .collect::<Vec<_>>()
        };
        if got != want {
            return Err(format!(
                "{text:?} in {tz} after {start}:\n ours {:?}\n want {:?}",
                show(&got),
                show(&want)
            ));
        }
        let mut probes: Vec<DateTime<Utc>> = extra_probes.to_vec();
        for t in want.iter().take(40) {
            probes.extend([
                *t - TimeDelta::seconds(1),
                *t,
                *t + TimeDelta::seconds(1),
                *t + TimeDelta::minutes(30),
            ]);
        }
        for q in probes.into_iter().filter(|q| *q >= start && *q < end) {
            let expected = want.iter().find(|t| **t > q).copied();
            let actual = s.next_after(q, tz).filter(|t| *t <= end);
            if actual != expected {
                return Err(format!(
                    "{text:?} in {tz}: next after {} is {:?}, want {:?}",
                    q.with_timezone(&tz).to_rfc3339(),
                    actual.map(|t| t.with_timezone(&tz).to_rfc3339()),
                    expected.map(|t| t.with_timezone(&tz).to_rfc3339())
                ));
            }
        }
        Ok(())
    }

    fn item(lo: u32, hi: u32, values: BoxedStrategy<u32>) -> impl Strategy<Value = Item> {
        let span = hi - lo + 1;
        prop_oneof![
            1 => Just(Item::Star(None)),
            1 => (1..=span).prop_map(|s| Item::Star(Some(s))),
            3 => values.clone().prop_map(Item::Value),
            2 => (values.clone(), values, proptest::option::of(1..=span.min(12)))
                .prop_map(|(a, b, s)| Item::Range(a.min(b), a.max(b), s)),
        ]
    }

    fn field(
        lo: u32,
        hi: u32,
        values: BoxedStrategy<u32>,
        star_weight: u32,
    ) -> impl Strategy<Value = Vec<Item>> {
        prop_oneof![
            star_weight => Just(vec![Item::Star(None)]),
            4 => proptest::collection::vec(item(lo, hi, values), 1..=3),
        ]
    }

    fn gen() -> impl Strategy<Value = Gen> {
        // Hours and minutes lean towards the times that DST changes touch.
        let minutes = prop_oneof![(0..=59u32), Just(0), Just(30), Just(15), Just(45)].boxed();
        let hours = prop_oneof![(0..=4u32), (22..=23u32), (0..=23u32)].boxed();
        (
            field(0, 59, minutes, 1),
            field(0, 23, hours, 1),
            field(1, 31, (1..=31u32).boxed(), 4),
            field(1, 12, (1..=12u32).boxed(), 8),
            field(0, 7, (0..=7u32).boxed(), 3),
            any::<bool>(),
        )
            .prop_map(|(m, h, dom, mon, dow, names)| Gen {
                fields: [m, h, dom, mon, dow],
                names,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        /// Windows of two days around a random DST transition in 2025-2027.
        #[test]
        fn matches_the_reference_around_transitions(g in gen(), zone in 0..ZONES.len() - 3, which in any::<prop::sample::Index>(), shift in -20i64..20, probe in 0i64..(52 * 3600)) {
            let list = &transitions()[zone];
            prop_assume!(!list.is_empty());
            let transition = list[which.index(list.len())];
            let start = at(transition - 26 * 3600 + shift * 60);
            let end = start + TimeDelta::hours(52);
            let probes = [at(transition - 1), at(transition), at(transition + 1), at(transition + 1800), at(transition - 1800), start + TimeDelta::seconds(probe)];
            compare(&g, ZONES[zone], start, end, &probes).map_err(TestCaseError::fail)?;
        }

        /// Any zone, any time: instants strictly increase and each one is a
        /// wall time the expression matches (or the end of a gap that swallowed
        /// one, for fixed-time jobs).
        #[test]
        fn fires_match_their_wall_time(g in gen(), zone in 0..chrono_tz::TZ_VARIANTS.len(), start in instant_ts("2024-06-01T00:00:00Z")..instant_ts("2028-01-01T00:00:00Z")) {
            let tz = chrono_tz::TZ_VARIANTS[zone];
            let s = Schedule::parse(&g.render()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut prev = at(start);
            for t in s.iter_after(at(start), tz).take(12) {
                prop_assert!(t > prev, "{} not increasing", g.render());
                let local = wall(tz, t);
                let gap_end = g.fixed() && offset_secs(tz, t) > offset_secs(tz, t - TimeDelta::seconds(1));
                prop_assert!(g.matches(&local) || gap_end, "{} fired at {} ({tz})", g.render(), t.with_timezone(&tz).to_rfc3339());
                prop_assert_eq!(s.next_after(t - TimeDelta::seconds(1), tz), Some(t));
                prev = t;
            }
        }
    }

    /// Every transition of 2025-2027 in every listed zone, with the shapes of
    /// expression that DST changes break most often.
    #[test]
    fn every_transition_with_common_shapes() {
        let shapes = [
            "30 2 * * *",
            "0 0 * * *",
            "*/15 * * * *",
            "30 * * * *",
            "0 1 * * *",
            "15 3 * * *",
            "0-59/20 1,2 * * *",
            "45 23 * * *",
            "0 */2 * * *",
            "0 2 * * 0",
            "*/30 0 * * *",
        ];
        let parsed: Vec<Gen> = shapes
            .iter()
            .map(|text| {
                let fields: Vec<Vec<Item>> = text
                    .split(' ')
                    .enumerate()
                    .map(|(i, f)| {
                        f.split(',')
                            .map(|item| parse_item_for_reference(i, item))
                            .collect()
                    })
                    .collect();
                Gen {
                    fields: fields.try_into().unwrap_or_else(|_| panic!("{text}")),
                    names: false,
                }
            })
            .collect();
        for (g, text) in parsed.iter().zip(shapes) {
            assert_eq!(g.render(), text);
        }
        let mut checked = 0;
        for (zone, list) in ZONES.iter().zip(transitions()) {
            for &transition in list {
                for g in &parsed {
                    let start = at(transition - 30 * 3600);
                    let end = at(transition + 30 * 3600);
                    compare(
                        g,
                        *zone,
                        start,
                        end,
                        &[at(transition - 1), at(transition), at(transition + 1)],
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// Just enough parsing to turn the fixed shapes above into reference fields.
    fn parse_item_for_reference(i: usize, item: &str) -> Item {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s.parse().unwrap_or(1))),
            None => (item, None),
        };
        if range == "*" {
            return Item::Star(step);
        }
        match range.split_once('-') {
            Some((a, b)) => Item::Range(
                a.parse().unwrap_or(BOUNDS[i].0),
                b.parse().unwrap_or(BOUNDS[i].1),
                step,
            ),
            None => Item::Value(range.parse().unwrap_or(BOUNDS[i].0)),
        }
    }
}
