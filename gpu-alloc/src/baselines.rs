//! Baseline allocation policies the simulator compares the [`crate::allocator::Allocator`]
//! with: a static allocation, a greedy "switch to the longest queue", and
//! on-demand LRU loading as on-demand model servers do it.

use crate::allocator::{Action, Decision, GpuState, GpuView, Plan, Policy, Reason, TickInput};

fn keep(g: &GpuView, reason: Reason) -> Decision {
    Decision {
        gpu: g.index,
        action: Action::Keep,
        reason,
    }
}

fn switch(g: &GpuView, to: &str, reason: Reason) -> Decision {
    Decision {
        gpu: g.index,
        action: Action::Switch {
            from: g.mode.clone(),
            to: to.to_owned(),
            drain_first: matches!(g.state, GpuState::Busy { .. }),
        },
        reason,
    }
}

/// Never switches: each GPU keeps its initial mode.
#[derive(Debug, Clone, Default)]
pub struct StaticPolicy;

impl Policy for StaticPolicy {
    fn name(&self) -> &str {
        "static"
    }
    fn tick_interval_s(&self) -> f64 {
        5.0
    }
    fn decide(&mut self, input: &TickInput) -> Plan {
        Plan {
            now_s: input.now_s,
            decisions: input.gpus.iter().map(|g| keep(g, Reason::Static)).collect(),
        }
    }
}

/// Greedy: a GPU whose own queue is empty switches to the class with the longest queue, and
/// a longest queue with no GPU at all takes the GPU of the shortest queue. No swap-cost
/// accounting, no dwell time.
#[derive(Debug, Clone, Default)]
pub struct GreedyLongestQueue;

impl Policy for GreedyLongestQueue {
    fn name(&self) -> &str {
        "greedy-longest-queue"
    }
    fn tick_interval_s(&self) -> f64 {
        5.0
    }
    fn decide(&mut self, input: &TickInput) -> Plan {
        let pending = |c: Option<&str>| {
            c.and_then(|c| input.queues.get(c))
                .map_or(0, |q| q.pending_jobs)
        };
        let longest = input
            .queues
            .iter()
            .filter(|(_, q)| q.pending_jobs > 0)
            .max_by_key(|(_, q)| q.pending_jobs)
            .map(|(c, q)| (c.clone(), q.pending_jobs));
        let mut decisions: Vec<Decision> = input
            .gpus
            .iter()
            .map(|g| keep(g, Reason::NoBetterPlan))
            .collect();
        let Some((class, n)) = longest else {
            return Plan {
                now_s: input.now_s,
                decisions,
            };
        };
        let reason = Reason::LongestQueue {
            class: class.clone(),
            pending_jobs: n,
        };
        let mut served = input
            .gpus
            .iter()
            .any(|g| g.effective_mode() == Some(class.as_str()));
        for (k, g) in input.gpus.iter().enumerate() {
            if g.in_transition() || g.effective_mode() == Some(class.as_str()) {
                continue;
            }
            if pending(g.effective_mode()) == 0 {
                decisions[k] = switch(g, &class, reason.clone());
                served = true;
            }
        }
        if !served {
            let victim = input
                .gpus
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.in_transition())
                .min_by_key(|(_, g)| pending(g.effective_mode()));
            if let Some((k, g)) = victim {
                decisions[k] = switch(g, &class, reason);
            }
        }
        Plan {
            now_s: input.now_s,
            decisions,
        }
    }
}

/// On-demand LRU loading, as on-demand model servers (Ollama-style) do it: one copy of each
/// model; a request for a model that is not loaded loads it on the least recently used GPU
/// whose model has no queued or running request.
#[derive(Debug, Clone, Default)]
pub struct OnDemandLru;

impl Policy for OnDemandLru {
    fn name(&self) -> &str {
        "on-demand-lru"
    }
    fn tick_interval_s(&self) -> f64 {
        1.0
    }
    fn decide(&mut self, input: &TickInput) -> Plan {
        let pending = |c: Option<&str>| {
            c.and_then(|c| input.queues.get(c))
                .map_or(0, |q| q.pending_jobs)
        };
        let mut decisions: Vec<Decision> = input
            .gpus
            .iter()
            .map(|g| keep(g, Reason::NoBetterPlan))
            .collect();
        let mut taken = vec![false; input.gpus.len()];
        // Oldest request first.
        let mut wanting: Vec<(&String, f64)> = input
            .queues
            .iter()
            .filter(|(c, q)| {
                q.pending_jobs > 0
                    && !input
                        .gpus
                        .iter()
                        .any(|g| g.effective_mode() == Some(c.as_str()))
            })
            .map(|(c, q)| (c, q.oldest_wait_s))
            .collect();
        wanting.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (class, _) in wanting {
            let victim = input
                .gpus
                .iter()
                .enumerate()
                .filter(|(k, g)| {
                    !taken[*k]
                        && matches!(g.state, GpuState::Idle)
                        && pending(g.effective_mode()) == 0
                })
                .min_by(|a, b| a.1.last_used_s.total_cmp(&b.1.last_used_s));
            if let Some((k, g)) = victim {
                taken[k] = true;
                decisions[k] = switch(
                    g,
                    class,
                    Reason::OnDemandLoad {
                        class: class.clone(),
                    },
                );
            }
        }
        Plan {
            now_s: input.now_s,
            decisions,
        }
    }
}

/// Serves requests in arrival order, as a model swapper without grouping does: an idle GPU
/// whose class does not hold the oldest pending request switches to the class that does
/// (unless another GPU serves it). On mixed traffic it thrashes: A B A A C makes three swaps
/// where serving both A's first makes two.
#[derive(Debug, Clone, Default)]
pub struct ArrivalOrder;

impl Policy for ArrivalOrder {
    fn name(&self) -> &str {
        "arrival-order"
    }
    fn tick_interval_s(&self) -> f64 {
        1.0
    }
    fn decide(&mut self, input: &TickInput) -> Plan {
        let mut decisions: Vec<Decision> = input
            .gpus
            .iter()
            .map(|g| keep(g, Reason::NoBetterPlan))
            .collect();
        let oldest = input
            .queues
            .iter()
            .filter(|(_, q)| q.pending_jobs > 0)
            .max_by(|a, b| a.1.oldest_wait_s.total_cmp(&b.1.oldest_wait_s));
        if let Some((class, _)) = oldest
            && !input
                .gpus
                .iter()
                .any(|g| g.effective_mode() == Some(class.as_str()))
            && let Some((k, g)) = input
                .gpus
                .iter()
                .enumerate()
                .filter(|(_, g)| matches!(g.state, GpuState::Idle))
                .min_by(|a, b| a.1.last_used_s.total_cmp(&b.1.last_used_s))
        {
            decisions[k] = switch(
                g,
                class,
                Reason::OnDemandLoad {
                    class: class.clone(),
                },
            );
        }
        Plan {
            now_s: input.now_s,
            decisions,
        }
    }
}
