#ifndef VERL_WORKER_MODEL_STACKED_LINEAR_H_
#define VERL_WORKER_MODEL_STACKED_LINEAR_H_

#include <ATen/ATen.h>

#include <vector>

namespace verl {

// y = x W^T + b with W the weights' rows stacked (and b the biases', if any): DecoderModel's q/k/v and gate/up
// projections as one GEMM each, differentiable in x and in each part. The separate small GEMMs cost about as much
// each as the one, and in backward the input's gradient is one GEMM instead of one per part plus the adds that summed
// them, the weight's gradient one GEMM whose rows go to the parts, the biases' one reduction. `weight_view` and
// `bias_view` (defined where there are biases) are the stacked tensors over the parts' memory (DecoderModel's
// StackedView: in-place updates of the parts show through); they are data only, the gradients go to the parts. With
// gradients, backward keeps x only, never a stacked copy, so memory is what the separate projections kept. The same
// GEMM with or without gradients: the same values in every mode.
//
// `value`, where defined, is the output already known (a checkpointed layer's recompute replaying what its forward
// kept, decoder_model.cc): returned as it is, without the GEMM, the backward the same. It must have the output's shape,
// dtype and device and no history.
at::Tensor StackedLinear(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                         const std::vector<at::Tensor>& biases, const at::Tensor& weight_view,
                         const at::Tensor& bias_view, const at::Tensor& value = at::Tensor());

}  // namespace verl

#endif  // VERL_WORKER_MODEL_STACKED_LINEAR_H_
