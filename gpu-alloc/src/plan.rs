//! Whether a configuration's VRAM plan fits its GPUs, checked before anything starts: each
//! holder's memory ([`VramDemand`]: a lane's server, a pinned pooled model) against the GPUs'
//! sizes (simulated, or read by NVML). The rules, in the order they apply:
//!
//! 1. a holder placed on GPUs that do not exist never starts;
//! 2. holders placed together on a GPU ([`Fit::On`], their memory split evenly over their
//!    GPUs) must fit it side by side, since they run at once;
//! 3. a holder that runs on one GPU at a time ([`Fit::Each`]: a lane under the allocator, one
//!    server per GPU it is switched to) must fit each of those GPUs alone;
//! 4. the pinned pooled models ([`Fit::Pool`]) are loaded at start and never leave: together
//!    they must fit the pool's memory (the GPUs', each capped at its budget).

use horos_server_control::settings::Problem;

/// Where a holder's memory goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// On these GPUs at once, split evenly (a lane's `gpus`).
    On(Vec<u32>),
    /// On one of these GPUs at a time (a lane the allocator switches).
    Each(Vec<u32>),
    /// In the pool's memory, for good (a pinned model).
    Pool,
}

/// A holder of GPU memory that a configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VramDemand {
    /// The key that sets it (`lane[0].vram_mb`), named by a problem.
    pub key: String,
    /// MB.
    pub mb: u64,
    /// Where it goes.
    pub fit: Fit,
}

/// The problems of `demands` on GPUs of `sizes` MB (index = GPU), the pool's memory capped at
/// `pool_cap_mb` per GPU (`[coordinator.pool] memory_mb`; without GPUs, that budget over
/// `pool_gpus`).
pub fn plan_problems(
    sizes: &[u64],
    pool_cap_mb: Option<u64>,
    pool_gpus: u32,
    demands: &[VramDemand],
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut together = vec![0u64; sizes.len()];
    let mut placed_by: Vec<Vec<&str>> = vec![Vec::new(); sizes.len()];
    for d in demands {
        let gpus = match &d.fit {
            Fit::On(g) | Fit::Each(g) => g,
            Fit::Pool => continue,
        };
        if let Some(g) = gpus.iter().find(|g| **g as usize >= sizes.len()) {
            problems.push(Problem::new(
                &d.key,
                format!(
                    "GPU {g} does not exist: this machine has {} GPU(s)",
                    sizes.len()
                ),
                "name GPUs from 0 to the last one (or add the GPU to [gpus] simulated_mb)",
            ));
            continue;
        }
        match &d.fit {
            Fit::On(g) if !g.is_empty() => {
                let share = d.mb.div_ceil(g.len() as u64);
                for gpu in g {
                    together[*gpu as usize] = together[*gpu as usize].saturating_add(share);
                    placed_by[*gpu as usize].push(&d.key);
                }
            }
            Fit::Each(g) => {
                if let Some(gpu) = g.iter().find(|gpu| d.mb > sizes[**gpu as usize]) {
                    problems.push(Problem::new(
                        &d.key,
                        format!(
                            "{} MB does not fit GPU {gpu} ({} MB), one of those it is switched to",
                            d.mb, sizes[*gpu as usize]
                        ),
                        "use a smaller model or quantisation, or serve it from [coordinator.pool] \
                         where it may be split over GPUs",
                    ));
                }
            }
            _ => {}
        }
    }
    for (gpu, (mb, size)) in together.iter().zip(sizes).enumerate() {
        if mb > size {
            problems.push(Problem::new(
                placed_by[gpu].last().copied().unwrap_or("gpus"),
                format!(
                    "GPU {gpu} holds {size} MB but {} need {mb} MB together",
                    placed_by[gpu].join(", ")
                ),
                "lower vram_mb, move a server to another GPU, or use a smaller model",
            ));
        }
    }
    let pool_mb: u64 = if sizes.is_empty() {
        pool_cap_mb
            .unwrap_or(0)
            .saturating_mul(u64::from(pool_gpus))
    } else {
        sizes
            .iter()
            .map(|s| pool_cap_mb.map_or(*s, |c| c.min(*s)))
            .sum()
    };
    let pinned: Vec<&VramDemand> = demands.iter().filter(|d| d.fit == Fit::Pool).collect();
    let pinned_mb: u64 = pinned.iter().map(|d| d.mb).sum();
    // Without GPUs nor a budget, the pool's memory is unknown here.
    let known = !sizes.is_empty() || pool_cap_mb.is_some();
    if known
        && pinned_mb > pool_mb
        && let Some(last) = pinned.last()
    {
        problems.push(Problem::new(
            &last.key,
            format!("the pinned models need {pinned_mb} MB together; the pool has {pool_mb} MB"),
            "unpin a model (pin = false), raise [coordinator.pool] memory_mb, or add GPUs",
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn d(key: &str, mb: u64, fit: Fit) -> VramDemand {
        VramDemand {
            key: key.into(),
            mb,
            fit,
        }
    }

    #[test]
    fn a_plan_that_fits_has_no_problem() {
        let demands = [
            d("lane[0].vram_mb", 20000, Fit::On(vec![0])),
            d("lane[1].vram_mb", 30000, Fit::On(vec![0, 1])),
            d("lane[2].vram_mb", 24000, Fit::Each(vec![2, 3])),
            d("coordinator.pool.model[0].vram_mb", 8000, Fit::Pool),
        ];
        assert!(plan_problems(&[40000, 24000, 24000, 24000], None, 1, &demands).is_empty());
    }

    #[test]
    fn each_rule_names_the_key_that_breaks_it() {
        let keys = |sizes: &[u64], cap, demands: &[VramDemand]| -> Vec<String> {
            plan_problems(sizes, cap, 1, demands)
                .into_iter()
                .map(|p| p.key)
                .collect()
        };
        assert_eq!(
            keys(&[24000], None, &[d("lane[0].gpus", 1, Fit::On(vec![1]))]),
            ["lane[0].gpus"]
        );
        assert_eq!(
            keys(
                &[24000],
                None,
                &[
                    d("lane[0].vram_mb", 20000, Fit::On(vec![0])),
                    d("lane[1].vram_mb", 8000, Fit::On(vec![0]))
                ]
            ),
            ["lane[1].vram_mb"]
        );
        assert_eq!(
            keys(
                &[24000, 16000],
                None,
                &[d("lane[0].vram_mb", 20000, Fit::Each(vec![0, 1]))]
            ),
            ["lane[0].vram_mb"]
        );
        assert_eq!(
            keys(
                &[24000],
                Some(4000),
                &[
                    d("coordinator.pool.model[0].vram_mb", 3000, Fit::Pool),
                    d("coordinator.pool.model[1].vram_mb", 3000, Fit::Pool)
                ]
            ),
            ["coordinator.pool.model[1].vram_mb"]
        );
        // Without GPUs the budget counts, over the pool's GPUs.
        assert!(plan_problems(&[], Some(2048), 2, &[d("m", 4000, Fit::Pool)]).is_empty());
    }
}
