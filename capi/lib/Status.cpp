// The C interface's error state: per-thread last message, exception mapping.
#include "CapiInternal.h"

#include "attn/Error.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <new>

namespace attn::capi {

static thread_local std::string LastError;

void setLastError(std::string Message) { LastError = std::move(Message); }

attnc_status statusOfCurrentException() noexcept {
  // The most derived kinds first: InvalidArgument is a UserError.
  try {
    throw;
  } catch (const InvalidArgument &E) {
    setLastError(E.what());
    return ATTNC_INVALID_ARGUMENT;
  } catch (const UserError &E) {
    setLastError(E.what());
    return ATTNC_USER_ERROR;
  } catch (const NotSupportedYet &E) {
    setLastError(E.what());
    return ATTNC_NOT_SUPPORTED_YET;
  } catch (const CompilerUnavailable &E) {
    // No NVRTC and no bundle with the kernel: it cannot be compiled.
    setLastError(E.what());
    return ATTNC_COMPILE_ERROR;
  } catch (const CompileError &E) {
    setLastError(E.what());
    return ATTNC_COMPILE_ERROR;
  } catch (const DriverError &E) {
    setLastError(E.what());
    return ATTNC_DRIVER_ERROR;
  } catch (const std::bad_alloc &) {
    setLastError("internal error: out of host memory");
    return ATTNC_INTERNAL_ERROR;
  } catch (const std::exception &E) {
    setLastError(E.what());
    return ATTNC_INTERNAL_ERROR;
  } catch (...) {
    setLastError("internal error: an unknown exception");
    return ATTNC_INTERNAL_ERROR;
  }
}

void requireNonNull(const void *Ptr, const char *Function,
                    const char *Argument) {
  if (!Ptr)
    throw UserError(fmt::format("{}: argument '{}' is NULL", Function,
                                Argument));
}

} // namespace attn::capi

using namespace attn::capi;

int attnc_abi_version(void) { return ATTNC_C_ABI_VERSION; }

const char *attnc_last_error(void) { return LastError.c_str(); }
