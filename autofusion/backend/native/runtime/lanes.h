// The 16-float vector a generated kernel's loop computes in where the CPU has AVX-512
// (kernels.py: a loop over 16 elements at a time, the last ones masked), and the float
// functions over it. The kernel's expressions are the scalar ones (ir/scalar.py) with operands
// of this type: GCC's vector extensions give + - * / and comparisons, `c ? a : b` selects per
// lane, a float operand is every lane's; scalar.h's helpers are templates over float and vec16.
// tanh, the sigmoid and SiLU are computed here, inline, about twice as fast as libmvec's tanhf
// and expf (a rational tanh; e^x by a polynomial and vscalefps): within 4 ulp, NaN and
// infinities as the C library's (tests/backend/native/test_scalar_math.py). Every other
// function is the C library's on each lane, which GCC turns into one call of libmvec's vector
// version.
#pragma once

// (kernels.py writes 16-lane loops only where build.py vector_lanes says the same as this test)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#include <cmath>
#include <cstdint>

#include "vector.h"

namespace af {

typedef __m512 vec16;

// the lanes of a loop with `left` elements to go: all 16 but at the end
constexpr __mmask16 ALL_LANES = 0xffff;
inline __mmask16 lanes_from(int64_t left) { return left >= 16 ? ALL_LANES : first(left); }

// a statement of an unrolled loop's step over each of its n vectors, u = 0 … n-1, written out
// (kernels.py): one statement over all the vectors, then the next, so their independent chains
// of dependent operations sit side by side for the out-of-order core
#define AF_EACH(n) _Pragma("GCC unroll 16") for (int u = 0; u < (n); ++u)

// with vector.h's masked load16 and store16: lanes every stride-th float apart, and a value that
// does not vary along the loop stored to every lane
inline vec16 load16(const float* p, int64_t stride, __mmask16 k) {
  vec16 v = _mm512_setzero_ps();
  for (int i = 0; i < 16; ++i)
    if (k >> i & 1) v[i] = p[i * stride];
  return v;
}
inline void store16(float* p, int64_t stride, vec16 v, __mmask16 k) {
  for (int i = 0; i < 16; ++i)
    if (k >> i & 1) p[i * stride] = v[i];
}
inline void store16(float* p, float v, __mmask16 k) { store16(p, _mm512_set1_ps(v), k); }
inline void store16(float* p, int64_t stride, float v, __mmask16 k) { store16(p, stride, _mm512_set1_ps(v), k); }

inline vec16 splat(float v) { return _mm512_set1_ps(v); }
inline vec16 fma(vec16 a, vec16 b, float c) { return _mm512_fmadd_ps(a, b, splat(c)); }

inline vec16 af_sigmoid(vec16 x) { return sigmoid16(x); }   // vector.h
inline vec16 af_silu(vec16 x) { return silu16(x); }

// tanh(x) = x·P(x²)/Q(x²) on |x| <= 9 (tanh rounds to 1 beyond): a rational fit to tanh(x)/x in
// relative error (Lawson-weighted least squares; 7e-9 in float64, 2.4 ulp in float32), the
// result kept in [-1, 1] and given x's sign (so -0 and NaN stay themselves). The Horner loops are
// unrolled: at -O2 GCC would keep them loops over a stack array.
inline vec16 tanh16(vec16 x) {
  const vec16 a = _mm512_min_ps(splat(9.f), _mm512_abs_ps(x));
  const vec16 u = a * a;
  vec16 p = splat(-8.49116919e-14f);
  _Pragma("GCC unroll 8") for (float c : {5.2789724e-11f, -2.02274713e-08f, 1.11548834e-05f, 0.00310401246f, 0.130840614f, 1.f})
    p = fma(p, u, c);
  vec16 q = splat(0.000254622631f);
  _Pragma("GCC unroll 8") for (float c : {0.0244954024f, 0.464173883f, 1.f}) q = fma(q, u, c);
  const vec16 y = _mm512_min_ps(splat(1.f), a * p / q);
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(y), _mm512_castps_si512(x),
                                                       _mm512_set1_epi32(0x7fffffff), 0xe4));
}

}  // namespace af

// The C library's float functions on vec16 (the generated expressions call them unqualified),
// declared before scalar.h's templates, which find them there. Each lane through the scalar
// function in a `simd` loop: GCC calls libmvec's 16-lane version where there is one.
#define AF_LANEWISE(name)                                        \
  inline af::vec16 name(af::vec16 x) {                           \
    af::vec16 r;                                                 \
    _Pragma("omp simd") for (int i = 0; i < 16; ++i) r[i] = name(x[i]); \
    return r;                                                    \
  }
AF_LANEWISE(expf)
AF_LANEWISE(logf)
AF_LANEWISE(log1pf)
AF_LANEWISE(erff)
AF_LANEWISE(sinf)
AF_LANEWISE(cosf)
AF_LANEWISE(tanf)
AF_LANEWISE(asinf)
AF_LANEWISE(acosf)
AF_LANEWISE(atanf)
AF_LANEWISE(sinhf)
AF_LANEWISE(coshf)
AF_LANEWISE(asinhf)
AF_LANEWISE(acoshf)
AF_LANEWISE(atanhf)
#undef AF_LANEWISE

inline af::vec16 tanhf(af::vec16 x) { return af::tanh16(x); }
inline af::vec16 fabsf(af::vec16 x) { return _mm512_abs_ps(x); }
inline af::vec16 sqrtf(af::vec16 x) { return _mm512_sqrt_ps(x); }
inline af::vec16 floorf(af::vec16 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline af::vec16 ceilf(af::vec16 x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
inline af::vec16 nearbyintf(af::vec16 x) { return _mm512_roundscale_ps(x, _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC); }
inline af::vec16 fminf(af::vec16 a, af::vec16 b) {   // the C library's: NaN only where both are
  af::vec16 r;
  _Pragma("omp simd") for (int i = 0; i < 16; ++i) r[i] = fminf(a[i], b[i]);
  return r;
}
inline af::vec16 fminf(float a, af::vec16 b) { return fminf(af::splat(a), b); }
inline af::vec16 fminf(af::vec16 a, float b) { return fminf(a, af::splat(b)); }
inline af::vec16 powf(af::vec16 a, af::vec16 b) {
  af::vec16 r;
  _Pragma("omp simd") for (int i = 0; i < 16; ++i) r[i] = powf(a[i], b[i]);
  return r;
}
inline af::vec16 powf(af::vec16 a, float b) { return powf(a, af::splat(b)); }
inline af::vec16 powf(float a, af::vec16 b) { return powf(af::splat(a), b); }
#endif
