// hang_control: a negative control whose op never returns. Its cell must end TIMEOUT,
// with the process group killed, and the rest of the run must go on.
#include <torch/csrc/stable/library.h>

#include <cstdint>

void boxed_spin_forever(StableIValue*, uint64_t, uint64_t) {
  volatile uint64_t turns = 0;
  for (;;) {
    turns = turns + 1;
  }
}

STABLE_TORCH_LIBRARY(hang_control, m) {
  m.def("spin_forever() -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(hang_control, CompositeExplicitAutograd, m) {
  m.impl("spin_forever", &boxed_spin_forever);
}
