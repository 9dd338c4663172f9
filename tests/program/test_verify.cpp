// The verifier: one small bad program per rule, with the exact diagnostics
// (docs/program.md, "The verifier"), clean programs with none, and the
// warnings. Programs are text; the mistakes the parser already refuses
// (unknown nodes and fields, a value of the wrong kind, negative sizes, a
// literal unlike its type) can only come from C++, so those cases change a
// parsed program.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include "refgrad/program.hpp"

using namespace refgrad;

namespace {

// A raw string literal without its first newline, so that its text can
// start on the line after the literal's opening and line 1 is that line.
std::string text(std::string_view raw) {
  if (!raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
  return std::string(raw);
}

// Every program is parsed as "t.bwd".
Program parse(std::string_view program_text) { return parse_program(text(program_text), "t.bwd"); }

// The diagnostics, one per line (one string, so that a failure shows them all).
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
  std::string text;
  std::vector<std::string> expected;  // to_string of each diagnostic, in order
};

void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const std::string rule = c.rule;
    CAPTURE(rule);
    CHECK(diagnostics_of(parse(c.text)) == lines(c.expected));
  }
}

// docs/program.md's first program, up to `code`: the code starts on line 8.
const std::string kMulHead = R"(
program mul
  grad   %g : f32[3]
  saved  $x : f32[3] = [1.0, 2.0, 3.0]
  saved  $y : f32[3]
  leaf   @x : f32[3]
  leaf   @y : f32[3]
code
)";

// ...and its code, lines 8 to 12; kMulButLast leaves out line 12.
const std::string kMulButLast = kMulHead + text(R"(
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @y %4
)");
const std::string kMul = kMulButLast + "  accumulate_grad @x %3\n";

// A grad and an output, up to `code`: the code starts on line 5.
const std::string kGradHead = R"(
program p
  grad   %g : f32[3]
  output ^o : f32[3]
code
)";

// How the MulBackward0 call prints.
const std::string kMulCall = "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32";

}  // namespace

TEST_CASE("verify: a clean program has no diagnostics") {
  CHECK(diagnostics_of(parse(kMul)) == "");
}

// Every opcode, broadcasting validate, grad_dtype none, CopySlices, hooks of
// each kind, call_backward and an output, used as their rules allow.
TEST_CASE("verify: a clean program using every opcode has no diagnostics") {
  const Program program = parse(R"(
program every
  grad     %g : f32[4,3]
  saved    $y : f32[3]
  saved    $c : f32[2]
  leaf     @b : f32[3]
  hook     &twice : tensor_pre
  hook     &pre : pre
  hook     &post : post
  hook     &log : post_acc_grad
  function &MyBackward
  output   ^y : f32[3]
code
  %0 = validate %g : f32[3]
  %1 = hook &twice %0
  %2, %3 = hook &pre %1, %0
  %4 = zeros : f32[3]
  %5 = add %2, %4
  %6, _ = call_backward &MyBackward %5  saved=[$c] need=[1,0]
  %7 = hook &post %6, %5
  %8, _ = CopySlices[MulBackward0] %7  base={sizes=[3], strides=[1], storage_offset=0} view={sizes=[3], strides=[1], storage_offset=0} other=$y other_scalar_type=f32 self=none self_scalar_type=f32 need=[1,0]
  %9 = validate %8 : f32[3]{grad_dtype=none}
  accumulate_grad @b %9
  hook &log @b
  output ^y %3
)");
  CHECK(diagnostics_of(program) == "");
}

TEST_CASE("verify: declarations") {
  check_cases({
      {"names of one kind are unique", R"(
program p
  grad   %g : f32[3]
  output ^o : f32[3]
  grad   %g : f32[3]
code
  output ^o %g
)",
       {"t.bwd:4:3: error: grad %g is declared twice"}},
      {"hooks and functions share the & names", R"(
program p
  grad     %g : f32[3]
  hook     &f : pre
  function &f
  output   ^o : f32[3]
code
  output ^o %g
)",
       {"t.bwd:4:3: error: function &f has the same name as hook &f"}},
  });
}

// The parser refuses these, so they change a parsed program.
TEST_CASE("verify: declarations built in C++") {
  struct Change {
    const char* rule;
    std::function<void(Program&)> change;
    std::string expected;
  };
  const std::vector<Change> changes = {
      {"sizes are not negative", [](Program& p) { p.saved[1].type.sizes = {2, -3}; },
       "t.bwd:4:3: error: saved $y has a negative size: f32[2,-3]"},
      {"an inline value has the declared dtype", [](Program& p) { p.saved[0].value = tensor({1.0, 2.0, 3.0}, DType::Float64); },
       "t.bwd:3:3: error: saved $x's value is f64[3], but the declaration says f32[3]"},
      {"an inline .grad has the declared sizes", [](Program& p) { p.leaves[0].grad = tensor({1.0f, 2.0f}); },
       "t.bwd:5:3: error: leaf @x's .grad is f32[2], but the declaration says f32[3]"},
      {"an inline value is defined", [](Program& p) { p.grads[0].value = Tensor(); },
       "t.bwd:2:3: error: grad %g's value is undefined; the declaration says f32[3]"},
  };
  for (const Change& c : changes) {
    const std::string rule = c.rule;
    CAPTURE(rule);
    Program program = parse(kMul);
    c.change(program);
    CHECK(diagnostics_of(program) == c.expected + "\n");
  }
}

TEST_CASE("verify: registers") {
  check_cases({
      {"a register is defined once", kGradHead + text(R"(
  %0 = validate %g : f32[3]
  %0 = validate %g : f32[3]
  output ^o %0
)"),
       {"t.bwd:6:3: error: instruction 1 (%0 = validate %g : f32[3]): register %0 is already defined by instruction 0"}},
      {"a grad is a register definition", kGradHead + text(R"(
  %g = validate %g : f32[3]
  output ^o %g
)"),
       {"t.bwd:5:3: error: instruction 0 (%g = validate %g : f32[3]): register %g is already defined by grad %g"}},
      {"a register is defined before use", kGradHead + text(R"(
  output ^o %0
  %0 = validate %g : f32[3]
)"),
       {"t.bwd:5:3: error: instruction 0 (output ^o %0): register %0 is used before it is defined (by instruction 1)",
        "t.bwd:6:3: warning: instruction 1 (%0 = validate %g : f32[3]): result %0 is never used"}},
      {"a register is defined somewhere", kGradHead + text(R"(
  output ^o %nope
)"),
       {"t.bwd:5:3: error: instruction 0 (output ^o %nope): register %nope is not defined",
        "t.bwd:2:3: warning: grad %g is never used"}},
      {"add takes registers, not none", kGradHead + text(R"(
  %0 = add %g, none
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = add %g, none): operand 1 is none, but add takes registers"}},
      {"add's result is a register", kGradHead + text(R"(
  _ = add %g, %g
  output ^o %g
)"),
       {"t.bwd:5:3: error: instruction 0 (_ = add %g, %g): result 0 is _, but add must name a register"}},
      {"accumulate_grad takes a register, not none", kMulButLast + text(R"(
  accumulate_grad @x none
)"),
       {"t.bwd:12:3: error: instruction 4 (accumulate_grad @x none): operand 0 is none, but accumulate_grad takes "
        "registers",
        "t.bwd:10:3: warning: instruction 2 (%3, %4 = validate %1, %2 : f32[3], f32[3]): result %3 is never used"}},
  });
}

TEST_CASE("verify: call") {
  // The MulBackward0 call on line 9, as each case writes it.
  auto mul_with_call = [](const std::string& call, const std::string& validate = "%3, %4 = validate %1, %2") {
    return kMulHead + "  %0 = validate %g : f32[3]\n  " + call + "\n  " + validate +
           " : f32[3], f32[3]\n  accumulate_grad @y %4\n  accumulate_grad @x %3\n";
  };
  const std::string in_line_9 = "t.bwd:9:3: error: instruction 1 (";
  check_cases({
      {"one operand per incoming grad",
       mul_with_call("%1, %2 = MulBackward0 %0, %g  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32"),
       {in_line_9 + "%1, %2 = MulBackward0 %0, %g  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32): "
                    "MulBackward0 expects 1 operand, got 2"}},
      {"one result per input",
       mul_with_call("%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32"),
       {in_line_9 + "%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32): "
                    "MulBackward0 expects 2 results, got 3",
        "t.bwd:9:3: warning: instruction 1 (%1, %2, %5 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): result %5 is never used"}},
      {"one need bit per input", mul_with_call(kMulCall + " need=[1]"),
       {in_line_9 + kMulCall + " need=[1]): need has 1 bit, but MulBackward0 has 2 inputs"}},
      {"no result where the need bit is 0", mul_with_call(kMulCall + " need=[1,0]"),
       {in_line_9 + kMulCall +
        " need=[1,0]): result %2 is for input 'other', whose need bit is 0: PyTorch never computes it (write _)"}},
      {"_ where the need bit is 1 is a warning",
       mul_with_call("%1, _ = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32",
                     "%3, %4 = validate %1, none"),
       {"t.bwd:9:3: warning: instruction 1 (%1, _ = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f32): result 1 (input 'other') is _ but its need bit is 1: computed and dropped"}},
      {"every field present", mul_with_call("%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x"),
       {in_line_9 + "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x): field 'self_scalar_type' "
                    "is missing"}},
      {"none in a Tensor? field",
       mul_with_call("%1, %2 = MulBackward0 %0  other=none other_scalar_type=f32 self=$x self_scalar_type=f32"),
       {"t.bwd:4:3: warning: saved $y is never referenced"}},
      {"a field names a declared saved tensor",
       mul_with_call("%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$q self_scalar_type=f32"),
       {in_line_9 + "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$q self_scalar_type=f32): "
                    "field 'self' names $q, which is not declared",
        "t.bwd:3:3: warning: saved $x is never referenced"}},
  });
}

// The parser refuses these, so they change the parsed MulBackward0 call.
TEST_CASE("verify: call built in C++") {
  struct Change {
    const char* rule;
    std::function<void(Instr&)> change;
    std::string expected;
  };
  const std::vector<Change> changes = {
      // By std::string: g++ 12 at -O3 warns falsely (-Wrestrict) on assigning the literal.
      {"the node is in the registry", [](Instr& call) { call.node = std::string("MulBackwards0"); },
       "%1, %2 = MulBackwards0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32 need=[1,1]): "
       "backward node 'MulBackwards0' is not in the registry"},
      {"no unknown field", [](Instr& call) { call.attrs.push_back({"alpha", Scalar(1)}); },
       kMulCall + " alpha=1): MulBackward0 has no field 'alpha'"},
      {"no field twice", [](Instr& call) { call.attrs.push_back({"self", SavedRef{"x"}}); },
       "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self=$x self_scalar_type=f32): field 'self' "
       "is given twice"},
      {"each field of its kind", [](Instr& call) { call.attrs[3].value = std::int64_t{6}; },
       "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=6): field "
       "'self_scalar_type' expects ScalarType, got int"},
      {"none only in an optional field", [](Instr& call) { call.attrs[1].value = None{}; },
       "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=none self=$x self_scalar_type=f32): field "
       "'other_scalar_type' expects ScalarType, got none"},
  };
  for (const Change& c : changes) {
    const std::string rule = c.rule;
    CAPTURE(rule);
    Program program = parse(kMul);
    c.change(program.code[1]);
    CHECK(diagnostics_of(program) == "t.bwd:9:3: error: instruction 1 (" + c.expected + "\n");
  }
}

TEST_CASE("verify: node shape rules") {
  check_cases({
      {"X_scalar_type is X's dtype", kMulHead + text(R"(
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f64
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @y %4
  accumulate_grad @x %3
)"),
       {"t.bwd:9:3: error: instruction 1 (%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x "
        "self_scalar_type=f64): field 'self_scalar_type' is f64, but $x (field 'self') is f32"}},
      {"X_sym_sizes and X_sym_strides describe X", R"(
program mm
  grad  %g : f32[4,3]
  saved $x : f32[4,5]
  saved $w : f32[5,3]
  leaf  @w : f32[5,3]
code
  _, %0 = MmBackward0 %g  mat2=$w mat2_layout=strided mat2_sym_sizes=[3,5] mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1,1] need=[0,1]
  accumulate_grad @w %0
)",
       {"t.bwd:7:3: error: instruction 0 (_, %0 = MmBackward0 %g  mat2=$w mat2_layout=strided mat2_sym_sizes=[3,5] "
        "mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1,1] need=[0,1]): "
        "field 'mat2_sym_sizes' is [3,5], but $w (field 'mat2') has sizes [5,3]",
        "t.bwd:7:3: error: instruction 0 (_, %0 = MmBackward0 %g  mat2=$w mat2_layout=strided mat2_sym_sizes=[3,5] "
        "mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1,1] need=[0,1]): "
        "field 'mat2_sym_strides' has 1 entry, but $w (field 'mat2') has 2 dimensions",
        "t.bwd:7:3: error: instruction 0 (_, %0 = MmBackward0 %g  mat2=$w mat2_layout=strided mat2_sym_sizes=[3,5] "
        "mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1,1] need=[0,1]): "
        "field 'self_sym_strides' has 3 entries, but $x (field 'self') has 2 dimensions"}},
      {"without the saved tensor there is nothing to compare", R"(
program mm
  grad  %g : f32[4,3]
  saved $x : f32[4,5]
  leaf  @w : f32[5,3]
code
  _, %0 = MmBackward0 %g  mat2=none mat2_layout=strided mat2_sym_sizes=[3,5] mat2_sym_strides=[3] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1] need=[0,1]
  accumulate_grad @w %0
)",
       {}},
  });
}

TEST_CASE("verify: CopySlices") {
  const std::string geometries = "base={sizes=[3], strides=[1], storage_offset=0} view={sizes=[3], strides=[1], storage_offset=0}";
  const std::string fields = " other=$y other_scalar_type=f32 self=$x self_scalar_type=f32";
  auto mul_with_call = [](const std::string& call) {
    return kMulHead + "  %0 = validate %g : f32[3]\n  " + call +
           "\n  %3, %4 = validate %1, %2 : f32[3], f32[3]\n  accumulate_grad @y %4\n  accumulate_grad @x %3\n";
  };
  check_cases({
      {"as a call", mul_with_call("%1, %2 = CopySlices[MulBackward0] %0  " + geometries + fields), {}},
      {"the base and view geometries are present",
       mul_with_call("%1, %2 = CopySlices[MulBackward0] %0  base={sizes=[3], strides=[1], storage_offset=0}" + fields),
       {"t.bwd:9:3: error: instruction 1 (%1, %2 = CopySlices[MulBackward0] %0  base={sizes=[3], strides=[1], "
        "storage_offset=0}" + fields + "): field 'view' is missing"}},
      {"one incoming grad, of the base", mul_with_call("%1, %2 = CopySlices[MulBackward0] %0, %g  " + geometries + fields),
       {"t.bwd:9:3: error: instruction 1 (%1, %2 = CopySlices[MulBackward0] %0, %g  " + geometries + fields +
        "): CopySlices[MulBackward0] expects 1 operand, got 2"}},
      {"the wrapped node's need",
       mul_with_call("%1, %2 = CopySlices[MulBackward0] %0  " + geometries + fields + " need=[1]"),
       {"t.bwd:9:3: error: instruction 1 (%1, %2 = CopySlices[MulBackward0] %0  " + geometries + fields +
        " need=[1]): need has 1 bit, but CopySlices[MulBackward0] has 2 inputs"}},
  });
}

TEST_CASE("verify: a variadic node takes at least one grad") {
  check_cases({
      {"no grads", R"(
program split
  leaf @x : f32[3]
code
  %0 = SplitBackward0  dim=0 self_options={} self_sym_sizes=[3] split_size=1
  accumulate_grad @x %0
)",
       {"t.bwd:4:3: error: instruction 0 (%0 = SplitBackward0  dim=0 self_options={} self_sym_sizes=[3] "
        "split_size=1): SplitBackward0 expects at least 1 operand, got 0"}},
      {"three grads", R"(
program split
  grad %a : f32[1]
  grad %b : f32[1]
  grad %c : f32[1]
  leaf @x : f32[3]
code
  %0 = SplitBackward0 %a, %b, %c  dim=0 self_options={} self_sym_sizes=[3] split_size=1
  accumulate_grad @x %0
)",
       {}},
  });
}

// A Tensor[] input (cat's `tensors`): one need bit, one result per list
// element, as many as tensors_args_scalartypes has entries; an element's `_`
// is an element without an edge, not a warning.
TEST_CASE("verify: a Tensor[] input has one result per list element and one need bit") {
  // The call is line 6; the leaves are lines 3 and 4.
  auto cat_with_call = [](const std::string& call, const std::string& uses = "accumulate_grad @a %0\n  "
                                                                               "accumulate_grad @c %2\n") {
    return text(R"(
program cat
  grad %g : f32[6]
  leaf @a : f32[2]
  leaf @c : f32[3]
code
  )") + call + "\n  " + uses;
  };
  const std::string fields =
      "  dim=0 tensors_args_scalartypes=[f32, f32, f32] tensors_args_sizes_symint=[[2], [1], [3]]";
  const std::string in_line_6 = "t.bwd:6:3: error: instruction 0 (";
  check_cases({
      {"one result per element, `_` for the one without an edge", cat_with_call("%0, _, %2 = CatBackward0 %g" + fields),
       {}},
      {"stack: one result per element", R"(
program stack
  grad %g : f32[2,3]
  leaf @a : f32[3]
  leaf @b : f32[3]
code
  %0, %1 = StackBackward0 %g  dim=0 tensors_args_scalartypes=[f32, f32]
  accumulate_grad @a %0
  accumulate_grad @b %1
)",
       {}},
      {"as many results as the list has elements", cat_with_call("%0, %2 = CatBackward0 %g" + fields),
       {in_line_6 + "%0, %2 = CatBackward0 %g" + fields + "): CatBackward0 expects 3 results, got 2"}},
      {"one need bit for the list", cat_with_call("%0, _, %2 = CatBackward0 %g" + fields + " need=[1,1,1]"),
       {in_line_6 + "%0, _, %2 = CatBackward0 %g" + fields +
        " need=[1,1,1]): need has 3 bits, but CatBackward0 has 1 input"}},
      {"no result where the list's need bit is 0", cat_with_call("%0, _, %2 = CatBackward0 %g" + fields + " need=[0]"),
       {in_line_6 + "%0, _, %2 = CatBackward0 %g" + fields +
            " need=[0]): result %0 is for input 'tensors', whose need bit is 0: PyTorch never computes it (write _)",
        in_line_6 + "%0, _, %2 = CatBackward0 %g" + fields +
            " need=[0]): result %2 is for input 'tensors', whose need bit is 0: PyTorch never computes it (write _)"}},
      {"every element `_` with the need bit 1 is a warning", cat_with_call("_, _, _ = CatBackward0 %g" + fields, ""),
       {"t.bwd:6:3: warning: instruction 0 (_, _, _ = CatBackward0 %g" + fields +
        "): every result (input 'tensors') is _ but its need bit is 1: computed and dropped"}},
      {"without the length field only the field is reported",
       cat_with_call("%0, _, %2 = CatBackward0 %g  dim=0 tensors_args_sizes_symint=[[2], [1], [3]]"),
       {in_line_6 + "%0, _, %2 = CatBackward0 %g  dim=0 tensors_args_sizes_symint=[[2], [1], [3]]): "
                    "field 'tensors_args_scalartypes' is missing"}},
  });
}

TEST_CASE("verify: validate, add and zeros") {
  check_cases({
      {"validate: as many results and metadata as operands", kGradHead + text(R"(
  %0 = validate %g, %g : f32[3]
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = validate %g, %g : f32[3]): validate needs as many results and "
        "metadata as operands, got 2 operands, 1 result and 1 metadata"}},
      {"validate: as many metadata as operands", kGradHead + text(R"(
  %0 = validate %g : f32[3], f32[3]
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = validate %g : f32[3], f32[3]): validate needs as many results and "
        "metadata as operands, got 1 operand, 1 result and 2 metadata"}},
      {"validate: the grad reduces to the metadata's shape", R"(
program p
  grad   %g : f32[3]
  output ^o : f32[2]
code
  %0 = validate %g : f32[2]
  output ^o %0
)",
       {"t.bwd:5:3: error: instruction 0 (%0 = validate %g : f32[2]): operand 0 has shape [3], which does not "
        "reduce to the metadata's shape [2]"}},
      {"validate: the result has the metadata's grad_dtype", kGradHead + text(R"(
  %0 = validate %g : f32[3]{grad_dtype=f64}
  output ^o %0
)"),
       {"t.bwd:6:3: error: instruction 1 (output ^o %0): the operand has type f64[3], but output ^o is declared "
        "f32[3]"}},
      {"validate: grad_dtype none keeps the grad's dtype", R"(
program p
  grad   %g : f64[3]
  output ^o : f32[3]
code
  %0 = validate %g : f32[3]{grad_dtype=none}
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 1 (output ^o %0): the operand has type f64[3], but output ^o is declared "
        "f32[3]"}},
      {"add: two operands", kGradHead + text(R"(
  %0 = add %g
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = add %g): add expects 2 operands, got 1"}},
      {"add: operands of one type; zeros has its type", kGradHead + text(R"(
  %0 = zeros : f32[2]
  %1 = add %g, %0
  output ^o %1
)"),
       {"t.bwd:6:3: error: instruction 1 (%1 = add %g, %0): the operands' types differ: f32[3] and f32[2]"}},
      {"add: the sum has the operands' type", kGradHead + text(R"(
  %0 = zeros : f32[2]
  %1 = add %0, %0
  output ^o %1
)"),
       {"t.bwd:7:3: error: instruction 2 (output ^o %1): the operand has type f32[2], but output ^o is declared "
        "f32[3]",
        "t.bwd:2:3: warning: grad %g is never used"}},
      {"zeros: a type", kGradHead + text(R"(
  %0 = zeros : _
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = zeros : _): zeros needs a type, got _",
        "t.bwd:2:3: warning: grad %g is never used"}},
  });
}

TEST_CASE("verify: validate metadata built in C++") {
  // The parser refuses negative sizes.
  Program program = parse(kMul);
  program.code[0].metadata[0]->shape = {-1};
  CHECK(diagnostics_of(program) ==
        "t.bwd:8:3: error: instruction 0 (%0 = validate %g : f32[-1]): metadata 0 has a negative size: f32[-1]\n");
}

TEST_CASE("verify: accumulate_grad, hook, call_backward, output") {
  check_cases({
      {"accumulate_grad: a declared leaf", kMulButLast + "  accumulate_grad @z %3\n",
       {"t.bwd:12:3: error: instruction 4 (accumulate_grad @z %3): leaf @z is not declared",
        "t.bwd:5:3: warning: leaf @x is never accumulated"}},
      {"accumulate_grad: the leaf's shape", R"(
program p
  grad %g : f32[3]
  leaf @x : f32[4]
code
  %0 = validate %g : f32[3]
  accumulate_grad @x %0
)",
       {"t.bwd:6:3: error: instruction 1 (accumulate_grad @x %0): the operand has shape [3], but leaf @x has shape "
        "[4]"}},
      {"hook: declared", kGradHead + text(R"(
  %0 = hook &h %g
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = hook &h %g): hook &h is not declared"}},
      {"hook: tensor_pre takes 1 grad", R"(
program p
  grad   %g : f32[3]
  hook   &h : tensor_pre
  output ^o : f32[3]
code
  %0 = hook &h %g, %g
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 0 (%0 = hook &h %g, %g): a tensor_pre hook takes 1 operand and 1 result, got "
        "2 operands and 1 result"}},
      {"hook: a tensor_pre hook's result has its operand's type", R"(
program p
  grad   %g : f32[3]
  hook   &h : tensor_pre
  output ^o : f32[2]
code
  %0 = hook &h %g
  output ^o %0
)",
       {"t.bwd:7:3: error: instruction 1 (output ^o %0): the operand has type f32[3], but output ^o is declared "
        "f32[2]"}},
      {"hook: pre takes n grads to n", R"(
program p
  grad   %g : f32[3]
  hook   &h : pre
  output ^o : f32[3]
code
  %0 = hook &h %g, %g
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 0 (%0 = hook &h %g, %g): a pre hook takes as many results as operands, got 2 "
        "operands and 1 result"}},
      {"hook: post has a result per grad_input", R"(
program p
  grad   %g : f32[3]
  hook   &h : post
  output ^o : f32[3]
code
  %0, _ = hook &h %g
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 0 (%0, _ = hook &h %g): a post hook takes at least as many operands as "
        "results, got 1 operand and 2 results"}},
      {"hook: post_acc_grad on a declared leaf", R"(
program p
  grad   %g : f32[3]
  leaf   @x : f32[3]
  hook   &h : post_acc_grad
code
  accumulate_grad @x %g
  hook &h @z
)",
       {"t.bwd:7:3: error: instruction 1 (hook &h @z): leaf @z is not declared"}},
      {"hook: post_acc_grad has no results", R"(
program p
  grad   %g : f32[3]
  leaf   @x : f32[3]
  hook   &h : post_acc_grad
code
  accumulate_grad @x %g
  _ = hook &h @x
)",
       {"t.bwd:7:3: error: instruction 1 (_ = hook &h @x): a post_acc_grad hook takes no operands or results, got 0 "
        "operands and 1 result"}},
      {"call_backward: a declared function", kGradHead + text(R"(
  %0 = call_backward &f %g  saved=[]
  output ^o %0
)"),
       {"t.bwd:5:3: error: instruction 0 (%0 = call_backward &f %g  saved=[]): function &f is not declared"}},
      {"call_backward: saved names declared tensors", R"(
program p
  grad     %g : f32[3]
  saved    $x : f32[3]
  function &f
  output   ^o : f32[3]
code
  %0 = call_backward &f %g  saved=[$x, $q]
  output ^o %0
)",
       {"t.bwd:7:3: error: instruction 0 (%0 = call_backward &f %g  saved=[$x, $q]): field 'saved' names $q, which "
        "is not declared"}},
      {"call_backward: saved is given", R"(
program p
  grad     %g : f32[3]
  function &f
  output   ^o : f32[3]
code
  %0 = call_backward &f %g
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 0 (%0 = call_backward &f %g): field 'saved' is missing"}},
      {"call_backward: a need bit per result", R"(
program p
  grad     %g : f32[3]
  function &f
  output   ^o : f32[3]
code
  %0 = call_backward &f %g  saved=[] need=[1,1]
  output ^o %0
)",
       {"t.bwd:6:3: error: instruction 0 (%0 = call_backward &f %g  saved=[] need=[1,1]): need has 2 bits, for 1 "
        "result"}},
      {"output: declared", kGradHead + text(R"(
  output ^o %g
  output ^p %g
)"),
       {"t.bwd:6:3: error: instruction 1 (output ^p %g): output ^p is not declared"}},
      {"output: written at most once", kGradHead + text(R"(
  output ^o %g
  output ^o none
)"),
       {"t.bwd:6:3: error: instruction 1 (output ^o none): output ^o is already written by instruction 0"}},
  });
}

TEST_CASE("verify: warnings") {
  check_cases({
      {"a result never used", kGradHead + text(R"(
  %0, %1 = validate %g, %g : f32[3], f32[3]
  output ^o %1
)"),
       {"t.bwd:5:3: warning: instruction 0 (%0, %1 = validate %g, %g : f32[3], f32[3]): result %0 is never used"}},
      {"a grad never used", R"(
program p
  grad   %g : f32[3]
  grad   %h : f32[]
  output ^o : f32[3]
code
  output ^o %g
)",
       {"t.bwd:3:3: warning: grad %h is never used"}},
      {"an output never written", R"(
program p
  grad   %g : f32[3]
  output ^o : f32[3]
  output ^p : f32[3]
code
  output ^o %g
)",
       {"t.bwd:4:3: warning: output ^p is never written"}},
      {"a leaf never accumulated", R"(
program p
  grad   %g : f32[3]
  leaf   @x : f32[3]
  leaf   @y : f32[3]
code
  accumulate_grad @y %g
)",
       {"t.bwd:3:3: warning: leaf @x is never accumulated"}},
      {"no warning where no leaf is accumulated: torch.autograd.grad's program, grads to outputs", R"(
program p
  grad   %g : f32[3]
  leaf   @x : f32[3]
  leaf   @y : f32[3]
  output ^x : f32[3]
code
  output ^x %g
)",
       {}},
      {"a saved tensor never referenced", R"(
program p
  grad   %g : f32[3]
  saved  $z : f32[]
  output ^o : f32[3]
code
  output ^o %g
)",
       {"t.bwd:3:3: warning: saved $z is never referenced"}},
      {"a leaf accumulated twice", kMul + "  accumulate_grad @x %4\n",
       {"t.bwd:13:3: warning: instruction 5 (accumulate_grad @x %4): leaf @x is accumulated again (first by "
        "instruction 4); PyTorch accumulates each leaf once per backward"}},
  });
}

TEST_CASE("verify: a diagnostic names its instruction or declaration") {
  const std::vector<Diagnostic> diagnostics = verify(parse(kMulButLast + "  accumulate_grad @z %3\n"));
  REQUIRE(diagnostics.size() == 2);
  CHECK(diagnostics[0].severity == Diagnostic::Severity::Error);
  CHECK(diagnostics[0].pc == 4);
  CHECK(diagnostics[0].where.line == 12);
  CHECK(diagnostics[1].severity == Diagnostic::Severity::Warning);
  CHECK(diagnostics[1].pc == -1);
  CHECK(diagnostics[1].where.line == 5);
  // Built in C++: no location, so no "file:line:col: ".
  Program built = parse(kMul);
  built.code[1].where = SourceLocation{};
  built.code[1].need = {true};
  CHECK(diagnostics_of(built) ==
        "error: instruction 1 (" + kMulCall + " need=[1]): need has 1 bit, but MulBackward0 has 2 inputs\n");
}

TEST_CASE("verify: check_program raises every error, one per line, and returns the warnings") {
  CHECK(check_program(parse(kMul)).empty());
  const std::vector<Diagnostic> warnings = check_program(parse(kMul + "  accumulate_grad @x %4\n"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].pc == 5);
  CHECK_THROWS_WITH_AS(check_program(parse(kGradHead + text(R"(
  %0 = validate %g : f32[2]
  output ^p %0
)"))),
                       "t.bwd:5:3: error: instruction 0 (%0 = validate %g : f32[2]): operand 0 has shape [3], which "
                       "does not reduce to the metadata's shape [2]\n"
                       "t.bwd:6:3: error: instruction 1 (output ^p %0): output ^p is not declared",
                       Error);
}
