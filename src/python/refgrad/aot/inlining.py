"""A torch.compile'd region's backward inlined into a captured program: the `call_backward` of its
CompiledFunctionBackward node replaced by the ATen instructions of AOTAutograd's backward graph.

What torch runs for that node (torch/_functorch/_aot_autograd/runtime_wrappers.py, torch 2.13):

* the prologue (``_backward_prologue``) makes the graph's arguments: ``[*ctx.symints,
  *ctx.saved_tensors, *ctx._tensors_no_vc_check, *ctx.opaque_objects, *grads it keeps]``, the grads
  of the outputs that need one (an output that aliases an input, or needs no grad, has none) made
  contiguous where the graph was traced so;
* the backward graph, compiled (``compiled_bw``); refgrad reads the graph before compilation
  (``CompiledFunction._lazy_backward_info.bw_module``): what Inductor is given;
* the epilogue (``_backward_epilogue``) gives its outputs back as one grad per forward input, and
  the engine passes those that are needed to the node's edges.

The import reads the placeholders in that order: SymInts become their values in this backward, the
saved tensors the program's (``$...``), the grads its registers. Which grads the prologue keeps is
asked of the prologue itself: it is called with grads filled with 1, 2, 3, ... and each grad it
returns is known by its value. Opaque objects, RNG state, effect tokens and tensor subclasses are
refused with a message.
"""
from __future__ import annotations

from typing import Optional

import torch

import refgrad
from refgrad.aot.importing import Emitted, Operand, emit
from refgrad.compiled_autograd.importing import _dtype, _tensor_type
from refgrad.torch.host import _FunctionNode
from refgrad.torch.nodes import _is_compiled_function


def _error(message: str) -> refgrad.Error:
    return refgrad.Error(f"refgrad.aot: {message}")


def backward_graph(fn) -> torch.fx.GraphModule:
    """The AOT backward graph of a CompiledFunctionBackward node, before its compiler lowered it."""
    compiled_function = fn._forward_cls
    info = getattr(compiled_function, "_lazy_backward_info", None)
    module = getattr(info, "bw_module", None)
    if module is None and hasattr(info, "bw_module_fn"):
        module = info.bw_module_fn()
    if not isinstance(module, torch.fx.GraphModule):
        raise _error(f"{fn.name()}: torch kept no backward graph for this compiled region (it was compiled "
                     "ahead of its first backward); refgrad can call it, not open it")
    return module


def _refuse_unsupported(compiled_function) -> None:
    metadata = compiled_function.metadata
    if compiled_function.maybe_subclass_metadata is not None:
        raise _error("a compiled region with tensor subclasses cannot be opened yet")
    if metadata.num_backward_tokens or metadata.is_rng_op_functionalized:
        raise _error("a compiled region with effect tokens or functionalized RNG cannot be opened yet")


def _kept_grads(fn, grads_count: int, saved: list, symints: list, opaque: list) -> list[int]:
    """For each tangent placeholder, the index of the grad the prologue gives it."""
    metadata = list(fn._input_metadata)
    markers = [torch.full(list(m.shape), float(i + 1), dtype=m.dtype) for i, m in enumerate(metadata)]
    if any(marker.numel() == 0 for marker in markers):
        raise _error(f"{fn.name()}: an output with no elements cannot be told apart from the others by value")
    prologue = fn._forward_cls._bw_prologue_fn
    arguments = prologue(list(saved), list(symints), list(opaque), list(markers))
    kept = []
    for argument in arguments[len(symints) + len(saved) + len(opaque):]:
        if not isinstance(argument, torch.Tensor):
            raise _error(f"{fn.name()}: the prologue gave a {type(argument).__name__} where a grad was expected")
        kept.append(int(argument.reshape(-1)[0].item()) - 1)
    if len(kept) and not all(0 <= k < grads_count for k in kept):
        raise _error(f"{fn.name()}: the prologue's grads could not be matched with the node's")
    return kept


def region_instructions(function: _FunctionNode, operands: list[Optional[str]], saved: list[str],
                        prefix: str) -> tuple[list[str], Emitted, list[Operand]]:
    """The node's backward: the instructions that make the grads it is given where the call has none
    (zeros, as torch's engine materializes an undefined grad for an autograd.Function), the ATen
    instructions of its graph, and one operand per forward input (the epilogue's grads). operands: the
    call's grads ("%g" or None); saved: its saved tensors ("$name"), in the program's order
    (ctx.saved_tensors without the Nones, then ctx._tensors_no_vc_check)."""
    fn = function.node
    compiled_function = fn._forward_cls
    _refuse_unsupported(compiled_function)
    gm = backward_graph(fn)
    full_saved: list[Optional[str]] = list(saved)
    for position in function.saved_nones:
        full_saved.insert(position, None)
    symints = [int(s) for s in (getattr(fn, "symints", None) or [])]
    opaque = list(getattr(fn, "opaque_objects", None) or [])
    if opaque:
        raise _error(f"{fn.name()}: a compiled region with opaque objects cannot be opened yet")
    saved_tensors = list(fn.saved_tensors) + list(getattr(fn, "_tensors_no_vc_check", []))
    kept = _kept_grads(fn, len(operands), saved_tensors, symints, opaque)
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    expected = len(symints) + len(full_saved) + len(kept)
    if len(placeholders) != expected:
        raise _error(f"{fn.name()}: the backward graph has {len(placeholders)} placeholders, the prologue "
                     f"makes {expected} arguments")
    materialized, grads = [], list(operands)
    metadata = list(fn._input_metadata)
    for k in kept:
        if grads[k] is None:
            grads[k] = f"%{prefix}zeros_grad{k}"
            sizes = ", ".join(str(size) for size in metadata[k].shape)
            materialized.append(f"{grads[k]} = aten.zeros.default [{sizes}]  dtype={_dtype(metadata[k].dtype)}")
    values: dict[torch.fx.Node, Operand] = {}
    sources: list[Operand] = [*symints, *full_saved, *[grads[k] for k in kept]]
    for node, value in zip(placeholders, sources):
        values[node] = value
    emitted = emit(gm, values, prefix)
    return materialized, emitted, emitted.outputs


def _edge_results(function: _FunctionNode, grads: list[Operand]) -> list[Operand]:
    """The engine's step after the epilogue: the grads of the inputs that need one, in order, to the
    node's valid edges (refgrad.torch.host._function_backward does the same at run time)."""
    fn = function.node
    needs_input_grad = tuple(fn.needs_input_grad)
    valid_edges = [node is not None for node, _ in fn.next_functions]
    if len(grads) != len(needs_input_grad):
        raise _error(f"{fn.name()}: the backward graph returns {len(grads)} grads for "
                     f"{len(needs_input_grad)} forward inputs")
    wanted = iter(grad for grad, needed in zip(grads, needs_input_grad) if needed)
    return [next(wanted, None) if valid else None for valid in valid_edges]


def _region_program(materialized: list[str], emitted: Emitted, extra: list[str]) -> refgrad.Program:
    """The region's instructions as a program of their own (its constants declared saved), to splice in."""
    declarations = [f"  saved ${name} : {_tensor_type(value)}" for name, value in emitted.constants.items()]
    code = ["  " + line for line in materialized + emitted.lines + extra]
    return refgrad.Program.parse("\n".join(["program region", *declarations, "code", *code]) + "\n", "<region>")


def inline_compiled_regions(bundle: refgrad.Bundle,
                            function_nodes: dict[str, _FunctionNode]) -> tuple[refgrad.Bundle, list[int]]:
    """The bundle's program with each call_backward of a compiled region's function replaced by its
    backward graph's ATen instructions (other functions are left as calls; the k-th region's registers
    start with `aotk_`), and for each of its instructions the pc of the instruction it comes from."""
    program = bundle.program
    tensors = dict(bundle.tensors)
    old_pc = list(range(len(program)))
    pc, region = 0, 0
    while pc < len(program):
        instr = program.code[pc]
        function = function_nodes.get(instr.target) if instr.op == "call_backward" else None
        if function is None or not _is_compiled_function(function.node):
            pc += 1
            continue
        operands = [None if o is None else "%" + o for o in instr.operands]
        materialized, emitted, grads = region_instructions(function, operands, list(instr.attrs["saved"]),
                                                           f"aot{region}_")
        extra, renames = [], {}
        for k, (result, value) in enumerate(zip(instr.results, _edge_results(function, grads))):
            if result is None:
                continue
            if isinstance(value, int):
                raise _error(f"{instr.target}: the backward graph returns an int where grad {k} belongs")
            if isinstance(value, str) and value.startswith("$"):  # a saved tensor handed back as a grad
                extra.append(f"%{result} = aten.alias.default {value}")
            else:
                renames[result] = None if value is None else value.removeprefix("%")
        spliced = _region_program(materialized, emitted, extra)
        program = program.spliced(pc, spliced, renames, [instr.target])
        tensors.update({"$" + name: value for name, value in emitted.constants.items()})
        old_pc[pc:pc + 1] = [old_pc[pc]] * len(spliced)
        pc += len(spliced)
        region += 1
    return refgrad.make_bundle(program, tensors), old_pc
