#![allow(clippy::unwrap_used)]
use std::sync::Arc;
use std::time::Duration;

use horos_feeder::{FeederCounters, LaneGate};
use horos_server_control::StatusSection;
use serde_json::{Value, json};
use squeueha::AsyncQueue;
use squeueha::nodes::{NodeInfo, join};

use super::*;

#[test]
fn a_cell_is_a_value_without_quotes_and_null_is_empty() {
    assert_eq!(cell(&json!("a<b")), "a<b");
    assert_eq!(cell(&Value::Null), "");
    assert_eq!(cell(&json!(3)), "3");
    assert_eq!(cell(&json!(true)), "true");
}

#[test]
fn a_lane_of_someone_elses_server_shows_its_gate_and_no_fill_yet() {
    let section = LanesSection {
        rows: vec![LaneRow {
            queue: "think".into(),
            gpu: Some(1),
            url: "http://127.0.0.1:8001".into(),
            gate: Arc::new(LaneGate::new(false)),
            server: None,
            batch_size: 8,
        }],
        feeder: Arc::new(FeederCounters::default()),
        asleep: Asleep::default(),
    };
    let (key, lanes) = section.to_json().unwrap();
    assert_eq!(key, "lanes");
    assert_eq!(
        lanes[0],
        json!({"queue": "think", "gpu": 1, "url": "http://127.0.0.1:8001", "gate": "closed",
               "batch": "idle", "batch_fill": null, "server": "not ours", "restarts": 0,
               "failed_starts": 0, "last_error": null, "asleep": null})
    );
    let mut html = String::new();
    section.render_html(&mut html);
    assert!(html.starts_with("<h2>Lanes</h2>"), "{html}");
    assert!(
        html.contains("<tr><td>think</td><td>1</td><td>http://127.0.0.1:8001</td><td>closed</td>"),
        "{html}"
    );

    let empty = LanesSection {
        rows: Vec::new(),
        feeder: Arc::new(FeederCounters::default()),
        asleep: Asleep::default(),
    };
    let mut html = String::new();
    empty.render_html(&mut html);
    assert_eq!(html, "");
}

#[tokio::test]
async fn the_nodes_section_shows_the_registered_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let queue = AsyncQueue::open(dir.path().join("q.db"), squeueha::Config::default())
        .await
        .unwrap();
    let section = Arc::new(NodesSection::default());
    let mut html = String::new();
    section.render_html(&mut html);
    assert_eq!(html, "<h2>Nodes</h2><p>No node registered yet.</p>");

    let node = NodeInfo {
        name: "gpu-box".into(),
        host: "h<1>".into(),
        pid: std::process::id(),
        lanes: vec!["think".into(), "vision".into()],
        status_url: Some("http://h:8080/status".into()),
    };
    join(&queue, node).await.unwrap();
    // A node registers its own status URL: a script URL must stay text on the page.
    let evil = NodeInfo {
        name: "evil".into(),
        host: "e".into(),
        pid: std::process::id(),
        lanes: vec![],
        status_url: Some("javascript:alert(\"<x>\")".into()),
    };
    join(&queue, evil).await.unwrap();
    section.watch(queue.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let rows = loop {
        let (_, rows) = section.to_json().unwrap();
        if rows.as_array().is_some_and(|r| r.len() == 2) || tokio::time::Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let gpu_box = rows
        .as_array()
        .and_then(|r| r.iter().find(|n| n["name"] == "gpu-box"))
        .unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(gpu_box["state"], "running", "{rows}");
    let mut html = String::new();
    section.render_html(&mut html);
    assert!(
        html.contains("<td>gpu-box</td><td>h&lt;1&gt;</td>"),
        "{html}"
    );
    assert!(html.contains("<td>think, vision</td>"), "{html}");
    assert!(html.contains("<a href=\"http://h:8080/status\">"), "{html}");
    assert!(
        html.contains("<td>javascript:alert(&quot;&lt;x&gt;&quot;)</td>"),
        "{html}"
    );
    assert_eq!(html.matches("href=").count(), 1, "{html}");
}
