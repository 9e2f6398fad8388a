#!/usr/bin/env python3
"""One training step of torchvision's models (when torchvision is
installed), torch.nn's layers one kind at a time (sweep_pieces.py) and
some larger torch.nn pieces, by PyTorch and by `dlcc train` on their
ONNX export: each parameter's gradient compared.  Not part of `make
check` (it needs torch and takes minutes on ref); docs/training.md has
its last figures.

Each model is built with torch.manual_seed(0), dropout and stochastic
depth set to 0 (their masks cannot match), put in train() and exported
by the TorchScript exporter in TRAINING mode without constant folding
(the dynamo exporter writes an inference graph: docs/training.md).  Both
take one SGD step at lr 1 with no momentum from the same weights on the
same batch (cross_entropy), so w0 - w1 is the gradient; a running
statistic is compared as it is.  A tensor agrees when its largest
difference is within 2e-3 of its largest magnitude (or of 1e-3 of the
model's largest gradient, for gradients that are 0 in exact arithmetic:
a bias before a batchnorm).  In f32 a ReLU whose input is within
rounding of 0 may go either way in the two implementations: that
changes the gradients of the layers before it by a percent or so, and
a different --seed moves it elsewhere or away.

    grad_sweep.py --dlcc BUILD/dlcc [--backend ref|emu] [--models a,b] [--seed S]

A model named timm/NAME is timm's (when timm is installed), built with
no dropout or drop path, at the input size of its pretrained config.
"""
import argparse, contextlib, copy, io, json, os, subprocess, sys, tempfile, time, warnings

try:
    import numpy as np
    import torch
    import torch.nn as nn
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP: {e}")
    sys.exit(77)
try:
    import torchvision
except ImportError:
    torchvision = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_pieces import PIECES  # noqa: E402 - beside this file
from train_parity import load_file  # noqa: E402


class Head(nn.Module):
    """The model's logits (GoogLeNet's and Inception's outputs are tuples in train())."""

    def __init__(s, m):
        super().__init__()
        s.m = m

    def forward(s, x):
        y = s.m(x)
        return y.logits if hasattr(y, "logits") else y


class Pieces(nn.Module):
    """An autoencoder's pieces: GroupNorm, InstanceNorm, PReLU, ConvTranspose2d, ELU, Upsample, Softplus."""

    def __init__(s):
        super().__init__()
        s.e = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.GroupNorm(2, 8), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1),
                            nn.InstanceNorm2d(16, affine=True), nn.PReLU())
        s.d = nn.Sequential(nn.ConvTranspose2d(16, 8, 4, 2, 1), nn.ELU(), nn.Upsample(scale_factor=2),
                            nn.Conv2d(8, 4, 3, 1, 1), nn.LeakyReLU(0.1), nn.Softplus())
        s.fc = nn.Linear(4, 10)

    def forward(s, x):
        return s.fc(s.d(s.e(x)).mean((2, 3)))


class Decoder(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Linear(12, 32)
        s.dec = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
        s.fc = nn.Linear(32, 10)

    def forward(s, x):
        h = s.emb(x)
        return s.fc(s.dec(h, h, tgt_mask=nn.Transformer.generate_square_subsequent_mask(x.shape[1])).mean(1))


class BiGRU(nn.Module):
    def __init__(s):
        super().__init__()
        s.g = nn.GRU(12, 16, num_layers=2, batch_first=True, bidirectional=True)
        s.fc = nn.Linear(32, 10)

    def forward(s, x):
        return s.fc(s.g(x)[0].max(1).values)


T = torchvision.models if torchvision else None
SMALL = (3, 32, 32)
VISION = {} if T is None else {
    "resnet18": (lambda: T.resnet18(num_classes=10), (3, 64, 64)),
    "resnet50": (lambda: T.resnet50(num_classes=10), (3, 64, 64)),
    "resnext50": (lambda: T.resnext50_32x4d(num_classes=10), (3, 64, 64)),
    "mobilenet_v2": (lambda: T.mobilenet_v2(num_classes=10), (3, 64, 64)),
    "mobilenet_v3_small": (lambda: T.mobilenet_v3_small(num_classes=10), (3, 64, 64)),
    "efficientnet_b0": (lambda: T.efficientnet_b0(num_classes=10), (3, 64, 64)),
    "shufflenet_v2": (lambda: T.shufflenet_v2_x0_5(num_classes=10), (3, 64, 64)),
    "squeezenet": (lambda: T.squeezenet1_1(num_classes=10), (3, 64, 64)),
    "densenet121": (lambda: T.densenet121(num_classes=10), (3, 64, 64)),
    "regnet_y_400mf": (lambda: T.regnet_y_400mf(num_classes=10), (3, 64, 64)),
    "mnasnet": (lambda: T.mnasnet0_5(num_classes=10), (3, 64, 64)),
    "convnext_tiny": (lambda: T.convnext_tiny(num_classes=10), (3, 64, 64)),
    "googlenet": (lambda: T.googlenet(num_classes=10, aux_logits=False, init_weights=True), (3, 64, 64)),
    "vit": (lambda: T.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                        mlp_dim=64, num_classes=10), SMALL),
    "swin": (lambda: T.swin_transformer.SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[2], num_heads=[2],
                                                        window_size=[4, 4], num_classes=10), (3, 16, 16)),
    "maxvit": (lambda: T.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                                block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10), SMALL),
}
MODELS = {**VISION, "pieces": (Pieces, (3, 16, 16)), "decoder": (Decoder, (6, 12)), "bigru": (BiGRU, (7, 12)),
          **PIECES}
BATCH = 4


def no_dropout(m):
    for x in m.modules():
        if isinstance(x, nn.Dropout) or type(x).__name__ == "StochasticDepth":
            x.p = 0.0
    return m


def timm_model(name):
    """timm's model NAME (10 classes, no dropout or drop path) and its input shape."""
    import timm
    try:
        m = timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0, drop_path_rate=0.0)
    except TypeError:  # a model without drop path (GhostNet's dropout is functional: drop_rate alone turns it off)
        try:
            m = timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0)
        except TypeError:
            m = timm.create_model(name, pretrained=False, num_classes=10)
    with torch.no_grad():  # weights timm starts at 0 (some heads) would leave little to compare
        for p in m.parameters():
            if p.numel() > 1 and not p.any():
                p.normal_(0.0, 0.02)
    return (lambda: m), tuple(m.pretrained_cfg.get("input_size", (3, 224, 224)))


def sweep_one(dlcc, backend, name, seed, work):
    torch.manual_seed(0)
    ctor, shape = timm_model(name[5:]) if name.startswith("timm/") else MODELS[name]
    model = no_dropout(Head(ctor()))
    model.train()
    x = np.random.RandomState(seed).randn(BATCH, *shape).astype(np.float32)
    t = np.random.RandomState(2).randint(0, 10, BATCH).astype(np.int64)
    data = os.path.join(work, "data")
    os.makedirs(data)
    np.save(os.path.join(data, "x.npy"), x)
    np.save(os.path.join(data, "target.npy"), t)
    onnx_path = os.path.join(work, "m.onnx")
    exported = copy.deepcopy(model)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(exported, torch.from_numpy(x), onnx_path, dynamo=False, input_names=["x"],
                              output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
    except Exception as e:  # noqa: BLE001 - the exporter's refusal is a result to report, not a crash
        return [f"the export failed: {str(e).splitlines()[0][:300]}"], None
    model.load_state_dict(exported.state_dict())  # the export's trace moved the running statistics once
    start = copy.deepcopy(model)
    w0 = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(t))
    loss.backward()
    opt.step()
    saved = os.path.join(work, "w.safetensors")
    r = subprocess.run([dlcc, "train", onnx_path, "--data", data, f"--batch={BATCH}", "--loss=cross_entropy",
                        "--optimizer=sgd", "--lr=1", "--shuffle=false", "--epochs=1", f"--backend={backend}",
                        "--log", os.path.join(work, "log.jsonl"), "--save", saved], capture_output=True, text=True)
    if r.returncode:
        return [f"dlcc train failed: {r.stderr.strip()[-600:]}"], None
    got = json.loads(open(os.path.join(work, "log.jsonl")).readline())["loss"]
    bad = [] if abs(got - loss.item()) <= 1e-4 * abs(loss.item()) else [f"loss: torch {loss.item()}, dlcc {got}"]
    w = load_file(saved)
    params = dict(model.named_parameters())
    gmax = max(np.abs(w0[k] - p.detach().numpy()).max() for k, p in params.items())
    worst = (0.0, "")
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue
        if k not in w:
            bad.append(f"{k}: not in dlcc's state_dict")
            continue
        v = v.detach().numpy()
        a, b = (w0[k] - v, w0[k] - w[k]) if k in params else (v, w[k])
        a, b = a.astype(np.float64), b.astype(np.float64)
        if a.shape != b.shape:
            bad.append(f"{k}: {b.shape}, torch {a.shape}")
            continue
        rel = float(np.abs(a - b).max() / max(1e-3 * gmax, np.abs(a).max()))
        worst = max(worst, (rel, k))
        if rel > 2e-3:
            bad.append(f"{k}: {rel:.3g} of its largest magnitude {np.abs(a).max():.3g}")
    if bad and all(":" in b and "of its largest magnitude" in b or b.startswith("loss:") for b in bad):
        return exact_judge(start, x, t, w0, w, got, model, bad)
    return bad, worst


def exact_judge(start, x, t, w0, w, got, model, bad):
    """Where dlcc and PyTorch's f32 step differ, both against the step in
    f64 (the exact answer, near enough): an ill-conditioned model (a
    ReLU's input within rounding of 0, a near-cancelling batchnorm)
    moves PyTorch's own f32 gradients by percents.  dlcc agrees when no
    tensor of its is further from f64 than 2e-3 or than PyTorch's f32
    step's worst tensor is."""
    m64 = copy.deepcopy(start).double()
    loss64 = nn.functional.cross_entropy(m64(torch.from_numpy(x).double()), torch.from_numpy(t))
    loss64.backward()
    exact = {k: (p.grad.numpy() if p.grad is not None else np.zeros(p.shape)) for k, p in m64.named_parameters()}
    exact.update({k: v.numpy() for k, v in m64.state_dict().items() if k not in exact})
    params = dict(model.named_parameters())
    gmax = max(np.abs(exact[k]).max() for k in params)

    def off(k, value):
        return float(np.abs(value - exact[k]).max() / max(1e-3 * gmax, np.abs(exact[k]).max()))

    def step(k, after):
        return w0[k].astype(np.float64) - after if k in params else after
    keys = [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]
    torch_off = max(off(k, step(k, model.state_dict()[k].detach().numpy().astype(np.float64))) for k in keys)
    dlcc_off = max((off(k, step(k, w[k].astype(np.float64))), k) for k in keys)
    loss_ok = abs(got - loss64.item()) <= 1e-4 * abs(loss64.item())
    if dlcc_off[0] <= max(2e-3, torch_off) and loss_ok:
        return [], (dlcc_off[0], f"{dlcc_off[1]}; against f64: dlcc {dlcc_off[0]:.2g}, torch f32 {torch_off:.2g}")
    return bad + [f"against f64: dlcc {dlcc_off[0]:.3g} ({dlcc_off[1]}), torch f32 {torch_off:.3g}, "
                  f"loss {got} vs {loss64.item()}"], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", default="./dlcc")
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seed", type=int, default=1, help="the batch's seed")
    a = ap.parse_args()
    failed = 0
    for name in a.models.split(","):
        with tempfile.TemporaryDirectory() as work:
            t0 = time.time()
            bad, worst = sweep_one(a.dlcc, a.backend, name, a.seed, work)
            note = f"worst {worst[0]:.2g} ({worst[1]})" if worst and not bad else ""
            print(f"{'ok  ' if not bad else 'FAIL'} {name} on {a.backend} {time.time() - t0:.0f}s {note}" +
                  "".join(f"\n  {b}" for b in bad[:6]), flush=True)
            failed += bool(bad)
    print(f"grad sweep: {'all agree' if not failed else f'{failed} differ'} (torch {torch.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    main()
