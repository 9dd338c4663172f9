# refgrad.fuzz case 0 (generator version 1): 10 ops, 4 leaves, 3 outputs, float32: div, inplace_mul, inplace_sigmoid, log1p_abs, mean, mul, narrow, reshape, where
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x3, x6, x9):
    v1 = x0.clone()
    v1.select(0, 0).sigmoid_()
    v4 = x3 * v1
    v5 = v4.clone()
    v5.narrow(1, 0, 1).mul_(x6)
    v8 = torch.log1p(v5.abs())
    v10 = v5 / (x9.abs() + 1)
    v11 = x9.mean(1, keepdim=False)
    v12 = torch.where(v10 > 0, v10, v10)
    v13 = v12.reshape((1, 6))
    v15 = torch.where(v13 > 0, v13, v13)
    v16 = v11.narrow(0, 0, 1)
    return v8, v15, v16


def make_inputs():
    return [
        leaf((1, 2, 3), 35120),  # x0
        leaf((1, 2, 3), 54599),  # x3
        leaf((1, 1, 3), 48914),  # x6
        leaf((2, 3), 18201),  # x9
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
