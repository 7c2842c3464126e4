//! Run starts and ends waiting for the database: kept in order while it
//! does not take them, bounded in records *and* bytes as the local history
//! writer's backlog is (`rea_store::history::BACKLOG_MAX_RECORDS`,
//! `BACKLOG_MAX_BYTES`): a record may carry a run's whole captured output,
//! so a count alone could pin hundreds of MiB in the daemon. When either
//! bound is reached the oldest writes are dropped, and counted.

use std::collections::VecDeque;

use rea_store::history::{BACKLOG_MAX_BYTES, BACKLOG_MAX_RECORDS};

/// Something the backlog can weigh.
pub(crate) trait Weighed {
    /// Bytes it keeps in memory (its text fields; the rest is small).
    fn weight(&self) -> usize;
}

/// The bounded queue itself.
#[derive(Debug)]
pub(crate) struct Backlog<W> {
    /// Each write with its weight, weighed once on the way in.
    writes: VecDeque<(W, usize)>,
    bytes: usize,
    max_records: usize,
    max_bytes: usize,
}

impl<W: Weighed> Backlog<W> {
    pub(crate) fn new() -> Backlog<W> {
        Backlog::with_bounds(BACKLOG_MAX_RECORDS, BACKLOG_MAX_BYTES)
    }

    pub(crate) fn with_bounds(max_records: usize, max_bytes: usize) -> Backlog<W> {
        Backlog {
            writes: VecDeque::new(),
            bytes: 0,
            max_records,
            max_bytes,
        }
    }

    /// Queues `w` last; returns how many of the oldest were dropped to make
    /// room (a write heavier than the whole bound is kept alone).
    pub(crate) fn push(&mut self, w: W) -> u64 {
        let weight = w.weight();
        let mut dropped = 0;
        while !self.writes.is_empty()
            && (self.writes.len() >= self.max_records || self.bytes + weight > self.max_bytes)
        {
            self.pop_front();
            dropped += 1;
        }
        self.bytes += weight;
        self.writes.push_back((w, weight));
        dropped
    }

    pub(crate) fn pop_front(&mut self) -> Option<W> {
        let (w, weight) = self.writes.pop_front()?;
        self.bytes -= weight;
        Some(w)
    }

    pub(crate) fn front(&self) -> Option<&W> {
        self.writes.front().map(|(w, _)| w)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &W> {
        self.writes.iter().map(|(w, _)| w)
    }

    pub(crate) fn len(&self) -> usize {
        self.writes.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Text(String);

    impl Weighed for Text {
        fn weight(&self) -> usize {
            self.0.len()
        }
    }

    fn text(n: usize) -> Text {
        Text("x".repeat(n))
    }

    #[test]
    fn bounded_in_records() {
        let mut b = Backlog::with_bounds(3, usize::MAX);
        let dropped: u64 = (0..5).map(|_| b.push(text(1))).sum();
        assert_eq!((b.len(), dropped), (3, 2));
    }

    #[test]
    fn bounded_in_bytes_dropping_the_oldest() {
        let mut b = Backlog::with_bounds(100, 1000);
        for i in 0..10 {
            b.push(Text(format!("{i}{}", "x".repeat(99))));
        }
        assert_eq!((b.len(), b.bytes()), (10, 1000));
        assert_eq!(b.push(text(250)), 3, "three oldest make room for 250 bytes");
        assert_eq!(b.bytes(), 950);
        assert!(b.front().is_some_and(|t| t.0.starts_with('3')));
        while b.pop_front().is_some() {}
        assert_eq!(b.bytes(), 0, "every byte accounted for on the way out");
    }

    #[test]
    fn a_write_heavier_than_the_bound_is_kept_alone() {
        let mut b = Backlog::with_bounds(100, 10);
        b.push(text(5));
        assert_eq!(b.push(text(50)), 1);
        assert_eq!((b.len(), b.bytes()), (1, 50));
    }

    #[test]
    fn at_64_kib_per_record_the_default_bound_is_bytes_not_records() {
        let mut b: Backlog<Text> = Backlog::new();
        let record = 64 << 10;
        let mut dropped = 0;
        for _ in 0..2_000 {
            dropped += b.push(text(record));
        }
        assert!(b.bytes() <= BACKLOG_MAX_BYTES);
        assert_eq!(b.len(), BACKLOG_MAX_BYTES / record);
        assert_eq!(dropped as usize, 2_000 - BACKLOG_MAX_BYTES / record);
    }
}
