# refgrad.fuzz case 11 (generator version 2): 10 ops, 7 leaves, 3 outputs, float64: add_scalar, div, hardtanh, index_add, mul, retain_grad, sdpa, where
import torch
import torch.nn.functional as F

DTYPE = torch.float64
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x1, x3, x6, x10, x11, x14, x15):
    v2 = x1 + -1.5
    v2.retain_grad()
    v4 = x1 * x3
    v5 = v2.index_add(1, torch.tensor([0]), x6)
    v7 = F.hardtanh(v4)
    v9 = F.scaled_dot_product_attention(v5, v7, x10, is_causal=False)
    v12 = x1 / (x11.abs() + 1)
    v13 = v9.index_add(0, torch.tensor([1]), x14)
    v16 = torch.where(v12 > 0, v12, x15)
    v17 = x14 / (x11.abs() + 1)
    return v13, v16, v17


def make_inputs():
    return [
        leaf((4, 1, 1), 61460),  # x1
        leaf((1,), 17261),  # x3
        leaf((4, 1, 1), 52797),  # x6
        leaf((4, 1, 4), 64680),  # x10
        leaf((1, 1), 18299),  # x11
        leaf((1, 1, 4), 39789),  # x14
        leaf((1,), 10599),  # x15
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
