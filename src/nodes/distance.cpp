// Backward nodes of the pairwise distances: cdist (CdistBackward0 from _cdist_forward, or
// EuclideanDistBackward0 from _euclidean_dist, which torch.cdist uses for p = 2 when compute_mode
// asks for the matrix-product form, by default when either input has more than 25 rows) and pdist.
//
// A distance d = (sum_k |x_k - y_k|^p)^(1/p) has d d / d x_k = sign(diff) |diff|^(p-1) / d^(p-1) with
// diff = x_k - y_k; ATen's kernels take each p apart (see pairwise_distance_backward), and give 0
// where the distance is 0.
#include <cmath>
#include <vector>

#include "define.hpp"

namespace refgrad::nodes {
namespace {

// grad * d dist / d x for each pair's difference `diff` (x - y, its last dim the coordinates), with
// `grad` and `dist` the pair's incoming grad and distance (broadcast along the coordinates): ATen's
// backward of each distance kernel (aten/src/ATen/native/cpu/DistanceOpsKernel.cpp):
//   p = 1:      grad * sign(diff)
//   p < 2:      grad * sign(diff) * |diff|^(p-1) / dist^(p-1); 0 where dist = 0, and for p < 1 where
//               diff = 0 (|0|^(p-1) would be infinite)
//   p = 2:      grad * diff / dist; 0 where dist = 0
//   p = inf:    grad * sign(diff) where |diff| equals dist exactly (every tie gets the whole grad)
//   otherwise:  grad * diff * |diff|^(p-2) / dist^(p-1); 0 where dist = 0
Tensor pairwise_distance_backward(const Tensor& diff, const Tensor& grad, const Tensor& dist, double p) {
  const Tensor at_zero = eq(dist, 0);
  if (p == 1) return mul(grad, sign(diff));
  if (p < 2) {
    Tensor zero_where = at_zero;
    if (p < 1) zero_where = logical_or(zero_where, eq(diff, 0));
    const Tensor value = div(mul(mul(sign(diff), pow(abs(diff), p - 1)), grad), pow(dist, p - 1));
    return where(zero_where, 0, value);
  }
  if (p == 2) return where(at_zero, 0, div(mul(grad, diff), dist));
  if (std::isinf(p)) return mul(mul(grad, sign(diff)), eq(abs(diff), dist));
  return where(at_zero, 0, div(mul(mul(diff, pow(abs(diff), p - 2)), grad), pow(dist, p - 1)));
}

// _cdist_backward(grad, x1, x2, p, cdist): x1 [*, r1, m], x2 [*, r2, m] with broadcasting batch dims,
// grad and cdist [*, r1, r2]. The grad of x1, with the broadcast batch dims (validate sums it back):
//   grad_x1[b, i] = sum_j pairwise_distance_backward(x1[b, i] - x2[b, j], grad[b, i, j], cdist[b, i, j])
// Zeros for p = 0 (a count of nonzero differences has no gradient) and for empty inputs.
Tensor _cdist_backward(const Tensor& grad, const Tensor& x1, const Tensor& x2, double p, const Tensor& cdist) {
  const Shape batch1(x1.sizes().begin(), x1.sizes().end() - 2), batch2(x2.sizes().begin(), x2.sizes().end() - 2);
  Shape expanded = broadcast_shapes(batch1, batch2);
  expanded.push_back(x1.size(-2));
  expanded.push_back(x1.size(-1));
  if (p == 0 || numel_of(expanded) == 0 || x2.size(-2) == 0) return zeros(expanded, x1.dtype());
  const Tensor diff = sub(unsqueeze(x1, -2), unsqueeze(x2, -3));  // [*, r1, r2, m]
  return sum(pairwise_distance_backward(diff, unsqueeze(grad, -1), unsqueeze(cdist, -1), p), {-2});
}

void check_distance_inputs(const char* node, const Tensor& grad, const Tensor& x1, const Tensor& x2,
                           const Tensor& result) {
  check(x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1), node, ": x1 ", shape_text(x1.sizes()),
        " and x2 ", shape_text(x2.sizes()), " must be [..., rows, m] with the same m");
  const Shape batch1(x1.sizes().begin(), x1.sizes().end() - 2), batch2(x2.sizes().begin(), x2.sizes().end() - 2);
  check(is_expandable_to(batch1, broadcast_shapes(batch1, batch2)) &&
            is_expandable_to(batch2, broadcast_shapes(batch1, batch2)),
        node, ": the batch dims of x1 ", shape_text(x1.sizes()), " and x2 ", shape_text(x2.sizes()),
        " do not broadcast");
  Shape expected = broadcast_shapes(batch1, batch2);
  expected.push_back(x1.size(-2));
  expected.push_back(x2.size(-2));
  check(grad.sizes() == expected && result.sizes() == expected, node, ": grad ", shape_text(grad.sizes()),
        " and result ", shape_text(result.sizes()), " must be ", shape_text(expected), " for x1 ",
        shape_text(x1.sizes()), " and x2 ", shape_text(x2.sizes()));
}

// CdistBackward0 — _cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor
//   x1: _cdist_backward(grad.contiguous(), x1, x2, p, result)
//   x2: _cdist_backward(grad.mT().contiguous(), x2, x1, p, result.mT().contiguous())
struct CdistBackward0Saved {
  double p;
  Tensor x1;
  Tensor x2;
  Tensor result;
};

Grads CdistBackward0(const Grads& grads, const CdistBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &x1 = saved.x1, &x2 = saved.x2, &result = saved.result;
  check_distance_inputs("CdistBackward0", grad, x1, x2, result);
  check(saved.p >= 0, "CdistBackward0: p must be non-negative, got ", saved.p);
  Grads out(2);
  if (need[0]) out[0] = _cdist_backward(grad, x1, x2, saved.p, result);
  if (need[1]) out[1] = _cdist_backward(transpose(grad, -1, -2), x2, x1, saved.p, transpose(result, -1, -2));
  return out;
}

// EuclideanDistBackward0 — _euclidean_dist(Tensor x1, Tensor x2) -> Tensor
//   x1, x2: _euclidean_dist_backward(grad, x1, x2, result)
// With ratio = grad / result (0 where result is 0, a subgradient):
//   x1: x1 * ratio.sum(-1, keepdim) - ratio @ x2        x2: x2 * ratio.sum(-2).unsqueeze(-1) - ratio^T @ x1
struct EuclideanDistBackward0Saved {
  Tensor x1;
  Tensor x2;
  Tensor result;
};

Grads EuclideanDistBackward0(const Grads& grads, const EuclideanDistBackward0Saved& saved, const Need& need) {
  if (!grads[0]) return Grads(2);
  const Tensor &grad = *grads[0], &x1 = saved.x1, &x2 = saved.x2, &result = saved.result;
  check_distance_inputs("EuclideanDistBackward0", grad, x1, x2, result);
  const Tensor ratio = masked_fill(div(grad, result), eq(result, 0), 0);
  Grads out(2);
  if (need[0]) out[0] = sub(mul(x1, sum(ratio, {-1}, true)), matmul(ratio, x2));
  if (need[1]) out[1] = sub(mul(x2, unsqueeze(sum(ratio, {-2}), -1)), matmul(transpose(ratio, -1, -2), x1));
  return out;
}

// PdistBackward0 — _pdist_forward(Tensor self, float p=2) -> Tensor
//   self: _pdist_backward(grad, self, p, result)
// result[k] is the distance of rows i < j of self [n, m], the pairs in row-major order of the upper
// triangle: (0, 1), (0, 2), ..., (0, n-1), (1, 2), ... Each pair's term (pairwise_distance_backward of
// self[i] - self[j]) goes to row i, and with the opposite sign to row j. Zeros for p = 0.
struct PdistBackward0Saved {
  double p;
  Tensor self;
  Tensor result;
};

Grads PdistBackward0(const Grads& grads, const PdistBackward0Saved& saved, const Need& need) {
  if (!grads[0] || !need[0]) return Grads(1);
  const Tensor &grad = *grads[0], &self = saved.self, &result = saved.result;
  check(self.dim() == 2, "PdistBackward0: self must be [n, m], got ", shape_text(self.sizes()));
  const std::int64_t n = self.size(0);
  const std::int64_t pairs = n * (n - 1) / 2;
  check(grad.sizes() == Shape{pairs} && result.sizes() == Shape{pairs}, "PdistBackward0: grad ",
        shape_text(grad.sizes()), " and result ", shape_text(result.sizes()), " must be [", pairs,
        "] (one per pair of the ", n, " rows of self ", shape_text(self.sizes()), ")");
  check(saved.p >= 0, "PdistBackward0: p must be non-negative, got ", saved.p);
  if (saved.p == 0 || pairs == 0 || self.numel() == 0) return Grads{zeros(self.sizes(), self.dtype())};
  std::vector<std::int64_t> first, second;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i + 1; j < n; ++j) {
      first.push_back(i);
      second.push_back(j);
    }
  const Tensor rows_i = from_vector(first, {pairs}), rows_j = from_vector(second, {pairs});
  const Tensor diff = sub(index_select(self, 0, rows_i), index_select(self, 0, rows_j));
  const Tensor term = pairwise_distance_backward(diff, unsqueeze(grad, -1), unsqueeze(result, -1), saved.p);
  const Tensor grad_self = index_add(zeros(self.sizes(), term.dtype()), 0, rows_i, term);
  return Grads{index_add(grad_self, 0, rows_j, term, -1)};
}

}  // namespace

void add_distance_nodes(std::vector<NodeDef>& registry) {
  {
    using S = CdistBackward0Saved;
    registry.push_back(define_node<S, CdistBackward0>(
        {"CdistBackward0", "_cdist_forward", {"x1", "x2"}, 1, {},
         "x1: _cdist_backward(grad.contiguous(), x1, x2, p, result); "
         "x2: _cdist_backward(grad.mT().contiguous(), x2, x1, p, result.mT().contiguous())"},
        {saved<&S::p>("p", FieldKind::Float), saved<&S::x1>("x1", FieldKind::Tensor),
         saved<&S::x2>("x2", FieldKind::Tensor), saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = EuclideanDistBackward0Saved;
    registry.push_back(define_node<S, EuclideanDistBackward0>(
        {"EuclideanDistBackward0", "_euclidean_dist", {"x1", "x2"}, 1, {},
         "x1, x2: _euclidean_dist_backward(grad, x1, x2, result)"},
        {saved<&S::x1>("x1", FieldKind::Tensor), saved<&S::x2>("x2", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
  {
    using S = PdistBackward0Saved;
    registry.push_back(define_node<S, PdistBackward0>(
        {"PdistBackward0", "_pdist_forward", {"self"}, 1, {}, "self: _pdist_backward(grad, self, p, result)"},
        {saved<&S::p>("p", FieldKind::Float), saved<&S::self>("self", FieldKind::Tensor),
         saved<&S::result>("result", FieldKind::Tensor)}));
  }
}

}  // namespace refgrad::nodes
