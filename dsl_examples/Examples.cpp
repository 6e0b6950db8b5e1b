// Registration of the shipped examples.
#include "Examples.h"

namespace attn::examples {

void registerExamples(dsl::Registry &R) {
  R.add(mha());
  R.add(sigmoidAttn());
  R.add(reluAttn());
  R.add(retention());
  R.add(retentionCombine());
  R.add(alibiLearnable());
  R.add(softcapLearnable());
  R.add(mhaDocumentIds());
  R.add(mhaPrefixLm());
  R.add(mhaSlidingWindow());
  R.add(mhaDocument());
  R.add(mhaChunked());
  R.add(mamba2());
  R.add(simpleGla());
  R.add(retentionLinear());
}

} // namespace attn::examples
