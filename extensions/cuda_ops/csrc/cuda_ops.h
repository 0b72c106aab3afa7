// cuda_ops: what the host (.cpp) and device (.cu) halves share.
//
// Level 2.10 is the floor: TORCH_BOX and the CUDA stream shims of torch/csrc/stable/c/shim.h
// (torch_get_cuda_stream_from_pool, torch_set_current_cuda_stream,
// torch_cuda_stream_synchronize) first exist in the 2.10 headers. DeviceGuard,
// getCurrentStream and getCurrentDeviceIndex (torch/csrc/stable/accelerator.h) and
// aoti_torch_get_current_cuda_stream are older (2.9). Stream::nativeHandle() is 2.13 and is
// compiled only for builds at that level.
#pragma once

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

#if !defined(TORCH_VERSION_2_10_0)
#error "cuda_ops needs the torch 2.10 headers or newer (TORCH_BOX, the CUDA stream-pool shims)"
#endif
// A target above the headers' own version cannot add API the headers lack: the level this binary
// really has is the lower of the two.
#define CUDA_OPS_FEATURE_VERSION \
  (TORCH_FEATURE_VERSION < TORCH_ABI_VERSION ? TORCH_FEATURE_VERSION : TORCH_ABI_VERSION)
#if defined(TORCH_VERSION_2_13_0) && CUDA_OPS_FEATURE_VERSION >= TORCH_VERSION_2_13_0
#define CUDA_OPS_HAS_2_13 1
#endif

namespace cuda_ops {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

// scaled_add's argument checks, the same on every device so that the errors read the same.
inline void check_operands(const Tensor& a, const Tensor& b) {
  STD_TORCH_CHECK(
      a.scalar_type() == ScalarType::Float || a.scalar_type() == ScalarType::Double,
      "scaled_add: a must be float32 or float64");
  STD_TORCH_CHECK(a.scalar_type() == b.scalar_type(), "scaled_add: a and b must have the same dtype");
  bool same_shape = a.dim() == b.dim();
  for (int64_t d = 0; same_shape && d < a.dim(); ++d) {
    same_shape = a.size(d) == b.size(d);
  }
  STD_TORCH_CHECK(same_shape, "scaled_add: a and b must have the same shape");
  STD_TORCH_CHECK(a.device() == b.device(), "scaled_add: a and b must be on the same device");
}

}  // namespace cuda_ops
