//! Following runs' output as it comes: `rea logs --follow JOB` (the job's
//! running run, or its next one) and `rea trigger --follow` (the run it
//! starts). The loop only keeps who waits for which run and hands each
//! follower its run's [`Follower`] when the run starts; from there a
//! follower is a task of its own, reading the run's tap and passing lines
//! to its connection through a small channel. So a client that reads
//! slowly only loses output (and is told how much: the tap keeps a bounded
//! ring per run), one that stops reading is dropped by its connection's
//! write timeout, and neither holds up the loop, the run or other clients.
//! Followers are counted daemon-wide ([`MAX_FOLLOWERS`]), each user against
//! her share of them, with a few kept for root (`crate::quota`): a user's
//! idle followers (of a job that runs once a year) lock no one else out.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::users::Scope;
use super::Loop;
use crate::control::protocol::{FollowReply, StreamLine};
use crate::control::{Reply, Response};
use crate::quota::{Holder, Permit, Quota, Refused};
use rea_exec::Follower;

/// Clients following output at once, daemon-wide; more are refused.
pub(super) const MAX_FOLLOWERS: usize = 64;

/// Lines a follower's task may have handed to its connection and not yet
/// seen written: with the connection's own buffer, all a slow client can
/// hold in the daemon.
const LINES_QUEUED: usize = 4;

/// The loop's bookkeeping for followers.
pub(super) struct Follows {
    /// Keyed by user name: a user's share; root's reserve.
    slots: Quota<String>,
    /// Followers waiting for a run to start.
    waiting: Vec<Waiting>,
}

impl Default for Follows {
    fn default() -> Self {
        Follows {
            slots: Quota::new(MAX_FOLLOWERS),
            waiting: Vec::new(),
        }
    }
}

impl Follows {
    /// Whether a follower waits for `run` to start.
    pub(super) fn awaited(&self, run: &str) -> bool {
        self.waiting
            .iter()
            .any(|w| matches!(&w.target, Target::Run(r) if r == run))
    }
}

/// A follower waiting for its run.
struct Waiting {
    target: Target,
    tx: oneshot::Sender<Attach>,
}

enum Target {
    /// This run (`trigger --follow`: it may wait for a slot first).
    Run(String),
    /// The next run of this job.
    Next(String),
}

/// What a waiting follower learns.
enum Attach {
    /// Its run started.
    Run(Attached),
    /// Its run ended without starting (skipped, or it could not be
    /// spawned): its final record.
    Ended(Value),
}

/// A follower with its run.
struct Attached {
    run: String,
    job: String,
    output: Follower,
    /// The run's final record, from the loop's waiters.
    end: oneshot::Receiver<Value>,
}

enum Source {
    Attached(Attached),
    Waiting(oneshot::Receiver<Attach>),
}

impl Loop {
    /// `follow`: the job's newest running run, else its next one.
    pub(super) fn follow(&mut self, job: String, scope: &Scope) -> Reply {
        let is_job = self
            .config
            .jobs
            .iter()
            .any(|j| j.name == job && scope.sees(j));
        let is_oneshot = *scope == Scope::Admin
            && (self.engine.oneshot(&job).is_some() || self.runs.any_of(&job));
        if !is_job && !is_oneshot {
            return Reply::Done(self.unknown_job_in(&job, scope));
        }
        let slot = match self.follow_slot(scope) {
            Ok(slot) => slot,
            Err(refused) => return Reply::Done(too_many(refused)),
        };
        let running = self.runs.newest_of(&job);
        let attached = running.and_then(|run| self.attach(&run, &job));
        if attached.is_none() && self.stopping.is_stopping() {
            return Reply::Done(Response::err(
                "refused",
                format!("the daemon is stopping: no run of {job:?} will start"),
            ));
        }
        let (first, source) = match attached {
            Some(attached) => (
                FollowReply {
                    job,
                    run: Some(attached.run.clone()),
                    state: "running".into(),
                },
                Source::Attached(attached),
            ),
            None => {
                let (tx, rx) = oneshot::channel();
                self.follows.waiting.push(Waiting {
                    target: Target::Next(job.clone()),
                    tx,
                });
                (
                    FollowReply {
                        job,
                        run: None,
                        state: "waiting".into(),
                    },
                    Source::Waiting(rx),
                )
            }
        };
        stream(Response::with(&first), source, slot)
    }

    /// `trigger --follow`: `first` (the trigger's answer), then the
    /// output of `run` once it starts, then its end.
    pub(super) fn follow_trigger(&mut self, first: Response, run: String, scope: &Scope) -> Reply {
        let slot = match self.follow_slot(scope) {
            Ok(slot) => slot,
            Err(refused) => return Reply::Done(too_many(refused)),
        };
        let (tx, rx) = oneshot::channel();
        self.follows.waiting.push(Waiting {
            target: Target::Run(run),
            tx,
        });
        stream(first, Source::Waiting(rx), slot)
    }

    /// `subscribe{follow}` of `run`, which waits to start (for a slot or
    /// for its job's previous run): the run's output once it starts, from
    /// its first byte, or `None` when it ends without starting or the
    /// daemon stops. It waits in the same list as `trigger --follow`, so
    /// one path hands runs to whoever waits for them; it is counted
    /// against the subscriber's slot, not a follower's.
    pub(super) fn await_start(
        &mut self,
        run: &str,
    ) -> impl std::future::Future<Output = Option<Follower>> + Send + 'static {
        self.follows.waiting.retain(|w| !w.tx.is_closed());
        let (tx, rx) = oneshot::channel();
        self.follows.waiting.push(Waiting {
            target: Target::Run(run.to_string()),
            tx,
        });
        async move {
            match rx.await {
                Ok(Attach::Run(attached)) => Some(attached.output),
                Ok(Attach::Ended(_)) | Err(_) => None,
            }
        }
    }

    /// A follower's slot, if one is open to `scope`; first forgets
    /// followers whose clients left while they waited.
    fn follow_slot(&mut self, scope: &Scope) -> Result<Slot, Refused> {
        self.follows.waiting.retain(|w| !w.tx.is_closed());
        let holder = match scope {
            Scope::Admin => Holder::Admin,
            Scope::User(me) => Holder::Other(me.clone()),
        };
        self.follows.slots.try_acquire(holder)
    }

    /// A follower of `run`, which is running, told its end like a
    /// `trigger --wait` client.
    fn attach(&mut self, run: &str, job: &str) -> Option<Attached> {
        let output = self.runs.follow(run)?;
        let end = self.runs.await_end(run);
        Some(Attached {
            run: run.to_string(),
            job: job.to_string(),
            output,
            end,
        })
    }

    /// `run` of `name` was just spawned: hands it to who waits for it.
    pub(super) fn run_spawned(&mut self, name: &str, run: &str) {
        if self.follows.waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.follows.waiting);
        for w in waiting {
            let wanted = match &w.target {
                Target::Run(r) => r == run,
                Target::Next(j) => j == name,
            };
            if !wanted || w.tx.is_closed() {
                if !w.tx.is_closed() {
                    self.follows.waiting.push(w);
                }
                continue;
            }
            if let Some(attached) = self.attach(run, name) {
                let _ = w.tx.send(Attach::Run(attached));
            }
        }
    }

    /// `run` has its final record: who waited for it to start never will.
    pub(super) fn followed_run_ended(&mut self, run: &str, record: &Value) {
        let (ended, waiting): (Vec<Waiting>, Vec<Waiting>) =
            std::mem::take(&mut self.follows.waiting)
                .into_iter()
                .partition(|w| matches!(&w.target, Target::Run(r) if r == run));
        self.follows.waiting = waiting;
        for w in ended {
            let _ = w.tx.send(Attach::Ended(record.clone()));
        }
    }

    /// The daemon stops: no run starts any more, so who waits for a next
    /// run is told now.
    pub(super) fn stop_waiting_followers(&mut self) {
        self.follows
            .waiting
            .retain(|w| matches!(w.target, Target::Run(_)));
    }
}

/// A follower's place in the count, held by its task.
type Slot = Permit<String>;

fn too_many(refused: Refused) -> Response {
    let why = match refused {
        Refused::Full => format!(
            "too many followers: the daemon streams output to {MAX_FOLLOWERS} clients already; try again later"
        ),
        Refused::Share(share) => format!(
            "too many followers of yours: each user may follow {share} runs at once; stop one and try again"
        ),
    };
    Response::err("refused", why)
}

/// A streamed answer: `first`, then what `source` produces.
fn stream(first: Response, source: Source, slot: Slot) -> Reply {
    let (tx, rx) = mpsc::channel(LINES_QUEUED);
    tokio::spawn(feed(source, tx, slot));
    Reply::Stream(first, rx)
}

/// A follower's task: the run (once it starts), its output, its final
/// record. Ends early when the connection is gone.
async fn feed(source: Source, lines: mpsc::Sender<Response>, _slot: Slot) {
    let attached = match source {
        Source::Attached(a) => a,
        Source::Waiting(rx) => {
            let attach = tokio::select! {
                attach = rx => attach,
                () = lines.closed() => return,
            };
            match attach {
                Ok(Attach::Run(a)) => a,
                Ok(Attach::Ended(record)) => {
                    let _ = lines.send(Response::ok(record)).await;
                    return;
                }
                Err(_) => {
                    let _ = lines
                        .send(Response::err(
                            "refused",
                            "the daemon is stopping: no run will start",
                        ))
                        .await;
                    return;
                }
            }
        }
    };
    let Attached {
        run,
        job,
        mut output,
        end,
    } = attached;
    let send = |line: StreamLine| lines.send(Response::with(&line));
    if send(StreamLine::Run { run, job }).await.is_err() {
        return;
    }
    loop {
        let chunk = tokio::select! {
            chunk = output.next() => chunk,
            () = lines.closed() => return,
        };
        let Some(chunk) = chunk else { break };
        if chunk.skipped > 0
            && send(StreamLine::Skipped {
                bytes: chunk.skipped,
            })
            .await
            .is_err()
        {
            return;
        }
        if !chunk.text.is_empty() && send(StreamLine::Output { text: chunk.text }).await.is_err() {
            return;
        }
    }
    let record = tokio::select! {
        record = end => record,
        () = lines.closed() => return,
    };
    let last = match record {
        Ok(record) => {
            // Too late for the live output: it is all in the record.
            let text = record["output"].as_str().unwrap_or_default();
            if output.missed_output()
                && !text.is_empty()
                && send(StreamLine::Output {
                    text: text.to_string(),
                })
                .await
                .is_err()
            {
                return;
            }
            Response::ok(record)
        }
        Err(_) => Response::err("refused", "the daemon stopped before the run ended"),
    };
    let _ = lines.send(last).await;
}
