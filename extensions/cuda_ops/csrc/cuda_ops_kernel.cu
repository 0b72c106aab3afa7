// cuda_ops, device half: the CUDA kernel of scaled_add and the ops that exercise the stable
// accelerator API (DeviceGuard, current stream, a stream from the pool). Compiled by nvcc with the
// same stable headers as the host half; registered under the CUDA dispatch key.
#include "cuda_ops.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>

namespace cuda_ops {

using torch::stable::accelerator::DeviceGuard;
using torch::stable::accelerator::DeviceIndex;
using torch::stable::accelerator::getCurrentDeviceIndex;
using torch::stable::accelerator::getCurrentStream;

#define CUDA_OPS_SHIM(call) STD_TORCH_CHECK((call) == AOTI_TORCH_SUCCESS, "shim call failed: " #call)

int64_t as_int(void* handle) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(handle));
}

// The current cudaStream_t of a device, through the C shim every level since 2.9 has.
void* current_cuda_stream(DeviceIndex index) {
  void* stream = nullptr;
  CUDA_OPS_SHIM(aoti_torch_get_current_cuda_stream(index, &stream));
  return stream;
}

template <typename T>
__global__ void scaled_add_kernel(const T* a, const T* b, T* out, int64_t n, T alpha) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a[i] + alpha * b[i];
  }
}

// Launches the kernel on the device's current stream (whatever the caller made current) and
// returns that stream. The caller holds a DeviceGuard on the tensors' device.
void* launch_scaled_add(const Tensor& a, const Tensor& b, const Tensor& out, double alpha) {
  void* stream = current_cuda_stream(a.get_device_index());
  const int64_t n = a.numel();
  if (n == 0) {
    return stream;
  }
  constexpr int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const unsigned int blocks = static_cast<unsigned int>(wanted < 4096 ? wanted : 4096);
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  if (a.scalar_type() == ScalarType::Float) {
    scaled_add_kernel<float><<<blocks, threads, 0, cuda_stream>>>(
        a.const_data_ptr<float>(), b.const_data_ptr<float>(), out.mutable_data_ptr<float>(), n,
        static_cast<float>(alpha));
  } else {
    scaled_add_kernel<double><<<blocks, threads, 0, cuda_stream>>>(
        a.const_data_ptr<double>(), b.const_data_ptr<double>(), out.mutable_data_ptr<double>(), n, alpha);
  }
  const cudaError_t err = cudaGetLastError();
  STD_TORCH_CHECK(err == cudaSuccess, "scaled_add: the CUDA kernel launch failed: ", cudaGetErrorString(err));
  return stream;
}

Tensor scaled_add_cuda(const Tensor& a, const Tensor& b, double alpha) {
  check_operands(a, b);
  STD_TORCH_CHECK(a.is_cuda(), "scaled_add: the CUDA kernel got a tensor on another device");
  DeviceGuard guard(a.get_device_index());
  Tensor ca = torch::stable::contiguous(a);
  Tensor cb = torch::stable::contiguous(b);
  Tensor out = torch::stable::empty_like(ca);
  launch_scaled_add(ca, cb, out, alpha);
  return out;
}

std::tuple<int64_t, int64_t, int64_t, int64_t> current_stream(const Tensor& t) {
  const DeviceIndex index = t.get_device_index();
  DeviceGuard guard(index);
  const DeviceIndex current = getCurrentDeviceIndex();
  const auto stream = getCurrentStream(index);
  int64_t native = 0;
#ifdef CUDA_OPS_HAS_2_13
  native = as_int(stream.nativeHandle());
#endif
  return {current, stream.id(), as_int(current_cuda_stream(index)), native};
}

std::tuple<int64_t, int64_t, int64_t> guarded_device_index(const Tensor& t, int64_t device_index) {
  DeviceIndex constructed = -1;
  DeviceIndex switched = -1;
  {
    DeviceGuard guard(t.get_device_index());
    constructed = getCurrentDeviceIndex();
    guard.set_index(static_cast<DeviceIndex>(device_index));
    switched = getCurrentDeviceIndex();
  }
  return {constructed, switched, getCurrentDeviceIndex()};
}

// Makes a stream current for its lifetime and puts the previous one back, errors included.
class CurrentStreamScope {
 public:
  CurrentStreamScope(void* stream, DeviceIndex index) : previous_(current_cuda_stream(index)), index_(index) {
    CUDA_OPS_SHIM(torch_set_current_cuda_stream(stream, index));
  }
  ~CurrentStreamScope() {
    torch_set_current_cuda_stream(previous_, index_);  // a destructor must not throw
  }
  CurrentStreamScope(const CurrentStreamScope&) = delete;
  CurrentStreamScope& operator=(const CurrentStreamScope&) = delete;

 private:
  void* previous_;
  DeviceIndex index_;
};

std::tuple<Tensor, int64_t, int64_t, int64_t> scaled_add_on_pool_stream(const Tensor& a, const Tensor& b, double alpha) {
  check_operands(a, b);
  STD_TORCH_CHECK(a.is_cuda(), "scaled_add_on_pool_stream: the CUDA kernel got a tensor on another device");
  const DeviceIndex index = a.get_device_index();
  DeviceGuard guard(index);
  Tensor ca = torch::stable::contiguous(a);
  Tensor cb = torch::stable::contiguous(b);
  Tensor out = torch::stable::empty_like(ca);
  void* pool = nullptr;
  CUDA_OPS_SHIM(torch_get_cuda_stream_from_pool(/*isHighPriority=*/false, index, &pool));
  // The inputs (and out's allocation) are ordered on the current stream: let them finish before
  // another stream touches them, and let the pool stream finish before the caller's stream reads out.
  CUDA_OPS_SHIM(torch_cuda_stream_synchronize(current_cuda_stream(index), index));
  void* launched = nullptr;
  {
    CurrentStreamScope scope(pool, index);
    launched = launch_scaled_add(ca, cb, out, alpha);
    CUDA_OPS_SHIM(torch_cuda_stream_synchronize(pool, index));
  }
  return {out, as_int(pool), as_int(launched), as_int(current_cuda_stream(index))};
}

}  // namespace cuda_ops

STABLE_TORCH_LIBRARY_IMPL(cuda_ops, CUDA, m) {
  m.impl("scaled_add", TORCH_BOX(&cuda_ops::scaled_add_cuda));
  m.impl("current_stream", TORCH_BOX(&cuda_ops::current_stream));
  m.impl("guarded_device_index", TORCH_BOX(&cuda_ops::guarded_device_index));
  m.impl("scaled_add_on_pool_stream", TORCH_BOX(&cuda_ops::scaled_add_on_pool_stream));
}
