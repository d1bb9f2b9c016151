//! Chat templates: the Jinja templates models ship (`tokenizer.chat_template`), rendered as
//! Hugging Face transformers' `apply_chat_template` renders them.
//!
//! The engine is [minijinja](https://docs.rs/minijinja), configured as transformers configures
//! jinja2 (an `ImmutableSandboxedEnvironment`):
//!
//! - `trim_blocks` and `lstrip_blocks` on, no auto-escaping, loop controls (`{% break %}`,
//!   `{% continue %}`), `{% set %}`, `namespace()`, macros, subscripts, `+` and `~`;
//! - Python's string and dict methods that templates call (`.strip()`, `.startswith()`,
//!   `.split()`, `.items()`, …), from minijinja-contrib's `pycompat`;
//! - `raise_exception(message)`: the template refuses the conversation
//!   ([`TemplateError::Raised`]);
//! - the `tojson` filter as transformers defines it: `json.dumps` with `ensure_ascii=False`
//!   (`indent`, `sort_keys` and `ensure_ascii` as keyword arguments);
//! - `strftime_now(format)`: the current date and time (UTC here), as Llama 3's templates ask;
//! - the variables of [`Context`]: `messages`, `tools`, `documents`, `add_generation_prompt`,
//!   `bos_token`, `eos_token`, and any extra ones (`enable_thinking`, this crate's `thinking`).
//!
//! A template is parsed once, when the manifest is read ([`Template::parse`]); a syntax error
//! names its line. Rendering ([`Template::render`]) is bounded twice: by fuel (at most
//! [`FUEL`] steps of the engine, so that loops nested over a long conversation, or over
//! `range(100000)`, end with [`TemplateError::OutOfFuel`]) and by the length of what it writes
//! ([`TemplateError::TooLong`]).
//!
//! One known difference from transformers: the request's objects come with their keys sorted
//! (serde_json's maps), where Python keeps the order of the request's text; objects written
//! in the template keep their order, as in Python.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;
use serde_json::{Map, Value as Json};

/// The most steps of the engine one rendering may take. Measured (minijinja 2.24, release): the
/// built-in chatml template takes 12 steps a message, the templates models ship 30 to 70 (Qwen2.5
/// and Llama 3 about 32, Qwen3 and DeepSeek-R1 about 55, Mistral Nemo about 69): 10 million steps
/// render a conversation of over 100,000 messages with any of them, and a template that runs out
/// has held its thread for under a second (50 million took 3.7 s on 2 shared cores).
pub const FUEL: u64 = 10_000_000;

/// The name the one template of an environment is stored under (no extension: no
/// auto-escaping).
const NAME: &str = "chat_template";

/// A chat template that cannot be used: it does not parse, it refuses the conversation, or
/// rendering it failed or went past a bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The text is not a template.
    #[error("chat template{}: {message}", OnLine(*line))]
    Syntax {
        /// The line at fault (from 1), when known.
        line: Option<usize>,
        /// What is wrong.
        message: String,
        /// The engine's error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// The template called `raise_exception(message)`: it refuses this conversation (a role
    /// it does not know, roles that do not alternate, …).
    #[error("the chat template refuses the conversation: {message}")]
    Raised {
        /// The template's message.
        message: String,
    },
    /// Rendering took more than [`FUEL`] steps: a template whose loops do not end in reason.
    #[error("the chat template took more than {fuel} steps to render (a loop without end?)")]
    OutOfFuel {
        /// The limit.
        fuel: u64,
    },
    /// The template wrote more than the limit.
    #[error("the chat template renders more than {max_bytes} bytes")]
    TooLong {
        /// The limit.
        max_bytes: usize,
    },
    /// Rendering failed otherwise: an undefined function or filter, an operation on the wrong
    /// type, an attribute of an undefined value (as in jinja2).
    #[error("chat template{}: {message}", OnLine(*line))]
    Render {
        /// The line at fault (from 1), when known.
        line: Option<usize>,
        /// What is wrong.
        message: String,
        /// The engine's error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

/// `, line N` or nothing.
struct OnLine(Option<usize>);

impl fmt::Display for OnLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, ", line {n}"),
            None => Ok(()),
        }
    }
}

/// What `raise_exception` raised, found again in the engine's error's sources.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

/// The values a template is rendered with: the variables transformers' `apply_chat_template`
/// passes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// The conversation: objects with `role` and `content` (and whatever else a message
    /// carries: `tool_calls`, `name`, …).
    pub messages: Vec<Json>,
    /// The tools' schemas, `none` in the template when absent.
    pub tools: Option<Vec<Json>>,
    /// Documents for retrieval-augmented templates, `none` when absent.
    pub documents: Option<Vec<Json>>,
    /// End the prompt with the assistant's turn opened.
    pub add_generation_prompt: bool,
    /// The tokenizer's beginning-of-sequence text (`""` when the server adds it itself).
    pub bos_token: String,
    /// The tokenizer's end-of-sequence text.
    pub eos_token: String,
    /// Any other variables (`enable_thinking`, `thinking`, `date_string`, …), over none of the
    /// above.
    pub extra: Map<String, Json>,
}

/// A parsed chat template: cheap to clone (its environment is shared).
#[derive(Clone)]
pub struct Template {
    env: Arc<Environment<'static>>,
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.env.get_template(NAME).map_or(0, |t| t.source().len());
        f.debug_struct("Template")
            .field("source_bytes", &len)
            .finish()
    }
}

/// The environment transformers renders chat templates in, without a template yet.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env
}

fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(
        minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(Raised(message)),
    )
}

fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(format, secs)
}

/// `format` with `secs` (seconds since the epoch, UTC) as C's `strftime` writes it, for the
/// directives chat templates use; another directive is written as it is.
fn strftime(format: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (year, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = ((days + 3) % 7) as usize;
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let month_name = MONTHS[(month as usize).saturating_sub(1) % 12];
    let day_name = DAYS[weekday];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('H') => out.push_str(&format!("{hour:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hour + 11) % 12 + 1)),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{minute:02}")),
            Some('S') => out.push_str(&format!("{second:02}")),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(month_name.get(..3).unwrap_or(month_name)),
            Some('A') => out.push_str(day_name),
            Some('a') => out.push_str(day_name.get(..3).unwrap_or(day_name)),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// (year, month from 1, day from 1) of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a date from 1970 on (the inverse of [`civil_from_days`]).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

/// transformers' `tojson`: `json.dumps(value, ensure_ascii=False, indent=None,
/// sort_keys=False)`, those three as keyword arguments.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let bad = |e: serde_json::Error| {
        minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: not JSON").with_source(e)
    };
    let mut out = Vec::new();
    let indent = indent.map(|n| " ".repeat(n));
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PyFormatter {
            indent: indent.as_deref().map(str::as_bytes),
            level: 0,
            has_value: false,
        },
    );
    if sort_keys == Some(true) {
        // serde_json's own maps are sorted.
        serde_json::to_value(value)
            .map_err(bad)?
            .serialize(&mut ser)
            .map_err(bad)?;
    } else {
        value.serialize(&mut ser).map_err(bad)?;
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    Ok(Value::from(if ensure_ascii == Some(true) {
        ascii_escaped(&text)
    } else {
        text
    }))
}

/// JSON text with every character beyond ASCII as `\uXXXX` (UTF-16 units), as Python's
/// `ensure_ascii=True` writes it (non-ASCII characters only appear inside strings).
fn ascii_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// Python's `json.dumps` layout: `", "` and `": "` between items without an indent; with one,
/// `","` at the ends of lines and `": "`; `[]` and `{}` when empty.
struct PyFormatter<'a> {
    indent: Option<&'a [u8]>,
    level: usize,
    has_value: bool,
}

impl PyFormatter<'_> {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(unit) = self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.level {
                w.write_all(unit)?;
            }
        }
        Ok(())
    }

    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(c)
    }

    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.level = self.level.saturating_sub(1);
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(c)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// A writer that refuses to go past `max` bytes.
struct Bounded {
    out: Vec<u8>,
    max: usize,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.max {
            self.over = true;
            return Err(std::io::Error::other("the prompt's bound"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The engine's error as this module's: a syntax error, `raise_exception`, fuel, or another
/// failure.
fn classify(e: minijinja::Error, parsing: bool) -> TemplateError {
    let mut cause: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(c) = cause {
        if let Some(Raised(message)) = c.downcast_ref::<Raised>() {
            return TemplateError::Raised {
                message: message.clone(),
            };
        }
        cause = c.source();
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return TemplateError::OutOfFuel { fuel: FUEL };
    }
    let message = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    let line = e.line();
    if parsing || e.kind() == ErrorKind::SyntaxError {
        TemplateError::Syntax {
            line,
            message,
            source: Box::new(e),
        }
    } else {
        TemplateError::Render {
            line,
            message,
            source: Box::new(e),
        }
    }
}

impl Template {
    /// The template that renders nothing (what an empty text parses to).
    pub(crate) fn empty() -> Template {
        Template {
            env: Arc::new(environment()),
        }
    }

    /// Parses `src`; a syntax error names its line. Never panics, whatever the text.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let mut env = environment();
        env.add_template_owned(NAME, src.to_owned())
            .map_err(|e| classify(e, true))?;
        Ok(Template { env: Arc::new(env) })
    }

    /// Renders `ctx`, at most `max_bytes` of text and [`FUEL`] steps.
    pub fn render(&self, ctx: &Context, max_bytes: usize) -> Result<String, TemplateError> {
        let Ok(template) = self.env.get_template(NAME) else {
            // The empty template (no text was given).
            return Ok(String::new());
        };
        let mut vars = ctx.extra.clone();
        let list = |l: &Option<Vec<Json>>| l.clone().map_or(Json::Null, Json::Array);
        vars.insert("messages".into(), Json::Array(ctx.messages.clone()));
        vars.insert("tools".into(), list(&ctx.tools));
        vars.insert("documents".into(), list(&ctx.documents));
        vars.insert(
            "add_generation_prompt".into(),
            Json::Bool(ctx.add_generation_prompt),
        );
        vars.insert("bos_token".into(), Json::String(ctx.bos_token.clone()));
        vars.insert("eos_token".into(), Json::String(ctx.eos_token.clone()));
        let mut out = Bounded {
            out: Vec::new(),
            max: max_bytes,
            over: false,
        };
        match template.render_captured_to(&vars, &mut out) {
            Ok(_) => Ok(String::from_utf8_lossy(&out.out).into_owned()),
            Err(_) if out.over => Err(TemplateError::TooLong { max_bytes }),
            Err(e) => Err(classify(e, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn ctx(thinking: bool) -> Context {
        Context {
            messages: vec![
                json!({"role": "system", "content": "Be brief."}),
                json!({"role": "user", "content": " Hi "}),
            ],
            add_generation_prompt: true,
            extra: Map::from_iter([("thinking".to_owned(), Json::Bool(thinking))]),
            ..Context::default()
        }
    }

    #[test]
    fn loops_conditions_filters_and_whitespace_control() {
        let t = Template::parse(
            "{%- for m in messages -%}\n  [{{ loop.index }}{% if loop.first %}*{% endif %}] \
             {%- if m.role == 'system' %}SYS:{{ m.content }}{% elif m.role != \"user\" %}?\
             {% else %}U:{{ m.content | trim }}{% endif %}{% if not loop.last %}|{% endif %}\n\
             {%- endfor %}{# a comment #}{% if add_generation_prompt and (thinking or false) %} \
             THINK{% endif %}",
        )
        .unwrap();
        let r = |c| t.render(&c, 1000).unwrap();
        assert_eq!(r(ctx(true)), "[1*]SYS:Be brief.|[2]U:Hi THINK");
        assert_eq!(r(ctx(false)), "[1*]SYS:Be brief.|[2]U:Hi");
        // Loops within loops stop at the limit.
        let t = Template::parse(
            "{% for a in messages %}{% for b in messages %}{{ b.content }}{% endfor %}{% endfor %}",
        )
        .unwrap();
        assert_eq!(
            t.render(&ctx(true), 30).unwrap(),
            "Be brief. Hi Be brief. Hi "
        );
        assert!(matches!(
            t.render(&ctx(true), 25),
            Err(TemplateError::TooLong { max_bytes: 25 })
        ));
    }

    #[test]
    fn the_jinja_that_models_ship_renders() {
        // set, namespace, subscripts, +, loop controls, Python's string methods, trim_blocks
        // and lstrip_blocks, tojson with transformers' layout.
        let t = Template::parse(
            "{% set ns = namespace(n=0) %}\n\
             {% for m in messages %}\n\
             {% if m['role'] == 'system' %}{% continue %}{% endif %}\n\
             {% set ns.n = ns.n + 1 %}\n\
                 {{ m.role.upper() + ':' + m.content.strip() }}|{{ m.content.startswith(' ') }}\n\
             {% endfor %}\n\
             {{ ns.n }} {{ {'b': [1, 'é'], 'a': none} | tojson }} {{ [1] | tojson(indent=2) }}\n",
        )
        .unwrap();
        assert_eq!(
            t.render(&ctx(true), 1000).unwrap(),
            "USER:Hi|True\n1 {\"b\": [1, \"é\"], \"a\": null} [\n  1\n]"
        );
    }

    #[test]
    fn raise_exception_fuel_and_undefined_attributes_are_typed_errors() {
        let t = Template::parse(
            "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start \
             with a user message') }}{% endif %}",
        )
        .unwrap();
        let e = t.render(&ctx(true), 100).unwrap_err();
        assert!(
            matches!(&e, TemplateError::Raised { message } if message == "Conversation must \
             start with a user message"),
            "{e:?}"
        );
        let t = Template::parse(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        )
        .unwrap();
        let e = t.render(&ctx(true), 100).unwrap_err();
        assert!(
            matches!(e, TemplateError::OutOfFuel { fuel: FUEL }),
            "{e:?}"
        );
        assert!(e.to_string().contains("steps"));
        let e = Template::parse("a{{ nope.x }}b")
            .unwrap()
            .render(&Context::default(), 10)
            .unwrap_err();
        assert!(matches!(e, TemplateError::Render { .. }), "{e:?}");
        assert!(e.source().is_some());
        let t = Template::parse("a{{ nope }}b{% if nope %}c{% else %}d{% endif %}").unwrap();
        assert_eq!(t.render(&Context::default(), 10).unwrap(), "abd");
    }

    #[test]
    fn syntax_errors_name_their_line() {
        for (src, line) in [
            ("{% if x %}open", 1),
            ("a\n{{ x", 2),
            ("{% for x messages %}{% endfor %}", 1),
            ("\n\n{% endfor %}", 3),
            ("{{ 'open }}", 1),
            ("{{ a b }}", 1),
        ] {
            let e = Template::parse(src).unwrap_err();
            let TemplateError::Syntax {
                line: got, message, ..
            } = &e
            else {
                panic!("{src}: {e:?}");
            };
            assert_eq!(*got, Some(line), "{src}: {e}");
            assert!(!message.is_empty() && e.to_string().contains(&format!("line {line}")));
        }
    }

    #[test]
    fn strftime_writes_the_date_as_c_does() {
        // 2024-07-23 14:05:09 UTC, a Tuesday, day 205 of a leap year.
        let t = 1_721_743_509;
        assert_eq!(
            strftime("%d %b %Y|%B %e|%A %a|%H:%M:%S %I%p|%j|%y-%m-%F|%%|%Q", t),
            "23 Jul 2024|July 23|Tuesday Tue|14:05:09 02PM|205|24-07-2024-07-23|%|%Q"
        );
        assert_eq!(strftime("%Y-%m-%d %A", 0), "1970-01-01 Thursday");
        assert_eq!(strftime("%Y-%m-%d %j", 951_782_400), "2000-02-29 060");
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let t = Template::parse(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|\
             {{ 'é\"\\n' | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}",
        )
        .unwrap();
        let mut c = Context::default();
        c.extra.insert("x".into(), json!({"z": [1, {}], "a": "é"}));
        assert_eq!(
            t.render(&c, 1000).unwrap(),
            "{\"a\": \"é\", \"z\": [1, {}]}|{\n  \"a\": \"é\",\n  \"z\": [\n    1,\n    {}\n  ]\n}|\
             {\"a\": \"é\", \"z\": [1, {}]}|\"\\u00e9\\\"\\n\"|[]"
        );
    }
}
