// Bytecode: assemble and disassemble, the binary file (its layout, its
// checksum, and what the reader does with damaged and hostile bytes), and
// binding saved fields to nodes. Expected bytes and offsets are worked out by
// hand from the layout in docs/program.md ("Binary bytecode").
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "random_program.hpp"
#include "refgrad/bytecode.hpp"

using namespace refgrad;

namespace {

using Names = std::vector<std::optional<std::string>>;

// A string of exactly the literal's bytes, embedded zeros included.
template <std::size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

TensorType type(DType dtype, Shape sizes, Device device = Device::CPU) { return TensorType{dtype, sizes, device}; }
TensorType f32(Shape sizes) { return type(DType::Float32, sizes); }

Instr instr(Opcode op, Names results, Names operands) {
  Instr i;
  i.op = op;
  i.results = std::move(results);
  i.operands = std::move(operands);
  return i;
}

Instr validate(Names results, Names operands, std::vector<std::optional<InputMetadata>> metadata) {
  Instr i = instr(Opcode::Validate, std::move(results), std::move(operands));
  i.metadata = std::move(metadata);
  return i;
}

Instr with_target(Instr i, std::string target) {
  i.target = std::move(target);
  return i;
}

std::vector<Attr> mul_fields(std::string self = "x") {
  return {Attr{"other", SavedRef{"y"}}, Attr{"other_scalar_type", DType::Float32}, Attr{"self", SavedRef{self}},
          Attr{"self_scalar_type", DType::Float32}};
}

// docs/program.md's first program: z = x * y, then z.sum().
constexpr std::string_view kMulText = R"(program mul
  grad   %g : f32[3]
  saved  $x : f32[3] = [1.0, 2.0, 3.0]
  saved  $y : f32[3]
  leaf   @x : f32[3]
  leaf   @y : f32[3]
code
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @y %4
  accumulate_grad @x %3
)";

Program mul_program() { return parse_program(kMulText, "mul.bwd"); }

// Every declaration kind, every opcode, every attribute value kind, and
// awkward values: NaN, -0.0, empty and bool tensors, bytes 0 and 0xFF in strings.
Program every_kind_program() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Program p;
  p.name = "every.kind";
  p.grads = {GradDecl{"g0", f32({3}), std::nullopt, {}},
             GradDecl{"g1", type(DType::Float64, {}), tensor(-0.0, DType::Float64), {}}};
  p.saved = {
      SavedDecl{"x", f32({3}), tensor({1.0, 2.0, 3.0}, DType::Float32), {}},
      SavedDecl{"y", f32({3}), std::nullopt, {}},
      SavedDecl{"i", type(DType::Int64, {2}),
                tensor({std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}}, DType::Int64), {}},
      SavedDecl{"m", type(DType::Bool, {3}), tensor({true, false, true}, DType::Bool), {}},
      SavedDecl{"e", type(DType::Bool, {2, 0}), zeros({2, 0}, DType::Bool), {}},
      SavedDecl{"n", type(DType::Float64, {2, 2}), tensor({{nan, -inf}, {-0.0, 1e-300}}, DType::Float64), {}},
      SavedDecl{"c", type(DType::Float32, {}, Device::CUDA), tensor(0.5, DType::Float32), {}},
  };
  p.leaves = {LeafDecl{"w", f32({3}), tensor({0.25, -0.0, 4.0}, DType::Float32), {}},
              LeafDecl{"v", type(DType::Float64, {2}), std::nullopt, {}}};
  p.hooks = {HookDecl{"tp", HookKind::TensorPre, {}}, HookDecl{"pre", HookKind::Pre, {}},
             HookDecl{"post", HookKind::Post, {}}, HookDecl{"acc", HookKind::PostAccGrad, {}}};
  p.functions = {FunctionDecl{"F", {}}, FunctionDecl{"My.Fn", {}}};
  p.outputs = {OutputDecl{"o", f32({3}), {}}, OutputDecl{"o2", type(DType::Int64, {}, Device::CUDA), {}}};

  InputMetadata odd{DType::Float32, {3}};
  odd.device = Device::CUDA;
  odd.grad_dtype = std::nullopt;
  odd.is_tensor_subclass = true;
  InputMetadata cast{DType::Float32, {3}};
  cast.grad_dtype = DType::Float64;
  p.code.push_back(validate({"0"}, {"g0"}, {InputMetadata{DType::Float32, {3}}}));

  Instr call = instr(Opcode::Call, {"1", std::nullopt}, {"0"});
  call.node = "MulBackward0";
  call.need = {true, false};
  call.attrs = mul_fields();
  call.origin = "model.py:14";
  p.code.push_back(call);

  Instr slices = instr(Opcode::CopySlices, {"2", "3"}, {"0"});
  slices.node = "MulBackward0";
  slices.need = {true, true};
  slices.attrs = {Attr{"base", TensorGeometry{{4}, {1}, 0}}, Attr{"view", TensorGeometry{{3}, {1}, 1}}};
  for (const Attr& attr : mul_fields()) slices.attrs.push_back(attr);
  p.code.push_back(slices);

  p.code.push_back(validate({"4", std::nullopt, "a.b"}, {"1", std::nullopt, "3"},
                            {cast, std::nullopt, odd}));
  p.code.push_back(instr(Opcode::Add, {"6"}, {"4", "a.b"}));
  Instr zero = instr(Opcode::Zeros, {"7"}, {});
  zero.metadata = {InputMetadata{DType::Float64, {0, 2}}};
  p.code.push_back(zero);
  p.code.push_back(with_target(instr(Opcode::AccumulateGrad, {}, {"6"}), "w"));
  p.code.push_back(with_target(instr(Opcode::Hook, {"8"}, {"7"}), "tp"));
  p.code.push_back(with_target(instr(Opcode::Hook, {"9", "10"}, {"8", std::nullopt}), "pre"));
  p.code.push_back(with_target(instr(Opcode::Hook, {"11"}, {"9", "10"}), "post"));
  Instr acc = with_target(instr(Opcode::Hook, {}, {}), "acc");
  acc.leaf = "w";
  p.code.push_back(acc);
  Instr backward = with_target(instr(Opcode::CallBackward, {"12", std::nullopt}, {"11"}), "My.Fn");
  backward.attrs = {Attr{"saved", std::vector<SavedRef>{{"x"}, {"y"}}}};
  backward.need = {true, false};
  p.code.push_back(backward);
  p.code.push_back(with_target(instr(Opcode::Output, {}, {"12"}), "o"));
  p.code.push_back(with_target(instr(Opcode::Output, {}, {std::nullopt}), "o2"));

  // Not a valid MulBackward0 call: assemble and the file carry any attribute.
  Instr values = instr(Opcode::Call, {"13", "14"}, {"0"});
  values.node = "MulBackward0";
  values.origin = bytes("odd \"origin\"\n\0\xff");
  values.attrs = {
      Attr{"none", None{}},
      Attr{"ref", SavedRef{"n"}},
      Attr{"refs", std::vector<SavedRef>{}},
      Attr{"optional_refs", std::vector<std::optional<SavedRef>>{SavedRef{"x"}, std::nullopt}},
      Attr{"int", std::int64_t{-5}},
      Attr{"ints", IntList{4, -3, std::numeric_limits<std::int64_t>::max()}},
      Attr{"nan", nan},
      Attr{"negative_zero", -0.0},
      Attr{"bool", true},
      Attr{"bool_scalar", Scalar(false)},
      Attr{"int_scalar", Scalar(std::int64_t{-7})},
      Attr{"float_scalar", Scalar(0.1)},
      Attr{"complex_scalar", Scalar(std::complex<double>(-0.0, nan))},
      Attr{"string", bytes("tanh \"\\\0\xff")},
      Attr{"dtype", DType::Float64},
      Attr{"layout", Layout::SparseBsc},
      Attr{"options", TensorOptions{DType::Float32, Device::CUDA, Layout::Strided, false}},
      Attr{"no_options", TensorOptions{}},
      Attr{"geometry", TensorGeometry{{2, 3}, {3, 1}, 5}},
      Attr{"type_and_size", TypeAndSize{{2, 3}, TensorOptions{DType::Bool, std::nullopt, std::nullopt, true}}},
      Attr{"dtypes", std::vector<DType>{DType::Float32, DType::Bool}},
      Attr{"sizes_list", std::vector<IntList>{{2, 3}, {}, {4}}},
  };
  p.code.push_back(values);
  return p;
}

std::span<const std::byte> bytes_of(const std::string& file) {
  return std::as_bytes(std::span(file.data(), file.size()));
}

std::uint64_t get_le(const std::string& file, std::size_t at, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) {
    value |= std::uint64_t{static_cast<unsigned char>(file.at(at + i))} << (8 * i);
  }
  return value;
}

void put_le(std::string& file, std::size_t at, std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) file.at(at + i) = static_cast<char>((value >> (8 * i)) & 0xFF);
}

// A mutated file with its checksum made right again, so that the reader's
// other checks are the ones that meet the mutation.
std::string reseal(std::string file) {
  std::vector<std::byte> bytes(file.size());
  std::memcpy(bytes.data(), file.data(), file.size());
  reseal_bytecode(bytes);
  std::memcpy(file.data(), bytes.data(), file.size());
  return file;
}

// Where section `id`'s payload starts: sections follow the 8-byte header,
// each an id byte and a u64 length.
std::size_t payload_of(const std::string& file, int id) {
  std::size_t at = 8;
  while (static_cast<unsigned char>(file.at(at)) != id) at += 9 + get_le(file, at + 1, 8);
  return at + 9;
}

std::string read_error(const std::string& file) {
  try {
    read_bytecode(bytes_of(file), "t.rgbc");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

std::string error_of(const auto& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

Program round_trip_file(const Program& program) {
  return disassemble(read_bytecode(bytes_of(write_bytecode(assemble(program)))));
}

}  // namespace

// ------------------------------------------------------ assemble, disassemble ---

TEST_CASE("bytecode: assemble lowers names to indices") {
  const Bytecode b = assemble(mul_program());
  CHECK(b.name == "mul");
  CHECK(b.register_names == std::vector<std::string>{"g", "0", "1", "2", "3", "4"});
  //                                   pc 0   pc 1      pc 2          pc 3 pc 4
  CHECK(b.registers == std::vector<std::uint32_t>{0, 1, 1, 2, 3, 2, 3, 4, 5, 5, 4});
  CHECK(b.nodes == std::vector<std::string>{"MulBackward0"});
  CHECK(b.need_masks == std::vector<std::vector<bool>>{{true, true}});
  CHECK(b.attribute_blocks.size() == 1);
  CHECK(b.metadata.size() == 3);
  CHECK(b.strings.empty());
  REQUIRE(b.code.size() == 5);
  const BytecodeInstr& call = b.code[1];
  CHECK(call.op == Opcode::Call);
  CHECK((call.first_operand == 2 && call.operand_count == 1 && call.first_result == 3 && call.result_count == 2));
  CHECK((call.arg == 0 && call.attrs == 0 && call.need == 0 && call.metadata == kNoIndex && call.origin == kNoIndex));
  const BytecodeInstr& check_grads = b.code[2];
  CHECK((check_grads.metadata == 1 && check_grads.metadata_count == 2 && check_grads.arg == kNoIndex));
  CHECK(b.code[3].arg == 1);  // accumulate_grad @y
  CHECK(b.code[4].arg == 0);  // accumulate_grad @x
  CHECK((b.code[4].first_operand == 10 && b.code[4].result_count == 0));
  // Pools hold each node, origin and need mask once: MulBackward0 three times, need=[1,0] twice.
  const Bytecode every = assemble(every_kind_program());
  CHECK(every.nodes == std::vector<std::string>{"MulBackward0"});
  CHECK(every.need_masks == std::vector<std::vector<bool>>{{true, false}, {true, true}});
  CHECK(every.strings.size() == 2);
  CHECK(every.attribute_blocks.size() == 4);
  CHECK(every.code[14].origin == 1);
}

TEST_CASE("bytecode: disassemble(assemble(p)) == p") {
  for (const Program& program : {Program{}, mul_program(), every_kind_program()}) {
    CHECK(disassemble(assemble(program)) == program);
  }
  // The equality is not vacuous: a changed origin shows.
  Program changed = every_kind_program();
  Bytecode b = assemble(changed);
  b.strings[0] = "model.py:15";
  CHECK_FALSE(disassemble(b) == changed);
}

TEST_CASE("bytecode: assemble names what it cannot resolve") {
  auto assemble_error = [](Instr bad) {
    Program p = mul_program();
    p.code.push_back(std::move(bad));
    return error_of([&] { assemble(p); });
  };
  CHECK(assemble_error(with_target(instr(Opcode::AccumulateGrad, {}, {"3"}), "z")) ==
        "assemble: instruction 5 (accumulate_grad @z): undeclared leaf @z");
  CHECK(assemble_error(with_target(instr(Opcode::Hook, {"9"}, {"3"}), "h")) ==
        "assemble: instruction 5 (hook &h): undeclared hook &h");
  CHECK(assemble_error(with_target(instr(Opcode::CallBackward, {"9"}, {"3"}), "F")) ==
        "assemble: instruction 5 (call_backward &F): undeclared function &F");
  CHECK(assemble_error(with_target(instr(Opcode::Output, {}, {"3"}), "x")) ==
        "assemble: instruction 5 (output ^x): undeclared output ^x");
  Instr hook = with_target(instr(Opcode::Hook, {}, {}), "h");
  Program with_hook = mul_program();
  with_hook.hooks = {HookDecl{"h", HookKind::PostAccGrad, {}}};
  hook.leaf = "q";
  with_hook.code.push_back(hook);
  CHECK(error_of([&] { assemble(with_hook); }) == "assemble: instruction 5 (hook &h): undeclared leaf @q");
  Instr unknown = instr(Opcode::Call, {"9"}, {"3"});
  unknown.node = "MulBackwards0";
  CHECK(assemble_error(unknown) == "assemble: instruction 5 (MulBackwards0): unknown backward node 'MulBackwards0'");
  Instr add = instr(Opcode::Add, {"9"}, {"3", "4"});
  add.node = "MulBackward0";
  CHECK(assemble_error(add) == "assemble: instruction 5 (add MulBackward0): add does not take a node");
  CHECK(assemble_error(with_target(instr(Opcode::Add, {"9"}, {"3", "4"}), "x")) ==
        "assemble: instruction 5 (add x): add does not take a target");
}

TEST_CASE("bytecode: disassemble checks indices of bytecode built in memory") {
  Bytecode b = assemble(mul_program());
  b.code[1].arg = 3;
  CHECK(error_of([&] { disassemble(b); }) == "disassemble: instruction 1: node index 3 is out of range (1 entries)");
  b = assemble(mul_program());
  b.code[2].operand_count = 9;
  CHECK(error_of([&] { disassemble(b); }) ==
        "disassemble: instruction 2: register run [5, +9) is out of range (11 entries)");
}

// ------------------------------------------------------------- binary file ---

TEST_CASE("bytecode: CRC-32 check value") {
  const std::string check = "123456789";
  CHECK(checksum_crc32(bytes_of(check)) == 0xCBF43926u);
  CHECK(checksum_crc32({}) == 0u);
}

TEST_CASE("bytecode: reseal_bytecode writes the CRC-32 of the body, little-endian, in the last four bytes") {
  std::vector<std::byte> bytes;
  for (char c : std::string("123456789????")) bytes.push_back(static_cast<std::byte>(c));
  reseal_bytecode(bytes);
  CHECK(bytes.size() == 13);
  CHECK(bytes[9] == std::byte{0x26});  // 0xCBF43926, low byte first
  CHECK(bytes[10] == std::byte{0x39});
  CHECK(bytes[11] == std::byte{0xF4});
  CHECK(bytes[12] == std::byte{0xCB});
  std::vector<std::byte> short_input{std::byte{1}, std::byte{2}};
  reseal_bytecode(short_input);  // too short to hold a checksum: left alone
  CHECK(short_input == std::vector<std::byte>{std::byte{1}, std::byte{2}});
}

TEST_CASE("bytecode: binary round trip") {
  for (const Program& program : {Program{}, mul_program(), every_kind_program()}) {
    CHECK(round_trip_file(program) == program);
    // Reading and writing again gives the same bytes.
    const std::string file = write_bytecode(assemble(program));
    CHECK(write_bytecode(read_bytecode(bytes_of(file))) == file);
  }
  CHECK(is_bytecode(bytes_of(write_bytecode(assemble(mul_program())))));
  CHECK_FALSE(is_bytecode(bytes_of(std::string("RGB"))));
  CHECK_FALSE(is_bytecode(bytes_of(std::string("program mul"))));
}

TEST_CASE("bytecode: random programs round trip through the binary file") {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    CAPTURE(seed);
    const Program program = testing::random_program(seed);
    CHECK(disassemble(assemble(program)) == program);
    CHECK(round_trip_file(program) == program);
  }
}

TEST_CASE("bytecode: text -> bytecode file -> text gives the same text") {
  const Program program = mul_program();
  CHECK(print_program(round_trip_file(program)) == print_program(program));
}

TEST_CASE("bytecode: header and little-endian layout by hand") {
  Program p;
  p.name = "mul";
  p.saved = {SavedDecl{"x", f32({2}), tensor({1.0, -2.0}, DType::Float32), {}}};
  const std::string file = write_bytecode(assemble(p));
  const std::string expected_start = bytes("RGBC")                 // magic
                                     + bytes("\x01\0\0\0")           // version 1
                                     + bytes("\x01")                 // section 1: program
                                     + bytes("\x07\0\0\0\0\0\0\0")   // its length: 4 + 3
                                     + bytes("\x03\0\0\0mul")        // the name
                                     + bytes("\x02");                // section 2: strings
  CHECK(file.substr(0, expected_start.size()) == expected_start);
  // saved $x : f32[2] = [1.0, -2.0]: name, type (dtype 2 = f32, one size, device 0 = cpu),
  // value flag, the value's type again, its byte count, then 1.0f and -2.0f little-endian.
  const std::string declaration = bytes("\x01\0\0\0x"
                                         "\x02\x01\0\0\0\x02\0\0\0\0\0\0\0\0"
                                         "\x01"
                                         "\x02\x01\0\0\0\x02\0\0\0\0\0\0\0\0"
                                         "\x08\0\0\0\0\0\0\0"
                                         "\0\0\x80\x3f"
                                         "\0\0\0\xc0");
  CHECK(declaration.size() == 5 + 14 + 1 + 14 + 8 + 8);
  CHECK(file.find(declaration) != std::string::npos);
  // The checksum closes the file, little-endian.
  const std::uint32_t crc = checksum_crc32(bytes_of(file).first(file.size() - 4));
  CHECK(get_le(file, file.size() - 4, 4) == crc);
  CHECK(static_cast<unsigned char>(file[file.size() - 4]) == (crc & 0xFFu));
}

TEST_CASE("bytecode: a truncated file is an error at every length") {
  const std::string file = write_bytecode(assemble(every_kind_program()));
  for (std::size_t n = 0; n < file.size(); ++n) {
    const std::string message = read_error(file.substr(0, n));
    if (n < 12) {
      CHECK(message == fmt::format("t.rgbc: offset 0: {} bytes is too short for a bytecode file "
                                   "(its header and checksum take 12)",
                                   n));
    } else {
      CHECK(message.starts_with(fmt::format("t.rgbc: offset {}: checksum mismatch", n - 4)));
    }
  }
  // With the checksum made right, the cut is met by the bounds checks.
  for (std::size_t n = 8; n < file.size() - 4; ++n) {
    const std::string message = read_error(reseal(file.substr(0, n) + std::string(4, '\0')));
    CHECK(message.starts_with("t.rgbc: offset "));
  }
}

TEST_CASE("bytecode: every single-bit flip is caught") {
  const std::string file = write_bytecode(assemble(mul_program()));
  for (std::size_t i = 0; i < file.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = file;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      const std::string message = read_error(flipped);
      if (i < 4) {
        CHECK(message == "t.rgbc: offset 0: not a refgrad bytecode file (it does not start with \"RGBC\")");
      } else if (i < 8) {
        CHECK(message.starts_with("t.rgbc: offset 4: bytecode version "));
      } else {
        CHECK(message.starts_with(fmt::format("t.rgbc: offset {}: checksum mismatch", file.size() - 4)));
      }
    }
  }
}

TEST_CASE("bytecode: resealed byte changes give an error or a bytecode, never a crash") {
  const std::string file = write_bytecode(assemble(every_kind_program()));
  int errors = 0;
  for (std::size_t i = 8; i < file.size() - 4; ++i) {
    for (const int mask : {0x01, 0x80, 0xFF}) {
      std::string changed = file;
      changed[i] = static_cast<char>(changed[i] ^ mask);
      changed = reseal(changed);
      try {
        disassemble(read_bytecode(bytes_of(changed)));
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("bytecode: hostile files with a valid checksum") {
  const std::string file = write_bytecode(assemble(mul_program()));
  const std::size_t nodes = payload_of(file, 3), registers = payload_of(file, 4), needs = payload_of(file, 5),
                    attributes = payload_of(file, 7), declarations = payload_of(file, 8), code = payload_of(file, 9);
  auto hostile = [&](std::size_t at, std::uint64_t value, std::size_t width) {
    std::string changed = file;
    put_le(changed, at, value, width);
    return read_error(reseal(changed));
  };

  SUBCASE("version") {
    std::string changed = file;
    put_le(changed, 4, 2, 4);  // no reseal: the version is checked before the checksum
    CHECK(read_error(changed) ==
          "t.rgbc: offset 4: bytecode version 2 is not supported (this refgrad reads version 1)");
  }
  SUBCASE("a huge count") {
    // nodes: count, then "MulBackward0" (4 + 12 bytes): 16 bytes after the count.
    CHECK(hostile(nodes, 0xFFFFFFFFu, 4) ==
          fmt::format("t.rgbc: offset {}: section 'nodes': 4294967295 nodes would take at least 17179869180 bytes, "
                      "16 left",
                      nodes));
  }
  SUBCASE("a huge string length") {
    CHECK(hostile(nodes + 4, 0xFFFFFFFFu, 4) ==
          fmt::format("t.rgbc: offset {}: node 0: node name of 4294967295 bytes exceeds the 12 bytes left", nodes + 4));
  }
  SUBCASE("a huge section length") {
    const std::size_t section = nodes - 9;
    const std::size_t left = file.size() - 4 - nodes;
    CHECK(hostile(section + 1, std::uint64_t{1} << 40, 8) ==
          fmt::format("t.rgbc: offset {}: section 'nodes': section length 1099511627776 exceeds the {} bytes left",
                      section + 1, left));
  }
  SUBCASE("a section out of order") {
    CHECK(hostile(nodes - 9, 7, 1) ==
          fmt::format("t.rgbc: offset {}: section 'nodes': expected section id 3, found 7", nodes - 9));
  }
  SUBCASE("an unknown node") {
    std::string changed = file;
    changed[nodes + 8 + 11] = '9';  // count, length, then "MulBackward0" -> "MulBackward9"
    CHECK(read_error(reseal(changed)) ==
          fmt::format("t.rgbc: offset {}: node 0: unknown backward node or ATen op 'MulBackward9'", nodes + 4));
  }
  SUBCASE("a register out of range") {
    // register names: count, then g 0 1 2 3 4 (5 bytes each); then the registers' count.
    const std::size_t first = registers + 4 + 6 * 5 + 4;
    CHECK(hostile(first, 9, 4) ==
          fmt::format("t.rgbc: offset {}: section 'registers': register index 9 is out of range (6 in the pool)",
                      first));
  }
  SUBCASE("a need bit that is not a bit") {
    // need masks: count, mask 0's count, its first bit.
    CHECK(hostile(needs + 8, 2, 1) ==
          fmt::format("t.rgbc: offset {}: section 'need masks': need bit must be 0 or 1, found 2", needs + 8));
  }
  SUBCASE("an unknown value tag") {
    // attribute blocks: count, block 0's count, field 0's name "other" (4 + 5), its tag.
    const std::size_t tag = attributes + 4 + 4 + 9;
    CHECK(hostile(tag, 20, 1) ==
          fmt::format("t.rgbc: offset {}: attribute block 0, field 'other': unknown value tag 20", tag));
  }
  SUBCASE("an unknown dtype") {
    // declarations: grads' count, grad 0's name "g" (4 + 1), its dtype.
    const std::size_t dtype = declarations + 4 + 5;
    CHECK(hostile(dtype, 16, 1) == fmt::format("t.rgbc: offset {}: grad declaration 0: unknown dtype 16", dtype));
  }
  // Saved $x's inline tensor: grads (4 + grad g: 5 + type 14 + flag 1), saved's count,
  // $x's name (5), type (14), flag (1); then the tensor's type (14) and byte count.
  const std::size_t tensor_type = declarations + 4 + 20 + 4 + 5 + 14 + 1;
  const std::size_t byte_count = tensor_type + 14;
  SUBCASE("a tensor byte count that does not match its type") {
    CHECK(hostile(byte_count, 8, 8) ==
          fmt::format("t.rgbc: offset {}: saved declaration 0: tensor f32[3] takes 12 bytes, the file says 8",
                      byte_count));
  }
  SUBCASE("a tensor too large to count") {
    CHECK(hostile(tensor_type + 5, std::uint64_t{1} << 62, 8) ==
          fmt::format("t.rgbc: offset {}: saved declaration 0: tensor f32[4611686018427387904] has too many bytes",
                      tensor_type));
  }
  SUBCASE("a negative size") {
    CHECK(hostile(tensor_type + 5, ~std::uint64_t{0}, 8) ==
          fmt::format("t.rgbc: offset {}: saved declaration 0: tensor f32[-1] has a negative size", tensor_type));
  }
  SUBCASE("an unknown opcode") {
    CHECK(hostile(code + 4, 10, 1) == fmt::format("t.rgbc: offset {}: instruction 0: unknown opcode 10", code + 4));
  }
  // Instruction 1 (the call) starts 45 bytes after instruction 0: opcode, then
  // first_operand, operand_count, first_result, result_count, arg, leaf, attrs, need, ...
  const std::size_t call = code + 4 + 45;
  SUBCASE("an arg out of range") {
    CHECK(hostile(call + 17, 5, 4) ==
          fmt::format("t.rgbc: offset {}: instruction 1: node index 5 is out of range (1 in the pool)", call + 17));
  }
  SUBCASE("an operand run out of range") {
    CHECK(hostile(call + 5, 11, 4) ==
          fmt::format("t.rgbc: offset {}: instruction 1: operand run [2, +11) is out of range (11 in the pool)",
                      call + 1));
  }
  SUBCASE("an arg on an opcode without one") {
    CHECK(hostile(code + 4 + 17, 0, 4) ==
          fmt::format("t.rgbc: offset {}: instruction 0: validate takes no arg, found 0", code + 4 + 17));
  }
  SUBCASE("bytes left over") {
    // One more byte inside the program section, counted in its length.
    std::string changed = file;
    changed.insert(8 + 9 + 7, 1, '\0');
    put_le(changed, 9, 8, 8);
    CHECK(read_error(reseal(changed)) ==
          fmt::format("t.rgbc: offset {}: section 'program': 1 unread bytes at the end of the section", 8 + 9 + 7));
    changed = file;
    changed.insert(file.size() - 4, 1, '\0');
    CHECK(read_error(reseal(changed)) ==
          fmt::format("t.rgbc: offset {}: 1 bytes after the last section", file.size() - 4));
  }
}

TEST_CASE("bytecode: a bool tensor element other than 0 or 1") {
  Program p;
  p.saved = {SavedDecl{"m", type(DType::Bool, {2}), tensor({true, false}, DType::Bool), {}}};
  std::string file = write_bytecode(assemble(p));
  // grads' count, saved's count, "m" (5), type (14), flag, the value's type (14), byte count (8).
  const std::size_t data = payload_of(file, 8) + 4 + 4 + 5 + 14 + 1 + 14 + 8;
  CHECK(static_cast<unsigned char>(file[data]) == 1);
  file[data] = 2;
  CHECK(read_error(reseal(file)) ==
        fmt::format("t.rgbc: offset {}: saved declaration 0: bool element 0 is 2, not 0 or 1", data));
}

// ------------------------------------------------------------------ binding ---

TEST_CASE("bytecode: bind MulBackward0 and run it") {
  const TensorMap tensors = {{"$y", tensor({4.0, 5.0, 6.0}, DType::Float32)},
                             {"%g", tensor({0.5, 1.0, 2.0}, DType::Float32)},
                             {"@y", tensor({1.0, 1.0, 1.0}, DType::Float32)}};
  const BoundProgram bound = bind(assemble(mul_program()), tensors);
  REQUIRE(bound.saved_values.size() == 2);
  CHECK(bound.saved_values[0].to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(bound.saved_values[1].to_vector<float>() == std::vector<float>{4.0f, 5.0f, 6.0f});
  REQUIRE(bound.grad_defaults.size() == 1);
  CHECK(bound.grad_defaults[0]->to_vector<float>() == std::vector<float>{0.5f, 1.0f, 2.0f});
  REQUIRE(bound.leaf_grads.size() == 2);
  CHECK_FALSE(bound.leaf_grads[0].has_value());
  CHECK(bound.leaf_grads[1]->to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});
  REQUIRE(bound.calls.size() == 5);
  CHECK(bound.calls[0].node == nullptr);
  const BoundCall& call = bound.calls[1];
  REQUIRE(call.node != nullptr);
  CHECK(call.node->schema.name == "MulBackward0");
  // d(x*y)/dx = g * y = [0.5*4, 1*5, 2*6]; d(x*y)/dy = g * x = [0.5*1, 1*2, 2*3].
  const Grads grads = call.node->apply({*bound.grad_defaults[0]}, call.saved.get(), {true, true});
  REQUIRE(grads.size() == 2);
  CHECK(grads[0]->to_vector<float>() == std::vector<float>{2.0f, 5.0f, 12.0f});
  CHECK(grads[1]->to_vector<float>() == std::vector<float>{0.5f, 2.0f, 6.0f});
}

TEST_CASE("bytecode: bind CopySlices and call_backward") {
  Program p = every_kind_program();
  p.code.pop_back();  // the call with every value kind does not bind
  const BoundProgram bound = bind(assemble(p), {{"$y", tensor({4.0, 5.0, 6.0}, DType::Float32)}});
  const BoundCall& slices = bound.calls[2];
  REQUIRE(slices.node != nullptr);
  CHECK(slices.node->schema.name == "MulBackward0");
  CHECK(slices.base == TensorGeometry{{4}, {1}, 0});
  CHECK(slices.view == TensorGeometry{{3}, {1}, 1});
  const std::vector<Tensor>& saved = bound.backward_saved[11];
  REQUIRE(saved.size() == 2);
  CHECK(saved[0].to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(saved[1].to_vector<float>() == std::vector<float>{4.0f, 5.0f, 6.0f});
  // A saved tensor declared on CUDA binds a CPU value: the device is metadata.
  CHECK(bound.saved_values[6].item<float>() == 0.5f);
  // A grad's inline value is its default.
  CHECK(std::signbit(bound.grad_defaults[1]->item<double>()));
  CHECK_FALSE(bound.grad_defaults[0].has_value());
}

TEST_CASE("bytecode: bind errors name the declaration or the instruction") {
  const Tensor y = tensor({4.0, 5.0, 6.0}, DType::Float32);
  auto bind_error = [](const Program& p, const TensorMap& tensors) {
    return error_of([&] { bind(assemble(p), tensors); });
  };
  CHECK(bind_error(mul_program(), {}) == "bind: saved $y: no value: none inline and no tensor \"$y\" given");
  CHECK(bind_error(mul_program(), {{"$y", tensor({4.0, 5.0}, DType::Float32)}}) ==
        "bind: saved $y: declared f32[3] but the value is f32[2]");
  CHECK(bind_error(mul_program(), {{"$y", tensor({4.0, 5.0, 6.0}, DType::Float64)}}) ==
        "bind: saved $y: declared f32[3] but the value is f64[3]");
  CHECK(bind_error(mul_program(), {{"$y", y}, {"%g", tensor({1.0}, DType::Float32)}}) ==
        "bind: grad %g: declared f32[3] but the value is f32[1]");
  CHECK(bind_error(mul_program(), {{"$y", y}, {"@x", tensor({1.0}, DType::Float32)}}) ==
        "bind: leaf @x: declared f32[3] but the value is f32[1]");

  Program unknown_ref = mul_program();
  unknown_ref.code[1].attrs = mul_fields("z");
  CHECK(bind_error(unknown_ref, {{"$y", y}}) ==
        "bind: instruction 1 (MulBackward0): field 'self': $z is not a declared saved tensor");
  Program wrong_kind = mul_program();
  wrong_kind.code[1].attrs[1].value = std::int64_t{1};
  CHECK(bind_error(wrong_kind, {{"$y", y}}) ==
        "bind: instruction 1 (MulBackward0): MulBackward0: saved field 'other_scalar_type' expects ScalarType, "
        "got int 1");
  Program missing = mul_program();
  missing.code[1].attrs.pop_back();
  CHECK(bind_error(missing, {{"$y", y}}) ==
        "bind: instruction 1 (MulBackward0): missing saved field 'self_scalar_type'");
  Program extra = mul_program();
  extra.code[1].attrs.push_back(Attr{"alpha", Scalar(1)});
  CHECK(bind_error(extra, {{"$y", y}}) ==
        "bind: instruction 1 (MulBackward0): 'alpha' is not a saved field of MulBackward0");
  Program twice = mul_program();
  twice.code[1].attrs.push_back(twice.code[1].attrs[0]);
  CHECK(bind_error(twice, {{"$y", y}}) == "bind: instruction 1 (MulBackward0): field 'other' is given twice");
}
