//! The screens: a frame drawn from the [`App`]'s state alone. Line 0
//! names the views, line 1 the daemon, the last line is the status bar (or
//! the prompt); the view fills the rest. Everything fits 80×24, and reads
//! without colour (`NO_COLOR`): states are words, outcomes are glyphs of
//! different heights, the selection is reversed.

use chrono::{DateTime, Duration, Utc};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use rea_proto::live::JobSummary;

use crate::app::{sort_name, App, Prompt, View};
use crate::text::{self, fit, outcome_glyph, shown, Outcome};

/// Colours, or none (`NO_COLOR`): every style goes through here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Theme {
    pub(crate) color: bool,
}

impl Theme {
    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }
    fn good(self) -> Style {
        self.fg(Color::Green)
    }
    fn bad(self) -> Style {
        self.fg(Color::Red)
    }
    fn dim(self) -> Style {
        if self.color {
            Style::default().fg(Color::DarkGray)
        } else {
            Style::default()
        }
    }
    fn title(self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    fn selected(self) -> Style {
        Style::default().add_modifier(Modifier::REVERSED)
    }
    fn outcome(self, o: Outcome) -> Style {
        match o {
            Outcome::Good => self.good(),
            Outcome::Bad => self.bad(),
            Outcome::Neutral => self.dim(),
        }
    }
}

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame, app: &App, theme: Theme, now: DateTime<Utc>) {
    let area = frame.area();
    let [tabs, daemon, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(tabs_line(app, theme)), tabs);
    frame.render_widget(Paragraph::new(daemon_line(app, theme, now)), daemon);
    match app.view {
        View::Overview => overview(frame, body, app, theme, now),
        View::Jobs => jobs(frame, body, app, theme, now),
        View::Timeline => timeline(frame, body, app, theme, now),
        View::Output => output(frame, body, app, theme),
        View::OneShots => oneshots(frame, body, app, theme, now),
        View::Nodes => nodes(frame, body, app, theme, now),
    }
    frame.render_widget(Paragraph::new(status_line(app, theme)), status);
    if app.help {
        help(frame, body, app.view);
    }
}

fn tabs_line(app: &App, theme: Theme) -> Line<'static> {
    let mut spans = Vec::new();
    for (i, v) in View::ALL.iter().enumerate() {
        let style = if *v == app.view {
            theme.selected().add_modifier(Modifier::BOLD)
        } else {
            Style::default()
        };
        spans.push(Span::styled(format!(" {} {} ", i + 1, v.title()), style));
    }
    spans.push(Span::styled("  ? help", theme.dim()));
    Line::from(spans)
}

fn daemon_line(app: &App, theme: Theme, now: DateTime<Utc>) -> Line<'static> {
    let Some(o) = &app.overview else {
        let text = match &app.overview_error {
            Some(e) => shown(e),
            None => "connecting…".to_string(),
        };
        return Line::styled(text, theme.bad());
    };
    let d = &o.daemon;
    let mut spans = vec![Span::raw(format!(
        "rea {} pid {} up {} · {} jobs",
        d.version,
        d.pid,
        text::elapsed(d.started_at.0, now),
        o.counts.jobs
    ))];
    if let Some(t) = &o.tenant {
        spans.push(Span::raw(format!(" ({t}'s)")));
    }
    spans.push(Span::raw(format!(" · {} running", o.counts.running)));
    if o.counts.failing > 0 {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(
            format!("{} failing", o.counts.failing),
            theme.bad(),
        ));
    }
    if d.config_error.is_some() {
        spans.push(Span::styled(" · job file invalid", theme.bad()));
    }
    spans.push(Span::styled(
        match app.live {
            Some(true) => " · live",
            Some(false) => " · polling",
            None => "",
        },
        theme.dim(),
    ));
    Line::from(spans)
}

fn status_line(app: &App, theme: Theme) -> Line<'static> {
    match &app.prompt {
        Some(Prompt::Confirm(action)) => Line::styled(
            format!("{} (y/n)", shown(&action.question())),
            theme.selected(),
        ),
        Some(Prompt::Input { purpose, text }) => Line::from(vec![
            Span::styled(format!("{}: ", purpose.label()), theme.title()),
            Span::raw(shown(text)),
            Span::styled("█", theme.dim()),
        ]),
        None => match &app.message {
            Some((m, bad)) => Line::styled(shown(m), if *bad { theme.bad() } else { theme.good() }),
            None => Line::styled(hints(app.view), theme.dim()),
        },
    }
}

fn hints(view: View) -> &'static str {
    match view {
        View::Overview => "↑↓ run  o output  x kill  e edit  tab/1-6 views  q quit",
        View::Jobs => {
            "t run  p/r pause/resume  P/R tag  x kill  / filter  s sort  f failing  o output"
        }
        View::Timeline => "+/- span  g reload  tab/1-6 views  ? help  q quit",
        View::Output => "↑↓ PgUp/PgDn scroll  End follow  x kill  tab/1-6 views  q quit",
        View::OneShots => "↑↓ select  c cancel  g reload  tab/1-6 views  q quit",
        View::Nodes => "tab/1-6 views  ? help  q quit",
    }
}

fn section(title: String, theme: Theme) -> Line<'static> {
    Line::styled(title, theme.title())
}

fn overview(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: DateTime<Utc>) {
    let Some(o) = &app.overview else {
        frame.render_widget(Paragraph::new("waiting for the daemon's overview…"), area);
        return;
    };
    let c = &o.counts;
    let mut lines = vec![Line::from(vec![
        Span::raw(format!(
            "jobs {}  running {}  queued {}  paused {}  disabled {}  ",
            c.jobs, c.running, c.queued, c.paused, c.disabled
        )),
        Span::styled(
            format!("failing {}", c.failing),
            if c.failing > 0 {
                theme.bad()
            } else {
                Style::default()
            },
        ),
        Span::raw(format!("  one-shots {}", c.oneshots_pending)),
    ])];
    let w = area.width as usize;
    // Room for each list: the running runs first, then what fails, then
    // what comes.
    let rows = area.height as usize;
    let failing_room = o.failing.len().min(5);
    let due_room = o.next_due.len().min(5);
    let running_room = rows
        .saturating_sub(1 + 3 + failing_room + due_room + 2)
        .max(1);
    lines.push(Line::raw(""));
    lines.push(section(
        format!("Running ({})", o.running.len().max(c.running)),
        theme,
    ));
    if o.running.is_empty() {
        lines.push(Line::styled("  nothing runs now", theme.dim()));
    }
    let first = app
        .running_selected
        .saturating_sub(running_room.saturating_sub(1));
    for (i, r) in o.running.iter().enumerate().skip(first).take(running_room) {
        let since = r.since.map(|s| s.0);
        let text = format!(
            "  {:<width$} {:>9}  since {}  {}",
            fit(&shown(&r.job), w.saturating_sub(40).max(10)),
            since.map(|s| text::elapsed(s, now)).unwrap_or_default(),
            since.map(|s| text::clock(s, app.utc)).unwrap_or_default(),
            fit(&r.run, 14),
            width = w.saturating_sub(40).max(10),
        );
        let style = if i == app.running_selected && app.view == View::Overview {
            theme.selected()
        } else {
            Style::default()
        };
        lines.push(Line::styled(text, style));
    }
    lines.push(section(format!("Failing ({})", c.failing), theme));
    if o.failing.is_empty() {
        lines.push(Line::styled("  no job's last run failed", theme.dim()));
    }
    for j in o.failing.iter().take(failing_room) {
        let mut spans = vec![Span::styled(
            format!(
                "  {:<width$} {:>3}× ",
                fit(&shown(&j.name), w.saturating_sub(44).max(10)),
                j.consecutive_failures,
                width = w.saturating_sub(44).max(10),
            ),
            theme.bad(),
        )];
        spans.extend(sparkline(&j.outcomes, 16, theme));
        if let Some(t) = j.last_failure {
            spans.push(Span::raw(format!("  {}", text::relative(t.0, now))));
        }
        lines.push(Line::from(spans));
    }
    lines.push(section("Next due".to_string(), theme));
    if o.next_due.is_empty() {
        lines.push(Line::styled("  nothing is scheduled", theme.dim()));
    }
    for d in o.next_due.iter().take(due_room) {
        lines.push(Line::raw(format!(
            "  {:<width$} {}  {}",
            fit(&shown(&d.job), w.saturating_sub(30).max(10)),
            text::clock(d.at.0, app.utc),
            text::relative(d.at.0, now),
            width = w.saturating_sub(30).max(10),
        )));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The last `width` outcomes as glyphs.
fn sparkline(outcomes: &str, width: usize, theme: Theme) -> Vec<Span<'static>> {
    let chars: Vec<char> = outcomes.chars().collect();
    let start = chars.len().saturating_sub(width);
    let mut spans: Vec<Span<'static>> = Vec::new();
    let pad = width.saturating_sub(chars.len() - start);
    if pad > 0 {
        spans.push(Span::raw(" ".repeat(pad)));
    }
    for c in &chars[start..] {
        let (g, kind) = outcome_glyph(*c);
        spans.push(Span::styled(g.to_string(), theme.outcome(kind)));
    }
    spans
}

/// `1.2s/3.4s` and an arrow when the last run was outside them.
fn trend(j: &JobSummary) -> String {
    let (p50, p95) = (j.p50_ms, j.p95_ms);
    if p50.is_none() && p95.is_none() {
        return "-".into();
    }
    let arrow = match (j.last_duration_ms, p50, p95) {
        (Some(l), _, Some(p95)) if l > p95 => "↑",
        (Some(l), Some(p50), _) if l < p50 / 2 => "↓",
        _ => " ",
    };
    format!(
        "{}/{}{arrow}",
        text::duration_ms(p50),
        text::duration_ms(p95)
    )
}

fn jobs(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: DateTime<Utc>) {
    let j = &app.jobs;
    let [head, table_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
    let mut filter = Vec::new();
    if !j.filter_text.is_empty() {
        filter.push(format!("filter \"{}\"", shown(&j.filter_text)));
    }
    if j.query.failing && !j.filter_text.contains("failing") {
        filter.push("failing only".into());
    }
    let shown_rows = if j.rows.is_empty() {
        "0".to_string()
    } else {
        format!("{}/{}", j.selected + 1, j.matching)
    };
    let mut head_text = format!(
        "Jobs {shown_rows} · sort {}{}",
        sort_name(j.query.sort),
        if j.query.descending { " ↓" } else { "" }
    );
    for f in filter {
        head_text.push_str(" · ");
        head_text.push_str(&f);
    }
    if j.loading {
        head_text.push_str(" · loading…");
    }
    let head_line = match &j.error {
        Some(e) => Line::styled(format!("Jobs: {}", shown(e)), theme.bad()),
        None => Line::styled(head_text, theme.title()),
    };
    frame.render_widget(Paragraph::new(head_line), head);

    let spark = 16usize;
    let w = table_area.width as usize;
    let name_w = w.saturating_sub(8 + spark + 12 + 18 + 4).max(8);
    let header =
        Row::new(vec!["NAME", "STATE", "OUTCOMES", "P50/P95", "NEXT"]).style(theme.title());
    let rows = j.rows.iter().map(|s| {
        let state_style = match s.state.as_str() {
            "running" => theme.fg(Color::Cyan),
            "paused" | "disabled" => theme.dim(),
            _ if s.consecutive_failures > 0 => theme.bad(),
            _ => Style::default(),
        };
        let state = if s.consecutive_failures > 0 && s.state == "idle" {
            "failing".to_string()
        } else {
            s.state.clone()
        };
        let next = match s.next_fire {
            Some(t) if !s.paused => text::in_zone(t.0, s.timezone.as_deref(), app.utc),
            Some(_) => "paused".into(),
            None => "-".into(),
        };
        let _ = now;
        Row::new(vec![
            Line::raw(fit(&shown(&s.name), name_w)),
            Line::styled(state, state_style),
            Line::from(sparkline(&s.outcomes, spark, theme)),
            Line::raw(trend(s)),
            Line::raw(next),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(name_w as u16),
            Constraint::Length(8),
            Constraint::Length(spark as u16),
            Constraint::Length(12),
            Constraint::Length(18),
        ],
    )
    .header(header)
    .row_highlight_style(theme.selected());
    let mut state = TableState::default();
    if !j.rows.is_empty() {
        state.select(Some(j.selected));
    }
    frame.render_stateful_widget(table, table_area, &mut state);
    if j.rows.is_empty() && !j.loading && j.error.is_none() {
        let [_, msg] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(table_area);
        frame.render_widget(Paragraph::new("  no job matches"), msg);
    }
}

/// A run as the timeline draws it.
struct Bar {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    outcome: char,
    running: bool,
}

fn timeline(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: DateTime<Utc>) {
    let t = &app.timeline;
    let hours = t.hours();
    let past = Duration::hours(hours);
    // A fifth of the width shows what comes.
    let future = past / 4;
    let (from, to) = (now - past, now + future);
    let label_w = 16usize;
    let cols = (area.width as usize).saturating_sub(label_w + 1).max(10);
    let col_of = |at: DateTime<Utc>| -> Option<usize> {
        if at < from || at > to {
            return None;
        }
        let span = (to - from).num_milliseconds().max(1) as f64;
        let c = ((at - from).num_milliseconds() as f64 / span * cols as f64) as usize;
        Some(c.min(cols - 1))
    };
    // Rows: the jobs with runs in the window, most recent first, then the
    // jobs due within it.
    let mut order: Vec<String> = Vec::new();
    let mut bars: std::collections::HashMap<String, Vec<Bar>> = Default::default();
    let mut add = |job: &str, bar: Option<Bar>| {
        if !bars.contains_key(job) {
            order.push(job.to_string());
            bars.insert(job.to_string(), Vec::new());
        }
        if let (Some(b), Some(list)) = (bar, bars.get_mut(job)) {
            list.push(b);
        }
    };
    if let Some(o) = &app.overview {
        for r in &o.running {
            let start = r.since.map_or(now, |s| s.0);
            add(
                &r.job,
                Some(Bar {
                    start,
                    end: now,
                    outcome: 'r',
                    running: true,
                }),
            );
        }
    }
    for r in &t.records {
        let (Some(job), Some(status)) = (&r.job, r.status) else {
            continue;
        };
        if status == rea_core::record::RunStatus::Started {
            continue;
        }
        let end = r.ended.unwrap_or(r.ts);
        let start = r.started.unwrap_or(end);
        add(
            job,
            Some(Bar {
                start,
                end,
                outcome: text::status_letter(status.as_str()),
                running: false,
            }),
        );
    }
    let mut upcoming: Vec<(String, DateTime<Utc>)> = Vec::new();
    if let Some(o) = &app.overview {
        upcoming.extend(o.next_due.iter().map(|d| (d.job.clone(), d.at.0)));
    }
    for j in &app.jobs.rows {
        if let Some(n) = j.next_fire {
            if n.0 <= to
                && !upcoming
                    .iter()
                    .any(|(job, at)| *job == j.name && *at == n.0)
            {
                upcoming.push((j.name.clone(), n.0));
            }
        }
    }
    upcoming.retain(|(_, at)| *at <= to);
    for (job, _) in &upcoming {
        add(job, None);
    }

    let mut lines = Vec::new();
    let mut head = format!(
        "Timeline: last {hours}h and the next {}m · █ ran ▒ running ◆ due · │ now",
        future.num_minutes()
    );
    if t.loading {
        head.push_str(" · loading…");
    }
    lines.push(match &t.error {
        Some(e) => Line::styled(format!("Timeline: {}", shown(e)), theme.bad()),
        None => Line::styled(head, theme.title()),
    });
    // The time axis: a mark and a time every ~16 columns.
    let mut axis = vec![' '; cols];
    let mut labels = String::new();
    let step = 16usize;
    let mut c = 0;
    while c < cols {
        let at = from
            + Duration::milliseconds(
                ((to - from).num_milliseconds() as f64 * c as f64 / cols as f64) as i64,
            );
        axis[c] = '┬';
        let label = text::clock(at, app.utc);
        let label = &label[..5.min(label.len())];
        while labels.chars().count() < c {
            labels.push(' ');
        }
        if labels.chars().count() + label.len() <= cols {
            labels.push_str(label);
        }
        c += step;
    }
    let now_col = col_of(now);
    if let Some(nc) = now_col {
        axis[nc] = '│';
    }
    lines.push(Line::raw(format!("{:label_w$} {labels}", "")));
    lines.push(Line::raw(format!(
        "{:label_w$} {}",
        "",
        axis.iter().collect::<String>()
    )));
    let room = (area.height as usize).saturating_sub(lines.len());
    for job in order.iter().take(room) {
        let mut cells: Vec<(char, Style)> = vec![(' ', Style::default()); cols];
        if let Some(nc) = now_col {
            cells[nc] = ('│', theme.dim());
        }
        for b in bars.get(job).into_iter().flatten() {
            let (Some(a), Some(z)) = (col_of(b.start.max(from)), col_of(b.end.min(to))) else {
                continue;
            };
            for cell in cells.iter_mut().take(z + 1).skip(a) {
                *cell = if b.running {
                    ('▒', theme.fg(Color::Cyan))
                } else {
                    let (_, kind) = outcome_glyph(b.outcome);
                    let g = match kind {
                        Outcome::Good => '█',
                        Outcome::Bad => 'X',
                        Outcome::Neutral => '·',
                    };
                    (g, theme.outcome(kind))
                };
            }
        }
        for (_, at) in upcoming.iter().filter(|(j, _)| j == job) {
            // A fire due within the column of a run (minutes apart at
            // this scale) goes just after it, not over it.
            let free =
                col_of(*at).and_then(|c| (c..cols).find(|&c| matches!(cells[c].0, ' ' | '│')));
            if let Some(c) = free {
                cells[c] = ('◆', theme.fg(Color::Yellow));
            }
        }
        let mut spans = vec![Span::raw(format!(
            "{:<label_w$} ",
            fit(&shown(job), label_w)
        ))];
        spans.extend(
            cells
                .into_iter()
                .map(|(c, s)| Span::styled(c.to_string(), s)),
        );
        lines.push(Line::from(spans));
    }
    if order.is_empty() && !t.loading {
        lines.push(Line::styled("  no run in this window", theme.dim()));
    } else if order.len() > room {
        if let Some(last) = lines.last_mut() {
            *last = Line::styled(
                format!("  … and {} more jobs", order.len() - room + 1),
                theme.dim(),
            );
        }
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn output(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let o = &app.output;
    let Some(job) = &o.job else {
        frame.render_widget(
            Paragraph::new(vec![
                Line::styled("Output", theme.title()),
                Line::raw("  no run followed: pick a job (2) and press o, or t to run it"),
            ]),
            area,
        );
        return;
    };
    let state = match (&o.end, &o.run) {
        (Some(end), _) => shown(end),
        (None, Some(run)) => format!("run {run} · following"),
        (None, None) => "waiting for its next run".to_string(),
    };
    let mut lines = vec![Line::styled(
        format!("Output of {} · {state}", shown(job)),
        theme.title(),
    )];
    let room = (area.height as usize).saturating_sub(1);
    let mut all: Vec<&str> = o.lines.iter().map(String::as_str).collect();
    if !o.partial.is_empty() {
        all.push(&o.partial);
    }
    let end = all.len().saturating_sub(o.scroll);
    let start = end.saturating_sub(room);
    for l in &all[start..end] {
        lines.push(Line::raw(l.to_string()));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn oneshots(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: DateTime<Utc>) {
    let [head, body] = Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
    let Some(p) = &app.pending else {
        let text = match &app.pending_error {
            Some(e) => Line::styled(shown(e), theme.bad()),
            None => Line::raw("loading…"),
        };
        frame.render_widget(Paragraph::new(text), head);
        return;
    };
    frame.render_widget(
        Paragraph::new(Line::styled(
            format!(
                "One-shots: {} pending (first {} by due time)",
                p.pending,
                p.oneshots.len()
            ),
            theme.title(),
        )),
        head,
    );
    let w = body.width as usize;
    let header = Row::new(vec!["ID", "STATE", "DUE", "COMMAND"]).style(theme.title());
    let rows = p.oneshots.iter().map(|s| {
        let cmd = shown(&s.argv.join(" "));
        Row::new(vec![
            fit(&shown(&s.id), 20),
            s.state.clone(),
            format!(
                "{} {}",
                text::clock(s.due.0, app.utc),
                text::relative(s.due.0, now)
            ),
            fit(&cmd, w.saturating_sub(20 + 8 + 22 + 3)),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(20),
            Constraint::Length(8),
            Constraint::Length(22),
            Constraint::Min(10),
        ],
    )
    .header(header)
    .row_highlight_style(theme.selected());
    let mut state = TableState::default();
    if !p.oneshots.is_empty() {
        state.select(Some(app.pending_selected));
    }
    frame.render_stateful_widget(table, body, &mut state);
    if p.oneshots.is_empty() {
        let [_, msg] = Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(body);
        frame.render_widget(Paragraph::new("  no one-shot is pending"), msg);
    }
}

fn nodes(frame: &mut Frame, area: Rect, app: &App, theme: Theme, now: DateTime<Utc>) {
    let mut lines = vec![Line::styled("Cluster nodes", theme.title())];
    match app
        .overview
        .as_ref()
        .and_then(|o| o.daemon.cluster.as_ref())
    {
        None => lines.push(Line::raw(
            "  local mode: this daemon schedules alone (no [cluster] in its job file)",
        )),
        Some(c) => {
            let lease = if c.lease_live {
                Span::styled(
                    format!("lease live, {}s left", c.lease_left_ms / 1000),
                    theme.good(),
                )
            } else {
                Span::styled("NO LEASE", theme.bad())
            };
            lines.push(Line::from(vec![
                Span::raw(format!(
                    "  this node: {} in cluster {} · epoch {} · ",
                    shown(&c.node),
                    shown(&c.cluster),
                    c.epoch.map_or("-".to_string(), |e| e.to_string())
                )),
                lease,
            ]));
            lines.push(Line::raw(format!(
                "  renewed {} ago · backlog {} · dropped {}{}",
                text::duration_ms(Some(c.lease_age_ms)),
                c.backlog,
                c.dropped,
                c.clock_offset_ms
                    .map(|o| format!(" · clock offset {o}ms"))
                    .unwrap_or_default()
            )));
            if let Some(e) = &c.last_error {
                lines.push(Line::styled(
                    format!(
                        "  last error {}: {}",
                        text::relative(e.at.0, now),
                        shown(&e.message)
                    ),
                    theme.bad(),
                ));
            }
            let claims: Vec<String> = c.claims.iter().map(|(k, v)| format!("{k} {v}")).collect();
            lines.push(Line::raw(format!("  claims: {}", claims.join(", "))));
            let mut runs: std::collections::BTreeMap<&str, usize> = Default::default();
            for r in app.overview.iter().flat_map(|o| &o.running) {
                *runs
                    .entry(r.node.as_deref().unwrap_or(&c.node))
                    .or_default() += 1;
            }
            for (node, n) in runs {
                lines.push(Line::raw(format!("  {}: {n} running", shown(node))));
            }
        }
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled("Node changes seen", theme.title()));
    if app.node_events.is_empty() {
        lines.push(Line::styled("  none since rea top started", theme.dim()));
    }
    let room = (area.height as usize).saturating_sub(lines.len());
    let skip = app.node_events.len().saturating_sub(room);
    for (at, node, state) in app.node_events.iter().skip(skip) {
        lines.push(Line::raw(format!(
            "  {}  {}  {}",
            text::clock(*at, app.utc),
            shown(node),
            shown(state)
        )));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

const HELP: &[(&str, &str)] = &[
    ("1-6, tab", "switch view (shift-tab: back)"),
    ("↑ ↓ PgUp PgDn", "move, scroll"),
    ("o, enter", "follow the output of a job's run"),
    ("t", "run the selected job now, and follow it"),
    ("p / r", "pause / resume the selected job"),
    ("P / R", "pause / resume every job with a tag"),
    ("x", "kill the selected run (or the job's runs)"),
    ("c", "cancel the selected one-shot"),
    ("e", "edit your job file (rea edit)"),
    ("/", "filter: text tag:T state:S tenant:U failing"),
    ("s / S / f", "sort by / reverse / failing only"),
    ("+ / -", "timeline span"),
    ("q, ctrl-c", "quit"),
];

fn help(frame: &mut Frame, area: Rect, view: View) {
    let h = (HELP.len() as u16 + 4).min(area.height);
    let w = 64.min(area.width);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, v)| Line::raw(format!(" {k:<14} {v}")))
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::raw(format!(
        " Every change asks y/n first. Now: {} view.",
        view.title()
    )));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" rea top: keys "),
        ),
        popup,
    );
}

#[cfg(test)]
mod tests;
