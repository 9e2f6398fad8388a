#!/usr/bin/env python3
"""Whole models through ONNX: builds a ResNet-18-like CNN, a stacked LSTM/GRU,
the recurrent variants dlcc unrolls and a transformer encoder layer with onnx.helper (random weights as
initializers), runs each with onnxruntime and with `dlcc run` (reference
interpreter and emu), and compares the outputs (rtol 1e-4, atol 1e-4 of the
output's largest magnitude).  Exits 77 when onnx, onnxruntime or numpy is
missing.

    models.py --dlcc BUILD/dlcc [--backends ref,emu] [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import onnxruntime as ort
except ImportError as e:  # the caller reports the skip
    print(f"SKIP: {e.name} is not installed (pip install onnx onnxruntime numpy)")
    sys.exit(77)

rng = np.random.default_rng(0)


class Builder:
    """Nodes and initializers with unique names."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base, array):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, base, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.init(base, rng.uniform(-s, s, shape).astype(np.float32))

    def op(self, op_type, inputs, n_out=1, outs=None, **attrs):
        outs = outs or [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def model(self, name, inputs, outputs, opset=17):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def conv_bn(b, x, cin, cout, k, stride, relu=True):
    w = b.weight("conv.weight", cout, cin, k, k)
    y = b.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    bn = [b.init("bn.weight", rng.uniform(0.5, 1.5, cout).astype(np.float32)),
          b.init("bn.bias", rng.uniform(-0.2, 0.2, cout).astype(np.float32)),
          b.init("bn.running_mean", rng.uniform(-0.2, 0.2, cout).astype(np.float32)),
          b.init("bn.running_var", rng.uniform(0.5, 1.5, cout).astype(np.float32))]
    y = b.op("BatchNormalization", [y] + bn, epsilon=1e-5)
    return b.op("Relu", [y]) if relu else y


def basic_block(b, x, cin, cout, stride):
    y = conv_bn(b, x, cin, cout, 3, stride)
    y = conv_bn(b, y, cout, cout, 3, 1, relu=False)
    skip = conv_bn(b, x, cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else x
    return b.op("Relu", [b.op("Add", [y, skip])])


def resnet():
    """ResNet-18's shape at a small scale: stem, max pool, four stages of
    two basic blocks, global average pool, Flatten, Gemm."""
    b = Builder()
    y = conv_bn(b, "image", 3, 16, 3, 1)
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 16
    for i, cout in enumerate([16, 32, 64, 64]):
        for j in range(2):
            y = basic_block(b, y, c, cout, 2 if j == 0 and i > 0 else 1)
            c = cout
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    b.op("Gemm", [y, b.weight("fc.weight", 10, c), b.weight("fc.bias", 10)], outs=["logits"], transB=1)
    m = b.model("resnet_small", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 32, 32])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 10])])
    return m, {"image": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}, []


def recurrent():
    """A forward LSTM, a bidirectional LSTM over its output and a reverse
    GRU (PyTorch's linear_before_reset=1).  onnxruntime has no layout=1
    (batch-first); the node tests cover that."""
    b = Builder()
    T, N, I, H = 6, 2, 8, 12
    W = b.weight("lstm1.W", 1, 4 * H, I)
    R = b.weight("lstm1.R", 1, 4 * H, H)
    B = b.weight("lstm1.B", 1, 8 * H)
    y1 = b.op("LSTM", ["seq", W, R, B], 1, hidden_size=H)  # [T, 1, N, H]
    y1 = b.op("Squeeze", [y1, b.init("axes", np.array([1], dtype=np.int64))])
    W2 = b.weight("lstm2.W", 2, 4 * H, H)
    R2 = b.weight("lstm2.R", 2, 4 * H, H)
    B2 = b.weight("lstm2.B", 2, 8 * H)
    y2, _ = b.op("LSTM", [y1, W2, R2, B2], outs=[b.name("lstm"), "lstm_h"], hidden_size=H,
                 direction="bidirectional")
    y2 = b.op("Transpose", [y2], perm=[0, 2, 1, 3])  # [T, N, 2, H]
    y2 = b.op("Reshape", [y2, b.init("shape", np.array([0, 0, -1], dtype=np.int64))])
    Wg = b.weight("gru.W", 1, 3 * H, 2 * H)
    Rg = b.weight("gru.R", 1, 3 * H, H)
    Bg = b.weight("gru.B", 1, 6 * H)
    b.op("GRU", [y2, Wg, Rg, Bg], outs=["gru_y", "gru_h"], hidden_size=H, direction="reverse",
         linear_before_reset=1)
    m = b.model("recurrent", [helper.make_tensor_value_info("seq", TensorProto.FLOAT, [T, N, I])],
                [helper.make_tensor_value_info("gru_y", TensorProto.FLOAT, [T, 1, N, H]),
                 helper.make_tensor_value_info("gru_h", TensorProto.FLOAT, [1, N, H]),
                 helper.make_tensor_value_info("lstm_h", TensorProto.FLOAT, [2, N, H])])
    return m, {"seq": rng.standard_normal((T, N, I)).astype(np.float32)}, []


def unrolled():
    """The recurrent nodes dlcc imports step by step (frontend/onnx.c,
    unroll_rnn): a bidirectional GRU with linear_before_reset=0, a runtime
    initial state and sequence lengths; a reverse LSTM with peepholes, clip,
    HardSigmoid gates and nonzero initial states; a bidirectional RNN with
    ThresholdedRelu one way and Tanh the other."""
    b = Builder()
    T, N, I, H = 5, 3, 4, 6
    lens = b.init("lens", np.array([5, 2, 4], dtype=np.int32))
    g, _ = b.op("GRU", ["seq", b.weight("gru.W", 2, 3 * H, I), b.weight("gru.R", 2, 3 * H, H),
                        b.weight("gru.B", 2, 6 * H), lens, "h0"],
                outs=[b.name("gru"), "gru_h"], hidden_size=H, direction="bidirectional")
    g = b.op("Transpose", [g], perm=[0, 2, 1, 3])  # [T, N, 2, H]
    g = b.op("Reshape", [g, b.init("shape", np.array([0, 0, -1], dtype=np.int64))])
    state = lambda name: b.init(name, rng.uniform(-0.5, 0.5, (1, N, H)).astype(np.float32))
    b.op("LSTM", [g, b.weight("lstm.W", 1, 4 * H, 2 * H), b.weight("lstm.R", 1, 4 * H, H),
                  b.weight("lstm.B", 1, 8 * H), "", state("lstm.h0"), state("lstm.c0"),
                  b.weight("lstm.P", 1, 3 * H, scale=0.5)],
         outs=["lstm_y", "", "lstm_c"], hidden_size=H, direction="reverse", clip=0.1,
         activations=["HardSigmoid", "Tanh", "Tanh"], activation_alpha=[0.3], activation_beta=[0.45])
    y = b.op("Squeeze", ["lstm_y", b.init("axes", np.array([1], dtype=np.int64))])
    b.op("RNN", [y, b.weight("rnn.W", 2, H, H), b.weight("rnn.R", 2, H, H), b.weight("rnn.B", 2, 2 * H)],
         outs=["rnn_y", "rnn_h"], hidden_size=H, direction="bidirectional",
         activations=["ThresholdedRelu", "Tanh"], activation_alpha=[0.05])
    f = TensorProto.FLOAT
    m = b.model("unrolled", [helper.make_tensor_value_info("seq", f, [T, N, I]),
                             helper.make_tensor_value_info("h0", f, [2, N, H])],
                [helper.make_tensor_value_info("gru_h", f, [2, N, H]),
                 helper.make_tensor_value_info("lstm_c", f, [1, N, H]),
                 helper.make_tensor_value_info("rnn_y", f, [T, 2, N, H]),
                 helper.make_tensor_value_info("rnn_h", f, [2, N, H])])
    return m, {"seq": rng.standard_normal((T, N, I)).astype(np.float32),
               "h0": rng.uniform(-0.5, 0.5, (2, N, H)).astype(np.float32)}, []


def encoder():
    """Token embedding plus positions, then one post-norm transformer
    encoder layer as PyTorch exports it: the head split is a Reshape whose
    shape comes from Shape -> Gather -> Unsqueeze -> Concat, the batch dim
    is symbolic (bound with -D batch=2), GELU is written with Erf."""
    b = Builder()
    S, D, Hh, V, F = 8, 32, 4, 50, 64
    dh = D // Hh
    emb = b.weight("embed.weight", V, D, scale=1.0)
    x = b.op("Gather", [emb, "tokens"], axis=0)
    x = b.op("Add", [x, b.weight("pos", S, D, scale=0.1)])
    shape = b.op("Shape", [x])
    batch = b.op("Gather", [shape, b.init("zero", np.array(0, dtype=np.int64))], axis=0)
    batch = b.op("Unsqueeze", [batch, b.init("ax0", np.array([0], dtype=np.int64))])
    split = b.op("Concat", [batch, b.init("split", np.array([S, Hh, dh], dtype=np.int64))], axis=0)
    merge = b.op("Concat", [batch, b.init("merge", np.array([S, D], dtype=np.int64))], axis=0)

    def proj(t, din, dout, name):
        w = b.weight(f"{name}.weight", din, dout)
        return b.op("Add", [b.op("MatMul", [t, w]), b.weight(f"{name}.bias", dout)])

    def heads(t):
        return b.op("Transpose", [b.op("Reshape", [t, split])], perm=[0, 2, 1, 3])

    q, k, v = (heads(proj(x, D, D, n)) for n in ("q", "k", "v"))
    att = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    att = b.op("Div", [att, b.init("scale", np.array(np.sqrt(dh), dtype=np.float32))])
    att = b.op("Softmax", [att], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, merge])
    x = b.op("Add", [x, proj(ctx, D, D, "out")])
    ln = lambda t, n: b.op("LayerNormalization", [t, b.init(f"{n}.weight", rng.uniform(0.5, 1.5, D).astype(np.float32)),
                                                  b.init(f"{n}.bias", rng.uniform(-0.1, 0.1, D).astype(np.float32))],
                           axis=-1, epsilon=1e-5)
    x = ln(x, "norm1")
    h = proj(x, D, F, "ff1")
    erf = b.op("Erf", [b.op("Div", [h, b.init("sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))])])
    h = b.op("Mul", [b.op("Mul", [h, b.op("Add", [erf, b.init("one", np.array(1.0, dtype=np.float32))])]),
                     b.init("half", np.array(0.5, dtype=np.float32))])
    x = ln(b.op("Add", [x, proj(h, F, D, "ff2")]), "norm2")
    b.nodes[-1].output[0] = "hidden"  # the model's output keeps its ONNX name
    m = b.model("encoder", [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", S])],
                [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", S, D])])
    return m, {"tokens": rng.integers(0, V, (2, S)).astype(np.int64)}, ["-D", "batch=2"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", required=True)
    ap.add_argument("--backends", default="ref,emu")
    ap.add_argument("--keep")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="dlcc-onnx-models-")
    os.makedirs(tmp, exist_ok=True)
    failures = 0
    for build in (resnet, recurrent, unrolled, encoder):
        model, feeds, extra = build()
        path = os.path.join(tmp, model.graph.name + ".onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        want = dict(zip(names, sess.run(None, feeds)))
        inputs = []
        for k, v in feeds.items():
            p = os.path.join(tmp, f"{model.graph.name}.{k}.npy")
            np.save(p, v)
            inputs += ["--input", f"{k}={p}"]
        for backend in args.backends.split(","):
            out = os.path.join(tmp, f"{model.graph.name}.{backend}")
            cmd = [args.dlcc, "run", path, f"--backend={backend}", f"--output-dir={out}"] + inputs + extra
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {model.graph.name} on {backend}: dlcc run exited {r.returncode}\n{r.stderr}")
                failures += 1
                continue
            for name in names:
                got = np.load(os.path.join(out, name + ".npy"))
                ref = want[name]
                scale = float(np.max(np.abs(ref))) or 1.0
                err = float(np.max(np.abs(got.astype(np.float64) - ref))) if got.shape == ref.shape else float("inf")
                ok = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4 * scale)
                print(f"{'ok  ' if ok else 'FAIL'} {model.graph.name:13s} {backend:4s} {name:8s} "
                      f"{str(got.shape):16s} max |dlcc - onnxruntime| = {err:.3g} (scale {scale:.3g})")
                failures += not ok
    print(f"onnx models: {'all match' if not failures else f'{failures} mismatches'} "
          f"(onnxruntime {ort.__version__}, onnx {onnx.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
