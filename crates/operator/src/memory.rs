//! Gives the C allocator's free memory back to the system once an install burst has settled.
//!
//! Rendering and applying a release allocates megabytes that are freed when the pass ends;
//! glibc keeps those freed blocks (below the top of its heap the trim threshold never returns
//! them), so after installing three real releases two thirds of the operator's anonymous
//! memory is free memory it holds (docs/performance.md). Each install pass tells [`passed`];
//! [`QUIET`] after the last pass of a burst, one background task calls `malloc_trim` once.
//! The heap is the process's, so the debounce is process-wide too.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::{sync::Notify, time::Instant};

/// How long after the last install pass the trim waits: the passes of providers installed
/// together, and the reconciles their status writes cause, end within it and trim once.
pub const QUIET: Duration = Duration::from_secs(2);

/// What the trimming task does next.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// No pass since the last trim: wait for one.
    Idle,
    /// A pass ended less than the quiet time ago: look again after this long.
    Wait(Duration),
    /// The last pass ended the quiet time ago or more: trim.
    Trim,
}

/// The decision: `pending` is when the last install pass not yet followed by a trim ended.
pub fn next(pending: Option<Instant>, now: Instant, quiet: Duration) -> Next {
    match pending {
        None => Next::Idle,
        Some(at) => match quiet.checked_sub(now.saturating_duration_since(at)) {
            Some(left) if !left.is_zero() => Next::Wait(left),
            _ => Next::Trim,
        },
    }
}

/// The debounce: when the last untrimmed pass ended, and the task it wakes.
#[derive(Default)]
pub struct Trimmer {
    pending: Mutex<Option<Instant>>,
    wake: Notify,
}

impl Trimmer {
    /// Notes that a pass ended now.
    pub fn passed(&self) {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.wake.notify_one();
    }

    /// The task: waits for passes and calls `trim` once each burst has been quiet for [`QUIET`].
    pub async fn run(self: Arc<Self>, trim: fn() -> bool) {
        loop {
            self.wake.notified().await;
            loop {
                match self.step() {
                    Next::Idle => break,
                    Next::Wait(left) => tokio::time::sleep(left).await,
                    Next::Trim => {
                        // It walks the whole heap: off the runtime's worker threads.
                        let released = tokio::task::spawn_blocking(trim).await;
                        tracing::debug!(
                            released = released.unwrap_or(false),
                            "returned free heap memory"
                        );
                        break;
                    }
                }
            }
        }
    }

    /// The decision now; a trim decided clears the pending pass under the same lock, so a pass
    /// ending meanwhile is not lost.
    fn step(&self) -> Next {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let step = next(*pending, Instant::now(), QUIET);
        if step == Next::Trim {
            *pending = None;
        }
        step
    }
}

static PROCESS: OnceLock<Arc<Trimmer>> = OnceLock::new();

/// Notes that an install pass ended (it rendered and applied, or failed to); the first call
/// starts the process's trimming task (glibc's `malloc_trim`). Cheap: a lock, a store and a
/// notification.
pub fn passed() {
    PROCESS
        .get_or_init(|| {
            let t = Arc::new(Trimmer::default());
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                drop(rt.spawn(t.clone().run(capi_malloc_trim::trim)));
            }
            t
        })
        .passed();
}

#[cfg(test)]
mod tests {
    use super::*;

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

    static TRIMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn counted() -> bool {
        TRIMS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        true
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_passes_trims_once_after_the_quiet_time() {
        let t = Arc::new(Trimmer::default());
        tokio::spawn(t.clone().run(counted));
        let trims = || TRIMS.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..3 {
            t.passed();
            tokio::time::sleep(QUIET / 2).await;
        }
        assert_eq!(trims(), 0, "trimmed within the burst");
        tokio::time::sleep(QUIET).await;
        // The blocking pool's thread runs in real time: give it a moment.
        for _ in 0..200 {
            if trims() > 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            tokio::task::yield_now().await;
        }
        assert_eq!(trims(), 1);
        tokio::time::sleep(QUIET * 10).await;
        assert_eq!(trims(), 1, "trimmed again without a pass");
    }
}
