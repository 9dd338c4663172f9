// Python values <-> refgrad values (convert.hpp says the rules).
#include "convert.hpp"

#include <algorithm>
#include <array>
#include <bit>

#include <fmt/format.h>
#include <pybind11/stl.h>

namespace refgrad::python {

PyObject* error_class = nullptr;

namespace {

py::object error_with_message(const std::string& message) {
  const py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<py::ssize_t>(message.size()), "backslashreplace"));
  if (!text) throw py::error_already_set();
  return py::reinterpret_borrow<py::object>(error_class)(text);
}

}  // namespace

void set_error(const std::string& message) {
  const py::object error = error_with_message(message);
  PyErr_SetObject(error_class, error.ptr());
}

void raise_error_from(const std::string& message, const py::object& cause) {
  const py::object error = error_with_message(message);
  if (cause) error.attr("__cause__") = cause;
  PyErr_SetObject(error_class, error.ptr());
  throw py::error_already_set();
}

// ------------------------------------------------------------- small enums ---

namespace {

constexpr std::array kLayouts = {Layout::Strided,   Layout::Sparse,    Layout::SparseCsr, Layout::Mkldnn,
                                 Layout::SparseCsc, Layout::SparseBsr, Layout::SparseBsc, Layout::Jagged};

// str(value) without PyTorch's "torch." prefix: torch.float32 and "float32" read alike.
std::string name_of(py::handle value) {
  std::string name = py::str(value);
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  return name;
}

}  // namespace

std::string str_of(py::handle value) { return py::str(value).cast<std::string>(); }

std::string python_type_name(py::handle value) {
  const py::handle type = py::type::handle_of(value);
  const std::string module = py::str(type.attr("__module__"));
  const std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

DType dtype_from_python(py::handle value, std::string_view where) {
  const std::string name = name_of(value);
  for (DType dtype : kAllDTypes) {
    if (name == dtype_name(dtype)) return dtype;
  }
  if (const std::optional<DType> dtype = parse_short_dtype(name)) return *dtype;
  fail(fmt::format("{}: refgrad has no dtype '{}' (it has bool, the integer types, float16, bfloat16, float32, "
                   "float64, complex32, complex64 and complex128)",
                   where, name));
}

Device device_from_python(py::handle value, std::string_view where) {
  const std::string name = name_of(value);
  const std::string type = name.substr(0, name.find(':'));  // "cuda:0" is a cuda device
  if (type == "cpu") return Device::CPU;
  if (type == "cuda") return Device::CUDA;
  fail(fmt::format("{}: unknown device '{}' (expected cpu or cuda)", where, name));
}

std::string layout_short_name(Layout layout) { return layout_name(layout).substr(6); }

Layout layout_from_python(py::handle value, std::string_view where) {
  const std::string name = name_of(value);
  for (Layout layout : kLayouts) {
    if (name == layout_short_name(layout)) return layout;
  }
  fail(fmt::format("{}: unknown layout '{}' (expected strided, sparse_coo, ...)", where, name));
}

// ----------------------------------------------------------------- tensors ---

namespace {

// A buffer's element type, from its struct-module format ("f", "<d", "?", ...).
// Returns nullopt for the types refgrad lacks; `native` says whether the
// bytes are in this machine's order.
std::optional<DType> dtype_of_format(std::string_view format, py::ssize_t itemsize, bool& native) {
  native = true;
  if (!format.empty() && std::string_view("@=<>!").find(format.front()) != std::string_view::npos) {
    const bool little = format.front() == '<' || ((format.front() == '@' || format.front() == '=') &&
                                                  std::endian::native == std::endian::little);
    native = little == (std::endian::native == std::endian::little);
    format.remove_prefix(1);
  }
  if (format == "?" && itemsize == 1) return DType::Bool;
  // The integer codes name C types, whose widths vary: the itemsize decides.
  const bool is_signed = format == "b" || format == "h" || format == "i" || format == "l" || format == "q";
  const bool is_unsigned = format == "B" || format == "H" || format == "I" || format == "L" || format == "Q";
  if (is_signed || is_unsigned) {
    switch (itemsize) {
      case 1: return is_signed ? DType::Int8 : DType::UInt8;
      case 2: return is_signed ? DType::Int16 : DType::UInt16;
      case 4: return is_signed ? DType::Int32 : DType::UInt32;
      case 8: return is_signed ? DType::Int64 : DType::UInt64;
      default: return std::nullopt;
    }
  }
  if (format == "e" && itemsize == 2) return DType::Float16;
  if (format == "f" && itemsize == 4) return DType::Float32;
  if (format == "d" && itemsize == 8) return DType::Float64;
  if (format == "Zf" && itemsize == 8) return DType::ComplexFloat;
  if (format == "Zd" && itemsize == 16) return DType::ComplexDouble;
  return std::nullopt;
}

// Whether refgrad can address the buffer's memory as it is.
bool addressable(const Py_buffer& view) {
  if (reinterpret_cast<std::uintptr_t>(view.buf) % static_cast<std::uintptr_t>(view.itemsize) != 0) return false;
  for (int d = 0; d < view.ndim; ++d) {
    if (view.strides[d] < 0 || view.strides[d] % view.itemsize != 0) return false;
  }
  return true;
}

// The buffer of `object`, released under the GIL when the last tensor using it goes.
std::shared_ptr<Py_buffer> buffer_of(py::handle object) {
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(object.ptr(), view.get(), PyBUF_RECORDS_RO) != 0) throw py::error_already_set();
  return std::shared_ptr<Py_buffer>(view.release(), [](Py_buffer* held) {
    if (Py_IsInitialized()) {  // a tensor that outlives the interpreter leaks its buffer instead
      py::gil_scoped_acquire gil;
      PyBuffer_Release(held);
    }
    delete held;
  });
}

// A C-contiguous, native-order copy of an array (numpy.array, not
// ascontiguousarray, which makes a 0-d array 1-d).
py::object addressable_copy(py::handle array) {
  const py::module_ numpy = py::module_::import("numpy");
  const py::object plain = numpy.attr("asarray")(array);
  return numpy.attr("array")(plain, py::arg("dtype") = plain.attr("dtype").attr("newbyteorder")("="),
                             py::arg("order") = "C");
}

bool is_torch_tensor(py::handle value) {
  const py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;  // never import torch just to ask
  return py::isinstance(value, modules["torch"].attr("Tensor"));
}

Tensor tensor_from_torch(py::handle value) {
  const DType dtype = dtype_from_python(value.attr("dtype"), "Tensor.from_torch");  // the float8 types raise here
  const py::object plain = value.attr("detach")().attr("cpu")().attr("resolve_conj")().attr("resolve_neg")();
  if (dtype == DType::BFloat16 || dtype == DType::ComplexHalf) {
    // NumPy has no bfloat16 and no complex32: their bits travel as int16 and int32 (of the same width),
    // and the tensor is seen in its own dtype again.
    const py::object torch = py::module_::import("torch");
    const py::object bits_dtype = torch.attr(dtype == DType::BFloat16 ? "int16" : "int32");
    const Tensor bits = tensor_from_numpy(plain.attr("view")(bits_dtype).attr("numpy")());
    return Tensor(bits.storage(), bits.sizes(), bits.strides(), bits.storage_offset(), dtype);
  }
  return tensor_from_numpy(plain.attr("numpy")());
}

// The tensor over the buffer of `array`, or over a copy of it when
// `copy_if_needed` and refgrad cannot address the buffer as it is.
Tensor wrap_buffer(py::handle array, bool copy_if_needed) {
  check(PyObject_CheckBuffer(array.ptr()), "Tensor.from_numpy: expected a NumPy array, got ", python_type_name(array));
  const std::shared_ptr<Py_buffer> view = buffer_of(array);
  bool native = true;
  const std::optional<DType> dtype = dtype_of_format(view->format ? view->format : "B", view->itemsize, native);
  if (!dtype) {
    const std::string name = py::hasattr(array, "dtype") ? str_of(array.attr("dtype")) : view->format;
    fail(fmt::format("Tensor.from_numpy: refgrad has no dtype for NumPy's {} (it has bool, the integer types, "
                     "float16, float32, float64, complex64 and complex128; convert with .astype(...))",
                     name));
  }
  if (!native || !addressable(*view)) {
    check(copy_if_needed, "Tensor.from_numpy: NumPy made a copy refgrad still cannot address");
    return wrap_buffer(addressable_copy(array), false);
  }
  const auto itemsize = static_cast<std::int64_t>(view->itemsize);
  Shape sizes, strides;
  for (int d = 0; d < view->ndim; ++d) {
    sizes.push_back(static_cast<std::int64_t>(view->shape[d]));
    strides.push_back(static_cast<std::int64_t>(view->strides[d]) / itemsize);
  }
  return from_blob(view, view->buf, sizes, strides, *dtype);  // refgrad only reads: read-only buffers are fine
}

}  // namespace

Tensor tensor_from_numpy(py::handle array) { return wrap_buffer(array, true); }

py::object tensor_to_numpy(const Tensor& tensor) {
  check(tensor.defined(), "Tensor.numpy: the tensor is undefined");
  // Through the buffer protocol (bind_tensor.cpp): the array's base holds the Tensor, and with it the storage.
  return py::module_::import("numpy").attr("asarray")(py::cast(tensor));
}

Tensor tensor_from_python(py::handle value, std::string_view where) {
  check(!value.is_none(), where, ": expected a tensor, got None");
  if (py::isinstance<Tensor>(value)) return value.cast<Tensor>();
  if (is_torch_tensor(value)) return tensor_from_torch(value);
  if (PyObject_CheckBuffer(value.ptr())) return tensor_from_numpy(value);
  return tensor_from_numpy(py::module_::import("numpy").attr("asarray")(value));
}

std::optional<Tensor> optional_tensor_from_python(py::handle value, std::string_view where) {
  if (value.is_none()) return std::nullopt;
  return tensor_from_python(value, where);
}

py::object tensor_to_python(const Tensor& tensor) {
  if (!tensor.defined()) return py::none();
  return py::cast(tensor);
}

py::object tensor_to_python(const std::optional<Tensor>& tensor) {
  if (!tensor) return py::none();
  return tensor_to_python(*tensor);
}

py::sequence sequence_from_python(py::handle value, std::string_view where) {
  check(PySequence_Check(value.ptr()) && !py::isinstance<py::str>(value) && !py::isinstance<py::bytes>(value),
        where, ": expected a list, got ", python_type_name(value));
  return py::reinterpret_borrow<py::sequence>(value);
}

Grads grads_from_python(py::handle values, std::string_view where) {
  Grads grads;
  const py::sequence items = sequence_from_python(values, where);
  for (std::size_t i = 0; i < items.size(); ++i) {
    grads.push_back(optional_tensor_from_python(items[i], fmt::format("{}[{}]", where, i)));
  }
  return grads;
}

py::list grads_to_python(const Grads& grads) {
  py::list list;
  for (const std::optional<Tensor>& grad : grads) list.append(tensor_to_python(grad));
  return list;
}

TensorMap tensor_map_from_python(py::handle values, std::string_view where) {
  TensorMap tensors;
  if (values.is_none()) return tensors;
  check(py::isinstance<py::dict>(values), where, ": expected a dict of tensors by name, got ",
        python_type_name(values));
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(values)) {
    const std::string name = string_from_python(key, where);
    tensors[name] = tensor_from_python(value, fmt::format("{}['{}']", where, name));
  }
  return tensors;
}

py::dict tensor_map_to_python(const TensorMap& tensors) {
  py::dict dict;
  for (const auto& [name, tensor] : tensors) dict[py::str(name)] = tensor_to_python(tensor);
  return dict;
}

// ------------------------------------------------------------------ numbers ---

namespace {

bool is_numpy_bool(py::handle value) {
  const py::handle type = py::type::handle_of(value);
  return std::string(py::str(type.attr("__module__"))) == "numpy" &&
         std::string(py::str(type.attr("__name__"))) == "bool";
}

bool is_bool(py::handle value) { return PyBool_Check(value.ptr()) || is_numpy_bool(value); }
bool is_int(py::handle value) { return !is_bool(value) && PyIndex_Check(value.ptr()); }
bool is_float(py::handle value) {
  return !is_bool(value) && !is_int(value) && !py::isinstance<py::str>(value) && py::hasattr(value, "__float__");
}

[[noreturn]] void wrong_kind(py::handle value, std::string_view where, std::string_view expected) {
  fail(fmt::format("{}: expected {}, got {} {}", where, expected, python_type_name(value),
                   std::string(py::repr(value))));
}

bool bool_from_python(py::handle value, std::string_view where) {
  if (!is_bool(value)) wrong_kind(value, where, "a bool");
  return PyObject_IsTrue(value.ptr()) == 1;
}

double float_from_python(py::handle value, std::string_view where) {
  if (!is_float(value) && !is_int(value)) wrong_kind(value, where, "a float");
  const double result = PyFloat_AsDouble(value.ptr());
  if (result == -1.0 && PyErr_Occurred()) throw py::error_already_set();  // its __float__ raised
  return result;
}

Scalar scalar_from_python(py::handle value, std::string_view where) {
  if (is_bool(value)) return Scalar(bool_from_python(value, where));
  if (is_int(value)) return Scalar(int_from_python(value, where));
  if (is_float(value)) return Scalar(float_from_python(value, where));
  if (PyComplex_Check(value.ptr()))
    return Scalar(std::complex<double>(PyComplex_RealAsDouble(value.ptr()), PyComplex_ImagAsDouble(value.ptr())));
  wrong_kind(value, where, "a number (bool, int, float or complex)");
}

py::object scalar_to_python(const Scalar& scalar) {
  switch (scalar.kind()) {
    case Scalar::Kind::Bool: return py::bool_(scalar.to_bool());
    case Scalar::Kind::Int: return py::int_(scalar.to_int64());
    case Scalar::Kind::Float: return py::float_(scalar.to_double());
    case Scalar::Kind::Complex: {
      const std::complex<double> z = scalar.to_complex();
      return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(z.real(), z.imag()));
    }
  }
  return py::none();
}

// An instance of the bound class T, or a dict of its constructor's arguments.
template <class T>
T value_from_python(py::handle value, std::string_view where, std::string_view expected) {
  if (py::isinstance<T>(value)) return value.cast<T>();
  if (py::isinstance<py::dict>(value)) {
    return py::type::of<T>()(**py::reinterpret_borrow<py::dict>(value)).template cast<T>();
  }
  wrong_kind(value, where, expected);
}

}  // namespace

std::int64_t int_from_python(py::handle value, std::string_view where) {
  if (!is_int(value)) wrong_kind(value, where, "an int");
  const py::object number = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!number) throw py::error_already_set();  // its __index__ raised
  const long long result = PyLong_AsLongLong(number.ptr());
  if (result == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    fail(fmt::format("{}: {} does not fit in 64 bits", where, str_of(number)));
  }
  return static_cast<std::int64_t>(result);
}

IntList int_list_from_python(py::handle value, std::string_view where) {
  const std::vector<std::int64_t> values = list_from_python<std::int64_t>(value, where, int_from_python);
  return IntList(values.begin(), values.end());
}

std::string string_from_python(py::handle value, std::string_view where) {
  if (!py::isinstance<py::str>(value)) wrong_kind(value, where, "a str");
  return value.cast<std::string>();
}

// ------------------------------------------------------------ saved fields ---

std::string kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::Tensor: return "tensor";
    case FieldKind::TensorList: return "tensor_list";
    case FieldKind::OptionalTensorList: return "optional_tensor_list";
    case FieldKind::Int: return "int";
    case FieldKind::IntList: return "int_list";
    case FieldKind::Sizes: return "sizes";
    case FieldKind::Float: return "float";
    case FieldKind::Bool: return "bool";
    case FieldKind::Scalar: return "scalar";
    case FieldKind::String: return "string";
    case FieldKind::DType: return "dtype";
    case FieldKind::Layout: return "layout";
    case FieldKind::TensorOptions: return "tensor_options";
    case FieldKind::TensorGeometry: return "tensor_geometry";
    case FieldKind::TypeAndSize: return "type_and_size";
    case FieldKind::DTypeList: return "dtype_list";
    case FieldKind::SizesList: return "sizes_list";
    case FieldKind::BoolList: return "bool_list";
    case FieldKind::Device: return "device";
    case FieldKind::MemoryFormat: return "memory_format";
  }
  return "unknown";
}

FieldValue field_from_python(py::handle value, FieldType type, std::string_view where) {
  if (value.is_none()) return None{};
  switch (type.kind) {
    case FieldKind::Tensor: return tensor_from_python(value, where);
    case FieldKind::TensorList: return list_from_python<Tensor>(value, where, tensor_from_python);
    case FieldKind::OptionalTensorList:
      return list_from_python<OptionalTensor>(value, where, optional_tensor_from_python);
    case FieldKind::Int: return int_from_python(value, where);
    case FieldKind::IntList:
    case FieldKind::Sizes: return int_list_from_python(value, where);
    case FieldKind::Float: return float_from_python(value, where);
    case FieldKind::Bool: return bool_from_python(value, where);
    case FieldKind::Scalar: return scalar_from_python(value, where);
    case FieldKind::String: return string_from_python(value, where);
    case FieldKind::DType: return dtype_from_python(value, where);
    case FieldKind::Layout: return layout_from_python(value, where);
    case FieldKind::TensorOptions: return value_from_python<TensorOptions>(value, where, "TensorOptions or a dict");
    case FieldKind::TensorGeometry:
      return value_from_python<TensorGeometry>(value, where, "TensorGeometry or a dict");
    case FieldKind::TypeAndSize: return value_from_python<TypeAndSize>(value, where, "TypeAndSize or a dict");
    case FieldKind::DTypeList: return list_from_python<DType>(value, where, dtype_from_python);
    case FieldKind::SizesList: return list_from_python<IntList>(value, where, int_list_from_python);
    case FieldKind::BoolList: {
      std::vector<bool> bits;
      for (bool bit : list_from_python<bool>(value, where, bool_from_python)) bits.push_back(bit);
      return bits;
    }
    case FieldKind::Device: {
      const std::string name = string_from_python(py::str(value), where);
      if (name.starts_with("cuda")) return Device::CUDA;
      check(name == "cpu", where, ": a device 'cpu' or 'cuda', got '", name, "'");
      return Device::CPU;
    }
    case FieldKind::MemoryFormat: {
      const std::string name = string_from_python(py::str(value), where);
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::Preserve, MemoryFormat::ChannelsLast,
                                  MemoryFormat::ChannelsLast3d}) {
        if (name == memory_format_name(format) || name == "torch." + memory_format_name(format)) return format;
      }
      fail(fmt::format("{}: a memory format (contiguous_format, ...), got '{}'", where, name));
    }
  }
  fail(fmt::format("{}: unknown field kind", where));
}

py::object field_to_python(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, None>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, Tensor>) {
          return tensor_to_python(v);
        } else if constexpr (std::is_same_v<T, TensorList>) {
          py::list list;
          for (const Tensor& tensor : v) list.append(tensor_to_python(tensor));
          return list;
        } else if constexpr (std::is_same_v<T, std::vector<OptionalTensor>>) {
          return grads_to_python(v);
        } else if constexpr (std::is_same_v<T, Scalar>) {
          return scalar_to_python(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          return py::str(dtype_name(v));
        } else if constexpr (std::is_same_v<T, Layout>) {
          return py::str(layout_short_name(v));
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          py::list list;
          for (DType dtype : v) list.append(dtype_name(dtype));
          return list;
        } else if constexpr (std::is_same_v<T, Device>) {
          return py::str(device_name(v));
        } else if constexpr (std::is_same_v<T, MemoryFormat>) {
          return py::str(memory_format_name(v));
        } else {
          return py::cast(v);  // numbers, strings, int and bool lists and the bound value classes
        }
      },
      value);
}

std::vector<std::pair<std::string, FieldValue>> saved_fields_from_python(py::handle fields, const NodeSchema& schema,
                                                                         bool copy_slices,
                                                                         std::string_view where) {
  check(py::isinstance<py::dict>(fields), where, ": saved fields must be a dict {name: value}, got ",
        python_type_name(fields));
  std::vector<std::pair<std::string, FieldValue>> saved;
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(fields)) {
    const std::string name = string_from_python(key, where);
    const std::string field_where = fmt::format("{}: saved field '{}'", where, name);
    if (copy_slices && (name == "base" || name == "view")) {
      saved.emplace_back(name, field_from_python(value, {FieldKind::TensorGeometry}, field_where));
      continue;
    }
    const auto found = std::find_if(schema.saved.begin(), schema.saved.end(),
                                    [&](const SavedFieldSchema& field) { return field.name == name; });
    if (found == schema.saved.end()) {
      std::string expected;
      for (const SavedFieldSchema& field : schema.saved) expected += (expected.empty() ? "" : ", ") + field.name;
      fail(fmt::format("{}: {} has no saved field '{}' (its fields: {})", where, schema.name, name,
                       expected.empty() ? "none" : expected));
    }
    saved.emplace_back(name, field_from_python(value, found->type, field_where));
  }
  return saved;
}

}  // namespace refgrad::python
