//! A server's GPU memory booked in the [`VramLedger`] for as long as it runs ([`Booking`]): what
//! a supervised server takes before its start and gives back after its stop, making room by
//! unloading the model pool's idle models where memory is short.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use horos_server_control::{ControlError, Reservation};

use crate::ledger::{LeaseRequest, LedgerError, VramLedger};
use crate::monitor::GpuMonitor;
use crate::pool::ModelPool;

/// The model pool, set once it is built (servers booked before it exists get it later).
pub type LatePool = Arc<OnceLock<ModelPool>>;

/// How long a server's lease lives without renewal (renewed every third of it).
const LEASE_TTL: Duration = Duration::from_secs(60);
/// How long a GPU's actual free memory may lag behind an unload before another model is
/// unloaded (or the start fails).
const RECLAIM_WAIT: Duration = Duration::from_secs(15);

/// A server's GPU memory in the VRAM ledger, as the seam's [`Reservation`]: booked before the server starts (checked
/// against the GPUs' actual free memory where they are read, so memory a foreign process
/// holds counts), renewed while it runs, released once it stopped.
pub struct Booking {
    ledger: Arc<VramLedger>,
    monitor: Option<Arc<dyn GpuMonitor>>,
    request: LeaseRequest,
    held: Mutex<Option<(String, tokio::task::JoinHandle<()>)>>,
    /// Idle pooled models that give way when the memory is short.
    room: Option<LatePool>,
}

impl Booking {
    /// `mb` on each of `gpus` for `owner`, in `ledger`; short of memory, idle models of `room`
    /// on those GPUs are unloaded first.
    pub fn new(
        ledger: Arc<VramLedger>,
        monitor: Option<Arc<dyn GpuMonitor>>,
        owner: String,
        gpus: &[u32],
        mb: u64,
        room: Option<LatePool>,
    ) -> Booking {
        Booking {
            ledger,
            monitor,
            request: LeaseRequest {
                owner,
                pid: Some(std::process::id()),
                parts: gpus.iter().map(|&g| (g, mb)).collect(),
                ttl: LEASE_TTL,
            },
            held: Mutex::new(None),
            room,
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<(String, tokio::task::JoinHandle<()>)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Books the memory (a no-op while it is held).
    async fn book(&self) -> Result<(), ControlError> {
        if self.held().is_some() {
            return Ok(());
        }
        let gpus: Vec<u32> = self.request.parts.iter().map(|&(g, _)| g).collect();
        // After an unload, until when the GPU's actual free memory may still lag (a process's
        // memory is released some time after it exits).
        let mut reclaiming: Option<std::time::Instant> = None;
        let lease = loop {
            let (ledger, monitor, request) = (
                Arc::clone(&self.ledger),
                self.monitor.clone(),
                self.request.clone(),
            );
            let booked = tokio::task::spawn_blocking(move || match &monitor {
                Some(m) => ledger.acquire_checked(&request, m.as_ref()),
                None => ledger.acquire(&request),
            })
            .await
            .map_err(ControlError::other)?;
            let why = match booked {
                Ok(lease) => break lease,
                Err(e) => e,
            };
            // Only memory short on one of its GPUs is worth an unload, there.
            let (short_on, by_actual) = match &why {
                LedgerError::Insufficient { gpu, by, .. } if gpus.contains(gpu) => {
                    (Some(*gpu), *by == "actual")
                }
                _ => (None, false),
            };
            if by_actual && reclaiming.is_some_and(|t| std::time::Instant::now() < t) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let freed = match (&self.room, short_on) {
                (Some(room), Some(gpu)) => match room.get() {
                    Some(pool) => pool.unload_one_idle(&[gpu]).await,
                    None => None,
                },
                _ => None,
            };
            match freed {
                Some(model) => {
                    tracing::info!(
                        model, server = %self.request.owner, gpu = ?short_on,
                        "unloaded an idle pooled model to make room for a lane's server"
                    );
                    reclaiming = Some(std::time::Instant::now() + RECLAIM_WAIT);
                }
                None => {
                    return Err(ControlError::StartFailed(format!(
                        "no GPU memory for {}: {why}",
                        self.request.owner
                    )));
                }
            }
        };
        let (ledger, id) = (Arc::clone(&self.ledger), lease.id.clone());
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE_TTL / 3).await;
                let (l, lease) = (Arc::clone(&ledger), id.clone());
                match tokio::task::spawn_blocking(move || l.renew(&lease, LEASE_TTL)).await {
                    Ok(Ok(true)) => {}
                    Ok(Ok(false)) => {
                        tracing::warn!(lease = %id, "a lane server's VRAM lease expired before its renewal");
                    }
                    // A busy or briefly unreadable ledger: the next renewal tries again.
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %id, error = %e, "VRAM lease renewal failed")
                    }
                    Err(e) => tracing::warn!(lease = %id, error = %e, "VRAM lease renewal failed"),
                }
            }
        });
        *self.held() = Some((lease.id, renew));
        if let Some(m) = &self.monitor {
            m.occupy(&self.request.owner, &self.request.parts);
        }
        Ok(())
    }

    /// Releases the memory (a no-op when none is held).
    async fn release(&self) {
        let Some((id, renew)) = self.held().take() else {
            return;
        };
        renew.abort();
        if let Some(m) = &self.monitor {
            m.vacate(&self.request.owner);
        }
        let ledger = Arc::clone(&self.ledger);
        let released = tokio::task::spawn_blocking(move || ledger.release(&id)).await;
        if let Ok(Err(e)) = released {
            // It expires within LEASE_TTL anyway.
            tracing::warn!(owner = %self.request.owner, error = %e, "VRAM lease release failed");
        }
    }
}

#[async_trait]
impl Reservation for Booking {
    async fn take(&self) -> Result<(), ControlError> {
        self.book().await
    }

    async fn give_back(&self) {
        self.release().await;
    }
}
