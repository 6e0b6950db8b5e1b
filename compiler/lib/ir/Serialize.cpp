// JSON save/load of graphs.
#include "attn/ir/Serialize.h"

#include "attn/Error.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Casting.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

namespace attn::ir {

using nlohmann::json;

namespace {

/// A double as JSON: a number, or "inf", "-inf", "nan" or "-nan" (a NaN
/// with its sign bit set, as x86 makes inf - inf; the printer shows it).
json number(double V) {
  if (std::isnan(V))
    return std::signbit(V) ? "-nan" : "nan";
  if (std::isinf(V))
    return V > 0 ? "inf" : "-inf";
  return V;
}

using Pointer = json::json_pointer;

/// Every loader error: the JSON pointer of the offending value and what is
/// wrong with it ("IR JSON: /nodes/4/op: unknown op 'foo'").
[[noreturn]] void bad(const Pointer &Where, const std::string &What) {
  std::string At = Where.to_string();
  throw UserError("IR JSON: " + (At.empty() ? std::string("document") : At) +
                  ": " + What);
}

/// The member \p Key of the object \p J (at \p Where), which must be there.
const json &member(const json &J, const Pointer &Where, const char *Key) {
  if (!J.is_object())
    bad(Where, "expected an object");
  auto It = J.find(Key);
  if (It == J.end())
    bad(Where / Key, "missing");
  return *It;
}

/// The object \p J has no member besides \p Known: a misspelt key is an
/// error, not silently ignored.
void onlyMembers(const json &J, const Pointer &Where,
                 std::initializer_list<const char *> Known) {
  if (!J.is_object())
    bad(Where, "expected an object");
  for (auto It = J.begin(); It != J.end(); ++It) {
    bool Ok = false;
    for (const char *K : Known)
      Ok = Ok || It.key() == K;
    if (!Ok)
      bad(Where / It.key(), "unknown field");
  }
}

const json &array(const json &J, const Pointer &Where) {
  if (!J.is_array())
    bad(Where, "expected an array");
  return J;
}

bool readBool(const json &J, const Pointer &Where) {
  if (!J.is_boolean())
    bad(Where, "expected true or false");
  return J.get<bool>();
}

std::string readString(const json &J, const Pointer &Where) {
  if (!J.is_string())
    bad(Where, "expected a string");
  return J.get<std::string>();
}

/// A non-negative integer below \p Bound, read without narrowing: JSON
/// integers too large for 64 bits are not integers to nlohmann (they parse
/// as doubles) and are rejected with every other non-integer.
uint64_t readIndex(const json &J, const Pointer &Where, uint64_t Bound,
                   const std::string &What) {
  if (!J.is_number_unsigned())
    bad(Where, "expected " + What + " (a non-negative integer), got " +
                   J.dump());
  uint64_t V = J.get<uint64_t>();
  if (V >= Bound)
    bad(Where, J.dump() + " is not " + What);
  return V;
}

double readNumber(const json &J, const Pointer &Where) {
  if (J.is_number())
    return J.get<double>();
  if (J.is_string()) {
    std::string S = J.get<std::string>();
    if (S == "inf")
      return std::numeric_limits<double>::infinity();
    if (S == "-inf")
      return -std::numeric_limits<double>::infinity();
    if (S == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (S == "-nan")
      return std::copysign(std::numeric_limits<double>::quiet_NaN(), -1.0);
  }
  bad(Where, "expected a number, \"inf\", \"-inf\", \"nan\" or \"-nan\"");
}

/// A number that is not NaN (declaration values: NaN has no meaning there).
double readOrdered(const json &J, const Pointer &Where) {
  double V = readNumber(J, Where);
  if (std::isnan(V))
    bad(Where, "is NaN");
  return V;
}

template <typename T>
T readEnum(const json &J, const Pointer &Where,
           std::optional<T> (*Parse)(llvm::StringRef)) {
  std::string S = readString(J, Where);
  std::optional<T> V = Parse(S);
  if (!V)
    bad(Where, "unknown value '" + S + "'");
  return *V;
}

/// Runs a graph builder for the node at \p Where. What the builder rejects
/// (a type clash in an edited document, say) becomes an IR JSON error that
/// names the node; the document's own errors are thrown by bad() outside it,
/// so every message carries the "IR JSON: WHERE: " prefix once.
template <typename Fn>
const Node *build(const Pointer &Where, Fn &&Builder) {
  try {
    return Builder();
  } catch (const Error &E) {
    bad(Where, E.what());
  }
}

std::optional<DefinitionKind> kindFromName(llvm::StringRef N) {
  for (DefinitionKind K : {DefinitionKind::Transformer, DefinitionKind::Linear})
    if (definitionKindName(K) == N)
      return K;
  return std::nullopt;
}

} // namespace

std::string saveJSON(const Graph &G) {
  const Declarations &D = G.decls();
  json J;
  J["format"] = "attnc-ir";
  J["version"] = IRFormatVersion;
  J["name"] = G.name();
  J["kind"] = definitionKindName(D.Kind).str();
  J["has_mask"] = D.HasMask;
  J["has_backward"] = D.HasBackward;
  J["backward_derived"] = D.BackwardDerived;
  J["decay_sample"] = {number(D.DecaySampleLo), number(D.DecaySampleHi)};
  J["rowscales"] = json::array();
  for (const RowscaleDecl &R : D.OnlineRowscales)
    J["rowscales"].push_back({{"name", R.Name}, {"init", number(R.Init)}});
  J["finals"] = json::array();
  for (const RowscaleDecl &R : D.FinalRowscales)
    J["finals"].push_back({{"name", R.Name}, {"init", number(R.Init)}});
  J["inputs"] = json::array();
  for (const InputDecl &I : D.Inputs)
    J["inputs"].push_back({{"name", I.Name},
                           {"shape", inputShapeName(I.Shape).str()},
                           {"type", inputTypeName(I.Elem).str()},
                           {"sample_lo", number(I.SampleLo)},
                           {"sample_hi", number(I.SampleHi)},
                           {"requires_grad", I.RequiresGrad}});

  std::vector<const Node *> Roots;
  for (const Function &F : G.functions())
    for (const Result &R : F.Results)
      Roots.push_back(R.Value);
  llvm::DenseMap<const Node *, unsigned> Index;
  J["nodes"] = json::array();
  for (const Node *N : topologicalOrder(Roots)) {
    json Jn;
    if (auto *C = llvm::dyn_cast<ConstNode>(N)) {
      Jn["op"] = "const";
      Jn["value"] = number(C->getValue());
    } else if (auto *P = llvm::dyn_cast<ParamNode>(N)) {
      Jn["op"] = "param";
      Jn["param"] = paramKindName(P->getParamKind()).str();
      Jn["name"] = P->getName().str();
    } else {
      Jn["op"] = mnemonic(N->getKind()).str();
      if (auto *R = llvm::dyn_cast<ReduceNode>(N))
        Jn["reduce"] = reduceOpName(R->getOp()).str();
      json Args = json::array();
      for (const Node *Op : N->operands())
        Args.push_back(Index.lookup(Op));
      Jn["args"] = Args;
    }
    Jn["type"] = typeName(N->getType()).str();
    Jn["space"] = spaceName(N->getSpace()).str();
    unsigned Id = Index.size();
    Index[N] = Id;
    J["nodes"].push_back(Jn);
  }
  J["functions"] = json::array();
  for (const Function &F : G.functions()) {
    json Rs = json::array();
    for (const Result &R : F.Results)
      Rs.push_back({{"name", R.Name}, {"node", Index.lookup(R.Value)}});
    J["functions"].push_back({{"name", F.Name}, {"results", Rs}});
  }
  return J.dump(1) + "\n";
}

namespace {

/// Whether a document must, may or must not have a function.
enum class Presence { Required, Optional, Absent };

/// A function a definition kind has: the names of its results, whether the
/// document has it, and whether its results are booleans.
struct FunctionSchema {
  FunctionSchema(std::string Name, std::vector<std::string> Results,
                 Presence Has = Presence::Required, bool Boolean = false,
                 std::string Because = "")
      : Name(std::move(Name)), Results(std::move(Results)), Has(Has),
        Boolean(Boolean), Because(std::move(Because)) {}
  std::string Name;
  std::vector<std::string> Results;
  Presence Has;
  bool Boolean;
  /// Why it is required or absent ("has_mask", "an attention definition").
  std::string Because;
};

/// "an attention definition", "a linear definition".
std::string aDefinitionOfKind(DefinitionKind K) {
  std::string Name = definitionKindName(K).str();
  return (llvm::StringRef("aeiou").contains(Name[0]) ? "an " : "a ") + Name +
         " definition";
}

/// The functions trace and the passes give a definition with \p D.
std::vector<FunctionSchema> functionSchemas(const Declarations &D) {
  std::vector<FunctionSchema> Fs;
  switch (D.Kind) {
  case DefinitionKind::Transformer: {
    std::vector<std::string> Online{"scores"}, Epilogue{"o"}, InputGrads,
        Combine;
    for (const RowscaleDecl &R : D.OnlineRowscales) {
      Online.push_back(R.Name);
      Combine.push_back(R.Name);
    }
    Online.push_back("o_scale");
    Combine.push_back("o_scale_a");
    Combine.push_back("o_scale_b");
    for (const RowscaleDecl &R : D.FinalRowscales)
      Epilogue.push_back(R.Name);
    for (const InputDecl &I : D.Inputs)
      if (I.RequiresGrad)
        InputGrads.push_back("d_" + I.Name);
    auto If = [](bool B) {
      return B ? Presence::Required : Presence::Absent;
    };
    Fs = {{"score_mod", {"score"}},
          {"mask_mod", {"mask"}, If(D.HasMask), /*Boolean=*/true,
           "has_mask"},
          {"online_fwd", Online},
          {"online_fwd_epilogue", Epilogue},
          {"forward", {"p"}},
          {"backward", {"dscores"}, If(D.HasBackward), false, "has_backward"},
          // Written by the definition or not (OnlineFunc::combine).
          {"combine", Combine, Presence::Optional},
          // Added by the autodiff pass, so absent from a traced graph.
          {"score_mod_grad", {"dscore"}, Presence::Optional},
          {"score_mod_input_grad", InputGrads, Presence::Optional}};
    break;
  }
  case DefinitionKind::Linear:
    Fs = {{"q_mod", {"q"}}, {"k_mod", {"k"}}, {"v_mod", {"v"}},
          {"decay_mod", {"g"}}};
    break;
  }
  for (FunctionSchema &F : Fs)
    if (F.Because.empty())
      F.Because = aDefinitionOfKind(D.Kind);
  return Fs;
}

void readRowscales(const json &J, const Pointer &Where,
                   std::vector<RowscaleDecl> &Out) {
  const json &Arr = array(J, Where);
  for (size_t I = 0; I < Arr.size(); ++I) {
    Pointer W = Where / I;
    onlyMembers(Arr[I], W, {"name", "init"});
    RowscaleDecl R{readString(member(Arr[I], W, "name"), W / "name"),
                   readOrdered(member(Arr[I], W, "init"), W / "init")};
    for (const RowscaleDecl &Prev : Out)
      if (Prev.Name == R.Name)
        bad(W / "name", "rowscale '" + R.Name + "' is declared twice");
    Out.push_back(R);
  }
}

/// lo and hi of a sample range: numbers, not NaN, lo <= hi.
void checkRange(double Lo, double Hi, const Pointer &Where) {
  if (!(Lo <= Hi))
    bad(Where, "sample range is empty (lo > hi)");
}

void readDeclarations(const json &J, Graph &G) {
  Declarations &D = G.decls();
  Pointer Root;
  G.setName(readString(member(J, Root, "name"), Root / "name"));
  if (G.name().empty())
    bad(Root / "name", "is empty");
  D.Kind = readEnum<DefinitionKind>(member(J, Root, "kind"), Root / "kind",
                                    kindFromName);
  D.HasMask = readBool(member(J, Root, "has_mask"), Root / "has_mask");
  D.HasBackward =
      readBool(member(J, Root, "has_backward"), Root / "has_backward");
  // Optional: files written before autodiff have no such key.
  if (J.contains("backward_derived"))
    D.BackwardDerived =
        readBool(J.at("backward_derived"), Root / "backward_derived");
  Pointer DW = Root / "decay_sample";
  const json &Decay = array(member(J, Root, "decay_sample"), DW);
  if (Decay.size() != 2)
    bad(DW, "expected [lo, hi]");
  D.DecaySampleLo = readOrdered(Decay[0], DW / 0);
  D.DecaySampleHi = readOrdered(Decay[1], DW / 1);
  checkRange(D.DecaySampleLo, D.DecaySampleHi, DW);
  readRowscales(member(J, Root, "rowscales"), Root / "rowscales",
                D.OnlineRowscales);
  readRowscales(member(J, Root, "finals"), Root / "finals", D.FinalRowscales);
  const json &Inputs = array(member(J, Root, "inputs"), Root / "inputs");
  for (size_t I = 0; I < Inputs.size(); ++I) {
    Pointer W = Root / "inputs" / I;
    const json &E = Inputs[I];
    onlyMembers(E, W,
                {"name", "shape", "type", "sample_lo", "sample_hi",
                 "requires_grad"});
    InputDecl In{
        readString(member(E, W, "name"), W / "name"),
        readEnum<InputShape>(member(E, W, "shape"), W / "shape",
                             inputShapeFromName),
        readOrdered(member(E, W, "sample_lo"), W / "sample_lo"),
        readOrdered(member(E, W, "sample_hi"), W / "sample_hi"),
        // Optional, like backward_derived.
        E.contains("requires_grad")
            ? readBool(E.at("requires_grad"), W / "requires_grad")
            : false,
        // Optional too: files written before int32 inputs hold f32 ones.
        E.contains("type") ? readEnum<InputType>(E.at("type"), W / "type",
                                                 inputTypeFromName)
                           : InputType::F32};
    checkRange(In.SampleLo, In.SampleHi, W);
    if (In.Elem == InputType::I32 && In.RequiresGrad)
      bad(W / "requires_grad", "input '" + In.Name +
                                   "' is i32, and an integer has no gradient");
    if (D.findInput(In.Name))
      bad(W / "name", "input '" + In.Name + "' is declared twice");
    D.Inputs.push_back(In);
  }
}

const Node *readNode(const json &E, const Pointer &W, Graph &G,
                     const std::vector<const Node *> &Nodes) {
  std::string Op = readString(member(E, W, "op"), W / "op");
  Type T = readEnum<Type>(member(E, W, "type"), W / "type", typeFromName);
  Space S = readEnum<Space>(member(E, W, "space"), W / "space", spaceFromName);
  if (Op == "const") {
    onlyMembers(E, W, {"op", "type", "space", "value"});
    double V = readNumber(member(E, W, "value"), W / "value");
    if (T == Type::I32 && V != std::trunc(V))
      bad(W / "value", "an i32 constant must be a whole number");
    if (T == Type::Bool)
      bad(W / "type", "a constant is f32 or i32");
    return build(W, [&] { return G.constant(V, T); });
  }
  if (Op == "param") {
    onlyMembers(E, W, {"op", "type", "space", "param", "name"});
    ParamKind PK = readEnum<ParamKind>(member(E, W, "param"), W / "param",
                                       paramKindFromName);
    std::string Name = readString(member(E, W, "name"), W / "name");
    if (PK == ParamKind::Input) {
      const InputDecl *In = G.decls().findInput(Name);
      if (!In)
        bad(W / "name", "input '" + Name + "' is not declared in /inputs");
      if (T != inputTypeIR(In->Elem))
        bad(W / "type", "input '" + Name + "' is declared " +
                            inputTypeName(In->Elem).str());
      if (S != inputShapeSpace(In->Shape))
        bad(W / "space", "input '" + Name + "' is declared " +
                             inputShapeName(In->Shape).str() +
                             ", whose space is " +
                             spaceName(inputShapeSpace(In->Shape)).str());
    }
    // A rowscale the declarations do not name has no slot in any kernel.
    auto Declared = [&](const std::vector<RowscaleDecl> &Ds) {
      for (const RowscaleDecl &R : Ds)
        if (R.Name == Name)
          return true;
      return false;
    };
    if ((PK == ParamKind::Rowscale || PK == ParamKind::OtherRowscale) &&
        !Declared(G.decls().OnlineRowscales))
      bad(W / "name", "rowscale '" + Name + "' is not declared in /rowscales");
    if (PK == ParamKind::FinalRowscale && !Declared(G.decls().FinalRowscales))
      bad(W / "name", "final rowscale '" + Name + "' is not declared in /finals");
    return build(W, [&] { return G.param(PK, Name, T, S); });
  }
  std::optional<NodeKind> K = kindFromMnemonic(Op);
  if (!K || arity(*K) == 0)
    bad(W / "op", "unknown op '" + Op + "'");
  if (*K == NodeKind::Reduce)
    onlyMembers(E, W, {"op", "type", "space", "args", "reduce"});
  else
    onlyMembers(E, W, {"op", "type", "space", "args"});
  const json &Args = array(member(E, W, "args"), W / "args");
  if (Args.size() != arity(*K))
    bad(W / "args", "'" + Op + "' takes " + std::to_string(arity(*K)) +
                        " args");
  std::vector<const Node *> Ops;
  for (size_t I = 0; I < Args.size(); ++I)
    Ops.push_back(Nodes[readIndex(Args[I], W / "args" / I, Nodes.size(),
                                  "the index of an earlier node")]);
  if (*K == NodeKind::Reduce) {
    ReduceOp R = readEnum<ReduceOp>(member(E, W, "reduce"), W / "reduce",
                                    reduceOpFromName);
    return build(W, [&] { return G.reduce(R, Ops[0]); });
  }
  if (isUnaryKind(*K))
    return build(W, [&] { return G.unary(*K, Ops[0]); });
  if (*K == NodeKind::Select)
    return build(W, [&] { return G.select(Ops[0], Ops[1], Ops[2]); });
  return build(W, [&] { return G.binary(*K, Ops[0], Ops[1]); });
}

void readFunctions(const json &J, Graph &G,
                   const std::vector<const Node *> &Nodes) {
  Pointer FW = Pointer() / "functions";
  const json &Fs = array(member(J, Pointer(), "functions"), FW);
  std::vector<FunctionSchema> Schemas = functionSchemas(G.decls());
  for (size_t I = 0; I < Fs.size(); ++I) {
    Pointer W = FW / I;
    onlyMembers(Fs[I], W, {"name", "results"});
    std::string Name = readString(member(Fs[I], W, "name"), W / "name");
    const FunctionSchema *Schema = nullptr;
    for (const FunctionSchema &S : Schemas)
      Schema = S.Name == Name ? &S : Schema;
    if (!Schema)
      bad(W / "name", "'" + Name + "' is not a function of " +
                          aDefinitionOfKind(G.decls().Kind));
    if (Schema->Has == Presence::Absent)
      bad(W / "name", "'" + Name + "' is present but " + Schema->Because +
                          " is false");
    if (G.getFunction(Name))
      bad(W / "name", "function '" + Name + "' appears twice");
    Function &F = G.addFunction(Name);
    Pointer RW = W / "results";
    const json &Rs = array(member(Fs[I], W, "results"), RW);
    for (size_t K = 0; K < Rs.size(); ++K) {
      Pointer EW = RW / K;
      onlyMembers(Rs[K], EW, {"name", "node"});
      std::string R = readString(member(Rs[K], EW, "name"), EW / "name");
      if (llvm::find(Schema->Results, R) == Schema->Results.end())
        bad(EW / "name", "'" + Name + "' has no result '" + R + "'");
      if (F.result(R))
        bad(EW / "name", "result '" + R + "' appears twice");
      const Node *N = Nodes[readIndex(member(Rs[K], EW, "node"), EW / "node",
                                      Nodes.size(), "the index of a node")];
      if ((N->getType() == Type::Bool) != Schema->Boolean)
        bad(EW / "node", Schema->Boolean ? "must be a boolean"
                                         : "must be a number, not a boolean");
      F.Results.push_back({R, N});
    }
    for (const std::string &R : Schema->Results)
      if (!F.result(R))
        bad(RW, "missing result '" + R + "' of '" + Name + "'");
  }
  for (const FunctionSchema &S : Schemas)
    if (S.Has == Presence::Required && !G.getFunction(S.Name))
      bad(FW, "missing function '" + S.Name + "', which " + S.Because +
                  " needs");
}

std::unique_ptr<Graph> loadParsed(const std::string &Text) {
  json J = json::parse(Text, nullptr, /*allow_exceptions=*/false);
  Pointer Root;
  if (J.is_discarded())
    bad(Root, "not valid JSON");
  if (!J.is_object() || !J.contains("format") || J["format"] != "attnc-ir")
    bad(Root, "not an attnc IR file (format must be \"attnc-ir\")");
  const json &Ver = member(J, Root, "version");
  if (!Ver.is_number_unsigned() || Ver.get<uint64_t>() != IRFormatVersion)
    bad(Root / "version", "unsupported version " + Ver.dump() +
                              " (expected " +
                              std::to_string(IRFormatVersion) + ")");
  onlyMembers(J, Root,
              {"format", "version", "name", "kind", "has_mask",
               "has_backward", "backward_derived", "decay_sample",
               "rowscales", "finals", "inputs", "nodes", "functions"});

  auto G = std::make_unique<Graph>();
  readDeclarations(J, *G);
  std::vector<const Node *> Nodes;
  const json &Jn = array(member(J, Root, "nodes"), Root / "nodes");
  for (size_t I = 0; I < Jn.size(); ++I) {
    Pointer W = Root / "nodes" / I;
    const Node *N = readNode(Jn[I], W, *G, Nodes);
    Type T = *typeFromName(Jn[I]["type"].get<std::string>());
    Space S = *spaceFromName(Jn[I]["space"].get<std::string>());
    if (N->getType() != T || N->getSpace() != S)
      bad(W, "recorded as " + typeName(T).str() + " " + spaceName(S).str() +
                 " but its operands make it " + typeName(N->getType()).str() +
                 " " + spaceName(N->getSpace()).str());
    Nodes.push_back(N);
  }
  readFunctions(J, *G, Nodes);
  return G;
}

} // namespace

std::unique_ptr<Graph> loadJSON(const std::string &Text) {
  try {
    return loadParsed(Text);
  } catch (const json::exception &E) {
    // Only a bug in the checks above lets a typed access throw.
    throw InternalError(std::string("IR JSON loader: ") + E.what());
  }
}

} // namespace attn::ir
