// Placeholder: filled in by the verify work of issue 3.
#include "refgrad/bundle.hpp"
