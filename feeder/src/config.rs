//! The feeder's settings.

use std::time::Duration;

use horos_gpu_alloc::thermal::ThermalPolicy;

/// Feeder settings.
#[derive(Debug, Clone)]
pub struct FeederConfig {
    /// Pause after each batch (gpu-alloc's thermal pacing; the seed's fixed 10 s by default).
    pub thermal: ThermalPolicy,
    /// Sleep when no lane has work.
    pub idle_poll: Duration,
    /// When released jobs (server down or busy) become visible again.
    pub release_delay: Duration,
    /// Retry delay of a job the server refused as a bad request (`None`: the queue's backoff). It is
    /// dead-lettered once its attempts are used up.
    pub bad_request_delay: Option<Duration>,
    /// Retry delay of a job that failed otherwise (a cut connection on a healthy server, a
    /// timeout, a 500, an answer that does not parse) (`None`: the queue's backoff).
    pub retry_delay: Option<Duration>,
    /// Pause before trying again after a failed restart or a queue error.
    pub error_pause: Duration,
    /// Health checks of every lane's server in [`Feeder::run`](crate::Feeder::run), also while idle (R3): a server
    /// found unhealthy is recovered in the background like one found down by a batch. `None`:
    /// only batches detect a dead server.
    pub health_interval: Option<Duration>,
}

impl Default for FeederConfig {
    fn default() -> Self {
        FeederConfig {
            thermal: ThermalPolicy::default(),
            idle_poll: Duration::from_millis(200),
            release_delay: Duration::from_secs(1),
            bad_request_delay: None,
            retry_delay: None,
            error_pause: Duration::from_secs(1),
            health_interval: Some(Duration::from_secs(5)),
        }
    }
}
