"""Peak memory of the oracle's run against torch's eager backward (make bench).

For each model of refgrad.zoo.MID_SIZE and dtype, two fresh processes (so that neither side sees the
other's freed memory): one runs the forward and then loss.backward(), the other the forward, a capture and
then the captured program in refgrad's Machine (as captured). Each reads the process's peak resident
memory (VmHWM) reset just before the backward (`echo 5 > /proc/self/clear_refs`) and reports how far it
rose above the resident memory at that moment: the memory the backward itself needed (grads, temporaries,
refgrad's registers and its cache of freed buffers). Both sides run on one thread.

    .venv/bin/python bench/memory.py [--models cnn_mid,transformer_mid]
"""
from __future__ import annotations

import argparse
import subprocess
import sys

DTYPES = ("float32", "float64")


def resident_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_one(model_name: str, dtype_name: str, side: str) -> int:
    """Bytes the backward added to the peak resident memory, in this process."""
    import torch

    import refgrad
    import refgrad.torch as rt
    from refgrad.zoo import MID_SIZE

    torch.set_num_threads(1)
    refgrad.set_num_threads(1)
    model, forward = MID_SIZE[model_name](getattr(torch, dtype_name))
    loss = forward(model)
    if side == "torch":
        run = loss.backward
    else:
        captured = rt.capture(loss, names=dict(model.named_parameters()))
        del loss
        run = lambda: captured.run("as_captured")  # noqa: E731
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak starts again from the memory resident now
    before = resident_kib("VmRSS")
    run()
    return (resident_kib("VmHWM") - before) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp_wide,cnn_mid,transformer_mid")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "DTYPE", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(measure_one(*args.one))
        return
    print("peak memory added by the backward (MiB), one thread, each side in a fresh process")
    print(f"{'model':<16} {'dtype':<8} {'torch':>8} {'oracle':>8} {'oracle/torch':>12}")
    for model_name in args.models.split(","):
        for dtype_name in DTYPES:
            peaks = {}
            for side in ("torch", "oracle"):
                result = subprocess.run([sys.executable, __file__, "--one", model_name, dtype_name, side],
                                        capture_output=True, text=True, check=True)
                peaks[side] = int(result.stdout.split()[-1])
            print(f"{model_name:<16} {dtype_name:<8} {peaks['torch'] / 2**20:>8.1f} {peaks['oracle'] / 2**20:>8.1f} "
                  f"{peaks['oracle'] / max(peaks['torch'], 1):>12.2f}", flush=True)


if __name__ == "__main__":
    main()
