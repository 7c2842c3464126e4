//! `rea top`: a terminal view of a running daemon — an overview, the job
//! table (paged, filtered and sorted by the daemon), a timeline of runs,
//! a run's live output, the one-shots and the cluster's nodes — with
//! confirmed actions (trigger, pause and resume, cancel, kill, edit).
//!
//! It speaks only the control protocol (`rea_proto`), as the CLI does, so
//! the socket's per-user authorization applies unchanged: a user sees and
//! touches her own jobs only. Its requests say `source = "top"` for the
//! audit log.
//!
//! | file | owns |
//! |---|---|
//! | `app.rs` | the state, what a key does, what an answer or event changes (pure) |
//! | `ui.rs` | drawing a frame from that state (ratatui) |
//! | `source.rs` | the requests, on one connection |
//! | `feed.rs` | the threads that make them and wake the loop |
//! | `term.rs` | the terminal in and out, signals, the panic hook |
//! | `text.rs` | durations, zones, glyphs, text made safe to show |
//! | `headless.rs` | the same, drawn off screen, for `rea-bench top` |
//!
//! The loop sleeps in `poll(2)` on the terminal and a wake pipe, and draws
//! after a key, an answer or an event: no timer runs unless a run's
//! elapsed time is on screen (once a second) or the daemon cannot push
//! changes (an older daemon: every two seconds).

mod app;
mod feed;
mod headless;
mod source;
mod term;
mod text;
mod ui;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};
use ratatui::Terminal;
use rustix::event::{PollFd, PollFlags};

use app::{Action, App, Command};
use feed::{Daemon, Tx};
pub use headless::Headless;

/// How `rea top` is started.
pub struct Options {
    pub state_dir: PathBuf,
    /// How long a request may take before it is given up.
    pub timeout: Duration,
    /// Show times in UTC instead of the machine's zone.
    pub utc: bool,
    /// Colours (false under `NO_COLOR`).
    pub color: bool,
    /// The `rea edit` command line (program first) that `e` runs.
    pub edit: Vec<OsString>,
    /// For tests only (`REA_TEST_TOP_PANIC_ON_KEY`, read by the binary):
    /// this key makes rea top panic, so a test can see the panic hook give
    /// the terminal back.
    pub panic_on_key: Option<char>,
}

/// How `rea top` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `q`.
    Quit,
    /// This signal asked it to stop (the terminal was restored).
    Signal(i32),
}

/// Why `rea top` could not run.
#[derive(Debug)]
pub enum TopError {
    /// No daemon listens for the state directory.
    NoDaemon(String),
    Other(String),
}

impl std::fmt::Display for TopError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopError::NoDaemon(m) | TopError::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for TopError {}

/// How often the views are asked again when no subscription pushes
/// changes (an older daemon).
const POLL_EVERY: Duration = Duration::from_secs(2);

/// Runs `rea top` until `q` or a signal; the terminal is restored however
/// it ends.
pub fn run(options: Options) -> Result<Ended, TopError> {
    use std::io::IsTerminal;
    // The daemon first: without one, a plain message and no screen.
    rea_proto::Client::connect(&options.state_dir, options.timeout).map_err(|e| match e {
        rea_proto::ClientError::NoDaemon(m) => TopError::NoDaemon(m),
        rea_proto::ClientError::Io(m) | rea_proto::ClientError::Timeout(m) => TopError::Other(m),
    })?;
    if !std::io::stdout().is_terminal() {
        return Err(TopError::Other(
            "rea top draws on a terminal; for scripts, use rea status --json".into(),
        ));
    }
    let other = |e: std::io::Error| TopError::Other(format!("rea top: {e}"));
    let (wake_rx, wake_tx) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| other(e.into()))?;
    let wake_tx = Arc::new(wake_tx);
    let signals = term::Signals::register(&wake_tx).map_err(other)?;
    let tty = term::tty().map_err(other)?;
    let (tx, rx) = mpsc::channel();
    let tx = Tx::new(tx, wake_tx);
    let daemon = Daemon {
        state_dir: options.state_dir.clone(),
        timeout: options.timeout,
    };
    term::enter().map_err(other)?;
    let result = event_loop(&options, &daemon, tx, &rx, &wake_rx, &tty, &signals);
    term::leave();
    result.map_err(other)
}

fn event_loop(
    options: &Options,
    daemon: &Daemon,
    tx: Tx,
    rx: &mpsc::Receiver<app::Msg>,
    wake: &OwnedFd,
    tty: &OwnedFd,
    signals: &term::Signals,
) -> std::io::Result<Ended> {
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    terminal.clear()?;
    let theme = ui::Theme {
        color: options.color,
    };
    let views = feed::worker("views", daemon.clone(), tx.clone());
    let slow = feed::worker("slow", daemon.clone(), tx.clone());
    let current: feed::Current = Arc::new(AtomicU64::new(0));
    feed::subscribe(daemon.clone(), tx.clone());
    let mut app = App::new(options.utc);
    let mut commands = app.start();
    let mut last_poll = Instant::now();
    loop {
        let now = Utc::now();
        while !commands.is_empty() {
            for command in std::mem::take(&mut commands) {
                match command {
                    Command::Quit => return Ok(Ended::Quit),
                    Command::Act(Action::Edit) => {
                        let said = edit(options, &mut terminal)?;
                        commands.extend(app.apply(app::Msg::Done(said), now));
                    }
                    Command::Act(Action::Trigger(job)) => {
                        let id = app.new_follow(&job);
                        feed::follow(
                            daemon.clone(),
                            tx.clone(),
                            job,
                            id,
                            true,
                            Arc::clone(&current),
                        );
                    }
                    Command::Follow { job } => {
                        let id = app.output.follow;
                        feed::follow(
                            daemon.clone(),
                            tx.clone(),
                            job,
                            id,
                            false,
                            Arc::clone(&current),
                        );
                    }
                    c @ (Command::History { .. } | Command::Act(_)) => {
                        let _ = slow.send(c);
                    }
                    c => {
                        let _ = views.send(c);
                    }
                }
            }
        }
        terminal.draw(|f| ui::draw(f, &app, theme, now))?;

        let polling = app.live == Some(false);
        let timeout = if polling {
            Some(POLL_EVERY.saturating_sub(last_poll.elapsed()))
        } else if app.ticking() {
            Some(Duration::from_millis(
                1000 - u64::from(now.timestamp_subsec_millis()).min(999),
            ))
        } else {
            None
        };
        let timespec = timeout.map(|d| rustix::time::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        let mut fds = [
            PollFd::new(tty, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, timespec.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(sig) = signals.stopped() {
            return Ok(Ended::Signal(sig));
        }
        // The terminal is gone (the ssh connection dropped, the window
        // closed) whether or not a SIGHUP came: as if it had.
        let tty_state = fds[0].revents();
        if tty_state.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
            return Ok(Ended::Signal(signal_hook::consts::SIGHUP));
        }
        feed::drain(wake);
        let now = Utc::now();
        while event::poll(Duration::ZERO)? {
            match event::read()? {
                TermEvent::Key(key) if key.kind != KeyEventKind::Release => {
                    if let (Some(c), event::KeyCode::Char(k)) = (options.panic_on_key, key.code) {
                        assert!(k != c, "REA_TEST_TOP_PANIC_ON_KEY={c}: a test's panic");
                    }
                    commands.extend(app.key(key, now));
                }
                _ => {}
            }
        }
        while let Ok(msg) = rx.try_recv() {
            commands.extend(app.apply(msg, now));
        }
        if polling && last_poll.elapsed() >= POLL_EVERY {
            last_poll = Instant::now();
            commands.extend(app.poll(now));
            if app.resubscribe {
                app.resubscribe = false;
                feed::subscribe(daemon.clone(), tx.clone());
            }
        }
        commands.extend(app.catch_up());
    }
}

/// `rea edit` outside the screen: the terminal as it was while the editor
/// runs, then rea top's screen again, drawn whole.
fn edit(
    options: &Options,
    terminal: &mut Terminal<CrosstermBackend<std::io::Stdout>>,
) -> std::io::Result<Result<String, String>> {
    let Some((program, args)) = options.edit.split_first() else {
        return Ok(Err("rea edit is not available here".into()));
    };
    term::leave();
    let status = std::process::Command::new(program).args(args).status();
    term::enter()?;
    terminal.clear()?;
    Ok(match status {
        Ok(s) if s.success() => Ok("rea edit: done".into()),
        Ok(s) => Err(format!(
            "rea edit ended with {}: nothing was changed",
            s.code()
                .map_or("a signal".to_string(), |c| format!("status {c}"))
        )),
        Err(e) => Err(format!("cannot run rea edit: {e}")),
    })
}
