#!/usr/bin/env python3
"""Cross-checks `dlcc run` against NumPy: takes the dlcc binary and the
directory of the .dl models, writes random weights (safetensors, written
here by hand) and inputs (.npy), runs dlcc, recomputes each model in NumPy
(float64, following PyTorch's definitions) from the same files, and prints
the largest error per output.  Exits 1 on any mismatch, 0 when all agree.

Only NumPy and the standard library, so it does not share a line of code
with dlcc: not the safetensors reader, not the interpreter."""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

TOL = 1e-4  # relative to the largest magnitude of the reference output
EPS = 1e-5  # PyTorch's default for BatchNorm2d and LayerNorm


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 array, written in that order."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# --- the reference, in float64 -----------------------------------------

def conv2d(x, w, stride=1, pad=0):
    n, c, h, wd = x.shape
    co, ci, kh, kw = w.shape
    assert ci == c
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


def batchnorm(x, p, name):
    shape = (1, -1, 1, 1)
    mean = p[name + ".running_mean"].reshape(shape)
    var = p[name + ".running_var"].reshape(shape)
    return (x - mean) / np.sqrt(var + EPS) * p[name + ".weight"].reshape(shape) + p[name + ".bias"].reshape(shape)


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def layernorm(x, p, name):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * p[name + ".weight"] + p[name + ".bias"]


def linear(x, p, name):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def lstm(x, p, name, layers, hidden):
    n, t_len, _ = x.shape
    seq, hs, cs = x, [], []
    for l in range(layers):
        w_ih, w_hh = p["%s.weight_ih_l%d" % (name, l)], p["%s.weight_hh_l%d" % (name, l)]
        b = p["%s.bias_ih_l%d" % (name, l)] + p["%s.bias_hh_l%d" % (name, l)]
        h = np.zeros((n, hidden))
        c = np.zeros((n, hidden))
        ys = []
        for t in range(t_len):
            gates = seq[:, t] @ w_ih.T + h @ w_hh.T + b
            i, f, g, o = np.split(gates, 4, axis=1)  # PyTorch's order
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            ys.append(h)
        seq = np.stack(ys, axis=1)
        hs.append(h)
        cs.append(c)
    return seq, np.stack(hs), np.stack(cs)


def self_attention(x, p, name, heads):
    n, s, e = x.shape
    hd = e // heads
    qkv = x @ p[name + ".in_proj_weight"].T + p[name + ".in_proj_bias"]
    q, k, v = (t.reshape(n, s, heads, hd).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
    att = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd))
    o = (att @ v).transpose(0, 2, 1, 3).reshape(n, s, e)
    return linear(o, p, name + ".out_proj")


# --- the models: weights, inputs, reference ------------------------------

def uniform(rng, shape, b):
    return rng.uniform(-b, b, size=shape).astype(np.float32)


def bn_params(rng, name, c):
    return {
        name + ".weight": rng.uniform(0.5, 1.5, c).astype(np.float32),
        name + ".bias": rng.normal(0, 0.2, c).astype(np.float32),
        name + ".running_mean": rng.normal(0, 0.2, c).astype(np.float32),
        name + ".running_var": rng.uniform(0.5, 2.0, c).astype(np.float32),
    }


def resblock_weights(rng):
    p = {"conv1.weight": uniform(rng, (16, 8, 3, 3), 1 / math.sqrt(72))}
    p.update(bn_params(rng, "bn1", 16))
    p["conv2.weight"] = uniform(rng, (16, 16, 3, 3), 1 / math.sqrt(144))
    p.update(bn_params(rng, "bn2", 16))
    p["downsample.0.weight"] = uniform(rng, (16, 8, 1, 1), 1 / math.sqrt(8))
    p.update(bn_params(rng, "downsample.1", 16))
    return p


def resblock_ref(p, x):
    y = relu(batchnorm(conv2d(x, p["conv1.weight"], stride=2, pad=1), p, "bn1"))
    y = batchnorm(conv2d(y, p["conv2.weight"], pad=1), p, "bn2")
    s = batchnorm(conv2d(x, p["downsample.0.weight"], stride=2), p, "downsample.1")
    return {"output": relu(y + s)}


def lstm_weights(rng):
    p, b = {}, 1 / math.sqrt(12)
    for l, fan_in in ((0, 6), (1, 12)):
        p["lstm.weight_ih_l%d" % l] = uniform(rng, (48, fan_in), b)
        p["lstm.weight_hh_l%d" % l] = uniform(rng, (48, 12), b)
        p["lstm.bias_ih_l%d" % l] = uniform(rng, (48,), b)
        p["lstm.bias_hh_l%d" % l] = uniform(rng, (48,), b)
    return p


def lstm_ref(p, x):
    y, h, c = lstm(x, p, "lstm", layers=2, hidden=12)
    return {"y": y, "h_n": h, "c_n": c}


def encoder_weights(rng):
    d, ff = 32, 64
    p = {
        "self_attn.in_proj_weight": uniform(rng, (3 * d, d), math.sqrt(6 / (4 * d))),
        "self_attn.in_proj_bias": rng.normal(0, 0.1, 3 * d).astype(np.float32),
        "self_attn.out_proj.weight": uniform(rng, (d, d), 1 / math.sqrt(d)),
        "self_attn.out_proj.bias": rng.normal(0, 0.1, d).astype(np.float32),
        "norm1.weight": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "norm1.bias": rng.normal(0, 0.1, d).astype(np.float32),
        "linear1.weight": uniform(rng, (ff, d), 1 / math.sqrt(d)),
        "linear1.bias": uniform(rng, (ff,), 1 / math.sqrt(d)),
        "linear2.weight": uniform(rng, (d, ff), 1 / math.sqrt(ff)),
        "linear2.bias": uniform(rng, (d,), 1 / math.sqrt(ff)),
        "norm2.weight": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "norm2.bias": rng.normal(0, 0.1, d).astype(np.float32),
    }
    return p


def encoder_ref(p, x):
    x = layernorm(x + self_attention(x, p, "self_attn", heads=4), p, "norm1")
    h = relu(linear(x, p, "linear1"))
    return {"output": layernorm(x + linear(h, p, "linear2"), p, "norm2")}


MODELS = [
    # file, weights, input shape, reference
    ("resblock.dl", resblock_weights, (2, 8, 10, 10), resblock_ref),
    ("lstm.dl", lstm_weights, (3, 4, 6), lstm_ref),
    ("encoder.dl", encoder_weights, (2, 5, 32), encoder_ref),
]


def check(dlcc, srcdir, tmp, entry, rng):
    fname, make_weights, in_shape, ref = entry
    name = os.path.splitext(fname)[0]
    work = os.path.join(tmp, name)
    os.makedirs(work)
    weights = make_weights(rng)
    x = rng.normal(0, 1, in_shape).astype(np.float32)
    wpath = os.path.join(work, "w.safetensors")
    xpath = os.path.join(work, "x.npy")
    outdir = os.path.join(work, "out")
    write_safetensors(wpath, weights)
    np.save(xpath, x)
    cmd = [dlcc, "run", os.path.join(srcdir, fname), "--weights", wpath, "--input", "x=" + xpath,
           "--output-dir", outdir]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        print("FAIL %s: %s exited %d:\n%s" % (name, " ".join(cmd), r.returncode, r.stderr))
        return 0, 1
    p64 = {k: v.astype(np.float64) for k, v in weights.items()}
    want = ref(p64, x.astype(np.float64))
    passes = fails = 0
    for out_name, b in want.items():
        path = os.path.join(outdir, out_name + ".npy")
        if not os.path.exists(path):
            print("FAIL %s: dlcc wrote no %s" % (name, path))
            fails += 1
            continue
        a = np.load(path)
        if a.dtype != np.float32 or a.shape != b.shape:
            print("FAIL %s.%s: dlcc gave %s%s, numpy %s%s" % (name, out_name, a.dtype, list(a.shape),
                                                              "float32", list(b.shape)))
            fails += 1
            continue
        if not np.all(np.isfinite(a)):
            print("FAIL %s.%s: dlcc's output is not finite" % (name, out_name))
            fails += 1
            continue
        diff = np.abs(a.astype(np.float64) - b)
        scale = max(np.abs(b).max(), 1e-3)
        rel = diff.max() / scale
        at = np.unravel_index(diff.argmax(), diff.shape)
        verdict = "ok" if rel <= TOL else "FAIL"
        print("%-4s %s.%s f32%s: max |dlcc - numpy| %.3g at %s (dlcc %.7g, numpy %.7g), relative %.3g"
              % (verdict, name, out_name, list(b.shape), diff.max(), list(map(int, at)), a[at], b[at], rel))
        if rel <= TOL:
            passes += 1
        else:
            fails += 1
    return passes, fails


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: xcheck.py DLCC MODEL_DIR\n")
        return 2
    dlcc, srcdir = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(20240601)
    passes = fails = 0
    with tempfile.TemporaryDirectory(prefix="dlcc-xcheck-") as tmp:
        for entry in MODELS:
            p, f = check(dlcc, srcdir, tmp, entry, rng)
            passes += p
            fails += f
    print("%d passed, %d failed" % (passes, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
