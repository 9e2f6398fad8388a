"""Runs models of tests/usermodels with `dlcc run` on ref and emu and checks
every output against NumPy written here (PyTorch's semantics for pooling
with ceil_mode and count_include_pad, F.pad order, Python slices), and that
GPT's hand-built causal mask hides later tokens.  Usage: npcheck.py DLCC DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

DLCC, MODELS = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="dlcc-npcheck-")
rng = np.random.default_rng(1)
failures = 0


def run(model, inputs, backend):
    d = os.path.join(TMP, f"{model}-{backend}-{len(os.listdir(TMP))}")
    os.makedirs(d)
    args = [DLCC, "run", os.path.join(MODELS, model + ".dl"), "--backend=" + backend,
            "--output-dir=" + d]
    for k, v in inputs.items():
        p = os.path.join(d, f"in_{k}.npy")
        np.save(p, v)
        args += ["--input", f"{k}={p}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"FAIL: {' '.join(args)}\n{r.stderr}")
    return {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if not f.startswith("in_")}


def check(name, got, want):
    global failures
    want = np.asarray(want)
    ok = got.shape == want.shape and np.allclose(
        got, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    if not ok:
        failures += 1
        diff = np.abs(got - want).max() if got.shape == want.shape else "shape"
        print(f"FAIL {name}: got {got.shape}, want {want.shape}, max diff {diff}")


def pool(x, k, s, p, d=(1, 1), ceil=False, mode="max", incl=True):
    """PyTorch's max_pool2d / avg_pool2d, p = (top, left, bottom, right)."""
    n, c, h, w = x.shape
    pt, pl, pb, pr = p

    def size(length, k, s, a, b, d):
        span = length + a + b - d * (k - 1) - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= length + a:  # a window starting in the padding
            o -= 1
        return o

    oh, ow = size(h, k[0], s[0], pt, pb, d[0]), size(w, k[1], s[1], pl, pr, d[1])
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            vals, padded = [], 0
            for a in range(k[0]):
                for b in range(k[1]):
                    y, z = i * s[0] - pt + a * d[0], j * s[1] - pl + b * d[1]
                    if -pt <= y < h + pb and -pl <= z < w + pr:
                        padded += 1
                    if 0 <= y < h and 0 <= z < w:
                        vals.append(x[:, :, y, z])
            v = np.stack(vals)
            out[:, :, i, j] = v.max(0) if mode == "max" else v.sum(0) / (padded if incl else len(vals))
    return out


def softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


for be in ["ref", "emu"]:
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    o = run("pools", {"x": x}, be)
    check(be + " pools.a", o["a"], pool(x, (3, 3), (2, 2), (1, 1, 1, 1), ceil=True, mode="avg"))
    check(be + " pools.b", o["b"], pool(x, (3, 3), (2, 2), (1, 1, 1, 1), ceil=True, mode="avg", incl=False))
    check(be + " pools.c", o["c"], pool(x, (2, 2), (2, 2), (0, 0, 0, 0), ceil=True))
    check(be + " pools.d", o["d"], pool(x, (3, 2), (2, 3), (1, 0, 1, 0), d=(1, 2)))
    check(be + " pools.e", o["e"], pool(x, (9, 10), (9, 10), (0, 0, 0, 0)))
    check(be + " pools.f", o["f"], pool(x, (3, 3), (3, 3), (1, 1, 1, 1), mode="avg", incl=False))

    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    o = run("movement", {"x": x}, be)
    check(be + " movement.s1", o["s1"], x[-3:-1])
    check(be + " movement.s2", o["s2"], x[:, 1:6:3])
    check(be + " movement.s3", o["s3"], x[:, :, -5:100:2])
    check(be + " movement.p", o["p"], np.pad(x, ((0, 0), (0, 3), (1, 2)), constant_values=-1.5))
    check(be + " movement.t", o["t"], np.swapaxes(x.transpose(2, 0, 1), -1, -2).transpose(0, 2, 1))
    check(be + " movement.r", o["r"], x.reshape(3, -1))
    check(be + " movement.fl", o["fl"], x.reshape(24, 5))
    check(be + " movement.c", o["c"], np.concatenate([x, x[:, :, 1:3], x], -1))
    check(be + " movement.e", o["e"], np.broadcast_to(x[None], (2, 4, 6, 5)))
    check(be + " movement.z", o["z"], x.reshape(1, -1, 1, 30))

    x = rng.standard_normal((3, 5, 4, 2)).astype(np.float32)
    o = run("reductions", {"x": x}, be)
    check(be + " s_all", o["s_all"], x.sum())
    check(be + " m_neg", o["m_neg"], x.mean(-1))
    check(be + " mx_keep", o["mx_keep"], x.max((1, 3), keepdims=True))
    check(be + " mn_multi", o["mn_multi"], x.min((0, 2, 3)))
    check(be + " sm", o["sm"], softmax(x, 1))
    check(be + " lsm", o["lsm"], np.log(softmax(x, -3)))
    check(be + " am", o["am"], x.argmax(-3))
    check(be + " am_keep", o["am_keep"], x.argmax(2)[:, :, None])
    check(be + " gap", o["gap"], x.mean((2, 3), keepdims=True))
    check(be + " mean_keep_all", o["mean_keep_all"], x.mean(keepdims=True))
    check(be + " s_neg2", o["s_neg2"], x.sum(-2, keepdims=True))

    i = {"x": rng.standard_normal((4, 3)), "s": np.array(1.7), "one": np.array([0.3]),
         "col": rng.standard_normal((4, 1)), "lead": rng.standard_normal((1, 1, 3)),
         "img": rng.standard_normal((2, 3, 2, 2)), "cb": rng.standard_normal((3, 1, 1))}
    i = {k: v.astype(np.float32) for k, v in i.items()}
    o = run("broadcast", i, be)
    check(be + " broadcast.a", o["a"], i["x"] * i["s"] + i["one"] - i["col"] / 2)
    check(be + " broadcast.b", o["b"], i["col"] + i["one"] + i["s"])
    check(be + " broadcast.c", o["c"], i["lead"] * i["x"] - 1)
    check(be + " broadcast.d", o["d"], np.maximum(i["img"] - i["cb"], 0.25)
          + np.minimum(0.5, i["cb"]) * np.abs(i["img"]) ** 2)
    check(be + " broadcast.e", o["e"], i["s"] ** 2 - 3 / (i["s"] ** 2 + 1))
    check(be + " broadcast.f", o["f"], 2 - i["x"] ** 2 + 2.0 ** np.minimum(i["x"], 1))

    # Changing token 4 must not change the logits of positions 0..3.
    t = rng.integers(0, 50, (2, 7)).astype(np.int32)
    pos = np.arange(7, dtype=np.int32)[None]
    t2 = t.copy()
    t2[:, 4] = (t2[:, 4] + 1) % 50
    a = run("gpt", {"tokens": t, "positions": pos}, be)["output"]
    b = run("gpt", {"tokens": t2, "positions": pos}, be)["output"]
    check(be + " gpt causal", b[:, :4], a[:, :4])
    if np.abs(a[:, 4:] - b[:, 4:]).max() == 0:
        failures += 1
        print(f"FAIL {be} gpt: changing token 4 changed nothing")

# NumPy's default float64 and Fortran order (np.save of a transposed array).
x = rng.standard_normal((10, 10, 4, 2)).astype(np.float32)
xf = np.asfortranarray(x)
p = os.path.join(TMP, "xf.npy")
np.save(p, xf)
with open(p, "rb") as f:
    assert b"'fortran_order': True" in f.read(128)
o = run("reductions", {"x": x[:3, :5]}, "ref")
of = run("reductions", {"x": np.asfortranarray(x[:3, :5])}, "ref")
for k in o:
    check("fortran order " + k, of[k], o[k])
p = os.path.join(TMP, "x64.npy")
np.save(p, x[:3, :5].astype(np.float64))
r = subprocess.run([DLCC, "run", os.path.join(MODELS, "reductions.dl"), "--backend=ref", "--input",
                    "x=" + p], capture_output=True, text=True)
want = (f"dlcc: error: input 'x': {p} holds f64 data, the model expects f32[3, 5, 4, 2] "
        "(save it with x.astype(np.float32))\n")
if r.returncode != 1 or r.stderr != want:
    failures += 1
    print(f"FAIL float64 input: rc {r.returncode}, stderr {r.stderr!r}, want {want!r}")

shutil.rmtree(TMP)
print("npcheck: %s" % ("ok" if not failures else f"{failures} failures"))
sys.exit(1 if failures else 0)
