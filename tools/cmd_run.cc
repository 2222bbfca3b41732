#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/utf8.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/step_draws.h"
#include "flags.h"
#include "loader.h"

namespace strata::tools {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

Result<SamplerParams> sampler_params(const Flags& flags) {
  SamplerParams p;
  STRATA_ASSIGN_OR_RETURN(double temp, flags.get_double("--temp", p.temperature));
  STRATA_ASSIGN_OR_RETURN(int64_t top_k, flags.get_int("--top-k", p.top_k, -1, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(double top_p, flags.get_double("--top-p", p.top_p));
  STRATA_ASSIGN_OR_RETURN(double min_p, flags.get_double("--min-p", p.min_p));
  STRATA_ASSIGN_OR_RETURN(double rep, flags.get_double("--repeat-penalty", p.repeat_penalty));
  STRATA_ASSIGN_OR_RETURN(int64_t rep_n,
                          flags.get_int("--repeat-last-n", p.repeat_last_n, -1, 1 << 20));
  STRATA_ASSIGN_OR_RETURN(double presence,
                          flags.get_double("--presence-penalty", p.presence_penalty));
  STRATA_ASSIGN_OR_RETURN(double freq,
                          flags.get_double("--frequency-penalty", p.frequency_penalty));
  STRATA_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("--seed", 0, 0, INT64_MAX));
  p.temperature = static_cast<float>(temp);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repeat_penalty = static_cast<float>(rep);
  p.repeat_last_n = static_cast<int32_t>(rep_n);
  p.presence_penalty = static_cast<float>(presence);
  p.frequency_penalty = static_cast<float>(freq);
  p.seed = static_cast<uint64_t>(seed);
  // llama-cli's other samplers (docs/server.md, "Samplers").
  const auto to_float = [&flags](const char* name, float& field) -> Status {
    STRATA_ASSIGN_OR_RETURN(double v, flags.get_double(name, field));
    field = static_cast<float>(v);
    return Status::ok();
  };
  const auto to_int = [&flags](const char* name, int32_t& field, int64_t lo) -> Status {
    STRATA_ASSIGN_OR_RETURN(int64_t v, flags.get_int(name, field, lo, kSamplerMaxRepeatLastN));
    field = static_cast<int32_t>(v);
    return Status::ok();
  };
  SampleChain& c = p.chain;
  STRATA_RETURN_IF_ERROR(to_float("--typical", c.typical_p));
  STRATA_RETURN_IF_ERROR(to_float("--top-nsigma", c.top_n_sigma));
  STRATA_RETURN_IF_ERROR(to_float("--xtc-probability", c.xtc_probability));
  STRATA_RETURN_IF_ERROR(to_float("--xtc-threshold", c.xtc_threshold));
  STRATA_RETURN_IF_ERROR(to_float("--mirostat-lr", c.mirostat_eta));
  STRATA_RETURN_IF_ERROR(to_float("--mirostat-ent", c.mirostat_tau));
  STRATA_RETURN_IF_ERROR(to_float("--dynatemp-range", c.dynatemp_range));
  STRATA_RETURN_IF_ERROR(to_float("--dynatemp-exp", c.dynatemp_exponent));
  STRATA_RETURN_IF_ERROR(to_float("--adaptive-target", c.adaptive_target));
  STRATA_RETURN_IF_ERROR(to_float("--adaptive-decay", c.adaptive_decay));
  STRATA_RETURN_IF_ERROR(to_int("--mirostat", c.mirostat, 0));
  STRATA_RETURN_IF_ERROR(to_int("--min-keep", c.min_keep, 0));
  STRATA_RETURN_IF_ERROR(to_float("--dry-multiplier", p.dry_multiplier));
  STRATA_RETURN_IF_ERROR(to_float("--dry-base", p.dry_base));
  STRATA_RETURN_IF_ERROR(to_int("--dry-allowed-length", p.dry_allowed_length, 0));
  STRATA_RETURN_IF_ERROR(to_int("--dry-penalty-last-n", p.dry_penalty_last_n, -1));
  if (std::optional<std::string> b = flags.get("--dry-sequence-breaker")) {
    p.dry_sequence_breakers.clear();
    if (*b != "none") p.dry_sequence_breakers.push_back(*b);
  }
  if (std::optional<std::string> v = flags.get("--samplers")) {
    STRATA_RETURN_IF_ERROR(set_sampler_order_list(p, *v));
  }
  if (std::optional<std::string> v = flags.get("--sampler-seq")) {
    STRATA_RETURN_IF_ERROR(set_sampler_order_letters(p, *v));
  }
  STRATA_RETURN_IF_ERROR(p.validate());
  return p;
}

// llama-cli's speculative decoding flags (the ones strata runs).
Result<SpecParams> spec_params(const Flags& flags) {
  SpecParams p;
  if (flags.has("-md")) p.type = SpecType::kDraft;
  if (std::optional<std::string> v = flags.get("--spec-type")) {
    STRATA_ASSIGN_OR_RETURN(p.type, spec_type_from_name(*v));
  }
  if (p.type == SpecType::kDraft && !flags.has("-md")) {
    return invalid_argument("--spec-type draft-simple needs a draft model (-md FILE)");
  }
  const auto to_int = [&flags](const char* name, int32_t& field, int64_t lo, int64_t hi) {
    Result<int64_t> v = flags.get_int(name, field, lo, hi);
    if (v) field = static_cast<int32_t>(*v);
    return v.status();
  };
  STRATA_RETURN_IF_ERROR(to_int("--spec-draft-n-max", p.n_max, 1, kSpecMaxDraft));
  STRATA_RETURN_IF_ERROR(to_int("--spec-draft-n-min", p.n_min, 0, kSpecMaxDraft));
  STRATA_RETURN_IF_ERROR(to_int("--spec-ngram-simple-size-n", p.ngram_n, 1, 1024));
  STRATA_RETURN_IF_ERROR(to_int("--spec-ngram-simple-size-m", p.ngram_m, 1, kSpecMaxDraft));
  STRATA_ASSIGN_OR_RETURN(double p_min, flags.get_double("--spec-draft-p-min", p.p_min));
  p.p_min = static_cast<float>(p_min);
  STRATA_RETURN_IF_ERROR(p.validate());
  return p;
}

constexpr const char* kHelp =
    "usage: strata run -m FILE -p PROMPT [-n N] [options]\n"
    "Generates text from a prompt, streaming it to stdout; timings go to stderr.\n\n"
    "  -m, --model FILE        GGUF model\n"
    "  -p, --prompt TEXT       prompt (special tokens such as <|im_start|> are parsed)\n"
    "  -n, --n-predict N       tokens to generate (default 128; stops earlier at end of text)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "  -c, --ctx-size N        KV cache cells (default: training context, at most 4096)\n"
    "  -b, --batch-size N      most prompt tokens per micro-batch (default 512)\n"
    "      --kv-type f16|f32|q8_0  KV cache dtype (default f16)\n"
    "      --rope-scaling none|linear|yarn, --rope-scale N, --rope-freq-base N,\n"
    "      --rope-freq-scale N, --yarn-orig-ctx N, --yarn-ext-factor N,\n"
    "      --yarn-attn-factor N, --yarn-beta-slow N, --yarn-beta-fast N\n"
    "                          llama.cpp's rope overrides (default: the model's)\n"
    "      --override-kv KEY=TYPE:VALUE,...  model metadata overrides (int, float, bool,\n"
    "                          str), e.g. qwen3moe.expert_used_count=int:4\n"
    "      --mmap, --no-mmap   use the weights in place in the file's mapping, or copy them\n"
    "                          into memory with 2 MiB pages (faster decode, slower load);\n"
    "                          default: copy when they take at most half the free memory\n"
    "  -nr, --no-repack        keep copied weights in the file's layout (default: the\n"
    "                          K-quants, q8_0, q4_0 and mxfp4 in rows of 16 where the CPU\n"
    "                          has kernels for them, the same results, faster)\n"
    "      --rpc HOST:PORT,... remote devices served by `strata worker` (unix:/PATH and\n"
    "                          ucx:HOST:PORT too)\n"
    "      --device CPU,RPC0   devices in stage order (default: the workers, then the CPU)\n"
    "      --tensor-split 1,2  share of the layers per device, in --device order\n"
    "                          (default: in proportion to each device's free memory)\n"
    "      --rpc-token-file F  token the workers require (or STRATA_RPC_TOKEN)\n"
    "      --temp T            temperature; 0 is greedy (default 0.8)\n"
    "      --top-k K --top-p P --min-p P          truncation (defaults 40, 0.95, 0.05)\n"
    "      --repeat-penalty R --repeat-last-n N  (defaults 1.0, 64)\n"
    "      --presence-penalty P --frequency-penalty P\n"
    "      --dry-multiplier M --dry-base B --dry-allowed-length N --dry-penalty-last-n N\n"
    "      --dry-sequence-breaker S (one, or none)  DRY (default off)\n"
    "      --typical P --top-nsigma N --xtc-probability P --xtc-threshold T --min-keep N\n"
    "      --mirostat 1|2 --mirostat-lr ETA --mirostat-ent TAU\n"
    "      --dynatemp-range R --dynatemp-exp E\n"
    "      --adaptive-target T --adaptive-decay D  adaptive-p, where --samplers lists\n"
    "                          adaptive_p (default target -1: off; decay 0.9)\n"
    "      --samplers a;b;c, --sampler-seq LETTERS  the samplers and their order, as\n"
    "                          llama-cli's (default penalties;dry;top_n_sigma;top_k;typ_p;\n"
    "                          top_p;min_p;xtc;temperature)\n"
    "      --seed S            sampling seed (default 0): same seed, same text\n"
    "      --backend-sampling  sample on the device of the last stage (a worker sends back\n"
    "                          the token, not the logits); the same tokens as the CPU\n"
    "                          (a step that checks a draft samples on the CPU)\n"
    "  -md, --model-draft FILE  draft model for speculative decoding (its vocabulary must\n"
    "                          be the model's; it runs on the local CPU)\n"
    "      --spec-type none|draft-simple|ngram-simple  speculative decoding (default:\n"
    "                          draft-simple with -md, else none); the text is the same\n"
    "                          as without it, greedy or seeded, only faster or slower\n"
    "      --spec-draft-n-max N  longest draft (default 3)\n"
    "      --spec-draft-n-min N  shorter drafts are not checked (default 0)\n"
    "      --spec-draft-p-min P  the draft model stops below this probability (default 0)\n"
    "      --spec-ngram-simple-size-n N  n-gram looked up in the text (default 12)\n"
    "      --spec-ngram-simple-size-m M  most tokens drafted after it (default 48)\n"
    "      --no-bos            do not add BOS even where the model asks for it\n"
    "      --ignore-eos        keep generating past end-of-text tokens\n"
    "      --print-ids         print the generated token ids on stderr at the end\n";

}  // namespace

int cmd_run(const Args& args) {
  std::vector<std::string> with_value = model_flags();
  with_value.insert(with_value.end(), {"-p|--prompt",
                                       "-n|--n-predict",
                                       "--temp",
                                       "--top-k",
                                       "--top-p",
                                       "--min-p",
                                       "--repeat-penalty",
                                       "--repeat-last-n",
                                       "--presence-penalty",
                                       "--frequency-penalty",
                                       "--seed",
                                       "--typical",
                                       "--top-nsigma",
                                       "--xtc-probability",
                                       "--xtc-threshold",
                                       "--mirostat",
                                       "--mirostat-lr",
                                       "--mirostat-ent",
                                       "--dynatemp-range",
                                       "--dynatemp-exp",
                                       "--adaptive-target",
                                       "--adaptive-decay",
                                       "--min-keep",
                                       "--dry-multiplier",
                                       "--dry-base",
                                       "--dry-allowed-length",
                                       "--dry-penalty-last-n",
                                       "--dry-sequence-breaker",
                                       "--samplers",
                                       "--sampler-seq",
                                       "-md|--model-draft|--spec-draft-model",
                                       "--spec-type",
                                       "--spec-draft-n-max|--draft-max|--draft-n|--draft",
                                       "--spec-draft-n-min|--draft-min|--draft-n-min",
                                       "--spec-draft-p-min|--draft-p-min",
                                       "--spec-ngram-simple-size-n",
                                       "--spec-ngram-simple-size-m"});
  std::vector<std::string> switches = model_switches();
  switches.insert(switches.end(),
                  {"-h|--help", "--no-bos", "--ignore-eos", "--print-ids", "--backend-sampling"});
  Flags flags(with_value, switches);
  if (Status s = flags.parse(args); !s) return fail("run", s);
  if (flags.has("-h")) {
    std::printf("%s", kHelp);
    return 0;
  }
  auto n_predict = flags.get_int("-n", 128, 0, 1 << 24);
  if (!n_predict) return fail("run", n_predict.status());
  auto sp = sampler_params(flags);
  if (!sp) return fail("run", sp.status());
  auto spec = spec_params(flags);
  if (!spec) return fail("run", spec.status());
  const std::string prompt = flags.get_or("-p", "");

  const auto t_load = Clock::now();
  auto loaded = load_model(flags, 1);
  if (!loaded) return fail("run", loaded.status());
  Context& ctx = *loaded->context;
  const Tokenizer& tok = ctx.model().tokenizer();
  const double load_ms = ms_since(t_load);

  std::vector<int32_t> ids = tok.encode(prompt, !flags.has("--no-bos"), true);
  if (ids.empty())
    return fail("run", invalid_argument("the prompt is empty and the model adds no BOS"));
  if (static_cast<int64_t>(ids.size()) + *n_predict > ctx.params().n_ctx) {
    return fail("run", out_of_range("prompt (" + std::to_string(ids.size()) + " tokens) + -n " +
                                    std::to_string(*n_predict) + " exceeds the context of " +
                                    std::to_string(ctx.params().n_ctx) + " (raise -c)"));
  }
  if (sp->dry_active()) {
    auto breakers = dry_breakers(sp->dry_sequence_breakers, tok);
    if (!breakers) return fail("run", breakers.status());
    sp->dry_breakers = std::move(*breakers);
  }
  Sampler sampler(*sp, static_cast<int32_t>(ctx.n_vocab()));
  for (int32_t id : ids) sampler.accept(id);

  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);

  // Decodes a batch and samples its one output row: on the last stage's device with
  // --backend-sampling (on the CPU when the device cannot take the row).
  const bool on_device = flags.has("--backend-sampling");
  StepDraws draws;
  auto decode_and_sample = [&](const Batch& b) -> Result<int32_t> {
    if (!on_device) {
      STRATA_RETURN_IF_ERROR(ctx.decode(b));
      return sampler.sample(ctx.logits(0));
    }
    draws.clear();
    const int32_t d = draws.add(0, sampler, false);
    if (d < 0) draws.read_logits(0);
    STRATA_RETURN_IF_ERROR(ctx.decode(b, &draws));
    return d >= 0 ? draws.token(d) : sampler.sample(ctx.logits(0));
  };

  // The draft model: on the local CPU, a context as large as the model's.
  std::unique_ptr<DraftModel> draft_model;
  if (spec->type == SpecType::kDraft) {
    auto o = load_options(flags);
    if (!o) return fail("run", o.status());
    o->model_path = *flags.get("-md");
    o->rpc.clear();
    o->devices.reset();
    o->tensor_split.clear();
    o->n_gpu_layers.reset();
    o->n_ctx = ctx.params().n_ctx;
    o->min_ctx = 0;
    // The model's metadata and rope overrides are the model's, not the draft's.
    o->kv_overrides.clear();
    o->rope = RopeOverrides{};
    o->backend_sampling = false;
    auto d = server::load_model(*o, 1);
    if (!d) return fail("run", d.status().with_context("draft model " + o->model_path));
    auto dm = DraftModel::create(std::move(d->engine), std::move(d->context), ctx.model());
    if (!dm) return fail("run", dm.status());
    draft_model = std::move(*dm);
  }

  Batch batch;
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.add(ids[i], static_cast<int32_t>(i), 0, i + 1 == ids.size());
  }
  const auto t_prompt = Clock::now();
  Result<int32_t> sampled = decode_and_sample(batch);
  if (!sampled) return fail("run", sampled.status());
  const double prompt_ms = ms_since(t_prompt);

  Utf8Stream utf8;
  std::vector<int32_t> generated;
  std::vector<int32_t> history = ids;  // the sequence's tokens: the prompt and what was kept
  const bool ignore_eos = flags.has("--ignore-eos");
  // Keeps a sampled token; false once generation is over.
  auto keep = [&](int32_t t) {
    sampler.accept(t);
    generated.push_back(t);
    history.push_back(t);
    if (tok.is_eog(t) && !ignore_eos) return false;
    const std::string text = utf8.push(tok.token_to_piece(t));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return static_cast<int64_t>(generated.size()) < *n_predict;
  };
  // A draft to check after the sequence's last token (kept, not decoded yet).
  auto make_draft = [&]() -> Result<std::vector<int32_t>> {
    // Not past -n: the step keeps at most the draft and one more token.
    const int64_t left = *n_predict - static_cast<int64_t>(generated.size()) - 1;
    const int64_t room = ctx.params().n_ctx - static_cast<int64_t>(history.size());
    const auto most = static_cast<int32_t>(std::min<int64_t>({spec->n_max, left, room}));
    std::vector<int32_t> d;
    if (most <= 0) return d;
    if (spec->type == SpecType::kNgram) {
      d = ngram_draft(history, spec->ngram_n, std::min(spec->ngram_m, most));
    } else if (spec->type == SpecType::kDraft) {
      STRATA_ASSIGN_OR_RETURN(d, draft_model->draft(history, most, spec->p_min));
    }
    if (static_cast<int32_t>(d.size()) < spec->n_min) d.clear();
    return d;
  };
  SpecStats stats;
  const auto t_gen = Clock::now();
  int64_t n_decoded = 0;
  if (*n_predict > 0 && keep(*sampled)) {
    for (;;) {
      const int32_t last = history.back();
      const auto at = static_cast<int32_t>(history.size() - 1);
      Result<std::vector<int32_t>> draft = make_draft();
      if (!draft) return fail("run", draft.status());
      batch.clear();
      batch.add(last, at, 0, true);
      if (draft->empty()) {
        sampled = decode_and_sample(batch);
        if (!sampled) return fail("run", sampled.status());
        ++n_decoded;
        if (!keep(*sampled)) break;
        continue;
      }
      // The draft checked in one step: row i holds the logits after draft[0..i).
      for (size_t i = 0; i < draft->size(); ++i) {
        batch.add((*draft)[i], at + 1 + static_cast<int32_t>(i), 0, true);
      }
      if (Status s = ctx.decode(batch); !s) return fail("run", s);
      ++stats.n_drafts;
      stats.n_drafted += static_cast<int64_t>(draft->size());
      bool going = true;
      size_t accepted = 0;
      for (size_t i = 0; going; ++i) {
        const int32_t t = sampler.sample(ctx.logits(static_cast<int64_t>(i)));
        ++n_decoded;
        going = keep(t);
        if (i == draft->size() || t != (*draft)[i]) break;
        ++accepted;
      }
      stats.n_accepted += static_cast<int64_t>(accepted);
      if (!going) break;
      // The cache keeps the last token and the accepted draft; the token sampled after them
      // is decoded by the next step.
      ctx.seq_truncate(0, at + 1 + static_cast<int32_t>(accepted));
    }
  }
  const std::string rest = utf8.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  const double gen_ms = ms_since(t_gen);

  if (flags.has("--print-ids")) {
    std::string line;
    for (int32_t id : generated) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::fprintf(stderr, "ids: %s\n", line.c_str());
  }
  std::fprintf(stderr,
               "load: %.0f ms | prompt: %zu tokens in %.1f ms (%.1f tok/s) | generation: %zu "
               "tokens in %.1f ms (%.1f tok/s)\n",
               load_ms, ids.size(), prompt_ms, ids.size() * 1000.0 / std::max(prompt_ms, 1e-3),
               generated.size(), gen_ms,
               n_decoded > 0 ? n_decoded * 1000.0 / std::max(gen_ms, 1e-3) : 0.0);
  if (spec->type != SpecType::kNone) {
    std::fprintf(stderr, "speculative: %lld drafts, %lld tokens drafted, %lld accepted (%.1f%%)\n",
                 static_cast<long long>(stats.n_drafts), static_cast<long long>(stats.n_drafted),
                 static_cast<long long>(stats.n_accepted),
                 stats.n_drafted > 0 ? 100.0 * stats.n_accepted / stats.n_drafted : 0.0);
  }
  return 0;
}

}  // namespace strata::tools
