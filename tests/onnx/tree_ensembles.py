#!/usr/bin/env python3
"""Random TreeEnsemble models (ai.onnx.ml opset 5) run by onnxruntime and
by `dlcc run` on ref and emu (docs/onnx.md): every branch mode, set
membership, missing values down the true side, one-node trees, each
aggregate function.  Not part of `make check`: it needs onnxruntime.

    tree_ensembles.py [--dlcc BUILD/dlcc] [--seed S] [--trials N]

post_transform stays NONE (onnxruntime 1.32 numbers softmax and
logistic the other way round from the spec), and where set membership
is tested the data are integers (onnxruntime reads the members as
integers)."""
import argparse, os, subprocess, sys, tempfile
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def tree(rng, nodes, leaves, depth, n_features, n_targets, modes):
    """A random tree in preorder: (is_leaf, index)."""
    if depth == 0 or rng.random() < 0.25:
        leaves.append((float(np.round(rng.normal() * 10, 2)), int(rng.integers(0, n_targets))))
        return True, len(leaves) - 1
    i = len(nodes)
    nodes.append(None)
    mode = int(rng.choice(modes))
    members = sorted(set(rng.integers(-3, 4, size=int(rng.integers(1, 4))).astype(float))) if mode == 6 else None
    t = tree(rng, nodes, leaves, depth - 1, n_features, n_targets, modes)
    f = tree(rng, nodes, leaves, depth - 1, n_features, n_targets, modes)
    nodes[i] = dict(feature=int(rng.integers(0, n_features)), split=float(np.round(rng.normal(), 1)), mode=mode,
                    members=members, t=t, f=f, track=int(rng.random() < 0.3))
    return False, i


def ensemble(rng):
    F, NT, T = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    modes = [[0], [1], [0, 1, 2, 3, 4, 5], [0, 6], [0, 1, 2, 3, 4, 5, 6]][int(rng.integers(0, 5))]
    nodes, leaves, roots = [], [], []
    for _ in range(T):
        is_leaf, i = tree(rng, nodes, leaves, int(rng.integers(0, 5)), F, NT, modes)
        if is_leaf:  # a one-node tree: both sides reach the leaf
            nodes.append(dict(feature=0, split=0.0, mode=0, members=None, t=(True, i), f=(True, i), track=0))
            i = len(nodes) - 1
        roots.append(i)
    members = [v for n in nodes if n["mode"] == 6 for v in n["members"] + [np.nan]]
    attrs = dict(
        nodes_featureids=[n["feature"] for n in nodes],
        nodes_splits=numpy_helper.from_array(np.array([n["split"] for n in nodes], np.float32)),
        nodes_modes=numpy_helper.from_array(np.array([n["mode"] for n in nodes], np.uint8)),
        nodes_truenodeids=[n["t"][1] for n in nodes], nodes_falsenodeids=[n["f"][1] for n in nodes],
        nodes_trueleafs=[int(n["t"][0]) for n in nodes], nodes_falseleafs=[int(n["f"][0]) for n in nodes],
        nodes_missing_value_tracks_true=[n["track"] for n in nodes],
        leaf_targetids=[l[1] for l in leaves],
        leaf_weights=numpy_helper.from_array(np.array([l[0] for l in leaves], np.float32)),
        tree_roots=roots, n_targets=NT, aggregate_function=int(rng.integers(0, 4)), post_transform=0)
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, np.float32))
    N = 7
    g = helper.make_graph([helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)], "trees",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [N, F])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [N, NT])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])
    X = np.round(rng.normal(size=(N, F)), 1).astype(np.float32)
    X[rng.random(size=X.shape) < 0.15] = np.nan
    X[0, :] = rng.integers(-3, 4, size=F)
    if 6 in modes:
        X = np.round(X * 2)
    return m, X


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", default="./dlcc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=40)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    tmp = tempfile.mkdtemp(prefix="dlcc-trees-")
    failures = 0
    for trial in range(args.trials):
        m, X = ensemble(rng)
        path, xs = os.path.join(tmp, f"t{trial}.onnx"), os.path.join(tmp, f"x{trial}.npy")
        onnx.save(m, path)
        np.save(xs, X)
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]
        for backend in ("ref", "emu"):
            out = os.path.join(tmp, f"o{trial}.{backend}")
            r = subprocess.run([args.dlcc, "run", path, f"--backend={backend}", "--input", f"X={xs}",
                                f"--output-dir={out}"], capture_output=True, text=True)
            if r.returncode:
                print(f"FAIL {path} on {backend}: {r.stderr.strip()}")
                failures += 1
                continue
            got = np.load(os.path.join(out, "Y.npy"))
            if not np.allclose(got, want, rtol=1e-6, atol=1e-5):
                print(f"WRONG {path} on {backend}: max |dlcc - onnxruntime| {np.max(np.abs(got - want))}")
                failures += 1
    print(f"tree ensembles: {args.trials} models, {'all match' if not failures else f'{failures} failures'} "
          f"(onnxruntime {ort.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
