//! Helpers of the multi-node tests: a PostgreSQL cluster of a test's own, and the checks that
//! every job's answer is stored once.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use squeueha::{Queue, params};

/// Runs `scripts/NAME` for the cluster in `dir` on `port`, with `env` added.
pub fn pg_script(name: &str, dir: &Path, port: u16, env: &[(&str, &str)]) -> Output {
    Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts")
            .join(name),
    )
    .env("HOROS_PG_DIR", dir)
    .env("HOROS_PG_PORT", port.to_string())
    .envs(env.iter().copied())
    .output()
    .unwrap()
}

/// Starts a cluster in `dir` on `port` and returns its URL (`None`, after a SKIP line or a
/// failure under `HOROS_REQUIRE_POSTGRES=1`, when PostgreSQL cannot start here). Stop it with
/// [`StopCluster`].
pub fn start_cluster(dir: &Path, port: u16, env: &[(&str, &str)]) -> Option<String> {
    let out = pg_script("setup_postgres.sh", dir, port, env);
    if !out.status.success() {
        super::skip_or_fail(
            "HOROS_REQUIRE_POSTGRES",
            &format!(
                "PostgreSQL did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        );
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Some(
        stdout
            .lines()
            .last()
            .unwrap()
            .trim()
            .trim_start_matches("export HOROS_PG_URL=")
            .to_owned(),
    )
}

/// Stops the cluster in `.0` on port `.1` however the test ends.
pub struct StopCluster(pub std::path::PathBuf, pub u16);

impl Drop for StopCluster {
    fn drop(&mut self) {
        let _ = pg_script("stop_postgres.sh", &self.0, self.1, &[]);
    }
}

/// How many answers the feeder's results table holds (0 while the database does not answer).
pub fn stored(q: &Queue) -> i64 {
    q.query_opt("SELECT count(*) FROM horos_feeder_results", params![])
        .ok()
        .flatten()
        .and_then(|r| r.get(0).ok())
        .unwrap_or(0)
}

/// Waits until `n` answers are stored; fails after `within` with `logs()`.
pub fn wait_stored(q: &Queue, n: i64, within: Duration, logs: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while stored(q) < n {
        assert!(
            Instant::now() < deadline,
            "{} stored, waiting for {n}\n{}",
            stored(q),
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every job of `ids` (enqueued by `chat_jobs` on `lane`) answered once with its own answer, the
/// stored ids exactly those, and nothing left on the lane's queue.
pub fn assert_each_stored_once(q: &Queue, lane: &str, ids: &[i64]) {
    let content: HashMap<i64, String> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, format!("{lane} job {i}")))
        .collect();
    let rows = q
        .query(
            "SELECT job_id, text FROM horos_feeder_results ORDER BY job_id",
            params![],
        )
        .unwrap();
    assert_eq!(rows.len(), ids.len(), "rows stored");
    let mut sum = 0i64;
    for r in &rows {
        let (id, text): (i64, String) = (r.get(0).unwrap(), r.get(1).unwrap());
        assert_eq!(
            text.trim(),
            content[&id],
            "job {id} stored another job's answer"
        );
        sum += id;
    }
    assert_eq!(
        sum,
        ids.iter().sum::<i64>(),
        "the stored ids are the enqueued ones"
    );
    let s = q.stats(lane).unwrap();
    assert_eq!(
        (s.ready, s.in_flight, s.delayed, s.dead),
        (0, 0, 0, 0),
        "{s:?}"
    );
}

/// A schema of its own in the test server's database, dropped at the end.
pub struct Schema {
    base: String,
    name: String,
}

impl Schema {
    /// `prefix` names the test (tests run at once in one database).
    pub fn create(base: &str, prefix: &str) -> Schema {
        let name = format!("{prefix}_{}", std::process::id());
        let mut c = squeueha::pg::Client::connect(base, squeueha::pg::NoTls).unwrap();
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .unwrap();
        Schema {
            base: base.to_owned(),
            name,
        }
    }

    /// The database URL with this schema as its search path.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut c) = squeueha::pg::Client::connect(&self.base, squeueha::pg::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}
