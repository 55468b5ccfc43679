// time_moe_gemm_mxfp4, time_moe_gemm_mxfp4_wgmma, time_moe_gemm_fp8 (moe_timing.h).
#include <numeric>
#include <vector>

#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "model/moe_timing.h"
#include "model/moe_timing_inputs.cuh"

namespace osprey {

using cuda::DeviceArray;
using namespace moe_inputs;

// The MXFP4 GEMMs' inputs on the device, for both MXFP4 paths: copies of one layer's experts
// (random tiles and biases), each token's BF16 row in the activation layout, the second GEMM's rows,
// the outputs and the routing's sorted rows; view(up, c): copy c of the first (or second) matrix.
struct Mxfp4TimingInputs {
  using bf16 = cuda::bf16;
  int E, H, I, P;
  Routing r;
  size_t up_bytes, down_bytes;
  double touched;
  int copies;
  DeviceArray<uint8_t> up, down;
  DeviceArray<bf16> b1, b2, x, ab;
  DeviceArray<float> t1, y;
  DeviceArray<int32_t> seg, active, row_token;
  cuda::ExpertRows rows;
  explicit Mxfp4TimingInputs(const MoeGemmShape& a)
      : E(a.experts), H(a.hidden), I(a.intermediate), P(a.batch * a.top_k), r(route(a)),
        up_bytes(mxfp4_tiles_bytes(2 * I, H)), down_bytes(mxfp4_tiles_bytes(H, I)),
        touched(double(r.touched) * double(up_bytes + down_bytes)), copies(copies_for(touched)),
        up(up_bytes * E * copies), down(down_bytes * E * copies), b1(size_t(E) * 2 * I), b2(size_t(E) * H),
        x(size_t(a.batch) * mxfp4_act_cols(H)), ab(size_t(P) * mxfp4_act_cols(I)), t1(size_t(P) * 2 * I),
        y(size_t(P) * H), seg(cuda::upload(r.seg.data(), r.seg.size())),
        active(cuda::upload(r.active.data(), r.active.size())),
        row_token(cuda::upload(r.row_token.data(), r.row_token.size())) {
    fill_mxfp4_tiles<<<kFillBlocks, kFillThreads>>>(up.ptr, up.n, 1);
    fill_mxfp4_tiles<<<kFillBlocks, kFillThreads>>>(down.ptr, down.n, 2);
    fill_bf16<<<kFillBlocks, kFillThreads>>>(b1.ptr, b1.n, 3);
    fill_bf16<<<kFillBlocks, kFillThreads>>>(b2.ptr, b2.n, 4);
    fill_bf16<<<kFillBlocks, kFillThreads>>>(x.ptr, x.n, 5);
    fill_bf16<<<kFillBlocks, kFillThreads>>>(ab.ptr, ab.n, 6);
    rows = cuda::ExpertRows{.seg = seg.ptr, .active = active.ptr, .active_max = int(r.active.size()),
                            .row_live = row_token.ptr, .x_rows = row_token.ptr, .rows = P,
                            .rows_per_expert = rows_per_expert(a)};
  }
  // fill_mxfp4_tiles's scales, as the loader finds for trained experts: no second multiply.
  cuda::Mxfp4ExpertsView view(bool first, int c) const {
    return first ? cuda::Mxfp4ExpertsView{up.ptr + up_bytes * E * c, b1.ptr, E, 2 * I, H, kFillScalesBig}
                 : cuda::Mxfp4ExpertsView{down.ptr + down_bytes * E * c, b2.ptr, E, H, I, kFillScalesBig};
  }
};

MoeGemmTiming time_moe_gemm_mxfp4(const MoeGemmShape& a, int reps) {
  const Mxfp4TimingInputs in(a);
  cuda::ExpertRows second = in.rows;
  second.x_rows = nullptr;
  const double s = mean_seconds(reps, in.copies, [&](int c) {
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view(true, c), in.x.ptr, in.rows, in.t1.ptr, nullptr);
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view(false, c), in.ab.ptr, second, in.y.ptr, nullptr);
  });
  return {s, in.touched, in.r.touched};
}

MoeGemmTiming time_moe_gemm_mxfp4_wgmma(const MoeGemmShape& a, int reps) {
  const Mxfp4TimingInputs in(a);
  DeviceArray<cuda::bf16> xs(size_t(in.P) * mxfp4_act_cols(in.H));  // the first GEMM's rows, wgmma layout
  const double s = mean_seconds(reps, in.copies, [&](int c) {
    cuda::mxfp4_rows_to_wgmma_layout(in.x.ptr, in.row_token.ptr, nullptr, in.P, in.H, xs.ptr, nullptr);
    cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(in.view(true, c), xs.ptr, in.rows, in.t1.ptr, nullptr);
    cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(in.view(false, c), in.ab.ptr, in.rows, in.y.ptr, nullptr);
  });
  return {s, in.touched, in.r.touched};
}

MoeGemmTiming time_moe_gemm_fp8(const MoeGemmShape& a, int reps) {
  using bf16 = cuda::bf16;
  const int E = a.experts, H = a.hidden, I = a.intermediate, P = a.batch * a.top_k;
  const Routing r = route(a);
  // Codes [E][N][K], block scales [E][round4(N/128)][round4(K/128)] (the model's layout).
  const int s1 = fp8::round4(fp8::blocks(H)), s2 = fp8::round4(fp8::blocks(I));
  const size_t up_codes = size_t(2 * I) * H, down_codes = size_t(H) * I;
  const size_t up_scales = size_t(fp8::round4(fp8::blocks(2 * I))) * s1, down_scales = size_t(fp8::round4(fp8::blocks(H))) * s2;
  const double touched = double(r.touched) * double(up_codes + down_codes + 4 * (up_scales + down_scales));
  const int copies = copies_for(touched);
  DeviceArray<uint8_t> up(up_codes * E * copies), down(down_codes * E * copies);
  fill_fp8_codes<<<kFillBlocks, kFillThreads>>>(up.ptr, up.n, 1);
  fill_fp8_codes<<<kFillBlocks, kFillThreads>>>(down.ptr, down.n, 2);
  DeviceArray<float> ws1(up_scales * E * copies), ws2(down_scales * E * copies);
  fill_f32<<<kFillBlocks, kFillThreads>>>(ws1.ptr, ws1.n, 1e-2f);
  fill_f32<<<kFillBlocks, kFillThreads>>>(ws2.ptr, ws2.n, 1e-2f);
  DeviceArray<bf16> b1(size_t(E) * 2 * I), b2(size_t(E) * H);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(b1.ptr, b1.n, 3);
  fill_bf16<<<kFillBlocks, kFillThreads>>>(b2.ptr, b2.n, 4);
  // Activations: each token's quantized row for the first GEMM, the sorted rows for the second
  // (both as dense matrices read through x_rows).
  const int ld1 = fp8::round4(a.batch), ld2 = fp8::round4(P);
  DeviceArray<uint8_t> xq(size_t(a.batch) * H), aq(size_t(P) * I);
  fill_fp8_codes<<<kFillBlocks, kFillThreads>>>(xq.ptr, xq.n, 5);
  fill_fp8_codes<<<kFillBlocks, kFillThreads>>>(aq.ptr, aq.n, 6);
  DeviceArray<float> xs(size_t(fp8::blocks(H)) * ld1), as(size_t(fp8::blocks(I)) * ld2);
  fill_f32<<<kFillBlocks, kFillThreads>>>(xs.ptr, xs.n, 1e-2f);
  fill_f32<<<kFillBlocks, kFillThreads>>>(as.ptr, as.n, 1e-2f);
  DeviceArray<float> t1(size_t(P) * 2 * I), y(size_t(P) * H);
  std::vector<int32_t> identity(P);
  std::iota(identity.begin(), identity.end(), 0);
  DeviceArray<int32_t> seg = cuda::upload(r.seg.data(), r.seg.size()), active = cuda::upload(r.active.data(), r.active.size());
  DeviceArray<int32_t> row_token = cuda::upload(r.row_token.data(), r.row_token.size()), ident = cuda::upload(identity.data(), identity.size());
  cuda::Fp8ExpertRows first{.seg = seg.ptr, .experts = E, .rows = P, .active = active.ptr, .active_max = int(r.active.size()),
                            .x_rows = row_token.ptr, .x_ld = ld1};
  if (a.batch == 1) first.row_live = row_token.ptr, first.rows_max = 1;  // as the model's batch-1 step
  cuda::Fp8ExpertRows second = first;
  second.x_rows = ident.ptr, second.x_ld = ld2;
  const int hint = rows_per_expert(a);
  const double s = mean_seconds(reps, copies, [&](int c) {
    cuda::m_grouped_fp8_gemm_contiguous(up.ptr + up_codes * E * c, ws1.ptr + up_scales * E * c, s1, b1.ptr, xq.ptr, xs.ptr,
                                        first, t1.ptr, 2 * I, H, hint, nullptr);
    cuda::m_grouped_fp8_gemm_contiguous(down.ptr + down_codes * E * c, ws2.ptr + down_scales * E * c, s2, b2.ptr, aq.ptr,
                                        as.ptr, second, y.ptr, H, I, hint, nullptr);
  });
  return {s, touched, r.touched};
}

}  // namespace osprey
