//! Text from outside (a job's output or name, a history record) made safe
//! to put on a terminal: control characters are shown, not sent. C0 and C1
//! controls can retitle, recolour or reprogram a terminal (C1's CSI,
//! U+009B, is ESC [ to many terminals); the bidirectional controls (U+202E
//! RIGHT-TO-LEFT OVERRIDE and its kin) make text read differently from
//! what it is (`gnp.exe` shown as `exe.png`). One function serves the CLI
//! (`rea logs`, tables) and `rea top`; they differ only in what they do
//! with the characters that lay text out, [`Layout`].

/// What happens to newlines, tabs and carriage returns; every other
/// control character is shown the same way in all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Printed as it is (`rea logs`): newlines and tabs kept, a carriage
    /// return shown.
    Print,
    /// One cell of a table: newlines and tabs shown too (`^J`, `^I`), as
    /// they would break the table's lines and columns.
    Cell,
    /// Lines drawn on a screen of cells (`rea top`'s output view):
    /// newlines kept, tabs as four spaces, carriage returns (a progress
    /// bar redrawing its line) dropped.
    Screen,
    /// One line drawn on a screen of cells (a name, a message): tabs as
    /// four spaces, newlines and carriage returns shown.
    ScreenLine,
}

/// `text` with control characters shown as `cat -v` does (C0 as `^X`, DEL
/// as `^?`, C1 as `M-^X`) and bidirectional controls as `<U+202E>`;
/// newlines, tabs and carriage returns as `layout` says.
pub fn shown(text: &str, layout: Layout) -> String {
    if !text.chars().any(needs_work) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match (c, layout) {
            ('\n' | '\t', Layout::Print) | ('\n', Layout::Screen) => out.push(c),
            ('\t', Layout::Screen | Layout::ScreenLine) => out.push_str("    "),
            ('\r', Layout::Screen) => {}
            _ => push_shown(&mut out, c),
        }
    }
    out
}

/// Whether `c` is anything but itself in some layout.
fn needs_work(c: char) -> bool {
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
            shown(
                "ok\tdone\n\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}x é\r\n",
                Layout::Print
            ),
            "ok\tdone\n^[]0;owned^G^[[2JM-^[x é^M\n"
        );
        assert_eq!(shown("a\u{7f}b\u{0}", Layout::Cell), "a^?b^@");
    }

    #[test]
    fn bidirectional_controls_are_named() {
        for layout in [Layout::Print, Layout::Cell, Layout::ScreenLine] {
            assert_eq!(
                shown("invoice\u{202e}fdp.exe \u{2066}x\u{2069}", layout),
                "invoice<U+202E>fdp.exe <U+2066>x<U+2069>"
            );
        }
    }

    #[test]
    fn each_layout_treats_newlines_tabs_and_returns_its_own_way() {
        let text = "a\tb\r\nc";
        assert_eq!(shown(text, Layout::Print), "a\tb^M\nc");
        assert_eq!(shown(text, Layout::Cell), "a^Ib^M^Jc");
        assert_eq!(shown(text, Layout::Screen), "a    b\nc");
        assert_eq!(shown(text, Layout::ScreenLine), "a    b^M^Jc");
    }

    #[test]
    fn plain_text_is_untouched() {
        for layout in [
            Layout::Print,
            Layout::Cell,
            Layout::Screen,
            Layout::ScreenLine,
        ] {
            assert_eq!(shown("plain é ✓", layout), "plain é ✓");
        }
    }

    #[test]
    fn every_control_character_is_shown_in_every_layout() {
        // Whatever the layout, nothing below U+0020 but a kept newline or
        // tab, nothing in DEL..C1, and no bidi control reaches the output.
        let all: String = (0u32..0x300)
            .chain(0x2000..0x2070)
            .filter_map(char::from_u32)
            .collect();
        for layout in [
            Layout::Print,
            Layout::Cell,
            Layout::Screen,
            Layout::ScreenLine,
        ] {
            let out = shown(&all, layout);
            assert!(
                out.chars()
                    .all(|c| !needs_work(c) || c == '\n' || c == '\t'),
                "{layout:?}"
            );
            let kept_tab = layout == Layout::Print;
            let kept_newline = matches!(layout, Layout::Print | Layout::Screen);
            assert_eq!(out.contains('\t'), kept_tab, "{layout:?}");
            assert_eq!(out.contains('\n'), kept_newline, "{layout:?}");
        }
    }
}
