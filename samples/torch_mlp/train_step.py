"""A small PyTorch workload: a matmul, a relu, a sum, and one training step of
a small MLP, on the GPU.

    python3 train_step.py                    # run it (under `cuprobe trace`)
    python3 train_step.py --profile OUT.json # run it under torch.profiler and
                                             # write {kernel name: launches}
    python3 train_step.py --range [--profile OUT.json]

The second form is the reference the GPU tests compare `cuprobe trace` with.
With --range the workload also runs once before and once after the measured
run, with a sort, and the measured run lies between torch.cuda.profiler.start()
and stop(): `cuprobe trace -c cudaProfilerApi` must then see exactly what
torch.profiler sees of the measured run.
"""
import argparse
import collections
import json
import sys

import torch


def workload():
    torch.manual_seed(0)
    dev = "cuda"
    a = torch.randn(512, 512, device=dev)
    b = torch.randn(512, 512, device=dev)
    c = a @ b
    r = torch.relu(c)
    s = r.sum()
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    return float(s), float(loss)


def outside():
    """Work outside the measured run: the workload itself and a sort, whose
    kernels the measured run does not launch."""
    workload()
    torch.sort(torch.randn(4096, device="cuda"))
    torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", metavar="OUT.json",
                        help="run under torch.profiler and write kernel launch counts")
    parser.add_argument("--range", action="store_true",
                        help="run the workload outside a profiler range too")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("train_step: no CUDA device", file=sys.stderr)
        return 2
    if args.range:
        outside()
        torch.cuda.profiler.start()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            result = workload()
        counts = collections.Counter()
        for e in prof.events():
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            if e.name.startswith(("Memcpy", "Memset")):
                continue
            counts[e.name] += 1
        with open(args.profile, "w") as f:
            json.dump(dict(counts), f, indent=1, sort_keys=True)
    else:
        result = workload()
    if args.range:
        torch.cuda.profiler.stop()
        outside()
    print("train_step: OK sum=%.3f loss=%.4f" % result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
