// Threads: every kernel that splits its work gives the same bits at 1, 3 and 8
// threads (a partition by sizes alone), and the right values (naive loops in
// double here, written with to_vector only); the thread count setting and its
// errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "expect.hpp"
#include "refgrad/ops.hpp"

using namespace refgrad;

namespace {

Tensor normal(const Shape& sizes, DType dtype, std::uint64_t seed) {
  Generator generator(seed);
  std::vector<double> values(static_cast<std::size_t>(numel_of(sizes)));
  for (double& v : values) v = generator.normal();
  return from_vector(values, sizes).to(dtype);
}

// The op's result at 1 thread; checks that 3 and 8 threads give the same bytes.
Tensor same_bits_at_any_thread_count(const std::function<Tensor()>& op) {
  Tensor one;
  {
    const NumThreadsScope threads(1);
    one = op().contiguous();
  }
  for (int count : {3, 8}) {
    const NumThreadsScope threads(count);
    const Tensor many = op().contiguous();
    REQUIRE(many.sizes() == one.sizes());
    REQUIRE(many.dtype() == one.dtype());
    CHECK_MESSAGE(std::memcmp(many.raw_data(), one.raw_data(), static_cast<std::size_t>(one.numel()) * element_size(one.dtype())) == 0, count,
                  " threads give other bits than 1");
  }
  return one;
}

}  // namespace

TEST_CASE("num_threads") {
  CHECK(default_num_threads() >= 1);
  const int before = num_threads();
  {
    const NumThreadsScope scope(3);
    CHECK(num_threads() == 3);
    {
      const NumThreadsScope every_core(0);
      CHECK(num_threads() == default_num_threads());
    }
    CHECK(num_threads() == 3);
  }
  CHECK(num_threads() == before);
  set_num_threads(2);
  CHECK(num_threads() == 2);
  set_num_threads(0);
  CHECK(num_threads() == default_num_threads());
  CHECK_THROWS_WITH(set_num_threads(-1), "set_num_threads: the thread count must be 0 (every core) or more, got -1");
}

TEST_CASE("parallel sum and mean") {
  // Long rows (by rows), reduced outer dims (by columns), everything, and a transposed view. float64: float32
  // values summed in double mostly add exactly, in any order, and would not show an order that changed.
  const Tensor x = normal({64, 3, 1000}, DType::Float64, 1);
  const std::vector<double> v = x.to_vector<double>();
  const Tensor rows = same_bits_at_any_thread_count([&] { return sum(x, IntList{2}); });
  const Tensor columns = same_bits_at_any_thread_count([&] { return sum(x, IntList{0}); });
  const Tensor all = same_bits_at_any_thread_count([&] { return sum(x); });
  const Tensor means = same_bits_at_any_thread_count([&] { return mean(transpose(x, 0, 2), IntList{1, 2}); });
  std::vector<double> row_sums(64 * 3, 0.0), column_sums(3 * 1000, 0.0), channel_means(1000, 0.0);
  double total = 0;
  for (std::size_t n = 0; n < 64; ++n)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t k = 0; k < 1000; ++k) {
        const double value = v[(n * 3 + c) * 1000 + k];
        row_sums[n * 3 + c] += value;
        column_sums[c * 1000 + k] += value;
        channel_means[k] += value / (64 * 3);
        total += value;
      }
  CHECK_TENSOR(rows, from_vector(row_sums, {64, 3}), 1e-12, 1e-12);
  CHECK_TENSOR(columns, from_vector(column_sums, {3, 1000}), 1e-12, 1e-12);
  CHECK_TENSOR(all, from_vector(std::vector<double>{total}, {}), 1e-12, 1e-10);
  CHECK_TENSOR(means, from_vector(channel_means, {1000}), 1e-12, 1e-12);
}

TEST_CASE("parallel elementwise") {
  // A broadcast [1, 500] row and a transposed view against a [300, 500] tensor: strided reads, several chunks.
  const Tensor a = normal({300, 500}, DType::Float64, 2), row = normal({1, 500}, DType::Float64, 3);
  const Tensor b = transpose(normal({500, 300}, DType::Float64, 4), 0, 1);
  const Tensor out = same_bits_at_any_thread_count([&] { return add(mul(a, row), b); });
  const std::vector<double> va = a.to_vector<double>(), vr = row.to_vector<double>(),
                            vb = b.contiguous().to_vector<double>();
  std::vector<double> expected(va.size());
  for (std::size_t i = 0; i < 300; ++i)
    for (std::size_t j = 0; j < 500; ++j) expected[i * 500 + j] = va[i * 500 + j] * vr[j] + vb[i * 500 + j];
  CHECK_TENSOR(out, from_vector(expected, {300, 500}), 1e-15, 1e-15);
  // where with a scalar branch (a ReLU's backward), and a copy converting dtypes.
  const Tensor mask = gt(a, 0.0);
  const Tensor relu_grad = same_bits_at_any_thread_count([&] { return where(mask, b, Scalar(0.0)); });
  const std::vector<double> chosen = relu_grad.to_vector<double>();
  for (std::size_t k = 0; k < va.size(); ++k) CHECK(chosen[k] == (va[k] > 0 ? vb[k] : 0.0));
  const Tensor narrowed = same_bits_at_any_thread_count([&] { return b.to(DType::Float32); });
  CHECK_TENSOR(narrowed, from_vector(vb, {300, 500}).to(DType::Float32), 0, 0);
}

TEST_CASE("parallel matmul") {
  // Big enough to be cut into blocks of rows, then of columns; and a batch of products.
  for (const auto& [m, k, n] : {std::array<std::int64_t, 3>{512, 300, 200}, {100, 300, 700}}) {
    const Tensor a = normal({m, k}, DType::Float32, 5), b = normal({k, n}, DType::Float32, 6);
    const Tensor product = same_bits_at_any_thread_count([&] { return mm(a, b); });
    const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
    std::vector<double> expected(static_cast<std::size_t>(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t p = 0; p < k; ++p)
        for (std::int64_t j = 0; j < n; ++j) expected[i * n + j] += double(va[i * k + p]) * vb[p * n + j];
    CHECK_TENSOR(product, from_vector(expected, {m, n}).to(DType::Float32), 1e-4, 1e-4);
  }
  const Tensor x = normal({6, 40, 30}, DType::Float64, 7), y = normal({6, 30, 20}, DType::Float64, 8);
  same_bits_at_any_thread_count([&] { return matmul(x, y); });
}

TEST_CASE("parallel convolution") {
  // One image per chunk, forward and transposed; checked against a direct loop.
  const Tensor input = normal({5, 3, 9, 8}, DType::Float64, 9), weight = normal({4, 3, 3, 3}, DType::Float64, 10);
  const Tensor out = same_bits_at_any_thread_count([&] { return conv2d(input, weight, std::nullopt, {2, 1}, {1, 1}); });
  const std::vector<double> vi = input.to_vector<double>(), vw = weight.to_vector<double>();
  REQUIRE(out.sizes() == Shape{5, 4, 5, 8});
  std::vector<double> expected(5 * 4 * 5 * 8, 0.0);
  for (int n = 0; n < 5; ++n)
    for (int o = 0; o < 4; ++o)
      for (int y = 0; y < 5; ++y)
        for (int x = 0; x < 8; ++x)
          for (int c = 0; c < 3; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                const int h = y * 2 - 1 + i, w = x - 1 + j;
                if (h < 0 || h >= 9 || w < 0 || w >= 8) continue;
                expected[((n * 4 + o) * 5 + y) * 8 + x] += vi[((n * 3 + c) * 9 + h) * 8 + w] * vw[((o * 3 + c) * 3 + i) * 3 + j];
              }
  CHECK_TENSOR(out, from_vector(expected, {5, 4, 5, 8}), 1e-12, 1e-12);
  same_bits_at_any_thread_count([&] { return conv_transpose2d(out, weight, std::nullopt, {2, 1}, {1, 1}); });
}

TEST_CASE("parallel convolution weight grad") {
  // 40 images in chunks of 7 (a 2^21 multiply-add share each), summed in chunk order; and a transposed one.
  const Tensor input = normal({40, 4, 32, 32}, DType::Float64, 11), grad = normal({40, 8, 32, 32}, DType::Float64, 12);
  const Tensor grad_weight = same_bits_at_any_thread_count(
      [&] { return convolution_backward_weight(grad, input, {8, 4, 3, 3}, {1}, {1}, {1}, false, 1); });
  const std::vector<double> vi = input.to_vector<double>(), vg = grad.to_vector<double>();
  std::vector<double> expected(8 * 4 * 3 * 3, 0.0);
  for (int n = 0; n < 40; ++n)
    for (int o = 0; o < 8; ++o)
      for (int c = 0; c < 4; ++c)
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j) {
            double total = 0;
            for (int y = 0; y < 32; ++y)
              for (int x = 0; x < 32; ++x) {
                const int h = y - 1 + i, w = x - 1 + j;
                if (h < 0 || h >= 32 || w < 0 || w >= 32) continue;
                total += vg[((n * 8 + o) * 32 + y) * 32 + x] * vi[((n * 4 + c) * 32 + h) * 32 + w];
              }
            expected[((o * 4 + c) * 3 + i) * 3 + j] += total;
          }
  CHECK_TENSOR(grad_weight, from_vector(expected, {8, 4, 3, 3}), 1e-12, 1e-10);
  same_bits_at_any_thread_count(
      [&] { return convolution_backward_weight(input, grad, {8, 2, 3, 3}, {1}, {1}, {1}, true, 2); });
}

TEST_CASE("parallel batch norm backward") {
  // 6 channels of 8 x 40 x 40 values, two channels a chunk; each channel's sums stay in one chunk.
  const Tensor input = normal({8, 6, 40, 40}, DType::Float64, 13), grad = normal({8, 6, 40, 40}, DType::Float64, 14);
  const Tensor weight = normal({6}, DType::Float64, 15), mean = normal({6}, DType::Float64, 16);
  const Tensor invstd = add(abs(normal({6}, DType::Float64, 17)), Scalar(0.5));
  const auto run = [&](std::size_t k) {
    const auto grads = native_batch_norm_backward(grad, input, weight, std::nullopt, std::nullopt, mean, invstd, true,
                                                  1e-5, {true, true, true});
    return k == 0 ? std::get<0>(grads) : k == 1 ? std::get<1>(grads) : std::get<2>(grads);
  };
  const Tensor grad_input = same_bits_at_any_thread_count([&] { return run(0); });
  const Tensor grad_weight = same_bits_at_any_thread_count([&] { return run(1); });
  const Tensor grad_bias = same_bits_at_any_thread_count([&] { return run(2); });
  // The formula with x_hat, in double.
  const std::vector<double> x = input.to_vector<double>(), g = grad.to_vector<double>(), w = weight.to_vector<double>(),
                            mu = mean.to_vector<double>(), s = invstd.to_vector<double>();
  const std::size_t plane = 1600, count = 8 * plane;
  std::vector<double> sum_g(6, 0.0), sum_g_xhat(6, 0.0), expected_input(x.size());
  for (std::size_t n = 0; n < 8; ++n)
    for (std::size_t c = 0; c < 6; ++c)
      for (std::size_t i = 0; i < plane; ++i) {
        const std::size_t at = (n * 6 + c) * plane + i;
        sum_g[c] += g[at];
        sum_g_xhat[c] += g[at] * (x[at] - mu[c]) * s[c];
      }
  for (std::size_t n = 0; n < 8; ++n)
    for (std::size_t c = 0; c < 6; ++c)
      for (std::size_t i = 0; i < plane; ++i) {
        const std::size_t at = (n * 6 + c) * plane + i;
        const double x_hat = (x[at] - mu[c]) * s[c];
        expected_input[at] = w[c] * s[c] * (g[at] - sum_g[c] / count - x_hat * sum_g_xhat[c] / count);
      }
  CHECK_TENSOR(grad_input, from_vector(expected_input, {8, 6, 40, 40}), 1e-10, 1e-12);
  CHECK_TENSOR(grad_weight, from_vector(sum_g_xhat, {6}), 1e-12, 1e-10);
  CHECK_TENSOR(grad_bias, from_vector(sum_g, {6}), 1e-12, 1e-10);
}

TEST_CASE("parallel max pool backward") {
  // 64 planes of 32 x 32 in chunks of 25, a 3x3 window at stride 2 (overlapping: some positions get two grads).
  std::vector<std::int64_t> index_values(64 * 16 * 16);
  for (std::size_t k = 0; k < index_values.size(); ++k) {
    const std::int64_t oh = static_cast<std::int64_t>(k / 16 % 16), ow = static_cast<std::int64_t>(k % 16);
    const std::int64_t h = std::min<std::int64_t>(2 * oh + static_cast<std::int64_t>(k % 3), 31);
    const std::int64_t w = std::min<std::int64_t>(2 * ow + static_cast<std::int64_t>(k / 7 % 3), 31);
    index_values[k] = h * 32 + w;
  }
  const Tensor indices = from_vector(index_values, {4, 16, 16, 16});
  const Tensor grad = normal({4, 16, 16, 16}, DType::Float64, 18);
  const Tensor grad_input =
      same_bits_at_any_thread_count([&] { return max_pool_backward(grad, indices, {4, 16, 32, 32}, 2); });
  const std::vector<double> g = grad.to_vector<double>();
  std::vector<double> expected(4 * 16 * 32 * 32, 0.0);
  for (std::size_t k = 0; k < index_values.size(); ++k)
    expected[k / 256 * 1024 + static_cast<std::size_t>(index_values[k])] += g[k];
  CHECK_TENSOR(grad_input, from_vector(expected, {4, 16, 32, 32}), 0, 0);
}
