// The tail of a decoder step: log-softmax over the vocabulary and the k best entries of each
// row, in one pass over the logits and one over their exponentials (domain "nmt", op
// "LogSoftmaxTopK"). It stands in for the step graph's LogSoftmax node and the two-stage top-k
// after it (export.graphs.block_top_k: a dozen nodes that write and read the (R, V) log-probs).
//
//   inputs  0 logits (R, V) float
//           1 k (1,) int64: entries per row, 1 <= k <= V
//   outputs 0 top_log_probs (R, k) float: log_softmax(logits) of the k best, best first
//           1 top_ids (R, k) int64: their ids, the lower id first among equal logits
//
// The k best are chosen on the logits (as a greedy search's argmax is); their log-probs are
// (x - max) - log(sum(exp(x - max))), as LogSoftmax computes them.

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "op_status.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd_exp.h"

namespace {

// The k best of row x[0:n] into vals/ids (sorted: value desc, id asc), k <= n.
void top_k(const float* x, int64_t n, int64_t k, float* vals, int64_t* ids) {
  int64_t have = 0;
  auto insert = [&](float v, int64_t i) {
    int64_t j = have < k ? have++ : k - 1;  // a full list drops its last entry
    for (; j > 0 && vals[j - 1] < v; --j) {
      vals[j] = vals[j - 1];
      ids[j] = ids[j - 1];
    }
    vals[j] = v;
    ids[j] = i;
  };
  int64_t i = 0;
  for (; i < n && have < k; ++i) insert(x[i], i);
#ifdef __AVX2__
  // eight at a time: only a block with an entry above the k-th best so far is looked into
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(vals[k - 1]), _CMP_GT_OQ)) == 0)
      continue;
    for (int64_t j = i; j < i + 8; ++j)
      if (x[j] > vals[k - 1]) insert(x[j], j);
  }
#endif
  for (; i < n; ++i)
    if (x[i] > vals[k - 1]) insert(x[i], i);
}

#ifdef __AVX2__
// sum(exp(x[i] - best)) sixteen at a time, for a CPU with AVX-512 (the library is built with
// AVX2 flags: chosen at run time); *done: how many it summed.
__attribute__((target("avx512f"))) float exp_sum16(const float* x, int64_t n, float best, int64_t* done) {
  const __m512 top = _mm512_set1_ps(best);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_add_ps(acc0, nmt_simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), top)));
    acc1 = _mm512_add_ps(acc1, nmt_simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), top)));
  }
  for (; i + 16 <= n; i += 16)
    acc0 = _mm512_add_ps(acc0, nmt_simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), top)));
  *done = i;
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

const bool has_avx512 = __builtin_cpu_supports("avx512f");
#endif

// sum(exp(x[i] - best)) over the row, x[i] <= best.
float exp_sum(const float* x, int64_t n, float best) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef __AVX2__
  if (has_avx512) {
    sum = exp_sum16(x, n, best, &i);
  } else {
    const __m256 top = _mm256_set1_ps(best);
    __m256 acc = _mm256_setzero_ps(), acc1 = acc;
    for (; i + 16 <= n; i += 16) {
      acc = _mm256_add_ps(acc, nmt_simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), top)));
      acc1 = _mm256_add_ps(acc1, nmt_simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), top)));
    }
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, nmt_simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), top)));
    acc = _mm256_add_ps(acc, acc1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  }
#endif
  for (; i < n; ++i) {
    const float d = x[i] - best;
    sum += d > -87.0f ? std::exp(d) : 0.0f;
  }
  return sum;
}

struct Kernel {
  Kernel(const OrtApi&, const OrtKernelInfo*) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("LogSoftmaxTopK", *this, raw); }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    Ort::ConstValue logits = ctx.GetInput(0), k_in = ctx.GetInput(1);
    const std::vector<int64_t> shape = logits.GetTensorTypeAndShapeInfo().GetShape();
    if (shape.size() != 2) throw std::runtime_error("logits are not (R, V)");
    if (k_in.GetTensorTypeAndShapeInfo().GetElementCount() != 1) throw std::runtime_error("k is one number");
    const int64_t R = shape[0], V = shape[1], k = *k_in.GetTensorData<int64_t>();
    if (k < 1 || k > V) throw std::runtime_error("k must be in [1, V]");
    const std::vector<int64_t> oshape{R, k};
    float* vals = ctx.GetOutput(0, oshape).GetTensorMutableData<float>();
    int64_t* ids = ctx.GetOutput(1, oshape).GetTensorMutableData<int64_t>();
    const float* x = logits.GetTensorData<float>();
    for (int64_t r = 0; r < R; ++r) {
      const float* row = x + r * V;
      float* v = vals + r * k;
      top_k(row, V, k, v, ids + r * k);
      const float best = v[0];  // the row's maximum
      const float lse = std::log(exp_sum(row, V, best));
      for (int64_t j = 0; j < k; ++j) v[j] = (v[j] - best) - lse;
    }
  }
};

struct Op : nmt_kernels::CpuOp<Op, Kernel> {
  const char* GetName() const { return "LogSoftmaxTopK"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }
  size_t GetOutputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetOutputType(size_t i) const {
    return i == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }
};

}  // namespace

// Registered with the attention operator by RegisterCustomOps (attention.cc).
OrtCustomOp* search_tail_op() {
  static Op op;
  return &op;
}
