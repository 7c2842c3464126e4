//! One located finding, for the job file and for crontabs alike.

use std::fmt;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file is refused.
    Error,
    /// Accepted, but not entirely as written (mail without sendmail, a
    /// crontab quirk kept as a comment).
    Warning,
    /// `rea import`: this crontab line was left out of the output.
    NotConverted,
}

/// One finding. `Display` is `FILE:LINE:COL: message` (an error),
/// `FILE:LINE:COL: warning: message` or `FILE:LINE: not converted: message`,
/// followed by an indented `hint:` line if there is one; the line and
/// column are left out when the finding is about the whole file.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based.
    pub line: Option<usize>,
    /// 1-based, in characters.
    pub col: Option<usize>,
    pub severity: Severity,
    pub message: String,
    pub hint: Option<String>,
}

impl Diagnostic {
    /// An error at a position.
    pub fn error(
        file: String,
        line: usize,
        col: usize,
        message: String,
        hint: Option<String>,
    ) -> Diagnostic {
        Diagnostic {
            file,
            line: Some(line),
            col: Some(col),
            severity: Severity::Error,
            message,
            hint,
        }
    }

    /// The same finding as a warning.
    pub fn warning(mut self) -> Diagnostic {
        self.severity = Severity::Warning;
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity != Severity::Warning
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.col {
                write!(f, ":{col}")?;
            }
        }
        let label = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
            Severity::NotConverted => "not converted: ",
        };
        write!(f, ": {label}{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}
