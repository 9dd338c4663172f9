// How a node is defined: its typed Saved struct, its pure function, and one
// define_node<Saved, Function>(schema, fields) call that ties them to the
// registry. Private to src/nodes.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "refgrad/nodes.hpp"

namespace refgrad::nodes {

// Raises unless `value` fits `type`; names the node and the field.
void check_field(const FieldValue& value, FieldType type, const std::string& node, const std::string& field);

// A FieldValue converted to the member type of a Saved struct. check_field
// has already run, so the alternative is the expected one.
template <class M>
M field_as(const FieldValue& value) {
  if constexpr (std::is_same_v<M, Tensor> || std::is_same_v<M, TensorList> ||
                std::is_same_v<M, std::vector<OptionalTensor>> || std::is_same_v<M, std::int64_t> ||
                std::is_same_v<M, IntList> || std::is_same_v<M, double> || std::is_same_v<M, bool> ||
                std::is_same_v<M, Scalar> || std::is_same_v<M, std::string> || std::is_same_v<M, DType> ||
                std::is_same_v<M, Layout> || std::is_same_v<M, TensorOptions> || std::is_same_v<M, TensorGeometry> ||
                std::is_same_v<M, TypeAndSize> || std::is_same_v<M, std::vector<DType>> ||
                std::is_same_v<M, std::vector<IntList>>) {
    return std::get<M>(value);
  } else {  // std::optional<T>: None becomes nullopt
    using T = typename M::value_type;
    if (std::holds_alternative<None>(value)) return std::nullopt;
    return field_as<T>(value);
  }
}

// One saved field of Saved: its schema and the member it is stored in.
template <class Saved>
struct Field {
  SavedFieldSchema schema;
  void (*assign)(Saved& saved, const FieldValue& value);
};

template <auto Member>
struct MemberTraits;
template <class Saved, class M, M Saved::*Member>
struct MemberTraits<Member> {
  using SavedType = Saved;
  using MemberType = M;
};

template <auto Member>
Field<typename MemberTraits<Member>::SavedType> make_field(std::string name, FieldType type, bool exposed) {
  using Saved = typename MemberTraits<Member>::SavedType;
  using M = typename MemberTraits<Member>::MemberType;
  return Field<Saved>{SavedFieldSchema{std::move(name), type, exposed},
                      [](Saved& saved, const FieldValue& value) { saved.*Member = field_as<M>(value); }};
}

// saved<&Saved::member>("name", kind): a field exposed to Python as _saved_<name>.
// hidden<&Saved::member>("name", kind): one PyTorch stores but does not expose (†).
template <auto Member>
auto saved(std::string name, FieldKind kind, bool optional = false) {
  return make_field<Member>(std::move(name), FieldType{kind, optional}, true);
}

template <auto Member>
auto hidden(std::string name, FieldKind kind, bool optional = false) {
  return make_field<Member>(std::move(name), FieldType{kind, optional}, false);
}

// The registry's view of a node defined by a typed struct and a function
//   Grads Function(const Grads&, const Saved&, const Need&).
template <class Saved, Grads (*Function)(const Grads&, const Saved&, const Need&)>
NodeDef define_node(NodeSchema schema, std::vector<Field<Saved>> fields) {
  for (const Field<Saved>& field : fields) schema.saved.push_back(field.schema);
  NodeDef def;
  def.schema = std::move(schema);
  def.bind = [fields = std::move(fields), node = def.schema.name](const std::vector<FieldValue>& values) -> BoundSaved {
    check(values.size() == fields.size(), node, ": expected ", fields.size(), " saved fields, got ", values.size());
    auto typed = std::make_shared<Saved>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      check_field(values[i], fields[i].schema.type, node, fields[i].schema.name);
      fields[i].assign(*typed, values[i]);
    }
    return typed;
  };
  def.apply = [](const Grads& grads, const void* saved, const Need& need) {
    check(saved != nullptr, "the node's saved fields are not bound (apply takes what bind returned)");
    return Function(grads, *static_cast<const Saved*>(saved), need);
  };
  return def;
}

// A tensor PyTorch saves only when another input needs its grad (None
// otherwise): returns it, or raises when `input`'s grad is needed but the
// tensor was not saved.
inline const Tensor& needed(const std::optional<Tensor>& tensor, const char* node, const char* input,
                            const char* field) {
  check(tensor.has_value(), node, ": ", input, "'s grad is needed but `", field, "` was not saved");
  return *tensor;
}

// An elementwise op's incoming grad and its saved self or result both have
// the forward output's shape; anything else is a malformed program, reported
// instead of broadcast.
inline void check_same_shape(const char* node, const Tensor& grad, const Tensor& saved, const char* field) {
  check(grad.sizes() == saved.sizes(), node, ": grad has shape ", shape_text(grad.sizes()), " but ", field,
        " has shape ", shape_text(saved.sizes()));
}

// A saved size list (self_sym_sizes, ...) describes a real tensor: no size is
// negative, and the product of its sizes, taken in order as ATen's numel takes
// it, does not overflow int64. Nodes that make zeros of it, reshape to it or
// index it check it first, so that the error names the field.
inline void check_sizes(const char* node, const char* field, const IntList& sizes) {
  std::int64_t numel = 1;
  for (std::int64_t size : sizes) {
    check(size >= 0, node, ": ", field, " ", shape_text(sizes), " has a negative size");
    check(!__builtin_mul_overflow(numel, size, &numel), node, ": ", field, " ", shape_text(sizes),
          " has more elements than int64 can count");
  }
}

// wrap_dim for a saved dim (`dim_field`) that indexes a saved size list
// (`sizes_field`); the error names both. As ATen's maybe_wrap_dim, an empty
// list (a 0-d tensor) accepts dims 0 and -1, so a caller that then indexes
// `sizes` must handle the 0-d case.
inline std::int64_t wrap_saved_dim(const char* node, const char* dim_field, std::int64_t dim, const char* sizes_field,
                                   const IntList& sizes) {
  const std::int64_t range = std::max<std::int64_t>(static_cast<std::int64_t>(sizes.size()), 1);
  check(dim >= -range && dim < range, node, ": ", dim_field, " ", dim, " is out of range for ", sizes_field, " ",
        shape_text(sizes), " (expected a dim in [", -range, ", ", range - 1, "])");
  return dim < 0 ? dim + range : dim;
}

// The node groups, each adding its nodes to the registry (registry.cpp calls them).
void add_arithmetic_nodes(std::vector<NodeDef>& registry);
void add_linalg_nodes(std::vector<NodeDef>& registry);
void add_linalg_decomposition_nodes(std::vector<NodeDef>& registry);
void add_reduction_nodes(std::vector<NodeDef>& registry);
void add_activation_nodes(std::vector<NodeDef>& registry);
void add_unary_nodes(std::vector<NodeDef>& registry);
void add_complex_nodes(std::vector<NodeDef>& registry);
void add_fft_nodes(std::vector<NodeDef>& registry);
void add_shape_nodes(std::vector<NodeDef>& registry);
void add_indexing_nodes(std::vector<NodeDef>& registry);
void add_nn_nodes(std::vector<NodeDef>& registry);
void add_pooling_nodes(std::vector<NodeDef>& registry);
void add_padding_nodes(std::vector<NodeDef>& registry);
void add_upsample_nodes(std::vector<NodeDef>& registry);
void add_random_nodes(std::vector<NodeDef>& registry);
void add_grid_sampler_nodes(std::vector<NodeDef>& registry);
void add_elementwise_nodes(std::vector<NodeDef>& registry);
void add_distance_nodes(std::vector<NodeDef>& registry);
void add_loss_nodes(std::vector<NodeDef>& registry);
void add_special_nodes(std::vector<NodeDef>& registry);
void add_engine_nodes(std::vector<NodeDef>& registry);

}  // namespace refgrad::nodes
