//! The configuration's parsing and checks.

#![allow(clippy::unwrap_used)]
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
    let e = Config::parse("[feeder]\ncooldown_s = \"ten\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cooldown_s"), "{e}");
    // A section's check, named through the file (the lanes' own tests are horos-modes').
    let e = Config::parse("[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nbatch_size = 0\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "<config>: lane[0].batch_size = 0 is not between 1 and 1024"
    );
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
fn the_coordinator_section_is_the_coordinators_settings() {
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
}

#[test]
fn coordinator_upstreams_beside_a_lane() {
    let c = Config::parse(
        "[coordinator]\nbind = \"127.0.0.1:9999\"\n[[coordinator.model]]\nname = \"m\"\nurl = \"http://127.0.0.1:1\"\n\
         [[lane]]\nqueue = \"t\"\nurl = \"http://127.0.0.1:8002/\"\n[lane.docker]\nimage = \"horos/llama-server:local\"\n\
         cmd = [\"--port\", \"{port}\"]\n[lane.probe]\ninference_every = 3\n",
    )
    .unwrap();
    // The lane is horos-modes' (its own tests are there); the coordinator's upstreams beside it.
    assert_eq!(c.lanes[0].port(), Some(8002));
    assert_eq!(c.lanes[0].probe.inference_every, 3);
    let co = c.coordinator.unwrap();
    assert_eq!(co.settings.bind.port(), 9999);
    assert_eq!(co.models[0].name, "m");
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
    assert_eq!(own.server.kind().unwrap().name, "docker");
    assert_eq!(own.server.paths().unwrap(), ["/v1/embeddings"]);
    let s = section.settings;
    assert_eq!(s.manifest["smollm2"].template.as_deref(), Some("chatml"));
    assert_eq!(
        s.manifest["smollm2"].completion_api,
        horos_coordinator::CompletionApi::Llama
    );
    assert_eq!(s.manifest["qwen2.5-7b"].thinking, Some(false));
    assert!(s.manifest["qwen2.5-vl-7b"].vision && !s.manifest["qwen2.5-7b"].vision);
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

/// `template = "model"`: the entry reads its template from the weights of the pooled model of
/// its name (relative to the file, as the pool's); refused without one, naming the key.
#[test]
fn template_model_reads_the_pooled_models_weights() {
    let pool = "[[coordinator.pool.model]]\nname = \"m\"\nbackend = \"llama-server\"\n\
                weights = \"models/m.gguf\"\n";
    let text =
        format!("[coordinator.manifest.m]\ntemplate = \"model\"\n[coordinator.pool]\n{pool}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("horos.toml");
    std::fs::write(&path, &text).unwrap();
    let c = Config::load(&path).unwrap();
    let co = c.coordinator.unwrap();
    let entry = &co.settings.manifest["m"];
    assert!(entry.wants_model_template());
    let weights = dir.path().join("models/m.gguf");
    assert_eq!(entry.weights.as_deref(), Some(weights.as_path()));
    assert_eq!(co.pool.unwrap().models[0].weights, Some(weights));
    // Another entry's template is its own: it is given no weights.
    let other = text.replace("template = \"model\"", "template = \"chatml\"");
    let c = Config::parse(&other).unwrap();
    assert_eq!(c.coordinator.unwrap().settings.manifest["m"].weights, None);

    let e = |text: &str| Config::parse(text).unwrap_err().to_string();
    let alone = e("[coordinator.manifest.m]\ntemplate = \"model\"\n");
    assert!(
        alone
            .contains("coordinator.manifest.m.template = \"model\": no [[coordinator.pool.model]]"),
        "{alone}"
    );
    let other_name = e(&text.replace("name = \"m\"", "name = \"n\""));
    assert!(other_name.contains("is named `m`"), "{other_name}");
    let voice = e(&text.replace(
        "backend = \"llama-server\"\nweights = \"models/m.gguf\"",
        "backend = \"tts\"\nweights = \"en-us\"",
    ));
    assert!(
        voice.contains(
            "coordinator.manifest.m.template = \"model\": the pooled model `m` has no weights path"
        ),
        "{voice}"
    );
    let both = e(&text.replace(
        "template = \"model\"",
        "template = \"model\"\ntemplate_file = \"t.jinja\"",
    ));
    assert!(
        both.contains("coordinator.manifest.m.template = both template and template_file"),
        "{both}"
    );
}

#[test]
fn database_takes_its_password_from_the_environment() {
    let env = &|v: &str| (v == "PGPASS").then(|| "s3cr3t".to_owned());
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
    assert_eq!(
        settings
            .admin_key(env)
            .unwrap()
            .as_ref()
            .map(|k| k.expose()),
        Some("adm1n")
    );
    let e = settings.admin_key(|_| None).unwrap_err().to_string();
    assert!(e.contains("HOROS_TEST_ADMIN_KEY"), "{e}");
    let both = Config::parse("[coordinator]\napi_key = \"k\"\napi_key_env = \"V\"\n");
    assert!(both.unwrap_err().to_string().contains("api_key_env"));
}

/// The checks between sections: a model served twice (by the pool, a lane, a fixed upstream),
/// one ledger, `[allocator.pool]` and `[coordinator.pool]`, a lane that fits a GPU; and the
/// sections' own checks reached through the file (a pooled model's server checked with the
/// pool's weights, the pool's ranges).
#[test]
fn checks_between_sections() {
    let base = "[coordinator]\n[coordinator.pool]\nmemory_mb = 1000\n\
                [[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"srv\", \"--port\", \"{port}\"]\n\
                category = \"embedding\"\nstay_warm_s = 5\n";
    let c = Config::parse(base).unwrap();
    let p = c.coordinator.clone().unwrap().pool.unwrap();
    assert_eq!((p.ledger.as_ref(), p.gpus), (None, 1));
    assert_eq!(c.ledger_path(), PathBuf::from("vram-ledger.db"));
    assert_eq!(
        p.models[0].category,
        horos_gpu_alloc::pool::Category::Embedding
    );
    assert_eq!(p.models[0].server.command, ["srv", "--port", "{port}"]);
    let e = |text: &str| Config::parse(text).unwrap_err().to_string();
    let twice = format!("{base}[[coordinator.pool.model]]\nname = \"a\"\ncommand = [\"x\"]\n");
    assert!(e(&twice).contains("served twice"), "{}", e(&twice));
    let lane = "[[lane]]\nqueue = \"t\"\nurl = \"http://x:1\"\nmodel = \"a\"\n";
    let by_lane = e(&format!("{base}{lane}"));
    assert!(
        by_lane.contains("coordinator.pool.model[0]: `a` is served twice"),
        "{by_lane}"
    );
    let range = e(&base.replace("memory_mb = 1000", "port_min = 9000\nport_max = 8000"));
    assert!(range.contains("coordinator.pool.port_min"), "{range}");
    let no_weights = e(&base.replace(
        "command = [\"srv\", \"--port\", \"{port}\"]",
        "backend = \"vllm\"",
    ));
    assert!(
        no_weights.contains("coordinator.pool.model[0]: backend `vllm` needs weights"),
        "{no_weights}"
    );
    let c =
        Config::parse(&base.replace("category", "backend = \"vllm\"\nweights = \"w\"\ncategory"));
    assert!(
        c.unwrap_err()
            .to_string()
            .contains("either a command or a backend")
    );
    let differ =
        e("[gpus]\nledger = \"a.db\"\n[coordinator.pool]\nmemory_mb = 1\nledger = \"b.db\"\n");
    assert!(differ.contains("differ"), "{differ}");

    let lane = |q: &str, port: u16| {
        format!(
            "[[lane]]\nqueue = \"{q}\"\nurl = \"http://127.0.0.1:{port}\"\n\
             command = [\"srv\"]\nvram_mb = 600\n"
        )
    };
    let pool = "[coordinator]\n[coordinator.pool]\nmemory_mb = 1000\n\
                [[coordinator.pool.model]]\nname = \"m\"\ncommand = [\"srv\"]\nvram_mb = 1500\n";
    let one = format!(
        "[allocator]\ngpus = [0, 1]\ninitial = [\"think\", \"pool\"]\n\
         [allocator.pool]\nswap_in_s = 5\n{}{pool}",
        lane("think", 8002)
    );
    Config::parse(&one).unwrap();
    // Without [coordinator.pool] there is nothing to give a GPU to.
    let no_pool = e(&format!(
        "[allocator]\n[allocator.pool]\n{}{}",
        lane("think", 8002),
        lane("vision", 8004)
    ));
    assert!(no_pool.contains("needs [coordinator.pool]"), "{no_pool}");
    // A lane larger than one simulated GPU could never start under [allocator].
    let too_big = e(&format!(
        "[gpus]\nsource = \"simulated\"\nsimulated_mb = [1000, 500]\n{one}"
    ));
    assert!(
        too_big.contains("more than a GPU") && too_big.contains("[allocator.pool]"),
        "{too_big}"
    );
    // One GPU under [allocator]: the managed lanes run on it.
    let c = Config::parse(&format!(
        "[allocator]\ngpu = 1\n{}{}",
        lane("a", 8002),
        lane("b", 8001)
    ))
    .unwrap();
    assert_eq!(
        (&c.lanes[0].gpus[..], &c.lanes[1].gpus[..]),
        (&[1][..], &[1][..])
    );
    let sim = e("[gpus]\nsource = \"simulated\"\n");
    assert!(sim.contains("gpus.simulated_mb"), "{sim}");
    let ingest = e(
        "[ingest]\ninbox = \"in\"\nembeddings_url = \"http://127.0.0.1:1\"\nembeddings_model = \"m\"\ndpi = 0.5\n",
    );
    assert!(ingest.contains("ingest.dpi"), "{ingest}");
    let node = e("[node]\nname = \"a b\"\n");
    assert!(node.starts_with("<config>: node.name `a b`"), "{node}");
}

#[test]
fn queue_section_sets_retention_and_busy_backoff_and_names_a_bad_key() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.queue, QueueSection::default());
    assert_eq!(c.queue.squeueha_config().retain_done, None);
    assert_eq!(
        c.queue.results_retention(),
        std::time::Duration::from_secs(7 * 24 * 3600)
    );
    let c = Config::parse(
        "[queue]\nretain_done_s = 3600\nresults_retention_s = 600\nbusy_backoff_ms = [10, 20]\n",
    )
    .unwrap();
    let q = c.queue.squeueha_config();
    assert_eq!(q.retain_done, Some(std::time::Duration::from_secs(3600)));
    assert_eq!(q.busy_backoff.len(), 2);
    assert_eq!(c.queue.results_retention().as_secs(), 600);
    assert_eq!(c.queue.results_purge_every().as_secs(), 60);
    for (text, key) in [
        ("[queue]\nretain_done_s = -1\n", "queue.retain_done_s = -1"),
        (
            "[queue]\nresults_retention_s = 1e12\n",
            "queue.results_retention_s",
        ),
        ("[queue]\nbusy_backoff_ms = []\n", "queue.busy_backoff_ms"),
        (
            "[queue]\nbusy_backoff_ms = [0]\n",
            "queue.busy_backoff_ms: 0",
        ),
        ("[queue]\nretain_done = 1\n", "retain_done"),
    ] {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

/// `${VAR}` in the servers' commands and model paths is read through the environment; an
/// unset one is named with its key.
#[test]
fn servers_commands_and_paths_take_variables_from_the_environment() {
    let env = &|v: &str| match v {
        "BIN" => Some("/opt/llama-server".to_owned()),
        "MODELS" => Some("/m".to_owned()),
        _ => None,
    };
    let text = "[[lane]]\nqueue = \"chat\"\nurl = \"http://127.0.0.1:8211\"\n\
                command = [\"${BIN}\", \"-m\", \"${MODELS}/a.gguf\"]\n\
                weights = \"${MODELS}/a.gguf\"\n\
                [coordinator.pool]\nmemory_mb = 100\n\
                [[coordinator.pool.model]]\nname = \"e\"\nbackend = \"llama-server\"\n\
                binary = \"${BIN}\"\nweights = \"${MODELS}/e.gguf\"\n";
    let c = Config::parse_with(text, env).unwrap();
    assert_eq!(
        c.lanes[0].command.as_deref().unwrap(),
        ["/opt/llama-server", "-m", "/m/a.gguf"]
    );
    assert_eq!(c.lanes[0].weights.as_deref(), Some(Path::new("/m/a.gguf")));
    let m = &c.coordinator.unwrap().pool.unwrap().models[0];
    assert_eq!(m.server.binary.as_deref(), Some("/opt/llama-server"));
    assert_eq!(m.weights.as_deref(), Some(Path::new("/m/e.gguf")));
    let e = Config::parse_with(&text.replace("${BIN}\", \"-m", "${NOPE}\", \"-m"), env)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lane[0].command[0]") && e.contains("NOPE"),
        "{e}"
    );
}

#[test]
fn a_parse_error_names_the_line_but_never_shows_the_file() {
    let e = Config::parse("database = \"jobs.db\"\n[coordinator]\napi_key = \"sk-secret\" oops\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 3"), "{e}");
    assert!(!e.contains("sk-secret"), "{e}");
}
