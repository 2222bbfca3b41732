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

Result<std::vector<std::vector<float>>> embed_inputs(
    Context& ctx, const std::vector<std::vector<int32_t>>& inputs, Pooling pooling, int normalize) {
  const int64_t n_ctx = ctx.params().n_ctx;
  const auto n_seq = static_cast<size_t>(ctx.params().n_seq);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return invalid_argument("input " + std::to_string(i) + " has no tokens");
    if (static_cast<int64_t>(inputs[i].size()) > n_ctx) {
      return invalid_argument("input " + std::to_string(i) + " has " +
                              std::to_string(inputs[i].size()) + " tokens; the context holds " +
                              std::to_string(n_ctx));
    }
  }
  const int64_t n_embd = ctx.model().hparams().n_embd;
  const bool one_row = pooling == Pooling::kCls || pooling == Pooling::kLast;
  std::vector<std::vector<float>> out;
  for (size_t first = 0; first < inputs.size();) {
    size_t end = first;
    int64_t cells = 0;
    while (end < inputs.size() && end - first < n_seq &&
           cells + static_cast<int64_t>(inputs[end].size()) <= n_ctx) {
      cells += static_cast<int64_t>(inputs[end].size());
      ++end;
    }
    ctx.clear();
    Batch batch;
    for (size_t s = first; s < end; ++s) {
      const std::vector<int32_t>& ids = inputs[s];
      for (size_t i = 0; i < ids.size(); ++i) {
        const bool row = !one_row || (pooling == Pooling::kCls ? i == 0 : i + 1 == ids.size());
        batch.add(ids[i], static_cast<int32_t>(i), static_cast<int32_t>(s - first), row);
      }
    }
    const Status s = ctx.decode(batch);
    ctx.clear();
    if (!s.is_ok()) return s;
    int64_t row = 0;
    for (size_t k = first; k < end; ++k) {
      // cls and last asked for their one row only.
      const int64_t rows = one_row ? 1 : static_cast<int64_t>(inputs[k].size());
      std::vector<float> v = pool_rows(ctx.embeddings(row), rows, n_embd,
                                       pooling == Pooling::kMean ? Pooling::kMean : Pooling::kNone);
      row += rows;
      normalize_embeddings(v, n_embd, normalize);
      out.push_back(std::move(v));
    }
    first = end;
  }
  return out;
}

}  // namespace strata
