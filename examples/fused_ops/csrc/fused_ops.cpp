// fused_ops: two CPU kernels written for the LibTorch stable ABI (target 2.10 and later).
//
// Only the stable surface is used (torch/csrc/stable and torch/headeronly), so one
// binary built with TORCH_TARGET_VERSION=2.10 is promised to load and work on every
// torch release from 2.10 on.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

using torch::stable::Tensor;

namespace fused_ops {

void check_cpu_contiguous(const Tensor& t, const char* name, torch::headeronly::ScalarType dtype, const char* dtype_name) {
  STD_TORCH_CHECK(t.is_cpu(), name, " must be a CPU tensor");
  STD_TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype_name);
  STD_TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// rms_norm(x, weight, eps): x / sqrt(mean(x^2 over the last dim) + eps) * weight, one fused pass per row.
Tensor rms_norm_cpu(Tensor x, Tensor weight, double eps) {
  check_cpu_contiguous(x, "x", torch::headeronly::ScalarType::Float, "float32");
  check_cpu_contiguous(weight, "weight", torch::headeronly::ScalarType::Float, "float32");
  STD_TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t n = x.size(x.dim() - 1);
  STD_TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, "weight must have shape [", n, "]");
  STD_TORCH_CHECK(eps >= 0.0, "eps must be >= 0");
  Tensor out = torch::stable::empty_like(x);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const float* src = static_cast<const float*>(x.data_ptr());
  const float* w = static_cast<const float*>(weight.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  torch::stable::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const float* in = src + row * n;
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(in[i]) * in[i];
      const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
      for (int64_t i = 0; i < n; ++i) dst[row * n + i] = in[i] * scale * w[i];
    }
  });
  return out;
}

// The Meta kernel: shapes and dtypes without data, for torch.compile and fake tensors.
Tensor rms_norm_meta(Tensor x, Tensor weight, double eps) {
  STD_TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  (void)weight;
  (void)eps;
  return torch::stable::empty_like(x);
}

// saturating_add(a, b): int8 addition clamped to [-128, 127] instead of wrapping around.
Tensor saturating_add_cpu(Tensor a, Tensor b) {
  check_cpu_contiguous(a, "a", torch::headeronly::ScalarType::Char, "int8");
  check_cpu_contiguous(b, "b", torch::headeronly::ScalarType::Char, "int8");
  STD_TORCH_CHECK(a.numel() == b.numel() && a.dim() == b.dim(), "a and b must have the same shape");
  for (int64_t d = 0; d < a.dim(); ++d) {
    STD_TORCH_CHECK(a.size(d) == b.size(d), "a and b must have the same shape");
  }
  Tensor out = torch::stable::empty_like(a);
  const int8_t* x = static_cast<const int8_t*>(a.data_ptr());
  const int8_t* y = static_cast<const int8_t*>(b.data_ptr());
  int8_t* z = static_cast<int8_t*>(out.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) {
    z[i] = static_cast<int8_t>(std::clamp<int>(int{x[i]} + int{y[i]}, -128, 127));
  }
  return out;
}

}  // namespace fused_ops

STABLE_TORCH_LIBRARY(fused_ops, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor");
  m.def("saturating_add(Tensor a, Tensor b) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(fused_ops, CPU, m) {
  m.impl("rms_norm", TORCH_BOX(&fused_ops::rms_norm_cpu));
  m.impl("saturating_add", TORCH_BOX(&fused_ops::saturating_add_cpu));
}

STABLE_TORCH_LIBRARY_IMPL(fused_ops, Meta, m) {
  m.impl("rms_norm", TORCH_BOX(&fused_ops::rms_norm_meta));
}
