// Conversions between Python values and refgrad's C++ values, shared by the
// bind_*.cpp files.
//
// One rule throughout: an undefined tensor (C++'s `none`, PyTorch's None
// grad) is Python's None. Small enums travel as the strings PyTorch and the
// program text use ("float32", "strided", "cpu"), so that Python code can
// write them plainly. A value of the wrong kind raises refgrad.Error naming
// where it was found ("GraphNode MulBackward0: saved field 'self': ...").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "refgrad/graph.hpp"
#include "refgrad/interpreter.hpp"
#include "refgrad/nodes.hpp"

// Shape and IntList (a boost::container::small_vector) cross to and from Python
// as a list of ints, as a std::vector would. Every binding file includes this
// header, so they all see the same conversion.
namespace pybind11::detail {
template <>
struct type_caster<refgrad::IntList> : list_caster<refgrad::IntList, std::int64_t> {};
}  // namespace pybind11::detail
#include "refgrad/program.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::python {

namespace py = pybind11;

// ------------------------------------------------------------- registration ---

void bind_tensor(py::module_& m);
void bind_values(py::module_& m);  // TensorType, InputMetadata, TensorOptions, ... (bind_values.cpp)
void bind_program(py::module_& m);
void bind_machine(py::module_& m);
void bind_graph(py::module_& m);

// refgrad.Error, set by module.cpp once the exception class exists.
extern PyObject* error_class;

// Sets refgrad.Error with `message` as the pending Python exception. A
// message that quotes bad input may hold invalid UTF-8 (a parse error on a
// cut multibyte character): those bytes are shown as \xNN escapes.
void set_error(const std::string& message);

// Raises refgrad.Error with `message` and `cause` as its __cause__ (the
// Python exception a hook raised). Never returns.
[[noreturn]] void raise_error_from(const std::string& message, const py::object& cause);

// ------------------------------------------------------------- small enums ---

// "float32", "f32", "torch.float32", torch.float32, numpy.dtype("float32").
DType dtype_from_python(py::handle value, std::string_view where);
Device device_from_python(py::handle value, std::string_view where);  // "cpu", "cuda", "cuda:0", torch.device
Layout layout_from_python(py::handle value, std::string_view where);  // "strided", "torch.strided", torch.strided
std::string layout_short_name(Layout layout);                           // "strided"
std::string python_type_name(py::handle value);                        // "int", "numpy.ndarray", ...
std::string str_of(py::handle value);                                   // Python's str(value)

// ----------------------------------------------------------------- tensors ---

// Wraps a NumPy array (or any object with the buffer protocol) without
// copying when refgrad can address its memory (native byte order,
// non-negative strides that are whole elements, aligned); otherwise copies it
// into such an array first. The tensor's storage holds the buffer, so the
// array stays alive and cannot be resized under it.
//
// Arrays are read through the buffer protocol, not pybind11's numpy.h: the
// pybind11 found by meson (Debian's 2.10) reads NumPy 1's struct layouts,
// which NumPy 2 changed.
Tensor tensor_from_numpy(py::handle array);
// A read-only NumPy view of the tensor's memory (refgrad never writes into a
// tensor once made, and values are shared between registers and .grads, so
// a writable view could change a result behind the interpreter's back).
py::object tensor_to_numpy(const Tensor& tensor);

// A refgrad.Tensor, a NumPy array (or anything numpy.asarray takes), or a
// torch.Tensor, as a Tensor. Raises naming `where` for None.
Tensor tensor_from_python(py::handle value, std::string_view where);
// As tensor_from_python, with None as nullopt.
std::optional<Tensor> optional_tensor_from_python(py::handle value, std::string_view where);
// A defined tensor as refgrad.Tensor, an undefined one as None.
py::object tensor_to_python(const Tensor& tensor);
py::object tensor_to_python(const std::optional<Tensor>& tensor);

Grads grads_from_python(py::handle values, std::string_view where);  // a sequence of tensors or None
py::list grads_to_python(const Grads& grads);

TensorMap tensor_map_from_python(py::handle values, std::string_view where);  // {name: tensor}
py::dict tensor_map_to_python(const TensorMap& tensors);

std::int64_t int_from_python(py::handle value, std::string_view where);
IntList int_list_from_python(py::handle value, std::string_view where);
std::string string_from_python(py::handle value, std::string_view where);
// Any sequence but a string: a str is a sequence of characters, never what was meant.
py::sequence sequence_from_python(py::handle value, std::string_view where);
// Each item of a sequence read by `read(item, "where[i]")`.
template <class Item, class Read>
std::vector<Item> list_from_python(py::handle value, std::string_view where, const Read& read) {
  std::vector<Item> items;
  const py::sequence sequence = sequence_from_python(value, where);
  for (std::size_t i = 0; i < sequence.size(); ++i) items.push_back(read(sequence[i], fmt::format("{}[{}]", where, i)));
  return items;
}

// ------------------------------------------------------------ saved fields ---

// A saved field's Python value read as the schema's kind says: a Python int
// for an Int field, "float32" for a DType field, a dict or TensorGeometry for
// a TensorGeometry field, ... None is None{} for any kind (whether None is
// allowed is the node's bind() to say, with its own message).
FieldValue field_from_python(py::handle value, FieldType type, std::string_view where);
py::object field_to_python(const FieldValue& value);
std::string kind_name(FieldKind kind);  // "tensor", "int_list", ...

// A node's saved fields from a {name: value} mapping, each read with its
// schema type; names the schema lacks raise. `copy_slices` adds CopySlices'
// own `base` and `view` (TensorGeometry) before the wrapped node's fields.
std::vector<std::pair<std::string, FieldValue>> saved_fields_from_python(py::handle fields, const NodeSchema& schema,
                                                                         bool copy_slices,
                                                                         std::string_view where);

}  // namespace refgrad::python
