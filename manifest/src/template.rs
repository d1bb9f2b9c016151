//! Chat templates: a small, Jinja-like language that renders a conversation into one prompt.
//!
//! The subset, which is all a chat format needs:
//!
//! - text, copied as it is; `{# comments #}`;
//! - `{{ expr }}`: a value written out (strings as they are, `true`/`false`, numbers);
//! - `{% for m in messages %}…{% endfor %}`, with `loop.first`, `loop.last`, `loop.index`
//!   (from 1) and `loop.index0` inside;
//! - `{% if expr %}…{% elif expr %}…{% else %}…{% endif %}`;
//! - expressions: names (`messages`, `thinking`, `add_generation_prompt`, `bos_token`,
//!   `eos_token`), attributes (`m.role`, `m.content`), string literals in `'…'` or `"…"`,
//!   `true`, `false`, `==`, `!=`, `not`, `and`, `or`, parentheses, and the `trim` filter
//!   (`{{ m.content | trim }}`);
//! - whitespace control: `{%-`, `-%}`, `{{-`, `-}}` remove the whitespace before or after the tag.
//!
//! A template is parsed once, when the manifest is read; a syntax error names its byte offset.
//! Rendering never fails on a conversation: an unknown name or attribute is an empty value (false
//! in a test), as in Jinja.

use std::collections::BTreeMap;

/// A template that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chat template, at byte {at}: {message}")]
pub struct TemplateError {
    /// Byte offset in the template's text.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

/// Deepest nesting of `if` and `for` blocks.
const MAX_DEPTH: usize = 32;

/// A value in a template's context.
#[derive(Debug, Clone, PartialEq)]
pub enum TValue {
    /// No value (an unknown name or attribute).
    None,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Text.
    Str(String),
    /// A list (the messages).
    List(Vec<TValue>),
    /// A map (one message, `loop`).
    Map(BTreeMap<String, TValue>),
}

impl TValue {
    fn truthy(&self) -> bool {
        match self {
            TValue::None => false,
            TValue::Bool(b) => *b,
            TValue::Int(i) => *i != 0,
            TValue::Str(s) => !s.is_empty(),
            TValue::List(l) => !l.is_empty(),
            TValue::Map(m) => !m.is_empty(),
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            TValue::None => {}
            TValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            TValue::Int(i) => out.push_str(&i.to_string()),
            TValue::Str(s) => out.push_str(s),
            TValue::List(_) | TValue::Map(_) => {}
        }
    }

    fn attr(&self, name: &str) -> TValue {
        match self {
            TValue::Map(m) => m.get(name).cloned().unwrap_or(TValue::None),
            _ => TValue::None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Lit(TValue),
    Path(Vec<String>),
    Not(Box<Expr>),
    Eq(Box<Expr>, Box<Expr>, bool),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Trim(Box<Expr>),
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Out(Expr),
    If(Vec<(Expr, Vec<Node>)>, Vec<Node>),
    For(String, Expr, Vec<Node>),
}

/// A parsed chat template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    nodes: Vec<Node>,
}

/// One piece of a template's text before parsing: text, or a tag with its inner text.
#[derive(Debug)]
enum Piece<'a> {
    Text(String),
    Out(&'a str, usize),
    Stmt(&'a str, usize),
}

/// Splits the text into pieces, applying the whitespace control of `-` markers.
fn lex(src: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = 0;
    let mut trim_next = false;
    while rest < src.len() {
        let tail = &src[rest..];
        let next = ["{{", "{%", "{#"]
            .iter()
            .filter_map(|open| tail.find(open))
            .min();
        let Some(off) = next else {
            let mut t = tail.to_owned();
            if trim_next {
                t = t.trim_start().to_owned();
            }
            pieces.push(Piece::Text(t));
            break;
        };
        let start = rest + off;
        let open = &src[start..start + 2];
        let close = match open {
            "{{" => "}}",
            "{%" => "%}",
            _ => "#}",
        };
        let inner_start = start + 2;
        let Some(end_off) = src[inner_start..].find(close) else {
            return Err(TemplateError {
                at: start,
                message: format!("`{open}` is never closed by `{close}`"),
            });
        };
        let inner_end = inner_start + end_off;
        let mut inner = &src[inner_start..inner_end];
        let mut text = src[rest..start].to_owned();
        if trim_next {
            text = text.trim_start().to_owned();
        }
        if let Some(i) = inner.strip_prefix('-') {
            inner = i;
            text = text.trim_end().to_owned();
        }
        trim_next = false;
        if let Some(i) = inner.strip_suffix('-') {
            inner = i;
            trim_next = true;
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        match open {
            "{{" => pieces.push(Piece::Out(inner.trim(), inner_start)),
            "{%" => pieces.push(Piece::Stmt(inner.trim(), inner_start)),
            _ => {}
        }
        rest = inner_end + 2;
    }
    Ok(pieces)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Str(String),
    Op(&'static str),
}

fn tokens(s: &str, at: usize) -> Result<Vec<Tok>, TemplateError> {
    let err = |m: String| TemplateError { at, message: m };
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let Some(end) = s[i + 1..].find(c as char) else {
                return Err(err(format!("unterminated string in `{s}`")));
            };
            let lit = &s[i + 1..i + 1 + end];
            out.push(Tok::Str(
                lit.replace("\\n", "\n")
                    .replace("\\t", "\t")
                    .replace("\\'", "'"),
            ));
            i += end + 2;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(s[start..i].to_owned()));
        } else {
            let two = s.get(i..i + 2).unwrap_or("");
            let op = match (two, c) {
                ("==", _) => "==",
                ("!=", _) => "!=",
                (_, b'.') => ".",
                (_, b'|') => "|",
                (_, b'(') => "(",
                (_, b')') => ")",
                _ => return Err(err(format!("unexpected `{}` in `{s}`", c as char))),
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// A recursive-descent parser over one expression's tokens.
struct ExprParser {
    toks: Vec<Tok>,
    pos: usize,
    at: usize,
}

impl ExprParser {
    fn err(&self, m: impl Into<String>) -> TemplateError {
        TemplateError {
            at: self.at,
            message: m.into(),
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_name(&mut self, name: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Name(n)) if n == name) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        let mut left = self.and(depth)?;
        while self.eat_name("or") {
            left = Expr::Or(Box::new(left), Box::new(self.and(depth)?));
        }
        Ok(left)
    }

    fn and(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        let mut left = self.not(depth)?;
        while self.eat_name("and") {
            left = Expr::And(Box::new(left), Box::new(self.not(depth)?));
        }
        Ok(left)
    }

    fn not(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        if depth > MAX_DEPTH {
            return Err(self.err("expression nested too deeply"));
        }
        if self.eat_name("not") {
            return Ok(Expr::Not(Box::new(self.not(depth + 1)?)));
        }
        self.compare(depth)
    }

    fn compare(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        let left = self.filtered(depth)?;
        if self.eat_op("==") {
            return Ok(Expr::Eq(
                Box::new(left),
                Box::new(self.filtered(depth)?),
                true,
            ));
        }
        if self.eat_op("!=") {
            return Ok(Expr::Eq(
                Box::new(left),
                Box::new(self.filtered(depth)?),
                false,
            ));
        }
        Ok(left)
    }

    fn filtered(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        let mut e = self.atom(depth)?;
        while self.eat_op("|") {
            match self.toks.get(self.pos) {
                Some(Tok::Name(n)) if n == "trim" => {
                    self.pos += 1;
                    e = Expr::Trim(Box::new(e));
                }
                other => return Err(self.err(format!("unknown filter {other:?} (only `trim`)"))),
            }
        }
        Ok(e)
    }

    fn atom(&mut self, depth: usize) -> Result<Expr, TemplateError> {
        match self.toks.get(self.pos).cloned() {
            Some(Tok::Str(s)) => {
                self.pos += 1;
                Ok(Expr::Lit(TValue::Str(s)))
            }
            Some(Tok::Op("(")) => {
                self.pos += 1;
                let e = self.or(depth + 1)?;
                if !self.eat_op(")") {
                    return Err(self.err("`(` without its `)`"));
                }
                Ok(e)
            }
            Some(Tok::Name(n)) => {
                self.pos += 1;
                match n.as_str() {
                    "true" | "True" => return Ok(Expr::Lit(TValue::Bool(true))),
                    "false" | "False" => return Ok(Expr::Lit(TValue::Bool(false))),
                    "none" | "None" => return Ok(Expr::Lit(TValue::None)),
                    _ => {}
                }
                if let Ok(i) = n.parse::<i64>() {
                    return Ok(Expr::Lit(TValue::Int(i)));
                }
                let mut path = vec![n];
                while self.eat_op(".") {
                    match self.toks.get(self.pos).cloned() {
                        Some(Tok::Name(a)) => {
                            self.pos += 1;
                            path.push(a);
                        }
                        _ => return Err(self.err("`.` must be followed by a name")),
                    }
                }
                Ok(Expr::Path(path))
            }
            other => Err(self.err(format!("expected a value, found {other:?}"))),
        }
    }
}

fn parse_expr(s: &str, at: usize) -> Result<Expr, TemplateError> {
    let mut p = ExprParser {
        toks: tokens(s, at)?,
        pos: 0,
        at,
    };
    let e = p.or(0)?;
    if p.pos != p.toks.len() {
        return Err(p.err(format!("unexpected text after the expression in `{s}`")));
    }
    Ok(e)
}

/// What ended a block.
enum End {
    Eof,
    Tag(String, String, usize),
}

fn parse_block<'a>(
    pieces: &mut std::iter::Peekable<std::vec::IntoIter<Piece<'a>>>,
    depth: usize,
) -> Result<(Vec<Node>, End), TemplateError> {
    let mut nodes = Vec::new();
    while let Some(p) = pieces.next() {
        match p {
            Piece::Text(t) => nodes.push(Node::Text(t)),
            Piece::Out(e, at) => nodes.push(Node::Out(parse_expr(e, at)?)),
            Piece::Stmt(s, at) => {
                let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
                let rest = rest.trim();
                let deeper = || {
                    if depth >= MAX_DEPTH {
                        Err(TemplateError {
                            at,
                            message: format!("blocks nested deeper than {MAX_DEPTH}"),
                        })
                    } else {
                        Ok(depth + 1)
                    }
                };
                match word {
                    "if" => {
                        let mut arms = vec![];
                        let mut cond = parse_expr(rest, at)?;
                        let mut otherwise = Vec::new();
                        loop {
                            let (body, end) = parse_block(pieces, deeper()?)?;
                            match end {
                                End::Tag(w, r, at2) if w == "elif" => {
                                    arms.push((cond, body));
                                    cond = parse_expr(&r, at2)?;
                                }
                                End::Tag(w, _, at2) if w == "else" => {
                                    arms.push((cond, body));
                                    let (body, end) = parse_block(pieces, deeper()?)?;
                                    otherwise = body;
                                    match end {
                                        End::Tag(w, _, _) if w == "endif" => break,
                                        _ => {
                                            return Err(TemplateError {
                                                at: at2,
                                                message: "`else` without its `endif`".into(),
                                            });
                                        }
                                    }
                                }
                                End::Tag(w, _, _) if w == "endif" => {
                                    arms.push((cond, body));
                                    break;
                                }
                                _ => {
                                    return Err(TemplateError {
                                        at,
                                        message: "`if` without its `endif`".into(),
                                    });
                                }
                            }
                        }
                        nodes.push(Node::If(arms, otherwise));
                    }
                    "for" => {
                        let Some((var, list)) = rest.split_once(" in ") else {
                            return Err(TemplateError {
                                at,
                                message: format!("expected `for NAME in LIST`, found `{s}`"),
                            });
                        };
                        let var = var.trim();
                        if var.is_empty()
                            || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        {
                            return Err(TemplateError {
                                at,
                                message: format!("`{var}` is not a loop variable name"),
                            });
                        }
                        let list = parse_expr(list, at)?;
                        let (body, end) = parse_block(pieces, deeper()?)?;
                        match end {
                            End::Tag(w, _, _) if w == "endfor" => {}
                            _ => {
                                return Err(TemplateError {
                                    at,
                                    message: "`for` without its `endfor`".into(),
                                });
                            }
                        }
                        nodes.push(Node::For(var.to_owned(), list, body));
                    }
                    "elif" | "else" | "endif" | "endfor" => {
                        return Ok((nodes, End::Tag(word.to_owned(), rest.to_owned(), at)));
                    }
                    other => {
                        return Err(TemplateError {
                            at,
                            message: format!(
                                "unknown statement `{other}` (this subset has if, elif, else, \
                                 endif, for, endfor)"
                            ),
                        });
                    }
                }
            }
        }
    }
    Ok((nodes, End::Eof))
}

/// The values a template is rendered with.
pub type Context = BTreeMap<String, TValue>;

impl Template {
    /// The template that renders nothing (what an empty text parses to).
    pub(crate) fn empty() -> Template {
        Template { nodes: Vec::new() }
    }

    /// Parses `src`; a syntax error names its byte offset. Never panics, whatever the text.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let mut pieces = lex(src)?.into_iter().peekable();
        let (nodes, end) = parse_block(&mut pieces, 0)?;
        match end {
            End::Eof => Ok(Template { nodes }),
            End::Tag(w, _, at) => Err(TemplateError {
                at,
                message: format!("`{w}` without the block it closes"),
            }),
        }
    }

    /// Renders with `ctx`, at most `max_bytes` of text (`None` beyond: a template whose
    /// loops multiply a long conversation must not fill the memory).
    pub fn render(&self, ctx: &Context, max_bytes: usize) -> Option<String> {
        let mut out = String::new();
        let mut scopes = vec![ctx.clone()];
        render_nodes(&self.nodes, &mut scopes, &mut out, max_bytes);
        (out.len() <= max_bytes).then_some(out)
    }
}

fn lookup(scopes: &[Context], path: &[String]) -> TValue {
    let Some((first, rest)) = path.split_first() else {
        return TValue::None;
    };
    let mut v = scopes
        .iter()
        .rev()
        .find_map(|s| s.get(first))
        .cloned()
        .unwrap_or(TValue::None);
    for a in rest {
        v = v.attr(a);
    }
    v
}

fn eval(e: &Expr, scopes: &[Context]) -> TValue {
    match e {
        Expr::Lit(v) => v.clone(),
        Expr::Path(p) => lookup(scopes, p),
        Expr::Not(x) => TValue::Bool(!eval(x, scopes).truthy()),
        Expr::Eq(a, b, want) => TValue::Bool((eval(a, scopes) == eval(b, scopes)) == *want),
        Expr::And(a, b) => TValue::Bool(eval(a, scopes).truthy() && eval(b, scopes).truthy()),
        Expr::Or(a, b) => TValue::Bool(eval(a, scopes).truthy() || eval(b, scopes).truthy()),
        Expr::Trim(x) => match eval(x, scopes) {
            TValue::Str(s) => TValue::Str(s.trim().to_owned()),
            other => other,
        },
    }
}

fn render_nodes(nodes: &[Node], scopes: &mut Vec<Context>, out: &mut String, max: usize) {
    for n in nodes {
        if out.len() > max {
            return;
        }
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Out(e) => eval(e, scopes).write(out),
            Node::If(arms, otherwise) => {
                let body = arms
                    .iter()
                    .find(|(c, _)| eval(c, scopes).truthy())
                    .map_or(otherwise, |(_, b)| b);
                render_nodes(body, scopes, out, max);
            }
            Node::For(var, list, body) => {
                let TValue::List(items) = eval(list, scopes) else {
                    continue;
                };
                let n = items.len();
                for (i, item) in items.into_iter().enumerate() {
                    let lp = BTreeMap::from([
                        ("first".to_owned(), TValue::Bool(i == 0)),
                        ("last".to_owned(), TValue::Bool(i + 1 == n)),
                        ("index".to_owned(), TValue::Int(i as i64 + 1)),
                        ("index0".to_owned(), TValue::Int(i as i64)),
                    ]);
                    scopes.push(BTreeMap::from([
                        (var.clone(), item),
                        ("loop".to_owned(), TValue::Map(lp)),
                    ]));
                    render_nodes(body, scopes, out, max);
                    scopes.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn msg(role: &str, content: &str) -> TValue {
        TValue::Map(BTreeMap::from([
            ("role".to_owned(), TValue::Str(role.into())),
            ("content".to_owned(), TValue::Str(content.into())),
        ]))
    }

    fn ctx(thinking: bool) -> Context {
        BTreeMap::from([
            (
                "messages".to_owned(),
                TValue::List(vec![msg("system", "Be brief."), msg("user", " Hi ")]),
            ),
            ("thinking".to_owned(), TValue::Bool(thinking)),
            ("add_generation_prompt".to_owned(), TValue::Bool(true)),
        ])
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
            t.render(&ctx(true), 30).as_deref(),
            Some("Be brief. Hi Be brief. Hi ")
        );
        assert_eq!(t.render(&ctx(true), 25), None);
    }

    #[test]
    fn unknown_names_are_empty_and_false() {
        let t = Template::parse("a{{ nope.x }}b{% if nope %}c{% else %}d{% endif %}").unwrap();
        assert_eq!(t.render(&Context::new(), 10).as_deref(), Some("abd"));
    }

    #[test]
    fn syntax_errors_name_their_place() {
        for (src, want) in [
            ("{% if x %}open", "endif"),
            ("{{ x", "never closed"),
            ("{% for x messages %}{% endfor %}", "for NAME in LIST"),
            ("{% endfor %}", "without the block"),
            ("{% include 'x' %}", "unknown statement"),
            ("{{ x | upper }}", "unknown filter"),
            ("{{ 'open }}", "unterminated"),
            ("{{ a b }}", "unexpected text"),
        ] {
            let e = Template::parse(src).unwrap_err();
            assert!(e.message.contains(want), "{src}: {e}");
        }
        let deep = "{% if a %}".repeat(40) + &"{% endif %}".repeat(40);
        assert!(
            Template::parse(&deep)
                .unwrap_err()
                .message
                .contains("nested")
        );
    }
}
