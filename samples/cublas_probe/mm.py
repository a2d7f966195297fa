"""The workload of samples/cublas_probe: fp32 C = A @ B (cuBLAS) on 1024 x
1024 matrices, then C + B (PyTorch's own kernel), 10 times. Prints a
checksum that must not change under cuprobe.

    python3 mm.py [--n N] [--iters K]
"""
import argparse

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    x = torch.randn(a.n, a.n, device="cuda")
    w = torch.randn(a.n, a.n, device="cuda")
    total = 0.0
    for _ in range(a.iters):
        c = x @ w
        d = c + w
        total += d.double().abs().sum().item()
    print("mm: n=%d iters=%d checksum=%.6e" % (a.n, a.iters, total))


if __name__ == "__main__":
    main()
