//! retrograd's benchmark driver: one JSON line per measurement.
//!
//! ```text
//! cargo run --release --example bench -- <workload> [--repeats N] [--quick] [--isa avx2|portable]
//! ```
//!
//! Workloads: `matmul` (f32 GFLOP/s: the gemm call alone, the kernel, the
//! graph op, forward + backward; and the single- vs multi-thread crossover),
//! `elementwise` (GB/s of `add` against a plain copy; the parallel-threshold
//! sweep), `all`. Each result line carries the median, min and max time
//! over the repeats. New workloads are one module each plus a line in
//! `WORKLOADS`.
//!
//! `bench gate <workload>` runs one workload at a small size for the
//! instruction-count gate (`gate.rs`, `bench/callgrind/gate`).

mod attention;
mod checkpointing;
#[cfg(feature = "mpi")]
mod ddp;
mod elementwise;
mod func;
mod gate;
mod jit;
mod llm_decode;
mod long_sum;
#[cfg(feature = "chat")]
mod lora_step;
mod matmul;
mod memory;
#[cfg(feature = "onnx")]
mod onnx;
mod report;
mod tape;
mod w1;
mod w2;
mod w3;
mod w4;
mod w4_gemms;
#[cfg(feature = "tokenizers")]
mod w6;

use std::process::ExitCode;

/// Options every workload receives.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Timed repeats per measurement (after one warm-up run).
    pub repeats: usize,
    /// Smaller sizes and fewer repeats (a smoke test of the harness).
    pub quick: bool,
}

type Workload = fn(&Options);

const WORKLOADS: &[(&str, Workload, &str)] = &[
    (
        "w1",
        w1::run_w1,
        "scalar chain: ns per node, forward + backward",
    ),
    (
        "w1c",
        w1::run_compiled,
        "W1 compiled (captured once, replayed) against eager W1 in the same run: ns per node",
    ),
    (
        "long_sum",
        long_sum::run,
        "capture of a compiled long sum (one input added n times, n up to 1,000,000) against its eager forward + backward",
    ),
    (
        "w1_tape",
        tape::run,
        "W1 on a hand-written tape without any framework (the floor)",
    ),
    ("w1v", w1::run_w1v, "length-64 vector chain: ns per node"),
    (
        "w1vc",
        w1::run_compiled_w1v,
        "W1v compiled against eager W1v in the same run: ns per node",
    ),
    (
        "w2",
        w2::run,
        "MLP training step (784-512-512-10), batch 128 and 1024",
    ),
    (
        "w2c",
        w2::run_compiled,
        "the W2 step compiled (retrograd::compile) beside the eager step, batch 128 and 1024",
    ),
    (
        "w3",
        w3::run_step,
        "CNN training step (model C1, Adam), batch 64 and 256",
    ),
    (
        "w3c",
        w3::run_compiled,
        "the W3 step compiled beside the eager step, batch 64 and 256",
    ),
    (
        "w3_conv",
        w3::run_conv,
        "3x3 conv2d 64->64, batch 32, 32x32: forward + backward",
    ),
    (
        "w4",
        w4::run_step,
        "GPT training iteration (nanoGPT shakespeare_char CPU config, AdamW), batch 12",
    ),
    (
        "w4c",
        w4::run_step_compiled,
        "the W4 iteration compiled beside the eager iteration, batch 12",
    ),
    (
        "w4_capture",
        w4::run_capture,
        "the first run of a fresh compiled W4 iteration (its capture) against one eager iteration, batch 12",
    ),
    (
        "w4_profile",
        w4::run_profile,
        "the compiled W4 step's replay, step by step (Compiled::profile): a JSON line per kind, the table on stderr",
    ),
    (
        "w4_attn",
        w4::run,
        "causal scaled_dot_product_attention, B=12 H=4 D=32, T=64/256/1024: forward + backward",
    ),
    (
        "attention_minilm",
        attention::run,
        "one layer of MiniLM's attention (384 heads of 128 x 128, dim 32, a padding mask): the flash forward against the inference tiles",
    ),
    (
        "w4_gemms",
        w4_gemms::run,
        "every matrix product of the W4 iteration outside attention, each shape alone: GFLOP/s, ms per iteration",
    ),
    (
        "mem_w4",
        w4::run_memory_step,
        "peak RSS growth of the W4 iteration, eager and compiled, each in a fresh process",
    ),
    (
        "mem_w4_attn",
        w4::run_memory,
        "peak RSS growth of W4 attention (forward + backward) at T=1024 and 2048",
    ),
    #[cfg(feature = "tokenizers")]
    (
        "w6_embed",
        w6::run_embed,
        "all-MiniLM-L6-v2: encode 256 speeches at batch 32, real tokens packed (needs scripts/fetch_minilm.sh)",
    ),
    #[cfg(feature = "tokenizers")]
    (
        "w6_embed_padded",
        w6::run_embed_padded,
        "all-MiniLM-L6-v2: encode 256 speeches at batch 32, each batch padded to its longest",
    ),
    #[cfg(feature = "tokenizers")]
    (
        "w6_step",
        w6::run_step,
        "all-MiniLM-L6-v2 fine-tuning step: batch 16, sequence 128, AdamW",
    ),
    #[cfg(feature = "tokenizers")]
    (
        "w6_load",
        w6::run_load,
        "all-MiniLM-L6-v2: folder to first embedding, and peak RSS of load + embed (fresh process)",
    ),
    #[cfg(feature = "chat")]
    (
        "lora_step",
        lora_step::run,
        "SmolLM2-135M LoRA step through its Q4_1 blocks: r 8 on every layer matrix, batch 4 x 256, AdamW; peak RSS (fresh process)",
    ),
    #[cfg(feature = "chat")]
    (
        "lora_step_ckpt",
        lora_step::run_checkpointed,
        "the same LoRA step with each decoder layer recomputed in backward (gradient checkpointing; fresh process)",
    ),
    #[cfg(feature = "chat")]
    (
        "lora_step_f32",
        lora_step::run_f32,
        "the same LoRA step on SmolLM2 dequantized to f32, as PyTorch runs it (fresh process)",
    ),
    (
        "func",
        func::run,
        "retrograd::func against the plain forms: per-sample gradients of the MNIST CNN (batch 64), jacrev of a 256-256-256 tanh MLP, an ensemble of 8 digits MLPs (batch 128) vmapped",
    ),
    (
        "func_per_sample",
        func::run_per_sample,
        "the first of `func` alone: per-sample gradients of the MNIST CNN (batch 64) against its batched backward",
    ),
    (
        "func_jacobian",
        func::run_jacobian,
        "the second of `func` alone: jacrev of a 256-256-256 tanh MLP against one backward per row",
    ),
    (
        "func_ensemble",
        func::run_ensemble,
        "the third of `func` alone: 8 digits MLPs (batch 128) vmapped against one MLP at 8x the batch",
    ),
    (
        "mem_w1",
        memory::run_w1,
        "peak RSS growth per recorded W1 node",
    ),
    (
        "checkpoint",
        checkpointing::run,
        "peak memory of a 20-layer MLP's backward, with and without checkpointing",
    ),
    (
        "mem_w2",
        memory::run_w2,
        "peak RSS growth of 5 W2 steps at batch 4096",
    ),
    (
        "matmul",
        matmul::run,
        "f32 GFLOP/s, gemm alone vs kernel vs graph op",
    ),
    #[cfg(feature = "mpi")]
    (
        "ddp",
        ddp::run_w2,
        "W2 MLP step and W4 GPT iteration data-parallel under mpirun (feature mpi): fixed global and per-rank batches",
    ),
    (
        "elementwise",
        elementwise::run,
        "add GB/s vs copy, parallel threshold sweep",
    ),
    (
        "jit",
        jit::run,
        "bias + GELU forward and backward at W4's size: the compiled step's interpreter against hand-written fused loops",
    ),
    #[cfg(feature = "onnx")]
    (
        "onnx_mnist_cnn",
        onnx::run_mnist_cnn,
        "inference of the CNN imported from torch.onnx.export, batch 64 (bench/onnx_models.py)",
    ),
    #[cfg(feature = "onnx")]
    (
        "onnx_minilm",
        onnx::run_minilm,
        "inference of all-MiniLM-L6-v2 imported from torch.onnx.export, batch 32 (bench/onnx_models.py)",
    ),
    #[cfg(feature = "onnx")]
    (
        "onnx_resnet18",
        onnx::run_resnet18,
        "inference of torchvision's ResNet-18 imported from torch.onnx.export, batch 8 at 224x224 (bench/onnx_models.py)",
    ),
    #[cfg(feature = "onnx")]
    (
        "onnx_mobilenet_v3",
        onnx::run_mobilenet_v3,
        "inference of torchvision's MobileNet v3 small imported from torch.onnx.export, batch 32 at 224x224 (bench/onnx_models.py)",
    ),
    #[cfg(feature = "onnx")]
    (
        "onnx_bert_base",
        onnx::run_bert_base,
        "inference of a seeded BERT-base-sized encoder imported from torch.onnx.export, batch 8 x 128 (bench/onnx_models.py)",
    ),
];

fn usage() -> String {
    let mut s = String::from(
        "usage: bench <workload> [--repeats N] [--quick] [--isa portable|avx2|avx512]\n\n\
         --isa caps the instruction set of retrograd's kernels (as RETROGRAD_ISA does); matrix\n\
         products follow it only in a build without the feature `avx512-gemm`\n\nworkloads:\n",
    );
    for (name, _, what) in WORKLOADS {
        s.push_str(&format!("  {name:<12} {what}\n"));
    }
    s.push_str("  all          every workload\n\n");
    s.push_str(&gate::usage());
    s
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("gate") {
        return gate::main(&args[1..]);
    }
    let mut opts = Options {
        repeats: 0,
        quick: false,
    };
    let mut workload = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => opts.quick = true,
            "--repeats" => match it.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => opts.repeats = n,
                _ => {
                    eprintln!("--repeats needs a positive integer\n\n{}", usage());
                    return ExitCode::FAILURE;
                }
            },
            "--isa" => match it.next().map(|n| retrograd::Isa::try_from_name(n)) {
                Some(Ok(cap)) => {
                    let level = retrograd::set_isa_cap(cap);
                    let gemm = if cfg!(feature = "avx512-gemm")
                        && retrograd::Isa::detected() == retrograd::Isa::Avx512
                        && cap < retrograd::Isa::Avx512
                    {
                        " (matrix products still use AVX-512: build without the feature `avx512-gemm`)"
                    } else {
                        ""
                    };
                    eprintln!(
                        "instruction set: {} (the CPU has {}){gemm}",
                        level.name(),
                        retrograd::Isa::detected().name()
                    );
                }
                Some(Err(e)) => {
                    eprintln!("{e}\n\n{}", usage());
                    return ExitCode::FAILURE;
                }
                None => {
                    eprintln!("--isa needs a name\n\n{}", usage());
                    return ExitCode::FAILURE;
                }
            },
            "-h" | "--help" => {
                print!("{}", usage());
                return ExitCode::SUCCESS;
            }
            name if workload.is_none() => workload = Some(name.to_string()),
            other => {
                eprintln!("unexpected argument `{other}`\n\n{}", usage());
                return ExitCode::FAILURE;
            }
        }
    }
    if opts.repeats == 0 {
        opts.repeats = if opts.quick { 3 } else { 15 };
    }
    match workload.as_deref() {
        Some("all") => WORKLOADS.iter().for_each(|(_, run, _)| run(&opts)),
        Some(name) => match WORKLOADS.iter().find(|(n, _, _)| *n == name) {
            Some((_, run, _)) => run(&opts),
            None => {
                eprintln!("unknown workload `{name}`\n\n{}", usage());
                return ExitCode::FAILURE;
            }
        },
        None => {
            eprint!("{}", usage());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
