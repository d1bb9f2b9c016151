//! Multi-GPU placement: a model that fits no single GPU is split across GPUs
//! in proportion to each GPU's effective free memory (free minus a 512 MB safety margin for
//! CUDA context and driver overhead).

use serde::{Deserialize, Serialize};

/// Default safety margin per GPU, MB.
pub const DEFAULT_MARGIN_MB: u64 = 512;

/// Free memory of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFree {
    /// GPU index.
    pub gpu: u32,
    /// Free memory, MB.
    pub free_mb: u64,
}

pub use horos_server_control::Share;

/// Not enough memory.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{need_mb} MB needed, {available_mb} MB effectively free (after margins)")]
pub struct SplitError {
    /// MB needed.
    pub need_mb: u64,
    /// MB effectively free over all GPUs.
    pub available_mb: u64,
}

fn effective(g: &GpuFree, margin_mb: u64) -> u64 {
    g.free_mb.saturating_sub(margin_mb)
}

/// Splits `need_mb` over `gpus` in proportion to their effective free memory. Shares are
/// whole MB, sum exactly to `need_mb`, never exceed a GPU's effective free memory, and come
/// sorted by GPU index (GPUs with a zero share are left out).
pub fn split_proportional(
    need_mb: u64,
    gpus: &[GpuFree],
    margin_mb: u64,
) -> Result<Vec<Share>, SplitError> {
    let mut eff: Vec<(u32, u64)> = gpus
        .iter()
        .map(|g| (g.gpu, effective(g, margin_mb)))
        .filter(|e| e.1 > 0)
        .collect();
    eff.sort_by_key(|e| e.0);
    let total: u64 = eff.iter().map(|e| e.1).sum();
    if total < need_mb || (need_mb > 0 && eff.is_empty()) {
        return Err(SplitError {
            need_mb,
            available_mb: total,
        });
    }
    if need_mb == 0 {
        return Ok(Vec::new());
    }
    let mut shares: Vec<(u32, u64, u64)> = eff
        .iter()
        .map(|&(gpu, e)| {
            let s = (u128::from(need_mb) * u128::from(e) / u128::from(total)) as u64;
            (gpu, s.min(e), e)
        })
        .collect();
    let mut left = need_mb - shares.iter().map(|s| s.1).sum::<u64>();
    // Hand out the rounding remainder to GPUs with room, most room first.
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(shares[i].2 - shares[i].1));
    for i in order {
        if left == 0 {
            break;
        }
        let room = shares[i].2 - shares[i].1;
        let add = room.min(left);
        shares[i].1 += add;
        left -= add;
    }
    Ok(shares
        .into_iter()
        .filter(|s| s.1 > 0)
        .map(|(gpu, mb, _)| Share { gpu, mb })
        .collect())
}

/// Places a model: on one GPU when one can hold it (the tightest fit, to keep large holes
/// free), otherwise split over the fewest GPUs with the most free memory, proportionally.
pub fn place(need_mb: u64, gpus: &[GpuFree], margin_mb: u64) -> Result<Vec<Share>, SplitError> {
    let single = gpus
        .iter()
        .filter(|g| effective(g, margin_mb) >= need_mb)
        .min_by_key(|g| (effective(g, margin_mb), g.gpu));
    if let Some(g) = single {
        return Ok(vec![Share {
            gpu: g.gpu,
            mb: need_mb,
        }]);
    }
    let mut by_room: Vec<GpuFree> = gpus.to_vec();
    by_room.sort_by_key(|g| (std::cmp::Reverse(effective(g, margin_mb)), g.gpu));
    let mut chosen = Vec::new();
    let mut sum = 0;
    for g in by_room {
        if sum >= need_mb {
            break;
        }
        sum += effective(&g, margin_mb);
        chosen.push(g);
    }
    split_proportional(need_mb, &chosen, margin_mb)
}
