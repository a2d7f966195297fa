"""A cuBLAS-bound PyTorch loop: fp32 C = A @ B on N x N matrices (cuBLAS
sgemm kernels, SASS only), timed with CUDA events around the loop.

    python3 sgemm_loop.py [--n N] [--iters K]

Prints "sgemm_loop: n=N iters=K seconds=S" on stderr (bench/lib.sh reads
seconds=), and the checksum of C on stdout.
"""
import argparse
import sys

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--iters", type=int, default=50)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    x = torch.randn(a.n, a.n, device="cuda")
    w = torch.randn(a.n, a.n, device="cuda")
    c = x @ w  # warm-up: cuBLAS loads its kernels
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.iters):
        c = x @ w
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    print("%.6e" % c.double().abs().sum().item())
    print("sgemm_loop: n=%d iters=%d seconds=%.6f" % (a.n, a.iters, seconds), file=sys.stderr)


if __name__ == "__main__":
    main()
