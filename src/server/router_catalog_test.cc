// The router's model sources and its children's command lines: preset files (with errors that
// name the line), --models-dir scanning, and which of the router's flags a child inherits.
#include "server/router_catalog.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace strata::server {
namespace {

namespace fs = std::filesystem;

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(RouterPreset, SectionsKeysAndPrecedence) {
  const std::string text =
      "version = 1\n"
      "; a comment\n"
      "[*]\n"
      "c = 8192\n"
      "LLAMA_ARG_N_PARALLEL = 2\n"
      "\n"
      "[tiny]\n"
      "# another comment\n"
      "model = /models/tiny.gguf\n"
      "ctx-size = 4096\n"
      "jinja = false\n"
      "no-mmap = true\n"
      "temp = \"0.5\"\n"
      "load-on-startup = true\n"
      "stop-timeout = 3\n";
  Result<Preset> p = preset_parse(text, "x.ini");
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->global_args, (std::vector<std::string>{"--ctx-size=8192", "--parallel=2"}));
  ASSERT_EQ(p->models.size(), 1u);
  const ModelSource& m = p->models[0];
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.path, "/models/tiny.gguf");
  EXPECT_TRUE(m.load_on_startup);
  EXPECT_EQ(m.stop_timeout_s, 3);
  EXPECT_EQ(m.args, (std::vector<std::string>{"--ctx-size=4096", "--jinja=false", "--mmap=false",
                                              "--temp=0.5"}));

  // The child's command line: preset (global, then model), then the router's, then the
  // router's own settings, so that the router's command line wins over the preset.
  ModelSource src = m;
  src.args.insert(src.args.begin(), p->global_args.begin(), p->global_args.end());
  const std::vector<std::string> argv = child_command(src, {"-c", "1024"});
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "serve");
  const auto pos = [&](const std::string& s) {
    return std::find(argv.begin(), argv.end(), s) - argv.begin();
  };
  EXPECT_LT(pos("--ctx-size=8192"), pos("--ctx-size=4096"));
  EXPECT_LT(pos("--ctx-size=4096"), pos("1024"));
  EXPECT_EQ(argv[pos("--model") + 1], "/models/tiny.gguf");
  EXPECT_EQ(argv[pos("--host") + 1], "127.0.0.1");
  EXPECT_EQ(argv[pos("--port") + 1], "0");
  EXPECT_EQ(argv[pos("--alias") + 1], "tiny");
}

TEST(RouterPreset, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* line;
    const char* says;
  };
  const Case cases[] = {
      {"[a]\nmodel = x.gguf\nnot-a-flag = 3\n", "x.ini:3:", "unknown key 'not-a-flag'"},
      {"[a]\nctx-size = lots\n", "x.ini:2:", "ctx-size"},
      {"c = 5\n", "x.ini:1:", "outside any section"},
      {"[a\n", "x.ini:1:", "']'"},
      {"[a]\n[a]\n", "x.ini:2:", "appears twice"},
      {"[a]\nport = 9000\n", "x.ini:2:", "set by the router"},
      {"[a]\napi-key = k\n", "x.ini:2:", "set by the router"},
      {"[a]\njust text\n", "x.ini:2:", "key = value"},
      {"version = 2\n", "x.ini:1:", "version 2"},
      {"[*]\nload-on-startup = true\n", "x.ini:2:", "model's section"},
      {"[a]\nstop-timeout = -1\n", "x.ini:2:", "stop-timeout"},
      {"[a]\njinja = maybe\n", "x.ini:2:", "maybe"},
      {"[a]\nmodels-dir = /x\n", "x.ini:2:", "set by the router"},
  };
  for (const Case& c : cases) {
    Result<Preset> p = preset_parse(c.text, "x.ini");
    ASSERT_FALSE(p) << c.text;
    EXPECT_NE(p.status().message().find(c.line), std::string::npos)
        << c.text << " -> " << p.status().message();
    EXPECT_NE(p.status().message().find(c.says), std::string::npos)
        << c.text << " -> " << p.status().message();
  }
}

class RouterDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_router_dir_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "models" / "folded");
    fs::create_directories(dir_ / "models" / "two");
    for (const char* f :
         {"models/b.gguf", "models/a.gguf", "models/mmproj-a.gguf", "models/notes.txt",
          "models/folded/weights.gguf", "models/folded/mmproj-f16.gguf", "models/two/x.gguf",
          "models/two/y.gguf"}) {
      std::ofstream(dir_ / f) << "x";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* p) const { return (dir_ / p).string(); }
  fs::path dir_;
};

TEST_F(RouterDirTest, ScanNamesFilesAndSingleModelFolders) {
  Result<std::vector<ModelSource>> m = models_dir_scan(path("models"));
  ASSERT_TRUE(m) << m.status().message();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].name, "a");
  EXPECT_EQ((*m)[0].path, path("models/a.gguf"));
  EXPECT_EQ((*m)[1].name, "b");
  EXPECT_EQ((*m)[2].name, "folded");
  EXPECT_EQ((*m)[2].path, path("models/folded/weights.gguf"));
  EXPECT_FALSE(models_dir_scan(path("missing")));
}

TEST_F(RouterDirTest, PresetSectionsJoinDirectoryModels) {
  std::ofstream(dir_ / "p.ini") << "[*]\ntop-k = 5\n[a]\nc = 256\n[extra]\nmodel = "
                                << path("models/b.gguf") << "\n";
  Result<std::vector<ModelSource>> m = models_catalog(path("models"), path("p.ini"));
  ASSERT_TRUE(m) << m.status().message();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[0].name, "a");
  EXPECT_EQ((*m)[0].args, (std::vector<std::string>{"--top-k=5", "--ctx-size=256"}));
  EXPECT_EQ((*m)[1].args, (std::vector<std::string>{"--top-k=5"}));
  EXPECT_EQ((*m)[2].name, "extra");
  EXPECT_EQ((*m)[2].path, path("models/b.gguf"));

  std::ofstream(dir_ / "bad.ini") << "[nowhere]\nc = 256\n";
  Result<std::vector<ModelSource>> bad = models_catalog(path("models"), path("bad.ini"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("[nowhere]"), std::string::npos);
  EXPECT_FALSE(models_catalog("", path("none.ini")));
}

TEST(RouterArgs, ChildrenInheritAllButWhatTheRouterControls) {
  Result<std::vector<std::string>> a = router_child_args({"--models-dir",
                                                          "/m",
                                                          "-t",
                                                          "2",
                                                          "--port",
                                                          "8080",
                                                          "--host=0.0.0.0",
                                                          "--api-key",
                                                          "secret",
                                                          "--pipeline-groups",
                                                          "2",
                                                          "--models-max=1",
                                                          "--no-models-autoload",
                                                          "--rpc",
                                                          "h:1",
                                                          "--temp",
                                                          "0.3",
                                                          "--ssl-key-file",
                                                          "k.pem",
                                                          "--metrics",
                                                          "-c",
                                                          "512"});
  ASSERT_TRUE(a) << a.status().message();
  EXPECT_EQ(*a, (std::vector<std::string>{"-t", "2", "--pipeline-groups", "2", "--rpc", "h:1",
                                          "--temp", "0.3", "--metrics", "-c", "512"}));
  EXPECT_FALSE(router_child_args({"--nope"}));
  EXPECT_FALSE(router_child_args({"-t"}));
  const std::vector<std::string> env = router_reserved_env();
  for (const char* e : {"LLAMA_API_KEY", "LLAMA_ARG_PORT", "LLAMA_ARG_HOST", "LLAMA_ARG_MODELS_DIR",
                        "LLAMA_ARG_MODEL", "LLAMA_ARG_API_KEY_FILE"}) {
    EXPECT_TRUE(contains(env, e)) << e;
  }
  EXPECT_FALSE(contains(env, "LLAMA_ARG_N_PARALLEL"));
  EXPECT_TRUE(router_reserved_flag("-m"));
  EXPECT_FALSE(router_reserved_flag("-np"));
}

}  // namespace
}  // namespace strata::server
