// Probe: the MXFP4 decode GEMM's row path (kernels/cuda/moe_gemm_mxfp4_decode.cuh) at gpt-oss's
// decode shapes, across the knobs that set how many weight bytes a warp keeps in flight and how
// the work is cut: ring stages (4, 8), activation chunks (1, 2), blocks an SM, the rows a pass
// stages (pass_rows) and the K-splits; and the production path with and without its SwiGLU
// epilogue and its early second GEMM. Each configuration runs the two expert GEMMs of one layer (up:
// N = 2I, K = H; down: N = H, K = I) with random top-4 routing, through enough weight copies that
// no launch finds its experts in L2, launched with PDL as the model launches them (up, the SwiGLU,
// down).
// Prints a row per configuration: microseconds for the layer, TB/s of the weight bytes, and the
// production configuration's time over this one's (the first row of each shape; above 1: faster).
// With an argument (a shape's name, e.g. "20b b1"), that shape alone.
//
// Build (from the repository root; fmt needs the host compiler for error_plain.cpp):
//   g++ -std=c++20 -O2 -Isrc -c src/core/error_plain.cpp -o build/error_plain.o
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/probes/mxfp4_decode_ring.cu src/kernels/cuda/moe_gemm_mxfp4.cu build/error_plain.o -lfmt \
//     -o build/probe_mxfp4_decode_ring
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_decode.cuh"
#include "model/moe_timing_inputs.cuh"

using osprey::fail_plain;
using namespace osprey::cuda;
namespace mi = osprey::moe_inputs;
using osprey::mxfp4_act_cols;
using osprey::mxfp4_tiles_bytes;
using osprey::kMxfp4TileBytes;
using osprey::MoeGemmShape;

namespace {

template <int S, int C, int MINB>
__global__ void __launch_bounds__(kWarps * 32, MINB)
    row_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks, int pass_rows) {
  mxfp4_decode_body<1, PdlSync, S, C>(W, x, rows, y, ks, VBlock::this_block(), PdlSync{}, pass_rows);
}

// The rows a pass stages, by the hint (twice the rows an expert typically gets, at most 8): the
// rule this session tried beside deeper rings, where a smaller stage kept two blocks an SM.
int pass_rows_by_hint(int hint) { return hint < 1 ? 8 : hint > 4 ? 8 : 2 * hint; }

struct Config {
  const char* name;
  void (*kernel)(Mxfp4ExpertsView, const bf16*, ExpertRows, float*, int, int);
  int stages, chunks;
  int pass_rows;       // 0: 8
  int ks_mul;          // K-splits: production's times this
  bool early = false;  // the second GEMM starts its weight loads before its PDL wait
  bool swiglu = true;  // the SwiGLU kernel between the GEMMs (false: what it costs the layer)
  bool epilogue = false;  // production only: the SwiGLU as the first GEMM's epilogue (SwigluOut)
  bool prod = false;
};

struct Shape {
  const char* name;
  int experts, batch;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";  // a shape's name: that shape alone (for ncu)
  constexpr int H = 2880, I = 2880, kTopK = 4;
  const int sms = sm_count();
  // prod: m_grouped_mxfp4_gemm_bf16_contiguous itself. Otherwise the row kernel given, or with
  // none the previous production's (session 17: 4 stages, 8 rows a pass, chunks 0: 1 where the
  // grid is one wave of two blocks an SM, else 2 at three blocks an SM). pass_rows 0: 8, -1:
  // pass_rows_by_hint.
  const Config configs[] = {
      {"production (SwiGLU epilogue, down early)", nullptr, 4, 0, -1, 1, true, true, true, true},
      {"production, SwiGLU kernel", nullptr, 4, 0, -1, 1, true, true, false, true},
      {"production, SwiGLU kernel, down not early", nullptr, 4, 0, -1, 1, false, true, false, true},
      {"previous production (session 17)", nullptr, 4, 0, 0, 1},
      {"8 stages, pass rows by hint, 1 chunk, 2/SM", row_kernel<8, 1, 2>, 8, 1, -1, 1},
      {"8 stages, 8 rows, 2 chunks, 2/SM", row_kernel<8, 2, 2>, 8, 2, 0, 1},
      {"4 stages, pass rows by hint, 1 chunk, 3/SM", row_kernel<4, 1, 3>, 4, 1, -1, 1},
      {"4 stages, pass rows by hint, 2 chunks, 3/SM, 2x splits", row_kernel<4, 2, 3>, 4, 2, -1, 2},
  };


  const Shape shapes[] = {{"20b b1", 32, 1},  {"20b b4", 32, 4},   {"20b b8", 32, 8},     {"20b b32", 32, 32},
                          {"20b b64", 32, 64}, {"120b b1", 128, 1}, {"120b b64", 128, 64}, {"120b b128", 128, 128}};
  for (auto k : {row_kernel<4, 1, 2>, row_kernel<4, 2, 3>, row_kernel<4, 1, 3>, row_kernel<8, 2, 2>, row_kernel<8, 1, 2>})
    OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  std::printf("| shape | configuration | up ks | down ks | pass rows | smem KB | layer us | TB/s | production / this |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& sh : shapes) {
    if (!only.empty() && only != sh.name) continue;
    const int E = sh.experts, B = sh.batch, P = B * kTopK;
    const MoeGemmShape shape{.batch = B, .experts = E, .top_k = kTopK, .hidden = H, .intermediate = I};
    const mi::Routing routing = mi::route(shape);
    const std::vector<int32_t>&seg = routing.seg, &active = routing.active, &row_token = routing.row_token;
    const int hint = mi::rows_per_expert(shape);
    const size_t up_bytes = mxfp4_tiles_bytes(2 * I, H), down_bytes = mxfp4_tiles_bytes(H, I);
    const double pair_bytes = double(routing.touched) * double(up_bytes + down_bytes);
    const int copies = mi::copies_for(pair_bytes);
    DeviceArray<uint8_t> up(up_bytes * E * copies), down(down_bytes * E * copies);
    mi::fill_mxfp4_tiles<<<mi::kFillBlocks, mi::kFillThreads>>>(up.ptr, up.n, 1);
    mi::fill_mxfp4_tiles<<<mi::kFillBlocks, mi::kFillThreads>>>(down.ptr, down.n, 2);
    DeviceArray<bf16> b1(size_t(E) * 2 * I), b2(size_t(E) * H), x(size_t(B) * mxfp4_act_cols(H)), a(size_t(P) * mxfp4_act_cols(I));
    mi::fill_bf16<<<mi::kFillBlocks, mi::kFillThreads>>>(b1.ptr, b1.n, 3);
    mi::fill_bf16<<<mi::kFillBlocks, mi::kFillThreads>>>(b2.ptr, b2.n, 4);
    mi::fill_bf16<<<mi::kFillBlocks, mi::kFillThreads>>>(x.ptr, x.n, 5);
    mi::fill_bf16<<<mi::kFillBlocks, mi::kFillThreads>>>(a.ptr, a.n, 6);
    DeviceArray<float> t1(size_t(P) * 2 * I), y(size_t(P) * H);
    DeviceArray<int32_t> seg_d = upload(seg.data(), seg.size()), act_d = upload(active.data(), active.size()),
                         tok_d = upload(row_token.data(), row_token.size());
    ExpertRows r1{.seg = seg_d.ptr, .active = act_d.ptr, .active_max = int(active.size()), .row_live = tok_d.ptr,
                  .x_rows = tok_d.ptr, .rows = P, .rows_per_expert = hint};
    DeviceArray<int32_t> rows_end = upload(&seg[E], 1);
    double base_us = 0;
    for (const Config& cf : configs) {
      ExpertRows r2 = r1;
      r2.x_rows = nullptr;
      r2.routed_early = cf.early;
      const int ks_up = std::min(kWarps, mxfp4_k_splits(2 * I, H, sms) * cf.ks_mul);
      const int ks_dn = std::min(kWarps, mxfp4_k_splits(H, I, sms) * cf.ks_mul);
      const int pr = cf.pass_rows == 0 ? 8 : cf.pass_rows < 0 ? pass_rows_by_hint(hint) : cf.pass_rows;
      size_t smem_max = 0;
      const SwigluOut sw{a.ptr, 1.702f, 7.0f};
      auto gemm = [&](const Mxfp4ExpertsView& W, const bf16* xin, const ExpertRows& rows, float* out, int ks,
                      const SwigluOut* epi = nullptr) {
        if (cf.prod) {
          m_grouped_mxfp4_gemm_bf16_contiguous(W, xin, rows, out, nullptr, epi);
          return;
        }
        const int tiles_per_block = kWarps / ks;
        const dim3 grid(unsigned((W.N / 16 + tiles_per_block - 1) / tiles_per_block), unsigned(rows.active_max));
        const int chunks = cf.chunks ? cf.chunks : size_t(grid.x) * grid.y > size_t(2 * sms) ? 2 : 1;
        auto kernel = cf.kernel ? cf.kernel : chunks == 1 ? row_kernel<4, 1, 2> : row_kernel<4, 2, 3>;
        const size_t smem = mxfp4_decode_smem(1, W.K, ks, chunks, cf.stages, pr);
        smem_max = std::max(smem_max, smem);
        launch_pdl("gemm", kernel, grid, kWarps * 32, smem, nullptr, W, xin, rows, out, ks, pr);
      };
      auto layer = [&](int c) {
        gemm({up.ptr + up_bytes * E * c, b1.ptr, E, 2 * I, H}, x.ptr, r1, t1.ptr, ks_up, cf.epilogue ? &sw : nullptr);
        if (cf.swiglu && !cf.epilogue) moe_swiglu_bf16(t1.ptr, rows_end.ptr, P, I, 1.702f, 7.0f, a.ptr, nullptr);
        gemm({down.ptr + down_bytes * E * c, b2.ptr, E, H, I}, a.ptr, r2, y.ptr, ks_dn);
      };
      const double us = mi::mean_seconds(40, copies, layer) * 1e6;
      if (&cf == &configs[0]) base_us = us;
      std::printf("| %s | %s | %d | %d | %d | %.1f | %.1f | %.2f | %.2f |\n", sh.name, cf.name,
                  ks_up, ks_dn, pr,
                  smem_max / 1024.0, us, pair_bytes / (us * 1e-6) / 1e12, base_us / us);
      std::fflush(stdout);
    }
  }
  return 0;
}
