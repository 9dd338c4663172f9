// Node tests of the upsampling nodes (src/nodes/upsample.cpp).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// torch code that leaves, after the forward `out` and its node `fn`, a seeded grad `g` of out's shape.
constexpr const char* kSeededGrad =
    "\ng = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(7))\n"
    "T = lambda s: torch.tensor(list(s), dtype=torch.int64)\n";

std::optional<double> optional_double(const Tensor& is_none, const Tensor& value) {
  if (is_none.item<bool>()) return std::nullopt;
  return value.item<double>();
}

// A shape as refgrad's messages print it: [2,2,5].
std::string text_of(const Shape& shape) {
  std::ostringstream out;
  out << shape_text(shape);
  return out.str();
}

FieldValue optional_field(std::optional<double> value) { return value ? FieldValue(*value) : FieldValue(None{}); }

// The scale fields of an upsampling node with `spatial_dims` spatial dims, as torch names them.
std::vector<std::string> scale_fields(std::size_t spatial_dims) {
  if (spatial_dims == 1) return {"scales"};
  if (spatial_dims == 2) return {"scales_h", "scales_w"};
  return {"scales_d", "scales_h", "scales_w"};
}

// One forward torch runs on x (float64 values of `input` sizes, cast to the dtype under test), the node
// it makes, and its ATen op (called by the test on basis vectors, for the forward of the finite
// differences).
struct Case {
  const char* node;
  const char* aten_op;
  Shape input;
  std::string forward;
};

// Runs c's forward in torch in `dtype`, feeds the node the grad_fn's _saved_* values and torch's seeded
// grad, and compares with torch's grad of x; in float64 also with finite differences of the forward
//   out = A_k x along each spatial dim k,
// where A_k [output, input] is what torch's own forward op gives for the basis vectors along dim k
// (the other dims of size 2 -> 2, which every mode copies), so the forward is not the node's. (Not
// 1 -> 1: torch's antialiased forward repeats its first output row for a [B, 1, H, 1] input.)
void check_case(const Case& c, DType dtype) {
  const std::size_t n = c.input.size() - 2;
  const std::string dtype_text = dtype == DType::Float64   ? "float64"
                                 : dtype == DType::Float32 ? "float32"
                                 : dtype == DType::Float16 ? "float16"
                                                           : "bfloat16";
  CAPTURE(c.forward);
  CAPTURE(dtype_text);
  const Tensor x = random64(c.input, 500 + c.input.size());
  const auto r = torch_exec(R"(
x = a.to(torch.)" + dtype_text + R"().requires_grad_()
out = )" + c.forward + R"(
fn = out.grad_fn
assert fn.name() == ")" + c.node + R"(", fn.name()
)" + std::string(kSeededGrad) + R"(
n = x.dim() - 2
names = {1: ['scales'], 2: ['scales_h', 'scales_w'], 3: ['scales_d', 'scales_h', 'scales_w']}[n]
scales = [getattr(fn, '_saved_' + s) for s in names]
ac = getattr(fn, '_saved_align_corners', None)
osz, isz = list(fn._saved_output_size), list(fn._saved_self_sym_sizes)
def weights(k):
    e = torch.eye(isz[2 + k], dtype=torch.float64)
    e = e.reshape(isz[2 + k], 1, *[isz[2 + k] if j == k else 1 for j in range(n)])
    e = e.expand(isz[2 + k], 1, *[isz[2 + k] if j == k else 2 for j in range(n)]).contiguous()
    size = [osz[k] if j == k else 2 for j in range(n)]
    one_scale = [scales[j] if j == k else None for j in range(n)]
    y = )" + c.aten_op + R"((e, size, *([ac] if ac is not None else []), *one_scale)
    return y[(slice(None), 0, *[slice(None) if j == k else 0 for j in range(n)])].T.contiguous()
result = (T(osz), T(isz), torch.tensor([s is None for s in scales]),
          torch.tensor([s or 0.0 for s in scales], dtype=torch.float64), torch.tensor(bool(ac)),
          torch.tensor(ac is not None), g, torch.autograd.grad(out, (x,), g)[0], *[weights(k) for k in range(n)])
)", {x});
  Saved saved = {{"output_size", int_list(r[0])}, {"self_sym_sizes", int_list(r[1])}};
  const std::vector<std::string> fields = scale_fields(n);
  for (std::size_t k = 0; k < n; ++k)
    saved[fields[k]] = optional_field(optional_double(select(r[2], 0, k), select(r[3], 0, k)));
  if (r[5].item<bool>()) saved["align_corners"] = r[4].item<bool>();
  const Grads out = call_node(c.node, {r[6]}, {true}, saved);
  REQUIRE(out[0].has_value());
  CHECK(out[0]->dtype() == dtype);
  const Tensor& expected = r[7];
  const double scale = max(abs(to(expected, DType::Float64))).item<double>();
  const double rtol = dtype == DType::Float16    ? 2e-3
                      : dtype == DType::BFloat16 ? 1.6e-2
                      : dtype == DType::Float32  ? 1e-5
                                                 : 1e-7;
  CHECK_TENSOR(*out[0], expected, rtol, 1e-5 * scale);
  if (dtype != DType::Float64) return;
  std::vector<Tensor> weights(r.begin() + 8, r.end());
  auto forward = [&](const std::vector<Tensor>& in) {
    Tensor y = in[0];
    for (std::size_t k = 0; k < n; ++k) {
      const std::int64_t dim = 2 + static_cast<std::int64_t>(k);
      y = transpose(matmul(transpose(y, dim, -1), t(weights[k])), dim, -1);
    }
    return y;
  };
  check_against_finite_differences(out, 0, forward, {x}, r[6]);
}

const std::vector<DType> kFloatDTypes = {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16};

void check_cases(const std::vector<Case>& cases, const std::vector<DType>& dtypes = kFloatDTypes) {
  for (const Case& c : cases)
    for (DType dtype : dtypes) check_case(c, dtype);
}

// The need mask, an undefined grad, and the errors every upsampling node shares: a grad of the wrong
// shape, sizes with the wrong number of entries, an empty spatial size.
void check_common(const char* node, const Saved& saved, const Shape& grad_sizes) {
  CHECK_FALSE(call_node(node, {random64(grad_sizes, 1)}, {false}, saved)[0].has_value());
  CHECK_FALSE(call_node(node, {std::nullopt}, {true}, saved)[0].has_value());
  Shape wrong = grad_sizes;
  wrong.back() += 1;
  CHECK_THROWS_WITH_AS(call_node(node, {random64(wrong, 1)}, {true}, saved),
                       doctest::Contains((std::string(node) + ": grad " + text_of(wrong) + " does not fit").c_str()),
                       Error);
  Saved short_sizes = saved;
  IntList sizes = std::get<IntList>(saved.at("self_sym_sizes"));
  sizes.pop_back();
  short_sizes["self_sym_sizes"] = sizes;
  CHECK_THROWS_WITH_AS(call_node(node, {random64(grad_sizes, 1)}, {true}, short_sizes),
                       doctest::Contains((std::string(node) + ": self sizes " + text_of(sizes)).c_str()), Error);
  Saved empty = saved;
  sizes = std::get<IntList>(saved.at("self_sym_sizes"));
  sizes.back() = 0;
  empty["self_sym_sizes"] = sizes;
  CHECK_THROWS_WITH_AS(call_node(node, {random64(grad_sizes, 1)}, {true}, empty),
                       doctest::Contains("input and output sizes should be greater than 0"), Error);
}

}  // namespace

TEST_SUITE("nodes") {

// ------------------------------------------------------------------ upsampling ---

TEST_CASE("UpsampleNearest2DBackward0") {
  const char* op = "torch.ops.aten.upsample_nearest2d";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{"UpsampleNearest2DBackward0", op, {1, 2, 3, 4}, "F.interpolate(x, scale_factor=(2.5, 1.7))"}});
  }
  const Tensor x = random64({2, 2, 4, 3}, 90);
  SUBCASE("finite differences and torch: exact doubling, a size, a fractional scale") {
    for (const std::string& args : {std::string("scale_factor=2"), std::string("size=(5, 7)"),
                                    std::string("scale_factor=(2.5, 1.7)")}) {
      CAPTURE(args);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = F.interpolate(x, mode='nearest', )" + args + R"()
fn = out.grad_fn
assert fn.name() == "UpsampleNearest2DBackward0"
)" + std::string(kSeededGrad) + R"(
sh, sw = fn._saved_scales_h, fn._saved_scales_w
result = (T(fn._saved_output_size), T(fn._saved_self_sym_sizes), sh is None, sh or 0.0, sw is None, sw or 0.0,
          g, *torch.autograd.grad(out, (x,), g))
)", {x});
      const IntList output_size = int_list(r[0]);
      const std::optional<double> scales_h = optional_double(r[2], r[3]), scales_w = optional_double(r[4], r[5]);
      const Saved saved = {{"output_size", output_size},
                           {"scales_h", scales_h ? FieldValue(*scales_h) : FieldValue(None{})},
                           {"scales_w", scales_w ? FieldValue(*scales_w) : FieldValue(None{})},
                           {"self_sym_sizes", int_list(r[1])}};
      const Grads out = call_node("UpsampleNearest2DBackward0", {r[6]}, {true}, saved);
      CHECK_TENSOR(*out[0], r[7]);
      auto forward = [&](const std::vector<Tensor>& in) {
        return upsample_nearest2d(in[0], output_size, scales_h, scales_w);
      };
      check_against_finite_differences(out, 0, forward, {x}, r[6]);
    }
  }
  const Saved saved = {{"output_size", IntList{8, 6}}, {"scales_h", None{}}, {"scales_w", None{}},
                       {"self_sym_sizes", IntList{2, 2, 4, 3}}};
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("UpsampleNearest2DBackward0", {random64({2, 2, 8, 6}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("UpsampleNearest2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    Saved empty_input = saved;
    empty_input["self_sym_sizes"] = IntList{2, 2, 0, 3};
    CHECK_THROWS_WITH_AS(call_node("UpsampleNearest2DBackward0", {random64({2, 2, 8, 6}, 1)}, {true}, empty_input),
                         doctest::Contains("self sizes [2,2,0,3]"), Error);
    CHECK_THROWS_WITH_AS(call_node("UpsampleNearest2DBackward0", {random64({2, 2, 8, 5}, 1)}, {true}, saved),
                         "UpsampleNearest2DBackward0: grad [2,2,8,5] does not fit output_size [8,6] and self sizes "
                         "[2,2,4,3]",
                         Error);
    Saved tiny_scale = saved;  // 1 / scales_h is infinite in float: ATen's index would be undefined
    tiny_scale["output_size"] = IntList{5, 6}, tiny_scale["scales_h"] = 1e-300;
    CHECK_THROWS_WITH_AS(call_node("UpsampleNearest2DBackward0", {random64({2, 2, 5, 6}, 1)}, {true}, tiny_scale),
                         "UpsampleNearest2DBackward0: scales_h 1e-300 is too small: its inverse does not fit a float",
                         Error);
  }
  SUBCASE("against torch: an empty batch") {
    Saved empty_batch = saved;
    empty_batch["self_sym_sizes"] = IntList{0, 2, 4, 3};
    const Tensor grad = zeros({0, 2, 8, 6}, DType::Float64);
    const Tensor expected =
        torch_eval1("torch.ops.aten.upsample_nearest2d_backward(a, [8, 6], [0, 2, 4, 3])", {grad});
    CHECK_TENSOR(*call_node("UpsampleNearest2DBackward0", {grad}, {true}, empty_batch)[0], expected);
  }
}

TEST_CASE("UpsampleBilinear2DBackward0") {
  const char* op = "torch.ops.aten.upsample_bilinear2d";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{"UpsampleBilinear2DBackward0", op, {1, 2, 3, 4},
                  "F.interpolate(x, scale_factor=(2.5, 1.7), mode='bilinear')"},
                 {"UpsampleBilinear2DBackward0", op, {1, 2, 3, 4},
                  "F.interpolate(x, size=(5, 2), mode='bilinear', align_corners=True)"}});
  }
  const Tensor x = random64({2, 2, 4, 3}, 100);
  SUBCASE("finite differences and torch: align_corners both ways, a scale, downsampling") {
    for (const std::string& args :
         {std::string("size=(7, 5), align_corners=False"), std::string("size=(7, 5), align_corners=True"),
          std::string("scale_factor=(1.7, 2.5)"), std::string("size=(3, 2)"),
          std::string("size=(1, 4), align_corners=True")}) {
      CAPTURE(args);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = F.interpolate(x, mode='bilinear', )" + args + R"()
fn = out.grad_fn
assert fn.name() == "UpsampleBilinear2DBackward0"
)" + std::string(kSeededGrad) + R"(
sh, sw = fn._saved_scales_h, fn._saved_scales_w
result = (T(fn._saved_output_size), T(fn._saved_self_sym_sizes), sh is None, sh or 0.0, sw is None, sw or 0.0,
          fn._saved_align_corners, g, *torch.autograd.grad(out, (x,), g))
)", {x});
      const IntList output_size = int_list(r[0]);
      const std::optional<double> scales_h = optional_double(r[2], r[3]), scales_w = optional_double(r[4], r[5]);
      const bool align_corners = r[6].item<bool>();
      const Saved saved = {{"align_corners", align_corners},
                           {"output_size", output_size},
                           {"scales_h", scales_h ? FieldValue(*scales_h) : FieldValue(None{})},
                           {"scales_w", scales_w ? FieldValue(*scales_w) : FieldValue(None{})},
                           {"self_sym_sizes", int_list(r[1])}};
      const Grads out = call_node("UpsampleBilinear2DBackward0", {r[7]}, {true}, saved);
      CHECK_TENSOR(*out[0], r[8]);
      auto forward = [&](const std::vector<Tensor>& in) {
        return upsample_bilinear2d(in[0], output_size, align_corners, scales_h, scales_w);
      };
      check_against_finite_differences(out, 0, forward, {x}, r[7]);
    }
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{8, 6}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{2, 2, 4, 3}}};
  SUBCASE("need mask, undefined grad, float32") {
    CHECK_FALSE(call_node("UpsampleBilinear2DBackward0", {random64({2, 2, 8, 6}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("UpsampleBilinear2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK(call_node("UpsampleBilinear2DBackward0", {random64({2, 2, 8, 6}, 1).to(DType::Float32)}, {true}, saved)[0]
              ->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("UpsampleBilinear2DBackward0", {random64({2, 8, 6}, 1)}, {true}, saved),
                         "UpsampleBilinear2DBackward0: grad [2,8,6] does not fit output_size [8,6] and self sizes "
                         "[2,2,4,3]",
                         Error);
    Saved tiny_scale = saved;  // 1 / scales_h is infinite: the source index would be written out of bounds
    tiny_scale["scales_h"] = 5e-324;
    CHECK_THROWS_WITH_AS(call_node("UpsampleBilinear2DBackward0", {random64({2, 2, 8, 6}, 1)}, {true}, tiny_scale),
                         "UpsampleBilinear2DBackward0: scales_h 4.94066e-324 is too small: its inverse does not fit a "
                         "double",
                         Error);
  }
  SUBCASE("against torch: equal sizes copy whatever the scale; a large scale clamps to the last row") {
    const Tensor grad = arange(Scalar(6), DType::Float64);
    for (const auto& [sizes, scale] : {std::pair{IntList{1, 1, 3, 2}, 0.5}, std::pair{IntList{1, 1, 2, 2}, 1e-5}}) {
      CAPTURE(scale);
      const Saved scaled = {{"align_corners", false}, {"output_size", IntList{3, 2}}, {"scales_h", scale},
                            {"scales_w", 0.5}, {"self_sym_sizes", sizes}};
      const Tensor g = reshape(grad, {1, 1, 3, 2});
      const Tensor expected = torch_eval1(
          "torch.ops.aten.upsample_bilinear2d_backward(a, [3, 2], b.tolist(), False, c.item(), 0.5)",
          {g, from_vector(sizes, {4}), tensor(scale, DType::Float64)});
      CHECK_TENSOR(*call_node("UpsampleBilinear2DBackward0", {g}, {true}, scaled)[0], expected);
    }
  }
}

// ------------------------------------------------------------------- nearest ---

TEST_CASE("UpsampleNearest1DBackward0") {
  const char* op = "torch.ops.aten.upsample_nearest1d";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{"UpsampleNearest1DBackward0", op, {2, 2, 5}, "F.interpolate(x, scale_factor=2)"},
                 {"UpsampleNearest1DBackward0", op, {2, 2, 5}, "F.interpolate(x, size=7)"},
                 {"UpsampleNearest1DBackward0", op, {2, 2, 5}, "F.interpolate(x, scale_factor=1.7)"},
                 {"UpsampleNearest1DBackward0", op, {2, 2, 5}, "F.interpolate(x, size=3)"}});
  }
  const Saved saved = {{"output_size", IntList{7}}, {"scales", None{}}, {"self_sym_sizes", IntList{2, 2, 5}}};
  SUBCASE("need mask, undefined grad, errors") { check_common("UpsampleNearest1DBackward0", saved, {2, 2, 7}); }
  SUBCASE("against torch: equal sizes copy whatever the scale; an empty batch") {
    Saved scaled = saved;
    scaled["output_size"] = IntList{5}, scaled["scales"] = 0.5;
    const Tensor g = random64({2, 2, 5}, 3);
    CHECK_TENSOR(*call_node("UpsampleNearest1DBackward0", {g}, {true}, scaled)[0], g);
    Saved empty_batch = saved;
    empty_batch["self_sym_sizes"] = IntList{0, 2, 5};
    const Tensor grad = zeros({0, 2, 7}, DType::Float64);
    CHECK_TENSOR(*call_node("UpsampleNearest1DBackward0", {grad}, {true}, empty_batch)[0],
                 torch_eval1("torch.ops.aten.upsample_nearest1d_backward(a, [7], [0, 2, 5])", {grad}));
  }
}

TEST_CASE("UpsampleNearest3DBackward0") {
  const char* op = "torch.ops.aten.upsample_nearest3d";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{"UpsampleNearest3DBackward0", op, {1, 2, 2, 3, 2},
                  "F.interpolate(x, scale_factor=2, mode='nearest')"},
                 {"UpsampleNearest3DBackward0", op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(3, 4, 5))"},
                 {"UpsampleNearest3DBackward0", op, {1, 2, 2, 3, 2}, "F.interpolate(x, scale_factor=(1.5, 2.5, 1.7))"},
                 {"UpsampleNearest3DBackward0", op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(1, 2, 2))"}});
  }
  const Saved saved = {{"output_size", IntList{3, 4, 5}}, {"scales_d", None{}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{1, 2, 2, 3, 2}}};
  SUBCASE("need mask, undefined grad, errors") {
    check_common("UpsampleNearest3DBackward0", saved, {1, 2, 3, 4, 5});
    Saved tiny_scale = saved;  // 1 / scales_w is infinite in float: ATen's index would be undefined
    tiny_scale["scales_w"] = 1e-300;
    CHECK_THROWS_WITH_AS(call_node("UpsampleNearest3DBackward0", {random64({1, 2, 3, 4, 5}, 1)}, {true}, tiny_scale),
                         "UpsampleNearest3DBackward0: scales_w 1e-300 is too small: its inverse does not fit a float",
                         Error);
  }
}

TEST_CASE("UpsampleNearestExact1DBackward0") {
  const char* op = "torch.ops.aten._upsample_nearest_exact1d";
  const char* node = "UpsampleNearestExact1DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {2, 2, 5}, "F.interpolate(x, scale_factor=2, mode='nearest-exact')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, size=7, mode='nearest-exact')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, scale_factor=1.7, mode='nearest-exact')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, size=3, mode='nearest-exact')"}});
  }
  const Saved saved = {{"output_size", IntList{7}}, {"scales", None{}}, {"self_sym_sizes", IntList{2, 2, 5}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {2, 2, 7}); }
  SUBCASE("against torch: equal sizes with a scale do not copy (no shortcut, unlike nearest)") {
    Saved scaled = saved;
    scaled["output_size"] = IntList{5}, scaled["scales"] = 0.5;
    const Tensor g = random64({2, 2, 5}, 3);
    const Tensor expected =
        torch_eval1("torch.ops.aten._upsample_nearest_exact1d_backward(a, [5], [2, 2, 5], 0.5)", {g});
    CHECK_TENSOR(*call_node(node, {g}, {true}, scaled)[0], expected);
    CHECK(max(abs(sub(expected, g))).item<double>() > 0.1);  // the case is not a copy
  }
}

TEST_CASE("UpsampleNearestExact2DBackward0") {
  const char* op = "torch.ops.aten._upsample_nearest_exact2d";
  const char* node = "UpsampleNearestExact2DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {1, 2, 3, 4}, "F.interpolate(x, size=(5, 7), mode='nearest-exact')"},
                 {node, op, {1, 2, 3, 4}, "F.interpolate(x, scale_factor=(2.5, 1.7), mode='nearest-exact')"},
                 {node, op, {1, 2, 3, 4}, "F.interpolate(x, size=(2, 3), mode='nearest-exact')"}});
  }
  const Saved saved = {{"output_size", IntList{5, 7}}, {"scales_h", None{}}, {"scales_w", None{}},
                       {"self_sym_sizes", IntList{1, 2, 3, 4}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {1, 2, 5, 7}); }
}

TEST_CASE("UpsampleNearestExact3DBackward0") {
  const char* op = "torch.ops.aten._upsample_nearest_exact3d";
  const char* node = "UpsampleNearestExact3DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(3, 4, 5), mode='nearest-exact')"},
                 {node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, scale_factor=(1.5, 2.5, 1.7), mode='nearest-exact')"},
                 {node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(1, 2, 1), mode='nearest-exact')"}});
  }
  const Saved saved = {{"output_size", IntList{3, 4, 5}}, {"scales_d", None{}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{1, 2, 2, 3, 2}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {1, 2, 3, 4, 5}); }
}


// -------------------------------------------------------------- interpolating ---

TEST_CASE("UpsampleLinear1DBackward0") {
  const char* op = "torch.ops.aten.upsample_linear1d";
  const char* node = "UpsampleLinear1DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {2, 2, 5}, "F.interpolate(x, size=7, mode='linear')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, size=7, mode='linear', align_corners=True)"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, scale_factor=1.7, mode='linear')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, size=3, mode='linear')"},
                 {node, op, {2, 2, 5}, "F.interpolate(x, size=1, mode='linear', align_corners=True)"}});
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{7}}, {"scales", None{}},
                       {"self_sym_sizes", IntList{2, 2, 5}}};
  SUBCASE("need mask, undefined grad, errors") {
    check_common(node, saved, {2, 2, 7});
    Saved tiny_scale = saved;  // 1 / scales is infinite: the source index would be written out of bounds
    tiny_scale["scales"] = 5e-324;
    CHECK_THROWS_WITH_AS(call_node(node, {random64({2, 2, 7}, 1)}, {true}, tiny_scale),
                         "UpsampleLinear1DBackward0: scales 4.94066e-324 is too small: its inverse does not fit a "
                         "double",
                         Error);
  }
}


TEST_CASE("UpsampleTrilinear3DBackward0") {
  const char* op = "torch.ops.aten.upsample_trilinear3d";
  const char* node = "UpsampleTrilinear3DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(3, 4, 5), mode='trilinear')"},
                 {node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, size=(3, 4, 5), mode='trilinear', align_corners=True)"},
                 {node, op, {1, 2, 2, 3, 2}, "F.interpolate(x, scale_factor=(1.5, 2.5, 1.7), mode='trilinear')"},
                 {node, op, {1, 2, 2, 3, 2},
                  "F.interpolate(x, size=(1, 2, 1), mode='trilinear', align_corners=True)"}});
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{3, 4, 5}}, {"scales_d", None{}},
                       {"scales_h", None{}}, {"scales_w", None{}}, {"self_sym_sizes", IntList{1, 2, 2, 3, 2}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {1, 2, 3, 4, 5}); }
}

TEST_CASE("UpsampleBicubic2DBackward0") {
  const char* op = "torch.ops.aten.upsample_bicubic2d";
  const char* node = "UpsampleBicubic2DBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(5, 7), mode='bicubic')"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(5, 7), mode='bicubic', align_corners=True)"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, scale_factor=(2.5, 1.7), mode='bicubic')"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(2, 3), mode='bicubic')"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(1, 6), mode='bicubic', align_corners=True)"}});
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{5, 7}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{2, 2, 3, 4}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {2, 2, 5, 7}); }
  SUBCASE("against torch: all sizes equal copy whatever the scales; one equal size with a scale does not") {
    const Tensor g = random64({2, 2, 3, 4}, 4), g2 = random64({2, 2, 3, 6}, 5);
    Saved same = saved;
    same["output_size"] = IntList{3, 4}, same["scales_h"] = 0.5, same["scales_w"] = 3.0;
    CHECK_TENSOR(*call_node(node, {g}, {true}, same)[0], g);
    Saved one_same = saved;
    one_same["output_size"] = IntList{3, 6}, one_same["scales_h"] = 0.5;
    const Tensor expected =
        torch_eval1("torch.ops.aten.upsample_bicubic2d_backward(a, [3, 6], [2, 2, 3, 4], False, 0.5, None)", {g2});
    CHECK_TENSOR(*call_node(node, {g2}, {true}, one_same)[0], expected);
  }
}

TEST_CASE("UpsampleBilinear2DAaBackward0") {
  const char* op = "torch.ops.aten._upsample_bilinear2d_aa";
  const char* node = "UpsampleBilinear2DAaBackward0";
  // torch's antialiased kernels have float32 and float64 only.
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {2, 2, 6, 7}, "F.interpolate(x, size=(2, 3), mode='bilinear', antialias=True)"},
                 {node, op, {2, 2, 6, 7}, "F.interpolate(x, size=(4, 9), mode='bilinear', antialias=True)"},
                 {node, op, {2, 2, 6, 7}, "F.interpolate(x, scale_factor=(0.4, 0.6), mode='bilinear', antialias=True)"},
                 {node, op, {2, 2, 6, 7},
                  "F.interpolate(x, size=(3, 4), mode='bilinear', antialias=True, align_corners=True)"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(7, 5), mode='bilinear', antialias=True)"}},
                {DType::Float64, DType::Float32});
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{2, 3}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{2, 2, 6, 7}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {2, 2, 2, 3}); }
}

TEST_CASE("UpsampleBicubic2DAaBackward0") {
  const char* op = "torch.ops.aten._upsample_bicubic2d_aa";
  const char* node = "UpsampleBicubic2DAaBackward0";
  SUBCASE("finite differences and torch, every dtype torch has") {
    check_cases({{node, op, {2, 2, 6, 7}, "F.interpolate(x, size=(2, 3), mode='bicubic', antialias=True)"},
                 {node, op, {2, 2, 6, 7}, "F.interpolate(x, size=(4, 9), mode='bicubic', antialias=True)"},
                 {node, op, {2, 2, 6, 7}, "F.interpolate(x, scale_factor=(0.4, 0.6), mode='bicubic', antialias=True)"},
                 {node, op, {2, 2, 6, 7},
                  "F.interpolate(x, size=(3, 4), mode='bicubic', antialias=True, align_corners=True)"},
                 {node, op, {2, 2, 3, 4}, "F.interpolate(x, size=(7, 5), mode='bicubic', antialias=True)"}},
                {DType::Float64, DType::Float32});
  }
  const Saved saved = {{"align_corners", false}, {"output_size", IntList{2, 3}}, {"scales_h", None{}},
                       {"scales_w", None{}}, {"self_sym_sizes", IntList{2, 2, 6, 7}}};
  SUBCASE("need mask, undefined grad, errors") { check_common(node, saved, {2, 2, 2, 3}); }
}

}  // TEST_SUITE
