"""Hugging Face transformer blocks in NumPy against dlcc's examples.

Takes the name of an example (gpt2_block, llama_block, bert_layer), the
dlcc binary and a scratch directory; writes random weights under HF's
state_dict names (safetensors written here, by NumPy) and a random input,
runs `dlcc run` on the ref and emu backends and compares each result with
the HF module's math computed here in float64 (no torch: the formulas of
transformers' GPT2Block, LlamaDecoderLayer and BertLayer, written out).
Exit 0 when both agree within 1e-5, 1 when not, 77 without NumPy.
"""
import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def layernorm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


def heads(x, h):  # [N, S, h*d] -> [N, h, S, d]
    n, s, e = x.shape
    return x.reshape(n, s, h, e // h).transpose(0, 2, 1, 3)


def merge(x):  # [N, h, S, d] -> [N, S, h*d]
    n, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(n, s, h * d)


def causal_attention(q, k, v):
    s = q.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    scores = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, scores)
    return softmax(scores) @ v


# transformers' GPT2Block: Conv1D weights are [in, out]; gelu_new.
def gpt2_block(rng, N=2, S=8, D=64, H=4):
    def p(*shape):
        return rng.standard_normal(shape) * 0.2
    w = {"ln_1.weight": 1 + p(D), "ln_1.bias": p(D), "attn.c_attn.weight": p(D, 3 * D),
         "attn.c_attn.bias": p(3 * D), "attn.c_proj.weight": p(D, D), "attn.c_proj.bias": p(D),
         "ln_2.weight": 1 + p(D), "ln_2.bias": p(D), "mlp.c_fc.weight": p(D, 4 * D),
         "mlp.c_fc.bias": p(4 * D), "mlp.c_proj.weight": p(4 * D, D), "mlp.c_proj.bias": p(D)}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    x = rng.standard_normal((N, S, D)).astype(np.float32)
    f = {k: v.astype(np.float64) for k, v in w.items()}
    h = layernorm(x.astype(np.float64), f["ln_1.weight"], f["ln_1.bias"], 1e-5)
    qkv = h @ f["attn.c_attn.weight"] + f["attn.c_attn.bias"]
    q, k, v = (heads(t, H) for t in np.split(qkv, 3, axis=-1))
    a = merge(causal_attention(q, k, v)) @ f["attn.c_proj.weight"] + f["attn.c_proj.bias"]
    x1 = x + a
    h = layernorm(x1, f["ln_2.weight"], f["ln_2.bias"], 1e-5) @ f["mlp.c_fc.weight"] + f["mlp.c_fc.bias"]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    y = x1 + h @ f["mlp.c_proj.weight"] + f["mlp.c_proj.bias"]
    return w, {"x": x}, y


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


# transformers' LlamaDecoderLayer: RMSNorm, rotary embedding (rotate_half,
# theta 10000), repeat_kv for grouped-query attention, SwiGLU.
def llama_block(rng, N=2, S=8, D=64, H=4, KV=2, F=128):
    hd = D // H
    def p(*shape):
        return rng.standard_normal(shape) * 0.2
    w = {"input_layernorm.weight": 1 + p(D), "self_attn.q_proj.weight": p(D, D),
         "self_attn.k_proj.weight": p(KV * hd, D), "self_attn.v_proj.weight": p(KV * hd, D),
         "self_attn.o_proj.weight": p(D, D), "post_attention_layernorm.weight": 1 + p(D),
         "mlp.gate_proj.weight": p(F, D), "mlp.up_proj.weight": p(F, D), "mlp.down_proj.weight": p(D, F)}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    x = rng.standard_normal((N, S, D)).astype(np.float32)
    f = {k: v.astype(np.float64) for k, v in w.items()}
    h = rms_norm(x.astype(np.float64), f["input_layernorm.weight"], 1e-6)
    q = heads(h @ f["self_attn.q_proj.weight"].T, H)
    k = heads(h @ f["self_attn.k_proj.weight"].T, KV)
    v = heads(h @ f["self_attn.v_proj.weight"].T, KV)
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)
    freqs = np.arange(S)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
    x1 = x + merge(causal_attention(q, k, v)) @ f["self_attn.o_proj.weight"].T
    h = rms_norm(x1, f["post_attention_layernorm.weight"], 1e-6)
    g = h @ f["mlp.gate_proj.weight"].T
    g = g / (1 + np.exp(-g)) * (h @ f["mlp.up_proj.weight"].T)
    y = x1 + g @ f["mlp.down_proj.weight"].T
    return w, {"x": x}, y


# transformers' BertLayer: post-norm (eps 1e-12), erf gelu, the additive
# mask BertModel makes of attention_mask: (1 - m) * finfo(f32).min.
def bert_layer(rng, N=2, S=8, D=64, H=4, F=128):
    def p(*shape):
        return rng.standard_normal(shape) * 0.2
    w = {}
    for name in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
        w[name + ".weight"], w[name + ".bias"] = p(D, D), p(D)
    w.update({"attention.output.LayerNorm.weight": 1 + p(D), "attention.output.LayerNorm.bias": p(D),
              "intermediate.dense.weight": p(F, D), "intermediate.dense.bias": p(F),
              "output.dense.weight": p(D, F), "output.dense.bias": p(D),
              "output.LayerNorm.weight": 1 + p(D), "output.LayerNorm.bias": p(D)})
    w = {k: v.astype(np.float32) for k, v in w.items()}
    x = rng.standard_normal((N, S, D)).astype(np.float32)
    keep = np.ones((N, S), np.float32)
    keep[0, 5:] = 0  # padding at the end of the first sequence
    keep[1, 2] = 0
    mask = ((1 - keep) * np.finfo(np.float32).min).reshape(N, 1, 1, S).astype(np.float32)
    f = {k: v.astype(np.float64) for k, v in w.items()}
    lin = lambda t, n: t @ f[n + ".weight"].T + f[n + ".bias"]
    x64 = x.astype(np.float64)
    q, k, v = (heads(lin(x64, "attention.self." + n), H) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H) + mask.astype(np.float64)
    a = lin(merge(softmax(scores) @ v), "attention.output.dense") + x64
    a = layernorm(a, f["attention.output.LayerNorm.weight"], f["attention.output.LayerNorm.bias"], 1e-12)
    h = lin(a, "intermediate.dense")
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))
    y = layernorm(lin(h, "output.dense") + a, f["output.LayerNorm.weight"], f["output.LayerNorm.bias"], 1e-12)
    return w, {"x": x, "mask": mask}, y


MODELS = {"gpt2_block": gpt2_block, "llama_block": llama_block, "bert_layer": bert_layer}


def main():
    name, dlcc, work = sys.argv[1], sys.argv[2], sys.argv[3]
    src = os.environ.get("top_srcdir", ".")
    rng = np.random.default_rng(2026)
    weights, inputs, want = MODELS[name](rng)
    os.makedirs(work, exist_ok=True)
    wpath = os.path.join(work, name + ".safetensors")
    write_safetensors(wpath, weights)
    args = [dlcc, "run", os.path.join(src, "examples", name + ".dl"), "--weights", wpath]
    for k, v in inputs.items():
        np.save(os.path.join(work, k + ".npy"), v)
        args += ["--input", "%s=%s" % (k, os.path.join(work, k + ".npy"))]
    ok = True
    for backend in ("ref", "emu"):
        out = os.path.join(work, backend)
        r = subprocess.run(args + ["--backend=" + backend, "--output-dir", out], capture_output=True, text=True)
        if r.returncode != 0:
            print("%s %s: dlcc failed:\n%s" % (name, backend, r.stderr))
            ok = False
            continue
        got = np.load(os.path.join(out, "y.npy")).astype(np.float64)
        err = np.abs(got - want).max()
        close = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
        print("%s %s: max abs error %.3g over %s %s" % (name, backend, err, want.shape, "ok" if close else "FAIL"))
        ok &= close
    sys.exit(0 if ok else 1)


main()
