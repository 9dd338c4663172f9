// The strided elementwise loop behind kernel::map and the copies: an output
// written in row-major order, each input read through its own strides (0
// along a broadcast dim), without copying any input first. Dims that are
// contiguous in every operand are merged, so most loops are one flat run over
// all elements; the innermost run is a plain indexed loop the compiler
// vectorizes when every input steps by one element.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "parallel.hpp"
#include "refgrad/tensor.hpp"

namespace refgrad::kernel {

// The dims of an N-input elementwise op over a contiguous output of `sizes`,
// with the inputs' strides, after merging the dims that can be merged and
// dropping the dims of size 1. Strides are in elements.
template <std::size_t N>
struct StridedLayout {
  std::vector<std::int64_t> sizes;                       // outermost first
  std::array<std::vector<std::int64_t>, N> strides;      // per input, same length as sizes

  StridedLayout(const Shape& out_sizes, const std::array<const Shape*, N>& input_strides) {
    // Innermost first while building, then reversed.
    for (std::size_t d = out_sizes.size(); d-- > 0;) {
      if (out_sizes[d] == 1) continue;
      if (!sizes.empty() && mergeable(d, input_strides)) {
        // dim d (outer) joins the current innermost-built dim: its strides are size times the inner's
        sizes.back() *= out_sizes[d];
        continue;
      }
      sizes.push_back(out_sizes[d]);
      for (std::size_t i = 0; i < N; ++i) strides[i].push_back((*input_strides[i])[d]);
    }
    if (sizes.empty()) {  // a single element
      sizes.push_back(1);
      for (std::size_t i = 0; i < N; ++i) strides[i].push_back(0);
    }
    std::reverse(sizes.begin(), sizes.end());
    for (auto& s : strides) std::reverse(s.begin(), s.end());
  }

  // Calls row(output offset, input offsets, length) for each innermost run of
  // the output elements [begin, end), in order.
  template <class Row>
  void for_each_run(std::int64_t begin, std::int64_t end, Row&& row) const {
    const std::size_t ndim = sizes.size();
    const std::int64_t inner = sizes[ndim - 1];
    std::vector<std::int64_t> index(ndim);
    std::array<std::int64_t, N> offsets{};
    std::int64_t rest = begin;
    for (std::size_t d = ndim; d-- > 0;) {
      index[d] = rest % sizes[d];
      rest /= sizes[d];
      for (std::size_t i = 0; i < N; ++i) offsets[i] += index[d] * strides[i][d];
    }
    std::int64_t position = begin;
    while (position < end) {
      const std::int64_t length = std::min(inner - index[ndim - 1], end - position);
      row(position, offsets, length);
      position += length;
      // advance the odometer by `length` elements: to the start of the next row (or to end)
      index[ndim - 1] += length;
      for (std::size_t i = 0; i < N; ++i) offsets[i] += length * strides[i][ndim - 1];
      for (std::size_t d = ndim - 1; d > 0 && index[d] == sizes[d]; --d) {
        for (std::size_t i = 0; i < N; ++i) offsets[i] += strides[i][d - 1] - sizes[d] * strides[i][d];
        index[d] = 0;
        ++index[d - 1];
      }
    }
  }

 private:
  // Dim d can merge into the dim built last (d + k, its inner neighbour after
  // the size-1 dims skipped) when, for every input, stepping d equals stepping
  // the inner one all the way: stride[d] == size * stride[inner].
  bool mergeable(std::size_t d, const std::array<const Shape*, N>& input_strides) const {
    for (std::size_t i = 0; i < N; ++i)
      if ((*input_strides[i])[d] != sizes.back() * strides[i].back()) return false;
    return true;
  }
};

// True when every element of the view is the same stored element (a broadcast scalar).
inline bool is_one_element(const Tensor& t) {
  for (std::size_t d = 0; d < t.sizes().size(); ++d)
    if (t.sizes()[d] != 1 && t.strides()[d] != 0) return false;
  return true;
}

// One innermost run of an elementwise loop: o[k] = f(input I at k) for k in
// [0, length), where input I steps by one element unless bit I of Broadcast
// is set, in which case it stays on one element (stride 0: a scalar or a
// broadcast dim). Knowing the steps at compile time lets the compiler
// vectorize the loop.
template <std::size_t Broadcast, class Out, class F, class... P, std::size_t... I>
void contiguous_run(Out* __restrict o, std::int64_t length, F& f, std::index_sequence<I...>, const P*... p) {
  for (std::int64_t k = 0; k < length; ++k) o[k] = f(p[(Broadcast >> I) & 1 ? 0 : k]...);
}

// Calls contiguous_run with Broadcast equal to the runtime `broadcast` bits.
template <std::size_t Broadcast, std::size_t N, class Out, class F, class... P>
void contiguous_run_for(std::size_t broadcast, Out* o, std::int64_t length, F& f, const P*... p) {
  if constexpr (Broadcast + 1 < (std::size_t{1} << N)) {
    if (broadcast != Broadcast) {
      contiguous_run_for<Broadcast + 1, N>(broadcast, o, length, f, p...);
      return;
    }
  }
  contiguous_run<Broadcast>(o, length, f, std::make_index_sequence<N>{}, p...);
}

// out[k] = f(inputs[k]...) for every element k of `out` (contiguous), with
// inputs already broadcast to out's sizes (strided views of element types
// In...). Cut into chunks of kElementwiseGrain elements, run in parallel.
template <class Out, class... In, class F, std::size_t... I>
void elementwise_loop(Tensor& out, const std::array<Tensor, sizeof...(In)>& inputs, F& f,
                      std::index_sequence<I...>) {
  constexpr std::size_t N = sizeof...(In);
  const std::tuple<const In*...> bases{inputs[I].template data_ptr<In>()...};
  Out* const result = out.data_ptr<Out>();
  // The common case first, without building a layout (a program of small tensors makes many of them): each
  // input contiguous in out's shape or one element seen everywhere.
  std::size_t single_elements = 0;
  bool flat = true;
  for (std::size_t i = 0; i < N; ++i) {
    if (is_one_element(inputs[i])) single_elements |= std::size_t{1} << i;
    else flat = flat && inputs[i].is_contiguous();
  }
  if (flat) {
    parallel_ranges(out.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
      contiguous_run_for<0, N>(single_elements, result + begin, end - begin, f,
                               (std::get<I>(bases) + ((single_elements >> I) & 1 ? 0 : begin))...);
    });
    return;
  }
  const StridedLayout<N> layout(out.sizes(), std::array<const Shape*, N>{&inputs[I].strides()...});
  const std::array<std::int64_t, N> inner_strides{layout.strides[I].back()...};
  // Inner steps of 0 or 1 only (the common case): a compiled run per pattern of 0s.
  bool steps_are_0_or_1 = true;
  std::size_t broadcast = 0;
  for (std::size_t i = 0; i < N; ++i) {
    steps_are_0_or_1 = steps_are_0_or_1 && (inner_strides[i] == 0 || inner_strides[i] == 1);
    if (inner_strides[i] == 0) broadcast |= std::size_t{1} << i;
  }
  parallel_ranges(out.numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    layout.for_each_run(begin, end, [&](std::int64_t at, const std::array<std::int64_t, N>& offsets,
                                        std::int64_t length) {
      if (steps_are_0_or_1) {
        contiguous_run_for<0, N>(broadcast, result + at, length, f, (std::get<I>(bases) + offsets[I])...);
      } else {
        Out* __restrict o = result + at;
        const std::tuple<const In*...> p{std::get<I>(bases) + offsets[I]...};
        for (std::int64_t k = 0; k < length; ++k) o[k] = f(std::get<I>(p)[k * inner_strides[I]]...);
      }
    });
  });
}

}  // namespace refgrad::kernel
