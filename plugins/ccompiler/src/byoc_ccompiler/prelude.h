/* byoc-ccompiler prelude: branch-free float math that compilers vectorize.
 *
 * libm's expf/tanhf/erff/logf are scalar calls that stop a loop from vectorizing; these inline
 * versions are within a few ulp (erf: about 3.5e-7 absolute) and handle inf and NaN.
 *
 * Every float choice goes through byoc_select: its condition is always evaluated and the pick is
 * a bit mask, so there is no control flow for the vectorizer to if-convert. A C ternary that
 * picks between floats is only vectorized when the compiler may assume that comparisons do not
 * trap (gcc: -fno-trapping-math); byoc_select does not depend on that flag. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float byoc_bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t byoc_float_to_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* c ? a : b, without a branch (c is 0 or 1) */
static inline float byoc_select(int c, float a, float b) {
  const int32_t mask = -(int32_t)c;
  return byoc_bits_to_float((byoc_float_to_bits(a) & mask) | (byoc_float_to_bits(b) & ~mask));
}

/* e^z for z in [-87.34, 88.73]: z = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, scaled by
 * 2^n through the exponent bits. NaN stays NaN; no float-to-int conversion (none can overflow). */
static inline float byoc_exp_core(float z) {
  /* adding 1.5 * 2^23 rounds z / ln2 to an integer n and leaves n in the low mantissa bits */
  const float t = z * 1.44269504088896341f + 12582912.0f;
  int32_t ni = byoc_float_to_bits(t) - 0x4B400000;
  ni = ni > 127 ? 127 : ni;  /* 2^128 is not a float; r grows a little */
  const float n = (float)ni;
  float r = z - n * 0.693145751953125f;  /* n ln2 in two parts: both products exact */
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * byoc_bits_to_float((int32_t)((uint32_t)(ni + 127) << 23));
}

/* z clamped to byoc_exp_core's range; NaN stays NaN (both comparisons are false) */
static inline float byoc_exp_clamp(float z) {
  z = byoc_select(z < -87.3365f, -87.3365f, z);
  return byoc_select(z > 88.7228391f, 88.7228391f, z);
}

/* e^x: 0 below -87.34, inf above 88.73 */
static inline float byoc_exp(float x) {
  const float y = byoc_exp_core(byoc_exp_clamp(x));
  return byoc_select(x > 88.7228391f, INFINITY, byoc_select(x < -87.3365f, 0.0f, y));
}

/* ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), polynomial in m - 1 (Cephes logf).
 * Subnormals are scaled by 2^24 first; 0, negatives, inf and NaN get IEEE's answers. */
static inline float byoc_log(float x) {
  const int sub = x < 1.17549435e-38f;
  const float xs = byoc_select(sub, x * 16777216.0f, x);
  const int32_t bits = byoc_float_to_bits(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126 - 24 * sub;
  float m = byoc_bits_to_float((bits & 0x007fffff) | 0x3f000000); /* in [0.5, 1) */
  const int small = m < 0.707106781186547524f;
  e -= small;
  m = byoc_select(small, m + m - 1.0f, m - 1.0f);
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const float fe = (float)e;
  y = y - fe * 2.12194440e-4f;
  y = y - 0.5f * z;
  float r = fe * 0.693359375f + (m + y);
  r = byoc_select(x == INFINITY, x, r);
  r = byoc_select(x == 0.0f, -INFINITY, r);
  r = byoc_select(x < 0.0f, NAN, r);
  return byoc_select(x != x, x, r);
}

/* tanh: odd rational approximation on [-7.9, 7.9] (as in Eigen and MLAS), within 3 ulp of +-1
 * at the ends; exactly +-1 beyond 9.01, where tanh rounds to it (so a tanh Gelu of -inf is
 * -inf * 0 = NaN, as in onnxruntime). The clamps keep NaN (their comparisons are false). */
static inline float byoc_tanh(float x) {
  float xc = byoc_select(x < -7.90531110763549805f, -7.90531110763549805f, x);
  xc = byoc_select(xc > 7.90531110763549805f, 7.90531110763549805f, xc);
  const float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = x2 * p + 2.00018790482477e-13f;
  p = x2 * p - 8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  p = xc * p;
  float q = 1.19825839466702e-06f;
  q = x2 * q + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return byoc_select(fabsf(x) > 9.01f, copysignf(1.0f, x), p / q);
}

/* erf: odd rational |x| P(x^2) / Q(x^2), least-squares fitted on [0, 3.92] (within 6 ulp, about
 * 3.5e-7 absolute); from 3.92 on, erf rounds to exactly 1 (so Gelu(-inf) is -inf * 0 = NaN, as
 * in onnxruntime). NaN stays NaN (the comparisons are false). */
static inline float byoc_erf(float x) {
  const float a = byoc_select(fabsf(x) > 3.92f, 3.92f, fabsf(x));
  const float t = a * a;
  float p = -1.33621425e-08f;
  p = p * t + 4.72285774e-06f;
  p = p * t + 0.000380540616f;
  p = p * t + 0.00383236841f;
  p = p * t + 0.0542808846f;
  p = p * t + 0.184688658f;
  p = p * t + 1.12837923f;
  float q = 6.34659082e-05f;
  q = q * t + 0.00130524614f;
  q = q * t + 0.0154315913f;
  q = q * t + 0.113774121f;
  q = q * t + 0.497009605f;
  q = q * t + 1.0f;
  const float r = a * p / q;
  return copysignf(byoc_select(r > 1.0f || a == 3.92f, 1.0f, r), x);
}

/* 1 / (1 + e^-x); the clamped e^-x gives the same answers as the inf and 0 cases would */
static inline float byoc_sigmoid(float x) {
  return 1.0f / (1.0f + byoc_exp_core(byoc_exp_clamp(-x)));
}

/* log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|), where log1p(u) is
 * log(v) - ((v - 1) - u) / v with v = 1 + u (corrects the rounding of 1 + u) */
static inline float byoc_softplus(float x) {
  const float u = byoc_exp(-fabsf(x));
  const float v = 1.0f + u;
  return byoc_select(x > 0.0f, x, 0.0f) + (byoc_log(v) - ((v - 1.0f) - u) / v);
}

static inline float byoc_clamp01(float x) {
  x = byoc_select(x < 0.0f, 0.0f, x);
  return byoc_select(x > 1.0f, 1.0f, x);
}
