// Training a two-layer MLP with refgrad's eager tape.
//
// The task is a synthetic regression: inputs x ~ N(0, 1) and targets made by a
// fixed random "teacher" function. The student, linear -> tanh -> linear, is
// trained with mean squared error and 20 steps of plain SGD. Each step runs the
// forward on the tape, then backward(loss): the tape's graph is turned into the
// program PyTorch's engine would run (--print-program shows it) and the
// interpreter runs it, leaving each parameter's gradient in .grad.
//
//   build/examples/eager/mlp_train                   # train, print the loss per step
//   build/examples/eager/mlp_train --print-program   # the first step's backward program
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "example_support.hpp"

namespace eager = refgrad::eager;
using eager::Variable;

namespace {

constexpr std::int64_t kBatch = 64, kInputs = 4, kHidden = 16;
constexpr int kSteps = 20;
constexpr double kLearningRate = 0.1;

// The model: parameters in the order forward() reads them.
struct Mlp {
  std::vector<Variable> parameters;  // fc1.weight, fc1.bias, fc2.weight, fc2.bias

  Variable forward(const Variable& x) const {
    // F.linear computes x @ weight.t() + bias, so weight is (out_features, in_features).
    const Variable hidden = eager::tanh(eager::linear(x, parameters[0], parameters[1]));
    return eager::linear(hidden, parameters[2], parameters[3]);
  }
};

Mlp make_mlp(refgrad::Generator& generator) {
  return {{example::parameter({kHidden, kInputs}, 0.5, generator, "fc1.weight"),
           example::parameter({kHidden}, 0.1, generator, "fc1.bias"),
           example::parameter({1, kHidden}, 0.25, generator, "fc2.weight"),
           example::parameter({1}, 0.1, generator, "fc2.bias")}};
}

// Targets y = sin(x @ a) @ b: smooth, not linear, and exactly learnable by no one.
refgrad::Tensor teacher(const refgrad::Tensor& x, refgrad::Generator& generator) {
  const refgrad::Tensor a = refgrad::randn({kInputs, 3}, generator);
  const refgrad::Tensor b = refgrad::randn({3, 1}, generator);
  return refgrad::mm(refgrad::sin(refgrad::mm(x, a)), b);
}

int train(bool print_program) {
  refgrad::Generator generator(0);  // one seed: the same data, weights and losses on every run
  const Variable x = eager::constant(refgrad::randn({kBatch, kInputs}, generator));
  const Variable y = eager::constant(teacher(x.data(), generator));
  Mlp model = make_mlp(generator);

  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Variable loss = eager::mse_loss(model.forward(x), y);
    if (print_program) {
      example::print_backward_program(loss);
      return EXIT_SUCCESS;
    }
    eager::backward(loss);  // fills .grad of every parameter
    last_loss = loss.data().item<double>();
    if (step == 0) first_loss = last_loss;
    fmt::print("step {:2}  loss {:.6f}\n", step, last_loss);
    model.parameters = example::sgd_step(model.parameters, kLearningRate);
  }
  if (!(last_loss < first_loss)) {
    fmt::print(stderr, "the loss did not go down: {:.6f} -> {:.6f}\n", first_loss, last_loss);
    return EXIT_FAILURE;
  }
  fmt::print("loss went down from {:.6f} to {:.6f}\n", first_loss, last_loss);
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run([&] { return train(example::wants_program(argc, argv)); });
}
