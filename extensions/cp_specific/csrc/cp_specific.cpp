// cp_specific: one stable-ABI op (torch side: promised across releases) in a module that the
// Python import system loads (Python side: built for one CPython, as a cpXY wheel).
#include <Python.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>

namespace cp_specific {

// torch 2.9 has global from/to; from 2.10 on they live in torch::stable::detail.
#ifdef TORCH_VERSION_2_10_0
using torch::stable::detail::from;
using torch::stable::detail::to;
#endif

// magnitude(Tensor t) -> Tensor: aten::abs by name through the dispatcher shim (2.9 API).
void boxed_magnitude(StableIValue* stack, uint64_t, uint64_t) {
  torch::stable::Tensor t = to<torch::stable::Tensor>(stack[0]);
  StableIValue call[1] = {from(t)};
  STD_TORCH_CHECK(aoti_torch_call_dispatcher("aten::abs", "", call) == AOTI_TORCH_SUCCESS, "aten::abs failed");
  stack[0] = call[0];
}

// The module's own function, on the full (not limited) CPython API: the Python it was compiled for.
PyObject* built_for(PyObject*, PyObject*) {
  return PyUnicode_FromFormat("%d.%d", PY_MAJOR_VERSION, PY_MINOR_VERSION);
}

PyMethodDef methods[] = {
    {"built_for", built_for, METH_NOARGS, "the CPython X.Y this module was compiled for"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};

}  // namespace cp_specific

STABLE_TORCH_LIBRARY(cp_specific, m) {
  m.def("magnitude(Tensor t) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(cp_specific, CompositeExplicitAutograd, m) {
  m.impl("magnitude", &cp_specific::boxed_magnitude);
}

PyMODINIT_FUNC PyInit__C() {
  return PyModule_Create(&cp_specific::module);
}
