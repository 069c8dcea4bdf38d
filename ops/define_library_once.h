// CUSTOM_OPS_LIBRARY(ns, m) { m.def(...); }: TORCH_LIBRARY, safe against a second copy of this
// library in one process (a build tree's and an installed package's, say).
//
// TORCH_LIBRARY throws from a static initializer when the namespace is already defined, and an
// exception there aborts the process. Here the second copy defines nothing and warns instead;
// its kernels (TORCH_LIBRARY_IMPL, same code) replace the first copy's, with the dispatcher's
// own "Overriding a previously registered kernel" warning.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/library.h>

namespace custom::detail {

class DefineLibraryOnce {
 public:
  DefineLibraryOnce(const char* ns, void (*define)(torch::Library&), const char* file, uint32_t line);

 private:
  std::optional<torch::Library> library_;  // owns the definitions while the library is loaded
};

}  // namespace custom::detail

// m names the function's parameter, which cannot be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CUSTOM_OPS_LIBRARY(ns, m)                                                       \
  static void CUSTOM_OPS_LIBRARY_define_##ns(torch::Library&);                          \
  static const ::custom::detail::DefineLibraryOnce CUSTOM_OPS_LIBRARY_once_##ns(        \
      #ns, &CUSTOM_OPS_LIBRARY_define_##ns, __FILE__, static_cast<uint32_t>(__LINE__)); \
  void CUSTOM_OPS_LIBRARY_define_##ns(torch::Library& m)
// NOLINTEND(bugprone-macro-parentheses)
