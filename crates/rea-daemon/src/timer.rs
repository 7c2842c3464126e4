//! The daemon's only alarm clock: a `CLOCK_REALTIME` timerfd armed at an
//! absolute wall-clock instant with `TFD_TIMER_CANCEL_ON_SET`.
//!
//! Why not `tokio::time::sleep`: tokio's timers are monotonic, so a job due
//! at 03:00 wall time would fire late (or early) after the wall clock is
//! stepped by NTP, `date -s`, or a resume from suspend. An absolute realtime
//! timer expires exactly at the wall instant, and the kernel cancels it with
//! `ECANCELED` whenever the clock is set, which is how a step is noticed
//! without any polling. With nothing due the timer is disarmed and the
//! process makes no wakeups at all.
//!
//! Instants are on the daemon's clock (`rea_store::clock`: in cluster mode,
//! the database's); the timer is armed at the same instant on the kernel's
//! clock, and again whenever the correction between the two changes.

use std::io;
use std::os::fd::OwnedFd;

use chrono::{DateTime, Utc};
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Why `wait` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The armed instant was reached.
    Expired,
    /// The wall clock was set (stepped) or the machine resumed.
    ClockChanged,
}

pub(crate) struct WallTimer {
    fd: AsyncFd<OwnedFd>,
    armed: Option<DateTime<Utc>>,
    /// The daemon clock's correction `armed` was armed under.
    correction_us: i64,
    /// Armed 100 years out (nothing due): re-arming that on every loop
    /// iteration would be a syscall per event for nothing.
    parked: bool,
}

impl WallTimer {
    pub(crate) fn new() -> io::Result<WallTimer> {
        let fd = rustix::time::timerfd_create(
            TimerfdClockId::Realtime,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the OwnedFd is moved into the AsyncFd, which owns it until it
        // is dropped, so the descriptor stays open and never changes.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut timer = WallTimer {
            fd,
            armed: None,
            correction_us: 0,
            parked: false,
        };
        timer.arm(None)?;
        Ok(timer)
    }

    /// Arms the timer at `at` (None: far in the future, which still reports
    /// clock changes).
    pub(crate) fn arm(&mut self, at: Option<DateTime<Utc>>) -> io::Result<()> {
        let correction_us = rea_store::clock::correction_us();
        if (at.is_some() && self.armed == at && self.correction_us == correction_us)
            || (at.is_none() && self.parked)
        {
            return Ok(());
        }
        // "Disarmed" is a timer 100 years out: it costs no wakeups and keeps
        // CANCEL_ON_SET reporting clock steps.
        let when = match at {
            Some(at) => rea_store::clock::kernel_instant(at),
            None => Utc::now() + chrono::Duration::days(36_500),
        };
        let mut secs = when.timestamp();
        let mut nanos = when.timestamp_subsec_nanos() as i64;
        if secs <= 0 {
            secs = 0;
            nanos = 1;
        }
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: secs,
                tv_nsec: nanos.min(999_999_999),
            },
        };
        rustix::time::timerfd_settime(
            self.fd.get_ref(),
            TimerfdTimerFlags::ABSTIME | TimerfdTimerFlags::CANCEL_ON_SET,
            &spec,
        )?;
        self.armed = at;
        self.correction_us = correction_us;
        self.parked = at.is_none();
        Ok(())
    }

    /// Waits until the armed instant or a clock change.
    pub(crate) async fn wait(&mut self) -> io::Result<Wake> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut buf = [0u8; 8];
            match rustix::io::read(guard.get_inner(), &mut buf) {
                Ok(_) => {
                    self.armed = None;
                    self.parked = false;
                    return Ok(Wake::Expired);
                }
                Err(rustix::io::Errno::CANCELED) => {
                    // The timer is disarmed by the cancellation; re-arm so the
                    // next wait still sees the instant.
                    let at = self.armed.take();
                    self.parked = false;
                    self.arm(at)?;
                    return Ok(Wake::ClockChanged);
                }
                Err(rustix::io::Errno::AGAIN) => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
