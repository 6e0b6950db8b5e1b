// The graph being traced on this thread (private to the DSL library).
#ifndef ATTN_LIB_DSL_ACTIVETRACE_H
#define ATTN_LIB_DSL_ACTIVETRACE_H

namespace attn::ir {
class Graph;
}

namespace attn::dsl::detail {

/// Makes \p G the graph being traced on this thread for the scope's lifetime.
/// While a trace is active, every DSL operation builds its node in that
/// graph and rejects a symbol of any other graph at once, naming the
/// function being traced. Scopes nest: a definition traced from inside a
/// traced function restores the outer trace when it is done.
class ActiveTrace {
public:
  explicit ActiveTrace(ir::Graph &G);
  ~ActiveTrace();
  ActiveTrace(const ActiveTrace &) = delete;
  ActiveTrace &operator=(const ActiveTrace &) = delete;

  /// The graph being traced on this thread, or nullptr outside a trace.
  static ir::Graph *graph();

private:
  ir::Graph *Outer;
};

} // namespace attn::dsl::detail

#endif
