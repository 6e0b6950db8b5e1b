// The three error kinds of attnc: user mistakes, compiler bugs, planned features.
#ifndef ATTN_ERROR_H
#define ATTN_ERROR_H

#include <stdexcept>
#include <string>

namespace attn {

/// Base of every error attnc throws. Library code never prints or exits; it
/// throws one of the kinds below and the caller (the CLI, a test) reports it.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A definition or an input is wrong. The message says what and where:
/// the function, the symbol or argument, and the expected value.
class UserError : public Error {
public:
  using Error::Error;
};

/// A bug in attnc itself (an invariant that should have held did not).
class InternalError : public Error {
public:
  explicit InternalError(const std::string &What)
      : Error("internal error: " + What) {}
};

/// A feature that is planned but not built yet.
class NotSupportedYet : public Error {
public:
  explicit NotSupportedYet(const std::string &What)
      : Error("not supported yet: " + What) {}
};

} // namespace attn

#endif
