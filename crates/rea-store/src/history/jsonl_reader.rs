//! The embedded history reader: the live file and the rotated ones, newest
//! first, with cheap text pre-filters before a line is parsed; the
//! system's log and each tenant's (`tenants/NAME/`) merged by `ts`, or only
//! the logs that can hold what a query asks for.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use rea_core::record::{Event, Record, RunStatus, Trigger};
use rea_core::tenant::Tenant;
use serde::Deserialize;

use super::index::{narrow, rev_lines_containing, Window};
use super::jsonl_writer::rotated_files;
use super::{
    log_path, tenant_dir, HistoryReader, JobSummary, LastOccurrences, Query, RevLines, RunSummary,
    DEFAULT_CHUNK_SIZE, TENANTS_DIR,
};

/// Reads the JSON-lines history of a state directory, newest first, across
/// the live file and the rotated ones. Needs no daemon; missing files are
/// an empty history.
pub struct JsonlReader {
    dir: PathBuf,
    chunk: usize,
    /// Reads the log in `dir` only, not its tenants' (a roll-up's rebuild).
    alone: bool,
    malformed: AtomicU64,
}

/// What a scan does with a raw line before paying for a full parse.
enum Pre {
    Parse,
    Skip,
    Stop,
}

/// The fields the summary scans need; `output` and `detail` are skipped by
/// the parser without being allocated.
#[derive(Deserialize)]
struct RunHead {
    ts: DateTime<Utc>,
    event: Event,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    trigger: Option<Trigger>,
    #[serde(default)]
    status: Option<RunStatus>,
    #[serde(default)]
    scheduled: Option<DateTime<Utc>>,
    #[serde(default)]
    started: Option<DateTime<Utc>>,
    #[serde(default)]
    ended: Option<DateTime<Utc>>,
    #[serde(default)]
    duration_ms: Option<u64>,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    signal: Option<i32>,
}

impl JsonlReader {
    pub fn new(state_dir: &Path) -> JsonlReader {
        JsonlReader {
            dir: state_dir.to_path_buf(),
            chunk: DEFAULT_CHUNK_SIZE,
            alone: false,
            malformed: AtomicU64::new(0),
        }
    }

    /// This reader, reading the log in its directory only (no tenants').
    pub(crate) fn alone(mut self) -> JsonlReader {
        self.alone = true;
        self
    }

    /// Bytes per backwards read (tests use tiny ones to hit chunk edges).
    pub fn with_chunk_size(mut self, chunk: usize) -> JsonlReader {
        self.chunk = chunk.max(1);
        self
    }

    /// The logs that can hold records of `tenants`: the state directory's
    /// own (the system's, and every record written before tenants had
    /// logs of their own) and the tenants' directories.
    fn roots(&self, tenants: Tenants<'_>) -> io::Result<Vec<PathBuf>> {
        let mut roots = vec![self.dir.clone()];
        if self.alone {
            return Ok(roots);
        }
        match tenants {
            Tenants::System => {}
            Tenants::User(user) => roots.extend(tenant_dir(&self.dir, user)),
            Tenants::All => {
                let entries = match std::fs::read_dir(self.dir.join(TENANTS_DIR)) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(roots),
                    Err(e) => return Err(e),
                };
                let mut users = Vec::new();
                for entry in entries {
                    let entry = entry?;
                    if entry.file_type()?.is_dir() {
                        users.push(entry.path());
                    }
                }
                users.sort();
                roots.extend(users);
            }
        }
        Ok(roots)
    }

    /// Opens the live file and every rotated one of each root up front,
    /// newest first, and notes their lengths: renames don't affect open
    /// files, so a rotation while a query runs can't make it read a file
    /// twice or lines written later. A rotation between two opens can show
    /// the same file under two names; the (device, inode) check drops the
    /// second. Each file comes with its metadata (its length, and what
    /// finds its index) and whether it was opened as the live file; the
    /// roots without files are left out.
    fn open_files(&self, roots: &[PathBuf]) -> io::Result<Vec<(PathBuf, Vec<Opened>)>> {
        let mut seen = HashSet::new();
        let mut all = Vec::new();
        for root in roots {
            let mut paths = vec![log_path(root)];
            paths.extend(rotated_files(root)?.into_iter().map(|(_, path)| path));
            let mut files = Vec::new();
            for (i, path) in paths.into_iter().enumerate() {
                let file = match crate::files::open_read(&path) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("cannot read history {}: {e}", path.display()),
                        ))
                    }
                };
                let meta = file.metadata()?;
                if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                    files.push((file, meta, i == 0));
                }
            }
            if !files.is_empty() {
                all.push((root.clone(), files));
            }
        }
        Ok(all)
    }

    fn scan<T: serde::de::DeserializeOwned>(
        &self,
        tenants: Tenants<'_>,
        pre: impl Fn(&str) -> Pre,
        visit: impl FnMut(T) -> ControlFlow<()>,
    ) -> io::Result<()> {
        self.scan_narrowed(
            tenants,
            |_, _, meta| vec![(0, meta.len())],
            None,
            pre,
            visit,
        )
    }

    /// [`Self::scan`] reading of each file only the ranges `part(root,
    /// is_live, metadata)` says (in order and apart; none: none of it),
    /// and, with a `needle`, seeing only the lines that contain it (found
    /// by a search over whole chunks, so the other lines are never cut out
    /// or copied).
    ///
    /// The logs of several tenants are merged newest first by each line's
    /// `ts` (each log is in `ts` order); the needle then only goes to the
    /// pre-filter, which every caller gives the same test.
    fn scan_narrowed<T: serde::de::DeserializeOwned>(
        &self,
        tenants: Tenants<'_>,
        part: impl Fn(&Path, bool, &std::fs::Metadata) -> Vec<(u64, u64)>,
        needle: Option<&[u8]>,
        pre: impl Fn(&str) -> Pre,
        mut visit: impl FnMut(T) -> ControlFlow<()>,
    ) -> io::Result<()> {
        self.malformed.store(0, Ordering::Relaxed);
        // One line: UTF-8, the pre-filter, the parse, the visit.
        let mut one = |line: &[u8]| -> ControlFlow<()> {
            let Ok(line) = std::str::from_utf8(line) else {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                return ControlFlow::Continue(());
            };
            match pre(line) {
                Pre::Parse => {}
                Pre::Skip => return ControlFlow::Continue(()),
                Pre::Stop => return ControlFlow::Break(()),
            }
            match serde_json::from_str::<T>(line) {
                Ok(record) => visit(record),
                Err(_) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    ControlFlow::Continue(())
                }
            }
        };
        let roots = self.open_files(&self.roots(tenants)?)?;
        if roots.len() > 1 {
            return merged(&roots, &part, self.chunk, &mut one);
        }
        let Some((root, files)) = roots.into_iter().next() else {
            return Ok(());
        };
        for (file, meta, live) in files {
            // The live file is never indexed: `part` narrows only files
            // with a valid index. Their spans are read newest first.
            for (start, end) in part(&root, live, &meta).into_iter().rev() {
                let window = Window { file: &file, start };
                let len = end.saturating_sub(start);
                if let Some(needle) = needle {
                    let mut stop = false;
                    rev_lines_containing(
                        window,
                        len,
                        self.chunk,
                        rea_core::record::MAX_LINE_BYTES,
                        needle,
                        |line| {
                            let flow = one(line);
                            stop = flow.is_break();
                            flow
                        },
                    )?;
                    if stop {
                        return Ok(());
                    }
                    continue;
                }
                for line in RevLines::new(window, len, self.chunk) {
                    if one(&line?).is_break() {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }
}

/// A file of a log as opened: its metadata, and whether it is the live one.
type Opened = (File, std::fs::Metadata, bool);

/// Which logs a question needs.
#[derive(Debug, Clone, Copy)]
enum Tenants<'a> {
    /// The system's log only (which holds no user's record written since
    /// users have logs of their own).
    System,
    /// The system's log (records written before) and this user's.
    User(&'a str),
    /// Every log.
    All,
}

impl<'a> Tenants<'a> {
    /// The logs that can hold the records of the job named `job`.
    fn of_job(job: &'a str) -> Tenants<'a> {
        match Tenant::of(job) {
            Tenant::System => Tenants::System,
            Tenant::User(user) => Tenants::User(user),
        }
    }
}

/// The lines of each root's files (newest first, each file's ranges as
/// `part` says), merged newest first by their `ts`, into `one` until it
/// breaks. A line without a readable `ts` (torn, garbage) goes out with
/// the line after it in its own log, so it stays where it was.
fn merged(
    roots: &[(PathBuf, Vec<Opened>)],
    part: &impl Fn(&Path, bool, &std::fs::Metadata) -> Vec<(u64, u64)>,
    chunk: usize,
    one: &mut impl FnMut(&[u8]) -> ControlFlow<()>,
) -> io::Result<()> {
    type Lines<'f> = Box<dyn Iterator<Item = io::Result<Vec<u8>>> + 'f>;
    /// A log's next line, with the `ts` it sorts by.
    type Head = Option<(Option<DateTime<Utc>>, Vec<u8>)>;
    let mut logs: Vec<(Lines<'_>, Head)> = Vec::new();
    for (root, files) in roots {
        let lines = files.iter().flat_map(move |(file, meta, live)| {
            part(root, *live, meta)
                .into_iter()
                .rev()
                .map(move |(start, end)| {
                    let window = Window { file, start };
                    RevLines::new(window, end.saturating_sub(start), chunk)
                })
        });
        logs.push((Box::new(lines.flatten()), None));
    }
    // The head of a log: its next line, with the `ts` it sorts by.
    let fill = |log: &mut (Lines<'_>, Head)| -> io::Result<()> {
        if log.1.is_none() {
            if let Some(line) = log.0.next().transpose()? {
                let ts = std::str::from_utf8(&line).ok().and_then(fast_ts);
                log.1 = Some((ts, line));
            }
        }
        Ok(())
    };
    loop {
        for log in &mut logs {
            fill(log)?;
        }
        // Newest first; a line without `ts` at once; ties to the first log.
        let next = logs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, head))| head.as_ref().map(|(ts, _)| (i, *ts)))
            .max_by(|(i, a), (j, b)| match (a, b) {
                (None, None) => j.cmp(i),
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b).then(j.cmp(i)),
            });
        let Some((i, _)) = next else {
            return Ok(());
        };
        let Some((_, line)) = logs[i].1.take() else {
            return Ok(());
        };
        if one(&line).is_break() {
            return Ok(());
        }
    }
}

/// The `ts` of a line as rea writes it (`{"v":1,"ts":"…",…`) without a full
/// parse; `None` for anything else, which then gets the full parse.
pub(crate) fn fast_ts(line: &str) -> Option<DateTime<Utc>> {
    let head = line.get(..line.len().min(24))?;
    let at = head.find(",\"ts\":\"")? + 7;
    let rest = &line[at..];
    let end = rest.get(..rest.len().min(48))?.find('"')?;
    DateTime::parse_from_rfc3339(&rest[..end])
        .ok()
        .map(|ts| ts.with_timezone(&Utc))
}

/// `"value"` as it appears in a line rea wrote: a cheap substring test that
/// rules lines out before parsing. Sound for any whitespace layout; only a
/// hand-written line spelling printable characters as `\u` escapes could be
/// missed, and rea never writes those.
fn quoted(value: &str) -> io::Result<String> {
    serde_json::to_string(value).map_err(io::Error::other)
}

impl HistoryReader for JsonlReader {
    fn query(&self, query: &Query) -> io::Result<Vec<Record>> {
        crate::history::collect(|visit| self.query_each(query, visit))
    }

    fn query_each(
        &self,
        query: &Query,
        visit: &mut dyn FnMut(Record) -> ControlFlow<()>,
    ) -> io::Result<()> {
        let mut found = 0usize;
        if query.limit == Some(0) {
            self.malformed.store(0, Ordering::Relaxed);
            return Ok(());
        }
        let job = query.job.as_deref().map(quoted).transpose()?;
        // The statuses (or `missed`) asked for: what the rotated files'
        // indexes are asked for, and, quoted, what a line must contain.
        let mut keys: Vec<&str> = query.statuses.iter().map(|s| s.as_str()).collect();
        if query.with_missed && !keys.is_empty() {
            keys.push(Event::Missed.as_str());
        }
        if query.with_alerts && !keys.is_empty() {
            keys.push(Event::Alert.as_str());
        }
        let statuses: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
        let part = |root: &Path, live: bool, meta: &std::fs::Metadata| match query.job.as_deref() {
            Some(job) if !live => narrow(root, meta, job, &keys),
            _ => vec![(0, meta.len())],
        };
        let tenants = match (query.job.as_deref(), query.tenant.as_deref()) {
            (Some(job), _) => Tenants::of_job(job),
            (None, Some(user)) => Tenants::User(user),
            (None, None) => Tenants::All,
        };
        self.scan_narrowed(
            tenants,
            part,
            job.as_deref().map(str::as_bytes),
            |line| {
                if let Some(ts) = fast_ts(line) {
                    if query.since.is_some_and(|since| ts < since) {
                        return Pre::Stop;
                    }
                    // Newer than `until`: read on, towards older lines.
                    if query.until.is_some_and(|until| ts >= until) {
                        return Pre::Skip;
                    }
                }
                if job.as_ref().is_some_and(|job| !line.contains(job.as_str()))
                    || (!statuses.is_empty() && !statuses.iter().any(|s| line.contains(s.as_str())))
                {
                    return Pre::Skip;
                }
                Pre::Parse
            },
            |record: Record| {
                // The log is in `ts` order (rotation keeps it), so the first
                // line older than `since` ends the search.
                if query.since.is_some_and(|since| record.ts < since) {
                    return ControlFlow::Break(());
                }
                if query.matches(&record) {
                    found += 1;
                    visit(record)?;
                    if query.limit.is_some_and(|limit| found >= limit) {
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            },
        )
    }

    fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
        self.newest(run_id, Tenants::All, |r| {
            r.event == Event::Run && r.run.as_deref() == Some(run_id)
        })
    }

    fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
        self.newest(job, Tenants::of_job(job), |r| {
            r.event == Event::Run
                && r.job.as_deref() == Some(job)
                && r.status
                    .is_some_and(|s| s.is_final() && s != RunStatus::Skipped)
        })
    }

    fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
        // Runs whose final line was seen (we read newest first, and a final
        // line comes after its `started` line). An entry leaves the set when
        // its `started` line is reached, so the set holds only the runs in
        // flight at that point (plus skipped runs, which never started).
        let mut finished: HashSet<(String, Option<u32>)> = HashSet::new();
        let mut unfinished = Vec::new();
        self.scan(
            Tenants::All,
            |_| Pre::Parse,
            |record: Record| {
                if record.event == Event::DaemonStarted {
                    return ControlFlow::Break(());
                }
                if record.event != Event::Run {
                    return ControlFlow::Continue(());
                }
                let (Some(run), Some(status)) = (&record.run, record.status) else {
                    return ControlFlow::Continue(());
                };
                let key = (run.clone(), record.attempt);
                if status.is_final() {
                    finished.insert(key);
                } else if !finished.remove(&key) {
                    unfinished.push(record);
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(unfinished)
    }

    fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences> {
        let mut latest: HashMap<String, DateTime<Utc>> = HashMap::new();
        let mut daemon_started = None;
        // The oldest of the per-job answers once every job has one: a line
        // is never written before its `scheduled` instant, so once lines are
        // older than every answer none can be improved.
        let mut settle_below: Option<DateTime<Utc>> = None;
        self.scan(
            Tenants::All,
            |_| Pre::Parse,
            |head: RunHead| {
                if head.event == Event::DaemonStarted && daemon_started.is_none() {
                    daemon_started = Some(head.ts);
                }
                let counts = match head.event {
                    Event::Missed => true,
                    Event::Run => {
                        matches!(head.trigger, Some(Trigger::Schedule | Trigger::CatchUp))
                    }
                    _ => false,
                };
                if let (true, Some(job), Some(scheduled)) = (counts, &head.job, head.scheduled) {
                    if jobs.contains(job) {
                        let best = latest.entry(job.clone()).or_insert(scheduled);
                        if scheduled > *best {
                            *best = scheduled;
                        }
                        // Computed once, when the last job gets its answer:
                        // answers only grow later, so this stays a lower
                        // bound of their oldest (stopping on it is never
                        // early). Recomputing it at every line cost a pass
                        // over every job per line: with 100,000 jobs and a
                        // million lines the start never ended.
                        if settle_below.is_none() && latest.len() == jobs.len() {
                            settle_below = latest.values().min().copied();
                        }
                    }
                }
                let settled =
                    latest.len() == jobs.len() && settle_below.is_none_or(|below| head.ts < below);
                if settled && daemon_started.is_some() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        Ok((latest, daemon_started))
    }

    fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
        self.summaries_until(None)
    }

    fn recent_summaries(&self, jobs: &HashSet<String>) -> io::Result<HashMap<String, JobSummary>> {
        self.summaries_until(Some(jobs))
    }

    /// From the roll-ups of the logs that can hold the job's records.
    fn days(
        &self,
        job: &str,
        zone: chrono_tz::Tz,
        from: chrono::NaiveDate,
        to: chrono::NaiveDate,
    ) -> io::Result<Vec<super::DayCount>> {
        let roots = self.roots(Tenants::of_job(job))?;
        super::days::read_days(&roots, job, zone, from, to)
    }

    fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
}

impl JsonlReader {
    /// The newest record that `wanted` accepts, parsing only lines that
    /// contain `text` as a JSON string (a job name or a run id).
    fn newest(
        &self,
        text: &str,
        tenants: Tenants<'_>,
        wanted: impl Fn(&Record) -> bool,
    ) -> io::Result<Option<Record>> {
        let needle = quoted(text)?;
        let mut found = None;
        self.scan(
            tenants,
            |line| {
                if line.contains(needle.as_str()) {
                    Pre::Parse
                } else {
                    Pre::Skip
                }
            },
            |record: Record| {
                if wanted(&record) {
                    found = Some(record);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(found)
    }

    /// Per-job summaries, newest first; with `stop_when`, reading ends once
    /// each of those jobs has a complete failure streak.
    fn summaries_until(
        &self,
        stop_when: Option<&HashSet<String>>,
    ) -> io::Result<HashMap<String, JobSummary>> {
        // The bool: a success was seen, so the failure streak is complete.
        let mut summaries: HashMap<String, (JobSummary, bool)> = HashMap::new();
        let mut open: usize = stop_when.map_or(usize::MAX, HashSet::len);
        self.scan(
            Tenants::All,
            // Half of a log is `started` lines, which never count here: skip
            // them before the parse. The pattern cannot occur inside a string
            // value (its quotes would be escaped there).
            |line| {
                if line.contains(r#""status":"started""#) {
                    Pre::Skip
                } else {
                    Pre::Parse
                }
            },
            |head: RunHead| {
                let (Event::Run, Some(job), Some(status)) = (head.event, &head.job, head.status)
                else {
                    return ControlFlow::Continue(());
                };
                if !status.is_final() {
                    return ControlFlow::Continue(());
                }
                let (summary, streak_done) = match summaries.get_mut(job.as_str()) {
                    Some(entry) => entry,
                    None => summaries.entry(job.clone()).or_default(),
                };
                if status == RunStatus::Skipped {
                    summary.skipped += 1;
                    return ControlFlow::Continue(());
                }
                summary.total_runs += 1;
                if summary.last.is_none() {
                    summary.last = Some(RunSummary {
                        run: head.run.clone(),
                        attempt: head.attempt,
                        trigger: head.trigger,
                        status,
                        scheduled: head.scheduled,
                        started: head.started,
                        ended: head.ended,
                        duration_ms: head.duration_ms,
                        exit_code: head.exit_code,
                        signal: head.signal,
                    });
                }
                match status {
                    RunStatus::Succeeded => {
                        if summary.last_success.is_none() {
                            summary.last_success = Some(head.started.unwrap_or(head.ts));
                        }
                        if !*streak_done && stop_when.is_some_and(|w| w.contains(job.as_str())) {
                            open = open.saturating_sub(1);
                        }
                        *streak_done = true;
                        if open == 0 {
                            return ControlFlow::Break(());
                        }
                    }
                    s if s.is_failure() && !*streak_done => {
                        summary.consecutive_failures += 1;
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            },
        )?;
        Ok(summaries
            .into_iter()
            .map(|(job, (summary, _))| (job, summary))
            .collect())
    }
}
