// refgrad as a library: the gradient of loss = sum(x @ w) with respect to w
// is x^T @ ones, computed with refgrad's primitives and checked by hand.
#include <refgrad/ops.hpp>

#include <iostream>

int main() {
  using namespace refgrad;
  try {
    Tensor x = tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}});
    Tensor grad_w = matmul(t(x), ones({3, 2}));   // d sum(x @ w) / d w
    Tensor expected = tensor({{9.0, 9.0}, {12.0, 12.0}});
    std::cout << "grad_w = " << grad_w.repr() << "\n";
    if (!equal(grad_w, expected)) {
      std::cerr << "embed: wrong gradient, expected " << expected.repr() << "\n";
      return 1;
    }
    std::cout << "embed: refgrad works as a dependency\n";
    return 0;
  } catch (const Error& error) {
    std::cerr << "embed: " << error.what() << "\n";
    return 1;
  }
}
