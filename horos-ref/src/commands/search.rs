//! `horos-ref search QUERY`: full text (default), text vectors, visual (MaxSim by the question's
//! text) or hybrid search over the ingested pages (`--mode`), optionally within one document
//! (horos-ops' `Documents::search`); `--like DOC:PAGE` and `--image FILE` look for pages that
//! look alike (`Documents::similar`, `Documents::search_image`).

use horos_ops::documents::{SearchArgs, SimilarArgs};

use crate::cli::SearchMode;
use crate::config::Config;
use crate::error::AppError;

/// What is looked for.
pub enum Question {
    /// Any text.
    Text(String),
    /// The pages like `DOCUMENT:PAGE`.
    Like(String),
    /// The pages like an image file, and holding these words when given (the two fused).
    Image(std::path::PathBuf, Option<String>),
}

pub async fn search(
    config: &Config,
    question: Question,
    k: usize,
    mode: SearchMode,
    document: Option<i64>,
    json_out: bool,
) -> Result<(), AppError> {
    let documents = crate::ingest::documents(config).await?;
    let hits = match question {
        Question::Text(query) => {
            let args = SearchArgs {
                query,
                k,
                mode: mode.into(),
                document,
            };
            documents.search(args).await?
        }
        Question::Like(like) => {
            let bad = || AppError::Usage(format!("--like {like}: DOCUMENT:PAGE, e.g. 3:12"));
            let (d, p) = like.split_once(':').ok_or_else(bad)?;
            let args = SimilarArgs {
                document: d.trim().parse().map_err(|_| bad())?,
                page: p.trim().parse().map_err(|_| bad())?,
                k,
                within: document,
            };
            documents.similar(args).await?
        }
        Question::Image(path, words) => {
            let image = std::fs::read(&path)
                .map_err(|e| AppError::Usage(format!("--image {}: {e}", path.display())))?;
            match words {
                Some(text) => {
                    documents
                        .search_image_and_text(image, text, k, document)
                        .await?
                }
                None => documents.search_image(image, k, document).await?,
            }
        }
    };
    if json_out {
        super::print_json(&hits);
        return Ok(());
    }
    for h in hits {
        println!(
            "document {} page {} ({:.2}): {}",
            h.document, h.page, h.score, h.snippet
        );
    }
    Ok(())
}
