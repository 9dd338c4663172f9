"""Compiled autograd's graph as a refgrad program, and refgrad as a compiled autograd backend.

torch 2.13's compiled autograd traces a backward into an FX graph whose calls are the engine's own
steps made functional: validate_outputs, one ``ops.<Node>(grads, needs_input_grad, *saved)`` per
built-in node, torch.add for input buffers, accumulate-grad, hooks, autograd.Function backwards. That
graph is a functionalized backward program; this package reads it as one.

    import refgrad.compiled_autograd as rca
    torch._dynamo.compiled_autograd._enable(rca.backend)          # backwards run in refgrad
    recorder = rca.backend(record=True, save_to="bwd.safetensors")
    torch._dynamo.compiled_autograd._enable(recorder)             # torch runs; refgrad records
    program = refgrad.torch.capture(loss, via="compiled_autograd").program

* refgrad.compiled_autograd.packing: the order torch packs each node's saved fields in, read from
  torch's own code generator (torchgen), not written down by hand.
* refgrad.compiled_autograd.importing: import_graph(), the FX graph and its call's values -> a program.
* refgrad.compiled_autograd.backend: backend, Backend, capture.

docs/compiled_autograd.md shows the graph format and what each call becomes.
"""
from refgrad.compiled_autograd.backend import Backend, backend, capture
from refgrad.compiled_autograd.importing import Imported, import_graph
from refgrad.compiled_autograd.packing import Packing, packing, packings

__all__ = ["Backend", "Imported", "Packing", "backend", "capture", "import_graph", "packing", "packings"]
