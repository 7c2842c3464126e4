//! Why a command did not succeed: the text for the user and the exit
//! status. Commands return `Result<ExitCode, Failure>`; only `main` prints a
//! failure and exits, so a command never ends the process behind the back
//! of code that still has something to flush or drop.

use std::fmt;
use std::process::ExitCode;

use crate::cli::exit;

/// A command's failure. `Display` is exactly what goes to stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// One of `cli::exit`.
    code: i32,
    /// Printed as is (may span lines; empty prints nothing).
    text: String,
}

impl Failure {
    /// `rea: MESSAGE`, exiting with `code`.
    pub(crate) fn new(code: i32, message: impl fmt::Display) -> Failure {
        Failure {
            code,
            text: format!("rea: {message}"),
        }
    }

    /// Lines that stand on their own (located diagnostics), then an
    /// optional `rea: SUMMARY` line.
    pub(crate) fn lines<I, T>(code: i32, lines: I, summary: Option<String>) -> Failure
    where
        I: IntoIterator<Item = T>,
        T: fmt::Display,
    {
        let mut text: Vec<String> = lines.into_iter().map(|l| l.to_string()).collect();
        text.extend(summary.map(|s| format!("rea: {s}")));
        Failure {
            code,
            text: text.join("\n"),
        }
    }

    /// A status to exit with, nothing more to say (already said).
    pub(crate) fn silent(code: i32) -> Failure {
        Failure {
            code,
            text: String::new(),
        }
    }

    /// `rea: MESSAGE` for a runtime failure (exit 1).
    pub(crate) fn runtime(message: impl fmt::Display) -> Failure {
        Failure::new(exit::FAILURE, message)
    }

    /// `rea: MESSAGE` for a wrong command line or job file (exit 2).
    pub(crate) fn invalid(message: impl fmt::Display) -> Failure {
        Failure::new(exit::INVALID, message)
    }

    /// This failure with `  hint: HINT` on a line of its own.
    pub(crate) fn hint(mut self, hint: impl fmt::Display) -> Failure {
        self.text.push_str(&format!("\n  hint: {hint}"));
        self
    }

    /// This failure with `rea: NOTE` on a line of its own.
    pub(crate) fn with_note(mut self, note: impl fmt::Display) -> Failure {
        self.text.push_str(&format!("\nrea: {note}"));
        self
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        exit_code(self.code)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Failure {}

/// What a command ends with.
pub(crate) type CommandResult = Result<ExitCode, Failure>;

/// `cli::exit` codes (and a triggered job's own status) as an `ExitCode`.
pub(crate) fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Success.
pub(crate) fn ok() -> CommandResult {
    Ok(ExitCode::SUCCESS)
}
