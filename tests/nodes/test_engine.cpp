// The engine's own nodes (include/refgrad/engine.hpp): validate_outputs,
// AccumulateGrad, CopyBackwards, CopySlices, GraphRoot, against torch 2.13.
#include "node_test.hpp"
#include "refgrad/engine.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

Shape shape_of(const Tensor& t) { return int_list(t); }

// Runs a NodeDef on saved values in schema order (CopyBackwards is not in the registry).
Grads run(const NodeDef& def, const Grads& grads, const Need& need, const std::vector<FieldValue>& saved) {
  const BoundSaved bound = def.bind(saved);
  return def.apply(grads, bound.get(), need);
}

const TensorOptions kFloat64Cpu{DType::Float64, Device::CPU, Layout::Strided, true};

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("validate_outputs") {
  const Tensor g = random64({2, 3}, 1).to(DType::Float32);
  const std::vector<std::optional<InputMetadata>> edges = {InputMetadata{DType::Float32, {2, 3}},
                                                           InputMetadata{DType::Float32, {3}}};

  SUBCASE("against torch: broadcast grads are summed, float64 grads cast to float32") {
    const auto r = torch_exec(R"(
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x + y
    @staticmethod
    def backward(ctx, g):
        return (g * 2).double(), g.unsqueeze(0).expand(4, 2, 3)
x = a.clone().requires_grad_(); y = b.clone().requires_grad_()
F.apply(x, y).backward(c)
result = (x.grad, y.grad)
)", {g, random64({3}, 2).to(DType::Float32), g});
    const Grads out = validate_outputs({to(mul(g, Scalar(2)), DType::Float64), expand(unsqueeze(g, 0), {4, 2, 3})},
                                       edges, "FBackward");
    CHECK(out[0]->dtype() == DType::Float32);
    CHECK(out[1]->dtype() == DType::Float32);
    CHECK_TENSOR(*out[0], r[0]);
    CHECK_TENSOR(*out[1], r[1]);
  }
  SUBCASE("against torch: the error for a wrong shape, word for word") {
    const std::string torch_message = torch_exec_text(R"(
class FBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * 1, y * 1
    @staticmethod
    def backward(ctx, gx, gy):
        return gx, torch.ones(2, 3)
x = torch.randn(2, 3, requires_grad=True); y = torch.randn(3, 2, requires_grad=True)
p, q = FBackward.apply(x, y)
try:
    (p.sum() + q.sum()).backward()
    result = "no error"
except RuntimeError as e:
    result = str(e)
)");
    CHECK(torch_message == "Function FBackwardBackward returned an invalid gradient at index 1 - got [2, 3] but "
                           "expected shape compatible with [3, 2]");
    CHECK_THROWS_WITH_AS(validate_outputs({g, g}, {InputMetadata{DType::Float32, {2, 3}},
                                                   InputMetadata{DType::Float32, {3, 2}}},
                                          "FBackwardBackward"),
                         torch_message.c_str(), Error);
    // metadata with more dims than the grad, and a 0-dim grad for a [1] input
    CHECK_THROWS_WITH_AS(validate_outputs({g}, {InputMetadata{DType::Float32, {1, 2, 3}}}, "XBackward0"),
                         "Function XBackward0 returned an invalid gradient at index 0 - got [2, 3] but expected "
                         "shape compatible with [1, 2, 3]",
                         Error);
    CHECK_THROWS_WITH_AS(validate_outputs({scalar_tensor(1.0)}, {InputMetadata{DType::Float64, {1}}}, "XBackward0"),
                         "Function XBackward0 returned an invalid gradient at index 0 - got [] but expected "
                         "shape compatible with [1]",
                         Error);
  }
  SUBCASE("against torch: an int64 grad is cast; grad_dtype None keeps the grad's dtype") {
    const auto r = torch_exec(R"(
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1
    @staticmethod
    def backward(ctx, g):
        return torch.ones(2, 3, dtype=torch.int64)
x = torch.zeros(2, 3, requires_grad=True)
F.apply(x).sum().backward()
y = torch.zeros(2, 3, requires_grad=True); y.grad_dtype = None
class G(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1
    @staticmethod
    def backward(ctx, g):
        return g.double()
G.apply(y).sum().backward()
result = (x.grad, y.grad)
)");
    const Grads cast = validate_outputs({ones({2, 3}, DType::Int64)}, {InputMetadata{DType::Float32, {2, 3}}}, "F");
    CHECK(cast[0]->dtype() == r[0].dtype());
    CHECK_TENSOR(*cast[0], r[0]);
    InputMetadata any_dtype{DType::Float32, {2, 3}};
    any_dtype.grad_dtype = std::nullopt;
    const Grads kept = validate_outputs({ones({2, 3}, DType::Float64)}, {any_dtype}, "G");
    CHECK(kept[0]->dtype() == r[1].dtype());
    CHECK_TENSOR(*kept[0], r[1]);
  }
  SUBCASE("undefined grads and invalid edges pass unchanged") {
    const Tensor wrong = random64({5}, 3);
    const Grads out = validate_outputs({std::nullopt, wrong}, {InputMetadata{DType::Float32, {2, 3}}, std::nullopt},
                                       "XBackward0");
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->is_same(wrong));
    // an equal shape and dtype: the very same tensor
    CHECK(validate_outputs({g}, {edges[0]}, "XBackward0")[0]->is_same(g));
  }
  SUBCASE("errors") {
    // engine.cpp's text; torch's Python API cannot provoke it (PyNode checks the count first, with
    // "function FBackward returned an incorrect number of gradients (expected 2, got 1)")
    CHECK_THROWS_WITH_AS(validate_outputs({g}, edges, "XBackward0"),
                         "Function XBackward0 returned an invalid number of gradients - expected 2, but got 1", Error);
    CHECK_THROWS_WITH_AS(validate_outputs({g}, {InputMetadata{DType::Float32, {2, 3}, Device::CUDA}}, "XBackward0"),
                         "Function XBackward0 returned an invalid gradient at index 0 - expected device cuda but got "
                         "cpu",
                         Error);
    InputMetadata subclass{DType::Float32, {2, 3}, Device::CUDA, true};
    CHECK(validate_outputs({g}, {subclass}, "XBackward0")[0]->is_same(g));
    CHECK_THROWS_AS(validate_outputs({scalar_tensor(1.0)}, {InputMetadata{DType::Float64, {}, Device::CUDA}}, "X"),
                    Error);
    CHECK_THROWS_WITH_AS(validate_outputs({g}, {InputMetadata{DType::Int64, {2, 3}}}, "XBackward0"),
                         "Function XBackward0 returned an invalid gradient at index 0 - expected a floating or "
                         "complex dtype, got int64",
                         Error);
  }
}

TEST_CASE("AccumulateGrad") {
  const Tensor x = random64({2, 3}, 4), w = random64({2, 3}, 5), g1 = random64({2, 3}, 6), g2 = random64({2, 3}, 7);

  SUBCASE("against torch: backward twice accumulates") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
y = x * b
y.backward(c, retain_graph=True)
first = x.grad.clone()
y.backward(d)
result = (first, x.grad)
)", {x, w, g1, g2});
    const Tensor first = accumulate_grad(std::nullopt, mul(g1, w));
    CHECK_TENSOR(first, r[0]);
    CHECK_TENSOR(accumulate_grad(first, mul(g2, w)), r[1]);
  }
  SUBCASE("against torch: backward with an existing .grad") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
x.grad = c.clone()
(x * b).sum().backward()
result = x.grad
)", {x, w, g1});
    CHECK_TENSOR(accumulate_grad(g1, w), r[0]);
  }
  SUBCASE("against torch: an expanded grad becomes a contiguous .grad") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
x.sum().backward()
result = (x.grad, torch.tensor(x.grad.stride()))
)", {x});
    const Tensor expanded = expand(scalar_tensor(1.0, DType::Float64), {2, 3});
    const Tensor grad = accumulate_grad(std::nullopt, expanded);
    CHECK_TENSOR(grad, r[0]);
    CHECK(grad.strides() == shape_of(r[1]));
  }
  SUBCASE("against torch: a float64 grad added to a float32 .grad keeps float32 (grad_dtype None)") {
    const auto r = torch_exec(R"(
x = torch.zeros(2, 3, requires_grad=True); x.grad_dtype = None
x.grad = a.float()
class G(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1
    @staticmethod
    def backward(ctx, g):
        return g.double() * b
G.apply(x).backward(torch.ones(2, 3))
result = x.grad
)", {g1, w});
    const Tensor grad = accumulate_grad(g1.to(DType::Float32), w);
    CHECK(grad.dtype() == DType::Float32);
    CHECK(r[0].dtype() == DType::Float32);
    CHECK_TENSOR(grad, r[0]);
  }
  SUBCASE("aliasing and undefined grads") {
    CHECK(accumulate_grad(std::nullopt, g1).is_same(g1));  // stolen: refgrad never writes into it
    CHECK(accumulate_grad(g1, Tensor()).is_same(g1));
    CHECK_FALSE(accumulate_grad(std::nullopt, Tensor()).defined());
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(accumulate_grad(g1, random64({3, 3}, 8)),
                         "AccumulateGrad: the new gradient of shape [3,3] does not broadcast to the existing .grad "
                         "of shape [2,3]",
                         Error);
    // torch's `.grad += new_grad` refuses what it cannot cast to .grad's dtype:
    // "result type Float can't be cast to the desired output type Long"
    CHECK(torch_error("torch.zeros(3, dtype=torch.long).add_(torch.ones(3))").find("can't be cast") != std::string::npos);
    CHECK_THROWS_WITH_AS(accumulate_grad(zeros({2, 3}, DType::Int64), g1),
                         "AccumulateGrad: the new gradient of dtype float64 cannot be added in place to the existing "
                         ".grad of dtype int64 (result type float64 can't be cast to int64)",
                         Error);
  }
}

TEST_CASE("CopyBackwards") {
  const NodeDef& def = get_node("CopyBackwards");
  const Tensor x = random64({2, 3}, 9), y = random64({2, 3}, 10), g = random64({2, 3}, 11);

  SUBCASE("finite differences") {
    const Grads out = run(def, {g}, {true, true}, {kFloat64Cpu});
    // self.copy_(src) as a function of both: the result is src, whatever self was
    auto forward = [](const std::vector<Tensor>& in) { return add(mul(in[0], Scalar(0.0)), in[1]); };
    check_against_finite_differences(out, 0, forward, {x, y}, g);
    check_against_finite_differences(out, 1, forward, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = run(def, {g}, {false, true}, {kFloat64Cpu});
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1].has_value());
    const Grads undefined = run(def, {std::nullopt}, {true, true}, {kFloat64Cpu});
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
  }
  SUBCASE("against torch: a float64 src broadcast into a float32 self") {
    const Tensor g32 = g.to(DType::Float32);
    const auto r = torch_exec(R"(
base = a.float().requires_grad_(); src = b.requires_grad_()
x = base.clone()
x.copy_(src)
fn = x.grad_fn
assert fn.name() == "torch::autograd::CopyBackwards", fn.name()
assert not [n for n in dir(fn) if n.startswith("_saved")]
gb, gs = torch.autograd.grad(x, (base, src), c)
result = (gb, gs)
)", {x, random64({3}, 12), g32});
    // src_options: src's dtype and device, as TensorOptions(src) records them
    const Grads out = run(def, {g32}, {true, true}, {kFloat64Cpu});
    CHECK(out[0]->dtype() == DType::Float32);
    CHECK(out[1]->dtype() == DType::Float64);
    // CloneBackward0 passes self's grad on; validate_outputs sums src's to its shape
    CHECK_TENSOR(*out[0], r[0]);
    const Grads src = validate_outputs({out[1]}, {InputMetadata{DType::Float64, {3}}}, "torch::autograd::CopyBackwards");
    CHECK(src[0]->dtype() == r[1].dtype());
    CHECK_TENSOR(*src[0], r[1]);
  }
  SUBCASE("errors") {
    const TensorOptions on_cuda{DType::Float64, Device::CUDA, Layout::Strided, true};
    CHECK_THROWS_WITH_AS(run(def, {g}, {false, true}, {on_cuda}),
                         "CopyBackwards: the grad would be moved to cuda, and refgrad computes on cpu only", Error);
    CHECK_THROWS_WITH_AS(run(def, {g}, {true, true}, {Scalar(1)}),
                         "CopyBackwards: saved field 'src_options' expects TensorOptions, got Scalar 1", Error);
  }
}

TEST_CASE("CopySlices") {
  const NodeDef& mul_node = get_node("MulBackward0");
  const NodeDef& add_node = get_node("AddBackward0");
  const Tensor leaf = random64({4, 3}, 13), y = random64({3}, 14), g = random64({4, 3}, 15);
  // x = leaf.clone(); x[1:3].mul_(y): base [4,3] contiguous, view [2,3] at offset 3
  const TensorGeometry base{{4, 3}, {3, 1}, 0}, view{{2, 3}, {3, 1}, 3};
  const Tensor slice_before = narrow(leaf, 0, 1, 2);
  auto mul_saved = [&](const Tensor& self, const Tensor& other) {
    return mul_node.bind({other, DType::Float64, self, DType::Float64});
  };

  SUBCASE("finite differences") {
    const Tensor y23 = random64({2, 3}, 16);
    const Grads out = copy_slices({g}, base, view, mul_node, mul_saved(slice_before, y23), {true, true});
    // the in-place op written out of place: rows 1 and 2 multiplied by y
    auto forward = [](const std::vector<Tensor>& in) {
      return cat({narrow(in[0], 0, 0, 1), mul(narrow(in[0], 0, 1, 2), in[1]), narrow(in[0], 0, 3, 1)}, 0);
    };
    check_against_finite_differences(out, 0, forward, {leaf, y23}, g);
    check_against_finite_differences(out, 1, forward, {leaf, y23}, g);
  }
  SUBCASE("against torch: x[1:3].mul_(y), CopySlices wrapping MulBackward0") {
    const auto r = torch_exec(R"(
l = a.requires_grad_(); y = b.requires_grad_()
x = l.clone()
v = x[1:3]
v.mul_(y)
assert x.grad_fn.name() == "torch::autograd::CopySlices", x.grad_fn.name()
assert x.grad_fn.next_functions[0][0].name() == "CloneBackward0"
geometry = lambda t: (torch.tensor(t.size()), torch.tensor(t.stride()), t.storage_offset())
result = (*geometry(x), *geometry(v), *torch.autograd.grad(x, (l, y), c))
)", {leaf, y, g});
    const TensorGeometry torch_base{shape_of(r[0]), shape_of(r[1]), r[2].item<std::int64_t>()};
    const TensorGeometry torch_view{shape_of(r[3]), shape_of(r[4]), r[5].item<std::int64_t>()};
    CHECK(torch_view.storage_offset == 3);
    const Grads out = copy_slices({g}, torch_base, torch_view, mul_node, mul_saved(slice_before, y), {true, true});
    CHECK(out[0]->strides() == torch_base.strides);
    // CloneBackward0 passes the base's grad on to the leaf
    CHECK_TENSOR(*call_node("CloneBackward0", {out[0]}, {true}, Saved{})[0], r[6]);
    const Grads y_grad = validate_outputs({out[1]}, {InputMetadata{DType::Float64, {3}}}, "CopySlices");
    CHECK_TENSOR(*y_grad[0], r[7]);
  }
  SUBCASE("against torch: x.narrow(1, 0, 2).add_(z) on a column-major base, wrapping AddBackward0") {
    const Tensor z = random64({2}, 17), g34 = random64({3, 4}, 18);
    const auto r = torch_exec(R"(
l = a.requires_grad_(); z = b.requires_grad_()
x = l.t().clone()
v = x.narrow(1, 0, 2)
v.add_(z, alpha=2)
assert x.grad_fn.name() == "torch::autograd::CopySlices"
geometry = lambda t: (torch.tensor(t.size()), torch.tensor(t.stride()), t.storage_offset())
result = (*geometry(x), *geometry(v), *torch.autograd.grad(x, (l, z), c))
)", {leaf, z, g34});
    const TensorGeometry torch_base{shape_of(r[0]), shape_of(r[1]), r[2].item<std::int64_t>()};
    const TensorGeometry torch_view{shape_of(r[3]), shape_of(r[4]), r[5].item<std::int64_t>()};
    CHECK(torch_base.strides == Shape{1, 3});  // clone kept the transposed layout
    const BoundSaved add_saved = add_node.bind({Scalar(2), DType::Float64, DType::Float64});
    const Grads out = copy_slices({g34}, torch_base, torch_view, add_node, add_saved, {true, true});
    CHECK(out[0]->strides() == Shape{1, 3});
    // CloneBackward0 then TBackward0 lead to the leaf
    CHECK_TENSOR(t(*call_node("CloneBackward0", {out[0]}, {true}, Saved{})[0]), r[6]);
    CHECK_TENSOR(*validate_outputs({out[1]}, {InputMetadata{DType::Float64, {2}}}, "CopySlices")[0], r[7]);
  }
  SUBCASE("against torch: a strided view, x[::2, 1:].mul_(w)") {
    const Tensor w = random64({2}, 21);
    const auto r = torch_exec(R"(
l = a.requires_grad_(); w = b.requires_grad_()
x = l.clone()
v = x[::2, 1:]
v.mul_(w)
geometry = lambda t: (torch.tensor(t.size()), torch.tensor(t.stride()), t.storage_offset())
result = (*geometry(v), *torch.autograd.grad(x, (l, w), c))
)", {leaf, w, g});
    const TensorGeometry torch_view{shape_of(r[0]), shape_of(r[1]), r[2].item<std::int64_t>()};
    CHECK(torch_view.strides == Shape{6, 1});
    const Tensor before = slice(slice(leaf, 0, std::nullopt, std::nullopt, 2), 1, 1);
    const Grads out = copy_slices({g}, base, torch_view, mul_node, mul_saved(before, w), {true, true});
    CHECK_TENSOR(*out[0], r[3]);
    CHECK_TENSOR(*validate_outputs({out[1]}, {InputMetadata{DType::Float64, {2}}}, "CopySlices")[0], r[4]);
  }
  SUBCASE("need mask and undefined grad") {
    const BoundSaved saved = mul_saved(slice_before, y);
    const Grads only_y = copy_slices({g}, base, view, mul_node, saved, {false, true});
    CHECK_FALSE(only_y[0].has_value());
    CHECK(only_y[1].has_value());
    const Grads undefined = copy_slices({std::nullopt}, base, view, mul_node, saved, {true, true});
    CHECK(undefined.size() == 2);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
    // outside the view the base's grad is the incoming grad, untouched
    const Grads out = copy_slices({g}, base, view, mul_node, saved, {true, false});
    CHECK_TENSOR(narrow(*out[0], 0, 0, 1), narrow(g, 0, 0, 1));
    CHECK_TENSOR(narrow(*out[0], 0, 3, 1), narrow(g, 0, 3, 1));
    CHECK_TENSOR(narrow(*out[0], 0, 1, 2), mul(narrow(g, 0, 1, 2), y));
  }
  SUBCASE("against torch: an undefined grad for the view gives the base no grad, not zeros") {
    const auto r = torch_exec(R"(
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x
    @staticmethod
    def backward(ctx, g):
        return None
l = a.requires_grad_()
x = l.clone()
F.apply(x[1:3])
assert x.grad_fn.name() == "torch::autograd::CopySlices"
result = torch.autograd.grad(x, l, b, allow_unused=True)[0] is None
)", {leaf, g});
    CHECK(r[0].item<bool>());
    NodeDef returns_none;  // FBackward: one input, an undefined grad for it
    returns_none.schema = {"FBackward", "", {"self"}, 1, {}, ""};
    returns_none.apply = [](const Grads&, const void*, const Need&) { return Grads(1); };
    CHECK_FALSE(copy_slices({g}, base, view, returns_none, nullptr, {true})[0].has_value());
  }
  SUBCASE("errors") {
    const BoundSaved saved = mul_saved(slice_before, y);
    CHECK_THROWS_WITH_AS(copy_slices({g, g}, base, view, mul_node, saved, {true, true}),
                         "CopySlices: expected 1 incoming grad, got 2", Error);
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, view, mul_node, saved, {true}),
                         "CopySlices: the need mask has 1 entries, MulBackward0 has 2 inputs", Error);
    CHECK_THROWS_WITH_AS(copy_slices({random64({5}, 19)}, base, view, mul_node, saved, {true, true}),
                         "CopySlices: grad of shape [5] does not broadcast to the base's shape [4,3]", Error);
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, TensorGeometry{{2, 3}, {3, 1}, 9}, mul_node, saved, {true, true}),
                         "CopySlices: the view (sizes [2,3], strides [3,1], storage offset 9) reaches outside the "
                         "base (sizes [4,3], strides [3,1], storage offset 0)",
                         Error);
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, TensorGeometry{{2, 3}, {0, 1}, 3}, mul_node, saved, {true, true}),
                         "CopySlices: the view's geometry (sizes [2,3], strides [0,1]) has elements sharing a memory "
                         "location",
                         Error);
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, TensorGeometry{{2, 3}, {3}, 3}, mul_node, saved, {true, true}),
                         "CopySlices: the view has sizes [2,3] but strides [3]", Error);
    // offsets and strides whose arithmetic would overflow int64
    CHECK_THROWS_WITH_AS(copy_slices({g}, TensorGeometry{{4, 3}, {3, 1}, -9223372036854775807 - 1}, view, mul_node,
                                     saved, {true, true}),
                         "CopySlices: the base has a negative storage offset -9223372036854775808", Error);
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, TensorGeometry{{2, 3}, {9223372036854775807, 1}, 3}, mul_node, saved,
                                     {true, true}),
                         "CopySlices: the view (sizes [2,3], strides [9223372036854775807,1], storage offset 3) "
                         "addresses more storage than int64 can count",
                         Error);
    const std::int64_t big = std::int64_t{1} << 62;
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, TensorGeometry{{big, big, 0}, {1, 1, 1}, 3}, mul_node, saved, {true, true}),
                         "CopySlices: the view [4611686018427387904,4611686018427387904,0] has more elements than int64 "
                         "can count",
                         Error);
    // the wrapped node must take one grad (an in-place op has one output)
    NodeDef two_grads;
    two_grads.schema = {"TwoBackward", "", {"self"}, 2, {}, ""};
    two_grads.apply = [](const Grads& grads, const void*, const Need&) { return Grads{grads.at(1)}; };
    CHECK_THROWS_WITH_AS(copy_slices({g}, base, view, two_grads, nullptr, {true}),
                         "CopySlices: TwoBackward cannot be the node of an in-place op on a view (it takes 2 incoming "
                         "grads)",
                         Error);
  }
}

TEST_CASE("GraphRoot") {
  const Tensor a = random64({2}, 20);
  const Grads roots = graph_root({a, std::nullopt});
  REQUIRE(roots.size() == 2);
  CHECK(roots[0]->is_same(a));
  CHECK_FALSE(roots[1].has_value());
  CHECK(graph_root({}).empty());
}

}  // TEST_SUITE
