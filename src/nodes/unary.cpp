// Backward nodes: the unary group (being filled in).
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {

void add_unary_nodes(std::vector<NodeDef>& /*registry*/) {}

}  // namespace refgrad::nodes
