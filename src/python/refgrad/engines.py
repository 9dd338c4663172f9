"""Backward engines that refgrad.check compares with the oracle.

An engine turns one fresh forward into leaf gradients. refgrad.check gives
each engine its own forward (a deep copy of the module, the RNG state
restored, the arguments cloned, every .grad None), so that engines never see
each other's state.

The Engine protocol (any object with these two members is an engine):

    name: str
        How reports, result sets and reproducers name the engine.

    gradients(forward, grad_outputs, *, observe=None) -> dict[str, torch.Tensor | None]
        forward(transform=None) -> Forward
            Runs fn(*args) afresh and returns a Forward: ``.outputs`` (the
            list of tensors to differentiate), ``.leaves`` (name -> the
            leaf tensors of this forward that require grad, by the names the
            report uses) and ``.inputs``: None for a backward into every leaf
            (torch.autograd.backward), or the names of the leaves to
            differentiate with respect to, as torch.autograd.grad's inputs
            (refgrad.check's inputs=, and any probes). ``transform``, when
            given, is applied to fn before the call (``transform=torch.compile``
            compiles the forward). Call it exactly once.
        grad_outputs: list[torch.Tensor]
            One incoming gradient per output (ones), as
            torch.autograd.backward(outputs, grad_outputs) takes them.
        observe: optional. Only engines that run torch's autograd graph
            (the grad_fn nodes of Forward.outputs) declare this keyword; when
            check passes it, the engine calls ``observe(run)``, run the Forward, after the
            forward and before the backward, so that check can register node
            hooks that record each node's incoming and outgoing gradients.
            Engines without it are black boxes: check localizes their errors
            by adding zero "probe" leaves to the forward's intermediates
            (Forward.leaves then holds them too, named "~probe0", ...), so an
            engine should return the gradient of every leaf in Forward.leaves.
        Returns each leaf's gradient by name (what .grad holds after the
        backward; None for a leaf the backward did not reach), on any device.
        When ``run.inputs`` is given, only those: what
        torch.autograd.grad(run.outputs, [leaves...], grad_outputs,
        allow_unused=True) returns, by name; no .grad is written, and
        post-accumulate-grad hooks do not fire. differentiate(run,
        grad_outputs) does either, as the forward asks.

    Example, an engine that scales one gradient:

        class Scaled:
            name = "scaled"
            def gradients(self, forward, grad_outputs):
                run = forward()
                grads = refgrad.engines.differentiate(run, grad_outputs)
                grads["0.weight"] = grads["0.weight"] * 1.01
                return grads

Engines by name (engine()):
    "eager"                       torch.autograd.backward (torch.autograd.grad given Forward.inputs)
    "compiled_autograd"           compiled autograd (torch._dynamo.compiled_autograd) with backend aot_eager
    "compiled_autograd:BACKEND"   the same with any torch.compile backend ("compiled_autograd:inductor")
    "torch_compile"               fn under torch.compile (backend inductor); its backward is AOT autograd's
    "torch_compile:BACKEND"       the same with another backend ("torch_compile:aot_eager")
and any of them with ":cuda" appended runs on the GPU (only when torch.cuda.is_available()).
CompiledAutograd(backend=...) and TorchCompile(backend=...) take any torch.compile backend, a
user's own compiler function included.

The compiled engines make sure they really ran compiled: their backend is
wrapped so that every compilation and every call of the compiled code is
counted, and a backward that did not run compiled code raises EngineError.
Compiled autograd's graph cache is cleared before each backward
(torch._dynamo.compiled_autograd.reset()), so that an earlier compilation,
with another backend perhaps, is never reused.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Union

import torch

import refgrad

__all__ = ["CompiledAutograd", "Eager", "Engine", "EngineError", "Forward", "NoDevice", "TorchCompile",
           "accepts_observe", "backend_name", "differentiate", "engine", "leaf_grads"]


class EngineError(refgrad.Error):
    """An engine could not run as asked (a compiled engine that ran no compiled code, ...)."""


class NoDevice(EngineError):
    """A CUDA engine asked for where torch.cuda.is_available() is false."""


@dataclass
class Forward:
    """One fresh forward: fn's outputs and the leaves (by name) they were computed from. ``inputs``: None
    (a backward into every leaf), or the names of the leaves whose gradients the backward is to compute, as
    torch.autograd.grad(outputs, inputs) does (refgrad.check's inputs=)."""

    outputs: list[torch.Tensor]
    leaves: dict[str, torch.Tensor]
    inputs: Optional[list[str]] = None


class Engine(Protocol):
    name: str

    def gradients(self, forward: Callable[..., Forward], grad_outputs: list[torch.Tensor]
                  ) -> dict[str, Optional[torch.Tensor]]: ...


def accepts_observe(engine: Any) -> bool:
    """Whether the engine's gradients() takes observe= (it runs torch's autograd graph)."""
    try:
        return "observe" in inspect.signature(engine.gradients).parameters
    except (TypeError, ValueError):
        return False


def leaf_grads(run: Forward) -> dict[str, Optional[torch.Tensor]]:
    """What .grad each leaf holds, by name."""
    return {name: leaf.grad for name, leaf in run.leaves.items()}


def differentiate(run: Forward, grad_outputs: list[torch.Tensor]) -> dict[str, Optional[torch.Tensor]]:
    """The backward ``run`` asks for, by name: torch.autograd.backward into every leaf and each leaf's .grad
    (run.inputs None), or torch.autograd.grad(run.outputs, the leaves named by run.inputs, grad_outputs,
    allow_unused=True), the gradients it returns (None where unused) and no other."""
    device = run.outputs[0].device
    grads = [g.to(device) for g in grad_outputs]
    if run.inputs is None:
        torch.autograd.backward(run.outputs, grads)
        return leaf_grads(run)
    found = torch.autograd.grad(run.outputs, [run.leaves[name] for name in run.inputs], grads, allow_unused=True)
    return dict(zip(run.inputs, found))


def _backward(run: Forward, grad_outputs: list[torch.Tensor],
              observe: Optional[Callable]) -> dict[str, Optional[torch.Tensor]]:
    if observe is not None:
        observe(run)
    return differentiate(run, grad_outputs)


class Eager:
    """torch.autograd.backward (torch.autograd.grad over Forward.inputs, when given): the engine every other
    one is measured against."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.name = "eager" if device == "cpu" else f"eager:{device}"

    def gradients(self, forward, grad_outputs, *, observe=None):
        return _backward(forward(), grad_outputs, observe)


class _CountingBackend:
    """A torch.compile backend that wraps another and counts compilations and calls of what it compiled
    (class-wide, so that a compiled callable reused from a cache counts too)."""

    compilations = 0
    calls = 0

    def __init__(self, backend: Union[str, Callable]):
        self.backend = backend
        self.__name__ = getattr(backend, "__name__", str(backend))

    def __call__(self, graph_module, example_inputs):
        inner = torch._dynamo.lookup_backend(self.backend) if isinstance(self.backend, str) else self.backend
        compiled = inner(graph_module, example_inputs)
        _CountingBackend.compilations += 1

        def run(*args):
            _CountingBackend.calls += 1
            return compiled(*args)

        return run

    @classmethod
    def snapshot(cls) -> tuple[int, int]:
        return cls.compilations, cls.calls


def backend_name(backend: Union[str, Callable]) -> str:
    """A backend's name: the string, a function's qualname, or an object's class name (no addresses)."""
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__qualname__", None) or type(backend).__qualname__


def _suffix(device: str) -> str:
    return "" if device == "cpu" else f":{device}"


class CompiledAutograd:
    """torch.autograd.backward under compiled autograd: the engine's graph of the backward (every node,
    hooks and AccumulateGrad included) is traced and compiled by torch.compile with ``backend`` (a
    backend's name or a compiler function gm, example_inputs -> callable) and then run.

    ``captures`` and ``compiled_calls`` say what the last backward did: how many graphs compiled
    autograd captured (torch._dynamo.utils.counters["compiled_autograd"]["captures"]) and how many
    times compiled code ran; a backward with either at 0 raises EngineError.

    ``fullgraph`` is torch.compile's for the backward's graph. It is False by default, as under
    torch._dynamo.config.compiled_autograd, which compiles the backward with the user's torch.compile
    arguments (torch.compile's default; config.compiled_autograd_kwargs_override may set it): dynamo then
    breaks the graph where it cannot trace (a checkpoint's recomputation) instead of failing.

    Given Forward.inputs, the backward is torch.autograd.grad(outputs, inputs, allow_unused=True) under
    compiled autograd, which compiles it too (torch 2.13: the engine hands compiled autograd the graph task
    with its captures, accumulate_grad=False; the traced graph returns the captured grads where a backward's
    graph calls call_accumulate_grad, and no .grad is written)."""

    def __init__(self, backend: Union[str, Callable] = "aot_eager", device: str = "cpu", name: Optional[str] = None,
                 fullgraph: bool = False):
        self.backend = backend
        self.device = device
        self.fullgraph = fullgraph
        self.name = name or _engine_name("compiled_autograd", backend, "aot_eager", device)
        self.captures = 0
        self.compiled_calls = 0

    def gradients(self, forward, grad_outputs, *, observe=None):
        from torch._dynamo import compiled_autograd
        from torch._dynamo.utils import counters

        backend = _CountingBackend(self.backend)
        run = forward()
        captures, (_, calls) = counters["compiled_autograd"]["captures"], _CountingBackend.snapshot()
        compiled_autograd.reset()  # never reuse a graph compiled earlier, perhaps by another backend
        with compiled_autograd._enable(lambda gm: torch.compile(gm, backend=backend, fullgraph=self.fullgraph)):
            grads = _backward(run, grad_outputs, observe)
        compiled_autograd.reset()
        self.captures = counters["compiled_autograd"]["captures"] - captures
        self.compiled_calls = _CountingBackend.calls - calls
        if self.captures == 0 or self.compiled_calls == 0:
            raise EngineError(f"{self.name}: the backward ran without compiled autograd (graphs captured: "
                              f"{self.captures}, compiled calls: {self.compiled_calls})")
        return grads


def _engine_name(kind: str, backend: Union[str, Callable], default_backend: str, device: str) -> str:
    """"compiled_autograd", "compiled_autograd:inductor", "torch_compile:aot_eager:cuda", ...: the
    backend is named unless it is the kind's default."""
    backend_part = "" if backend == default_backend else f":{backend_name(backend)}"
    return f"{kind}{backend_part}{_suffix(device)}"


class TorchCompile:
    """fn under torch.compile(backend=...): AOT autograd compiles the forward and its backward, and the
    backward runs as one CompiledFunctionBackward node (a black box to refgrad: not localized).
    ``compiled_calls`` counts the calls of compiled code in the last forward; 0 raises EngineError.
    Given Forward.inputs, torch.autograd.grad runs that graph (AOT autograd's backward is an ordinary
    autograd node, so autograd.grad runs it as it runs any)."""

    # its forward is compiled too: its saved activations round otherwise than eager's (refgrad.check's rule)
    compiles_forward = True

    def __init__(self, backend: Union[str, Callable] = "inductor", device: str = "cpu", name: Optional[str] = None):
        self.backend = backend
        self.device = device
        self.name = name or _engine_name("torch_compile", backend, "inductor", device)
        self.compiled_calls = 0

    def gradients(self, forward, grad_outputs):
        backend = _CountingBackend(self.backend)
        calls = _CountingBackend.calls
        # dynamo caches compiled code per code object; without a reset, a forward compiled earlier (by
        # another backend, or by the user's own torch.compile) runs again and this backend is never called
        torch._dynamo.reset()
        run = forward(transform=lambda fn: torch.compile(fn, backend=backend))
        self.compiled_calls = _CountingBackend.calls - calls
        if self.compiled_calls == 0:
            raise EngineError(f"{self.name}: the forward ran no compiled code (torch.compile fell back to eager)")
        return _backward(run, grad_outputs, None)


@dataclass
class Compiled:
    """What torch.compile(original, backend=...) returned, taken apart: the module or function it wraps,
    the backend (what torch.compile was given, or the compiler object it made of it) and its name."""

    original: Any
    backend: Any
    backend_name: str


def _backend_of(callback: Any) -> tuple[Any, str]:
    """The backend inside dynamo's callback: it is wrapped (CatchErrorsWrapper, ConvertFrame, ...), each
    wrapper keeping the one inside as _torchdynamo_orig_backend, down to the one with compiler_fn."""
    inner = callback
    while not hasattr(inner, "compiler_fn") and hasattr(inner, "_torchdynamo_orig_backend"):
        inner = inner._torchdynamo_orig_backend
    backend = getattr(inner, "compiler_fn", inner)
    name = getattr(inner, "compiler_name", None) or backend_name(backend)
    return backend, name


def compiled_parts(value: Any) -> Optional[Compiled]:
    """The parts of a torch.compile'd module or function; None for anything else."""
    if isinstance(value, torch._dynamo.eval_frame.OptimizedModule):
        return Compiled(value._orig_mod, *_backend_of(value.dynamo_ctx.callback))
    original = getattr(value, "_torchdynamo_orig_callable", None)
    if original is None or not callable(value):
        return None
    cells = [cell.cell_contents for cell in (getattr(value, "__closure__", None) or ())]
    callbacks = [content for content in cells if hasattr(content, "_torchdynamo_orig_backend")]
    if not callbacks:
        return None
    return Compiled(original, *_backend_of(callbacks[0]))


_KINDS = {"eager": Eager, "compiled_autograd": CompiledAutograd, "torch_compile": TorchCompile}


def engine(spec: Union[str, Any]) -> Any:
    """An engine from its name ("eager", "compiled_autograd:inductor", "torch_compile:aot_eager:cuda", ...);
    an object is returned as it is. Raises EngineError for an unknown name, and for a CUDA engine when
    torch.cuda.is_available() is false."""
    if not isinstance(spec, str):
        if not hasattr(spec, "gradients") or not hasattr(spec, "name"):
            raise EngineError(f"refgrad.engines: {spec!r} is neither an engine name nor an object with .name "
                              "and .gradients(forward, grad_outputs) (the Engine protocol)")
        return spec
    parts = spec.split(":")
    device = "cpu"
    if parts[-1] == "cuda":
        device = parts.pop()
        if not torch.cuda.is_available():
            raise NoDevice(f"{spec}: torch.cuda.is_available() is false (no GPU)")
    kind = _KINDS.get(parts[0])
    if kind is None or len(parts) > 2 or (kind is Eager and len(parts) > 1):
        raise EngineError(f"refgrad.engines: unknown engine '{spec}' (eager, compiled_autograd[:BACKEND], "
                          "torch_compile[:BACKEND], each optionally with :cuda)")
    if kind is Eager:
        return Eager(device)
    return kind(parts[1], device) if len(parts) == 2 else kind(device=device)
