//! Waiting in a test until a condition holds.

use std::future::Future;
use std::time::Duration;

/// How long [`wait_for`] and [`wait_until`] sleep between two polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// What a polled condition answers: a `bool` (done when `true`), or an `Option<T>` (done when
/// `Some`, the wait then returning the `T`).
pub trait Ready {
    /// What the wait returns once the condition holds.
    type Value;

    /// `Some` once the condition holds.
    fn ready(self) -> Option<Self::Value>;
}

impl Ready for bool {
    type Value = ();

    fn ready(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Ready for Option<T> {
    type Value = T;

    fn ready(self) -> Option<T> {
        self
    }
}

/// Polls `f` every [`POLL_INTERVAL`], blocking the thread, until it is ready (`true`, or
/// `Some(value)`: then returns the value).
///
/// # Panics
///
/// When `f` is still not ready after `timeout`: `timed out after {timeout} waiting for {what}`.
pub fn wait_for<R: Ready>(what: &str, timeout: Duration, mut f: impl FnMut() -> R) -> R::Value {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = f().ready() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Polls the future `f` makes every [`POLL_INTERVAL`] (a tokio sleep in between, so the runtime
/// runs the tasks the condition waits on) until it is ready (`true`, or `Some(value)`: then
/// returns the value). The deadline is on tokio's clock: a test with paused time reaches it.
///
/// # Panics
///
/// When `f` is still not ready after `timeout`: `timed out after {timeout} waiting for {what}`.
pub async fn wait_until<R, F, Fut>(what: &str, timeout: Duration, mut f: F) -> R::Value
where
    R: Ready,
    F: FnMut() -> Fut,
    Fut: Future<Output = R>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = f().await.ready() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn wait_for_returns_once_ready_with_the_value() {
        let polls = Cell::new(0);
        wait_for("the third poll", Duration::from_secs(10), || {
            polls.set(polls.get() + 1);
            polls.get() == 3
        });
        assert_eq!(polls.get(), 3);
        let v = wait_for("a value", Duration::from_secs(10), || {
            polls.set(polls.get() + 1);
            (polls.get() == 5).then_some("five")
        });
        assert_eq!(v, "five");
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn wait_for_fails_the_test_naming_what() {
        wait_for("the impossible", Duration::from_millis(50), || false);
    }

    #[test]
    fn wait_until_returns_once_ready_with_the_value() {
        let rt = crate::runtime();
        let polls = Cell::new(0);
        let v = rt.block_on(wait_until(
            "the third poll",
            Duration::from_secs(10),
            || async {
                polls.set(polls.get() + 1);
                (polls.get() == 3).then_some(polls.get())
            },
        ));
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "timed out after 50ms waiting for the impossible")]
    fn wait_until_fails_the_test_naming_what() {
        crate::runtime().block_on(wait_until(
            "the impossible",
            Duration::from_millis(50),
            || async { false },
        ));
    }
}
