"""A small random Llama for the SmolLM2 work, made by transformers, its logits,
and the same weights written as an f32 GGUF the way llama.cpp's
convert_hf_to_gguf.py writes a Llama.

    python3 tests/reference/llama_tiny_reference.py           # writes the fixtures
    python3 tests/reference/llama_tiny_reference.py --check   # reloads both files
                                                              # (the GGUF through
                                                              # transformers' GGUF
                                                              # loader) and compares

Made with transformers 5.25.0, torch 2.15.0+cu132 (run on CPU), safetensors 0.8.0,
gguf 0.19.0, numpy 2.4.6 (Python 3.11); seed 0, f32, evaluation mode.

Writes
  tests/reference/llama_tiny/          config.json, model.safetensors as
                                       LlamaForCausalLM.save_pretrained writes
                                       them (HF names, q/k rows in HF order,
                                       [out, in] weights, untied lm_head)
  tests/reference/llama_tiny_logits.safetensors
                                       ids_0 [7] i64, logits_0 [7, 96] f32,
                                       ids_1 [12] i64, logits_1 [12, 96] f32;
                                       package versions in its metadata
  tests/reference/llama_tiny.gguf      GGUF v3, general.architecture "llama",
                                       llama.* keys, every tensor F32; names
                                       token_embd / blk.N.attn_{norm,q,k,v,output}
                                       / blk.N.ffn_{norm,gate,up,down} /
                                       output_norm / output (.weight); attn_q
                                       and attn_k rows permuted as
                                       convert_hf_to_gguf.py LlamaModel.permute
                                       does (n_head for Q, n_head_kv for K).
                                       No tokenizer beyond
                                       tokenizer.ggml.model = "none" (llama.cpp
                                       then makes llama.vocab_size dummy tokens).

Model: vocab 96, hidden 64, 2 layers, 4 heads (head_dim 16), 2 kv heads,
intermediate 128, rope_theta 10000, rms_norm_eps 1e-5, untied embeddings,
max_position_embeddings 128. The RMSNorm weights are randomised (1 + 0.1 N(0,1))
so a loader that skips them fails.
"""

import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/reference")
FOLDER = os.path.join(OUT, "llama_tiny")
LOGITS = os.path.join(OUT, "llama_tiny_logits.safetensors")
GGUF_PATH = os.path.join(OUT, "llama_tiny.gguf")

IDS = [
    torch.tensor([1, 17, 42, 5, 95, 0, 63], dtype=torch.long),
    torch.tensor([90, 3, 3, 77, 12, 8, 54, 31, 2, 66, 19, 44], dtype=torch.long),
]


def config():
    return LlamaConfig(
        vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, rope_theta=10000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=128,
        hidden_act="silu", attention_bias=False, mlp_bias=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=None,
    )


def make_model():
    torch.manual_seed(0)
    model = LlamaForCausalLM(config()).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def logits_of(model):
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(IDS):
            out[f"ids_{i}"] = ids.clone()
            out[f"logits_{i}"] = model(ids[None]).logits[0].float().contiguous()
    return out


def permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py, LlamaModel.permute: HF's rotate-half row order back
    # to the interleaved (pairs) order llama.cpp's rope expects.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def write_gguf(model):
    cfg = model.config
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = cfg.hidden_size // n_head
    w = gguf.GGUFWriter(GGUF_PATH, "llama")
    w.add_name("llama tiny random (retrograd test fixture)")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # No tokenizer; "none" (with llama.vocab_size) is what llama.cpp needs to
    # load a vocabulary-less model, so llama.cpp can run this file too.
    w.add_tokenizer_model("none")

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }
    for i in range(cfg.num_hidden_layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    assert set(names) == set(sd), sorted(set(sd) ^ set(names))
    # The order convert_hf_to_gguf.py writes: embeddings, then each block, then the head.
    order = ["model.embed_tokens.weight"]
    for i in range(cfg.num_hidden_layers):
        order += [f"model.layers.{i}.{hf}.weight" for hf in per_layer]
    order += ["model.norm.weight", "lm_head.weight"]
    for hf in order:
        data = sd[hf]
        if hf.endswith("q_proj.weight"):
            data = permute(data, n_head, n_head)
        elif hf.endswith("k_proj.weight"):
            data = permute(data, n_head, n_kv)
        w.add_tensor(names[hf], np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def versions():
    """Package versions, stored as the logits file's safetensors metadata."""
    import platform
    from importlib.metadata import version
    out = {"python": platform.python_version()}
    for pkg in ("transformers", "torch", "gguf", "safetensors", "numpy"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = "none"
    return out


def make():
    model = make_model()
    model.save_pretrained(FOLDER, safe_serialization=True)
    gen = os.path.join(FOLDER, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    save_file(logits_of(model), LOGITS, metadata=versions())
    write_gguf(model)
    print("llama_tiny:", sum(p.numel() for p in model.parameters()), "parameters")
    check()


def check():
    ref = load_file(LOGITS)
    worst = {}
    hf = LlamaForCausalLM.from_pretrained(FOLDER, dtype=torch.float32).eval()
    # transformers' GGUF loader un-permutes attn_q / attn_k, so equal logits
    # mean the permutation and the key names above are what it expects.
    from_gguf = LlamaForCausalLM.from_pretrained(
        OUT, gguf_file=os.path.basename(GGUF_PATH), dtype=torch.float32).eval()
    for label, model in (("safetensors folder", hf), ("GGUF", from_gguf)):
        got = logits_of(model)
        worst[label] = max(float((got[f"logits_{i}"] - ref[f"logits_{i}"]).abs().max())
                           for i in range(len(IDS)))
        print(f"transformers loads the {label}: worst |logit difference| {worst[label]:.3e}")
    reader = gguf.GGUFReader(GGUF_PATH)
    q0 = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
    print("GGUF blk.0.attn_q.weight", q0.tensor_type.name, list(q0.shape),
          "| keys:", [k for k in reader.fields if not k.startswith("GGUF.")])
    assert worst["safetensors folder"] <= 1e-5 and worst["GGUF"] <= 1e-5, worst
    try:
        import llama_cpp
    except ImportError:
        print("llama_cpp not installed: the llama.cpp check is skipped")
        return
    llm = llama_cpp.Llama(GGUF_PATH, n_ctx=128, n_threads=1, logits_all=True,
                          seed=0, verbose=False, type_k=0, type_v=0)
    diff = 0.0
    for i, ids in enumerate(IDS):
        llm.reset()
        llm.eval(ids.tolist())
        got = np.asarray(llm.scores[:len(ids)], dtype=np.float32)
        diff = max(diff, float(np.abs(got - ref[f"logits_{i}"].numpy()).max()))
    print(f"llama.cpp {llama_cpp.__version__} runs the GGUF (f32 KV cache): "
          f"worst |logit difference| {diff:.3e}")
    assert diff <= 1e-3, diff


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        check()
    else:
        make()
