//! The configuration's parsing and checks.

#![allow(clippy::unwrap_used)]
use super::ingest::VisualKind;
use super::*;
use horos_gpu_alloc::thermal::ThermalPolicy;
use std::path::PathBuf;

#[test]
fn defaults_and_lanes() {
    let c = Config::parse(
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\n\n[[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\nbatch_size = 8\n",
    )
    .unwrap();
    assert_eq!(c.database, PathBuf::from("horos.db"));
    assert_eq!(c.feeder.cooldown_s(), 10.0);
    assert_eq!(c.lanes.len(), 2);
    assert_eq!((c.lanes[0].batch_size, c.lanes[1].batch_size), (16, 8));
    assert!(c.lanes[0].command.is_none());
    assert_eq!(c.feeder.thermal, ThermalPolicy::Fixed { cooldown_s: 10.0 });
    let c = Config::parse("[feeder]\nthermal = \"follow\"\n").unwrap();
    assert!(matches!(
        c.feeder.thermal,
        ThermalPolicy::FollowTemperature { .. }
    ));
    let e = Config::parse("[feeder]\nthermal = \"hot\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("hot"), "{e}");
}

#[test]
fn an_unknown_key_is_named() {
    let e = Config::parse("[feeder]\ncooldown = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cooldown") && e.contains("unknown field"), "{e}");
    let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatchsize = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("batchsize"), "{e}");
    let e = Config::parse("databse = \"x.db\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("databse"), "{e}");
}

#[test]
fn bad_values_are_named() {
    let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatch_size = 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane[0].batch_size"), "{e}");
    let e = Config::parse("[feeder]\ncooldown_s = \"ten\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cooldown_s"), "{e}");
    let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"https://x\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane[0].url"), "{e}");
    let e = Config::parse(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\ncommand = [\"a\"]\n[lane.docker]\nimage = \"i\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not both"), "{e}");
    let e = Config::parse("[coordinator]\nmax_body_bytes = 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("coordinator.max_body_bytes"), "{e}");
    let e = Config::parse("[coordinator]\nbind = \"nowhere\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bind"), "{e}");
}

#[test]
fn ingest_section_values_are_checked() {
    let base = "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\nembeddings_model = \"m\"\n";
    let c = Config::parse(base).unwrap();
    let i = c.ingest.unwrap();
    assert_eq!(
        (i.reader, i.tuning.dpi, i.tuning.chunk_tokens),
        (ReaderKind::Tesseract, 150.0, 512)
    );
    let e = Config::parse(&format!("{base}dpi = 0.5\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ingest.dpi"), "{e}");
    let e = Config::parse(&format!("{base}reader = \"openai\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ingest.vision_url"), "{e}");
    let c = Config::parse(&format!(
        "{base}max_attempts = 5\nchunk_tokens = 128\nchunk_overlap = 16\nmax_pages = 40\n[ingest.workers]\nimage_to_ocr = 2\n"
    ))
    .unwrap();
    let t = c.ingest.unwrap().tuning;
    assert_eq!((t.max_attempts, t.chunk_tokens), (5, 128));
    let mut pipeline = ingest_pipeline::pipeline::PipelineConfig::new("x");
    t.apply(&mut pipeline);
    assert_eq!(pipeline.render.max_pages, 40);
    let e = Config::parse(&format!("{base}max_pages = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ingest.max_pages"), "{e}");
    assert_eq!(t.workers.values().copied().collect::<Vec<_>>(), [2]);
    let e = Config::parse(&format!("{base}[ingest.workers]\nocr = 2\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ocr"), "{e}");
    let e = Config::parse(&format!("{base}reader = \"paper\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("paper"), "{e}");
}

#[test]
fn vllm_shorthand_and_default_ports() {
    let c = Config::parse(
        "[[lane]]\nqueue = \"think\"\nmodel = \"q\"\n[lane.vllm]\nmodel = \"Qwen/Qwen3-32B\"\nmax_num_seqs = 16\n\
         [[lane]]\nqueue = \"vision\"\n",
    )
    .unwrap();
    assert_eq!(c.lanes[0].url, "http://127.0.0.1:8002");
    assert_eq!(c.lanes[1].url, "http://127.0.0.1:8001");
    let cmd = c.lanes[0].command.clone().unwrap().join(" ");
    assert_eq!(
        cmd,
        "vllm serve Qwen/Qwen3-32B --host 127.0.0.1 --port {port} --gpu-memory-utilization 0.75 \
         --max-model-len 16384 --max-num-seqs 16 --max-num-batched-tokens 2048 \
         --enable-chunked-prefill --served-model-name q"
    );
    let e = Config::parse("[[lane]]\nqueue = \"ocr\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lane[0]") && e.contains("url"), "{e}");
    let e = Config::parse(
        "[[lane]]\nqueue = \"think\"\ncommand = [\"x\"]\n[lane.vllm]\nmodel = \"m\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("one of"), "{e}");
}

#[test]
fn allocator_section_needs_two_managed_lanes_and_sets_their_gpu() {
    let lane = |q: &str, port: u16| {
        format!(
            "[[lane]]\nqueue = \"{q}\"\nurl = \"http://127.0.0.1:{port}\"\ncommand = [\"srv\"]\n"
        )
    };
    let two = format!(
        "[allocator]\ngpu = 1\ntick_s = 2\n{}{}",
        lane("think", 8002),
        lane("vision", 8001)
    );
    let c = Config::parse(&two).unwrap();
    assert_eq!(c.lanes[0].gpus, [1]);
    assert_eq!((c.lanes[1].swap_in_s, c.lanes[1].job_s), (60.0, 1.0));
    let p = c.allocator.unwrap().policy(7.0);
    assert_eq!((p.tick_s, p.batch_overhead_s), (2.0, 7.0));
    let e = Config::parse(&format!("[allocator]\n{}", lane("think", 8002)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least two modes"), "{e}");
    let e = Config::parse(&two.replace("tick_s = 2", "tick_s = 0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("allocator.tick_s"), "{e}");
    let e = Config::parse(&format!("{two}job_s = 0\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("job_s"), "{e}");
}

#[test]
fn pool_section_defaults_and_checks() {
    let base = "[coordinator]\n[coordinator.pool]\nmemory_mb = 1000\n\
                [[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"srv\", \"--port\", \"{port}\"]\n\
                category = \"embedding\"\nstay_warm_s = 5\n";
    let c = Config::parse(base).unwrap();
    let p = c.coordinator.clone().unwrap().pool.unwrap();
    assert_eq!(
        (p.settings.port_min, p.settings.port_max, p.gpus),
        (8300, 8399, 1)
    );
    assert_eq!(p.ledger, None);
    assert_eq!(c.ledger_path(), PathBuf::from("vram-ledger.db"));
    assert_eq!(
        p.models[0].category,
        horos_gpu_alloc::pool::Category::Embedding
    );
    assert_eq!(p.models[0].stay_warm_s, Some(5));
    let twice = format!("{base}[[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"x\"]\n");
    let e = Config::parse(&twice).unwrap_err().to_string();
    assert!(e.contains("served twice"), "{e}");
    let e = Config::parse(&base.replace("memory_mb = 1000", "port_min = 9000\nport_max = 8000"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("port_min"), "{e}");
    let c = Config::parse(&base.replace(
        "memory_mb = 1000",
        "memory_mb = 1000\nreclaim_checks = 5\n[coordinator.pool.stay_warm]\nllm_s = 30",
    ))
    .unwrap();
    let p = c.coordinator.unwrap().pool.unwrap();
    assert_eq!(
        (p.settings.reclaim_checks, p.settings.stay_warm.llm_s),
        (5, 30)
    );
    let e = Config::parse(&base.replace("memory_mb = 1000", "memory_mb = 1000\nport = 3"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("port"), "{e}");
    let e = Config::parse(&base.replace("[\"srv\", \"--port\", \"{port}\"]", "[]"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs a name and either a command or a backend"),
        "{e}"
    );
    let e = Config::parse(&base.replace("category = \"embedding\"", "category = \"sound\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sound"), "{e}");
}

#[test]
fn coordinator_and_allocator_sections_are_their_crates_settings() {
    let c = Config::parse(
        "[coordinator]\nallow_cloud_fallback = false\nupstream_timeout_s = 30\n\
         [coordinator.tasks.extract]\nmodels = [\"big\", \"small\"]\npin_primary = true\n\
         [coordinator.load_s]\nbig = 90\n",
    )
    .unwrap();
    let co = c.coordinator.unwrap();
    assert!(!co.settings.allow_cloud_fallback);
    assert_eq!(co.settings.upstream_timeout_s, 30.0);
    assert_eq!(co.settings.tasks["extract"].models, ["big", "small"]);
    assert!(co.settings.tasks["extract"].pin_primary);
    assert_eq!(co.settings.load_s["big"], 90.0);
    let e = Config::parse("[coordinator]\nbind = \"0.0.0.0:8210\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("coordinator.api_key") && e.contains("loopback"),
        "{e}"
    );
    Config::parse("[coordinator]\nbind = \"0.0.0.0:8210\"\napi_key = \"k\"\n").unwrap();
    Config::parse("[coordinator]\nbind = \"0.0.0.0:8210\"\nallow_unauthenticated_admin = true\n")
        .unwrap();
    let e = Config::parse("[coordinator]\nmax_inflight = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("max_inflight"), "{e}");
    let e = Config::parse("[coordinator]\nstate_path = \"x.db\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("state_path") && e.contains("set by horos-ref"),
        "{e}"
    );
    let e = Config::parse("[coordinator.tasks.t]\nmodels = []\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("coordinator.tasks.t.models"), "{e}");

    let lanes = "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\ncommand = [\"a\"]\n\
                 [[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\ncommand = [\"b\"]\n";
    let c = Config::parse(&format!(
        "[allocator]\nreversal_factor = 5\n[[allocator.anti_inversion]]\ntarget = \"vision\"\n\
         other = \"think\"\nmax_target_jobs = 1\nratio = 4\n{lanes}"
    ))
    .unwrap();
    let a = c.allocator.unwrap();
    let p = a.policy(7.0);
    assert_eq!((p.reversal_factor, p.batch_overhead_s), (5.0, 7.0));
    assert_eq!(p.anti_inversion[0].target, "vision");
    let c = Config::parse(&format!("[allocator]\nbatch_overhead_s = 2\n{lanes}")).unwrap();
    assert_eq!(c.allocator.unwrap().policy(7.0).batch_overhead_s, 2.0);
    let e = Config::parse(&format!("[allocator]\nhorizon = 3\n{lanes}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("horizon"), "{e}");
}

#[test]
fn docker_probe_and_coordinator_sections() {
    let c = Config::parse(
        "[coordinator]\nbind = \"127.0.0.1:9999\"\n[[coordinator.model]]\nname = \"m\"\nurl = \"http://127.0.0.1:1\"\n\
         [[lane]]\nqueue = \"t\"\nurl = \"http://127.0.0.1:8002/\"\n[lane.docker]\nimage = \"horos/llama-server:local\"\n\
         cmd = [\"--port\", \"{port}\"]\n[lane.probe]\ninference_every = 3\n",
    )
    .unwrap();
    let lane = &c.lanes[0];
    assert_eq!(lane.port(), Some(8002));
    assert_eq!(lane.docker.as_ref().unwrap().container_port, 8000);
    assert_eq!(lane.probe.inference_every, 3);
    // The lane's defaults where the section is silent, horos-servers' for the keys it adds.
    assert_eq!(lane.probe.inference_timeout_ms, 30_000);
    assert_eq!(lane.probe.health_timeout_ms, 5000);
    let silent = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n").unwrap();
    assert_eq!(
        (
            silent.lanes[0].probe.inference_every,
            silent.lanes[0].probe.inference_timeout_ms
        ),
        (1, 30_000)
    );
    let custom = Config::parse(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[lane.probe]\nkind = \"embedding\"\nprompt = \"ping\"\n",
    )
    .unwrap();
    assert_eq!(
        custom.lanes[0].probe.kind,
        horos_servers::InferenceKind::Embedding
    );
    assert_eq!(custom.lanes[0].probe.prompt, "ping");
    let co = c.coordinator.unwrap();
    assert_eq!(co.settings.bind.port(), 9999);
    assert_eq!(co.models[0].name, "m");
    let e =
        Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[lane.probe]\nevery = 1\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("every"), "{e}");
}

#[test]
fn gpus_section_defaults_sampler_keys_and_checks() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.gpus.source, GpuSource::Auto);
    assert_eq!(c.gpus.sampler.interval_ms, 1000);
    assert_eq!(c.gpus.sampler.alert.threshold_c, 80.0);
    let c = Config::parse(
        "[gpus]\nsource = \"simulated\"\nsimulated_mb = [24000, 16000]\ninterval_ms = 50\n\
         history_s = 60\nalert_command = [\"notify\", \"--now\"]\n\
         alert_webhook = \"http://127.0.0.1:9000/hook\"\n\
         [gpus.alert]\nthreshold_c = 85.0\nclear_margin_c = 3.0\n\
         [[gpus.simulated_temperature]]\ngpu = 1\nat_ms = 500\ntemperature_c = 90.0\n",
    )
    .unwrap();
    assert_eq!(c.gpus.simulated_mb, vec![24_000, 16_000]);
    assert_eq!(c.gpus.sampler.interval_ms, 50);
    assert_eq!(c.gpus.sampler.history_s, 60);
    assert_eq!(c.gpus.sampler.alert.threshold_c, 85.0);
    assert_eq!(c.gpus.simulated_temperature[0].at_ms, 500);
    let w = c.gpus.webhook().unwrap().unwrap();
    assert_eq!(
        (w.authority.as_str(), w.path.as_str()),
        ("127.0.0.1:9000", "/hook")
    );
    for (text, needle) in [
        ("[gpus]\nintervall_ms = 5\n", "intervall_ms"),
        ("[gpus]\nsource = \"cuda\"\n", "source"),
        ("[gpus]\ninterval_ms = 0\n", "gpus.interval_ms"),
        (
            "[gpus.alert]\nthreshold_c = 500.0\n",
            "gpus.alert.threshold_c",
        ),
        ("[gpus]\nsource = \"simulated\"\n", "gpus.simulated_mb"),
        ("[gpus]\nsimulated_mb = [1000]\n", "only for source"),
        (
            "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
             [[gpus.simulated_temperature]]\ngpu = 1\nat_ms = 0\ntemperature_c = 90.0\n",
            "gpus.simulated_temperature[0]",
        ),
        (
            "[gpus]\nalert_webhook = \"http://example.com/hook\"\n",
            "alert_webhook_allow_remote",
        ),
        (
            "[gpus]\nalert_webhook = \"https://127.0.0.1/\"\n",
            "only http://",
        ),
        ("[gpus]\nalert_command = [\"\"]\n", "gpus.alert_command"),
        (
            "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
             [[gpus.simulated_process]]\ngpu = 1\nmb = 10\n",
            "gpus.simulated_process[0]",
        ),
        (
            "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000]\n\
             [[gpus.simulated_process]]\ngpu = 0\nmb = 10\nat_ms = 5\nuntil_ms = 5\n",
            "until_ms after at_ms",
        ),
        (
            "[gpus]\n[[gpus.simulated_process]]\ngpu = 0\nmb = 10\n",
            "only for source",
        ),
        (
            "[gpus]\nledger = \"a.db\"\n[coordinator.pool]\nmemory_mb = 1\nledger = \"b.db\"\n",
            "differ",
        ),
        (
            "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:1\"\ncommand = [\"x\"]\n\
             [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:2\"\ncommand = [\"x\"]\n\
             [allocator]\ngpus = [0, 1]\n",
            "port 2",
        ),
        (
            "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:1\"\ncommand = [\"x\"]\n\
             [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:5\"\ncommand = [\"x\"]\n\
             [allocator]\ngpus = [0, 1]\ninitial = [\"a\"]\n",
            "one per GPU",
        ),
        (
            "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:1\"\ncommand = [\"x\"]\n\
             [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:5\"\ncommand = [\"x\"]\n\
             [allocator]\ngpu = 0\ngpus = [0]\n",
            "not both",
        ),
    ] {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
    let c = Config::parse(
        "[gpus]\nalert_webhook = \"http://10.0.0.2:80/h\"\nalert_webhook_allow_remote = true\n",
    )
    .unwrap();
    assert!(!c.gpus.webhook().unwrap().unwrap().is_loopback());
    assert!(
        horos_gpu_alloc::monitor::alerts::WebhookUrl::parse("http://[::1]:8080")
            .unwrap()
            .is_loopback()
    );
}

#[test]
fn allocator_gpus_give_each_lane_an_instance_per_gpu() {
    let c = Config::parse(
        "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:8001/v1\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:8011\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"c\"\nurl = \"http://127.0.0.1:8021\"\n\
         [allocator]\ngpus = [2, 5, 7]\n",
    )
    .unwrap();
    let a = c.allocator.as_ref().unwrap();
    assert_eq!(a.gpus, vec![2, 5, 7]);
    // Managed lanes in order, starting over; `c` is someone else's server.
    assert_eq!(a.initial_lanes(&c.lanes), vec!["a", "b", "a"]);
    assert_eq!(c.lanes[0].instance_url(0), "http://127.0.0.1:8001/v1");
    assert_eq!(c.lanes[0].instance_url(2), "http://127.0.0.1:8003/v1");
    assert_eq!(c.lanes[1].instance_url(1), "http://127.0.0.1:8012");
    assert_eq!(c.lanes[1].instance_name(0, 2), "b");
    assert_eq!(c.lanes[1].instance_name(2, 7), "b-gpu7");
    // Several GPUs: the allocator sets each instance's GPU, not the lane.
    assert!(c.lanes[0].gpus.is_empty());
    let one = Config::parse(
        "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:8001\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:8011\"\ncommand = [\"x\"]\n\
         [allocator]\ngpu = 3\n",
    )
    .unwrap();
    assert_eq!(one.allocator.as_ref().unwrap().gpus, vec![3]);
    assert_eq!(one.lanes[1].gpus, vec![3]);
}

#[test]
fn ingest_visual_embedder_is_selected_by_its_keys() {
    let base = "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\nembeddings_model = \"m\"\n";
    let visual = |extra: &str| {
        Config::parse(&format!("{base}{extra}"))
            .map(|c| c.ingest.unwrap().visual)
            .map_err(|e| e.to_string())
    };
    assert_eq!(visual("").unwrap(), VisualKind::PixelPatchFallback);
    assert_eq!(
        visual("visual = \"pixel-patch-fallback\"\n").unwrap(),
        VisualKind::PixelPatchFallback
    );
    assert_eq!(
        visual("visual_url = \"http://127.0.0.1:8002\"\nvisual_model = \"vidore/colqwen2-v1.0\"\n")
            .unwrap(),
        VisualKind::Pooling {
            url: "http://127.0.0.1:8002".into(),
            model: "vidore/colqwen2-v1.0".into()
        }
    );
    let e = visual("visual = \"pooling\"\n").unwrap_err();
    assert!(e.contains("ingest.visual_url"), "{e}");
    let e = visual("visual = \"colpali\"\n").unwrap_err();
    assert!(e.contains("pixel-patch-fallback"), "{e}");
    let e = visual("visual = \"pixel-patch-fallback\"\nvisual_url = \"http://x\"\n").unwrap_err();
    assert!(e.contains("visual_url"), "{e}");
    let e = visual("visual_url = \" \"\n").unwrap_err();
    assert!(e.contains("must not be empty"), "{e}");
}

/// The README's `[ingest]` sample (through its `[ingest.workers]`) is a valid section, and its
/// keys reach the pipeline's settings.
#[test]
fn the_readmes_ingest_sample_parses_and_reaches_the_pipeline() {
    let readme = include_str!("../../README.md");
    let start = readme.find("\n[ingest]").unwrap();
    let end = start + readme[start..].find("```").unwrap();
    let sample = readme[start..end].replace("# vision_url", "vision_url");
    let c = Config::parse(&sample).unwrap();
    let i = c.ingest.unwrap();
    assert!(i.vision_fallback && i.detect_rotation);
    assert!(
        i.settings(None)
            .unwrap()
            .pipeline_config()
            .orientation
            .is_some()
    );
    let mut p = ingest_pipeline::pipeline::PipelineConfig::new("x");
    i.tuning.apply(&mut p);
    assert_eq!(
        (p.render.dpi, p.tiles.threshold_bytes, p.render.text_layer),
        (
            150.0,
            4 * 1024 * 1024,
            ingest_pipeline::text_layer::TextLayerMode::Auto
        )
    );
    assert_eq!(p.workers, [2, 8, 4, 2, 2]);
    let c = Config::parse(
        "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\n\
         embeddings_model = \"m\"\ntext_layer = \"ignore\"\ntile_threshold_bytes = 0\n\
         vision_fallback = false\ndetect_rotation = false\n",
    )
    .unwrap();
    let i = c.ingest.unwrap();
    assert!(!i.vision_fallback && !i.detect_rotation);
    assert!(
        i.settings(None)
            .unwrap()
            .pipeline_config()
            .orientation
            .is_none()
    );
    i.tuning.apply(&mut p);
    assert_eq!(
        (p.tiles.threshold_bytes, p.render.text_layer),
        (0, ingest_pipeline::text_layer::TextLayerMode::Ignore)
    );
}

/// The README's `[coordinator]` sample parses (its pooled container included), and its model
/// manifest, client profiles and cooldowns reach the coordinator's settings; a template file is found next to the
/// configuration file.
#[test]
fn the_readmes_coordinator_sample_reaches_the_manifest_profiles_and_cooldowns() {
    let readme = include_str!("../../README.md");
    let start = readme.find("\n[coordinator]").unwrap();
    let end = start + readme[start..].find("\n[gpus]").unwrap();
    let c = Config::parse(&readme[start..end]).unwrap();
    let section = c.coordinator.unwrap();
    // Its container of the user's own is the docker kind, serving the paths it declares.
    let pool = section.pool.as_ref().unwrap();
    let own = pool
        .models
        .iter()
        .find(|m| m.name == "my-embedder")
        .unwrap();
    assert_eq!(own.kind().unwrap().name, "docker");
    assert_eq!(own.paths().unwrap(), ["/v1/embeddings"]);
    let s = section.settings;
    assert_eq!(s.manifest["smollm2"].template.as_deref(), Some("chatml"));
    assert_eq!(
        s.manifest["smollm2"].completion_api,
        horos_coordinator::CompletionApi::Llama
    );
    assert_eq!(s.manifest["qwen2.5-7b"].thinking, Some(false));
    assert_eq!(s.profiles["my-app"].aliases["fast"], "qwen2.5-3b");
    assert_eq!(s.profiles["my-app"].priority, Some(2));
    assert_eq!(s.clients["batch-tool"].cooldown.unwrap().requests, 100);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("horos.toml");
    std::fs::write(
        &path,
        "[coordinator.manifest.m]\ntemplate_file = \"m.jinja\"\n",
    )
    .unwrap();
    let c = Config::load(&path).unwrap();
    assert_eq!(
        c.coordinator.unwrap().settings.manifest["m"].template_file,
        Some(dir.path().join("m.jinja"))
    );
    let e = Config::parse("[coordinator.manifest.m]\ntemplate = \"vicuna\"\n").unwrap_err();
    assert!(e.to_string().contains("manifest.m.template"), "{e}");
}

/// A pooled model names a command, a backend kind of the registry (with weights), or a
/// container (the `docker` kind, with its image); not two of them and not none.
#[test]
fn a_pooled_model_names_a_command_or_a_backend_kind() {
    let pool = |model: &str| {
        Config::parse(&format!(
            "[coordinator.pool]\nmemory_mb = 1000\n[[coordinator.pool.model]]\nname = \"m\"\n{model}"
        ))
    };
    let model = |model: &str| {
        pool(model)
            .unwrap()
            .coordinator
            .unwrap()
            .pool
            .unwrap()
            .models[0]
            .clone()
    };
    let m = model("backend = \"llama-server\"\nweights = \"/m/q.gguf\"\n");
    assert_eq!(m.backend.as_deref(), Some("llama-server"));
    assert_eq!(m.kind().unwrap().name, "llama-server");
    pool("command = [\"srv\"]\n").unwrap();
    // A container of the user's own: the docker kind, with or without `backend = "docker"`.
    let m = model("docker = { image = \"mine:local\", cmd = [\"--port\", \"{port}\"] }\n");
    assert_eq!(m.kind().unwrap().name, "docker");
    assert_eq!(m.docker.as_ref().unwrap().container_port, 8000);
    let m = model(
        "backend = \"docker\"\npaths = [\"/v1/embeddings\"]\nhealth_path = \"/ready\"\n\
         [coordinator.pool.model.docker]\nimage = \"mine:local\"\n",
    );
    assert_eq!(m.paths().unwrap(), ["/v1/embeddings"]);
    assert_eq!(m.health_path.as_deref(), Some("/ready"));
    for (model, want) in [
        ("", "either a command or a backend"),
        (
            "command = [\"srv\"]\nbackend = \"vllm\"\nweights = \"w\"\n",
            "either a command or a backend",
        ),
        (
            "command = [\"srv\"]\ndocker = { image = \"x\" }\n",
            "either a command or a backend",
        ),
        ("backend = \"tgi\"\nweights = \"w\"\n", "is not one of"),
        ("backend = \"vllm\"\n", "needs weights"),
        ("backend = \"docker\"\n", "needs a docker table"),
        (
            "backend = \"vllm\"\nweights = \"w\"\ndocker = { image = \"x\" }\n",
            "not with backend `vllm`",
        ),
        ("docker = { image = \"\" }\n", "docker.image is empty"),
        (
            "docker = { image = \"x\" }\nbinary = \"/bin/x\"\n",
            "binary is for a kind run as a process",
        ),
        (
            "docker = { image = \"x\", pull = true }\n",
            "unknown field `pull`",
        ),
        ("command = [\"srv\"]\npaths = [\"v1/chat\"]\n", "paths"),
        ("command = [\"srv\"]\npaths = []\n", "paths"),
        (
            "command = [\"srv\"]\nhealth_path = \"ready\"\n",
            "health_path",
        ),
    ] {
        let e = pool(model).unwrap_err().to_string();
        assert!(e.contains(want), "{model}: {e}");
    }
}

#[test]
fn allocator_pool_makes_the_model_pool_a_mode() {
    let lane = |q: &str, port: u16| {
        format!(
            "[[lane]]\nqueue = \"{q}\"\nurl = \"http://127.0.0.1:{port}\"\n\
             command = [\"srv\"]\nvram_mb = 600\n"
        )
    };
    let pool = "[coordinator]\n[coordinator.pool]\nmemory_mb = 1000\n\
                [[coordinator.pool.model]]\nname = \"m\"\ncommand = [\"srv\"]\nvram_mb = 1500\n";
    // One lane and the pool are two modes; `initial` may name the pool.
    let one = format!(
        "[allocator]\ngpus = [0, 1]\ninitial = [\"think\", \"pool\"]\n\
         [allocator.pool]\nswap_in_s = 5\n{}{pool}",
        lane("think", 8002)
    );
    let c = Config::parse(&one).unwrap();
    let a = c.allocator.unwrap();
    let p = a.pool.unwrap();
    assert_eq!((p.swap_in_s, p.job_s), (5.0, 10.0));
    assert_eq!(a.initial, ["think", "pool"]);
    // Without [coordinator.pool] there is nothing to give a GPU to.
    let e = Config::parse(&format!(
        "[allocator]\n[allocator.pool]\n{}{}",
        lane("think", 8002),
        lane("vision", 8004)
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("needs [coordinator.pool]"), "{e}");
    // The mode's name is taken.
    let e = Config::parse(&format!(
        "[allocator]\n[allocator.pool]\n{}{}{pool}",
        lane("think", 8002),
        lane("pool", 8004)
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("rename the lane"), "{e}");
    let e = Config::parse(&one.replace("swap_in_s = 5", "swap_in_s = -1"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("allocator.pool.swap_in_s"), "{e}");
    // A lane larger than one simulated GPU could never start under [allocator].
    let e = Config::parse(&format!(
        "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 500]\n{one}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("more than a GPU") && e.contains("[allocator.pool]"),
        "{e}"
    );
}

/// The request paths a pooled model serves: its kind's (the image worker's: images only), its
/// own where it declares them, none declared for a command of its own.
#[test]
fn a_pooled_model_serves_its_kinds_paths_or_its_own() {
    let models = |toml: &str| {
        Config::parse(&format!("[coordinator.pool]\nmemory_mb = 1000\n{toml}"))
            .unwrap()
            .coordinator
            .unwrap()
            .pool
            .unwrap()
            .models
    };
    let m = models(
        "[[coordinator.pool.model]]\nname = \"sd\"\nbackend = \"diffusers\"\nweights = \"/p\"\n\
         [[coordinator.pool.model]]\nname = \"own\"\ncommand = [\"srv\"]\n\
         [[coordinator.pool.model]]\nname = \"narrow\"\ncommand = [\"srv\"]\n\
         paths = [\"/v1/chat/completions\"]\n",
    );
    assert_eq!(m[0].paths().unwrap(), ["/v1/images/generations"]);
    assert_eq!(m[1].paths(), None);
    assert_eq!(m[2].paths().unwrap(), ["/v1/chat/completions"]);
    // A container of the user's own declares nothing (a llama-server image serves /completion
    // too): every request goes to it unless its `paths` narrow them.
    let m = models(
        "[[coordinator.pool.model]]\nname = \"box\"\n\
         [coordinator.pool.model.docker]\nimage = \"img\"\n",
    );
    assert_eq!(m[0].paths(), None);
}

#[test]
fn database_takes_its_password_from_the_environment() {
    let env = |v: &str| (v == "PGPASS").then(|| "s3cr3t".to_owned());
    assert_eq!(
        super::expand_env("postgres://horos:${PGPASS}@db:5432/horos", env).unwrap(),
        "postgres://horos:s3cr3t@db:5432/horos"
    );
    assert_eq!(super::expand_env("plain.db", env).unwrap(), "plain.db");
    let e = super::expand_env("postgres://u:${NOPE}@h/d", env).unwrap_err();
    assert!(e.contains("NOPE") && e.contains("not set"), "{e}");
    assert!(super::expand_env("postgres://u:${PGPASS@h/d", env).is_err());
    assert!(super::expand_env("postgres://u:${a-b}@h/d", env).is_err());
    // Through the file: an unset variable is named, and the URL never shows a password.
    let e = Config::parse("database = \"postgres://u:${HOROS_TEST_UNSET_VAR_X}@h/d\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("HOROS_TEST_UNSET_VAR_X"), "{e}");
}

#[test]
fn the_admin_key_comes_from_the_environment() {
    let c = Config::parse(
        "[coordinator]\nbind = \"0.0.0.0:8210\"\napi_key_env = \"HOROS_TEST_ADMIN_KEY\"\n",
    )
    .unwrap();
    let settings = &c.coordinator.unwrap().settings;
    let env = |v: &str| (v == "HOROS_TEST_ADMIN_KEY").then(|| "adm1n".to_owned());
    assert_eq!(settings.admin_key(env).unwrap().as_deref(), Some("adm1n"));
    let e = settings.admin_key(|_| None).unwrap_err().to_string();
    assert!(e.contains("HOROS_TEST_ADMIN_KEY"), "{e}");
    let both = Config::parse("[coordinator]\napi_key = \"k\"\napi_key_env = \"V\"\n");
    assert!(both.unwrap_err().to_string().contains("api_key_env"));
}
