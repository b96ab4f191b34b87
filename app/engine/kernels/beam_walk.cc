// The search step of the fused beam search (app/engine/fused.py), after the step graph has given
// each row its m best tokens (domain "nmt", op "BeamWalk"). It stands in for the loop body's
// forty-odd small nodes (sorting, top-k, the walk, the finished hypotheses, the stop test), each
// of which costs ONNX Runtime a few microseconds on a handful of numbers.
//
//   inputs  0 top_log_probs (R, m) float, 1 top_ids (R, m) int64: each row's m candidates
//           2 scores (R,) float: the rows' running scores (R = 1 at the first step, then K)
//           3 best_finished (K,) double: the K best normalized finished scores so far, best
//             first (-inf where fewer), 4 n_finished () int64: how many finished so far
//           5 t1 () int64: tokens generated after this step, 6 max_steps () int64
//           7 eos () int64, 8 beam_size (1,) int64 (K), 9 length_penalty () double
//   outputs 0 more () bool: whether the search goes on
//           1 next_tokens (K,) int64, 2 next_scores (K,) float, 3 next_parents (K,) int64:
//             the K rows of the next step (the extending candidates in walk order, then the
//             others), 4 best_finished (K,) double, 5 n_finished () int64
//           6 tokens (m,) int64, 7 cand_scores (m,) float, 8 parents (m,) int64,
//           9 finished (m,) bool: the m best candidates in order, and which became finished
//           10 chosen (K,) int64: the candidates the K next rows took
//
// The rules, and the arithmetic, are the graph's it replaces: each row's candidates in
// ascending id order, flattened row by row; the m best by the float32 sum of score and
// log-prob, ties to the lower position; the walk up to the K-th non-EOS candidate; finished
// scores normalized in double (score / t1 ** length_penalty, pow as Python's); the K best
// finished, ties to the earlier; stop when K have finished and the K-th best is at least the
// best live score over (t1 + 1) ** length_penalty.

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "op_status.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

template <typename T>
T scalar(Ort::KernelContext& ctx, size_t i, const char* what) {
  Ort::ConstValue v = ctx.GetInput(i);
  if (v.GetTensorTypeAndShapeInfo().GetElementCount() != 1)
    throw std::runtime_error(std::string(what) + " is one number");
  return *v.GetTensorData<T>();
}

// The n indices of v ordered best first (descending; ascending with `smallest`), ties to the
// lower index, as ONNX TopK orders them.
template <typename T>
void order_of(const T* v, int64_t n, bool smallest, std::vector<int64_t>& out) {
  out.resize(n);
  std::iota(out.begin(), out.end(), 0);
  std::stable_sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
    return smallest ? v[a] < v[b] : v[a] > v[b];
  });
}

struct Kernel {
  Kernel(const OrtApi&, const OrtKernelInfo*) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("BeamWalk", *this, raw); }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    Ort::ConstValue lp_in = ctx.GetInput(0), ids_in = ctx.GetInput(1), scores_in = ctx.GetInput(2);
    Ort::ConstValue finished_in = ctx.GetInput(3);
    const std::vector<int64_t> shape = lp_in.GetTensorTypeAndShapeInfo().GetShape();
    if (shape.size() != 2 || ids_in.GetTensorTypeAndShapeInfo().GetShape() != shape)
      throw std::runtime_error("top_log_probs and top_ids are not both (R, m)");
    const int64_t R = shape[0], m = shape[1];
    if (scores_in.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(R))
      throw std::runtime_error("scores are not (R,)");
    const int64_t K = scalar<int64_t>(ctx, 8, "beam_size");
    if (R < 1 || K < 1 || K > m) throw std::runtime_error("beam_size must be in [1, m], rows at least 1");
    if (finished_in.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(K))
      throw std::runtime_error("best_finished is not (K,)");
    const int64_t n_finished = scalar<int64_t>(ctx, 4, "n_finished");
    const int64_t t1 = scalar<int64_t>(ctx, 5, "t1"), max_steps = scalar<int64_t>(ctx, 6, "max_steps");
    const int64_t eos = scalar<int64_t>(ctx, 7, "eos");
    const double penalty = scalar<double>(ctx, 9, "length_penalty");
    const float* lps = lp_in.GetTensorData<float>();
    const int64_t* ids = ids_in.GetTensorData<int64_t>();
    const float* scores = scores_in.GetTensorData<float>();
    const double* finished_before = finished_in.GetTensorData<double>();

    // every row's candidates in ascending id order, their summed scores, flattened
    std::vector<int64_t> flat_ids(R * m), by_id;
    std::vector<float> flat(R * m);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t* row = ids + r * m;
      order_of(row, m, true, by_id);
      for (int64_t j = 0; j < m; ++j) {
        flat_ids[r * m + j] = row[by_id[j]];
        flat[r * m + j] = scores[r] + lps[r * m + by_id[j]];
      }
    }
    std::vector<int64_t> best;
    order_of(flat.data(), R * m, false, best);  // the m best come first

    int64_t* tokens = ctx.GetOutput(6, {m}).GetTensorMutableData<int64_t>();
    float* cand_scores = ctx.GetOutput(7, {m}).GetTensorMutableData<float>();
    int64_t* parents = ctx.GetOutput(8, {m}).GetTensorMutableData<int64_t>();
    bool* finished = ctx.GetOutput(9, {m}).GetTensorMutableData<bool>();
    const double minus_inf = -std::numeric_limits<double>::infinity();
    const double length = std::pow(static_cast<double>(t1), penalty);
    const bool last_step = t1 >= max_steps;
    std::vector<char> extend(m);
    std::vector<double> all(K + m);
    std::copy(finished_before, finished_before + K, all.begin());
    int64_t others = 0, n_new = 0, n_extend = 0;
    double live = minus_inf;
    for (int64_t j = 0; j < m; ++j) {
      tokens[j] = flat_ids[best[j]];
      cand_scores[j] = flat[best[j]];
      parents[j] = best[j] / m;
      const bool is_eos = tokens[j] == eos, walked = others < K, ends = is_eos || last_step;
      others += !is_eos;
      finished[j] = walked && ends;
      extend[j] = walked && !ends;
      const double score = static_cast<double>(cand_scores[j]);
      all[K + j] = finished[j] ? score / length : minus_inf;
      n_new += finished[j];
      n_extend += extend[j];
      if (extend[j]) live = std::max(live, score);
    }
    std::vector<int64_t> ranked;
    order_of(all.data(), K + m, false, ranked);
    double* best_finished = ctx.GetOutput(4, {K}).GetTensorMutableData<double>();
    for (int64_t i = 0; i < K; ++i) best_finished[i] = all[ranked[i]];
    const int64_t count = n_finished + n_new;
    *ctx.GetOutput(5, {}).GetTensorMutableData<int64_t>() = count;
    const double bound = live / std::pow(static_cast<double>(t1 + 1), penalty);
    const bool stop = count >= K && best_finished[K - 1] >= bound;
    *ctx.GetOutput(0, {}).GetTensorMutableData<bool>() = n_extend > 0 && !stop;

    // the next rows: the extending candidates in walk order, then the others
    int64_t* chosen = ctx.GetOutput(10, {K}).GetTensorMutableData<int64_t>();
    int64_t n = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t j = 0; j < m && n < K; ++j)
        if (static_cast<bool>(extend[j]) == (pass == 0)) chosen[n++] = j;
    int64_t* next_tokens = ctx.GetOutput(1, {K}).GetTensorMutableData<int64_t>();
    float* next_scores = ctx.GetOutput(2, {K}).GetTensorMutableData<float>();
    int64_t* next_parents = ctx.GetOutput(3, {K}).GetTensorMutableData<int64_t>();
    for (int64_t i = 0; i < K; ++i) {
      next_tokens[i] = tokens[chosen[i]];
      next_scores[i] = cand_scores[chosen[i]];
      next_parents[i] = parents[chosen[i]];
    }
  }
};

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr ONNXTensorElementDataType F64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
constexpr ONNXTensorElementDataType I64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
constexpr ONNXTensorElementDataType BOOL = ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
constexpr ONNXTensorElementDataType INPUTS[] = {F32, I64, F32, F64, I64, I64, I64, I64, I64, F64};
constexpr ONNXTensorElementDataType OUTPUTS[] = {BOOL, I64, F32, I64, F64, I64, I64, F32, I64, BOOL, I64};

struct Op : nmt_kernels::CpuOp<Op, Kernel> {
  const char* GetName() const { return "BeamWalk"; }
  size_t GetInputTypeCount() const { return std::size(INPUTS); }
  ONNXTensorElementDataType GetInputType(size_t i) const { return INPUTS[i]; }
  size_t GetOutputTypeCount() const { return std::size(OUTPUTS); }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return OUTPUTS[i]; }
};

}  // namespace

// Registered with the attention operator by RegisterCustomOps (attention.cc).
OrtCustomOp* beam_walk_op() {
  static Op op;
  return &op;
}
