// Tensor::repr: the text PyTorch's repr(tensor) gives with the default print
// options (torch.set_printoptions(profile="default")):
//
//   tensor(1.5000)                    tensor([ True, False])
//   tensor([[1, 2],                   tensor([], size=(0, 3))
//           [3, 4]])                  tensor([1., 2.], dtype=torch.float64)
//
// The rules, found by running torch 2.13:
// - Every element shown is formatted the same way and right-aligned to the
//   widest of them, so columns line up.
// - bool and int64 print like Python's str(): True, -3.
// - Floating tensors look at their nonzero finite values (all shown values when
//   none is left out). If all of them are integers, they print as "2." (int
//   mode); otherwise with 4 decimals, "2.5000". Either way the tensor switches to
//   scientific notation, "2.5000e+10", when max|x| / min|x| > 1000, max|x| > 1e8
//   or min|x| < 1e-4 over those values. nan, inf and -inf print as such.
// - Rows wrap so that a line stays within 80 columns.
// - Beyond 1000 elements the tensor is summarized: along every dim longer than
//   6 only the first 3 and last 3 entries are shown, with "..." between them,
//   and only the shown values decide the format.
// - A dtype suffix appears unless the dtype is one torch can infer back from
//   the text (float32, the default dtype; int64; bool); an empty tensor always
//   names a dtype other than float32, and its size unless it is 1-d.
#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <vector>

#include "kernel.hpp"

namespace refgrad {

namespace {

// torch's PRINT_OPTS defaults.
constexpr int kPrecision = 4;
constexpr std::int64_t kThreshold = 1000;
constexpr std::int64_t kEdgeItems = 3;
constexpr std::int64_t kLineWidth = 80;

// printf-style formatting of one double, as Python's format() does it for the
// 'f' and 'e' presentation types. Both round the exact binary value correctly,
// so finite values agree digit for digit; non-finite ones need care because
// printf may write "-nan" where Python writes "nan".
std::string format_double(double value, int precision, char presentation) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const char format[] = {'%', '.', '*', presentation, '\0'};
  const int length = std::snprintf(nullptr, 0, format, precision, value);
  std::string out(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, precision, value);
  out.resize(static_cast<std::size_t>(length));
  return out;
}

std::string pad_left(const std::string& text, std::size_t width) {
  return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

// Decides one format for every element shown (torch's _Formatter) and applies it.
template <class T>
class ElementFormatter {
 public:
  explicit ElementFormatter(const std::vector<T>& shown) {
    if constexpr (std::is_floating_point_v<T>) {
      choose_float_format(shown);
    } else {
      for (T value : shown) width_ = std::max(width_, plain_text(value).size());
    }
  }

  std::size_t width() const { return width_; }

  std::string format(T value) const {
    if constexpr (std::is_floating_point_v<T>) {
      const double v = static_cast<double>(value);
      std::string text;
      if (scientific_) {
        text = format_double(v, kPrecision, 'e');
      } else if (integral_) {
        text = format_double(v, 0, 'f');
        if (std::isfinite(v)) text += ".";  // the point says "floating", as in 2.
      } else {
        text = format_double(v, kPrecision, 'f');
      }
      return pad_left(text, width_);
    } else {
      return pad_left(plain_text(value), width_);
    }
  }

 private:
  static std::string plain_text(T value) {
    if constexpr (std::is_same_v<T, bool>) return value ? "True" : "False";
    else return std::to_string(value);
  }

  void choose_float_format(const std::vector<T>& shown) {
    std::vector<double> nonzero_finite;
    for (T value : shown)
      if (std::isfinite(value) && value != 0) nonzero_finite.push_back(static_cast<double>(value));
    // Only zeros, nan and inf: int mode, each printed at its own width.
    if (nonzero_finite.empty()) return;

    double min_abs = std::abs(nonzero_finite.front()), max_abs = min_abs;
    for (double v : nonzero_finite) {
      min_abs = std::min(min_abs, std::abs(v));
      max_abs = std::max(max_abs, std::abs(v));
      if (v != std::ceil(v)) integral_ = false;
    }
    scientific_ = max_abs / min_abs > 1000.0 || max_abs > 1.0e8 || min_abs < 1.0e-4;

    // The width comes from the nonzero finite values only: zeros, nan and inf
    // are never wider than those, except when all the others are narrower.
    for (double v : nonzero_finite) {
      std::size_t length;
      if (scientific_) length = format_double(v, kPrecision, 'e').size();
      else if (integral_) length = format_double(v, 0, 'f').size() + 1;  // + the trailing "."
      else length = format_double(v, kPrecision, 'f').size();
      width_ = std::max(width_, length);
    }
  }

  std::size_t width_ = 1;
  bool integral_ = true;
  bool scientific_ = false;
};

// A complex element, as torch prints it: the real parts and the imaginary
// parts each get their own format (from all shown values' parts), and the
// imaginary part follows with its sign and a "j": "1.5000-2.0000j".
template <class Part>
class ElementFormatter<std::complex<Part>> {
 public:
  explicit ElementFormatter(const std::vector<std::complex<Part>>& shown)
      : real_(parts(shown, false)), imag_(parts(shown, true)) {}

  // torch counts the imaginary part's width and its "j" (the sign's column is the real part's padding).
  std::size_t width() const { return real_.width() + imag_.width() + 1; }

  std::string format(std::complex<Part> value) const {
    std::string imag_text = imag_.format(value.imag()) + "j";
    imag_text.erase(0, imag_text.find_first_not_of(' '));
    const bool signed_imag = imag_text[0] == '+' || imag_text[0] == '-';
    return real_.format(value.real()) + (signed_imag ? "" : "+") + imag_text;
  }

 private:
  static std::vector<Part> parts(const std::vector<std::complex<Part>>& shown, bool imaginary) {
    std::vector<Part> values;
    for (const std::complex<Part>& value : shown) values.push_back(imaginary ? value.imag() : value.real());
    return values;
  }

  ElementFormatter<Part> real_;
  ElementFormatter<Part> imag_;
};

// The indices shown along a dim of this size.
std::vector<std::int64_t> shown_indices(std::int64_t size, bool summarize) {
  std::vector<std::int64_t> indices;
  if (summarize && size > 2 * kEdgeItems) {
    for (std::int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
    for (std::int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
  } else {
    for (std::int64_t i = 0; i < size; ++i) indices.push_back(i);
  }
  return indices;
}

// Writes the nested "[...]" text of a non-empty tensor of element type T.
template <class T>
class Printer {
 public:
  explicit Printer(const Tensor& t)
      : data_(static_cast<const T*>(t.raw_data())),
        sizes_(t.sizes()),
        strides_(t.strides()),
        summarize_(t.numel() > kThreshold),
        formatter_(shown_values()) {}

  // `indent` is the column the text starts at: the length of "tensor(".
  std::string text(std::int64_t indent) const { return tensor_text(0, 0, indent); }

 private:
  std::vector<T> shown_values() const {
    std::vector<T> values;
    collect(0, 0, values);
    return values;
  }

  // Size-1 dims are stepped over in loops here and in tensor_text, so that
  // the recursion only goes as deep as the dims of size 2 or more (fewer than
  // 64 in a non-empty tensor), however many dims a tensor has.
  void collect(std::size_t dim, std::int64_t offset, std::vector<T>& values) const {
    while (dim < sizes_.size() && sizes_[dim] == 1) ++dim;
    if (dim == sizes_.size()) {
      values.push_back(data_[offset]);
      return;
    }
    for (std::int64_t i : shown_indices(sizes_[dim], summarize_)) collect(dim + 1, offset + i * strides_[dim], values);
  }

  std::string tensor_text(std::size_t dim, std::int64_t offset, std::int64_t indent) const {
    const std::size_t remaining = sizes_.size() - dim;
    if (remaining == 0) return formatter_.format(data_[offset]);
    if (remaining == 1) return vector_text(dim, offset, indent);
    // A size-1 dim is its one sub-tensor in brackets.
    std::size_t ones = 0;
    while (remaining - ones > 1 && sizes_[dim + ones] == 1) ++ones;
    if (ones > 0) {
      const auto extra = static_cast<std::int64_t>(ones);
      return std::string(ones, '[') + tensor_text(dim + ones, offset, indent + extra) + std::string(ones, ']');
    }

    // Sub-tensors one per line, with an empty line between blocks per extra dim:
    // [[1, 2],\n [3, 4]] for 2-d, [[[..]],\n\n [[..]]] for 3-d.
    const std::string separator = "," + std::string(remaining - 1, '\n') + std::string(indent + 1, ' ');
    std::string out = "[";
    std::int64_t previous = -1;
    for (std::int64_t i : shown_indices(sizes_[dim], summarize_)) {
      if (previous >= 0) out += separator;
      if (previous >= 0 && i != previous + 1) out += "..." + separator;
      out += tensor_text(dim + 1, offset + i * strides_[dim], indent + 1);
      previous = i;
    }
    return out + "]";
  }

  std::string vector_text(std::size_t dim, std::int64_t offset, std::int64_t indent) const {
    std::vector<std::string> items;
    std::int64_t previous = -1;
    for (std::int64_t i : shown_indices(sizes_[dim], summarize_)) {
      if (previous >= 0 && i != previous + 1) items.push_back(" ...");
      items.push_back(formatter_.format(data_[offset + i * strides_[dim]]));
      previous = i;
    }
    // Each element takes its width plus ", "; as many as fit in what is left
    // of the line, but at least one. The " ..." counts as an element.
    const auto item_length = static_cast<std::int64_t>(formatter_.width()) + 2;
    const std::int64_t room = kLineWidth - indent;
    const std::int64_t per_line = std::max<std::int64_t>(1, room / item_length);

    std::string out = "[";
    const std::string line_break = ",\n" + std::string(indent + 1, ' ');
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (k > 0) out += k % per_line == 0 ? line_break : ", ";
      out += items[k];
    }
    return out + "]";
  }

  const T* data_;
  Shape sizes_;
  Shape strides_;
  bool summarize_;
  ElementFormatter<T> formatter_;
};

// Python's str(tuple(shape)): "(0, 3)", "(0,)".
std::string python_tuple(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// Appends ", size=...", ", dtype=..." and the closing ")". A suffix goes on a
// new line when the line would otherwise pass the line width. The line length
// is counted as torch counts it, which is 2 more than the visible length.
std::string add_suffixes(std::string text, const std::vector<std::string>& suffixes, std::int64_t indent) {
  const std::size_t last_newline = text.rfind('\n');
  const std::int64_t newline_position =
      last_newline == std::string::npos ? -1 : static_cast<std::int64_t>(last_newline);
  std::int64_t line_length = static_cast<std::int64_t>(text.size()) - newline_position + 1;
  for (const std::string& suffix : suffixes) {
    const auto suffix_length = static_cast<std::int64_t>(suffix.size());
    if (line_length + suffix_length + 2 > kLineWidth) {
      text += ",\n" + std::string(indent, ' ') + suffix;
      line_length = indent + suffix_length;
    } else {
      text += ", " + suffix;
      line_length += suffix_length + 2;
    }
  }
  return text + ")";
}

}  // namespace

std::string Tensor::repr() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const auto indent = static_cast<std::int64_t>(prefix.size());
  const std::string dtype_suffix = "dtype=torch." + dtype_name(dtype_);

  std::vector<std::string> suffixes;
  std::string body;
  if (numel() == 0) {
    // Nothing to infer the dtype from, so only the default dtype goes unnamed.
    if (dim() != 1) suffixes.push_back("size=" + python_tuple(sizes_));
    if (dtype_ != default_dtype()) suffixes.push_back(dtype_suffix);
    body = "[]";
  } else {
    // complex64 is the default complex dtype when float32 is the default dtype.
    const bool dtype_inferable = dtype_ == default_dtype() || dtype_ == DType::Int64 || dtype_ == DType::Bool ||
                                 (dtype_ == DType::ComplexFloat && default_dtype() == DType::Float32);
    if (!dtype_inferable) suffixes.push_back(dtype_suffix);
    if (dtype_ == DType::UInt64) {
      body = Printer<std::uint64_t>(*this).text(indent);  // int64, its opmath type, does not hold every value
    } else {
      // A storage format prints its values as its opmath type holds them exactly.
      const Tensor shown = kernel::to_opmath(*this);
      body = kernel::dispatch_with_complex(shown.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Printer<T>(shown).text(indent);
      }, "repr");
    }
  }
  return add_suffixes(prefix + body, suffixes, indent);
}

}  // namespace refgrad
