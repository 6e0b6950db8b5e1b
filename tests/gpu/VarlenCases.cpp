// gpu_varlen_test's case matrix: ragged packed batches of every mask and
// input kind on the forward and backward skeletons, the packed decode cases
// (--decode), and --compile-only's compile of their kernels for sm_90a.
#include "VarlenCases.h"

#include "BackwardRunner.h"
#include "TestDefinitions.h"

#include "attn/analysis/MaskBounds.h"

#include <cstdio>
#include <optional>

namespace attn::gputest::varlen {

namespace {

/// The packed decode cases, appended to \p Out.
void appendDecodeCases(std::vector<Case> &Out, bool Quick) {
  // Packed decode (at most 16 queries a sequence: decode_sm80, by the
  // short-query rule and named) with per-row, per-key and per-token inputs
  // and ALiBi's per-head slopes over q_idx: each sequence reads its own
  // tokens' values (a query row its token's, a key its packed key token's)
  // while its keys are split over CTAs (3000 keys: 47 blocks of 64) and
  // merged; counts 0, 1 and 16, more queries than keys, empty sequences.
  const std::vector<int> DecQ = {1, 0, 16, 3, 7, 2};
  const std::vector<int> DecKv = {2000, 5, 1100, 1, 3000, 0};
  for (const char *Def :
       {"mha_document", "mha_document_ids", "mha_row_scale", "alibi_learnable", "mha"})
    for (const char *Skel : {"", "decode_sm80"}) {
      Out.push_back({Def, DType::F16, 128, 4, 2, DecQ, DecKv, Skel, false, "", true});
      if (!Quick)
        Out.push_back({Def, DType::BF16, 64, 4, 4, DecQ, DecKv, Skel, false, "", true});
    }
}

} // namespace

std::vector<Case> cases(bool Quick) {
  // Empty query and key sequences, one token, keys past the queries
  // (bottom-right), more queries than keys, lengths off every tile.
  const std::vector<int> Lq = {0, 1, 130, 257, 64, 5, 3, 200};
  const std::vector<int> Lkv = {3, 1, 300, 257, 0, 70, 1, 129};
  const std::vector<int> Self = {1, 0, 200, 513, 77};
  std::vector<Case> Out;
  for (DType T : {DType::F16, DType::BF16})
    for (const char *Def : {"mha", "mha_full", "alibi_learnable"})
      for (int D : {64, 128}) {
        if (Quick && T != DType::F16)
          continue;
        for (const char *Skel : {"", "fwd_sm80"}) {
          bool Gqa = D == 128;
          Out.push_back({Def, T, D, 4, Gqa ? 2 : 4, Lq, Lkv, Skel, *Skel == 0});
          Out.push_back({Def, T, D, 2, Gqa ? 1 : 2, Self, Self, Skel, *Skel == 0});
        }
      }
  // Masks the analysis bounds from the block's box (varlen.cuh's
  // tile_may_keep and tile_full): a window that leaves whole key blocks
  // empty before it (its first blocks are skipped without a mask
  // evaluation), a prefix length that is a runtime int32, a 256-key window
  // (blocks inside it run the full path, no mask evaluation) and chunks of
  // a runtime int32 length.
  for (const char *Def :
       {"mha_window", "mha_prefix_lm", "mha_sliding_window", "mha_chunked"})
    for (const char *Skel : {"", "fwd_sm80"}) {
      Out.push_back({Def, DType::F16, 64, 4, 4, Lq, Lkv, Skel, *Skel == 0});
      Out.push_back({Def, DType::F16, 128, 2, 1, Self, Self, Skel, *Skel == 0});
    }
  // Per-row, per-key and per-token inputs (document ids as float [H,
  // tokens] and int32 [tokens] masks, a per-row score scale and a per-key
  // token bias): each sequence reads its tokens' values, a query its own
  // token's whatever its bottom-right q_idx (ragged lengths with shifts of
  // both signs, empty sequences and single tokens), forward on fwd_sm90 and
  // fwd_sm80, backward on bwd_sm90's packed lean step (d64's row split,
  // and d128 with grouped heads).
  for (const char *Def : {"mha_document", "mha_document_ids", "mha_row_scale"}) {
    for (const char *Skel : {"", "fwd_sm80"}) {
      Out.push_back({Def, DType::F16, 64, 4, 4, Lq, Lkv, Skel, *Skel == 0});
      Out.push_back({Def, DType::F16, 128, 4, 2, Lq, Lkv, Skel, *Skel == 0});
    }
    Out.push_back({Def, DType::F16, 128, 2, 1, Self, Self, "", true});
  }
  appendDecodeCases(Out, Quick);
  // bwd_sm90's packed column split (two warpgroups split dK's, dV's and
  // dQ's columns over 64 keys; the dense default at head dims 192 and 256),
  // named: causal bottom-right over the ragged lengths with grouped heads,
  // and the 256-key window (d256: the split takes value dims of 128 or 256,
  // and the cases have one head dim).
  Out.push_back({"mha", DType::F16, 256, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x64s2.split.fused.varlen"});
  Out.push_back({"mha_sliding_window", DType::F16, 256, 2, 1, Self, Self, "", true,
                 "bwd90ws.kv64x64s2.split.fused.varlen"});
  // The packed lean step at d64 (dQ's rows split over the two warpgroups,
  // 128 x 128 tiles) with grouped heads, and over lengths with many whole
  // tiles inside and ragged ends (its bounds-free tiles); the forms the
  // packed calls ran before, named: bwd_sm80's two-kernel mode at d64 and
  // the plain lockstep step at d128.
  const std::vector<int> Tiles = {1, 640, 383, 129, 1000};
  Out.push_back({"mha", DType::F16, 64, 4, 2, Lq, Lkv, "", true});
  Out.push_back({"mha", DType::F16, 64, 2, 1, Tiles, Tiles, "", true});
  Out.push_back({"mha_full", DType::F16, 64, 2, 2, Tiles, Tiles, "", true});
  Out.push_back({"mha_full", DType::F16, 128, 2, 1, Tiles, Tiles, "", true});
  Out.push_back({"mha", DType::F16, 64, 2, 2, Self, Self, "", true, "kv64x128w8.q128x64w8.s2"});
  Out.push_back({"mha", DType::F16, 128, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x128s2.fused.varlen"});
  // d128's packed default before its turns were taken ahead (the lean step's
  // one turn warp), and the turns taken ahead with the turn warps' own
  // thread reductions.
  Out.push_back({"mha", DType::F16, 128, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x128s2.lean2.fused.varlen"});
  Out.push_back({"mha_window", DType::F16, 128, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x128s2.lean2.red2.fused.varlen"});
  // A masked d64 batch whose longest sequence has 4096 queries or more:
  // packedCallBackwardChoice's long-walk twin, packed.
  const std::vector<int> LongOne = {4200, 77, 1, 700};
  Out.push_back({"mha", DType::F16, 64, 2, 1, LongOne, LongOne, "", true});
  // More than 32 sequences (empty ones and single tokens among them): the
  // packed grids' sequence search (block_range.cuh's packed_block_of) votes
  // over two groups of 32 in the forward, the dK/dV kernel and the dQ
  // convert.
  std::vector<int> Many(40);
  for (int I = 0; I < 40; ++I)
    Many[I] = I % 9 == 4 ? 0 : I % 7 == 3 ? 1 : (I * 37) % 190;
  for (const char *Def : {"mha", "mha_chunked"})
    Out.push_back({Def, DType::F16, 128, 2, 1, Many, Many, "", true});
  // A sequence of more than 32 blocks: the packed range search's votes over
  // boxes of 32 blocks (block_range.cuh) find both ends of each range
  // (4200 tokens: 33 query and key blocks of 128 in the forward and the
  // dK/dV kernel, 66 key blocks of 64 in the dQ kernel). The fp64 yardstick
  // of so long a sequence takes a minute or more: the forward of each mask,
  // and the backward of the window only.
  const std::vector<int> Long = {4200, 1, 300};
  for (const char *Def : {"mha", "mha_sliding_window", "mha_prefix_lm", "mha_chunked"})
    Out.push_back({Def, DType::F16, 64, 1, 1, Long, Long, "",
                   std::string(Def) == "mha_sliding_window"});
  // The same window's backward at d128 (bwd_sm90's packed form): its dQ
  // ranks count the key blocks above a CTA's that keep a query block by
  // votes of 32 blocks (bwd_sm90_varlen.cuh), two votes here.
  if (!Quick)
    Out.push_back({"mha_sliding_window", DType::F16, 128, 1, 1, Long, Long, "", true});
  // Unmasked, rotated walks decided per sequence (a row of at most
  // a.dq_rotate = SMs / 2 key blocks rotates): a sequence whose row (69 key
  // blocks of 64) is too long to rotate on any GPU of at most 138 SMs walks
  // from query block 0, beside a long one that rotates on a GPU of 126 SMs
  // or more (47 key blocks) and short ones.
  const std::vector<int> Mixed = {4400, 3000, 300, 1};
  if (!Quick)
    Out.push_back({"mha_full", DType::F16, 128, 1, 1, Mixed, Mixed, "", true});
  return Out;
}

/// Compiles case \p C's kernels for sm_90a into the kernel cache, its
/// tensors packed (THD: the packed backward, packedBackwardChoice) or dense
/// (BSHD: the dense backward).
void compileCase(const Case &C, Layout L) {
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = C.D;
  Sig.TensorLayout = L;
  Sig.Skeleton = C.Skeleton;
  Sig.BackwardConfig = C.BwdConfig;
  Sig.Backend = "generated";
  Sig.Arch = GpuArch::Sm90a;
  runtime::Attention Att(makeDefinition(C.Def), Sig);
  if (C.Decode)
    Att.precompile(runtime::PrecompileSet{}); // the short-query rule's kernel
  std::string Bwd = "-";
  if (C.Backward) {
    runtime::KernelChoice Choice = Att.backwardChoice();
    if (L == Layout::THD) // by the longest sequence, as the call chooses
      Choice = runtime::packedCallBackwardChoice(
          Choice, Att.definition().Graph->decls().HasMask, longest(C.Lq));
    runtime::BackwardRunner Runner(
        Att.definition(),
        runtime::kernelTarget(Att.definition(), Sig, GpuArch::Sm90a,
                              runtime::Direction::Backward),
        Choice);
    Bwd = Choice.str();
  }
  // The persistent packed walk, which ATTNC_FWD_PERSISTENT=1 (or a batch of
  // many tiles with few visits) runs where the mask's ranges come from box
  // classes (the others' packed calls keep the plain kernel).
  const bool Walks =
      analysis::packedRangeFromBoxes(analysis::analyzeMask(*Att.definition().Graph));
  if (const auto *C90 = std::get_if<codegen::Sm90Config>(&Att.forwardChoice().Config))
    if (std::optional<codegen::Sm90Config> P = C90->persistentFor(C.D, C.D);
        P && Walks && L == Layout::THD && C.Skeleton.empty() && !C.Decode) {
      runtime::Signature SigP = Sig;
      SigP.Config = P->str();
      runtime::Attention AttP(makeDefinition(C.Def), SigP);
    }
  std::printf("compiled %s %s d%d: %s | %s\n", C.Def.c_str(), dtypeName(C.Dt).data(), C.D,
              Att.forwardChoice().str().c_str(), Bwd.c_str());
  std::fflush(stdout);
}

/// --compile-only: the kernels of the cases compiled for sm_90a into the
/// kernel cache ($ATTNC_CACHE_DIR), without a GPU, so that a device run
/// reads them instead of compiling: the forward, and for a backward case
/// the packed backward (packedBackwardChoice: bwd_sm90's packed lean step at
/// head dims 64 and 128, unless a case names another).
int compileOnly(bool Quick, bool DecodeOnly, const char *Filter) {
  for (const Case &C : cases(Quick))
    if ((!Filter || C.Def == Filter) && (!DecodeOnly || C.Decode))
      compileCase(C, Layout::THD);
  return 0;
}

} // namespace attn::gputest::varlen
