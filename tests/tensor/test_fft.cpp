// _fft_c2c, _fft_r2c and _fft_c2r: a transform worked by hand, NumPy's
// np.fft (an independent FFT) in every normalization and over several dims,
// torch's own ops where ATen's conventions go beyond NumPy's (c2r of a
// spectrum that is not Hermitian, a full-length c2r input, dim order), the
// dtypes, and bad input raising.
#include <doctest/doctest.h>

#include <complex>
#include <string>
#include <vector>

#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;

namespace {

Tensor draw_real(const Shape& sizes, DType dtype, std::uint64_t seed) {
  Generator generator(seed);
  return randn(sizes, generator, DType::Float64).to(dtype);
}

Tensor draw_complex(const Shape& sizes, DType dtype, std::uint64_t seed) {
  Generator generator(seed);
  const Tensor re = randn(sizes, generator, DType::Float64);
  const Tensor im = randn(sizes, generator, DType::Float64);
  return complex(re, im).to(dtype);
}

Tensor parts(const Tensor& t) { return is_complex(t.dtype()) ? view_as_real(t.contiguous()) : t; }

// Same dtype and shape, and every part within tol of expected's, relative to
// the largest part of expected (a transform's outputs are sums of n terms).
void check_close(const Tensor& actual, const Tensor& expected, double tol) {
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.sizes() == expected.sizes());
  const Tensor e = parts(expected).to(DType::Float64), a = parts(actual).to(DType::Float64);
  const double scale = e.numel() == 0 ? 1.0 : std::max(1.0, max(abs(e)).item<double>());
  CHECK_MESSAGE(allclose(a, e, 0.0, tol * scale), "actual ", a.repr(), "\nexpected ", e.repr());
}

// NumPy's norm= for a forward transform with ATen's normalization (0 none, 1 by
// 1/sqrt(n), 2 by 1/n), and for an inverse one (NumPy's "backward" divides the
// inverse by n).
std::string np_norm(std::int64_t normalization, bool forward) {
  if (normalization == 1) return "'ortho'";
  return (normalization == 0) == forward ? "'backward'" : "'forward'";
}

std::string py_list(const IntList& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// The result of a NumPy expression on a (complex128 or float64), as a tensor.
Tensor numpy(const std::string& expression, const Tensor& a) {
  return torch_eval1("torch.from_numpy(np.asarray(" + expression + "))", {a});
}

}  // namespace

TEST_SUITE("fft") {

TEST_CASE("_fft_c2c") {
  SUBCASE("a transform worked by hand") {
    // X[k] = sum_j x[j] e^{-2 pi i jk/4} for x = 1, 2, 3, 4: 10, -2+2i, -2, -2-2i.
    const Tensor x = complex(tensor({1.0, 2.0, 3.0, 4.0}, DType::Float64), zeros({4}, DType::Float64));
    const Tensor expected = complex(tensor({10.0, -2.0, -2.0, -2.0}, DType::Float64), tensor({0.0, 2.0, 0.0, -2.0}, DType::Float64));
    check_close(_fft_c2c(x, {0}, 0, true), expected, 1e-15);
    // The backward transform with 1/n undoes it; with 1/sqrt(n) both ways it is unitary.
    check_close(_fft_c2c(expected, {0}, 2, false), x, 1e-15);
    check_close(_fft_c2c(_fft_c2c(x, {0}, 1, true), {0}, 1, false), x, 1e-15);
  }
  SUBCASE("against NumPy, every normalization, one and several dims") {
    const Tensor x = draw_complex({3, 5, 4}, DType::ComplexDouble, 1);
    for (const IntList& dim : {IntList{1}, IntList{0, 2}, IntList{2, 0, 1}, IntList{-1}}) {
      for (std::int64_t normalization : {0, 1, 2}) {
        for (bool forward : {true, false}) {
          CAPTURE(py_list(dim));
          CAPTURE(normalization);
          CAPTURE(forward);
          const std::string function = forward ? "np.fft.fftn" : "np.fft.ifftn";
          const Tensor expected = numpy(function + "(a.numpy(), axes=" + py_list(dim) + ", norm=" +
                                            np_norm(normalization, forward) + ")", x);
          check_close(_fft_c2c(x, dim, normalization, forward), expected, 1e-13);
        }
      }
    }
  }
  SUBCASE("a transposed view, an empty dim list, a size-1 dim") {
    const Tensor x = draw_complex({4, 6}, DType::ComplexDouble, 2);
    const Tensor xt = transpose(x, 0, 1);  // [6, 4], not contiguous
    check_close(_fft_c2c(xt, {0}, 0, true), numpy("np.fft.fft(a.numpy(), axis=0)", xt.contiguous()), 1e-13);
    check_close(_fft_c2c(x, {}, 2, true), x, 0.0);
    const Tensor column = draw_complex({5, 1}, DType::ComplexDouble, 3);
    check_close(_fft_c2c(column, {1}, 2, false), column, 1e-15);
  }
  SUBCASE("complex64 in, complex64 out, as torch's") {
    const Tensor x = draw_complex({4, 7}, DType::ComplexFloat, 4);
    const Tensor out = _fft_c2c(x, {0, 1}, 1, false);
    CHECK(out.dtype() == DType::ComplexFloat);
    check_close(out, torch_eval1("torch._fft_c2c(a, [0, 1], 1, False)", {x}), 2e-6);
  }
  SUBCASE("bad input raises") {
    const Tensor x = draw_complex({2, 3}, DType::ComplexDouble, 5);
    CHECK_THROWS_WITH_AS(_fft_c2c(real(x), {0}, 0, true),
                         "_fft_c2c: expected a complex64 or complex128 tensor, got float64", Error);
    CHECK_THROWS_WITH_AS(_fft_c2c(x, {1, -1}, 0, true), "_fft_c2c: dim 1 appears more than once in dim [1,-1]",
                         Error);
    CHECK_THROWS_WITH_AS(_fft_c2c(x, {0}, 3, true),
                         "_fft_c2c: normalization must be 0 (none), 1 (by 1/sqrt(n)) or 2 (by 1/n), got 3", Error);
    CHECK_THROWS_AS(_fft_c2c(x, {2}, 0, true), Error);
    CHECK_THROWS_WITH_AS(_fft_c2c(draw_complex({}, DType::ComplexDouble, 6), {0}, 0, true),
                         "_fft_c2c: cannot transform a 0-dim tensor (dim [0])", Error);
    CHECK_THROWS_WITH_AS(_fft_c2c(zeros({2, 0}, DType::ComplexDouble), {1}, 2, true),
                         "_fft_c2c: cannot transform dim 1 of [2,0]: it has no points", Error);
    // An empty batch is no signal to refuse: the result is empty too.
    CHECK(_fft_c2c(zeros({0, 3}, DType::ComplexDouble), {1}, 2, true).sizes() == Shape{0, 3});
  }
}

TEST_CASE("_fft_r2c") {
  SUBCASE("against NumPy: one-sided (rfftn) and full (fftn of the real signal)") {
    const Tensor x = draw_real({4, 5, 6}, DType::Float64, 7);
    for (const IntList& dim : {IntList{2}, IntList{1}, IntList{0, 2}, IntList{2, 1}, IntList{0, 1, 2}}) {
      for (std::int64_t normalization : {0, 1, 2}) {
        CAPTURE(py_list(dim));
        CAPTURE(normalization);
        const std::string args = "(a.numpy(), axes=" + py_list(dim) + ", norm=" + np_norm(normalization, true) + ")";
        // NumPy's rfftn is one-sided along the last axis listed, as ATen's r2c.
        check_close(_fft_r2c(x, dim, normalization, true), numpy("np.fft.rfftn" + args, x), 1e-13);
        check_close(_fft_r2c(x, dim, normalization, false), numpy("np.fft.fftn" + args, x), 1e-13);
      }
    }
  }
  SUBCASE("the one-sided length is n/2 + 1, for even and odd n") {
    CHECK(_fft_r2c(zeros({3, 8}, DType::Float64), {1}, 0, true).sizes() == Shape{3, 5});
    CHECK(_fft_r2c(zeros({3, 7}, DType::Float64), {1}, 0, true).sizes() == Shape{3, 4});
    CHECK(_fft_r2c(zeros({3, 7}, DType::Float64), {1, 0}, 0, true).sizes() == Shape{2, 7});
    CHECK(_fft_r2c(zeros({1}, DType::Float64), {0}, 0, true).sizes() == Shape{1});
  }
  SUBCASE("float32 in, complex64 out, as torch's") {
    const Tensor x = draw_real({5, 6}, DType::Float32, 8);
    const Tensor out = _fft_r2c(x, {1, 0}, 2, true);
    CHECK(out.dtype() == DType::ComplexFloat);
    check_close(out, torch_eval1("torch._fft_r2c(a, [1, 0], 2, True)", {x}), 2e-6);
  }
  SUBCASE("bad input raises") {
    const Tensor x = draw_real({2, 3}, DType::Float64, 9);
    CHECK_THROWS_WITH_AS(_fft_r2c(x.to(DType::Float16), {0}, 0, true),
                         "_fft_r2c: expected a float32 or float64 tensor, got float16 (torch's CPU transforms take "
                         "no other dtype)",
                         Error);
    CHECK_THROWS_WITH_AS(_fft_r2c(x.to(DType::ComplexDouble), {0}, 0, true),
                         "_fft_r2c: expected a float32 or float64 tensor, got complex128 (torch's CPU transforms "
                         "take no other dtype)",
                         Error);
    CHECK_THROWS_WITH_AS(_fft_r2c(x, {}, 0, true), "_fft_r2c: dim must name at least one dim", Error);
    CHECK_THROWS_WITH_AS(_fft_r2c(zeros({2, 0}, DType::Float64), {1}, 2, true),
                         "_fft_r2c: cannot transform dim 1 of [2,0]: it has no points", Error);
  }
}

TEST_CASE("_fft_c2r") {
  SUBCASE("against NumPy's irfftn on a Hermitian spectrum (the r2c of a real signal)") {
    for (std::int64_t last_dim_size : {6, 7}) {
      const Tensor signal = draw_real({3, 4, last_dim_size}, DType::Float64, 10);
      for (const IntList& dim : {IntList{2}, IntList{0, 2}, IntList{1, 0, 2}}) {
        for (std::int64_t normalization : {0, 1, 2}) {
          CAPTURE(last_dim_size);
          CAPTURE(py_list(dim));
          CAPTURE(normalization);
          const Tensor spectrum = _fft_r2c(signal, dim, 0, true);
          std::string shape = "[";
          for (std::int64_t d : dim) shape += std::to_string(signal.sizes()[d]) + ", ";
          const Tensor expected = numpy("np.fft.irfftn(a.numpy(), s=" + shape + "], axes=" + py_list(dim) +
                                            ", norm=" + np_norm(normalization, false) + ")",
                                        spectrum);
          check_close(_fft_c2r(spectrum, dim, normalization, last_dim_size), expected, 1e-13);
        }
      }
      // With 1/n, c2r undoes the one-sided r2c (one-sided along dim 0, of 3 points).
      check_close(_fft_c2r(_fft_r2c(signal, {2, 0}, 0, true), {2, 0}, 2, 3), signal, 1e-13);
    }
  }
  SUBCASE("a spectrum that is not Hermitian: as torch's (other dims first, X[0] and X[n/2] read as real)") {
    const Tensor x = draw_complex({3, 4, 4}, DType::ComplexDouble, 11);
    for (const IntList& dim : {IntList{2}, IntList{0, 2}, IntList{2, 0, 1}}) {
      for (std::int64_t last_dim_size : {6, 7}) {
        CAPTURE(py_list(dim));
        CAPTURE(last_dim_size);
        const std::int64_t last = dim.back();
        const Tensor input = narrow(x, last, 0, last_dim_size / 2 + 1);
        const std::string call = "torch._fft_c2r(a, " + py_list(dim) + ", 1, " + std::to_string(last_dim_size) + ")";
        check_close(_fft_c2r(input, dim, 1, last_dim_size), torch_eval1(call, {input.contiguous()}), 1e-13);
      }
    }
    // A full-length spectrum: its upper half is ignored, as by ATen.
    const Tensor full = draw_complex({2, 8}, DType::ComplexDouble, 12);
    check_close(_fft_c2r(full, {1}, 0, 8), _fft_c2r(narrow(full, 1, 0, 5), {1}, 0, 8), 0.0);
    check_close(_fft_c2r(full, {1}, 0, 8), torch_eval1("torch._fft_c2r(a, [1], 0, 8)", {full}), 1e-13);
  }
  SUBCASE("complex64 in, float32 out, as torch's") {
    const Tensor x = draw_complex({3, 5}, DType::ComplexFloat, 13);
    const Tensor out = _fft_c2r(x, {0, 1}, 0, 9);
    CHECK(out.dtype() == DType::Float32);
    CHECK(out.sizes() == Shape{3, 9});
    check_close(out, torch_eval1("torch._fft_c2r(a, [0, 1], 0, 9)", {x}), 2e-6);
  }
  SUBCASE("bad input raises") {
    const Tensor x = draw_complex({2, 3}, DType::ComplexDouble, 14);
    CHECK_THROWS_WITH_AS(_fft_c2r(x, {1}, 0, 6),
                         "_fft_c2r: a real signal of 6 points along dim 1 has a one-sided spectrum of 4 points (or a "
                         "full one of 6), but self [2,3] has 3",
                         Error);
    CHECK_THROWS_WITH_AS(_fft_c2r(real(x), {1}, 0, 4),
                         "_fft_c2r: expected a complex64 or complex128 tensor, got float64", Error);
    CHECK_THROWS_WITH_AS(_fft_c2r(x, {1}, 0, 0), "_fft_c2r: last_dim_size must be at least 1, got 0", Error);
    CHECK_THROWS_WITH_AS(_fft_c2r(x, {}, 0, 4), "_fft_c2r: dim must name at least one dim", Error);
  }
}

}  // TEST_SUITE
