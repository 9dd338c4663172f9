// Suite "nodes", complex group: the nodes that take complex numbers (and the
// matrix-vector nodes vdot, addmv, addr, addbmm, in real dtypes too), each
// (a) against finite differences of its forward (written with L0 primitives)
//     in complex128, in PyTorch's convention: for a real loss
//     L = Re(sum(conj(g) * f(x))), the gradient of x is dL/dRe(x) + i dL/dIm(x);
// (b) against torch fed the `_saved_*` values of a real grad_fn, in complex128
//     and complex64;
// and the nodes whose formulas were not checked for complex numbers raising.
#include <cmath>
#include <complex>
#include <functional>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// A complex128 tensor of N(0, 1) parts, reproducible by seed, moved off the
// branch cuts and poles of the functions below by `shift` (added to the real part).
Tensor random_complex(const Shape& sizes, std::uint64_t seed, double shift = 0.0) {
  return complex(add(random64(sizes, seed), shift), random64(sizes, seed + 1000));
}

// Real and imaginary parts of a complex tensor (a real tensor as it is), contiguous.
Tensor parts_of(const Tensor& t) { return is_complex(t.dtype()) ? view_as_real(t.contiguous()) : t; }

void check_close(const Tensor& actual, const Tensor& expected, double rtol) {
  CHECK(actual.dtype() == expected.dtype());
  CHECK_TENSOR(parts_of(actual), parts_of(expected), rtol, rtol);
}

using ComplexForward = std::function<Tensor(const std::vector<Tensor>&)>;

// L(inputs) = Re(sum(conj(g) * f(inputs))), the real loss whose gradient torch's backward computes.
double loss(const ComplexForward& forward, const std::vector<Tensor>& inputs, const Tensor& g) {
  const Tensor out = forward(inputs);
  return sum(real(mul(conj(g), out))).to(DType::Float64).item<double>();
}

// The numerical gradient of input k by central differences, part by part.
Tensor numerical_gradient(const ComplexForward& forward, const std::vector<Tensor>& inputs, std::size_t k,
                          const Tensor& g) {
  const double h = 1e-6;
  const Tensor& x = inputs[k];
  const bool complex_input = is_complex(x.dtype());
  const Tensor flat_parts = reshape(parts_of(x).clone(), {-1});
  std::vector<double> gradient(static_cast<std::size_t>(flat_parts.numel()));
  for (std::int64_t i = 0; i < flat_parts.numel(); ++i) {
    auto with_step = [&](double step) {
      std::vector<double> values = flat_parts.to_vector<double>();
      values[static_cast<std::size_t>(i)] += step;
      const Tensor moved = from_buffer(values.data(), parts_of(x).sizes(), DType::Float64);
      std::vector<Tensor> shifted = inputs;
      shifted[k] = complex_input ? view_as_complex(moved) : moved;
      return loss(forward, shifted, g);
    };
    gradient[static_cast<std::size_t>(i)] = (with_step(h) - with_step(-h)) / (2 * h);
  }
  const Tensor result = from_buffer(gradient.data(), parts_of(x).sizes(), DType::Float64);
  return complex_input ? view_as_complex(result) : result;
}

// One node: its forward in torch (inputs a, b, ... named x0, x1, ...) and with L0 ops, the inputs
// whose grads it computes, and the saved fields torch exposes.
struct ComplexCase {
  std::string node;
  std::string torch_forward;           // "torch.exp(x0)"
  ComplexForward forward;              // the same with L0 primitives
  std::vector<Tensor> inputs;          // complex128 (or float64 where the forward takes reals)
  std::vector<std::string> fields;     // saved tensors, read from the grad_fn as _saved_<field>
  std::vector<std::pair<std::string, FieldValue>> constants;  // other saved fields, as refgrad binds them
};

// The torch name of input i: x0, x1, ...
std::string torch_input_name(std::size_t i) { return "x" + std::to_string(i); }

void check_complex_case(const ComplexCase& spec) {
  CAPTURE(spec.node);
  const std::size_t n = spec.inputs.size();
  const Tensor output = spec.forward(spec.inputs);
  const Tensor g = is_complex(output.dtype()) ? random_complex(output.sizes(), 31) : random64(output.sizes(), 31);
  std::string names, grads_of, saved_values;
  for (std::size_t i = 0; i < n; ++i) {
    names += torch_input_name(i) + " = " + std::string(1, static_cast<char>('a' + i)) + ".requires_grad_()\n";
    grads_of += torch_input_name(i) + ", ";
  }
  for (const std::string& field : spec.fields) saved_values += "fn._saved_" + field + ", ";
  const std::string g_name(1, static_cast<char>('a' + n));
  const std::string code = names + "out = " + spec.torch_forward + "\n" + "fn = out.grad_fn\n" +
                           "assert fn.name() == '" + spec.node + "', fn.name()\n" + "result = (" + saved_values +
                           "*torch.autograd.grad(out, (" + grads_of + "), " + g_name + "),)\n";
  for (const DType dtype : {DType::ComplexDouble, DType::ComplexFloat}) {
    CAPTURE(dtype_name(dtype));
    const bool single = dtype == DType::ComplexFloat;
    std::vector<Tensor> torch_inputs;
    for (const Tensor& input : spec.inputs) {
      const DType real_dtype = single ? DType::Float32 : DType::Float64;
      torch_inputs.push_back(input.to(is_complex(input.dtype()) ? dtype : real_dtype));
    }
    const Tensor grad = g.to(is_complex(g.dtype()) ? dtype : (single ? DType::Float32 : DType::Float64));
    torch_inputs.push_back(grad);
    const std::vector<Tensor> r = torch_exec(code, torch_inputs);
    Saved saved;
    for (std::size_t i = 0; i < spec.fields.size(); ++i) saved[spec.fields[i]] = r[i];
    for (const auto& [name, value] : spec.constants) saved[name] = value;
    const Grads out = call_node(spec.node, {grad}, Need(n, true), saved);
    const double rtol = single ? 2e-5 : 1e-10;
    for (std::size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(out[i].has_value());
      check_close(*out[i], r[spec.fields.size() + i], rtol);
    }
    if (!single) {  // (a) finite differences, complex128
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        check_close(*out[i], numerical_gradient(spec.forward, spec.inputs, i, g), 1e-6);
      }
    }
  }
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("complex: unary nodes against finite differences and torch") {
  const Tensor z = random_complex({5}, 1, 0.3);
  auto unary = [](Tensor (*op)(const Tensor&)) {
    return [op](const std::vector<Tensor>& in) { return op(in[0]); };
  };
  const std::vector<ComplexCase> cases = {
      {"NegBackward0", "-x0", unary(neg), {z}, {}, {}},
      {"ExpBackward0", "torch.exp(x0)", unary(exp), {z}, {"result"}, {}},
      {"LogBackward0", "torch.log(x0)", unary(log), {z}, {"self"}, {}},
      {"SqrtBackward0", "torch.sqrt(x0)", unary(sqrt), {z}, {"result"}, {}},
      {"RsqrtBackward0", "torch.rsqrt(x0)", unary(rsqrt), {z}, {"result"}, {}},
      {"ReciprocalBackward0", "torch.reciprocal(x0)", unary(reciprocal), {z}, {"result"}, {}},
      {"SinBackward0", "torch.sin(x0)", unary(sin), {z}, {"self"}, {}},
      {"CosBackward0", "torch.cos(x0)", unary(cos), {z}, {"self"}, {}},
      {"TanBackward0", "torch.tan(x0)", unary(tan), {z}, {"result"}, {}},
      {"AsinBackward0", "torch.asin(x0)", unary(asin), {z}, {"self"}, {}},
      {"AcosBackward0", "torch.acos(x0)", unary(acos), {z}, {"self"}, {}},
      {"AtanBackward0", "torch.atan(x0)", unary(atan), {z}, {"self"}, {}},
      {"SinhBackward0", "torch.sinh(x0)", unary(sinh), {z}, {"self"}, {}},
      {"CoshBackward0", "torch.cosh(x0)", unary(cosh), {z}, {"self"}, {}},
      {"TanhBackward0", "torch.tanh(x0)", unary(tanh), {z}, {"result"}, {}},
      {"AsinhBackward0", "torch.asinh(x0)", unary(asinh), {z}, {"self"}, {}},
      {"AcoshBackward0", "torch.acosh(x0)", unary(acosh), {z}, {"self"}, {}},
      {"AtanhBackward0", "torch.atanh(x0)", unary(atanh), {z}, {"self"}, {}},
      {"SigmoidBackward0", "torch.sigmoid(x0)", unary(sigmoid), {z}, {"result"}, {}},
      {"AbsBackward0", "torch.abs(x0)", unary(abs), {z}, {"self"}, {}},
      {"SgnBackward0", "torch.sgn(x0)", unary(sgn), {z}, {"self", "result"}, {}},
      {"AngleBackward0", "torch.angle(x0)", unary(angle), {z}, {"self"}, {}},
      {"ConjPhysicalBackward0", "torch.conj_physical(x0)", unary(conj), {z}, {}, {}},
      {"ViewAsRealBackward0", "torch.view_as_real(x0)", unary(view_as_real), {z}, {}, {}},
      {"ViewAsComplexBackward0", "torch.view_as_complex(x0)", unary(view_as_complex), {random64({3, 2}, 5)}, {}, {}},
      {"Expm1Backward0", "torch.expm1(x0)", [](const std::vector<Tensor>& in) { return sub(exp(in[0]), 1); }, {z},
       {"result"}, {}},
      {"Log1PBackward0", "torch.log1p(x0)", [](const std::vector<Tensor>& in) { return log(add(in[0], 1)); }, {z},
       {"self"}, {}},
      {"Log2Backward0", "torch.log2(x0)", [](const std::vector<Tensor>& in) { return div(log(in[0]), std::log(2.0)); },
       {z}, {"self"}, {}},
      {"Log10Backward0", "torch.log10(x0)",
       [](const std::vector<Tensor>& in) { return div(log(in[0]), std::log(10.0)); }, {z}, {"self"}, {}},
      {"PowBackward0", "torch.pow(x0, 2.5)",
       [](const std::vector<Tensor>& in) { return pow(in[0], Scalar(2.5)); }, {z}, {"self"},
       {{"exponent", Scalar(2.5)}}},
  };
  for (const ComplexCase& spec : cases) check_complex_case(spec);
}

TEST_CASE("complex: binary nodes and products of matrices against finite differences and torch") {
  const Tensor a = random_complex({3, 4}, 2), b = random_complex({3, 4}, 3, 2.0), x = random64({3, 4}, 4);
  const Tensor m = random_complex({4, 2}, 5), v = random_complex({4}, 6), c = random_complex({3, 2}, 7);
  const Tensor batch1 = random_complex({2, 3, 4}, 8), batch2 = random_complex({2, 4, 2}, 9);
  const DType c128 = DType::ComplexDouble;
  const std::vector<ComplexCase> cases = {
      {"MulBackward0", "x0 * x1", [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, b},
       {"other", "self"}, {{"other_scalar_type", c128}, {"self_scalar_type", c128}}},
      // A real tensor times a complex one: the real input's grad is real (handle_r_to_c).
      {"MulBackward0", "x0 * x1", [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }, {a, x},
       {"other", "self"}, {{"other_scalar_type", DType::Float64}, {"self_scalar_type", c128}}},
      {"DivBackward0", "x0 / x1", [](const std::vector<Tensor>& in) { return div(in[0], in[1]); }, {a, b},
       {"other", "self"}, {{"self_scalar_type", c128}}},
      {"AddBackward0", "torch.add(x0, x1, alpha=2.5)",
       [](const std::vector<Tensor>& in) { return add(in[0], in[1], Scalar(2.5)); }, {a, x}, {},
       {{"alpha", Scalar(2.5)}, {"other_scalar_type", DType::Float64}, {"self_scalar_type", c128}}},
      {"MmBackward0", "x0 @ x1", [](const std::vector<Tensor>& in) { return mm(in[0], in[1]); }, {a, m},
       {"mat2", "self"},
       {{"mat2_layout", Layout::Strided}, {"mat2_sym_sizes", IntList{4, 2}}, {"mat2_sym_strides", IntList{2, 1}},
        {"self_layout", Layout::Strided}, {"self_sym_sizes", IntList{3, 4}}, {"self_sym_strides", IntList{4, 1}}}},
      {"BmmBackward0", "torch.bmm(x0, x1)", [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); },
       {batch1, batch2}, {"mat2", "self"}, {}},
      {"DotBackward0", "torch.dot(x0, x1)", [](const std::vector<Tensor>& in) { return dot(in[0], in[1]); },
       {v, random_complex({4}, 10)}, {"self", "tensor"}, {}},
      {"MvBackward0", "torch.mv(x0, x1)", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
       {a, v}, {"self", "vec"}, {}},
      {"AddmmBackward0", "torch.addmm(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) { return addmm(in[0], in[1], in[2], Scalar(0.5), Scalar(2.0)); },
       {c, a, m}, {"mat1", "mat2"},
       {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}, {"mat1_layout", Layout::Strided},
        {"mat1_sym_sizes", IntList{3, 4}}, {"mat1_sym_strides", IntList{4, 1}}, {"mat2_layout", Layout::Strided},
        {"mat2_sym_sizes", IntList{4, 2}}, {"mat2_sym_strides", IntList{2, 1}}}},
      {"VdotBackward0", "torch.vdot(x0, x1)",
       [](const std::vector<Tensor>& in) { return sum(mul(conj(in[0]), in[1])); }, {v, random_complex({4}, 14)},
       {"other", "self"}, {}},
      {"AddmvBackward0", "torch.addmv(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) { return add(mul(in[0], 0.5), mul(matmul(in[1], in[2]), 2.0)); },
       {random_complex({3}, 15), a, v}, {"mat", "vec"}, {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}}},
      {"AddmvBackward0", "torch.addmv(x0, x1, x2, beta=0.5, alpha=2.0)",  // real: the float64 and float32 formula
       [](const std::vector<Tensor>& in) { return add(mul(in[0], 0.5), mul(matmul(in[1], in[2]), 2.0)); },
       {random64({3}, 16), x, random64({4}, 17)}, {"mat", "vec"}, {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}}},
      {"AddrBackward0", "torch.addr(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) { return add(mul(in[0], 0.5), mul(outer(in[1], in[2]), 2.0)); },
       {a, random_complex({3}, 18), v}, {"vec1", "vec2"}, {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}}},
      {"AddrBackward0", "torch.addr(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) { return add(mul(in[0], 0.5), mul(outer(in[1], in[2]), 2.0)); },
       {x, random64({3}, 19), random64({4}, 20)}, {"vec1", "vec2"}, {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}}},
      {"AddbmmBackward0", "torch.addbmm(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) {
         return add(mul(in[0], 0.5), mul(sum(bmm(in[1], in[2]), {0}), 2.0));
       },
       {c, batch1, batch2}, {"batch1", "batch2"},
       {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}, {"batch1_sym_argsize_0", std::int64_t{2}},
        {"batch1_sym_argsize_1", std::int64_t{3}}, {"batch2_sym_argsize_2", std::int64_t{2}}}},
      {"AddbmmBackward0", "torch.addbmm(x0, x1, x2, beta=0.5, alpha=2.0)",
       [](const std::vector<Tensor>& in) {
         return add(mul(in[0], 0.5), mul(sum(bmm(in[1], in[2]), {0}), 2.0));
       },
       {random64({3, 2}, 21), random64({2, 3, 4}, 22), random64({2, 4, 2}, 23)}, {"batch1", "batch2"},
       {{"alpha", Scalar(2.0)}, {"beta", Scalar(0.5)}, {"batch1_sym_argsize_0", std::int64_t{2}},
        {"batch1_sym_argsize_1", std::int64_t{3}}, {"batch2_sym_argsize_2", std::int64_t{2}}}},
      {"LerpBackward1", "torch.lerp(x0, x1, x2)",
       [](const std::vector<Tensor>& in) { return add(in[0], mul(in[2], sub(in[1], in[0]))); },
       {a, b, random_complex({3, 4}, 13)}, {"end", "self", "weight"}, {}},
      {"LinalgVectorNormBackward0", "torch.linalg.vector_norm(x0, 3.0, dim=1)",
       [](const std::vector<Tensor>& in) { return pow(sum(pow(abs(in[0]), Scalar(3.0)), {1}), Scalar(1.0 / 3.0)); },
       {a}, {"self", "result"},
       {{"dim", IntList{1}}, {"keepdim", false}, {"ord", Scalar(3.0)}}},
      {"LinalgVectorNormBackward0", "torch.linalg.vector_norm(x0)",
       [](const std::vector<Tensor>& in) { return sqrt(sum(square(abs(in[0])))); }, {a}, {"self", "result"},
       {{"dim", None{}}, {"keepdim", false}, {"ord", Scalar(2.0)}}},
      {"VarBackward0", "torch.var(x0, dim=0)",
       [](const std::vector<Tensor>& in) {
         return div(sum(square(abs(sub(in[0], mean(in[0], {0}, true)))), {0}), 2.0);  // 3 rows, correction 1
       },
       {a}, {"self"}, {{"correction", None{}}, {"dim", IntList{0}}, {"keepdim", false}}},
      {"LogsumexpBackward0", "torch.logsumexp(x0, 1)",
       [](const std::vector<Tensor>& in) { return log(sum(exp(in[0]), {1})); }, {a}, {"self", "result"},
       {{"dim", IntList{1}}, {"keepdim", false}}},
      {"ComplexBackward0", "torch.complex(x0, x1)",
       [](const std::vector<Tensor>& in) { return complex(in[0], in[1]); }, {x, random64({3, 4}, 11)},
       {"imag", "real"}, {}},
      {"PolarBackward0", "torch.polar(x0, x1)",
       [](const std::vector<Tensor>& in) { return mul(complex(cos(in[1]), sin(in[1])), in[0]); },
       {add(abs(x), 0.5), random64({3, 4}, 12)}, {"result"}, {}},
  };
  for (const ComplexCase& spec : cases) check_complex_case(spec);
}

TEST_CASE("complex: complex Scalar fields (alpha, beta, other, weight) against finite differences and torch") {
  const Tensor a = random_complex({3, 4}, 40), b = random_complex({3, 4}, 41);
  const Tensor m = random_complex({4, 2}, 43), c = random_complex({3, 2}, 44), v = random_complex({4}, 45);
  const Tensor batch1 = random_complex({2, 3, 4}, 46), batch2 = random_complex({2, 4, 2}, 47);
  const DType c128 = DType::ComplexDouble;
  const Scalar alpha(std::complex<double>(2, 3)), beta(std::complex<double>(0.5, -1));
  const std::vector<ComplexCase> cases = {
      {"AddBackward0", "torch.add(x0, x1, alpha=2+3j)",
       [alpha](const std::vector<Tensor>& in) { return add(in[0], in[1], alpha); }, {a, b}, {},
       {{"alpha", alpha}, {"other_scalar_type", c128}, {"self_scalar_type", c128}}},
      {"SubBackward0", "torch.sub(x0, x1, alpha=2+3j)",
       [alpha](const std::vector<Tensor>& in) { return sub(in[0], in[1], alpha); }, {a, b}, {},
       {{"alpha", alpha}, {"other_scalar_type", c128}, {"self_scalar_type", c128}}},
      {"RsubBackward0", "torch.rsub(x0, x1, alpha=2+3j)",
       [alpha](const std::vector<Tensor>& in) { return sub(in[1], in[0], alpha); }, {a, b}, {},
       {{"alpha", alpha}, {"other_scalar_type", c128}, {"self_scalar_type", c128}}},
      {"MulBackward1", "torch.ops.aten.mul.Scalar(x0, 2+3j)",
       [alpha](const std::vector<Tensor>& in) { return mul(in[0], alpha); }, {a}, {},
       {{"other", alpha}, {"self_scalar_type", c128}}},
      {"DivBackward1", "torch.ops.aten.div.Scalar(x0, 2+3j)",
       [alpha](const std::vector<Tensor>& in) { return div(in[0], alpha); }, {a}, {},
       {{"other", alpha}, {"self_scalar_type", c128}}},
      {"LerpBackward0", "torch.lerp(x0, x1, 0.5-1j)",
       [beta](const std::vector<Tensor>& in) { return add(in[0], mul(sub(in[1], in[0]), beta)); }, {a, b}, {},
       {{"weight", beta}}},
      {"AddmmBackward0", "torch.addmm(x0, x1, x2, beta=0.5-1j, alpha=2+3j)",
       [alpha, beta](const std::vector<Tensor>& in) { return addmm(in[0], in[1], in[2], beta, alpha); },
       {c, a, m}, {"mat1", "mat2"},
       {{"alpha", alpha}, {"beta", beta}, {"mat1_layout", Layout::Strided}, {"mat1_sym_sizes", IntList{3, 4}},
        {"mat1_sym_strides", IntList{4, 1}}, {"mat2_layout", Layout::Strided}, {"mat2_sym_sizes", IntList{4, 2}},
        {"mat2_sym_strides", IntList{2, 1}}}},
      {"AddmvBackward0", "torch.addmv(x0, x1, x2, beta=0.5-1j, alpha=2+3j)",
       [alpha, beta](const std::vector<Tensor>& in) {
         return add(mul(in[0], beta), mul(matmul(in[1], in[2]), alpha));
       },
       {random_complex({3}, 48), a, v}, {"mat", "vec"}, {{"alpha", alpha}, {"beta", beta}}},
      {"AddrBackward0", "torch.addr(x0, x1, x2, beta=0.5-1j, alpha=2+3j)",
       [alpha, beta](const std::vector<Tensor>& in) {
         return add(mul(in[0], beta), mul(outer(in[1], in[2]), alpha));
       },
       {a, random_complex({3}, 49), v}, {"vec1", "vec2"}, {{"alpha", alpha}, {"beta", beta}}},
      {"BaddbmmBackward0", "torch.baddbmm(x0, x1, x2, beta=0.5-1j, alpha=2+3j)",
       [alpha, beta](const std::vector<Tensor>& in) {
         return add(mul(in[0], beta), mul(bmm(in[1], in[2]), alpha));
       },
       {random_complex({2, 3, 2}, 50), batch1, batch2}, {"batch1", "batch2"}, {{"alpha", alpha}, {"beta", beta}}},
      {"AddbmmBackward0", "torch.addbmm(x0, x1, x2, beta=0.5-1j, alpha=2+3j)",
       [alpha, beta](const std::vector<Tensor>& in) {
         return add(mul(in[0], beta), mul(sum(bmm(in[1], in[2]), {0}), alpha));
       },
       {c, batch1, batch2}, {"batch1", "batch2"},
       {{"alpha", alpha}, {"beta", beta}, {"batch1_sym_argsize_0", std::int64_t{2}},
        {"batch1_sym_argsize_1", std::int64_t{3}}, {"batch2_sym_argsize_2", std::int64_t{2}}}},
  };
  for (const ComplexCase& spec : cases) check_complex_case(spec);
}

TEST_CASE("complex: IndexAddBackward0 with a complex alpha is the conjugate Wirtinger gradient") {
  // torch 2.13's formula multiplies by alpha, not alpha.conj() (gradcheck refuses it), so the truth here
  // is finite differences alone; with a real alpha torch and refgrad agree (the group above and the
  // OpInfo suite).
  const Tensor self = random_complex({3, 2}, 60), source = random_complex({2, 2}, 61);
  const Tensor index = tensor({0, 2});
  const Scalar alpha(std::complex<double>(2, 3));
  const ComplexForward forward = [&](const std::vector<Tensor>& in) {
    return index_add(in[0], 0, index, in[1], alpha);
  };
  const Tensor g = random_complex({3, 2}, 62);
  Saved saved{{"alpha", alpha}, {"dim", std::int64_t{0}}, {"index", index}, {"source", source},
              {"source_dim", std::int64_t{2}}};
  const Grads out = call_node("IndexAddBackward0", {g}, Need(2, true), saved);
  REQUIRE(out[1].has_value());
  check_close(*out[0], numerical_gradient(forward, {self, source}, 0, g), 1e-6);
  check_close(*out[1], numerical_gradient(forward, {self, source}, 1, g), 1e-6);
}

TEST_CASE("complex: a node whose formula was not checked for complex numbers raises") {
  const Tensor z = random_complex({3}, 13);
  CHECK(supports_complex(get_node("MulBackward0").schema));
  CHECK_FALSE(supports_complex(get_node("ReluBackward0").schema));
  CHECK_THROWS_WITH_AS(call_node("ReluBackward0", {z}, {true}, Saved{{"result", random64({3}, 14)}}),
                       "ReluBackward0: complex128 is not supported yet by this node (incoming grad 0): its formula "
                       "has not been checked for complex numbers (derivatives.yaml's conjugates)",
                       Error);
  CHECK_THROWS_WITH_AS(call_node("ReluBackward0", {random64({3}, 15)}, {true}, Saved{{"result", z}}),
                       "ReluBackward0: complex128 is not supported yet by this node (saved result): its formula has "
                       "not been checked for complex numbers (derivatives.yaml's conjugates)",
                       Error);
}

}  // TEST_SUITE
