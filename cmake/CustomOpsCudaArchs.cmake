# SPDX-License-Identifier: BSD-3-Clause
# The GPU architectures of the CUDA kernels, chosen as torch.utils.cpp_extension chooses them, in
# TORCH_CUDA_ARCH_LIST syntax ("8.0;9.0+PTX", names such as "Ampere;Hopper", or "native"):
# -DTORCH_CUDA_ARCH_LIST, else the environment variable TORCH_CUDA_ARCH_LIST, as given (names
# expanded as cpp_extension expands them). Unset or "native": the visible GPUs' architectures,
# each clamped to the newest torch was built for and nvcc compiles, with PTX of the newest. Unset
# with no GPU visible (a build machine): every architecture torch was built for that nvcc compiles,
# PTX of the newest (cpp_extension errors there). An architecture nvcc cannot compile is a
# configure error, not a failure minutes into the build; so is an nvcc whose CUDA major version
# differs from torch's (cpp_extension refuses it too).

# cpp_extension's names, in its order ("Ampere+Tegra" is replaced before "Ampere"); "," for ";".
set(_CUSTOM_OPS_NAMED_ARCHS
  "Kepler+Tesla=3.7" "Kepler=3.5+PTX" "Maxwell+Tegra=5.3" "Maxwell=5.0,5.2+PTX" "Pascal=6.0,6.1+PTX"
  "Volta+Tegra=7.2" "Volta=7.0+PTX" "Turing=7.5+PTX" "Ampere+Tegra=8.7" "Ampere=8.0,8.6+PTX"
  "Ada=8.9+PTX" "Hopper=9.0+PTX" "Blackwell+Tegra=11.0" "Blackwell=10.0,10.3,12.0,12.1+PTX" "Rubin=10.7+PTX")

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

# The list in ascending order, duplicates removed, the newest with +PTX.
function(_custom_ops_sorted_with_ptx result)
  set(archs ${ARGN})
  list(REMOVE_DUPLICATES archs)
  list(SORT archs COMPARE NATURAL)
  list(POP_BACK archs newest)
  list(APPEND archs "${newest}+PTX")
  set(${result} "${archs}" PARENT_SCOPE)
endfunction()

# Pure (lists in, lists out), so tests/python/test_build_options.py checks it with `cmake -P`, no
# GPU or toolkit needed. requested: what the user set ("" for nothing); torch_archs: torch's
# compiled architectures ("sm_75;sm_80;compute_90"; "" when unknown); nvcc_archs: `nvcc
# --list-gpu-code` ("" when unknown); visible: the compute capabilities of the visible GPUs
# ("8.6;9.0"; "" for none). Sets result to the chosen list, dropped to what was wanted and left out
# (nvcc cannot compile it), error to a message when the request cannot be built.
function(custom_ops_choose_cuda_archs result dropped error requested torch_archs nvcc_archs visible)
  _custom_ops_arch_numbers(compilable ${nvcc_archs})
  _custom_ops_arch_numbers(torch_numbers ${torch_archs})
  set(${result} "" PARENT_SCOPE)
  set(${dropped} "" PARENT_SCOPE)
  set(${error} "" PARENT_SCOPE)
  string(STRIP "${requested}" requested)
  if(requested STREQUAL "native" AND visible STREQUAL "")
    set(${error} "TORCH_CUDA_ARCH_LIST=native, but no GPU is visible: name the architectures, e.g. TORCH_CUDA_ARCH_LIST=Hopper" PARENT_SCOPE)
    return()
  endif()
  if(NOT requested STREQUAL "" AND NOT requested STREQUAL "native")
    string(REPLACE " " ";" requested "${requested}")
    foreach(pair IN LISTS _CUSTOM_OPS_NAMED_ARCHS)
      string(REGEX MATCH "^[^=]+" name "${pair}")
      string(REGEX REPLACE "^[^=]+=" "" archs "${pair}")
      string(REPLACE "," ";" archs "${archs}")
      string(REPLACE "${name}" "${archs}" requested "${requested}")
    endforeach()
    list(REMOVE_ITEM requested "")
    list(REMOVE_DUPLICATES requested)
    foreach(arch IN LISTS requested)
      if(NOT arch MATCHES "^[0-9]+\\.[0-9][af]?(\\+PTX)?$")
        set(${error} "TORCH_CUDA_ARCH_LIST entry '${arch}' is not a compute capability such as 8.6 or 9.0+PTX, an architecture name such as Ampere or Hopper, or native" PARENT_SCOPE)
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
  set(wanted ${torch_numbers})
  if(NOT wanted)
    set(wanted 7.5 8.0 8.6 9.0 10.0 12.0)
  endif()
  list(REMOVE_DUPLICATES wanted)
  set(chosen "")
  set(left_out "")
  if(NOT visible STREQUAL "")
    # The visible GPUs: each clamped to the newest architecture torch was built for (as
    # cpp_extension does), then to the newest nvcc compiles; PTX of the newest runs on the rest.
    string(REGEX REPLACE "[af]" "" newest_of_torch "${wanted}")
    list(SORT newest_of_torch COMPARE NATURAL)
    list(GET newest_of_torch -1 newest_of_torch)
    string(REPLACE " " ";" visible "${visible}")
    foreach(gpu IN LISTS visible)
      set(arch "${gpu}")
      if(arch VERSION_GREATER newest_of_torch)
        set(arch "${newest_of_torch}")
      endif()
      if(compilable AND NOT arch IN_LIST compilable)
        set(below "")
        foreach(candidate IN LISTS compilable)
          if(candidate MATCHES "^[0-9]+\\.[0-9]$" AND NOT candidate VERSION_GREATER arch)
            list(APPEND below "${candidate}")
          endif()
        endforeach()
        if(NOT below)
          list(APPEND left_out "${gpu}")
          continue()
        endif()
        list(SORT below COMPARE NATURAL)
        list(GET below -1 arch)
      endif()
      list(APPEND chosen "${arch}")
    endforeach()
    if(chosen)
      _custom_ops_sorted_with_ptx(chosen ${chosen})
      set(${result} "${chosen}" PARENT_SCOPE)
      set(${dropped} "${left_out}" PARENT_SCOPE)
      return()
    endif()
    set(left_out_gpus "${left_out}")  # none of the GPUs can be built for: torch's list, as with none visible
    set(left_out "")
  endif()
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
  list(PREPEND left_out ${left_out_gpus})
  set(${dropped} "${left_out}" PARENT_SCOPE)
endfunction()

# Pure too: error is set when nvcc's CUDA release ("12.4") and torch's ("13.2") differ in their
# major version, or is empty (also when either is unknown).
function(custom_ops_check_cuda_major error nvcc_cuda torch_cuda)
  set(${error} "" PARENT_SCOPE)
  if(nvcc_cuda MATCHES "^([0-9]+)\\." AND torch_cuda MATCHES "^([0-9]+)\\.")
    string(REGEX MATCH "^[0-9]+" nvcc_major "${nvcc_cuda}")
    string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda}")
    if(NOT nvcc_major EQUAL torch_major)
      set(${error} "nvcc is CUDA ${nvcc_cuda} but torch was built with CUDA ${torch_cuda}: install a CUDA ${torch_major} toolkit (put its nvcc first on PATH or set CUDACXX), or configure with -DCUSTOM_OPS_CUDA=OFF" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# Sets TORCH_CUDA_ARCH_LIST (a plain variable, read by torch's CMake config) and
# CUSTOM_OPS_CUDA_ARCHS (recorded in the library, the package and the CMake config) before
# find_package(Torch). Only when CUDA kernels may be built: a CUDA compiler is found and
# CUSTOM_OPS_CUDA is not OFF. What torch says (its architectures, CUDA release and the visible GPUs)
# comes from the Python CMake finds, or from scripts/packaging when the build cannot import torch
# (CUSTOM_OPS_TORCH_ARCH_FLAGS, CUSTOM_OPS_TORCH_CUDA_VERSION, CUSTOM_OPS_VISIBLE_GPUS).
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
    execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --version OUTPUT_VARIABLE _nvcc_version ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _nvcc_version "${_nvcc_version}")
    set(_nvcc_version "${CMAKE_MATCH_1}")
    set(_torch_archs "${CUSTOM_OPS_TORCH_ARCH_FLAGS}")
    set(_torch_cuda "${CUSTOM_OPS_TORCH_CUDA_VERSION}")
    set(_visible "${CUSTOM_OPS_VISIBLE_GPUS}")
    if(NOT DEFINED CUSTOM_OPS_TORCH_ARCH_FLAGS)
      find_package(Python3 QUIET COMPONENTS Interpreter)
      if(Python3_Interpreter_FOUND)
        # Three lines: torch's architectures, its CUDA release, the visible GPUs' capabilities (as
        # cpp_extension counts them: torch.cuda, so CUDA_VISIBLE_DEVICES applies).
        execute_process(
          COMMAND "${Python3_EXECUTABLE}" -W ignore -c
            "import torch; c = torch.cuda; print(getattr(torch._C, '_cuda_getArchFlags', str)() or ''); print(torch.version.cuda or ''); print(' '.join('%d.%d' % c.get_device_capability(i) for i in range(c.device_count())))"
          OUTPUT_VARIABLE _torch_facts ERROR_QUIET)
        string(REPLACE "\n" ";" _torch_facts "${_torch_facts}")
        list(LENGTH _torch_facts _count)
        if(_count GREATER_EQUAL 3)
          list(GET _torch_facts 0 _torch_archs)
          list(GET _torch_facts 1 _torch_cuda)
          list(GET _torch_facts 2 _visible)
        endif()
      endif()
    endif()
    custom_ops_check_cuda_major(_error "${_nvcc_version}" "${_torch_cuda}")
    if(_error)
      message(FATAL_ERROR "custom-ops: ${_error}")
    endif()
    string(REGEX REPLACE "[ \t]+" ";" _torch_archs "${_torch_archs}")
    string(REGEX REPLACE "[ \t]+" ";" _visible "${_visible}")
    string(STRIP "${_requested}" _requested)
    if(_requested STREQUAL "" OR _requested STREQUAL "native")
      if(_visible)
        list(JOIN _visible " " _gpus)
        set(_source "the visible GPUs (${_gpus}); set TORCH_CUDA_ARCH_LIST to choose")
      else()
        set(_source "torch's architectures that nvcc compiles, no GPU visible; set TORCH_CUDA_ARCH_LIST to choose")
      endif()
    endif()
    custom_ops_choose_cuda_archs(CUSTOM_OPS_CUDA_ARCHS _dropped _error "${_requested}" "${_torch_archs}" "${_nvcc_archs}" "${_visible}")
    if(_error)
      message(FATAL_ERROR "custom-ops: ${_error}")
    endif()
    list(REMOVE_ITEM _dropped "")
    if(_dropped)
      list(JOIN _dropped " " _dropped)
      string(APPEND _source " (left out, nvcc cannot compile them: ${_dropped})")
    endif()
    set(TORCH_CUDA_ARCH_LIST "${CUSTOM_OPS_CUDA_ARCHS}")
    message(STATUS "custom-ops: CUDA architectures ${CUSTOM_OPS_CUDA_ARCHS}, from ${_source}")
  endif()
endmacro()
