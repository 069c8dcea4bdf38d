#include "define_library_once.h"

#include <dlfcn.h>

#include <string>

namespace custom::detail {
namespace {

std::string this_library_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&this_library_path), &info) != 0 && info.dli_fname != nullptr
      ? info.dli_fname
      : "libcustom_ops.so";
}

}  // namespace

DefineLibraryOnce::DefineLibraryOnce(const char* ns, void (*define)(torch::Library&), const char* file, uint32_t line) {
  try {
    // Registers the namespace with the dispatcher, which refuses a second definition.
    library_.emplace(torch::Library::DEF, ns, std::nullopt, file, line);
  } catch (const c10::Error&) {
    TORCH_WARN(
        "custom_ops: the `", ns,
        "` operators are already defined in this process, by another copy of "
        "libcustom_ops.so; ",
        this_library_path(), " does not define them again. Load one copy only.");
    return;
  }
  define(*library_);
}

}  // namespace custom::detail
