// Indexing nodes: index, index_select, gather, scatter, scatter_add, scatter_reduce, index_add,
// index_reduce, index_put, masked_select, masked_scatter, embedding, index_copy, index_fill, put, take,
// _unsafe_masked_index(_put_accumulate); and fill, fill_, zero_.
#include <string>
#include <utility>

#include "define.hpp"
#include "functions_manual.hpp"

namespace refgrad::nodes {
namespace {

// ------------------------------------------------ FunctionsManual helpers ---

// index_backward: the grad accumulated (index_put with accumulate=true) into
// zeros of self's shape, so that an element picked k times gets k grads.
Tensor index_backward(const Tensor& zeros_like_self, const std::vector<OptionalTensor>& indices, const Tensor& grad) {
  return index_put(zeros_like_self, indices, grad, /*accumulate=*/true);
}

// index_select_backward_symint: zeros(self_sizes).index_add_(dim, index, grad).
Tensor index_select_backward(const Tensor& grad, const IntList& self_sizes, std::int64_t dim, const Tensor& index) {
  return index_add(zeros(self_sizes, grad.dtype()), dim, index, grad);
}

// gather_backward (dense): zeros(self.sizes()).scatter_add_(dim, index, grad);
// sparse_grad asks for a sparse COO gradient, which refgrad does not have.
Tensor gather_backward(const Tensor& grad, const Tensor& self, std::int64_t dim, const Tensor& index,
                       bool sparse_grad) {
  check(!sparse_grad, "GatherBackward0: sparse_grad=True (a sparse COO gradient) is not supported yet");
  return scatter_add(zeros(self.sizes(), grad.dtype()), dim, index, grad);
}

// masked_select_backward: grad scattered into zeros of the broadcast shape of
// input and mask (zeros_like(input.expand(...))); validate sums it to input's.
Tensor masked_select_backward(const Tensor& grad, const Tensor& input, const Tensor& mask) {
  const Tensor result = zeros(broadcast_shapes(input.sizes(), mask.sizes()), input.dtype());
  return masked_scatter(result, mask, grad);
}

// masked_scatter_backward_symint: the grad at the mask's true positions, in
// order, padded with zeros up to source's numel (source may have had more
// elements than the mask used) and viewed as source's shape.
Tensor masked_scatter_backward(const Tensor& grad, const Tensor& mask, const IntList& sizes) {
  check_sizes("MaskedScatterBackward0", "source_sym_sizes", sizes);
  const std::int64_t numel = numel_of(sizes);
  Tensor mask_selected = masked_select(grad, mask);
  const std::int64_t diff_nelem = numel - mask_selected.numel();
  check(diff_nelem >= 0, "MaskedScatterBackward0: the mask selects ", mask_selected.numel(),
        " elements, more than source's ", numel, " (source_sym_sizes ", shape_text(Shape(sizes)), ")");
  if (diff_nelem > 0) mask_selected = cat({mask_selected, zeros({diff_nelem}, grad.dtype())}, 0);
  return view(mask_selected, sizes);
}

// embedding_dense_backward: row k of the weight's grad is the sum of the grad
// rows whose index is k, each divided by k's count when scale_grad_by_freq;
// rows whose index is padding_idx contribute nothing (padding_idx -1: none).
Tensor embedding_dense_backward(const Tensor& grad_output, const Tensor& indices, std::int64_t num_weights,
                                std::int64_t padding_idx, bool scale_grad_by_freq) {
  check(indices.dtype() == DType::Int64, "EmbeddingBackward0: indices must be int64, got ",
        dtype_name(indices.dtype()));
  check(grad_output.dim() >= 1 && grad_output.dim() == indices.dim() + 1,
        "EmbeddingBackward0: grad ", shape_text(grad_output.sizes()), " does not match indices ", shape_text(indices.sizes()),
        " plus an embedding dim");
  const std::int64_t num_indices = indices.numel();
  const Tensor flat_indices = reshape(indices, {num_indices});
  Tensor grad = reshape(grad_output, {num_indices, grad_output.sizes().back()});
  grad = where(unsqueeze(ne(flat_indices, padding_idx), 1), grad, 0);
  if (scale_grad_by_freq) {
    const Tensor counts = index_add(zeros({num_weights}, grad.dtype()), 0, flat_indices,
                                    ones({num_indices}, grad.dtype()));
    grad = mul(grad, unsqueeze(reciprocal(index_select(counts, 0, flat_indices)), 1));
  }
  return index_add(zeros({num_weights, grad.sizes()[1]}, grad.dtype()), 0, flat_indices, grad);
}

// Each entry of `index` must name one of `size` slices or elements, counting from the end when
// negative. Checked here so that the error names what is indexed (`what`, "dim 1 of grad [3,4]"),
// not the flat tensor the primitive is given.
template <class... What>
void check_index_range(const Tensor& index, std::int64_t size, const What&... what) {
  if (index.numel() == 0) return;
  const std::int64_t low = amin(index).to(DType::Int64).item<std::int64_t>();
  const std::int64_t high = amax(index).to(DType::Int64).item<std::int64_t>();
  check(low >= -size, "index ", low, " is out of range for ", what..., " (", size, " entries)");
  check(high < size, "index ", high, " is out of range for ", what..., " (", size, " entries)");
}

// Where t's slices along dim that index names are: a bool mask that broadcasts to t's shape (size 1
// but along dim). A 0-d t is one slice.
Tensor index_fill_mask(const Tensor& t, std::int64_t dim, const Tensor& index) {
  const std::int64_t size = t.dim() == 0 ? 1 : t.size(wrap_dim(dim, t.dim(), "index_fill"));
  const Tensor flat_index = reshape(index, {-1});
  check_index_range(flat_index, size, "dim ", dim, " of grad ", shape_text(t.sizes()));
  const Tensor hit = index_put(zeros({size}, DType::Bool), {flat_index}, ones({flat_index.numel()}, DType::Bool));
  if (t.dim() == 0) return reshape(hit, {});
  Shape along(static_cast<std::size_t>(t.dim()), 1);
  along[static_cast<std::size_t>(wrap_dim(dim, t.dim(), "index_fill"))] = size;
  return reshape(hit, along);
}

// t.index_fill(dim, index, 0): the slices of t along dim that index names set to 0 (set, not
// multiplied: an inf or NaN there becomes 0 too).
Tensor index_fill_zero(const Tensor& t, std::int64_t dim, const Tensor& index) {
  if (index.numel() == 0) return t;
  return where(index_fill_mask(t, dim, index), Scalar(0), t);
}

// scatter_reduce_backward and index_reduce_backward (FunctionsManual.cpp) are one formula for two
// ways of addressing: scatter_reduce sends src[p] to self at p with p[dim] replaced by index[p]
// (read back with gather, counted with scatter_add); index_reduce sends the slice k of source along
// dim to slice index[k] of self (read back with index_select, counted with index_add). Each
// reduce's gradient, for self and for the scattered values:
//   sum:       grad, and grad read back at the targets;
//   mean:      grad / N, and the same read back, N counting the values at each target (self once
//              when included; 1 where nothing arrived);
//   amax/amin: grad split evenly among the values (self's and the scattered ones) equal to the
//              result at their target;
//   prod:      the product of the others at each target. Zeros are handled without dividing by
//              them: self's zeros are masked to 1 and the reduction recomputed; a scattered value
//              that is its target's only zero gets grad times the product of the others
//              (recomputed with it masked to 1); where a target has two or more zeros, every
//              product of the others is 0, as is (grad * result) / value there.
// Without include_self, self's old values at the targets did not reach the result: their grad is 0.
struct ReduceAddressing {
  std::int64_t dim;
  const Tensor& index;
  bool is_scatter;  // scatter_reduce (true) or index_reduce (false)

  Tensor reduce(const Tensor& self, const Tensor& values, const std::string& how, bool include_self) const {
    return is_scatter ? scatter_reduce(self, dim, index, values, how, include_self)
                   : index_reduce(self, dim, index, values, how, include_self);
  }
  Tensor add_into(const Tensor& self, const Tensor& values) const {
    return is_scatter ? scatter_add(self, dim, index, values) : index_add(self, dim, index, values);
  }
  Tensor read_back(const Tensor& t) const { return is_scatter ? gather(t, dim, index) : index_select(t, dim, index); }
  Tensor clear_targets(const Tensor& t) const {
    return is_scatter ? scatter(t, dim, index, Scalar(0)) : index_fill_zero(t, dim, index);
  }
};

std::pair<Tensor, Tensor> reduce_backward(const char* node, const ReduceAddressing& at, const Tensor& grad,
                                          const Tensor& self, const Tensor& src, const std::string& reduce,
                                          bool include_self, const Tensor& result) {
  check(grad.sizes() == self.sizes() && result.sizes() == self.sizes(), node, ": grad ", shape_text(grad.sizes()),
        " and result ", shape_text(result.sizes()), " must have self's shape ", shape_text(self.sizes()));
  Tensor grad_self, grad_src;
  if (reduce == "sum" && at.is_scatter) {
    grad_self = grad;
    grad_src = at.read_back(grad);
  } else if (reduce == "prod") {
    const Tensor masked_self = masked_fill(self, eq(self, 0), 1);
    const Tensor masked_self_result = at.reduce(masked_self, src, "prod", include_self);
    grad_self = div(mul(grad, masked_self_result), masked_self);
    const Tensor src_zero = eq(src, 0);
    const Tensor src_num_zeros = at.read_back(at.add_into(zeros_like(self), src_zero.to(self.dtype())));
    const Tensor src_single_zero = logical_and(src_zero, eq(src_num_zeros, 1));
    const Tensor masked_src = masked_fill(src, src_single_zero, 1);
    const Tensor masked_src_result = at.reduce(self, masked_src, "prod", include_self);
    grad_src = where(src_single_zero, at.read_back(mul(grad, masked_src_result)),
                     div(at.read_back(mul(grad, result)), masked_fill(src, src_zero, 1)));
  } else if (reduce == "mean") {
    Tensor N = include_self ? ones_like(grad) : zeros_like(grad);
    N = at.add_into(N, ones_like(src));
    N = masked_fill(N, eq(N, 0), 1);
    grad_self = div(grad, N);
    grad_src = div(at.read_back(grad), at.read_back(N));
  } else if (reduce == "amax" || reduce == "amin") {
    const Tensor value = at.read_back(result);
    const Tensor self_is_result = eq(self, result);
    const Tensor src_is_result = eq(src, value);
    const Tensor N_to_distribute = at.add_into(self_is_result.to(self.dtype()), src_is_result.to(self.dtype()));
    const Tensor grad_distributed = div(grad, N_to_distribute);
    grad_self = mul(self_is_result, grad_distributed);
    grad_src = mul(src_is_result, at.read_back(grad_distributed));
  } else {
    fail(concat(node, ": reduce must be one of ", at.is_scatter ? "'sum', " : "", "'prod', 'mean', 'amax', 'amin', got '",
                reduce, "'"));
  }
  if (!include_self) grad_self = at.clear_targets(grad_self);
  return {grad_self, grad_src};
}

// ------------------------------------------------------------------ nodes ---

// IndexBackward0 — index.Tensor(Tensor self, Tensor?[] indices)
//   self: index_backward(grad.new_zeros_symint(self.sym_sizes(), self.options()), indices, grad)
struct IndexBackward0Saved {
  std::vector<OptionalTensor> indices;
  TensorOptions self_options;
  IntList self_sym_sizes;
};

Grads IndexBackward0(const Grads& grads, const IndexBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check_sizes("IndexBackward0", "self_sym_sizes", saved.self_sym_sizes);
  const Tensor zeros_like_self = zeros(saved.self_sym_sizes, saved.self_options.dtype.value_or(grad.dtype()));
  return Grads{index_backward(zeros_like_self, saved.indices, grad)};
}

// IndexSelectBackward0 — index_select(Tensor self, int dim, Tensor index)
//   self: index_select_backward_symint(grad, self.sym_sizes(), dim, index)
struct IndexSelectBackward0Saved {
  std::int64_t dim;
  Tensor index;
  IntList self_sym_sizes;
};

Grads IndexSelectBackward0(const Grads& grads, const IndexSelectBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check_sizes("IndexSelectBackward0", "self_sym_sizes", saved.self_sym_sizes);
  return Grads{index_select_backward(*grads[0], saved.self_sym_sizes, saved.dim, saved.index)};
}

// GatherBackward0 — gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False)
//   self: gather_backward(grad, self, dim, index, sparse_grad)
struct GatherBackward0Saved {
  std::int64_t dim;
  Tensor index;
  Tensor self;
  bool sparse_grad;
};

Grads GatherBackward0(const Grads& grads, const GatherBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{gather_backward(*grads[0], saved.self, saved.dim, saved.index, saved.sparse_grad)};
}

// ScatterBackward0 — scatter.src(Tensor self, int dim, Tensor index, Tensor src)
//   self: grad.scatter(dim, index, 0)
//   src:  grad.gather(dim, index)
struct ScatterBackward0Saved {
  std::int64_t dim;
  Tensor index;
};

Grads ScatterBackward0(const Grads& grads, const ScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = scatter(grad, saved.dim, saved.index, 0);
  if (need[1]) out[1] = gather(grad, saved.dim, saved.index);
  return out;
}

// ScatterBackward1 — scatter.value(Tensor self, int dim, Tensor index, Scalar value)
//   self: grad.scatter(dim, index, 0)
struct ScatterBackward1Saved {
  std::int64_t dim;
  Tensor index;
};

Grads ScatterBackward1(const Grads& grads, const ScatterBackward1Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{scatter(*grads[0], saved.dim, saved.index, 0)};
}

// ScatterAddBackward0 — scatter_add(Tensor self, int dim, Tensor index, Tensor src)
//   self: grad
//   src:  grad.gather(dim, index)
// PyTorch saves `index` only when src's grad may be needed.
struct ScatterAddBackward0Saved {
  std::int64_t dim;
  std::optional<Tensor> index;
};

Grads ScatterAddBackward0(const Grads& grads, const ScatterAddBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = grad;
  if (need[1]) {
    const Tensor& index = needed(saved.index, "ScatterAddBackward0", "src", "index");
    out[1] = gather(grad, saved.dim, index);
  }
  return out;
}

// IndexAddBackward0 — index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1)
//   self:   grad
//   source: maybe_multiply(source.dim() > 0 ? grad.index_select(dim, index).expand_as(source)
//                                           : grad.index_select(dim, index.squeeze(0)), alpha)
// PyTorch saves `index` and `source` only when source's grad may be needed.
// With a complex alpha the gradient of alpha * source is grad * alpha.conj() (conjugate Wirtinger,
// as add's and addmm's formulas write it); torch 2.13's formula multiplies by alpha itself, which
// torch.autograd.gradcheck refuses (x.index_add(0, i, s, alpha=2+3j)). refgrad computes the gradient.
struct IndexAddBackward0Saved {
  Scalar alpha;
  std::int64_t dim;
  std::optional<Tensor> index;
  std::optional<Tensor> source;
  std::int64_t source_dim;
};

Grads IndexAddBackward0(const Grads& grads, const IndexAddBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = grad;
  if (need[1]) {
    const Tensor& index = needed(saved.index, "IndexAddBackward0", "source", "index");
    const Tensor& source = needed(saved.source, "IndexAddBackward0", "source", "source");
    const Tensor selected = saved.source_dim > 0 ? expand(index_select(grad, saved.dim, index), source.sizes())
                                                 : index_select(grad, saved.dim, squeeze(index, 0));
    out[1] = maybe_multiply(selected, saved.alpha.conj());
  }
  return out;
}

// ScatterReduceBackward0 — scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *,
//                                             bool include_self=True)
//   self, src: scatter_reduce_backward(grad, self, dim, index, src, reduce, include_self, result)
// (reduce_backward above explains each reduce.)
struct ScatterReduceBackward0Saved {
  std::int64_t dim;
  bool include_self;
  Tensor index;
  std::string reduce;
  Tensor self;
  Tensor src;
  Tensor result;
};

Grads ScatterReduceBackward0(const Grads& grads, const ScatterReduceBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const auto [grad_self, grad_src] =
      reduce_backward("ScatterReduceBackward0", {saved.dim, saved.index, true}, *grads[0], saved.self, saved.src,
                      saved.reduce, saved.include_self, saved.result);
  Grads out(2);
  if (need[0]) out[0] = grad_self;
  if (need[1]) out[1] = grad_src;
  return out;
}

// IndexReduceBackward0 — index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *,
//                                     bool include_self=True)
//   self, source: index_reduce_backward(grad, self, dim, index, source, reduce, include_self, result)
struct IndexReduceBackward0Saved {
  std::int64_t dim;
  bool include_self;
  Tensor index;
  std::string reduce;
  Tensor self;
  Tensor source;
  Tensor result;
};

Grads IndexReduceBackward0(const Grads& grads, const IndexReduceBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const auto [grad_self, grad_source] =
      reduce_backward("IndexReduceBackward0", {saved.dim, saved.index, false}, *grads[0], saved.self, saved.source,
                      saved.reduce, saved.include_self, saved.result);
  Grads out(2);
  if (need[0]) out[0] = grad_self;
  if (need[1]) out[1] = grad_source;
  return out;
}

// IndexPutBackward0 — index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False)
//   self:   accumulate ? grad : grad.index_put(indices, zeros_like(values), false)
//   values: grad.index(indices)
// zeros_like(values) is values_info.zeros(), scattered where values went: the
// indexed elements of grad become 0. refgrad scatters a 0-d zero of grad's
// dtype (index_put broadcasts values, and requires values and self, hence
// grad, to share a dtype), the same tensor, so self's gradient does not read
// values_info: when values needs no grad, capture cannot see its sizes (it has
// no edge). With duplicate indices and accumulate=false every duplicate gets
// the grad, as in PyTorch.
struct IndexPutBackward0Saved {
  bool accumulate;
  std::vector<OptionalTensor> indices;
  TypeAndSize values_info;
};

Grads IndexPutBackward0(const Grads& grads, const IndexPutBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0] && saved.accumulate) {
    out[0] = grad;
  } else if (need[0]) {
    out[0] = index_put(grad, saved.indices, zeros({}, grad.dtype()), false);
  }
  if (need[1]) out[1] = index(grad, saved.indices);
  return out;
}

// MaskedSelectBackward0 — masked_select(Tensor self, Tensor mask)
//   self: masked_select_backward(grad, self, mask)
struct MaskedSelectBackward0Saved {
  Tensor mask;
  Tensor self;
};

Grads MaskedSelectBackward0(const Grads& grads, const MaskedSelectBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{masked_select_backward(*grads[0], saved.self, saved.mask)};
}

// MaskedScatterBackward0 — masked_scatter(Tensor self, Tensor mask, Tensor source)
//   self:   grad.masked_fill(mask, 0)
//   source: masked_scatter_backward_symint(grad, mask, source.sym_sizes())
struct MaskedScatterBackward0Saved {
  Tensor mask;
  IntList source_sym_sizes;
};

Grads MaskedScatterBackward0(const Grads& grads, const MaskedScatterBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = masked_fill(grad, saved.mask, 0);
  if (need[1]) out[1] = masked_scatter_backward(grad, saved.mask, saved.source_sym_sizes);
  return out;
}

// EmbeddingBackward0 — embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1,
//                                bool scale_grad_by_freq=False, bool sparse=False)
//   weight: embedding_backward_symint(grad, indices, weight.sym_size(0), padding_idx, scale_grad_by_freq, sparse)
// sparse=True asks for a sparse COO gradient, which refgrad does not have.
struct EmbeddingBackward0Saved {
  Tensor indices;
  std::int64_t padding_idx;
  bool scale_grad_by_freq;
  bool sparse;
  std::int64_t weight_sym_argsize_0;
};

Grads EmbeddingBackward0(const Grads& grads, const EmbeddingBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  check(!saved.sparse, "EmbeddingBackward0: sparse=True (a sparse COO gradient) is not supported yet");
  check(saved.weight_sym_argsize_0 >= 0, "EmbeddingBackward0: weight_sym_argsize_0 ", saved.weight_sym_argsize_0,
        " is not a number of embeddings");
  return Grads{embedding_dense_backward(*grads[0], saved.indices, saved.weight_sym_argsize_0, saved.padding_idx,
                                        saved.scale_grad_by_freq)};
}


// IndexCopyBackward0 — index_copy(Tensor self, int dim, Tensor index, Tensor source)
//   self:   grad.index_fill(dim, index, 0)
//   source: source.dim() > 0 ? grad.index_select(dim, index).expand_as(source)
//                            : grad.index_select(dim, index.squeeze(0))
// PyTorch saves `source` only when source's grad may be needed.
struct IndexCopyBackward0Saved {
  std::int64_t dim;
  Tensor index;
  std::optional<Tensor> source;
  std::int64_t source_dim;
};

Grads IndexCopyBackward0(const Grads& grads, const IndexCopyBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = index_fill_zero(grad, saved.dim, saved.index);
  if (need[1]) {
    const Tensor& source = needed(saved.source, "IndexCopyBackward0", "source", "source");
    out[1] = saved.source_dim > 0 ? expand(index_select(grad, saved.dim, saved.index), source.sizes())
                                  : index_select(grad, saved.dim, squeeze(saved.index, 0));
  }
  return out;
}

// IndexFillBackward0 — index_fill.int_Scalar(Tensor self, int dim, Tensor index, Scalar value)
//   self: grad.index_fill(dim, index, 0)
struct IndexFillBackward0Saved {
  std::int64_t dim;
  Tensor index;
};

Grads IndexFillBackward0(const Grads& grads, const IndexFillBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{index_fill_zero(*grads[0], saved.dim, saved.index)};
}

// IndexFillBackward1 — index_fill.int_Tensor(Tensor self, int dim, Tensor index, Tensor value)
//   self:  grad.index_fill(dim, index, 0)
//   value: grad.index_select(dim, std::get<0>(at::_unique(index, /*sorted=*/false))).sum()
// The 0-d value was written into every slice index names, each once however often it is named
// (hence _unique): its grad is the sum of grad over those slices, summed here through the mask of
// the slices that index_fill_zero clears. index_fill accepts negative indices, which the mask counts
// from the end like any other ([-1, 3] of 4 slices names slice 3 once); torch 2.13's index_select in
// this formula raises on them instead.
Grads IndexFillBackward1(const Grads& grads, const IndexFillBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = index_fill_zero(grad, saved.dim, saved.index);
  if (need[1]) out[1] = sum(where(index_fill_mask(grad, saved.dim, saved.index), grad, Scalar(0)));
  return out;
}

// PutBackward0 — put(Tensor self, Tensor index, Tensor source, bool accumulate=False)
//   self:   accumulate ? grad : grad.put(index, zeros_like(source), false)
//   source: grad.take(index).reshape_as(source)
// put and take address self as if flattened; a negative index counts from the end. PyTorch saves
// `source` only when source's grad may be needed; zeros_like(source) is source_info.zeros() (source's
// sizes and options), put at index: refgrad puts index.numel() zeros of grad's dtype (put requires
// source and self, hence grad, to share a dtype, and source to have index's number of elements), so
// self's gradient does not read source_info, which capture cannot know when source needs no grad.
struct PutBackward0Saved {
  bool accumulate;
  Tensor index;
  std::optional<Tensor> source;
  TypeAndSize source_info;
};

Grads PutBackward0(const Grads& grads, const PutBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  const Tensor flat_index = reshape(saved.index, {-1});
  check_index_range(flat_index, grad.numel(), "self (the grad) of shape ", shape_text(grad.sizes()), " flattened");
  Grads out(2);
  if (need[0] && saved.accumulate) {
    out[0] = grad;
  } else if (need[0]) {
    const Tensor flat = index_put(reshape(contiguous(grad), {-1}), {flat_index}, zeros({flat_index.numel()}, grad.dtype()));
    out[0] = reshape(flat, grad.sizes());
  }
  if (need[1]) {
    const Tensor& source = needed(saved.source, "PutBackward0", "source", "source");
    check(source.numel() == flat_index.numel(), "PutBackward0: source of shape ", shape_text(source.sizes()),
          " and index of shape ", shape_text(saved.index.sizes()), " differ in their number of elements");
    out[1] = reshape(index(reshape(contiguous(grad), {-1}), {flat_index}), source.sizes());
  }
  return out;
}

// TakeBackward0 — take(Tensor self, Tensor index)
//   self: take_backward(grad, self, index)
// take_backward: zeros_like(self).put_(index, grad, /*accumulate=*/true), so that an element taken
// k times gets k grads.
struct TakeBackward0Saved {
  Tensor index;
  Tensor self;
};

Grads TakeBackward0(const Grads& grads, const TakeBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor& grad = *grads[0];
  check(grad.sizes() == saved.index.sizes(), "TakeBackward0: grad has shape ", shape_text(grad.sizes()),
        " but index has shape ", shape_text(saved.index.sizes()));
  check_index_range(saved.index, saved.self.numel(), "self of shape ", shape_text(saved.self.sizes()), " flattened");
  const Tensor flat = index_put(zeros({saved.self.numel()}, saved.self.dtype()), {reshape(saved.index, {-1})},
                                reshape(contiguous(grad), {-1}), /*accumulate=*/true);
  return Grads{reshape(flat, saved.self.sizes())};
}

// ATen's _unsafe_masked_index and _unsafe_masked_index_put_accumulate first clamp each index into
// [-size, size - 1] of its dim (an index the mask discards may lie anywhere), then index as
// index.Tensor and index_put do; the mask keeps an element (true) or makes it 0 (false).
std::vector<OptionalTensor> clamped_indices(const char* node, const std::vector<OptionalTensor>& indices,
                                            const IntList& self_sizes) {
  check(indices.size() <= self_sizes.size(), node, ": ", indices.size(), " indices for a tensor of shape ",
        shape_text(self_sizes));
  std::vector<OptionalTensor> clamped;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t size = self_sizes[i];
    if (indices[i] && indices[i]->numel() > 0)
      clamped.push_back(clamp(*indices[i], Scalar(-size), Scalar(size - 1)));
    else
      clamped.push_back(indices[i]);
  }
  return clamped;
}

// _unsafe_masked_index(t, mask, indices, 0). On an empty t, where no element can be read, ATen gives
// zeros of index's result shape, found here by indexing a stand-in whose indexed dims have one element.
Tensor masked_index_or_zeros(const char* node, const Tensor& t, const Tensor& mask,
                             const std::vector<OptionalTensor>& indices) {
  if (t.numel() > 0)
    return masked_fill(index(t, clamped_indices(node, indices, t.sizes())), logical_not(mask), Scalar(0));
  check(indices.size() <= static_cast<std::size_t>(t.dim()), node, ": ", indices.size(),
        " indices for a tensor of shape ", shape_text(t.sizes()));
  Shape stand_in_sizes = t.sizes();
  std::vector<OptionalTensor> first_elements;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i]) {
      stand_in_sizes[i] = 1;
      first_elements.push_back(zeros_like(*indices[i]));
    } else {
      first_elements.push_back(std::nullopt);
    }
  }
  return zeros_like(masked_fill(index(zeros(stand_in_sizes, t.dtype()), first_elements), logical_not(mask), Scalar(0)));
}

// UnsafeMaskedIndexBackward0 — _unsafe_masked_index(Tensor self, Tensor mask, Tensor?[] indices, Scalar fill)
//   self: at::_unsafe_masked_index_put_accumulate(grad.new_zeros_symint(self.sym_sizes(), self.options()), mask,
//                                                 indices, grad)
struct UnsafeMaskedIndexBackward0Saved {
  std::vector<OptionalTensor> indices;
  Tensor mask;
  TensorOptions self_options;
  IntList self_sym_sizes;
};

Grads UnsafeMaskedIndexBackward0(const Grads& grads, const UnsafeMaskedIndexBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const char* node = "UnsafeMaskedIndexBackward0";
  const Tensor& grad = *grads[0];
  check_sizes(node, "self_sym_sizes", saved.self_sym_sizes);
  const Tensor zeros_like_self = zeros(saved.self_sym_sizes, saved.self_options.dtype.value_or(grad.dtype()));
  if (zeros_like_self.numel() == 0) return Grads{zeros_like_self};  // as ATen: nothing to put into
  const Tensor kept = masked_fill(grad, logical_not(saved.mask), Scalar(0));
  return Grads{index_put(zeros_like_self, clamped_indices(node, saved.indices, saved.self_sym_sizes), kept,
                         /*accumulate=*/true)};
}

// UnsafeMaskedIndexPutAccumulateBackward0 — _unsafe_masked_index_put_accumulate(Tensor self, Tensor mask,
//                                                                              Tensor?[] indices, Tensor values)
//   self:   grad
//   values: at::_unsafe_masked_index(grad, mask, indices, 0)
struct UnsafeMaskedIndexPutAccumulateBackward0Saved {
  std::vector<OptionalTensor> indices;
  Tensor mask;
};

Grads UnsafeMaskedIndexPutAccumulateBackward0(const Grads& grads, const UnsafeMaskedIndexPutAccumulateBackward0Saved& saved,
                                              const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = grad;
  if (need[1]) out[1] = masked_index_or_zeros("UnsafeMaskedIndexPutAccumulateBackward0", grad, saved.mask, saved.indices);
  return out;
}

// ------------------------------------------------------------------- fill ---

// FillBackward0 — fill.Scalar(Tensor self, Scalar value)
// FillBackward2 — fill_.Scalar(Tensor(a!) self, Scalar value)
// ZeroBackward0 — zero_(Tensor(a!) self)
//   self: zeros_like(grad)
// No element of the result depends on self. They save nothing.
struct NothingSaved {};

Grads self_grad_is_zeros(const Grads& grads, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  return Grads{zeros_like(*grads[0])};
}

Grads FillBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return self_grad_is_zeros(grads, need); }
Grads FillBackward2(const Grads& grads, const NothingSaved&, const Need& need) { return self_grad_is_zeros(grads, need); }
Grads ZeroBackward0(const Grads& grads, const NothingSaved&, const Need& need) { return self_grad_is_zeros(grads, need); }

// FillBackward1 — fill.Tensor(Tensor self, Tensor value)
// FillBackward3 — fill_.Tensor(Tensor(a!) self, Tensor value)
//   self:  zeros_like(grad)
//   value: grad.sum()
// The 0-d value was copied into every element of the result.
Grads fill_with_tensor_backward(const Grads& grads, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor& grad = *grads[0];
  Grads out(2);
  if (need[0]) out[0] = zeros_like(grad);
  if (need[1]) out[1] = sum(grad);
  return out;
}

Grads FillBackward1(const Grads& grads, const NothingSaved&, const Need& need) {
  return fill_with_tensor_backward(grads, need);
}
Grads FillBackward3(const Grads& grads, const NothingSaved&, const Need& need) {
  return fill_with_tensor_backward(grads, need);
}

}  // namespace

void add_indexing_nodes(std::vector<NodeDef>& registry) {
  registry.push_back(define_node<IndexBackward0Saved, IndexBackward0>(
      {"IndexBackward0", "index.Tensor", {"self"}, 1, {},
       "self: index_backward(grad.new_zeros_symint(self.sym_sizes(), self.options()), indices, grad)"},
      {saved<&IndexBackward0Saved::indices>("indices", FieldKind::OptionalTensorList),
       hidden<&IndexBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&IndexBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));

  registry.push_back(define_node<IndexSelectBackward0Saved, IndexSelectBackward0>(
      {"IndexSelectBackward0", "index_select", {"self"}, 1, {},
       "self: index_select_backward_symint(grad, self.sym_sizes(), dim, index)"},
      {saved<&IndexSelectBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&IndexSelectBackward0Saved::index>("index", FieldKind::Tensor),
       saved<&IndexSelectBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));

  registry.push_back(define_node<GatherBackward0Saved, GatherBackward0>(
      {"GatherBackward0", "gather", {"self"}, 1, {}, "self: gather_backward(grad, self, dim, index, sparse_grad)"},
      {saved<&GatherBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&GatherBackward0Saved::index>("index", FieldKind::Tensor),
       saved<&GatherBackward0Saved::self>("self", FieldKind::Tensor),
       saved<&GatherBackward0Saved::sparse_grad>("sparse_grad", FieldKind::Bool)}));

  registry.push_back(define_node<ScatterBackward0Saved, ScatterBackward0>(
      {"ScatterBackward0", "scatter.src", {"self", "src"}, 1, {},
       "self: grad.scatter(dim, index, 0)\n"
       "src: grad.gather(dim, index)"},
      {saved<&ScatterBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&ScatterBackward0Saved::index>("index", FieldKind::Tensor)}));

  {
    using S = ScatterReduceBackward0Saved;
    registry.push_back(define_node<S, ScatterReduceBackward0>(
        {"ScatterReduceBackward0", "scatter_reduce.two", {"self", "src"}, 1, {},
         "self, src: scatter_reduce_backward(grad, self, dim, index, src, reduce, include_self, result)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::include_self>("include_self", FieldKind::Bool),
         saved<&S::index>("index", FieldKind::Tensor), saved<&S::reduce>("reduce", FieldKind::String),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::src>("src", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = IndexReduceBackward0Saved;
    registry.push_back(define_node<S, IndexReduceBackward0>(
        {"IndexReduceBackward0", "index_reduce", {"self", "source"}, 1, {},
         "self, source: index_reduce_backward(grad, self, dim, index, source, reduce, include_self, result)"},
        {saved<&S::dim>("dim", FieldKind::Int), saved<&S::include_self>("include_self", FieldKind::Bool),
         saved<&S::index>("index", FieldKind::Tensor), saved<&S::reduce>("reduce", FieldKind::String),
         saved<&S::self>("self", FieldKind::Tensor), saved<&S::source>("source", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }

  registry.push_back(define_node<ScatterBackward1Saved, ScatterBackward1>(
      {"ScatterBackward1", "scatter.value", {"self"}, 1, {}, "self: grad.scatter(dim, index, 0)"},
      {saved<&ScatterBackward1Saved::dim>("dim", FieldKind::Int),
       saved<&ScatterBackward1Saved::index>("index", FieldKind::Tensor)}));

  registry.push_back(define_node<ScatterAddBackward0Saved, ScatterAddBackward0>(
      {"ScatterAddBackward0", "scatter_add", {"self", "src"}, 1, {},
       "self: grad\n"
       "src: grad.gather(dim, index)"},
      {saved<&ScatterAddBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&ScatterAddBackward0Saved::index>("index", FieldKind::Tensor, true)}));

  registry.push_back(define_node<IndexAddBackward0Saved, IndexAddBackward0>(
      {"IndexAddBackward0", "index_add", {"self", "source"}, 1, {},
       "self: grad\n"
       "source: maybe_multiply(source.dim() > 0 ? grad.index_select(dim, index).expand_as(source) : "
       "grad.index_select(dim, index.squeeze(0)), alpha)"},
      {saved<&IndexAddBackward0Saved::alpha>("alpha", FieldKind::Scalar),
       saved<&IndexAddBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&IndexAddBackward0Saved::index>("index", FieldKind::Tensor, true),
       saved<&IndexAddBackward0Saved::source>("source", FieldKind::Tensor, true),
       saved<&IndexAddBackward0Saved::source_dim>("source_dim", FieldKind::Int)}));

  registry.push_back(define_node<IndexPutBackward0Saved, IndexPutBackward0>(
      {"IndexPutBackward0", "index_put", {"self", "values"}, 1, {},
       "self: accumulate ? grad : grad.index_put(indices, zeros_like(values), false)\n"
       "values: grad.index(indices)"},
      {saved<&IndexPutBackward0Saved::accumulate>("accumulate", FieldKind::Bool),
       saved<&IndexPutBackward0Saved::indices>("indices", FieldKind::OptionalTensorList),
       // TypeAndSize (sizes, options) in PyTorch; refgrad has no such kind, see the node's comment.
       hidden<&IndexPutBackward0Saved::values_info>("values_info", FieldKind::TypeAndSize)}));

  registry.push_back(define_node<MaskedSelectBackward0Saved, MaskedSelectBackward0>(
      {"MaskedSelectBackward0", "masked_select", {"self"}, 1, {}, "self: masked_select_backward(grad, self, mask)"},
      {saved<&MaskedSelectBackward0Saved::mask>("mask", FieldKind::Tensor),
       saved<&MaskedSelectBackward0Saved::self>("self", FieldKind::Tensor)}));

  registry.push_back(define_node<MaskedScatterBackward0Saved, MaskedScatterBackward0>(
      {"MaskedScatterBackward0", "masked_scatter", {"self", "source"}, 1, {},
       "self: grad.masked_fill(mask, 0)\n"
       "source: masked_scatter_backward_symint(grad, mask, source.sym_sizes())"},
      {saved<&MaskedScatterBackward0Saved::mask>("mask", FieldKind::Tensor),
       saved<&MaskedScatterBackward0Saved::source_sym_sizes>("source_sym_sizes", FieldKind::Sizes)}));

  registry.push_back(define_node<EmbeddingBackward0Saved, EmbeddingBackward0>(
      {"EmbeddingBackward0", "embedding", {"weight"}, 1, {},
       "weight: embedding_backward_symint(grad, indices, weight.sym_size(0), padding_idx, scale_grad_by_freq, "
       "sparse)"},
      {saved<&EmbeddingBackward0Saved::indices>("indices", FieldKind::Tensor),
       saved<&EmbeddingBackward0Saved::padding_idx>("padding_idx", FieldKind::Int),
       saved<&EmbeddingBackward0Saved::scale_grad_by_freq>("scale_grad_by_freq", FieldKind::Bool),
       saved<&EmbeddingBackward0Saved::sparse>("sparse", FieldKind::Bool),
       saved<&EmbeddingBackward0Saved::weight_sym_argsize_0>("weight_sym_argsize_0", FieldKind::Int)}));

  registry.push_back(define_node<IndexCopyBackward0Saved, IndexCopyBackward0>(
      {"IndexCopyBackward0", "index_copy", {"self", "source"}, 1, {},
       "self: grad.index_fill(dim, index, 0)\n"
       "source: source.dim() > 0 ? grad.index_select(dim, index).expand_as(source) : "
       "grad.index_select(dim, index.squeeze(0))"},
      {saved<&IndexCopyBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&IndexCopyBackward0Saved::index>("index", FieldKind::Tensor),
       saved<&IndexCopyBackward0Saved::source>("source", FieldKind::Tensor, true),
       saved<&IndexCopyBackward0Saved::source_dim>("source_dim", FieldKind::Int)}));
  registry.push_back(define_node<IndexFillBackward0Saved, IndexFillBackward0>(
      {"IndexFillBackward0", "index_fill.int_Scalar", {"self"}, 1, {}, "self: grad.index_fill(dim, index, 0)"},
      {saved<&IndexFillBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&IndexFillBackward0Saved::index>("index", FieldKind::Tensor)}));
  registry.push_back(define_node<IndexFillBackward0Saved, IndexFillBackward1>(
      {"IndexFillBackward1", "index_fill.int_Tensor", {"self", "value"}, 1, {},
       "self: grad.index_fill(dim, index, 0)\n"
       "value: grad.index_select(dim, std::get<0>(at::_unique(index, /*sorted=*/false))).sum()"},
      {saved<&IndexFillBackward0Saved::dim>("dim", FieldKind::Int),
       saved<&IndexFillBackward0Saved::index>("index", FieldKind::Tensor)}));
  registry.push_back(define_node<PutBackward0Saved, PutBackward0>(
      {"PutBackward0", "put", {"self", "source"}, 1, {},
       "self: accumulate ? grad : grad.put(index, zeros_like(source), false)\n"
       "source: grad.take(index).reshape_as(source)"},
      {saved<&PutBackward0Saved::accumulate>("accumulate", FieldKind::Bool),
       saved<&PutBackward0Saved::index>("index", FieldKind::Tensor),
       saved<&PutBackward0Saved::source>("source", FieldKind::Tensor, true),
       // TypeAndSize (sizes, options) in PyTorch; refgrad has no such kind, see IndexPutBackward0.
       hidden<&PutBackward0Saved::source_info>("source_info", FieldKind::TypeAndSize)}));
  registry.push_back(define_node<TakeBackward0Saved, TakeBackward0>(
      {"TakeBackward0", "take", {"self"}, 1, {}, "self: take_backward(grad, self, index)"},
      {saved<&TakeBackward0Saved::index>("index", FieldKind::Tensor),
       saved<&TakeBackward0Saved::self>("self", FieldKind::Tensor)}));
  registry.push_back(define_node<UnsafeMaskedIndexBackward0Saved, UnsafeMaskedIndexBackward0>(
      {"UnsafeMaskedIndexBackward0", "_unsafe_masked_index", {"self"}, 1, {},
       "self: at::_unsafe_masked_index_put_accumulate(grad.new_zeros_symint(self.sym_sizes(), self.options()), mask, "
       "indices, grad)"},
      {saved<&UnsafeMaskedIndexBackward0Saved::indices>("indices", FieldKind::OptionalTensorList),
       saved<&UnsafeMaskedIndexBackward0Saved::mask>("mask", FieldKind::Tensor),
       hidden<&UnsafeMaskedIndexBackward0Saved::self_options>("self_options", FieldKind::TensorOptions),
       saved<&UnsafeMaskedIndexBackward0Saved::self_sym_sizes>("self_sym_sizes", FieldKind::Sizes)}));
  {
    using S = UnsafeMaskedIndexPutAccumulateBackward0Saved;
    registry.push_back(define_node<S, UnsafeMaskedIndexPutAccumulateBackward0>(
        {"UnsafeMaskedIndexPutAccumulateBackward0", "_unsafe_masked_index_put_accumulate", {"self", "values"}, 1, {},
         "self: grad\n"
         "values: at::_unsafe_masked_index(grad, mask, indices, 0)"},
        {saved<&S::indices>("indices", FieldKind::OptionalTensorList), saved<&S::mask>("mask", FieldKind::Tensor)}));
  }

  registry.push_back(define_node<NothingSaved, FillBackward0>(
      {"FillBackward0", "fill.Scalar", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
  registry.push_back(define_node<NothingSaved, FillBackward1>(
      {"FillBackward1", "fill.Tensor", {"self", "value"}, 1, {},
       "self: zeros_like(grad)\n"
       "value: grad.sum()"},
      {}));
  registry.push_back(define_node<NothingSaved, FillBackward2>(
      {"FillBackward2", "fill_.Scalar", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
  registry.push_back(define_node<NothingSaved, FillBackward3>(
      {"FillBackward3", "fill_.Tensor", {"self", "value"}, 1, {},
       "self: zeros_like(grad)\n"
       "value: grad.sum()"},
      {}));
  registry.push_back(define_node<NothingSaved, ZeroBackward0>(
      {"ZeroBackward0", "zero_", {"self"}, 1, {}, "self: zeros_like(grad)"}, {}));
}

}  // namespace refgrad::nodes
