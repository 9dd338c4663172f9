// refgrad::Tensor — the L0 value type.
//
// A Tensor is a view into a shared Storage: sizes, strides (in elements) and a
// storage offset, like an ATen TensorImpl. Views are real — transpose, slice,
// as_strided and expand share the buffer — because CopySlices and
// AsStridedBackward0 are defined in terms of them.
//
// No xtensor here: this header is public and is included by C++20 code.
// It is also included by the C++17 kernels in src/tensor, so it stays C++17.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <iosfwd>
#include <limits>
#include <variant>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "refgrad/error.hpp"

namespace refgrad {

// ---------------------------------------------------------------- dtypes ---

// Every dtype torch autograd meets (DESIGN.md, "Numbers and precision").
// Bool, Int64, Float32 and Float64 are compute types: the CPU kernels compute
// in them. The others are storage formats: an op reads them into its
// "opmath" type (float16 and bfloat16 into float32, the narrower integers into
// int64), computes there and rounds its result back, as ATen's CPU kernels do.
// complex64 and complex128 compute as std::complex<float>/<double> in the ops
// ATen defines on them that refgrad has (src/tensor/complex.cpp); the others
// raise. complex32 (torch.chalf: two float16) is a storage format of
// complex64, as float16 is of float32. The numbering is the .rgbc format's:
// new dtypes are appended.
enum class DType : std::uint8_t {
  Bool, Int64, Float32, Float64,
  Float16, BFloat16, ComplexFloat, ComplexDouble,
  UInt8, Int8, Int16, Int32, UInt16, UInt32, UInt64,
  ComplexHalf,
};
inline constexpr DType kAllDTypes[] = {
    DType::Bool,    DType::UInt8,   DType::Int8,     DType::Int16,       DType::Int32,
    DType::Int64,   DType::UInt16,  DType::UInt32,   DType::UInt64,      DType::Float16,
    DType::BFloat16, DType::Float32, DType::Float64, DType::ComplexHalf, DType::ComplexFloat,
    DType::ComplexDouble};

std::string dtype_name(DType dtype);  // "float32", as in torch.float32
std::string short_dtype_name(DType dtype);  // "f32", "bf16", "b8": the program text's (and FX's) spelling
std::size_t element_size(DType dtype);
bool is_floating_point(DType dtype);  // float16, bfloat16, float32, float64
bool is_complex(DType dtype);  // complex32, complex64, complex128
bool is_integral(DType dtype, bool include_bool);
bool is_unsigned(DType dtype);  // uint8 and the wide unsigned types (not bool)
// The type an op computes a dtype in (float16, bfloat16 -> float32; complex32
// -> complex64; the narrower integers -> int64; the others themselves).
DType opmath_dtype(DType dtype);
// The complex dtype of a real one's precision (float16 -> complex32, bfloat16
// and float32 -> complex64, float64 -> complex128), c10's toComplexType; a
// complex dtype is itself.
DType to_complex_type(DType dtype);
// The real dtype of a complex one's parts (complex64 -> float32), c10's
// toRealValueType; a real dtype is itself.
DType to_real_value_type(DType dtype);
DType default_dtype();  // float32, torch.get_default_dtype()

// float16 and bfloat16 values as stored: the bits, converted to and from
// float with IEEE round-to-nearest-even, as c10::Half and c10::BFloat16 do
// (a NaN becomes the quiet NaN 0x7E00 or 0x7FC0, a float16 overflow inf).
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};
float to_float(Half value);
float to_float(BFloat16 value);
Half to_half(float value);
BFloat16 to_bfloat16(float value);
// complex32 as stored: a float16 real part, then a float16 imaginary part (c10::complex<c10::Half>).
struct ComplexHalf {
  Half real;
  Half imag;
};

// The C++ type stored for a dtype. bool is stored as one byte, as in ATen.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<bool>() { return DType::Bool; }
template <>
constexpr DType dtype_of<std::uint8_t>() { return DType::UInt8; }
template <>
constexpr DType dtype_of<std::int8_t>() { return DType::Int8; }
template <>
constexpr DType dtype_of<std::int16_t>() { return DType::Int16; }
template <>
constexpr DType dtype_of<std::int32_t>() { return DType::Int32; }
template <>
constexpr DType dtype_of<std::int64_t>() { return DType::Int64; }
template <>
constexpr DType dtype_of<std::uint16_t>() { return DType::UInt16; }
template <>
constexpr DType dtype_of<std::uint32_t>() { return DType::UInt32; }
template <>
constexpr DType dtype_of<std::uint64_t>() { return DType::UInt64; }
template <>
constexpr DType dtype_of<Half>() { return DType::Float16; }
template <>
constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <>
constexpr DType dtype_of<float>() { return DType::Float32; }
template <>
constexpr DType dtype_of<double>() { return DType::Float64; }
template <>
constexpr DType dtype_of<ComplexHalf>() { return DType::ComplexHalf; }
template <>
constexpr DType dtype_of<std::complex<float>>() { return DType::ComplexFloat; }
template <>
constexpr DType dtype_of<std::complex<double>>() { return DType::ComplexDouble; }

enum class Device : std::uint8_t { CPU, CUDA /* reserved: no CUDA backend yet */ };
std::string device_name(Device device);

// ----------------------------------------------------------------- shapes ---

// Sizes, strides, dims, pads, kernel sizes: a vector that keeps up to six
// values inline and allocates only beyond that. Every Tensor holds two of them
// and nearly every call makes a Tensor, so with std::vector the allocator was
// half the cost of an op on a small tensor (bench/bench_interpreter's chain).
using IntList = boost::container::small_vector<std::int64_t, 6>;
using Shape = IntList;  // sizes or strides

std::string str(const Shape& shape);  // "[2,3]"
// A shape in a check()'s message, spelled as str() spells it but only when
// the check fails: check(ok, "...", shape_text(sizes)) costs nothing on the
// path that passes, where str(sizes) would build a string every time.
struct ShapeText {
  const Shape& shape;
};
inline ShapeText shape_text(const Shape& shape) { return ShapeText{shape}; }
std::ostream& operator<<(std::ostream& out, ShapeText text);
// The product of the sizes; raises when it does not fit in int64 (a shape
// read from a program may be anything).
std::int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& sizes);  // raises when a stride would overflow int64
// ATen's maybe_wrap_dim: wraps a possibly negative dim into [0, ndim); names
// `op` in the error. A 0-d tensor accepts dims 0 and -1 (both wrap to 0), so
// a caller that then indexes sizes must handle ndim == 0 itself.
std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op);

// a * b and a + b in int64, raising (naming `op` and both values) where ATen
// would overflow: sizes, strides and offsets computed from saved fields.
std::int64_t multiply_or_fail(std::int64_t a, std::int64_t b, const char* op);
std::int64_t add_or_fail(std::int64_t a, std::int64_t b, const char* op);

// ----------------------------------------------------------- memory limit ---

// The most bytes one tensor may hold or view (numel times the element size).
// Creating a larger one raises refgrad::Error naming its shape and dtype,
// before anything is allocated, instead of std::bad_alloc or the OOM killer:
// a program's sizes come from its text and may be anything. The default is
// the machine's physical memory (or the container's cgroup limit when that is
// lower); a Machine runs its instructions under its own limit
// (MachineOptions::memory_limit, `refgrad run --memory-limit`).
std::size_t default_memory_limit();
std::size_t memory_limit();  // the limit in effect on this thread now
// Sets the limit on this thread for the scope's lifetime, then restores it.
class MemoryLimitScope {
 public:
  explicit MemoryLimitScope(std::size_t bytes);
  ~MemoryLimitScope();
  MemoryLimitScope(const MemoryLimitScope&) = delete;
  MemoryLimitScope& operator=(const MemoryLimitScope&) = delete;

 private:
  std::size_t previous_;
};
// Raises unless a tensor of `sizes` and `dtype` fits under memory_limit().
void check_fits_memory_limit(const Shape& sizes, DType dtype);

// ---------------------------------------------------------------- threads ---

// The threads refgrad's kernels split their work over, BLAS included. Results
// never depend on it: every kernel cuts its work into pieces whose bounds
// depend only on the sizes (never on the thread count) and combines partial
// results in a fixed order, so 1 and N threads give the same bits. The
// default is every core this process may run on; a Machine runs under its own
// count (MachineOptions::threads, `refgrad run --threads`,
// `refgrad.set_num_threads`).
int default_num_threads();       // the cores this process may run on
int num_threads();               // the count in effect on this thread now
void set_num_threads(int threads);  // the process-wide count; 0: default_num_threads()
// Sets the count on this thread for the scope's lifetime, then restores it.
class NumThreadsScope {
 public:
  explicit NumThreadsScope(int threads);
  ~NumThreadsScope();
  NumThreadsScope(const NumThreadsScope&) = delete;
  NumThreadsScope& operator=(const NumThreadsScope&) = delete;

 private:
  std::optional<int> previous_;
};

// ----------------------------------------------------------------- Scalar ---

// A number that is not a tensor: PyTorch's c10::Scalar. Its kind (bool, int,
// float, complex) matters for type promotion: a Python float added to an int64
// tensor gives float32, an int added to it stays int64, a complex one added to
// a float64 tensor gives complex128.
class Scalar {
 public:
  enum class Kind : std::uint8_t { Bool, Int, Float, Complex };  // numbered as in .rgbc

  Scalar() : Scalar(std::int64_t{0}) {}
  Scalar(bool value) : kind_(Kind::Bool), int_(value ? 1 : 0), real_(value ? 1.0 : 0.0) {}
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Scalar(I value)
      : kind_(Kind::Int), int_(static_cast<std::int64_t>(value)), real_(static_cast<double>(value)) {}
  template <class F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  Scalar(F value) : kind_(Kind::Float), int_(0), real_(static_cast<double>(value)) {}
  template <class F>
  Scalar(std::complex<F> value)
      : kind_(Kind::Complex), int_(0), real_(static_cast<double>(value.real())),
        imag_(static_cast<double>(value.imag())) {}

  Kind kind() const { return kind_; }
  bool is_floating_point() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_boolean() const { return kind_ == Kind::Bool; }
  bool is_complex() const { return kind_ == Kind::Complex; }
  // The dtype a Python number of this kind takes as a 0-dim tensor.
  DType natural_dtype() const;

  // The value as a real number. A complex Scalar converts only when its
  // imaginary part is zero; otherwise this raises, as c10's checked
  // conversion does, so that a real-only formula never drops an imaginary
  // part silently.
  double to_double() const {
    if (kind_ == Kind::Complex) check_imaginary_part_is_zero("double");
    return real_;
  }
  std::complex<double> to_complex() const { return {real_, imag_}; }
  // A float truncates toward zero; one that int64 cannot hold (NaN, inf, 1e30) raises, as c10's
  // checked conversion does ("cannot be converted to type int64 without overflow"). 2^63 passes
  // c10's check and gives INT64_MIN, as x86's conversion (and so torch) does.
  std::int64_t to_int64() const {
    if (kind_ == Kind::Bool || kind_ == Kind::Int) return int_;
    if (kind_ == Kind::Complex) check_imaginary_part_is_zero("int64");
    constexpr double limit = 9223372036854775808.0;  // 2^63
    check(real_ >= -limit && real_ <= limit, "value ", repr(), " cannot be converted to type int64 without overflow");
    return real_ == limit ? std::numeric_limits<std::int64_t>::min() : static_cast<std::int64_t>(real_);
  }
  bool to_bool() const {
    if (kind_ == Kind::Bool || kind_ == Kind::Int) return int_ != 0;
    return real_ != 0.0 || imag_ != 0.0;
  }
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(to_int64());
    else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(to_double());
    else return T(static_cast<typename T::value_type>(real_), static_cast<typename T::value_type>(imag_));
  }
  // The complex conjugate (c10's Scalar::conj); a real Scalar is itself.
  Scalar conj() const { return kind_ == Kind::Complex ? Scalar(std::complex<double>(real_, -imag_)) : *this; }
  // Python's repr: True, 2, 0.5, (2+3j), 0.4j.
  std::string repr() const;

 private:
  void check_imaginary_part_is_zero(const char* type) const {
    check(imag_ == 0.0, "value ", repr(), " cannot be converted to type ", type, " without overflow");
  }

  Kind kind_;
  std::int64_t int_;
  double real_;
  double imag_ = 0.0;
};

// ---------------------------------------------------------------- Storage ---

// A flat buffer. It either owns its bytes or borrows them from an owner kept
// alive by a shared_ptr (a NumPy array, a torch tensor). Owned buffers of more
// than kInlineBytes are 64-byte aligned (allocate_cpu_buffer); up to
// kInlineBytes live inside the Storage itself, 16-byte aligned, so that a
// tensor of a few elements costs one plain allocation instead of three
// (Storage, buffer, owner).
class Storage {
 public:
  static constexpr std::size_t kInlineBytes = 64;

  Storage(std::size_t nbytes, Device device);  // uninitialized
  Storage(std::shared_ptr<void> owner, void* data, std::size_t nbytes, Device device);
  Storage(const Storage&) = delete;  // data_ may point into this object
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  std::shared_ptr<void> owner_;
  void* data_;
  std::size_t nbytes_;
  Device device_;
  alignas(16) std::byte inline_bytes_[kInlineBytes];  // 16: make_shared's own alignment, no memalign
};

// An uninitialized, 64-byte aligned CPU buffer. Freed buffers of 1 MiB or
// more are cached (up to 256 MiB) and reused, because first-touch page faults
// cost more than most ops (see src/tensor/allocator.cpp).
std::shared_ptr<void> allocate_cpu_buffer(std::size_t nbytes);
std::size_t cached_buffer_bytes();  // bytes held by the cache now
void release_cached_buffers();      // gives them back to the system

// ----------------------------------------------------------------- Tensor ---

class Tensor {
 public:
  Tensor() = default;  // undefined, like an undefined at::Tensor
  Tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, std::int64_t storage_offset,
         DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  DType scalar_type() const { return dtype_; }
  Device device() const;
  const Shape& sizes() const { return sizes_; }
  const Shape& shape() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  // Dim `dim` (negative counts from the end); a 0-d tensor has none, so
  // size(0) raises on it, as in ATen.
  std::int64_t size(std::int64_t dim) const;
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t dim() const { return static_cast<std::int64_t>(sizes_.size()); }
  std::int64_t numel() const { return numel_of(sizes_); }
  std::int64_t storage_offset() const { return storage_offset_; }
  bool is_contiguous() const;
  bool is_floating_point() const { return refgrad::is_floating_point(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // True when both are the same view of the same storage.
  bool is_same(const Tensor& other) const;

  // Pointer to element [0,...,0]. The dtype must match T.
  template <class T>
  T* data_ptr() const {
    check(defined(), "data_ptr: tensor is undefined");
    // Not check(..., dtype_name(...)): its arguments would build two strings on every call.
    if (dtype_of<T>() != dtype_) fail_data_ptr_dtype(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  [[noreturn]] void fail_data_ptr_dtype(DType asked) const;

  // The single value of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  // The element at a full index (negative indices wrap), converted to T.
  template <class T>
  T at(const Shape& index) const;
  // All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  Tensor to(DType dtype) const;  // a copy unless the dtype already matches
  Tensor contiguous() const;     // itself when already contiguous
  Tensor clone() const;          // always a new, contiguous buffer

  std::string repr() const;  // like PyTorch's: tensor([[1., 2.]], dtype=torch.float64)

 private:
  std::shared_ptr<Storage> storage_;
  Shape sizes_;
  Shape strides_;
  std::int64_t storage_offset_ = 0;
  DType dtype_ = DType::Float32;
};

// -------------------------------------------------------------- creation ---

Tensor empty(const Shape& sizes, DType dtype = DType::Float32);  // uninitialized
Tensor zeros(const Shape& sizes, DType dtype = DType::Float32);
Tensor ones(const Shape& sizes, DType dtype = DType::Float32);
// torch.full: without a dtype, the fill value's kind decides (bool, int64, float32).
Tensor full(const Shape& sizes, Scalar value, std::optional<DType> dtype = std::nullopt);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, Scalar value, std::optional<DType> dtype = std::nullopt);
Tensor scalar_tensor(Scalar value, std::optional<DType> dtype = std::nullopt);  // 0-dim

// torch.arange: int64 when start, end and step are all integers, else float32.
Tensor arange(Scalar end, std::optional<DType> dtype = std::nullopt);
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<DType> dtype = std::nullopt);

// A nested initializer list of numbers: tensor({{1.0, 2.0}, {3.0, 4.0}}).
class NestedValues {
 public:
  NestedValues(Scalar value) : leaf_(value) {}
  template <class N, std::enable_if_t<std::is_arithmetic_v<N>, int> = 0>
  NestedValues(N value) : leaf_(Scalar(value)) {}
  NestedValues(std::initializer_list<NestedValues> children) : children_(children), is_list_(true) {}

  bool is_list() const { return is_list_; }
  const Scalar& leaf() const { return leaf_; }
  const std::vector<NestedValues>& children() const { return children_; }

 private:
  Scalar leaf_;
  std::vector<NestedValues> children_;
  bool is_list_ = false;
};
// torch.tensor: dtype inferred like PyTorch (any float -> float32, else any
// int -> int64, else bool) unless given. Ragged lists are an error.
Tensor tensor(const NestedValues& values, std::optional<DType> dtype = std::nullopt);

// Copies `sizes` elements of `dtype` from a contiguous raw buffer.
Tensor from_buffer(const void* data, const Shape& sizes, DType dtype);
// Wraps a foreign buffer without copying; `owner` keeps it alive.
Tensor from_blob(std::shared_ptr<void> owner, void* data, const Shape& sizes, const Shape& strides,
                 DType dtype);
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes) {
  check(static_cast<std::int64_t>(values.size()) == numel_of(sizes), "from_vector: ", values.size(),
        " values do not fill shape ", str(sizes));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<unsigned char> bytes(values.begin(), values.end());
    return from_buffer(bytes.data(), sizes, DType::Bool);
  } else {
    return from_buffer(values.data(), sizes, dtype_of<T>());
  }
}
// An int64 tensor of an IntList's values (indices, sizes).
inline Tensor from_vector(const IntList& values, const Shape& sizes) {
  check(static_cast<std::int64_t>(values.size()) == numel_of(sizes), "from_vector: ", values.size(),
        " values do not fill shape ", str(sizes));
  return from_buffer(values.data(), sizes, DType::Int64);
}

// ------------------------------------------------------------------ random ---

// A seeded generator; the same seed gives the same values on every machine
// (mt19937_64 and our own transforms, not std:: distributions).
class Generator {
 public:
  explicit Generator(std::uint64_t seed) : engine_(seed) {}
  double uniform();  // [0, 1) with 53 random bits
  double normal();   // Box-Muller
 private:
  std::mt19937_64 engine_;
};

Tensor rand(const Shape& sizes, Generator& generator, DType dtype = DType::Float32);   // U[0,1)
Tensor randn(const Shape& sizes, Generator& generator, DType dtype = DType::Float32);  // N(0,1)
Tensor bernoulli(const Shape& sizes, double p, Generator& generator, DType dtype = DType::Float32);
Tensor bernoulli(const Tensor& probabilities, Generator& generator);  // same shape and dtype

// ------------------------------------------------------------- promotion ---

// torch.promote_types over every pair; raises where torch does (the wide
// unsigned types with a signed or complex type).
DType promote_types(DType a, DType b);

// One operand of an op, for torch.result_type's three tiers: tensors with
// dim > 0, 0-dim tensors, and wrapped Python numbers (Scalars).
using Operand = std::variant<Tensor, Scalar>;
DType result_type(const std::vector<Operand>& operands);
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);
DType result_type(const Operand& a, const Operand& b);

// ------------------------------------------------------------- comparison ---

// torch.allclose: |a - b| <= atol + rtol * |b| elementwise, with broadcasting.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
// torch.equal: same sizes and same values (compared after promotion).
bool equal(const Tensor& a, const Tensor& b);

// --------------------------------------------------------- rounding noise ---

// Monte Carlo arithmetic for the check rule's sensitivity runs (refgrad/check/rule.py): while a
// RoundingNoiseScope is active on this thread, every primitive that rounds (elementwise arithmetic,
// reductions, matrix products, convolutions) multiplies each real number of its floating or complex result
// by 1 + u eps, u uniform on [-1, 1] drawn from the scope's stream, the primitive's call count within the
// scope and the number's index: the same calls give the same draws at any eps. A computation of the same
// formula that rounds in a dtype of unit roundoff eps lands about that far from the exact one, even where
// the exact arithmetic cancels to zero (1 - mean(1) = 0 exactly; rounded, it is about eps). Primitives that
// only move values (views, copies, indexing, cat) add none. Outside a scope the primitives are unchanged.
// `absolute`, where not 0, adds v absolute to each number too (v uniform on [-1, 1], drawn apart from u):
// rounding near 0, where a dtype's numbers are its smallest subnormal apart and the relative error is
// unbounded (float16's are 2^-24 apart: absolute 2^-25).
class RoundingNoiseScope {
 public:
  RoundingNoiseScope(std::uint64_t stream, double eps, double absolute = 0.0);
  ~RoundingNoiseScope();
  RoundingNoiseScope(const RoundingNoiseScope&) = delete;
  RoundingNoiseScope& operator=(const RoundingNoiseScope&) = delete;

 private:
  std::uint64_t stream_;
  double eps_;
  double absolute_;
  std::uint64_t calls_ = 0;
  RoundingNoiseScope* previous_;
  friend Tensor with_rounding_noise(Tensor result);
};
// `result` (a tensor the calling primitive has just made, not a view of its inputs) with the active
// scope's noise, in place; unchanged outside a scope and for dtypes that are not floating or complex.
Tensor with_rounding_noise(Tensor result);
// The unit roundoff of a floating or complex dtype: the largest relative error of rounding a real number into
// it (float16 2^-11, bfloat16 2^-8, float32 2^-24, float64 2^-53; a complex dtype's parts'), and its smallest
// subnormal, the spacing of its numbers near 0 (float16 2^-24, bfloat16 2^-133, float32 2^-149, float64
// 2^-1074). 0 for other dtypes.
double unit_roundoff(DType dtype);
double smallest_subnormal(DType dtype);
// splitmix64's output function: a well-mixed 64-bit value of any 64-bit input, the same on every machine.
std::uint64_t splitmix64(std::uint64_t x);
// The index-th number of a random stream, uniform on [-1, 1) with 53 random bits: splitmix64 of stream + index.
// The perturbations of the check rule's sensitivity runs (values moved, results rounded) draw from it.
double uniform_minus_one_to_one(std::uint64_t stream, std::uint64_t index);

}  // namespace refgrad
