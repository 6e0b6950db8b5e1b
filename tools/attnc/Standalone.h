// `attnc emit --standalone`: one .cu with the device library inlined.
#ifndef ATTN_TOOLS_ATTNC_STANDALONE_H
#define ATTN_TOOLS_ATTNC_STANDALONE_H

#include <string>

namespace attn {

/// \p Source with every `#include "attnc/..."` replaced by that header's
/// text (recursively, each header once), so that plain `nvcc -c` builds it
/// with no include path. InternalError for an include of an unknown header.
std::string inlineDeviceLibrary(const std::string &Source);

} // namespace attn

#endif
