// A C entry point to gpu.grouped's forward grouped GEMM, for bench/gpu_gemm_ab_torch.py: torch
// calls moenum's plan on its own tensors and stream, so the two are timed round by round in one
// process under one load (D[M,N] = A[M,K] . B_e^T, B as [groups, N, K], bf16 in and out; counts
// and offsets int64 on the device, offsets with groups + 1 entries).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "gemm/grouped_gemm.h"
#include "sm90/cutlass_engine.h"

namespace {

// sm90::PlanOptions::strided_batch, as a bit of the tile value and a suffix of the tile's name.
constexpr int kStridedBatchBit = 0x100, kTileMask = kStridedBatchBit - 1;
constexpr const char* kStridedBatchSuffix = " + strided batch";
// sm90::PlanOptions::batch_l2 other than the rule's, as a suffix of the name ("auto + L2 weights
// normal rows normal") and bits of the tile value: kL2Bit, then each sm90::L2Priority in two bits.
constexpr int kL2Bit = 0x200, kL2WeightsShift = 10, kL2RowsShift = 12;
constexpr const char* kL2Prefix = " + L2 weights ";

// sm90::PlanOptions::batch_every_cta, as the name's last suffix ("auto + batch on every CTA", after
// any L2 suffix) and a bit of the tile value.
constexpr int kEveryCtaBit = 0x4000;
constexpr const char* kEveryCtaSuffix = " + batch on every CTA";

// Strips `suffix` off the end of `name`, leaving something before it: whether it did.
bool take_suffix(std::string& name, const char* suffix) {
  const size_t n = std::strlen(suffix);
  if (name.size() <= n || name.compare(name.size() - n, n, suffix) != 0) return false;
  name.resize(name.size() - n);
  return true;
}

// Strips a trailing " + L2 weights W rows R" off `name`: the bits it stands for, 0 if none, -1 if
// W or R is no priority's name.
int take_l2_suffix(std::string& name) {
  namespace sm90 = moenum::gpu::sm90;
  const size_t at = name.find(kL2Prefix);
  if (at == std::string::npos) return 0;
  const std::string rest = name.substr(at + std::strlen(kL2Prefix));
  name.resize(at);
  auto priority = [](const std::string& word) {
    for (auto p : {sm90::L2Priority::Normal, sm90::L2Priority::EvictFirst, sm90::L2Priority::EvictLast})
      if (word == sm90::l2_priority_name(p)) return static_cast<int>(p);
    return -1;
  };
  const size_t rows = rest.find(" rows ");
  if (rows == std::string::npos) return -1;
  const int w = priority(rest.substr(0, rows)), r = priority(rest.substr(rows + 6));
  return w < 0 || r < 0 ? -1 : kL2Bit | w << kL2WeightsShift | r << kL2RowsShift;
}

struct FpropHandle {
  std::unique_ptr<moenum::gpu::GemmEngine> engine;
  moenum::gpu::GroupedGemmDesc desc;
};

}  // namespace

extern "C" {

// The value of the sm90::Tile named `name` (sm90::tile_name), or -1 if no tile has that name. A
// forced tile's name followed by kStridedBatchSuffix: its value with kStridedBatchBit set; the L2
// and every-CTA suffixes (above) set their bits.
int moenum_fprop_tile(const char* name) {
  namespace sm90 = moenum::gpu::sm90;
  std::string tile(name);
  const int every_cta = take_suffix(tile, kEveryCtaSuffix) ? kEveryCtaBit : 0;
  const int l2 = take_l2_suffix(tile);
  if (l2 < 0) return -1;
  const bool batch = take_suffix(tile, kStridedBatchSuffix);
  for (int t = static_cast<int>(batch); t < static_cast<int>(sm90::Tile::kCount); ++t)
    if (tile == sm90::tile_name(static_cast<sm90::Tile>(t))) return t | (batch ? kStridedBatchBit : 0) | l2 | every_cta;
  return -1;
}

// tile: the value of sm90::Tile (0 = the automatic choice; moenum_fprop_tile looks one up), with
// kStridedBatchBit for a forced tile that also runs equal small groups as its strided batch and the
// L2 bits for the batch's priorities and kEveryCtaBit for its tiles on every CTA;
// chunks, run: -1 = automatic; sm_count: the persistent grid's SMs, -1 = every SM. Null on failure.
void* moenum_fprop_new(int tile, int chunks, int run, int sm_count, int groups, int64_t n, int64_t k, const void* b) {
  try {
    auto h = std::make_unique<FpropHandle>();
    namespace sm90 = moenum::gpu::sm90;
    moenum::gpu::CutlassSm90Options o{static_cast<sm90::Tile>(tile & kTileMask), chunks};
    o.strided_batch = (tile & kStridedBatchBit) != 0;
    if (tile & kL2Bit)
      o.batch_l2 = sm90::BatchL2{static_cast<sm90::L2Priority>(tile >> kL2WeightsShift & 3),
                                 static_cast<sm90::L2Priority>(tile >> kL2RowsShift & 3)};
    o.batch_every_cta = (tile & kEveryCtaBit) != 0;
    o.run = run;
    o.sm_count = sm_count;
    h->engine = moenum::gpu::make_cutlass_sm90_engine(o);
    h->desc.kind = moenum::gpu::GemmKind::Fprop;
    h->desc.groups = groups;
    h->desc.n = n;
    h->desc.k = k;
    const auto* b16 = static_cast<const uint16_t*>(b);
    for (int e = 0; e < groups; ++e) h->desc.b_expert.push_back(b16 + size_t(e) * n * k);
    return h.release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moenum_fprop_new: %s\n", e.what());
    return nullptr;
  }
}

// Launches on `stream` (a cudaStream_t); the weights are the ones given to moenum_fprop_new; rows:
// the rows of a and d (0: not told, as for a caller that does not know them on the host).
int moenum_fprop_run(void* handle, const void* a, void* d, int64_t rows, const int64_t* counts, const int64_t* offsets,
                     void* stream) {
  try {
    auto* h = static_cast<FpropHandle*>(handle);
    h->desc.a = static_cast<const uint16_t*>(a);
    h->desc.d_rows = static_cast<uint16_t*>(d);
    h->desc.rows = rows;
    h->desc.counts = counts;
    h->desc.offsets = offsets;
    const auto s = static_cast<cudaStream_t>(stream);
    h->engine->begin(counts, h->desc.groups, s);
    h->engine->run(h->desc, s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moenum_fprop_run: %s\n", e.what());
    return 1;
  }
}

void moenum_fprop_free(void* handle) { delete static_cast<FpropHandle*>(handle); }
}
