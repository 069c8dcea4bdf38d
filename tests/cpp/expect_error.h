// SPDX-License-Identifier: BSD-3-Clause
// EXPECT_C10_ERROR(statement, "part", ...): the statement throws c10::Error (which is a
// std::exception) and its message, without the C++ backtrace, contains every part.
#pragma once

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace custom_ops_test {

inline ::testing::AssertionResult MessageContains(
    const c10::Error& error, std::initializer_list<std::string_view> parts) {
  const std::string message = error.what_without_backtrace();
  for (const auto part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << message;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace custom_ops_test

#define EXPECT_C10_ERROR(statement, ...)                                                        \
  EXPECT_THROW(                                                                                 \
      {                                                                                         \
        try {                                                                                   \
          statement;                                                                            \
        } catch (const c10::Error& custom_ops_test_error) {                                     \
          EXPECT_TRUE(::custom_ops_test::MessageContains(custom_ops_test_error, {__VA_ARGS__})) \
              << "thrown by: " #statement;                                                      \
          throw;                                                                                \
        }                                                                                       \
      },                                                                                        \
      c10::Error)
