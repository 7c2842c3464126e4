//! A run's output as it comes, for whoever follows it (`rea logs -f`,
//! `rea trigger --follow`). The output reader pushes every read into the
//! run's [`Tap`], which holds the bounded capture the history keeps and,
//! only while someone follows, a ring of the last [`LIVE_RING`] bytes.
//! Each [`Follower`] is just an offset into that ring: one that falls
//! behind by more than the ring loses the bytes in between and is told how
//! many, so a follower that stops reading costs the daemon nothing and
//! never slows the run. What a follower gets is text: UTF-8 sequences cut
//! between reads are carried to the next read, never mangled.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::capture::{grown_capacity, Capture};
use super::utf8::utf8_complete_prefix;

/// The bytes kept for followers while anyone follows a run: how far one
/// may fall behind before it loses output.
const LIVE_RING: usize = 256 * 1024;

/// The most bytes one [`Chunk`] carries.
const MAX_CHUNK: usize = 64 * 1024;

/// One run's output, shared by its reader and its followers. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub(crate) struct Tap {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Short critical sections only (a copy of one read at most), and
    /// never held across an await: a std mutex, as in Tokio's own advice.
    state: Mutex<State>,
    /// Woken after every read while someone follows, and at the end.
    wake: Notify,
}

#[derive(Debug)]
struct State {
    /// What the history keeps; taken by the supervisor at the end.
    capture: Option<Capture>,
    /// Bytes the run wrote so far.
    total: u64,
    /// The last bytes written, while anyone follows.
    ring: VecDeque<u8>,
    followers: usize,
    /// The output pipe is closed: nothing more will come.
    ended: bool,
}

impl Tap {
    pub(super) fn new(capture: Capture) -> Tap {
        Tap {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    capture: Some(capture),
                    total: 0,
                    ring: VecDeque::new(),
                    followers: 0,
                    ended: false,
                }),
                wake: Notify::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    /// Bytes the run just wrote; returns the run's output so far, in bytes.
    pub(super) fn push(&self, data: &[u8]) -> u64 {
        let (followed, total) = {
            let mut s = self.state();
            if let Some(capture) = &mut s.capture {
                capture.push(data);
            }
            s.total += data.len() as u64;
            if s.followers > 0 {
                push_ring(&mut s.ring, data);
            }
            (s.followers > 0, s.total)
        };
        if followed {
            self.shared.wake.notify_waiters();
        }
        total
    }

    /// The output is over: hands the capture to the supervisor. Followers
    /// get what they have not read yet, then the end.
    pub(super) fn finish(&self) -> Capture {
        let capture = {
            let mut s = self.state();
            s.ended = true;
            s.capture.take().unwrap_or_default()
        };
        self.shared.wake.notify_waiters();
        capture
    }

    /// A new follower: first what the capture holds so far (head, the
    /// count of what it left out, tail), then everything from now on.
    pub(crate) fn follow(&self) -> Follower {
        let mut s = self.state();
        s.followers += 1;
        let mut follower = Follower {
            shared: Arc::clone(&self.shared),
            offset: s.total,
            backlog: VecDeque::new(),
            text: Utf8Stream::default(),
            missed: s.capture.is_none(),
            done: false,
        };
        if let Some(capture) = &s.capture {
            let (head, omitted, tail) = capture.parts();
            drop(s);
            follower.queue(0, &head);
            follower.queue(omitted, &tail);
        }
        follower
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent plain data.
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Appends `data` to the ring, dropping its oldest bytes beyond
/// [`LIVE_RING`], never reserving more than that.
fn push_ring(ring: &mut VecDeque<u8>, data: &[u8]) {
    let keep = &data[data.len().saturating_sub(LIVE_RING)..];
    let excess = (ring.len() + keep.len()).saturating_sub(LIVE_RING);
    ring.drain(..excess);
    let wanted = grown_capacity(ring.capacity(), ring.len() + keep.len(), LIVE_RING);
    ring.reserve_exact(wanted - ring.len());
    ring.extend(keep);
}

/// What a follower gets at a time: bytes it lost (it fell behind, or the
/// capture had left them out), then text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub skipped: u64,
    pub text: String,
}

/// One reader of a run's live output.
#[derive(Debug)]
pub struct Follower {
    shared: Arc<Shared>,
    /// The next byte of the run's output this follower reads.
    offset: u64,
    /// The capture's content when it started following.
    backlog: VecDeque<Chunk>,
    text: Utf8Stream,
    /// It started following after the output had been handed over: all
    /// of it is in the run's record instead.
    missed: bool,
    done: bool,
}

impl Follower {
    /// Whether this follower came too late for any of the output (it is
    /// all in the run's final record).
    pub fn missed_output(&self) -> bool {
        self.missed
    }

    fn queue(&mut self, skipped: u64, bytes: &[u8]) {
        let mut skipped = self.text.gap(skipped);
        let mut pieces = bytes.chunks(MAX_CHUNK).peekable();
        if pieces.peek().is_none() && skipped > 0 {
            self.backlog.push_back(Chunk {
                skipped,
                text: String::new(),
            });
        }
        for piece in pieces {
            let (lost, text) = self.text.decode(piece);
            self.backlog.push_back(Chunk {
                skipped: skipped + lost,
                text,
            });
            skipped = 0;
        }
    }

    /// The next chunk, waiting for the run to write one; `None` once the
    /// output is over and everything was read.
    pub async fn next(&mut self) -> Option<Chunk> {
        loop {
            if let Some(chunk) = self.backlog.pop_front() {
                return Some(chunk);
            }
            if self.done {
                return None;
            }
            let shared = Arc::clone(&self.shared);
            let notified = shared.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = lock(&shared);
                let start = s.total - s.ring.len() as u64;
                if self.offset < s.total {
                    let gap = start.saturating_sub(self.offset);
                    let from = self.offset.max(start);
                    let at = usize::try_from(from - start).unwrap_or(usize::MAX);
                    let n = s.ring.len().saturating_sub(at).min(MAX_CHUNK);
                    let bytes: Vec<u8> = s.ring.range(at..at + n).copied().collect();
                    drop(s);
                    self.offset = from + n as u64;
                    self.queue(gap, &bytes);
                    continue;
                }
                if s.ended {
                    drop(s);
                    self.done = true;
                    let rest = self.text.finish();
                    if !rest.is_empty() {
                        self.backlog.push_back(Chunk {
                            skipped: 0,
                            text: rest,
                        });
                    }
                    continue;
                }
            }
            notified.await;
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut s = lock(&self.shared);
        s.followers -= 1;
        if s.followers == 0 {
            s.ring = VecDeque::new();
        }
    }
}

/// Bytes to text across reads: a character cut at the end of one read is
/// carried to the next; after a gap, the continuation bytes of a
/// character whose start was lost are dropped (and counted as lost).
/// Bytes that are not UTF-8 at all become U+FFFD, as in the history.
#[derive(Debug, Default)]
struct Utf8Stream {
    carry: Vec<u8>,
    /// Continuation bytes still to drop after a gap.
    strip: usize,
}

impl Utf8Stream {
    /// `n` bytes were lost before the next ones; returns how many bytes
    /// are lost in all (a carried partial character goes with them).
    fn gap(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        self.strip = 3;
        let lost = n + self.carry.len() as u64;
        self.carry.clear();
        lost
    }

    /// The next bytes: (bytes dropped, text).
    fn decode(&mut self, bytes: &[u8]) -> (u64, String) {
        let mut bytes = bytes;
        let mut lost = 0;
        while self.strip > 0 {
            match bytes.first() {
                Some(&b) if b & 0xC0 == 0x80 => {
                    bytes = &bytes[1..];
                    lost += 1;
                    self.strip -= 1;
                }
                Some(_) => self.strip = 0,
                None => break,
            }
        }
        self.carry.extend_from_slice(bytes);
        let complete = utf8_complete_prefix(&self.carry);
        let text = String::from_utf8_lossy(&self.carry[..complete]).into_owned();
        self.carry.drain(..complete);
        (lost, text)
    }

    /// The end: a partial character left over, as U+FFFD.
    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Everything a follower gets until the end, as (skipped, text).
    async fn drain(f: &mut Follower) -> (u64, String) {
        let (mut skipped, mut text) = (0, String::new());
        while let Some(c) = f.next().await {
            skipped += c.skipped;
            text.push_str(&c.text);
        }
        (skipped, text)
    }

    #[test]
    fn characters_cut_between_reads_arrive_whole() {
        let mut s = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(s.decode(&[b'a', euro[0]]), (0, "a".to_string()));
        assert_eq!(s.decode(&euro[1..2]), (0, String::new()));
        assert_eq!(s.decode(&[euro[2], b'b']), (0, "€b".to_string()));
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn after_a_gap_a_headless_character_is_dropped_and_counted() {
        let mut s = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(s.decode(&[b'a', euro[0]]), (0, "a".to_string()));
        // The carried first byte is lost with the gap.
        assert_eq!(s.gap(10), 11);
        assert_eq!(s.decode(&[euro[1], euro[2], b'z']), (2, "z".to_string()));
        // A cut character at the very end comes out as U+FFFD.
        assert_eq!(s.decode(&[euro[0]]), (0, String::new()));
        assert_eq!(s.finish(), "\u{fffd}");
    }

    #[test]
    fn a_follower_gets_the_capture_so_far_then_live_output() {
        rt().block_on(async {
            let tap = Tap::new(Capture::new(8));
            tap.push(b"0123456789");
            let mut f = tap.follow();
            tap.push("é!".as_bytes());
            let _ = tap.finish();
            // The capture kept "0123" and "6789": 2 bytes left out.
            assert_eq!(drain(&mut f).await, (2, "01236789é!".to_string()));
            assert!(!f.missed_output());
        });
    }

    #[test]
    fn a_follower_that_falls_behind_is_told_how_much_it_lost() {
        rt().block_on(async {
            let tap = Tap::new(Capture::new(0));
            let mut f = tap.follow();
            let block = vec![b'x'; 100_000];
            let mut written = 0u64;
            for _ in 0..10 {
                tap.push(&block);
                written += block.len() as u64;
            }
            let _ = tap.finish();
            let (skipped, text) = drain(&mut f).await;
            assert_eq!(skipped + text.len() as u64, written);
            assert_eq!(text.len(), LIVE_RING);
            // The ring never held more than its size.
            assert!(lock(&tap.shared).ring.capacity() <= LIVE_RING);
        });
    }

    #[test]
    fn the_ring_exists_only_while_someone_follows() {
        let tap = Tap::new(Capture::new(64));
        tap.push(b"before");
        assert_eq!(lock(&tap.shared).ring.capacity(), 0);
        let f = tap.follow();
        tap.push(b"during");
        assert_eq!(lock(&tap.shared).ring.len(), 6);
        drop(f);
        assert_eq!(lock(&tap.shared).ring.capacity(), 0);
        tap.push(b"after");
        assert_eq!(lock(&tap.shared).ring.capacity(), 0);
        assert_eq!(tap.finish().finish().text, "beforeduringafter");
    }

    #[test]
    fn a_follower_after_the_end_learns_it_missed_the_output() {
        rt().block_on(async {
            let tap = Tap::new(Capture::new(16));
            tap.push(b"all of it");
            let _ = tap.finish();
            let mut f = tap.follow();
            assert!(f.missed_output());
            assert_eq!(f.next().await, None);
        });
    }
}
