// Custom inputs, rowscale maps, online functions and the definition registry.
#include "attn/dsl/Definition.h"
#include "attn/dsl/Registry.h"

#include "attn/Error.h"
#include "attn/dsl/Names.h"
#include "attn/ir/Graph.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>

namespace attn::dsl {

// ---- CustomInputs ----------------------------------------------------------

CustomInputs &CustomInputs::declare(const std::string &Name, InputShape Shape,
                                    double SampleLo, double SampleHi) {
  return declare(Name, Shape, InputType::F32, SampleLo, SampleHi);
}

CustomInputs &CustomInputs::declare(const std::string &Name, InputShape Shape,
                                    InputType Type) {
  // A small set of ids by default, so that `attnc check` draws equal ones.
  return Type == InputType::I32 ? declare(Name, Shape, Type, 0.0, 3.0)
                                : declare(Name, Shape, Type, -1.0, 1.0);
}

CustomInputs &CustomInputs::declare(const std::string &Name, InputShape Shape,
                                    InputType Type, double SampleLo,
                                    double SampleHi) {
  checkIdentifier("custom input", Name);
  for (const ir::InputDecl &D : Decls)
    if (D.Name == Name)
      throw UserError("custom input '" + Name + "' is declared twice");
  if (std::isnan(SampleLo) || std::isnan(SampleHi))
    throw UserError("custom input '" + Name + "': sample range bound " +
                    (std::isnan(SampleLo) ? "lo" : "hi") + " is NaN");
  if (!(SampleLo <= SampleHi))
    throw UserError("custom input '" + Name +
                    "': sample range is empty (lo > hi)");
  if (Type == InputType::I32 &&
      (std::ceil(SampleLo) > std::floor(SampleHi) ||
       std::fabs(SampleLo) >= 2147483648.0 ||
       std::fabs(SampleHi) >= 2147483648.0))
    throw UserError("custom input '" + Name +
                    "': an int32 input's sample range must hold a whole "
                    "number within int32");
  Decls.push_back(ir::InputDecl{Name, Shape, SampleLo, SampleHi, false, Type});
  return *this;
}

CustomInputs &CustomInputs::requiresGrad() {
  if (Decls.empty())
    throw UserError("requiresGrad(): no custom input declared yet; call it "
                    "right after declare(...)");
  if (Decls.back().Elem == InputType::I32)
    throw UserError("requiresGrad(): custom input '" + Decls.back().Name +
                    "' is int32, and an integer has no gradient; declare it "
                    "InputType::F32 to learn it");
  Decls.back().RequiresGrad = true;
  return *this;
}

static std::string joinNames(const std::vector<std::string> &Names) {
  return Names.empty() ? "none" : llvm::join(Names, ", ");
}

SymbolScalar CustomInputs::operator[](std::string_view NameText) const {
  llvm::StringRef Name = NameText;
  if (!Bound)
    throw UserError("custom input '" + Name.str() +
                    "' read outside a traced function");
  const ir::InputDecl *Found = nullptr;
  std::vector<std::string> Known;
  for (const ir::InputDecl &D : Decls) {
    Known.push_back(D.Name);
    if (D.Name == Name)
      Found = &D;
  }
  if (!Found)
    throw UserError(BoundFunction + ": custom input '" + Name.str() +
                    "' is not declared; declared inputs: " + joinNames(Known));
  if (BoundAllowed.empty())
    throw UserError(BoundFunction + ": custom input '" + Name.str() +
                    "' cannot be read here; " + BoundFunction +
                    " sees only its arguments");
  if (std::find(BoundAllowed.begin(), BoundAllowed.end(), Found->Shape) ==
      BoundAllowed.end()) {
    std::vector<std::string> Allowed;
    for (InputShape S : BoundAllowed)
      Allowed.push_back(ir::inputShapeName(S).str());
    bool PerKey = ir::inputShapeSpace(Found->Shape) == ir::Space::Col ||
                  ir::inputShapeSpace(Found->Shape) == ir::Space::Tile;
    throw UserError(BoundFunction + ": custom input '" + Name.str() +
                    "' is " + ir::inputShapeName(Found->Shape).str() +
                    ", but " + BoundFunction +
                    (PerKey ? " has no key dimension" : " does not take it") +
                    "; it accepts " + joinNames(Allowed) + " inputs");
  }
  return {Bound, Bound->param(ir::ParamKind::Input, Name,
                              ir::inputTypeIR(Found->Elem),
                              ir::inputShapeSpace(Found->Shape))};
}

SymbolScalar CustomInputs::head_dim() const {
  if (!Bound)
    throw UserError("head_dim() read outside a traced function");
  return {Bound, Bound->param(ir::ParamKind::HeadDim, "D", ir::Type::I32,
                              ir::Space::Const)};
}

void CustomInputs::bind(ir::Graph *G, std::string Function,
                        std::vector<InputShape> Allowed) const {
  Bound = G;
  BoundFunction = std::move(Function);
  BoundAllowed = std::move(Allowed);
}

void CustomInputs::unbind() const {
  Bound = nullptr;
  BoundFunction.clear();
  BoundAllowed.clear();
}

// ---- Rowscales -------------------------------------------------------------

Rowscales::Rowscales(
    std::initializer_list<std::pair<std::string, SymbolScalar>> Init) {
  for (const auto &[Name, Value] : Init) {
    if (contains(Name) &&
        std::find(Repeated.begin(), Repeated.end(), Name) == Repeated.end())
      Repeated.push_back(Name);
    set(Name, Value);
  }
}

void Rowscales::setOwner(std::string Fn, std::string W) {
  Function = std::move(Fn);
  What = std::move(W);
}

SymbolScalar Rowscales::operator[](std::string_view NameText) const {
  llvm::StringRef Name = NameText;
  std::vector<std::string> Known;
  for (const auto &[N, V] : Entries) {
    if (N == Name)
      return V;
    Known.push_back(N);
  }
  throw UserError((Function.empty() ? "" : Function + ": ") + "unknown " +
                  What + " '" + Name.str() + "'; declared: " +
                  joinNames(Known));
}

void Rowscales::set(const std::string &Name, SymbolScalar Value) {
  for (auto &[N, V] : Entries)
    if (N == Name) {
      V = Value;
      return;
    }
  Entries.emplace_back(Name, Value);
}

bool Rowscales::contains(std::string_view NameText) const {
  llvm::StringRef Name = NameText;
  for (const auto &Entry : Entries)
    if (Entry.first == Name)
      return true;
  return false;
}

// ---- OnlineFunc --------------------------------------------------------------

OnlineFunc::OnlineFunc(Decls OnlineRowscales, Decls FinalRowscales)
    : Online(std::move(OnlineRowscales)), Final(std::move(FinalRowscales)) {}
OnlineFunc::~OnlineFunc() = default;

std::optional<SymbolScalar>
OnlineFunc::backward(SymbolScalar, SymbolScalar, const Rowscales &,
                     SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar,
                     SymbolScalar) const {
  return std::nullopt;
}

std::optional<CombineResult> OnlineFunc::combine(const Rowscales &,
                                                const Rowscales &) const {
  return std::nullopt;
}

const CustomInputs &OnlineFunc::inputs() const {
  if (!Inputs)
    throw UserError("OnlineFunc::inputs() read outside a traced function");
  return *Inputs;
}

DefinitionBase::~DefinitionBase() = default;

// ---- Registry --------------------------------------------------------------

void Registry::add(std::shared_ptr<const DefinitionBase> Def) {
  if (!Def)
    throw UserError("Registry::add: no definition (a null pointer)");
  checkIdentifier("definition", Def->name);
  if (find(Def->name))
    throw UserError("definition '" + Def->name + "' is registered twice");
  Defs.push_back(std::move(Def));
}

const DefinitionBase *Registry::find(std::string_view NameText) const {
  llvm::StringRef Name = NameText;
  for (const auto &D : Defs)
    if (D->name == Name)
      return D.get();
  return nullptr;
}

const DefinitionBase &Registry::get(std::string_view NameText) const {
  llvm::StringRef Name = NameText;
  if (const DefinitionBase *D = find(Name))
    return *D;
  std::vector<std::string> Known;
  for (const auto &D : Defs)
    Known.push_back(D->name);
  throw UserError("unknown definition '" + Name.str() + "'; known: " +
                  joinNames(Known));
}

std::vector<const DefinitionBase *> Registry::all() const {
  std::vector<const DefinitionBase *> Out;
  for (const auto &D : Defs)
    Out.push_back(D.get());
  return Out;
}

} // namespace attn::dsl
