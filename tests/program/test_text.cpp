// The text assembly: printer and parser (docs/program.md "Text syntax").
// Expected texts and values are written by hand; the round trip over random
// programs is the property that ties printer and parser together.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include <doctest/doctest.h>

#include "random_program.hpp"
#include "refgrad/program.hpp"

using namespace refgrad;

namespace {

// The message parse_program raises for `text`, or "(no error)".
std::string parse_error(std::string_view text) {
  try {
    parse_program(text, "t.bwd");
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// "1,1,...,1": the sizes of a tensor of `rank` dimensions of size 1.
std::string ones(std::size_t rank) {
  std::string sizes = "1";
  for (std::size_t i = 1; i < rank; ++i) sizes += ",1";
  return sizes;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

template <class T>
std::vector<T> values_of(const std::optional<Tensor>& tensor) {
  REQUIRE(tensor.has_value());
  return tensor->to_vector<T>();
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

std::uint64_t bits_of(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace

// ---------------------------------------------------------- round trip ---

TEST_CASE("text: random programs round trip through the text") {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    CAPTURE(seed);
    const Program program = testing::random_program(seed);
    const std::string text = print_program(program);
    CAPTURE(text);
    const Program parsed = parse_program(text);
    CHECK(parsed == program);
    CHECK(print_program(parsed) == text);
    // With instruction numbers, as `refgrad dis` prints them.
    CHECK(parse_program(print_program(program, PrintOptions{true})) == program);
  }
}

// The round trip proves little unless the programs hold every kind of thing.
TEST_CASE("text: random programs cover every opcode, hook kind, field kind, dtype and device") {
  std::set<Opcode> opcodes;
  std::set<HookKind> hook_kinds;
  std::set<FieldKind> field_kinds;
  std::set<DType> literal_dtypes;
  std::set<Device> devices;
  bool none_field = false, empty_literal = false, scalar_literal = false, nan_literal = false;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Program program = testing::random_program(seed);
    for (const SavedDecl& saved : program.saved) {
      devices.insert(saved.type.device);
      if (!saved.value) continue;
      literal_dtypes.insert(saved.value->dtype());
      empty_literal |= saved.value->numel() == 0;
      scalar_literal |= saved.value->dim() == 0;
      if (saved.value->dtype() == DType::Float64) {
        for (double x : saved.value->to_vector<double>()) nan_literal |= std::isnan(x);
      }
    }
    for (const Instr& instr : program.code) {
      opcodes.insert(instr.op);
      if (instr.op == Opcode::Hook) hook_kinds.insert(program.find_hook(instr.target)->kind);
      if (instr.op == Opcode::CallBackward && !instr.attrs.empty()) field_kinds.insert(FieldKind::TensorList);
      if (instr.op == Opcode::Aten) {  // the kinds only ATen arguments have (bool[], Device, MemoryFormat)
        for (const AtenArgument& argument : find_aten_op(instr.node)->schema.arguments) {
          if (!argument.is_tensor() && !argument.is_tensor_list()) field_kinds.insert(argument.type.kind);
        }
      }
      if (instr.op != Opcode::Call) continue;
      for (const Attr& attr : instr.attrs) {
        for (const SavedFieldSchema& field : find_node(instr.node)->schema.saved) {
          if (field.name == attr.name) field_kinds.insert(field.type.kind);
        }
        none_field |= std::holds_alternative<None>(attr.value);
      }
    }
  }
  CHECK(opcodes.size() == 10);
  CHECK(hook_kinds.size() == 4);
  CHECK(field_kinds.size() == 20);
  CHECK(literal_dtypes.size() == 4);
  CHECK(devices.size() == 2);
  CHECK(none_field);
  CHECK(empty_literal);
  CHECK(scalar_literal);
  CHECK(nan_literal);
}

// ------------------------------------------------------ canonical text ---

TEST_CASE("text: a messy text reads as its canonical text") {
  const std::string messy = R"(# comments, odd spacing, fields out of order, instruction numbers
program   messy.1      # the name may hold dots

  output ^dx:f32[2]
  leaf @x : f32[2]  =  [ 0.5 ,
                         -0 ]             # a literal across lines; -0 read as f32
	saved $x: f32 [2] cpu                 # a tab, a space before the sizes, cpu spelled out
  grad %g:f64[]=1
  hook &h : tensor_pre
  hook &p : post_acc_grad
  function &F

code
    0   %0 = validate %g : f64[]
  %1=hook &h %0   # a tensor pre-hook

  2 %2, _ = MulBackward0 %1 self_scalar_type=f32 self=$x  need=[1,0] other=none other_scalar_type=f64  origin="m.py:3"
  _, %3 = CopySlices[MulBackward0] %2 view={storage_offset=1, strides=[1], sizes=[1]} base={sizes=[2], strides=[1], storage_offset=0} other=$x other_scalar_type=f32 self=none self_scalar_type=f32
  %4 = add %2,%2
  %5, %6 = validate %4, none : f32[2]{subclass, device=cuda}, _
  %7 = zeros : f32[2]{grad_dtype=none}
  accumulate_grad @x %4
  hook &p @x
  %8, %9 = call_backward &F %4, none  need=[1,1] saved=[ $x ]
  output ^dx %8
)";
  const std::string canonical = R"(program messy.1
  grad %g : f64[] = 1.0
  saved $x : f32[2]
  leaf @x : f32[2] = [0.5, -0.0]
  hook &h : tensor_pre
  hook &p : post_acc_grad
  function &F
  output ^dx : f32[2]
code
  %0 = validate %g : f64[]
  %1 = hook &h %0
  %2, _ = MulBackward0 %1  other=none other_scalar_type=f64 self=$x self_scalar_type=f32 need=[1,0] origin="m.py:3"
  _, %3 = CopySlices[MulBackward0] %2  base={sizes=[2], strides=[1], storage_offset=0} view={sizes=[1], strides=[1], storage_offset=1} other=$x other_scalar_type=f32 self=none self_scalar_type=f32
  %4 = add %2, %2
  %5, %6 = validate %4, none : f32[2]{device=cuda, subclass}, _
  %7 = zeros : f32[2]{grad_dtype=none}
  accumulate_grad @x %4
  hook &p @x
  %8, %9 = call_backward &F %4, none  saved=[$x]
  output ^dx %8
)";
  const Program program = parse_program(messy);
  CHECK(print_program(program) == canonical);
  CHECK(parse_program(canonical) == program);

  // A few of the values, by hand.
  CHECK(program.name == "messy.1");
  CHECK(program.grads[0].type == TensorType{DType::Float64, {}, Device::CPU});
  CHECK(values_of<double>(program.grads[0].value) == std::vector<double>{1.0});
  CHECK(bits_of(values_of<float>(program.leaves[0].grad)[1]) == 0x80000000u);  // -0.0f
  const Instr& mul = program.code[2];
  CHECK(mul.results == std::vector<std::optional<std::string>>{"2", std::nullopt});
  CHECK(mul.need == std::vector<bool>{true, false});
  CHECK(mul.origin == "m.py:3");
  REQUIRE(mul.attrs.size() == 4);
  CHECK(mul.attrs[0] == Attr{"other", None{}});
  CHECK(mul.attrs[1] == Attr{"other_scalar_type", DType::Float64});
  CHECK(mul.attrs[2] == Attr{"self", SavedRef{"x"}});
  const Instr& copy = program.code[3];
  CHECK(copy.node == "MulBackward0");
  CHECK(copy.attrs[1] == Attr{"view", TensorGeometry{{1}, {1}, 1}});
  CHECK(copy.need == std::vector<bool>{true, true});  // need left out: one 1 per input of MulBackward0
  InputMetadata cuda_subclass{DType::Float32, {2}, Device::CUDA, true, DType::Float32};
  CHECK(program.code[5].metadata == std::vector<std::optional<InputMetadata>>{cuda_subclass, std::nullopt});
  CHECK(program.code[6].metadata[0]->grad_dtype == std::nullopt);
  CHECK(program.code[8].leaf == "x");
  CHECK(program.code[8].operands.empty());
  CHECK(program.code[9].attrs[0] == Attr{"saved", std::vector<SavedRef>{{"x"}}});
  CHECK(program.code[9].need == std::vector<bool>{true, true});
}

// DESIGN.md's program (with every field its nodes have), as `refgrad dis` prints it.
TEST_CASE("text: the MLP of DESIGN.md") {
  const std::string dis = R"(program mlp                               # loss = relu(x @ w + b).sum()
  grad   %g0 : f32[]                      # the root's incoming gradient (d loss / d loss)
  saved  $x  : f32[4,5]                   # saved tensors: values live in the bundle
  saved  $r  : f32[4,3]                   # relu's result
  leaf   @w  : f32[5,3]                   # leaves whose .grad AccumulateGrad updates
  leaf   @b  : f32[3]
code
   0  %1       = validate %g0 : f32[]
   1  %2       = SumBackward0 %1  self_sym_sizes=[4,3]
   2  %3       = validate %2 : f32[4,3]
   3  %4       = ReluBackward0 %3  result=$r
   4  %5       = validate %4 : f32[4,3]
   5  %6, %7   = AddBackward0 %5  alpha=1 other_scalar_type=f32 self_scalar_type=f32 need=[1,1]
   6  %8, %9   = validate %6, %7 : f32[4,3], f32[3]     # b was broadcast: sum_to [4,3] -> [3]
   7  accumulate_grad @b %9                  # AccumulateGrad runs as soon as it is ready
   8  _, %10   = MmBackward0 %8  self=$x self_sym_sizes=[4,5] self_sym_strides=[5,1] self_layout=strided
                 mat2=none mat2_sym_sizes=[5,3] mat2_sym_strides=[3,1] mat2_layout=strided need=[0,1]
   9  _, %11   = validate none, %10 : _, f32[5,3]
  10  accumulate_grad @w %11
)";
  const std::string canonical = R"(program mlp
  grad %g0 : f32[]
  saved $x : f32[4,5]
  saved $r : f32[4,3]
  leaf @w : f32[5,3]
  leaf @b : f32[3]
code
  %1 = validate %g0 : f32[]
  %2 = SumBackward0 %1  self_sym_sizes=[4,3]
  %3 = validate %2 : f32[4,3]
  %4 = ReluBackward0 %3  result=$r
  %5 = validate %4 : f32[4,3]
  %6, %7 = AddBackward0 %5  alpha=1 other_scalar_type=f32 self_scalar_type=f32
  %8, %9 = validate %6, %7 : f32[4,3], f32[3]
  accumulate_grad @b %9
  _, %10 = MmBackward0 %8  mat2=none mat2_layout=strided mat2_sym_sizes=[5,3] mat2_sym_strides=[3,1] self=$x self_layout=strided self_sym_sizes=[4,5] self_sym_strides=[5,1] need=[0,1]
  _, %11 = validate none, %10 : _, f32[5,3]
  accumulate_grad @w %11
)";
  // The MmBackward0 line goes on in the next line, which starts with a field.
  const Program program = parse_program(dis);
  CHECK(print_program(program) == canonical);
  CHECK(parse_program(canonical) == program);
  CHECK(print_program(program, PrintOptions{true}).find("\n   9  _, %11 = validate none, %10 : _, f32[5,3]\n") !=
        std::string::npos);

  CHECK(program.name == "mlp");
  CHECK(program.saved[1].name == "r");
  CHECK(program.leaves[0].type == TensorType{DType::Float32, {5, 3}, Device::CPU});
  CHECK(program.code.size() == 11);
  REQUIRE(program.code[5].attrs.size() == 3);
  CHECK(program.code[5].attrs[0] == Attr{"alpha", Scalar(1)});  // an int Scalar, as written
  CHECK(program.code[5].need == std::vector<bool>{true, true});
  CHECK(program.code[7].op == Opcode::AccumulateGrad);
  CHECK(program.code[7].target == "b");
  CHECK(program.code[8].results[0] == std::nullopt);
  REQUIRE(program.code[8].attrs.size() == 8);
  CHECK(program.code[8].attrs[0] == Attr{"mat2", None{}});
  CHECK(program.code[8].attrs[1] == Attr{"mat2_layout", Layout::Strided});
  CHECK(program.code[8].attrs[7] == Attr{"self_sym_strides", IntList{5, 1}});
  CHECK(program.code[9].metadata[0] == std::nullopt);
  CHECK(program.code[9].metadata[1] == InputMetadata{DType::Float32, {5, 3}});
}

TEST_CASE("text: the first program of docs/program.md") {
  const Program program = parse_program(R"(
program mul                                    # z = x * y; z.sum().backward()
  grad   %g : f32[3]                           # d loss / d z, given when the program runs
  saved  $x : f32[3] = [1.0, 2.0, 3.0]         # tensors the forward saved, inline...
  saved  $y : f32[3]                           # ...or from the bundle, under the name "$y"
  leaf   @x : f32[3]                           # tensors whose .grad AccumulateGrad updates
  leaf   @y : f32[3]
code
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @y %4
  accumulate_grad @x %3
)");
  CHECK(values_of<float>(program.saved[0].value) == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK_FALSE(program.saved[1].value.has_value());
  CHECK(print_instruction(program.code[1]) ==
        "%1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32");
}

// -------------------------------------------------------- field values ---

TEST_CASE("text: field values of every kind") {
  const std::string text = R"(program kinds
  saved $i : i64[2]
code
  %1 = GeluBackward0 %g  approximate="tan\"h\\\n\t\x41\xc3\xa9" self=$i
  %2 = IndexBackward0 %g  indices=[$i, none] self_options={requires_grad=false, layout=sparse_csr, device=cuda, dtype=f64} self_sym_sizes=[4,-3]
  %3, %4 = IndexPutBackward0 %g  accumulate=true indices=[] values_info={options={}, sizes=[2]}
  %5 = CatBackward0 %g  dim=-1 tensors_args_scalartypes=[f32, b8] tensors_args_sizes_symint=[[2,3], [], [4]]
  %6 = AsStridedBackward0 %g  self_geometry={sizes=[2], strides=[1], storage_offset=3} size=[2] storage_offset=none stride=[]
  %7, %8 = HuberLossBackward0 %g  delta=1 reduction=-9223372036854775808 self=$i target=$i
  %9 = LeakyReluBackward0 %g  negative_slope=-0.0 self=$i
  %10, %11 = AddBackward0 %g  alpha=true other_scalar_type=i64 self_scalar_type=f64
  %12, %13 = MmBackward0 %g  mat2=$i mat2_layout=jagged mat2_sym_sizes=[] mat2_sym_strides=[] self=none self_layout=mkldnn self_sym_sizes=[] self_sym_strides=[]
)";
  const std::string canonical = R"(program kinds
  saved $i : i64[2]
code
  %1 = GeluBackward0 %g  approximate="tan\"h\\\n\tAé" self=$i
  %2 = IndexBackward0 %g  indices=[$i, none] self_options={dtype=f64, device=cuda, layout=sparse_csr, requires_grad=false} self_sym_sizes=[4,-3]
  %3, %4 = IndexPutBackward0 %g  accumulate=true indices=[] values_info={sizes=[2], options={}}
  %5 = CatBackward0 %g  dim=-1 tensors_args_scalartypes=[f32, b8] tensors_args_sizes_symint=[[2,3], [], [4]]
  %6 = AsStridedBackward0 %g  self_geometry={sizes=[2], strides=[1], storage_offset=3} size=[2] storage_offset=none stride=[]
  %7, %8 = HuberLossBackward0 %g  delta=1.0 reduction=-9223372036854775808 self=$i target=$i
  %9 = LeakyReluBackward0 %g  negative_slope=-0.0 self=$i
  %10, %11 = AddBackward0 %g  alpha=true other_scalar_type=i64 self_scalar_type=f64
  %12, %13 = MmBackward0 %g  mat2=$i mat2_layout=jagged mat2_sym_sizes=[] mat2_sym_strides=[] self=none self_layout=mkldnn self_sym_sizes=[] self_sym_strides=[]
)";
  const Program program = parse_program(text);
  CHECK(print_program(program) == canonical);
  const auto& code = program.code;
  CHECK(code[0].attrs[0] == Attr{"approximate", std::string("tan\"h\\\n\tA\xc3\xa9")});
  CHECK(code[1].attrs[0] == Attr{"indices", std::vector<std::optional<SavedRef>>{SavedRef{"i"}, std::nullopt}});
  CHECK(code[1].attrs[1] ==
        Attr{"self_options", TensorOptions{DType::Float64, Device::CUDA, Layout::SparseCsr, false}});
  CHECK(code[1].attrs[2] == Attr{"self_sym_sizes", IntList{4, -3}});
  CHECK(code[2].attrs[0] == Attr{"accumulate", true});
  CHECK(code[2].attrs[1] == Attr{"indices", std::vector<std::optional<SavedRef>>{}});
  CHECK(code[2].attrs[2] == Attr{"values_info", TypeAndSize{{2}, TensorOptions{}}});
  CHECK(code[3].attrs[0] == Attr{"dim", std::int64_t{-1}});
  CHECK(code[3].attrs[1] == Attr{"tensors_args_scalartypes", std::vector<DType>{DType::Float32, DType::Bool}});
  CHECK(code[3].attrs[2] == Attr{"tensors_args_sizes_symint", std::vector<IntList>{{2, 3}, {}, {4}}});
  CHECK(code[4].attrs[0] == Attr{"self_geometry", TensorGeometry{{2}, {1}, 3}});
  CHECK(code[4].attrs[2] == Attr{"storage_offset", None{}});
  CHECK(code[5].attrs[0] == Attr{"delta", 1.0});  // an integer where a float is expected
  CHECK(code[5].attrs[1] == Attr{"reduction", std::numeric_limits<std::int64_t>::min()});
  CHECK(code[6].attrs[0] == Attr{"negative_slope", Scalar(-0.0)});
  CHECK(code[7].attrs[0] == Attr{"alpha", Scalar(true)});
  CHECK(code[8].attrs[1] == Attr{"mat2_layout", Layout::Jagged});
  CHECK(code[8].attrs[5] == Attr{"self_layout", Layout::Mkldnn});
}

TEST_CASE("text: floats print in their shortest spelling, with their kind visible") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<double, std::string>> cases = {
      {1.0, "1.0"},       {-0.0, "-0.0"},      {0.1, "0.1"},     {1e-05, "1e-05"},
      {1e20, "1e+20"},    {1e16, "1e+16"},     {1e15, "1000000000000000.0"},
      {123456.0, "123456.0"}, {5e-324, "5e-324"}, {inf, "inf"}, {-inf, "-inf"},
      {nan, "nan"},       {-nan, "-nan"},      {-2.5e-3, "-0.0025"}};
  for (const auto& [value, spelling] : cases) {
    CAPTURE(spelling);
    Instr instr;
    instr.op = Opcode::Call;
    instr.node = "HuberLossBackward0";
    instr.results = {"r", "s"};
    instr.operands = {"g"};
    instr.need = {true, true};
    instr.attrs = {Attr{"delta", value}};
    const std::string line = "%r, %s = HuberLossBackward0 %g  delta=" + spelling;
    CHECK(print_instruction(instr) == line);
    const Program parsed = parse_program("program p\ncode\n" + line + "\n");
    CHECK(bits_of(std::get<double>(parsed.code[0].attrs[0].value)) == bits_of(value));
  }
}

TEST_CASE("text: scalars keep their kind and strings their bytes") {
  Instr instr;
  instr.op = Opcode::Call;
  instr.node = "LeakyReluBackward0";
  instr.results = {"r"};
  instr.operands = {std::nullopt};
  instr.need = {true};
  instr.attrs = {Attr{"self", SavedRef{"0"}}, Attr{"negative_slope", Scalar(2)}};  // out of schema order
  CHECK(print_instruction(instr) == "%r = LeakyReluBackward0 none  negative_slope=2 self=$0");
  instr.attrs[1].value = Scalar(2.0);
  CHECK(print_instruction(instr) == "%r = LeakyReluBackward0 none  negative_slope=2.0 self=$0");
  instr.attrs[1].value = Scalar(false);
  CHECK(print_instruction(instr) == "%r = LeakyReluBackward0 none  negative_slope=false self=$0");
  // A complex Scalar in Python's spelling, the imaginary part always signed; 0.5j alone reads as 0+0.5j.
  instr.attrs[1].value = Scalar(std::complex<double>(2, -0.5));
  CHECK(print_instruction(instr) == "%r = LeakyReluBackward0 none  negative_slope=2.0-0.5j self=$0");
  CHECK(parse_program("program p\ncode\n  " + print_instruction(instr)).code[0].attrs[0] == instr.attrs[1]);
  for (const char* spelling : {"0.5j", "0+0.5j", "0.0+0.5j"}) {
    CAPTURE(spelling);
    const Program parsed =
        parse_program("program p\ncode\n  %r = LeakyReluBackward0 none  negative_slope=" + std::string(spelling) + " self=$0");
    CHECK(parsed.code[0].attrs[0] == Attr{"negative_slope", Scalar(std::complex<double>(0, 0.5))});
  }
  instr.attrs[1].value = Scalar(false);
  instr.need = {false};
  instr.origin = std::string("a\"b\\c\nd\te\x01\x7f\0f\xc3\xa9", 15);
  CHECK(print_instruction(instr) ==
        R"(%r = LeakyReluBackward0 none  negative_slope=false self=$0 need=[0] origin="a\"b\\c\nd\te\x01\x7f\x00fé")");
  const Program parsed = parse_program("program p\ncode\n  " + print_instruction(instr));
  CHECK(parsed.code[0].origin == instr.origin);
  // need is written when its length differs from the node's inputs, even with every bit 1.
  instr.need = {true, true};
  CHECK(print_instruction(instr).find(" need=[1,1] ") != std::string::npos);
  instr.need = {};
  CHECK(print_instruction(instr).find(" need=[] ") != std::string::npos);
}

// ------------------------------------------------------ tensor literals ---

TEST_CASE("text: tensor literals print as nested brackets") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(print_tensor_literal(tensor({{1.0, 2.5}, {-0.0, 1e-05}}, DType::Float64)) == "[[1.0, 2.5], [-0.0, 1e-05]]");
  CHECK(print_tensor_literal(tensor({nan, -inf}, DType::Float64)) == "[nan, -inf]");
  // float32 elements in float's shortest spelling, not double's (0.1f is 0.10000000149011612).
  CHECK(print_tensor_literal(tensor({0.1f, 16777216.0f, 3.4028235e38f, 1e-45f}, DType::Float32)) ==
        "[0.1, 16777216.0, 3.4028235e+38, 1e-45]");
  CHECK(print_tensor_literal(from_vector<std::int64_t>({std::numeric_limits<std::int64_t>::min(), 7}, {2})) ==
        "[-9223372036854775808, 7]");
  CHECK(print_tensor_literal(from_vector<bool>({true, false, true, true}, {2, 1, 2})) ==
        "[[[true, false]], [[true, true]]]");
  CHECK(print_tensor_literal(scalar_tensor(1.5, DType::Float32)) == "1.5");
  CHECK(print_tensor_literal(zeros({0}, DType::Float64)) == "[]");
  CHECK(print_tensor_literal(zeros({2, 0}, DType::Int64)) == "[[], []]");
  CHECK(print_tensor_literal(zeros({0, 3})) == "[]");
  // A view prints its own elements, not its storage's.
  const Tensor matrix = tensor({{1.0, 2.0}, {3.0, 4.0}}, DType::Float64);
  CHECK(print_tensor_literal(matrix.contiguous()) == "[[1.0, 2.0], [3.0, 4.0]]");
}

TEST_CASE("text: tensor literals read as the declared dtype") {
  const Program program = parse_program(R"(program p
  saved $a : f32[3] = [0.1, 16777217, -nan]
  saved $b : f64[2] = [0.1, 1]
  saved $c : i64[2] = [-9223372036854775808, 9223372036854775807]
  saved $d : b8[2,0] = [[], []]
  saved $e : b8[] = true
  saved $f : f32[0,1000000000000] = []
  saved $g : f64[1000000000000,1000000000000] cuda
code
)");
  const std::vector<float> a = values_of<float>(program.saved[0].value);
  CHECK(bits_of(a[0]) == bits_of(0.1f));  // rounded once, from the decimal text
  CHECK(a[1] == 16777216.0f);
  CHECK(bits_of(a[2]) == 0xffc00000u);  // a quiet NaN with its sign
  CHECK(bits_of(values_of<double>(program.saved[1].value)[0]) == bits_of(0.1));
  CHECK(values_of<double>(program.saved[1].value)[1] == 1.0);
  CHECK(values_of<std::int64_t>(program.saved[2].value) ==
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()});
  CHECK(program.saved[3].value->sizes() == Shape{2, 0});
  CHECK(program.saved[3].value->dtype() == DType::Bool);
  CHECK(program.saved[4].value->dim() == 0);
  CHECK(values_of<bool>(program.saved[4].value) == std::vector<bool>{true});
  CHECK(program.saved[5].value->sizes() == Shape{0, 1000000000000});
  CHECK(program.saved[6].type == TensorType{DType::Float64, {1000000000000, 1000000000000}, Device::CUDA});
  CHECK_FALSE(program.saved[6].value.has_value());
}

// ---------------------------------------------------------- the parser ---

TEST_CASE("text: hook instructions take the forms of their kinds") {
  const Program program = parse_program(R"(program hooks
  leaf @w : f32[3]
  hook &t : tensor_pre
  hook &pre : pre
  hook &post : post
  hook &acc : post_acc_grad
code
  %1 = hook &t %0
  %2, %3 = hook &pre %0, none
  %4 = hook &post %2, %0, %1
  hook &acc @w origin="model.py:2"
)");
  const auto& code = program.code;
  CHECK(code[0].op == Opcode::Hook);
  CHECK(code[0].target == "t");
  CHECK(code[0].results == std::vector<std::optional<std::string>>{"1"});
  CHECK(code[1].operands == std::vector<std::optional<std::string>>{"0", std::nullopt});
  CHECK(code[2].operands.size() == 3);
  CHECK(code[3].leaf == "w");
  CHECK(code[3].results.empty());
  CHECK(code[3].operands.empty());
  CHECK(code[3].origin == "model.py:2");
  for (const Instr& instr : code) CHECK(instr.need.empty());
}

TEST_CASE("text: declarations and instructions remember where they were written") {
  const Program program = parse_program("program p\n  grad %g : f32[]\n\tleaf @w : f32[]\ncode\n\n  0 %1 = add %g, %g\n"
                                        "  add %1, %1\n",
                                        "where.bwd");
  CHECK(program.grads[0].where.file == "where.bwd");
  CHECK(program.grads[0].where.line == 2);
  CHECK(program.grads[0].where.column == 3);
  CHECK(program.leaves[0].where.line == 3);
  CHECK(program.leaves[0].where.column == 2);
  CHECK(program.code[0].where.file == "where.bwd");
  CHECK(program.code[0].where.line == 6);
  CHECK(program.code[0].where.column == 5);
  CHECK(program.code[1].where.line == 7);
  CHECK(program.code[1].where.column == 3);
  CHECK(first_line(parse_error("program p\ncode\n  7 %1 = add %g, %g\n")) ==
        "t.bwd:3:3: error: instruction number 7 does not match its position 0");
  const Program numbered = parse_program("program p\ncode\n  0 %1 = add %g, %g\n\n  1  add %1, %1\n", "n.bwd");
  CHECK(numbered.code[0].where.line == 3);
  CHECK(numbered.code[0].where.column == 5);  // the instruction, after its number
  CHECK(numbered.code[1].where.line == 5);
  CHECK(numbered.code[1].results.empty());
}

TEST_CASE("text: a parse error shows the line and a caret under the spot") {
  CHECK(parse_error("program p\ncode\n  %8, %9 = MmBackwards0 %6  self=$x\n") ==
        "t.bwd:3:12: error: unknown backward node 'MmBackwards0'\n"
        "    %8, %9 = MmBackwards0 %6  self=$x\n"
        "             ^");
  // Tabs in the line are kept in the caret's indent, and a UTF-8 character counts as one column.
  CHECK(parse_error("program p\ncode\n\t%1 = add %g, %g origin=\"caf\xc3\xa9\" ?\n") ==
        "t.bwd:3:32: error: unexpected character '?'\n"
        "  \t%1 = add %g, %g origin=\"caf\xc3\xa9\" ?\n"
        "  \t" + std::string(30, ' ') + "^");
}

TEST_CASE("text: malformed input gives a clear error at the spot") {
  const std::string head = "program p\n  grad %g : f32[3]\n  saved $x : f32[3]\n  leaf @w : f32[3]\ncode\n";
  struct Case {
    std::string text;
    std::string error;  // the message's first line
  };
  const std::vector<Case> cases = {
      {"", "t.bwd:1:1: error: the text is empty: expected 'program NAME'"},
      {"# nothing\n\n", "t.bwd:3:1: error: the text is empty: expected 'program NAME'"},
      {"code\n", "t.bwd:1:1: error: expected 'program NAME', got 'code'"},
      {"program\n", "t.bwd:1:8: error: expected the program's name, got end of line"},
      {"program %p\n", "t.bwd:1:9: error: expected the program's name, got '%p'"},
      {"program p\n  grad %g : f32[3]\n",
       "t.bwd:3:1: error: missing 'code': the declarations end with a line 'code', then the instructions"},
      {"program p\n  grads %g : f32[3]\ncode\n",
       "t.bwd:2:3: error: unknown declaration 'grads' (grad, saved, leaf, hook, function or output; instructions "
       "come after 'code')"},
      {"program p\n  %0 = add %g, %g\n",
       "t.bwd:2:3: error: expected a declaration (grad, saved, leaf, hook, function, output) or 'code', got '%0'"},
      {"program p\n  saved $x : f8[3]\ncode\n",
       "t.bwd:2:14: error: unknown dtype 'f8' (b8, u8, i8, i16, i32, i64, u16, u32, u64, f16, bf16, f32, f64, c32, c64 or "
       "c128)"},
      {"program p\n  saved $x f32[3]\ncode\n", "t.bwd:2:12: error: expected ':' before the type, got 'f32'"},
      {"program p\n  saved $x : f32[-1]\ncode\n", "t.bwd:2:18: error: a size must not be negative"},
      {"program p\n  saved $x : f32[3] gpu\ncode\n", "t.bwd:2:21: error: unknown device 'gpu' (cpu or cuda)"},
      {"program p\n  saved x : f32[3]\ncode\n", "t.bwd:2:9: error: expected a saved tensor '$NAME', got 'x'"},
      {"program p\n  leaf @v : f32[3] @w\ncode\n", "t.bwd:2:20: error: unexpected '@w' after the declaration"},
      {"program p\n  hook &h : pre_hook\ncode\n",
       "t.bwd:2:13: error: unknown hook kind 'pre_hook' (tensor_pre, pre, post or post_acc_grad)"},
      // tensor literals
      {"program p\n  saved $x : f32[2] = [1.0, 2.0, 3.0]\ncode\n",
       "t.bwd:2:34: error: tensor literal does not match f32[2]: dimension 0 has more than 2 elements"},
      {"program p\n  saved $x : f32[2,2] = [[1.0, 2.0], [3.0]]\ncode\n",
       "t.bwd:2:42: error: tensor literal does not match f32[2,2]: dimension 1 has 1 element, not 2"},
      {"program p\n  saved $x : f32[2] = [[1.0], [2.0]]\ncode\n",
       "t.bwd:2:24: error: tensor literal does not match f32[2]: nested deeper than its 1 dimension"},
      {"program p\n  saved $x : f32[2] = 1.0\ncode\n",
       "t.bwd:2:23: error: tensor literal does not match f32[2]: expected '[' for dimension 0, got '1.0'"},
      {"program p\n  saved $x : i64[1] = [1.5]\ncode\n",
       "t.bwd:2:24: error: expected an integer (an element of i64[1]), got '1.5'"},
      {"program p\n  saved $x : b8[1] = [1]\ncode\n",
       "t.bwd:2:23: error: expected true or false (an element of b8[1]), got '1'"},
      {"program p\n  saved $x : f32[] = 1e39\ncode\n", "t.bwd:2:22: error: 1e39 is out of range for f32"},
      {"program p\n  saved $x : f64[] = -1e-400\ncode\n", "t.bwd:2:22: error: -1e-400 is out of range for f64"},
      {"program p\n  saved $x : i64[] = 9223372036854775808\ncode\n",
       "t.bwd:2:22: error: integer 9223372036854775808 does not fit in int64"},
      {"program p\n  saved $x : f32[1] = [1.0\ncode\n", "t.bwd:3:1: error: expected ',' or ']', got 'code'"},
      {"program p\n  saved $x : f32[0,4611686018427387904,4] = []\ncode\n",
       "t.bwd:2:45: error: the sizes of f32[0,4611686018427387904,4] are too large for a tensor"},
      {"program p\n  saved $x : f32[" + ones(65) + "] = " + std::string(65, '[') + "\ncode\n",
       "t.bwd:2:215: error: brackets nested more than 64 deep"},
      // instructions
      {head + "  %1 = MmBackwards0 %g\n", "t.bwd:6:8: error: unknown backward node 'MmBackwards0'"},
      {head + "  %1 = CopySlices[Mul] %g\n", "t.bwd:6:19: error: unknown backward node 'Mul'"},
      {head + "  %1 = CopySlices %g\n",
       "t.bwd:6:19: error: expected '[' after CopySlices (CopySlices[NODE]), got '%g'"},
      {head + "  %1 = ReluBackward0 %g  reslt=$x\n",
       "t.bwd:6:26: error: ReluBackward0 has no field 'reslt' (it takes result, need, origin)"},
      {head + "  %1 = ReluBackward0 %g  result=$x result=$x\n", "t.bwd:6:36: error: 'result' is given twice"},
      {head + "  %1 = ReluBackward0 %g  result\n", "t.bwd:6:32: error: expected '=' after 'result', got end of line"},
      {head + "  %1 = ReluBackward0 %g  result=3\n",
       "t.bwd:6:33: error: expected a saved tensor '$NAME' or none for 'result' (Tensor), got '3'"},
      {head + "  %1 = SumBackward0 %g  self_sym_sizes=none\n",
       "t.bwd:6:40: error: expected a list of integers [...] for 'self_sym_sizes' (SymInt[]), got 'none'"},
      {head + "  %1 = SumBackward0 %g  self_sym_sizes=[9223372036854775808]\n",
       "t.bwd:6:41: error: integer 9223372036854775808 does not fit in int64"},
      {head + "  %1 = SumBackward0 %g  self_sym_sizes=[1x]\n", "t.bwd:6:41: error: malformed number '1x'"},
      {head + "  %1 = SumBackward0 %g  self_sym_sizes=[1e]\n",
       "t.bwd:6:41: error: malformed number '1e': the exponent has no digits"},
      {head + "  %1 = SumBackward0 %g  need=[1,2]\n", "t.bwd:6:33: error: expected a need bit, 0 or 1, got '2'"},
      {head + "  %1 = MmBackward0 %g  self_layout=dense\n",
       "t.bwd:6:36: error: unknown layout 'dense' (strided, sparse_coo, sparse_csr, mkldnn, sparse_csc, sparse_bsr, "
       "sparse_bsc or jagged)"},
      {head + "  %1 = CopySlices[ReluBackward0] %g  base={sizes=[1], stride=[1], storage_offset=0}\n",
       "t.bwd:6:55: error: TensorGeometry has no part 'stride' (its parts: sizes, strides, storage_offset)"},
      {head + "  %1 = CopySlices[ReluBackward0] %g  base={sizes=[1], strides=[1]}\n",
       "t.bwd:6:66: error: TensorGeometry needs its part 'storage_offset'"},
      {head + "  %1 = ToCopyBackward0 %g  self_options={dtype=f32, dtype=f64}\n",
       "t.bwd:6:53: error: 'dtype' is given twice"},
      {head + "  %1 = ReluBackward0 %g  origin=\"m.py\" result=$x\n",
       "t.bwd:6:40: error: unexpected 'result' after the instruction"},
      {head + "  %1 = add %g, %g %x\n", "t.bwd:6:19: error: unexpected '%x' after the instruction"},
      {head + "  accumulate_grad @w %g alpha=1\n",
       "t.bwd:6:25: error: accumulate_grad has no field 'alpha' (it takes origin)"},
      {head + "  %1 = call_backward &F %g  need=[1] save=[$x]\n",
       "t.bwd:6:38: error: call_backward has no field 'save' (it takes saved, need, origin)"},
      {head + "  %1 = validate %g : f33[3]\n", "t.bwd:6:22: error: unknown dtype 'f33' (b8, u8, i8, i16, i32, i64, u16, u32, u64, f16, bf16, f32, f64, "
                                              "c32, c64 or c128)"},
      {head + "  %1 = validate %g : f32[3]{grad=f64}\n",
       "t.bwd:6:29: error: edge metadata has no part 'grad' (its parts: device, grad_dtype, subclass)"},
      {head + "  %1 = zeros f32[3]\n", "t.bwd:6:14: error: expected ':' before the zeros' type, got 'f32'"},
      {head + "  0 %1 = add %g, %g\n  2 %2 = add %1, %1\n",
       "t.bwd:7:3: error: instruction number 2 does not match its position 1"},
      {head + "  %1 add %g\n", "t.bwd:6:6: error: expected '=' after the results, got 'add'"},
      {head + "  %1, = add %g\n", "t.bwd:6:7: error: expected a result '%NAME' or '_', got '='"},
      {head + "  = add %g\n", "t.bwd:6:3: error: expected an instruction (a node name, validate, add, zeros, ...), got '='"},
      {head + "  accumulate_grad %w %g\n", "t.bwd:6:19: error: expected a leaf '@NAME', got '%w'"},
      {head + "  output @w %g\n", "t.bwd:6:10: error: expected an output '^NAME', got '@w'"},
      {head + "  %1 = add %, %g\n", "t.bwd:6:13: error: expected a name after '%', got ','"},
      {head + "  %1 = add %0abc, %g\n",
       "t.bwd:6:12: error: bad name '%0abc': a name starts with a letter or '_', or is digits only"},
      {head + "  %1 = add %g; %g\n", "t.bwd:6:14: error: unexpected character ';'"},
      {head + "  %1 = add - %g\n", "t.bwd:6:12: error: unexpected character '-'"},
      {head + "  saved $y : f32[3]\n",
       "t.bwd:6:3: error: a declaration ('saved') after 'code': declarations come before 'code'"},
      // strings
      {head + "  output ^o %g origin=\"m.py\n", "t.bwd:6:23: error: unterminated string: no closing '\"' on this line"},
      {head + "  output ^o %g origin=\"a\\qb\"\n",
       "t.bwd:6:25: error: unknown escape '\\q' in a string (known: \\\\ \\\" \\n \\t \\xHH)"},
      {head + "  output ^o %g origin=\"\\x4\"\n",
       "t.bwd:6:24: error: bad escape in a string: \\x needs two hex digits"},
      {head + "  output ^o %g origin=\"a\x01\"\n",
       "t.bwd:6:25: error: control character '\\x01' in a string: write it as \\xHH"},
      {head + "  output ^o %g origin=m.py\n", "t.bwd:6:23: error: expected a string (origin=\"FILE:LINE\"), got 'm.py'"},
      {std::string("program p\0", 10), "t.bwd:1:10: error: unexpected character '\\x00'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(first_line(parse_error(c.text)) == c.error);
  }
}

// Nothing in the parser may crash or hang on hostile text: every failure is a refgrad::Error.
TEST_CASE("text: hostile input raises Error and never crashes") {
  // Deep nesting is refused before it can recurse.
  CHECK(parse_error("program p\n  saved $x : f32[" + ones(100000) + "] = " + std::string(100000, '['))
            .find("nested more than 64") != std::string::npos);
  CHECK(first_line(parse_error("program p\ncode\n  %1 = SumBackward0 %g  self_sym_sizes=" + std::string(100000, '['))) ==
        "t.bwd:3:41: error: expected an integer, got '['");
  // A literal may nest as deep as the limit.
  const Program deep = parse_program("program p\n  saved $x : f32[" + ones(64) + "] = " + std::string(64, '[') + "2.0" +
                                     std::string(64, ']') + "\ncode\n");
  CHECK(deep.saved[0].value->dim() == 64);
  CHECK(deep.saved[0].value->item<float>() == 2.0f);
  // Random edits of printed programs: each either parses or raises Error.
  std::mt19937_64 engine(7);
  const std::string alphabet = "%$@&^[]{}=,:\"\\#-._ \n\t0123456789aefinx\x01\xff";
  int parsed = 0, refused = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    std::string text = print_program(testing::random_program(seed % 50));
    for (int edit = 0; edit < 1 + static_cast<int>(seed % 4); ++edit) {
      const std::size_t at = engine() % (text.size() + 1);
      switch (engine() % 3) {
        case 0: text.insert(at, 1, alphabet[engine() % alphabet.size()]); break;
        case 1: if (at < text.size()) text.erase(at, 1); break;
        default: if (at < text.size()) text[at] = alphabet[engine() % alphabet.size()]; break;
      }
    }
    try {
      parse_program(text);
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}

TEST_CASE("text: a line that starts with name= continues the instruction above") {
  const std::string text = R"(program split
  grad %g : f32[2,3]
  saved $x : f32[2,3]
code
  %0, %1 = MulBackward0 %g  other=$x   # a comment, then more fields
      other_scalar_type=f32
      self=$x self_scalar_type=f32
  _ = SumBackward0 %0  self_sym_sizes=[2,3]
  %2 = add %0, %1
)";
  const Program program = parse_program(text, "split.bwd");
  REQUIRE(program.code.size() == 3);
  CHECK(print_instruction(program.code[0]) ==
        "%0, %1 = MulBackward0 %g  other=$x other_scalar_type=f32 self=$x self_scalar_type=f32");
  CHECK(print_instruction(program.code[1]) == "_ = SumBackward0 %0  self_sym_sizes=[2,3]");  // `_ =` starts a line
  CHECK(program.code[2].op == Opcode::Add);
  // A field on a line of its own after a blank line is not a continuation.
  CHECK_THROWS_WITH_AS(parse_program("program p\n  grad %g : f32[]\ncode\n  %0 = SumBackward0 %g\n\n  self_sym_sizes=[]\n"),
                       doctest::Contains("<text>:6:3: error:"), Error);
}
