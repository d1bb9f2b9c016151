//! The coordinator's tables in the state file, versioned by squeueha's migrator.

/// The coordinator's tables in the state file (namespace `horos_coordinator` of squeueha's
/// migrator): async-job results and runtime settings. Version 1 is idempotent, so files written
/// before the tables were versioned are adopted unchanged. Version 2 indexes the jobs by client
/// and model for the admin list (jobs submitted before it are not listed). Version 3 keeps usage
/// (requests, prompt and completion tokens) per day (since the Unix epoch), caller and model.
/// Version 4 records each job's owner (the data-plane key that submitted it; NULL: a caller
/// without a key), which alone may read or cancel it through `/v1/jobs`. Version 5 keeps the
/// measured swap costs per model and kind (`load`: the moving average of cold loads, seconds,
/// and how many were measured).
pub(crate) const MIGRATIONS: squeueha::Migrations = squeueha::Migrations::new(
    "horos_coordinator",
    &[squeueha::Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS coord_job_results (
                  id INTEGER PRIMARY KEY,
                  kind TEXT NOT NULL,
                  state TEXT NOT NULL,
                  status INTEGER NOT NULL,
                  body BLOB NOT NULL,
                  finished_ms INTEGER NOT NULL
              );
              CREATE TABLE IF NOT EXISTS coord_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    }, squeueha::Migration {
        version: 2,
        sql: "CREATE TABLE coord_jobs (
                  id INTEGER PRIMARY KEY,
                  kind TEXT NOT NULL,
                  client TEXT,
                  model TEXT,
                  submitted_ms INTEGER NOT NULL
              );
              CREATE INDEX coord_jobs_client ON coord_jobs (client, id);
              CREATE INDEX coord_jobs_model ON coord_jobs (model, id);
              CREATE INDEX coord_job_results_finished ON coord_job_results (finished_ms);",
    }, squeueha::Migration {
        version: 3,
        sql: "CREATE TABLE coord_usage (
                  day INTEGER NOT NULL,
                  caller TEXT NOT NULL,
                  model TEXT NOT NULL,
                  requests INTEGER NOT NULL,
                  prompt_tokens INTEGER NOT NULL,
                  completion_tokens INTEGER NOT NULL,
                  PRIMARY KEY (day, caller, model)
              );",
    }, squeueha::Migration {
        version: 4,
        sql: "ALTER TABLE coord_jobs ADD COLUMN owner TEXT;",
    }, squeueha::Migration {
        version: 5,
        sql: "CREATE TABLE coord_swap_costs (
                  model TEXT NOT NULL,
                  kind TEXT NOT NULL,
                  avg_s REAL NOT NULL,
                  count INTEGER NOT NULL,
                  updated_ms INTEGER NOT NULL,
                  PRIMARY KEY (model, kind)
              );",
    }],
)
.with_postgres(&[
    squeueha::Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS coord_job_results (
                  id BIGINT PRIMARY KEY,
                  kind TEXT NOT NULL,
                  state TEXT NOT NULL,
                  status INTEGER NOT NULL,
                  body BYTEA NOT NULL,
                  finished_ms BIGINT NOT NULL
              );
              CREATE TABLE IF NOT EXISTS coord_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    },
    squeueha::Migration {
        version: 2,
        sql: "CREATE TABLE coord_jobs (
                  id BIGINT PRIMARY KEY,
                  kind TEXT NOT NULL,
                  client TEXT,
                  model TEXT,
                  submitted_ms BIGINT NOT NULL
              );
              CREATE INDEX coord_jobs_client ON coord_jobs (client, id);
              CREATE INDEX coord_jobs_model ON coord_jobs (model, id);
              CREATE INDEX coord_job_results_finished ON coord_job_results (finished_ms);",
    },
    squeueha::Migration {
        version: 3,
        sql: "CREATE TABLE coord_usage (
                  day BIGINT NOT NULL,
                  caller TEXT NOT NULL,
                  model TEXT NOT NULL,
                  requests BIGINT NOT NULL,
                  prompt_tokens BIGINT NOT NULL,
                  completion_tokens BIGINT NOT NULL,
                  PRIMARY KEY (day, caller, model)
              );",
    },
    squeueha::Migration {
        version: 4,
        sql: "ALTER TABLE coord_jobs ADD COLUMN owner TEXT;",
    },
    squeueha::Migration {
        version: 5,
        sql: "CREATE TABLE coord_swap_costs (
                  model TEXT NOT NULL,
                  kind TEXT NOT NULL,
                  avg_s DOUBLE PRECISION NOT NULL,
                  count BIGINT NOT NULL,
                  updated_ms BIGINT NOT NULL,
                  PRIMARY KEY (model, kind)
              );",
    },
]);
