// Support code compiled into every shim mutant (torch_abi_harness/mutate_interposer.py puts it after the
// mutant's own prelude and before its interposed functions). Not a header of the project: the
// harness inlines it into each generated interposer source.
//
// - harness::real(name): the real function, found where torch loaded it. LD_PRELOAD puts the
//   mutant in the global scope, but torch loads libtorch_cpu RTLD_LOCAL, so dlsym(RTLD_NEXT) finds
//   nothing there: the libraries torch already loaded are asked by name (RTLD_NOLOAD). A function
//   found nowhere ends the process loudly (and says so in the trace): never a silent pass.
// - harness::hit(): the mutant changed a behaviour; written once per process to the trace file.
// - harness::wrap_kernel(name, fn): a boxed kernel registered through the library shims, wrapped
//   in a trampoline that runs HARNESS_KERNEL_BEFORE / HARNESS_KERNEL_AFTER around it, with the
//   op's schema (recorded from the def shims) at hand.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace harness {

inline void trace(const char* what) {
  const char* path = std::getenv("HARNESS_PRELOAD_TRACE");
  if (path == nullptr) return;
  int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  std::string line = std::string(what) + " " + HARNESS_MUTANT_ID + "\n";
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
  ::close(fd);
}

inline void hit() {
  static bool once = false;
  if (!once) {
    once = true;
    trace("hit");
  }
}

inline void* real(const char* name) {
  void* found = dlsym(RTLD_NEXT, name);
  static const char* libraries[] = {"libtorch_cpu.so", "libtorch.so", "libtorch_cuda.so", "libc10.so",
                                    "libtorch_python.so"};
  for (const char* library : libraries) {
    if (found != nullptr) break;
    void* handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    if (handle != nullptr) found = dlsym(handle, name);
  }
  if (found == nullptr) {
    trace("unresolved");
    std::fprintf(stderr,
                 "harness mutant %s: the real %s was found in no loaded torch library; the mutant cannot "
                 "forward to it (aborting: this is an error of the harness, never a kill)\n",
                 HARNESS_MUTANT_ID, name);
    std::abort();
  }
  return found;
}

// ---- schemas and boxed kernels -----------------------------------------------------------

struct Signature {
  std::string op;                  // the name as defined, without namespace or arguments
  std::vector<std::string> args;   // each argument's type as written in the schema (kw-only marker dropped)
  std::vector<std::string> rets;   // each return's type
};

inline std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\n");
  size_t end = text.find_last_not_of(" \t\n");
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
}

// The types of a comma-separated list at nesting depth 0 ("int a, float[] b=[1, 2]" -> int, float[]).
inline std::vector<std::string> types_of(const std::string& list) {
  std::vector<std::string> types;
  std::string item;
  int depth = 0;
  auto flush = [&]() {
    std::string text = trim(item);
    item.clear();
    if (text.empty() || text == "*") return;
    size_t space = std::string::npos;
    int d = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (c == '(' || c == '[') ++d;
      if (c == ')' || c == ']') --d;
      if (c == ' ' && d == 0) { space = i; break; }
    }
    types.push_back(space == std::string::npos ? text : text.substr(0, space));
  };
  for (char c : list) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) { flush(); continue; }
    item += c;
  }
  flush();
  return types;
}

inline std::map<std::string, Signature>& schemas() {
  static std::map<std::string, Signature> known;
  return known;
}

inline std::mutex& schemas_lock() {
  static std::mutex lock;
  return lock;
}

// "reverse3(int a, float b, bool c) -> (bool, float, int)"
inline void note_schema(const char* schema) {
  if (schema == nullptr) return;
  std::string text(schema);
  size_t open = text.find('(');
  if (open == std::string::npos) return;
  int depth = 0;
  size_t close = std::string::npos;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) { close = i; break; }
  }
  if (close == std::string::npos) return;
  Signature sig;
  sig.op = trim(text.substr(0, open));
  sig.args = types_of(text.substr(open + 1, close - open - 1));
  size_t arrow = text.find("->", close);
  if (arrow != std::string::npos) {
    std::string rets = trim(text.substr(arrow + 2));
    if (!rets.empty() && rets.front() == '(') rets = rets.substr(1, rets.size() - 2);
    sig.rets = types_of(rets);
  }
  std::lock_guard<std::mutex> guard(schemas_lock());
  schemas()[sig.op] = sig;
}

inline Signature signature_of(const char* name) {
  std::lock_guard<std::mutex> guard(schemas_lock());
  auto found = schemas().find(name == nullptr ? "" : name);
  if (found == schemas().end()) return Signature{name == nullptr ? "" : name, {}, {}};
  return found->second;
}

inline bool is(const std::string& type, const char* wanted) { return type == wanted; }
inline bool is_optional(const std::string& type) { return !type.empty() && type.back() == '?'; }
inline bool is_list(const std::string& type) { return type.find('[') != std::string::npos; }

using Kernel = void (*)(StableIValue*, uint64_t, uint64_t);

struct Slot {
  Kernel fn = nullptr;
  std::string op;
};

constexpr int kSlots = 512;

inline Slot* slots() {
  static Slot table[kSlots];
  return table;
}

template <int I>
void trampoline(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  Slot& slot = slots()[I];
  Signature sig = signature_of(slot.op.c_str());
  (void)sig;
#ifdef HARNESS_KERNEL_BEFORE
  HARNESS_KERNEL_BEFORE
#endif
  slot.fn(stack, num_args, num_outputs);
#ifdef HARNESS_KERNEL_AFTER
  HARNESS_KERNEL_AFTER
#endif
}

template <int... I>
constexpr std::array<Kernel, sizeof...(I)> trampolines(std::integer_sequence<int, I...>) {
  return {&trampoline<I>...};
}

inline Kernel wrap_kernel(const char* name, Kernel fn) {
  static std::mutex lock;
  static int used = 0;
  static const auto table = trampolines(std::make_integer_sequence<int, kSlots>{});
  std::lock_guard<std::mutex> guard(lock);
  if (used == kSlots) return fn;  // more kernels than slots: the rest run unwrapped
  std::string op(name == nullptr ? "" : name);
  size_t dot = op.find('.');
  slots()[used].fn = fn;
  slots()[used].op = dot == std::string::npos ? op : op.substr(0, dot);
  return table[used++];
}

}  // namespace harness
