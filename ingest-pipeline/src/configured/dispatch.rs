//! Which reader reads a page, which embedder embeds its text and which its image, chosen by the
//! settings at start: one enum per role, dispatching to the implementation the settings name, so that one
//! pipeline type serves every configuration.

use std::sync::Arc;

use crate::embed::{EmbedError, PixelPatchFallback, TextEmbedder, VisualEmbedder};
use crate::fallback::FallbackReader;
use crate::maxsim::MultiVector;
use crate::openai::{OpenAiEmbedder, OpenAiVisionReader};
use crate::pooling::PoolingEmbedder;
use crate::vision::{ReadBy, Reading, TesseractReader, VisionError, VisionReader};

use super::{EmbeddingsSettings, ReaderSettings, VisualSettings};

/// Tesseract on the CPU, or an OpenAI-compatible vision model.
#[derive(Debug)]
pub enum Reader {
    /// The `tesseract` command.
    Tesseract(TesseractReader),
    /// A vision-language model (Qwen2-VL style prompt).
    Vision(OpenAiVisionReader),
    /// A vision-language model, Tesseract for the pages it cannot read while its server is
    /// down ([`ReaderSettings::VisionModel`]'s `tesseract_fallback`).
    VisionOrTesseract(FallbackReader<OpenAiVisionReader, TesseractReader>),
}

impl Reader {
    /// The reader `settings` name. Tesseract does not detect the orientation itself: the
    /// pipeline turns each page upright once, when it renders it
    /// ([`PipelineConfig::orientation`](crate::pipeline::PipelineConfig::orientation)), for
    /// every reader and for the visual embedder.
    pub fn from_settings(settings: &ReaderSettings) -> Result<Self, VisionError> {
        let tesseract = TesseractReader::default().with_orientation(false);
        Ok(match settings {
            ReaderSettings::Tesseract => Reader::Tesseract(tesseract),
            ReaderSettings::VisionModel {
                url,
                model,
                tesseract_fallback,
            } => {
                let model = OpenAiVisionReader::new(url, model)?;
                if *tesseract_fallback {
                    Reader::VisionOrTesseract(FallbackReader::new(model, tesseract))
                } else {
                    Reader::Vision(model)
                }
            }
        })
    }
}

impl VisionReader for Reader {
    fn name(&self) -> &str {
        match self {
            Reader::Tesseract(r) => r.name(),
            Reader::Vision(r) => r.name(),
            Reader::VisionOrTesseract(r) => r.name(),
        }
    }

    fn read_by(&self) -> ReadBy {
        match self {
            Reader::Tesseract(r) => r.read_by(),
            Reader::Vision(r) => r.read_by(),
            Reader::VisionOrTesseract(r) => r.read_by(),
        }
    }

    async fn read(&self, png: Arc<Vec<u8>>) -> Result<Reading, VisionError> {
        match self {
            Reader::Tesseract(r) => r.read(png).await,
            Reader::Vision(r) => r.read(png).await,
            Reader::VisionOrTesseract(r) => r.read(png).await,
        }
    }
}

/// The configured text embedder: a model behind `/v1/embeddings`, or none (a pipeline that only
/// reads: its pages are never embedded, and a question cannot be).
#[derive(Debug)]
pub enum TextEmbeddings {
    /// An OpenAI-compatible embeddings server.
    OpenAi(OpenAiEmbedder),
    /// No embeddings model: [`TextEmbedder::embed`] answers [`EmbedError::Backend`], not
    /// retryable.
    None,
}

impl TextEmbeddings {
    /// The embedder `settings` name (none without settings).
    pub fn from_settings(settings: Option<&EmbeddingsSettings>) -> Result<Self, EmbedError> {
        Ok(match settings {
            Some(s) => TextEmbeddings::OpenAi(OpenAiEmbedder::new(&s.url, &s.model)?),
            None => TextEmbeddings::None,
        })
    }
}

impl TextEmbedder for TextEmbeddings {
    fn name(&self) -> &str {
        match self {
            TextEmbeddings::OpenAi(e) => e.name(),
            TextEmbeddings::None => "none",
        }
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self {
            TextEmbeddings::OpenAi(e) => e.embed(texts).await,
            TextEmbeddings::None => Err(EmbedError::Backend {
                message: "no text embeddings model is configured (ingest.embeddings_url)".into(),
                retryable: false,
            }),
        }
    }
}

/// The configured visual embedder: a late-interaction model, or the offline pixel fallback
/// (which refuses text questions with [`EmbedError::NoTextQuery`]).
#[derive(Debug)]
pub enum Visual {
    /// vLLM's `/pooling` (`token_embed`).
    Pooling(PoolingEmbedder),
    /// Pixel patches, no model.
    PixelPatchFallback(PixelPatchFallback),
}

impl Visual {
    /// The embedder `settings` name.
    pub fn from_settings(settings: &VisualSettings) -> Result<Self, EmbedError> {
        Ok(match settings {
            VisualSettings::Pooling { url, model } => {
                Visual::Pooling(PoolingEmbedder::new(url, model)?)
            }
            VisualSettings::PixelPatchFallback => {
                Visual::PixelPatchFallback(PixelPatchFallback::default())
            }
        })
    }
}

impl VisualEmbedder for Visual {
    fn name(&self) -> &str {
        match self {
            Visual::Pooling(e) => e.name(),
            Visual::PixelPatchFallback(e) => e.name(),
        }
    }

    async fn embed_image(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        match self {
            Visual::Pooling(e) => e.embed_image(png).await,
            Visual::PixelPatchFallback(e) => e.embed_image(png).await,
        }
    }

    async fn embed_query(&self, text: String) -> Result<MultiVector, EmbedError> {
        match self {
            Visual::Pooling(e) => e.embed_query(text).await,
            Visual::PixelPatchFallback(e) => e.embed_query(text).await,
        }
    }

    async fn embed_image_query(&self, png: Arc<Vec<u8>>) -> Result<MultiVector, EmbedError> {
        match self {
            Visual::Pooling(e) => e.embed_image_query(png).await,
            Visual::PixelPatchFallback(e) => e.embed_image_query(png).await,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_settings_choose_the_reader_and_its_fallback() {
        assert!(matches!(
            Reader::from_settings(&ReaderSettings::Tesseract).unwrap(),
            Reader::Tesseract(_)
        ));
        let vision = |tesseract_fallback| ReaderSettings::VisionModel {
            url: "http://127.0.0.1:1".into(),
            model: "Qwen/Qwen2-VL-7B-Instruct".into(),
            tesseract_fallback,
        };
        let r = Reader::from_settings(&vision(true)).unwrap();
        assert!(matches!(r, Reader::VisionOrTesseract(_)));
        // The page records the model that was asked for, whichever read it.
        assert_eq!(r.name(), "Qwen/Qwen2-VL-7B-Instruct");
        assert!(matches!(
            Reader::from_settings(&vision(false)).unwrap(),
            Reader::Vision(_)
        ));
    }

    #[tokio::test]
    async fn without_an_embeddings_model_nothing_is_embedded() {
        let none = TextEmbeddings::from_settings(None).unwrap();
        assert_eq!(none.name(), "none");
        let e = none.embed(vec!["a question".into()]).await.unwrap_err();
        assert!(
            !e.is_retryable() && e.to_string().contains("embeddings_url"),
            "{e}"
        );
        let some = TextEmbeddings::from_settings(Some(&EmbeddingsSettings {
            url: "http://127.0.0.1:1".into(),
            model: "BAAI/bge-m3".into(),
        }))
        .unwrap();
        assert_eq!(some.name(), "BAAI/bge-m3");
    }

    #[tokio::test]
    async fn the_offline_visual_fallback_refuses_text_questions() {
        let v = Visual::from_settings(&VisualSettings::PixelPatchFallback).unwrap();
        let e = v.embed_query("anything".into()).await.unwrap_err();
        assert!(matches!(e, EmbedError::NoTextQuery(_)), "{e:?}");
        let v = Visual::from_settings(&VisualSettings::Pooling {
            url: "http://127.0.0.1:1".into(),
            model: "vidore/colpali-v1.3-hf".into(),
        })
        .unwrap();
        assert_eq!(v.name(), "vidore/colpali-v1.3-hf");
    }
}
