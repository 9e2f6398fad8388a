#!/usr/bin/env python3
"""Writes the torch.save files test_tensorio.c reads (needs torch; the
files are committed, so the tests do not):

    python3 tests/torchfiles/make.py tests/torchfiles

fc.pt       a 4-8-3 MLP's state_dict (Linear, ReLU, Linear; seed 0)
ckpt.pt     a training checkpoint: {"epoch", "model": that state_dict,
            "optimizer": Adam's state_dict, "lr", "tags"}
views.pt    views of one storage: a transpose, a strided slice, f16,
            bf16 and i64 copies, an empty tensor, a 0-d element, the
            whole tensor (its storage shared with the first two)
whole.pt    torch.save of an nn.Linear module, not its state_dict
complex.pt  a complex64 tensor (a storage type dlcc does not read)
legacy.pt   the format before PyTorch 1.6 (_use_new_zipfile_serialization=False)
proto4.pt   fc.pt's state_dict at pickle protocol 4 (MEMOIZE, FRAME)
extras.pt   a checkpoint whose other entries hold an integer of 64 bits
            unsigned (a seed), a defaultdict and a set
expand.pt   a tensor of 2^28 elements that views one (stride 0)
"""
import collections
import os
import sys

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "."
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
sd = m.state_dict()
torch.save(sd, os.path.join(out, "fc.pt"))
opt = torch.optim.Adam(m.parameters())
torch.save({"epoch": 3, "model": sd, "optimizer": opt.state_dict(), "lr": 0.1, "tags": ["a", 1, 2.5, None, True]},
           os.path.join(out, "ckpt.pt"))
a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
torch.save(collections.OrderedDict([("t", a.t()), ("s", a[1:, ::2]), ("h", a.half()), ("b", a.bfloat16()),
                                    ("i", a.long()), ("z", torch.zeros(0, 3)), ("q", a[2, 3]), ("tie", a)]),
           os.path.join(out, "views.pt"))
torch.save(torch.nn.Linear(2, 2), os.path.join(out, "whole.pt"))
torch.save({"w": torch.zeros(2, 2, dtype=torch.complex64)}, os.path.join(out, "complex.pt"))
torch.save({"w": torch.zeros(2, 2)}, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
torch.save(sd, os.path.join(out, "proto4.pt"), pickle_protocol=4)
torch.save({"state_dict": sd, "seed": 2**64 - 1, "history": collections.defaultdict(list, {"loss": [1.0, 0.5]}),
            "seen": {1, 2}}, os.path.join(out, "extras.pt"))
torch.save({"x": torch.ones(1).expand(2**28)}, os.path.join(out, "expand.pt"))
