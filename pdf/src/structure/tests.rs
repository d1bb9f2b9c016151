use super::*;
use crate::layout::{Rule, Span};
use horos_testkit::rng::XorShift as Rng;

/// `rng.below(n)` for a `usize` bound.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// A word at `x` on the line whose top is `y`, `size` px high, 0.5 size per character.
fn w(text: &str, x: f32, y: f32, size: f32) -> Span {
    Span {
        text: text.into(),
        x0: x,
        y0: y,
        x1: x + 0.5 * size * text.chars().count() as f32,
        y1: y + size,
        size,
        ..Span::default()
    }
}

/// A line of `text`'s words from `x`, top at `y`.
fn line(text: &str, x: f32, y: f32, size: f32) -> Line {
    let mut spans = Vec::new();
    let mut at = x;
    for word in text.split(' ') {
        let s = w(word, at, y, size);
        at = s.x1 + 0.3 * size;
        spans.push(s);
    }
    Line {
        spans,
        gap_above: false,
    }
}

fn page(lines: Vec<Line>) -> PageLayout {
    PageLayout {
        width: 600.0,
        height: 800.0,
        lines,
        rules: Vec::new(),
        links: Vec::new(),
    }
}

#[test]
fn headings_paragraphs_and_levels() {
    let mut lines = vec![
        line("A Title", 50.0, 100.0, 24.0),
        line("Scope", 50.0, 140.0, 16.0),
        line(
            "The first line of a paragraph that runs to the",
            50.0,
            170.0,
            10.0,
        ),
        line("edge and ends here.", 50.0, 182.0, 10.0),
    ];
    lines[3].gap_above = false;
    let mut l = line("Another paragraph.", 50.0, 210.0, 10.0);
    l.gap_above = true;
    lines.push(l);
    let p = page(lines);
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks,
        vec![
            Block::Heading {
                level: 1,
                text: "A Title".into()
            },
            Block::Heading {
                level: 2,
                text: "Scope".into()
            },
            Block::Paragraph {
                text: "The first line of a paragraph that runs to the edge and ends here.".into()
            },
            Block::Paragraph {
                text: "Another paragraph.".into()
            },
        ]
    );
}

#[test]
fn hyphens_join_unless_both_parts_are_words() {
    let stats = DocumentStats {
        words: ["information", "well", "known"]
            .map(String::from)
            .into_iter()
            .collect(),
        ..DocumentStats::default()
    };
    // Seen whole elsewhere: joined.
    assert_eq!(
        page::join_lines("more infor-", "mation here", &stats),
        "more information here"
    );
    // Both parts are words of the document: a compound, the hyphen kept.
    assert_eq!(
        page::join_lines("a well-", "known case", &stats),
        "a well-known case"
    );
    // "con" is no word of the document: a word cut in two.
    assert_eq!(
        page::join_lines("was con-", "verted", &stats),
        "was converted"
    );
    // A soft hyphen always joins; no hyphen, a space.
    assert_eq!(
        page::join_lines("well\u{00AD}", "known", &stats),
        "wellknown"
    );
    assert_eq!(
        page::join_lines("a line", "and more", &stats),
        "a line and more"
    );
}

#[test]
fn ruled_grid_is_a_table() {
    let mut p = page(vec![
        line("Name Value", 60.0, 105.0, 10.0),
        line("alpha 1", 60.0, 125.0, 10.0),
        line("beta 2", 60.0, 145.0, 10.0),
    ]);
    // Columns at x 55..120 and 120..200; rows every 20 px from 100.
    for y in [100.0, 120.0, 140.0, 160.0] {
        p.rules.push(Rule {
            x0: 55.0,
            y0: y,
            x1: 200.0,
            y1: y + 1.0,
        });
    }
    for x in [55.0, 120.0, 200.0] {
        p.rules.push(Rule {
            x0: x,
            y0: 100.0,
            x1: x + 1.0,
            y1: 160.0,
        });
    }
    // Put each line's second word in the second column.
    for l in &mut p.lines {
        let s = &mut l.spans[1];
        let wdt = s.x1 - s.x0;
        s.x0 = 130.0;
        s.x1 = 130.0 + wdt;
    }
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks,
        vec![Block::Table {
            header: vec!["Name".into(), "Value".into()],
            rows: vec![
                vec!["alpha".into(), "1".into()],
                vec!["beta".into(), "2".into()]
            ],
        }]
    );
}

#[test]
fn page_numbers_and_running_headers_are_furniture() {
    let pages: Vec<PageLayout> = (1..=3)
        .map(|n| {
            page(vec![
                line("The Manual", 250.0, 20.0, 8.0),
                line(
                    &format!("Body text of page {n} goes here."),
                    50.0,
                    300.0,
                    10.0,
                ),
                line(&n.to_string(), 295.0, 770.0, 8.0),
            ])
        })
        .collect();
    let refs: Vec<&PageLayout> = pages.iter().collect();
    let out = document(&refs);
    for (n, p) in out.iter().enumerate() {
        assert_eq!(
            p.furniture,
            vec!["The Manual".to_string(), (n + 1).to_string()]
        );
        assert_eq!(p.blocks.len(), 1);
    }
}

#[test]
fn hostile_layouts_never_panic() {
    let mut rng = Rng::new(0x5eed_1a70);
    let weird = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -1e30,
        1e30,
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
    ];
    let texts = [
        "",
        "•",
        "1.",
        "-",
        "word",
        "con-",
        "12",
        "*",
        "|",
        "```",
        "#",
        "[^1]",
        "\u{00AD}",
        "....... 3",
        "é",
        "<a>",
    ];
    for round in 0..300 {
        let mut pages = Vec::new();
        for _ in 0..1 + below(&mut rng, 3) {
            let mut p = page(Vec::new());
            for _ in 0..below(&mut rng, 40) {
                let mut spans = Vec::new();
                for _ in 0..below(&mut rng, 6) {
                    let pick = |rng: &mut Rng, normal: f32| {
                        if below(rng, 8) == 0 {
                            weird[below(rng, weird.len())]
                        } else {
                            normal * below(rng, 1000) as f32 / 1000.0
                        }
                    };
                    let (x0, y0) = (pick(&mut rng, 600.0), pick(&mut rng, 800.0));
                    spans.push(Span {
                        text: texts[below(&mut rng, texts.len())].into(),
                        x0,
                        y0,
                        x1: x0 + pick(&mut rng, 80.0),
                        y1: y0 + pick(&mut rng, 20.0),
                        size: pick(&mut rng, 24.0),
                        bold: below(&mut rng, 3) == 0,
                        italic: below(&mut rng, 5) == 0,
                        mono: below(&mut rng, 4) == 0,
                        raised: below(&mut rng, 6) == 0,
                        attached: below(&mut rng, 6) == 0,
                    });
                }
                p.lines.push(Line {
                    spans,
                    gap_above: below(&mut rng, 3) == 0,
                });
            }
            for _ in 0..below(&mut rng, 30) {
                let (x, y) = (below(&mut rng, 600) as f32, below(&mut rng, 800) as f32);
                let (w, h) = if below(&mut rng, 2) == 0 {
                    (below(&mut rng, 400) as f32, 1.0)
                } else {
                    (1.0, below(&mut rng, 400) as f32)
                };
                p.rules.push(Rule {
                    x0: x,
                    y0: y,
                    x1: x + w,
                    y1: y + h,
                });
            }
            pages.push(p);
        }
        let refs: Vec<&PageLayout> = pages.iter().collect();
        let out = document(&refs);
        assert_eq!(out.len(), pages.len(), "round {round}");
        let _ = to_markdown(&out);
    }
}

#[test]
fn a_page_past_the_ceilings_is_left_as_read() {
    let lines: Vec<Line> = (0..MAX_LINES + 1)
        .map(|i| line("many small lines", 50.0, i as f32, 10.0))
        .collect();
    let p = page(lines);
    let out = document(&[&p]);
    assert!(out[0].blocks.is_empty() && out[0].furniture.is_empty());
}

#[test]
fn lists_nest_by_their_markers_indentation() {
    let mut lines = vec![
        line("• First item that wraps", 60.0, 100.0, 10.0),
        line("onto a second line", 70.0, 112.0, 10.0),
        line("◦ Nested item", 80.0, 124.0, 10.0),
        line("2. Numbered again", 60.0, 136.0, 10.0),
    ];
    // The marker's text starts 10 px right of it.
    for l in &mut lines {
        let x = l.spans[0].x1 + 5.0;
        let shift = x - l.spans[1].x0;
        for s in &mut l.spans[1..] {
            s.x0 += shift;
            s.x1 += shift;
        }
    }
    let p = page(lines);
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks,
        vec![
            Block::ListItem {
                depth: 0,
                number: None,
                text: "First item that wraps onto a second line".into()
            },
            Block::ListItem {
                depth: 1,
                number: None,
                text: "Nested item".into()
            },
            Block::ListItem {
                depth: 0,
                number: Some("2".into()),
                text: "Numbered again".into()
            },
        ]
    );
    assert_eq!(
        out[0].to_markdown(),
        "- First item that wraps onto a second line\n   - Nested item\n2. Numbered again"
    );
}

#[test]
fn monospaced_lines_are_fenced_code_with_their_indentation() {
    let mono = |text: &str, x: f32, y: f32| {
        let mut l = line(text, x, y, 10.0);
        for s in &mut l.spans {
            s.mono = true;
        }
        l
    };
    // 0.5 size per character: 5 px; the second line sits 4 characters in.
    let p = page(vec![
        line("Run this:", 50.0, 100.0, 10.0),
        mono("fn main() {", 50.0, 115.0),
        mono("println!(\"hi\");", 70.0, 127.0),
        mono("}", 50.0, 139.0),
    ]);
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks[1],
        Block::Code {
            text: "fn main() {\n    println!(\"hi\");\n}".into()
        }
    );
    assert!(
        out[0]
            .to_markdown()
            .contains("```\nfn main() {\n    println!")
    );
}

#[test]
fn aligned_words_without_rules_are_a_table() {
    // Three columns at x 50, 200 and 320, wide gaps between them.
    let row = |cells: [&str; 3], y: f32| {
        let mut spans = Vec::new();
        for (text, x) in cells.iter().zip([50.0, 200.0, 320.0]) {
            spans.extend(line(text, x, y, 10.0).spans);
        }
        Line {
            spans,
            gap_above: false,
        }
    };
    let p = page(vec![
        line("Engines compared:", 50.0, 80.0, 10.0),
        row(["Engine", "Pages per second", "Memory"], 100.0),
        row(["Text layer", "412", "38 MiB"], 114.0),
        row(["Tesseract", "3.1", "212 MiB"], 128.0),
    ]);
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks[1],
        Block::Table {
            header: vec!["Engine".into(), "Pages per second".into(), "Memory".into()],
            rows: vec![
                vec!["Text layer".into(), "412".into(), "38 MiB".into()],
                vec!["Tesseract".into(), "3.1".into(), "212 MiB".into()],
            ],
        }
    );
}

#[test]
fn footnotes_are_defined_and_their_marks_point_at_them() {
    let mut text = line("A claim that needs a source", 50.0, 100.0, 10.0);
    let mut mark = w("1", 0.0, 98.0, 6.0);
    mark.x0 = text.x1();
    mark.x1 = mark.x0 + 3.0;
    mark.raised = true;
    mark.attached = true;
    text.spans.push(mark);
    let p = page(vec![
        text,
        line("and more text.", 50.0, 112.0, 10.0),
        line("1 The source itself.", 50.0, 700.0, 7.0),
    ]);
    let out = document(&[&p]);
    assert_eq!(
        out[0].blocks,
        vec![
            Block::Paragraph {
                text: "A claim that needs a source[^1] and more text.".into()
            },
            Block::Footnote {
                label: "1".into(),
                text: "The source itself.".into()
            },
        ]
    );
    assert_eq!(
        to_markdown(&out),
        "A claim that needs a source[^1] and more text.\n\n[^1]: The source itself."
    );
}

#[test]
fn a_link_broken_over_two_lines_is_one_link() {
    assert_eq!(
        markdown::merge_links(
            "The [SQLite](<https://s.org/wal>) [docs](<https://s.org/wal>) say [x](<a>) [y](<b>)."
        ),
        "The [SQLite docs](<https://s.org/wal>) say [x](<a>) [y](<b>)."
    );
}

#[test]
fn contents_entries_stay_lines_with_their_leaders_collapsed() {
    let p = page(vec![
        line("Contents", 50.0, 60.0, 16.0),
        line("1 Introduction . . . . . . . . 1", 50.0, 100.0, 10.0),
        line("2.1 ASN.1 syntax........ 12", 50.0, 112.0, 10.0),
    ]);
    let out = document(&[&p]);
    assert_eq!(
        out[0].to_markdown(),
        "# Contents\n\n1 Introduction ... 1\n\n2.1 ASN.1 syntax ... 12"
    );
}

#[test]
fn two_columns_drawn_across_are_read_column_by_column() {
    // Each drawn line holds a line of the left column (x 50..250) and one of the right
    // (x 320..520): the gutter is 250..320.
    let words = |i: usize, side: &str| format!("{side} column line {i} goes on here");
    let mut lines = vec![line("Two Columns", 50.0, 40.0, 20.0)];
    for i in 0..8 {
        let y = 100.0 + 12.0 * i as f32;
        let mut l = line(&words(i, "left"), 50.0, y, 10.0);
        l.spans
            .extend(line(&words(i, "right"), 320.0, y, 10.0).spans);
        lines.push(l);
    }
    let p = page(lines);
    let out = document(&[&p]);
    let md = out[0].to_markdown();
    let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("{s:?} in {md}"));
    assert!(
        md.starts_with("# Two Columns\n\nleft column line 0"),
        "{md}"
    );
    // The whole left column before the right one.
    assert!(at("left column line 7") < at("right column line 0"), "{md}");
    assert!(
        at("right column line 0") < at("right column line 7"),
        "{md}"
    );
}

#[test]
fn a_table_is_not_taken_for_two_columns() {
    let row = |a: &str, b: &str, y: f32| {
        let mut l = line(a, 50.0, y, 10.0);
        l.spans.extend(line(b, 150.0, y, 10.0).spans);
        l
    };
    let lines: Vec<Line> = (0..8)
        .map(|i| {
            row(
                &format!("key{i}"),
                &format!("value {i}"),
                100.0 + 12.0 * i as f32,
            )
        })
        .collect();
    let refs: Vec<&Line> = lines.iter().collect();
    assert!(columns::reorder(&refs, 10.0).is_none());
}

#[test]
fn a_link_target_cannot_break_out_of_its_brackets() {
    let mut s = w("here", 50.0, 100.0, 10.0);
    s.x1 = 80.0;
    let link = crate::layout::Link {
        x0: 40.0,
        y0: 90.0,
        x1: 90.0,
        y1: 120.0,
        uri: "https://e.org/a b>c\n<d".into(),
    };
    let md = markdown::inline(&[s], &Default::default(), &[link]);
    assert_eq!(md, "[here](<https://e.org/a%20b%3Ec%0A%3Cd>)");
}

#[test]
fn a_grid_ruled_only_at_its_frame_and_header_has_a_row_per_line() {
    // Columns ruled at x 55, 120, 200; horizontal rules at the top, under the header and at
    // the bottom only, six rows of text between the last two.
    let mut lines = vec![line("Name Value", 60.0, 105.0, 10.0)];
    for i in 0..6 {
        lines.push(line(
            &format!("k{i} v{i}"),
            60.0,
            125.0 + 12.0 * i as f32,
            10.0,
        ));
    }
    for l in &mut lines {
        let s = &mut l.spans[1];
        let wdt = s.x1 - s.x0;
        s.x0 = 130.0;
        s.x1 = 130.0 + wdt;
    }
    let mut p = page(lines);
    for y in [100.0, 120.0, 200.0] {
        p.rules.push(Rule {
            x0: 55.0,
            y0: y,
            x1: 200.0,
            y1: y + 1.0,
        });
    }
    for x in [55.0, 120.0, 200.0] {
        p.rules.push(Rule {
            x0: x,
            y0: 100.0,
            x1: x + 1.0,
            y1: 200.0,
        });
    }
    let out = document(&[&p]);
    let Some(Block::Table { header, rows }) = out[0].blocks.first() else {
        panic!("{:?}", out[0].blocks);
    };
    assert_eq!(header, &["Name", "Value"]);
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert_eq!(rows[5], ["k5", "v5"]);
}
