// The text assembly: printer and parser (docs/program.md "Text syntax").
#include <doctest/doctest.h>

#include "random_program.hpp"
#include "refgrad/program.hpp"

using namespace refgrad;

TEST_CASE("text: random programs round trip through the text") {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    CAPTURE(seed);
    const Program program = testing::random_program(seed);
    const std::string text = print_program(program);
    CAPTURE(text);
    const Program parsed = parse_program(text);
    CHECK(parsed == program);
    CHECK(print_program(parsed) == text);
  }
}
