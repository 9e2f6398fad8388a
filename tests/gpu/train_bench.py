"""Training throughput for tests/gpu/check.sh: the data dlcc train reads,
and PyTorch's ResNet-18 training step beside dlcc's (issue 15's check).

    python3 train_bench.py --make-data DIR [--n 512] [--hw 64]
    python3 train_bench.py --torch [--batch 64] [--hw 64] [--dtypes f32,bf16]
                           [--compile-cap S]

--make-data writes DIR/x.npy (f32 [n, 3, hw, hw]) and DIR/target.npy (i64
classes in [0, 1000)) from a fixed seed.  --torch prints one line per
(mode, dtype), "torch-train MODE DTYPE S samples/s", for eager and for
torch.compile (one child process for all of it, killed at the cap: what
finished by then is kept): the model is examples/resnet18.dl's (torchvision's
ResNet-18, written out so that torchvision is not needed), the step is
dlcc train's (cross_entropy, SGD with momentum 0.9, lr 0.01), bf16 under
torch.autocast with f32 master weights as dlcc's --precision=bf16.  The
rate is the median of five timings of back-to-back steps after a warm-up,
by CUDA events.  Exits 0 when torch cannot be imported or sees no GPU (it
says so): the comparison is optional, dlcc's own numbers are not."""
import argparse
import subprocess
import sys
import time


def make_data(folder, n, hw):
    import os
    import numpy as np
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    np.save(os.path.join(folder, "x.npy"), rng.standard_normal((n, 3, hw, hw)).astype(np.float32))
    np.save(os.path.join(folder, "target.npy"), rng.integers(0, 1000, n).astype(np.int64))


def resnet18(torch):
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.downsample is None else self.downsample(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.pool = nn.MaxPool2d(3, stride=2, padding=1)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(Basic(cin, cout, stride), Basic(cout, cout, 1)))
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            y = self.pool(torch.relu(self.bn1(self.conv1(x))))
            y = self.layers(y)
            return self.fc(torch.flatten(torch.mean(y, dim=(2, 3)), 1))

    return ResNet18()


def step_ms(torch, step):
    """Median milliseconds of one step: CUDA events around back-to-back steps."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(5):
            step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 5)
    return sorted(times)[2]


def run(dtypes, batch, hw, compiled):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for dtype in dtypes:
        model = resnet18(torch).cuda().train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 3, hw, hw, device="cuda")
        t = torch.randint(0, 1000, (batch,), device="cuda")
        fwd = torch.compile(model) if compiled else model
        low = dtype == "bf16"

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=low):
                loss = torch.nn.functional.cross_entropy(fwd(x), t)
            loss.backward()
            opt.step()

        ms = step_ms(torch, step)
        mode = "compile" if compiled else "eager"
        print("torch-train %s %s %.1f samples/s (%.3f ms a step, batch %d, %dx%d)"
              % (mode, dtype, batch * 1000.0 / ms, ms, batch, hw, hw))
        sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--make-data")
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--hw", type=int, default=64)
    p.add_argument("--torch", action="store_true")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--compile-cap", type=int, default=120)
    p.add_argument("--child", choices=["eager", "compile"])
    a = p.parse_args()
    if a.make_data:
        make_data(a.make_data, a.n, a.hw)
        return 0
    dtypes = a.dtypes.split(",")
    if a.child:
        run(dtypes, a.batch, a.hw, a.child == "compile")
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            print("torch-train: torch sees no GPU; no comparison")
            return 0
    except Exception as e:  # any import failure: the comparison is optional
        print("torch-train: torch does not import (%s); no comparison" % str(e)[:100])
        return 0
    for mode, cap in (("eager", 120), ("compile", a.compile_cap)):
        args = [sys.executable, __file__, "--child", mode, "--batch", str(a.batch), "--hw", str(a.hw),
                "--dtypes", a.dtypes]
        t0 = time.time()
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=cap)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                print("torch-train %s: failed: %s" % (mode, (r.stderr.strip().splitlines() or ["?"])[-1][:160]))
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            sys.stdout.write(out)
            print("torch-train %s: over %d s (what finished is above)" % (mode, cap))
        print("torch-train %s: %.0f s" % (mode, time.time() - t0))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
