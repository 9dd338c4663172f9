// Placeholder: filled in by the print work of issue 3.
#include "refgrad/bundle.hpp"
