//! The store's tables on PostgreSQL: those of SQLite's version 4 in one step, with PostgreSQL's
//! types, ids from sequences (never reused, so a deleted document's id is never given again) and
//! full-text search on a `tsvector` column with a GIN index instead of FTS5.

/// The store's tables on PostgreSQL (version 1 of its PostgreSQL steps, equal to SQLite's 4).
pub const POSTGRES_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS ip_documents (
    id BIGSERIAL PRIMARY KEY,
    sha256 TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    path TEXT NOT NULL,
    path_bytes BYTEA,
    pages BIGINT,
    rendered BIGINT NOT NULL DEFAULT 0,
    done_pages BIGINT NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'pending',
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS ip_documents_pending ON ip_documents (id) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS ip_deleted_documents (
    id BIGINT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    title TEXT NOT NULL,
    deleted_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS ip_pages (
    doc_id BIGINT NOT NULL REFERENCES ip_documents(id),
    page_no BIGINT NOT NULL,
    width BIGINT NOT NULL,
    height BIGINT NOT NULL,
    image_bytes BIGINT NOT NULL,
    image_path TEXT NOT NULL,
    tiles BIGINT NOT NULL,
    rendered_at DOUBLE PRECISION NOT NULL,
    reading TEXT,
    read_done BIGINT NOT NULL DEFAULT 0,
    text TEXT,
    figures TEXT,
    reader TEXT,
    read_by TEXT,
    rotation BIGINT NOT NULL DEFAULT 0,
    stored BIGINT NOT NULL DEFAULT 0,
    text_embedded BIGINT NOT NULL DEFAULT 0,
    visual_embedded BIGINT NOT NULL DEFAULT 0,
    done BIGINT NOT NULL DEFAULT 0,
    fan_in_parent BIGINT,
    PRIMARY KEY (doc_id, page_no)
);
CREATE TABLE IF NOT EXISTS ip_tiles (
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    tile_index BIGINT NOT NULL,
    tile TEXT NOT NULL,
    reading TEXT NOT NULL,
    PRIMARY KEY (doc_id, page_no, tile_index)
);
CREATE TABLE IF NOT EXISTS ip_page_fts (
    id BIGSERIAL PRIMARY KEY,
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    text TEXT NOT NULL,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
);
CREATE INDEX IF NOT EXISTS ip_page_fts_tsv ON ip_page_fts USING GIN (tsv);
CREATE INDEX IF NOT EXISTS ip_page_fts_doc ON ip_page_fts (doc_id, page_no);
CREATE TABLE IF NOT EXISTS ip_tables (
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    table_index BIGINT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (doc_id, page_no, table_index)
);
CREATE TABLE IF NOT EXISTS ip_chunks (
    id BIGSERIAL PRIMARY KEY,
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    chunk_index BIGINT NOT NULL,
    token_start BIGINT NOT NULL,
    token_end BIGINT NOT NULL,
    text TEXT NOT NULL,
    model TEXT,
    dim BIGINT,
    vector BYTEA,
    UNIQUE (doc_id, page_no, chunk_index)
);
CREATE TABLE IF NOT EXISTS ip_page_vectors (
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    model TEXT NOT NULL,
    dim BIGINT NOT NULL,
    count BIGINT NOT NULL,
    vectors BYTEA NOT NULL,
    encoding TEXT NOT NULL DEFAULT 'f32',
    PRIMARY KEY (doc_id, page_no)
);
CREATE INDEX IF NOT EXISTS ip_page_vectors_model ON ip_page_vectors (model, dim);
CREATE TABLE IF NOT EXISTS ip_page_codes (
    doc_id BIGINT NOT NULL,
    page_no BIGINT NOT NULL,
    model TEXT NOT NULL,
    dim BIGINT NOT NULL,
    count BIGINT NOT NULL,
    int8 BYTEA NOT NULL,
    PRIMARY KEY (doc_id, page_no)
);
CREATE INDEX IF NOT EXISTS ip_page_codes_model ON ip_page_codes (model, dim);
CREATE TABLE IF NOT EXISTS ip_stage_stats (
    id BIGSERIAL,
    doc_id BIGINT NOT NULL,
    stage TEXT NOT NULL,
    jobs BIGINT NOT NULL,
    seconds DOUBLE PRECISION NOT NULL,
    inference_seconds DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (doc_id, stage)
);
"#;

/// Versions 2 to 4 are in version 1 on PostgreSQL (it had no earlier databases to carry).
const NOTHING_MORE: &str = "SELECT 1";

/// Version 5: the full-text column indexes the words between punctuation, as SQLite's FTS5
/// tokenizer does. PostgreSQL's parser keeps `3.14`, `example.com`, `a_b` or `x@y.org` as single
/// tokens, which a query for their words (`3.14` is the phrase `3 <-> 14`) never matched. The column is generated, so it is dropped
/// (with its index) and added again, which computes it for the pages already stored.
pub const POSTGRES_V5: &str = r#"
ALTER TABLE ip_page_fts DROP COLUMN tsv;
ALTER TABLE ip_page_fts ADD COLUMN tsv TSVECTOR
    GENERATED ALWAYS AS (to_tsvector('simple', regexp_replace(text, '[[:punct:]]+', ' ', 'g'))) STORED;
CREATE INDEX ip_page_fts_tsv ON ip_page_fts USING GIN (tsv);
"#;

/// The PostgreSQL steps, numbered as SQLite's.
pub(super) const MIGRATIONS: &[squeueha::Migration] = &[
    squeueha::Migration {
        version: 1,
        sql: POSTGRES_SCHEMA,
    },
    squeueha::Migration {
        version: 2,
        sql: NOTHING_MORE,
    },
    squeueha::Migration {
        version: 3,
        sql: NOTHING_MORE,
    },
    squeueha::Migration {
        version: 4,
        sql: NOTHING_MORE,
    },
    squeueha::Migration {
        version: 5,
        sql: POSTGRES_V5,
    },
];
