#include "server/group.h"

#include <algorithm>

#include "core/check.h"
#include "server/group_slot.h"

namespace strata::server {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

double ms_since(Clock::time_point t0) { return 1e3 * to_seconds(Clock::now() - t0); }

}  // namespace

PipelineGroup::PipelineGroup(int32_t index, std::unique_ptr<Context> context,
                             const GroupParams& params, Metrics& metrics)
    : index_(index),
      ctx_(std::move(context)),
      tok_(ctx_->model().tokenizer()),
      params_(params),
      n_ctx_(ctx_->params().n_ctx),
      metrics_(metrics) {
  STRATA_CHECK(params_.n_slots >= 1 && params_.n_slots <= ctx_->params().n_seq);
  for (int32_t i = 0; i < params_.n_slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  cache_copy_.lock()->resize(params_.n_slots);
  if (params_.cache_ram_bytes > 0) cache_ram_.emplace(params_.cache_ram_bytes);
}

PipelineGroup::~PipelineGroup() { stop(); }

void PipelineGroup::start() {
  STRATA_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { loop(); });
}

void PipelineGroup::stop() {
  inbox_.lock()->stopping = true;
  inbox_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PipelineGroup::post(Task task) {
  load_.fetch_add(task.params.n, std::memory_order_relaxed);
  queued_.fetch_add(1, std::memory_order_relaxed);
  {
    auto inbox = inbox_.lock();
    if (!inbox->stopping) {
      inbox->incoming.push_back(std::move(task));
      inbox_.notify_one();
      return;
    }
  }
  load_.fetch_sub(task.params.n, std::memory_order_relaxed);
  queued_.fetch_sub(1, std::memory_order_relaxed);
  Event e;
  e.kind = Event::Kind::kError;
  e.http_status = 503;
  e.error = "the server is shutting down";
  task.channel->push(std::move(e));
}

std::vector<SlotView> PipelineGroup::slot_views() const {
  std::vector<SlotView> out;
  for (const auto& s : slots_) {
    SlotView v;
    v.id = s->id;
    v.busy = s->busy_pub.load(std::memory_order_relaxed);
    v.task_id = s->task_pub.load(std::memory_order_relaxed);
    v.n_cached = s->cached_pub.load(std::memory_order_relaxed);
    v.n_lost = s->lost_pub.load(std::memory_order_relaxed);
    out.push_back(v);
  }
  return out;
}

size_t PipelineGroup::cache_match(const std::vector<int32_t>& prompt) const {
  size_t best = 0;
  auto cache = cache_copy_.lock();  // named: a range-for's temporary would unlock at once
  for (const auto& c : *cache) best = std::max(best, common_prefix(c, prompt));
  return best;
}

void PipelineGroup::publish(Slot& slot) {
  slot.busy_pub.store(slot.state != Slot::State::kIdle, std::memory_order_relaxed);
  slot.task_pub.store(slot.active ? slot.active->task.id : 0, std::memory_order_relaxed);
  slot.cached_pub.store(static_cast<int32_t>(slot.cache.size()), std::memory_order_relaxed);
  slot.lost_pub.store(static_cast<int32_t>(slot.lost.size()), std::memory_order_relaxed);
  if (params_.publish_cache) {
    (*cache_copy_.lock())[slot.id] = slot.cache;
  }
}

void PipelineGroup::loop() {
  for (;;) {
    const bool idle = waiting_.empty() && busy_.load(std::memory_order_relaxed) == 0;
    {
      auto inbox = inbox_.lock();
      if (idle) {
        inbox.wait([](const Inbox& in) {
          return in.stopping || !in.incoming.empty() || !in.control.empty();
        });
      }
      for (Task& t : inbox->incoming) waiting_.push_back(std::move(t));
      inbox->incoming.clear();
      if (inbox->stopping) break;
    }
    run_control();
    drop_cancelled();
    if (!suspended_.empty()) fail_waiting(suspended_);
    // First come, first served: a task that needs more slots than are idle holds the line.
    while (!waiting_.empty() && assign(waiting_.front())) waiting_.pop_front();
    step();
  }
  {
    auto inbox = inbox_.lock();
    for (Control& c : inbox->control) c.ran.set_value(false);
    inbox->control.clear();
  }
  for (auto& s : slots_) {
    if (s->state != Slot::State::kIdle) fail(*s, 503, "the server is shutting down");
  }
  for (Task& t : waiting_) {
    Event e;
    e.kind = Event::Kind::kError;
    e.http_status = 503;
    e.error = "the server is shutting down";
    t.channel->push(std::move(e));
  }
  waiting_.clear();
}

void PipelineGroup::drop_cancelled() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->channel->cancelled()) {
      load_.fetch_sub(it->params.n, std::memory_order_relaxed);
      queued_.fetch_sub(1, std::memory_order_relaxed);
      metrics_.requests_cancelled.fetch_add(1, std::memory_order_relaxed);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& s : slots_) {
    if (s->state == Slot::State::kIdle || !s->active->task.channel->cancelled()) continue;
    if (s->choice == 0) metrics_.requests_cancelled.fetch_add(1, std::memory_order_relaxed);
    release(*s);
  }
}

PipelineGroup::Slot* PipelineGroup::pick_slot(const std::vector<int32_t>& prompt,
                                              std::vector<Slot*>& idle) {
  size_t best = 0;
  size_t best_lcp = 0;
  for (size_t i = 0; i < idle.size(); ++i) {
    const size_t lcp = common_prefix(idle[i]->cache, prompt);
    if (lcp > best_lcp) {
      best_lcp = lcp;
      best = i;
    }
  }
  if (best_lcp == 0 ||
      static_cast<float>(best_lcp) < params_.cache_similarity * static_cast<float>(prompt.size())) {
    best = 0;
    for (size_t i = 1; i < idle.size(); ++i) {
      if (idle[i]->last_used < idle[best]->last_used) best = i;
    }
  }
  Slot* s = idle[best];
  idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(best));
  return s;
}

bool PipelineGroup::assign(Task& task) {
  std::vector<Slot*> idle;
  for (auto& s : slots_) {
    if (s->state == Slot::State::kIdle) idle.push_back(s.get());
  }
  const int32_t n = task.params.n;
  if (static_cast<int32_t>(idle.size()) < n) return false;

  auto active = std::make_shared<Active>();
  active->task = std::move(task);
  const std::vector<int32_t>& prompt = active->task.prompt;
  const GenParams& gp = active->task.params;

  auto setup = [&](Slot& s, int32_t choice) {
    s.active = active;
    s.choice = choice;
    s.followers.clear();
    s.lost.clear();
    SamplerParams sp = gp.sampling;
    sp.seed += static_cast<uint64_t>(choice);
    s.sampler.emplace(sp, static_cast<int32_t>(ctx_->n_vocab()));
    if (!gp.logit_bias.empty()) {
      std::vector<SampleBias> bias;
      for (const TokenBias& b : gp.logit_bias) {
        // The parser checked the ids against the tokenizer's vocabulary; the logits' rows are
        // the model's.
        if (b.token >= 0 && b.token < ctx_->n_vocab()) bias.push_back({b.token, b.bias});
      }
      s.sampler->set_logit_bias(std::move(bias));
    }
    for (int32_t t : prompt) s.sampler->accept(t);
    s.grammar.reset();
    s.lazy.reset();
    if (gp.grammar != nullptr && gp.grammar_trigger != nullptr) {
      s.lazy.emplace();
    } else if (gp.grammar != nullptr) {
      s.grammar.emplace(gp.grammar);
    }
    s.pending = -1;
    s.n_generated = 0;
    s.utf8 = Utf8Stream();
    s.stop = StopMatcher(gp.stop);
  };

  Slot* leader = pick_slot(prompt, idle);
  // At least the last prompt token is evaluated: its logits give the first sampled token.
  size_t keep =
      gp.cache_prompt ? std::min(common_prefix(leader->cache, prompt), prompt.size() - 1) : 0;
  cache_ram_store(*leader, keep);
  ctx_->seq_truncate(leader->id, static_cast<int32_t>(keep));
  leader->cache.resize(keep);
  if (gp.cache_prompt) keep = cache_ram_restore(*leader, prompt, keep);
  active->n_cached = static_cast<int32_t>(keep);
  setup(*leader, 0);
  leader->state = Slot::State::kPrompt;
  publish(*leader);
  for (int32_t i = 1; i < n; ++i) {
    Slot* f = idle[0];
    for (Slot* s : idle) {
      if (s->last_used < f->last_used) f = s;
    }
    idle.erase(std::find(idle.begin(), idle.end(), f));
    cache_ram_store(*f, 0);
    ctx_->seq_truncate(f->id, 0);
    f->cache.clear();
    setup(*f, i);
    f->state = Slot::State::kWait;
    leader->followers.push_back(f);
    publish(*f);
  }
  metrics_.prompt_tokens_cached.fetch_add(keep, std::memory_order_relaxed);
  queued_.fetch_sub(1, std::memory_order_relaxed);
  busy_.fetch_add(n, std::memory_order_relaxed);
  return true;
}

void PipelineGroup::step() {
  batch_.clear();
  int64_t rows = 0;
  int64_t n_busy = 0;
  for (auto& s : slots_) {
    s->row = -1;
    s->draw = -1;
    s->n_in_batch = 0;
    if (s->state != Slot::State::kIdle) ++n_busy;
    s->draft.clear();
    if (s->state != Slot::State::kGenerate) continue;
    batch_.add(s->pending, static_cast<int32_t>(s->cache.size()), s->id, true);
    s->row = rows++;
    s->n_in_batch = 1;
  }
  int64_t budget = std::max<int64_t>(0, params_.n_batch - batch_.size());
  // Drafts (speculative decoding) before prompt chunks: a slot that generates is the one a
  // client is waiting on token by token.
  make_drafts(budget);
  for (auto& s : slots_) {
    if (s->draft.empty()) continue;
    s->draft_row = rows;
    const auto at = static_cast<int32_t>(s->cache.size()) + 1;
    for (size_t i = 0; i < s->draft.size(); ++i) {
      batch_.add(s->draft[i], at + static_cast<int32_t>(i), s->id, true);
    }
    rows += static_cast<int64_t>(s->draft.size());
    s->n_in_batch += static_cast<int32_t>(s->draft.size());
  }
  for (auto& s : slots_) {
    if (s->state != Slot::State::kPrompt || budget == 0) continue;
    const std::vector<int32_t>& prompt = s->active->task.prompt;
    const int64_t done = static_cast<int64_t>(s->cache.size());
    const int64_t take = std::min<int64_t>(static_cast<int64_t>(prompt.size()) - done, budget);
    for (int64_t j = done; j < done + take; ++j) {
      const bool last = j + 1 == static_cast<int64_t>(prompt.size());
      batch_.add(prompt[j], static_cast<int32_t>(j), s->id, last);
      if (last) s->row = rows++;
    }
    s->n_in_batch = static_cast<int32_t>(take);
    budget -= take;
  }
  if (batch_.size() == 0) return;

  metrics_.decode_steps.fetch_add(1, std::memory_order_relaxed);
  metrics_.batch_tokens.observe(static_cast<double>(batch_.size()));
  metrics_.busy_slots.observe(static_cast<double>(n_busy));
  decode_steps_.fetch_add(1, std::memory_order_relaxed);
  busy_summed_.fetch_add(static_cast<uint64_t>(n_busy), std::memory_order_relaxed);
  if (params_.backend_sampling) add_draws();
  if (Status st = ctx_->decode(batch_, params_.backend_sampling ? &draws_ : nullptr); !st) {
    // The context rolled its KV back, so every slot's cache still matches it. Fail the tasks
    // that had tokens in this batch; the others go on.
    metrics_.decode_errors.fetch_add(1, std::memory_order_relaxed);
    for (auto& s : slots_) {
      if (s->state != Slot::State::kIdle && s->n_in_batch > 0) {
        fail(*s, st.kind() == ErrorKind::kUnavailable ? 503 : 500,
             "decode failed: " + st.message());
      }
    }
    kv_used_.store(ctx_->kv_used(), std::memory_order_relaxed);
    return;
  }

  for (auto& s : slots_) {
    if (s->n_in_batch == 0) continue;
    if (s->state == Slot::State::kGenerate) {
      s->cache.push_back(s->pending);
    } else {
      const std::vector<int32_t>& prompt = s->active->task.prompt;
      const size_t done = s->cache.size();
      s->cache.insert(s->cache.end(), prompt.begin() + static_cast<std::ptrdiff_t>(done),
                      prompt.begin() + static_cast<std::ptrdiff_t>(done + s->n_in_batch));
      metrics_.prompt_tokens.fetch_add(s->n_in_batch, std::memory_order_relaxed);
    }
  }
  for (auto& s : slots_) {
    if (s->row < 0 || s->state == Slot::State::kIdle) continue;
    const float* logits = ctx_->logits(s->row);
    if (s->state == Slot::State::kPrompt) {
      // The prompt is in: the followers share its KV cells and sample from the same logits.
      for (Slot* f : s->followers) {
        if (f->state != Slot::State::kWait) continue;
        ctx_->seq_copy(s->id, f->id, static_cast<int32_t>(s->cache.size()));
        f->cache = s->cache;
        f->state = Slot::State::kGenerate;
        sample_slot(*f, logits);
      }
      s->followers.clear();
      s->state = Slot::State::kGenerate;
    }
    if (s->draft.empty()) {
      sample_slot(*s, logits);
    } else {
      check_draft(*s);
    }
  }
  // A slot released before its draft was checked (a choice of a task that another choice
  // failed) still holds the draft's KV: it goes, so that every slot's KV is its tokens.
  for (auto& s : slots_) {
    if (s->draft.empty()) continue;
    ctx_->seq_truncate(s->id, static_cast<int32_t>(s->cache.size()));
    s->draft.clear();
  }
  kv_used_.store(ctx_->kv_used(), std::memory_order_relaxed);
}

int64_t PipelineGroup::draft_limit(const Slot& s) const {
  const GenParams& gp = s.active->task.params;
  int64_t most = gp.spec_n_max >= 0 ? gp.spec_n_max : params_.spec.n_max;
  // Not past n_predict: the step keeps at most the draft and one more token.
  if (gp.n_predict >= 0) most = std::min<int64_t>(most, gp.n_predict - s.n_generated - 1);
  // Within the slot: every token the step keeps fits it, so that a draft neither takes cells
  // of the other slots' share nor meets a context shift (sample_slot shifts only once the
  // slot is full, which this leaves to a later step).
  return std::min<int64_t>(most, params_.n_ctx_slot - static_cast<int64_t>(s.cache.size()) - 2);
}

void PipelineGroup::make_drafts(int64_t& budget) {
  const SpecParams& sp = params_.spec;
  if (sp.type == SpecType::kNone) return;
  // A draft shorter than n_min is not checked.
  auto keep_if_long = [&sp](Slot& s) {
    const GenParams& gp = s.active->task.params;
    const int32_t n_min = gp.spec_n_min >= 0 ? gp.spec_n_min : sp.n_min;
    if (static_cast<int32_t>(s.draft.size()) < n_min) s.draft.clear();
  };
  // A draft model drafts for every slot in one batch per position.
  std::vector<Slot*> asking;
  std::vector<DraftRequest> requests;
  for (auto& s : slots_) {
    if (s->state != Slot::State::kGenerate || budget == 0) continue;
    const int64_t most = std::min(draft_limit(*s), budget);
    if (most <= 0) continue;
    s->cache.push_back(s->pending);  // the slot's tokens and the pending one
    if (sp.type == SpecType::kNgram) {
      s->draft = ngram_draft(s->cache, sp.ngram_n,
                             static_cast<int32_t>(std::min<int64_t>(sp.ngram_m, most)));
      s->cache.pop_back();
      keep_if_long(*s);
      budget -= static_cast<int64_t>(s->draft.size());
    } else if (params_.draft != nullptr) {
      const GenParams& gp = s->active->task.params;
      asking.push_back(s.get());
      requests.push_back({s->id,
                          {},
                          static_cast<int32_t>(most),
                          gp.spec_p_min >= 0.0f ? gp.spec_p_min : sp.p_min});
      budget -= most;
    } else {
      s->cache.pop_back();
    }
  }
  if (!asking.empty()) {
    for (size_t i = 0; i < asking.size(); ++i) requests[i].history = asking[i]->cache;
    Result<std::vector<std::vector<int32_t>>> drafts = params_.draft->draft(requests);
    for (size_t i = 0; i < asking.size(); ++i) {
      asking[i]->cache.pop_back();
      // A draft model that fails costs this step its drafts, nothing else.
      if (drafts.is_ok()) asking[i]->draft = std::move((*drafts)[i]);
      keep_if_long(*asking[i]);
      // What a shorter draft left of its share goes back to the prompts.
      budget += requests[i].n_max - static_cast<int64_t>(asking[i]->draft.size());
    }
    if (!drafts.is_ok()) metrics_.spec_draft_errors.fetch_add(1, std::memory_order_relaxed);
  }
}

void PipelineGroup::check_draft(Slot& s) {
  size_t accepted = 0;
  for (size_t i = 0;; ++i) {
    sample_slot(s, ctx_->logits(i == 0 ? s.row : s.draft_row + static_cast<int64_t>(i) - 1));
    if (s.state != Slot::State::kGenerate) break;  // finished (its cache is what it kept)
    if (i == s.draft.size() || s.pending != s.draft[i]) break;
    s.cache.push_back(s.draft[i]);
    ++accepted;
  }
  // The KV of the draft past what was kept goes (finishing touches only the slot's tokens).
  ctx_->seq_truncate(s.id, static_cast<int32_t>(s.cache.size()));
  metrics_.spec_drafts.fetch_add(1, std::memory_order_relaxed);
  metrics_.spec_draft_tokens.fetch_add(s.draft.size(), std::memory_order_relaxed);
  metrics_.spec_accepted_tokens.fetch_add(accepted, std::memory_order_relaxed);
  s.draft.clear();
}

// The slots that sample after this step: every slot with an output row, and the followers of
// a leader whose prompt ends in it (they sample from the leader's row). Each draws its uniform
// now, as Sampler::sample would after the decode.
void PipelineGroup::add_draws() {
  draws_.clear();
  auto add = [&](Slot& s, int64_t row) {
    if (s.active->task.params.n_predict == 0) return;  // finishes without sampling
    if (!s.draft.empty()) {  // a draft's rows are sampled in turn, on the CPU
      draws_.read_logits(static_cast<int32_t>(row));
      for (size_t i = 0; i < s.draft.size(); ++i) {
        draws_.read_logits(static_cast<int32_t>(s.draft_row + static_cast<int64_t>(i)));
      }
      return;
    }
    if (s.grammar) {  // its mask is made on the CPU, from the logits
      draws_.read_logits(static_cast<int32_t>(row));
      return;
    }
    s.draw = draws_.add(static_cast<int32_t>(row), *s.sampler, s.active->task.params.logprobs);
    if (s.draw < 0) draws_.read_logits(static_cast<int32_t>(row));
  };
  for (auto& s : slots_) {
    if (s->row < 0 || s->state == Slot::State::kIdle) continue;
    if (s->state == Slot::State::kPrompt) {
      for (Slot* f : s->followers) {
        if (f->state == Slot::State::kWait) add(*f, s->row);
      }
    }
    add(*s, s->row);
  }
}

void PipelineGroup::sample_slot(Slot& s, const float* logits) {
  const Task& task = s.active->task;
  const GenParams& gp = task.params;
  if (gp.n_predict == 0) {
    finish(s, "length");
    return;
  }
  int32_t token;
  if (s.draw >= 0) {
    token = draws_.token(s.draw);
    metrics_.backend_sampled_rows.fetch_add(1, std::memory_order_relaxed);
  } else if (s.grammar) {
    if (Status st = grammar_mask(s); !st) {
      fail(s, 400, st.message());  // the request's grammar, at a limit or a dead end
      return;
    }
    token = s.sampler->sample_allowed(logits, s.allowed.data());
    if (!tok_.is_eog(token)) {
      // The piece the mask judged (the vocabulary holds every token's), not a new copy.
      if (Status st = s.grammar->accept(grammar_vocab().piece(token)); !st) {
        fail(s, 500, "grammar: the sampled token was refused: " + st.message());
        return;
      }
    }
  } else {
    token = s.sampler->sample(logits);
    if (params_.backend_sampling) {
      metrics_.backend_sampling_fallback_rows.fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.sampler->accept(token);
  ++s.n_generated;
  metrics_.generated_tokens.fetch_add(1, std::memory_order_relaxed);
  if (s.n_generated == 1) {
    s.t_first = Clock::now();
    metrics_.ttft_seconds.observe(to_seconds(s.t_first - task.t_arrival));
  }
  // With a grammar, an end-of-generation token was allowed only at the end of a sentence.
  if (tok_.is_eog(token) && (!gp.ignore_eos || s.grammar)) {
    s.stop_type = "eos";
    finish(s, "stop");
    return;
  }
  if (s.lazy) start_lazy_grammar(s, token);
  Event e;
  e.index = s.choice;
  e.ids.push_back(token);
  if (gp.logprobs && s.draw >= 0) {
    TokenOut out{token, draws_.logprob(s.draw), {}};
    draws_.top(s.draw, out.top);
    e.tokens.push_back(std::move(out));
  } else if (gp.logprobs) {
    e.tokens.push_back(TokenOut{token, s.sampler->last_logprob(), s.sampler->last_top()});
  }
  StopMatcher::Out out =
      s.stop.push(s.utf8.push(tok_.token_to_piece(token, params_.render_special)));
  s.seen_newline = s.seen_newline || out.text.find('\n') != std::string::npos;
  e.text = std::move(out.text);
  task.channel->push(std::move(e));
  if (out.stopped) {
    s.utf8 = Utf8Stream();
    s.stop_type = "word";
    s.stopping_word = std::move(out.word);
    finish(s, "stop");
    return;
  }
  if (gp.n_predict > 0 && s.n_generated >= gp.n_predict) {
    finish(s, "length");
    return;
  }
  if (gp.t_max_predict_ms > 0 && s.seen_newline &&
      ms_since(s.t_first) > static_cast<double>(gp.t_max_predict_ms)) {
    finish(s, "length");
    return;
  }
  // The next step would put `token` at position cache.size().
  if (static_cast<int64_t>(s.cache.size()) >= params_.n_ctx_slot) {
    Result<bool> shifted = params_.context_shift ? shift(s) : Result<bool>(false);
    if (!shifted.is_ok()) {
      fail(s, 500, "context shift failed: " + shifted.status().message());
      return;
    }
    if (!*shifted) {
      finish(s, "length");
      return;
    }
  }
  s.pending = token;
}

void PipelineGroup::start_lazy_grammar(Slot& s, int32_t token) {
  const GenParams& gp = s.active->task.params;
  std::string& text = s.lazy->text;
  text += grammar_vocab().piece(token);  // the vocabulary's copy: no string per token
  const TriggerScan scan = scan_trigger(*gp.grammar_trigger, text, s.lazy->scanned);
  if (scan.state == TriggerScan::State::kWait) return;
  if (scan.state == TriggerScan::State::kStart) {
    s.grammar.emplace(gp.grammar);
    // The trigger word, and what its token wrote after it, are the sentence's first text. A
    // token that wrote past the word into what the grammar refuses leaves the reply free, as
    // if the word had not come (the reply parser reads what there is).
    if (!s.grammar->accept(std::string_view(text).substr(scan.at)).is_ok()) s.grammar.reset();
  }
  s.lazy.reset();
}

const GrammarVocab& PipelineGroup::grammar_vocab() {
  if (grammar_vocab_ == nullptr) {
    const auto n = static_cast<int32_t>(ctx_->n_vocab());
    std::vector<std::string> pieces(static_cast<size_t>(n));
    std::vector<bool> never(static_cast<size_t>(n));
    for (int32_t t = 0; t < n; ++t) {
      // Control tokens print nothing: a grammar never allows them (end of generation aside).
      pieces[static_cast<size_t>(t)] = tok_.token_to_piece(t);
      never[static_cast<size_t>(t)] = tok_.is_eog(t) || pieces[static_cast<size_t>(t)].empty();
      if (tok_.is_eog(t)) eog_tokens_.push_back(t);
    }
    grammar_vocab_ = std::make_unique<GrammarVocab>(std::move(pieces), std::move(never));
  }
  return *grammar_vocab_;
}

Status PipelineGroup::grammar_mask(Slot& s) {
  STRATA_RETURN_IF_ERROR(s.grammar->allowed(grammar_vocab(), s.allowed));
  bool any = false;
  for (uint8_t a : s.allowed) any = any || a != 0;
  if (s.grammar->complete()) {
    for (int32_t t : eog_tokens_) s.allowed[static_cast<size_t>(t)] = 1;
    any = any || !eog_tokens_.empty();
  }
  if (!any) {
    return invalid_argument(
        "grammar: no token of the vocabulary can continue the text, which is not yet a whole "
        "sentence of the grammar");
  }
  return Status::ok();
}

void PipelineGroup::finish(Slot& s, const std::string& reason) {
  const std::shared_ptr<Active> active = s.active;  // alive past release(s)
  const Task& task = active->task;
  Event text;
  text.index = s.choice;
  std::string finish_reason = reason;
  StopMatcher::Out out = s.stop.push(s.utf8.flush());
  text.text = std::move(out.text);
  if (out.stopped) {
    finish_reason = "stop";
    s.stop_type = "word";
    s.stopping_word = std::move(out.word);
  } else {
    text.text += s.stop.flush();
  }
  if (!text.text.empty()) task.channel->push(std::move(text));

  Event done;
  done.kind = Event::Kind::kDone;
  done.index = s.choice;
  done.finish_reason = finish_reason;
  done.n_prompt = static_cast<int32_t>(task.prompt.size());
  done.n_cached = s.active->n_cached;
  done.n_generated = s.n_generated;
  done.stop_type = s.stop_type;
  done.stopping_word = std::move(s.stopping_word);
  done.truncated = s.truncated;
  s.stop_type = "limit";
  s.stopping_word.clear();
  s.truncated = false;
  s.seen_newline = false;
  const Clock::time_point now = Clock::now();
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  done.prompt_ms = ms((s.n_generated > 0 ? s.t_first : now) - task.t_arrival);
  done.predicted_ms = s.n_generated > 0 ? ms(now - s.t_first) : 0.0;
  metrics_.prompt_us.fetch_add(static_cast<uint64_t>(done.prompt_ms * 1000),
                               std::memory_order_relaxed);
  metrics_.predicted_us.fetch_add(static_cast<uint64_t>(done.predicted_ms * 1000),
                                  std::memory_order_relaxed);
  if (s.n_generated > 1) {
    metrics_.tpot_seconds.observe(to_seconds(Clock::now() - s.t_first) / (s.n_generated - 1));
  }
  // The slot is free before the client hears the request is done: a /metrics or /slots
  // read after the reply sees it idle.
  release(s);
  task.channel->push(std::move(done));
}

void PipelineGroup::fail(Slot& failed, int http_status, const std::string& message) {
  const std::shared_ptr<Active> active = failed.active;
  Event e;
  e.kind = Event::Kind::kError;
  e.http_status = http_status;
  e.error = message;
  metrics_.requests_failed.fetch_add(1, std::memory_order_relaxed);
  for (auto& s : slots_) {
    if (s->active == active) release(*s);
  }
  active->task.channel->push(std::move(e));  // after the slots are free, as in finish()
}

void PipelineGroup::release(Slot& s) {
  s.state = Slot::State::kIdle;
  s.active.reset();
  s.followers.clear();
  s.sampler.reset();
  s.grammar.reset();
  s.lazy.reset();
  s.last_used = ++use_clock_;
  load_.fetch_sub(1, std::memory_order_relaxed);
  busy_.fetch_sub(1, std::memory_order_relaxed);
  publish(s);
}

// --- Context shift and the RAM cache of prompts -----------------------------------------------

Result<bool> PipelineGroup::shift(Slot& s) {
  // llama-server's policy: keep n_keep tokens (the prompt for -1, one more for a BOS, at most
  // the slot size less 4) and drop half of the rest.
  const int32_t n_past = static_cast<int32_t>(s.cache.size());
  int32_t n_keep =
      params_.n_keep < 0 ? static_cast<int32_t>(s.active->task.prompt.size()) : params_.n_keep;
  if (tok_.add_bos()) ++n_keep;
  n_keep = std::max(0, std::min(params_.n_ctx_slot - 4, n_keep));
  const int32_t n_discard = (n_past - n_keep) / 2;
  if (n_discard < 1) return false;
  Status st = ctx_->seq_shift(s.id, n_keep, n_discard);
  s.cache = ctx_->seq_tokens(s.id);
  publish(s);
  if (!st.is_ok()) return st;
  s.truncated = true;
  return true;
}

void PipelineGroup::cache_ram_store(Slot& s, size_t keep) {
  if (!cache_ram_ || s.cache.size() <= keep) return;
  // A failed save only means that the prompt is evaluated again when it comes back.
  Result<HostBytes> state = ctx_->seq_state_save(s.id);
  if (state.is_ok()) cache_ram_->insert(s.cache, std::move(state).value());
}

size_t PipelineGroup::cache_ram_restore(Slot& s, const std::vector<int32_t>& prompt, size_t keep) {
  if (!cache_ram_ || prompt.size() < 2) return keep;
  const std::optional<PromptCache::Hit> hit = cache_ram_->lookup(prompt, keep + 1);
  // At least the last prompt token is evaluated.
  const size_t n = hit ? std::min(hit->n_match, prompt.size() - 1) : 0;
  if (n <= keep) return keep;
  if (!ctx_->seq_state_restore(s.id, *hit->state).is_ok()) {
    // Refused (no room for the whole state): the sequence is as it was. A device failure
    // leaves it empty.
    s.cache = ctx_->seq_tokens(s.id);
    return s.cache.size();
  }
  ctx_->seq_truncate(s.id, static_cast<int32_t>(n));
  s.cache.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

// --- Slot actions -------------------------------------------------------------------------------

Status PipelineGroup::on_decode_thread(std::function<void()> fn) {
  std::future<bool> ran;
  {
    auto inbox = inbox_.lock();
    if (inbox->stopping) return unavailable("the server is shutting down");
    inbox->control.push_back(Control{std::move(fn), {}});
    ran = inbox->control.back().ran.get_future();
  }
  inbox_.notify_one();
  return ran.get() ? Status::ok() : unavailable("the server is shutting down");
}

void PipelineGroup::run_control() {
  std::deque<Control> todo;
  todo.swap(inbox_.lock()->control);
  for (Control& c : todo) {
    c.fn();
    c.ran.set_value(true);
  }
  kv_used_.store(ctx_->kv_used(), std::memory_order_relaxed);
}

Result<PipelineGroup::Slot*> PipelineGroup::idle_slot(int32_t id) {
  if (id < 0 || id >= params_.n_slots) {
    return out_of_range("slot id " + std::to_string(id) + " outside [0, " +
                        std::to_string(params_.n_slots) + ")");
  }
  Slot& s = *slots_[static_cast<size_t>(id)];
  if (s.state != Slot::State::kIdle) {
    return unavailable("slot " + std::to_string(id) + " is busy with a request");
  }
  return &s;
}

Result<SlotFileResult> PipelineGroup::slot_action(
    int32_t id, const std::function<Result<SlotFileResult>(Slot&)>& action) {
  Result<SlotFileResult> out = internal_error("not run");
  STRATA_RETURN_IF_ERROR(on_decode_thread([&] {
    const Clock::time_point t0 = Clock::now();
    Result<Slot*> s = idle_slot(id);
    out = s.is_ok() ? action(**s) : Result<SlotFileResult>(s.status());
    if (out.is_ok()) out->ms = ms_since(t0);
  }));
  return out;
}

Result<SlotFileResult> PipelineGroup::slot_save(int32_t id, const std::string& path) {
  return slot_action(id, [&](Slot&) -> Result<SlotFileResult> {
    STRATA_ASSIGN_OR_RETURN(HostBytes state, ctx_->seq_state_save(id));
    STRATA_RETURN_IF_ERROR(seq_state_write_file(path, state));
    return SlotFileResult{ctx_->seq_len(id), state.size(), 0};
  });
}

Result<SlotFileResult> PipelineGroup::slot_restore(int32_t id, const std::string& path) {
  return slot_action(id, [&](Slot& slot) -> Result<SlotFileResult> {
    STRATA_ASSIGN_OR_RETURN(HostBytes bytes,
                            seq_state_read_file(path, ctx_->seq_state_max_bytes()));
    Result<SeqStateHeader> h = seq_state_parse_header(bytes);
    if (h.is_ok() && h->n_tokens > static_cast<uint32_t>(params_.n_ctx_slot)) {
      return out_of_range(path + ": a state of " + std::to_string(h->n_tokens) +
                          " tokens, a slot holds " + std::to_string(params_.n_ctx_slot));
    }
    const Status r = ctx_->seq_state_restore(id, bytes);
    slot.cache = ctx_->seq_tokens(id);
    publish(slot);
    if (!r.is_ok()) return r.with_context(path);
    return SlotFileResult{ctx_->seq_len(id), bytes.size(), 0};
  });
}

Result<SlotFileResult> PipelineGroup::slot_erase(int32_t id) {
  return slot_action(id, [&](Slot& slot) -> Result<SlotFileResult> {
    const int32_t n = ctx_->seq_len(id);
    ctx_->seq_truncate(id, 0);
    slot.cache.clear();
    publish(slot);
    return SlotFileResult{n, 0, 0};
  });
}

std::pair<uint64_t, size_t> PipelineGroup::cache_ram_use() {
  std::pair<uint64_t, size_t> use{0, 0};
  (void)on_decode_thread([&] {
    if (cache_ram_) use = {cache_ram_->bytes(), cache_ram_->size()};
  });
  return use;
}

Status PipelineGroup::sleep() {
  Status out;
  STRATA_RETURN_IF_ERROR(on_decode_thread([&] {
    if (!waiting_.empty() || busy_.load(std::memory_order_relaxed) > 0) {
      out = unavailable("pipeline group " + std::to_string(index_) + " is busy");
      return;
    }
    for (auto& s : slots_) {
      cache_ram_store(*s, 0);
      s->cache.clear();
      publish(*s);
    }
    ctx_->sleep();
  }));
  return out;
}

Status PipelineGroup::wake() {
  Status out;
  STRATA_RETURN_IF_ERROR(on_decode_thread([&] { out = ctx_->wake(); }));
  return out;
}

}  // namespace strata::server
