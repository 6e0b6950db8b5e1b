// attnc device library: definitions shared by every kernel skeleton.
#ifndef ATTNC_COMMON_CUH
#define ATTNC_COMMON_CUH

namespace attnc {

// Skeletons reinterpret accumulator storage and compute shared-memory byte
// offsets assuming 32-bit float; fail loudly on a target where that breaks.
static_assert(sizeof(float) == 4, "attnc kernels assume a 32-bit float");

} // namespace attnc

#endif
