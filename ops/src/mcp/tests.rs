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
