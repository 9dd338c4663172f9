# refgrad.fuzz case 0 (generator version 3): 16 ops, 9 leaves, 3 outputs, autograd.grad over x0, w3, w6, x10, float32 under autocast(float16): add, inplace_mul_scalar, inplace_sigmoid, layer_norm, linear, matmul, max_dim, sdpa, select, silu, stack, sub, sum
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, w2, w3, w6, x8, x10, x16, x20, x22):
    with torch.autocast("cpu", dtype=torch.float16):
        v1 = F.layer_norm(x0, (2,), w2, w3)
        v4 = v1.sum(0, keepdim=False)
        v5 = F.linear(v4, w6)
        v7 = v5.clone()
        v7.sigmoid_()
        v9 = x8 + v7
        v11 = x10 + v9
        v12 = x10.clone()
        v12.mul_(-2.0)
        v13 = v11.max(0).values
        v14 = F.silu(v11)
        v15 = torch.matmul(v4, x16)
        v17 = v15 + v13
        v18 = v17.select(0, 1)
        v19 = F.scaled_dot_product_attention(x20, x20, x20, is_causal=False)
        v21 = torch.matmul(v19, x22)
        v23 = torch.stack([x10, v12], 1)
        v24 = v21 - v18
    return v14, v23, v24


def make_inputs():
    return [
        leaf((3, 2), 49324),  # x0
        leaf((2,), 8113),  # w2
        leaf((2,), 64970),  # w3
        leaf((5, 2), 61825),  # w6
        leaf((5,), 58240),  # x8
        leaf((5,), 52646),  # x10
        leaf((2, 3), 27863),  # x16
        leaf((1, 1, 4, 3), 29741),  # x20
        leaf((3, 5), 58677),  # x22
    ]


# torch.autograd.grad over these leaves (their places in make_inputs()); None: backward() into all
GRAD_INPUTS = [0, 2, 3, 5]  # x0, w3, w6, x10


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
