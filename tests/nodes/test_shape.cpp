// Placeholder: the node tests of this group.
#include "node_test.hpp"
