// `make demo` (for now): a tour of refgrad's tensor layer, ending with the
// backward of a one-layer network written out by hand as the flat list of
// pure calls that refgrad's interpreter will run once it exists.
#include <refgrad/ops.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

using namespace refgrad;

namespace {

void show(const std::string& label, const Tensor& value) {
  std::cout << label << "\n" << value.repr() << "\n\n";
}

// loss = sum(relu(x @ w + b)), the forward of the program below.
double loss_of(const Tensor& x, const Tensor& w, const Tensor& b) {
  return sum(relu(add(matmul(x, w), b))).item<double>();
}

}  // namespace

int main() {
  try {
    std::cout << "refgrad " << "tensor tour: the interpreter and the PyTorch bridge are not built yet;\n"
              << "this demo shows the tensor layer they stand on.\n\n";

    Tensor x = tensor({{1.0, -2.0, 3.0}, {0.5, 4.0, -1.0}}, DType::Float64);
    show("x (2x3, float64):", x);
    show("views share storage: transpose(x, 0, 1)", transpose(x, 0, 1));
    show("broadcasting: x + [10, 20, 30]", add(x, tensor({10, 20, 30})));
    show("type promotion: int64 tensor * 2.5 gives float32", mul(arange(4), 2.5));
    show("softmax(x, dim=1), numerically stable:", softmax(x, 1));

    // The backward of loss = sum(relu(x @ w + b)) as flat pure calls, the way
    // a functionalized backward program computes it.
    Generator generator(0);
    Tensor w = randn({3, 4}, generator, DType::Float64);
    Tensor b = randn({4}, generator, DType::Float64);
    Tensor result = relu(add(matmul(x, w), b));                      // saved by ReluBackward0
    Tensor grad = ones({}, DType::Float64);                          // d loss / d loss
    Tensor grad_sum = expand(grad, result.sizes());                  // SumBackward0
    Tensor grad_relu = where(gt(result, 0), grad_sum, zeros_like(grad_sum));  // ReluBackward0
    Tensor grad_b = sum_to(grad_relu, b.sizes());                    // validate: b was broadcast
    Tensor grad_w = mm(t(x), grad_relu);                             // MmBackward0 (mat2)
    show("grad of b (AddBackward0, then sum_to [2,4] -> [4]):", grad_b);
    show("grad of w (MmBackward0: x^T @ grad):", grad_w);

    // Check every entry against a central finite difference.
    const double eps = 1e-6;
    double worst = 0;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      Tensor w_plus = w.clone(), w_minus = w.clone();
      w_plus.data_ptr<double>()[i] += eps;
      w_minus.data_ptr<double>()[i] -= eps;
      const double numeric = (loss_of(x, w_plus, b) - loss_of(x, w_minus, b)) / (2 * eps);
      worst = std::max(worst, std::abs(numeric - grad_w.contiguous().data_ptr<double>()[i]));
    }
    std::cout << "largest difference between grad of w and finite differences: " << worst << "\n";
    return worst < 1e-6 ? 0 : 1;
  } catch (const Error& error) {
    std::cerr << "tensor_tour: " << error.what() << "\n";
    return 1;
  }
}
