//! The data-plane routes, as metrics label them.

/// A data-plane route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions` (a raw prompt, no chat template).
    Completions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/images/generations`.
    Images,
    /// `POST /v1/rerank` (documents ranked by relevance to a query).
    Rerank,
    /// `POST /v1/audio/speech` (text to speech: the answer is audio bytes).
    Speech,
    /// An async job's call.
    Job,
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 7] = [
        Route::Chat,
        Route::Completions,
        Route::Embeddings,
        Route::Images,
        Route::Rerank,
        Route::Speech,
        Route::Job,
    ];

    /// The route's label.
    pub fn label(self) -> &'static str {
        match self {
            Route::Chat => "chat",
            Route::Completions => "completions",
            Route::Embeddings => "embeddings",
            Route::Images => "images",
            Route::Rerank => "rerank",
            Route::Speech => "speech",
            Route::Job => "job",
        }
    }

    /// The upstream path.
    pub fn path(self) -> &'static str {
        match self {
            Route::Chat | Route::Job => "/v1/chat/completions",
            Route::Completions => "/v1/completions",
            Route::Embeddings => "/v1/embeddings",
            Route::Images => "/v1/images/generations",
            Route::Rerank => "/v1/rerank",
            Route::Speech => "/v1/audio/speech",
        }
    }

    /// Whether its requests are chats (`messages`), which a model's manifest may shape.
    pub fn is_chat(self) -> bool {
        matches!(self, Route::Chat | Route::Job)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
