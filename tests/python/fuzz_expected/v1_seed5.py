# refgrad.fuzz case 5 (generator version 1): 9 ops, 5 leaves, 3 outputs, float32: add_scalar, conv2d, gelu, index_add, reshape, sdpa, select, slice_step, softmax
import torch
import torch.nn.functional as F

DTYPE = torch.float32
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x4, x10, w11, w12):
    v1 = x0.select(0, 0)
    v2 = x0[::2]
    v3 = v2.index_add(0, torch.tensor([0, 0]), x4)
    v6 = v3 + 0.5
    v8 = v6.reshape((1, 1))
    v9 = F.conv2d(x10, w11, w12, stride=1, padding=0)
    v13 = F.gelu(v9)
    v19 = torch.softmax(v8, 0)
    v20 = F.scaled_dot_product_attention(v13, v13, v13, is_causal=True)
    return v1, v19, v20


def make_inputs():
    return [
        leaf((1,), 17933),  # x0
        leaf((2,), 47093),  # x4
        leaf((2, 3, 5, 6), 54034),  # x10
        leaf((3, 3, 1, 1), 50074),  # w11
        leaf((3,), 2184),  # w12
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
