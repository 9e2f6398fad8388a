#!/usr/bin/env python3
"""Whole models through ONNX: builds a ResNet-18-like CNN, a stacked LSTM/GRU,
the recurrent variants dlcc unrolls, a transformer encoder layer and Resize and
GridSample nodes with onnx.helper (random weights as
initializers), runs each with onnxruntime and with `dlcc run` (reference
interpreter and emu), and compares the outputs (rtol 1e-4, atol 1e-4 of the
output's largest magnitude).  An MLP and a CNN in onnxruntime's dynamic
int8 format (quantize_dynamic), a volume's GridSample, RoiAlign,
DeformConv, opset 8's batched Scan, a detector's post-processing
(run-time lengths through Shape, TopK, Concat, If and NMS), a Loop
whose end is decided at run time and onnxruntime's attention ops with a
KV cache (GroupQueryAttention, a windowed one, MultiHeadAttention and
RotaryEmbedding) and the CNN and encoder as onnxruntime saves them
optimized (FusedConv, FusedMatMul, SkipLayerNormalization) are compared
the same way.  The int8 QDQ form of the CNN (onnxruntime's
quantize_static where it imports, else the same format made here) and
its QOperator form (QLinearConv and onnxruntime's com.microsoft
QLinearAdd, QLinearGlobalAveragePool and QGemm; quantize_static only)
must agree within one quantization step of its output.  Exits 77 when onnx,
onnxruntime or numpy is missing.

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
        m.ir_version = 8 if opset <= 17 else 10  # opset 23 needs IR 10
        onnx.checker.check_model(m)
        return m


def conv_bn(b, x, cin, cout, k, stride, relu=True, fold=False):
    w = (rng.uniform(-1, 1, (cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    g, beta = rng.uniform(0.5, 1.5, cout).astype(np.float32), rng.uniform(-0.2, 0.2, cout).astype(np.float32)
    mean, var = rng.uniform(-0.2, 0.2, cout).astype(np.float32), rng.uniform(0.5, 1.5, cout).astype(np.float32)
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    if fold:  # as onnxruntime's quant_pre_process folds it before quantizing
        s = (g / np.sqrt(var + 1e-5)).astype(np.float32)
        y = b.op("Conv", [x, b.init("conv.weight", w * s[:, None, None, None]),
                          b.init("conv.bias", ((0 - mean) * s + beta).astype(np.float32))], **attrs)
    else:
        y = b.op("Conv", [x, b.init("conv.weight", w)], **attrs)
        bn = [b.init(n, a) for n, a in (("bn.weight", g), ("bn.bias", beta), ("bn.running_mean", mean),
                                        ("bn.running_var", var))]
        y = b.op("BatchNormalization", [y] + bn, epsilon=1e-5)
    return b.op("Relu", [y]) if relu else y


def basic_block(b, x, cin, cout, stride, fold=False):
    y = conv_bn(b, x, cin, cout, 3, stride, fold=fold)
    y = conv_bn(b, y, cout, cout, 3, 1, relu=False, fold=fold)
    skip = conv_bn(b, x, cin, cout, 1, stride, relu=False, fold=fold) if stride != 1 or cin != cout else x
    return b.op("Relu", [b.op("Add", [y, skip])])


def resnet(fold=False, name="resnet_small"):
    """ResNet-18's shape at a small scale: stem, max pool, four stages of
    two basic blocks, global average pool, Flatten, Gemm."""
    b = Builder()
    y = conv_bn(b, "image", 3, 16, 3, 1, fold=fold)
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 16
    for i, cout in enumerate([16, 32, 64, 64]):
        for j in range(2):
            y = basic_block(b, y, c, cout, 2 if j == 0 and i > 0 else 1, fold=fold)
            c = cout
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    b.op("Gemm", [y, b.weight("fc.weight", 10, c), b.weight("fc.bias", 10)], outs=["logits"], transB=1)
    m = b.model(name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 32, 32])],
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


def video3d():
    """A small C3D / 3-D U-Net: Conv3d + BatchNorm + Relu, a spatial-only
    MaxPool3d, a strided grouped dilated Conv3d with asymmetric pads, a
    ConvTranspose3d back up, concatenated with the skip, an AveragePool3d
    with ceil_mode and padding, GlobalAveragePool, Flatten, Gemm."""
    b = Builder()
    w1 = b.weight("conv1.weight", 8, 3, 3, 3, 3)
    y = b.op("Conv", ["clip", w1, b.weight("conv1.bias", 8)], kernel_shape=[3, 3, 3], pads=[1] * 6)
    g, beta = rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.uniform(-0.2, 0.2, 8).astype(np.float32)
    mean, var = rng.uniform(-0.2, 0.2, 8).astype(np.float32), rng.uniform(0.5, 1.5, 8).astype(np.float32)
    bn = [b.init(n, a) for n, a in (("bn1.weight", g), ("bn1.bias", beta), ("bn1.running_mean", mean),
                                    ("bn1.running_var", var))]
    skip = b.op("Relu", [b.op("BatchNormalization", [y] + bn, epsilon=1e-5)])
    y = b.op("MaxPool", [skip], kernel_shape=[1, 2, 2], strides=[1, 2, 2])
    y = b.op("Conv", [y, b.weight("conv2.weight", 16, 4, 3, 3, 3), b.weight("conv2.bias", 16)],
             kernel_shape=[3, 3, 3], strides=[2, 1, 1], pads=[1, 2, 2, 1, 2, 0], dilations=[1, 2, 1], group=2)
    y = b.op("Relu", [y])
    y = b.op("ConvTranspose", [y, b.weight("up.weight", 16, 8, 2, 2, 2), b.weight("up.bias", 8)],
             kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    y = b.op("Concat", [y, skip], axis=1)
    y = b.op("AveragePool", [y], outs=["features"], kernel_shape=[3, 3, 3], strides=[2, 2, 2],
             pads=[1, 1, 0, 0, 1, 1], ceil_mode=1, count_include_pad=1)
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    b.op("Gemm", [y, b.weight("fc.weight", 4, 16), b.weight("fc.bias", 4)], outs=["scores"], transB=1)
    m = b.model("video3d", [helper.make_tensor_value_info("clip", TensorProto.FLOAT, [1, 3, 4, 8, 8])],
                [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4]),
                 helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16, 2, 5, 4])])
    return m, {"clip": rng.standard_normal((1, 3, 4, 8, 8)).astype(np.float32)}, []


def resize():
    """Resize as dlcc imports it (gathers and weighted sums over tables
    computed at import) and GridSample: a bilinear align_corners upsample
    by 1.5, a cubic downsample to sizes, nearest with round_prefer_ceil,
    a crop with extrapolation, and a bicubic border warp by a constant
    grid."""
    b = Builder()
    f = TensorProto.FLOAT
    floats = lambda name, v: b.init(name, np.array(v, dtype=np.float32))
    sizes = lambda name, v: b.init(name, np.array(v, dtype=np.int64))
    b.op("Resize", ["image", "", floats("up.scales", [1, 1, 1.5, 1.5])], outs=["up"], mode="linear",
         coordinate_transformation_mode="align_corners")
    b.op("Resize", ["image", "", "", sizes("down.sizes", [1, 2, 4, 5])], outs=["down"], mode="cubic")
    b.op("Resize", ["image", "", "", sizes("near.sizes", [1, 2, 9, 11])], outs=["near"],
         coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil")
    b.op("Resize", ["image", floats("crop.roi", [0, 0, 0.1, -0.1, 1, 1, 0.8, 0.9]), "",
                    sizes("crop.sizes", [1, 2, 5, 7])], outs=["crop"], mode="linear",
         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)
    grid = b.init("warp.grid", rng.uniform(-1.2, 1.2, (1, 5, 7, 2)).astype(np.float32))
    b.op("GridSample", ["image", grid], outs=["warp"], mode="bicubic", padding_mode="border")
    outs = [("up", [1, 2, 9, 12]), ("down", [1, 2, 4, 5]), ("near", [1, 2, 9, 11]), ("crop", [1, 2, 5, 7]),
            ("warp", [1, 2, 5, 7])]
    m = b.model("resize", [helper.make_tensor_value_info("image", f, [1, 2, 6, 8])],
                [helper.make_tensor_value_info(n, f, d) for n, d in outs], opset=16)
    return m, {"image": rng.standard_normal((1, 2, 6, 8)).astype(np.float32)}, []


def ts_encoder():
    """A transformer encoder layer as PyTorch's TorchScript exporter writes
    one: free input dims ("?" for the batch, -1 for the sequence), bound
    from the input file; the scale is 1/sqrt of the last dim of Q's
    shape; a slice of the shape past its end gives an empty tensor on
    which ConstantOfShape makes a scalar; the head split's Reshape
    target is concatenated from Shape pieces; declared outputs of
    symbolic and -1 dims."""
    b = Builder()
    D, Hh = 16, 2
    dh = D // Hh
    i64 = lambda name, v: b.init(name, np.array(v, dtype=np.int64))
    shape = b.op("Shape", ["x"])  # [batch, seq, D]
    tail = b.op("Slice", [shape, i64("past", [3]), i64("end", [np.iinfo(np.int64).max])])  # empty
    one = b.op("ConstantOfShape", [tail], value=numpy_helper.from_array(np.array([1.0], dtype=np.float32)))
    lead = b.op("Slice", [shape, i64("s0", [0]), i64("s2", [2])])
    split = b.op("Concat", [lead, tail, i64("heads", [Hh, dh])], axis=0)
    merge = b.op("Concat", [lead, i64("d", [D])], axis=0)
    last = b.op("Cast", [b.op("Slice", [b.op("Shape", [b.op("Reshape", ["x", split])]), i64("m1", [-1]),
                                       i64("end2", [np.iinfo(np.int64).max])])], to=TensorProto.FLOAT)
    scale = b.op("Div", [one, b.op("Sqrt", [last])])

    def proj(t, name):
        return b.op("Add", [b.op("MatMul", [t, b.weight(f"{name}.weight", D, D)]), b.weight(f"{name}.bias", D)])

    def heads(t):
        return b.op("Transpose", [b.op("Reshape", [t, split])], perm=[0, 2, 1, 3])

    q, k, v = (heads(proj("x", n)) for n in ("q", "k", "v"))
    att = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), scale])
    ctx = b.op("Transpose", [b.op("MatMul", [b.op("Softmax", [att], axis=-1), v])], perm=[0, 2, 1, 3])
    y = b.op("Add", ["x", proj(b.op("Reshape", [ctx, merge]), "out")])
    b.op("LayerNormalization", [y, b.init("ln.weight", rng.uniform(0.5, 1.5, D).astype(np.float32)),
                                b.init("ln.bias", rng.uniform(-0.1, 0.1, D).astype(np.float32))],
         outs=["y"], axis=-1, epsilon=1e-5)
    m = b.model("ts_encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", -1, D])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_out", -1, D])])
    return m, {"x": rng.standard_normal((2, 5, D)).astype(np.float32)}, []


def attention23():
    """Attention (opset 23) as PyTorch's dynamo exporter emits it for
    scaled_dot_product_attention, with more: 3-d inputs split into 4
    query heads over 2 KV heads, a past key and value, causal, and a bool
    mask from the input; the outputs Y and present_key."""
    b = Builder()
    B, L, P, QH, KH, E = 2, 3, 2, 4, 2, 4
    b.op("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], outs=["y", "present_k", "present_v"],
         q_num_heads=QH, kv_num_heads=KH, is_causal=1)
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    m = b.model("attention23", [vi("q", f, [B, L, QH * E]), vi("k", f, [B, L, KH * E]), vi("v", f, [B, L, KH * E]),
                                vi("mask", TensorProto.BOOL, [L, P + L]), vi("past_k", f, [B, KH, P, E]),
                                vi("past_v", f, [B, KH, P, E])],
                [vi("y", f, [B, L, QH * E]), vi("present_k", f, [B, KH, P + L, E]), vi("present_v", f, [B, KH, P + L, E])],
                opset=23)
    mask = np.ones((L, P + L), dtype=bool)
    mask[:, 1] = False
    feeds = {"q": rng.standard_normal((B, L, QH * E)), "k": rng.standard_normal((B, L, KH * E)),
             "v": rng.standard_normal((B, L, KH * E)), "past_k": rng.standard_normal((B, KH, P, E)),
             "past_v": rng.standard_normal((B, KH, P, E))}
    feeds = {n: a.astype(np.float32) for n, a in feeds.items()}
    feeds["mask"] = mask
    return m, feeds, []


def control():
    """If with a condition computed at run time (both branches, a where)
    and Loop of a constant trip count with a loop-carried value and a
    scan output (unrolled)."""
    b = Builder()
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    pos = b.op("Greater", [b.op("ReduceSum", ["x"], keepdims=0), b.init("zero", np.array(0, dtype=np.float32))])
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", f, [2, 3])])
    els = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", f, [2, 3])])
    b.op("If", [pos], outs=["chosen"], then_branch=then, else_branch=els)
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["acc", "i_f"], ["acc_out"]),
         helper.make_node("Tanh", ["acc_out"], ["step"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("acc", f, [2, 3])],
        [vi("c_out", TensorProto.BOOL, []), vi("acc_out", f, [2, 3]), vi("step", f, [2, 3])])
    b.op("Loop", [b.init("trips", np.array(4, dtype=np.int64)), "", "x"], outs=["acc", "steps"], body=body)
    m = b.model("control", [vi("x", f, [2, 3])],
                [vi("chosen", f, [2, 3]), vi("acc", f, [2, 3]), vi("steps", f, [4, 2, 3])])
    return m, {"x": rng.standard_normal((2, 3)).astype(np.float32)}, []


def loop_run_time():
    """Loop whose end is decided at run time: at most 20 steps, started
    when the input has a positive element, each scaling v by 1.5 while
    its sum stays under a limit given at run time; the scan outputs'
    length is the steps taken (unrolled to 20 guarded steps)."""
    b = Builder()
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "scale"], ["v_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Identity", ["v_out"], ["v_scan"]),
         helper.make_node("Cast", ["i"], ["i_scan"], to=TensorProto.FLOAT)],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", f, [2, 3])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", f, [2, 3]), vi("v_scan", f, [2, 3]), vi("i_scan", f, [])],
        [numpy_helper.from_array(np.array(1.5, dtype=np.float32), "scale")])
    go = b.op("Greater", [b.op("ReduceMax", ["x"], keepdims=0), b.init("zero", np.array(0, dtype=np.float32))])
    b.op("Loop", [b.init("trips", np.array(20, dtype=np.int64)), go, "x"], outs=["v_final", "vs", "is"], body=body)
    b.op("Relu", ["vs"], outs=["vs_relu"])
    m = b.model("loop_run_time", [vi("x", f, [2, 3]), vi("limit", f, [])],
                [vi("v_final", f, [2, 3]), vi("vs_relu", f, ["steps", 2, 3]), vi("is", f, ["steps"])])
    x = rng.standard_normal((2, 3)).astype(np.float32) + 0.5
    return m, {"x": x, "limit": np.array(float(np.sum(x)) * 10 if np.sum(x) > 0 else 10, dtype=np.float32)}, []


def while_loop():
    """A while loop as TorchScript writes one (`while x.abs().sum() <
    limit:`): trip count INT64_MAX and a condition computed before it and
    by the body, a step counter carried along, and the x of each step as
    a scan output.  No bound in the file: `--loop-bound=32` gives one
    (the run takes 7 steps)."""
    b = Builder()
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "scale"], ["scaled"]),
         helper.make_node("Add", ["scaled", "shift"], ["v_out"]),
         helper.make_node("Add", ["n", "one"], ["n_out"]),
         helper.make_node("Abs", ["v_out"], ["a"]),
         helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"]),
         helper.make_node("Identity", ["v_out"], ["v_scan"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("v", f, [2, 3]),
                 vi("n", TensorProto.INT64, [])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", f, [2, 3]), vi("n_out", TensorProto.INT64, []),
         vi("v_scan", f, [2, 3])],
        [numpy_helper.from_array(np.array(1.5, dtype=np.float32), "scale"),
         numpy_helper.from_array(np.array(0.1, dtype=np.float32), "shift"),
         numpy_helper.from_array(np.array(1, dtype=np.int64), "one")])
    go = b.op("Less", [b.op("ReduceSum", [b.op("Abs", ["x"])], keepdims=0), "limit"])
    b.op("Loop", [b.init("trips", np.array(2**63 - 1, dtype=np.int64)), go, "x",
                  b.init("zero", np.array(0, dtype=np.int64))], outs=["y", "n", "ys"], body=body)
    m = b.model("while_loop", [vi("x", f, [2, 3]), vi("limit", f, [])],
                [vi("y", f, [2, 3]), vi("n", TensorProto.INT64, []), vi("ys", f, ["steps", 2, 3])])
    x = np.array([[0.5, -0.25, 1], [0.75, 0.125, -0.5]], dtype=np.float32)
    return m, {"x": x, "limit": np.array(40, dtype=np.float32)}, ["--loop-bound=32"]


def nested_while():
    """A while loop in a while loop's body: the outer one runs while j <
    olim, and its step j runs an inner one 2j + 1 times, each doubling x
    (1, 3, 5, ... steps).  Under `--loop-bound=3` with olim 2 the inner
    loop of the outer step the run skips would take 5: its check must
    hold there, skipped or not, and the run gives onnxruntime's."""
    b = Builder()
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    inner = helper.make_graph(
        [helper.make_node("Add", ["k", "k_one"], ["k_out"]),
         helper.make_node("Add", ["v", "v"], ["v_out"]),
         helper.make_node("Less", ["k_out", "lim"], ["k_go"])],
        "inner", [vi("n", i64, []), vi("k_c", TensorProto.BOOL, []), vi("k", i64, []), vi("v", f, [3])],
        [vi("k_go", TensorProto.BOOL, []), vi("k_out", i64, []), vi("v_out", f, [3])],
        [numpy_helper.from_array(np.array(1, dtype=np.int64), "k_one")])
    outer = helper.make_graph(
        [helper.make_node("Add", ["j", "j"], ["jj"]),
         helper.make_node("Add", ["jj", "one"], ["lim"]),
         helper.make_node("Less", ["zero", "lim"], ["go"]),
         helper.make_node("Loop", ["", "go", "zero", "x_in"], ["k_f", "x_out"], body=inner),
         helper.make_node("Add", ["j", "one"], ["j_out"]),
         helper.make_node("Less", ["j_out", "olim"], ["c_out"])],
        "outer", [vi("it", i64, []), vi("c", TensorProto.BOOL, []), vi("j", i64, []), vi("x_in", f, [3])],
        [vi("c_out", TensorProto.BOOL, []), vi("j_out", i64, []), vi("x_out", f, [3])],
        [numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
         numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")])
    j0 = b.init("j0", np.array(0, dtype=np.int64))
    b.op("Loop", ["", b.op("Less", [j0, "olim"]), j0, "x"], outs=["j_f", "x_f"], body=outer)
    m = b.model("nested_while", [vi("x", f, [3]), vi("olim", i64, [])], [vi("j_f", i64, []), vi("x_f", f, [3])])
    return m, {"x": np.array([1, 2, 3], dtype=np.float32), "olim": np.array(2, dtype=np.int64)}, ["--loop-bound=3"]


def plan_while():
    """While loops with no bound, run as loops of the plan: TorchScript's
    form (trip count INT64_MAX, a condition before and in the body)
    taking 1,500 steps, more than dlcc unrolls; and a Fibonacci pair
    whose body swaps two carried values (a, b = b, a + b) under a trip
    count given at run time."""
    b = Builder()
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "step"], ["v_out"]),
         helper.make_node("Add", ["n", "one"], ["n_out"]),
         helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["c_out"])],
        "body", [vi("i", i64, []), vi("c", TensorProto.BOOL, []), vi("v", f, [2, 3]), vi("n", i64, [])],
        [vi("c_out", TensorProto.BOOL, []), vi("v_out", f, [2, 3]), vi("n_out", i64, [])],
        [numpy_helper.from_array(np.array(0.25, dtype=np.float32), "step"),
         numpy_helper.from_array(np.array(1, dtype=np.int64), "one")])
    go = b.op("Less", [b.op("ReduceSum", ["x"], keepdims=0), "limit"])
    b.op("Loop", [b.init("trips", np.array(2**63 - 1, dtype=np.int64)), go, "x",
                  b.init("zero", np.array(0, dtype=np.int64))], outs=["y", "n"], body=body)
    fib = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["ab"]),
         helper.make_node("Identity", ["b"], ["a_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "fib", [vi("i", i64, []), vi("c", TensorProto.BOOL, []), vi("a", f, [3]), vi("b", f, [3])],
        [vi("c_out", TensorProto.BOOL, []), vi("a_out", f, [3]), vi("ab", f, [3])])
    b.op("Loop", ["count", "", b.init("a0", np.array([0, 1, 2], dtype=np.float32)),
                  b.init("b0", np.array([1, 1, 3], dtype=np.float32))], outs=["fa", "fb"], body=fib)
    m = b.model("plan_while", [vi("x", f, [2, 3]), vi("limit", f, []), vi("count", i64, [])],
                [vi("y", f, [2, 3]), vi("n", i64, []), vi("fa", f, [3]), vi("fb", f, [3])])
    x = np.array([[0.5, -0.25, 1], [0.75, 0.125, -0.5]], dtype=np.float32)
    return m, {"x": x, "limit": np.array(2250, dtype=np.float32), "count": np.array(20, dtype=np.int64)}, []


def plan_nested_while():
    """nested_while with no bound: two loops of the plan, one inside the
    other's body."""
    m, feeds, _ = nested_while()
    m.graph.name = "plan_nested_while"
    return m, {**feeds, "olim": np.array(4, dtype=np.int64)}, []


def runtime_operands():
    """Operands computed at run time: Clip's min from the data (the log
    mel floor of openWakeWord, max - 8), Pad's constant value and
    Trilu's k as inputs; and an input with a dim of 0 at run time."""
    b = Builder()
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    floor = b.op("Sub", [b.op("ReduceMax", ["x"], keepdims=0), b.init("range", np.array(8, dtype=np.float32))])
    b.op("Clip", ["x", floor], outs=["clipped"])
    b.op("Pad", ["x", b.init("pads", np.array([0, 1, 1, 0], dtype=np.int64)), "fill"], outs=["padded"])
    b.op("Trilu", ["x", "k"], outs=["upper"], upper=1)
    b.op("ReduceSum", ["none", b.init("ax0", np.array([0], dtype=np.int64))], outs=["sum0"], keepdims=0)
    b.op("Concat", ["none", "x"], outs=["joined"], axis=0)
    m = b.model("runtime_operands", [vi("x", f, [3, 4]), vi("fill", f, []), vi("k", TensorProto.INT64, []),
                                     vi("none", f, ["n", 4])],
                [vi("clipped", f, [3, 4]), vi("padded", f, [4, 5]), vi("upper", f, [3, 4]),
                 vi("sum0", f, [4]), vi("joined", f, [3, 4])])
    x = (rng.standard_normal((3, 4)) * 6).astype(np.float32)
    return m, {"x": x, "fill": np.array(-2.5, dtype=np.float32), "k": np.array(1, dtype=np.int64),
               "none": np.zeros((0, 4), dtype=np.float32)}, []


def run_time_lengths():
    """Outputs whose length only a run tells: x[x > 0.3] * 2 as PyTorch
    exports boolean indexing (NonZero, Transpose, GatherND) and its mean
    (over the real rows alone), the rows of x
    whose sum is positive (Compress of a computed condition) softmaxed,
    and a detector's post-processing: sigmoid scores of two classes,
    NonMaxSuppression, and the kept boxes gathered."""
    b = Builder()
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    mask = b.op("Greater", ["x", b.init("cut", np.array(0.3, dtype=np.float32))])
    idx = b.op("Transpose", [b.op("NonZero", [mask])], perm=[1, 0])
    b.op("Mul", [b.op("GatherND", ["x", idx]), b.init("two", np.array(2, dtype=np.float32))], outs=["picked"])
    b.op("ReduceMean", ["picked"], outs=["mean"], keepdims=0)
    keep = b.op("Greater", [b.op("ReduceSum", ["x", b.init("ax1", np.array([1], dtype=np.int64))], keepdims=0),
                            b.init("zero", np.array(0, dtype=np.float32))])
    b.op("Softmax", [b.op("Compress", ["x", keep], axis=0)], outs=["rows"], axis=1)
    sel = b.op("NonMaxSuppression", ["boxes", b.op("Sigmoid", ["logits"]),
                                     b.init("most", np.array([3], dtype=np.int64)),
                                     b.init("iou", np.array([0.4], dtype=np.float32)),
                                     b.init("floor", np.array([0.35], dtype=np.float32))], outs=["selected"])
    box_of = b.op("Gather", [sel, b.init("col2", np.array(2, dtype=np.int64))], axis=1)
    flat = b.op("Reshape", ["boxes", b.init("n4", np.array([-1, 4], dtype=np.int64))])
    b.op("Gather", [flat, box_of], outs=["kept"], axis=0)
    m = b.model("lengths", [vi("x", f, [5, 6]), vi("boxes", f, [1, 8, 4]), vi("logits", f, [1, 2, 8])],
                [vi("picked", f, ["n"]), vi("mean", f, []), vi("rows", f, ["m", 6]), vi("selected", TensorProto.INT64, ["k", 3]),
                 vi("kept", f, ["k", 4])])
    corner = rng.uniform(0, 4, (1, 8, 2)).astype(np.float32)
    boxes = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 8, 2)).astype(np.float32)], axis=2)
    return m, {"x": rng.standard_normal((5, 6)).astype(np.float32), "boxes": boxes,
               "logits": rng.standard_normal((1, 2, 8)).astype(np.float32)}, []


def detector_post():
    """torchvision's detector post-processing as its TorchScript export
    writes it (ssd.py's postprocess_detections, ops.batched_nms): per
    class, the scores above a floor (NonZero, run-time length), the top
    min(n, 5) of them (TopK with K from Shape), their labels
    (ConstantOfShape of Shape), all classes concatenated (real rows
    first), an If that gives nothing when no box is left, NMS of boxes
    offset per class, the first 6 kept, and the boxes, scores and labels
    gathered at them."""
    b = Builder()
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    vi = helper.make_tensor_value_info
    n_boxes, classes = 40, 4
    boxes_c, scores_c, labels_c = [], [], []
    zero_ax = b.init("ax0", np.array([0], dtype=np.int64))
    for c in range(1, classes):
        s = b.op("Gather", ["scores", b.init("c", np.array(c, dtype=np.int64))], axis=1)
        idx = b.op("Reshape", [b.op("NonZero", [b.op("Greater", [s, b.init("floor", np.array(0.45, dtype=np.float32))])]),
                               b.init("flat", np.array([-1], dtype=np.int64))])
        sc, bx = b.op("Gather", [s, idx], axis=0), b.op("Gather", ["boxes", idx], axis=0)
        n = b.op("Unsqueeze", [b.op("Gather", [b.op("Shape", [sc]), b.init("at0", np.array(0, dtype=np.int64))], axis=0),
                               zero_ax])
        k = b.op("Reshape", [b.op("ReduceMin", [b.op("Concat", [b.init("five", np.array([5], dtype=np.int64)), n], axis=0)],
                                  keepdims=0), b.init("one", np.array([1], dtype=np.int64))])
        top, at = b.op("TopK", [sc, k], n_out=2, axis=-1)
        boxes_c.append(b.op("Gather", [bx, at], axis=0))
        scores_c.append(top)
        labels_c.append(b.op("ConstantOfShape", [b.op("Shape", [top])],
                             value=numpy_helper.from_array(np.array([c], dtype=np.int64))))
    all_boxes, all_scores = b.op("Concat", boxes_c, axis=0), b.op("Concat", scores_c, axis=0)
    all_labels = b.op("Concat", labels_c, axis=0)
    empty = b.op("Equal", [b.op("Size", [all_boxes]), b.init("none", np.array(0, dtype=np.int64))])
    then_g = helper.make_graph([helper.make_node("Constant", [], ["nothing"],
                                                 value=numpy_helper.from_array(np.zeros(0, dtype=np.int64)))],
                               "then", [], [vi("nothing", i64, [0])])
    e = Builder()
    e.n = 1000
    offsets = e.op("Mul", [e.op("Cast", [all_labels], to=f),
                           e.op("Add", [e.op("ReduceMax", [all_boxes], keepdims=0), e.init("one_f", np.array(1, dtype=np.float32))])])
    shifted = e.op("Add", [all_boxes, e.op("Unsqueeze", [offsets, e.init("ax1", np.array([1], dtype=np.int64))])])
    sel = e.op("NonMaxSuppression", [e.op("Unsqueeze", [shifted, e.init("b0", np.array([0], dtype=np.int64))]),
                                     e.op("Unsqueeze", [all_scores, e.init("b01", np.array([0, 1], dtype=np.int64))]),
                                     e.init("most", np.array([100], dtype=np.int64)),
                                     e.init("iou", np.array([0.3], dtype=np.float32))])
    e.op("Reshape", [e.op("Gather", [sel, e.init("col2", np.array([2], dtype=np.int64))], axis=1),
                     e.init("flat_e", np.array([-1], dtype=np.int64))], outs=["kept_rows"])
    else_g = helper.make_graph(e.nodes, "else", [], [vi("kept_rows", i64, ["k"])], e.inits)
    kept = b.op("If", [empty], then_branch=then_g, else_branch=else_g)
    first = b.op("Slice", [kept, b.init("s0", np.array([0], dtype=np.int64)), b.init("s6", np.array([6], dtype=np.int64))])
    b.op("Gather", [all_boxes, first], outs=["det_boxes"], axis=0)
    b.op("Gather", [all_scores, first], outs=["det_scores"], axis=0)
    b.op("Gather", [all_labels, first], outs=["det_labels"], axis=0)
    m = b.model("detector_post", [vi("boxes", f, [n_boxes, 4]), vi("scores", f, [n_boxes, classes])],
                [vi("det_boxes", f, ["d", 4]), vi("det_scores", f, ["d"]), vi("det_labels", i64, ["d"])])
    corner = rng.uniform(0, 10, (n_boxes, 2)).astype(np.float32)
    boxes = np.concatenate([corner, corner + rng.uniform(1, 4, (n_boxes, 2)).astype(np.float32)], axis=1)
    scores = rng.uniform(0, 1, (n_boxes, classes)).astype(np.float32)
    return m, {"boxes": boxes, "scores": scores}, []


def calibration(m, n=4):
    """Each activation's range over n random images (onnxruntime, every
    node's output made a graph output)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    names = [o for node in probe.graph.node for o in node.output]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names if o != "logits")
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    lo, hi = {}, {}
    for i in range(n):
        feed = {"image": np.random.default_rng(100 + i).standard_normal((2, 3, 32, 32)).astype(np.float32)}
        for name, v in [("image", feed["image"])] + list(zip(outs, sess.run(None, feed))):
            lo[name] = min(lo.get(name, 0.0), float(v.min()))
            hi[name] = max(hi.get(name, 0.0), float(v.max()))
    return lo, hi


def qdq_by_hand(m):
    """quantize_static's QDQ format, made here where onnxruntime's
    quantization tool does not import: every activation u8 through
    QuantizeLinear -> DequantizeLinear (range from calibration), Conv and
    Gemm weights i8 per output channel and biases i32 at s_x * s_w, each
    through DequantizeLinear."""
    lo, hi = calibration(m)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    g = helper.make_graph([], m.graph.name + "_qdq", m.graph.input, m.graph.output)
    scale = {}

    def qparams(name):
        s = np.float32((hi[name] - lo[name]) / 255 or 1.0)
        return s, np.uint8(np.clip(np.round(-lo[name] / s), 0, 255))

    def init(name, array):
        g.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def qdq_act(name, out=None):
        s, z = qparams(name)
        scale[name] = s
        init(name + "_scale", s), init(name + "_zp", z)
        g.node.append(helper.make_node("QuantizeLinear", [name, name + "_scale", name + "_zp"], [name + "_q"]))
        g.node.append(helper.make_node("DequantizeLinear", [name + "_q", name + "_scale", name + "_zp"],
                                       [out or name + "_dq"]))
        return out or name + "_dq"

    renamed = {"image": qdq_act("image")}
    for node in m.graph.node:
        ins = list(node.input)
        if node.op_type in ("Conv", "Gemm"):
            x, w = renamed[ins[0]], inits[ins[1]]
            sw = (np.abs(w.reshape(w.shape[0], -1)).max(axis=1) / 127).astype(np.float32)
            wq = np.clip(np.round(w / sw.reshape(-1, *[1] * (w.ndim - 1))), -127, 127).astype(np.int8)
            init(ins[1] + "_q", wq), init(ins[1] + "_s", sw), init(ins[1] + "_z", np.zeros(w.shape[0], np.int8))
            g.node.append(helper.make_node("DequantizeLinear", [ins[1] + "_q", ins[1] + "_s", ins[1] + "_z"],
                                           [ins[1] + "_dq"], axis=0))
            ins = [x, ins[1] + "_dq"] + ins[2:]
            if len(ins) > 2:
                sb = (scale[node.input[0]] * sw).astype(np.float32)
                init(node.input[2] + "_q", np.round(inits[node.input[2]] / sb).astype(np.int32))
                init(node.input[2] + "_s", sb), init(node.input[2] + "_z", np.zeros(sb.shape, np.int32))
                g.node.append(helper.make_node("DequantizeLinear", [node.input[2] + "_q", node.input[2] + "_s",
                                                                    node.input[2] + "_z"], [node.input[2] + "_dq"], axis=0))
                ins[2] = node.input[2] + "_dq"
        else:
            ins = [renamed.get(i, i) for i in ins]
        outs = [o + "_f" if o == "logits" else o for o in node.output]
        g.node.append(helper.make_node(node.op_type, ins, outs, **{a.name: helper.get_attribute_value(a)
                                                                   for a in node.attribute}))
        for o, f in zip(node.output, outs):
            lo[f], hi[f] = lo.get(o, 0.0), hi.get(o, 0.0)
            renamed[o] = qdq_act(f, "logits" if o == "logits" else None)
    q = helper.make_model(g, opset_imports=m.opset_import)
    q.ir_version = m.ir_version
    onnx.checker.check_model(q)
    return q


def resnet_qdq(fmt="QDQ"):
    """The CNN with BatchNormalization folded, in onnxruntime's int8 QDQ
    format: u8 activations, i8 weights per channel, i32 biases.  dlcc runs
    its convolutions and the Gemm as int8 products and requantizes as
    onnxruntime's QLinearConv does; the output's quantization step is the
    tolerance.  fmt "QOperator": the same model in onnxruntime's QOperator
    format, QLinearConv and the com.microsoft contrib ops QLinearAdd,
    QLinearGlobalAveragePool and QGemm (no fallback without the tool)."""
    name = "resnet_qdq" if fmt == "QDQ" else "resnet_qop"
    m, feeds, extra = resnet(fold=True, name=name)
    try:
        from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                              quantize_static)

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.i = 0

            def get_next(self):
                self.i += 1
                return None if self.i > 4 else {
                    "image": np.random.default_rng(100 + self.i).standard_normal((2, 3, 32, 32)).astype(np.float32)}

        with tempfile.TemporaryDirectory() as d:
            onnx.save(m, os.path.join(d, "f.onnx"))
            # reduce_range: 7-bit weights, as onnxruntime advises for u8 x
            # s8 products on x86 without VNNI, whose kernels saturate
            # pairs of products at 16 bits (then its answer is not the
            # spec's, and 1.32 on AVX2 gives such wrong sums)
            quantize_static(os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx"), Reader(),
                            quant_format=getattr(QuantFormat, fmt), per_channel=True, reduce_range=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            q, how = onnx.load(os.path.join(d, "q.onnx")), "onnxruntime.quantization"
    except ImportError:  # the tool needs ml_dtypes and onnx >= 1.13
        if fmt != "QDQ":
            return None
        q, how = qdq_by_hand(m), "tests/onnx/models.py"
    q.graph.name = name
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    last = next(n for n in q.graph.node if n.output[0] == "logits")
    # QDQ: DequantizeLinear(q, scale, zp) makes the logits; QOperator:
    # the same at the end (QGemm's y dequantized)
    return q, feeds, extra, {"step": float(inits[last.input[1]]), "by": how}


def resnet_qop():
    return resnet_qdq("QOperator")


def qoperator_ops():
    """onnxruntime's com.microsoft QOperator ops that resnet_qop has not:
    QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, and a
    QGemm with an INT32 bias, over UINT8 codes (the fuzzer's seed
    tests/fuzz/corpus/onnx/qoperator-contrib.onnx).  The result is codes:
    within one of onnxruntime's."""
    ms = "com.microsoft"
    f = lambda n, v, dt: numpy_helper.from_array(np.array(v, dtype=dt), n)
    inits = [f("s", 0.05, np.float32), f("z", 128, np.uint8), f("s2", 0.1, np.float32), f("wz", 0, np.int8),
             numpy_helper.from_array(np.arange(-6, 6, dtype=np.int8).reshape(4, 3), "w"),
             f("bias", [1, -2, 3], np.int32)]
    nodes = [helper.make_node("QLinearAdd", ["x", "s", "z", "y", "s", "z", "s2", "z"], ["a"], domain=ms),
             helper.make_node("QLinearMul", ["a", "s2", "z", "x", "s", "z", "s", "z"], ["m"], domain=ms),
             helper.make_node("QLinearSigmoid", ["m", "s", "z", "s2", "z"], ["g"], domain=ms),
             helper.make_node("QLinearLeakyRelu", ["g", "s2", "z", "s", "z"], ["l"], domain=ms, alpha=0.2),
             helper.make_node("QLinearConcat", ["s", "z", "l", "s", "z", "x", "s", "z"], ["c"], domain=ms, axis=1),
             helper.make_node("QGemm", ["c", "s", "z", "w", "s2", "wz", "bias", "s", "z"], ["q"], domain=ms)]
    g = helper.make_graph(nodes, "qoperator_ops",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 2]),
                           helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 2])],
                          [helper.make_tensor_value_info("q", TensorProto.UINT8, [2, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])
    feeds = {"x": rng.integers(0, 256, (2, 2), dtype=np.uint8), "y": rng.integers(0, 256, (2, 2), dtype=np.uint8)}
    return m, feeds, [], {"step": 1.0, "by": "onnx.helper"}


def mlp_dynamic():
    """A two-layer MLP on [2, 5, 64] inputs in onnxruntime's dynamic int8
    format (quantize_dynamic: each MatMul's input quantized at run time by
    DynamicQuantizeLinear, its scale and zero point computed then,
    MatMulInteger with that zero point, i8 weights; made here the same
    way where the tool does not import).  Every code is exact, so dlcc
    matches as closely as f32 models do."""
    b = Builder()
    w1, b1 = b.weight("w1", 64, 96), b.weight("b1", 96)
    w2, b2 = b.weight("w2", 96, 10), b.weight("b2", 10)
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", ["x", w1]), b1])])
    b.op("Add", [b.op("MatMul", [h, w2]), b2], outs=["y"])
    m = b.model("mlp_dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 64])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 10])])
    feeds = {"x": rng.standard_normal((2, 5, 64)).astype(np.float32)}
    return quantized_dynamic(m, np.int8, "MatMulInteger"), feeds, []


def cnn_dynamic():
    """Two convolutions (padded; strided and grouped) with relu in
    onnxruntime's dynamic int8 format: DynamicQuantizeLinear feeding
    ConvInteger its zero point (which the padding cannot read: dlcc sums
    the terms over the taps inside the image), u8 weights with zero
    points (a second product for the sums of x)."""
    b = Builder()
    w1, b1 = b.weight("w1", 8, 3, 3, 3), b.weight("b1", 8)
    w2, b2 = b.weight("w2", 6, 4, 3, 3), b.weight("b2", 6)
    h = b.op("Relu", [b.op("Conv", ["x", w1, b1], pads=[1, 1, 1, 1])])
    b.op("Conv", [h, w2, b2], outs=["y"], pads=[1, 1, 1, 1], strides=[2, 2], group=2)
    m = b.model("cnn_dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 6, 6])])
    feeds = {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
    return quantized_dynamic(m, np.uint8, "ConvInteger"), feeds, []


def quantized_dynamic(m, wtype, product):
    """m by onnxruntime's quantize_dynamic (weights of wtype), or in its
    format by dynamic_by_hand where the tool does not import; it must
    hold DynamicQuantizeLinear and the product op."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as d:
            onnx.save(m, os.path.join(d, "f.onnx"))
            quantize_dynamic(os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx"), reduce_range=wtype == np.int8,
                             weight_type=QuantType.QInt8 if wtype == np.int8 else QuantType.QUInt8)
            q = onnx.load(os.path.join(d, "q.onnx"))
    except ImportError:
        q = dynamic_by_hand(m, wtype)
    q.graph.name = m.graph.name
    ops = {n.op_type for n in q.graph.node}
    assert {"DynamicQuantizeLinear", product} <= ops, ops
    return q


def dynamic_by_hand(m, wtype=np.int8):
    """quantize_dynamic's format for m's MatMuls with a known B and its
    Convs: weights per tensor (i8 symmetric, or u8 over their range with
    a zero point); the input by DynamicQuantizeLinear."""
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    nodes, extra, done = [], [], set()
    for n in m.graph.node:
        if n.op_type not in ("MatMul", "Conv") or n.input[1] not in inits:
            nodes.append(n)
            continue
        a, wn = n.input[0], n.input[1]
        w = inits[wn]
        if wtype == np.int8:
            ws, wz = np.float32(np.abs(w).max() / 127), 0
        else:
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            ws = np.float32((hi - lo) / 255)
            wz = int(np.clip(np.rint(-lo / ws), 0, 255))
        info = np.iinfo(wtype)
        wq = np.clip(np.rint(w / ws) + wz, info.min, info.max).astype(wtype)
        extra += [numpy_helper.from_array(wq, wn + "_q"), numpy_helper.from_array(np.array(ws, np.float32), wn + "_s"),
                  numpy_helper.from_array(np.array(wz, wtype), wn + "_z")]
        done.add(wn)
        out = n.output[0]
        nodes += [helper.make_node("DynamicQuantizeLinear", [a], [a + "_q", a + "_s", a + "_z"]),
                  helper.make_node("Mul", [a + "_s", wn + "_s"], [a + "_ws"])]
        if n.op_type == "MatMul":
            nodes.append(helper.make_node("MatMulInteger", [a + "_q", wn + "_q", a + "_z", wn + "_z"], [out + "_i"]))
        else:
            attrs = {at.name: helper.get_attribute_value(at) for at in n.attribute}
            nodes.append(helper.make_node("ConvInteger", [a + "_q", wn + "_q", a + "_z", wn + "_z"], [out + "_i"],
                                          **attrs))
        scaled = out + "_m" if len(n.input) > 2 else out
        nodes += [helper.make_node("Cast", [out + "_i"], [out + "_f"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [out + "_f", a + "_ws"], [scaled])]
        if len(n.input) > 2:  # Conv's bias, per channel
            c = inits[n.input[2]].shape[0]
            extra.append(numpy_helper.from_array(inits[n.input[2]].reshape(1, c, 1, 1), n.input[2] + "_r"))
            nodes.append(helper.make_node("Add", [scaled, n.input[2] + "_r"], [out]))
            done.add(n.input[2])
    keep = [t for t in m.graph.initializer if t.name not in done]
    g = helper.make_graph(nodes, m.graph.name, m.graph.input, m.graph.output, keep + extra)
    q = helper.make_model(g, opset_imports=m.opset_import)
    q.ir_version = m.ir_version
    onnx.checker.check_model(q)
    return q


def scan8():
    """Scan of opset 8 (a batch axis first, the body per batch element):
    a state and two scan inputs, the second read backwards, as
    onnxruntime runs it."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "c"], ["ac"]), helper.make_node("Add", ["s", "ac"], ["s2"]),
         helper.make_node("Sub", ["s2", "c"], ["o"])],
        "body", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("s", "a", "c")],
        [helper.make_tensor_value_info("s2", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])])
    node = helper.make_node("Scan", ["", "init", "x", "y"], ["fin", "out"], num_scan_inputs=2, directions=[0, 1],
                            body=body)
    g = helper.make_graph([node], "scan8", [helper.make_tensor_value_info("init", TensorProto.FLOAT, [2, 2]),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 2]),
                                            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 2])],
                          [helper.make_tensor_value_info("fin", TensorProto.FLOAT, [2, 2]),
                           helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 8)])
    m.ir_version = 3
    feeds = {k: rng.standard_normal(shape).astype(np.float32)
             for k, shape in (("init", (2, 2)), ("x", (2, 4, 2)), ("y", (2, 4, 2)))}
    return m, feeds, []


def grid_sample3d():
    """GridSample of a volume (opset 20): trilinear with reflection, and
    nearest with border padding and align_corners, at points reaching
    past the volume, as onnxruntime computes them."""
    b = Builder()
    b.op("GridSample", ["vol", "grid"], outs=["lin"], mode="linear", padding_mode="reflection")
    b.op("GridSample", ["vol", "grid"], outs=["near"], mode="nearest", padding_mode="border", align_corners=1)
    m = b.model("grid_sample3d", [helper.make_tensor_value_info("vol", TensorProto.FLOAT, [2, 3, 4, 5, 6]),
                                  helper.make_tensor_value_info("grid", TensorProto.FLOAT, [2, 3, 4, 2, 3])],
                [helper.make_tensor_value_info("lin", TensorProto.FLOAT, [2, 3, 3, 4, 2]),
                 helper.make_tensor_value_info("near", TensorProto.FLOAT, [2, 3, 3, 4, 2])], opset=20)
    feeds = {"vol": rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32),
             "grid": rng.uniform(-1.6, 1.6, (2, 3, 4, 2, 3)).astype(np.float32)}
    return m, feeds, []


def roi_align():
    """RoiAlign (opset 16) on rois given at run time, some reaching past
    the image: the average of 2x2 samples under half_pixel, and the
    largest weighted corner of 3x3 under output_half_pixel, as
    onnxruntime computes them."""
    b = Builder()
    b.op("RoiAlign", ["x", "rois", "idx"], outs=["avg"], output_height=3, output_width=2, sampling_ratio=2,
         spatial_scale=0.5, mode="avg", coordinate_transformation_mode="half_pixel")
    b.op("RoiAlign", ["x", "rois", "idx"], outs=["max"], output_height=2, output_width=4, sampling_ratio=3,
         spatial_scale=0.5, mode="max", coordinate_transformation_mode="output_half_pixel")
    m = b.model("roi_align", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 12]),
                              helper.make_tensor_value_info("rois", TensorProto.FLOAT, [4, 4]),
                              helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
                [helper.make_tensor_value_info("avg", TensorProto.FLOAT, [4, 3, 3, 2]),
                 helper.make_tensor_value_info("max", TensorProto.FLOAT, [4, 3, 2, 4])], opset=16)
    rois = np.array([[0, 0, 9, 7], [4.5, 2.25, 20, 19], [-6, -4, 5, 3], [10, 6, 30, 26]], np.float32)
    feeds = {"x": rng.standard_normal((2, 3, 10, 12)).astype(np.float32), "rois": rois,
             "idx": np.array([0, 1, 1, 0], np.int64)}
    return m, feeds, []


def deform_conv():
    """DeformConv (opset 19) with 2 groups and 2 offset groups, strides,
    dilations, uneven pads, a mask and a bias, its offsets reaching past
    the image, as onnxruntime computes it."""
    N, C, H, W, Co, KH, KW, og = 2, 4, 9, 8, 6, 3, 2, 2
    pads, (sh, sw), (dh, dw) = [1, 0, 1, 2], (2, 1), (1, 2)
    OH, OW = (H + pads[0] + pads[2] - (KH - 1) * dh - 1) // sh + 1, (W + pads[1] + pads[3] - (KW - 1) * dw - 1) // sw + 1
    b = Builder()
    w, bias = b.weight("w", Co, C // 2, KH, KW), b.weight("b", Co)
    b.op("DeformConv", ["x", w, "off", bias, "mask"], outs=["y"], group=2, offset_group=og, strides=[sh, sw],
         dilations=[dh, dw], pads=pads, kernel_shape=[KH, KW])
    m = b.model("deform_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W]),
                                helper.make_tensor_value_info("off", TensorProto.FLOAT, [N, og * KH * KW * 2, OH, OW]),
                                helper.make_tensor_value_info("mask", TensorProto.FLOAT, [N, og * KH * KW, OH, OW])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, Co, OH, OW])], opset=19)
    feeds = {"x": rng.standard_normal((N, C, H, W)).astype(np.float32),
             "off": (rng.standard_normal((N, og * KH * KW * 2, OH, OW)) * 2).astype(np.float32),
             "mask": rng.uniform(0, 1, (N, og * KH * KW, OH, OW)).astype(np.float32)}
    return m, feeds, []


def ort_saved(build, name):
    """build()'s model as onnxruntime saves it optimized at the extended
    level (SessionOptions.optimized_model_filepath), as users ship it:
    Conv + Relu become com.microsoft FusedConv, MatMuls of transposes
    FusedMatMul, the layer norms SkipLayerNormalization..."""
    m, feeds, extra = build()[:3]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "src.onnx"), os.path.join(tmp, "dst.onnx")
        onnx.save(m, src)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = dst
        ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        opt = onnx.load(dst)
    opt.graph.name = name
    return opt, feeds, extra


def resnet_ort():
    return ort_saved(resnet, "resnet_ort")


def encoder_ort():
    return ort_saved(encoder, "encoder_ort")


def mlp_dynamic_ort():
    """quantize_dynamic's MLP saved optimized: DynamicQuantizeMatMul."""
    return ort_saved(mlp_dynamic, "mlp_dyn_ort")


def ms_model(name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def gqa_decode():
    """A decoding step as onnxruntime-genai writes a Llama layer: one
    token per entry of a batch of 2 whose caches hold 5 and 3 real tokens
    of 5 (right padding), packed QKV from one MatMul, GroupQueryAttention
    with 4 query heads over 2 KV heads and rotary at each entry's own
    position, seqlens_k and total_sequence_length computed from the
    attention mask as genai computes them."""
    B, P, N, NK, H = 2, 5, 4, 2, 16
    vi, f, ms = helper.make_tensor_value_info, TensorProto.FLOAT, "com.microsoft"
    ang = rng.uniform(0, 6, (32, H // 2)).astype(np.float32)
    w = rng.uniform(-0.2, 0.2, (N * H, (N + 2 * NK) * H)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "wqkv"), numpy_helper.from_array(np.cos(ang), "cos"),
             numpy_helper.from_array(np.sin(ang), "sin"), numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "axis1")]
    nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv"]),
             helper.make_node("ReduceSum", ["mask", "one"], ["count"], keepdims=0),
             helper.make_node("Sub", ["count", "one"], ["last"]),
             helper.make_node("Cast", ["last"], ["seqlens"], to=TensorProto.INT32),
             helper.make_node("Shape", ["mask"], ["mshape"]),
             helper.make_node("Gather", ["mshape", "axis1"], ["tot64"], axis=0),
             helper.make_node("Cast", ["tot64"], ["total"], to=TensorProto.INT32),
             helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_k", "past_v", "seqlens", "total", "cos", "sin"],
                              ["y", "present_k", "present_v"], domain=ms, num_heads=N, kv_num_heads=NK, do_rotary=1)]
    mask = np.ones((B, P + 1), np.int64)
    mask[1, 3:5] = 0  # entry 1: 3 tokens in its cache, then padding, then this step's
    feeds = {"x": rng.standard_normal((B, 1, N * H)).astype(np.float32), "mask": mask,
             "past_k": rng.standard_normal((B, NK, P, H)).astype(np.float32),
             "past_v": rng.standard_normal((B, NK, P, H)).astype(np.float32)}
    m = ms_model("gqa_decode", nodes, [vi("x", f, [B, 1, N * H]), vi("mask", TensorProto.INT64, [B, P + 1]),
                                       vi("past_k", f, [B, NK, P, H]), vi("past_v", f, [B, NK, P, H])],
                 [vi("y", f, None), vi("present_k", f, None), vi("present_v", f, None)], inits)
    return m, feeds, []


def gqa_window():
    """GroupQueryAttention over a windowed cache (sliding_window_cache, as
    genai writes Gemma's local layers): a prompt of 3 after 9 tokens of
    which the 6-row cache holds the 6 most recent (window 4, so 3 rows
    are freed at a time), soft cap and a smooth softmax; present holds
    the 6 most recent of 12."""
    S, C, N, NK, H, W, T = 3, 6, 2, 1, 16, 4, 12
    vi, f = helper.make_tensor_value_info, TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array([T - 1], np.int32), "seqlens"),
             numpy_helper.from_array(np.array(T, np.int32), "total")]
    nodes = [helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v", "seqlens", "total"],
                              ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=N, kv_num_heads=NK,
                              local_window_size=W, sliding_window_cache=1, softcap=4.0, smooth_softmax=1)]
    shapes = {"q": (1, S, N * H), "k": (1, S, NK * H), "v": (1, S, NK * H), "past_k": (1, NK, C, H),
              "past_v": (1, NK, C, H)}
    feeds = {n: rng.standard_normal(d).astype(np.float32) for n, d in shapes.items()}
    m = ms_model("gqa_window", nodes, [vi(n, f, list(d)) for n, d in shapes.items()],
                 [vi("y", f, None), vi("present_k", f, None), vi("present_v", f, None)], inits)
    return m, feeds, []


def mha_decoder():
    """MultiHeadAttention as onnxruntime's optimizer writes a decoder's
    self-attention step: the input projections' bias in the op, a past of
    3, causal, a 2-d key padding mask (entry 1's first key is padding)
    and an attention bias; com.microsoft RotaryEmbedding on the query
    first, its positions from a scalar offset."""
    B, S, P, N, H = 2, 2, 3, 2, 8
    D = N * H
    vi, f, ms = helper.make_tensor_value_info, TensorProto.FLOAT, "com.microsoft"
    ang = rng.uniform(0, 6, (16, H // 2)).astype(np.float32)
    inits = [numpy_helper.from_array(np.cos(ang), "cos"), numpy_helper.from_array(np.sin(ang), "sin"),
             numpy_helper.from_array(np.array([P], np.int64), "offset"),
             numpy_helper.from_array(rng.standard_normal(3 * D).astype(np.float32), "bias")]
    nodes = [helper.make_node("RotaryEmbedding", ["q", "offset", "cos", "sin"], ["qr"], domain=ms, num_heads=N,
                              rotary_embedding_dim=H),
             helper.make_node("MultiHeadAttention", ["qr", "k", "v", "bias", "pad", "ab", "past_k", "past_v"],
                              ["y", "present_k", "present_v"], domain=ms, num_heads=N, unidirectional=1)]
    pad = np.ones((B, P + S), np.int32)
    pad[1, 0] = 0
    feeds = {"q": rng.standard_normal((B, S, D)), "k": rng.standard_normal((B, S, D)),
             "v": rng.standard_normal((B, S, D)), "ab": rng.standard_normal((1, N, S, P + S)),
             "past_k": rng.standard_normal((B, N, P, H)), "past_v": rng.standard_normal((B, N, P, H))}
    feeds = {n: a.astype(np.float32) for n, a in feeds.items()}
    feeds["pad"] = pad
    m = ms_model("mha_decoder", nodes,
                 [vi(n, TensorProto.INT32 if n == "pad" else f, list(a.shape)) for n, a in feeds.items()],
                 [vi("y", f, None), vi("present_k", f, None), vi("present_v", f, None)], inits)
    return m, feeds, []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", required=True)
    ap.add_argument("--backends", default="ref,emu")
    ap.add_argument("--keep")
    ap.add_argument("--only", help="comma-separated model builders to run (all by default)")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="dlcc-onnx-models-")
    os.makedirs(tmp, exist_ok=True)
    failures = 0
    for build in (resnet, recurrent, unrolled, encoder, resnet_qdq, resnet_qop, qoperator_ops, mlp_dynamic, cnn_dynamic,
                  video3d, resize, grid_sample3d, roi_align, deform_conv, scan8, ts_encoder, attention23,
                  control, loop_run_time, while_loop, nested_while, plan_while, plan_nested_while, runtime_operands, run_time_lengths, detector_post,
                  gqa_decode, gqa_window, mha_decoder, resnet_ort, encoder_ort,
                  mlp_dynamic_ort):
        if args.only and build.__name__ not in args.only.split(","):
            continue
        if build is attention23 and onnx.defs.onnx_opset_version() < 23:
            print(f"skip attention23: onnx {onnx.__version__} has no opset 23")
            continue
        built = build()
        if built is None:
            print(f"skip {build.__name__}: onnxruntime.quantization does not import")
            continue
        model, feeds, extra, *quant = built
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
                if quant:  # int8: within one step of the output's quantization, and say how many differ
                    step = quant[0]["step"]
                    ok = err <= step * 1.001
                    differ = int(np.sum(got != ref)) if got.shape == ref.shape else ref.size
                    tol = f"step {step:.3g}: {differ} of {ref.size} differ; QDQ by {quant[0]['by']}"
                else:
                    ok = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4 * scale)
                    tol = f"scale {scale:.3g}"
                print(f"{'ok  ' if ok else 'FAIL'} {model.graph.name:13s} {backend:4s} {name:8s} "
                      f"{str(got.shape):16s} max |dlcc - onnxruntime| = {err:.3g} ({tol})")
                failures += not ok
    print(f"onnx models: {'all match' if not failures else f'{failures} mismatches'} "
          f"(onnxruntime {ort.__version__}, onnx {onnx.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
