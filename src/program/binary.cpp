// Placeholder: filled in by the binary work of issue 3.
#include "refgrad/bundle.hpp"
