# Writes the .npy files tests/train_cli.sh trains on (committed; run again
# only to change them): a 3-class problem on 4 features, 22 training and
# 10 validation samples, and the single bad arrays the error checks
# assemble folders from.
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
r = np.random.default_rng(0)
for d, n in (("data", 22), ("val", 10)):
    os.makedirs(os.path.join(here, d), exist_ok=True)
    x = r.standard_normal((n, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    np.save(os.path.join(here, d, "x.npy"), x)
    np.save(os.path.join(here, d, "target.npy"), y)
bad = os.path.join(here, "bad")
os.makedirs(bad, exist_ok=True)
np.save(os.path.join(bad, "target21.npy"), np.zeros(21, np.int64))
np.save(os.path.join(bad, "x_f64.npy"), np.zeros((22, 4), np.float64))
np.save(os.path.join(bad, "x5.npy"), np.zeros((22, 5), np.float32))
np.save(os.path.join(bad, "x0.npy"), np.zeros((0, 4), np.float32))
np.save(os.path.join(bad, "target0.npy"), np.zeros(0, np.int64))
t = np.zeros(22, np.int64)
t[5] = 3
np.save(os.path.join(bad, "target_class.npy"), t)
# Six samples each for the training examples (examples/train/), so the
# suite trains them a step or two on emu and ref.
for d, shape, classes in (("lenet8", (6, 1, 8, 8), 10), ("seqsign", (6, 16, 1), 2)):
    os.makedirs(os.path.join(here, d), exist_ok=True)
    np.save(os.path.join(here, d, "x.npy"), r.uniform(0, 1, shape).astype(np.float32))
    np.save(os.path.join(here, d, "target.npy"), r.integers(0, classes, 6).astype(np.int64))
# data's targets as i32 class indices and as one-hot probabilities.
y = np.load(os.path.join(here, "data", "target.npy"))
os.makedirs(os.path.join(here, "alt"), exist_ok=True)
np.save(os.path.join(here, "alt", "target_i32.npy"), y.astype(np.int32))
np.save(os.path.join(here, "alt", "target_prob.npy"), np.eye(3, dtype=np.float32)[y])
# tests/dist_cli.sh's CNN with batchnorm: "half" holds two batches of 4
# images, "twice" the same with each batch of 4 repeated, so that 2 ranks
# at a global batch of 8 (each rank the same 4 images, its own batchnorm
# statistics) must equal one process at batch 4 on "half".
half = os.path.join(here, "cnnbn", "half")
twice = os.path.join(here, "cnnbn", "twice")
os.makedirs(half, exist_ok=True)
os.makedirs(twice, exist_ok=True)
x = r.standard_normal((8, 1, 6, 6)).astype(np.float32)
y = r.integers(0, 3, 8).astype(np.int64)
np.save(os.path.join(half, "x.npy"), x)
np.save(os.path.join(half, "target.npy"), y)
np.save(os.path.join(twice, "x.npy"), np.concatenate([x[:4], x[:4], x[4:], x[4:]]))
np.save(os.path.join(twice, "target.npy"), np.concatenate([y[:4], y[:4], y[4:], y[4:]]))
# tests/pipeline_cli.sh's --sync-bn over 2 pipelines of 2 micro-batches:
# "quad" holds each pair of "half" 4 times, so that every micro-batch of
# 2 (and the 2 pipelines' together) has a batch of 8's statistics.
quad = os.path.join(here, "cnnbn", "quad")
os.makedirs(quad, exist_ok=True)
np.save(os.path.join(quad, "x.npy"), np.concatenate([x[:2]] * 4 + [x[2:4]] * 4))
np.save(os.path.join(quad, "target.npy"), np.concatenate([y[:2]] * 4 + [y[2:4]] * 4))
# tests/tp_cli.sh's tokens.dl: 24 samples of 4 ids in [-64, 64) (the
# negative ones read from the end of the table), 3 classes.  Its own
# generator, so that the files above stay as they are.
t = np.random.default_rng(5)
x = t.integers(-64, 64, (24, 4)).astype(np.int64)
os.makedirs(os.path.join(here, "tokens"), exist_ok=True)
np.save(os.path.join(here, "tokens", "x.npy"), x)
np.save(os.path.join(here, "tokens", "target.npy"), ((x % 64).sum(1) % 3).astype(np.int64))
# tests/tp_cli.sh's tied_lm.ir: 24 samples of 4 ids in [-64, 64), each
# one's next "token" of 64 (the sum of its ids), one ignored (-100).
x = t.integers(-64, 64, (24, 4)).astype(np.int64)
y = ((x % 64).sum(1) % 64).astype(np.int64)
y[3] = -100
os.makedirs(os.path.join(here, "lm"), exist_ok=True)
np.save(os.path.join(here, "lm", "x.npy"), x)
np.save(os.path.join(here, "lm", "target.npy"), y)
# tests/tp_cli.sh's seq_lm.dl: 24 sequences of 4 ids in [-64, 64), each
# position's next token (the last: the sum of the sequence's), one
# position ignored (-100).
x = t.integers(-64, 64, (24, 4)).astype(np.int64)
y = np.roll(x % 64, -1, axis=1)
y[:, -1] = (x % 64).sum(1) % 64
y[5, 2] = -100
os.makedirs(os.path.join(here, "seq_lm"), exist_ok=True)
np.save(os.path.join(here, "seq_lm", "x.npy"), x)
np.save(os.path.join(here, "seq_lm", "target.npy"), y.astype(np.int64))
