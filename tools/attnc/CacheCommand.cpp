// attnc cache: the on-disk kernel cache's statistics, or clearing it.
#include "Commands.h"

#include "attn/runtime/KernelCache.h"

#include <fmt/format.h>

namespace attn {

namespace cl = llvm::cl;

namespace {

class CacheCommand final : public Command {
public:
  CacheCommand()
      : Command("cache", "cache stats|clear", "Kernel cache: stats | clear") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  CallOpt<std::string> Action{cl::Positional, cl::desc("stats|clear"),
                              cl::Required, cl::sub(Sub)};
};

int CacheCommand::run(const dsl::Registry &, llvm::raw_ostream &OS) {
  runtime::KernelCache &Cache = runtime::KernelCache::global();
  if (Action == "stats") {
    runtime::CacheStats S = Cache.stats();
    OS << fmt::format("directory: {}\nentries:   {}\nbytes:     {}\n",
                      S.Directory, S.Entries, S.Bytes);
    // Left by writers that died before their rename, and names that are
    // not regular files: what `cache clear` removes besides the entries.
    OS << fmt::format("temporaries: {} ({} bytes)\nskipped:   {}\n",
                      S.Temporaries, S.TemporaryBytes, S.Skipped);
    return 0;
  }
  if (Action == "clear") {
    OS << fmt::format("removed {} entries from {}\n", Cache.clear(),
                      Cache.stats().Directory);
    return 0;
  }
  throw UsageError("cache: unknown action '" + Action +
                  "'; expected stats or clear");
}

} // namespace

std::unique_ptr<Command> makeCacheCommand() {
  return std::make_unique<CacheCommand>();
}

} // namespace attn
