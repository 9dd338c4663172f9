# refgrad.fuzz case 0 (generator version 2): 9 ops, 8 leaves, 3 outputs, float64: conv2d, exp, expand, linear, maximum, repeat, sdpa
import torch
import torch.nn.functional as F

DTYPE = torch.float64
ENGINE = 'compiled_autograd:aot_eager'


def leaf(shape, seed, dtype=DTYPE):
    """A leaf that requires grad: standard normal values drawn (in float64) from its own seed."""
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values.to(dtype).requires_grad_()


def program(x0, x1, x8, w9, w10, w17, w18, w21):
    v2 = torch.maximum(x0, x1)
    v7 = F.conv2d(x8, w9, w10, stride=2, padding=0)
    v11 = F.scaled_dot_product_attention(v7, v7, v7, is_causal=False)
    v13 = w10.repeat_interleave(2, 0)
    v14 = v2.repeat_interleave(2, 0)
    v15 = torch.exp(v13)
    v16 = F.linear(v14, w17, w18)
    v19 = v16.unsqueeze(0).expand(2, -1)
    v20 = F.linear(v15, w21)
    return v11, v19, v20


def make_inputs():
    return [
        leaf((2,), 57750),  # x0
        leaf((2,), 46704),  # x1
        leaf((1, 3, 3, 3), 55594),  # x8
        leaf((1, 3, 1, 1), 61051),  # w9
        leaf((1,), 13864),  # w10
        leaf((5, 4), 50867),  # w17
        leaf((5,), 21764),  # w18
        leaf((3, 2), 21805),  # w21
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
