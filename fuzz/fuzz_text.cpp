// libFuzzer harness for the text parser. Any input must either parse or raise
// refgrad::Error; a program that parses must print to text that parses back
// to the same program (the round-trip contract of program.hpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "refgrad/program.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  refgrad::Program program;
  try {
    program = refgrad::parse_program(text, "fuzz.bwd");
  } catch (const refgrad::Error&) {
    return 0;  // rejected with a message: what bad input should get
  }
  const std::string canonical = refgrad::print_program(program);
  const refgrad::Program again = refgrad::parse_program(canonical, "canonical.bwd");  // must not throw
  if (!(again == program) || refgrad::print_program(again) != canonical) __builtin_trap();
  refgrad::verify(program);  // the verifier must cope with anything the parser accepts
  return 0;
}
