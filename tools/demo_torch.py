"""make demo, the main part: a transformer block from torch, checked against refgrad's oracle.

1. capture the backward of one nn.TransformerEncoderLayer forward as a refgrad program;
2. print the head of that program;
3. step through its first three instructions in refgrad's Machine;
4. run the whole program (the oracle, in float64);
5. check torch's eager autograd and compiled autograd (aot_eager) against it, and print the report.
"""
import time

import torch
from torch import nn

import refgrad


class BlockLoss(nn.Module):
    """One pre-norm transformer block and a loss: the mean square of its output."""

    def __init__(self):
        super().__init__()
        self.block = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)

    def forward(self, x):
        return (self.block(x) ** 2).mean()


def heading(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m")


def main() -> None:
    start = time.perf_counter()
    torch.manual_seed(0)
    model, x = BlockLoss(), torch.randn(2, 6, 16)

    heading("1. Capture the backward of a transformer block (torch 2.13, float32)")
    loss = model(x)
    captured = refgrad.torch.capture(loss, names=dict(model.named_parameters()))
    print(captured)

    heading("2. The head of its program (refgrad's text form; `refgrad dis` prints the same)")
    lines = str(captured.program).splitlines()
    code = lines.index("code")
    print("\n".join(lines[:6] + ["  ..."] + lines[code:code + 10] + ["  ..."]))

    heading("3. Step through the first three instructions")
    machine = captured.machine("float32")
    for _ in range(3):
        print(f"pc {machine.pc}: {machine.instruction_text(machine.pc).strip()}")
        machine.step()
        for register in machine.live_registers():
            value = machine.register_value(register)
            print(f"    %{register} = {value.dtype}{list(value.shape)}")

    heading("4. Run the oracle: the whole program, promoted to float64")
    grads = captured.run("float64")
    for name in sorted(grads)[:4]:
        print(f"  {name:<32} |grad| = {grads[name].norm():.6f}")
    print(f"  ... {len(grads)} gradients")

    heading("5. Check eager autograd and compiled autograd (aot_eager) against the oracle")
    report = refgrad.check(model, x, engines=("eager", "compiled_autograd"))
    print(report)
    print(f"\n(demo took {time.perf_counter() - start:.0f} s; docs/check.md explains the report)")


if __name__ == "__main__":
    main()
