// The node tests of the indexing group: duplicate indices (accumulation),
// masks, padding_idx and scale_grad_by_freq are what torch must confirm.
#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

Tensor ints(const NestedValues& values) { return tensor(values, DType::Int64); }

const TensorOptions kFloat64Options{DType::Float64, Device::CPU, Layout::Strided, false};

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("IndexBackward0") {
  const Tensor x = random64({4, 3}, 1);
  const std::vector<OptionalTensor> rows = {ints({0, 2, 0})};  // row 0 twice: its grads add up
  const Saved saved = {{"indices", rows}, {"self_options", kFloat64Options}, {"self_sym_sizes", IntList{4, 3}}};

  SUBCASE("finite differences") {
    const Tensor g = random64({3, 3}, 2);
    const Grads out = call_node("IndexBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [&](const std::vector<Tensor>& in) { return index(in[0], rows); },
                                     {x}, g);
    const std::vector<OptionalTensor> columns = {std::nullopt, ints({1, 1})};
    Saved sliced = saved;
    sliced["indices"] = columns;
    const Tensor g2 = random64({4, 2}, 3);
    check_against_finite_differences(call_node("IndexBackward0", {g2}, {true}, sliced), 0,
                                     [&](const std::vector<Tensor>& in) { return index(in[0], columns); }, {x}, g2);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("IndexBackward0", {random64({3, 3}, 2)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("IndexBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: duplicates, a slice, two index tensors, a bool mask") {
    struct Case {
      const char* expression;
      Shape grad_sizes;
    };
    for (const Case& c : {Case{"x[torch.tensor([0, 2, 0])]", {3, 3}}, Case{"x[:, torch.tensor([2, 2, 1])]", {4, 3}},
                          Case{"x[torch.tensor([3, 3]), torch.tensor([1, 1])]", {2}},
                          Case{"x[torch.tensor([True, False, True, True])]", {3, 3}}}) {
      const std::string expression = c.expression;
      CAPTURE(expression);
      const Tensor grad = random64(c.grad_sizes, 5);
      const auto r = torch_exec(std::string("x = a.requires_grad_()\nout = ") + c.expression + R"(
fn = out.grad_fn
assert fn.name() == "IndexBackward0"
idx = fn._saved_indices
result = (len(idx), *[torch.tensor(i is None) for i in idx], *[i for i in idx if i is not None],
          torch.tensor(fn._saved_self_sym_sizes), *torch.autograd.grad(out, (x,), b))
)", {x, grad});
      const auto count = static_cast<std::size_t>(r[0].item<std::int64_t>());
      std::vector<OptionalTensor> indices;
      std::size_t next_tensor = 1 + count;
      for (std::size_t i = 0; i < count; ++i) {
        if (r[1 + i].item<bool>()) indices.push_back(std::nullopt);
        else indices.push_back(r[next_tensor++]);
      }
      const Grads out = call_node("IndexBackward0", {grad}, {true},
                                  Saved{{"indices", indices}, {"self_options", kFloat64Options},
                                        {"self_sym_sizes", int_list(r[next_tensor])}});
      CHECK_TENSOR(*out[0], r[next_tensor + 1]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(call_node("IndexBackward0", {random64({2, 3}, 6)}, {true}, saved), Error);
    Saved out_of_range = saved;
    out_of_range["indices"] = std::vector<OptionalTensor>{ints({0, 4, 0})};
    CHECK_THROWS_AS(call_node("IndexBackward0", {random64({3, 3}, 6)}, {true}, out_of_range), Error);
  }
}

TEST_CASE("IndexSelectBackward0") {
  const Tensor x = random64({3, 4}, 10), g = random64({3, 5}, 11);
  const Tensor idx = ints({3, 0, 3, 3, 1});
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", idx}, {"self_sym_sizes", IntList{3, 4}}};

  SUBCASE("finite differences") {
    const Grads out = call_node("IndexSelectBackward0", {g}, {true}, saved);
    check_against_finite_differences(
        out, 0, [&](const std::vector<Tensor>& in) { return index_select(in[0], 1, idx); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("IndexSelectBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("IndexSelectBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: duplicates, a negative dim, a 0-d self") {
    for (const auto& [input, index_, grad_sizes, dim] :
         {std::tuple{x, idx, Shape{3, 5}, -1}, std::tuple{random64({}, 12), ints({0}), Shape{}, 0}}) {
      CAPTURE(str(input.sizes()));
      const Tensor grad = random64(grad_sizes, 13);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.index_select(x, int(d), b)
fn = out.grad_fn
assert fn.name() == "IndexSelectBackward0"
dim = fn._saved_dim
dim = dim - 2**64 if dim >= 2**63 else dim  # torch shows a negative int64 field as unsigned
result = (dim, fn._saved_index, torch.tensor(fn._saved_self_sym_sizes, dtype=torch.int64),
          *torch.autograd.grad(out, (x,), c))
)", {input, index_, grad, tensor(static_cast<std::int64_t>(dim))});
      CHECK(r[0].item<std::int64_t>() == dim);  // torch saves the dim as given, unwrapped
      const Grads out = call_node("IndexSelectBackward0", {grad}, {true},
                                  Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]},
                                        {"self_sym_sizes", int_list(r[2])}});
      CHECK_TENSOR(*out[0], r[3]);
    }
  }
  SUBCASE("errors") {
    Saved out_of_range = saved;
    out_of_range["index"] = ints({0, 4, 0, 0, 0});
    CHECK_THROWS_AS(call_node("IndexSelectBackward0", {g}, {true}, out_of_range), Error);
    CHECK_THROWS_AS(call_node("IndexSelectBackward0", {random64({3, 2}, 1)}, {true}, saved), Error);
  }
}

TEST_CASE("GatherBackward0") {
  const Tensor x = random64({3, 4}, 20), g = random64({3, 2}, 21);
  const Tensor idx = ints({{1, 1}, {0, 3}, {2, 2}});  // repeated picks accumulate
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", idx}, {"self", x}, {"sparse_grad", false}};

  SUBCASE("finite differences") {
    const Grads out = call_node("GatherBackward0", {g}, {true}, saved);
    check_against_finite_differences(out, 0, [&](const std::vector<Tensor>& in) { return gather(in[0], 1, idx); },
                                     {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("GatherBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("GatherBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch, with repeated indices and an index smaller than self") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.gather(x, 0, b)
fn = out.grad_fn
assert fn.name() == "GatherBackward0"
result = (fn._saved_dim, fn._saved_index, fn._saved_self, fn._saved_sparse_grad, *torch.autograd.grad(out, (x,), c))
)", {x, ints({{2, 2, 0}, {2, 1, 0}}), random64({2, 3}, 22)});
    CHECK_FALSE(r[3].item<bool>());
    const Grads out = call_node("GatherBackward0", {random64({2, 3}, 22)}, {true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}, {"self", r[2]},
                                      {"sparse_grad", false}});
    CHECK_TENSOR(*out[0], r[4]);
  }
  SUBCASE("errors") {
    Saved sparse = saved;
    sparse["sparse_grad"] = true;
    CHECK_THROWS_WITH_AS(call_node("GatherBackward0", {g}, {true}, sparse),
                         "GatherBackward0: sparse_grad=True (a sparse COO gradient) is not supported yet", Error);
    // grad smaller than index: scatter_add has nothing to read for some picks
    CHECK_THROWS_AS(call_node("GatherBackward0", {random64({2, 2}, 1)}, {true}, saved), Error);
  }
}

TEST_CASE("ScatterBackward0") {
  const Tensor x = random64({3, 4}, 30), src = random64({3, 2}, 31), g = random64({3, 4}, 32);
  const Tensor idx = ints({{3, 0}, {1, 2}, {0, 3}});  // distinct per row: the forward is well defined
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", idx}};

  SUBCASE("finite differences") {
    const Grads out = call_node("ScatterBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return scatter(in[0], 1, idx, in[1]); };
    check_against_finite_differences(out, 0, forward, {x, src}, g);
    check_against_finite_differences(out, 1, forward, {x, src}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("ScatterBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1].has_value());
    const Grads undefined = call_node("ScatterBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
  }
  SUBCASE("against torch, with a duplicate target: every src element that aimed there gets the grad") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); s = b.requires_grad_()
out = torch.scatter(x, 1, c, s)
fn = out.grad_fn
assert fn.name() == "ScatterBackward0"
result = (fn._saved_dim, fn._saved_index, *torch.autograd.grad(out, (x, s), d))
)", {x, src, ints({{2, 2}, {1, 0}, {3, 3}}), g});
    const Grads out = call_node("ScatterBackward0", {g}, {true, true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(call_node("ScatterBackward0", {g}, {true, true}, Saved{{"dim", std::int64_t{2}}, {"index", idx}}),
                    Error);
  }
}

TEST_CASE("ScatterBackward1") {
  const Tensor x = random64({3, 4}, 40), g = random64({3, 4}, 41);
  const Tensor idx = ints({{3, 3}, {1, 2}, {0, 3}});
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", idx}};

  SUBCASE("finite differences") {
    const Grads out = call_node("ScatterBackward1", {g}, {true}, saved);
    check_against_finite_differences(
        out, 0, [&](const std::vector<Tensor>& in) { return scatter(in[0], 1, idx, Scalar(2.5)); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("ScatterBackward1", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("ScatterBackward1", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.scatter(x, 0, b, 2.5)
fn = out.grad_fn
assert fn.name() == "ScatterBackward1"
result = (fn._saved_dim, fn._saved_index, *torch.autograd.grad(out, (x,), c))
)", {x, ints({{2, 0, 2, 1}, {2, 1, 0, 1}}), g});
    const Grads out = call_node("ScatterBackward1", {g}, {true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(call_node("ScatterBackward1", {g}, {true}, Saved{{"dim", std::int64_t{1}}, {"index", ints({9})}}),
                    Error);
  }
}

TEST_CASE("ScatterAddBackward0") {
  const Tensor x = random64({3, 4}, 50), src = random64({3, 3}, 51), g = random64({3, 4}, 52);
  const Tensor idx = ints({{3, 3, 0}, {1, 2, 1}, {0, 0, 0}});  // duplicates add up
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", idx}};

  SUBCASE("finite differences") {
    const Grads out = call_node("ScatterAddBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return scatter_add(in[0], 1, idx, in[1]); };
    check_against_finite_differences(out, 0, forward, {x, src}, g);
    check_against_finite_differences(out, 1, forward, {x, src}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("ScatterAddBackward0", {g}, {true, false}, saved);
    CHECK(out[0]->is_same(g));  // self: grad, passed on as is
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("ScatterAddBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch, and the index torch does not save when src needs no grad") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); s = b.requires_grad_()
out = torch.scatter_add(x, 1, c, s)
fn = out.grad_fn
assert fn.name() == "ScatterAddBackward0"
saved = (fn._saved_dim, fn._saved_index)
grads = torch.autograd.grad(out, (x, s), d)
out2 = torch.scatter_add(x, 1, c, b.detach())
result = (*saved, *grads, torch.tensor(out2.grad_fn._saved_index is None))
)", {x, src, idx, g});
    const Grads out = call_node("ScatterAddBackward0", {g}, {true, true},
                                Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);
    CHECK_TENSOR(*out[1], r[3]);
    CHECK(r[4].item<bool>());
    const Saved no_index = {{"dim", std::int64_t{1}}, {"index", None{}}};
    CHECK_TENSOR(*call_node("ScatterAddBackward0", {g}, {true, false}, no_index)[0], r[2]);
    CHECK_THROWS_WITH_AS(call_node("ScatterAddBackward0", {g}, {false, true}, no_index),
                         "ScatterAddBackward0: src's grad is needed but `index` was not saved", Error);
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(call_node("ScatterAddBackward0", {g}, {false, true}, Saved{{"dim", std::int64_t{1}},
                                                                               {"index", ints({{7}})}}),
                    Error);
  }
}

TEST_CASE("IndexAddBackward0") {
  const Tensor x = random64({4, 3}, 60), source = random64({3, 3}, 61), g = random64({4, 3}, 62);
  const Tensor idx = ints({0, 2, 0});  // row 0 receives two source rows
  const Saved saved = {{"alpha", Scalar(2.5)}, {"dim", std::int64_t{0}}, {"index", idx}, {"source", source},
                       {"source_dim", std::int64_t{2}}};

  SUBCASE("finite differences") {
    const Grads out = call_node("IndexAddBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return index_add(in[0], 0, idx, in[1], 2.5); };
    check_against_finite_differences(out, 0, forward, {x, source}, g);
    check_against_finite_differences(out, 1, forward, {x, source}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("IndexAddBackward0", {g}, {true, false}, saved);
    CHECK(out[0]->is_same(g));
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("IndexAddBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch: duplicates, dim 1, and a 0-d self and source") {
    struct Case {
      Tensor self, index, source, grad;
      std::int64_t dim;
    };
    for (const Case& c : {Case{x, ints({2, 2}), random64({4, 2}, 63), g, 1},
                          Case{random64({}, 64), ints({0}), random64({}, 65), random64({}, 66), 0}}) {
      CAPTURE(str(c.self.sizes()));
      const auto r = torch_exec(R"(
x = a.requires_grad_(); s = c.requires_grad_()
out = torch.index_add(x, int(e), b, s, alpha=-2)
fn = out.grad_fn
assert fn.name() == "IndexAddBackward0"
result = (fn._saved_alpha, fn._saved_dim, fn._saved_index, fn._saved_source, fn._saved_source_dim,
          *torch.autograd.grad(out, (x, s), d))
)", {c.self, c.index, c.source, c.grad, tensor(c.dim)});
      CHECK(r[0].item<std::int64_t>() == -2);
      const Grads out = call_node("IndexAddBackward0", {c.grad}, {true, true},
                                  Saved{{"alpha", Scalar(r[0].item<std::int64_t>())},
                                        {"dim", r[1].item<std::int64_t>()},
                                        {"index", r[2]},
                                        {"source", r[3]},
                                        {"source_dim", r[4].item<std::int64_t>()}});
      CHECK_TENSOR(*out[0], r[5]);
      CHECK_TENSOR(*out[1], r[6]);
    }
  }
  SUBCASE("errors: torch saves neither index nor source when source needs no grad") {
    const auto r = torch_exec(R"(
out = torch.index_add(a.requires_grad_(), 0, b, c)
result = (torch.tensor(out.grad_fn._saved_index is None), torch.tensor(out.grad_fn._saved_source is None))
)", {x, idx, source});
    CHECK(r[0].item<bool>());
    CHECK(r[1].item<bool>());
    Saved unsaved = saved;
    unsaved["index"] = None{};
    unsaved["source"] = None{};
    CHECK(call_node("IndexAddBackward0", {g}, {true, false}, unsaved)[0]->is_same(g));
    CHECK_THROWS_WITH_AS(call_node("IndexAddBackward0", {g}, {true, true}, unsaved),
                         "IndexAddBackward0: source's grad is needed but `index` was not saved", Error);
    Saved wrong_source = saved;
    wrong_source["source"] = random64({3, 5}, 1);
    CHECK_THROWS_AS(call_node("IndexAddBackward0", {g}, {false, true}, wrong_source), Error);
  }
}

TEST_CASE("IndexPutBackward0") {
  const Tensor x = random64({4, 3}, 70), values = random64({3, 3}, 71), g = random64({4, 3}, 72);
  const std::vector<OptionalTensor> rows = {ints({0, 2, 0})};
  const Saved saved = {{"accumulate", true}, {"indices", rows}, {"values_info", TypeAndSize{{3, 3}, {}}}};

  SUBCASE("finite differences, accumulate=true with a duplicate, accumulate=false without") {
    const Grads out = call_node("IndexPutBackward0", {g}, {true, true}, saved);
    auto accumulating = [&](const std::vector<Tensor>& in) { return index_put(in[0], rows, in[1], true); };
    check_against_finite_differences(out, 0, accumulating, {x, values}, g);
    check_against_finite_differences(out, 1, accumulating, {x, values}, g);

    const std::vector<OptionalTensor> distinct = {ints({3, 1, 0})};
    const Saved replacing = {{"accumulate", false}, {"indices", distinct}, {"values_info", TypeAndSize{{3, 3}, {}}}};
    const Grads out2 = call_node("IndexPutBackward0", {g}, {true, true}, replacing);
    auto replace = [&](const std::vector<Tensor>& in) { return index_put(in[0], distinct, in[1], false); };
    check_against_finite_differences(out2, 0, replace, {x, values}, g);
    check_against_finite_differences(out2, 1, replace, {x, values}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("IndexPutBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 3});
    CHECK_FALSE(call_node("IndexPutBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch: both modes, out of place and x[idx] = v, duplicates, broadcast values, masks") {
    struct Case {
      const char* forward;
      Tensor values;
    };
    for (const Case& c :
         {Case{"torch.index_put(x, (torch.tensor([0, 2, 0]),), v)", values},
          Case{"torch.index_put(x, (torch.tensor([0, 2, 0]),), v, accumulate=True)", values},
          Case{"x.clone(); out[torch.tensor([0, 2, 0])] = v", values},
          Case{"x.clone(); out.index_put_((torch.tensor([1, 1]),), v, accumulate=True)", random64({3}, 73)},
          Case{"x.clone(); out[:, torch.tensor([2, 0, 2])] = v", random64({1, 3}, 74)},
          Case{"x.clone(); out[torch.tensor([[True, False, True]] * 4)] = v", random64({8}, 75)}}) {
      const std::string forward = c.forward;
      CAPTURE(forward);
      const auto r = torch_exec(std::string("x = a.requires_grad_(); v = b.requires_grad_()\nout = ") + c.forward +
                                    R"(
fn = out.grad_fn
assert fn.name() == "IndexPutBackward0", fn.name()
idx = fn._saved_indices
result = (fn._saved_accumulate, len(idx), *[torch.tensor(i is None) for i in idx],
          *[i for i in idx if i is not None], *torch.autograd.grad(out, (x, v), c))
)",
                                {x, c.values, g});
      const auto count = static_cast<std::size_t>(r[1].item<std::int64_t>());
      std::vector<OptionalTensor> indices;
      std::size_t next_tensor = 2 + count;
      for (std::size_t i = 0; i < count; ++i) {
        if (r[2 + i].item<bool>()) indices.push_back(std::nullopt);
        else indices.push_back(r[next_tensor++]);
      }
      const Grads out = call_node("IndexPutBackward0", {g}, {true, true},
                                  Saved{{"accumulate", r[0].item<bool>()}, {"indices", indices},
                                        {"values_info", TypeAndSize{c.values.sizes(), {}}}});
      CHECK_TENSOR(*out[0], r[next_tensor]);
      // values' grad before validate has the indexed shape; validate sums it to values' shape.
      CHECK_TENSOR(sum_to(*out[1], c.values.sizes()), r[next_tensor + 1]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_AS(call_node("IndexPutBackward0", {random64({2, 3}, 1)}, {true, true}, saved), Error);
  }
  SUBCASE("self's grad does not read values_info (capture cannot know it when values needs no grad)") {
    Saved unknown_values = saved;
    unknown_values["accumulate"] = false;
    const Tensor expected = *call_node("IndexPutBackward0", {g}, {true, false}, unknown_values)[0];
    unknown_values["values_info"] = TypeAndSize{{4, 3}, {}};  // self's shape: no values shape broadcasts so
    CHECK_TENSOR(*call_node("IndexPutBackward0", {g}, {true, false}, unknown_values)[0], expected);
    CHECK_TENSOR(expected, index_put(g, rows, zeros({3, 3}, g.dtype()), false));
  }
}

TEST_CASE("MaskedSelectBackward0") {
  const Tensor x = random64({2, 3}, 80), g = random64({4}, 81);
  const Tensor mask = tensor({{true, false, true}, {false, true, true}}, DType::Bool);
  const Saved saved = {{"mask", mask}, {"self", x}};

  SUBCASE("finite differences") {
    const Grads out = call_node("MaskedSelectBackward0", {g}, {true}, saved);
    check_against_finite_differences(
        out, 0, [&](const std::vector<Tensor>& in) { return masked_select(in[0], mask); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("MaskedSelectBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MaskedSelectBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch, with a mask that broadcasts self") {
    const Tensor x1 = random64({3}, 82);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.masked_select(x, b)
fn = out.grad_fn
assert fn.name() == "MaskedSelectBackward0"
result = (fn._saved_mask, fn._saved_self, fn(c), *torch.autograd.grad(out, (x,), c))
)", {x1, mask, g});
    const Grads out = call_node("MaskedSelectBackward0", {g}, {true}, Saved{{"mask", r[0]}, {"self", r[1]}});
    CHECK_TENSOR(*out[0], r[2]);  // the node's own output: the broadcast shape [2,3]
    CHECK_TENSOR(sum_to(*out[0], {3}), r[3]);
  }
  SUBCASE("errors") {
    // fewer grad elements than the mask selects
    CHECK_THROWS_AS(call_node("MaskedSelectBackward0", {random64({3}, 1)}, {true}, saved), Error);
    CHECK_THROWS_AS(call_node("MaskedSelectBackward0", {g}, {true}, Saved{{"mask", mask}, {"self", random64({4}, 1)}}),
                    Error);
  }
}

TEST_CASE("MaskedScatterBackward0") {
  const Tensor x = random64({2, 3}, 90), source = random64({2, 4}, 91), g = random64({2, 3}, 92);
  const Tensor mask = tensor({{true, false, true}, {false, true, true}}, DType::Bool);
  // source has 8 elements, the mask uses 4: the other 4 get zero grad.
  const Saved saved = {{"mask", mask}, {"source_sym_sizes", IntList{2, 4}}};

  SUBCASE("finite differences") {
    const Grads out = call_node("MaskedScatterBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return masked_scatter(in[0], mask, in[1]); };
    check_against_finite_differences(out, 0, forward, {x, source}, g);
    check_against_finite_differences(out, 1, forward, {x, source}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("MaskedScatterBackward0", {g}, {true, false}, saved);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("MaskedScatterBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch, with a broadcast mask and a source that fits exactly") {
    const Tensor row_mask = tensor({true, false, true}, DType::Bool);
    for (const Tensor& src : {source, random64({4}, 93)}) {
      CAPTURE(str(src.sizes()));
      const auto r = torch_exec(R"(
x = a.requires_grad_(); s = c.requires_grad_()
out = torch.masked_scatter(x, b, s)
fn = out.grad_fn
assert fn.name() == "MaskedScatterBackward0"
result = (fn._saved_mask, torch.tensor(fn._saved_source_sym_sizes), *torch.autograd.grad(out, (x, s), d))
)", {x, row_mask, src, g});
      const Grads out = call_node("MaskedScatterBackward0", {g}, {true, true},
                                  Saved{{"mask", r[0]}, {"source_sym_sizes", int_list(r[1])}});
      CHECK_TENSOR(*out[0], r[2]);
      CHECK_TENSOR(*out[1], r[3]);
    }
  }
  SUBCASE("errors") {
    Saved small_source = saved;
    small_source["source_sym_sizes"] = IntList{3};
    CHECK_THROWS_WITH_AS(call_node("MaskedScatterBackward0", {g}, {false, true}, small_source),
                         "MaskedScatterBackward0: the mask selects 4 elements, more than source's 3 "
                         "(source_sym_sizes [3])",
                         Error);
    Saved huge_source = saved;
    huge_source["source_sym_sizes"] = IntList{std::int64_t{1} << 32, std::int64_t{1} << 32};
    CHECK_THROWS_WITH_AS(call_node("MaskedScatterBackward0", {g}, {false, true}, huge_source),
                         "MaskedScatterBackward0: source_sym_sizes [4294967296,4294967296] has more elements than int64 "
                         "can count",
                         Error);
  }
}

TEST_CASE("EmbeddingBackward0") {
  const Tensor weight = random64({5, 3}, 100), g = random64({2, 2, 3}, 101);
  const Tensor indices = ints({{0, 2}, {2, 4}});  // row 2 twice
  const Saved saved = {{"indices", indices}, {"padding_idx", std::int64_t{-1}}, {"scale_grad_by_freq", false},
                       {"sparse", false}, {"weight_sym_argsize_0", std::int64_t{5}}};

  SUBCASE("finite differences (no padding_idx: the forward does not see it)") {
    const Grads out = call_node("EmbeddingBackward0", {g}, {true}, saved);
    check_against_finite_differences(
        out, 0, [&](const std::vector<Tensor>& in) { return embedding(in[0], indices); }, {weight}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("EmbeddingBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("EmbeddingBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: padding_idx, scale_grad_by_freq, both, a negative padding_idx") {
    for (const char* options :
         {"", "padding_idx=2", "scale_grad_by_freq=True", "padding_idx=2, scale_grad_by_freq=True",
          "padding_idx=-1, scale_grad_by_freq=True", "padding_idx=0"}) {
      for (const Tensor& idx : {indices, ints({4, 4, 0, 4, 1})}) {
        const std::string options_text = options;
        CAPTURE(options_text);
        CAPTURE(str(idx.sizes()));
        const Tensor grad = random64(idx.dim() == 2 ? Shape{2, 2, 3} : Shape{5, 3}, 102);
        const auto r = torch_exec(std::string("w = a.requires_grad_()\nout = F.embedding(b, w, ") + options + R"()
fn = out.grad_fn
assert fn.name() == "EmbeddingBackward0"
p = fn._saved_padding_idx
p = p - 2**64 if p >= 2**63 else p  # torch shows the SymInt -1 as 2**64 - 1
result = (fn._saved_indices, p, fn._saved_scale_grad_by_freq, fn._saved_sparse, fn._saved_weight_sym_argsize_0,
          *torch.autograd.grad(out, (w,), c))
)", {weight, idx, grad});
        const Grads out = call_node("EmbeddingBackward0", {grad}, {true},
                                    Saved{{"indices", r[0]},
                                          {"padding_idx", r[1].item<std::int64_t>()},
                                          {"scale_grad_by_freq", r[2].item<bool>()},
                                          {"sparse", r[3].item<bool>()},
                                          {"weight_sym_argsize_0", r[4].item<std::int64_t>()}});
        CHECK_TENSOR(*out[0], r[5]);
      }
    }
  }
  SUBCASE("float32 stays float32") {
    Saved scaled = saved;
    scaled["scale_grad_by_freq"] = true;
    CHECK(call_node("EmbeddingBackward0", {to(g, DType::Float32)}, {true}, scaled)[0]->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    Saved sparse = saved;
    sparse["sparse"] = true;
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBackward0", {g}, {true}, sparse),
                         "EmbeddingBackward0: sparse=True (a sparse COO gradient) is not supported yet", Error);
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBackward0", {random64({4, 3}, 1)}, {true}, saved),
                         "EmbeddingBackward0: grad [4,3] does not match indices [2,2] plus an embedding dim", Error);
    Saved float_indices = saved;
    float_indices["indices"] = random64({2, 2}, 1);
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBackward0", {g}, {true}, float_indices),
                         "EmbeddingBackward0: indices must be int64, got float64", Error);
    Saved out_of_range = saved;
    out_of_range["weight_sym_argsize_0"] = std::int64_t{4};
    CHECK_THROWS_AS(call_node("EmbeddingBackward0", {g}, {true}, out_of_range), Error);
  }
}

// ------------------------------------------------- scatter_reduce, index_reduce ---

// A reduce node's case: self, the index, the scattered values (src or source), and the forward with L0.
struct ReduceCase {
  const char* node;      // "ScatterReduceBackward0"
  const char* op;        // "scatter_reduce" (torch.<op>)
  const char* values;    // "src" or "source": the saved field and input
  std::int64_t dim;
  Tensor self, index, src;
  // For prod: a zero of self at a target that receives values, two zeros of src that go to one target,
  // and a third that is alone among its target's values: rows, then columns.
  IntList self_zero, src_zero_rows, src_zero_columns;
  Tensor forward(const Tensor& self_in, const Tensor& src_in, const std::string& reduce, bool include_self) const {
    return std::string(op) == "scatter_reduce" ? scatter_reduce(self_in, dim, index, src_in, reduce, include_self)
                                               : index_reduce(self_in, dim, index, src_in, reduce, include_self);
  }
  Saved saved(const std::string& reduce, bool include_self) const {
    return {{"dim", dim}, {"include_self", include_self}, {"index", index}, {"reduce", reduce}, {"self", self},
            {values, src}, {"result", forward(self, src, reduce, include_self)}};
  }
};

std::string py_bool(bool value) { return value ? "True" : "False"; }

// torch's grads of self and src, and the saved fields its node holds, for one reduce.
void check_reduce_against_torch(const ReduceCase& c, const Tensor& self, const Tensor& src, const std::string& reduce,
                                bool include_self) {
  CAPTURE(reduce);
  CAPTURE(include_self);
  const auto r = torch_exec(std::string("x = a.requires_grad_()\ns = c.requires_grad_()\n") + "out = torch." + c.op +
                                "(x, " + std::to_string(c.dim) + ", b, s, '" + reduce +
                                "', include_self=" + py_bool(include_self) + ")\n" +
                                "fn = out.grad_fn\n"
                                "assert fn.name() == '" + c.node + "', fn.name()\n"
                                "assert fn._saved_reduce == '" + reduce + "'\n"
                                "g = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(7))\n"
                                "result = (torch.tensor(fn._saved_dim), torch.tensor(fn._saved_include_self), "
                                "fn._saved_index, fn._saved_self, fn._saved_" + c.values + ", fn._saved_result, g, "
                                "*torch.autograd.grad(out, (x, s), g))\n",
                            {self, c.index, src});
  const Saved from_torch = {{"dim", r[0].item<std::int64_t>()}, {"include_self", r[1].item<bool>()},
                            {"index", r[2]}, {"reduce", reduce}, {"self", r[3]}, {c.values, r[4]}, {"result", r[5]}};
  const Grads out = call_node(c.node, {r[6]}, {true, true}, from_torch);
  REQUIRE(out[0].has_value());
  REQUIRE(out[1].has_value());
  CHECK_TENSOR(*out[0], r[7], 1e-12, 1e-15);
  CHECK_TENSOR(*out[1], r[8], 1e-12, 1e-15);
}

void check_reduce_node(const ReduceCase& c, const std::vector<std::string>& reduces) {
  const Tensor g = random64(c.self.sizes(), 171);
  SUBCASE("finite differences, for self and for the scattered values") {
    for (const std::string& reduce : reduces) {
      for (bool include_self : {true, false}) {
        CAPTURE(reduce);
        CAPTURE(include_self);
        const Grads out = call_node(c.node, {g}, {true, true}, c.saved(reduce, include_self));
        auto forward = [&](const std::vector<Tensor>& in) { return c.forward(in[0], in[1], reduce, include_self); };
        check_against_finite_differences(out, 0, forward, {c.self, c.src}, g);
        check_against_finite_differences(out, 1, forward, {c.self, c.src}, g);
      }
    }
  }
  SUBCASE("prod with zeros: one in self, a target with one zero, a target with two (finite differences)") {
    Tensor self = c.self.clone(), src = c.src.clone();
    self = index_put(self, {from_vector(IntList{c.self_zero[0]}, {1}), from_vector(IntList{c.self_zero[1]}, {1})},
                     tensor(0.0, DType::Float64));
    src = index_put(src, {from_vector(c.src_zero_rows, {3}), from_vector(c.src_zero_columns, {3})},
                    tensor(0.0, DType::Float64));
    for (bool include_self : {true, false}) {
      CAPTURE(include_self);
      ReduceCase zeroed = c;
      zeroed.self = self, zeroed.src = src;
      const Grads out = call_node(c.node, {g}, {true, true}, zeroed.saved("prod", include_self));
      auto forward = [&](const std::vector<Tensor>& in) { return c.forward(in[0], in[1], "prod", include_self); };
      check_against_finite_differences(out, 0, forward, {self, src}, g);
      check_against_finite_differences(out, 1, forward, {self, src}, g);
      check_reduce_against_torch(c, self, src, "prod", include_self);
    }
  }
  SUBCASE("against torch's _saved_ values, ties included") {
    for (const std::string& reduce : reduces)
      for (bool include_self : {true, false}) check_reduce_against_torch(c, c.self, c.src, reduce, include_self);
    // Ties: integer values, so that maxima and minima repeat in self and src.
    const Tensor self_ties = div(mul(c.self, 2.0), 1, "floor"), src_ties = div(mul(c.src, 2.0), 1, "floor");
    for (const std::string reduce : {"amax", "amin"})
      for (bool include_self : {true, false}) check_reduce_against_torch(c, self_ties, src_ties, reduce, include_self);
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = c.saved(reduces.front(), true);
    const Grads only_self = call_node(c.node, {g}, {true, false}, saved);
    CHECK(only_self[0].has_value());
    CHECK_FALSE(only_self[1].has_value());
    const Grads only_src = call_node(c.node, {g}, {false, true}, saved);
    CHECK_FALSE(only_src[0].has_value());
    CHECK(only_src[1].has_value());
    const Grads undefined = call_node(c.node, {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
  }
  SUBCASE("errors") {
    Saved bad = c.saved("mean", true);
    bad["reduce"] = std::string("max");
    CHECK_THROWS_WITH_AS(call_node(c.node, {g}, {true, true}, bad), doctest::Contains("reduce must be one of"), Error);
    CHECK_THROWS_WITH_AS(call_node(c.node, {random64({2}, 1)}, {true, true}, c.saved("mean", true)),
                         doctest::Contains("must have self's shape"), Error);
  }
}

TEST_CASE("ScatterReduceBackward0") {
  const ReduceCase c{"ScatterReduceBackward0", "scatter_reduce", "src", 0, random64({3, 4}, 172),
                     ints({{2, 0, 2, 1}, {0, 0, 1, 1}, {2, 2, 1, 0}}), random64({3, 4}, 173),
                     // src (0, 1) and (1, 1) go to self (0, 1); src (1, 2) to (1, 2) with (2, 2), nonzero
                     {2, 0}, {0, 1, 1}, {1, 1, 2}};
  check_reduce_node(c, {"sum", "prod", "mean", "amax", "amin"});
}

TEST_CASE("IndexReduceBackward0") {
  // source column k goes to self column index[k]: (0, 0) and (0, 2) both to (0, 2); (1, 1) alone to (1, 0)
  const ReduceCase c{"IndexReduceBackward0", "index_reduce", "source", 1, random64({4, 3}, 174), ints({2, 0, 2, 2}),
                     random64({4, 4}, 175), {2, 2}, {0, 0, 1}, {0, 2, 1}};
  check_reduce_node(c, {"prod", "mean", "amax", "amin"});
}

}  // TEST_SUITE

// ------------------------------------- index_copy, index_fill, put, take, masked index, fill ---

namespace {

const std::vector<DType> kFloatingAndComplex = {DType::Float64,    DType::Float32,       DType::Float16,
                                                DType::BFloat16,   DType::ComplexDouble, DType::ComplexFloat};

// These backwards copy the grad, zero some of it, or add some of its elements (duplicate indices, a
// filled value's grad): exact in float64, and one rounding apart in float16/bfloat16, where ATen's
// kernels round after each add and refgrad once.
double rtol_in(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32:
    case DType::ComplexFloat: return 1e-6;
    default: return 1e-12;
  }
}

// `real` in `dtype`; complex dtypes get an imaginary part of their own.
Tensor in_dtype(const Tensor& real, DType dtype, std::uint64_t seed) {
  return is_complex(dtype) ? complex(real, random64(real.sizes(), seed)).to(dtype) : real.to(dtype);
}

// The Python that follows a torch forward `out = ...` of the leaves `inputs`: checks the node's name,
// makes a seeded grad g in out's dtype and returns (saved..., g, torch's grads of the inputs).
// signed() reads back a negative int field, which torch shows as unsigned 64-bit.
std::string torch_backward(const std::string& node, const std::string& saved, const std::string& inputs) {
  return "\nfn = out.grad_fn\nassert fn.name() == \"" + node + "\", fn.name()\n" + R"(
def signed(v): return v - 2**64 if v >= 2**63 else v
g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
if out.dtype.is_complex: g = torch.complex(g, torch.randn(out.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
g = g.to(out.dtype)
result = ()" + saved + ", g, *torch.autograd.grad(out, (" + inputs + ",), g))\n";
}

void check_close_to_torch(const Tensor& refgrad_grad, const Tensor& torch_grad, DType dtype) {
  CHECK_TENSOR(refgrad_grad, torch_grad, rtol_in(dtype), rtol_in(dtype) * 1e-1);
}

Saved index_copy_saved(std::int64_t dim, const Tensor& index, const FieldValue& source, std::int64_t source_dim) {
  return {{"dim", dim}, {"index", index}, {"source", source}, {"source_dim", source_dim}};
}

Saved put_saved(bool accumulate, const Tensor& index, const Tensor& source) {
  return {{"accumulate", accumulate},
          {"index", index},
          {"source", source},
          {"source_info", TypeAndSize{source.sizes(), TensorOptions{source.dtype(), Device::CPU, Layout::Strided, false}}}};
}

// A Tensor?[] field read from torch: the Python that returns it (its length, which entries are None,
// the tensors), and the C++ that rebuilds it from the results starting at `first`; `next` is set to
// the result after it.
std::string optional_tensor_list(const std::string& field) {
  return "len(" + field + "), *[torch.tensor(i is None) for i in " + field + "], *[i for i in " + field +
         " if i is not None]";
}

std::vector<OptionalTensor> read_optional_tensor_list(const std::vector<Tensor>& r, std::size_t first, std::size_t& next) {
  const auto count = static_cast<std::size_t>(r[first].item<std::int64_t>());
  std::vector<OptionalTensor> list;
  next = first + 1 + count;
  for (std::size_t i = 0; i < count; ++i) {
    if (r[first + 1 + i].item<bool>()) list.push_back(std::nullopt);
    else list.push_back(r[next++]);
  }
  return list;
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("IndexCopyBackward0") {
  const Tensor x = random64({3, 4}, 200), source = random64({3, 2}, 201), g = random64({3, 4}, 202);
  const Tensor columns = ints({3, 0});
  const Saved saved = index_copy_saved(1, columns, source, 2);

  SUBCASE("finite differences, the forward written as index_put") {
    const Grads out = call_node("IndexCopyBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return index_put(in[0], {std::nullopt, columns}, in[1], false); };
    check_against_finite_differences(out, 0, forward, {x, source}, g);
    check_against_finite_differences(out, 1, forward, {x, source}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads only_self = call_node("IndexCopyBackward0", {g}, {true, false}, saved);
    CHECK(only_self[0].has_value());
    CHECK_FALSE(only_self[1].has_value());
    const Grads only_source = call_node("IndexCopyBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_source[0].has_value());
    CHECK(only_source[1]->sizes() == Shape{3, 2});
    const Grads undefined = call_node("IndexCopyBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
  }
  SUBCASE("against torch: duplicates, a negative dim, a 0-d index, 0-d self and source, every dtype") {
    struct Case {
      const char* forward;
      Tensor self, index, source;
    };
    for (const Case& c : {Case{"x.index_copy(1, i, s)", x, columns, source},
                          // duplicates: torch writes one of them; its backward gives each the grad
                          Case{"x.index_copy(0, i, s)", x, ints({2, 0, 2}), random64({3, 4}, 203)},
                          Case{"x.index_copy(-1, i, s)", x, ints({1, 2, 3}), random64({3, 3}, 204)},
                          Case{"x.index_copy(0, i, s)", x, tensor(std::int64_t{1}), random64({1, 4}, 205)},
                          Case{"x.index_copy(0, i, s)", random64({}, 206), ints({0}), random64({}, 207)}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(c.forward));
        CAPTURE(str(c.source.sizes()));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); i = b; s = c.requires_grad_()\nout = " +
                                      std::string(c.forward) +
                                      torch_backward("IndexCopyBackward0",
                                                     "signed(fn._saved_dim), fn._saved_index, fn._saved_source, "
                                                     "fn._saved_source_dim",
                                                     "x, s"),
                                  {in_dtype(c.self, dtype, 208), c.index, in_dtype(c.source, dtype, 209)});
        const Grads out = call_node("IndexCopyBackward0", {r[4]}, {true, true},
                                    index_copy_saved(r[0].item<std::int64_t>(), r[1], r[2], r[3].item<std::int64_t>()));
        check_close_to_torch(*out[0], r[5], dtype);
        check_close_to_torch(*out[1], r[6], dtype);
      }
    }
  }
  SUBCASE("errors: torch saves no source when source needs no grad; a source that does not fit the index") {
    const auto r = torch_exec("out = a.requires_grad_().index_copy(1, b, c)\nresult = torch.tensor(out.grad_fn._saved_source is None)",
                              {x, columns, source});
    CHECK(r[0].item<bool>());
    const Saved unsaved = index_copy_saved(1, columns, None{}, 2);
    CHECK_TENSOR(*call_node("IndexCopyBackward0", {g}, {true, false}, unsaved)[0],
                 *call_node("IndexCopyBackward0", {g}, {true, false}, saved)[0]);
    CHECK_THROWS_WITH_AS(call_node("IndexCopyBackward0", {g}, {true, true}, unsaved),
                         "IndexCopyBackward0: source's grad is needed but `source` was not saved", Error);
    CHECK_THROWS_WITH_AS(call_node("IndexCopyBackward0", {g}, {false, true}, index_copy_saved(1, columns, random64({3, 5}, 1), 2)),
                         doctest::Contains("IndexCopyBackward0: "), Error);
    CHECK_THROWS_WITH_AS(call_node("IndexCopyBackward0", {g}, {true, false}, index_copy_saved(1, ints({4}), source, 2)),
                         "IndexCopyBackward0: index 4 is out of range for dim 1 of grad [3,4] (4 entries)", Error);
    CHECK_THROWS_WITH_AS(call_node("IndexCopyBackward0", {g}, {true, true}, Saved{{"dim", std::int64_t{1}}, {"index", columns}, {"source_dim", std::int64_t{2}}}),
                         "IndexCopyBackward0: saved field 'source' is missing", Error);
  }
}

TEST_CASE("IndexFillBackward0") {
  const Tensor x = random64({3, 4}, 210), g = random64({3, 4}, 211);
  const Tensor columns = ints({0, 2, 0});  // column 0 named twice
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", columns}};

  SUBCASE("finite differences, the forward written as index_put") {
    check_against_finite_differences(
        call_node("IndexFillBackward0", {g}, {true}, saved), 0,
        [&](const std::vector<Tensor>& in) { return index_put(in[0], {std::nullopt, columns}, tensor(2.5, DType::Float64), false); },
        {x}, g);
  }
  SUBCASE("need mask, undefined grad, an empty index") {
    CHECK_FALSE(call_node("IndexFillBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("IndexFillBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_TENSOR(*call_node("IndexFillBackward0", {g}, {true}, Saved{{"dim", std::int64_t{1}}, {"index", zeros({0}, DType::Int64)}})[0], g);
  }
  SUBCASE("against torch: duplicates, negative indices and dim, a 0-d self, every dtype") {
    struct Case {
      const char* forward;
      Tensor self, index;
    };
    for (const Case& c : {Case{"x.index_fill(1, i, 2.5)", x, columns}, Case{"x.index_fill(-2, i, -1)", x, ints({2, -3})},
                          Case{"x.index_fill(1, i, 0.5)", x, ints({-1, 3, 1})},
                          Case{"x.index_fill(0, i, 3.0)", random64({}, 212), ints({0})}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(c.forward));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); i = b\nout = " + std::string(c.forward) +
                                      torch_backward("IndexFillBackward0", "signed(fn._saved_dim), fn._saved_index", "x"),
                                  {in_dtype(c.self, dtype, 213), c.index});
        const Grads out =
            call_node("IndexFillBackward0", {r[2]}, {true}, Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}});
        check_close_to_torch(*out[0], r[3], dtype);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("IndexFillBackward0", {g}, {true}, Saved{{"dim", std::int64_t{1}}, {"index", ints({-5})}}),
                         "IndexFillBackward0: index -5 is out of range for dim 1 of grad [3,4] (4 entries)", Error);
    CHECK_THROWS_WITH_AS(call_node("IndexFillBackward0", {g}, {true}, Saved{{"dim", std::int64_t{1}}}),
                         "IndexFillBackward0: saved field 'index' is missing", Error);
    CHECK_THROWS_WITH_AS(call_node("IndexFillBackward0", {g}, {true}, Saved{{"dim", std::int64_t{2}}, {"index", columns}}),
                         doctest::Contains("IndexFillBackward0: "), Error);
  }
}

TEST_CASE("IndexFillBackward1") {
  const Tensor x = random64({3, 4}, 220), value = random64({}, 221), g = random64({3, 4}, 222);
  const Tensor columns = ints({0, 2, 0});  // column 0 named twice, filled (and its grad summed) once
  const Saved saved = {{"dim", std::int64_t{1}}, {"index", columns}};

  SUBCASE("finite differences, the forward written as index_put") {
    const Grads out = call_node("IndexFillBackward1", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return index_put(in[0], {std::nullopt, columns}, in[1], false); };
    check_against_finite_differences(out, 0, forward, {x, value}, g);
    check_against_finite_differences(out, 1, forward, {x, value}, g);
  }
  SUBCASE("need mask, undefined grad, an empty index") {
    const Grads only_value = call_node("IndexFillBackward1", {g}, {false, true}, saved);
    CHECK_FALSE(only_value[0].has_value());
    CHECK(only_value[1]->sizes() == Shape{});
    const Grads undefined = call_node("IndexFillBackward1", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
    const Grads empty = call_node("IndexFillBackward1", {g}, {true, true},
                                  Saved{{"dim", std::int64_t{0}}, {"index", zeros({0}, DType::Int64)}});
    CHECK_TENSOR(*empty[0], g);
    CHECK(empty[1]->item<double>() == 0.0);
  }
  SUBCASE("against torch: duplicates, a negative dim, a 0-d self, every dtype") {
    struct Case {
      const char* forward;
      Tensor self, index;
    };
    for (const Case& c : {Case{"x.index_fill(1, i, v)", x, columns}, Case{"x.index_fill(-2, i, v)", x, ints({2, 1, 2})},
                          Case{"x.index_fill(0, i, v)", random64({}, 223), ints({0})}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(c.forward));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); i = b; v = c.requires_grad_()\nout = " + std::string(c.forward) +
                                      torch_backward("IndexFillBackward1", "signed(fn._saved_dim), fn._saved_index", "x, v"),
                                  {in_dtype(c.self, dtype, 224), c.index, in_dtype(value, dtype, 225)});
        const Grads out = call_node("IndexFillBackward1", {r[2]}, {true, true},
                                    Saved{{"dim", r[0].item<std::int64_t>()}, {"index", r[1]}});
        check_close_to_torch(*out[0], r[3], dtype);
        check_close_to_torch(*out[1], r[4], dtype);
      }
    }
  }
  SUBCASE("by hand: negative indices, where torch's value grad (index_select of -1) raises") {
    // Index [-1, 3] names column 3 twice: the value's grad is column 3's sum, once, as torch gives for
    // index [3]; self's grad (which torch computes) has column 3 zeroed.
    CHECK_THROWS(torch_exec(R"(
v = b.requires_grad_()
result = torch.autograd.grad(a.index_fill(1, torch.tensor([-1, 3]), v), (v,), c)
)", {x, value, g}));
    const auto r = torch_exec(R"(
x = a.requires_grad_(); v = b.requires_grad_()
result = (torch.autograd.grad(x.index_fill(1, torch.tensor([-1, 3]), v), (x,), c)[0],
          torch.autograd.grad(x.index_fill(1, torch.tensor([3]), v), (v,), c)[0])
)", {x, value, g});
    const Grads out =
        call_node("IndexFillBackward1", {g}, {true, true}, Saved{{"dim", std::int64_t{1}}, {"index", ints({-1, 3})}});
    CHECK_TENSOR(*out[0], r[0]);
    CHECK_TENSOR(*out[1], r[1]);
  }
}

TEST_CASE("PutBackward0") {
  const Tensor x = random64({3, 4}, 230), g = random64({3, 4}, 231);
  const Tensor source = random64({2, 2}, 232);  // put takes any source with the index's number of elements

  SUBCASE("finite differences, the forward written as scatter/scatter_add of the flattened self") {
    for (bool accumulate : {true, false}) {
      CAPTURE(accumulate);
      // Duplicates (0 twice) only when accumulating: without, which write wins is unspecified.
      const Tensor index = accumulate ? ints({0, 11, 5, 0}) : ints({0, 11, 5, 2});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor flat = reshape(in[0], {-1}), values = reshape(in[1], {-1});
        return reshape(accumulate ? scatter_add(flat, 0, index, values) : scatter(flat, 0, index, values), {3, 4});
      };
      const Grads out = call_node("PutBackward0", {g}, {true, true}, put_saved(accumulate, index, source));
      check_against_finite_differences(out, 0, forward, {x, source}, g);
      check_against_finite_differences(out, 1, forward, {x, source}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = put_saved(true, ints({0, 1, 2, 3}), source);
    CHECK(call_node("PutBackward0", {g}, {true, false}, saved)[0]->is_same(g));
    const Grads only_source = call_node("PutBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_source[0].has_value());
    CHECK(only_source[1]->sizes() == Shape{2, 2});
    CHECK_FALSE(call_node("PutBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch: accumulate true and false, duplicates, negative indices, a 2-d index, every dtype") {
    struct Case {
      const char* forward;
      Tensor index, source;
    };
    for (const Case& c : {Case{"x.put(i, s, accumulate=True)", ints({0, -1, 5, 0, 2}), random64({5}, 233)},
                          Case{"x.put(i, s)", ints({0, -1, 5, 0, 2}), random64({5}, 234)},
                          Case{"x.put(i, s, accumulate=True)", ints({{11, -1}, {-12, 0}}), source},
                          Case{"x.put(i, s)", ints({{3, 7}, {-2, 4}}), random64({4}, 235)}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(c.forward));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec(
            "x = a.requires_grad_(); i = b; s = c.requires_grad_()\nout = " + std::string(c.forward) +
                torch_backward("PutBackward0", "fn._saved_accumulate, fn._saved_index, fn._saved_source", "x, s"),
            {in_dtype(x, dtype, 236), c.index, in_dtype(c.source, dtype, 237)});
        const Grads out = call_node("PutBackward0", {r[3]}, {true, true}, put_saved(r[0].item<bool>(), r[1], r[2]));
        CHECK(out[0]->dtype() == dtype);
        check_close_to_torch(*out[0], r[4], dtype);
        check_close_to_torch(*out[1], r[5], dtype);
      }
    }
  }
  SUBCASE("errors") {
    Saved unsaved = put_saved(false, ints({0, 1, 2, 3}), source);
    unsaved["source"] = None{};
    CHECK(call_node("PutBackward0", {g}, {true, false}, unsaved)[0]->sizes() == Shape{3, 4});
    CHECK_THROWS_WITH_AS(call_node("PutBackward0", {g}, {true, true}, unsaved),
                         "PutBackward0: source's grad is needed but `source` was not saved", Error);
    // self's grad does not read source_info: capture cannot know it when source needs no grad
    Saved unknown_source = put_saved(false, ints({0, 1, 2}), ints({0}));
    unknown_source["source"] = None{};
    unknown_source["source_info"] = TypeAndSize{{3, 4}, {}};
    const Tensor expected = index_put(reshape(g, {-1}), {ints({0, 1, 2})}, zeros({3}, g.dtype()));
    CHECK_TENSOR(*call_node("PutBackward0", {g}, {true, false}, unknown_source)[0], reshape(expected, {3, 4}));
    CHECK_THROWS_WITH_AS(call_node("PutBackward0", {g}, {true, true}, put_saved(false, ints({0, 1, 2}), source)),
                         "PutBackward0: source of shape [2,2] and index of shape [3] differ in their number of elements",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("PutBackward0", {g}, {false, true}, put_saved(true, ints({0, 1, 2}), source)),
                         "PutBackward0: source of shape [2,2] and index of shape [3] differ in their number of elements",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("PutBackward0", {g}, {false, true}, put_saved(true, ints({0, 1, 12, 3}), source)),
                         "PutBackward0: index 12 is out of range for self (the grad) of shape [3,4] flattened (12 entries)", Error);
  }
}

TEST_CASE("TakeBackward0") {
  const Tensor x = random64({3, 4}, 240);
  const Tensor index = ints({{0, 11}, {5, 0}});  // element 0 taken twice: its grads add up

  SUBCASE("finite differences, the forward written as gather of the flattened self") {
    const Tensor g = random64({2, 2}, 241);
    const Grads out = call_node("TakeBackward0", {g}, {true}, Saved{{"index", index}, {"self", x}});
    check_against_finite_differences(
        out, 0,
        [&](const std::vector<Tensor>& in) { return reshape(gather(reshape(in[0], {-1}), 0, reshape(index, {-1})), {2, 2}); },
        {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"index", index}, {"self", x}};
    CHECK_FALSE(call_node("TakeBackward0", {random64({2, 2}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("TakeBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: duplicates, negative indices, a 0-d index and self, every dtype") {
    struct Case {
      Tensor self, index;
    };
    for (const Case& c : {Case{x, ints({{0, -1}, {5, 0}, {-12, 7}})}, Case{x, tensor(std::int64_t{-2})},
                          Case{random64({}, 242), ints({0, 0, -1})}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(str(c.index.sizes()));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_()\nout = x.take(b)" +
                                      torch_backward("TakeBackward0", "fn._saved_index, fn._saved_self", "x"),
                                  {in_dtype(c.self, dtype, 243), c.index});
        const Grads out = call_node("TakeBackward0", {r[2]}, {true}, Saved{{"index", r[0]}, {"self", r[1]}});
        check_close_to_torch(*out[0], r[3], dtype);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("TakeBackward0", {random64({4}, 1)}, {true}, Saved{{"index", index}, {"self", x}}),
                         "TakeBackward0: grad has shape [4] but index has shape [2,2]", Error);
    CHECK_THROWS_WITH_AS(call_node("TakeBackward0", {random64({2, 2}, 1)}, {true}, Saved{{"index", ints({{0, 12}, {1, 1}})}, {"self", x}}),
                         "TakeBackward0: index 12 is out of range for self of shape [3,4] flattened (12 entries)", Error);
  }
}


// _unsafe_masked_index's indices may lie out of range where the mask is false: rows 1 (6) and
// column 1 (5) of self [4, 5]; -1 and -2 count from the end; row 0 is named twice. The finite
// differences' forward reads those positions at in-range stand-ins instead, and multiplies by the mask.
struct MaskedIndexCase {
  Tensor rows = ints({{0}, {6}, {-1}, {0}});
  Tensor columns = ints({{1, 5, -2}});
  Tensor mask = tensor({{true, false, true}, {false, false, false}, {true, false, false}, {true, false, true}}, DType::Bool);
  std::vector<OptionalTensor> indices = {rows, columns};
  std::vector<OptionalTensor> in_range = {ints({{0}, {0}, {-1}, {0}}), ints({{1, 0, -2}})};
  Tensor masked(const Tensor& t) const { return mul(t, mask.to(DType::Float64)); }
};

TEST_CASE("UnsafeMaskedIndexBackward0") {
  const MaskedIndexCase c;
  const Tensor x = random64({4, 5}, 250), g = random64({4, 3}, 251);
  const Saved saved = {{"indices", c.indices}, {"mask", c.mask}, {"self_options", kFloat64Options},
                       {"self_sym_sizes", IntList{4, 5}}};

  SUBCASE("finite differences") {
    check_against_finite_differences(call_node("UnsafeMaskedIndexBackward0", {g}, {true}, saved), 0,
                                     [&](const std::vector<Tensor>& in) { return c.masked(index(in[0], c.in_range)); },
                                     {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("UnsafeMaskedIndexBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("UnsafeMaskedIndexBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: out-of-range indices masked, duplicates, a None index, an empty self, every dtype") {
    struct Case {
      const char* forward;
      Tensor self;
    };
    for (const Case& case_ : {Case{"torch.ops.aten._unsafe_masked_index(x, m, [i, j], 1.5)", x},
                              Case{"torch.ops.aten._unsafe_masked_index(x, m[0], [None, j[0]], -2.0)", x},
                              Case{"torch.ops.aten._unsafe_masked_index(x, m, [i, j], 0.5)", zeros({0, 5}, DType::Float64)}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(case_.forward));
        CAPTURE(str(case_.self.sizes()));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); m = b; i = c; j = d\nout = " + std::string(case_.forward) +
                                      torch_backward("UnsafeMaskedIndexBackward0",
                                                     optional_tensor_list("fn._saved_indices") +
                                                         ", fn._saved_mask, torch.tensor(fn._saved_self_sym_sizes)",
                                                     "x"),
                                  {in_dtype(case_.self, dtype, 252), c.mask, c.rows, c.columns});
        std::size_t next = 0;
        const std::vector<OptionalTensor> indices = read_optional_tensor_list(r, 0, next);
        const Grads out = call_node("UnsafeMaskedIndexBackward0", {r[next + 2]}, {true},
                                    Saved{{"indices", indices},
                                          {"mask", r[next]},
                                          {"self_options", TensorOptions{dtype, Device::CPU, Layout::Strided, false}},
                                          {"self_sym_sizes", int_list(r[next + 1])}});
        CHECK(out[0]->dtype() == dtype);
        check_close_to_torch(*out[0], r[next + 3], dtype);
      }
    }
  }
  SUBCASE("errors") {
    Saved too_many = saved;
    too_many["indices"] = std::vector<OptionalTensor>{c.rows, c.columns, c.columns};
    CHECK_THROWS_WITH_AS(call_node("UnsafeMaskedIndexBackward0", {g}, {true}, too_many),
                         "UnsafeMaskedIndexBackward0: 3 indices for a tensor of shape [4,5]", Error);
    CHECK_THROWS_WITH_AS(call_node("UnsafeMaskedIndexBackward0", {random64({4, 4}, 1)}, {true}, saved),
                         doctest::Contains("UnsafeMaskedIndexBackward0: "), Error);
  }
}

TEST_CASE("UnsafeMaskedIndexPutAccumulateBackward0") {
  const MaskedIndexCase c;
  const Tensor x = random64({4, 5}, 260), values = random64({4, 3}, 261), g = random64({4, 5}, 262);
  const Saved saved = {{"indices", c.indices}, {"mask", c.mask}};

  SUBCASE("finite differences") {
    const Grads out = call_node("UnsafeMaskedIndexPutAccumulateBackward0", {g}, {true, true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) { return index_put(in[0], c.in_range, c.masked(in[1]), true); };
    check_against_finite_differences(out, 0, forward, {x, values}, g);
    check_against_finite_differences(out, 1, forward, {x, values}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads only_self = call_node("UnsafeMaskedIndexPutAccumulateBackward0", {g}, {true, false}, saved);
    CHECK(only_self[0]->is_same(g));
    CHECK_FALSE(only_self[1].has_value());
    const Grads undefined = call_node("UnsafeMaskedIndexPutAccumulateBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
  }
  SUBCASE("against torch: out-of-range indices masked, duplicates, a None index, an empty self, every dtype") {
    struct Case {
      const char* forward;
      Tensor self, values;
    };
    for (const Case& case_ :
         {Case{"torch.ops.aten._unsafe_masked_index_put_accumulate(x, m, [i, j], v)", x, values},
          Case{"torch.ops.aten._unsafe_masked_index_put_accumulate(x, m[0], [None, j[0]], v)", x, random64({4, 3}, 263)},
          Case{"torch.ops.aten._unsafe_masked_index_put_accumulate(x, m, [i, j], v)", zeros({0, 5}, DType::Float64), values}}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(std::string(case_.forward));
        CAPTURE(str(case_.self.sizes()));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); m = b; i = c; j = d; v = e.requires_grad_()\nout = " +
                                      std::string(case_.forward) +
                                      torch_backward("UnsafeMaskedIndexPutAccumulateBackward0",
                                                     optional_tensor_list("fn._saved_indices") + ", fn._saved_mask", "x, v"),
                                  {in_dtype(case_.self, dtype, 264), c.mask, c.rows, c.columns,
                                   in_dtype(case_.values, dtype, 265)});
        std::size_t next = 0;
        const std::vector<OptionalTensor> indices = read_optional_tensor_list(r, 0, next);
        const Grads out = call_node("UnsafeMaskedIndexPutAccumulateBackward0", {r[next + 1]}, {true, true},
                                    Saved{{"indices", indices}, {"mask", r[next]}});
        check_close_to_torch(*out[0], r[next + 2], dtype);
        check_close_to_torch(*out[1], r[next + 3], dtype);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(
        call_node("UnsafeMaskedIndexPutAccumulateBackward0", {g}, {false, true},
                  Saved{{"indices", std::vector<OptionalTensor>{c.rows, c.columns, c.columns}}, {"mask", c.mask}}),
        "UnsafeMaskedIndexPutAccumulateBackward0: 3 indices for a tensor of shape [4,5]", Error);
  }
}

// The fill nodes save nothing: self's grad is zeros, a tensor value's the grad's sum. Finite
// differences of a forward that ignores self (self * 0 + value), then torch, in every dtype, on a
// matrix and on a 0-d self.
void check_fill_node(const char* node, const char* torch_forward, bool tensor_value) {
  const Tensor x = random64({3, 4}, 270), value = random64({}, 271), g = random64({3, 4}, 272);
  const std::size_t inputs = tensor_value ? 2 : 1;
  const Need need(inputs, true);
  SUBCASE("finite differences") {
    auto forward = [&](const std::vector<Tensor>& in) {
      return add(mul(in[0], 0.0), tensor_value ? expand(in[1], in[0].sizes()) : tensor(2.5, DType::Float64));
    };
    const std::vector<Tensor> at = tensor_value ? std::vector<Tensor>{x, value} : std::vector<Tensor>{x};
    const Grads out = call_node(node, {g}, need, Saved{});
    for (std::size_t k = 0; k < inputs; ++k) check_against_finite_differences(out, k, forward, at, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads none_needed = call_node(node, {g}, Need(inputs, false), Saved{});
    for (const OptionalTensor& grad : none_needed) CHECK_FALSE(grad.has_value());
    for (const OptionalTensor& grad : call_node(node, {std::nullopt}, need, Saved{})) CHECK_FALSE(grad.has_value());
    if (tensor_value) {
      const Grads only_value = call_node(node, {g}, {false, true}, Saved{});
      CHECK_FALSE(only_value[0].has_value());
      CHECK(only_value[1]->sizes() == Shape{});
    }
  }
  SUBCASE("against torch, every dtype") {
    for (const Tensor& self : {x, random64({}, 273)}) {
      for (const DType dtype : kFloatingAndComplex) {
        CAPTURE(str(self.sizes()));
        CAPTURE(dtype_name(dtype));
        const auto r = torch_exec("x = a.requires_grad_(); v = b.requires_grad_()\nout = " + std::string(torch_forward) +
                                      torch_backward(node, "0", tensor_value ? "x, v" : "x"),
                                  {in_dtype(self, dtype, 274), in_dtype(value, dtype, 275)});
        const Grads out = call_node(node, {r[1]}, need, Saved{});
        for (std::size_t k = 0; k < inputs; ++k) {
          CHECK(out[k]->dtype() == dtype);
          check_close_to_torch(*out[k], r[2 + k], dtype);
        }
      }
    }
  }
  SUBCASE("errors: a saved field it does not have") {
    CHECK_THROWS_WITH_AS(call_node(node, {g}, need, Saved{{"value", 2.5}}),
                         (std::string(node) + ": has no saved field 'value'").c_str(), Error);
  }
}

TEST_CASE("FillBackward0") { check_fill_node("FillBackward0", "torch.fill(x, 2.5)", false); }
TEST_CASE("FillBackward1") { check_fill_node("FillBackward1", "torch.fill(x, v)", true); }
TEST_CASE("FillBackward2") { check_fill_node("FillBackward2", "(x * 1).fill_(2.5)", false); }
TEST_CASE("FillBackward3") { check_fill_node("FillBackward3", "(x * 1).fill_(v)", true); }
TEST_CASE("ZeroBackward0") { check_fill_node("ZeroBackward0", "(x * 1).zero_()", false); }

}  // TEST_SUITE
