// Small value types shared by programs, saved fields and the graph model:
// TensorType, InputMetadata, TensorOptions, TensorGeometry, TypeAndSize and
// SourceLocation. Each is built with keyword arguments and compares by value.
// Their list fields (sizes, strides) are copies: assign a whole list
// (`t.sizes = [2, 3]`), since `t.sizes.append(4)` changes only the copy.
#include <fmt/format.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "convert.hpp"

namespace refgrad::python {

namespace {

std::optional<std::string> optional_dtype_name(const std::optional<DType>& dtype) {
  if (!dtype) return std::nullopt;
  return dtype_name(*dtype);
}

std::optional<DType> optional_dtype(py::handle value, std::string_view where) {
  if (value.is_none()) return std::nullopt;
  return dtype_from_python(value, where);
}

TensorOptions make_options(py::handle dtype, py::handle device, py::handle layout, py::handle requires_grad) {
  TensorOptions options;
  options.dtype = optional_dtype(dtype, "TensorOptions.dtype");
  if (!device.is_none()) options.device = device_from_python(device, "TensorOptions.device");
  if (!layout.is_none()) options.layout = layout_from_python(layout, "TensorOptions.layout");
  if (!requires_grad.is_none()) options.requires_grad = requires_grad.cast<bool>();
  return options;
}

std::string options_repr(const TensorOptions& options) {
  std::vector<std::string> parts;
  if (options.dtype) parts.push_back(fmt::format("dtype='{}'", dtype_name(*options.dtype)));
  if (options.device) parts.push_back(fmt::format("device='{}'", device_name(*options.device)));
  if (options.layout) parts.push_back(fmt::format("layout='{}'", layout_short_name(*options.layout)));
  if (options.requires_grad) parts.push_back(fmt::format("requires_grad={}", *options.requires_grad ? "True" : "False"));
  return fmt::format("TensorOptions({})", fmt::join(parts, ", "));
}

void bind_tensor_type(py::module_& m) {
  py::class_<TensorType>(m, "TensorType", "A declared tensor type: dtype, sizes and device (\"f32[4,5]\").")
      .def(py::init([](py::handle dtype, py::handle sizes, py::handle device) {
             return TensorType{dtype_from_python(dtype, "TensorType.dtype"),
                               int_list_from_python(sizes, "TensorType.sizes"),
                               device_from_python(device, "TensorType.device")};
           }),
           py::arg("dtype") = "float32", py::arg("sizes") = py::tuple(), py::arg("device") = "cpu")
      .def_property(
          "dtype", [](const TensorType& t) { return dtype_name(t.dtype); },
          [](TensorType& t, py::handle v) { t.dtype = dtype_from_python(v, "TensorType.dtype"); })
      .def_property(
          "sizes", [](const TensorType& t) { return t.sizes; },
          [](TensorType& t, py::handle v) { t.sizes = int_list_from_python(v, "TensorType.sizes"); })
      .def_property(
          "device", [](const TensorType& t) { return device_name(t.device); },
          [](TensorType& t, py::handle v) { t.device = device_from_python(v, "TensorType.device"); })
      .def(py::self == py::self)
      .def("__str__", [](const TensorType& t) { return to_string(t); })
      .def("__repr__", [](const TensorType& t) { return fmt::format("<TensorType {}>", to_string(t)); });
}

void bind_input_metadata(py::module_& m) {
  py::class_<InputMetadata>(m, "InputMetadata",
                            "What an edge records about the input it leads to; validate checks grads against it.\n"
                            "grad_dtype: ... (the default) is the dtype; None accepts a grad of any dtype.")
      .def(py::init([](py::handle dtype, py::handle shape, py::handle device, bool is_tensor_subclass,
                       py::handle grad_dtype) {
             InputMetadata metadata;
             metadata.dtype = dtype_from_python(dtype, "InputMetadata.dtype");
             metadata.shape = int_list_from_python(shape, "InputMetadata.shape");
             metadata.device = device_from_python(device, "InputMetadata.device");
             metadata.is_tensor_subclass = is_tensor_subclass;
             metadata.grad_dtype = grad_dtype.is(py::ellipsis()) ? std::optional<DType>(metadata.dtype)
                                                                 : optional_dtype(grad_dtype, "InputMetadata.grad_dtype");
             return metadata;
           }),
           py::arg("dtype") = "float32", py::arg("shape") = py::tuple(), py::arg("device") = "cpu",
           py::arg("is_tensor_subclass") = false, py::arg("grad_dtype") = py::ellipsis())
      .def_property(
          "dtype", [](const InputMetadata& t) { return dtype_name(t.dtype); },
          [](InputMetadata& t, py::handle v) { t.dtype = dtype_from_python(v, "InputMetadata.dtype"); })
      .def_property(
          "shape", [](const InputMetadata& t) { return t.shape; },
          [](InputMetadata& t, py::handle v) { t.shape = int_list_from_python(v, "InputMetadata.shape"); })
      .def_property(
          "device", [](const InputMetadata& t) { return device_name(t.device); },
          [](InputMetadata& t, py::handle v) { t.device = device_from_python(v, "InputMetadata.device"); })
      .def_readwrite("is_tensor_subclass", &InputMetadata::is_tensor_subclass)
      .def_property(
          "grad_dtype", [](const InputMetadata& t) { return optional_dtype_name(t.grad_dtype); },
          [](InputMetadata& t, py::handle v) { t.grad_dtype = optional_dtype(v, "InputMetadata.grad_dtype"); })
      .def(py::self == py::self)
      .def("__str__", [](const InputMetadata& t) { return to_string(t); })
      .def("__repr__", [](const InputMetadata& t) { return fmt::format("<InputMetadata {}>", to_string(t)); });
}

void bind_saved_value_types(py::module_& m) {
  py::class_<TensorOptions>(m, "TensorOptions", "The parts of c10::TensorOptions a backward formula reads.")
      .def(py::init(&make_options), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
           py::arg("layout") = py::none(), py::arg("requires_grad") = py::none())
      .def_property_readonly("dtype", [](const TensorOptions& o) { return optional_dtype_name(o.dtype); })
      .def_property_readonly("device",
                             [](const TensorOptions& o) -> py::object {
                               if (!o.device) return py::none();
                               return py::str(device_name(*o.device));
                             })
      .def_property_readonly("layout",
                             [](const TensorOptions& o) -> py::object {
                               if (!o.layout) return py::none();
                               return py::str(layout_short_name(*o.layout));
                             })
      .def_property_readonly("requires_grad", [](const TensorOptions& o) { return o.requires_grad; })
      .def(py::self == py::self)
      .def("__repr__", &options_repr);

  py::class_<TensorGeometry>(m, "TensorGeometry", "A tensor's sizes, strides and storage offset.")
      .def(py::init([](py::handle sizes, py::handle strides, std::int64_t storage_offset) {
             return TensorGeometry{int_list_from_python(sizes, "TensorGeometry.sizes"),
                                   int_list_from_python(strides, "TensorGeometry.strides"), storage_offset};
           }),
           py::arg("sizes"), py::arg("strides"), py::arg("storage_offset") = 0)
      .def_readonly("sizes", &TensorGeometry::sizes)
      .def_readonly("strides", &TensorGeometry::strides)
      .def_readonly("storage_offset", &TensorGeometry::storage_offset)
      .def(py::self == py::self)
      .def("__repr__", [](const TensorGeometry& g) {
        return fmt::format("TensorGeometry(sizes={}, strides={}, storage_offset={})", str(g.sizes), str(g.strides),
                           g.storage_offset);
      });

  py::class_<TypeAndSize>(m, "TypeAndSize", "A tensor's sizes and options (enough to make zeros like it).")
      .def(py::init([](py::handle sizes, const TensorOptions& options) {
             return TypeAndSize{int_list_from_python(sizes, "TypeAndSize.sizes"), options};
           }),
           py::arg("sizes"), py::arg("options") = TensorOptions{})
      .def_readonly("sizes", &TypeAndSize::sizes)
      .def_readonly("options", &TypeAndSize::options)
      .def(py::self == py::self)
      .def("__repr__", [](const TypeAndSize& t) {
        return fmt::format("TypeAndSize(sizes={}, options={})", str(t.sizes), options_repr(t.options));
      });
}

void bind_source_location(py::module_& m) {
  py::class_<SourceLocation>(m, "SourceLocation", "Where something was written: file, 1-based line and column.")
      .def_readonly("file", &SourceLocation::file)
      .def_readonly("line", &SourceLocation::line)
      .def_readonly("column", &SourceLocation::column)
      .def("__str__", [](const SourceLocation& w) { return fmt::format("{}:{}:{}", w.file, w.line, w.column); })
      .def("__repr__",
           [](const SourceLocation& w) { return fmt::format("<SourceLocation {}:{}:{}>", w.file, w.line, w.column); });
}

}  // namespace

void bind_values(py::module_& m) {
  bind_tensor_type(m);
  bind_input_metadata(m);
  bind_saved_value_types(m);
  bind_source_location(m);
}

}  // namespace refgrad::python
