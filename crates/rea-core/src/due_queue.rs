//! The heap of due instants: scheduled fires, retries, manual triggers and
//! one-shots all wait here. Pure: it never reads the clock (time is passed
//! in) and does no I/O, so it is tested with plain instants.
//!
//! Entries are keyed by `(due, seq)`: the sequence number makes ties
//! deterministic (first inserted, first out) and never collide. Cancelling
//! removes the payload at once and leaves a stale key in the heap that is
//! skipped when it reaches the top; the heap is compacted when stale keys
//! outnumber live ones, so churn (reloads, cancels) cannot grow it without
//! bound.
//!
//! The heap is an implicit binary min-heap of its own (`Keys`), not std's
//! `BinaryHeap`, whose layout is unspecified: the live views read the first
//! entries in due order without popping them ([`DueQueue::in_order`]), a
//! walk of the heap's tree that costs the entries it yields, not the heap.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};

/// Identifies one inserted entry; needed to cancel it. The sequence number
/// tells a live entry from a later one that reuses its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    /// Never zero (sequence numbers start at 1), so `Option<EntryId>` is
    /// 16 bytes, not 24: the engine keeps one per job and per one-shot.
    seq: std::num::NonZeroU64,
    slot: u32,
}

impl EntryId {
    fn new(seq: u64, slot: u32) -> EntryId {
        EntryId {
            seq: std::num::NonZeroU64::new(seq).unwrap_or(std::num::NonZeroU64::MIN),
            slot,
        }
    }
}

/// Where a payload waits. Slots are reused through a free list, so finding
/// an entry is an index, not a hash lookup (a map keyed by sequence number
/// cost twice the memory at a million entries and a cache miss per hash).
#[derive(Debug)]
struct Slot<T> {
    seq: u64,
    due: DateTime<Utc>,
    /// None while the slot is free.
    payload: Option<T>,
}

/// A min-heap of payloads by due instant.
#[derive(Debug)]
pub struct DueQueue<T> {
    /// `(due, seq, slot)`: ordered by due then by insertion; a key whose
    /// slot no longer holds its `seq` is stale.
    heap: Keys,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    live: usize,
    next_seq: u64,
}

impl<T> Default for DueQueue<T> {
    fn default() -> Self {
        DueQueue {
            heap: Keys::default(),
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            next_seq: 1,
        }
    }
}

impl<T> DueQueue<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `payload` due at `due`. O(log n).
    pub fn insert(&mut self, due: DateTime<Utc>, payload: T) -> EntryId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let filled = Slot {
            seq,
            due,
            payload: Some(payload),
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = filled;
                i
            }
            None => {
                // More than 4 billion entries at once would not fit in memory.
                let i = u32::try_from(self.slots.len()).expect("dispatcher slot index");
                self.slots.push(filled);
                i
            }
        };
        self.heap.push((due, seq, slot));
        self.live += 1;
        EntryId::new(seq, slot)
    }

    fn slot(&self, id: EntryId) -> Option<&Slot<T>> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.seq == id.seq.get() && s.payload.is_some())
    }

    /// Empties a live slot and returns its payload.
    fn take(&mut self, id: EntryId) -> Option<T> {
        let s = self.slots.get_mut(id.slot as usize)?;
        if s.seq != id.seq.get() {
            return None;
        }
        let payload = s.payload.take()?;
        self.free.push(id.slot);
        self.live -= 1;
        Some(payload)
    }

    /// Removes an entry; returns its payload if it was still pending.
    /// O(1) now, the heap key is dropped lazily.
    pub fn cancel(&mut self, id: EntryId) -> Option<T> {
        let removed = self.take(id);
        if removed.is_some() && self.heap.len() > 64 && self.heap.len() > 2 * self.live {
            self.compact();
        }
        removed
    }

    /// The due instant of a pending entry.
    pub fn due_of(&self, id: EntryId) -> Option<DateTime<Utc>> {
        self.slot(id).map(|s| s.due)
    }

    /// The payload of a pending entry.
    pub fn get(&self, id: EntryId) -> Option<&T> {
        self.slot(id).and_then(|s| s.payload.as_ref())
    }

    /// The earliest pending due instant.
    pub fn next_due(&mut self) -> Option<DateTime<Utc>> {
        self.drop_stale_top();
        self.heap.peek().map(|(due, _, _)| *due)
    }

    /// Removes and returns the earliest entry if it is due at or before `now`.
    pub fn pop_due(&mut self, now: DateTime<Utc>) -> Option<(EntryId, DateTime<Utc>, T)> {
        self.drop_stale_top();
        let (due, seq, slot) = *self.heap.peek()?;
        if due > now {
            return None;
        }
        self.heap.pop();
        let id = EntryId::new(seq, slot);
        let payload = self.take(id)?;
        Some((id, due, payload))
    }

    /// Number of pending (not cancelled) entries.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Pending entries in no particular order (status views).
    pub fn iter(&self) -> impl Iterator<Item = (EntryId, DateTime<Utc>, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.payload
                .as_ref()
                .map(|p| (EntryId::new(s.seq, i as u32), s.due, p))
        })
    }

    fn drop_stale_top(&mut self) {
        while let Some((_, seq, slot)) = self.heap.peek() {
            let s = &self.slots[*slot as usize];
            if s.seq == *seq && s.payload.is_some() {
                break;
            }
            self.heap.pop();
        }
    }

    fn compact(&mut self) {
        let keys: Vec<_> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.payload.is_some())
            .map(|(i, s)| (s.due, s.seq, i as u32))
            .collect();
        self.heap = Keys::from_vec(keys);
    }

    /// Pending entries in due order (ties in insertion order), read
    /// without changing the queue: each one yielded costs O(log k) for
    /// the k yielded so far, whatever the queue holds, so the first few
    /// due of a million are read at once.
    pub fn in_order(&self) -> impl Iterator<Item = (EntryId, DateTime<Utc>, &T)> + '_ {
        // The frontier of the heap's tree: the smallest key not yet
        // yielded is always in it.
        let mut frontier: BinaryHeap<Reverse<(Key, usize)>> = BinaryHeap::new();
        if let Some(k) = self.heap.0.first() {
            frontier.push(Reverse((*k, 0)));
        }
        std::iter::from_fn(move || loop {
            let Reverse(((due, seq, slot), i)) = frontier.pop()?;
            for child in [2 * i + 1, 2 * i + 2] {
                if let Some(k) = self.heap.0.get(child) {
                    frontier.push(Reverse((*k, child)));
                }
            }
            let s = &self.slots[slot as usize];
            if s.seq == seq {
                if let Some(p) = &s.payload {
                    return Some((EntryId::new(seq, slot), due, p));
                }
            }
        })
    }
}

/// A heap key: `(due, seq, slot)`.
type Key = (DateTime<Utc>, u64, u32);

/// A binary min-heap of keys in an array: the children of `i` are at
/// `2i + 1` and `2i + 2`, each no smaller than its parent (what
/// [`DueQueue::in_order`] walks).
#[derive(Debug, Default)]
struct Keys(Vec<Key>);

impl Keys {
    fn from_vec(keys: Vec<Key>) -> Keys {
        let mut h = Keys(keys);
        for i in (0..h.0.len() / 2).rev() {
            h.sift_down(i);
        }
        h
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn peek(&self) -> Option<&Key> {
        self.0.first()
    }

    fn push(&mut self, k: Key) {
        self.0.push(k);
        let mut i = self.0.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.0[parent] <= self.0[i] {
                break;
            }
            self.0.swap(parent, i);
            i = parent;
        }
    }

    fn pop(&mut self) -> Option<Key> {
        let last = self.0.pop()?;
        let Some(first) = self.0.first_mut() else {
            return Some(last);
        };
        let top = std::mem::replace(first, last);
        self.sift_down(0);
        Some(top)
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.0.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < n && self.0[l] < self.0[least] {
                least = l;
            }
            if r < n && self.0[r] < self.0[least] {
                least = r;
            }
            if least == i {
                return;
            }
            self.0.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    /// What the engine keeps per job and per pending one-shot.
    #[test]
    fn an_optional_entry_id_is_two_words() {
        assert_eq!(std::mem::size_of::<Option<EntryId>>(), 16);
    }

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn pops_in_due_order_and_only_when_due() {
        let mut d = DueQueue::new();
        d.insert(t(30), "c");
        d.insert(t(10), "a");
        d.insert(t(20), "b");
        assert_eq!(d.next_due(), Some(t(10)));
        assert!(d.pop_due(t(9)).is_none());
        assert_eq!(d.pop_due(t(25)).map(|e| e.2), Some("a"));
        assert_eq!(d.pop_due(t(25)).map(|e| e.2), Some("b"));
        assert!(d.pop_due(t(25)).is_none());
        assert_eq!(d.next_due(), Some(t(30)));
    }

    #[test]
    fn ties_keep_insertion_order() {
        let mut d = DueQueue::new();
        for i in 0..100 {
            d.insert(t(5), i);
        }
        let got: Vec<i32> = std::iter::from_fn(|| d.pop_due(t(5)).map(|e| e.2)).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn cancel_removes_and_is_idempotent() {
        let mut d = DueQueue::new();
        let a = d.insert(t(1), "a");
        let b = d.insert(t(2), "b");
        assert_eq!(d.cancel(a), Some("a"));
        assert_eq!(d.cancel(a), None);
        assert_eq!(d.next_due(), Some(t(2)));
        assert_eq!(d.len(), 1);
        assert_eq!(d.due_of(b), Some(t(2)));
        assert_eq!(d.pop_due(t(100)).map(|e| e.0), Some(b));
        assert!(d.is_empty());
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn a_reused_slot_does_not_answer_to_the_old_id() {
        let mut d = DueQueue::new();
        let old = d.insert(t(1), "old");
        assert_eq!(d.cancel(old), Some("old"));
        let new = d.insert(t(5), "new");
        assert_eq!(new.slot, old.slot, "the freed slot is reused");
        assert_eq!(d.get(old), None);
        assert_eq!(d.due_of(old), None);
        assert_eq!(d.cancel(old), None);
        assert_eq!(d.get(new), Some(&"new"));
        // The old key is still in the heap; it must not surface the new entry early.
        assert!(d.pop_due(t(1)).is_none());
        assert_eq!(d.pop_due(t(5)).map(|e| (e.0, e.2)), Some((new, "new")));
        assert_eq!(d.cancel(new), None);
        assert!(d.is_empty());
        assert_eq!(d.iter().count(), 0);
    }

    #[test]
    fn hundred_thousand_entries_with_churn() {
        let mut d = DueQueue::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut ids = Vec::new();
        for i in 0..100_000u32 {
            ids.push((d.insert(t(rng.i64(0..1_000_000)), i), i));
        }
        // Cancel every third entry; the heap must compact instead of keeping them.
        let mut cancelled = std::collections::HashSet::new();
        for (k, (id, v)) in ids.iter().enumerate() {
            if k % 3 == 0 {
                assert_eq!(d.cancel(*id), Some(*v));
                cancelled.insert(*v);
            }
        }
        assert_eq!(d.len(), 100_000 - cancelled.len());
        let mut last = t(-1);
        let mut n = 0;
        while let Some((_, due, v)) = d.pop_due(t(2_000_000)) {
            assert!(due >= last, "out of order");
            assert!(!cancelled.contains(&v), "cancelled entry came out");
            last = due;
            n += 1;
        }
        assert_eq!(n, 100_000 - cancelled.len());
        assert!(d.heap.len() <= 1, "stale keys left: {}", d.heap.len());
    }

    /// `in_order` yields what popping would, in the same order, and
    /// leaves the queue as it was.
    #[test]
    fn in_order_reads_what_pops_would_give() {
        let mut d = DueQueue::new();
        let mut rng = fastrand::Rng::with_seed(11);
        let mut ids = Vec::new();
        for i in 0..5_000u32 {
            // Few distinct instants: ties must come out in insertion order.
            ids.push(d.insert(t(rng.i64(0..300)), i));
        }
        for id in ids.iter().step_by(4) {
            d.cancel(*id);
        }
        for _ in 0..100 {
            d.pop_due(t(20));
        }
        let read: Vec<(DateTime<Utc>, u32)> = d.in_order().map(|(_, due, v)| (due, *v)).collect();
        assert_eq!(read.len(), d.len());
        let first: Vec<_> = d.in_order().take(10).map(|(_, due, v)| (due, *v)).collect();
        assert_eq!(first, read[..10]);
        let popped: Vec<(DateTime<Utc>, u32)> =
            std::iter::from_fn(|| d.pop_due(t(1_000)).map(|e| (e.1, e.2))).collect();
        assert_eq!(read, popped);
        assert_eq!(d.in_order().count(), 0);
    }

    #[test]
    fn heavy_cancel_churn_keeps_the_heap_small() {
        let mut d = DueQueue::new();
        for i in 0..10_000 {
            let id = d.insert(t(i) + Duration::milliseconds(1), i);
            d.cancel(id);
        }
        assert!(d.heap.len() <= 130, "heap grew to {}", d.heap.len());
    }
}
