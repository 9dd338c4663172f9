// refgrad._refgrad: the C++ core seen from Python. For now it only reports
// the version; the bindings (Tensor, Program, Machine, the PyTorch bridge)
// come with the Python-package issue.
#include <pybind11/pybind11.h>

#include "refgrad/version.hpp"

PYBIND11_MODULE(_refgrad, m) {
  m.doc() = "refgrad's C++ core";
  m.attr("__version__") = refgrad::version;
}
