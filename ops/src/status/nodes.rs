//! The status page's "Nodes" section ([`NodesSection`]) over squeueha's node registry
//! ([`squeueha::nodes`]): the nodes sharing one database, read every [`HEARTBEAT`].

use std::sync::{Arc, Mutex, MutexGuard};

use horos_server_control::{StatusSection, safe_href};
use maud::{Markup, Render, html};
use serde_json::Value;
use squeueha::AsyncQueue;
use squeueha::nodes::{HEARTBEAT, NodeRow, list_all};

/// The status page's "Nodes" section: the table read every [`HEARTBEAT`] on a blocking thread.
#[derive(Default)]
pub struct NodesSection {
    rows: Mutex<Vec<NodeRow>>,
}

impl NodesSection {
    fn rows(&self) -> MutexGuard<'_, Vec<NodeRow>> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the table now and every [`HEARTBEAT`] while the section is in use.
    pub fn watch(self: &Arc<Self>, queue: AsyncQueue) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(me) = weak.upgrade() {
                if let Ok(rows) = list_all(&queue).await {
                    *me.rows() = rows;
                }
                drop(me);
                tokio::time::sleep(HEARTBEAT).await;
            }
        });
    }
}

/// A node's status page: a link when its address is http(s), else text. A node registers its
/// own URL, and a `javascript:` one must stay text.
fn status_link(url: &str) -> Markup {
    html! {
        @if let Some(href) = safe_href(url) {
            a href=(href) { (url) }
        } @else {
            (url)
        }
    }
}

impl StatusSection for NodesSection {
    fn render_html(&self, out: &mut String) {
        let rows = self.rows().clone();
        let t = squeueha::now_ms();
        html! {
            h2 { "Nodes" }
            @if rows.is_empty() {
                p { "No node registered yet." }
            } @else {
                table {
                    tr {
                        th { "Node" } th { "Host" } th { "PID" } th { "Lanes" }
                        th { "Heartbeat" } th { "State" } th { "Status page" }
                    }
                    @for r in &rows {
                        tr {
                            td { (r.name) }
                            td { (r.host) }
                            td { (r.pid) }
                            td { (r.lanes.join(", ")) }
                            td {
                                (format!("{:.1}", t.saturating_sub(r.heartbeat_ms) as f64 / 1000.0))
                                " s ago"
                            }
                            td { (r.state(t)) }
                            td {
                                @if let Some(url) = r.status_url.as_deref() { (status_link(url)) }
                            }
                        }
                    }
                }
            }
        }
        .render_to(out);
    }

    fn to_json(&self) -> Option<(String, Value)> {
        let t = squeueha::now_ms();
        let rows: Vec<Value> = self.rows().iter().map(|r| r.to_json(t)).collect();
        Some(("nodes".into(), Value::Array(rows)))
    }
}
