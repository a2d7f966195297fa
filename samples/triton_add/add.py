"""A Triton kernel (vector add), launched a known number of times, checked
against PyTorch. Triton compiles the kernel to PTX and a cubin in its cache
directory and loads the cubin: `cuprobe run` finds the PTX there and
instruments the kernel like any other.

    python3 add.py [n] [iterations]      (defaults: 1048576, 5)

Each launch runs ceil(n / 1024) programs of 4 warps (128 threads), so an
entry probe on add_kernel fires iterations * ceil(n / 1024) * 128 times.
"""
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not torch.cuda.is_available():
        print("triton_add: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    for _ in range(iterations):
        add_kernel[grid](x, y, out, n, BLOCK=1024, num_warps=4)
    torch.cuda.synchronize()
    ok = torch.equal(out, x + y)
    print("triton_add: %s n=%d iterations=%d programs=%d" %
          ("OK" if ok else "FAILED", n, iterations, grid[0]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
