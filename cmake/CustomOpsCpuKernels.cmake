# SPDX-License-Identifier: BSD-3-Clause
# Compiles the CPU loops once per instruction set, as ATen compiles its native/cpu kernels, so
# one library is fast on AVX2 (and AVX512) machines and still runs on any x86-64 (or other) CPU.
# kernels/cpu/cpu_loops.h picks the set at run time, as ATen does for its own kernels of the kind:
# AVX512 for the reductions (torch.sum runs AVX512 there) and for the elementwise loops of terms
# that call functions (exp, erf, ...: bound by arithmetic, not memory), AVX2 for the other
# elementwise loops (ATen's REGISTER_DISPATCH runs add, mul, ... with AVX2 on AVX512 CPUs too).
# Measurements of the choice: docs/benchmarks.md.
#
# OpenMP: at::parallel_for is inline and runs its body in parallel only where the caller is compiled
# with OpenMP, as ATen is (a torch without OpenMP uses its own pool and needs nothing here). The
# library links torch's own runtime where the wheel bundles one (torch/lib/libgomp.so.1, already
# on the library's run path), else the compiler's (the same soname): one runtime in the process.
#
# custom_ops_add_cpu_kernels(target sources...)
function(custom_ops_add_cpu_kernels target)
  find_package(OpenMP COMPONENTS CXX)
  get_filename_component(_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
  find_library(CUSTOM_OPS_TORCH_OPENMP NAMES libgomp.so.1 PATHS "${_torch_lib_dir}" NO_DEFAULT_PATH)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    set(_capabilities DEFAULT AVX2 AVX512)
  else()
    set(_capabilities DEFAULT)
  endif()
  set(_flags_DEFAULT "")
  set(_flags_AVX2 -mavx2 -mfma -mf16c -mbmi -mbmi2)
  set(_flags_AVX512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mbmi -mbmi2)
  foreach(cap IN LISTS _capabilities)
    set(_object ${target}_cpu_${cap})
    add_library(${_object} OBJECT ${ARGN})
    target_compile_definitions(${_object} PRIVATE CPU_CAPABILITY=${cap} CPU_CAPABILITY_${cap})
    # -Wno-psabi: GCC notes that passing 32/64-byte vectors changed ABI in GCC 4.6; nothing to act on.
    # -ffp-contract=off: GNU C++ otherwise fuses a * b + c into one FMA wherever the optimizer
    # happens to see both, so two instantiations of one formula (a gradient asked alone, or with
    # the other) could round differently; Inductor builds its C++ kernels the same way.
    target_compile_options(${_object} PRIVATE ${_flags_${cap}} -Wno-psabi -ffp-contract=off)
    target_include_directories(${_object} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/ops/include)
    target_link_libraries(${_object} PRIVATE torch)
    # torch >= 2.14 asks for C++20 through its target; 2.11 does not, and the loops use it too.
    target_compile_features(${_object} PRIVATE cxx_std_20)
    if(OpenMP_CXX_FOUND)
      target_compile_options(${_object} PRIVATE ${OpenMP_CXX_FLAGS})
    endif()
    custom_ops_enable_warnings(${_object})
    if(cap STREQUAL "AVX512")
      # GCC 12's avx512fintrin.h passes an uninitialized placeholder (__Y) to its own builtins,
      # which -Wuninitialized reports wherever ATen's 16-bit conversions inline into our loops;
      # the DEFAULT and AVX2 builds of the same sources keep the warning.
      target_compile_options(${_object} PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>)
    endif()
    set_target_properties(${_object} PROPERTIES
      POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    if(CUSTOM_OPS_SANITIZE)
      target_compile_options(${_object} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    endif()
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${_object}>)
  endforeach()
  if(OpenMP_CXX_FOUND AND CUSTOM_OPS_TORCH_OPENMP)
    target_link_libraries(${target} PRIVATE "${CUSTOM_OPS_TORCH_OPENMP}")
  elseif(OpenMP_CXX_FOUND)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  endif()
endfunction()
