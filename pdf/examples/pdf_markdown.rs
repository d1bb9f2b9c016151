//! A PDF's text layer as Markdown, structured (headings, lists, code, tables, footnotes):
//! `cargo run -p horos-pdf --example pdf_markdown -- FILE.pdf`.

use horos_pdf::render::RenderConfig;
use horos_pdf::structure;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: pdf_markdown FILE.pdf")?;
    let data = std::fs::read(&path)?;
    if std::env::var_os("PDF_MARKDOWN_LINES").is_some() {
        // The laid-out lines, for looking into a page's structure.
        let config = RenderConfig::default();
        let pdf = horos_pdf::render::open_pdf(data.clone(), &config)?;
        let mut r = horos_pdf::render::PageRenderer::new(&pdf, &config)?;
        for n in 1..=r.page_count() {
            let page = r.text_layer(n)?;
            let layout = page.text_layer.map(|t| t.layout).unwrap_or_default();
            for rule in &layout.rules {
                eprintln!(
                    "p{n} rule {:.1},{:.1} .. {:.1},{:.1}",
                    rule.x0, rule.y0, rule.x1, rule.y1
                );
            }
            for l in layout.lines {
                let raised: Vec<&str> = l
                    .spans
                    .iter()
                    .filter(|s| s.raised)
                    .map(|s| s.text.as_str())
                    .collect();
                eprintln!(
                    "p{n} y={:.0} x={:.0}..{:.0} size={:.1} bold={:.1} mono={:.1} gap={} raised={raised:?} | {}",
                    l.y0(),
                    l.x0(),
                    l.x1(),
                    l.size(),
                    l.share(|s| s.bold),
                    l.share(|s| s.mono),
                    l.gap_above,
                    l.text()
                );
            }
        }
    }
    let pages = structure::read_pdf(data, &RenderConfig::default())?;
    println!("{}", structure::to_markdown(&pages));
    Ok(())
}
