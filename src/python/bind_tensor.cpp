// refgrad.Tensor: NumPy and torch in, NumPy and torch out.
//
//   t = refgrad.Tensor.from_numpy(a)   # shares a's memory (copies only what refgrad cannot address)
//   np.asarray(t), t.numpy()           # read-only views of t's memory (buffer protocol)
//   refgrad.Tensor.from_torch(x)       # shares x's memory, through x.detach().numpy()
//   t.torch()                          # a copy: torch tensors are writable, refgrad's are not
#include <fmt/format.h>
#include <pybind11/stl.h>

#include "convert.hpp"

namespace refgrad::python {

namespace {

std::string buffer_format(DType dtype) {
  switch (dtype) {
    case DType::Bool: return py::format_descriptor<bool>::format();
    case DType::UInt8: return py::format_descriptor<std::uint8_t>::format();
    case DType::Int8: return py::format_descriptor<std::int8_t>::format();
    case DType::Int16: return py::format_descriptor<std::int16_t>::format();
    case DType::Int32: return py::format_descriptor<std::int32_t>::format();
    case DType::Int64: return py::format_descriptor<std::int64_t>::format();
    case DType::UInt16: return py::format_descriptor<std::uint16_t>::format();
    case DType::UInt32: return py::format_descriptor<std::uint32_t>::format();
    case DType::UInt64: return py::format_descriptor<std::uint64_t>::format();
    case DType::Float16: return "e";
    case DType::BFloat16: return py::format_descriptor<std::uint16_t>::format();  // NumPy has none: the bits
    case DType::Float32: return py::format_descriptor<float>::format();
    case DType::Float64: return py::format_descriptor<double>::format();
    case DType::ComplexHalf: return py::format_descriptor<std::int32_t>::format();  // NumPy has none: the bits
    case DType::ComplexFloat: return "Zf";
    case DType::ComplexDouble: return "Zd";
  }
  fail("Tensor: unknown dtype");
}

py::buffer_info buffer_of(const Tensor& tensor) {
  const auto itemsize = static_cast<py::ssize_t>(element_size(tensor.dtype()));
  std::vector<py::ssize_t> sizes, strides;
  for (std::int64_t d = 0; d < tensor.dim(); ++d) {
    sizes.push_back(static_cast<py::ssize_t>(tensor.size(d)));
    strides.push_back(static_cast<py::ssize_t>(tensor.stride(d)) * itemsize);
  }
  return py::buffer_info(tensor.raw_data(), itemsize, buffer_format(tensor.dtype()),
                         static_cast<py::ssize_t>(tensor.dim()), sizes, strides, /*readonly=*/true);
}

py::tuple tuple_of(const Shape& values) {
  py::tuple tuple(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) tuple[i] = py::int_(values[i]);
  return tuple;
}

py::object to_torch(const Tensor& tensor) {
  const py::object copy = py::module_::import("numpy").attr("array")(tensor_to_numpy(tensor));
  const py::object torch = py::module_::import("torch");
  const py::object result = torch.attr("from_numpy")(copy);
  // A bfloat16 tensor's NumPy array holds its bits as uint16, a complex32 one's as int32.
  if (tensor.dtype() == DType::BFloat16) return result.attr("view")(torch.attr("bfloat16"));
  if (tensor.dtype() == DType::ComplexHalf) return result.attr("view")(torch.attr("complex32"));
  return result;
}

// The one complex element of a tensor, read as complex128.
std::complex<double> complex_item(const Tensor& tensor) {
  const Tensor wide = tensor.to(DType::ComplexDouble).contiguous();
  return *static_cast<const std::complex<double>*>(wide.raw_data());
}

py::object item_of(const Tensor& tensor) {
  check(tensor.numel() == 1, "Tensor.item: a tensor with ", tensor.numel(), " elements cannot be one number");
  switch (tensor.dtype()) {
    case DType::Bool: return py::bool_(tensor.item<bool>());
    case DType::ComplexHalf:
    case DType::ComplexFloat:
    case DType::ComplexDouble: {
      const auto value = complex_item(tensor);
      return py::module_::import("builtins").attr("complex")(value.real(), value.imag());
    }
    default:
      if (is_integral(tensor.dtype(), false)) {
        if (tensor.dtype() == DType::UInt64) return py::int_(tensor.item<std::uint64_t>());
        return py::int_(tensor.item<std::int64_t>());
      }
      return py::float_(tensor.item<double>());
  }
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(),
                     "A refgrad tensor: a strided view of a CPU buffer, of dtype bool, int64, float32 or float64.\n"
                     "Made by Tensor.from_numpy / Tensor.from_torch; read with numpy(), np.asarray(t) or torch().")
      .def_buffer(&buffer_of)
      .def_static("from_numpy", &tensor_from_numpy, py::arg("array"),
                  "A tensor that shares the array's memory (a copy only when the array is byte-swapped, "
                  "misaligned or has negative strides). Changing the array changes the tensor.")
      .def_static(
          "from_torch", [](py::handle tensor) { return tensor_from_python(tensor, "Tensor.from_torch"); },
          py::arg("tensor"), "A tensor that shares a CPU torch tensor's memory (detached; others are copied to CPU).")
      .def("numpy", &tensor_to_numpy, "A read-only NumPy view of the tensor's memory.")
      .def("torch", &to_torch, "A torch tensor with a copy of the values.")
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_name(t.dtype()); })
      .def_property_readonly("device", [](const Tensor& t) { return device_name(t.device()); })
      .def_property_readonly("shape", [](const Tensor& t) { return tuple_of(t.sizes()); })
      .def("size", [](const Tensor& t) { return tuple_of(t.sizes()); })
      .def("stride", [](const Tensor& t) { return tuple_of(t.strides()); }, "Strides in elements, as torch's.")
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("item", &item_of)
      .def("tolist", [](const Tensor& t) { return tensor_to_numpy(t).attr("tolist")(); })
      .def(
          "to", [](const Tensor& t, py::handle dtype) { return t.to(dtype_from_python(dtype, "Tensor.to")); },
          py::arg("dtype"))
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("__len__",
           [](const Tensor& t) {
             check(t.dim() > 0, "len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__repr__", &Tensor::repr);

  m.def(
      "allclose",
      [](py::handle a, py::handle b, double rtol, double atol, bool equal_nan) {
        return allclose(tensor_from_python(a, "allclose: a"), tensor_from_python(b, "allclose: b"), rtol, atol,
                        equal_nan);
      },
      py::arg("a"), py::arg("b"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8, py::arg("equal_nan") = false,
      "torch.allclose: |a - b| <= atol + rtol * |b| elementwise, with broadcasting.");
  m.def(
      "equal",
      [](py::handle a, py::handle b) {
        return equal(tensor_from_python(a, "equal: a"), tensor_from_python(b, "equal: b"));
      },
      py::arg("a"), py::arg("b"), "torch.equal: same sizes and same values.");
}

}  // namespace refgrad::python
