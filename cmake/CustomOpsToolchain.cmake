# Refuses a C++ compiler that links libstdc++ statically.
#
# Our library shares C++ objects (strings, exceptions, streams) with libtorch, which uses the
# system's libstdc++.so.6. A library that carries its own copy of libstdc++ (from libstdc++.a) runs
# two C++ runtimes in one process: it passes the C++ tests and then crashes in Python the first time
# an error message formats a number (locale facets of one runtime used by the other). Some GCC
# builds ship only libstdc++.a; the H200 image's CXX=/opt/gcc/bin/g++ is one. Fail here, clearly,
# instead of building a library that crashes later.

function(custom_ops_require_shared_libstdcxx)
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()  # libstdc++ is GCC's runtime; other toolchains are not checked
  endif()
  if(NOT CMAKE_OBJDUMP)
    message(WARNING "custom-ops: no objdump found, cannot check how ${CMAKE_CXX_COMPILER} links libstdc++")
    return()
  endif()
  set(probe "${CMAKE_BINARY_DIR}/CMakeFiles/custom_ops_libstdcxx_probe")
  try_compile(linked
    SOURCE_FROM_CONTENT probe.cpp
      "#include <sstream>\nint main() { std::ostringstream s; s << 42; return s.str().size() == 2 ? 0 : 1; }\n"
    CXX_STANDARD 17
    COPY_FILE "${probe}"
    OUTPUT_VARIABLE log)
  if(NOT linked)
    message(FATAL_ERROR "custom-ops: ${CMAKE_CXX_COMPILER} cannot build a C++ program:\n${log}")
  endif()
  execute_process(COMMAND "${CMAKE_OBJDUMP}" -p "${probe}" OUTPUT_VARIABLE headers RESULT_VARIABLE failed)
  if(failed)
    message(WARNING "custom-ops: ${CMAKE_OBJDUMP} -p failed, cannot check how ${CMAKE_CXX_COMPILER} links libstdc++")
  elseif(NOT headers MATCHES "NEEDED +libstdc\\+\\+\\.so")
    message(FATAL_ERROR
      "custom-ops: ${CMAKE_CXX_COMPILER} links libstdc++ statically (a C++ program it builds does not "
      "need libstdc++.so). libcustom_ops.so would carry a second C++ runtime beside libtorch's and crash "
      "when loaded into Python. Use a compiler that links the shared libstdc++, e.g. "
      "`CXX=/usr/bin/g++ make ...` or -DCMAKE_CXX_COMPILER=/usr/bin/g++ in a fresh build directory.")
  endif()
endfunction()

custom_ops_require_shared_libstdcxx()

# nvcc's host compiler is otherwise the first g++ on PATH, which need not be CMAKE_CXX_COMPILER,
# and its library directories join our link line: on the H200 image /opt/gcc's came first there
# and its libstdc++.a was linked in, though CMAKE_CXX_COMPILER was the system g++. One C++
# compiler for every object. (Set before find_package(Torch), which enables CUDA.)
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX})
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc's host compiler: the C++ compiler")
endif()
