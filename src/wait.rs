//! Deadlines, the polling back-off, and the executor of blocking acquisitions.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::notify::{Removed, Subscription};

/// How long an acquisition may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// One protocol attempt, never sleeping (`try_*`).
    Once,
    /// Until this instant (`try_*_for`, `try_*_until`).
    At(Instant),
    /// For ever (`read`, `write`).
    Never,
}

impl Deadline {
    /// `try_*_for(d)`: a duration becomes a deadline; an overflow waits for ever.
    pub(crate) fn after(d: Duration) -> Deadline {
        match Instant::now().checked_add(d) {
            Some(t) => Deadline::At(t),
            None => Deadline::Never,
        }
    }
}

/// Runs an acquisition's future on the calling thread.
///
/// The protocol is written once, as `async` functions whose only `.await` is the pause
/// between two looks (`protocol::Attempt::wait`). In [`crate::protocol::Mode::Blocking`]
/// that pause blocks the thread itself, so the future is ready at its first poll: the
/// blocking API pays one poll and no allocation for being async underneath. Should a
/// future ever return `Pending` here, the thread parks until it is woken.
///
/// The future comes pinned where its caller made it (`block_on(pin!(...))`): an
/// acquisition's future is a few kilobytes, and taking it by value copied it twice.
pub(crate) fn block_on<F: Future>(mut f: std::pin::Pin<&mut F>) -> F::Output {
    if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return v;
    }
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// Exponential back-off with jitter between two bounds.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
    /// The maximum it was made with, before any [`Backoff::backstop`].
    polled_max: Duration,
    /// A higher ceiling for the next step only ([`Backoff::stretch`]).
    stretch: Option<Duration>,
    rng: u64,
}

impl Backoff {
    /// The shortest pause a waiter takes, whatever it was configured with: a waiter
    /// with nothing to do sleeps, it never spins.
    pub(crate) const FLOOR: Duration = Duration::from_micros(50);

    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        let min = min.max(Self::FLOOR);
        Backoff {
            next: min,
            max: max.max(min),
            polled_max: max.max(min),
            stretch: None,
            rng: seed,
        }
    }

    /// Where events wake the waiter, polling is only a backstop: the pauses may grow
    /// to `max` (never shorter than the maximum they had).
    pub(crate) fn backstop(&mut self, max: Duration) {
        self.max = self.max.max(max);
    }

    /// Events stopped coming (the subscription is dead): polling is the floor again, and
    /// the pauses go back under the maximum they were made with.
    pub(crate) fn unbackstop(&mut self) {
        self.max = self.polled_max;
        self.next = self.next.min(self.max);
        self.stretch = None;
    }

    /// Skips the short steps: the next one is `to` (at most the maximum, and never
    /// shorter than it would have been). For a wait whose end an event will tell (see
    /// `Attempt::sleep`).
    pub(crate) fn skip_short(&mut self, to: Duration) {
        self.next = self.next.max(to.min(self.max));
    }

    /// Lets the next step, and the doubling after it, go up to `ceiling` rather than the
    /// maximum: for a wait that events cover completely (see `Attempt::sleep`). The
    /// step after that is back under the maximum.
    pub(crate) fn stretch(&mut self, ceiling: Duration) {
        self.stretch = Some(ceiling);
    }

    /// The next pause: the current step scaled by a random factor in [0.5, 1.5), after
    /// which the step doubles up to the maximum.
    pub(crate) fn step(&mut self) -> Duration {
        let cap = self.stretch.take().map_or(self.max, |c| c.max(self.max));
        let next = self.next.min(cap);
        // xorshift64*: jitter only, no need for a cryptographic generator.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11; // 53 bits
        let factor = 0.5 + (r as f64) / ((1u64 << 53) as f64);
        // Saturating: bounds near `Duration::MAX` must not overflow.
        let d = Duration::try_from_secs_f64(next.as_secs_f64() * factor).unwrap_or(cap);
        self.next = next.saturating_mul(2).min(cap);
        d
    }

    /// The next pause, cut to the deadline and to `until` (see [`Backoff::sleep`]);
    /// `None` when the deadline has passed or the call may not sleep at all.
    pub(crate) fn pause(&mut self, deadline: Deadline, until: Option<Instant>) -> Option<Duration> {
        let now = Instant::now();
        let pause = match deadline {
            Deadline::Once => return None,
            Deadline::Never => self.step(),
            Deadline::At(t) => {
                if now >= t {
                    return None;
                }
                self.step().min(t - now)
            }
        };
        Some(match until {
            Some(u) => pause.min(u.saturating_duration_since(now)).max(Self::FLOOR),
            None => pause,
        })
    }

    /// Sleeps for the next step, cut to the deadline and to `until` (the next renewal of
    /// the waiter's own files). Returns `None` (without sleeping) when the deadline has
    /// passed or the call may not sleep at all, else what the subscription saw removed
    /// ([`Removed::NOTHING`] without one, or when the pause just ran out).
    ///
    /// With a subscription, a change in the state directory ends the pause early.
    pub(crate) fn sleep(
        &mut self,
        deadline: Deadline,
        until: Option<Instant>,
        wake: Option<&Subscription<'_>>,
    ) -> Option<Removed> {
        let pause = self.pause(deadline, until)?;
        Some(match wake {
            Some(sub) => sub.wait(pause),
            None => {
                std::thread::sleep(pause);
                Removed::NOTHING
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_bounds() {
        let min = Duration::from_millis(2);
        let max = Duration::from_millis(100);
        let mut b = Backoff::new(min, max);
        for _ in 0..50 {
            let d = b.step();
            assert!(d >= min / 2 && d < max.mul_f64(1.5), "{d:?}");
        }
        assert_eq!(b.next, max);
    }

    #[test]
    fn a_backstop_undone_brings_the_pauses_back_under_the_maximum() {
        let max = Duration::from_millis(10);
        let mut b = Backoff::new(Duration::from_millis(1), max);
        b.backstop(Duration::from_secs(2));
        for _ in 0..20 {
            b.step();
        }
        assert_eq!(b.next, Duration::from_secs(2));
        b.stretch(Duration::from_secs(30));
        b.unbackstop();
        for _ in 0..20 {
            let d = b.step();
            assert!(d < max.mul_f64(1.5), "{d:?}");
        }
    }

    #[test]
    fn skipping_the_short_steps_starts_at_the_given_pause_within_the_max() {
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        b.backstop(Duration::from_secs(2));
        b.skip_short(Duration::from_millis(100));
        let first = b.step();
        assert!(
            (Duration::from_millis(50)..Duration::from_millis(150)).contains(&first),
            "{first:?}"
        );
        assert_eq!(b.next, Duration::from_millis(200));
        // Never beyond the maximum, never shorter than the step already reached.
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(10));
        b.skip_short(Duration::from_secs(1));
        assert_eq!(b.next, Duration::from_millis(10));
        b.skip_short(Duration::from_millis(2));
        assert_eq!(b.next, Duration::from_millis(10));
    }

    #[test]
    fn a_backstop_grows_to_its_max_from_the_same_start() {
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
        b.backstop(Duration::from_secs(2));
        let first = b.step();
        assert!(first < Duration::from_millis(2), "{first:?}");
        for _ in 0..20 {
            b.step();
        }
        assert_eq!(b.next, Duration::from_secs(2));
        // Never shortens what is already longer.
        let mut b = Backoff::new(Duration::from_secs(5), Duration::from_secs(10));
        b.backstop(Duration::from_secs(2));
        assert_eq!(
            (b.next, b.max),
            (Duration::from_secs(5), Duration::from_secs(10))
        );
    }

    #[test]
    fn a_stretch_lasts_one_step() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(2));
        b.step();
        assert_eq!(b.next, Duration::from_secs(2));
        for _ in 0..10 {
            b.stretch(Duration::from_secs(30));
            b.step();
        }
        assert_eq!(b.next, Duration::from_secs(30));
        // Back under the maximum at once.
        let d = b.step();
        assert!(d < Duration::from_secs(3), "{d:?}");
        assert_eq!(b.next, Duration::from_secs(2));
    }

    #[test]
    fn extreme_bounds_neither_overflow_nor_spin() {
        let mut b = Backoff::new(Duration::MAX, Duration::MAX);
        for _ in 0..5 {
            assert!(b.step() > Duration::from_secs(1));
        }
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        for _ in 0..5 {
            assert!(b.step() >= Backoff::FLOOR / 2);
        }
    }

    #[test]
    fn deadline_overflow_waits_for_ever() {
        assert_eq!(Deadline::after(Duration::MAX), Deadline::Never);
        assert!(matches!(Deadline::after(Duration::ZERO), Deadline::At(_)));
    }

    #[test]
    fn once_never_sleeps() {
        let mut b = Backoff::new(Duration::from_secs(5), Duration::from_secs(5));
        let t = Instant::now();
        assert!(b.sleep(Deadline::Once, None, None).is_none());
        assert!(b.sleep(Deadline::At(Instant::now()), None, None).is_none());
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
