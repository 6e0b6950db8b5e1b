// Fuzz target: runtime::parseTuneFile, then a serialize/parse round trip.
#include "FuzzTargets.h"

#include "attn/runtime/TuneFile.h"

#include <string>

namespace attn::fuzz {

Outcome fuzzTuneFile(const uint8_t *Data, size_t Size) {
  llvm::StringRef Text(reinterpret_cast<const char *>(Data), Size);
  return classify([&] {
    runtime::TuneFileData Parsed = runtime::parseTuneFile(Text, "fuzz.json");
    // What the writer wrote, the reader reads back to the same text: a file
    // that merges (mergeIntoTuneFile re-reads and rewrites) must not drift.
    std::string Written = runtime::serializeTuneFile(Parsed);
    runtime::TuneFileData Reread =
        runtime::parseTuneFile(Written, "fuzz-rewritten.json");
    if (runtime::serializeTuneFile(Reread) != Written)
      throw OracleFailure("tune_file: serialize(parse(serialize(d))) differs "
                          "from serialize(d)");
    if (Reread.Entries.size() != Parsed.Entries.size())
      throw OracleFailure("tune_file: the round trip changed the entry count");
  });
}

} // namespace attn::fuzz
