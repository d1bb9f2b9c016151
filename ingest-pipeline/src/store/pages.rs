//! Which reader read each page, and how it was turned (version 4 of the schema).

use serde::{Deserialize, Serialize};
use squeueha::params;

use super::{Db, Result, exec};
use crate::vision::ReadBy;

/// Version 3: what produced each page's text (`text_layer`, `tesseract`, `vision_model`; NULL
/// for pages stored before) and the degrees the page image was turned before it was read.
pub const SCHEMA_V4: &str = r#"
ALTER TABLE ip_pages ADD COLUMN read_by TEXT;
ALTER TABLE ip_pages ADD COLUMN rotation INTEGER NOT NULL DEFAULT 0;
"#;

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
        "SELECT page_no, read_by, reader, rotation, length(coalesce(text, '')), tiles
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
        })
    })
    .collect()
}
