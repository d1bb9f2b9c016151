//! Room on a GPU for a lane's server: a model the pool loaded on demand and nobody is using
//! gives way to the lane the allocator switched the GPU to (the lanes' plan outranks idle
//! pooled models; a pinned model or one serving a request stays). The pool loads it again on
//! its next request, on whatever GPU then has room.

use std::sync::{Arc, OnceLock};

use horos_gpu_alloc::pool::{ModelPool, SlotState};

/// The model pool, set once it is built (the lanes' servers are built before it).
pub type LatePool = Arc<OnceLock<ModelPool>>;

/// Unloads the idle, unpinned pooled model on any of `gpus` that has been idle longest; its
/// name, or `None` when there is none (or no pool).
pub async fn unload_one_idle(pool: &LatePool, gpus: &[u32]) -> Option<String> {
    unload_one_idle_in(pool.get()?, gpus).await
}

/// Unloads `pool`'s idle, unpinned model on any of `gpus` that has been idle longest; its
/// name, or `None` when there is none.
pub async fn unload_one_idle_in(pool: &ModelPool, gpus: &[u32]) -> Option<String> {
    let mut idle: Vec<_> = pool
        .slots()
        .into_iter()
        .filter(|s| {
            s.state == SlotState::Ready
                && s.active == 0
                && !s.pinned
                && s.shares.iter().any(|sh| gpus.contains(&sh.gpu))
        })
        .collect();
    idle.sort_by(|a, b| b.idle_s.total_cmp(&a.idle_s));
    for slot in idle {
        // It may have been taken by a request since the look: then try the next.
        match pool.unload(&slot.model).await {
            Ok(true) => return Some(slot.model),
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(model = %slot.model, error = %e, "could not unload an idle pooled model")
            }
        }
    }
    None
}
