#!/usr/bin/python3
"""Writes the fuzz targets' committed seeds and dictionaries:
    /usr/bin/python3 tests/fuzz/make_seeds.py BUILD_DIR
into tests/fuzz/corpus/NAME/ (gen-* files; reproducers of found bugs sit
beside them and are kept) and tests/fuzz/dict/.  BUILD_DIR has a built
dlcc (IR seeds are its output).  Needs NumPy and, for the ONNX seeds,
the onnx package and libonnx-testdata (Debian's python3-numpy,
python3-onnx, libonnx-testdata).  run.sh adds the examples, error files
and golden IR of the tree itself; these are what the tree lacks."""
import glob
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(SRC, "tests", "fuzz", "corpus")
DICT = os.path.join(SRC, "tests", "fuzz", "dict")
NODE = "/usr/share/libonnx-testdata/data/node"

# .dl seeds for what the examples do not show: blocks with defaults, loops
# with interpolated scopes, if chains, compile-time values, tuples,
# several models, every family of builtins.
DL = {
    "blocks.dl": """# Blocks with defaults, loops with interpolated scopes, if/else chains.
let N = 2
let C = 8
block basic(x, cout, stride=1, hidden=cout * 2) {
  y = relu(batchnorm(conv2d(x, hidden, kernel=3, stride=stride, pad=1, bias=false) as conv1) as bn1)
  y = batchnorm(conv2d(y, cout, kernel=3, pad="same") as conv2) as bn2
  if stride != 1 or dim(x, 1) != cout {
    x = conv2d(x, cout, kernel=1, stride=stride) as downsample.0
  } else if cout > 100 { x = x * 0.5 } else { x = x }
  return relu(x + y)
}
model net(x: f32[N, 3, 16, 16]) -> f32[N, 10] {
  x = conv2d(x, C, kernel=[3, 3], pad=[1, 1, 1, 1]) as stem
  for i in 0..2 { x = basic(x, C * (i + 1), stride=1 + i) as layer{i + 1}.{i} }
  x = maxpool2d(x, 2, ceil_mode=true)
  x = avgpool2d(x, kernel=[1, 1], count_include_pad=false)
  return linear(flatten(global_avgpool(x)), 10) as fc
}
""",
    "values.dl": """# Compile-time values: lists, strings, tuples, ints and floats, params.
let K = [4, 8]
let NAME = "ta" + "nh"
let E = int(sqrt(16)) ** 2 // 3 % 5
model m(x: f32[2, K[0]], ids: i64[2, 3]) -> (y: f32[2, 4], z: f32[2, 3, 5], w: i64[2]) {
  param w: f32[4, 4]
  param b: f32[4] = 0.5
  let s = 1.0 / sqrt(float(len(K)))
  y = tanh(matmul(x, w) * s + b - -1e-3)
  y = gelu(y, approximate=NAME) + maximum(y, 0) / 2 ** -1
  e = embedding(ids, 10, 5) as emb
  z = softmax(e, axis=-1) + log_softmax(e, axis=-1) * K[-1]
  if NAME == "tanh" and not (E < 0) { z = z - 1 }
  return y, z, argmax(y, axis=1)
}
""",
    "seq.dl": """# Recurrent layers and attention, as tuples.
let N = 2
let T = 5
model seq(x: f32[N, T, 6]) -> (f32[N, T, 8], f32[2, N, 4], f32[N, T, 6]) {
  y, h, c = lstm(x, hidden=4, layers=1, bidirectional=true) as lstm
  g, gh = gru(x, hidden=4, layers=2, batch_first=true) as gru
  a = multihead_attention(x, x, x, heads=2) as attn
  a = layernorm(a + x, eps=1e-6) as norm
  return y, gh, dropout(a, p=0.1)
}
""",
    "ops.dl": """# Elementwise, comparisons, bool logic and data movement.
model ops(x: f32[2, 3, 4], i: i32[2, 3, 4], m: bool[2, 3, 4]) -> (f32[2, 4, 3], bool[2, 3, 4], i32[2, 3, 4], f32[2, 12]) {
  a = where(logical_and(greater(x, 0), m), x, 0.1 * x)
  a = clip(abs(a), 0, 6) + relu6(a) + hardswish(a) - hardsigmoid(a) * silu(a) + sigmoid(a)
  a = exp(a) + log(abs(a) + 1) + rsqrt(a * a + 1) + erf(a) + sin(a) * cos(a) + round(a) + floor(a) + ceil(a)
  a = pow(a, 2.0) + mod(a, 3.0, fmod=true) + a % 2.0 + leaky_relu(a, alpha=0.2) + reciprocal(a + 10)
  b = logical_or(isnan(a), logical_xor(isinf(a), not_equal(m, equal(x, 0))))
  b = logical_not(less_equal(x, 1)) == b
  j = sign(i) + mod(i, 3) + cast(cast(x, i64), i32) * (i > 0)
  t = transpose(a, perm=[0, 2, 1])
  r = reshape(concat([slice(a, 1, 0, 2), slice(a, 1, -1)], axis=1), [2, -1])
  r = slice(pad(r, [1, 1], value=0.5), 1, 1, -1) * expand(reshape(sum(x, axis=[1, 2]), [2, 1]), [-1, 12])
  r = r + mean(x, keepdims=false) + max(x)
  g = gather_elements(x, cast(abs(i) % 3, i64), axis=1)
  return t + 0 * transpose(sum(g, axis=1, keepdims=true)), b, j, r
}
""",
    "conv.dl": """# Transposed, grouped, dilated and 3-d convolutions, pools, resampling.
model conv(x: f32[1, 4, 8, 8], v: f32[1, 2, 4, 6, 6], grid: f32[1, 5, 5, 2]) -> (f32[1, 4, 16, 16], f32[1, 3, 2, 3, 3], f32[1, 4, 5, 5]) {
  y = conv2d(x, 8, kernel=3, pad=2, dilation=2, groups=4) as c1
  y = conv_transpose2d(y, 4, kernel=2, stride=2, output_pad=0) as up
  y = upsample(y, scale=1, mode="bilinear", align_corners=true) + upsample(x, size=[16, 16])
  z = conv3d(v, 3, kernel=[2, 3, 3], stride=1, pad=[0, 1, 1]) as c3
  z = maxpool3d(z, 2, stride=[1, 2, 2]) + avgpool3d(z, kernel=[2, 2, 2], stride=[1, 2, 2])
  z = conv_transpose3d(z, 3, kernel=1) as t3
  s = grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=false)
  return y, z, s
}
""",
    "precision.dl": """# precision="f32" on layers, ops and blocks; several models in one file.
let B = 4
block head(x, n, precision="none") {
  return softmax(linear(x, n) as fc, axis=-1)
}
model small(x: f32[B, 8]) -> f32[B, 8] { return relu(x) }
model big(x: f32[B, 16]) -> f32[B, 10] {
  h = linear(x, 32, precision="f32") as fc1
  h = tanh(h * 2, precision="f32")
  return head(h, 10, precision="f32") as head
}
""",
}

# ONNX node-test families left out: more of the same elementwise import.
ONNX_SKIP = set("""acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh exp log ceil floor neg
reciprocal sqrt round sign erf and3d and4d or2d or3d or4d xor2d xor3d xor4d and_bcast3v1d
or_bcast3v1d xor_bcast3v1d softsign softplus thresholdedrelu selu celu elu leakyrelu
hardsigmoid shrink isinf max min mean sum sub mul div""".split())


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "gen-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def clean():
    for f in glob.glob(os.path.join(OUT, "*", "gen-*")):
        os.remove(f)


def dlcc(build, *args, cwd=None):
    return subprocess.run([os.path.join(build, "dlcc"), *args], check=True, capture_output=True, cwd=cwd).stdout


def compile_flags():
    """One printable flags byte for each pipeline fuzz_compile can run."""
    flags = {}
    for v in range(32, 127):
        key = (v % 3, v // 3 % 4, v // 12 % 2, v // 24 % 2)
        flags.setdefault(key, chr(v))
    return [flags[k] for k in sorted(flags)]


def dl_and_ir_seeds(build, tmp):
    for name, text in DL.items():
        write("dl", name, text)
    models = dict(DL)
    for ex in ("mlp", "lenet", "lstm", "transformer"):
        with open(os.path.join(SRC, "examples", ex + ".dl")) as f:
            models["example-" + ex + ".dl"] = f.read()
    for name in ("bnfold", "fold_dtypes", "precision_keep", "simplify_moves", "cse"):
        with open(os.path.join(SRC, "tests", "golden", "passes", name + ".ir")) as f:
            models["golden-" + name + ".ir"] = f.read()
    # Two pipelines per model, cycling through all of them.
    flags = compile_flags()
    k = 0
    for name, text in sorted(models.items()):
        for _ in range(2):
            write("compile", "%s-%02x" % (name, ord(flags[k % len(flags)])), flags[k % len(flags)] + text)
            k += 1
    # The IR as the pipeline leaves it: groups (#k), #f32 marks, casts.
    for name, text in sorted(DL.items()):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        base = name[:-3]
        # From the folder, so the location comments name the file alone.
        write("ir", base + "-O0.ir", dlcc(build, name, "--emit=ir", "-O0", cwd=tmp))
        write("ir", base + "-O2.ir", dlcc(build, name, "--emit=ir", cwd=tmp))
        write("ir", base + "-f16.ir", dlcc(build, name, "--emit=ir", "--precision=f16", cwd=tmp))


def npy_bytes(arr, version=(1, 0), fortran=False):
    import io
    buf = io.BytesIO()
    arr = np.asfortranarray(arr) if fortran else arr
    np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def npy_seeds():
    rng = np.random.default_rng(7)
    write("npy", "f32.npy", npy_bytes(rng.standard_normal((2, 3)).astype("<f4")))
    write("npy", "f16.npy", npy_bytes(rng.standard_normal((4,)).astype("<f2")))
    write("npy", "i8.npy", npy_bytes(np.arange(-3, 3, dtype="i1")))
    write("npy", "u8.npy", npy_bytes(np.arange(6, dtype="u1").reshape(2, 3)))
    write("npy", "i32.npy", npy_bytes(np.arange(8, dtype="<i4").reshape(2, 2, 2)))
    write("npy", "i64.npy", npy_bytes(np.arange(3, dtype="<i8")))
    write("npy", "f64.npy", npy_bytes(np.linspace(0, 1, 5)))
    write("npy", "bool.npy", npy_bytes(np.array([True, False, True])))
    write("npy", "scalar.npy", npy_bytes(np.array(1.5, dtype="<f4")))
    write("npy", "empty.npy", npy_bytes(np.zeros((0, 3), dtype="<f4")))
    write("npy", "fortran.npy", npy_bytes(np.arange(24, dtype="<f4").reshape(2, 3, 4), fortran=True))
    write("npy", "v2.npy", npy_bytes(np.ones((2, 2), dtype="<f4"), version=(2, 0)))
    write("npy", "v3.npy", npy_bytes(np.ones((1, 1, 1, 1, 1, 1, 1, 1), dtype="<i4"), version=(3, 0)))
    write("npy", "bigendian.npy", npy_bytes(np.ones(2, dtype=">f4")))
    write("npy", "structured.npy", npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])))
    # Hand-written headers: another key order, double quotes, a list shape.
    for i, header in enumerate([
            "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}",
            "{'descr': '<f4', 'fortran_order': True, 'shape': [2, 1], }",
            "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2, 1L), 'extra': None}"]):
        h = header.encode() + b" " * (-(10 + len(header) + 1) % 64) + b"\n"
        write("npy", "header%d.npy" % i, b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + bytes(8))


def safetensors_bytes(tensors, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = lambda *s: ("F32", np.arange(int(np.prod(s)), dtype="<f4").reshape(s))
    # Binds to fuzz_safetensors.c's graph, num_batches_tracked included.
    bind = {
        "fc.weight": f32(2, 3), "fc.bias": f32(2), "bn.running_mean": f32(2),
        "bn.num_batches_tracked": ("I64", np.array(5, dtype="<i8")),
        "emb.weight": ("F16", np.ones((4, 2), dtype="<f2")),
        "ids": ("I64", np.arange(3, dtype="<i8")), "mask": ("BOOL", np.array([1, 0], dtype="u1")),
        "q": ("I8", np.array([-1, 1], dtype="i1")), "u": ("U8", np.array([7], dtype="u1")),
        "n": ("I32", np.array([[3]], dtype="<i4")), "z": ("BF16", np.array(0x3f80, dtype="<u2")),
    }
    write("safetensors", "bind.safetensors", safetensors_bytes(bind, {"format": "pt"}))
    near = dict(bind)
    near["module.fc.weight"] = near.pop("fc.weight")
    near["extra"] = f32(1)
    near["fc.bias"] = ("F16", np.ones(2, dtype="<f2"))
    write("safetensors", "mismatch.safetensors", safetensors_bytes(near))
    write("safetensors", "dtypes.safetensors", safetensors_bytes({
        "a": ("F64", np.ones(2, dtype="<f8")), "b": ("BF16", np.ones((1, 2), dtype="<u2")),
        "c": f32(2, 2, 2), "empty": ("F32", np.zeros((0, 4), dtype="<f4")), "s": ("I32", np.array(1, dtype="<i4"))}))
    write("safetensors", "meta.safetensors", safetensors_bytes({"w": f32(4)}, {"a": "1", "b": "two"}, pad=False))
    write("safetensors", "none.safetensors", safetensors_bytes({}))
    # Offsets out of order and overlapping.
    text = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    write("safetensors", "overlap.safetensors", struct.pack("<Q", len(text)) + text + bytes(12))


def onnx_seeds(build):
    from onnx import TensorProto, helper, numpy_helper
    if not os.path.isdir(NODE):
        print("make_seeds: no %s: ONNX node-test seeds left out" % NODE)
    else:
        best = {}
        for d in sorted(glob.glob(os.path.join(NODE, "test_*"))):
            fam = os.path.basename(d)[5:].split("_")[0]
            model = os.path.join(d, "model.onnx")
            if fam in ONNX_SKIP or not os.path.isfile(model):
                continue
            size = os.path.getsize(model)
            if fam in best and best[fam][0] <= size:
                continue
            if subprocess.run([os.path.join(build, "dlcc"), model], capture_output=True).returncode == 0:
                best[fam] = (size, d)
        for fam, (_, d) in sorted(best.items()):
            with open(os.path.join(d, "model.onnx"), "rb") as f:
                write("onnx", os.path.basename(d) + ".onnx", f.read())
        # Serialized tensors of each dtype, from the same tests.
        for t in ("test_abs/test_data_set_0/input_0.pb", "test_cast_FLOAT16_to_FLOAT/test_data_set_0/input_0.pb",
                  "test_cast_BFLOAT16_to_FLOAT/test_data_set_0/input_0.pb",
                  "test_gather_negative_indices/test_data_set_0/input_1.pb",
                  "test_gathernd_example_int32/test_data_set_0/input_1.pb", "test_and2d/test_data_set_0/input_0.pb",
                  "test_mod_uint8/test_data_set_0/input_0.pb",
                  "test_clip_default_int8_inbounds/test_data_set_0/input_0.pb",
                  "test_cast_DOUBLE_to_FLOAT/test_data_set_0/input_0.pb"):
            path = os.path.join(NODE, t)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    write("onnx_tensor", t.split("/")[0][5:] + ".pb", f.read())

    # Initializers in each encoding, external data in ext.bin (fuzz.c
    # writes 64 KiB of it beside the model), a Constant, an If.
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [0.5, -1.0, 2.0])
    ext = TensorProto(name="e", data_type=TensorProto.FLOAT, dims=[3])
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "ext.bin"), ("offset", "64"), ("length", "12")):
        entry = ext.external_data.add()
        entry.key, entry.value = k, v
    shape = numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "shape")
    half = helper.make_tensor("h", TensorProto.FLOAT16, [3], np.array([1, 2, 3], dtype=np.float16).view(np.uint16))
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["y0"], transB=1, alpha=0.5),
        helper.make_node("Add", ["y0", "e"], ["y1"]),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Mul", ["y1", "c"], ["y2"]),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["y2", "hf"], ["y3"]),
        helper.make_node("Reshape", ["y3", "shape"], ["y4"]),
        helper.make_node("Softmax", ["y4"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                              initializer=[w, b, ext, shape, half])
    write("onnx", "initializers.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
          .SerializeToString())
    # A symbolic batch dim and an If on a constant condition.
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["f"])], "else", [],
                               [helper.make_tensor_value_info("f", TensorProto.FLOAT, ["N", 4])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    graph = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              initializer=[cond])
    write("onnx", "if.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
          .SerializeToString())
    write("onnx_tensor", "external.pb", ext.SerializeToString())
    write("onnx_tensor", "float16.pb", half.SerializeToString())


def plan_seeds():
    """fuzz_plan.c's input: byte 0 picks resealing (odd) and the fake
    device's index reports; then (position lo, hi, XOR) triples."""
    write("plan", "template", b"\x00")
    write("plan", "resealed", b"\x01")
    write("plan", "reports", b"\x06")
    write("plan", "flips", b"\x01" + bytes([0x10, 0x00, 0x01, 0x48, 0x00, 0x80, 0x00, 0x01, 0xff]))


def dictionaries():
    os.makedirs(DICT, exist_ok=True)

    def save(name, words, header):
        with open(os.path.join(DICT, name + ".dict"), "w") as f:
            f.write("# " + header + " (tests/fuzz/make_seeds.py)\n")
            for w in sorted(set(words)):
                # libFuzzer's escapes: \\, \" and \xHH only.
                f.write('"' + "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else
                                      "\\" + c if c in '"\\' else "\\x%02X" % ord(c) for c in w) + '"\n')

    with open(os.path.join(SRC, "ir", "ops.def")) as f:
        ops_def = f.read()
    ops = re.findall(r'^OP\(\w+, "(\w+)"', ops_def, re.M)
    attrs = re.findall(r'ATTR\("(\w+)"', ops_def)
    dtypes = ["f32", "f16", "bf16", "i8", "u8", "i32", "i64", "bool"]
    with open(os.path.join(SRC, "frontend", "lexer.l")) as f:
        keywords = re.findall(r'^"([^"\\]+)"\s', f.read(), re.M)
    with open(os.path.join(SRC, "frontend", "layers.c")) as f:
        layers = f.read()
    builtins = re.findall(r'\{"(\w+)",', layers)
    args = [a for spec in re.findall(r'\{"\w+", bi_\w+, "([^"]*)"', layers) for a in re.split(r"[,|]", spec) if a]
    save("dl", keywords + builtins + [a + "=" for a in args] + dtypes + ["as", "[", "]", "{", "}", "(", ")", ",", "=", ":", ".", "\n"],
         ".dl keywords, builtins, argument names, dtypes")
    save("ir", ops + [a + "=" for a in attrs] + dtypes + ["; dlcc IR\n", "graph", "return", " as ", "#f32", "#k0",
                                                          "%0", "%1", " : ", "; x.dl:1:1\n", "{", "}", "[", "]"],
         "IR text: op and attribute names, dtypes, syntax")
    save("npy", ["\x93NUMPY\x01\x00", "\x93NUMPY\x02\x00", "'descr'", "'fortran_order'", "'shape'", "True", "False",
                 "None", "'<f4'", "'<f2'", "'|i1'", "'<i4'", "'<i8'", "'<f8'", "'|u1'", "'|b1'", "'>f4'", "(",
                 ")", "[", "]", ",)", ": "],
         ".npy magic, header keys and descrs")
    save("safetensors", ["\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F16\"",
                         "\"BF16\"", "\"I8\"", "\"U8\"", "\"I32\"", "\"I64\"", "\"F64\"", "\"BOOL\"", "\"fc.weight\"",
                         "\"fc.bias\"", "\"bn.running_mean\"", "\"bn.num_batches_tracked\"", "\"emb.weight\"",
                         "\"module.\"", "[0, 4]", "[]", "{}", ": ", ", "],
         "safetensors header keys, dtypes, the bound graph's names")
    onnx_ops = []
    try:
        out = subprocess.run([os.path.join(sys.argv[1], "dlcc"), "--onnx-support"], capture_output=True,
                             text=True).stdout
        onnx_ops = re.findall(r"^  ([A-Z]\w+)", out, re.M)
    except OSError:
        pass
    save("onnx", onnx_ops + ["location", "offset", "length", "ext.bin", "ai.onnx", "ai.onnx.ml", "com.microsoft",
                             "axis", "axes",
                             "perm", "pads", "strides", "kernel_shape", "dilations", "group", "auto_pad", "SAME_UPPER",
                             "to", "value", "then_branch", "else_branch", "body", "N", "num_heads", "kv_num_heads",
                             "do_rotary", "local_window_size", "sliding_window_cache", "softcap", "smooth_softmax",
                             "unidirectional", "mask_filter_value"],
         "ONNX op types the importer knows, attribute names, external data keys")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_seeds.py BUILD_DIR")
    build = os.path.abspath(sys.argv[1])
    import tempfile
    clean()
    with tempfile.TemporaryDirectory() as tmp:
        dl_and_ir_seeds(build, tmp)
    npy_seeds()
    safetensors_seeds()
    plan_seeds()
    onnx_seeds(build)
    dictionaries()


if __name__ == "__main__":
    main()
