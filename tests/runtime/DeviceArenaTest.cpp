// The workspace planner the backward runners carve their scratch with:
// offsets, padding, empty regions and totals, all on the host; and the
// arena's behaviour where there is no driver.
#include "DeviceArena.h"
#include "PerStream.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::runtime;

TEST_CASE("arena layout: regions start on their alignment", "[runtime][arena]") {
  ArenaLayout L;
  unsigned A = L.add(100);  // 256 by default
  unsigned B = L.add(1000); // padded after A to 256
  unsigned C = L.add(1);
  CHECK(L.regions() == 3);
  CHECK(L.offset(A) == 0);
  CHECK(L.offset(B) == 256);
  CHECK(L.offset(C) == 256 + 1024);
  CHECK(L.size(B) == 1000);
  // The end (1281) rounded up to the largest alignment.
  CHECK(L.bytes() == 1536);
}

TEST_CASE("arena layout: empty regions take no space and have no address",
          "[runtime][arena]") {
  ArenaLayout L;
  unsigned E0 = L.add(0);
  unsigned A = L.add(40, 16);
  unsigned E1 = L.add(0, 256); // must not pad A's end to 256
  unsigned B = L.add(8, 8);
  CHECK(L.offset(A) == 0);
  CHECK(L.offset(B) == 40);
  CHECK(L.offset(E1) == 40);
  // Largest alignment of a non-empty region: 16.
  CHECK(L.bytes() == 48);
  const CUdeviceptr Base = 0x10000;
  CHECK(L.at(Base, E0) == nullptr);
  CHECK(L.at(Base, E1) == nullptr);
  CHECK(L.at<float>(Base, A) == reinterpret_cast<float *>(Base));
  CHECK(L.at<int>(Base, B) == reinterpret_cast<int *>(Base + 40));
}

TEST_CASE("arena layout: nothing but empty regions needs no bytes",
          "[runtime][arena]") {
  ArenaLayout L;
  CHECK(L.bytes() == 0);
  L.add(0);
  L.add(0, 16);
  CHECK(L.bytes() == 0);
}

TEST_CASE("arena layout: bytes then 16-byte aligned int arrays",
          "[runtime][arena]") {
  // The forward's block-mask buffer: a class byte per cell, then the
  // per-row counts and the lists as int arrays starting on 16 bytes.
  const size_t Cells = 3 * 5 * 7, Rows = 3 * 5;
  ArenaLayout L;
  unsigned Classes = L.add(Cells, 1);
  unsigned Count = L.add(4 * Rows, 16);
  unsigned List = L.add(4 * Cells, 4);
  CHECK(L.offset(Classes) == 0);
  CHECK(L.offset(Count) == 112); // 105 rounded up to 16
  CHECK(L.offset(List) == 112 + 4 * Rows);
  CHECK(L.bytes() == 112 + 4 * Rows + 4 * Cells);
}

TEST_CASE("arena layout: the old runners' 256-byte carving",
          "[runtime][arena]") {
  // Each region at the sum of the earlier sizes rounded up to 256 each,
  // the total the sum of them all: as both backward runners laid out
  // their workspace before the planner.
  const size_t Sizes[] = {4, 0, 513, 256, 0, 70000, 1};
  ArenaLayout L;
  size_t Expect = 0;
  for (size_t S : Sizes) {
    unsigned R = L.add(S);
    if (S)
      CHECK(L.offset(R) == Expect);
    Expect += (S + 255) / 256 * 256;
  }
  CHECK(L.bytes() == Expect);
}

TEST_CASE("arena layout: bad alignments are internal errors",
          "[runtime][arena]") {
  ArenaLayout L;
  CHECK_THROWS_AS(L.add(8, 3), InternalError);
  CHECK_THROWS_AS(L.add(8, 0), InternalError);
  CHECK_THROWS_AS(L.add(8, 512), InternalError);
}

TEST_CASE("device arena: no allocation for no bytes, and none without a "
          "driver",
          "[runtime][arena]") {
  DeviceArena A("test workspace");
  CHECK_FALSE(A.ensure(0));
  CHECK(A.base() == 0);
  CHECK(A.capacity() == 0);
  if (CudaDriver::get().available())
    return; // the allocation itself is covered where there is a GPU
  CHECK_THROWS_WITH(A.ensure(64), Catch::Contains("no CUDA driver"));
  CHECK(A.capacity() == 0);
}

TEST_CASE("per-stream state: one entry a stream, kept between calls",
          "[runtime][arena]") {
  int Made = 0;
  PerStream<DeviceArena> Arenas([&] {
    ++Made;
    return std::make_unique<DeviceArena>("scratch");
  });
  // Stream handles are opaque pointers; these are never dereferenced.
  CUstream S1 = reinterpret_cast<CUstream>(uintptr_t(0x1000));
  CUstream S2 = reinterpret_cast<CUstream>(uintptr_t(0x2000));
  DeviceArena &Null = Arenas.get(nullptr); // the legacy stream is one too
  DeviceArena &A1 = Arenas.get(S1);
  DeviceArena &A2 = Arenas.get(S2);
  CHECK(Made == 3);
  CHECK(Arenas.size() == 3);
  CHECK(&A1 != &A2);
  CHECK(&Null != &A1);
  // A later call on a stream finds what the earlier ones left there.
  CHECK(&Arenas.get(S1) == &A1);
  CHECK(&Arenas.get(nullptr) == &Null);
  CHECK(Made == 3);

  // A stream being captured allocates nothing: with no entry of its own it
  // takes over the one used last (the warm-up's), and keeps it; the
  // warm-up's stream then makes a new one, so that its calls (larger ones
  // included, which grow their arena) never touch the graph's memory.
  CUstream Capture = reinterpret_cast<CUstream>(uintptr_t(0x3000));
  int MadeCaptured = 0;
  PerStream<DeviceArena> Captured(
      [&] {
        ++MadeCaptured;
        return std::make_unique<DeviceArena>("scratch");
      },
      [&](CUstream S) { return S == Capture; });
  DeviceArena &WarmUp = Captured.get(S2);
  CHECK(&Captured.get(Capture) == &WarmUp);
  CHECK(&Captured.get(Capture) == &WarmUp); // still, once the capture ends
  CHECK(Captured.size() == 1);
  CHECK(MadeCaptured == 1);
  DeviceArena &After = Captured.get(S2);
  CHECK(&After != &WarmUp);
  CHECK(MadeCaptured == 2);
  CHECK(&Captured.get(Capture) == &WarmUp);
  CHECK(&Captured.get(S2) == &After);
  CHECK(Captured.size() == 2);
  // The legacy stream as the warm-up's is handed over the same way.
  PerStream<DeviceArena> FromNull(
      [&] { return std::make_unique<DeviceArena>("scratch"); },
      [&](CUstream S) { return S == Capture; });
  DeviceArena &NullWarmUp = FromNull.get(nullptr);
  CHECK(&FromNull.get(Capture) == &NullWarmUp);
  CHECK(&FromNull.get(nullptr) != &NullWarmUp);
  CHECK(FromNull.size() == 2);
  // A capture before any call has nothing to borrow: it gets its own.
  PerStream<DeviceArena> Cold(
      [&] { return std::make_unique<DeviceArena>("scratch"); },
      [&](CUstream S) { return S == Capture; });
  DeviceArena &Own = Cold.get(Capture);
  CHECK(&Cold.get(S1) != &Own);
  CHECK(Cold.size() == 2);

  // perStream copies its arguments into the maker.
  PerStream<DeviceArena> Named = perStream<DeviceArena>(std::string("named"));
  CHECK(&Named.get(S1) != &Named.get(S2));
  CHECK(Named.size() == 2);
}
