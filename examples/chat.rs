//! Chat with a quantized language model from a GGUF file (llama.cpp's
//! format): SmolLM2-135M-Instruct by default. The model, its tokenizer and
//! its chat template all come from the one file; answers stream as they
//! are generated, and the key/value cache carries over between turns.
//!
//! ```sh
//! scripts/fetch_smollm2.sh                              # once: the model, into .cache/
//! cargo run --release --example chat                    # interactive
//! cargo run --release --example chat -- --prompt "What is the capital of France?"
//! cargo run --release --example chat -- --greedy --print-ids --prompt "Hi"
//! cargo run --release --example chat -- --bench         # prompt processing and generation speed
//! ```

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use retrograd::hub::{load_peft_adapter, WeightPrecision};
use retrograd::llm::{ChatModel, GenerateOptions, Message, Role, Sampling, Session};
use retrograd::Result;

const DEFAULT_MODEL: &str = ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

const USAGE: &str = "\
usage: chat [options]

Chats with a language model from a GGUF file (architecture llama, byte-level
BPE vocabulary). Without --prompt, reads your messages from standard input,
one a line (an empty line or end of input ends the chat).

options:
  --model FILE          the GGUF file (default .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --prompt TEXT         answer this one message and exit
  --system TEXT         a system message before the conversation
  --max-tokens N        tokens per answer at most (default 256)
  --temperature T       0 is greedy (default 0.8)
  --top-k N             0 keeps all (default 40)
  --top-p P             (default 0.95)
  --min-p P             (default 0.05)
  --repeat-penalty R    1 is off (default 1.0)
  --seed N              the sampler's seed (default 0)
  --greedy              always the most likely token (temperature 0)
  --print-ids           print the generated token ids on one line, not the text
  --f32                 dequantize the weights to f32 (the exact f32 forward)
  --adapter DIR         a LoRA adapter folder in PEFT's format (finetune_chat writes one)
  --threads N           threads (default: one per core)
  --bench               print prompt processing and generation speed and exit
  -h, --help            this text";

struct Args {
    model: PathBuf,
    prompt: Option<String>,
    system: Option<String>,
    options: GenerateOptions,
    print_ids: bool,
    f32: bool,
    adapter: Option<PathBuf>,
    threads: Option<usize>,
    bench: bool,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        model: PathBuf::from(DEFAULT_MODEL),
        prompt: None,
        system: None,
        options: GenerateOptions::default(),
        print_ids: false,
        f32: false,
        adapter: None,
        threads: None,
        bench: false,
    };
    let mut parser = lexopt::Parser::from_env();
    fn parse<T: std::str::FromStr>(
        v: std::ffi::OsString,
        flag: &str,
    ) -> std::result::Result<T, String> {
        v.to_string_lossy()
            .parse()
            .map_err(|_| format!("{flag} takes a number, got {v:?}"))
    }
    fn value(parser: &mut lexopt::Parser) -> std::result::Result<std::ffi::OsString, String> {
        parser.value().map_err(|e| e.to_string())
    }
    let s = &mut args.options.sampling;
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("model") => args.model = value(&mut parser)?.into(),
            Long("prompt") => {
                args.prompt = Some(value(&mut parser)?.to_string_lossy().into_owned())
            }
            Long("system") => {
                args.system = Some(value(&mut parser)?.to_string_lossy().into_owned())
            }
            Long("max-tokens") => {
                args.options.max_tokens = parse(value(&mut parser)?, "--max-tokens")?
            }
            Long("temperature") => s.temperature = parse(value(&mut parser)?, "--temperature")?,
            Long("top-k") => s.top_k = parse(value(&mut parser)?, "--top-k")?,
            Long("top-p") => s.top_p = parse(value(&mut parser)?, "--top-p")?,
            Long("min-p") => s.min_p = parse(value(&mut parser)?, "--min-p")?,
            Long("repeat-penalty") => {
                s.repetition_penalty = parse(value(&mut parser)?, "--repeat-penalty")?
            }
            Long("seed") => s.seed = parse(value(&mut parser)?, "--seed")?,
            Long("greedy") => {
                *s = Sampling {
                    seed: s.seed,
                    repetition_penalty: s.repetition_penalty,
                    ..Sampling::greedy()
                }
            }
            Long("print-ids") => args.print_ids = true,
            Long("f32") => args.f32 = true,
            Long("adapter") => args.adapter = Some(value(&mut parser)?.into()),
            Long("threads") => args.threads = Some(parse(value(&mut parser)?, "--threads")?),
            Long("bench") => args.bench = true,
            other => return Err(other.unexpected().to_string()),
        }
    }
    s.check().map_err(|e| e.to_string())?;
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("chat: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if !args.model.is_file() {
        eprintln!(
            "chat: no model at {}; fetch it with:\n  scripts/fetch_smollm2.sh",
            args.model.display()
        );
        return ExitCode::from(2);
    }
    if let Some(n) = args.threads
        && let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
    {
        eprintln!("chat: --threads: {e}");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let precision = if args.f32 {
        WeightPrecision::F32
    } else {
        WeightPrecision::Quantized
    };
    let loading = Instant::now();
    let mut chat = ChatModel::from_gguf(&args.model, precision)?;
    if let Some(dir) = &args.adapter {
        let layers = load_peft_adapter(chat.model_mut(), dir, "default")?;
        eprintln!("adapter: {} on {} layers", dir.display(), layers.len());
    }
    if args.bench {
        return bench(&chat, loading);
    }
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::new(Role::System, system.clone()));
    }
    if let Some(prompt) = &args.prompt {
        messages.push(Message::new(Role::User, prompt.clone()));
        let answer = chat.chat(&messages, &args.options, |piece| {
            if !args.print_ids {
                print!("{piece}");
                let _ = std::io::stdout().flush();
            }
            true
        })?;
        if args.print_ids {
            let ids: Vec<String> = answer.ids.iter().map(u32::to_string).collect();
            println!("{}", ids.join(" "));
        } else {
            println!();
        }
        return Ok(());
    }
    let mut session = Session::new();
    let stdin = std::io::stdin();
    eprintln!(
        "{} loaded in {:.2} s; an empty line ends the chat.",
        args.model.display(),
        loading.elapsed().as_secs_f64()
    );
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            return Ok(());
        }
        messages.push(Message::new(Role::User, line.trim_end().to_string()));
        let prompt = chat.encode(&chat.render(&messages)?)?;
        let answer = chat.generate(&prompt, &args.options, &mut session, |piece| {
            print!("{piece}");
            let _ = std::io::stdout().flush();
            true
        })?;
        println!();
        eprintln!(
            "[{} tokens in {:.2} s, {:.1} tokens/s; {} of {} prompt tokens run]",
            answer.ids.len(),
            answer.generation_seconds,
            answer.ids.len() as f64 / answer.generation_seconds.max(1e-9),
            answer.prompt_tokens_run,
            answer.prompt_tokens
        );
        messages.push(Message::new(Role::Assistant, answer.text));
    }
}

/// A paragraph repeated into prompts of a fixed length.
const TEXT: &str = "The quick brown fox jumps over the lazy dog while the farmer watches \
from the porch, thinking about the harvest, the weather, and the long winter ahead. ";

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: Sampling::greedy(),
        stop: vec![],
    }
}

/// `load` (file to the first token of a one-token prompt), `prompt
/// processing` (a 512-token prompt from an empty cache) and `generation`
/// (128 greedy tokens after a 32-token prompt, the decode steps only), the
/// last two the median of 3 runs: the lines `bench/llama_cpp_bench.py`
/// prints for llama.cpp.
fn bench(chat: &ChatModel, loading: Instant) -> Result<()> {
    let ids = chat.encode(&TEXT.repeat(40))?;
    chat.generate(&ids[..1], &greedy(1), &mut Session::new(), |_| true)?;
    let load = loading.elapsed().as_secs_f64();
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let g = chat.generate(&ids[..512], &greedy(1), &mut Session::new(), |_| true)?;
        pp.push(512.0 / g.prompt_seconds);
        tg.push(decode_speed(chat, &ids[..32], 128)?);
    }
    let (pp, pp_lo, pp_hi) = median(pp);
    let (tg, tg_lo, tg_hi) = median(tg);
    println!("prompt processing: {pp:.1} tokens/s (range {pp_lo:.1}-{pp_hi:.1})");
    println!("generation: {tg:.1} tokens/s (range {tg_lo:.1}-{tg_hi:.1})");
    println!("load: {load:.3} s (file to first token)");
    println!("peak RSS: {} MiB", peak_rss_mib());
    println!("threads: {}", rayon::current_num_threads());
    Ok(())
}

/// Tokens per second of `steps` greedy decode steps after `prompt`,
/// whatever tokens come out (an end-of-turn token is run like any other,
/// so every run times the same number of steps).
fn decode_speed(chat: &ChatModel, prompt: &[u32], steps: usize) -> Result<f64> {
    let model = chat.model();
    let mut cache = retrograd::nn::LlamaCache::new();
    let prompt: Vec<usize> = prompt.iter().map(|&i| i as usize).collect();
    let g = retrograd::Graph::new();
    let mut logits = model
        .forward_cached(&g, &prompt, &mut cache, true)?
        .value()
        .to_vec::<f32>()?;
    let started = Instant::now();
    for _ in 0..steps {
        let id = retrograd::llm::argmax(&logits) as usize;
        let g = retrograd::Graph::new();
        logits = model
            .forward_cached(&g, &[id], &mut cache, true)?
            .value()
            .to_vec::<f32>()?;
    }
    Ok(steps as f64 / started.elapsed().as_secs_f64())
}

/// The process's peak resident set (`VmHWM`), in MiB.
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
        })
        .map_or(0, |kb| kb / 1024)
}
