// Runtime error kinds: bad call arguments, NVRTC failures, driver failures.
#ifndef ATTN_RUNTIME_ERRORS_H
#define ATTN_RUNTIME_ERRORS_H

#include "attn/Error.h"

#include <string>

namespace attn {

/// An argument of a runtime call is wrong; the message names the argument
/// and the expected value. Thrown before anything is launched.
class InvalidArgument : public UserError {
public:
  using UserError::UserError;
};

/// NVRTC rejected generated code. Carries the log, the variant key and the
/// path of the dumped source.
class CompileError : public Error {
public:
  CompileError(const std::string &Key, const std::string &Log,
               const std::string &DumpPath)
      : Error("NVRTC failed to compile " + Key + " (source dumped to " +
              DumpPath + "):\n" + Log),
        Key(Key), Log(Log), DumpPath(DumpPath) {}
  std::string Key, Log, DumpPath;
};

/// NVRTC cannot be loaded, so a kernel that no bundle holds cannot be
/// compiled: the message says what was tried and what to do.
class CompilerUnavailable : public Error {
public:
  using Error::Error;
};

/// The CUDA driver is missing or a driver call failed.
class DriverError : public Error {
public:
  using Error::Error;
};

} // namespace attn

#endif
