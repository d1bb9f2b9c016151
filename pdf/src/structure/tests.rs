use super::*;
use crate::layout::{Rule, Span};

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
