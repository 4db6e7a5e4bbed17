// Development only (DCNV2_DEV): a warp-specialized form of dcn_forward (included inside
// namespace trtconv_dcnv2::sm90 by dcnv2_sm90.cu).
//
// Why: the shipped tiles run gathers, blends and weight copies in the same warps as wgmma and
// meet at one barrier a step, so a step's tensor work and its data movement overlap only as far
// as one stage ahead allows, and every warp waits for the slowest gather (plugins/dcnv2/NOTES.md,
// rounds dcnk2/dcnk3: no single resource saturated). Here producer warpgroups gather, blend and
// copy weights into an NS-stage ring, consumer warpgroups only issue wgmma, and the two meet on
// per-stage mbarriers: producers may run NS steps ahead, consumers keep one wgmma group in
// flight. Registers are moved to the consumers with setmaxnreg (128 FP32 accumulators for an
// m64n256 warpgroup tile).
//
// Tile: BM pixels (BM / 64 consumer warpgroups, each m64 x BN), BN output channels, 128-byte
// K steps (RB = 128), NPW producer warpgroups. Vectorized channels-last path only (the caller
// checks vectorizable()); no split-K.

__device__ __forceinline__ void mbar_init(uint32_t a, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t a) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t a, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(a),
      "r"(parity)
      : "memory");
}
template <int R>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int NTH>
__device__ __forceinline__ void producers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(NTH) : "memory");
}
template <int NTH>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 2, %0;\n" ::"n"(NTH) : "memory");
}

__host__ __device__ constexpr int ws_smem_bytes(int BM, int BN, int NS) {
  return NS * (BM + BN) * 128 + 2 * BM * 32 + 16 * NS;
}

template <class E, int BM, int BN, int NPW, int NS, int RP, int RC, int PG = 2>
__device__ __forceinline__ void dcn_forward_ws(const typename E::T* __restrict__ x,
                                               const typename E::T* __restrict__ offset,
                                               const typename E::T* __restrict__ mask,
                                               const typename E::T* __restrict__ weight,
                                               const typename E::T* __restrict__ bias, const Params p,
                                               typename E::T* __restrict__ y, unsigned char* smem) {
  using T = typename E::T;
  using S = typename E::S;
  constexpr int RB = 128;
  constexpr int NCW = BM / 64;        // consumer warpgroups
  constexpr int NCT = NCW * 128;      // consumer threads
  constexpr int NPT = NPW * 128;      // producer threads
  constexpr int ES = (int)sizeof(T);
  constexpr int KC = RB / ES;
  constexpr int VE = 16 / ES;
  constexpr int TPR = RB / 16;
  constexpr int PPP = NPT / TPR;      // pixels per producer pass
  constexpr int NTASK = BM / PPP;     // passes per step
  constexpr int ASZ = BM * RB, BSZ = BN * RB, STAGE = ASZ + BSZ;
  constexpr int ROFF = NS * STAGE;
  constexpr int BAROFF = ROFF + 2 * BM * 32;
  constexpr int MAIN = BAROFF + 16 * NS;
  constexpr int NACC = BN / 2;
  constexpr int BROWS = NPT / TPR;
  constexpr int BCH = BN / BROWS;     // weight chunks per producer thread and step
  constexpr int KSL = RB / (E::WK * ES);
  constexpr int LDC = BM + 4;
  constexpr int EC = BN * LDC * 4 <= BAROFF ? BN : BN / 2;
  static_assert(MAIN == ws_smem_bytes(BM, BN, NS) && MAIN <= 227 * 1024, "smem");
  static_assert(BM <= NPT && NTASK * PPP == BM && NTASK % PG == 0 && BCH * BROWS == BN && EC * LDC * 4 <= BAROFF, "tile");

  const uint32_t sbase = smem_addr(smem);
  const uint32_t full0 = sbase + BAROFF, empty0 = full0 + 8 * NS;
  const int tid = threadIdx.x;
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

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      mbar_init(full0 + 8 * s, NPT);
      mbar_init(empty0 + 8 * s, NCW * 4);
    }
  }
  __syncthreads();

  // K walk as dcn_forward's (segment -> tap from this CTA's first tap -> channel chunk), KS = 1.
  const int t0 = blockIdx.x % KK;
  auto seg_end = [&](int seg) { return min(Cg, ((g * Cg + seg) / cpdg + 1) * cpdg - g * Cg); };
  struct Pos {
    int seg, send, tap, c0, tl;  // tl: taps of the segment left after this one
  };
  auto enter = [&](Pos& w, int seg) {
    w = Pos{seg, seg < Cg ? seg_end(seg) : Cg, t0, seg, KK - 1};
  };
  auto advance = [&](Pos& w) {  // true when the next step starts a tap
    w.c0 += KC;
    if (w.c0 < w.send) return false;
    if (w.tl == 0) {
      enter(w, w.send);
      return true;
    }
    --w.tl;
    w.c0 = w.seg;
    w.tap = w.tap + 1 == KK ? 0 : w.tap + 1;
    return true;
  };

  if (tid >= NCT) {
    // ---------------- producers ----------------
    if constexpr (RP > 0) regs_dec<RP>();
    const int pt = tid - NCT;
    const int q = pt % TPR;
    const int rstride = p.xcs;
    // Recipes of pixel pt (pt < BM) at one tap: offsets/mask fetched early, built later.
    float pre0 = 0.f, pre1 = 0.f, pre2 = 0.f;
    int rn = -1, rhw = 0;
    if (pt < BM && m0 + pt < M) {
      rn = (m0 + pt) / HoWo;
      rhw = m0 + pt - rn * HoWo;
    }
    auto fetch = [&](int tap, int seg) {
      pre0 = pre1 = pre2 = 0.f;
      if (rn >= 0) {
        const int ch = rn * p.dgroup * KK + ((g * Cg + seg) / cpdg) * KK + tap;
        pre0 = E::ld(offset + (size_t)ch * 2 * HoWo + rhw);
        pre1 = E::ld(offset + (size_t)(ch * 2 + 1) * HoWo + rhw);
        pre2 = E::ld(mask + (size_t)ch * HoWo + rhw);
      }
    };
    auto build = [&](int tap, int buf) {
      int4 o = make_int4(0, 0, 0, 0);
      float4 w = make_float4(0.f, 0.f, 0.f, 0.f);
      if (rn >= 0) {
        const int ti = tap / p.kw, tj = tap - ti * p.kw;
        const int ho = rhw / p.Wo;
        const int py = ho * p.sh - p.pt, px = (rhw - ho * p.Wo) * p.sw - p.pl;
        const Recipe r = recipe_at((float)(py + ti * p.dh) + pre0, (float)(px + tj * p.dw) + pre1, pre2, p);
        const int base = rn * HW * p.xcs + g * Cg;
        o = make_int4(base + r.i00 * rstride, base + r.i01 * rstride, base + r.i10 * rstride, base + r.i11 * rstride);
        w = make_float4(r.w00, r.w01, r.w10, r.w11);
      }
      int4* dst = reinterpret_cast<int4*>(smem + ROFF + (buf * BM + pt) * 32);
      dst[0] = o;
      dst[1] = *reinterpret_cast<const int4*>(&w);
    };

    const int wrow = KK * Cg;
    const int brow0 = n0 + pt / TPR;
    const T* const wbase = weight + (size_t)(g * Coutg + min(brow0, Coutg - 1)) * wrow + q * VE;
    const uint32_t bsoff = ASZ + swz<RB>(pt / TPR, q);

    Pos cur;
    enter(cur, 0);
    if (cur.seg < Cg && pt < BM) {
      fetch(cur.tap, cur.seg);
      build(cur.tap, 0);
    }
    producers_sync<NPT>();
    int rb = 0, s = 0;
    uint32_t ph = 0;
    bool fresh = true;
    for (bool first = true; cur.seg < Cg; first = false) {
      mbar_wait(empty0 + 8 * s, ph ^ 1);
      if (fresh && !first) {
        producers_sync<NPT>();  // this tap's recipes are visible; the other buffer is free
        rb ^= 1;
      }
      // The next tap's offsets and mask, fetched now, built after this step's samples.
      Pos nt = cur;
      bool build_next = false;
      if (fresh && pt < BM) {
        while (!advance(nt)) {
        }
        if (nt.seg < Cg) {
          fetch(nt.tap, nt.seg);
          build_next = true;
        }
      }
      // Weights: BCH 16-byte async copies into the stage.
      {
        const T* src = wbase + cur.tap * Cg + cur.c0;
        const bool cok = cur.c0 + q * VE < cur.send;
#pragma unroll
        for (int v = 0; v < BCH; ++v) {
          const bool ok = cok && brow0 + v * BROWS < Coutg;
          cp_async16(sbase + s * STAGE + bsoff + v * BROWS * RB, ok ? src + (size_t)v * BROWS * wrow : weight, ok);
        }
        cp_async_commit();
      }
      // Samples: PG passes' corners in flight together, blended into the stage.
      const int c = cur.c0 + q * VE;
      const bool whole = cur.c0 + KC <= cur.send;
      unsigned char* As = smem + s * STAGE;
#pragma unroll
      for (int ig = 0; ig < NTASK; ig += PG) {
        int4 ro[PG];
        float4 rw[PG];
        uint4 raw[PG][4];
#pragma unroll
        for (int j = 0; j < PG; ++j) {
          const int4* src = reinterpret_cast<const int4*>(smem + ROFF + (rb * BM + pt / TPR + (ig + j) * PPP) * 32);
          ro[j] = src[0];
          const int4 w = src[1];
          rw[j] = *reinterpret_cast<const float4*>(&w);
        }
#pragma unroll
        for (int j = 0; j < PG; ++j) {
          const int o4[4] = {ro[j].x, ro[j].y, ro[j].z, ro[j].w};
#pragma unroll
          for (int k = 0; k < 4; ++k)
            raw[j][k] = (whole || c < cur.send) ? __ldg(reinterpret_cast<const uint4*>(x + o4[k] + c))
                                                : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < PG; ++j) {
          alignas(16) S out[VE];
          const float wf[4] = {rw[j].x, rw[j].y, rw[j].z, rw[j].w};
          if constexpr (std::is_same<E, F16>::value) {
            const __half2 w0 = __float2half2_rn(wf[0]), w1 = __float2half2_rn(wf[1]);
            const __half2 w2 = __float2half2_rn(wf[2]), w3 = __float2half2_rn(wf[3]);
            const __half2* a0 = reinterpret_cast<const __half2*>(&raw[j][0]);
            const __half2* a1 = reinterpret_cast<const __half2*>(&raw[j][1]);
            const __half2* a2 = reinterpret_cast<const __half2*>(&raw[j][2]);
            const __half2* a3 = reinterpret_cast<const __half2*>(&raw[j][3]);
            __half2* o2 = reinterpret_cast<__half2*>(out);
#pragma unroll
            for (int h = 0; h < VE / 2; ++h)
              o2[h] = __hfma2(w3, a3[h], __hfma2(w2, a2[h], __hfma2(w1, a1[h], __hmul2(w0, a0[h]))));
          } else {
            const T* v0 = reinterpret_cast<const T*>(&raw[j][0]);
            const T* v1 = reinterpret_cast<const T*>(&raw[j][1]);
            const T* v2 = reinterpret_cast<const T*>(&raw[j][2]);
            const T* v3 = reinterpret_cast<const T*>(&raw[j][3]);
#pragma unroll
            for (int e = 0; e < VE; ++e) {
              const float f = (wf[0] * E::cvt(v0[e]) + wf[1] * E::cvt(v1[e])) + (wf[2] * E::cvt(v2[e]) + wf[3] * E::cvt(v3[e]));
              out[e] = E::to_s(operand<E>(f));
            }
          }
          *reinterpret_cast<uint4*>(As + swz<RB>(pt / TPR + (ig + j) * PPP, q)) = *reinterpret_cast<const uint4*>(out);
        }
      }
      if (build_next) build(nt.tap, rb ^ 1);
      cp_async_wait<0>();
      if constexpr (ES == 4) {  // TF32: round this thread's weight chunks to nearest in place
#pragma unroll
        for (int v = 0; v < BCH; ++v) {
          float4* cp = reinterpret_cast<float4*>(smem + s * STAGE + bsoff + v * BROWS * RB);
          float4 f = *cp;
          f.x = operand<E>(f.x); f.y = operand<E>(f.y); f.z = operand<E>(f.z); f.w = operand<E>(f.w);
          *cp = f;
        }
      }
      fence_async_smem();
      mbar_arrive(full0 + 8 * s);
      fresh = advance(cur);
      if (++s == NS) {
        s = 0;
        ph ^= 1;
      }
    }
    return;  // the consumers alone stage and store the result (no later barrier counts producers)
  }

  // ---------------- consumers ----------------
  if constexpr (RC > 0) regs_inc<RC>();
  float acc[NACC];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
  const int wg = tid >> 7;
  {
    int steps = 0;
    for (int seg = 0; seg < Cg; seg = seg_end(seg)) steps += KK * ((seg_end(seg) - seg + KC - 1) / KC);
    const uint64_t da = desc<RB>(sbase + wg * 64 * RB), db = desc<RB>(sbase + ASZ);
    const bool leader = (tid & 31) == 0;
    int s = 0, sp = 0;
    uint32_t ph = 0;
    for (int k = 0; k < steps; ++k) {
      mbar_wait(full0 + 8 * s, ph);
      const uint64_t o = (uint64_t)(s * (STAGE >> 4));
      wg_arrive();
#pragma unroll
      for (int kk = 0; kk < KSL; ++kk) mma<E, BN>(acc, da + o + kk * 2, db + o + kk * 2);
      wg_commit();
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      if (k > 0 && leader) mbar_arrive(empty0 + 8 * sp);
      sp = s;
      if (++s == NS) {
        s = 0;
        ph ^= 1;
      }
    }
    wg_wait_all();
#pragma unroll
    for (int i = 0; i < NACC; ++i) asm volatile("" : "+f"(acc[i])::"memory");
  }
  // Every stage was consumed (each full barrier covered its producers' writes), so the ring's
  // memory becomes the epilogue's staging once both consumer warpgroups are past their wgmma.
  consumers_sync<NCT>();

  // ---- epilogue: EC output channels at a time through shared memory, bias added, NCHW stores ----
  float* cs = reinterpret_cast<float*>(smem);
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int r0 = wg * 64 + warp * 16 + (lane >> 2);
  const int nimg = m0 / HoWo;
  const bool contiguous = m0 + BM <= M && (m0 + BM - 1) / HoWo == nimg && HoWo % VE == 0;
#pragma unroll
  for (int pass = 0; pass < BN / EC; ++pass) {
#pragma unroll
    for (int jj = 0; jj < EC / 8; ++jj) {
      const int j = pass * (EC / 8) + jj;
      const int col = jj * 8 + 2 * (lane & 3);
      cs[col * LDC + r0] = acc[4 * j];
      cs[(col + 1) * LDC + r0] = acc[4 * j + 1];
      cs[col * LDC + r0 + 8] = acc[4 * j + 2];
      cs[(col + 1) * LDC + r0 + 8] = acc[4 * j + 3];
    }
    consumers_sync<NCT>();
    if (contiguous) {
      const int hw0 = m0 - nimg * HoWo;
      for (int idx = tid; idx < EC * BM / VE; idx += NCT) {
        const int ocl = idx / (BM / VE);
        const int pv = (idx - ocl * (BM / VE)) * VE;
        const int on = n0 + pass * EC + ocl;
        if (on < Coutg) {
          const int oc = g * Coutg + on;
          const float bv = E::ld(bias + oc);
          alignas(16) T out[VE];
#pragma unroll
          for (int e = 0; e < VE; e += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&cs[ocl * LDC + pv + e]);
            out[e] = E::to_t(v.x + bv);
            out[e + 1] = E::to_t(v.y + bv);
            out[e + 2] = E::to_t(v.z + bv);
            out[e + 3] = E::to_t(v.w + bv);
          }
          *reinterpret_cast<uint4*>(y + ((size_t)nimg * p.Cout + oc) * HoWo + hw0 + pv) =
              *reinterpret_cast<const uint4*>(out);
        }
      }
    } else {
      for (int idx = tid; idx < EC * BM; idx += NCT) {
        const int ocl = idx / BM;
        const int pl = idx - ocl * BM;
        const int on = n0 + pass * EC + ocl;
        const int pp = m0 + pl;
        if (on < Coutg && pp < M) {
          const int oc = g * Coutg + on;
          const int n = pp / HoWo;
          y[((size_t)n * p.Cout + oc) * HoWo + (pp - n * HoWo)] = E::to_t(cs[ocl * LDC + pl] + E::ld(bias + oc));
        }
      }
    }
    consumers_sync<NCT>();
  }
}
