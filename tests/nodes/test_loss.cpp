// Suite "nodes", the loss group. reduction is at::Reduction's int: 0 none,
// 1 mean, 2 sum. The torch cases go through torch.nn.functional, as models do.
#include <cmath>
#include <limits>
#include <string>

#include "node_test.hpp"

using namespace refgrad;
using namespace refgrad::testing;

namespace {

constexpr std::int64_t kNone = 0, kMean = 1, kSum = 2;

// Runs `call` (a torch.nn.functional loss of x = a.requires_grad_() and the
// other inputs b, c, ...; target t = b.requires_grad_() where `target_grad`),
// checks the node's name and returns, in this order: the grad it fed
// (deterministic, of the output's shape), then the _saved_* values named in
// `fields` (None as an empty tensor, flagged by the field `<name> is None`
// that follows it), then torch's grads of x (and t).
std::vector<Tensor> torch_loss(const std::string& node, const std::string& call, const std::vector<std::string>& fields,
                               const std::vector<Tensor>& inputs, bool target_grad = false) {
  std::string code = "x = a.requires_grad_()\n";
  code += target_grad ? "t = b.requires_grad_()\n" : "t = b\n";
  code += "out = " + call + "\nfn = out.grad_fn\nassert fn.name() == '" + node + "', fn.name()\n";
  code += "g = torch.linspace(-1.5, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)\n";
  code += "def field(v):\n"
          "    if v is None: return (torch.tensor([]), True)\n"
          "    if isinstance(v, int) and v >= 2**63: v -= 2**64  # SymInt ignore_index reads back unsigned\n"
          "    return (v, False)\n";
  code += "saved = []\n";
  for (const std::string& name : fields) code += "saved += field(fn._saved_" + name + ")\n";
  code += std::string("result = (g, *saved, *torch.autograd.grad(out, ") + (target_grad ? "(x, t)" : "(x,)") +
          ", g))\n";
  return torch_exec(code, inputs);
}

FieldValue optional_tensor(const std::vector<Tensor>& r, std::size_t at) {
  return r[at + 1].item<bool>() ? FieldValue{None{}} : FieldValue{r[at]};
}

// The CTC loss of each sequence, spelled out with L0 primitives: the alpha recursion over the extended
// target l' (blanks around and between the labels), alpha[t, s] = lp[t, l'(s)] + logsumexp(alpha[t-1, s],
// alpha[t-1, s-1], alpha[t-1, s-2] where l'(s) != l'(s-2)), and -log p = -logsumexp(alpha[T-1] at S-1, S-2).
// log_probs [T, batch, classes]; one label list per sequence (at least one label each).
Tensor ctc_loss_reference(const Tensor& log_probs, const std::vector<IntList>& targets, const IntList& input_lengths,
                          std::int64_t blank) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  TensorList losses;
  for (std::size_t b = 0; b < targets.size(); ++b) {
    IntList prime = {blank};
    for (std::int64_t label : targets[b]) prime.insert(prime.end(), {label, blank});
    const auto s_len = static_cast<std::int64_t>(prime.size());
    std::vector<bool> skip(prime.size(), false);
    for (std::size_t s = 2; s < prime.size(); ++s) skip[s] = prime[s] != prime[s - 2];
    const Tensor emit = from_vector(prime, {s_len});
    const Tensor skip_ok = from_vector(std::vector<std::uint8_t>(skip.begin(), skip.end()), {s_len}).to(DType::Bool);
    const Tensor lp = select(log_probs, 1, static_cast<std::int64_t>(b));
    std::vector<double> start(prime.size(), neg_inf);
    start[0] = start[1] = 0;
    Tensor alpha = add(from_vector(start, {s_len}), index_select(select(lp, 0, 0), 0, emit));
    for (std::int64_t t = 1; t < input_lengths[b]; ++t) {
      const Tensor stay = alpha, step = constant_pad_nd(narrow(alpha, 0, 0, s_len - 1), {1, 0}, neg_inf);
      const Tensor jump = where(skip_ok, constant_pad_nd(narrow(alpha, 0, 0, s_len - 2), {2, 0}, neg_inf), neg_inf);
      alpha = add(logsumexp(stack({stay, step, jump}), {0}), index_select(select(lp, 0, t), 0, emit));
    }
    losses.push_back(neg(logsumexp(narrow(alpha, 0, s_len - 2, 2), {0})));
  }
  return stack(losses);
}

// ATen's CTC grad is exact only after log_softmax's backward (see CtcLossBackward0): the node's grad, through
// LogSoftmaxBackward0 over the classes, against the numerical VJP of loss(log_softmax(logits)) at logits =
// log_probs (log_probs being normalized, log_softmax(log_probs) = log_probs).
void check_through_log_softmax(const Grads& node_out, const Forward& loss, const Tensor& log_probs, const Tensor& g) {
  REQUIRE(node_out[0].has_value());
  const Tensor through = *call_node("LogSoftmaxBackward0", {*node_out[0]}, {true},
                                    Saved{{"dim", std::int64_t{2}}, {"self_scalar_type", DType::Float64},
                                          {"result", log_probs}})[0];
  auto forward = [&](const std::vector<Tensor>& in) { return loss({log_softmax(in[0], 2)}); };
  CHECK_TENSOR(through, numerical_vjp(forward, {log_probs}, 0, g), kGradcheckRtol, kGradcheckAtol);
}

}  // namespace

TEST_SUITE("nodes") {

TEST_CASE("NllLossBackward0") {
  const Tensor x = random64({4, 3}, 70), target = tensor({2, 0, 1, 2}, DType::Int64),
               weight = tensor({0.5, 2.0, 1.5}, DType::Float64);
  // ignore_index 1 drops the third row; total_weight = w[2] + w[0] + w[2].
  const Tensor total_weight = tensor(3.5, DType::Float64);
  const Saved saved = {{"ignore_index", std::int64_t{1}}, {"reduction", kMean}, {"self", x},
                       {"target", target},                 {"weight", weight},   {"total_weight", total_weight}};

  SUBCASE("finite differences, with a weight and an ignored target") {
    const Tensor g = random64({}, 71);
    const Grads out = call_node("NllLossBackward0", {g}, {true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor picked = squeeze(gather(in[0], 1, unsqueeze(target, 1)), 1);
      const Tensor kept = to(ne(target, 1), DType::Float64);
      return div(neg(sum(mul(mul(picked, index(weight, {target})), kept))), total_weight);
    };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("NllLossBackward0", {random64({}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("NllLossBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: reduction, weight, ignore_index, total_weight, a 1-d self") {
    const std::vector<std::string> calls = {
        "F.nll_loss(x, t)",
        "F.nll_loss(x, t, reduction='sum')",
        "F.nll_loss(x, t, reduction='none')",
        "F.nll_loss(x, t, weight=c, ignore_index=1)",
        "F.nll_loss(x, t, weight=c, ignore_index=2, reduction='sum')",
        "F.nll_loss(x, t, weight=c, ignore_index=0, reduction='none')",
        "F.nll_loss(x, torch.ones_like(t), ignore_index=1)",  // all ignored: total_weight 0, grad 0
        "F.nll_loss(x, t, weight=torch.zeros_like(c))",      // total_weight 0 with kept targets: NaN
    };
    const Tensor x1 = random64({3}, 72), target1 = tensor(2, DType::Int64);  // a 1-d self, a 0-d target
    for (const std::string& call : calls) {
      for (const auto& inputs : {std::pair{x, target}, std::pair{x1, target1}}) {
        const Tensor& self = inputs.first;
        CAPTURE(call);
        CAPTURE(str(self.sizes()));
        const auto r = torch_loss("NllLossBackward0", call,
                                  {"ignore_index", "reduction", "self", "target", "weight", "total_weight"},
                                  {self, inputs.second, weight});
        const Saved from_torch = {{"ignore_index", r[1].item<std::int64_t>()},
                                  {"reduction", r[3].item<std::int64_t>()},
                                  {"self", r[5]},
                                  {"target", r[7]},
                                  {"weight", optional_tensor(r, 9)},
                                  {"total_weight", r[11]}};
        const Grads out = call_node("NllLossBackward0", {r[0]}, {true}, from_torch);
        CHECK_TENSOR(*out[0], r[13]);
      }
    }
  }
  SUBCASE("errors") {
    const Tensor g = random64({}, 1);
    Saved bad = saved;
    bad["target"] = tensor({2, 0, 3, 2}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: target 3 is out of bounds [0, 3)", Error);
    bad["target"] = tensor({2, 0, 1}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: expected an int64 target of shape [4] for self [4,3], got int64 [3]",
                         Error);
    bad = saved;
    bad["reduction"] = std::int64_t{3};
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: reduction must be 0 (none), 1 (mean) or 2 (sum), got 3", Error);
    bad["reduction"] = kNone;
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: with reduction none the grad [] must have the target's shape [4]", Error);
    bad = saved;
    bad["self"] = random64({2, 3, 2, 2}, 1);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: self must be [C] or [N, C], got [2,3,2,2]", Error);
    bad = saved;  // targets 0 and 2 would index past it
    bad["weight"] = tensor({0.5, 2.0}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: weight should be defined either for all 3 classes or no classes, got "
                         "weight of shape [2]",
                         Error);
    bad = saved;
    bad["total_weight"] = tensor({3.5, 1.0}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {g}, {true}, bad),
                         "NllLossBackward0: total_weight must have a single element, got shape [2]", Error);
    CHECK_THROWS_WITH_AS(call_node("NllLossBackward0", {random64({4}, 1)}, {true}, saved),
                         "NllLossBackward0: expected a single element grad, got [4]", Error);
  }
  SUBCASE("against torch: a grad and total_weight of shape [1]; no classes, every target ignored") {
    const Tensor x1 = random64({3}, 73);
    const Tensor expected = torch_eval1(
        "torch.ops.aten.nll_loss_backward(a, b, torch.tensor(2), None, 1, -100, c)",
        {tensor({1.5}, DType::Float64), x1, tensor({2.0}, DType::Float64)});
    const Saved one_element = {{"ignore_index", std::int64_t{-100}}, {"reduction", kMean}, {"self", x1},
                               {"target", tensor(2, DType::Int64)}, {"weight", None{}},
                               {"total_weight", tensor({2.0}, DType::Float64)}};
    CHECK_TENSOR(*call_node("NllLossBackward0", {tensor({1.5}, DType::Float64)}, {true}, one_element)[0], expected);
    const Tensor no_classes = zeros({2, 0}, DType::Float64), ignored = full({2}, -100, DType::Int64);
    const Tensor expected_empty = torch_eval1("torch.ops.aten.nll_loss_backward(a, b, c, None, 2, -100, a)",
                                              {tensor(1.0, DType::Float64), no_classes, ignored});
    const Saved empty = {{"ignore_index", std::int64_t{-100}}, {"reduction", kSum}, {"self", no_classes},
                         {"target", ignored}, {"weight", None{}}, {"total_weight", tensor(0.0, DType::Float64)}};
    CHECK_TENSOR(*call_node("NllLossBackward0", {tensor(1.0, DType::Float64)}, {true}, empty)[0], expected_empty);
  }
}

TEST_CASE("NllLoss2DBackward0") {
  const Tensor x = random64({2, 3, 2, 2}, 80);
  const Tensor target = tensor({{{0, 2}, {1, 1}}, {{2, 2}, {0, 1}}}, DType::Int64);
  const Tensor weight = tensor({0.5, 2.0, 1.5}, DType::Float64);

  SUBCASE("finite differences, sum with a weight and an ignored class") {
    const Tensor g = random64({}, 81);
    const Saved saved = {{"ignore_index", std::int64_t{0}}, {"reduction", kSum},
                         {"self", x},
                         {"target", target},
                         {"weight", weight},
                         {"total_weight", tensor(13.0, DType::Float64)}};
    const Grads out = call_node("NllLoss2DBackward0", {g}, {true}, saved);
    auto forward = [&](const std::vector<Tensor>& in) {
      const Tensor picked = squeeze(gather(in[0], 1, unsqueeze(target, 1)), 1);
      const Tensor kept = to(ne(target, 0), DType::Float64);
      return neg(sum(mul(mul(picked, index(weight, {target})), kept)));
    };
    check_against_finite_differences(out, 0, forward, {x}, g);
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"ignore_index", std::int64_t{-100}}, {"reduction", kNone}, {"self", x},
                         {"target", target}, {"weight", None{}}, {"total_weight", tensor(0.0, DType::Float64)}};
    CHECK(call_node("NllLoss2DBackward0", {random64({2, 2, 2}, 1)}, {true}, saved)[0]->sizes() == Shape{2, 3, 2, 2});
    CHECK_FALSE(call_node("NllLoss2DBackward0", {random64({2, 2, 2}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("NllLoss2DBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: [N, C, H, W], reductions, weight, ignore_index") {
    const std::vector<std::string> calls = {
        "F.nll_loss(x, t)",
        "F.nll_loss(x, t, weight=c, ignore_index=2)",
        "F.nll_loss(x, t, weight=c, reduction='sum')",
        "F.nll_loss(x, t, ignore_index=1, reduction='none')",
        "F.nll_loss(x, t, weight=c, ignore_index=0)",
    };
    for (const std::string& call : calls) {
      CAPTURE(call);
      const auto r = torch_loss("NllLoss2DBackward0", call,
                                {"ignore_index", "reduction", "self", "target", "weight", "total_weight"},
                                {x, target, weight});
      const Saved from_torch = {{"ignore_index", r[1].item<std::int64_t>()},
                                {"reduction", r[3].item<std::int64_t>()},
                                {"self", r[5]},
                                {"target", r[7]},
                                {"weight", optional_tensor(r, 9)},
                                {"total_weight", r[11]}};
      CHECK_TENSOR(*call_node("NllLoss2DBackward0", {r[0]}, {true}, from_torch)[0], r[13]);
    }
  }
  SUBCASE("errors") {
    const Saved saved = {{"ignore_index", std::int64_t{-100}}, {"reduction", kMean}, {"self", random64({4, 3}, 1)},
                         {"target", tensor({0, 1, 2, 0}, DType::Int64)}, {"weight", None{}},
                         {"total_weight", tensor(4.0, DType::Float64)}};
    CHECK_THROWS_WITH_AS(call_node("NllLoss2DBackward0", {random64({}, 1)}, {true}, saved),
                         "NllLoss2DBackward0: self must be [N, C, H, W], got [4,3]", Error);
  }
}

TEST_CASE("MseLossBackward0") {
  const Tensor x = random64({3, 4}, 90), y = random64({3, 4}, 91);

  SUBCASE("finite differences, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{3, 4} : Shape{}, 92);
      const Grads out =
          call_node("MseLossBackward0", {g}, {true, true}, Saved{{"reduction", reduction}, {"self", x}, {"target", y}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor loss = square(sub(in[0], in[1]));
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x, y}, g);
      check_against_finite_differences(out, 1, forward, {x, y}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"reduction", kMean}, {"self", x}, {"target", y}};
    const Grads out = call_node("MseLossBackward0", {random64({}, 1)}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 4});
    CHECK_FALSE(call_node("MseLossBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch, each reduction, float32 stays float32") {
    for (const std::string reduction : {"mean", "sum", "none"}) {
      for (const DType dtype : {DType::Float64, DType::Float32}) {
        CAPTURE(reduction);
        const auto r = torch_loss("MseLossBackward0", "F.mse_loss(x, t, reduction='" + reduction + "')",
                                  {"reduction", "self", "target"}, {to(x, dtype), to(y, dtype)}, true);
        const Grads out = call_node("MseLossBackward0", {r[0]}, {true, true},
                                    Saved{{"reduction", r[1].item<std::int64_t>()}, {"self", r[3]}, {"target", r[5]}});
        CHECK_TENSOR(*out[0], r[7], 1e-6, 1e-6);
        CHECK_TENSOR(*out[1], r[8], 1e-6, 1e-6);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("MseLossBackward0", {random64({}, 1)}, {true, true},
                                   Saved{{"reduction", std::int64_t{-1}}, {"self", x}, {"target", y}}),
                         "MseLossBackward0: reduction must be 0 (none), 1 (mean) or 2 (sum), got -1", Error);
  }
}

TEST_CASE("BinaryCrossEntropyBackward0") {
  const Tensor p = sigmoid(random64({3, 4}, 100)), y = sigmoid(random64({3, 4}, 101)),
               w = add(sigmoid(random64({3, 4}, 102)), Scalar(0.5));

  SUBCASE("finite differences, with a weight, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{3, 4} : Shape{}, 103);
      const Grads out = call_node("BinaryCrossEntropyBackward0", {g}, {true, true},
                                  Saved{{"reduction", reduction}, {"self", p}, {"target", y}, {"weight", w}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor one_minus = add(neg(in[0]), Scalar(1));
        const Tensor loss = mul(neg(add(mul(in[1], log(in[0])), mul(add(neg(in[1]), Scalar(1)), log(one_minus)))), w);
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {p, y}, g);
      check_against_finite_differences(out, 1, forward, {p, y}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"reduction", kSum}, {"self", p}, {"target", y}, {"weight", None{}}};
    const Grads out = call_node("BinaryCrossEntropyBackward0", {random64({}, 1)}, {true, false}, saved);
    CHECK(out[0].has_value());
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("BinaryCrossEntropyBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch: weight, reductions, self at 0 and 1 (the 1e-12 clamp, logit's infinities)") {
    const Tensor edge = tensor({{0.0, 1.0, 0.5, 1e-14}, {0.25, 0.75, 1.0 - 1e-9, 0.0}, {0.1, 0.9, 0.3, 0.6}},
                               DType::Float64);
    const Tensor edge_target = tensor({{0.0, 1.0, 0.5, 0.0}, {1.0, 0.0, 1.0, 0.3}, {0.2, 0.8, 0.0, 1.0}},
                                      DType::Float64);
    const std::vector<std::string> calls = {
        "F.binary_cross_entropy(x, t)",
        "F.binary_cross_entropy(x, t, weight=c, reduction='sum')",
        "F.binary_cross_entropy(x, t, weight=c[0], reduction='none')",
    };
    for (const auto& inputs : {std::pair{p, y}, std::pair{edge, edge_target}}) {
      for (const std::string& call : calls) {
        CAPTURE(call);
        const auto r = torch_loss("BinaryCrossEntropyBackward0", call, {"reduction", "self", "target", "weight"},
                                  {inputs.first, inputs.second, w}, true);
        const Grads out = call_node("BinaryCrossEntropyBackward0", {r[0]}, {true, true},
                                    Saved{{"reduction", r[1].item<std::int64_t>()},
                                          {"self", r[3]},
                                          {"target", r[5]},
                                          {"weight", optional_tensor(r, 7)}});
        CHECK_TENSOR(*out[0], r[9]);
        CHECK_TENSOR(*out[1], r[10]);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("BinaryCrossEntropyBackward0", {random64({}, 1)}, {true, true},
                                   Saved{{"reduction", std::int64_t{7}}, {"self", p}, {"target", y},
                                         {"weight", None{}}}),
                         "BinaryCrossEntropyBackward0: reduction must be 0 (none), 1 (mean) or 2 (sum), got 7", Error);
  }
}

TEST_CASE("BinaryCrossEntropyWithLogitsBackward0") {
  const Tensor x = mul(random64({3, 4}, 110), Scalar(3)), y = sigmoid(random64({3, 4}, 111)),
               w = add(sigmoid(random64({4}, 112)), Scalar(0.5)), pw = add(sigmoid(random64({4}, 113)), Scalar(1));

  SUBCASE("finite differences, with weight and pos_weight, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{3, 4} : Shape{}, 114);
      const Grads out =
          call_node("BinaryCrossEntropyWithLogitsBackward0", {g}, {true, true},
                    Saved{{"pos_weight", pw}, {"reduction", reduction}, {"self", x}, {"target", y}, {"weight", w}});
      auto forward = [&](const std::vector<Tensor>& in) {
        // -w * (pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x)))
        const Tensor s = sigmoid(in[0]);
        const Tensor loss = mul(neg(add(mul(mul(pw, in[1]), log(s)), mul(add(neg(in[1]), Scalar(1)),
                                                                          log(add(neg(s), Scalar(1)))))), w);
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x, y}, g);
      check_against_finite_differences(out, 1, forward, {x, y}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"pos_weight", None{}}, {"reduction", kMean}, {"self", x}, {"target", y}, {"weight", None{}}};
    const Grads out = call_node("BinaryCrossEntropyWithLogitsBackward0", {random64({}, 1)}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{3, 4});
    CHECK_FALSE(call_node("BinaryCrossEntropyWithLogitsBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch: weight, pos_weight (each without the other), reductions, large logits") {
    const Tensor large = tensor({{-40.0, 40.0, 0.0, 700.0}, {-700.0, 1.0, -1.0, 20.0}, {3.0, -3.0, 0.5, -0.5}},
                                DType::Float64);
    const std::vector<std::string> calls = {
        "F.binary_cross_entropy_with_logits(x, t)",
        "F.binary_cross_entropy_with_logits(x, t, weight=c, reduction='sum')",
        "F.binary_cross_entropy_with_logits(x, t, pos_weight=d, reduction='none')",
        "F.binary_cross_entropy_with_logits(x, t, weight=c, pos_weight=d)",
    };
    for (const Tensor& self : {x, large}) {
      for (const std::string& call : calls) {
        CAPTURE(call);
        const auto r = torch_loss("BinaryCrossEntropyWithLogitsBackward0", call,
                                  {"pos_weight", "reduction", "self", "target", "weight"}, {self, y, w, pw}, true);
        const Grads out = call_node("BinaryCrossEntropyWithLogitsBackward0", {r[0]}, {true, true},
                                    Saved{{"pos_weight", optional_tensor(r, 1)},
                                          {"reduction", r[3].item<std::int64_t>()},
                                          {"self", r[5]},
                                          {"target", r[7]},
                                          {"weight", optional_tensor(r, 9)}});
        CHECK_TENSOR(*out[0], r[11]);
        CHECK_TENSOR(*out[1], r[12]);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(
        call_node("BinaryCrossEntropyWithLogitsBackward0", {random64({}, 1)}, {true, true},
                  Saved{{"pos_weight", None{}}, {"reduction", std::int64_t{5}}, {"self", x}, {"target", y},
                        {"weight", None{}}}),
        "BinaryCrossEntropyWithLogitsBackward0: reduction must be 0 (none), 1 (mean) or 2 (sum), got 5", Error);
    CHECK_THROWS_AS(call_node("BinaryCrossEntropyWithLogitsBackward0", {random64({}, 1)}, {true, true},
                              Saved{{"pos_weight", random64({3}, 1)}, {"reduction", kMean}, {"self", x},
                                    {"target", y}, {"weight", None{}}}),
                    Error);
  }
}

// Smooth L1 and Huber: x = self - target in each region, exactly at the region
// ends |x| == beta (delta), where finite differences straddle two formulas, and at 0.
Tensor piecewise_self() { return tensor({-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 0.75}, DType::Float64); }
Tensor piecewise_target() { return tensor({0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.25}, DType::Float64); }

TEST_CASE("SmoothL1LossBackward0") {
  const Tensor x = random64({2, 3}, 120), y = random64({2, 3}, 121);

  SUBCASE("finite differences away from the kinks, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{2, 3} : Shape{}, 122);
      const Grads out = call_node("SmoothL1LossBackward0", {g}, {true, true},
                                  Saved{{"beta", 0.7}, {"reduction", reduction}, {"self", x}, {"target", y}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor d = abs(sub(in[0], in[1]));
        const Tensor loss = where(lt(d, 0.7), div(mul(square(d), Scalar(0.5)), Scalar(0.7)), sub(d, Scalar(0.35)));
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x, y}, g);
      check_against_finite_differences(out, 1, forward, {x, y}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"beta", 1.0}, {"reduction", kMean}, {"self", x}, {"target", y}};
    const Grads out = call_node("SmoothL1LossBackward0", {random64({}, 1)}, {true, false}, saved);
    CHECK(out[0]->sizes() == Shape{2, 3});
    CHECK_FALSE(out[1].has_value());
    CHECK_FALSE(call_node("SmoothL1LossBackward0", {std::nullopt}, {true, true}, saved)[0].has_value());
  }
  SUBCASE("against torch, at the kinks, each reduction") {
    for (const std::string call : {"F.smooth_l1_loss(x, t)", "F.smooth_l1_loss(x, t, beta=0.5, reduction='sum')",
                                   "F.smooth_l1_loss(x, t, beta=2.0, reduction='none')"}) {
      CAPTURE(call);
      const auto r = torch_loss("SmoothL1LossBackward0", call, {"beta", "reduction", "self", "target"},
                                {piecewise_self(), piecewise_target()}, true);
      const Grads out = call_node("SmoothL1LossBackward0", {r[0]}, {true, true},
                                  Saved{{"beta", r[1].item<double>()},
                                        {"reduction", r[3].item<std::int64_t>()},
                                        {"self", r[5]},
                                        {"target", r[7]}});
      CHECK_TENSOR(*out[0], r[9]);
      CHECK_TENSOR(*out[1], r[10]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("SmoothL1LossBackward0", {random64({}, 1)}, {true, true},
                                   Saved{{"beta", -1.0}, {"reduction", kMean}, {"self", x}, {"target", y}}),
                         "SmoothL1LossBackward0: beta must be >= 0, got -1", Error);
    CHECK_THROWS_WITH_AS(call_node("SmoothL1LossBackward0", {random64({}, 1)}, {true, true},
                                   Saved{{"beta", 1.0}, {"reduction", std::int64_t{3}}, {"self", x}, {"target", y}}),
                         "SmoothL1LossBackward0: reduction must be 0 (none), 1 (mean) or 2 (sum), got 3", Error);
  }
}

TEST_CASE("HuberLossBackward0") {
  const Tensor x = random64({2, 3}, 130), y = random64({2, 3}, 131);

  SUBCASE("finite differences away from the kinks, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{2, 3} : Shape{}, 132);
      const Grads out = call_node("HuberLossBackward0", {g}, {true, true},
                                  Saved{{"delta", 0.7}, {"reduction", reduction}, {"self", x}, {"target", y}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor d = abs(sub(in[0], in[1]));
        const Tensor loss = where(lt(d, 0.7), mul(square(d), Scalar(0.5)), mul(sub(d, Scalar(0.35)), Scalar(0.7)));
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x, y}, g);
      check_against_finite_differences(out, 1, forward, {x, y}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"delta", 1.0}, {"reduction", kSum}, {"self", x}, {"target", y}};
    const Grads out = call_node("HuberLossBackward0", {random64({}, 1)}, {false, true}, saved);
    CHECK_FALSE(out[0].has_value());
    CHECK(out[1]->sizes() == Shape{2, 3});
    CHECK_FALSE(call_node("HuberLossBackward0", {std::nullopt}, {true, true}, saved)[1].has_value());
  }
  SUBCASE("against torch, at the kinks, each reduction") {
    for (const std::string call : {"F.huber_loss(x, t)", "F.huber_loss(x, t, delta=0.5, reduction='sum')",
                                   "F.huber_loss(x, t, delta=2.0, reduction='none')"}) {
      CAPTURE(call);
      const auto r = torch_loss("HuberLossBackward0", call, {"delta", "reduction", "self", "target"},
                                {piecewise_self(), piecewise_target()}, true);
      const Grads out = call_node("HuberLossBackward0", {r[0]}, {true, true},
                                  Saved{{"delta", r[1].item<double>()},
                                        {"reduction", r[3].item<std::int64_t>()},
                                        {"self", r[5]},
                                        {"target", r[7]}});
      CHECK_TENSOR(*out[0], r[9]);
      CHECK_TENSOR(*out[1], r[10]);
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("HuberLossBackward0", {random64({}, 1)}, {true, true},
                                   Saved{{"delta", 0.0}, {"reduction", kMean}, {"self", x}, {"target", y}}),
                         "HuberLossBackward0: delta must be > 0, got 0", Error);
  }
}

// The tolerance of a comparison with torch in `dtype`: refgrad and torch round the same formula,
// but may sum in a different order.
double rtol_of(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 2e-3;
    case DType::BFloat16: return 1.6e-2;
    case DType::Float32: return 1e-5;
    default: return 1e-10;
  }
}

TEST_CASE("SoftMarginLossBackward0") {
  const Tensor x = random64({3, 4}, 130);
  const Tensor y = sign(random64({3, 4}, 131));  // the usual labels +-1

  SUBCASE("finite differences, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{3, 4} : Shape{}, 132);
      const Grads out = call_node("SoftMarginLossBackward0", {g}, {true},
                                  Saved{{"reduction", reduction}, {"self", x}, {"target", y}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor loss = log1p(exp(mul(neg(y), in[0])));
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"reduction", kMean}, {"self", x}, {"target", y}};
    CHECK_FALSE(call_node("SoftMarginLossBackward0", {random64({}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("SoftMarginLossBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: each reduction, float64 to bfloat16, a zero self and a real-valued target") {
    const Tensor self = cat({x, zeros({1, 4}, DType::Float64)}, 0);
    const Tensor target = cat({y, tensor({{0.5, -2.0, 0.0, 3.0}}, DType::Float64)}, 0);
    for (const DType dtype : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
      for (const std::string call : {"F.soft_margin_loss(x, t)", "F.soft_margin_loss(x, t, reduction='sum')",
                                     "F.soft_margin_loss(x, t, reduction='none')"}) {
        CAPTURE(call);
        CAPTURE(dtype_name(dtype));
        const auto r = torch_loss("SoftMarginLossBackward0", call, {"reduction", "self", "target"},
                                  {to(self, dtype), to(target, dtype)});
        const Grads out = call_node("SoftMarginLossBackward0", {r[0]}, {true},
                                    Saved{{"reduction", r[1].item<std::int64_t>()}, {"self", r[3]}, {"target", r[5]}});
        CHECK_TENSOR(*out[0], r[7], rtol_of(dtype), rtol_of(dtype) * 1e-2);
      }
    }
  }
  SUBCASE("errors") {
    CHECK_THROWS_WITH_AS(call_node("SoftMarginLossBackward0", {random64({3}, 1)}, {true},
                                   Saved{{"reduction", kNone}, {"self", x}, {"target", y}}),
                         "SoftMarginLossBackward0: with reduction none the grad [3] must have self's shape [3,4]",
                         Error);
    CHECK_THROWS_WITH_AS(call_node("SoftMarginLossBackward0", {random64({}, 1)}, {true},
                                   Saved{{"reduction", kSum}, {"self", x}, {"target", random64({2, 4}, 1)}}),
                         "SoftMarginLossBackward0: target [2,4] does not broadcast to self [3,4]", Error);
  }
}

// multi_margin_loss with L0 primitives, as the finite differences' forward: per frame with target y,
// sum over d != y of w[y] * max(0, margin - x[y] + x[d])^p / C.
Tensor multi_margin_loss(const Tensor& x, const Tensor& target, double p, double margin,
                         const std::optional<Tensor>& weight, std::int64_t reduction) {
  const Tensor y = unsqueeze(target, 1);
  const Tensor z = clamp(add(sub(x, gather(x, 1, y)), Scalar(margin)), Scalar(0), std::nullopt);
  const Tensor others = ne(unsqueeze(arange(Scalar(x.size(1)), DType::Int64), 0), y);
  Tensor h = where(others, p == 1 ? z : square(z), Scalar(0));
  if (weight) h = mul(h, index(*weight, {y}));
  const Tensor loss = div(sum(h, IntList{1}), Scalar(x.size(1)));
  return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
}

TEST_CASE("MultiMarginLossBackward0") {
  const Tensor x = random64({4, 5}, 140), target = tensor({0, 3, 4, 3}, DType::Int64);
  const Tensor weight = tensor({0.5, 2.0, 1.5, 1.0, 0.25}, DType::Float64);

  SUBCASE("finite differences: p 1 and 2, margins, a weight, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      for (const double p : {1.0, 2.0}) {
        const std::optional<Tensor> w = p == 2 ? std::optional<Tensor>(weight) : std::nullopt;
        CAPTURE(reduction);
        CAPTURE(p);
        const Tensor g = random64(reduction == kNone ? Shape{4} : Shape{}, 141);
        const Saved saved = {{"margin", Scalar(0.7)}, {"p", Scalar(static_cast<std::int64_t>(p))},
                             {"reduction", reduction}, {"self", x}, {"target", target},
                             {"weight", w ? FieldValue{*w} : FieldValue{None{}}}};
        const Grads out = call_node("MultiMarginLossBackward0", {g}, {true}, saved);
        auto forward = [&](const std::vector<Tensor>& in) {
          return multi_margin_loss(in[0], target, p, 0.7, w, reduction);
        };
        check_against_finite_differences(out, 0, forward, {x}, g);
      }
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"margin", Scalar(1.0)}, {"p", Scalar(1)}, {"reduction", kMean}, {"self", x},
                         {"target", target}, {"weight", None{}}};
    CHECK_FALSE(call_node("MultiMarginLossBackward0", {random64({}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MultiMarginLossBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: hinges at 0, p, margin, weight, reductions, [C] and 0-d self, float32") {
    // Integers with margin 1 put several hinges exactly at 0, where torch's grad is 0.
    const Tensor tied = tensor({{1.0, 0.0, 2.0, 1.0, 0.0}, {0.0, 1.0, 1.0, 2.0, -1.0}}, DType::Float64);
    const std::vector<std::string> calls = {
        "F.multi_margin_loss(x, t)",
        "F.multi_margin_loss(x, t, p=2, margin=0.5, reduction='sum')",
        "F.multi_margin_loss(x, t, weight=c, reduction='none')",
        "F.multi_margin_loss(x, t, p=2, weight=c)",
    };
    const std::vector<std::pair<Tensor, Tensor>> inputs = {
        {x, target}, {tied, tensor({0, 2}, DType::Int64)}, {random64({5}, 142), tensor({3}, DType::Int64)},
        {random64({}, 143), tensor(0, DType::Int64)}};
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const std::string& call : calls) {
        for (const auto& [self, t] : inputs) {
          CAPTURE(call);
          CAPTURE(str(self.sizes()));
          CAPTURE(dtype_name(dtype));
          const Tensor w = self.dim() == 0 ? tensor({1.5}, DType::Float64) : weight;
          const auto r = torch_loss("MultiMarginLossBackward0", call,
                                    {"margin", "p", "reduction", "self", "target", "weight"},
                                    {to(self, dtype), t, to(w, dtype)});
          const Saved from_torch = {{"margin", Scalar(r[1].item<double>())}, {"p", Scalar(r[3].item<std::int64_t>())},
                                    {"reduction", r[5].item<std::int64_t>()}, {"self", r[7]},
                                    {"target", r[9]}, {"weight", optional_tensor(r, 11)}};
          CHECK_TENSOR(*call_node("MultiMarginLossBackward0", {r[0]}, {true}, from_torch)[0], r[13],
                       rtol_of(dtype), rtol_of(dtype) * 1e-2);
        }
      }
    }
  }
  SUBCASE("errors") {
    const Tensor g = random64({}, 1);
    Saved bad = {{"margin", Scalar(1.0)}, {"p", Scalar(3)}, {"reduction", kMean}, {"self", x},
                 {"target", target}, {"weight", None{}}};
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: only p == 1 and p == 2 are supported, got p=3", Error);
    bad["p"] = Scalar(1);
    bad["target"] = tensor({0, 5, 1, 1}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: target 5 is out of range for 5 classes", Error);
    bad["target"] = tensor({0, 1}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: expected an int64 target of 4 elements (one per frame of self "
                         "[4,5]), got int64 [2]",
                         Error);
    bad["target"] = target;
    bad["weight"] = tensor({1.0, 2.0}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: weight must have one value per class (5), got shape [2]", Error);
    bad["weight"] = None{};
    bad["reduction"] = kNone;
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: with reduction none the grad [] must have one value per frame (4)",
                         Error);
    bad["self"] = zeros({2, 0}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("MultiMarginLossBackward0", {g}, {true}, bad),
                         "MultiMarginLossBackward0: expected self to be a non-empty vector or matrix with optional "
                         "0-dim batch size, got [2,0]",
                         Error);
  }
}

TEST_CASE("MultilabelMarginLossBackward0") {
  const Tensor x = random64({3, 4}, 150);
  // Row 0 lists classes 3 and 1; row 1 lists 0, then -1 ends it (the 2 after it is not a target);
  // row 2 lists 2 twice, which counts twice.
  const Tensor target = tensor({{3, 1, -1, 0}, {0, -1, 2, 1}, {2, 2, -1, -1}}, DType::Int64);
  const Tensor is_target = tensor({{0.0, 1.0, 0.0, 1.0}, {1.0, 0.0, 0.0, 0.0}, {0.0, 0.0, 1.0, 0.0}}, DType::Float64);
  // The (target, non-target) pairs each row's loss sums over.
  const Tensor pair_target = tensor({{3, 3, 1, 1, 0, 0, 0, 2, 2, 2, 2, 2, 2}}, DType::Int64);
  const Tensor pair_other = tensor({{0, 2, 0, 2, 1, 2, 3, 0, 1, 3, 0, 1, 3}}, DType::Int64);
  const Tensor pair_row = tensor({0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2}, DType::Int64);

  SUBCASE("finite differences, each reduction") {
    for (const std::int64_t reduction : {kNone, kMean, kSum}) {
      CAPTURE(reduction);
      const Tensor g = random64(reduction == kNone ? Shape{3} : Shape{}, 151);
      const Grads out = call_node("MultilabelMarginLossBackward0", {g}, {true},
                                  Saved{{"reduction", reduction}, {"self", x}, {"target", target},
                                        {"is_target", is_target}});
      auto forward = [&](const std::vector<Tensor>& in) {
        const Tensor flat = reshape(in[0], {-1});
        const Tensor x_j = index(flat, {add(mul(pair_row, Scalar(4)), reshape(pair_target, {-1}))});
        const Tensor x_d = index(flat, {add(mul(pair_row, Scalar(4)), reshape(pair_other, {-1}))});
        const Tensor hinge = clamp(add(sub(x_d, x_j), Scalar(1)), Scalar(0), std::nullopt);
        const Tensor loss = div(index_add(zeros({3}, DType::Float64), 0, pair_row, hinge), Scalar(4));
        return reduction == kNone ? loss : reduction == kMean ? mean(loss) : sum(loss);
      };
      check_against_finite_differences(out, 0, forward, {x}, g);
    }
  }
  SUBCASE("need mask and undefined grad") {
    const Saved saved = {{"reduction", kMean}, {"self", x}, {"target", target}, {"is_target", is_target}};
    CHECK_FALSE(call_node("MultilabelMarginLossBackward0", {random64({}, 1)}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("MultilabelMarginLossBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: hinges at 0, reductions, [C] and 0-d self, float32") {
    const Tensor tied = tensor({{1.0, 0.0, 2.0, 1.0}, {0.0, 1.0, 1.0, 2.0}, {1.0, 1.0, 0.0, 0.0}}, DType::Float64);
    const std::vector<std::pair<Tensor, Tensor>> inputs = {
        {x, target}, {tied, target}, {random64({4}, 152), tensor({2, 0, -1, 3}, DType::Int64)},
        {random64({}, 153), tensor(0, DType::Int64)}};
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const std::string call : {"F.multilabel_margin_loss(x, t)",
                                     "F.multilabel_margin_loss(x, t, reduction='sum')",
                                     "F.multilabel_margin_loss(x, t, reduction='none')"}) {
        for (const auto& [self, t] : inputs) {
          CAPTURE(call);
          CAPTURE(str(self.sizes()));
          CAPTURE(dtype_name(dtype));
          const auto r = torch_loss("MultilabelMarginLossBackward0", call,
                                    {"reduction", "self", "target", "is_target"}, {to(self, dtype), t});
          const Saved from_torch = {{"reduction", r[1].item<std::int64_t>()}, {"self", r[3]}, {"target", r[5]},
                                    {"is_target", r[7]}};
          CHECK_TENSOR(*call_node("MultilabelMarginLossBackward0", {r[0]}, {true}, from_torch)[0], r[9],
                       rtol_of(dtype), rtol_of(dtype) * 1e-2);
        }
      }
    }
  }
  SUBCASE("errors") {
    const Tensor g = random64({}, 1);
    Saved bad = {{"reduction", kMean}, {"self", x}, {"target", tensor({{3, 1, -1, 0}, {0, -1, 2, 1}, {4, 2, -1, -1}},
                                                                      DType::Int64)},
                 {"is_target", is_target}};
    CHECK_THROWS_WITH_AS(call_node("MultilabelMarginLossBackward0", {g}, {true}, bad),
                         "MultilabelMarginLossBackward0: target 4 is out of range for 4 classes (-1 ends the list)",
                         Error);
    bad["target"] = target;
    bad["is_target"] = zeros({3, 3}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("MultilabelMarginLossBackward0", {g}, {true}, bad),
                         "MultilabelMarginLossBackward0: is_target [3,3] does not have target's shape [3,4]", Error);
    bad["is_target"] = full({3, 4}, 2.0, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("MultilabelMarginLossBackward0", {g}, {true}, bad),
                         "MultilabelMarginLossBackward0: is_target must hold only 0 and 1", Error);
    bad["target"] = tensor({0, 1}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("MultilabelMarginLossBackward0", {g}, {true}, bad),
                         "MultilabelMarginLossBackward0: expected an int64 target with self's shape [3,4], got int64 [2]",
                         Error);
  }
}

// ------------------------------------------------------------------ ctc loss ---

TEST_CASE("CtcLossBackward0") {
  // log_probs [T = 6, batch = 3, classes = 5]; repeated labels (2, 2) need a blank between them.
  const Tensor log_probs = log_softmax(random64({6, 3, 5}, 90), 2), g = random64({3}, 91);
  const std::vector<IntList> labels = {{1, 2, 2}, {3, 1}, {4}};
  const IntList input_lengths = {6, 5, 4}, target_lengths = {3, 2, 1};
  const Tensor targets = tensor({{1, 2, 2}, {3, 1, 0}, {4, 0, 0}}, DType::Int64);
  // torch's forward gives result0 (the losses) and result1 (log_alpha), the node's saved inputs.
  const auto forward = torch_eval("torch._ctc_loss(a, b, [6, 5, 4], [3, 2, 1], 0, False)", {log_probs, targets});
  const Saved saved = {{"blank", std::int64_t{0}}, {"input_lengths", input_lengths}, {"log_probs", log_probs},
                       {"target_lengths", target_lengths}, {"targets", targets}, {"zero_infinity", false},
                       {"result0", forward[0]}, {"result1", forward[1]}};
  SUBCASE("finite differences through log_softmax, the reference loss checked against torch's") {
    auto loss = [&](const std::vector<Tensor>& in) { return ctc_loss_reference(in[0], labels, input_lengths, 0); };
    CHECK_TENSOR(loss({log_probs}), forward[0], 1e-12, 1e-12);
    check_through_log_softmax(call_node("CtcLossBackward0", {g}, {true}, saved), loss, log_probs, g);
  }
  SUBCASE("need mask and undefined grad") {
    CHECK_FALSE(call_node("CtcLossBackward0", {g}, {false}, saved)[0].has_value());
    CHECK_FALSE(call_node("CtcLossBackward0", {std::nullopt}, {true}, saved)[0].has_value());
  }
  SUBCASE("against torch: padded and 1-d targets, another blank, an empty target, impossible alignments") {
    struct Case {
      const char* what;
      const char* call;  // of lp = a.requires_grad_()
    };
    // (F.ctc_loss with zero_infinity puts a where() after the node; _ctc_loss is the node's own forward)
    const std::vector<Case> cases = {
        {"padded targets", "F.ctc_loss(lp, torch.tensor([[1, 2, 2], [3, 1, 0], [4, 0, 0]]), [6, 5, 4], [3, 2, 1], "
                           "reduction='none')"},
        {"1-d targets, blank 4, an empty target",
         "F.ctc_loss(lp, torch.tensor([1, 2, 2, 3, 1]), [6, 6, 3], [3, 2, 0], blank=4, reduction='none')"},
        {"targets too long for their inputs (infinite loss), zero_infinity",
         "torch._ctc_loss(lp, torch.tensor([[1, 1, 1], [2, 3, 0], [3, 3, 0]]), [4, 6, 2], [3, 2, 2], 0, True)[0]"},
        {"the same without zero_infinity: NaN where torch has NaN",
         "torch._ctc_loss(lp, torch.tensor([[1, 1, 1], [2, 3, 0], [3, 3, 0]]), [4, 6, 2], [3, 2, 2], 0, False)[0]"},
    };
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const Case& c : cases) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(c.what);
        const auto r = torch_exec(R"(
lp = a.requires_grad_()
out = )" + std::string(c.call) + R"(
fn = out.grad_fn
assert fn.name() == "CtcLossBackward0", fn.name()
T = lambda s: torch.tensor(list(s), dtype=torch.int64)
g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(lp.dtype)
saved = (torch.tensor(fn._saved_blank), T(fn._saved_input_lengths), fn._saved_log_probs, T(fn._saved_target_lengths),
         fn._saved_targets, fn._saved_zero_infinity, fn._saved_result0, fn._saved_result1)
result = (*saved, g, *torch.autograd.grad(out, (lp,), g))
)",
                                  {log_probs.to(dtype)});
        const Saved from_torch = {{"blank", r[0].item<std::int64_t>()}, {"input_lengths", int_list(r[1])},
                                  {"log_probs", r[2]},                  {"target_lengths", int_list(r[3])},
                                  {"targets", r[4]},                    {"zero_infinity", r[5].item<bool>()},
                                  {"result0", r[6]},                    {"result1", r[7]}};
        const Tensor grad = *call_node("CtcLossBackward0", {r[8]}, {true}, from_torch)[0];
        CHECK(grad.dtype() == dtype);
        const double rtol = dtype == DType::Float64 ? 1e-9 : 1e-5;  // float32: in float, as the kernel
        CHECK_TENSOR(grad, r[9], rtol, rtol * 1e-2);
      }
    }
  }
  SUBCASE("zero_infinity: a sequence whose loss is infinite gets zeros (by hand)") {
    Saved infinite = saved;
    infinite["zero_infinity"] = true;
    infinite["result0"] = tensor({2.0, std::numeric_limits<double>::infinity(), 3.0}, DType::Float64);
    const Tensor grad = *call_node("CtcLossBackward0", {g}, {true}, infinite)[0];
    CHECK_TENSOR(select(grad, 1, 1), zeros({6, 5}, DType::Float64), 0, 0);
    CHECK(sum(ne(select(grad, 1, 0), 0)).item<std::int64_t>() > 0);
  }
  SUBCASE("steps past a sequence's input length get zeros") {
    const Tensor grad = *call_node("CtcLossBackward0", {g}, {true}, saved)[0];
    CHECK_TENSOR(narrow(select(grad, 1, 2), 0, 4, 2), zeros({2, 5}, DType::Float64), 0, 0);
  }
  SUBCASE("errors") {
    Saved long_input = saved;
    long_input["input_lengths"] = IntList{7, 5, 4};
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, long_input),
                         "CtcLossBackward0: input_lengths[0] = 7 is not in [0, 6]", Error);
    Saved two_lengths = saved;
    two_lengths["target_lengths"] = IntList{3, 2};
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, two_lengths),
                         "CtcLossBackward0: input_lengths [6,5,4] and target_lengths [3,2] must have one length per "
                         "sequence of log_probs [6,3,5]",
                         Error);
    Saved bad_blank = saved;
    bad_blank["blank"] = std::int64_t{5};
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, bad_blank),
                         "CtcLossBackward0: blank 5 is not a class of log_probs [6,3,5]", Error);
    Saved bad_label = saved;
    bad_label["targets"] = tensor({{1, 7, 2}, {3, 1, 0}, {4, 0, 0}}, DType::Int64);
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, bad_label),
                         "CtcLossBackward0: target 7 of sequence 0 is not a class of log_probs [6,3,5]", Error);
    Saved bad_alpha = saved;
    bad_alpha["result1"] = zeros({3, 6, 5}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, bad_alpha),
                         "CtcLossBackward0: result1 (log_alpha) [3,6,5] is not [3, 6, 7]", Error);
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {random64({2}, 1)}, {true}, saved),
                         "CtcLossBackward0: grad [2] and result0 [3] must be [batch] for log_probs [6,3,5]", Error);
    Saved half = saved;
    half["log_probs"] = log_probs.to(DType::Float16);
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward0", {g}, {true}, half),
                         "CtcLossBackward0: log_probs must be float32 or float64 (as ATen's CPU ctc_loss), got float16",
                         Error);
  }
}

TEST_CASE("CtcLossBackward1") {
  const Tensor log_probs = log_softmax(random64({5, 2, 4}, 92), 2);
  SUBCASE("finite differences") {
    const auto forward =
        torch_eval("torch._ctc_loss(a, b, torch.tensor([5, 4]), torch.tensor([2, 2]))", {log_probs, tensor({1, 3, 2, 2}, DType::Int64)});
    const Tensor g = random64({2}, 93);
    const Saved saved = {{"blank", std::int64_t{0}},
                         {"input_lengths", tensor({5, 4}, DType::Int64)},
                         {"log_probs", log_probs},
                         {"target_lengths", tensor({2, 2}, DType::Int64)},
                         {"targets", tensor({1, 3, 2, 2}, DType::Int64)},
                         {"zero_infinity", false},
                         {"result0", forward[0]},
                         {"result1", forward[1]}};
    auto loss = [&](const std::vector<Tensor>& in) { return ctc_loss_reference(in[0], {{1, 3}, {2, 2}}, {5, 4}, 0); };
    CHECK_TENSOR(loss({log_probs}), forward[0], 1e-12, 1e-12);
    check_through_log_softmax(call_node("CtcLossBackward1", {g}, {true}, saved), loss, log_probs, g);
    CHECK_FALSE(call_node("CtcLossBackward1", {std::nullopt}, {true}, saved)[0].has_value());
    Saved float_lengths = saved;
    float_lengths["input_lengths"] = tensor({5.0, 4.0}, DType::Float64);
    CHECK_THROWS_WITH_AS(call_node("CtcLossBackward1", {g}, {true}, float_lengths),
                         "CtcLossBackward1: input_lengths must be a 1-d integer tensor, got float64 [2]", Error);
  }
  SUBCASE("against torch: tensor lengths (int64 and int32), float64 and float32, zero_infinity") {
    for (const DType dtype : {DType::Float64, DType::Float32}) {
      for (const std::string lengths_dtype : {"torch.int64", "torch.int32"}) {
        for (const std::string zero_infinity : {"False", "True"}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(lengths_dtype);
          CAPTURE(zero_infinity);
          const auto r = torch_exec("L, zi = " + lengths_dtype + ", " + zero_infinity + R"(
lp = a.requires_grad_()
out = torch._ctc_loss(lp, torch.tensor([[1, 3], [2, 2]]), torch.tensor([5, 2], dtype=L), torch.tensor([2, 2], dtype=L),
                      0, zi)[0]
fn = out.grad_fn
assert fn.name() == "CtcLossBackward1", fn.name()
g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(out.dtype)
result = (fn._saved_input_lengths, fn._saved_log_probs, fn._saved_target_lengths, fn._saved_targets,
          fn._saved_zero_infinity, fn._saved_result0, fn._saved_result1, torch.tensor(fn._saved_blank), g,
          *torch.autograd.grad(out, (lp,), g))
)",
                                    {log_probs.to(dtype)});
          const Saved from_torch = {{"blank", r[7].item<std::int64_t>()}, {"input_lengths", r[0]},
                                    {"log_probs", r[1]},                  {"target_lengths", r[2]},
                                    {"targets", r[3]},                    {"zero_infinity", r[4].item<bool>()},
                                    {"result0", r[5]},                    {"result1", r[6]}};
          const Tensor grad = *call_node("CtcLossBackward1", {r[8]}, {true}, from_torch)[0];
          const double rtol = dtype == DType::Float64 ? 1e-9 : 1e-5;  // float32: in float, as the kernel
          CHECK_TENSOR(grad, r[9], rtol, rtol * 1e-2);
        }
      }
    }
  }
}

}  // TEST_SUITE
