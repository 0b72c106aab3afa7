// cuda_ops, host half: the schemas, and the CPU and Meta kernels of the ops whose CUDA kernels
// live in cuda_ops_kernel.cu. Only the stable ABI (torch::stable::Tensor, STABLE_TORCH_LIBRARY).
#include "cuda_ops.h"

#include <cstdint>

namespace cuda_ops {

template <typename T>
void scaled_add_loop(const T* a, const T* b, T* out, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = a[i] + alpha * b[i];
  }
}

Tensor scaled_add_cpu(const Tensor& a, const Tensor& b, double alpha) {
  check_operands(a, b);
  STD_TORCH_CHECK(a.is_cpu(), "scaled_add: the CPU kernel got a tensor on another device");
  Tensor ca = torch::stable::contiguous(a);
  Tensor cb = torch::stable::contiguous(b);
  Tensor out = torch::stable::empty_like(ca);
  if (a.scalar_type() == ScalarType::Float) {
    scaled_add_loop(
        ca.const_data_ptr<float>(), cb.const_data_ptr<float>(), out.mutable_data_ptr<float>(), ca.numel(),
        static_cast<float>(alpha));
  } else {
    scaled_add_loop(
        ca.const_data_ptr<double>(), cb.const_data_ptr<double>(), out.mutable_data_ptr<double>(), ca.numel(), alpha);
  }
  return out;
}

// Shapes without data: what fake tensors and torch.compile see. The same layout as the kernels'.
Tensor scaled_add_meta(const Tensor& a, const Tensor& b, double) {
  check_operands(a, b);
  return torch::stable::empty_like(torch::stable::contiguous(a));
}

int64_t feature_version() {
  return static_cast<int64_t>(CUDA_OPS_FEATURE_VERSION);
}

}  // namespace cuda_ops

STABLE_TORCH_LIBRARY(cuda_ops, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
  // (device index under a DeviceGuard on t's device, stream id, cudaStream_t from the CUDA shim,
  //  cudaStream_t from Stream::nativeHandle() or 0 below level 2.13)
  m.def("current_stream(Tensor t) -> (int, int, int, int)");
  // (device index under DeviceGuard(t's device), after set_index(device_index), after the guard)
  m.def("guarded_device_index(Tensor t, int device_index) -> (int, int, int)");
  // scaled_add run with a stream from the pool made current; (out, pool stream, the stream the
  // kernel was launched on, the current stream restored after)
  m.def("scaled_add_on_pool_stream(Tensor a, Tensor b, float alpha) -> (Tensor, int, int, int)");
  m.def("feature_version() -> int");
}

STABLE_TORCH_LIBRARY_IMPL(cuda_ops, CPU, m) {
  m.impl("scaled_add", TORCH_BOX(&cuda_ops::scaled_add_cpu));
}

STABLE_TORCH_LIBRARY_IMPL(cuda_ops, Meta, m) {
  m.impl("scaled_add", TORCH_BOX(&cuda_ops::scaled_add_meta));
}

STABLE_TORCH_LIBRARY_IMPL(cuda_ops, CompositeExplicitAutograd, m) {
  m.impl("feature_version", TORCH_BOX(&cuda_ops::feature_version));
}
