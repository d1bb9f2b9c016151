//! [`PageHit`]: a page a search found, the vocabulary of the searches and of the filter that
//! keeps only the pages a caller may read.

use serde::{Deserialize, Serialize};

/// A page found by a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageHit {
    /// Document id.
    pub doc_id: i64,
    /// Page number.
    pub page_no: u32,
    /// Score (higher is better).
    pub score: f64,
    /// A snippet of matching text (full-text and vector search).
    pub snippet: String,
}
