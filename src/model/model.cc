#include "model/model.h"

#include <cmath>
#include <cstring>
#include <initializer_list>

namespace strata {
namespace {

std::string shape_str(std::initializer_list<int64_t> ne) {
  std::string s = "[";
  for (int64_t v : ne) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
  return s + "]";
}

// Finds a tensor and checks its shape; F32-only tensors (norms, biases) must be F32.
Result<const GgufTensorInfo*> bind(const GgufFile& f, const std::string& name,
                                   std::initializer_list<int64_t> ne, bool f32_only,
                                   bool optional = false) {
  const GgufTensorInfo* t = f.tensor(name);
  if (t == nullptr) {
    if (optional) return static_cast<const GgufTensorInfo*>(nullptr);
    return invalid_argument("tensor " + name + " " + shape_str(ne) + " is missing");
  }
  int d = 0;
  bool ok = true;
  for (int64_t v : ne) ok = ok && t->ne[d++] == v;
  for (; d < 4; ++d) ok = ok && t->ne[d] == 1;
  if (!ok) {
    return invalid_argument("tensor " + name + " has shape " +
                            shape_str({t->ne[0], t->ne[1], t->ne[2], t->ne[3]}) + ", expected " +
                            shape_str(ne));
  }
  if (f32_only && t->dtype != DType::kF32) {
    return unsupported("tensor " + name + " is " + std::string(dtype_name(t->dtype)) +
                       "; only f32 is supported for norms and biases");
  }
  if (!dtype_info(t->dtype).has_kernels) {
    return unsupported("tensor " + name + " has dtype " + std::string(dtype_name(t->dtype)) +
                       ", which has no kernels (supported: " + dtype_names_with_kernels() + ")");
  }
  return t;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::open(const std::string& path,
                                           const std::vector<GgufKv>& overrides) {
  STRATA_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  for (const GgufKv& kv : overrides) {
    STRATA_RETURN_IF_ERROR(file.override_kv(kv).with_context("--override-kv"));
  }
  STRATA_ASSIGN_OR_RETURN(HParams hp, hparams_from_gguf(file));
  STRATA_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(file));
  if (tok.n_vocab() != hp.n_vocab) {
    return invalid_argument("the tokenizer has " + std::to_string(tok.n_vocab()) +
                            " tokens but token_embd.weight has " + std::to_string(hp.n_vocab) +
                            " rows");
  }
  std::unique_ptr<Model> m(new Model(std::move(file), hp, std::move(tok)));
  m->kv_overrides_ = overrides;
  STRATA_RETURN_IF_ERROR(m->bind_tensors().with_context(path));
  return m;
}

Status Model::bind_tensors() {
  const HParams& hp = hparams_;
  const GgufFile& f = file_;
  STRATA_ASSIGN_OR_RETURN(token_embd_,
                          bind(f, "token_embd.weight", {hp.n_embd, hp.n_vocab}, false));
  STRATA_ASSIGN_OR_RETURN(output_norm_, bind(f, "output_norm.weight", {hp.n_embd}, true));
  STRATA_ASSIGN_OR_RETURN(output_, bind(f, "output.weight", {hp.n_embd, hp.n_vocab}, false, true));
  if (output_ == nullptr) output_ = token_embd_;  // tied embeddings
  const int64_t n_pairs = hp.n_rot / 2;
  STRATA_ASSIGN_OR_RETURN(rope_freqs_, bind(f, "rope_freqs.weight", {n_pairs}, true, true));
  STRATA_ASSIGN_OR_RETURN(rope_short_, bind(f, "rope_factors_short.weight", {n_pairs}, true, true));
  STRATA_ASSIGN_OR_RETURN(rope_long_, bind(f, "rope_factors_long.weight", {n_pairs}, true, true));
  for (const GgufTensorInfo* t : {rope_freqs_, rope_short_, rope_long_}) {
    if (t == nullptr) continue;
    // Divisors of the frequencies: a zero, negative or non-finite one would make every angle
    // of its pair meaningless.
    const uint8_t* data = f.tensor_data(*t);
    for (int64_t i = 0; i < n_pairs; ++i) {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      if (!(v > 0) || !std::isfinite(v)) {
        return invalid_argument("tensor " + t->name + "[" + std::to_string(i) +
                                "] = " + std::to_string(v) + " must be finite and positive");
      }
    }
  }
  if ((rope_short_ == nullptr) != (rope_long_ == nullptr)) {
    return invalid_argument(
        "rope_factors_short.weight and rope_factors_long.weight come as a pair; this file has "
        "one of them");
  }
  layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const LayerTensorSpec& spec : hp.arch->layer_tensors) {
      if (!spec_applies(spec, hp)) continue;
      const bool vector = spec.ne1 == Dim::kOne;
      const std::string name = p + std::string(layer_tensor_name(spec.id));
      const int64_t ne0 = dim_value(spec.ne0, hp);
      const int64_t ne1 = dim_value(spec.ne1, hp);
      const bool optional = !spec_required(spec, hp);
      // The ops that add biases (add, add_id) take F32 rows, as the norms do.
      const bool f32_only = vector || spec.role == TensorRole::kBias;
      Result<const GgufTensorInfo*> t =
          vector ? bind(f, name, {ne0}, true, optional)
          : spec.ne2 == Dim::kOne
              ? bind(f, name, {ne0, ne1}, f32_only, optional)
              : bind(f, name, {ne0, ne1, dim_value(spec.ne2, hp)}, f32_only, optional);
      if (!t.is_ok()) return t.status();
      l.tensors[static_cast<size_t>(spec.id)] = t.value();
    }
  }
  return Status::ok();
}

bool Model::rope_uses_tables() const {
  const RopeScaling type = hparams_.rope_scaling.type;
  return rope_freqs_ != nullptr || rope_long_ != nullptr || type == RopeScaling::kYarn ||
         type == RopeScaling::kLongrope;
}

std::array<RopeTable, 2> Model::rope_tables(int64_t n_ctx_seq) const {
  const HParams& hp = hparams_;
  const GgufTensorInfo* factors = rope_freqs_;
  if (factors == nullptr && rope_long_ != nullptr) {
    factors = n_ctx_seq > hp.rope_scaling.n_ctx_orig ? rope_long_ : rope_short_;
  }
  std::vector<float> ff;
  if (factors != nullptr) {
    ff.resize(static_cast<size_t>(hp.n_rot / 2));
    std::memcpy(ff.data(), file_.tensor_data(*factors), 4 * ff.size());
  }
  std::array<RopeTable, 2> tables;
  for (int kind = 0; kind < 2; ++kind) {
    const float base = hp.rope_base(kind) > 0 ? hp.rope_base(kind) : hp.rope_freq_base;
    const float scale = hp.rope_scale(kind) > 0 ? hp.rope_scale(kind) : hp.rope_freq_scale;
    tables[static_cast<size_t>(kind)] = rope_table(hp.n_rot, base, scale, ff, hp.rope_scaling);
  }
  return tables;
}

uint64_t Model::layer_bytes(int64_t il) const {
  uint64_t sum = 0;
  for (const GgufTensorInfo* t : layers_[static_cast<size_t>(il)].tensors) {
    if (t != nullptr) sum += t->size_bytes;
  }
  return sum;
}

bool Model::per_expert(LayerTensor t) const {
  for (const LayerTensorSpec& s : hparams_.arch->layer_tensors) {
    if (s.id == t) return s.ne2 == Dim::kExpert;
  }
  return false;
}

uint64_t Model::layer_bytes_per_token(int64_t il) const {
  const LayerWeights& l = layers_[static_cast<size_t>(il)];
  uint64_t sum = 0;
  for (size_t i = 0; i < kLayerTensorCount; ++i) {
    const GgufTensorInfo* t = l.tensors[i];
    if (t == nullptr) continue;
    if (!per_expert(static_cast<LayerTensor>(i))) {
      sum += t->size_bytes;
    } else {
      const uint64_t n_expert = static_cast<uint64_t>(hparams_.n_expert);
      sum += t->size_bytes / n_expert * static_cast<uint64_t>(hparams_.n_expert_used);
    }
  }
  return sum;
}

uint64_t Model::total_weight_bytes() const {
  uint64_t sum = token_embd_->size_bytes + output_norm_->size_bytes;
  if (output_ != token_embd_) sum += output_->size_bytes;
  for (int64_t il = 0; il < hparams_.n_layer; ++il) sum += layer_bytes(il);
  return sum;
}

}  // namespace strata
