"""The backward nodes torch 2.13 produces on CPU for the modules the node
library must cover (issue: "list them by running torch"). Run as a script it
prints `module: Node1 Node2 ...` lines; the node tests import `module_nodes()`.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def node_names(*outputs):
    """Names of every node reachable from the outputs' grad_fns, AccumulateGrad excluded."""
    seen, names, stack = set(), set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() != "torch::autograd::AccumulateGrad":
            names.add(node.name())
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def module_nodes():
    torch.manual_seed(0)
    x2 = torch.randn(4, 6, requires_grad=True)
    img = torch.randn(2, 3, 8, 8, requires_grad=True)
    seq = torch.randn(2, 5, 8, requires_grad=True)
    cases = {
        "Linear": lambda: nn.Linear(6, 3)(x2).sum(),
        "Linear (3-d input)": lambda: nn.Linear(8, 3)(seq).sum(),
        "Linear (1-d input, no bias)": lambda: nn.Linear(6, 3, bias=False)(x2[0]).sum(),
        "Conv1d": lambda: nn.Conv1d(5, 4, 3, padding=1)(seq).sum(),
        "Conv2d": lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1)(img).sum(),
        "BatchNorm2d (train)": lambda: nn.BatchNorm2d(3).train()(img).sum(),
        "BatchNorm2d (eval)": lambda: nn.BatchNorm2d(3).eval()(img).sum(),
        "LayerNorm": lambda: nn.LayerNorm(8)(seq).sum(),
        "GroupNorm": lambda: nn.GroupNorm(1, 3)(img).sum(),
        "Embedding": lambda: nn.Embedding(10, 4, padding_idx=0)(torch.tensor([[1, 0, 3]])).sum(),
        "MultiheadAttention": lambda: nn.MultiheadAttention(8, 2, batch_first=True)(seq, seq, seq)[0].sum(),
        "TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)(
            seq).sum(),
        "GELU (none)": lambda: nn.GELU()(x2).sum(),
        "GELU (tanh)": lambda: nn.GELU(approximate="tanh")(x2).sum(),
        "SiLU": lambda: nn.SiLU()(x2).sum(),
        "Dropout (train)": lambda: nn.Dropout(0.5).train()(x2).sum(),
        "CrossEntropyLoss": lambda: nn.CrossEntropyLoss()(x2, torch.tensor([0, 1, 2, 3])),
        "CrossEntropyLoss (label smoothing)": lambda: nn.CrossEntropyLoss(label_smoothing=0.1)(
            x2, torch.tensor([0, 1, 2, 3])),
        "MSELoss": lambda: nn.MSELoss()(x2, torch.randn(4, 6)),
        "BCEWithLogitsLoss": lambda: nn.BCEWithLogitsLoss()(x2, torch.rand(4, 6)),
        "MaxPool2d": lambda: nn.MaxPool2d(2)(img).sum(),
        "AvgPool2d": lambda: nn.AvgPool2d(2)(img).sum(),
        "AdaptiveAvgPool2d": lambda: nn.AdaptiveAvgPool2d((1, 1))(img).sum(),
        "interpolate (nearest)": lambda: F.interpolate(img, scale_factor=2, mode="nearest").sum(),
        "interpolate (bilinear)": lambda: F.interpolate(img, size=(5, 7), mode="bilinear").sum(),
    }
    return {name: sorted(node_names(make())) for name, make in cases.items()}


if __name__ == "__main__":
    for module, names in module_nodes().items():
        print(f"{module}: {' '.join(names)}")
