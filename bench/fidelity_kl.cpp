// Logits of a path against a reference without numpy (the CPU machine has none): for each pair of
// .npy files (float32 [positions][vocab], as `osprey logits --out` writes them), the per-position
// KL(reference || path), argmax agreement and relative error, summed over all pairs.
// Usage: fidelity_kl [--raw] REF1.npy PATH1.npy [REF2.npy PATH2.npy ...]
//   prints positions, mean relative error, argmax agreement, mean and worst KL; with --raw one line
//   "positions kl_sum argmax_agree kl_worst rel_sum" (for sums over many calls, bench/fidelity_cpu.sh).
// Built with the project (CMake target osprey_fidelity_kl, build/osprey_fidelity_kl).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "core/npy.h"

int main(int argc, char** argv) {
  int first = 1;
  const bool raw = argc > 1 && std::strcmp(argv[1], "--raw") == 0;
  if (raw) first = 2;
  if (argc - first < 2 || (argc - first) % 2) {
    std::fprintf(stderr, "usage: fidelity_kl [--raw] REF.npy PATH.npy [REF.npy PATH.npy ...]\n");
    return 2;
  }
  double kl_sum = 0, kl_worst = 0, rel_sum = 0;
  size_t n = 0, agree = 0;
  try {
    for (int a = first; a + 1 < argc; a += 2) {
      const osprey::NpyF32 ref = osprey::read_npy_f32(argv[a]), path = osprey::read_npy_f32(argv[a + 1]);
      if (ref.shape.size() != 2) throw std::runtime_error(std::string(argv[a]) + ": expected a [positions][vocab] matrix");
      if (path.shape != ref.shape) throw std::runtime_error(std::string(argv[a + 1]) + ": shape differs from the reference's");
      const size_t r1 = size_t(ref.shape[0]), c1 = size_t(ref.shape[1]);
      for (size_t r = 0; r < r1; ++r) {
        const float *p = &ref.data[r * c1], *q = &path.data[r * c1];
        const size_t ap = size_t(std::max_element(p, p + c1) - p), aq = size_t(std::max_element(q, q + c1) - q);
        double sp = 0, sq = 0, d2 = 0, n2 = 0;
        for (size_t i = 0; i < c1; ++i) {
          sp += std::exp(double(p[i]) - p[ap]), sq += std::exp(double(q[i]) - q[aq]);
          d2 += double(p[i] - q[i]) * (p[i] - q[i]), n2 += double(p[i]) * p[i];
        }
        const double lzp = p[ap] + std::log(sp), lzq = q[aq] + std::log(sq);
        double kl = 0;
        for (size_t i = 0; i < c1; ++i) {
          const double lp = p[i] - lzp, lq = q[i] - lzq;
          kl += std::exp(lp) * (lp - lq);
        }
        kl_sum += kl, kl_worst = std::max(kl_worst, kl), rel_sum += std::sqrt(d2 / n2), agree += ap == aq, ++n;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fidelity_kl: %s\n", e.what());
    return 1;
  }
  if (raw) std::printf("%zu %.17g %zu %.17g %.17g\n", n, kl_sum, agree, kl_worst, rel_sum);
  else
    std::printf("positions %zu, relative error mean %.3e, argmax %.2f%%, mean KL %.3e, worst KL %.3e\n", n, rel_sum / n,
                100.0 * agree / n, kl_sum / n, kl_worst);
  return 0;
}
