// L3: the interpreter. A Machine runs a bound program one instruction at a
// time: run() to the end, step() one instruction, run_until() a breakpoint.
// Stepping never changes numerics: the same program and inputs give the same
// bits whether run or stepped.
//
//   Machine machine(bind(load_bundle("mlp.safetensors")));
//   machine.set_grad("loss", ones({}));
//   machine.run();
//   Tensor w1 = *machine.leaf_grad("W1");
//
// Registers hold a tensor, an undefined tensor (`none`), or nothing (not yet
// computed, or freed after its last use). Liveness is computed when the
// machine is made; a register is freed right after the instruction that
// uses it last, unless MachineOptions::keep_values asks to keep every value
// (the debugger and divergence localization read them all).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "refgrad/bytecode.hpp"
#include "refgrad/program.hpp"

namespace refgrad {

// ------------------------------------------------------------------- host ---

// Host functions a program calls by name (`hook &name`, `call_backward &name`).
// Hooks return nullopt for "unchanged" (Python's None); an undefined gradient
// is passed as an undefined Tensor (nullopt in Grads). The machine looks each
// one up when it is made; one the host lacks raises when its instruction runs.
using TensorPreHook = std::function<std::optional<Tensor>(const Tensor& grad)>;
using PreHook = std::function<std::optional<Grads>(const Grads& grad_outputs)>;
using PostHook = std::function<std::optional<Grads>(const Grads& grad_inputs, const Grads& grad_outputs)>;
// A post-accumulate-grad hook gets the leaf's .grad and may replace or clear it (nullopt: None), as
// a Python hook may assign param.grad (an optimizer step in backward sets it to None).
using PostAccGradHook = std::function<void(const std::string& leaf, std::optional<Tensor>& grad)>;
// An autograd.Function's backward: ctx's saved tensors, needs_input_grad, the grads.
using BackwardFunction =
    std::function<Grads(const std::vector<Tensor>& saved, const Need& need, const Grads& grads)>;

struct Host {
  std::map<std::string, TensorPreHook, std::less<>> tensor_pre_hooks;
  std::map<std::string, PreHook, std::less<>> pre_hooks;
  std::map<std::string, PostHook, std::less<>> post_hooks;
  std::map<std::string, PostAccGradHook, std::less<>> post_acc_grad_hooks;
  std::map<std::string, BackwardFunction, std::less<>> functions;
};

// ------------------------------------------------------------------ trace ---

struct ValueInfo {
  bool defined = false;       // false: an undefined tensor (none) or `_`
  TensorType type;            // when defined
};

struct TraceEntry {
  std::size_t pc = 0;
  std::string text;                    // the instruction, as print_instruction writes it
  std::vector<ValueInfo> inputs;       // operands
  std::vector<ValueInfo> outputs;      // results
  std::chrono::nanoseconds time{0};
};

// ---------------------------------------------------------------- options ---

// Rounding noise for the check rule's sensitivity runs: each instruction runs under a RoundingNoiseScope
// (tensor.hpp) of eps = scale times unit_roundoff[pc], the unit roundoff of the dtype that instruction
// computes in as captured, and a stream drawn from seed and pc. See rounding_noise_of.
struct RoundingNoise {
  std::uint64_t seed = 0;
  double scale = 1.0;
  std::vector<double> unit_roundoff;  // one per instruction
  // By pc, the validates that cast a grad to a narrower dtype in the run as captured (float32 to float16
  // under autocast), with that dtype per result (nullopt: no cast). Those results round once more: by up to
  // scale times the dtype's unit roundoff and, near 0, by up to scale times half its smallest subnormal
  // (float16's 2^-25: a float32 grad of 6e-9 becomes 0). Empty without a trace of that run.
  std::map<std::size_t, std::vector<std::optional<DType>>> casts;
};

struct MachineOptions {
  bool keep_values = false;   // keep every register (no freeing after last use)
  bool trace = false;         // record a TraceEntry per instruction
  bool check_finite = false;  // stop with an error at the first instruction whose result (or the leaf
                              // .grad it updates) has NaN or Inf; that result is not kept
  // The most bytes one tensor an instruction makes may hold (memory_limit() in tensor.hpp): a larger
  // register or primitive output raises an error naming the instruction and the shape, before it is
  // allocated. nullopt: the limit in effect where the machine runs (default_memory_limit(), the
  // machine's physical memory, unless a MemoryLimitScope says otherwise).
  std::optional<std::size_t> memory_limit = std::nullopt;
  // Run every instruction with this rounding noise (the program's size must match); nullopt: none.
  std::optional<RoundingNoise> rounding_noise = std::nullopt;
  // The threads its kernels use (num_threads() in tensor.hpp); nullopt: the count in effect where it runs
  // (set_num_threads, default every core). Results are the same bits for any count.
  std::optional<int> threads = std::nullopt;
};

// Runs a float32 program in float64: every f32 in declarations, metadata and
// dtype-valued saved fields becomes f64, and every f32 tensor is converted.
// The oracle's "reference precision" (DESIGN.md, Numbers and precision).
Program promote_to_float64(const Program& program);
TensorMap promote_to_float64(const TensorMap& tensors);

// promote_to_float64, with every floating or complex value the program starts from (saved values,
// incoming grads, leaves' grads: inline, or the bundle's tensors by name) moved by up to `scale` roundings
// of its own dtype: each real number x of it (a complex one's parts apart) becomes x (1 + u scale eps),
// eps the unit roundoff of the value's dtype as written (float32 2^-24, float16 2^-11, bfloat16 2^-8,
// float64 2^-53), u uniform on [-1, 1], drawn from `seed`, the value's name ("$x", "%g0", "@w") and the
// number's index (the same u at every scale). Multiplying keeps zeros and signs. The values `held` names
// (sigiled: "$n1_result") are promoted and not moved (saved_values_broken_by_moving says which need it).
Program perturbed_to_float64(const Program& program, std::uint64_t seed, double scale = 1.0,
                             const std::set<std::string>& held = {});
TensorMap perturbed_to_float64(const TensorMap& tensors, std::uint64_t seed, double scale = 1.0,
                               const std::set<std::string>& held = {});

// The rounding noise of `program` as captured (before promote_to_float64): an instruction's unit roundoff is
// the largest of the dtypes it reads or makes (the saved values and grads it reads, the types its results are
// validated to, the leaf it accumulates into); one that names none takes the largest of the program's
// declared dtypes. Run with perturbed_to_float64's program at the same seed and scale, every rounding a
// computation of the program in its own dtypes makes, inside nodes too, moves the exact result: where a
// node's formula cancels exactly (layer_norm's input gradient sums to 0 over a row, for any values), that
// is the only noise that shows how far a correct computation in float32 lands from 0.
// `as_captured`, the trace of a run of the program as captured (MachineOptions::trace), says which validates
// cast to a narrower dtype (RoundingNoise::casts); without it, none are known.
RoundingNoise rounding_noise_of(const Program& program, std::uint64_t seed, double scale = 1.0,
                                const std::vector<TraceEntry>& as_captured = {});

// How far a result moves when the values it comes from move by one rounding: `exact` from the float64
// run, `moved` from the run perturbed_to_float64 at scale 1, `moved_less` at scale 1 / ratio (same seed).
// The largest |moved - exact| among the numbers whose move is linear in the perturbation (ratio times the
// move gives between ratio / 2 and 2 ratio times the step) or quadratic (between ratio^2 / 2 and 2 ratio^2
// times: a result whose first derivative is 0 by structure, as layer_norm's gradient over equal values); a
// jump (a tie broken, a boundary crossed) is left out. It bounds from below the rounding noise of any computation of the result in those dtypes: the
// check rule's noise takes it (a gradient that cancels to ~0, as layer_norm's over equal values, has a
// large one). complex numbers count as their two parts; NaN and Inf are left out.
double linear_sensitivity(const Tensor& exact, const Tensor& moved, const Tensor& moved_less, double ratio);

// Whether `moved` holds a NaN or an Inf where `exact` (of its shape) holds a finite number: a sensitivity
// run broken by its moves (complex numbers count as their two parts; other shapes: false).
bool not_finite_where_finite(const Tensor& moved, const Tensor& exact);

// -------------------------------------------------------------- breakpoints ---

// Where run_until() stops: before an instruction at `pc`, before a call of
// `node` (a node, CopySlices' wrapped node, or an autograd.Function name), or
// after an instruction that produced a non-finite value.
struct Breakpoint {
  enum class Kind : std::uint8_t { Pc, Node, NonFinite };
  Kind kind = Kind::Pc;
  std::size_t pc = 0;
  std::string node;
  static Breakpoint at_pc(std::size_t pc) { return {Kind::Pc, pc, {}}; }
  static Breakpoint at_node(std::string node) { return {Kind::Node, 0, std::move(node)}; }
  static Breakpoint non_finite() { return {Kind::NonFinite, 0, {}}; }
};

// Why run_until() returned.
enum class StopReason : std::uint8_t { Finished, Breakpoint, NonFinite };

// ---------------------------------------------------------------- machine ---

class Machine {
 public:
  explicit Machine(BoundProgram program, Host host = {}, MachineOptions options = {});
  ~Machine();
  Machine(Machine&&) noexcept;
  Machine& operator=(Machine&&) noexcept;

  // Inputs, before the first step: an incoming grad by declared name (without
  // '%'); a leaf's .grad before the run (nullopt: None). Grads with a default
  // value need not be set; one with no value raises at the first instruction
  // that reads it. Types (dtype and sizes) are checked against the declarations.
  void set_grad(std::string_view name, const Tensor& value);
  void set_leaf_grad(std::string_view name, const std::optional<Tensor>& grad);

  // Execution. step() runs one instruction (raises at the end); run() runs to
  // the end; run_until() runs to the end or stops before a breakpoint's
  // instruction (after, for NonFinite); called again at the instruction it
  // stopped before, it runs that instruction first rather than stopping
  // again. An error raised by an instruction names it (pc and text), its
  // node and the shapes of its operands:
  //   instruction 1 (%1 = LogBackward0 %0  self=$x): LogBackward0: grad has
  //   shape [2,3] but self has shape [3]; operands: f32[2,3]
  // and the machine stays at that instruction, its state unchanged.
  void step();
  void run();
  StopReason run_until(const std::vector<Breakpoint>& breakpoints);
  StopReason run_until(const std::function<bool(const Machine&)>& stop_before);
  bool finished() const;
  void reset();  // back to pc 0 with the inputs set so far and leaves' initial .grad

  // State, readable at any time. Registers by name without '%': nullopt when
  // the register holds nothing (not computed yet, or freed); an undefined
  // Tensor for `none`.
  std::size_t pc() const;
  std::size_t size() const;                       // number of instructions
  std::string instruction_text(std::size_t pc) const;
  const Program& program() const;
  std::optional<Tensor> register_value(std::string_view name) const;
  std::vector<std::string> live_registers() const;  // names holding a value now, in definition order
  const Tensor& saved_value(std::string_view name) const;
  std::optional<Tensor> leaf_grad(std::string_view name) const;   // the leaf's .grad now
  std::optional<Tensor> output(std::string_view name) const;      // nullopt until written
  const std::vector<TraceEntry>& trace() const;
  // The largest number of register bytes held at once so far (for the bench's
  // flat-memory check).
  std::size_t peak_register_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The saved values (sigiled: "$n1_self", "$n1_result") of the nodes that moving the numbers a program starts
// from broke: the calls whose results `moved` (a finished run of perturbed_to_float64's program, keeping its
// values) has not finite where `exact` (the promote_to_float64 run of the same program, keeping its values)
// has them finite, though none of their operands is. Moving numbers one by one can break an equality the
// forward made exactly and a node relies on: amax's saved result is one of its saved input's numbers, and
// its backward sends the grad where the two are equal; moved apart, none is, and it divides 0 by 0. A
// sensitivity run holds these values still (perturbed_to_float64's `held`) and moves all the others.
std::set<std::string> saved_values_broken_by_moving(const Machine& exact, const Machine& moved);

// Runs a bound program to the end and returns leaf grads ("@w") and outputs
// ("^x") — the values a bundle's result set holds. `grads` by sigiled name
// ("%g0"), as TensorMap keys are.
TensorMap run_program(BoundProgram program, const TensorMap& grads = {}, Host host = {},
                      MachineOptions options = {});

}  // namespace refgrad
