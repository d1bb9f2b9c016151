//! `POST /v1/rerank` (the API of vLLM and llama-server with `--reranking`): documents scored by
//! their relevance to a query. The fake's score is the share of the query's words that the
//! document contains, so a test knows the order to expect.

use serde_json::{Value, json};

/// The text of one document: a string, or an object with `text`.
fn doc_text(d: &Value) -> Option<&str> {
    d.as_str().or_else(|| d.get("text").and_then(Value::as_str))
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The answer to a rerank request, or what is wrong with it.
pub(crate) fn answer(model: &str, json: &Value) -> Result<Value, String> {
    let query = json
        .get("query")
        .and_then(Value::as_str)
        .ok_or("`query` must be a string")?;
    let docs: Vec<&str> = json
        .get("documents")
        .and_then(Value::as_array)
        .filter(|d| !d.is_empty())
        .ok_or("`documents` must be a non-empty array")?
        .iter()
        .map(|d| doc_text(d).ok_or("each document must be text or {\"text\": ...}"))
        .collect::<Result<_, _>>()?;
    let q = words(query);
    let mut scored: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let dw = words(d);
            let hits = q.iter().filter(|w| dw.contains(w)).count();
            (i, hits as f64 / q.len().max(1) as f64)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let top = json
        .get("top_n")
        .and_then(Value::as_u64)
        .map_or(scored.len(), |n| n as usize);
    let with_docs = json
        .get("return_documents")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let results: Vec<Value> = scored
        .into_iter()
        .take(top)
        .map(|(i, s)| {
            let mut r = json!({"index": i, "relevance_score": s});
            if with_docs {
                r["document"] = json!({"text": docs[i]});
            }
            r
        })
        .collect();
    let tokens: usize = q.len() + docs.iter().map(|d| words(d).len()).sum::<usize>();
    Ok(json!({
        "id": "rerank-fake",
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn documents_are_ranked_by_shared_words() {
        let v = answer(
            "r",
            &json!({"query": "red apple", "documents": ["a blue car", {"text": "Red apple pie"}, "an apple"], "top_n": 2, "return_documents": true}),
        )
        .unwrap();
        let r = v["results"].as_array().unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["index"], 1);
        assert_eq!(r[0]["relevance_score"], 1.0);
        assert_eq!(r[0]["document"]["text"], "Red apple pie");
        assert_eq!(r[1]["index"], 2);
        assert!(answer("r", &json!({"query": "x"})).is_err());
    }
}
