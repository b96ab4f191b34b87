// exp(x) for x <= 0, eight or sixteen floats at a time, shared by the kernels: x = n ln2 + r
// with |r| <= ln2 / 2, exp(r) by its Taylor series to the 7th power (relative error < 1e-8),
// 2^n put into the exponent bits; below -87 the result is 0.
#pragma once

#ifdef __AVX2__
#include <immintrin.h>

namespace nmt_simd {

inline __m256 exp8(__m256 x) {
  const __m256 low = _mm256_set1_ps(-87.0f), one = _mm256_set1_ps(1.0f);
  const __m256 v = _mm256_max_ps(x, low);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147180559945309f), v);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, one);
  p = _mm256_fmadd_ps(p, r, one);
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_cmp_ps(x, low, _CMP_GT_OQ));
}

// The same sixteen at a time, for code compiled for AVX-512 (a function with this target,
// called only where the CPU has it).
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  const __m512 low = _mm512_set1_ps(-87.0f), one = _mm512_set1_ps(1.0f);
  const __m512 v = _mm512_max_ps(x, low);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945309f), v);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, one);
  p = _mm512_fmadd_ps(p, r, one);
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, low, _CMP_GT_OQ),
                             _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

}  // namespace nmt_simd
#endif
