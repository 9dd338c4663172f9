// Node tests of reflection and replication padding (src/nodes/padding.cpp).
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

const Grads kNoGrad = {std::nullopt};

// The pad forwards with L0 primitives, one padded dim at a time (the last first), written differently
// from the node's index map: reflection cats the mirrored edges (without the edge element), replication
// cats the edge element expanded; a negative pad narrows. Checked against torch's F.pad below.
Tensor pad_one_dim(const Tensor& x, std::int64_t dim, std::int64_t before, std::int64_t after, bool reflect) {
  Tensor y = x;
  if (before < 0) y = narrow(y, dim, -before, y.size(dim) + before);
  if (after < 0) y = narrow(y, dim, 0, y.size(dim) + after);
  const std::int64_t n = x.size(dim);
  auto edge = [&](std::int64_t start, std::int64_t count) {
    if (reflect) return flip(narrow(x, dim, start, count), {dim});
    Shape sizes = x.sizes();
    sizes[static_cast<std::size_t>(dim)] = count;
    return expand(narrow(x, dim, start == 0 ? 0 : n - 1, 1), sizes);
  };
  TensorList parts;
  if (before > 0) parts.push_back(edge(reflect ? 1 : 0, before));
  parts.push_back(y);
  if (after > 0) parts.push_back(edge(reflect ? n - 1 - after : n - 1, after));
  return cat(parts, dim);
}

Tensor pad_reference(const Tensor& x, const IntList& padding, bool reflect) {
  Tensor y = x;
  for (std::size_t k = 0; 2 * k < padding.size(); ++k)
    y = pad_one_dim(y, x.dim() - 1 - static_cast<std::int64_t>(k), padding[2 * k], padding[2 * k + 1], reflect);
  return y;
}

std::string int_list_text(const IntList& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// Tolerances against torch: ATen's float16/bfloat16 kernel rounds at each addition, refgrad once, so
// those compare with torch's float64 grad rounded once.
double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32:
    case DType::ComplexFloat: return 1e-5;
    default: return 1e-7;
  }
}

struct PadCase {
  IntList padding;
  Shape batched;  // self's shape with a batch dim; the unbatched case drops it
};

// One node: finite differences of the reference forward (checked against torch's), then torch's own
// grad_fn, fed its _saved_padding and _saved_self, in every dtype torch's CPU kernel has, batched and
// unbatched.
void check_pad_node(const char* node, const char* mode, bool reflect, const std::vector<PadCase>& cases) {
  std::uint64_t seed = 400;
  for (const PadCase& c : cases) {
    const std::string forward = std::string("F.pad(x, ") + int_list_text(c.padding) + ", mode='" + mode + "')";
    CAPTURE(forward);
    const Tensor x = random64(c.batched, ++seed);
    SUBCASE("finite differences, with the reference forward checked against torch's") {
      auto reference = [&](const std::vector<Tensor>& in) { return pad_reference(in[0], c.padding, reflect); };
      const Tensor padded = reference({x});
      CHECK_TENSOR(padded, torch_eval1("(lambda x: " + forward + ")(a)", {x}), 0, 0);
      const Tensor g = random64(padded.sizes(), ++seed);
      check_against_finite_differences(call_node(node, {g}, {true}, Saved{{"padding", c.padding}, {"self", x}}), 0,
                                       reference, {x}, g);
    }
    SUBCASE("against torch") {
      const Tensor imaginary = random64(c.batched, ++seed);
      for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16, DType::ComplexDouble,
                                DType::ComplexFloat}) {
        const Tensor value = is_complex(dtype) ? complex(x, imaginary).to(dtype) : x.to(dtype);
        for (const Tensor& input : {value, select(value, 0, 1)}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(input.dim());
          const auto r = torch_exec(R"(
x = a.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == ")" + node + R"(", fn.name()
g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
if out.dtype.is_complex: g = torch.complex(g, torch.randn(out.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64))
g = g.to(out.dtype)
# torch exposes a negative saved pad as its unsigned 64-bit value (-2 reads 2**64 - 2): wrapped back.
padding = [p - 2**64 if p >= 2**63 else p for p in fn._saved_padding]
result = (fn._saved_self, torch.tensor(padding, dtype=torch.int64), g, *torch.autograd.grad(out, (x,), g))
x = a.detach().to(torch.complex128 if a.dtype.is_complex else torch.float64).requires_grad_()
result = (*result, torch.autograd.grad()" + forward + R"(, (x,), g.to(x.dtype))[0])
)",
                                    {input});
          const Grads out = call_node(node, {r[2]}, {true}, Saved{{"padding", int_list(r[1])}, {"self", r[0]}});
          CHECK(out[0]->dtype() == dtype);
          const bool storage_format = dtype == DType::Float16 || dtype == DType::BFloat16;
          CHECK_TENSOR(*out[0], storage_format ? r[4].to(dtype) : r[3], rtol_of(dtype), rtol_of(dtype) * 1e-2);
        }
      }
    }
  }
}

// The need mask, an undefined grad, an empty batch and the errors, on self [2, 3, 4, 5, 6] cut down to
// the node's dims.
void check_pad_edges(const char* node, std::int64_t spatial_dims, bool reflect) {
  const Shape all_sizes = {2, 3, 4, 5, 6};
  const Shape self_sizes(all_sizes.begin(), all_sizes.begin() + spatial_dims + 2);
  const Tensor x = random64(self_sizes, 450);
  const IntList padding(static_cast<std::size_t>(2 * spatial_dims), 1);
  Shape padded = self_sizes;
  for (std::int64_t k = 0; k < spatial_dims; ++k) padded[padded.size() - 1 - static_cast<std::size_t>(k)] += 2;
  const Tensor g = random64(padded, 451);
  const Saved saved = {{"padding", padding}, {"self", x}};
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node(node, {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node(node, kNoGrad, {true}, saved)[0].has_value());
  }
  SUBCASE("an empty batch: zeros of self's shape") {
    Shape empty_self = self_sizes, empty_grad = padded;
    empty_self[0] = empty_grad[0] = 0;
    const Tensor grad_self =
        *call_node(node, {zeros(empty_grad, DType::Float64)}, {true}, Saved{{"padding", padding},
                                                                             {"self", zeros(empty_self, DType::Float64)}})[0];
    CHECK(grad_self.sizes() == empty_self);
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node(node, {x}, {true}, saved),
                         (std::string(node) + ": grad " + str(x.sizes()) + " is not the padded shape " +
                          str(padded) + " of self " + str(x.sizes()) + " with padding " +
                          str(padding))
                             .c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, Saved{{"padding", IntList{1, 1, 1}}, {"self", x}}),
                         (std::string(node) + ": padding must have " + std::to_string(2 * spatial_dims) +
                          " entries, got padding=[1,1,1]")
                             .c_str(),
                         Error);
    const Tensor flat = random64({6}, 452);
    CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, Saved{{"padding", padding}, {"self", flat}}),
                         (std::string(node) + ": self must have " + std::to_string(spatial_dims + 1) + " or " +
                          std::to_string(spatial_dims + 2) + " dims (an optional batch, channels, " +
                          std::to_string(spatial_dims) + " padded) with non-empty non-batch dims, got [6]")
                             .c_str(),
                         Error);
    if (reflect) {
      IntList too_wide = padding;
      too_wide[1] = self_sizes.back();
      CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, Saved{{"padding", too_wide}, {"self", x}}),
                           (std::string(node) + ": padding (1, " + std::to_string(self_sizes.back()) + ") of dim " +
                            std::to_string(self_sizes.size() - 1) + " must be less than its size in self " +
                            str(self_sizes))
                               .c_str(),
                           Error);
    } else {
      IntList crop_all = padding;  // the last dim cropped by one more than its size
      crop_all[0] = -self_sizes.back();
      crop_all[1] = -1;
      CHECK_THROWS_WITH_AS(call_node(node, {g}, {true}, Saved{{"padding", crop_all}, {"self", x}}),
                           (std::string(node) + ": padding " + str(crop_all) + " leaves dim " +
                            std::to_string(self_sizes.size() - 1) + " of self " + str(self_sizes) +
                            " with -1 elements")
                               .c_str(),
                           Error);
    }
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("ReflectionPad1DBackward0") {
  // Pads up to size - 1 reach most elements twice.
  check_pad_node("ReflectionPad1DBackward0", "reflect", true,
                 {{{2, 3}, {2, 3, 5}}, {{4, 4}, {2, 2, 5}}, {{0, 1}, {2, 1, 2}}});
  check_pad_edges("ReflectionPad1DBackward0", 1, true);
}

TEST_CASE("ReflectionPad2DBackward0") {
  check_pad_node("ReflectionPad2DBackward0", "reflect", true,
                 {{{1, 2, 2, 1}, {2, 2, 3, 4}}, {{3, 3, 0, 2}, {2, 1, 3, 4}}});
  check_pad_edges("ReflectionPad2DBackward0", 2, true);
}

TEST_CASE("ReflectionPad3DBackward0") {
  check_pad_node("ReflectionPad3DBackward0", "reflect", true,
                 {{{1, 2, 0, 1, 2, 1}, {2, 2, 3, 2, 4}}, {{2, 2, 1, 1, 1, 0}, {2, 1, 2, 2, 3}}});
  check_pad_edges("ReflectionPad3DBackward0", 3, true);
}

TEST_CASE("ReplicationPad1DBackward0") {
  // Pads longer than the dim, and negative ones (F.pad's replicate with a crop).
  check_pad_node("ReplicationPad1DBackward0", "replicate", false,
                 {{{2, 3}, {2, 3, 5}}, {{7, 1}, {2, 2, 3}}, {{-2, 3}, {2, 2, 5}}, {{1, -3}, {2, 1, 4}}});
  check_pad_edges("ReplicationPad1DBackward0", 1, false);
}

TEST_CASE("ReplicationPad2DBackward0") {
  check_pad_node("ReplicationPad2DBackward0", "replicate", false,
                 {{{1, 2, 4, 1}, {2, 2, 3, 4}}, {{-1, 2, 2, -2}, {2, 1, 3, 4}}});
  check_pad_edges("ReplicationPad2DBackward0", 2, false);
}

TEST_CASE("ReplicationPad3DBackward0") {
  check_pad_node("ReplicationPad3DBackward0", "replicate", false,
                 {{{1, 2, 0, 3, 2, 1}, {2, 2, 3, 2, 4}}, {{-1, 1, 1, -1, 2, 0}, {2, 1, 2, 3, 3}}});
  check_pad_edges("ReplicationPad3DBackward0", 3, false);
}

}  // TEST_SUITE
