//! Files of lines sorted by a key (the bytes before each line's tab),
//! where one key's line is found by bisecting the file's bytes with a few
//! `pread`s, never reading the file whole: a closed day of the roll-up
//! (`days`) and a rotated file's index (`index`). A line without a tab (a
//! header) is no key's line.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Splits a line at its tab: (key, the rest).
pub(super) fn split(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let tab = memchr::memchr(b'\t', line)?;
    Some((&line[..tab], &line[tab + 1..]))
}

/// The rest of the line whose key is `want` among the first `len` bytes of
/// `file` (lines sorted by key), `None` if there is none.
pub(super) fn bisect(file: &File, len: u64, want: &[u8]) -> io::Result<Option<Vec<u8>>> {
    // `lo` is always the start of a line whose key is below `want` (or 0).
    let (mut lo, mut hi) = (0u64, len);
    while hi - lo > 4096 {
        let mid = lo + (hi - lo) / 2;
        let start = next_line(file, mid)?;
        if start >= hi {
            hi = mid;
            continue;
        }
        let (line, _) = line_at(file, start, len)?;
        match split(&line) {
            Some((k, _)) if k < want => lo = start,
            _ => hi = start,
        }
    }
    let mut at = lo;
    while at < len {
        let (line, next) = line_at(file, at, len)?;
        if let Some((k, rest)) = split(&line) {
            if k == want {
                return Ok(Some(rest.to_vec()));
            }
            if k > want {
                return Ok(None);
            }
        }
        at = next;
    }
    Ok(None)
}

/// The start of the first line that begins after `pos` (past the first
/// newline at or after `pos - 1`).
fn next_line(file: &File, pos: u64) -> io::Result<u64> {
    let mut at = pos.saturating_sub(1);
    let mut buf = [0u8; 4096];
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(u64::MAX);
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(at + i as u64 + 1);
        }
        at += n as u64;
    }
}

/// The line starting at `pos` (without its newline), read no further than
/// `len`, and where the next begins.
pub(super) fn line_at(file: &File, pos: u64, len: u64) -> io::Result<(Vec<u8>, u64)> {
    let mut line = Vec::new();
    let mut buf = [0u8; 4096];
    let mut at = pos;
    while at < len {
        let want = buf
            .len()
            .min(usize::try_from(len - at).unwrap_or(usize::MAX));
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            break;
        }
        if let Some(i) = memchr::memchr(b'\n', &buf[..n]) {
            line.extend_from_slice(&buf[..i]);
            return Ok((line, at + i as u64 + 1));
        }
        line.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    Ok((line, u64::MAX))
}
