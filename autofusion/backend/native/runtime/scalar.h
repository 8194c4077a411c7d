// Helpers of generated kernels: the elementwise functions ONNX defines that the C library
// lacks, or defines otherwise (NaN propagates through af_max, af_min and af_relu, as in ONNX and
// PyTorch). Each is one expression, over floats (a scalar loop the compiler vectorises) or over
// lanes.h's 16-float vectors (the loops kernels.py writes 16 elements at a time).
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

#include "lanes.h"   // vec16 and the functions over it, where the CPU has AVX-512

namespace af {

// the generated expressions' infinity and NaN (ir/scalar.py c_float)
constexpr float inf = __builtin_inff();
constexpr float nan = __builtin_nanf("");

// Each helper is a template over its operands, float or vec16 (lanes.h), so the scalar loops and
// the 16-lane ones compute the same expression: `c ? a : b` and `|` work on both.

// e^x - 1 without the cancellation of expf(x) - 1 near 0 (ELU and its kin are e^x - 1 there):
// Taylor to x^9 for |x| < 0.35 (the next term is below 2^-27 of the result), expf beyond.
template <class T> T af_expm1(T x) {
  T p = T() + 1.f / 362880;
  p = p * x + 1.f / 40320; p = p * x + 1.f / 5040; p = p * x + 1.f / 720; p = p * x + 1.f / 120;
  p = p * x + 1.f / 24; p = p * x + 1.f / 6; p = p * x + 0.5f; p = p * x + 1.f;
  return (x < 0.35f) & (x > -0.35f) ? p * x : expf(x) - 1.f;
}

template <class T> T af_relu(T x) { return x < 0.f ? 0.f : x; }
template <class A, class B> auto af_max(A a, B b) { return (a < b) | (b != b) ? b : a; }
template <class A, class B> auto af_min(A a, B b) { return (a > b) | (b != b) ? b : a; }
template <class T, class L, class H> auto af_clip(T x, L lo, H hi) { return x < lo ? lo : (x > hi ? hi : x); }
inline float af_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }   // vec16: lanes.h
inline float af_silu(float x) { return x / (1.f + expf(-x)); }
template <class T> T af_hard_sigmoid(T x, float alpha, float beta) {
  return af_clip(alpha * x + beta, 0.f, 1.f);
}
template <class T> T af_hard_swish(T x) { return x * af_clip(x * (1.f / 6.f) + 0.5f, 0.f, 1.f); }
template <class T> T af_leaky_relu(T x, float alpha) { return x < 0.f ? alpha * x : x; }
template <class T, class S> auto af_prelu(T x, S slope) { return x < 0.f ? slope * x : x; }
template <class T> T af_elu(T x, float alpha) { return x < 0.f ? alpha * af_expm1(x) : x; }
template <class T> T af_selu(T x, float alpha, float gamma) {
  return gamma * (x > 0.f ? x : alpha * af_expm1(x));
}
template <class T> T af_celu(T x, float alpha) {
  return (x > 0.f ? x : 0.f) + fminf(0.f, alpha * af_expm1(x / alpha));
}
template <class T> T af_thresholded_relu(T x, float alpha) { return x > alpha ? x : 0.f; }
template <class T> T af_shrink(T x, float bias, float lambd) {
  return x < -lambd ? x + bias : (x > lambd ? x - bias : 0.f);
}
// log(1 + e^x) without overflow: x itself where e^x dwarfs 1 (PyTorch's threshold)
template <class T> T af_softplus(T x) { return x > 20.f ? x : log1pf(expf(x)); }
template <class T> T af_mish(T x) { return x * tanhf(af_softplus(x)); }
template <class T> T af_gelu(T x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
template <class T> T af_gelu_tanh(T x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
template <class T> T af_sign(T x) { return x > 0.f ? 1.f : (x < 0.f ? -1.f : x); }
// the max a log-sum-exp takes out: 0 where it is infinite, so an infinite max stays itself
template <class T> T af_finite_or_zero(T x) { return (x - x == 0.f) | (x != x) ? x : 0.f; }

}  // namespace af

// Row reductions of generated kernels (`#pragma omp simd reduction(af_max : acc)`): max and min
// with NaN propagating, which OpenMP's own max/min do not promise. Both vectorise.
#pragma omp declare reduction(af_max : float : omp_out = af::af_max(omp_out, omp_in)) \
    initializer(omp_priv = -__builtin_inff())
#pragma omp declare reduction(af_min : float : omp_out = af::af_min(omp_out, omp_in)) \
    initializer(omp_priv = __builtin_inff())
