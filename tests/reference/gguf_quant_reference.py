"""Reference data for tests/gguf_quant.rs from gguf-py (the `gguf` package of
llama.cpp), whose numpy quantizers are bit-exact ports of ggml's reference C,
and from ggml's C reference quantizers themselves (`quantize_row_q4_K_ref`
...), called through ctypes in the libggml-base that llama-cpp-python ships
(or the library GGML_BASE_LIB names). ggml's base library is built without
fused multiply-add, so its results do not depend on the CPU.

    pip install gguf numpy llama-cpp-python
    python3 tests/reference/gguf_quant_reference.py [SMOLLM2_GGUF]

Writes, with gguf's own GGUFWriter, into tests/reference/gguf_quant/:

- simple_quants.gguf: `input`, f32 [8, 128] of seeded rows (normal, offset
  uniform, all equal, zeros, large magnitudes, negative only, tiny values
  whose f16 scales are subnormal, blocks of different scales with rounding
  ties); for each of F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, `T.quant`,
  `gguf.quants.quantize(input, T)` stored as a tensor of type T (for the
  block formats checked equal to ggml's C quantizer's bytes), and
  `T.dequant`, f32,
  `gguf.quants.dequantize` of those bytes.
- kquants.gguf (alignment 64): for Q4_K, Q5_K and Q6_K (gguf-py dequantizes
  K-quants but has no quantizer for them) `T.quant`, seeded random blocks
  with sensible f16 scales, [4, 512], and `T.dequant`, gguf's f32 of them
  (checked equal to ggml's C); `input`, f32 [9, 512] of seeded rows like
  simple_quants' (and an outlier row), and `T.quantized`, ggml's C
  reference quantizer's bytes of `input`; and a metadata entry of every
  GGUF value type (`ref.*`, values below).
- smollm2_q4_1.gguf, only when SmolLM2-135M-Instruct.Q4_1.gguf is present
  (scripts/fetch_smollm2.sh; default .cache/models/): for
  `token_embd.weight` (Q8_0) and `blk.0.attn_q.weight` (Q4_1), gguf's
  dequantized first 4 rows as f32 `NAME.rows` and, as metadata, `NAME.type`
  (the type name), `NAME.shape` (row-major, u64), `NAME.crc32` (zlib's CRC-32
  of all the f32 values' little-endian bytes) and `NAME.sum` (f64 sum).
"""

import ctypes
import os
import sys
import zlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/reference/gguf_quant")
MODEL = (
    sys.argv[1]
    if len(sys.argv) > 1
    else os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
)

SIMPLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q4_K, T.Q5_K, T.Q6_K]


def ggml_base() -> ctypes.CDLL:
    path = os.environ.get("GGML_BASE_LIB")
    if not path:
        import llama_cpp

        path = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")
    return ctypes.CDLL(path)


def c_name(t: T) -> str:
    return t.name[0].lower() + t.name[1:]  # Q4_K -> q4_K, as ggml's functions


def c_quantize(lib: ctypes.CDLL, t: T, x: np.ndarray) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[t]
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(x.size // block_size * type_size, dtype=np.uint8)
    f = getattr(lib, f"quantize_row_{c_name(t)}_ref")
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    f(x.ctypes.data, out.ctypes.data, x.size)
    return out.reshape(x.shape[0], -1)


def c_dequantize(lib: ctypes.CDLL, t: T, b: np.ndarray) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[t]
    b = np.ascontiguousarray(b, dtype=np.uint8)
    out = np.zeros(b.size // type_size * block_size, dtype=np.float32)
    f = getattr(lib, f"dequantize_row_{c_name(t)}")
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    f(b.ctypes.data, out.ctypes.data, out.size)
    return out.reshape(b.shape[0], -1)


def inputs(cols: int = 128) -> np.ndarray:
    rng = np.random.default_rng(20240611)
    rows = [
        rng.standard_normal(cols),
        rng.uniform(-1.0, 1.0, cols) * 3.0 + 0.5,
        np.full(cols, 0.7),
        np.zeros(cols),
        rng.standard_normal(cols) * 5000.0,
        -np.abs(rng.standard_normal(cols)) - 1.0,
        rng.standard_normal(cols) * 1e-6,
    ]
    # Blocks of 32 at scales 1e-2 .. 1e1; the first block holds values whose
    # quants fall on rounding ties (d = 1 for Q8_0: halves round away from 0)
    # and equal largest magnitudes of both signs (the first one wins).
    mixed = np.concatenate([rng.standard_normal(32) * 10.0 ** (k % 4 - 2) for k in range(cols // 32)])
    mixed[:8] = [127.0, -127.0, 0.5, -0.5, 2.5, -3.5, 126.5, 0.0]
    rows.append(mixed)
    return np.stack(rows).astype(np.float32)


def simple_quants(lib: ctypes.CDLL) -> None:
    x = inputs()
    w = gguf.GGUFWriter(os.path.join(OUT, "simple_quants.gguf"), "reference")
    w.add_tensor("input", x)
    for t in SIMPLE:
        q = gguf.quants.quantize(x, t)
        if t == T.F16:
            w.add_tensor(f"{t.name}.quant", q)
            q = q.view(np.uint8)
        else:
            w.add_tensor(f"{t.name}.quant", q, raw_dtype=t)
            if t != T.BF16:
                assert np.array_equal(q, c_quantize(lib, t, x)), t.name
        d = gguf.quants.dequantize(q, t).astype(np.float32)
        assert d.shape == x.shape, (t.name, d.shape)
        w.add_tensor(f"{t.name}.dequant", d)
    write(w)


def random_blocks(t: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[t]
    b = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    scale = lambda lo, hi: rng.uniform(lo, hi, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if t in (T.Q4_K, T.Q5_K):  # d, dmin at the start
        b[:, 0:2] = scale(1e-3, 2e-2)
        b[:, 2:4] = scale(1e-3, 1e-2)
    elif t == T.Q6_K:  # d at the end
        b[:, -2:] = scale(1e-4, 5e-3)
    return b


def kquants(lib: ctypes.CDLL) -> None:
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(os.path.join(OUT, "kquants.gguf"), "reference")
    w.add_custom_alignment(64)
    # One entry of every value type (tests/gguf_quant.rs checks these).
    w.add_uint8("ref.u8", 200)
    w.add_int8("ref.i8", -100)
    w.add_uint16("ref.u16", 60000)
    w.add_int16("ref.i16", -30000)
    w.add_uint32("ref.u32", 4000000000)
    w.add_int32("ref.i32", -2000000000)
    w.add_float32("ref.f32", 0.1)
    w.add_bool("ref.bool", True)
    w.add_string("ref.str", "héllo ▁wörld")
    w.add_uint64("ref.u64", 2**64 - 1)
    w.add_int64("ref.i64", -(2**63))
    w.add_float64("ref.f64", -2.5e300)
    w.add_array("ref.strs", ["<s>", "Ġthe", ""])
    w.add_key_value("ref.i32s", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("ref.f32s", [0.5, -1.0], V.ARRAY, sub_type=V.FLOAT32)
    rows, cols = 4, 512
    for t in KQUANTS:
        block_size, type_size = gguf.GGML_QUANT_SIZES[t]
        b = random_blocks(t, rows * cols // block_size, rng).reshape(rows, -1)
        w.add_tensor(f"{t.name}.quant", b, raw_dtype=t)
        d = gguf.quants.dequantize(b, t).astype(np.float32)
        assert d.shape == (rows, cols), (t.name, d.shape)
        assert np.array_equal(d.view(np.uint32), c_dequantize(lib, t, b).view(np.uint32)), t.name
        w.add_tensor(f"{t.name}.dequant", d)
    x = inputs(512)
    spike = rng.standard_normal(512).astype(np.float32) * 0.1
    spike[300] = 40.0
    x = np.concatenate([x, spike[None]]).astype(np.float32)
    w.add_tensor("input", x)
    for t in KQUANTS:
        w.add_tensor(f"{t.name}.quantized", c_quantize(lib, t, x), raw_dtype=t)
    write(w)


def smollm2() -> None:
    if not os.path.exists(MODEL):
        print(f"skip smollm2_q4_1.gguf: no {MODEL}; run scripts/fetch_smollm2.sh")
        return
    r = gguf.GGUFReader(MODEL)
    w = gguf.GGUFWriter(os.path.join(OUT, "smollm2_q4_1.gguf"), "reference")
    for name in ["token_embd.weight", "blk.0.attn_q.weight"]:
        t = next(t for t in r.tensors if t.name == name)
        d = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(n) for n in reversed(t.shape)]
        d = d.reshape(shape)
        w.add_string(f"{name}.type", t.tensor_type.name)
        w.add_key_value(f"{name}.shape", shape, V.ARRAY, sub_type=V.UINT64)
        w.add_uint32(f"{name}.crc32", zlib.crc32(d.astype("<f4").tobytes()))
        w.add_float64(f"{name}.sum", float(d.astype(np.float64).sum()))
        w.add_tensor(f"{name}.rows", np.ascontiguousarray(d[:4]))
    write(w)


def write(w: "gguf.GGUFWriter") -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    lib = ggml_base()
    simple_quants(lib)
    kquants(lib)
    smollm2()
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))
