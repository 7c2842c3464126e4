//! rea's core: the model of jobs, runs and history records, and every
//! decision about them (when a schedule fires, whether a run may start, when
//! a failure is retried). It never reads the clock and does no I/O: time is
//! an argument, effects are returned as data. That is what lets days of
//! schedule, DST transitions, clock steps, overlap, retries and catch-up be
//! tested in milliseconds.
//!
//! # The workspace
//!
//! ```text
//!                  rea-core   model + decisions (this crate)
//!                 ↗        ↖
//!        rea-config        rea-store
//!  jobs.toml, crontab      history, one-shot journal, paused set,
//!  → core types            occurrence claims (traits; JSON lines by default)
//!                 ↖        ↗
//!                    rea      the program: CLI, daemon loop, executor,
//!                             control socket, watcher, metrics
//!
//!        rea-bench (benchmarks; not installed)    fuzz/ (core + config)
//! ```
//!
//! An arrow points at what a crate may use. The graph is the layering: the
//! core cannot reach the disk, the readers and the stores cannot reach each
//! other or the daemon, and `.ci/layers` fails CI if a dependency that
//! would break this (tokio, libc, rustix, toml in the core; tokio or
//! rea-config in the store) comes back.
//!
//! # How data flows
//!
//! ```text
//!  jobs.toml ──rea-config──▶ Job (+ Plan) ──▶ Engine ◀── events + "now" (rea's daemon loop)
//!                                              │
//!                                  actions ────┤ Start / Terminate / Record / AfterRun / OneShotDone
//!                                              ▼
//!              rea's executor runs processes ──▶ Outcome ──▶ Engine ──▶ Record ──▶ rea-store
//! ```
//!
//! # This crate
//!
//! | module | owns |
//! |---|---|
//! | [`alert`] | a job's expectations and the alert event every channel receives |
//! | [`audit`] | the audit log's entry: who asked for which change, and the answer |
//! | [`job`] | a job of the file with its defaults; the job-name rule |
//! | [`notify`] | a job's webhooks and ping, their filters, and what they are about |
//! | [`oneshot`] | a one-shot job's definition |
//! | [`run`] | what a run executes and how it ended |
//! | [`record`] | the history's vocabulary (one record per event) |
//! | [`schedule`] | cron expressions → instants in a zone, DST policy |
//! | [`zone`] | zone names → `chrono_tz::Tz` (the machine's zone passed in) |
//! | [`due_queue`] | the min-heap of due instants |
//! | [`backoff`] | retry delays |
//! | [`engine`] | the daemon's decisions as a state machine |
//! | [`trust`] | who may own the files that decide what runs |
//! | [`tenant`] | whose a job is: the system or a user; `alice/backup` |
//! | [`summary`] | a job's recent record for the live views: 64 outcomes, durations, last success and failure |
//! | [`shown`] | text from outside made safe for a terminal: control characters shown, not sent |
//! | [`duration`], [`suggest`] | `"1h30m"`; "did you mean" |

pub mod alert;
pub mod audit;
pub mod backoff;
pub mod claim;
pub mod due_queue;
pub mod duration;
pub mod engine;
pub mod job;
pub mod notify;
pub mod oneshot;
pub mod params;
pub mod record;
pub mod run;
pub mod schedule;
pub mod shown;
pub mod suggest;
pub mod summary;
pub mod tenant;
pub mod trust;
pub mod zone;
