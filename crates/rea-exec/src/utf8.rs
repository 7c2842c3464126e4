//! Where a UTF-8 text may be cut: the capture's head and tail, the tap's
//! carried bytes and the journal's long lines never split a character.

pub(crate) fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Length of `bytes` without a UTF-8 character cut off at its end.
pub(crate) fn utf8_complete_prefix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let at = bytes.len() - back;
        let byte = bytes[at];
        if is_continuation(byte) {
            continue;
        }
        let width = match byte {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            // Not UTF-8 anyway; lossy conversion will deal with it.
            _ => return bytes.len(),
        };
        return if width > back { at } else { bytes.len() };
    }
    bytes.len()
}
