//! Gives the C allocator's free memory back to the system once a burst of reconciles settles.
//!
//! Rendering and applying a release allocates megabytes that are freed when the pass ends;
//! glibc keeps those freed blocks (below the top of its heap the trim threshold never returns
//! them), so after installing three real releases two thirds of the operator's anonymous
//! memory is free memory it holds (docs/performance.md). Every reconcile tells [`passed`];
//! [`QUIET`] after the last one of a burst, one thread of its own calls `malloc_trim` once.
//! The heap is the process's, so the debounce is process-wide too, and it runs on a plain
//! thread rather than a task so that it outlives any one runtime (the tests start many).

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long after the last reconcile the trim waits. Short, so that the heap the install
/// passes freed is given back while the Deployments they applied become available, before the
/// providers read Ready (2 runs in 4 with the three real providers; a 2 s quiet time trimmed
/// after Ready in every run: docs/performance.md). Idle, nothing reconciles and nothing is
/// trimmed.
pub const QUIET: Duration = Duration::from_millis(250);

/// What the trimming thread does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// No reconcile since the last trim: wait for one.
    Idle,
    /// A reconcile ended less than the quiet time ago: look again after this long.
    Wait(Duration),
    /// The last reconcile ended the quiet time ago or more: trim.
    Trim,
}

/// The decision: `pending` is when the last reconcile not yet followed by a trim ended.
pub fn next(pending: Option<Instant>, now: Instant, quiet: Duration) -> Next {
    match pending {
        None => Next::Idle,
        Some(at) => match quiet.checked_sub(now.saturating_duration_since(at)) {
            Some(left) if !left.is_zero() => Next::Wait(left),
            _ => Next::Trim,
        },
    }
}

/// The debounce: when the last untrimmed reconcile ended, and the thread it wakes.
pub struct Trimmer {
    quiet: Duration,
    pending: Mutex<Option<Instant>>,
    wake: Condvar,
}

impl Trimmer {
    /// A debounce that trims `quiet` after the last reconcile of a burst.
    pub fn new(quiet: Duration) -> Trimmer {
        Trimmer {
            quiet,
            pending: Mutex::new(None),
            wake: Condvar::new(),
        }
    }

    /// Notes that a reconcile ended now.
    pub fn passed(&self) {
        self.due(Instant::now());
    }

    /// Asks for a trim now, without the quiet time.
    pub fn now(&self) {
        let now = Instant::now();
        self.due(now.checked_sub(self.quiet).unwrap_or(now));
    }

    fn due(&self, at: Instant) {
        *self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(at);
        self.wake.notify_one();
    }

    /// The thread's loop: waits for reconciles and calls `trim` once each burst has been quiet
    /// for the quiet time. Never returns.
    pub fn run(&self, trim: fn() -> bool) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            pending = match next(*pending, Instant::now(), self.quiet) {
                Next::Idle => self
                    .wake
                    .wait(pending)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Next::Wait(left) => {
                    let woken = self.wake.wait_timeout(pending, left);
                    woken.unwrap_or_else(std::sync::PoisonError::into_inner).0
                }
                Next::Trim => {
                    // Cleared under the lock, so a reconcile ending during the walk is not
                    // lost; the lock is not held over the walk, so reconciles never wait on it.
                    *pending = None;
                    drop(pending);
                    let released = trim();
                    tracing::debug!(released, "returned free heap memory");
                    self.pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                }
            };
        }
    }
}

static PROCESS: OnceLock<Option<Arc<Trimmer>>> = OnceLock::new();

/// The process's trimmer; the first call starts its thread (glibc's `malloc_trim`).
fn process() -> Option<&'static Arc<Trimmer>> {
    PROCESS
        .get_or_init(|| {
            let t = Arc::new(Trimmer::new(QUIET));
            let run = t.clone();
            // Without the thread memory is only not given back: nothing to fail over.
            std::thread::Builder::new()
                .name("heap-trim".into())
                .spawn(move || run.run(capi_malloc_trim::trim))
                .ok()
                .map(|_| t)
        })
        .as_ref()
}

/// Notes that a reconcile ended. Cheap: a lock, a store and a notification.
pub fn passed() {
    if let Some(t) = process() {
        t.passed();
    }
}

/// Asks for the free heap to be given back now: a provider has just become Ready, after the
/// passes that installed it freed what they rendered. The trimming thread does it while the
/// status write that shows Ready is sent; nothing here waits for it (an await would be a point
/// where the seeded fault tier's paused clock could jump).
pub fn ready() {
    if let Some(t) = process() {
        t.now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_burst_trims_once_after_its_last_pass() {
        let t0 = Instant::now();
        let quiet = Duration::from_secs(2);
        assert_eq!(next(None, t0, quiet), Next::Idle);
        // A pass just ended: wait the whole quiet time.
        assert_eq!(next(Some(t0), t0, quiet), Next::Wait(quiet));
        // Another pass of the burst 1.5 s later moves the trim: 2 s after it, not after the first.
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(
            next(Some(later), t0 + quiet, quiet),
            Next::Wait(Duration::from_millis(1500))
        );
        assert_eq!(next(Some(later), later + quiet, quiet), Next::Trim);
        assert_eq!(
            next(Some(t0), t0 + Duration::from_secs(60), quiet),
            Next::Trim
        );
    }

    static TRIMS: AtomicUsize = AtomicUsize::new(0);

    fn counted() -> bool {
        TRIMS.fetch_add(1, Ordering::SeqCst);
        true
    }

    #[test]
    fn a_burst_of_passes_trims_once_after_the_quiet_time() {
        // Passes 10 times closer together than the quiet time: a loaded machine runs the test
        // late, and only a delay of 0.45 s between two of them would trim within the burst.
        let quiet = Duration::from_millis(500);
        let t = Arc::new(Trimmer::new(quiet));
        let run = t.clone();
        std::thread::spawn(move || run.run(counted));
        let trims = || TRIMS.load(Ordering::SeqCst);
        for _ in 0..4 {
            t.passed();
            std::thread::sleep(quiet / 10);
        }
        assert_eq!(trims(), 0, "trimmed within the burst");
        // Generous: a loaded machine may run the thread late, never early.
        for _ in 0..100 {
            if trims() > 0 {
                break;
            }
            std::thread::sleep(quiet / 4);
        }
        assert_eq!(trims(), 1);
        std::thread::sleep(quiet * 3);
        assert_eq!(trims(), 1, "trimmed again without a pass");
        t.passed();
        for _ in 0..100 {
            if trims() > 1 {
                break;
            }
            std::thread::sleep(quiet / 4);
        }
        assert_eq!(trims(), 2, "the next burst trims again");
    }

    static URGENT: AtomicUsize = AtomicUsize::new(0);

    fn counted_urgent() -> bool {
        URGENT.fetch_add(1, Ordering::SeqCst);
        true
    }

    #[test]
    fn ready_trims_without_waiting_for_the_quiet_time() {
        // A quiet time no test waits out: a trim seen here came from `now`.
        let t = Arc::new(Trimmer::new(Duration::from_secs(3600)));
        let run = t.clone();
        std::thread::spawn(move || run.run(counted_urgent));
        t.passed();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            URGENT.load(Ordering::SeqCst),
            0,
            "trimmed within the quiet time"
        );
        t.now();
        for _ in 0..100 {
            if URGENT.load(Ordering::SeqCst) > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(URGENT.load(Ordering::SeqCst), 1);
    }
}
