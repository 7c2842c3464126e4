//! The threads that talk to the daemon, each on its own connection, and
//! hand what they get to the screen's loop through one channel, writing a
//! byte to a pipe the loop polls beside the terminal: the loop sleeps until
//! a key, an answer or an event, never on a timer of its own.
//!
//! - two workers answer the loop's [`Command`]s: `views` (overview, pages,
//!   one-shots: quick, what keys wait for) and `slow` (the timeline's
//!   history, actions), so a long history read never delays a page;
//! - the subscription: an overview, then the daemon's events;
//! - a follow per followed run (`follow`, or `trigger --follow`), which
//!   stops when another follow replaces it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rea_core::record::Record;
use rea_proto::live::{Event, Overview, Subscription};
use rea_proto::protocol::{FollowReply, StreamLine, TriggerReply};
use rea_proto::{Client, Request};

use crate::app::{Command, Msg, OutputLine};
use crate::source::{self, Source};

/// The way to the loop: a message, then a byte on the wake pipe.
#[derive(Clone)]
pub(crate) struct Tx {
    tx: Sender<Msg>,
    wake: Arc<OwnedFd>,
}

impl Tx {
    pub(crate) fn new(tx: Sender<Msg>, wake: Arc<OwnedFd>) -> Tx {
        Tx { tx, wake }
    }

    /// False once the loop is gone.
    pub(crate) fn send(&self, msg: Msg) -> bool {
        if self.tx.send(msg).is_err() {
            return false;
        }
        // A full pipe already wakes the loop: the byte is not needed.
        let _ = rustix::io::write(self.wake.as_fd(), &[1]);
        true
    }
}

/// Where the daemon is, for the threads' connections.
#[derive(Clone)]
pub(crate) struct Daemon {
    pub(crate) state_dir: PathBuf,
    pub(crate) timeout: Duration,
}

impl Daemon {
    pub(crate) fn source(&self) -> Result<Source, String> {
        Source::connect(&self.state_dir, self.timeout)
    }
}

/// A worker: answers commands in order, the latest of each kind only
/// when several wait (keys held down ask for many pages; only the last
/// one is shown).
pub(crate) fn worker(name: &str, daemon: Daemon, tx: Tx) -> Sender<Command> {
    let (commands, rx) = mpsc::channel::<Command>();
    // Without the thread, its commands go nowhere and their views say
    // "loading…": nothing else can be done about it.
    let _ = thread::Builder::new()
        .name(format!("top-{name}"))
        .spawn(move || work(daemon, rx, tx));
    commands
}

fn work(daemon: Daemon, rx: Receiver<Command>, tx: Tx) {
    let mut source: Option<Source> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        // Keep the last of each kind of query; every action.
        let mut kept: Vec<Command> = Vec::new();
        for c in batch.into_iter().rev() {
            let same = |k: &Command| std::mem::discriminant(k) == std::mem::discriminant(&c);
            if matches!(c, Command::Act(_)) || !kept.iter().any(same) {
                kept.push(c);
            }
        }
        kept.reverse();
        for command in kept {
            if source.is_none() {
                match daemon.source() {
                    Ok(s) => source = Some(s),
                    Err(e) => {
                        if !tx.send(failed(&command, e)) {
                            return;
                        }
                        continue;
                    }
                }
            }
            let Some(s) = source.as_mut() else { continue };
            let msg = answer(s, command);
            // A connection that failed is made again for the next command
            // (a refusal costs a reconnection too; it is rare).
            if failed_answer(&msg) {
                source = None;
            }
            if !tx.send(msg) {
                return;
            }
        }
    }
}

fn failed_answer(msg: &Msg) -> bool {
    match msg {
        Msg::Overview(r) => r.is_err(),
        Msg::Jobs { page, .. } => page.is_err(),
        Msg::Pending(r) => r.is_err(),
        Msg::History { records, .. } => records.is_err(),
        Msg::Done(r) => r.is_err(),
        _ => false,
    }
}

fn answer(s: &mut Source, command: Command) -> Msg {
    match command {
        Command::Overview => Msg::Overview(Box::new(s.overview())),
        Command::Jobs { seq, query } => Msg::Jobs {
            seq,
            append: query.cursor.is_some(),
            page: s.jobs(&query),
        },
        Command::Pending => Msg::Pending(s.pending()),
        Command::History { seq, since } => Msg::History {
            seq,
            records: s.history(since),
        },
        Command::Act(action) => Msg::Done(s.act(&action)),
        Command::Follow { .. } | Command::Quit => Msg::Changed,
    }
}

fn failed(command: &Command, e: String) -> Msg {
    match command {
        Command::Overview => Msg::Overview(Box::new(Err(e))),
        Command::Jobs { seq, query } => Msg::Jobs {
            seq: *seq,
            append: query.cursor.is_some(),
            page: Err(e),
        },
        Command::Pending => Msg::Pending(Err(e)),
        Command::History { seq, .. } => Msg::History {
            seq: *seq,
            records: Err(e),
        },
        _ => Msg::Done(Err(e)),
    }
}

/// The subscription: its overview, then each event as it comes. A daemon
/// that does not answer subscriptions is said once; the loop refreshes on
/// a timer then, and subscribes again (`retry`) when the connection, not
/// the daemon, was the reason (a daemon restarted under it).
pub(crate) fn subscribe(daemon: Daemon, tx: Tx) {
    let _ = thread::Builder::new()
        .name("top-subscribe".into())
        .spawn(move || {
            let mut client = match daemon.source() {
                Ok(s) => s.into_client(),
                Err(e) => {
                    tx.send(Msg::NoSubscription {
                        why: e,
                        retry: true,
                    });
                    return;
                }
            };
            let first = match client.request(&Request::Subscribe(Subscription::default())) {
                Ok(resp) => resp,
                Err(e) => {
                    let why = format!("no live updates: {e}");
                    tx.send(Msg::NoSubscription { why, retry: true });
                    return;
                }
            };
            // An answer that refuses is this daemon's last word (it has no
            // subscriptions, or no room for another): not asked again.
            let overview = match source::data::<Overview>(first) {
                Ok(o) => o,
                Err(e) => {
                    let why = format!("no live updates: {e}");
                    tx.send(Msg::NoSubscription { why, retry: false });
                    return;
                }
            };
            // Events come when things happen: a quiet daemon may say
            // nothing for hours.
            client.without_timeout();
            if !tx.send(Msg::Live) || !tx.send(Msg::Overview(Box::new(Ok(overview)))) {
                return;
            }
            loop {
                let msg = match client.read_response() {
                    Ok(resp) => match source::data::<Event>(resp) {
                        Ok(e) => Msg::Event(e),
                        // A kind of event this build does not know.
                        Err(_) => continue,
                    },
                    Err(e) => {
                        let why = format!("the subscription ended ({e})");
                        tx.send(Msg::NoSubscription { why, retry: true });
                        return;
                    }
                };
                if !tx.send(msg) {
                    return;
                }
            }
        });
}

/// Which follow is current: a follow thread stops at its next line once
/// another has replaced it.
pub(crate) type Current = Arc<AtomicU64>;

/// Follows `job`'s output (its running run, or its next), or with
/// `trigger` runs it first, as `rea trigger --follow` does.
pub(crate) fn follow(
    daemon: Daemon,
    tx: Tx,
    job: String,
    id: u64,
    trigger: bool,
    current: Current,
) {
    current.store(id, Ordering::SeqCst);
    let _ = thread::Builder::new()
        .name("top-follow".into())
        .spawn(move || {
            let out = |line: OutputLine| tx.send(Msg::Output { follow: id, line });
            let mut client = match daemon.source() {
                Ok(s) => s.into_client(),
                Err(e) => {
                    out(OutputLine::Failed(e));
                    return;
                }
            };
            let started = if trigger {
                start_trigger(&mut client, &job, &tx, id)
            } else {
                start_follow(&mut client, &job, id, &tx)
            };
            if let Err(e) = started {
                out(OutputLine::Failed(e));
                return;
            }
            client.without_timeout();
            loop {
                if current.load(Ordering::SeqCst) != id {
                    return;
                }
                let resp = match client.read_response() {
                    Ok(r) => r,
                    Err(e) => {
                        out(OutputLine::Failed(e.to_string()));
                        return;
                    }
                };
                let line = match source::data::<serde_json::Value>(resp) {
                    Ok(v) => v,
                    Err(e) => {
                        out(OutputLine::Failed(e));
                        return;
                    }
                };
                if line.get("stream").is_none() {
                    let end = serde_json::from_value::<Record>(line)
                        .map(|r| source::ended(&r))
                        .unwrap_or_else(|e| format!("unreadable end of run: {e}"));
                    out(OutputLine::Ended(end));
                    // The run's end changes what the views show.
                    tx.send(Msg::Changed);
                    return;
                }
                let shown = match serde_json::from_value::<StreamLine>(line) {
                    Ok(StreamLine::Output { text }) => OutputLine::Text(text),
                    Ok(StreamLine::Skipped { bytes }) => OutputLine::Skipped(bytes),
                    Ok(StreamLine::Run { run, .. }) => OutputLine::Run { run },
                    Err(_) => continue,
                };
                if !out(shown) {
                    return;
                }
            }
        });
}

fn start_trigger(client: &mut Client, job: &str, tx: &Tx, id: u64) -> Result<(), String> {
    let resp = client
        .request(&Request::Trigger {
            job: job.to_string(),
            force: false,
            wait: true,
            follow: true,
            params: Default::default(),
        })
        .map_err(|e| e.to_string())?;
    let reply: TriggerReply = source::data(resp)?;
    tx.send(Msg::Output {
        follow: id,
        line: OutputLine::Run {
            run: reply.run.clone(),
        },
    });
    tx.send(Msg::Triggered {
        job: job.to_string(),
        run: reply.run,
        state: reply.state,
    });
    Ok(())
}

fn start_follow(client: &mut Client, job: &str, id: u64, tx: &Tx) -> Result<(), String> {
    let resp = client
        .request(&Request::Follow {
            job: job.to_string(),
        })
        .map_err(|e| e.to_string())?;
    let reply: FollowReply = source::data(resp)?;
    if let Some(run) = reply.run {
        tx.send(Msg::Output {
            follow: id,
            line: OutputLine::Run { run },
        });
    }
    Ok(())
}

/// The events the loop is woken for besides answers.
pub(crate) fn drain(wake: &OwnedFd) {
    let mut buf = [0u8; 256];
    while matches!(rustix::io::read(wake, &mut buf), Ok(n) if n > 0) {}
}
