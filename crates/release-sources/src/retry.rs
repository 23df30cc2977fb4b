//! Retrying temporary failures with exponential backoff: the one loop every remote source
//! uses (the HTTP sources through [`Http`](crate::http::Http), the OCI registry client), so
//! all of them stop doubling at the same cap.
//!
//! Our own rather than a retry crate: the loop is a dozen lines, the retry predicate is
//! [`SourceError::Transient`], and the schedule comes from the sources' `HttpConfig` as it is.

use std::{future::Future, time::Duration};

use crate::SourceError;

/// How many times a request is tried and how long apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    attempts: u32,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// `attempts` tries (at least one), the first retry after `initial`, each next one
    /// after twice the last delay, none after more than `max`.
    pub(crate) fn new(attempts: u32, initial: Duration, max: Duration) -> Backoff {
        Backoff {
            attempts: attempts.max(1),
            initial,
            max,
        }
    }

    /// The delays before each retry: doubling from the initial delay, never above the cap.
    pub(crate) fn delays(self) -> impl Iterator<Item = Duration> {
        let first = self.initial.min(self.max);
        std::iter::successors(Some(first), move |d| {
            Some(d.saturating_mul(2).min(self.max))
        })
        .take(self.attempts.saturating_sub(1) as usize)
    }
}

/// Runs `op` until it succeeds, fails for good, or the attempts are spent, sleeping the
/// [`Backoff::delays`] between temporary failures.
pub(crate) async fn retry<T, F, Fut>(backoff: Backoff, what: &str, op: F) -> Result<T, SourceError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SourceError>>,
{
    retry_with(backoff, what, op, tokio::time::sleep).await
}

/// [`retry`] with the sleep passed in, so tests see the delays without waiting them out.
async fn retry_with<T, F, Fut, S, Slept>(
    backoff: Backoff,
    what: &str,
    mut op: F,
    mut sleep: S,
) -> Result<T, SourceError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SourceError>>,
    S: FnMut(Duration) -> Slept,
    Slept: Future<Output = ()>,
{
    let mut delays = backoff.delays();
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e @ SourceError::Transient { .. }) => {
                let Some(delay) = delays.next() else {
                    return Err(e);
                };
                tracing::info!(what, attempt, error = %e, retry_in = ?delay, "retrying");
                sleep(delay).await;
                attempt += 1;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A schedule whose doubling passes the cap within a few retries.
    fn capped() -> Backoff {
        Backoff::new(8, Duration::from_millis(500), Duration::from_secs(2))
    }

    /// Asserts that `b` is 8 attempts from 500 ms capped at 2 s: doubling, then held at the cap.
    pub(crate) fn assert_capped(b: Backoff) {
        let ms: Vec<u128> = b.delays().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [500, 1000, 2000, 2000, 2000, 2000, 2000]);
    }

    fn transient() -> SourceError {
        SourceError::Transient {
            what: "x".into(),
            reason: "HTTP 503".into(),
        }
    }

    /// Runs `retry_with` over `answers` (one per attempt), returning its result, the number
    /// of attempts made and the delays slept.
    async fn run(
        backoff: Backoff,
        answers: Vec<Result<u32, SourceError>>,
    ) -> (Result<u32, SourceError>, usize, Vec<Duration>) {
        let answers = Mutex::new(answers.into_iter());
        let tried = Mutex::new(0);
        let slept = Mutex::new(Vec::new());
        let r = retry_with(
            backoff,
            "x",
            || {
                *tried
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
                let next = answers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .next();
                async move { next.unwrap_or(Ok(0)) }
            },
            |d| {
                slept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(d);
                async {}
            },
        )
        .await;
        let tried = tried
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (
            r,
            tried,
            slept
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        assert_capped(capped());
        let first_above_cap = Backoff::new(8, Duration::from_secs(30), Duration::from_secs(2));
        assert!(
            first_above_cap
                .delays()
                .all(|d| d == Duration::from_secs(2))
        );
        let once = Backoff::new(0, Duration::from_millis(500), Duration::from_secs(2));
        assert_eq!(once.delays().count(), 0);
    }

    #[tokio::test]
    async fn temporary_failures_are_retried_with_the_capped_delays() {
        let answers = vec![
            Err(transient()),
            Err(transient()),
            Err(transient()),
            Err(transient()),
            Ok(7),
        ];
        let (r, tried, slept) = run(capped(), answers).await;
        assert_eq!((r, tried), (Ok(7), 5));
        let ms: Vec<u128> = slept.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 2000]);
    }

    #[tokio::test]
    async fn lasting_failures_end_when_the_attempts_are_spent() {
        let b = Backoff::new(3, Duration::from_millis(500), Duration::from_secs(2));
        let (r, tried, slept) = run(b, (0..10).map(|_| Err(transient())).collect()).await;
        assert_eq!((r, tried, slept.len()), (Err(transient()), 3, 2));
    }

    #[tokio::test]
    async fn other_failures_are_not_retried() {
        let refused = SourceError::Unauthorized("x".into());
        let (r, tried, slept) = run(capped(), vec![Err(refused.clone())]).await;
        assert_eq!((r, tried, slept.len()), (Err(refused), 1, 0));
    }
}
