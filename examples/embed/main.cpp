// refgrad as a library: a backward program parsed from text and run by the
// interpreter, and the same gradient computed with the tensor layer's
// primitives; both checked against values worked out by hand.
//
// loss = sum(x @ w) for x of shape [3,2] (no grad) and a leaf w of shape [2,2]:
// d loss / d w = x^T @ ones = [[9, 9], [12, 12]].
#include <refgrad/interpreter.hpp>
#include <refgrad/ops.hpp>

#include <iostream>

namespace {

const char* kProgram = R"(program embed
  grad  %g : f32[] = 1.0
  saved $x : f32[3,2] = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
  leaf  @w : f32[2,2]
code
  %0 = validate %g : f32[]
  %1 = SumBackward0 %0  self_sym_sizes=[3,2]
  %2 = validate %1 : f32[3,2]
  _, %3 = MmBackward0 %2  mat2=none mat2_layout=strided mat2_sym_sizes=[2,2] mat2_sym_strides=[2,1]
      self=$x self_layout=strided self_sym_sizes=[3,2] self_sym_strides=[] need=[0,1]
  _, %4 = validate none, %3 : _, f32[2,2]
  accumulate_grad @w %4
)";

}  // namespace

int main() {
  using namespace refgrad;
  try {
    const Tensor expected = tensor({{9.0f, 9.0f}, {12.0f, 12.0f}});

    Machine machine(bind(assemble(parse_program(kProgram, "embed.bwd"))));
    machine.run();
    const Tensor interpreted = *machine.leaf_grad("w");
    std::cout << "w.grad from the program = " << interpreted.repr() << "\n";

    const Tensor x = tensor({{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 6.0f}});
    const Tensor by_hand = matmul(t(x), ones({3, 2}));
    std::cout << "x^T @ ones              = " << by_hand.repr() << "\n";

    if (!equal(interpreted, expected) || !equal(by_hand, expected)) {
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
