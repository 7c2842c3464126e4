//! Text from outside (a job's output, a history record) made safe to show
//! on a terminal: control characters are shown, not sent. C0 and C1
//! controls can retitle, recolour or reprogram the terminal (C1's CSI,
//! U+009B, is ESC [ to many terminals); the bidirectional controls
//! (U+202E RIGHT-TO-LEFT OVERRIDE and its kin) make text read differently
//! from what it is (`gnp.exe` shown as `exe.png`).

/// `text` with control characters shown as `^X` (`cat -v` style: C0 as
/// `^X`, DEL as `^?`, C1 as `M-^X`) and bidirectional controls as
/// `<U+202E>`; newlines and tabs kept.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c => push_shown(&mut out, c),
        }
    }
    out
}

/// `text` for one cell of a table: as [`printable`], with newlines and tabs
/// shown too (they would break the table's lines and columns).
pub(crate) fn cell(text: &str) -> String {
    if !text.chars().any(needs_showing) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_shown(&mut out, c);
    }
    out
}

fn needs_showing(c: char) -> bool {
    let u = c as u32;
    u < 0x20 || (0x7f..0xa0).contains(&u) || is_bidi_control(c)
}

/// The characters that reorder text: LRM, RLM, ALM, the embeddings and
/// overrides (U+202A–U+202E) and the isolates (U+2066–U+2069).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_shown(out: &mut String, c: char) {
    let u = c as u32;
    if u == 0x7f {
        out.push_str("^?");
    } else if u < 0x20 {
        out.push('^');
        out.push(char::from(b'@' + u as u8));
    } else if (0x80..0xa0).contains(&u) {
        out.push_str("M-^");
        out.push(char::from(b'@' + (u - 0x80) as u8));
    } else if is_bidi_control(c) {
        out.push_str(&format!("<U+{u:04X}>"));
    } else {
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(
            printable("ok\tdone\n\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}x é\r\n"),
            "ok\tdone\n^[]0;owned^G^[[2JM-^[x é^M\n"
        );
    }

    #[test]
    fn bidirectional_controls_are_named() {
        assert_eq!(
            printable("invoice\u{202e}fdp.exe \u{2066}x\u{2069}"),
            "invoice<U+202E>fdp.exe <U+2066>x<U+2069>"
        );
    }

    #[test]
    fn a_cell_shows_newlines_and_tabs_and_is_untouched_otherwise() {
        assert_eq!(cell("a\tb\nc"), "a^Ib^Jc");
        assert_eq!(cell("plain é"), "plain é");
    }
}
