// Tensor itself: storage, views, creation, random, item/at/to_vector, casts.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "expect.hpp"
#include "refgrad/ops.hpp"
#include "torch_oracle.hpp"

using namespace refgrad;
using refgrad::testing::torch_eval1;
using refgrad::testing::torch_text;

TEST_SUITE("tensor") {

TEST_CASE("tensor from nested lists infers dtype and shape like torch.tensor") {
  Tensor floats = tensor({{1.0, 2.0}, {3.0, 4.0}});
  CHECK(floats.dtype() == DType::Float32);
  CHECK(floats.sizes() == Shape{2, 2});
  CHECK(floats.strides() == Shape{2, 1});
  CHECK(floats.at<double>({1, 0}) == 3.0);
  CHECK(floats.at<double>({-1, -1}) == 4.0);

  CHECK(tensor({1, 2, 3}).dtype() == DType::Int64);
  CHECK(tensor({true, false}).dtype() == DType::Bool);
  CHECK(tensor({1, 2.5}).dtype() == DType::Float32);  // any float makes it float
  CHECK(tensor({true, 2}).dtype() == DType::Int64);

  Tensor zero_dim = tensor(7.5);
  CHECK(zero_dim.dim() == 0);
  CHECK(zero_dim.numel() == 1);
  CHECK(zero_dim.item<double>() == 7.5);

  Tensor empty_list = tensor(NestedValues{});
  CHECK(empty_list.sizes() == Shape{0});
  CHECK(empty_list.dtype() == DType::Float32);

  CHECK(tensor({1.0, 2.0}, DType::Float64).dtype() == DType::Float64);
}

TEST_CASE("tensor rejects ragged nested lists") {
  CHECK_THROWS_WITH_AS(tensor({{1.0, 2.0}, {3.0}}), doctest::Contains("ragged"), Error);
  CHECK_THROWS_WITH_AS(tensor({{1.0, 2.0}, 3.0}), doctest::Contains("ragged"), Error);
  CHECK_THROWS_WITH_AS(tensor({1.0, {2.0}}), doctest::Contains("ragged"), Error);
}

TEST_CASE("creation: zeros ones full arange empty") {
  CHECK(zeros({2, 3}).to_vector<double>() == std::vector<double>(6, 0.0));
  CHECK(ones({2}, DType::Int64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1});
  CHECK(full({2}, 2.5).dtype() == DType::Float32);
  CHECK(full({2}, 3).dtype() == DType::Int64);
  CHECK(full({2}, true).dtype() == DType::Bool);
  CHECK(full({0, 4}, 1.0).numel() == 0);
  CHECK(zeros({}).dim() == 0);
  CHECK(zeros({}).numel() == 1);

  CHECK(arange(5).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(5).dtype() == DType::Int64);
  CHECK(arange(0.0, 1.0, 0.25).dtype() == DType::Float32);
  CHECK(arange(0.0, 1.0, 0.25).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5, 0, -2).to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 3, 1});
  CHECK_THROWS_WITH_AS(arange(0, 5, 0), "arange: step must be nonzero", Error);
  CHECK_THROWS_WITH_AS(arange(5, 0, 1), doctest::Contains("inconsistent with step sign"), Error);
  CHECK_THROWS_WITH_AS(empty({2, -1}), "empty: negative dimension in shape [2,-1]", Error);

  Tensor like = full_like(tensor({{1, 2}}), 9);
  CHECK(like.sizes() == Shape{1, 2});
  CHECK(like.dtype() == DType::Int64);
}

TEST_CASE("arange agrees with torch, including float steps") {
  CHECK_TENSOR(arange(0.0, 1.0, 0.1), torch_eval1("torch.arange(0.0, 1.0, 0.1)"));
  CHECK_TENSOR(arange(-3, 10, 4), torch_eval1("torch.arange(-3, 10, 4)"));
  CHECK_TENSOR(arange(1.5, -2.0, -0.5, DType::Float64), torch_eval1("torch.arange(1.5, -2.0, -0.5, dtype=torch.float64)"));
}

TEST_CASE("from_buffer copies, from_blob borrows") {
  std::vector<double> data = {1, 2, 3, 4, 5, 6};
  Tensor copied = from_buffer(data.data(), {2, 3}, DType::Float64);
  data[0] = 100;
  CHECK(copied.at<double>({0, 0}) == 1.0);

  auto owner = std::make_shared<std::vector<double>>(std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor borrowed = from_blob(owner, owner->data(), {3, 2}, {1, 3}, DType::Float64);  // a transposed view
  (*owner)[1] = 20;
  CHECK(borrowed.at<double>({1, 0}) == 20.0);
  CHECK(borrowed.to_vector<double>() == std::vector<double>{1, 4, 20, 5, 3, 6});
  CHECK_FALSE(borrowed.is_contiguous());

  CHECK(from_vector<bool>({true, false, true}, {3}).to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK_THROWS_WITH_AS(from_vector<double>({1, 2, 3}, {2, 2}), "from_vector: 3 values do not fill shape [2,2]",
                       Error);
}

TEST_CASE("views share storage and check their bounds") {
  Tensor base = arange(12, DType::Float32);
  Tensor view(base.storage(), {3, 2}, {4, 2}, 1, DType::Float32);
  CHECK(view.to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK_FALSE(view.is_contiguous());
  base.data_ptr<float>()[5] = -1;
  CHECK(view.at<double>({1, 0}) == -1.0);
  CHECK_THROWS_WITH_AS(Tensor(base.storage(), {4, 4}, {4, 1}, 0, DType::Float32),
                       doctest::Contains("needs 64 bytes but the storage has 48"), Error);
  CHECK_THROWS_WITH_AS(Tensor(base.storage(), {2}, {1, 1}, 0, DType::Float32), doctest::Contains("differ in length"),
                       Error);

  Tensor copy = view.contiguous();
  CHECK(copy.is_contiguous());
  CHECK_FALSE(copy.storage() == base.storage());
  CHECK(base.contiguous().is_same(base));  // already contiguous: no copy
  CHECK_FALSE(base.clone().storage() == base.storage());
}

TEST_CASE("item, at and data_ptr check their input") {
  CHECK_THROWS_WITH_AS(zeros({2}).item<double>(), "item: a Tensor with 2 elements cannot be converted to Scalar",
                       Error);
  CHECK_THROWS_WITH_AS(zeros({2}).at<double>({2}), "at: index 2 is out of bounds for dimension 0 with size 2", Error);
  CHECK_THROWS_WITH_AS(zeros({2}).at<double>({0, 0}), "at: index [0,0] for a tensor of shape [2]", Error);
  CHECK_THROWS_WITH_AS(zeros({2}).data_ptr<double>(), "data_ptr: tensor has dtype float32, asked for float64", Error);
  CHECK_THROWS_WITH_AS(Tensor().numel() == 1 && Tensor().item<double>() == 0, "item: tensor is undefined", Error);
  CHECK_FALSE(Tensor().defined());
  CHECK(zeros({2, 3}).size(-1) == 3);
  CHECK_THROWS_WITH_AS(zeros({2, 3}).size(2), "size: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                       Error);
  // A 0-d tensor has no dims to ask about (torch: "dimension specified as 0 but tensor has no dimensions").
  CHECK_THROWS_WITH_AS(zeros({}).size(0), "size: dimension specified as 0 but tensor has no dimensions", Error);
  CHECK_THROWS_WITH_AS(zeros({}).stride(-1), "stride: dimension specified as -1 but tensor has no dimensions", Error);
}

TEST_CASE("sizes that overflow int64 raise instead of wrapping") {
  const std::int64_t big = std::int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(numel_of({big, big}), "shape [1099511627776,1099511627776] has more elements than int64 can count",
                       Error);
  CHECK(numel_of({big, big, 0}) == 0);  // as ATen: a size-0 dim makes numel 0 whatever the others are
  CHECK_THROWS_WITH_AS(contiguous_strides({0, big, big}), doctest::Contains("its strides overflow int64"), Error);
  CHECK_THROWS_WITH_AS(empty({0, big, big}), doctest::Contains("its strides overflow int64"), Error);
  CHECK_THROWS_WITH_AS(multiply_or_fail(big, big, "repeat"), "repeat: 1099511627776 * 1099511627776 overflows int64",
                       Error);
  CHECK_THROWS_WITH_AS(add_or_fail(std::numeric_limits<std::int64_t>::max(), 1, "slice"),
                       "slice: 9223372036854775807 + 1 overflows int64", Error);
  CHECK(multiply_or_fail(-3, 4, "x") == -12);
  CHECK_THROWS_WITH_AS(arange(0.0, 1e300, 1.0), doctest::Contains("has more elements than int64 can count"), Error);
  // A view whose extent overflows is refused by the Tensor itself.
  const Tensor base = zeros({4});
  CHECK_THROWS_WITH_AS(Tensor(base.storage(), {2, 5}, {1, std::int64_t{1} << 62}, 0, DType::Float32),
                       doctest::Contains("spans more than 2^64 elements"), Error);
}

TEST_CASE("a fill value that the dtype cannot hold raises, as c10's checked conversion does") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // torch.full((2,), nan, dtype=torch.int64): "value cannot be converted to type int64_t without overflow"
  CHECK_THROWS_WITH_AS(full({2}, nan, DType::Int64), "full: value nan cannot be converted to type int64 without overflow",
                       Error);
  CHECK_THROWS_WITH_AS(full({2}, 1e300, DType::Float32),
                       "full: value 1e+300 cannot be converted to type float32 without overflow", Error);
  CHECK(std::isinf(full({1}, std::numeric_limits<double>::infinity(), DType::Float32).item<float>()));
  CHECK(full({1}, 9223372036854775808.0, DType::Int64).item<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  CHECK_THROWS_WITH_AS(Scalar(nan).to_int64(), "value nan cannot be converted to type int64 without overflow", Error);
  CHECK(Scalar(-2.7).to_int64() == -2);
  CHECK_THROWS_WITH_AS(Tensor().clone(), "clone: tensor is undefined", Error);
  CHECK_THROWS_WITH_AS(tensor({std::numeric_limits<double>::quiet_NaN()}, DType::Int64),
                       "value nan cannot be converted to type int64 without overflow", Error);
}

TEST_CASE("an empty view with huge strides is contiguous, without overflowing") {
  const std::int64_t big = std::int64_t{1} << 40;
  const Tensor empty_view(zeros({1}).storage(), {0, big, big}, {0, big, 1}, 0, DType::Float32);
  CHECK(empty_view.is_contiguous());  // torch: torch.empty(0, 2**40, 2**40, device="meta").is_contiguous()
  CHECK(empty_view.contiguous().numel() == 0);
}

TEST_CASE("memory limit: a tensor larger than the limit raises before it is allocated") {
  CHECK(default_memory_limit() > 0);
  CHECK(memory_limit() == default_memory_limit());
  {
    const MemoryLimitScope limit(1000);
    CHECK(memory_limit() == 1000);
    CHECK(zeros({250}).numel() == 250);  // exactly 1000 bytes fit
    CHECK_THROWS_WITH_AS(zeros({251}), "a float32 tensor of shape [251] would need 1004 bytes, more than the memory "
                                       "limit of 1000 bytes", Error);
    // Views count: an expand costs no memory, but every op that reads it loops over all of it.
    CHECK_THROWS_WITH_AS(expand(zeros({1}), {1000}), doctest::Contains("shape [1000] would need 4000 bytes"), Error);
    {
      const MemoryLimitScope inner(std::size_t{8} << 30);
      CHECK_THROWS_WITH_AS(empty({std::int64_t{1} << 31}, DType::Float64),
                           "a float64 tensor of shape [2147483648] would need 17179869184 bytes (16.0 GiB), more "
                           "than the memory limit of 8589934592 bytes (8.0 GiB)",
                           Error);
    }
    CHECK(memory_limit() == 1000);
  }
  CHECK(memory_limit() == default_memory_limit());
}

TEST_CASE("a RoundingNoiseScope moves the results of the primitives that round, by up to eps, and no others") {
  const Tensor x = tensor({1.0, 2.0, 3.0, -4.0}, DType::Float64), ones4 = ones({4}, DType::Float64);
  const double eps = 0x1p-24;
  // 1 - mean(1) cancels exactly; with rounding noise it is about eps, as a float32 kernel's rounding leaves it
  CHECK(sum(sub(ones4, mean(ones4))).item<double>() == 0.0);
  std::vector<double> noisy_sum, noisy_less, products;
  {
    const RoundingNoiseScope noise(7, eps);
    const double moved = sum(sub(ones4, mean(ones4))).item<double>();
    CHECK(moved != 0.0);
    CHECK(std::abs(moved) <= 16 * eps);
    noisy_sum = add(x, x).to_vector<double>();
    // moving values is not rounding: views, copies and indexing are left alone
    CHECK(equal(transpose(reshape(x, {2, 2}), 0, 1), transpose(reshape(x, {2, 2}), 0, 1).contiguous()));
    CHECK(equal(cat({x, x}, 0), tensor({1.0, 2.0, 3.0, -4.0, 1.0, 2.0, 3.0, -4.0}, DType::Float64)));
    CHECK(equal(index_select(x, 0, tensor({3, 0})), tensor({-4.0, 1.0}, DType::Float64)));
    CHECK(equal(add(tensor({1, 2}), tensor({3, 4})), tensor({4, 6})));  // integers are exact
    products = mm(reshape(x, {2, 2}), reshape(x, {2, 2})).to_vector<double>();
  }
  {
    const RoundingNoiseScope noise(7, eps / 16);  // the same draws, 16 times smaller
    noisy_less = add(x, x).to_vector<double>();
  }
  const std::vector<double> exact = add(x, x).to_vector<double>();
  int moved = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    CHECK(std::abs(noisy_sum[i] - exact[i]) <= std::abs(exact[i]) * eps);
    CHECK((noisy_less[i] - exact[i]) * 16 == doctest::Approx(noisy_sum[i] - exact[i]).epsilon(1e-6));
    moved += noisy_sum[i] != exact[i];
  }
  CHECK(moved == 4);
  const std::vector<double> exact_products = mm(reshape(x, {2, 2}), reshape(x, {2, 2})).to_vector<double>();
  CHECK(products != exact_products);
  for (std::size_t i = 0; i < products.size(); ++i)
    CHECK(std::abs(products[i] - exact_products[i]) <= std::abs(exact_products[i]) * eps);
  // outside any scope, nothing moves: the same bits as before
  CHECK(equal(add(x, x), tensor({2.0, 4.0, 6.0, -8.0}, DType::Float64)));
}

TEST_CASE("a RoundingNoiseScope with an absolute part moves numbers near 0 too, by up to it") {
  // float16's numbers near 0 are its smallest subnormal (2^-24) apart: rounding there is off by up to
  // 2^-25 whatever the number, 0 included, where the relative part alone moves nothing
  CHECK(unit_roundoff(DType::Float16) == 0x1p-11);
  CHECK(smallest_subnormal(DType::Float16) == 0x1p-24);
  CHECK(unit_roundoff(DType::Float32) == 0x1p-24);
  CHECK(smallest_subnormal(DType::Float32) == 0x1p-149);
  CHECK(unit_roundoff(DType::BFloat16) == 0x1p-8);
  CHECK(unit_roundoff(DType::ComplexFloat) == 0x1p-24);
  CHECK(unit_roundoff(DType::Int64) == 0.0);
  const Tensor x = tensor({0.0, 6e-9, 1.0, -2.0}, DType::Float64);
  const double absolute = 0x1p-25;
  std::vector<double> far, near, relative_only;
  {
    const RoundingNoiseScope noise(3, 0x1p-11, absolute);
    far = with_rounding_noise(x.clone()).to_vector<double>();
  }
  {
    const RoundingNoiseScope noise(3, 0x1p-11 / 16, absolute / 16);  // the same draws, 16 times smaller
    near = with_rounding_noise(x.clone()).to_vector<double>();
  }
  {
    const RoundingNoiseScope noise(3, 0x1p-11);  // the relative part: the same draws as before
    relative_only = with_rounding_noise(x.clone()).to_vector<double>();
  }
  const std::vector<double> exact = x.to_vector<double>();
  CHECK(relative_only[0] == 0.0);
  for (std::size_t i = 0; i < exact.size(); ++i) {
    CHECK(far[i] != exact[i]);
    CHECK(std::abs(far[i] - exact[i]) <= std::abs(exact[i]) * 0x1p-11 + absolute);
    CHECK(std::abs(far[i] - relative_only[i]) <= absolute);
    CHECK((near[i] - exact[i]) * 16 == doctest::Approx(far[i] - exact[i]).epsilon(1e-6));
  }
}

TEST_CASE("casts convert like torch, NaN to int included") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({-2.7, -0.5, 0.0, 0.5, 2.7, 1e30}, DType::Float64);
  CHECK_TENSOR(x.to(DType::Int64), torch_eval1("a.to(torch.int64)", {x}));
  CHECK_TENSOR(x.to(DType::Bool), torch_eval1("a.to(torch.bool)", {x}));
  CHECK_TENSOR(x.to(DType::Float32), torch_eval1("a.to(torch.float32)", {x}));
  CHECK_TENSOR(tensor({true, false}).to(DType::Float32), tensor({1.0, 0.0}));
  Tensor with_nan = tensor({nan, 1.0}, DType::Float64);
  CHECK(with_nan.to(DType::Bool).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(to(x, DType::Float64).is_same(x));  // same dtype: no copy
}

TEST_CASE("random: seeded, reproducible, with the right moments") {
  Generator g1(42), g2(42), g3(43);
  Tensor a = randn({1000}, g1), b = randn({1000}, g2), c = randn({1000}, g3);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());

  Generator g(7);
  const auto normal = randn({20000}, g, DType::Float64).to_vector<double>();
  double mean = 0, square = 0;
  for (double v : normal) mean += v / normal.size(), square += v * v / normal.size();
  CHECK(std::abs(mean) < 0.03);               // 4 sigma of the sample mean
  CHECK(std::abs(square - mean * mean - 1) < 0.05);

  const auto uniform = rand({20000}, g, DType::Float64).to_vector<double>();
  double umean = 0;
  for (double v : uniform) {
    CHECK(v >= 0.0);
    CHECK(v < 1.0);
    umean += v / uniform.size();
  }
  CHECK(std::abs(umean - 0.5) < 0.01);

  const auto coin = bernoulli({20000}, 0.3, g).to_vector<double>();
  double ones_fraction = 0;
  for (double v : coin) {
    CHECK((v == 0.0 || v == 1.0));
    ones_fraction += v / coin.size();
  }
  CHECK(std::abs(ones_fraction - 0.3) < 0.015);
  CHECK(bernoulli(tensor({0.0, 1.0, 1.0}), g).to_vector<double>() == std::vector<double>{0, 1, 1});
  CHECK_THROWS_WITH_AS(bernoulli({2}, 1.5, g), "bernoulli: expected 0 <= p <= 1, but got p=1.5", Error);
  CHECK_THROWS_WITH_AS(randn({2}, g, DType::Int64), "randn: expected a floating point dtype, got int64", Error);
}

TEST_CASE("torch oracle round-trips values exactly") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor({nan, inf, -inf, 1e-310, 0.1}, DType::Float64);
  const auto back = torch_eval1("a", {x}).to_vector<double>();
  CHECK(std::isnan(back[0]));
  CHECK(back[1] == inf);
  CHECK(back[2] == -inf);
  CHECK(back[3] == 1e-310);
  CHECK(back[4] == 0.1);
  CHECK(torch_text("a.dtype", {x}) == "torch.float64");
  CHECK_THROWS_WITH_AS(refgrad::testing::torch_eval("a + b", {zeros({2}), zeros({3})}),
                       doctest::Contains("torch raised for `a + b`: RuntimeError: The size of tensor a (2)"), Error);
}

}  // TEST_SUITE

TEST_SUITE("tensor") {
TEST_CASE("Scalar") {
  CHECK(Scalar(2.5).is_floating_point());
  CHECK(Scalar(3).is_integral());
  CHECK(Scalar(true).is_boolean());
  CHECK(Scalar(std::int64_t{-4}).natural_dtype() == DType::Int64);
  CHECK(Scalar(1.5f).natural_dtype() == DType::Float64);
  CHECK(Scalar(2.9).to_int64() == 2);
  CHECK(Scalar(0.0).to_bool() == false);
  CHECK(Scalar(1.0).repr() == "1.0");
  CHECK(Scalar(0.1).repr() == "0.1");
  CHECK(Scalar(-7).repr() == "-7");
  CHECK(Scalar(false).repr() == "False");
  CHECK(Scalar(1e300).repr() == "1e+300");
}
}  // TEST_SUITE

TEST_SUITE("tensor") {
TEST_CASE("allocate_cpu_buffer") {
  release_cached_buffers();
  CHECK(cached_buffer_bytes() == 0);
  const void* first = nullptr;
  {
    Tensor large = empty({1 << 19}, DType::Float32);  // 2 MiB: cached when freed
    first = large.raw_data();
    CHECK(reinterpret_cast<std::uintptr_t>(first) % 64 == 0);
  }
  CHECK(cached_buffer_bytes() == (std::size_t{2} << 20));
  Tensor again = zeros({1 << 19}, DType::Float32);  // the same rounded size: reused...
  CHECK(again.raw_data() == first);
  CHECK(cached_buffer_bytes() == 0);
  CHECK(again.to_vector<float>() == std::vector<float>(1 << 19, 0.0f));  // ...and still written in full
  {
    Tensor small = empty({16}, DType::Float64);  // small buffers go straight back to malloc
    CHECK(reinterpret_cast<std::uintptr_t>(small.raw_data()) % 64 == 0);
  }
  CHECK(cached_buffer_bytes() == 0);
  { Tensor other = empty({3 << 18}, DType::Float32); }  // 3 MiB
  CHECK(cached_buffer_bytes() == (std::size_t{3} << 20));
  release_cached_buffers();
  CHECK(cached_buffer_bytes() == 0);
}
}  // TEST_SUITE
