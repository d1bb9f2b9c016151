//! `POST /v1/answers`: a question answered from the indexed pages, each claim citing its
//! document and page.
//!
//! 1. The pages that support the question come from the [`Searcher`](crate::data::search::Searcher)'s
//!    [`passages`](horos_server_control::Searcher::passages): pages holding its words, or close to
//!    it in meaning above `min_similarity`. **None: the answer says no supporting page was found,
//!    and no model is called.**
//! 2. The chat model (`model`) is asked through the coordinator's own dispatch (the caller's key,
//!    allowed models, priority, budget, the pool) with the numbered pages in a system message and
//!    the instruction to cite them as `[n]`. **A vision model also sees the pages themselves**
//!    (the ColPali RAG pattern): the best [`PassageQuery::DEFAULT_IMAGES`] pages' rendered images
//!    (each at most [`PassageQuery::DEFAULT_MAX_IMAGE_BYTES`]; a larger or missing one is left
//!    out, its text kept) follow the question in the user's message as OpenAI `image_url` parts
//!    (`data:image/png;base64,…`), each after a text part that names it (`[n] document D, page
//!    P (the page's image):`).
//!    A model is a vision model when its manifest entry says `vision = true` (for a task: every
//!    model of its ladder); the request's `"images": true | false` overrides that.
//! 3. Each sentence of its answer is a claim; a claim cites the sources it names (`[n]`), else
//!    the page that shares the most of its words (at least [`MIN_OVERLAP`] of them), which is
//!    appended as `[n]`. A claim no page shares words with cites nothing.
//!
//! The answer: `{"object": "answer", "model", "answer", "supported", "citations": [{"n",
//! "document", "page", "score", "excerpt"}], "claims": [{"text", "sources": [n, ...]}],
//! "usage"}`, where `[n]` in `answer` is `citations[n - 1]`. Streamed (`"stream": true`) as
//! server-sent events: `answer.sources` (the citations, before the model speaks),
//! `answer.delta` (`{"delta": "..."}`, as the model writes), `answer.done` (the whole answer,
//! claims and usage), then `[DONE]`; a model's stream that breaks or reports an error ends with
//! `answer.error` instead (no `answer.done`).

use std::collections::HashSet;

use base64::Engine as _;
use horos_server_control::{Collections, Passage, PassageQuery};
use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// The most pages an answer draws on.
pub const MAX_K: usize = 20;
/// A claim without a `[n]` cites the page that holds at least this share of its words.
pub const MIN_OVERLAP: f64 = 0.3;
/// The answer when no page supports the question.
pub const NO_SUPPORT: &str = "No supporting page was found in the indexed documents for this question, so it was not answered.";

/// A `POST /v1/answers` request.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerRequest {
    /// The question.
    pub question: String,
    /// The chat model that writes the answer.
    pub model: String,
    /// What the searcher looks for.
    pub passages: PassageQuery,
    /// Most tokens the model writes.
    pub max_tokens: Option<u64>,
    /// The model's sampling temperature (0: its most likely words, the same answer each time).
    pub temperature: Option<f64>,
    /// Server-sent events instead of one JSON answer.
    pub stream: bool,
    /// `images`: whether the model is given the pages' images (`None`: as its manifest says).
    pub images: Option<bool>,
}

impl AnswerRequest {
    /// Reads the body: `question` and `model` required; `k` (1 to [`MAX_K`], default 4),
    /// `document`, `min_similarity` (0 to 1, default 0.35), `max_chars` per page (200 to
    /// 20,000, default 1,500), `max_tokens`, `temperature` (0 to 2), `stream`, `images`. A 400
    /// names the field at fault. No page images are asked for until
    /// [`AnswerRequest::with_images`].
    pub fn from_body(body: &Map<String, Value>) -> Result<Self, ApiError> {
        let text = |field: &str| match body.get(field) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(
                ApiError::bad_request(format!("`{field}` (a non-empty string) is required"))
                    .param(field),
            ),
        };
        let number = |field: &str, min: f64, max: f64, default: f64| match body.get(field) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| (min..=max).contains(x))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("`{field}` must be a number from {min} to {max}"))
                        .param(field)
                }),
        };
        let document = match body.get("document") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                ApiError::bad_request("`document` must be a document id (an integer)")
                    .param("document")
            })?),
        };
        let flag = |field: &str| match body.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!("`{field}` must be true or false")).param(field)
            }),
        };
        let stream = flag("stream")?.unwrap_or(false);
        let images = flag("images")?;
        let max_tokens = match body.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                ApiError::bad_request("`max_tokens` must be a positive integer").param("max_tokens")
            })?),
        };
        let known = [
            "question",
            "model",
            "k",
            "document",
            "min_similarity",
            "max_chars",
            "max_tokens",
            "temperature",
            "stream",
            "images",
        ];
        if let Some(other) = body
            .keys()
            .find(|k| !known.contains(&k.as_str()) && !k.starts_with("x_"))
        {
            return Err(ApiError::bad_request(format!(
                "unknown field `{other}` (question, model, k, document, min_similarity, max_chars, max_tokens, temperature, stream, images, x_*)"
            ))
            .param(other));
        }
        let question = text("question")?;
        Ok(Self {
            passages: PassageQuery {
                question: question.clone(),
                k: number("k", 1.0, MAX_K as f64, 4.0)? as usize,
                document,
                min_similarity: number("min_similarity", 0.0, 1.0, 0.35)?,
                max_chars: number("max_chars", 200.0, 20_000.0, 1_500.0)? as usize,
                images: 0,
                max_image_bytes: PassageQuery::DEFAULT_MAX_IMAGE_BYTES,
                // Set from the admitted caller by the handler (never from the body): none
                // until then.
                collections: Collections::Only(Vec::new()),
            },
            question,
            model: text("model")?,
            max_tokens,
            temperature: match body.get("temperature") {
                None | Some(Value::Null) => None,
                Some(_) => Some(number("temperature", 0.0, 2.0, 0.0)?),
            },
            stream,
            images,
        })
    }

    /// Asks for the best pages' images when the request's `images` says so, else when
    /// `vision_model` (the model reads images); returns whether it did.
    pub fn with_images(&mut self, vision_model: bool) -> bool {
        let on = self.images.unwrap_or(vision_model);
        self.passages.images = if on {
            PassageQuery::DEFAULT_IMAGES.min(self.passages.k)
        } else {
            0
        };
        on
    }

    /// The chat request that asks the model: the pages, numbered, in the system message; the
    /// question as the user's, followed by the pages' images when images were asked for
    /// ([`AnswerRequest::with_images`]) and the searcher gave some.
    pub fn chat_request(&self, passages: &[Passage]) -> Map<String, Value> {
        let mut sources = String::new();
        for (i, p) in passages.iter().enumerate() {
            sources.push_str(&format!(
                "[{}] document {}, page {}:\n{}\n\n",
                i + 1,
                p.document,
                p.page,
                p.text
            ));
        }
        let system = format!(
            "Answer the question using only the numbered sources below. After each sentence, cite \
             the source it comes from as [n]. If the sources do not answer the question, say so.\n\n\
             {sources}"
        );
        let mut request = Map::new();
        request.insert("model".into(), json!(self.model));
        request.insert(
            "messages".into(),
            json!([{"role": "system", "content": system.trim_end()},
                   {"role": "user", "content": self.user_content(passages)}]),
        );
        if let Some(n) = self.max_tokens {
            request.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = self.temperature {
            request.insert("temperature".into(), json!(t));
        }
        if self.stream {
            request.insert("stream".into(), json!(true));
            request.insert("stream_options".into(), json!({"include_usage": true}));
        }
        request
    }

    /// The user's message: the question, and after it, for a model given images, each page's
    /// image (at most `passages.images` of them, each at most `passages.max_image_bytes`, even
    /// from a searcher that gave more) after a text part naming its source; the question alone
    /// (a string) when there is no image to give.
    fn user_content(&self, passages: &[Passage]) -> Value {
        let mut parts = Vec::new();
        let max_bytes = self.passages.max_image_bytes;
        let with_image = passages
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i + 1, p, p.image.as_deref()?)))
            .filter(|(_, _, png)| png.len() <= max_bytes)
            .take(self.passages.images);
        for (n, p, png) in with_image {
            let data = base64::engine::general_purpose::STANDARD.encode(png);
            parts.push(json!({"type": "text",
                "text": format!("[{n}] document {}, page {} (the page's image):", p.document, p.page)}));
            parts.push(json!({"type": "image_url",
                "image_url": {"url": format!("data:image/png;base64,{data}")}}));
        }
        if parts.is_empty() {
            return json!(self.question);
        }
        parts.insert(0, json!({"type": "text", "text": self.question}));
        Value::Array(parts)
    }
}

/// The citations of `passages`: `[n]` is the n-th.
pub fn citations(passages: &[Passage]) -> Value {
    Value::Array(
        passages
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let excerpt: String = p.text.chars().take(200).collect();
                json!({"n": i + 1, "document": p.document, "page": p.page, "score": p.score,
                       "excerpt": excerpt})
            })
            .collect(),
    )
}

/// The answer to a question no page supports (no model was called).
pub fn unsupported(req: &AnswerRequest) -> Value {
    json!({"object": "answer", "model": req.model, "answer": NO_SUPPORT, "supported": false,
           "citations": [], "claims": []})
}

/// One sentence of an answer and the sources it cites (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The sentence.
    pub text: String,
    /// The sources it cites.
    pub sources: Vec<usize>,
}

/// The claims of `answer`, each with its sources (see the module's documentation), and the
/// answer with a `[n]` after every claim that cites a page it did not name itself.
pub fn attribute(answer: &str, passages: &[Passage]) -> (String, Vec<Claim>) {
    let page_words: Vec<HashSet<String>> = passages.iter().map(|p| words(&p.text)).collect();
    let mut cited = String::new();
    let mut claims = Vec::new();
    for sentence in sentences(answer) {
        let named = markers(sentence, passages.len());
        let sources = if named.is_empty() {
            best_page(sentence, &page_words).into_iter().collect()
        } else {
            named.clone()
        };
        if !cited.is_empty() {
            cited.push(' ');
        }
        cited.push_str(sentence);
        if named.is_empty()
            && let Some(n) = sources.first()
        {
            cited.push_str(&format!(" [{n}]"));
        }
        claims.push(Claim {
            text: sentence.to_owned(),
            sources,
        });
    }
    (cited, claims)
}

/// The claims as JSON.
pub fn claims_json(claims: &[Claim]) -> Value {
    Value::Array(
        claims
            .iter()
            .map(|c| json!({"text": c.text, "sources": c.sources}))
            .collect(),
    )
}

/// The answer's sentences: cut after `.`, `!` or `?` followed by white space, and at blank
/// lines; trimmed, empty ones dropped.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        let next = chars.get(i + 1).map(|&(_, n)| n);
        let end_of_sentence = matches!(c, '.' | '!' | '?') && next.is_none_or(char::is_whitespace);
        let blank_line = c == '\n' && next == Some('\n');
        if end_of_sentence || blank_line {
            let end = at + c.len_utf8();
            // A citation right after the full stop belongs to the sentence: `... here. [2]`.
            let mut end = end;
            let rest = &text[end..];
            let trimmed = rest.trim_start();
            if trimmed.starts_with('[')
                && let Some(close) = trimmed.find(']')
                && trimmed[1..close]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ',' || c == ' ')
            {
                end += rest.len() - trimmed.len() + close + 1;
            }
            if end <= start {
                continue;
            }
            out.push(text[start..end].trim());
            start = end;
        }
    }
    out.push(text[start..].trim());
    out.retain(|s| !s.is_empty() && s.chars().any(char::is_alphanumeric));
    out
}

/// The sources a sentence names as `[n]` or `[n, m]`, within `1..=count`, in order.
fn markers(sentence: &str, count: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = sentence;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        for part in after[..close].split(',') {
            if let Ok(n) = part.trim().parse::<usize>()
                && (1..=count).contains(&n)
                && !out.contains(&n)
            {
                out.push(n);
            }
        }
        rest = &after[close + 1..];
    }
    out
}

/// The page holding the largest share (at least [`MIN_OVERLAP`]) of the sentence's words, 1-based.
fn best_page(sentence: &str, pages: &[HashSet<String>]) -> Option<usize> {
    let mine = words(sentence);
    if mine.is_empty() {
        return None;
    }
    pages
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                i + 1,
                mine.intersection(p).count() as f64 / mine.len() as f64,
            )
        })
        .filter(|(_, share)| *share >= MIN_OVERLAP)
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(n, _)| n)
}

/// The words that carry meaning: lower-cased runs of letters and digits of four characters or
/// more (short function words say nothing about where a claim comes from).
fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn page(document: i64, page: u32, text: &str) -> Passage {
        Passage::new(document, page, 1.0, text)
    }

    #[test]
    fn a_request_names_the_field_at_fault() {
        let body = |v: Value| v.as_object().unwrap().clone();
        let ok = AnswerRequest::from_body(&body(json!({"question": "why?", "model": "m",
            "k": 3, "document": 7, "stream": true, "x_priority": 1})))
        .unwrap();
        assert_eq!(ok.passages.k, 3);
        assert_eq!(ok.passages.document, Some(7));
        assert!(ok.stream);
        for (bad, field) in [
            (json!({"model": "m"}), "question"),
            (json!({"question": " ", "model": "m"}), "question"),
            (json!({"question": "q"}), "model"),
            (json!({"question": "q", "model": "m", "k": 0}), "k"),
            (json!({"question": "q", "model": "m", "k": 21}), "k"),
            (
                json!({"question": "q", "model": "m", "document": "x"}),
                "document",
            ),
            (
                json!({"question": "q", "model": "m", "min_similarity": 2}),
                "min_similarity",
            ),
            (
                json!({"question": "q", "model": "m", "stream": "yes"}),
                "stream",
            ),
            (json!({"question": "q", "model": "m", "top": 3}), "top"),
        ] {
            let e = AnswerRequest::from_body(&body(bad.clone())).unwrap_err();
            assert_eq!(e.body()["error"]["param"], field, "{bad}");
        }
    }

    #[test]
    fn the_model_is_given_the_numbered_pages_and_the_question() {
        let body = json!({"question": "How are errors reported?", "model": "m", "max_tokens": 64});
        let req = AnswerRequest::from_body(body.as_object().unwrap()).unwrap();
        let chat = req.chat_request(&[page(3, 18, "HRESULT codes"), page(3, 19, "exceptions")]);
        let system = chat["messages"][0]["content"].as_str().unwrap();
        assert!(
            system.contains("[1] document 3, page 18:\nHRESULT codes"),
            "{system}"
        );
        assert!(
            system.contains("[2] document 3, page 19:\nexceptions"),
            "{system}"
        );
        assert_eq!(chat["messages"][1]["content"], "How are errors reported?");
        assert_eq!(chat["max_tokens"], 64);
        assert!(chat.get("stream").is_none());
    }

    #[test]
    fn a_vision_model_is_given_the_pages_images_after_the_question() {
        let body = json!({"question": "What does the diagram show?", "model": "vl", "k": 4});
        let mut req = AnswerRequest::from_body(body.as_object().unwrap()).unwrap();
        let with = |p: Passage, png: &[u8]| Passage {
            image: Some(png.to_vec()),
            ..p
        };
        let pages = [
            with(page(3, 18, "a diagram"), b"png-18"),
            page(3, 19, "no image: missing or too large"),
            with(page(4, 2, "a table"), b"png-2"),
        ];
        // Not asked for: the question alone, whatever the searcher gave.
        assert!(!req.with_images(false));
        assert_eq!(req.passages.images, 0);
        let chat = req.chat_request(&pages);
        assert_eq!(
            chat["messages"][1]["content"],
            "What does the diagram show?"
        );
        // A vision model: the question, then each image after its source's number.
        assert!(req.with_images(true));
        assert_eq!(req.passages.images, 3);
        let chat = req.chat_request(&pages);
        let parts = chat["messages"][1]["content"].as_array().unwrap();
        assert_eq!(parts.len(), 5, "{parts:?}");
        assert_eq!(parts[0]["text"], "What does the diagram show?");
        assert!(
            parts[1]["text"]
                .as_str()
                .unwrap()
                .starts_with("[1] document 3, page 18")
        );
        let url = parts[2]["image_url"]["url"].as_str().unwrap();
        let b64 = url.strip_prefix("data:image/png;base64,").unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(png, b"png-18");
        assert!(
            parts[3]["text"]
                .as_str()
                .unwrap()
                .starts_with("[3] document 4, page 2")
        );
        assert_eq!(parts[4]["type"], "image_url");
        // The page without an image keeps its text among the sources.
        let system = chat["messages"][0]["content"].as_str().unwrap();
        assert!(
            system.contains("[2] document 3, page 19:\nno image"),
            "{system}"
        );
        // The request's `images` wins over the model; fewer pages, fewer images.
        let body = json!({"question": "q", "model": "vl", "k": 2, "images": false});
        let mut req = AnswerRequest::from_body(body.as_object().unwrap()).unwrap();
        assert!(!req.with_images(true));
        let body = json!({"question": "q", "model": "m", "k": 2, "images": true});
        let mut req = AnswerRequest::from_body(body.as_object().unwrap()).unwrap();
        assert!(req.with_images(false));
        assert_eq!(req.passages.images, 2);
        let bad = json!({"question": "q", "model": "m", "images": "yes"});
        let e = AnswerRequest::from_body(bad.as_object().unwrap()).unwrap_err();
        assert_eq!(e.body()["error"]["param"], "images");
    }

    #[test]
    fn each_claim_cites_the_page_it_names_or_the_one_it_draws_on() {
        let pages = [
            page(
                1,
                18,
                "Methods of COM interfaces always return an HRESULT error code.",
            ),
            page(2, 4, "The sample exam sheet has boxes for every answer."),
        ];
        let (cited, claims) = attribute(
            "COM interfaces return an HRESULT error code. The exam sheet has boxes [2]. \
             Bananas are yellow!",
            &pages,
        );
        assert_eq!(claims.len(), 3, "{claims:?}");
        assert_eq!(claims[0].sources, [1]);
        assert_eq!(claims[1].sources, [2]);
        assert_eq!(claims[1].text, "The exam sheet has boxes [2].");
        assert!(
            claims[2].sources.is_empty(),
            "nothing supports it: {claims:?}"
        );
        assert_eq!(
            cited,
            "COM interfaces return an HRESULT error code. [1] The exam sheet has boxes [2]. \
             Bananas are yellow!"
        );
        // A marker outside the sources is not a citation.
        let (_, claims) = attribute("Something [9].", &pages);
        assert!(claims[0].sources.is_empty());
        // A citation after the full stop stays with its sentence.
        let (_, claims) = attribute("Boxes for every answer. [2] Next one.", &pages);
        assert_eq!(claims[0].text, "Boxes for every answer. [2]");
        assert_eq!(claims[0].sources, [2]);
    }

    #[test]
    fn nothing_found_says_so() {
        let body = json!({"question": "q", "model": "m"});
        let req = AnswerRequest::from_body(body.as_object().unwrap()).unwrap();
        let v = unsupported(&req);
        assert_eq!(v["supported"], false);
        assert_eq!(v["answer"], NO_SUPPORT);
        assert_eq!(citations(&[page(1, 2, "x")])[0]["page"], 2);
    }
}
