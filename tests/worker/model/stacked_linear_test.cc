// StackedLinear (DecoderModel's q/k/v and gate/up GEMMs) against the separate projections it replaces: values and
// the gradients of x, of each weight and of each bias, with the stacked weight a view over the parts' memory (as Load
// leaves them), with and without biases, without gradients, with a frozen part and with a fixed input; stacked
// tensors missing or of the wrong size refused; a given value (a checkpointed layer's replay) returned without the GEMM,
// the gradients the same bits.

#include "worker/model/stacked_linear.h"

#include <torch/csrc/autograd/autograd.h>

#include <vector>

#include "tests/worker/torch_catch.h"

namespace verl {
namespace {

using testing::MaxAbsDiff;

// Parts over one buffer's memory, as DecoderModel::Load stacks them (not autograd views of it): leaves of their own.
std::vector<at::Tensor> PartsOver(const at::Tensor& buffer, const std::vector<int64_t>& rows) {
  std::vector<at::Tensor> parts;
  int64_t offset = 0;
  for (int64_t r : rows) {
    std::vector<int64_t> size = buffer.sizes().vec();
    size[0] = r;
    std::vector<int64_t> stride(size.size(), 1);
    if (size.size() == 2) stride[0] = size[1];
    at::Tensor p = at::empty({0}, buffer.options());
    p.set_(buffer.storage(), buffer.storage_offset() + offset * (size.size() == 2 ? size[1] : 1), size, stride);
    parts.push_back(p.requires_grad_(true));
    offset += r;
  }
  return parts;
}

TEST_CASE("StackedLinear equals the separate projections, values and gradients", "[worker][model]") {
  at::manual_seed(3);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const std::vector<int64_t> rows = {6, 2, 2};  // q, k, v of a GQA layer
  const int64_t K = 8;
  for (bool biased : {true, false}) {
    CAPTURE(biased);
    const at::Tensor w_buf = at::randn({10, K}, opts), b_buf = at::randn({10}, opts);
    const std::vector<at::Tensor> weights = PartsOver(w_buf, rows);
    const std::vector<at::Tensor> biases = biased ? PartsOver(b_buf, rows) : std::vector<at::Tensor>{};
    const at::Tensor x0 = at::randn({2, 5, K}, opts);
    const at::Tensor gy = at::randn({2, 5, 10}, opts);

    at::Tensor x = x0.clone().requires_grad_(true);
    const at::Tensor y = StackedLinear(x, weights, biases, w_buf, biased ? b_buf : at::Tensor());
    std::vector<at::Tensor> inputs = {x};
    inputs.insert(inputs.end(), weights.begin(), weights.end());
    inputs.insert(inputs.end(), biases.begin(), biases.end());
    const std::vector<at::Tensor> grads = torch::autograd::grad({y}, inputs, {gy});

    // The reference: three linears on separate leaves with the same values.
    at::Tensor xr = x0.clone().requires_grad_(true);
    std::vector<at::Tensor> ref_inputs = {xr}, outs;
    std::vector<at::Tensor> wr, br;
    for (size_t i = 0; i < rows.size(); ++i) {
      wr.push_back(weights[i].detach().clone().requires_grad_(true));
      if (biased) br.push_back(biases[i].detach().clone().requires_grad_(true));
      outs.push_back(at::linear(xr, wr[i], biased ? br[i] : at::Tensor()));
    }
    ref_inputs.insert(ref_inputs.end(), wr.begin(), wr.end());
    ref_inputs.insert(ref_inputs.end(), br.begin(), br.end());
    const at::Tensor yr = at::cat(outs, -1);
    const std::vector<at::Tensor> ref = torch::autograd::grad({yr}, ref_inputs, {gy});

    REQUIRE(y.sizes() == yr.sizes());
    CHECK(MaxAbsDiff(y, yr) < 1e-12);
    REQUIRE(grads.size() == ref.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(grads[i].sizes() == ref[i].sizes());
      CHECK(MaxAbsDiff(grads[i], ref[i]) < 1e-12);
    }

    // The stacked tensors are required, with the parts' rows.
    CHECK_THROWS_WITH(StackedLinear(x, weights, biases, at::Tensor(), biased ? b_buf : at::Tensor()),
                      Catch::Contains("must be given"));
    CHECK_THROWS_WITH(StackedLinear(x, weights, biases, w_buf.narrow(0, 0, 9), biased ? b_buf : at::Tensor()),
                      Catch::Contains("rows"));
    if (biased) {
      CHECK_THROWS_WITH(StackedLinear(x, weights, biases, w_buf, at::Tensor()), Catch::Contains("must be given"));
    }
    // Without gradients: the same values and no history.
    {
      at::NoGradGuard no_grad;
      const at::Tensor y_ng = StackedLinear(x0, weights, biases, w_buf, biased ? b_buf : at::Tensor());
      CHECK(!y_ng.requires_grad());
      CHECK(at::equal(y_ng, y.detach()));
    }
  }
}

TEST_CASE("StackedLinear with a frozen part gives the others their gradients", "[worker][model]") {
  at::manual_seed(4);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor buf = at::randn({8, 3}, opts);
  const std::vector<at::Tensor> parts = PartsOver(buf, {4, 4});
  const at::Tensor gate = parts[0];
  const at::Tensor up = parts[1].detach();  // frozen
  at::Tensor x = at::randn({7, 3}, opts).requires_grad_(true);
  const at::Tensor gy = at::randn({7, 8}, opts);
  const at::Tensor y = StackedLinear(x, {gate, up}, {}, buf, at::Tensor());
  const std::vector<at::Tensor> g = torch::autograd::grad({y}, {x, gate}, {gy});
  CHECK(MaxAbsDiff(g[0], gy.mm(at::cat({gate, up}).detach())) < 1e-12);
  CHECK(MaxAbsDiff(g[1], gy.narrow(1, 0, 4).t().mm(x.detach())) < 1e-12);
  // An input without a gradient (the weights' still formed).
  const at::Tensor x_fixed = x.detach();
  const at::Tensor y2 = StackedLinear(x_fixed, {gate, up}, {}, buf, at::Tensor());
  const at::Tensor g2 = torch::autograd::grad({y2}, {gate}, {gy})[0];
  CHECK(MaxAbsDiff(g2, g[1]) < 1e-12);
}

TEST_CASE("StackedLinear with its value given returns it, with the same gradients", "[worker][model]") {
  at::manual_seed(5);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const std::vector<int64_t> rows = {6, 2, 2};
  const at::Tensor w_buf = at::randn({10, 8}, opts), b_buf = at::randn({10}, opts);
  const std::vector<at::Tensor> weights = PartsOver(w_buf, rows), biases = PartsOver(b_buf, rows);
  const at::Tensor x0 = at::randn({3, 4, 8}, opts), gy = at::randn({3, 4, 10}, opts);
  std::vector<at::Tensor> inputs = {x0.clone().requires_grad_(true)};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  const at::Tensor y = StackedLinear(inputs[0], weights, biases, w_buf, b_buf);
  const std::vector<at::Tensor> grads = torch::autograd::grad({y}, inputs, {gy});

  // A value unlike the GEMM's (doubled), so that what is returned shows where it came from.
  const at::Tensor value = y.detach() * 2;
  const at::Tensor y2 = StackedLinear(inputs[0], weights, biases, w_buf, b_buf, value);
  CHECK(at::equal(y2.detach(), value));
  CHECK(y2.requires_grad());
  const std::vector<at::Tensor> grads2 = torch::autograd::grad({y2}, inputs, {gy});
  REQUIRE(grads2.size() == grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    CAPTURE(i);
    CHECK(at::equal(grads2[i], grads[i]));
  }
  CHECK(at::equal(value, y.detach() * 2));  // the given tensor is left as it was, without history
  CHECK(!value.requires_grad());
  {
    at::NoGradGuard no_grad;
    CHECK(StackedLinear(x0, weights, biases, w_buf, b_buf, value).is_same(value));
  }
  // A value of another shape, dtype or with history is refused, naming it.
  CHECK_THROWS_WITH(StackedLinear(inputs[0], weights, biases, w_buf, b_buf, value.narrow(2, 0, 9)),
                    Catch::Contains("the given value is [3, 4, 9]"));
  CHECK_THROWS_WITH(StackedLinear(inputs[0], weights, biases, w_buf, b_buf, value.to(at::kDouble)),
                    Catch::Contains("Double"));
  CHECK_THROWS_WITH(StackedLinear(inputs[0], weights, biases, w_buf, b_buf, y), Catch::Contains("with history"));
}

}  // namespace
}  // namespace verl
