// The generated Inputs struct and its slot layout.
#include "attn/codegen/InputLayout.h"

#include "attn/codegen/CodeWriter.h"

namespace attn::codegen {

InputLayout inputLayout(const ir::Graph &G) {
  InputLayout L;
  unsigned Next = 0;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    unsigned Count = D.Shape == ir::InputShape::Scalar ? 1 : 6;
    L.Inputs.push_back({D.Name, D.Shape, Next, Count});
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

std::string inputsStruct(const ir::Graph &G) {
  CodeWriter W;
  {
    auto S = W.block("struct Inputs", ";");
    if (G.decls().Inputs.empty())
      W.line("long long unused_;");
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const std::string &N = D.Name;
      if (D.Shape == ir::InputShape::Scalar) {
        W.line("float " + N + ";");
        W.line("float " + N + "_pad_;");
        continue;
      }
      W.line("const float *" + N + ";");
      W.line("long long " + N + "_sb, " + N + "_sh, " + N + "_ss, " + N +
             "_rows, " + N + "_cols;");
    }
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const std::string &N = D.Name;
      std::string Index;
      switch (D.Shape) {
      case ir::InputShape::Scalar:
        continue;
      case ir::InputShape::PerHead:
        Index = "h";
        break;
      case ir::InputShape::PerRow:
        Index = "b * " + N + "_sb + h * " + N + "_sh + attnc::clamp_index(q, " +
                N + "_rows)";
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
      }
      auto F = W.block("__device__ __forceinline__ float load_" + N +
                       "(int b, int h, int q, int k) const");
      W.line("(void)b; (void)h; (void)q; (void)k;");
      W.line("return __ldg(" + N + " + (" + Index + "));");
    }
  }
  return W.str();
}

} // namespace attn::codegen
