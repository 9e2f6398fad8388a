#!/usr/bin/python3
"""Expected values of PyTorch's losses for tests/test_loss.c, written
from PyTorch's documented formulas in NumPy (torch itself is not
installed here): torch.nn.functional.cross_entropy, nll_loss, mse_loss,
l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy_with_logits,
binary_cross_entropy and kl_div with their reduction, ignore_index,
label_smoothing, beta, delta, class weight, pos_weight and log_target
(checked against torch 2.15 by hand: 1e-15).  Writes the inputs and
the expected results, in double, as a C header:

    /usr/bin/python3 tests/loss_ref.py > tests/loss_expected.h
"""
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

rng = np.random.default_rng(20261203)


def log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def reduce(per, reduction, divisor=None):
    if reduction == "none":
        return per
    if reduction == "sum":
        return np.array(per.sum())
    if reduction == "batchmean":
        return np.array(per.sum() / (per.shape[0] if per.ndim else 1))
    return np.array(per.sum() / (per.size if divisor is None else divisor))


def nll(logp, t, ignore, reduction, w=None):
    """F.nll_loss: -w[t_n] logp[n, t_n, d...] where t != ignore_index; the
    mean divides by the sum of w[t_n] over those, their count without w
    (0 / 0 = NaN when none)."""
    cls = 1 if logp.ndim >= 2 else 0
    valid = t != ignore
    safe = np.where(valid, t, 0)
    picked = np.take_along_axis(logp, np.expand_dims(safe, cls), axis=cls).squeeze(cls)
    wt = np.where(valid, 1.0 if w is None else w[safe], 0.0)
    per = -picked * wt
    with np.errstate(invalid="ignore"):
        return reduce(per, reduction, wt.sum()), valid, wt


def class_shape(w, x, cls):
    """w [C] broadcast along the class axis of x."""
    return w.reshape((-1,) + (1,) * (x.ndim - cls - 1))


def cross_entropy(x, t, ignore=-100, eps=0.0, reduction="mean", w=None):
    cls = 1 if x.ndim >= 2 else 0
    C = x.shape[cls]
    lsm = log_softmax(x, cls)
    lw = lsm if w is None else lsm * class_shape(w, x, cls)
    if t.dtype.kind == "f":
        # probabilities: smoothed toward uniform, mean over positions
        tt = t * (1 - eps) + eps / C
        per = -(lw * tt).sum(axis=cls)
        return reduce(per, reduction, x.size // C)
    loss, valid, wt = nll(lsm, t, ignore, reduction, w)
    if eps == 0:
        return loss
    smooth = np.where(valid, -lw.sum(axis=cls), 0.0)
    with np.errstate(invalid="ignore"):
        smooth = reduce(smooth, reduction, wt.sum())
    return (1 - eps) * loss + eps / C * smooth


def smooth_l1(x, y, beta, reduction):
    z = np.abs(x - y)
    per = z if beta == 0 else np.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)
    return reduce(per, reduction)


def huber(x, y, delta, reduction):
    z = np.abs(x - y)
    return reduce(np.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta)), reduction)


def bce_with_logits(x, y, reduction, pw=None):
    if pw is None:
        per = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
    else:
        per = (1 - y) * x + (1 + (pw - 1) * y) * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0))
    return reduce(per, reduction)


def bce(x, y, reduction):
    """F.binary_cross_entropy: each log clamped at -100 (PyTorch computes log(1 - x), not log1p)."""
    with np.errstate(divide="ignore"):
        per = -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log(1 - x), -100))
    return reduce(per, reduction)


def kl_div(x, y, reduction, log_target=False):
    """F.kl_div: xlogy(y, y) - y x (0 where y is 0), or exp(y) (y - x) with log_target."""
    if log_target:
        per = np.exp(y) * (y - x)
    else:
        per = np.where(y > 0, y * np.log(np.where(y > 0, y, 1)), 0) - y * x
    return reduce(per, reduction)


cases = []  # (name, kind, reduction, ignore, eps, beta, x, t, want, w, log_target)


def add(name, kind, reduction, x, t, want, ignore=-100, eps=0.0, beta=1.0, w=None, log_target=False):
    cases.append((name, kind, reduction, ignore, eps, beta, x, t, np.asarray(want, dtype=np.float64),
                  np.zeros(0) if w is None else w, log_target))


x45 = rng.normal(0, 2, (4, 5))
t4 = np.array([3, -100, 0, 4], dtype=np.int64)
for red in ("mean", "sum", "none"):
    add("cross_entropy " + red, "LOSS_CROSS_ENTROPY", red, x45, t4, cross_entropy(x45, t4, reduction=red))
    add("cross_entropy label_smoothing 0.2 " + red, "LOSS_CROSS_ENTROPY", red, x45, t4,
        cross_entropy(x45, t4, eps=0.2, reduction=red), eps=0.2)
    logp = log_softmax(x45, 1)
    add("nll_loss " + red, "LOSS_NLL", red, logp, t4, nll(logp, t4, -100, red)[0])
t4b = np.array([2, 1, 2, 0], dtype=np.int64)
add("cross_entropy ignore_index 2", "LOSS_CROSS_ENTROPY", "mean", x45, t4b,
    cross_entropy(x45, t4b, ignore=2), ignore=2)
tall = np.array([-100, -100, -100, -100], dtype=np.int64)
add("cross_entropy all ignored", "LOSS_CROSS_ENTROPY", "mean", x45, tall, cross_entropy(x45, tall))
add("cross_entropy all ignored label_smoothing", "LOSS_CROSS_ENTROPY", "mean", x45, tall,
    cross_entropy(x45, tall, eps=0.1), eps=0.1)
x243 = rng.normal(0, 1.5, (2, 4, 3))
t23 = np.array([[0, 3, 1], [-100, 2, 3]], dtype=np.int64)
add("cross_entropy [N, C, d]", "LOSS_CROSS_ENTROPY", "mean", x243, t23, cross_entropy(x243, t23))
add("cross_entropy [N, C, d] label_smoothing 0.3 none", "LOSS_CROSS_ENTROPY", "none", x243, t23,
    cross_entropy(x243, t23, eps=0.3, reduction="none"), eps=0.3)
x5 = rng.normal(0, 1, (5,))
add("cross_entropy unbatched", "LOSS_CROSS_ENTROPY", "mean", x5, np.array(2, dtype=np.int64),
    cross_entropy(x5, np.array(2, dtype=np.int64)))
p45 = rng.random((4, 5))
p45 /= p45.sum(axis=1, keepdims=True)
for red in ("mean", "none"):
    add("cross_entropy probabilities " + red, "LOSS_CROSS_ENTROPY", red, x45, p45,
        cross_entropy(x45, p45, reduction=red))
add("cross_entropy probabilities label_smoothing 0.1", "LOSS_CROSS_ENTROPY", "mean", x243, np.abs(x243) / 3,
    cross_entropy(x243, np.abs(x243) / 3, eps=0.1), eps=0.1)

a34 = rng.normal(0, 1.5, (3, 4))
b34 = rng.normal(0, 1.5, (3, 4))
b34[0, 0] = a34[0, 0]  # a zero difference
y34 = (rng.random((3, 4)) < 0.5).astype(np.float64)
y34[1, 1] = 0.3  # soft labels are allowed
a34b = a34.copy()
a34b[2, 3] = 40.0  # a large logit: exp(-|x|) underflows nothing
a34b[2, 2] = -40.0
for red in ("mean", "sum", "none"):
    add("mse_loss " + red, "LOSS_MSE", red, a34, b34, reduce((a34 - b34) ** 2, red))
    add("l1_loss " + red, "LOSS_L1", red, a34, b34, reduce(np.abs(a34 - b34), red))
    add("smooth_l1_loss " + red, "LOSS_SMOOTH_L1", red, a34, b34, smooth_l1(a34, b34, 1.0, red))
    add("binary_cross_entropy_with_logits " + red, "LOSS_BCE_WITH_LOGITS", red, a34b, y34,
        bce_with_logits(a34b, y34, red))
add("smooth_l1_loss beta 0.5", "LOSS_SMOOTH_L1", "mean", a34, b34, smooth_l1(a34, b34, 0.5, "mean"), beta=0.5)
add("smooth_l1_loss beta 0 (l1)", "LOSS_SMOOTH_L1", "none", a34, b34, smooth_l1(a34, b34, 0.0, "none"), beta=0.0)
for red in ("mean", "sum"):
    add("huber_loss " + red, "LOSS_HUBER", red, a34, b34, huber(a34, b34, 1.0, red))
add("huber_loss delta 0.7 none", "LOSS_HUBER", "none", a34, b34, huber(a34, b34, 0.7, "none"), beta=0.7)

# Class weights (weight=) and positives' weights (pos_weight=).
w5 = rng.uniform(0.2, 2.0, 5)
for red in ("mean", "sum", "none"):
    add("cross_entropy weight " + red, "LOSS_CROSS_ENTROPY", red, x45, t4, cross_entropy(x45, t4, reduction=red, w=w5),
        w=w5)
    add("nll_loss weight " + red, "LOSS_NLL", red, logp, t4, nll(logp, t4, -100, red, w5)[0], w=w5)
add("cross_entropy weight label_smoothing 0.2", "LOSS_CROSS_ENTROPY", "mean", x45, t4,
    cross_entropy(x45, t4, eps=0.2, w=w5), eps=0.2, w=w5)
add("cross_entropy weight probabilities label_smoothing 0.1", "LOSS_CROSS_ENTROPY", "mean", x45, p45,
    cross_entropy(x45, p45, eps=0.1, w=w5), eps=0.1, w=w5)
w4 = rng.uniform(0.2, 2.0, 4)
t23b = np.array([[0, 3, 1], [1, 2, 3]], dtype=np.int64)
add("cross_entropy weight [N, C, d] ignore_index 1", "LOSS_CROSS_ENTROPY", "mean", x243, t23b,
    cross_entropy(x243, t23b, ignore=1, w=w4), ignore=1, w=w4)
pw4 = rng.uniform(0.5, 3.0, 4)
for red in ("mean", "none"):
    add("binary_cross_entropy_with_logits pos_weight " + red, "LOSS_BCE_WITH_LOGITS", red, a34b, y34,
        bce_with_logits(a34b, y34, red, pw4), w=pw4)

# Probabilities: binary_cross_entropy, and kl_div of log-probabilities.
q34 = rng.uniform(0.02, 0.98, (3, 4))
for red in ("mean", "sum"):
    add("binary_cross_entropy " + red, "LOSS_BCE", red, q34, y34, bce(q34, y34, red))
q34b = q34.copy()
q34b[0, 0], q34b[0, 1], q34b[1, 1], q34b[2, 2] = 0.0, 1.0, 1e-50, 1.0  # the clamps: log 0 counts -100
y34b = y34.copy()
y34b[0, 0], y34b[0, 1], y34b[2, 2] = 1.0, 0.0, 1.0
add("binary_cross_entropy at 0 and 1 none", "LOSS_BCE", "none", q34b, y34b, bce(q34b, y34b, "none"))
lq45 = log_softmax(x45, 1)
p45z = p45.copy()
p45z[1, 2] = 0.0  # a zero probability adds 0
for red in ("mean", "sum", "batchmean", "none"):
    add("kl_div " + red, "LOSS_KL_DIV", red, lq45, p45z, kl_div(lq45, p45z, red))
lp243 = log_softmax(x243, 1)
add("kl_div log_target batchmean", "LOSS_KL_DIV", "batchmean", lp243, log_softmax(np.abs(x243), 1),
    kl_div(lp243, log_softmax(np.abs(x243), 1), "batchmean", True), log_target=True)


def arr(v):
    v = np.asarray(v).ravel()
    return "{" + ", ".join("NAN" if np.isnan(e) else repr(float(e)) for e in v) + "}"


def dims(a):
    return "{" + ", ".join(str(d) for d in a.shape) + "}" if a.ndim else "{0}"


print("/* Generated by tests/loss_ref.py (NumPy, PyTorch's formulas); do not edit. */")
print("static const LossCase loss_cases[] = {")
for name, kind, red, ignore, eps, beta, x, t, want, w, log_target in cases:
    red_c = {"mean": "LOSS_MEAN", "sum": "LOSS_SUM", "none": "LOSS_NONE", "batchmean": "LOSS_BATCHMEAN"}[red]
    tdt = "TY_I64" if t.dtype.kind == "i" else "TY_F64"
    print("    {\"%s\", %s, %s, %d, %r, %r,\n     %d, %s, (const double[])%s,\n     %d, %s, %s, (const double[])%s,\n"
          "     %d, (const double[])%s, %d, %s, %s}," % (name, kind, red_c, ignore, eps, beta, x.ndim, dims(x), arr(x),
                                                     t.ndim, dims(t), tdt, arr(t), want.size, arr(want), w.size,
                                                     "(const double[])" + arr(w) if w.size else "NULL",
                                                     "true" if log_target else "false"))
print("};")
