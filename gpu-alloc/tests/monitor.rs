//! The simulated fleet, temperature alerts, the 1 s sampler and thermal pacing.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
use horos_gpu_alloc::monitor::{
    AlertConfig, AlertTracker, GpuMonitor, MonitorError, MonitorEvent, Sampler, SamplerConfig,
};
use horos_gpu_alloc::thermal::{ThermalModel, ThermalPolicy};

#[test]
fn simulated_memory_follows_loads_and_unloads() {
    let f = SimFleet::new(2, 24_000);
    assert_eq!(f.free_mb(0).unwrap(), 23_700);
    f.load(0, "vision", 20_000, Some(77)).unwrap();
    let err = f.load(0, "think", 8000, None).unwrap_err();
    assert_eq!(
        err,
        MonitorError::OutOfMemory {
            gpu: 0,
            requested_mb: 8000,
            free_mb: 3700
        }
    );
    let s = f.sample().unwrap();
    assert_eq!(s[0].memory_used_mb, 20_300);
    assert_eq!(s[0].processes.len(), 1);
    assert_eq!(s[0].processes[0].pid, 77);
    assert_eq!(s[1].memory_free_mb, 23_700);
    assert_eq!(f.unload(0, "vision").unwrap(), 20_000);
    assert_eq!(f.free_mb(0).unwrap(), 23_700);
    assert!(matches!(f.free_mb(5), Err(MonitorError::NoSuchGpu(5))));
}

#[test]
fn simulated_temperature_and_utilization_follow_batches() {
    let f = SimFleet::new(1, 24_000);
    let idle = f.sample().unwrap()[0].temperature_c.unwrap();
    f.begin_batch(0).unwrap();
    assert_eq!(f.sample().unwrap()[0].utilization_pct, Some(95));
    for _ in 0..600 {
        f.advance(1.0);
    }
    let hot = f.sample().unwrap()[0].temperature_c.unwrap();
    assert!(hot > 80.0 && hot > idle + 30.0, "{idle} -> {hot}");
    f.end_batch(0).unwrap();
    for _ in 0..600 {
        f.advance(1.0);
    }
    let cooled = f.sample().unwrap()[0].temperature_c.unwrap();
    assert!(cooled < idle + 5.0, "{cooled}");
    assert_eq!(f.sample().unwrap()[0].utilization_pct, Some(0));
}

#[test]
fn temperature_alert_fires_once_per_crossing_with_hysteresis() {
    let f = SimFleet::new(2, 24_000);
    let mut t = AlertTracker::new(AlertConfig::default());
    assert!(t.observe(&f.sample().unwrap()).is_empty());
    f.set_temperature(1, 83.0).unwrap();
    let ev = t.observe(&f.sample().unwrap());
    assert_eq!(
        ev,
        vec![MonitorEvent::TemperatureAlert {
            gpu: 1,
            temperature_c: 83.0,
            threshold_c: 80.0
        }]
    );
    assert!(
        t.observe(&f.sample().unwrap()).is_empty(),
        "no repeat while still hot"
    );
    f.set_temperature(1, 78.0).unwrap();
    assert!(
        t.observe(&f.sample().unwrap()).is_empty(),
        "78 °C is inside the 5 °C hysteresis"
    );
    f.set_temperature(1, 74.0).unwrap();
    assert_eq!(
        t.observe(&f.sample().unwrap()),
        vec![MonitorEvent::TemperatureNormal {
            gpu: 1,
            temperature_c: 74.0
        }]
    );
    // Configurable threshold.
    let mut low = AlertTracker::new(AlertConfig {
        threshold_c: 70.0,
        clear_margin_c: 2.0,
    });
    assert_eq!(low.observe(&f.sample().unwrap()).len(), 1);
}

#[tokio::test]
async fn the_sampler_keeps_the_latest_snapshot_and_broadcasts_alerts() {
    let f = Arc::new(SimFleet::new(1, 24_000));
    let sampler = Sampler::spawn(
        Arc::clone(&f) as Arc<dyn GpuMonitor>,
        SamplerConfig {
            interval_ms: 10,
            alert: AlertConfig::default(),
        },
    );
    let mut rx = sampler.subscribe();
    f.set_temperature(0, 91.0).unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(ev, MonitorEvent::TemperatureAlert { gpu: 0, .. }),
        "{ev:?}"
    );
    let latest = sampler.latest().unwrap();
    assert_eq!(latest[0].memory_total_mb, 24_000);
}

#[test]
fn thermal_pacing_fixed_or_following_temperature() {
    let fixed = ThermalPolicy::default();
    assert_eq!(fixed.pause_after_batch(Some(40.0)), 10.0);
    assert_eq!(fixed.pause_after_batch(None), 10.0);
    let follow = ThermalPolicy::follow_temperature();
    assert_eq!(follow.pause_after_batch(Some(70.0)), 0.0);
    let warm = follow.pause_after_batch(Some(78.0));
    let hot = follow.pause_after_batch(Some(85.0));
    assert!(warm > 0.0 && hot > warm, "{warm} {hot}");
    assert_eq!(follow.pause_after_batch(Some(200.0)), 60.0);
    assert_eq!(follow.pause_after_batch(None), 10.0);
    let json = serde_json::to_string(&follow).unwrap();
    assert_eq!(
        serde_json::from_str::<ThermalPolicy>(&json).unwrap(),
        follow
    );
    let m = ThermalModel::default();
    assert!(m.step(40.0, 1.0, 60.0) > 40.0);
    assert!(m.step(80.0, 0.0, 60.0) < 80.0);
}
