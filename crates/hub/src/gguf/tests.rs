//! Round trips through [`GgufWriter`] and [`GgufFile`], every malformed
//! header the reader refuses (each by name), and truncated and corrupted
//! files that must give an error or a file, never a panic.

use std::path::{Path, PathBuf};

use half::f16;

use super::*;
use retrograd_engine::quant::{self, GgmlType};
use retrograd_engine::tensor::{DType, Tensor};

/// Seeded bytes (a small LCG).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        })
        .collect()
}

/// Seeded values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    noise(2 * n, seed)
        .chunks(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0 - 1.0)
        .collect()
}

/// `blocks` valid blocks of `ty`: random quants with a modest f16 scale in
/// every scale slot.
fn random_blocks(ty: GgmlType, blocks: usize, seed: u64) -> Vec<u8> {
    let mut bytes = noise(blocks * ty.block_bytes(), seed);
    let scale = f16::from_f32(0.01).to_le_bytes();
    for b in bytes.chunks_mut(ty.block_bytes()) {
        let slots: &[usize] = match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
            GgmlType::Q6K => &[208],
            _ => &[],
        };
        for &at in slots {
            b[at..at + 2].copy_from_slice(&scale);
        }
    }
    bytes
}

fn every_value() -> Vec<(&'static str, MetadataValue)> {
    use MetadataValue as V;
    vec![
        ("general.architecture", V::from("llama")),
        ("t.u8", V::U8(200)),
        ("t.i8", V::I8(-100)),
        ("t.u16", V::U16(60000)),
        ("t.i16", V::I16(-30000)),
        ("t.u32", V::U32(4_000_000_000)),
        ("t.i32", V::I32(-2_000_000_000)),
        ("t.u64", V::U64(u64::MAX)),
        ("t.i64", V::I64(i64::MIN)),
        ("t.f32", V::F32(1e-5)),
        ("t.f64", V::F64(-2.5e300)),
        ("t.bool", V::Bool(true)),
        ("t.str", V::from("héllo ▁wörld")),
        ("t.empty_str", V::from("")),
        ("t.tokens", V::from(vec!["<s>", "a", "Ġb", ""])),
        ("t.token_type", V::from(vec![1i32, -2, 3])),
        ("t.scores", V::from(vec![0.5f32, -1.0])),
        ("t.empty", V::Array(vec![])),
        ("t.nested", V::from(vec![vec![1u8, 2], vec![], vec![3]])),
        ("t.bools", V::from(vec![true, false])),
    ]
}

/// A file with metadata of every value type and a tensor of every element type.
fn sample(dir: &Path) -> (PathBuf, GgufWriter, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    let mut data = Vec::new();
    for (k, v) in every_value() {
        w.try_add_metadata(k, v).unwrap();
    }
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        let cols = ty.block_len().max(8);
        let shape = [3, cols];
        let bytes = if ty.is_quantized() {
            random_blocks(ty, 3 * cols / ty.block_len(), i as u64)
        } else {
            quant::quantize(ty, &values(3 * cols, i as u64))
        };
        w.try_add_tensor(format!("t{i}.{}", ty.name()), ty, &shape, bytes.clone())
            .unwrap();
        data.push(bytes);
    }
    let x = Tensor::from_vec(values(24, 99), &[2, 3, 4]).unwrap();
    w.try_add_f32_tensor("f32.3d", &x).unwrap();
    w.try_add_f32_tensor("scalar", &Tensor::from_vec(vec![7.5f32], &[]).unwrap())
        .unwrap();
    w.try_add_tensor("empty", GgmlType::F32, &[0, 4], Vec::new())
        .unwrap();
    let path = dir.join("sample.gguf");
    w.try_write(&path).unwrap();
    (path, w, data)
}

#[test]
fn every_value_and_tensor_type_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (path, w, data) = sample(dir.path());
    let f = GgufFile::try_open(&path).unwrap();
    assert_eq!((f.version(), f.alignment()), (3, 32));
    assert_eq!(f.data_offset() % 32, 0);
    let expected = every_value();
    assert_eq!(f.metadata().len(), expected.len());
    for ((k, v), (ek, ev)) in f.metadata().iter().zip(&expected) {
        assert_eq!((k.as_str(), v), (*ek, ev));
    }
    assert_eq!(f.get("t.u64"), Some(&MetadataValue::U64(u64::MAX)));
    assert_eq!(f.tensors().len(), GgmlType::ALL.len() + 3);
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        let name = format!("t{i}.{}", ty.name());
        let info = f.try_tensor_info(&name).unwrap();
        let cols = ty.block_len().max(8);
        assert_eq!((info.ty, info.dims.clone()), (ty, vec![cols, 3]), "{name}");
        assert_eq!((info.shape(), info.n_elements()), (vec![3, cols], 3 * cols));
        assert_eq!(info.offset % 32, 0);
        let bytes = f.tensor_bytes(info);
        assert_eq!(bytes, &data[i][..], "{name}");
        let t = f.try_tensor_f32(&name).unwrap();
        assert_eq!((t.dtype(), t.shape()), (DType::F32, &[3, cols][..]));
        let mut want = vec![0.0f32; 3 * cols];
        quant::dequantize(ty, bytes, &mut want);
        let got = t.to_vec::<f32>().unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}"
        );
    }
    let t = f.tensor_f32("f32.3d");
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.to_vec::<f32>().unwrap(), values(24, 99));
    assert_eq!(f.tensor_info("f32.3d").dims, vec![4, 3, 2]);
    let s = f.tensor_f32("scalar");
    assert_eq!((s.shape(), s.item()), (&[][..], 7.5));
    assert_eq!(f.tensor_f32("empty").shape(), &[0, 4]);
    // The writer's bytes are the file's; writing again gives the same bytes.
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes());
}

#[test]
fn a_large_tensor_dequantizes_in_chunks() {
    // More values than one chunk of the dequantizing iterator (2^18).
    let dir = tempfile::tempdir().unwrap();
    let x = values(300 * 1024, 5);
    let mut w = GgufWriter::new();
    let t = Tensor::from_vec(x.clone(), &[300, 1024]).unwrap();
    w.try_add_quantized_tensor("w", GgmlType::Q8_0, &t).unwrap();
    let path = dir.path().join("large.gguf");
    w.try_write(&path).unwrap();
    let f = GgufFile::open(&path);
    let got = f.tensor_f32("w").to_vec::<f32>().unwrap();
    let mut want = vec![0.0f32; x.len()];
    quant::dequantize(
        GgmlType::Q8_0,
        &quant::quantize(GgmlType::Q8_0, &x),
        &mut want,
    );
    assert!(got == want);
}

#[test]
fn alignment_is_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = GgufWriter::new();
    w.add_metadata(ALIGNMENT_KEY, MetadataValue::U32(256));
    w.add_tensor("a", GgmlType::F32, &[3], vec![0u8; 12]);
    w.add_tensor("b", GgmlType::F16, &[5], vec![1u8; 10]);
    let path = dir.path().join("a.gguf");
    w.write(&path);
    let f = GgufFile::open(&path);
    assert_eq!((f.alignment(), f.data_offset() % 256), (256, 0));
    assert_eq!(f.tensor_info("b").offset, 256);
    assert_eq!(f.tensor_bytes(f.tensor_info("b")), &[1u8; 10]);
}

#[test]
fn getters_convert_or_name_the_key_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _, _) = sample(dir.path());
    let f = GgufFile::open(&path);
    let p = path.display().to_string();
    assert_eq!(f.architecture(), "llama");
    assert_eq!(f.get_u64("t.u32"), 4_000_000_000);
    assert_eq!(f.get_usize("t.u8"), 200);
    assert_eq!(f.get_i64("t.i8"), -100);
    assert_eq!(f.get_f32("t.f32"), 1e-5);
    assert_eq!(f.get_f32("t.u16"), 60000.0);
    assert!(f.get_bool("t.bool"));
    assert_eq!(f.get_str("t.str"), "héllo ▁wörld");
    assert_eq!(f.get_str_array("t.tokens"), ["<s>", "a", "Ġb", ""]);
    assert_eq!(f.get_i32_array("t.token_type"), [1, -2, 3]);
    assert_eq!(f.get_f32_array("t.scores"), [0.5, -1.0]);
    assert_eq!(f.get_str_array("t.empty"), Vec::<&str>::new());
    assert_eq!(f.get_opt_u64("no.such.key"), None);
    assert_eq!(f.get_opt_str("t.str"), Some("héllo ▁wörld"));
    let err = |r: retrograd_engine::Result<()>| r.unwrap_err().to_string();
    let e = err(f.try_get_u64("t.i8").map(drop));
    assert!(
        e.contains(&p) && e.contains("`t.i8`") && e.contains("i8"),
        "{e}"
    );
    let e = err(f.try_get_str("t.u32").map(drop));
    assert!(
        e.contains("`t.u32` is u32") && e.contains("expected str"),
        "{e}"
    );
    let e = err(f.try_get_u64("missing.key").map(drop));
    assert!(
        e.contains("no metadata key `missing.key`") && e.contains(&p),
        "{e}"
    );
    let e = err(f.try_get_i32_array("t.tokens").map(drop));
    assert!(
        e.contains("array of str") && e.contains("4 elements"),
        "{e}"
    );
    let e = err(f.try_get_opt_bool("t.u8").map(drop));
    assert!(e.contains("`t.u8`"), "{e}");
    let e = err(f.try_tensor_info("blk.9.nope").map(drop));
    assert!(e.contains("blk.9.nope") && e.contains(&p), "{e}");
    let e = err(f.try_tensor_f32("nope").map(drop));
    assert!(e.contains("nope"), "{e}");
    // An info that is not this file's.
    let foreign = GgufTensorInfo {
        name: "x".into(),
        dims: vec![1 << 40],
        ty: GgmlType::F32,
        offset: 0,
    };
    let e = err(f.try_tensor_bytes(&foreign).map(drop));
    assert!(e.contains("tensor `x`"), "{e}");
}

/// Raw GGUF bytes, valid or not: `kvs` as (key, value type, value bytes),
/// tensors as (name, dims, type id, offset), then `data` from the next
/// multiple of 32.
struct Raw<'a> {
    version: u32,
    kvs: Vec<(&'a str, u32, Vec<u8>)>,
    tensors: Vec<(&'a str, Vec<u64>, u32, u64)>,
    data: Vec<u8>,
}

fn str_bytes(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

impl Raw<'_> {
    fn new() -> Self {
        Raw {
            version: 3,
            kvs: vec![("general.architecture", 8, str_bytes(b"llama"))],
            tensors: vec![("w", vec![32, 2], 8, 0)],
            data: vec![0; 68],
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, ty, v) in &self.kvs {
            out.extend_from_slice(&str_bytes(k.as_bytes()));
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(v);
        }
        for (name, dims, ty, offset) in &self.tensors {
            out.extend_from_slice(&str_bytes(name.as_bytes()));
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        out.resize(out.len().next_multiple_of(32), 0);
        out.extend_from_slice(&self.data);
        out
    }

    /// The error opening these bytes gives, checked to name the file.
    fn error(&self, dir: &Path) -> String {
        open_bytes(dir, &self.bytes()).unwrap_err()
    }
}

/// `bytes` opened as a file of `dir` (parsed from memory: the truncation
/// and corruption loops open thousands; one file opened from disk checks
/// that path agrees).
fn open_bytes(dir: &Path, bytes: &[u8]) -> std::result::Result<GgufFile, String> {
    let path = dir.join("raw.gguf");
    GgufFile::parse_bytes(&path, bytes).map_err(|e| {
        let e = e.to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
        e
    })
}

#[test]
fn the_raw_builder_makes_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = open_bytes(dir.path(), &Raw::new().bytes()).unwrap();
    let path = dir.path().join("raw.gguf");
    std::fs::write(&path, Raw::new().bytes()).unwrap();
    let g = GgufFile::open(&path);
    assert_eq!((g.tensors(), g.metadata()), (f.tensors(), f.metadata()));
    std::fs::write(&path, b"").unwrap();
    let e = GgufFile::try_open(&path).unwrap_err().to_string();
    assert!(e.contains("0 bytes are too short"), "{e}");
    assert_eq!(f.tensor_info("w").shape(), vec![2, 32]);
    let mut r = Raw::new();
    r.version = 2;
    assert_eq!(open_bytes(dir.path(), &r.bytes()).unwrap().version(), 2);
}

#[test]
fn each_malformed_header_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let check = |e: String, parts: &[&str]| {
        for p in parts {
            assert!(e.contains(p), "`{p}` not in: {e}");
        }
    };
    let with = |f: &dyn Fn(&mut Raw)| {
        let mut r = Raw::new();
        f(&mut r);
        r.error(d)
    };

    // Not GGUF, too short, versions.
    check(
        open_bytes(d, b"GGML\x03\0\0\0").unwrap_err(),
        &["not a GGUF file"],
    );
    check(open_bytes(d, b"GG").unwrap_err(), &["too short"]);
    check(open_bytes(d, b"").unwrap_err(), &["too short"]);
    check(with(&|r| r.version = 1), &["version 1", "not supported"]);
    check(with(&|r| r.version = 4), &["version 4", "not supported"]);
    check(with(&|r| r.version = 3 << 24), &["big-endian"]);
    check(
        open_bytes(d, b"GGUF\x03\0\0\0\0\0").unwrap_err(),
        &["header", "truncated"],
    );
    // Counts the file cannot hold.
    let mut b = Raw::new().bytes();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    check(
        open_bytes(d, &b).unwrap_err(),
        &["metadata entries", "more than"],
    );
    let mut b = Raw::new().bytes();
    b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    check(open_bytes(d, &b).unwrap_err(), &["tensors", "more than"]);
    // Strings and arrays past the end, unknown value types.
    check(
        with(&|r| r.kvs[0].2 = (1u64 << 50).to_le_bytes().to_vec()),
        &["`general.architecture`", "runs past the end"],
    );
    check(
        with(&|r| r.kvs.push(("bad.type", 13, vec![0; 8]))),
        &["`bad.type`", "unknown value type 13"],
    );
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 40).to_le_bytes());
    check(
        with(&|r| r.kvs.push(("big.array", 9, arr.clone()))),
        &["`big.array`", "array of 1099511627776 u32"],
    );
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&1u64.to_le_bytes());
    check(
        with(&|r| r.kvs.push(("odd.array", 9, arr.clone()))),
        &["`odd.array`", "unknown array element type 99"],
    );
    let mut deep = Vec::new();
    for _ in 0..20 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&[0; 64]);
    check(
        with(&|r| r.kvs.push(("deep", 9, deep.clone()))),
        &["`deep`", "nested"],
    );
    check(
        with(&|r| r.kvs.push(("not.utf8", 8, str_bytes(b"\xff\xfe")))),
        &["`not.utf8`", "not UTF-8"],
    );
    // Keys.
    check(
        with(&|r| r.kvs.push(("general.architecture", 4, vec![0; 4]))),
        &["`general.architecture` appears twice"],
    );
    check(with(&|r| r.kvs.push(("", 4, vec![0; 4]))), &["empty key"]);
    check(
        with(&|r| r.kvs.push((ALIGNMENT_KEY, 4, 48u32.to_le_bytes().to_vec()))),
        &["general.alignment", "48", "power of two"],
    );
    check(
        with(&|r| {
            r.kvs
                .push((ALIGNMENT_KEY, 10, 64u64.to_le_bytes().to_vec()))
        }),
        &["general.alignment", "u64", "not u32"],
    );
    // Tensors.
    check(
        with(&|r| r.tensors[0].2 = 16),
        &["tensor `w`", "ggml type 16 (IQ2_XXS)", "not supported"],
    );
    check(
        with(&|r| r.tensors[0].2 = 500),
        &["tensor `w`", "unknown ggml type 500"],
    );
    check(
        with(&|r| r.tensors.push(("w", vec![32], 0, 128))),
        &["tensor `w` appears twice"],
    );
    check(
        with(&|r| r.tensors[0].3 = 16),
        &["tensor `w`", "offset 16", "alignment 32"],
    );
    check(
        with(&|r| r.tensors[0].1 = vec![32, 3]),
        &["tensor `w`", "run past the end"],
    );
    check(
        with(&|r| {
            r.tensors.push(("v", vec![32], 0, 64));
            r.data.resize(64 + 128, 0);
        }),
        &["tensors `w` and `v` overlap"],
    );
    check(
        with(&|r| r.tensors[0].1 = vec![16, 4]),
        &["tensor `w`", "[16, 4]", "Q8_0 blocks of 32"],
    );
    check(
        with(&|r| r.tensors[0].1 = vec![32, 1, 1, 1, 2]),
        &["tensor `w`", "5 dims"],
    );
    check(
        with(&|r| r.tensors[0].1 = vec![1 << 32, 1 << 32, 1 << 32]),
        &["tensor `w`", "more elements than fit"],
    );
    check(
        with(&|r| r.data.truncate(40)),
        &["tensor `w`", "run past the end"],
    );
}

#[test]
fn truncated_and_corrupted_files_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.add_metadata(k, v);
    }
    w.add_tensor(
        "q",
        GgmlType::Q4_1,
        &[2, 32],
        random_blocks(GgmlType::Q4_1, 2, 1),
    );
    w.add_tensor(
        "k",
        GgmlType::Q6K,
        &[256],
        random_blocks(GgmlType::Q6K, 1, 2),
    );
    w.add_tensor("f", GgmlType::F16, &[3], vec![0x3c; 6]);
    let bytes = w.to_bytes();
    let exercise = |f: &GgufFile| {
        for t in f.tensors() {
            let _ = f.try_tensor_f32(&t.name).map(|t| t.numel());
        }
        for (k, _) in f.metadata() {
            let _ = f.try_get_str_array(k);
            let _ = f.try_get_f32(k);
        }
    };
    let mut opened = 0;
    for len in 0..bytes.len() {
        if let Ok(f) = open_bytes(dir.path(), &bytes[..len]) {
            exercise(&f);
            opened += 1;
        }
    }
    // Only cuts inside the last tensor's padding leave a readable file.
    assert!(opened < 32, "{opened}");
    let mut flipped = bytes.clone();
    for at in 0..bytes.len() {
        for mask in [0xFFu8, 0x01, 0x80, 0x10] {
            flipped[at] ^= mask;
            if let Ok(f) = open_bytes(dir.path(), &flipped) {
                exercise(&f);
            }
            flipped[at] ^= mask;
        }
    }
}

#[test]
fn the_writer_checks_what_is_added() {
    let mut w = GgufWriter::new();
    let e = |r: retrograd_engine::Result<()>| r.unwrap_err().to_string();
    w.add_metadata("a", MetadataValue::U8(1));
    assert!(e(w.try_add_metadata("a", MetadataValue::U8(2))).contains("`a` is already set"));
    assert!(e(w.try_add_metadata("", MetadataValue::U8(2))).contains("empty"));
    let mixed = MetadataValue::Array(vec![MetadataValue::U8(1), MetadataValue::I8(1)]);
    let m = e(w.try_add_metadata("mixed", mixed));
    assert!(
        m.contains("`mixed`") && m.contains("element 1 is i8"),
        "{m}"
    );
    let m = e(w.try_add_metadata(ALIGNMENT_KEY, MetadataValue::U64(32)));
    assert!(m.contains("power of two"), "{m}");
    w.add_tensor("t", GgmlType::Q4_0, &[1, 32], vec![0u8; 18]);
    let m = e(w.try_add_tensor("t", GgmlType::F32, &[1], vec![0u8; 4]));
    assert!(m.contains("tensor `t`") && m.contains("already"), "{m}");
    let m = e(w.try_add_tensor("u", GgmlType::Q4_0, &[2, 32], vec![0u8; 18]));
    assert!(
        m.contains("tensor `u`") && m.contains("36 bytes, got 18"),
        "{m}"
    );
    let m = e(w.try_add_tensor("v", GgmlType::Q4K, &[2, 128], vec![0u8; 144]));
    assert!(
        m.contains("tensor `v`") && m.contains("Q4_K blocks of 256"),
        "{m}"
    );
    let m = e(w.try_add_tensor("x".repeat(64), GgmlType::F32, &[1], vec![0u8; 4]));
    assert!(m.contains("63 bytes"), "{m}");
    let m = e(w.try_add_tensor("w", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4]));
    assert!(m.contains("4 dims"), "{m}");
    let ids = Tensor::from_vec(vec![1i64, 2], &[2]).unwrap();
    let m = e(w.try_add_f32_tensor("ids", &ids));
    assert!(m.contains("`ids`") && m.contains("not a float"), "{m}");
    let odd = Tensor::from_vec(vec![0.0f32; 40], &[40]).unwrap();
    let m = e(w.try_add_quantized_tensor("odd", GgmlType::Q8_0, &odd));
    assert!(m.contains("`odd`") && m.contains("Q8_0"), "{m}");
    let k = Tensor::from_vec(values(512, 4), &[2, 256]).unwrap();
    w.add_quantized_tensor("k", GgmlType::Q6K, &k);
    let m = e(w.try_add_quantized_tensor("k", GgmlType::Q6K, &k));
    assert!(m.contains("tensor `k`") && m.contains("already"), "{m}");
}

#[test]
fn writing_replaces_a_file_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, b"old").unwrap();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama");
    let x = Tensor::from_vec(values(64, 3), &[2, 32])
        .unwrap()
        .to_dtype(DType::F64);
    w.add_quantized_tensor("w", GgmlType::BF16, &x);
    w.write(&path);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["m.gguf"]);
    let f = GgufFile::open(&path);
    assert_eq!(f.tensor_info("w").ty, GgmlType::BF16);
    let e = w
        .try_write(dir.path().join("no/such/dir/m.gguf"))
        .unwrap_err();
    assert!(e.to_string().contains("no/such/dir/m.gguf"), "{e}");
}
