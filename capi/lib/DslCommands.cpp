// What a C-interface definition prints and generates, as the CLI's show,
// emit, compile and check do it (the same functions underneath).
#include "DslInternal.h"

#include "KernelChoice.h"
#include "Show.h"
#include "Standalone.h"

#include "attn/Error.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Checker.h"
#include "attn/runtime/KernelCache.h"

#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

using namespace attn;
using namespace attn::capi;

namespace {

/// \p Opt as the CLI's options would give it (its defaults for the fields
/// left NULL or 0).
KernelRequest requestOf(const attnc_kernel_options *Opt, bool ForCompile) {
  KernelRequest R;
  R.Dtype = "f16";
  R.Backend = "generated";
  R.ForCompile = ForCompile;
  if (!Opt)
    return R;
  if (Opt->dtype)
    R.Dtype = Opt->dtype;
  if (Opt->head_dim)
    R.HeadDim = Opt->head_dim;
  R.HeadDimV = Opt->head_dim_v;
  if (Opt->arch)
    R.Arch = Opt->arch;
  if (Opt->skeleton)
    R.Skeleton = Opt->skeleton;
  if (Opt->config)
    R.Config = Opt->config;
  if (Opt->backend)
    R.Backend = Opt->backend;
  R.Backward = Opt->backward != 0;
  return R;
}

ChosenKernel kernelOf(const attnc_definition &D,
                      const attnc_kernel_options *Opt, bool ForCompile) {
  return kernelForDefinition(requestOf(Opt, ForCompile), definitionKind(D),
                             definitionName(D),
                             [&] { return compileDefinition(D); });
}

} // namespace

const char *attnc_definition_kind(const attnc_definition *def) {
  if (!def)
    return "";
  return definitionKind(*def) == ir::DefinitionKind::Linear ? "linear"
                                                            : "attention";
}

attnc_status attnc_definition_ir(const attnc_definition *def,
                                 const char *after, attnc_text **out) {
  return guarded([&] {
    requireNonNull(def, "attnc_definition_ir", "def");
    requireNonNull(out, "attnc_definition_ir", "out");
    std::string Text;
    llvm::raw_string_ostream OS(Text);
    printShow(
        [&](const PassCallback &CB) { return compileDefinition(*def, CB); },
        after ? after : "", /*Json=*/false, OS);
    OS.flush();
    setText(out, std::move(Text));
  });
}

attnc_status attnc_definition_ir_json(const attnc_definition *def,
                                      attnc_text **out) {
  return guarded([&] {
    requireNonNull(def, "attnc_definition_ir_json", "def");
    requireNonNull(out, "attnc_definition_ir_json", "out");
    setText(out, ir::saveJSON(*compileDefinition(*def).Graph));
  });
}

attnc_status attnc_definition_emit(const attnc_definition *def,
                                   const attnc_kernel_options *opt,
                                   attnc_text **out) {
  return guarded([&] {
    requireNonNull(def, "attnc_definition_emit", "def");
    requireNonNull(out, "attnc_definition_emit", "out");
    ChosenKernel K = kernelOf(*def, opt, /*ForCompile=*/false);
    setText(out, opt && opt->standalone
                     ? inlineDeviceLibrary(K.Source.Source)
                     : K.Source.Source);
  });
}

attnc_status attnc_definition_compile(const attnc_definition *def,
                                      const attnc_kernel_options *opt,
                                      attnc_text **out) {
  return guarded([&] {
    requireNonNull(def, "attnc_definition_compile", "def");
    requireNonNull(out, "attnc_definition_compile", "out");
    ChosenKernel K = kernelOf(*def, opt, /*ForCompile=*/true);
    runtime::CacheResult R =
        runtime::KernelCache::global().getOrCompile(K.Source);
    nlohmann::json J = {
        {"kernel", K.Description},
        {"key", R.FullKey},
        {"source", std::string(runtime::cacheSourceName(R.Source))},
        {"compile_seconds", R.CompileSeconds},
        {"lookup_seconds", R.LookupSeconds},
        {"cubin_bytes", R.Cubin->size()},
    };
    setText(out, J.dump());
  });
}

attnc_status attnc_load_bundle(const char *path) {
  return guarded([&] {
    requireNonNull(path, "attnc_load_bundle", "path");
    runtime::KernelCache::global().addBundle(path);
  });
}

attnc_status attnc_definition_check(const attnc_definition *def,
                                    uint64_t seed, int *passed,
                                    attnc_text **out) {
  return guarded([&] {
    requireNonNull(def, "attnc_definition_check", "def");
    requireNonNull(passed, "attnc_definition_check", "passed");
    requireNonNull(out, "attnc_definition_check", "out");
    reference::CheckOptions Opts;
    Opts.Seed = seed;
    reference::CheckReport R = reference::check(compileDefinition(*def), Opts);
    std::string Text;
    llvm::raw_string_ostream OS(Text);
    reference::printReport(R, OS);
    OS.flush();
    *passed = R.passed();
    setText(out, std::move(Text));
  });
}
