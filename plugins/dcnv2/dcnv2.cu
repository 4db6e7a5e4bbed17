// trtconv DCNv2 (modulated deformable convolution) forward: one fused kernel.
//
// Implicit GEMM: M = output pixels (N*Ho*Wo), N = output channels of one conv group,
// K = taps x input channels of the group, walked in chunks of KC channels (chunk outer, tap inner).
// Each CTA samples its A tile (BM pixels x KC channels of one tap) straight into shared
// memory -- bilinear weights and coordinates in FP32, per (pixel, tap, deformable group)
// held in registers -- and multiplies it on tensor cores (WMMA: FP16/BF16 m16n16k16,
// TF32 m16n16k8; FP32 accumulators) against the weight tile. No column buffer, no
// workspace, bias fused into the epilogue. The loads of step t+2 are in flight during the
// tensor-core work of step t (double-buffered shared memory, one barrier per step).
//
// Layouts (see spec.json): offset, mask, y NCHW; x NCHW (*_nchw_* entries) or channels-last
// with a channel stride xcs >= C (*_nhwc_*, TensorRT HWC8/HWC); weight OHWI [Cout, kh, kw, C/group];
// offset channel ((g*kh+i)*kw+j)*2 + {0: dy, 1: dx}; mask channel (g*kh+i)*kw+j.
// Border rule (torchvision/mmcv): a sample point with y <= -1, y >= H, x <= -1 or x >= W
// contributes zero; otherwise each corner outside the image contributes zero.
//
// Entry points (extern "C", one per dtype x layout x tile): dcnv2_<dt>_<layout>_m<BM>n<BN>k<KCH>[v<VPT>], dt in
// f32 (FP32 I/O, FP32-accurate 3xTF32 product), tf32 (FP32 I/O, TF32 product),
// f16, bf16. Block: 256 threads; grid: (ceil(N*Ho*Wo/BM), ceil((Cout/group)/BN), group);
// no dynamic shared memory. Index arithmetic is int32 (every tensor < 2^31 elements).
//
// Regenerate the shipped PTX with `make dcnv2-ptx` after editing this file.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <type_traits>

using namespace nvcuda;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// ---- element types --------------------------------------------------------------------
// Storage (global) type T, shared-memory operand type S, WMMA shape and conversions.
struct F16 {
  using T = __half;
  using S = __half;
  using Frag = __half;
  static constexpr int WK = 16;   // WMMA k
  static constexpr int PAD = 8;   // row padding in elements (16 bytes)
  static constexpr int VEC = 8;   // elements per 16-byte weight load
  static constexpr bool kSplit = false;
  static __device__ __forceinline__ float ld(const T* p) { return __half2float(__ldg(p)); }
  static __device__ __forceinline__ float cvt(T v) { return __half2float(v); }
  static __device__ __forceinline__ S to_s(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ T to_t(float v) { return __float2half_rn(v); }
};

struct BF16 {
  using T = __nv_bfloat16;
  using S = __nv_bfloat16;
  using Frag = __nv_bfloat16;
  static constexpr int WK = 16;
  static constexpr int PAD = 8;
  static constexpr int VEC = 8;
  static constexpr bool kSplit = false;
  static __device__ __forceinline__ float ld(const T* p) { return __bfloat162float(__ldg(p)); }
  static __device__ __forceinline__ float cvt(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ S to_s(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ T to_t(float v) { return __float2bfloat16_rn(v); }
};

template <bool Split>
struct F32 {
  using T = float;
  using S = float;
  using Frag = wmma::precision::tf32;
  static constexpr int WK = 8;
  static constexpr int PAD = 4;
  static constexpr int VEC = 4;
  static constexpr bool kSplit = Split;  // true: 3xTF32 (FP32-accurate), false: plain TF32
  static __device__ __forceinline__ float ld(const T* p) { return __ldg(p); }
  static __device__ __forceinline__ float cvt(T v) { return v; }
  static __device__ __forceinline__ S to_s(float v) { return v; }
  static __device__ __forceinline__ T to_t(float v) { return v; }
};

struct Params {
  int N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs;
};

// Bilinear sampling recipe for one (pixel, tap, deformable group): four in-plane corner
// indices and four weights with the mask folded in (zero for corners outside the image).
struct Recipe {
  int i00, i01, i10, i11;
  float w00, w01, w10, w11;
};

// Where the offset/mask values of (pixel, tap, deformable group g) live.
__device__ __forceinline__ size_t offset_index(const Params& p, int n, int ho, int wo, int tap, int g) {
  const int KK = p.kh * p.kw;
  return ((size_t)(n * p.dgroup * KK + g * KK + tap) * 2) * (p.Ho * p.Wo) + ho * p.Wo + wo;
}
__device__ __forceinline__ size_t mask_index(const Params& p, int n, int ho, int wo, int tap, int g) {
  const int KK = p.kh * p.kw;
  return (size_t)(n * p.dgroup * KK + g * KK + tap) * (p.Ho * p.Wo) + ho * p.Wo + wo;
}

// The recipe for the sampling position (y, x) and mask value m, all in FP32.
__device__ __forceinline__ Recipe recipe_at(float y, float x, float m, const Params& p) {
  Recipe r{0, 0, 0, 0, 0.f, 0.f, 0.f, 0.f};
  if (!(y > -1.f && y < (float)p.H && x > -1.f && x < (float)p.W)) return r;  // also NaN
  const float yf = floorf(y);
  const float xf = floorf(x);
  const int y0 = (int)yf;
  const int x0 = (int)xf;
  const float ly = y - yf, lx = x - xf;
  const float hy = 1.f - ly, hx = 1.f - lx;
  const bool vy0 = y0 >= 0, vy1 = y0 + 1 <= p.H - 1;
  const bool vx0 = x0 >= 0, vx1 = x0 + 1 <= p.W - 1;
  const int cy0 = vy0 ? y0 : 0, cy1 = vy1 ? y0 + 1 : p.H - 1;
  const int cx0 = vx0 ? x0 : 0, cx1 = vx1 ? x0 + 1 : p.W - 1;
  r.i00 = cy0 * p.W + cx0;
  r.i01 = cy0 * p.W + cx1;
  r.i10 = cy1 * p.W + cx0;
  r.i11 = cy1 * p.W + cx1;
  r.w00 = (vy0 && vx0) ? hy * hx * m : 0.f;
  r.w01 = (vy0 && vx1) ? hy * lx * m : 0.f;
  r.w10 = (vy1 && vx0) ? ly * hx * m : 0.f;
  r.w11 = (vy1 && vx1) ? ly * lx * m : 0.f;
  return r;
}

template <class E>
__device__ __forceinline__ Recipe make_recipe(const typename E::T* __restrict__ offset,
                                              const typename E::T* __restrict__ mask, const Params& p, int n,
                                              int ho, int wo, int tap, int g) {
  const size_t oi = offset_index(p, n, ho, wo, tap, g);
  const int ti = tap / p.kw;
  const int tj = tap - ti * p.kw;
  return recipe_at((float)(ho * p.sh - p.pt + ti * p.dh) + E::ld(offset + oi),
                   (float)(wo * p.sw - p.pl + tj * p.dw) + E::ld(offset + oi + p.Ho * p.Wo),
                   E::ld(mask + mask_index(p, n, ho, wo, tap, g)), p);
}

// KCH: channels per K step for 16-bit types (FP32 steps take half as many, same bytes).
template <class E, int BM, int BN, int KCH, bool NHWC, int VPT_ = 1>
struct Tile {
  using S = typename E::S;
  static constexpr int KC = KCH * 2 / (int)sizeof(S);
  static constexpr int VE = 16 / (int)sizeof(typename E::T);  // elements per 16-byte vector
  // NCHW sampling: TPP threads per pixel, CPT consecutive channels each.
  static constexpr int TPP = kThreads / BM;
  static constexpr int CPT = KC / TPP;
  // NHWC sampling: XT threads per pixel, VPT 16-byte channel vectors each (one recipe per
  // pixel and tap serves VPT vectors), NTASK pixels per thread.
  static constexpr int VPT = VPT_;
  static constexpr int XT = KC / (VE * VPT);
  static constexpr int PPP = kThreads / XT;  // pixels per pass
  static constexpr int NTASK = (BM + PPP - 1) / PPP;
  // A tile: NCHW -> column-major As[k][m]; NHWC -> row-major As[m][k].
  static constexpr int LDA = NHWC ? KC + E::PAD : BM + E::PAD;
  static constexpr int ASZ = NHWC ? BM * LDA : KC * LDA;
  static constexpr int LDB = KC + E::PAD;  // Bs[n][k] (column-major B)
  static constexpr int WM = (BM >= 128) ? 4 : 2;
  static constexpr int WN = kWarps / WM;
  static constexpr int TM = BM / WM, TN = BN / WN;
  static constexpr int FM = TM / 16, FN = TN / 16;
  static constexpr int BVEC = BN * KC / E::VEC;
  static constexpr int BV_PER_T = (BVEC + kThreads - 1) / kThreads;
  static constexpr int SMEM_AB = (2 * ASZ + 2 * BN * LDB) * (int)sizeof(S);
  static constexpr int SMEM = SMEM_AB > kWarps * 256 * 4 ? SMEM_AB : kWarps * 256 * 4;
  static_assert(CPT >= 1 && KC % TPP == 0, "tile");
  static_assert(KC % (VE * VPT) == 0 && XT >= 1 && kThreads % XT == 0, "vector tile");
  static_assert(FM >= 1 && FN >= 1 && TM % 16 == 0 && TN % 16 == 0, "warp tile");
  static_assert(SMEM <= 48 * 1024, "static shared memory");
};

template <class E, int BM, int BN, int KCH, bool NHWC, int VPT>
__device__ __forceinline__ void dcn_forward(const typename E::T* __restrict__ x,
                                            const typename E::T* __restrict__ offset,
                                            const typename E::T* __restrict__ mask,
                                            const typename E::T* __restrict__ weight,
                                            const typename E::T* __restrict__ bias, const Params p,
                                            typename E::T* __restrict__ y) {
  using Tl = Tile<E, BM, BN, KCH, NHWC, VPT>;
  using T = typename E::T;
  using S = typename E::S;
  constexpr int KC = Tl::KC;
  constexpr int WK = E::WK;
  constexpr int VE = Tl::VE;

  __shared__ __align__(128) unsigned char smem[Tl::SMEM];
  S* const As0 = reinterpret_cast<S*>(smem);
  S* const Bs0 = As0 + 2 * Tl::ASZ;

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
  const int nchunks = (Cg + KC - 1) / KC;
  const int steps = KK * nchunks;
  const bool wvec = (Cg % E::VEC) == 0;

  uint4 bvals[Tl::BV_PER_T];

  auto gather_weights = [&](int tap, int c0) {
#pragma unroll
    for (int v = 0; v < Tl::BV_PER_T; ++v) {
      const int idx = tid + v * kThreads;
      const int nl = idx / (KC / E::VEC);
      const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
      const int on = n0 + nl;
      const int cl = c0 + kv;
      bvals[v] = make_uint4(0u, 0u, 0u, 0u);  // all-zero bits are 0.0 in every type
      if (wvec && idx < Tl::BVEC && on < Coutg && cl < Cg) {
        bvals[v] = __ldg(reinterpret_cast<const uint4*>(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl));
      }
    }
  };
  auto commit_weights = [&](int tap, int c0, S* Bs) {
    if (wvec) {
#pragma unroll
      for (int v = 0; v < Tl::BV_PER_T; ++v) {
        const int idx = tid + v * kThreads;
        if (idx < Tl::BVEC) {
          const int nl = idx / (KC / E::VEC);
          const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
          *reinterpret_cast<uint4*>(&Bs[nl * Tl::LDB + kv]) = bvals[v];
        }
      }
    } else {  // channel counts that are not a multiple of the vector width
      for (int idx = tid; idx < BN * KC; idx += kThreads) {
        const int nl = idx / KC;
        const int k = idx - nl * KC;
        const int on = n0 + nl;
        const int cl = c0 + k;
        S v = E::to_s(0.f);
        if (on < Coutg && cl < Cg) v = E::to_s(E::ld(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl));
        Bs[nl * Tl::LDB + k] = v;
      }
    }
  };

  // ---------------- sampling (A operand) ----------------
  // NCHW: thread -> (pixel sm, channels [sc0, sc0+CPT)); scalar gathers along W.
  // NHWC: thread -> (pixels pm_[i], channel vector cv); 16-byte gathers along C.
  // Per-pixel bases are computed once; the K walk below only adds (no divisions).
  const int sm = tid % BM;
  const int sc0 = (tid / BM) * Tl::CPT;
  const int cv = (tid % Tl::XT) * VE * Tl::VPT;
  const int tc = NHWC ? cv : sc0;  // this thread's first channel within a K step
  int pm_[Tl::NTASK];
  bool pv[Tl::NTASK];
  int pn[Tl::NTASK], pho[Tl::NTASK], pwo[Tl::NTASK];
  float py[Tl::NTASK], px[Tl::NTASK];   // sampling origin of the pixel (tap 0, no offset)
  int phw[Tl::NTASK], pch0[Tl::NTASK];  // pixel within a plane; first offset/mask channel of image n
  const T* pxb[Tl::NTASK];              // x at (image n, channel g*Cg) for this pixel's image
#pragma unroll
  for (int i = 0; i < Tl::NTASK; ++i) {
    const int ml = NHWC ? tid / Tl::XT + i * Tl::PPP : (i == 0 ? sm : BM);
    const int pp = m0 + ml;
    pm_[i] = ml;
    pv[i] = ml < BM && pp < M;
    pn[i] = pv[i] ? pp / HoWo : 0;
    const int hw = pv[i] ? pp - pn[i] * HoWo : 0;
    pho[i] = hw / p.Wo;
    pwo[i] = hw - pho[i] * p.Wo;
    py[i] = (float)(pho[i] * p.sh - p.pt);
    px[i] = (float)(pwo[i] * p.sw - p.pl);
    phw[i] = hw;
    pch0[i] = pn[i] * p.dgroup * KK;
    pxb[i] = NHWC ? x + (size_t)pn[i] * HW * p.xcs + g * Cg : x + ((size_t)pn[i] * p.C + g * Cg) * HW;
  }
  // dy of (pixel i, offset channel ch = dg*KK + tap); dx is one plane further.
  auto offset_at = [&](int i, int ch) -> const T* {
    return offset + (size_t)(pch0[i] + ch) * 2 * HoWo + phw[i];
  };
  auto mask_at = [&](int i, int ch) -> const T* { return mask + (size_t)(pch0[i] + ch) * HoWo + phw[i]; };

  // Fast paths need whole vectors inside one deformable group (NHWC) / one group (NCHW).
  const bool xvec = NHWC && (Cg % VE) == 0 && (cpdg % (VE * Tl::VPT)) == 0 && (p.xcs % VE) == 0;

  // Position in the K walk (channel chunk outer, tap inner) without divisions.
  struct Cursor {
    int tap, ti, tj, c0, dg;
  };
  auto chunk_dg = [&](int c0) { return min((g * Cg + c0 + tc) / cpdg, p.dgroup - 1); };
  auto advance = [&](Cursor& c) {
    ++c.tap;
    if (++c.tj == p.kw) {
      c.tj = 0;
      ++c.ti;
    }
    if (c.tap == KK) {
      c.tap = c.ti = c.tj = 0;
      c.c0 += KC;
      c.dg = chunk_dg(c.c0);
    }
  };

  // K walk: channel chunk outer, tap inner, so the taps of one chunk re-read x from L1.
  // Loads run two steps ahead: gather() issues one step's loads and the offset/mask loads of
  // the step after; commit() consumes them one loop iteration later.
  T offraw[Tl::NTASK][3];               // dy, dx, mask of the next step to gather
  T raw[NHWC ? 1 : Tl::CPT][4];         // NCHW fast path: raw corners
  uint4 rawv[NHWC ? Tl::NTASK : 1][NHWC ? Tl::VPT : 1][4];  // NHWC fast path: raw corner vectors
  float cw[Tl::NTASK][4];
  bool direct = false;                  // slow path: commit samples straight from memory

  auto load_offsets = [&](const Cursor& c) {
    const int ch = c.dg * KK + c.tap;
#pragma unroll
    for (int i = 0; i < Tl::NTASK; ++i) {
      if (pv[i]) {
        const T* o = offset_at(i, ch);
        offraw[i][0] = o[0];
        offraw[i][1] = o[HoWo];
        offraw[i][2] = *mask_at(i, ch);
      }
    }
  };

  // Slow path: any layout, any channel count; blends one (pixel, channel) at a time.
  auto sample_scalar = [&](int tap, int cl, int i) -> float {
    if (!pv[i] || cl >= Cg) return 0.f;
    const int c = g * Cg + cl;
    const Recipe r = make_recipe<E>(offset, mask, p, pn[i], pho[i], pwo[i], tap, c / cpdg);
    const T* base = pxb[i] + (NHWC ? cl : (size_t)cl * HW);
    const int st = NHWC ? p.xcs : 1;
    return (r.w00 * E::ld(base + (size_t)r.i00 * st) + r.w01 * E::ld(base + (size_t)r.i01 * st)) +
           (r.w10 * E::ld(base + (size_t)r.i10 * st) + r.w11 * E::ld(base + (size_t)r.i11 * st));
  };

  // Issue the global loads of step `c` (weights, corners) and the offsets of step `next`.
  auto gather = [&](const Cursor& c, const Cursor& next, bool has_next) {
    gather_weights(c.tap, c.c0);
    const float ty = (float)(c.ti * p.dh), tx = (float)(c.tj * p.dw);
    Recipe rc[Tl::NTASK];
#pragma unroll
    for (int i = 0; i < Tl::NTASK; ++i) {
      rc[i] = pv[i] ? recipe_at(py[i] + ty + E::cvt(offraw[i][0]), px[i] + tx + E::cvt(offraw[i][1]),
                                E::cvt(offraw[i][2]), p)
                    : Recipe{0, 0, 0, 0, 0.f, 0.f, 0.f, 0.f};
      cw[i][0] = rc[i].w00; cw[i][1] = rc[i].w01; cw[i][2] = rc[i].w10; cw[i][3] = rc[i].w11;
    }
    if (has_next) load_offsets(next);
    const int cl = c.c0 + tc;
    if constexpr (NHWC) {
      direct = !xvec;
      if (xvec) {
#pragma unroll
        for (int i = 0; i < Tl::NTASK; ++i) {
          const T* b00 = pxb[i] + cl + rc[i].i00 * p.xcs;
          const T* b01 = pxb[i] + cl + rc[i].i01 * p.xcs;
          const T* b10 = pxb[i] + cl + rc[i].i10 * p.xcs;
          const T* b11 = pxb[i] + cl + rc[i].i11 * p.xcs;
#pragma unroll
          for (int v = 0; v < Tl::VPT; ++v) {
            if (cl + v * VE < Cg && pv[i]) {
              rawv[i][v][0] = __ldg(reinterpret_cast<const uint4*>(b00 + v * VE));
              rawv[i][v][1] = __ldg(reinterpret_cast<const uint4*>(b01 + v * VE));
              rawv[i][v][2] = __ldg(reinterpret_cast<const uint4*>(b10 + v * VE));
              rawv[i][v][3] = __ldg(reinterpret_cast<const uint4*>(b11 + v * VE));
            } else {
              rawv[i][v][0] = rawv[i][v][1] = rawv[i][v][2] = rawv[i][v][3] = make_uint4(0u, 0u, 0u, 0u);
            }
          }
        }
      }
    } else {
      const int clast = min(cl + Tl::CPT, Cg) - 1;
      const bool any = pv[0] && cl < Cg;
      direct = any && (g * Cg + cl) / cpdg != (g * Cg + clast) / cpdg;
      if (!direct) {
        const T* base = pxb[0] + (size_t)cl * HW;
#pragma unroll
        for (int j = 0; j < Tl::CPT; ++j) {
          if (any && cl + j < Cg) {
            const T* pl = base + j * HW;
            raw[j][0] = pl[rc[0].i00];
            raw[j][1] = pl[rc[0].i01];
            raw[j][2] = pl[rc[0].i10];
            raw[j][3] = pl[rc[0].i11];
          } else {
            raw[j][0] = raw[j][1] = raw[j][2] = raw[j][3] = E::to_t(0.f);
          }
        }
      }
    }
  };

  // Blend the gathered corners in FP32 and store step `c` into shared-memory buffer b.
  auto commit = [&](const Cursor& c, int b) {
    S* As = As0 + b * Tl::ASZ;
    commit_weights(c.tap, c.c0, Bs0 + b * BN * Tl::LDB);
    if constexpr (NHWC) {
#pragma unroll
      for (int i = 0; i < Tl::NTASK; ++i) {
        if (pm_[i] < BM) {
#pragma unroll
          for (int v = 0; v < Tl::VPT; ++v) {
            alignas(16) S out[VE];
            if (direct) {
              for (int e = 0; e < VE; ++e) out[e] = E::to_s(sample_scalar(c.tap, c.c0 + cv + v * VE + e, i));
            } else {
              const T* v0 = reinterpret_cast<const T*>(&rawv[i][v][0]);
              const T* v1 = reinterpret_cast<const T*>(&rawv[i][v][1]);
              const T* v2 = reinterpret_cast<const T*>(&rawv[i][v][2]);
              const T* v3 = reinterpret_cast<const T*>(&rawv[i][v][3]);
#pragma unroll
              for (int e = 0; e < VE; ++e) {
                const float f = (cw[i][0] * E::cvt(v0[e]) + cw[i][1] * E::cvt(v1[e])) +
                                (cw[i][2] * E::cvt(v2[e]) + cw[i][3] * E::cvt(v3[e]));
                out[e] = E::to_s(f);
              }
            }
            *reinterpret_cast<uint4*>(&As[pm_[i] * Tl::LDA + cv + v * VE]) = *reinterpret_cast<const uint4*>(out);
          }
        }
      }
    } else if (direct) {  // a deformable-group boundary inside this thread's channels
      for (int j = 0; j < Tl::CPT; ++j) As[(sc0 + j) * Tl::LDA + sm] = E::to_s(sample_scalar(c.tap, c.c0 + sc0 + j, 0));
    } else {
#pragma unroll
      for (int j = 0; j < Tl::CPT; ++j) {
        const float v = (cw[0][0] * E::cvt(raw[j][0]) + cw[0][1] * E::cvt(raw[j][1])) +
                        (cw[0][2] * E::cvt(raw[j][2]) + cw[0][3] * E::cvt(raw[j][3]));
        As[(sc0 + j) * Tl::LDA + sm] = E::to_s(v);
      }
    }
  };

  // ---------------- tensor cores ----------------
  using ALayout = typename std::conditional<NHWC, wmma::row_major, wmma::col_major>::type;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, WK, typename E::Frag, ALayout>;
  using FragB = wmma::fragment<wmma::matrix_b, 16, 16, WK, typename E::Frag, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, 16, 16, WK, float>;
  FragC acc[Tl::FM][Tl::FN];
#pragma unroll
  for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
    for (int j = 0; j < Tl::FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  // FP32-accurate mode: the tensor cores' accumulation drops low bits over long K, so each
  // tap's partial sum is folded into a plain FP32 accumulator.
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
        // 3xTF32: a*b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, each product exact in TF32.
        FragA fal[Tl::FM];
        FragB fbl[Tl::FN];
#pragma unroll
        for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
          for (int t = 0; t < fa[i].num_elements; ++t) {
            const float v = fa[i].x[t];
            const float hi = wmma::__float_to_tf32(v);
            fa[i].x[t] = hi;
            fal[i].x[t] = wmma::__float_to_tf32(v - hi);
          }
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
          for (int t = 0; t < fb[j].num_elements; ++t) {
            const float v = fb[j].x[t];
            const float hi = wmma::__float_to_tf32(v);
            fb[j].x[t] = hi;
            fbl[j].x[t] = wmma::__float_to_tf32(v - hi);
          }
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

  // Main loop, one barrier per step: commit step s+1 (loads issued one iteration ago),
  // issue the loads of step s+2, then the tensor-core work of step s.
  Cursor cc{0, 0, 0, 0, chunk_dg(0)};  // step to commit
  Cursor cg = cc;                       // step to gather
  Cursor co = cc;                       // step whose offsets to load
  load_offsets(co);
  advance(co);
  gather(cg, co, steps > 1);
  advance(cg);
  advance(co);
  commit(cc, 0);
  advance(cc);
  if (steps > 1) {
    gather(cg, co, steps > 2);
    advance(cg);
    advance(co);
  }
  __syncthreads();
  int since_flush = 0;
  for (int s = 0; s < steps; ++s) {
    const int b = s & 1;
    if (s + 1 < steps) {
      commit(cc, b ^ 1);
      advance(cc);
    }
    if (s + 2 < steps) {
      gather(cg, co, s + 3 < steps);
      advance(cg);
      advance(co);
    }
    mma(b);
    if constexpr (E::kSplit) {
      if (++since_flush == KK) {
        since_flush = 0;
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
    }
    __syncthreads();
  }

  // Epilogue: per warp, stage each 16x16 accumulator in shared memory (the A/B buffers are
  // free now), add the bias, convert, store NCHW.
  float* cs = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
  for (int i = 0; i < Tl::FM; ++i) {
#pragma unroll
    for (int j = 0; j < Tl::FN; ++j) {
      if constexpr (E::kSplit) {
        wmma::store_matrix_sync(cs, master[i < MF ? i : 0][j < NF ? j : 0], 16, wmma::mem_col_major);
      } else {
        wmma::store_matrix_sync(cs, acc[i][j], 16, wmma::mem_col_major);  // cs[o*16 + m]
      }
      __syncwarp();
      const int mb = m0 + wm * Tl::TM + i * 16;
      const int ob = n0 + wn * Tl::TN + j * 16;
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int e = lane + 32 * r;
        const int pm = mb + (e & 15);
        const int on = ob + (e >> 4);
        if (pm < M && on < Coutg) {
          const int oc = g * Coutg + on;
          const int n = pm / HoWo;
          const int hw = pm - n * HoWo;
          y[((size_t)n * p.Cout + oc) * HoWo + hw] = E::to_t(cs[e] + E::ld(bias + oc));
        }
      }
      __syncwarp();
    }
  }
}


// ===================== v10: sampling recipes shared by the CTA ============================
// The K walk is tap outer, then deformable-group segment, then channel chunk. For each
// (tap, segment) the CTA computes every pixel's recipe ONCE (one thread per pixel) into
// shared memory, one segment ahead, and all threads reuse it for every channel chunk of the
// segment: the per-step work of a sampling thread is two shared loads, the corner loads
// (16-byte vectors along C in channels-last) and the blend. FP16 blends in packed half2.
struct alignas(16) SRecipe {
  int o[4];    // element offsets in x of the four corners at channel 0 of the conv group
  float w[4];  // bilinear weights x mask, zero for corners outside the image
};

template <class E>
struct HalfBlend : std::false_type {};
template <>
struct HalfBlend<F16> : std::true_type {};

template <class E, int BM, int BN, int KCH, bool NHWC>
struct TileS {
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
  static constexpr int SMEM_AB = (2 * ASZ + 2 * BN * LDB) * (int)sizeof(S) + 2 * BM * (int)sizeof(SRecipe);
  static constexpr int SMEM = SMEM_AB > kWarps * 256 * 4 ? SMEM_AB : kWarps * 256 * 4;
  static_assert(BM <= kThreads && CPT >= 1 && KC % TPP == 0, "tile");
  static_assert(KC % VE == 0 && XT >= 1 && kThreads % XT == 0, "vector tile");
  static_assert(FM >= 1 && FN >= 1 && TM % 16 == 0 && TN % 16 == 0, "warp tile");
  static_assert(SMEM <= 48 * 1024, "static shared memory");
};

template <class E, int BM, int BN, int KCH, bool NHWC>
__device__ __forceinline__ void dcn_forward_s(const typename E::T* __restrict__ x,
                                              const typename E::T* __restrict__ offset,
                                              const typename E::T* __restrict__ mask,
                                              const typename E::T* __restrict__ weight,
                                              const typename E::T* __restrict__ bias, const Params p,
                                              typename E::T* __restrict__ y) {
  using Tl = TileS<E, BM, BN, KCH, NHWC>;
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

  // ---- recipe producer: thread tid < BM owns pixel m0 + tid ----
  const int rp = m0 + tid;
  const bool rvalid = tid < BM && rp < M;
  int rbase = 0;
  float ry = 0.f, rx = 0.f;
  const T* roff = offset;
  const T* rmsk = mask;
  if (rvalid) {
    const int n = rp / HoWo;
    const int hw = rp - n * HoWo;
    const int ho = hw / p.Wo;
    const int wo = hw - ho * p.Wo;
    ry = (float)(ho * p.sh - p.pt);
    rx = (float)(wo * p.sw - p.pl);
    rbase = NHWC ? n * HW * p.xcs + g * Cg : (n * p.C + g * Cg) * HW;
    roff = offset + (size_t)n * p.dgroup * KK * 2 * HoWo + hw;
    rmsk = mask + (size_t)n * p.dgroup * KK * HoWo + hw;
  }
  const int rstride = NHWC ? p.xcs : 1;
  T rraw[3];
  auto recipe_load = [&](int tap, int seg) {
    if (rvalid) {
      const int ch = ((g * Cg + seg) / cpdg) * KK + tap;
      rraw[0] = roff[(size_t)ch * 2 * HoWo];
      rraw[1] = roff[(size_t)(ch * 2 + 1) * HoWo];
      rraw[2] = rmsk[(size_t)ch * HoWo];
    }
  };
  auto recipe_store = [&](int tap, SRecipe* R) {
    if (tid < BM) {
      SRecipe s;
      if (rvalid) {
        const int ti = tap / p.kw;
        const int tj = tap - ti * p.kw;
        const Recipe r = recipe_at(ry + (float)(ti * p.dh) + E::cvt(rraw[0]), rx + (float)(tj * p.dw) + E::cvt(rraw[1]),
                                   E::cvt(rraw[2]), p);
        s.o[0] = rbase + r.i00 * rstride;
        s.o[1] = rbase + r.i01 * rstride;
        s.o[2] = rbase + r.i10 * rstride;
        s.o[3] = rbase + r.i11 * rstride;
        s.w[0] = r.w00; s.w[1] = r.w01; s.w[2] = r.w10; s.w[3] = r.w11;
      } else {
        s.o[0] = s.o[1] = s.o[2] = s.o[3] = 0;
        s.w[0] = s.w[1] = s.w[2] = s.w[3] = 0.f;
      }
      R[tid] = s;
    }
  };
  auto seg_end = [&](int seg) { return min(Cg, ((g * Cg + seg) / cpdg + 1) * cpdg - g * Cg); };

  // ---- weights (B operand) ----
  uint4 bvals[Tl::BV_PER_T];
  auto gather_weights = [&](int tap, int c0, int cend) {
#pragma unroll
    for (int v = 0; v < Tl::BV_PER_T; ++v) {
      const int idx = tid + v * kThreads;
      const int nl = idx / (KC / E::VEC);
      const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
      const int on = n0 + nl;
      const int cl = c0 + kv;
      bvals[v] = make_uint4(0u, 0u, 0u, 0u);
      if (wvec && idx < Tl::BVEC && on < Coutg && cl < cend) {
        bvals[v] = __ldg(reinterpret_cast<const uint4*>(weight + ((size_t)(g * Coutg + on) * KK + tap) * Cg + cl));
      }
    }
  };
  auto commit_weights = [&](int tap, int c0, int cend, S* Bs) {
    if (wvec) {
#pragma unroll
      for (int v = 0; v < Tl::BV_PER_T; ++v) {
        const int idx = tid + v * kThreads;
        if (idx < Tl::BVEC) {
          const int nl = idx / (KC / E::VEC);
          const int kv = (idx - nl * (KC / E::VEC)) * E::VEC;
          *reinterpret_cast<uint4*>(&Bs[nl * Tl::LDB + kv]) = bvals[v];
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
  uint4 rawv[NHWC ? Tl::NTASK : 1][4];
  T raw[NHWC ? 1 : Tl::CPT][4];
  float cw[Tl::NTASK][4];
  int co[Tl::NTASK][4];

  auto gather = [&](const SRecipe* R, int c0, int cend) {
#pragma unroll
    for (int i = 0; i < Tl::NTASK; ++i) {
      const int pm = NHWC ? tid / Tl::XT + i * Tl::PPP : sm;
      if (pm < BM) {
        const int4 o = *reinterpret_cast<const int4*>(R[pm].o);
        const float4 w = *reinterpret_cast<const float4*>(R[pm].w);
        co[i][0] = o.x; co[i][1] = o.y; co[i][2] = o.z; co[i][3] = o.w;
        cw[i][0] = w.x; cw[i][1] = w.y; cw[i][2] = w.z; cw[i][3] = w.w;
      } else {
        co[i][0] = co[i][1] = co[i][2] = co[i][3] = 0;
        cw[i][0] = cw[i][1] = cw[i][2] = cw[i][3] = 0.f;
      }
    }
    const int c = c0 + cv;
    if constexpr (NHWC) {
      if (xvec) {
#pragma unroll
        for (int i = 0; i < Tl::NTASK; ++i) {
          const bool ok = (tid / Tl::XT + i * Tl::PPP) < BM && c < cend;
#pragma unroll
          for (int k = 0; k < 4; ++k)
            rawv[i][k] = ok ? __ldg(reinterpret_cast<const uint4*>(x + co[i][k] + c)) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < Tl::CPT; ++j) {
        if (c + j < cend) {
          const T* pl = x + (size_t)(c + j) * HW;
#pragma unroll
          for (int k = 0; k < 4; ++k) raw[j][k] = pl[co[0][k]];
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) raw[j][k] = E::to_t(0.f);
        }
      }
    }
  };

  auto commit = [&](int c0, int cend, S* As) {
    const int c = c0 + cv;
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
            const __half2* a0 = reinterpret_cast<const __half2*>(&rawv[i][0]);
            const __half2* a1 = reinterpret_cast<const __half2*>(&rawv[i][1]);
            const __half2* a2 = reinterpret_cast<const __half2*>(&rawv[i][2]);
            const __half2* a3 = reinterpret_cast<const __half2*>(&rawv[i][3]);
            __half2* o2 = reinterpret_cast<__half2*>(out);
#pragma unroll
            for (int q = 0; q < VE / 2; ++q)
              o2[q] = __hfma2(w3, a3[q], __hfma2(w2, a2[q], __hfma2(w1, a1[q], __hmul2(w0, a0[q]))));
          } else {
            const T* v0 = reinterpret_cast<const T*>(&rawv[i][0]);
            const T* v1 = reinterpret_cast<const T*>(&rawv[i][1]);
            const T* v2 = reinterpret_cast<const T*>(&rawv[i][2]);
            const T* v3 = reinterpret_cast<const T*>(&rawv[i][3]);
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
        const float v = (cw[0][0] * E::cvt(raw[j][0]) + cw[0][1] * E::cvt(raw[j][1])) +
                        (cw[0][2] * E::cvt(raw[j][2]) + cw[0][3] * E::cvt(raw[j][3]));
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
        for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
          for (int t = 0; t < fa[i].num_elements; ++t) {
            const float v = fa[i].x[t];
            const float hi = wmma::__float_to_tf32(v);
            fa[i].x[t] = hi;
            fal[i].x[t] = wmma::__float_to_tf32(v - hi);
          }
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
          for (int t = 0; t < fb[j].num_elements; ++t) {
            const float v = fb[j].x[t];
            const float hi = wmma::__float_to_tf32(v);
            fb[j].x[t] = hi;
            fbl[j].x[t] = wmma::__float_to_tf32(v - hi);
          }
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
  // Step s: issue the loads of step s (its segment's recipes are in shared memory), run the
  // tensor cores on step s-1, compute the NEXT segment's recipes when s starts a segment,
  // then blend and store step s.
  int tap = 0, seg = 0, send = seg_end(0), c0 = 0, ri = 0;
  recipe_load(0, 0);
  recipe_store(0, Rs0);
  __syncthreads();
  bool first = true;
  int b = 0, since_flush = 0;
  while (true) {
    const bool have = tap < KK;
    bool make_next = false;
    int ntap = tap, nseg = 0;
    if (have) {
      if (c0 == seg) {  // first chunk of a segment: the next segment's recipes are due
        if (send < Cg) {
          nseg = send;
        } else {
          ntap = tap + 1;
          nseg = 0;
        }
        make_next = ntap < KK;
        if (make_next) recipe_load(ntap, nseg);
      }
      gather_weights(tap, c0, send);
      gather(Rs0 + ri * BM, c0, send);
    }
    if (!first) {
      mma(b ^ 1);
      if constexpr (E::kSplit) {
        if (++since_flush == 8) {
          since_flush = 0;
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
      }
    }
    if (have) {
      if (make_next) recipe_store(ntap, Rs0 + (ri ^ 1) * BM);
      commit_weights(tap, c0, send, Bs0 + b * BN * Tl::LDB);
      commit(c0, send, As0 + b * Tl::ASZ);
    }
    __syncthreads();
    if (!have) break;
    first = false;
    b ^= 1;
    c0 += KC;
    if (c0 >= send) {  // next segment (same tap), or the next tap's first segment
      seg = send;
      if (seg >= Cg) {
        seg = 0;
        ++tap;
      }
      send = tap < KK ? seg_end(seg) : Cg;
      c0 = seg;
      ri ^= 1;
    }
  }
  if constexpr (E::kSplit) {
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
      for (int j = 0; j < NF; ++j)
#pragma unroll
        for (int t = 0; t < master[i][j].num_elements; ++t) master[i][j].x[t] += acc[i][j].x[t];
  }

  // Epilogue (as v9): stage each 16x16 accumulator in shared memory, add bias, store NCHW.
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
        const int pm = mb + (e & 15);
        const int on = ob + (e >> 4);
        if (pm < M && on < Coutg) {
          const int oc = g * Coutg + on;
          const int n = pm / HoWo;
          const int hw = pm - n * HoWo;
          y[((size_t)n * p.Cout + oc) * HoWo + hw] = E::to_t(cs[e] + E::ld(bias + oc));
        }
      }
      __syncwarp();
    }
  }
}

}  // namespace

// x is NCHW for *_nchw_* entries, and channels-last [N, H, W, xcs] for *_nhwc_* entries
// (xcs >= C: TensorRT's HWC8 pads channels to a multiple of 8). NCHW entries ignore xcs.
#define DCNV2_ENTRY(NAME, E, BM, BN, KCH, NHWC, MINB, VPT)                                                        \
  extern "C" __global__ void __launch_bounds__(kThreads, MINB) NAME(                                              \
      const E::T* __restrict__ x, const E::T* __restrict__ offset, const E::T* __restrict__ mask,             \
      const E::T* __restrict__ weight, const E::T* __restrict__ bias, int N, int C, int H, int W, int Cout,   \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup,  \
      int xcs, E::T* __restrict__ y) {                                                                        \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};            \
    dcn_forward<E, BM, BN, KCH, NHWC, VPT>(x, offset, mask, weight, bias, p, y);                                   \
  }

// Tiles: BM pixels x BN channels x KCH channels per K step (16-bit types; FP32 takes half),
// the minimum resident blocks per SM handed to the register allocator, and (channels-last
// entries) the 16-byte vectors each sampling thread gathers per pixel ("v2" = 2).
#define DCNV2_TILES(DT, E, LAYOUT, NHWC)                                            \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m128n128k32, E, 128, 128, 32, NHWC, 1, 1)     \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n128k32, E, 64, 128, 32, NHWC, 2, 1)       \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n64k64, E, 64, 64, 64, NHWC, 2, 1)         \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m32n128k64, E, 32, 128, 64, NHWC, 2, 1)       \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m32n64k64, E, 32, 64, 64, NHWC, 3, 1)         \
  DCNV2_ENTRY(dcnv2_##DT##_##LAYOUT##_m64n64k64v2, E, 64, 64, 64, NHWC, 2, 2)

// v10 entries (suffix "s": recipes shared by the CTA, see dcn_forward_s).
#define DCNV2_ENTRY_S(NAME, E, BM, BN, KCH, NHWC, MINB)                                                         \
  extern "C" __global__ void __launch_bounds__(kThreads, MINB) NAME(                                              \
      const E::T* __restrict__ x, const E::T* __restrict__ offset, const E::T* __restrict__ mask,             \
      const E::T* __restrict__ weight, const E::T* __restrict__ bias, int N, int C, int H, int W, int Cout,   \
      int Ho, int Wo, int kh, int kw, int sh, int sw, int pt, int pl, int dh, int dw, int group, int dgroup,  \
      int xcs, E::T* __restrict__ y) {                                                                        \
    const Params p{N, C, H, W, Cout, Ho, Wo, kh, kw, sh, sw, pt, pl, dh, dw, group, dgroup, xcs};            \
    dcn_forward_s<E, BM, BN, KCH, NHWC>(x, offset, mask, weight, bias, p, y);                                 \
  }
#define DCNV2_TILES_S(DT, E, LAYOUT, NHWC)                                           \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m128n128k32s, E, 128, 128, 32, NHWC, 1)      \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m64n128k32s, E, 64, 128, 32, NHWC, 2)        \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m64n256k16s, E, 64, 256, 16, NHWC, 1)        \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m64n64k64s, E, 64, 64, 64, NHWC, 2)          \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m32n128k64s, E, 32, 128, 64, NHWC, 2)        \
  DCNV2_ENTRY_S(dcnv2_##DT##_##LAYOUT##_m32n64k64s, E, 32, 64, 64, NHWC, 3)

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
DCNV2_TILES_S(f16, F16, nchw, false)
DCNV2_TILES_S(bf16, BF16, nchw, false)
DCNV2_TILES_S(tf32, F32Tf32, nchw, false)
DCNV2_TILES_S(f32, F32Exact, nchw, false)
DCNV2_TILES_S(f16, F16, nhwc, true)
DCNV2_TILES_S(bf16, BF16, nhwc, true)
DCNV2_TILES_S(tf32, F32Tf32, nhwc, true)
DCNV2_TILES_S(f32, F32Exact, nhwc, true)
