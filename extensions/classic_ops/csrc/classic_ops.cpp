// classic_ops: a negative control. It registers its op with TORCH_LIBRARY and works on
// at::Tensor: the unstable C++ API. Nothing promises that the binary runs on any torch
// release but the one it was built with, and the harness must show where it does not.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace classic_ops {

at::Tensor scaled_add(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: a and b must have the same shape");
  return a + b * alpha;
}

}  // namespace classic_ops

TORCH_LIBRARY(classic_ops, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha=1.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(classic_ops, CompositeExplicitAutograd, m) {
  m.impl("scaled_add", &classic_ops::scaled_add);
}
