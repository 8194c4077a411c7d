// Scalar helpers of generated kernels: the elementwise functions ONNX defines that the C library
// lacks, or defines otherwise (NaN propagates through af_max, af_min and af_relu, as in ONNX and
// PyTorch). Each is one expression over floats, so a loop of them vectorises.
// The expressions that call them come from autofusion/ir/scalar.py and ir/activations.py.
#pragma once

#include <cmath>

// glibc's libmvec has vector versions of the float functions (AVX-512 among them); its header
// declares them only under -ffast-math, which would also drop NaN and infinity semantics. The
// same declarations here let `#pragma omp simd` loops call them, with IEEE semantics kept.
#if defined(__x86_64__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)) && !defined(__FAST_MATH__)
#define AF_VECTOR_MATH __attribute__((simd("notinbranch")))
extern "C" {
AF_VECTOR_MATH float expf(float) noexcept;
AF_VECTOR_MATH float logf(float) noexcept;
AF_VECTOR_MATH float log1pf(float) noexcept;
AF_VECTOR_MATH float tanhf(float) noexcept;
AF_VECTOR_MATH float erff(float) noexcept;
AF_VECTOR_MATH float sinf(float) noexcept;
AF_VECTOR_MATH float cosf(float) noexcept;
AF_VECTOR_MATH float tanf(float) noexcept;
AF_VECTOR_MATH float asinf(float) noexcept;
AF_VECTOR_MATH float acosf(float) noexcept;
AF_VECTOR_MATH float atanf(float) noexcept;
AF_VECTOR_MATH float sinhf(float) noexcept;
AF_VECTOR_MATH float coshf(float) noexcept;
AF_VECTOR_MATH float asinhf(float) noexcept;
AF_VECTOR_MATH float acoshf(float) noexcept;
AF_VECTOR_MATH float atanhf(float) noexcept;
}
#endif

namespace af {

// e^x, e^x - 1 and tanh as plain float arithmetic the compiler inlines and vectorises: libmvec's
// versions are calls, 3-5x slower in a fused loop. Within 2 ulp of the exact value for e^x and
// e^x - 1, 4 ulp for tanh (the kernel tests compare with PyTorch); NaN, ±inf and denormal
// results as the C library gives them.
static inline float af_from_bits(int i) {
  float f;
  __builtin_memcpy(&f, &i, sizeof f);
  return f;
}
// e^r - 1 for |r| <= 0.7: Taylor to r^9 (the next term is below 2^-27 of the result)
static inline float af_expm1_small(float r) {
  float p = 1.f / 362880;
  p = p * r + 1.f / 40320; p = p * r + 1.f / 5040; p = p * r + 1.f / 720; p = p * r + 1.f / 120;
  p = p * r + 1.f / 24; p = p * r + 1.f / 6; p = p * r + 0.5f; p = p * r + 1.f;
  return p * r;
}
static inline float af_exp(float x) {
  const float hi = 88.7228394f, lo = -103.972084f;   // e^hi is the largest float; e^lo < 2^-150
  float xc = x > hi ? hi : (x < lo ? lo : x);
  float n = __builtin_rintf(xc * 1.44269504089f);    // x = n ln2 + r, |r| <= ln2/2
  float r = xc - n * 0.693145751953125f;             // ln2 in two parts: the first is exact in n*
  r = r - n * 1.428606765330187e-06f;
  float p = 1.f / 5040;                              // e^r: Taylor to r^7
  p = p * r + 1.f / 720; p = p * r + 1.f / 120; p = p * r + 1.f / 24; p = p * r + 1.f / 6;
  p = p * r + 0.5f; p = p * r + 1.f; p = p * r + 1.f;
  int ni = int(n), half = ni >> 1;                   // 2^n as two factors: n < -126 stays exact
  float y = p * af_from_bits((half + 127) << 23) * af_from_bits((ni - half + 127) << 23);
  y = x > hi ? __builtin_inff() : y;
  return x != x ? x : y;
}
static inline float af_expm1(float x) {
  return x < 0.35f && x > -0.35f ? af_expm1_small(x) : af_exp(x) - 1.f;
}
static inline float af_tanh(float x) {
  float a = __builtin_fabsf(x);
  float em = af_expm1_small(2.f * a);               // (e^2a - 1) / (e^2a + 1), no cancellation
  float t = a < 0.34657359f ? em / (em + 2.f) : 1.f - 2.f / (af_exp(2.f * a) + 1.f);
  return __builtin_copysignf(t, x);
}

static inline float af_relu(float x) { return x < 0.f ? 0.f : x; }
static inline float af_max(float a, float b) { return (a < b || b != b) ? b : a; }
static inline float af_min(float a, float b) { return (a > b || b != b) ? b : a; }
static inline float af_clip(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
static inline float af_sigmoid(float x) { return 1.f / (1.f + af_exp(-x)); }
static inline float af_silu(float x) { return x / (1.f + af_exp(-x)); }
static inline float af_hard_sigmoid(float x, float alpha, float beta) {
  return af_clip(alpha * x + beta, 0.f, 1.f);
}
static inline float af_hard_swish(float x) { return x * af_clip(x * (1.f / 6.f) + 0.5f, 0.f, 1.f); }
static inline float af_leaky_relu(float x, float alpha) { return x < 0.f ? alpha * x : x; }
static inline float af_prelu(float x, float slope) { return x < 0.f ? slope * x : x; }
static inline float af_elu(float x, float alpha) { return x < 0.f ? alpha * af_expm1(x) : x; }
static inline float af_selu(float x, float alpha, float gamma) {
  return gamma * (x > 0.f ? x : alpha * af_expm1(x));
}
static inline float af_celu(float x, float alpha) {
  return (x > 0.f ? x : 0.f) + fminf(0.f, alpha * af_expm1(x / alpha));
}
static inline float af_thresholded_relu(float x, float alpha) { return x > alpha ? x : 0.f; }
static inline float af_shrink(float x, float bias, float lambd) {
  return x < -lambd ? x + bias : (x > lambd ? x - bias : 0.f);
}
// log(1 + e^x) without overflow: x itself where e^x dwarfs 1 (PyTorch's threshold)
static inline float af_softplus(float x) { return x > 20.f ? x : log1pf(af_exp(x)); }
static inline float af_mish(float x) { return x * af_tanh(af_softplus(x)); }
static inline float af_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
static inline float af_gelu_tanh(float x) {
  return 0.5f * x * (1.f + af_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline float af_sign(float x) { return x > 0.f ? 1.f : (x < 0.f ? -1.f : x); }
// the max a log-sum-exp takes out: 0 where it is infinite, so an infinite max stays itself
static inline float af_finite_or_zero(float x) { return x - x == 0.f || x != x ? x : 0.f; }

}  // namespace af

// Row reductions of generated kernels (`#pragma omp simd reduction(af_max : acc)`): max and min
// with NaN propagating, which OpenMP's own max/min do not promise. Both vectorise.
#pragma omp declare reduction(af_max : float : omp_out = af::af_max(omp_out, omp_in)) \
    initializer(omp_priv = -__builtin_inff())
#pragma omp declare reduction(af_min : float : omp_out = af::af_min(omp_out, omp_in)) \
    initializer(omp_priv = __builtin_inff())
