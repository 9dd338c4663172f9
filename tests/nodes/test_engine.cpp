// Placeholder: the engine-node tests.
#include "node_test.hpp"
