"""The generator: a seed in, a random differentiable PyTorch program out, valid by construction.

    from refgrad.fuzz import generate
    program = generate(17)          # the same program for seed 17 forever (at this GENERATOR_VERSION)
    print(program.source())

How it works. The generator keeps a pool of variables (leaves and the outputs of the ops so far) with
real tensors behind them, and adds one op at a time: it draws an op kind (random.Random seeded from
the seed and the version), picks operands from the pool whose shapes fit (or makes a new leaf that
fits: a weight for a matmul, a broadcastable operand), writes the op's source lines, and runs them on
the pool's tensors, under autocast when the program has it. torch is the shape inference: the op's
output shape and dtype are read from what it returned, and an op that raised, or whose result is not
finite or grew beyond 1e4 in magnitude, is dropped (and the next op drawn). Every choice comes from the
random.Random; torch only says whether an op fits, so the same seed gives the same program for the same
torch. At the end the whole program runs forward and backward in eager once more (refgrad.fuzz.program.
run_eager); a program that fails there (an in-place op on a tensor that a backward needs) is drawn again
from the next attempt's stream. Then, one case in four (drawn from the seed and the attempt, in a stream
of its own), the program asks for torch.autograd.grad over a random non-empty subset of the leaves its
backward reaches (a proper subset where it reaches two or more) instead of a backward into every leaf:
every engine computes those gradients only (refgrad.check's inputs=), and the case's script does the same.

What programs hold (GENERATOR_VERSION 3; version 2 lacked torch.autograd.grad over a subset of the
leaves, version 1 the ops along a dim, stack, pooling and resampling, and the losses): elementwise unary ops and binary ops with broadcasting, scalar ops, views
(view, reshape, permute, transpose, t, narrow, strided slices, select, expand, unsqueeze, squeeze),
in-place ops on views of a clone (CopySlices), reductions (sum, mean, amax, logsumexp, var), softmax and
log_softmax, ops along a dim (cumsum, flip, roll, std, vector_norm, max, sort, topk, prod, split,
unbind, repeat_interleave), tril, masked_fill, lerp, addcmul, indexing with repeated indices
(index_select, gather, index_add, advanced indexing), cat, stack, matmul, mm, bmm, linear, conv2d,
pooling, pad, interpolate, pixel_unshuffle, layer_norm, batch_norm, scaled_dot_product_attention,
losses, an autograd.Function, tensor hooks on leaves and intermediates, post-accumulate-grad hooks,
retain_grad; leaves used several times, one to three outputs; float32 or float64 leaves, and float16
or bfloat16 under torch.autocast; a backward into every leaf, or torch.autograd.grad over some of them.

Bump GENERATOR_VERSION whenever a change would change what any seed generates (tests/python/
test_fuzz.py pins a few seeds' programs, so a silent change fails).
"""
from __future__ import annotations

import math
import random
import warnings
from dataclasses import replace
from typing import Callable, Optional

import torch

from refgrad.fuzz.program import Leaf, Op, Program, run_eager

GENERATOR_VERSION = 3

GRAD_INPUTS_CHANCE = 0.25  # how often a case asks for torch.autograd.grad over some leaves

_UNARY = {  # kind -> source of out from {a}
    "sin": "torch.sin({a})", "cos": "torch.cos({a})", "tanh": "torch.tanh({a})",
    "sigmoid": "torch.sigmoid({a})", "relu": "torch.relu({a})", "gelu": "F.gelu({a})",
    "silu": "F.silu({a})", "softplus": "F.softplus({a})", "neg": "-{a}", "abs": "{a}.abs()",
    "exp": "torch.exp({a})", "log1p_abs": "torch.log1p({a}.abs())", "rsqrt": "torch.rsqrt({a} * {a} + 1)",
    "square": "{a} * {a}", "mul_scalar": "{a} * {c}", "add_scalar": "{a} + {c}", "pow": "{a} ** 2",
    "clamp": "{a}.clamp(-0.5, 0.5)", "leaky_relu": "F.leaky_relu({a}, 0.1)",
    "elu": "F.elu({a})", "mish": "F.mish({a})", "hardtanh": "F.hardtanh({a})", "erf": "torch.erf({a})",
    "atan": "torch.atan({a})", "hardswish": "F.hardswish({a})",
}
_DIM_OPS = {  # kind -> source of out from {a} and a dim {d} of it
    "cumsum": "{a}.cumsum({d})", "flip": "{a}.flip({d})", "roll": "{a}.roll(1, {d})",
    "std": "{a}.std({d})", "norm": "torch.linalg.vector_norm({a}, dim={d})", "max_dim": "{a}.max({d}).values",
    "sort": "{a}.sort({d}).values", "topk": "{a}.topk(1, {d}).values", "prod": "{a}.prod({d})",
    "split": "{a}.split(1, {d})[0]", "unbind": "{a}.unbind({d})[-1]", "repeat": "{a}.repeat_interleave(2, {d})",
}
_BINARY = {
    "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / ({b}.abs() + 1)",
    "maximum": "torch.maximum({a}, {b})", "where": "torch.where({a} > 0, {a}, {b})",
}


class _Generating:
    """The state of one program being generated: the random stream, the pool and the ops so far."""

    def __init__(self, seed: int, attempt: int, max_ops: int):
        self.rng = random.Random(f"refgrad.fuzz:{GENERATOR_VERSION}:{seed}:{attempt}")
        self.seed = seed
        r = self.rng.random()
        self.dtype = "float64" if r < 0.25 else "float32"
        self.autocast = None
        if r >= 0.75:
            self.autocast = "bfloat16" if self.rng.random() < 0.5 else "float16"
        self.torch_dtype = getattr(torch, self.dtype)
        self.target_ops = self.rng.randint(5, max_ops)
        self.leaves: list[Leaf] = []
        self.ops: list[Op] = []
        self.env: dict[str, torch.Tensor] = {}  # variable -> its tensor in the generating run
        self.used: dict[str, int] = {}          # variable -> how many ops read it
        self.counter = 0

    # --- the pool ---

    def new_leaf(self, shape: tuple[int, ...], prefix: str = "x") -> str:
        name = f"{prefix}{self.counter}"
        self.counter += 1
        seed = self.rng.randrange(1 << 16)
        self.leaves.append(Leaf(name, tuple(shape), seed))
        values = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        self.env[name] = values.to(self.torch_dtype).requires_grad_()
        return name

    def variables(self, where: Callable[[torch.Tensor], bool] = lambda t: True) -> list[str]:
        return [name for name, tensor in self.env.items() if tensor.requires_grad and where(tensor)]

    def pick(self, where: Callable[[torch.Tensor], bool] = lambda t: True) -> Optional[str]:
        """A variable of the pool that satisfies ``where``: mostly a result no op reads yet (so that the
        program grows as one graph rather than many dead branches), else one of the last few made, now
        and then any (leaves reused)."""
        names = self.variables(where)
        if not names:
            return None
        r = self.rng.random()
        unread = [name for name in names if name.startswith("v") and name not in self.used]
        if r < 0.6 and unread:
            names = unread[-2:]
        elif r < 0.85:
            names = names[-3:]
        return self.rng.choice(names)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.env[name].shape)

    def random_shape(self, rank: Optional[int] = None) -> tuple[int, ...]:
        rank = self.rng.randint(1, 3) if rank is None else rank
        return tuple(self.rng.randint(1, 5) for _ in range(rank))

    def operand_like(self, shape: tuple[int, ...], broadcast: bool = True) -> str:
        """A second operand for ``shape``: a variable of the pool that broadcasts with it, the same
        variable again, or a new leaf (perhaps with leading dims dropped and dims of 1)."""
        r = self.rng.random()
        if r < 0.4:
            found = self.pick(lambda t: _broadcasts(tuple(t.shape), shape) if broadcast else tuple(t.shape) == shape)
            if found is not None:
                return found
        if broadcast and shape and r < 0.8:
            drop = self.rng.randint(0, len(shape) - 1)
            shape = tuple(1 if self.rng.random() < 0.3 else s for s in shape[drop:])
        return self.new_leaf(shape)

    # --- adding an op ---

    def try_op(self, kind: str, lines: list[str], uses: list[str], out: Optional[str],
               helpers: tuple[str, ...] = ()) -> bool:
        """Runs the op's lines on the pool's tensors; keeps the op when it ran and its result is finite and
        not huge. The new leaves its operands made stay in the pool either way (unused, they are pruned)."""
        scope = {"torch": torch, "F": torch.nn.functional, **self.env}
        if helpers:
            from refgrad.fuzz.program import HELPERS
            for helper in helpers:
                exec(HELPERS[helper], scope)
        try:
            with _autocast(self.autocast), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for line in lines:
                    exec(line, scope)
        except Exception:
            return False
        if out is not None:
            result = scope[out]
            if not isinstance(result, torch.Tensor) or not result.requires_grad or not result.is_floating_point():
                return False
            if result.numel() == 0 or result.numel() > 4096:
                return False
            magnitude = result.detach().abs().max().item()
            if not math.isfinite(magnitude) or magnitude > 1e4:
                return False
            self.env[out] = result
            shape, dtype = tuple(result.shape), str(result.dtype).replace("torch.", "")
        else:
            shape, dtype = (), ""
        for name in uses:
            self.used[name] = self.used.get(name, 0) + 1
        self.ops.append(Op(kind, tuple(lines), tuple(uses), out, shape, dtype, helpers))
        return True

    def out_name(self) -> str:
        name = f"v{self.counter}"
        self.counter += 1
        return name


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        return torch.broadcast_shapes(a, b) == b
    except RuntimeError:
        return False


class _autocast:
    def __init__(self, dtype: Optional[str]):
        self.context = torch.autocast("cpu", dtype=getattr(torch, dtype)) if dtype else None

    def __enter__(self):
        if self.context is not None:
            self.context.__enter__()

    def __exit__(self, *exc):
        if self.context is not None:
            return self.context.__exit__(*exc)
        return False


# --- the op builders: each draws operands and source, and tries it ---

def _unary(g: _Generating) -> bool:
    a = g.pick()
    kind = g.rng.choice(sorted(_UNARY))
    c = g.rng.choice([0.5, -1.5, 2.0, 3.0])
    out = g.out_name()
    return g.try_op(kind, [f"{out} = " + _UNARY[kind].format(a=a, c=c)], [a], out)


def _binary(g: _Generating) -> bool:
    a = g.pick()
    kind = g.rng.choice(sorted(_BINARY))
    b = a if g.rng.random() < 0.15 else g.operand_like(g.shape(a))
    if g.rng.random() < 0.5:
        a, b = b, a
    out = g.out_name()
    return g.try_op(kind, [f"{out} = " + _BINARY[kind].format(a=a, b=b)], [a, b], out)


def _view(g: _Generating) -> bool:
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    rank = len(shape)
    choices = ["reshape", "unsqueeze", "expand", "narrow", "slice_step", "select", "flatten"]
    if rank >= 2:
        choices += ["permute", "transpose", "view_split"]
    if rank == 2:
        choices.append("t")
    if 1 in shape:
        choices.append("squeeze")
    kind = rng.choice(choices)
    d = rng.randrange(rank)
    if kind == "reshape":
        src = f"{a}.reshape({_split_last(shape, rng)!r})"
    elif kind == "view_split":
        src = f"{a}.contiguous().view({_split_last(shape, rng)!r})"
        kind = "view"
    elif kind == "flatten":
        src = f"{a}.flatten()"
    elif kind == "unsqueeze":
        src = f"{a}.unsqueeze({rng.randint(0, rank)})"
    elif kind == "expand":
        if 1 in shape:
            sizes = [rng.randint(2, 3) if s == 1 else -1 for s in shape]
            src = f"{a}.expand({', '.join(map(str, sizes))})"
        else:
            src = f"{a}.unsqueeze(0).expand({rng.randint(2, 3)}, {', '.join('-1' for _ in shape)})"
    elif kind == "narrow":
        if shape[d] < 2:
            return False
        length = rng.randint(1, shape[d] - 1)
        src = f"{a}.narrow({d}, {rng.randint(0, shape[d] - length)}, {length})"
    elif kind == "slice_step":
        src = f"{a}[{_skip(d)}::2]"
    elif kind == "select":
        src = f"{a}.select({d}, {rng.randrange(shape[d])})"
    elif kind == "permute":
        order = list(range(rank))
        rng.shuffle(order)
        src = f"{a}.permute({', '.join(map(str, order))})"
    elif kind == "transpose":
        src = f"{a}.transpose({d}, {rng.randrange(rank)})"
    elif kind == "t":
        src = f"{a}.t()"
    else:  # squeeze
        src = f"{a}.squeeze({shape.index(1)})"
    return g.try_op(kind, [f"{out} = {src}"], [a], out)


def _skip(dims: int) -> str:
    """The start of a subscript that leaves the first ``dims`` dims whole: ":, :, " for 2."""
    return ":, " * dims


def _split_last(shape: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
    """A new shape of the same numel: the last dim split in two where it can be, else two dims merged."""
    last = shape[-1]
    factors = [f for f in range(2, last) if last % f == 0]
    if factors:
        f = rng.choice(factors)
        return shape[:-1] + (f, last // f)
    if len(shape) >= 2:
        return shape[:-2] + (shape[-2] * shape[-1],)
    return shape + (1,)


def _in_place(g: _Generating) -> bool:
    """An in-place op on a view of a fresh clone (torch records CopySlices), or on the clone itself."""
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    d = rng.randrange(len(shape))
    views = [f"{out}.narrow({d}, 0, {max(1, shape[d] // 2)})", f"{out}.select({d}, {shape[d] - 1})",
             f"{out}[{_skip(d)}::2]", f"{out}"]
    if len(shape) >= 2:
        views.append(f"{out}.transpose(0, {len(shape) - 1})[0]")
    view = rng.choice(views)
    scope = {out: g.env[a].detach().clone()}
    exec(f"view_shape = tuple({view}.shape)", scope)
    action = rng.choice(["mul_scalar_", "add_", "mul_", "copy_", "sigmoid_"])
    lines = [f"{out} = {a}.clone()"]
    uses = [a]
    if action == "mul_scalar_":
        lines.append(f"{view}.mul_({rng.choice([0.5, -2.0])})")
    elif action == "sigmoid_":
        lines.append(f"{view}.sigmoid_()")
    else:
        b = g.operand_like(scope["view_shape"])
        lines.append(f"{view}.{action}({b})")
        uses.append(b)
    return g.try_op("inplace_" + action.rstrip("_"), lines, uses, out)


def _reduction(g: _Generating) -> bool:
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    d = rng.randrange(len(shape))
    keep = rng.random() < 0.3
    kind = rng.choice(["sum", "sum_all", "mean", "amax", "logsumexp", "var", "softmax", "log_softmax"])
    src = {
        "sum": f"{a}.sum({d}, keepdim={keep})", "sum_all": f"{a}.sum()", "mean": f"{a}.mean({d}, keepdim={keep})",
        "amax": f"{a}.amax({d}, keepdim={keep})", "logsumexp": f"torch.logsumexp({a}, {d}, keepdim={keep})",
        "var": f"{a}.var({d}, keepdim={keep})", "softmax": f"torch.softmax({a}, {d})",
        "log_softmax": f"torch.log_softmax({a}, {d})",
    }[kind]
    return g.try_op(kind, [f"{out} = {src}"], [a], out)


def _indices(rng: random.Random, size: int, count: int) -> list[int]:
    """``count`` indices below ``size``, with a repeat whenever count allows one."""
    picks = [rng.randrange(size) for _ in range(count)]
    if count >= 2:
        picks[-1] = picks[0]
    return picks


def _indexing(g: _Generating) -> bool:
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    d = rng.randrange(len(shape))
    kind = rng.choice(["index_select", "gather", "index_add", "advanced_index"])
    uses = [a]
    if kind == "index_select":
        src = f"{a}.index_select({d}, torch.tensor({_indices(rng, shape[d], rng.randint(1, 4))}))"
    elif kind == "advanced_index":
        src = f"{a}[{_skip(d)}torch.tensor({_indices(rng, shape[d], rng.randint(1, 4))})]"
    elif kind == "gather":
        index_shape = [rng.randint(1, s) for s in shape]
        index_shape[d] = rng.randint(1, 4)
        index = torch.tensor([rng.randrange(shape[d]) for _ in range(math.prod(index_shape))]).view(index_shape)
        src = f"{a}.gather({d}, torch.tensor({index.tolist()}))"
    else:
        count = rng.randint(1, 4)
        source_shape = shape[:d] + (count,) + shape[d + 1:]
        b = g.operand_like(source_shape, broadcast=False)
        uses.append(b)
        src = f"{a}.index_add({d}, torch.tensor({_indices(rng, shape[d], count)}), {b})"
    return g.try_op(kind, [f"{out} = {src}"], uses, out)


def _cat(g: _Generating) -> bool:
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    d = rng.randrange(len(shape))
    other = shape[:d] + (rng.randint(1, 3),) + shape[d + 1:]
    b = a if rng.random() < 0.3 else g.operand_like(other, broadcast=False)
    return g.try_op("cat", [f"{out} = torch.cat([{a}, {b}], {d})"], [a, b], out)


def _matmul(g: _Generating) -> bool:
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    m = rng.randint(1, 5)
    kind = rng.choice(["matmul", "mm", "bmm", "linear"])
    if kind == "mm" and len(shape) != 2 or kind == "bmm" and len(shape) != 3:
        kind = "matmul"
    if kind == "linear":
        w = g.new_leaf((m, shape[-1]), "w")
        bias = g.new_leaf((m,), "w") if rng.random() < 0.5 else None
        src, uses = f"F.linear({a}, {w}{'' if bias is None else ', ' + bias})", [a, w] + ([bias] if bias else [])
    elif kind == "bmm":
        w = g.operand_like((shape[0], shape[2], m), broadcast=False)
        src, uses = f"torch.bmm({a}, {w})", [a, w]
    else:
        w = g.operand_like((shape[-1], m), broadcast=False) if rng.random() < 0.8 else a + ".transpose(-1, -2)"
        uses = [a, w] if not w.startswith(a + ".") else [a]
        src = f"{'torch.mm' if kind == 'mm' else 'torch.matmul'}({a}, {w})"
    return g.try_op(kind, [f"{out} = {src}"], uses, out)


def _conv2d(g: _Generating) -> bool:
    rng, out = g.rng, g.out_name()
    a = g.pick(lambda t: t.dim() == 4 and t.shape[2] >= 2 and t.shape[3] >= 2)
    if a is None:
        a = g.new_leaf((rng.randint(1, 2), rng.randint(1, 3), rng.randint(3, 6), rng.randint(3, 6)))
    n, c, h, w_ = g.shape(a)
    k = rng.randint(1, min(3, h, w_))
    weight = g.new_leaf((rng.randint(1, 4), c, k, k), "w")
    bias = g.new_leaf((g.shape(weight)[0],), "w") if rng.random() < 0.5 else None
    stride, padding = rng.randint(1, 2), rng.randint(0, 1)
    src = f"F.conv2d({a}, {weight}, {bias}, stride={stride}, padding={padding})"
    return g.try_op("conv2d", [f"{out} = {src}"], [a, weight] + ([bias] if bias else []), out)


def _norm(g: _Generating) -> bool:
    rng, out = g.rng, g.out_name()
    if rng.random() < 0.5:
        a = g.pick(lambda t: t.dim() >= 1 and t.shape[-1] >= 2)
        if a is None:
            return False
        n = g.shape(a)[-1]
        affine = rng.random() < 0.6
        weight, bias = (g.new_leaf((n,), "w"), g.new_leaf((n,), "w")) if affine else (None, None)
        src = f"F.layer_norm({a}, ({n},), {weight}, {bias})"
        return g.try_op("layer_norm", [f"{out} = {src}"], [a] + ([weight, bias] if affine else []), out)
    a = g.pick(lambda t: 2 <= t.dim() <= 4 and t.numel() // t.shape[1] >= 2)
    if a is None:
        return False
    c = g.shape(a)[1]
    weight, bias = g.new_leaf((c,), "w"), g.new_leaf((c,), "w")
    src = f"F.batch_norm({a}, torch.zeros({c}), torch.ones({c}), {weight}, {bias}, training=True)"
    return g.try_op("batch_norm", [f"{out} = {src}"], [a, weight, bias], out)


def _attention(g: _Generating) -> bool:
    rng, out = g.rng, g.out_name()
    q = g.pick(lambda t: 3 <= t.dim() <= 4)
    if q is None:
        q = g.new_leaf((rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 4), rng.randint(1, 4)))
    shape = g.shape(q)
    if rng.random() < 0.4:
        k = v = q  # self-attention: one tensor used three times
    else:
        s = rng.randint(1, 4)
        k = g.operand_like(shape[:-2] + (s, shape[-1]), broadcast=False)
        v = g.operand_like(shape[:-2] + (s, rng.randint(1, 4)), broadcast=False)
    causal = rng.random() < 0.3
    src = f"F.scaled_dot_product_attention({q}, {k}, {v}, is_causal={causal})"
    return g.try_op("sdpa", [f"{out} = {src}"], sorted({q, k, v}, key=[q, k, v].index), out)


def _function(g: _Generating) -> bool:
    a, out = g.pick(), g.out_name()
    return g.try_op("autograd_function", [f"{out} = ScaledTanh.apply({a})"], [a], out, ("ScaledTanh",))


def _hook(g: _Generating) -> bool:
    """A tensor hook (on a leaf or an intermediate), a post-accumulate-grad hook (on a leaf) or
    retain_grad (on an intermediate): statements that define no variable."""
    rng = g.rng
    kind = rng.choice(["tensor_hook", "post_accumulate_grad_hook", "retain_grad"])
    leaves = [leaf.name for leaf in g.leaves]
    if kind == "post_accumulate_grad_hook":
        a = rng.choice(leaves)
        return g.try_op(kind, [f"{a}.register_post_accumulate_grad_hook(watch_grad)"], [a], None, ("watch_grad",))
    a = g.pick(lambda t: not t.is_leaf)
    if a is None:
        return False
    if kind == "retain_grad":
        return g.try_op(kind, [f"{a}.retain_grad()"], [a], None)
    if rng.random() < 0.3:
        a = rng.choice(leaves)
    hook = rng.choice(["halve_grad", "negate_grad"])
    return g.try_op(kind, [f"{a}.register_hook({hook})"], [a], None, (hook,))


def _dim_op(g: _Generating) -> bool:
    """An op along one dim: cumsum, flip, roll, std, vector_norm, max, sort, topk, prod, split, unbind,
    repeat_interleave; or tril, masked_fill, lerp, addcmul."""
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    kind = rng.choice(sorted(_DIM_OPS) + ["tril", "masked_fill", "lerp", "addcmul"])
    uses = [a]
    if kind == "tril":
        src = f"{a}.tril()"
    elif kind == "masked_fill":
        src = f"{a}.masked_fill({a} < 0, 0.25)"
    elif kind in ("lerp", "addcmul"):
        b = g.operand_like(shape)
        uses.append(b)
        src = f"torch.lerp({a}, {b}, 0.3)" if kind == "lerp" else f"torch.addcmul({a}, {b}, {b}, value=0.5)"
    else:
        src = _DIM_OPS[kind].format(a=a, d=rng.randrange(len(shape)))
    return g.try_op(kind, [f"{out} = {src}"], uses, out)


def _stack(g: _Generating) -> bool:
    a = g.pick()
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    b = a if rng.random() < 0.3 else g.operand_like(shape, broadcast=False)
    return g.try_op("stack", [f"{out} = torch.stack([{a}, {b}], {rng.randint(0, len(shape))})"], [a, b], out)


def _pool(g: _Generating) -> bool:
    """Pooling, padding and resampling of a 4-d (N, C, H, W) variable, or of a new leaf."""
    rng, out = g.rng, g.out_name()
    a = g.pick(lambda t: t.dim() == 4 and t.shape[2] >= 2 and t.shape[3] >= 2)
    if a is None:
        a = g.new_leaf((rng.randint(1, 2), rng.randint(1, 3), rng.randint(2, 6), rng.randint(2, 6)))
    kind = rng.choice(["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "pad", "interpolate_nearest",
                       "interpolate_bilinear", "pixel_shuffle"])
    src = {
        "max_pool2d": f"F.max_pool2d({a}, 2)", "avg_pool2d": f"F.avg_pool2d({a}, 2, ceil_mode={rng.random() < 0.5})",
        "adaptive_avg_pool2d": f"F.adaptive_avg_pool2d({a}, 1)", "pad": f"F.pad({a}, (1, 0, 0, 2))",
        "interpolate_nearest": f"F.interpolate({a}, scale_factor=2, mode='nearest')",
        "interpolate_bilinear": f"F.interpolate({a}, scale_factor=2, mode='bilinear', align_corners=False)",
        "pixel_shuffle": f"F.pixel_unshuffle({a}, 2)",
    }[kind]
    return g.try_op(kind, [f"{out} = {src}"], [a], out)


def _loss(g: _Generating) -> bool:
    """A loss of a variable against a target that is a new leaf too (so both get gradients), or against
    class indices (cross_entropy)."""
    a = g.pick(lambda t: t.dim() >= 1)
    if a is None:
        return False
    shape, rng, out = g.shape(a), g.rng, g.out_name()
    kind = rng.choice(["mse_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "bce_with_logits"])
    reduction = rng.choice(["mean", "sum", "none"])
    if kind == "cross_entropy":
        if len(shape) != 2:
            return False
        classes = [rng.randrange(shape[1]) for _ in range(shape[0])]
        return g.try_op(kind, [f"{out} = F.cross_entropy({a}, torch.tensor({classes}), reduction={reduction!r})"],
                        [a], out)
    b = g.operand_like(shape, broadcast=False)
    target = f"torch.sigmoid({b})" if kind == "bce_with_logits" else b
    function = {"bce_with_logits": "binary_cross_entropy_with_logits"}.get(kind, kind)
    return g.try_op(kind, [f"{out} = F.{function}({a}, {target}, reduction={reduction!r})"], [a, b], out)


# op family -> (builder, weight)
_FAMILIES: list[tuple[Callable[[_Generating], bool], int]] = [
    (_unary, 6), (_binary, 5), (_view, 5), (_in_place, 2), (_reduction, 3), (_indexing, 3), (_cat, 1),
    (_matmul, 3), (_conv2d, 1), (_norm, 2), (_attention, 1), (_function, 1), (_hook, 2), (_dim_op, 3),
    (_stack, 1), (_pool, 1), (_loss, 1),
]


def _draw(seed: int, attempt: int, max_ops: int) -> Program:
    g = _Generating(seed, attempt, max_ops)
    for _ in range(g.rng.randint(1, 2)):
        g.new_leaf(g.random_shape(g.rng.randint(1, 3)))
    builders, weights = zip(*_FAMILIES)
    tries = 0
    while sum(op.out is not None for op in g.ops) < g.target_ops and tries < 20 * g.target_ops:
        tries += 1
        g.rng.choices(builders, weights)[0](g)
    # outputs: one to three variables no op reads (the last op's output always among them)
    sinks = [op.out for op in g.ops if op.out is not None and op.out not in g.used]
    if not sinks:
        sinks = [g.variables()[-1]]
    outputs = [sinks[-1]] + g.rng.sample(sinks[:-1], min(len(sinks) - 1, 2))
    program = Program(seed, GENERATOR_VERSION, g.dtype, g.autocast, tuple(g.leaves), tuple(g.ops),
                      tuple(sorted(outputs, key=lambda name: int(name[1:]))))
    return program.pruned()


def _with_grad_inputs(program: Program, grads: list, seed: int, attempt: int) -> Program:
    """The program asking for torch.autograd.grad over a random non-empty subset of the leaves its backward
    reaches (``grads``: eager's, per leaf), one case in GRAD_INPUTS_CHANCE; else as it is. Its own random
    stream, from the seed and the attempt: the ops drawn do not depend on it."""
    rng = random.Random(f"refgrad.fuzz:{GENERATOR_VERSION}:{seed}:{attempt}:grad_inputs")
    reached = [leaf.name for leaf, grad in zip(program.leaves, grads) if grad is not None]
    if rng.random() >= GRAD_INPUTS_CHANCE or not reached:
        return program
    chosen = set(rng.sample(reached, rng.randint(1, max(1, len(reached) - 1))))
    return replace(program, inputs=tuple(name for name in reached if name in chosen))


def generate(seed: int, max_ops: int = 16) -> Program:
    """The program of ``seed``: drawn, then run forward and backward in eager; a draw that fails there is
    drawn again from the next attempt's random stream (deterministically). Some ask for torch.autograd.grad
    over a subset of their leaves (_with_grad_inputs), which runs in eager too."""
    error = None
    for attempt in range(20):
        program = _draw(seed, attempt, max_ops)
        try:
            program = _with_grad_inputs(program, run_eager(program), seed, attempt)
            if program.inputs is not None:
                run_eager(program)
            return program
        except Exception as caught:  # an in-place op on a saved tensor, ...: draw again
            error = caught
    raise RuntimeError(f"refgrad.fuzz: no valid program for seed {seed} in 20 attempts (last: {error})")
