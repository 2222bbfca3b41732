#include "engine/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"

namespace strata {

namespace {

struct PoolingName {
  Pooling pooling;
  const char* name;
};
constexpr PoolingName kPoolingNames[] = {{Pooling::kNone, "none"},
                                         {Pooling::kMean, "mean"},
                                         {Pooling::kCls, "cls"},
                                         {Pooling::kLast, "last"}};

}  // namespace

const char* pooling_name(Pooling p) {
  for (const PoolingName& n : kPoolingNames) {
    if (n.pooling == p) return n.name;
  }
  return "?";
}

std::optional<Pooling> pooling_from_name(std::string_view name) {
  for (const PoolingName& n : kPoolingNames) {
    if (name == n.name) return n.pooling;
  }
  return std::nullopt;
}

Result<Pooling> model_pooling(const Model& model) {
  const std::string key = model.hparams().arch_name + ".pooling_type";
  if (model.file().find(key) == nullptr) return Pooling::kNone;
  STRATA_ASSIGN_OR_RETURN(uint64_t v, model.file().get_uint(key));
  if (v > 3) {
    return unsupported(key + " = " + std::to_string(v) +
                       (v == 4 ? ": rank pooling (a classifier head) is not supported"
                               : ": not a pooling type (0 none, 1 mean, 2 cls, 3 last)"));
  }
  return static_cast<Pooling>(v);
}

std::vector<float> pool_rows(const float* rows, int64_t n_tokens, int64_t n_embd, Pooling p) {
  STRATA_CHECK(n_tokens > 0 && n_embd > 0, "pool_rows: no rows");
  const auto row = [&](int64_t t) { return rows + t * n_embd; };
  switch (p) {
    case Pooling::kNone:
      return std::vector<float>(rows, rows + n_tokens * n_embd);
    case Pooling::kCls:
      return std::vector<float>(row(0), row(0) + n_embd);
    case Pooling::kLast:
      return std::vector<float>(row(n_tokens - 1), row(n_tokens - 1) + n_embd);
    case Pooling::kMean:
      break;
  }
  std::vector<double> sum(static_cast<size_t>(n_embd), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < n_embd; ++i) sum[i] += row(t)[i];
  }
  std::vector<float> out(static_cast<size_t>(n_embd));
  for (int64_t i = 0; i < n_embd; ++i) {
    out[i] = static_cast<float>(sum[i] / static_cast<double>(n_tokens));
  }
  return out;
}

void normalize_embeddings(std::vector<float>& v, int64_t n, int norm) {
  STRATA_CHECK(n > 0 && v.size() % static_cast<size_t>(n) == 0, "normalize: partial vector");
  if (norm < 0) return;
  for (size_t at = 0; at < v.size(); at += static_cast<size_t>(n)) {
    float* x = v.data() + at;
    double sum = 0.0;
    if (norm == 0) {
      for (int64_t i = 0; i < n; ++i) sum = std::max(sum, static_cast<double>(std::fabs(x[i])));
      sum /= 32760.0;
    } else if (norm == 2) {
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
      sum = std::sqrt(sum);
    } else {
      for (int64_t i = 0; i < n; ++i) sum += std::pow(std::fabs(static_cast<double>(x[i])), norm);
      sum = std::pow(sum, 1.0 / norm);
    }
    const double scale = sum > 0.0 ? 1.0 / sum : 0.0;
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * scale);
  }
}

}  // namespace strata
