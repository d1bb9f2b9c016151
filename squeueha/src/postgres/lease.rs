//! Leases on PostgreSQL: the claim (and the ack that rides with it), the batched ack, and the
//! operations on one claimed job (nack, release, bury, extend, check). A claimed batch's small
//! jobs live in one row of `squeueha_leases`; a large job keeps its lease in its own row.

use std::sync::LazyLock;

use ::postgres::GenericClient;

use super::Ctx;
use super::ops::{DELAYED, READY, check_queue_name, limit, unsigned};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Job, Lease, Millis, Nacked};
use crate::storage::AckReport;

/// The largest payload (bytes) that a claim copies into its batch's lease row. A larger job stays
/// in its own row, which the claim marks in flight (state 1, `lease_token`, `due_at` its expiry):
/// copying it would write its payload again (TOAST and WAL), which costs more than the update of
/// a row whose payload is stored apart. Measured with pgbench on the 2-core VM: the batch lease
/// drained 1.4-1.7x faster than the update at 64 B and 1 KiB, 0.55-0.7x as fast at 4 KiB.
const LEASED_PAYLOAD_MAX: i32 = 1024;

/// Acks the small jobs' (id, token) pairs `{ids}`/`{tokens}` (taken out of their batches' lease
/// rows) and the large jobs' `{large_ids}`/`{large_tokens}` (their own rows deleted or, with
/// `retain`, marked done at `{now}`). `acked` has the acked ids.
///
/// A lease row that the ack empties, as read by the statement's snapshot, is deleted at once
/// (`gone`; should another transaction have changed it since, the delete reads its latest version
/// again). Any other row of an acked token is locked first (`held`), so what is kept and what is
/// reported come from its latest version; `held` is skipped outright when every acked token's
/// lease was gone (a token has one lease row). A lease that such a partial ack empties stays as
/// an empty row until it expires (a claim looking at the timers deletes it): one modifying
/// statement fewer in every ack.
///
/// With `whole`, the quick ack of whole batches under one token (small jobs only): one delete by
/// token, and nothing for a partial or stale ack (its leases are then left to the general ack,
/// see [`Claimed::unacked`]).
fn ack_ctes(
    [ids, tokens, large_ids, large_tokens]: [&str; 4],
    now: &str,
    retain: bool,
    large: bool,
    whole: bool,
) -> String {
    // The jobs themselves are read only to keep them as done.
    let jobs = if retain { ", s.jobs" } else { "" };
    // With `retain`, the acked jobs of `leases` (rows of queue, jobs, acked ids) are kept as done.
    let done = |leases: &str| {
        if retain {
            format!(
                ", done AS (
                     INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, attempts,
                                                max_attempts, enqueued_at, last_error, payload)
                     SELECT x.id, t.queue, 3, x.priority, {now}, x.attempts, x.max_attempts,
                            x.enqueued_at, x.last_error, x.payload
                     FROM ({leases}) t, unnest(t.jobs) x
                     WHERE x.id = ANY(t.acking) RETURNING 1
                 )"
            )
        } else {
            String::new()
        }
    };
    if whole {
        let done = done("SELECT queue, jobs, ids AS acking FROM gone");
        return format!(
            "gone AS (
                 DELETE FROM squeueha_leases s
                 WHERE s.token = ({tokens}::bigint[])[1] AND s.ids <@ {ids}::bigint[]
                 RETURNING s.token, s.queue, s.ids{jobs}
             ){done},
             acked AS (SELECT unnest(ids) AS id FROM gone)"
        );
    }
    let done = done(
        "SELECT queue, jobs, ids AS acking FROM gone
         UNION ALL SELECT queue, jobs, acking FROM held",
    );
    let acked_rows = if retain {
        format!("UPDATE squeueha_jobs j SET state = 3, due_at = {now}, lease_token = NULL")
    } else {
        "DELETE FROM squeueha_jobs j".to_owned()
    };
    // Only when large jobs are acked (the caller knows them by their odd tokens): every
    // modifying statement costs at start-up, run or not.
    let (rows_cte, rows_union) = if large {
        (
            format!(
                ",
                 acked_rows AS (
                     {acked_rows}
                     WHERE j.id = ANY({large_ids}::bigint[]) AND j.state = 1
                           AND EXISTS (SELECT 1
                                       FROM unnest({large_ids}::bigint[], {large_tokens}::bigint[])
                                            AS l(id, token)
                                       WHERE l.id = j.id AND l.token = j.lease_token)
                     RETURNING j.id
                 )"
            ),
            "UNION ALL SELECT id FROM acked_rows",
        )
    } else {
        (String::new(), "")
    };
    format!(
        "acks AS (
             SELECT a.token, array_agg(a.id) AS ids
             FROM unnest({ids}::bigint[], {tokens}::bigint[]) AS a(id, token) GROUP BY a.token
         ),
         gone AS (
             DELETE FROM squeueha_leases s USING acks a
             WHERE s.token = ANY(ARRAY(SELECT token FROM acks))
                   AND s.token = a.token AND s.ids <@ a.ids
             RETURNING s.token, s.queue, s.ids{jobs}
         ),
         held AS (
             SELECT s.token, s.queue, s.ids, a.ids AS acking{jobs}
             FROM squeueha_leases s JOIN acks a ON s.token = a.token
             WHERE (SELECT count(*) FROM gone) < (SELECT count(*) FROM acks)
                   AND s.token = ANY(ARRAY(SELECT token FROM acks))
                   AND (s.token, s.queue) NOT IN (SELECT token, queue FROM gone)
             FOR UPDATE OF s
         ),
         kept AS (
             UPDATE squeueha_leases s
             SET ids = ARRAY(SELECT i FROM unnest(s.ids) i WHERE i <> ALL(h.acking)),
                 jobs = ARRAY(SELECT x FROM unnest(s.jobs) x WHERE x.id <> ALL(h.acking))
             FROM held h
             WHERE s.token = ANY(ARRAY(SELECT token FROM held))
                   AND s.token = h.token AND s.queue = h.queue AND h.ids && h.acking
             RETURNING 1
         ){done}{rows_cte},
         acked AS (
             SELECT unnest(ids) AS id FROM gone
             UNION ALL SELECT i FROM held h, unnest(h.ids) i WHERE i = ANY(h.acking)
             {rows_union}
         )"
    )
}

/// Takes job `$1` out of its batch's lease row `$2` (locked first; deleted when it was the last):
/// `from_lease` has the job with its queue, nothing when that lease does not hold it (a large
/// job's lease is its own row: the callers handle it).
const LEASE_TAKE_CTES: &str = "held AS (
         SELECT s.token, s.queue, s.ids, s.jobs FROM squeueha_leases s
         WHERE s.token = $2 AND $1 = ANY(s.ids)
         FOR UPDATE
     ),
     emptied AS (
         DELETE FROM squeueha_leases s USING held h
         WHERE s.token = h.token AND s.queue = h.queue AND cardinality(h.ids) = 1
         RETURNING 1
     ),
     kept AS (
         UPDATE squeueha_leases s
         SET ids = array_remove(h.ids, $1),
             jobs = ARRAY(SELECT x FROM unnest(h.jobs) x WHERE x.id <> $1)
         FROM held h
         WHERE s.token = h.token AND s.queue = h.queue AND cardinality(h.ids) > 1
         RETURNING 1
     ),
     from_lease AS (SELECT h.queue, x.* FROM held h, unnest(h.jobs) x WHERE x.id = $1)";

/// The notification of `queue_expr` having work, from `origin_param`, as a scalar subquery.
fn notify_expr(origin_param: &str, queue_expr: &str) -> String {
    format!(
        "(SELECT 1 FROM (SELECT pg_notify('squeueha_' || left(md5(current_schema()), 16),
                                          {origin_param} || '/' || {queue_expr})) n)"
    )
}

/// The claim, in one statement:
/// 1. acks the `$6`/`$7` (id, token) pairs (none for a plain claim);
/// 2. takes the expired leases of queue `$1` (`FOR UPDATE SKIP LOCKED`): their jobs on their last
///    attempt go to the dead letters, the others compete with the ready jobs for this claim (a
///    large job's expired lease is its in-flight row: a timer, as a delayed job's);
/// 3. picks the `$2` first among the ready jobs, the due timers (both `FOR UPDATE SKIP LOCKED`:
///    claimers never wait for each other) and the expired leases' jobs;
/// 4. deletes the small picked jobs from `squeueha_jobs` and writes them as one lease row (token
///    `$3`, expiry `$4`), marks the large ones in flight in their rows; the expired leases' jobs
///    not picked are put back as ready (and `$8`, the handle's origin, notifies the other nodes).
///
/// Rows: (0, acked id, …; or, from the quick ack, 0, …, the acked ids), (1, claimed job …),
/// (2, jobs put back, …), (3, large job claimed in its row, …), (4, large jobs left, …). The
/// delete and the update read their rows by `id = ANY(ARRAY(…))`: the connections plan once
/// (generic plans), and a plan that guesses the `LIMIT` at a tenth of the table would otherwise
/// hash-join the whole table (measured: 19 ms of a claim's 20 on 20,000 jobs).
fn claim_sql(v: ClaimVariant) -> String {
    let ClaimVariant {
        retain,
        timers,
        ack_large,
        claim_large,
        whole,
    } = v;
    // Timers include expired large jobs' rows: a claim that looks at them takes large jobs too.
    let claim_large = claim_large || timers;
    let acks = ack_ctes(["$6", "$7", "$8", "$9"], "$5", retain, ack_large, whole);
    let notify = notify_expr("$10", "$1");
    // Large ready jobs are marked in flight in their rows, or, in a claim without that step,
    // left where they are and counted (the caller claims them with another statement).
    let (rows_cte, rows_out) = if claim_large {
        (
            ",
             claimed_rows AS (
                 UPDATE squeueha_jobs j
                 SET state = 1, lease_token = $3::bigint + 1, due_at = $4,
                     attempts = j.attempts + 1
                 WHERE j.id = ANY(ARRAY(SELECT id FROM pick WHERE large))
                 RETURNING j.id, j.priority, j.attempts, j.max_attempts, j.enqueued_at, j.payload
             )",
            "SELECT 3, id, priority, attempts, max_attempts, enqueued_at, payload, NULL::bigint[]
             FROM claimed_rows",
        )
    } else {
        (
            "",
            "SELECT 4, count(*), 0, 0, 0, 0::bigint, NULL::bytea, NULL::bigint[]
             FROM pick WHERE large
             HAVING count(*) > 0",
        )
    };
    // Without timers, the claim takes ready jobs only; those CTEs cost about a third of it.
    let (timer_ctes, due_pick, lapsed_pick, lapsed_taken, requeued_ctes, requeued_rows) = if timers
    {
        (
            "expired AS (
                 DELETE FROM squeueha_leases WHERE queue = $1 AND token IN (
                     SELECT token FROM squeueha_leases
                     WHERE queue = $1 AND expires_at <= $5 AND token <> $3
                           AND token <> ALL($7::bigint[])
                     FOR UPDATE SKIP LOCKED)
                 RETURNING expires_at, jobs
             ),
             lapsed AS (SELECT e.expires_at AS due_at, x.* FROM expired e, unnest(e.jobs) x),
             expired_rows AS (
                 DELETE FROM squeueha_jobs WHERE id IN (
                     SELECT id FROM squeueha_jobs
                     WHERE state <> 0 AND state = 1 AND queue = $1 AND due_at <= $5
                           AND attempts >= max_attempts AND id <> ALL($8::bigint[])
                     FOR UPDATE SKIP LOCKED)
                 RETURNING id, priority, attempts, max_attempts, enqueued_at, last_error, payload
             ),
             buried AS (
                 INSERT INTO squeueha_dead (id, queue, priority, attempts, max_attempts,
                                            enqueued_at, died_at, last_error, payload)
                 SELECT id, $1, priority, attempts, max_attempts, enqueued_at, $5,
                        'lease expired on attempt ' || attempts || ' of ' || max_attempts
                        || ' (worker crashed or too slow)'
                        || coalesce('; last error: ' || last_error, ''),
                        payload
                 FROM (SELECT id, priority, attempts, max_attempts, enqueued_at, last_error,
                              payload
                       FROM lapsed WHERE attempts >= max_attempts
                       UNION ALL
                       SELECT id, priority, attempts, max_attempts, enqueued_at, last_error,
                              payload
                       FROM expired_rows) d
                 RETURNING 1
             ),
             due AS (
                 SELECT id, priority, due_at,
                        state = 1 OR octet_length(payload) > {LEASED_PAYLOAD_MAX} AS large
                 FROM squeueha_jobs
                 WHERE state <> 0 AND state IN (1, 2) AND queue = $1 AND due_at <= $5
                       AND (state = 2 OR attempts < max_attempts) AND id <> ALL($8::bigint[])
                 ORDER BY priority DESC, due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
             ),"
            .replace("{LEASED_PAYLOAD_MAX}", &LEASED_PAYLOAD_MAX.to_string()),
            "UNION ALL SELECT id, priority, due_at, large, false FROM due",
            "UNION ALL SELECT id, priority, due_at, false, true FROM lapsed
             WHERE attempts < max_attempts",
            "UNION ALL
             SELECT id, priority, attempts + 1, max_attempts, enqueued_at, last_error, payload
             FROM lapsed WHERE id = ANY(ARRAY(SELECT id FROM pick WHERE lapsed))",
            ",
             requeued AS (
                 INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, attempts,
                                            max_attempts, enqueued_at, last_error, payload)
                 SELECT id, $1, 0, priority, due_at, attempts, max_attempts, enqueued_at,
                        last_error, payload
                 FROM lapsed
                 WHERE attempts < max_attempts
                       AND id <> ALL(ARRAY(SELECT id FROM pick WHERE lapsed))
                 RETURNING 1
             )",
            format!(
                "UNION ALL
                 SELECT 2, count(*), CASE WHEN count(*) > 0 THEN {notify} END, 0, 0, 0::bigint,
                        NULL::bytea, NULL::bigint[]
                 FROM requeued HAVING count(*) > 0"
            ),
        )
    } else {
        (String::new(), "", "", "", "", String::new())
    };
    let ready = format!(
        "SELECT id, priority, due_at, octet_length(payload) > {LEASED_PAYLOAD_MAX} AS large,
                false AS lapsed
         FROM squeueha_jobs WHERE queue = $1 AND state = 0
         ORDER BY priority DESC, due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
    );
    // The ready jobs come in order already (without the timers, they are the pick: every step
    // between the scan and the delete costs, a CTE read twice is copied); with the timers, the
    // three sources are merged, and the claimed jobs joined by the expired leases' picked ones.
    let (pick, taken) = if timers {
        (
            format!(
                "ready AS ({ready}),
                 pick AS (
                     SELECT id, large, lapsed FROM (
                         SELECT id, priority, due_at, large, false AS lapsed FROM ready
                         {due_pick}
                         {lapsed_pick}
                     ) c
                     ORDER BY priority DESC, due_at, id LIMIT $2
                 )"
            ),
            format!(
                ",
                 taken AS (
                     SELECT id, priority, attempts, max_attempts, enqueued_at, last_error, payload
                     FROM claimed
                     {lapsed_taken}
                 )"
            ),
        )
    } else {
        (format!("pick AS ({ready})"), String::new())
    };
    let taken_from = if timers { "taken" } else { "claimed" };
    // The quick ack's ids come as one array per lease row, not a row each (measured: 6% of the
    // server's time in a claim of 32).
    let acked_rows = if whole {
        "SELECT 0, 0::bigint, 0, 0, 0, 0::bigint, NULL::bytea, ids FROM gone"
    } else {
        "SELECT 0, id, 0, 0, 0, 0::bigint, NULL::bytea, NULL::bigint[] FROM acked"
    };
    format!(
        "WITH {acks},
         {timer_ctes}
         {pick},
         claimed AS (
             DELETE FROM squeueha_jobs j
             WHERE j.id = ANY(ARRAY(SELECT id FROM pick WHERE NOT lapsed AND NOT large))
             RETURNING j.id, j.priority, j.attempts + 1 AS attempts, j.max_attempts,
                       j.enqueued_at, j.last_error, j.payload
         ){rows_cte}{taken},
         leased AS (
             INSERT INTO squeueha_leases (token, queue, expires_at, ids, jobs)
             SELECT $3, $1, $4, array_agg(id),
                    array_agg(ROW(id, priority, attempts, max_attempts, enqueued_at, last_error,
                                  payload)::squeueha_leased)
             FROM {taken_from} HAVING count(*) > 0
             RETURNING 1
         ){requeued_ctes},
         unused AS (SELECT $5::bigint, $8::bigint[], $9::bigint[], $10::text)
         {acked_rows}
         UNION ALL
         SELECT 1, id, priority, attempts, max_attempts, enqueued_at, payload, NULL::bigint[]
         FROM {taken_from}
         UNION ALL
         {rows_out}
         {requeued_rows}"
    )
}

/// Which claim statement: what it does besides taking ready jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClaimVariant {
    /// Acked jobs are kept as done.
    retain: bool,
    /// It looks at the due timers.
    timers: bool,
    /// Some acked leases are large jobs' rows.
    ack_large: bool,
    /// Large ready jobs are claimed (else counted and left).
    claim_large: bool,
    /// The quick ack of whole batches under one token.
    whole: bool,
}

impl ClaimVariant {
    fn index(self) -> usize {
        usize::from(self.retain)
            | usize::from(self.timers) << 1
            | usize::from(self.ack_large) << 2
            | usize::from(self.claim_large) << 3
            | usize::from(self.whole) << 4
    }
}

/// Every claim statement, by [`ClaimVariant::index`] (made once; the unused parameters are
/// declared in an unread CTE, so that every variant takes the same ten).
static CLAIMS: LazyLock<Vec<String>> = LazyLock::new(|| {
    (0..32usize)
        .map(|i| {
            claim_sql(ClaimVariant {
                retain: i & 1 != 0,
                timers: i & 2 != 0,
                ack_large: i & 4 != 0,
                claim_large: i & 8 != 0,
                whole: i & 16 != 0,
            })
        })
        .collect()
});

/// What a claim looks at besides the ready jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timers {
    /// The due timers too: delayed jobs whose time came, expired leases.
    Due,
    /// Ready jobs only (a third cheaper); the caller looks at the timers often enough.
    Skip,
}

/// What a claim did besides acking.
pub(crate) struct Claimed {
    pub(crate) jobs: Vec<Job>,
    /// Large ready jobs that it left (claimed with [`ack_and_claim`]'s `claim_large`).
    pub(crate) large_left: bool,
    /// Leases that the quick ack of whole batches left: part of a batch, or stale. The caller
    /// acks them with [`ack_many`] (not in the claim's retried closure: the claim is done).
    pub(crate) unacked: Vec<Lease>,
}

/// Acks `leases` (stale ones reported) and claims up to `n` jobs of `queue`, in one statement.
/// Without `claim_large`, large ready jobs (payloads over [`LEASED_PAYLOAD_MAX`]) among the first
/// `n` are left, and said so: the caller claims them next, in order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ack_and_claim<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    leases: &[Lease],
    queue: &str,
    n: usize,
    visibility_ms: i64,
    token: i64,
    timers: Timers,
    claim_large: bool,
    cfg: &Config,
    now: Millis,
) -> Result<(AckReport, Claimed)> {
    check_queue_name(queue)?;
    // The batch's lease row has an even token; the large jobs' own rows that token plus one.
    let token = token & !1;
    if leases.iter().any(|l| l.token & !1 == token) {
        // The claim would write a lease that these acks change (a caller's transaction that
        // claims and acks under one token): ack first, in a statement of its own.
        let report = ack_many(ctx, leases, cfg, now)?;
        let (_, claimed) = ack_and_claim(
            ctx,
            &[],
            queue,
            n,
            visibility_ms,
            token,
            timers,
            claim_large,
            cfg,
            now,
        )?;
        return Ok((report, claimed));
    }
    let expires = now.saturating_add(visibility_ms.max(1));
    let acks = AckArrays::of(leases);
    let variant = ClaimVariant {
        retain: cfg.retain_done.is_some(),
        timers: timers == Timers::Due,
        ack_large: !acks.large_ids.is_empty(),
        claim_large,
        // The common case: the whole previous batch, acked with the next claim.
        whole: acks.large_ids.is_empty()
            && acks
                .tokens
                .first()
                .is_some_and(|t| acks.tokens.iter().all(|u| u == t)),
    };
    let origin = ctx.origin;
    let rows = ctx.query(
        CLAIMS[variant.index()].as_str(),
        &[
            &queue,
            &limit(n),
            &token,
            &expires,
            &now,
            &acks.ids,
            &acks.tokens,
            &acks.large_ids,
            &acks.large_tokens,
            &origin,
        ],
    )?;
    let mut acked: Vec<i64> = Vec::new();
    let mut jobs = Vec::with_capacity(rows.len());
    let mut large_left = false;
    for r in rows {
        let kind = r.get::<_, i32>(0);
        if kind == 0 {
            match r.get::<_, Option<Vec<i64>>>(7) {
                Some(ids) => acked.extend(ids),
                None => acked.push(r.get(1)),
            }
        } else if kind == 4 {
            large_left = true;
        } else if kind == 1 || kind == 3 {
            let id: i64 = r.get(1);
            jobs.push(Job {
                id,
                queue: queue.to_owned(),
                priority: r.get(2),
                attempts: unsigned(r.get(3)),
                max_attempts: unsigned(r.get(4)),
                enqueued_at: r.get(5),
                payload: r.get(6),
                lease_expires_at: expires,
                lease: Lease {
                    job_id: id,
                    token: if kind == 3 { token | 1 } else { token },
                },
            });
        }
    }
    jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
    // The quick ack takes whole batches or nothing: what it left (part of a batch, or stale
    // leases) goes to the general ack, which tells them apart.
    let unacked: Vec<Lease> = if variant.whole && acked.len() < leases.len() {
        leases
            .iter()
            .filter(|l| !acked.contains(&l.job_id))
            .copied()
            .collect()
    } else {
        Vec::new()
    };
    let mut report = ack_report(leases, &acked);
    report
        .stale
        .retain(|id| !unacked.iter().any(|l| l.job_id == *id));
    Ok((
        report,
        Claimed {
            jobs,
            large_left,
            unacked,
        },
    ))
}

fn ack_report(leases: &[Lease], acked: &[i64]) -> AckReport {
    AckReport {
        acked: acked.len(),
        stale: leases
            .iter()
            .map(|l| l.job_id)
            .filter(|id| !acked.contains(id))
            .collect(),
    }
}

/// Leases to ack as the statements take them: the small jobs' (even tokens) apart from the large
/// jobs' (odd tokens: their own rows).
struct AckArrays {
    ids: Vec<i64>,
    tokens: Vec<i64>,
    large_ids: Vec<i64>,
    large_tokens: Vec<i64>,
}

impl AckArrays {
    fn of(leases: &[Lease]) -> Self {
        let (large, small): (Vec<&Lease>, Vec<&Lease>) =
            leases.iter().partition(|l| l.token & 1 == 1);
        AckArrays {
            ids: small.iter().map(|l| l.job_id).collect(),
            tokens: small.iter().map(|l| l.token).collect(),
            large_ids: large.iter().map(|l| l.job_id).collect(),
            large_tokens: large.iter().map(|l| l.token).collect(),
        }
    }
}

/// The ack statements, by (retain, large jobs acked), each taking the same five parameters.
static ACKS: LazyLock<Vec<String>> = LazyLock::new(|| {
    (0..4usize)
        .map(|i| {
            format!(
                "WITH {}, unused AS (SELECT $3::bigint[], $4::bigint[], $5::bigint)
                 SELECT id FROM acked",
                ack_ctes(
                    ["$1", "$2", "$3", "$4"],
                    "$5",
                    i & 1 != 0,
                    i & 2 != 0,
                    false
                )
            )
        })
        .collect()
});

/// Acks many leases in one statement.
pub(crate) fn ack_many<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    leases: &[Lease],
    cfg: &Config,
    now: Millis,
) -> Result<AckReport> {
    if leases.is_empty() {
        return Ok(AckReport::default());
    }
    let a = AckArrays::of(leases);
    let variant =
        usize::from(cfg.retain_done.is_some()) | usize::from(!a.large_ids.is_empty()) << 1;
    let rows = ctx.query(
        ACKS[variant].as_str(),
        &[&a.ids, &a.tokens, &a.large_ids, &a.large_tokens, &now],
    )?;
    let acked: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    Ok(ack_report(leases, &acked))
}

static BURY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH {LEASE_TAKE_CTES},
         own_row AS (
             DELETE FROM squeueha_jobs WHERE id = $1 AND lease_token = $2 AND state = 1
             RETURNING queue, id, priority, attempts, max_attempts, enqueued_at, last_error, payload
         )
         INSERT INTO squeueha_dead
             (id, queue, priority, attempts, max_attempts, enqueued_at, died_at, last_error, payload)
         SELECT id, queue, priority, attempts, max_attempts, enqueued_at, $3, $4, payload
         FROM (SELECT queue, id, priority, attempts, max_attempts, enqueued_at, payload
               FROM from_lease
               UNION ALL
               SELECT queue, id, priority, attempts, max_attempts, enqueued_at, payload
               FROM own_row) t"
    )
});

/// Sends a claimed job to the dead letters; `StaleLease` unless `lease` holds it.
pub(crate) fn bury<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    lease: Lease,
    reason: &str,
    now: Millis,
) -> Result<()> {
    let moved = ctx.execute(BURY.as_str(), &[&lease.job_id, &lease.token, &now, &reason])?;
    if moved > 0 {
        Ok(())
    } else {
        Err(Error::StaleLease {
            job_id: lease.job_id,
        })
    }
}

/// Puts a claimed job back as ready (`$3` = 0, notified with origin `$7`) or delayed (`$3` = 2)
/// until `$4`, with `$5` as its last error (kept when NULL) and `$6` taken off its attempts.
static GIVE_BACK: LazyLock<String> = LazyLock::new(|| {
    let notify = notify_expr("$7", "t.queue");
    format!(
        "WITH {LEASE_TAKE_CTES},
         back AS (
             INSERT INTO squeueha_jobs (id, queue, state, priority, due_at, attempts, max_attempts,
                                        enqueued_at, last_error, payload)
             SELECT id, queue, $3, priority, $4, greatest(attempts - $6, 0), max_attempts,
                    enqueued_at, coalesce($5, last_error), payload
             FROM from_lease RETURNING queue
         ),
         own_row AS (
             UPDATE squeueha_jobs
             SET state = $3, due_at = $4, lease_token = NULL, attempts = greatest(attempts - $6, 0),
                 last_error = coalesce($5, last_error)
             WHERE id = $1 AND lease_token = $2 AND state = 1 RETURNING queue
         )
         SELECT t.queue, CASE WHEN $3 = 0 THEN {notify} END
         FROM (SELECT queue FROM back UNION ALL SELECT queue FROM own_row) t"
    )
});

/// Puts a claimed job back, ready when `delay_ms` is not positive, else delayed until `now` plus
/// it; `StaleLease` unless `lease` holds it. Returns when it becomes ready.
fn give_back<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    lease: Lease,
    delay_ms: i64,
    now: Millis,
    error: Option<&str>,
    refund_attempt: bool,
) -> Result<Millis> {
    let state = if delay_ms <= 0 { READY } else { DELAYED };
    let at = now.saturating_add(delay_ms.max(0));
    let origin = ctx.origin;
    let row = ctx.query_opt(
        GIVE_BACK.as_str(),
        &[
            &lease.job_id,
            &lease.token,
            &state,
            &at,
            &error,
            &i32::from(refund_attempt),
            &origin,
        ],
    )?;
    row.map(|_| at).ok_or(Error::StaleLease {
        job_id: lease.job_id,
    })
}

/// Nack: the attempt counts (dead letters when used up). Run in a transaction.
pub(crate) fn nack<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    lease: Lease,
    error: &str,
    delay_ms: Option<i64>,
    cfg: &Config,
    now: Millis,
) -> Result<Nacked> {
    let mut row = ctx.query_opt(
        "SELECT x.attempts, x.max_attempts FROM squeueha_leases s, unnest(s.jobs) x
         WHERE s.token = $2 AND $1 = ANY(s.ids) AND x.id = $1 FOR UPDATE OF s",
        &[&lease.job_id, &lease.token],
    )?;
    if row.is_none() {
        row = ctx.query_opt(
            "SELECT attempts, max_attempts FROM squeueha_jobs
             WHERE id = $1 AND lease_token = $2 AND state = 1 FOR UPDATE",
            &[&lease.job_id, &lease.token],
        )?;
    }
    let Some(row) = row else {
        return Err(Error::StaleLease {
            job_id: lease.job_id,
        });
    };
    let (attempts, max_attempts) = (unsigned(row.get(0)), unsigned(row.get(1)));
    let Some(delay) = cfg.nack_delay(attempts, max_attempts, delay_ms) else {
        bury(ctx, lease, error, now)?;
        return Ok(Nacked::Dead);
    };
    let at = give_back(ctx, lease, delay, now, Some(error), false)?;
    Ok(Nacked::Retry { at })
}

/// Gives a claimed job back without counting the attempt.
pub(crate) fn release<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    lease: Lease,
    delay_ms: i64,
    now: Millis,
) -> Result<()> {
    give_back(ctx, lease, delay_ms, now, None, true).map(|_| ())
}

/// Extends the lease that holds `lease`'s job. A small job's lease is its claimed batch's, so the
/// batch's other jobs are extended with it, and its expiry is never brought forward (another job
/// of the batch may have been extended further); a large job's is its own.
pub(crate) fn extend<C: GenericClient>(
    ctx: &mut Ctx<'_, C>,
    lease: Lease,
    visibility_ms: i64,
    now: Millis,
) -> Result<Millis> {
    let until = now.saturating_add(visibility_ms.max(1));
    ctx.query_opt(
        "WITH batch AS (
             UPDATE squeueha_leases s SET expires_at = greatest(s.expires_at, $3)
             WHERE s.token = $2 AND $1 = ANY(s.ids)
             RETURNING s.expires_at
         ),
         own_row AS (
             UPDATE squeueha_jobs SET due_at = $3
             WHERE id = $1 AND lease_token = $2 AND state = 1 RETURNING due_at
         )
         SELECT expires_at FROM batch UNION ALL SELECT due_at FROM own_row",
        &[&lease.job_id, &lease.token, &until],
    )?
    .map(|r| r.get(0))
    .ok_or(Error::StaleLease {
        job_id: lease.job_id,
    })
}

/// Fails with `StaleLease` unless `lease` is the job's current lease (and locks the lease until the
/// transaction ends, so it cannot expire into another claim before the commit).
pub(crate) fn check_lease<C: GenericClient>(ctx: &mut Ctx<'_, C>, lease: Lease) -> Result<()> {
    let held = ctx
        .query_opt(
            "SELECT 1 FROM squeueha_leases s
             WHERE s.token = $2 AND $1 = ANY(s.ids)
             FOR UPDATE",
            &[&lease.job_id, &lease.token],
        )?
        .is_some()
        || ctx
            .query_opt(
                "SELECT 1 FROM squeueha_jobs WHERE id = $1 AND lease_token = $2 AND state = 1
                 FOR UPDATE",
                &[&lease.job_id, &lease.token],
            )?
            .is_some();
    if held {
        Ok(())
    } else {
        Err(Error::StaleLease {
            job_id: lease.job_id,
        })
    }
}
