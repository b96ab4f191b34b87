// A quantized matrix product for the few rows of a decoder step (domain "nmt", op
// "Int8MatMul"): the step graph's QuantizeLinear of an activation followed by its
// MatMulIntegerToFloat, in one node.
//
//   inputs  0 x (..., K) float: the activation
//           1 w (K, N) int8: the weights (a constant), zero point 0
//           2 x_scale () float, 3 x_zero_point () uint8: the activation's fixed quantization
//           4 w_scale (N,) float: per output column
//           5 bias (N,) float
//   output  0 y (..., N) float: (q(x) - x_zero_point) @ w * (x_scale * w_scale) + bias, with
//             q(x) = clamp(round_half_even(x / x_scale) + x_zero_point, 0, 255)
//
// ONNX Runtime's general kernels pack the activation, walk the weights in strides made for
// many rows and cost 8-20 us per product for one row (shipped decoder, one thread), most of
// it not arithmetic. Here the weights are re-laid once, at the first call, for AVX-512 VNNI
// (4 columns blocks of 16 x 4 consecutive k per 256 bytes, read in order) and each call
// streams them once, for up to ROWS rows at a time; the integer sums are exact and the scaling
// is ONNX Runtime's (float(sum) * scale, then + bias), so the outputs are its outputs to the bit.
// Calls of AMX_ROWS rows or more run on AMX where the CPU has it (16-row tiles over the same
// layout). Needs AVX-512 VNNI (the graph rewrite checks, and that K is a multiple of 4; AMX
// also needs K a multiple of 64, else VNNI runs). Any N: the packed weights are padded with zero
// columns to a multiple of 64, and the last block's loads and stores past N are masked.

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

#include "op_status.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr int64_t COLS = 64;  // columns per pass: four 16-lane accumulators
constexpr int ROWS = 6;       // rows per pass: ROWS x 4 accumulators in registers
constexpr int64_t AMX_ROWS = 8;  // calls of this many rows or more run on AMX where there is AMX

struct Packed {
  std::vector<int8_t> w;        // [NP / COLS][K / 4][COLS][4], columns from N on zero
  std::vector<int32_t> colsum;  // (NP,): sum over k of w[k][n]
  int64_t K = 0, N = 0, NP = 0;  // NP: N rounded up to a multiple of COLS
};

// n rounded up to whole blocks of COLS columns: the packed weights' and the scales' width
constexpr int64_t whole_blocks(int64_t n) { return (n + COLS - 1) / COLS * COLS; }

// the columns of block nb that are w's (COLS but in the last block of an N not a multiple)
inline int valid_cols(const Packed& p, int64_t nb) {
  const int64_t left = p.N - nb * COLS;
  return static_cast<int>(left < COLS ? left : COLS);
}

// the lanes of 16-column group c of a block with `cols` valid columns
inline __mmask16 lanes(int cols, int c) {
  const int valid = cols - 16 * c;
  return valid >= 16 ? static_cast<__mmask16>(0xFFFF)
                     : valid <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << valid) - 1);
}

uint64_t content_hash(const int8_t* w, int64_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(w[i])) * 1099511628211ull;
  return h;
}

void pack(const int8_t* w, int64_t K, int64_t N, Packed& p);

// The packed weights w, held once per process: the sessions of one bundle (step graphs,
// specialized and fused copies) each have the same weights. Found by shape and a hash of the
// content, and checked against a fresh packing (a hash that collides gets its own).
std::shared_ptr<const Packed> shared_packed(const int8_t* w, int64_t K, int64_t N) {
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, uint64_t>, std::weak_ptr<const Packed>> packs;
  const auto key = std::make_tuple(K, N, content_hash(w, K * N));
  auto made = std::make_shared<Packed>();
  pack(w, K, N, *made);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = packs[key].lock()) {
    if (found->w == made->w) return found;
    return made;
  }
  packs[key] = made;
  return made;
}

void pack(const int8_t* w, int64_t K, int64_t N, Packed& p) {
  p.K = K;
  p.N = N;
  p.NP = whole_blocks(N);
  p.w.assign(K * p.NP, 0);
  p.colsum.assign(p.NP, 0);
  const int64_t KQ = K / 4;
  for (int64_t nb = 0; nb < p.NP / COLS; ++nb)
    for (int64_t kq = 0; kq < KQ; ++kq)
      for (int64_t j = 0; j < COLS && nb * COLS + j < N; ++j)
        for (int64_t t = 0; t < 4; ++t) {
          const int8_t v = w[(4 * kq + t) * N + nb * COLS + j];
          p.w[((nb * KQ + kq) * COLS + j) * 4 + t] = v;
        }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) p.colsum[n] += w[k * N + n];
}

__attribute__((target("avx512f,avx512bw")))
void quantize(const float* x, int64_t n, float scale, int zero, uint8_t* q) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i z = _mm512_set1_epi32(zero);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // x / scale rounded half to even (the default rounding mode), plus the zero point
    __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(_mm512_loadu_ps(x + i), s)), z);
    v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(255)), _mm512_setzero_si512());
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(v));
  }
  for (; i < n; ++i) {
    int v = static_cast<int>(std::nearbyint(x[i] / scale)) + zero;
    q[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

// Sixteen outputs from their integer sums: (sum - zero point x column sum) as float, times the
// scale, then plus the bias, the product and the sum rounded apart as ONNX Runtime's kernel does
// (the rounding-mode form keeps the compiler from fusing them).
__attribute__((target("avx512f")))
inline __m512 scaled16(__m512i sum, __m512i zero_sums, __m512 scale, __m512 bias) {
  const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, zero_sums));
  return _mm512_add_ps(_mm512_mul_round_ps(v, scale, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), bias);
}

// rows [0, R) of q (R <= ROWS), columns [nb * COLS, nb * COLS + cols) (colsum and scale
// padded to whole blocks; bias and y not)
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni")))
void block(const uint8_t* q, int64_t K, const int8_t* w, const int32_t* colsum,
           const float* scale, const float* bias, int zero, float* y, int64_t N, int cols) {
  __m512i acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_si512();
  for (int64_t kq = 0; kq < K / 4; ++kq) {
    const __m512i* wk = reinterpret_cast<const __m512i*>(w + kq * COLS * 4);
    const __m512i w0 = _mm512_loadu_si512(wk), w1 = _mm512_loadu_si512(wk + 1);
    const __m512i w2 = _mm512_loadu_si512(wk + 2), w3 = _mm512_loadu_si512(wk + 3);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, q + r * K + 4 * kq, 4);
      const __m512i a = _mm512_set1_epi32(four);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, w1);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], a, w2);
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], a, w3);
    }
  }
  const __m512i z = _mm512_set1_epi32(zero);
  for (int c = 0; c < 4; ++c) {
    const __mmask16 m = lanes(cols, c);
    if (!m) break;
    const __m512i zs = _mm512_mullo_epi32(z, _mm512_loadu_si512(colsum + 16 * c));
    const __m512 s = _mm512_loadu_ps(scale + 16 * c), b = _mm512_maskz_loadu_ps(m, bias + 16 * c);
    for (int r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(y + r * N + 16 * c, m, scaled16(acc[r][c], zs, s, b));
  }
}


// AMX: where the CPU has AMX-INT8 and Linux grants the process its tile state. Rows in blocks of
// 16 (an A tile: 16 rows x 64 k), columns in the packed layout's blocks of 64 (four C tiles of
// 16 x 16 int32, each B tile 16 groups of 4 k x 16 columns: the packed rows at a 256-byte
// stride), K in steps of 64.
constexpr int64_t TILE_ROWS = 16, TILE_K = 64;

bool amx_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  }();
  return usable;
}

struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// rows [0, 16) of q (zero rows past M), columns [0, 64) of the packed block w; the int32 sums
// into c (16 x 64)
__attribute__((target("amx-tile,amx-int8")))
void tiles(const uint8_t* q, int64_t K, const int8_t* w, int32_t* c) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < K; k += TILE_K) {
    _tile_loadd(4, q + k, K);
    const int8_t* b = w + (k / 4) * COLS * 4;  // 16 packed rows of 256 bytes
    _tile_loadd(5, b, COLS * 4);
    _tile_loadd(6, b + 64, COLS * 4);
    _tile_dpbusd(0, 4, 5);
    _tile_loadd(7, b + 128, COLS * 4);
    _tile_dpbusd(1, 4, 6);
    _tile_loadd(5, b + 192, COLS * 4);
    _tile_dpbusd(2, 4, 7);
    _tile_dpbusd(3, 4, 5);
  }
  _tile_stored(0, c, COLS * 4);
  _tile_stored(1, c + 16, COLS * 4);
  _tile_stored(2, c + 32, COLS * 4);
  _tile_stored(3, c + 48, COLS * 4);
}

__attribute__((target("amx-tile")))
void tiles_begin() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  // the compiler does not see that ldtilecfg reads all 64 bytes: make it write them
  __asm__ __volatile__("" : : "r"(&config) : "memory");
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void tiles_end() { _tile_release(); }

// the epilogue of `rows` rows of c (16 x 64 int32 sums) into y
__attribute__((target("avx512f,avx512bw")))
void finish(const int32_t* c, int rows, const int32_t* colsum, const float* scale,
            const float* bias, int zero, float* y, int64_t N, int cols) {
  const __m512i z = _mm512_set1_epi32(zero);
  for (int j = 0; j < 4; ++j) {
    const __mmask16 m = lanes(cols, j);
    if (!m) break;
    const __m512i zs = _mm512_mullo_epi32(z, _mm512_loadu_si512(colsum + 16 * j));
    const __m512 s = _mm512_loadu_ps(scale + 16 * j), b = _mm512_maskz_loadu_ps(m, bias + 16 * j);
    for (int r = 0; r < rows; ++r)
      _mm512_mask_storeu_ps(y + r * N + 16 * j, m,
                            scaled16(_mm512_loadu_si512(c + r * COLS + 16 * j), zs, s, b));
  }
}

using BlockFn = void (*)(const uint8_t*, int64_t, const int8_t*, const int32_t*, const float*,
                         const float*, int, float*, int64_t, int);
constexpr BlockFn BLOCKS[ROWS + 1] = {nullptr, block<1>, block<2>, block<3>,
                                      block<4>, block<5>, block<6>};

// A call of few rows (VNNI) by column blocks: `parts` shares of them, run by the session's
// threads (one thread: one after the other). A product of one row reads each weight once, so
// its time is the weights' bytes over a core's memory bandwidth; two cores read twice as fast.
// products of at least this many weight bytes are shared out: a 256 x 512 product and larger
// (one row of the shipped decoder at batch 1 on 2 cores, 200 test sentences, p50: greedy 3.2-3.3
// ms, beam 4 4.9-5.0 ms; from 64 KiB on 3.1-3.3 / 4.9-5.1; from 256 KiB on 3.3-3.4 / 5.1-5.3)
constexpr int64_t SPLIT_BYTES = 128 * 1024;
struct Few {
  const Packed* p;
  const uint8_t* q;
  const float *scale, *bias;
  float* y;
  int64_t M;
  int zero;
  size_t parts;
};

void few_part(void* data, size_t part) {
  const Few& f = *static_cast<const Few*>(data);
  const int64_t K = f.p->K, N = f.p->N, KQ = K / 4, blocks = f.p->NP / COLS;
  const int64_t first = blocks * static_cast<int64_t>(part) / static_cast<int64_t>(f.parts);
  const int64_t last = blocks * static_cast<int64_t>(part + 1) / static_cast<int64_t>(f.parts);
  for (int64_t nb = first; nb < last; ++nb) {
    const int8_t* w = f.p->w.data() + nb * KQ * COLS * 4;
    for (int64_t m = 0; m < f.M; m += ROWS) {
      const int rows = static_cast<int>(f.M - m < ROWS ? f.M - m : ROWS);
      BLOCKS[rows](f.q + m * K, K, w, f.p->colsum.data() + nb * COLS, f.scale + nb * COLS,
                   f.bias + nb * COLS, f.zero, f.y + m * N + nb * COLS, N, valid_cols(*f.p, nb));
    }
  }
}

struct Kernel {
  Kernel(const OrtApi&, const OrtKernelInfo*) {}

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) { return nmt_kernels::guarded_compute("Int8MatMul", *this, raw); }

  // the weights re-laid and the scales x_scale * w_scale made at the first call (the inputs
  // are constants; sessions may run on several threads at once)
  const Packed& prepare(Ort::KernelContext& ctx) {
    Ort::ConstValue w_in = ctx.GetInput(1);
    std::call_once(once_, [&] {
      const std::vector<int64_t> ws = w_in.GetTensorTypeAndShapeInfo().GetShape();
      if (ws.size() != 2 || ws[0] % 4 || ws[1] < 1)
        throw std::runtime_error("w is not (K, N) with K a multiple of 4");
      Ort::ConstValue w_scale = ctx.GetInput(4);
      if (w_scale.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(ws[1]))
        throw std::runtime_error("w_scale is not (N,)");
      const float x_scale = *ctx.GetInput(2).GetTensorData<float>();
      const float* per_column = w_scale.GetTensorData<float>();
      scale_.assign(whole_blocks(ws[1]), 0.0f);  // padded as the weights
      for (int64_t n = 0; n < ws[1]; ++n) scale_[n] = x_scale * per_column[n];
      packed_ = shared_packed(w_in.GetTensorData<int8_t>(), ws[0], ws[1]);
      source_ = w_in.GetTensorRawData();
    });
    if (!packed_) throw std::runtime_error("w could not be packed");
    if (source_ != w_in.GetTensorRawData()) throw std::runtime_error("w is not a constant");
    return *packed_;
  }

  void Compute(OrtKernelContext* raw) {
    Ort::KernelContext ctx(raw);
    Ort::ConstValue x_in = ctx.GetInput(0);
    const Packed& p = prepare(ctx);
    std::vector<int64_t> shape = x_in.GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty() || shape.back() != p.K) throw std::runtime_error("x's last dimension is not w's K");
    int64_t M = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) M *= shape[i];
    const int64_t K = p.K, N = p.N;
    const float x_scale = *ctx.GetInput(2).GetTensorData<float>();
    const int zero = *ctx.GetInput(3).GetTensorData<uint8_t>();
    const float* bias = ctx.GetInput(5).GetTensorData<float>();
    shape.back() = N;
    float* y = ctx.GetOutput(0, shape).GetTensorMutableData<float>();
    if (M == 0) return;
    thread_local std::vector<uint8_t> q;
    q.resize(M * K);
    quantize(x_in.GetTensorData<float>(), M * K, x_scale, zero, q.data());
    const std::vector<float>& scale = scale_;
    const int64_t KQ = K / 4;
    if (M >= AMX_ROWS && K % TILE_K == 0 && amx_usable()) {
      const int64_t padded = (M + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
      q.resize(padded * K);
      std::memset(q.data() + M * K, 0, (padded - M) * K);
      alignas(64) int32_t c[TILE_ROWS * COLS];
      tiles_begin();
      for (int64_t nb = 0; nb < p.NP / COLS; ++nb) {
        const int8_t* w = p.w.data() + nb * KQ * COLS * 4;
        for (int64_t m = 0; m < M; m += TILE_ROWS) {
          tiles(q.data() + m * K, K, w, c);
          finish(c, static_cast<int>(M - m < TILE_ROWS ? M - m : TILE_ROWS), p.colsum.data() + nb * COLS,
                 scale.data() + nb * COLS, bias + nb * COLS, zero, y + m * N + nb * COLS, N,
                 valid_cols(p, nb));
        }
      }
      tiles_end();
      return;
    }
    Few few{&p, q.data(), scale.data(), bias, y, M, zero, p.NP / COLS >= 2 && K * N >= SPLIT_BYTES ? size_t{2} : size_t{1}};
    if (few.parts > 1)
      ctx.ParallelFor(few_part, few.parts, 0, &few);
    else
      few_part(&few, 0);
  }

 private:
  std::once_flag once_;
  std::shared_ptr<const Packed> packed_;
  std::vector<float> scale_;  // (N,): x_scale * w_scale
  const void* source_ = nullptr;
};

struct Op : nmt_kernels::CpuOp<Op, Kernel> {
  const char* GetName() const { return "Int8MatMul"; }
  size_t GetInputTypeCount() const { return 6; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    switch (i) {
      case 1: return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
      case 3: return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
      default: return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    }
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

// Whether calls of many rows run on AMX in this process (the CPU has it and Linux granted the
// tile state; a container's seccomp profile may refuse it): asked by the engine before it swaps
// the batched step graphs' products, which are slower than ONNX Runtime's without AMX.
extern "C" __attribute__((visibility("default"))) int nmt_amx_usable() { return amx_usable() ? 1 : 0; }

// Registered with the attention operator by RegisterCustomOps (attention.cc).
OrtCustomOp* int8_matmul_op() {
  static Op op;
  return &op;
}
