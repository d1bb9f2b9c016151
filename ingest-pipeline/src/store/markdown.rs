//! A document as Markdown: its pages in order, each page's text (in the reading order its reader
//! gave), then the tables its reader found as Markdown tables, then its figures' descriptions.
//! Pages are separated by `<!-- page N -->` comments, invisible once rendered and easy to find.

use horos_pdf::structure;
use serde::{Deserialize, Serialize};

use super::{Db, Result};
use crate::vision::ReadBy;

/// One page of [`DocumentMarkdown`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageMarkdown {
    /// Page number, from 1.
    pub page_no: u32,
    /// What read it (`None` for pages stored before schema version 3).
    pub read_by: Option<ReadBy>,
    /// The page as Markdown.
    pub markdown: String,
    /// Its footnotes' definitions (`[^1]: ...`), written at the document's end.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub footnotes: String,
}

/// A document's stored pages as Markdown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentMarkdown {
    /// The document.
    pub doc_id: i64,
    /// Its title.
    pub title: String,
    /// Its stored pages, in order (a page not read yet is absent).
    pub pages: Vec<PageMarkdown>,
}

impl DocumentMarkdown {
    /// The whole document: a title heading (unless its pages open with a heading of their
    /// own), then each page after its `<!-- page N -->` mark, then the footnotes.
    pub fn to_markdown(&self) -> String {
        let own_title = self
            .pages
            .iter()
            .map(|p| p.markdown.trim_start())
            .find(|m| !m.is_empty())
            .is_some_and(|m| m.starts_with("# "));
        let mut out = if own_title {
            String::new()
        } else {
            format!("# {}\n", escape_line(&self.title))
        };
        for p in &self.pages {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("<!-- page {} -->\n\n", p.page_no));
            out.push_str(&p.markdown);
            out.push('\n');
        }
        for p in self.pages.iter().filter(|p| !p.footnotes.is_empty()) {
            out.push('\n');
            out.push_str(&p.footnotes);
            out.push('\n');
        }
        out
    }
}

/// The stored pages of document `doc_id` as Markdown; `None` when there is no such document
/// (the Markdown of [`document_export`](super::document_export)).
pub fn document_markdown(db: &mut dyn Db, doc_id: i64) -> Result<Option<DocumentMarkdown>> {
    Ok(super::document_export(db, doc_id)?.map(|e| e.markdown()))
}

/// A page's text, tables and figures as Markdown blocks separated by blank lines.
pub fn page_markdown(text: &str, tables: &[serde_json::Value], figures: &[String]) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let text: Vec<String> = text.lines().map(escape_line).collect();
    let text = text.join("\n");
    if !text.trim().is_empty() {
        blocks.push(text.trim_matches('\n').to_owned());
    }
    blocks.extend(tables.iter().map(table_markdown));
    blocks.extend(
        figures
            .iter()
            .map(|f| format!("*Figure: {}*", escape_cell(f))),
    );
    blocks.join("\n\n")
}

/// A line of read text that Markdown would take for a heading, quote, list item or table row,
/// escaped so that it stays text.
fn escape_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let marker = trimmed.starts_with(['#', '>', '|'])
        || ["- ", "* ", "+ "].iter().any(|m| trimmed.starts_with(m))
        || {
            let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
            digits > 0 && trimmed[digits..].starts_with(". ")
        };
    if !marker {
        return line.to_owned();
    }
    let indent = line.len() - trimmed.len();
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        // `1. item` → `1\. item`
        format!(
            "{}{}\\{}",
            &line[..indent],
            &trimmed[..digits],
            &trimmed[digits..]
        )
    } else {
        format!("{}\\{}", &line[..indent], trimmed)
    }
}

/// A cell's text: one line, its pipes escaped.
fn escape_cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A value's text as a cell: strings as they are, anything else as JSON.
fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A table as the vision reader answers it (`{"caption", "header": [..], "rows": [[..]]}`) as
/// a Markdown table (written as the text layer's tables are, [`structure::markdown::table`]),
/// its caption in bold above it; a table of another shape as a JSON block.
fn table_markdown(table: &serde_json::Value) -> String {
    let strings = |v: Option<&serde_json::Value>| -> Option<Vec<String>> {
        Some(v?.as_array()?.iter().map(cell).collect())
    };
    let header = strings(table.get("header"));
    let rows: Option<Vec<Vec<String>>> = table.get("rows").and_then(|r| r.as_array()).map(|rows| {
        rows.iter()
            .map(|row| match row.as_array() {
                Some(cells) => cells.iter().map(cell).collect(),
                None => vec![cell(row)],
            })
            .collect()
    });
    let (header, rows) = match (header, rows) {
        (Some(h), rows) if !h.is_empty() => (h, rows.unwrap_or_default()),
        (_, Some(mut rows)) if !rows.is_empty() => {
            let h = rows.remove(0);
            (h, rows)
        }
        _ => return format!("```json\n{table}\n```"),
    };
    let mut out = String::new();
    if let Some(caption) = table.get("caption").and_then(|c| c.as_str())
        && !caption.trim().is_empty()
    {
        out.push_str(&format!("**{}**\n\n", escape_cell(caption)));
    }
    out.push_str(&structure::markdown::table(&header, &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_become_markdown_tables() {
        let t = serde_json::json!({
            "caption": "Attributes",
            "header": ["Attribute", "Context"],
            "rows": [["bigarray", "array | type"], ["ref"]]
        });
        assert_eq!(
            table_markdown(&t),
            "**Attributes**\n\n| Attribute | Context |\n| --- | --- |\n\
             | bigarray | array \\| type |\n| ref |  |"
        );
        // No header: the first row is.
        let t = serde_json::json!({"rows": [["a", "b"], [1, null]]});
        assert_eq!(table_markdown(&t), "| a | b |\n| --- | --- |\n| 1 |  |");
        // Another shape: kept as JSON.
        let t = serde_json::json!({"cells": 3});
        assert_eq!(table_markdown(&t), "```json\n{\"cells\":3}\n```");
    }

    #[test]
    fn read_text_stays_text() {
        let md = page_markdown(
            "# not a heading\n1. not a list\n- nor this\nplain",
            &[],
            &["a chart".to_owned()],
        );
        assert_eq!(
            md,
            "\\# not a heading\n1\\. not a list\n\\- nor this\nplain\n\n*Figure: a chart*"
        );
    }
}
