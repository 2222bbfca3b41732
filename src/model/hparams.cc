#include "model/hparams.h"

#include <cmath>

#include "model/arch.h"
#include "model/gguf.h"

namespace strata {
namespace {

// Bounds that no real model reaches, so that a hostile file cannot make us size buffers from
// absurd numbers (n_embd * n_ctx * n_layer is allocated for the KV cache).
constexpr uint64_t kMaxHparamDim = 1 << 20;
constexpr uint64_t kMaxLayers = 4096;
constexpr uint64_t kMaxHeads = 4096;

// rope.scaling.*, as llama.cpp reads them: the factor is a linear scale whatever the type
// (YaRN ramps between it and 1); the type says what else applies. A missing type means
// linear, and a missing factor means 1.
Status read_rope_scaling(const GgufFile& f, const std::string& a, HParams& hp) {
  RopeScalingParams& s = hp.rope_scaling;
  std::string type = "linear";
  if (f.find(a + "rope.scaling.type") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(type, f.get_string(a + "rope.scaling.type"));
  }
  const std::optional<RopeScaling> kind = rope_scaling_from_name(type);
  if (!kind) {
    return unsupported(a + "rope.scaling.type '" + type +
                       "' is not supported (none, linear, yarn, longrope)");
  }
  s.type = *kind;
  const std::string factor_key = f.find(a + "rope.scaling.factor") != nullptr
                                     ? a + "rope.scaling.factor"
                                     : a + "rope.scale_linear";
  STRATA_ASSIGN_OR_RETURN(float factor, get_positive(f, factor_key, 1.0f));
  if (factor < 1e-3f || factor > 1e4f) {
    return out_of_range(factor_key + " = " + std::to_string(factor) + " outside [0.001, 10000]");
  }
  hp.rope_freq_scale = s.type == RopeScaling::kNone ? 1.0f : 1.0f / factor;
  STRATA_ASSIGN_OR_RETURN(s.attn_factor, get_positive(f, a + "rope.scaling.attn_factor", 1.0f));
  STRATA_ASSIGN_OR_RETURN(s.n_ctx_orig, get_dim(f, a + "rope.scaling.original_context_length",
                                                1 << 24, static_cast<uint64_t>(hp.n_ctx_train)));
  if (s.type == RopeScaling::kYarn) {
    STRATA_ASSIGN_OR_RETURN(s.yarn_beta_fast,
                            get_positive(f, a + "rope.scaling.yarn_beta_fast", 32.0f));
    STRATA_ASSIGN_OR_RETURN(s.yarn_beta_slow,
                            get_positive(f, a + "rope.scaling.yarn_beta_slow", 1.0f));
    if (f.find(a + "rope.scaling.yarn_ext_factor") != nullptr) {
      STRATA_ASSIGN_OR_RETURN(double ext, f.get_float(a + "rope.scaling.yarn_ext_factor"));
      if (!(ext >= 0 && ext <= 1)) {
        return out_of_range(a + "rope.scaling.yarn_ext_factor = " + std::to_string(ext) +
                            " outside [0, 1]");
      }
      s.yarn_ext_factor = static_cast<float>(ext);
    }
    if (f.find(a + "rope.scaling.yarn_log_multiplier") != nullptr) {
      return unsupported(a +
                         "rope.scaling.yarn_log_multiplier (DeepSeek-V2 style YaRN) is not "
                         "supported");
    }
  }
  return Status::ok();
}

// expert_count and expert_used_count, as llama.cpp reads them for every architecture: both
// absent (or zero) for a dense model; otherwise 1 <= used <= count <= kMaxExperts.
Status read_expert_counts(const GgufFile& f, const std::string& a, HParams& hp) {
  const std::string count_key = a + "expert_count", used_key = a + "expert_used_count";
  uint64_t count = 0, used = 0;
  if (f.find(count_key) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(count, f.get_uint(count_key));
  }
  if (f.find(used_key) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(used, f.get_uint(used_key));
  }
  if (count > static_cast<uint64_t>(kMaxExperts)) {
    return out_of_range(count_key + " = " + std::to_string(count) + " is more than " +
                        std::to_string(kMaxExperts));
  }
  if (count == 0 && used != 0) {
    return invalid_argument(used_key + " = " + std::to_string(used) + " but " + count_key +
                            " is absent or 0 (a model without experts)");
  }
  if (count > 0 && (used < 1 || used > count)) {
    return out_of_range(used_key + " = " + std::to_string(used) + " outside [1, " + count_key +
                        " = " + std::to_string(count) + "]");
  }
  hp.n_expert = static_cast<int64_t>(count);
  hp.n_expert_used = static_cast<int64_t>(used);
  return Status::ok();
}

// The experts' width and gating, over the defaults the architecture set: a key the file has
// wins. expert_gating_func 0 means the architecture's default, as in llama.cpp;
// expert_weights_scale 0 means none.
Status read_expert_gating(const GgufFile& f, const std::string& a, HParams& hp) {
  const std::string ff_key = a + "expert_feed_forward_length";
  if (f.find(ff_key) == nullptr && hp.n_ff_exp < 1) {
    return invalid_argument(ff_key + " is missing, and " + hp.arch_name +
                            " has no default width for it (got " + std::to_string(hp.n_ff_exp) +
                            ")");
  }
  STRATA_ASSIGN_OR_RETURN(hp.n_ff_exp,
                          get_dim(f, ff_key, kMaxHparamDim, static_cast<uint64_t>(hp.n_ff_exp)));
  const std::string gating_key = a + "expert_gating_func";
  if (f.find(gating_key) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(uint64_t g, f.get_uint(gating_key));
    // The file numbers them 1, 2, 3 (0: the architecture's default), as llama.cpp does.
    constexpr MoeGating kGatings[] = {MoeGating::kSoftmax, MoeGating::kSigmoid,
                                      MoeGating::kSoftmaxSelected};
    if (g > std::size(kGatings)) {
      return unsupported(gating_key + " = " + std::to_string(g) +
                         " is not supported (1 softmax, 2 sigmoid, 3 softmax of the selected)");
    }
    if (g > 0) hp.expert_gating = kGatings[g - 1];
  }
  const std::string norm_key = a + "expert_weights_norm";
  if (f.find(norm_key) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(hp.expert_weights_norm, f.get_bool(norm_key));
  }
  const std::string scale_key = a + "expert_weights_scale";
  if (f.find(scale_key) != nullptr) {
    STRATA_ASSIGN_OR_RETURN(double scale, f.get_float(scale_key));
    if (!(scale >= 0 && scale <= 1e3)) {
      return out_of_range(scale_key + " = " + std::to_string(scale) + " outside [0, 1000]");
    }
    hp.expert_weights_scale = scale == 0 ? 1.0f : static_cast<float>(scale);
  }
  return Status::ok();
}

}  // namespace

Result<int64_t> get_dim(const GgufFile& f, const std::string& key, uint64_t limit,
                        std::optional<uint64_t> fallback) {
  if (fallback && f.find(key) == nullptr) return static_cast<int64_t>(*fallback);
  STRATA_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v < 1 || v > limit) {
    return out_of_range(key + " = " + std::to_string(v) + " outside [1, " + std::to_string(limit) +
                        "]");
  }
  return static_cast<int64_t>(v);
}

Result<float> get_positive(const GgufFile& f, const std::string& key, float fallback) {
  if (f.find(key) == nullptr) return fallback;
  STRATA_ASSIGN_OR_RETURN(double v, f.get_float(key));
  if (!(v > 0) || !std::isfinite(v)) {
    return out_of_range(key + " = " + std::to_string(v) + " must be finite and positive");
  }
  return static_cast<float>(v);
}

const char* rope_scaling_name(RopeScaling t) {
  switch (t) {
    case RopeScaling::kNone:
      return "none";
    case RopeScaling::kLinear:
      return "linear";
    case RopeScaling::kYarn:
      return "yarn";
    case RopeScaling::kLongrope:
      return "longrope";
  }
  return "?";
}

std::optional<RopeScaling> rope_scaling_from_name(std::string_view name) {
  for (RopeScaling t :
       {RopeScaling::kNone, RopeScaling::kLinear, RopeScaling::kYarn, RopeScaling::kLongrope}) {
    if (name == rope_scaling_name(t)) return t;
  }
  return std::nullopt;
}

Status apply_rope_overrides(const RopeOverrides& o, HParams& hp) {
  RopeScalingParams& s = hp.rope_scaling;
  if (s.type == RopeScaling::kLongrope && (o.type || o.scale || o.freq_scale)) {
    return unsupported(
        "this model's rope is LongRoPE, whose factors come from the file: --rope-scaling, "
        "--rope-scale and --rope-freq-scale cannot change it");
  }
  if (o.type == RopeScaling::kLongrope) {
    return unsupported("--rope-scaling longrope needs the factors of a LongRoPE model's file");
  }
  if (o.scale && o.freq_scale) {
    return invalid_argument("--rope-scale and --rope-freq-scale both set the scale: give one");
  }
  const RopeScaling type = o.type.value_or(s.type);
  const bool yarn_flag = o.yarn_orig_ctx || o.yarn_ext_factor || o.yarn_attn_factor ||
                         o.yarn_beta_slow || o.yarn_beta_fast;
  if (yarn_flag && type != RopeScaling::kYarn) {
    return invalid_argument(
        std::string("the --yarn-* flags apply to YaRN, and this model's rope is ") +
        rope_scaling_name(type) + " (--rope-scaling yarn makes it YaRN)");
  }
  // Sliding layers keep their trained rope: give them their own where they shared kind 0's.
  if ((o.freq_base || o.scale || o.freq_scale || type == RopeScaling::kNone) &&
      hp.swa_pattern > 0 && hp.n_swa > 0 && hp.rope_freq_base_swa <= 0) {
    hp.rope_freq_base_swa = hp.rope_freq_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
  }
  if (o.freq_base) hp.rope_freq_base = *o.freq_base;
  if (o.scale) hp.rope_freq_scale = 1.0f / *o.scale;
  if (o.freq_scale) hp.rope_freq_scale = *o.freq_scale;
  s.type = type;
  if (type == RopeScaling::kNone) hp.rope_freq_scale = 1.0f;
  if (o.yarn_orig_ctx && *o.yarn_orig_ctx > 0) s.n_ctx_orig = *o.yarn_orig_ctx;
  if (o.yarn_ext_factor) s.yarn_ext_factor = *o.yarn_ext_factor;
  if (o.yarn_attn_factor) s.attn_factor = *o.yarn_attn_factor;
  if (o.yarn_beta_slow) s.yarn_beta_slow = *o.yarn_beta_slow;
  if (o.yarn_beta_fast) s.yarn_beta_fast = *o.yarn_beta_fast;
  return Status::ok();
}

Result<HParams> hparams_from_gguf(const GgufFile& f) {
  HParams hp;
  STRATA_ASSIGN_OR_RETURN(hp.arch_name, f.get_string("general.architecture"));
  hp.arch = arch_find(hp.arch_name);
  if (hp.arch == nullptr) {
    return unsupported("general.architecture '" + hp.arch_name +
                       "' is not supported (supported: " + arch_names() + ")");
  }
  const std::string a = hp.arch_name + ".";
  STRATA_ASSIGN_OR_RETURN(hp.n_ctx_train, get_dim(f, a + "context_length", 1 << 24));
  STRATA_ASSIGN_OR_RETURN(hp.n_embd, get_dim(f, a + "embedding_length", kMaxHparamDim));
  STRATA_ASSIGN_OR_RETURN(hp.n_layer, get_dim(f, a + "block_count", kMaxLayers));
  STRATA_ASSIGN_OR_RETURN(hp.n_ff, get_dim(f, a + "feed_forward_length", kMaxHparamDim));
  STRATA_ASSIGN_OR_RETURN(hp.n_head, get_dim(f, a + "attention.head_count", kMaxHeads));
  STRATA_ASSIGN_OR_RETURN(hp.n_head_kv, get_dim(f, a + "attention.head_count_kv", kMaxHeads,
                                                static_cast<uint64_t>(hp.n_head)));
  if (hp.n_head % hp.n_head_kv != 0) {
    return invalid_argument(
        a + "attention.head_count = " + std::to_string(hp.n_head) +
        " is not a multiple of head_count_kv = " + std::to_string(hp.n_head_kv));
  }
  if (f.find(a + "attention.key_length") == nullptr && hp.n_embd % hp.n_head != 0) {
    return invalid_argument(a + "embedding_length " + std::to_string(hp.n_embd) +
                            " is not a multiple of head_count " + std::to_string(hp.n_head));
  }
  STRATA_ASSIGN_OR_RETURN(hp.head_dim, get_dim(f, a + "attention.key_length", 1024,
                                               static_cast<uint64_t>(hp.n_embd / hp.n_head)));
  STRATA_ASSIGN_OR_RETURN(int64_t v_len, get_dim(f, a + "attention.value_length", 1024,
                                                 static_cast<uint64_t>(hp.head_dim)));
  if (v_len != hp.head_dim) {
    return unsupported(a + "attention.value_length " + std::to_string(v_len) +
                       " differs from key_length " + std::to_string(hp.head_dim));
  }
  STRATA_ASSIGN_OR_RETURN(
      hp.n_rot, get_dim(f, a + "rope.dimension_count", 1024, static_cast<uint64_t>(hp.head_dim)));
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return invalid_argument(a + "rope.dimension_count " + std::to_string(hp.n_rot) +
                            " must be even and at most the head size " +
                            std::to_string(hp.head_dim));
  }
  STRATA_ASSIGN_OR_RETURN(hp.rms_eps,
                          get_positive(f, a + "attention.layer_norm_rms_epsilon", 1e-5f));
  STRATA_ASSIGN_OR_RETURN(hp.rope_freq_base, get_positive(f, a + "rope.freq_base", 10000.0f));
  STRATA_RETURN_IF_ERROR(read_rope_scaling(f, a, hp));
  STRATA_RETURN_IF_ERROR(read_expert_counts(f, a, hp));
  if (hp.n_expert > 0) {
    bool has_experts = false;
    for (const LayerTensorSpec& s : hp.arch->layer_tensors) {
      has_experts = has_experts || s.ne2 == Dim::kExpert;
    }
    if (!has_experts) {
      return unsupported(a + "expert_count = " + std::to_string(hp.n_expert) + ": " + hp.arch_name +
                         " models with experts are not supported");
    }
  }
  STRATA_RETURN_IF_ERROR(hp.arch->read_hparams(f, hp));
  if (hp.n_expert > 0) STRATA_RETURN_IF_ERROR(read_expert_gating(f, a, hp));
  const GgufTensorInfo* embd = f.tensor("token_embd.weight");
  if (embd == nullptr) return invalid_argument("tensor token_embd.weight is missing");
  hp.n_vocab = embd->ne[1];
  return hp;
}

}  // namespace strata
