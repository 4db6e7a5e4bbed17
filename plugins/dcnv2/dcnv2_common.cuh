// trtconv DCNv2: what the Ampere (dcnv2.cu) and Hopper (dcnv2_sm90.cu) kernels share:
// the kernel parameters and the bilinear sampling rule. Included inside namespace
// trtconv_dcnv2 by both.
#pragma once

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
