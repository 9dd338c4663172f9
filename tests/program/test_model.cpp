// The program model's small pieces: type spellings and structural equality.
#include <cmath>
#include <limits>

#include <doctest/doctest.h>

#include "refgrad/program.hpp"

using namespace refgrad;

TEST_CASE("TensorType and InputMetadata spellings") {
  CHECK(to_string(TensorType{DType::Float32, {4, 5}, Device::CPU}) == "f32[4,5]");
  CHECK(to_string(TensorType{DType::Int64, {}, Device::CUDA}) == "i64[] cuda");
  CHECK(to_string(InputMetadata{DType::Float32, {4, 3}}) == "f32[4,3]");
  InputMetadata cast;
  cast.dtype = DType::Float32;
  cast.shape = {3};
  cast.grad_dtype = DType::Float64;
  CHECK(to_string(cast) == "f32[3]{grad_dtype=f64}");
  cast.grad_dtype = std::nullopt;
  cast.device = Device::CUDA;
  cast.is_tensor_subclass = true;
  CHECK(to_string(cast) == "f32[3]{device=cuda, grad_dtype=none, subclass}");
  CHECK(parse_short_dtype("b8") == DType::Bool);
  CHECK_FALSE(parse_short_dtype("float32").has_value());
  CHECK(parse_hook_kind("post_acc_grad") == HookKind::PostAccGrad);
  CHECK_FALSE(parse_hook_kind("post_accumulate").has_value());
}

TEST_CASE("Program equality compares inline tensors and floats by bits") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Program a;
  SavedDecl x;
  x.name = "x";
  x.type = TensorType{DType::Float64, {2}, Device::CPU};
  x.value = tensor({nan, 0.0}, DType::Float64);
  a.saved.push_back(x);
  Instr call;
  call.op = Opcode::Call;
  call.node = "LeakyReluBackward0";
  call.operands = {"g"};
  call.results = {"r"};
  call.need = {true};
  call.attrs = {Attr{"negative_slope", nan}, Attr{"self", SavedRef{"x"}}};
  a.code.push_back(call);
  Program b = a;
  b.code[0].where = SourceLocation{"elsewhere.bwd", 7, 3};  // locations do not count
  CHECK(a == b);
  b.saved[0].value = tensor({nan, -0.0}, DType::Float64);
  CHECK_FALSE(a == b);
  b = a;
  b.code[0].attrs[0].value = -nan;
  CHECK_FALSE(a == b);
  b = a;
  b.code[0].attrs[0].value = Scalar(1.0);
  CHECK_FALSE(a == b);
  CHECK(Attr{"alpha", Scalar(1)} == Attr{"alpha", Scalar(std::int64_t{1})});
  CHECK_FALSE(Attr{"alpha", Scalar(1)} == Attr{"alpha", Scalar(1.0)});
}
