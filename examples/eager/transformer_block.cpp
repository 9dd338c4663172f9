// One pre-norm transformer block on the eager tape, written from its ops:
//
//   h = x + attention(layer_norm(x))        multi-head self-attention
//   y = h + mlp(layer_norm(h))              linear -> GELU -> linear
//   loss = mean(y^2)
//
// on a seeded (seq, d_model) input. It prints the loss and every parameter's
// gradient norm; with --print-program, the backward program PyTorch's engine
// would run for the same code (NativeLayerNormBackward0, BmmBackward0,
// SoftmaxBackward0, GeluBackward0 ...).
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include <fmt/format.h>

#include "example_support.hpp"

namespace eager = refgrad::eager;
using eager::Variable;

namespace {

constexpr std::int64_t kSeq = 4, kModel = 8, kHeads = 2, kHead = kModel / kHeads, kHidden = 16;

using Parameters = std::map<std::string, Variable>;

// (seq, d_model) -> (heads, seq, d_head): each head attends on its own slice of the features.
Variable split_heads(const Variable& x) { return eager::transpose(eager::view(x, {kSeq, kHeads, kHead}), 0, 1); }

Variable self_attention(const Variable& x, const Parameters& p) {
  const Variable q = split_heads(eager::linear(x, p.at("attn.q.weight"), p.at("attn.q.bias")));
  const Variable k = split_heads(eager::linear(x, p.at("attn.k.weight"), p.at("attn.k.bias")));
  const Variable v = split_heads(eager::linear(x, p.at("attn.v.weight"), p.at("attn.v.bias")));
  // scores[h, i, j] = q_i . k_j / sqrt(d_head): scaled so the softmax does not saturate as d_head grows.
  const Variable scores = eager::div(eager::matmul(q, eager::transpose(k, 1, 2)), std::sqrt(double(kHead)));
  const Variable weights = eager::softmax(scores, -1);  // each query's weights over the keys sum to 1
  // (heads, seq, d_head) -> (seq, heads, d_head) -> (seq, d_model): the heads side by side again.
  // The transpose is not contiguous, so reshape copies (CloneBackward0, then UnsafeViewBackward0).
  const Variable heads = eager::reshape(eager::transpose(eager::matmul(weights, v), 0, 1), {kSeq, kModel});
  return eager::linear(heads, p.at("attn.out.weight"), p.at("attn.out.bias"));
}

Variable mlp(const Variable& x, const Parameters& p) {
  const Variable hidden = eager::gelu(eager::linear(x, p.at("mlp.fc1.weight"), p.at("mlp.fc1.bias")));
  return eager::linear(hidden, p.at("mlp.fc2.weight"), p.at("mlp.fc2.bias"));
}

Variable block(const Variable& x, const Parameters& p) {
  // Pre-norm: each sublayer sees a normalized copy; the residual stream x -> h -> y is left as it is.
  const Variable a = eager::layer_norm(x, {kModel}, p.at("ln1.weight"), p.at("ln1.bias"));
  const Variable h = eager::add(x, self_attention(a, p));
  return eager::add(h, mlp(eager::layer_norm(h, {kModel}, p.at("ln2.weight"), p.at("ln2.bias")), p));
}

Parameters make_parameters(refgrad::Generator& generator) {
  Parameters p;
  const auto add_linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    p[name + ".weight"] = example::parameter({out, in}, 1 / std::sqrt(double(in)), generator, name + ".weight");
    p[name + ".bias"] = example::parameter({out}, 0.1, generator, name + ".bias");
  };
  for (const char* name : {"attn.q", "attn.k", "attn.v", "attn.out"}) add_linear(name, kModel, kModel);
  add_linear("mlp.fc1", kHidden, kModel);
  add_linear("mlp.fc2", kModel, kHidden);
  for (const char* name : {"ln1", "ln2"}) {  // layer_norm starts as the identity: weight 1, bias 0
    p[std::string(name) + ".weight"] = eager::leaf(refgrad::ones({kModel}), std::string(name) + ".weight");
    p[std::string(name) + ".bias"] = eager::leaf(refgrad::zeros({kModel}), std::string(name) + ".bias");
  }
  return p;
}

int run_block(bool print_program) {
  refgrad::Generator generator(0);
  const Variable x = eager::constant(refgrad::randn({kSeq, kModel}, generator));
  const Parameters parameters = make_parameters(generator);
  const Variable loss = eager::mean(eager::pow(block(x, parameters), 2));
  if (print_program) {
    example::print_backward_program(loss);
    return EXIT_SUCCESS;
  }
  eager::backward(loss);
  fmt::print("loss {:.6f}\n", loss.data().item<double>());
  // attn.k.bias gets a zero grad, and rightly: adding the same vector to every
  // key adds q_i . bias to all of query i's scores, which softmax ignores.
  std::vector<Variable> in_order;
  for (const auto& [name, parameter] : parameters) in_order.push_back(parameter);
  example::print_grad_norms(in_order);
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run([&] { return run_block(example::wants_program(argc, argv)); });
}
