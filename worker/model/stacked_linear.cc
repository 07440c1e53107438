#include "worker/model/stacked_linear.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace verl {
namespace {

struct StackedViews : torch::CustomClassHolder {
  at::Tensor weight, bias;  // the stacked weights; the stacked biases, undefined without biases
};

class StackedLinearFunction : public torch::autograd::Function<StackedLinearFunction> {
 public:
  // value: none, or the output already known (StackedLinear's), an input so that autograd returns it as a view of
  // itself (a list, as an undefined tensor cannot be an input).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                            at::TensorList biases, at::TensorList value, c10::intrusive_ptr<StackedViews> views) {
    ctx->save_for_backward({x});
    std::vector<int64_t> rows;
    for (const at::Tensor& w : weights) rows.push_back(w.size(0));
    ctx->saved_data["rows"] = rows;  // the parts' rows: their gradients' split
    ctx->saved_data["biases"] = static_cast<int64_t>(biases.size());
    ctx->saved_data["values"] = static_cast<int64_t>(value.size());
    at::Tensor out = value.empty() ? at::linear(x, views->weight, views->bias) : value[0];
    ctx->saved_data["views"] = c10::IValue::make_capsule(std::move(views));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const std::vector<int64_t> rows = ctx->saved_data["rows"].toIntVector();
    const int64_t biases = ctx->saved_data["biases"].toInt();
    const at::Tensor view =
        c10::static_intrusive_pointer_cast<StackedViews>(ctx->saved_data.at("views").toCapsule())->weight;
    const at::Tensor& g = grad[0];
    torch::autograd::variable_list out;
    out.push_back(ctx->needs_input_grad(0) ? g.matmul(view) : at::Tensor());
    const int64_t n = static_cast<int64_t>(rows.size());
    auto any_needed = [&](int64_t first, int64_t count) {
      bool any = false;
      for (int64_t i = first; i < first + count; ++i) any = any || ctx->needs_input_grad(i);
      return any;
    };
    const at::Tensor g2 = g.reshape({-1, g.size(-1)});
    if (any_needed(1, n)) {
      const at::Tensor gw = g2.t().mm(x.reshape({-1, x.size(-1)}));
      for (const at::Tensor& part : gw.split_with_sizes(rows, 0)) out.push_back(part);
    } else {
      out.resize(out.size() + n);
    }
    if (biases > 0) {
      if (any_needed(1 + n, biases)) {
        for (const at::Tensor& part : g2.sum(0).split_with_sizes(rows, 0)) out.push_back(part);
      } else {
        out.resize(out.size() + biases);
      }
    }
    out.resize(out.size() + ctx->saved_data["values"].toInt());  // value
    out.push_back(at::Tensor());                                   // views
    return out;
  }
};

}  // namespace

at::Tensor StackedLinear(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                         const std::vector<at::Tensor>& biases, const at::Tensor& weight_view,
                         const at::Tensor& bias_view, const at::Tensor& value) {
  TORCH_CHECK(weight_view.defined() && biases.empty() != bias_view.defined(),
              "StackedLinear: the stacked weights (and biases, where there are biases) must be given");
  int64_t rows = 0;
  for (const at::Tensor& w : weights) rows += w.size(0);
  TORCH_CHECK(weight_view.size(0) == rows && (biases.empty() || bias_view.size(0) == rows),
              "StackedLinear: the stacked tensors have ", weight_view.size(0), " rows, the parts ", rows);
  if (value.defined()) {
    std::vector<int64_t> shape = x.sizes().vec();
    if (!shape.empty()) shape.back() = rows;
    TORCH_CHECK(value.sizes() == c10::IntArrayRef(shape) && value.scalar_type() == x.scalar_type() &&
                    value.device() == x.device() && !value.requires_grad(),
                "StackedLinear: the given value is ", value.sizes(), " ", value.scalar_type(), " on ", value.device(),
                (value.requires_grad() ? " with history" : ""), ", the output ", c10::IntArrayRef(shape), " ",
                x.scalar_type(), " on ", x.device());
  }
  bool needs_grad = x.requires_grad();
  for (const auto* list : {&weights, &biases}) {
    for (const at::Tensor& t : *list) needs_grad = needs_grad || t.requires_grad();
  }
  if (!at::GradMode::is_enabled() || !needs_grad) return value.defined() ? value : at::linear(x, weight_view, bias_view);
  auto views = c10::make_intrusive<StackedViews>();
  views->weight = weight_view;
  views->bias = bias_view;
  const std::vector<at::Tensor> values = value.defined() ? std::vector<at::Tensor>{value} : std::vector<at::Tensor>{};
  return StackedLinearFunction::apply(x, at::TensorList(weights), at::TensorList(biases), at::TensorList(values),
                                      std::move(views));
}

}  // namespace verl
