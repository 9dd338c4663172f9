// Tensor, Storage, Scalar, creation, random, promotion and casts.
#include "refgrad/tensor.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <ostream>
#include <system_error>

#include <unistd.h>

#include "kernel.hpp"

namespace refgrad {

// ---------------------------------------------------------------- dtypes ---

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::ComplexHalf: return "complex32";
    case DType::ComplexFloat: return "complex64";
    case DType::ComplexDouble: return "complex128";
  }
  return "unknown";
}

std::string short_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "b8";
    case DType::UInt8: return "u8";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::UInt16: return "u16";
    case DType::UInt32: return "u32";
    case DType::UInt64: return "u64";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
    case DType::ComplexHalf: return "c32";
    case DType::ComplexFloat: return "c64";
    case DType::ComplexDouble: return "c128";
  }
  return "?";
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::UInt32:
    case DType::Float32:
    case DType::ComplexHalf: return 4;
    case DType::Int64:
    case DType::UInt64:
    case DType::Float64:
    case DType::ComplexFloat: return 8;
    case DType::ComplexDouble: return 16;
  }
  return 0;
}

bool is_floating_point(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32 || dtype == DType::Float64;
}

bool is_complex(DType dtype) {
  return dtype == DType::ComplexHalf || dtype == DType::ComplexFloat || dtype == DType::ComplexDouble;
}

bool is_unsigned(DType dtype) {
  return dtype == DType::UInt8 || dtype == DType::UInt16 || dtype == DType::UInt32 || dtype == DType::UInt64;
}

bool is_integral(DType dtype, bool include_bool) {
  if (dtype == DType::Bool) return include_bool;
  return !is_floating_point(dtype) && !is_complex(dtype);
}

DType opmath_dtype(DType dtype) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return DType::Float32;
  if (dtype == DType::ComplexHalf) return DType::ComplexFloat;
  if (is_integral(dtype, false)) return DType::Int64;
  return dtype;
}

DType to_complex_type(DType dtype) {
  switch (dtype) {
    case DType::Float16: return DType::ComplexHalf;
    case DType::BFloat16:
    case DType::Float32: return DType::ComplexFloat;
    case DType::Float64: return DType::ComplexDouble;
    default: break;
  }
  check(is_complex(dtype), "to_complex_type: ", dtype_name(dtype), " has no complex counterpart");
  return dtype;
}

DType to_real_value_type(DType dtype) {
  switch (dtype) {
    case DType::ComplexHalf: return DType::Float16;
    case DType::ComplexFloat: return DType::Float32;
    case DType::ComplexDouble: return DType::Float64;
    default: return dtype;
  }
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float to_float(Half value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const std::uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)  // inf, NaN
                                              : sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

Half to_half(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<std::uint16_t>(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520 rounds to inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal (or zero); count units of 2^-24, ties to even
    const float units = std::nearbyint(std::fabs(value) * 0x1p24f);
    return {static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units))};
  }
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const std::uint32_t mantissa = magnitude & 0x7fffffu;
  std::uint32_t bits = (exponent << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;  // the 13 bits dropped
  if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) ++bits;  // a carry moves into the exponent
  return {static_cast<std::uint16_t>(sign | bits)};
}

// bfloat16 is the top half of a float.
float to_float(BFloat16 value) {
  const std::uint32_t bits = static_cast<std::uint32_t>(value.bits) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

BFloat16 to_bfloat16(float value) {
  if (std::isnan(value)) return {0x7fc0};
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const std::uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return {static_cast<std::uint16_t>((x + rounding_bias) >> 16)};
}

DType default_dtype() { return DType::Float32; }

std::string device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

// ----------------------------------------------------------------- shapes ---

std::string str(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::ostream& operator<<(std::ostream& out, ShapeText text) { return out << str(text.shape); }

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) {
    if (s == 0) return 0;  // ATen's numel is 0 then, however large the other sizes are
  }
  for (std::int64_t s : shape) {
    check(!__builtin_mul_overflow(n, s, &n), "shape ", shape_text(shape), " has more elements than int64 can count");
  }
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    // Only the outermost dim's size never enters a stride.
    if (i > 0) {
      check(!__builtin_mul_overflow(stride, std::max<std::int64_t>(sizes[i], 1), &stride), "shape ",
            shape_text(sizes), " is too large: its strides overflow int64");
    }
  }
  return strides;
}

std::int64_t multiply_or_fail(std::int64_t a, std::int64_t b, const char* op) {
  std::int64_t product = 0;
  check(!__builtin_mul_overflow(a, b, &product), op, ": ", a, " * ", b, " overflows int64");
  return product;
}

std::int64_t add_or_fail(std::int64_t a, std::int64_t b, const char* op) {
  std::int64_t sum = 0;
  check(!__builtin_add_overflow(a, b, &sum), op, ": ", a, " + ", b, " overflows int64");
  return sum;
}

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  // A 0-d tensor accepts dims -1 and 0, as in ATen.
  const std::int64_t range = std::max<std::int64_t>(ndim, 1);
  check(dim >= -range && dim < range, op, ": dimension out of range (expected to be in range of [", -range,
        ", ", range - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + range : dim;
}

// ----------------------------------------------------------- memory limit ---

namespace {

// A number from a cgroup file ("max" and unreadable files give nullopt).
std::optional<std::size_t> read_limit_file(const char* path) {
  std::FILE* file = std::fopen(path, "r");
  if (!file) return std::nullopt;
  char text[64] = {};
  const std::size_t length = std::fread(text, 1, sizeof text - 1, file);
  std::fclose(file);
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text, text + length, value);
  if (error != std::errc() || end == text) return std::nullopt;
  return value;
}

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  std::size_t bytes = pages > 0 && page_size > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size)
                                                 : std::numeric_limits<std::size_t>::max();
  // A container may have less than the machine: cgroup v2, then v1.
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (const std::optional<std::size_t> limit = read_limit_file(path)) bytes = std::min(bytes, *limit);
  }
  return bytes;
}

thread_local std::optional<std::size_t> scoped_memory_limit;

}  // namespace

std::size_t default_memory_limit() {
  static const std::size_t bytes = physical_memory();
  return bytes;
}

std::size_t memory_limit() { return scoped_memory_limit.value_or(default_memory_limit()); }

MemoryLimitScope::MemoryLimitScope(std::size_t bytes) : previous_(memory_limit()) { scoped_memory_limit = bytes; }
MemoryLimitScope::~MemoryLimitScope() { scoped_memory_limit = previous_; }

namespace {

// "80000000000 bytes (74.5 GiB)"
std::string byte_count_text(std::size_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double scaled = static_cast<double>(bytes);
  int unit = -1;
  while (scaled >= 1024 && unit < 5) {
    scaled /= 1024;
    ++unit;
  }
  if (unit < 0) return concat(bytes, " bytes");
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", scaled);
  return concat(bytes, " bytes (", text, " ", units[unit], ")");
}

}  // namespace

void check_fits_memory_limit(const Shape& sizes, DType dtype) {
  const auto numel = static_cast<std::size_t>(numel_of(sizes));
  const std::size_t limit = memory_limit();
  std::size_t bytes = 0;
  const bool overflows = __builtin_mul_overflow(numel, element_size(dtype), &bytes);
  // (the message is built only when it is needed: this runs for every tensor made)
  if (overflows || bytes > limit)
    fail(concat("a ", dtype_name(dtype), " tensor of shape ", shape_text(sizes), " would need ",
                overflows ? std::string("more than 2^64 bytes") : byte_count_text(bytes),
                ", more than the memory limit of ", byte_count_text(limit)));
}

// ----------------------------------------------------------------- Scalar ---

DType Scalar::natural_dtype() const {
  switch (kind_) {
    case Kind::Bool: return DType::Bool;
    case Kind::Int: return DType::Int64;
    case Kind::Float: return DType::Float64;
    case Kind::Complex: return DType::ComplexDouble;
  }
  return DType::Float64;
}

namespace {

// A double as Python's repr writes it: the shortest digits that round-trip,
// "nan", "inf". A float's repr always has a '.' or an exponent ("2.0"); the
// parts of a complex number's repr do not ("(2+3j)").
std::string python_float_text(double value, bool mark_as_float) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  const char* end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  std::string text(static_cast<const char*>(buffer), end);
  if (mark_as_float && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace

std::string Scalar::repr() const {
  switch (kind_) {
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float_text(real_, true);
    case Kind::Complex: {  // Python writes 0.4j alone when the real part is +0, else (1-0.5j)
      std::string imag = python_float_text(imag_, false);  // "-0.5", "2", "nan" (never "-nan")
      if (imag[0] != '-') imag = "+" + imag;
      if (real_ == 0.0 && !std::signbit(real_)) return imag.substr(imag[0] == '+' ? 1 : 0) + "j";
      return "(" + python_float_text(real_, false) + imag + "j)";
    }
  }
  return "?";
}

// ---------------------------------------------------------------- Storage ---

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  check(device == Device::CPU, "Storage: the ", device_name(device), " backend is not supported yet");
  // Uninitialized on purpose: every creation function writes all bytes anyway.
  if (nbytes <= kInlineBytes) {
    data_ = inline_bytes_;
  } else {
    owner_ = allocate_cpu_buffer(nbytes);
    data_ = owner_.get();
  }
}

Storage::Storage(std::shared_ptr<void> owner, void* data, std::size_t nbytes, Device device)
    : owner_(std::move(owner)), data_(data), nbytes_(nbytes), device_(device) {}

// ----------------------------------------------------------------- Tensor ---

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, std::int64_t storage_offset,
               DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset),
      dtype_(dtype) {
  check(storage_ != nullptr, "Tensor: storage is null");
  check(sizes_.size() == strides_.size(), "Tensor: sizes ", shape_text(sizes_), " and strides ", shape_text(strides_),
        " differ in length");
  for (std::int64_t s : sizes_) check(s >= 0, "Tensor: negative size in ", shape_text(sizes_));
  for (std::int64_t s : strides_) check(s >= 0, "Tensor: negative stride in ", shape_text(strides_));
  check(storage_offset_ >= 0, "Tensor: negative storage offset ", storage_offset_);
  // Views count too: a huge expanded view costs nothing to make, but every op that reads it loops over it.
  check_fits_memory_limit(sizes_, dtype_);
  if (numel() > 0) {
    std::size_t last = 0, bytes = 0;
    const bool overflows = __builtin_add_overflow(static_cast<std::size_t>(storage_offset_),
                                                  kernel::span_of(sizes_, strides_), &last) ||
                           __builtin_mul_overflow(last, element_size(dtype_), &bytes);
    check(!overflows && bytes <= storage_->nbytes(), "Tensor: view with sizes ", shape_text(sizes_), ", strides ",
          shape_text(strides_), " and offset ", storage_offset_, " needs ",
          overflows ? std::string("more than 2^64") : std::to_string(bytes), " bytes but the storage has ",
          storage_->nbytes());
  }
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::CPU; }

std::int64_t Tensor::size(std::int64_t d) const {
  check(dim() > 0, "size: dimension specified as ", d, " but tensor has no dimensions");
  return sizes_[wrap_dim(d, dim(), "size")];
}

std::int64_t Tensor::stride(std::int64_t d) const {
  check(dim() > 0, "stride: dimension specified as ", d, " but tensor has no dimensions");
  return strides_[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  // An empty tensor is contiguous whatever its strides; for the others the product below stays under
  // numel, which fits int64.
  if (numel() == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;  // any stride is fine for a size-1 dim
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

bool Tensor::is_same(const Tensor& other) const {
  return storage_ == other.storage_ && sizes_ == other.sizes_ && strides_ == other.strides_ &&
         storage_offset_ == other.storage_offset_ && dtype_ == other.dtype_;
}

void* Tensor::raw_data() const {
  check(defined(), "raw_data: tensor is undefined");
  return static_cast<std::byte*>(storage_->data()) + storage_offset_ * element_size(dtype_);
}

void Tensor::fail_data_ptr_dtype(DType asked) const {
  fail("data_ptr: tensor has dtype " + dtype_name(dtype_) + ", asked for " + dtype_name(asked));
}

using kernel::convert;

template <class T>
T Tensor::item() const {
  check(defined(), "item: tensor is undefined");
  check(numel() == 1, "item: a Tensor with ", numel(), " elements cannot be converted to Scalar");
  return kernel::dispatch_storage(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return convert<T>(*static_cast<const S*>(raw_data()));
  });
}

template <class T>
T Tensor::at(const Shape& index) const {
  check(defined(), "at: tensor is undefined");
  check(static_cast<std::int64_t>(index.size()) == dim(), "at: index ", shape_text(index), " for a tensor of shape ",
        shape_text(sizes_));
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < index.size(); ++d) {
    std::int64_t i = index[d];
    check(i >= -sizes_[d] && i < sizes_[d], "at: index ", i, " is out of bounds for dimension ", d,
          " with size ", sizes_[d]);
    if (i < 0) i += sizes_[d];
    offset += i * strides_[d];
  }
  return kernel::dispatch_storage(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return convert<T>(static_cast<const S*>(raw_data())[offset]);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check(defined(), "to_vector: tensor is undefined");
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(numel()));
  kernel::dispatch_storage(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* base = static_cast<const S*>(raw_data());
    kernel::for_each_offset(sizes_, strides_, [&](std::int64_t offset) { out.push_back(convert<T>(base[offset])); });
  });
  return out;
}

#define REFGRAD_INSTANTIATE_ACCESSORS(T)                 \
  template T Tensor::item<T>() const;                    \
  template T Tensor::at<T>(const Shape& index) const;    \
  template std::vector<T> Tensor::to_vector<T>() const;
REFGRAD_INSTANTIATE_ACCESSORS(bool)
REFGRAD_INSTANTIATE_ACCESSORS(std::int64_t)
REFGRAD_INSTANTIATE_ACCESSORS(float)
REFGRAD_INSTANTIATE_ACCESSORS(double)
REFGRAD_INSTANTIATE_ACCESSORS(std::uint64_t)
REFGRAD_INSTANTIATE_ACCESSORS(std::complex<float>)
REFGRAD_INSTANTIATE_ACCESSORS(std::complex<double>)
#undef REFGRAD_INSTANTIATE_ACCESSORS

Tensor Tensor::to(DType dtype) const {
  check(defined(), "to: tensor is undefined");
  return dtype == dtype_ ? *this : kernel::contiguous_as(*this, dtype);
}

Tensor Tensor::contiguous() const { return kernel::contiguous_as(*this, dtype_); }

Tensor Tensor::clone() const {
  check(defined(), "clone: tensor is undefined");
  Tensor out = empty(sizes_, dtype_);
  kernel::dispatch_storage(dtype_, [&](auto tag) {
    using S = typename decltype(tag)::type;
    auto same = [](S x) { return x; };
    kernel::elementwise_loop<S, S>(out, {*this}, same, std::index_sequence_for<S>{});
  });
  return out;
}

namespace kernel {

void fail_not_computed(DType dtype, const char* op) {
  if (is_complex(dtype) && dtype == opmath_dtype(dtype))
    fail(concat(op, ": ", dtype_name(dtype), " is not supported: refgrad has no complex kernel for this op (it has "
                "them for arithmetic, the analytic functions, sums, products of matrices, indexing and views)"));
  fail(concat(op, ": internal error: a ", dtype_name(dtype), " tensor reached a kernel that computes in ",
              dtype_name(opmath_dtype(dtype)), "; the op should have converted it first (kernel::to_opmath)"));
}

std::size_t span_of(const Shape& sizes, const Shape& strides) {
  check(sizes.size() == strides.size(), "span_of: sizes ", shape_text(sizes), " and strides ", shape_text(strides),
        " differ in length");
  for (std::int64_t size : sizes) {
    if (size == 0) return 0;
  }
  std::size_t span = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    check(sizes[i] > 0 && strides[i] >= 0, "span_of: negative size or stride in sizes ", shape_text(sizes),
          ", strides ", shape_text(strides));
    std::size_t extent = 0;
    const bool overflows =
        __builtin_mul_overflow(static_cast<std::size_t>(sizes[i] - 1), static_cast<std::size_t>(strides[i]), &extent) ||
        __builtin_add_overflow(span, extent, &span);
    check(!overflows, "span_of: a view with sizes ", shape_text(sizes), " and strides ", shape_text(strides),
          " spans more than 2^64 elements");
  }
  return span;
}

Tensor contiguous_as(const Tensor& t, DType dtype) {
  check(t.defined(), "contiguous: tensor is undefined");
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  Tensor out = empty(t.sizes(), dtype);
  dispatch_storage(t.dtype(), [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_storage(dtype, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      auto converted = [](From x) { return convert<To>(x); };
      elementwise_loop<To, From>(out, {t}, converted, std::index_sequence_for<From>{});
    });
  });
  return out;
}

Tensor dense(const Tensor& t) { return is_dense(t) ? t : t.contiguous(); }

std::vector<bool> reduction_mask(const IntList& dim, std::int64_t ndim, const char* op) {
  std::vector<bool> mask(static_cast<std::size_t>(ndim), dim.empty());
  for (std::int64_t d : dim) {
    const std::int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) {  // dims 0 and -1 both name a 0-d tensor's one "dim"
      check(dim.size() <= 1, op, ": dim 0 appears multiple times in the list of dims");
      continue;
    }
    check(!mask[w], op, ": dim ", w, " appears multiple times in the list of dims");
    mask[w] = true;
  }
  return mask;
}

}  // namespace kernel

// -------------------------------------------------------------- creation ---

Tensor empty(const Shape& sizes, DType dtype) {
  for (std::int64_t s : sizes) check(s >= 0, "empty: negative dimension in shape ", shape_text(sizes));
  check_fits_memory_limit(sizes, dtype);
  const std::size_t nbytes = static_cast<std::size_t>(numel_of(sizes)) * element_size(dtype);
  return Tensor(std::make_shared<Storage>(nbytes, Device::CPU), sizes, contiguous_strides(sizes), 0, dtype);
}

namespace {

void fill(const Tensor& t, Scalar value) {
  kernel::dispatch_storage(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = t.data_ptr<T>();
    std::fill(data, data + t.numel(), kernel::scalar_to<T>(value, "full", "value"));
  });
}

DType dtype_of_fill_value(const Scalar& value) {
  if (value.is_complex()) return to_complex_type(default_dtype());
  return value.is_floating_point() ? default_dtype() : value.natural_dtype();
}

}  // namespace

Tensor full(const Shape& sizes, Scalar value, std::optional<DType> dtype) {
  Tensor out = empty(sizes, dtype.value_or(dtype_of_fill_value(value)));
  fill(out, value);
  return out;
}

Tensor zeros(const Shape& sizes, DType dtype) { return full(sizes, 0, dtype); }
Tensor ones(const Shape& sizes, DType dtype) { return full(sizes, 1, dtype); }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.dtype()); }
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) { return zeros(t.sizes(), dtype.value_or(t.dtype())); }
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) { return ones(t.sizes(), dtype.value_or(t.dtype())); }
Tensor full_like(const Tensor& t, Scalar value, std::optional<DType> dtype) {
  return full(t.sizes(), value, dtype.value_or(t.dtype()));
}
Tensor scalar_tensor(Scalar value, std::optional<DType> dtype) {
  return full({}, value, dtype.value_or(dtype_of_fill_value(value)));
}

Tensor arange(Scalar end, std::optional<DType> dtype) { return arange(0, end, 1, dtype); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype) {
  const bool all_integral = !start.is_floating_point() && !end.is_floating_point() && !step.is_floating_point();
  const DType out_dtype = dtype.value_or(all_integral ? DType::Int64 : default_dtype());
  const double begin = start.to_double(), stop = end.to_double(), increment = step.to_double();
  check(increment != 0, "arange: step must be nonzero");
  check(std::isfinite(begin) && std::isfinite(stop), "arange: unsupported range: ", start.repr(), " -> ",
        end.repr());
  check((increment > 0 && stop >= begin) || (increment < 0 && stop <= begin),
        "arange: upper bound and larger bound inconsistent with step sign");
  const double count = std::ceil((stop - begin) / increment);
  check(count < 9223372036854775808.0, "arange: ", start.repr(), " to ", end.repr(), " in steps of ", step.repr(),
        " has more elements than int64 can count");
  const auto n = static_cast<std::int64_t>(count);
  Tensor out = empty({n}, opmath_dtype(out_dtype));
  kernel::dispatch(out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = out.data_ptr<T>();
    if constexpr (std::is_same_v<T, std::int64_t>) {
      if (all_integral) {  // exact integer arithmetic, no rounding through double
        for (std::int64_t i = 0; i < n; ++i)
          data[i] = kernel::wrapping_add(start.to_int64(), kernel::wrapping_mul(i, step.to_int64()));
        return;
      }
    }
    for (std::int64_t i = 0; i < n; ++i) data[i] = convert<T>(begin + static_cast<double>(i) * increment);
  });
  return kernel::rounded_to(out, out_dtype);
}

namespace {

void collect_nested(const NestedValues& values, std::size_t depth, Shape& shape, std::vector<Scalar>& leaves) {
  if (!values.is_list()) {
    check(depth == shape.size(), "tensor: ragged nested list (a number at depth ", depth, ", expected depth ",
          shape.size(), ")");
    leaves.push_back(values.leaf());
    return;
  }
  const auto n = static_cast<std::int64_t>(values.children().size());
  check(depth < shape.size(), "tensor: ragged nested list (a list at depth ", depth, " where numbers were)");
  check(shape[depth] == n, "tensor: ragged nested list: expected sequence of length ", shape[depth],
        " at dim ", depth, " (got ", n, ")");
  for (const NestedValues& child : values.children()) collect_nested(child, depth + 1, shape, leaves);
}

Shape nested_shape(const NestedValues& values) {
  // The shape follows the first element at each depth; collect_nested checks the rest.
  Shape shape;
  const NestedValues* node = &values;
  while (node->is_list()) {
    shape.push_back(static_cast<std::int64_t>(node->children().size()));
    if (node->children().empty()) break;
    node = &node->children().front();
  }
  return shape;
}

}  // namespace

Tensor tensor(const NestedValues& values, std::optional<DType> dtype) {
  Shape shape = nested_shape(values);
  std::vector<Scalar> leaves;
  collect_nested(values, 0, shape, leaves);
  DType inferred = leaves.empty() ? default_dtype() : DType::Bool;
  for (const Scalar& leaf : leaves) {
    if (leaf.is_floating_point()) inferred = default_dtype();
    else if (leaf.is_integral() && inferred == DType::Bool) inferred = DType::Int64;
  }
  const DType out_dtype = dtype.value_or(inferred);
  Tensor out = empty(shape, opmath_dtype(out_dtype));
  kernel::dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = out.data_ptr<T>();
    for (const Scalar& leaf : leaves) *data++ = leaf.to<T>();
  });
  return kernel::rounded_to(out, out_dtype);
}

Tensor from_buffer(const void* data, const Shape& sizes, DType dtype) {
  Tensor out = empty(sizes, dtype);
  const std::size_t nbytes = static_cast<std::size_t>(out.numel()) * element_size(dtype);
  if (nbytes) {
    check(data != nullptr, "from_buffer: null data pointer for shape ", shape_text(sizes));
    std::memcpy(out.raw_data(), data, nbytes);
  }
  return out;
}

Tensor from_blob(std::shared_ptr<void> owner, void* data, const Shape& sizes, const Shape& strides, DType dtype) {
  check(sizes.size() == strides.size(), "from_blob: sizes ", shape_text(sizes), " and strides ", shape_text(strides),
        " differ in length");
  const std::size_t nbytes = kernel::span_of(sizes, strides) * element_size(dtype);
  auto storage = std::make_shared<Storage>(std::move(owner), data, nbytes, Device::CPU);
  return Tensor(storage, sizes, strides, 0, dtype);
}

// ------------------------------------------------------------------ random ---

double Generator::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  // Box-Muller; 1 - u keeps log's argument in (0, 1].
  const double u1 = 1.0 - uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {

template <class Draw>
Tensor random_tensor(const Shape& sizes, DType dtype, const char* op, Draw draw) {
  check(is_floating_point(dtype), op, ": expected a floating point dtype, got ", dtype_name(dtype));
  Tensor out = empty(sizes, opmath_dtype(dtype));
  kernel::dispatch_floating(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = out.data_ptr<T>();
    for (std::int64_t i = 0; i < out.numel(); ++i) data[i] = static_cast<T>(draw());
  });
  return kernel::rounded_to(out, dtype);
}

}  // namespace

Tensor rand(const Shape& sizes, Generator& generator, DType dtype) {
  return random_tensor(sizes, dtype, "rand", [&] { return generator.uniform(); });
}

Tensor randn(const Shape& sizes, Generator& generator, DType dtype) {
  return random_tensor(sizes, dtype, "randn", [&] { return generator.normal(); });
}

Tensor bernoulli(const Shape& sizes, double p, Generator& generator, DType dtype) {
  check(p >= 0 && p <= 1, "bernoulli: expected 0 <= p <= 1, but got p=", p);
  return random_tensor(sizes, dtype, "bernoulli", [&] { return generator.uniform() < p ? 1.0 : 0.0; });
}

Tensor bernoulli(const Tensor& probabilities, Generator& generator) {
  const std::vector<double> p = probabilities.to_vector<double>();
  std::size_t i = 0;
  for (double pi : p) check(pi >= 0 && pi <= 1, "bernoulli: expected all probabilities in [0, 1], got ", pi);
  return random_tensor(probabilities.sizes(), probabilities.dtype(), "bernoulli",
                       [&] { return generator.uniform() < p[i++] ? 1.0 : 0.0; });
}

// ------------------------------------------------------------- promotion ---

namespace {

// Bits of a floating dtype, for promotion.
int real_width(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::BFloat16: return 16;
    case DType::Float32: return 32;
    default: return 64;  // float64
  }
}

// Signed integers in order of width; uint8 fits in int16.
int integer_width(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
    case DType::Int8: return 8;
    case DType::Int16: return 16;
    case DType::Int32: return 32;
    default: return 64;
  }
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool a_wide_unsigned = is_unsigned(a) && a != DType::UInt8, b_wide_unsigned = is_unsigned(b) && b != DType::UInt8;
  // torch promotes uint16/32/64 only with themselves and the floating types.
  if ((a_wide_unsigned || b_wide_unsigned) && !is_floating_point(a) && !is_floating_point(b))
    fail(concat("Promotion for uint16, uint32, uint64 types is not supported, attempted to promote ", dtype_name(a),
                " and ", dtype_name(b)));
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (is_complex(a) || is_complex(b)) {
    // The real parts promote (an integer never widens them), then become complex again:
    // complex32 with bfloat16 gives complex64, as float16 with bfloat16 gives float32.
    const DType real_a = to_real_value_type(a), real_b = to_real_value_type(b);
    if (is_integral(real_a, true)) return b;
    if (is_integral(real_b, true)) return a;
    return to_complex_type(promote_types(real_a, real_b));
  }
  if (is_floating_point(a) && is_floating_point(b)) {
    if (real_width(a) == real_width(b)) return DType::Float32;  // float16 with bfloat16
    return real_width(a) > real_width(b) ? a : b;
  }
  if (is_floating_point(a)) return a;
  if (is_floating_point(b)) return b;
  // Two different integer types.
  if ((a == DType::UInt8 && b == DType::Int8) || (a == DType::Int8 && b == DType::UInt8)) return DType::Int16;
  if (a == DType::UInt8) return b;
  if (b == DType::UInt8) return a;
  return integer_width(a) > integer_width(b) ? a : b;
}

namespace {

// c10's combine_categories: a lower tier only matters when it is of a higher
// category (bool < integral < floating < complex) than the tier above it.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_complex(*higher)) return higher;
  if (is_complex(*lower)) {  // a floating tier keeps its precision, made complex
    if (is_floating_point(*higher)) return to_complex_type(*higher);
    return lower;
  }
  if (is_floating_point(*higher)) return higher;
  if (*higher == DType::Bool || is_floating_point(*lower)) return promote_types(*higher, *lower);
  return higher;
}

std::optional<DType> promote_optional(std::optional<DType> a, DType b) {
  return a ? promote_types(*a, b) : b;
}

}  // namespace

namespace {

// torch.result_type, fed one operand at a time (no list of copies: every binary op asks).
class ResultType {
 public:
  void add(const Tensor& t) {
    check(t.defined(), "result_type: undefined tensor operand");
    if (t.dim() > 0) dim_result_ = promote_optional(dim_result_, t.dtype());
    else zero_dim_result_ = promote_optional(zero_dim_result_, t.dtype());
  }
  void add(const Scalar& s) {
    // A wrapped Python float takes the default dtype, not float64; a complex one the default's complex type.
    const DType dtype = s.is_floating_point() ? default_dtype()
                        : s.is_complex()      ? to_complex_type(default_dtype())
                                              : s.natural_dtype();
    wrapped_result_ = promote_optional(wrapped_result_, dtype);
  }
  void add(const Operand& operand) {
    std::visit([this](const auto& value) { add(value); }, operand);
  }
  DType result() const {
    const auto result = combine_categories(dim_result_, combine_categories(zero_dim_result_, wrapped_result_));
    check(result.has_value(), "result_type: no operands");
    return *result;
  }

 private:
  std::optional<DType> dim_result_, zero_dim_result_, wrapped_result_;
};

template <class... Operands>
DType result_type_of(const Operands&... operands) {
  ResultType result;
  (result.add(operands), ...);
  return result.result();
}

}  // namespace

DType result_type(const std::vector<Operand>& operands) {
  ResultType result;
  for (const Operand& operand : operands) result.add(operand);
  return result.result();
}

DType result_type(const Tensor& a, const Tensor& b) { return result_type_of(a, b); }
DType result_type(const Tensor& a, const Scalar& b) { return result_type_of(a, b); }
DType result_type(const Operand& a, const Operand& b) { return result_type_of(a, b); }

}  // namespace refgrad
