// The generated Inputs struct and its slot layout.
#include "attn/codegen/InputLayout.h"

#include "attn/Error.h"
#include "attn/codegen/CodeWriter.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

#include <fmt/format.h>

namespace attn::codegen {

std::string generatedName(llvm::StringRef Prefix, unsigned Index,
                          llvm::StringRef UserName) {
  std::string S = Prefix.str() + "_" + std::to_string(Index);
  bool Gap = true; // a '_' is due before the next letter or digit
  for (char C : UserName) {
    if (!llvm::isAlnum(C)) { // not ASCII, '_', punctuation
      Gap = true;
      continue;
    }
    if (Gap)
      S += '_';
    S += C;
    Gap = false;
  }
  return S;
}

std::string quotedName(llvm::StringRef UserName) {
  std::string S = "'";
  for (char C : UserName) {
    unsigned char U = static_cast<unsigned char>(C);
    if (U < 0x20 || U == 0x7f)
      S += fmt::format("\\x{:02x}", U);
    else
      S += C;
  }
  return S + "'";
}

std::string scalarDivisorMultiplier(const ir::Node *Divisor, llvm::StringRef Spelled) {
  const auto *P = llvm::dyn_cast<ir::ParamNode>(Divisor);
  // A scalar input is the one input spelled as a bare field; tensor
  // inputs are loads ("in.load_...(b, h, ...)").
  if (!P || P->getParamKind() != ir::ParamKind::Input || P->getType() != ir::Type::I32 ||
      Spelled.contains('(') || !Spelled.contains('.'))
    return "";
  return "(unsigned)" + Spelled.str() + "_pad_";
}

std::string inputField(const ir::Graph &G, llvm::StringRef Name) {
  unsigned I = 0;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (D.Name == Name)
      return generatedName("in", I, Name);
    ++I;
  }
  throw InternalError("codegen: unknown custom input '" + Name.str() + "'");
}

std::string rowscaleField(const ir::Graph &G, llvm::StringRef Name) {
  unsigned I = 0;
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales) {
    if (D.Name == Name)
      return generatedName("rs", I, Name);
    ++I;
  }
  throw InternalError("codegen: unknown rowscale '" + Name.str() + "'");
}

/// The C type of an input's elements in generated code.
static std::string elemCType(ir::InputType T) {
  switch (T) {
  case ir::InputType::F32:
    return "float";
  case ir::InputType::I32:
    return "int";
  }
  return "float";
}

InputLayout inputLayout(const ir::Graph &G) {
  InputLayout L;
  unsigned Next = 0;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    unsigned Count = D.Shape == ir::InputShape::Scalar ? 1 : 6;
    L.Inputs.push_back({D.Name, D.Shape, Next, Count, D.Elem});
    Next += Count;
  }
  L.TotalSlots = Next ? Next : 1;
  return L;
}

std::vector<GradInput> gradInputs(const ir::Graph &G) {
  std::vector<GradInput> Out;
  unsigned I = 0;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (D.RequiresGrad)
      Out.push_back({D.Name, D.Shape, I});
    ++I;
  }
  return Out;
}

/// Whether loads of an input of class \p S index it by the query (whose
/// q_idx a packed call shifts).
static bool queryShifted(ir::InputShape S) {
  return S == ir::InputShape::PerRow || S == ir::InputShape::PerQueryToken;
}

/// Whether an input of class \p S is indexed by a token of the sequence.
static bool sequenceIndexed(ir::InputShape S) {
  switch (S) {
  case ir::InputShape::Scalar:
  case ir::InputShape::PerHead:
  case ir::InputShape::Full: // refused in packed calls
    return false;
  case ir::InputShape::PerRow:
  case ir::InputShape::PerKey:
  case ir::InputShape::PerQueryToken:
  case ir::InputShape::PerKeyToken:
    return true;
  }
  return false;
}

bool hasSequenceInputs(const ir::Graph &G) {
  for (const ir::InputDecl &D : G.decls().Inputs)
    if (sequenceIndexed(D.Shape))
      return true;
  return false;
}

/// Inputs::of_sequence: a copy whose per-row, per-key and per-token pointers
/// start at a packed call's sequence (their token axis is contiguous: the
/// host passes [H, tokens] and [tokens] tensors with batch stride 0) and
/// whose clamp bounds are its lengths; query-side inputs take the sequence's
/// bottom-right shift, so that a load at q_idx = row + shift reads the row's
/// token.
static void emitOfSequence(CodeWriter &W, const ir::Graph &G) {
  auto F = W.block("__device__ __forceinline__ Inputs of_sequence(int q0, int kv0, "
                   "int seq_q, int seq_kv, int shift) const");
  W.line("Inputs r = *this;");
  W.line("(void)q0; (void)kv0; (void)seq_q; (void)seq_kv; (void)shift;");
  unsigned I = 0;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    const std::string N = generatedName("in", I++, D.Name);
    if (!sequenceIndexed(D.Shape))
      continue;
    if (queryShifted(D.Shape)) {
      W.line("r." + N + " += q0;");
      W.line("r." + N + "_rows = seq_q;");
      W.line("r." + N + "_row_shift = shift;");
      continue;
    }
    W.line("r." + N + " += kv0;");
    W.line("r." + N + "_rows = seq_kv;");
  }
  W.line("return r;");
}

/// Whether an input of shape \p S is indexed by the key.
bool readsKeys(ir::InputShape S) {
  switch (S) {
  case ir::InputShape::PerKey:
  case ir::InputShape::PerKeyToken:
  case ir::InputShape::Full:
    return true;
  case ir::InputShape::Scalar:
  case ir::InputShape::PerHead:
  case ir::InputShape::PerRow:
  case ir::InputShape::PerQueryToken:
    return false;
  }
  return false;
}

/// Whether an input of shape \p S is indexed by the query alone.
bool readsRows(ir::InputShape S) {
  switch (S) {
  case ir::InputShape::PerRow:
  case ir::InputShape::PerQueryToken:
    return true;
  case ir::InputShape::Scalar:
  case ir::InputShape::PerHead:
  case ir::InputShape::PerKey:
  case ir::InputShape::PerKeyToken:
  case ir::InputShape::Full:
    return false;
  }
  return false;
}

std::string inputsStruct(const ir::Graph &G) {
  CodeWriter W;
  {
    auto S = W.block("struct Inputs", ";");
    if (G.decls().Inputs.empty())
      W.line("long long unused_;");
    unsigned I = 0;
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const std::string N = generatedName("in", I++, D.Name);
      const std::string T = elemCType(D.Elem);
      W.line("// input " + quotedName(D.Name) + " (" +
             ir::inputShapeName(D.Shape).str() +
             (D.Elem == ir::InputType::F32
                  ? ""
                  : ", " + ir::inputTypeName(D.Elem).str()) +
             ")");
      if (D.Shape == ir::InputShape::Scalar) {
        W.line(T + " " + N + ";");
        W.line(T + " " + N + "_pad_;");
        continue;
      }
      W.line("const " + T + " *" + N + ";");
      // The fifth slot: a full input's key count; for a query-side input the
      // bottom-right shift of a packed call's sequence (of_sequence; 0 in a
      // dense call), since loads get the variant's q_idx, not the token.
      W.line("long long " + N + "_sb, " + N + "_sh, " + N + "_ss, " + N +
             "_rows, " + N + (queryShifted(D.Shape) ? "_row_shift;" : "_cols;"));
    }
    W.line("/// Whether a packed call rebases inputs per sequence (of_sequence):");
    W.line("/// per-row, per-key and per-token inputs.");
    W.line(std::string("static constexpr bool kSequenceInputs = ") +
           (hasSequenceInputs(G) ? "true;" : "false;"));
    if (hasSequenceInputs(G))
      emitOfSequence(W, G);
    I = 0;
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const std::string N = generatedName("in", I++, D.Name);
      std::string Index;
      switch (D.Shape) {
      case ir::InputShape::Scalar:
        continue;
      case ir::InputShape::PerHead:
        Index = "h";
        break;
      case ir::InputShape::PerRow:
        Index = "b * " + N + "_sb + h * " + N + "_sh + attnc::clamp_index(q - (int)" +
                N + "_row_shift, " + N + "_rows)";
        break;
      case ir::InputShape::PerKey:
        Index = "b * " + N + "_sb + h * " + N + "_sh + attnc::clamp_index(k, " +
                N + "_rows)";
        break;
      case ir::InputShape::Full:
        Index = "b * " + N + "_sb + h * " + N + "_sh + attnc::clamp_index(q, " +
                N + "_rows) * " + N + "_ss + attnc::clamp_index(k, " + N +
                "_cols)";
        break;
      case ir::InputShape::PerQueryToken: // one value per token, every head
        Index = "b * " + N + "_sb + attnc::clamp_index(q - (int)" + N +
                "_row_shift, " + N + "_rows)";
        break;
      case ir::InputShape::PerKeyToken:
        Index = "b * " + N + "_sb + attnc::clamp_index(k, " + N + "_rows)";
        break;
      }
      {
        auto F = W.block("__device__ __forceinline__ " + elemCType(D.Elem) +
                         " load_" + N + "(int b, int h, int q, int k) const");
        W.line("(void)b; (void)h; (void)q; (void)k;");
        W.line("return __ldg(" + N + " + (" + Index + "));");
      }
      // The key-inside twin (readsKeys), read through keys_at's copy: key
      // k0 + k of the copy's (b, h), unclamped. The step's key offsets from
      // k0 are constants after unrolling, so each read is one load at an
      // immediate offset from a pointer made once per block, instead of a
      // clamp and a 64-bit address per key (a partial block's step reads
      // 32 keys a thread).
      // The row-inside twin (readsRows), read through rows_at's copy at
      // the query's offset q from its first row, unclamped: bwd_sm90's
      // partial steps read 16 queries a thread.
      if (readsRows(D.Shape)) {
        auto F = W.block("__device__ __forceinline__ " + elemCType(D.Elem) +
                         " load_" + N + "_in_rows(int b, int h, int q, int k) const");
        W.line("(void)b; (void)h; (void)q; (void)k;");
        W.line("return __ldg(" + N + " + (q));");
      }
      if (!readsKeys(D.Shape))
        continue;
      auto F = W.block("__device__ __forceinline__ " + elemCType(D.Elem) +
                       " load_" + N + "_in_keys(int b, int h, int q, int k) const");
      W.line("(void)b; (void)h; (void)q; (void)k;");
      W.line("return __ldg(" + N + " + (" +
             (D.Shape == ir::InputShape::Full
                  ? "attnc::clamp_index(q, " + N + "_rows) * " + N + "_ss + "
                  : std::string()) +
             "k));");
    }
    // keys_at(b, h, k0): a copy whose key-side inputs start at key k0 of
    // (b, h), for the *_in_keys accessors; keys_cover(n): whether every
    // key-side input holds keys [0, n) (the host's shape check makes it
    // true for the call's keys; asked per block, it keeps the unclamped
    // reads sound for any layout the Inputs are given).
    // rows_at(b, h, q0) is keys_at's query-side twin for the *_in_rows
    // accessors, the row shift (a packed call's) taken into it.
    auto emitAt = [&](bool Rows) {
      const std::string Arg = Rows ? "q0" : "k0";
      auto B = W.block(std::string("__device__ __forceinline__ Inputs ") +
                       (Rows ? "rows_at" : "keys_at") + "(int b, int h, int " + Arg +
                       ") const");
      W.line("Inputs r = *this;");
      W.line("(void)b; (void)h; (void)" + Arg + ";");
      unsigned J = 0;
      for (const ir::InputDecl &D : G.decls().Inputs) {
        const std::string N = generatedName("in", J++, D.Name);
        if (!(Rows ? readsRows(D.Shape) : readsKeys(D.Shape)))
          continue;
        const bool PerToken = D.Shape == (Rows ? ir::InputShape::PerQueryToken
                                               : ir::InputShape::PerKeyToken);
        W.line("r." + N + " += b * " + N + "_sb + " +
               (PerToken ? std::string() : "h * " + N + "_sh + ") +
               (Rows ? "(q0 - " + N + "_row_shift)" : Arg) + ";");
      }
      W.line("return r;");
    };
    emitAt(/*Rows=*/false);
    emitAt(/*Rows=*/true);
    // rows_cover(q0, n): keys_cover's twin, the row shift taken into it.
    {
      auto R = W.block(
          "__device__ __forceinline__ bool rows_cover(long long q0, long long n) const");
      W.line("(void)q0; (void)n;");
      std::string Cover = "true";
      I = 0;
      for (const ir::InputDecl &D : G.decls().Inputs) {
        const std::string N = generatedName("in", I++, D.Name);
        if (readsRows(D.Shape))
          Cover += " && q0 >= " + N + "_row_shift && q0 - " + N + "_row_shift + n <= " +
                   N + "_rows";
      }
      W.line("return " + Cover + ";");
    }
    auto C = W.block(
        "__device__ __forceinline__ bool keys_cover(long long n) const");
    W.line("(void)n;");
    std::string Cover = "true";
    I = 0;
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const std::string N = generatedName("in", I++, D.Name);
      if (readsKeys(D.Shape))
        Cover += " && " + N +
                 (D.Shape == ir::InputShape::Full ? "_cols" : "_rows") + " >= n";
    }
    W.line("return " + Cover + ";");
  }
  return W.str();
}

} // namespace attn::codegen
