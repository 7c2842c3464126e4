//! One-shots in the engine: submitted, restored from the journal at start
//! (late ones run now unless expired), cancelled, listed.

use super::*;

/// Why a one-shot submission or cancellation was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitError {
    /// A pending one-shot has this name already (idempotent submitters:
    /// this means "you already submitted it").
    Duplicate(String),
    /// A job of the file has this name.
    NameTaken(String),
    Unknown(String),
    Running(String),
}

impl SubmitError {
    pub fn message(&self) -> &str {
        match self {
            SubmitError::Duplicate(m)
            | SubmitError::NameTaken(m)
            | SubmitError::Unknown(m)
            | SubmitError::Running(m) => m,
        }
    }
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelResult {
    Cancelled,
    /// The run is being terminated; it ends as `killed`.
    Killing,
}

/// A pending one-shot as `rea pending` shows it.
#[derive(Debug, Clone)]
pub struct OneShotStatus {
    pub def: Arc<OneShot>,
    /// When its next attempt is due (None while running).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub running: bool,
}

/// A one-shot's id as a map key without a copy of the string: a million
/// pending one-shots would otherwise hold every id twice more (here and in
/// the heap entry).
#[derive(Debug, Clone)]
pub(super) struct ShotKey(pub(super) Arc<OneShot>);

impl std::borrow::Borrow<str> for ShotKey {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl std::hash::Hash for ShotKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // Must hash exactly as `str` does, for lookups by `&str`.
        (*self.0.id).hash(h)
    }
}

impl PartialEq for ShotKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ShotKey {}

/// A one-shot the engine knows about; its definition is the map's key (a
/// million pending one-shots: a second `Arc` per entry and the 24-byte
/// `Option<EntryId>` it used to have made every bucket 48 bytes, now 24).
#[derive(Debug)]
pub(super) struct ShotState {
    /// Its heap entry while it waits (first attempt or a retry).
    pub(super) entry: Option<EntryId>,
    pub(super) running: bool,
}

/// The refusal to cancel a running one-shot without `kill`.
fn running(id: &str) -> SubmitError {
    SubmitError::Running(format!(
        "one-shot {id:?} is running; use --kill to terminate it"
    ))
}

impl Engine {
    /// A fresh id for an unnamed one-shot (time-sortable, like run ids).
    pub fn new_id(&mut self, now: DateTime<Utc>) -> String {
        self.run_counter = self.run_counter.wrapping_add(1);
        self.run_id(now)
    }

    /// Whether a one-shot with this id could be submitted now.
    pub fn check_submit(&self, id: &str) -> Result<(), SubmitError> {
        if self.jobs.get(id).is_some_and(|s| !s.removed) {
            return Err(SubmitError::NameTaken(format!(
                "{id:?} is the name of a job in the job file; choose another --name"
            )));
        }
        if self.oneshots.contains_key(id) {
            return Err(SubmitError::Duplicate(format!(
                "a one-shot named {id:?} is already pending"
            )));
        }
        Ok(())
    }

    /// Accepts a new one-shot. The caller makes it durable (journal) before
    /// acknowledging. A due time in the past runs it now.
    pub fn submit(
        &mut self,
        shot: OneShot,
        now: DateTime<Utc>,
    ) -> Result<Vec<Action>, SubmitError> {
        self.check_submit(&shot.id)?;
        let mut out = Vec::new();
        self.advance(now, &mut out);
        self.schedule_oneshot(shot, Trigger::Oneshot, now);
        self.advance(now, &mut out);
        Ok(out)
    }

    /// One-shots replayed from the journal at start. Those whose time passed
    /// while the daemon was down run now (trigger `catch_up`) unless they
    /// expired.
    pub fn restore(&mut self, shots: Vec<OneShot>, now: DateTime<Utc>) -> Vec<Action> {
        let mut out = Vec::new();
        for shot in shots {
            if shot.due <= now {
                let late = (now - shot.due).to_std().unwrap_or_default();
                if shot.expire().is_some_and(|e| late > e) {
                    let mut rec = Record::new(Event::Run, now);
                    rec.job = Some(shot.id.to_string());
                    rec.trigger = Some(Trigger::Oneshot);
                    rec.status = Some(RunStatus::Skipped);
                    rec.scheduled = Some(shot.due);
                    rec.reason = Some(format!(
                        "expired: the daemon was down at its time and came back {} late (--expire {})",
                        crate::duration::format(late),
                        crate::duration::format(shot.expire().unwrap_or_default())
                    ));
                    out.push(Action::Record(Box::new(rec)));
                    out.push(Action::OneShotDone { id: shot.id.into() });
                    continue;
                }
                self.schedule_oneshot(shot, Trigger::CatchUp, now);
            } else {
                self.schedule_oneshot(shot, Trigger::Oneshot, now);
            }
        }
        self.advance(now, &mut out);
        out
    }

    /// Cancels pending one-shots; running ones only with `kill`. Every id
    /// is checked before any is cancelled, so a typo among several cancels
    /// nothing. The actions are returned in both cases: what came due at
    /// `now` must be started even when the request is refused.
    #[allow(clippy::type_complexity)]
    pub fn cancel_oneshots(
        &mut self,
        ids: &[String],
        kill: bool,
        now: DateTime<Utc>,
    ) -> (Result<Vec<CancelResult>, SubmitError>, Vec<Action>) {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        if let [id] = ids {
            let result = self.cancel_one(id, kill, now, &mut out).map(|r| vec![r]);
            return (result, out);
        }
        for id in ids {
            let problem = match self.oneshots.get(id.as_str()) {
                None => Some(self.unknown_oneshot(id)),
                Some(s) if s.running && !kill => Some(running(id)),
                Some(_) => None,
            };
            if let Some(e) = problem {
                return (Err(e), out);
            }
        }
        let results = ids
            .iter()
            .map(|id| self.cancel_checked(id, now, &mut out))
            .collect();
        (Ok(results), out)
    }

    /// `cancel_oneshots` for one id (benchmarks and tests); the actions due
    /// at `now` are dropped with a refusal.
    pub fn cancel_oneshot(
        &mut self,
        id: &str,
        kill: bool,
        now: DateTime<Utc>,
    ) -> Result<(CancelResult, Vec<Action>), SubmitError> {
        let mut out = Vec::new();
        self.advance(now, &mut out);
        let result = self.cancel_one(id, kill, now, &mut out)?;
        Ok((result, out))
    }

    /// One id, looked up once in the common case (waiting, not running).
    fn cancel_one(
        &mut self,
        id: &str,
        kill: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> Result<CancelResult, SubmitError> {
        let Some((key, shot)) = self.oneshots.remove_entry(id) else {
            return Err(self.unknown_oneshot(id));
        };
        if shot.running {
            self.oneshots.insert(key, shot);
            if !kill {
                return Err(running(id));
            }
            return Ok(self.cancel_checked(id, now, out));
        }
        self.cancelled(key, shot, now, out);
        Ok(CancelResult::Cancelled)
    }

    fn unknown_oneshot(&self, id: &str) -> SubmitError {
        let known: Vec<&str> = self.oneshots.keys().map(|k| &*k.0.id).collect();
        let mut msg = format!("no pending one-shot {id:?}");
        if let Some(h) = crate::suggest::did_you_mean(id, known) {
            msg.push_str(&format!(" ({h})"));
        }
        SubmitError::Unknown(msg)
    }

    /// Cancels a one-shot `cancel_oneshots` has checked.
    pub(super) fn cancel_checked(
        &mut self,
        id: &str,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) -> CancelResult {
        let Some(shot) = self.oneshots.get(id) else {
            return CancelResult::Cancelled;
        };
        if shot.running {
            // Its run ends as `killed`; no retry follows an operator's kill.
            for (run, active) in self.runs.iter_mut() {
                if active.pending.source.oneshot() == Some(id) && active.stop.is_none() {
                    active.stop = Some(StopReason::Operator);
                    out.push(Action::Terminate { run: run.clone() });
                }
            }
            return CancelResult::Killing;
        }
        if let Some((key, shot)) = self.oneshots.remove_entry(id) {
            self.cancelled(key, shot, now, out);
        }
        CancelResult::Cancelled
    }

    /// A waiting one-shot, already out of the map, cancelled: out of the
    /// heap and the ready queue, recorded, and out of the journal.
    fn cancelled(
        &mut self,
        key: ShotKey,
        shot: ShotState,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let def = key.0;
        if let Some(e) = shot.entry {
            self.heap.cancel(e);
        }
        let owner = shares::owner_of_name(&def.id);
        self.shares
            .remove_runs(&owner, |p| p.source.oneshot() == Some(&*def.id));
        let mut rec = Record::new(Event::Run, now);
        rec.job = Some(def.id.to_string());
        rec.trigger = Some(Trigger::Oneshot);
        rec.status = Some(RunStatus::Cancelled);
        rec.scheduled = Some(def.due);
        rec.reason = Some("cancelled by operator".into());
        out.push(Action::Record(Box::new(rec)));
        out.push(Action::OneShotDone {
            id: def.id.to_string(),
        });
    }

    /// Pending one-shots (waiting or running), by due time.
    pub fn oneshots(&self) -> Vec<OneShotStatus> {
        let mut v: Vec<OneShotStatus> = self
            .oneshots
            .iter()
            .map(|(k, s)| OneShotStatus {
                def: k.0.clone(),
                next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
                running: s.running,
            })
            .collect();
        v.sort_by(|a, b| {
            a.def
                .due
                .cmp(&b.def.due)
                .then_with(|| a.def.id.cmp(&b.def.id))
        });
        v
    }

    /// The first `limit` pending one-shots by due time, only those tagged
    /// `tag` if given: `oneshots` without sorting all of them (a `pending`
    /// request with a million waiting sorted a million to show a few).
    pub fn oneshots_first(&self, tag: Option<&str>, limit: usize) -> Vec<OneShotStatus> {
        let mut v: Vec<(&ShotKey, &ShotState)> = self
            .oneshots
            .iter()
            .filter(|(k, _)| tag.is_none_or(|t| k.0.rare().tags.iter().any(|x| x == t)))
            .collect();
        let order = |a: &(&ShotKey, &ShotState), b: &(&ShotKey, &ShotState)| {
            let (a, b) = (&a.0 .0, &b.0 .0);
            a.due.cmp(&b.due).then_with(|| a.id.cmp(&b.id))
        };
        if limit < v.len() {
            v.select_nth_unstable_by(limit, order);
            v.truncate(limit);
        }
        v.sort_by(order);
        v.into_iter()
            .map(|(k, s)| OneShotStatus {
                def: k.0.clone(),
                next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
                running: s.running,
            })
            .collect()
    }

    /// One pending one-shot.
    pub fn oneshot(&self, id: &str) -> Option<OneShotStatus> {
        self.oneshots.get_key_value(id).map(|(k, s)| OneShotStatus {
            def: k.0.clone(),
            next_attempt_at: s.entry.and_then(|e| self.heap.due_of(e)),
            running: s.running,
        })
    }

    /// A pending one-shot's definition.
    pub(super) fn shot_def(&self, id: &str) -> Option<Arc<OneShot>> {
        self.oneshots.get_key_value(id).map(|(k, _)| k.0.clone())
    }

    /// How many one-shots are pending.
    pub fn oneshot_count(&self) -> usize {
        self.oneshots.len()
    }

    pub(super) fn schedule_oneshot(&mut self, shot: OneShot, trigger: Trigger, now: DateTime<Utc>) {
        let due = shot.due.max(now);
        let def = Arc::new(shot);
        let entry = self.heap.insert(
            due,
            Due::OneShot {
                shot: def.clone(),
                attempt: 1,
                trigger,
            },
        );
        self.oneshots.insert(
            ShotKey(def),
            ShotState {
                entry: Some(entry),
                running: false,
            },
        );
    }

    pub(super) fn on_oneshot_due(
        &mut self,
        id: &str,
        attempt: u32,
        trigger: Trigger,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        if self.stopping {
            return;
        }
        let Some(scheduled) = self.shot_def(id).map(|d| d.due) else {
            return;
        };
        let Some(shot) = self.oneshots.get_mut(id) else {
            return;
        };
        shot.entry = None;
        let p = self.new_oneshot_pending(id, trigger, attempt, scheduled, now);
        self.enqueue(p, now, out);
    }
}
