// Inlining of the embedded device library into generated source.
#include "Standalone.h"

#include "attn/Error.h"
#include "attn/runtime/DeviceLibrary.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"

namespace attn {

static void inlineInto(llvm::StringRef Text, llvm::StringSet<> &Done,
                       std::string &Out) {
  while (!Text.empty()) {
    auto [Line, Rest] = Text.split('\n');
    Text = Rest;
    llvm::StringRef T = Line.trim();
    if (T.consume_front("#include \"attnc/")) {
      llvm::StringRef Name = T.take_until([](char C) { return C == '"'; });
      std::string Full = "attnc/" + Name.str();
      const runtime::EmbeddedHeader *H = runtime::findDeviceHeader(Full);
      if (!H)
        throw InternalError("standalone: unknown device header " + Full);
      if (Done.insert(Full).second) {
        Out += "// ---- begin " + Full + " ----\n";
        inlineInto(H->Contents, Done, Out);
        Out += "// ---- end " + Full + " ----\n";
      }
      continue;
    }
    Out += Line.str();
    Out += '\n';
  }
}

std::string inlineDeviceLibrary(const std::string &Source) {
  std::string Out;
  llvm::StringSet<> Done;
  inlineInto(Source, Done, Out);
  return Out;
}

} // namespace attn
