//! The feeder's and the mode executor's view of a server, and the executor's view of a lane.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::ControlError;

/// Sleep depth: what a sleeping server keeps (vLLM's sleep levels). Either frees the GPU's
/// memory for another server; the process stays, so waking costs far less than a cold start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SleepLevel {
    /// Weights kept in host RAM, KV cache dropped.
    One,
    /// Weights and KV cache dropped; only the process (and its compiled graphs) stays.
    Two,
}

impl SleepLevel {
    /// The level's number as servers speak it (vLLM's `POST /sleep?level=N`): 1 or 2.
    pub fn number(self) -> u8 {
        match self {
            SleepLevel::One => 1,
            SleepLevel::Two => 2,
        }
    }
}

/// What a batch feeder needs from its lane's server: is it healthy, and, when a batch found it
/// down or took it down, "bring it back and tell me when it answers". Whoever owns the server
/// (a supervisor, or someone else entirely) decides how: the feeder never starts a server itself.
#[async_trait]
pub trait ServerControl: Send + Sync {
    /// Whether the server is up and answering.
    async fn healthy(&self) -> bool;

    /// Reports that the server was found down (or that a request took it down) and waits until
    /// it answers again. `Ok` once it is healthy (perhaps without a restart, when it already is);
    /// an error when the attempt to bring it back failed (the owner may go on trying by itself).
    async fn recover(&self) -> Result<(), ControlError>;
}

/// A lane's server as a mode executor sees it: started when a GPU comes to the lane, stopped
/// when it leaves, or, for a server that can sleep ([`ModeServer::can_sleep`]), put to sleep
/// when it leaves and woken when the GPU comes back: its process stays, the GPU's memory is
/// freed, and waking costs seconds where a start costs minutes.
///
/// A server that cannot sleep keeps the defaults: [`ModeServer::can_sleep`] is `false` and
/// [`ModeServer::sleep`] and [`ModeServer::wake`] answer [`ControlError::Unsupported`].
#[async_trait]
pub trait ModeServer: Send + Sync {
    /// Starts it and waits until it is healthy.
    async fn start(&self) -> Result<(), ControlError>;
    /// Stops it on purpose: nothing restarts it until the next [`ModeServer::start`].
    async fn stop(&self) -> Result<(), ControlError>;

    /// Whether [`ModeServer::sleep`] and [`ModeServer::wake`] can work for this server (its
    /// kind and the way it was started support sleeping). `false` by default.
    fn can_sleep(&self) -> bool {
        false
    }

    /// Puts it to sleep on purpose at `level` and returns once it sleeps (its GPU memory
    /// freed): nothing restarts it or wakes it until [`ModeServer::wake`] (or a
    /// [`ModeServer::stop`] and [`ModeServer::start`]). [`ControlError::Unsupported`] by
    /// default; on any error the server may still be awake: stop it.
    async fn sleep(&self, level: SleepLevel) -> Result<(), ControlError> {
        let _ = level;
        Err(ControlError::Unsupported("this server cannot sleep".into()))
    }

    /// Wakes it from a [`ModeServer::sleep`] and returns once it serves again.
    /// [`ControlError::Unsupported`] by default; on any error its state is unknown: stop it and
    /// start it again.
    async fn wake(&self) -> Result<(), ControlError> {
        Err(ControlError::Unsupported("this server cannot sleep".into()))
    }
}

/// A feeder lane's gate as a mode executor sees it: while it is closed no batch of the lane
/// starts, so the lane's server can be stopped without cutting a batch.
#[async_trait]
pub trait Gate: Send + Sync {
    /// Lets batches start again.
    fn open(&self);
    /// Stops new batches; a batch in progress finishes (see [`Gate::wait_idle`]).
    fn close(&self);
    /// Whether batches may start.
    fn is_open(&self) -> bool;
    /// Whether a batch (or a recovery of the lane's server) is running.
    fn is_busy(&self) -> bool;
    /// Waits until nothing runs on the lane (call after [`Gate::close`]).
    async fn wait_idle(&self);
    /// Seconds until the running batch ends, where the gate knows it (`None`: unknown, or
    /// nothing runs). An executor otherwise assumes a whole batch.
    fn batch_remaining_s(&self) -> Option<f64> {
        None
    }
}

macro_rules! forward {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<T: ServerControl + ?Sized> ServerControl for $ptr<T> {
            async fn healthy(&self) -> bool {
                (**self).healthy().await
            }
            async fn recover(&self) -> Result<(), ControlError> {
                (**self).recover().await
            }
        }

        #[async_trait]
        impl<T: ModeServer + ?Sized> ModeServer for $ptr<T> {
            async fn start(&self) -> Result<(), ControlError> {
                (**self).start().await
            }
            async fn stop(&self) -> Result<(), ControlError> {
                (**self).stop().await
            }
            fn can_sleep(&self) -> bool {
                (**self).can_sleep()
            }
            async fn sleep(&self, level: SleepLevel) -> Result<(), ControlError> {
                (**self).sleep(level).await
            }
            async fn wake(&self) -> Result<(), ControlError> {
                (**self).wake().await
            }
        }

        #[async_trait]
        impl<T: Gate + ?Sized> Gate for $ptr<T> {
            fn open(&self) {
                (**self).open()
            }
            fn close(&self) {
                (**self).close()
            }
            fn is_open(&self) -> bool {
                (**self).is_open()
            }
            fn is_busy(&self) -> bool {
                (**self).is_busy()
            }
            async fn wait_idle(&self) {
                (**self).wait_idle().await
            }
            fn batch_remaining_s(&self) -> Option<f64> {
                (**self).batch_remaining_s()
            }
        }
    )*};
}

forward!(Arc, Box);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

    #[derive(Default)]
    struct Flaky {
        up: AtomicBool,
        recoveries: AtomicUsize,
    }

    #[async_trait]
    impl ServerControl for Flaky {
        async fn healthy(&self) -> bool {
            self.up.load(SeqCst)
        }
        async fn recover(&self) -> Result<(), ControlError> {
            if self.recoveries.fetch_add(1, SeqCst) == 0 {
                return Err(ControlError::StartFailed("first try".into()));
            }
            self.up.store(true, SeqCst);
            Ok(())
        }
    }

    async fn bring_back(control: impl ServerControl) -> Result<(), ControlError> {
        if control.healthy().await {
            return Ok(());
        }
        match control.recover().await {
            Err(e) if e.is_retryable() => control.recover().await,
            other => other,
        }
    }

    /// A server that knows nothing of sleep.
    struct Plain;

    #[async_trait]
    impl ModeServer for Plain {
        async fn start(&self) -> Result<(), ControlError> {
            Ok(())
        }
        async fn stop(&self) -> Result<(), ControlError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_server_that_says_nothing_of_sleep_cannot_sleep() {
        let shared: Arc<dyn ModeServer> = Arc::new(Plain);
        assert!(!shared.can_sleep());
        let err = shared.sleep(SleepLevel::One).await.unwrap_err();
        assert!(matches!(err, ControlError::Unsupported(_)), "{err}");
        assert!(!err.is_retryable());
        assert!(matches!(
            Box::new(shared).wake().await,
            Err(ControlError::Unsupported(_))
        ));
        assert_eq!(SleepLevel::Two.number(), 2);
        assert_eq!(serde_json::to_string(&SleepLevel::One).unwrap(), "\"one\"");
    }

    #[tokio::test]
    async fn a_shared_control_is_a_control() {
        let flaky = Arc::new(Flaky::default());
        let shared: Arc<dyn ServerControl> = flaky.clone();
        bring_back(Arc::clone(&shared)).await.unwrap();
        assert!(shared.healthy().await);
        assert_eq!(flaky.recoveries.load(SeqCst), 2);
        bring_back(Box::new(shared)).await.unwrap();
        assert_eq!(flaky.recoveries.load(SeqCst), 2, "healthy: no recovery");
    }
}
