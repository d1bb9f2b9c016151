//! The VRAM estimation chain and the multi-GPU split.
#![allow(clippy::unwrap_used)]

use std::fs::File;

use horos_gpu_alloc::estimate::{
    EstimateSource, ModelFacts, VramEstimator, estimate, estimate_from_files, estimate_from_name,
};
use horos_gpu_alloc::split::{GpuFree, Share, place, split_proportional};

const MIB: u64 = 1024 * 1024;

fn sparse(path: &std::path::Path, bytes: u64) {
    File::create(path).unwrap().set_len(bytes).unwrap();
}

#[test]
fn the_chain_takes_the_first_known_source_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    sparse(&gguf, 10_000 * MIB);
    let full = ModelFacts {
        name: "qwen3-32b".into(),
        explicit_mb: Some(1234),
        metadata_mb: Some(5678),
        path: Some(gguf.clone()),
    };
    assert_eq!(estimate(&full).unwrap().source, EstimateSource::Explicit);
    assert_eq!(estimate(&full).unwrap().mb, 1234);
    let no_explicit = ModelFacts {
        explicit_mb: None,
        ..full.clone()
    };
    assert_eq!(
        (
            estimate(&no_explicit).unwrap().mb,
            estimate(&no_explicit).unwrap().source
        ),
        (5678, EstimateSource::Metadata)
    );
    let files = ModelFacts {
        metadata_mb: None,
        ..no_explicit.clone()
    };
    assert_eq!(estimate(&files).unwrap().source, EstimateSource::GgufFiles);
    assert_eq!(estimate(&files).unwrap().mb, 11_000);
    let name = ModelFacts {
        path: Some(dir.path().join("missing")),
        ..files
    };
    assert_eq!(estimate(&name).unwrap().source, EstimateSource::NamePattern);
    let nothing = ModelFacts {
        name: "mystery-model".into(),
        ..ModelFacts::default()
    };
    assert!(estimate(&nothing).is_err());
}

#[test]
fn file_sizes_gguf_times_1_1_safetensors_times_1_3() {
    let dir = tempfile::tempdir().unwrap();
    sparse(
        &dir.path().join("model-00001-of-00002.safetensors"),
        4000 * MIB,
    );
    sparse(
        &dir.path().join("model-00002-of-00002.safetensors"),
        6000 * MIB,
    );
    sparse(&dir.path().join("config.json"), 5000 * MIB);
    let e = estimate_from_files(dir.path()).unwrap();
    assert_eq!((e.mb, e.source), (13_000, EstimateSource::SafetensorsFiles));
    let f = dir.path().join("q.gguf");
    sparse(&f, 2000 * MIB);
    assert_eq!(estimate_from_files(&f).unwrap().mb, 2200);
    // A directory with GGUF files uses them.
    assert_eq!(
        estimate_from_files(dir.path()).unwrap().source,
        EstimateSource::GgufFiles
    );
    assert!(estimate_from_files(&dir.path().join("config.json")).is_none());
}

#[test]
fn name_patterns_read_parameters_and_quantisation() {
    let mb = |n: &str| estimate_from_name(n).map(|e| e.mb);
    let fp16_7b = mb("Qwen2-VL-7B-Instruct").unwrap();
    // 7e9 params × 2 bytes × 1.2 ≈ 16 GiB.
    assert!((15_000..17_000).contains(&fp16_7b), "{fp16_7b}");
    let b32 = mb("Qwen/Qwen3-32B").unwrap();
    assert!(b32 > 4 * fp16_7b && b32 < 5 * fp16_7b, "{b32}");
    let q4 = mb("qwen3-32b-q4_k_m").unwrap();
    assert!(q4 * 3 < b32 && q4 * 4 > b32, "q4 {q4} vs fp16 {b32}");
    let awq = mb("Qwen3-32B-AWQ").unwrap();
    assert_eq!(awq, q4);
    let q8 = mb("llama-3-8b-instruct-Q8_0").unwrap();
    let f16 = mb("llama-3-8b-instruct").unwrap();
    assert!(q8 * 2 > f16 - 500 && q8 < f16, "{q8} {f16}");
    assert!(mb("qwen2.5-0.5b").unwrap() < 2000);
    // Mixture of experts: 8x7b counts 56B.
    assert!(mb("mixtral-8x7b").unwrap() > 7 * fp16_7b);
    assert_eq!(mb("bge-m3"), None);
    assert_eq!(mb("colqwen2-v1.0"), None);
}

#[test]
fn a_measurement_replaces_the_estimate() {
    let est = VramEstimator::new();
    let facts = ModelFacts {
        name: "qwen3-8b".into(),
        metadata_mb: Some(20_000),
        ..ModelFacts::default()
    };
    assert_eq!(
        est.estimate(&facts).unwrap().source,
        EstimateSource::Metadata
    );
    est.record_measured("qwen3-8b", 17_500);
    let e = est.estimate(&facts).unwrap();
    assert_eq!((e.mb, e.source), (17_500, EstimateSource::Measured));
    // Other models are unaffected.
    let other = ModelFacts {
        name: "qwen3-14b".into(),
        ..ModelFacts::default()
    };
    assert_eq!(
        est.estimate(&other).unwrap().source,
        EstimateSource::NamePattern
    );
}

#[test]
fn split_is_proportional_to_effective_free_memory_with_a_512_mb_margin() {
    let gpus = [
        GpuFree {
            gpu: 1,
            free_mb: 10_512,
        },
        GpuFree {
            gpu: 0,
            free_mb: 30_512,
        },
        GpuFree {
            gpu: 2,
            free_mb: 400,
        },
    ];
    let s = split_proportional(20_000, &gpus, 512).unwrap();
    // Effective 10000 and 30000 (GPU 2 has nothing after the margin): 1:3.
    assert_eq!(
        s,
        vec![Share { gpu: 0, mb: 15_000 }, Share { gpu: 1, mb: 5000 }]
    );
    let odd = split_proportional(10_001, &gpus, 512).unwrap();
    assert_eq!(odd.iter().map(|s| s.mb).sum::<u64>(), 10_001);
    let err = split_proportional(40_001, &gpus, 512).unwrap_err();
    assert_eq!((err.need_mb, err.available_mb), (40_001, 40_000));
    assert!(split_proportional(40_000, &gpus, 512).is_ok());
}

#[test]
fn placement_prefers_one_gpu_the_tightest_fit() {
    let gpus = [
        GpuFree {
            gpu: 0,
            free_mb: 24_000,
        },
        GpuFree {
            gpu: 1,
            free_mb: 12_000,
        },
        GpuFree {
            gpu: 2,
            free_mb: 8000,
        },
    ];
    assert_eq!(
        place(10_000, &gpus, 512).unwrap(),
        vec![Share { gpu: 1, mb: 10_000 }]
    );
    assert_eq!(
        place(20_000, &gpus, 512).unwrap(),
        vec![Share { gpu: 0, mb: 20_000 }]
    );
    // Too big for one: the fewest GPUs with the most room.
    let s = place(30_000, &gpus, 512).unwrap();
    assert_eq!(s.iter().map(|s| s.gpu).collect::<Vec<_>>(), vec![0, 1]);
    assert!(place(50_000, &gpus, 512).is_err());
}

#[test]
fn a_real_gguf_is_estimated_from_its_header() {
    let Some(path) = std::env::var_os("HOROS_SMOLLM2_GGUF") else {
        eprintln!("SKIP: no HOROS_SMOLLM2_GGUF (scripts/setup_llama.sh)");
        return;
    };
    let facts = ModelFacts {
        name: "smollm2".into(),
        path: Some(path.clone().into()),
        ..ModelFacts::default()
    };
    let e = estimate(&facts).unwrap();
    assert_eq!(e.source, EstimateSource::GgufHeader);
    let file_mb = std::fs::metadata(&path).unwrap().len() / (1024 * 1024);
    // The attention cache of 30 layers at 4,096 tokens (90 MiB) comes on top of the weights.
    assert!(e.mb >= file_mb + 90, "{} MB for a {file_mb} MB file", e.mb);
    eprintln!(
        "SmolLM2-135M Q4_1: {file_mb} MB file, estimated {} MB",
        e.mb
    );
}

/// A Hugging Face directory (Qwen2.5-7B's index and config, no weights): the index's
/// `total_size` and the config's attention shape, ahead of the files' sizes in the chain.
#[test]
fn a_safetensors_directory_is_estimated_from_its_index_and_config() {
    use horos_gpu_alloc::estimate::estimate_from_safetensors;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"metadata": {"total_size": 15231233024}, "weight_map": {}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
            "hidden_size": 3584, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    sparse(
        &dir.path().join("model-00001-of-00004.safetensors"),
        100 * MIB,
    );
    // 15,231,233,024 B × 1.1 + 2 × 28 layers × 4 heads × 128 × 2 B × 4,096 tokens.
    let e = estimate_from_safetensors(dir.path()).unwrap();
    assert_eq!((e.mb, e.source), (16_203, EstimateSource::SafetensorsIndex));
    let facts = ModelFacts {
        name: "qwen2.5-7b".into(),
        path: Some(dir.path().to_path_buf()),
        ..ModelFacts::default()
    };
    assert_eq!(estimate(&facts).unwrap(), e);

    // One file, no index: its header's tensors; without config.json, no cache.
    let one = tempfile::tempdir().unwrap();
    let header = br#"{"__metadata__": {"format": "pt"}, "w": {"dtype": "F16", "shape": [1024, 1024], "data_offsets": [0, 2097152]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.resize(file.len() + 2_097_152, 0);
    std::fs::write(one.path().join("model.safetensors"), &file).unwrap();
    assert_eq!(estimate_from_safetensors(one.path()).unwrap().mb, 3);

    // A truncated header or a bogus length is no estimate (the chain goes on), never a panic.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(bad.path().join("model.safetensors"), &file[..20]).unwrap();
    assert!(estimate_from_safetensors(bad.path()).is_none());
    std::fs::write(bad.path().join("model.safetensors"), u64::MAX.to_le_bytes()).unwrap();
    assert!(estimate_from_safetensors(bad.path()).is_none());
    assert_eq!(
        estimate(&ModelFacts {
            name: "x".into(),
            path: Some(bad.path().to_path_buf()),
            ..ModelFacts::default()
        })
        .unwrap()
        .source,
        EstimateSource::SafetensorsFiles
    );
}
