# SPDX-License-Identifier: BSD-3-Clause
# custom_ops_find_torch(): find_package(Torch) so that it configures quietly and links right on
# real machines. Used by this project and, installed with the package, by CustomOpsConfig.cmake,
# so an app built with find_package(CustomOps) gets the same treatment.
#
# - No CUDA toolkit (most pip users): torch's config (Caffe2/public/cuda.cmake) stops with "uses
#   CUDA but I cannot find the CUDA libraries" for a CUDA build of torch, though nothing here needs
#   the toolkit without CUDA kernels. torch::cudart is the one toolkit target torch's exported
#   targets name; an empty one makes that config skip the search, and libtorch_cuda.so then finds
#   the CUDA runtime torch ships (its RPATH) at run time.
# - With a toolkit: enable_language(CUDA) always defines CMAKE_CUDA_ARCHITECTURES, which torch's
#   config warns about (torch takes TORCH_CUDA_ARCH_LIST). Enabling CUDA first and dropping the
#   default leaves nothing to warn about; OFF afterwards keeps CMake from adding arch flags of its own.
#   (CustomOpsConfig.cmake defaults TORCH_CUDA_ARCH_LIST to the library's own architectures.)
# - Linking executables: the toolkit's lib directory (on the rpath of anything linking torch's CUDA
#   libraries) may hold older copies of libraries that torch bundles (pip wheels:
#   site-packages/nvidia/*/lib; torch 2.15 with a 13.0 toolkit: libnccl.so.2 without ncclCommResume).
#   ld searches -rpath before the RPATH of libtorch_cuda.so, so torch's own directories go first
#   as -rpath-link (link time only; run time already follows libtorch_cuda.so's RPATH).
# - torch's wheels have kineto inside libtorch_cpu.so, but TorchConfig.cmake still looks for a
#   separate libkineto and warns "library kineto not found" to every consumer. Naming the library
#   that holds it answers that search (it is on the link line already), so there is no warning.
# - C++20 for nvcc: torch >= 2.14's headers need it, a target's cxx_std_20 asks it of CUDA sources
#   too, and CMake before 3.26 knows no flag for it.
macro(custom_ops_find_torch)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER_LOADED)
    check_language(CUDA)
  endif()
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_COMPILER_LOADED)
      enable_language(CUDA)
      # Without an architecture list torch probes the GPUs with a CUDA try_run, which needs one.
      if(TORCH_CUDA_ARCH_LIST OR NOT "$ENV{TORCH_CUDA_ARCH_LIST}" STREQUAL "")
        unset(CMAKE_CUDA_ARCHITECTURES)
        unset(CMAKE_CUDA_ARCHITECTURES CACHE)
      endif()
    endif()
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
  elseif(NOT TARGET torch::cudart)
    add_library(torch::cudart INTERFACE IMPORTED)
  endif()
  if(NOT DEFINED CACHE{kineto_LIBRARY})
    find_file(_custom_ops_torch_config TorchConfig.cmake HINTS "${Torch_DIR}" PATH_SUFFIXES share/cmake/Torch Torch
              NO_CACHE)
    if(_custom_ops_torch_config)
      get_filename_component(_custom_ops_torch_lib "${_custom_ops_torch_config}/../../../../lib" ABSOLUTE)
      file(GLOB _custom_ops_kineto "${_custom_ops_torch_lib}/libkineto.*")
      if(NOT _custom_ops_kineto AND EXISTS "${_custom_ops_torch_lib}/libtorch_cpu.so")
        set(kineto_LIBRARY "${_custom_ops_torch_lib}/libtorch_cpu.so" CACHE FILEPATH
            "kineto, which torch's wheels build into libtorch_cpu.so (set by custom-ops)")
      endif()
    endif()
  endif()
  find_package(Torch ${ARGN})
  set(CMAKE_CUDA_ARCHITECTURES OFF)
endmacro()

# The directories of the libraries torch bundles, as an ld option for targets that link torch.
function(custom_ops_torch_rpath_link_option result)
  get_filename_component(torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
  file(GLOB bundled LIST_DIRECTORIES true "${torch_lib_dir}/../../nvidia/*/lib")
  if(bundled)
    list(JOIN bundled ":" joined)
    set(${result} "LINKER:-rpath-link,${joined}" PARENT_SCOPE)
  else()
    set(${result} "" PARENT_SCOPE)
  endif()
endfunction()
