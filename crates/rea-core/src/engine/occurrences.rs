//! Schedule occurrences: start-up (interrupted runs, catch-up after
//! downtime, `@reboot`), each occurrence as it comes due, and the catch-up
//! policy for occurrences that passed unseen (downtime, a stalled daemon, a
//! wall-clock step). One catch-up path serves all three.

use super::*;

/// Occurrences counted one by one when the daemon finds it has passed many;
/// beyond this the count is reported as a lower bound.
const MISSED_COUNT_CAP: u64 = 100_000;

/// Why an occurrence found passed at start or after a clock step was not
/// run when due (a `late` alert's reason).
const NOT_RUNNING: &str =
    "the daemon was not running it then (down, stalled, or the wall clock jumped)";

fn sample_jitter(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let ms = max.as_millis().min(u64::MAX as u128) as u64;
    Duration::from_millis(rng.u64(0..=ms))
}

fn missed_record(name: &str, kept: &[DateTime<Utc>], count: u64, now: DateTime<Utc>) -> Action {
    let mut rec = Record::new(Event::Missed, now);
    rec.job = Some(name.to_string());
    rec.count = Some(count);
    rec.scheduled = kept.last().copied();
    rec.reason = Some(if count >= MISSED_COUNT_CAP {
        format!("at least {count} occurrences passed while the daemon was not running them (catch_up policy)")
    } else {
        format!(
            "{count} occurrence(s) passed while the daemon was not running them (catch_up policy)"
        )
    });
    if let Some(first) = kept.first() {
        rec.detail =
            Some(json!({ "first": first.to_rfc3339_opts(chrono::SecondsFormat::Secs, true) }));
    }
    Action::Record(Box::new(rec))
}

/// Occurrences passed over while the run of `at` waited out its random
/// start delay (`jitter` as long as the schedule's period).
fn delayed_past(
    name: &str,
    at: DateTime<Utc>,
    jitter: Duration,
    newest: DateTime<Utc>,
    count: u64,
    now: DateTime<Utc>,
) -> Action {
    let mut rec = Record::new(Event::Missed, now);
    rec.job = Some(name.to_string());
    rec.count = Some(count);
    rec.scheduled = Some(newest);
    rec.reason = Some(format!(
        "{count} occurrence(s) came due while the run of {} waited out its start delay (jitter {}): not run",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        crate::duration::format(jitter)
    ));
    Action::Record(Box::new(rec))
}

impl Engine {
    /// Schedules every job, records interrupted runs of the previous daemon,
    /// applies catch-up for occurrences missed while it was down, and starts
    /// `@reboot` jobs.
    pub fn start(&mut self, now: DateTime<Utc>, recovered: Recovered) -> Vec<Action> {
        let mut out = Vec::new();
        let mut rec = Record::new(Event::ConfigLoaded, now);
        rec.count = Some(self.order.len() as u64);
        rec.detail = Some(
            json!({ "file": self.file, "added": self.order.len(), "changed": 0, "removed": 0, "unchanged": 0 }),
        );
        out.push(Action::Record(Box::new(rec)));
        self.jobs.all_changed();
        self.paused = recovered
            .paused
            .into_iter()
            .filter(|n| self.jobs.contains_key(n.as_str()))
            .collect();
        for started in recovered.unfinished {
            let mut rec = started.clone();
            rec.ts = now;
            rec.status = Some(RunStatus::Interrupted);
            rec.ended = None;
            let mut reason = String::from(
                "the daemon stopped while this run was in progress (crash, kill -9 or power loss)",
            );
            if let Some(n) = rec.run.as_ref().and_then(|r| recovered.terminated.get(r)) {
                reason.push_str(&format!(
                    "; {n} of its processes were still running at restart and were terminated"
                ));
            }
            rec.reason = Some(reason);
            out.push(Action::Record(Box::new(rec)));
        }
        let names = self.order.clone();
        for name in names {
            let Some(state) = self.jobs.get(&name) else {
                continue;
            };
            if !state.def.enabled {
                continue;
            }
            let reboot = state.def.is_reboot();
            self.alerts_job_seen(&name, now);
            if reboot {
                self.dispatch(
                    &name,
                    Trigger::Reboot,
                    1,
                    now,
                    Duration::ZERO,
                    now,
                    &mut out,
                );
                continue;
            }
            let horizon = recovered
                .last_occurrences
                .get(&*name)
                .copied()
                .or(recovered.previous_start);
            if let Some(since) = horizon {
                self.set_last_occurrence(&name, since);
                self.catch_up(&name, since, now, false, &mut out);
            }
            self.schedule_next(&name, now);
        }
        self.fill_slots(now, &mut out);
        out
    }

    pub(super) fn on_occurrence(
        &mut self,
        name: &str,
        id: EntryId,
        at: DateTime<Utc>,
        jitter: Duration,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.next == Some(id) {
            state.next = None;
        }
        state.last_occurrence = Some(state.last_occurrence.map_or(at, |l| l.max(at)));
        if self.stopping {
            return;
        }
        self.alerts_due(name, later(at, jitter), None, now, out);
        if let Arbiter::Store(_) = self.arbiter {
            // Occurrences after `at` that have also passed (a stalled
            // daemon): the newest is claimed; the store's mark records the
            // gap. Pause, overlap and an earlier retry are the store's
            // decisions.
            let (kept, _) = self.passed(name, at, now, 1);
            let newest = kept.last().copied().unwrap_or(at);
            self.set_last_occurrence(name, newest);
            self.schedule_next(name, now);
            // Behind occurrences still being caught up (`all`), it waits
            // its turn: claimed now, it would move the store's mark past
            // them. At most `catch_up_limit` wait (a job slower than its
            // schedule would catch up for ever); past that it is claimed,
            // and those left are recorded missed.
            let limit = self
                .jobs
                .get(name)
                .map_or(1, |s| s.def.catch_up_limit as usize);
            if let Arbiter::Store(claims) = &mut self.arbiter {
                if let Some(queue) = claims.catching_up.get_mut(name) {
                    if queue.len() < limit {
                        queue.push_back(newest);
                        return;
                    }
                }
            }
            let overlap = self.jobs.get(name).map_or(Overlap::Skip, |s| s.def.overlap);
            let p = self.new_pending(name, Trigger::Schedule, 1, newest, jitter, now);
            self.request_claim(p, overlap, ClaimMode::Run, 1, out);
            return;
        }
        // Occurrences due while this one waited out its start delay (a
        // jitter as long as the period) were passed over by that choice,
        // not by a stall: recorded as such, never caught up.
        let mut since = at;
        if !jitter.is_zero() {
            let (kept, count) = self.passed(name, at, later(at, jitter).min(now), 1);
            if let Some(newest) = kept.last().copied() {
                out.push(delayed_past(name, at, jitter, newest, count, now));
                self.set_last_occurrence(name, newest);
                since = newest;
            }
        }
        if self.paused.contains(name) {
            self.catch_up(name, since, now, true, out);
            self.schedule_next(name, now);
            let pending = self.new_pending(name, Trigger::Schedule, 1, at, jitter, now);
            out.push(skip_record(
                &pending,
                "the job is paused (rea resume to resume)",
                now,
            ));
            return;
        }
        // A fresh occurrence supersedes a retry still waiting from the previous
        // one: both would do the same work, and the newer run carries the
        // newer data.
        if let Some(state) = self.jobs.get_mut(name) {
            if let Some(rid) = state.retry.take() {
                self.heap.cancel(rid);
            }
        }
        // This occurrence first, then those after it that have also passed
        // (the daemon was stalled) through the catch-up policy: queued
        // behind it, they are never taken for "the previous run".
        self.dispatch(name, Trigger::Schedule, 1, at, jitter, now, out);
        self.catch_up(name, since, now, true, out);
        self.schedule_next(name, now);
    }

    /// Occurrences strictly after `after` up to `now`, oldest first, at most
    /// `keep` of the newest kept, plus the total count.
    pub(super) fn passed(
        &self,
        name: &str,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
        keep: usize,
    ) -> (Vec<DateTime<Utc>>, u64) {
        let Some(state) = self.jobs.get(name) else {
            return (Vec::new(), 0);
        };
        let def = &state.def;
        let mut kept = VecDeque::new();
        let mut count = 0u64;
        let mut cursor = after;
        while let Some(next) = def.next_after(cursor) {
            if next > now || count >= MISSED_COUNT_CAP {
                break;
            }
            count += 1;
            kept.push_back(next);
            if kept.len() > keep.max(1) {
                kept.pop_front();
            }
            cursor = next;
        }
        (kept.into_iter().collect(), count)
    }

    /// Every occurrence in (since, now] was missed (the daemon was down or
    /// stalled, or the clock jumped): apply the job's policy. `covered`: a run
    /// starting now for the occurrence at `since` already does what "once"
    /// asks (the stall case), so only "all" adds runs then.
    pub(super) fn catch_up(
        &mut self,
        name: &str,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
        covered: bool,
        out: &mut Vec<Action>,
    ) {
        let Some(def) = self.jobs.get(name).map(|s| s.def.clone()) else {
            return;
        };
        let (kept, count) = self.passed(name, since, now, def.catch_up_limit as usize);
        if count == 0 {
            return;
        }
        let latest = *kept.last().unwrap_or(&since);
        if !covered {
            // The first of them was not run when due: `late` counts from it.
            if let Some(first) = def.next_after(since) {
                self.alerts_due(name, first, Some(NOT_RUNNING), now, out);
            }
        }
        self.set_last_occurrence(name, latest);
        if let Arbiter::Store(_) = self.arbiter {
            // The store runs each (or records it missed) on exactly one
            // node, whichever asks first.
            let keep = super::cluster::caught_up_kept(&def);
            let (kept, count) = self.passed(name, since, now, keep);
            self.claim_caught_up(name, &def, kept, count, now, out);
            return;
        }
        match def.catch_up {
            _ if self.paused.contains(name) => out.push(missed_record(name, &kept, count, now)),
            CatchUp::None => out.push(missed_record(name, &kept, count, now)),
            CatchUp::Once if covered => out.push(missed_record(name, &kept, count, now)),
            CatchUp::Once => {
                if count > 1 {
                    out.push(missed_record(name, &kept[..kept.len() - 1], count - 1, now));
                }
                let p = self.new_pending(name, Trigger::CatchUp, 1, latest, Duration::ZERO, now);
                self.push_waiting(name, p, now, out);
            }
            CatchUp::All => self.run_missed(name, &kept, count, now, out),
        }
    }

    /// `catch_up = "all"`: the newest `catch_up_limit` missed occurrences
    /// run one after another; older ones are recorded as missed.
    pub(super) fn run_missed(
        &mut self,
        name: &str,
        kept: &[DateTime<Utc>],
        count: u64,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let dropped = count.saturating_sub(kept.len() as u64);
        if dropped > 0 {
            out.push(missed_record(name, &[], dropped, now));
        }
        for at in kept {
            let p = self.new_pending(name, Trigger::CatchUp, 1, *at, Duration::ZERO, now);
            self.push_waiting(name, p, now, out);
        }
    }

    pub(super) fn replan_after_clock_change(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let due: Vec<(Arc<str>, EntryId, DateTime<Utc>)> = self
            .jobs
            .iter()
            .filter_map(|(name, s)| {
                let id = s.next?;
                match self.heap.get(id) {
                    Some(Due::Occurrence { at, .. }) if *at <= now => Some((name.clone(), id, *at)),
                    _ => None,
                }
            })
            .collect();
        for (name, id, at) in due {
            self.heap.cancel(id);
            if let Some(s) = self.jobs.get_mut(&name) {
                s.next = None;
            }
            // `at` itself is among the missed: look from just before it.
            let since = at - chrono::Duration::milliseconds(1);
            if !self.stopping {
                self.catch_up(&name, since, now, false, out);
            }
            self.schedule_next(&name, now);
        }
    }

    pub(super) fn set_last_occurrence(&mut self, name: &str, at: DateTime<Utc>) {
        if let Some(s) = self.jobs.get_mut(name) {
            s.last_occurrence = Some(s.last_occurrence.map_or(at, |l| l.max(at)));
        }
    }

    /// Puts the job's next occurrence strictly after both `now` and its last
    /// dealt-with occurrence into the heap.
    pub(super) fn schedule_next(&mut self, name: &str, now: DateTime<Utc>) {
        let Some(state) = self.jobs.get_mut(name) else {
            return;
        };
        if state.removed || !state.def.enabled || state.def.is_reboot() || state.next.is_some() {
            return;
        }
        let after = state.last_occurrence.map_or(now, |l| l.max(now));
        let Some(at) = state.def.next_after(after) else {
            return;
        };
        let jitter = sample_jitter(&mut self.rng, state.def.jitter);
        self.max_jitter = self.max_jitter.max(jitter);
        let due = later(at, jitter);
        let id = self.heap.insert(
            due,
            Due::Occurrence {
                job: state.name.clone(),
                at,
                jitter,
            },
        );
        state.next = Some(id);
    }
}
