// A warp of 32 lanes run lane by lane on the host, for the tests of
// block_range.cuh's warp-cooperative functions (compact_line, packed_block_of):
// the device passes its shuffle/ballot warp, the tests pass this one.
#ifndef ATTNC_TESTS_CODEGEN_HOSTWARP_H
#define ATTNC_TESTS_CODEGEN_HOSTWARP_H

#include "attnc/block_range.cuh"

namespace attnc::test {

struct HostWarp {
  /// One value a lane.
  struct Values {
    int V[attnc::kRangeLanes];
    int at(int Lane) const { return V[Lane]; }
  };
  template <class F> Values values(const F &Of) const {
    Values R;
    for (int Lane = 0; Lane < attnc::kRangeLanes; ++Lane)
      R.V[Lane] = Of(Lane);
    return R;
  }
  /// The inclusive prefix sums of one value a lane.
  template <class F> Values sums(const F &Value) const {
    Values S;
    int Run = 0;
    for (int Lane = 0; Lane < attnc::kRangeLanes; ++Lane)
      S.V[Lane] = Run += Value(Lane);
    return S;
  }
  /// The ballot: bit L set when \p P holds on lane L.
  template <class Pred> unsigned vote(const Pred &P) const {
    unsigned V = 0;
    for (int Lane = 0; Lane < attnc::kRangeLanes; ++Lane)
      if (P(Lane))
        V |= 1u << Lane;
    return V;
  }
  template <class G> void each(const G &Run) const {
    for (int Lane = 0; Lane < attnc::kRangeLanes; ++Lane)
      Run(Lane);
  }
};

} // namespace attnc::test

#endif
