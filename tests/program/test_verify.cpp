// The verifier: one small bad program per rule, with the exact message
// (docs/program.md, "The verifier"), clean programs with no diagnostics, and
// the warnings. Each case starts from docs/program.md's first program and
// changes one thing.
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "refgrad/program.hpp"

using namespace refgrad;

namespace {

using Regs = std::vector<std::optional<std::string>>;

TensorType f32(Shape sizes) { return TensorType{DType::Float32, std::move(sizes), Device::CPU}; }

InputMetadata meta(Shape sizes, DType dtype = DType::Float32) {
  InputMetadata metadata;
  metadata.dtype = dtype;
  metadata.shape = std::move(sizes);
  metadata.grad_dtype = dtype;
  return metadata;
}

Instr call(std::string node, Regs results, Regs operands, std::vector<Attr> attrs, std::vector<bool> need = {}) {
  Instr instr;
  instr.op = Opcode::Call;
  instr.node = std::move(node);
  if (need.empty()) need.assign(results.size(), true);
  instr.results = std::move(results);
  instr.operands = std::move(operands);
  instr.attrs = std::move(attrs);
  instr.need = std::move(need);
  return instr;
}

Instr validate(Regs results, Regs operands, std::vector<std::optional<InputMetadata>> metadata) {
  Instr instr;
  instr.op = Opcode::Validate;
  instr.results = std::move(results);
  instr.operands = std::move(operands);
  instr.metadata = std::move(metadata);
  return instr;
}

Instr add(std::optional<std::string> result, Regs operands) {
  Instr instr;
  instr.op = Opcode::Add;
  instr.results = {std::move(result)};
  instr.operands = std::move(operands);
  return instr;
}

Instr zeros(std::string result, std::optional<InputMetadata> type) {
  Instr instr;
  instr.op = Opcode::Zeros;
  instr.results = {std::move(result)};
  instr.metadata = {std::move(type)};
  return instr;
}

Instr accumulate_grad(std::string leaf, std::optional<std::string> grad) {
  Instr instr;
  instr.op = Opcode::AccumulateGrad;
  instr.target = std::move(leaf);
  instr.operands = {std::move(grad)};
  return instr;
}

Instr hook(std::string name, Regs results, Regs operands, std::string leaf = "") {
  Instr instr;
  instr.op = Opcode::Hook;
  instr.target = std::move(name);
  instr.results = std::move(results);
  instr.operands = std::move(operands);
  instr.leaf = std::move(leaf);
  return instr;
}

Instr call_backward(std::string function, Regs results, Regs operands, std::vector<Attr> attrs,
                    std::vector<bool> need) {
  Instr instr;
  instr.op = Opcode::CallBackward;
  instr.target = std::move(function);
  instr.results = std::move(results);
  instr.operands = std::move(operands);
  instr.attrs = std::move(attrs);
  instr.need = std::move(need);
  return instr;
}

Instr output(std::string name, std::optional<std::string> grad) {
  Instr instr;
  instr.op = Opcode::Output;
  instr.target = std::move(name);
  instr.operands = {std::move(grad)};
  return instr;
}

// docs/program.md's first program:
//   program mul
//     grad   %g : f32[3]
//     saved  $x : f32[3] = [1.0, 2.0, 3.0]
//     saved  $y : f32[3]
//     leaf   @x : f32[3]
//     leaf   @y : f32[3]
//   code
//     %0 = validate %g : f32[3]
//     %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
//     %3, %4 = validate %1, %2 : f32[3], f32[3]
//     accumulate_grad @y %4
//     accumulate_grad @x %3
Program mul_program() {
  Program program;
  program.name = "mul";
  program.grads = {GradDecl{"g", f32({3}), std::nullopt, {}}};
  program.saved = {SavedDecl{"x", f32({3}), tensor({1.0f, 2.0f, 3.0f}), {}},
                   SavedDecl{"y", f32({3}), std::nullopt, {}}};
  program.leaves = {LeafDecl{"x", f32({3}), std::nullopt, {}}, LeafDecl{"y", f32({3}), std::nullopt, {}}};
  program.code = {
      validate({"0"}, {"g"}, {meta({3})}),
      call("MulBackward0", {"1", "2"}, {"0"},
           {{"other", SavedRef{"y"}},
            {"other_scalar_type", DType::Float32},
            {"self", SavedRef{"x"}},
            {"self_scalar_type", DType::Float32}}),
      validate({"3", "4"}, {"1", "2"}, {meta({3}), meta({3})}),
      accumulate_grad("y", "4"),
      accumulate_grad("x", "3"),
  };
  return program;
}

// By move: g++ 12 at -O3 warns falsely (-Wrestrict) on `instr.target = "z"`.
void retarget(Instr& instr, std::string target) { instr.target = std::move(target); }

const char* const kMul = "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32";

// The diagnostics' texts, one per line (one string, so that a failure shows it).
std::string diagnostics_of(const Program& program) {
  std::string text;
  for (const Diagnostic& diagnostic : verify(program)) text += to_string(diagnostic) + "\n";
  return text;
}

std::string lines(const std::vector<std::string>& texts) {
  std::string text;
  for (const std::string& line : texts) text += line + "\n";
  return text;
}

struct Case {
  const char* rule;
  std::function<void(Program&)> change;  // applied to mul_program()
  std::vector<std::string> expected;     // to_string of each diagnostic, in order
};

void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const std::string rule = c.rule;
    CAPTURE(rule);
    Program program = mul_program();
    c.change(program);
    CHECK(diagnostics_of(program) == lines(c.expected));
  }
}

}  // namespace

TEST_CASE("verify: a clean program has no diagnostics") {
  CHECK(verify(mul_program()).empty());
}

// Every opcode, broadcasting validate, grad_dtype none, CopySlices, hooks of
// each kind, call_backward and an output, used as their rules allow.
TEST_CASE("verify: a clean program using every opcode has no diagnostics") {
  Program program;
  program.grads = {GradDecl{"g", f32({4, 3}), std::nullopt, {}}};
  program.saved = {SavedDecl{"y", f32({3}), std::nullopt, {}}, SavedDecl{"c", f32({2}), std::nullopt, {}}};
  program.leaves = {LeafDecl{"b", f32({3}), std::nullopt, {}}};
  program.hooks = {HookDecl{"twice", HookKind::TensorPre, {}}, HookDecl{"pre", HookKind::Pre, {}},
                   HookDecl{"post", HookKind::Post, {}}, HookDecl{"log", HookKind::PostAccGrad, {}}};
  program.functions = {FunctionDecl{"MyBackward", {}}};
  program.outputs = {OutputDecl{"y", f32({3}), {}}};
  InputMetadata any_dtype = meta({3});
  any_dtype.grad_dtype = std::nullopt;
  Instr copy_slices = call("MulBackward0", {"8", std::nullopt}, {"7"},
                           {{"base", TensorGeometry{{3}, {1}, 0}},
                            {"view", TensorGeometry{{3}, {1}, 0}},
                            {"other", SavedRef{"y"}},
                            {"other_scalar_type", DType::Float32},
                            {"self", None{}},
                            {"self_scalar_type", DType::Float32}},
                           {true, false});
  copy_slices.op = Opcode::CopySlices;
  program.code = {
      validate({"0"}, {"g"}, {meta({3})}),  // [4,3] sums to [3]
      hook("twice", {"1"}, {"0"}),
      hook("pre", {"2", "3"}, {"1", "0"}),
      zeros("4", meta({3})),
      add("5", {"2", "4"}),
      call_backward("MyBackward", {"6", std::nullopt}, {"5"}, {{"saved", std::vector<SavedRef>{{"c"}}}},
                    {true, false}),
      hook("post", {"7"}, {"6", "5"}),
      copy_slices,
      validate({"9"}, {"8"}, {any_dtype}),
      accumulate_grad("b", "9"),
      hook("log", {}, {}, "b"),
      output("y", "3"),
  };
  CHECK(diagnostics_of(program) == "");
}

TEST_CASE("verify: declarations") {
  check_cases({
      {"names of one kind are unique", [](Program& p) { p.grads.push_back(p.grads[0]); },
       {"error: grad %g is declared twice"}},
      {"hooks and functions share the & names",
       [](Program& p) {
         p.hooks = {HookDecl{"f", HookKind::Pre, {}}};
         p.functions = {FunctionDecl{"f", {}}};
       },
       {"error: function &f has the same name as hook &f"}},
      {"sizes are not negative", [](Program& p) { p.saved[1].type.sizes = {2, -3}; },
       {"error: saved $y has a negative size: f32[2,-3]"}},
      {"an inline value has the declared dtype", [](Program& p) { p.saved[0].value = tensor({1.0, 2.0, 3.0}, DType::Float64); },
       {"error: saved $x's value is f64[3], but the declaration says f32[3]"}},
      {"an inline .grad has the declared sizes", [](Program& p) { p.leaves[0].grad = tensor({1.0f, 2.0f}); },
       {"error: leaf @x's .grad is f32[2], but the declaration says f32[3]"}},
      {"an inline value is defined", [](Program& p) { p.grads[0].value = Tensor(); },
       {"error: grad %g's value is undefined; the declaration says f32[3]"}},
  });
}

TEST_CASE("verify: registers") {
  check_cases({
      {"a register is defined once", [](Program& p) { p.code.push_back(add("0", {"3", "4"})); },
       {"error: instruction 5 (%0 = add %3, %4): register %0 is already defined by instruction 0"}},
      {"a grad is a register definition", [](Program& p) { p.code.push_back(add("g", {"3", "4"})); },
       {"error: instruction 5 (%g = add %3, %4): register %g is already defined by grad %g"}},
      {"a register is defined before use",
       [](Program& p) { p.code.insert(p.code.begin(), add("5", {"0", "g"})); },
       {"error: instruction 0 (%5 = add %0, %g): register %0 is used before it is defined (by instruction 1)",
        "warning: instruction 0 (%5 = add %0, %g): result %5 is never used"}},
      {"a register is defined somewhere",
       [](Program& p) {
         p.outputs = {OutputDecl{"o", f32({3}), {}}};
         p.code.push_back(output("o", "nope"));
       },
       {"error: instruction 5 (output ^o %nope): register %nope is not defined"}},
      {"add takes registers, not none", [](Program& p) { p.code.push_back(add("5", {"3", std::nullopt})); },
       {"error: instruction 5 (%5 = add %3, none): operand 1 is none, but add takes registers",
        "warning: instruction 5 (%5 = add %3, none): result %5 is never used"}},
      {"add's result is a register", [](Program& p) { p.code.push_back(add(std::nullopt, {"3", "4"})); },
       {"error: instruction 5 (_ = add %3, %4): result 0 is _, but add must name a register"}},
      {"accumulate_grad takes a register, not none", [](Program& p) { p.code[4].operands[0] = std::nullopt; },
       {"error: instruction 4 (accumulate_grad @x none): operand 0 is none, but accumulate_grad takes registers",
        "warning: instruction 2 (%3, %4 = validate %1, %2 : f32[3], f32[3]): result %3 is never used"}},
  });
}

TEST_CASE("verify: call") {
  check_cases({
      {"the node is in the registry", [](Program& p) { p.code[1].node = "MulBackwards0"; },
       {"error: instruction 1 (%1, %2 = MulBackwards0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): backward node 'MulBackwards0' is not in the registry"}},
      {"one operand per incoming grad", [](Program& p) { p.code[1].operands.push_back("g"); },
       {std::string("error: instruction 1 (%1, %2 = MulBackward0 %0, %g  other=$y other_scalar_type=f32 self=$x "
                    "self_scalar_type=f32): MulBackward0 expects 1 operand, got 2")}},
      {"one result per input",
       [](Program& p) {
         p.code[1].results.push_back("5");
         p.code[1].need.push_back(true);
       },
       {"error: instruction 1 (%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): MulBackward0 expects 2 results, got 3",
        "error: instruction 1 (%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): need has 3 bits, but MulBackward0 has 2 inputs",
        "warning: instruction 1 (%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): result %5 is never used"}},
      {"one need bit per input", [](Program& p) { p.code[1].need = {false}; },
       {std::string("error: instruction 1 (") + kMul +
        " need=[0]): need has 1 bit, but MulBackward0 has 2 inputs"}},
      {"no result where the need bit is 0", [](Program& p) { p.code[1].need = {true, false}; },
       {std::string("error: instruction 1 (") + kMul +
        " need=[1,0]): result %2 is for input 'other', whose need bit is 0: PyTorch never computes it (write _)"}},
      {"_ where the need bit is 1 is a warning",
       [](Program& p) {
         p.code[1].results[1] = std::nullopt;
         p.code[2].operands[1] = std::nullopt;
       },
       {"warning: instruction 1 (%1, _ = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): result 1 (input 'other') is _ but its need bit is 1: computed and dropped"}},
      {"no unknown field", [](Program& p) { p.code[1].attrs.push_back({"alpha", Scalar(1)}); },
       {std::string("error: instruction 1 (") + kMul + " alpha=1): MulBackward0 has no field 'alpha'"}},
      {"no field twice", [](Program& p) { p.code[1].attrs.push_back({"self", SavedRef{"x"}}); },
       {std::string("error: instruction 1 (") + kMul + " self=$x): field 'self' is given twice"}},
      {"every field present", [](Program& p) { p.code[1].attrs.pop_back(); },
       {"error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x): field "
        "'self_scalar_type' is missing"}},
      {"each field of its kind", [](Program& p) { p.code[1].attrs[3].value = std::int64_t{6}; },
       {"error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=6): field 'self_scalar_type' expects ScalarType, got int"}},
      {"none only in an optional field", [](Program& p) { p.code[1].attrs[1].value = None{}; },
       {"error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=none self=$x "
        "self_scalar_type=f32): field 'other_scalar_type' expects ScalarType, got none"}},
      {"none in a Tensor? field is fine", [](Program& p) { p.code[1].attrs[0].value = None{}; },
       {"warning: saved $y is never referenced"}},
      {"a field names a declared saved tensor", [](Program& p) { p.code[1].attrs[2].value = SavedRef{"q"}; },
       {"error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$q "
        "self_scalar_type=f32): field 'self' names $q, which is not declared",
        "warning: saved $x is never referenced"}},
      {"X_scalar_type is X's dtype", [](Program& p) { p.code[1].attrs[3].value = DType::Float64; },
       {"error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f64): field 'self_scalar_type' is f64, but $x (field 'self') is f32"}},
  });
}

// MmBackward0 saves self and mat2 next to their sizes and strides.
TEST_CASE("verify: node shape rules") {
  Program program;
  program.grads = {GradDecl{"g", f32({4, 3}), std::nullopt, {}}};
  program.saved = {SavedDecl{"x", f32({4, 5}), std::nullopt, {}}};
  program.leaves = {LeafDecl{"w", f32({5, 3}), std::nullopt, {}}};
  program.code = {
      call("MmBackward0", {std::nullopt, "0"}, {"g"},
           {{"mat2", None{}},
            {"mat2_layout", Layout::Strided},
            {"mat2_sym_sizes", IntList{3, 5}},
            {"mat2_sym_strides", IntList{3}},
            {"self", SavedRef{"x"}},
            {"self_layout", Layout::Strided},
            {"self_sym_sizes", IntList{4, 5}},
            {"self_sym_strides", IntList{5, 1}}},
           {false, true}),
      accumulate_grad("w", "0"),
  };
  SUBCASE("without the saved tensor, its sizes are not checked") { CHECK(verify(program).empty()); }
  SUBCASE("X_sym_sizes and X_sym_strides describe X") {
    program.saved.push_back(SavedDecl{"w", f32({5, 3}), std::nullopt, {}});
    program.code[0].attrs[0].value = SavedRef{"w"};
    const std::string instr =
        "instruction 0 (_, %0 = MmBackward0 %g  mat2=$w mat2_layout=strided mat2_sym_sizes=[3,5] "
        "mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1] need=[0,1]): ";
    CHECK(diagnostics_of(program) ==
          lines({"error: " + instr + "field 'mat2_sym_sizes' is [3,5], but $w (field 'mat2') has sizes [5,3]",
                                   "error: " + instr + "field 'mat2_sym_strides' has 1 entry, but $w (field 'mat2') has 2 dimensions"}));
  }
}

TEST_CASE("verify: CopySlices") {
  auto to_copy_slices = [](Program& p) {
    p.code[1].op = Opcode::CopySlices;
    p.code[1].attrs.insert(p.code[1].attrs.begin(), {{"base", TensorGeometry{{3}, {1}, 0}},
                                                     {"view", TensorGeometry{{3}, {1}, 0}}});
  };
  const std::string instr =
      "instruction 1 (%1, %2 = CopySlices[MulBackward0] %0  base=... view=... other=$y other_scalar_type=f32 "
      "self=$x self_scalar_type=f32): ";
  check_cases({
      {"as a call", to_copy_slices, {}},
      {"the base and view geometries are present",
       [&](Program& p) {
         to_copy_slices(p);
         p.code[1].attrs.erase(p.code[1].attrs.begin() + 1);
       },
       {"error: instruction 1 (%1, %2 = CopySlices[MulBackward0] %0  base=... other=$y other_scalar_type=f32 "
        "self=$x self_scalar_type=f32): field 'view' is missing"}},
      {"one incoming grad, of the base",
       [&](Program& p) {
         to_copy_slices(p);
         p.code[1].operands.push_back("g");
       },
       {"error: instruction 1 (%1, %2 = CopySlices[MulBackward0] %0, %g  base=... view=... other=$y "
        "other_scalar_type=f32 self=$x self_scalar_type=f32): CopySlices[MulBackward0] expects 1 operand, got 2"}},
      {"the wrapped node's need", [&](Program& p) {
         to_copy_slices(p);
         p.code[1].need = {true};
       },
       {"error: " + instr + "need has 1 bit, but CopySlices[MulBackward0] has 2 inputs"}},
  });
}

TEST_CASE("verify: a variadic node takes at least one grad") {
  Program program;
  program.leaves = {LeafDecl{"x", f32({3}), std::nullopt, {}}};
  program.code = {call("SplitBackward0", {"0"}, {},
                       {{"dim", std::int64_t{0}},
                        {"self_options", TensorOptions{}},
                        {"self_sym_sizes", IntList{3}},
                        {"split_size", std::int64_t{1}}}),
                  accumulate_grad("x", "0")};
  CHECK(diagnostics_of(program) ==
        lines({"error: instruction 0 (%0 = SplitBackward0  dim=0 self_options=... self_sym_sizes=[3] "
                                 "split_size=1): SplitBackward0 expects at least 1 operand, got 0"}));
  program.code[0].operands = {"a", "b", "c"};
  program.grads = {GradDecl{"a", f32({1}), std::nullopt, {}}, GradDecl{"b", f32({1}), std::nullopt, {}},
                   GradDecl{"c", f32({1}), std::nullopt, {}}};
  CHECK(verify(program).empty());
}

TEST_CASE("verify: validate, add and zeros") {
  check_cases({
      {"validate: as many results and metadata as operands", [](Program& p) { p.code[2].metadata.pop_back(); },
       {"error: instruction 2 (%3, %4 = validate %1, %2 : f32[3]): validate needs as many results and metadata as "
        "operands, got 2 operands, 2 results and 1 metadata"}},
      {"validate: the grad reduces to the metadata's shape", [](Program& p) { p.code[0].metadata[0] = meta({2}); },
       {"error: instruction 0 (%0 = validate %g : f32[2]): operand 0 has shape [3], which does not reduce to the "
        "metadata's shape [2]"}},
      {"validate: metadata sizes are not negative", [](Program& p) { p.code[0].metadata[0] = meta({-1}); },
       {"error: instruction 0 (%0 = validate %g : f32[-1]): metadata 0 has a negative size: f32[-1]"}},
      {"validate: the result has the metadata's type",
       [](Program& p) {
         p.code[0].metadata[0] = meta({3}, DType::Float64);
         p.outputs = {OutputDecl{"o", f32({3}), {}}};
         p.code.push_back(output("o", "0"));
       },
       {"error: instruction 5 (output ^o %0): the operand has type f64[3], but output ^o is declared f32[3]"}},
      {"add: two operands",
       [](Program& p) { p.code.push_back(add("5", {"3"})); },
       {"error: instruction 5 (%5 = add %3): add expects 2 operands, got 1",
        "warning: instruction 5 (%5 = add %3): result %5 is never used"}},
      {"add: operands of one type; zeros has its type",
       [](Program& p) {
         p.code.push_back(zeros("5", meta({2})));
         p.code.push_back(add("6", {"3", "5"}));
       },
       {"error: instruction 6 (%6 = add %3, %5): the operands' types differ: f32[3] and f32[2]",
        "warning: instruction 6 (%6 = add %3, %5): result %6 is never used"}},
      {"zeros: a type", [](Program& p) { p.code.push_back(zeros("5", std::nullopt)); },
       {"error: instruction 5 (%5 = zeros : _): zeros needs a type, got _",
        "warning: instruction 5 (%5 = zeros : _): result %5 is never used"}},
  });
}

TEST_CASE("verify: accumulate_grad, hook, call_backward, output") {
  check_cases({
      {"accumulate_grad: a declared leaf", [](Program& p) { retarget(p.code[4], "z"); },
       {"error: instruction 4 (accumulate_grad @z %3): leaf @z is not declared", "warning: leaf @x is never accumulated"}},
      {"accumulate_grad: the leaf's shape", [](Program& p) { p.leaves[0].type.sizes = {4}; },
       {"error: instruction 4 (accumulate_grad @x %3): the operand has shape [3], but leaf @x has shape [4]"}},
      {"hook: declared", [](Program& p) { p.code.push_back(hook("h", {std::nullopt}, {"3"})); },
       {"error: instruction 5 (_ = hook &h %3): hook &h is not declared"}},
      {"hook: tensor_pre takes 1 grad",
       [](Program& p) {
         p.hooks = {HookDecl{"h", HookKind::TensorPre, {}}};
         p.code.push_back(hook("h", {std::nullopt}, {"3", "4"}));
       },
       {"error: instruction 5 (_ = hook &h %3, %4): a tensor_pre hook takes 1 operand and 1 result, got 2 "
        "operands and 1 result"}},
      {"hook: a tensor_pre hook's result has its operand's type",
       [](Program& p) {
         p.hooks = {HookDecl{"h", HookKind::TensorPre, {}}};
         p.outputs = {OutputDecl{"o", f32({2}), {}}};
         p.code.push_back(hook("h", {"5"}, {"3"}));
         p.code.push_back(output("o", "5"));
       },
       {"error: instruction 6 (output ^o %5): the operand has type f32[3], but output ^o is declared f32[2]"}},
      {"hook: pre takes n grads to n",
       [](Program& p) {
         p.hooks = {HookDecl{"h", HookKind::Pre, {}}};
         p.code.push_back(hook("h", {std::nullopt}, {"3", "4"}));
       },
       {"error: instruction 5 (_ = hook &h %3, %4): a pre hook takes as many results as operands, got 2 operands "
        "and 1 result"}},
      {"hook: post has a result per grad_input",
       [](Program& p) {
         p.hooks = {HookDecl{"h", HookKind::Post, {}}};
         p.code.push_back(hook("h", {std::nullopt, std::nullopt}, {"3"}));
       },
       {"error: instruction 5 (_, _ = hook &h %3): a post hook takes at least as many operands as results, got 1 "
        "operand and 2 results"}},
      {"hook: post_acc_grad on a declared leaf",
       [](Program& p) {
         p.hooks = {HookDecl{"h", HookKind::PostAccGrad, {}}};
         p.code.push_back(hook("h", {}, {"3"}, "z"));
       },
       {"error: instruction 5 (hook &h @z %3): leaf @z is not declared",
        "error: instruction 5 (hook &h @z %3): a post_acc_grad hook takes no operands or results, got 1 operand and "
        "0 results"}},
      {"call_backward: a declared function",
       [](Program& p) {
         p.code.push_back(call_backward("f", {std::nullopt}, {"3"}, {{"saved", std::vector<SavedRef>{{"x"}}}}, {true}));
       },
       {"error: instruction 5 (_ = call_backward &f %3  saved=[$x]): function &f is not declared"}},
      {"call_backward: saved names declared tensors",
       [](Program& p) {
         p.functions = {FunctionDecl{"f", {}}};
         p.code.push_back(
             call_backward("f", {std::nullopt}, {"3"}, {{"saved", std::vector<SavedRef>{{"x"}, {"q"}}}}, {true}));
       },
       {"error: instruction 5 (_ = call_backward &f %3  saved=[$x, $q]): field 'saved' names $q, which is not "
        "declared"}},
      {"call_backward: saved is given",
       [](Program& p) {
         p.functions = {FunctionDecl{"f", {}}};
         p.code.push_back(call_backward("f", {std::nullopt}, {"3"}, {}, {true}));
       },
       {"error: instruction 5 (_ = call_backward &f %3): field 'saved' is missing"}},
      {"call_backward: a need bit per result",
       [](Program& p) {
         p.functions = {FunctionDecl{"f", {}}};
         p.code.push_back(call_backward("f", {std::nullopt}, {"3"}, {{"saved", std::vector<SavedRef>{}}}, {}));
       },
       {"error: instruction 5 (_ = call_backward &f %3  saved=[]): need has 0 bits, for 1 result"}},
      {"output: declared", [](Program& p) { p.code.push_back(output("o", "3")); },
       {"error: instruction 5 (output ^o %3): output ^o is not declared"}},
      {"output: written at most once",
       [](Program& p) {
         p.outputs = {OutputDecl{"o", f32({3}), {}}};
         p.code.push_back(output("o", "3"));
         p.code.push_back(output("o", "4"));
       },
       {"error: instruction 6 (output ^o %4): output ^o is already written by instruction 5"}},
  });
}

TEST_CASE("verify: warnings") {
  check_cases({
      {"a result never used", [](Program& p) { p.code[2].results.push_back("5"); p.code[2].operands.push_back("0"); p.code[2].metadata.push_back(meta({3})); },
       {"warning: instruction 2 (%3, %4, %5 = validate %1, %2, %0 : f32[3], f32[3], f32[3]): result %5 is never used"}},
      {"a grad never used", [](Program& p) { p.grads.push_back(GradDecl{"h", f32({}), std::nullopt, {}}); },
       {"warning: grad %h is never used"}},
      {"an output never written", [](Program& p) { p.outputs = {OutputDecl{"o", f32({3}), {}}}; },
       {"warning: output ^o is never written"}},
      {"a leaf never accumulated", [](Program& p) { p.code.pop_back(); },
       {"warning: instruction 2 (%3, %4 = validate %1, %2 : f32[3], f32[3]): result %3 is never used",
        "warning: leaf @x is never accumulated"}},
      {"a saved tensor never referenced", [](Program& p) { p.saved.push_back(SavedDecl{"z", f32({}), std::nullopt, {}}); },
       {"warning: saved $z is never referenced"}},
      {"a leaf accumulated twice", [](Program& p) { p.code.push_back(accumulate_grad("x", "4")); },
       {"warning: instruction 5 (accumulate_grad @x %4): leaf @x is accumulated again (first by instruction 4); "
        "PyTorch accumulates each leaf once per backward"}},
  });
}

TEST_CASE("verify: diagnostics carry the instruction's or declaration's place") {
  Program program = mul_program();
  retarget(program.code[4], "z");
  program.code[4].where = SourceLocation{"mul.bwd", 12, 3};
  program.leaves[0].where = SourceLocation{"mul.bwd", 6, 3};
  const std::vector<Diagnostic> diagnostics = verify(program);
  REQUIRE(diagnostics.size() == 2);
  CHECK(diagnostics[0].pc == 4);
  CHECK(to_string(diagnostics[0]) == "mul.bwd:12:3: error: instruction 4 (accumulate_grad @z %3): leaf @z is not declared");
  CHECK(diagnostics[1].pc == -1);
  CHECK(diagnostics[1].severity == Diagnostic::Severity::Warning);
  CHECK(to_string(diagnostics[1]) == "mul.bwd:6:3: warning: leaf @x is never accumulated");
}

TEST_CASE("verify: check_program raises every error, one per line, and returns the warnings") {
  Program program = mul_program();
  CHECK(check_program(program).empty());
  program.outputs = {OutputDecl{"o", f32({3}), {}}};
  const std::vector<Diagnostic> warnings = check_program(program);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].message == "output ^o is never written");
  program.code[1].node = "Nope";
  retarget(program.code[4], "z");
  CHECK_THROWS_WITH_AS(check_program(program),
                       "error: instruction 1 (%1, %2 = Nope %0  other=$y other_scalar_type=f32 self=$x "
                       "self_scalar_type=f32): backward node 'Nope' is not in the registry\n"
                       "error: instruction 4 (accumulate_grad @z %3): leaf @z is not declared",
                       Error);
}
