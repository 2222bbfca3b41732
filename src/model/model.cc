#include "model/model.h"

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

Result<std::unique_ptr<Model>> Model::open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  STRATA_ASSIGN_OR_RETURN(HParams hp, hparams_from_gguf(file));
  STRATA_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(file));
  if (tok.n_vocab() != hp.n_vocab) {
    return invalid_argument("the tokenizer has " + std::to_string(tok.n_vocab()) +
                            " tokens but token_embd.weight has " + std::to_string(hp.n_vocab) +
                            " rows");
  }
  std::unique_ptr<Model> m(new Model(std::move(file), hp, std::move(tok)));
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
  layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    LayerWeights& l = layers_[static_cast<size_t>(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    STRATA_ASSIGN_OR_RETURN(l.attn_norm, bind(f, p + "attn_norm.weight", {hp.n_embd}, true));
    STRATA_ASSIGN_OR_RETURN(l.wq, bind(f, p + "attn_q.weight", {hp.n_embd, hp.n_embd_q()}, false));
    STRATA_ASSIGN_OR_RETURN(l.wk, bind(f, p + "attn_k.weight", {hp.n_embd, hp.n_embd_kv()}, false));
    STRATA_ASSIGN_OR_RETURN(l.wv, bind(f, p + "attn_v.weight", {hp.n_embd, hp.n_embd_kv()}, false));
    STRATA_ASSIGN_OR_RETURN(l.wo,
                            bind(f, p + "attn_output.weight", {hp.n_embd_q(), hp.n_embd}, false));
    const bool bias = hp.qkv_bias;
    STRATA_ASSIGN_OR_RETURN(l.bq, bind(f, p + "attn_q.bias", {hp.n_embd_q()}, true, !bias));
    STRATA_ASSIGN_OR_RETURN(l.bk, bind(f, p + "attn_k.bias", {hp.n_embd_kv()}, true, !bias));
    STRATA_ASSIGN_OR_RETURN(l.bv, bind(f, p + "attn_v.bias", {hp.n_embd_kv()}, true, !bias));
    if (hp.qk_norm) {
      STRATA_ASSIGN_OR_RETURN(l.q_norm, bind(f, p + "attn_q_norm.weight", {hp.head_dim}, true));
      STRATA_ASSIGN_OR_RETURN(l.k_norm, bind(f, p + "attn_k_norm.weight", {hp.head_dim}, true));
    }
    STRATA_ASSIGN_OR_RETURN(l.ffn_norm, bind(f, p + "ffn_norm.weight", {hp.n_embd}, true));
    STRATA_ASSIGN_OR_RETURN(l.w_gate, bind(f, p + "ffn_gate.weight", {hp.n_embd, hp.n_ff}, false));
    STRATA_ASSIGN_OR_RETURN(l.w_up, bind(f, p + "ffn_up.weight", {hp.n_embd, hp.n_ff}, false));
    STRATA_ASSIGN_OR_RETURN(l.w_down, bind(f, p + "ffn_down.weight", {hp.n_ff, hp.n_embd}, false));
  }
  return Status::ok();
}

uint64_t Model::layer_bytes(int64_t il) const {
  const LayerWeights& l = layers_[static_cast<size_t>(il)];
  uint64_t sum = 0;
  for (const GgufTensorInfo* t : {l.attn_norm, l.wq, l.wk, l.wv, l.wo, l.bq, l.bk, l.bv, l.q_norm,
                                  l.k_norm, l.ffn_norm, l.w_gate, l.w_up, l.w_down}) {
    if (t != nullptr) sum += t->size_bytes;
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
