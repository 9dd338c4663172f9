"""refgrad.compiled_autograd: compiled autograd's FX graph imported as a refgrad program (issue 18).

The import is checked four ways: the packing order read from torch's generator against refgrad's fields
(every node) and against the arguments of real graphs (the zoo's: count and kind of each argument); the
imported program against refgrad.torch.capture's, node by node, field by field, for every node refgrad has
(the grad_fn path reads each field by its name, `_saved_<field>`, so a field fed into the wrong slot
differs there; test_every_node_imports_the_fields_the_grad_fn_walk_reads says which nodes it cannot compare
and why); the gradients of the imported programs against torch's; the backend and the recorder.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch._dynamo import compiled_autograd

import refgrad
import refgrad.compiled_autograd as rca
import refgrad.torch
import refgrad.zoo

ROOT = Path(__file__).resolve().parents[2]
ZOO = sorted(refgrad.zoo.ZOO)


def _names(model: torch.nn.Module) -> dict:
    return dict(model.named_parameters())


def _eager_grads(model, forward) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    forward(model).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def _assert_grads(got: dict, expected: dict, dtype: torch.dtype) -> None:
    assert set(got) == set(expected)
    for name in expected:
        if dtype == torch.float64:  # tight: only the order of float64 sums may differ (the zoo's grads are O(1);
            # a conv bias under batch norm has a true gradient of 0, which both give as noise of 1e-16)
            torch.testing.assert_close(got[name], expected[name], rtol=1e-10, atol=1e-14)
        else:
            torch.testing.assert_close(got[name], expected[name])


# -- the packing order ----------------------------------------------------------------------------------


def test_packing_names_every_field_of_every_refgrad_node():
    """For every node refgrad has, torch's generator packs each of refgrad's fields (by the same name),
    and the only other packed arguments are a Tensor[] input's length and retain_variables."""
    for schema in refgrad.nodes():
        packed = rca.packing(schema.name)
        fields = [field.name for field in schema.saved]
        assert set(fields) <= set(packed.args), (schema.name, fields, packed.args)
        others = [arg for arg in packed.args if arg not in fields]
        assert all(arg == "retain_variables" or arg[:-len("_size_")] in schema.inputs for arg in others), \
            (schema.name, others)
        list_inputs = [arg[:-len("_size_")] for arg in others if arg.endswith("_size_")]
        # one need bit per input (a Tensor[] input has one for all its elements)
        assert packed.num_inputs == len(schema.inputs), (schema.name, packed.num_inputs, schema.inputs)
        assert set(list_inputs) <= set(schema.inputs)


def test_packing_is_read_from_torch_not_written_down():
    """The order is torch's generator's: sorted saved inputs, then sorted saved outputs (AddmmBackward0's,
    as the graph in the issue shows it), and the C++ types match what the graph passes."""
    addmm = rca.packing("AddmmBackward0")
    assert addmm.args == ("alpha", "beta", "mat1", "mat1_layout", "mat1_sym_sizes", "mat1_sym_strides", "mat2",
                          "mat2_layout", "mat2_sym_sizes", "mat2_sym_strides")
    layer_norm = rca.packing("NativeLayerNormBackward0")
    assert layer_norm.args == ("bias", "input", "normalized_shape", "weight", "result1", "result2")
    assert rca.packing("CatBackward0").list_sizes() == {"tensors": 0}
    with pytest.raises(refgrad.Error, match="generates no functional op named NoSuchBackward0"):
        rca.packing("NoSuchBackward0")


def _python_kind(cpp_type: str) -> tuple:
    """What a packed value of this C++ type is in the graph (IValuePacker, torch/csrc/dynamo/compiled_autograd.h)."""
    if cpp_type.startswith("Tensor") or cpp_type.startswith("std::optional<Tensor"):
        return (torch.fx.Node, type(None))
    if "vector" in cpp_type or "List" in cpp_type or "OptionalArray" in cpp_type:
        return (list, tuple, type(None))
    if cpp_type.startswith(("at::TensorOptions", "at::TensorGeometry", "TypeAndSize", "caffe2::TypeMeta")):
        return (tuple,)
    if cpp_type.startswith(("at::ScalarType", "at::Layout", "int64_t", "size_t", "c10::SymInt")):
        return (int,)
    if cpp_type.startswith(("double", "bool", "at::Scalar", "std::optional", "std::string", "c10::string_view")):
        return (int, float, bool, str, type(None))
    return (object,)


def _graph_node_calls(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        if node.op == "call_function" and getattr(node.target, "__module__", "") == "torch._dynamo.compiled_autograd.ops" \
                and node.target.__name__ != "validate_outputs":
            yield node


@pytest.mark.parametrize("model_name", ZOO)
def test_packing_matches_real_graphs(model_name):
    """Every node call of a real graph has as many packed arguments as torch's generator packs, each of the
    kind its C++ type packs to: a swapped pair of fields of different types fails here."""
    model, forward = refgrad.zoo.ZOO[model_name](dtype=torch.float32)
    graphs = []
    compiled_autograd.reset()
    with compiled_autograd._enable(lambda gm: (graphs.append(gm), gm)[1]):
        forward(model).backward()
    compiled_autograd.reset()
    seen = set()
    for node in _graph_node_calls(graphs[0]):
        packed = rca.packing(node.target.__name__)
        grads, needs, *args = node.args
        assert len(needs) == packed.num_inputs, node.format_node()
        assert len(args) == len(packed.args), node.format_node()
        for value, name, cpp_type in zip(args, packed.args, packed.types):
            if isinstance(value, torch.fx.Node) and "unwrap_maybe_dynamic_int" in str(value.target):
                value = 0  # a SymInt
            assert isinstance(value, _python_kind(cpp_type)), (node.target.__name__, name, cpp_type, value)
        seen.add(node.target.__name__)
    assert seen


# -- the program, compared with the grad_fn capture's ---------------------------------------------------


def _normalized(program: refgrad.Program, bundle: refgrad.Bundle):
    """The program with registers and saved tensors renamed in order of appearance, the accumulate_grad
    instructions apart (compiled autograd moves each right after its grad; refgrad's functionalizer puts it
    where the engine's queue runs it), leaf names as the user gave them, and the saved values in order."""
    registers: dict[str, str] = {}
    saved: dict[str, str] = {}
    values = []
    inline = {decl.name: decl.value for decl in program.saved}
    tensors = bundle.tensors

    def register(match):
        return registers.setdefault(match.group(0), f"%r{len(registers)}")

    def saved_tensor(match):
        # by value: compiled autograd lifts a tensor two nodes save once (by TensorImpl), the grad_fn walk
        # unpacks it twice
        name = match.group(0)
        if name not in saved:
            value = tensors.get(name, inline.get(name[1:]))
            value = None if value is None else torch.tensor(value.numpy())
            same = next((i for i, v in enumerate(values) if _same(v, value)), None)
            if same is None:
                values.append(value)
                same = len(values) - 1
            saved[name] = f"$s{same}"
        return saved[name]

    code, accumulates = [], set()
    for instr in program.code:
        text = re.sub(r"\$[\w.]+", saved_tensor, re.sub(r"%[\w.]+", register, str(instr)))
        text = re.sub(r"@_?([\w.]+)", r"@\1", text)
        (accumulates.add(text) if text.startswith("accumulate_grad") else code.append(text))
    return code, accumulates, values


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.isnan(), b.isnan()) and \
        torch.equal(a.nan_to_num(), b.nan_to_num())


def _assert_same_program(imported, captured) -> None:
    code, accumulates, values = _normalized(imported.program, imported.bundle)
    expected_code, expected_accumulates, expected_values = _normalized(captured.program, captured.bundle)
    assert code == expected_code
    assert accumulates == expected_accumulates
    assert len(values) == len(expected_values)
    for value, expected in zip(values, expected_values):
        assert _same(value, expected)


@pytest.mark.parametrize("model_name", ZOO)
def test_both_capture_paths_give_the_same_program(model_name):
    model, forward = refgrad.zoo.ZOO[model_name](dtype=torch.float32)
    loss = forward(model)
    imported = refgrad.torch.capture(loss, names=_names(model), via="compiled_autograd")
    captured = refgrad.torch.capture(loss, names=_names(model), order="compiled_autograd")
    _assert_same_program(imported, captured)
    assert all(p.grad is None for p in model.parameters())  # capture traced the backward, ran nothing


def test_the_comparison_sees_a_swapped_field():
    """The comparison above fails when two fields of one node trade values (so it can fail)."""
    model, forward = refgrad.zoo.ZOO["mlp"](dtype=torch.float32)
    loss = forward(model)
    imported = refgrad.torch.capture(loss, names=_names(model), via="compiled_autograd")
    captured = refgrad.torch.capture(loss, names=_names(model), order="compiled_autograd")
    text = str(imported.program).replace("mat1=$addmm_backward0_mat1", "mat1=SWAP").replace(
        "mat2=$addmm_backward0_mat2", "mat1=$addmm_backward0_mat2").replace("mat1=SWAP", "mat2=$addmm_backward0_mat1")
    assert text != str(imported.program)
    swapped = rca.Imported(refgrad.Bundle(refgrad.Program.parse(text), imported.bundle.tensors))
    with pytest.raises(AssertionError):
        _assert_same_program(swapped, captured)


def test_a_changed_packing_order_fails(monkeypatch):
    """If torch packed AddmmBackward0's mat1 and mat2 the other way round (same types, so no count or
    kind check can tell), the program comparison fails: the import follows the order it is given."""
    import refgrad.compiled_autograd.importing as importing

    real = importing.packing

    def swapped(node):
        packed = real(node)
        if node != "AddmmBackward0":
            return packed
        order = {"mat1": "mat2", "mat2": "mat1"}
        return rca.Packing(packed.node, packed.num_inputs, tuple(order.get(a, a) for a in packed.args), packed.types)

    monkeypatch.setattr(importing, "packing", swapped)
    model, forward = refgrad.zoo.ZOO["mlp"](dtype=torch.float32)
    loss = forward(model)
    captured = refgrad.torch.capture(loss, names=_names(model), order="compiled_autograd")
    with pytest.raises((AssertionError, refgrad.Error)):
        _assert_same_program(refgrad.torch.capture(loss, names=_names(model), via="compiled_autograd"), captured)


# -- gradients --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("model_name", ZOO)
def test_imported_programs_give_torchs_gradients(model_name, dtype):
    model, forward = refgrad.zoo.ZOO[model_name](dtype=dtype)
    imported = rca.capture(forward(model), names=_names(model))
    got = imported.run("float32")  # as imported: float64 programs run in float64, float32 ones in float32
    _assert_grads(got, _eager_grads(model, forward), dtype)


# -- the backend and the recorder -------------------------------------------------------------------------


def test_backend_leaves_refgrads_gradients_in_grad():
    model, forward = refgrad.zoo.ZOO["transformer"](dtype=torch.float64)
    expected = _eager_grads(model, forward)
    runs = []
    real_run = rca.Imported.run

    def counted_run(self, precision="float64"):
        runs.append(self.program.name)
        return real_run(self, precision)

    rca.Imported.run = counted_run
    try:
        compiled_autograd.reset()
        with compiled_autograd._enable(rca.backend):
            forward(model).backward()
    finally:
        rca.Imported.run = real_run
        compiled_autograd.reset()
    assert runs == ["backward"]  # refgrad ran the backward, once
    _assert_grads({name: p.grad for name, p in model.named_parameters()}, expected, torch.float64)


def test_record_leaves_torchs_grad_and_writes_a_bundle_refgrad_check_accepts(tmp_path):
    model, forward = refgrad.zoo.ZOO["mlp"](dtype=torch.float32)
    compiled_autograd.reset()
    with compiled_autograd._enable(lambda gm: gm):  # torch's own graph, run eagerly
        forward(model).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    path = tmp_path / "mlp.safetensors"
    recorder = rca.backend(record=True, names=_names(model), save_to=str(path))
    compiled_autograd.reset()
    with compiled_autograd._enable(recorder):
        forward(model).backward()
    compiled_autograd.reset()
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, expected[name]), name  # unchanged, bit for bit
    assert len(recorder.recorded) == 1
    check = subprocess.run([str(ROOT / "build" / "refgrad"), "check", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "4 of 4 gradients pass" in check.stdout


# -- hooks -------------------------------------------------------------------------------------------------


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def _hooked(node_hooks: bool = True):
    """A backward with every kind of hook: tensor pre-hooks (leaf and non-leaf), retain_grad, a node
    pre-hook and post hook (grad_fn.register_prehook / register_hook), a post-accumulate-grad hook, and an
    autograd.Function."""
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(3, dtype=torch.float64, generator=generator).requires_grad_()
    b = torch.randn(3, dtype=torch.float64, generator=generator).requires_grad_()
    seen = []
    w.register_hook(lambda g: g * 2)
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    y = _Square.apply(w) + b
    y.register_hook(lambda g: g + 1)
    if node_hooks:
        y.grad_fn.register_prehook(lambda grad_outputs: (grad_outputs[0] * 3,))
        y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 5, grad_inputs[1]))
    return w, b, y, (y * y).sum(), seen


def test_node_hooks_are_captured_and_run_where_compiled_autograd_runs_them():
    w, b, y, loss, _ = _hooked()
    imported = refgrad.torch.capture(loss, names={"w": w, "b": b}, via="compiled_autograd")
    code = [str(instr) for instr in imported.program.code]
    kinds = {decl.name: str(decl.kind) for decl in imported.program.hooks}
    pre = next(i for i, line in enumerate(code) if "hook &pre" in line)
    add = next(i for i, line in enumerate(code) if "AddBackward0" in line)
    post = next(i for i, line in enumerate(code) if "hook &post" in line and "post_acc" not in line)
    assert pre == add - 1 and post == add + 2  # the pre-hook right before the node, the post hook after validate
    assert sum("tensor_pre" in kind.lower() for kind in kinds.values()) == 2  # y's and w's register_hook
    got = imported.run("float64")
    loss.backward()
    torch.testing.assert_close(got["w"], w.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(got["b"], b.grad, rtol=1e-12, atol=0)
    # the grad_fn walk cannot see node hooks: its gradients differ (so the test above can fail)
    w2, b2, y2, loss2, _ = _hooked()
    walked = refgrad.torch.capture(loss2, names={"w": w2, "b": b2}).run("float64")
    assert not torch.allclose(walked["b"], b.grad)


def test_backend_runs_every_kind_of_hook_as_torch_does():
    results = []
    for backend in (None, rca.backend):
        w, b, y, loss, seen = _hooked()
        y.retain_grad()
        compiled_autograd.reset()
        if backend is None:
            loss.backward()
        else:
            with compiled_autograd._enable(backend):
                loss.backward()
        compiled_autograd.reset()
        results.append((w.grad, b.grad, y.grad, seen))
    (w, b, y, seen), (w2, b2, y2, seen2) = results
    torch.testing.assert_close(w2, w, rtol=1e-12, atol=0)
    torch.testing.assert_close(b2, b, rtol=1e-12, atol=0)
    torch.testing.assert_close(y2, y, rtol=1e-12, atol=0)  # retain_grad(), a C++ tensor pre-hook
    assert len(seen2) == 1 and torch.allclose(seen2[0], w)  # the post-accumulate-grad hook saw refgrad's .grad


# -- what is refused --------------------------------------------------------------------------------------


def test_aot_backward_is_a_host_function():
    """A torch.compile'd region's backward is an AOT backward: compiled autograd copies its aten ops into
    the graph (after call_aot_bwd_prologue); the import runs them as host functions (call_backward), one
    per group of results an engine step needs, and the gradients are torch's."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, dtype=torch.float64, generator=generator).requires_grad_()
    w = torch.randn(4, dtype=torch.float64, generator=generator).requires_grad_()
    compiled = torch.compile(lambda t, u: ((t.sin() * u).exp() * 2).sum(), backend="aot_eager")
    loss = compiled(x, w) + (x * 3).sum()
    imported = refgrad.torch.capture(loss, names={"x": x, "w": w}, via="compiled_autograd")
    assert "call_backward &aot_backward0" in str(imported.program)
    got = imported.run()
    loss.backward()
    torch.testing.assert_close(got["x"], x.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(got["w"], w.grad, rtol=1e-12, atol=0)


def test_capture_via_must_be_known():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(refgrad.Error, match="via must be"):
        refgrad.torch.capture((x * x).sum(), via="jax")


# -- every node: the imported fields against the grad_fn walk's --------------------------------------------

# Forwards for the nodes no OpInfo sample makes (in-place and Scalar variants, native_dropout, ...).
_HAND_MADE = {
    "CeluBackward1": lambda x: torch.nn.functional.celu(x * 1, inplace=True),
    "EluBackward1": lambda x: torch.nn.functional.elu(x * 1, inplace=True),
    "LeakyReluBackward1": lambda x: torch.nn.functional.leaky_relu(x * 1, 0.1, inplace=True),
    "ThresholdBackward1": lambda x: torch.nn.functional.threshold(x * 1, 0.1, 0.0, inplace=True),
    "ClampMaxBackward0": lambda x: torch.clamp_max(x, 0.3),
    "RemainderBackward0": lambda x: torch.remainder(x, 1.5),
    "FmodBackward0": lambda x: torch.fmod(x, 1.5),
    "CopysignBackward1": lambda x: torch.copysign(x, -1.0),
    "DivBackward3": lambda x: torch.ops.aten.div.Scalar_mode(x, 2.5, rounding_mode="trunc"),
    "PowBackward2": lambda x: torch.pow(2.0, x),
    "SpecialXlog1PyBackward1": lambda x: torch.special.xlog1py(2.5, x.abs()),
    "SpecialXlog1PyBackward2": lambda x: torch.special.xlog1py(x, 2.5),
    "RsubBackward1": lambda x: torch.rsub(x, 2.0),
    "NativeDropoutBackward0": lambda x: torch.native_dropout(x, 0.5, True)[0],
    "ScatterBackward1": lambda x: x.scatter(1, torch.tensor([[0], [1], [2]]), 1.5),
    "SqueezeBackward3": lambda x: (x * 1).unsqueeze(1).squeeze_(),
    "UnsqueezeBackward1": lambda x: (x * 1).unsqueeze_(0),
    "UpsampleNearest2DBackward0": lambda x: torch.nn.functional.interpolate(x.reshape(1, 1, 3, 4), scale_factor=2,
                                                                           mode="nearest"),
    "UpsampleNearest3DBackward0": lambda x: torch.nn.functional.interpolate(x.reshape(1, 2, 2, 3, 1), scale_factor=2,
                                                                           mode="nearest"),
    "UpsampleNearestExact2DBackward0": lambda x: torch.nn.functional.interpolate(x.reshape(1, 1, 3, 4), size=(5, 7),
                                                                                mode="nearest-exact"),
    "UpsampleNearestExact3DBackward0": lambda x: torch.nn.functional.interpolate(x.reshape(1, 2, 2, 3, 1),
                                                                                size=(3, 4, 5), mode="nearest-exact"),
    "UpsampleBicubic2DAaBackward0": lambda x: torch.nn.functional.interpolate(x.reshape(1, 1, 3, 4), size=(2, 3),
                                                                             mode="bicubic", antialias=True),
    "TransposeBackward1": lambda x: (x * 1).transpose_(0, 1),
    "AliasBackward0": lambda x: torch.ops.aten.alias(x),
    "ReshapeAliasBackward0": lambda x: torch.ops.aten._reshape_alias(x, [12], [1]),
    "FillBackward1": lambda x: torch.fill(x * 1, x.sum()),
    "FillBackward2": lambda x: (x * 1).fill_(2.5),
    "FillBackward3": lambda x: (x * 1).fill_(x.sum()),
    "TrilBackward0": lambda x: x.tril(),
    "TriuBackward0": lambda x: x.triu(1),
    "DiagEmbedBackward0": lambda x: torch.diag_embed(x),
    "ReshapeAliasBackward0_copy": lambda x: torch.ops.aten._reshape_alias_copy(x, [12], [1]),
    "SelectBackward0_copy": lambda x: torch.select_copy(x, 0, 1),
    "SliceBackward0_copy": lambda x: torch.slice_copy(x, 1, 0, 2),
    "SplitBackward0_copy": lambda x: torch.split_copy(x, 2, 1)[1],
    "SqueezeBackward2_copy": lambda x: torch.squeeze_copy(x.unsqueeze(0), [0]),
    # F.ctc_loss turns tensor lengths into lists (CtcLossBackward0); _ctc_loss.Tensor keeps them
    "CtcLossBackward1": lambda x: torch._ctc_loss(x.log_softmax(1).unsqueeze(1), torch.tensor([[1, 2]]),
                                                  torch.tensor([3]), torch.tensor([2]))[0],
    "NativeBatchNormLegitBackward1": lambda x: torch._native_batch_norm_legit(x, None, None, True, 0.1, 1e-5)[0],
    "ScaledDotProductFlashAttentionForCpuBackward0": lambda x: torch.nn.functional.scaled_dot_product_attention(
        *[x.float().reshape(1, 1, 3, 4)] * 3),
    "ReflectionPad2DBackward0": lambda x: torch.nn.functional.pad(x.reshape(1, 1, 3, 4), (1, 1, 1, 1), mode="reflect"),
    "ReflectionPad3DBackward0": lambda x: torch.nn.functional.pad(x.reshape(1, 1, 1, 3, 4), (1, 1, 1, 1, 0, 0),
                                                                 mode="reflect"),
    "ReplicationPad3DBackward0": lambda x: torch.nn.functional.pad(x.reshape(1, 1, 1, 3, 4), (1, 1, 1, 1, 1, 1),
                                                                  mode="replicate"),
    # unfold's backward, differentiated: x as the grad of a [3, 5] input's unfold(1, 2, 1)
    "UnfoldBackwardBackward0": lambda x: torch.ops.aten.unfold_backward(x.unsqueeze(-1).expand(3, 4, 2), [3, 5],
                                                                        1, 2, 1),
    "UnsafeSplitWithSizesBackward0": lambda x: torch.unsafe_split_with_sizes(x, [1, 3], 1)[1],
    # The complex nodes, from a real x: complex(x, 2x) and back to a real output.
    "ViewAsRealBackward0": lambda x: torch.view_as_real(torch.complex(x, 2 * x) * 1),
    "ConjBackward0": lambda x: torch.view_as_real(torch.complex(x, 2 * x).conj() * torch.complex(x, x)),
    "ConjPhysicalBackward0": lambda x: torch.view_as_real(torch.conj_physical(torch.complex(x, 2 * x))),
    "NegViewBackward0": lambda x: torch.complex(x, 2 * x).conj().imag * 1,
    # Random samples and rrelu's in-place form (OpInfo's normal, bernoulli and rrelu make the others).
    "NormalBackward0": lambda x: (x * 1).normal_(0.5, 2.0),
    "NormalBackward2": lambda x: torch.normal(0.5, x.abs() + 0.1),
    "BernoulliBackward1": lambda x: (x * 1).bernoulli_(torch.sigmoid(x[0])),
    "BernoulliBackward2": lambda x: (x * 1).bernoulli_(0.3),
    "RreluWithNoiseBackward1": lambda x: torch.nn.functional.rrelu(x.clone(), training=True, inplace=True),
    # cdist's first OpInfo samples have p = 0 (CdistBackward0); p = 2 in the matrix-product form.
    "EuclideanDistBackward0": lambda x: torch.cdist(x, x[:2] * 2, compute_mode="use_mm_for_euclid_dist"),
}

# Nodes refgrad has whose fields this test cannot compare, and why:
# * CopyBackwards: the grad_fn walk cannot read its one field, src_options (torch shows no saved field of
#   it), so test_copy_backwards checks it alone.
# * BatchNormWithUpdateBackward0: on the CPU it saves result3 (the reserve) as a uint8 tensor, a dtype
#   refgrad's programs have not; both paths refuse it with a refgrad.Error that says so.
_NOT_COMPARED = {"CopyBackwards", "BatchNormWithUpdateBackward0"}


def _node_names(outputs) -> set[str]:
    seen, stack, names = set(), [o.grad_fn for o in outputs], set()
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        names.add(fn.name().split("::")[-1])
        stack += [next_fn for next_fn, _ in fn.next_functions]
    return names


def _opinfo_forwards(compared: set[str]):
    """(label, fn, inputs): each of the first three float64 samples of each OpInfo that makes a node
    refgrad has that no earlier forward compared (the caller fills ``compared``), then the hand-made
    forwards."""
    from opinfo_outcome import _differentiable_outputs
    from opinfo_samples import autograd_ops, backward_dtypes, differentiable_call, op_id, samples

    wanted = {schema.name for schema in refgrad.nodes()}
    for op in autograd_ops():
        if torch.float64 not in backward_dtypes(op):
            continue
        try:
            for index, sample in zip(range(3), samples(op, torch.float64)):
                fn, inputs = differentiable_call(op, sample)
                outputs = _differentiable_outputs(fn(*inputs)) if inputs else []
                if outputs and (_node_names(outputs) & wanted) - compared:
                    yield f"{op_id(op)}[{index}]", (lambda fn=fn: _differentiable_outputs(fn(*inputs))), inputs
        except Exception:  # a sample torch itself cannot run or differentiate
            continue
    for node, forward in _HAND_MADE.items():
        x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
        yield node, (lambda forward=forward, x=x: [forward(x)]), [x]


def test_every_node_imports_the_fields_the_grad_fn_walk_reads():
    """For every node refgrad has, a forward that makes it (an OpInfo sample, else a hand-made one) is
    captured both ways, and the programs must be equal field for field: the grad_fn walk reads each field
    by its name (grad_fn._saved_<field>), the import by its position in torch's packing, so a packing
    order that changed in torch (a field fed into the wrong slot) fails here. Forwards the grad_fn walk
    cannot capture (nodes refgrad lacks, dtypes it has not) are skipped; every node refgrad has must be
    compared by some forward, except those in _NOT_COMPARED."""
    from opinfo_outcome import grad_outputs_for

    compared: set[str] = set()
    failures = []
    for label, forward, inputs in _opinfo_forwards(compared):
        torch.manual_seed(0)
        with refgrad.torch.recording():
            outputs = forward()
        grads = grad_outputs_for(outputs, label)
        names = {f"x{k}": x for k, x in enumerate(inputs)}
        try:
            walked = refgrad.torch.capture(outputs, grad_outputs=grads, names=names, order="compiled_autograd")
        except refgrad.Error:
            continue
        try:
            imported = refgrad.torch.capture(outputs, grad_outputs=grads, names=names, via="compiled_autograd")
            _assert_same_program(imported, walked)
        except (AssertionError, refgrad.Error) as error:
            failures.append(f"{label}: {type(error).__name__}: {str(error)[:300]}")
            continue
        compared |= {instr.node for instr in imported.program.code if instr.node}
    assert not failures, "\n".join(failures)
    missing = {schema.name for schema in refgrad.nodes()} - compared - _NOT_COMPARED
    assert not missing, f"no forward compared these nodes; add one to _HAND_MADE: {sorted(missing)}"


def test_copy_backwards():
    """CopyBackwards (x.copy_(y)) is written by hand in torch; its one packed field, src_options, is read
    from its struct. The grad_fn walk cannot see the field, so the import is checked by its gradient and
    by the field's value."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.zeros(3, 4, dtype=torch.float64).copy_(x * 2)
    imported = refgrad.torch.capture(y, grad_outputs=torch.ones(3, 4, dtype=torch.float64), names={"x": x},
                                     via="compiled_autograd")
    assert "CopyBackwards" in str(imported.program)
    assert "src_options={dtype=f64, device=cpu, layout=strided}" in str(imported.program)
    got = imported.run("float64")
    y.backward(torch.ones(3, 4, dtype=torch.float64))
    torch.testing.assert_close(got["x"], x.grad, rtol=0, atol=0)


def test_autograd_grad_outputs():
    """torch.autograd.grad's inputs are the graph's returned grads: program outputs, named as capture()
    names them; the backend returns refgrad's, and no .grad changes."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.float64, generator=generator).requires_grad_()
    w = torch.randn(4, 2, dtype=torch.float64, generator=generator).requires_grad_()
    y = (x @ w).tanh().sum()
    imported = refgrad.torch.capture(y, inputs=[x], names={"x": x, "w": w}, via="compiled_autograd")
    assert [decl.name for decl in imported.program.outputs] == ["x"]
    (expected,) = torch.autograd.grad(y, [x], retain_graph=True)
    torch.testing.assert_close(imported.run()["x"], expected, rtol=1e-12, atol=0)
    compiled_autograd.reset()
    with compiled_autograd._enable(rca.backend):
        (got,) = torch.autograd.grad(y, [x], retain_graph=True)
    compiled_autograd.reset()
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert x.grad is None and w.grad is None


def test_saved_tensor_unpack_hooks_run_at_import():
    """saved_tensors_hooks: compiled autograd calls the unpack hook on packed data (a graph input) before
    the node that uses it; the import runs it, and its result is a saved tensor of the program."""
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t / 2):
        y = x.sin()
    imported = refgrad.torch.capture(y.sum(), names={"x": x}, via="compiled_autograd")
    assert "SinBackward0" in str(imported.program)
    got = imported.run()
    y.sum().backward()
    torch.testing.assert_close(got["x"], x.grad, rtol=1e-12, atol=0)


def test_copy_slices():
    """An in-place op on a view (CopySlices): compiled autograd traces copy_slices_prologue, the wrapped
    node and copy_slices_epilogue; the node is a node call, prologue and epilogue host functions."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, dtype=torch.float64, generator=generator).requires_grad_()
    w = torch.randn(2, dtype=torch.float64, generator=generator).requires_grad_()
    y = x * 1
    y[1:3].mul_(w)
    loss = (y * y).sum()
    imported = refgrad.torch.capture(loss, names={"x": x, "w": w}, via="compiled_autograd")
    assert "call_backward &copy_slices" in str(imported.program)
    got = imported.run()
    loss.backward()
    torch.testing.assert_close(got["x"], x.grad, rtol=1e-12, atol=0)
    torch.testing.assert_close(got["w"], w.grad, rtol=1e-12, atol=0)
