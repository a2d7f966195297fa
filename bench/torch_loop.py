"""A launch-bound PyTorch loop, timed inside the process.

    python3 torch_loop.py [--iters N] [--profiler] [--range]

--profiler wraps the timed loop in torch.profiler (CUDA activity), the
in-framework baseline cuprobe is compared with. --range runs the timed loop
between torch.cuda.profiler.start() and stop() (what `cuprobe trace -c
cudaProfilerApi` traces). Prints
"torch_loop: iters=N seconds=S".
"""
import argparse
import sys
import time

import torch


def step(x, w):
    y = torch.relu(x @ w)
    return (y * 0.5 + 1.0).sum()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--profiler", action="store_true")
    p.add_argument("--range", action="store_true")
    a = p.parse_args()
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    for _ in range(50):
        step(x, w)
    torch.cuda.synchronize()
    if a.profiler:
        from torch.profiler import ProfilerActivity, profile
        ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    else:
        import contextlib
        ctx = contextlib.nullcontext()
    with ctx:
        t0 = time.perf_counter()
        if a.range:
            torch.cuda.profiler.start()
        for _ in range(a.iters):
            step(x, w)
        torch.cuda.synchronize()
        if a.range:
            torch.cuda.profiler.stop()
        seconds = time.perf_counter() - t0
    print("torch_loop: iters=%d seconds=%.6f" % (a.iters, seconds), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
