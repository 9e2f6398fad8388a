"""PyTorch's ResNet-50 (examples/resnet50.dl's structure: torchvision's
v1.5, written out here so that torchvision is not needed) on the GPU,
next to dlcc's times, for tests/gpu/check.sh.

    python3 torch_bench.py --dlcc FILE [--batches 1,64] [--dtypes f16,bf16,f32]
                           [--compile f16] [--compile-cap S] [--eager-cap S]

FILE holds layer_bench's "model MODE N=B X ms" lines.  Prints one line per
(dtype, batch): PyTorch eager (every configuration in one child process),
torch.compile(mode="max-autotune") where asked and done within the cap
(one child process for all of them, killed at the cap: what it finished
by then is kept), dlcc, and dlcc over torch.compile; then the issue's target (dlcc
within 0.8x of torch.compile at batch 1 and 64 in f16).  GPU time by CUDA
events: a warm-up, then the median of five timings of back-to-back runs.
Exits 0 when torch cannot be imported or sees no GPU (it says so): the
comparison is optional, dlcc's own numbers are not."""
import argparse
import re
import subprocess
import sys
import time

DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def resnet50(torch):
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(width * 4)
            self.downsample = None
            if stride != 1 or cin != width * 4:
                self.downsample = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(width * 4))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (self.downsample(x) if self.downsample is not None else x))

    layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, stride=2, padding=1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def gpu_ms(torch, fn):
    """Median milliseconds of one call: events around back-to-back calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    reps = max(1, min(200, int(20.0 / max(start.elapsed_time(stop), 1e-3))))
    times = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / reps)
    return sorted(times)[2]


def run_configs(configs, compiled):
    """Each "dtype:batch" of configs in this process; prints "dtype batch ms" lines."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for config in configs:
        dtype, batch = config.split(":")
        dt = getattr(torch, DTYPES[dtype])
        fmt = torch.channels_last if dtype != "f32" else torch.contiguous_format
        model = resnet50(torch).eval().to("cuda", dt).to(memory_format=fmt)
        x = torch.randn(int(batch), 3, 224, 224, device="cuda", dtype=dt).to(memory_format=fmt)
        if compiled:
            model = torch.compile(model, mode="max-autotune")
        with torch.inference_mode():
            print("%s %s %.4f" % (dtype, batch, gpu_ms(torch, lambda: model(x))))
        sys.stdout.flush()


def child(configs, compiled, cap):
    """run_configs in a child process killed at cap seconds: {(dtype, batch): ms}, and a note."""
    args = [sys.executable, __file__, "--configs", ",".join(configs)] + (["--compiled"] if compiled else [])
    t0 = time.time()
    out, note = "", ""
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=cap)
        out = r.stdout
        if r.returncode != 0:
            note = "failed: " + ((r.stderr.strip().splitlines() or ["no output"])[-1])[:120]
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        note = "over %d s" % cap
    times = {}
    for line in out.splitlines():
        w = line.split()
        if len(w) == 3:
            times[(w[0], int(w[1]))] = float(w[2])
    return times, note or "%.0f s" % (time.time() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dlcc", default=None)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--dtypes", default="f16,bf16,f32")
    p.add_argument("--compile", default="f16")
    p.add_argument("--compile-cap", type=int, default=90)
    p.add_argument("--eager-cap", type=int, default=120)
    p.add_argument("--configs")
    p.add_argument("--compiled", action="store_true")
    a = p.parse_args()
    if a.configs:
        run_configs(a.configs.split(","), a.compiled)
        return 0
    try:
        import torch
    except Exception as e:  # any failure to import is "no PyTorch here"
        print("torch: n/a (import torch failed: %s)" % e)
        return 0
    if not torch.cuda.is_available():
        print("torch: n/a (torch %s sees no GPU)" % torch.__version__)
        return 0
    dlcc = {}
    if a.dlcc:
        for line in open(a.dlcc):
            m = re.match(r"model (\S+)\s+N=(\d+)\s+([0-9.]+) ms", line)
            if m:
                dlcc[(m.group(1), int(m.group(2)))] = float(m.group(3))
    print("torch %s, %s; eager in channels_last for f16/bf16, TF32 off; ms a run (GPU time)" %
          (torch.__version__, torch.cuda.get_device_name()))
    print("%-5s %5s  %10s  %22s  %10s  %s" % ("dtype", "batch", "eager ms", "compile ms", "dlcc ms", "dlcc/compile"))
    batches = [int(b) for b in a.batches.split(",")]
    configs = ["%s:%d" % (d, b) for d in a.dtypes.split(",") for b in batches]
    eager, enote = child(configs, False, a.eager_cap)
    compiled, cnote = {}, "not asked"
    to_compile = [c for c in configs if c.split(":")[0] in a.compile.split(",")]
    if to_compile:
        compiled, cnote = child(to_compile, True, a.compile_cap)
    met = {}
    for config in configs:
        dtype, batch = config.split(":")[0], int(config.split(":")[1])
        e, c, d = eager.get((dtype, batch)), compiled.get((dtype, batch)), dlcc.get((dtype, batch))
        ratio = d / c if d and c else None
        if dtype == "f16" and ratio is not None:
            met[batch] = ratio <= 0.8
        print("%-5s %5d  %10s  %22s  %10s  %s" % (
            dtype, batch, "%.3f" % e if e else "n/a (%s)" % enote,
            "%.3f" % c if c else "n/a (%s)" % cnote if config in to_compile else "-",
            "%.3f" % d if d else "n/a", "%.2fx" % ratio if ratio else "-"))
    if to_compile:
        print("torch.compile(max-autotune): %s for %s (cap %d s)" % (cnote, ", ".join(to_compile), a.compile_cap))
    for batch in sorted(met):
        print("target (f16, batch %d): dlcc <= 0.8x torch.compile: %s" % (batch, "met" if met[batch] else "NOT MET"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
