// core/error.h — the one exception type of swift.cpp, and the checks that throw it.
//
// Invariants:
//  - User input never aborts the process: every failure is a swift::Error carrying a message that names
//    what was being done (op, file, field, argument) and, where possible, what to do about it.
//  - SWIFT_CHECK records the C++ source location; the message itself is for the user.
//  - Subcommands catch swift::Error once, print what() and exit non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace swift {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws swift::Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* condition, const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace swift

// SWIFT_CHECK(cond, "format {}", args...): throws swift::Error naming the failed condition when cond is false.
#define SWIFT_CHECK(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                 \
      ::swift::detail::check_failed(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__));     \
    }                                                                                           \
  } while (0)
