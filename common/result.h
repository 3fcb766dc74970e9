#pragma once
// Errors as values at the library boundary: every planner entry point that can fail on
// user input returns Result<T>. The CLI maps ErrorKind to the exit statuses of docs/architecture.md.
#include <string>
#include <utility>
#include <variant>

namespace longctx {

enum class ErrorKind {
  BadInput,  // exit 2: the message names the field and the fix
  NoFit,     // exit 3: no plan fits the budget
  Internal,  // exit 1
};

struct Error {
  ErrorKind kind = ErrorKind::BadInput;
  std::string field;    // the input that is wrong ("model.hidden_size", "--seq"); may be empty
  std::string message;  // what is wrong and how to fix it

  static Error bad_input(std::string field, std::string message) {
    return {ErrorKind::BadInput, std::move(field), std::move(message)};
  }
  std::string what() const { return field.empty() ? message : field + ": " + message; }
};

int exit_status(ErrorKind kind);

// A value or an Error. REQUIRES: ok() before value(), !ok() before error().
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace longctx

// Binds the value of a Result expression to `var`, or returns its error from the caller.
#define LONGCTX_CONCAT_INNER(a, b) a##b
#define LONGCTX_CONCAT(a, b) LONGCTX_CONCAT_INNER(a, b)
#define LONGCTX_TRY(var, expr)                                   \
  auto LONGCTX_CONCAT(result_, __LINE__) = (expr);               \
  if (!LONGCTX_CONCAT(result_, __LINE__).ok())                   \
    return LONGCTX_CONCAT(result_, __LINE__).error();            \
  var = std::move(LONGCTX_CONCAT(result_, __LINE__)).value()
