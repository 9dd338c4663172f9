// Bundles and safetensors files (refgrad/bundle.hpp). The independent truths are
// bytes written out by hand, and Hugging Face's own safetensors package reading
// refgrad's files and writing files for refgrad to read.
#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/bundle.hpp"
#include "refgrad/bytecode.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

namespace refgrad {
namespace {

using testing::torch_exec;
using testing::torch_exec_text;

std::span<const std::byte> bytes_of(const std::string& contents) {
  return std::as_bytes(std::span(contents.data(), contents.size()));
}

// A safetensors file built by hand: the 8-byte little-endian length, the header as given, the data.
std::string safetensors_file(std::string_view header, std::string_view data = "") {
  std::string file;
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  return file.append(header).append(data);
}

// The message of the refgrad::Error that `run` raises, or a note that it raised none.
std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

#define CHECK_ERROR_CONTAINS(message, expected) \
  CHECK_MESSAGE(std::string(message).find(expected) != std::string::npos, "error: ", message, "\nexpected: ", expected)

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "refgrad-bundle-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  REQUIRE(out.good());
}

void check_same_tensors(const TensorMap& actual, const TensorMap& expected) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, tensor] : expected) {
    REQUIRE_MESSAGE(actual.contains(name), "missing tensor ", name);
    CHECK_MESSAGE(same_tensor(actual.at(name), tensor), name, ": ", actual.at(name).repr(), " != ", tensor.repr());
  }
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Every dtype, a 0-dim and two size-0 tensors, and bit patterns a value comparison would miss.
TensorMap every_kind_of_tensor() {
  return {
      {"flags", tensor({{true, false}, {false, true}}, DType::Bool)},
      {"ids", tensor({-1, 0, std::int64_t{1} << 40}, DType::Int64)},
      {"x", tensor({kNaN, -0.0f, 1e-30f}, DType::Float32)},
      {"scale", scalar_tensor(0.1, DType::Float64)},
      {"empty", zeros({0, 3}, DType::Float32)},
      {"no_ids", zeros({0}, DType::Int64)},
  };
}

// ------------------------------------------------------------- safetensors ---

TEST_CASE("bundle: safetensors writes the reference layout, byte for byte") {
  const TensorMap tensors{{"a", tensor({1.0f, 2.0f})}, {"b", scalar_tensor(7, DType::Int64)}};
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
      R"("b":{"data_offsets":[8,16],"dtype":"I64","shape":[]}})"
      "    ";  // 132 bytes of JSON, padded with spaces to 136
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40\x07\x00\x00\x00\x00\x00\x00\x00", 16);
  CHECK(write_safetensors(tensors, {{"k", "v"}}) == std::string("\x88\0\0\0\0\0\0\0", 8) + header + data);
}

TEST_CASE("bundle: safetensors round trip keeps every dtype, 0-dim and size-0 tensors, bit for bit") {
  const TensorMap tensors = every_kind_of_tensor();
  const std::map<std::string, std::string> metadata{{"note", "gr\xc3\xbc\xc3\x9f"}, {"empty", ""}};
  std::map<std::string, std::string> read_metadata;
  const std::string file = write_safetensors(tensors, metadata);
  check_same_tensors(read_safetensors(bytes_of(file), "t.safetensors", &read_metadata), tensors);
  CHECK(read_metadata == metadata);
}

// One tensor of every dtype refgrad stores, with values at the edges of each (made by torch, which
// the tests' oracle trusts, so that the bits are torch's own).
TensorMap one_of_every_dtype() {
  const std::vector<Tensor> made = torch_exec(
      "v = torch.tensor([0.0, -0.0, 1.5, -2.25, 65504.0, 6e-8, float('nan'), float('inf')], dtype=torch.float64)\n"
      "i = torch.tensor([0, 1, -1, 127, -128, 255, 32767, -32768])\n"
      "result = [v.half(), v.bfloat16(), v.to(torch.complex64) * (1 - 2j), v.to(torch.complex128) * 1j,\n"
      "          i.to(torch.uint8), i.to(torch.int8), i.to(torch.int16), i.to(torch.int32),\n"
      "          i.abs().to(torch.uint16), i.abs().to(torch.uint32), i.abs().to(torch.uint64) * 2**40]\n");
  REQUIRE(made.size() == 11);
  const char* names[] = {"half", "brain", "c64", "c128", "u8", "i8", "i16", "i32", "u16", "u32", "u64"};
  TensorMap tensors;
  for (std::size_t i = 0; i < made.size(); ++i) tensors.emplace(names[i], made[i]);
  return tensors;
}

TEST_CASE("bundle: every dtype round trips through safetensors, bit for bit, and python's reader agrees") {
  const TensorMap tensors = one_of_every_dtype();
  const std::string file = write_safetensors(tensors);
  check_same_tensors(read_safetensors(bytes_of(file), "t.safetensors"), tensors);
  // Hugging Face's reader (torch flavour: it knows bfloat16) gives torch the same tensors. Its format
  // names complex64 C64 and has none for complex128, which refgrad calls C128: those two stay out.
  TensorMap real = tensors;
  real.erase("c64");
  real.erase("c128");
  const TempDir dir;
  write_file(dir.file("all.safetensors"), write_safetensors(real));
  std::string names;
  for (const auto& entry : real) names += "'" + entry.first + "', ";
  const std::vector<Tensor> loaded = torch_exec("from safetensors.torch import load_file\n"
                                                "tensors = load_file('" + dir.file("all.safetensors") + "')\n"
                                                "result = [tensors[name] for name in [" + names + "]]\n");
  REQUIRE(loaded.size() == real.size());
  std::size_t i = 0;
  for (const auto& [name, expected] : real) {
    CHECK_MESSAGE(same_tensor(loaded[i], expected), name, ": ", loaded[i].repr());
    ++i;
  }
}

TEST_CASE("bundle: every dtype's declarations and literals round trip through the text and .rgbc") {
  const std::string text =
      "program every_dtype\n"
      "  grad %g : bf16[2]\n"
      "  saved $half : f16[3] = [1.5, -0.099975586, 65504.0]\n"
      "  saved $brain : bf16[2] = [-3.0, 0.00390625]\n"
      "  saved $small : i8[3] = [-128, 0, 127]\n"
      "  saved $bytes : u8[2] = [0, 255]\n"
      "  saved $ints : i32[2] = [-2147483648, 7]\n"
      "  saved $wide : u64[1] = [5]\n"
      "  saved $waves : c64[2]\n"
      "  saved $phases : c64[3] = [1.5-2.0j, 0.0+1.0j, -0.25+0.0j]\n"
      "  saved $odd : c128[3] = [nan+infj, -inf-0.0j, 1e-300+1e+300j]\n"
      "code\n";
  const Program program = parse_program(text, "every.bwd");
  CHECK(print_program(program) == text);
  CHECK(disassemble(read_bytecode(bytes_of(write_bytecode(assemble(program))))) == program);
  CHECK(program.saved[0].value->to_vector<double>() == std::vector<double>{1.5, -0.0999755859375, 65504.0});
  // A literal rounds to the dtype as torch.tensor does; an integer literal must fit.
  CHECK(parse_program("program p\n  saved $x : f16[1] = [0.1]\ncode\n").saved[0].value->item<double>() ==
        0.0999755859375);
  CHECK(error_of([] { parse_program("program p\n  saved $x : u8[2] = [1, 256]\ncode\n", "t.bwd"); })
            .find("t.bwd:2:22: error: an element of the literal does not fit u8") != std::string::npos);
  // Complex elements as Python spells them: either part may be left out; only an imaginary part takes '+'.
  const Tensor spelled = *parse_program("program p\n  saved $z : c128[4] = [1, 2j, -3.5-1j, +infj]\ncode\n").saved[0].value;
  CHECK(spelled.to_vector<std::complex<double>>() ==
        std::vector<std::complex<double>>{{1, 0}, {0, 2}, {-3.5, -1}, {0, INFINITY}});
  CHECK(error_of([] { parse_program("program p\n  saved $x : c64[1] = [+1.0]\ncode\n", "t.bwd"); })
            .find("t.bwd:2:24: error: malformed number '+1.0': only an imaginary part starts with '+'") !=
        std::string::npos);
  CHECK(error_of([] { parse_program("program p\n  saved $x : f32[1] = [2j]\ncode\n", "t.bwd"); })
            .find("t.bwd:2:24: error: expected a number (an element of f32[1]), got '2j'") != std::string::npos);
}

TEST_CASE("bundle: safetensors writes non-contiguous tensors in row-major order") {
  const Tensor x = tensor({{1.0f, 2.0f, 3.0f}, {4.0f, 5.0f, 6.0f}});
  const TensorMap views{
      {"transposed", transpose(x, 0, 1)},
      {"sliced", slice(x, 1, 1, 3)},
      {"stepped", slice(x, 1, 0, 3, 2)},
      {"expanded", expand(tensor({1.0f, 2.0f}), {3, 2})},
  };
  const TensorMap read = read_safetensors(bytes_of(write_safetensors(views)));
  CHECK_TENSOR(read.at("transposed"), tensor({{1.0f, 4.0f}, {2.0f, 5.0f}, {3.0f, 6.0f}}));
  CHECK_TENSOR(read.at("sliced"), tensor({{2.0f, 3.0f}, {5.0f, 6.0f}}));
  CHECK_TENSOR(read.at("stepped"), tensor({{1.0f, 3.0f}, {4.0f, 6.0f}}));
  CHECK_TENSOR(read.at("expanded"), tensor({{1.0f, 2.0f}, {1.0f, 2.0f}, {1.0f, 2.0f}}));
}

TEST_CASE("bundle: python's safetensors reads refgrad's file") {
  const TempDir dir;
  const std::string path = dir.file("refgrad.safetensors");
  const TensorMap tensors = every_kind_of_tensor();
  write_file(path, write_safetensors(tensors, {{"producer", "refgrad"}, {"note", "gr\xc3\xbc\xc3\x9f"}}));

  const std::string load = "from safetensors.numpy import load_file\n"
                           "from safetensors import safe_open\n"
                           "path = '" + path + "'\n"
                           "arrays = load_file(path)\n";
  // Python's answer, in the order of the TensorMap's names.
  std::string names;
  for (const auto& entry : tensors) names += "'" + entry.first + "', ";
  const std::vector<Tensor> loaded =
      torch_exec(load + "result = [torch.from_numpy(arrays[name].copy()) for name in [" + names + "]]");
  REQUIRE(loaded.size() == tensors.size());
  std::size_t i = 0;
  for (const auto& [name, expected] : tensors) {
    CHECK_MESSAGE(same_tensor(loaded[i], expected), name, ": ", loaded[i].repr());
    ++i;
  }
  CHECK(torch_exec_text(load + "result = sorted(safe_open(path, 'np').metadata().items())") ==
        "[('note', 'grüß'), ('producer', 'refgrad')]");
}

TEST_CASE("bundle: refgrad reads python's safetensors file") {
  const TempDir dir;
  const std::string path = dir.file("python.safetensors");
  // Python's writer lays the data out by alignment, then name: not refgrad's order.
  torch_exec("from safetensors.numpy import save_file\n"
             "save_file({'flags': np.array([True, False]),\n"
             "           'ids': np.array([[1, 2], [3, -4]], dtype=np.int64),\n"
             "           'x': np.array([0.5, -2.0], dtype=np.float32),\n"
             "           'scale': np.array(3.25, dtype=np.float64),\n"
             "           'empty': np.zeros((0, 2), dtype=np.float32)},\n"
             "          '" + path + "', metadata={'format': 'np', 'who': 'python'})\n"
             "result = 0\n");
  std::ifstream in(path, std::ios::binary);
  const std::string file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::map<std::string, std::string> metadata;
  check_same_tensors(read_safetensors(bytes_of(file), path, &metadata),
                     {{"flags", tensor({true, false})},
                      {"ids", tensor({{1, 2}, {3, -4}}, DType::Int64)},
                      {"x", tensor({0.5f, -2.0f})},
                      {"scale", scalar_tensor(3.25, DType::Float64)},
                      {"empty", zeros({0, 2})}});
  CHECK(metadata == std::map<std::string, std::string>{{"format", "np"}, {"who", "python"}});
}

TEST_CASE("bundle: malformed safetensors files are rejected with clear messages") {
  // One F32 scalar at [0,4] in a 4-byte buffer: `entry` puts variations of it in a header.
  auto entry = [](std::string_view body) { return "{\"a\":{" + std::string(body) + "}}"; };
  const std::string scalar = R"("dtype":"F32","shape":[],"data_offsets":[0,4])";
  const std::string four_bytes(4, '\0');
  struct Case {
    std::string rule;
    std::string file;
    std::string message;
  };
  const std::vector<Case> cases{
      {"shorter than the length field", std::string("\x01\x02", 2), "2 bytes is too short"},
      {"header length past the end", std::string("\xe8\x03\0\0\0\0\0\0{}", 10),
       "header length 1000 runs past the end of the file (10 bytes)"},
      {"header length over 100 MB", std::string("\x00\xc2\xeb\x0b\0\0\0\0{}", 10),
       "header length 200000000 is over the limit of 100000000 bytes"},
      {"invalid JSON", safetensors_file(R"({"a":)"), "header: invalid JSON: parse error"},
      {"invalid UTF-8", safetensors_file("{\"\xff\":1}"), "header: invalid JSON"},
      {"not an object", safetensors_file("[1,2]"), "header [1,2] is not a JSON object"},
      {"deeply nested", safetensors_file(std::string(1000000, '[') + std::string(1000000, ']')),
       "is not a JSON object"},
      {"entry not an object", safetensors_file(R"({"a":3})"), "tensor 'a': 3 is not an object"},
      {"no dtype", safetensors_file(entry(R"("shape":[],"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': no 'dtype'"},
      {"no shape", safetensors_file(entry(R"("dtype":"F32","data_offsets":[0,4])"), four_bytes),
       "tensor 'a': no 'shape'"},
      {"no data_offsets", safetensors_file(entry(R"("dtype":"F32","shape":[])"), four_bytes),
       "tensor 'a': no 'data_offsets'"},
      {"extra key", safetensors_file(entry(scalar + R"(,"x":1)"), four_bytes), "tensor 'a': unexpected key 'x'"},
      {"dtype not a string", safetensors_file(entry(R"("dtype":5,"shape":[],"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': dtype 5 is not a string"},
      {"unsupported dtype", safetensors_file(entry(R"("dtype":"F8_E4M3","shape":[],"data_offsets":[0,1])"), "\0"),
       "tensor 'a': dtype 'F8_E4M3' is not supported (refgrad reads BOOL, U8, I8, I16, I32, I64, U16, U32, U64, F16, "
       "BF16, F32, F64, C64, C128)"},
      {"shape not a list", safetensors_file(entry(R"("dtype":"F32","shape":3,"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': shape 3 is not a list"},
      {"negative size", safetensors_file(entry(R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': shape entry -1 is not a non-negative integer"},
      {"float size", safetensors_file(entry(R"("dtype":"F32","shape":[1.0],"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': shape entry 1.0 is not a non-negative integer"},
      {"size past uint64", safetensors_file(entry(R"("dtype":"F32","shape":[1e30],"data_offsets":[0,4])")),
       "shape entry 1e+30 is not a non-negative integer"},
      {"element count overflows",
       safetensors_file(entry(R"("dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0])")),
       "tensor 'a': shape [0,4294967296,4294967296] has too many elements"},
      {"offsets not a pair", safetensors_file(entry(R"("dtype":"F32","shape":[],"data_offsets":[0])"), four_bytes),
       "tensor 'a': data_offsets [0] is not [begin, end]"},
      {"offsets not integers",
       safetensors_file(entry(R"("dtype":"F32","shape":[],"data_offsets":[0,"4"])"), four_bytes),
       "tensor 'a': data_offsets [0,\"4\"] are not non-negative integers"},
      {"negative offset", safetensors_file(entry(R"("dtype":"F32","shape":[],"data_offsets":[-4,0])"), four_bytes),
       "tensor 'a': data_offsets [-4,0] are not non-negative integers"},
      {"end before begin", safetensors_file(entry(R"("dtype":"F32","shape":[],"data_offsets":[4,0])"), four_bytes),
       "tensor 'a': data_offsets [4,0] end before they begin"},
      {"wrong byte count", safetensors_file(entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,4])"), four_bytes),
       "tensor 'a': data_offsets [0,4] hold 4 bytes, but F32[2] needs 8"},
      {"outside the buffer", safetensors_file(entry(scalar)),
       "tensor 'a': data_offsets [0,4] lie outside the data buffer (0 bytes)"},
      {"overlapping",
       safetensors_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[],"data_offsets":[2,6]}})",
                        std::string(6, '\0')),
       "tensor 'b': data_offsets [2,6] overlap those of tensor 'a'"},
      {"a gap between tensors",
       safetensors_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})",
                        std::string(12, '\0')),
       "bytes [4,8) of the data buffer belong to no tensor"},
      {"bytes left over", safetensors_file(entry(scalar), std::string(8, '\0')),
       "bytes [4,8) of the data buffer belong to no tensor"},
      {"duplicate tensor names", safetensors_file("{\"a\":{" + scalar + "},\"a\":{" + scalar + "}}", four_bytes),
       "header: duplicate key 'a'"},
      {"metadata not an object", safetensors_file(R"({"__metadata__":[]})"),
       "__metadata__: [] is not an object of strings"},
      {"metadata value not a string", safetensors_file(R"({"__metadata__":{"k":1}})"),
       "__metadata__: the value of 'k' is not a string"},
      {"bool byte other than 0 or 1",
       safetensors_file(entry(R"("dtype":"BOOL","shape":[2],"data_offsets":[0,2])"), std::string("\x01\x02", 2)),
       "tensor 'a': BOOL element 1 is byte 2, not 0 or 1"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.rule);
    const std::string message = error_of([&] { read_safetensors(bytes_of(c.file), "hostile.safetensors"); });
    CHECK_MESSAGE(message.starts_with("hostile.safetensors: "), message);
    CHECK_ERROR_CONTAINS(message, c.message);
  }
}

TEST_CASE("bundle: write_safetensors refuses names it cannot write") {
  CHECK_ERROR_CONTAINS(error_of([] { write_safetensors({{"__metadata__", tensor({1.0f})}}); }),
                       "'__metadata__' cannot name a tensor");
  CHECK_ERROR_CONTAINS(error_of([] { write_safetensors({{"a", Tensor()}}); }), "tensor 'a' is undefined");
  CHECK_ERROR_CONTAINS(error_of([] { write_safetensors({{"\xff", tensor({1.0f})}}); }), "not valid UTF-8");
}

// ----------------------------------------------------------------- bundles ---

// z = x * y; z.sum().backward(), with a few more declarations so that a bundle of it holds every
// dtype, a 0-dim and a size-0 tensor.
const char* const kProgram = R"(program mul
  grad %g : f32[3]
  saved $x : f32[3] = [1.0, 2.0, 3.0]
  saved $y : f32[3]
  saved $mask : b8[2,2]
  saved $index : i64[0]
  leaf @x : f32[3]
  leaf @y : f32[3]
  leaf @w : f64[]
code
  %0 = validate %g : f32[3]
  %1, %2 = MulBackward0 %0  other=$y other_scalar_type=f32 self=$x self_scalar_type=f32
  %3, %4 = validate %1, %2 : f32[3], f32[3]
  accumulate_grad @y %4
  accumulate_grad @x %3
)";

Bundle full_bundle() {
  Bundle bundle;
  bundle.program = parse_program(kProgram, "mul.bwd");
  bundle.tensors = {{"$y", tensor({4.0f, 5.0f, 6.0f})},
                    {"%g", ones({3})},
                    {"$mask", tensor({{true, false}, {false, true}})},
                    {"$index", zeros({0}, DType::Int64)},
                    {"@w", scalar_tensor(0.25, DType::Float64)}};
  ResultSet refgrad_result, inductor_result;
  refgrad_result.engine = "refgrad";
  refgrad_result.tensors = {{"@x", tensor({4.0f, 5.0f, 6.0f})}, {"@y", tensor({1.0f, 2.0f, 3.0f})}};
  inductor_result.engine = "compiled_autograd:inductor";
  inductor_result.tensors = {{"@x", tensor({4.0f, 5.0f, 6.5f})}};
  inductor_result.config = {{"mode", "max-autotune"}, {"dynamic", "false"}};
  bundle.results = {refgrad_result, inductor_result};
  bundle.comparison = Comparison{"allclose", "refgrad", 1e-5, std::nullopt};
  bundle.provenance = {{"torch_version", "2.13.0"}, {"order", "eager"}, {"seed", "0"}};
  return bundle;
}

void check_same_bundle(const Bundle& actual, const Bundle& expected) {
  CHECK(actual.program == expected.program);
  check_same_tensors(actual.tensors, expected.tensors);
  REQUIRE(actual.results.size() == expected.results.size());
  for (std::size_t i = 0; i < expected.results.size(); ++i) {
    CAPTURE(i);
    CHECK(actual.results[i].engine == expected.results[i].engine);
    CHECK(actual.results[i].config == expected.results[i].config);
    check_same_tensors(actual.results[i].tensors, expected.results[i].tensors);
  }
  CHECK(actual.comparison == expected.comparison);
  CHECK(actual.provenance == expected.provenance);
}

TEST_CASE("bundle: round trip keeps program, tensors, results, comparison and provenance") {
  const Bundle bundle = full_bundle();
  const std::string file = write_bundle(bundle);
  check_same_bundle(read_bundle(bytes_of(file), "mul.safetensors"), bundle);

  // The layout bundle.hpp promises, read back as a plain safetensors file.
  std::map<std::string, std::string> metadata;
  const TensorMap stored = read_safetensors(bytes_of(file), "mul.safetensors", &metadata);
  std::vector<std::string> names;
  for (const auto& entry : stored) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"$index", "$mask", "$y", "%g", "@w", "result.0.@x", "result.0.@y",
                                          "result.1.@x"});
  CHECK(metadata.at("refgrad.bundle") == "1");
  CHECK(parse_program(metadata.at("program")) == bundle.program);
  CHECK(metadata.at("results") ==
        R"([{"config":{},"engine":"refgrad","tensors":["@x","@y"]},)"
        R"({"config":{"dynamic":"false","mode":"max-autotune"},"engine":"compiled_autograd:inductor","tensors":["@x"]}])");
  CHECK(metadata.at("comparison") == R"({"atol":null,"reference":"refgrad","rtol":1e-05,"rule":"allclose"})");
  CHECK(metadata.at("provenance") == R"({"order":"eager","seed":"0","torch_version":"2.13.0"})");
}

TEST_CASE("bundle: a bundle without results, comparison or provenance has only the program and its tensors") {
  Bundle bundle;
  bundle.program = parse_program(kProgram);
  bundle.tensors = {{"$y", tensor({4.0f, 5.0f, 6.0f})}};
  std::map<std::string, std::string> metadata;
  const std::string file = write_bundle(bundle);
  read_safetensors(bytes_of(file), "<bytes>", &metadata);
  CHECK(metadata.size() == 2);  // refgrad.bundle and program
  check_same_bundle(read_bundle(bytes_of(file)), bundle);
}

TEST_CASE("bundle: malformed bundles are rejected with clear messages") {
  const TensorMap program_tensors{{"$y", tensor({4.0f, 5.0f, 6.0f})}};
  // A valid bundle's metadata with `changes` applied ("" removes a key) and `extra` tensors added.
  auto bundle_file = [&](const std::map<std::string, std::string>& changes, const TensorMap& extra = {}) {
    std::map<std::string, std::string> metadata{{"refgrad.bundle", "1"}, {"program", kProgram}};
    for (const auto& [key, value] : changes) {
      if (value.empty()) metadata.erase(key);
      else metadata[key] = value;
    }
    TensorMap tensors = program_tensors;
    tensors.insert(extra.begin(), extra.end());
    return write_safetensors(tensors, metadata);
  };
  const Tensor r = tensor({1.0f, 2.0f, 3.0f});
  const std::string one_result = R"([{"engine":"eager","config":{},"tensors":["@x"]}])";
  struct Case {
    std::string rule;
    std::string file;
    std::string message;
  };
  const std::vector<Case> cases{
      {"no format version", bundle_file({{"refgrad.bundle", ""}}),
       "not a refgrad bundle (its __metadata__ has no 'refgrad.bundle')"},
      {"another format version", bundle_file({{"refgrad.bundle", "2"}}),
       "bundle format version '2' is not supported (this refgrad reads version 1)"},
      {"no program", bundle_file({{"program", ""}}), "the bundle's __metadata__ has no 'program'"},
      {"unknown metadata key", bundle_file({{"comparision", "{}"}}), "unknown __metadata__ key 'comparision'"},
      {"program text that does not parse", bundle_file({{"program", "program mul\ncode\n  %0 = NoSuchBackward0 %g\n"}}),
       "bad.safetensors:program:3:"},
      {"results not JSON", bundle_file({{"results", "[{"}}), "results: invalid JSON"},
      {"results not a list", bundle_file({{"results", "{}"}}), "results: {} is not a list"},
      {"result without engine", bundle_file({{"results", R"([{"config":{},"tensors":[]}])"}}),
       "results[0]: no 'engine'"},
      {"result with an extra key", bundle_file({{"results", R"([{"engine":"e","config":{},"tensors":[],"x":1}])"}}),
       "results[0]: unexpected key 'x'"},
      {"engine not a string", bundle_file({{"results", R"([{"engine":3,"config":{},"tensors":[]}])"}}),
       "results[0]: engine: 3 is not a string"},
      {"config not strings", bundle_file({{"results", R"([{"engine":"e","config":{"opt":1},"tensors":[]}])"}}),
       "results[0]: config: the value of 'opt' is not a string"},
      {"tensors not a list", bundle_file({{"results", R"([{"engine":"e","config":{},"tensors":"@x"}])"}}),
       "results[0]: tensors \"@x\" is not a list of names"},
      {"tensor name not a string", bundle_file({{"results", R"([{"engine":"e","config":{},"tensors":[1]}])"}}),
       "results[0]: tensors entry: 1 is not a string"},
      {"listed tensor missing", bundle_file({{"results", one_result}}),
       "results[0]: tensor '@x' is listed, but the file has no tensor 'result.0.@x'"},
      {"tensor listed twice",
       bundle_file({{"results", R"([{"engine":"e","config":{},"tensors":["@x","@x"]}])"}}, {{"result.0.@x", r}}),
       "results[0]: tensor '@x' is listed twice"},
      {"result tensor not listed", bundle_file({{"results", one_result}}, {{"result.0.@x", r}, {"result.0.@y", r}}),
       "tensor 'result.0.@y' is not listed in results"},
      {"result tensor without results", bundle_file({}, {{"result.0.@x", r}}),
       "tensor 'result.0.@x' is not listed in results"},
      {"comparison without rtol", bundle_file({{"comparison", R"({"rule":"reference","reference":"refgrad","atol":null})"}}),
       "comparison: no 'rtol'"},
      {"comparison rtol a string",
       bundle_file({{"comparison", R"({"rule":"reference","reference":"refgrad","rtol":"1e-5","atol":null})"}}),
       "comparison: rtol: \"1e-5\" is not a number or null"},
      {"comparison reference not a string",
       bundle_file({{"comparison", R"({"rule":"reference","reference":null,"rtol":null,"atol":null})"}}),
       "comparison: reference: null is not a string"},
      {"unknown comparison rule",
       bundle_file({{"comparison", R"({"rule":"close","reference":"refgrad","rtol":null,"atol":null})"}}),
       "comparison: rule 'close' is not 'reference', 'plain' or 'allclose'"},
      {"negative tolerance",
       bundle_file({{"comparison", R"({"rule":"allclose","reference":"refgrad","rtol":null,"atol":-1})"}}),
       "comparison: atol -1 is not a finite number >= 0"},
      {"provenance not strings", bundle_file({{"provenance", R"({"seed":0})"}}),
       "provenance: the value of 'seed' is not a string"},
      {"provenance not JSON", bundle_file({{"provenance", "seed=0"}}), "provenance: invalid JSON"},
      {"undeclared program tensor", bundle_file({}, {{"$z", r}}),
       "tensor '$z' is not a value that program 'mul' declares (a $saved, %grad or @leaf name)"},
      {"tensor without a sigil", bundle_file({}, {{"y", r}}), "tensor 'y' is not a value that program 'mul' declares"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.rule);
    const std::string message = error_of([&] { read_bundle(bytes_of(c.file), "bad.safetensors"); });
    CHECK_MESSAGE(message.starts_with("bad.safetensors"), message);
    CHECK_ERROR_CONTAINS(message, c.message);
  }
}

TEST_CASE("bundle: write_bundle refuses what read_bundle would refuse") {
  Bundle undeclared = full_bundle();
  undeclared.tensors.emplace("$z", zeros({1}));
  CHECK_ERROR_CONTAINS(error_of([&] { write_bundle(undeclared); }),
                       "write_bundle: tensor '$z' is not a value that program 'mul' declares");
  Bundle unknown_rule = full_bundle();
  unknown_rule.comparison->rule = "close";
  CHECK_ERROR_CONTAINS(error_of([&] { write_bundle(unknown_rule); }),
                       "write_bundle: comparison: rule 'close' is not 'reference', 'plain' or 'allclose'");
  Bundle nan_tolerance = full_bundle();
  nan_tolerance.comparison->rtol = std::numeric_limits<double>::quiet_NaN();
  CHECK_ERROR_CONTAINS(error_of([&] { write_bundle(nan_tolerance); }),
                       "write_bundle: comparison: rtol nan is not a finite number >= 0");
}

TEST_CASE("bundle: save_bundle and load_bundle go through a file; load_program_file reads it too") {
  const TempDir dir;
  const std::string path = dir.file("mul.safetensors");
  save_bundle(full_bundle(), path);
  check_same_bundle(load_bundle(path), full_bundle());
  check_same_bundle(load_program_file(path), full_bundle());
  const std::string message = error_of([&] { save_bundle(full_bundle(), dir.file("no/such/dir/x.safetensors")); });
  CHECK_ERROR_CONTAINS(message, "cannot open '" + dir.file("no/such/dir/x.safetensors") + "' for writing");
}

TEST_CASE("bundle: a .bwd file, alone or with a .safetensors of tensors beside it") {
  const TempDir dir;
  const std::string text_path = dir.file("mul.bwd"), tensors_path = dir.file("mul.safetensors");
  write_file(text_path, kProgram);
  const Bundle alone = load_program_file(text_path);
  CHECK(alone.program == parse_program(kProgram));
  CHECK(alone.tensors.empty());

  // Written by Python's safetensors, as a user would.
  torch_exec("from safetensors.numpy import save_file\n"
             "save_file({'$y': np.array([4.0, 5.0, 6.0], dtype=np.float32),\n"
             "           '@w': np.array(0.5)}, '" + tensors_path + "')\n"
             "result = 0\n");
  const Bundle pair = load_program_file(text_path);
  CHECK(pair.program == parse_program(kProgram));
  check_same_tensors(pair.tensors, {{"$y", tensor({4.0f, 5.0f, 6.0f})}, {"@w", scalar_tensor(0.5, DType::Float64)}});

  write_file(tensors_path, write_safetensors({{"$z", zeros({1})}}));
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(text_path); }),
                       tensors_path + ": tensor '$z' is not a value that program 'mul' declares");
  write_file(text_path, "program mul\ncode\n  %0 = NoSuchBackward0 %g\n");
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(text_path); }), text_path + ":3:");
}

TEST_CASE("bundle: load_program_file reads binary bytecode (.rgbc)") {
  const TempDir dir;
  const std::string path = dir.file("mul.rgbc");
  const Program program = parse_program(kProgram);
  write_file(path, write_bytecode(assemble(program)));
  const Bundle loaded = load_program_file(path);
  CHECK(loaded.program == program);
  CHECK(loaded.tensors.empty());
  write_file(path, "RGBC, but nothing after");
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(path); }), path + ": ");
}

TEST_CASE("bundle: bind binds a bundle's program to its tensors") {
  Bundle bundle = full_bundle();
  const BoundProgram bound = bind(bundle);
  REQUIRE(bound.saved_values.size() == 4);  // $x inline, then $y, $mask, $index from the bundle
  CHECK(same_tensor(bound.saved_values[0], tensor({1.0f, 2.0f, 3.0f})));
  CHECK(same_tensor(bound.saved_values[1], tensor({4.0f, 5.0f, 6.0f})));
  CHECK(same_tensor(bound.saved_values[3], zeros({0}, DType::Int64)));
  REQUIRE(bound.grad_defaults.size() == 1);
  CHECK(same_tensor(bound.grad_defaults[0], ones({3})));
  REQUIRE(bound.leaf_grads.size() == 3);  // @x and @y start as None, @w from the bundle
  CHECK_FALSE(bound.leaf_grads[0].has_value());
  CHECK(same_tensor(bound.leaf_grads[2], scalar_tensor(0.25, DType::Float64)));
  bundle.tensors.erase("$y");
  CHECK_ERROR_CONTAINS(error_of([&] { bind(bundle); }), "$y");
}

// ------------------------------------------------------------- make_bundle ---

TensorType f32(Shape sizes) { return TensorType{DType::Float32, std::move(sizes)}; }

// The declarations of a program (make_bundle looks at nothing else).
Program declarations() {
  Program program;
  program.name = "decls";
  program.grads = {GradDecl{"g", f32({}), std::nullopt, {}}};
  program.saved = {SavedDecl{"small", f32({3}), std::nullopt, {}}, SavedDecl{"big", f32({5}), std::nullopt, {}},
                   SavedDecl{"written", f32({2}), tensor({7.0f, 8.0f}), {}},
                   SavedDecl{"replaced", f32({4}), zeros({4}), {}}};
  program.leaves = {LeafDecl{"w", f32({2}), std::nullopt, {}}, LeafDecl{"v", f32({6}), std::nullopt, {}}};
  return program;
}

TEST_CASE("bundle: make_bundle writes small values inline and puts large ones in the bundle") {
  // At most 3 elements inline.
  const Tensor small = tensor({1.0f, 2.0f, 3.0f}), big = tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  const Tensor g = scalar_tensor(1.0, DType::Float32), v = zeros({6}), replacement = ones({4});
  const Bundle bundle = make_bundle(
      declarations(), {{"$small", small}, {"$big", big}, {"$replaced", replacement}, {"%g", g}, {"@v", v}}, 3);

  CHECK(same_tensor(bundle.program.find_saved("small")->value, small));
  CHECK_FALSE(bundle.program.find_saved("big")->value.has_value());
  CHECK(same_tensor(bundle.program.find_saved("written")->value, tensor({7.0f, 8.0f})));  // kept as it was
  CHECK_FALSE(bundle.program.find_saved("replaced")->value.has_value());  // the given value wins
  CHECK(same_tensor(bundle.program.find_grad("g")->value, g));
  CHECK_FALSE(bundle.program.find_leaf("w")->grad.has_value());  // no value: .grad starts as None
  CHECK_FALSE(bundle.program.find_leaf("v")->grad.has_value());
  check_same_tensors(bundle.tensors, {{"$big", big}, {"$replaced", replacement}, {"@v", v}});
  CHECK(bundle.results.empty());
  // Inline values travel in the program text.
  check_same_bundle(read_bundle(bytes_of(write_bundle(bundle))), bundle);
}

TEST_CASE("bundle: make_bundle raises for a missing, unknown or mistyped value") {
  const Tensor big = zeros({5});
  CHECK_ERROR_CONTAINS(error_of([&] { make_bundle(declarations(), {{"$big", big}}); }),
                       "make_bundle: saved tensor $small has no value");
  CHECK_ERROR_CONTAINS(error_of([&] { make_bundle(declarations(), {{"$small", zeros({3})}, {"$big", big}, {"$q", big}}); }),
                       "make_bundle: tensor '$q' is not a value that program 'decls' declares");
  CHECK_ERROR_CONTAINS(error_of([&] { make_bundle(declarations(), {{"$small", zeros({3}, DType::Float64)}}); }),
                       "make_bundle: $small is declared f32[3], but its value is f64[3]");
}

// ----------------------------------------------------------------- files ---

TEST_CASE("bundle: load_program_file names the path in its errors") {
  const TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(missing); }), "cannot open '" + missing + "'");
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(dir.file("model.txt")); }),
                       "model.txt' is not .safetensors (a bundle), .rgbc (bytecode) or .bwd (text)");
  const std::string empty = dir.file("empty.safetensors");
  write_file(empty, "");
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(empty); }), empty + ": 0 bytes is too short");
  const std::string plain = dir.file("plain.safetensors");
  write_file(plain, write_safetensors({{"$x", zeros({2})}}));
  CHECK_ERROR_CONTAINS(error_of([&] { load_program_file(plain); }),
                       plain + ": not a refgrad bundle (its __metadata__ has no 'refgrad.bundle')");
}

}  // namespace
}  // namespace refgrad
