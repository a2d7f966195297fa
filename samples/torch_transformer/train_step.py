"""Training steps of a small transformer on the GPU: two encoder layers
(d_model 256, 4 heads, feed-forward 1024) over 8 sequences of 128 tokens,
a regression head, MSE loss and AdamW.

    python3 train_step.py [--compile] [--steps N] [--profile OUT.json]

--compile runs the model through torch.compile: Inductor fuses the
element-wise work, layer norms and softmax into Triton kernels (their PTX
sits in Triton's cache, so `cuprobe run` can instrument them), and leaves
the matrix products to cuBLAS (SASS only: traced, never instrumented).
--profile runs the same steps under torch.profiler and writes
{kernel name: launches}, the reference the GPU tests compare `cuprobe trace`
with. Prints the loss of every step (the same digits with or without
cuprobe).
"""
import argparse
import collections
import json
import sys

import torch


def build_model(dev):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    return torch.nn.Sequential(encoder, torch.nn.Linear(256, 1)).to(dev)


def workload(compile_model, steps):
    dev = "cuda"
    model = build_model(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if compile_model else model
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(8, 128, 256, device=dev, generator=g)
    y = torch.randn(8, 128, 1, device=dev, generator=g)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.cuda.synchronize()
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (Triton kernels)")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default: 2)")
    parser.add_argument("--profile", metavar="OUT.json",
                        help="run under torch.profiler and write kernel launch counts")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("train_step: no CUDA device", file=sys.stderr)
        return 2
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            losses = workload(args.compile, args.steps)
        counts = collections.Counter()
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            if e.name.startswith(("Memcpy", "Memset")):
                continue
            counts[e.name] += 1
        with open(args.profile, "w") as f:
            json.dump(counts, f, indent=1, sort_keys=True)
    else:
        losses = workload(args.compile, args.steps)
    for step, loss in enumerate(losses):
        print("step %d: loss %.5f" % (step, loss))
    return 0


if __name__ == "__main__":
    sys.exit(main())
