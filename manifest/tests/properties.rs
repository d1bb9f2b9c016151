//! Property tests: templates render any chat, the reasoning split agrees with its join and with
//! itself in pieces, answers are reshaped the same whatever their chunk boundaries, and the
//! template parser answers any text with a template or a typed error.

#![allow(clippy::unwrap_used)]

mod fuzz_body;

use std::collections::BTreeMap;

use horos_manifest::{
    Attempt, CompletionApi, Endpoint, Manifest, ModelManifest, Payload, Reshaper, ShapeError,
    Split, ThinkSplitter, ThinkingVia,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];
const BUILTINS: [&str; 4] = ["chatml", "alpaca", "raw", "plain"];

/// Text that is often close to the tags and the templates' markers, sometimes any Unicode.
fn tricky_text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "<",
        "/",
        ">",
        "<think>",
        "</think>",
        "<thi",
        "nk>",
        "</",
        "think",
        " ",
        "\n",
        "é",
        "🦀",
        "\u{0}",
        "{{",
        "}}",
        "{%",
        "%}",
        "<|im_end|>",
        "### Instruction:",
        "a",
        "2+2",
    ]);
    prop_oneof![
        prop::collection::vec(pieces, 0..24).prop_map(|p| p.concat()),
        any::<String>(),
    ]
}

/// A message's content: text (maybe empty), or a list of text parts.
fn content() -> impl Strategy<Value = (Value, String)> {
    prop_oneof![
        tricky_text().prop_map(|t| (Value::String(t.clone()), t)),
        Just((Value::Null, String::new())),
        prop::collection::vec(tricky_text(), 0..4).prop_map(|parts| {
            let list = parts
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            (Value::Array(list), parts.concat())
        }),
    ]
}

/// A chat: its messages as JSON, and each one's (role, text).
fn chat() -> impl Strategy<Value = (Vec<Value>, Vec<(String, String)>)> {
    prop::collection::vec((prop::sample::select(ROLES.to_vec()), content()), 0..40).prop_map(
        |msgs| {
            let json = msgs
                .iter()
                .map(|(role, (c, _))| json!({"role": role, "content": c}))
                .collect();
            let text = msgs
                .into_iter()
                .map(|(role, (_, t))| (role.to_owned(), t))
                .collect();
            (json, text)
        },
    )
}

/// What each built-in template renders, written out by hand.
fn expected_prompt(template: &str, msgs: &[(String, String)]) -> String {
    match template {
        "chatml" => {
            let mut out: String = msgs
                .iter()
                .map(|(r, c)| format!("<|im_start|>{r}\n{c}<|im_end|>\n"))
                .collect();
            out.push_str("<|im_start|>assistant\n");
            out
        }
        "alpaca" => {
            let mut out: String = msgs
                .iter()
                .map(|(r, c)| match r.as_str() {
                    "system" => format!("{c}\n\n"),
                    "user" => format!("### Instruction:\n{c}\n\n"),
                    _ => format!("### Response:\n{c}\n\n"),
                })
                .collect();
            out.push_str("### Response:\n");
            out
        }
        _ => msgs
            .iter()
            .map(|(_, c)| c.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
    }
}

fn attempt(model: &str) -> Attempt<'_> {
    Attempt {
        model,
        endpoint: Endpoint::CHAT,
        thinking: None,
        template: None,
        id: 7,
    }
}

fn body(messages: Vec<Value>, extra: &[(&str, Value)]) -> Map<String, Value> {
    let mut b = Map::new();
    b.insert("model".into(), json!("m"));
    b.insert("messages".into(), Value::Array(messages));
    for (k, v) in extra {
        b.insert((*k).to_owned(), v.clone());
    }
    b
}

/// Text without `tag`, however it is cut back together.
fn without(mut s: String, tag: &str) -> String {
    while s.contains(tag) {
        s = s.replace(tag, "");
    }
    s
}

/// `pieces` pushed one by one, then finished: everything the splitter told apart.
fn streamed(open: &str, close: &str, inside: bool, pieces: &[&str]) -> Split {
    let mut s = ThinkSplitter::new(open, close, inside);
    let mut all = Split::default();
    let mut parts: Vec<Split> = pieces.iter().map(|p| s.push(p)).collect();
    parts.push(s.finish());
    for p in parts {
        all.reasoning.push_str(&p.reasoning);
        all.content.push_str(&p.content);
    }
    all
}

/// `text` cut at the char boundaries nearest `cuts` (fractions of its length).
fn cut_at<'a>(text: &'a str, cuts: &[f64]) -> Vec<&'a str> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|f| {
            let mut i = (f * text.len() as f64) as usize;
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            i
        })
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for i in at.into_iter().chain([text.len()]) {
        pieces.push(&text[from..i]);
        from = i;
    }
    pieces
}

/// A stream's events as JSON, `created` (the clock) left out.
fn events(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| match serde_json::from_str::<Value>(d) {
            Ok(Value::Object(mut m)) => {
                m.remove("created");
                Value::Object(m)
            }
            _ => Value::String(d.to_owned()),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_builtin_template_renders_any_chat_as_written_out(
        (messages, text) in chat(),
        template in prop::sample::select(BUILTINS.to_vec()),
        api in prop::sample::select(vec![CompletionApi::Openai, CompletionApi::Llama]),
    ) {
        let entry = ModelManifest {
            template: Some(template.to_owned()),
            completion_api: api,
            ..ModelManifest::default()
        };
        let manifest = Manifest::new(&BTreeMap::from([("m".to_owned(), entry)])).unwrap();
        let b = body(messages, &[]);
        let shaped = manifest.shape(&attempt("m"), &b).unwrap();
        prop_assert_eq!(shaped.path, api.path());
        let Payload::Rendered(bytes) = &shaped.payload else {
            panic!("a templated chat is rendered");
        };
        let sent: Value = serde_json::from_slice(bytes).unwrap();
        let want = expected_prompt(template, &text);
        prop_assert_eq!(sent["prompt"].as_str(), Some(want.as_str()));
    }

    #[test]
    fn shaping_any_chat_for_any_entry_answers_a_request_or_a_typed_error(
        (mut messages, _) in chat(),
        odd in prop::option::of(prop_oneof![
            Just(json!(5)), Just(json!({"a": 1})), Just(json!([{"type": "image_url"}])),
            Just(json!([{"text": "no type"}])),
        ]),
        template in prop::option::of(prop::sample::select(BUILTINS.to_vec())),
        profile_template in prop::option::of(prop::sample::select(vec!["chatml", "vicuna"])),
        thinking in prop::option::of(any::<bool>()),
        request_thinking in prop::option::of(any::<bool>()),
        system in any::<bool>(),
        stream in any::<bool>(),
        tools in any::<bool>(),
        n in 1u64..3,
    ) {
        if let Some(v) = odd {
            messages.push(json!({"role": "user", "content": v}));
        }
        let via = match (template.is_some(), system) {
            (_, true) => ThinkingVia::System,
            (true, false) => ThinkingVia::Template,
            (false, false) => ThinkingVia::Kwargs,
        };
        let entry = ModelManifest {
            template: template.map(str::to_owned),
            completion_api: if n > 1 { CompletionApi::Llama } else { CompletionApi::Openai },
            thinking,
            thinking_via: Some(via),
            ..ModelManifest::default()
        };
        let manifest = Manifest::new(&BTreeMap::from([("m".to_owned(), entry)])).unwrap();
        let mut extra = vec![("stream", json!(stream)), ("n", json!(n))];
        if tools {
            extra.push(("tools", json!([{"type": "function"}])));
        }
        let b = body(messages, &extra);
        let a = Attempt { thinking: request_thinking, template: profile_template, ..attempt("m") };
        match manifest.shape(&a, &b) {
            Ok(shaped) => {
                let bytes = shaped.payload.to_bytes(&b).unwrap();
                prop_assert!(serde_json::from_slice::<Map<String, Value>>(&bytes).is_ok());
            }
            Err(e) => {
                prop_assert!(e.is_client_error() && e.param().is_some(), "{e}");
                prop_assert!(!matches!(e, ShapeError::Encode(_)));
            }
        }
    }

    #[test]
    fn a_split_joined_back_gives_the_text(
        reasoning in tricky_text(),
        answer in tricky_text(),
    ) {
        let reasoning = without(reasoning, "</think>");
        let answer = without(answer, "<think>").trim_start().to_owned();
        let text = format!("<think>{reasoning}</think>{answer}");
        let s = ThinkSplitter::split_all("<think>", "</think>", false, &text);
        prop_assert_eq!(&s.reasoning, &reasoning);
        prop_assert_eq!(&s.content, &answer);
        prop_assert_eq!(format!("<think>{}</think>{}", s.reasoning, s.content), text);
    }

    #[test]
    fn the_split_keeps_every_character_outside_the_tags(
        segments in prop::collection::vec(tricky_text(), 0..8),
        inside in any::<bool>(),
    ) {
        // Segments alternate between reasoning and answer, each closed by the tag that ends it.
        let (mut text, mut reasoning, mut answer) = (String::new(), String::new(), String::new());
        let mut now_inside = inside;
        for seg in segments {
            let (seg, tag) = if now_inside {
                let s = without(seg, "</think>");
                reasoning.push_str(&s);
                (s, "</think>")
            } else {
                let s = without(seg, "<think>");
                answer.push_str(&s);
                (s, "<think>")
            };
            text.push_str(&seg);
            text.push_str(tag);
            now_inside = !now_inside;
        }
        let s = ThinkSplitter::split_all("<think>", "</think>", inside, &text);
        prop_assert_eq!(s.reasoning, reasoning);
        prop_assert_eq!(s.content, answer.trim_start());
    }

    #[test]
    fn the_streamed_split_is_the_whole_texts_wherever_it_is_cut(
        text in tricky_text(),
        cuts in prop::collection::vec(0.0..=1.0f64, 0..6),
        inside in any::<bool>(),
        tags in prop::sample::select(vec![("<think>", "</think>"), ("[[", "]]"), ("<", ">")]),
    ) {
        let (open, close) = tags;
        let whole = ThinkSplitter::split_all(open, close, inside, &text);
        let pieces = cut_at(&text, &cuts);
        prop_assert_eq!(streamed(open, close, inside, &pieces), whole);
    }

    #[test]
    fn an_answer_is_reshaped_the_same_whatever_its_chunk_boundaries(
        texts in prop::collection::vec(tricky_text(), 1..6),
        cuts in prop::collection::vec(0.0..=1.0f64, 0..6),
        llama in any::<bool>(),
        crlf in any::<bool>(),
    ) {
        let sep = if crlf { "\r\n\r\n" } else { "\n\n" };
        let last = texts.len() - 1;
        let mut stream = String::new();
        for (i, t) in texts.iter().enumerate() {
            let event = if llama {
                json!({"content": t, "stop": i == last, "tokens_predicted": 3})
            } else {
                let finish = if i == last { json!("stop") } else { Value::Null };
                json!({"choices": [{"index": 0, "text": t, "finish_reason": finish}]})
            };
            stream.push_str(&format!("data: {event}{sep}"));
        }
        let api = if llama { CompletionApi::Llama } else { CompletionApi::Openai };
        let tags = ["<think>".to_owned(), "</think>".to_owned()];
        let run = |pieces: &[&[u8]]| {
            let mut r = Reshaper::text_to_chat(api, true, "m", 1, Some((&tags, false)));
            let mut out = Vec::new();
            for p in pieces {
                out.extend(r.push(p));
            }
            out.extend(r.finish());
            out
        };
        let whole = run(&[stream.as_bytes()]);
        let bytes = stream.as_bytes();
        let mut at: Vec<usize> = cuts.iter().map(|f| (f * bytes.len() as f64) as usize).collect();
        at.sort_unstable();
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut from = 0;
        for i in at.into_iter().chain([bytes.len()]) {
            pieces.push(&bytes[from..i]);
            from = i;
        }
        let cut = run(&pieces);
        prop_assert_eq!(events(&cut), events(&whole));
        // And the answer is the text, split.
        let joined: String = texts.concat();
        let want = ThinkSplitter::split_all("<think>", "</think>", false, &joined);
        let got = |k: &str| -> String {
            events(&whole)
                .iter()
                .filter_map(|e| e["choices"][0]["delta"][k].as_str().map(str::to_owned))
                .collect()
        };
        prop_assert_eq!(got("reasoning_content"), want.reasoning);
        prop_assert_eq!(got("content"), want.content);
        prop_assert!(String::from_utf8_lossy(&whole).ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn the_fuzz_body_holds_on_any_input(
        data in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            prop::collection::vec(
                prop::sample::select(vec![
                    "{{", "}}", "{%", "%}", "{#", "#}", "-", " ", "if ", "elif ", "else", "endif",
                    "for ", " in ", "endfor", "not ", " and ", " or ", "(", ")", "'", "\"", "==",
                    "!=", "|", "trim", "upper", ".", "m", "messages", "loop", "first", "x", "é",
                    "1", "true", "none", "\\n",
                ]),
                0..64,
            )
            .prop_map(|p| p.concat().into_bytes()),
        ],
    ) {
        fuzz_body::check(&data);
    }
}
