// safetensors, Hugging Face's tensor file format (https://github.com/huggingface/safetensors),
// read and written by hand:
//
//   8 bytes    N, the header's length: a little-endian u64
//   N bytes    the header: a UTF-8 JSON object
//                {"__metadata__": {"key": "value", ...},              optional; strings only
//                 "NAME": {"dtype": "F32", "shape": [2,3], "data_offsets": [BEGIN, END]}, ...}
//              padded with spaces to a multiple of 8 bytes
//   the rest   the data buffer: each tensor's elements, row-major and little-endian, in
//              bytes [BEGIN, END) of the buffer
//
// Nothing in a file is trusted: the reader checks every rule of the format (as the reference
// implementation does) before it touches the data, so a hostile file gives a refgrad::Error.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "json_io.hpp"
#include "refgrad/bundle.hpp"

namespace refgrad {

// Tensor bytes are copied as they lie in memory, which is the file's byte order only here.
static_assert(std::endian::native == std::endian::little, "refgrad's safetensors code assumes a little-endian host");

namespace {

using nlohmann::json;
using detail::json_excerpt;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::string_view kMetadataKey = "__metadata__";
// No tensor may hold more elements than this, with every size-0 dimension counted as 1, so that
// its byte count and the strides computed from its shape fit in int64 whatever the dtype.
constexpr std::uint64_t kMaxElements = std::numeric_limits<std::int64_t>::max() / 8;

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "BOOL";
    case DType::UInt8: return "U8";
    case DType::Int8: return "I8";
    case DType::Int16: return "I16";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::UInt16: return "U16";
    case DType::UInt32: return "U32";
    case DType::UInt64: return "U64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    // The safetensors format names complex64 C64; complex32 and complex128 have no name there yet,
    // C32 and C128 are refgrad's.
    case DType::ComplexHalf: return "C32";
    case DType::ComplexFloat: return "C64";
    case DType::ComplexDouble: return "C128";
  }
  return "?";
}

std::uint64_t byte_count(const Tensor& tensor) {
  return static_cast<std::uint64_t>(tensor.numel()) * element_size(tensor.dtype());
}

// ----------------------------------------------------------------- reading ---

// One header entry, checked on its own; check_layout checks the entries together.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

// nlohmann-json keeps a non-negative integer as unsigned, a negative one as signed and
// anything with '.' or an exponent as a float: only the first kind is a size or an offset.
std::optional<std::uint64_t> non_negative_integer(const json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  return std::nullopt;
}

// The file's parts: the header text and the data buffer after it.
struct FileParts {
  std::string_view header;
  std::span<const std::byte> data;
};

FileParts split_file(std::span<const std::byte> bytes, std::string_view origin) {
  check(bytes.size() >= 8, origin, ": ", bytes.size(),
        " bytes is too short for a safetensors file (it starts with an 8-byte header length)");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | std::to_integer<std::uint64_t>(bytes[i]);
  check(header_bytes <= kMaxHeaderBytes, origin, ": header length ", header_bytes, " is over the limit of ",
        kMaxHeaderBytes, " bytes");
  check(header_bytes <= bytes.size() - 8, origin, ": header length ", header_bytes,
        " runs past the end of the file (", bytes.size(), " bytes)");
  const auto header_begin = reinterpret_cast<const char*>(bytes.data()) + 8;
  return {std::string_view(header_begin, header_bytes), bytes.subspan(8 + header_bytes)};
}

DType parse_dtype(const json& value, const std::string& context) {
  check(value.is_string(), context, ": dtype ", json_excerpt(value), " is not a string");
  const auto& name = value.get_ref<const std::string&>();
  for (DType dtype : kAllDTypes) {
    if (name == safetensors_dtype_name(dtype)) return dtype;
  }
  fail(concat(context, ": dtype '", name,
              "' is not supported (refgrad reads BOOL, U8, I8, I16, I32, I64, U16, U32, U64, F16, BF16, F32, F64, C64, "
              "C128)"));
}

Shape parse_shape(const json& value, const std::string& context) {
  check(value.is_array(), context, ": shape ", json_excerpt(value), " is not a list");
  Shape shape;
  std::uint64_t elements = 1;  // with size-0 dimensions counted as 1, see kMaxElements
  for (const json& size : value) {
    const auto n = non_negative_integer(size);
    check(n.has_value(), context, ": shape entry ", json_excerpt(size), " is not a non-negative integer");
    const std::uint64_t factor = std::max<std::uint64_t>(*n, 1);
    check(factor <= kMaxElements / elements, context, ": shape ", json_excerpt(value), " has too many elements");
    elements *= factor;
    shape.push_back(static_cast<std::int64_t>(*n));
  }
  return shape;
}

Entry parse_entry(const std::string& name, const json& value, std::string_view origin) {
  const std::string context = concat(origin, ": tensor '", name, "'");
  detail::check_keys(value, {"dtype", "shape", "data_offsets"}, context);
  Entry entry{name, parse_dtype(value["dtype"], context), parse_shape(value["shape"], context)};
  const json& offsets = value["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2, context, ": data_offsets ", json_excerpt(offsets),
        " is not [begin, end]");
  const auto begin = non_negative_integer(offsets[0]), end = non_negative_integer(offsets[1]);
  check(begin && end, context, ": data_offsets ", json_excerpt(offsets), " are not non-negative integers");
  check(*begin <= *end, context, ": data_offsets ", json_excerpt(offsets), " end before they begin");
  entry.begin = *begin;
  entry.end = *end;
  const std::uint64_t needed = static_cast<std::uint64_t>(numel_of(entry.shape)) * element_size(entry.dtype);
  check(entry.end - entry.begin == needed, context, ": data_offsets ", json_excerpt(offsets), " hold ",
        entry.end - entry.begin, " bytes, but ", safetensors_dtype_name(entry.dtype), str(entry.shape), " needs ",
        needed);
  return entry;
}

// The format's layout rules: every tensor's bytes inside the data buffer, no two tensors
// sharing a byte, and no byte of the buffer left to no tensor.
void check_layout(std::vector<Entry> entries, std::uint64_t data_bytes, std::string_view origin) {
  for (const Entry& entry : entries) {
    check(entry.end <= data_bytes, origin, ": tensor '", entry.name, "': data_offsets [", entry.begin, ",",
          entry.end, "] lie outside the data buffer (", data_bytes, " bytes)");
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  std::uint64_t covered = 0;  // bytes [0, covered) belong to the tensors seen so far
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    check(entry.begin >= covered, origin, ": tensor '", entry.name, "': data_offsets [", entry.begin, ",", entry.end,
          "] overlap those of tensor '", previous ? previous->name : "", "'");
    check(entry.begin == covered, origin, ": bytes [", covered, ",", entry.begin,
          ") of the data buffer belong to no tensor");
    covered = entry.end;
    previous = &entry;
  }
  check(covered == data_bytes, origin, ": bytes [", covered, ",", data_bytes,
        ") of the data buffer belong to no tensor");
}

Tensor read_tensor(const Entry& entry, std::span<const std::byte> data, std::string_view origin) {
  const auto bytes = data.subspan(entry.begin, entry.end - entry.begin);
  if (entry.dtype == DType::Bool) {
    // A C++ bool holding any other byte is undefined behaviour.
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      const auto byte = std::to_integer<int>(bytes[i]);
      check(byte <= 1, origin, ": tensor '", entry.name, "': BOOL element ", i, " is byte ", byte, ", not 0 or 1");
    }
  }
  return from_buffer(bytes.data(), entry.shape, entry.dtype);
}

// ----------------------------------------------------------------- writing ---

void append_u64_le(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

// The header, with the tensors laid out one after the other in name order.
std::string header_text(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();  // std::map-backed: keys come out sorted, as the data is laid out
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    check(name != kMetadataKey, "write_safetensors: '", kMetadataKey, "' cannot name a tensor");
    check(tensor.defined(), "write_safetensors: tensor '", name, "' is undefined");
    const std::uint64_t end = offset + byte_count(tensor);
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.sizes()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = detail::dump_json(header, "write_safetensors");
  // Padded with spaces to a multiple of 8, as the reference writer does, so that the data
  // buffer starts 8-byte aligned when the file is mapped.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

std::string write_safetensors(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  const std::string header = header_text(tensors, metadata);
  std::uint64_t data_bytes = 0;
  for (const auto& entry : tensors) data_bytes += byte_count(entry.second);

  std::string file;
  file.reserve(8 + header.size() + data_bytes);
  append_u64_le(file, header.size());
  file += header;
  for (const auto& entry : tensors) {
    const Tensor dense = entry.second.contiguous();
    if (byte_count(dense) > 0) file.append(static_cast<const char*>(dense.raw_data()), byte_count(dense));
  }
  return file;
}

TensorMap read_safetensors(std::span<const std::byte> bytes, std::string_view origin,
                           std::map<std::string, std::string>* metadata) {
  const FileParts parts = split_file(bytes, origin);
  const json header = detail::parse_json(parts.header, concat(origin, ": header"));
  check(header.is_object(), origin, ": header ", json_excerpt(header), " is not a JSON object");

  std::vector<Entry> entries;
  std::map<std::string, std::string> found_metadata;
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey) found_metadata = detail::string_map(item.value(), concat(origin, ": ", kMetadataKey));
    else entries.push_back(parse_entry(item.key(), item.value(), origin));
  }
  check_layout(entries, parts.data.size(), origin);

  TensorMap tensors;
  for (const Entry& entry : entries) tensors.emplace(entry.name, read_tensor(entry, parts.data, origin));
  if (metadata) *metadata = std::move(found_metadata);
  return tensors;
}

}  // namespace refgrad
