// A small convolutional network on the eager tape.
//
// A batch of 8 random 1x8x8 "images" with random labels from 3 classes goes
// through conv2d (3x3, 4 channels, padding 1) -> relu -> max_pool2d (2x2) ->
// flatten -> linear -> cross_entropy. One forward and backward prints the loss
// and each parameter's gradient norm; then a few SGD steps show the loss
// going down (the net memorizes the labels).
//
//   build/examples/eager/cnn                   # forward, backward, a few steps
//   build/examples/eager/cnn --print-program   # the backward program
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "example_support.hpp"

namespace eager = refgrad::eager;
using eager::Variable;

namespace {

constexpr std::int64_t kBatch = 8, kChannels = 4, kSide = 8, kClasses = 3;
constexpr int kSteps = 5;
constexpr double kLearningRate = 0.1;

struct Cnn {
  std::vector<Variable> parameters;  // conv.weight, conv.bias, fc.weight, fc.bias

  Variable forward(const Variable& images) const {
    // (8, 1, 8, 8) -> conv, same size: (8, 4, 8, 8) -> pool: (8, 4, 4, 4)
    const Variable features = eager::max_pool2d(
        eager::relu(eager::conv2d(images, parameters[0], parameters[1], {1, 1}, {1, 1})), {2, 2});
    // flatten everything but the batch dimension: (8, 64), then the class scores (8, 3)
    return eager::linear(eager::flatten(features, 1), parameters[2], parameters[3]);
  }
};

Cnn make_cnn(refgrad::Generator& generator) {
  constexpr std::int64_t kFeatures = kChannels * (kSide / 2) * (kSide / 2);
  return {{example::parameter({kChannels, 1, 3, 3}, 0.3, generator, "conv.weight"),
           example::parameter({kChannels}, 0.1, generator, "conv.bias"),
           example::parameter({kClasses, kFeatures}, 0.1, generator, "fc.weight"),
           example::parameter({kClasses}, 0.1, generator, "fc.bias")}};
}

int run_cnn(bool print_program) {
  refgrad::Generator generator(0);
  const Variable images = eager::constant(refgrad::randn({kBatch, 1, kSide, kSide}, generator));
  // Random labels in [0, 3): the index of the largest of three random numbers.
  const refgrad::Tensor labels = refgrad::argmax(refgrad::rand({kBatch, kClasses}, generator), 1);
  Cnn model = make_cnn(generator);

  for (int step = 0; step < kSteps; ++step) {
    const Variable loss = eager::cross_entropy(model.forward(images), labels);
    if (print_program) {
      example::print_backward_program(loss);
      return EXIT_SUCCESS;
    }
    eager::backward(loss);
    fmt::print("step {}  loss {:.6f}\n", step, loss.data().item<double>());
    if (step == 0) example::print_grad_norms(model.parameters);
    model.parameters = example::sgd_step(model.parameters, kLearningRate);
  }
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run([&] { return run_cnn(example::wants_program(argc, argv)); });
}
