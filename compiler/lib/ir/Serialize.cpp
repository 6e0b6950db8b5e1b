// JSON save/load of graphs.
#include "attn/ir/Serialize.h"

#include "attn/Error.h"
#include "attn/ir/Walk.h"

#include "llvm/Support/Casting.h"

#include <nlohmann/json.hpp>

#include <cmath>
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

[[noreturn]] void bad(const std::string &Where, const std::string &What) {
  throw UserError("IR JSON: " + Where + ": " + What);
}

double readNumber(const json &J, const std::string &Where) {
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

const json &field(const json &J, const char *Key, const std::string &Where) {
  if (!J.is_object() || !J.contains(Key))
    bad(Where, std::string("missing field '") + Key + "'");
  return J.at(Key);
}

std::string readString(const json &J, const char *Key,
                       const std::string &Where) {
  const json &V = field(J, Key, Where);
  if (!V.is_string())
    bad(Where, std::string("field '") + Key + "' must be a string");
  return V.get<std::string>();
}

template <typename T>
T readEnum(const json &J, const char *Key, const std::string &Where,
           std::optional<T> (*Parse)(llvm::StringRef)) {
  std::string S = readString(J, Key, Where);
  std::optional<T> V = Parse(S);
  if (!V)
    bad(Where, "unknown " + std::string(Key) + " '" + S + "'");
  return *V;
}

/// Runs a graph builder for the node at \p Where. What the builder rejects
/// (a type clash in an edited document, say) becomes an IR JSON error that
/// names the node; the document's own errors are thrown by bad() outside it,
/// so every message carries the "IR JSON: WHERE: " prefix once.
template <typename Fn>
const Node *build(const std::string &Where, Fn &&Builder) {
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

static std::unique_ptr<Graph> loadParsed(const std::string &Text) {
  json J = json::parse(Text, nullptr, /*allow_exceptions=*/false);
  if (J.is_discarded())
    bad("document", "not valid JSON");
  if (!J.is_object() || J.value("format", "") != "attnc-ir")
    bad("document", "not an attnc IR file (format must be \"attnc-ir\")");
  const json &Ver = field(J, "version", "document");
  if (!Ver.is_number_integer() || Ver.get<int>() != IRFormatVersion)
    bad("document", "unsupported version " + Ver.dump() + " (expected " +
                        std::to_string(IRFormatVersion) + ")");

  auto G = std::make_unique<Graph>();
  G->setName(readString(J, "name", "document"));
  Declarations &D = G->decls();
  D.Kind = readEnum<DefinitionKind>(J, "kind", "document", kindFromName);
  D.HasMask = field(J, "has_mask", "document").get<bool>();
  D.HasBackward = field(J, "has_backward", "document").get<bool>();
  // Optional: files written before autodiff have neither key.
  D.BackwardDerived = J.value("backward_derived", false);
  const json &Decay = field(J, "decay_sample", "document");
  if (!Decay.is_array() || Decay.size() != 2)
    bad("decay_sample", "expected [lo, hi]");
  D.DecaySampleLo = readNumber(Decay[0], "decay_sample[0]");
  D.DecaySampleHi = readNumber(Decay[1], "decay_sample[1]");
  for (const char *Key : {"rowscales", "finals"}) {
    const json &Arr = field(J, Key, "document");
    for (size_t I = 0; I < Arr.size(); ++I) {
      std::string W = std::string(Key) + "[" + std::to_string(I) + "]";
      RowscaleDecl R{readString(Arr[I], "name", W),
                     readNumber(field(Arr[I], "init", W), W)};
      (std::string(Key) == "rowscales" ? D.OnlineRowscales : D.FinalRowscales)
          .push_back(R);
    }
  }
  const json &Inputs = field(J, "inputs", "document");
  for (size_t I = 0; I < Inputs.size(); ++I) {
    std::string W = "inputs[" + std::to_string(I) + "]";
    D.Inputs.push_back(InputDecl{
        readString(Inputs[I], "name", W),
        readEnum<InputShape>(Inputs[I], "shape", W, inputShapeFromName),
        readNumber(field(Inputs[I], "sample_lo", W), W),
        readNumber(field(Inputs[I], "sample_hi", W), W),
        Inputs[I].value("requires_grad", false)});
  }

  std::vector<const Node *> Nodes;
  const json &Jn = field(J, "nodes", "document");
  for (size_t I = 0; I < Jn.size(); ++I) {
    const json &E = Jn[I];
    std::string W = "nodes[" + std::to_string(I) + "]";
    std::string Op = readString(E, "op", W);
    Type T = readEnum<Type>(E, "type", W, typeFromName);
    Space S = readEnum<Space>(E, "space", W, spaceFromName);
    const Node *N;
    if (Op == "const") {
      double V = readNumber(field(E, "value", W), W);
      N = build(W, [&] { return G->constant(V, T); });
    } else if (Op == "param") {
      ParamKind PK = readEnum<ParamKind>(E, "param", W, paramKindFromName);
      std::string Name = readString(E, "name", W);
      N = build(W, [&] { return G->param(PK, Name, T, S); });
    } else {
      std::optional<NodeKind> K = kindFromMnemonic(Op);
      if (!K)
        bad(W, "unknown op '" + Op + "'");
      const json &Args = field(E, "args", W);
      if (!Args.is_array() || Args.size() != arity(*K))
        bad(W, "'" + Op + "' takes " + std::to_string(arity(*K)) + " args");
      std::vector<const Node *> Ops;
      for (const json &A : Args) {
        if (!A.is_number_unsigned() || A.get<size_t>() >= Nodes.size())
          bad(W, "arg " + A.dump() + " does not name an earlier node");
        Ops.push_back(Nodes[A.get<size_t>()]);
      }
      if (*K == NodeKind::Reduce) {
        ReduceOp R = readEnum<ReduceOp>(E, "reduce", W, reduceOpFromName);
        N = build(W, [&] { return G->reduce(R, Ops[0]); });
      } else if (isUnaryKind(*K)) {
        N = build(W, [&] { return G->unary(*K, Ops[0]); });
      } else if (*K == NodeKind::Select) {
        N = build(W, [&] { return G->select(Ops[0], Ops[1], Ops[2]); });
      } else {
        N = build(W, [&] { return G->binary(*K, Ops[0], Ops[1]); });
      }
    }
    if (N->getType() != T || N->getSpace() != S)
      bad(W, "recorded as " + typeName(T).str() + " " + spaceName(S).str() +
                 " but its operands make it " + typeName(N->getType()).str() +
                 " " + spaceName(N->getSpace()).str());
    Nodes.push_back(N);
  }
  const json &Fs = field(J, "functions", "document");
  for (size_t I = 0; I < Fs.size(); ++I) {
    std::string W = "functions[" + std::to_string(I) + "]";
    Function &F = G->addFunction(readString(Fs[I], "name", W));
    const json &Rs = field(Fs[I], "results", W);
    for (size_t K = 0; K < Rs.size(); ++K) {
      std::string RW = W + ".results[" + std::to_string(K) + "]";
      const json &Node = field(Rs[K], "node", RW);
      if (!Node.is_number_unsigned() || Node.get<size_t>() >= Nodes.size())
        bad(RW, "node " + Node.dump() + " does not exist");
      F.Results.push_back({readString(Rs[K], "name", RW),
                           Nodes[Node.get<size_t>()]});
    }
  }
  return G;
}

std::unique_ptr<Graph> loadJSON(const std::string &Text) {
  try {
    return loadParsed(Text);
  } catch (const json::exception &E) {
    bad("document", std::string("malformed: ") + E.what());
  } catch (const InternalError &E) {
    bad("document", E.what());
  }
}

} // namespace attn::ir
