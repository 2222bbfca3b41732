#include "core/sample.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

// The float arithmetic below is part of the sampler's output (which token a uniform selects):
// it must not be fused into FMAs differently by different compilers. GCC keeps ISO C++
// contraction off by default (and the build says -ffp-contract=off); clang needs telling.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace strata {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}

// Written so that NaN fails: every check is "value is inside", negated.
Status check_float_range(const char* name, float v, float lo, float hi, const char* note = "") {
  if (std::isfinite(v) && v >= lo && v <= hi) return Status::ok();
  return invalid_argument(std::string("sampler: ") + name + " = " + fmt_float(v) +
                          ": must be in [" + fmt_float(lo) + ", " + fmt_float(hi) + "]" + note);
}

Status check_int_range(const char* name, int64_t v, int64_t lo, int64_t hi, const char* note) {
  if (v >= lo && v <= hi) return Status::ok();
  return invalid_argument(std::string("sampler: ") + name + " = " + std::to_string(v) +
                          ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                          note);
}

// Range reduction x = k ln2 + r with ln2 split in two (Cody and Waite) so that k * kLn2Hi is
// exact, then a Taylor polynomial to r^7: for |r| <= ln2 / 2 its truncation error is below
// 4e-9 relative, under the float rounding of the steps. The clamp and the zero for tiny
// results are integer selects on the bits: a float comparison could trap, so GCC would not
// if-convert it and the loops calling this would not vectorise.
inline float exp_inline(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // 355/512: 9 significant bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // For x <= 0 a larger bit pattern is a more negative number; -inf and the negative NaNs
  // compare above -87 too, the positive NaNs are caught apart. Below -87 the result would be
  // near-denormal, and 0 is as good for a probability.
  constexpr uint32_t kLimit = std::bit_cast<uint32_t>(-87.0f);
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const bool tiny = bits > kLimit || (bits & 0x7fffffffu) > 0x7f800000u;  // or NaN
  x = std::bit_cast<float>(tiny ? kLimit : bits);
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k from its exponent bits: k is in [-126, 0] for x in [-87, 0].
  const uint32_t scale = tiny ? 0u : static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(scale);
}

constexpr float kMaxFloat = std::numeric_limits<float>::max();

// NaN would break the strict order the sorts rely on; +inf would make exp(l - max) NaN.
float sanitise(float l) {
  if (l != l) return kNegInf;
  return l > kMaxFloat ? kMaxFloat : l;
}

// Maps a non-NaN float to an int32 with the same order (negative floats have their magnitude
// bits flipped).
int32_t order_key(float x) {
  const int32_t b = std::bit_cast<int32_t>(x);
  return b ^ ((b >> 31) & 0x7fffffff);
}
float from_order_key(int32_t k) { return std::bit_cast<float>(k ^ ((k >> 31) & 0x7fffffff)); }

// Fills out[i] = exp(x(i)) for x(i) <= 0 and returns their sum, accumulated in double over
// eight lanes in a fixed order: the same on every platform, and the loops vectorise.
template <typename X>
double exp_shifted(size_t n, const X& x, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = exp_inline(x(i));
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) lane[j] += static_cast<double>(out[i + j]);
  }
  for (; i < n; ++i) lane[i % 8] += static_cast<double>(out[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// A strict total order (ties broken by id): nth_element, heaps and sort then give the same
// result with every standard library, which the cross-platform determinism needs.
bool precedes(const auto& a, const auto& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Past this share of the vocab a heap costs more than nth_element.
constexpr size_t kTopKHeapDivisor = 16;

}  // namespace

float exp_nonpositive(float x) { return exp_inline(x); }

Status sample_settings_validate(const SampleSettings& s) {
  if (!(std::isfinite(s.temperature) && s.temperature >= 0.0f)) {
    return invalid_argument("sampler: temperature = " + fmt_float(s.temperature) +
                            ": must be a finite number >= 0 (0 is greedy)");
  }
  STRATA_RETURN_IF_ERROR(check_int_range("top_k", s.top_k, -1, std::numeric_limits<int32_t>::max(),
                                         " (0 or -1 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("top_p", s.top_p, 0.0f, 1.0f, " (1 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("min_p", s.min_p, 0.0f, 1.0f, " (0 disables)"));
  if (!(std::isfinite(s.repeat_penalty) && s.repeat_penalty > 0.0f)) {
    return invalid_argument("sampler: repeat_penalty = " + fmt_float(s.repeat_penalty) +
                            ": must be a finite number > 0 (1 disables)");
  }
  // OpenAI's range for both.
  STRATA_RETURN_IF_ERROR(check_float_range("presence_penalty", s.presence_penalty, -2.0f, 2.0f));
  STRATA_RETURN_IF_ERROR(check_float_range("frequency_penalty", s.frequency_penalty, -2.0f, 2.0f));
  return Status::ok();
}

// --- The chain ---------------------------------------------------------------------------------

int32_t RowSampler::sample(const float* logits, int32_t n_vocab, const SampleSettings& settings,
                           std::span<const SampleBias> bias,
                           std::span<const SamplePenalty> penalties, float uniform,
                           const uint8_t* allowed, const SampleExtra* extra) {
  settings_ = settings;
  penalised_.resize(static_cast<size_t>(n_vocab));
  penalise(logits, bias, penalties, extra != nullptr ? extra->dry : std::span<const SampleBias>(),
           allowed);
  if (settings_.temperature <= 0.0f) return argmax_;
  if (extra != nullptr && extra->chain != nullptr) return sample_extended(*extra, uniform);
  truncate();
  return draw(uniform);
}

// llama.cpp's penalties: for each distinct token of the window, a positive logit is divided by
// repeat_penalty and a non-positive one multiplied (so both move down for a penalty > 1), then
// presence is subtracted once and frequency once per occurrence.
void RowSampler::penalise(const float* logits, std::span<const SampleBias> bias,
                          std::span<const SamplePenalty> penalties, std::span<const SampleBias> dry,
                          const uint8_t* allowed) {
  const size_t n = penalised_.size();
  float* pen = penalised_.data();
  for (size_t i = 0; i < n; ++i) pen[i] = sanitise(logits[i]);
  if (!bias.empty()) {
    // As if the biases were added to the logits first: the raw logit plus each bias in order,
    // then sanitised (a NaN logit stays banned, a bias can overflow).
    for (const SampleBias& b : bias) pen[b.token] = logits[b.token];
    for (const SampleBias& b : bias) pen[b.token] += b.bias;
    for (const SampleBias& b : bias) pen[b.token] = sanitise(pen[b.token]);
  }
  if (settings_.penalties_active()) {
    for (const SamplePenalty& p : penalties) {
      float& l = pen[static_cast<size_t>(p.token)];
      l = l <= 0.0f ? l * settings_.repeat_penalty : l / settings_.repeat_penalty;
      l -= static_cast<float>(p.count) * settings_.frequency_penalty + settings_.presence_penalty;
      l = sanitise(l);  // a repeat_penalty below 1 can overflow
    }
  }
  for (const SampleBias& d : dry) {
    float& l = pen[static_cast<size_t>(d.token)];
    l = sanitise(l - d.bias);
  }
  if (allowed != nullptr) {
    for (size_t i = 0; i < n; ++i) pen[i] = allowed[i] != 0 ? pen[i] : kNegInf;
  }

  // The maximum through order-preserving integer keys: an integer max reduction vectorises, a
  // float one (which may trap) does not.
  int32_t max_key = std::numeric_limits<int32_t>::min();
  for (size_t i = 0; i < n; ++i) {
    const int32_t key = order_key(pen[i]);
    max_key = key > max_key ? key : max_key;
  }
  float max = from_order_key(max_key);
  if (max == kNegInf) {
    // No finite logit at all (a broken model): treat the row as uniform rather than divide
    // by zero below.
    std::fill(penalised_.begin(), penalised_.end(), 0.0f);
    max = 0.0f;
  }
  max_logit_ = max;
  argmax_ = static_cast<int32_t>(std::find(pen, pen + n, max) - pen);  // first on ties
  // The softmax normaliser costs an exp per token: computed only when a log-probability or a
  // top_p over the whole vocab needs it.
  have_sum_exp_ = false;
}

float RowSampler::log_z() const {
  if (!have_sum_exp_) {
    const float* pen = penalised_.data();
    const float max = max_logit_;
    exp_.resize(penalised_.size());
    sum_exp_ = exp_shifted(
        penalised_.size(), [pen, max](size_t i) { return pen[i] - max; }, exp_.data());
    have_sum_exp_ = true;
  }
  return max_logit_ + static_cast<float>(std::log(sum_exp_));
}

float RowSampler::logprob(int32_t token) const {
  return penalised_[static_cast<size_t>(token)] - log_z();
}

void RowSampler::top(int32_t n_wanted, std::vector<TokenLogprob>& out) const {
  out.clear();
  const size_t n = std::min(static_cast<size_t>(std::max(n_wanted, 0)), penalised_.size());
  if (n == 0) return;
  // Insertion into a short sorted list: most tokens fail the first comparison, so this is one
  // pass over the vocab for n <= kSampleMaxNProbs.
  std::vector<Candidate> best;
  best.reserve(n + 1);
  for (size_t i = 0; i < penalised_.size(); ++i) {
    const float l = penalised_[i];
    if (best.size() == n && !(l > best.back().logit)) continue;  // equal: lower id already won
    auto pos = std::upper_bound(best.begin(), best.end(), l,
                                [](float v, const Candidate& c) { return v > c.logit; });
    best.insert(pos, Candidate{l, static_cast<int32_t>(i)});
    if (best.size() > n) best.pop_back();
  }
  const float z = log_z();
  for (const Candidate& c : best) out.push_back(TokenLogprob{c.id, c.logit - z});
}

void RowSampler::select_top_k(size_t k) {
  const size_t n_vocab = penalised_.size();
  const float* pen = penalised_.data();
  auto cmp = [](const Candidate& a, const Candidate& b) { return precedes(a, b); };
  candidates_.clear();
  if (k * kTopKHeapDivisor >= n_vocab) {
    candidates_.resize(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i)
      candidates_[i] = Candidate{pen[i], static_cast<int32_t>(i)};
    std::nth_element(candidates_.begin(), candidates_.begin() + k, candidates_.end(), cmp);
    candidates_.resize(k);
  } else {
    // A heap of the best k with the worst on top: almost every token fails the first
    // comparison, so this is one pass over the vocab.
    for (size_t i = 0; i < k; ++i)
      candidates_.push_back(Candidate{pen[i], static_cast<int32_t>(i)});
    std::make_heap(candidates_.begin(), candidates_.end(), cmp);
    for (size_t i = k; i < n_vocab; ++i) {
      // Ids grow, so a tie with the worst kept token loses: only a larger logit gets in.
      if (!(pen[i] > candidates_.front().logit)) continue;
      std::pop_heap(candidates_.begin(), candidates_.end(), cmp);
      candidates_.back() = Candidate{pen[i], static_cast<int32_t>(i)};
      std::push_heap(candidates_.begin(), candidates_.end(), cmp);
    }
  }
  std::sort(candidates_.begin(), candidates_.end(), cmp);
}

void RowSampler::truncate() {
  const size_t n_vocab = penalised_.size();
  const SampleSettings& p = settings_;
  const bool use_top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < n_vocab;
  const bool use_top_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  // min_p keeps p_i >= min_p * p_max, i.e. logit >= max + log(min_p): no softmax needed.
  const float min_p_threshold = use_min_p ? max_logit_ + std::log(p.min_p) : kNegInf;
  if (use_top_k) {
    select_top_k(static_cast<size_t>(p.top_k));
    size_t keep = candidates_.size();
    if (use_top_p) {
      // top_p renormalises over what top_k kept, as llama.cpp's chain does.
      weights_.resize(keep);
      const double z = exp_shifted(
          keep, [this](size_t i) { return candidates_[i].logit - max_logit_; }, weights_.data());
      double cum = 0.0;
      for (size_t i = 0; i < keep; ++i) {
        cum += static_cast<double>(weights_[i]) / z;
        if (cum >= p.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    while (keep > 1 && candidates_[keep - 1].logit < min_p_threshold) --keep;
    candidates_.resize(keep);
    return;
  }

  // No top_k: never sort the whole vocab. min_p and top_p each keep a prefix of the sorted
  // order, so filtering by min_p first and then cutting the top_p prefix (with the whole
  // vocab's normaliser, as top_p would have seen it) keeps exactly the chain's set.
  candidates_.clear();
  const float* pen = penalised_.data();
  for (size_t i = 0; i < n_vocab; ++i) {
    if (pen[i] >= min_p_threshold)
      candidates_.push_back(Candidate{pen[i], static_cast<int32_t>(i)});
  }
  if (!use_top_p) return;  // unsorted, in id order: still deterministic for the draw

  // Sort in growing chunks, each one the best of what is left, until the mass reaches top_p:
  // a peaked distribution needs only the first chunk.
  log_z();  // fills exp_ and sum_exp_: top_p normalises over the whole vocab
  const float* e = exp_.data();
  auto cmp = [](const Candidate& a, const Candidate& b) { return precedes(a, b); };
  const auto begin = candidates_.begin();
  const size_t n = candidates_.size();
  size_t sorted = 0;
  size_t chunk = 64;
  double cum = 0.0;
  while (sorted < n) {
    const size_t end = std::min(n, sorted + chunk);
    if (end < n) std::nth_element(begin + sorted, begin + end, candidates_.end(), cmp);
    std::sort(begin + sorted, begin + end, cmp);
    for (size_t i = sorted; i < end; ++i) {
      cum += static_cast<double>(e[candidates_[i].id]) / sum_exp_;
      if (cum >= p.top_p) {
        candidates_.resize(i + 1);
        return;
      }
    }
    sorted = end;
    chunk *= 4;
  }
}

int32_t RowSampler::draw(float uniform) {
  // Every truncation keeps the most likely token, so max_logit_ is the candidates' maximum.
  const size_t n = candidates_.size();
  weights_.resize(n);
  const float t = settings_.temperature;
  const double total = exp_shifted(
      n, [&](size_t i) { return (candidates_[i].logit - max_logit_) / t; }, weights_.data());
  const double target = static_cast<double>(uniform) * total;
  double acc = 0.0;
  int32_t last_positive = candidates_.front().id;
  for (size_t i = 0; i < n; ++i) {
    if (weights_[i] <= 0.0f) continue;
    acc += static_cast<double>(weights_[i]);
    last_positive = candidates_[i].id;
    if (acc > target) return candidates_[i].id;
  }
  return last_positive;  // rounding left target at the very top
}

// --- The extended chain ------------------------------------------------------------------------

namespace {

struct StageName {
  const char* name;
  ChainStage stage;
};
// llama.cpp's names first (what chain_stage_name gives), then its other spellings and its
// one-letter codes (common_sampler_types_from_chars).
constexpr StageName kStageNames[] = {
    {"top_n_sigma", ChainStage::kTopNSigma},
    {"top_k", ChainStage::kTopK},
    {"typ_p", ChainStage::kTypicalP},
    {"top_p", ChainStage::kTopP},
    {"min_p", ChainStage::kMinP},
    {"xtc", ChainStage::kXtc},
    {"temperature", ChainStage::kTemperature},
    {"top-n-sigma", ChainStage::kTopNSigma},
    {"top-k", ChainStage::kTopK},
    {"typ-p", ChainStage::kTypicalP},
    {"typical_p", ChainStage::kTypicalP},
    {"typical-p", ChainStage::kTypicalP},
    {"typical", ChainStage::kTypicalP},
    {"top-p", ChainStage::kTopP},
    {"nucleus", ChainStage::kTopP},
    {"min-p", ChainStage::kMinP},
    {"temp", ChainStage::kTemperature},
    {"s", ChainStage::kTopNSigma},
    {"k", ChainStage::kTopK},
    {"y", ChainStage::kTypicalP},
    {"p", ChainStage::kTopP},
    {"m", ChainStage::kMinP},
    {"x", ChainStage::kXtc},
    {"t", ChainStage::kTemperature},
};

}  // namespace

bool SampleChain::extended() const {
  if (top_n_sigma > 0.0f || typical_p < 1.0f || xtc_active() || min_keep > 1 || mirostat != 0 ||
      dynatemp_range > 0.0f || adaptive_active()) {
    return true;
  }
  // The base chain is top_k, top_p, min_p, temperature in this order; the disabled stages
  // (top-n-sigma, typical, XTC) may sit anywhere.
  static const std::vector<ChainStage> kBase = {ChainStage::kTopK, ChainStage::kTopP,
                                                ChainStage::kMinP, ChainStage::kTemperature};
  std::vector<ChainStage> active;
  for (ChainStage s : order) {
    if (s == ChainStage::kTopK || s == ChainStage::kTopP || s == ChainStage::kMinP ||
        s == ChainStage::kTemperature) {
      active.push_back(s);
    }
  }
  return active != kBase;
}

Status sample_chain_validate(const SampleChain& c) {
  if (!std::isfinite(c.top_n_sigma)) {
    return invalid_argument("sampler: top_n_sigma = " + fmt_float(c.top_n_sigma) +
                            ": must be a finite number (<= 0 disables)");
  }
  STRATA_RETURN_IF_ERROR(check_float_range("typical_p", c.typical_p, 0.0f, 1.0f, " (1 disables)"));
  STRATA_RETURN_IF_ERROR(
      check_float_range("xtc_probability", c.xtc_probability, 0.0f, 1.0f, " (0 disables)"));
  STRATA_RETURN_IF_ERROR(
      check_float_range("xtc_threshold", c.xtc_threshold, 0.0f, 1.0f, " (above 0.5 disables)"));
  STRATA_RETURN_IF_ERROR(check_int_range("min_keep", c.min_keep, 0, 1 << 20, ""));
  STRATA_RETURN_IF_ERROR(check_int_range("mirostat", c.mirostat, 0, 2, " (0 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("mirostat_tau", c.mirostat_tau, 0.0f, 100.0f));
  STRATA_RETURN_IF_ERROR(check_float_range("mirostat_eta", c.mirostat_eta, 0.0f, 10.0f));
  STRATA_RETURN_IF_ERROR(
      check_float_range("dynatemp_range", c.dynatemp_range, -1e6f, 1e6f, " (<= 0 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("dynatemp_exponent", c.dynatemp_exponent, 0.0f, 1e6f));
  if (!std::isfinite(c.adaptive_target) || c.adaptive_target > 1.0f) {
    return invalid_argument("sampler: adaptive_target = " + fmt_float(c.adaptive_target) +
                            ": must be in [0, 1] (negative disables)");
  }
  STRATA_RETURN_IF_ERROR(check_float_range("adaptive_decay", c.adaptive_decay, 0.0f, 0.99f));
  if (c.order.size() > kChainMaxStages) {
    return invalid_argument("sampler: samplers: " + std::to_string(c.order.size()) +
                            " stages, more than " + std::to_string(kChainMaxStages));
  }
  return Status::ok();
}

const char* chain_stage_name(ChainStage s) {
  for (const StageName& n : kStageNames) {
    if (n.stage == s) return n.name;
  }
  return "?";
}

std::optional<ChainStage> chain_stage_from_name(std::string_view name) {
  for (const StageName& n : kStageNames) {
    if (name == n.name) return n.stage;
  }
  return std::nullopt;
}

int32_t RowSampler::sample_extended(const SampleExtra& extra, float uniform) {
  const SampleChain& c = *extra.chain;
  min_keep_ = static_cast<size_t>(std::max(c.min_keep, 1));
  // The candidates start as every token, not yet listed: a top_k first (the default order with
  // top-n-sigma off) picks its k from the logits in one pass instead.
  whole_ = true;
  sorted_ = false;
  if (c.mirostat != 0) return mirostat(c, uniform, *extra.mirostat_mu);
  for (ChainStage stage : c.order) {
    switch (stage) {
      case ChainStage::kTopNSigma:
        stage_top_n_sigma(c.top_n_sigma);
        break;
      case ChainStage::kTopK:
        stage_top_k(settings_.top_k);
        break;
      case ChainStage::kTypicalP:
        stage_typical(c.typical_p);
        break;
      case ChainStage::kTopP:
        stage_top_p(settings_.top_p);
        break;
      case ChainStage::kMinP:
        stage_min_p(settings_.min_p);
        break;
      case ChainStage::kXtc:
        stage_xtc(c, extra.xtc_uniform);
        break;
      case ChainStage::kTemperature:
        stage_temperature(c);
        break;
    }
  }
  all_candidates();
  if (c.adaptive_active()) return adaptive_p(c, uniform, *extra.adaptive);
  return candidates_[draw_candidates(uniform)].id;
}

AdaptivePState AdaptivePState::primed(const SampleChain& c) {
  AdaptivePState s;
  if (c.adaptive_target < 0.0f) return s;
  s.weighted_sum = c.adaptive_target / (1.0f - c.adaptive_decay);
  s.total_weight = 1.0f / (1.0f - c.adaptive_decay);
  return s;
}

// llama.cpp's adaptive-p over what the stages left: the candidates' probabilities at their
// logits, each turned into a logit by its distance from the adapted target, the draw under the
// softmax of those, and the chosen token's first probability into the running mean.
int32_t RowSampler::adaptive_p(const SampleChain& c, float uniform, AdaptivePState& state) {
  // Its shape: the width of the favoured band, the logit at its centre, how fast it falls.
  constexpr float kInvWidth = 1.0f / 0.3f, kPeak = 5.0f, kSharpness = 10.0f;
  softmax_candidates();
  std::vector<float>& probs = adaptive_probs_;
  probs.assign(weights_.begin(), weights_.end());
  const float target = std::min(c.adaptive_target, 1.0f);
  const float adapted = std::clamp(
      state.total_weight == 0.0f ? target : 2.0f * target - state.weighted_sum / state.total_weight,
      0.0f, 1.0f);
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i].logit == kNegInf) continue;
    const float d = std::fabs((probs[i] - adapted) * kInvWidth);
    candidates_[i].logit = kPeak - kSharpness * d * d / (1.0f + d);
  }
  const int32_t at = draw_candidates(uniform);
  state.weighted_sum = probs[static_cast<size_t>(at)] + c.adaptive_decay * state.weighted_sum;
  state.total_weight = 1.0f + c.adaptive_decay * state.total_weight;
  return candidates_[static_cast<size_t>(at)].id;
}

// Lists every token a draw could pick, if the candidates are still the whole vocabulary: the
// banned (-inf) ones never can. penalise() left at least one finite logit.
void RowSampler::all_candidates() {
  if (!whole_) return;
  whole_ = false;
  candidates_.clear();
  const float* pen = penalised_.data();
  for (size_t i = 0; i < penalised_.size(); ++i) {
    if (pen[i] != kNegInf) candidates_.push_back(Candidate{pen[i], static_cast<int32_t>(i)});
  }
  sorted_ = false;
}

void RowSampler::sort_candidates() {
  if (sorted_) return;
  std::sort(candidates_.begin(), candidates_.end(),
            [](const Candidate& a, const Candidate& b) { return precedes(a, b); });
  sorted_ = true;
}

float RowSampler::candidates_max() const {
  float max = kNegInf;
  for (const Candidate& c : candidates_) max = c.logit > max ? c.logit : max;
  return max;
}

void RowSampler::softmax_candidates() {
  const size_t n = candidates_.size();
  const float max = candidates_max();
  weights_.resize(n);
  const double z = exp_shifted(
      n, [this, max](size_t i) { return candidates_[i].logit - max; }, weights_.data());
  for (float& w : weights_) w = static_cast<float>(static_cast<double>(w) / z);
}

void RowSampler::keep(size_t n) {
  candidates_.resize(std::min(candidates_.size(), std::max(n, min_keep_)));
}

// llama.cpp's top-n-sigma: drop the logits below max - n * (their standard deviation).
void RowSampler::stage_top_n_sigma(float n) {
  if (n <= 0.0f) return;
  all_candidates();
  if (candidates_.size() <= 1) return;
  float max = kNegInf;
  float sum = 0.0f;
  for (const Candidate& c : candidates_) {
    max = c.logit > max ? c.logit : max;
    sum += c.logit;
  }
  const float mean = sum / static_cast<float>(candidates_.size());
  float acc = 0.0f;
  for (const Candidate& c : candidates_) acc += (c.logit - mean) * (c.logit - mean);
  const float sd = std::sqrt(acc / static_cast<float>(candidates_.size()));
  const float floor = max - n * sd;
  std::erase_if(candidates_, [floor](const Candidate& c) { return c.logit < floor; });
}

void RowSampler::stage_top_k(int32_t k) {
  if (k <= 0) return;
  if (whole_) {
    // The base chain's selection from the logits, less the banned tokens it may have taken.
    select_top_k(std::min(penalised_.size(), std::max(static_cast<size_t>(k), min_keep_)));
    while (candidates_.size() > 1 && candidates_.back().logit == kNegInf) candidates_.pop_back();
    whole_ = false;
    sorted_ = true;
    return;
  }
  const size_t n = std::min(candidates_.size(), std::max(static_cast<size_t>(k), min_keep_));
  auto cmp = [](const Candidate& a, const Candidate& b) { return precedes(a, b); };
  if (!sorted_ && n * kTopKHeapDivisor < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(n),
                     candidates_.end(), cmp);
    candidates_.resize(n);
  }
  sort_candidates();
  candidates_.resize(n);
}

// llama.cpp's locally typical sampling: the tokens whose surprise is nearest the entropy, in
// that order, until their mass passes p.
void RowSampler::stage_typical(float p) {
  if (p >= 1.0f) return;
  all_candidates();
  softmax_candidates();
  const size_t n = candidates_.size();
  double entropy = 0.0;
  for (float w : weights_) {
    if (w > 0.0f) entropy -= static_cast<double>(w) * std::log(static_cast<double>(w));
  }
  std::vector<std::pair<double, size_t>> by_score(n);  // (|surprise - entropy|, position)
  for (size_t i = 0; i < n; ++i) {
    const double w = static_cast<double>(weights_[i]);
    const double score =
        w > 0.0 ? std::fabs(-std::log(w) - entropy) : std::numeric_limits<double>::infinity();
    by_score[i] = {score, i};
  }
  // Sorted by score (ties by position: a strict order) in growing chunks, each the best of what
  // is left, until the mass passes p: a whole vocabulary's sort only where p needs it.
  size_t kept = n;
  double cum = 0.0;
  for (size_t done = 0, chunk = 64; done < n && kept == n; chunk *= 4) {
    const size_t end = std::min(n, done + chunk);
    const auto first = by_score.begin() + static_cast<ptrdiff_t>(done);
    const auto last = by_score.begin() + static_cast<ptrdiff_t>(end);
    if (end < n) std::nth_element(first, last, by_score.end());
    std::sort(first, last);
    for (size_t i = done; i < end; ++i) {
      cum += static_cast<double>(weights_[by_score[i].second]);
      if (cum > p && i + 1 >= min_keep_) {
        kept = i + 1;
        break;
      }
    }
    done = end;
  }
  std::vector<Candidate> out(kept);
  for (size_t i = 0; i < kept; ++i) out[i] = candidates_[by_score[i].second];
  candidates_ = std::move(out);
  sorted_ = false;
}

void RowSampler::stage_top_p(float p) {
  if (p >= 1.0f) return;
  all_candidates();
  sort_candidates();
  softmax_candidates();
  double cum = 0.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cum += static_cast<double>(weights_[i]);
    if (cum >= p && i + 1 >= min_keep_) {
      candidates_.resize(i + 1);
      return;
    }
  }
}

void RowSampler::stage_min_p(float p) {
  if (p <= 0.0f) return;
  all_candidates();
  const float max = candidates_max();
  const float threshold = max + std::log(p);
  size_t passing = 0;
  for (const Candidate& c : candidates_) passing += c.logit >= threshold ? 1 : 0;
  if (passing >= min_keep_) {
    std::erase_if(candidates_, [threshold](const Candidate& c) { return c.logit < threshold; });
    return;
  }
  sort_candidates();
  keep(passing);
}

// llama.cpp's XTC: with probability xtc_probability, drop every token at or above the
// threshold except the least likely of them.
void RowSampler::stage_xtc(const SampleChain& c, float chance) {
  if (!c.xtc_active() || chance > c.xtc_probability) return;
  all_candidates();
  if (candidates_.size() < 2) return;
  sort_candidates();
  softmax_candidates();
  size_t last = 0;
  for (size_t i = 0; i < candidates_.size() && weights_[i] >= c.xtc_threshold; ++i) last = i;
  if (last == 0 || candidates_.size() - last < min_keep_) return;
  candidates_.erase(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(last));
}

// The temperature, or llama.cpp's dynamic one: between temperature - range (at least 0) and
// temperature + range by the normalised entropy of the candidates to the exponent.
void RowSampler::stage_temperature(const SampleChain& c) {
  all_candidates();
  float t = settings_.temperature;
  if (c.dynatemp_range > 0.0f) {
    if (candidates_.size() <= 1) return;
    const float lo = std::max(0.0f, t - c.dynatemp_range);
    const float hi = t + c.dynatemp_range;
    softmax_candidates();
    double entropy = 0.0;
    for (float w : weights_) {
      if (w > 0.0f) entropy -= static_cast<double>(w) * std::log(static_cast<double>(w));
    }
    const double max_entropy = std::log(static_cast<double>(candidates_.size()));
    t = lo + (hi - lo) * static_cast<float>(std::pow(entropy / max_entropy, c.dynatemp_exponent));
    // A temperature of 0 keeps the most likely token, as llama.cpp's does.
    if (t <= 0.0f) {
      sort_candidates();
      candidates_.resize(1);
      return;
    }
  }
  for (Candidate& cand : candidates_) cand.logit /= t;
}

// The position in candidates_ that the uniform picks under the softmax of their logits.
int32_t RowSampler::draw_candidates(float uniform) {
  const size_t n = candidates_.size();
  const float max = candidates_max();
  weights_.resize(n);
  const double total = exp_shifted(
      n, [this, max](size_t i) { return candidates_[i].logit - max; }, weights_.data());
  const double target = static_cast<double>(uniform) * total;
  double acc = 0.0;
  size_t last_positive = 0;
  for (size_t i = 0; i < n; ++i) {
    if (weights_[i] <= 0.0f) continue;
    acc += static_cast<double>(weights_[i]);
    last_positive = i;
    if (acc > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last_positive);
}

// llama.cpp's Mirostat (1) and Mirostat 2.0 (2) after the temperature: truncate to what the
// target surprise mu allows, draw, and move mu by eta times the draw's surprise less tau.
int32_t RowSampler::mirostat(const SampleChain& c, float uniform, float& mu) {
  all_candidates();
  for (Candidate& cand : candidates_) cand.logit /= settings_.temperature;
  auto cmp = [](const Candidate& a, const Candidate& b) { return precedes(a, b); };
  if (c.mirostat == 1 && candidates_.size() >= 2) {
    // Zipf's exponent from the m = 100 most likely tokens, then the k that makes the expected
    // surprise mu. Only those m are sorted; the softmax is the whole vocabulary's.
    constexpr size_t kM = 100;
    const float max = candidates_max();
    weights_.resize(candidates_.size());
    const double z = exp_shifted(
        candidates_.size(), [this, max](size_t i) { return candidates_[i].logit - max; },
        weights_.data());
    const size_t m = std::min(kM, candidates_.size());
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(m - 1),
                     candidates_.end(), cmp);
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(m), cmp);
    std::vector<float> head(m);  // the m best tokens' probabilities
    for (size_t i = 0; i < m; ++i) {
      head[i] = static_cast<float>(static_cast<double>(exp_inline(candidates_[i].logit - max)) / z);
    }
    double sum_tb = 0.0;
    double sum_tt = 0.0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (head[i + 1] <= 0.0f) break;
      const double t = std::log(static_cast<double>(i + 2) / static_cast<double>(i + 1));
      const double b = std::log(static_cast<double>(head[i]) / head[i + 1]);
      sum_tb += t * b;
      sum_tt += t * t;
    }
    const double s_hat = sum_tt > 0.0 ? sum_tb / sum_tt : 0.0;
    const double eps = s_hat - 1.0;
    const double n_vocab = static_cast<double>(penalised_.size());
    const double k =
        std::pow(eps * std::pow(2.0, static_cast<double>(mu)) / (1.0 - std::pow(n_vocab, -eps)),
                 1.0 / s_hat);
    // A flat or degenerate head (s_hat 0, k NaN or infinite) keeps everything.
    if (std::isfinite(k) && k < static_cast<double>(candidates_.size())) {
      const size_t keep = static_cast<size_t>(std::max(k, 1.0));
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                       candidates_.end(), cmp);
      candidates_.resize(keep);
    }
  } else if (c.mirostat == 2) {
    // The tokens whose surprise is at most mu: a filter (surprise falls as the logit rises),
    // then only those are sorted.
    softmax_candidates();
    size_t kept = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const double w = static_cast<double>(weights_[i]);
      if (w > 0.0 && -std::log2(w) <= static_cast<double>(mu)) candidates_[kept++] = candidates_[i];
    }
    if (kept == 0) {
      candidates_[0] = *std::min_element(candidates_.begin(), candidates_.end(), cmp);
      kept = 1;
    }
    candidates_.resize(kept);
  }
  sorted_ = false;
  sort_candidates();  // the draw walks them most likely first, as llama.cpp's
  const int32_t chosen = draw_candidates(uniform);  // leaves the kept tokens' exps in weights_
  double total = 0.0;
  for (float w : weights_) total += static_cast<double>(w);
  const double surprise = -std::log2(static_cast<double>(weights_[chosen]) / total);
  mu -= c.mirostat_eta * static_cast<float>(surprise - static_cast<double>(c.mirostat_tau));
  return candidates_[chosen].id;
}

// --- The op's rows -----------------------------------------------------------------------------

namespace {

enum Word : int64_t {
  kTemperature = 0,
  kTopK = 1,
  kTopP = 2,
  kMinP = 3,
  kRepeatPenalty = 4,
  kPresence = 5,
  kFrequency = 6,
  kNPenalties = 7,
  kNBiases = 8,
  kNProbs = 9,
};
static_assert(kNProbs + 1 == kSampleWords);

int32_t bits_of(float f) { return std::bit_cast<int32_t>(f); }
float float_of(int32_t w) { return std::bit_cast<float>(w); }

SampleSettings settings_of(const int32_t* w) {
  SampleSettings s;
  s.temperature = float_of(w[kTemperature]);
  s.top_k = w[kTopK];
  s.top_p = float_of(w[kTopP]);
  s.min_p = float_of(w[kMinP]);
  s.repeat_penalty = float_of(w[kRepeatPenalty]);
  s.presence_penalty = float_of(w[kPresence]);
  s.frequency_penalty = float_of(w[kFrequency]);
  return s;
}

// One row's record and list, checked against the vocabulary and the list's width.
Status check_row(const SampleRowsArgs& a, int64_t r) {
  const int32_t* w = a.settings + r * kSampleWords;
  STRATA_RETURN_IF_ERROR(sample_settings_validate(settings_of(w)));
  const int64_t n_pen = w[kNPenalties];
  const int64_t n_bias = w[kNBiases];
  STRATA_RETURN_IF_ERROR(check_int_range("n_penalties", n_pen, 0, a.width, " (the list's width)"));
  STRATA_RETURN_IF_ERROR(check_int_range("n_biases", n_bias, 0, a.width - n_pen,
                                         " (the list's width less penalties)"));
  STRATA_RETURN_IF_ERROR(check_int_range("n_probs", w[kNProbs], -1, kSampleMaxNProbs, ""));
  const int32_t* e = a.entries + r * 2 * a.width;
  for (int64_t i = 0; i < n_pen + n_bias; ++i) {
    const std::string at = "entry " + std::to_string(i);
    STRATA_RETURN_IF_ERROR(
        check_int_range("token", e[2 * i], 0, int64_t{a.n_vocab} - 1, "").with_context(at));
    if (i < n_pen) {
      STRATA_RETURN_IF_ERROR(
          check_int_range("count", e[2 * i + 1], 1, std::numeric_limits<int32_t>::max(), "")
              .with_context(at));
    }
  }
  const float u = a.uniforms[r];
  if (!(u >= 0.0f && u < 1.0f)) {
    return invalid_argument("sampler: uniform = " + fmt_float(u) + ": must be in [0, 1)");
  }
  return Status::ok();
}

}  // namespace

void sample_row_pack(const SampleSettings& s, std::span<const SamplePenalty> penalties,
                     std::span<const SampleBias> bias, int32_t n_probs, int32_t* w,
                     int32_t* entries) {
  w[kTemperature] = bits_of(s.temperature);
  w[kTopK] = s.top_k;
  w[kTopP] = bits_of(s.top_p);
  w[kMinP] = bits_of(s.min_p);
  w[kRepeatPenalty] = bits_of(s.repeat_penalty);
  w[kPresence] = bits_of(s.presence_penalty);
  w[kFrequency] = bits_of(s.frequency_penalty);
  w[kNPenalties] = static_cast<int32_t>(penalties.size());
  w[kNBiases] = static_cast<int32_t>(bias.size());
  w[kNProbs] = n_probs;
  for (const SamplePenalty& p : penalties) {
    *entries++ = p.token;
    *entries++ = p.count;
  }
  for (const SampleBias& b : bias) {
    *entries++ = b.token;
    *entries++ = bits_of(b.bias);
  }
}

Status sample_rows(ThreadPool& pool, const SampleRowsArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    STRATA_RETURN_IF_ERROR(check_row(a, r).with_context("row " + std::to_string(r)));
  }
  const int64_t k = a.out_words > 1 ? (a.out_words - 2) / 2 : 0;
  std::vector<RowSampler> samplers(static_cast<size_t>(pool.size()));
  // Rows are independent: threads split them, and each row runs the whole chain on one thread.
  pool.parallel_for(a.rows, 1, [&](int thread, int64_t begin, int64_t end) {
    RowSampler& rs = samplers[static_cast<size_t>(thread)];
    std::vector<SamplePenalty> pen;
    std::vector<SampleBias> bias;
    std::vector<TokenLogprob> top;
    for (int64_t r = begin; r < end; ++r) {
      const int32_t* w = a.settings + r * kSampleWords;
      const int32_t* e = a.entries + r * 2 * a.width;
      pen.resize(static_cast<size_t>(w[kNPenalties]));
      for (SamplePenalty& p : pen) {
        p = SamplePenalty{e[0], e[1]};
        e += 2;
      }
      bias.resize(static_cast<size_t>(w[kNBiases]));
      for (SampleBias& b : bias) {
        b = SampleBias{e[0], float_of(e[1])};
        e += 2;
      }
      const int32_t token = rs.sample(a.logits + static_cast<size_t>(r) * a.logits_stride,
                                      a.n_vocab, settings_of(w), bias, pen, a.uniforms[r]);
      int32_t* out = a.out + r * a.out_words;
      out[0] = token;
      if (a.out_words == 1) continue;
      const int32_t n_probs = w[kNProbs];
      out[1] = n_probs >= 0 ? bits_of(rs.logprob(token)) : 0;
      rs.top(std::min<int64_t>(n_probs, k), top);
      for (int64_t i = 0; i < k; ++i) {
        const bool have = i < static_cast<int64_t>(top.size());
        out[2 + 2 * i] = have ? top[static_cast<size_t>(i)].token : -1;
        out[3 + 2 * i] = have ? bits_of(top[static_cast<size_t>(i)].logprob) : 0;
      }
    }
  });
  return Status::ok();
}

}  // namespace strata
