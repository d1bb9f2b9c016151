//! The nodes sharing one database: a registry beside [`leader`](crate::Leadership) and
//! [`named`](crate::NamedQueue). Each node registers its row (name, host, pid, lanes, status
//! page) and renews its heartbeat every [`HEARTBEAT`]; a node whose heartbeat is older than
//! [`SILENT_AFTER`] is silent (crashed, or cut off from the database), one that stopped cleanly
//! is stopped. The table lives in the queue's database: a SQLite file (one node) or PostgreSQL
//! (several), created by the migrator on the first registration.

use std::time::Duration;

use serde_json::{Value, json};

#[cfg(feature = "tokio")]
use crate::AsyncQueue;
use crate::{Migration, Migrations, Queue, Row, params};

/// How often a node renews its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A heartbeat older than this: the node is silent.
pub const SILENT_AFTER: Duration = Duration::from_secs(10);

/// The registry's table (namespace `horos_nodes` of the migrator).
const MIGRATIONS: Migrations = Migrations::new(
    "horos_nodes",
    &[Migration {
        version: 1,
        sql: "CREATE TABLE horos_nodes (
                  name TEXT PRIMARY KEY,
                  host TEXT NOT NULL,
                  pid INTEGER NOT NULL,
                  lanes TEXT NOT NULL,
                  status_url TEXT,
                  started_ms INTEGER NOT NULL,
                  heartbeat_ms INTEGER NOT NULL,
                  stopped_ms INTEGER
              )",
    }],
)
.with_postgres(&[Migration {
    version: 1,
    sql: "CREATE TABLE horos_nodes (
              name TEXT PRIMARY KEY,
              host TEXT NOT NULL,
              pid BIGINT NOT NULL,
              lanes TEXT NOT NULL,
              status_url TEXT,
              started_ms BIGINT NOT NULL,
              heartbeat_ms BIGINT NOT NULL,
              stopped_ms BIGINT
          )",
}]);

/// What a node says of itself when it registers.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Its name (`[node] name`, or the host name).
    pub name: String,
    /// The machine.
    pub host: String,
    /// The `run` process.
    pub pid: u32,
    /// The lanes (queues) it feeds.
    pub lanes: Vec<String>,
    /// Its status page, when it serves the coordinator.
    pub status_url: Option<String>,
}

/// A node as the table has it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    /// Its name.
    pub name: String,
    /// The machine.
    pub host: String,
    /// The `run` process.
    pub pid: i64,
    /// The lanes it feeds.
    pub lanes: Vec<String>,
    /// Its status page.
    pub status_url: Option<String>,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// Its last heartbeat.
    pub heartbeat_ms: i64,
    /// When it stopped cleanly.
    pub stopped_ms: Option<i64>,
}

impl NodeRow {
    fn from_row(r: &Row) -> crate::Result<NodeRow> {
        let lanes: String = r.get(3)?;
        Ok(NodeRow {
            name: r.get(0)?,
            host: r.get(1)?,
            pid: r.get(2)?,
            lanes: serde_json::from_str(&lanes).unwrap_or_default(),
            status_url: r.get(4)?,
            started_ms: r.get(5)?,
            heartbeat_ms: r.get(6)?,
            stopped_ms: r.get(7)?,
        })
    }

    /// `running`, `silent` (no heartbeat for [`SILENT_AFTER`]) or `stopped`.
    pub fn state(&self, now_ms: i64) -> &'static str {
        if self.stopped_ms.is_some() {
            "stopped"
        } else if now_ms.saturating_sub(self.heartbeat_ms) > SILENT_AFTER.as_millis() as i64 {
            "silent"
        } else {
            "running"
        }
    }

    /// The row as `nodes --json` and the status API show it.
    pub fn to_json(&self, now_ms: i64) -> Value {
        json!({
            "name": self.name, "host": self.host, "pid": self.pid, "lanes": self.lanes,
            "status_url": self.status_url, "started_ms": self.started_ms,
            "heartbeat_ms": self.heartbeat_ms, "stopped_ms": self.stopped_ms,
            "heartbeat_age_s": now_ms.saturating_sub(self.heartbeat_ms) as f64 / 1000.0,
            "state": self.state(now_ms),
        })
    }
}

/// Why a node cannot register.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Another running node has the name.
    #[error(
        "node name `{name}` is taken by a running node ({host}, pid {pid}, heartbeat {age_s:.1} s ago): \
         give this one another [node] name"
    )]
    NameTaken {
        /// The name.
        name: String,
        /// The other node's machine.
        host: String,
        /// Its process.
        pid: i64,
        /// How old its heartbeat is.
        age_s: f64,
    },
    /// The database.
    #[error("nodes table: {0}")]
    Queue(#[from] crate::Error),
    /// The blocking task failed.
    #[error("nodes table: {0}")]
    Task(String),
}

/// Runs `f` on the blocking pool: PostgreSQL's driver must not block a runtime thread.
#[cfg(feature = "tokio")]
async fn off_runtime<T: Send + 'static>(
    queue: &AsyncQueue,
    f: impl FnOnce(&Queue) -> Result<T, NodeError> + Send + 'static,
) -> Result<T, NodeError> {
    let q = queue.blocking().clone();
    tokio::task::spawn_blocking(move || f(&q))
        .await
        .map_err(|e| NodeError::Task(e.to_string()))?
}

/// [`beat`] from async code.
#[cfg(feature = "tokio")]
pub async fn heartbeat(queue: &AsyncQueue, name: &str, stopped: bool) -> Result<u64, NodeError> {
    let name = name.to_owned();
    off_runtime(queue, move |q| Ok(beat(q, &name, stopped)?)).await
}

/// [`register`] from async code.
#[cfg(feature = "tokio")]
pub async fn join(queue: &AsyncQueue, info: NodeInfo) -> Result<(), NodeError> {
    off_runtime(queue, move |q| register(q, &info)).await
}

/// [`list`] from async code.
#[cfg(feature = "tokio")]
pub async fn list_all(queue: &AsyncQueue) -> Result<Vec<NodeRow>, NodeError> {
    off_runtime(queue, |q| Ok(list(q)?)).await
}

/// Renews node `name`'s heartbeat every [`HEARTBEAT`] until `stop` turns true, then marks it
/// stopped (a task on the current tokio runtime). A failed beat (the database unreachable) is
/// logged (`tracing`, at warn) and tried again at the next one.
#[cfg(feature = "tokio")]
pub fn spawn_heartbeat(
    queue: AsyncQueue,
    name: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            if let Err(e) = heartbeat(&queue, &name, false).await {
                tracing::warn!(node = %name, error = %e, "heartbeat not written");
            }
        }
        if let Err(e) = heartbeat(&queue, &name, true).await {
            tracing::warn!(node = %name, error = %e, "stop not written to the nodes table");
        }
    })
}

/// Records the node's status page once its coordinator listens.
#[cfg(feature = "tokio")]
pub async fn set_status_url(queue: &AsyncQueue, name: &str, url: String) -> Result<(), NodeError> {
    let name = name.to_owned();
    off_runtime(queue, move |q| {
        q.transaction(|tx| {
            tx.execute(
                "UPDATE horos_nodes SET status_url = ?2 WHERE name = ?1",
                params![&name, &url],
            )
        })?;
        Ok(())
    })
    .await
}

fn now() -> i64 {
    crate::now_ms()
}

/// Creates the table if needed and writes this node's row (refused while another process of the
/// same name is running).
pub fn register(queue: &Queue, info: &NodeInfo) -> Result<(), NodeError> {
    let lanes = serde_json::to_string(&info.lanes).unwrap_or_else(|_| "[]".into());
    queue.transaction(|tx| {
        MIGRATIONS.apply_in_tx(tx)?;
        let t = now();
        if let Some(r) = tx.query_opt(
            "SELECT name, host, pid, lanes, status_url, started_ms, heartbeat_ms, stopped_ms
             FROM horos_nodes WHERE name = ?1",
            params![&info.name],
        )? {
            let other = NodeRow::from_row(&r)?;
            let same_process = other.host == info.host && other.pid == i64::from(info.pid);
            // A node of this machine that died (SIGKILL, a crash) is restarted at once, without
            // waiting for its heartbeat to age: its process is gone.
            let dead_here = other.host == info.host && !process_alive(other.pid);
            if other.state(t) == "running" && !same_process && !dead_here {
                return Err(NodeError::NameTaken {
                    name: other.name,
                    host: other.host,
                    pid: other.pid,
                    age_s: t.saturating_sub(other.heartbeat_ms) as f64 / 1000.0,
                });
            }
        }
        tx.execute(
            "INSERT INTO horos_nodes (name, host, pid, lanes, status_url, started_ms, heartbeat_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                 lanes = excluded.lanes, status_url = excluded.status_url,
                 started_ms = excluded.started_ms, heartbeat_ms = excluded.heartbeat_ms,
                 stopped_ms = NULL",
            params![
                &info.name,
                &info.host,
                info.pid,
                lanes.as_str(),
                info.status_url.clone(),
                t,
                t
            ],
        )?;
        Ok(())
    })
}

/// Whether process `pid` of this machine exists (Linux: `/proc/PID`).
fn process_alive(pid: i64) -> bool {
    pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Every node, by name (none when no node ever ran `run` on this database).
pub fn list(queue: &Queue) -> crate::Result<Vec<NodeRow>> {
    let rows = match queue.query(
        "SELECT name, host, pid, lanes, status_url, started_ms, heartbeat_ms, stopped_ms
         FROM horos_nodes ORDER BY name",
        params![],
    ) {
        Ok(rows) => rows,
        // No table yet: no node ever ran here.
        Err(e) if e.to_string().contains("horos_nodes") => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter().map(NodeRow::from_row).collect()
}

/// Renews `name`'s heartbeat (every [`HEARTBEAT`]), or marks it stopped (`stopped`: at a clean
/// shutdown). Returns the rows written (0: no such node).
pub fn beat(queue: &Queue, name: &str, stopped: bool) -> crate::Result<u64> {
    let t = now();
    queue.transaction(|tx| {
        tx.execute(
            "UPDATE horos_nodes SET heartbeat_ms = ?2, stopped_ms = ?3 WHERE name = ?1",
            params![name, t, stopped.then_some(t)],
        )
    })
}

/// A node's settings as a configuration file writes them (`[node]`): its name among the nodes
/// sharing one database, and where it keeps its own runtime files.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// The node's name in the nodes table and on the status page (default: the host name,
    /// [`host_name`]). Two running nodes may not share one.
    pub name: Option<String>,
    /// This node's runtime files (server logs, sockets): default `DATABASE.run` beside a SQLite
    /// database, `horos-NAME.run` beside the configuration file with a PostgreSQL one.
    pub run_dir: Option<std::path::PathBuf>,
}

/// A `[node] name` that cannot name a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node.name `{0}`: 1 to 64 characters of letters, digits, `.`, `_` and `-`")]
pub struct InvalidNodeName(pub String);

impl From<InvalidNodeName> for String {
    fn from(e: InvalidNodeName) -> String {
        e.to_string()
    }
}

impl NodeSettings {
    /// Checks the name.
    pub fn validate(&self) -> Result<(), InvalidNodeName> {
        if let Some(name) = &self.name {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(InvalidNodeName(name.clone()));
            }
        }
        Ok(())
    }

    /// The node's name: `name`, or the host name.
    pub fn node_name(&self) -> String {
        self.name.clone().unwrap_or_else(host_name)
    }
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn info(name: &str, pid: u32) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            host: "h".into(),
            pid,
            lanes: vec!["think".into()],
            status_url: None,
        }
    }

    #[test]
    fn a_running_name_is_refused_and_a_stopped_one_reused() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path().join("q.db")).unwrap();
        assert!(list(&q).unwrap().is_empty());
        register(&q, &info("a", 1)).unwrap();
        register(&q, &info("b", 2)).unwrap();
        // pid 1 is alive (init): the name is taken.
        let e = register(&q, &info("a", 3)).unwrap_err();
        assert!(matches!(e, NodeError::NameTaken { pid: 1, .. }), "{e}");
        // The same process registering again (a restart of its run loop) is not refused.
        register(&q, &info("a", 1)).unwrap();
        beat(&q, "a", true).unwrap();
        let rows = list(&q).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].state(now()), "stopped");
        assert_eq!(rows[1].state(now()), "running");
        assert_eq!(rows[1].lanes, ["think"]);
        assert_eq!(rows[1].state(now() + 11_000), "silent");
        register(&q, &info("a", 3)).unwrap();
        assert_eq!(list(&q).unwrap()[0].pid, 3);
        // A running row of this machine whose process is gone (killed): taken over at once
        // (pid u32::MAX - 1 exists on no Linux machine).
        let mut gone = info("c", u32::MAX - 1);
        gone.host = "this-machine".into();
        register(&q, &gone).unwrap();
        let mut again = gone.clone();
        again.pid = std::process::id();
        register(&q, &again).unwrap();
    }

    #[cfg(feature = "tokio")]
    #[tokio::test]
    async fn the_heartbeat_task_marks_its_node_stopped_when_told_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let q = AsyncQueue::open(dir.path().join("q.db"), crate::Config::default())
            .await
            .unwrap();
        join(&q, info("a", std::process::id())).await.unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = spawn_heartbeat(q.clone(), "a".into(), stopped);
        assert_eq!(list_all(&q).await.unwrap()[0].state(now()), "running");
        stop.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(list_all(&q).await.unwrap()[0].state(now()), "stopped");
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    #[test]
    fn a_node_name_is_letters_digits_dots_dashes_and_underscores() {
        let named = |n: &str| NodeSettings {
            name: Some(n.to_owned()),
            run_dir: None,
        };
        assert_eq!(named("gpu-1.lab_a").validate(), Ok(()));
        assert_eq!(named("gpu-1").node_name(), "gpu-1");
        assert!(!NodeSettings::default().node_name().is_empty());
        for bad in ["", "a b", "é", &"x".repeat(65)] {
            let e = named(bad).validate().unwrap_err().to_string();
            assert!(e.starts_with(&format!("node.name `{bad}`: 1 to 64")), "{e}");
        }
    }
}
