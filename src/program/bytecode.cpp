// Placeholder: filled in by the bytecode work of issue 3.
#include "refgrad/bundle.hpp"
