//! A reader that falls back to another when its own is down: the vision model's server refuses
//! connections or answers 5xx, so the page is read by Tesseract instead of waiting, and the page
//! records that ([`Reading::read_by`]).

use std::sync::Arc;

use crate::vision::{ReadBy, Reading, VisionError, VisionReader};

/// Reads with `primary`; an image `primary` cannot read because its server is down
/// ([`VisionError::Unavailable`]) is read by `fallback`. Any other error is `primary`'s.
#[derive(Debug, Clone)]
pub struct FallbackReader<P, F> {
    primary: P,
    fallback: F,
}

impl<P: VisionReader, F: VisionReader> FallbackReader<P, F> {
    /// `primary`, falling back to `fallback`.
    pub fn new(primary: P, fallback: F) -> Self {
        Self { primary, fallback }
    }
}

impl<P: VisionReader, F: VisionReader> VisionReader for FallbackReader<P, F> {
    fn name(&self) -> &str {
        self.primary.name()
    }

    fn read_by(&self) -> ReadBy {
        self.primary.read_by()
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        let reading = match self.primary.read(png.clone()).await {
            Err(VisionError::Unavailable(why)) => {
                tracing::warn!(reader = self.primary.name(), %why, "reader down, falling back");
                let mut reading = self.fallback.read(png).await?;
                reading.read_by.get_or_insert(self.fallback.read_by());
                reading
            }
            other => other?,
        };
        Ok(reading)
    }
}
