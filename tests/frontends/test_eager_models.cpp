// Small models on the eager tape: every parameter's .grad after backward(loss)
// against finite differences of the whole forward in float64 (an MLP, an
// attention block), and the attention block's backward program — it verifies,
// and it calls the nodes PyTorch's engine calls, in the engine's order.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "eager_check.hpp"
#include "refgrad/eager.hpp"
#include "refgrad/graph.hpp"
#include "refgrad/ops.hpp"
#include "refgrad/program.hpp"

using namespace refgrad;
namespace eager = refgrad::eager;
using eager::Variable;

namespace {

using testing::check_against_finite_differences;
using testing::values;

// Deterministic inputs of these shapes, each with its own seed.
std::vector<Tensor> inputs_of(const std::vector<Shape>& shapes) {
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i) inputs.push_back(values(shapes[i], 0.37 * static_cast<double>(i)));
  return inputs;
}

// ------------------------------------------------------------------- MLP ---

// x (5, 3) -> linear(3, 4) -> tanh -> linear(4, 2): the logits or predictions.
enum Mlp { kX, kW1, kB1, kW2, kB2 };
const std::vector<Shape> kMlpShapes = {{5, 3}, {4, 3}, {4}, {2, 4}, {2}};

Variable mlp(const std::vector<Variable>& p) {
  return eager::linear(eager::tanh(eager::linear(p[kX], p[kW1], p[kB1])), p[kW2], p[kB2]);
}

TEST_CASE("eager: an MLP's grads (linear, tanh, linear, mse_loss) match finite differences") {
  const Variable target = eager::constant(values({5, 2}, 2.9));
  check_against_finite_differences([&](const std::vector<Variable>& p) { return eager::mse_loss(mlp(p), target); },
                                   inputs_of(kMlpShapes));
}

TEST_CASE("eager: an MLP's grads (linear, tanh, linear, cross_entropy) match finite differences") {
  const Tensor labels = from_vector<std::int64_t>({0, 1, 1, 0, 1}, {5});
  check_against_finite_differences(
      [&](const std::vector<Variable>& p) { return eager::cross_entropy(mlp(p), labels); }, inputs_of(kMlpShapes));
}

// ------------------------------------------------------- attention block ---

// A pre-norm transformer block on x (seq 3, d_model 4) with 2 heads of 2:
//   h = x + out(attention(q, k, v of layer_norm(x)));  y = h + fc2(gelu(fc1(layer_norm(h))));  loss = mean(y^2)
// Each op is its own statement, in the order of the PyTorch code that gave
// kEngineOrder below: the order ops are recorded in sets their sequence_nr.
constexpr std::int64_t kSeq = 3, kModel = 4, kHeads = 2, kHead = 2, kHidden = 8;
enum Block { kInput, kLn1W, kLn1B, kLn2W, kLn2B, kWq, kBq, kWk, kBk, kWv, kBv, kWo, kBo, kFc1W, kFc1B, kFc2W, kFc2B };
const std::vector<Shape> kBlockShapes = {
    {kSeq, kModel},                                                  // x
    {kModel}, {kModel}, {kModel}, {kModel},                          // ln1, ln2: weight, bias
    {kModel, kModel}, {kModel}, {kModel, kModel}, {kModel},          // q, k
    {kModel, kModel}, {kModel}, {kModel, kModel}, {kModel},          // v, out
    {kHidden, kModel}, {kHidden}, {kModel, kHidden}, {kModel}};      // fc1, fc2

Variable split_heads(const Variable& x) { return eager::transpose(eager::view(x, {kSeq, kHeads, kHead}), 0, 1); }

Variable attention_block(const std::vector<Variable>& p) {
  const Variable a = eager::layer_norm(p[kInput], {kModel}, p[kLn1W], p[kLn1B]);
  const Variable q = split_heads(eager::linear(a, p[kWq], p[kBq]));
  const Variable k = split_heads(eager::linear(a, p[kWk], p[kBk]));
  const Variable v = split_heads(eager::linear(a, p[kWv], p[kBv]));
  const Variable scores = eager::div(eager::matmul(q, eager::transpose(k, 1, 2)), std::sqrt(double(kHead)));
  const Variable weights = eager::softmax(scores, -1);
  const Variable heads = eager::reshape(eager::transpose(eager::matmul(weights, v), 0, 1), {kSeq, kModel});
  const Variable h = eager::add(p[kInput], eager::linear(heads, p[kWo], p[kBo]));
  const Variable b = eager::layer_norm(h, {kModel}, p[kLn2W], p[kLn2B]);
  const Variable hidden = eager::gelu(eager::linear(b, p[kFc1W], p[kFc1B]));
  const Variable y = eager::add(h, eager::linear(hidden, p[kFc2W], p[kFc2B]));
  return eager::mean(eager::pow(y, 2));
}

TEST_CASE("eager: an attention block's grads (layer_norm, q/k/v, softmax, GELU MLP) match finite differences") {
  check_against_finite_differences(attention_block, inputs_of(kBlockShapes));
}

// The nodes PyTorch 2.13's engine calls for the same block, in the order it
// calls them: a prehook on every node of the grad_fn graph appending
// node.name(), for this Python code (float64, all 17 tensors requiring grad):
//   a = F.layer_norm(x, (4,), ln1w, ln1b)
//   q, k, v = [F.linear(a, w, b).view(3, 2, 2).transpose(0, 1) for w, b in ...]
//   s = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(2); w = torch.softmax(s, -1)
//   o = torch.matmul(w, v).transpose(0, 1).reshape(3, 4); h = x + F.linear(o, wo, bo)
//   y = h + F.linear(F.gelu(F.linear(F.layer_norm(h, (4,), ln2w, ln2b), w1, b1)), w2, b2)
//   y.pow(2).mean().backward()
// One difference: Python's `s / 2.0` wraps the float as a tensor (DivBackward0);
// eager::div(Variable, Scalar) is at::div(Tensor, Scalar), DivBackward1.
const std::vector<std::string> kEngineOrder = {
    "MeanBackward0", "PowBackward0", "AddBackward0", "AddmmBackward0", "TBackward0", "GeluBackward0",
    "AddmmBackward0", "TBackward0", "NativeLayerNormBackward0", "AddBackward0", "AddmmBackward0", "TBackward0",
    "UnsafeViewBackward0", "CloneBackward0", "TransposeBackward0", "UnsafeViewBackward0", "BmmBackward0",
    "ReshapeAliasBackward0", "ExpandBackward0", "ViewBackward0", "ExpandBackward0", "SoftmaxBackward0",
    "DivBackward1", "UnsafeViewBackward0", "BmmBackward0", "ReshapeAliasBackward0", "ExpandBackward0",
    "ReshapeAliasBackward0", "ExpandBackward0", "TransposeBackward0", "TransposeBackward0", "ViewBackward0",
    "AddmmBackward0", "TBackward0", "TransposeBackward0", "ViewBackward0", "AddmmBackward0", "TBackward0",
    "TransposeBackward0", "ViewBackward0", "AddmmBackward0", "TBackward0", "NativeLayerNormBackward0"};

Program attention_block_program() {
  std::vector<Variable> leaves;
  const std::vector<Tensor> inputs = inputs_of(kBlockShapes);
  for (std::size_t i = 0; i < inputs.size(); ++i) leaves.push_back(eager::leaf(inputs[i], fmt::format("p{}", i)));
  return functionalize(eager::record({attention_block(leaves)})).bundle.program;
}

TEST_CASE("eager: an attention block's backward program verifies and calls torch's nodes in the engine's order") {
  const Program program = attention_block_program();
  const std::vector<Diagnostic> diagnostics = verify(program);
  std::string messages;
  for (const Diagnostic& diagnostic : diagnostics) messages += to_string(diagnostic) + "\n";
  INFO(messages);
  CHECK(diagnostics.empty());

  std::vector<std::string> called;
  std::size_t accumulated = 0;
  for (const Instr& instr : program.code) {
    if (instr.op == Opcode::Call) called.push_back(instr.node);
    if (instr.op == Opcode::AccumulateGrad) ++accumulated;
  }
  CHECK(called == kEngineOrder);
  CHECK(accumulated == kBlockShapes.size());  // every leaf's .grad, x's too
}

}  // namespace
