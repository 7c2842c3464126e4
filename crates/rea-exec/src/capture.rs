//! A run's output: the pipe that stdout and stderr share, read as it comes
//! into a bounded [`Capture`] (the first and the last half of the limit), so
//! a job is never blocked on a full pipe and a flood never grows memory.
//! Each read also goes to the run's [`Tap`] (live followers) and, with
//! `[daemon] job_output = "journal"`, line by line to the journal.

use std::collections::VecDeque;
use std::io;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use rea_core::run::Output;

use super::tap::Tap;
use crate::journald::Lines;
use crate::utf8::{is_continuation, utf8_complete_prefix};

/// Size of one read from the output pipe once a job has written more than
/// [`FIRST_CHUNK`] at once; before, reads go to a buffer on the stack, so a
/// job that writes little (most) costs no 64 KiB allocation.
const READ_CHUNK: usize = 64 * 1024;
const FIRST_CHUNK: usize = 4 * 1024;

/// What the pipe grows to once a job has written [`CHATTY`] bytes, so a
/// chatty job blocks less often on a busy daemon. Only then: the larger ring
/// costs every run that needs none of it (and counts against the user's
/// pipe-buffer quota). The kernel may refuse, which is harmless.
const PIPE_SIZE: usize = 1024 * 1024;
/// Four of Linux's default pipes.
const CHATTY: usize = 256 * 1024;

/// Reads the combined output pipe until EOF, or until told to stop (then it
/// takes what is already in the pipe and returns), and hands the capture
/// over.
///
/// One read per `readable()`: that call counts against Tokio's cooperative
/// budget, so a job flooding its output cannot starve the daemon's other
/// tasks, even on a current-thread runtime.
pub(super) async fn read_output(
    pipe: pipe::Receiver,
    tap: Tap,
    mut journal: Option<Lines>,
    stop: oneshot::Receiver<()>,
) -> Capture {
    read(&pipe, &tap, &mut journal, stop).await;
    if let Some(journal) = &mut journal {
        journal.finish().await;
    }
    tap.finish()
}

async fn read(
    pipe: &pipe::Receiver,
    tap: &Tap,
    journal: &mut Option<Lines>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut buf = Buf::default();
    loop {
        tokio::select! {
            ready = pipe.readable() => {
                if ready.is_err() {
                    return;
                }
            }
            _ = &mut stop => {
                drain(pipe, &mut buf, tap, journal).await;
                return;
            }
        }
        match pipe.try_read(buf.get()) {
            Ok(0) => return,
            Ok(n) => {
                let total = got(&buf.get()[..n], tap, journal).await;
                buf.after_read(n);
                // The read that takes the job's output past CHATTY bytes.
                if total >= CHATTY as u64 && total - (n as u64) < CHATTY as u64 {
                    let _ = rustix::pipe::fcntl_setpipe_size(pipe, PIPE_SIZE);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// Hands `data` on; the job's output so far, in bytes.
async fn got(data: &[u8], tap: &Tap, journal: &mut Option<Lines>) -> u64 {
    let total = tap.push(data);
    if let Some(journal) = journal {
        journal.push(data).await;
    }
    total
}

/// The read buffer: on the stack until a read fills it, then 64 KiB on the
/// heap.
struct Buf {
    small: [u8; FIRST_CHUNK],
    big: Vec<u8>,
}

impl Default for Buf {
    fn default() -> Buf {
        Buf {
            small: [0; FIRST_CHUNK],
            big: Vec::new(),
        }
    }
}

impl Buf {
    fn get(&mut self) -> &mut [u8] {
        if self.big.is_empty() {
            &mut self.small
        } else {
            &mut self.big
        }
    }

    /// After a read of `n` bytes (handed on already): a read that fills the
    /// small buffer moves reads to the big one.
    fn after_read(&mut self, n: usize) {
        if self.big.is_empty() && n == self.small.len() {
            self.big = vec![0; READ_CHUNK];
        }
    }
}

/// Takes what the pipe holds now. Bounded, because a writer outside the
/// group may keep it from ever being empty.
async fn drain(pipe: &pipe::Receiver, buf: &mut Buf, tap: &Tap, journal: &mut Option<Lines>) {
    let mut left = PIPE_SIZE + READ_CHUNK;
    while left > 0 {
        match pipe.try_read(buf.get()) {
            Ok(0) => return,
            Ok(n) => {
                got(&buf.get()[..n], tap, journal).await;
                buf.after_read(n);
                left = left.saturating_sub(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Bounded capture: the first half of the limit, and a ring of the last half.
/// Memory never exceeds the limit, however much the job writes.
#[derive(Debug, Default)]
pub(super) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    pub(super) fn new(limit: usize) -> Capture {
        let tail_cap = limit / 2;
        Capture {
            head: Vec::new(),
            head_cap: limit - tail_cap,
            tail: VecDeque::new(),
            tail_cap,
            total: 0,
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = (self.head_cap - self.head.len()).min(data.len());
        let wanted = grown_capacity(
            self.head.capacity(),
            self.head.len() + to_head,
            self.head_cap,
        );
        self.head.reserve_exact(wanted - self.head.len());
        self.head.extend_from_slice(&data[..to_head]);
        let rest = &data[to_head..];
        // Make room first, so the ring never holds (or reserves) more than
        // its share of the limit.
        let keep = if rest.len() >= self.tail_cap {
            self.tail.clear();
            &rest[rest.len() - self.tail_cap..]
        } else {
            let excess = (self.tail.len() + rest.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..excess);
            rest
        };
        let wanted = grown_capacity(
            self.tail.capacity(),
            self.tail.len() + keep.len(),
            self.tail_cap,
        );
        self.tail.reserve_exact(wanted - self.tail.len());
        self.tail.extend(keep);
    }

    /// What it holds now: the head, how many bytes it left out, the tail.
    pub(super) fn parts(&self) -> (Vec<u8>, u64, Vec<u8>) {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let omitted = self.total - (self.head.len() + tail.len()) as u64;
        (self.head.clone(), omitted, tail)
    }

    pub(super) fn finish(self) -> Output {
        let Capture {
            mut head,
            tail,
            total,
            ..
        } = self;
        let mut tail = Vec::from(tail);
        let kept = (head.len() + tail.len()) as u64;
        if kept == total {
            head.extend_from_slice(&tail);
            return Output {
                text: String::from_utf8_lossy(&head).into_owned(),
                total_bytes: total,
            };
        }
        // Cut at character boundaries, counting the cut bytes as omitted.
        let head_len = utf8_complete_prefix(&head);
        head.truncate(head_len);
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| is_continuation(b))
            .count();
        tail.drain(..skip);
        let omitted = total - (head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(&head).into_owned();
        text.push_str(&omission_marker(omitted));
        text.push_str(&String::from_utf8_lossy(&tail));
        Output {
            text,
            total_bytes: total,
        }
    }
}

/// The capacity to reserve for `needed` bytes: doubling as usual, but never
/// beyond `cap`, so a capture's memory stays within its limit.
pub(super) fn grown_capacity(capacity: usize, needed: usize, cap: usize) -> usize {
    if needed <= capacity {
        capacity
    } else {
        needed.max(capacity.saturating_mul(2)).min(cap).max(needed)
    }
}

/// The line put between the head and the tail of a capped output.
pub(super) fn omission_marker(omitted: u64) -> String {
    format!("\n… {omitted} bytes omitted …\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_without_limit_hit_is_verbatim() {
        let mut capture = Capture::new(10);
        capture.push(b"abc");
        capture.push(b"defghij");
        assert_eq!(
            capture.finish(),
            Output {
                text: "abcdefghij".to_string(),
                total_bytes: 10
            }
        );
    }

    #[test]
    fn capture_ring_keeps_the_last_bytes_across_pushes() {
        let mut capture = Capture::new(6);
        for chunk in [&b"abcd"[..], b"efgh", b"ijklmnop", b"q", b"rs"] {
            capture.push(chunk);
        }
        let output = capture.finish();
        assert_eq!(output.total_bytes, 19);
        assert_eq!(output.text, format!("abc{}qrs", omission_marker(13)));
    }

    #[test]
    fn capture_memory_stays_within_the_limit() {
        let mut capture = Capture::new(1000);
        for size in [1, 7, 300, 64 * 1024, 3, 499, 501, 10_000] {
            capture.push(&vec![b'x'; size]);
            assert!(
                capture.head.capacity() <= 500,
                "{}",
                capture.head.capacity()
            );
            assert!(
                capture.tail.capacity() <= 500,
                "{}",
                capture.tail.capacity()
            );
        }
        assert_eq!(capture.total, 76_847);
    }

    #[test]
    fn capture_does_not_split_characters() {
        // "é" is 2 bytes, "€" is 3: the head cut falls inside "é", the tail
        // cut inside "€".
        let mut capture = Capture::new(8);
        capture.push("aaaé".as_bytes());
        capture.push(&[b'-'; 10]);
        capture.push("€bc".as_bytes());
        let output = capture.finish();
        assert_eq!(output.total_bytes, 20);
        assert_eq!(output.text, format!("aaa{}bc", omission_marker(15)));
    }

    #[test]
    fn capture_with_zero_limit_keeps_only_the_count() {
        let mut capture = Capture::new(0);
        capture.push(b"xyz");
        let output = capture.finish();
        assert_eq!(output.text, omission_marker(3));
        assert_eq!(output.total_bytes, 3);
        assert_eq!(Capture::new(0).finish(), Output::default());
    }
}
