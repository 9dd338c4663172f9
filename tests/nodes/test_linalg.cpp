// Suite "nodes", the linalg group: addmm, bmm, baddbmm, dot, mv (MmBackward0 is
// in test_nodes.cpp). torch.matmul and nn.Linear decompose into these nodes
// and shape nodes; the torch cases below build them that way where they can.
#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

TEST_SUITE("nodes") {

TEST_CASE("AddmmBackward0") {
  const Tensor bias = random64({4, 2}, 20), m1 = random64({4, 3}, 21), m2 = random64({3, 2}, 22),
               g = random64({4, 2}, 23);
  const Saved saved = {{"alpha", Scalar(2.0)},
                       {"beta", Scalar(0.5)},
                       {"mat1", m1},
                       {"mat1_layout", Layout::Strided},
                       {"mat1_sym_sizes", IntList{4, 3}},
                       {"mat1_sym_strides", IntList{3, 1}},
                       {"mat2", m2},
                       {"mat2_layout", Layout::Strided},
                       {"mat2_sym_sizes", IntList{3, 2}},
                       {"mat2_sym_strides", IntList{2, 1}}};

  SUBCASE("finite differences") {
    const Grads out = call_node("AddmmBackward0", {g}, {true, true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); };
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {bias, m1, m2}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("AddmmBackward0", {g}, {false, true, false}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{4, 3});
    CHECK_FALSE(out[2].has_value());
    const Grads undefined = call_node("AddmmBackward0", {std::nullopt}, {true, true, true}, saved);
    for (const auto& grad : undefined) CHECK_FALSE(grad.has_value());
    // beta == 1 passes the very grad on (maybe_multiply).
    Saved beta_one = saved;
    beta_one["beta"] = Scalar(1);
    CHECK(call_node("AddmmBackward0", {g}, {true, false, false}, beta_one)[0]->is_same(g));
  }
  SUBCASE("against torch: nn.Linear's addmm, a 1-d bias and a column-major mat2") {
    // F.linear(x, w, b) is addmm(b, x, w.t()): mat2 is column-major, and the
    // bias's grad leaves the node unreduced ([4, 2]); validate sums it to [2].
    const auto r = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bias = c.requires_grad_()
out = torch.addmm(bias, x, w.t(), beta=0.5, alpha=-2)
fn = out.grad_fn
assert fn.name() == "AddmmBackward0"
sizes = lambda s: torch.tensor(s, dtype=torch.int64)
saved = (fn._saved_alpha, fn._saved_beta, fn._saved_mat1, sizes(fn._saved_mat1_sym_sizes),
         sizes(fn._saved_mat1_sym_strides), fn._saved_mat2, sizes(fn._saved_mat2_sym_sizes),
         sizes(fn._saved_mat2_sym_strides))
gx, gw, gb = torch.autograd.grad(out, (x, w, bias), d)
gw_t = w.t().detach().requires_grad_()
gmat2, = torch.autograd.grad(torch.addmm(bias.detach(), x.detach(), gw_t), (gw_t,), d)  # F.linear's own call
result = (*saved, gx, gw, gb, gmat2, sizes(gmat2.stride()))
)", {m1, contiguous(t(m2)), random64({2}, 24), g});
    CHECK(r[0].item<std::int64_t>() == -2);
    CHECK(r[1].item<double>() == 0.5);
    CHECK(int_list(r[7]) == IntList{1, 3});  // w.t(): column-major
    const Saved from_torch = {{"alpha", Scalar(r[0].item<std::int64_t>())},
                              {"beta", Scalar(r[1].item<double>())},
                              {"mat1", r[2]},
                              {"mat1_layout", Layout::Strided},
                              {"mat1_sym_sizes", int_list(r[3])},
                              {"mat1_sym_strides", int_list(r[4])},
                              {"mat2", r[5]},
                              {"mat2_layout", Layout::Strided},
                              {"mat2_sym_sizes", int_list(r[6])},
                              {"mat2_sym_strides", int_list(r[7])}};
    const Grads out = call_node("AddmmBackward0", {g}, {true, true, true}, from_torch);
    CHECK_TENSOR(*out[1], r[8]);
    CHECK(out[0]->sizes() == Shape{4, 2});  // not reduced by the node
    CHECK_TENSOR(sum(*out[0], {0}), r[10]);
    CHECK_TENSOR(t(*out[2]), r[9]);
    // With F.linear's alpha == 1 the grad of a column-major mat2 comes out
    // column-major, like torch's. (With alpha != 1 refgrad's mul returns a
    // row-major result where ATen's keeps the transposed layout: values agree.)
    Saved alpha_one = from_torch;
    alpha_one["alpha"] = Scalar(1);
    const Grads linear = call_node("AddmmBackward0", {g}, {false, false, true}, alpha_one);
    CHECK_TENSOR(*linear[2], r[11]);
    CHECK(linear[2]->strides() == int_list(r[12]));
  }
  SUBCASE("errors") {
    Saved no_mat2 = saved;
    no_mat2["mat2"] = None{};
    CHECK_THROWS_WITH_AS(call_node("AddmmBackward0", {g}, {true, true, false}, no_mat2),
                         "AddmmBackward0: mat1's grad is needed but `mat2` was not saved", Error);
    CHECK(call_node("AddmmBackward0", {g}, {true, false, true}, no_mat2)[2].has_value());
    Saved no_mat1 = saved;
    no_mat1["mat1"] = None{};
    CHECK_THROWS_WITH_AS(call_node("AddmmBackward0", {g}, {false, false, true}, no_mat1),
                         "AddmmBackward0: mat2's grad is needed but `mat1` was not saved", Error);
    CHECK_THROWS_AS(call_node("AddmmBackward0", {random64({4, 5}, 1)}, {false, true, false}, saved), Error);
  }
}

TEST_CASE("BmmBackward0") {
  const Tensor x = random64({2, 4, 3}, 30), y = random64({2, 3, 5}, 31), g = random64({2, 4, 5}, 32);
  const Saved saved = {{"mat2", y}, {"self", x}};

  SUBCASE("finite differences") {
    const Grads out = call_node("BmmBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); };
    check_against_finite_differences(out, 0, forward, {x, y}, g);
    check_against_finite_differences(out, 1, forward, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("BmmBackward0", {g}, {true, false}, saved);
    CHECK(out[0]->sizes() == Shape{2, 4, 3});
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("BmmBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch: matmul of 3-d by 3-d, with a transposed mat2") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.matmul(x, y.transpose(1, 2))
fn = out.grad_fn.next_functions[0][0]   # matmul: _unsafe_view(bmm(view(expand(x)), ...))
assert out.grad_fn.name() == "UnsafeViewBackward0" and fn.name() == "BmmBackward0"
saved = (fn._saved_self, fn._saved_mat2)
gs, gm = torch.autograd.grad(out, (x, y), c)
result = (*saved, gs, gm)
)", {x, contiguous(transpose(y, 1, 2)), g});
    const Grads out = call_node("BmmBackward0", {g}, {true, true}, Saved{{"mat2", r[1]}, {"self", r[0]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(transpose(*out[1], 1, 2), r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("BmmBackward0", {g}, {true, false}, Saved{{"mat2", None{}}, {"self", x}}),
                         "BmmBackward0: self's grad is needed but `mat2` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("BmmBackward0", {g}, {false, true}, Saved{{"mat2", y}, {"self", None{}}}),
                         "BmmBackward0: mat2's grad is needed but `self` was not saved", Error);
    CHECK_THROWS_AS(call_node("BmmBackward0", {random64({2, 4, 6}, 1)}, {true, true}, saved), Error);
  }
}

TEST_CASE("BaddbmmBackward0") {
  const Tensor s = random64({2, 4, 5}, 40), b1 = random64({2, 4, 3}, 41), b2 = random64({2, 3, 5}, 42),
               g = random64({2, 4, 5}, 43);
  const Saved saved = {{"alpha", Scalar(-1.5)}, {"batch1", b1}, {"batch2", b2}, {"beta", Scalar(3)}};

  SUBCASE("finite differences") {
    const Grads out = call_node("BaddbmmBackward0", {g}, {true, true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) {
      return add(mul(in[0], Scalar(3)), mul(bmm(in[1], in[2]), Scalar(-1.5)));
    };
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {s, b1, b2}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("BaddbmmBackward0", {g}, {false, false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK(out[2]->sizes() == Shape{2, 3, 5});
    CHECK_FALSE(call_node("BaddbmmBackward0", {std::nullopt}, {true, true, true}, saved)[2].has_value());
  }
  SUBCASE("against torch, with a broadcast self (not reduced by the node)") {
    const auto r = torch_exec(R"(
s = a.requires_grad_(); b1 = b.requires_grad_(); b2 = c.requires_grad_()
out = torch.baddbmm(s, b1, b2, beta=0.25, alpha=2)
fn = out.grad_fn
assert fn.name() == "BaddbmmBackward0"
saved = (fn._saved_alpha, fn._saved_beta, fn._saved_batch1, fn._saved_batch2)
result = (*saved, *torch.autograd.grad(out, (s, b1, b2), d))
)", {random64({5}, 44), b1, b2, g});
    CHECK(r[0].item<std::int64_t>() == 2);
    CHECK(r[1].item<double>() == 0.25);
    const Grads out = call_node("BaddbmmBackward0", {g}, {true, true, true},
                                Saved{{"alpha", Scalar(r[0].item<std::int64_t>())},
                                      {"batch1", r[2]},
                                      {"batch2", r[3]},
                                      {"beta", Scalar(r[1].item<double>())}});
    CHECK(out[0]->sizes() == Shape{2, 4, 5});
    CHECK_TENSOR(sum(*out[0], {0, 1}), r[4]);
    CHECK_TENSOR(*out[1], r[5]);
    CHECK_TENSOR(*out[2], r[6]);
  }
  SUBCASE("errors") {
    Saved no_batch2 = saved;
    no_batch2["batch2"] = None{};
    CHECK_THROWS_WITH_AS(call_node("BaddbmmBackward0", {g}, {false, true, false}, no_batch2),
                         "BaddbmmBackward0: batch1's grad is needed but `batch2` was not saved", Error);
    Saved no_batch1 = saved;
    no_batch1["batch1"] = None{};
    CHECK_THROWS_WITH_AS(call_node("BaddbmmBackward0", {g}, {false, false, true}, no_batch1),
                         "BaddbmmBackward0: batch2's grad is needed but `batch1` was not saved", Error);
  }
}

TEST_CASE("DotBackward0") {
  const Tensor x = random64({5}, 50), y = random64({5}, 51), g = random64({}, 52);
  const Saved saved = {{"self", x}, {"tensor", y}};

  SUBCASE("finite differences") {
    const Grads out = call_node("DotBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return dot(in[0], in[1]); };
    check_against_finite_differences(out, 0, forward, {x, y}, g);
    check_against_finite_differences(out, 1, forward, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("DotBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1].has_value());
    CHECK_FALSE(call_node("DotBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch: matmul of two 1-d tensors, self and tensor not swapped") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.matmul(x, y)
fn = out.grad_fn
assert fn.name() == "DotBackward0"
result = (fn._saved_self, fn._saved_tensor, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
    CHECK_TENSOR(r[0], x);
    const Grads out = call_node("DotBackward0", {g}, {true, true}, Saved{{"self", r[0]}, {"tensor", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("DotBackward0", {g}, {true, false}, Saved{{"self", x}, {"tensor", None{}}}),
                         "DotBackward0: self's grad is needed but `tensor` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("DotBackward0", {g}, {false, true}, Saved{{"self", None{}}, {"tensor", y}}),
                         "DotBackward0: tensor's grad is needed but `self` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("DotBackward0", {random64({5}, 1)}, {true, true}, saved),
                         "DotBackward0: the incoming grad must be 0-d, got [5]", Error);
  }
}

TEST_CASE("MvBackward0") {
  const Tensor m = random64({3, 4}, 60), v = random64({4}, 61), g = random64({3}, 62);
  const Saved saved = {{"self", m}, {"vec", v}};

  SUBCASE("finite differences") {
    const Grads out = call_node("MvBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
    check_against_finite_differences(out, 0, forward, {m, v}, g);
    check_against_finite_differences(out, 1, forward, {m, v}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("MvBackward0", {g}, {true, false}, saved);
    CHECK(out[0]->sizes() == Shape{3, 4});
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("MvBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch: matmul of 2-d by 1-d") {
    const auto r = torch_exec(R"(
m = a.requires_grad_(); v = b.requires_grad_()
out = torch.matmul(m, v)
fn = out.grad_fn
assert fn.name() == "MvBackward0"
result = (fn._saved_self, fn._saved_vec, *torch.autograd.grad(out, (m, v), c))
)", {m, v, g});
    const Grads out = call_node("MvBackward0", {g}, {true, true}, Saved{{"self", r[0]}, {"vec", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MvBackward0", {g}, {true, false}, Saved{{"self", m}, {"vec", None{}}}),
                         "MvBackward0: self's grad is needed but `vec` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("MvBackward0", {g}, {false, true}, Saved{{"self", None{}}, {"vec", v}}),
                         "MvBackward0: vec's grad is needed but `self` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("MvBackward0", {random64({3, 1}, 1)}, {true, true}, saved),
                         "MvBackward0: the incoming grad must be 1-d, got [3,1]", Error);
    CHECK_THROWS_WITH_AS(call_node("MvBackward0", {random64({4}, 1)}, {false, true}, saved),
                         "MvBackward0: self [3,4] does not match the grad [4]", Error);
  }
}

}  // TEST_SUITE
