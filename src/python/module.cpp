// refgrad._refgrad: the C++ core seen from Python. Each part is bound in its
// own file: bind_tensor.cpp (Tensor <-> NumPy, torch), bind_values.cpp
// (TensorType, InputMetadata, ...), bind_program.cpp (Program, Bundle, the
// node registry), bind_machine.cpp (Machine, run_program) and bind_graph.cpp
// (functionalize); convert.cpp holds the conversions they share. The package
// refgrad/ (pure Python) re-exports it and adds the graph model.
#include "convert.hpp"
#include "refgrad/version.hpp"

PYBIND11_MODULE(_refgrad, m) {
  namespace py = pybind11;
  using namespace refgrad::python;
  m.doc() = "refgrad's C++ core";
  m.attr("__version__") = refgrad::version;

  // refgrad::Error -> refgrad.Error, with the same message. A RuntimeError,
  // so `except RuntimeError` code written for torch catches it too.
  // The class is made with the C API and its reference kept for the life of
  // the process: a static py::exception would drop it after the interpreter
  // is gone.
  error_class = PyErr_NewExceptionWithDoc(
      "refgrad.Error", "An error refgrad reports: bad input, a failing instruction, an unreadable file.",
      PyExc_RuntimeError, nullptr);
  if (error_class == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(error_class));
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) std::rethrow_exception(raised);
    } catch (const refgrad::Error& e) {
      set_error(e.what());
    }
  });

  bind_tensor(m);
  bind_values(m);
  bind_program(m);
  bind_machine(m);
  bind_graph(m);
}
