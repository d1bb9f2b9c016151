//! The lanes' and the allocator's settings: read, completed and checked as a configuration
//! file's `[[lane]]` and `[allocator]`.

#![allow(clippy::unwrap_used)]

use horos_server_control::settings::{Table, from_table};

use super::*;

/// The lanes and the allocator of `text`, read, completed and checked as a file's.
fn file(text: &str) -> Result<(Vec<LaneSettings>, Option<AllocatorSettings>), String> {
    let mut file: Table = text.parse().map_err(|e| format!("{e}"))?;
    let lanes = match file.remove("lane") {
        Some(toml::Value::Array(a)) => a,
        _ => Vec::new(),
    };
    let mut lanes: Vec<LaneSettings> = lanes
        .into_iter()
        .map(|l| match l {
            toml::Value::Table(t) => from_table(t).map_err(|e: toml::de::Error| e.to_string()),
            other => Err(format!("a lane is a table: {other}")),
        })
        .collect::<Result<_, _>>()?;
    complete_lanes(&mut lanes)?;
    let allocator = match file.remove("allocator") {
        Some(toml::Value::Table(t)) => {
            let a: AllocatorSettings = from_table(t).map_err(|e: toml::de::Error| e.to_string())?;
            a.validate(&lanes)?;
            a.place_lanes(&mut lanes);
            Some(a)
        }
        _ => None,
    };
    Ok((lanes, allocator))
}

fn lanes(text: &str) -> Vec<LaneSettings> {
    file(text).unwrap().0
}

fn error(text: &str) -> String {
    file(text).unwrap_err()
}

#[test]
fn lane_defaults_unknown_keys_and_bad_values() {
    let l = lanes(
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\n\n[[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\nbatch_size = 8\n",
    );
    assert_eq!((l[0].batch_size, l[1].batch_size), (16, 8));
    assert!(l[0].command.is_none());
    let e = error("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatchsize = 3\n");
    assert!(e.contains("batchsize"), "{e}");
    let e = error("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatch_size = 0\n");
    assert!(e.contains("lane[0].batch_size"), "{e}");
    assert_eq!(l[0].max_attempts, None);
    let l = lanes("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nmax_attempts = 3\n");
    assert_eq!(l[0].max_attempts, Some(3));
    let e = error("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nmax_attempts = 0\n");
    assert!(e.contains("lane[0].max_attempts = 0"), "{e}");
    let e = error("[[lane]]\nqueue = \"t\"\nurl = \"https://x\"\n");
    assert!(e.contains("lane[0].url"), "{e}");
    let e = error(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\ncommand = [\"a\"]\n[lane.docker]\nimage = \"i\"\n",
    );
    assert!(e.contains("not both"), "{e}");
    let e = error(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[[lane]]\nqueue = \"t\"\nurl = \"http://x:2\"\n",
    );
    assert!(e.contains("used twice"), "{e}");
}

#[test]
fn vllm_shorthand_and_default_ports() {
    let l = lanes(
        "[[lane]]\nqueue = \"think\"\nmodel = \"q\"\n[lane.vllm]\nmodel = \"Qwen/Qwen3-32B\"\nmax_num_seqs = 16\n\
         [[lane]]\nqueue = \"vision\"\n",
    );
    assert_eq!(l[0].url, "http://127.0.0.1:8002");
    assert_eq!(l[1].url, "http://127.0.0.1:8001");
    let cmd = l[0].command.clone().unwrap().join(" ");
    assert_eq!(
        cmd,
        "vllm serve Qwen/Qwen3-32B --host 127.0.0.1 --port {port} --gpu-memory-utilization 0.75 \
         --max-model-len 16384 --max-num-seqs 16 --max-num-batched-tokens 2048 \
         --enable-chunked-prefill --served-model-name q"
    );
    let e = error("[[lane]]\nqueue = \"ocr\"\n");
    assert!(e.contains("lane[0]") && e.contains("url"), "{e}");
    let e = error("[[lane]]\nqueue = \"think\"\ncommand = [\"x\"]\n[lane.vllm]\nmodel = \"m\"\n");
    assert!(e.contains("one of"), "{e}");
}

#[test]
fn docker_and_probe_sections() {
    let l = lanes(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://127.0.0.1:8002/\"\n[lane.docker]\nimage = \"horos/llama-server:local\"\n\
         cmd = [\"--port\", \"{port}\"]\n[lane.probe]\ninference_every = 3\n",
    );
    let lane = &l[0];
    assert_eq!(lane.port(), Some(8002));
    assert_eq!(lane.docker.as_ref().unwrap().container_port, 8000);
    assert_eq!(lane.probe.inference_every, 3);
    // The lane's defaults where the section is silent, horos-servers' for the keys it adds.
    assert_eq!(lane.probe.inference_timeout_ms, 30_000);
    assert_eq!(lane.probe.health_timeout_ms, 5000);
    let silent = lanes("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n");
    assert_eq!(
        (
            silent[0].probe.inference_every,
            silent[0].probe.inference_timeout_ms
        ),
        (1, 30_000)
    );
    let custom = lanes(
        "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[lane.probe]\nkind = \"embedding\"\nprompt = \"ping\"\n",
    );
    assert_eq!(
        custom[0].probe.kind,
        horos_servers::InferenceKind::Embedding
    );
    assert_eq!(custom[0].probe.prompt, "ping");
    let e = error("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\n[lane.probe]\nevery = 1\n");
    assert!(e.contains("every"), "{e}");
}

#[test]
fn allocator_section_needs_two_managed_lanes_and_sets_their_gpu() {
    let lane = |q: &str, port: u16| {
        format!(
            "[[lane]]\nqueue = \"{q}\"\nurl = \"http://127.0.0.1:{port}\"\ncommand = [\"srv\"]\n"
        )
    };
    let two = format!(
        "{}{}[allocator]\ngpu = 1\ntick_s = 2\n",
        lane("think", 8002),
        lane("vision", 8001)
    );
    let (l, a) = file(&two).unwrap();
    assert_eq!(l[0].gpus, [1]);
    assert_eq!((l[1].swap_in_s, l[1].job_s), (60.0, 1.0));
    let p = a.unwrap().policy(7.0);
    assert_eq!((p.tick_s, p.batch_overhead_s), (2.0, 7.0));
    let e = error(&format!("{}[allocator]\n", lane("think", 8002)));
    assert!(e.contains("at least two modes"), "{e}");
    let e = error(&two.replace("tick_s = 2", "tick_s = 0"));
    assert!(e.contains("allocator.tick_s"), "{e}");
    let e = error(&format!(
        "{}{}job_s = 0\n[allocator]\n",
        lane("think", 8002),
        lane("vision", 8001)
    ));
    assert!(e.contains("job_s"), "{e}");
}

#[test]
fn allocator_keys_are_gpu_allocs_settings() {
    let lanes = "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\ncommand = [\"a\"]\n\
                 [[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8001\"\ncommand = [\"b\"]\n";
    let (_, a) = file(&format!(
        "{lanes}[allocator]\nreversal_factor = 5\n[[allocator.anti_inversion]]\ntarget = \"vision\"\n\
         other = \"think\"\nmax_target_jobs = 1\nratio = 4\n"
    ))
    .unwrap();
    let p = a.unwrap().policy(7.0);
    assert_eq!((p.reversal_factor, p.batch_overhead_s), (5.0, 7.0));
    assert_eq!(p.anti_inversion[0].target, "vision");
    let (_, a) = file(&format!("{lanes}[allocator]\nbatch_overhead_s = 2\n")).unwrap();
    assert_eq!(a.unwrap().policy(7.0).batch_overhead_s, 2.0);
    let e = error(&format!("{lanes}[allocator]\nhorizon = 3\n"));
    assert!(e.contains("horizon"), "{e}");
}

#[test]
fn allocator_gpus_give_each_lane_an_instance_per_gpu() {
    let (l, a) = file(
        "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:8001/v1\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:8011\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"c\"\nurl = \"http://127.0.0.1:8021\"\n\
         [allocator]\ngpus = [2, 5, 7]\n",
    )
    .unwrap();
    let a = a.unwrap();
    assert_eq!(a.gpus, vec![2, 5, 7]);
    // Managed lanes in order, starting over; `c` is someone else's server.
    assert_eq!(a.initial_lanes(&l), vec!["a", "b", "a"]);
    assert_eq!(l[0].instance_url(0), "http://127.0.0.1:8001/v1");
    assert_eq!(l[0].instance_url(2), "http://127.0.0.1:8003/v1");
    assert_eq!(l[1].instance_url(1), "http://127.0.0.1:8012");
    assert_eq!(l[1].instance_name(0, 2), "b");
    assert_eq!(l[1].instance_name(2, 7), "b-gpu7");
    // Several GPUs: the allocator sets each instance's GPU, not the lane.
    assert!(l[0].gpus.is_empty());
    let (l, a) = file(
        "[[lane]]\nqueue = \"a\"\nurl = \"http://127.0.0.1:8001\"\ncommand = [\"x\"]\n\
         [[lane]]\nqueue = \"b\"\nurl = \"http://127.0.0.1:8011\"\ncommand = [\"x\"]\n\
         [allocator]\ngpu = 3\n",
    )
    .unwrap();
    assert_eq!(a.unwrap().gpus, vec![3]);
    assert_eq!(l[1].gpus, vec![3]);
    for (text, needle) in [
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
        let e = error(text);
        assert!(e.contains(needle), "{text}: {e}");
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
    // One lane and the pool are two modes; `initial` may name the pool.
    let one = format!(
        "{}[allocator]\ngpus = [0, 1]\ninitial = [\"think\", \"pool\"]\n\
         [allocator.pool]\nswap_in_s = 5\n",
        lane("think", 8002)
    );
    let (_, a) = file(&one).unwrap();
    let a = a.unwrap();
    let p = a.pool.unwrap();
    assert_eq!((p.swap_in_s, p.job_s), (5.0, 10.0));
    assert_eq!(a.initial, ["think", "pool"]);
    // The mode's name is taken.
    let e = error(&format!(
        "{}{}[allocator]\n[allocator.pool]\n",
        lane("think", 8002),
        lane("pool", 8004)
    ));
    assert!(e.contains("rename the lane"), "{e}");
    let e = error(&one.replace("swap_in_s = 5", "swap_in_s = -1"));
    assert!(e.contains("allocator.pool.swap_in_s"), "{e}");
}

/// Three lanes: `think` (a command), `vision` (a container), `ext` (someone else's server);
/// with `[allocator]` on GPUs 2 and 3 when `allocator`.
fn three_lanes(allocator: bool) -> (Vec<LaneSettings>, Option<AllocatorSettings>) {
    let mut text = String::from(
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\nmodel = \"m-think\"\n\
         command = [\"srv\"]\nvram_mb = 4000\n\
         [[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8101\"\nmodel = \"m-vis\"\n\
         [lane.docker]\nimage = \"img\"\ncontainer_port = 8000\n\
         [lane.probe]\nmodel = \"probe-model\"\n\
         [[lane]]\nqueue = \"ext\"\nurl = \"http://127.0.0.1:9000\"\nmodel = \"ext\"\n",
    );
    if allocator {
        text.push_str("[allocator]\ngpus = [2, 3]\n");
    }
    file(&text).unwrap()
}

#[test]
fn each_managed_lane_has_one_instance_per_allocator_gpu_the_initial_ones_started() {
    let (lanes, a) = three_lanes(true);
    let think = lanes[0].placements(a.as_ref(), &lanes);
    assert_eq!(
        think,
        vec![
            Placement {
                url: "http://127.0.0.1:8002".into(),
                name: "think".into(),
                port: 8002,
                gpus: vec![2],
                gpu: Some(2),
                starts: true,
            },
            Placement {
                url: "http://127.0.0.1:8003".into(),
                name: "think-gpu3".into(),
                port: 8003,
                gpus: vec![3],
                gpu: Some(3),
                starts: false,
            },
        ]
    );
    // The default assignment: the managed lanes in order, one per GPU.
    let vision = lanes[1].placements(a.as_ref(), &lanes);
    let started: Vec<(Option<u32>, bool)> = vision.iter().map(|p| (p.gpu, p.starts)).collect();
    assert_eq!(started, [(Some(2), false), (Some(3), true)]);
    assert_eq!(vision[1].name, "vision-gpu3");
    // Someone else's server: its one URL, on no allocator GPU.
    let ext = lanes[2].placements(a.as_ref(), &lanes);
    assert_eq!(
        (ext.len(), ext[0].port, ext[0].gpu, ext[0].name.as_str()),
        (1, 9000, None, "ext")
    );
    // Without [allocator]: the lane's one server as written, started.
    let (lanes, _) = three_lanes(false);
    let think = lanes[0].placements(None, &lanes);
    assert_eq!(
        think,
        vec![Placement {
            url: "http://127.0.0.1:8002".into(),
            name: "think".into(),
            port: 8002,
            gpus: vec![],
            gpu: None,
            starts: true,
        }]
    );
}

#[test]
fn a_placement_is_a_process_or_a_container_named_after_it() {
    let (lanes, a) = three_lanes(true);
    let run = std::path::Path::new("/run/horos");
    let p = &lanes[0].placements(a.as_ref(), &lanes)[1];
    let c = lanes[0].process_config(p, run).unwrap();
    assert_eq!(
        (c.name.as_str(), c.port, c.gpus.clone()),
        ("think-gpu3", 8003, vec![3])
    );
    assert_eq!(c.log_path, Some(run.join("think-gpu3.log")));
    assert_eq!(c.pidfile, Some(run.join("think-gpu3.pid")));
    assert_eq!(c.command, ["srv"]);
    // The probe asks for the lane's model unless [lane.probe] names another.
    assert_eq!(c.probe.model.as_deref(), Some("m-think"));
    assert_eq!(c.probe.inference_every, 1);
    assert!(lanes[0].docker_config(p, "own").is_none());
    let p = &lanes[1].placements(a.as_ref(), &lanes)[0];
    let d = lanes[1].docker_config(p, "own").unwrap();
    assert_eq!(
        (
            d.name.as_str(),
            d.image.as_str(),
            d.host_port,
            d.container_port
        ),
        ("vision", "img", 8101, 8000)
    );
    assert_eq!((d.owner.as_str(), d.gpus.clone()), ("own", vec![2]));
    assert_eq!(d.probe.model.as_deref(), Some("probe-model"));
    assert!(lanes[1].process_config(p, run).is_none());
    let p = &lanes[2].placements(a.as_ref(), &lanes)[0];
    assert!(lanes[2].process_config(p, run).is_none() && lanes[2].docker_config(p, "o").is_none());
}

#[tokio::test]
async fn a_managed_server_books_its_estimate_spread_over_its_gpus() {
    use horos_gpu_alloc::booking::LatePool;
    use horos_gpu_alloc::ledger::VramLedger;
    use horos_gpu_alloc::monitor::GpuMonitor;
    use horos_gpu_alloc::monitor::sim_fleet::SimFleet;
    use horos_server_control::Reservation;
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(VramLedger::open(dir.path().join("ledger.db")).unwrap());
    let fleet: Arc<dyn GpuMonitor> = Arc::new(SimFleet::with_sizes(&[24_000, 24_000]));
    ledger.register_from(fleet.as_ref()).unwrap();
    let room = LatePool::default();
    let lanes = lanes(
        "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\ncommand = [\"srv\"]\n\
         vram_mb = 9001\ngpus = [0, 1]\n\
         [[lane]]\nqueue = \"ext\"\nurl = \"http://127.0.0.1:9000\"\ngpus = [0]\nvram_mb = 10\n\
         [[lane]]\nqueue = \"nogpu\"\nurl = \"http://127.0.0.1:9100\"\ncommand = [\"srv\"]\n\
         vram_mb = 10\n",
    );
    let placed = |i: usize| lanes[i].placements(None, &lanes).remove(0);
    // No GPU read: the ledger does not know their sizes.
    assert!(lanes[0].booking(&placed(0), &ledger, None, &room).is_none());
    // Someone else's server, or a server on no GPU: nothing booked.
    assert!(
        lanes[1]
            .booking(&placed(1), &ledger, Some(&fleet), &room)
            .is_none()
    );
    assert!(
        lanes[2]
            .booking(&placed(2), &ledger, Some(&fleet), &room)
            .is_none()
    );
    let booking = lanes[0]
        .booking(&placed(0), &ledger, Some(&fleet), &room)
        .unwrap();
    assert!(
        ledger.leases().unwrap().is_empty(),
        "booked only when it starts"
    );
    booking.take().await.unwrap();
    let mut rows: Vec<(String, u32, u64)> = ledger
        .leases()
        .unwrap()
        .into_iter()
        .map(|r| (r.owner, r.gpu, r.mb))
        .collect();
    rows.sort();
    // 9001 MB over two GPUs: 4501 on each.
    assert_eq!(
        rows,
        [
            ("lane:think".into(), 0, 4501),
            ("lane:think".into(), 1, 4501)
        ]
    );
    booking.give_back().await;
    assert!(ledger.leases().unwrap().is_empty());
}

/// A server that starts and stops at once.
struct Idle;

#[async_trait::async_trait]
impl horos_server_control::ModeServer for Idle {
    async fn start(&self) -> Result<(), horos_server_control::ControlError> {
        Ok(())
    }
    async fn stop(&self) -> Result<(), horos_server_control::ControlError> {
        Ok(())
    }
}

/// The allocator's view of `lane` on `gpus` GPUs, its feeder gates open.
fn mode_lane(lane: &LaneSettings, gpus: usize) -> crate::ModeLane {
    use std::sync::Arc;
    crate::ModeLane {
        queue: lane.queue.clone(),
        instances: (0..gpus)
            .map(|_| crate::Instance {
                gate: Arc::new(horos_feeder::LaneGate::new(true)),
                server: Arc::new(Idle),
            })
            .collect(),
        swap_in_s: lane.swap_in_s,
        job_s: lane.job_s,
        batch_size: lane.batch_size,
        demand: None,
        keep_warm: None,
        sleep: horos_gpu_alloc::catalogue::SleepSpec::default(),
    }
}

#[test]
fn the_switched_lanes_models_are_one_upstream_whose_requests_are_their_demand() {
    use horos_server_control::{Gate, Readiness, UpstreamPool};

    let (lanes, a) = three_lanes(true);
    let mut switched: Vec<crate::ModeLane> = lanes[..2].iter().map(|l| mode_lane(l, 2)).collect();
    let feeder_gate = switched[0].instances[1].gate.clone();
    assert!(switched_lanes(&lanes, None, 10.0, &mut switched).is_none());
    assert!(switched.iter().all(|ml| ml.demand.is_none()));
    let up = switched_lanes(&lanes, a.as_ref(), 10.0, &mut switched).unwrap();
    let mut models = up.models();
    models.sort();
    assert_eq!(models, ["m-think", "m-vis"]);
    assert_ne!(up.readiness("m-think"), Readiness::Unknown);
    assert_eq!(up.readiness("ext"), Readiness::Unknown);
    assert!(
        switched
            .iter()
            .all(|ml| ml.demand.is_some() && ml.keep_warm.is_some())
    );
    // The executor's gate of an instance is the feeder's, seen through the requests' one.
    assert!(!std::sync::Arc::ptr_eq(
        &switched[0].instances[1].gate,
        &feeder_gate
    ));
    feeder_gate.close();
    assert!(!switched[0].instances[1].gate.is_open());
    // A switched lane without a model adds nothing; none at all: no upstream.
    let mut unnamed = lanes.clone();
    for l in &mut unnamed {
        l.model = None;
    }
    let mut switched: Vec<crate::ModeLane> = unnamed[..2].iter().map(|l| mode_lane(l, 2)).collect();
    assert!(switched_lanes(&unnamed, a.as_ref(), 10.0, &mut switched).is_none());
    assert!(switched.iter().all(|ml| ml.demand.is_none()));
}

#[test]
fn the_models_of_the_switched_lanes_are_known_by_lane() {
    let (lanes, _) = three_lanes(true);
    let mut switched: Vec<crate::ModeLane> = lanes[..2].iter().map(|l| mode_lane(l, 1)).collect();
    assert!(switches_model(&lanes, &switched, "m-vis"));
    // `ext` is served, but not switched.
    assert!(!switches_model(&lanes, &switched, "ext"));
    assert!(!switches_model(&lanes, &switched, "other"));
    let found: Vec<(String, String)> = lane_models(&lanes, &mut switched)
        .map(|(ml, l, model)| {
            assert_eq!(ml.queue, l.queue);
            (ml.queue.clone(), model.to_owned())
        })
        .collect();
    assert_eq!(
        found,
        [
            ("think".to_owned(), "m-think".to_owned()),
            ("vision".to_owned(), "m-vis".to_owned())
        ]
    );
}

#[test]
fn a_lanes_sleep_section_is_its_modes_sleep() {
    let text = "[[lane]]\nqueue = \"think\"\nurl = \"http://127.0.0.1:8002\"\n\
                command = [\"vllm\", \"serve\", \"m\", \"--enable-sleep-mode\"]\n\
                [lane.sleep]\ncan_sleep = true\nwake_l1_s = 0.8\n\
                [[lane]]\nqueue = \"vision\"\nurl = \"http://127.0.0.1:8101\"\n\
                command = [\"srv\"]\n[allocator]\nsleep = true\n";
    let (lanes, a) = file(text).unwrap();
    let ml = lanes[0].mode_lane(a.as_ref(), Vec::new()).unwrap();
    assert!(ml.sleep.can_sleep);
    assert_eq!(ml.sleep.wake_l1_s, Some(0.8));
    assert!(a.unwrap().policy(0.0).sleep);
    let e =
        error("[[lane]]\nqueue = \"think\"\ncommand = [\"srv\"]\n[lane.sleep]\ncan_slep = true\n");
    assert!(e.contains("can_slep"), "{e}");
}

#[test]
fn the_managed_lanes_are_the_executors_modes_the_initial_ones_by_index() {
    let (lanes, a) = three_lanes(true);
    let a = a.unwrap();
    let none = Vec::new;
    // Without an allocator, or someone else's server: not switched.
    assert!(lanes[0].mode_lane(None, none()).is_none());
    assert!(lanes[2].mode_lane(Some(&a), none()).is_none());
    let ml = lanes[1].mode_lane(Some(&a), none()).unwrap();
    assert_eq!(
        (ml.queue.as_str(), ml.swap_in_s, ml.job_s, ml.batch_size),
        ("vision", 60.0, 1.0, 16)
    );
    assert!(ml.demand.is_none() && ml.keep_warm.is_none());
    assert!(
        !ml.sleep.can_sleep,
        "a lane sleeps only when its file says so"
    );
    // The default assignment (think on GPU 2, vision on GPU 3) as indices of the modes given.
    let modes: Vec<crate::ModeLane> = [&lanes[1], &lanes[0]]
        .iter()
        .filter_map(|l| l.mode_lane(Some(&a), none()))
        .collect();
    assert_eq!(a.initial_modes(&lanes, &modes), [1, 0]);
    assert_eq!(a.initial_modes(&lanes, &modes[..1]), [0]);
    let c = a.modes_config(7.0);
    assert_eq!(c.gpus, [2, 3]);
    assert_eq!(c.policy.batch_overhead_s, 7.0);
    assert_eq!(c.retry_after_failure, std::time::Duration::from_secs(30));
    assert_eq!(c.initial_mode_age_s, 0.0);
}

#[test]
fn a_parked_lanes_model_serves_in_about_its_switch_time_and_a_tick() {
    let (mut lanes, a) = three_lanes(true);
    lanes[0].swap_in_s = 20.0;
    let tick = a.as_ref().unwrap().settings.tick_s;
    let mut switched: Vec<crate::ModeLane> = lanes[..2].iter().map(|l| mode_lane(l, 2)).collect();
    let up = switched_lanes(&lanes, a.as_ref(), 10.0, &mut switched).unwrap();
    // `ext` is not switched: it serves at once, and is not listed.
    assert_eq!(
        parked_load_s(&lanes, a.as_ref(), &up),
        [
            ("m-think".to_owned(), 20.0 + tick),
            ("m-vis".to_owned(), 60.0 + tick)
        ]
    );
}
