"""Activation checkpointing (torch.utils.checkpoint): saved values read as the engine reads them.

* Non-reentrant (``use_reentrant=False``): the checkpointed region's saved
  tensors sit behind saved-tensor hooks; their unpack hook recomputes the
  region's forward (once per backward, then each value may be unpacked
  once: a second unpack raises CheckpointError). capture reads saved fields
  through the unpack hooks (refgrad.torch.saved) inside a
  ``_Recomputation``: a GraphExecGroup of its own, so that the capture's
  recomputation and unpacks are the capture's and leave those of a later
  torch backward (which has its own graph task) untouched. Selective
  activation checkpointing (``context_fn=create_selective_checkpoint_contexts``)
  lets a region's cached values be read once: capture puts them back after
  its own recomputation, so that torch's backward still finds them.
* Reentrant (``use_reentrant=True``): CheckpointFunctionBackward's backward
  recomputes the forward with grad mode on and runs an inner
  ``torch.autograd.backward`` of the recomputed outputs. capture recomputes
  it as that backward does (``_ReentrantCheckpoint``: the RNG state of the
  forward, autocast as it was, the inputs detached) and the walk
  (refgrad.torch.walk) puts the recomputed graph in the node's place: a grad
  for output k goes to the recomputed output k's node, and what reaches a
  detached input goes on along the checkpoint's next edge for that input.
  So the oracle covers the inner nodes. Two differences from torch's engine,
  which runs the inner backward as a nested graph task when the node runs:
  one ready queue orders all nodes (the inner ones have the highest
  sequence numbers, so they still run as soon as they are ready), and a
  parameter used inside and outside the region gets its grads summed
  before one AccumulateGrad, where torch accumulates the inner ones first
  (the same sum in another order; a hook on that leaf fires once, not
  twice). An output that no grad reaches gets zeros, as torch's node
  materializes them: the program feeds it as an extra root grad.
  torch refuses reentrant checkpointing under torch.autograd.grad and
  backward(inputs=...), and so does capture.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.utils.checkpoint as torch_checkpoint

from refgrad.torch.in_place import recording


def _is_reentrant_checkpoint(fn) -> bool:
    """CheckpointFunctionBackward: torch.utils.checkpoint's autograd.Function (use_reentrant=True)."""
    return hasattr(fn, "_forward_cls") and fn._forward_cls is torch_checkpoint.CheckpointFunction


def _checkpoint_frame(saved) -> Optional[Any]:
    """The _CheckpointFrame of a non-reentrant checkpoint whose unpack hook guards SavedTensor ``saved``,
    read from the hook's closure (torch/utils/checkpoint.py, _checkpoint_hook); None for any other."""
    unpack = getattr(saved, "unpack_hook", None)
    code = getattr(unpack, "__code__", None)
    if code is None or getattr(unpack, "__module__", "") != torch_checkpoint.__name__:
        return None
    if "frame" not in code.co_freevars:
        return None
    return unpack.__closure__[code.co_freevars.index("frame")].cell_contents


def _selective_storage(frame) -> Optional[dict]:
    """The cache of a selective activation checkpoint (the storage its recompute-time
    _CachedTorchDispatchMode reads, marking each entry consumed), or None."""
    recompute_fn = frame.recompute_fn
    names = recompute_fn.__code__.co_freevars
    if "recompute_context" not in names:
        return None
    context = recompute_fn.__closure__[names.index("recompute_context")].cell_contents
    return getattr(context, "storage", None) if isinstance(context, torch_checkpoint._CachedTorchDispatchMode) else None


class _Recomputation:
    """The scope of one capture's unpacks of non-reentrant checkpoints' saved tensors: a GraphExecGroup of
    its own (each region recomputed once for the capture, and torch's later backward recomputes again for
    itself), and the caches of selective checkpoints as they were before, put back at the end."""

    def __init__(self):
        self._group = torch_checkpoint.GraphExecGroup()
        self._caches: dict[int, tuple[dict, dict]] = {}  # id(storage) -> (storage, its entries as they were)

    def keep(self, frame) -> None:
        """Remembers the cache of ``frame`` (and of the frames its inputs were saved by, for nested
        checkpoints) before anything of it is unpacked."""
        storage = _selective_storage(frame)
        if storage is not None and id(storage) not in self._caches:
            self._caches[id(storage)] = (storage, {key: dict(entries) for key, entries in storage.items()})
        for saved in frame.saved_args:
            outer = _checkpoint_frame(saved)
            if outer is not None:
                self.keep(outer)

    def keep_frames_of(self, saved_tensors) -> None:
        for saved in saved_tensors:
            frame = _checkpoint_frame(saved)
            if frame is not None:
                self.keep(frame)

    @contextlib.contextmanager
    def active(self):
        # GraphExecGroup's own __enter__ refuses to nest; the user's group (if any) is put back after.
        previous = torch._C._get_graph_exec_group()
        torch._C._set_graph_exec_group(self._group)
        try:
            yield self
        finally:
            torch._C._set_graph_exec_group(previous)
            for storage, entries in self._caches.values():
                for key, kept in entries.items():
                    storage[key].clear()
                    storage[key].update(kept)


def _edge_of(tensor: torch.Tensor) -> tuple[Any, int]:
    edge = torch.autograd.graph.get_gradient_edge(tensor)
    return edge.node, edge.output_nr


@dataclass
class _ReentrantCheckpoint:
    """A CheckpointFunctionBackward node's forward, recomputed as its backward recomputes it: for each of
    the node's outputs the gradient edge of the recomputed output (None where it needs no grad, as the
    inner backward leaves it out), and the detached inputs (those kept alive with the graph)."""

    node: Any
    roots: list[Optional[tuple[Any, int]]]
    inputs: dict[Any, tuple[Any, int]]  # AccumulateGrad of a detached input -> the node's next edge for it
    used: set[int] = field(default_factory=set)  # outputs some grad reaches
    fed_zeros: list[int] = field(default_factory=list)  # outputs no grad reaches, fed zeros as extra roots
    _keep: Any = None  # the recomputed outputs and detached inputs: the inner graph lives as long as this

    @staticmethod
    def of(fn) -> _ReentrantCheckpoint:
        """Recomputes fn's forward (CheckpointFunction.backward, torch/utils/checkpoint.py, up to its
        inner backward), under recording() so that in-place ops on views in it are captured, and with
        anomaly mode when the forward had it (each inner node then has its source line)."""
        inputs = list(fn.inputs)
        for tensor, index in zip(fn.saved_tensors, fn.tensor_indices):
            inputs[index] = tensor
        devices = fn.fwd_devices if fn.preserve_rng_state and fn.had_device_in_fwd else []
        anomaly = "traceback_" in fn.metadata
        with torch.random.fork_rng(devices=devices, enabled=fn.preserve_rng_state, device_type=fn.device_type):
            if fn.preserve_rng_state:
                torch.set_rng_state(fn.fwd_cpu_state)
                if fn.had_device_in_fwd:
                    torch_checkpoint.set_device_states(fn.fwd_devices, fn.fwd_device_states,
                                                       device_type=fn.device_type)
            detached = torch_checkpoint.detach_variable(tuple(inputs))
            device_autocast = (torch.amp.autocast(device_type=fn.device_type, **fn.device_autocast_kwargs)
                               if torch.amp.is_autocast_available(fn.device_type) else contextlib.nullcontext())
            with (torch.enable_grad(), device_autocast, torch.amp.autocast("cpu", **fn.cpu_autocast_kwargs),
                  torch.autograd.set_detect_anomaly(anomaly, check_nan=False), recording()):
                outputs = fn.run_function(*detached)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        roots = [_edge_of(output) if isinstance(output, torch.Tensor) and output.requires_grad else None
                 for output in outputs]
        edges = iter(fn.next_functions)  # one per tensor input, in order
        detached_inputs = {}
        for value in detached:
            if not isinstance(value, torch.Tensor):
                continue
            edge = next(edges)
            if value.requires_grad:
                detached_inputs[_edge_of(value)[0]] = tuple(edge)
        return _ReentrantCheckpoint(fn, roots, detached_inputs, _keep=(outputs, detached))

    def unused_outputs(self) -> list[int]:
        """The outputs that no grad reaches but whose recomputed output needs one: torch's node gives the
        inner backward zeros for them."""
        return [k for k, root in enumerate(self.roots) if root is not None and k not in self.used]

    def zeros(self, k: int) -> torch.Tensor:
        metadata = self.node._input_metadata[k]
        return torch.zeros(list(metadata.shape), dtype=metadata.dtype, device=metadata.device)


_REENTRANT_WITH_INPUTS = ("When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing "
                          "an `inputs` parameter to .backward(). To resolve this error, you can either set "
                          "use_reentrant=False, or call .backward() without passing the `inputs` argument.")
