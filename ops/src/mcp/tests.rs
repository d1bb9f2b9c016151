#![allow(clippy::unwrap_used)]
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::documents::testing;
use crate::lanes::testing::lane_jobs;

/// No `[ingest]`: opening fails with this message.
struct NoDocuments;

#[async_trait]
impl OpenDocuments for NoDocuments {
    fn configured(&self) -> bool {
        false
    }
    async fn open(&self) -> Result<Documents, BoxError> {
        Err("no documents here".into())
    }
}

/// Documents already opened, handed over once.
struct Opened(Mutex<Option<Documents>>);

#[async_trait]
impl OpenDocuments for Opened {
    fn configured(&self) -> bool {
        true
    }
    async fn open(&self) -> Result<Documents, BoxError> {
        let docs = self.0.lock().unwrap().take();
        docs.ok_or_else(|| "opened twice".into())
    }
}

async fn call(tools: &ToolRegistry, name: &str, args: Value) -> Result<Value, ToolError> {
    tools.get(name).unwrap().call(args).await
}

#[tokio::test]
async fn the_tools_are_listed_with_closed_object_schemas() {
    let (_dir, jobs) = lane_jobs().await;
    let tools = McpTools::new(jobs, NoDocuments, Err("no coordinator".into()));
    let server = tools.server("horos-test", "1.0").unwrap();
    assert_eq!(server.tools().names().collect::<Vec<_>>(), TOOL_NAMES);
    assert_eq!(server.info().name, "horos-test");
    for name in TOOL_NAMES {
        let schema = server.tools().input_schema(name).unwrap();
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(schema["additionalProperties"], false, "{name}");
    }
}

/// `examples` of `T`'s schema deserialised into `T`: what the tool's call does first.
fn deserialises<T: DeserializeOwned>(example: &Value) -> Result<(), String> {
    serde_json::from_value::<T>(example.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Each tool's schema is derived from its arguments' type: the examples it shows the model
/// pass the server's check, deserialise into that type and name only the schema's properties;
/// and what the hand-written schemas said (required names, bounds, descriptions) is kept.
#[tokio::test]
async fn each_tools_schema_accepts_its_examples_and_keeps_its_requirements_and_bounds() {
    let (_dir, jobs) = lane_jobs().await;
    let tools = McpTools::new(jobs, NoDocuments, Err("none".into()))
        .registry()
        .unwrap();
    type Check = fn(&Value) -> Result<(), String>;
    let types: [(&str, Check); 9] = [
        ("submit", deserialises::<SubmitArgs>),
        ("status", deserialises::<StatusArgs>),
        ("stats", deserialises::<StatsArgs>),
        ("dead", deserialises::<DeadArgs>),
        ("ingest", deserialises::<IngestArgs>),
        ("search", deserialises::<SearchToolArgs>),
        ("document", deserialises::<DocumentArgs>),
        ("models", deserialises::<ModelsArgs>),
        ("answer", deserialises::<AskArgs>),
    ];
    assert_eq!(types.map(|(name, _)| name), TOOL_NAMES);
    for (name, deserialises) in types {
        let schema = tools.input_schema(name).unwrap();
        let examples = schema["examples"].as_array().unwrap();
        assert!(!examples.is_empty(), "{name} shows no example");
        for example in examples {
            assert_eq!(
                horos_mcp::validate_arguments(schema, example),
                Ok(()),
                "{name}: {example}"
            );
            deserialises(example).unwrap_or_else(|e| panic!("{name}: {example}: {e}"));
            for key in example.as_object().unwrap().keys() {
                assert!(
                    schema["properties"].get(key).is_some(),
                    "{name}: {key} of {example} is not in the schema"
                );
            }
        }
    }
    let schema = |name| tools.input_schema(name).unwrap();
    let required = |name| schema(name).get("required").cloned().unwrap_or(json!([]));
    assert_eq!(required("submit"), json!(["queue"]));
    assert_eq!(required("status"), json!(["id"]));
    assert_eq!(required("dead"), json!(["queue"]));
    assert_eq!(required("ingest"), json!(["path"]));
    assert_eq!(required("document"), json!(["id"]));
    assert_eq!(required("answer"), json!(["question", "model"]));
    for name in ["stats", "search", "models"] {
        assert_eq!(required(name), json!([]), "{name}");
    }
    let submit = &schema("submit")["properties"];
    assert_eq!(submit["max_tokens"]["minimum"], 1);
    assert_eq!(submit["dedup_key"]["minLength"], 1);
    assert_eq!(submit["delay_s"]["minimum"], 0);
    assert_eq!(submit["queue"]["description"], "The lane's queue.");
    assert!(
        !submit["dedup_key"]["description"]
            .as_str()
            .unwrap()
            .contains('[')
    );
    assert_eq!(schema("dead")["properties"]["limit"]["maximum"], 1000);
    assert_eq!(
        schema("ingest")["properties"]["collection"]["pattern"],
        "^[A-Za-z0-9._-]{1,64}$"
    );
    let search = &schema("search")["properties"];
    assert_eq!(search["k"]["maximum"], 100);
    assert_eq!(search["like"]["required"], json!(["document", "page"]));
    assert_eq!(search["like"]["properties"]["page"]["minimum"], 1);
    assert_eq!(
        search["mode"]["enum"],
        json!(["text", "vector", "visual", "hybrid", null])
    );
    let answer = &schema("answer")["properties"];
    assert_eq!(
        (
            answer["k"]["minimum"].clone(),
            answer["k"]["maximum"].clone()
        ),
        (json!(1), json!(20))
    );
    assert_eq!(answer["temperature"]["maximum"], 2);
    assert_eq!(answer["min_similarity"]["maximum"], 1);
    assert!(
        schema("models").to_string().contains("unload_all"),
        "{}",
        schema("models")
    );
    // The server's check refuses what the schema does not declare.
    assert!(
        horos_mcp::validate_arguments(schema("status"), &json!({"id": 1, "queue": "x"})).is_err()
    );
}

#[tokio::test]
async fn a_job_is_submitted_followed_counted_and_its_dead_letter_requeued() {
    let (_dir, jobs) = lane_jobs().await;
    let registry = McpTools::new(jobs.clone(), NoDocuments, Err("none".into()))
        .registry()
        .unwrap();

    let v = call(
        &registry,
        "submit",
        json!({"queue": "think", "prompt": "hi"}),
    )
    .await
    .unwrap();
    assert_eq!(v["queue"], "think", "{v}");
    let id = v["id"].as_i64().unwrap();
    let v = call(&registry, "status", json!({ "id": id }))
        .await
        .unwrap();
    assert_eq!(v["state"], "ready", "{v}");
    let v = call(&registry, "stats", json!({})).await.unwrap();
    assert_eq!(v["queues"][0]["ready"], 1, "{v}");

    let queue = jobs.queue().blocking();
    let claimed = queue
        .poll_batch("think", 1, Duration::from_secs(30))
        .unwrap();
    queue.bury(claimed[0].lease, "poison pill").unwrap();
    let v = call(&registry, "dead", json!({"queue": "think"}))
        .await
        .unwrap();
    assert_eq!(v["dead"][0]["reason"], "poison pill", "{v}");
    let v = call(&registry, "dead", json!({"queue": "think", "requeue": id}))
        .await
        .unwrap();
    assert_eq!(v["requeued"], id, "{v}");

    // The caller's mistakes are argument errors; a missing job is a failure.
    let e = call(&registry, "submit", json!({"queue": "nope", "prompt": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ToolError::InvalidArguments(ref m) if m.contains("nope")),
        "{e:?}"
    );
    let e = call(&registry, "submit", json!({"queue": "think", "bogus": 1}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e:?}");
    let e = call(&registry, "status", json!({"id": 999}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Failed(_)), "{e:?}");
}

#[tokio::test]
async fn without_documents_or_a_coordinator_the_tools_say_why() {
    let (_dir, jobs) = lane_jobs().await;
    let registry = McpTools::new(jobs, NoDocuments, Err("no [coordinator]".into()))
        .registry()
        .unwrap();
    for (tool, args) in [
        ("ingest", json!({"path": "a.pdf"})),
        ("search", json!({"query": "x"})),
        ("document", json!({"id": 1})),
    ] {
        let e = call(&registry, tool, args).await.unwrap_err();
        assert_eq!(e, ToolError::Failed("no documents here".into()), "{tool}");
    }
    let e = call(&registry, "models", json!({})).await.unwrap_err();
    assert_eq!(e, ToolError::Failed("no [coordinator]".into()));
    // Without a pipeline, an ingest stage's dead letters are read in the lanes' database.
    let v = call(&registry, "dead", json!({"queue": "pdf_to_images"}))
        .await
        .unwrap();
    assert_eq!(v["dead"], json!([]), "{v}");
}

#[tokio::test]
async fn documents_are_opened_once_ingested_from_the_inbox_and_reported() {
    let (_lanes_dir, jobs) = lane_jobs().await;
    let (dir, docs) = testing::documents().await;
    let opener = Opened(Mutex::new(Some(docs)));
    let registry = McpTools::new(jobs, opener, Err("none".into()))
        .registry()
        .unwrap();

    testing::pdf(dir.path(), "a.pdf", "a");
    let v = call(&registry, "ingest", json!({"path": "a.pdf"}))
        .await
        .unwrap();
    let id = v["document"].as_i64().unwrap();
    let v = call(&registry, "document", json!({ "id": id }))
        .await
        .unwrap();
    assert_eq!(v["pages"], 0, "{v}");
    let v = call(&registry, "search", json!({"query": "nothing"}))
        .await
        .unwrap();
    assert_eq!(v["hits"], json!([]), "{v}");
    // An image or a page as the question: reach the look-alike operations, whose refusals
    // (a page never rendered, bytes that are no image) are the caller's to fix; one question
    // only.
    for (bad, says) in [
        (json!({"like": {"document": id, "page": 1}}), "page"),
        (json!({"image": "bm90IGFuIGltYWdl"}), "image"),
        (json!({"image": "%%%"}), "base64"),
        (json!({"query": "x", "image": "bm90IGFuIGltYWdl"}), "image"),
        (
            json!({"like": {"document": id, "page": 1}, "mode": "text"}),
            "one of",
        ),
        (json!({}), "one of"),
    ] {
        let e = call(&registry, "search", bad.clone()).await.unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments(_)), "{bad}: {e:?}");
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }

    // A path out of the inbox is the caller's mistake.
    let e = call(&registry, "ingest", json!({"path": "../outside.pdf"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e:?}");

    // Into a collection (who may read it); a name that is not one is the caller's mistake.
    testing::pdf(dir.path(), "b.pdf", "b");
    let v = call(
        &registry,
        "ingest",
        json!({"path": "b.pdf", "collection": "beta"}),
    )
    .await
    .unwrap();
    assert_eq!(
        (&v["status"], &v["collection"]),
        (&json!("queued"), &json!("beta")),
        "{v}"
    );
    let e = call(
        &registry,
        "ingest",
        json!({"path": "b.pdf", "collection": "a/b"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e:?}");
}

/// One page about HRESULT codes, for any question but one holding "zyxqv".
struct OnePage;

#[async_trait]
impl horos_server_control::Searcher for OnePage {
    async fn search(
        &self,
        _: &str,
        _: usize,
        _: &Value,
        _: &horos_server_control::Collections,
    ) -> Result<Value, horos_server_control::SearchError> {
        Ok(json!([]))
    }
    async fn passages(
        &self,
        q: &horos_server_control::PassageQuery,
    ) -> Result<Vec<horos_server_control::Passage>, horos_server_control::SearchError> {
        Ok(if q.question.contains("zyxqv") {
            Vec::new()
        } else {
            vec![horos_server_control::Passage::new(
                1,
                18,
                0.5,
                "COM interfaces return an HRESULT error code.",
            )]
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_asks_the_coordinator_and_cites_the_page() {
    use horos_coordinator::{Coordinator, CoordinatorConfig, StaticUpstream};
    use horos_fakeai::{FakeConfig, FakeServer, Reply};
    let up = FakeServer::start(FakeConfig {
        reply: Reply::Fixed("COM interfaces return an HRESULT error code.".into()),
        ..FakeConfig::default()
    })
    .await
    .unwrap();
    let coordinator = Coordinator::builder(
        CoordinatorConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..CoordinatorConfig::default()
        },
        Arc::new(StaticUpstream::new().with("m", up.url())),
    )
    .searcher(Arc::new(OnePage))
    .bind()
    .await
    .unwrap();
    let (_dir, jobs) = lane_jobs().await;

    // Without the data plane: a tool error saying why.
    let none = McpTools::new(jobs.clone(), NoDocuments, Err("none".into()))
        .registry()
        .unwrap();
    let e = call(&none, "answer", json!({"question": "q", "model": "m"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("data plane"), "{e}");

    let remote = Remote::new(&coordinator.url(), None, Duration::from_secs(10)).unwrap();
    let tools = McpTools::new(jobs, NoDocuments, Err("none".into()))
        .with_data_plane(Ok(remote))
        .registry()
        .unwrap();
    let v = call(
        &tools,
        "answer",
        json!({"question": "How are errors reported?", "model": "m"}),
    )
    .await
    .unwrap();
    assert_eq!(v["supported"], true, "{v}");
    assert_eq!(v["citations"][0]["page"], 18, "{v}");
    assert_eq!(
        v["answer"], "COM interfaces return an HRESULT error code. [1]",
        "{v}"
    );
    let v = call(&tools, "answer", json!({"question": "zyxqv", "model": "m"}))
        .await
        .unwrap();
    assert_eq!(v["supported"], false, "{v}");
    assert_eq!(
        up.requests().len(),
        1,
        "one model call: the supported question's"
    );
    // A mistake in the arguments is the model's to fix.
    let e = call(&tools, "answer", json!({"question": "q"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments(_)), "{e:?}");
}
