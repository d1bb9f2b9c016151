//! The deep health check: whether each part of a running system that should move does. A
//! process can answer `/health` while its scheduler is deadlocked or its database refuses every
//! write; each [`HealthCheck`] looks at one part, and [`check_parts`] asks them all at once, each
//! within a time limit (a check that does not answer is itself the sign of a wedged part).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;

/// Why a part is not healthy, in words an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unhealthy(pub String);

/// One part of a running system that should move (the scheduler, the feeder, the model pool,
/// the database, a worker pool).
#[async_trait]
pub trait HealthCheck: Send + Sync {
    /// The part's name, as `/health/ready` reports it (`scheduler`, `feeder`, `database`, ...).
    fn part(&self) -> String;

    /// `Ok` while the part moves or has nothing to do; why not otherwise. Must not block a
    /// thread: [`check_parts`] bounds its time, and a check that waits on a lock held for ever
    /// is reported as not answering.
    async fn check(&self) -> Result<(), Unhealthy>;
}

/// One part's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartReport {
    /// The part ([`HealthCheck::part`]).
    pub part: String,
    /// Whether it is healthy.
    pub ok: bool,
    /// Why not, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long its check took, ms.
    pub ms: u64,
}

/// One part's check under way: why it is unhealthy (if it is), how long it took, ms.
type Ask = tokio::task::JoinHandle<(Option<String>, u64)>;

/// Asks every part at once (each on a task of its own), each within `each`; the answers in the
/// parts' order.
pub async fn check_parts(parts: &[Arc<dyn HealthCheck>], each: Duration) -> Vec<PartReport> {
    let asks: Vec<(String, Ask)> = parts
        .iter()
        .map(|part| {
            let p = Arc::clone(part);
            let ask = tokio::spawn(async move {
                let t = Instant::now();
                let reason = match tokio::time::timeout(each, p.check()).await {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.0),
                    Err(_) => Some(format!(
                        "its check did not answer within {} ms (wedged?)",
                        each.as_millis()
                    )),
                };
                (reason, t.elapsed().as_millis() as u64)
            });
            (part.part(), ask)
        })
        .collect();
    let mut out = Vec::with_capacity(asks.len());
    for (part, ask) in asks {
        let (reason, ms) = match ask.await {
            Ok(v) => v,
            Err(e) => (Some(format!("its check failed: {e}")), 0),
        };
        out.push(PartReport {
            part,
            ok: reason.is_none(),
            reason,
            ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Fixed(&'static str, Result<(), Unhealthy>, Duration);

    #[async_trait]
    impl HealthCheck for Fixed {
        fn part(&self) -> String {
            self.0.to_owned()
        }
        async fn check(&self) -> Result<(), Unhealthy> {
            tokio::time::sleep(self.2).await;
            self.1.clone()
        }
    }

    #[tokio::test]
    async fn each_part_answers_in_order_and_a_hung_check_is_reported_as_such() {
        let parts: Vec<Arc<dyn HealthCheck>> = vec![
            Arc::new(Fixed("database", Ok(()), Duration::ZERO)),
            Arc::new(Fixed(
                "feeder",
                Err(Unhealthy("stuck".into())),
                Duration::ZERO,
            )),
            Arc::new(Fixed("scheduler", Ok(()), Duration::from_secs(3600))),
        ];
        let t = Instant::now();
        let r = check_parts(&parts, Duration::from_millis(200)).await;
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the hung check held the answer"
        );
        assert_eq!(
            r.iter()
                .map(|p| (p.part.as_str(), p.ok))
                .collect::<Vec<_>>(),
            [("database", true), ("feeder", false), ("scheduler", false)]
        );
        assert_eq!(r[1].reason.as_deref(), Some("stuck"));
        assert!(
            r[2].reason
                .as_deref()
                .unwrap()
                .contains("did not answer within 200 ms")
        );
    }
}
