# SPDX-License-Identifier: BSD-3-Clause
# Compiler warnings for our own targets (never for consumers of the installed package): -Wall
# -Wextra on C++ and on nvcc's host compilation. Torch's headers come in as system headers, so
# what is reported is ours. CUSTOM_OPS_WARNINGS_AS_ERRORS (CI) keeps the count at zero.
# Not -Wmaybe-uninitialized: GCC 12 reports it, at -O3, inside torch's own templates inlined into
# ours (c10::SmallVector's growth, compiled autograd's IValuePacker<std::array>::unpack), where
# the system-header exemption no longer applies; -Wuninitialized stays on.
option(CUSTOM_OPS_WARNINGS_AS_ERRORS "Treat compiler warnings in our sources as errors" OFF)

function(custom_ops_enable_warnings target)
  set(_cxx -Wall -Wextra -Wno-maybe-uninitialized)
  set(_host -Xcompiler=-Wall,-Wextra,-Wno-maybe-uninitialized)
  if(CUSTOM_OPS_WARNINGS_AS_ERRORS)
    list(APPEND _cxx -Werror)
    list(APPEND _host -Xcompiler=-Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${_cxx}>
    $<$<COMPILE_LANGUAGE:CUDA>:${_host}>)
endfunction()
