#!/usr/bin/python3
"""Exact training trajectories for tests/test_optim.c, independent of dlcc:
an MLP and a small CNN with batch norm (training mode), their forward and
backward written out in NumPy (f32, as PyTorch computes), and 3 steps of
torch.optim's single-tensor (foreach=False) SGD, Adam, AdamW (with
amsgrad), RMSprop (centered, with momentum), Adagrad, Adamax, Adadelta,
RAdam and NAdam (each with decoupled weight decay) and maximize, and of
clip_grad_norm_, written from PyTorch's formulas.  Writes
tests/train_ref.h: the initial weights, the batches, the learning rates and
the weights after each run's 3 steps.

    /usr/bin/python3 tests/train_ref.py > tests/train_ref.h
"""
import fnmatch
import sys

import numpy as np

F = np.float32
STEPS = 3


def log_softmax(y):
    m = y.max(axis=1, keepdims=True)
    z = y - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def loss_head(y, t):
    """-mean(sum(log_softmax(y) * t, axis=1)) and its gradient in y."""
    ls = log_softmax(y)
    n = y.shape[0]
    loss = -(ls * t).sum(axis=1).mean()
    # d/dy of -sum(ls * t) / n: (softmax * sum(t) - t) / n
    dy = (np.exp(ls) * t.sum(axis=1, keepdims=True) - t) / F(n)
    return F(loss), dy.astype(F)


def mlp_grads(w, batch):
    x, t = batch
    h_pre = x @ w["fc1.weight"].T + w["fc1.bias"]
    h = np.maximum(h_pre, F(0))
    y = h @ w["fc2.weight"].T + w["fc2.bias"]
    loss, dy = loss_head(y, t)
    g = {"fc2.weight": dy.T @ h, "fc2.bias": dy.sum(axis=0)}
    dh = (dy @ w["fc2.weight"]) * (h_pre > 0)
    g["fc1.weight"] = dh.T @ x
    g["fc1.bias"] = dh.sum(axis=0)
    return loss, g, {}


def im2col(x, k, pad):
    n, c, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, hh, ww), dtype=F)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + hh, j:j + ww]
    return cols


def cnn_grads(w, batch, momentum=0.1, eps=1e-5):
    x, t = batch
    cols = im2col(x, 3, 1)                                   # n c kh kw h w
    z = np.einsum("ockl,nckluv->nouv", w["conv1.weight"], cols).astype(F)
    n, c, hh, ww = z.shape
    cnt = n * hh * ww
    mean = z.mean(axis=(0, 2, 3))
    var = ((z - mean[None, :, None, None]) ** 2).mean(axis=(0, 2, 3))
    inv = F(1) / np.sqrt(var + F(eps))
    xhat = (z - mean[None, :, None, None]) * inv[None, :, None, None]
    bn = xhat * w["bn1.weight"][None, :, None, None] + w["bn1.bias"][None, :, None, None]
    r = np.maximum(bn, F(0))
    p = r.mean(axis=(2, 3))
    y = p @ w["fc.weight"].T + w["fc.bias"]
    loss, dy = loss_head(y, t)
    g = {"fc.weight": dy.T @ p, "fc.bias": dy.sum(axis=0)}
    dp = dy @ w["fc.weight"]
    dr = np.broadcast_to(dp[:, :, None, None] / F(hh * ww), r.shape)
    dbn = dr * (bn > 0)
    g["bn1.weight"] = (dbn * xhat).sum(axis=(0, 2, 3))
    g["bn1.bias"] = dbn.sum(axis=(0, 2, 3))
    dxhat = dbn * w["bn1.weight"][None, :, None, None]
    dz = (inv[None, :, None, None] / F(cnt)) * (
        F(cnt) * dxhat - dxhat.sum(axis=(0, 2, 3))[None, :, None, None]
        - xhat * (dxhat * xhat).sum(axis=(0, 2, 3))[None, :, None, None])
    g["conv1.weight"] = np.einsum("nouv,nckluv->ockl", dz, cols).astype(F)
    unbiased = var * F(cnt / (cnt - 1))
    running = {
        "bn1.running_mean": (F(1 - momentum) * w["bn1.running_mean"] + F(momentum) * mean).astype(F),
        "bn1.running_var": (F(1 - momentum) * w["bn1.running_var"] + F(momentum) * unbiased).astype(F),
    }
    return loss, {k: v.astype(F) for k, v in g.items()}, running


def clip_grad_norm(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_: the global 2-norm of every gradient."""
    total = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values()))
    coef = min(1.0, max_norm / (total + 1e-6))
    return {k: (g * F(coef)).astype(F) for k, g in grads.items()}


def sgd_step(p, g, state, lr, o):
    """torch.optim.sgd._single_tensor_sgd for one param."""
    if o["maximize"]:
        g = -g
    if o["weight_decay"]:
        g = g + F(o["weight_decay"]) * p
    if o["momentum"]:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = g.copy()
        else:
            buf = buf * F(o["momentum"]) + F(1 - o["dampening"]) * g
        state["momentum_buffer"] = buf
        g = g + F(o["momentum"]) * buf if o["nesterov"] else buf
    return (p - F(lr) * g).astype(F)


def decay(p, g, lr, o, decoupled):
    """The gradient's L2 term, or the param's decoupled decay (AdamW's)."""
    wd = o["weight_decay"]
    if o["maximize"]:
        g = -g
    if wd and not decoupled:
        g = g + F(wd) * p
    if wd and decoupled:
        p = p * F(1 - lr * wd)
    return p, g


def adam_step(p, g, state, lr, o, step, decoupled):
    """torch.optim.adam._single_tensor_adam for one param (AdamW: decoupled)."""
    p, g = decay(p, g, lr, o, decoupled)
    b1, b2 = o["beta1"], o["beta2"]
    m = state.get("exp_avg", np.zeros_like(p))
    v = state.get("exp_avg_sq", np.zeros_like(p))
    m = m + (g - m) * F(1 - b1)                       # lerp_
    v = v * F(b2) + F(1 - b2) * g * g                 # mul_, addcmul_
    state["exp_avg"], state["exp_avg_sq"] = m, v
    if o["amsgrad"]:
        v = np.maximum(state.get("max_exp_avg_sq", np.zeros_like(p)), v)
        state["max_exp_avg_sq"] = v
    bc1 = 1 - b1 ** step
    bc2 = 1 - b2 ** step
    step_size = lr / bc1
    denom = np.sqrt(v) / F(np.sqrt(bc2)) + F(o["eps"])
    return (p - F(step_size) * (m / denom)).astype(F)


def rmsprop_step(p, g, state, lr, o):
    """torch.optim.rmsprop._single_tensor_rmsprop for one param."""
    if o["maximize"]:
        g = -g
    if o["weight_decay"]:
        g = g + F(o["weight_decay"]) * p
    alpha = o["alpha"]
    sq = state.get("square_avg", np.zeros_like(p))
    sq = sq * F(alpha) + F(1 - alpha) * g * g          # mul_, addcmul_
    state["square_avg"] = sq
    if o["centered"]:
        a = state.get("grad_avg", np.zeros_like(p))
        a = a + (g - a) * F(1 - alpha)                  # lerp_
        state["grad_avg"] = a
        avg = np.sqrt(sq - a * a)                       # addcmul(value=-1), sqrt_
    else:
        avg = np.sqrt(sq)
    avg = avg + F(o["eps"])
    if o["momentum"] > 0:
        buf = state.get("momentum_buffer", np.zeros_like(p))
        buf = buf * F(o["momentum"]) + g / avg          # mul_, addcdiv_
        state["momentum_buffer"] = buf
        return (p - F(lr) * buf).astype(F)
    return (p - F(lr) * (g / avg)).astype(F)


def adagrad_step(p, g, state, lr, o, step):
    """torch.optim.adagrad._single_tensor_adagrad for one param."""
    if o["maximize"]:
        g = -g
    if o["weight_decay"]:
        g = g + F(o["weight_decay"]) * p
    clr = lr / (1 + (step - 1) * o["lr_decay"])
    s = state.get("sum", np.full_like(p, F(o["init_acc"])))
    s = s + g * g                                       # addcmul_
    state["sum"] = s
    std = np.sqrt(s) + F(o["eps"])
    return (p - F(clr) * (g / std)).astype(F)


def lerp(a, b, w):
    """torch.lerp in f32, as PyTorch's CPU kernel."""
    w = F(w)
    return (a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (F(1) - w)).astype(F)


def adamax_step(p, g, state, lr, o, step):
    """torch.optim.adamax._single_tensor_adamax for one param."""
    p, g = decay(p, g, lr, o, False)
    m = lerp(state.get("exp_avg", np.zeros_like(p)), g, 1 - o["beta1"])
    u = np.maximum(state.get("exp_inf", np.zeros_like(p)) * F(o["beta2"]), np.abs(g) + F(o["eps"]))
    state["exp_avg"], state["exp_inf"] = m, u
    clr = lr / (1 - o["beta1"] ** step)
    return (p + F(-clr) * (m / u)).astype(F)          # addcdiv_


def adadelta_step(p, g, state, lr, o):
    """torch.optim.adadelta._single_tensor_adadelta for one param."""
    p, g = decay(p, g, lr, o, False)
    rho, eps = o["rho"], F(o["eps"])
    sq = state.get("square_avg", np.zeros_like(p)) * F(rho) + F(1 - rho) * g * g
    acc = state.get("acc_delta", np.zeros_like(p))
    delta = np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
    state["square_avg"], state["acc_delta"] = sq, acc * F(rho) + F(1 - rho) * delta * delta
    return (p + F(-lr) * delta).astype(F)


def radam_step(p, g, state, lr, o, step):
    """torch.optim.radam._single_tensor_radam for one param."""
    p, g = decay(p, g, lr, o, o["decoupled"])
    b1, b2 = o["beta1"], o["beta2"]
    m = lerp(state.get("exp_avg", np.zeros_like(p)), g, 1 - b1)
    v = state.get("exp_avg_sq", np.zeros_like(p)) * F(b2) + F(1 - b2) * g * g
    state["exp_avg"], state["exp_avg_sq"] = m, v
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * step * b2 ** step / bc2
    upd = m / F(bc1) * F(lr)
    if rho_t > 5:
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        upd = upd * (F(bc2 ** 0.5) / (np.sqrt(v) + F(o["eps"]))) * F(rect)
    return (p - upd).astype(F)


def nadam_step(p, g, state, lr, o, step):
    """torch.optim.nadam._single_tensor_nadam for one param (its mu_product an f32 tensor)."""
    p, g = decay(p, g, lr, o, o["decoupled"])
    b1, b2, md = o["beta1"], o["beta2"], o["momentum_decay"]
    bc2 = 1 - b2 ** step
    mu = b1 * (1 - 0.5 * 0.96 ** (step * md))
    mu_next = b1 * (1 - 0.5 * 0.96 ** ((step + 1) * md))
    mp = F(state.get("mu_product", F(1)) * F(mu))
    state["mu_product"] = mp
    m = lerp(state.get("exp_avg", np.zeros_like(p)), g, 1 - b1)
    v = state.get("exp_avg_sq", np.zeros_like(p)) * F(b2) + F(1 - b2) * g * g
    state["exp_avg"], state["exp_avg_sq"] = m, v
    denom = np.sqrt(v / F(bc2)) + F(o["eps"])
    p = p + F(-lr * (1 - mu) / (1 - float(mp))) * (g / denom)
    return (p + F(-lr * mu_next / (1 - float(mp) * mu_next)) * (m / denom)).astype(F)


STEPPERS = {"adamax": lambda p, g, st, lr, o, t: adamax_step(p, g, st, lr, o, t),
            "adadelta": lambda p, g, st, lr, o, t: adadelta_step(p, g, st, lr, o),
            "radam": radam_step, "nadam": nadam_step}


def train(model, w0, batches, o0, lrs):
    w = {k: v.copy() for k, v in w0.items()}
    state = {k: {} for k in w}
    grads_of = mlp_grads if model == "mlp" else cnn_grads
    for s in range(STEPS):
        o = dict(o0)
        if o0["moms"]:  # the momentum (SGD, RMSprop) or beta1 (Adam) the host sets this step
            betas = o["kind"] in ("adam", "adamw", "adamax", "radam", "nadam")
            o["beta1" if betas else "momentum"] = float(F(o0["moms"][s]))
        _, g, running = grads_of(w, batches[s])
        if o["clip"]:
            g = clip_grad_norm(g, o["clip"])
        if o0["clip_value"]:  # clip_grad_value_
            g = {k: np.clip(v, F(-o0["clip_value"]), F(o0["clip_value"])) for k, v in g.items()}
        for k in g:
            o = dict(o)
            o["weight_decay"] = 0.0 if o0["no_decay"] and fnmatch.fnmatch(k, o0["no_decay"]) else o0["weight_decay"]
            if o["kind"] == "sgd":
                w[k] = sgd_step(w[k], g[k], state[k], lrs[s], o)
            elif o["kind"] == "rmsprop":
                w[k] = rmsprop_step(w[k], g[k], state[k], lrs[s], o)
            elif o["kind"] == "adagrad":
                w[k] = adagrad_step(w[k], g[k], state[k], lrs[s], o, s + 1)
            elif o["kind"] in STEPPERS:
                w[k] = STEPPERS[o["kind"]](w[k], g[k], state[k], lrs[s], o, s + 1)
            else:
                w[k] = adam_step(w[k], g[k], state[k], lrs[s], o, s + 1, o["kind"] == "adamw")
        w.update(running)
    return w


def opt(kind, lr, **kw):
    o = {"kind": kind, "momentum": 0.0, "dampening": 0.0, "nesterov": 0, "weight_decay": 0.0,
         "beta1": 0.9, "beta2": 0.999, "eps": {"adagrad": 1e-10, "adadelta": 1e-6}.get(kind, 1e-8), "clip": 0.0,
         "lr": lr, "maximize": 0, "amsgrad": 0, "alpha": 0.99, "centered": 0, "lr_decay": 0.0, "init_acc": 0.0,
         "moms": None, "no_decay": None, "clip_value": 0.0, "rho": 0.9, "momentum_decay": 4e-3, "decoupled": 0}
    o.update(kw)
    return o


RUNS = [
    ("sgd", opt("sgd", 0.1)),
    ("sgd_momentum", opt("sgd", 0.1, momentum=0.9, dampening=0.1)),
    ("sgd_nesterov", opt("sgd", 0.1, momentum=0.9, nesterov=1, weight_decay=0.01)),
    ("adam", opt("adam", 0.01, weight_decay=0.01)),
    ("adamw", opt("adamw", 0.01, weight_decay=0.01)),
    ("sgd_clip", opt("sgd", 0.1, momentum=0.5, clip=0.05)),
    ("adam_amsgrad", opt("adam", 0.01, amsgrad=1, weight_decay=0.01)),
    ("adamw_amsgrad_maximize", opt("adamw", 0.01, amsgrad=1, maximize=1)),
    ("rmsprop", opt("rmsprop", 0.01)),
    ("rmsprop_centered", opt("rmsprop", 0.01, alpha=0.9, centered=1, momentum=0.9, weight_decay=0.01)),
    ("rmsprop_momentum", opt("rmsprop", 0.01, momentum=0.5, maximize=1)),
    ("adagrad", opt("adagrad", 0.1)),
    ("adagrad_decay", opt("adagrad", 0.1, lr_decay=0.1, weight_decay=0.01, init_acc=0.1, eps=1e-6)),
    ("sgd_maximize", opt("sgd", 0.1, momentum=0.9, maximize=1)),
    ("sgd_momentum_input", opt("sgd", 0.1, momentum=0.95, nesterov=1, moms=[0.95, 0.9, 0.85])),
    ("adam_beta1_input", opt("adam", 0.01, moms=[0.95, 0.9, 0.85])),
    ("rmsprop_momentum_input", opt("rmsprop", 0.01, momentum=0.95, moms=[0.95, 0.9, 0.85])),
    ("adamw_no_decay", opt("adamw", 0.01, weight_decay=0.5, no_decay="*.bias")),
    ("sgd_no_decay", opt("sgd", 0.1, momentum=0.9, weight_decay=0.1, no_decay="*.bias")),
    ("sgd_clip_value", opt("sgd", 0.1, momentum=0.9, clip_value=0.02)),
    ("adam_clip_value", opt("adam", 0.01, clip_value=0.01)),
    ("adamax", opt("adamax", 0.02, weight_decay=0.01)),
    ("adamax_maximize", opt("adamax", 0.02, beta1=0.3, beta2=0.9, maximize=1)),
    ("adadelta", opt("adadelta", 1.0, weight_decay=0.01)),
    ("adadelta_rho", opt("adadelta", 0.5, rho=0.5, eps=1e-4)),
    ("radam", opt("radam", 0.01, weight_decay=0.01)),
    ("radam_decoupled", opt("radam", 0.01, weight_decay=0.1, decoupled=1, beta1=0.8)),
    ("nadam", opt("nadam", 0.02, weight_decay=0.01)),
    ("nadam_decoupled", opt("nadam", 0.02, weight_decay=0.1, decoupled=1, momentum_decay=0.04, beta2=0.99)),
    # beta1 set each step (OneCycleLR, CyclicLR); below 0.5 lerp takes its other form
    ("adamax_beta1_input", opt("adamax", 0.02, moms=[0.3, 0.9, 0.95])),
    ("radam_beta1_input", opt("radam", 0.01, moms=[0.95, 0.9, 0.85])),
    ("nadam_beta1_input", opt("nadam", 0.02, moms=[0.95, 0.9, 0.3])),
]


def models(rng):
    def u(shape, b):
        return rng.uniform(-b, b, size=shape).astype(F)

    def onehot(n, k):
        t = np.zeros((n, k), dtype=F)
        t[np.arange(n), rng.integers(0, k, size=n)] = 1
        return t

    mlp = {"fc1.weight": u((5, 6), 0.4), "fc1.bias": u((5,), 0.4),
           "fc2.weight": u((3, 5), 0.45), "fc2.bias": u((3,), 0.45)}
    mlp_batches = [(u((4, 6), 1.0), onehot(4, 3)) for _ in range(STEPS)]
    cnn = {"conv1.weight": u((3, 2, 3, 3), 0.24), "bn1.weight": (1 + u((3,), 0.2)),
           "bn1.bias": u((3,), 0.1), "bn1.running_mean": u((3,), 0.1),
           "bn1.running_var": (1 + u((3,), 0.2)),
           "fc.weight": u((3, 3), 0.58), "fc.bias": u((3,), 0.58)}
    cnn_batches = [(u((4, 2, 5, 5), 1.0), onehot(4, 3)) for _ in range(STEPS)]
    return [("mlp", mlp, mlp_batches), ("cnn", cnn, cnn_batches)]


def c_array(name, a):
    flat = ", ".join("%.9g" % v for v in np.asarray(a, dtype=F).ravel())
    return "static const float %s[%d] = {%s};\n" % (name, a.size, flat)


def main():
    rng = np.random.default_rng(20261203)
    out = sys.stdout
    out.write("/* Generated by tests/train_ref.py (NumPy %s); do not edit.  The\n"
              " * weights after 3 steps of PyTorch's optimizers, for test_optim.c. */\n\n"
              % np.__version__)
    out.write("typedef struct RefTensor {\n  const char *name;\n  int n;\n  const float *v;\n} RefTensor;\n\n")
    out.write("typedef struct RefRun {\n  const char *model, *name, *kind;\n"
              "  double momentum, dampening;\n  int nesterov;\n  double weight_decay, beta1, beta2, eps, clip;\n"
              "  int maximize, amsgrad;\n  double alpha;\n  int centered;\n  double lr_decay, init_acc;\n"
              "  float lr[%d];\n  int momentum_input;\n  float moms[%d]; /* with momentum_input, each step's */\n"
              "  const char *no_decay;\n  double clip_value, rho, momentum_decay;\n  int decoupled;\n"
              "  const RefTensor *final;\n} RefRun;\n\n"
              % (STEPS, STEPS))
    runs = []
    for model, w0, batches in models(rng):
        for k, v in w0.items():
            out.write(c_array("%s_init_%s" % (model, k.replace(".", "_")), v))
        for s, (x, t) in enumerate(batches):
            out.write(c_array("%s_x%d" % (model, s), x))
            out.write(c_array("%s_t%d" % (model, s), t))
        out.write("static const RefTensor %s_init[] = {\n" % model)
        for k, v in w0.items():
            out.write('  {"%s", %d, %s_init_%s},\n' % (k, v.size, model, k.replace(".", "_")))
        out.write("  {0}};\n")
        out.write("static const float *const %s_x[%d] = {%s};\n" % (model, STEPS, ", ".join(
            "%s_x%d" % (model, s) for s in range(STEPS))))
        out.write("static const float *const %s_t[%d] = {%s};\n\n" % (model, STEPS, ", ".join(
            "%s_t%d" % (model, s) for s in range(STEPS))))
        for name, o in RUNS:
            lrs = [o["lr"] * (1 - 0.2 * s) for s in range(STEPS)]  # a schedule the host sets
            w = train(model, w0, batches, o, lrs)
            tag = "%s_%s" % (model, name)
            for k, v in w.items():
                out.write(c_array("%s_%s" % (tag, k.replace(".", "_")), v))
            out.write("static const RefTensor %s_final[] = {\n" % tag)
            for k, v in w.items():
                out.write('  {"%s", %d, %s_%s},\n' % (k, v.size, tag, k.replace(".", "_")))
            out.write("  {0}};\n\n")
            moms = o["moms"] or [0.0] * STEPS
            runs.append('  {"%s", "%s", "%s", %r, %r, %d, %r, %r, %r, %r, %r, %d, %d, %r, %d, %r, %r, {%s}, '
                        '%d, {%s}, %s, %r, %r, %r, %d, %s_final},\n' % (
                model, name, o["kind"], o["momentum"], o["dampening"], o["nesterov"], o["weight_decay"],
                o["beta1"], o["beta2"], o["eps"], o["clip"], o["maximize"], o["amsgrad"], o["alpha"],
                o["centered"], o["lr_decay"], o["init_acc"],
                ", ".join("%#.9gf" % F(lr) for lr in lrs), o["moms"] is not None,
                ", ".join("%#.9gf" % F(m) for m in moms),
                '"%s"' % o["no_decay"] if o["no_decay"] else "NULL", o["clip_value"], o["rho"],
                o["momentum_decay"], o["decoupled"], tag))
    out.write("static const RefRun ref_runs[] = {\n%s};\n" % "".join(runs))


if __name__ == "__main__":
    main()
