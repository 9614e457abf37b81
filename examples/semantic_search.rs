//! Semantic search over the speeches of tiny Shakespeare with a real
//! pretrained model, all-MiniLM-L6-v2 (sentence-transformers): every
//! speech is embedded once (a progress bar; the index is cached as a
//! safetensors file next to the model and reused), then a query's
//! embedding is compared with each speech's by cosine similarity.
//!
//! ```sh
//! scripts/fetch_minilm.sh                       # once: the model, into .cache/
//! cargo run --release --example semantic_search -- "a query"
//! cargo run --release --example semantic_search -- --interactive
//! cargo run --release --example semantic_search -- --embed "some text" "another"
//! ```

#[path = "support/minilm_dir.rs"]
mod minilm_dir;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use retrograd::data::shakespeare::{self, Speech};
use retrograd::hub::SentenceTransformer;
use retrograd::io::{load_tensors, save_tensors};
use retrograd::nn::StateDict;
use retrograd::{Result, Tensor};

const USAGE: &str = "\
usage: semantic_search [options] [QUERY...]

Finds the speeches of tiny Shakespeare closest in meaning to each QUERY.

options:
  --interactive       answer queries read from standard input, one a line
  --embed TEXT...     print each TEXT's normalised embedding as a JSON array, one a line
  --model DIR         a sentence-transformers folder of the BERT family
                      (default .cache/models/all-MiniLM-L6-v2)
  --top N             how many speeches to show (default 5)
  --batch-size N      speeches per batch while indexing (default 32)
  --rebuild           embed the speeches again even if the cached index matches
  --quiet             no progress bar
  -h, --help          this text";

struct Args {
    queries: Vec<String>,
    interactive: bool,
    embed: bool,
    model: PathBuf,
    top: usize,
    batch_size: usize,
    rebuild: bool,
    quiet: bool,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        queries: Vec::new(),
        interactive: false,
        embed: false,
        model: minilm_dir::default_dir(),
        top: 5,
        batch_size: 32,
        rebuild: false,
        quiet: false,
    };
    let mut parser = lexopt::Parser::from_env();
    let number = |v: std::ffi::OsString, flag: &str| -> std::result::Result<usize, String> {
        v.to_string_lossy()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag} takes a positive number"))
    };
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("interactive") => args.interactive = true,
            Long("embed") => args.embed = true,
            Long("model") => args.model = parser.value().map_err(|e| e.to_string())?.into(),
            Long("top") => args.top = number(parser.value().map_err(|e| e.to_string())?, "--top")?,
            Long("batch-size") => {
                args.batch_size =
                    number(parser.value().map_err(|e| e.to_string())?, "--batch-size")?
            }
            Long("rebuild") => args.rebuild = true,
            Long("quiet") => args.quiet = true,
            Value(v) => args.queries.push(v.to_string_lossy().into_owned()),
            other => return Err(other.unexpected().to_string()),
        }
    }
    if args.queries.is_empty() && !args.interactive {
        return Err("give a query, --interactive or --embed TEXT...".into());
    }
    Ok(Some(args))
}

/// FNV-1a of the indexed texts and the model's weights file size: whether
/// a cached index still belongs to this corpus and this model.
fn fingerprint(speeches: &[Speech], model: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for s in speeches {
        feed(s.speaker.as_bytes());
        feed(&[0]);
        feed(s.text.as_bytes());
        feed(&[0]);
    }
    let size = std::fs::metadata(model.join("model.safetensors")).map_or(0, |m| m.len());
    format!("{h:016x}-{size}")
}

/// The embeddings of every speech: the cached index when it matches,
/// else computed with a progress bar and cached next to the model.
fn index(model: &SentenceTransformer, speeches: &[Speech], args: &Args) -> Result<Tensor> {
    let path = args
        .model
        .join("retrograd_index_tinyshakespeare.safetensors");
    let key = fingerprint(speeches, &args.model);
    if !args.rebuild && path.is_file() {
        // A stale or unreadable cache is simply rebuilt.
        if let Ok(mut cached) = load_tensors(&path)
            && cached.metadata.get("fingerprint") == Some(&key)
            && let Some(embeddings) = cached.tensors.remove("embeddings")
        {
            eprintln!(
                "index: {} (cached, {} speeches)",
                path.display(),
                speeches.len()
            );
            return Ok(embeddings);
        }
    }
    let start = Instant::now();
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(speeches.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "embedding {pos}/{len} speeches [{bar:30}] {per_sec} eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let texts: Vec<&str> = speeches.iter().map(|s| s.text.as_str()).collect();
    let embeddings = model.encode(&texts, args.batch_size, |done, _| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    let mut tensors = StateDict::new();
    tensors.insert("embeddings".into(), embeddings.clone());
    let metadata = BTreeMap::from([
        ("fingerprint".to_string(), key),
        (
            "corpus".to_string(),
            "tiny Shakespeare speeches".to_string(),
        ),
    ]);
    save_tensors(&path, &tensors, &metadata)?;
    eprintln!(
        "index: embedded {} speeches in {:.1} s, saved {}",
        speeches.len(),
        start.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(embeddings)
}

/// The `top` speeches closest to `query`: (index, cosine).
fn search(
    model: &SentenceTransformer,
    index: &[f32],
    query: &str,
    top: usize,
) -> Result<Vec<(usize, f32)>> {
    let q = model.embed_batch(&[query])?.to_vec::<f32>()?;
    let dim = q.len();
    // Embeddings are unit vectors: the dot product is the cosine.
    let mut scored: Vec<(usize, f32)> = index
        .chunks(dim)
        .map(|row| row.iter().zip(&q).map(|(a, b)| a * b).sum())
        .enumerate()
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.truncate(top);
    Ok(scored)
}

fn show(query: &str, hits: &[(usize, f32)], speeches: &[Speech]) {
    println!("\nquery: {query}");
    for (rank, &(i, score)) in hits.iter().enumerate() {
        let s = &speeches[i];
        let lines: Vec<&str> = s.text.lines().collect();
        let shown = lines
            .iter()
            .take(4)
            .copied()
            .collect::<Vec<_>>()
            .join("\n      ");
        let more = if lines.len() > 4 {
            format!("\n      ... ({} more lines)", lines.len() - 4)
        } else {
            String::new()
        };
        println!(
            "{:>2}. {score:.3}  {}\n      {shown}{more}",
            rank + 1,
            s.speaker
        );
    }
}

fn run(args: &Args) -> Result<()> {
    let start = Instant::now();
    let model = SentenceTransformer::from_pretrained(&args.model)?;
    if args.embed {
        for text in &args.queries {
            let e = model.embed_batch(&[text.as_str()])?.to_vec::<f32>()?;
            let items: Vec<String> = e.iter().map(|v| format!("{v}")).collect();
            println!("[{}]", items.join(","));
        }
        return Ok(());
    }
    let speeches = shakespeare::speeches(&shakespeare::load_bundled()?);
    eprintln!(
        "model: {} ({} layers, width {}, {} pooling{}), loaded in {:.2} s",
        args.model.display(),
        model.model().config().num_hidden_layers,
        model.dim(),
        model
            .pooling()
            .iter()
            .map(|p| format!("{p:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join("+"),
        if model.normalizes() {
            ", normalised"
        } else {
            ""
        },
        start.elapsed().as_secs_f64()
    );
    let index = index(&model, &speeches, args)?.to_vec::<f32>()?;
    for query in &args.queries {
        show(query, &search(&model, &index, query, args.top)?, &speeches);
    }
    if args.interactive {
        let stdin = std::io::stdin();
        loop {
            eprint!("\nquery> ");
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            if stdin
                .lock()
                .read_line(&mut line)
                .map_err(|e| retrograd::Error::Io {
                    op: "semantic_search",
                    path: "<stdin>".into(),
                    message: e.to_string(),
                })?
                == 0
            {
                break;
            }
            let query = line.trim();
            if !query.is_empty() {
                show(query, &search(&model, &index, query, args.top)?, &speeches);
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    minilm_dir::main(USAGE, parse_args, |args| &args.model, run)
}
