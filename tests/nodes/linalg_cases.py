"""Torch's side of the linalg decomposition node tests (test_linalg_decompositions.cpp).

case() runs a forward in torch on float64 or complex128 leaves and returns, for one backward node of
its graph: the node's saved fields, the grads reaching the node (those of a loss Re<w, out> summed over
the forward's outputs, with random weights w), torch's grads of that loss with respect to the leaves,
and the loss's finite differences with respect to each leaf (the independent truth: torch's forward
only, never its backward). Decompositions whose outputs are defined up to a sign or a phase (singular
and eigen vectors) are normalized before the loss, so that the loss is a function of the input; the
grads reaching the node then meet the invariance torch's formulas assume.
"""
import torch


def random_like(t, generator):
    w = torch.randn(t.shape, dtype=torch.float64, generator=generator)
    if t.is_complex():
        w = torch.complex(w, torch.randn(t.shape, dtype=torch.float64, generator=generator))
    return w


def fix_columns_phase(V):
    """V with each column's first entry made real and positive (a sign or a phase per column)."""
    phase = torch.sgn(V[..., :1, :])
    return V * phase.conj()


def fix_svd(outputs):
    U, S, Vh = outputs
    phase = torch.sgn(U[..., :1, :])
    k = S.shape[-1]
    # The same phase for column j of U and row j of Vh keeps U S Vh. The columns beyond the first k
    # (full_matrices) are any basis of a complement, not a function of A: the loss reads zeros there.
    U = torch.cat([U[..., :k] * phase[..., :k].conj(), 0 * U[..., k:]], dim=-1)
    Vh = torch.cat([Vh[..., :k, :] * phase[..., :k].mT, 0 * Vh[..., k:, :]], dim=-2)
    return U, S, Vh


def fix_eig(outputs):
    L, V = outputs
    return L, fix_columns_phase(V)


def _find(outputs, name):
    seen, queue = set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while queue:
        fn = queue.pop(0)
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if fn.name() == name:
            return fn
        queue.extend(next_fn for next_fn, _ in fn.next_functions)
    raise RuntimeError(f"no {name} in the graph")


def _as_tensor(value):
    if isinstance(value, torch.Tensor):
        return value.detach().resolve_conj()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):  # torch shows a negative saved int as an unsigned 64-bit one
        return value - 2**64 if value >= 2**63 else value
    if isinstance(value, float):
        return value
    raise TypeError(f"cannot return a saved {type(value).__name__}")


def case(forward, inputs, node, fields, used=None, normalize=None, seed=0, eps=1e-6):
    """forward(*leaves) returns the node's differentiable outputs in order; `used` says which of them
    the loss reads (all by default). Returns (*saved fields, used mask, *grads at the node,
    *torch's grads, *finite differences)."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    outputs = forward(*leaves)
    outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
    used = [True] * len(outputs) if used is None else list(used)
    generator = torch.Generator().manual_seed(seed)
    weights = [random_like(o, generator) for o in outputs]

    def loss_of(outs):
        outs = normalize(outs) if normalize else outs
        return sum((w.conj() * o).real.sum() for o, w, u in zip(outs, weights, used) if u)

    fn = _find(outputs, node)
    saved = [_as_tensor(getattr(fn, "_saved_" + field)) for field in fields]
    loss = loss_of(outputs)
    at_node = torch.autograd.grad(loss, outputs, allow_unused=True, retain_graph=True)
    at_node = [g.resolve_conj() if g is not None else torch.zeros(()) for g in at_node]
    torch_grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    torch_grads = [g.resolve_conj() if g is not None else torch.zeros_like(x) for g, x in zip(torch_grads, leaves)]

    finite_differences = []
    with torch.no_grad():
        for i, x in enumerate(inputs):
            if not (x.is_floating_point() or x.is_complex()):
                finite_differences.append(torch.zeros(()))
                continue
            grad = torch.zeros_like(x).reshape(-1)
            steps = [1.0, 1j] if x.is_complex() else [1.0]
            for j in range(x.numel()):
                for step in steps:
                    def at(sign):
                        moved = [y.detach().clone() for y in inputs]
                        flat = moved[i].reshape(-1)
                        flat[j] += sign * eps * step
                        moved[i] = flat.reshape(x.shape)
                        outs = forward(*moved)
                        return float(loss_of(tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)))
                    grad[j] += (at(1) - at(-1)) / (2 * eps) * step
            finite_differences.append(grad.reshape(x.shape))
    return (*saved, torch.tensor(used), *at_node, *torch_grads, *finite_differences)
