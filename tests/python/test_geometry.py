"""Geometries capture cannot see: AsStridedBackward0's self_geometry, CopySlices' base, native_dropout's train.

AsStridedBackward0 saves TensorGeometry(self): the sizes, strides and storage offset of the tensor
at its edge, which torch does not show to Python. It need not be contiguous nor start at offset 0
(a slice, a transpose, a leaf made from a slice), and a wrong guess is a wrong gradient with no
warning. capture reads it from a leaf, or from what refgrad.torch.recording() saw during the forward,
and refuses the node where neither tells (refgrad.torch.saved). Every case is checked against
torch.autograd.grad on the same graph, by DESIGN.md's rule under torch.testing's tolerances:
float64 run in float64, float32 run as captured.
"""
import pytest

torch = pytest.importorskip("torch")

import refgrad  # noqa: E402
import refgrad.torch as rt  # noqa: E402

from grad_compare import DTYPES, assert_grads_close, precision  # noqa: E402


def capture_and_compare(output, inputs, dtype, seed=0):
    """Captures output's backward into inputs with a random grad_output, runs it in refgrad and
    compares with torch.autograd.grad; returns the Capture."""
    torch.manual_seed(seed)
    grad_output = torch.randn_like(output)
    captured = rt.capture(output, inputs=inputs, grad_outputs=[grad_output])
    ours = captured.run(precision(dtype))
    theirs = torch.autograd.grad(output, inputs, grad_output, allow_unused=True)
    for i, (name, expected) in enumerate(zip(captured.captures, theirs)):
        assert_grads_close(ours[name], expected, dtype, f"input {i}")
        assert ours[name].dtype == dtype
    return captured


def saved_geometries(captured, node="AsStridedBackward0"):
    """(sizes, strides, storage_offset) of each captured node's self_geometry, in graph order."""
    return [(list(g.sizes), list(g.strides), g.storage_offset)
            for g in (n.saved["self_geometry"] for n in captured.graph.nodes if n.name == node)]


# ------------------------------------------------------------------ OpInfo ---


def as_strided_samples(variant, dtype):
    from torch.testing._internal.common_methods_invocations import op_db
    op = next(o for o in op_db if o.name == "as_strided" and o.variant_test_name == variant)
    return op, list(op.sample_inputs("cpu", dtype, requires_grad=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["partial_views", ""], ids=["partial_views", "plain"])
def test_opinfo_as_strided_samples_agree_with_torch(variant, dtype):
    # partial_views' input is base[5:15] of a 20-element base: a leaf that is a view at storage offset 5.
    # Read as contiguous at offset 0, storage_offset=0 and =10 gave wrong gradients with no warning.
    op, samples = as_strided_samples(variant, dtype)
    for i, sample in enumerate(samples):
        output = op(sample.input, *sample.args, **sample.kwargs)
        captured = capture_and_compare(output, [sample.input], dtype, seed=i)
        x = sample.input
        assert saved_geometries(captured) == [(list(x.shape), list(x.stride()), x.storage_offset())]


# ------------------------------------------------------ leaves: read as they are ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_leaf_at_a_storage_offset(dtype):
    x = torch.randn(12, dtype=dtype)[2:].detach().requires_grad_()  # not a view, but storage offset 2
    assert x.storage_offset() == 2 and not x._is_view()
    output = x.as_strided((3, 3), (2, 1), 3)  # the storage offset is absolute: x[1:] read overlapping
    captured = capture_and_compare(output, [x], dtype)
    assert saved_geometries(captured) == [([10], [1], 2)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_parameter_made_from_a_slice(dtype):
    weight = torch.nn.Parameter(torch.randn(2, 10, dtype=dtype)[:, 3:])  # strides [10, 1], storage offset 3
    output = weight.as_strided((4, 2), (1, 10))  # no storage_offset: the input's own
    captured = capture_and_compare(output, [weight], dtype)
    assert saved_geometries(captured) == [([2, 7], [10, 1], 3)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_transposed_leaf(dtype):
    x = torch.randn(3, 4, dtype=dtype).t().detach().requires_grad_()  # 4x3, strides [1, 4]
    output = x.as_strided((3, 3), (1, 1))  # overlapping: each element of storage read up to 3 times
    captured = capture_and_compare(output, [x], dtype)
    assert saved_geometries(captured) == [([4, 3], [1, 4], 0)]


# ---------------------------------------------- non-leaves: recorded, else refused ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_as_strided_of_a_transpose_under_recording(dtype):
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    with rt.recording():
        output = x.t().as_strided((2, 3), (4, 1), 1)  # self: 4x3, strides [1, 4]
    captured = capture_and_compare(output, [x], dtype)
    assert saved_geometries(captured) == [([4, 3], [1, 4], 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_as_strided_of_a_slice_inside_the_forward(dtype):
    x = torch.randn(4, 5, dtype=dtype, requires_grad=True)
    with rt.recording():
        y = (x * 2).t()  # 5x4, strides [1, 5]
        s = y[1:, 2:]  # 4x2, strides [1, 5], storage offset 11
        output = s.as_strided((2, 2), (5, 1)) * 3
    captured = capture_and_compare(output, [x], dtype)
    assert saved_geometries(captured) == [([4, 2], [1, 5], 11)]


def test_as_strided_of_a_non_leaf_outside_recording_is_refused():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    output = x.t().as_strided((2, 3), (4, 1), 1)
    with pytest.raises(rt.UnsupportedError, match=r"AsStridedBackward0: torch hides saved field 'self_geometry' "
                                                   r"\(.*\).*an output of TBackward0: run the forward under "
                                                   r"refgrad\.torch\.recording\(\)"):
        rt.capture(output, inputs=[x], grad_outputs=[torch.ones(2, 3, dtype=torch.float64)])
    assert [u.name for u in rt.coverage(output)] == ["AsStridedBackward0"]


def test_a_tensor_seen_with_two_geometries_is_refused():
    # b.t_() under no_grad changes b's geometry and keeps its grad_fn: the two geometries share an edge,
    # so which one a node with that edge saved cannot be told apart.
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    with rt.recording():
        b = x * 1
        first = b[0] * 1
        with torch.no_grad():
            b.t_()
        output = b.as_strided((2, 2), (1, 4)) + first[:2]
    with pytest.raises(rt.UnsupportedError, match=r"AsStridedBackward0: torch hides saved field 'self_geometry', "
                                                   r"and refgrad\.torch\.recording\(\) saw the tensor at its edge "
                                                   r"\(MulBackward0, output 0\) with 2 geometries \(sizes \[3, 4\], "
                                                   r"strides \[4, 1\], storage offset 0; sizes \[4, 3\], strides "
                                                   r"\[1, 4\], storage offset 0\)"):
        rt.capture(output.sum())


# --------------------------- views torch regenerates after an in-place op: the base ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_view_used_after_an_in_place_op_on_it(dtype):
    # v.mul_ makes b's grad_fn a CopySlices and v's an AsStridedBackward0 (regenerated at its next use),
    # whose self_geometry is b's: column-major, not the contiguous guess.
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    y = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    with rt.recording():
        b = x.t() * 1  # 4x3, strides [1, 4]: the product keeps x.t()'s layout
        v = b[1:]
        v.mul_(y)
        output = v * torch.arange(9, dtype=dtype).view(3, 3) + b[:3].exp()
    captured = capture_and_compare(output, [x, y], dtype)
    assert saved_geometries(captured) == [([4, 3], [1, 4], 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_view_used_after_its_base_changed_under_no_grad(dtype):
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    with rt.recording():
        b = x.t() * 2
        v = b[1:]  # records b's geometry at its edge, MulBackward0
        with torch.no_grad():
            b.add_(1)  # b's version changes, its grad_fn does not: v's grad_fn is regenerated over b
        output = v * v
    assert type(v.grad_fn).__name__ == "AsStridedBackward0"
    captured = capture_and_compare(output, [x], dtype)
    assert saved_geometries(captured) == [([4, 3], [1, 4], 0)]


def test_a_regenerated_view_outside_recording_is_refused():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = x.t() * 2
    v = b[1:]
    with torch.no_grad():
        b.add_(1)
    with pytest.raises(rt.UnsupportedError, match=r"AsStridedBackward0: torch hides saved field 'self_geometry'.*"
                                                   r"an output of MulBackward0"):
        rt.capture((v * v).sum())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_slices_on_a_base_at_a_storage_offset(dtype):
    w = torch.randn(3, dtype=dtype, requires_grad=True)
    with rt.recording():
        a = torch.randn(10, dtype=dtype)[2:].detach()  # the base: storage offset 2, not a view
        a[1:4].mul_(w)
        output = a * a
    captured = capture_and_compare(output, [w], dtype)
    copy_slices = next(n for n in captured.graph.nodes if n.kind == "copy_slices")
    base, view = copy_slices.saved["base"], copy_slices.saved["view"]
    assert (list(base.sizes), list(base.strides), base.storage_offset) == ([8], [1], 2)
    assert (list(view.sizes), list(view.strides), view.storage_offset) == ([3], [1], 3)


# ----------------------------------------------------------- native_dropout ---


@pytest.mark.parametrize("train", [True, False, None], ids=["train", "eval", "none"])
def test_native_dropout_train_as_recorded(train):
    # native_dropout's backward scales by 1/(1-p) only when train is True; False and None scale by 1.
    torch.manual_seed(10)
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    with rt.recording():
        output, _ = torch.native_dropout(x, 0.25, train)
    captured = capture_and_compare(output, [x], torch.float64)
    assert next(n for n in captured.graph.nodes if n.name == "NativeDropoutBackward0").saved["train"] is train


def test_native_dropout_outside_recording_is_refused():
    x = torch.randn(50, dtype=torch.float64, requires_grad=True)
    output, _ = torch.native_dropout(x, 0.25, False)
    with pytest.raises(rt.UnsupportedError, match=r"NativeDropoutBackward0: torch hides saved field 'train'.*"
                                                   r"refgrad\.torch\.recording\(\)"):
        rt.capture(output.sum())


def test_native_dropout_with_p_zero_needs_no_record():
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    output, _ = torch.native_dropout(x, 0.0, False)  # scaled by 1 whatever train is
    capture_and_compare(output, [x], torch.float64)


def test_the_refusal_is_a_refgrad_error_naming_node_and_field():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    output = (x * 1).as_strided((2,), (2,))
    with pytest.raises(refgrad.Error, match=r"AsStridedBackward0.*'self_geometry'"):
        rt.capture(output.sum())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_view_of_a_leaf_at_an_offset_after_the_leaf_changed_under_no_grad(dtype):
    # v's grad_fn is regenerated as an AsStridedBackward0 whose edge is x's AccumulateGrad: x's own geometry.
    x = torch.randn(12, dtype=dtype)[2:].detach().requires_grad_()
    v = x[1:]
    with torch.no_grad():
        x.add_(1)
    captured = capture_and_compare(v * v, [x], dtype)
    assert saved_geometries(captured) == [([10], [1], 2)]


# ---------------------------------------------------------- checkpointing ---


def as_strided_of_a_transpose(x):
    return x.t().as_strided((2, 3), (4, 1), 1).exp()


def test_a_reentrant_checkpoint_is_recomputed_under_recording():
    # capture recomputes the region under recording(), so the forward itself need not run under it
    from torch.utils.checkpoint import checkpoint
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    loss = (checkpoint(as_strided_of_a_transpose, x, use_reentrant=True) * torch.arange(6.0).view(2, 3)).sum()
    ours = rt.capture(loss, names={"x": x}).run()
    loss.backward()
    assert_grads_close(ours["x"], x.grad, torch.float64)


def test_a_non_reentrant_checkpoint_keeps_the_forward_graph():
    # its nodes are the forward's own: recorded when the forward ran under recording(), else refused
    from torch.utils.checkpoint import checkpoint
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(rt.UnsupportedError, match=r"AsStridedBackward0: torch hides saved field 'self_geometry'"):
        rt.capture(checkpoint(as_strided_of_a_transpose, x, use_reentrant=False).sum())
    with rt.recording():
        output = checkpoint(as_strided_of_a_transpose, x, use_reentrant=False)
    capture_and_compare(output, [x], torch.float64)
