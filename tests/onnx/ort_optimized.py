#!/usr/bin/env python3
"""Hugging Face models as onnxruntime's transformer optimizer rewrites
them (onnxruntime.transformers.optimizer, as Optimum's ORTOptimizer
does): each exported by PyTorch's TorchScript exporter at opset 14 with
eager attention (the form whose attention the optimizer fuses into
com.microsoft Attention and EmbedLayerNormalization), optimized, then run
by onnxruntime and by `dlcc run` on the same inputs (a padded batch) and
compared (docs/onnx.md).  With --quantize, the optimized model then
goes through onnxruntime's quantize_dynamic (int8 weights: QAttention,
QEmbedLayerNormalization, DynamicQuantizeLinear and MatMulInteger, as
its BERT tutorial does it) and, with --save-optimized, is saved by an
onnxruntime session at the extended level (its own fusions:
DynamicQuantizeMatMul, FusedMatMul...).  A dynamically quantized model
rounds each activation to a code at run time, so a value one ulp away
from onnxruntime's (the reference interpreter computes layer norms more
exactly than f32 does) can land on the next code where it falls on a
half: ViT's quantized form then differs on ref by one code's worth
(4e-3 relative) and matches on emu, whose f32 arithmetic is
onnxruntime's.  Not part of `make check`: it needs torch and
transformers from PyPI.

    ort_optimized.py [--dlcc BUILD/dlcc] [--backend ref|emu] [--out DIR] [--quantize] [--save-optimized] [NAME ...]
"""
import argparse, collections, os, subprocess, sys, urllib.parse, warnings
warnings.filterwarnings("ignore")
import numpy as np, onnx, onnxruntime as ort, torch, transformers as T
from onnxruntime.transformers import optimizer

SMALL = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, vocab_size=100)
TEXT = ["input_ids", "attention_mask"]
MODELS = {  # name: (model, optimizer's model_type, inputs)
    "bert": (lambda: T.BertModel(T.BertConfig(**SMALL, max_position_embeddings=64)), "bert", TEXT + ["token_type_ids"]),
    "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(dim=64, n_heads=4, hidden_dim=128, n_layers=2, vocab_size=100,
                                                                max_position_embeddings=64)), "bert", TEXT),
    "roberta": (lambda: T.RobertaModel(T.RobertaConfig(**SMALL, max_position_embeddings=64)), "bert", TEXT),
    "electra": (lambda: T.ElectraModel(T.ElectraConfig(**SMALL, embedding_size=32, max_position_embeddings=64)), "bert", TEXT),
    "gpt2": (lambda: T.GPT2Model(T.GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64, use_cache=False)),
             "gpt2", TEXT),
    "vit": (lambda: T.ViTModel(T.ViTConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2,
                                           image_size=32, patch_size=8)), "vit", ["pixel_values"]),
    "clip_text": (lambda: T.CLIPTextModel(T.CLIPTextConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                                           num_hidden_layers=2, vocab_size=100, max_position_embeddings=32)),
                  "clip", TEXT),
    "t5_enc": (lambda: T.T5EncoderModel(T.T5Config(d_model=64, num_heads=4, d_ff=128, num_layers=2, vocab_size=100, d_kv=16)),
               "t5", TEXT),
}


def inputs(names):
    g = torch.Generator().manual_seed(0)
    out = {}
    for k in names:
        if k == "pixel_values":
            out[k] = torch.randn(2, 3, 32, 32, generator=g)
        elif k == "attention_mask":
            out[k] = torch.ones(2, 16, dtype=torch.int64)
            out[k][1, 11:] = 0  # the second sequence padded
        elif k == "token_type_ids":
            out[k] = torch.zeros(2, 16, dtype=torch.int64)
        else:
            out[k] = torch.randint(0, 100, (2, 16), generator=g)
    return out


def one(name, args):
    ctor, kind, names = MODELS[name]
    torch.manual_seed(0)
    config = ctor().config
    config._attn_implementation = "eager"  # read when the model is built
    torch.manual_seed(0)
    model = MODELS[name][0]().__class__(config).eval()
    feeds = inputs(names)

    class Wrap(torch.nn.Module):
        def __init__(s, m):
            super().__init__()
            s.m = m

        def forward(s, *a):
            return s.m(**dict(zip(names, a))).last_hidden_state
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    plain, opt = os.path.join(d, "model.onnx"), os.path.join(d, "optimized.onnx")
    # dynamic batch and length: with static ones the exporter folds the mask's arithmetic, and the optimizer
    # no longer finds BERT's attention
    dyn = {k: {0: "batch", 1: "length"} for k in names if k != "pixel_values"}
    torch.onnx.export(Wrap(model), tuple(feeds.values()), plain, input_names=names, opset_version=14, dynamo=False,
                      dynamic_axes=dyn or None)
    o = optimizer.optimize_model(plain, model_type=kind, num_heads=4, hidden_size=64)
    o.save_model_to_file(opt)
    if args.quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        q = os.path.join(d, "quantized.onnx")
        quantize_dynamic(opt, q, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        opt = q
    if args.save_optimized:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = os.path.join(d, "saved.onnx")
        ort.InferenceSession(opt, so, providers=["CPUExecutionProvider"])
        opt = so.optimized_model_filepath
    fused = sorted({n.op_type for n in onnx.load(opt).graph.node if n.domain == "com.microsoft"})
    sess = ort.InferenceSession(opt, providers=["CPUExecutionProvider"])
    want = sess.run(None, {k: v.numpy() for k, v in feeds.items()})
    cmd = [args.dlcc, "run", opt, f"--backend={args.backend}", f"--output-dir={d}"]
    for k, v in feeds.items():
        np.save(os.path.join(d, k + ".npy"), v.numpy())
        cmd += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return False, "FAIL-RUN " + (r.stderr.strip().splitlines() or ["?"])[-1][:300]
    worst = 0.0
    for out, v in zip(sess.get_outputs(), want):
        got = np.load(os.path.join(d, urllib.parse.quote(out.name, safe="") + ".npy"))
        worst = max(worst, float(np.abs(got - v).max() / (np.abs(v).max() + 1e-12)))
    return worst < 1e-4, f"{'OK' if worst < 1e-4 else 'WRONG'} {worst:.1e} {fused}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--dlcc", default=os.path.join(os.path.dirname(__file__), "..", "..", "dlcc"))
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--out", default="/tmp/dlcc-ort-optimized")
    ap.add_argument("--quantize", action="store_true")
    ap.add_argument("--save-optimized", action="store_true")
    args = ap.parse_args()
    bad = 0
    for name in args.names or list(MODELS):
        ok, line = one(name, args)
        bad += not ok
        print(f"{name:12s} {line}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
