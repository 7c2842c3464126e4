//! The per-job daily roll-up of a JSON-lines log: how many final runs of a
//! job succeeded and how many did not, day by day, answered for one job
//! and a range of days without reading the job's records (the web
//! console's 90-day heatmap).
//!
//! Each log directory (the state directory's, each `tenants/NAME/`) keeps
//! a `days/` directory beside its `history.jsonl`:
//!
//! - `days/YYYY-MM-DD.open`: the UTC day being written, one line appended
//!   per counted record (`"job"\tslot:ok:bad:ms`), so a reader in another
//!   process (a user's query, the CLI) sees it at once;
//! - `days/YYYY-MM-DD`: a closed UTC day, one line per job sorted by the
//!   job's JSON-quoted name (`"job"\tslot:ok:bad:ms slot:ok:bad:ms …`), so
//!   a question about one job is a binary search of a few `pread`s.
//!
//! A slot is a quarter of an hour of the UTC day. The roll-up stores UTC
//! quarter hours and the question names the zone its days are in: every
//! zone in use is a whole number of quarter hours off UTC, so the day a
//! slot belongs to is exact in any zone, and a job whose `timezone`
//! changes has its past days re-cut in its new zone.
//!
//! When a record arrives for a later UTC day (and when the writer opens),
//! the writer closes the earlier `.open` files: each is folded into the
//! day's sorted file (written beside it and renamed over it, its first
//! line naming the `.open` it folded, which readers then skip) and
//! removed. It does so at once, on the writer's thread, once a UTC day:
//! the cost is reading that day's lines (at 1,000,000 records in 90 days,
//! some 11,000 lines, a few milliseconds), and a reader never sees a day
//! counted twice or half gone. Days older than [`KEEP_DAYS`] before
//! the newest are deleted then. So the roll-up holds at most a line per job
//! per day for [`KEEP_DAYS`] days on disk and nothing in memory but the
//! open day's descriptor; closing a day holds that day's jobs only.
//!
//! Rotation does not touch it: a day's counts outlive the records they
//! were made from (until [`KEEP_DAYS`]), so the heatmap of a busy job
//! whose records rotated out still shows its days. A log without `days/`
//! (a state directory from before the roll-up, or one deleted by hand)
//! has it rebuilt from the records still there when the writer opens it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, NaiveDate, Utc};
use rea_core::record::{Event, Record, RunStatus};
use serde::{Deserialize, Serialize};

use super::sorted::{bisect, line_at, split};

/// The roll-up's directory in a log's directory.
pub const DAYS_DIR: &str = "days";

/// UTC days kept: 90 days in any zone and a day either side.
pub const KEEP_DAYS: i64 = 92;

/// Slots in a UTC day: quarter hours.
const SLOTS: u32 = 96;

/// One day's final runs of one job, in the zone the question named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayCount {
    pub day: NaiveDate,
    /// Runs that ended `succeeded`.
    pub succeeded: u64,
    /// Runs that ended otherwise (`failed`, `timed_out`, `killed`,
    /// `interrupted`); `skipped` is no run and is not counted.
    pub failed: u64,
    /// The runs' durations added up (runs without one count 0).
    pub duration_ms: u64,
}

/// Whether a record counts in the roll-up, and as a success or not: a
/// final line of a run, `skipped` aside.
pub fn counted(record: &Record) -> Option<bool> {
    let status = record.status?;
    (record.event == Event::Run
        && RunStatus::FINAL.contains(&status)
        && status != RunStatus::Skipped)
        .then_some(status == RunStatus::Succeeded)
}

/// The counts of the records of `job` among `records`, day by day in
/// `zone` from `from` to `to` (inclusive), the days without runs left out:
/// what every backend answers ([`super::HistoryReader::days`]).
pub fn naive_days<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    job: &str,
    zone: chrono_tz::Tz,
    from: NaiveDate,
    to: NaiveDate,
) -> Vec<DayCount> {
    let mut days: BTreeMap<NaiveDate, DayCount> = BTreeMap::new();
    for r in records {
        if r.job.as_deref() != Some(job) {
            continue;
        }
        let Some(ok) = counted(r) else { continue };
        let day = r.ts.with_timezone(&zone).date_naive();
        if day < from || day > to {
            continue;
        }
        add(
            &mut days,
            day,
            ok as u64,
            !ok as u64,
            r.duration_ms.unwrap_or(0),
        );
    }
    days.into_values().collect()
}

fn add(days: &mut BTreeMap<NaiveDate, DayCount>, day: NaiveDate, ok: u64, bad: u64, ms: u64) {
    let d = days.entry(day).or_insert(DayCount {
        day,
        succeeded: 0,
        failed: 0,
        duration_ms: 0,
    });
    d.succeeded += ok;
    d.failed += bad;
    d.duration_ms += ms;
}

/// A quarter hour's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    ok: u64,
    bad: u64,
    ms: u64,
}

impl Counts {
    fn plus(&mut self, o: Counts) {
        self.ok += o.ok;
        self.bad += o.bad;
        self.ms += o.ms;
    }
}

/// One job's slots of one day.
type Slots = BTreeMap<u32, Counts>;

/// The key a job's lines start with: its name as a JSON string (no tab,
/// no newline), which is also the order of a closed day's lines.
fn key(job: &str) -> Vec<u8> {
    serde_json::to_vec(job).unwrap_or_default()
}

fn day_path(days: &Path, day: NaiveDate) -> PathBuf {
    days.join(day.format("%Y-%m-%d").to_string())
}

fn open_path(days: &Path, day: NaiveDate) -> PathBuf {
    days.join(format!("{}.open", day.format("%Y-%m-%d")))
}

/// Where a record goes: its UTC day and quarter hour.
fn slot_of(ts: DateTime<Utc>) -> (NaiveDate, u32) {
    let day = ts.date_naive();
    let secs = (ts - day.and_time(chrono::NaiveTime::MIN).and_utc()).num_seconds();
    (day, (secs / 900).clamp(0, SLOTS as i64 - 1) as u32)
}

/// Parses the slots after a line's key: `slot:ok:bad:ms` separated by
/// spaces. A part that does not parse (a torn write) is skipped.
fn parse_slots(text: &[u8], into: &mut Slots) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    for part in text.split(' ') {
        let mut it = part.trim_end().split(':').map(str::parse::<u64>);
        if let (Some(Ok(slot)), Some(Ok(ok)), Some(Ok(bad)), Some(Ok(ms)), None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        {
            if slot < SLOTS as u64 {
                into.entry(slot as u32)
                    .or_default()
                    .plus(Counts { ok, bad, ms });
            }
        }
    }
}

fn write_slots(out: &mut Vec<u8>, slots: &Slots) {
    for (i, (slot, c)) in slots.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        let _ = write!(out, "{slot}:{}:{}:{}", c.ok, c.bad, c.ms);
    }
}

/// The writer's side in one log directory.
pub(crate) struct Rollup {
    days: PathBuf,
    /// The UTC day whose `.open` file is held, and that file.
    open: Option<(NaiveDate, File)>,
}

impl Rollup {
    /// The roll-up of the log in `log_dir`, rebuilt from its records if it
    /// has none yet (see the module doc), and its days left open by an
    /// earlier daemon closed if a later day has begun.
    pub(crate) fn open(log_dir: &Path) -> io::Result<Rollup> {
        let days = log_dir.join(DAYS_DIR);
        if !days.is_dir() {
            rebuild(log_dir, &days)?;
        }
        close_days(&days, crate::clock::now().date_naive())?;
        Ok(Rollup { days, open: None })
    }

    /// Counts `record` if it is a run's final line.
    pub(crate) fn add(&mut self, record: &Record) -> io::Result<()> {
        let Some(ok) = counted(record) else {
            return Ok(());
        };
        let (day, slot) = slot_of(record.ts);
        if self.open.as_ref().is_none_or(|(d, _)| *d != day) {
            let later = self.open.as_ref().is_some_and(|(d, _)| *d < day);
            self.open = None;
            if later {
                close_days(&self.days, day)?;
            }
            let file = crate::files::open_owned(
                &open_path(&self.days, day),
                OpenOptions::new().create(true).append(true).mode(0o600),
            )?;
            self.open = Some((day, file));
        }
        let mut line = key(record.job.as_deref().unwrap_or_default());
        line.push(b'\t');
        let mut slots = Slots::new();
        slots.insert(
            slot,
            Counts {
                ok: ok as u64,
                bad: !ok as u64,
                ms: record.duration_ms.unwrap_or(0),
            },
        );
        write_slots(&mut line, &slots);
        line.push(b'\n');
        let written = match &mut self.open {
            Some((_, file)) => file.write_all(&line),
            None => Ok(()),
        };
        if written.is_err() {
            self.open = None;
        }
        written
    }
}

/// The UTC day a roll-up file is about, and whether it is closed.
fn file_day(name: &str) -> Option<(NaiveDate, &str)> {
    let (date, rest) = name.split_at_checked(10)?;
    let day = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    Some((day, rest))
}

/// Folds every `.open` file of a day before `before` into
/// its sorted file, and deletes what is older than [`KEEP_DAYS`] before
/// `before`.
fn close_days(days: &Path, before: NaiveDate) -> io::Result<()> {
    let oldest = before - Duration::days(KEEP_DAYS);
    let mut closing = Vec::new();
    for entry in fs::read_dir(days)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some((day, rest)) = name.to_str().and_then(file_day) else {
            continue;
        };
        if day < oldest {
            let _ = fs::remove_file(entry.path());
        } else if day < before && rest == ".open" {
            closing.push(day);
        }
    }
    closing.sort();
    closing.dedup();
    for day in closing {
        close_day(days, day)?;
    }
    Ok(())
}

/// Folds day `day`'s `.open` into its sorted file. The sorted file's
/// first line names the `.open` file (its inode) it has folded, and
/// readers skip an `.open` so named: between the rename of the new sorted
/// file and the removal of the `.open` (or after a crash there) nothing is
/// counted twice, and nothing is missing before.
fn close_day(days: &Path, day: NaiveDate) -> io::Result<()> {
    let open = open_path(days, day);
    let Some(file) = open_existing(&open)? else {
        return Ok(());
    };
    let meta = file.metadata()?;
    let ino = (meta.ino(), meta.len());
    let sorted = day_path(days, day);
    let mut jobs: BTreeMap<Vec<u8>, Slots> = BTreeMap::new();
    let folded = if sorted.exists() {
        read_all(&sorted, &mut jobs)?
    } else {
        None
    };
    if folded != Some(ino) {
        read_all(&open, &mut jobs)?;
        write_sorted(&sorted, &jobs, Some(ino))?;
    }
    fs::remove_file(&open)
}

/// Every line of a roll-up file, folded by job; and the `.open` file a
/// sorted one says it has folded.
fn read_all(path: &Path, into: &mut BTreeMap<Vec<u8>, Slots>) -> io::Result<Option<(u64, u64)>> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut crate::files::open_read(path)?, &mut bytes)?;
    let mut folded = None;
    for line in bytes.split(|b| *b == b'\n') {
        if let Some((job, slots)) = split(line) {
            parse_slots(slots, into.entry(job.to_vec()).or_default());
        } else if folded.is_none() {
            folded = header(line);
        }
    }
    Ok(folded)
}

/// The `.open` file (inode and length) a sorted file's first line,
/// `#folded INODE LENGTH`, says it folded (no tab, so never taken for a
/// job's line). The length too, so a new `.open` on a reused inode is
/// not taken for it.
fn header(line: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(line.strip_prefix(b"#folded ")?).ok()?;
    let (ino, len) = text.split_once(' ')?;
    Some((ino.parse().ok()?, len.parse().ok()?))
}

/// Writes `jobs` to `path` sorted by key, through a temporary file and a
/// rename, so a reader sees the old file or the new one.
fn write_sorted(
    path: &Path,
    jobs: &BTreeMap<Vec<u8>, Slots>,
    folded: Option<(u64, u64)>,
) -> io::Result<()> {
    let mut out = Vec::new();
    if let Some((ino, len)) = folded {
        let _ = writeln!(out, "#folded {ino} {len}");
    }
    for (job, slots) in jobs {
        out.extend_from_slice(job);
        out.push(b'\t');
        write_slots(&mut out, slots);
        out.push(b'\n');
    }
    crate::files::replace_owned(path, &path.with_extension("tmp"), &out)
}

/// Makes `days` from the records of the log in `log_dir` (the last
/// [`KEEP_DAYS`] days of them): into a temporary directory, each UTC day
/// appended as the records are read (newest first, a day at a time in
/// memory), then closed, then renamed into place.
fn rebuild(log_dir: &Path, days: &Path) -> io::Result<()> {
    use super::HistoryReader;
    use std::ops::ControlFlow;
    let tmp = log_dir.join(format!("{DAYS_DIR}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", tmp.display())))?;
    let now = crate::clock::now();
    let query = super::Query {
        statuses: RunStatus::FINAL.to_vec(),
        since: Some(
            (now - Duration::days(KEEP_DAYS))
                .date_naive()
                .and_time(chrono::NaiveTime::MIN)
                .and_utc(),
        ),
        runs_only: true,
        ..Default::default()
    };
    let reader = super::JsonlReader::new(log_dir).alone();
    let mut today: Option<NaiveDate> = None;
    let mut jobs: BTreeMap<Vec<u8>, Slots> = BTreeMap::new();
    let mut failed = Ok(());
    let flush = |day: NaiveDate, jobs: &mut BTreeMap<Vec<u8>, Slots>| -> io::Result<()> {
        let mut out = Vec::new();
        for (job, slots) in std::mem::take(jobs) {
            out.extend_from_slice(&job);
            out.push(b'\t');
            write_slots(&mut out, &slots);
            out.push(b'\n');
        }
        crate::files::open_owned(
            &open_path(&tmp, day),
            OpenOptions::new().create(true).append(true).mode(0o600),
        )?
        .write_all(&out)
    };
    reader.query_each(&query, &mut |record| {
        let Some(ok) = counted(&record) else {
            return ControlFlow::Continue(());
        };
        let (day, slot) = slot_of(record.ts);
        if today.is_some_and(|d| d != day) {
            if let Some(d) = today {
                if let Err(e) = flush(d, &mut jobs) {
                    failed = Err(e);
                    return ControlFlow::Break(());
                }
            }
        }
        today = Some(day);
        jobs.entry(key(record.job.as_deref().unwrap_or_default()))
            .or_default()
            .entry(slot)
            .or_default()
            .plus(Counts {
                ok: ok as u64,
                bad: !ok as u64,
                ms: record.duration_ms.unwrap_or(0),
            });
        ControlFlow::Continue(())
    })?;
    failed?;
    if let Some(d) = today {
        flush(d, &mut jobs)?;
    }
    // Every rebuilt day is closed, today's too: the writer opens a
    // `.open` beside it for what comes next.
    close_days(&tmp, now.date_naive() + Duration::days(1))?;
    fs::rename(&tmp, days)
}

/// The counts of `job` from the roll-ups of the logs in `log_dirs`, day by
/// day in `zone` from `from` to `to`, the days without runs left out.
pub(crate) fn read_days(
    log_dirs: &[PathBuf],
    job: &str,
    zone: chrono_tz::Tz,
    from: NaiveDate,
    to: NaiveDate,
) -> io::Result<Vec<DayCount>> {
    let mut out: BTreeMap<NaiveDate, DayCount> = BTreeMap::new();
    if to < from {
        return Ok(Vec::new());
    }
    let want = key(job);
    let mut day = from - Duration::days(1);
    while day <= to + Duration::days(1) {
        let mut slots = Slots::new();
        for dir in log_dirs {
            let days = dir.join(DAYS_DIR);
            let folded = lookup(&day_path(&days, day), &want, &mut slots)?;
            scan(&open_path(&days, day), folded, &want, &mut slots)?;
        }
        let midnight = day.and_time(chrono::NaiveTime::MIN).and_utc();
        for (slot, c) in slots {
            let at = midnight + Duration::minutes(15 * i64::from(slot));
            let local = at.with_timezone(&zone).date_naive();
            if local >= from && local <= to {
                add(&mut out, local, c.ok, c.bad, c.ms);
            }
        }
        day += Duration::days(1);
    }
    Ok(out.into_values().collect())
}

fn open_existing(path: &Path) -> io::Result<Option<File>> {
    match crate::files::open_read(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot read {}: {e}", path.display()),
        )),
    }
}

/// Every line of an `.open` file for `want`, unless it is the one the
/// sorted file has `folded`.
fn scan(path: &Path, folded: Option<(u64, u64)>, want: &[u8], slots: &mut Slots) -> io::Result<()> {
    let Some(file) = open_existing(path)? else {
        return Ok(());
    };
    let meta = file.metadata()?;
    if folded.is_some() && folded == Some((meta.ino(), meta.len())) {
        return Ok(());
    }
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut &file, &mut bytes)?;
    for line in bytes.split(|b| *b == b'\n') {
        if let Some((job, rest)) = split(line) {
            if job == want {
                parse_slots(rest, slots);
            }
        }
    }
    Ok(())
}

/// The line of `want` in a closed day's sorted file, found by bisecting
/// its bytes; and the `.open` file it says it has folded.
fn lookup(path: &Path, want: &[u8], slots: &mut Slots) -> io::Result<Option<(u64, u64)>> {
    let Some(file) = open_existing(path)? else {
        return Ok(None);
    };
    let len = file.metadata()?.len();
    let folded = if len > 0 {
        header(&line_at(&file, 0, len)?.0)
    } else {
        None
    };
    if let Some(rest) = bisect(&file, len, want)? {
        parse_slots(&rest, slots);
    }
    Ok(folded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: &str, ts: DateTime<Utc>, status: RunStatus) -> Record {
        let mut r = Record::new(Event::Run, ts);
        r.job = Some(job.into());
        r.status = Some(status);
        r.duration_ms = Some(10);
        r
    }

    #[test]
    fn a_closed_day_is_found_by_bisection_among_many_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let days = dir.path().join(DAYS_DIR);
        fs::create_dir(&days).unwrap();
        let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let mut jobs = BTreeMap::new();
        for i in 0..5000 {
            let mut slots = Slots::new();
            slots.insert(
                i % 96,
                Counts {
                    ok: i as u64,
                    bad: 1,
                    ms: 3,
                },
            );
            jobs.insert(key(&format!("job-{i:05}")), slots);
        }
        write_sorted(&day_path(&days, day), &jobs, None).unwrap();
        for i in [0u32, 1, 2500, 4998, 4999] {
            let got = read_days(
                &[dir.path().to_path_buf()],
                &format!("job-{i:05}"),
                chrono_tz::UTC,
                day,
                day,
            )
            .unwrap();
            assert_eq!(got.len(), 1, "job-{i:05}");
            assert_eq!((got[0].succeeded, got[0].failed), (i as u64, 1));
        }
        let none = read_days(
            &[dir.path().to_path_buf()],
            "job-x",
            chrono_tz::UTC,
            day,
            day,
        );
        assert_eq!(none.unwrap(), vec![]);
    }

    #[test]
    fn days_close_and_count_the_same_and_old_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut rollup = Rollup::open(dir.path()).unwrap();
        // Recent days: days past keeping go when the roll-up opens.
        let t0 = (Utc::now() - Duration::days(30))
            .date_naive()
            .and_hms_opt(23, 50, 0)
            .unwrap()
            .and_utc();
        let mut records = Vec::new();
        for i in 0..40 {
            let status = if i % 3 == 0 {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            records.push(run("a", t0 + Duration::hours(i * 7), status));
        }
        for r in &records {
            rollup.add(r).unwrap();
        }
        drop(rollup);
        let zone: chrono_tz::Tz = "Asia/Kathmandu".parse().unwrap();
        let from = t0.date_naive();
        let to = from + Duration::days(19);
        let got = read_days(&[dir.path().to_path_buf()], "a", zone, from, to).unwrap();
        assert_eq!(got, naive_days(&records, "a", zone, from, to));
        // Closed days are sorted files now; only the newest is open.
        let open: Vec<_> = fs::read_dir(dir.path().join(DAYS_DIR))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.ends_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert_eq!(open.len(), 1, "{open:?}");
        // A day past keeping is deleted when a later one closes.
        let mut rollup = Rollup::open(dir.path()).unwrap();
        rollup
            .add(&run(
                "a",
                t0 + Duration::days(KEEP_DAYS + 5),
                RunStatus::Succeeded,
            ))
            .unwrap();
        rollup
            .add(&run(
                "a",
                t0 + Duration::days(KEEP_DAYS + 6),
                RunStatus::Succeeded,
            ))
            .unwrap();
        drop(rollup);
        assert!(!day_path(&dir.path().join(DAYS_DIR), from).exists());
    }

    #[test]
    fn a_log_without_days_has_them_rebuilt_from_its_records() {
        use crate::history::{HistoryReader, HistoryWriter, JsonlHistory, JsonlReader};
        let dir = tempfile::tempdir().unwrap();
        let t0 = Utc::now() - Duration::days(20);
        let mut records = Vec::new();
        let mut log = JsonlHistory::open(dir.path(), 2_000, 100).unwrap();
        for i in 0..60 {
            let status = [RunStatus::Succeeded, RunStatus::Failed, RunStatus::Skipped][i % 3];
            let r = run(
                ["a", "b"][i % 2],
                t0 + Duration::hours(i as i64 * 5),
                status,
            );
            log.append(&r).unwrap();
            records.push(r);
        }
        drop(log);
        let zone: chrono_tz::Tz = "America/New_York".parse().unwrap();
        let (from, to) = (t0.date_naive() - Duration::days(1), Utc::now().date_naive());
        let reader = JsonlReader::new(dir.path());
        let written = reader.days("a", zone, from, to).unwrap();
        assert_eq!(written, naive_days(&records, "a", zone, from, to));
        assert!(!written.is_empty());
        fs::remove_dir_all(dir.path().join(DAYS_DIR)).unwrap();
        assert_eq!(reader.days("a", zone, from, to).unwrap(), vec![]);
        drop(JsonlHistory::open(dir.path(), 2_000, 100).unwrap());
        assert_eq!(reader.days("a", zone, from, to).unwrap(), written);
        assert!(!dir.path().join(format!("{DAYS_DIR}.tmp")).exists());
    }
}
