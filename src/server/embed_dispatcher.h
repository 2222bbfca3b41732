// The server of embeddings (`strata serve --embedding`), as llama-server serves them with that
// flag: /v1/embeddings (OpenAI's), /embeddings and /embedding (llama.cpp's own), beside
// /health, /models and /tokenize; the generation endpoints answer 501.
//
// One context of embeddings (engine/context.h) holds -np sequences of the -c cells; the inputs
// of the requests that arrive while a step runs are decoded together in the next, as many a
// decode as fit, and pooled and normalised as engine/embedding.h says. Every request body is
// untrusted: its inputs, their count and length are checked before anything is decoded, and a
// refused one is a 400 naming the field and the limit.
#pragma once

#include <condition_variable>
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

  // A request waiting for its vectors. The first request to find no step running runs one for
  // every request queued by then, and hands each its vectors.
  struct Job {
    const std::vector<std::vector<int32_t>>* inputs;
    int normalize;
    Result<std::vector<std::vector<float>>> result = unavailable("not run");
    bool done = false;
  };
  void run_jobs(const std::vector<Job*>& jobs);

  EmbeddingServing serving_;
  std::unique_ptr<Context> ctx_;  // used by the running step's thread only
  const Tokenizer& tok_;
  Metrics& metrics_;
  std::mutex mu_;  // what follows
  std::condition_variable done_;
  std::vector<Job*> queue_;
  bool running_ = false;
  bool stopped_ = false;
};

}  // namespace strata::server
