// Deterministic parallel loops for the CPU kernels (DESIGN.md, "Determinism").
//
// A kernel cuts its work into `chunks` pieces whose bounds depend only on the
// work's sizes, never on the thread count, and parallel_for runs body(chunk)
// for each of them, spread over num_threads() threads. A chunk writes only its
// own part of the result; partial results (a sum's per-chunk totals) are kept
// per chunk and combined by the caller in chunk order afterwards. So which
// thread ran which chunk never shows in a result: 1 and N threads give the
// same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace refgrad::kernel {

// Calls body(chunk) for each chunk in [0, chunks): on this thread alone when
// num_threads() is 1, there is one chunk, or this is already inside a
// parallel_for; else on a pool of threads with this one. Returns when every
// chunk is done; an exception from a chunk is rethrown here (the first one).
void parallel_for(std::int64_t chunks, const std::function<void(std::int64_t)>& body);

// The same, calling a single chunk directly: most calls on small tensors have
// one, and wrapping the body in a std::function may allocate.
template <class F>
void parallel_for_chunks(std::int64_t chunks, F&& body) {
  if (chunks == 1) body(std::int64_t{0});
  else parallel_for(chunks, body);
}

// The number of chunks of at most `grain` items that cover `n` items.
inline std::int64_t chunk_count(std::int64_t n, std::int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// Runs body(begin, end) over [0, n) cut into ranges of `grain` items (the last
// shorter): the partition depends on n and grain only.
template <class F>
void parallel_ranges(std::int64_t n, std::int64_t grain, F&& body) {
  parallel_for_chunks(chunk_count(n, grain),
                      [&](std::int64_t chunk) { body(chunk * grain, std::min(n, (chunk + 1) * grain)); });
}

// Elements per chunk of an elementwise loop: big enough that handing a chunk
// to another thread (a few microseconds) is small against its work.
constexpr std::int64_t kElementwiseGrain = std::int64_t{1} << 15;

}  // namespace refgrad::kernel
