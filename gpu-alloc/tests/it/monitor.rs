//! The simulated fleet, temperature alerts, the 1 s sampler and thermal pacing.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use horos_gpu_alloc::monitor::sim_fleet::{SimFleet, TemperatureStep};
use horos_gpu_alloc::monitor::{
    AlertConfig, AlertStatus, AlertTracker, GpuMonitor, MonitorError, MonitorEvent, Sampler,
    SamplerConfig,
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
            ..SamplerConfig::default()
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
fn a_fleet_of_different_sizes_and_a_temperature_script() {
    let f = SimFleet::with_sizes(&[24_000, 80_000]).with_temperature_script(vec![
        TemperatureStep {
            gpu: 1,
            at_ms: 0,
            temperature_c: 88.0,
        },
        TemperatureStep {
            gpu: 7,
            at_ms: 0,
            temperature_c: 99.0,
        },
        TemperatureStep {
            gpu: 1,
            at_ms: 60_000,
            temperature_c: 50.0,
        },
    ]);
    let s = f.sample().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].memory_total_mb, s[1].memory_total_mb),
        (24_000, 80_000)
    );
    assert_eq!(s[1].temperature_c, Some(88.0), "the step at 0 ms is due");
    assert!(s[0].temperature_c.unwrap() < 50.0);
    // A later manual setting holds until the next step (a minute away here).
    f.set_temperature(1, 70.0).unwrap();
    assert_eq!(f.sample().unwrap()[1].temperature_c, Some(70.0));
}

/// The sampler raises one alert per crossing however many samples stay hot, counts it, clears
/// it below threshold − margin, and keeps the samples in its history.
#[tokio::test]
async fn the_sampler_counts_one_alert_per_crossing_and_keeps_a_history() {
    let f = Arc::new(SimFleet::new(2, 24_000));
    let sampler = Sampler::spawn(
        Arc::clone(&f) as Arc<dyn GpuMonitor>,
        SamplerConfig {
            interval_ms: 10,
            ..SamplerConfig::default()
        },
    );
    let mut rx = sampler.subscribe();
    let count = |s: &Sampler| s.history().len();
    f.set_temperature(1, 90.0).unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ev, MonitorEvent::TemperatureAlert { gpu: 1, .. }));
    // Many hot samples: still one alert.
    let before = count(&sampler);
    while count(&sampler) < before + 2 * 20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a = sampler.alerts();
    assert_eq!(
        a[&1],
        AlertStatus {
            active: true,
            raised_total: 1
        }
    );
    assert_eq!(a[&0], AlertStatus::default());
    f.set_temperature(1, 77.0).unwrap(); // inside the 5 °C margin: still in alert
    let before = count(&sampler);
    while count(&sampler) < before + 2 * 5 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(sampler.alerts()[&1].active);
    f.set_temperature(1, 60.0).unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ev,
        MonitorEvent::TemperatureNormal {
            gpu: 1,
            temperature_c: 60.0
        }
    );
    assert!(rx.try_recv().is_err(), "one raise, one clear, nothing else");
    let a = sampler.alerts();
    assert_eq!(
        a[&1],
        AlertStatus {
            active: false,
            raised_total: 1
        }
    );
    let h = sampler.history();
    assert!(
        h.iter()
            .any(|p| p.gpu == 1 && p.alert && p.temperature_c == Some(90.0))
    );
    assert!(h.iter().all(|p| p.gpu != 0 || !p.alert));
    assert!(h.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
}

#[test]
fn sampler_settings_are_checked_by_key() {
    assert!(SamplerConfig::default().validate().is_ok());
    let e = SamplerConfig {
        interval_ms: 0,
        ..SamplerConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "interval_ms");
    let e = SamplerConfig {
        alert: AlertConfig {
            threshold_c: f64::NAN,
            ..AlertConfig::default()
        },
        ..SamplerConfig::default()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "alert.threshold_c");
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
