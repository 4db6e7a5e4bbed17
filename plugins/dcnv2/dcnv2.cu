// trtconv DCNv2 (modulated deformable convolution) forward: one fused kernel.
//
// Implicit GEMM: M = output pixels (N*Ho*Wo), N = output channels of one conv group,
// K = taps x input channels of the group, walked in chunks of KC channels (chunk outer, tap inner).
// Each CTA samples its A tile (BM pixels x KC channels of one tap) straight into shared
// memory -- bilinear weights and coordinates in FP32 -- and multiplies it on tensor cores
// (WMMA: FP16/BF16 m16n16k16, TF32 m16n16k8; FP32 accumulators) against the weight tile.
// No column buffer, no workspace, bias fused into the epilogue; double-buffered shared
// memory, one barrier per K step.
//
// Sampling (v10): the CTA computes each pixel's sampling recipe (four corner offsets, four
// bilinear weights x mask) once per tap into shared memory; every channel chunk reuses it,
// so a sampling thread only loads corners (16-byte vectors along C in channels-last) and
// blends them (packed half2 FMAs for FP16, FP32 otherwise). v9, which recomputed the recipe
// per thread and channel chunk, is in git history (plugins/dcnv2/NOTES.md).
//
// Layouts (see spec.json): offset, mask, y NCHW; x NCHW (*_nchw_* entries) or channels-last
// with a channel stride xcs >= C (*_nhwc_*, TensorRT HWC8/HWC); weight OHWI [Cout, kh, kw, C/group];
// offset channel ((g*kh+i)*kw+j)*2 + {0: dy, 1: dx}; mask channel (g*kh+i)*kw+j.
// Border rule (torchvision/mmcv): a sample point with y <= -1, y >= H, x <= -1 or x >= W
// contributes zero; otherwise each corner outside the image contributes zero.
//
// Entry points (extern "C", one per dtype x layout x tile): dcnv2_<dt>_<layout>_m<BM>n<BN>k<KCH><v>, dt in
// f32 (FP32 I/O, FP32-accurate 3xTF32 product), tf32 (FP32 I/O, TF32 product),
// f16, bf16; v: s (loads issued in their own K step), p (one step ahead), t (as s, the pixel
// tile an 8-wide block where Ho, Wo allow). Block: 256 threads;
// grid: (ceil(N*Ho*Wo/BM), ceil((Cout/group)/BN), group);
// no dynamic shared memory. Index arithmetic is int32 (every tensor < 2^31 elements).
//
// Regenerate the shipped PTX with `make dcnv2-ptx` after editing this file.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <type_traits>

using namespace nvcuda;

// A named namespace, not an anonymous one: nvcc names internal-linkage symbols after a hash of
// the source file's absolute path, which would make the shipped PTX depend on where it was built.
namespace trtconv_dcnv2 {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

#include "dcnv2_common.cuh"

// ---- sampling recipes shared by the CTA ----
// The K walk is deformable-group segment, then a block of up to KT taps (all 9 of a 3x3
// kernel where they fit), then channel chunk, then tap. At the start of each block the CTA
// computes every (pixel, tap) recipe of the block once into shared memory; all threads
// reuse it for every channel chunk, so the per-step work of a sampling thread is two shared
// loads, the corner loads (16-byte vectors along C in channels-last) and the blend (packed
// half2 for FP16). Taps inner: the taps of one chunk gather overlapping neighbourhoods.
struct alignas(16) SRecipe {
  int o[4];    // element offsets in x of the four corners at channel 0 of the conv group
  float w[4];  // bilinear weights x mask, zero for corners outside the image
};

template <class E>
struct HalfBlend : std::false_type {};
template <>
struct HalfBlend<F16> : std::true_type {};

template <class E, int BM, int BN, int KCH, bool NHWC>
struct Tile {
  using S = typename E::S;
  static constexpr int KC = KCH * 2 / (int)sizeof(S);
  static constexpr int VE = 16 / (int)sizeof(typename E::T);
  static constexpr int TPP = kThreads / BM;  // NCHW: threads per pixel
  static constexpr int CPT = KC / TPP;       // NCHW: channels per thread
  static constexpr int XT = KC / VE;         // NHWC: threads per pixel (one vector each)
  static constexpr int PPP = kThreads / XT;  // NHWC: pixels per pass
  static constexpr int NTASK = (BM + PPP - 1) / PPP;
  static constexpr int LDA = NHWC ? KC + E::PAD : BM + E::PAD;
  static constexpr int ASZ = NHWC ? BM * LDA : KC * LDA;
  static constexpr int LDB = KC + E::PAD;
  static constexpr int WM = (BM >= 128) ? 4 : 2;
  static constexpr int WN = kWarps / WM;
  static constexpr int TM = BM / WM, TN = BN / WN;
  static constexpr int FM = TM / 16, FN = TN / 16;
  static constexpr int BVEC = BN * KC / E::VEC;
  static constexpr int BV_PER_T = (BVEC + kThreads - 1) / kThreads;
  static constexpr int SMEM_AB = (2 * ASZ + 2 * BN * LDB) * (int)sizeof(S);
  // Recipes of KT taps (all 9 of a 3x3 kernel where they fit) for every pixel of the tile.
  static constexpr int KT_FIT = (48 * 1024 - SMEM_AB) / (BM * (int)sizeof(SRecipe));
  static constexpr int KT = KT_FIT < 9 ? KT_FIT : 9;
  static constexpr int SMEM_R = SMEM_AB + KT * BM * (int)sizeof(SRecipe);
  static constexpr int SMEM = SMEM_R > kWarps * 256 * 4 ? SMEM_R : kWarps * 256 * 4;
  static_assert(KT >= 1, "no room for recipes");
  static_assert(BM <= kThreads && CPT >= 1 && KC % TPP == 0, "tile");
  static_assert(KC % VE == 0 && XT >= 1 && kThreads % XT == 0, "vector tile");
  static_assert(FM >= 1 && FN >= 1 && TM % 16 == 0 && TN % 16 == 0, "warp tile");
  static_assert(SMEM <= 48 * 1024, "static shared memory");
};

// 3xTF32: split each element of a WMMA fragment into its TF32 part (left in f) and the TF32
// rounding of the remainder (into lo); hi*hi + lo*hi + hi*lo then carries FP32 accuracy.
template <class Frag>
__device__ __forceinline__ void split_tf32(Frag& f, Frag& lo) {
#pragma unroll
  for (int t = 0; t < f.num_elements; ++t) {
    const float v = f.x[t];
    const float hi = wmma::__float_to_tf32(v);
    f.x[t] = hi;
    lo.x[t] = wmma::__float_to_tf32(v - hi);
  }
}

template <class E, int BM, int BN, int KCH, bool NHWC, int PF, bool T2D>
__device__ __forceinline__ void dcn_forward(const typename E::T* __restrict__ x,
                                              const typename E::T* __restrict__ offset,
                                              const typename E::T* __restrict__ mask,
                                              const typename E::T* __restrict__ weight,
                                              const typename E::T* __restrict__ bias, const Params p,
                                              typename E::T* __restrict__ y) {
  using Tl = Tile<E, BM, BN, KCH, NHWC>;
  using T = typename E::T;
  using S = typename E::S;
  constexpr int KC = Tl::KC;
  constexpr int WK = E::WK;
  constexpr int VE = Tl::VE;

  __shared__ __align__(128) unsigned char smem[Tl::SMEM];
  S* const As0 = reinterpret_cast<S*>(smem);
  S* const Bs0 = As0 + 2 * Tl::ASZ;
  SRecipe* const Rs0 = reinterpret_cast<SRecipe*>(Bs0 + 2 * BN * Tl::LDB);

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = blockIdx.z;
  const int Cg = p.C / p.group;
  const int Coutg = p.Cout / p.group;
  const int cpdg = p.C / p.dgroup;
  const int KK = p.kh * p.kw;
  const int HoWo = p.Ho * p.Wo;
  const int HW = p.H * p.W;
  const int M = p.N * HoWo;
  const int m0 = blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;
  // 16-byte paths need every segment start (multiples of cpdg within the group) aligned.
  const bool wvec = (Cg % E::VEC) == 0 && (cpdg % E::VEC) == 0;
  const bool xvec = NHWC && (Cg % VE) == 0 && (cpdg % VE) == 0 && (p.xcs % VE) == 0;

  // Tile pixel pl -> (image n, plane index hw). T2D entries cover a (BM/8) x 8 block of output
  // pixels when Ho and Wo are multiples of the block (the 3x3 taps of a square block gather
  // a smaller neighbourhood, so more corner loads hit L1); otherwise BM consecutive pixels.
  constexpr int TH = BM / 8;
  const bool blk = T2D && p.Ho % TH == 0 && p.Wo % 8 == 0;
  auto pixel = [&](int pl, int& n, int& hw) -> bool {
    if (blk) {
      const int bw = p.Wo / 8;
      const int tpi = (p.Ho / TH) * bw;
      n = blockIdx.x / tpi;
      const int r = blockIdx.x - n * tpi;
      const int tr = r / bw;
      hw = (tr * TH + pl / 8) * p.Wo + (r - tr * bw) * 8 + pl % 8;
      return n < p.N;
    }
    const int pp = m0 + pl;
    n = pp / HoWo;
    hw = pp - n * HoWo;
    return pp < M;
  };

  // ---- recipes: R[t * BM + pm] for the taps [tb, tb + KT) of one deformable-group segment ----
  const int rstride = NHWC ? p.xcs : 1;
  auto make_recipes = [&](int tb, int nt, int seg) {
    const int dgch = ((g * Cg + seg) / cpdg) * KK;
    for (int idx = tid; idx < nt * BM; idx += kThreads) {
      const int t = idx / BM;
      const int pm = idx - t * BM;
      SRecipe r;
      r.o[0] = r.o[1] = r.o[2] = r.o[3] = 0;
      r.w[0] = r.w[1] = r.w[2] = r.w[3] = 0.f;
      int n, hw;
      if (pixel(pm, n, hw)) {
        const int ho = hw / p.Wo;
        const int wo = hw - ho * p.Wo;
        const int tap = tb + t;
        const int ti = tap / p.kw;
        const int tj = tap - ti * p.kw;
        const int ch = n * p.dgroup * KK + dgch + tap;
        const float dy = E::ld(offset + (size_t)ch * 2 * HoWo + hw);
        const float dx = E::ld(offset + (size_t)(ch * 2 + 1) * HoWo + hw);
        const float mv = E::ld(mask + (size_t)ch * HoWo + hw);
        const Recipe q = recipe_at((float)(ho * p.sh - p.pt + ti * p.dh) + dy, (float)(wo * p.sw - p.pl + tj * p.dw) + dx,
                                   mv, p);
        const int base = NHWC ? n * HW * p.xcs + g * Cg : (n * p.C + g * Cg) * HW;
        r.o[0] = base + q.i00 * rstride;
        r.o[1] = base + q.i01 * rstride;
        r.o[2] = base + q.i10 * rstride;
        r.o[3] = base + q.i11 * rstride;
        r.w[0] = q.w00; r.w[1] = q.w01; r.w[2] = q.w10; r.w[3] = q.w11;
      }
      Rs0[idx] = r;
    }
  };
  auto seg_end = [&](int seg) { return min(Cg, ((g * Cg + seg) / cpdg + 1) * cpdg - g * Cg); };

  // ---- weights (B operand) ----
  uint4 bvals[2][Tl::BV_PER_T];  // two steps in flight: set q = step parity
  auto gather_weights = [&](int q, int tap, int c0, int cend) {
#pragma unroll
    for (int v = 0; v < Tl::BV_PER_T; ++v) {
      const int idx = tid + v * kThreads;
      const int nl = idx / (KC / E::VEC);
      const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
      const int on = n0 + nl;
      const int cl = c0 + kv;
      bvals[q][v] = make_uint4(0u, 0u, 0u, 0u);
      if (wvec && idx < Tl::BVEC && on < Coutg && cl < cend) {
        bvals[q][v] = __ldg(reinterpret_cast<const uint4*>(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl));
      }
    }
  };
  auto commit_weights = [&](int q, int tap, int c0, int cend, S* Bs) {
    if (wvec) {
#pragma unroll
      for (int v = 0; v < Tl::BV_PER_T; ++v) {
        const int idx = tid + v * kThreads;
        if (idx < Tl::BVEC) {
          const int nl = idx / (KC / E::VEC);
          const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
          *reinterpret_cast<uint4*>(&Bs[nl * Tl::LDB + kv]) = bvals[q][v];
        }
      }
    } else {
      for (int idx = tid; idx < BN * KC; idx += kThreads) {
        const int nl = idx / KC;
        const int k = idx - nl * KC;
        const int on = n0 + nl;
        const int cl = c0 + k;
        S v = E::to_s(0.f);
        if (on < Coutg && cl < cend) v = E::to_s(E::ld(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl));
        Bs[nl * Tl::LDB + k] = v;
      }
    }
  };

  // ---- sampling (A operand) from the shared recipes ----
  // NHWC: task i -> pixel tid / XT + i * PPP, channel vector (tid % XT) * VE.
  // NCHW: pixel tid % BM, channels (tid / BM) * CPT ... + CPT.
  const int cv = NHWC ? (tid % Tl::XT) * VE : (tid / BM) * Tl::CPT;
  const int sm = tid % BM;
  uint4 rawv[2][NHWC ? Tl::NTASK : 1][4];
  T raw[2][NHWC ? 1 : Tl::CPT][4];
  // Recipe offsets live only inside gather(); commit() re-reads the weights from shared memory.

  auto recipe_of = [&](const SRecipe* R, int i, int (&o)[4], float (&w)[4]) {
    const int pm = NHWC ? tid / Tl::XT + i * Tl::PPP : sm;
    if (pm < BM) {
      const int4 ov = *reinterpret_cast<const int4*>(R[pm].o);
      const float4 wv = *reinterpret_cast<const float4*>(R[pm].w);
      o[0] = ov.x; o[1] = ov.y; o[2] = ov.z; o[3] = ov.w;
      w[0] = wv.x; w[1] = wv.y; w[2] = wv.z; w[3] = wv.w;
    } else {
      o[0] = o[1] = o[2] = o[3] = 0;
      w[0] = w[1] = w[2] = w[3] = 0.f;
    }
  };
  auto gather = [&](int q, const SRecipe* R, int c0, int cend) {
    int co[Tl::NTASK][4];
    float cw[Tl::NTASK][4];
#pragma unroll
    for (int i = 0; i < Tl::NTASK; ++i) recipe_of(R, i, co[i], cw[i]);
    const int c = c0 + cv;
    if constexpr (NHWC) {
      if (xvec) {
#pragma unroll
        for (int i = 0; i < Tl::NTASK; ++i) {
          const bool ok = (tid / Tl::XT + i * Tl::PPP) < BM && c < cend;
#pragma unroll
          for (int k = 0; k < 4; ++k)
            rawv[q][i][k] = ok ? __ldg(reinterpret_cast<const uint4*>(x + co[i][k] + c)) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < Tl::CPT; ++j) {
        if (c + j < cend) {
          const T* pl = x + (size_t)(c + j) * HW;
#pragma unroll
          for (int k = 0; k < 4; ++k) raw[q][j][k] = pl[co[0][k]];
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) raw[q][j][k] = E::to_t(0.f);
        }
      }
    }
  };

  auto commit = [&](int q, const SRecipe* R, int c0, int cend, S* As) {
    const int c = c0 + cv;
    int co[Tl::NTASK][4];
    float cw[Tl::NTASK][4];
#pragma unroll
    for (int i = 0; i < Tl::NTASK; ++i) recipe_of(R, i, co[i], cw[i]);
    if constexpr (NHWC) {
#pragma unroll
      for (int i = 0; i < Tl::NTASK; ++i) {
        const int pm = tid / Tl::XT + i * Tl::PPP;
        if (pm < BM) {
          alignas(16) S out[VE];
          if (!xvec) {  // any channel count / stride: one element at a time
            for (int e = 0; e < VE; ++e) {
              float f = 0.f;
              if (c + e < cend) {
                f = (cw[i][0] * E::ld(x + co[i][0] + c + e) + cw[i][1] * E::ld(x + co[i][1] + c + e)) +
                    (cw[i][2] * E::ld(x + co[i][2] + c + e) + cw[i][3] * E::ld(x + co[i][3] + c + e));
              }
              out[e] = E::to_s(f);
            }
          } else if constexpr (HalfBlend<E>::value) {
            const __half2 w0 = __float2half2_rn(cw[i][0]), w1 = __float2half2_rn(cw[i][1]);
            const __half2 w2 = __float2half2_rn(cw[i][2]), w3 = __float2half2_rn(cw[i][3]);
            const __half2* a0 = reinterpret_cast<const __half2*>(&rawv[q][i][0]);
            const __half2* a1 = reinterpret_cast<const __half2*>(&rawv[q][i][1]);
            const __half2* a2 = reinterpret_cast<const __half2*>(&rawv[q][i][2]);
            const __half2* a3 = reinterpret_cast<const __half2*>(&rawv[q][i][3]);
            __half2* o2 = reinterpret_cast<__half2*>(out);
#pragma unroll
            for (int h = 0; h < VE / 2; ++h)
              o2[h] = __hfma2(w3, a3[h], __hfma2(w2, a2[h], __hfma2(w1, a1[h], __hmul2(w0, a0[h]))));
          } else {
            const T* v0 = reinterpret_cast<const T*>(&rawv[q][i][0]);
            const T* v1 = reinterpret_cast<const T*>(&rawv[q][i][1]);
            const T* v2 = reinterpret_cast<const T*>(&rawv[q][i][2]);
            const T* v3 = reinterpret_cast<const T*>(&rawv[q][i][3]);
#pragma unroll
            for (int e = 0; e < VE; ++e) {
              const float f = (cw[i][0] * E::cvt(v0[e]) + cw[i][1] * E::cvt(v1[e])) +
                              (cw[i][2] * E::cvt(v2[e]) + cw[i][3] * E::cvt(v3[e]));
              out[e] = E::to_s(f);
            }
          }
          *reinterpret_cast<uint4*>(&As[pm * Tl::LDA + cv]) = *reinterpret_cast<const uint4*>(out);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < Tl::CPT; ++j) {
        const float v = (cw[0][0] * E::cvt(raw[q][j][0]) + cw[0][1] * E::cvt(raw[q][j][1])) +
                        (cw[0][2] * E::cvt(raw[q][j][2]) + cw[0][3] * E::cvt(raw[q][j][3]));
        As[(cv + j) * Tl::LDA + sm] = E::to_s(v);
      }
    }
  };

  // ---- tensor cores ----
  using ALayout = typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, WK, typename E::Frag, ALayout>;
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, WK, typename E::Frag, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, WK, float>;
  FragC acc[Tl::FM][Tl::FN];
#pragma unroll
  for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
    for (int j = 0; j < Tl::FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  constexpr int MF = E::kSplit ? Tl::FM : 1, NF = E::kSplit ? Tl::FN : 1;
  FragC master[MF][NF];
  if constexpr (E::kSplit) {
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j) wmma::fill_fragment(master[i][j], 0.f);
  }
  const int wm = warp % Tl::WM;
  const int wn = warp / Tl::WM;

  auto mma = [&](int b) {
    const S* As = As0 + b * Tl::ASZ;
    const S* Bs = Bs0 + b * BN * Tl::LDB;
#pragma unroll
    for (int kk = 0; kk < KC; kk += WK) {
      FragA fa[Tl::FM];
      FragB fb[Tl::FN];
#pragma unroll
      for (int i = 0; i < Tl::FM; ++i) {
        const int mr = wm * Tl::TM + i * 16;
        wmma::load_matrix_sync(fa[i], NHWC ? &As[mr * Tl::LDA + kk] : &As[kk * Tl::LDA + mr], Tl::LDA);
      }
#pragma unroll
      for (int j = 0; j < Tl::FN; ++j)
        wmma::load_matrix_sync(fb[j], &Bs[(wn * Tl::TN + j * 16) * Tl::LDB + kk], Tl::LDB);
      if constexpr (E::kSplit) {
        FragA fal[Tl::FM];
        FragB fbl[Tl::FN];
#pragma unroll
        for (int i = 0; i < Tl::FM; ++i) split_tf32(fa[i], fal[i]);
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j) split_tf32(fb[j], fbl[j]);
#pragma unroll
        for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
          for (int j = 0; j < Tl::FN; ++j) {
            wmma::mma_sync(acc[i][j], fal[i], fb[j], acc[i][j]);
            wmma::mma_sync(acc[i][j], fa[i], fbl[j], acc[i][j]);
            wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
          }
      } else {
        if constexpr (sizeof(S) == 4) {
#pragma unroll
          for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
            for (int t = 0; t < fa[i].num_elements; ++t) fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);
#pragma unroll
          for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
            for (int t = 0; t < fb[j].num_elements; ++t) fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);
        }
#pragma unroll
        for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
          for (int j = 0; j < Tl::FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
  };

  // ---- main loop: one barrier per step ----
  // Walk: deformable-group segment, block of KT taps (recipes computed once per block),
  // channel chunk, tap. Taps inner: the 3x3 taps of one chunk gather overlapping
  // neighbourhoods, so most corner loads hit L1. Step: issue its loads, run the tensor
  // cores on the previous step, blend and store it, barrier.
  bool first = true;
  int b = 0, since_flush = 0;
  auto flush = [&]() {
    if constexpr (E::kSplit) {
#pragma unroll
      for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j)
#pragma unroll
          for (int t = 0; t < master[i][j].num_elements; ++t) {
            master[i][j].x[t] += acc[i][j].x[t];
            acc[i][j].x[t] = 0.f;
          }
    }
  };
  // The tensor cores on the previous step's stage (none before the first step); the
  // FP32-accurate mode folds its accumulators into the master sums every 8 steps.
  auto mma_previous = [&]() {
    if (first) return;
    mma(b ^ 1);
    if constexpr (E::kSplit) {
      if (++since_flush == 8) {
        since_flush = 0;
        flush();
      }
    }
  };
  for (int seg = 0; seg < Cg;) {
    const int send = seg_end(seg);
    for (int tb = 0; tb < KK; tb += Tl::KT) {
      const int nt = min(Tl::KT, KK - tb);
      make_recipes(tb, nt, seg);  // the last step's barrier freed R
      __syncthreads();
      // Loads run one step ahead: step k's corner and weight loads are issued during step
      // k-1 (register set k & 1), so a whole step of work covers their latency.
      int t = 0, c0 = seg;
      if constexpr (PF == 1) {  // loads issued at the start of their own step
        for (; c0 < send; c0 += KC) {
          for (t = 0; t < nt; ++t) {
            gather_weights(0, tb + t, c0, send);
            gather(0, Rs0 + t * BM, c0, send);
            mma_previous();
            commit_weights(0, tb + t, c0, send, Bs0 + b * BN * Tl::LDB);
            commit(0, Rs0 + t * BM, c0, send, As0 + b * Tl::ASZ);
            __syncthreads();
            first = false;
            b ^= 1;
          }
        }
        continue;
      }
      gather_weights(0, tb, c0, send);
      gather(0, Rs0, c0, send);
      auto step = [&](auto cur) -> bool {
        constexpr int A = decltype(cur)::value;
        int t2 = t + 1, c2 = c0;
        if (t2 == nt) {
          t2 = 0;
          c2 += KC;
        }
        const bool more = c2 < send;
        if (more) {
          gather_weights(1 - A, tb + t2, c2, send);
          gather(1 - A, Rs0 + t2 * BM, c2, send);
        }
        mma_previous();
        commit_weights(A, tb + t, c0, send, Bs0 + b * BN * Tl::LDB);
        commit(A, Rs0 + t * BM, c0, send, As0 + b * Tl::ASZ);
        __syncthreads();
        first = false;
        b ^= 1;
        t = t2;
        c0 = c2;
        return more;
      };
      while (step(std::integral_constant<int, 0>{}) && step(std::integral_constant<int, 1>{})) {
      }
    }
    seg = send;
  }
  if (!first) mma(b ^ 1);
  __syncthreads();  // the epilogue reuses the A/B buffers
  flush();

  // Epilogue: stage each 16x16 accumulator in shared memory, add bias, store NCHW.
  float* cs = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
  for (int i = 0; i < Tl::FM; ++i) {
#pragma unroll
    for (int j = 0; j < Tl::FN; ++j) {
      if constexpr (E::kSplit) {
        wmma::store_matrix_sync(cs, master[i < MF ? i : 0][j < NF ? j : 0], 16, wmma::mem_col_major);
      } else {
        wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_col_major);
      }
      __syncwarp();
      const int mb = m0 + wm * Tl::TM + i * 16;
      const int ob = n0 + wn * Tl::TN + j * 16;
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int e = lane + 32 * r;
        const int pl = mb - m0 + (e & 15);
        const int on = ob + (e >> 4);
        int n, hw;
        if (pixel(pl, n, hw) && on < Coutg) {
          const int oc = g * Coutg + on;
          y[((size_t)n * p.Cout + oc) * HoWo + hw] = E::to_t(cs[e] + E::ld(bias + oc));
        }
      }
      __syncwarp();
    }
  }
}

}  // namespace trtconv_dcnv2

using namespace trtconv_dcnv2;

// x is NCHW for *_nchw_* entries, and channels-last [N, H, W, xcs] for *_nhwc_* entries
// (xcs >= C: TensorRT's HWC8 pads channels to a multiple of 8). NCHW entries ignore xcs.
#define DCNV2_ENTRY(NAME, E, BM, BN, KCH, NHWC, MINB, PF, T2D)                                                         \
  extern "C" __global__ void __launch_bounds__(kThreads, MINB) NAME(                                              \
      const E::T* __restrict__ x, const E::T* __restrict__ offset, const E::T* __restrict__ mask,             \
      const E::T* __restrict__ weight, const E::T* __restrict__ bias, int N, int C, int H, int W, int Cout,   \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup,  \
      int xcs, E::T* __restrict__ y) {                                                                        \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};            \
    dcn_forward<E, BM, BN, KCH, NHWC, PF, T2D>(x, offset, mask, weight, bias, p, y);                                 \
  }
// Tiles (TILES in trtconv/trt/plugins/dcnv2_kernel.py): BM, BN, KCH, minimum resident
// blocks per SM for the register allocator, load look-ahead (1: "s", 2: "p"), pixel blocks ("t").
#define DCNV2_TILES(DT, E, LAYOUT, NHWC)                                                  \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n128k32s, E, 64, 128, 32, NHWC, 2, 1, false)     \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n64k64s, E, 64, 64, 64, NHWC, 2, 1, false)       \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m32n128k32s, E, 32, 128, 32, NHWC, 2, 1, false)     \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n256k16p, E, 64, 256, 16, NHWC, 1, 2, false)     \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n64k64t, E, 64, 64, 64, NHWC, 2, 1, true)

using F32Exact = F32<true>;
using F32Tf32 = F32<false>;
DCNV2_TILES(f16, F16, nchw, false)
DCNV2_TILES(bf16, BF16, nchw, false)
DCNV2_TILES(tf32, F32Tf32, nchw, false)
DCNV2_TILES(f32, F32Exact, nchw, false)
DCNV2_TILES(f16, F16, nhwc, true)
DCNV2_TILES(bf16, BF16, nhwc, true)
DCNV2_TILES(tf32, F32Tf32, nhwc, true)
DCNV2_TILES(f32, F32Exact, nhwc, true)
