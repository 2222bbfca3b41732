#include "server/serve_args.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace strata::server {
namespace {

struct Parsed {
  Result<ArgReport> report;
  ServeArgs args;
};

Parsed parse(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
  Parsed p{ArgReport{}, ServeArgs{}};
  p.report = parse_serve_args(
      argv,
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      p.args);
  return p;
}

TEST(ServeArgs, LlamaServerCommandLineFromTheIssue) {
  Parsed p = parse({"-m", "model.gguf", "--temp", "0.8", "--seed", "42", "--jinja", "-np", "4"});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  const ServerOptions& o = p.args.options;
  EXPECT_EQ(o.load.model_path, "model.gguf");
  EXPECT_FLOAT_EQ(o.defaults.sampling.temperature, 0.8f);
  EXPECT_TRUE(o.default_seeded);
  EXPECT_EQ(o.defaults.sampling.seed, 42u);
  EXPECT_TRUE(o.jinja);
  EXPECT_EQ(o.n_slots, 4);
  EXPECT_TRUE(p.report->notes.empty());
}

TEST(ServeArgs, ShortAndLongSpellingsSetTheSameField) {
  for (const auto& [short_name, long_name] :
       std::vector<std::pair<std::string, std::string>>{{"-c", "--ctx-size"},
                                                        {"-n", "--n-predict"},
                                                        {"-b", "--batch-size"},
                                                        {"-np", "--parallel"},
                                                        {"-t", "--threads"}}) {
    Parsed a = parse({short_name, "7"});
    Parsed b = parse({long_name, "7"});
    ASSERT_TRUE(a.report.is_ok() && b.report.is_ok()) << short_name;
    EXPECT_EQ(a.args.options.load.n_ctx, b.args.options.load.n_ctx);
    EXPECT_EQ(a.args.options.defaults.n_predict, b.args.options.defaults.n_predict);
    EXPECT_EQ(a.args.options.load.n_batch, b.args.options.load.n_batch);
    EXPECT_EQ(a.args.options.n_slots, b.args.options.n_slots);
    EXPECT_EQ(a.args.options.load.n_threads, b.args.options.load.n_threads);
  }
  Parsed eq = parse({"--ctx-size=1024"});
  ASSERT_TRUE(eq.report.is_ok());
  EXPECT_EQ(eq.args.options.load.n_ctx, 1024);
}

TEST(ServeArgs, CommandLineWinsOverEnvironmentWhichWinsOverDefault) {
  Parsed env_only = parse({}, {{"LLAMA_ARG_CTX_SIZE", "2048"}, {"LLAMA_ARG_TOP_K", "5"}});
  ASSERT_TRUE(env_only.report.is_ok());
  EXPECT_EQ(env_only.args.options.load.n_ctx, 2048);
  EXPECT_EQ(env_only.args.options.defaults.sampling.top_k, 5);

  Parsed both = parse({"-c", "512", "--top-k", "9"},
                      {{"LLAMA_ARG_CTX_SIZE", "2048"}, {"LLAMA_ARG_TOP_K", "5"}});
  ASSERT_TRUE(both.report.is_ok());
  EXPECT_EQ(both.args.options.load.n_ctx, 512);
  EXPECT_EQ(both.args.options.defaults.sampling.top_k, 9);

  Parsed none = parse({});
  ASSERT_TRUE(none.report.is_ok());
  EXPECT_EQ(none.args.options.load.n_ctx, 0);
  EXPECT_EQ(none.args.options.defaults.sampling.top_k, SamplerParams{}.top_k);
}

TEST(ServeArgs, SwitchesTakeBooleansFromTheEnvironmentAndNegationsFromTheCommandLine) {
  Parsed p = parse({}, {{"LLAMA_ARG_MMAP", "false"},
                        {"LLAMA_ARG_ENDPOINT_METRICS", "1"},
                        {"LLAMA_ARG_ENDPOINT_SLOTS", "disabled"}});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  EXPECT_EQ(p.args.options.load.use_mmap, std::optional<bool>(false));
  EXPECT_TRUE(p.args.options.endpoint_metrics);
  EXPECT_FALSE(p.args.options.endpoint_slots);

  Parsed q = parse({"--mmap", "--no-slots"}, {{"LLAMA_ARG_MMAP", "off"}});
  ASSERT_TRUE(q.report.is_ok());
  EXPECT_EQ(q.args.options.load.use_mmap, std::optional<bool>(true));
  EXPECT_FALSE(q.args.options.endpoint_slots);

  Parsed neither = parse({}, {});
  ASSERT_TRUE(neither.report.is_ok());
  EXPECT_FALSE(neither.args.options.load.use_mmap.has_value()) << "auto unless told";
  Parsed lm = parse({"--no-mmap", "-lm", "auto"}, {});
  ASSERT_TRUE(lm.report.is_ok());
  EXPECT_FALSE(lm.args.options.load.use_mmap.has_value()) << "the later flag wins";
  Parsed lm_map = parse({"-lm", "mmap"}, {});
  ASSERT_TRUE(lm_map.report.is_ok());
  EXPECT_EQ(lm_map.args.options.load.use_mmap, std::optional<bool>(true));

  Parsed bad = parse({}, {{"LLAMA_ARG_MMAP", "maybe"}});
  ASSERT_FALSE(bad.report.is_ok());
  EXPECT_NE(bad.report.status().message().find("LLAMA_ARG_MMAP"), std::string::npos);
}

TEST(ServeArgs, IgnoredFlagsAreAcceptedAndReportedOnce) {
  Parsed p = parse({"-fa", "on", "--flash-attn", "off", "--mlock", "-ub", "256"});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  ASSERT_EQ(p.report->notes.size(), 3u);
  int fa = 0;
  for (const std::string& n : p.report->notes) fa += n.find("-fa") != std::string::npos;
  EXPECT_EQ(fa, 1);
  for (const std::string& n : p.report->notes) EXPECT_EQ(n.rfind("ignored ", 0), 0u) << n;
}

TEST(ServeArgs, InertValuesOfIgnoredAndPendingFlagsAreNotReported) {
  Parsed p = parse({"--no-context-shift", "--cont-batching", "--no-warmup"});
  ASSERT_TRUE(p.report.is_ok());
  // What strata does anyway: never a context shift, always continuous batching, no warm-up.
  EXPECT_TRUE(p.report->notes.empty());
  Parsed q = parse({"--context-shift", "--cache-ram", "64"});
  ASSERT_TRUE(q.report.is_ok());
  EXPECT_TRUE(q.report->notes.empty()) << "applied flags need no note";
  EXPECT_TRUE(q.args.options.context_shift);
  EXPECT_EQ(q.args.options.cache_ram_mib, 64);
  Parsed r = parse({"--kv-unified"});
  ASSERT_TRUE(r.report.is_ok());
  ASSERT_EQ(r.report->notes.size(), 1u);
  EXPECT_NE(r.report->notes[0].find("not applied"), std::string::npos);
}

TEST(ServeArgs, BackendSamplingByFlagAndEnvironment) {
  EXPECT_FALSE(parse({}).args.options.backend_sampling);
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"-bs"}, {"--backend-sampling"}}) {
    Parsed p = parse(argv);
    ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
    EXPECT_TRUE(p.args.options.backend_sampling) << argv[0];
    EXPECT_TRUE(p.report->notes.empty()) << "an applied flag needs no note";
  }
  Parsed env = parse({}, {{"LLAMA_ARG_BACKEND_SAMPLING", "enabled"}});
  ASSERT_TRUE(env.report.is_ok());
  EXPECT_TRUE(env.args.options.backend_sampling);
}

TEST(ServeArgs, UnknownAndRefusedFlagsAreErrors) {
  Parsed unknown = parse({"--frobnicate"});
  ASSERT_FALSE(unknown.report.is_ok());
  EXPECT_NE(unknown.report.status().message().find("unknown flag --frobnicate"), std::string::npos);
  Parsed stray = parse({"model.gguf"});
  EXPECT_FALSE(stray.report.is_ok());
  Parsed lora = parse({"--lora", "x.gguf"});
  ASSERT_FALSE(lora.report.is_ok());
  EXPECT_NE(lora.report.status().message().find("--lora"), std::string::npos);
  Parsed missing = parse({"-m"});
  ASSERT_FALSE(missing.report.is_ok());
  EXPECT_NE(missing.report.status().message().find("needs a value"), std::string::npos);
}

TEST(ServeArgs, LlamaCppSamplersSetTheDefaults) {
  Parsed p = parse({"--mirostat",
                    "2",
                    "--mirostat-lr",
                    "0.2",
                    "--mirostat-ent",
                    "4",
                    "--typical",
                    "0.9",
                    "--top-nsigma",
                    "1.5",
                    "--xtc-probability",
                    "0.5",
                    "--xtc-threshold",
                    "0.2",
                    "--min-keep",
                    "3",
                    "--dry-multiplier",
                    "0.8",
                    "--dry-base",
                    "2",
                    "--dry-allowed-length",
                    "3",
                    "--dry-penalty-last-n",
                    "128",
                    "--dry-sequence-breaker",
                    "END",
                    "--dry-sequence-breaker",
                    "\n\n",
                    "--dynatemp-range",
                    "0.3",
                    "--dynatemp-exp",
                    "2"});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  const SamplerParams& s = p.args.options.defaults.sampling;
  EXPECT_EQ(s.chain.mirostat, 2);
  EXPECT_FLOAT_EQ(s.chain.mirostat_eta, 0.2f);
  EXPECT_FLOAT_EQ(s.chain.mirostat_tau, 4.0f);
  EXPECT_FLOAT_EQ(s.chain.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(s.chain.top_n_sigma, 1.5f);
  EXPECT_FLOAT_EQ(s.chain.xtc_probability, 0.5f);
  EXPECT_FLOAT_EQ(s.chain.xtc_threshold, 0.2f);
  EXPECT_EQ(s.chain.min_keep, 3);
  EXPECT_FLOAT_EQ(s.chain.dynatemp_range, 0.3f);
  EXPECT_FLOAT_EQ(s.chain.dynatemp_exponent, 2.0f);
  EXPECT_FLOAT_EQ(s.dry_multiplier, 0.8f);
  EXPECT_FLOAT_EQ(s.dry_base, 2.0f);
  EXPECT_EQ(s.dry_allowed_length, 3);
  EXPECT_EQ(s.dry_penalty_last_n, 128);
  // The first breaker replaces the defaults, later ones add to it (the text as given).
  EXPECT_EQ(s.dry_sequence_breakers, (std::vector<std::string>{"END", "\n\n"}));
  Parsed none = parse({"--dry-sequence-breaker", "none"});
  ASSERT_TRUE(none.report.is_ok());
  EXPECT_TRUE(none.args.options.defaults.sampling.dry_sequence_breakers.empty());

  Parsed order = parse({"--samplers", "top_k;temperature;min_p", "--repeat-penalty", "1.2"});
  ASSERT_TRUE(order.report.is_ok()) << order.report.status().message();
  const SamplerParams& o = order.args.options.defaults.sampling;
  EXPECT_EQ(o.chain.order, (std::vector<ChainStage>{ChainStage::kTopK, ChainStage::kTemperature,
                                                    ChainStage::kMinP}));
  EXPECT_TRUE(o.chain.extended());
  EXPECT_FALSE(o.use_penalties);  // not listed: off, whatever --repeat-penalty says
  EXPECT_FLOAT_EQ(o.settings().repeat_penalty, 1.0f);
  EXPECT_FALSE(o.use_dry);
  Parsed seq = parse({"--sampler-seq", "ekt"});
  ASSERT_TRUE(seq.report.is_ok());
  EXPECT_EQ(seq.args.options.defaults.sampling.chain.order,
            (std::vector<ChainStage>{ChainStage::kTopK, ChainStage::kTemperature}));
  Parsed bad = parse({"--samplers", "top_k;bogus"});
  ASSERT_FALSE(bad.report.is_ok());
  EXPECT_NE(bad.report.status().message().find("'bogus' is not a sampler"), std::string::npos);
  EXPECT_FALSE(parse({"--mirostat", "3"}).report.is_ok());
  EXPECT_FALSE(parse({"--xtc-probability", "1.5"}).report.is_ok());
  // Adaptive-p: its flags set the defaults; the list names it.
  Parsed adaptive = parse({"--adaptive-target", "0.3", "--adaptive-decay", "0.5", "--samplers",
                           "top_k;temperature;adaptive_p"});
  ASSERT_TRUE(adaptive.report.is_ok()) << adaptive.report.status().message();
  const SampleChain& ac = adaptive.args.options.defaults.sampling.chain;
  EXPECT_FLOAT_EQ(ac.adaptive_target, 0.3f);
  EXPECT_FLOAT_EQ(ac.adaptive_decay, 0.5f);
  EXPECT_TRUE(ac.adaptive_p);
  EXPECT_TRUE(ac.adaptive_active());
  Parsed decay = parse({"--adaptive-decay", "0.995"});
  ASSERT_FALSE(decay.report.is_ok());
  EXPECT_NE(decay.report.status().message().find("--adaptive-decay"), std::string::npos);
  EXPECT_FALSE(parse({"--adaptive-target", "1.5"}).report.is_ok());
}

TEST(ServeArgs, EmbeddingFlags) {
  Parsed p = parse({"--embeddings", "--pooling", "last", "--embd-normalize", "-1"});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  EXPECT_TRUE(p.args.options.embeddings);
  EXPECT_EQ(p.args.options.pooling, "last");
  EXPECT_EQ(p.args.options.embd_normalize, -1);
  Parsed plain = parse({});
  ASSERT_TRUE(plain.report.is_ok());
  EXPECT_FALSE(plain.args.options.embeddings);
  EXPECT_EQ(plain.args.options.embd_normalize, 2);
  EXPECT_FALSE(parse({"--embd-normalize", "-2"}).report.is_ok());
}

TEST(ServeArgs, GpuLayersCountsAutoAndAll) {
  Parsed n = parse({"-ngl", "99", "--rpc", "h:1,h:2"});
  ASSERT_TRUE(n.report.is_ok());
  EXPECT_EQ(n.args.options.load.n_gpu_layers, 99);
  EXPECT_EQ(n.args.options.load.rpc, (std::vector<std::string>{"h:1", "h:2"}));
  Parsed all = parse({"--n-gpu-layers", "all"});
  ASSERT_TRUE(all.report.is_ok());
  EXPECT_GT(*all.args.options.load.n_gpu_layers, 1 << 20);
  Parsed aut = parse({"-ngl", "5", "--gpu-layers", "auto"});
  ASSERT_TRUE(aut.report.is_ok());
  EXPECT_FALSE(aut.args.options.load.n_gpu_layers.has_value());
  EXPECT_FALSE(parse({"-ngl", "lots"}).report.is_ok());
}

TEST(ServeArgs, CacheTypesMustAgreeAndBeOursToHave) {
  Parsed f32 = parse({"-ctk", "f32", "-ctv", "f32"});
  ASSERT_TRUE(f32.report.is_ok());
  EXPECT_EQ(f32.args.options.load.kv_dtype, DType::kF32);
  EXPECT_FALSE(parse({"-ctk", "f32"}).report.is_ok());
  Parsed q8 = parse({"-ctk", "q8_0", "-ctv", "q8_0"});
  ASSERT_TRUE(q8.report.is_ok()) << q8.report.status().message();
  EXPECT_EQ(q8.args.options.load.kv_dtype, DType::kQ8_0);
  EXPECT_FALSE(parse({"-ctk", "q8_0", "-ctv", "f16"}).report.is_ok());
  Parsed q4 = parse({"-ctk", "q4_0", "-ctv", "q4_0"});
  ASSERT_FALSE(q4.report.is_ok());
  EXPECT_NE(q4.report.status().message().find("f16, f32 and q8_0, not 'q4_0'"), std::string::npos)
      << q4.report.status().message();
}

// Qwen's model cards extend the context with these flags; llama-server's "from the model" values
// (-1, 0) leave a field unset, and the environment sets what the command line does not.
TEST(ServeArgs, RopeFlagsReachTheLoadOptions) {
  Parsed q = parse({"--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "32768",
                    "--yarn-ext-factor", "-1", "--rope-freq-scale", "0"},
                   {{"LLAMA_ARG_ROPE_FREQ_BASE", "500000"}, {"LLAMA_ARG_YARN_BETA_FAST", "16"}});
  ASSERT_TRUE(q.report.is_ok()) << q.report.status().message();
  const RopeOverrides& r = q.args.options.load.rope;
  EXPECT_EQ(r.type, RopeScaling::kYarn);
  EXPECT_EQ(r.scale, 4.0f);
  EXPECT_EQ(r.yarn_orig_ctx, 32768);
  EXPECT_EQ(r.freq_base, 500000.0f);
  EXPECT_EQ(r.yarn_beta_fast, 16.0f);
  EXPECT_FALSE(r.yarn_ext_factor.has_value());
  EXPECT_FALSE(r.freq_scale.has_value());
  EXPECT_FALSE(r.yarn_beta_slow.has_value());
  EXPECT_TRUE(q.report->notes.empty());  // applied, not ignored
  EXPECT_TRUE(parse({}).args.options.load.rope.empty());

  for (const auto& [argv, words] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--rope-scaling", "ntk"}, "--rope-scaling: 'ntk' is not one of none, linear, yarn"},
           {{"--rope-scaling", "longrope"}, "'longrope' is not one of"},
           {{"--rope-scale", "0"}, "--rope-scale: 0 is outside"},
           {{"--yarn-ext-factor", "1.5"}, "--yarn-ext-factor: 1.5 is outside"},
           {{"--yarn-orig-ctx", "-3"}, "--yarn-orig-ctx: -3 is outside"},
           {{"--rope-freq-base", "x"}, "--rope-freq-base: 'x' is not a number"}}) {
    Parsed bad = parse(argv);
    ASSERT_FALSE(bad.report.is_ok()) << argv[0];
    EXPECT_NE(bad.report.status().message().find(words), std::string::npos)
        << bad.report.status().message();
  }
}

TEST(ServeArgs, OverrideKvAppendsInOrder) {
  Parsed o = parse({"--override-kv", "tokenizer.ggml.add_bos_token=bool:false,a.b=int:-2",
                    "--override-kv", "qwen3moe.expert_used_count=int:4"});
  ASSERT_TRUE(o.report.is_ok()) << o.report.status().message();
  const std::vector<GgufKv>& kvs = o.args.options.load.kv_overrides;
  ASSERT_EQ(kvs.size(), 3u);
  EXPECT_EQ(kvs[0].key, "tokenizer.ggml.add_bos_token");
  EXPECT_EQ(kvs[0].type, GgufType::kBool);
  EXPECT_EQ(kvs[1].i64, -2);
  EXPECT_EQ(kvs[2].key, "qwen3moe.expert_used_count");
  EXPECT_EQ(kvs[2].u64, 4u);
  Parsed bad = parse({"--override-kv", "a=int:1,b=float:x"});
  ASSERT_FALSE(bad.report.is_ok());
  EXPECT_NE(bad.report.status().message().find("--override-kv: b: 'x' is not a finite number"),
            std::string::npos)
      << bad.report.status().message();
}

TEST(ServeArgs, DefaultGrammarsFromTextFilesAndSchemas) {
  EXPECT_EQ(parse({}).args.options.defaults.grammar, nullptr);
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"--grammar", "root ::= \"yes\" | \"no\""},
           {"-j", R"({"type": "object", "properties": {"a": {"type": "integer"}}})"},
           {"--json-schema", "{}"}}) {
    Parsed p = parse(argv);
    ASSERT_TRUE(p.report.is_ok()) << argv[0] << ": " << p.report.status().message();
    EXPECT_NE(p.args.options.defaults.grammar, nullptr) << argv[0];
  }
  const std::string path = ::testing::TempDir() + "/strata_default_grammar.gbnf";
  std::ofstream(path) << "root ::= [a-z]+\n";
  Parsed file = parse({"--grammar-file", path});
  ASSERT_TRUE(file.report.is_ok()) << file.report.status().message();
  EXPECT_NE(file.args.options.defaults.grammar, nullptr);
  std::remove(path.c_str());
  for (const auto& [argv, words] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--grammar", "root ::= ["}, "--grammar: "},
           {{"-j", "{not json"}, "-j: the JSON schema is not JSON"},
           {{"-j", R"({"type": "string", "not": {}})"}, "'not' is not supported"},
           {{"-jf", "/nonexistent/schema.json"}, "cannot read"}}) {
    Parsed bad = parse(argv);
    ASSERT_FALSE(bad.report.is_ok()) << argv[0];
    EXPECT_NE(bad.report.status().message().find(words), std::string::npos)
        << bad.report.status().message();
  }
}

TEST(ServeArgs, ApiKeysFromListFileAndEnvironment) {
  const std::string file = ::testing::TempDir() + "/strata_api_keys.txt";
  {
    std::ofstream f(file);
    f << "# a comment\nkey-from-file\n\n  second-key  \n";
  }
  Parsed p = parse({"--api-key", "a,b", "--api-key-file", file});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  EXPECT_EQ(p.args.options.http.api_keys,
            (std::vector<std::string>{"a", "b", "key-from-file", "second-key"}));
  Parsed env = parse({}, {{"LLAMA_API_KEY", "secret"}});
  ASSERT_TRUE(env.report.is_ok());
  EXPECT_EQ(env.args.options.http.api_keys, (std::vector<std::string>{"secret"}));
  EXPECT_FALSE(parse({"--api-key-file", file + ".absent"}).report.is_ok());
  std::remove(file.c_str());
}

TEST(ServeArgs, LogitBiasFlagAndChatTemplateKwargs) {
  Parsed p = parse({"-l", "15+1.5", "--logit-bias", "7-inf"});
  ASSERT_TRUE(p.report.is_ok()) << p.report.status().message();
  ASSERT_EQ(p.args.options.defaults.logit_bias.size(), 2u);
  EXPECT_EQ(p.args.options.defaults.logit_bias[0].token, 15);
  EXPECT_FLOAT_EQ(p.args.options.defaults.logit_bias[0].bias, 1.5f);
  EXPECT_EQ(p.args.options.defaults.logit_bias[1].token, 7);
  EXPECT_TRUE(std::isinf(p.args.options.defaults.logit_bias[1].bias));
  EXPECT_FALSE(parse({"-l", "15"}).report.is_ok());
  EXPECT_TRUE(parse({"--chat-template-kwargs", "{\"enable_thinking\": false}"}).report.is_ok());
  EXPECT_FALSE(parse({"--chat-template-kwargs", "[1]"}).report.is_ok());
}

TEST(ServeArgs, EveryNameIsInOneRowOnlyAndHelpListsEveryRow) {
  std::set<std::string> seen;
  const std::string help = serve_help();
  for (const auto& row : serve_arg_table()) {
    ASSERT_FALSE(row.names.empty());
    for (const auto* list : {&row.names, &row.negations}) {
      for (const std::string& n : *list) {
        EXPECT_TRUE(seen.insert(n).second) << n << " is in two rows";
        EXPECT_NE(help.find(n), std::string::npos) << n << " is missing from --help";
      }
    }
    if (row.effect != ArgEffect::kApplied) {
      EXPECT_NE(std::string(row.note), "") << row.names[0];
    }
    const bool listed_in_full =
        row.effect == ArgEffect::kApplied || row.effect == ArgEffect::kPending;
    if (row.env && listed_in_full) {
      EXPECT_NE(help.find(row.env), std::string::npos) << row.env;
    }
  }
}

}  // namespace
}  // namespace strata::server
