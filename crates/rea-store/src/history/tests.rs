//! Tests of the JSON-lines backend: the file format, rotation, torn lines,
//! the backlog, and each query against a naive forward read.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use rea_core::record::{Event, Record, RunStatus, Trigger};

use super::jsonl_reader::fast_ts;
use super::jsonl_writer::rotated_files;
use super::*;

/// Every parseable record of every file, oldest first, the simple way.
fn forward_read(dir: &Path) -> Vec<Record> {
    let mut paths: Vec<PathBuf> = rotated_files(dir)
        .expect("list")
        .into_iter()
        .rev()
        .map(|(_, p)| p)
        .collect();
    paths.push(log_path(dir));
    let mut records = Vec::new();
    for path in paths {
        let Ok(bytes) = fs::read(&path) else { continue };
        for line in bytes.split(|&b| b == b'\n') {
            if let Ok(r) = serde_json::from_slice::<Record>(line) {
                records.push(r);
            }
        }
    }
    records
}

mod recent {
    use super::*;

    #[test]
    fn recent_summaries_stop_once_every_job_has_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = JsonlHistory::open(dir.path(), 1 << 30, 1).unwrap();
        let t0 = DateTime::parse_from_rfc3339("2026-11-29T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let run = |job: &str, status: RunStatus, i: i64| {
            let mut r = Record::new(Event::Run, t0 + chrono::Duration::seconds(i));
            r.job = Some(job.into());
            r.run = Some(format!("r{i}"));
            r.status = Some(status);
            r
        };
        // Old history: many runs of `a` that a bounded read never reaches.
        for i in 0..100 {
            h.append(&run("a", RunStatus::Failed, i)).unwrap();
        }
        h.append(&run("a", RunStatus::Succeeded, 100)).unwrap();
        h.append(&run("b", RunStatus::Succeeded, 101)).unwrap();
        h.append(&run("a", RunStatus::Failed, 102)).unwrap();
        let reader = JsonlReader::new(dir.path());
        let jobs: HashSet<String> = ["a".to_string(), "b".to_string()].into();
        let recent = reader.recent_summaries(&jobs).unwrap();
        assert_eq!(recent["a"].consecutive_failures, 1);
        assert_eq!(recent["a"].last.as_ref().unwrap().status, RunStatus::Failed);
        assert_eq!(recent["b"].consecutive_failures, 0);
        assert_eq!(recent["a"].total_runs, 2, "stopped at a's success");
        let all = reader.job_summaries().unwrap();
        assert_eq!(all["a"].total_runs, 102);
        assert_eq!(all["a"].consecutive_failures, 1);
    }
}

mod jsonl {
    use super::*;
    use proptest::prelude::*;
    use std::io::BufWriter;

    fn ts(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("valid timestamp")
    }

    fn run(at: i64, job: &str, id: &str, status: RunStatus, trigger: Trigger) -> Record {
        let mut r = Record::new(Event::Run, ts(at));
        r.job = Some(job.to_string());
        r.run = Some(id.to_string());
        r.attempt = Some(1);
        r.status = Some(status);
        r.trigger = Some(trigger);
        r.scheduled = Some(ts(at));
        r.started = Some(ts(at));
        r
    }

    fn daemon_started(at: i64) -> Record {
        Record::new(Event::DaemonStarted, ts(at))
    }

    fn all(reader: &JsonlReader) -> Vec<Record> {
        reader.query(&Query::default()).expect("query")
    }

    fn line_of(record: &Record) -> String {
        format!("{}\n", serde_json::to_string(record).expect("serialise"))
    }

    fn mixed_records(n: i64) -> Vec<Record> {
        (0..n)
            .map(|i| match i % 5 {
                0 => daemon_started(i),
                1 => run(
                    i,
                    "backup",
                    &format!("r{i}"),
                    RunStatus::Started,
                    Trigger::Schedule,
                ),
                2 => {
                    let mut r = run(
                        i,
                        "report",
                        &format!("r{i}"),
                        RunStatus::Failed,
                        Trigger::Manual,
                    );
                    r.output = Some(format!("line {i}\nwith \"quotes\" and ünïcode"));
                    r
                }
                3 => run(
                    i,
                    "backup",
                    &format!("r{i}"),
                    RunStatus::Succeeded,
                    Trigger::Retry,
                ),
                _ => {
                    let mut r = Record::new(Event::Missed, ts(i));
                    r.job = Some("report".into());
                    r.scheduled = Some(ts(i - 1));
                    r.count = Some(2);
                    r
                }
            })
            .collect()
    }

    #[test]
    fn roundtrip_newest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(100);
        for r in &records {
            h.append(r).expect("append");
        }
        let mut expected = records.clone();
        expected.reverse();
        for chunk in [7, 64, DEFAULT_CHUNK_SIZE] {
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            assert_eq!(all(&reader), expected, "chunk {chunk}");
            assert_eq!(reader.malformed(), 0);
        }
        assert_eq!(all(&h.reader()), expected);
    }

    #[test]
    fn each_append_adds_exactly_one_whole_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let mut expected = String::new();
        for r in mixed_records(20) {
            h.append(&r).expect("append");
            expected.push_str(&line_of(&r));
            assert_eq!(
                fs::read_to_string(log_path(dir.path())).expect("read"),
                expected
            );
        }
        let mode = fs::metadata(log_path(dir.path())).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn torn_last_line_is_skipped_and_the_next_append_starts_a_new_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records = mixed_records(3);
        {
            let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
            for r in &records {
                h.append(r).expect("append");
            }
        }
        let path = log_path(dir.path());
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(b"{\"v\":1,\"ts\":\"2023-11-").expect("write");
        drop(f);

        let reader = JsonlReader::new(dir.path()).with_chunk_size(16);
        let mut expected: Vec<Record> = records.iter().rev().cloned().collect();
        assert_eq!(all(&reader), expected);
        assert_eq!(reader.malformed(), 1);

        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("reopen");
        let next = run(10, "backup", "r10", RunStatus::Succeeded, Trigger::Schedule);
        h.append(&next).expect("append");
        let text = fs::read_to_string(&path).expect("read");
        assert!(
            text.ends_with(&format!("2023-11-\n{}", line_of(&next))),
            "{text}"
        );
        expected.insert(0, next);
        assert_eq!(all(&reader), expected);
        assert_eq!(reader.malformed(), 1);
    }

    #[test]
    fn garbage_and_missing_files_are_not_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        assert_eq!(all(&JsonlReader::new(&missing)), vec![]);
        assert_eq!(all(&JsonlReader::new(dir.path())), vec![]);

        let a = run(1, "a", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let b = run(2, "a", "r2", RunStatus::Failed, Trigger::Schedule);
        let mut bytes = line_of(&a).into_bytes();
        bytes.extend_from_slice(b"not json at all\n\xff\xfe binary\n\n{\"v\":1}\n");
        bytes.extend_from_slice(line_of(&b).as_bytes());
        fs::write(log_path(dir.path()), bytes).expect("write");
        let reader = JsonlReader::new(dir.path()).with_chunk_size(5);
        assert_eq!(all(&reader), vec![b, a]);
        assert_eq!(reader.malformed(), 3);
    }

    #[test]
    fn rotation_keeps_max_files_and_queries_span_them_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records: Vec<Record> = (0..40)
            .map(|i| {
                run(
                    i,
                    "job",
                    &format!("r{i:02}"),
                    RunStatus::Succeeded,
                    Trigger::Schedule,
                )
            })
            .collect();
        let line_len = line_of(&records[0]).len() as u64;
        let max_bytes = line_len * 3 + 1;
        let mut h = JsonlHistory::open(dir.path(), max_bytes, 3).expect("open");
        for r in &records {
            h.append(r).expect("append");
        }
        let rotated: Vec<u32> = rotated_files(dir.path())
            .expect("list")
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(rotated, vec![1, 2, 3]);
        for path in [
            log_path(dir.path()),
            rotated_path(dir.path(), 1),
            rotated_path(dir.path(), 3),
        ] {
            assert!(fs::metadata(&path).expect("stat").len() <= max_bytes);
        }
        // 4 files of 3 lines, except the live one which has 40 % 3 = 1.
        let expected: Vec<Record> = records.iter().rev().take(10).cloned().collect();
        for chunk in [7, 64, 4096] {
            assert_eq!(
                all(&JsonlReader::new(dir.path()).with_chunk_size(chunk)),
                expected
            );
        }
        let mut forward = forward_read(dir.path());
        forward.reverse();
        assert_eq!(forward, expected);

        // A rotated file missing in the middle: the others still read, in order.
        fs::remove_file(rotated_path(dir.path(), 2)).expect("rm");
        let got = all(&JsonlReader::new(dir.path()).with_chunk_size(64));
        let want: Vec<Record> = expected[..4]
            .iter()
            .chain(&expected[7..])
            .cloned()
            .collect();
        assert_eq!(got, want);
        // Writing on fills the gap again through renames.
        for r in &records[..3] {
            let mut r = r.clone();
            r.ts = ts(100);
            h.append(&r).expect("append");
        }
        assert!(log_path(dir.path()).exists());
    }

    #[test]
    fn rotation_with_no_rotated_files_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = run(1, "job", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let mut h = JsonlHistory::open(dir.path(), line_of(&r).len() as u64, 0).expect("open");
        for i in 0..5 {
            let mut r = r.clone();
            r.ts = ts(i);
            h.append(&r).expect("append");
        }
        assert!(rotated_files(dir.path()).expect("list").is_empty());
        assert_eq!(all(&h.reader()).len(), 1);
    }

    #[test]
    fn lowering_max_files_removes_the_extra_rotated_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in 1..=5 {
            fs::write(rotated_path(dir.path(), n), "").expect("write");
        }
        let r = run(1, "job", "r1", RunStatus::Succeeded, Trigger::Schedule);
        let mut h = JsonlHistory::open(dir.path(), 10, 2).expect("open");
        h.append(&r).expect("append");
        h.append(&r).expect("append");
        let rotated: Vec<u32> = rotated_files(dir.path())
            .expect("list")
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(rotated, vec![1, 2]);
    }

    fn rev_lines_of(bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        RevLines::new(bytes, bytes.len() as u64, chunk)
            .collect::<io::Result<Vec<_>>>()
            .expect("read")
    }

    #[test]
    fn rev_lines_handles_chunk_edges_and_long_lines() {
        let long = "x".repeat(300);
        let text = format!("a\n\nbb\n{long}\nccc\n{long}y");
        let want: Vec<Vec<u8>> = text
            .split('\n')
            .filter(|l| !l.is_empty())
            .rev()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        for chunk in 1..40 {
            assert_eq!(rev_lines_of(text.as_bytes(), chunk), want, "chunk {chunk}");
        }
        assert_eq!(rev_lines_of(b"", 7), Vec::<Vec<u8>>::new());
        assert_eq!(rev_lines_of(b"\n\n", 7), Vec::<Vec<u8>>::new());

        // Same through a real file.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        fs::write(&path, &text).expect("write");
        let file = File::open(&path).expect("open");
        let got: Vec<Vec<u8>> = RevLines::new(file, text.len() as u64, 64)
            .collect::<io::Result<_>>()
            .expect("read");
        assert_eq!(got, want);
    }

    /// Output that would escape to a line longer than readers hold is cut
    /// so the record stays readable.
    #[test]
    fn records_stay_within_the_line_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 1).expect("open");
        let mut r = run(1, "a", "r1", RunStatus::Succeeded, Trigger::Schedule);
        r.output = Some("\u{1}".repeat(rea_core::record::MAX_OUTPUT_BYTES));
        h.append(&r).expect("append");
        let len = fs::metadata(log_path(dir.path())).expect("stat").len() as usize;
        assert!(len <= rea_core::record::MAX_LINE_BYTES, "{len}");
        let back = h.reader().find_run("r1").expect("read").expect("found");
        assert!(back
            .output
            .expect("output")
            .ends_with("the history line would be too long …\n"));
    }

    /// A line longer than the bound comes back empty (never held), whatever
    /// the chunk size; the lines around it are untouched.
    #[test]
    fn overlong_lines_are_skipped_without_being_held() {
        let long = "x".repeat(300);
        let text = format!("a\n{long}\nbb\n{long}");
        for chunk in 1..40 {
            let got: Vec<Vec<u8>> = RevLines::new(text.as_bytes(), text.len() as u64, chunk)
                .with_max_line(100)
                .collect::<io::Result<_>>()
                .expect("read");
            let want: Vec<Vec<u8>> = vec![vec![], b"bb".to_vec(), vec![], b"a".to_vec()];
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn rev_lines_is_a_reversed_forward_read(
            lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..150), 0..30),
            trailing in any::<bool>(),
            chunk in 1usize..100,
        ) {
            let lines: Vec<Vec<u8>> = lines
                .into_iter()
                .map(|l| l.into_iter().filter(|&b| b != b'\n').collect())
                .collect();
            let mut bytes = lines.join(&b'\n');
            if trailing {
                bytes.push(b'\n');
            }
            let want: Vec<Vec<u8>> = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .rev()
                .map(<[u8]>::to_vec)
                .collect();
            prop_assert_eq!(rev_lines_of(&bytes, chunk), want);
        }

        /// The needle search sees exactly the lines of a plain reverse
        /// read that contain the needle, at any chunk size.
        #[test]
        fn rev_lines_containing_is_a_filtered_rev_read(
            lines in prop::collection::vec(prop::collection::vec(prop::sample::select(b"ab\nx".to_vec()), 0..40), 0..30),
            trailing in any::<bool>(),
            chunk in 1usize..60,
            needle in prop::sample::select(vec![b"a".to_vec(), b"ab".to_vec(), b"aab".to_vec(), b"xbx".to_vec()]),
        ) {
            let mut bytes = lines.concat();
            if trailing {
                bytes.push(b'\n');
            }
            let want: Vec<Vec<u8>> = rev_lines_of(&bytes, 1000)
                .into_iter()
                .filter(|l| l.windows(needle.len()).any(|w| w == needle.as_slice()))
                .collect();
            let mut got = Vec::new();
            super::index::rev_lines_containing(&bytes[..], bytes.len() as u64, chunk, usize::MAX, &needle, |l| {
                got.push(l.to_vec());
                std::ops::ControlFlow::Continue(())
            })
            .expect("read");
            prop_assert_eq!(got, want);
        }
    }

    /// Lines longer than the limit are skipped, at any chunk size, however
    /// long (a crash's tail of NULs without a newline) and wherever they are;
    /// the lines around them are found.
    #[test]
    fn rev_lines_containing_skips_overlong_lines() {
        let mut bytes = b"job a 1\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'a', 50));
        bytes.extend_from_slice(b"\njob a 2\njob b\njob a 3\n");
        bytes.extend(std::iter::repeat_n(0u8, 5000));
        for chunk in [1usize, 3, 7, 16, 64, 10_000] {
            let mut got = Vec::new();
            super::index::rev_lines_containing(
                &bytes[..],
                bytes.len() as u64,
                chunk,
                20,
                b"a",
                |l| {
                    got.push(String::from_utf8_lossy(l).into_owned());
                    std::ops::ControlFlow::Continue(())
                },
            )
            .expect("read");
            assert_eq!(got, ["job a 3", "job a 2", "job a 1"], "chunk {chunk}");
        }
    }

    /// The conformance kit, on files rotated at different sizes and read
    /// in chunks of different sizes (the kit's oracles know nothing of
    /// files; this is where the file format's edges are crossed).
    #[test]
    fn the_jsonl_backend_conforms() {
        let n = std::cell::Cell::new(0usize);
        crate::conformance::history_backend(40, || {
            let i = n.get();
            n.set(i + 1);
            let max_bytes = [300u64, 2_000, u64::MAX][i % 3];
            let chunk = [7usize, 64, 1000][(i / 3) % 3];
            let dir = tempfile::tempdir().expect("tempdir");
            let writer = JsonlHistory::open(dir.path(), max_bytes, 1000).expect("open");
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            crate::conformance::Fresh {
                writer: Box::new(writer),
                reader: Box::new(reader),
                keep: Box::new(dir),
            }
        });
    }

    /// A reader that indexes every rotated file before each query, as
    /// rotation does in the background: the kit must pass through the
    /// indexes too.
    struct Indexing(JsonlReader, PathBuf);

    impl HistoryReader for Indexing {
        fn query(&self, query: &Query) -> io::Result<Vec<Record>> {
            for (_, path) in rotated_files(&self.1)? {
                index_file(&self.1, &path)?;
            }
            self.0.query(query)
        }
        fn find_run(&self, run_id: &str) -> io::Result<Option<Record>> {
            self.0.find_run(run_id)
        }
        fn latest_final_run(&self, job: &str) -> io::Result<Option<Record>> {
            self.0.latest_final_run(job)
        }
        fn unfinished_runs(&self) -> io::Result<Vec<Record>> {
            self.0.unfinished_runs()
        }
        fn last_occurrences(&self, jobs: &HashSet<String>) -> io::Result<LastOccurrences> {
            self.0.last_occurrences(jobs)
        }
        fn job_summaries(&self) -> io::Result<HashMap<String, JobSummary>> {
            self.0.job_summaries()
        }
    }

    #[test]
    fn the_jsonl_backend_conforms_with_every_rotated_file_indexed() {
        let n = std::cell::Cell::new(0usize);
        crate::conformance::history_backend(30, || {
            let i = n.get();
            n.set(i + 1);
            let max_bytes = [300u64, 2_000][i % 2];
            let chunk = [7usize, 64, 1000][(i / 2) % 3];
            let dir = tempfile::tempdir().expect("tempdir");
            let writer = JsonlHistory::open(dir.path(), max_bytes, 1000).expect("open");
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            crate::conformance::Fresh {
                writer: Box::new(writer),
                reader: Box::new(Indexing(reader, dir.path().to_path_buf())),
                keep: Box::new(dir),
            }
        });
    }

    /// A rotated file without the job is not read at all: its index says
    /// so; an index that no longer describes the file is ignored.
    #[test]
    fn an_index_lets_a_query_skip_files_without_the_job() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old = dir.path().join("history.jsonl.1");
        let mut r = Record::new(Event::Run, Utc::now());
        r.job = Some("other".into());
        r.status = Some(RunStatus::Failed);
        fs::write(&old, format!("{}\n", line_of(&r))).expect("write");
        index_file(dir.path(), &old).expect("index");
        let q = Query {
            job: Some("other".into()),
            statuses: vec![RunStatus::Failed],
            ..Query::default()
        };
        let reader = JsonlReader::new(dir.path());
        assert_eq!(reader.query(&q).expect("query").len(), 1);
        // Garbage in the file is never read when the index rules it out
        // (same length, same modification time)...
        let mtime = fs::metadata(&old).expect("stat").modified().expect("mtime");
        let len = fs::metadata(&old).expect("stat").len() as usize;
        fs::write(&old, vec![b'x'; len]).expect("write");
        File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(mtime))
            .expect("touch");
        let q2 = Query {
            job: Some("absent".into()),
            ..Query::default()
        };
        assert!(reader.query(&q2).expect("query").is_empty());
        assert_eq!(reader.malformed(), 0);
        // ...and an index whose file changed is ignored.
        fs::write(&old, b"\"absent\" x\n").expect("write");
        assert!(reader.query(&q2).expect("query").is_empty());
        assert_eq!(reader.malformed(), 1);
    }

    /// Rotation indexes the rotated file in the background.
    #[test]
    fn rotation_writes_the_index_of_the_rotated_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 200, 3).expect("open");
        for i in 0..20 {
            h.append(&run(
                i,
                "a",
                &format!("r{i}"),
                RunStatus::Failed,
                Trigger::Schedule,
            ))
            .expect("append");
        }
        let ino = fs::metadata(rotated_path(dir.path(), 1))
            .expect("stat")
            .ino();
        let index = dir.path().join(format!("history.idx.{ino}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !index.exists() {
            assert!(std::time::Instant::now() < deadline, "no index written");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn event_names_are_the_ones_the_history_writes() {
        for e in [
            Event::Run,
            Event::Missed,
            Event::DaemonStarted,
            Event::DaemonStopped,
            Event::ConfigLoaded,
            Event::ConfigRejected,
        ] {
            assert_eq!(
                serde_json::to_string(&e).expect("json"),
                format!("\"{}\"", e.as_str())
            );
        }
    }

    #[test]
    fn queries_on_a_large_log_stop_early() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = BufWriter::new(File::create(log_path(dir.path())).expect("create"));
        let mut records = Vec::with_capacity(50_000);
        for i in 0..50_000 {
            let job = if i % 1000 == 0 { "rare" } else { "often" };
            let status = if i % 7 == 0 {
                RunStatus::Failed
            } else {
                RunStatus::Succeeded
            };
            let r = run(i, job, &format!("r{i}"), status, Trigger::Schedule);
            out.write_all(line_of(&r).as_bytes()).expect("write");
            records.push(r);
        }
        out.flush().expect("flush");
        drop(out);
        let reader = JsonlReader::new(dir.path()).with_chunk_size(4096);
        let queries = [
            Query {
                limit: Some(10),
                ..Query::default()
            },
            Query {
                job: Some("rare".into()),
                limit: Some(3),
                ..Query::default()
            },
            Query {
                job: Some("rare".into()),
                since: Some(ts(45_500)),
                ..Query::default()
            },
            Query {
                statuses: vec![RunStatus::Failed],
                since: Some(ts(49_900)),
                ..Query::default()
            },
        ];
        for q in &queries {
            assert_eq!(
                reader.query(q).expect("query"),
                crate::conformance::naive_query(&records, q),
                "{q:?}"
            );
        }
        assert_eq!(
            reader.find_run("r49000").expect("find").map(|r| r.ts),
            Some(ts(49_000))
        );
        assert_eq!(
            reader.find_run("r123").expect("find").map(|r| r.ts),
            Some(ts(123))
        );
        assert_eq!(reader.find_run("nope").expect("find"), None);
    }

    #[test]
    fn find_run_and_latest_final_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = [
            run(1, "a", "r1", RunStatus::Started, Trigger::Schedule),
            run(2, "a", "r1", RunStatus::Failed, Trigger::Schedule),
            run(3, "a", "r2", RunStatus::Started, Trigger::Manual),
            run(4, "a", "r3", RunStatus::Skipped, Trigger::Schedule),
            run(5, "b", "r4", RunStatus::Started, Trigger::Schedule),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(32);
        assert_eq!(
            reader.find_run("r1").expect("find").as_ref(),
            Some(&records[1])
        );
        assert_eq!(
            reader.find_run("r2").expect("find").as_ref(),
            Some(&records[2])
        );
        assert_eq!(reader.find_run("r9").expect("find"), None);
        assert_eq!(
            reader.latest_final_run("a").expect("latest").as_ref(),
            Some(&records[1])
        );
        assert_eq!(reader.latest_final_run("b").expect("latest"), None);
    }

    #[test]
    fn unfinished_runs_since_the_last_daemon_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 400, 5).expect("open");
        let mut retry = run(8, "c", "r3", RunStatus::Started, Trigger::Retry);
        retry.attempt = Some(2);
        let records = [
            daemon_started(0),
            run(1, "old", "r0", RunStatus::Started, Trigger::Schedule),
            daemon_started(2),
            run(3, "a", "r1", RunStatus::Started, Trigger::Schedule),
            run(4, "b", "r2", RunStatus::Started, Trigger::Schedule),
            run(5, "c", "r3", RunStatus::Started, Trigger::Schedule),
            run(6, "a", "r1", RunStatus::Succeeded, Trigger::Schedule),
            run(7, "c", "r3", RunStatus::Failed, Trigger::Schedule),
            retry.clone(),
            run(9, "d", "r4", RunStatus::Skipped, Trigger::Schedule),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(64);
        assert_eq!(
            reader.unfinished_runs().expect("scan"),
            vec![retry, records[4].clone()]
        );
        h.append(&daemon_started(10)).expect("append");
        assert_eq!(reader.unfinished_runs().expect("scan"), vec![]);
        assert_eq!(
            JsonlReader::new(&dir.path().join("none"))
                .unfinished_runs()
                .expect("scan"),
            vec![]
        );
    }

    #[test]
    fn last_occurrences_per_job() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let mut missed = Record::new(Event::Missed, ts(50));
        missed.job = Some("m".into());
        missed.scheduled = Some(ts(45));
        let mut catch_up = run(52, "c", "r7", RunStatus::Succeeded, Trigger::CatchUp);
        catch_up.scheduled = Some(ts(30));
        // `a` runs with overlap allowed: the final line of an older occurrence
        // is written after the start of a newer one.
        let mut a_old_final = run(61, "a", "r8", RunStatus::Succeeded, Trigger::Schedule);
        a_old_final.scheduled = Some(ts(40));
        let records = [
            run(10, "a", "r1", RunStatus::Succeeded, Trigger::Schedule),
            daemon_started(20),
            run(35, "z", "r2", RunStatus::Succeeded, Trigger::Schedule),
            run(40, "a", "r3", RunStatus::Started, Trigger::Schedule),
            missed,
            catch_up,
            run(60, "a", "r4", RunStatus::Started, Trigger::Schedule),
            a_old_final,
            run(70, "a", "r5", RunStatus::Failed, Trigger::Retry),
            run(71, "c", "r6", RunStatus::Succeeded, Trigger::Manual),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let reader = h.reader().with_chunk_size(50);
        let jobs: HashSet<String> = ["a", "c", "m", "never"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (latest, started) = reader.last_occurrences(&jobs).expect("scan");
        let want: HashMap<String, DateTime<Utc>> = [("a", ts(60)), ("c", ts(30)), ("m", ts(45))]
            .iter()
            .map(|(j, t)| (j.to_string(), *t))
            .collect();
        assert_eq!(latest, want);
        assert_eq!(started, Some(ts(20)));

        let (latest, started) = reader.last_occurrences(&HashSet::new()).expect("scan");
        assert!(latest.is_empty());
        assert_eq!(started, Some(ts(20)));
    }

    #[test]
    fn job_summaries_over_the_whole_history() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 500, 10).expect("open");
        let mut failed = run(7, "a", "r7", RunStatus::Failed, Trigger::Schedule);
        failed.duration_ms = Some(1500);
        failed.exit_code = Some(3);
        let records = [
            run(1, "a", "r1", RunStatus::Failed, Trigger::Schedule),
            run(2, "a", "r2", RunStatus::Succeeded, Trigger::Schedule),
            run(3, "a", "r3", RunStatus::TimedOut, Trigger::Schedule),
            run(4, "a", "r4", RunStatus::Killed, Trigger::Manual),
            run(5, "a", "r5", RunStatus::Skipped, Trigger::Schedule),
            run(6, "a", "r6", RunStatus::Started, Trigger::Schedule),
            failed,
            run(8, "b", "r8", RunStatus::Succeeded, Trigger::Schedule),
            daemon_started(9),
        ];
        for r in &records {
            h.append(r).expect("append");
        }
        let summaries = h
            .reader()
            .with_chunk_size(100)
            .job_summaries()
            .expect("scan");
        assert_eq!(summaries.len(), 2);
        let a = &summaries["a"];
        assert_eq!(a.total_runs, 5);
        assert_eq!(a.skipped, 1);
        assert_eq!(a.consecutive_failures, 2);
        assert_eq!(a.last_success, Some(ts(2)));
        let last = a.last.as_ref().expect("last");
        assert_eq!(
            (last.status, last.duration_ms, last.exit_code),
            (RunStatus::Failed, Some(1500), Some(3))
        );
        assert_eq!(last.run.as_deref(), Some("r7"));
        let b = &summaries["b"];
        assert_eq!((b.total_runs, b.consecutive_failures), (1, 0));
    }

    #[test]
    fn job_summaries_skip_started_lines_but_not_outputs_that_mention_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut h = JsonlHistory::open(dir.path(), 1 << 20, 2).expect("open");
        let mut sneaky = run(2, "a", "r2", RunStatus::Failed, Trigger::Schedule);
        sneaky.output = Some(r#"{"status":"started"}"#.into());
        for r in [
            run(1, "a", "r2", RunStatus::Started, Trigger::Schedule),
            sneaky,
            run(3, "b", "r3", RunStatus::Started, Trigger::Schedule),
        ] {
            h.append(&r).expect("append");
        }
        let summaries = h.reader().job_summaries().expect("scan");
        let a = &summaries["a"];
        assert_eq!((a.total_runs, a.consecutive_failures), (1, 1));
        assert_eq!(a.last.as_ref().map(|l| l.status), Some(RunStatus::Failed));
        assert!(
            !summaries.contains_key("b"),
            "a run in progress is no result"
        );
    }

    #[test]
    fn write_errors_keep_records_in_the_backlog_until_writing_works() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(6);
        h.append(&records[0]).expect("append");

        // A symlink in its place (to /dev/full, say) is never followed:
        // the write fails, and the records wait.
        let aside = dir.path().join("aside");
        fs::rename(&path, &aside).expect("rename");
        std::os::unix::fs::symlink("/dev/full", &path).expect("symlink");
        let err = h.append(&records[1]).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("history.jsonl"), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(h.append(&records[2]).is_err());
        assert_eq!(h.backlog_len(), 2);
        assert!(h
            .last_error()
            .expect("error")
            .message
            .contains("never followed"));
        fs::remove_file(&path).expect("rm");

        // Something in the way that cannot be opened at all.
        fs::create_dir(&path).expect("mkdir");
        assert!(h.append(&records[3]).is_err());
        assert!(h.flush_backlog().is_err());
        assert_eq!(h.backlog_len(), 3);

        // The file is back: everything is written, in order.
        fs::remove_dir(&path).expect("rmdir");
        fs::rename(&aside, &path).expect("rename back");
        h.flush_backlog().expect("flush");
        assert_eq!(h.backlog_len(), 0);
        h.append(&records[4]).expect("append");
        let want: Vec<Record> = records[..5].iter().rev().cloned().collect();
        assert_eq!(all(&h.reader()), want);
        assert_eq!(h.dropped(), 0);
        assert!(h.last_error().is_some(), "kept for rea status");
    }

    #[test]
    fn a_full_backlog_drops_the_oldest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        h.set_backlog_limits(3, usize::MAX);
        fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink("/dev/full", &path).expect("symlink");
        let records = mixed_records(5);
        for r in &records {
            assert!(h.append(r).is_err());
        }
        assert_eq!((h.backlog_len(), h.dropped()), (3, 2));
        fs::remove_file(&path).expect("rm");
        h.flush_backlog().expect("flush");
        let want: Vec<Record> = records[2..].iter().rev().cloned().collect();
        assert_eq!(all(&h.reader()), want);

        // The byte bound keeps at least the newest record.
        h.set_backlog_limits(100, 1);
        fs::remove_file(&path).expect("rm");
        fs::create_dir(&path).expect("mkdir");
        assert!(h.append(&records[0]).is_err());
        assert!(h.append(&records[1]).is_err());
        assert_eq!((h.backlog_len(), h.dropped()), (1, 3));
    }

    #[test]
    fn a_deleted_file_is_recreated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = log_path(dir.path());
        let mut h = JsonlHistory::open(dir.path(), u64::MAX, 3).expect("open");
        let records = mixed_records(3);
        h.append(&records[0]).expect("append");
        fs::remove_file(&path).expect("rm");
        h.append(&records[1]).expect("append");
        // Replaced by another file (an external logrotate's `create`).
        fs::rename(&path, dir.path().join("history.jsonl-old")).expect("mv");
        fs::write(&path, "").expect("create");
        h.append(&records[2]).expect("append");
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            line_of(&records[2])
        );
    }

    #[test]
    fn open_reports_an_unusable_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(log_path(dir.path())).expect("mkdir");
        let err = JsonlHistory::open(dir.path(), u64::MAX, 3)
            .err()
            .expect("error");
        assert!(err.to_string().contains("history.jsonl"), "{err}");
    }

    #[test]
    fn fast_ts_reads_what_the_writer_writes() {
        let r = run(5, "a", "r1", RunStatus::Started, Trigger::Schedule);
        assert_eq!(fast_ts(&line_of(&r)), Some(ts(5)));
        assert_eq!(fast_ts("{\"ts\":\"2023-01-01T00:00:00Z\"}"), None);
        assert_eq!(fast_ts("garbage"), None);
        assert_eq!(fast_ts(""), None);
    }
}

/// Each user tenant's records in a log of her own (`tenants/NAME/`): her
/// runs rotate out only her records, and every reader still sees every
/// tenant's records merged in order, old single-file histories included.
mod tenants {
    use super::*;

    fn run(job: &str, i: i64, output: usize) -> Record {
        let t0 = DateTime::parse_from_rfc3339("2026-11-29T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut r = Record::new(Event::Run, t0 + chrono::Duration::milliseconds(i));
        r.job = Some(job.into());
        r.run = Some(format!("r{i}"));
        r.attempt = Some(1);
        r.status = Some(RunStatus::Succeeded);
        r.output = Some("x".repeat(output));
        r
    }

    #[test]
    fn a_users_flood_rotates_out_only_her_own_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut logs = TenantLogs::open(dir.path(), 4096, 2).unwrap();
        for i in 0..5 {
            logs.append(&run("backup", i, 10)).unwrap();
        }
        // Far more than the three files of 4 KiB a tenant keeps.
        for i in 5..500 {
            logs.append(&run("alice/noisy", i, 1000)).unwrap();
        }
        logs.append(&run("backup", 500, 10)).unwrap();
        let reader = JsonlReader::new(dir.path());
        let system = reader
            .query(&Query {
                job: Some("backup".into()),
                ..Query::default()
            })
            .unwrap();
        assert_eq!(system.len(), 6, "every system record is still there");
        let hers = reader
            .query(&Query {
                tenant: Some("alice".into()),
                ..Query::default()
            })
            .unwrap();
        assert!(
            (3..20).contains(&hers.len()),
            "alice keeps what her quota holds: {}",
            hers.len()
        );
        assert_eq!(hers[0].run.as_deref(), Some("r499"));
        // Her log is her directory's, root's alone; the system's is where
        // it always was.
        let her_dir = dir.path().join("tenants/alice");
        assert!(her_dir.join("history.jsonl").is_file());
        assert_eq!(fs::metadata(&her_dir).unwrap().mode() & 0o777, 0o700);
        let system_log = fs::read_to_string(log_path(dir.path())).unwrap();
        assert!(!system_log.contains("alice/"), "{system_log}");
        // All of it, merged newest first.
        let all = reader.query(&Query::default()).unwrap();
        assert_eq!(all.len(), 6 + hers.len());
        assert!(all.windows(2).all(|w| w[0].ts >= w[1].ts), "in ts order");
        assert_eq!(all[0].run.as_deref(), Some("r500"));
        assert_eq!(all[1].run.as_deref(), Some("r499"));
    }

    #[test]
    fn a_name_that_cannot_be_a_directory_stays_in_the_system_log() {
        assert_eq!(tenant_dir(Path::new("/s"), ".."), None);
        assert_eq!(tenant_dir(Path::new("/s"), ""), None);
        assert_eq!(
            tenant_dir(Path::new("/s"), "alice"),
            Some(PathBuf::from("/s/tenants/alice"))
        );
        let dir = tempfile::tempdir().unwrap();
        let mut logs = TenantLogs::open(dir.path(), 1 << 20, 2).unwrap();
        assert!(logs.append(&run("../x", 1, 1)).is_err(), "said");
        let kept = JsonlReader::new(dir.path()).find_run("r1").unwrap();
        assert_eq!(kept.and_then(|r| r.job).as_deref(), Some("../x"), "kept");
        assert!(!dir.path().join("x").exists());
    }

    /// A writer that appends the first `switch` records as the single-file
    /// writer did (users' records in the system's log), then as tenants'
    /// logs do: an upgraded daemon's state directory.
    struct Upgraded {
        old: JsonlHistory,
        new: TenantLogs,
        switch: usize,
        seen: usize,
    }

    impl HistoryWriter for Upgraded {
        fn append(&mut self, record: &Record) -> io::Result<()> {
            self.seen += 1;
            if self.seen <= self.switch {
                self.old.append(record)
            } else {
                self.new.append(record)
            }
        }
        fn health(&self) -> WriterHealth {
            WriterHealth::default()
        }
    }

    /// The conformance kit (its histories mix the system's jobs and two
    /// users'), on tenants' logs rotated at different sizes, read in
    /// chunks of different sizes, after a history of one file or not.
    #[test]
    fn tenants_logs_conform() {
        let n = std::cell::Cell::new(0usize);
        crate::conformance::history_backend(40, || {
            let i = n.get();
            n.set(i + 1);
            let max_bytes = [300u64, 2_000, u64::MAX][i % 3];
            let chunk = [7usize, 64, 1000][(i / 3) % 3];
            let switch = [0usize, 10, 60][(i / 9) % 3];
            let dir = tempfile::tempdir().expect("tempdir");
            let writer = Upgraded {
                old: JsonlHistory::open(dir.path(), max_bytes, 1000).expect("open"),
                new: TenantLogs::open(dir.path(), max_bytes, 1000).expect("open"),
                switch,
                seen: 0,
            };
            let reader = JsonlReader::new(dir.path()).with_chunk_size(chunk);
            crate::conformance::Fresh {
                writer: Box::new(writer),
                reader: Box::new(reader),
                keep: Box::new(dir),
            }
        });
    }
}

/// The rotated files' indexes against a full read: a generated history of
/// a busy job, sparse ones and decoys, rotated into files with a current
/// index, none, a stale one, one of the first (JSON) format, one cut
/// short and one written by someone else; every query for a job must
/// answer what a plain forward read of every line answers.
mod indexes {
    use super::super::index::{narrow, reindex};
    use super::*;

    fn at(i: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + i * 7, 0).expect("valid timestamp")
    }

    const SPARSE: &[&str] = &["sparse-3", "sparse-7", "sparse-150", "we\"ird ü"];

    /// The history's lines, oldest first: runs (a started and a final
    /// line) of `busy` (every third), of 200 sparse jobs (a few runs
    /// each) and of a job whose output names sparse ones, plus missed and
    /// alert lines and daemon starts.
    fn lines() -> Vec<String> {
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut out = Vec::new();
        for i in 0..4000i64 {
            let job = match i % 3 {
                0 => "busy".to_string(),
                _ if i % 97 == 5 => "we\"ird ü".to_string(),
                1 if i % 11 == 0 => "decoy".to_string(),
                _ => format!("sparse-{}", next(200)),
            };
            if i % 500 == 0 {
                out.push(serde_json::to_string(&Record::new(Event::DaemonStarted, at(i))).unwrap());
            }
            if i % 41 == 0 {
                let mut r = Record::new(Event::Missed, at(i));
                r.job = Some(job.clone());
                r.scheduled = Some(at(i - 1));
                out.push(serde_json::to_string(&r).unwrap());
            }
            if i % 53 == 0 {
                let mut r = Record::new(Event::Alert, at(i));
                r.job = Some(job.clone());
                out.push(serde_json::to_string(&r).unwrap());
            }
            let mut r = Record::new(Event::Run, at(i));
            r.job = Some(job.clone());
            r.run = Some(format!("r{i}"));
            r.attempt = Some(1);
            r.trigger = Some(Trigger::Schedule);
            r.status = Some(RunStatus::Started);
            out.push(serde_json::to_string(&r).unwrap());
            r.ts = at(i) + chrono::Duration::seconds(3);
            r.status = Some(match next(20) {
                0 => RunStatus::Failed,
                1 => RunStatus::TimedOut,
                2 => RunStatus::Skipped,
                _ => RunStatus::Succeeded,
            });
            r.duration_ms = Some(next(5000));
            // Lines of different lengths; the decoy's output names sparse
            // jobs as JSON strings (the needle finds them, the job does
            // not match).
            r.output = Some(if job == "decoy" {
                format!("\"sparse-{}\" \"busy\" \"we\\\"ird ü\"", next(200))
            } else {
                "x".repeat(next(600) as usize)
            });
            out.push(serde_json::to_string(&r).unwrap());
        }
        out
    }

    /// Writes `lines` as the writer leaves them (files of about
    /// `max_bytes`, `history.jsonl.1` the newest rotated one), by hand, so
    /// no writer's thread indexes them behind the test's back. The rotated
    /// files, newest first.
    fn write_history(dir: &Path, lines: &[String], max_bytes: usize) -> Vec<PathBuf> {
        let mut files: Vec<Vec<u8>> = vec![Vec::new()];
        for line in lines {
            if files
                .last()
                .is_some_and(|f| f.len() + line.len() + 1 > max_bytes)
            {
                files.push(Vec::new());
            }
            let f = files.last_mut().expect("a file");
            f.extend_from_slice(line.as_bytes());
            f.push(b'\n');
        }
        let mut rotated = Vec::new();
        for (age, bytes) in files.iter().rev().enumerate() {
            let path = if age == 0 {
                log_path(dir)
            } else {
                rotated_path(dir, age as u32)
            };
            fs::write(&path, bytes).expect("write");
            if age > 0 {
                rotated.push(path);
            }
        }
        rotated
    }

    /// An index of the first format (one JSON object of byte ranges, with
    /// `"*"` for all of a job's lines), as rea wrote them before.
    fn json_index(dir: &Path, path: &Path) {
        let bytes = fs::read(path).expect("read");
        let meta = fs::metadata(path).expect("stat");
        let mut jobs: std::collections::HashMap<
            String,
            std::collections::HashMap<String, (u64, u64)>,
        > = Default::default();
        let mut at = 0u64;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            let (start, end) = (at, at + line.len() as u64);
            at = end;
            let Ok(r) = serde_json::from_slice::<Record>(line) else {
                continue;
            };
            let Some(job) = r.job else { continue };
            let key = match r.status {
                Some(s) if r.event == Event::Run => s.as_str(),
                _ => r.event.as_str(),
            };
            let entry = jobs.entry(job).or_default();
            for k in [key, "*"] {
                let range = entry.entry(k.to_string()).or_insert((start, end));
                range.0 = range.0.min(start);
                range.1 = range.1.max(end);
            }
        }
        let index = serde_json::json!({
            "len": meta.len(),
            "mtime": [meta.mtime(), meta.mtime_nsec()],
            "jobs": jobs,
        });
        fs::write(
            dir.join(format!("history.idx.{}", meta.ino())),
            index.to_string(),
        )
        .expect("write");
    }

    fn index_of(dir: &Path, path: &Path) -> PathBuf {
        let ino = fs::metadata(path).expect("stat").ino();
        dir.join(format!("history.idx.{ino}"))
    }

    /// Every record of every file, newest first: what a full read sees.
    fn full_read(dir: &Path) -> Vec<Record> {
        let mut all = forward_read(dir);
        all.reverse();
        all
    }

    /// Every query for a job the console and `rea history` ask, on the
    /// busy job, the sparse ones, one never seen, at two chunk sizes.
    fn every_query_answers_as_a_full_read(dir: &Path) -> usize {
        let mut compared = 0;
        let middle = at(2000);
        let all = full_read(dir);
        let oracle = |q: &Query| -> Vec<Record> {
            all.iter()
                .filter(|r| q.matches(r))
                .take(q.limit.unwrap_or(usize::MAX))
                .cloned()
                .collect()
        };
        for chunk in [DEFAULT_CHUNK_SIZE, 700] {
            let reader = JsonlReader::new(dir).with_chunk_size(chunk);
            for job in ["busy", "absent", "decoy"].iter().chain(SPARSE) {
                for statuses in [
                    vec![],
                    RunStatus::FINAL.to_vec(),
                    vec![RunStatus::Failed],
                    vec![RunStatus::Started],
                    vec![RunStatus::Skipped, RunStatus::TimedOut],
                ] {
                    for (with_missed, with_alerts, runs_only) in [
                        (false, false, true),
                        (true, false, true),
                        (true, true, false),
                        (false, false, false),
                    ] {
                        for limit in [None, Some(1), Some(101)] {
                            for (since, until) in
                                [(None, None), (Some(middle), None), (None, Some(middle))]
                            {
                                let q = Query {
                                    job: Some(job.to_string()),
                                    statuses: statuses.clone(),
                                    since,
                                    until,
                                    limit,
                                    runs_only,
                                    with_missed,
                                    with_alerts,
                                    tenant: None,
                                };
                                let got = reader.query(&q).expect("query");
                                let want = oracle(&q);
                                if got != want {
                                    let at = got.iter().zip(&want).position(|(a, b)| a != b);
                                    panic!(
                                        "{q:?}, chunk {chunk}: {} records, a full read {}, first apart at {at:?}",
                                        got.len(),
                                        want.len()
                                    );
                                }
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        compared
    }

    #[test]
    fn queries_through_indexes_answer_as_a_full_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lines = lines();
        // About 2.6 MB: a dozen rotated files of 200 KB, a few GAPs each.
        let rotated = write_history(dir.path(), &lines, 200 << 10);
        assert!(rotated.len() >= 8, "{} rotated files", rotated.len());
        for path in &rotated {
            index_file(dir.path(), path).expect("index");
        }
        // .2: no index.
        fs::remove_file(index_of(dir.path(), &rotated[1])).expect("rm");
        // .3: stale (the index of the file when it was shorter: an
        // inode reused, a file changed).
        let full = fs::read(&rotated[2]).expect("read");
        let half = full[..full.len() / 2]
            .rsplitn(2, |b| *b == b'\n')
            .nth(1)
            .map_or(0, |h| h.len() + 1);
        fs::write(&rotated[2], &full[..half]).expect("write");
        index_file(dir.path(), &rotated[2]).expect("index");
        fs::write(&rotated[2], &full).expect("write");
        // .4: the first format.
        json_index(dir.path(), &rotated[3]);
        // .5: cut short (a crash before the index was on disk).
        let idx = index_of(dir.path(), &rotated[4]);
        let bytes = fs::read(&idx).expect("read");
        fs::write(&idx, &bytes[..bytes.len() * 2 / 3]).expect("write");
        // .6: written by someone other than the file's owner (root alone
        // can make one).
        let foreign = rustix::process::geteuid().is_root();
        if foreign {
            std::os::unix::fs::chown(index_of(dir.path(), &rotated[5]), Some(65534), None)
                .expect("chown");
        }

        // The fast path is taken where it may be, and only there.
        let spans = |path: &Path, job: &str| {
            let meta = fs::metadata(path).expect("stat");
            (narrow(dir.path(), &meta, job, &["succeeded"]), meta.len())
        };
        let whole = |path: &Path| {
            let (s, len) = spans(path, "absent");
            s == vec![(0, len)]
        };
        for (i, path) in rotated.iter().enumerate() {
            let unusable = i == 1 || i == 2 || i == 4 || (i == 5 && foreign);
            assert_eq!(whole(path), unusable, "{}", path.display());
        }
        let (busy, len) = spans(&rotated[0], "busy");
        let (sparse, _) = spans(&rotated[0], "sparse-3");
        let read = |s: &[(u64, u64)]| s.iter().map(|(a, b)| b - a).sum::<u64>();
        assert!(read(&busy) > len / 2, "busy: {busy:?} of {len}");
        assert!(read(&sparse) < len / 20, "sparse: {sparse:?} of {len}");
        let (old, len4) = spans(&rotated[3], "busy");
        assert_eq!(old.len(), 1, "the first format: one range");
        assert!(read(&old) < len4);

        let compared = every_query_answers_as_a_full_read(dir.path());
        assert!(compared > 1000);

        // The writer's open rewrites every index a query could not use,
        // in the current format; the answers stay the same.
        reindex(dir.path());
        for path in &rotated {
            assert!(!whole(path), "{} was not reindexed", path.display());
            let head = fs::read(index_of(dir.path(), path)).expect("read");
            assert!(
                head.starts_with(b"#rea-history-index 2 "),
                "{}",
                path.display()
            );
        }
        every_query_answers_as_a_full_read(dir.path());
    }
}
