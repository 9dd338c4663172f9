// bench_tensor: how far refgrad's tensor ops are from the simplest code that
// does the same work, measured in one run as RATIOS (refgrad time / baseline
// time). Absolute times depend on the machine and its load; a ratio of two
// measurements interleaved in the same run mostly does not.
//
//   add    of two contiguous 4M-element float32 tensors, against std::memcpy
//          of the 16 MiB the output holds: into a buffer allocated and touched
//          before timing, and into fresh pages mapped in each repetition
//          (refgrad::add allocates its output, and the first touch of fresh
//          pages is slow on some machines).
//   matmul 1024 x 1024 @ 1024 x 1024 float32, against cblas_sgemm on the same
//          buffers (OpenBLAS on one thread on both sides).
//   sum    over dim 1 of a [2048, 2048] float32 tensor, against a hand-written
//          row sum over the same data into a preallocated output.
//
// Each op: 2 warm-up rounds, then 9 rounds that each run refgrad and then
// every baseline once (interleaved, so slow drifts of the machine hit all of
// them). The table shows the ratio of the medians, each median, and the median
// number of page faults per run (first touches of fresh 4 KiB pages), which
// tells whether the output landed on recycled or on fresh memory.
#include <cblas.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "refgrad/ops.hpp"

namespace {

using refgrad::DType;
using refgrad::Tensor;

constexpr int kWarmups = 2;
constexpr int kRepetitions = 9;

// Keeps the compiler from dropping work whose result is never read.
volatile double sink = 0;

long page_faults_so_far() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Median seconds and page faults of the runs of one side.
struct Measurements {
  std::vector<double> seconds, page_faults;

  void measure(const std::function<void()>& run) {
    const long faults_before = page_faults_so_far();
    const auto start = std::chrono::steady_clock::now();
    run();
    const auto stop = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(stop - start).count());
    page_faults.push_back(static_cast<double>(page_faults_so_far() - faults_before));
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Baseline {
  std::string name;
  std::function<void()> run;
};

// One line of the table.
struct Comparison {
  std::string op, baseline;
  double refgrad_seconds, baseline_seconds;  // medians
  double refgrad_faults, baseline_faults;    // medians
};

std::vector<Comparison> compare(const std::string& op, const std::function<void()>& refgrad_run,
                                const std::vector<Baseline>& baselines) {
  for (int i = 0; i < kWarmups; ++i) {
    refgrad_run();
    for (const Baseline& baseline : baselines) baseline.run();
  }
  Measurements refgrad_side;
  std::vector<Measurements> baseline_sides(baselines.size());
  for (int i = 0; i < kRepetitions; ++i) {
    refgrad_side.measure(refgrad_run);
    for (std::size_t b = 0; b < baselines.size(); ++b) baseline_sides[b].measure(baselines[b].run);
  }
  std::vector<Comparison> lines;
  for (std::size_t b = 0; b < baselines.size(); ++b)
    lines.push_back({op, baselines[b].name, median(refgrad_side.seconds), median(baseline_sides[b].seconds),
                     median(refgrad_side.page_faults), median(baseline_sides[b].page_faults)});
  return lines;
}

// Values in [-1, 1) from a linear congruential generator: cheap, deterministic.
Tensor filled(const refgrad::Shape& sizes, std::uint32_t seed) {
  Tensor t = refgrad::empty(sizes, DType::Float32);
  float* data = t.data_ptr<float>();
  std::uint32_t state = seed;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return t;
}

std::vector<Comparison> bench_add(const Tensor& a, const Tensor& b) {
  const std::size_t nbytes = static_cast<std::size_t>(a.numel()) * sizeof(float);
  std::vector<char> preallocated(nbytes, 0);  // every page touched before timing
  return compare("add 4M f32", [&] { sink = sink + refgrad::add(a, b).data_ptr<float>()[0]; },
                 {{"memcpy, preallocated",
                   [&] {
                     std::memcpy(preallocated.data(), a.raw_data(), nbytes);
                     sink = sink + static_cast<double>(preallocated[0]);
                   }},
                  // Fresh pages from the kernel, as malloc gets them for a
                  // large block it cannot recycle: every page is touched for
                  // the first time by the copy.
                  {"memcpy, fresh pages", [&] {
                     void* fresh = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                     if (fresh == MAP_FAILED) std::abort();
                     std::memcpy(fresh, a.raw_data(), nbytes);
                     sink = sink + static_cast<double>(static_cast<char*>(fresh)[0]);
                     munmap(fresh, nbytes);
                   }}});
}

std::vector<Comparison> bench_matmul(const Tensor& a, const Tensor& b) {
  const int n = static_cast<int>(a.size(0));
  std::vector<float> c(static_cast<std::size_t>(n) * n, 0.0f);
  std::vector<Comparison> lines =
      compare("matmul 1024^3 f32", [&] { sink = sink + refgrad::matmul(a, b).data_ptr<float>()[0]; },
              {{"cblas_sgemm", [&] {
                  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data_ptr<float>(), n,
                              b.data_ptr<float>(), n, 0.0f, c.data(), n);
                  sink = sink + c[0];
                }}});
  // Both sides must do the same work: the same products, bit for bit.
  const Tensor product = refgrad::matmul(a, b);
  float max_difference = 0.0f;
  for (std::size_t i = 0; i < c.size(); ++i)
    max_difference = std::max(max_difference, std::abs(product.data_ptr<float>()[i] - c[i]));
  std::printf("matmul check: max |refgrad - cblas_sgemm| = %g\n", static_cast<double>(max_difference));
  return lines;
}

std::vector<Comparison> bench_sum(const Tensor& x) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<float> out(static_cast<std::size_t>(rows), 0.0f);
  return compare("sum dim 1 [2048,2048] f32", [&] { sink = sink + refgrad::sum(x, {1}).data_ptr<float>()[0]; },
                 {{"hand-written row sum", [&] {
                     const float* data = x.data_ptr<float>();
                     for (std::int64_t i = 0; i < rows; ++i) {
                       // Eight independent partial sums, so the adds do not
                       // wait on each other and the compiler can vectorize.
                       float partial[8] = {};
                       const float* row = data + i * cols;
                       std::int64_t j = 0;
                       for (; j + 8 <= cols; j += 8)
                         for (int lane = 0; lane < 8; ++lane) partial[lane] += row[j + lane];
                       float total = 0.0f;
                       for (float p : partial) total += p;
                       for (; j < cols; ++j) total += row[j];
                       out[static_cast<std::size_t>(i)] = total;
                     }
                     sink = sink + out[0];
                   }}});
}

void print_table(const std::vector<Comparison>& lines) {
  std::printf("%-26s %-22s %7s %13s %14s %15s %16s\n", "refgrad op", "baseline", "ratio", "refgrad [ms]",
              "baseline [ms]", "refgrad faults", "baseline faults");
  for (const Comparison& line : lines)
    std::printf("%-26s %-22s %7.2f %13.3f %14.3f %15.0f %16.0f\n", line.op.c_str(), line.baseline.c_str(),
                line.refgrad_seconds / line.baseline_seconds, line.refgrad_seconds * 1e3,
                line.baseline_seconds * 1e3, line.refgrad_faults, line.baseline_faults);
}

}  // namespace

int main() {
  // refgrad runs OpenBLAS on one thread; the direct sgemm baseline must too.
  openblas_set_num_threads(1);

  const Tensor add_a = filled({4 * 1024 * 1024}, 1), add_b = filled({4 * 1024 * 1024}, 2);
  const Tensor mat_a = filled({1024, 1024}, 3), mat_b = filled({1024, 1024}, 4);
  const Tensor sum_x = filled({2048, 2048}, 5);

  std::vector<Comparison> lines;
  for (const std::vector<Comparison>& op_lines : {bench_add(add_a, add_b), bench_matmul(mat_a, mat_b), bench_sum(sum_x)})
    lines.insert(lines.end(), op_lines.begin(), op_lines.end());

  std::printf("bench_tensor: ratio = median refgrad time / median baseline time (%d rounds after %d warm-ups)\n",
              kRepetitions, kWarmups);
  print_table(lines);
  return 0;
}
