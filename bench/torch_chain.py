"""The torch side of bench_interpreter: y = x * c applied N times to a
1-element float32 tensor, then torch.autograd.grad(y, x). Prints the median
backward time in seconds over RUNS runs (a fresh forward each run; only the
backward is timed)."""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
length, runs = int(sys.argv[1]), int(sys.argv[2])
c = torch.tensor([1.0001])
times = []
for _ in range(runs + 1):  # the first run warms up
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(length):
        y = y * c
    start = time.perf_counter()
    torch.autograd.grad(y, x, torch.ones(1))
    times.append(time.perf_counter() - start)
print(statistics.median(times[1:]))
