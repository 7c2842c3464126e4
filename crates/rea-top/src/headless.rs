//! `rea top` without a terminal, for `rea-bench`: the same state, keys,
//! requests and drawing as the screen's loop, with each key's requests
//! made at once on the caller's thread and the frame drawn into ratatui's
//! `TestBackend`. So a measured key is the key, the daemon's answer it
//! needs, and the redrawn frame; only the terminal's write is left out.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::Terminal;

use crate::app::{App, Command, Msg};
use crate::feed::{self, Daemon, Tx};
use crate::source::Source;
use crate::ui::{self, Theme};

/// rea top drawn off screen.
pub struct Headless {
    source: Source,
    app: App,
    terminal: Terminal<TestBackend>,
    events: Option<mpsc::Receiver<Msg>>,
    daemon: Daemon,
}

impl Headless {
    /// Connects, asks what `rea top` asks first (the overview, the first
    /// page of jobs, the one-shots) and draws the first frame.
    pub fn open(
        state_dir: &Path,
        timeout: Duration,
        width: u16,
        height: u16,
    ) -> Result<Headless, String> {
        let daemon = Daemon {
            state_dir: state_dir.to_path_buf(),
            timeout,
        };
        let source = daemon.source()?;
        let terminal = Terminal::new(TestBackend::new(width, height)).map_err(|e| e.to_string())?;
        let mut h = Headless {
            source,
            app: App::new(true),
            terminal,
            events: None,
            daemon,
        };
        let commands = h.app.start();
        h.run(commands)?;
        h.draw()?;
        Ok(h)
    }

    fn run(&mut self, mut commands: Vec<Command>) -> Result<(), String> {
        while !commands.is_empty() {
            for c in std::mem::take(&mut commands) {
                let msg = match c {
                    Command::Overview => Msg::Overview(Box::new(self.source.overview())),
                    Command::Jobs { seq, query } => Msg::Jobs {
                        seq,
                        append: query.cursor.is_some(),
                        page: self.source.jobs(&query),
                    },
                    Command::Pending => Msg::Pending(self.source.pending()),
                    Command::History { seq, since } => Msg::History {
                        seq,
                        records: self.source.history(since),
                    },
                    // Changes are not benchmarked here.
                    Command::Act(_) | Command::Follow { .. } | Command::Quit => continue,
                };
                commands.extend(self.app.apply(msg, Utc::now()));
            }
        }
        Ok(())
    }

    fn draw(&mut self) -> Result<(), String> {
        let now = Utc::now();
        let app = &self.app;
        self.terminal
            .draw(|f| ui::draw(f, app, Theme { color: true }, now))
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A key as named: `Down`, `Up`, `PageDown`, `PageUp`, `Enter`, `Esc`,
    /// `Tab`, or one character; then its requests, then the frame.
    pub fn key(&mut self, name: &str) -> Result<(), String> {
        let code = match name {
            "Down" => KeyCode::Down,
            "Up" => KeyCode::Up,
            "PageDown" => KeyCode::PageDown,
            "PageUp" => KeyCode::PageUp,
            "Enter" => KeyCode::Enter,
            "Esc" => KeyCode::Esc,
            "Tab" => KeyCode::Tab,
            one => KeyCode::Char(one.chars().next().unwrap_or(' ')),
        };
        let commands = self.app.key(KeyEvent::from(code), Utc::now());
        self.run(commands)?;
        self.draw()
    }

    /// Subscribes, as the screen does; returns once the subscription's
    /// overview is in.
    pub fn subscribe(&mut self) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        let (_read, write) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .map_err(|e| e.to_string())?;
        feed::subscribe(self.daemon.clone(), Tx::new(tx, Arc::new(write)));
        self.events = Some(rx);
        self.until(Duration::from_secs(30), |app, _| app.live.is_some())?;
        if self.app.live != Some(true) {
            return Err("the daemon does not answer subscriptions".into());
        }
        Ok(())
    }

    /// Applies pushed events as they come, drawing after each, until the
    /// frame shows `text`; when that frame was drawn.
    pub fn wait_for(&mut self, text: &str, timeout: Duration) -> Result<DateTime<Utc>, String> {
        self.until(timeout, |_, screen| screen.contains(text))?;
        Ok(Utc::now())
    }

    fn until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&App, &str) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.app, &self.screen()) {
                return Ok(());
            }
            let Some(rx) = &self.events else {
                return Err("not subscribed".into());
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = rx
                .recv_timeout(left)
                .map_err(|_| "nothing came in time".to_string())?;
            let commands = self.app.apply(msg, Utc::now());
            self.run(commands)?;
            self.draw()?;
        }
    }

    /// The last frame, as text (a line per row).
    pub fn screen(&self) -> String {
        let buf = self.terminal.backend().buffer();
        let mut text =
            String::with_capacity((buf.area.width as usize + 1) * buf.area.height as usize);
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                text.push_str(buf[(x, y)].symbol());
            }
            text.push('\n');
        }
        text
    }
}
