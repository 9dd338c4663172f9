// bench_interpreter: what interpreting costs on top of the node calls
// themselves, measured in one run.
//
//   dispatch overhead  a chain of N = 20,000 MulBackward0 calls on 1-element
//                      tensors (each multiplies the grad by a saved constant),
//                      run by the Machine, against the same N calls made
//                      directly in C++ through NodeDef::apply, each with its
//                      instruction's own bound saved fields. (interpreted - direct) / N is the
//                      price of one instruction's dispatch: fetching operands,
//                      building the grads vector, freeing registers.
//                      Median of 5 runs of each, interleaved.
//   torch ratio        the same chain through torch.autograd.grad (y = x * c,
//                      20,000 times; backward only), as whole backward times:
//                      refgrad's interpreted time / torch's, median of 5 runs
//                      in one torch process.
//   peak memory        the largest number of register bytes held at once,
//                      for chains of 1,000 and 20,000 instructions: flat when
//                      registers are freed after their last use, growing
//                      with N under keep_values.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "refgrad/interpreter.hpp"

using namespace refgrad;

namespace {

constexpr std::size_t kChain = 20000;
constexpr int kRuns = 5;

// x -> x * c -> ... : the backward is N MulBackward0 calls, each needing only
// the grad of `self` (need=[1,0]), so only `other` ($c) is saved.
Program chain_program(std::size_t length) {
  std::string text = "program chain\n  grad %g0 : f32[1]\n  saved $c : f32[1] = [1.0001]\n  leaf @x : f32[1]\ncode\n";
  for (std::size_t i = 0; i < length; ++i) {
    text += fmt::format("  %g{}, _ = MulBackward0 %g{}  other=$c other_scalar_type=f32 self=none "
                        "self_scalar_type=f32 need=[1,0]\n",
                        i + 1, i);
  }
  text += fmt::format("  accumulate_grad @x %g{}\n", length);
  return parse_program(text, "chain.bwd");
}

double seconds_of(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// torch's time for the same chain's backward, median of kRuns, from one
// python process (bench/torch_chain.py). Nullopt when torch is not there.
std::optional<double> torch_backward_seconds() {
  const char* python = std::getenv("REFGRAD_TORCH_PYTHON");
  const std::string command =
      fmt::format("{} bench/torch_chain.py {} {}", python ? python : ".venv/bin/python", kChain, kRuns);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  double seconds = 0;
  const bool read = std::fscanf(pipe, "%lf", &seconds) == 1;
  if (pclose(pipe) != 0 || !read) return std::nullopt;
  return seconds;
}

}  // namespace

int main() {
  const Tensor grad = ones({1});
  BoundProgram bound = bind(assemble(chain_program(kChain)));
  Machine machine(bound);
  machine.set_grad("g0", grad);

  // The direct calls: each instruction's node with its own bound saved
  // fields (as the machine reads them), without the machine.
  const Need need{true, false};
  auto direct = [&] {
    Grads grads{grad};
    for (std::size_t i = 0; i < kChain; ++i) {
      const BoundCall& call = bound.calls[i];
      grads = {call.node->apply(grads, call.saved.get(), need)[0]};
    }
    if (!grads[0]) std::abort();
  };
  auto interpreted = [&] {
    machine.reset();
    machine.run();
  };

  direct();  // warm up both
  interpreted();
  std::vector<double> direct_seconds, interpreted_seconds;
  for (int run = 0; run < kRuns; ++run) {
    direct_seconds.push_back(seconds_of(direct));
    interpreted_seconds.push_back(seconds_of(interpreted));
  }
  const double direct_median = median(direct_seconds), interpreted_median = median(interpreted_seconds);
  const double overhead_ns = (interpreted_median - direct_median) / kChain * 1e9;
  fmt::print("chain of {} MulBackward0 calls on 1-element tensors, median of {} runs each\n", kChain, kRuns);
  fmt::print("  direct C++ calls        {:8.3f} ms\n", direct_median * 1e3);
  fmt::print("  interpreted (Machine)   {:8.3f} ms   ratio {:.2f}\n", interpreted_median * 1e3,
             interpreted_median / direct_median);
  fmt::print("  dispatch overhead       {:8.1f} ns per instruction (target <= 100 ns)\n", overhead_ns);

  if (const std::optional<double> torch_seconds = torch_backward_seconds()) {
    fmt::print("  torch.autograd.grad     {:8.3f} ms   refgrad / torch = {:.2f}\n", *torch_seconds * 1e3,
               interpreted_median / *torch_seconds);
  } else {
    fmt::print("  torch.autograd.grad     not measured: no torch (set REFGRAD_TORCH_PYTHON)\n");
  }

  fmt::print("peak register bytes (1-element float32 registers)\n");
  for (bool keep : {false, true}) {
    for (std::size_t length : {std::size_t{1000}, kChain}) {
      Machine chain(bind(assemble(chain_program(length))), {}, MachineOptions{.keep_values = keep});
      chain.set_grad("g0", grad);
      chain.run();
      fmt::print("  {:>6} instructions, keep_values={:<5}  {:>8} bytes\n", length, keep, chain.peak_register_bytes());
    }
  }
  return 0;
}
