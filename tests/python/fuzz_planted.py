"""Engines with planted bugs for tests/python/test_fuzz.py, importable by the campaign's worker processes
(refgrad-fuzz --engines py:fuzz_planted:wrong_mul):

- wrong_mul: eager autograd, except that MulBackward0's outgoing gradients are scaled by 1.01 (a node
  post-hook that replaces them), so refgrad.check must find a wrong gradient and name MulBackward0;
- Crashing: an engine whose process dies (os._exit) as it runs;
- Hanging: an engine that never returns (it sleeps).
"""
import os
import time

import torch

from refgrad.engines import differentiate


def _nodes(outputs):
    """Every grad_fn node reachable from the outputs."""
    seen, stack = set(), [output.grad_fn for output in outputs if output.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions if next_node is not None)
    return seen


class WrongNode:
    """Eager autograd with every ``node`` (PyTorch's name) computing its outgoing gradients times ``factor``."""

    def __init__(self, node, factor=1.01):
        self.node, self.factor = node, factor
        self.name = f"wrong_{node}"

    def gradients(self, forward, grad_outputs, *, observe=None):
        run = forward()
        for node in _nodes(run.outputs):
            if node.name() == self.node:
                node.register_hook(lambda grad_inputs, grad_outputs: tuple(
                    None if grad is None else grad * self.factor for grad in grad_inputs))
        if observe is not None:  # check's node hooks run after the planted one: they see its result
            observe(run)
        # backward() into every leaf, or torch.autograd.grad over the leaves a case asks for (Forward.inputs)
        return differentiate(run, grad_outputs)


wrong_mul = WrongNode("MulBackward0")


class Crashing:
    name = "crashing"

    def gradients(self, forward, grad_outputs):
        os._exit(3)


class Hanging:
    name = "hanging"

    def gradients(self, forward, grad_outputs):
        time.sleep(600)


class Raising:
    """An engine that raises a wrapped error, as torch's compilers do (the root is the ValueError)."""

    name = "raising"

    def gradients(self, forward, grad_outputs):
        try:
            raise ValueError("the root of it")
        except ValueError as error:
            raise RuntimeError("when compiling") from error
