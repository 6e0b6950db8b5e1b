// Definitions from a plugin: load it, take its traced graphs, unload it.
#include "DslInternal.h"
#include "attnc/plugin.h"

#include "attn/Error.h"

#include <dlfcn.h>

#include <vector>

using namespace attn;
using namespace attn::capi;

struct attnc_definition_list {
  std::vector<std::unique_ptr<attnc_definition>> Defs;
};

namespace {

/// What the plugin's entry point hands over.
struct Collected {
  std::vector<std::string> Graphs;
  std::string Failure;
  bool Failed = false;
};

void addGraph(void *Ctx, const char *Json) {
  static_cast<Collected *>(Ctx)->Graphs.emplace_back(Json ? Json : "");
}

void failPlugin(void *Ctx, const char *Message) {
  auto *C = static_cast<Collected *>(Ctx);
  C->Failed = true;
  C->Failure = Message ? Message : "";
}

/// Closes the library however the loading ends; nothing of it is used
/// afterwards (its strings were copied). dlopen rather than
/// llvm::sys::DynamicLibrary: LLVM 14's opens every library RTLD_LAZY |
/// RTLD_GLOBAL and never closes it, so a plugin with an unresolved symbol
/// would load and then kill the process at its entry point's first call
/// (here it is refused by name: CapiPluginTest), and the unload that
/// attnc_plugin_load documents would not happen.
struct Library {
  void *Handle;
  ~Library() {
    if (Handle)
      dlclose(Handle);
  }
};

Collected collect(const std::string &Path) {
  Library L{dlopen(Path.c_str(), RTLD_NOW | RTLD_LOCAL)};
  if (!L.Handle) {
    const char *Why = dlerror();
    throw UserError("plugin '" + Path + "': cannot load it: " +
                    (Why ? Why : "unknown reason"));
  }
  auto Entry = reinterpret_cast<attnc_plugin_entry_fn>(
      dlsym(L.Handle, ATTNC_PLUGIN_ENTRY));
  if (!Entry)
    throw UserError("plugin '" + Path + "': it has no " ATTNC_PLUGIN_ENTRY
                    " function; build it with attnc_add_plugin "
                    "(cmake/AttncPlugin.cmake)");
  Collected C;
  int Status = Entry(&C, addGraph, failPlugin);
  if (Status != 0 || C.Failed)
    throw UserError("plugin '" + Path + "': " +
                    (C.Failure.empty() ? "failed without a message"
                                       : C.Failure));
  if (C.Graphs.empty())
    throw UserError("plugin '" + Path + "': it registers no definitions");
  return C;
}

} // namespace

attnc_status attnc_plugin_load(const char *path, attnc_definition_list **out) {
  return guarded([&] {
    requireNonNull(path, "attnc_plugin_load", "path");
    requireNonNull(out, "attnc_plugin_load", "out");
    *out = nullptr;
    Collected C = collect(path);
    auto List = std::make_unique<attnc_definition_list>();
    for (std::string &Json : C.Graphs)
      List->Defs.emplace_back(graphDefinition(std::move(Json), "trace"));
    *out = List.release();
  });
}

size_t attnc_definition_list_size(const attnc_definition_list *l) {
  return l ? l->Defs.size() : 0;
}

attnc_status attnc_definition_list_get(const attnc_definition_list *list,
                                       size_t i, attnc_definition **out) {
  return guarded([&] {
    requireNonNull(list, "attnc_definition_list_get", "list");
    requireNonNull(out, "attnc_definition_list_get", "out");
    if (i >= list->Defs.size())
      throw UserError("attnc_definition_list_get: index " +
                      std::to_string(i) + " out of range (" +
                      std::to_string(list->Defs.size()) + " definitions)");
    *out = new attnc_definition(*list->Defs[i]);
  });
}

void attnc_definition_list_release(attnc_definition_list *list) {
  delete list;
}
