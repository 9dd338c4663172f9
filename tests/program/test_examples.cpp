// Placeholder: filled in by issue 3.
#include <doctest/doctest.h>
