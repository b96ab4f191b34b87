// Language identification scores for app.langid, in one call: the byte-level automaton walk
// over a text and the naive Bayes scores of the languages it was restricted to, normalized.
//
// The model's tables are py3langid's, passed in once as flat arrays:
//   next_state[row_base[state] + byte]  the automaton's next state
//   feature[state]                      the state's row of class weights, or -1 (none)
//   weight[row * classes + c]           the weights (float32; the model stores float16)
//   prior[c]                            the class priors
// A text's score for class c is prior[c] + the sum, over the rows its walk visits, of
// log1p(visits of that row) * weight[row][c] (rows in the order first visited); the scores,
// scaled by 1 / sqrt(the text's bytes), go through a softmax. A text that visits no row gets
// equal shares. `seen` holds -1 for every row on entry and again on return; `rows` and
// `visits` have room for one entry per row of weights.
//
// It is built into its own small library (no ONNX Runtime in it) by
// `python -m app.engine.kernels build`, and called through ctypes with the GIL held (the
// scratch arrays are the caller's, shared by the calls of one detector).

#include <cmath>
#include <cstddef>
#include <cstdint>

extern "C" __attribute__((visibility("default"))) int nmt_langid_scores(
    const uint32_t* next_state, const uint32_t* row_base, const int32_t* feature,
    const float* weight, const float* prior, int classes, const uint8_t* text, size_t length,
    int32_t* seen, int32_t* rows, float* visits, float* scores) {
  uint32_t state = 0;
  int distinct = 0;
  for (size_t i = 0; i < length; ++i) {
    state = next_state[row_base[state] + text[i]];
    const int32_t row = feature[state];
    if (row < 0) continue;
    const int32_t slot = seen[row];
    if (slot < 0) {
      seen[row] = distinct;
      rows[distinct] = row;
      visits[distinct] = 1.0f;
      ++distinct;
    } else {
      visits[slot] += 1.0f;
    }
  }
  if (distinct == 0) {
    for (int c = 0; c < classes; ++c) scores[c] = 1.0f / static_cast<float>(classes);
    return 0;
  }
  for (int c = 0; c < classes; ++c) scores[c] = 0.0f;
  for (int j = 0; j < distinct; ++j) {
    seen[rows[j]] = -1;
    const float w = std::log1p(visits[j]);
    const float* row = weight + static_cast<size_t>(rows[j]) * classes;
    for (int c = 0; c < classes; ++c) scores[c] += w * row[c];
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(length)));
  float top = -INFINITY;
  for (int c = 0; c < classes; ++c) {
    scores[c] = (scores[c] + prior[c]) * scale;
    if (scores[c] > top) top = scores[c];
  }
  float sum = 0.0f;
  for (int c = 0; c < classes; ++c) {
    scores[c] = std::exp(scores[c] - top);
    sum += scores[c];
  }
  for (int c = 0; c < classes; ++c) scores[c] /= sum;
  return distinct;
}
