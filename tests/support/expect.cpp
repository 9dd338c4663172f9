#include "expect.hpp"

#include <cmath>

namespace refgrad::testing {

std::string differences(const Tensor& actual, const Tensor& expected, double rtol, double atol, bool check_dtype) {
  if (!actual.defined() || !expected.defined()) return actual.defined() ? "expected is undefined" : "actual is undefined";
  if (check_dtype && actual.dtype() != expected.dtype())
    return concat("dtype ", dtype_name(actual.dtype()), ", expected ", dtype_name(expected.dtype()));
  if (actual.sizes() != expected.sizes())
    return concat("shape ", str(actual.sizes()), ", expected ", str(expected.sizes()));
  const bool exact = !is_floating_point(actual.dtype()) && !is_floating_point(expected.dtype());
  if (exact) {
    const auto a = actual.to_vector<std::int64_t>(), e = expected.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != e[i]) return concat("element ", i, " (flat) is ", a[i], ", expected ", e[i]);
    return "";
  }
  const auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    const bool ok = std::isinf(e[i]) ? a[i] == e[i] : std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]);
    if (!ok) {
      std::ostringstream out;
      out.precision(17);
      out << "element " << i << " (flat) of shape " << str(actual.sizes()) << " is " << a[i] << ", expected " << e[i]
          << " (rtol " << rtol << ", atol " << atol << ")";
      return out.str();
    }
  }
  return "";
}

}  // namespace refgrad::testing
