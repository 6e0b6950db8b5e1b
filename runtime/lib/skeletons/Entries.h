// The skeleton entries, one function each (runtime/lib/skeletons/*.cpp);
// skeletonTable() lists them, the only place that does.
#ifndef ATTN_RUNTIME_LIB_SKELETONS_ENTRIES_H
#define ATTN_RUNTIME_LIB_SKELETONS_ENTRIES_H

#include "attn/runtime/Skeleton.h"

namespace attn::runtime::skeletons {

const Skeleton &fwdSm90();
const Skeleton &fwdSm80();
const Skeleton &bwdSm90();
const Skeleton &bwdSm80();
const Skeleton &linearChunk();
const Skeleton &decodeSm80();

} // namespace attn::runtime::skeletons

#endif
