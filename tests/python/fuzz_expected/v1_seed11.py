# refgrad.fuzz case 11 (generator version 1): 9 ops, 4 leaves, 3 outputs, float32: cat, div, index_add, inplace_mul_scalar, leaky_relu, sub, sum_all, transpose, unsqueeze
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x4, x7, x12):
    v1 = F.leaky_relu(x0, 0.1)
    v2 = v1.sum()
    v3 = torch.cat([v1, x4], 0)
    v5 = v3.clone()
    v5.transpose(0, 1)[0].mul_(-2.0)
    v6 = v5.transpose(0, 0)
    v8 = x7 / (x0.abs() + 1)
    v9 = v6.unsqueeze(1)
    v10 = x4 - v8
    v11 = v10.index_add(0, torch.tensor([2, 1, 2, 2]), x12)
    return v2, v9, v11


def make_inputs():
    return [
        leaf((3, 2), 46683),  # x0
        leaf((3, 2), 23475),  # x4
        leaf((3, 2), 23774),  # x7
        leaf((4, 2), 61489),  # x12
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
