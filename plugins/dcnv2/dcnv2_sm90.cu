// trtconv DCNv2 forward for Hopper (sm_90a PTX): the fused design of dcnv2.cu with the
// matrix product on warpgroup MMA (wgmma) instead of WMMA.
//
// Why a second kernel (plugins/dcnv2/NOTES.md, v10): the WMMA kernel is bound by the
// L1/shared-memory data path -- corner gathers plus the `ldmatrix` loads of every WMMA
// fragment. wgmma reads both operands straight from shared memory through descriptors and
// runs asynchronously, so (1) the fragment loads disappear, (2) the tensor cores work on
// step k while the same warps gather step k+1, and (3) one warpgroup tile can be 64 x 256,
// so each bilinear sample feeds 256 output channels (half the gathers per FLOP of v10).
//
// Implicit GEMM as in dcnv2.cu: M = output pixels, N = output channels of a conv group,
// K = taps x input channels, walked deformable-group segment -> tap -> channel chunk (tap
// outer, so a tap's sampling recipes -- corner offsets, bilinear weights x mask, FP32 -- serve
// all the chunks of a tap). A K step covers RB bytes of channels per pixel: each shared-memory
// row of A (pixel) and B (output channel) is RB bytes in wgmma's RB-byte-swizzle K-major
// layout. RB = 64 ("k32" tiles: 32 FP16/BF16, 16 FP32 channels; recipes in the registers of
// the threads that gather, two stages in 48 KiB) or 128 ("k64" tiles: whole 128-byte lines per
// gathered pixel and copied weight row; recipes in shared memory; two stages of up to 48 KiB,
// static shared memory past 48 KiB being allowed for sm_90a). One barrier per step.
//
// Entry points: dcnv2_<dt>_<layout>_m<BM>n<BN>k<32|64><w|v>[KS], dt in f16, bf16, tf32 (FP32
// I/O, TF32 product; the FP32-accurate mode stays on dcnv2.cu's 3xTF32 kernel). Block:
// 128 * BM / 64 threads per warpgroup column (WN of them); grid as dcnv2.cu, x times KS for
// split-K. Static shared memory only (no dynamic shared memory, no opt-in attribute).
// Layouts, argument order and border rule: as dcnv2.cu.
//
// Regenerate the shipped PTX with `make dcnv2-ptx` after editing this file.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

using namespace nvcuda;

namespace trtconv_dcnv2 {

#include "dcnv2_common.cuh"

namespace sm90 {

// ---- wgmma, shared-memory descriptors, async copies ----------------------------------------
// Descriptor of a K-major operand tile with RB-byte rows (64 or 128) and the RB-byte swizzle:
// 8-row core groups 8 * RB bytes apart (SBO); the leading offset is unused for swizzled
// K-major tiles. Layout type (bits 62-63): 1 = 128-byte swizzle, 2 = 64-byte.
template <int RB>
__device__ __forceinline__ uint64_t desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(8 * RB >> 4) << 32) |
         ((uint64_t)(RB == 128 ? 1 : 2) << 62);
}

// Byte offset of 16-byte chunk q of row r in an RB-byte-swizzled tile (8 * RB-byte aligned).
template <int RB>
__device__ __forceinline__ int swz(int r, int q) {
  if constexpr (RB == 128) return r * 128 + ((q ^ (r & 7)) << 4);
  else return r * 64 + ((q ^ ((r >> 1) & 3)) << 4);
}

#define DCN_ACC64                                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define DCN_ACC32                                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define DCN_ACC128                                                                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "   \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, "   \
  "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, "   \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, " \
  "%106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "      \
  "%123, %124, %125, %126, %127}"
#define DCN_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define DCN_F16(d, i) DCN_F4(d, i), DCN_F4(d, i + 4), DCN_F4(d, i + 8), DCN_F4(d, i + 12)
#define DCN_F64(d, i) DCN_F16(d, i), DCN_F16(d, i + 16), DCN_F16(d, i + 32), DCN_F16(d, i + 48)
#define DCN_OPS32(d) DCN_F16(d, 0), DCN_F16(d, 16)
#define DCN_OPS64(d) DCN_F64(d, 0)
#define DCN_OPS128(d) DCN_F64(d, 0), DCN_F64(d, 64)

// One warpgroup MMA, D (FP32, in registers) += A (64 x K, shared) * B (N x K, shared).
// A, B, S: operand numbers of the two descriptors and of the scale-d flag.
#define DCN_WGMMA(NAME, INSTR, NACC, ACC, OPS, A, B, S, TAIL)                                               \
  __device__ __forceinline__ void NAME(float (&d)[NACC], uint64_t a, uint64_t b) {                         \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n" INSTR " " ACC ", %" #A ", %" #B ", p, 1, 1" \
                 TAIL ";\n}\n"                                                                              \
                 : OPS(d)                                                                                   \
                 : "l"(a), "l"(b), "r"(1));                                                                 \
  }
DCN_WGMMA(mma_f16_n256, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", 128, DCN_ACC128, DCN_OPS128, 128, 129, 130, ", 0, 0")
DCN_WGMMA(mma_bf16_n256, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", 128, DCN_ACC128, DCN_OPS128, 128, 129, 130, ", 0, 0")
DCN_WGMMA(mma_tf32_n256, "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", 128, DCN_ACC128, DCN_OPS128, 128, 129, 130, "")
DCN_WGMMA(mma_f16_n128, "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", 64, DCN_ACC64, DCN_OPS64, 64, 65, 66, ", 0, 0")
DCN_WGMMA(mma_bf16_n128, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", 64, DCN_ACC64, DCN_OPS64, 64, 65, 66, ", 0, 0")
DCN_WGMMA(mma_tf32_n128, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", 64, DCN_ACC64, DCN_OPS64, 64, 65, 66, "")
DCN_WGMMA(mma_f16_n64, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", 32, DCN_ACC32, DCN_OPS32, 32, 33, 34, ", 0, 0")
DCN_WGMMA(mma_bf16_n64, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", 32, DCN_ACC32, DCN_OPS32, 32, 33, 34, ", 0, 0")
DCN_WGMMA(mma_tf32_n64, "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", 32, DCN_ACC32, DCN_OPS32, 32, 33, 34, "")

template <class E, int BN>
__device__ __forceinline__ void mma(float (&d)[BN / 2], uint64_t a, uint64_t b) {
  if constexpr (BN == 256) {
    if constexpr (std::is_same<E, F16>::value) mma_f16_n256(d, a, b);
    else if constexpr (std::is_same<E, BF16>::value) mma_bf16_n256(d, a, b);
    else mma_tf32_n256(d, a, b);
  } else if constexpr (BN == 128) {
    if constexpr (std::is_same<E, F16>::value) mma_f16_n128(d, a, b);
    else if constexpr (std::is_same<E, BF16>::value) mma_bf16_n128(d, a, b);
    else mma_tf32_n128(d, a, b);
  } else {
    static_assert(BN == 64, "wgmma width");
    if constexpr (std::is_same<E, F16>::value) mma_f16_n64(d, a, b);
    else if constexpr (std::is_same<E, BF16>::value) mma_bf16_n64(d, a, b);
    else mma_tf32_n64(d, a, b);
  }
}

__device__ __forceinline__ void wg_arrive() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Generic-proxy shared-memory writes (st.shared, cp.async) made visible to wgmma's async proxy.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async16(uint32_t saddr, const void* g, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(valid ? 16 : 0) : "memory");
}
// As cp_async16, but allocating in L1 (corner gathers: neighbouring taps re-read the lines).
__device__ __forceinline__ void cp_async16_ca(uint32_t saddr, const void* g, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// ---- thread-block clusters (split-K): rank, barrier, reads of another CTA's shared memory ----
__device__ __forceinline__ int cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return (int)r;
}
// Every thread of every CTA in the cluster; release/acquire orders the shared-memory writes.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The FP32 values at local shared address `saddr`, summed over the same address in the KS
// CTAs of the cluster in rank order (a fixed order: the result does not depend on timing).
template <int KS, int V>
__device__ __forceinline__ void cluster_sum(uint32_t saddr, float (&out)[V]) {
#pragma unroll
  for (int e = 0; e < V; ++e) out[e] = 0.f;
#pragma unroll
  for (int r = 0; r < KS; ++r) {
    uint32_t a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(saddr), "r"(r));
    float v[V];
    if constexpr (V == 4)
      asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                   : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(a) : "memory");
    else
      asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v[0]) : "r"(a) : "memory");
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] += v[e];
  }
}

// An FP32 value as a TF32 operand, rounded to nearest (ties away from zero): add half a TF32
// unit in the last place; the tensor cores ignore the low 13 bits, i.e. truncate the rest.
// One integer add instead of the ~10 instructions of a checked cvt.rna.tf32 (infinities
// stay infinite, and so do NaNs with any of the top 10 mantissa bits set, canonical ones
// included).
template <class E>
__device__ __forceinline__ float operand(float v) {
  if constexpr (sizeof(typename E::T) == 4) return __uint_as_float(__float_as_uint(v) + 0x1000u);
  return v;
}

// Whether every weight row's channel chunks (and, channels-last, every pixel's) are whole
// 16-byte vectors: the condition of the vectorized gather and weight-copy paths.
template <class E, bool NHWC>
__device__ __forceinline__ bool vectorizable(const Params& p) {
  constexpr int VE = 16 / (int)sizeof(typename E::T);
  const bool w = (p.C / p.group) % VE == 0 && (p.C / p.dgroup) % VE == 0;
  return w && (!NHWC || p.xcs % VE == 0);
}

// Bytes of the corner staging area of an RS tile (RB-byte rows, WN warpgroups per 64 pixels):
// four 16-byte corners per thread for every gather pass but the first.
__host__ __device__ constexpr int raw_bytes(int BM, int WN, int RB) { return (BM * (RB / 16) - 2 * BM * WN) * 64; }

// Shared memory of a tile (the main loop's stages and recipes, or the epilogue's staging).
__host__ __device__ constexpr int smem_bytes(int BM, int BN, int RB, bool SMR, int RAWB = 0) {
  const int main = 2 * (BM + BN) * RB + (SMR ? 2 * BM * 32 : 0) + RAWB;
  const int ec = !SMR ? (BM == 64 ? 128 : 64)
                      : BN * (BM + 4) * 4 <= main ? BN : BN / 2 * (BM + 4) * 4 <= main ? BN / 2 : BN / 4;
  return main > ec * (BM + 4) * 4 ? main : ec * (BM + 4) * 4;
}

// ---- the kernel ------------------------------------------------------------------------------
// RB: bytes of channels per K step and shared-memory row (64: 32 FP16 / 16 FP32 channels;
// 128: 64 / 32, so a warp's 16-byte gathers cover 4 pixels x 128 bytes -- whole cache lines --
// instead of 8 x 64). Two shared-memory stages: sample gathers and weight copies for step k + 1
// while wgmma works on step k (more stages, with the weights copied further ahead, were slower).
// SMR: the sampling recipes of a tap live in shared memory, built one step ahead by one thread
// per pixel, instead of in the registers of every thread that gathers for the pixel.
// ABL (development only, see plugins/dcnv2/devvar.py): 1 = no corner loads, 2 = no wgmma,
// 3 = the weights of one fixed block (L1 hits), 4 = corners inside x's first 8 KiB (L1 hits),
// 5 = no weight copies, 6 = 4 and 5, 7 = 6 without wgmma, 8 = 1 and 5.
// VEC: the caller checked vectorizable(), so the element-wise paths compile away. An entry that
// calls both instantiations (SPLIT in DCNV2_SM90_ENTRY) gets a vectorized main loop the
// register allocator sees alone: at 128 registers (512 threads) the 128x256x64 "v" tile then
// keeps every loop-invariant value in a register instead of reloading spilled ones each step
// (plugins/dcnv2/NOTES.md, v14).
// PG: gather passes whose corner loads are in flight together (0: one at a time for 128-byte
// rows, else all). XS: the entry owns the shared memory and passes it in (xsmem), so that its
// two instantiations (SPLIT) share one allocation instead of holding one each.
// RS: the corners of gather passes 1.. of a step are copied by cp.async into a staging area of
// shared memory (each thread reads back only what it copied: no barrier), issued before pass 0's
// register loads, so all of a step's corner loads are in flight at once without the registers
// (128-byte rows with shared recipes, vectorized channels-last path; the size is raw_bytes()).
template <class E, int BM, int BN, int WN, bool NHWC, int KS = 1, int RB = 64, bool SMR = false, int ABL = 0,
          bool VEC = false, int PG = 0, bool XS = false, bool RS = false>
__device__ __forceinline__ void dcn_forward(const typename E::T* __restrict__ x,
                                            const typename E::T* __restrict__ offset,
                                            const typename E::T* __restrict__ mask,
                                            const typename E::T* __restrict__ weight,
                                            const typename E::T* __restrict__ bias, const Params p,
                                            typename E::T* __restrict__ y, unsigned char* xsmem = nullptr) {
  using T = typename E::T;
  using S = typename E::S;
  constexpr int NT = 2 * BM * WN;                  // threads: WN warpgroups per 64 pixels
  constexpr int BNW = BN / WN;                     // output channels per warpgroup
  constexpr int ES = (int)sizeof(T);
  constexpr int KC = RB / ES;                      // channels per K step (RB bytes)
  constexpr int VE = 16 / ES;                      // channels per 16-byte vector
  constexpr int TPR = RB / 16;                     // threads per row (one 16-byte chunk each)
  constexpr int PPP = NT / TPR;                    // pixels per gather pass
  constexpr int NTASK = BM / PPP;                  // gather passes per step
  constexpr int ASZ = BM * RB, BSZ = BN * RB;      // bytes per stage
  constexpr int STAGE = ASZ + BSZ;
  constexpr int NACC = BNW / 2;                    // FP32 accumulators per thread
  constexpr int BCH = BN * TPR / NT;               // 16-byte weight chunks per thread and step
  constexpr int KSL = RB / (E::WK * ES);           // wgmma K slices per step (32 bytes each)
  constexpr int LDC = BM + 4;
  constexpr int ROFF = 2 * STAGE;                 // SMR: two buffers of BM x 32-byte recipes
  constexpr int RAWOFF = ROFF + (SMR ? 2 * BM * 32 : 0);
  constexpr int RAWB = RS ? raw_bytes(BM, WN, RB) : 0;  // both instantiations of an entry: same size
  constexpr int MAIN = RAWOFF + RAWB;
  // Output channels per epilogue pass: as many as the main loop's shared memory holds (SMR
  // tiles), else 128 / 64 as the 48 KiB tiles always had.
  constexpr int EC = !SMR ? (BM == 64 ? 128 : 64)
                          : BN * LDC * 4 <= MAIN ? BN : BN / 2 * LDC * 4 <= MAIN ? BN / 2 : BN / 4;
  constexpr int ECW = EC / WN;                     // of them, per warpgroup
  constexpr int SMEM = MAIN > EC * LDC * 4 ? MAIN : EC * LDC * 4;
  // sm_90a allows static shared memory past 48 KiB (ptxas 13.0; the PTX needs a CUDA 13 driver anyway).
  static_assert(SMEM <= 227 * 1024, "static shared memory");
  static_assert(NTASK * PPP == BM && BCH * NT == BN * TPR && KSL * E::WK * ES == RB && BNW % ECW == 0, "tile");

  static_assert(SMEM == smem_bytes(BM, BN, RB, SMR, RAWB), "smem_bytes");
  unsigned char* smem;
  if constexpr (XS) {
    smem = xsmem;
  } else {
    __shared__ __align__(1024) unsigned char own[SMEM];
    smem = own;
  }
  const uint32_t sbase = smem_addr(smem);

  const int tid = threadIdx.x;
  const int g = blockIdx.z;
  const int Cg = p.C / p.group;
  const int Coutg = p.Cout / p.group;
  const int cpdg = p.C / p.dgroup;
  const int KK = p.kh * p.kw;
  const int HoWo = p.Ho * p.Wo;
  const int HW = p.H * p.W;
  const int M = p.N * HoWo;
  // Split-K (KS > 1): the KS CTAs of a cluster share one output tile, each walking 1/KS of K.
  const int mt = KS > 1 ? blockIdx.x / KS : blockIdx.x;
  const int rank = KS > 1 ? cluster_rank() : 0;
  const int m0 = mt * BM;
  const int n0 = blockIdx.y * BN;
  const bool wvec = VEC || ((Cg % VE) == 0 && (cpdg % VE) == 0);
  const bool xvec = NHWC && (VEC || (wvec && (p.xcs % VE) == 0));
  const int q = tid % TPR;  // this thread's 16-byte chunk of a row

  // ---- per-thread constants, hoisted out of the K walk ----
  // Pixels tid / TPR + i * PPP of the tile: image and plane index (the window's corner is
  // derived again when a tap's recipes are built: two registers fewer per pixel).
  int pn[NTASK], phw[NTASK];
#pragma unroll
  for (int i = 0; i < NTASK; ++i) {
    const int pp = m0 + tid / TPR + i * PPP;
    pn[i] = pp / HoWo;
    phw[i] = pp - pn[i] * HoWo;
    if (pp >= M) pn[i] = -1;
  }

  // ---- sampling recipes for this thread's pixels at one tap ----
  int ro[NTASK][4];
  float rw[NTASK][4];
  const int rstride = NHWC ? p.xcs : 1;
  // The offset and mask values of a tap are loaded one K step before its recipes are built
  // (`pre`), so a step that starts a new tap does not wait for two dependent round trips.
  // Only the 128-pixel tiles do so: the 64-pixel ones (twice the weight copies per thread)
  // would spill the registers it takes.
  constexpr bool PRE = BM >= 128 || WN > 1;
  float pre[NTASK][3];
  auto fetch_recipes = [&](int tap, int seg) {
    const int dgch = ((g * Cg + seg) / cpdg) * KK + tap;
#pragma unroll
    for (int i = 0; i < NTASK; ++i) {
      pre[i][0] = pre[i][1] = pre[i][2] = 0.f;
      if (pn[i] >= 0) {
        const int ch = pn[i] * p.dgroup * KK + dgch;
        pre[i][0] = E::ld(offset + (size_t)ch * 2 * HoWo + phw[i]);
        pre[i][1] = E::ld(offset + (size_t)(ch * 2 + 1) * HoWo + phw[i]);
        pre[i][2] = E::ld(mask + (size_t)ch * HoWo + phw[i]);
      }
    }
  };
  auto make_recipes = [&](int tap) {
    const int ti = tap / p.kw;
    const int tj = tap - ti * p.kw;
#pragma unroll
    for (int i = 0; i < NTASK; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        ro[i][k] = 0;
        rw[i][k] = 0.f;
      }
      if (pn[i] >= 0) {
        const int n = pn[i];
        const int ho = phw[i] / p.Wo;
        const int py = ho * p.sh - p.pt, px = (phw[i] - ho * p.Wo) * p.sw - p.pl;
        const Recipe r = recipe_at((float)(py + ti * p.dh) + pre[i][0], (float)(px + tj * p.dw) + pre[i][1], pre[i][2], p);
        const int base = NHWC ? n * HW * p.xcs + g * Cg : (n * p.C + g * Cg) * HW;
        ro[i][0] = base + r.i00 * rstride;
        ro[i][1] = base + r.i01 * rstride;
        ro[i][2] = base + r.i10 * rstride;
        ro[i][3] = base + r.i11 * rstride;
        rw[i][0] = r.w00; rw[i][1] = r.w01; rw[i][2] = r.w10; rw[i][3] = r.w11;
      }
    }
  };
  auto seg_end = [&](int seg) { return min(Cg, ((g * Cg + seg) / cpdg + 1) * cpdg - g * Cg); };
  // SMR: threads tid < BM build pixel tid's recipe for one tap into buffer `buf`; the other
  // threads read it (load_recipes) after the next barrier.
  auto build_recipes = [&](int tap, int seg, int buf) {
    if (tid < BM) {
      const int pp = m0 + tid;
      int4 o = make_int4(0, 0, 0, 0);
      float4 w = make_float4(0.f, 0.f, 0.f, 0.f);
      if (pp < M) {
        const int n = pp / HoWo, hw = pp - n * HoWo;
        const int ch = n * p.dgroup * KK + ((g * Cg + seg) / cpdg) * KK + tap;
        const float oy = E::ld(offset + (size_t)ch * 2 * HoWo + hw);
        const float ox = E::ld(offset + (size_t)(ch * 2 + 1) * HoWo + hw);
        const float mk = E::ld(mask + (size_t)ch * HoWo + hw);
        const int ti = tap / p.kw, tj = tap - ti * p.kw;
        const int ho = hw / p.Wo;
        const int py = ho * p.sh - p.pt, px = (hw - ho * p.Wo) * p.sw - p.pl;
        const Recipe r = recipe_at((float)(py + ti * p.dh) + oy, (float)(px + tj * p.dw) + ox, mk, p);
        const int base = NHWC ? n * HW * p.xcs + g * Cg : (n * p.C + g * Cg) * HW;
        o = make_int4(base + r.i00 * rstride, base + r.i01 * rstride, base + r.i10 * rstride, base + r.i11 * rstride);
        w = make_float4(r.w00, r.w01, r.w10, r.w11);
      }
      int4* dst = reinterpret_cast<int4*>(smem + ROFF + (buf * BM + tid) * 32);
      dst[0] = o;
      dst[1] = *reinterpret_cast<const int4*>(&w);
    }
  };
  int rb = 0;  // SMR: the buffer of the step being filled
  auto load_recipes = [&](int i) {
    const int4* src = reinterpret_cast<const int4*>(smem + ROFF + (rb * BM + tid / TPR + i * PPP) * 32);
    const int4 o = src[0], w = src[1];
    ro[i][0] = o.x; ro[i][1] = o.y; ro[i][2] = o.z; ro[i][3] = o.w;
    rw[i][0] = __int_as_float(w.x); rw[i][1] = __int_as_float(w.y); rw[i][2] = __int_as_float(w.z); rw[i][3] = __int_as_float(w.w);
  };

  // ---- B (weights, OHWI): 16-byte async copies into the swizzled stage, zero-filled outside ----
  // This thread copies chunk q of rows tid / TPR + v * BROWS; the rows of one thread are a fixed
  // stride apart in global memory and (BROWS being a multiple of 8) in the swizzled tile.
  constexpr int BROWS = NT / TPR;
  const int wrow = KK * Cg;  // elements between output channels
  const int brow0 = n0 + tid / TPR;
  const T* const wbase = weight + (size_t)(g * Coutg + min(brow0, Coutg - 1)) * wrow + q * VE;
  const uint32_t bsoff = ASZ + swz<RB>(tid / TPR, q);
  auto load_b = [&](int stage, int tap, int c0, int cend) {
    if (wvec) {
      const T* src = wbase + tap * Cg + c0;
      const bool cok = c0 + q * VE < cend;
#pragma unroll
      for (int v = 0; v < BCH; ++v) {
        const bool ok = cok && brow0 + v * BROWS < Coutg;
        if constexpr (ABL >= 5)  // no weight copies at all (B holds what it held)
          continue;
        else if constexpr (ABL == 3)  // the same block every step, from L1: no weight traffic from L2
          cp_async16_ca(sbase + stage * STAGE + bsoff + v * BROWS * RB, wbase + (size_t)v * BROWS * wrow, true);
        else
          cp_async16(sbase + stage * STAGE + bsoff + v * BROWS * RB, ok ? src + (size_t)v * BROWS * wrow : weight, ok);
      }
    } else {
      unsigned char* Bs = smem + stage * STAGE + ASZ;
#pragma unroll
      for (int v = 0; v < BCH; ++v) {
        const int on = brow0 + v * BROWS;
        const int cl = c0 + q * VE;
        alignas(16) S out[VE];
#pragma unroll
        for (int e = 0; e < VE; ++e)
          out[e] = E::to_s((on < Coutg && cl + e < cend)
                               ? E::ld(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl + e) : 0.f);
        *reinterpret_cast<uint4*>(Bs + swz<RB>(tid / TPR + v * BROWS, q)) = *reinterpret_cast<const uint4*>(out);
      }
    }
  };
  // TF32: round the copied weights to nearest in place (each thread its own chunks).
  auto round_b = [&](int stage) {
    if constexpr (ES == 4) {
#pragma unroll
      for (int v = 0; v < BCH; ++v) {
        float4* c = reinterpret_cast<float4*>(smem + stage * STAGE + bsoff + v * BROWS * RB);
        float4 f = *c;
        f.x = operand<E>(f.x); f.y = operand<E>(f.y); f.z = operand<E>(f.z); f.w = operand<E>(f.w);
        *c = f;
      }
    }
  };

  // ---- A (samples): corner loads, then the blend into the swizzled stage ----
  uint4 raw[NTASK][4];
  // Both take the passes [ib, ie) of the step.
  auto gather = [&](int c0, int cend, int ib, int ie) {
    if (ABL == 1 || ABL == 8) {
#pragma unroll
      for (int i = ib; i < ie; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) raw[i][k] = make_uint4(c0, ro[i][k], 0u, 0u);
    } else if (xvec) {
      const int c = c0 + q * VE;
      if (c0 + KC <= cend) {  // a whole chunk (uniform over the CTA): no zero fill
        const T* xc = x + c;
#pragma unroll
        for (int i = ib; i < ie; ++i)
#pragma unroll
          for (int k = 0; k < 4; ++k)  // ABL 4: corners inside x's first 8 KiB, from L1: no L2 traffic
            raw[i][k] = __ldg(reinterpret_cast<const uint4*>(xc + ((ABL == 4 || ABL == 6 || ABL == 7) ? ro[i][k] & 4095 : ro[i][k])));
        return;
      }
#pragma unroll
      for (int i = ib; i < ie; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          raw[i][k] = c < cend ? __ldg(reinterpret_cast<const uint4*>(x + ro[i][k] + c)) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto store_a = [&](int stage, int c0, int cend, int ib, int ie) {
    unsigned char* As = smem + stage * STAGE;
    const int c = c0 + q * VE;
#pragma unroll
    for (int i = ib; i < ie; ++i) {
      const int pm = tid / TPR + i * PPP;
      alignas(16) S out[VE];
      if (!xvec) {  // any layout, channel count or stride: one element at a time
        const int cs = NHWC ? 1 : HW;
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          float f = 0.f;
          if (c + e < cend) {
            const int o = (c + e) * cs;
            f = (rw[i][0] * E::ld(x + ro[i][0] + o) + rw[i][1] * E::ld(x + ro[i][1] + o)) +
                (rw[i][2] * E::ld(x + ro[i][2] + o) + rw[i][3] * E::ld(x + ro[i][3] + o));
          }
          out[e] = E::to_s(operand<E>(f));
        }
      } else if constexpr (std::is_same<E, F16>::value) {
        const __half2 w0 = __float2half2_rn(rw[i][0]), w1 = __float2half2_rn(rw[i][1]);
        const __half2 w2 = __float2half2_rn(rw[i][2]), w3 = __float2half2_rn(rw[i][3]);
        const __half2* a0 = reinterpret_cast<const __half2*>(&raw[i][0]);
        const __half2* a1 = reinterpret_cast<const __half2*>(&raw[i][1]);
        const __half2* a2 = reinterpret_cast<const __half2*>(&raw[i][2]);
        const __half2* a3 = reinterpret_cast<const __half2*>(&raw[i][3]);
        __half2* o2 = reinterpret_cast<__half2*>(out);
#pragma unroll
        for (int h = 0; h < VE / 2; ++h)
          o2[h] = __hfma2(w3, a3[h], __hfma2(w2, a2[h], __hfma2(w1, a1[h], __hmul2(w0, a0[h]))));
      } else {
        const T* v0 = reinterpret_cast<const T*>(&raw[i][0]);
        const T* v1 = reinterpret_cast<const T*>(&raw[i][1]);
        const T* v2 = reinterpret_cast<const T*>(&raw[i][2]);
        const T* v3 = reinterpret_cast<const T*>(&raw[i][3]);
#pragma unroll
        for (int e = 0; e < VE; ++e) {
          const float f = (rw[i][0] * E::cvt(v0[e]) + rw[i][1] * E::cvt(v1[e])) +
                          (rw[i][2] * E::cvt(v2[e]) + rw[i][3] * E::cvt(v3[e]));
          out[e] = E::to_s(operand<E>(f));
        }
      }
      *reinterpret_cast<uint4*>(As + swz<RB>(pm, q)) = *reinterpret_cast<const uint4*>(out);
    }
  };

  // ---- main loop: wgmma on stage s runs while the warps fill stage s^1; one barrier a step ----
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  const int wg = tid >> 7;
  const int wm = wg / WN, wn = wg - wm * WN;  // this warpgroup's 64 pixels and BNW channels
  // Descriptors of stage 0; a byte offset o (a multiple of 16) adds o / 16 to a descriptor.
  const uint64_t da = desc<RB>(sbase + wm * 64 * RB), db = desc<RB>(sbase + ASZ + wn * BNW * RB);
  auto run_mma = [&](int stage) {
    const uint64_t o = (uint64_t)(stage * (STAGE >> 4));
    wg_arrive();
#pragma unroll
    for (int k = 0; k < KSL; ++k)  // K slices of 32 bytes: 2 descriptor units each
      if (ABL != 2 && ABL != 7) mma<E, BNW>(acc, da + o + k * 2, db + o + k * 2);
    wg_commit();
  };

  // K walk: deformable-group segment -> tap -> channel chunk. Each CTA starts its tap walk at
  // a different tap: CTAs in step would otherwise all read the same weight rows at the same
  // time, queueing on the same L2 slices. With split-K, CTA `rank` of the cluster takes the
  // steps [rank, rank + 1) * steps / KS of every segment (contiguous, so a few taps each).
  const int t0 = mt % KK;
  struct Pos {
    int seg, send, left, tap, c0;  // segment [seg, send), steps left in it for this CTA, tap, chunk
  };
  auto enter = [&](Pos& w, int seg) {  // the first step of this CTA's share from segment seg on
    for (; seg < Cg; seg = seg_end(seg)) {
      const int send = seg_end(seg);
      const int nch = (send - seg + KC - 1) / KC;
      const int steps = KK * nch;
      const int lo = steps * rank / KS, hi = steps * (rank + 1) / KS;
      if (lo < hi) {
        const int tl = lo / nch;
        w = Pos{seg, send, hi - lo, t0 + tl >= KK ? t0 + tl - KK : t0 + tl, seg + (lo - tl * nch) * KC};
        return;
      }
    }
    w.seg = Cg;  // nothing left
  };
  // The step after w; true when it starts a new tap (its recipes are to be built).
  auto advance = [&](Pos& w) {
    if (--w.left == 0) {
      enter(w, w.send);
      return w.seg < Cg;
    }
    w.c0 += KC;
    if (w.c0 < w.send) return false;
    w.c0 = w.seg;
    w.tap = w.tap + 1 == KK ? 0 : w.tap + 1;
    return true;
  };

  // The samples of one step into a stage; `between` (the weight copies) runs after the first
  // corner loads are issued. With 128-byte rows the passes go one after another, so only one
  // pass's corners are held in registers (two round trips a step, half as many steps).
  constexpr bool SEQ = RB == 128 && NTASK > 1;
  constexpr bool RSON = RS && SEQ && SMR && VEC && NHWC && PG == 0 && ABL == 0;
  static_assert(!RS || (SEQ && SMR && PG == 0), "RS: 128-byte rows, shared recipes, one pass at a time");
  // RSON: pass i >= 1, corner k of this thread, in the staging area.
  auto raw_at = [&](int i, int k) { return RAWOFF + (((i - 1) * 4 + k) * NT + tid) * 16; };
  // PG > 0: the passes go in groups of PG whose corner loads are in flight together.
  static_assert(NTASK % (PG > 0 ? PG : 1) == 0, "gather groups");
  auto fill_a = [&](int stage, int c0, int cend, auto between, bool first = false) {
    if constexpr (PG > 0) {
#pragma unroll
      for (int ig = 0; ig < NTASK; ig += PG) {
        if constexpr (SMR) {
#pragma unroll
          for (int i = ig; i < ig + PG; ++i) load_recipes(i);
        }
        gather(c0, cend, ig, ig + PG);
        if (ig == 0) between();
        store_a(stage, c0, cend, ig, ig + PG);
      }
      return;
    }
    if constexpr (SMR && !SEQ) {
#pragma unroll
      for (int i = 0; i < NTASK; ++i) load_recipes(i);
    }
    if constexpr (SEQ) {
      if constexpr (RSON) {  // passes 1..: corners to the staging area, one copy group
        const int c = c0 + q * VE;
        const bool ok = c < cend;
#pragma unroll
        for (int i = 1; i < NTASK; ++i) {
          const int4 o = *reinterpret_cast<const int4*>(smem + ROFF + (rb * BM + tid / TPR + i * PPP) * 32);
          cp_async16_ca(sbase + raw_at(i, 0), ok ? x + o.x + c : x, ok);
          cp_async16_ca(sbase + raw_at(i, 1), ok ? x + o.y + c : x, ok);
          cp_async16_ca(sbase + raw_at(i, 2), ok ? x + o.z + c : x, ok);
          cp_async16_ca(sbase + raw_at(i, 3), ok ? x + o.w + c : x, ok);
        }
        cp_async_commit();
      }
#pragma unroll
      for (int i = 0; i < NTASK; ++i) {
        if constexpr (SMR) load_recipes(i);
        if constexpr (RSON) {
          if (i == 0) {
            gather(c0, cend, 0, 1);
          } else {
            // The staged corners have landed; the weight group committed after them may not
            // have (the first step commits its weights before: wait for everything there).
            if (first) cp_async_wait<0>();
            else cp_async_wait<1>();
#pragma unroll
            for (int k = 0; k < 4; ++k) raw[i][k] = *reinterpret_cast<const uint4*>(smem + raw_at(i, k));
          }
        } else {
          gather(c0, cend, i, i + 1);
        }
        if (i == 0) between();
        store_a(stage, c0, cend, i, i + 1);
      }
    } else {
      gather(c0, cend, 0, NTASK);  // the corner loads first: their latency is the step's
      between();
      store_a(stage, c0, cend, 0, NTASK);
    }
  };

  Pos nxt;
  enter(nxt, 0);
  if (nxt.seg < Cg) {  // a split-K CTA may have no steps at all (tiny K): its partial sum is 0
    load_b(0, nxt.tap, nxt.c0, nxt.send);
    cp_async_commit();
    if constexpr (SMR) {
      build_recipes(nxt.tap, nxt.seg, 0);
      __syncthreads();
    } else {
      fetch_recipes(nxt.tap, nxt.seg);
      make_recipes(nxt.tap);
    }
    fill_a(0, nxt.c0, nxt.send, [] {}, true);
    bool fresh = advance(nxt);  // nxt: the step the loop loads next; fresh: it starts a tap
    if constexpr (SMR) {
      if (fresh && nxt.seg < Cg) build_recipes(nxt.tap, nxt.seg, 1);
    } else if (PRE && fresh) {
      fetch_recipes(nxt.tap, nxt.seg);
    }
    cp_async_wait<0>();
    round_b(0);
    fence_async_smem();
    __syncthreads();
    for (int s = 0;;) {
      const bool more = nxt.seg < Cg;
      const int s1 = s ^ 1;
      run_mma(s);
      if (more) {
        if (fresh) {
          if constexpr (SMR) {
            rb ^= 1;
          } else {
            if (!PRE) fetch_recipes(nxt.tap, nxt.seg);
            make_recipes(nxt.tap);
          }
        }
        fill_a(s1, nxt.c0, nxt.send, [&] {
          load_b(s1, nxt.tap, nxt.c0, nxt.send);
          cp_async_commit();
        });
        fresh = advance(nxt);
        if constexpr (SMR) {  // built a step ahead: visible to all after this step's barrier
          if (fresh && nxt.seg < Cg) build_recipes(nxt.tap, nxt.seg, rb ^ 1);
        } else if (PRE && fresh) {
          fetch_recipes(nxt.tap, nxt.seg);  // one step ahead of make_recipes
        }
        cp_async_wait<0>();  // the weights of the next step have landed
        round_b(s1);
        fence_async_smem();
      }
      wg_wait_all();
#pragma unroll
      for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(acc[i])::"memory");
      __syncthreads();
      if (!more) break;
      s = s1;
    }
  }

  // ---- epilogue: EC output channels at a time through shared memory, bias added, NCHW stores ----
  // With split-K every CTA of the cluster stages its partial tile; each then sums 1/KS of the
  // tile over the cluster's shared memory (in rank order) and stores it.
  // Accumulator layout (wgmma m64nN, FP32): warp w of the warpgroup, lane l hold rows
  // 16w + l/4 (+8) and columns 8j + 2(l%4) (+1) in acc[4j .. 4j+3].
  float* cs = reinterpret_cast<float*>(smem);
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int r0 = wm * 64 + warp * 16 + (lane >> 2);
  const int nimg = m0 / HoWo;
  const bool contiguous = m0 + BM <= M && (m0 + BM - 1) / HoWo == nimg && HoWo % VE == 0;
#pragma unroll
  for (int pass = 0; pass < BNW / ECW; ++pass) {  // columns pass * ECW + [0, ECW) of each warpgroup
#pragma unroll
    for (int jj = 0; jj < ECW / 8; ++jj) {
      const int j = pass * (ECW / 8) + jj;
      const int col = wn * ECW + jj * 8 + 2 * (lane & 3);
      cs[col * LDC + r0] = acc[4 * j];
      cs[(col + 1) * LDC + r0] = acc[4 * j + 1];
      cs[col * LDC + r0 + 8] = acc[4 * j + 2];
      cs[(col + 1) * LDC + r0 + 8] = acc[4 * j + 3];
    }
    if constexpr (KS > 1) cluster_sync();
    else __syncthreads();
    if (contiguous) {
      const int hw0 = m0 - nimg * HoWo;
      for (int idx = rank * NT + tid; idx < EC * BM / VE; idx += KS * NT) {
        const int ocl = idx / (BM / VE);
        const int pv = (idx - ocl * (BM / VE)) * VE;
        const int on = n0 + pass * ECW + (WN == 1 ? ocl : (ocl / ECW) * BNW + ocl % ECW);
        if (on < Coutg) {
          const int oc = g * Coutg + on;
          const float bv = E::ld(bias + oc);
          alignas(16) T out[VE];
#pragma unroll
          for (int e = 0; e < VE; e += 4) {
            float f[4];
            if constexpr (KS > 1) {
              cluster_sum<KS>(smem_addr(&cs[ocl * LDC + pv + e]), f);
            } else {
              const float4 v = *reinterpret_cast<const float4*>(&cs[ocl * LDC + pv + e]);
              f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) out[e + k] = E::to_t(f[k] + bv);
          }
          *reinterpret_cast<uint4*>(y + ((size_t)nimg * p.Cout + oc) * HoWo + hw0 + pv) =
              *reinterpret_cast<const uint4*>(out);
        }
      }
    } else {
      for (int idx = rank * NT + tid; idx < EC * BM; idx += KS * NT) {
        const int ocl = idx / BM;
        const int pl = idx - ocl * BM;
        const int on = n0 + pass * ECW + (WN == 1 ? ocl : (ocl / ECW) * BNW + ocl % ECW);
        const int pp = m0 + pl;
        if (on < Coutg && pp < M) {
          const int oc = g * Coutg + on;
          const int n = pp / HoWo;
          float f[1] = {cs[ocl * LDC + pl]};
          if constexpr (KS > 1) cluster_sum<KS>(smem_addr(&cs[ocl * LDC + pl]), f);
          y[((size_t)n * p.Cout + oc) * HoWo + (pp - n * HoWo)] = E::to_t(f[0] + E::ld(bias + oc));
        }
      }
    }
    if constexpr (KS > 1) cluster_sync();  // the other CTAs are done reading this tile
    else __syncthreads();
  }
}

}  // namespace sm90
}  // namespace trtconv_dcnv2

using namespace trtconv_dcnv2;

// CLUSTER: empty, or __cluster_dims__(KS, 1, 1) for a split-K entry. SPLIT: a separate
// vectorized instantiation for vectorizable() layers (faster only where the generic one spills in
// its main loop: the 128 x 256 x 64 "v" tile; the others measured the same or slower with it).
#define DCNV2_SM90_ENTRY(NAME, E, BM, BN, WN, NHWC, MINB, KS, RB, SMR, CLUSTER, SPLIT, PG)                           \
  extern "C" __global__ void __launch_bounds__(2 * BM * WN, MINB) CLUSTER NAME(                              \
      const E::T* __restrict__ x, const E::T* __restrict__ offset, const E::T* __restrict__ mask,            \
      const E::T* __restrict__ weight, const E::T* __restrict__ bias, int N, int C, int H, int W, int Cout,  \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup, \
      int xcs, E::T* __restrict__ y) {                                                                       \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};           \
    if (SPLIT && sm90::vectorizable<E, NHWC>(p))                                                             \
      sm90::dcn_forward<E, BM, BN, WN, NHWC, KS, RB, SMR, 0, SPLIT, PG>(x, offset, mask, weight, bias, p, y); \
    else                                                                                                     \
      sm90::dcn_forward<E, BM, BN, WN, NHWC, KS, RB, SMR, 0, false, PG>(x, offset, mask, weight, bias, p, y); \
  }
// As DCNV2_SM90_ENTRY with SPLIT, the two instantiations sharing the entry's shared memory
// (_XSR: RS, the staged corners of dcn_forward, channels-last 2-byte types only -- TF32 was slower
// with it on every shape, plugins/dcnv2/NOTES.md, round dcnk2).
#define DCNV2_SM90_ENTRY_XSR(NAME, E, BM, BN, WN, NHWC, MINB, KS, RB, CLUSTER, PG, RS)                          \
  extern "C" __global__ void __launch_bounds__(2 * BM * WN, MINB) CLUSTER NAME(                              \
      const E::T* __restrict__ x, const E::T* __restrict__ offset, const E::T* __restrict__ mask,            \
      const E::T* __restrict__ weight, const E::T* __restrict__ bias, int N, int C, int H, int W, int Cout,  \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup, \
      int xcs, E::T* __restrict__ y) {                                                                       \
    constexpr bool rs = RS && NHWC && sizeof(E::T) == 2;                                                           \
    __shared__ __align__(1024) unsigned char smem[sm90::smem_bytes(BM, BN, RB, true, rs ? sm90::raw_bytes(BM, WN, RB) : 0)]; \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};           \
    if (sm90::vectorizable<E, NHWC>(p))                                                                      \
      sm90::dcn_forward<E, BM, BN, WN, NHWC, KS, RB, true, 0, true, PG, true, rs>(x, offset, mask, weight, bias, p, y, smem); \
    else                                                                                                     \
      sm90::dcn_forward<E, BM, BN, WN, NHWC, KS, RB, true, 0, false, PG, true, rs>(x, offset, mask, weight, bias, p, y, smem); \
  }
#define DCNV2_SM90_ENTRY_XS(NAME, E, BM, BN, WN, NHWC, MINB, KS, RB, CLUSTER, PG) \
  DCNV2_SM90_ENTRY_XSR(NAME, E, BM, BN, WN, NHWC, MINB, KS, RB, CLUSTER, PG, false)
// Tiles (SM90_TILES in trtconv/trt/plugins/dcnv2_kernel.py): BM, BN, warpgroups per 64 pixels
// WN (suffix "w": 1, "v": 2), minimum blocks per SM, split-K cluster size KS (a digit after w/v:
// grid x = pixel tiles x KS), row bytes RB (the name's k: FP16 channels per step, so k64 =
// 128-byte rows), shared-memory recipes SMR, SPLIT (above) and gather groups PG (suffix "x<PG>":
// PG passes' corner loads in flight together instead of one pass at a time). The _XS entries are
// SPLIT ones whose two instantiations share the entry's shared memory, so two CTAs still fit an
// SM (an entry holding two copies could not: the 64 x 256 "v7" of v14 ran at half occupancy).
// One tile per benchmark shape it wins (plugins/dcnv2/NOTES.md, issue 36 dcnk round; H100):
// 128 x 256 v (b), 128 x 256 v2 (e: 64 pixel tiles, split in two to fill the GPU), 64 x 256 v6
// (c), 64 x 128 v6 (d), 128 x 128 wx4 (f), 64 x 64 w2x2 (a, 64 output channels: split in two, four CTAs
// per SM, so its 512 CTAs are one wave; round dcnk3). Earlier tiles
// that no longer win any shape were dropped: 128 x 256 w, 64 x 256 k32 w and w4, 64 x 256 v7,
// 64 x 64 wx4 (a's tile until round dcnk3: 18.4 against w2x2's 17.2 us FP16, 33.6 against 26.1 TF32)
// (its XS form v7 is 4 % faster than v6 on (c) in TF32, 4 % slower in FP16), 128 x 128 w.
// The 128 x 256 v2 and 64 x 128 v6 entries stage the corners of their second gather pass (RS;
// FP16/BF16): (e) 43.6 -> 42.6 and (d) 13.9 -> 13.5 us (round dcnk2); on the other tiles RS was
// no faster or slower.
#define DCNV2_SM90_TILES(DT, E, LAYOUT, NHWC)                                                              \
  DCNV2_SM90_ENTRY(dcnv2_##DT##_##LAYOUT##_m128n256k64v, E, 128, 256, 2, NHWC, 1, 1, 128, true, , true, 0)   \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_##LAYOUT##_m128n256k64v2, E, 128, 256, 2, NHWC, 1, 2, 128,            \
                       __cluster_dims__(2, 1, 1), 0, true)                                                 \
  DCNV2_SM90_ENTRY_XS(dcnv2_##DT##_##LAYOUT##_m64n256k64v6, E, 64, 256, 2, NHWC, 2, 6, 128,               \
                      __cluster_dims__(6, 1, 1), 0)                                                        \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_##LAYOUT##_m64n128k64v6, E, 64, 128, 2, NHWC, 2, 6, 128,              \
                       __cluster_dims__(6, 1, 1), 0, true)                                                 \
  DCNV2_SM90_ENTRY(dcnv2_##DT##_##LAYOUT##_m128n128k64wx4, E, 128, 128, 1, NHWC, 1, 1, 128, true, , false, 4) \
  DCNV2_SM90_ENTRY_XS(dcnv2_##DT##_##LAYOUT##_m64n64k64w2x2, E, 64, 64, 1, NHWC, 4, 2, 128,                \
                      __cluster_dims__(2, 1, 1), 2)

using F32Tf32 = F32<false>;
#ifdef DCNV2_DEV
// Development-only ablations of the shipped 128 x 256 x 64 "v" FP16 channels-last path (ABL:
// 1 = no corner loads, 2 = no wgmma), timed against it with plugins/dcnv2/devvar.py.
#define DCNV2_ABL_ENTRY(NAME, ABL)                                                                              \
  extern "C" __global__ void __launch_bounds__(512, 1) NAME(                                                    \
      const __half* __restrict__ x, const __half* __restrict__ offset, const __half* __restrict__ mask,         \
      const __half* __restrict__ weight, const __half* __restrict__ bias, int N, int C, int H, int W, int Cout, \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup,    \
      int xcs, __half* __restrict__ y) {                                                                         \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};              \
    sm90::dcn_forward<F16, 128, 256, 2, true, 1, 128, true, ABL, true>(x, offset, mask, weight, bias, p, y);    \
  }
DCNV2_ABL_ENTRY(dcnv2_abl_noload_v, 1)
DCNV2_ABL_ENTRY(dcnv2_abl_nomma_v, 2)
// The same ablations named as devtiles.py reads tiles (wrong results: their error is reported).
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl0, 0)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl3, 3)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl4, 4)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl5, 5)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl6, 6)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl7, 7)
DCNV2_ABL_ENTRY(dcnv2_f16_nhwc_m128n256k64v_abl8, 8)
// Candidate tiles (plugins/dcnv2/devtiles.py times them beside the shipped ones); suffix "y": RS,
// "z": the SPLIT entry's two instantiations sharing one shared-memory array (XS) without RS
// (plugins/dcnv2/NOTES.md, round dcnk2, runs k1-k8: v2y and 64 x 128 v6y won (e) and (d) and are now the
// shipped v2 and v6 entries; the others won no shape).
#define DCNV2_SM90_CANDIDATES(DT, E)                                                                       \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n128k64vx2, E, 128, 128, 2, true, 1, 1, 128, , 2, false)          \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n128k64wx4z, E, 128, 128, 1, true, 1, 1, 128, , 4, false)         \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n256k64vz, E, 128, 256, 2, true, 1, 1, 128, , 0, false)          \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m64n256k64vz, E, 64, 256, 2, true, 2, 1, 128, , 0, false)            \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m64n256k64vy, E, 64, 256, 2, true, 2, 1, 128, , 0, true)             \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n256k64vy, E, 128, 256, 2, true, 1, 1, 128, , 0, true)           \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n256k64v2y, E, 128, 256, 2, true, 1, 2, 128,                     \
                       __cluster_dims__(2, 1, 1), 0, true)                                                   \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m64n256k64v6y, E, 64, 256, 2, true, 2, 6, 128,                       \
                       __cluster_dims__(6, 1, 1), 0, true)                                                   \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m64n128k64v6y, E, 64, 128, 2, true, 2, 6, 128,                       \
                       __cluster_dims__(6, 1, 1), 0, true)                                                   \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n128k64wy, E, 128, 128, 1, true, 1, 1, 128, , 0, true)           \
  DCNV2_SM90_ENTRY_XSR(dcnv2_##DT##_nhwc_m128n128k64vy, E, 128, 128, 2, true, 1, 1, 128, , 0, true)           \
  DCNV2_SM90_ENTRY(dcnv2_##DT##_nhwc_m128n128k64w2x4, E, 128, 128, 1, true, 1, 2, 128, true,                  \
                   __cluster_dims__(2, 1, 1), false, 4)                                                      \
  DCNV2_SM90_ENTRY(dcnv2_##DT##_nhwc_m128n128k64w3x4, E, 128, 128, 1, true, 1, 3, 128, true,                  \
                   __cluster_dims__(3, 1, 1), false, 4)
DCNV2_SM90_CANDIDATES(f16, F16)
DCNV2_SM90_CANDIDATES(tf32, F32Tf32)
#endif
#ifndef DCNV2_DEV_ONLY  // development builds of the candidates alone
DCNV2_SM90_TILES(f16, F16, nchw, false)
DCNV2_SM90_TILES(bf16, BF16, nchw, false)
DCNV2_SM90_TILES(tf32, F32Tf32, nchw, false)
DCNV2_SM90_TILES(f16, F16, nhwc, true)
DCNV2_SM90_TILES(bf16, BF16, nhwc, true)
DCNV2_SM90_TILES(tf32, F32Tf32, nhwc, true)
#endif
