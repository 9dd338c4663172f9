// Suite "nodes", Fourier transforms: FftC2CBackward0, FftR2CBackward0 and
// FftC2RBackward0, each
// (a) against finite differences of its forward (refgrad's _fft_* L0 ops,
//     tested against NumPy in tests/tensor/test_fft.cpp) in complex128/float64,
//     in PyTorch's convention: for the real loss L = Re(sum(conj(g) * f(x))),
//     the gradient of a complex x is dL/dRe(x) + i dL/dIm(x);
// (b) against torch, fed every `_saved_*` value of a real grad_fn (dim,
//     normalization, forward/onesided, self), in complex128 and complex64;
// and malformed grads raising.
#include <functional>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

Tensor random_complex(const Shape& sizes, std::uint64_t seed) {
  return complex(random64(sizes, seed), random64(sizes, seed + 1000));
}

Tensor parts_of(const Tensor& t) { return is_complex(t.dtype()) ? view_as_real(t.contiguous()) : t; }

using Forward1 = std::function<Tensor(const Tensor&)>;

// dL/dRe(x) + i dL/dIm(x) (dL/dx for a real x) of L(x) = Re(sum(conj(g) * f(x))),
// by central differences. The transforms are linear, so a difference quotient
// is exact up to rounding for any step: a step of 1 keeps the rounding small.
Tensor numerical_gradient(const Forward1& forward, const Tensor& x, const Tensor& g) {
  const auto loss = [&](const Tensor& at) {
    return sum(real(mul(conj(g), forward(at)))).item<double>();
  };
  const bool complex_input = is_complex(x.dtype());
  const Shape part_sizes = parts_of(x).sizes();
  const std::vector<double> values = parts_of(x).contiguous().to_vector<double>();
  std::vector<double> gradient(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto with_step = [&](double step) {
      std::vector<double> moved = values;
      moved[i] += step;
      const Tensor at = from_vector(moved, part_sizes);
      return loss(complex_input ? view_as_complex(at) : at);
    };
    gradient[i] = (with_step(1.0) - with_step(-1.0)) / 2.0;
  }
  const Tensor result = from_vector(gradient, part_sizes);
  return complex_input ? view_as_complex(result) : result;
}

// One forward: torch's call on x0 (recording `node`), the same with refgrad's
// L0 op, its input (complex128 or float64), and the saved fields torch exposes.
struct FftCase {
  std::string node;
  std::string torch_call;            // "torch._fft_c2c(x0, [1], 0, True)"
  Forward1 forward;                  // the same with L0 ops
  Tensor input;                      // complex128, or float64 for r2c
  std::vector<std::string> fields;   // read from the grad_fn as _saved_<field>
};

// A saved value as torch returns it (through torch_exec's tensors), bound as refgrad's schema wants it.
FieldValue field_value(const std::string& field, const Tensor& value) {
  if (field == "dim") return int_list(value);
  if (field == "normalization") return value.item<std::int64_t>();
  if (field == "forward" || field == "onesided") return value.item<bool>();
  return value;  // self
}

void check_fft_case(const FftCase& spec) {
  CAPTURE(spec.node);
  CAPTURE(spec.torch_call);
  const Tensor output = spec.forward(spec.input);
  const Tensor g = is_complex(output.dtype()) ? random_complex(output.sizes(), 31) : random64(output.sizes(), 31);
  std::string saved_values;
  for (const std::string& field : spec.fields)
    saved_values += field == "dim" ? "torch.tensor(fn._saved_dim, dtype=torch.int64), " : "fn._saved_" + field + ", ";
  const std::string code = "x0 = a.requires_grad_()\nout = " + spec.torch_call + "\nfn = out.grad_fn\n" +
                           "assert fn.name() == '" + spec.node + "', fn.name()\n" + "result = (" + saved_values +
                           "*torch.autograd.grad(out, (x0,), b))\n";
  for (const DType dtype : {DType::ComplexDouble, DType::ComplexFloat}) {
    CAPTURE(dtype_name(dtype));
    const bool single = dtype == DType::ComplexFloat;
    const DType real_dtype = single ? DType::Float32 : DType::Float64;
    const Tensor input = spec.input.to(is_complex(spec.input.dtype()) ? dtype : real_dtype);
    const Tensor grad = g.to(is_complex(g.dtype()) ? dtype : real_dtype);
    const std::vector<Tensor> r = torch_exec(code, {input, grad});
    REQUIRE(r.size() == spec.fields.size() + 1);
    Saved saved;
    for (std::size_t i = 0; i < spec.fields.size(); ++i) saved[spec.fields[i]] = field_value(spec.fields[i], r[i]);
    const Grads out = call_node(spec.node, {grad}, {true}, saved);
    REQUIRE(out[0].has_value());
    const Tensor& expected = r.back();
    CHECK(out[0]->dtype() == expected.dtype());
    const double rtol = single ? 1e-5 : 1e-12;
    const double scale = std::max(1.0, max(abs(parts_of(expected))).to(DType::Float64).item<double>());
    CHECK_TENSOR(parts_of(*out[0]), parts_of(expected), rtol, rtol * scale);
    if (!single) {  // (a) finite differences, in complex128/float64
      const Tensor numerical = numerical_gradient(spec.forward, spec.input, g);
      CHECK_TENSOR(parts_of(*out[0]), parts_of(numerical), 1e-10, 1e-10 * scale);
    }
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("FftC2CBackward0") {
  const Tensor x = random_complex({3, 2, 5}, 1);
  const std::vector<FftCase> cases = {
      {"FftC2CBackward0", "torch._fft_c2c(x0, [2], 0, True)",
       [](const Tensor& in) { return _fft_c2c(in, {2}, 0, true); }, x, {"dim", "forward", "normalization"}},
      {"FftC2CBackward0", "torch._fft_c2c(x0, [0, 2], 1, False)",
       [](const Tensor& in) { return _fft_c2c(in, {0, 2}, 1, false); }, x, {"dim", "forward", "normalization"}},
      {"FftC2CBackward0", "torch._fft_c2c(x0, [1, 0, 2], 2, True)",
       [](const Tensor& in) { return _fft_c2c(in, {1, 0, 2}, 2, true); }, x, {"dim", "forward", "normalization"}},
      {"FftC2CBackward0", "torch.fft.ifft(x0, dim=0)",  // what torch.fft records: normalization 2 (by 1/n)
       [](const Tensor& in) { return _fft_c2c(in, {0}, 2, false); }, x, {"dim", "forward", "normalization"}},
  };
  for (const FftCase& spec : cases) check_fft_case(spec);

  SUBCASE("undefined or unneeded grad, malformed grads") {
    const Saved saved{{"dim", IntList{1}}, {"forward", true}, {"normalization", std::int64_t{0}}};
    CHECK_FALSE(call_node("FftC2CBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_FALSE(call_node("FftC2CBackward0", {random_complex({2, 3}, 2)}, {false}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("FftC2CBackward0", {random64({2, 3}, 3)}, {true}, saved),
                         "FftC2CBackward0: grad must be complex, got float64 [2,3]", Error);
    CHECK_THROWS_WITH_AS(call_node("FftC2CBackward0", {random_complex({3}, 4)}, {true}, saved),
                         "FftC2CBackward0: dim 1 (of [1]) is out of range for grad [3]", Error);
  }
}

TEST_CASE("FftR2CBackward0") {
  const Tensor x = random64({4, 3, 6}, 5);
  const std::vector<std::string> fields = {"dim", "normalization", "onesided", "self"};
  const std::vector<FftCase> cases = {
      // one-sided along an even length (X[n/2] is its own mirror) and an odd one
      {"FftR2CBackward0", "torch._fft_r2c(x0, [2], 0, True)",
       [](const Tensor& in) { return _fft_r2c(in, {2}, 0, true); }, x, fields},
      {"FftR2CBackward0", "torch._fft_r2c(x0, [1], 2, True)",
       [](const Tensor& in) { return _fft_r2c(in, {1}, 2, true); }, x, fields},
      // several dims, one-sided along the last listed (dim 0), and a full (two-sided) transform
      {"FftR2CBackward0", "torch._fft_r2c(x0, [2, 0], 1, True)",
       [](const Tensor& in) { return _fft_r2c(in, {2, 0}, 1, true); }, x, fields},
      {"FftR2CBackward0", "torch._fft_r2c(x0, [0, 1], 1, False)",
       [](const Tensor& in) { return _fft_r2c(in, {0, 1}, 1, false); }, x, fields},
      {"FftR2CBackward0", "torch.fft.rfft(x0)",  // what torch.fft records
       [](const Tensor& in) { return _fft_r2c(in, {2}, 0, true); }, x, fields},
  };
  for (const FftCase& spec : cases) check_fft_case(spec);

  SUBCASE("undefined grad, malformed grads") {
    const Saved saved{{"dim", IntList{1}}, {"normalization", std::int64_t{0}}, {"onesided", true},
                      {"self", random64({2, 6}, 6)}};
    CHECK_FALSE(call_node("FftR2CBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("FftR2CBackward0", {random_complex({2, 6}, 7)}, {true}, saved),
                         "FftR2CBackward0: grad has shape [2,6] but the one-sided transform of self [2,6] along dim "
                         "[1] has shape [2,4]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("FftR2CBackward0", {random64({2, 4}, 8)}, {true}, saved),
                         "FftR2CBackward0: grad must be complex, got float64 [2,4]", Error);
    CHECK_THROWS_WITH_AS(call_node("FftR2CBackward0", {random_complex({8}, 9)}, {true}, saved),
                         "FftR2CBackward0: dim 1 (of [1]) is out of range for grad [8]", Error);
  }
}

TEST_CASE("FftC2RBackward0") {
  const std::vector<std::string> fields = {"dim", "normalization"};
  const std::vector<FftCase> cases = {
      // an even output length: X[0] and X[n/2] are their own mirrors, X[1 .. n/2-1] doubled
      {"FftC2RBackward0", "torch._fft_c2r(x0, [1], 0, 6)",
       [](const Tensor& in) { return _fft_c2r(in, {1}, 0, 6); }, random_complex({3, 4}, 10), fields},
      // an odd one: every X[k] but X[0] doubled
      {"FftC2RBackward0", "torch._fft_c2r(x0, [1], 2, 7)",
       [](const Tensor& in) { return _fft_c2r(in, {1}, 2, 7); }, random_complex({3, 4}, 11), fields},
      // several dims, the last listed (dim 0) the one-sided one
      {"FftC2RBackward0", "torch._fft_c2r(x0, [1, 0], 1, 4)",
       [](const Tensor& in) { return _fft_c2r(in, {1, 0}, 1, 4); }, random_complex({3, 5}, 12), fields},
      // a length of 1 and 2: nothing doubled
      {"FftC2RBackward0", "torch._fft_c2r(x0, [0], 0, 2)",
       [](const Tensor& in) { return _fft_c2r(in, {0}, 0, 2); }, random_complex({2, 3}, 13), fields},
      {"FftC2RBackward0", "torch._fft_c2r(x0, [0], 0, 1)",
       [](const Tensor& in) { return _fft_c2r(in, {0}, 0, 1); }, random_complex({1, 3}, 14), fields},
      {"FftC2RBackward0", "torch.fft.irfft(x0)",  // what torch.fft records: normalization 2 (by 1/n), n = 2 * (4 - 1)
       [](const Tensor& in) { return _fft_c2r(in, {1}, 2, 6); }, random_complex({3, 4}, 15), fields},
  };
  for (const FftCase& spec : cases) check_fft_case(spec);

  SUBCASE("undefined grad, malformed grads") {
    const Saved saved{{"dim", IntList{1}}, {"normalization", std::int64_t{0}}};
    CHECK_FALSE(call_node("FftC2RBackward0", {std::nullopt}, {true}, saved)[0].has_value());
    CHECK_THROWS_WITH_AS(call_node("FftC2RBackward0", {random_complex({2, 6}, 16)}, {true}, saved),
                         "FftC2RBackward0: grad must be float32 or float64 (c2r's output is real), got complex128 "
                         "[2,6]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("FftC2RBackward0", {random64({6}, 17)}, {true}, saved),
                         "FftC2RBackward0: dim 1 (of [1]) is out of range for grad [6]", Error);
    CHECK_THROWS_WITH_AS(call_node("FftC2RBackward0", {random64({6}, 18)}, {true},
                                   Saved{{"dim", IntList{}}, {"normalization", std::int64_t{0}}}),
                         "FftC2RBackward0: dim [] names no dim of grad [6]", Error);
  }
}

}  // TEST_SUITE
