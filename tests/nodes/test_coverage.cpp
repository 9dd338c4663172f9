// The nodes torch 2.13 produces on CPU for the modules the node library must
// cover, listed by running torch (tests/nodes/torch_module_nodes.py), against
// refgrad's registry.
#include <nlohmann/json.hpp>
#include <set>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

// Nodes those modules produce that refgrad does not have yet. The test fails
// when a node is missing and not listed here, and when a listed node has
// arrived in the registry, so this list always says exactly what is missing.
const std::set<std::string> kNotYet = {};

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("nodes torch produces for the listed modules") {
  const std::string listing = torch_exec_text(
      "import json\nfrom nodes.torch_module_nodes import module_nodes\nresult = json.dumps(module_nodes())");
  const auto modules = nlohmann::json::parse(listing);
  REQUIRE(modules.size() >= 20);
  std::set<std::string> produced;
  for (const auto& [module, names] : modules.items()) {
    for (const auto& name_json : names) {
      const std::string name = name_json.get<std::string>();
      produced.insert(name);
      if (find_node(name) == nullptr)
        CHECK_MESSAGE(kNotYet.count(name) == 1, module, " produces ", name, ", which refgrad lacks");
    }
  }
  for (const std::string& name : kNotYet) {
    CHECK_MESSAGE(find_node(name) == nullptr, name, " is in the registry now: remove it from kNotYet");
    CHECK_MESSAGE(produced.count(name) == 1, name, " is not produced by any listed module: remove it from kNotYet");
  }
  std::string all;
  for (const std::string& name : produced) all += " " + name;
  MESSAGE(produced.size(), " nodes produced, ", produced.size() - kNotYet.size(), " in refgrad:", all);
}

}  // TEST_SUITE
