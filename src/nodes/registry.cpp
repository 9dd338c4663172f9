// The node registry: name -> schema + bind + pure function; saved-field kinds.
#include <algorithm>
#include <set>

#include "define.hpp"

namespace refgrad {

std::string layout_name(Layout layout) {
  switch (layout) {
    case Layout::Strided: return "torch.strided";
    case Layout::Sparse: return "torch.sparse_coo";
    case Layout::SparseCsr: return "torch.sparse_csr";
    case Layout::Mkldnn: return "torch._mkldnn";
    case Layout::SparseCsc: return "torch.sparse_csc";
    case Layout::SparseBsr: return "torch.sparse_bsr";
    case Layout::SparseBsc: return "torch.sparse_bsc";
    case Layout::Jagged: return "torch.jagged";
  }
  return "unknown layout";
}

std::string memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous_format";
    case MemoryFormat::Preserve: return "preserve_format";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::ChannelsLast3d: return "channels_last_3d";
  }
  return "unknown memory format";
}

std::string type_name(FieldType type) {
  const char* base = "?";
  switch (type.kind) {
    case FieldKind::Tensor: base = "Tensor"; break;
    case FieldKind::TensorList: base = "Tensor[]"; break;
    case FieldKind::OptionalTensorList: base = "Tensor?[]"; break;
    case FieldKind::Int: base = "int"; break;
    case FieldKind::IntList: base = "int[]"; break;
    case FieldKind::Sizes: base = "SymInt[]"; break;
    case FieldKind::Float: base = "float"; break;
    case FieldKind::Bool: base = "bool"; break;
    case FieldKind::Scalar: base = "Scalar"; break;
    case FieldKind::String: base = "str"; break;
    case FieldKind::DType: base = "ScalarType"; break;
    case FieldKind::Layout: base = "Layout"; break;
    case FieldKind::TensorOptions: base = "TensorOptions"; break;
    case FieldKind::TensorGeometry: base = "TensorGeometry"; break;
    case FieldKind::TypeAndSize: base = "TypeAndSize"; break;
    case FieldKind::DTypeList: base = "ScalarType[]"; break;
    case FieldKind::SizesList: base = "SymInt[][]"; break;
    case FieldKind::BoolList: base = "bool[]"; break;
    case FieldKind::Device: base = "Device"; break;
    case FieldKind::MemoryFormat: base = "MemoryFormat"; break;
  }
  return std::string(base) + (type.optional ? "?" : "");
}

namespace {

}  // namespace

std::string describe(const FieldValue& value) {
  struct Describe {
    std::string operator()(const None&) const { return "None"; }
    std::string operator()(const Tensor& t) const {
      return t.defined() ? "Tensor " + short_dtype_name(t.dtype()) + str(t.sizes()) : "undefined Tensor";
    }
    std::string operator()(const TensorList& list) const { return "Tensor[] of " + std::to_string(list.size()); }
    std::string operator()(const std::vector<OptionalTensor>& list) const {
      return "Tensor?[] of " + std::to_string(list.size());
    }
    std::string operator()(std::int64_t v) const { return "int " + std::to_string(v); }
    std::string operator()(const IntList& v) const { return "int[] " + str(v); }
    std::string operator()(double v) const { return "float " + Scalar(v).repr(); }
    std::string operator()(bool v) const { return std::string("bool ") + (v ? "True" : "False"); }
    std::string operator()(const Scalar& v) const { return "Scalar " + v.repr(); }
    std::string operator()(const std::string& v) const { return "str '" + v + "'"; }
    std::string operator()(DType v) const { return "ScalarType " + dtype_name(v); }
    std::string operator()(Layout v) const { return "Layout " + layout_name(v); }
    std::string operator()(const TensorOptions&) const { return "TensorOptions"; }
    std::string operator()(const TensorGeometry& g) const {
      return "TensorGeometry " + str(g.sizes) + " strides " + str(g.strides) + " offset " +
             std::to_string(g.storage_offset);
    }
    std::string operator()(const TypeAndSize& t) const { return "TypeAndSize " + str(t.sizes); }
    std::string operator()(const std::vector<DType>& list) const {
      return "ScalarType[] of " + std::to_string(list.size());
    }
    std::string operator()(const std::vector<IntList>& list) const {
      return "SymInt[][] of " + std::to_string(list.size());
    }
    std::string operator()(const std::vector<bool>& list) const { return "bool[] of " + std::to_string(list.size()); }
    std::string operator()(Device v) const { return "Device " + device_name(v); }
    std::string operator()(MemoryFormat v) const { return "MemoryFormat " + memory_format_name(v); }
  };
  return std::visit(Describe{}, value);
}

namespace nodes {

void check_field(const FieldValue& value, FieldType type, const std::string& node, const std::string& field) {
  bool fits = false;
  switch (type.kind) {
    case FieldKind::Tensor: fits = std::holds_alternative<Tensor>(value) && std::get<Tensor>(value).defined(); break;
    case FieldKind::TensorList: fits = std::holds_alternative<TensorList>(value); break;
    case FieldKind::OptionalTensorList: fits = std::holds_alternative<std::vector<OptionalTensor>>(value); break;
    case FieldKind::Int: fits = std::holds_alternative<std::int64_t>(value); break;
    case FieldKind::IntList:
    case FieldKind::Sizes: fits = std::holds_alternative<IntList>(value); break;
    case FieldKind::Float: fits = std::holds_alternative<double>(value); break;
    case FieldKind::Bool: fits = std::holds_alternative<bool>(value); break;
    case FieldKind::Scalar: fits = std::holds_alternative<Scalar>(value); break;
    case FieldKind::String: fits = std::holds_alternative<std::string>(value); break;
    case FieldKind::DType: fits = std::holds_alternative<DType>(value); break;
    case FieldKind::Layout: fits = std::holds_alternative<Layout>(value); break;
    case FieldKind::TensorOptions: fits = std::holds_alternative<TensorOptions>(value); break;
    case FieldKind::TensorGeometry: fits = std::holds_alternative<TensorGeometry>(value); break;
    case FieldKind::TypeAndSize: fits = std::holds_alternative<TypeAndSize>(value); break;
    case FieldKind::DTypeList: fits = std::holds_alternative<std::vector<DType>>(value); break;
    case FieldKind::SizesList: fits = std::holds_alternative<std::vector<IntList>>(value); break;
    case FieldKind::BoolList: fits = std::holds_alternative<std::vector<bool>>(value); break;
    case FieldKind::Device: fits = std::holds_alternative<Device>(value); break;
    case FieldKind::MemoryFormat: fits = std::holds_alternative<MemoryFormat>(value); break;
  }
  if (type.optional && std::holds_alternative<None>(value)) fits = true;
  check(fits, node, ": saved field '", field, "' expects ", type_name(type), ", got ", describe(value));
}

}  // namespace nodes

namespace {

// The view ops' *_copy forms (expand_copy, diagonal_copy, ...: what functionalization makes of views, and
// what OpInfo's *_copy ops call) get nodes of their own, `ExpandBackward0_copy`, generated from the same
// derivatives.yaml entry: the same saved fields and formula as the view's node. (Functions.h lists them;
// the registry test checks each one's fields against it.) A copy's errors name the view's node.
void add_view_copy_nodes(std::vector<NodeDef>& registry) {
  static const char* const views[] = {
      "AliasBackward0",         "AsStridedBackward0",  "DiagonalBackward0",   "ExpandBackward0",
      "PermuteBackward0",       "ReshapeAliasBackward0", "SelectBackward0",   "SliceBackward0",
      "SplitBackward0",         "SplitWithSizesBackward0", "SqueezeBackward0", "SqueezeBackward1",
      "SqueezeBackward2",       "TBackward0",          "TransposeBackward0",  "UnbindBackward0",
      "UnfoldBackward0",        "UnsqueezeBackward0",  "ViewBackward0"};
  std::vector<NodeDef> copies;
  for (const char* view : views) {
    const auto found = std::find_if(registry.begin(), registry.end(),
                                    [view](const NodeDef& def) { return def.schema.name == view; });
    if (found == registry.end()) continue;  // a view node refgrad does not have yet
    NodeDef copy = *found;
    copy.schema.name += "_copy";
    const std::size_t overload = copy.schema.aten_op.find('.');
    copy.schema.aten_op.insert(overload == std::string::npos ? copy.schema.aten_op.size() : overload, "_copy");
    copies.push_back(std::move(copy));
  }
  for (NodeDef& copy : copies) registry.push_back(std::move(copy));
}

std::vector<NodeDef> build_registry() {
  std::vector<NodeDef> registry;
  nodes::add_arithmetic_nodes(registry);
  nodes::add_linalg_nodes(registry);
  nodes::add_linalg_decomposition_nodes(registry);
  nodes::add_reduction_nodes(registry);
  nodes::add_activation_nodes(registry);
  nodes::add_unary_nodes(registry);
  nodes::add_complex_nodes(registry);
  nodes::add_fft_nodes(registry);
  nodes::add_shape_nodes(registry);
  nodes::add_indexing_nodes(registry);
  nodes::add_nn_nodes(registry);
  nodes::add_pooling_nodes(registry);
  nodes::add_padding_nodes(registry);
  nodes::add_upsample_nodes(registry);
  nodes::add_random_nodes(registry);
  nodes::add_grid_sampler_nodes(registry);
  nodes::add_elementwise_nodes(registry);
  nodes::add_distance_nodes(registry);
  nodes::add_loss_nodes(registry);
  nodes::add_special_nodes(registry);
  nodes::add_engine_nodes(registry);
  add_view_copy_nodes(registry);
  std::sort(registry.begin(), registry.end(),
            [](const NodeDef& a, const NodeDef& b) { return a.schema.name < b.schema.name; });
  return registry;
}

const std::vector<NodeDef>& registry() {
  static const std::vector<NodeDef> instance = build_registry();
  return instance;
}

}  // namespace

bool computes_in_one_kernel(const NodeSchema& schema) {
  // Each is one ATen kernel in derivatives.yaml's formula (the kernel in the comment).
  static const std::set<std::string, std::less<>> nodes = {
      "NativeLayerNormBackward0",       // native_layer_norm_backward
      "NativeBatchNormBackward0",       // native_batch_norm_backward
      "BatchNormWithUpdateBackward0",   // batch_norm_backward
      "NativeGroupNormBackward0",       // native_group_norm_backward
      "SoftmaxBackward0",               // _softmax_backward_data
      "LogSoftmaxBackward0",            // _log_softmax_backward_data
      "SafeSoftmaxBackward0",           // _softmax_backward_data
      "ScaledDotProductFlashAttentionForCpuBackward0",  // _scaled_dot_product_flash_attention_for_cpu_backward
      "GeluBackward0",                  // gelu_backward
      "TanhBackward0",                  // tanh_backward
      "SigmoidBackward0",               // sigmoid_backward
      "SiluBackward0",                  // silu_backward
      "MishBackward0",                  // mish_backward
      "HardswishBackward0",             // hardswish_backward
      "HardsigmoidBackward0",           // hardsigmoid_backward
      "EluBackward0", "EluBackward1", "CeluBackward0", "CeluBackward1",  // elu_backward
      "SoftplusBackward0",              // softplus_backward
      "LeakyReluBackward0", "LeakyReluBackward1",  // leaky_relu_backward
      "HardtanhBackward0",              // hardtanh_backward
      "ThresholdBackward0", "ThresholdBackward1", "ReluBackward0",  // threshold_backward
      "LogSigmoidBackward0",            // log_sigmoid_backward
      "GluBackward0",                   // glu_backward
      "HardshrinkBackward0",            // hardshrink_backward
      "SoftshrinkBackward0",            // softshrink_backward
      "MseLossBackward0",               // mse_loss_backward
      "HuberLossBackward0",             // huber_loss_backward
      "SmoothL1LossBackward0",          // smooth_l1_loss_backward
      "BinaryCrossEntropyBackward0",    // binary_cross_entropy_backward
      "NllLossBackward0",               // nll_loss_backward
      "NllLoss2DBackward0",             // nll_loss2d_backward
      "MaxPool2DWithIndicesBackward0",  // max_pool2d_with_indices_backward
      "AvgPool2DBackward0",             // avg_pool2d_backward
      "AdaptiveAvgPool2DBackward0",     // _adaptive_avg_pool2d_backward
      "AdaptiveAvgPool3DBackward0",     // _adaptive_avg_pool3d_backward
      "AdaptiveMaxPool2DBackward0",     // adaptive_max_pool2d_backward
      "AdaptiveMaxPool3DBackward0",     // adaptive_max_pool3d_backward
      "AvgPool3DBackward0",             // avg_pool3d_backward
      "MaxPool3DWithIndicesBackward0",  // max_pool3d_with_indices_backward
      "FractionalMaxPool2DBackward0",   // fractional_max_pool2d_backward
      "FractionalMaxPool3DBackward0",   // fractional_max_pool3d_backward
      "ReflectionPad1DBackward0", "ReflectionPad2DBackward0", "ReflectionPad3DBackward0",  // reflection_padNd_backward
      "ReplicationPad1DBackward0", "ReplicationPad2DBackward0", "ReplicationPad3DBackward0",  // replication_padNd_backward
      "UpsampleNearest1DBackward0", "UpsampleNearest2DBackward0", "UpsampleNearest3DBackward0",  // upsample_nearestNd_backward
      "UpsampleNearestExact1DBackward0", "UpsampleNearestExact2DBackward0",  // _upsample_nearest_exactNd_backward
      "UpsampleNearestExact3DBackward0",
      "UpsampleLinear1DBackward0",      // upsample_linear1d_backward
      "UpsampleBilinear2DBackward0",    // upsample_bilinear2d_backward
      "UpsampleTrilinear3DBackward0",   // upsample_trilinear3d_backward
      "UpsampleBicubic2DBackward0",     // upsample_bicubic2d_backward
      "UpsampleBilinear2DAaBackward0",  // _upsample_bilinear2d_aa_backward
      "UpsampleBicubic2DAaBackward0",   // _upsample_bicubic2d_aa_backward
      "NativeDropoutBackward0",         // native_dropout_backward
      "GridSampler2DBackward0",         // grid_sampler_2d_backward
      "GridSampler3DBackward0",         // grid_sampler_3d_backward
  };
  return nodes.count(schema.name) > 0;
}

const NodeDef* find_node(std::string_view name) {
  const auto& nodes = registry();
  auto found = std::lower_bound(nodes.begin(), nodes.end(), name,
                                [](const NodeDef& def, std::string_view key) { return def.schema.name < key; });
  return found != nodes.end() && found->schema.name == name ? &*found : nullptr;
}

const NodeDef& get_node(std::string_view name) {
  const NodeDef* def = find_node(name);
  check(def != nullptr, "unknown backward node '", name, "': refgrad has no such node (`refgrad nodes` lists them)");
  return *def;
}

std::size_t num_results(const NodeSchema& schema, std::size_t list_length) {
  return schema.list_length_field.empty() ? schema.inputs.size() : list_length;
}

std::size_t input_of_result(const NodeSchema& schema, std::size_t result) {
  return schema.list_length_field.empty() ? result : 0;
}

std::vector<const NodeDef*> all_nodes() {
  std::vector<const NodeDef*> out;
  for (const NodeDef& def : registry()) out.push_back(&def);
  return out;
}

bool supports_complex(const NodeSchema& schema) {
  // Each formula below was compared with derivatives.yaml's for complex inputs (its .conj()s and
  // handle_r_to_c), and its L0 ops take complex tensors; OpInfo's complex samples check them
  // (tests/python/test_opinfo.py). Linear maps of the grad (views, sums, indexing) need no conjugate.
  static const std::set<std::string, std::less<>> nodes = {
      // arithmetic
      "AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "RsubBackward0", "RsubBackward1",
      "MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "NegBackward0", "PowBackward0",
      "PowBackward1", "PowBackward2", "LogaddexpBackward0", "LdexpBackward0",
      "AddcmulBackward0", "AddcdivBackward0", "LerpBackward0", "LerpBackward1", "WhereBackward0", "MaskedFillBackward0", "MaskedFillBackward1",
      // complex numbers themselves
      "ConjBackward0", "ConjPhysicalBackward0", "NegViewBackward0", "ViewAsRealBackward0",
      "ViewAsComplexBackward0", "AngleBackward0", "ComplexBackward0", "PolarBackward0", "AbsBackward0",
      "SgnBackward0",
      // Fourier transforms (each backward is the adjoint transform)
      "FftC2CBackward0", "FftR2CBackward0", "FftC2RBackward0",
      // analytic functions
      "ExpBackward0", "Exp2Backward0", "Expm1Backward0", "LogBackward0", "Log2Backward0", "Log10Backward0",
      "Log1PBackward0", "SqrtBackward0", "RsqrtBackward0", "ReciprocalBackward0",
      "SinBackward0", "CosBackward0", "TanBackward0", "AsinBackward0", "AcosBackward0", "AtanBackward0",
      "SinhBackward0", "CoshBackward0", "TanhBackward0", "AsinhBackward0", "AcoshBackward0", "AtanhBackward0",
      "SigmoidBackward0", "SincBackward0",
      // products of matrices
      "MmBackward0", "AddmmBackward0", "BmmBackward0", "BaddbmmBackward0", "DotBackward0", "MvBackward0",
      "VdotBackward0", "AddmvBackward0", "AddrBackward0", "AddbmmBackward0",
      // decompositions and solves (linalg_decompositions.cpp: FunctionsManual's formulas, with their mH()s)
      "LinalgSvdBackward0", "LinalgInvExBackward0", "LinalgPinvBackward0", "LinalgQrBackward0",
      "LinalgLuFactorExBackward0", "LinalgLuBackward0", "LinalgLuSolveBackward0", "LuUnpackBackward0",
      "LinalgSolveExBackward0", "LinalgSolveTriangularBackward0", "TriangularSolveBackward0",
      "LinalgCholeskyExBackward0", "CholeskyBackward0", "CholeskySolveBackward0", "CholeskyInverseBackward0",
      "LinalgEighBackward0", "LinalgEigBackward0", "LinalgDetBackward0", "LinalgSlogdetBackward0",
      "LinalgLstsqBackward0", "LinalgMatrixExpBackward0", "LinalgHouseholderProductBackward0", "OrmqrBackward0",
      "LinalgCrossBackward0",
      // sums
      "SumBackward0", "SumBackward1", "MeanBackward0", "MeanBackward1", "CumsumBackward0", "LinalgVectorNormBackward0",
      "VarBackward0", "StdBackward0", "LogsumexpBackward0", "ProdBackward0", "ProdBackward1", "CumprodBackward0",
      "NormBackward1", "VarMeanBackward0", "StdMeanBackward0", "RenormBackward0", "DistBackward0", "LogcumsumexpBackward0",
      // views, copies and shapes
      "AliasBackward0", "AliasBackward0_copy", "CloneBackward0", "ToCopyBackward0", "CopyBackwards", "ViewBackward0",
      "ViewBackward0_copy", "ReshapeAliasBackward0", "ReshapeAliasBackward0_copy", "UnsafeViewBackward0",
      "PermuteBackward0", "PermuteBackward0_copy", "TransposeBackward0", "TransposeBackward0_copy",
      "TransposeBackward1", "TBackward0", "TBackward0_copy", "ExpandBackward0", "ExpandBackward0_copy",
      "SqueezeBackward0", "SqueezeBackward0_copy", "SqueezeBackward1", "SqueezeBackward1_copy",
      "SqueezeBackward2", "SqueezeBackward2_copy", "SqueezeBackward3", "SqueezeBackward4",
      "UnsqueezeBackward0", "UnsqueezeBackward0_copy", "UnsqueezeBackward1", "SelectBackward0",
      "SelectBackward0_copy", "SliceBackward0", "SliceBackward0_copy", "SplitBackward0", "SplitBackward0_copy",
      "SplitWithSizesBackward0", "SplitWithSizesBackward0_copy", "UnbindBackward0", "UnbindBackward0_copy",
      "CatBackward0", "StackBackward0", "FlipBackward0", "RollBackward0", "RepeatBackward0",
      "ConstantPadNdBackward0", "ReflectionPad1DBackward0", "ReflectionPad2DBackward0", "ReflectionPad3DBackward0",
      "ReplicationPad1DBackward0", "ReplicationPad2DBackward0", "ReplicationPad3DBackward0", "TrilBackward0", "TriuBackward0", "DiagonalBackward0", "DiagonalBackward0_copy",
      "DiagEmbedBackward0", "TraceBackward0", "UnfoldBackward0", "UnfoldBackward0_copy", "AsStridedBackward0",
      "AsStridedBackward0_copy", "PixelShuffleBackward0", "PixelUnshuffleBackward0", "ChannelShuffleBackward0",
      "UnsafeSplitBackward0", "UnsafeSplitWithSizesBackward0", "NarrowCopyBackward0", "Rot90Backward0",
      "BlockDiagBackward0", "DiagonalScatterBackward0",  // torch has no complex select/slice_scatter backward
      "AsStridedScatterBackward0", "UnfoldBackwardBackward0", "Im2ColBackward0",
      // indexing
      "GatherBackward0", "IndexSelectBackward0", "IndexBackward0", "IndexPutBackward0", "IndexAddBackward0",
      "ScatterBackward0", "ScatterBackward1", "ScatterAddBackward0", "MaskedScatterBackward0",
      "MaskedSelectBackward0", "IndexCopyBackward0", "IndexFillBackward0", "IndexFillBackward1", "PutBackward0",
      "TakeBackward0", "UnsafeMaskedIndexBackward0", "UnsafeMaskedIndexPutAccumulateBackward0",
      // fill (the grad's sum, or zeros)
      "FillBackward0", "FillBackward1", "FillBackward2", "FillBackward3", "ZeroBackward0",
      // random samples: a zero grad (normal_ takes a complex self)
      "NormalBackward0",
  };
  return nodes.count(schema.name) > 0;
}

namespace {

[[noreturn]] void fail_complex(const NodeSchema& schema, DType dtype, const std::string& where) {
  fail(concat(schema.name, ": ", dtype_name(dtype), " is not supported yet by this node (", where,
              "): its formula has not been checked for complex numbers (derivatives.yaml's conjugates)"));
}

}  // namespace

// (Called for every node an interpreter runs: the registry is asked only once a complex grad is seen.)
void check_complex_supported(const NodeSchema& schema, const Grads& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (grads[i] && grads[i]->defined() && is_complex(grads[i]->dtype()) && !supports_complex(schema))
      fail_complex(schema, grads[i]->dtype(), concat("incoming grad ", i));
  }
}

void check_complex_supported(const NodeSchema& schema, const std::vector<FieldValue>& saved) {
  for (std::size_t i = 0; i < saved.size() && i < schema.saved.size(); ++i) {
    const auto complex_tensor = [&](const Tensor& t) {
      if (t.defined() && is_complex(t.dtype()) && !supports_complex(schema))
        fail_complex(schema, t.dtype(), "saved " + schema.saved[i].name);
    };
    if (const auto* t = std::get_if<Tensor>(&saved[i])) complex_tensor(*t);
    if (const auto* list = std::get_if<TensorList>(&saved[i]))
      for (const Tensor& t : *list) complex_tensor(t);
    if (const auto* list = std::get_if<std::vector<OptionalTensor>>(&saved[i]))
      for (const OptionalTensor& t : *list)
        if (t) complex_tensor(*t);
  }
}

Grads call_node(std::string_view name, const Grads& grads, const Need& need, const std::vector<FieldValue>& saved) {
  const NodeDef& def = get_node(name);
  const NodeSchema& schema = def.schema;
  check_complex_supported(schema, saved);
  check_complex_supported(schema, grads);
  check(schema.num_grads == kVariadic || grads.size() == schema.num_grads, schema.name, ": expected ", schema.num_grads, " incoming grad",
        schema.num_grads == 1 ? "" : "s", ", got ", grads.size());
  check(need.size() == schema.inputs.size(), schema.name, ": the need mask has ", need.size(),
        " entries, the node has ", schema.inputs.size(), " inputs");
  const BoundSaved bound = def.bind(saved);
  try {
    return def.apply(grads, bound.get(), need);
  } catch (const Error& error) {  // errors from shared helpers and L0 ops get the node's name in front
    const std::string message = error.what();
    if (message.rfind(schema.name + ":", 0) == 0) throw;
    throw Error(schema.name + ": " + message);
  }
}

Grads call_node(std::string_view name, const Grads& grads, const Need& need,
                const std::map<std::string, FieldValue>& saved) {
  const NodeSchema& schema = get_node(name).schema;
  std::vector<FieldValue> ordered;
  for (const SavedFieldSchema& field : schema.saved) {
    auto found = saved.find(field.name);
    check(found != saved.end(), schema.name, ": saved field '", field.name, "' is missing");
    ordered.push_back(found->second);
  }
  for (const auto& entry : saved) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
    const std::string& field_name = entry.first;
    const bool known = std::any_of(schema.saved.begin(), schema.saved.end(),
                                   [&](const SavedFieldSchema& f) { return f.name == field_name; });
    check(known, schema.name, ": has no saved field '", field_name, "'");
  }
  return call_node(name, grads, need, ordered);
}

}  // namespace refgrad
