// Placeholder: filled in with its ops.
#include <doctest/doctest.h>
