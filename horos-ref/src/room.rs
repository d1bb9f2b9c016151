//! Room on a GPU for a lane's server: the pool's idle models give way
//! ([`ModelPool::unload_one_idle`]). The lanes' servers are built before the pool, so they get
//! the pool once it exists.

use std::sync::{Arc, OnceLock};

use horos_gpu_alloc::pool::ModelPool;

/// The model pool, set once it is built (the lanes' servers are built before it).
pub type LatePool = Arc<OnceLock<ModelPool>>;

/// [`ModelPool::unload_one_idle`] on the pool, once there is one.
pub async fn unload_one_idle(pool: &LatePool, gpus: &[u32]) -> Option<String> {
    pool.get()?.unload_one_idle(gpus).await
}
