// complex64 and complex128: every op that takes them, against torch's result
// on the same inputs (complex128 within a few ulps, complex64 within float32
// rounding), views against their storage, and the ops without complex kernels
// (or without an order on complex numbers) raising.
#include <doctest/doctest.h>

#include <complex>
#include <string>
#include <vector>

#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_text;

namespace {

// A complex tensor drawn from two float64 normal tensors (seeded), then cast.
Tensor draw_complex(const Shape& sizes, DType dtype, std::uint64_t seed, double scale = 1.0) {
  Generator generator(seed);
  const Tensor re = mul(randn(sizes, generator, DType::Float64), scale);
  const Tensor im = mul(randn(sizes, generator, DType::Float64), scale);
  return complex(re, im).to(dtype);
}

double rtol_of(DType dtype) { return dtype == DType::ComplexFloat || dtype == DType::Float32 ? 2e-5 : 1e-12; }

// actual and expected have the same dtype and shape, and their real and
// imaginary parts agree within the dtype's tolerance (NaN matching NaN).
void check_close(const Tensor& actual, const Tensor& expected) {
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.sizes() == expected.sizes());
  const double rtol = rtol_of(actual.dtype());
  if (is_complex(actual.dtype())) {
    CHECK(allclose(view_as_real(actual.contiguous()), view_as_real(expected.contiguous()), rtol, rtol, true));
  } else {
    CHECK(allclose(actual, expected, rtol, rtol, true));
  }
}

constexpr DType kComplexDTypes[] = {DType::ComplexFloat, DType::ComplexDouble};

}  // namespace

TEST_SUITE("complex") {

TEST_CASE("view_as_real, real and imag are views of the same bytes") {
  const Tensor z = draw_complex({2, 3}, DType::ComplexDouble, 1);
  const Tensor parts = view_as_real(z);
  CHECK(parts.dtype() == DType::Float64);
  CHECK(parts.sizes() == Shape{2, 3, 2});
  CHECK(parts.strides() == Shape{6, 2, 1});
  CHECK(parts.storage() == z.storage());
  CHECK(equal(parts, torch_eval1("torch.view_as_real(a)", {z})));
  CHECK(equal(real(z), torch_eval1("a.real", {z})));
  CHECK(equal(imag(z), torch_eval1("a.imag", {z})));
  // A transposed (non-contiguous) view keeps its strides, doubled.
  const Tensor zt = transpose(z, 0, 1);
  CHECK(view_as_real(zt).strides() == Shape{2, 6, 1});
  CHECK(equal(imag(zt).contiguous(), torch_eval1("a.t().imag", {z})));
  // view_as_complex undoes view_as_real.
  CHECK(equal(view_as_complex(parts), z));
  CHECK(equal(complex(real(z), imag(z)), z));
  // Real tensors: real and conj are the tensor itself; imag raises, as in torch.
  const Tensor x = tensor({1.0, -2.0});
  CHECK(real(x).is_same(x));
  CHECK(conj(x).is_same(x));
  CHECK_THROWS_WITH_AS(imag(x), "imag: imag is not implemented for tensors with non-complex dtypes (got float32)", Error);
  CHECK_THROWS_WITH_AS(view_as_complex(tensor({1.0, 2.0, 3.0})),
                       "view_as_complex: Tensor must have a last dimension of size 2, got shape [3]", Error);
  CHECK_THROWS_WITH_AS(view_as_complex(transpose(view_as_real(z), 0, 2)),
                       "view_as_complex: Tensor must have a last dimension with stride 1 (strides [1,2,6])", Error);
}

TEST_CASE("elementwise ops on complex numbers are torch's") {
  for (DType dtype : kComplexDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = draw_complex({3, 4}, dtype, 2), b = draw_complex({4}, dtype, 3);
    // Binary ops broadcast; a real Python number is a complex wrapped number.
    check_close(add(a, b), torch_eval1("a + b", {a, b}));
    check_close(add(a, b, Scalar(2.5)), torch_eval1("torch.add(a, b, alpha=2.5)", {a, b}));
    check_close(sub(a, b), torch_eval1("a - b", {a, b}));
    check_close(mul(a, b), torch_eval1("a * b", {a, b}));
    check_close(div(a, b), torch_eval1("a / b", {a, b}));
    check_close(mul(a, Scalar(-1.5)), torch_eval1("a * -1.5", {a}));
    check_close(add(a, Scalar(2)), torch_eval1("a + 2", {a}));
    check_close(pow(a, b), torch_eval1("torch.pow(a, b)", {a, b}));
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 2.5}) {
      CAPTURE(e);
      check_close(pow(a, Scalar(e)), torch_eval1("torch.pow(a, " + std::to_string(e) + ")", {a}));
    }
    // A real tensor with a complex one promotes to complex.
    Generator generator(4);
    const Tensor x = randn({4}, generator, DType::Float64).to(dtype == DType::ComplexFloat ? DType::Float32 : DType::Float64);
    check_close(mul(a, x), torch_eval1("a * b", {a, x}));
    check_close(div(x, a), torch_eval1("a / b", {x, a}));

    const std::vector<std::pair<std::string, Tensor (*)(const Tensor&)>> unary = {
        {"neg", neg},     {"exp", exp},       {"log", log},     {"sqrt", sqrt},   {"rsqrt", rsqrt},
        {"sin", sin},     {"cos", cos},       {"tan", tan},     {"asin", asin},   {"acos", acos},
        {"atan", atan},   {"sinh", sinh},     {"cosh", cosh},   {"tanh", tanh},   {"asinh", asinh},
        {"acosh", acosh}, {"atanh", atanh},   {"sigmoid", sigmoid}, {"reciprocal", reciprocal},
        {"square", square}, {"abs", abs},     {"sgn", sgn},     {"angle", angle}, {"conj", conj}};
    for (const auto& [name, op] : unary) {
      CAPTURE(name);
      check_close(op(a), torch_eval1("torch." + name + "(a)" + (name == "conj" ? ".resolve_conj()" : ""), {a}));
    }
    // sgn is 0 at 0; angle of a real tensor is 0 or pi.
    const Tensor with_zero = complex(tensor({0.0, 3.0}), tensor({0.0, -4.0})).to(dtype);
    check_close(sgn(with_zero), torch_eval1("torch.sgn(a)", {with_zero}));
    const Tensor signs = tensor({-2.0, 0.0, 3.0, NAN}, DType::Float64);
    check_close(angle(signs), torch_eval1("torch.angle(a)", {signs}));
    // Equality is defined; an order is not.
    CHECK(equal(eq(a, a), torch_eval1("a == a", {a})));
    CHECK(equal(ne(a, b), torch_eval1("a != b", {a, b})));
    CHECK_THROWS_WITH_AS(lt(a, b), (std::string("lt: not supported for complex numbers (") + dtype_name(dtype) +
                                    "): they have no order").c_str(), Error);
    CHECK_THROWS_AS(relu(a), Error);
    CHECK_THROWS_AS(amax(a, {0}), Error);
    const Tensor mask = tensor({true, false, true, false});
    check_close(where(mask, a, b), torch_eval1("torch.where(c, a, b)", {a, b, mask}));
    check_close(masked_fill(a, mask, Scalar(2.0)), torch_eval1("a.masked_fill(b, 2.0)", {a, mask}));
  }
}

TEST_CASE("sums, products of matrices and indexing on complex numbers are torch's") {
  for (DType dtype : kComplexDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = draw_complex({3, 4}, dtype, 5), m = draw_complex({4, 2}, dtype, 6);
    check_close(sum(a), torch_eval1("a.sum()", {a}));
    check_close(sum(a, {1}, true), torch_eval1("a.sum(1, keepdim=True)", {a}));
    check_close(mean(a, {0}), torch_eval1("a.mean(0)", {a}));
    check_close(cumsum(a, 1), torch_eval1("a.cumsum(1)", {a}));
    check_close(sum_to(a, {1, 4}), torch_eval1("a.sum(0, keepdim=True)", {a}));
    check_close(mm(a, m), torch_eval1("a @ b", {a, m}));
    check_close(mm(transpose(m, 0, 1), transpose(a, 0, 1)), torch_eval1("b.t() @ a.t()", {a, m}));
    const Tensor batch = draw_complex({2, 3, 4}, dtype, 7), batch2 = draw_complex({2, 4, 5}, dtype, 8);
    check_close(bmm(batch, batch2), torch_eval1("torch.bmm(a, b)", {batch, batch2}));
    check_close(matmul(batch, m), torch_eval1("a @ b", {batch, m}));
    const Tensor v = draw_complex({4}, dtype, 9);
    check_close(dot(v, v), torch_eval1("torch.dot(a, a)", {v}));
    check_close(matmul(a, v), torch_eval1("a @ b", {a, v}));
    check_close(outer(v, v), torch_eval1("torch.outer(a, a)", {v}));
    const Tensor c = draw_complex({3, 2}, dtype, 10);
    check_close(addmm(c, a, m, Scalar(0.5), Scalar(2.0)), torch_eval1("torch.addmm(c, a, b, beta=0.5, alpha=2.0)", {a, m, c}));

    const Tensor index = tensor({2, 0, 2});
    check_close(index_select(a, 0, index), torch_eval1("a.index_select(0, b)", {a, index}));
    const Tensor positions = tensor({{0, 3}, {1, 1}, {2, 0}});
    check_close(gather(a, 1, positions), torch_eval1("a.gather(1, b)", {a, positions}));
    const Tensor source = draw_complex({3, 2}, dtype, 11);
    check_close(scatter_add(a, 1, positions, source), torch_eval1("a.scatter_add(1, b, c)", {a, positions, source}));
    const Tensor rows = draw_complex({3, 4}, dtype, 12);
    check_close(index_add(a, 0, index, rows, Scalar(1)), torch_eval1("a.index_add(0, b, c)", {a, index, rows}));
    check_close(constant_pad_nd(a, {1, 2}, Scalar(0.5)), torch_eval1("F.pad(a, (1, 2), value=0.5)", {a}));
    check_close(tril(a, 0), torch_eval1("a.tril()", {a}));
    check_close(flip(a, {1}), torch_eval1("a.flip(1)", {a}));
    check_close(cat({a, a}, 0), torch_eval1("torch.cat([a, a])", {a}));
  }
}

TEST_CASE("complex tensors print as torch prints them") {
  const std::vector<Tensor> cases = {
      complex(tensor({1.0, -2.5, 0.0}, DType::Float64), tensor({0.0, 3.0, -1.0}, DType::Float64)),
      complex(tensor({1.0, 2.0}), tensor({-1.0, 0.5})),
      complex(tensor({1e-5, 2.0}), tensor({1e6, -3.0})),
      draw_complex({2, 3}, DType::ComplexFloat, 13),
  };
  for (const Tensor& z : cases) CHECK(z.repr() == torch_text("repr(a)", {z}));
}

}  // TEST_SUITE

// ----------------------------------------------------------- complex Scalars ---

TEST_SUITE("complex") {

TEST_CASE("a complex Scalar prints as Python prints the number and converts to a real type only when real") {
  CHECK(Scalar(std::complex<double>(2, 3)).repr() == "(2+3j)");
  CHECK(Scalar(std::complex<double>(0, 0.4)).repr() == "0.4j");
  CHECK(Scalar(std::complex<double>(1, 0)).repr() == "(1+0j)");
  CHECK(Scalar(std::complex<double>(-0.0, -1)).repr() == "(-0-1j)");
  CHECK(Scalar(std::complex<double>(1.5, std::nan(""))).repr() == "(1.5+nanj)");
  CHECK(Scalar(std::complex<double>(0.1, -2.5e-8)).repr() == "(0.1-2.5e-08j)");
  const Scalar z(std::complex<double>(2, 3));
  CHECK(z.is_complex());
  CHECK(z.conj().to_complex() == std::complex<double>(2, -3));
  CHECK(z.to_bool());
  CHECK(Scalar(std::complex<double>(0, 1)).to_bool());  // either part nonzero
  CHECK_THROWS_WITH_AS(z.to_double(), "value (2+3j) cannot be converted to type double without overflow", Error);
  CHECK_THROWS_AS(z.to_int64(), Error);
  CHECK(Scalar(std::complex<double>(2.5, 0)).to_double() == 2.5);
  CHECK(Scalar(2.5).conj().to_double() == 2.5);  // a real Scalar is its own conjugate
}

TEST_CASE("ops with a complex Scalar promote and compute as torch's") {
  const Tensor x64 = tensor({1.5, -2.0, 0.25}, DType::Float64);
  const Scalar z(std::complex<double>(2, 3));
  // A real tensor with a complex number becomes complex of the tensor's precision (float16: complex32).
  for (DType dtype : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64, DType::Int64, DType::Bool}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = x64.to(dtype);
    const Tensor product = mul(x, z);
    const Tensor expected = torch_eval1("a * (2+3j)", {x});
    REQUIRE(product.dtype() == expected.dtype());
    CHECK(equal(product, expected));
    CHECK(equal(add(x, z), torch_eval1("a + (2+3j)", {x})));
  }
  for (DType dtype : kComplexDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = draw_complex({2, 3}, dtype, 7), b = draw_complex({2, 3}, dtype, 8);
    check_close(mul(a, z), torch_eval1("a * (2+3j)", {a}));
    check_close(div(a, z), torch_eval1("a / (2+3j)", {a}));
    check_close(add(a, b, z), torch_eval1("torch.add(a, b, alpha=2+3j)", {a, b}));
    check_close(sub(a, b, z), torch_eval1("torch.sub(a, b, alpha=2+3j)", {a, b}));
    const Tensor m1 = draw_complex({2, 4}, dtype, 9), m2 = draw_complex({4, 3}, dtype, 10);
    check_close(addmm(a, m1, m2, Scalar(std::complex<double>(0.5, -1)), z),
                torch_eval1("torch.addmm(a, b, c, beta=0.5-1j, alpha=2+3j)", {a, m1, m2}));
    CHECK(full({2}, z).dtype() == DType::ComplexFloat);  // the default dtype's complex type
  }
  // Hand-worked: (1 + 2j) * (2 + 3j) = -4 + 7j.
  const Tensor one_two = tensor({1.0, 2.0}, DType::Float64);
  CHECK(equal(mul(complex(select(one_two, 0, 0), select(one_two, 0, 1)), z),
              complex(tensor(-4.0, DType::Float64), tensor(7.0, DType::Float64))));
  // Where the number cannot be real, a real op refuses it, as torch does.
  CHECK_THROWS_WITH_AS(add(x64, x64, z), doctest::Contains("argument alpha must not be a complex number"), Error);
  CHECK_THROWS_WITH_AS(full({2}, z, DType::Float64), doctest::Contains("(2+3j) cannot be converted to type float64"),
                       Error);
  CHECK(equal(full({2}, Scalar(std::complex<double>(2.5, 0)), DType::Float64), full({2}, 2.5, DType::Float64)));
}

// --------------------------------------------------------------- complex32 ---

TEST_CASE("complex32 stores two float16 parts and computes in complex64, as torch") {
  const Tensor z64 = draw_complex({2, 3}, DType::ComplexFloat, 11);
  const Tensor z32 = z64.to(DType::ComplexHalf);
  CHECK(element_size(DType::ComplexHalf) == 4);
  CHECK(equal(z32, torch_eval1("a.to(torch.complex32)", {z64})));  // each part rounded as float16 rounds
  CHECK(equal(view_as_real(z32), torch_eval1("torch.view_as_real(a.to(torch.complex32))", {z64})));
  CHECK(view_as_real(z32).dtype() == DType::Float16);
  CHECK(view_as_real(z32).storage() == z32.storage());
  CHECK(equal(real(z32), select(view_as_real(z64), -1, 0).to(DType::Float16)));
  CHECK(equal(view_as_complex(view_as_real(z32)), z32));
  CHECK(equal(complex(real(z32), imag(z32)), z32));
  CHECK(equal(conj(z32), torch_eval1("a.conj().resolve_conj()", {z32})));
  CHECK(equal(z32.to(DType::Float32), torch_eval1("a.to(torch.float32)", {z32})));  // the real part
  // Arithmetic: in complex64, rounded once to complex32.
  const Tensor w32 = draw_complex({2, 3}, DType::ComplexFloat, 12).to(DType::ComplexHalf);
  CHECK(equal(mul(z32, w32), torch_eval1("a * b", {z32, w32})));
  CHECK(equal(add(z32, w32), torch_eval1("a + b", {z32, w32})));
  CHECK(equal(mul(z32, Scalar(std::complex<double>(0, 1))), torch_eval1("a * 1j", {z32})));
  // Promotion: with float16 it stays complex32, with bfloat16 it is complex64.
  CHECK(promote_types(DType::ComplexHalf, DType::Float16) == DType::ComplexHalf);
  CHECK(promote_types(DType::ComplexHalf, DType::BFloat16) == DType::ComplexFloat);
  CHECK(z32.repr() == torch_text("repr(a)", {z32}));
  CHECK(tensor({1.3, 0.0}, DType::Float16).to(DType::ComplexHalf).repr() ==
        "tensor([1.2998+0.j, 0.0000+0.j], dtype=torch.complex32)");
}

}  // TEST_SUITE("complex")
