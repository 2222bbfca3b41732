// The server of embeddings (`strata serve --embedding`), as llama-server serves them with that
// flag: /v1/embeddings (OpenAI's), /embeddings and /embedding (llama.cpp's own), beside
// /health, /models and /tokenize; the generation endpoints answer 501.
//
// One context of embeddings (engine/context.h) holds -np sequences of the -c cells; a request's
// inputs are decoded together, as many as fit, and pooled and normalised as engine/embedding.h
// says. Requests take the context in turn. Every request body is untrusted: its inputs, their
// count and length are checked before anything is decoded, and a refused one is a 400 naming
// the field and the limit.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/embedding.h"
#include "server/api.h"
#include "server/dispatcher.h"
#include "server/metrics.h"

namespace strata::server {

struct EmbeddingServing {
  std::string model_name;
  Pooling pooling = Pooling::kNone;
  int embd_normalize = 2;  // --embd-normalize: the default of a request's embd_normalize
  // The workers' state for /health (empty: none).
  std::function<Status()> backend_status;
};

// Most inputs one request may carry (OpenAI's limit is 2048).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

class EmbeddingDispatcher : public Dispatcher {
 public:
  EmbeddingDispatcher(EmbeddingServing serving, std::unique_ptr<Context> context, Metrics& metrics);
  std::vector<Route> routes() override;
  void stop() override;

 private:
  // The vectors of the inputs (token ids, each checked against the vocabulary and the
  // context): one per input, or each input's every token under pooling none (unnormalised,
  // as llama-server gives them).
  Result<std::vector<std::vector<float>>> embed(const std::vector<std::vector<int32_t>>& inputs,
                                                int normalize);
  void embeddings(const httplib::Request& req, httplib::Response& res, bool openai);

  EmbeddingServing serving_;
  std::mutex mu_;  // the context, one request at a time
  std::unique_ptr<Context> ctx_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  bool stopped_ = false;
};

}  // namespace strata::server
