// Strict template rendering.
#include "attn/codegen/Template.h"

#include "attn/Error.h"

#include "llvm/ADT/StringExtras.h"

#include <set>

namespace attn::codegen {

std::string render(llvm::StringRef TemplateName, llvm::StringRef Text,
                   const std::map<std::string, std::string> &Values) {
  std::string Out;
  Out.reserve(Text.size() * 2);
  std::set<std::string> Used;
  size_t Pos = 0;
  while (true) {
    size_t Open = Text.find("{{", Pos);
    if (Open == llvm::StringRef::npos) {
      Out += Text.substr(Pos).str();
      break;
    }
    Out += Text.slice(Pos, Open).str();
    size_t Close = Text.find("}}", Open + 2);
    if (Close == llvm::StringRef::npos)
      throw InternalError("template " + TemplateName.str() +
                          ": unclosed '{{' at offset " +
                          std::to_string(Open));
    llvm::StringRef Key = Text.slice(Open + 2, Close);
    bool Valid = !Key.empty();
    for (char C : Key)
      Valid = Valid && (llvm::isAlnum(C) || C == '_');
    if (!Valid)
      throw InternalError("template " + TemplateName.str() + ": bad slot '{{" +
                          Key.str() + "}}'");
    auto It = Values.find(Key.str());
    if (It == Values.end())
      throw InternalError("template " + TemplateName.str() +
                          ": no value for slot '" + Key.str() + "'");
    Out += It->second;
    Used.insert(Key.str());
    Pos = Close + 2;
  }
  for (const auto &[Key, Value] : Values)
    if (!Used.count(Key))
      throw InternalError("template " + TemplateName.str() + ": value '" +
                          Key + "' has no slot");
  return Out;
}

} // namespace attn::codegen
