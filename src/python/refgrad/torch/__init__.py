"""Capture a real PyTorch backward graph as a refgrad program, and run it.

    import refgrad.torch
    loss = loss_fn(model(x), target)
    capture = refgrad.torch.capture(loss, names=dict(model.named_parameters()))
    grads = capture.run(precision="float64")  # {"0.weight": tensor, ...}, as .grad would be
    capture.save("model.safetensors")         # one bundle: program and tensors

capture() walks the grad_fn graph (name(), next_functions, _sequence_nr(),
_input_metadata, _saved_* fields, AccumulateGrad's .variable) into the graph
model of refgrad.graph, and refgrad.functionalize (the C++ functionalizer)
orders it as torch's engine would. Nothing of the engine is written here.
graph_of() returns the graph model without functionalizing it.
Call it before the backward (or after one with retain_graph=True): a backward
frees the saved values.

What torch 2.13 shows to Python, and so what a capture holds
(../shared/reference/pytorch-autograd.md §3), is told in the module that reads it:

* refgrad.torch.nodes: reading one grad_fn node (its name, kind, SavedTensor objects).
* refgrad.torch.walk: the nodes reachable from the outputs, and what capture refuses
  (UnsupportedError, coverage()).
* refgrad.torch.saved: a node's saved fields, those torch shows and the hidden ones derived
  (or refused where nothing shows them: a non-leaf's geometry outside recording()); Tensor[]
  inputs (cat, stack).
* refgrad.torch.in_place: recording(), which lets capture take in-place ops on views (CopySlices)
  and keeps the geometries and values other nodes hide (as_strided's self, native_dropout's train).
* refgrad.torch.checkpointing: activation checkpointing, both modes (saved values recomputed as the
  engine recomputes them; a reentrant checkpoint's node replaced by its recomputed graph).
* refgrad.torch.builder: the graph model from a walk: nodes, leaves, names, origins, hooks read.
* refgrad.torch.host: the Python side of a run: which hooks are captured and how they are called,
  autograd.Function backwards.
* refgrad.torch.capturing: capture(), graph_of() and the Capture they return.
"""
from refgrad.torch.builder import _origin
from refgrad.torch.capturing import Capture, capture, graph_of
from refgrad.torch.host import Host
from refgrad.torch.in_place import recording
from refgrad.torch.walk import Unsupported, UnsupportedError, _Walk, coverage

__all__ = ["Capture", "Host", "Unsupported", "UnsupportedError", "capture", "coverage", "graph_of", "recording"]
