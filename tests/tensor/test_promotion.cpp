// Type promotion: promote_types and result_type against hand-worked cases and
// against torch.promote_types / torch.result_type, over every pair of dtypes in
// every tier (tensors with dim > 0, 0-dim tensors, Python numbers).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "refgrad/tensor.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_run;

namespace {

// Every dtype for the pairs; a mix of every category and width for the triples.
const std::vector<DType> kDTypes(std::begin(kAllDTypes), std::end(kAllDTypes));
const std::vector<DType> kThreeOperandDTypes = {DType::Bool,    DType::UInt8,    DType::Int32,
                                                DType::Float16, DType::BFloat16, DType::Float64,
                                                DType::ComplexHalf, DType::ComplexFloat};

std::string torch_dtype(DType dtype) { return "torch." + dtype_name(dtype); }

// A Python number, with its literal as torch sees it in an expression. The
// literal is written out because Scalar::repr prints the float 1.0 as "1".
struct PythonNumber {
  Scalar value;
  std::string literal;
};
const std::vector<PythonNumber> kNumbers = {{true, "True"}, {false, "False"}, {3, "3"},
                                            {-7, "-7"},     {2.5, "2.5"},     {1.0, "1.0"},
                                            {std::complex<double>(2, 3), "(2+3j)"},
                                            {std::complex<double>(0, 1), "1j"}};
// One number of each kind, to keep the many three-operand cases quick.
const std::vector<PythonNumber> kThreeOperandNumbers = {
    {true, "True"}, {3, "3"}, {2.5, "2.5"}, {std::complex<double>(0, 1), "1j"}};

// The two tensor tiers. The values do not matter: since torch 2.0 promotion
// looks at dtypes and tiers only, never at values.
Tensor with_dims(DType dtype) { return ones({2}, dtype); }
Tensor zero_dim(DType dtype) { return ones({}, dtype); }

// The dtype torch returns for an expression over the tensors bound to a, b, c.
DType torch_dtype_of(const std::string& expression, const std::vector<Tensor>& inputs) {
  return torch_eval1(expression, inputs).dtype();
}

// `refgrad` agrees with torch's `expression`: the same dtype, or both raise
// (torch promotes uint16, uint32 and uint64 only with bool, themselves and the floating types).
template <class RefgradDType>
void check_same_as_torch(const std::string& expression, const std::vector<Tensor>& inputs, RefgradDType refgrad) {
  const refgrad::testing::TorchResult expected = torch_run(expression, inputs);
  if (!expected.ok) {
    CAPTURE(expected.error);
    CHECK_THROWS_AS(refgrad(), Error);
    return;
  }
  REQUIRE(expected.outputs.size() == 1);
  CHECK(refgrad() == expected.outputs[0].dtype());
}

// One operand of a three-operand list: a tensor (bound to a name) or a number.
struct Named {
  Operand operand;
  std::string python;  // "a", "b", "c" or a number's literal
};

// torch has no result_type over more than two operands, so the three-operand
// cases ask torch in two independent ways:
//
// 1. An expression of binary additions nested by tier, innermost the lowest:
//      (tensors with dim > 0) + ((0-dim tensors) + number)
//    c10 computes result_type as the promotion within each tier, then
//    combine_categories(dim tier, combine_categories(0-dim tier, numbers)).
//    Adding within a tier is plain promotion and keeps the tier (dim > 0 + dim
//    > 0 has dim > 0; 0-dim + 0-dim is 0-dim); adding a number to a 0-dim tensor
//    gives a 0-dim tensor of combine_categories(0-dim, number); adding that to
//    the dim > 0 sum applies the outer combine_categories. So the expression's
//    dtype is the three-operand result_type. A flat left-to-right sum would not
//    do: int64[2] + float32[] + float64[] is float32 step by step (float32[2]
//    outranks the float64 0-dim tensor) but float64 as one list.
//    Each tier must be summed before it meets the next: bool[2] + float64[]
//    alone is float64[2], while bool[2] + float32[2] + float64[] is float32.
//    (At most one number per list: Python adds True + True to the int 2.)
// 2. torch._prims_common.elementwise_dtypes with DEFAULT promotion, torch's own
//    Python statement of the same rules, used by its reference implementations;
//    it agrees with TensorIterator ops of three inputs such as torch.addcmul.
std::string tier_nested_sum(const std::vector<Named>& operands) {
  std::vector<std::string> dims, zero_dims, numbers;
  for (const Named& named : operands) {
    if (const auto* t = std::get_if<Tensor>(&named.operand)) (t->dim() > 0 ? dims : zero_dims).push_back(named.python);
    else numbers.push_back(named.python);
  }
  REQUIRE(numbers.size() <= 1);
  // Each tier is summed on its own first, then added to the tiers below it.
  auto sum = [](const std::vector<std::string>& terms) {
    std::string out;
    for (const std::string& term : terms) out = out.empty() ? term : "(" + out + " + " + term + ")";
    return out;
  };
  std::string nested = numbers.empty() ? "" : numbers.front();
  for (const std::string& tier : {sum(zero_dims), sum(dims)}) {
    if (!tier.empty()) nested = nested.empty() ? tier : "(" + tier + " + " + nested + ")";
  }
  return "(" + nested + ").dtype";
}

std::string elementwise_dtypes(const std::vector<Named>& operands) {
  std::string arguments;
  for (const Named& named : operands) arguments += named.python + ", ";
  return "torch._prims_common.elementwise_dtypes(" + arguments +
         "type_promotion_kind=torch._prims_common.ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]";
}

// Checks result_type over `operands` against both torch statements.
void check_against_torch(const std::vector<Named>& operands) {
  std::vector<Operand> list;
  std::vector<Tensor> inputs;
  std::string description;
  for (const Named& named : operands) {
    list.push_back(named.operand);
    if (const auto* t = std::get_if<Tensor>(&named.operand)) {
      inputs.push_back(*t);
      description += dtype_name(t->dtype()) + (t->dim() > 0 ? "[2] " : "[] ");
    } else {
      description += named.python + " ";
    }
  }
  CAPTURE(description);
  // Where torch raises, refgrad raises.
  check_same_as_torch(tier_nested_sum(operands), inputs, [&] { return result_type(list); });
  check_same_as_torch(elementwise_dtypes(operands), inputs, [&] { return result_type(list); });
}

}  // namespace

TEST_SUITE("tensor") {

TEST_CASE("promote_types") {
  SUBCASE("hand-worked") {
    CHECK(promote_types(DType::Bool, DType::Bool) == DType::Bool);
    CHECK(promote_types(DType::Bool, DType::Int64) == DType::Int64);
    CHECK(promote_types(DType::Int64, DType::Float32) == DType::Float32);
    CHECK(promote_types(DType::Float64, DType::Bool) == DType::Float64);
    CHECK(promote_types(DType::Float32, DType::Float64) == DType::Float64);
    CHECK(promote_types(DType::Float16, DType::BFloat16) == DType::Float32);
    CHECK(promote_types(DType::UInt8, DType::Int8) == DType::Int16);
    CHECK(promote_types(DType::Int32, DType::Float16) == DType::Float16);
    CHECK(promote_types(DType::ComplexFloat, DType::Float64) == DType::ComplexDouble);
    CHECK_THROWS_AS(promote_types(DType::UInt16, DType::Int8), Error);
  }

  SUBCASE("every pair against torch.promote_types") {
    for (DType a : kDTypes) {
      for (DType b : kDTypes) {
        CAPTURE(dtype_name(a));
        CAPTURE(dtype_name(b));
        check_same_as_torch("torch.promote_types(" + torch_dtype(a) + ", " + torch_dtype(b) + ")", {},
                            [&] { return promote_types(a, b); });
        if (torch_run("torch.promote_types(" + torch_dtype(a) + ", " + torch_dtype(b) + ")").ok)
          CHECK(promote_types(a, b) == promote_types(b, a));
      }
    }
  }
}

TEST_CASE("result_type") {
  SUBCASE("hand-worked") {
    // A higher tier wins unless a lower one is of a higher category.
    CHECK(result_type(with_dims(DType::Float32), zero_dim(DType::Float64)) == DType::Float32);
    CHECK(result_type(with_dims(DType::Int64), zero_dim(DType::Float64)) == DType::Float64);
    CHECK(result_type(with_dims(DType::Bool), zero_dim(DType::Int64)) == DType::Int64);
    CHECK(result_type(with_dims(DType::Int64), zero_dim(DType::Bool)) == DType::Int64);
    CHECK(result_type(zero_dim(DType::Float32), zero_dim(DType::Float64)) == DType::Float64);
    // A Python float is the default dtype (float32) against integral tensors.
    CHECK(result_type(with_dims(DType::Int64), Scalar(2.5)) == DType::Float32);
    CHECK(result_type(zero_dim(DType::Int64), Scalar(2.5)) == DType::Float32);
    CHECK(result_type(zero_dim(DType::Float64), Scalar(2.5)) == DType::Float64);
    CHECK(result_type(with_dims(DType::Bool), Scalar(3)) == DType::Int64);
    CHECK(result_type(with_dims(DType::Int64), Scalar(true)) == DType::Int64);
    CHECK(result_type(std::vector<Operand>{Scalar(2.5), Scalar(1)}) == DType::Float32);
    CHECK(result_type(std::vector<Operand>{Scalar(true)}) == DType::Bool);
    CHECK(result_type(std::vector<Operand>{with_dims(DType::Int64), zero_dim(DType::Float32),
                                           zero_dim(DType::Float64)}) == DType::Float64);
  }

  SUBCASE("two tensors with dim > 0") {
    for (DType x : kDTypes) {
      for (DType y : kDTypes) {
        CAPTURE(dtype_name(x));
        CAPTURE(dtype_name(y));
        const Tensor a = with_dims(x), b = ones({3, 2}, y);
        check_same_as_torch("torch.result_type(a, b)", {a, b}, [&] { return result_type(a, b); });
        // A size-0 dim is still dim > 0.
        const Tensor empty_b = zeros({0, 3}, y);
        check_same_as_torch("torch.result_type(a, b)", {a, empty_b}, [&] { return result_type(a, empty_b); });
      }
    }
  }

  SUBCASE("a tensor with dim > 0 and a 0-dim tensor, both orders") {
    for (DType x : kDTypes) {
      for (DType y : kDTypes) {
        CAPTURE(dtype_name(x));
        CAPTURE(dtype_name(y));
        const Tensor a = with_dims(x), b = zero_dim(y);
        check_same_as_torch("torch.result_type(a, b)", {a, b}, [&] { return result_type(a, b); });
        check_same_as_torch("torch.result_type(a, b)", {b, a}, [&] { return result_type(b, a); });
      }
    }
  }

  SUBCASE("two 0-dim tensors") {
    for (DType x : kDTypes) {
      for (DType y : kDTypes) {
        CAPTURE(dtype_name(x));
        CAPTURE(dtype_name(y));
        const Tensor a = zero_dim(x), b = zero_dim(y);
        check_same_as_torch("torch.result_type(a, b)", {a, b}, [&] { return result_type(a, b); });
      }
    }
  }

  SUBCASE("a tensor and a Python number, both orders") {
    for (DType x : kDTypes) {
      for (const Tensor& a : {with_dims(x), zero_dim(x)}) {
        for (const PythonNumber& number : kNumbers) {
          CAPTURE(dtype_name(x));
          CAPTURE(a.dim());
          CAPTURE(number.literal);
          check_same_as_torch("torch.result_type(a, " + number.literal + ")", {a},
                              [&] { return result_type(a, number.value); });
          check_same_as_torch("torch.result_type(" + number.literal + ", a)", {a},
                              [&] { return result_type(std::vector<Operand>{number.value, a}); });
        }
      }
    }
  }

  SUBCASE("two Python numbers") {
    for (const PythonNumber& x : kNumbers) {
      for (const PythonNumber& y : kNumbers) {
        CAPTURE(x.literal);
        CAPTURE(y.literal);
        CHECK(result_type(std::vector<Operand>{x.value, y.value}) ==
              torch_dtype_of("torch.result_type(" + x.literal + ", " + y.literal + ")", {}));
      }
    }
  }

  SUBCASE("three tensors in every mix of tiers") {
    for (int tiers = 0; tiers < 8; ++tiers) {  // bit k set: operand k has dim > 0
      for (DType x : kThreeOperandDTypes) {
        for (DType y : kThreeOperandDTypes) {
          for (DType z : kThreeOperandDTypes) {
            auto make = [&](int k, DType dtype) { return (tiers >> k) & 1 ? with_dims(dtype) : zero_dim(dtype); };
            check_against_torch({{make(0, x), "a"}, {make(1, y), "b"}, {make(2, z), "c"}});
          }
        }
      }
    }
  }

  SUBCASE("two tensors and a Python number in every mix of tiers and positions") {
    for (int tiers = 0; tiers < 4; ++tiers) {
      for (DType x : kThreeOperandDTypes) {
        for (DType y : kThreeOperandDTypes) {
          for (const PythonNumber& number : kThreeOperandNumbers) {
            const Tensor a = tiers & 1 ? with_dims(x) : zero_dim(x);
            const Tensor b = tiers & 2 ? with_dims(y) : zero_dim(y);
            check_against_torch({{a, "a"}, {b, "b"}, {number.value, number.literal}});
            check_against_torch({{number.value, number.literal}, {a, "a"}, {b, "b"}});
          }
        }
      }
    }
  }

  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(result_type(std::vector<Operand>{}), "result_type: no operands", Error);
    CHECK_THROWS_WITH_AS(result_type(Tensor(), with_dims(DType::Int64)), "result_type: undefined tensor operand",
                         Error);
  }
}

}  // TEST_SUITE
