# refgrad.fuzz case 5 (generator version 2): 8 ops, 4 leaves, 3 outputs, float32 under autocast(bfloat16): add, div, elu, expand, index_add, select, smooth_l1_loss
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x1, x6, x9, x12):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v2 = x1.select(0, 0)
        v3 = F.elu(v2)
        v4 = x1.unsqueeze(0).expand(3, -1)
        v5 = x1.index_add(0, torch.tensor([2]), x6)
        v7 = v4 / (v4.abs() + 1)
        v8 = v3 / (x6.abs() + 1)
        v10 = x9 + v7
        v11 = F.smooth_l1_loss(v8, x12, reduction='none')
    return v5, v10, v11


def make_inputs():
    return [
        leaf((3,), 9815),  # x1
        leaf((1,), 33495),  # x6
        leaf((3,), 55517),  # x9
        leaf((1,), 60061),  # x12
    ]


if __name__ == "__main__":
    # torch alone: eager's gradients against ENGINE's ("eager", "compiled_autograd:BACKEND",
    # "torch_compile:BACKEND"; default the engine this case was written for), on fresh inputs each.
    import sys

    def gradients(engine):
        inputs = make_inputs()
        kind, _, backend = engine.partition(":")
        if kind == "torch_compile":
            torch._dynamo.reset()
            outputs = torch.compile(program, backend=backend or "inductor")(*inputs)
        else:
            outputs = program(*inputs)
        grads = [torch.ones_like(output) for output in outputs]
        if kind == "compiled_autograd":
            from torch._dynamo import compiled_autograd
            compiled_autograd.reset()
            with compiled_autograd._enable(torch.compile(backend=backend or "aot_eager")):
                torch.autograd.backward(outputs, grads)
        else:
            torch.autograd.backward(outputs, grads)
        return [x.grad for x in inputs]

    engine = sys.argv[1] if len(sys.argv) > 1 else ENGINE
    for i, (e, g) in enumerate(zip(gradients("eager"), gradients(engine))):
        diff = "no grad" if e is None or g is None else f"max|{engine} - eager| = {(g.double() - e.double()).abs().max().item():.3g}"
        print(f"arg{i}: {diff}")
