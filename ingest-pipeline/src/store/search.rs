//! The searches over the stored pages: full text (FTS5 on SQLite, `tsvector` on PostgreSQL) and
//! text vectors, and the page lookups that show a hit (visual multi-vectors: `visual`).

use std::borrow::Cow;

use squeueha::params;

use horos_server_control::Collections;

use super::collections::{Readable, text_collection_filter};
use super::snippet::{QueryWord, highlight};
use super::{Db, Result, StoreError, exec, is_postgres, row};
use crate::embed::cosine;
use crate::maxsim::le_bytes_to_f32s;

pub use super::page_hit::PageHit;

/// Full-text search with an FTS5 query as it is (its syntax errors are errors: for text a
/// user typed, use [`search_user_text`]), best pages first: by BM25 on SQLite, by
/// `ts_rank_cd` on PostgreSQL, which takes the part of FTS5's syntax that [`user_terms`] and
/// [`words_query`] build (quoted terms and phrases, a `*` after a term for a prefix, `AND`,
/// `OR`) and refuses the rest with [`StoreError::Query`]. On both, words are split at
/// punctuation, lower-cased and found with or without the diacritics of Latin letters (on a
/// PostgreSQL server whose encoding is not UTF-8, only as written).
pub fn search_text(db: &mut dyn Db, query: &str, k: usize) -> Result<Vec<PageHit>> {
    search_text_in(db, query, k, &Collections::All)
}

/// [`search_text`] among the pages of documents in `collections` (filtered in the statement, so
/// the best `k` of those are found however many other pages rank above them).
pub fn search_text_in(
    db: &mut dyn Db,
    query: &str,
    k: usize,
    collections: &Collections,
) -> Result<Vec<PageHit>> {
    let (within, names) = text_collection_filter(collections, 3)
        .map(|(sql, p)| (format!(" AND {sql}"), p))
        .unwrap_or_default();
    if is_postgres(db) {
        let Some((tsquery, words)) = fts5_to_tsquery(query)? else {
            return Ok(Vec::new());
        };
        let mut p = params![tsquery, k as i64].to_vec();
        p.extend(names);
        return db
            .query(
                &format!(
                    "SELECT doc_id, page_no, CAST(ts_rank_cd(tsv, q) AS DOUBLE PRECISION), text
                     FROM ip_page_fts, to_tsquery('simple', ?1) AS q
                     WHERE tsv @@ q{within} ORDER BY 3 DESC, doc_id, page_no LIMIT ?2"
                ),
                &p,
            )?
            .iter()
            .map(|r| {
                Ok(PageHit {
                    doc_id: r.get(0)?,
                    page_no: r.get(1)?,
                    score: r.get(2)?,
                    snippet: highlight(&r.get::<String>(3)?, &words, SNIPPET_WORDS),
                })
            })
            .collect();
    }
    let mut p = params![query, k as i64].to_vec();
    p.extend(names);
    db.query(
        &format!(
            "SELECT doc_id, page_no, -bm25(ip_page_fts), snippet(ip_page_fts, 0, '[', ']', '…', 12)
             FROM ip_page_fts WHERE ip_page_fts MATCH ?1{within}
             ORDER BY bm25(ip_page_fts) LIMIT ?2"
        ),
        &p,
    )?
    .iter()
    .map(|r| {
        Ok(PageHit {
            doc_id: r.get(0)?,
            page_no: r.get(1)?,
            score: r.get(2)?,
            snippet: r.get(3)?,
        })
    })
    .collect()
}

/// Indexes a stored page's text for [`search_text`].
pub(super) fn index_page_text(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    text: String,
) -> Result<()> {
    if is_postgres(db) {
        exec(
            db,
            "INSERT INTO ip_page_fts (doc_id, page_no, text) VALUES (?1, ?2, ?3)",
            params![doc_id, page_no, text],
        )?;
        return Ok(());
    }
    // The FTS5 table's `doc_id` is not indexed: its rows are found through `ip_page_fts_rows`.
    exec(
        db,
        "INSERT INTO ip_page_fts (text, doc_id, page_no) VALUES (?1, ?2, ?3)",
        params![text, doc_id, page_no],
    )?;
    exec(
        db,
        "INSERT INTO ip_page_fts_rows (doc_id, page_no, fts_rowid)
         VALUES (?1, ?2, last_insert_rowid())",
        params![doc_id, page_no],
    )?;
    Ok(())
}

/// The part of FTS5's query syntax that [`user_terms`] and [`words_query`] build, as a
/// PostgreSQL `tsquery`: quoted terms (a phrase's words joined by `<->`), `*` after a term for
/// a prefix (`:*`), `AND` and juxtaposition (`&`) binding tighter than `OR` (`|`), as in FTS5
/// (`a b OR c` is `(a & b) | c`). A term's words are its letters and digits (the rest separates
/// them, so `3.14` is the phrase `3 <-> 14`, as the page's text is indexed: its punctuation is
/// a space there), a word with diacritics is asked for as written or without them (`(café |
/// cafe)`), and the result never holds a `tsquery` operator of the user's; PostgreSQL
/// lower-cases them. `None` when the query has no word; else the `tsquery` and the query's
/// words, for the snippet to mark.
pub(super) fn fts5_to_tsquery(query: &str) -> Result<Option<(String, Vec<QueryWord>)>> {
    let mut query_words = Vec::new();
    let refuse = |why: &str| StoreError::Query(format!("{why} in full-text query `{query}`"));
    // Groups joined by OR; each group's terms joined by AND.
    let mut groups: Vec<Vec<String>> = vec![Vec::new()];
    let mut pending_or = false;
    let mut chars = query.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let term = if c == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        text.push('"');
                    }
                    Some('"') => break,
                    Some(c) => text.push(c),
                    None => return Err(refuse("an unbalanced `\"`")),
                }
            }
            text
        } else if c.is_alphanumeric() || c == '_' {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_alphanumeric() || c == '_' {
                    word.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            match word.as_str() {
                "OR" => {
                    pending_or = true;
                    continue;
                }
                "AND" => continue,
                "NOT" | "NEAR" => return Err(refuse(&format!("`{word}`"))),
                _ => word,
            }
        } else {
            return Err(refuse(&format!("`{c}`")));
        };
        let prefix = chars.peek() == Some(&'*');
        if prefix {
            chars.next();
        }
        // Combining marks are diacritics of the letter before them, not separators (as FTS5).
        let term: String = term
            .chars()
            .filter(|c| !super::fold::MARKS.contains(c))
            .collect();
        let words: Vec<&str> = term
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            pending_or = false;
            continue;
        }
        let last = words.len() - 1;
        let lexemes: Vec<String> = words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let star = if prefix && i == last { ":*" } else { "" };
                query_words.push(QueryWord::new(w, !star.is_empty()));
                // Both forms: the column holds the folded one on a UTF-8 server, the word as
                // written elsewhere.
                match super::fold::fold_diacritics(w) {
                    Cow::Owned(folded) => format!("({w}{star} | {folded}{star})"),
                    Cow::Borrowed(_) => format!("{w}{star}"),
                }
            })
            .collect();
        let tsquery_term = if let [one] = lexemes.as_slice() {
            one.clone()
        } else {
            format!("({})", lexemes.join(" <-> "))
        };
        let last_group_has_terms = groups.last().is_some_and(|g| !g.is_empty());
        if pending_or && last_group_has_terms {
            groups.push(Vec::new());
        }
        if let Some(group) = groups.last_mut() {
            group.push(tsquery_term);
        }
        pending_or = false;
    }
    let groups: Vec<String> = groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(|g| {
            if g.len() == 1 {
                g.join("")
            } else {
                format!("({})", g.join(" & "))
            }
        })
        .collect();
    Ok((!groups.is_empty()).then(|| (groups.join(" | "), query_words)))
}

/// Words of a snippet, as FTS5's `snippet` of [`search_text`] on SQLite.
const SNIPPET_WORDS: usize = 12;

/// The most terms [`user_terms`] keeps: a longer text is searched by its first terms, so a pasted
/// page cannot make one query cost thousands of index lookups.
pub const MAX_USER_TERMS: usize = 32;

/// The most bytes of user text [`user_terms`] reads (the rest is ignored).
pub const MAX_USER_TEXT_BYTES: usize = 4096;

/// Full-text search for text a user typed. It is never run as FTS5 syntax: [`user_terms`] turns
/// it into quoted terms, so `C++`, an unbalanced `"`, `AND OR NOT`, `*`, `NEAR(`, `col:term` or
/// control characters are searched as the words they hold and never make the search fail.
///
/// Semantics: a page must hold every term (`"an exact phrase"` in balanced quotes is one term
/// whose words must follow each other; `pre*` is a prefix). When no page holds them all, the
/// pages holding any of them are returned instead, best BM25 first (a question typed in full
/// still finds the page that answers it). Text without a word finds nothing.
pub fn search_user_text(db: &mut dyn Db, text: &str, k: usize) -> Result<Vec<PageHit>> {
    search_user_text_in(db, text, k, &Collections::All)
}

/// [`search_user_text`] among the pages of documents in `collections` ([`search_text_in`]).
pub fn search_user_text_in(
    db: &mut dyn Db,
    text: &str,
    k: usize,
    collections: &Collections,
) -> Result<Vec<PageHit>> {
    let terms = user_terms(text);
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let hits = search_text_in(db, &terms.join(" "), k, collections)?;
    if !hits.is_empty() || terms.len() == 1 {
        return Ok(hits);
    }
    search_text_in(db, &terms.join(" OR "), k, collections)
}

/// The terms of text a user typed, each a valid FTS5 string (quoted, `"` doubled), in order:
/// a balanced `"..."` is one phrase; every other word is a term of its own, with the punctuation
/// at its ends dropped (so FTS5 operators and column filters are plain words), and a trailing
/// `*` kept as a prefix search. Control characters separate words; an unbalanced `"` is
/// ignored; words without a letter or digit are dropped (the tokenizer would find no token in
/// them). At most [`MAX_USER_TERMS`] terms from the first [`MAX_USER_TEXT_BYTES`] bytes.
pub fn user_terms(text: &str) -> Vec<String> {
    let mut end = text.len().min(MAX_USER_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut terms = Vec::new();
    let quotes = text.matches('"').count();
    // An odd quote count: the last quote opens nothing and is read as a space.
    let balanced_end = if quotes % 2 == 1 {
        text.rfind('"').unwrap_or(text.len())
    } else {
        text.len()
    };
    let (head, tail) = text.split_at(balanced_end);
    for (i, part) in head.split('"').enumerate() {
        if i % 2 == 1 {
            push_phrase(&mut terms, part);
        } else {
            push_words(&mut terms, part);
        }
    }
    push_words(&mut terms, tail.trim_start_matches('"'));
    terms.truncate(MAX_USER_TERMS);
    terms
}

fn has_word(s: &str) -> bool {
    s.chars().any(char::is_alphanumeric)
}

fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn push_phrase(terms: &mut Vec<String>, phrase: &str) {
    let words: Vec<&str> = phrase.split_whitespace().collect();
    if has_word(phrase) {
        terms.push(quoted(&words.join(" ")));
    }
}

fn push_words(terms: &mut Vec<String>, text: &str) {
    for w in text.split_whitespace() {
        let prefix = w.ends_with('*');
        let w = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
        if !has_word(w) {
            continue;
        }
        if prefix {
            terms.push(format!("{}*", quoted(w)));
        } else {
            terms.push(quoted(w));
        }
    }
}

/// An FTS5 query that matches any word of `text` ([`user_terms`] joined with `OR`); empty when
/// `text` has no word.
pub fn words_query(text: &str) -> String {
    user_terms(text).join(" OR ")
}

/// Vector search over chunk embeddings by cosine similarity (a full scan), best chunks first.
pub fn search_vectors(db: &mut dyn Db, query: &[f32], k: usize) -> Result<Vec<PageHit>> {
    search_vectors_in(db, query, k, &Readable::Every)
}

/// [`search_vectors`] among the chunks of the `readable` documents.
pub fn search_vectors_in(
    db: &mut dyn Db,
    query: &[f32],
    k: usize,
    readable: &Readable,
) -> Result<Vec<PageHit>> {
    let rows = db.query(
        "SELECT doc_id, page_no, text, vector FROM ip_chunks WHERE vector IS NOT NULL",
        params![],
    )?;
    let mut hits: Vec<PageHit> = Vec::new();
    for r in &rows {
        let Some(squeueha::Value::Blob(blob)) = r.values().get(3) else {
            continue;
        };
        let Some(v) = le_bytes_to_f32s(blob) else {
            continue;
        };
        if v.len() != query.len() {
            continue;
        }
        let doc_id: i64 = r.get(0)?;
        if !readable.allows(doc_id) {
            continue;
        }
        let text: String = r.get(2)?;
        hits.push(PageHit {
            doc_id,
            page_no: r.get(1)?,
            score: f64::from(cosine(query, &v)),
            snippet: text.chars().take(120).collect(),
        });
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    Ok(hits)
}

/// The tables found on a page, as JSON values.
pub fn page_tables(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Vec<serde_json::Value>> {
    db.query(
        "SELECT json FROM ip_tables WHERE doc_id = ?1 AND page_no = ?2 ORDER BY table_index",
        params![doc_id, page_no],
    )?
    .iter()
    .map(|r| Ok(serde_json::from_str(&r.get::<String>(0)?)?))
    .collect()
}

/// A page's stored text.
pub fn page_text(db: &mut dyn Db, doc_id: i64, page_no: u32) -> Result<Option<String>> {
    Ok(row(
        db,
        "SELECT text FROM ip_pages WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no],
    )?
    .map(|r| r.get::<Option<String>>(0))
    .transpose()?
    .flatten())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::{PageImage, insert_document, insert_page, migrate, store_page_text};
    use crate::vision::Reading;

    /// A store whose document has one page per text.
    fn store_with(texts: &[&str]) -> (tempfile::TempDir, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = rusqlite::Connection::open(dir.path().join("s.db")).unwrap();
        migrate(&conn).unwrap();
        let (doc, _) = insert_document(&mut conn, "abc", "t", "/x.pdf").unwrap();
        for (i, t) in texts.iter().enumerate() {
            let page_no = i as u32 + 1;
            let img = PageImage {
                doc_id: doc.id,
                page_no,
                width: 1,
                height: 1,
                image_bytes: 1,
                image_path: "x",
                tiles: 1,
            };
            insert_page(&mut conn, &img).unwrap();
            let reading = Reading {
                text: t.to_string(),
                ..Reading::default()
            };
            store_page_text(&mut conn, doc.id, page_no, &reading, "test", &[]).unwrap();
        }
        (dir, conn)
    }

    fn pages(conn: &mut rusqlite::Connection, text: &str) -> Vec<u32> {
        search_user_text(conn, text, 10)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .iter()
            .map(|h| h.page_no)
            .collect()
    }

    #[test]
    fn hostile_user_text_never_fails_and_finds_its_words() {
        let (_dir, mut conn) = store_with(&[
            "operators AND OR NOT near the text column",
            "C++ templates and the standard library",
            "marshalling types in a table",
        ]);
        // Raw, these are FTS5 syntax errors.
        for raw in [
            "C++",
            "\"unbalanced",
            "AND OR NOT",
            "*",
            "NEAR(",
            "col:term",
        ] {
            assert!(search_text(&mut conn, raw, 5).is_err(), "{raw}");
        }
        assert_eq!(pages(&mut conn, "C++"), [2]);
        assert_eq!(pages(&mut conn, "\"marshalling"), [3]);
        assert_eq!(pages(&mut conn, "AND OR NOT"), [1]);
        assert_eq!(pages(&mut conn, "text:column"), [1]);
        assert_eq!(pages(&mut conn, "NEAR("), [1]);
        assert!(pages(&mut conn, "col:term").is_empty());
        assert_eq!(pages(&mut conn, "marsh*"), [3]);
        assert!(pages(&mut conn, "*").is_empty());
        assert!(pages(&mut conn, "").is_empty());
        assert!(pages(&mut conn, " ?! () ^ - + ").is_empty());
        assert_eq!(pages(&mut conn, "tem\u{0}plates\u{7}library\x1b[0m"), [2]);
        assert_eq!(pages(&mut conn, "\u{FFFD}\u{FFFD} types \u{FFFE}"), [3]);
        let long = "library ".repeat(100_000);
        assert_eq!(pages(&mut conn, &long), [2]);
        assert_eq!(user_terms(&long).len(), MAX_USER_TERMS);
        let long_word = "x".repeat(1_000_000);
        assert!(pages(&mut conn, &long_word).is_empty());
    }

    #[test]
    fn every_term_must_match_else_any_does() {
        let (_dir, mut conn) = store_with(&[
            "the standard library of templates",
            "standard marshalling of types",
        ]);
        assert_eq!(pages(&mut conn, "standard types"), [2]);
        // A phrase: its words in order.
        assert_eq!(pages(&mut conn, "\"marshalling of types\""), [2]);
        assert!(pages(&mut conn, "\"types of marshalling\"").is_empty());
        // No page holds both: pages holding either, the one with the rarer term first.
        assert_eq!(pages(&mut conn, "templates marshalling")[..].len(), 2);
        assert_eq!(
            words_query("Which attributes, such as \"null_terminated\" (AND) apply?"),
            "\"Which\" OR \"attributes\" OR \"such\" OR \"as\" OR \"null_terminated\" OR \"AND\" OR \"apply\""
        );
        assert_eq!(
            user_terms("say \"a \"\"b\" c* \"d"),
            ["\"say\"", "\"a\"", "\"b\"", "\"c\"*", "\"d\""]
        );
    }

    #[test]
    fn fts5_queries_become_tsqueries_with_fts5s_precedence() {
        let ts = |q: &str| fts5_to_tsquery(q).unwrap().map(|(tsquery, _)| tsquery);
        assert_eq!(ts("a b OR c").as_deref(), Some("(a & b) | c"));
        assert_eq!(
            ts("\"a\" OR \"b\" AND \"c\"").as_deref(),
            Some("a | (b & c)")
        );
        assert_eq!(
            ts("\"brown fox\" Walrus*").as_deref(),
            Some("((brown <-> fox) & Walrus:*)")
        );
        assert_eq!(
            ts("\"null_terminated\"").as_deref(),
            Some("(null <-> terminated)")
        );
        assert_eq!(ts("\"say \"\"hi\"\"\"").as_deref(), Some("(say <-> hi)"));
        // A word with diacritics: as written or without them.
        assert_eq!(
            ts("\"crème brûlée\" Café*").as_deref(),
            Some("(((crème | creme) <-> (brûlée | brulee)) & (Café:* | Cafe:*))")
        );
        assert_eq!(ts("\"!!\" OR \"?\""), None);
        assert_eq!(ts(""), None);
        for refused in [
            "NEAR(a b)",
            "col:term",
            "\"unbalanced",
            "NOT a",
            "a + b",
            "(a)",
        ] {
            assert!(fts5_to_tsquery(refused).is_err(), "{refused}");
        }
        // What a user types never reaches PostgreSQL as syntax of its own.
        let q = ts(&words_query("it's 'quoted' & | ! <-> :* \\ (x)")).unwrap();
        assert!(
            !q.contains('\'') && !q.contains('!') && !q.contains('\\'),
            "{q}"
        );
    }
}
