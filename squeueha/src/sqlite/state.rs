//! The job state codes stored in `squeueha_jobs.state`.
//!
//! SQL names them with [`state!`], which expands to the code as a literal in the statement's text
//! (the planner picks the partial indexes `WHERE state = 0` / `WHERE state <> 0` only for literals);
//! Rust code uses the constants. A test checks that both agree with each other, with the indexes
//! and with the values stored.

use crate::job::JobState;

/// Visible, waiting for a consumer (the only rows of the claim index). `due_at`: when it became
/// ready.
pub(crate) const READY: i64 = 0;
/// Claimed; `due_at` is the lease expiry.
pub(crate) const IN_FLIGHT: i64 = 1;
/// Waiting for a delay or a retry backoff; `due_at` is when it becomes ready.
pub(crate) const DELAYED: i64 = 2;
/// Acked and retained; `due_at` is the finish time.
pub(crate) const DONE: i64 = 3;

/// A state code as a string literal, for `concat!` into SQL: `state!(ready)`, `state!(in_flight)`,
/// `state!(delayed)`, `state!(done)`.
macro_rules! state {
    (ready) => {
        "0"
    };
    (in_flight) => {
        "1"
    };
    (delayed) => {
        "2"
    };
    (done) => {
        "3"
    };
}
pub(crate) use state;

/// The SQL condition that selects rows with a timer (a lease or a delay), written so that the
/// timers' partial index is chosen (`state <> ready AND state IN (in flight, delayed)`); a string
/// literal, for `concat!`.
macro_rules! timer_states {
    () => {
        concat!(
            "state <> ",
            state!(ready),
            " AND state IN (",
            state!(in_flight),
            ", ",
            state!(delayed),
            ")"
        )
    };
}
pub(crate) use timer_states;

/// The public state of a stored code (an unknown code reads as done: never claimed again).
pub(crate) fn job_state(code: i64) -> JobState {
    match code {
        READY => JobState::Ready,
        IN_FLIGHT => JobState::InFlight,
        DELAYED => JobState::Delayed,
        _ => JobState::Done,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DELAYED, DONE, IN_FLIGHT, READY, job_state};
    use crate::job::JobState;
    use crate::{Config, NewJob, Queue};

    #[test]
    fn names_match_each_other_the_indexes_and_the_stored_values() {
        for (literal, code, public) in [
            (state!(ready), READY, JobState::Ready),
            (state!(in_flight), IN_FLIGHT, JobState::InFlight),
            (state!(delayed), DELAYED, JobState::Delayed),
            (state!(done), DONE, JobState::Done),
        ] {
            assert_eq!(literal, code.to_string());
            assert_eq!(job_state(code), public);
        }

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let cfg = Config {
            retain_done: Some(Duration::from_secs(3600)),
            ..Config::default()
        };
        let q = Queue::open_with(&path, cfg).unwrap();
        let done = q
            .enqueue("s", NewJob::new(vec![1]).priority(3))
            .unwrap()
            .id();
        let claimed = q.poll_batch("s", 1, Duration::from_secs(60)).unwrap();
        q.ack(claimed[0].lease).unwrap();
        let in_flight = q
            .enqueue("s", NewJob::new(vec![2]).priority(2))
            .unwrap()
            .id();
        q.poll_batch("s", 1, Duration::from_secs(60)).unwrap();
        let delayed = q
            .enqueue("s", NewJob::new(vec![3]).delay(Duration::from_secs(60)))
            .unwrap()
            .id();
        let ready = q.enqueue("s", NewJob::new(vec![4])).unwrap().id();

        let conn = rusqlite::Connection::open(&path).unwrap();
        let stored = |id: i64| -> i64 {
            conn.query_row("SELECT state FROM squeueha_jobs WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(stored(ready), READY);
        assert_eq!(stored(in_flight), IN_FLIGHT);
        assert_eq!(stored(delayed), DELAYED);
        assert_eq!(stored(done), DONE);

        let index = |name: &str| -> String {
            conn.query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(index("squeueha_jobs_ready").ends_with(concat!("WHERE state = ", state!(ready))));
        assert!(index("squeueha_jobs_timed").ends_with(concat!("WHERE state <> ", state!(ready))));
    }
}
