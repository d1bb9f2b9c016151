//! A `template_file`'s template text: a Jinja file as it is, a model's own template from its GGUF
//! (`tokenizer.chat_template`), or from its Hugging Face `tokenizer_config.json` /
//! `chat_template.json` (`chat_template`: text, or a list of named templates, `default` first).
//! Each is read within a ceiling; the GGUF reader reads the header's metadata only, skipping
//! every other value without holding it. A model's weights (`template = "model"`) give their
//! template the same way: a GGUF's, or a model directory's file that holds it ([`read_model`]).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use serde_json::Value;

/// Longest template text (the longest templates models ship are tens of kilobytes).
pub(crate) const MAX_TEMPLATE_BYTES: u64 = 4 * 1024 * 1024;

/// Longest JSON file read for its `chat_template` (a `tokenizer_config.json` lists the added
/// tokens too).
const MAX_JSON_BYTES: u64 = 64 * 1024 * 1024;

/// The GGUF metadata key of a model's chat template.
const GGUF_KEY: &str = "tokenizer.chat_template";

/// Most metadata entries, elements of one array, or bytes of one key a GGUF header may claim.
const MAX_GGUF_ENTRIES: u64 = 1 << 20;
const MAX_GGUF_ARRAY: u64 = 1 << 27;
const MAX_GGUF_KEY: u64 = 1 << 16;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Whether `file` is a GGUF (its magic); it is left rewound.
fn is_gguf(file: &mut File) -> io::Result<bool> {
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic)?;
    file.rewind()?;
    Ok(n == 4 && &magic == b"GGUF")
}

/// The template text of the file at `path`: by its content, a GGUF (its magic), JSON (a `.json`
/// name), or the template itself.
pub(crate) fn read(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    if is_gguf(&mut file)? {
        return from_gguf(BufReader::new(file));
    }
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let ceiling = if is_json {
        MAX_JSON_BYTES
    } else {
        MAX_TEMPLATE_BYTES
    };
    let mut text = String::new();
    file.take(ceiling + 1).read_to_string(&mut text)?;
    if text.len() as u64 > ceiling {
        return Err(invalid(format!("longer than {ceiling} bytes")));
    }
    if is_json { from_json(&text) } else { Ok(text) }
}

/// The files of a model directory that may hold its chat template, in the order they are
/// looked for: transformers saves a template apart from the tokenizer's configuration, in
/// `chat_template.jinja` (or `chat_template.json`), and then reads it first.
const MODEL_DIR_FILES: [&str; 3] = [
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer_config.json",
];

/// The template text of a model's weights: a GGUF's `tokenizer.chat_template`, or in a model
/// directory the first of [`MODEL_DIR_FILES`] it has. Any other file is refused (weights
/// that are not a GGUF hold no template that can be read).
pub(crate) fn read_model(weights: &Path) -> io::Result<String> {
    if weights.is_dir() {
        let file = MODEL_DIR_FILES
            .iter()
            .map(|name| weights.join(name))
            .find(|f| f.is_file())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no {} in this directory", MODEL_DIR_FILES.join(", ")),
                )
            })?;
        return read(&file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())));
    }
    let mut file = File::open(weights)?;
    if is_gguf(&mut file)? {
        from_gguf(BufReader::new(file))
    } else {
        Err(invalid("neither a GGUF nor a model directory".to_owned()))
    }
}

/// `chat_template` of a `tokenizer_config.json` (or `chat_template.json`): text, or a list of
/// `{name, template}` (the one named `default`, else the first).
fn from_json(text: &str) -> io::Result<String> {
    let v: Value = serde_json::from_str(text).map_err(io::Error::other)?;
    let template = match &v["chat_template"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .or_else(|| list.first())
            .and_then(|t| t["template"].as_str())
            .map(str::to_owned),
        _ => None,
    };
    template.ok_or_else(|| invalid("no `chat_template` in this JSON".to_owned()))
}

/// A GGUF header read in order.
struct Gguf<R> {
    r: R,
}

impl<R: Read + Seek> Gguf<R> {
    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let n = i64::try_from(n).map_err(|_| invalid(format!("a value of {n} bytes")))?;
        self.r.seek_relative(n)
    }

    /// A string of at most `max` bytes, read; `None` (skipped) when longer.
    fn string(&mut self, max: u64) -> io::Result<Option<Vec<u8>>> {
        let len = self.u64()?;
        if len > max {
            self.skip(len)?;
            return Ok(None);
        }
        let mut b = Vec::new();
        (&mut self.r).take(len).read_to_end(&mut b)?;
        if b.len() as u64 != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(Some(b))
    }

    /// Skips a value of type `t`.
    fn skip_value(&mut self, t: u32, depth: u32) -> io::Result<()> {
        match t {
            8 => {
                let len = self.u64()?;
                self.skip(len)
            }
            9 if depth < 2 => {
                let elem = self.u32()?;
                let n = self.u64()?;
                if n > MAX_GGUF_ARRAY {
                    return Err(invalid(format!("an array of {n} values")));
                }
                match width(elem) {
                    Some(w) => self.skip(n * w),
                    None => (0..n).try_for_each(|_| self.skip_value(elem, depth + 1)),
                }
            }
            other => match width(other) {
                Some(w) => self.skip(w),
                None => Err(invalid(format!("value type {other}"))),
            },
        }
    }
}

/// The width of a GGUF scalar type.
fn width(t: u32) -> Option<u64> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// `tokenizer.chat_template` from a GGUF's metadata.
fn from_gguf<R: Read + Seek>(r: R) -> io::Result<String> {
    let mut g = Gguf { r };
    let _magic: [u8; 4] = g.bytes()?;
    let version = g.u32()?;
    if !(2..=3).contains(&version) {
        return Err(invalid(format!("GGUF version {version}")));
    }
    let _tensors = g.u64()?;
    let entries = g.u64()?;
    if entries > MAX_GGUF_ENTRIES {
        return Err(invalid(format!("{entries} metadata entries")));
    }
    for _ in 0..entries {
        let key = g
            .string(MAX_GGUF_KEY)?
            .ok_or_else(|| invalid("a metadata key too long".to_owned()))?;
        let t = g.u32()?;
        if key == GGUF_KEY.as_bytes() && t == 8 {
            let text = g
                .string(MAX_TEMPLATE_BYTES)?
                .ok_or_else(|| invalid(format!("{GGUF_KEY} longer than {MAX_TEMPLATE_BYTES}")))?;
            return String::from_utf8(text).map_err(|e| invalid(format!("{GGUF_KEY}: {e}")));
        }
        g.skip_value(t, 0)?;
    }
    Err(invalid(format!("no {GGUF_KEY} in this GGUF")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A GGUF header with `kv`: (key, type, value bytes).
    fn gguf(kv: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend((kv.len() as u64).to_le_bytes());
        for (k, t, v) in kv {
            b.extend((k.len() as u64).to_le_bytes());
            b.extend(k.as_bytes());
            b.extend(t.to_le_bytes());
            b.extend(v);
        }
        b
    }

    fn gstr(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b
    }

    #[test]
    fn a_gguf_gives_its_chat_template_past_other_metadata() {
        let mut tokens = 9u32.to_le_bytes().to_vec();
        tokens.extend(8u32.to_le_bytes());
        tokens.extend(2u64.to_le_bytes());
        tokens.extend(gstr("<s>"));
        tokens.extend(gstr("hé"));
        let mut scores = 6u32.to_le_bytes().to_vec(); // f32
        scores.extend(2u64.to_le_bytes());
        scores.extend([0u8; 8]);
        let file = gguf(&[
            ("general.architecture", 8, gstr("llama")),
            ("llama.context_length", 4, 8192u32.to_le_bytes().to_vec()),
            ("tokenizer.ggml.tokens", 9, tokens[4..].to_vec()),
            ("tokenizer.ggml.scores", 9, scores),
            (
                GGUF_KEY,
                8,
                gstr("{{ bos_token }}{% for m in messages %}…{% endfor %}"),
            ),
        ]);
        let dir = tempdir();
        let path = dir.join("m.gguf");
        std::fs::write(&path, &file).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            "{{ bos_token }}{% for m in messages %}…{% endfor %}"
        );
        // Without the key, or cut short: an error, never a panic.
        let none = gguf(&[("general.architecture", 8, gstr("llama"))]);
        std::fs::write(&path, &none).unwrap();
        assert!(
            read(&path)
                .unwrap_err()
                .to_string()
                .contains("no tokenizer")
        );
        for cut in [6, 20, file.len() / 2, file.len() - 3] {
            std::fs::write(&path, &file[..cut]).unwrap();
            assert!(read(&path).is_err(), "cut at {cut}");
        }
        let huge = gguf(&[(
            "k",
            9,
            [8u32.to_le_bytes().to_vec(), u64::MAX.to_le_bytes().to_vec()].concat(),
        )]);
        std::fs::write(&path, &huge).unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("array"));
    }

    #[test]
    fn a_tokenizer_config_gives_its_chat_template_text_or_default() {
        let dir = tempdir();
        let path = dir.join("tokenizer_config.json");
        std::fs::write(&path, r#"{"bos_token": "<s>", "chat_template": "T"}"#).unwrap();
        assert_eq!(read(&path).unwrap(), "T");
        std::fs::write(
            &path,
            r#"{"chat_template": [{"name": "tool_use", "template": "U"},
                {"name": "default", "template": "D"}]}"#,
        )
        .unwrap();
        assert_eq!(read(&path).unwrap(), "D");
        std::fs::write(&path, r#"{"model_max_length": 8}"#).unwrap();
        assert!(
            read(&path)
                .unwrap_err()
                .to_string()
                .contains("chat_template")
        );
        let text = dir.join("t.jinja");
        std::fs::write(&text, "{{ messages }}").unwrap();
        assert_eq!(read(&text).unwrap(), "{{ messages }}");
    }

    #[test]
    fn a_models_weights_give_its_template_from_a_gguf_or_its_directory() {
        let dir = tempdir();
        let gguf_path = dir.join("m.gguf");
        std::fs::write(&gguf_path, gguf(&[(GGUF_KEY, 8, gstr("G"))])).unwrap();
        assert_eq!(read_model(&gguf_path).unwrap(), "G");
        // A file that is not a GGUF: refused, not read as a template.
        let other = dir.join("model.safetensors");
        std::fs::write(&other, "{{ messages }}").unwrap();
        assert!(read_model(&other).unwrap_err().to_string().contains("GGUF"));
        // A directory: tokenizer_config.json, unless a chat_template file is beside it.
        let model = dir.join("model");
        std::fs::create_dir_all(&model).unwrap();
        let e = read_model(&model).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("tokenizer_config.json"), "{e}");
        std::fs::write(
            model.join("tokenizer_config.json"),
            r#"{"chat_template": "T"}"#,
        )
        .unwrap();
        assert_eq!(read_model(&model).unwrap(), "T");
        std::fs::write(
            model.join("chat_template.json"),
            r#"{"chat_template": "J"}"#,
        )
        .unwrap();
        assert_eq!(read_model(&model).unwrap(), "J");
        std::fs::write(model.join("chat_template.jinja"), "K").unwrap();
        assert_eq!(read_model(&model).unwrap(), "K");
        // A file that holds none is named in the error.
        let bare = dir.join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("tokenizer_config.json"), "{}").unwrap();
        let e = read_model(&bare).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer_config.json") && e.contains("chat_template"),
            "{e}"
        );
        assert!(read_model(&dir.join("absent.gguf")).is_err());
    }

    /// A fresh directory under the target's temporary directory.
    fn tempdir() -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "horos-manifest-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
