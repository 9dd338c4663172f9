// Backward nodes: the nn group (being filled in).
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {

void add_nn_nodes(std::vector<NodeDef>& /*registry*/) {}

}  // namespace refgrad::nodes
