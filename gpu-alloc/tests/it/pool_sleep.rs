//! The model pool's sleeping models: put to sleep instead of stopped when evicted or idle,
//! woken where they sleep, level 1 within the host RAM (the pool's own sleepers stopped to make
//! room), a failed wake falling back to a load, the measured costs kept across a restart.

use std::sync::Arc;

use horos_gpu_alloc::allocator::SwapKind;
use horos_gpu_alloc::catalogue::SleepLevel;
use horos_gpu_alloc::cost_store::CostStore;
use horos_gpu_alloc::host_ram::HostRam;
use horos_gpu_alloc::monitor::GpuMonitor;
use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::pool::{
    ModelPool, ModelSpec, PoolConfig, PoolUpstream, SimBackendFactory, SlotState, cost_key,
};
use horos_server_control::{Readiness, UpstreamPool};
use serde_json::json;

// Priorities: an idle model is evicted only for a more important request (a smaller rank), so
// each test's requests come with ever smaller ranks.

/// A model of `mb` whose server can sleep (`extra` added to its settings): a load takes
/// 1 s, a wake 10 ms.
fn sleeper(id: &str, mb: u64, extra: serde_json::Value) -> ModelSpec {
    let mut spec = super::pool::model(id, mb);
    let scripted = json!({ "can_sleep": true, "load_ms": 1000, "wake_ms": 10 });
    for more in [scripted, extra] {
        if let (Some(s), Some(e)) = (spec.settings.as_object_mut(), more.as_object()) {
            s.extend(e.clone());
        }
    }
    spec.swap_in_s = Some(120.0);
    spec
}

/// A pool on one 24 GB simulated GPU, `host_mb` of host RAM for level-1 sleepers.
fn pool(fleet: &Arc<SimFleet>, host_mb: u64, cfg: PoolConfig) -> (ModelPool, Arc<HostRam>) {
    let host = Arc::new(HostRam::new(host_mb));
    let p = ModelPool::new(
        PoolConfig {
            reclaim_delay_ms: 20,
            port_min: 9300,
            port_max: 9399,
            ..cfg
        },
        Arc::new(SimBackendFactory::new(Arc::clone(fleet), 1000, 0)),
        Arc::clone(fleet) as Arc<dyn GpuMonitor>,
        None,
    )
    .with_host_ram(Arc::clone(&host));
    (p, host)
}

fn count(p: &ModelPool, model: &str, kind: SwapKind) -> u64 {
    p.swap_costs()
        .measured(&cost_key(model), 0, kind)
        .map_or(0, |m| m.count)
}

fn level(p: &ModelPool, model: &str) -> Option<SleepLevel> {
    p.slots()
        .into_iter()
        .find(|s| s.model == model)
        .and_then(|s| s.sleep_level)
}

#[tokio::test]
async fn an_evicted_model_sleeps_and_a_request_wakes_it_where_it_slept_without_a_load() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, host) = pool(&fleet, 100_000, PoolConfig::default());
    p.register(sleeper("a", 14_000, json!({})));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 50).await.unwrap());
    // b needs a's room: a is put to sleep at level 1 (host RAM allows), its VRAM freed.
    drop(p.get_or_load("b", 45).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Sleeping);
    assert_eq!(level(&p, "a"), Some(SleepLevel::One));
    assert_eq!(
        host.held_by("pool"),
        14_000,
        "level 1 holds its weights in host RAM"
    );
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 14_000);
    let up = PoolUpstream::new(p.clone(), []);
    up.register(sleeper("a", 14_000, json!({})));
    assert_eq!(up.readiness("a"), Readiness::Asleep);
    // Expected ready by its wake, not its load.
    let wake_s = p.expected_ready_s("a").unwrap();
    assert!(wake_s < 120.0 * 0.1, "{wake_s}");
    assert_eq!(p.expected_ready_s("b"), Some(0.0));

    // a again: b goes to sleep in turn, a wakes on its GPU: one load of a in all.
    drop(p.get_or_load("a", 40).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Ready);
    assert_eq!(p.state("b"), SlotState::Sleeping);
    assert_eq!(count(&p, "a", SwapKind::Load), 1);
    assert_eq!(count(&p, "a", SwapKind::Wake(SleepLevel::One)), 1);
    assert_eq!(count(&p, "a", SwapKind::Sleep(SleepLevel::One)), 1);
    assert_eq!(
        host.held_by("pool"),
        14_000,
        "b's weights now, a's given back"
    );
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 14_000);

    // An unload stops a sleeper; so does the end of its time asleep.
    assert!(p.unload("b").await.unwrap());
    assert_eq!(p.state("b"), SlotState::Idle);
    assert_eq!(host.held_by("pool"), 0);
}

#[tokio::test]
async fn among_equally_important_idle_models_the_one_cheapest_to_bring_back_is_evicted() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, _) = pool(&fleet, 100_000, PoolConfig::default());
    // x cannot sleep (back in a 1 s load), y can (back in a wake); x is the older.
    p.register(sleeper("x", 10_000, json!({ "can_sleep": false })));
    p.register(sleeper("y", 10_000, json!({})));
    p.register(sleeper("z", 10_000, json!({})));
    drop(p.get_or_load("x", 9).await.unwrap());
    drop(p.get_or_load("y", 9).await.unwrap());
    drop(p.get_or_load("z", 1).await.unwrap());
    assert_eq!(
        p.state("x"),
        SlotState::Ready,
        "LRU alone would have taken x"
    );
    assert_eq!(p.state("y"), SlotState::Sleeping);
}

#[tokio::test]
async fn a_failed_wake_stops_the_sleeper_and_loads_the_model_again() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, host) = pool(&fleet, 100_000, PoolConfig::default());
    p.register(sleeper("a", 14_000, json!({ "wake_fails": true })));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 50).await.unwrap());
    drop(p.get_or_load("b", 45).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Sleeping);
    let g = p.get_or_load("a", 40).await.unwrap();
    assert_eq!(p.state("a"), SlotState::Ready);
    assert_eq!(count(&p, "a", SwapKind::Wake(SleepLevel::One)), 0);
    assert_eq!(count(&p, "a", SwapKind::Stop), 1, "the sleeper was stopped");
    assert_eq!(count(&p, "a", SwapKind::Load), 2, "and loaded again");
    assert_eq!(level(&p, "a"), None);
    drop(g);
    assert_eq!(
        host.held_by("pool"),
        14_000,
        "b asleep; a's reservation gone"
    );
}

#[tokio::test]
async fn a_failed_sleep_stops_the_model_and_gives_its_host_ram_back() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, host) = pool(&fleet, 100_000, PoolConfig::default());
    p.register(sleeper("a", 14_000, json!({ "sleep_fails": true })));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 50).await.unwrap());
    drop(p.get_or_load("b", 45).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Idle, "stopped, not asleep");
    assert_eq!(count(&p, "a", SwapKind::Stop), 1);
    assert_eq!(
        host.held_by("pool"),
        0,
        "its level-1 reservation given back"
    );
    assert_eq!(fleet.used_mb(0).unwrap(), 300 + 14_000);
}

#[tokio::test]
async fn level_one_only_within_host_ram_the_pools_own_sleepers_stopped_to_make_room() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, host) = pool(&fleet, 20_000, PoolConfig::default());
    for m in ["a", "b", "c"] {
        p.register(sleeper(m, 14_000, json!({})));
    }
    drop(p.get_or_load("a", 50).await.unwrap());
    drop(p.get_or_load("b", 45).await.unwrap());
    assert_eq!(level(&p, "a"), Some(SleepLevel::One));
    // c needs b's room; b's weights do not fit beside a's: a, the oldest sleeper, is stopped.
    drop(p.get_or_load("c", 40).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Idle, "stopped for host RAM");
    assert_eq!(level(&p, "b"), Some(SleepLevel::One));
    assert_eq!(host.held_by("pool"), 14_000);
    assert!(host.used_mb() <= host.budget_mb());

    // Another holder of the host RAM (the lanes) leaves less than a model: level 2.
    assert!(p.unload("b").await.unwrap());
    assert_eq!(host.room_for("lanes"), 20_000);
    host.set_held("lanes", 10_000);
    drop(p.get_or_load("a", 35).await.unwrap());
    assert_eq!(level(&p, "c"), Some(SleepLevel::Two), "{:?}", p.slots());
    assert!(host.used_mb() <= host.budget_mb());

    // Without host RAM at all, no level 1 ever.
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, _) = pool(&fleet, 0, PoolConfig::default());
    p.register(sleeper("x", 14_000, json!({})));
    p.register(sleeper("y", 14_000, json!({})));
    drop(p.get_or_load("x", 30).await.unwrap());
    drop(p.get_or_load("y", 25).await.unwrap());
    assert_eq!(level(&p, "x"), Some(SleepLevel::Two));
}

#[tokio::test]
async fn sleep_off_or_a_server_that_cannot_sleep_is_stopped_and_sleepers_stop_after_their_time() {
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, _) = pool(
        &fleet,
        100_000,
        PoolConfig {
            sleep: false,
            ..PoolConfig::default()
        },
    );
    p.register(sleeper("a", 14_000, json!({})));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 50).await.unwrap());
    drop(p.get_or_load("b", 45).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Idle);

    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, host) = pool(
        &fleet,
        100_000,
        PoolConfig {
            stay_asleep_s: 0,
            stay_warm: horos_gpu_alloc::pool::StayWarm {
                llm_s: 0,
                ..Default::default()
            },
            ..PoolConfig::default()
        },
    );
    p.register(sleeper("a", 14_000, json!({ "can_sleep": false })));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 40).await.unwrap());
    drop(p.get_or_load("b", 35).await.unwrap());
    assert_eq!(p.state("a"), SlotState::Idle, "cannot sleep: stopped");
    // b's stay-warm time (0 s) is over: maintain puts it to sleep, the next stops it.
    assert_eq!(p.maintain().await.unwrap(), vec!["b".to_owned()]);
    assert_eq!(p.state("b"), SlotState::Sleeping);
    assert_eq!(fleet.used_mb(0).unwrap(), 300);
    p.maintain().await.unwrap();
    assert_eq!(p.state("b"), SlotState::Idle);
    assert_eq!(host.used_mb(), 0);
}

#[tokio::test]
async fn measured_costs_are_kept_and_read_back_by_the_next_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (p, _) = pool(&fleet, 100_000, PoolConfig::default());
    let p = p
        .with_cost_store(Arc::new(CostStore::open(&path).unwrap()))
        .unwrap();
    p.register(sleeper("a", 14_000, json!({})));
    p.register(sleeper("b", 14_000, json!({})));
    drop(p.get_or_load("a", 50).await.unwrap());
    drop(p.get_or_load("b", 45).await.unwrap());
    drop(p.get_or_load("a", 40).await.unwrap());
    drop(p);

    let fleet = Arc::new(SimFleet::new(1, 24_000));
    let (again, _) = pool(&fleet, 100_000, PoolConfig::default());
    let again = again
        .with_cost_store(Arc::new(CostStore::open(&path).unwrap()))
        .unwrap();
    assert_eq!(count(&again, "a", SwapKind::Load), 1);
    assert_eq!(count(&again, "b", SwapKind::Load), 1);
    assert_eq!(count(&again, "a", SwapKind::Wake(SleepLevel::One)), 1);
    assert_eq!(count(&again, "a", SwapKind::Sleep(SleepLevel::One)), 1);
    // The cold-load answer of a model never loaded here starts from what was measured.
    again.register(sleeper("a", 14_000, json!({})));
    let measured = again
        .swap_costs()
        .measured(&cost_key("a"), 0, SwapKind::Load)
        .unwrap()
        .mean_s;
    assert_eq!(again.expected_ready_s("a"), Some(measured));
}
