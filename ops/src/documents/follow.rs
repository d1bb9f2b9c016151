//! Follow: documents being ingested, read again and again until none is pending, with where they
//! stand after each read (files and pages done, pages per second, ETA, how long nothing moved)
//! and how they ended (done, failed and why, pages ingested meanwhile).

use std::time::{Duration, Instant};

use ingest_pipeline::store::{self, DocStatus, Document};
use serde::{Deserialize, Serialize};

use super::Documents;
use crate::error::OpsError;

/// Milliseconds between two reads when the caller does not say.
pub const DEFAULT_EVERY_MS: u64 = 250;
/// The fewest milliseconds between two reads (a smaller `every_ms` is raised to it).
const MIN_EVERY_MS: u64 = 10;
/// After this long without a page or a document finished, [`Progress::stalled`] is true.
pub const STALLED_AFTER: Duration = Duration::from_secs(30);

fn default_every_ms() -> u64 {
    DEFAULT_EVERY_MS
}

/// Which documents to follow, and how often to read them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowArgs {
    /// The documents' ids (from [`Documents::ingest`]).
    pub documents: Vec<i64>,
    /// Milliseconds between two reads (at least 10).
    #[serde(default = "default_every_ms")]
    pub every_ms: u64,
}

impl FollowArgs {
    /// Documents `documents`, read every [`DEFAULT_EVERY_MS`].
    pub fn new(documents: Vec<i64>) -> Self {
        Self {
            documents,
            every_ms: DEFAULT_EVERY_MS,
        }
    }
}

/// Where the followed documents stand, after one read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// Documents followed (that still exist).
    pub files: u64,
    /// Of them, those no longer pending (done or failed).
    pub files_finished: u64,
    /// Of them, those failed.
    pub failed: u64,
    /// Pages ingested (read, embedded and indexed).
    pub pages_done: u64,
    /// Pages in all; for a document not yet opened, the mean of the known counts (one page when
    /// none is known).
    pub pages_total: u64,
    /// Whether some page counts in `pages_total` are such estimates.
    pub estimated: bool,
    /// Pages ingested per second since following began.
    pub pages_per_s: f64,
    /// Seconds since a page was ingested or a document finished (or following began).
    pub idle_seconds: f64,
}

impl Progress {
    /// Whether every document followed is done or failed.
    pub fn finished(&self) -> bool {
        self.files_finished == self.files
    }

    /// Seconds until the pages left are ingested at the rate so far; `None` before any was.
    pub fn eta_seconds(&self) -> Option<f64> {
        (self.pages_per_s > 0.0)
            .then(|| self.pages_total.saturating_sub(self.pages_done) as f64 / self.pages_per_s)
    }

    /// Whether nothing moved for [`STALLED_AFTER`] (is anything processing the documents?).
    pub fn stalled(&self) -> bool {
        self.idle_seconds >= STALLED_AFTER.as_secs_f64()
    }
}

/// A followed document that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedDocument {
    /// Its id (ingested again from scratch by [`Documents::retry`]).
    pub document: i64,
    /// Why it failed.
    pub error: String,
    /// The file it was submitted from, shown lossily.
    pub path: String,
}

/// How the followed documents ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Followed {
    /// Documents done.
    pub done: usize,
    /// Documents failed, in the order they were given.
    pub failed: Vec<FailedDocument>,
    /// Pages ingested while following.
    pub pages: u64,
    /// `pages` per second of following (0 when no time passed).
    pub pages_per_s: f64,
    /// Seconds followed.
    pub seconds: f64,
}

/// The counts of one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    files: u64,
    files_finished: u64,
    failed: u64,
    pages_done: u64,
    pages_total: u64,
    estimated: bool,
}

impl Counts {
    fn of(docs: &[Document]) -> Self {
        let known: Vec<u64> = docs.iter().filter_map(|d| d.pages.map(u64::from)).collect();
        let unknown = (docs.len() - known.len()) as u64;
        let mean = if known.is_empty() {
            1
        } else {
            known.iter().sum::<u64>().div_ceil(known.len() as u64)
        };
        let with = |status: DocStatus| docs.iter().filter(|d| d.status == status).count() as u64;
        Self {
            files: docs.len() as u64,
            files_finished: docs.len() as u64 - with(DocStatus::Pending),
            failed: with(DocStatus::Failed),
            pages_done: docs.iter().map(|d| u64::from(d.done_pages)).sum(),
            pages_total: known.iter().sum::<u64>() + unknown * mean,
            estimated: unknown > 0,
        }
    }
}

impl Documents {
    /// Follows documents `args.documents` until none is pending: they are read every
    /// `args.every_ms` and `on_progress` is called after each read with where they stand. Fails
    /// with [`OpsError::NoDocument`] when one does not exist (or was deleted meanwhile). Runs
    /// until they end: a caller that stops earlier drops the future (nothing is changed).
    pub async fn follow(
        &self,
        args: FollowArgs,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<Followed, OpsError> {
        let every = Duration::from_millis(args.every_ms.max(MIN_EVERY_MS));
        let ids = args.documents;
        let started = Instant::now();
        let mut start: Option<Counts> = None;
        let mut previous: Option<Counts> = None;
        let mut last_moved = started;
        let (docs, last) = loop {
            let (docs, missing) = self.followed(&ids).await?;
            let now = Counts::of(&docs);
            let first = *start.get_or_insert(now);
            if previous.is_some_and(|p| {
                p.pages_done != now.pages_done || p.files_finished != now.files_finished
            }) {
                last_moved = Instant::now();
            }
            previous = Some(now);
            on_progress(&Progress {
                files: now.files,
                files_finished: now.files_finished,
                failed: now.failed,
                pages_done: now.pages_done,
                pages_total: now.pages_total,
                estimated: now.estimated,
                pages_per_s: since(first.pages_done, now.pages_done) as f64
                    / started.elapsed().as_secs_f64().max(1e-3),
                idle_seconds: last_moved.elapsed().as_secs_f64(),
            });
            if let Some(id) = missing {
                return Err(OpsError::NoDocument(id));
            }
            if now.files_finished == now.files {
                break (docs, now);
            }
            tokio::time::sleep(every).await;
        };
        let first = start.unwrap_or(last);
        let seconds = started.elapsed().as_secs_f64();
        let pages = since(first.pages_done, last.pages_done);
        Ok(Followed {
            done: docs.iter().filter(|d| d.status == DocStatus::Done).count(),
            failed: docs
                .iter()
                .filter(|d| d.status == DocStatus::Failed)
                .map(|d| FailedDocument {
                    document: d.id,
                    error: d.error.clone().unwrap_or_default(),
                    path: d.path.clone(),
                })
                .collect(),
            pages,
            pages_per_s: if seconds > 0.0 {
                pages as f64 / seconds
            } else {
                0.0
            },
            seconds,
        })
    }

    /// Documents `ids` as they are now, and the first of them that does not exist.
    async fn followed(&self, ids: &[i64]) -> Result<(Vec<Document>, Option<i64>), OpsError> {
        let ids = ids.to_vec();
        self.read(move |reads| {
            let mut docs = Vec::with_capacity(ids.len());
            let mut missing = None;
            for id in ids {
                match store::document(reads, id)? {
                    Some(d) => docs.push(d),
                    None => {
                        missing.get_or_insert(id);
                    }
                }
            }
            Ok((docs, missing))
        })
        .await
    }
}

/// Pages done since `first` (0 when fewer are: a document was replaced).
fn since(first: u64, now: u64) -> u64 {
    now - first.min(now)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ingest_pipeline::store::{EmbedStep, StoreError};
    use serde_json::json;

    use super::*;
    use crate::documents::testing::{documents, fail, ingested, read_page};

    fn doc(id: i64, pages: Option<u32>, done: u32, status: DocStatus) -> Document {
        Document {
            id,
            sha256: String::new(),
            title: String::new(),
            path: format!("/in/{id}.pdf"),
            path_bytes: None,
            pages,
            done_pages: done,
            status,
            error: None,
            collection: Default::default(),
        }
    }

    #[test]
    fn unknown_page_counts_are_estimated_from_the_known_ones() {
        let c = Counts::of(&[
            doc(1, Some(4), 4, DocStatus::Done),
            doc(2, Some(2), 1, DocStatus::Pending),
            doc(3, None, 0, DocStatus::Pending),
            doc(4, None, 0, DocStatus::Failed),
        ]);
        assert_eq!(c.files, 4);
        assert_eq!(c.files_finished, 2);
        assert_eq!(c.failed, 1);
        assert_eq!(c.pages_done, 5);
        assert_eq!(c.pages_total, 6 + 2 * 3);
        assert!(c.estimated);
    }

    #[test]
    fn with_no_page_count_known_each_file_counts_one_page() {
        let c = Counts::of(&[doc(1, None, 0, DocStatus::Pending)]);
        assert_eq!((c.pages_total, c.estimated), (1, true));
    }

    #[test]
    fn the_eta_is_the_pages_left_at_the_rate_so_far() {
        let mut p = Progress {
            files: 2,
            files_finished: 1,
            failed: 0,
            pages_done: 4,
            pages_total: 10,
            estimated: false,
            pages_per_s: 0.0,
            idle_seconds: 29.0,
        };
        assert_eq!(p.eta_seconds(), None);
        assert!(!p.finished() && !p.stalled());
        p.pages_per_s = 2.0;
        p.idle_seconds = 30.0;
        assert_eq!(p.eta_seconds(), Some(3.0));
        assert!(p.stalled());
    }

    #[test]
    fn the_reads_default_to_every_250_ms() {
        let args: FollowArgs = serde_json::from_value(json!({"documents": [1, 2]})).unwrap();
        assert_eq!(args, FollowArgs::new(vec![1, 2]));
        assert!(serde_json::from_value::<FollowArgs>(json!({"ids": [1]})).is_err());
    }

    /// Page `page_no` of `of` pages of document `doc` read, embedded and indexed, as the workers
    /// do it; the last one renders the document whole.
    fn ingest_page(docs: &Documents, doc: i64, page_no: u32, of: u32) {
        read_page(docs, doc, page_no, "text");
        docs.pipeline()
            .queue()
            .transaction(|tx| -> Result<(), StoreError> {
                store::set_page_count(tx, doc, of)?;
                store::finish_step(tx, doc, page_no, EmbedStep::Text)?;
                store::finish_step(tx, doc, page_no, EmbedStep::Visual)?;
                if page_no == of {
                    store::finish_rendering(tx, doc)?;
                }
                Ok(())
            })
            .unwrap();
    }

    #[tokio::test]
    async fn documents_are_followed_until_each_is_done_or_failed() {
        let (dir, docs) = documents().await;
        let a = ingested(dir.path(), &docs, "a").await;
        let b = ingested(dir.path(), &docs, "b").await;
        let mut seen = Vec::new();
        // Each read is followed by the workers' next step.
        let followed = docs
            .follow(
                FollowArgs {
                    documents: vec![a, b],
                    every_ms: 1,
                },
                |p| {
                    seen.push(*p);
                    match seen.len() {
                        1 => ingest_page(&docs, a, 1, 3),
                        2 => ingest_page(&docs, a, 2, 3),
                        3 => {
                            ingest_page(&docs, a, 3, 3);
                            fail(&docs, b, "pdf_to_images: not a PDF");
                        }
                        _ => {}
                    }
                },
            )
            .await
            .unwrap();
        let first = seen[0];
        assert_eq!(
            (first.files, first.files_finished, first.pages_done),
            (2, 0, 0)
        );
        // Neither page count known yet: one page each.
        assert_eq!((first.pages_total, first.estimated), (2, true));
        assert_eq!(first.pages_per_s, 0.0);
        // `a`'s count known, `b`'s estimated from it.
        assert_eq!((seen[1].pages_done, seen[1].pages_total), (1, 6));
        assert!(seen[1].pages_per_s > 0.0);
        let last = seen[seen.len() - 1];
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(last.finished());
        assert_eq!(
            (last.files_finished, last.failed, last.pages_done),
            (2, 1, 3)
        );
        assert_eq!(followed.done, 1);
        assert_eq!(followed.pages, 3);
        let [failed] = &followed.failed[..] else {
            panic!("{followed:?}");
        };
        assert_eq!(
            (failed.document, failed.error.as_str()),
            (b, "pdf_to_images: not a PDF")
        );
        assert!(failed.path.ends_with("b.pdf"), "{failed:?}");
        let v = serde_json::to_value(&followed).unwrap();
        assert_eq!(v["failed"][0]["document"], b, "{v}");
        assert!(v["pages_per_s"].as_f64().unwrap() > 0.0, "{v}");
    }

    #[tokio::test]
    async fn finished_documents_end_at_once_and_a_missing_one_is_said() {
        let (dir, docs) = documents().await;
        let a = ingested(dir.path(), &docs, "a").await;
        ingest_page(&docs, a, 1, 1);
        let mut calls = 0;
        let followed = docs
            .follow(FollowArgs::new(vec![a]), |_| calls += 1)
            .await
            .unwrap();
        assert_eq!((calls, followed.done, followed.pages), (1, 1, 0));
        let e = docs
            .follow(FollowArgs::new(vec![a, 999]), |_| {})
            .await
            .unwrap_err();
        assert!(matches!(e, OpsError::NoDocument(999)), "{e:?}");
    }
}
