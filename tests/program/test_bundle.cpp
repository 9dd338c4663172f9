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
      {"unsupported dtype", safetensors_file(entry(R"("dtype":"F16","shape":[],"data_offsets":[0,2])"), "\0\0"),
       "tensor 'a': dtype 'F16' is not supported (refgrad reads BOOL, I64, F32, F64)"},
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

// ------------------------------------------------------------- make_bundle ---

TensorType f32(Shape sizes) { return TensorType{DType::Float32, std::move(sizes)}; }

// The declarations of a program (make_bundle looks at nothing else).
Program declarations() {
  Program program;
  program.name = "decls";
  program.grads = {GradDecl{"g", f32({}), std::nullopt, {}}};
  program.saved = {SavedDecl{"small", f32({3}), std::nullopt, {}}, SavedDecl{"big", f32({5}), std::nullopt, {}},
                   SavedDecl{"written", f32({2}), tensor({7.0f, 8.0f}), {}}};
  program.leaves = {LeafDecl{"w", f32({2}), std::nullopt, {}}, LeafDecl{"v", f32({6}), std::nullopt, {}}};
  return program;
}

TEST_CASE("bundle: make_bundle writes small values inline and puts large ones in the bundle") {
  const Tensor small = tensor({1.0f, 2.0f, 3.0f}), big = tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f});
  const Tensor g = scalar_tensor(1.0, DType::Float32), v = zeros({6});
  const Bundle bundle = make_bundle(declarations(), {{"$small", small}, {"$big", big}, {"%g", g}, {"@v", v}}, 4);

  CHECK(same_tensor(bundle.program.find_saved("small")->value, small));
  CHECK_FALSE(bundle.program.find_saved("big")->value.has_value());
  CHECK(same_tensor(bundle.program.find_saved("written")->value, tensor({7.0f, 8.0f})));  // kept as it was
  CHECK(same_tensor(bundle.program.find_grad("g")->value, g));
  CHECK_FALSE(bundle.program.find_leaf("w")->grad.has_value());  // no value: .grad starts as None
  CHECK_FALSE(bundle.program.find_leaf("v")->grad.has_value());
  check_same_tensors(bundle.tensors, {{"$big", big}, {"@v", v}});
  CHECK(bundle.results.empty());
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
