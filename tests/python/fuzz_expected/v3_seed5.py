# refgrad.fuzz case 5 (generator version 3): 6 ops, 6 leaves, 3 outputs, float32: batch_norm, conv2d, logsumexp, maximum, pad, where
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x2, x7, w9, w11, w12):
    v3 = torch.maximum(x0, x2)
    v4 = torch.where(v3 > 0, v3, v3)
    v6 = F.pad(x7, (1, 0, 0, 2))
    v8 = F.conv2d(v6, w9, None, stride=2, padding=0)
    v10 = F.batch_norm(v8, torch.zeros(1), torch.ones(1), w11, w12, training=True)
    v13 = torch.logsumexp(w11, 0, keepdim=False)
    return v4, v10, v13


def make_inputs():
    return [
        leaf((3, 1), 30032),  # x0
        leaf((1,), 53681),  # x2
        leaf((2, 1, 3, 4), 43739),  # x7
        leaf((1, 1, 1, 1), 49263),  # w9
        leaf((1,), 46273),  # w11
        leaf((1,), 44284),  # w12
    ]


# torch.autograd.grad over these leaves (their places in make_inputs()); None: backward() into all
GRAD_INPUTS = None


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
