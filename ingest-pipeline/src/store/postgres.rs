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

/// Version 5: the full-text column indexes words as SQLite's FTS5 tokenizer does
/// (`unicode61 remove_diacritics 2`):
/// - split at punctuation: PostgreSQL's parser keeps `3.14`, `example.com`, `a_b` or `x@y.org`
///   as single tokens, which a query for their words (`3.14` is the phrase `3 <-> 14`) never
///   matched;
/// - Latin letters without their diacritics (`é` is `e`), on a UTF-8 server (the table's
///   letters exist only there; the query asks for both forms, so either column answers it).
///
/// The column is generated, so it is dropped (with its index) and added again, which computes it
/// for the pages already stored. The SQL is ASCII (the letters are Unicode escapes), so that a
/// server in another encoding can parse it.
pub const POSTGRES_V5: &str = concat!(
    "ALTER TABLE ip_page_fts DROP COLUMN tsv;
DO $$
BEGIN
    IF current_setting('server_encoding') = 'UTF8' THEN
        -- Unicode escapes need standard strings (the default): for this transaction.
        PERFORM set_config('standard_conforming_strings', 'on', true);
        EXECUTE $sql$ALTER TABLE ip_page_fts ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS (
            to_tsvector('simple', regexp_replace(translate(text, U&'",
    r"\00C0\00C1\00C2\00C3\00C4\00C5\00C7\00C8\00C9\00CA\00CB\00CC\00CD\00CE\00CF\00D1",
    r"\00D2\00D3\00D4\00D5\00D6\00D9\00DA\00DB\00DC\00DD\00E0\00E1\00E2\00E3\00E4\00E5",
    r"\00E7\00E8\00E9\00EA\00EB\00EC\00ED\00EE\00EF\00F1\00F2\00F3\00F4\00F5\00F6\00F9",
    r"\00FA\00FB\00FC\00FD\00FF\0100\0101\0102\0103\0104\0105\0106\0107\0108\0109\010A",
    r"\010B\010C\010D\010E\010F\0112\0113\0114\0115\0116\0117\0118\0119\011A\011B\011C",
    r"\011D\011E\011F\0120\0121\0122\0123\0124\0125\0128\0129\012A\012B\012C\012D\012E",
    r"\012F\0130\0134\0135\0136\0137\0139\013A\013B\013C\013D\013E\0143\0144\0145\0146",
    r"\0147\0148\014C\014D\014E\014F\0150\0151\0154\0155\0156\0157\0158\0159\015A\015B",
    r"\015C\015D\015E\015F\0160\0161\0162\0163\0164\0165\0168\0169\016A\016B\016C\016D",
    r"\016E\016F\0170\0171\0172\0173\0174\0175\0176\0177\0178\0179\017A\017B\017C\017D",
    r"\017E\01A0\01A1\01AF\01B0\01CD\01CE\01CF\01D0\01D1\01D2\01D3\01D4\01D5\01D6\01D7",
    r"\01D8\01D9\01DA\01DB\01DC\01DE\01DF\01E6\01E7\01E8\01E9\01EA\01EB\01EC\01ED\01F0",
    r"\01F4\01F5\01F8\01F9\01FA\01FB\0200\0201\0202\0203\0204\0205\0206\0207\0208\0209",
    r"\020A\020B\020C\020D\020E\020F\0210\0211\0212\0213\0214\0215\0216\0217\0218\0219",
    r"\021A\021B\021E\021F\0226\0227\0228\0229\022A\022B\022C\022D\022E\022F\0230\0231",
    r"\0232\0233\1E00\1E01\1E02\1E03\1E04\1E05\1E06\1E07\1E08\1E09\1E0A\1E0B\1E0C\1E0D",
    r"\1E0E\1E0F\1E10\1E11\1E12\1E13\1E14\1E15\1E16\1E17\1E18\1E19\1E1A\1E1B\1E1C\1E1D",
    r"\1E1E\1E1F\1E20\1E21\1E22\1E23\1E24\1E25\1E26\1E27\1E28\1E29\1E2A\1E2B\1E2C\1E2D",
    r"\1E2E\1E2F\1E30\1E31\1E32\1E33\1E34\1E35\1E36\1E37\1E38\1E39\1E3A\1E3B\1E3C\1E3D",
    r"\1E3E\1E3F\1E40\1E41\1E42\1E43\1E44\1E45\1E46\1E47\1E48\1E49\1E4A\1E4B\1E4C\1E4D",
    r"\1E4E\1E4F\1E50\1E51\1E52\1E53\1E54\1E55\1E56\1E57\1E58\1E59\1E5A\1E5B\1E5C\1E5D",
    r"\1E5E\1E5F\1E60\1E61\1E62\1E63\1E64\1E65\1E66\1E67\1E68\1E69\1E6A\1E6B\1E6C\1E6D",
    r"\1E6E\1E6F\1E70\1E71\1E72\1E73\1E74\1E75\1E76\1E77\1E78\1E79\1E7A\1E7B\1E7C\1E7D",
    r"\1E7E\1E7F\1E80\1E81\1E82\1E83\1E84\1E85\1E86\1E87\1E88\1E89\1E8A\1E8B\1E8C\1E8D",
    r"\1E8E\1E8F\1E90\1E91\1E92\1E93\1E94\1E95\1E96\1E97\1E98\1E99\1EA0\1EA1\1EA2\1EA3",
    r"\1EA4\1EA5\1EA6\1EA7\1EA8\1EA9\1EAA\1EAB\1EAC\1EAD\1EAE\1EAF\1EB0\1EB1\1EB2\1EB3",
    r"\1EB4\1EB5\1EB6\1EB7\1EB8\1EB9\1EBA\1EBB\1EBC\1EBD\1EBE\1EBF\1EC0\1EC1\1EC2\1EC3",
    r"\1EC4\1EC5\1EC6\1EC7\1EC8\1EC9\1ECA\1ECB\1ECC\1ECD\1ECE\1ECF\1ED0\1ED1\1ED2\1ED3",
    r"\1ED4\1ED5\1ED6\1ED7\1ED8\1ED9\1EDA\1EDB\1EDC\1EDD\1EDE\1EDF\1EE0\1EE1\1EE2\1EE3",
    r"\1EE4\1EE5\1EE6\1EE7\1EE8\1EE9\1EEA\1EEB\1EEC\1EED\1EEE\1EEF\1EF0\1EF1\1EF2\1EF3",
    r"\1EF4\1EF5\1EF6\1EF7\1EF8\1EF9\0300\0301\0302\0303\0304\0305\0306\0307\0308\0309",
    r"\030A\030B\030C\030D\030E\030F\0310\0311\0312\0313\0314\0315\0316\0317\0318\0319",
    r"\031A\031B\031C\031D\031E\031F\0320\0321\0322\0323\0324\0325\0326\0327\0328\0329",
    r"\032A\032B\032C\032D\032E\032F\0330\0331",
    "', '",
    "AAAAAACEEEEIIIINOOOOOUUUUYaaaaaaceeeeiiiinooooouuuuyyAaAaAaCcCcCcCcDdEeEeEeEeEeG",
    "gGgGgGgHhIiIiIiIiIJjKkLlLlLlNnNnNnOoOoOoRrRrRrSsSsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZ",
    "zOoUuAaIiOoUuUuUuUuUuAaGgKkOoOojGgNnAaAaAaEeEeIiIiOoOoRrRrUuUuSsTtHhAaEeOoOoOoOo",
    "YyAaBbBbBbCcDdDdDdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIiIiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOo",
    "OoOoOoPpPpRrRrRrRrSsSsSsSsSsTtTtTtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXxYyZzZzZzhtwyAaAa",
    "AaAaAaAaAaAaAaAaAaAaEeEeEeEeEeEeEeEeIiIiOoOoOoOoOoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYy",
    "YyYyYy",
    "'), '[[:punct:]",
    // What FTS5 also splits at but a C locale's `[:punct:]` leaves out: Latin-1's symbols and
    // no-break space, general punctuation (typographic quotes and dashes, spaces), CJK and
    // full-width punctuation.
    r"\u00A0-\u00A9\u00AB-\u00B1\u00B4\u00B6-\u00B8\u00BB\u00BF\u00D7\u00F7\u2000-\u206F",
    r"\u3000-\u3003\u3008-\u3011\u3014-\u301F\uFF01-\uFF0F\uFF1A-\uFF20",
    "]+', ' ', 'g'))) STORED$sql$;
    ELSE
        ALTER TABLE ip_page_fts ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS (
            to_tsvector('simple', regexp_replace(text, '[[:punct:]]+', ' ', 'g'))) STORED;
    END IF;
END $$;
CREATE INDEX ip_page_fts_tsv ON ip_page_fts USING GIN (tsv);
"
);

/// Version 7 on PostgreSQL: the visual change counter of [`super::SCHEMA_V7`], kept by a
/// trigger function. Writers of one model's pages on several nodes take its counter's row in
/// turn (each until its transaction commits), so a generation a reader sees is never followed by
/// the commit of a change made before it.
pub(super) const POSTGRES_V7: &str = r#"
CREATE TABLE IF NOT EXISTS ip_visual_changes (
    model TEXT NOT NULL,
    dim BIGINT NOT NULL,
    generation BIGINT NOT NULL,
    pages BIGINT NOT NULL,
    PRIMARY KEY (model, dim)
);
LOCK TABLE ip_page_vectors IN SHARE MODE;
INSERT INTO ip_visual_changes (model, dim, generation, pages)
    SELECT model, dim, 1, count(*) FROM ip_page_vectors GROUP BY model, dim
    ON CONFLICT (model, dim) DO UPDATE SET pages = excluded.pages,
        generation = ip_visual_changes.generation + 1;
CREATE OR REPLACE FUNCTION ip_visual_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE ip_visual_changes SET generation = generation + 1, pages = pages - 1
        WHERE model = OLD.model AND dim = OLD.dim;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO ip_visual_changes AS c (model, dim, generation, pages)
            VALUES (NEW.model, NEW.dim, 1, 1)
        ON CONFLICT (model, dim) DO UPDATE SET generation = c.generation + 1,
            pages = c.pages + 1;
    END IF;
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS ip_page_vectors_changed ON ip_page_vectors;
CREATE TRIGGER ip_page_vectors_changed AFTER INSERT OR UPDATE OR DELETE ON ip_page_vectors
    FOR EACH ROW EXECUTE FUNCTION ip_visual_changed();
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
    squeueha::Migration {
        version: 6,
        sql: super::SCHEMA_V6,
    },
    squeueha::Migration {
        version: 7,
        sql: POSTGRES_V7,
    },
    squeueha::Migration {
        version: 8,
        sql: super::SCHEMA_V8,
    },
    squeueha::Migration {
        version: 9,
        sql: super::SCHEMA_V9,
    },
];
