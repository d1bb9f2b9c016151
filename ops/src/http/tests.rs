#![allow(clippy::unwrap_used)]
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::lanes::testing::lane_jobs;

async fn call(api: &LaneAdmin, method: Method, rest: &str, body: Value) -> (StatusCode, Value) {
    api.call(&method, rest, body).await
}

#[tokio::test]
async fn a_lane_job_is_submitted_followed_and_its_dead_letters_handled_through_the_routes() {
    let (_dir, jobs) = lane_jobs().await;
    let api = LaneAdmin(jobs.clone());
    assert_eq!(api.name(), "lanes");

    let (code, v) = call(
        &api,
        Method::POST,
        "/jobs",
        json!({"queue": "think", "prompt": "hello", "priority": 2}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{v}");
    assert_eq!(v["queue"], "think");
    let id = v["id"].as_i64().unwrap();
    // The same dedup key twice: one job, the second answer 200 and a duplicate.
    let keyed = json!({"queue": "think", "prompt": "hi", "dedup_key": "k", "delay_s": 60});
    let (code, first) = call(&api, Method::POST, "/jobs", keyed.clone()).await;
    assert_eq!(
        (code, &first["duplicate"]),
        (StatusCode::CREATED, &json!(false))
    );
    let (code, again) = call(&api, Method::POST, "/jobs", keyed).await;
    assert_eq!((code, &again["duplicate"]), (StatusCode::OK, &json!(true)));
    assert_eq!(first["id"], again["id"]);
    let (_, v) = call(
        &api,
        Method::GET,
        &format!("/jobs/{}", first["id"]),
        Value::Null,
    )
    .await;
    assert_eq!(v["state"], "delayed", "{v}");

    let (code, v) = call(&api, Method::GET, &format!("/jobs/{id}"), Value::Null).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(
        (v["state"].as_str(), v["attempts"].as_u64()),
        (Some("ready"), Some(0))
    );
    assert!(v.get("answer").is_none(), "{v}");

    let (code, v) = call(&api, Method::GET, "/stats", Value::Null).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["queues"][0]["ready"], 1, "{v}");

    // The job dies; it is listed, requeued, and a second requeue finds nothing.
    let queue = jobs.queue().blocking();
    let claimed = queue
        .poll_batch("think", 1, Duration::from_secs(30))
        .unwrap();
    queue.bury(claimed[0].lease, "poison pill").unwrap();
    let (code, v) = call(&api, Method::GET, "/dead/think", Value::Null).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["dead"][0]["id"], id, "{v}");
    assert_eq!(v["dead"][0]["reason"], "poison pill");
    let (_, v) = call(&api, Method::GET, "/dead/think", json!({"limit": 0})).await;
    assert_eq!(v["dead"], json!([]), "{v}");
    let requeue = format!("/dead/{id}/requeue");
    let (code, v) = call(&api, Method::POST, &requeue, Value::Null).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["requeued"], id);
    let (code, v) = call(&api, Method::POST, &requeue, Value::Null).await;
    assert_eq!(
        (code, &v["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("dead_job_not_found"))
    );

    // Dead again, then purged.
    let claimed = queue
        .poll_batch("think", 1, Duration::from_secs(30))
        .unwrap();
    queue.bury(claimed[0].lease, "still poison").unwrap();
    let (code, v) = call(&api, Method::DELETE, "/dead/think", Value::Null).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v, json!({"queue": "think", "purged": 1}));
}

#[tokio::test]
async fn mistakes_answer_the_openai_error_object_with_the_status_that_fits() {
    let (_dir, jobs) = lane_jobs().await;
    let api = LaneAdmin(jobs);
    let (code, v) = call(
        &api,
        Method::POST,
        "/jobs",
        json!({"queue": "nope", "prompt": "x"}),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(
        (&v["error"]["param"], &v["error"]["code"]),
        (&json!("queue"), &json!("unknown_lane"))
    );
    let (code, v) = call(
        &api,
        Method::POST,
        "/jobs",
        json!({"queue": "think", "prompt": "x", "colour": "red"}),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`"),
        "{v}"
    );
    let (code, v) = call(&api, Method::POST, "/jobs", json!({"queue": "think"})).await;
    assert_eq!(
        (code, &v["error"]["param"]),
        (StatusCode::BAD_REQUEST, &json!("prompt"))
    );
    for path in ["/jobs/424242", "/jobs/not-a-number"] {
        let (code, v) = call(&api, Method::GET, path, Value::Null).await;
        assert_eq!(
            (code, &v["error"]["code"]),
            (StatusCode::NOT_FOUND, &json!("job_not_found")),
            "{path}"
        );
    }
    // A path served under other methods is a 405 naming them; any other, a 404; never a
    // panic, whatever the path.
    let (code, v) = call(&api, Method::PUT, "/jobs", Value::Null).await;
    assert_eq!(
        (code, &v["error"]["code"]),
        (StatusCode::METHOD_NOT_ALLOWED, &json!("method_not_allowed"))
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("POST"),
        "{v}"
    );
    let long = "/x".repeat(5_000);
    for path in [
        "",
        "/",
        "/jobs/",
        "/jobs//x",
        "/dead",
        "/dead/requeue",
        "/dead//requeue",
        "/dead/1/2/requeue",
        "/stats/x",
        long.as_str(),
    ] {
        let (code, v) = call(&api, Method::POST, path, Value::Null).await;
        assert!(code.is_client_error(), "{path}: {code} {v}");
        assert!(v["error"]["message"].is_string(), "{path}: {v}");
    }
    // A queue's name that is not UTF-8 once decoded is a 400 naming it.
    let (code, v) = call(&api, Method::GET, "/dead/%FF", Value::Null).await;
    assert_eq!(
        (code, &v["error"]["param"]),
        (StatusCode::BAD_REQUEST, &json!("queue"))
    );
}

/// Mounted on a coordinator, the routes answer behind its admin key.
#[tokio::test]
async fn the_routes_are_served_by_a_coordinator_behind_its_admin_key() {
    use horos_coordinator::{Coordinator, CoordinatorConfig, UpstreamSet};

    let (_dir, jobs) = lane_jobs().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bind = listener.local_addr().unwrap();
    let config = CoordinatorConfig {
        bind,
        api_key: Some("adm".into()),
        ..CoordinatorConfig::default()
    };
    let coordinator = Coordinator::builder(config, Arc::new(UpstreamSet::new()))
        .admin_extension(Arc::new(LaneAdmin(jobs.clone())))
        .start(listener)
        .await
        .unwrap();
    let base = crate::admin::base_url(bind);
    let admin =
        crate::admin::AdminClient::new(&base, Some("adm".into()), Duration::from_secs(10)).unwrap();
    let v = admin.get_json("/api/v1/lanes/stats").await.unwrap();
    assert_eq!(v, json!({"queues": []}));
    let anonymous = crate::admin::AdminClient::new(&base, None, Duration::from_secs(10)).unwrap();
    let e = anonymous.get_json("/api/v1/lanes/stats").await.unwrap_err();
    assert!(
        matches!(e, OpsError::Coordinator { status: 401, .. }),
        "{e:?}"
    );
    coordinator.shutdown(Duration::from_secs(1)).await;
}
