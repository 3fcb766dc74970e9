#pragma once
// An exception's message for an error longctx prints: LibTorch's c10::Error carries its C++
// backtrace in what() (16 to 20 "frame #N" lines of library addresses), which said nothing
// to a user whose checkpoint file was damaged or whose peer rank never came; its message
// without it is what_without_backtrace().
#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace longctx::runtime {

inline std::string exception_text(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace longctx::runtime
