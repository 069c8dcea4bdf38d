# SPDX-License-Identifier: BSD-3-Clause
# ctest script: LIBRARY must use the shared libstdc++ and define none of libstdc++'s own code
# (locale, codecvt), i.e. carry no second C++ runtime (see CustomOpsToolchain.cmake).
# cmake -DLIBRARY=... -DNM=... -DOBJDUMP=... -P CheckNoPrivateLibstdcxx.cmake
execute_process(COMMAND "${OBJDUMP}" -p "${LIBRARY}" OUTPUT_VARIABLE headers COMMAND_ERROR_IS_FATAL ANY)
if(NOT headers MATCHES "NEEDED +libstdc\\+\\+\\.so")
  message(FATAL_ERROR "${LIBRARY} does not need libstdc++.so: it was linked with a static libstdc++")
endif()
execute_process(COMMAND "${NM}" -D --defined-only "${LIBRARY}" OUTPUT_VARIABLE symbols COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL "[^\n]*_ZN[K]?St(6locale|7codecvt)[^\n]*" private "${symbols}")
list(LENGTH private count)
if(count GREATER 0)
  list(GET private 0 first)
  message(FATAL_ERROR "${LIBRARY} defines ${count} symbols of libstdc++'s locale code (e.g. ${first}): "
                      "it carries a copy of libstdc++ that crashes beside libtorch's")
endif()
message(STATUS "${LIBRARY}: shared libstdc++, no private copy")
