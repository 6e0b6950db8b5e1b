// Progress of long CLI work (check --all, the bench sweeps): a live line on a
// terminal, rewritten in place at each step, and one plain line per step
// otherwise, so that logs and tests see every step.
#ifndef ATTN_TOOLS_ATTNC_PROGRESS_H
#define ATTN_TOOLS_ATTNC_PROGRESS_H

#include "attn/runtime/EventTiming.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <string>

namespace attn {

/// Steps 1..Total of a task named \p What, written to \p OS (stderr: the
/// results go to stdout, which the caller flushes before each step so that
/// a shared log keeps each result whole):
///
///   check [3/14] retention (1.2 s)
///
/// Live when \p OS is a terminal: the line is rewritten in place and cleared
/// by done(), which then writes the summary on a line of its own.
class ProgressLine {
public:
  ProgressLine(llvm::raw_ostream &OS, std::string What, size_t Total)
      : OS(OS), What(std::move(What)), Total(Total),
        Live(OS.is_displayed()) {}
  ProgressLine(const ProgressLine &) = delete;
  ProgressLine &operator=(const ProgressLine &) = delete;

  /// The next step begins; \p Name says what it works on.
  void step(llvm::StringRef Name) {
    ++Done;
    std::string Line = fmt::format("{} [{}/{}] {} ({:.1f} s)", What, Done,
                                   Total, Name.str(), Timer.seconds());
    if (Live)
      OS << "\r\x1b[K" << Line;
    else
      OS << Line << "\n";
    OS.flush();
  }

  /// The work ended: "<What>: <Summary> in 3.2 s" (the live line cleared).
  void done(llvm::StringRef Summary) {
    if (Live)
      OS << "\r\x1b[K";
    OS << fmt::format("{}: {} in {:.1f} s\n", What, Summary.str(),
                      Timer.seconds());
    OS.flush();
  }

private:
  llvm::raw_ostream &OS;
  std::string What;
  size_t Total;
  size_t Done = 0;
  bool Live;
  runtime::WallTimer Timer;
};

} // namespace attn

#endif
