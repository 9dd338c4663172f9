// Placeholder: filled in by the safetensors work of issue 3.
#include "refgrad/bundle.hpp"
