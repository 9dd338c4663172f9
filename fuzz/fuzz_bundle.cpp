// libFuzzer harness for the bundle loader: safetensors header (JSON), tensor
// ranges, metadata and the program text inside. A bundle that loads must
// write back to a bundle that loads to the same program and tensors.
#include <cstddef>
#include <cstdint>
#include <span>

#include "refgrad/bundle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span bytes(reinterpret_cast<const std::byte*>(data), size);
  refgrad::Bundle bundle;
  try {
    bundle = refgrad::read_bundle(bytes, "fuzz.safetensors");
  } catch (const refgrad::Error&) {
    return 0;
  }
  const std::string written = refgrad::write_bundle(bundle);
  const refgrad::Bundle again =
      refgrad::read_bundle(std::span(reinterpret_cast<const std::byte*>(written.data()), written.size()), "rewritten");
  if (!(again.program == bundle.program) || again.tensors.size() != bundle.tensors.size()) __builtin_trap();
  for (const auto& [name, tensor] : bundle.tensors) {
    auto found = again.tensors.find(name);
    if (found == again.tensors.end() || !refgrad::same_tensor(found->second, tensor)) __builtin_trap();
  }
  try {
    refgrad::bind(bundle);
  } catch (const refgrad::Error&) {
  }
  return 0;
}
