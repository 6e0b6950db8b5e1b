// Line-oriented writer of generated code with RAII indentation.
#ifndef ATTN_CODEGEN_CODEWRITER_H
#define ATTN_CODEGEN_CODEWRITER_H

#include <string>

namespace attn::codegen {

class CodeWriter {
public:
  /// Writes \p Line at the current indentation, then a newline.
  void line(const std::string &Line) {
    if (!Line.empty())
      Text.append(Depth * 2, ' ');
    Text += Line;
    Text += '\n';
  }
  /// Indents the lines written while it lives: `{ auto I = W.indent(); ... }`.
  class Indent {
  public:
    explicit Indent(CodeWriter &W) : W(W) { ++W.Depth; }
    ~Indent() { --W.Depth; }
    Indent(const Indent &) = delete;
    Indent &operator=(const Indent &) = delete;

  private:
    CodeWriter &W;
  };
  Indent indent() { return Indent(*this); }
  /// Writes `Head {`, indents until the returned object dies, then `}`+Tail.
  class Block {
  public:
    Block(CodeWriter &W, const std::string &Head, std::string Tail)
        : W(W), Tail(std::move(Tail)) {
      W.line(Head + " {");
      ++W.Depth;
    }
    ~Block() {
      --W.Depth;
      W.line("}" + Tail);
    }
    Block(const Block &) = delete;
    Block &operator=(const Block &) = delete;

  private:
    CodeWriter &W;
    std::string Tail;
  };
  Block block(const std::string &Head, std::string Tail = "") {
    return Block(*this, Head, std::move(Tail));
  }
  const std::string &str() const { return Text; }

private:
  std::string Text;
  int Depth = 0;
};

} // namespace attn::codegen

#endif
