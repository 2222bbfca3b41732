// PipelineGroup's recovery from a lost worker: suspend, resume and slot rebuild.
#include <algorithm>

#include "server/group.h"
#include "server/group_slot.h"

namespace strata::server {
void PipelineGroup::fail_waiting(const std::string& message) {
  for (Task& t : waiting_) {
    load_.fetch_sub(t.params.n, std::memory_order_relaxed);
    queued_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.requests_failed.fetch_add(1, std::memory_order_relaxed);
    Event e;
    e.kind = Event::Kind::kError;
    e.http_status = 503;
    e.error = message;
    t.channel->push(std::move(e));
  }
  waiting_.clear();
}

Status PipelineGroup::suspend(const std::string& reason) {
  return on_decode_thread([&] {
    suspended_ = reason;
    for (auto& s : slots_) {
      if (s->state != Slot::State::kIdle) fail(*s, 503, reason);
    }
    fail_waiting(reason);
    for (auto& s : slots_) {
      if (!s->cache.empty()) s->lost = std::move(s->cache);
      s->cache.clear();
      publish(*s);
    }
    ctx_->sleep();
  });
}

Status PipelineGroup::resume(const std::vector<const Device*>& renewed, bool wake) {
  Status out;
  STRATA_RETURN_IF_ERROR(on_decode_thread([&] {
    // Woken meanwhile (a slot action woke the sleeping model): on the old streams.
    if (!ctx_->asleep()) ctx_->sleep();
    for (const Device* d : renewed) ctx_->renew_streams(*d);
    if (wake) out = ctx_->wake();
    if (out.is_ok()) suspended_.clear();
  }));
  return out;
}

Result<SlotFileResult> PipelineGroup::slot_rebuild(int32_t id) {
  return slot_action(id, [&](Slot& slot) -> Result<SlotFileResult> {
    if (!suspended_.empty()) return unavailable(suspended_);
    const std::vector<int32_t> tokens = slot.lost;
    if (tokens.empty()) return SlotFileResult{};
    // The same tokens at the same positions give the same K/V rows whatever the batch: the
    // cache is what it was before the loss, bit for bit.
    ctx_->seq_truncate(id, 0);
    slot.cache.clear();
    Batch b;
    for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(params_.n_batch)) {
      b.clear();
      const size_t end = std::min(tokens.size(), at + static_cast<size_t>(params_.n_batch));
      for (size_t j = at; j < end; ++j) b.add(tokens[j], static_cast<int32_t>(j), id, false);
      if (Status st = ctx_->decode(b); !st.is_ok()) {
        slot.cache = ctx_->seq_tokens(id);
        publish(slot);
        return st.with_context("rebuilding slot " + std::to_string(id));
      }
      slot.cache.insert(slot.cache.end(), tokens.begin() + static_cast<std::ptrdiff_t>(at),
                        tokens.begin() + static_cast<std::ptrdiff_t>(end));
    }
    metrics_.prompt_tokens.fetch_add(tokens.size(), std::memory_order_relaxed);
    slot.lost.clear();
    publish(slot);
    return SlotFileResult{static_cast<int32_t>(tokens.size()), 0, 0};
  });
}

}  // namespace strata::server
