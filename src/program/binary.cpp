// The binary bytecode file: "RGBC", a version, length-prefixed little-endian
// sections, and a CRC-32 of everything before it. docs/program.md ("Binary
// bytecode") gives the layout byte by byte.
//
// Every multi-byte value is written and read one byte at a time, so the file
// is the same on a big-endian host. The reader trusts nothing: each length is
// checked against the bytes left before anything is allocated, each index
// against its pool, each enum against its values; errors say where:
//   "model.rgbc: offset 123: attribute block 4, field 'alpha': unknown value tag 17".
#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <variant>

#include <fmt/format.h>

#include "refgrad/bytecode.hpp"

namespace refgrad {

// ------------------------------------------------------------------ CRC-32 ---

namespace {

// The reflected CRC-32 of zlib and PNG (polynomial 0xEDB88320), one table
// lookup per byte.
constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t n = 0; n < 256; ++n) {
    std::uint32_t c = n;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kCrcTable = make_crc_table();

}  // namespace

std::uint32_t checksum_crc32(std::span<const std::byte> bytes) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const std::byte byte : bytes) crc = kCrcTable[(crc ^ std::to_integer<std::uint32_t>(byte)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

namespace {

// ------------------------------------------------------------------ layout ---

constexpr std::string_view kMagic = "RGBC";
constexpr std::size_t kHeaderBytes = 8;    // magic + version
constexpr std::size_t kChecksumBytes = 4;  // the CRC-32 at the end

// Sections, in the order they appear: each pool before what indexes it.
enum class Section : std::uint8_t {
  Program = 1,
  Strings,
  Nodes,
  Registers,
  NeedMasks,
  Metadata,
  AttributeBlocks,
  Declarations,
  Code,
};

std::string_view section_name(Section section) {
  switch (section) {
    case Section::Program: return "program";
    case Section::Strings: return "strings";
    case Section::Nodes: return "nodes";
    case Section::Registers: return "registers";
    case Section::NeedMasks: return "need masks";
    case Section::Metadata: return "metadata";
    case Section::AttributeBlocks: return "attribute blocks";
    case Section::Declarations: return "declarations";
    case Section::Code: return "code";
  }
  return "?";
}

// How many values each one-byte enum has (the reader rejects the rest).
constexpr unsigned kDTypes = 16;       // Bool, Int64, Float32, Float64, Float16 ... UInt64, ComplexHalf
constexpr unsigned kDevices = 2;       // CPU, CUDA
constexpr unsigned kLayouts = 8;       // Strided ... Jagged
constexpr unsigned kMemoryFormats = 4; // Contiguous ... ChannelsLast3d
constexpr unsigned kHookKinds = 4;     // TensorPre ... PostAccGrad
constexpr unsigned kOpcodes = 10;      // Call ... Output, Aten
constexpr unsigned kScalarKinds = 4;   // Bool, Int, Float, Complex
constexpr unsigned kValueTags = std::variant_size_v<AttrValue>;  // AttrValue's alternatives, in order

// The fewest bytes one entry of a list takes, so that a count can be checked
// against the bytes left before anything is allocated.
constexpr std::size_t kMinString = 4;                      // length
constexpr std::size_t kMinType = 1 + 4 + 1;                // dtype, sizes count, device
constexpr std::size_t kMinAttr = kMinString + 1;           // name, value tag
constexpr std::size_t kMinInstruction = 1 + 11 * 4;        // opcode, eleven u32 fields

void store_le(std::string& out, std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

std::uint64_t load_le(const std::byte* bytes, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= std::to_integer<std::uint64_t>(bytes[i]) << (8 * i);
  return value;
}

// Calls f with a value of the "lane" type an element of `dtype` is stored
// as: itself for bool, integers, float and double; the 16 bits of a float16
// or bfloat16; a complex number is two lanes of its real type (real, imag).
template <class F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Bool: return f(bool{});
    case DType::UInt8: return f(std::uint8_t{});
    case DType::Int8: return f(std::int8_t{});
    case DType::Int16: return f(std::int16_t{});
    case DType::Int32: return f(std::int32_t{});
    case DType::Int64: return f(std::int64_t{});
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
    case DType::ComplexHalf: return f(std::uint16_t{});
    case DType::UInt32: return f(std::uint32_t{});
    case DType::UInt64: return f(std::uint64_t{});
    case DType::Float32:
    case DType::ComplexFloat: return f(float{});
    case DType::Float64:
    case DType::ComplexDouble: return f(double{});
  }
}

// An element's bits as the file stores them: floats as IEEE-754 bits,
// integers in two's complement, bools as 0 or 1.
template <class T>
std::uint64_t element_bits(T value) {
  if constexpr (std::is_same_v<T, bool>) return value ? 1 : 0;
  else if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(value);
  else if constexpr (std::is_same_v<T, double>) return std::bit_cast<std::uint64_t>(value);
  else return static_cast<std::uint64_t>(value);
}

template <class T>
T element_from_bits(std::uint64_t bits) {
  if constexpr (std::is_same_v<T, bool>) return bits != 0;
  else if constexpr (std::is_same_v<T, float>) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  else if constexpr (std::is_same_v<T, double>) return std::bit_cast<double>(bits);
  else return static_cast<T>(bits);  // integers: the low bytes, two's complement
}

// ------------------------------------------------------------------ writer ---

class Writer {
 public:
  void u8(std::uint8_t value) { store_le(out_, value, 1); }
  void u32(std::uint32_t value) { store_le(out_, value, 4); }
  void u64(std::uint64_t value) { store_le(out_, value, 8); }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void f64(double value) { u64(std::bit_cast<std::uint64_t>(value)); }
  void flag(bool value) { u8(value ? 1 : 0); }
  template <class E>
  void enum_value(E value) {
    u8(static_cast<std::uint8_t>(value));
  }
  void count(std::size_t n) {
    check(n <= std::numeric_limits<std::uint32_t>::max(), "write_bytecode: a list of ", n,
          " entries does not fit a 32-bit count");
    u32(static_cast<std::uint32_t>(n));
  }
  void str(std::string_view text) {
    count(text.size());
    out_.append(text);
  }
  template <class Items, class Each>
  void list(const Items& items, Each each) {
    count(items.size());
    for (const auto& item : items) each(item);
  }
  template <class T, class Each>
  void optional(const std::optional<T>& value, Each each) {
    flag(value.has_value());
    if (value) each(*value);
  }
  // A section: its id, its payload's length, the payload that `body` writes.
  template <class Body>
  void section(Section id, Body body) {
    Writer payload;
    body(payload);
    enum_value(id);
    u64(payload.out_.size());
    out_ += payload.out_;
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

void write_shape(Writer& w, const Shape& shape) {
  w.list(shape, [&](std::int64_t n) { w.i64(n); });
}

void write_type(Writer& w, const TensorType& type) {
  w.enum_value(type.dtype);
  write_shape(w, type.sizes);
  w.enum_value(type.device);
}

// A tensor: its type, its byte count, its elements in row-major order.
void write_tensor(Writer& w, const Tensor& tensor) {
  check(tensor.defined(), "write_bytecode: an inline value is an undefined tensor");
  write_type(w, type_of(tensor));
  const Tensor data = tensor.contiguous();
  const auto count = static_cast<std::size_t>(data.numel());
  const std::size_t bytes = count * element_size(data.dtype());
  w.u64(bytes);
  with_element_type(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* lanes = static_cast<const T*>(data.raw_data());
    for (std::size_t i = 0; i < bytes / sizeof(T); ++i) store_le(w.bytes(), element_bits(lanes[i]), sizeof(T));
  });
}

void write_optional_tensor(Writer& w, const std::optional<Tensor>& tensor) {
  w.optional(tensor, [&](const Tensor& t) { write_tensor(w, t); });
}

void write_metadata(Writer& w, const std::optional<InputMetadata>& metadata) {
  w.optional(metadata, [&](const InputMetadata& m) {
    w.enum_value(m.dtype);
    write_shape(w, m.shape);
    w.enum_value(m.device);
    w.flag(m.is_tensor_subclass);
    w.optional(m.grad_dtype, [&](DType dtype) { w.enum_value(dtype); });
  });
}

void write_options(Writer& w, const TensorOptions& options) {
  w.optional(options.dtype, [&](DType dtype) { w.enum_value(dtype); });
  w.optional(options.device, [&](Device device) { w.enum_value(device); });
  w.optional(options.layout, [&](Layout layout) { w.enum_value(layout); });
  w.optional(options.requires_grad, [&](bool requires_grad) { w.flag(requires_grad); });
}

// A value: its tag (the AttrValue alternative's index), then its payload.
void write_value(Writer& w, const AttrValue& value) {
  w.u8(static_cast<std::uint8_t>(value.index()));
  std::visit(
      [&w](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, None>) {
        } else if constexpr (std::is_same_v<T, SavedRef>) {
          w.str(x.name);
        } else if constexpr (std::is_same_v<T, std::vector<SavedRef>>) {
          w.list(x, [&](const SavedRef& ref) { w.str(ref.name); });
        } else if constexpr (std::is_same_v<T, std::vector<std::optional<SavedRef>>>) {
          w.list(x, [&](const std::optional<SavedRef>& ref) {
            w.optional(ref, [&](const SavedRef& r) { w.str(r.name); });
          });
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          w.i64(x);
        } else if constexpr (std::is_same_v<T, IntList>) {
          write_shape(w, x);
        } else if constexpr (std::is_same_v<T, double>) {
          w.f64(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          w.flag(x);
        } else if constexpr (std::is_same_v<T, Scalar>) {
          w.enum_value(x.kind());
          if (x.is_boolean()) {
            w.flag(x.to_bool());
          } else if (x.is_integral()) {
            w.i64(x.to_int64());
          } else if (x.is_complex()) {
            w.f64(x.to_complex().real());
            w.f64(x.to_complex().imag());
          } else {
            w.f64(x.to_double());
          }
        } else if constexpr (std::is_same_v<T, std::string>) {
          w.str(x);
        } else if constexpr (std::is_same_v<T, DType> || std::is_same_v<T, Layout>) {
          w.enum_value(x);
        } else if constexpr (std::is_same_v<T, TensorOptions>) {
          write_options(w, x);
        } else if constexpr (std::is_same_v<T, TensorGeometry>) {
          write_shape(w, x.sizes);
          write_shape(w, x.strides);
          w.i64(x.storage_offset);
        } else if constexpr (std::is_same_v<T, TypeAndSize>) {
          write_shape(w, x.sizes);
          write_options(w, x.options);
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          w.list(x, [&](DType dtype) { w.enum_value(dtype); });
        } else if constexpr (std::is_same_v<T, std::vector<IntList>>) {
          w.list(x, [&](const IntList& list) { write_shape(w, list); });
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          w.list(x, [&](bool bit) { w.flag(bit); });
        } else {
          static_assert(std::is_same_v<T, Device> || std::is_same_v<T, MemoryFormat>);
          w.enum_value(x);
        }
      },
      value);
}

// grad, saved and leaf declarations share one layout: name, type, optional
// tensor (the default value, the inline value, the initial .grad).
template <class Decl>
void write_typed_declarations(Writer& w, const std::vector<Decl>& decls, std::optional<Tensor> Decl::*tensor) {
  w.list(decls, [&](const Decl& d) {
    w.str(d.name);
    write_type(w, d.type);
    write_optional_tensor(w, d.*tensor);
  });
}

void write_declarations(Writer& w, const Bytecode& b) {
  write_typed_declarations(w, b.grads, &GradDecl::value);
  write_typed_declarations(w, b.saved, &SavedDecl::value);
  write_typed_declarations(w, b.leaves, &LeafDecl::grad);
  w.list(b.hooks, [&](const HookDecl& d) {
    w.str(d.name);
    w.enum_value(d.kind);
  });
  w.list(b.functions, [&](const FunctionDecl& d) { w.str(d.name); });
  w.list(b.outputs, [&](const OutputDecl& d) {
    w.str(d.name);
    write_type(w, d.type);
  });
}

void write_instruction(Writer& w, const BytecodeInstr& c) {
  w.enum_value(c.op);
  for (std::uint32_t field : {c.first_operand, c.operand_count, c.first_result, c.result_count, c.arg, c.leaf,
                              c.attrs, c.need, c.metadata, c.metadata_count, c.origin}) {
    w.u32(field);
  }
}

// ------------------------------------------------------------------ reader ---

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, std::string_view origin)
      : bytes_(bytes), origin_(origin), end_(bytes.size()) {}

  [[noreturn]] void fail_at(std::size_t offset, std::string_view message) const {
    if (context_.empty()) fail(fmt::format("{}: offset {}: {}", origin_, offset, message));
    fail(fmt::format("{}: offset {}: {}: {}", origin_, offset, context_, message));
  }

  // Names what is being read, for errors, until the returned guard goes.
  class Context {
   public:
    Context(Reader& reader, std::string label) : reader_(reader), saved_(std::move(reader.context_)) {
      reader_.context_ = std::move(label);
    }
    ~Context() { reader_.context_ = std::move(saved_); }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

   private:
    Reader& reader_;
    std::string saved_;
  };

  std::size_t offset() const { return pos_; }
  std::size_t left() const { return end_ - pos_; }
  void limit(std::size_t end) { end_ = end; }

  const std::byte* take(std::size_t n, std::string_view what) {
    if (n > left()) fail_at(pos_, fmt::format("truncated: {} needs {} bytes, {} left", what, n, left()));
    const std::byte* at = bytes_.data() + pos_;
    pos_ += n;
    return at;
  }
  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(load_le(take(1, what), 1)); }
  std::uint32_t u32(std::string_view what) { return static_cast<std::uint32_t>(load_le(take(4, what), 4)); }
  std::uint64_t u64(std::string_view what) { return load_le(take(8, what), 8); }
  std::int64_t i64(std::string_view what) { return static_cast<std::int64_t>(u64(what)); }
  double f64(std::string_view what) { return std::bit_cast<double>(u64(what)); }

  bool flag(std::string_view what) {
    const std::size_t at = pos_;
    const std::uint8_t value = u8(what);
    if (value > 1) fail_at(at, fmt::format("{} must be 0 or 1, found {}", what, value));
    return value == 1;
  }
  // A one-byte enum with `values` values.
  template <class E>
  E enum_value(unsigned values, std::string_view what) {
    const std::size_t at = pos_;
    const std::uint8_t value = u8(what);
    if (value >= values) fail_at(at, fmt::format("unknown {} {}", what, value));
    return static_cast<E>(value);
  }
  // A list's length, checked against the bytes left: each entry takes at least `min_bytes`.
  std::uint32_t count(std::size_t min_bytes, std::string_view what) {
    const std::size_t at = pos_;
    const std::uint32_t n = u32(what);
    if (std::uint64_t{n} * min_bytes > left()) {
      fail_at(at, fmt::format("{} {} would take at least {} bytes, {} left", n, what, std::uint64_t{n} * min_bytes,
                              left()));
    }
    return n;
  }
  std::string str(std::string_view what) {
    const std::size_t at = pos_;
    const std::uint32_t n = u32(what);
    if (n > left()) fail_at(at, fmt::format("{} of {} bytes exceeds the {} bytes left", what, n, left()));
    const std::byte* chars = take(n, what);
    return std::string(reinterpret_cast<const char*>(chars), n);
  }
  template <class Each>
  auto list(std::size_t min_bytes, std::string_view what, Each each) {
    const std::uint32_t n = count(min_bytes, what);
    std::vector<decltype(each(std::uint32_t{}))> items;
    items.reserve(n);  // bounded: n * min_bytes <= the bytes left
    for (std::uint32_t i = 0; i < n; ++i) items.push_back(each(i));
    return items;
  }
  template <class Each>
  auto optional(std::string_view what, Each each) -> std::optional<decltype(each())> {
    if (!flag(what)) return std::nullopt;
    return each();
  }
  // A section's id and length, then its payload, which `body` must read to the end.
  template <class Body>
  void section(Section id, Body body) {
    const Context context(*this, fmt::format("section '{}'", section_name(id)));
    const std::size_t at = pos_;
    const std::uint8_t found = u8("section id");
    if (found != static_cast<std::uint8_t>(id)) {
      fail_at(at, fmt::format("expected section id {}, found {}", static_cast<int>(id), found));
    }
    const std::uint64_t length = u64("section length");
    if (length > left()) fail_at(at + 1, fmt::format("section length {} exceeds the {} bytes left", length, left()));
    const std::size_t outer_end = end_;
    end_ = pos_ + static_cast<std::size_t>(length);
    body();
    if (pos_ != end_) fail_at(pos_, fmt::format("{} unread bytes at the end of the section", end_ - pos_));
    end_ = outer_end;
  }

 private:
  std::span<const std::byte> bytes_;
  std::string_view origin_;
  std::size_t pos_ = 0;
  std::size_t end_;
  std::string context_;
};

Shape read_shape(Reader& r, std::string_view what) {
  const std::vector<std::int64_t> values = r.list(8, what, [&](std::uint32_t) { return r.i64(what); });
  return Shape(values.begin(), values.end());
}

DType read_dtype(Reader& r) { return r.enum_value<DType>(kDTypes, "dtype"); }

TensorType read_type(Reader& r) {
  TensorType type;
  type.dtype = read_dtype(r);
  type.sizes = read_shape(r, "sizes");
  type.device = r.enum_value<Device>(kDevices, "device");
  return type;
}

// The bytes a tensor of `type` takes, or an error at `at` when its sizes are
// negative or so large that their product (sizes of 0 counted as 1, so that
// strides fit too) overflows int64.
std::uint64_t tensor_bytes(const Reader& r, std::size_t at, const TensorType& type) {
  std::int64_t extent = 1, numel = 1;
  for (const std::int64_t size : type.sizes) {
    if (size < 0) r.fail_at(at, fmt::format("tensor {} has a negative size", to_string(type)));
    const std::int64_t factor = std::max<std::int64_t>(size, 1);
    if (extent > std::numeric_limits<std::int64_t>::max() / factor) {
      r.fail_at(at, fmt::format("tensor {} has too many elements", to_string(type)));
    }
    extent *= factor;
    numel = size == 0 ? 0 : numel * size;
  }
  const std::uint64_t size = element_size(type.dtype);
  if (static_cast<std::uint64_t>(numel) > std::numeric_limits<std::uint64_t>::max() / size) {
    r.fail_at(at, fmt::format("tensor {} has too many bytes", to_string(type)));
  }
  return static_cast<std::uint64_t>(numel) * size;
}

// A tensor whose device is not the CPU keeps its device as a label over CPU
// memory (DESIGN.md: a device is metadata), so that the file reads back as written.
Tensor on_device(const Tensor& cpu, Device device) {
  if (device == Device::CPU) return cpu;
  const std::shared_ptr<Storage>& storage = cpu.storage();
  auto labelled = std::make_shared<Storage>(storage, storage->data(), storage->nbytes(), device);
  return Tensor(std::move(labelled), cpu.sizes(), cpu.strides(), cpu.storage_offset(), cpu.dtype());
}

Tensor read_tensor(Reader& r) {
  const std::size_t type_at = r.offset();
  const TensorType type = read_type(r);
  const std::uint64_t expected = tensor_bytes(r, type_at, type);
  const std::size_t count_at = r.offset();
  const std::uint64_t given = r.u64("tensor byte count");
  if (given != expected) {
    r.fail_at(count_at, fmt::format("tensor {} takes {} bytes, the file says {}", to_string(type), expected, given));
  }
  const std::size_t data_at = r.offset();
  const std::byte* data = r.take(static_cast<std::size_t>(given), "tensor data");
  Tensor tensor = empty(type.sizes, type.dtype);  // after take(): its bytes are in the file
  with_element_type(type.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* elements = static_cast<T*>(tensor.raw_data());
    for (std::size_t i = 0; i < given / sizeof(T); ++i) {
      const std::uint64_t bits = load_le(data + i * sizeof(T), sizeof(T));
      if (std::is_same_v<T, bool> && bits > 1) {
        r.fail_at(data_at + i, fmt::format("bool element {} is {}, not 0 or 1", i, bits));
      }
      elements[i] = element_from_bits<T>(bits);
    }
  });
  return on_device(tensor, type.device);
}

std::optional<Tensor> read_optional_tensor(Reader& r) {
  return r.optional("value flag", [&] { return read_tensor(r); });
}

std::optional<InputMetadata> read_metadata(Reader& r) {
  return r.optional("metadata flag", [&] {
    InputMetadata m;
    m.dtype = read_dtype(r);
    m.shape = read_shape(r, "shape");
    m.device = r.enum_value<Device>(kDevices, "device");
    m.is_tensor_subclass = r.flag("subclass flag");
    m.grad_dtype = r.optional("grad_dtype flag", [&] { return read_dtype(r); });
    return m;
  });
}

TensorOptions read_options(Reader& r) {
  TensorOptions options;
  options.dtype = r.optional("dtype flag", [&] { return read_dtype(r); });
  options.device = r.optional("device flag", [&] { return r.enum_value<Device>(kDevices, "device"); });
  options.layout = r.optional("layout flag", [&] { return r.enum_value<Layout>(kLayouts, "layout"); });
  options.requires_grad = r.optional("requires_grad flag", [&] { return r.flag("requires_grad"); });
  return options;
}

SavedRef read_ref(Reader& r) { return SavedRef{r.str("saved tensor name")}; }

Scalar read_scalar(Reader& r) {
  switch (r.enum_value<Scalar::Kind>(kScalarKinds, "Scalar kind")) {
    case Scalar::Kind::Bool: return Scalar(r.flag("bool Scalar"));
    case Scalar::Kind::Int: return Scalar(r.i64("int Scalar"));
    case Scalar::Kind::Float: return Scalar(r.f64("float Scalar"));
    case Scalar::Kind::Complex: {
      const double real = r.f64("complex Scalar's real part");
      return Scalar(std::complex<double>(real, r.f64("complex Scalar's imaginary part")));
    }
  }
  return Scalar();
}

// The value whose AttrValue alternative has index `tag`, read as write_value wrote it.
AttrValue read_payload(Reader& r, std::uint8_t tag) {
  switch (tag) {
    case 0: return None{};
    case 1: return read_ref(r);
    case 2: return r.list(kMinString, "saved tensors", [&](std::uint32_t) { return read_ref(r); });
    case 3:
      return r.list(1, "optional saved tensors",
                    [&](std::uint32_t) { return r.optional("saved tensor flag", [&] { return read_ref(r); }); });
    case 4: return r.i64("int");
    case 5: return read_shape(r, "ints");
    case 6: return r.f64("float");
    case 7: return r.flag("bool");
    case 8: return read_scalar(r);
    case 9: return r.str("string");
    case 10: return read_dtype(r);
    case 11: return r.enum_value<Layout>(kLayouts, "layout");
    case 12: return read_options(r);
    case 13: {
      TensorGeometry geometry;
      geometry.sizes = read_shape(r, "sizes");
      geometry.strides = read_shape(r, "strides");
      geometry.storage_offset = r.i64("storage offset");
      return geometry;
    }
    case 14: {
      TypeAndSize type;
      type.sizes = read_shape(r, "sizes");
      type.options = read_options(r);
      return type;
    }
    case 15: return r.list(1, "dtypes", [&](std::uint32_t) { return read_dtype(r); });
    case 16: return r.list(4, "int lists", [&](std::uint32_t) { return read_shape(r, "ints"); });
    case 17: {
      std::vector<bool> bits;
      for (bool bit : r.list(1, "bools", [&](std::uint32_t) { return r.flag("bool"); })) bits.push_back(bit);
      return bits;
    }
    case 18: return r.enum_value<Device>(kDevices, "device");
    default: return r.enum_value<MemoryFormat>(kMemoryFormats, "memory format");
  }
}

std::vector<Attr> read_attribute_block(Reader& r, std::uint32_t block) {
  return r.list(kMinAttr, "fields", [&](std::uint32_t field) {
    const Reader::Context context(r, fmt::format("attribute block {}, field {}", block, field));
    Attr attr;
    attr.name = r.str("field name");
    const Reader::Context named(r, fmt::format("attribute block {}, field '{}'", block, attr.name));
    const std::uint8_t tag = r.enum_value<std::uint8_t>(kValueTags, "value tag");
    attr.value = read_payload(r, tag);
    return attr;
  });
}

// One declaration list, each entry read under its own label ("saved declaration 2").
template <class Read>
auto read_declarations(Reader& r, std::size_t min_bytes, std::string_view kind, Read read) {
  return r.list(min_bytes, fmt::format("{} declarations", kind), [&](std::uint32_t i) {
    const Reader::Context context(r, fmt::format("{} declaration {}", kind, i));
    return read();
  });
}

void read_declarations(Reader& r, Bytecode& b) {
  // grad, saved and leaf declarations share one layout (write_typed_declarations).
  const auto typed = [&r]<class Decl>(std::string_view kind, std::optional<Tensor> Decl::*tensor) {
    return read_declarations(r, kMinString + kMinType + 1, kind, [&] {
      Decl d;
      d.name = r.str("name");
      d.type = read_type(r);
      d.*tensor = read_optional_tensor(r);
      return d;
    });
  };
  b.grads = typed("grad", &GradDecl::value);
  b.saved = typed("saved", &SavedDecl::value);
  b.leaves = typed("leaf", &LeafDecl::grad);
  b.hooks = read_declarations(r, kMinString + 1, "hook", [&] {
    HookDecl d;
    d.name = r.str("name");
    d.kind = r.enum_value<HookKind>(kHookKinds, "hook kind");
    return d;
  });
  b.functions = read_declarations(r, kMinString, "function", [&] { return FunctionDecl{r.str("name"), {}}; });
  b.outputs = read_declarations(r, kMinString + kMinType, "output", [&] {
    OutputDecl d;
    d.name = r.str("name");
    d.type = read_type(r);
    return d;
  });
}

// ------------------------------------------------------- instruction checks ---

std::size_t arg_pool_size(const Bytecode& b, ArgPool pool) {
  switch (pool) {
    case ArgPool::None: return 0;
    case ArgPool::Nodes: return b.nodes.size();
    case ArgPool::Leaves: return b.leaves.size();
    case ArgPool::Hooks: return b.hooks.size();
    case ArgPool::Functions: return b.functions.size();
    case ArgPool::Outputs: return b.outputs.size();
  }
  return 0;
}

std::string_view arg_pool_name(ArgPool pool) {
  switch (pool) {
    case ArgPool::None: return "none";
    case ArgPool::Nodes: return "node";
    case ArgPool::Leaves: return "leaf";
    case ArgPool::Hooks: return "hook";
    case ArgPool::Functions: return "function";
    case ArgPool::Outputs: return "output";
  }
  return "?";
}

// An index into a pool of `size` entries; kNoIndex too when `optional`.
std::uint32_t read_index(Reader& r, std::size_t size, std::string_view pool, bool optional) {
  const std::size_t at = r.offset();
  const std::uint32_t index = r.u32(pool);
  if (index == kNoIndex && optional) return index;
  if (index >= size) r.fail_at(at, fmt::format("{} index {} is out of range ({} in the pool)", pool, index, size));
  return index;
}

// A run [first, first + count) inside a pool of `size` entries; an empty run
// may start anywhere (assemble starts it at the pool's end, or at kNoIndex).
std::pair<std::uint32_t, std::uint32_t> read_run(Reader& r, std::size_t size, std::string_view pool) {
  const std::size_t at = r.offset();
  const std::uint32_t first = r.u32(pool);
  const std::uint32_t count = r.u32(pool);
  if (count > 0 && std::uint64_t{first} + count > size) {
    r.fail_at(at, fmt::format("{} run [{}, +{}) is out of range ({} in the pool)", pool, first, count, size));
  }
  return {first, count};
}

BytecodeInstr read_instruction(Reader& r, const Bytecode& b) {
  BytecodeInstr c;
  c.op = r.enum_value<Opcode>(kOpcodes, "opcode");
  std::tie(c.first_operand, c.operand_count) = read_run(r, b.registers.size(), "operand");
  std::tie(c.first_result, c.result_count) = read_run(r, b.registers.size(), "result");
  const ArgPool pool = arg_pool(c.op);
  const std::size_t arg_at = r.offset();
  if (pool == ArgPool::None) {
    c.arg = r.u32("arg");
    if (c.arg != kNoIndex) r.fail_at(arg_at, fmt::format("{} takes no arg, found {}", mnemonic(c.op), c.arg));
  } else {
    c.arg = read_index(r, arg_pool_size(b, pool), arg_pool_name(pool), false);
  }
  c.leaf = read_index(r, b.leaves.size(), "leaf", true);
  c.attrs = read_index(r, b.attribute_blocks.size(), "attribute block", true);
  c.need = read_index(r, b.need_masks.size(), "need mask", true);
  std::tie(c.metadata, c.metadata_count) = read_run(r, b.metadata.size(), "metadata");
  c.origin = read_index(r, b.strings.size(), "string", true);
  return c;
}

// ---------------------------------------------------------------- sections ---

Bytecode read_sections(Reader& r) {
  Bytecode b;
  r.section(Section::Program, [&] { b.name = r.str("program name"); });
  r.section(Section::Strings, [&] {
    b.strings = r.list(kMinString, "strings", [&](std::uint32_t) { return r.str("string"); });
  });
  r.section(Section::Nodes, [&] {
    b.nodes = r.list(kMinString, "nodes", [&](std::uint32_t i) {
      const Reader::Context context(r, fmt::format("node {}", i));
      const std::size_t at = r.offset();
      std::string name = r.str("node name");
      // The pool holds the names aten instructions call too ("aten.mul.Tensor").
      if (find_node(name) == nullptr && find_aten_op(name) == nullptr) {
        r.fail_at(at, fmt::format("unknown backward node or ATen op '{}'", name));
      }
      return name;
    });
  });
  r.section(Section::Registers, [&] {
    b.register_names = r.list(kMinString, "register names", [&](std::uint32_t) { return r.str("register name"); });
    b.registers = r.list(4, "registers", [&](std::uint32_t) {
      return read_index(r, b.register_names.size(), "register", true);  // kNoRegister == kNoIndex
    });
  });
  r.section(Section::NeedMasks, [&] {
    b.need_masks = r.list(kMinString, "need masks", [&](std::uint32_t) {
      return r.list(1, "need bits", [&](std::uint32_t) { return r.flag("need bit"); });
    });
  });
  r.section(Section::Metadata, [&] {
    b.metadata = r.list(1, "metadata entries", [&](std::uint32_t i) {
      const Reader::Context context(r, fmt::format("metadata {}", i));
      return read_metadata(r);
    });
  });
  r.section(Section::AttributeBlocks, [&] {
    b.attribute_blocks = r.list(kMinString, "attribute blocks", [&](std::uint32_t i) {
      return read_attribute_block(r, i);
    });
  });
  r.section(Section::Declarations, [&] { read_declarations(r, b); });
  r.section(Section::Code, [&] {
    b.code = r.list(kMinInstruction, "instructions", [&](std::uint32_t pc) {
      const Reader::Context context(r, fmt::format("instruction {}", pc));
      return read_instruction(r, b);
    });
  });
  return b;
}

}  // namespace

// -------------------------------------------------------------------- API ---

std::string write_bytecode(const Bytecode& b) {
  Writer w;
  w.bytes().append(kMagic);
  w.u32(kBytecodeVersion);
  w.section(Section::Program, [&](Writer& s) { s.str(b.name); });
  w.section(Section::Strings, [&](Writer& s) { s.list(b.strings, [&](const std::string& x) { s.str(x); }); });
  w.section(Section::Nodes, [&](Writer& s) { s.list(b.nodes, [&](const std::string& x) { s.str(x); }); });
  w.section(Section::Registers, [&](Writer& s) {
    s.list(b.register_names, [&](const std::string& x) { s.str(x); });
    s.list(b.registers, [&](std::uint32_t x) { s.u32(x); });
  });
  w.section(Section::NeedMasks, [&](Writer& s) {
    s.list(b.need_masks, [&](const std::vector<bool>& mask) { s.list(mask, [&](bool bit) { s.flag(bit); }); });
  });
  w.section(Section::Metadata, [&](Writer& s) {
    s.list(b.metadata, [&](const std::optional<InputMetadata>& m) { write_metadata(s, m); });
  });
  w.section(Section::AttributeBlocks, [&](Writer& s) {
    s.list(b.attribute_blocks, [&](const std::vector<Attr>& block) {
      s.list(block, [&](const Attr& attr) {
        s.str(attr.name);
        write_value(s, attr.value);
      });
    });
  });
  w.section(Section::Declarations, [&](Writer& s) { write_declarations(s, b); });
  w.section(Section::Code, [&](Writer& s) {
    s.list(b.code, [&](const BytecodeInstr& c) { write_instruction(s, c); });
  });
  const std::uint32_t crc = checksum_crc32(std::as_bytes(std::span(w.bytes().data(), w.bytes().size())));
  w.u32(crc);
  return std::move(w.bytes());
}

void reseal_bytecode(std::vector<std::byte>& bytes) {
  if (bytes.size() < kChecksumBytes) return;
  const std::size_t body = bytes.size() - kChecksumBytes;
  const std::uint32_t crc = checksum_crc32(std::span<const std::byte>(bytes).first(body));
  for (std::size_t i = 0; i < kChecksumBytes; ++i) bytes[body + i] = static_cast<std::byte>((crc >> (8 * i)) & 0xFF);
}

bool is_bytecode(std::span<const std::byte> bytes) {
  if (bytes.size() < kMagic.size()) return false;
  for (std::size_t i = 0; i < kMagic.size(); ++i) {
    if (bytes[i] != static_cast<std::byte>(kMagic[i])) return false;
  }
  return true;
}

Bytecode read_bytecode(std::span<const std::byte> bytes, std::string_view origin) {
  Reader r(bytes, origin);
  if (bytes.size() < kHeaderBytes + kChecksumBytes) {
    r.fail_at(0, fmt::format("{} bytes is too short for a bytecode file (its header and checksum take {})",
                             bytes.size(), kHeaderBytes + kChecksumBytes));
  }
  if (!is_bytecode(bytes)) r.fail_at(0, "not a refgrad bytecode file (it does not start with \"RGBC\")");
  r.take(kMagic.size(), "magic");
  const std::uint32_t version = r.u32("version");
  if (version != kBytecodeVersion) {
    r.fail_at(kMagic.size(), fmt::format("bytecode version {} is not supported (this refgrad reads version {})",
                                         version, kBytecodeVersion));
  }
  // The checksum first: a corrupt file gets one clear message, not whichever
  // check its damage happens to trip.
  const std::size_t body_end = bytes.size() - kChecksumBytes;
  const auto stored = static_cast<std::uint32_t>(load_le(bytes.data() + body_end, kChecksumBytes));
  const std::uint32_t computed = checksum_crc32(bytes.first(body_end));
  if (stored != computed) {
    r.fail_at(body_end, fmt::format("checksum mismatch: the file says {:#010x}, its bytes give {:#010x} "
                                    "(the file is corrupt or truncated)",
                                    stored, computed));
  }
  r.limit(body_end);
  Bytecode bytecode = read_sections(r);
  if (r.left() > 0) r.fail_at(r.offset(), fmt::format("{} bytes after the last section", r.left()));
  return bytecode;
}

}  // namespace refgrad
