// Placeholder: filled in by the bundle work of issue 3.
#include "refgrad/bundle.hpp"
