// A sequence's state as bytes: save then restore continues with the same bytes of logits (on
// one device, and with a stage on a worker over loopback), and a truncated, corrupt or foreign
// state is refused with the sequence left as it was.
#include "engine/seq_state.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/cpu_backend.h"
#include "core/rng.h"
#include "engine/context.h"
#include "rpc/remote_backend.h"
#include "rpc/worker.h"
#include "unit/engine_testing.h"
#include "unit/synth_file.h"

namespace strata {
namespace {

using testing::argmax;
using testing::cpu_device;

SynthParams small(const std::string& arch, uint64_t seed) {
  SynthParams p;
  p.arch = arch;
  if (arch == "phi3") {
    p.rope_scaling = "longrope";
    p.rope_orig_ctx = 16;
  }
  if (arch == "gemma3") p.n_swa = 5;
  p.n_embd = 128;
  p.n_layer = arch == "gemma3" ? 7 : 3;
  p.n_head = 4;
  p.n_head_kv = 2;
  p.n_ff = 256;
  p.n_vocab = 320;
  p.dtype = DType::kQ8_0;
  p.seed = seed;
  return p;
}

std::string model_file(const std::string& arch, uint64_t seed = 5) {
  return testing::synth_file("seqstate_" + arch + "_" + std::to_string(seed), small(arch, seed));
}

std::unique_ptr<Engine> engine_on(const std::string& path,
                                  std::vector<std::unique_ptr<Device>> devices,
                                  std::vector<double> split) {
  auto model = Model::open(path);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return nullptr;
  EngineOptions eo;
  eo.split = std::move(split);
  auto e = Engine::create(std::move(model).value(), std::move(devices), eo);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

std::unique_ptr<Engine> local_engine(const std::string& path) {
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU"));
  return engine_on(path, std::move(d), {1});
}

std::unique_ptr<Context> state_context(const Engine& e, int64_t n_ctx = 128, int32_t n_seq = 4,
                                       DType kv = DType::kF16) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_seq = n_seq;
  cp.n_batch = 7;  // several micro-batches per prompt
  cp.kv_dtype = kv;
  auto c = Context::create(e, cp);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

std::vector<int32_t> state_prompt(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(2 + (seed * 97 + i * 31) % 300);
  return p;
}

// Evaluates the prompts (one per sequence 0..n-1) together, so that their cells interleave.
void prefill(Context& ctx, const std::vector<std::vector<int32_t>>& prompts) {
  Batch b;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  for (size_t i = 0; i < longest; ++i) {
    for (size_t s = 0; s < prompts.size(); ++s) {
      if (i < prompts[s].size()) {
        b.add(prompts[s][i], static_cast<int32_t>(i), static_cast<int32_t>(s), false);
      }
    }
  }
  ASSERT_TRUE(ctx.decode(b).is_ok());
}

// Greedy continuation of `seq` from `next` (not yet in the cache) for n steps; every logit row,
// bytewise.
std::vector<uint8_t> continue_greedy(Context& ctx, int32_t seq, int32_t next, int n) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < n; ++i) {
    Batch b;
    b.add(next, ctx.seq_len(seq), seq, true);
    const Status s = ctx.decode(b);
    EXPECT_TRUE(s.is_ok()) << s.message();
    if (!s.is_ok()) return bytes;
    const float* l = ctx.logits(0);
    const auto* p = reinterpret_cast<const uint8_t*>(l);
    bytes.insert(bytes.end(), p, p + 4 * ctx.n_vocab());
    next = argmax(l, ctx.n_vocab());
  }
  return bytes;
}

// A context whose sequence 1 holds a prompt (interleaved with sequence 0's) and a state of it.
struct Saved {
  std::unique_ptr<Context> ctx;
  HostBytes state;
  std::vector<uint8_t> reference;  // the continuation of sequence 1 after the save
};

Saved save_one(const Engine& e, int64_t n_ctx = 128, DType kv = DType::kF16) {
  Saved s;
  s.ctx = state_context(e, n_ctx, 4, kv);
  prefill(*s.ctx, {state_prompt(1, 13), state_prompt(2, 29)});
  auto state = s.ctx->seq_state_save(1);
  EXPECT_TRUE(state.is_ok()) << state.status().message();
  if (state.is_ok()) s.state = std::move(state).value();
  s.reference = continue_greedy(*s.ctx, 1, 7, 6);
  return s;
}

TEST(SeqState, SaveThenRestoreContinuesWithTheSameBytes) {
  for (const std::string arch : {"llama", "phi3", "gemma3"}) {
    SCOPED_TRACE(arch);
    auto e = local_engine(model_file(arch));
    ASSERT_TRUE(e);
    Saved s = save_one(*e);
    ASSERT_FALSE(s.reference.empty());
    EXPECT_EQ(s.state.size(),
              kSeqStateHeaderBytes + seq_state_payload_bytes(s.ctx->fingerprint(), 29));

    // Into another sequence of a context with other cells in use, so that the restored rows
    // land in other cells than they were saved from.
    auto other = state_context(*e);
    prefill(*other, {state_prompt(3, 5)});
    ASSERT_TRUE(other->seq_state_restore(2, s.state).is_ok());
    EXPECT_EQ(other->seq_len(2), 29);
    EXPECT_EQ(other->seq_tokens(2), state_prompt(2, 29));
    EXPECT_EQ(continue_greedy(*other, 2, 7, 6), s.reference);

    // A restore replaces what the sequence held; restoring twice gives the same again.
    ASSERT_TRUE(other->seq_state_restore(2, s.state).is_ok());
    EXPECT_EQ(continue_greedy(*other, 2, 7, 6), s.reference);
  }
}

// CPU for the first layers, a worker over loopback for the rest and the output.
std::unique_ptr<Engine> split_engine(const std::string& path, rpc::Worker& worker) {
  auto remote = testing::remote_device_on(worker);
  EXPECT_TRUE(remote.is_ok()) << remote.status().message();
  if (!remote.is_ok()) return nullptr;
  std::vector<std::unique_ptr<Device>> d;
  d.push_back(cpu_device("CPU"));
  d.push_back(std::move(remote).value());
  return engine_on(path, std::move(d), {1, 2});
}

// Greedy output does not depend on the split, so a state moves between a split and one device,
// with either KV dtype. A q8_0 cache's rows are saved as they are (about half of f16's bytes),
// and a context of another KV dtype refuses its state, naming the dtype.
class SeqStateAcross : public ::testing::TestWithParam<DType> {};

TEST_P(SeqStateAcross, RestoresAcrossAStageOnAWorker) {
  const DType kv = GetParam();
  const std::string path = model_file("llama");
  auto worker = testing::start_local_worker();
  ASSERT_TRUE(worker);
  auto split = split_engine(path, *worker);
  ASSERT_TRUE(split);
  ASSERT_EQ(split->stages().size(), 2u);
  auto local = local_engine(path);
  ASSERT_TRUE(local);

  Saved from_split = save_one(*split, 128, kv);
  Saved from_local = save_one(*local, 128, kv);
  ASSERT_FALSE(from_local.reference.empty());
  EXPECT_EQ(from_split.reference, from_local.reference);
  EXPECT_EQ(from_split.state, from_local.state) << "the same state, whatever device held it";
  EXPECT_EQ(from_local.state.size(),
            kSeqStateHeaderBytes + seq_state_payload_bytes(from_local.ctx->fingerprint(), 29));

  auto on_split = state_context(*split, 128, 4, kv);
  prefill(*on_split, {state_prompt(3, 11)});
  const Status restored = on_split->seq_state_restore(3, from_local.state);
  ASSERT_TRUE(restored.is_ok()) << restored.message();
  EXPECT_EQ(continue_greedy(*on_split, 3, 7, 6), from_local.reference);

  if (kv == DType::kQ8_0) {
    Saved f16 = save_one(*local);
    EXPECT_LT(from_local.state.size(), f16.state.size() * 6 / 10);
    EXPECT_NE(from_local.reference, f16.reference) << "the q8_0 cache changed nothing";
    const Status refused = f16.ctx->seq_state_restore(0, from_local.state);
    EXPECT_FALSE(refused.is_ok());
    EXPECT_NE(refused.message().find("KV dtype"), std::string::npos) << refused.message();
  }
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, SeqStateAcross, ::testing::Values(DType::kF16, DType::kQ8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The sequence a refused state was meant for still holds its tokens and continues as before.
void expect_untouched(Context& ctx, const HostBytes& bad, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(ctx.seq_len(0), 13);
  const Status s = ctx.seq_state_restore(0, bad);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(ctx.seq_len(0), 13);
  EXPECT_EQ(ctx.seq_tokens(0), state_prompt(1, 13));
}

TEST(SeqState, RefusesTruncatedCorruptAndForeignStates) {
  auto e = local_engine(model_file("llama"));
  ASSERT_TRUE(e);
  Saved s = save_one(*e);
  ASSERT_FALSE(s.state.empty());
  auto ctx = state_context(*e);
  prefill(*ctx, {state_prompt(1, 13)});
  const std::vector<uint8_t> before = continue_greedy(*ctx, 0, 9, 3);
  ctx->seq_truncate(0, 13);

  auto message = [&](std::span<const uint8_t> bad) {
    return ctx->seq_state_restore(0, bad).message();
  };
  for (size_t len : {size_t{0}, size_t{7}, kSeqStateHeaderBytes - 1, kSeqStateHeaderBytes,
                     kSeqStateHeaderBytes + 50, s.state.size() - 1}) {
    const HostBytes cut(s.state.begin(), s.state.begin() + static_cast<ptrdiff_t>(len));
    expect_untouched(*ctx, cut, "truncated");
    EXPECT_NE(message(cut).find("truncated"), std::string::npos) << len << ": " << message(cut);
  }
  HostBytes longer = s.state;
  longer.push_back(0);
  EXPECT_NE(message(longer).find("trailing bytes"), std::string::npos) << message(longer);
  // A state saved before the caches went head-major (version 1: each position's kv heads side
  // by side) is refused by its version, not read as planes.
  HostBytes v1 = s.state;
  v1[8] = 1;
  expect_untouched(*ctx, v1, "version 1");
  EXPECT_NE(message(v1).find("version 1, this build reads version 2"), std::string::npos)
      << message(v1);

  // A flipped bit anywhere: magic, version, sizes, fingerprint, reserved, checksums, tokens,
  // rows of the first and of the last layer.
  for (size_t at :
       {size_t{0}, size_t{9}, size_t{17}, size_t{26}, size_t{40}, size_t{65}, size_t{93},
        size_t{100}, size_t{121}, size_t{126}, size_t{130}, kSeqStateHeaderBytes + 3,
        kSeqStateHeaderBytes + 29 * 4 + 100, s.state.size() - 1}) {
    HostBytes flipped = s.state;
    flipped[at] ^= 0x10;
    expect_untouched(*ctx, flipped, "bit flip");
  }
  HostBytes payload_flip = s.state;
  payload_flip.back() ^= 1;
  EXPECT_NE(message(payload_flip).find("payload checksum"), std::string::npos)
      << message(payload_flip);
  HostBytes header_flip = s.state;
  header_flip[70] ^= 1;
  EXPECT_NE(message(header_flip).find("header checksum"), std::string::npos)
      << message(header_flip);

  // Another model with the same shapes (other weights), one with more layers, the same model
  // with an f32 cache: refused by what differs.
  auto other_seed = local_engine(model_file("llama", 6));
  ASSERT_TRUE(other_seed);
  Saved foreign = save_one(*other_seed);
  std::string m = message(foreign.state);
  EXPECT_NE(m.find("another model"), std::string::npos) << m;
  EXPECT_NE(m.find("weights hash"), std::string::npos) << m;
  EXPECT_EQ(m.find("n_layer"), std::string::npos) << m;
  expect_untouched(*ctx, foreign.state, "other weights");

  SynthParams deeper = small("llama", 5);
  deeper.n_layer = 4;
  auto deep = local_engine(testing::synth_file("seqstate_deeper", deeper));
  ASSERT_TRUE(deep);
  m = message(save_one(*deep).state);
  EXPECT_NE(m.find("n_layer 4 in the state, 3 here"), std::string::npos) << m;

  auto f32 = state_context(*e, 128, 4, DType::kF32);
  prefill(*f32, {state_prompt(1, 5)});
  auto f32_state = f32->seq_state_save(0);
  ASSERT_TRUE(f32_state.is_ok());
  m = message(*f32_state);
  EXPECT_NE(m.find("KV dtype f32 in the state, f16 here"), std::string::npos) << m;

  // A crafted header (its checksum made to match): a q8_0 cache of heads of 40 values (rows of
  // 2 x 40, not whole blocks) is refused by its fields before any size is computed from them.
  HostBytes odd = s.state;
  const uint32_t q8 = static_cast<uint32_t>(DType::kQ8_0), hd = 40;
  std::memcpy(odd.data() + 92, &q8, 4);
  std::memcpy(odd.data() + 80, &hd, 4);
  const uint64_t sum = XXH3_64bits(odd.data(), 128);
  std::memcpy(odd.data() + 128, &sum, 8);
  expect_untouched(*ctx, odd, "q8_0 heads of 40");
  m = message(odd);
  EXPECT_NE(m.find("'head_dim' = 40 with a q8_0 KV cache"), std::string::npos) << m;
  // Rows of n_head_kv x head_dim values past any int64 (found by fuzz_seqstate): sizes saturate.
  HostBytes huge = s.state;
  const uint32_t heads = 3907446528u, dim = 3991727077u;
  std::memcpy(huge.data() + 76, &heads, 4);
  std::memcpy(huge.data() + 80, &dim, 4);
  const uint64_t huge_sum = XXH3_64bits(huge.data(), 128);
  std::memcpy(huge.data() + 128, &huge_sum, 8);
  expect_untouched(*ctx, huge, "huge rows");
  m = message(huge);
  EXPECT_NE(m.find("state sizes overflow"), std::string::npos) << m;

  // A context too small for the state, and one without free cells for it.
  auto tiny = state_context(*e, 20);
  EXPECT_NE(tiny->seq_state_restore(0, s.state).message().find("holds 20"), std::string::npos);
  auto busy = state_context(*e, 40);
  prefill(*busy, {state_prompt(1, 13), {}, state_prompt(4, 20)});
  const Status full = busy->seq_state_restore(0, s.state);
  EXPECT_NE(full.message().find("needs as many KV cells, 20 are free"), std::string::npos)
      << full.message();
  EXPECT_EQ(busy->seq_len(0), 13);

  // After every refusal the context goes on as if nothing happened.
  EXPECT_EQ(continue_greedy(*ctx, 0, 9, 3), before);
}

// Random damage (flipped bytes, cuts, both) never crashes and is always refused.
TEST(SeqState, RandomDamageIsRefused) {
  auto e = local_engine(model_file("llama"));
  ASSERT_TRUE(e);
  Saved s = save_one(*e);
  auto ctx = state_context(*e);
  prefill(*ctx, {state_prompt(1, 13)});
  Rng rng(99);
  for (int i = 0; i < 300; ++i) {
    HostBytes bad = s.state;
    const int flips = 1 + static_cast<int>(rng.next() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly the header, where every field is checked by name.
      const size_t at =
          rng.next() % 2 == 0 ? rng.next() % kSeqStateHeaderBytes : rng.next() % bad.size();
      bad[at] ^= static_cast<uint8_t>(1 + rng.next() % 255);
    }
    if (rng.next() % 4 == 0) bad.resize(rng.next() % bad.size());
    ASSERT_FALSE(ctx->seq_state_restore(0, bad).is_ok()) << "damage " << i;
    ASSERT_EQ(ctx->seq_tokens(0), state_prompt(1, 13));
  }
}

TEST(SeqState, FilesRoundTripAndLargeOnesAreRefusedUnread) {
  auto e = local_engine(model_file("llama"));
  ASSERT_TRUE(e);
  Saved s = save_one(*e);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("strata_seqstate_" + std::to_string(::getpid())))
          .string();
  ASSERT_TRUE(seq_state_write_file(path, s.state).is_ok());
  auto back = seq_state_read_file(path, s.ctx->seq_state_max_bytes());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, s.state);

  auto small_limit = seq_state_read_file(path, s.state.size() - 1);
  EXPECT_FALSE(small_limit.is_ok());
  EXPECT_NE(small_limit.status().message().find("more than this context can hold"),
            std::string::npos);

  std::filesystem::resize_file(path, s.state.size() - 10);
  auto cut = seq_state_read_file(path, s.ctx->seq_state_max_bytes());
  EXPECT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();
  {
    std::ofstream junk(path, std::ios::binary | std::ios::trunc);
    junk << "GGUF and then some more bytes than a header would need, but not a state at all, "
            "no: only text that goes on long enough to fill one hundred and thirty-six bytes.";
  }
  auto wrong = seq_state_read_file(path, s.ctx->seq_state_max_bytes());
  EXPECT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("magic"), std::string::npos);
  std::filesystem::remove(path);
  EXPECT_FALSE(seq_state_read_file(path, 1 << 20).is_ok());
}

}  // namespace
}  // namespace strata
