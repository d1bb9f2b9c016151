//! The status page's "Nodes" section ([`NodesSection`]) over squeueha's node registry
//! ([`squeueha::nodes`]): the nodes sharing one database, read every [`HEARTBEAT`].

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

use horos_server_control::{StatusSection, html_escape, safe_href};
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

impl StatusSection for NodesSection {
    fn render_html(&self, out: &mut String) {
        let rows = self.rows().clone();
        let t = squeueha::now_ms();
        let _ = write!(out, "<h2>Nodes</h2>");
        if rows.is_empty() {
            out.push_str("<p>No node registered yet.</p>");
            return;
        }
        out.push_str(
            "<table><tr><th>Node</th><th>Host</th><th>PID</th><th>Lanes</th>\
             <th>Heartbeat</th><th>State</th><th>Status page</th></tr>",
        );
        for r in &rows {
            // Only an http(s) address becomes a link: a node registers its own URL, and a
            // `javascript:` one must stay text.
            let link = r
                .status_url
                .as_deref()
                .map_or(String::new(), |u| match safe_href(u) {
                    Some(href) => {
                        format!("<a href=\"{}\">{}</a>", html_escape(href), html_escape(u))
                    }
                    None => html_escape(u),
                });
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1} s ago</td>\
                 <td>{}</td><td>{}</td></tr>",
                html_escape(&r.name),
                html_escape(&r.host),
                r.pid,
                html_escape(&r.lanes.join(", ")),
                t.saturating_sub(r.heartbeat_ms) as f64 / 1000.0,
                r.state(t),
                link
            );
        }
        out.push_str("</table>");
    }

    fn to_json(&self) -> Option<(String, Value)> {
        let t = squeueha::now_ms();
        let rows: Vec<Value> = self.rows().iter().map(|r| r.to_json(t)).collect();
        Some(("nodes".into(), Value::Array(rows)))
    }
}
