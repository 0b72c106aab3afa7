// crash_control: a negative control whose op writes through a null pointer. Every cell
// where it loads must end CRASHED (SIGSEGV), and the rest of the run must go on.
#include <torch/csrc/stable/library.h>

#include <cstdint>

void boxed_segfault(StableIValue*, uint64_t, uint64_t) {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
}

STABLE_TORCH_LIBRARY(crash_control, m) {
  m.def("segfault() -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(crash_control, CompositeExplicitAutograd, m) {
  m.impl("segfault", &boxed_segfault);
}
