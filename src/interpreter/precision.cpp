// L3: running a program in float64, the oracle's reference precision
// (DESIGN.md, "Numbers and precision"). Every place a program names a dtype
// is rewritten f16, bf16, f32 -> f64 and c32, c64 -> c128, and every such tensor is converted; the
// program's instructions are otherwise the same, so running it computes the
// same formulas with float64 rounding.
#include <type_traits>

#include "refgrad/interpreter.hpp"
#include "refgrad/ops.hpp"

namespace refgrad {
namespace {

// float16, bfloat16 and float32 become float64; complex32 and complex64 become complex128.
DType promoted(DType dtype) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32) return DType::Float64;
  if (dtype == DType::ComplexHalf || dtype == DType::ComplexFloat) return DType::ComplexDouble;
  return dtype;
}

Tensor promoted(const Tensor& tensor) {
  return tensor.defined() && promoted(tensor.dtype()) != tensor.dtype() ? to(tensor, promoted(tensor.dtype())) : tensor;
}

void promote(std::optional<DType>& dtype) {
  if (dtype) dtype = promoted(*dtype);
}

void promote(std::optional<Tensor>& value) {
  if (value) value = promoted(*value);
}

void promote(TensorType& type) { type.dtype = promoted(type.dtype); }

void promote(InputMetadata& metadata) {
  metadata.dtype = promoted(metadata.dtype);
  promote(metadata.grad_dtype);
}

// The dtype-valued saved fields: ScalarType, TensorOptions' dtype,
// TypeAndSize's options, ScalarType[]. Other kinds name no dtype.
void promote(AttrValue& value) {
  std::visit(
      [](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, DType>) {
          x = promoted(x);
        } else if constexpr (std::is_same_v<T, TensorOptions>) {
          promote(x.dtype);
        } else if constexpr (std::is_same_v<T, TypeAndSize>) {
          promote(x.options.dtype);
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          for (DType& dtype : x) dtype = promoted(dtype);
        }
      },
      value);
}

}  // namespace

Program promote_to_float64(const Program& program) {
  Program out = program;
  for (GradDecl& grad : out.grads) {
    promote(grad.type);
    promote(grad.value);
  }
  for (SavedDecl& saved : out.saved) {
    promote(saved.type);
    promote(saved.value);
  }
  for (LeafDecl& leaf : out.leaves) {
    promote(leaf.type);
    promote(leaf.grad);
  }
  for (OutputDecl& output : out.outputs) promote(output.type);
  for (Instr& instr : out.code) {
    for (Attr& attr : instr.attrs) promote(attr.value);
    for (std::optional<InputMetadata>& metadata : instr.metadata) {
      if (metadata) promote(*metadata);
    }
  }
  return out;
}

TensorMap promote_to_float64(const TensorMap& tensors) {
  TensorMap out;
  for (const auto& [name, tensor] : tensors) out.emplace(name, promoted(tensor));
  return out;
}

}  // namespace refgrad
