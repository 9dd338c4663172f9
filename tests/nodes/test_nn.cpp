// Node tests of the nn group: normalization, convolution, pooling, attention (upsampling: test_upsample.cpp).
#include <limits>

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

const Grads kNoGrad = {std::nullopt};  // the one incoming grad of a node, undefined
const Grads kNoGrads3 = {std::nullopt, std::nullopt, std::nullopt};
const Need kAll3 = {true, true, true};

// The incoming grads of native_group_norm (three differentiable outputs) whose first output alone is used.
Grads first_of_3(const Tensor& grad) { return {grad, std::nullopt, std::nullopt}; }

}  // namespace

TEST_SUITE("nodes") {

// ------------------------------------------------------------------ layer norm ---

TEST_CASE("NativeLayerNormBackward0") {
  const Tensor x = random64({2, 3, 4}, 20), w = random64({3, 4}, 21), b = random64({3, 4}, 22),
               g = random64({2, 3, 4}, 23);
  const double eps = 1e-5;
  const IntList inner = {1, 2};
  const Saved saved = {{"bias", b},
                       {"input", x},
                       {"normalized_shape", IntList{3, 4}},
                       {"weight", w},
                       {"result1", mean(x, inner, true)},
                       {"result2", rsqrt(add(var(x, inner, 0, true), eps))}};

  SUBCASE("finite differences") {
    const Grads out = call_node("NativeLayerNormBackward0", {g}, kAll3, saved);
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor centered = sub(in[0], mean(in[0], inner, true));
      return add(mul(div(centered, sqrt(add(var(in[0], inner, 0, true), eps))), in[1]), in[2]);
    };
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, b}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("NativeLayerNormBackward0", {g}, {false, true, false}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 4});
    CHECK_FALSE(out[2].has_value());
    const Grads undefined = call_node("NativeLayerNormBackward0", kNoGrad, {true, true, true}, saved);
    for (const auto& grad : undefined) CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: result1 is the mean, result2 the rstd; with and without weight and bias") {
    for (const bool affine : {true, false}) {
      CAPTURE(affine);
      const auto r = torch_exec(std::string("affine = ") + (affine ? "True" : "False") + R"(
x = a.requires_grad_(); w = b.requires_grad_(); bb = c.requires_grad_()
out = F.layer_norm(x, (4,), w, bb) if affine else F.layer_norm(x, (4,))
fn = out.grad_fn
assert fn.name() == "NativeLayerNormBackward0"
)" + kSeededGrad + R"(
opt = lambda t: torch.zeros(0) if t is None else t
saved = (fn._saved_input, fn._saved_result1, fn._saved_result2, T(fn._saved_normalized_shape),
         fn._saved_weight is None, opt(fn._saved_weight), fn._saved_bias is None, opt(fn._saved_bias))
ins = (x, w, bb) if affine else (x,)
grads = torch.autograd.grad(out, ins, g)
result = (*saved, (x.detach() - x.detach().mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True), g, *grads)
)", {x, random64({4}, 24), random64({4}, 25)});
      // result1 is the mean, result2 is 1/sqrt(var + eps): checked here against the input itself.
      CHECK_TENSOR(r[1], mean(x, {2}, true));
      CHECK_TENSOR(r[2], rsqrt(add(r[8], 1e-5)));
      CHECK(int_list(r[3]) == IntList{4});
      CHECK(r[4].item<bool>() == !affine);  // no weight or bias: saved as None
      CHECK(r[6].item<bool>() == !affine);
      const Saved from_torch = {{"bias", affine ? FieldValue(r[7]) : FieldValue(None{})},
                                {"input", r[0]},
                                {"normalized_shape", int_list(r[3])},
                                {"weight", affine ? FieldValue(r[5]) : FieldValue(None{})},
                                {"result1", r[1]},
                                {"result2", r[2]}};
      const Grads out = call_node("NativeLayerNormBackward0", {r[9]}, {true, affine, affine}, from_torch);
      CHECK_TENSOR(*out[0], r[10]);
      if (affine) {
        CHECK_TENSOR(*out[1], r[11]);
        CHECK_TENSOR(*out[2], r[12]);
      }
    }
  }
  SUBCASE("float32 stays float32") {
    Saved saved32 = saved;
    for (const char* name : {"bias", "input", "weight", "result1", "result2"})
      saved32[name] = std::get<Tensor>(saved.at(name)).to(DType::Float32);
    const Grads out = call_node("NativeLayerNormBackward0", {g.to(DType::Float32)},
                                {true, true, true}, saved32);
    for (const auto& grad : out) CHECK(grad->dtype() == DType::Float32);
  }
  SUBCASE("errors") {
    Saved bad_shape = saved;
    bad_shape["normalized_shape"] = IntList{4, 3};
    CHECK_THROWS_WITH_AS(call_node("NativeLayerNormBackward0", {g}, kAll3, bad_shape),
                         "NativeLayerNormBackward0: input [2,3,4] does not end in normalized_shape [4,3]", Error);
    Saved bad_mean = saved;
    bad_mean["result1"] = random64({3}, 1);
    CHECK_THROWS_WITH_AS(call_node("NativeLayerNormBackward0", {g}, kAll3, bad_mean),
                         "NativeLayerNormBackward0: mean [3] and rstd [2,1,1] do not fit input [2,3,4]", Error);
    Saved no_shape = saved;  // would reduce over every dim
    no_shape["normalized_shape"] = IntList{};
    CHECK_THROWS_WITH_AS(call_node("NativeLayerNormBackward0", {g}, kAll3, no_shape),
                         "NativeLayerNormBackward0: normalized_shape must have at least one size, got []", Error);
    CHECK_THROWS_WITH_AS(call_node("NativeLayerNormBackward0", {random64({2, 1, 4}, 1)}, kAll3, saved),
                         "NativeLayerNormBackward0: grad [2,1,4] does not have input's shape [2,3,4]", Error);
    Saved bad_weight = saved;
    bad_weight["weight"] = random64({4}, 1);
    CHECK_THROWS_WITH_AS(call_node("NativeLayerNormBackward0", {g}, kAll3, bad_weight),
                         "NativeLayerNormBackward0: weight [4] does not have normalized_shape [3,4]", Error);
  }
}

// ------------------------------------------------------------------ batch norm ---

TEST_CASE("BatchNormWithUpdateBackward0") {
  const Tensor x = random64({3, 2, 2, 2}, 36), w = random64({2}, 37), b = random64({2}, 38),
               g = random64({3, 2, 2, 2}, 39);
  const double eps = 1e-5;
  const IntList reduce = {0, 2, 3};
  auto channel = [](const Tensor& v) { return reshape(v, {1, -1, 1, 1}); };
  const Saved saved = {{"eps", eps},
                       {"input", x},
                       {"running_mean", zeros({2}, DType::Float64)},
                       {"running_var", ones({2}, DType::Float64)},
                       {"weight", w},
                       {"result1", mean(x, reduce)},
                       {"result2", rsqrt(add(var(x, reduce, 0), eps))},
                       {"result3", zeros({0}, DType::Float64)}};
  const Grads one = {g};
  SUBCASE("finite differences") {
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor centered = sub(in[0], mean(in[0], reduce, true));
      return add(mul(div(centered, sqrt(add(var(in[0], reduce, 0, true), eps))), channel(in[1])), channel(in[2]));
    };
    const Grads out = call_node("BatchNormWithUpdateBackward0", one, kAll3, saved);
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, b}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("BatchNormWithUpdateBackward0", one, {true, false, false}, saved);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    for (const auto& grad :
         call_node("BatchNormWithUpdateBackward0", kNoGrad, kAll3,
                   saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: _batch_norm_with_update") {
    const auto r = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bias = torch.zeros(2, dtype=torch.float64, requires_grad=True)
rm = torch.zeros(2, dtype=torch.float64); rv = torch.ones(2, dtype=torch.float64)
out = torch.ops.aten._batch_norm_with_update(x, w, bias, rm, rv, 0.1, 1e-5)[0]
fn = out.grad_fn
assert fn.name() == "BatchNormWithUpdateBackward0"
saved = (fn._saved_running_mean, fn._saved_running_var, fn._saved_result1, fn._saved_result2,
         fn._saved_result3.to(torch.float64),  # an empty uint8 reserve on CPU: refgrad has no uint8
         torch.tensor(fn._saved_eps, dtype=torch.float64))
result = (*saved, *torch.autograd.grad(out, (x, w, bias), c))
)", {x, w, g});
    const Saved from_torch = {{"eps", r[5].item<double>()}, {"input", x},          {"running_mean", r[0]},
                              {"running_var", r[1]},        {"weight", w},         {"result1", r[2]},
                              {"result2", r[3]},            {"result3", r[4]}};
    const Grads out = call_node("BatchNormWithUpdateBackward0", one, kAll3, from_torch);
    CHECK_TENSOR(*out[0], r[6], 1e-9, 1e-12);
    CHECK_TENSOR(*out[1], r[7], 1e-9, 1e-12);
    CHECK_TENSOR(*out[2], r[8], 1e-9, 1e-12);
  }
}

TEST_CASE("NativeBatchNormBackward0") {
  const Tensor x = random64({3, 2, 2, 2}, 30), w = random64({2}, 31), b = random64({2}, 32),
               g = random64({3, 2, 2, 2}, 33);
  const Tensor running_mean = random64({2}, 34), running_var = add(abs(random64({2}, 35)), 0.5);
  const double eps = 1e-5;
  const IntList reduce = {0, 2, 3};
  auto channel = [](const Tensor& v) { return reshape(v, {1, -1, 1, 1}); };
  const Saved train = {{"eps", eps},
                       {"input", x},
                       {"running_mean", running_mean},
                       {"running_var", running_var},
                       {"training", true},
                       {"weight", w},
                       {"result1", mean(x, reduce)},
                       {"result2", rsqrt(add(var(x, reduce, 0), eps))}};
  Saved eval = train;
  eval["training"] = false;
  eval["result1"] = zeros({0}, DType::Float64);
  eval["result2"] = zeros({0}, DType::Float64);

  SUBCASE("finite differences, train and eval") {
    auto train_forward = [&](const std::vector<Tensor>& in) {
      const Tensor centered = sub(in[0], mean(in[0], reduce, true));
      return add(mul(div(centered, sqrt(add(var(in[0], reduce, 0, true), eps))), channel(in[1])), channel(in[2]));
    };
    auto eval_forward = [&](const std::vector<Tensor>& in) {
      const Tensor x_hat = div(sub(in[0], channel(running_mean)), sqrt(add(channel(running_var), eps)));
      return add(mul(x_hat, channel(in[1])), channel(in[2]));
    };
    const Grads out_train = call_node("NativeBatchNormBackward0", {g}, kAll3, train);
    const Grads out_eval = call_node("NativeBatchNormBackward0", {g}, kAll3, eval);
    for (std::size_t k = 0; k < 3; ++k) {
      check_against_finite_differences(out_train, k, train_forward, {x, w, b}, g);
      check_against_finite_differences(out_eval, k, eval_forward, {x, w, b}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("NativeBatchNormBackward0", {g}, {false, false, true}, train);
    CHECK_FALSE(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK(out[2]->sizes() == Shape{2});
    for (const auto& grad : call_node("NativeBatchNormBackward0", kNoGrad, {true, true, true}, eval))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: BatchNorm2d in train and eval mode, and batch_norm without running stats or weight") {
    for (const std::string mode : {"train", "eval", "functional", "batchnorm1d"}) {
      CAPTURE(mode);
      const auto r = torch_exec("mode = '" + mode + R"('
torch.manual_seed(0)
x = a.requires_grad_()
if mode == 'functional':
    out = F.batch_norm(x, None, None, training=True)
else:
    bn = (torch.nn.BatchNorm1d(2) if mode == 'batchnorm1d' else torch.nn.BatchNorm2d(2)).double()
    if mode == 'batchnorm1d':
        x = x.detach().reshape(3, 2, 4).requires_grad_()
    with torch.no_grad():
        bn.weight.normal_(); bn.bias.normal_(); bn(x * 2 + 1)  # running statistics away from 0 and 1
    if mode == 'eval':
        bn.eval()
    out = bn(x)
fn = out.grad_fn
assert fn.name() == "NativeBatchNormBackward0"
)" + kSeededGrad + R"(
none = torch.zeros(0, dtype=torch.float64)
opt = lambda t: none if t is None else t
affine = fn._saved_weight is not None
ins = (x, bn.weight, bn.bias) if affine else (x,)
saved = (fn._saved_input, opt(fn._saved_running_mean), opt(fn._saved_running_var), fn._saved_training,
         opt(fn._saved_weight), fn._saved_result1, fn._saved_result2, fn._saved_eps, affine,
         fn._saved_running_mean is None)
result = (*saved, g, *torch.autograd.grad(out, ins, g))
)", {x});
      const bool affine = r[8].item<bool>(), no_stats = r[9].item<bool>();
      CHECK(r[3].item<bool>() == (mode != "eval"));
      if (mode == "eval") CHECK(r[5].numel() == 0);  // result1/result2 empty in eval mode
      if (mode == "train") {
        CHECK_TENSOR(r[5], mean(r[0], {0, 2, 3}));  // the batch mean and invstd, not the running ones
        CHECK_TENSOR(r[6], rsqrt(add(var(r[0], {0, 2, 3}, 0), r[7].item<double>())));
      }
      const Saved from_torch = {{"eps", r[7].item<double>()},
                                {"input", r[0]},
                                {"running_mean", no_stats ? FieldValue(None{}) : FieldValue(r[1])},
                                {"running_var", no_stats ? FieldValue(None{}) : FieldValue(r[2])},
                                {"training", r[3].item<bool>()},
                                {"weight", affine ? FieldValue(r[4]) : FieldValue(None{})},
                                {"result1", r[5]},
                                {"result2", r[6]}};
      const Grads out = call_node("NativeBatchNormBackward0", {r[10]}, {true, affine, affine}, from_torch);
      CHECK_TENSOR(*out[0], r[11]);
      if (affine) {
        CHECK_TENSOR(*out[1], r[12]);
        CHECK_TENSOR(*out[2], r[13]);
      }
    }
  }
  SUBCASE("errors") {
    Saved no_stats = eval;
    no_stats["running_var"] = None{};
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormBackward0", {g}, kAll3, no_stats),
                         "NativeBatchNormBackward0: eval mode needs running_mean and running_var, which were not saved",
                         Error);
    Saved bad_stats = train;
    bad_stats["result1"] = random64({3}, 1);
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormBackward0", {g}, kAll3, bad_stats),
                         "NativeBatchNormBackward0: statistics [3] and [2] do not match the 2 channels of input "
                         "[3,2,2,2]",
                         Error);
    Saved one_weight = train;  // one value would broadcast over both channels
    one_weight["weight"] = random64({1}, 1);
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormBackward0", {g}, kAll3, one_weight),
                         "NativeBatchNormBackward0: weight [1] does not have the 2 channels of input [3,2,2,2]", Error);
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormBackward0", {random64({1, 2, 2, 2}, 1)}, kAll3, train),
                         "NativeBatchNormBackward0: grad [1,2,2,2] does not have input's shape [3,2,2,2]", Error);
  }
}

TEST_CASE("NativeBatchNormLegitBackward0") {
  const Tensor x = random64({3, 2, 4}, 36), w = random64({2}, 37), b = random64({2}, 38), g = random64({3, 2, 4}, 39);
  const Tensor running_mean = random64({2}, 40), running_var = add(abs(random64({2}, 41)), 0.5);
  const double eps = 1e-5;
  const IntList reduce = {0, 2};
  auto channel = [](const Tensor& v) { return reshape(v, {1, -1, 1}); };
  const Saved train = {{"eps", eps},          {"input", x},
                       {"running_mean", running_mean}, {"running_var", running_var},
                       {"training", true},    {"weight", w},
                       {"result1", mean(x, reduce)}, {"result2", rsqrt(add(var(x, reduce, 0), eps))}};
  Saved eval = train;
  eval["training"] = false;
  eval["result1"] = zeros({0}, DType::Float64);
  eval["result2"] = zeros({0}, DType::Float64);
  SUBCASE("finite differences, train and eval") {
    auto train_forward = [&](const std::vector<Tensor>& in) {
      const Tensor centered = sub(in[0], mean(in[0], reduce, true));
      return add(mul(div(centered, sqrt(add(var(in[0], reduce, 0, true), eps))), channel(in[1])), channel(in[2]));
    };
    auto eval_forward = [&](const std::vector<Tensor>& in) {
      const Tensor x_hat = div(sub(in[0], channel(running_mean)), sqrt(add(channel(running_var), eps)));
      return add(mul(x_hat, channel(in[1])), channel(in[2]));
    };
    const Grads out_train = call_node("NativeBatchNormLegitBackward0", {g}, kAll3, train);
    const Grads out_eval = call_node("NativeBatchNormLegitBackward0", {g}, kAll3, eval);
    for (std::size_t k = 0; k < 3; ++k) {
      check_against_finite_differences(out_train, k, train_forward, {x, w, b}, g);
      check_against_finite_differences(out_eval, k, eval_forward, {x, w, b}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("NativeBatchNormLegitBackward0", {g}, {false, true, false}, train);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{2});
    CHECK_FALSE(out[2].has_value());
    for (const auto& grad : call_node("NativeBatchNormLegitBackward0", kNoGrad, kAll3, train))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: training and not, with and without weight, float64 and float32") {
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const std::string training : {"True", "False"}) {
        for (const std::string affine : {"True", "False"}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(training);
          CAPTURE(affine);
          const auto r = torch_exec("training, affine = " + training + ", " + affine + R"(
x, w, bias = a.requires_grad_(), b.requires_grad_(), c.requires_grad_()
rm, rv = d, e
out = torch._native_batch_norm_legit(x, w if affine else None, bias if affine else None, rm, rv, training, 0.1, 1e-5)[0]
fn = out.grad_fn
assert fn.name() == "NativeBatchNormLegitBackward0", fn.name()
)" + kSeededGrad + R"(
none = torch.zeros(0, dtype=x.dtype)
ins = (x, w, bias) if affine else (x,)
result = (fn._saved_input, fn._saved_running_mean, fn._saved_running_var, fn._saved_training,
          none if fn._saved_weight is None else fn._saved_weight, fn._saved_result1, fn._saved_result2,
          fn._saved_eps, g, *torch.autograd.grad(out, ins, g))
)",
                                    {x.to(dtype), w.to(dtype), b.to(dtype), running_mean.to(dtype), running_var.to(dtype)});
          const bool is_affine = affine == "True";
          const Saved from_torch = {{"eps", r[7].item<double>()},
                                    {"input", r[0]},
                                    {"running_mean", r[1]},
                                    {"running_var", r[2]},
                                    {"training", r[3].item<bool>()},
                                    {"weight", is_affine ? FieldValue(r[4]) : FieldValue(None{})},
                                    {"result1", r[5]},
                                    {"result2", r[6]}};
          const Grads out =
              call_node("NativeBatchNormLegitBackward0", {r[8]}, {true, is_affine, is_affine}, from_torch);
          const double tol = dtype == DType::Float32 ? 1e-5 : 1e-7;
          CHECK(out[0]->dtype() == dtype);
          CHECK_TENSOR(*out[0], r[9], tol, tol * 1e-2);
          if (is_affine) {
            CHECK_TENSOR(*out[1], r[10], tol, tol * 1e-2);
            CHECK_TENSOR(*out[2], r[11], tol, tol * 1e-2);
          }
        }
      }
    }
  }
  SUBCASE("against torch in float16 and bfloat16, computed in float32 and rounded once as ATen's kernel") {
    // Two elements per channel: the input grad cancels to nearly 0, where rounding each step would show.
    for (const DType dtype : {DType::Float16, DType::BFloat16}) {
      for (const Shape& shape : {Shape{2, 1}, Shape{3, 2, 4}}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_text(shape));
        const std::int64_t channels = shape[1];
        const auto r = torch_exec(R"(
x, w, bias = a.requires_grad_(), b.requires_grad_(), c.requires_grad_()
out = torch._native_batch_norm_legit(x, w, bias, torch.zeros(x.shape[1], dtype=x.dtype),
                                     torch.ones(x.shape[1], dtype=x.dtype), True, 0.5, 1e-5)[0]
fn = out.grad_fn
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_input, fn._saved_running_mean, fn._saved_running_var, fn._saved_weight, fn._saved_result1,
          fn._saved_result2, g, *torch.autograd.grad(out, (x, w, bias), g))
)",
                                  {random64(shape, 46).to(dtype), random64({channels}, 47).to(dtype),
                                   random64({channels}, 48).to(dtype)});
        const Saved from_torch = {{"eps", 1e-5},        {"input", r[0]},   {"running_mean", r[1]},
                                  {"running_var", r[2]}, {"training", true}, {"weight", r[3]},
                                  {"result1", r[4]},    {"result2", r[5]}};
        const Grads out = call_node("NativeBatchNormLegitBackward0", {r[6]}, kAll3, from_torch);
        const double tol = dtype == DType::Float16 ? 2e-3 : 1.6e-2;
        for (std::size_t k = 0; k < 3; ++k) {
          CAPTURE(k);
          CHECK(out[k]->dtype() == dtype);
          CHECK_TENSOR(*out[k], r[7 + k], tol, tol * 1e-2);
        }
      }
    }
  }
  SUBCASE("errors name the node") {
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormLegitBackward0", {random64({1, 2, 4}, 1)}, kAll3, train),
                         "NativeBatchNormLegitBackward0: grad [1,2,4] does not have input's shape [3,2,4]", Error);
    Saved bad_stats = eval;
    bad_stats["running_var"] = random64({3}, 1);
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormLegitBackward0", {g}, kAll3, bad_stats),
                         "NativeBatchNormLegitBackward0: statistics [2] and [3] do not match the 2 channels of input "
                         "[3,2,4]",
                         Error);
    Saved missing = train;
    missing.erase("running_mean");
    CHECK_THROWS_AS(call_node("NativeBatchNormLegitBackward0", {g}, kAll3, missing), Error);
  }
}

TEST_CASE("NativeBatchNormLegitBackward1") {
  const Tensor x = random64({3, 2, 2, 2}, 42), w = random64({2}, 43), b = random64({2}, 44),
               g = random64({3, 2, 2, 2}, 45);
  const double eps = 1e-3;
  const IntList reduce = {0, 2, 3};
  auto channel = [](const Tensor& v) { return reshape(v, {1, -1, 1, 1}); };
  const Saved train = {{"eps", eps},      {"input", x},
                       {"training", true}, {"weight", w},
                       {"result1", mean(x, reduce)}, {"result2", rsqrt(add(var(x, reduce, 0), eps))}};
  SUBCASE("finite differences") {
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor centered = sub(in[0], mean(in[0], reduce, true));
      return add(mul(div(centered, sqrt(add(var(in[0], reduce, 0, true), eps))), channel(in[1])), channel(in[2]));
    };
    const Grads out = call_node("NativeBatchNormLegitBackward1", {g}, kAll3, train);
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, b}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("NativeBatchNormLegitBackward1", {g}, {true, false, false}, train);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(out[2].has_value());
    for (const auto& grad : call_node("NativeBatchNormLegitBackward1", kNoGrad, kAll3, train))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch, with and without weight, float64 and float32") {
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const std::string affine : {"True", "False"}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(affine);
        const auto r = torch_exec("affine = " + affine + R"(
x, w, bias = a.requires_grad_(), b.requires_grad_(), c.requires_grad_()
out = torch._native_batch_norm_legit(x, w if affine else None, bias if affine else None, True, 0.1, 1e-3)[0]
fn = out.grad_fn
assert fn.name() == "NativeBatchNormLegitBackward1", fn.name()
)" + kSeededGrad + R"(
none = torch.zeros(0, dtype=x.dtype)
ins = (x, w, bias) if affine else (x,)
result = (fn._saved_input, fn._saved_training, none if fn._saved_weight is None else fn._saved_weight,
          fn._saved_result1, fn._saved_result2, fn._saved_eps, g, *torch.autograd.grad(out, ins, g))
)",
                                  {x.to(dtype), w.to(dtype), b.to(dtype)});
        const bool is_affine = affine == "True";
        const Saved from_torch = {{"eps", r[5].item<double>()},
                                  {"input", r[0]},
                                  {"training", r[1].item<bool>()},
                                  {"weight", is_affine ? FieldValue(r[2]) : FieldValue(None{})},
                                  {"result1", r[3]},
                                  {"result2", r[4]}};
        const Grads out = call_node("NativeBatchNormLegitBackward1", {r[6]}, {true, is_affine, is_affine}, from_torch);
        const double tol = dtype == DType::Float32 ? 1e-5 : 1e-7;
        CHECK_TENSOR(*out[0], r[7], tol, tol * 1e-2);
        if (is_affine) {
          CHECK_TENSOR(*out[1], r[8], tol, tol * 1e-2);
          CHECK_TENSOR(*out[2], r[9], tol, tol * 1e-2);
        }
      }
    }
  }
  SUBCASE("errors: not training needs running statistics, which this overload has not") {
    Saved eval = train;
    eval["training"] = false;
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormLegitBackward1", {g}, kAll3, eval),
                         "NativeBatchNormLegitBackward1: eval mode needs running_mean and running_var, which were not "
                         "saved",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("NativeBatchNormLegitBackward1", {random64({3, 2}, 1)}, kAll3, train),
                         "NativeBatchNormLegitBackward1: grad [3,2] does not have input's shape [3,2,2,2]", Error);
  }
}

// ------------------------------------------------------------------ trilinear ---

TEST_CASE("TrilinearBackward0") {
  struct Case {
    const char* what;
    Shape s1, s2, s3;
    IntList expand1, expand2, expand3, sumdim;
  };
  const std::vector<Case> cases = {
      {"bilinear: input1 [N, in1], weight [out, in1, in2], input2 [N, in2]", {5, 3}, {2, 3, 4}, {5, 4},
       {1, 3}, {0}, {1, 2}, {2, 3}},
      {"no sumdim: i1 * i2[None, :] * i3[:, None]", {3, 4}, {4}, {3}, {}, {0}, {1}, {}},
      {"a sumdim i1 was broadcast along", {4}, {3, 4}, {3, 4}, {0}, {}, {}, {0}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const Tensor i1 = random64(c.s1, 70), i2 = random64(c.s2, 71), i3 = random64(c.s3, 72);
    // The forward spelled out: unsqueeze each at its expand dims, multiply, sum over sumdim.
    auto forward = [&](const std::vector<Tensor>& in) {
      auto up = [](Tensor t, const IntList& dims) {
        for (std::int64_t d : dims) t = unsqueeze(t, d);
        return t;
      };
      const Tensor product = mul(mul(up(in[0], c.expand1), up(in[1], c.expand2)), up(in[2], c.expand3));
      return c.sumdim.empty() ? product : sum(product, c.sumdim);
    };
    const Tensor result = forward({i1, i2, i3});
    const Tensor g = random64(result.sizes(), 73);
    const Saved saved = {{"expand1", c.expand1}, {"expand2", c.expand2}, {"expand3", c.expand3}, {"i1", i1},
                         {"i2", i2},            {"i3", i3},            {"sumdim", c.sumdim}};
    SUBCASE("finite differences, the forward checked against torch's") {
      CHECK_TENSOR(result,
                   torch_eval1("torch._trilinear(a, b, c, " + str(c.expand1) + ", " + str(c.expand2) + ", " +
                                   str(c.expand3) + ", " + str(c.sumdim) + ")",
                               {i1, i2, i3}),
                   1e-12, 1e-12);
      const Grads out = call_node("TrilinearBackward0", {g}, kAll3, saved);
      for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {i1, i2, i3}, g);
    }
    SUBCASE("against torch, each dtype; what is saved depends on which grads are needed") {
      for (const DType dtype : {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16}) {
        for (const std::string needs : {"(True, True, True)", "(True, False, False)", "(False, True, True)"}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(needs);
          const auto r = torch_exec("needs = " + needs + R"(
ins = [t.requires_grad_(n) for t, n in zip((a, b, c), needs)]
out = torch._trilinear(*ins, )" + str(c.expand1) + ", " + str(c.expand2) + ", " + str(c.expand3) + ", " +
                                        str(c.sumdim) + R"()
fn = out.grad_fn
assert fn.name() == "TrilinearBackward0", fn.name()
)" + kSeededGrad + R"(
saved = (fn._saved_i1, fn._saved_i2, fn._saved_i3)
none = torch.zeros(0)
grads = torch.autograd.grad(out, [t for t in ins if t.requires_grad], g)
result = (*[none if s is None else s for s in saved], *[torch.tensor(s is None) for s in saved],
          T(fn._saved_expand1), T(fn._saved_expand2), T(fn._saved_expand3), T(fn._saved_sumdim), g, *grads)
)",
                                    {i1.to(dtype), i2.to(dtype), i3.to(dtype)});
          const Need need = {needs == "(True, True, True)" || needs == "(True, False, False)",
                             needs != "(True, False, False)", needs != "(True, False, False)"};
          // each input is saved when another input needs a grad
          CHECK(r[3].item<bool>() == !(need[1] || need[2]));
          CHECK(r[4].item<bool>() == !(need[0] || need[2]));
          CHECK(r[5].item<bool>() == !(need[0] || need[1]));
          auto maybe = [&](std::size_t k) { return r[3 + k].item<bool>() ? FieldValue(None{}) : FieldValue(r[k]); };
          const Saved from_torch = {{"expand1", int_list(r[6])}, {"expand2", int_list(r[7])},
                                    {"expand3", int_list(r[8])}, {"i1", maybe(0)},
                                    {"i2", maybe(1)},            {"i3", maybe(2)},
                                    {"sumdim", int_list(r[9])}};
          const Grads out = call_node("TrilinearBackward0", {r[10]}, need, from_torch);
          const double rtol = dtype == DType::Float64 ? 1e-7 : dtype == DType::Float32 ? 1e-5 : 2e-2;
          std::size_t next = 11;
          for (std::size_t k = 0; k < 3; ++k) {
            CAPTURE(k);
            CHECK(out[k].has_value() == need[k]);
            if (!need[k]) continue;
            CHECK(out[k]->dtype() == dtype);
            CHECK_TENSOR(*out[k], r[next++], rtol, rtol * 0.1);
          }
        }
      }
    }
  }
  const Saved bilinear = {{"expand1", IntList{1, 3}}, {"expand2", IntList{0}}, {"expand3", IntList{1, 2}},
                          {"i1", random64({5, 3}, 1)}, {"i2", random64({2, 3, 4}, 2)}, {"i3", random64({5, 4}, 3)},
                          {"sumdim", IntList{2, 3}}};
  SUBCASE("undefined grad") {
    for (const auto& grad : call_node("TrilinearBackward0", kNoGrad, kAll3, bilinear)) CHECK_FALSE(grad.has_value());
  }
  SUBCASE("errors") {
    Saved unsaved = bilinear;
    unsaved["i3"] = None{};
    CHECK_THROWS_WITH_AS(call_node("TrilinearBackward0", {random64({5, 2}, 4)}, {true, false, false}, unsaved),
                         "TrilinearBackward0: i1's grad is needed but `i3` was not saved", Error);
    Saved bad_rank = bilinear;
    bad_rank["i3"] = random64({5, 4, 1}, 5);
    CHECK_THROWS_WITH_AS(call_node("TrilinearBackward0", {random64({5, 2}, 4)}, {false, true, false}, bad_rank),
                         "TrilinearBackward0: i3 [5,4,1] unsqueezed at [1,2] does not have the rank 4 of the others",
                         Error);
    CHECK_THROWS_AS(call_node("TrilinearBackward0", {random64({5, 3}, 4)}, kAll3, bilinear), Error);
  }
}

// -------------------------------------------------------------- embedding bag ---

TEST_CASE("EmbeddingBagBackward0") {
  // Bags, as result1 (offset2bag) says: [1 2 4 5] [] [4 3 2 9]; padding_idx 4 where used.
  const Tensor weight = random64({10, 3}, 80), psw = random64({8}, 81);
  const Tensor indices = tensor({1, 2, 4, 5, 4, 3, 2, 9}, DType::Int64),
               offset2bag = tensor({0, 0, 0, 0, 2, 2, 2, 2}, DType::Int64);
  const Tensor g = random64({3, 3}, 82);
  auto saved_for = [&](std::int64_t mode, std::int64_t padding_idx, const Tensor& bag_size,
                       const Tensor& maximum_indices, bool with_psw) {
    return Saved{{"indices", indices},
                 {"mode", mode},
                 {"offsets", tensor({0, 4, 4}, DType::Int64)},
                 {"padding_idx", padding_idx},
                 {"per_sample_weights", with_psw ? FieldValue(psw) : FieldValue(None{})},
                 {"scale_grad_by_freq", false},
                 {"sparse", false},
                 {"weight", with_psw ? FieldValue(weight) : FieldValue(None{})},
                 {"weight_sym_argsize_0", std::int64_t{10}},
                 {"result1", offset2bag},
                 {"result2", bag_size},
                 {"result3", maximum_indices}};
  };
  const Tensor none = zeros({3}, DType::Int64);
  SUBCASE("finite differences: sum with per_sample_weights and padding, mean, and max") {
    const Tensor keep = unsqueeze(to(ne(indices, 4), DType::Float64), 1);
    auto bag_sums = [&](const Tensor& rows) { return index_add(zeros({3, 3}, DType::Float64), 0, offset2bag, rows); };
    auto sum_forward = [&](const std::vector<Tensor>& in) {
      return bag_sums(mul(mul(index_select(in[0], 0, indices), unsqueeze(in[1], 1)), keep));
    };
    const Grads out_sum = call_node("EmbeddingBagBackward0", {g}, {true, true},
                                    saved_for(0, 4, none, none, /*with_psw=*/true));
    check_against_finite_differences(out_sum, 0, sum_forward, {weight, psw}, g);
    check_against_finite_differences(out_sum, 1, sum_forward, {weight, psw}, g);

    const Tensor bag_size = tensor({4, 0, 4}, DType::Int64);
    auto mean_forward = [&](const std::vector<Tensor>& in) {
      return div(bag_sums(index_select(in[0], 0, indices)), unsqueeze(tensor({4.0, 1.0, 4.0}, DType::Float64), 1));
    };
    check_against_finite_differences(
        call_node("EmbeddingBagBackward0", {g}, {true, false}, saved_for(1, -1, bag_size, none, false)), 0,
        mean_forward, {weight}, g);

    // max: each output element is the weight element of the row that won it (no ties in random values)
    const Tensor maximum_indices = tensor({{2, 1, 5}, {0, 0, 0}, {9, 3, 9}}, DType::Int64);
    auto max_forward = [&](const std::vector<Tensor>& in) {
      return mul(gather(in[0], 0, maximum_indices), unsqueeze(tensor({1.0, 0.0, 1.0}, DType::Float64), 1));
    };
    check_against_finite_differences(
        call_node("EmbeddingBagBackward0", {g}, {true, false}, saved_for(2, -1, bag_size, maximum_indices, false)),
        0, max_forward, {weight}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = saved_for(0, -1, none, none, true);
    const Grads out = call_node("EmbeddingBagBackward0", {g}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{8});
    for (const auto& grad : call_node("EmbeddingBagBackward0", kNoGrad, {true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: modes, per_sample_weights, padding_idx, include_last_offset, empty bags, 2-d input") {
    // (float32's sum mode saves an empty offset2bag: the node makes it of offsets)
    const std::vector<std::string> forwards = {
        "F.embedding_bag(i, w, o, mode='sum')",
        "F.embedding_bag(i, w, o, mode='sum', per_sample_weights=p, padding_idx=4)",
        // include_last_offset: the last offset is the number of indices
        "F.embedding_bag(i, w, torch.tensor([0, 4, 8]), mode='sum', per_sample_weights=p, include_last_offset=True)",
        "F.embedding_bag(i, w, o, mode='mean', padding_idx=2)",
        "F.embedding_bag(i, w, torch.tensor([0, 2, 8]), mode='mean', include_last_offset=True)",
        "F.embedding_bag(i, w, o, mode='max')",
        "F.embedding_bag(i, w, o, mode='max', padding_idx=4)",
        "F.embedding_bag(i.reshape(2, 4), w, mode='max')",
        "F.embedding_bag(i.reshape(2, 4), w, mode='mean')",
        // every index occurs twice: torch's CPU count bug (see the node) cannot show
        "F.embedding_bag(torch.tensor([1, 7, 7, 1, 3, 3]), w, torch.tensor([0, 2, 5]), mode='mean', "
        "scale_grad_by_freq=True)",
        "F.embedding_bag(torch.tensor([1, 7, 7, 1, 3, 3]), w, torch.tensor([0, 2]), scale_grad_by_freq=True, "
        "padding_idx=3)",
    };
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const std::string& forward : forwards) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(forward);
        const auto r = torch_exec(R"(
w, p = a.requires_grad_(), b.requires_grad_()
i, o = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4])
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == "EmbeddingBagBackward0", fn.name()
)" + kSeededGrad + R"(
has_psw = fn._saved_per_sample_weights is not None
none = torch.zeros(0)
pad = fn._saved_padding_idx
result = (fn._saved_indices, torch.tensor(fn._saved_mode), fn._saved_offsets, torch.tensor(pad - 2**64 if pad >= 2**63 else pad),
          fn._saved_per_sample_weights if has_psw else none, fn._saved_scale_grad_by_freq, fn._saved_sparse,
          fn._saved_weight if fn._saved_weight is not None else none, torch.tensor(fn._saved_weight_sym_argsize_0),
          fn._saved_result1, fn._saved_result2, fn._saved_result3, has_psw, fn._saved_weight is not None, g,
          *torch.autograd.grad(out, (w, p) if has_psw else (w,), g))
)",
                                  {weight.to(dtype), psw.to(dtype)});
        const bool has_psw = r[12].item<bool>();
        CHECK(r[13].item<bool>() == has_psw);  // weight is saved for per_sample_weights' grad only
        const Saved from_torch = {{"indices", r[0]},
                                  {"mode", r[1].item<std::int64_t>()},
                                  {"offsets", r[2]},
                                  {"padding_idx", r[3].item<std::int64_t>()},
                                  {"per_sample_weights", has_psw ? FieldValue(r[4]) : FieldValue(None{})},
                                  {"scale_grad_by_freq", r[5].item<bool>()},
                                  {"sparse", r[6].item<bool>()},
                                  {"weight", has_psw ? FieldValue(r[7]) : FieldValue(None{})},
                                  {"weight_sym_argsize_0", r[8].item<std::int64_t>()},
                                  {"result1", r[9]},
                                  {"result2", r[10]},
                                  {"result3", r[11]}};
        const Grads out = call_node("EmbeddingBagBackward0", {r[14]}, {true, has_psw}, from_torch);
        const double rtol = dtype == DType::Float64 ? 1e-7 : dtype == DType::Float32 ? 1e-5 : 2e-2;
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[15], rtol, rtol * 0.1);
        if (has_psw) CHECK_TENSOR(*out[1], r[16], rtol, rtol * 0.1);
      }
    }
  }
  SUBCASE("scale_grad_by_freq divides by the count of each index itself (by hand)") {
    // indices 2 2 3 in one bag, sum mode: row 2 gets 2 * (g / 2), row 3 gets g / 1. (ATen's CPU kernel
    // divides row 3 by the count of the sorted indices' second entry, 2: a bug.)
    Saved saved = saved_for(0, -1, none, none, false);
    saved["indices"] = tensor({2, 2, 3}, DType::Int64);
    saved["result1"] = tensor({0, 0, 0}, DType::Int64);
    saved["result2"] = tensor({0}, DType::Int64);
    saved["scale_grad_by_freq"] = true;
    const Tensor grad = tensor({{1.0, 2.0, 3.0}}, DType::Float64);
    const Tensor expected = index_put(zeros({10, 3}, DType::Float64), {tensor({2, 3}, DType::Int64)},
                                      tensor({{1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}}, DType::Float64));
    CHECK_TENSOR(*call_node("EmbeddingBagBackward0", {grad}, {true, false}, saved)[0], expected);
  }
  SUBCASE("errors") {
    const Saved saved = saved_for(0, -1, none, none, true);
    Saved sparse = saved;
    sparse["sparse"] = true;
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {true, false}, sparse),
                         "EmbeddingBagBackward0: sparse=True (a sparse COO gradient) is not supported yet", Error);
    Saved mean_psw = saved;
    mean_psw["mode"] = std::int64_t{1};
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {true, true}, mean_psw),
                         "EmbeddingBagBackward0: per_sample_weights are only supported in sum mode (mode 0), got mode 1",
                         Error);
    Saved no_weight = saved;
    no_weight["weight"] = None{};
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {false, true}, no_weight),
                         "EmbeddingBagBackward0: per_sample_weights's grad is needed but `weight` was not saved",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {random64({2, 3}, 1)}, {true, false}, saved),
                         "EmbeddingBagBackward0: grad [2,3] is not [bags, embedding dim] with result2 (bag_size) [3]",
                         Error);
    Saved out_of_range = saved;
    out_of_range["weight_sym_argsize_0"] = std::int64_t{9};
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {true, false}, out_of_range),
                         "EmbeddingBagBackward0: indices are out of range for 9 embeddings", Error);
    Saved bad_bags = saved;
    bad_bags["result1"] = tensor({0, 0, 0, 0, 3, 3, 3, 3}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {true, false}, bad_bags),
                         "EmbeddingBagBackward0: result1 (offset2bag) names a bag out of range for grad [3,3]", Error);
    Saved max_mode = saved_for(2, -1, none, zeros({2, 3}, DType::Int64), false);
    CHECK_THROWS_WITH_AS(call_node("EmbeddingBagBackward0", {g}, {true, false}, max_mode),
                         "EmbeddingBagBackward0: result3 (maximum_indices) [2,3] must be int64 of grad's shape [3,3]",
                         Error);
  }
}

// ------------------------------------------------------------------ group norm ---

TEST_CASE("NativeGroupNormBackward0") {
  const Tensor x = random64({2, 4, 3}, 40), w = random64({4}, 41), b = random64({4}, 42), g = random64({2, 4, 3}, 43);
  const double eps = 1e-5;
  const Tensor grouped = reshape(x, {2, 2, -1});
  const Saved saved = {{"C", std::int64_t{4}}, {"HxW", std::int64_t{3}}, {"N", std::int64_t{2}}, {"eps", eps},
                       {"group", std::int64_t{2}}, {"input", x}, {"weight", w},
                       {"result1", mean(grouped, {2})}, {"result2", rsqrt(add(var(grouped, {2}, 0), eps))}};

  SUBCASE("finite differences") {
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor xg = reshape(in[0], {2, 2, -1});
      const Tensor x_hat = div(sub(xg, mean(xg, {2}, true)), sqrt(add(var(xg, {2}, 0, true), eps)));
      return add(mul(reshape(x_hat, {2, 4, 3}), reshape(in[1], {1, 4, 1})), reshape(in[2], {1, 4, 1}));
    };
    const Grads out = call_node("NativeGroupNormBackward0", first_of_3(g), kAll3, saved);
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, b}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("NativeGroupNormBackward0", first_of_3(g), {true, false, false}, saved);
    CHECK(out[0]->sizes() == Shape{2, 4, 3});
    CHECK_FALSE(out[1].has_value());
    for (const auto& grad : call_node("NativeGroupNormBackward0", kNoGrads3, {true, true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch: result1 is the mean, result2 the rstd, [N, group]") {
    for (const bool affine : {true, false}) {
      CAPTURE(affine);
      const auto r = torch_exec(std::string("affine = ") + (affine ? "True" : "False") + R"(
x = a.requires_grad_(); w = b.requires_grad_(); bb = c.requires_grad_()
out = F.group_norm(x, 3, w, bb) if affine else F.group_norm(x, 3)
fn = out.grad_fn
assert fn.name() == "NativeGroupNormBackward0"
)" + kSeededGrad + R"(
ins = (x, w, bb) if affine else (x,)
saved = (fn._saved_input, fn._saved_result1, fn._saved_result2, fn._saved_N, fn._saved_C, fn._saved_HxW,
         fn._saved_group, fn._saved_eps, torch.zeros(0) if fn._saved_weight is None else fn._saved_weight)
result = (*saved, g, *torch.autograd.grad(out, ins, g))
)", {random64({2, 6, 2, 2}, 44), random64({6}, 45), random64({6}, 46)});
      const Tensor grouped_input = reshape(r[0], {2, 3, -1});
      CHECK_TENSOR(r[1], mean(grouped_input, {2}));
      CHECK_TENSOR(r[2], rsqrt(add(var(grouped_input, {2}, 0), r[7].item<double>())));
      const Saved from_torch = {{"C", r[4].item<std::int64_t>()}, {"HxW", r[5].item<std::int64_t>()},
                                {"N", r[3].item<std::int64_t>()}, {"eps", r[7].item<double>()},
                                {"group", r[6].item<std::int64_t>()}, {"input", r[0]},
                                {"weight", affine ? FieldValue(r[8]) : FieldValue(None{})},
                                {"result1", r[1]}, {"result2", r[2]}};
      const Grads out = call_node("NativeGroupNormBackward0", first_of_3(r[9]), {true, affine, affine}, from_torch);
      CHECK_TENSOR(*out[0], r[10]);
      if (affine) {
        CHECK_TENSOR(*out[1], r[11]);
        CHECK_TENSOR(*out[2], r[12]);
      }
    }
  }
  SUBCASE("against torch: an empty batch; no positions (the weight's grad is NaN, from the NaN statistics)") {
    for (const Shape& shape : {Shape{0, 4, 3}, Shape{2, 4, 0}}) {
      CAPTURE(str(shape));
      const auto r = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bb = c.requires_grad_()
out = F.group_norm(x, 2, w, bb)
fn = out.grad_fn
g = torch.ones_like(out)
result = (fn._saved_result1, fn._saved_result2, g, *torch.autograd.grad(out, (x, w, bb), g))
)", {zeros(shape, DType::Float64), w, b});
      const Saved empty = {{"C", std::int64_t{4}}, {"HxW", shape[2]}, {"N", shape[0]}, {"eps", eps},
                           {"group", std::int64_t{2}}, {"input", zeros(shape, DType::Float64)}, {"weight", w},
                           {"result1", r[0]}, {"result2", r[1]}};
      const Grads out = call_node("NativeGroupNormBackward0", first_of_3(r[2]), kAll3, empty);
      for (std::size_t k = 0; k < 3; ++k) CHECK_TENSOR(*out[k], r[3 + k]);
    }
  }
  SUBCASE("errors") {
    Saved bad_group = saved;
    bad_group["group"] = std::int64_t{3};
    CHECK_THROWS_WITH_AS(call_node("NativeGroupNormBackward0", first_of_3(g), kAll3, bad_group),
                         doctest::Contains("do not fit N=2 C=4 HxW=3 group=3"), Error);
    Saved huge = saved;  // N * C * HxW overflows int64
    huge["N"] = std::int64_t{1} << 62;
    CHECK_THROWS_WITH_AS(call_node("NativeGroupNormBackward0", first_of_3(g), kAll3, huge),
                         doctest::Contains("do not fit N=4611686018427387904 C=4 HxW=3 group=2"), Error);
    Saved negative = saved;  // 2 * -4 * -3 is x.numel()
    negative["C"] = std::int64_t{-4}, negative["HxW"] = std::int64_t{-3}, negative["weight"] = None{};
    CHECK_THROWS_WITH_AS(call_node("NativeGroupNormBackward0", first_of_3(g), kAll3, negative),
                         doctest::Contains("do not fit N=2 C=-4 HxW=-3 group=2"), Error);
  }
  SUBCASE("grads of the mean and rstd outputs: finite differences, and torch (which drops one alone)") {
    const Tensor g_mean = random64({2, 2}, 47), g_rstd = random64({2, 2}, 48);
    // The three outputs flattened into one, and their grads likewise: one VJP checks all three.
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor xg = reshape(in[0], {2, 2, -1});
      const Tensor mu = mean(xg, {2}, true), rstd = rsqrt(add(var(xg, {2}, 0, true), eps));
      const Tensor y = add(mul(reshape(mul(sub(xg, mu), rstd), {2, 4, 3}), reshape(in[1], {1, 4, 1})),
                           reshape(in[2], {1, 4, 1}));
      return cat({reshape(y, {-1}), reshape(mu, {-1}), reshape(rstd, {-1})}, 0);
    };
    const Tensor all_grads = cat({reshape(g, {-1}), reshape(g_mean, {-1}), reshape(g_rstd, {-1})}, 0);
    const Grads out = call_node("NativeGroupNormBackward0", {g, g_mean, g_rstd}, kAll3, saved);
    for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, b}, all_grads);
    const Tensor stats_grads =
        cat({zeros({24}, DType::Float64), reshape(g_mean, {-1}), reshape(g_rstd, {-1})}, 0);
    const Grads stats_only = call_node("NativeGroupNormBackward0", {std::nullopt, g_mean, g_rstd}, kAll3, saved);
    check_against_finite_differences(stats_only, 0, forward, {x, w, b}, stats_grads);
    CHECK_FALSE(stats_only[1].has_value());
    CHECK_FALSE(stats_only[2].has_value());
    // One of them alone is dropped, as torch drops it.
    const Grads alone = call_node("NativeGroupNormBackward0", first_of_3(g), kAll3, saved);
    const Grads with_mean = call_node("NativeGroupNormBackward0", {g, g_mean, std::nullopt}, kAll3, saved);
    for (std::size_t k = 0; k < 3; ++k) CHECK_TENSOR(*with_mean[k], *alone[k]);
    for (const std::string outputs : {"(out, mean, rstd)", "(mean,)", "(out, rstd)", "(mean, rstd)"}) {
      CAPTURE(outputs);
      const auto r = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bb = c.requires_grad_()
out, mean, rstd = torch.native_group_norm(x, w, bb, 2, 6, 4, 3, 1e-5)
fn = out.grad_fn
assert fn.name() == "NativeGroupNormBackward0"
outs = )" + outputs + R"(
gen = torch.Generator().manual_seed(7)
gs = tuple(torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs)
named = {id(out): 0, id(mean): 1, id(rstd): 2}
node_grads = [torch.zeros(0)] * 3
for o, go in zip(outs, gs): node_grads[named[id(o)]] = go
saved = (fn._saved_input, fn._saved_result1, fn._saved_result2, fn._saved_weight)
grads = torch.autograd.grad(outs, (x, w, bb), gs, allow_unused=True)
result = (*saved, *node_grads, *(torch.zeros(0) if gi is None else gi for gi in grads))
)", {random64({2, 6, 4}, 49), random64({6}, 50), random64({6}, 51)});
      const Saved from_torch = {{"C", std::int64_t{6}}, {"HxW", std::int64_t{4}}, {"N", std::int64_t{2}},
                                {"eps", 1e-5}, {"group", std::int64_t{3}}, {"input", r[0]}, {"weight", r[3]},
                                {"result1", r[1]}, {"result2", r[2]}};
      Grads node_grads(3);
      for (std::size_t k = 0; k < 3; ++k)
        if (r[4 + k].numel() > 0) node_grads[k] = r[4 + k];
      const Grads got = call_node("NativeGroupNormBackward0", node_grads, kAll3, from_torch);
      for (std::size_t k = 0; k < 3; ++k) {  // torch's None came back as an empty tensor
        if (!got[k].has_value()) CHECK(r[7 + k].numel() == 0);
        else CHECK_TENSOR(*got[k], r[7 + k], 1e-10, 1e-12);
      }
    }
  }
}

// ------------------------------------------------------------------ convolution ---

TEST_CASE("ConvolutionBackward0") {
  struct Case {
    const char* torch_forward;  // x, w, bias in scope
    Shape input, weight;
    IntList stride, padding, dilation;
    bool transposed;
    IntList output_padding;
    std::int64_t groups;
  };
  const std::vector<Case> cases = {
      {"F.conv1d(x, w, bias)", {2, 3, 7}, {4, 3, 2}, {1}, {0}, {1}, false, {0}, 1},
      {"F.conv2d(x, w, bias, stride=2, padding=1, dilation=2, groups=2)", {2, 4, 6, 7}, {6, 2, 2, 3}, {2, 2}, {1, 1},
       {2, 2}, false, {0, 0}, 2},
      {"F.conv2d(x, w, bias, stride=(2, 3), padding=(0, 2))", {1, 2, 6, 5}, {3, 2, 3, 2}, {2, 3}, {0, 2}, {1, 1},
       false, {0, 0}, 1},
      {"F.conv_transpose2d(x, w, bias, stride=2, padding=1, output_padding=1, groups=2)", {2, 4, 3, 3}, {4, 3, 3, 2},
       {2, 2}, {1, 1}, {1, 1}, true, {1, 1}, 2},
      {"F.conv_transpose1d(x, w, bias, stride=3, dilation=2, output_padding=1)", {2, 2, 4}, {2, 3, 3}, {3}, {0}, {2},
       true, {1}, 1},
      // output_padding below the dilation but not the stride; padding wider than the kernel
      {"F.conv_transpose1d(x, w, bias, dilation=3, output_padding=2)", {1, 2, 3}, {2, 2, 3}, {1}, {0}, {3}, true, {2},
       1},
      {"F.conv1d(x, w, bias, padding=4)", {1, 2, 3}, {2, 2, 2}, {1}, {4}, {1}, false, {0}, 1},
      {"F.conv3d(x, w, bias, stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1), groups=2)", {1, 4, 5, 4, 3},
       {2, 2, 2, 2, 2}, {1, 2, 1}, {1, 0, 1}, {2, 1, 1}, false, {0, 0, 0}, 2},
      {"F.conv_transpose3d(x, w, bias, stride=(2, 1, 2), padding=(1, 0, 0), output_padding=(1, 0, 1))",
       {1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {2, 1, 2}, {1, 0, 0}, {1, 1, 1}, true, {1, 0, 1}, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.torch_forward);
    const Tensor x = random64(c.input, 50), w = random64(c.weight, 51);
    const std::int64_t out_channels = c.transposed ? c.weight[1] * c.groups : c.weight[0];
    const Tensor bias = random64({out_channels}, 52);
    auto forward = [&](const std::vector<Tensor>& in) {
      return convolution(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.transposed, c.output_padding,
                         c.groups);
    };
    const Tensor g = random64(forward({x, w, bias}).sizes(), 53);
    const Saved saved = {{"bias_sym_sizes_opt", IntList{out_channels}}, {"dilation", c.dilation},
                         {"groups", c.groups}, {"input", x}, {"output_padding", c.output_padding},
                         {"padding", c.padding}, {"stride", c.stride}, {"transposed", c.transposed}, {"weight", w}};

    SUBCASE("finite differences") {
      const Grads out = call_node("ConvolutionBackward0", {g}, {true, true, true}, saved);
      for (std::size_t k = 0; k < 3; ++k) check_against_finite_differences(out, k, forward, {x, w, bias}, g);
    }
    SUBCASE("against torch") {
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bias = c.requires_grad_()
out = )") + c.torch_forward + R"(
fn = out.grad_fn
assert fn.name() == "ConvolutionBackward0"
)" + kSeededGrad + R"(
result = (fn._saved_input, fn._saved_weight, T(fn._saved_stride), T(fn._saved_padding), T(fn._saved_dilation),
          fn._saved_transposed, T(fn._saved_output_padding), fn._saved_groups, T(fn._saved_bias_sym_sizes_opt),
          g, *torch.autograd.grad(out, (x, w, bias), g))
)", {x, w, bias});
      const Saved from_torch = {{"bias_sym_sizes_opt", int_list(r[8])}, {"dilation", int_list(r[4])},
                                {"groups", r[7].item<std::int64_t>()}, {"input", r[0]},
                                {"output_padding", int_list(r[6])}, {"padding", int_list(r[3])},
                                {"stride", int_list(r[2])}, {"transposed", r[5].item<bool>()}, {"weight", r[1]}};
      CHECK(r[5].item<bool>() == c.transposed);
      const Grads out = call_node("ConvolutionBackward0", {r[9]}, {true, true, true}, from_torch);
      CHECK_TENSOR(*out[0], r[10]);
      CHECK_TENSOR(*out[1], r[11]);
      CHECK_TENSOR(*out[2], r[12]);
    }
  }
  const Tensor x = random64({1, 2, 5}, 54), w = random64({3, 2, 2}, 55), g = random64({1, 3, 4}, 56);
  const Saved saved = {{"bias_sym_sizes_opt", None{}}, {"dilation", IntList{1}}, {"groups", std::int64_t{1}},
                       {"input", x}, {"output_padding", IntList{0}}, {"padding", IntList{0}},
                       {"stride", IntList{1}}, {"transposed", false}, {"weight", w}};
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("ConvolutionBackward0", {g}, {false, true, false}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 2, 2});
    CHECK_FALSE(out[2].has_value());
    for (const auto& grad : call_node("ConvolutionBackward0", {std::nullopt}, {true, true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("errors") {
    Saved four_d = saved;
    four_d["input"] = random64({1, 2, 3, 3, 3, 3}, 1);
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {g}, {true, true, true}, four_d),
                         "ConvolutionBackward0: 4-d convolution (input [1,2,3,3,3,3]) is not supported; "
                         "1-d, 2-d and 3-d are",
                         Error);
    Saved bad_stride = saved;
    bad_stride["stride"] = IntList{1, 1};
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {g}, {true, true, true}, bad_stride),
                         "ConvolutionBackward0: expected stride to be a single integer value or a list of 1 values "
                         "to match the convolution dimensions, but got stride=[1,1]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {random64({1, 3, 5}, 1)}, {true, true, true}, saved),
                         "ConvolutionBackward0: grad [1,3,5] is not the output [1,3,4] of the convolution of input "
                         "[1,2,5] with weight [3,2,2], stride [1], padding [0], dilation [1], output_padding [0], "
                         "groups 1",
                         Error);
    Saved huge_dilation = saved;  // dilation * (kernel - 1) + 1 overflows int64
    huge_dilation["dilation"] = IntList{std::numeric_limits<std::int64_t>::max()};
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {g}, {true, true, true}, huge_dilation),
                         "ConvolutionBackward0: 9223372036854775807 + 1 overflows int64", Error);
    Saved output_padding = saved;
    output_padding["output_padding"] = IntList{1};
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {g}, {true, true, true}, output_padding),
                         "ConvolutionBackward0: output_padding is not supported for non-transposed convolutions, got "
                         "output_padding=[1]",
                         Error);
    // Without channels any groups would divide them: the weight's grad would loop over 2^40 groups.
    Saved many_groups = saved;
    many_groups["input"] = zeros({1, 0, 3}, DType::Float64), many_groups["weight"] = zeros({2, 0, 1}, DType::Float64);
    many_groups["groups"] = std::int64_t{1} << 40;
    CHECK_THROWS_WITH_AS(call_node("ConvolutionBackward0", {zeros({1, 0, 3}, DType::Float64)}, {false, true, false},
                                   many_groups),
                         "ConvolutionBackward0: weight [2,0,1] does not split into groups=1099511627776 along dim 0",
                         Error);
  }
  SUBCASE("against torch: one value for every spatial dim, and an input without channels") {
    // aten.convolution takes (and the node saves) a stride, padding or dilation of one value.
    const auto r = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bias = c.requires_grad_()
out = torch.ops.aten.convolution(x, w, bias, [2], [1], [1], False, [0], 2)
fn = out.grad_fn
g = torch.ones_like(out)
T = lambda s: torch.tensor(list(s), dtype=torch.int64)
result = (T(fn._saved_stride), T(fn._saved_padding), g, *torch.autograd.grad(out, (x, w, bias), g))
)",
                              {random64({1, 2, 5, 5}, 57), random64({4, 1, 3, 3}, 58), random64({4}, 59)});
    CHECK(int_list(r[0]) == IntList{2});
    const Saved one_value = {{"bias_sym_sizes_opt", IntList{4}}, {"dilation", IntList{1}}, {"groups", std::int64_t{2}},
                             {"input", random64({1, 2, 5, 5}, 57)}, {"output_padding", IntList{0}},
                             {"padding", int_list(r[1])}, {"stride", int_list(r[0])}, {"transposed", false},
                             {"weight", random64({4, 1, 3, 3}, 58)}};
    const Grads out = call_node("ConvolutionBackward0", {r[2]}, {true, true, true}, one_value);
    for (std::size_t k = 0; k < 3; ++k) CHECK_TENSOR(*out[k], r[3 + k]);
    // ATen's "Empty" backend: no output channels, zeros for every grad, the bias's of its own size.
    const auto e = torch_exec(R"(
x = a.requires_grad_(); w = b.requires_grad_(); bias = c.requires_grad_()
out = F.conv1d(x, w, bias)
g = torch.ones_like(out)
result = (g, *torch.autograd.grad(out, (x, w, bias), g))
)", {zeros({1, 0, 3}, DType::Float64), zeros({2, 0, 1}, DType::Float64), random64({2}, 60)});
    CHECK(e[0].sizes() == Shape{1, 0, 3});
    Saved no_channels = saved;
    no_channels["input"] = zeros({1, 0, 3}, DType::Float64), no_channels["weight"] = zeros({2, 0, 1}, DType::Float64);
    no_channels["bias_sym_sizes_opt"] = IntList{2};
    const Grads empty = call_node("ConvolutionBackward0", {e[0]}, {true, true, true}, no_channels);
    for (std::size_t k = 0; k < 3; ++k) CHECK_TENSOR(*empty[k], e[1 + k]);
  }
}

// ------------------------------------------------------------------ pooling ---

TEST_CASE("MaxPool2DWithIndicesBackward0") {
  const Tensor x = random64({2, 2, 4, 4}, 60), g = random64({2, 2, 2, 2}, 61);
  const auto [pooled, indices] = max_pool2d_with_indices(x, {2, 2});
  const Saved saved = {{"ceil_mode", false}, {"dilation", IntList{1, 1}}, {"kernel_size", IntList{2, 2}},
                       {"padding", IntList{0, 0}}, {"self", x}, {"stride", IntList{2, 2}}, {"result1", indices}};

  SUBCASE("finite differences, without ties") {
    const Grads out = call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, saved);
    auto forward = [](const std::vector<Tensor>& in) { return max_pool2d_with_indices(in[0], {2, 2}).first; };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("MaxPool2DWithIndicesBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MaxPool2DWithIndicesBackward0", kNoGrad, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: ties, overlapping windows, padding, ceil_mode, dilation, unbatched [C, H, W]") {
    // Values rounded to integers tie often; the indices torch chose decide where the grad goes.
    const Tensor tied = tensor({{{1.0, 3.0, 3.0, 0.0, 2.0}, {3.0, 3.0, 1.0, 3.0, 2.0}, {0.0, 2.0, 3.0, 3.0, 1.0},
                                 {2.0, 2.0, 1.0, 0.0, 3.0}, {1.0, 3.0, 3.0, 2.0, 2.0}}},
                               DType::Float64);
    const std::vector<std::string> forwards = {
        "F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True)[0]",
        "F.max_pool2d(x, 2, stride=1, return_indices=True)[0]",
        "F.max_pool2d(x, 2, dilation=2, return_indices=True)[0]",
        "F.max_pool2d(x, 2, ceil_mode=True)"};
    for (const std::string& forward : forwards) {
      CAPTURE(forward);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == "MaxPool2DWithIndicesBackward0"
)" + kSeededGrad + R"(
result = (fn._saved_self, fn._saved_result1, T(fn._saved_kernel_size), T(fn._saved_stride), T(fn._saved_padding),
          T(fn._saved_dilation), fn._saved_ceil_mode, g, *torch.autograd.grad(out, (x,), g))
)", {tied});
      const Saved from_torch = {{"ceil_mode", r[6].item<bool>()}, {"dilation", int_list(r[5])},
                                {"kernel_size", int_list(r[2])}, {"padding", int_list(r[4])},
                                {"self", r[0]}, {"stride", int_list(r[3])}, {"result1", r[1]}};
      const Tensor grad_self = *call_node("MaxPool2DWithIndicesBackward0", {r[7]}, {true}, from_torch)[0];
      CHECK_TENSOR(grad_self, r[8]);
    }
  }
  SUBCASE("errors") {
    Saved bad_indices = saved;
    bad_indices["result1"] = zeros({2, 2, 3, 3}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, bad_indices),
                         "MaxPool2DWithIndicesBackward0: indices [2,2,3,3] do not have the grad's shape [2,2,2,2]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {random64({2, 2, 3, 3}, 1)}, {true}, saved),
                         "MaxPool2DWithIndicesBackward0: grad [2,2,3,3] is not the max_pool2d output of self "
                         "[2,2,4,4] with kernel_size [2,2], stride [2,2], padding [0,0], dilation [1,1]",
                         Error);
    Saved three_sizes = saved;
    three_sizes["kernel_size"] = IntList{2, 2, 2};
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, three_sizes),
                         "MaxPool2DWithIndicesBackward0: kernel_size must be a single int or two ints, got "
                         "kernel_size=[2,2,2]",
                         Error);
    Saved huge_kernel = saved;  // ATen narrows the parameters to int
    huge_kernel["kernel_size"] = IntList{std::int64_t{1} << 40};
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, huge_kernel),
                         "MaxPool2DWithIndicesBackward0: kernel_size=[1099511627776] does not fit in an int", Error);
    Saved float_indices = saved;
    float_indices["result1"] = g;
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, float_indices),
                         "MaxPool2DWithIndicesBackward0: indices must be int64, got float64", Error);
    Saved outside = saved;
    outside["result1"] = full({2, 2, 2, 2}, 16, DType::Int64);  // a 4x4 plane has positions 0..15
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackward0", {g}, {true}, outside),
                         "MaxPool2DWithIndicesBackward0: index 16 in result1 is out of range for self's 4x4 plane",
                         Error);
  }
  SUBCASE("an index of -1 drops its grad, as ATen's kernel skips it") {
    const Saved skip = {{"ceil_mode", false},        {"dilation", IntList{1}}, {"kernel_size", IntList{2}},
                        {"padding", IntList{0}},      {"self", random64({1, 1, 2, 4}, 62)},
                        {"stride", IntList{}},        {"result1", tensor({{{{-1, 6}}}}, DType::Int64)}};
    const Tensor grad_self =
        *call_node("MaxPool2DWithIndicesBackward0", {tensor({{{{3.0, 5.0}}}}, DType::Float64)}, {true}, skip)[0];
    CHECK_TENSOR(grad_self, tensor({{{{0.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 5.0, 0.0}}}}, DType::Float64));
  }
}

TEST_CASE("MaxPool2DWithIndicesBackwardBackward0") {
  const Tensor x = random64({2, 2, 4, 5}, 63);
  const auto [pooled, indices] = max_pool2d_with_indices(x, {2, 2}, {1, 2});  // overlapping rows
  const Tensor g = random64({2, 2, 4, 5}, 64), grad_output = random64(pooled.sizes(), 65);
  const Saved saved = {{"indices", indices}, {"self_info", TypeAndSize{x.sizes(), {}}}};
  // max_pool2d's backward, linear in grad_output: each grad_output added at its index in self's plane.
  auto backward = [&](const std::vector<Tensor>& in) {
    const Tensor flat = reshape(in[0], {4, -1}), flat_indices = reshape(indices, {4, -1});
    return reshape(scatter_add(zeros({4, 20}, DType::Float64), 1, flat_indices, flat), x.sizes());
  };
  SUBCASE("finite differences in grad_output; self's grad is zero") {
    const Grads out = call_node("MaxPool2DWithIndicesBackwardBackward0", {g}, {true, true}, saved);
    check_against_finite_differences(out, 0, backward, {grad_output}, g);
    CHECK_TENSOR(*out[1], zeros(x.sizes(), DType::Float64));
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node("MaxPool2DWithIndicesBackwardBackward0", {g}, {true, false}, saved);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    for (const auto& grad : call_node("MaxPool2DWithIndicesBackwardBackward0", {std::nullopt}, {true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  SUBCASE("against torch, in each floating dtype, batched and unbatched, with ties") {
    const Tensor tied = div(mul(random64({2, 5, 5}, 66), 1.5), 1, "floor");
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const Tensor& input : {x, tied}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(input.dim());
        const auto r = torch_exec(R"(
x = a.requires_grad_()
pooled, indices = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True)
go = torch.randn(pooled.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(x.dtype)
go.requires_grad_()
out = torch.ops.aten.max_pool2d_with_indices_backward(go, x, [3, 3], [2, 2], [1, 1], [1, 1], True, indices)
fn = out.grad_fn
assert fn.name() == "MaxPool2DWithIndicesBackwardBackward0", fn.name()
assert not hasattr(fn, "_saved_self_info")
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_indices, g, *torch.autograd.grad(out, (go, x), g))
)",
                                  {input.to(dtype)});
        const Saved from_torch = {{"indices", r[0]}, {"self_info", TypeAndSize{input.sizes(), {dtype, {}, {}, {}}}}};
        const Grads out = call_node("MaxPool2DWithIndicesBackwardBackward0", {r[1]}, {true, true}, from_torch);
        CHECK(out[0]->dtype() == dtype);
        CHECK_TENSOR(*out[0], r[2], 0, 0);  // a gather: exact
        CHECK(out[1]->dtype() == dtype);
        CHECK_TENSOR(*out[1], r[3], 0, 0);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackwardBackward0", {random64({2, 2, 4, 4}, 1)}, {true, true},
                                   saved),
                         "MaxPool2DWithIndicesBackwardBackward0: grad [2,2,4,4] does not have self's shape [2,2,4,5]",
                         Error);
    Saved outside = saved;
    outside["indices"] = full(indices.sizes(), 20, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackwardBackward0", {g}, {true, false}, outside),
                         "MaxPool2DWithIndicesBackwardBackward0: index 20 in indices is out of range for self's 4x5 "
                         "plane",
                         Error);
    Saved other_batch = saved;
    other_batch["indices"] = zeros({3, 2, 3, 2}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackwardBackward0", {g}, {true, false}, other_batch),
                         "MaxPool2DWithIndicesBackwardBackward0: indices [3,2,3,2] do not have the leading dims of "
                         "self [2,2,4,5]",
                         Error);
    Saved float_indices = saved;
    float_indices["indices"] = pooled;
    CHECK_THROWS_WITH_AS(call_node("MaxPool2DWithIndicesBackwardBackward0", {g}, {true, false}, float_indices),
                         "MaxPool2DWithIndicesBackwardBackward0: indices must be int64, got float64", Error);
  }
}

TEST_CASE("AvgPool2DBackward0") {
  struct Case {
    const char* torch_forward;
    IntList kernel_size, stride, padding;
    bool ceil_mode, count_include_pad;
    std::optional<std::int64_t> divisor_override;
  };
  const std::vector<Case> cases = {
      {"F.avg_pool2d(x, 2)", {2, 2}, {}, {0, 0}, false, true, std::nullopt},
      {"F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)", {3, 3}, {2, 2}, {1, 1}, true, true, std::nullopt},
      {"F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=1, ceil_mode=True, count_include_pad=False)", {3, 2}, {2, 1},
       {1, 1}, true, false, std::nullopt},
      {"F.avg_pool2d(x, 2, stride=1, padding=1, divisor_override=3)", {2, 2}, {1, 1}, {1, 1}, false, true, 3},
  };
  const Tensor x = random64({2, 2, 5, 6}, 70);
  for (const Case& c : cases) {
    CAPTURE(c.torch_forward);
    auto forward = [&](const std::vector<Tensor>& in) {
      return avg_pool2d(in[0], c.kernel_size, c.stride, c.padding, c.ceil_mode, c.count_include_pad,
                        c.divisor_override);
    };
    const Tensor g = random64(forward({x}).sizes(), 71);
    const FieldValue divisor_override = c.divisor_override ? FieldValue(*c.divisor_override) : FieldValue(None{});
    const Saved saved = {{"ceil_mode", c.ceil_mode}, {"count_include_pad", c.count_include_pad},
                         {"divisor_override", divisor_override},
                         {"kernel_size", c.kernel_size}, {"padding", c.padding}, {"self", x}, {"stride", c.stride}};
    SUBCASE("finite differences") {
      check_against_finite_differences(call_node("AvgPool2DBackward0", {g}, {true}, saved), 0, forward, {x}, g);
    }
    SUBCASE("against torch") {
      const auto r = torch_exec(std::string(R"(
x = a.requires_grad_()
out = )") + c.torch_forward + R"(
fn = out.grad_fn
assert fn.name() == "AvgPool2DBackward0"
)" + kSeededGrad + R"(
d = fn._saved_divisor_override
result = (fn._saved_self, T(fn._saved_kernel_size), T(fn._saved_stride), T(fn._saved_padding), fn._saved_ceil_mode,
          fn._saved_count_include_pad, d is None, 0 if d is None else d, g, *torch.autograd.grad(out, (x,), g))
)", {x});
      const Saved from_torch = {
          {"ceil_mode", r[4].item<bool>()}, {"count_include_pad", r[5].item<bool>()},
          {"divisor_override", r[6].item<bool>() ? FieldValue(None{}) : FieldValue(r[7].item<std::int64_t>())},
          {"kernel_size", int_list(r[1])}, {"padding", int_list(r[3])}, {"self", r[0]}, {"stride", int_list(r[2])}};
      CHECK_TENSOR(*call_node("AvgPool2DBackward0", {r[8]}, {true}, from_torch)[0], r[9]);
    }
  }
  const Saved saved = {{"ceil_mode", false}, {"count_include_pad", true}, {"divisor_override", None{}},
                       {"kernel_size", IntList{2, 2}}, {"padding", IntList{0, 0}}, {"self", x}, {"stride", IntList{}}};
  const Tensor g = random64({2, 2, 2, 3}, 72);
  SUBCASE("need mask, undefined grad, unbatched and float32") {
    CHECK_FALSE(call_node("AvgPool2DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("AvgPool2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    Saved unbatched = saved;
    unbatched["self"] = x.to(DType::Float32);
    const Tensor grad_self = *call_node("AvgPool2DBackward0", {g.to(DType::Float32)}, {true}, unbatched)[0];
    CHECK(grad_self.dtype() == DType::Float32);
    unbatched["self"] = select(x, 0, 0);
    CHECK(call_node("AvgPool2DBackward0", {select(g, 0, 0)}, {true}, unbatched)[0]->sizes() == Shape{2, 5, 6});
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AvgPool2DBackward0", {random64({2, 2, 3, 3}, 1)}, {true}, saved),
                         "AvgPool2DBackward0: grad [2,2,3,3] is not the avg_pool2d output of self [2,2,5,6] with "
                         "kernel_size [2,2], stride [], padding [0,0]",
                         Error);
    Saved zero_divisor = saved;
    zero_divisor["divisor_override"] = std::int64_t{0};
    CHECK_THROWS_WITH_AS(call_node("AvgPool2DBackward0", {g}, {true}, zero_divisor),
                         "AvgPool2DBackward0: divisor_override is 0", Error);
    Saved negative_padding = saved;
    negative_padding["padding"] = IntList{-1};
    CHECK_THROWS_WITH_AS(call_node("AvgPool2DBackward0", {g}, {true}, negative_padding),
                         "AvgPool2DBackward0: padding must be between 0 and half the kernel size, got padding=[-1] "
                         "and kernel_size=[2,2]",
                         Error);
    Saved tall = saved;  // an empty self may have any height: H + 2 * padding overflows int64
    tall["self"] = empty({0, 1, std::numeric_limits<std::int64_t>::max() - 1, 1}, DType::Float64);
    tall["padding"] = IntList{1};
    CHECK_THROWS_WITH_AS(call_node("AvgPool2DBackward0", {empty({0, 1, 1, 3}, DType::Float64)}, {true}, tall),
                         "AvgPool2DBackward0: 9223372036854775806 + 2 overflows int64", Error);
  }
}

TEST_CASE("AdaptiveAvgPool2DBackward0") {
  const Tensor x = random64({2, 3, 7, 5}, 80);
  SUBCASE("finite differences and torch, with overlapping windows") {
    for (const IntList& size : {IntList{3, 2}, IntList{4, 3}, IntList{7, 5}}) {
      CAPTURE(str(size));
      auto forward = [&](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], size); };
      const Tensor g = random64(forward({x}).sizes(), 81);
      const Grads out = call_node("AdaptiveAvgPool2DBackward0", {g}, {true}, Saved{{"self", x}});
      check_against_finite_differences(out, 0, forward, {x}, g);
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = F.adaptive_avg_pool2d(x, tuple(b.tolist()))
fn = out.grad_fn
assert fn.name() == "AdaptiveAvgPool2DBackward0"
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_self, g, *torch.autograd.grad(out, (x,), g))
)", {x, from_vector(size, {2})});
      CHECK_TENSOR(*call_node("AdaptiveAvgPool2DBackward0", {r[1]}, {true}, Saved{{"self", r[0]}})[0], r[2]);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Tensor g = random64({2, 3, 3, 2}, 82);
    CHECK_FALSE(call_node("AdaptiveAvgPool2DBackward0", {g}, {false}, Saved{{"self", x}})[0].has_value());
    CHECK_FALSE(call_node("AdaptiveAvgPool2DBackward0", {std::nullopt}, {true}, Saved{{"self", x}})[0].has_value());
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AdaptiveAvgPool2DBackward0", {random64({3, 3, 2}, 1)}, {true}, Saved{{"self", x}}),
                         "AdaptiveAvgPool2DBackward0: grad [3,3,2] does not fit self [2,3,7,5]", Error);
  }
  SUBCASE("an empty batch: zeros, without visiting the grad's (any) output positions") {
    const Tensor grad = empty({0, 1, std::numeric_limits<std::int64_t>::max() - 1, 1}, DType::Float64);
    const Tensor grad_self =
        *call_node("AdaptiveAvgPool2DBackward0", {grad}, {true}, Saved{{"self", zeros({0, 1, 7, 5}, DType::Float64)}})[0];
    CHECK(grad_self.sizes() == Shape{0, 1, 7, 5});
  }
}

// ------------------------------------------------------- adaptive max pooling, unpooling ---

// torch's adaptive_max_pool2d of a (float64) on output size b: (self, result1, the seeded grad, the grad of x).
std::vector<Tensor> torch_adaptive_max_pool2d(const Tensor& x, const IntList& size) {
  return torch_exec(R"(
x = a.requires_grad_()
out = F.adaptive_max_pool2d(x, tuple(b.tolist()), return_indices=True)[0]
fn = out.grad_fn
assert fn.name() == "AdaptiveMaxPool2DBackward0", fn.name()
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_self, fn._saved_result1, g, *torch.autograd.grad(out, (x,), g))
)",
                    {x, from_vector(size, {static_cast<std::int64_t>(size.size())})});
}

// The values at `indices` of each H*W plane: the pooling, as a function of self, for fixed indices.
Tensor gather_planes(const Tensor& self, const Tensor& indices) {
  const std::int64_t planes = numel_of(Shape(self.sizes().begin(), self.sizes().end() - 2));
  const std::int64_t per_plane = indices.numel() / planes;
  return reshape(gather(reshape(self, {planes, -1}), 1, reshape(indices, {planes, per_plane})), indices.sizes());
}

TEST_CASE("AdaptiveMaxPool2DBackward0") {
  const Tensor x = random64({2, 3, 7, 5}, 180);
  SUBCASE("finite differences and torch: disjoint and overlapping windows, unbatched") {
    for (const auto& [input, size] : std::vector<std::pair<Tensor, IntList>>{
             {x, {3, 2}}, {x, {4, 4}}, {x, {7, 5}}, {random64({3, 6, 6}, 181), {2, 3}}}) {
      CAPTURE(str(size));
      const auto r = torch_adaptive_max_pool2d(input, size);
      const Grads out = call_node("AdaptiveMaxPool2DBackward0", {r[2]}, {true}, Saved{{"self", r[0]}, {"result1", r[1]}});
      CHECK_TENSOR(*out[0], r[3]);
      const Tensor indices = r[1];
      check_against_finite_differences(
          out, 0, [&](const std::vector<Tensor>& in) { return gather_planes(in[0], indices); }, {input}, r[2]);
    }
  }
  SUBCASE("ties: the indices torch chose decide") {
    const Tensor tied = div(mul(random64({1, 2, 6, 6}, 182), 1.5), 1, "floor");
    const auto r = torch_adaptive_max_pool2d(tied, {4, 4});
    CHECK_TENSOR(*call_node("AdaptiveMaxPool2DBackward0", {r[2]}, {true}, Saved{{"self", r[0]}, {"result1", r[1]}})[0],
                 r[3]);
  }
  const Saved saved = {{"self", x}, {"result1", zeros({2, 3, 3, 2}, DType::Int64)}};
  SUBCASE("need mask and undefined grad") {
    const Tensor g = random64({2, 3, 3, 2}, 183);
    CHECK_FALSE(call_node("AdaptiveMaxPool2DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("AdaptiveMaxPool2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("AdaptiveMaxPool2DBackward0", {random64({2, 4, 3, 2}, 1)}, {true}, saved),
                         "AdaptiveMaxPool2DBackward0: grad [2,4,3,2] does not fit self [2,3,7,5] ([C, H, W] or "
                         "[N, C, H, W], pooled over H and W)",
                         Error);
    Saved out_of_range = saved;
    out_of_range["result1"] = full({2, 3, 3, 2}, 35, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("AdaptiveMaxPool2DBackward0", {random64({2, 3, 3, 2}, 1)}, {true}, out_of_range),
                         "AdaptiveMaxPool2DBackward0: index 35 in result1 is out of range for self's plane of 35 "
                         "elements [7,5]",
                         Error);
  }
}

TEST_CASE("AdaptiveMaxPool3DBackward0") {
  SUBCASE("finite differences and torch: overlapping boxes, unbatched, ties") {
    for (const auto& [input, size] : std::vector<std::pair<Tensor, IntList>>{
             {random64({2, 2, 5, 4, 3}, 185), {3, 2, 2}},
             {random64({3, 4, 4, 4}, 186), {3, 3, 2}},
             {div(mul(random64({1, 2, 4, 4, 4}, 187), 1.5), 1, "floor"), {2, 3, 3}}}) {
      CAPTURE(str(size));
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = F.adaptive_max_pool3d(x, tuple(b.tolist()), return_indices=True)[0]
fn = out.grad_fn
assert fn.name() == "AdaptiveMaxPool3DBackward0", fn.name()
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_self, fn._saved_result1, g, *torch.autograd.grad(out, (x,), g))
)",
                                {input, from_vector(size, {3})});
      const Grads out = call_node("AdaptiveMaxPool3DBackward0", {r[2]}, {true}, Saved{{"self", r[0]}, {"result1", r[1]}});
      CHECK_TENSOR(*out[0], r[3]);
      const Tensor indices = r[1];
      const std::int64_t planes = numel_of(Shape(input.sizes().begin(), input.sizes().end() - 3));
      auto forward = [&](const std::vector<Tensor>& in) {
        return reshape(gather(reshape(in[0], {planes, -1}), 1, reshape(indices, {planes, -1})), indices.sizes());
      };
      if (size != IntList{2, 3, 3}) check_against_finite_differences(out, 0, forward, {input}, r[2]);  // no ties
    }
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Tensor x = random64({1, 2, 4, 4, 4}, 188);
    const Saved saved = {{"self", x}, {"result1", zeros({1, 2, 2, 2, 2}, DType::Int64)}};
    const Tensor g = random64({1, 2, 2, 2, 2}, 189);
    CHECK_FALSE(call_node("AdaptiveMaxPool3DBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("AdaptiveMaxPool3DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    Saved out_of_range = saved;
    out_of_range["result1"] = full({1, 2, 2, 2, 2}, 64, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("AdaptiveMaxPool3DBackward0", {g}, {true}, out_of_range),
                         "AdaptiveMaxPool3DBackward0: index 64 in result1 is out of range for self's plane of 64 "
                         "elements [4,4,4]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("AdaptiveMaxPool3DBackward0", {random64({2, 2, 2, 2}, 1)}, {true}, saved),
                         doctest::Contains("AdaptiveMaxPool3DBackward0: grad [2,2,2,2] does not fit self [1,2,4,4,4]"),
                         Error);
  }
}

// Unpools x with torch's max_pool indices of a random tensor: (indices, the seeded grad, the grad of x).
std::vector<Tensor> torch_max_unpool(const char* node, const std::string& pool, const std::string& unpool,
                                     const Tensor& pooled_input, const Tensor& x) {
  return torch_exec("_, indices = " + pool + "\n"
                    "x = b.requires_grad_()\n"
                    "out = " + unpool + "\n"
                    "fn = out.grad_fn\n"
                    "assert fn.name() == '" + node + "', fn.name()\n"
                    "assert torch.equal(fn._saved_indices, indices)\n" + kSeededGrad +
                    "result = (fn._saved_indices, g, *torch.autograd.grad(out, (x,), g))\n",
                    {pooled_input, x});
}

// max_unpool as a function of self for fixed indices: self's values put at their flat positions
// in zero planes of `plane` elements each (the last `spatial` dims of `output_sizes`).
Tensor unpool(const Tensor& self, const Tensor& indices, const Shape& output_sizes, std::size_t spatial) {
  const Shape batch(self.sizes().begin(), self.sizes().end() - static_cast<std::ptrdiff_t>(spatial));
  Shape flat = batch;
  flat.push_back(-1);
  Shape planes = batch;
  planes.push_back(numel_of(Shape(output_sizes.end() - static_cast<std::ptrdiff_t>(spatial), output_sizes.end())));
  return reshape(scatter(zeros(planes, self.dtype()), -1, reshape(indices, flat), reshape(self, flat)), output_sizes);
}

TEST_CASE("MaxUnpool2DBackward0") {
  SUBCASE("finite differences and torch: batched, and unbatched with an output_size") {
    struct Case {
      Shape pooled_sizes, x_sizes, out_sizes;
      std::string pool, unpool;
      std::size_t spatial;
    };
    for (const Case& c : {Case{{2, 3, 4, 6}, {2, 3, 2, 3}, {2, 3, 4, 6}, "F.max_pool2d(a, 2, return_indices=True)",
                               "F.max_unpool2d(x, indices, 2)", 2},
                          Case{{3, 5, 4}, {3, 2, 2}, {3, 5, 4}, "F.max_pool2d(a, 2, return_indices=True)",
                               "F.max_unpool2d(x, indices, 2, output_size=(5, 4))", 2}}) {
      CAPTURE(c.unpool);
      const Tensor x = random64(c.x_sizes, 190);
      const auto r = torch_max_unpool("MaxUnpool2DBackward0", c.pool, c.unpool, random64(c.pooled_sizes, 191), x);
      const Grads out = call_node("MaxUnpool2DBackward0", {r[1]}, {true}, Saved{{"indices", r[0]}});
      CHECK_TENSOR(*out[0], r[2]);
      const Tensor indices = r[0];
      const Shape out_sizes = c.out_sizes;
      const std::size_t spatial = c.spatial;
      check_against_finite_differences(
          out, 0, [&](const std::vector<Tensor>& in) { return unpool(in[0], indices, out_sizes, spatial); }, {x},
          r[1]);
    }
  }
  const Saved saved = {{"indices", zeros({2, 2, 2}, DType::Int64)}};
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("MaxUnpool2DBackward0", {random64({2, 4, 4}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MaxUnpool2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MaxUnpool2DBackward0", {random64({3, 4, 4}, 1)}, {true}, saved),
                         "MaxUnpool2DBackward0: grad [3,4,4] does not fit indices [2,2,2] (the same leading dims, then "
                         "the 2 unpooled dims)",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("MaxUnpool2DBackward0", {random64({2}, 1)}, {true},
                                   Saved{{"indices", zeros({2}, DType::Int64)}}),
                         "MaxUnpool2DBackward0: indices [2] must have at least 2 dims", Error);
    CHECK_THROWS_WITH_AS(call_node("MaxUnpool2DBackward0", {random64({2, 1, 1}, 1)}, {true},
                                   Saved{{"indices", full({2, 2, 2}, 3, DType::Int64)}}),
                         doctest::Contains("out of bounds"), Error);
  }
}

TEST_CASE("MaxUnpool3DBackward0") {
  SUBCASE("finite differences and torch") {
    const Tensor x = random64({2, 2, 2, 1, 2}, 192);
    const auto r = torch_max_unpool("MaxUnpool3DBackward0", "F.max_pool3d(a, 2, return_indices=True)",
                                    "F.max_unpool3d(x, indices, 2)", random64({2, 2, 4, 2, 4}, 193), x);
    const Grads out = call_node("MaxUnpool3DBackward0", {r[1]}, {true}, Saved{{"indices", r[0]}});
    CHECK_TENSOR(*out[0], r[2]);
    const Tensor indices = r[0];
    check_against_finite_differences(
        out, 0, [&](const std::vector<Tensor>& in) { return unpool(in[0], indices, {2, 2, 4, 2, 4}, 3); }, {x}, r[1]);
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Saved saved = {{"indices", zeros({1, 2, 2, 2}, DType::Int64)}};
    CHECK_FALSE(call_node("MaxUnpool3DBackward0", {random64({1, 4, 4, 4}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MaxUnpool3DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("MaxUnpool3DBackward0", {random64({1, 4, 4}, 1)}, {true}, saved),
                         doctest::Contains("MaxUnpool3DBackward0: grad [1,4,4] does not fit indices [1,2,2,2]"), Error);
  }
}

// ----------------------------------------------------------- adaptive avg pooling 3-d ---

// adaptive_avg_pool3d with L0 primitives: each output the mean of its box (ATen's start/end rule).
Tensor adaptive_avg_pool3d_reference(const Tensor& x, const IntList& size) {
  auto start = [](std::int64_t o, std::int64_t in, std::int64_t out) { return o * in / out; };
  auto end = [](std::int64_t o, std::int64_t in, std::int64_t out) { return ((o + 1) * in + out - 1) / out; };
  TensorList depth;
  for (std::int64_t od = 0; od < size[0]; ++od) {
    TensorList rows;
    for (std::int64_t oh = 0; oh < size[1]; ++oh) {
      TensorList columns;
      for (std::int64_t ow = 0; ow < size[2]; ++ow) {
        const std::int64_t d0 = start(od, x.size(-3), size[0]), d1 = end(od, x.size(-3), size[0]);
        const std::int64_t h0 = start(oh, x.size(-2), size[1]), h1 = end(oh, x.size(-2), size[1]);
        const std::int64_t w0 = start(ow, x.size(-1), size[2]), w1 = end(ow, x.size(-1), size[2]);
        const Tensor box = narrow(narrow(narrow(x, -3, d0, d1 - d0), -2, h0, h1 - h0), -1, w0, w1 - w0);
        columns.push_back(mean(box, {-3, -2, -1}));
      }
      rows.push_back(stack(columns, -1));
    }
    depth.push_back(stack(rows, -2));
  }
  return stack(depth, -3);
}

TEST_CASE("AdaptiveAvgPool3DBackward0") {
  const Tensor x = random64({2, 2, 5, 4, 3}, 200);
  SUBCASE("finite differences and torch: overlapping boxes, identity, unbatched") {
    for (const auto& [input, size] : std::vector<std::pair<Tensor, IntList>>{
             {x, {3, 2, 2}}, {x, {2, 3, 3}}, {x, {5, 4, 3}}, {random64({3, 4, 4, 4}, 201), {3, 2, 3}}}) {
      CAPTURE(str(size));
      const auto r = torch_exec(R"(
x = a.requires_grad_()
out = F.adaptive_avg_pool3d(x, tuple(b.tolist()))
fn = out.grad_fn
assert fn.name() == "AdaptiveAvgPool3DBackward0", fn.name()
)" + std::string(kSeededGrad) + R"(
result = (fn._saved_self, g, *torch.autograd.grad(out, (x,), g))
)",
                                {input, from_vector(size, {3})});
      const Grads out = call_node("AdaptiveAvgPool3DBackward0", {r[1]}, {true}, Saved{{"self", r[0]}});
      CHECK_TENSOR(*out[0], r[2]);
      check_against_finite_differences(
          out, 0, [&](const std::vector<Tensor>& in) { return adaptive_avg_pool3d_reference(in[0], size); }, {input},
          r[1]);
    }
  }
  SUBCASE("float16: computed in double, rounded once") {
    const Tensor h = random64({1, 2, 3, 3, 3}, 202).to(DType::Float16);
    const Tensor g = random64({1, 2, 2, 2, 2}, 203).to(DType::Float16);
    const Tensor expected = torch_eval1(
        "torch.autograd.grad(F.adaptive_avg_pool3d(a.requires_grad_(), 2), a, b)[0]", {h, g});
    CHECK_TENSOR(*call_node("AdaptiveAvgPool3DBackward0", {g}, {true}, Saved{{"self", h}})[0], expected, 1e-3, 1e-4);
  }
  SUBCASE("need mask, undefined grad and errors") {
    const Tensor g = random64({2, 2, 3, 2, 2}, 204);
    CHECK_FALSE(call_node("AdaptiveAvgPool3DBackward0", {g}, {false}, Saved{{"self", x}})[0].has_value());
    CHECK_FALSE(call_node("AdaptiveAvgPool3DBackward0", {std::nullopt}, {true}, Saved{{"self", x}})[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("AdaptiveAvgPool3DBackward0", {random64({2, 3, 2, 2}, 1)}, {true}, Saved{{"self", x}}),
                         "AdaptiveAvgPool3DBackward0: grad [2,3,2,2] does not fit self [2,2,5,4,3] ([C, D, H, W] or "
                         "[N, C, D, H, W], pooled over D, H and W)",
                         Error);
  }
}

// ------------------------------------------------------------------ attention ---

TEST_CASE("ScaledDotProductFlashAttentionForCpuBackward0") {
  const char* const kNode = "ScaledDotProductFlashAttentionForCpuBackward0";
  const Tensor q = random64({2, 2, 3, 4}, 110), k = random64({2, 2, 5, 4}, 111), v = random64({2, 2, 5, 4}, 112),
               g = random64({2, 2, 3, 4}, 113);
  const Saved saved = {{"attn_mask", None{}}, {"dropout_p", 0.0}, {"is_causal", false}, {"key", k}, {"query", q},
                       {"scale", None{}}, {"value", v}, {"logsumexp", zeros({2, 2, 3}, DType::Float64)},
                       {"output", zeros({2, 2, 3, 4}, DType::Float64)}};

  SUBCASE("finite differences") {
    const Grads out = call_node(kNode, {g}, {true, true, true}, saved);
    auto forward = [](const std::vector<Tensor>& in) {
      return matmul(softmax(mul(matmul(in[0], transpose(in[1], -2, -1)), 0.5), -1), in[2]);  // scale 1/sqrt(4)
    };
    for (std::size_t i = 0; i < 3; ++i) check_against_finite_differences(out, i, forward, {q, k, v}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Grads out = call_node(kNode, {g}, {false, false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK(out[2]->sizes() == Shape{2, 2, 5, 4});
    for (const auto& grad :
         call_node(kNode, kNoGrad, {true, true, true}, saved))
      CHECK_FALSE(grad.has_value());
  }
  // torch takes this path only when value's head dim equals query's (else the math path, no such node).
  SUBCASE("against torch: scale, causal, float and boolean masks, a fully masked row") {
    const std::vector<std::string> forwards = {
        "F.scaled_dot_product_attention(q, k, v)",
        "F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)",
        "F.scaled_dot_product_attention(q, k, v, attn_mask=torch.randn(3, 5, dtype=torch.float64))",
        "F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor("
        "[[True] * 5, [False] * 5, [True, False, True, False, True]]))",
    };
    for (const std::string& forward : forwards) {
      CAPTURE(forward);
      const auto r = torch_exec(R"(
torch.manual_seed(0)
q = a.requires_grad_(); k = b.requires_grad_(); v = c.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == "ScaledDotProductFlashAttentionForCpuBackward0"
)" + std::string(kSeededGrad) + R"(
m, s = fn._saved_attn_mask, fn._saved_scale
result = (m is None, torch.zeros(0) if m is None else m, s is None, s or 0.0, fn._saved_is_causal, fn._saved_dropout_p,
          fn._saved_query, fn._saved_key, fn._saved_value, fn._saved_logsumexp, fn._saved_output,
          g, *torch.autograd.grad(out, (q, k, v), g))
)", {q, k, v});
      const std::optional<double> scale = optional_double(r[2], r[3]);
      const Saved from_torch = {{"attn_mask", r[0].item<bool>() ? FieldValue(None{}) : FieldValue(r[1])},
                                {"dropout_p", r[5].item<double>()}, {"is_causal", r[4].item<bool>()},
                                {"key", r[7]}, {"query", r[6]},
                                {"scale", scale ? FieldValue(*scale) : FieldValue(None{})},
                                {"value", r[8]}, {"logsumexp", r[9]}, {"output", r[10]}};
      const Grads out = call_node(kNode, {r[11]},
                                  {true, true, true}, from_torch);
      for (std::size_t i = 0; i < 3; ++i) CHECK_TENSOR(*out[i], r[12 + i]);
    }
  }
  // enable_gqa=True: query has 4 heads, key and value 2; key/value head j serves query heads 2j and 2j + 1.
  const Tensor gqa_q = random64({2, 4, 3, 4}, 120), gqa_k = random64({2, 2, 5, 4}, 121),
               gqa_v = random64({2, 2, 5, 4}, 122), gqa_g = random64({2, 4, 3, 4}, 123),
               gqa_mask = random64({3, 5}, 124);
  SUBCASE("grouped-query attention: finite differences") {
    Saved gqa = saved;
    gqa["query"] = gqa_q, gqa["key"] = gqa_k, gqa["value"] = gqa_v, gqa["attn_mask"] = gqa_mask;
    gqa["scale"] = 0.3;
    const Grads out = call_node(kNode, {gqa_g}, {true, true, true}, gqa);
    auto repeat_interleave_heads = [](const Tensor& kv) {  // [2, 2, 5, 4] -> [2, 4, 5, 4]
      return reshape(expand(unsqueeze(kv, 2), {2, 2, 2, 5, 4}), {2, 4, 5, 4});
    };
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor scores = add(mul(matmul(in[0], transpose(repeat_interleave_heads(in[1]), -2, -1)), 0.3), gqa_mask);
      return matmul(softmax(scores, -1), repeat_interleave_heads(in[2]));
    };
    for (std::size_t i = 0; i < 3; ++i) check_against_finite_differences(out, i, forward, {gqa_q, gqa_k, gqa_v}, gqa_g);
  }
  SUBCASE("grouped-query attention against torch: masks, causal, scale, dropout's math path; float64/32, bfloat16") {
    const std::vector<std::string> forwards = {
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True, scale=0.3)",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=torch.randn(3, 5).to(q.dtype))",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=torch.randn(2, 4, 3, 5).to(q.dtype))",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=torch.tensor("
        "[[True] * 5, [False] * 5, [True, False, True, False, True]]))",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=torch.rand(2, 4, 3, 5) > 0.4)",
        "F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=torch.randn(2, 1, 3, 5).to(q.dtype))",
    };
    for (DType dtype : {DType::Float64, DType::Float32, DType::BFloat16}) {
      for (const std::string& forward : forwards) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(forward);
        const auto r = torch_exec(R"(
torch.manual_seed(0)
q = a.requires_grad_(); k = b.requires_grad_(); v = c.requires_grad_()
out = )" + forward + R"(
fn = out.grad_fn
assert fn.name() == "ScaledDotProductFlashAttentionForCpuBackward0"
assert fn._saved_key.shape[1] == 2 and fn._saved_value.shape[1] == 2 and fn._saved_query.shape[1] == 4
)" + std::string(kSeededGrad) + R"(
m, s = fn._saved_attn_mask, fn._saved_scale
result = (m is None, torch.zeros(0) if m is None else m, s is None, s or 0.0, fn._saved_is_causal, fn._saved_dropout_p,
          fn._saved_query, fn._saved_key, fn._saved_value, fn._saved_logsumexp, fn._saved_output,
          g, *torch.autograd.grad(out, (q, k, v), g))
)", {gqa_q.to(dtype), gqa_k.to(dtype), gqa_v.to(dtype)});
        const std::optional<double> scale = optional_double(r[2], r[3]);
        const Saved from_torch = {{"attn_mask", r[0].item<bool>() ? FieldValue(None{}) : FieldValue(r[1])},
                                  {"dropout_p", r[5].item<double>()}, {"is_causal", r[4].item<bool>()},
                                  {"key", r[7]}, {"query", r[6]},
                                  {"scale", scale ? FieldValue(*scale) : FieldValue(None{})},
                                  {"value", r[8]}, {"logsumexp", r[9]}, {"output", r[10]}};
        const Grads out = call_node(kNode, {r[11]}, {true, true, true}, from_torch);
        const double rtol = dtype == DType::Float64 ? 1e-6 : dtype == DType::Float32 ? 1e-5 : 5e-2;
        const double atol = dtype == DType::Float64 ? 1e-9 : dtype == DType::Float32 ? 1e-6 : 5e-2;
        for (std::size_t i = 0; i < 3; ++i) CHECK_TENSOR(*out[i], r[12 + i], rtol, atol);
      }
    }
    // dropout_p > 0: the CPU build takes the math path (no such node); refgrad runs the nodes it records, seeded.
    const std::string nodes = torch_exec_text(R"(
torch.manual_seed(0)
out = F.scaled_dot_product_attention(a.requires_grad_(), b.requires_grad_(), c.requires_grad_(), dropout_p=0.5,
                                     enable_gqa=True)
result = out.grad_fn.name()
)", {gqa_q, gqa_k, gqa_v});
    CHECK(nodes != "ScaledDotProductFlashAttentionForCpuBackward0");
  }
  SUBCASE("errors") {
    Saved heads = saved;  // 3 query heads cannot share 2 key/value heads
    heads["query"] = random64({2, 3, 3, 4}, 1);
    CHECK_THROWS_WITH_AS(call_node(kNode, {random64({2, 3, 3, 4}, 2)}, {true, true, true}, heads),
                         "ScaledDotProductFlashAttentionForCpuBackward0: query [2,3,3,4], key [2,2,5,4], value "
                         "[2,2,5,4] and grad [2,3,3,4] do not fit [B, Hq, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev], "
                         "[B, Hq, L, Ev] with Hkv dividing Hq",
                         Error);
    Saved dropout = saved;
    dropout["dropout_p"] = 0.1;
    CHECK_THROWS_WITH_AS(call_node(kNode, {g}, {true, true, true}, dropout),
                         "ScaledDotProductFlashAttentionForCpuBackward0: dropout_p 0.1 is not supported yet (only 0)",
                         Error);
    Saved bad_key = saved;
    bad_key["key"] = random64({2, 2, 5, 3}, 1);
    CHECK_THROWS_WITH_AS(call_node(kNode, {g}, {true, true, true}, bad_key),
                         doctest::Contains("query [2,2,3,4], key [2,2,5,3], value [2,2,5,4] and grad [2,2,3,4] "
                                           "do not fit"),
                         Error);
    Saved big_mask = saved;  // it would broadcast the scores to 5 dims
    big_mask["attn_mask"] = zeros({3, 2, 2, 3, 5}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node(kNode, {g}, {true, true, true}, big_mask),
                         "ScaledDotProductFlashAttentionForCpuBackward0: attn_mask float64[3,2,2,3,5] must be a bool "
                         "or floating mask of 2 or 4 dims that broadcasts to the scores [2,2,3,5]",
                         Error);
    Saved no_keys = saved;  // torch's kernel divides by zero
    no_keys["key"] = random64({2, 2, 0, 4}, 1), no_keys["value"] = random64({2, 2, 0, 4}, 1);
    no_keys["attn_mask"] = None{};
    CHECK_THROWS_WITH_AS(call_node(kNode, {g}, {true, true, true}, no_keys),
                         "ScaledDotProductFlashAttentionForCpuBackward0: key [2,2,0,4] has no positions", Error);
  }
}

}  // TEST_SUITE
