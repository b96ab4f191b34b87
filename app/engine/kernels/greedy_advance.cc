// The bookkeeping of a greedy search step after the decoder (domain "nmt", op "GreedyAdvance"):
// each running row takes its best token, adds its log-prob to its score, writes it to its
// history, and either goes on (its position one further) or finishes, at EOS or at its length
// limit. The running batch's arrays are bound as both these inputs and the outputs of the same
// name with "_next" (ONNX Runtime I/O binding, as the key/value cache is), so a step changes
// them in place and Python only looks at the rows that finished: between two steps of a decode
// lane there is then almost no Python to run.
//
//   inputs  0 top_log_probs (R, k) float: the step's best log-probs per row, best first
//           1 top_ids (R, k) int64: their token ids
//           2 positions (R) int64: each row's steps so far (its position and past length);
//             0 for a finished row, which decodes nothing
//           3 score (R) float: the running sum of each row's chosen log-probs
//           4 history (R, W) int64: each row's chosen tokens so far
//           5 limit (R) int64: the most tokens a row generates, EOS included (<= W)
//           6 alive (R) bool: the rows still searching
//           7 eos () int64
//   outputs 0 tokens (R) int64: the next step's input tokens
//           1 positions (R) int64, 2 past_lengths (R) int32: the next step's (0 if finished)
//           3 score, 4 history, 5 alive: updated
//           6 ended (R) int32: for a row that finished at this step its length (tokens
//             generated, EOS included), else 0
//
// The score is summed in float32, one addition a step, as the Python search does (the same
// bits). Where an output is not bound to its input's memory, the input is copied to it first.

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "op_status.h"

#include <cstring>
#include <stdexcept>
#include <vector>

namespace {

template <typename T>
T* in_place(Ort::KernelContext& ctx, size_t out, const Ort::ConstValue& in,
            const std::vector<int64_t>& shape) {
  T* dst = ctx.GetOutput(out, shape).GetTensorMutableData<T>();
  const T* src = in.GetTensorData<T>();
  if (dst != src) std::memcpy(dst, src, in.GetTensorTypeAndShapeInfo().GetElementCount() * sizeof(T));
  return dst;
}

struct Kernel {
  Kernel(const OrtApi&, const OrtKernelInfo*) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("GreedyAdvance", *this, raw); }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    Ort::ConstValue log_probs = ctx.GetInput(0), ids = ctx.GetInput(1), positions = ctx.GetInput(2),
                    score = ctx.GetInput(3), history = ctx.GetInput(4), limit = ctx.GetInput(5),
                    alive = ctx.GetInput(6), eos_in = ctx.GetInput(7);
    const std::vector<int64_t> top = log_probs.GetTensorTypeAndShapeInfo().GetShape();
    const std::vector<int64_t> hist = history.GetTensorTypeAndShapeInfo().GetShape();
    if (top.size() != 2 || top[1] < 1) throw std::runtime_error("top_log_probs are not (R, k)");
    if (ids.GetTensorTypeAndShapeInfo().GetShape() != top) throw std::runtime_error("top_ids are not (R, k)");
    const int64_t R = top[0], k = top[1];
    if (hist.size() != 2 || hist[0] != R) throw std::runtime_error("history is not (R, W)");
    const int64_t W = hist[1];
    const std::vector<int64_t> rows{R};
    for (const Ort::ConstValue* v : {&positions, &score, &limit, &alive})
      if (v->GetTensorTypeAndShapeInfo().GetShape() != rows) throw std::runtime_error("positions, score, limit and alive must be (R,)");
    if (eos_in.GetTensorTypeAndShapeInfo().GetElementCount() != 1) throw std::runtime_error("eos is one number");
    const int64_t eos = *eos_in.GetTensorData<int64_t>();

    const float* lp = log_probs.GetTensorData<float>();
    const int64_t* best = ids.GetTensorData<int64_t>();
    const int64_t* lim = limit.GetTensorData<int64_t>();
    int64_t* tokens_out = ctx.GetOutput(0, rows).GetTensorMutableData<int64_t>();
    int64_t* pos = in_place<int64_t>(ctx, 1, positions, rows);
    int32_t* past = ctx.GetOutput(2, rows).GetTensorMutableData<int32_t>();
    float* sc = in_place<float>(ctx, 3, score, rows);
    int64_t* hs = in_place<int64_t>(ctx, 4, history, hist);
    bool* live = in_place<bool>(ctx, 5, alive, rows);
    int32_t* ended = ctx.GetOutput(6, rows).GetTensorMutableData<int32_t>();
    for (int64_t r = 0; r < R; ++r) {
      const int64_t token = best[r * k];
      tokens_out[r] = token;
      ended[r] = 0;
      if (!live[r]) {
        pos[r] = 0;
        past[r] = 0;
        continue;
      }
      const int64_t t = pos[r];
      if (t < 0 || t >= W || t >= lim[r]) throw std::runtime_error("a running row is past its limit or its history");
      sc[r] += lp[r * k];
      hs[r * W + t] = token;
      if (token == eos || t + 1 >= lim[r]) {
        live[r] = false;
        ended[r] = static_cast<int32_t>(t + 1);
        pos[r] = 0;
        past[r] = 0;
      } else {
        pos[r] = t + 1;
        past[r] = static_cast<int32_t>(t + 1);
      }
    }
  }
};

constexpr ONNXTensorElementDataType F32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
constexpr ONNXTensorElementDataType I64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
constexpr ONNXTensorElementDataType I32 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
constexpr ONNXTensorElementDataType BOOL = ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
constexpr ONNXTensorElementDataType INPUTS[] = {F32, I64, I64, F32, I64, I64, BOOL, I64};
constexpr ONNXTensorElementDataType OUTPUTS[] = {I64, I64, I32, F32, I64, BOOL, I32};

struct Op : nmt_kernels::CpuOp<Op, Kernel> {
  const char* GetName() const { return "GreedyAdvance"; }
  size_t GetInputTypeCount() const { return sizeof(INPUTS) / sizeof(INPUTS[0]); }
  ONNXTensorElementDataType GetInputType(size_t i) const { return INPUTS[i]; }
  size_t GetOutputTypeCount() const { return sizeof(OUTPUTS) / sizeof(OUTPUTS[0]); }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return OUTPUTS[i]; }
};

}  // namespace

// Registered with the attention operator by RegisterCustomOps (attention.cc).
OrtCustomOp* greedy_advance_op() {
  static Op op;
  return &op;
}
