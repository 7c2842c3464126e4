//! Reading a file's lines backwards in chunks, so the newest records are
//! found without reading a huge log from its beginning.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Positional reads, so the backwards reader works on files and, in tests,
/// on plain byte slices.
pub trait ReadAt {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = self
            .get(start..start + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// The lines of the first `len` bytes of a source, last line first, read in
/// chunks of `chunk` bytes from the end. Memory is one chunk plus the line
/// being assembled, so a line longer than a chunk works and a huge file
/// costs nothing. Empty lines are skipped; the `\n` is not included; a last
/// line without `\n` (torn) is returned like any other. A line longer than
/// `max_line` is returned empty: its bytes are never held (a corrupt file
/// without newlines must not make a reader load it whole).
pub struct RevLines<R> {
    src: R,
    /// Offset of the first byte not yet read from `src`.
    pos: u64,
    chunk: usize,
    buf: Vec<u8>,
    /// `buf[..filled]` is read but not yet returned.
    filled: usize,
    max_line: usize,
}

impl<R: ReadAt> RevLines<R> {
    pub fn new(src: R, len: u64, chunk: usize) -> RevLines<R> {
        RevLines {
            src,
            pos: len,
            chunk: chunk.max(1),
            buf: Vec::new(),
            filled: 0,
            max_line: rea_core::record::MAX_LINE_BYTES,
        }
    }

    /// Lines longer than this are returned empty (tests use small ones).
    pub fn with_max_line(mut self, max_line: usize) -> RevLines<R> {
        self.max_line = max_line.max(1);
        self
    }

    /// The previous line, or `None` at the start of the source.
    pub fn prev_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        // Pieces of a line that spans chunks, last piece first.
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        let mut held = 0usize;
        // The line grew past `max_line`: its pieces were dropped.
        let mut overlong = false;
        loop {
            if self.filled == 0 {
                if self.pos == 0 {
                    if overlong {
                        return Ok(Some(Vec::new()));
                    }
                    return Ok((!pieces.is_empty()).then(|| join_reversed(pieces)));
                }
                let n = self.pos.min(self.chunk as u64) as usize;
                self.buf.resize(n, 0);
                let offset = self.pos - n as u64;
                if let Err(e) = self.src.read_exact_at(&mut self.buf[..n], offset) {
                    self.pos = 0;
                    return Err(e);
                }
                self.pos = offset;
                self.filled = n;
            }
            let data = &self.buf[..self.filled];
            match data.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    let tail = &data[i + 1..];
                    self.filled = i;
                    if overlong || held + tail.len() > self.max_line {
                        return Ok(Some(Vec::new()));
                    }
                    if pieces.is_empty() {
                        if !tail.is_empty() {
                            return Ok(Some(tail.to_vec()));
                        }
                    } else {
                        pieces.push(tail.to_vec());
                        return Ok(Some(join_reversed(pieces)));
                    }
                }
                None => {
                    held += data.len();
                    if held > self.max_line {
                        overlong = true;
                        pieces = Vec::new();
                    } else if !overlong {
                        pieces.push(data.to_vec());
                    }
                    self.filled = 0;
                }
            }
        }
    }
}

impl<R: ReadAt> Iterator for RevLines<R> {
    type Item = io::Result<Vec<u8>>;
    fn next(&mut self) -> Option<Self::Item> {
        self.prev_line().transpose()
    }
}

fn join_reversed(pieces: Vec<Vec<u8>>) -> Vec<u8> {
    let mut pieces = pieces.into_iter().rev();
    let mut line = pieces.next().unwrap_or_default();
    for piece in pieces {
        line.extend_from_slice(&piece);
    }
    line
}
