//! Which reader read each page, and how it was turned (version 4 of the schema); a page that
//! failed alone, and why (version 8).

use serde::{Deserialize, Serialize};
use squeueha::params;

use super::{Db, Result, exec, now_s};
use crate::render::FailureReason;
use crate::vision::ReadBy;

/// Version 3: what produced each page's text (`text_layer`, `tesseract`, `vision_model`; NULL
/// for pages stored before) and the degrees the page image was turned before it was read.
pub const SCHEMA_V4: &str = r#"
ALTER TABLE ip_pages ADD COLUMN read_by TEXT;
ALTER TABLE ip_pages ADD COLUMN rotation INTEGER NOT NULL DEFAULT 0;
"#;

/// Version 8 (the same on PostgreSQL): a page that failed alone keeps why
/// ([`insert_failed_page`]): its stable reason (`too_large`) and the message that says what.
pub const SCHEMA_V8: &str = r#"
ALTER TABLE ip_pages ADD COLUMN failure TEXT;
ALTER TABLE ip_pages ADD COLUMN failure_message TEXT;
"#;

/// Why a page has no text: it failed alone, and its document went on without it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageFailed {
    /// The stable reason (`too_large`).
    pub reason: FailureReason,
    /// What failed, for a person.
    pub message: String,
}

impl PageFailed {
    /// Read back from the two columns (`None` for a page that did not fail, or a reason this
    /// build does not know).
    pub(super) fn from_columns(reason: Option<String>, message: Option<String>) -> Option<Self> {
        Some(Self {
            reason: FailureReason::parse(&reason?)?,
            message: message.unwrap_or_default(),
        })
    }
}

/// Records page `page_no` of a document as failed alone (`failed`), once: a row with no image
/// and no text that is done at once, so that the document completes with its other pages.
/// Returns false when the page was recorded before (nothing changes).
pub fn insert_failed_page(
    db: &mut dyn Db,
    doc_id: i64,
    page_no: u32,
    size: (u32, u32),
    failed: &PageFailed,
) -> Result<bool> {
    let inserted = exec(
        db,
        "INSERT INTO ip_pages (doc_id, page_no, width, height, image_bytes, image_path, tiles,
             rendered_at, read_done, text, stored, text_embedded, visual_embedded, done,
             failure, failure_message)
         VALUES (?1, ?2, ?3, ?4, 0, '', 1, ?5, 1, '', 1, 1, 1, 1, ?6, ?7) ON CONFLICT DO NOTHING",
        params![
            doc_id,
            page_no,
            size.0,
            size.1,
            now_s(),
            failed.reason.as_str(),
            failed.message.as_str()
        ],
    )? == 1;
    if inserted {
        exec(
            db,
            "UPDATE ip_documents SET done_pages = done_pages + 1 WHERE id = ?1",
            params![doc_id],
        )?;
    }
    Ok(inserted)
}

/// A stored page as the library API and `horos-ref docs pages` show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageSummary {
    /// Page number, from 1.
    pub page_no: u32,
    /// What produced its text; `None` until it is stored (or for pages stored before schema
    /// version 4).
    pub read_by: Option<ReadBy>,
    /// The reader's name (`text_layer`, `tesseract`, the vision model's name).
    pub reader: Option<String>,
    /// Degrees the image was turned clockwise before it was read (0, 90, 180, 270): when it was
    /// rendered ([`set_page_rotation`]) and by its reader, together.
    pub rotation: u16,
    /// Characters of its text.
    pub chars: usize,
    /// Tiles it was cut into (1 when not tiled).
    pub tiles: u32,
    /// Why it has no text, when it failed alone ([`insert_failed_page`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<PageFailed>,
}

/// Records that page `page_no`'s image was turned `degrees` clockwise when it was rendered
/// (orientation detection); the reader's own turn, if any, is added when its text is stored
/// ([`store_page_text`](super::store_page_text)).
pub fn set_page_rotation(db: &mut dyn Db, doc_id: i64, page_no: u32, degrees: u16) -> Result<()> {
    exec(
        db,
        "UPDATE ip_pages SET rotation = ?3 WHERE doc_id = ?1 AND page_no = ?2",
        params![doc_id, page_no, degrees % 360],
    )?;
    Ok(())
}

/// The pages of a document, in order.
pub fn document_pages(db: &mut dyn Db, doc_id: i64) -> Result<Vec<PageSummary>> {
    db.query(
        "SELECT page_no, read_by, reader, rotation, length(coalesce(text, '')), tiles,
                failure, failure_message
         FROM ip_pages WHERE doc_id = ?1 ORDER BY page_no",
        params![doc_id],
    )?
    .iter()
    .map(|r| {
        Ok(PageSummary {
            page_no: r.get(0)?,
            read_by: r.get::<Option<String>>(1)?.and_then(|s| ReadBy::parse(&s)),
            reader: r.get(2)?,
            rotation: r.get(3)?,
            chars: r.get::<i64>(4)?.try_into().unwrap_or(0),
            tiles: r.get(5)?,
            failure: PageFailed::from_columns(r.get(6)?, r.get(7)?),
        })
    })
    .collect()
}
