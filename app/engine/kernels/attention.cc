// One-query attention for decoder steps: a CPU kernel that ONNX Runtime loads as a custom
// operator (domain "nmt", op "OneQueryAttention"). It takes the inputs and attributes of
// com.microsoft.GroupQueryAttention for one new query per row, so the engine swaps one for the
// other node by node:
//
//   inputs  0 query (B, 1, Hq D), or Q, K and V packed (B, 1, (Hq + 2 Hkv) D) with 1 and 2 empty
//           1 key, 2 value (B, 1, Hkv D): the row's new key and value
//           3 past_key, 4 past_value (B, Hkv, M, D)
//           5 seqlens_k (B,) int32: the row's past length (its new key goes there)
//           6 total_sequence_length () int32
//   outputs 0 (B, 1, Hq D); 1 present_key, 2 present_value (B, Hkv, max(M, total), D): the
//           past buffers themselves when the caller binds them to both (nothing is copied)
//   attributes num_heads (Hq), kv_num_heads (Hkv), scale (default 1/sqrt(D))
//
// Query head h reads key/value head h / (Hq / Hkv). ONNX Runtime's own kernels call a matrix
// product, a softmax and another product for every (row, head) pair, and those calls cost more
// than the arithmetic when each pair is one query over a few dozen positions; here a pair is
// one pass of fused multiply-adds over its keys and values.

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "op_status.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "simd_exp.h"

namespace {

// exp(x) for a run of floats, in place (x <= 0 here: scores less their maximum).
void exp_in_place(float* x, int n) {
  int i = 0;
#ifdef __AVX2__
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, nmt_simd::exp8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = x[i] > -87.0f ? std::exp(x[i]) : 0.0f;
}

// The softmax's numerators in place, exp(s - best), and their sum.
float exp_sum(float* s, int64_t n, float best) {
  for (int64_t i = 0; i < n; ++i) s[i] -= best;
  exp_in_place(s, static_cast<int>(n));
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += s[i];
  return sum;
}

float dot(const float* a, const float* b, int d) {
  int i = 0;
  float sum = 0.0f;
#ifdef __AVX2__
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= d; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= d; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  sum = _mm_cvtss_f32(s);
#endif
  for (; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

// out[0:d] += w * v[0:d]
void axpy(float w, const float* v, float* out, int d) {
  int i = 0;
#ifdef __AVX2__
  const __m256 wv = _mm256_set1_ps(w);
  for (; i + 8 <= d; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(out + i)));
#endif
  for (; i < d; ++i) out[i] += w * v[i];
}

// One query head against n keys/values of head size 8 NV (AVX2): scores four positions at a
// time (independent accumulators), the output held in NV registers over all positions.
#ifdef __AVX2__
template <int NV>
void head_fixed(const float* q, const float* k, const float* v, int64_t n, float alpha, float* s,
                float* out) {
  constexpr int D = 8 * NV;
  __m256 qr[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) qr[j] = _mm256_loadu_ps(q + 8 * j);
  float best = -INFINITY;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float* kt = k + t * D;
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
      a0 = _mm256_fmadd_ps(qr[j], _mm256_loadu_ps(kt + 8 * j), a0);
      a1 = _mm256_fmadd_ps(qr[j], _mm256_loadu_ps(kt + D + 8 * j), a1);
      a2 = _mm256_fmadd_ps(qr[j], _mm256_loadu_ps(kt + 2 * D + 8 * j), a2);
      a3 = _mm256_fmadd_ps(qr[j], _mm256_loadu_ps(kt + 3 * D + 8 * j), a3);
    }
    // four horizontal sums at once: (a0 a1 a2 a3) -> one 128-bit vector of their totals
    __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
    __m256 h = _mm256_hadd_ps(h01, h23);
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    four = _mm_mul_ps(four, _mm_set1_ps(alpha));
    _mm_storeu_ps(s + t, four);
    for (int i = 0; i < 4; ++i) best = std::max(best, s[t + i]);
  }
  for (; t < n; ++t) {
    s[t] = alpha * dot(q, k + t * D, D);
    best = std::max(best, s[t]);
  }
  const float sum = exp_sum(s, n, best);
  __m256 o[NV];
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) o[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; ++i) {
    const __m256 w = _mm256_set1_ps(s[i]);
    const float* vt = v + i * D;
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) o[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vt + 8 * j), o[j]);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
#pragma GCC unroll 16
  for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(o[j], inv));
}
#endif

// The same for any head size, one position at a time.
void head_any(const float* q, const float* k, const float* v, int64_t n, int64_t D, float alpha,
              float* s, float* out) {
  float best = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = alpha * dot(q, k + t * D, static_cast<int>(D));
    best = std::max(best, s[t]);
  }
  const float inv = 1.0f / exp_sum(s, n, best);
  std::memset(out, 0, D * sizeof(float));
  for (int64_t t = 0; t < n; ++t) axpy(s[t] * inv, v + t * D, out, static_cast<int>(D));
}

void head(const float* q, const float* k, const float* v, int64_t n, int64_t D, float alpha,
          float* s, float* out) {
#ifdef __AVX2__
  switch (D) {
    case 32: return head_fixed<4>(q, k, v, n, alpha, s, out);
    case 64: return head_fixed<8>(q, k, v, n, alpha, s, out);
    case 128: return head_fixed<16>(q, k, v, n, alpha, s, out);
    default: break;
  }
#endif
  head_any(q, k, v, n, D, alpha, s, out);
}

struct Kernel {
  int64_t heads = 0, kv_heads = 0;
  float scale = 0.0f;

  Kernel(const OrtApi& api, const OrtKernelInfo* info) {
    Ort::ConstKernelInfo k(info);
    heads = k.GetAttribute<int64_t>("num_heads");
    kv_heads = k.GetAttribute<int64_t>("kv_num_heads");
    float s = 0.0f;
    if (OrtStatus* missing = api.KernelInfoGetAttribute_float(info, "scale", &s)) {
      api.ReleaseStatus(missing);  // no scale attribute: 1/sqrt(D)
    } else {
      scale = s;
    }
  }

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("OneQueryAttention", *this, raw); }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    auto query = ctx.GetInput(0);
    auto key = ctx.GetInput(1), value = ctx.GetInput(2);
    auto past_k = ctx.GetInput(3), past_v = ctx.GetInput(4);
    auto seqlens = ctx.GetInput(5), total_in = ctx.GetInput(6);
    const bool packed = !key;
    auto qshape = query.GetTensorTypeAndShapeInfo().GetShape();
    auto pshape = past_k.GetTensorTypeAndShapeInfo().GetShape();  // (B, Hkv, M, D)
    if (qshape.size() != 3 || qshape[1] != 1) throw std::runtime_error("one query per row only");
    if (pshape.size() != 4 || pshape[1] != kv_heads) throw std::runtime_error("past_key is not (B, Hkv, M, D)");
    const int64_t B = qshape[0], M = pshape[2], D = pshape[3];
    const int64_t Hq = heads, Hkv = kv_heads, group = Hq / Hkv;
    if (qshape[2] != (packed ? (Hq + 2 * Hkv) * D : Hq * D)) throw std::runtime_error("query width");
    if (Hkv <= 0 || Hq % Hkv != 0 || pshape[0] != B) throw std::runtime_error("heads or rows");
    if (past_v.GetTensorTypeAndShapeInfo().GetShape() != pshape)
      throw std::runtime_error("past_value is not shaped as past_key");
    if (seqlens.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(B))
      throw std::runtime_error("seqlens_k needs one length per row");
    if (total_in.GetTensorTypeAndShapeInfo().GetElementCount() != 1)
      throw std::runtime_error("total_sequence_length is one number");
    if (!packed && (!value || key.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(B * Hkv * D) ||
                    value.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(B * Hkv * D)))
      throw std::runtime_error("key and value are not (B, 1, Hkv D)");
    const int32_t* lens = seqlens.GetTensorData<int32_t>();
    const int64_t total = *total_in.GetTensorData<int32_t>();
    const int64_t present_len = std::max(M, total);
    std::vector<int64_t> oshape{B, 1, Hq * D}, pres{B, Hkv, present_len, D};
    float* out = ctx.GetOutput(0, oshape).GetTensorMutableData<float>();
    float* pk = ctx.GetOutput(1, pres).GetTensorMutableData<float>();
    float* pv = ctx.GetOutput(2, pres).GetTensorMutableData<float>();
    const float* qk = past_k.GetTensorData<float>();
    const float* qv = past_v.GetTensorData<float>();
    const float* q = query.GetTensorData<float>();
    const float* kn = packed ? nullptr : key.GetTensorData<float>();
    const float* vn = packed ? nullptr : value.GetTensorData<float>();
    const bool shared = pk == qk && pv == qv;
    const float alpha = scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t row_q = packed ? (Hq + 2 * Hkv) * D : Hq * D;
    std::vector<float> scores(present_len + 8);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t past = lens[b];
      if (past < 0 || past >= present_len) throw std::runtime_error("seqlens_k out of range");
      const int64_t n = past + 1;
      const float* qrow = q + b * row_q;
      const float* knew = packed ? qrow + Hq * D : kn + b * Hkv * D;
      const float* vnew = packed ? qrow + (Hq + Hkv) * D : vn + b * Hkv * D;
      for (int64_t h = 0; h < Hkv; ++h) {
        float* ck = pk + (b * Hkv + h) * present_len * D;
        float* cv = pv + (b * Hkv + h) * present_len * D;
        if (!shared) {  // present is a buffer of its own: the past first, the rest zero
          const int64_t keep = std::min(past, M) * D;
          std::memcpy(ck, qk + (b * Hkv + h) * M * D, keep * sizeof(float));
          std::memcpy(cv, qv + (b * Hkv + h) * M * D, keep * sizeof(float));
          std::memset(ck + keep, 0, (present_len * D - keep) * sizeof(float));
          std::memset(cv + keep, 0, (present_len * D - keep) * sizeof(float));
        }
        std::memmove(ck + past * D, knew + h * D, D * sizeof(float));
        std::memmove(cv + past * D, vnew + h * D, D * sizeof(float));
        for (int64_t g = 0; g < group; ++g) {
          const int64_t qh = h * group + g;
          head(qrow + qh * D, ck, cv, n, D, alpha, scores.data(), out + b * Hq * D + qh * D);
        }
      }
    }
  }
};

struct Op : nmt_kernels::CpuOp<Op, Kernel> {
  const char* GetName() const { return "OneQueryAttention"; }
  size_t GetInputTypeCount() const { return 7; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i >= 5 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return i == 1 || i == 2 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return 3; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

// Cross-attention of a decoder step (op "CrossAttention"): the inputs and attributes of
// com.microsoft.MultiHeadAttention as the step graphs use it for the encoder's keys and values,
//
//   inputs  0 query (N, Lq, H D): each sentence's queries (its rows, or its beams)
//           1 key, 2 value (N, H, S, D): the sentence's source keys/values
//           3 bias: absent; 4 key_padding_mask (N, S) int32, 0 at padding (optional)
//   output  0 (N, Lq, H D)
//   attributes num_heads (H), scale (default 1/sqrt(D)); unidirectional must be 0
//
// Each (query, head) pair is one pass over the sentence's unmasked keys and values. Sources
// are padded at the end, so a mask is a prefix of ones and the pass stops there; other masks
// skip their zeros one by one. A sentence with no unmasked position gets zeros.
void head_masked(const float* q, const float* k, const float* v, const int32_t* mask, int64_t n,
                 int64_t D, float alpha, float* s, float* out) {
  float best = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = mask[t] ? alpha * dot(q, k + t * D, static_cast<int>(D)) : -INFINITY;
    best = std::max(best, s[t]);
  }
  std::memset(out, 0, D * sizeof(float));
  if (best == -INFINITY) return;
  float sum = 0.0f;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = mask[t] ? std::exp(s[t] - best) : 0.0f;
    sum += s[t];
  }
  for (int64_t t = 0; t < n; ++t)
    if (mask[t]) axpy(s[t] / sum, v + t * D, out, static_cast<int>(D));
}

struct CrossKernel {
  int64_t heads = 0;
  float scale = 0.0f;

  CrossKernel(const OrtApi& api, const OrtKernelInfo* info) {
    Ort::ConstKernelInfo k(info);
    heads = k.GetAttribute<int64_t>("num_heads");
    int64_t unidirectional = 0;
    if (OrtStatus* missing = api.KernelInfoGetAttribute_int64(info, "unidirectional", &unidirectional))
      api.ReleaseStatus(missing);
    if (unidirectional != 0) throw std::runtime_error("unidirectional attention is not cross-attention");
    float s = 0.0f;
    if (OrtStatus* missing = api.KernelInfoGetAttribute_float(info, "scale", &s)) {
      api.ReleaseStatus(missing);
    } else {
      scale = s;
    }
  }

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("CrossAttention", *this, raw); }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    auto query = ctx.GetInput(0), key = ctx.GetInput(1), value = ctx.GetInput(2);
    if (ctx.GetInputCount() > 3 && ctx.GetInput(3)) throw std::runtime_error("no bias input");
    Ort::ConstValue mask_in = ctx.GetInputCount() > 4 ? ctx.GetInput(4) : Ort::ConstValue{nullptr};
    auto qshape = query.GetTensorTypeAndShapeInfo().GetShape();
    auto kshape = key.GetTensorTypeAndShapeInfo().GetShape();  // (N, H, S, D)
    if (qshape.size() != 3 || kshape.size() != 4 || kshape[1] != heads || qshape[0] != kshape[0])
      throw std::runtime_error("query is not (N, Lq, H D) or key not (N, H, S, D)");
    if (value.GetTensorTypeAndShapeInfo().GetShape() != kshape)
      throw std::runtime_error("value is not shaped as key");
    const int64_t N = qshape[0], Lq = qshape[1], H = heads, S = kshape[2], D = kshape[3];
    if (qshape[2] != H * D) throw std::runtime_error("query width is not H D");
    const int32_t* mask = nullptr;
    if (mask_in) {
      auto mshape = mask_in.GetTensorTypeAndShapeInfo().GetShape();
      if (mshape != std::vector<int64_t>{N, S}) throw std::runtime_error("key_padding_mask is not (N, S)");
      mask = mask_in.GetTensorData<int32_t>();
    }
    float* out = ctx.GetOutput(0, qshape).GetTensorMutableData<float>();
    const float* q = query.GetTensorData<float>();
    const float* k = key.GetTensorData<float>();
    const float* v = value.GetTensorData<float>();
    const float alpha = scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> scores(S + 8);
    for (int64_t n = 0; n < N; ++n) {
      const int32_t* m = mask ? mask + n * S : nullptr;
      int64_t valid = S;  // a prefix of ones: its length
      bool prefix = true;
      if (m) {
        valid = 0;
        while (valid < S && m[valid]) ++valid;
        for (int64_t t = valid; t < S && prefix; ++t) prefix = m[t] == 0;
      }
      for (int64_t j = 0; j < Lq; ++j)
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = q + (n * Lq + j) * H * D + h * D;
          const float* kh = k + (n * H + h) * S * D;
          const float* vh = v + (n * H + h) * S * D;
          float* oh = out + (n * Lq + j) * H * D + h * D;
          if (!prefix)
            head_masked(qh, kh, vh, m, S, D, alpha, scores.data(), oh);
          else if (valid == 0)
            std::memset(oh, 0, D * sizeof(float));
          else
            head(qh, kh, vh, valid, D, alpha, scores.data(), oh);
        }
    }
  }
};

struct CrossOp : nmt_kernels::CpuOp<CrossOp, CrossKernel> {
  const char* GetName() const { return "CrossAttention"; }
  size_t GetInputTypeCount() const { return 5; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i == 4 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return i >= 3 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

OrtCustomOp* search_tail_op();  // search_tail.cc
OrtCustomOp* int8_matmul_op();  // int8_matmul.cc
OrtCustomOp* beam_walk_op();  // beam_walk.cc
OrtCustomOp* greedy_advance_op();  // greedy_advance.cc

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* base) {
  const OrtApi* api = base->GetApi(ORT_API_VERSION);
  if (api == nullptr) return nullptr;  // a runtime older than the header: nothing registered
  Ort::InitApi(api);
  static Op op;
  static OrtCustomOpDomain* domain = nullptr;
  if (domain == nullptr) {
    if (OrtStatus* s = api->CreateCustomOpDomain("nmt", &domain)) return s;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, &op)) return s;
    static CrossOp cross;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, &cross)) return s;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, search_tail_op())) return s;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, int8_matmul_op())) return s;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, beam_walk_op())) return s;
    if (OrtStatus* s = api->CustomOpDomain_Add(domain, greedy_advance_op())) return s;
  }
  return api->AddCustomOpDomain(options, domain);
}
