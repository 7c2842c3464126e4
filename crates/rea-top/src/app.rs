//! What `rea top` shows and what a key does, as plain state: keys and the
//! daemon's answers go in, [`Command`]s (requests to make) come out. No
//! terminal, socket or clock here (`now` is an argument), so every key and
//! every answer is tested with values, and the screens with ratatui's
//! `TestBackend` (`ui`).

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use rea_core::record::Record;
use rea_proto::live::{Event, JobSort, JobSummary, JobsPage, JobsQuery, Overview, RunNow};
use rea_proto::protocol::PendingReply;
use rea_proto::Selector;

/// The views, in the order of their number keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Overview,
    Jobs,
    Timeline,
    Output,
    OneShots,
    Nodes,
}

impl View {
    pub(crate) const ALL: [View; 6] = [
        View::Overview,
        View::Jobs,
        View::Timeline,
        View::Output,
        View::OneShots,
        View::Nodes,
    ];

    pub(crate) fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Jobs => "Jobs",
            View::Timeline => "Timeline",
            View::Output => "Output",
            View::OneShots => "One-shots",
            View::Nodes => "Nodes",
        }
    }

    fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}

/// A change to the daemon's state, asked for by key and confirmed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Run the job now and follow its output.
    Trigger(String),
    Pause(Selector),
    Resume(Selector),
    /// A pending one-shot, by id.
    Cancel(String),
    /// A run by id, or every running run of a job.
    Kill(String),
    /// `rea edit`, outside the screen.
    Edit,
}

impl Action {
    /// The question the confirmation asks.
    pub(crate) fn question(&self) -> String {
        match self {
            Action::Trigger(job) => format!("Run {job} now and follow its output?"),
            Action::Pause(s) => format!("Pause {}?", selector_text(s)),
            Action::Resume(s) => format!("Resume {}?", selector_text(s)),
            Action::Cancel(id) => format!("Cancel one-shot {id}?"),
            Action::Kill(target) => format!("Kill {target} (it ends as killed, no retry)?"),
            Action::Edit => "Leave the screen to edit your job file (rea edit)?".to_string(),
        }
    }
}

fn selector_text(s: &Selector) -> String {
    match (&s.tag, s.jobs.as_slice()) {
        (Some(tag), _) => format!("every job tagged {tag}"),
        (None, [one]) => format!("job {one}"),
        (None, jobs) => format!("jobs {}", jobs.join(", ")),
    }
}

/// What the main loop is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
    Overview,
    /// A page of jobs; `seq` tells the answer to the latest question from
    /// an older one's.
    Jobs {
        seq: u64,
        query: JobsQuery,
    },
    Pending,
    History {
        seq: u64,
        since: DateTime<Utc>,
    },
    Act(Action),
    /// Follow a job's output (its running run, or its next).
    Follow {
        job: String,
    },
    Quit,
}

/// A prompt over the screen: a y/n confirmation, or a line of input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Prompt {
    Confirm(Action),
    Input { purpose: Input, text: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// The job table's filter: `text`, `tag:T`, `state:S`, `tenant:U`,
    /// `failing`, space separated.
    Filter,
    PauseTag,
    ResumeTag,
}

impl Input {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Input::Filter => "filter (text tag:T state:S tenant:U failing)",
            Input::PauseTag => "pause every job tagged",
            Input::ResumeTag => "resume every job tagged",
        }
    }
}

/// An answer, an event or a line of output, handed to [`App::apply`].
#[derive(Debug)]
pub(crate) enum Msg {
    Overview(Box<Result<Overview, String>>),
    Jobs {
        seq: u64,
        append: bool,
        page: Result<JobsPage, String>,
    },
    Pending(Result<PendingReply, String>),
    History {
        seq: u64,
        records: Result<Vec<Record>, String>,
    },
    /// An action's answer, as a line for the status bar.
    Done(Result<String, String>),
    /// Something changed what the views show (a followed run ended).
    Changed,
    /// A trigger started (or queued: `state`) `run` of `job`: its output
    /// follows.
    Triggered {
        job: String,
        run: String,
        state: String,
    },
    Event(Event),
    /// The subscription is answered: changes will be pushed.
    Live,
    /// The subscription is not answered (an older daemon): the views are
    /// refreshed on a timer instead.
    NoSubscription {
        why: String,
        retry: bool,
    },
    /// The followed output: `follow` is the id of the follow it belongs to.
    Output {
        follow: u64,
        line: OutputLine,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OutputLine {
    Run {
        run: String,
    },
    Text(String),
    Skipped(u64),
    /// The run's end, as a sentence.
    Ended(String),
    Failed(String),
}

/// The job table: one filter and sort, the rows loaded so far.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    pub(crate) query: JobsQuery,
    pub(crate) rows: Vec<JobSummary>,
    pub(crate) matching: usize,
    pub(crate) next: Option<String>,
    pub(crate) selected: usize,
    pub(crate) seq: u64,
    pub(crate) loading: bool,
    pub(crate) filter_text: String,
    pub(crate) error: Option<String>,
}

/// How many summaries a page asks for: a few screens.
pub(crate) const PAGE: usize = 200;
/// How many rows the table keeps loaded at most (pages past it are
/// fetched again by a new query, never held).
pub(crate) const MAX_ROWS: usize = 5000;
/// Output lines kept for the output view.
pub(crate) const OUTPUT_LINES: usize = 2000;
/// The timeline's spans, in hours (`+`/`-`).
pub(crate) const SPANS: [i64; 5] = [1, 3, 6, 12, 24];

#[derive(Debug, Default)]
pub(crate) struct Output {
    pub(crate) job: Option<String>,
    pub(crate) run: Option<String>,
    pub(crate) lines: VecDeque<String>,
    /// The last line, while it has no newline yet.
    pub(crate) partial: String,
    pub(crate) end: Option<String>,
    /// Which follow the lines belong to (a new follow drops the old one's).
    pub(crate) follow: u64,
    /// Lines scrolled back from the end.
    pub(crate) scroll: usize,
}

impl Output {
    fn push_text(&mut self, text: &str) {
        let text = crate::text::shown_keep_newlines(text);
        let mut pieces = text.split('\n').peekable();
        while let Some(piece) = pieces.next() {
            self.partial.push_str(piece);
            if pieces.peek().is_some() {
                let line = std::mem::take(&mut self.partial);
                self.lines.push_back(line);
                if self.lines.len() > OUTPUT_LINES {
                    self.lines.pop_front();
                }
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Timeline {
    pub(crate) span: usize,
    pub(crate) records: Vec<Record>,
    pub(crate) seq: u64,
    pub(crate) loading: bool,
    pub(crate) error: Option<String>,
    pub(crate) since: Option<DateTime<Utc>>,
}

impl Timeline {
    pub(crate) fn hours(&self) -> i64 {
        SPANS[self.span.min(SPANS.len() - 1)]
    }
}

#[derive(Debug)]
pub(crate) struct App {
    pub(crate) view: View,
    pub(crate) help: bool,
    pub(crate) utc: bool,
    pub(crate) overview: Option<Overview>,
    pub(crate) overview_error: Option<String>,
    /// The running run selected in the overview.
    pub(crate) running_selected: usize,
    pub(crate) jobs: Jobs,
    pub(crate) timeline: Timeline,
    pub(crate) output: Output,
    pub(crate) pending: Option<PendingReply>,
    pub(crate) pending_selected: usize,
    pub(crate) pending_error: Option<String>,
    /// Cluster node events seen since `rea top` started, newest last.
    pub(crate) node_events: VecDeque<(DateTime<Utc>, String, String)>,
    pub(crate) prompt: Option<Prompt>,
    /// The status bar's line; true when it reports a failure.
    pub(crate) message: Option<(String, bool)>,
    /// Whether a subscription pushes changes (else a timer refreshes).
    pub(crate) live: Option<bool>,
    /// The subscription was lost with its connection: the timer tries
    /// again.
    pub(crate) resubscribe: bool,
    /// The overview is out of date (an event changed what it counts).
    pub(crate) overview_stale: bool,
    pub(crate) overview_loading: bool,
    pub(crate) pending_stale: bool,
    pub(crate) follows: u64,
    pub(crate) quit: bool,
}

impl App {
    pub(crate) fn new(utc: bool) -> App {
        App {
            view: View::Overview,
            help: false,
            utc,
            overview: None,
            overview_error: None,
            running_selected: 0,
            jobs: Jobs::default(),
            timeline: Timeline {
                span: 1,
                ..Timeline::default()
            },
            output: Output::default(),
            pending: None,
            pending_selected: 0,
            pending_error: None,
            node_events: VecDeque::new(),
            prompt: None,
            message: None,
            live: None,
            resubscribe: false,
            overview_stale: false,
            overview_loading: false,
            pending_stale: false,
            follows: 0,
            quit: false,
        }
    }

    /// What to ask for first: the overview, the first page, the one-shots.
    pub(crate) fn start(&mut self) -> Vec<Command> {
        let mut out = vec![self.refresh_overview()];
        out.push(self.refetch_jobs());
        out.push(Command::Pending);
        out
    }

    fn refresh_overview(&mut self) -> Command {
        self.overview_loading = true;
        self.overview_stale = false;
        Command::Overview
    }

    /// The first page again, for the table's current filter and sort.
    fn refetch_jobs(&mut self) -> Command {
        self.jobs.seq += 1;
        self.jobs.loading = true;
        let mut query = self.jobs.query.clone();
        query.cursor = None;
        query.limit = Some(PAGE);
        Command::Jobs {
            seq: self.jobs.seq,
            query,
        }
    }

    fn more_jobs(&mut self) -> Option<Command> {
        let cursor = self.jobs.next.clone()?;
        if self.jobs.loading || self.jobs.rows.len() >= MAX_ROWS {
            return None;
        }
        self.jobs.seq += 1;
        self.jobs.loading = true;
        let mut query = self.jobs.query.clone();
        query.cursor = Some(cursor);
        query.limit = Some(PAGE);
        Some(Command::Jobs {
            seq: self.jobs.seq,
            query,
        })
    }

    fn fetch_history(&mut self, now: DateTime<Utc>) -> Command {
        self.timeline.seq += 1;
        self.timeline.loading = true;
        let since = now - Duration::hours(self.timeline.hours());
        self.timeline.since = Some(since);
        Command::History {
            seq: self.timeline.seq,
            since,
        }
    }

    /// The requests a timer asks for when no subscription pushes changes.
    pub(crate) fn poll(&mut self, now: DateTime<Utc>) -> Vec<Command> {
        let mut out = Vec::new();
        if !self.overview_loading {
            out.push(self.refresh_overview());
        }
        match self.view {
            View::Jobs if !self.jobs.loading => out.push(self.refetch_jobs()),
            View::OneShots => out.push(Command::Pending),
            View::Timeline if !self.timeline.loading => out.push(self.fetch_history(now)),
            _ => {}
        }
        out
    }

    /// What events left out of date, asked for once at a time.
    pub(crate) fn catch_up(&mut self) -> Vec<Command> {
        let mut out = Vec::new();
        if self.overview_stale && !self.overview_loading {
            out.push(self.refresh_overview());
        }
        if self.pending_stale && self.view == View::OneShots {
            self.pending_stale = false;
            out.push(Command::Pending);
        }
        out
    }

    fn switch(&mut self, view: View, now: DateTime<Utc>) -> Vec<Command> {
        self.view = view;
        self.help = false;
        match view {
            View::Timeline if self.timeline.since.is_none() && !self.timeline.loading => {
                vec![self.fetch_history(now)]
            }
            View::OneShots => {
                self.pending_stale = false;
                vec![Command::Pending]
            }
            View::Jobs if self.jobs.rows.is_empty() && !self.jobs.loading => {
                vec![self.refetch_jobs()]
            }
            _ => Vec::new(),
        }
    }

    /// A key: what it changes, and what must be asked of the daemon.
    pub(crate) fn key(&mut self, key: KeyEvent, now: DateTime<Utc>) -> Vec<Command> {
        if key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('d'))
        {
            self.quit = true;
            return vec![Command::Quit];
        }
        if let Some(prompt) = self.prompt.take() {
            return self.prompt_key(prompt, key);
        }
        // The status bar's last news has been seen: the keys come back.
        self.message = None;
        if self.help {
            // Any key closes the help; `q` still quits.
            self.help = false;
            if key.code != KeyCode::Char('q') {
                return Vec::new();
            }
        }
        match key.code {
            KeyCode::Char('q') => {
                self.quit = true;
                return vec![Command::Quit];
            }
            KeyCode::Char('?') | KeyCode::F(1) => {
                self.help = true;
                return Vec::new();
            }
            KeyCode::Tab => {
                let next = View::ALL[(self.view.index() + 1) % View::ALL.len()];
                return self.switch(next, now);
            }
            KeyCode::BackTab => {
                let n = View::ALL.len();
                let prev = View::ALL[(self.view.index() + n - 1) % n];
                return self.switch(prev, now);
            }
            KeyCode::Char(c @ '1'..='6') => {
                let view = View::ALL[(c as u8 - b'1') as usize];
                return self.switch(view, now);
            }
            KeyCode::Char('e') => {
                self.prompt = Some(Prompt::Confirm(Action::Edit));
                return Vec::new();
            }
            _ => {}
        }
        match self.view {
            View::Overview => self.overview_key(key),
            View::Jobs => self.jobs_key(key),
            View::Timeline => self.timeline_key(key, now),
            View::Output => self.output_key(key),
            View::OneShots => self.oneshots_key(key),
            View::Nodes => Vec::new(),
        }
    }

    fn prompt_key(&mut self, prompt: Prompt, key: KeyEvent) -> Vec<Command> {
        match prompt {
            Prompt::Confirm(action) => match key.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => {
                    if let Action::Trigger(job) = &action {
                        self.message = Some((format!("triggering {job}…"), false));
                    }
                    vec![Command::Act(action)]
                }
                _ => {
                    self.message = Some(("cancelled: nothing was changed".into(), false));
                    Vec::new()
                }
            },
            Prompt::Input { purpose, mut text } => match key.code {
                KeyCode::Esc => Vec::new(),
                KeyCode::Enter => self.input_done(purpose, text.trim().to_string()),
                KeyCode::Backspace => {
                    text.pop();
                    self.prompt = Some(Prompt::Input { purpose, text });
                    Vec::new()
                }
                KeyCode::Char(c) if !c.is_control() => {
                    if text.len() < 200 {
                        text.push(c);
                    }
                    self.prompt = Some(Prompt::Input { purpose, text });
                    Vec::new()
                }
                _ => {
                    self.prompt = Some(Prompt::Input { purpose, text });
                    Vec::new()
                }
            },
        }
    }

    fn input_done(&mut self, purpose: Input, text: String) -> Vec<Command> {
        match purpose {
            Input::Filter => {
                let sort = self.jobs.query.sort;
                let descending = self.jobs.query.descending;
                self.jobs.query = parse_filter(&text);
                self.jobs.query.sort = sort;
                self.jobs.query.descending = descending;
                self.jobs.filter_text = text;
                self.jobs.selected = 0;
                vec![self.refetch_jobs()]
            }
            Input::PauseTag | Input::ResumeTag if text.is_empty() => Vec::new(),
            Input::PauseTag => {
                self.prompt = Some(Prompt::Confirm(Action::Pause(tag_selector(text))));
                Vec::new()
            }
            Input::ResumeTag => {
                self.prompt = Some(Prompt::Confirm(Action::Resume(tag_selector(text))));
                Vec::new()
            }
        }
    }

    fn overview_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let running: &[RunNow] = self
            .overview
            .as_ref()
            .map(|o| o.running.as_slice())
            .unwrap_or(&[]);
        let n = running.len();
        match key.code {
            KeyCode::Up => {
                self.running_selected = self.running_selected.saturating_sub(1);
            }
            KeyCode::Down => {
                self.running_selected = (self.running_selected + 1).min(n.saturating_sub(1));
            }
            KeyCode::Char('K') | KeyCode::Char('x') => {
                if let Some(run) = running.get(self.running_selected) {
                    self.prompt = Some(Prompt::Confirm(Action::Kill(run.run.clone())));
                }
            }
            KeyCode::Enter | KeyCode::Char('o') => {
                if let Some(run) = running.get(self.running_selected) {
                    let job = run.job.clone();
                    return self.follow(job);
                }
            }
            _ => {}
        }
        Vec::new()
    }

    fn selected_job(&self) -> Option<&JobSummary> {
        self.jobs.rows.get(self.jobs.selected)
    }

    fn jobs_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let n = self.jobs.rows.len();
        let mut out = Vec::new();
        let step = |sel: usize, by: isize| -> usize {
            let v = sel as isize + by;
            v.clamp(0, n.saturating_sub(1) as isize) as usize
        };
        match key.code {
            KeyCode::Up => self.jobs.selected = step(self.jobs.selected, -1),
            KeyCode::Down => self.jobs.selected = step(self.jobs.selected, 1),
            KeyCode::PageUp => self.jobs.selected = step(self.jobs.selected, -15),
            KeyCode::PageDown => self.jobs.selected = step(self.jobs.selected, 15),
            KeyCode::Home => self.jobs.selected = 0,
            KeyCode::End => self.jobs.selected = n.saturating_sub(1),
            KeyCode::Char('/') => {
                self.prompt = Some(Prompt::Input {
                    purpose: Input::Filter,
                    text: self.jobs.filter_text.clone(),
                });
            }
            KeyCode::Char('f') => {
                self.jobs.query.failing = !self.jobs.query.failing;
                self.jobs.selected = 0;
                out.push(self.refetch_jobs());
            }
            KeyCode::Char('s') => {
                self.jobs.query.sort = next_sort(self.jobs.query.sort);
                self.jobs.selected = 0;
                out.push(self.refetch_jobs());
            }
            KeyCode::Char('S') => {
                self.jobs.query.descending = !self.jobs.query.descending;
                self.jobs.selected = 0;
                out.push(self.refetch_jobs());
            }
            KeyCode::Esc
                if self.jobs.query != JobsQuery::default() || !self.jobs.filter_text.is_empty() =>
            {
                self.jobs.query = JobsQuery::default();
                self.jobs.filter_text.clear();
                self.jobs.selected = 0;
                out.push(self.refetch_jobs());
            }
            KeyCode::Char('t') => {
                if let Some(job) = self.selected_job() {
                    self.prompt = Some(Prompt::Confirm(Action::Trigger(job.name.clone())));
                }
            }
            KeyCode::Char('p') => {
                if let Some(job) = self.selected_job() {
                    self.prompt = Some(Prompt::Confirm(Action::Pause(job_selector(&job.name))));
                }
            }
            KeyCode::Char('r') => {
                if let Some(job) = self.selected_job() {
                    self.prompt = Some(Prompt::Confirm(Action::Resume(job_selector(&job.name))));
                }
            }
            KeyCode::Char('P') | KeyCode::Char('R') => {
                let purpose = if key.code == KeyCode::Char('P') {
                    Input::PauseTag
                } else {
                    Input::ResumeTag
                };
                let text = self
                    .jobs
                    .query
                    .tag
                    .clone()
                    .or_else(|| self.selected_job().and_then(|j| j.tags.first().cloned()))
                    .unwrap_or_default();
                self.prompt = Some(Prompt::Input { purpose, text });
            }
            KeyCode::Char('K') | KeyCode::Char('x') => {
                if let Some(job) = self.selected_job() {
                    if job.running > 0 {
                        self.prompt = Some(Prompt::Confirm(Action::Kill(job.name.clone())));
                    } else {
                        self.message = Some((format!("{} has no run in progress", job.name), true));
                    }
                }
            }
            KeyCode::Enter | KeyCode::Char('o') => {
                if let Some(job) = self.selected_job() {
                    let job = job.name.clone();
                    out.extend(self.follow(job));
                }
            }
            _ => {}
        }
        // Near the end of what is loaded: the next page.
        if self.jobs.selected + 30 >= self.jobs.rows.len() {
            out.extend(self.more_jobs());
        }
        out
    }

    fn timeline_key(&mut self, key: KeyEvent, now: DateTime<Utc>) -> Vec<Command> {
        match key.code {
            KeyCode::Char('+') | KeyCode::Char('=') if self.timeline.span + 1 < SPANS.len() => {
                self.timeline.span += 1;
                vec![self.fetch_history(now)]
            }
            KeyCode::Char('-') if self.timeline.span > 0 => {
                self.timeline.span -= 1;
                vec![self.fetch_history(now)]
            }
            KeyCode::Char('g') => vec![self.fetch_history(now)],
            _ => Vec::new(),
        }
    }

    fn output_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let n = self.output.lines.len();
        match key.code {
            KeyCode::Up => self.output.scroll = (self.output.scroll + 1).min(n),
            KeyCode::Down => self.output.scroll = self.output.scroll.saturating_sub(1),
            KeyCode::PageUp => self.output.scroll = (self.output.scroll + 15).min(n),
            KeyCode::PageDown => self.output.scroll = self.output.scroll.saturating_sub(15),
            KeyCode::End => self.output.scroll = 0,
            KeyCode::Char('K') | KeyCode::Char('x') => {
                if let (Some(run), None) = (&self.output.run, &self.output.end) {
                    self.prompt = Some(Prompt::Confirm(Action::Kill(run.clone())));
                }
            }
            _ => {}
        }
        Vec::new()
    }

    fn oneshots_key(&mut self, key: KeyEvent) -> Vec<Command> {
        let n = self.pending.as_ref().map_or(0, |p| p.oneshots.len());
        match key.code {
            KeyCode::Up => self.pending_selected = self.pending_selected.saturating_sub(1),
            KeyCode::Down => {
                self.pending_selected = (self.pending_selected + 1).min(n.saturating_sub(1));
            }
            KeyCode::Char('c') | KeyCode::Delete => {
                let chosen = self
                    .pending
                    .as_ref()
                    .and_then(|p| p.oneshots.get(self.pending_selected));
                if let Some(one) = chosen {
                    self.prompt = Some(Prompt::Confirm(Action::Cancel(one.id.clone())));
                }
            }
            KeyCode::Char('g') => return vec![Command::Pending],
            _ => {}
        }
        Vec::new()
    }

    /// Shows the output view following `job`'s running (or next) run.
    fn follow(&mut self, job: String) -> Vec<Command> {
        self.follows += 1;
        self.output = Output {
            job: Some(job.clone()),
            follow: self.follows,
            ..Output::default()
        };
        self.view = View::Output;
        vec![Command::Follow { job }]
    }

    /// A new follow's id (the trigger's own, for `trigger --follow`).
    pub(crate) fn new_follow(&mut self, job: &str) -> u64 {
        self.follows += 1;
        self.output = Output {
            job: Some(job.to_string()),
            follow: self.follows,
            ..Output::default()
        };
        self.view = View::Output;
        self.follows
    }

    /// An answer, an event or output: what it changes, and what else must
    /// be asked for.
    pub(crate) fn apply(&mut self, msg: Msg, now: DateTime<Utc>) -> Vec<Command> {
        match msg {
            Msg::Overview(r) => {
                self.overview_loading = false;
                match *r {
                    Ok(o) => {
                        self.overview_error = None;
                        let n = o.running.len();
                        self.running_selected = self.running_selected.min(n.saturating_sub(1));
                        self.overview = Some(o);
                    }
                    Err(e) => self.overview_error = Some(e),
                }
            }
            Msg::Jobs { seq, append, page } => {
                if seq != self.jobs.seq {
                    return Vec::new();
                }
                self.jobs.loading = false;
                match page {
                    Ok(page) => {
                        self.jobs.error = None;
                        if append {
                            self.jobs.rows.extend(page.jobs);
                        } else {
                            self.jobs.rows = page.jobs;
                        }
                        self.jobs.matching = page.matching;
                        self.jobs.next = page.next;
                        let n = self.jobs.rows.len();
                        self.jobs.selected = self.jobs.selected.min(n.saturating_sub(1));
                    }
                    Err(e) => self.jobs.error = Some(e),
                }
            }
            Msg::Pending(r) => match r {
                Ok(p) => {
                    self.pending_error = None;
                    let n = p.oneshots.len();
                    self.pending_selected = self.pending_selected.min(n.saturating_sub(1));
                    self.pending = Some(p);
                }
                Err(e) => self.pending_error = Some(e),
            },
            Msg::History { seq, records } => {
                if seq == self.timeline.seq {
                    self.timeline.loading = false;
                    match records {
                        Ok(r) => {
                            self.timeline.error = None;
                            self.timeline.records = r;
                        }
                        Err(e) => self.timeline.error = Some(e),
                    }
                }
            }
            Msg::Done(r) => {
                self.message = Some(match r {
                    Ok(m) => (m, false),
                    Err(e) => (e, true),
                });
                // What the action changed shows at once, event or not.
                let mut out = vec![self.refresh_overview(), self.refetch_jobs()];
                if self.view == View::OneShots {
                    out.push(Command::Pending);
                }
                return out;
            }
            Msg::Changed => {
                let mut out = vec![self.refresh_overview(), self.refetch_jobs()];
                if self.timeline.since.is_some() && !self.timeline.loading {
                    out.push(self.fetch_history(now));
                }
                return out;
            }
            Msg::Triggered { job, run, state } => {
                self.message = Some((format!("{state} run {run} of {job}"), false));
                if self.output.job.as_deref() == Some(job.as_str()) {
                    self.output.run = Some(run);
                }
                return vec![self.refresh_overview()];
            }
            Msg::Live => {
                let again = self.live == Some(false);
                self.live = Some(true);
                self.resubscribe = false;
                if again {
                    // What changed while nobody told us.
                    self.message = Some(("live again".into(), false));
                    self.pending_stale = true;
                    let mut out = vec![self.refetch_jobs()];
                    if self.timeline.since.is_some() && !self.timeline.loading {
                        out.push(self.fetch_history(now));
                    }
                    return out;
                }
            }
            Msg::NoSubscription { why, retry } => {
                self.live = Some(false);
                self.resubscribe = retry;
                self.message = Some((format!("{why}; refreshing every 2s"), false));
            }
            Msg::Output { follow, line } => {
                if follow != self.output.follow {
                    return Vec::new();
                }
                match line {
                    OutputLine::Run { run } => self.output.run = Some(run),
                    OutputLine::Text(t) => self.output.push_text(&t),
                    OutputLine::Skipped(bytes) => {
                        self.output
                            .push_text(&format!("\n… {bytes} bytes skipped …\n"));
                    }
                    OutputLine::Ended(s) => self.output.end = Some(s),
                    OutputLine::Failed(e) => {
                        self.output.end = Some(e.clone());
                        self.message = Some((e, true));
                    }
                }
            }
            Msg::Event(e) => return self.event(e, now),
        }
        Vec::new()
    }

    fn event(&mut self, event: Event, now: DateTime<Utc>) -> Vec<Command> {
        self.live = Some(true);
        match event {
            Event::RunStarted { run, job, at, node } => {
                if let Some(o) = &mut self.overview {
                    if !o.running.iter().any(|r| r.run == run) {
                        o.running.push(RunNow {
                            run: run.clone(),
                            job: job.clone(),
                            since: Some(at),
                            pid: None,
                            cpu_ms: None,
                            memory_peak_kb: None,
                            node,
                        });
                        o.counts.running = o.running.len().max(o.counts.running);
                    }
                }
                if self.output.job.as_deref() == Some(job.as_str()) && self.output.run.is_none() {
                    self.output.run = Some(run);
                }
                self.overview_stale = true;
            }
            Event::RunEnded {
                run,
                job,
                status,
                at,
                duration_ms,
                exit_code,
            } => {
                if let Some(o) = &mut self.overview {
                    o.running.retain(|r| r.run != run);
                    o.counts.running = o.counts.running.saturating_sub(1);
                }
                self.message = Some((
                    format!(
                        "{job}: run {run} {status}{} after {}",
                        exit_code
                            .map(|c| format!(" (exit {c})"))
                            .unwrap_or_default(),
                        crate::text::duration_ms(Some(duration_ms))
                    ),
                    status != "succeeded",
                ));
                if self.timeline.since.is_some() {
                    let started = at.0 - Duration::milliseconds(duration_ms as i64);
                    if let Some(r) = ended_record(&run, &job, &status, started, at.0) {
                        self.timeline.records.insert(0, r);
                    }
                }
                self.overview_stale = true;
            }
            Event::Job { summary } => {
                if let Some(row) = self.jobs.rows.iter_mut().find(|r| r.name == summary.name) {
                    *row = *summary;
                }
            }
            Event::Paused { jobs } | Event::Resumed { jobs } => {
                self.overview_stale = true;
                let paused = self.jobs.rows.iter().any(|r| jobs.contains(&r.name));
                if paused {
                    return vec![self.refetch_jobs()];
                }
            }
            Event::Reloaded { .. } => {
                self.overview_stale = true;
                return vec![self.refetch_jobs()];
            }
            Event::OneShot { .. } => {
                self.pending_stale = true;
                self.overview_stale = true;
            }
            Event::Node { node, state } => {
                self.node_events.push_back((now, node, state));
                if self.node_events.len() > 200 {
                    self.node_events.pop_front();
                }
                self.overview_stale = true;
            }
            Event::Output { .. } => {}
            Event::Lost { events } => {
                self.message = Some((format!("{events} updates were missed; refreshing"), true));
                self.pending_stale = true;
                let mut out = vec![self.refresh_overview(), self.refetch_jobs()];
                if self.timeline.since.is_some() {
                    out.push(self.fetch_history(now));
                }
                return out;
            }
        }
        Vec::new()
    }

    /// Whether the screen shows a time that moves (a run's elapsed time),
    /// so a redraw once a second is worth it.
    pub(crate) fn ticking(&self) -> bool {
        let running = self
            .overview
            .as_ref()
            .is_some_and(|o| !o.running.is_empty());
        running && matches!(self.view, View::Overview | View::Timeline | View::Nodes)
    }
}

/// The final record of a run that ended while the timeline is shown, as
/// the history has it (so it need not be read again).
fn ended_record(
    run: &str,
    job: &str,
    status: &str,
    started: DateTime<Utc>,
    ended: DateTime<Utc>,
) -> Option<Record> {
    let value = serde_json::json!({
        "v": 1,
        "ts": rea_core::record::format_ts(ended),
        "event": "run",
        "job": job,
        "run": run,
        "status": status,
        "started": rea_core::record::format_ts(started),
        "ended": rea_core::record::format_ts(ended),
    });
    serde_json::from_value(value).ok()
}

fn job_selector(name: &str) -> Selector {
    Selector {
        jobs: vec![name.to_string()],
        ..Selector::default()
    }
}

fn tag_selector(tag: String) -> Selector {
    Selector {
        tag: Some(tag),
        ..Selector::default()
    }
}

fn next_sort(sort: JobSort) -> JobSort {
    match sort {
        JobSort::File => JobSort::Name,
        JobSort::Name => JobSort::NextFire,
        JobSort::NextFire => JobSort::Failures,
        JobSort::Failures => JobSort::Duration,
        JobSort::Duration => JobSort::LastRun,
        JobSort::LastRun => JobSort::File,
    }
}

pub(crate) fn sort_name(sort: JobSort) -> &'static str {
    match sort {
        JobSort::File => "file order",
        JobSort::Name => "name",
        JobSort::NextFire => "next fire",
        JobSort::Failures => "failures",
        JobSort::Duration => "p95 duration",
        JobSort::LastRun => "last run",
    }
}

/// The filter line: words `tag:T`, `state:S`, `tenant:U`, `failing`; the
/// rest is the text searched in names.
pub(crate) fn parse_filter(text: &str) -> JobsQuery {
    let mut q = JobsQuery::default();
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        if let Some(t) = word.strip_prefix("tag:") {
            q.tag = Some(t.to_string());
        } else if let Some(s) = word.strip_prefix("state:") {
            q.state = Some(s.to_string());
        } else if let Some(t) = word.strip_prefix("tenant:") {
            q.tenant = Some(t.to_string());
        } else if word == "failing" {
            q.failing = true;
        } else {
            words.push(word);
        }
    }
    if !words.is_empty() {
        q.text = Some(words.join(" "));
    }
    q
}

#[cfg(test)]
pub(crate) mod tests;
