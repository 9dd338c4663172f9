// L3: running a program in float64, the oracle's reference precision
// (DESIGN.md, "Numbers and precision"). Every place a program names a dtype
// is rewritten f16, bf16, f32 -> f64 and c32, c64 -> c128, and every such tensor is converted; the
// program's instructions are otherwise the same, so running it computes the
// same formulas with float64 rounding.
//
// perturbed_to_float64 is the same promotion with every value the program starts from moved by up to
// one rounding of its own dtype: how far the exact result moves then is how much rounding noise any
// computation of it in that dtype carries, however it orders its sums (refgrad/check/rule.py).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

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

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return hash;
}

// `value` promoted, each real number of it (a complex element's two parts apart) times 1 + u eps, eps
// `scale` times the unit roundoff of value's dtype, u uniform on [-1, 1]: drawn from the seed, the value's
// name and the number's index, so the same program gives the same perturbation everywhere (and the same u
// at every scale). Other dtypes pass unchanged.
Tensor perturbed(const Tensor& value, std::string_view name, std::uint64_t seed, double scale) {
  if (!value.defined() || !(is_floating_point(value.dtype()) || is_complex(value.dtype()))) return value;
  const double eps = scale * unit_roundoff(value.dtype());
  const bool complex_values = is_complex(value.dtype());
  const Tensor exact = contiguous(to(value, complex_values ? DType::ComplexDouble : DType::Float64));
  const Tensor parts = complex_values ? view_as_real(exact) : exact;
  const std::uint64_t stream = splitmix64(seed ^ fnv1a(name));
  std::vector<double> factors(static_cast<std::size_t>(parts.numel()));
  for (std::size_t i = 0; i < factors.size(); ++i) {
    factors[i] = 1.0 + uniform_minus_one_to_one(stream, i) * eps;
  }
  const Tensor moved = mul(parts, from_vector(factors, parts.sizes()));
  return complex_values ? view_as_complex(moved) : moved;
}

std::optional<Tensor> perturbed(const std::optional<Tensor>& value, std::string_view name, std::uint64_t seed,
                                double scale) {
  return value ? std::optional<Tensor>(perturbed(*value, name, seed, scale)) : std::nullopt;
}

// A tensor's real numbers in float64, a complex element's two parts apart.
std::vector<double> real_numbers(const Tensor& value) {
  const Tensor exact = contiguous(to(value, is_complex(value.dtype()) ? DType::ComplexDouble : DType::Float64));
  return (is_complex(value.dtype()) ? contiguous(view_as_real(exact)) : exact).to_vector<double>();
}

// The names of the saved values an instruction's fields refer to (without '$').
std::vector<std::string> saved_names(const Instr& instr) {
  std::vector<std::string> names;
  for (const Attr& attr : instr.attrs) {
    if (const auto* ref = std::get_if<SavedRef>(&attr.value)) names.push_back(ref->name);
    if (const auto* refs = std::get_if<std::vector<SavedRef>>(&attr.value)) {
      for (const SavedRef& ref : *refs) names.push_back(ref.name);
    }
    if (const auto* refs = std::get_if<std::vector<std::optional<SavedRef>>>(&attr.value)) {
      for (const std::optional<SavedRef>& ref : *refs) {
        if (ref) names.push_back(ref->name);
      }
    }
  }
  if (instr.op == Opcode::Aten) {  // its saved tensors are operands: "$x"
    for (const std::optional<std::string>& operand : instr.operands) {
      if (operand && operand->starts_with('$')) names.push_back(operand->substr(1));
    }
  }
  return names;
}

// The largest unit roundoff among the floating and complex dtypes an instruction reads or makes (0: none).
double instruction_unit_roundoff(const Program& program, std::size_t pc) {
  const Instr& instr = program.code[pc];
  double largest = 0.0;
  const auto take = [&](DType dtype) {
    if (is_floating_point(dtype) || is_complex(dtype)) largest = std::max(largest, unit_roundoff(dtype));
  };
  const auto take_metadata = [&](const Instr& validate) {
    for (const std::optional<InputMetadata>& metadata : validate.metadata) {
      if (metadata) take(metadata->dtype);
    }
  };
  for (const std::string& name : saved_names(instr)) {
    if (const SavedDecl* saved = program.find_saved(name)) take(saved->type.dtype);
  }
  for (const std::optional<std::string>& operand : instr.operands) {
    if (const GradDecl* grad = operand ? program.find_grad(*operand) : nullptr) take(grad->type.dtype);
  }
  if (instr.op == Opcode::Validate || instr.op == Opcode::Zeros) take_metadata(instr);
  if (instr.op == Opcode::AccumulateGrad) {
    if (const LeafDecl* leaf = program.find_leaf(instr.target)) take(leaf->type.dtype);
  }
  // the types the results are validated to, by the validate that follows
  if (pc + 1 < program.code.size() && program.code[pc + 1].op == Opcode::Validate &&
      program.code[pc + 1].operands == instr.results) {
    take_metadata(program.code[pc + 1]);
  }
  return largest;
}

}  // namespace

RoundingNoise rounding_noise_of(const Program& program, std::uint64_t seed, double scale,
                                const std::vector<TraceEntry>& as_captured) {
  double program_largest = 0.0;
  const auto take = [&](DType dtype) {
    if (is_floating_point(dtype) || is_complex(dtype)) program_largest = std::max(program_largest, unit_roundoff(dtype));
  };
  for (const GradDecl& grad : program.grads) take(grad.type.dtype);
  for (const SavedDecl& saved : program.saved) take(saved.type.dtype);
  for (const LeafDecl& leaf : program.leaves) take(leaf.type.dtype);
  for (const OutputDecl& output : program.outputs) take(output.type.dtype);
  RoundingNoise noise{seed, scale, {}, {}};
  noise.unit_roundoff.reserve(program.code.size());
  for (std::size_t pc = 0; pc < program.code.size(); ++pc) {
    const double own = instruction_unit_roundoff(program, pc);
    noise.unit_roundoff.push_back(own > 0.0 ? own : program_largest);
  }
  // the validates that cast a grad to a narrower dtype: a result of less precision than its operand
  for (const TraceEntry& entry : as_captured) {
    if (entry.pc >= program.code.size() || program.code[entry.pc].op != Opcode::Validate) continue;
    std::vector<std::optional<DType>> casts(entry.outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < entry.outputs.size() && i < entry.inputs.size(); ++i) {
      const ValueInfo &from = entry.inputs[i], &to = entry.outputs[i];
      if (from.defined && to.defined && unit_roundoff(to.type.dtype) > unit_roundoff(from.type.dtype)) {
        casts[i] = to.type.dtype;
        any = true;
      }
    }
    if (any) noise.casts[entry.pc] = std::move(casts);
  }
  return noise;
}

Program perturbed_to_float64(const Program& program, std::uint64_t seed, double scale,
                             const std::set<std::string>& held) {
  Program out = promote_to_float64(program);  // the declared types and the dtypes instructions name, values held
  // the values from the program's own, whose dtype says how far one rounding moves them
  const auto move = [&](const std::optional<Tensor>& value, const std::string& name, std::optional<Tensor>& into) {
    if (!held.contains(name)) into = perturbed(value, name, seed, scale);
  };
  for (std::size_t i = 0; i < program.grads.size(); ++i)
    move(program.grads[i].value, "%" + program.grads[i].name, out.grads[i].value);
  for (std::size_t i = 0; i < program.saved.size(); ++i)
    move(program.saved[i].value, "$" + program.saved[i].name, out.saved[i].value);
  for (std::size_t i = 0; i < program.leaves.size(); ++i)
    move(program.leaves[i].grad, "@" + program.leaves[i].name, out.leaves[i].grad);
  return out;
}

TensorMap perturbed_to_float64(const TensorMap& tensors, std::uint64_t seed, double scale,
                               const std::set<std::string>& held) {
  TensorMap out;
  for (const auto& [name, tensor] : tensors) {
    out.emplace(name, held.contains(name) ? promoted(tensor) : perturbed(tensor, name, seed, scale));
  }
  return out;
}

bool not_finite_where_finite(const Tensor& moved, const Tensor& exact) {
  if (!moved.defined() || !exact.defined() || moved.sizes() != exact.sizes()) return false;
  if (!(is_floating_point(moved.dtype()) || is_complex(moved.dtype()))) return false;
  const std::vector<double> m = real_numbers(moved), r = real_numbers(exact);
  for (std::size_t i = 0; i < m.size() && i < r.size(); ++i) {
    if (std::isfinite(r[i]) && !std::isfinite(m[i])) return true;
  }
  return false;
}

std::set<std::string> saved_values_broken_by_moving(const Machine& exact, const Machine& moved) {
  const Program& program = moved.program();
  const auto broken = [&](const std::optional<std::string>& name) {
    if (!name) return false;
    const std::optional<Tensor> far = moved.register_value(*name), near = exact.register_value(*name);
    return far && near && not_finite_where_finite(*far, *near);
  };
  std::set<std::string> held;
  for (const Instr& instr : program.code) {
    if (instr.op != Opcode::Call && instr.op != Opcode::CopySlices && instr.op != Opcode::CallBackward) continue;
    if (std::any_of(instr.operands.begin(), instr.operands.end(), broken)) continue;  // broken further up
    if (std::none_of(instr.results.begin(), instr.results.end(), broken)) continue;
    for (const std::string& name : saved_names(instr)) held.insert("$" + name);
  }
  return held;
}

double linear_sensitivity(const Tensor& exact, const Tensor& moved, const Tensor& moved_less, double ratio) {
  check(exact.sizes() == moved.sizes() && exact.sizes() == moved_less.sizes(), "linear_sensitivity: shapes ",
        shape_text(exact.sizes()), ", ", shape_text(moved.sizes()), " and ", shape_text(moved_less.sizes()),
        " differ");
  const std::vector<double> r = real_numbers(exact), far = real_numbers(moved), near = real_numbers(moved_less);
  double largest = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double step = std::abs(far[i] - r[i]), small_step = std::abs(near[i] - r[i]);
    // linear: `ratio` times the move gives about `ratio` times the step. A step that grows like the square of
    // the move counts too: where the first derivative is 0 by structure (layer_norm's gradient over equal
    // values, x_hat = 0), rounding moves the result at second order, and as far as a correct computation
    // lands. A step that does not shrink with the move is a jump (a tie broken, a boundary crossed); one that
    // grows otherwise, a boundary crossed only by the larger move. Neither is rounding noise: an engine
    // decides ties and boundaries from the values it was given, as refgrad does.
    const bool linear = small_step * ratio / 2 <= step && step <= small_step * ratio * 2;
    const bool quadratic = small_step * ratio * ratio / 2 <= step && step <= small_step * ratio * ratio * 2;
    if (std::isfinite(step) && (linear || quadratic)) {
      largest = std::max(largest, step);
    }
  }
  return largest;
}

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
