#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"

// The float arithmetic below is part of the sampler's output (which token a uniform selects):
// it must not be fused into FMAs differently by different compilers. GCC keeps ISO C++
// contraction off by default; clang needs telling.
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

Status check_int_range(const char* name, int32_t v, int32_t lo, int32_t hi, const char* note) {
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

}  // namespace

float exp_nonpositive(float x) { return exp_inline(x); }

Status SamplerParams::validate() const {
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    return invalid_argument("sampler: temperature = " + fmt_float(temperature) +
                            ": must be a finite number >= 0 (0 is greedy)");
  }
  STRATA_RETURN_IF_ERROR(check_int_range("top_k", top_k, -1, std::numeric_limits<int32_t>::max(),
                                         " (0 or -1 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("top_p", top_p, 0.0f, 1.0f, " (1 disables)"));
  STRATA_RETURN_IF_ERROR(check_float_range("min_p", min_p, 0.0f, 1.0f, " (0 disables)"));
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f)) {
    return invalid_argument("sampler: repeat_penalty = " + fmt_float(repeat_penalty) +
                            ": must be a finite number > 0 (1 disables)");
  }
  STRATA_RETURN_IF_ERROR(check_int_range("repeat_last_n", repeat_last_n, -1, kSamplerMaxRepeatLastN,
                                         " (0 disables, -1 means all)"));
  // OpenAI's range for both.
  STRATA_RETURN_IF_ERROR(check_float_range("presence_penalty", presence_penalty, -2.0f, 2.0f));
  STRATA_RETURN_IF_ERROR(check_float_range("frequency_penalty", frequency_penalty, -2.0f, 2.0f));
  STRATA_RETURN_IF_ERROR(check_int_range("n_probs", n_probs, 0, kSamplerMaxNProbs, ""));
  return Status::ok();
}

namespace {

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

}  // namespace

Result<Sampler> Sampler::create(const SamplerParams& params, int32_t n_vocab) {
  STRATA_RETURN_IF_ERROR(params.validate());
  if (n_vocab <= 0) {
    return invalid_argument("sampler: n_vocab = " + std::to_string(n_vocab) + ": must be > 0");
  }
  return Sampler(params, n_vocab);
}

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
  STRATA_CHECK(params.validate().is_ok(), "sampler parameters must be validated first");
  STRATA_CHECK(n_vocab > 0);
  penalised_.resize(static_cast<size_t>(n_vocab));
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= n_vocab_ || params_.repeat_last_n == 0) return;
  window_.push_back(token);
  ++counts_[token];
  const size_t limit = params_.repeat_last_n > 0 ? static_cast<size_t>(params_.repeat_last_n)
                                                 : static_cast<size_t>(kSamplerMaxRepeatLastN);
  if (window_.size() > limit) {
    const int32_t old = window_.front();
    window_.pop_front();
    auto it = counts_.find(old);
    if (--it->second == 0) counts_.erase(it);
  }
}

void Sampler::reset() {
  window_.clear();
  counts_.clear();
  rng_ = SamplerRng(params_.seed);
  last_token_ = -1;
  last_top_.clear();
}

int32_t Sampler::sample(const float* logits) {
  // Greedy draws nothing, so switching a request to greedy never shifts another's stream.
  const float u = params_.temperature > 0.0f ? rng_.uniform() : 0.0f;
  return sample_impl(logits, u);
}

int32_t Sampler::sample_with_uniform(const float* logits, float uniform) {
  STRATA_CHECK(uniform >= 0.0f && uniform < 1.0f, "uniform must be in [0, 1)");
  return sample_impl(logits, uniform);
}

int32_t Sampler::sample_impl(const float* logits, float uniform) {
  penalise(logits);
  int32_t token = argmax_;
  if (params_.temperature > 0.0f) {
    truncate();
    token = draw(uniform);
  }
  last_token_ = token;
  compute_top_alternatives();
  return token;
}

float Sampler::last_logprob() const {
  if (last_token_ < 0) return 0.0f;
  return penalised_[static_cast<size_t>(last_token_)] - log_z();
}

float Sampler::log_z() const {
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

// llama.cpp's penalties: for each distinct token of the window, a positive logit is divided by
// repeat_penalty and a non-positive one multiplied (so both move down for a penalty > 1), then
// presence is subtracted once and frequency once per occurrence.
void Sampler::penalise(const float* logits) {
  const size_t n = penalised_.size();
  float* pen = penalised_.data();
  for (size_t i = 0; i < n; ++i) pen[i] = sanitise(logits[i]);
  const bool active = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                      params_.frequency_penalty != 0.0f;
  if (active) {
    for (const auto& [token, count] : counts_) {
      float& l = pen[static_cast<size_t>(token)];
      l = l <= 0.0f ? l * params_.repeat_penalty : l / params_.repeat_penalty;
      l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
      l = sanitise(l);  // a repeat_penalty below 1 can overflow
    }
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

void Sampler::compute_top_alternatives() {
  last_top_.clear();
  const size_t n = static_cast<size_t>(std::min(params_.n_probs, n_vocab_));
  if (n == 0) return;
  // Insertion into a short sorted list: most tokens fail the first comparison, so this is one
  // pass over the vocab for n <= kSamplerMaxNProbs.
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
  for (const Candidate& c : best) last_top_.push_back(TokenLogprob{c.id, c.logit - z});
}

namespace {

// A strict total order (ties broken by id): nth_element, heaps and sort then give the same
// result with every standard library, which the cross-platform determinism needs.
bool precedes(const auto& a, const auto& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Past this share of the vocab a heap costs more than nth_element.
constexpr size_t kTopKHeapDivisor = 16;

}  // namespace

void Sampler::select_top_k(size_t k) {
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

void Sampler::truncate() {
  const size_t n_vocab = penalised_.size();
  const bool use_top_k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n_vocab;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  // min_p keeps p_i >= min_p * p_max, i.e. logit >= max + log(min_p): no softmax needed.
  const float min_p_threshold = use_min_p ? max_logit_ + std::log(params_.min_p) : kNegInf;
  if (use_top_k) {
    select_top_k(static_cast<size_t>(params_.top_k));
    size_t keep = candidates_.size();
    if (use_top_p) {
      // top_p renormalises over what top_k kept, as llama.cpp's chain does.
      weights_.resize(keep);
      const double z = exp_shifted(
          keep, [this](size_t i) { return candidates_[i].logit - max_logit_; }, weights_.data());
      double cum = 0.0;
      for (size_t i = 0; i < keep; ++i) {
        cum += static_cast<double>(weights_[i]) / z;
        if (cum >= params_.top_p) {
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
      if (cum >= params_.top_p) {
        candidates_.resize(i + 1);
        return;
      }
    }
    sorted = end;
    chunk *= 4;
  }
}

int32_t Sampler::draw(float uniform) {
  // Every truncation keeps the most likely token, so max_logit_ is the candidates' maximum.
  const size_t n = candidates_.size();
  weights_.resize(n);
  const float t = params_.temperature;
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

}  // namespace strata
