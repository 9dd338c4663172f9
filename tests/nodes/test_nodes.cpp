// Suite "nodes": every backward node checked (a) against finite differences
// in float64, (b) for need masks and undefined grads, (c) for clear errors,
// (d) against torch itself, fed the _saved_* values of a real grad_fn.
#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

TEST_SUITE("nodes") {

TEST_CASE("AddBackward0") {
  const Tensor x = random64({2, 3}, 1), y = random64({2, 3}, 2), g = random64({2, 3}, 3);
  const Saved saved = {{"alpha", Scalar(2.5)}, {"other_scalar_type", DType::Float64},
                       {"self_scalar_type", DType::Float64}};

  SUBCASE("finite differences") {
    const Grads out = call_node("AddBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return add(in[0], in[1], 2.5); };
    check_against_finite_differences(out, 0, forward, {x, y}, g);
    check_against_finite_differences(out, 1, forward, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads only_other = call_node("AddBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(only_other[0].has_value());
    CHECK(only_other[1].has_value());
    const Grads undefined = call_node("AddBackward0", {std::nullopt}, {true, true}, saved);
    CHECK_FALSE(undefined[0].has_value());
    CHECK_FALSE(undefined[1].has_value());
    // alpha == 1 passes the very same grad on, as maybe_multiply does.
    Saved alpha_one = saved;
    alpha_one["alpha"] = Scalar(1);
    CHECK(call_node("AddBackward0", {g}, {true, true}, alpha_one)[1]->is_same(g));
  }
  SUBCASE("against torch") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); y = b.requires_grad_()
out = torch.add(x, y, alpha=-3)
fn = out.grad_fn
assert fn.name() == "AddBackward0"
result = (fn._saved_alpha, *torch.autograd.grad(out, (x, y), c))
)", {x, y, g});
    const Grads out = call_node("AddBackward0", {g}, {true, true},
                                {{"alpha", Scalar(r[0].item<std::int64_t>())},
                                 {"other_scalar_type", DType::Float64},
                                 {"self_scalar_type", DType::Float64}});
    CHECK(r[0].item<std::int64_t>() == -3);
    CHECK_TENSOR(*out[0], r[1]);
    CHECK_TENSOR(*out[1], r[2]);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g, g}, {true, true}, saved),
                         "AddBackward0: expected 1 incoming grad, got 2", Error);
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g}, {true}, saved),
                         "AddBackward0: the need mask has 1 entries, the node has 2 inputs", Error);
    Saved wrong_kind = saved;
    wrong_kind["alpha"] = x;
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g}, {true, true}, wrong_kind),
                         "AddBackward0: saved field 'alpha' expects Scalar, got Tensor f64[2,3]", Error);
    Saved missing = saved;
    missing.erase("self_scalar_type");
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g}, {true, true}, missing),
                         "AddBackward0: saved field 'self_scalar_type' is missing", Error);
    Saved extra = saved;
    extra["beta"] = Scalar(1);
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g}, {true, true}, extra),
                         "AddBackward0: has no saved field 'beta'", Error);
    CHECK_THROWS_WITH_AS(call_node("AddBackward0", {g}, {true, true}, std::vector<FieldValue>{Scalar(1)}),
                         "AddBackward0: expected 3 saved fields, got 1", Error);
  }
}

TEST_CASE("MulBackward0") {
  const Tensor x = random64({3, 2}, 4), y = random64({3, 2}, 5), g = random64({3, 2}, 6);
  const Saved saved = {{"other", y}, {"other_scalar_type", DType::Float64}, {"self", x},
                       {"self_scalar_type", DType::Float64}};

  SUBCASE("finite differences") {
    const Grads out = call_node("MulBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); };
    check_against_finite_differences(out, 0, forward, {x, y}, g);
    check_against_finite_differences(out, 1, forward, {x, y}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("MulBackward0", {g}, {true, false}, saved);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("MulBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch, with a tensor PyTorch did not save") {
    // Only x requires grad, so torch saves `other` but not `self`.
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x * b
fn = out.grad_fn
assert fn.name() == "MulBackward0"
result = (fn._saved_self is None, fn._saved_other, *torch.autograd.grad(out, (x,), c))
)", {x, y, g});
    CHECK(r[0].item<bool>());
    const Saved from_torch = {{"other", r[1]}, {"other_scalar_type", DType::Float64}, {"self", None{}},
                              {"self_scalar_type", DType::Float64}};
    CHECK_TENSOR(*call_node("MulBackward0", {g}, {true, false}, from_torch)[0], r[2]);
    CHECK_THROWS_WITH_AS(call_node("MulBackward0", {g}, {false, true}, from_torch),
                         "MulBackward0: other's grad is needed but `self` was not saved", Error);
  }
  SUBCASE("output dtype follows promotion, as in torch before validate") {
    Saved mixed = saved;
    mixed["other"] = y.to(DType::Float32);
    CHECK(call_node("MulBackward0", {g}, {true, false}, mixed)[0]->dtype() == DType::Float64);
  }
}

TEST_CASE("MmBackward0") {
  const Tensor x = random64({4, 3}, 7), w = random64({3, 2}, 8), g = random64({4, 2}, 9);
  const Saved saved = {{"mat2", w},           {"mat2_layout", Layout::Strided}, {"mat2_sym_sizes", IntList{3, 2}},
                       {"mat2_sym_strides", IntList{2, 1}}, {"self", x},        {"self_layout", Layout::Strided},
                       {"self_sym_sizes", IntList{4, 3}},   {"self_sym_strides", IntList{3, 1}}};

  SUBCASE("finite differences") {
    const Grads out = call_node("MmBackward0", {g}, {true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return mm(in[0], in[1]); };
    check_against_finite_differences(out, 0, forward, {x, w}, g);
    check_against_finite_differences(out, 1, forward, {x, w}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("MmBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 2});
    CHECK_FALSE(call_node("MmBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch, with a column-major self: the grad keeps its layout") {
    const auto r = torch_exec(R"(
x = a.t().detach().requires_grad_(); w = b.requires_grad_()
out = x.mm(w)
fn = out.grad_fn
assert fn.name() == "MmBackward0"
sizes = lambda s: torch.tensor(s, dtype=torch.int64)
saved = (fn._saved_self, fn._saved_mat2, sizes(fn._saved_self_sym_sizes), sizes(fn._saved_self_sym_strides),
         sizes(fn._saved_mat2_sym_sizes), sizes(fn._saved_mat2_sym_strides))
gx, gw = torch.autograd.grad(out, (x, w), c)
result = (*saved, gx, gw, sizes(gx.stride()))
)", {contiguous(t(x)), w, g});
    CHECK(int_list(r[3]) == IntList{1, 4});  // torch saw the transposed view's strides
    const Saved from_torch = {{"mat2", r[1]},
                              {"mat2_layout", Layout::Strided},
                              {"mat2_sym_sizes", int_list(r[4])},
                              {"mat2_sym_strides", int_list(r[5])},
                              {"self", r[0]},
                              {"self_layout", Layout::Strided},
                              {"self_sym_sizes", int_list(r[2])},
                              {"self_sym_strides", int_list(r[3])}};
    const Grads out = call_node("MmBackward0", {g}, {true, true}, from_torch);
    CHECK_TENSOR(*out[0], r[6]);
    CHECK_TENSOR(*out[1], r[7]);
    CHECK(out[0]->strides() == int_list(r[8]));  // column-major, like torch's
  }
  SUBCASE("errors") {
    Saved no_mat2 = saved;
    no_mat2["mat2"] = None{};
    CHECK_THROWS_WITH_AS(call_node("MmBackward0", {g}, {true, false}, no_mat2),
                         "MmBackward0: self's grad is needed but `mat2` was not saved", Error);
    Saved bad_sizes = saved;
    bad_sizes["self_sym_sizes"] = Scalar(4);
    CHECK_THROWS_WITH_AS(call_node("MmBackward0", {g}, {true, true}, bad_sizes),
                         "MmBackward0: saved field 'self_sym_sizes' expects SymInt[], got Scalar 4", Error);
    CHECK_THROWS_WITH_AS(call_node("MmBackward0", {random64({4, 5}, 1)}, {true, false}, saved),
                         "MmBackward0: mm: shapes [4,5] and [2,3] cannot be multiplied", Error);
  }
}

TEST_CASE("SumBackward0") {
  const Tensor x = random64({2, 3, 2}, 10), g = random64({}, 11);
  SUBCASE("finite differences") {
    const Grads out = call_node("SumBackward0", {g}, {true}, Saved{{"self_sym_sizes", IntList{2, 3, 2}}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return sum(in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("SumBackward0", {g}, {false}, Saved{{"self_sym_sizes", IntList{2}}})[0].has_value());
    CHECK_FALSE(call_node("SumBackward0", {std::nullopt}, {true}, Saved{{"self_sym_sizes", IntList{2}}})[0]);
  }
  SUBCASE("against torch, a 0-d input included") {
    for (const Shape& shape : {Shape{2, 3, 2}, Shape{}, Shape{0, 2}}) {
      CAPTURE(str(shape));
      const Tensor input = random64(shape, 12);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = x.sum()
fn = out.grad_fn
assert fn.name() == "SumBackward0"
result = (torch.tensor(fn._saved_self_sym_sizes, dtype=torch.int64), *torch.autograd.grad(out, (x,), b))
)", {input, g});
      const Grads out = call_node("SumBackward0", {g}, {true}, Saved{{"self_sym_sizes", int_list(r[0])}});
      CHECK_TENSOR(*out[0], r[1]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("SumBackward0", {g}, {true}, Saved{{"self_sym_sizes", IntList{-2}}}),
                         doctest::Contains("expand"), Error);
  }
}

TEST_CASE("ReluBackward0") {
  SUBCASE("finite differences, away from the kink") {
    const Tensor x = tensor({-1.5, -0.25, 0.5, 2.0}, DType::Float64), g = random64({4}, 13);
    const Grads out = call_node("ReluBackward0", {g}, {true}, Saved{{"result", relu(x)}});
    check_against_finite_differences(out, 0, [](const std::vector<Tensor>& in) { return relu(in[0]); }, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"result", tensor({1.0})}};
    CHECK_FALSE(call_node("ReluBackward0", {tensor({1.0})}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("ReluBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch, at the kink relu(0) and with -0.0") {
    const Tensor x = tensor({-2.0, -0.0, 0.0, 1e-300, 3.0}, DType::Float64), g = random64({5}, 14);
    const auto r = torch_exec(R"(
x = a.requires_grad_()
out = torch.relu(x)
fn = out.grad_fn
assert fn.name() == "ReluBackward0"
result = (fn._saved_result, *torch.autograd.grad(out, (x,), b))
)", {x, g});
    CHECK_TENSOR(*call_node("ReluBackward0", {g}, {true}, Saved{{"result", r[0]}})[0], r[1]);
  }
  SUBCASE("float32 stays float32") {
    const Tensor g32 = tensor({1.0, 2.0});
    CHECK(call_node("ReluBackward0", {g32}, {true}, Saved{{"result", tensor({0.0, 1.0})}})[0]->dtype() ==
          DType::Float32);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("ReluBackward0", {tensor({1.0})}, {true}, Saved{{"result", None{}}}),
                         "ReluBackward0: saved field 'result' expects Tensor, got None", Error);
  }
}

TEST_CASE("registry") {
  CHECK(find_node("NoSuchBackward0") == nullptr);
  CHECK_THROWS_WITH_AS(get_node("NoSuchBackward0"),
                       "unknown backward node 'NoSuchBackward0': refgrad has no such node (`refgrad nodes` lists them)",
                       Error);
  const auto nodes = all_nodes();
  CHECK(nodes.size() >= 5);
  std::set<std::string> list_nodes;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeSchema& schema = nodes[i]->schema;
    CAPTURE(schema.name);
    CHECK(find_node(schema.name) == nodes[i]);
    if (i > 0) CHECK(nodes[i - 1]->schema.name < schema.name);
    CHECK_FALSE(schema.inputs.empty());
    CHECK_FALSE(schema.formula.empty());
    CHECK((schema.num_grads >= 1 || schema.num_grads == kVariadic));
    if (!schema.list_length_field.empty()) {
      // A Tensor[] input is the node's only input, and its length field a ScalarType[].
      list_nodes.insert(schema.name);
      CHECK(schema.inputs.size() == 1);
      const auto field = std::find_if(schema.saved.begin(), schema.saved.end(),
                                      [&](const SavedFieldSchema& f) { return f.name == schema.list_length_field; });
      REQUIRE(field != schema.saved.end());
      CHECK(field->type == FieldType{FieldKind::DTypeList});
      CHECK(num_results(schema, 3) == 3);
      CHECK(input_of_result(schema, 2) == 0);
    } else {
      CHECK(num_results(schema, 3) == schema.inputs.size());
    }
  }
  // The differentiable Tensor[] inputs of the ops refgrad has: block_diag's, cat's and stack's `tensors`.
  CHECK(list_nodes == std::set<std::string>{"BlockDiagBackward0", "CatBackward0", "StackBackward0"});
  CHECK(type_name({FieldKind::Tensor, true}) == "Tensor?");
  CHECK(type_name({FieldKind::IntList, true}) == "int[]?");
  CHECK(type_name({FieldKind::OptionalTensorList}) == "Tensor?[]");
  CHECK(type_name({FieldKind::SizesList}) == "SymInt[][]");
  CHECK(type_name({FieldKind::TensorGeometry}) == "TensorGeometry");
  CHECK(describe(FieldValue{std::string("mean")}) == "str 'mean'");
  CHECK(describe(FieldValue{TensorGeometry{{2, 3}, {1, 2}, 4}}) == "TensorGeometry [2,3] strides [1,2] offset 4");
  CHECK(describe(FieldValue{std::vector<DType>{DType::Float32}}) == "ScalarType[] of 1");
  // apply without bind's result (CopySlices hands its wrapped node whatever it was given)
  CHECK_THROWS_WITH_AS(get_node("TBackward0").apply({random64({2, 3}, 1)}, nullptr, {true}),
                       "the node's saved fields are not bound (apply takes what bind returned)", Error);
}

// (e): the saved-field names of every node refgrad has agree with the
// installed torch's headers (its struct members, less the
// trailing underscore of SavedVariables and the bookkeeping members).
TEST_CASE("saved field names agree with torch's Functions.h") {
  // The generated nodes are in Functions.h; CopyBackwards and CopySlices in functions/tensor.h.
  std::stringstream text;
  for (const char* relative : {"generated/Functions.h", "functions/tensor.h"}) {
    const std::string path = torch_text(
        "__import__('os').path.join(__import__('os').path.dirname(torch.__file__), "
        "'include', 'torch', 'csrc', 'autograd', '" + std::string(relative) + "')");
    std::ifstream file(path);
    REQUIRE_MESSAGE(file.good(), "cannot read ", path);
    text << file.rdbuf();
  }
  const std::string header = text.str();

  // "  TYPE NAME_;" or "  TYPE NAME = VALUE;": the name, and whether it ends in '_' (a SavedVariable, or
  // bookkeeping such as `tensors_released_` and `tensors_size_`).
  const std::regex member(R"(^\s+[\w:<>, ]+?\s+(\w+?)(_?)(?: = [^;]+)?;\s*$)");
  for (const NodeDef* def : all_nodes()) {
    const std::string& name = def->schema.name;
    CAPTURE(name);
    const std::size_t at = header.find("struct TORCH_API " + name + " : public");
    REQUIRE_MESSAGE(at != std::string::npos, name, " is not a node in torch's Functions.h");
    const std::size_t members_from = header.find("apply_with_saved(", at);
    const std::size_t members_to = header.find("\n};", at);
    REQUIRE(members_from < members_to);
    std::set<std::string> torch_fields;
    std::istringstream lines(header.substr(members_from, members_to - members_from));
    std::string line;
    std::getline(lines, line);  // the apply_with_saved declaration itself
    while (std::getline(lines, line)) {
      std::smatch match;
      if (!std::regex_match(line, match, member)) continue;
      const std::string field = match[1];
      const bool underscored = match[2].length() == 1;
      auto ends_with = [&](const std::string& suffix) {
        return field.size() > suffix.size() && field.compare(field.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      if (underscored && (ends_with("_released") || ends_with("_size"))) continue;  // a list's bookkeeping
      torch_fields.insert(field);
    }
    std::set<std::string> refgrad_fields;
    for (const SavedFieldSchema& field : def->schema.saved) refgrad_fields.insert(field.name);
    CHECK(refgrad_fields == torch_fields);
  }
}

// (f): the number of incoming grads of every node with an easy forward call
// agrees with torch: torch's node has one input per differentiable forward
// output (len(grad_fn._input_metadata)) and none for a non-differentiable one
// (max.dim's indices, native_layer_norm's mean and rstd). split and unbind
// have one per output, however many the forward made (kVariadic).
TEST_CASE("num_grads agrees with torch's input metadata") {
  struct Forward {
    const char* node;    // the node torch records for the first output
    const char* python;  // the forward's outputs, from x [2, 3, 4, 4], w and b [3], q [1, 2, 3, 4]
  };
  const Forward forwards[] = {
      {"MaxBackward0", "x.max(1)"},
      {"MinBackward0", "x.min(1)"},
      {"MedianBackward1", "x.median(1)"},
      {"NanmedianBackward1", "x.nanmedian(1)"},
      {"KthvalueBackward0", "x.kthvalue(2, 1)"},
      {"MaxPool2DWithIndicesBackward0", "F.max_pool2d(x, 2, return_indices=True)"},
      {"NativeLayerNormBackward0", "torch.native_layer_norm(x, [4, 4], None, None, 1e-5)"},
      {"NativeBatchNormBackward0", "torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)"},
      {"NativeBatchNormLegitBackward0",
       "torch._native_batch_norm_legit(x, w, b, torch.zeros(3, dtype=x.dtype), torch.ones(3, dtype=x.dtype), True, "
       "0.1, 1e-5)"},
      {"NativeBatchNormLegitBackward1", "torch._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5)"},
      {"EmbeddingBagBackward0", "torch._embedding_bag(x.reshape(-1, 4), torch.tensor([0, 2, 1]), torch.tensor([0, 2]))"},
      {"CtcLossBackward0",
       "torch._ctc_loss(x[0].log_softmax(2), torch.tensor([[1], [2], [1], [3]]), [3, 3, 3, 3], [1, 1, 1, 1])"},
      {"CtcLossBackward1",
       "torch._ctc_loss(x[0].log_softmax(2), torch.tensor([[1], [2], [1], [3]]), torch.tensor([3, 3, 3, 3]), "
       "torch.tensor([1, 1, 1, 1]))"},
      {"BatchNormWithUpdateBackward0",
       "torch.ops.aten._batch_norm_with_update(x, w, b, torch.zeros(3, dtype=x.dtype), "
       "torch.ones(3, dtype=x.dtype), 0.1, 1e-5)"},
      {"NativeGroupNormBackward0", "torch.native_group_norm(x, w, b, 2, 3, 16, 1, 1e-5)"},
      {"ScaledDotProductFlashAttentionForCpuBackward0",
       "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)"},
      {"SplitBackward0", "torch.split(x, 2, dim=2)"},
      {"SplitBackward0", "torch.split(x, 1, dim=2)"},
      {"SplitWithSizesBackward0", "torch.split(x, [1, 3], dim=2)"},
      {"UnbindBackward0", "torch.unbind(x, 1)"},
      {"CatBackward0", "torch.cat([x, x, x])"},
      {"StackBackward0", "torch.stack([x, x])"},
      {"MulBackward0", "x * w.view(3, 1, 1)"},
      {"SumBackward1", "x.sum(1)"},
      {"FrexpBackward0", "torch.frexp(x)"},
  };
  for (const Forward& forward : forwards) {
    const std::string python = forward.python;
    CAPTURE(python);
    const NodeDef& def = get_node(forward.node);
    // "<node name> <torch's inputs> <forward outputs>"
    std::istringstream answer(torch_exec_text(
        "x = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)\n"
        "w, b = (torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(2))\n"
        "q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)\n"
        "outputs = " + std::string(forward.python) + "\n"
        "if isinstance(outputs, torch.Tensor): outputs = (outputs,)\n"
        "node = outputs[0].grad_fn\n"
        "result = f'{node.name()} {len(node._input_metadata)} {len(outputs)}'\n"));
    std::string torch_node;
    std::size_t torch_inputs = 0, forward_outputs = 0;
    answer >> torch_node >> torch_inputs >> forward_outputs;
    REQUIRE(torch_node == forward.node);
    if (def.schema.num_grads == kVariadic) {
      CHECK(torch_inputs == forward_outputs);
    } else {
      CHECK(def.schema.num_grads == torch_inputs);
    }
  }
}

}  // TEST_SUITE
