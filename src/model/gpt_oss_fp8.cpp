#include "model/gpt_oss_fp8.h"

#include <functional>
#include <optional>

#include "core/progress.h"
#include "formats/mxfp4.h"

namespace osprey {

namespace {

// One unit of conversion work: row blocks [rb0, rb1) of matrix e of m.
struct Task {
  fp8::Matrix* m;
  int e, rb0, rb1;
  std::function<void(int, float*)> row;
  size_t elements() const { return size_t(std::min(rb1 * fp8::kBlock, m->rows) - rb0 * fp8::kBlock) * m->cols; }
};

void add_tasks(std::vector<Task>& tasks, fp8::Matrix& m, int e, std::function<void(int, float*)> row) {
  constexpr int kBlocksPerTask = 8;
  for (int rb = 0; rb < fp8::blocks(m.rows); rb += kBlocksPerTask)
    tasks.push_back({&m, e, rb, std::min(fp8::blocks(m.rows), rb + kBlocksPerTask), row});
}

void add_bf16(std::vector<Task>& tasks, fp8::Matrix& m, const Bf16Matrix& src) {
  m.allocate(1, src.rows, src.cols);
  add_tasks(tasks, m, 0, [src](int r, float* out) {
    for (int c = 0; c < src.cols; ++c) out[c] = bf16_to_f32(src.w[size_t(r) * src.cols + c]);
  });
}

void add_mxfp4(std::vector<Task>& tasks, fp8::Matrix& m, const Mxfp4Experts& src) {
  m.allocate(src.experts, src.rows, src.cols);
  for (int e = 0; e < src.experts; ++e)
    add_tasks(tasks, m, e, [src, e](int r, float* out) {
      const size_t g = size_t(src.cols) / kMxfp4Group;
      mxfp4_decode_row(src.expert_blocks(e) + size_t(r) * g * kMxfp4GroupBytes, src.expert_scales(e) + size_t(r) * g,
                       src.cols, out);
    });
}

}  // namespace

GptOssFp8Weights GptOssFp8Weights::convert(const GptOssWeights& w, bool show_progress) {
  GptOssFp8Weights out;
  out.layers.resize(w.layers.size());
  std::vector<Task> tasks;
  add_bf16(tasks, out.unembed, w.unembed);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const GptOssLayerWeights& L = w.layers[l];
    GptOssFp8Layer& d = out.layers[l];
    add_bf16(tasks, d.q, L.q);
    add_bf16(tasks, d.k, L.k);
    add_bf16(tasks, d.v, L.v);
    add_bf16(tasks, d.o, L.o);
    add_mxfp4(tasks, d.mlp1, L.mlp1);
    add_mxfp4(tasks, d.mlp2, L.mlp2);
  }
  size_t total = 0;
  for (const Task& t : tasks) total += t.elements();
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("converting weights to fp8", total);
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < tasks.size(); ++i) {
    fp8::quantize_row_blocks(*tasks[i].m, tasks[i].e, tasks[i].rb0, tasks[i].rb1, tasks[i].row);
    if (progress) {
#pragma omp critical
      progress->advance(tasks[i].elements());
    }
  }
  if (progress) progress->finish();
  return out;
}

}  // namespace osprey
