#include "worker/kernels/fused_ops.h"

#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/fused_ops_kernel.h"

namespace verl::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool NeedsGrad(std::initializer_list<const at::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : inputs) {
    if (t->requires_grad()) return true;
  }
  return false;
}

KernelDtype DtypeOf(const at::Tensor& t) {
  KernelDtype d = KernelDtype::kFloat32;
  TORCH_CHECK(KernelDtypeOf(t.scalar_type(), &d), "fused ops: unsupported dtype ", t.scalar_type());
  return d;
}

// A gradient in the forward input's dtype and contiguous (what the backward kernels read).
at::Tensor DenseGrad(const at::Tensor& g, const at::Tensor& like) { return g.to(like.scalar_type()).contiguous(); }

// RMSNorm of x (of x + residual where residual is defined, the sum stored in *sum), rstd kept where asked for.
at::Tensor RmsNormForward(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
                          at::Tensor* sum, at::Tensor* rstd) {
  TORCH_CHECK(RmsNormSupported(x, weight), "fused RmsNorm: unsupported input ", x.sizes(), " ", x.scalar_type());
  TORCH_CHECK(!residual.defined() || AddRmsNormSupported(x, residual, weight), "fused AddRmsNorm: unsupported input ",
              x.sizes(), " ", x.scalar_type(), " and residual ", residual.sizes(), " ", residual.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  RmsNormArgs a;
  a.dtype = DtypeOf(x);
  a.x = x.data_ptr();
  if (residual.defined()) {
    *sum = at::empty_like(x, at::MemoryFormat::Contiguous);
    a.residual = residual.data_ptr();
    a.sum_out = sum->data_ptr();
  }
  a.weight = weight.data_ptr();
  a.y = y.data_ptr();
  a.hidden = static_cast<int>(x.size(-1));
  a.rows = x.numel() / x.size(-1);
  a.eps = static_cast<float>(eps);
  if (rstd != nullptr) {
    *rstd = at::empty({a.rows}, x.options().dtype(at::kFloat));
    a.rstd = rstd->data_ptr<float>();
  }
  C10_CUDA_CHECK(LaunchRmsNorm(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

// RMSNorm's backward for the normed tensor x (saved with weight and rstd): x's gradient where need_dx (plus dx_add
// where defined: x's gradient from its other uses), weight's where need_dw.
std::pair<at::Tensor, at::Tensor> RmsNormBackward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rstd,
                                                  const at::Tensor& grad_y, const at::Tensor& dx_add, bool need_dx,
                                                  bool need_dw) {
  const at::Tensor dy = DenseGrad(grad_y, x);
  const at::Tensor add = dx_add.defined() ? DenseGrad(dx_add, x) : at::Tensor();
  const c10::cuda::CUDAGuard guard(x.device());
  RmsNormBackwardArgs a;
  a.dtype = DtypeOf(x);
  a.x = x.data_ptr();
  a.weight = weight.data_ptr();
  a.rstd = rstd.data_ptr<float>();
  a.dy = dy.data_ptr();
  a.hidden = static_cast<int>(x.size(-1));
  a.rows = x.numel() / x.size(-1);
  at::Tensor dx, partial;
  if (need_dx) {
    dx = at::empty_like(x, at::MemoryFormat::Contiguous);
    a.dx = dx.data_ptr();
    if (add.defined()) a.dx_add = add.data_ptr();
  }
  if (need_dw) {
    // Zeros: no rows (an empty batch) launch nothing, and the weight's gradient is then 0.
    partial = at::zeros({RmsNormBackwardChunks(a.rows), a.hidden}, x.options().dtype(at::kFloat));
    a.dweight_partial = partial.data_ptr<float>();
  }
  C10_CUDA_CHECK(LaunchRmsNormBackward(a, c10::cuda::getCurrentCUDAStream()));
  return {dx, partial.defined() ? partial.sum(0).to(weight.scalar_type()) : at::Tensor()};
}

// The backward of a norm node whose second output (the sum, or x again) other uses read: {dx, dw}. The second
// output's gradient g_other is added inside the norm's input-gradient kernel; where y went unused it passes through
// and the weight's gradient is zeros; where neither was used dx is zeros. Undefined where not needed.
std::pair<at::Tensor, at::Tensor> PassThroughNormBackward(const variable_list& saved, const at::Tensor& g_y,
                                                          const at::Tensor& g_other, bool need_dx, bool need_dw) {
  at::Tensor dx, dw;
  if (g_y.defined()) {
    std::tie(dx, dw) = RmsNormBackward(saved[0], saved[1], saved[2], g_y, g_other, need_dx, need_dw);
  } else {
    dx = g_other;
    if (need_dw) dw = at::zeros_like(saved[1]);
  }
  if (need_dx && !dx.defined()) dx = at::zeros_like(saved[0]);
  return {need_dx ? dx : at::Tensor(), dw};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    at::Tensor rstd;
    at::Tensor y = RmsNormForward(x, at::Tensor(), weight, eps, nullptr, &rstd);
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    auto [dx, dw] = RmsNormBackward(saved[0], saved[1], saved[2], grads[0], at::Tensor(), ctx->needs_input_grad(0),
                                    ctx->needs_input_grad(1));
    return {dx, dw, at::Tensor()};
  }
};

// (y, x) = (RmsNorm(x), x) with gradients: x returned (autograd makes it a view of the input with this node as its
// history) for its other uses, whose gradient the backward kernel adds to the norm's, as AddRmsNorm's adds the sum's.
class RmsNormAgainFunction : public torch::autograd::Function<RmsNormAgainFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    at::Tensor rstd;
    at::Tensor y = RmsNormForward(x, at::Tensor(), weight, eps, nullptr, &rstd);
    ctx->save_for_backward({x, weight, rstd});
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined (see AddRmsNormFunction)
    return {y, x};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto [dx, dw] = PassThroughNormBackward(ctx->get_saved_variables(), grads[0], grads[1], ctx->needs_input_grad(0),
                                            ctx->needs_input_grad(1));
    return {dx, dw, at::Tensor()};
  }
};

// (y, sum) = (RmsNorm(x + residual), x + residual) with gradients: one kernel each way. The sum's gradient from its
// other uses (the residual stream's) is added inside the norm's backward kernel, rounded as autograd adds it, and is
// x's and residual's gradient both.
class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& residual,
                               const at::Tensor& weight, double eps) {
    at::Tensor rstd, sum;
    at::Tensor y = RmsNormForward(x, residual, weight, eps, &sum, &rstd);
    ctx->save_for_backward({sum, weight, rstd});
    // An output nothing used gets an undefined gradient rather than zeros (the final norm's sum, e.g.): no zero tensor
    // read and added, and -0 stays -0, as the two ops give.
    ctx->set_materialize_grads(false);
    return {y, sum};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The sum's gradient is x's and residual's both.
    auto [dx, dw] = PassThroughNormBackward(ctx->get_saved_variables(), grads[0], grads[1],
                                            ctx->needs_input_grad(0) || ctx->needs_input_grad(1),
                                            ctx->needs_input_grad(2));
    return {ctx->needs_input_grad(0) ? dx : at::Tensor(), ctx->needs_input_grad(1) ? dx : at::Tensor(), dw,
            at::Tensor()};
  }
};

// x [B, H, T, D] as SplitHeads makes it of a column range of a wider [B, T, N] projection (DecoderModel's stacked
// q/k/v GEMM): each token's H heads of D adjacent, tokens and rows at least that far apart, so no two elements share
// memory.
bool TokenRowsView(const at::Tensor& x) {
  if (x.dim() != 4) return false;
  const int64_t heads = x.size(1), tokens = x.size(2), d = x.size(3);
  const int64_t row = tokens == 1 ? heads * d : x.stride(2);
  return x.stride(3) == 1 && (heads == 1 || x.stride(1) == d) && row >= heads * d &&
         (x.size(0) == 1 || x.stride(0) >= tokens * row);
}

at::Tensor RopeForward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool negate_sin) {
  TORCH_CHECK(RopeSupported(x, cos) && sin.sizes() == cos.sizes() && sin.device() == cos.device() &&
                  sin.is_contiguous() && sin.scalar_type() == cos.scalar_type(),
              "fused Rope: unsupported input ", x.sizes(), " ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  // x's strides where x is dense; a view of token rows (RopeSupported) gives a dense [B, T, H, D] tensor, transposed.
  at::Tensor y = x.is_non_overlapping_and_dense()
                     ? at::empty_like(x)
                     : at::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options()).transpose(1, 2);
  TORCH_CHECK(!x.is_non_overlapping_and_dense() || y.strides() == x.strides(),
              "fused Rope: output strides differ from the input's");
  RopeArgs a;
  a.dtype = DtypeOf(x);
  a.x = x.data_ptr();
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.y = y.data_ptr();
  a.batch = static_cast<int>(x.size(0));
  a.heads = static_cast<int>(x.size(1));
  a.tokens = static_cast<int>(x.size(2));
  a.head_dim = static_cast<int>(x.size(3));
  a.stride_b = x.stride(0);
  a.stride_h = x.stride(1);
  a.stride_t = x.stride(2);
  a.y_stride_b = y.stride(0);
  a.y_stride_h = y.stride(1);
  a.y_stride_t = y.stride(2);
  a.negate_sin = negate_sin;
  C10_CUDA_CHECK(LaunchRope(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return RopeForward(x, cos, sin, /*negate_sin=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    at::Tensor dy = grads[0];
    if (!RopeSupported(dy, saved[0])) dy = dy.contiguous();
    // y = x * cos + rotate_half(x) * sin is a rotation of each (x[d], x[d + D/2]) pair by the angle whose cosine and
    // sine are cos[d] and sin[d] (= sin[d + D/2]); its transpose rotates back: dx = rope(dy, cos, -sin).
    return {RopeForward(dy, saved[0], saved[1], /*negate_sin=*/true), at::Tensor(), at::Tensor()};
  }
};

// One RopeRowsArgs launch: y's rows (a [rows, heads * head_dim] view with unit column stride) from x's (likewise), by
// `index` or summed by `offsets` and `positions`, rotated where cos is defined.
void RopeRows(const at::Tensor& x, const at::Tensor& y, int64_t heads, int64_t head_dim, const at::Tensor& index,
              const at::Tensor& offsets, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
              bool cos_of_input, bool negate_sin) {
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && x.stride(1) == 1 && y.stride(1) == 1 &&
                  x.size(1) == heads * head_dim && y.size(1) == heads * head_dim,
              "fused RopeRows: rows of ", heads, " heads of ", head_dim, " with unit column stride expected, got ",
              x.sizes(), " and ", y.sizes());
  RopeRowsArgs a;
  a.dtype = DtypeOf(x);
  a.x = x.data_ptr();
  a.x_stride = x.stride(0);
  a.y = y.data_ptr();
  a.y_stride = y.stride(0);
  a.rows = y.size(0);
  a.heads = static_cast<int>(heads);
  a.head_dim = static_cast<int>(head_dim);
  if (index.defined()) a.index = index.data_ptr<int64_t>();
  if (offsets.defined()) {
    a.offsets = offsets.data_ptr<int64_t>();
    a.positions = positions.data_ptr<int64_t>();
  }
  if (cos.defined()) {
    a.cos = cos.data_ptr();
    a.sin = sin.data_ptr();
  }
  a.cos_of_input = cos_of_input;
  a.negate_sin = negate_sin;
  C10_CUDA_CHECK(LaunchRopeRows(a, c10::cuda::getCurrentCUDAStream()));
}

// SharedPromptRows' forward kernels: {q_rows, k_rows, v_rows}.
variable_list SharedPromptRowsForward(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                                      int64_t q_heads, int64_t kv_heads, int64_t head_dim, const at::Tensor& row_source,
                                      const at::Tensor& row_index) {
  const c10::cuda::CUDAGuard guard(qkv.device());
  const int64_t R = row_index.size(0), q_cols = q_heads * head_dim, kv_cols = kv_heads * head_dim;
  at::Tensor q = at::empty({R, q_heads, head_dim}, qkv.options());
  at::Tensor k = at::empty({R, kv_heads, head_dim}, qkv.options());
  at::Tensor v = at::empty({R, kv_heads, head_dim}, qkv.options());
  RopeRows(qkv.narrow(1, 0, q_cols), q.view({R, q_cols}), q_heads, head_dim, row_source, {}, {}, cos, sin,
           /*cos_of_input=*/true, /*negate_sin=*/false);
  RopeRows(qkv.narrow(1, q_cols, kv_cols), k.view({R, kv_cols}), kv_heads, head_dim, row_index, {}, {}, cos, sin,
           /*cos_of_input=*/true, /*negate_sin=*/false);
  RopeRows(qkv.narrow(1, q_cols + kv_cols, kv_cols), v.view({R, kv_cols}), kv_heads, head_dim, row_index, {}, {}, {},
           {}, /*cos_of_input=*/false, /*negate_sin=*/false);
  return {q, k, v};
}

class SharedPromptRowsFunction : public torch::autograd::Function<SharedPromptRowsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& qkv, const at::Tensor& cos,
                               const at::Tensor& sin, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                               const at::Tensor& row_source, const at::Tensor& row_index, const at::Tensor& row_output,
                               const at::Tensor& key_offsets, const at::Tensor& key_positions) {
    ctx->save_for_backward({cos, sin, row_output, key_offsets, key_positions});
    ctx->saved_data["heads"] = std::vector<int64_t>{q_heads, kv_heads, head_dim};
    return SharedPromptRowsForward(qkv, cos, sin, q_heads, kv_heads, head_dim, row_source, row_index);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    const std::vector<int64_t> heads = ctx->saved_data["heads"].toIntVector();
    const at::Tensor& like = s[0];  // cos: qkv's dtype and device (SharedPromptRowsSupported)
    const int64_t q_heads = heads[0], kv_heads = heads[1], D = heads[2], T = s[2].size(0);
    const int64_t q_cols = q_heads * D, kv_cols = kv_heads * D;
    const c10::cuda::CUDAGuard guard(like.device());
    at::Tensor dqkv = at::empty({T, q_cols + 2 * kv_cols}, like.options());
    // q: each token's query sits at one position (row_output); k and v: summed over the positions holding the token.
    const int64_t first[3] = {0, q_cols, q_cols + kv_cols}, count[3] = {q_heads, kv_heads, kv_heads};
    for (int part = 0; part < 3; ++part) {
      const at::Tensor into = dqkv.narrow(1, first[part], count[part] * D);
      if (!grads[part].defined()) {
        into.zero_();
        continue;
      }
      const at::Tensor g = DenseGrad(grads[part], like);
      const at::Tensor rows = g.view({g.size(0), count[part] * D});
      if (part == 0) {
        RopeRows(rows, into, q_heads, D, s[2], {}, {}, s[0], s[1], /*cos_of_input=*/false, /*negate_sin=*/true);
      } else {
        const bool rotate = part == 1;
        RopeRows(rows, into, kv_heads, D, {}, s[3], s[4], rotate ? s[0] : at::Tensor(), rotate ? s[1] : at::Tensor(),
                 /*cos_of_input=*/false, /*negate_sin=*/true);
      }
    }
    variable_list out(11);
    out[0] = dqkv;
    return out;
  }
};

at::Tensor SwiGluForward(const at::Tensor& gate, const at::Tensor& up) {
  TORCH_CHECK(SwiGluSupported(gate, up), "fused SwiGLU: unsupported input ", gate.sizes(), " ", gate.scalar_type());
  const c10::cuda::CUDAGuard guard(gate.device());
  at::Tensor y = at::empty_like(gate, at::MemoryFormat::Contiguous);
  SwiGluArgs a;
  a.dtype = DtypeOf(gate);
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.y = y.data_ptr();
  a.n = gate.numel();
  C10_CUDA_CHECK(LaunchSwiGlu(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

// SwiGLU's backward kernel for the output gradient dy (dense, the inputs' dtype) into dgate and dup; cols > 0: the
// stacked layout (SwiGluBackwardArgs::cols).
void SwiGluGrad(const at::Tensor& dy, const void* gate, const void* up, void* dgate, void* dup, int64_t cols,
                void* y = nullptr) {
  SwiGluBackwardArgs a;
  a.y = y;
  a.dtype = DtypeOf(dy);
  a.gate = gate;
  a.up = up;
  a.dy = dy.data_ptr();
  a.dgate = dgate;
  a.dup = dup;
  a.n = dy.numel();
  a.cols = cols;
  C10_CUDA_CHECK(LaunchSwiGluBackward(a, c10::cuda::getCurrentCUDAStream()));
}

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return SwiGluForward(gate, up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& gate = saved[0];
    const at::Tensor& up = saved[1];
    const at::Tensor dy = DenseGrad(grads[0], gate);
    const c10::cuda::CUDAGuard guard(gate.device());
    at::Tensor dgate = at::empty_like(gate, at::MemoryFormat::Contiguous);
    at::Tensor dup = at::empty_like(up, at::MemoryFormat::Contiguous);
    SwiGluGrad(dy, gate.data_ptr(), up.data_ptr(), dgate.data_ptr(), dup.data_ptr(), 0);
    return {dgate, dup};
  }
};

}  // namespace

bool RmsNormSupported(const at::Tensor& x, const at::Tensor& weight) {
  KernelDtype dtype;
  return x.is_cuda() && weight.device() == x.device() && x.scalar_type() == weight.scalar_type() &&
         KernelDtypeOf(x.scalar_type(), &dtype) && x.dim() >= 1 && x.is_contiguous() && weight.dim() == 1 &&
         weight.is_contiguous() && x.size(-1) == weight.size(0) && x.size(-1) > 0 &&
         x.size(-1) <= std::numeric_limits<int>::max();
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor* x_again) {
  if (!NeedsGrad({&x, &weight})) {
    if (x_again != nullptr) *x_again = x;
    return RmsNormForward(x, at::Tensor(), weight, eps, nullptr, nullptr);
  }
  if (x_again == nullptr) return RmsNormFunction::apply(x, weight, eps);
  const variable_list out = RmsNormAgainFunction::apply(x, weight, eps);
  *x_again = out[1];
  return out[0];
}

bool RopeSupported(const at::Tensor& x, const at::Tensor& cos) {
  KernelDtype dtype;
  return x.is_cuda() && cos.device() == x.device() && x.scalar_type() == cos.scalar_type() &&
         KernelDtypeOf(x.scalar_type(), &dtype) && x.dim() == 4 && cos.dim() == 4 && x.stride(3) == 1 &&
         x.size(3) % 2 == 0 && cos.is_contiguous() && cos.size(0) == x.size(0) && cos.size(1) == 1 &&
         cos.size(2) == x.size(2) && cos.size(3) == x.size(3) &&
         (x.is_non_overlapping_and_dense() || TokenRowsView(x)) && x.numel() <= std::numeric_limits<int>::max();
}

at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!NeedsGrad({&x})) return RopeForward(x, cos, sin, /*negate_sin=*/false);
  TORCH_CHECK(!cos.requires_grad() && !sin.requires_grad(), "fused Rope: no gradient flows into cos and sin");
  return RopeFunction::apply(x, cos, sin);
}

bool SharedPromptRowsSupported(const at::Tensor& qkv, const at::Tensor& cos, int64_t q_heads, int64_t kv_heads,
                               int64_t head_dim) {
  KernelDtype dtype;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  return qkv.is_cuda() && KernelDtypeOf(qkv.scalar_type(), &dtype) && q_heads > 0 && kv_heads > 0 && head_dim > 0 &&
         head_dim % 2 == 0 && q_heads <= kIntMax && kv_heads <= kIntMax && head_dim <= kIntMax &&
         qkv.dim() == 2 && qkv.stride(1) == 1 && qkv.size(1) == (q_heads + 2 * kv_heads) * head_dim &&
         (qkv.size(0) <= 1 || qkv.stride(0) >= qkv.size(1)) && cos.device() == qkv.device() &&
         cos.scalar_type() == qkv.scalar_type() && cos.dim() == 2 && cos.is_contiguous() &&
         cos.size(0) == qkv.size(0) && cos.size(1) == head_dim;
}

std::vector<at::Tensor> SharedPromptRows(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                                         int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                         const at::Tensor& row_source, const at::Tensor& row_index,
                                         const at::Tensor& row_output, const at::Tensor& key_offsets,
                                         const at::Tensor& key_positions) {
  TORCH_CHECK(SharedPromptRowsSupported(qkv, cos, q_heads, kv_heads, head_dim) && sin.sizes() == cos.sizes() &&
                  sin.device() == cos.device() && sin.is_contiguous() && sin.scalar_type() == cos.scalar_type(),
              "fused SharedPromptRows: unsupported input ", qkv.sizes(), " ", qkv.scalar_type(), " with ", q_heads,
              " + 2 x ", kv_heads, " heads of ", head_dim);
  const int64_t T = qkv.size(0), R = row_index.numel();
  auto map = [&](const at::Tensor& m, int64_t n, const char* name) {
    TORCH_CHECK(m.device() == qkv.device() && m.scalar_type() == at::kLong && m.dim() == 1 && m.is_contiguous() &&
                    m.size(0) == n,
                "fused SharedPromptRows: ", name, " must be int64 [", n, "] on ", qkv.device(), ", got ", m.sizes(),
                " ", m.scalar_type(), " on ", m.device());
  };
  map(row_index, R, "row_index");
  map(row_source, R, "row_source");
  map(row_output, T, "row_output");
  map(key_offsets, T + 1, "key_offsets");
  map(key_positions, R, "key_positions");
  if (!NeedsGrad({&qkv})) {
    return SharedPromptRowsForward(qkv, cos, sin, q_heads, kv_heads, head_dim, row_source, row_index);
  }
  TORCH_CHECK(!cos.requires_grad() && !sin.requires_grad(),
              "fused SharedPromptRows: no gradient flows into cos and sin");
  return SharedPromptRowsFunction::apply(qkv, cos, sin, q_heads, kv_heads, head_dim, row_source, row_index, row_output,
                                         key_offsets, key_positions);
}

bool RopeAppendSupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                         const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& rows) {
  KernelDtype dtype;
  auto step_heads = [&](const at::Tensor& x) {  // [B, H, 1, D], heads of D contiguous
    return x.dim() == 4 && x.device() == q.device() && x.scalar_type() == q.scalar_type() && x.size(0) == q.size(0) &&
           x.size(2) == 1 && x.size(3) == q.size(3) && x.stride(3) == 1 && x.stride(1) == x.size(3);
  };
  auto cache = [&](const at::Tensor& c) {
    return c.dim() == 4 && c.device() == q.device() && c.scalar_type() == q.scalar_type() && c.is_contiguous() &&
           c.size(1) == k.size(1) && c.size(3) == q.size(3);
  };
  return q.is_cuda() && KernelDtypeOf(q.scalar_type(), &dtype) && q.size(3) % 2 == 0 && step_heads(q) &&
         step_heads(k) && step_heads(v) && v.size(1) == k.size(1) && cos.device() == q.device() &&
         cos.scalar_type() == q.scalar_type() && cos.is_contiguous() && cos.numel() == q.size(0) * q.size(3) &&
         cache(k_cache) && cache(v_cache) && v_cache.sizes() == k_cache.sizes() && rows.device() == q.device() &&
         rows.scalar_type() == at::kLong && rows.is_contiguous() && rows.numel() == q.size(0) * k.size(1) &&
         q.numel() + k.numel() + v.numel() <= std::numeric_limits<int>::max();
}

namespace {

RopeAppendArgs RopeAppendArgsOf(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                                const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const at::Tensor& rows, const at::Tensor& q_out) {
  RopeAppendArgs a;
  a.dtype = DtypeOf(q);
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  a.q_stride_b = q.stride(0);
  a.k_stride_b = k.stride(0);
  a.v_stride_b = v.stride(0);
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.q_out = q_out.data_ptr();
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.rows = rows.data_ptr<int64_t>();
  a.batch = static_cast<int>(q.size(0));
  a.q_heads = static_cast<int>(q.size(1));
  a.kv_heads = static_cast<int>(k.size(1));
  a.head_dim = static_cast<int>(q.size(3));
  return a;
}

}  // namespace

bool RopeAppendNormedSupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                               const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& rows,
                               const at::Tensor& norm_x, const at::Tensor& bias) {
  const int64_t width = (q.size(1) + 2 * k.size(1)) * q.size(3);
  return RopeAppendSupported(q, k, v, cos, k_cache, v_cache, rows) && norm_x.device() == q.device() &&
         norm_x.scalar_type() == q.scalar_type() && norm_x.dim() == 3 && norm_x.size(0) == q.size(0) &&
         norm_x.size(1) == 1 && norm_x.stride(2) == 1 && norm_x.size(2) > 0 &&
         norm_x.size(2) <= std::numeric_limits<int>::max() &&
         (!bias.defined() || (bias.device() == q.device() && bias.scalar_type() == q.scalar_type() &&
                              bias.dim() == 1 && bias.is_contiguous() && bias.size(0) == width));
}

at::Tensor RopeAppendNormed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                            const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& rows, const at::Tensor& norm_x, double eps, const at::Tensor& bias) {
  TORCH_CHECK(
      RopeAppendNormedSupported(q, k, v, cos, k_cache, v_cache, rows, norm_x, bias) && sin.sizes() == cos.sizes() &&
          sin.device() == cos.device() && sin.is_contiguous() && sin.scalar_type() == cos.scalar_type(),
      "fused RopeAppendNormed: unsupported input q ", q.sizes(), " k ", k.sizes(), " cache ", k_cache.sizes(),
      " norm_x ", norm_x.sizes(), " bias ", bias.defined() ? bias.sizes() : at::IntArrayRef{}, " ", q.scalar_type());
  TORCH_CHECK(!NeedsGrad({&q, &k, &v, &norm_x}), "fused RopeAppendNormed: inputs that need a gradient");
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor q_out = at::empty({q.size(0), q.size(1), q.size(3)}, q.options());
  RopeAppendArgs a = RopeAppendArgsOf(q, k, v, cos, sin, k_cache, v_cache, rows, q_out);
  a.norm_x = norm_x.data_ptr();
  a.norm_stride_b = norm_x.stride(0);
  a.norm_hidden = static_cast<int>(norm_x.size(2));
  a.eps = static_cast<float>(eps);
  a.bias = bias.defined() ? bias.data_ptr() : nullptr;
  C10_CUDA_CHECK(LaunchRopeAppend(a, c10::cuda::getCurrentCUDAStream()));
  return q_out;
}

at::Tensor RopeAppend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                      const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const at::Tensor& rows) {
  TORCH_CHECK(RopeAppendSupported(q, k, v, cos, k_cache, v_cache, rows) && sin.sizes() == cos.sizes() &&
                  sin.device() == cos.device() && sin.is_contiguous() && sin.scalar_type() == cos.scalar_type(),
              "fused RopeAppend: unsupported input q ", q.sizes(), " k ", k.sizes(), " cache ", k_cache.sizes(), " ",
              q.scalar_type());
  TORCH_CHECK(!NeedsGrad({&q, &k, &v}), "fused RopeAppend: inputs that need a gradient (decoding takes none)");
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor q_out = at::empty({q.size(0), q.size(1), q.size(3)}, q.options());
  const RopeAppendArgs a = RopeAppendArgsOf(q, k, v, cos, sin, k_cache, v_cache, rows, q_out);
  C10_CUDA_CHECK(LaunchRopeAppend(a, c10::cuda::getCurrentCUDAStream()));
  return q_out;
}

bool AddRmsNormSupported(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight) {
  return RmsNormSupported(x, weight) && residual.device() == x.device() && residual.scalar_type() == x.scalar_type() &&
         residual.sizes() == x.sizes() && residual.is_contiguous();
}

at::Tensor AddRmsNorm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
                      at::Tensor* sum) {
  // RmsNormForward checks the inputs (AddRmsNormSupported), with gradients or without.
  if (!NeedsGrad({&x, &residual, &weight})) return RmsNormForward(x, residual, weight, eps, sum, nullptr);
  const variable_list out = AddRmsNormFunction::apply(x, residual, weight, eps);
  *sum = out[1];
  return out[0];
}

bool SwiGluStackedSupported(const at::Tensor& gate_up) {
  KernelDtype dtype;
  return gate_up.is_cuda() && KernelDtypeOf(gate_up.scalar_type(), &dtype) && gate_up.dim() >= 1 &&
         gate_up.is_contiguous() && gate_up.size(-1) % 2 == 0;
}

namespace {

// SwiGLU over the two halves of gate_up's rows into a new [..., I] tensor (the checks done by the caller); with
// norm_x defined, the folded norm's row scale first (SwiGluArgs::norm_x).
at::Tensor LaunchStackedSwiGlu(const at::Tensor& gate_up, const at::Tensor& norm_x, double eps) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  std::vector<int64_t> size = gate_up.sizes().vec();
  size.back() /= 2;
  at::Tensor y = at::empty(size, gate_up.options());
  SwiGluArgs a;
  a.dtype = DtypeOf(gate_up);
  a.gate = gate_up.data_ptr();
  a.up = static_cast<const char*>(gate_up.data_ptr()) + size.back() * gate_up.element_size();
  a.y = y.data_ptr();
  a.n = y.numel();
  a.cols = size.back();
  if (norm_x.defined()) {
    a.norm_x = norm_x.data_ptr();
    a.norm_stride_b = norm_x.stride(0);
    a.norm_hidden = static_cast<int>(norm_x.size(2));
    a.eps = static_cast<float>(eps);
  }
  if (a.n > 0) C10_CUDA_CHECK(LaunchSwiGlu(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

// SwiGLU's gradient over the stacked projection for dy (dense, gate_up's dtype), stacked as gate_up; y, where not null,
// [..., I] memory for SwiGLU's value, which the kernel then writes too.
at::Tensor StackedSwiGluGrad(const at::Tensor& gate_up, const at::Tensor& dy, void* y) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  at::Tensor dgate_up = at::empty_like(gate_up, at::MemoryFormat::Contiguous);
  const int64_t cols = gate_up.size(-1) / 2;
  const int64_t offset = cols * gate_up.element_size();
  SwiGluGrad(dy, gate_up.data_ptr(), static_cast<const char*>(gate_up.data_ptr()) + offset, dgate_up.data_ptr(),
             static_cast<char*>(dgate_up.data_ptr()) + offset, cols, y);
  return dgate_up;
}

// SwiGluFunction over the stacked projection: the gradient comes back stacked too ([..., 2I], the gate's half first),
// so the GEMM's backward takes it as it is (no split, no zero-filled halves to add).
class SwiGluStackedFunction : public torch::autograd::Function<SwiGluStackedFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    return LaunchStackedSwiGlu(gate_up, at::Tensor(), 0.0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    return {StackedSwiGluGrad(gate_up, DenseGrad(grads[0], gate_up), nullptr)};
  }
};

}  // namespace

at::Tensor SwiGluStacked(const at::Tensor& gate_up) {
  TORCH_CHECK(SwiGluStackedSupported(gate_up), "fused SwiGluStacked: unsupported input ", gate_up.sizes(), " ",
              gate_up.scalar_type());
  if (NeedsGrad({&gate_up})) return SwiGluStackedFunction::apply(gate_up);
  return LaunchStackedSwiGlu(gate_up, at::Tensor(), 0.0);
}

std::pair<at::Tensor, at::Tensor> SwiGluStackedBackwardWithValue(const at::Tensor& gate_up, const at::Tensor& dy) {
  TORCH_CHECK(SwiGluStackedSupported(gate_up), "fused SwiGluStackedBackwardWithValue: unsupported input ",
              gate_up.sizes(), " ", gate_up.scalar_type());
  std::vector<int64_t> size = gate_up.sizes().vec();
  size.back() /= 2;
  TORCH_CHECK(dy.sizes() == at::IntArrayRef(size) && dy.scalar_type() == gate_up.scalar_type() &&
                  dy.device() == gate_up.device(),
              "fused SwiGluStackedBackwardWithValue: dy ", dy.sizes(), " ", dy.scalar_type(), " for gate_up ",
              gate_up.sizes(), " ", gate_up.scalar_type());
  at::Tensor y = at::empty(size, gate_up.options());
  at::Tensor dgate_up = StackedSwiGluGrad(gate_up, dy.contiguous(), y.data_ptr());
  return {dgate_up, y};
}

bool SwiGluStackedNormedSupported(const at::Tensor& gate_up, const at::Tensor& norm_x) {
  return SwiGluStackedSupported(gate_up) && gate_up.dim() == 3 && gate_up.size(1) == 1 && gate_up.size(-1) > 0 &&
         gate_up.size(-1) / 2 <= std::numeric_limits<int>::max() / 2 &&
         gate_up.size(0) <= std::numeric_limits<int>::max() && norm_x.device() == gate_up.device() &&
         norm_x.scalar_type() == gate_up.scalar_type() && norm_x.dim() == 3 && norm_x.size(0) == gate_up.size(0) &&
         norm_x.size(1) == 1 && norm_x.stride(2) == 1 && norm_x.size(2) > 0 &&
         norm_x.size(2) <= std::numeric_limits<int>::max();
}

at::Tensor SwiGluStackedNormed(const at::Tensor& gate_up, const at::Tensor& norm_x, double eps) {
  TORCH_CHECK(SwiGluStackedNormedSupported(gate_up, norm_x), "fused SwiGluStackedNormed: unsupported input gate_up ",
              gate_up.sizes(), " norm_x ", norm_x.sizes(), " ", gate_up.scalar_type());
  TORCH_CHECK(!NeedsGrad({&gate_up, &norm_x}), "fused SwiGluStackedNormed: inputs that need a gradient");
  return LaunchStackedSwiGlu(gate_up, norm_x, eps);
}

bool SwiGluSupported(const at::Tensor& gate, const at::Tensor& up) {
  KernelDtype dtype;
  return gate.is_cuda() && up.device() == gate.device() && up.scalar_type() == gate.scalar_type() &&
         KernelDtypeOf(gate.scalar_type(), &dtype) && gate.sizes() == up.sizes() && gate.is_contiguous() &&
         up.is_contiguous();
}

at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up) {
  if (!NeedsGrad({&gate, &up})) return SwiGluForward(gate, up);
  return SwiGluFunction::apply(gate, up);
}

}  // namespace verl::kernels
