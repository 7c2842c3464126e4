//! Aligned text tables for people (`rea list`, `rea status`, `rea history`).
//! Columns are padded to their widest cell; the last column is not padded so
//! lines carry no trailing spaces.

use rea_core::shown::{shown, Layout};

/// A table under construction.
#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new<I, S>(header: I) -> Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            rows: vec![header.into_iter().map(Into::into).collect()],
        }
    }

    pub(crate) fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        // Cells hold text from outside (history records, job files): shown,
        // never sent to the terminal as controls.
        self.rows.push(
            cells
                .into_iter()
                .map(|c| shown(&c.into(), Layout::Cell))
                .collect(),
        );
    }

    /// Rows added after the header.
    pub(crate) fn len(&self) -> usize {
        self.rows.len() - 1
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if i + 1 < row.len() {
                    line.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count()));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_without_trailing_spaces() {
        let mut t = Table::new(["NAME", "NEXT"]);
        t.row(["a", "soon"]);
        t.row(["longer-name", ""]);
        assert_eq!(
            t.render(),
            "NAME         NEXT\na            soon\nlonger-name\n"
        );
        assert_eq!(t.len(), 2);
    }
}
