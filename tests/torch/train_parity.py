#!/usr/bin/env python3
"""PyTorch training against `dlcc train` on the same model, exported to ONNX.

Each model (a ResNet-style CNN with batchnorm, nn.TransformerEncoderLayer,
a 2-layer nn.LSTM, MobileNet's pieces, Embedding + GRU + LayerNorm, and
constants of the forward with an index buffer and a batchnorm called
twice) is exported in train() with the TorchScript exporter
(torch.onnx.TrainingMode.TRAINING, no constant folding), then trained 4
steps by PyTorch and by `dlcc train MODEL.onnx` from the same weights on
the same batches (cross_entropy, unshuffled).  Checked: each step's loss
(1e-5 relative), and after SGD with momentum and weight decay every
tensor of the state_dict dlcc saves (1e-4 of its largest magnitude):
weights, biases and batchnorm running statistics under PyTorch's names.
So are AdamW's (and with --optimizers, Adam's, Adam with amsgrad,
centered RMSprop with momentum, and Adagrad with its rate's decay), at
2e-4 but for the tensors whose gradient is zero in exact arithmetic (a
key bias under softmax, a convolution's bias before batchnorm): rounding
noise that they scale up to lr.  And for every model, `--val`'s loss
(dlcc's eval model of the training-mode export: dropout off, batchnorm
by its running statistics) against PyTorch's eval() of the weights dlcc
saved (1e-5 relative).  The "drop" model has dropout: its masks come
from dlcc's generator, not PyTorch's, so only its validation is
compared.

    train_parity.py --dlcc BUILD/dlcc [--backend ref|emu] [--models cnn,tf,lstm]
                    [--optimizers sgd,adamw,adam,amsgrad,rmsprop,adagrad,onecycle_sgd,onecycle_adamw,adamw_groups,
                                  cyclic_sgd,cyclic_adam,onecycle_nadam,onecycle_radam,cyclic_adamax,
                                  adamax,adadelta,radam,nadam]
                    [--losses ce,weighted,sum,bce,kl] [--steps 4]

Exits 77 (skip) when torch does not import.
"""
import argparse, copy, json, os, subprocess, sys, tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
except Exception as e:  # noqa: BLE001 - any import failure is a skip
    print(f"SKIP: {e}")
    sys.exit(77)


def load_file(path):
    """A safetensors file's f32, i64 and i32 tensors by name (the format's header and
    data, read here so that the GPU machine needs no safetensors)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    types = {"F32": np.float32, "I64": np.int64, "I32": np.int32}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] not in types:
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + s:8 + n + e], dtype=types[v["dtype"]]).reshape(v["shape"])
    return out


class Block(nn.Module):
    def __init__(s, cin, cout, stride):
        super().__init__()
        s.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        s.b1 = nn.BatchNorm2d(cout)
        s.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        s.b2 = nn.BatchNorm2d(cout)
        s.down = None
        if stride != 1 or cin != cout:
            s.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(s, x):
        y = s.b2(s.c2(torch.relu(s.b1(s.c1(x)))))
        return torch.relu(y + (s.down(x) if s.down is not None else x))


class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        s.bn = nn.BatchNorm2d(8)
        s.l1 = Block(8, 8, 1)
        s.l2 = Block(8, 16, 2)
        s.fc = nn.Linear(16, 10)

    def forward(s, x):
        x = s.l2(s.l1(torch.relu(s.bn(s.stem(x)))))
        return s.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class TF(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Linear(12, 32)
        s.enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        s.fc = nn.Linear(32, 10)

    def forward(s, x):
        return s.fc(s.enc(s.emb(x)).mean(1))


class LSTMNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.lstm = nn.LSTM(12, 24, num_layers=2, batch_first=True)
        s.fc = nn.Linear(24, 10)

    def forward(s, x):
        y, _ = s.lstm(x)
        return s.fc(y[:, -1])


class Mobile(nn.Module):
    """MobileNet's pieces: a depthwise convolution, ReLU6, max and average pooling, GELU."""

    def __init__(s):
        super().__init__()
        s.c = nn.Conv2d(3, 16, 3, 2, 1, bias=False)
        s.bn = nn.BatchNorm2d(16)
        s.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False)
        s.bn2 = nn.BatchNorm2d(16)
        s.pw = nn.Conv2d(16, 24, 1)
        s.fc = nn.Linear(24, 10)

    def forward(s, x):
        x = nn.functional.relu6(s.bn(s.c(x)))
        x = nn.functional.max_pool2d(nn.functional.relu6(s.bn2(s.dw(x))), 2)
        x = nn.functional.gelu(s.pw(x))
        return s.fc(nn.functional.avg_pool2d(x, 4).flatten(1))


class Seq(nn.Module):
    """Tokens: an embedding, a GRU, LayerNorm; the input is float ids cast to long."""

    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(50, 16)
        s.gru = nn.GRU(16, 24, batch_first=True)
        s.ln = nn.LayerNorm(24)
        s.fc = nn.Linear(24, 10)

    def forward(s, x):
        y, _ = s.gru(s.emb(x.long()))
        return s.fc(s.ln(y).mean(1))


class Consts(nn.Module):
    """What is no weight: constants of the forward (TorchScript Constants,
    which dlcc must not train), an index buffer (kept and saved), and a
    batchnorm called twice (its running statistics move twice)."""

    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(3, 8, 3, padding=1)
        s.c2 = nn.Conv2d(8, 8, 3, padding=1)
        s.bn = nn.BatchNorm2d(8)
        s.register_buffer("order", torch.tensor([9, 3, 1, 7, 5, 0, 2, 8, 6, 4]))
        s.fc = nn.Linear(8, 10)

    def forward(s, x):
        x = torch.relu(s.bn(s.c1(x)))
        x = torch.relu(s.bn(s.c2(x)))
        y = s.fc(x.mean((2, 3))) * torch.linspace(0.5, 1.5, 10) + torch.arange(10).float() * 0.1
        return y[:, s.order]


class Drop(nn.Module):
    """Dropout in a CNN head and after an MLP layer, with batchnorm, and a
    residual branch dropped per sample as torchvision's StochasticDepth
    and timm's DropPath do (bernoulli_ and div_: skipped in eval())."""

    def __init__(s):
        super().__init__()
        s.c = nn.Conv2d(3, 8, 3, padding=1)
        s.bn = nn.BatchNorm2d(8)
        s.fc1 = nn.Linear(8, 16)
        s.fc2 = nn.Linear(16, 10)
        s.drop = nn.Dropout(0.25)

    def forward(s, x):
        x = s.drop(torch.relu(s.bn(s.c(x))).mean((2, 3)))
        h = torch.relu(s.fc1(x))
        if s.training:
            h = h * torch.empty(h.shape[0], 1, dtype=h.dtype).bernoulli_(0.8).div_(0.8)
        return s.fc2(nn.functional.dropout(h, 0.5, s.training) + h)


MODELS = {"cnn": (CNN, (3, 16, 16)), "tf": (TF, (6, 12)), "lstm": (LSTMNet, (7, 12)), "mobile": (Mobile, (3, 16, 16)),
          "seq": (Seq, (9,)), "consts": (Consts, (3, 8, 8)),
          "drop": (Drop, (3, 8, 8))}
RANDOM = {"drop"}  # dropout: the training steps draw other masks than PyTorch's
N, B, STEPS = 32, 8, 4


OPTIMIZERS = {
    "adam": (lambda p: torch.optim.Adam(p, lr=0.01), ["--optimizer=adam", "--lr=0.01"]),
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
            ["--optimizer=sgd", "--lr=0.05", "--momentum=0.9", "--weight-decay=1e-4"]),
    "adamw": (lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01),
              ["--optimizer=adamw", "--lr=0.01", "--weight-decay=0.01"]),
    "amsgrad": (lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=1e-4),
                ["--optimizer=adam", "--lr=0.01", "--amsgrad", "--weight-decay=1e-4"]),
    "rmsprop": (lambda p: torch.optim.RMSprop(p, lr=0.001, alpha=0.9, momentum=0.5, centered=True),
                ["--optimizer=rmsprop", "--lr=0.001", "--alpha=0.9", "--momentum=0.5", "--centered"]),
    "adagrad": (lambda p: torch.optim.Adagrad(p, lr_decay=0.1, initial_accumulator_value=0.1),
                ["--optimizer=adagrad", "--lr-decay=0.1", "--initial-accumulator-value=0.1"]),
    # OneCycleLR over the 4 steps: the rate and SGD's momentum / Adam's beta1 cycle
    "onecycle_sgd": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
                     ["--optimizer=sgd", "--lr=0.05", "--momentum=0.9", "--weight-decay=1e-4", "--schedule=onecycle"]),
    "onecycle_adamw": (lambda p: torch.optim.AdamW(p, lr=0.01),
                       ["--optimizer=adamw", "--lr=0.01", "--schedule=onecycle:0.5:10"]),
    # CyclicLR: up 1 step, down 2, halved each cycle; Adam's beta1 cycles too (exp_range)
    "cyclic_sgd": (lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=1e-4),
                   ["--optimizer=sgd", "--lr=0.05", "--weight-decay=1e-4", "--schedule=cyclic:0.01:1/2:triangular2"]),
    "cyclic_adam": (lambda p: torch.optim.Adam(p, lr=0.01),
                    ["--optimizer=adam", "--lr=0.01", "--schedule=cyclic:0.001:2:exp_range:0.9"]),
    # beta1 cycled for the other Adams
    "onecycle_nadam": (lambda p: torch.optim.NAdam(p, lr=0.01), ["--optimizer=nadam", "--lr=0.01", "--schedule=onecycle"]),
    "onecycle_radam": (lambda p: torch.optim.RAdam(p, lr=0.01), ["--optimizer=radam", "--lr=0.01", "--schedule=onecycle"]),
    "cyclic_adamax": (lambda p: torch.optim.Adamax(p, lr=0.01),
                      ["--optimizer=adamax", "--lr=0.01", "--schedule=cyclic:0.001:2:exp_range:0.9"]),
    "adamax": (lambda p: torch.optim.Adamax(p, lr=0.01, weight_decay=1e-4),
               ["--optimizer=adamax", "--lr=0.01", "--weight-decay=1e-4"]),
    "adadelta": (lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.8), ["--optimizer=adadelta", "--rho=0.8"]),
    # RAdam rectifies from step 6 (--steps 8 reaches it)
    "radam": (lambda p: torch.optim.RAdam(p, lr=0.01, weight_decay=0.01, decoupled_weight_decay=True),
              ["--optimizer=radam", "--lr=0.01", "--weight-decay=0.01", "--decoupled-weight-decay"]),
    "nadam": (lambda p: torch.optim.NAdam(p, lr=0.01, weight_decay=1e-4, momentum_decay=0.01),
              ["--optimizer=nadam", "--lr=0.01", "--weight-decay=1e-4", "--momentum-decay=0.01"]),
}
# AdamW with PyTorch's usual two param groups: weight decay on the
# matrices and kernels, none on the biases and norms (the 1-d params,
# passed to dlcc by name, as --no-decay takes them).
GROUPED = {"adamw_groups"}
OPTIMIZERS["adamw_groups"] = (
    lambda named: torch.optim.AdamW([{"params": [p for _, p in named if p.dim() > 1], "weight_decay": 0.05},
                                     {"params": [p for _, p in named if p.dim() <= 1], "weight_decay": 0.0}], lr=0.01),
    ["--optimizer=adamw", "--lr=0.01", "--weight-decay=0.05"])
SCHEDULES = {
    "onecycle_sgd": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=STEPS),
    "onecycle_adamw": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=STEPS, pct_start=0.5,
                                                                    div_factor=10),
    "cyclic_sgd": lambda o: torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.05, step_size_up=1,
                                                              step_size_down=2, mode="triangular2"),
    "cyclic_adam": lambda o: torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=2,
                                                               mode="exp_range", gamma=0.9),
    "onecycle_nadam": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=STEPS),
    "onecycle_radam": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=STEPS),
    "cyclic_adamax": lambda o: torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.001, max_lr=0.01, step_size_up=2,
                                                                 mode="exp_range", gamma=0.9),
}
# These divide each gradient by its own running size, so a gradient that
# is zero in exact arithmetic is rounding noise they scale up to the
# learning rate: a key bias under softmax, a convolution's bias before
# batchnorm (and so the running mean).  Those tensors are not compared
# after them, and the others within 2e-4 (Adam's steps are as large for
# a small gradient as for a large one).
ADAPTIVE = {"adam", "adamw", "amsgrad", "rmsprop", "adagrad", "onecycle_adamw", "adamw_groups", "adamax", "adadelta",
            "radam", "nadam", "cyclic_adam", "onecycle_nadam", "onecycle_radam", "cyclic_adamax"}
NOISE = {"tf": {"enc.self_attn.in_proj_bias"}, "consts": {"c1.bias", "c2.bias", "bn.running_mean"}}


# The loss's variants: PyTorch's keyword arguments and dlcc train's flags
# (cross_entropy's unless HEADS names another loss).
CLASS_W = [0.5, 1.0, 2.0, 0.25, 1.5, 1.0, 0.75, 3.0, 1.25, 0.5]
LOSSES = {
    "ce": ({}, ["--loss=cross_entropy"]),
    "weighted": ({"weight": CLASS_W, "label_smoothing": 0.1},
                 ["--loss=cross_entropy", "--class-weights=" + ",".join(str(w) for w in CLASS_W),
                  "--label-smoothing=0.1"]),
    "sum": ({"reduction": "sum"}, ["--loss=cross_entropy", "--reduction=sum"]),
    "bce": ({}, ["--loss=bce"]),
    "kl": ({"reduction": "batchmean"}, ["--loss=kl_div", "--reduction=batchmean"]),
}
# Losses of probabilities: the function, the model's last op (exported
# with it, so dlcc's loss reads its output), and the targets [N, 10] from
# the class indices: multi-label 0/1 for bce, a soft distribution for kl.
HEADS = {
    "bce": (nn.functional.binary_cross_entropy, torch.sigmoid,
            lambda t: (np.eye(10)[t] + (np.random.RandomState(3).rand(len(t), 10) < 0.2)).clip(0, 1)),
    "kl": (nn.functional.kl_div, lambda y: torch.log_softmax(y, 1),
           lambda t: 0.8 * np.eye(10)[t] + 0.2 * np.random.RandomState(3).dirichlet(np.ones(10), len(t))),
}


def loss_fn(name):
    kw, _ = LOSSES[name]
    kw = dict(kw)
    if "weight" in kw:
        kw["weight"] = torch.tensor(kw["weight"])
    f = HEADS[name][0] if name in HEADS else nn.functional.cross_entropy
    return lambda y, t: f(y, t, **kw)


def headed(cls, lossname):
    """cls with the loss's head after its forward (the same state_dict)."""
    if lossname not in HEADS:
        return cls
    head = HEADS[lossname][1]
    return type(cls.__name__ + "Head", (cls,), {"forward": lambda s, x: head(cls.forward(s, x))})


def optimizer(name, params):
    make, flags = OPTIMIZERS[name]
    return make(params), flags


def run(dlcc, backend, name, optname, work, lossname="ce"):
    torch.manual_seed(0)
    cls, shape = MODELS[name]
    cls = headed(cls, lossname)
    model = cls()
    model.train()
    x = np.random.RandomState(1).randn(N, *shape).astype(np.float32)
    if name == "seq":  # token ids, as floats the model casts
        x = np.random.RandomState(1).randint(0, 50, (N, *shape)).astype(np.float32)
    t = np.random.RandomState(2).randint(0, 10, N).astype(np.int64)
    if lossname in HEADS:
        t = HEADS[lossname][2](t).astype(np.float32)
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    np.save(os.path.join(data, "x.npy"), x)
    np.save(os.path.join(data, "target.npy"), t)
    onnx_path = os.path.join(work, "m.onnx")
    exported = copy.deepcopy(model)
    kw = dict(input_names=["x"], output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
              do_constant_folding=False)
    try:  # the TorchScript exporter: torch before 2.5 has no dynamo argument, later ones default to dynamo
        torch.onnx.export(exported, torch.from_numpy(x[:B]), onnx_path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(exported, torch.from_numpy(x[:B]), onnx_path, **kw)
    model.load_state_dict(exported.state_dict())  # the export's trace moved the running statistics once
    if optname in GROUPED:
        named = list(model.named_parameters())
        opt, flags = optimizer(optname, named)
        flags = flags + ["--no-decay=" + ",".join(n for n, p in named if p.dim() <= 1)]
    else:
        opt, flags = optimizer(optname, model.parameters())
    sched = SCHEDULES[optname](opt) if optname in SCHEDULES else None
    losses = []
    for i in range(STEPS):
        xb, tb = torch.from_numpy(x[i * B:(i + 1) * B]), torch.from_numpy(t[i * B:(i + 1) * B])
        opt.zero_grad()
        loss = loss_fn(lossname)(model(xb), tb)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(loss.item())
    log, saved = os.path.join(work, "log.jsonl"), os.path.join(work, "w.safetensors")
    r = subprocess.run([dlcc, "train", onnx_path, "--data", data, f"--batch={B}"] + flags +
                       LOSSES[lossname][1] +
                       ["--shuffle=false", "--epochs=1", f"--backend={backend}", "--log", log, "--save", saved,
                        "--val", data],
                       capture_output=True, text=True)
    if r.returncode:
        return [f"dlcc train failed: {r.stderr.strip()[-600:]}"]
    got = [json.loads(line)["loss"] for line in open(log) if '"step"' in line]
    val = [json.loads(line)["val_loss"] for line in open(log) if '"val_loss"' in line]
    w = load_file(saved)
    bad = check_eval(cls, w, x, t, val, lossname)
    if name in RANDOM:
        return bad + [f"loss {v} is not finite" for v in got if not np.isfinite(v)]
    if len(got) != STEPS or any(abs(a - b) > 1e-5 * max(1, abs(a)) for a, b in zip(losses, got)):
        bad.append(f"losses: torch {losses}, dlcc {got}")
    # (on cuda, cuBLAS sums in its own order, which Adam-like steps amplify: not measured yet)
    tol = (1e-3 if backend == "cuda" else 2e-4) if optname in ADAPTIVE else 1e-4
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):  # dlcc counts its own steps; the export's trace counted one more
            continue
        if optname in ADAPTIVE and k in NOISE.get(name, ()):
            continue
        v = v.detach().numpy()
        if k not in w:
            bad.append(f"{k}: not in dlcc's checkpoint")
        elif w[k].shape != v.shape or np.abs(w[k] - v).max() > tol * max(1e-3, np.abs(v).max()):
            bad.append(f"{k}: differs by {np.abs(w[k] - v).max():.3g} (largest {np.abs(v).max():.3g})")
    return bad


def check_eval(cls, saved, x, t, val, lossname):
    """dlcc's validation loss after the epoch against PyTorch's eval() of
    the state_dict dlcc saved, over the same samples."""
    model = cls()
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in saved.items()})
    model.eval()
    with torch.no_grad():
        # dlcc's val loss is the mean (kl_div's batchmean: over the samples)
        kw = {k: v for k, v in LOSSES[lossname][0].items() if k != "reduction" or v == "batchmean"}
        if "weight" in kw:
            kw["weight"] = torch.tensor(kw["weight"])
        f = HEADS[lossname][0] if lossname in HEADS else nn.functional.cross_entropy
        want = f(model(torch.from_numpy(x)), torch.from_numpy(t), **kw).item()
    if len(val) != 1 or abs(val[0] - want) > 1e-5 * max(1, abs(want)):
        return [f"validation loss: torch eval() {want}, dlcc {val}"]
    return []


def main():
    global N, STEPS
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlcc", default="./dlcc")
    ap.add_argument("--backend", default="ref")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--optimizers", default="sgd,adamw", help="of " + ",".join(OPTIMIZERS))
    ap.add_argument("--losses", default="ce", help="of " + ",".join(LOSSES))
    ap.add_argument("--steps", type=int, default=STEPS, help="optimizer steps (batches of 8)")
    a = ap.parse_args()
    N, STEPS = a.steps * B, a.steps
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            for optname in a.optimizers.split(","):
                for lossname in a.losses.split(","):
                    work = os.path.join(tmp, f"{name}-{optname}-{lossname}")
                    os.makedirs(work)
                    bad = run(a.dlcc, a.backend, name, optname, work, lossname)
                    print(f"{'ok  ' if not bad else 'FAIL'} {name} {optname}" +
                          (f" {lossname}" if lossname != "ce" else "") + f" on {a.backend}" +
                          "".join(f"\n  {b}" for b in bad))
                    failed += bool(bad)
    print(f"torch training parity: {'all match' if not failed else f'{failed} failed'} (torch {torch.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    import warnings
    warnings.filterwarnings("ignore")
    main()
