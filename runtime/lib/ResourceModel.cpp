// Resource model: shared memory and threads before compiling; registers and
// spills from the CUBIN's ELF attributes (or ptxas's -v report) after; for
// the attention skeletons and the linear_chunk ones.
#include "attn/runtime/ResourceModel.h"
#include "attn/codegen/Arch.h"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Endian.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace attn::runtime {

namespace {

// The CUBIN is an ELF64 file. The parts read here:
//
//   ELF header    e_shoff @0x28 (8), e_shentsize @0x3a (2), e_shnum @0x3c (2),
//                 e_shstrndx @0x3e (2)
//   section hdr   sh_name @0 (4), sh_type @4 (4), sh_offset @24 (8),
//                 sh_size @32 (8), sh_link @40 (4), sh_info @44 (4)
//   symbol        st_name @0 (4), 24 bytes each
//
// .nv.info is a list of attribute records, each starting with a format
// byte, an attribute byte and a 16-bit field: formats 1-3 carry their value
// in that field (4 bytes in all); format 4 (EIFMT_SVAL) says how many bytes
// of payload follow. REGCOUNT and FRAME_SIZE are SVAL records whose payload
// is (symbol index, value), both 32-bit.
constexpr uint8_t FormatSval = 0x04;
constexpr uint8_t AttrFrameSize = 0x11; // EIATTR_FRAME_SIZE
constexpr uint8_t AttrRegCount = 0x2f;  // EIATTR_REGCOUNT
constexpr uint32_t SectionSymtab = 2;   // SHT_SYMTAB

class ElfReader {
public:
  explicit ElfReader(llvm::StringRef Data) : Data(Data) {}

  uint64_t read(uint64_t Offset, unsigned Bytes) const {
    if (Offset + Bytes > Data.size() || Offset + Bytes < Offset)
      fail(fmt::format("read of {} bytes at offset {} is past the end ({} "
                       "bytes)",
                       Bytes, Offset, Data.size()));
    namespace endian = llvm::support::endian;
    const char *At = Data.data() + Offset;
    switch (Bytes) {
    case 1:
      return static_cast<unsigned char>(*At);
    case 2:
      return endian::read16le(At);
    case 4:
      return endian::read32le(At);
    case 8:
      return endian::read64le(At);
    }
    fail(fmt::format("read of {} bytes: not a field width", Bytes));
  }

  struct Section {
    std::string Name;
    uint32_t Type = 0, Link = 0, Info = 0;
    uint64_t Offset = 0, Size = 0;
    llvm::StringRef Bytes;
  };

  void parse() {
    if (Data.size() < 0x40 || !Data.startswith("\x7f"
                                               "ELF"))
      fail("not an ELF file");
    if (Data[4] != 2 || Data[5] != 1)
      fail("not a 64-bit little-endian ELF file");
    uint64_t ShOff = read(0x28, 8);
    uint64_t ShEntSize = read(0x3a, 2), ShNum = read(0x3c, 2),
             ShStrNdx = read(0x3e, 2);
    if (ShEntSize < 64 || ShStrNdx >= ShNum)
      fail("bad section header table");
    for (uint64_t I = 0; I < ShNum; ++I) {
      uint64_t H = ShOff + I * ShEntSize;
      Section S;
      S.Type = uint32_t(read(H + 4, 4));
      S.Offset = read(H + 24, 8);
      S.Size = read(H + 32, 8);
      S.Link = uint32_t(read(H + 40, 4));
      S.Info = uint32_t(read(H + 44, 4));
      NameOffsets.push_back(uint32_t(read(H, 4)));
      // SHT_NOBITS (.nv.shared.*) has a size but no bytes in the file.
      if (S.Type != 8) {
        if (S.Offset + S.Size > Data.size())
          fail(fmt::format("section {} lies past the end of the file", I));
        S.Bytes = Data.substr(S.Offset, S.Size);
      }
      Sections.push_back(S);
    }
    llvm::StringRef Names = Sections[ShStrNdx].Bytes;
    for (size_t I = 0; I < Sections.size(); ++I)
      Sections[I].Name = cString(Names, NameOffsets[I]);
  }

  const Section *find(llvm::StringRef Name) const {
    for (const Section &S : Sections)
      if (S.Name == Name)
        return &S;
    return nullptr;
  }

  /// The index of symbol \p Name in the symbol table, or -1.
  int64_t symbolIndex(llvm::StringRef Name) const {
    for (const Section &S : Sections) {
      if (S.Type != SectionSymtab || S.Link >= Sections.size())
        continue;
      llvm::StringRef Strings = Sections[S.Link].Bytes;
      for (uint64_t I = 0; I * 24 + 24 <= S.Size; ++I) {
        uint64_t NameOff = read(S.Offset + I * 24, 4);
        if (cString(Strings, NameOff) == Name)
          return int64_t(I);
      }
    }
    return -1;
  }

  [[noreturn]] static void fail(const std::string &Why) {
    throw InternalError("CUBIN: " + Why);
  }

private:
  static llvm::StringRef cString(llvm::StringRef Table, uint64_t Offset) {
    if (Offset >= Table.size())
      return "";
    llvm::StringRef Rest = Table.substr(Offset);
    return Rest.take_until([](char C) { return C == '\0'; });
  }

  llvm::StringRef Data;
  std::vector<Section> Sections;
  std::vector<uint32_t> NameOffsets;
};

/// The first integer after \p Key's end in \p Line before \p Unit, e.g.
/// "Used 255 registers" with Key "Used ", Unit " registers".
std::optional<int> numberBefore(llvm::StringRef Line, llvm::StringRef Unit) {
  size_t At = Line.find(Unit);
  if (At == llvm::StringRef::npos)
    return std::nullopt;
  llvm::StringRef Head = Line.take_front(At).rtrim();
  size_t Start = Head.find_last_not_of("0123456789");
  llvm::StringRef Digits =
      Start == llvm::StringRef::npos ? Head : Head.drop_front(Start + 1);
  int V = 0;
  if (Digits.empty() || Digits.getAsInteger(10, V))
    return std::nullopt;
  return V;
}

} // namespace

KernelResources readCubinResources(llvm::StringRef Cubin,
                                   llvm::StringRef Entry) {
  ElfReader Elf(Cubin);
  Elf.parse();
  int64_t Symbol = Elf.symbolIndex(Entry);
  if (Symbol < 0)
    ElfReader::fail("no symbol '" + Entry.str() + "'");

  KernelResources R;
  bool HaveRegisters = false;
  if (const ElfReader::Section *Info = Elf.find(".nv.info")) {
    uint64_t At = 0;
    while (At + 4 <= Info->Size) {
      uint8_t Format = uint8_t(Elf.read(Info->Offset + At, 1));
      uint8_t Attr = uint8_t(Elf.read(Info->Offset + At + 1, 1));
      uint64_t Field = Elf.read(Info->Offset + At + 2, 2);
      uint64_t Payload = Info->Offset + At + 4;
      At += 4 + (Format == FormatSval ? Field : 0);
      if (Format != FormatSval || Field < 8 || At > Info->Size)
        continue;
      if (Elf.read(Payload, 4) != uint64_t(Symbol))
        continue;
      int Value = int(Elf.read(Payload + 4, 4));
      if (Attr == AttrRegCount) {
        R.Registers = Value;
        HaveRegisters = true;
      } else if (Attr == AttrFrameSize) {
        R.StackFrameBytes = Value;
      }
    }
  }
  if (!HaveRegisters) {
    // Older toolkits leave REGCOUNT out; the entry's .text section then
    // carries the count in the top byte of sh_info.
    if (const ElfReader::Section *Text = Elf.find(".text." + Entry.str())) {
      R.Registers = int(Text->Info >> 24);
      HaveRegisters = R.Registers > 0;
    }
  }
  if (!HaveRegisters)
    ElfReader::fail("no register count for '" + Entry.str() + "'");
  return R;
}

std::optional<PtxasReport> parsePtxasReport(llvm::StringRef Log,
                                            llvm::StringRef Entry) {
  // ptxas prints, per entry:
  //   ptxas info    : Compiling entry function 'NAME' for 'sm_80'
  //   ptxas info    : Function properties for NAME
  //       F bytes stack frame, S bytes spill stores, L bytes spill loads
  //   ptxas info    : Used N registers, ...
  llvm::SmallVector<llvm::StringRef, 64> Lines;
  Log.split(Lines, '\n');
  std::string Header = "Compiling entry function '" + Entry.str() + "'";
  for (size_t I = 0; I < Lines.size(); ++I) {
    if (!Lines[I].contains(Header))
      continue;
    PtxasReport R;
    bool Found = false;
    for (size_t J = I + 1; J < Lines.size(); ++J) {
      llvm::StringRef L = Lines[J];
      if (L.contains("Compiling entry function"))
        break;
      if (auto V = numberBefore(L, " bytes stack frame"))
        R.StackFrameBytes = *V;
      if (auto V = numberBefore(L, " bytes spill stores"))
        R.SpillStoreBytes = *V;
      if (auto V = numberBefore(L, " bytes spill loads"))
        R.SpillLoadBytes = *V;
      if (auto V = numberBefore(L, " registers")) {
        R.Registers = *V;
        Found = true;
      }
    }
    if (Found)
      return R;
  }
  return std::nullopt;
}

ResourceLimits ResourceLimits::forArch(GpuArch Arch) {
  ResourceLimits L;
  L.SharedBytesPerBlock = archSharedLimit(Arch);
  return L;
}

ResourceLimits ResourceLimits::forDevice(GpuArch Arch,
                                         const DeviceInfo &Dev) {
  ResourceLimits L = forArch(Arch);
  L.SharedBytesPerBlock =
      std::min(L.SharedBytesPerBlock, Dev.SharedMemPerBlockOptin);
  return L;
}

std::string pruneBeforeCompile(const codegen::FwdConfig &C, int D, int DV,
                               const ResourceLimits &L) {
  if (std::string Why = C.structuralError(); !Why.empty())
    return Why;
  int Threads = C.Warps * 32;
  if (Threads > L.MaxThreadsPerBlock)
    return fmt::format("{} threads; a block may have {}", Threads,
                       L.MaxThreadsPerBlock);
  int Shared = C.sharedBytes(D, DV);
  if (Shared > L.SharedBytesPerBlock)
    return fmt::format("needs {} bytes of shared memory; {} allowed", Shared,
                       L.SharedBytesPerBlock);
  return "";
}

std::string pruneOnResources(int Threads, const KernelResources &R,
                             const ResourceLimits &L) {
  // Registers are allocated per warp in units of 256 (8 per thread).
  int PerThread = (R.Registers + 7) / 8 * 8;
  int Block = PerThread * Threads;
  if (Block > L.RegistersPerBlock)
    return fmt::format("{} registers x {} threads exceed the {} registers of "
                       "a block",
                       R.Registers, Threads, L.RegistersPerBlock);
  if (R.StackFrameBytes > L.MaxStackFrameBytes)
    return fmt::format("spills: {} registers, {} bytes stack frame (limit {})",
                       R.Registers, R.StackFrameBytes, L.MaxStackFrameBytes);
  return "";
}

std::string pruneAfterCompile(const codegen::FwdConfig &C,
                              const KernelResources &R,
                              const ResourceLimits &L) {
  return pruneOnResources(32 * C.Warps, R, L);
}

std::string pruneBeforeCompile(const codegen::Sm90Config &C,
                               const codegen::KernelSpec &Spec,
                               const ResourceLimits &L) {
  if (std::string Why = codegen::sm90Unsupported(Spec, C); !Why.empty())
    return Why;
  if (C.threads() > L.MaxThreadsPerBlock)
    return fmt::format("{} threads; a block may have {}", C.threads(),
                       L.MaxThreadsPerBlock);
  int Shared = C.sharedBytes(Spec.HeadDim, Spec.HeadDimV);
  if (Shared > L.SharedBytesPerBlock)
    return fmt::format("needs {} bytes of shared memory; {} allowed", Shared,
                       L.SharedBytesPerBlock);
  return "";
}

std::string pruneAfterCompile(const codegen::Sm90Config &C,
                              const KernelResources &R,
                              const ResourceLimits &L) {
  // The CUBIN's count is the launch's (setmaxnreg moves registers between
  // warpgroups later, within the same total).
  return pruneOnResources(C.threads(), R, L);
}

std::string linearPruneBeforeCompile(const codegen::LinearKernelSpec &Spec,
                                     const ResourceLimits &L) {
  const codegen::LinearConfig &C = Spec.Config;
  if (std::string E = C.structuralError(Spec.HeadDim, Spec.HeadDimV);
      !E.empty())
    return E;
  for (int W : {C.Warps, C.BwdWarps})
    if (W * 32 > L.MaxThreadsPerBlock)
      return fmt::format("{} threads exceed the {} of a block", W * 32,
                         L.MaxThreadsPerBlock);
  for (auto [Name, Bytes] : codegen::linearSharedBytes(Spec).byKernel())
    if (Bytes > L.SharedBytesPerBlock)
      return fmt::format("the {} needs {} bytes of shared memory; {} allowed",
                         Name, Bytes, L.SharedBytesPerBlock);
  return "";
}

std::vector<std::string> linearJudgedEntries(const codegen::KernelSource &S) {
  for (const std::string &E : S.Entries)
    if (E == "attnc_linear_fwd")
      return {"attnc_linear_fwd"};
  return {"attnc_linear_bwd_states", "attnc_linear_bwd_chunk"};
}

std::string linearPruneAfterCompile(const codegen::LinearConfig &C,
                                    const std::vector<KernelResources> &R,
                                    const ResourceLimits &L) {
  static const char *Names[] = {"forward", "state passes", "chunk gradients"};
  for (size_t I = 0; I < R.size(); ++I) {
    int Threads = (I == 0   ? C.Warps
                   : I == 1 ? codegen::LinearStateWarps
                            : C.BwdWarps) *
                  32;
    const char *Name = Names[std::min<size_t>(I, 2)];
    // Registers are allocated per warp in units of 256 (8 per thread).
    int Block = (R[I].Registers + 7) / 8 * 8 * Threads;
    if (Block > L.RegistersPerBlock)
      return fmt::format("{}: {} registers x {} threads exceed the {} "
                         "registers of a block",
                         Name, R[I].Registers, Threads, L.RegistersPerBlock);
    if (R[I].StackFrameBytes > L.MaxStackFrameBytes)
      return fmt::format("{} spills: {} registers, {} bytes stack frame "
                         "(limit {})",
                         Name, R[I].Registers, R[I].StackFrameBytes,
                         L.MaxStackFrameBytes);
  }
  return "";
}

} // namespace attn::runtime
