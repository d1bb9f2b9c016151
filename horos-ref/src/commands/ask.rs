//! `horos-ref ask "question" --model M`: the running coordinator's `POST /v1/answers`
//! (horos-ops' [`Remote::ask_streaming`](horos_ops::remote::Remote)): the answer printed as the
//! model writes it, each claim followed by `[n]`, then the pages `[n]` stands for. `--json`: the
//! whole answer as one JSON object.

use std::io::Write as _;
use std::time::Duration;

use horos_ops::answers::{Answer, AskArgs};

use crate::cli::AskCliArgs;
use crate::config::Config;
use crate::error::AppError;

pub async fn ask(config: &Config, args: AskCliArgs, json_out: bool) -> Result<(), AppError> {
    let remote = crate::admin::data_plane(config, args.key, Duration::from_secs(600))?;
    let question = AskArgs {
        question: args.question,
        model: args.model,
        k: args.k,
        document: args.doc,
        min_similarity: args.min_similarity,
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        images: args.images,
    };
    if json_out {
        super::print_json(&remote.ask(&question).await?);
        return Ok(());
    }
    let mut out = std::io::stdout();
    let answer = remote
        .ask_streaming(&question, |words| {
            let _ = out.write_all(words.as_bytes());
            let _ = out.flush();
        })
        .await?;
    print_cited(&answer);
    Ok(())
}

/// The answer with its citations (the words streamed are replaced by the cited text), then the
/// pages.
fn print_cited(answer: &Answer) {
    println!();
    if !answer.supported {
        println!("{}", answer.answer);
        return;
    }
    println!("\nWith its citations:\n{}\n\nSources:", answer.answer);
    for c in &answer.citations {
        let excerpt: String = c.excerpt.chars().take(100).collect();
        println!(
            "  [{}] document {}, page {} (score {:.3}): {}",
            c.n,
            c.document,
            c.page,
            c.score,
            excerpt.replace('\n', " ")
        );
    }
}
