//! The PostgreSQL backend (feature `postgres`): the same `storage::Storage` seam as SQLite, on a
//! pool of `postgres` connections (the synchronous driver, as the queue's API is synchronous and
//! pools with r2d2 already).
//!
//! - Claims are one statement: `FOR UPDATE SKIP LOCKED` picks the ready jobs without waiting for
//!   other claimers. A claimed batch is leased in one row of `squeueha_leases` (its small jobs
//!   moved there, its large ones marked in their own rows; see `lease`), so a job is written once
//!   after its enqueue. The due timers (delayed jobs whose time came, expired leases, whose last
//!   attempts move to the dead letters) are looked at by a handle's claims at least every
//!   [`TIMER_CHECK_INTERVAL`] and whenever ready jobs did not fill a claim.
//! - `ack_and_poll` is one statement too (acks, then claims): one round trip per batch.
//! - Enqueues send a `NOTIFY` on the schema's channel in their transaction; every queue handle keeps one
//!   connection `LISTEN`ing and wakes its waiting consumers when a notification arrives, whichever
//!   node enqueued. Polling (200 ms) stays as the fallback while that connection is down.
//! - Leader election is one upsert that only an expired leadership or its own holder passes; a
//!   fencing check inside a [`PgQueueTx`](crate::PgQueueTx) locks the leadership row (`FOR SHARE`)
//!   so that no new leader can take over before the transaction commits.

mod lease;
pub(crate) mod ops;
pub(crate) mod schema;
mod sql;
mod storage;
pub(crate) mod tx;

pub(crate) use sql::query as sql_query;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use ::postgres::{Client, GenericClient, NoTls, Row, Statement, types::ToSql};
use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;

use crate::config::{Config, DedupWindow};
use crate::error::{Error, Result, describe, is_retryable};
use crate::job::{millis, now_ms};
use crate::storage::MaintenanceReport;

/// The channel of the queue's schema (`squeueha_` and 16 hex digits of the schema's md5: one
/// channel per schema, within PostgreSQL's 63-byte limit), as SQL; notifications carry
/// `ORIGIN/queue`.
const CHANNEL_SQL: &str = "SELECT 'squeueha_' || left(md5(current_schema()), 16)";

/// True when the connection was lost (the server restarted, or ended the session): the pool
/// drops it, and the operation runs again on another connection. A session ended by the server
/// (`57P01`…`57P03`, or closed before its answer) rolls back what it had not committed; only a
/// server that dies between its commit and its answer would see the operation twice (an
/// enqueue without a dedup key stored twice, an ack reported stale): at-least-once, as every
/// client that reconnects.
pub(crate) fn is_lost(e: &Error) -> bool {
    use ::postgres::error::SqlState;
    match e {
        Error::Postgres(p) => {
            p.is_closed()
                // An I/O error on the socket (reset by the server, say).
                || std::error::Error::source(p).is_some_and(|s| s.is::<std::io::Error>())
                || p.code().is_some_and(|c| {
                    *c == SqlState::ADMIN_SHUTDOWN
                        || *c == SqlState::CRASH_SHUTDOWN
                        || *c == SqlState::CANNOT_CONNECT_NOW
                })
        }
        _ => false,
    }
}

/// A pooled connection with its prepared statements.
pub(crate) struct PgConn {
    client: Client,
    stmts: HashMap<&'static str, Statement>,
    /// The caller's statements, by their text (see `Config::caller_statement_cache`).
    callers: HashMap<String, Statement>,
    /// When the connection last answered: checked out again within [`FRESH`], it is not
    /// validated (validation is a round trip of its own, as costly as a claim).
    last_ok: Instant,
}

/// A connection that answered this recently is handed out without a validation round trip; one
/// idle longer (a server restart may have closed it) is validated first.
const FRESH: Duration = Duration::from_secs(1);

/// Queries through a client or a transaction, preparing each statement once per connection.
pub(crate) struct Ctx<'a, C: GenericClient> {
    pub(crate) c: &'a mut C,
    stmts: &'a mut HashMap<&'static str, Statement>,
    callers: &'a mut HashMap<String, Statement>,
    /// `Config::caller_statement_cache`.
    callers_max: usize,
    /// The queue handle's tag in its notifications (`TAG/queue`), so that its own listener
    /// ignores the echoes of what it already signalled in-process.
    pub(crate) origin: &'a str,
}

impl<C: GenericClient> Ctx<'_, C> {
    /// The same client and cache, for a shorter borrow.
    pub(crate) fn reborrow(&mut self) -> Ctx<'_, C> {
        Ctx {
            c: &mut *self.c,
            stmts: &mut *self.stmts,
            callers: &mut *self.callers,
            callers_max: self.callers_max,
            origin: self.origin,
        }
    }

    /// The caller's statement `sql` (SQLite placeholders), prepared once per connection while the
    /// cache has room; `None` with the cache off.
    pub(crate) fn caller_stmt(&mut self, sql: &str) -> Result<Option<Statement>> {
        if self.callers_max == 0 {
            return Ok(None);
        }
        if let Some(s) = self.callers.get(sql) {
            return Ok(Some(s.clone()));
        }
        let s = self.c.prepare(&crate::sql::to_postgres(sql))?;
        if self.callers.len() >= self.callers_max {
            self.callers.clear();
        }
        self.callers.insert(sql.to_owned(), s.clone());
        Ok(Some(s))
    }

    /// Forgets the caller's statement `sql` (it failed: prepared again next time).
    pub(crate) fn forget_caller_stmt(&mut self, sql: &str) {
        self.callers.remove(sql);
    }

    fn stmt(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.c.prepare(sql)?;
        self.stmts.insert(sql, s.clone());
        Ok(s)
    }

    pub(crate) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let s = self.stmt(sql)?;
        Ok(self.c.query(&s, params)?)
    }

    pub(crate) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let s = self.stmt(sql)?;
        Ok(self.c.query_opt(&s, params)?)
    }

    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let s = self.stmt(sql)?;
        Ok(self.c.execute(&s, params)?)
    }
}

/// r2d2's manager for [`PgConn`]: r2d2_postgres's, plus a statement cache per connection.
#[derive(Debug)]
struct Manager {
    inner: PostgresConnectionManager<NoTls>,
    /// Whether to set `idle_in_transaction_session_timeout` (the URL's options do not).
    idle_timeout: bool,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = ::postgres::Error;

    fn connect(&self) -> std::result::Result<PgConn, ::postgres::Error> {
        let mut client = self.inner.connect()?;
        // The queue's statements are prepared once and their generic plans are sound (they never
        // depend on the bound values); the default would re-plan the claim on every execution
        // whenever a custom plan looks cheaper, which costs more than the claim itself.
        client.batch_execute("SET plan_cache_mode = force_generic_plan")?;
        // A transaction whose client went silent (a node cut off from the network mid-commit)
        // would hold its rows' locks until the server noticed the dead socket, which by default
        // takes hours: its jobs could not be taken over, as SKIP LOCKED passes them by. The
        // server ends such a session after this long instead (unless the URL's options set it).
        if self.idle_timeout {
            client.batch_execute("SET idle_in_transaction_session_timeout = '10s'")?;
        }
        Ok(PgConn {
            client,
            stmts: HashMap::new(),
            callers: HashMap::new(),
            last_ok: Instant::now(),
        })
    }

    fn is_valid(&self, conn: &mut PgConn) -> std::result::Result<(), ::postgres::Error> {
        if conn.last_ok.elapsed() < FRESH {
            return Ok(());
        }
        self.inner.is_valid(&mut conn.client)?;
        conn.last_ok = Instant::now();
        Ok(())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

pub(crate) struct PgStore {
    /// Always `Some` until dropped (see `Drop`).
    pool: Option<Pool<Manager>>,
    pub(crate) cfg: Config,
    pub(crate) pg_config: ::postgres::Config,
    /// The URL without its password, for messages.
    pub(crate) target: String,
    /// This handle's tag in notifications (see [`Ctx::origin`]).
    pub(crate) origin: String,
    last_maintenance: AtomicI64,
    /// Per queue, what this handle's next claim should do besides taking ready jobs (see
    /// [`PgStore::claim_plan`]).
    claim_hints: Mutex<HashMap<String, ClaimHints>>,
}

/// A claim that looks at the timers (delayed jobs whose time came, expired leases) costs about
/// half as much again as one that takes ready jobs only. A handle's claims look at them at least
/// this often per queue, and whenever the ready jobs did not fill the last claim: so timers wait
/// at most this long behind ready work, and never while the queue has nothing else ready.
pub(crate) const TIMER_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// After a claim left large ready jobs to a second statement, a handle's claims of that queue
/// take large jobs in the first for this long.
pub(crate) const LARGE_JOBS_SEEN_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct ClaimHints {
    /// When the timers were last looked at.
    timers_at: Instant,
    /// The last claim was not filled by ready jobs: the next looks at the timers.
    timers_owed: bool,
    /// Until when large jobs are expected among the ready ones.
    large_until: Option<Instant>,
}

/// What a claim does besides taking small ready jobs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimPlan {
    pub(crate) timers: lease::Timers,
    pub(crate) large: bool,
}

/// `postgres://user@host:port/db` of a configuration (never the password).
fn target_of(config: &::postgres::Config) -> String {
    use ::postgres::config::Host;
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or(""),
        host,
        port,
        config.get_dbname().unwrap_or("")
    )
}

/// Bounds on a network that fails silently (a node cut off, a peer gone without a reset): the
/// driver's defaults wait for the kernel, which gives up on unanswered data after about 15
/// minutes, and so would every call on such a connection. Values the URL sets are kept.
fn with_network_timeouts(c: &mut ::postgres::Config) {
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(Duration::from_secs(10));
    }
    // Data unacknowledged this long: the connection is closed, the call fails over to a new one.
    if c.get_tcp_user_timeout().is_none() {
        c.tcp_user_timeout(Duration::from_secs(15));
    }
    // Idle connections (the LISTEN one, the pool's) probed so that a dead peer is noticed.
    // (the driver's own default idle time is 2 hours)
    if c.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        c.keepalives_idle(Duration::from_secs(10));
    }
    if c.get_keepalives_interval().is_none() {
        c.keepalives_interval(Duration::from_secs(5));
    }
    if c.get_keepalives_retries().is_none() {
        c.keepalives_retries(3);
    }
}

impl PgStore {
    pub(crate) fn open(url: &str, cfg: Config) -> Result<Self> {
        if cfg.pool_size == 0 {
            return Err(Error::InvalidArgument(
                "pool_size must be at least 1".into(),
            ));
        }
        let mut pg_config: ::postgres::Config = url.parse().map_err(|e: ::postgres::Error| {
            Error::InvalidArgument(format!("PostgreSQL URL: {e}"))
        })?;
        with_network_timeouts(&mut pg_config);
        let target = target_of(&pg_config);
        // One plain connection first: r2d2 would turn every failure into a timeout.
        let mut client = pg_config.connect(NoTls).map_err(|e| Error::CannotOpen {
            path: target.clone().into(),
            reason: describe(&e),
        })?;
        schema::migrate(&mut client)?;
        drop(client);
        let pool = Pool::builder()
            .max_size(cfg.pool_size)
            .min_idle(Some(1))
            .connection_timeout(Duration::from_secs(30))
            .build(Manager {
                inner: PostgresConnectionManager::new(pg_config.clone(), NoTls),
                idle_timeout: !pg_config
                    .get_options()
                    .is_some_and(|o| o.contains("idle_in_transaction_session_timeout")),
            })?;
        Ok(PgStore {
            pool: Some(pool),
            cfg,
            pg_config,
            target,
            origin: new_origin(),
            last_maintenance: AtomicI64::new(now_ms()),
            claim_hints: Mutex::new(HashMap::new()),
        })
    }

    /// What this handle's next claim of `queue` does besides taking small ready jobs.
    pub(crate) fn claim_plan(&self, queue: &str) -> ClaimPlan {
        let hints = self
            .claim_hints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match hints.get(queue) {
            Some(h) => ClaimPlan {
                timers: if !h.timers_owed && h.timers_at.elapsed() < TIMER_CHECK_INTERVAL {
                    lease::Timers::Skip
                } else {
                    lease::Timers::Due
                },
                large: h.large_until.is_some_and(|t| Instant::now() < t),
            },
            None => ClaimPlan {
                timers: lease::Timers::Due,
                large: false,
            },
        }
    }

    /// Records what the claims of `queue` did: looked at the timers or not, were filled by ready
    /// jobs or not (the next looks at the timers), left large jobs to a second statement or not.
    pub(crate) fn claimed(&self, queue: &str, timers_looked: bool, filled: bool, large_left: bool) {
        let mut hints = self
            .claim_hints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let h = hints.entry(queue.to_owned()).or_insert(ClaimHints {
            timers_at: now,
            timers_owed: true,
            large_until: None,
        });
        if timers_looked {
            h.timers_at = now;
            h.timers_owed = false;
        }
        if !filled {
            h.timers_owed = true;
        }
        if large_left {
            h.large_until = Some(now + LARGE_JOBS_SEEN_FOR);
        }
    }

    fn pool(&self) -> Result<&Pool<Manager>> {
        self.pool
            .as_ref()
            .ok_or_else(|| Error::Pool("the pool is closed".into()))
    }

    /// Runs `f` on a pooled connection, in autocommit (each statement its own transaction), retried
    /// after a deadlock or serialization failure, and on another connection when this one turns
    /// out to be closed (see [`is_lost`]).
    pub(crate) fn auto<T>(
        &self,
        mut f: impl FnMut(&mut Ctx<'_, Client>) -> Result<T>,
    ) -> Result<T> {
        let mut lost = 0;
        loop {
            let mut conn = self.pool()?.get()?;
            let PgConn {
                client,
                stmts,
                callers,
                ..
            } = &mut *conn;
            let out = self.retrying(|| {
                f(&mut Ctx {
                    c: &mut *client,
                    stmts: &mut *stmts,
                    callers: &mut *callers,
                    callers_max: self.cfg.caller_statement_cache,
                    origin: &self.origin,
                })
            });
            match out {
                Err(e) if is_lost(&e) && lost < self.cfg.pool_size => lost += 1,
                Err(e) => return Err(e),
                Ok(value) => {
                    conn.last_ok = Instant::now();
                    drop(conn);
                    self.maybe_maintain();
                    return Ok(value);
                }
            }
        }
    }

    /// Runs `f` in one transaction, retried as a whole after a deadlock or serialization failure
    /// (so `f` may run more than once, always against a state without its earlier runs).
    pub(crate) fn tx<T>(
        &self,
        mut f: impl FnMut(&mut Ctx<'_, ::postgres::Transaction<'_>>) -> Result<T>,
    ) -> Result<T> {
        let mut lost = 0;
        loop {
            let mut conn = self.pool()?.get()?;
            let PgConn {
                client,
                stmts,
                callers,
                ..
            } = &mut *conn;
            let out = self.retrying(|| {
                let mut tx = client.transaction()?;
                let value = f(&mut Ctx {
                    c: &mut tx,
                    stmts: &mut *stmts,
                    callers: &mut *callers,
                    callers_max: self.cfg.caller_statement_cache,
                    origin: &self.origin,
                })?;
                tx.commit()?;
                Ok(value)
            });
            match out {
                Err(e) if is_lost(&e) && lost < self.cfg.pool_size => lost += 1,
                Err(e) => return Err(e),
                Ok(value) => {
                    conn.last_ok = Instant::now();
                    drop(conn);
                    self.maybe_maintain();
                    return Ok(value);
                }
            }
        }
    }

    fn retrying<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        let mut attempt = 0usize;
        loop {
            match f() {
                Err(Error::Postgres(e)) if is_retryable(&e) => {
                    let Some(sleep) = self.cfg.busy_backoff.get(attempt) else {
                        return Err(Error::Busy {
                            attempts: attempt as u32 + 1,
                        });
                    };
                    std::thread::sleep(*sleep);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Housekeeping, at most once per `maintenance_interval` for this handle.
    fn maybe_maintain(&self) {
        let now = now_ms();
        let last = self.last_maintenance.load(Ordering::Relaxed);
        if now - last < millis(self.cfg.maintenance_interval)
            || self
                .last_maintenance
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Best effort: a failure postpones it to the next interval.
        let _ = self.maintain_now(now);
    }

    pub(crate) fn maintain_now(&self, now: i64) -> Result<MaintenanceReport> {
        let mut conn = self.pool()?.get()?;
        let PgConn {
            client,
            stmts,
            callers,
            ..
        } = &mut *conn;
        let mut ctx = Ctx {
            c: client,
            stmts,
            callers,
            callers_max: self.cfg.caller_statement_cache,
            origin: &self.origin,
        };
        let mut report = MaintenanceReport::default();
        if let Some(keep) = self.cfg.retain_done {
            report.purged_done = ops::purge_done(&mut ctx, now - millis(keep))?;
        }
        if let DedupWindow::Window(w) = self.cfg.dedup_window {
            report.purged_dedup = ops::purge_dedup(&mut ctx, now - millis(w))?;
        }
        Ok(report)
    }
}

impl Drop for PgStore {
    /// The synchronous driver closes a connection by blocking on its own runtime, which panics on
    /// a thread that drives async tasks: the last handle of a queue may well be dropped there (an
    /// `AsyncQueue` in a task), so the pool's connections are closed on a thread of their own.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let closing = std::thread::Builder::new()
                .name("squeueha-pg-close".into())
                .spawn(move || drop(pool));
            // Without a thread, the connections close when the process ends.
            drop(closing);
        }
    }
}

/// A tag unique to one queue handle: hex, so never containing the `/` that ends it.
fn new_origin() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_i64(now_ms());
    format!("{:016x}", h.finish())
}

/// The queue a notification payload (`TAG/queue`) names, unless `origin` sent it.
pub(crate) fn foreign_queue<'a>(payload: &'a str, origin: &str) -> Option<&'a str> {
    match payload.split_once('/') {
        Some((tag, _)) if tag == origin => None,
        Some((_, queue)) => Some(queue),
        None => Some(payload),
    }
}

/// What the listening connection saw.
pub(crate) enum Heard<'a> {
    /// Reconnected and listening again: notifications may have been missed in between.
    Listening,
    /// An enqueue (or a job made ready again) in this queue.
    Queue(&'a str),
    /// Nothing for a while.
    Idle,
}

/// Keeps one connection `LISTEN`ing on its schema's channel and hands what it hears to `on`, reconnecting
/// after a failure, until `on` returns `false` (the queue handle is gone).
pub(crate) fn spawn_listener(
    config: ::postgres::Config,
    mut on: impl FnMut(Heard<'_>) -> bool + Send + 'static,
) {
    const TICK: Duration = Duration::from_millis(250);
    let spawned = std::thread::Builder::new()
        .name("squeueha-listen".into())
        .spawn(move || {
            let mut first = true;
            loop {
                let mut client = match config.connect(NoTls) {
                    Ok(c) => c,
                    Err(_) => {
                        if !on(Heard::Idle) {
                            return;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                };
                let listening = client
                    .query_one(CHANNEL_SQL, &[])
                    .and_then(|row| row.try_get::<_, String>(0))
                    .and_then(|channel| client.batch_execute(&format!("LISTEN \"{channel}\"")));
                if listening.is_err() {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                // The first connection missed nothing a waiting consumer would not find by polling
                // first; a reconnection may have, so every waiter looks again.
                let heard = if first { Heard::Idle } else { Heard::Listening };
                first = false;
                if !on(heard) {
                    return;
                }
                loop {
                    let heard = {
                        let mut notifications = client.notifications();
                        let mut iter = notifications.timeout_iter(TICK);
                        ::postgres::fallible_iterator::FallibleIterator::next(&mut iter)
                    };
                    let keep = match heard {
                        Ok(Some(n)) => on(Heard::Queue(n.payload())),
                        Ok(None) => on(Heard::Idle),
                        Err(_) => break,
                    };
                    if !keep {
                        return;
                    }
                    if client.is_closed() {
                        break;
                    }
                }
            }
        });
    // Without the thread, consumers still see other nodes' work at the idle poll interval.
    drop(spawned);
}
