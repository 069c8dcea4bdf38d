# The GPU architectures of the CUDA kernels, chosen as PyTorch extensions choose them, in
# TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0+PTX"): -DTORCH_CUDA_ARCH_LIST, else the environment variable
# TORCH_CUDA_ARCH_LIST, exactly as given; else every architecture the installed torch was built for
# that this nvcc compiles, with PTX of the newest so that later GPUs can JIT-compile it. An
# architecture nvcc cannot compile is a configure error instead of a failure minutes into the build.

# Architectures as numbers with an optional a/f suffix, "sm_90a" and "compute_90" spelled "9.0a", "9.0".
function(_custom_ops_arch_numbers result)
  set(numbers "")
  foreach(arch IN LISTS ARGN)
    string(REGEX REPLACE "\\+PTX$" "" arch "${arch}")
    if(arch MATCHES "^(sm|compute)_([0-9]+)([0-9])([af]?)$")
      set(arch "${CMAKE_MATCH_2}.${CMAKE_MATCH_3}${CMAKE_MATCH_4}")
    endif()
    list(APPEND numbers "${arch}")
  endforeach()
  set(${result} "${numbers}" PARENT_SCOPE)
endfunction()

# Pure (lists in, lists out), so tests/python/test_build_options.py checks it with `cmake -P`, no
# GPU or toolkit needed. requested: what the user set ("" for nothing); torch_archs: torch's
# compiled architectures ("sm_75;sm_80;compute_90"; "" when unknown); nvcc_archs: `nvcc
# --list-gpu-code` ("" when unknown). Sets result to the chosen list, dropped to torch's
# architectures left out, error to a message when the request cannot be built.
function(custom_ops_choose_cuda_archs result dropped error requested torch_archs nvcc_archs)
  _custom_ops_arch_numbers(compilable ${nvcc_archs})
  set(${result} "" PARENT_SCOPE)
  set(${dropped} "" PARENT_SCOPE)
  set(${error} "" PARENT_SCOPE)
  if(NOT requested STREQUAL "")
    string(REPLACE " " ";" requested "${requested}")
    list(REMOVE_ITEM requested "")
    foreach(arch IN LISTS requested)
      if(NOT arch MATCHES "^[0-9]+\\.[0-9][af]?(\\+PTX)?$")
        set(${error} "TORCH_CUDA_ARCH_LIST entry '${arch}' is not a compute capability such as 8.6 or 9.0+PTX" PARENT_SCOPE)
        return()
      endif()
      string(REGEX MATCH "^[0-9]+\\.[0-9]" number "${arch}")
      if(compilable AND NOT number IN_LIST compilable)
        list(JOIN compilable " " known)
        set(${error} "TORCH_CUDA_ARCH_LIST has ${arch}, which this nvcc cannot compile (it compiles ${known})" PARENT_SCOPE)
        return()
      endif()
    endforeach()
    set(${result} "${requested}" PARENT_SCOPE)
    return()
  endif()
  # torch's wheels name their architectures (torch._C._cuda_getArchFlags); a libtorch without a
  # Python to ask gets the list of recent torch wheels.
  _custom_ops_arch_numbers(wanted ${torch_archs})
  if(NOT wanted)
    set(wanted 7.5 8.0 8.6 9.0 10.0 12.0)
  endif()
  list(REMOVE_DUPLICATES wanted)
  set(chosen "")
  set(left_out "")
  foreach(arch IN LISTS wanted)
    if(NOT compilable OR arch IN_LIST compilable)
      list(APPEND chosen "${arch}")
    else()
      list(APPEND left_out "${arch}")
    endif()
  endforeach()
  if(NOT chosen)
    list(JOIN wanted " " asked)
    set(${error} "this nvcc compiles none of torch's GPU architectures (${asked}): set TORCH_CUDA_ARCH_LIST" PARENT_SCOPE)
    return()
  endif()
  list(POP_BACK chosen newest)
  list(APPEND chosen "${newest}+PTX")
  set(${result} "${chosen}" PARENT_SCOPE)
  set(${dropped} "${left_out}" PARENT_SCOPE)
endfunction()

# Sets TORCH_CUDA_ARCH_LIST (a plain variable, read by torch's CMake config) and
# CUSTOM_OPS_CUDA_ARCHS (recorded in the library, the package and the CMake config) before
# find_package(Torch). Only when CUDA kernels may be built: a CUDA compiler is found and
# CUSTOM_OPS_CUDA is not OFF.
macro(custom_ops_set_cuda_archs)
  set(CUSTOM_OPS_CUDA_ARCHS "")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND NOT CUSTOM_OPS_CUDA STREQUAL "OFF")
    # Build trees of custom-ops <= 0.1 cached their default here, without a help string.
    get_property(_help CACHE TORCH_CUDA_ARCH_LIST PROPERTY HELPSTRING)
    if(DEFINED CACHE{TORCH_CUDA_ARCH_LIST} AND _help STREQUAL "")
      unset(TORCH_CUDA_ARCH_LIST CACHE)
    endif()
    if(DEFINED CACHE{TORCH_CUDA_ARCH_LIST})
      set(_requested "$CACHE{TORCH_CUDA_ARCH_LIST}")
      set(_source "-DTORCH_CUDA_ARCH_LIST")
    else()
      set(_requested "$ENV{TORCH_CUDA_ARCH_LIST}")
      set(_source "the environment's TORCH_CUDA_ARCH_LIST")
    endif()
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-code
                    OUTPUT_VARIABLE _nvcc_archs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    string(REGEX REPLACE "[ \t\r\n]+" ";" _nvcc_archs "${_nvcc_archs}")
    set(_torch_archs "")
    if(_requested STREQUAL "")
      set(_source "torch's architectures that nvcc compiles; set TORCH_CUDA_ARCH_LIST to choose")
      if(CUSTOM_OPS_TORCH_ARCH_FLAGS)  # given by scripts/packaging when the build cannot import torch
        set(_torch_archs "${CUSTOM_OPS_TORCH_ARCH_FLAGS}")
      else()
        find_package(Python3 QUIET COMPONENTS Interpreter)
        if(Python3_Interpreter_FOUND)
          execute_process(
            COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch._C._cuda_getArchFlags() or '')"
            OUTPUT_VARIABLE _torch_archs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        endif()
      endif()
      string(REGEX REPLACE "[ \t]+" ";" _torch_archs "${_torch_archs}")
    endif()
    custom_ops_choose_cuda_archs(CUSTOM_OPS_CUDA_ARCHS _dropped _error "${_requested}" "${_torch_archs}" "${_nvcc_archs}")
    if(_error)
      message(FATAL_ERROR "custom-ops: ${_error}")
    endif()
    if(_dropped)
      list(JOIN _dropped " " _dropped)
      string(APPEND _source " (left out, nvcc cannot compile them: ${_dropped})")
    endif()
    set(TORCH_CUDA_ARCH_LIST "${CUSTOM_OPS_CUDA_ARCHS}")
    message(STATUS "custom-ops: CUDA architectures ${CUSTOM_OPS_CUDA_ARCHS}, from ${_source}")
  endif()
endmacro()
