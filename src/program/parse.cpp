// Placeholder: filled in by the parse work of issue 3.
#include "refgrad/bundle.hpp"
