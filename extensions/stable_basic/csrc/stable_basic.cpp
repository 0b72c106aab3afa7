// stable_basic: a sample extension written against the LibTorch stable ABI.
//
// The 2.9 section uses only what torch 2.9 offers (raw boxed kernels, the
// aoti_torch_* C shims and aoti_torch_call_dispatcher). Later sections are
// compiled only when the build's TORCH_FEATURE_VERSION allows them, so one
// source yields a different binary per (build torch, TORCH_TARGET_VERSION):
// exactly what the compatibility matrix needs to exercise.
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x03090000
#endif
#include <Python.h>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

// torch 2.9 headers define neither TORCH_FEATURE_VERSION nor the version
// constants; treat them as feature level 2.9.
// A target above the headers' own version cannot add API the headers lack (2.10's headers accept
// one silently; 2.15's refuse it): the level this binary really has is the lower of the two.
#ifndef TORCH_FEATURE_VERSION
#define STABLE_BASIC_FEATURE_VERSION 0x0209000000000000ULL
#else
#define STABLE_BASIC_FEATURE_VERSION \
  (TORCH_FEATURE_VERSION < TORCH_ABI_VERSION ? TORCH_FEATURE_VERSION : TORCH_ABI_VERSION)
#endif
#if defined(TORCH_VERSION_2_10_0) && STABLE_BASIC_FEATURE_VERSION >= TORCH_VERSION_2_10_0
#define STABLE_BASIC_HAS_2_10 1
#include <torch/csrc/stable/device.h>
#endif
#if defined(TORCH_VERSION_2_11_0) && STABLE_BASIC_FEATURE_VERSION >= TORCH_VERSION_2_11_0
#define STABLE_BASIC_HAS_2_11 1
#include <atomic>
#endif
#if defined(TORCH_VERSION_2_12_0) && STABLE_BASIC_FEATURE_VERSION >= TORCH_VERSION_2_12_0
#define STABLE_BASIC_HAS_2_12 1
#include <torch/headeronly/core/enum_tag.h>
#endif
#if defined(TORCH_VERSION_2_14_0) && STABLE_BASIC_FEATURE_VERSION >= TORCH_VERSION_2_14_0
#define STABLE_BASIC_HAS_2_14 1
#include <torch/csrc/stable/pyobject.h>
#endif
#if defined(TORCH_VERSION_2_15_0) && STABLE_BASIC_FEATURE_VERSION >= TORCH_VERSION_2_15_0
#define STABLE_BASIC_HAS_2_15 1
#endif

using torch::stable::Tensor;

namespace stable_basic {

// torch 2.9 has global from/to; from 2.10 on they live in
// torch::stable::detail (the global ones are deprecated).
#ifdef TORCH_VERSION_2_10_0
using torch::stable::detail::from;
using torch::stable::detail::to;
#endif

#define SB_SHIM(call)                                                  \
  STD_TORCH_CHECK((call) == AOTI_TORCH_SUCCESS, "shim call failed: " #call)

void check_float_cpu(const Tensor& t, const char* what) {
  STD_TORCH_CHECK(t.is_cpu(), what, " must be a CPU tensor");
  STD_TORCH_CHECK(
      t.scalar_type() == torch::headeronly::ScalarType::Float,
      what, " must be float32");
  STD_TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

// ---- 2.9 API: raw boxed kernels --------------------------------------------

// identity(Tensor t) -> Tensor: steal the argument, push it back as the return.
void boxed_identity(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  stack[0] = from(t);
}

// add_scaled(Tensor a, Tensor b, float alpha=1.0) -> Tensor
void boxed_add_scaled(StableIValue* stack, uint64_t, uint64_t) {
  Tensor a = to<Tensor>(stack[0]);
  Tensor b = to<Tensor>(stack[1]);
  double alpha = to<double>(stack[2]);
  check_float_cpu(a, "a");
  check_float_cpu(b, "b");
  STD_TORCH_CHECK(a.numel() == b.numel(), "a and b must have the same numel");
  Tensor out = torch::stable::empty_like(a);
  const float* pa = static_cast<const float*>(a.data_ptr());
  const float* pb = static_cast<const float*>(b.data_ptr());
  float* po = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < a.numel(); ++i) {
    po[i] = pa[i] + static_cast<float>(alpha) * pb[i];
  }
  stack[0] = from(out);
}

// fill_value_(Tensor(a!) t, float value) -> Tensor(a!): mutates and aliases.
void boxed_fill_value_(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  double value = to<double>(stack[1]);
  torch::stable::fill_(t, value);
  stack[0] = from(t);
}

// reverse3(int a, float b, bool c) -> (bool, float, int): arguments are read
// left to right and returns written left to right.
void boxed_reverse3(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  STD_TORCH_CHECK(num_args == 3 && num_outputs == 3, "reverse3: bad stack shape");
  int64_t a = to<int64_t>(stack[0]);
  double b = to<double>(stack[1]);
  bool c = to<bool>(stack[2]);
  stack[0] = from(c);
  stack[1] = from(b);
  stack[2] = from(a);
}

// abs_via_dispatcher(Tensor t) -> Tensor: aten::abs through the 2.9 dispatcher shim.
void boxed_abs_via_dispatcher(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  StableIValue call[1] = {from(t)};
  SB_SHIM(aoti_torch_call_dispatcher("aten::abs", "", call));
  stack[0] = call[0];  // ownership moves from the callee's stack to ours
}

// transpose_via_dispatcher(Tensor t, int d0, int d1) -> Tensor: an overload name.
void boxed_transpose_via_dispatcher(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  int64_t d0 = to<int64_t>(stack[1]);
  int64_t d1 = to<int64_t>(stack[2]);
  StableIValue call[3] = {from(t), from(d0), from(d1)};
  SB_SHIM(aoti_torch_call_dispatcher("aten::transpose", "int", call));
  stack[0] = call[0];
}

// checked_div(Tensor t, float divisor) -> Tensor: errors reach Python.
void boxed_checked_div(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  double divisor = to<double>(stack[1]);
  STD_TORCH_CHECK(divisor != 0.0, "checked_div: divisor must be non-zero");
  check_float_cpu(t, "t");
  Tensor out = torch::stable::empty_like(t);
  const float* src = static_cast<const float*>(t.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    dst[i] = static_cast<float>(src[i] / divisor);
  }
  stack[0] = from(out);
}

// scale_or_clone(Tensor t, float? scale=None) -> Tensor: std::optional rows.
void boxed_scale_or_clone(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  std::optional<double> scale = to<std::optional<double>>(stack[1]);
  check_float_cpu(t, "t");
  Tensor out = torch::stable::empty_like(t);
  const float* src = static_cast<const float*>(t.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  const float factor = scale.has_value() ? static_cast<float>(*scale) : 1.0f;
  for (int64_t i = 0; i < t.numel(); ++i) {
    dst[i] = src[i] * factor;
  }
  stack[0] = from(out);
}

// dtype_of(Tensor t) -> ScalarType
void boxed_dtype_of(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  stack[0] = from(t.scalar_type());
}

// pad_constant(Tensor t, int left, int right, float value) -> Tensor: a generated C shim.
void boxed_pad_constant(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  int64_t left = to<int64_t>(stack[1]);
  int64_t right = to<int64_t>(stack[2]);
  double value = to<double>(stack[3]);
  stack[0] = from(torch::stable::pad(t, {left, right}, "constant", value));
}

// scaled_copy(Tensor t, float scale) -> Tensor: a CPU kernel that reads data and a Meta
// kernel that only computes the output's shape (dispatch keys CPU and Meta).
void boxed_scaled_copy_cpu(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  double scale = to<double>(stack[1]);
  check_float_cpu(t, "t");
  Tensor out = torch::stable::empty_like(t);
  const float* src = static_cast<const float*>(t.data_ptr());
  float* dst = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    dst[i] = src[i] * static_cast<float>(scale);
  }
  stack[0] = from(out);
}

void boxed_scaled_copy_meta(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  stack[0] = from(torch::stable::empty_like(t));
}

// narrow_view(Tensor t, int dim, int start, int length) -> Tensor: a generated C shim whose
// errors come from ATen; from the 2.13 headers on, the real message travels with them.
void boxed_narrow_view(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  int64_t dim = to<int64_t>(stack[1]);
  int64_t start = to<int64_t>(stack[2]);
  int64_t length = to<int64_t>(stack[3]);
  stack[0] = from(torch::stable::narrow(t, dim, start, length));
}

// maybe_fill_(Tensor(a!)? t, float value) -> (): an optional mutable tensor, no return.
void boxed_maybe_fill_(StableIValue* stack, uint64_t, uint64_t) {
  std::optional<Tensor> t = to<std::optional<Tensor>>(stack[0]);
  double value = to<double>(stack[1]);
  if (t.has_value()) {
    torch::stable::fill_(*t, value);
  }
}

// abs_twice(Tensor t) -> Tensor: one stack reused for two dispatcher calls; the first
// call's return (owned by the stack) is the second call's argument.
void boxed_abs_twice(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  StableIValue call[1] = {from(t)};
  SB_SHIM(aoti_torch_call_dispatcher("aten::abs", "", call));
  SB_SHIM(aoti_torch_call_dispatcher("aten::neg", "", call));
  SB_SHIM(aoti_torch_call_dispatcher("aten::abs", "", call));
  stack[0] = call[0];
}

// square(Tensor t) -> Tensor, registered as CompositeImplicitAutograd: it decomposes into
// aten::mul, so autograd comes from that op without a backward of its own.
void boxed_square(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  StableIValue call[2] = {from(t), from(t)};
  SB_SHIM(aoti_torch_call_dispatcher("aten::mul", "Tensor", call));
  stack[0] = call[0];
}

// echo_dtype(ScalarType dtype) -> ScalarType: the argument goes through the extension's own
// StableIValue -> ScalarType conversion and back. Which dtypes get through is set by the build's
// level (its headers' switch); the rest fail with "Not yet supported ScalarType", raised by
// libtorch's own copy of the conversion before the kernel runs on 2.11+ runtimes, by ours before.
void boxed_echo_dtype(StableIValue* stack, uint64_t, uint64_t) {
  torch::headeronly::ScalarType dtype = to<torch::headeronly::ScalarType>(stack[0]);
  stack[0] = from(dtype);
}

// echo_optional_dtype(ScalarType? dtype=None) -> ScalarType?: None and a value, both directions.
void boxed_echo_optional_dtype(StableIValue* stack, uint64_t, uint64_t) {
  std::optional<torch::headeronly::ScalarType> dtype =
      to<std::optional<torch::headeronly::ScalarType>>(stack[0]);
  stack[0] = from(dtype);
}

// ---- undefined tensors: a default-constructed torch::stable::Tensor holds no TensorImpl ----

// 0: None; 1: a defined tensor; 2: a value that is an undefined tensor.
int64_t tensor_state_of(const std::optional<Tensor>& t) {
  if (!t.has_value()) return 0;
  return t->defined() ? 1 : 2;
}

// tensor_state(Tensor? t) -> int
void boxed_tensor_state(StableIValue* stack, uint64_t, uint64_t) {
  stack[0] = from(tensor_state_of(to<std::optional<Tensor>>(stack[0])));
}

// is_defined(Tensor t) -> bool
void boxed_is_defined(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  stack[0] = from(t.defined());
}

// undefined_tensor() -> Tensor: an undefined tensor as a kernel's return.
void boxed_undefined_tensor(StableIValue* stack, uint64_t, uint64_t) {
  stack[0] = from(Tensor());
}

// maybe_undefined(Tensor t, int which) -> Tensor?: 0 None, 1 an undefined tensor as the value,
// otherwise a clone of t (aten::clone through the dispatcher, memory_format None).
void boxed_maybe_undefined(StableIValue* stack, uint64_t, uint64_t) {
  Tensor t = to<Tensor>(stack[0]);
  int64_t which = to<int64_t>(stack[1]);
  std::optional<Tensor> out;
  if (which == 1) {
    out = Tensor();
  } else if (which != 0) {
    StableIValue call[2] = {from(t), from(std::nullopt)};
    SB_SHIM(aoti_torch_call_dispatcher("aten::clone", "", call));
    out = to<Tensor>(call[0]);
  }
  stack[0] = from(out);
}

// undefined_via_dispatcher() -> (int, bool): an undefined tensor handed *to* an op through the
// dispatcher, once as the value of a Tensor? (tensor_state) and once as a Tensor (is_defined).
void boxed_undefined_via_dispatcher(StableIValue* stack, uint64_t, uint64_t) {
  StableIValue as_optional[1] = {from(std::optional<Tensor>(Tensor()))};
  SB_SHIM(aoti_torch_call_dispatcher("stable_basic::tensor_state", "", as_optional));
  StableIValue as_tensor[1] = {from(Tensor())};
  SB_SHIM(aoti_torch_call_dispatcher("stable_basic::is_defined", "", as_tensor));
  stack[0] = as_optional[0];
  stack[1] = as_tensor[0];
}

// feature_version() -> int: the TORCH_FEATURE_VERSION this binary was built for.
void boxed_feature_version(StableIValue* stack, uint64_t, uint64_t) {
  stack[0] = from(static_cast<int64_t>(STABLE_BASIC_FEATURE_VERSION));
}

// ---- 2.10 API: lists, strings, Device, torch_call_dispatcher, TORCH_BOX ----
#ifdef STABLE_BASIC_HAS_2_10

Tensor sum_dims(Tensor t, std::vector<int64_t> dims, bool keepdim) {
  // aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim, *, ScalarType? dtype)
  std::vector<StableIValue> call = {
      from(t),
      from(std::optional<std::vector<int64_t>>(std::move(dims))),
      from(keepdim),
      from(std::optional<torch::headeronly::ScalarType>())};
  SB_SHIM(torch_call_dispatcher("aten::sum", "dim_IntList", call.data(), TORCH_ABI_VERSION));
  return to<Tensor>(call[0]);
}

std::string join_strings(std::vector<std::string> parts, std::string sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

torch::stable::Device device_of(Tensor t) {
  return torch::stable::Device(
      t.is_cpu() ? torch::headeronly::DeviceType::CPU : torch::headeronly::DeviceType::CUDA,
      t.get_device_index());
}

int64_t count_tensors(std::vector<Tensor> tensors) {
  return static_cast<int64_t>(tensors.size());
}

// Every TensorOptions field of a factory, each None or set.
Tensor make_empty(
    std::vector<int64_t> size,
    std::optional<torch::headeronly::ScalarType> dtype,
    std::optional<torch::headeronly::Layout> layout,
    std::optional<torch::stable::Device> device,
    std::optional<bool> pin_memory,
    std::optional<torch::headeronly::MemoryFormat> memory_format) {
  return torch::stable::empty(size, dtype, layout, device, pin_memory, memory_format);
}

Tensor contiguous_as(Tensor t, torch::headeronly::MemoryFormat memory_format) {
  return torch::stable::contiguous(t, memory_format);
}

torch::headeronly::Layout echo_layout(torch::headeronly::Layout layout) {
  return layout;
}

torch::headeronly::MemoryFormat echo_memory_format(torch::headeronly::MemoryFormat memory_format) {
  return memory_format;
}

// The code the extension's own headers put on the wire for a Layout / MemoryFormat (through the
// aoti_torch_layout_* / aoti_torch_memory_format_* shims): it must be libtorch's code for the value.
int64_t layout_code(torch::headeronly::Layout layout) {
  return static_cast<int64_t>(to<int32_t>(from(layout)));
}

int64_t memory_format_code(torch::headeronly::MemoryFormat memory_format) {
  return static_cast<int64_t>(to<int32_t>(from(memory_format)));
}

// Tensor? and int[]?: both None and set.
Tensor add_maybe(Tensor a, std::optional<Tensor> b) {
  check_float_cpu(a, "a");
  Tensor out = torch::stable::clone(a);
  if (b.has_value()) {
    check_float_cpu(*b, "b");
    STD_TORCH_CHECK(b->numel() == a.numel(), "a and b must have the same numel");
    float* dst = static_cast<float*>(out.data_ptr());
    const float* src = static_cast<const float*>(b->data_ptr());
    for (int64_t i = 0; i < a.numel(); ++i) dst[i] += src[i];
  }
  return out;
}

Tensor sum_maybe(Tensor t, std::optional<std::vector<int64_t>> dims) {
  std::vector<StableIValue> call = {
      from(t), from(dims), from(false), from(std::optional<torch::headeronly::ScalarType>())};
  SB_SHIM(torch_call_dispatcher("aten::sum", "dim_IntList", call.data(), TORCH_ABI_VERSION));
  return to<Tensor>(call[0]);
}

// Tensor[] return: the halves of a 1-D tensor, as views.
std::vector<Tensor> halves(Tensor t) {
  int64_t half = t.size(0) / 2;
  return {torch::stable::narrow(t, 0, 0, half), torch::stable::narrow(t, 0, half, t.size(0) - half)};
}

int64_t num_threads() {
  return static_cast<int64_t>(torch::stable::get_num_threads());
}

// parallel_for: chunks summed independently, then added.
double parallel_sum(Tensor t) {
  check_float_cpu(t, "t");
  const float* data = static_cast<const float*>(t.data_ptr());
  const int64_t n = t.numel();
  std::vector<double> partial(static_cast<size_t>(n > 0 ? n : 1), 0.0);
  torch::stable::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    double acc = 0.0;
    for (int64_t i = begin; i < end; ++i) acc += data[i];
    partial[static_cast<size_t>(begin)] = acc;
  });
  double total = 0.0;
  for (double value : partial) total += value;
  return total;
}

// fill_all_(Tensor(a!)[] tensors, float value) -> (): a mutable list and no return.
void boxed_fill_all_(StableIValue* stack, uint64_t, uint64_t num_outputs) {
  STD_TORCH_CHECK(num_outputs == 0, "fill_all_ returns nothing");
  std::vector<Tensor> tensors = to<std::vector<Tensor>>(stack[0]);
  double value = to<double>(stack[1]);
  for (Tensor& t : tensors) {
    torch::stable::fill_(t, value);
  }
}

// ---- nested optionals: an optional inside a list, and that list itself optional ------

// -1 for None, -2 for a value that is an undefined tensor, else the numel.
int64_t numel_or_minus_one(const std::optional<Tensor>& t) {
  if (!t.has_value()) return -1;
  return t->defined() ? t->numel() : -2;
}

// optional_numels(Tensor?[] tensors) -> int[]: -1 for each None, else its numel.
std::vector<int64_t> optional_numels(std::vector<std::optional<Tensor>> tensors) {
  std::vector<int64_t> out;
  for (const auto& t : tensors) out.push_back(numel_or_minus_one(t));
  return out;
}

// nested_optional_numels(Tensor?[]? tensors) -> int[]?: None stays None (not an empty list).
std::optional<std::vector<int64_t>> nested_optional_numels(
    std::optional<std::vector<std::optional<Tensor>>> tensors) {
  if (!tensors.has_value()) return std::nullopt;
  return optional_numels(std::move(*tensors));
}

// optional_list_len(int[]? values) -> int: -1 for None, so None and [] stay distinct.
int64_t optional_list_len(std::optional<std::vector<int64_t>> values) {
  return values.has_value() ? static_cast<int64_t>(values->size()) : -1;
}

// keep_some(Tensor?[] tensors) -> Tensor?[]: a list of optionals as a return; None stays None.
std::vector<std::optional<Tensor>> keep_some(std::vector<std::optional<Tensor>> tensors) {
  return tensors;
}

// with_undefined(Tensor t) -> Tensor[]: an undefined tensor inside a returned list.
std::vector<Tensor> with_undefined(Tensor t) {
  return {t, Tensor()};
}

#endif  // STABLE_BASIC_HAS_2_10

// ---- 2.11: from_blob with a deleter ----------------------------------------------
#ifdef STABLE_BASIC_HAS_2_11
std::atomic<int64_t> deleter_calls_{0};

// owned_arange(int n) -> Tensor: memory the extension allocates and torch frees through the deleter.
Tensor owned_arange(int64_t n) {
  STD_TORCH_CHECK(n >= 0, "owned_arange: n must be >= 0");
  float* data = new float[static_cast<size_t>(n > 0 ? n : 1)];
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  std::vector<int64_t> sizes = {n};
  std::vector<int64_t> strides = {1};
  return torch::stable::from_blob(
      data, sizes, strides, torch::stable::Device(torch::headeronly::DeviceType::CPU),
      torch::headeronly::ScalarType::Float, [](void* p) {
        delete[] static_cast<float*>(p);
        deleter_calls_.fetch_add(1);
      });
}

int64_t deleter_calls() {
  return deleter_calls_.load();
}

// owned_window(int n, int offset) -> Tensor: from_blob over n floats 0..n-1 starting at storage offset
// `offset` (the tensor holds offset..n-1), freed through the deleter like owned_arange.
Tensor owned_window(int64_t n, int64_t offset) {
  STD_TORCH_CHECK(n > 0 && offset >= 0 && offset < n, "owned_window: needs 0 <= offset < n");
  float* data = new float[static_cast<size_t>(n)];
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  std::vector<int64_t> sizes = {n - offset};
  std::vector<int64_t> strides = {1};
  return torch::stable::from_blob(
      data, sizes, strides, torch::stable::Device(torch::headeronly::DeviceType::CPU),
      torch::headeronly::ScalarType::Float,
      [](void* p) {
        delete[] static_cast<float*>(p);
        deleter_calls_.fetch_add(1);
      },
      offset);
}

// layout_of(Tensor t) -> Layout: Tensor::layout(), a libtorch code read back through the layout shims.
torch::headeronly::Layout layout_of(Tensor t) {
  return t.layout();
}
#endif  // STABLE_BASIC_HAS_2_11

// ---- 2.14: Tensor::has_storage -------------------------------------------------------
#ifdef STABLE_BASIC_HAS_2_14
bool has_storage(Tensor t) {
  return t.has_storage();
}
#endif  // STABLE_BASIC_HAS_2_14

}  // namespace stable_basic

// An op that returns its input or a view of it declares the alias (a), or (a -> *) for a list of
// views: opcheck's schema check fails an undeclared one.
STABLE_TORCH_LIBRARY(stable_basic, m) {
  m.def("identity(Tensor(a) t) -> Tensor(a)");
  m.def("add_scaled(Tensor a, Tensor b, float alpha=1.0) -> Tensor");
  m.def("fill_value_(Tensor(a!) t, float value) -> Tensor(a!)");
  m.def("reverse3(int a, float b, bool c) -> (bool, float, int)");
  m.def("abs_via_dispatcher(Tensor t) -> Tensor");
  m.def("transpose_via_dispatcher(Tensor(a) t, int d0, int d1) -> Tensor(a)");
  m.def("checked_div(Tensor t, float divisor) -> Tensor");
  m.def("scale_or_clone(Tensor t, float? scale=None) -> Tensor");
  m.def("dtype_of(Tensor t) -> ScalarType");
  m.def("pad_constant(Tensor t, int left, int right, float value) -> Tensor");
  m.def("feature_version() -> int");
  m.def("scaled_copy(Tensor t, float scale) -> Tensor");
  m.def("narrow_view(Tensor(a) t, int dim, int start, int length) -> Tensor(a)");
  m.def("maybe_fill_(Tensor(a!)? t, float value) -> ()");
  m.def("abs_twice(Tensor t) -> Tensor");
  m.def("square(Tensor t) -> Tensor");
  m.def("echo_dtype(ScalarType dtype) -> ScalarType");
  m.def("echo_optional_dtype(ScalarType? dtype=None) -> ScalarType?");
  m.def("tensor_state(Tensor? t) -> int");
  m.def("is_defined(Tensor t) -> bool");
  m.def("undefined_tensor() -> Tensor");
  m.def("maybe_undefined(Tensor t, int which) -> Tensor?");
  m.def("undefined_via_dispatcher() -> (int, bool)");
#ifdef STABLE_BASIC_HAS_2_10
  m.def("sum_dims(Tensor t, int[] dims, bool keepdim=False) -> Tensor");
  m.def("join_strings(str[] parts, str sep) -> str");
  m.def("device_of(Tensor t) -> Device");
  m.def("count_tensors(Tensor[] tensors) -> int");
  m.def("make_empty(int[] size, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
        "bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor");
  m.def("contiguous_as(Tensor t, MemoryFormat memory_format) -> Tensor");
  m.def("echo_layout(Layout layout) -> Layout");
  m.def("echo_memory_format(MemoryFormat memory_format) -> MemoryFormat");
  m.def("layout_code(Layout layout) -> int");
  m.def("memory_format_code(MemoryFormat memory_format) -> int");
  m.def("add_maybe(Tensor a, Tensor? b=None) -> Tensor");
  m.def("sum_maybe(Tensor t, int[]? dims=None) -> Tensor");
  m.def("halves(Tensor(a -> *) t) -> Tensor(a)[]");
  m.def("num_threads() -> int");
  m.def("parallel_sum(Tensor t) -> float");
  m.def("fill_all_(Tensor(a!)[] tensors, float value) -> ()");
  m.def("optional_numels(Tensor?[] tensors) -> int[]");
  m.def("nested_optional_numels(Tensor?[]? tensors) -> int[]?");
  m.def("optional_list_len(int[]? values) -> int");
  m.def("keep_some(Tensor(a)?[] tensors) -> Tensor(a)?[]");
  m.def("with_undefined(Tensor(a -> *) t) -> Tensor(a)[]");
#endif
#ifdef STABLE_BASIC_HAS_2_11
  m.def("owned_arange(int n) -> Tensor");
  m.def("deleter_calls() -> int");
  m.def("owned_window(int n, int offset) -> Tensor");
  m.def("layout_of(Tensor t) -> Layout");
#endif
#ifdef STABLE_BASIC_HAS_2_12
  m.def("tagged_identity(Tensor(a) t) -> Tensor(a)", {torch::headeronly::Tag::pt2_compliant_tag});
#endif
#ifdef STABLE_BASIC_HAS_2_14
  m.def("has_storage(Tensor t) -> bool");
#endif
}

STABLE_TORCH_LIBRARY_IMPL(stable_basic, CompositeExplicitAutograd, m) {
  m.impl("identity", &stable_basic::boxed_identity);
  m.impl("add_scaled", &stable_basic::boxed_add_scaled);
  m.impl("fill_value_", &stable_basic::boxed_fill_value_);
  m.impl("reverse3", &stable_basic::boxed_reverse3);
  m.impl("abs_via_dispatcher", &stable_basic::boxed_abs_via_dispatcher);
  m.impl("transpose_via_dispatcher", &stable_basic::boxed_transpose_via_dispatcher);
  m.impl("checked_div", &stable_basic::boxed_checked_div);
  m.impl("scale_or_clone", &stable_basic::boxed_scale_or_clone);
  m.impl("dtype_of", &stable_basic::boxed_dtype_of);
  m.impl("pad_constant", &stable_basic::boxed_pad_constant);
  m.impl("feature_version", &stable_basic::boxed_feature_version);
  m.impl("narrow_view", &stable_basic::boxed_narrow_view);
  m.impl("maybe_fill_", &stable_basic::boxed_maybe_fill_);
  m.impl("abs_twice", &stable_basic::boxed_abs_twice);
  m.impl("echo_dtype", &stable_basic::boxed_echo_dtype);
  m.impl("echo_optional_dtype", &stable_basic::boxed_echo_optional_dtype);
  m.impl("tensor_state", &stable_basic::boxed_tensor_state);
  m.impl("is_defined", &stable_basic::boxed_is_defined);
  m.impl("undefined_tensor", &stable_basic::boxed_undefined_tensor);
  m.impl("maybe_undefined", &stable_basic::boxed_maybe_undefined);
  m.impl("undefined_via_dispatcher", &stable_basic::boxed_undefined_via_dispatcher);
#ifdef STABLE_BASIC_HAS_2_10
  m.impl("sum_dims", TORCH_BOX(&stable_basic::sum_dims));
  m.impl("join_strings", TORCH_BOX(&stable_basic::join_strings));
  m.impl("device_of", TORCH_BOX(&stable_basic::device_of));
  m.impl("count_tensors", TORCH_BOX(&stable_basic::count_tensors));
  m.impl("make_empty", TORCH_BOX(&stable_basic::make_empty));
  m.impl("contiguous_as", TORCH_BOX(&stable_basic::contiguous_as));
  m.impl("echo_layout", TORCH_BOX(&stable_basic::echo_layout));
  m.impl("echo_memory_format", TORCH_BOX(&stable_basic::echo_memory_format));
  m.impl("layout_code", TORCH_BOX(&stable_basic::layout_code));
  m.impl("memory_format_code", TORCH_BOX(&stable_basic::memory_format_code));
  m.impl("add_maybe", TORCH_BOX(&stable_basic::add_maybe));
  m.impl("sum_maybe", TORCH_BOX(&stable_basic::sum_maybe));
  m.impl("halves", TORCH_BOX(&stable_basic::halves));
  m.impl("num_threads", TORCH_BOX(&stable_basic::num_threads));
  m.impl("parallel_sum", TORCH_BOX(&stable_basic::parallel_sum));
  m.impl("fill_all_", &stable_basic::boxed_fill_all_);
  m.impl("optional_numels", TORCH_BOX(&stable_basic::optional_numels));
  m.impl("nested_optional_numels", TORCH_BOX(&stable_basic::nested_optional_numels));
  m.impl("optional_list_len", TORCH_BOX(&stable_basic::optional_list_len));
  m.impl("keep_some", TORCH_BOX(&stable_basic::keep_some));
  m.impl("with_undefined", TORCH_BOX(&stable_basic::with_undefined));
#endif
#ifdef STABLE_BASIC_HAS_2_11
  m.impl("owned_arange", TORCH_BOX(&stable_basic::owned_arange));
  m.impl("deleter_calls", TORCH_BOX(&stable_basic::deleter_calls));
  m.impl("owned_window", TORCH_BOX(&stable_basic::owned_window));
  m.impl("layout_of", TORCH_BOX(&stable_basic::layout_of));
#endif
#ifdef STABLE_BASIC_HAS_2_12
  m.impl("tagged_identity", &stable_basic::boxed_identity);
#endif
#ifdef STABLE_BASIC_HAS_2_14
  m.impl("has_storage", TORCH_BOX(&stable_basic::has_storage));
#endif
}

STABLE_TORCH_LIBRARY_IMPL(stable_basic, CompositeImplicitAutograd, m) {
  m.impl("square", &stable_basic::boxed_square);
}

STABLE_TORCH_LIBRARY_IMPL(stable_basic, CPU, m) {
  m.impl("scaled_copy", &stable_basic::boxed_scaled_copy_cpu);
}

STABLE_TORCH_LIBRARY_IMPL(stable_basic, Meta, m) {
  m.impl("scaled_copy", &stable_basic::boxed_scaled_copy_meta);
}

// ---- The Python module (limited API). From 2.15 it uses the PyObject shims. --
#ifdef STABLE_BASIC_HAS_2_15
static PyObject* dtype_roundtrip(PyObject*, PyObject* dtype) {
  try {
    torch::headeronly::ScalarType st = torch::stable::dtype_from_pyobject(dtype);
    return static_cast<PyObject*>(torch::stable::dtype_to_pyobject(st));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}
#endif

#ifdef STABLE_BASIC_HAS_2_14
static PyObject* tensor_roundtrip(PyObject*, PyObject* tensor) {
  try {
    Tensor t = torch::stable::tensor_from_pyobject(tensor);
    return static_cast<PyObject*>(torch::stable::tensor_to_pyobject(t));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}
#endif

static PyMethodDef stable_basic_methods[] = {
#ifdef STABLE_BASIC_HAS_2_14
    {"tensor_roundtrip", tensor_roundtrip, METH_O,
     "torch.Tensor -> stable Tensor -> torch.Tensor through the 2.14 PyObject shims."},
#endif
#ifdef STABLE_BASIC_HAS_2_15
    {"dtype_roundtrip", dtype_roundtrip, METH_O,
     "torch.dtype -> ScalarType -> torch.dtype through the 2.15 PyObject shims."},
#endif
    {nullptr, nullptr, 0, nullptr}};

static PyModuleDef stable_basic_module = {
    PyModuleDef_HEAD_INIT, "_C", "stable_basic native module", -1, stable_basic_methods,
    nullptr, nullptr, nullptr, nullptr};

PyMODINIT_FUNC PyInit__C(void) {
  return PyModule_Create(&stable_basic_module);
}
