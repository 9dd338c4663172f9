// libFuzzer harness for the binary bytecode loader. Random bytes almost never
// carry a valid CRC-32, so the harness reseals every input with a correct
// checksum first: that lets the fuzzer reach the bounds and index checks
// behind it. (Inputs shorter than the header are passed through as they are.)
// A file that loads must write back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "refgrad/bytecode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  refgrad::reseal_bytecode(bytes);
  refgrad::Bytecode bytecode;
  try {
    bytecode = refgrad::read_bytecode(bytes, "fuzz.rgbc");
  } catch (const refgrad::Error&) {
    return 0;
  }
  const std::string written = refgrad::write_bytecode(bytecode);
  if (written.size() != bytes.size() || std::memcmp(written.data(), bytes.data(), bytes.size()) != 0) {
    // Not every accepted file is canonical (e.g. unused pool entries could be
    // written differently), but reading what we wrote must round trip.
    const refgrad::Bytecode again = refgrad::read_bytecode(
        std::span(reinterpret_cast<const std::byte*>(written.data()), written.size()), "rewritten.rgbc");
    if (refgrad::write_bytecode(again) != written) __builtin_trap();
  }
  try {
    refgrad::disassemble(bytecode);
  } catch (const refgrad::Error&) {
  }
  return 0;
}
