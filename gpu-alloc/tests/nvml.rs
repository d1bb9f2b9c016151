//! NVML: where a GPU exists, real samples; elsewhere the typed "no driver" error, never a
//! panic. With HOROS_REQUIRE_NVML=1 a missing driver fails the test.
#![allow(clippy::unwrap_used)]

use horos_gpu_alloc::monitor::nvml::NvmlMonitor;
use horos_gpu_alloc::monitor::{GpuMonitor, MonitorError};
use horos_testkit::skip_or_fail;

#[test]
fn nvml_samples_real_gpus_or_answers_no_driver() {
    match NvmlMonitor::new() {
        Ok(m) => {
            let samples = m.sample().unwrap();
            assert!(!samples.is_empty(), "NVML initialised but reports no GPU");
            for s in &samples {
                assert!(s.memory_total_mb > 0);
                assert!(
                    s.memory_used_mb + s.memory_free_mb <= s.memory_total_mb + 1024,
                    "{s:?}"
                );
                assert!(
                    s.temperature_c.is_some_and(|t| (0.0..130.0).contains(&t)),
                    "{s:?}"
                );
                assert!(!s.name.is_empty());
            }
            assert_eq!(m.gpu_count().unwrap() as usize, samples.len());
            assert!(m.free_mb(samples[0].index).unwrap() <= samples[0].memory_total_mb);
            eprintln!(
                "NVML: {} GPU(s): {:?}",
                samples.len(),
                samples.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
        }
        Err(e) => {
            assert!(
                matches!(e, MonitorError::NoDriver(_)),
                "expected the typed NoDriver error, got {e:?}"
            );
            assert!(e.to_string().starts_with("no NVIDIA driver"), "{e}");
            skip_or_fail(
                "HOROS_REQUIRE_NVML",
                &format!("NVML is unavailable, the GPU part skipped: {e}"),
            );
        }
    }
}
