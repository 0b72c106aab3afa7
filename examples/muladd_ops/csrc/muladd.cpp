// muladd_ops: the operators of PyTorch's C++ extension tutorial (mymuladd, mymul, myadd_out),
// written for the LibTorch stable ABI at level 2.10, CPU kernels only.
//
// Autograd and the fake (meta) implementations are registered from Python (muladd_ops/__init__.py),
// as the tutorial does; the test suite (test/) is written the way PyTorch's own tutorials write
// theirs: a TestCase from torch.testing._internal.common_utils, opcheck, device-type tests and
// hypothesis, none of which the harness's runtimes hold: extension.yaml declares them (test_requires).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

using torch::stable::Tensor;

namespace muladd_ops {

void check_same_float_cpu(const Tensor& a, const Tensor& b) {
  STD_TORCH_CHECK(a.is_cpu() && b.is_cpu(), "muladd_ops: tensors must be on the CPU");
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float, "muladd_ops: a must be float32");
  STD_TORCH_CHECK(b.scalar_type() == torch::headeronly::ScalarType::Float, "muladd_ops: b must be float32");
  STD_TORCH_CHECK(a.dim() == b.dim(), "muladd_ops: a and b must have the same shape");
  for (int64_t d = 0; d < a.dim(); ++d) {
    STD_TORCH_CHECK(a.size(d) == b.size(d), "muladd_ops: a and b must have the same shape");
  }
}

// a * b + c, elementwise.
Tensor mymuladd_cpu(Tensor a, Tensor b, double c) {
  check_same_float_cpu(a, b);
  Tensor a_contig = torch::stable::contiguous(a);
  Tensor b_contig = torch::stable::contiguous(b);
  Tensor result = torch::stable::empty_like(a_contig);
  const float* x = static_cast<const float*>(a_contig.data_ptr());
  const float* y = static_cast<const float*>(b_contig.data_ptr());
  float* out = static_cast<float*>(result.data_ptr());
  for (int64_t i = 0; i < result.numel(); ++i) out[i] = x[i] * y[i] + static_cast<float>(c);
  return result;
}

// a * b, elementwise (the backward of mymuladd uses it).
Tensor mymul_cpu(Tensor a, Tensor b) {
  check_same_float_cpu(a, b);
  Tensor a_contig = torch::stable::contiguous(a);
  Tensor b_contig = torch::stable::contiguous(b);
  Tensor result = torch::stable::empty_like(a_contig);
  const float* x = static_cast<const float*>(a_contig.data_ptr());
  const float* y = static_cast<const float*>(b_contig.data_ptr());
  float* out = static_cast<float*>(result.data_ptr());
  for (int64_t i = 0; i < result.numel(); ++i) out[i] = x[i] * y[i];
  return result;
}

// out = a + b, written into out (which must be contiguous and of the same shape).
void myadd_out_cpu(Tensor a, Tensor b, Tensor out) {
  check_same_float_cpu(a, b);
  check_same_float_cpu(a, out);
  STD_TORCH_CHECK(out.is_contiguous(), "muladd_ops: out must be contiguous");
  Tensor a_contig = torch::stable::contiguous(a);
  Tensor b_contig = torch::stable::contiguous(b);
  const float* x = static_cast<const float*>(a_contig.data_ptr());
  const float* y = static_cast<const float*>(b_contig.data_ptr());
  float* z = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) z[i] = x[i] + y[i];
}

}  // namespace muladd_ops

STABLE_TORCH_LIBRARY(muladd_ops, m) {
  m.def("mymuladd(Tensor a, Tensor b, float c) -> Tensor");
  m.def("mymul(Tensor a, Tensor b) -> Tensor");
  m.def("myadd_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(muladd_ops, CPU, m) {
  m.impl("mymuladd", TORCH_BOX(&muladd_ops::mymuladd_cpu));
  m.impl("mymul", TORCH_BOX(&muladd_ops::mymul_cpu));
  m.impl("myadd_out", TORCH_BOX(&muladd_ops::myadd_out_cpu));
}
