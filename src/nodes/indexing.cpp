// Backward nodes: the indexing group (being filled in).
#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {

void add_indexing_nodes(std::vector<NodeDef>& /*registry*/) {}

}  // namespace refgrad::nodes
