//! Storage of documents, pages, tiles, text (full-text indexed), tables (JSON), text embeddings
//! and visual multi-vectors, on SQLite (FTS5) or PostgreSQL (`tsvector`); the searches over them
//! are in `search`, the per-document report in `report`.
//!
//! Every function takes a [`Db`]: a queue transaction, so that the pipeline's stages record a
//! result, ack the job and enqueue the next stage atomically; a [`Reads`] handle on the queue's
//! read pool for searches and reports; or, on SQLite, a plain connection on the same file.

use squeueha::{Row, Value, params};

use crate::chunk::Chunk;
use crate::maxsim::{MultiVector, f32s_to_le_bytes};
use crate::quant::{Int8Rows, to_f16_bytes};
use crate::tiling::Tile;
use crate::vision::Reading;

mod collections;
mod db;
mod delete;
mod documents;
mod export;
mod fold;
mod markdown;
mod page_hit;
mod pages;
mod paths;
mod postgres;
mod report;
mod search;
mod snippet;
mod text_index;
mod visual;
mod visual_cache;

pub use collections::{
    Readable, SCHEMA_V9, document_readable, documents_within, keep_readable, readable_documents,
};
pub(crate) use db::is_postgres;
pub use db::{Db, Reads};
pub use delete::{Deleted, delete_document, rows_of_document};
pub use documents::{
    DocStatus, Document, document, document_by_sha, documents, fail_document,
    has_pending_documents, insert_document, insert_document_in, is_pending, set_page_count,
};
pub use export::{DocumentExport, ExportFormat, ExportedPage, PageLine, document_export};
pub use markdown::{DocumentMarkdown, PageMarkdown, document_markdown, page_markdown};
pub use pages::{
    PageFailed, PageSummary, SCHEMA_V4, SCHEMA_V8, document_pages, insert_failed_page,
    set_page_rotation,
};
pub use paths::{path_from_bytes, path_to_bytes};
pub use postgres::{POSTGRES_SCHEMA, POSTGRES_V5};
pub use report::{CostModel, FailedPage, Report, StageTime, add_stage_time, failed_pages, report};
pub use search::{
    PageHit, page_tables, page_text, search_text, search_text_in, search_user_text,
    search_user_text_in, search_vectors, search_vectors_in, user_terms, words_query,
};
pub use text_index::{IndexSettings, Synced, TextVectorIndex};
pub use visual::{
    VISUAL_RERANK_MIN, load_int8_index, load_visual_index, page_vectors, search_visual,
    visual_models,
};
pub use visual_cache::{
    Prepared, SCAN_MAX_PAGES, VisualIndexCache, VisualIndexSettings, search_visual_cached,
};

/// Storage errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed (opening or migrating a file).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database failed (either backend), or its tables could not be brought to this build's
    /// schema (among others: the database was written by a newer release,
    /// `squeueha::Error::SchemaTooNew`).
    #[error("database: {0}")]
    Database(#[from] squeueha::Error),
    /// Stored JSON could not be read back.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A row the caller relies on does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A full-text query the backend cannot run (PostgreSQL takes the FTS5 syntax of quoted
    /// terms, `*` prefixes, `AND` and `OR`; [`search_user_text`] never builds another).
    #[error("query: {0}")]
    Query(String),
    /// A visual index could not be built from the stored vectors.
    #[error("visual index: {0}")]
    Index(#[from] crate::maxsim::IndexError),
    /// A stored collection name is not one (the row was written by hand).
    #[error("stored document: {0}")]
    Collection(#[from] horos_server_control::InvalidCollection),
}

/// Result of the storage functions.
pub type Result<T> = std::result::Result<T, StoreError>;

/// Version 1 of the store's schema (idempotent: files written before the store was versioned are
/// adopted unchanged).
pub const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS ip_documents (
    id INTEGER PRIMARY KEY,
    sha256 TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    path TEXT NOT NULL,
    pages INTEGER,
    rendered INTEGER NOT NULL DEFAULT 0,
    done_pages INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending',
    error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS ip_pages (
    doc_id INTEGER NOT NULL REFERENCES ip_documents(id),
    page_no INTEGER NOT NULL,
    width INTEGER NOT NULL,
    height INTEGER NOT NULL,
    image_bytes INTEGER NOT NULL,
    image_path TEXT NOT NULL,
    tiles INTEGER NOT NULL,
    rendered_at REAL NOT NULL,
    reading TEXT,
    read_done INTEGER NOT NULL DEFAULT 0,
    text TEXT,
    figures TEXT,
    reader TEXT,
    stored INTEGER NOT NULL DEFAULT 0,
    text_embedded INTEGER NOT NULL DEFAULT 0,
    visual_embedded INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (doc_id, page_no)
);
CREATE TABLE IF NOT EXISTS ip_tiles (
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    tile_index INTEGER NOT NULL,
    tile TEXT NOT NULL,
    reading TEXT NOT NULL,
    PRIMARY KEY (doc_id, page_no, tile_index)
);
CREATE VIRTUAL TABLE IF NOT EXISTS ip_page_fts USING fts5(
    text, doc_id UNINDEXED, page_no UNINDEXED, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS ip_tables (
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    table_index INTEGER NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (doc_id, page_no, table_index)
);
CREATE TABLE IF NOT EXISTS ip_chunks (
    id INTEGER PRIMARY KEY,
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    token_start INTEGER NOT NULL,
    token_end INTEGER NOT NULL,
    text TEXT NOT NULL,
    model TEXT,
    dim INTEGER,
    vector BLOB,
    UNIQUE (doc_id, page_no, chunk_index)
);
CREATE TABLE IF NOT EXISTS ip_page_vectors (
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    count INTEGER NOT NULL,
    vectors BLOB NOT NULL,
    PRIMARY KEY (doc_id, page_no)
);
CREATE TABLE IF NOT EXISTS ip_stage_stats (
    doc_id INTEGER NOT NULL,
    stage TEXT NOT NULL,
    jobs INTEGER NOT NULL,
    seconds REAL NOT NULL,
    inference_seconds REAL NOT NULL,
    PRIMARY KEY (doc_id, stage)
);
"#;

/// Seconds since the Unix epoch (with a fraction).
fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Version 2: a document's path as the exact bytes it was submitted with (a file name need not
/// be UTF-8; `path` keeps its display form), the ids of deleted documents, so that an id is
/// never given to another document (a job of the deleted one still queued must find nothing),
/// the pending documents' index (the dead-letter sweep asks for one every few seconds), the
/// full-text rows of each page (the FTS5 table's `doc_id` is not indexed: without them, deleting
/// a document would read every page's text), and a tiled page's fan-in parent (deleted with it).
pub const SCHEMA_V2: &str = r#"
ALTER TABLE ip_documents ADD COLUMN path_bytes BLOB;
ALTER TABLE ip_pages ADD COLUMN fan_in_parent INTEGER;
CREATE INDEX IF NOT EXISTS ip_documents_pending ON ip_documents (id) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS ip_page_fts_rows (
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    fts_rowid INTEGER NOT NULL,
    PRIMARY KEY (doc_id, page_no, fts_rowid)
) WITHOUT ROWID;
INSERT OR IGNORE INTO ip_page_fts_rows (doc_id, page_no, fts_rowid)
    SELECT doc_id, page_no, rowid FROM ip_page_fts;
CREATE TABLE IF NOT EXISTS ip_deleted_documents (
    id INTEGER PRIMARY KEY,
    sha256 TEXT NOT NULL,
    title TEXT NOT NULL,
    deleted_at REAL NOT NULL
);
"#;

/// Version 3: visual multi-vectors stored compactly. `vectors` of a new row holds half floats
/// (`encoding = 'f16'`, the exact copy reranking reads); `ip_page_codes` holds the same vectors
/// as int8 codes with one scale per vector ([`crate::quant::Int8Rows`]), the copy MaxSim scans,
/// in a table of its own: SQLite reads a column after a large blob by walking that blob's
/// overflow pages, so codes stored beside the half floats would cost reading both. Rows written
/// before keep `encoding = 'f32'` and have no codes (quantised when loaded). A visual search
/// reads one model's rows, by the indexes on `(model, dim)`.
pub const SCHEMA_V3: &str = r#"
ALTER TABLE ip_page_vectors ADD COLUMN encoding TEXT NOT NULL DEFAULT 'f32';
CREATE INDEX IF NOT EXISTS ip_page_vectors_model ON ip_page_vectors (model, dim);
CREATE TABLE IF NOT EXISTS ip_page_codes (
    doc_id INTEGER NOT NULL,
    page_no INTEGER NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    count INTEGER NOT NULL,
    int8 BLOB NOT NULL,
    PRIMARY KEY (doc_id, page_no)
);
CREATE INDEX IF NOT EXISTS ip_page_codes_model ON ip_page_codes (model, dim);
"#;

/// Version 5 changes PostgreSQL's full-text column only ([`postgres::POSTGRES_V5`]): FTS5's
/// tokenizer already splits words at punctuation.
pub const SCHEMA_V5: &str = "SELECT 1";

/// Version 6 indexes the chunks that have no vector yet (a partial index, the same on
/// PostgreSQL): the in-memory text-vector index ([`TextVectorIndex`]) finds which chunks were
/// given one since it last looked without reading the others.
pub const SCHEMA_V6: &str =
    "CREATE INDEX IF NOT EXISTS ip_chunks_unembedded ON ip_chunks (id) WHERE vector IS NULL;";

/// Version 7: a change counter per visual model (`ip_visual_changes`: a generation and the
/// model's page count), kept by triggers on `ip_page_vectors` (every visual page has a row there;
/// its int8 codes are written and deleted in the same transaction). The visual index cache reads
/// it before each question to learn whether the model's pages changed: one row by its key,
/// where counting the model's rows cost a read of every row (O(pages)). An upsert of a page's
/// row counts as its removal and its addition.
pub const SCHEMA_V7: &str = r#"
CREATE TABLE IF NOT EXISTS ip_visual_changes (
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    PRIMARY KEY (model, dim)
);
INSERT OR REPLACE INTO ip_visual_changes (model, dim, generation, pages)
    SELECT model, dim, 1, count(*) FROM ip_page_vectors GROUP BY model, dim;
CREATE TRIGGER IF NOT EXISTS ip_page_vectors_added AFTER INSERT ON ip_page_vectors BEGIN
    INSERT INTO ip_visual_changes (model, dim, generation, pages) VALUES (NEW.model, NEW.dim, 1, 1)
    ON CONFLICT (model, dim) DO UPDATE SET generation = generation + 1, pages = pages + 1;
END;
CREATE TRIGGER IF NOT EXISTS ip_page_vectors_removed AFTER DELETE ON ip_page_vectors BEGIN
    UPDATE ip_visual_changes SET generation = generation + 1, pages = pages - 1
    WHERE model = OLD.model AND dim = OLD.dim;
END;
CREATE TRIGGER IF NOT EXISTS ip_page_vectors_replaced AFTER UPDATE ON ip_page_vectors BEGIN
    UPDATE ip_visual_changes SET generation = generation + 1, pages = pages - 1
    WHERE model = OLD.model AND dim = OLD.dim;
    INSERT INTO ip_visual_changes (model, dim, generation, pages) VALUES (NEW.model, NEW.dim, 1, 1)
    ON CONFLICT (model, dim) DO UPDATE SET generation = generation + 1, pages = pages + 1;
END;
"#;

/// The store's migrations (namespace `ingest_pipeline` of squeueha's migrator); on PostgreSQL
/// version 1 builds the tables of version 4 at once ([`POSTGRES_SCHEMA`]).
pub const MIGRATIONS: squeueha::Migrations = squeueha::Migrations::new(
    "ingest_pipeline",
    &[
        squeueha::Migration {
            version: 1,
            sql: SCHEMA,
        },
        squeueha::Migration {
            version: 2,
            sql: SCHEMA_V2,
        },
        squeueha::Migration {
            version: 3,
            sql: SCHEMA_V3,
        },
        squeueha::Migration {
            version: 4,
            sql: SCHEMA_V4,
        },
        squeueha::Migration {
            version: 5,
            sql: SCHEMA_V5,
        },
        squeueha::Migration {
            version: 6,
            sql: SCHEMA_V6,
        },
        squeueha::Migration {
            version: 7,
            sql: SCHEMA_V7,
        },
        squeueha::Migration {
            version: 8,
            sql: SCHEMA_V8,
        },
        squeueha::Migration {
            version: 9,
            sql: SCHEMA_V9,
        },
    ],
)
.with_postgres(postgres::MIGRATIONS);

/// Brings the tables of a SQLite file to this build's schema (and enlarges the connection's
/// statement cache). A file written by a newer release is refused with [`StoreError::Database`]
/// and left unchanged.
pub fn migrate(conn: &rusqlite::Connection) -> Result<()> {
    MIGRATIONS.apply(conn)?;
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Brings the store's tables to this build's schema in a queue transaction, on either backend
/// (on PostgreSQL under a lock, so nodes starting at once build them once).
pub fn migrate_in(tx: &mut squeueha::QueueTx<'_>) -> Result<()> {
    MIGRATIONS.apply_in_tx(tx)?;
    Ok(())
}

/// Runs a statement; the rows changed.
fn exec(db: &mut dyn Db, sql: &str, p: &[Value]) -> Result<u64> {
    Ok(db.execute(sql, p)?)
}

/// The first row of a query, if any.
fn row(db: &mut dyn Db, sql: &str, p: &[Value]) -> Result<Option<Row>> {
    Ok(db.query(sql, p)?.into_iter().next())
}

/// The first row of a query that always returns one (an aggregate).
fn one(db: &mut dyn Db, sql: &str, p: &[Value]) -> Result<Row> {
    row(db, sql, p)?.ok_or_else(|| StoreError::NotFound(format!("a row of `{sql}`")))
}

/// A rendered page to record.
#[derive(Debug, Clone)]
pub struct PageImage<'a> {
    /// Document.
    pub doc_id: i64,
    /// Page number from 1.
    pub page_no: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Encoded size.
    pub image_bytes: u64,
    /// Where the PNG is.
    pub image_path: &'a str,
    /// Tiles it was cut into (1 when not tiled).
    pub tiles: u32,
}

/// Records a rendered page; returns false when it was already recorded.
pub fn insert_page(db: &mut dyn Db, p: &PageImage<'_>) -> Result<bool> {
    Ok(exec(db,
        "INSERT INTO ip_pages (doc_id, page_no, width, height, image_bytes, image_path, tiles, rendered_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
        params![p.doc_id, p.page_no, p.width, p.height, p.image_bytes as i64, p.image_path, p.tiles, now_s()],
    )? == 1)
}

/// Records the fan-in parent of a tiled page (its tiles' readings), to delete with the page.
pub fn set_page_fan_in(db: &mut dyn Db, doc_id: i64, page_no: u32, parent: i64) -> Result<()> {
    exec(
        db,
        "UPDATE ip_pages SET fan_in_parent = ?3 WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no, parent],
    )?;
    Ok(())
}

/// The highest page number recorded for a document (0 when none): where rendering resumes.
pub fn last_rendered_page(db: &mut dyn Db, doc_id: i64) -> Result<u32> {
    Ok(one(
        db,
        "SELECT COALESCE(MAX(page_no), 0) FROM ip_pages WHERE doc_id = ?1",
        params![doc_id],
    )?
    .get(0)?)
}

/// A page row's rendering facts.
#[derive(Debug, Clone, PartialEq)]
pub struct PageInfo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Where the PNG is.
    pub image_path: String,
    /// Number of tiles.
    pub tiles: u32,
    /// When it was rendered (seconds since the epoch).
    pub rendered_at: f64,
}

/// Facts about a rendered page.
pub fn page_info(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Option<PageInfo>> {
    let Some(r) = row(
        db,
        "SELECT width, height, image_path, tiles, rendered_at FROM ip_pages WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(PageInfo {
        width: r.get(0)?,
        height: r.get(1)?,
        image_path: r.get(2)?,
        tiles: r.get(3)?,
        rendered_at: r.get(4)?,
    }))
}

/// Records the reading of a whole (untiled) page. Returns true exactly once per page: the
/// caller then triggers the next stage.
pub fn record_page_reading(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    reading: &Reading,
) -> Result<bool> {
    let json = serde_json::to_string(reading)?;
    Ok(exec(
        db,
        "UPDATE ip_pages SET reading = ?3, read_done = 1 WHERE doc_id = ?1 AND page_no = ?2 AND read_done = 0",
        params![doc_id, page_no, json],
    )? == 1)
}

/// Records one tile's reading (once; a repeated report is ignored). Returns true exactly once
/// per page, when its last tile arrives: the fan-in completes and the caller triggers the next
/// stage.
pub fn record_tile_reading(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    tile: &Tile,
    reading: &Reading,
) -> Result<bool> {
    // The page's row locked first on PostgreSQL: two nodes recording its last tiles at once
    // then count each other's tiles, one after the other (SQLite has one writer), and a page
    // deleted meanwhile gets no tile.
    let Some(r) = lock_page(db, doc_id, page_no)? else {
        return Ok(false);
    };
    exec(
        db,
        "INSERT INTO ip_tiles (doc_id, page_no, tile_index, tile, reading) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO NOTHING",
        params![
            doc_id,
            page_no,
            tile.index,
            serde_json::to_string(tile)?,
            serde_json::to_string(reading)?
        ],
    )?;
    let want: u32 = r.get(0)?;
    let have: u32 = one(
        db,
        "SELECT COUNT(*) FROM ip_tiles WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    .get(0)?;
    if have < want {
        return Ok(false);
    }
    Ok(exec(
        db,
        "UPDATE ip_pages SET read_done = 1 WHERE doc_id = ?1 AND page_no = ?2 AND read_done = 0",
        params![doc_id, page_no],
    )? == 1)
}

/// A page's whole-page reading and its tiles' readings.
pub type PageReadings = (Option<Reading>, Vec<(Tile, Reading)>);

/// The readings of a page: the whole-page reading, or its tiles' readings in tile order.
pub fn page_readings(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<PageReadings> {
    let whole: Option<String> = row(
        db,
        "SELECT reading FROM ip_pages WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    .map(|r| r.get(0))
    .transpose()?
    .flatten();
    let whole = whole.map(|s| serde_json::from_str(&s)).transpose()?;
    let rows = db.query(
        "SELECT tile, reading FROM ip_tiles WHERE doc_id = ?1 AND page_no = ?2 ORDER BY tile_index",
        params![doc_id, page_no],
    )?;
    let mut tiles = Vec::with_capacity(rows.len());
    for r in rows {
        let (t, reading): (String, String) = (r.get(0)?, r.get(1)?);
        tiles.push((serde_json::from_str(&t)?, serde_json::from_str(&reading)?));
    }
    Ok((whole, tiles))
}

/// Stores a page's final text (indexed for full-text search), tables and figures, the reader
/// that read it (its name, `reader`, and [`Reading::read_by`]), its rotation (the reader's
/// [`Reading::rotation`] added to the page's turn at rendering, [`set_page_rotation`]), and its
/// chunks, once: the `stored` flag and the rows change in the caller's transaction, so a second
/// call (a redelivered job) changes nothing and returns false.
pub fn store_page_text(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    reading: &Reading,
    reader: &str,
    chunks: &[Chunk],
) -> Result<bool> {
    let (tables, figures) = (&reading.tables, &reading.figures);
    // PostgreSQL's text cannot hold NUL (a reader or a text layer may give one): dropped on
    // both backends, so that a page reads the same on either.
    let text = &without_nul(&reading.text);
    let changed = exec(
        db,
        "UPDATE ip_pages SET text = ?3, figures = ?4, reader = ?5, read_by = ?6,
                rotation = (rotation + ?7) % 360,
                stored = 1
         WHERE doc_id = ?1 AND page_no = ?2 AND stored = 0",
        params![
            doc_id,
            page_no,
            text,
            serde_json::to_string(figures)?,
            reader,
            reading.read_by.map(|r| r.as_str()),
            reading.rotation
        ],
    )?;
    if changed == 0 {
        return Ok(false);
    }
    let fts_text = if figures.is_empty() {
        text.clone()
    } else {
        without_nul(&format!("{text}\n{}", figures.join("\n")))
    };
    search::index_page_text(db, doc_id, page_no, fts_text)?;
    for (i, t) in tables.iter().enumerate() {
        exec(
            db,
            "INSERT INTO ip_tables (doc_id, page_no, table_index, json) VALUES (?1, ?2, ?3, ?4)",
            params![doc_id, page_no, i as i64, t.to_string()],
        )?;
    }
    for c in chunks {
        exec(
            db,
            "INSERT INTO ip_chunks (doc_id, page_no, chunk_index, token_start, token_end, text) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                doc_id,
                page_no,
                c.index,
                c.token_start as i64,
                c.token_end as i64,
                without_nul(&c.text)
            ],
        )?;
    }
    Ok(true)
}

/// Page `page_no`'s tile count, its row locked until the transaction ends on PostgreSQL
/// (`FOR UPDATE`: a concurrent writer of the page, or [`delete_document`], waits); `None` when the
/// page is not recorded (its document deleted meanwhile).
fn lock_page(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Option<Row>> {
    let lock = if is_postgres(db) { " FOR UPDATE" } else { "" };
    row(
        db,
        &format!("SELECT tiles FROM ip_pages WHERE doc_id = ?1 AND page_no = ?2{lock}"),
        params![doc_id, page_no],
    )
}

/// `s` without NUL characters.
fn without_nul(s: &str) -> String {
    s.replace('\0', "")
}

/// The chunks of a page: `(chunk id, text)` in order.
pub fn page_chunks(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Vec<(i64, String)>> {
    db.query(
        "SELECT id, text FROM ip_chunks WHERE doc_id = ?1 AND page_no = ?2 ORDER BY chunk_index",
        params![doc_id, page_no],
    )?
    .iter()
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .collect()
}

/// Stores chunk embeddings.
pub fn store_chunk_vectors(
    db: &mut dyn Db,
    ids: &[i64],
    vectors: &[Vec<f32>],
    model: &str,
) -> Result<()> {
    for (id, v) in ids.iter().zip(vectors) {
        exec(
            db,
            "UPDATE ip_chunks SET model = ?2, dim = ?3, vector = ?4 WHERE id = ?1",
            params![*id, model, v.len() as i64, f32s_to_le_bytes(v)],
        )?;
    }
    Ok(())
}

/// Stores a page's visual multi-vector compactly: half floats and int8 codes (schema v3).
/// Replaces the page's earlier vectors; on PostgreSQL, nothing when the page is not recorded.
pub fn store_page_vectors(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    mv: &MultiVector,
    model: &str,
) -> Result<()> {
    // On PostgreSQL another node may have deleted the document meanwhile: its page then gets no
    // vectors (SQLite's one writer runs the stage's check and this write in one transaction).
    if is_postgres(db) && lock_page(db, doc_id, page_no)?.is_none() {
        return Ok(());
    }
    let int8 = Int8Rows::quantize(&mv.data, mv.dim);
    let (dim, count) = (mv.dim as i64, mv.len() as i64);
    exec(
        db,
        "INSERT INTO ip_page_vectors (doc_id, page_no, model, dim, count, vectors, encoding)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'f16')
         ON CONFLICT (doc_id, page_no) DO UPDATE SET model = excluded.model, dim = excluded.dim,
             count = excluded.count, vectors = excluded.vectors, encoding = excluded.encoding",
        params![doc_id, page_no, model, dim, count, to_f16_bytes(&mv.data)],
    )?;
    exec(
        db,
        "INSERT INTO ip_page_codes (doc_id, page_no, model, dim, count, int8)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (doc_id, page_no) DO UPDATE SET model = excluded.model, dim = excluded.dim,
             count = excluded.count, int8 = excluded.int8",
        params![doc_id, page_no, model, dim, count, int8.to_bytes()],
    )?;
    Ok(())
}

/// The two embedding steps of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedStep {
    /// Text chunks embedded.
    Text,
    /// Visual multi-vector stored.
    Visual,
}

/// Marks an embedding step of a page done; when the page then has both, it is done, and when
/// every page of a fully rendered document is done, the document is. Returns whether this call
/// completed the document (true exactly once).
pub fn finish_step(db: &mut dyn Db, doc_id: i64, page_no: u32, step: EmbedStep) -> Result<bool> {
    let sql = match step {
        EmbedStep::Text => {
            "UPDATE ip_pages SET text_embedded = 1 WHERE doc_id = ?1 AND page_no = ?2"
        }
        EmbedStep::Visual => {
            "UPDATE ip_pages SET visual_embedded = 1 WHERE doc_id = ?1 AND page_no = ?2"
        }
    };
    exec(db, sql, params![doc_id, page_no])?;
    let page_done = exec(
        db,
        "UPDATE ip_pages SET done = 1 WHERE doc_id = ?1 AND page_no = ?2 AND done = 0
           AND text_embedded = 1 AND visual_embedded = 1",
        params![doc_id, page_no],
    )? == 1;
    if page_done {
        exec(
            db,
            "UPDATE ip_documents SET done_pages = done_pages + 1 WHERE id = ?1",
            params![doc_id],
        )?;
    }
    complete_if_done(db, doc_id)
}

/// Marks the document rendered (all pages recorded) and completes it if every page is done.
pub fn finish_rendering(db: &mut dyn Db, doc_id: i64) -> Result<bool> {
    exec(
        db,
        "UPDATE ip_documents SET rendered = 1 WHERE id = ?1",
        params![doc_id],
    )?;
    complete_if_done(db, doc_id)
}

fn complete_if_done(db: &mut dyn Db, doc_id: i64) -> Result<bool> {
    Ok(exec(
        db,
        "UPDATE ip_documents SET status = 'done', finished_at = ?2
         WHERE id = ?1 AND status = 'pending' AND rendered = 1
           AND pages = done_pages",
        params![doc_id, now_s()],
    )? == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{ChunkConfig, chunk_text};

    #[test]
    fn the_sweeps_question_reads_the_pending_index() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT 1 FROM ip_documents WHERE status = 'pending' LIMIT 1",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("ip_documents_pending"), "{plan}");
        assert!(!has_pending_documents(&mut conn).unwrap());
        let (doc, _) = insert_document(&mut conn, "a", "a", "/a.pdf").unwrap();
        assert!(has_pending_documents(&mut conn).unwrap());
        fail_document(&mut conn, doc.id, "x").unwrap();
        assert!(!has_pending_documents(&mut conn).unwrap());
    }

    #[test]
    fn document_lifecycle_search_and_report() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        migrate(&conn).unwrap();
        let (doc, new) = insert_document(&mut conn, "abc", "Manual", "/x/manual.pdf").unwrap();
        assert!(new);
        let (again, new) = insert_document(&mut conn, "abc", "Manual", "/x/manual.pdf").unwrap();
        assert!(!new);
        assert_eq!(again.id, doc.id);
        set_page_count(&mut conn, doc.id, 2).unwrap();
        for p in 1..=2 {
            let img = PageImage {
                doc_id: doc.id,
                page_no: p,
                width: 10,
                height: 10,
                image_bytes: 5,
                image_path: "x",
                tiles: 1,
            };
            assert!(insert_page(&mut conn, &img).unwrap());
            assert!(!insert_page(&mut conn, &img).unwrap());
        }
        assert_eq!(last_rendered_page(&mut conn, doc.id).unwrap(), 2);
        let texts = ["the quick brown fox", "a table of marshalling types"];
        for (i, t) in texts.iter().enumerate() {
            let p = i as u32 + 1;
            let r = Reading {
                text: t.to_string(),
                ..Reading::default()
            };
            assert!(record_page_reading(&mut conn, doc.id, p, &r).unwrap());
            assert!(!record_page_reading(&mut conn, doc.id, p, &r).unwrap());
            let chunks = chunk_text(t, &ChunkConfig::default());
            let tables: Vec<serde_json::Value> = if p == 2 {
                vec![serde_json::json!({"header": ["IDL", "ML"]})]
            } else {
                vec![]
            };
            let page = Reading {
                text: t.to_string(),
                tables,
                ..Reading::default()
            };
            assert!(store_page_text(&mut conn, doc.id, p, &page, "test", &chunks).unwrap());
            assert!(!store_page_text(&mut conn, doc.id, p, &page, "test", &chunks).unwrap());
            let ids: Vec<i64> = page_chunks(&mut conn, doc.id, p)
                .unwrap()
                .iter()
                .map(|c| c.0)
                .collect();
            let v = if p == 1 {
                vec![1.0, 0.0]
            } else {
                vec![0.0, 1.0]
            };
            store_chunk_vectors(&mut conn, &ids, &[v], "m").unwrap();
            let mv = MultiVector {
                dim: 2,
                data: if p == 1 {
                    vec![1.0, 0.0]
                } else {
                    vec![0.0, 1.0]
                },
            };
            store_page_vectors(&mut conn, doc.id, p, &mv, "m").unwrap();
        }
        assert!(!finish_rendering(&mut conn, doc.id).unwrap());
        assert!(!finish_step(&mut conn, doc.id, 1, EmbedStep::Text).unwrap());
        assert!(!finish_step(&mut conn, doc.id, 1, EmbedStep::Visual).unwrap());
        assert!(!finish_step(&mut conn, doc.id, 2, EmbedStep::Visual).unwrap());
        assert!(finish_step(&mut conn, doc.id, 2, EmbedStep::Text).unwrap());
        assert!(!finish_step(&mut conn, doc.id, 2, EmbedStep::Text).unwrap());
        assert_eq!(
            document(&mut conn, doc.id).unwrap().unwrap().status,
            DocStatus::Done
        );

        let hits = search_text(&mut conn, "marshalling", 5).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].page_no, 2);
        let hits = search_vectors(&mut conn, &[0.1, 0.9], 5).unwrap();
        assert_eq!(hits[0].page_no, 2);
        let index = load_visual_index(&mut conn, 2).unwrap();
        let found = index
            .search(
                &MultiVector {
                    dim: 2,
                    data: vec![0.9, 0.1],
                },
                1,
                1,
            )
            .unwrap();
        assert_eq!(found[0].key, (doc.id, 1));
        assert_eq!(page_tables(&mut conn, doc.id, 2).unwrap().len(), 1);

        add_stage_time(&mut conn, doc.id, "image_to_ocr", 2.0, 1.5).unwrap();
        add_stage_time(&mut conn, doc.id, "image_to_ocr", 2.0, 1.5).unwrap();
        let rep = report(&mut conn, doc.id, &CostModel::default()).unwrap();
        assert_eq!((rep.pages, rep.chunks, rep.tables), (2, 2, 1));
        assert_eq!(rep.stages[0].jobs, 2);
        assert!((rep.inference_seconds - 3.0).abs() < 1e-9);
        assert!(rep.estimated_cost > 0.0);
    }
}
