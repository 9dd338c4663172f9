# refgrad.fuzz case 11 (generator version 3): 5 ops, 2 leaves, 2 outputs, autograd.grad over x5, float32: add_scalar, inplace_mul, mul, prod, slice_step
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x5):
    v2 = x0 * x0
    v3 = v2[::2]
    v4 = v3.clone()
    v4.narrow(0, 0, 1).mul_(x5)
    v6 = v3.prod(0)
    v7 = v4 + 0.5
    return v6, v7


def make_inputs():
    return [
        leaf((3,), 33015),  # x0
        leaf((1,), 55689),  # x5
    ]


# torch.autograd.grad over these leaves (their places in make_inputs()); None: backward() into all
GRAD_INPUTS = [1]  # x5


if __name__ == "__main__":
    # torch alone: eager's gradients against ENGINE's ("eager", "compiled_autograd:BACKEND",
    # "torch_compile:BACKEND"; default the engine this case was written for), on fresh inputs each.
    import sys

    def differentiate(inputs, outputs, grads):
        """backward() into every leaf, or torch.autograd.grad over the leaves GRAD_INPUTS names."""
        if GRAD_INPUTS is None:
            torch.autograd.backward(outputs, grads)
            return [x.grad for x in inputs]
        return list(torch.autograd.grad(outputs, [inputs[i] for i in GRAD_INPUTS], grads, allow_unused=True))

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
                return differentiate(inputs, outputs, grads)
        return differentiate(inputs, outputs, grads)

    engine = sys.argv[1] if len(sys.argv) > 1 else ENGINE
    names = [f"arg{i}" for i in (range(len(make_inputs())) if GRAD_INPUTS is None else GRAD_INPUTS)]
    for name, e, g in zip(names, gradients("eager"), gradients(engine)):
        diff = "no grad" if e is None or g is None else f"max|{engine} - eager| = {(g.double() - e.double()).abs().max().item():.3g}"
        print(f"{name}: {diff}")
