//! ggml's block formats and GGUF files against gguf-py, llama.cpp's Python
//! package (tests/reference/gguf_quant_reference.py writes the fixture
//! tests/reference/gguf_quant/ with gguf's own GGUFWriter):
//!
//! - F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: our quantizer's bytes equal
//!   `gguf.quants.quantize`'s, and our dequantized values equal
//!   `gguf.quants.dequantize`'s bit for bit;
//! - Q4_K, Q5_K, Q6_K: random valid blocks dequantized bit for bit, and
//!   seeded rows quantized to the bytes of ggml's C reference quantizers
//!   (`quantize_row_q4_K_ref` ..., which gguf-py lacks; the script calls
//!   them in the libggml-base that llama-cpp-python ships);
//! - gguf-py's files read back: a metadata entry of every value type, a
//!   custom alignment;
//! - SmolLM2-135M-Instruct Q4_1 (`scripts/fetch_smollm2.sh`), when present:
//!   its hyperparameters and tensor infos, and `token_embd.weight` (Q8_0)
//!   and `blk.0.attn_q.weight` (Q4_1) dequantized as gguf does (the first
//!   rows, a CRC-32 of every value's bits, the sum). Without the model that
//!   test prints one skip line and passes.

use std::path::{Path, PathBuf};

use retrograd::gguf::{GgufFile, MetadataValue};
use retrograd::quant::{self, GgmlType};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference/gguf_quant")
        .join(name)
}

fn f32s(f: &GgufFile, name: &str) -> Vec<f32> {
    f.tensor_f32(name).to_vec::<f32>().unwrap()
}

/// Bit-for-bit equality, naming the first difference.
fn assert_bits_eq(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    if let Some(i) = (0..ours.len()).find(|&i| ours[i].to_bits() != theirs[i].to_bits()) {
        panic!(
            "{what}: value {i} is {} (ours), {} (gguf)",
            ours[i], theirs[i]
        );
    }
}

#[test]
fn simple_formats_quantize_and_dequantize_as_gguf_py() {
    let f = GgufFile::open(fixture("simple_quants.gguf"));
    assert_eq!(f.architecture(), "reference");
    let input = f.tensor_f32("input");
    assert_eq!(input.shape(), &[8, 128]);
    let x = input.to_vec::<f32>().unwrap();
    let types = [
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
    ];
    for ty in types {
        let name = format!("{}.quant", ty.name());
        let info = f.tensor_info(&name);
        assert_eq!((info.ty, info.shape()), (ty, vec![8, 128]), "{name}");
        let theirs = f.tensor_bytes(info);
        let ours = quant::quantize(ty, &x);
        if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
            let block = i / ty.block_bytes();
            panic!(
                "{ty}: byte {i} (block {block}, row {}) is {:#04x} (ours), {:#04x} (gguf)",
                block * ty.block_len() / 128,
                ours[i],
                theirs[i]
            );
        }
        assert_eq!(ours.len(), theirs.len(), "{ty}");
        let want = f32s(&f, &format!("{}.dequant", ty.name()));
        let mut got = vec![0.0f32; x.len()];
        quant::dequantize(ty, theirs, &mut got);
        assert_bits_eq(&got, &want, &format!("{ty} dequantize"));
        assert_bits_eq(&f32s(&f, &name), &want, &format!("{ty} tensor_f32"));
    }
}

#[test]
fn k_quants_dequantize_as_gguf_py_quantize_as_ggml_and_every_value_type_reads() {
    let f = GgufFile::open(fixture("kquants.gguf"));
    assert_eq!((f.version(), f.alignment()), (3, 64));
    assert_eq!(f.data_offset() % 64, 0);
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let name = format!("{}.quant", ty.name());
        let info = f.tensor_info(&name);
        assert_eq!((info.ty, info.dims.clone()), (ty, vec![512, 4]), "{name}");
        assert_eq!(info.offset % 64, 0);
        let want = f32s(&f, &format!("{}.dequant", ty.name()));
        assert!(want.iter().all(|v| v.is_finite() && v.abs() < 100.0));
        let mut got = vec![0.0f32; 4 * 512];
        quant::dequantize(ty, f.tensor_bytes(info), &mut got);
        assert_bits_eq(&got, &want, &format!("{ty} dequantize"));
        assert_bits_eq(&f32s(&f, &name), &want, &format!("{ty} tensor_f32"));
    }
    let input = f.tensor_f32("input");
    assert_eq!(input.shape(), &[9, 512]);
    let x = input.to_vec::<f32>().unwrap();
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let theirs = f.tensor_bytes(f.tensor_info(&format!("{}.quantized", ty.name())));
        let ours = quant::quantize(ty, &x);
        assert_eq!(ours.len(), theirs.len(), "{ty}");
        if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
            let block = i / ty.block_bytes();
            panic!(
                "{ty}: byte {} of block {block} (row {}) is {:#04x} (ours), {:#04x} (ggml)",
                i % ty.block_bytes(),
                block / 2,
                ours[i],
                theirs[i]
            );
        }
    }
    use MetadataValue as V;
    let expected = [
        ("general.architecture", V::from("reference")),
        ("general.alignment", V::U32(64)),
        ("ref.u8", V::U8(200)),
        ("ref.i8", V::I8(-100)),
        ("ref.u16", V::U16(60000)),
        ("ref.i16", V::I16(-30000)),
        ("ref.u32", V::U32(4_000_000_000)),
        ("ref.i32", V::I32(-2_000_000_000)),
        ("ref.f32", V::F32(0.1)),
        ("ref.bool", V::Bool(true)),
        ("ref.str", V::from("héllo ▁wörld")),
        ("ref.u64", V::U64(u64::MAX)),
        ("ref.i64", V::I64(i64::MIN)),
        ("ref.f64", V::F64(-2.5e300)),
        ("ref.strs", V::from(vec!["<s>", "Ġthe", ""])),
        ("ref.i32s", V::from(vec![1i32, -2, 3])),
        ("ref.f32s", V::from(vec![0.5f32, -1.0])),
    ];
    let found: Vec<(&str, &MetadataValue)> =
        f.metadata().iter().map(|(k, v)| (k.as_str(), v)).collect();
    let expected: Vec<(&str, &MetadataValue)> = expected.iter().map(|(k, v)| (*k, v)).collect();
    assert_eq!(found, expected);
    assert_eq!(f.get_str_array("ref.strs"), ["<s>", "Ġthe", ""]);
    assert_eq!(f.get_i32_array("ref.i32s"), [1, -2, 3]);
    assert_eq!(f.get_f32("ref.f32"), 0.1);
}

const SMOLLM2: &str = ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn smollm2_q4_1_reads_and_dequantizes_as_gguf_py() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SMOLLM2);
    if !path.is_file() {
        println!("skip: {SMOLLM2} is not there; run scripts/fetch_smollm2.sh");
        return;
    }
    let f = GgufFile::open(&path);
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture(), "llama");
    assert_eq!(f.get_usize("llama.block_count"), 30);
    assert_eq!(f.get_usize("llama.embedding_length"), 576);
    assert_eq!(f.get_usize("llama.attention.head_count"), 9);
    assert_eq!(f.get_usize("llama.attention.head_count_kv"), 3);
    assert_eq!(f.get_f32("llama.rope.freq_base"), 100000.0);
    assert_eq!(f.get_str("tokenizer.ggml.model"), "gpt2");
    assert_eq!(f.get_str_array("tokenizer.ggml.tokens").len(), 49152);
    assert_eq!(f.get_i32_array("tokenizer.ggml.token_type").len(), 49152);
    assert_eq!(f.get_str_array("tokenizer.ggml.merges").len(), 48900);
    assert_eq!(f.tensors().len(), 272);
    let count = |ty| f.tensors().iter().filter(|t| t.ty == ty).count();
    assert_eq!(
        (
            count(GgmlType::Q4_1),
            count(GgmlType::F32),
            count(GgmlType::Q8_0)
        ),
        (210, 61, 1)
    );
    let embd = f.tensor_info("token_embd.weight");
    assert_eq!((embd.ty, embd.shape()), (GgmlType::Q8_0, vec![49152, 576]));
    let q = f.tensor_info("blk.0.attn_q.weight");
    assert_eq!((q.ty, q.shape()), (GgmlType::Q4_1, vec![576, 576]));

    let reference = GgufFile::open(fixture("smollm2_q4_1.gguf"));
    for name in ["token_embd.weight", "blk.0.attn_q.weight"] {
        let info = f.tensor_info(name);
        assert_eq!(reference.get_str(&format!("{name}.type")), info.ty.name());
        let shape: Vec<usize> = reference
            .get(&format!("{name}.shape"))
            .and_then(MetadataValue::as_array)
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(info.shape(), shape, "{name}");
        let values = f32s(&f, name);
        let rows = f32s(&reference, &format!("{name}.rows"));
        assert_bits_eq(
            &values[..rows.len()],
            &rows,
            &format!("{name}: first 4 rows"),
        );
        let mut crc = crc32fast::Hasher::new();
        for v in &values {
            crc.update(&v.to_le_bytes());
        }
        let want_crc = reference.get_u64(&format!("{name}.crc32"));
        assert_eq!(
            u64::from(crc.finalize()),
            want_crc,
            "{name}: CRC-32 of every value"
        );
        let sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
        let abs: f64 = values.iter().map(|&v| f64::from(v).abs()).sum();
        let want_sum = match reference.get(&format!("{name}.sum")) {
            Some(&MetadataValue::F64(s)) => s,
            other => panic!("{name}.sum: {other:?}"),
        };
        assert!(
            (sum - want_sum).abs() <= 1e-9 * abs,
            "{name}: sum {sum} vs {want_sum}"
        );
    }
}
