//! The terminal: raw mode and the alternate screen going in, and the same
//! undone on every way out — `q`, an error, a panic (a hook restores it
//! before the message is printed, so the message is readable), SIGTERM,
//! SIGHUP and SIGINT (caught as flags the loop reads, so the loop itself
//! restores and returns). Leaving is idempotent, and `rea edit` leaves
//! and comes back the same way.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use ratatui::crossterm::{cursor, execute, terminal};

/// Whether the terminal is in rea top's mode now (what a panic must undo).
static ENTERED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Raw mode, the alternate screen, the cursor hidden.
pub(crate) fn enter() -> io::Result<()> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            previous(info);
        }));
    });
    terminal::enable_raw_mode()?;
    ENTERED.store(true, Ordering::SeqCst);
    execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
    Ok(())
}

/// The terminal as it was: safe to call more than once, and from the
/// panic hook.
pub(crate) fn leave() {
    if ENTERED.swap(false, Ordering::SeqCst) {
        let mut out = io::stdout();
        let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
        let _ = out.flush();
    }
}

/// The signals that end rea top, and the one that redraws it; each also
/// writes to the loop's wake pipe.
pub(crate) struct Signals {
    /// The number of the signal that asked to stop (0: none).
    pub(crate) stop: Arc<AtomicUsize>,
}

impl Signals {
    pub(crate) fn register(wake: &OwnedFd) -> io::Result<Signals> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGWINCH};
        let stop = Arc::new(AtomicUsize::new(0));
        for sig in [SIGTERM, SIGHUP, SIGINT] {
            signal_hook::flag::register_usize(sig, Arc::clone(&stop), sig as usize)?;
        }
        for sig in [SIGTERM, SIGHUP, SIGINT, SIGWINCH] {
            // The handler writes to its own copy of the pipe, kept open
            // for the life of the process (a handler may run at any time).
            let fd = rustix::io::fcntl_dupfd_cloexec(wake, 3).map_err(io::Error::from)?;
            signal_hook::low_level::pipe::register(sig, fd)?;
        }
        Ok(Signals { stop })
    }

    pub(crate) fn stopped(&self) -> Option<i32> {
        match self.stop.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n as i32),
        }
    }
}

/// The terminal's input, for the loop's poll: a copy of standard input
/// when it is the terminal, else /dev/tty opened (as crossterm reads it).
pub(crate) fn tty() -> io::Result<OwnedFd> {
    use std::io::IsTerminal;
    if io::stdin().is_terminal() {
        return Ok(rustix::io::fcntl_dupfd_cloexec(io::stdin(), 3)?);
    }
    Ok(rustix::fs::open(
        "/dev/tty",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}
