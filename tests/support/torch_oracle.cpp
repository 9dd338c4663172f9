// A long-lived `python torch_eval.py` child, spoken to over two pipes with one
// JSON line per request and per response.
#include "torch_oracle.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

extern char** environ;

namespace refgrad::testing {
namespace {

const char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const unsigned char* data, std::size_t n) {
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t chunk = (std::uint32_t(data[i]) << 16) | (i + 1 < n ? std::uint32_t(data[i + 1]) << 8 : 0) |
                                (i + 2 < n ? std::uint32_t(data[i + 2]) : 0);
    out += kBase64[(chunk >> 18) & 63];
    out += kBase64[(chunk >> 12) & 63];
    out += i + 1 < n ? kBase64[(chunk >> 6) & 63] : '=';
    out += i + 2 < n ? kBase64[chunk & 63] : '=';
  }
  return out;
}

std::vector<unsigned char> base64_decode(const std::string& text) {
  std::array<int, 256> value{};
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kBase64[i])] = i;
  std::vector<unsigned char> out;
  std::uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value[static_cast<unsigned char>(c)];
    check(v >= 0, "torch oracle: bad base64 in a response");
    buffer = (buffer << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<unsigned char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

DType dtype_from_name(const std::string& name) {
  for (DType d : kAllDTypes)
    if (dtype_name(d) == name) return d;
  fail("torch oracle: unknown dtype " + name);
}

nlohmann::json encode(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* bytes = static_cast<const unsigned char*>(c.raw_data());
  return {{"dtype", dtype_name(c.dtype())},
          {"shape", c.sizes()},
          {"data", base64_encode(bytes, static_cast<std::size_t>(c.numel()) * element_size(c.dtype()))}};
}

Tensor decode(const nlohmann::json& spec) {
  const Shape shape = spec.at("shape").get<Shape>();
  const DType dtype = dtype_from_name(spec.at("dtype").get<std::string>());
  const std::vector<unsigned char> bytes = base64_decode(spec.at("data").get<std::string>());
  check(bytes.size() == static_cast<std::size_t>(numel_of(shape)) * element_size(dtype),
        "torch oracle: response size does not match shape ", str(shape));
  return from_buffer(bytes.data(), shape, dtype);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

class TorchProcess {
 public:
  TorchProcess() {
    const std::string python = env_or("REFGRAD_TORCH_PYTHON", ".venv/bin/python");
    const std::string script = env_or("REFGRAD_TORCH_EVAL", "tests/support/torch_eval.py");
    int to_child[2], from_child[2];
    check(pipe(to_child) == 0 && pipe(from_child) == 0, "torch oracle: pipe failed: ", std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::vector<char*> argv = {const_cast<char*>(python.c_str()), const_cast<char*>(script.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    check(rc == 0, "torch oracle: cannot start ", python, " (", std::strerror(rc),
          "); set REFGRAD_TORCH_PYTHON to a Python with torch==2.13.0");
    requests_ = fdopen(to_child[1], "w");
    responses_ = fdopen(from_child[0], "r");
  }

  ~TorchProcess() {
    if (requests_) std::fclose(requests_);
    if (responses_) std::fclose(responses_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  nlohmann::json ask(const nlohmann::json& request) {
    const std::string line = request.dump() + "\n";
    check(std::fwrite(line.data(), 1, line.size(), requests_) == line.size() && std::fflush(requests_) == 0,
          "torch oracle: the torch process is gone (did `import torch` fail?)");
    std::string response;
    char buffer[65536];
    while (std::fgets(buffer, sizeof buffer, responses_)) {
      response += buffer;
      if (!response.empty() && response.back() == '\n') break;
    }
    check(!response.empty(), "torch oracle: no answer from the torch process (did `import torch` fail?)");
    return nlohmann::json::parse(response);
  }

 private:
  pid_t pid_ = 0;
  FILE* requests_ = nullptr;
  FILE* responses_ = nullptr;
};

TorchProcess& process() {
  static TorchProcess instance;
  return instance;
}

nlohmann::json make_request(const std::string& expression, const std::vector<Tensor>& inputs) {
  nlohmann::json request = {{"expr", expression}, {"inputs", nlohmann::json::array()}};
  for (const Tensor& t : inputs) request["inputs"].push_back(encode(t));
  return request;
}

// Sends a request and decodes the tensors (or the Python error) it gets back.
TorchResult ask_for_outputs(const nlohmann::json& request) {
  const nlohmann::json response = process().ask(request);
  TorchResult result;
  result.ok = response.at("ok").get<bool>();
  if (!result.ok) {
    result.error = response.at("error").get<std::string>();
    return result;
  }
  for (const auto& spec : response.at("outputs")) result.outputs.push_back(decode(spec));
  return result;
}

}  // namespace

TorchResult torch_run(const std::string& expression, const std::vector<Tensor>& inputs) {
  return ask_for_outputs(make_request(expression, inputs));
}

std::vector<Tensor> torch_eval(const std::string& expression, const std::vector<Tensor>& inputs) {
  TorchResult result = torch_run(expression, inputs);
  check(result.ok, "torch raised for `", expression, "`: ", result.error);
  return result.outputs;
}

Tensor torch_eval1(const std::string& expression, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs = torch_eval(expression, inputs);
  check(outputs.size() == 1, "torch oracle: `", expression, "` gave ", outputs.size(), " results, expected 1");
  return outputs[0];
}

std::vector<Tensor> torch_exec(const std::string& code, const std::vector<Tensor>& inputs) {
  nlohmann::json request = make_request("", inputs);
  request["code"] = code;
  TorchResult result = ask_for_outputs(request);
  check(result.ok, "torch raised for the code:\n", code, "\n", result.error);
  return result.outputs;
}

namespace {

std::string ask_text(nlohmann::json request, const std::string& what) {
  request["as_text"] = true;
  const nlohmann::json response = process().ask(request);
  check(response.at("ok").get<bool>(), "torch raised for `", what, "`: ", response.value("error", std::string()));
  return response.at("text").get<std::string>();
}

}  // namespace

std::string torch_exec_text(const std::string& code, const std::vector<Tensor>& inputs) {
  nlohmann::json request = make_request("", inputs);
  request["code"] = code;
  return ask_text(request, code);
}

std::string torch_text(const std::string& expression, const std::vector<Tensor>& inputs) {
  return ask_text(make_request(expression, inputs), expression);
}

std::string torch_error(const std::string& expression, const std::vector<Tensor>& inputs) {
  TorchResult result = torch_run(expression, inputs);
  check(!result.ok, "torch oracle: expected `", expression, "` to raise, but it returned");
  return result.error;
}

}  // namespace refgrad::testing
