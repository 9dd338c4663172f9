// Engine nodes (being filled in): validate_outputs, AccumulateGrad, CopyBackwards, CopySlices, GraphRoot.
#include "define.hpp"

namespace refgrad::nodes {

void add_engine_nodes(std::vector<NodeDef>& /*registry*/) {}

}  // namespace refgrad::nodes
