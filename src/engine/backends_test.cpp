// Where the tensors live (docs/backends.md): --rpc and --device choose the devices and fail
// with a clear error, never an abort, when a server is not there or a name is wrong; the KV
// cache's types are part of the cache's domain, so a record saved under one type is never
// restored under another. The cache's equality with cold runs on an rpc-server and on
// quantized KV caches is the engine suite's (engine_test.cpp, RpcBackend and KvTypes).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/model/devices.h"
#include "engine/rpc_server_test_util.h"
#include "engine/test_temp_dir.h"
#include "engine/testgen/test_model.h"

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

std::string TestDir() {
  static const std::string dir = testing::RemoveAtExit(
      (fs::temp_directory_path() / ("prefixd-backends-test-" + std::to_string(getpid())))
          .string());
  fs::create_directories(dir);
  return dir;
}

// A tiny model of `arch`, made once per process.
std::string TinyModel(const std::string& arch) {
  const std::string path = TestDir() + "/" + arch + ".gguf";
  if (!fs::exists(path)) {
    Status st = MakeTestModel({arch, "tiny", 7}, path);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return path;
}

// llama: heads of 16 values (no quantized KV); qwen35: 32 (one q8_0 / q4_0 block).
EngineOptions Options(const std::string& arch = "llama") {
  EngineOptions o;
  o.model_path = TinyModel(arch);
  o.block_size = 32;
  o.n_ctx_per_slot = 1024;
  o.n_batch = o.n_ubatch = 256;
  o.n_threads = 2;
  o.ram_budget_bytes = 64ull << 20;
  return o;
}

TEST(Devices, AnRpcServerThatDoesNotAnswerIsAnIOErrorNotAnAbort) {
  EngineOptions o = Options();
  const std::string nobody = "127.0.0.1:" + std::to_string(testing::FreeLocalPort());
  o.rpc_servers = {nobody};
  o.n_gpu_layers = -1;
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kIOError);
  EXPECT_NE(e.status().message().find("cannot reach rpc-server at " + nobody),
            std::string::npos) << e.status().message();
  o.rpc_servers = {"no-port-here"};
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "'no-port-here' is not HOST:PORT");
}

TEST(Devices, AnUnknownDeviceNameListsTheOnesThereAre) {
  EngineOptions o = Options();
  o.devices = {"NOPE0"};
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(e.status().message().rfind("--device: no device 'NOPE0' (there are: none, CPU", 0),
            0u) << e.status().message();
}

TEST(Devices, NoneMeansTheCpuOnlyAndDefaultSaysSo) {
  EngineOptions o = Options();
  o.devices = {"none"};
  o.n_gpu_layers = -1;
  auto cpu = Engine::Create(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->GetStats().devices, "CPU only");
  auto plain = Engine::Create(Options());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->GetStats().devices, "default");
  EXPECT_EQ((*plain)->GetStats().cache_type_k, "f16");
}

// An rpc-server's device by name, and the same server named twice in one process (both engines
// share ggml-rpc's one connection to it).
TEST(Devices, AnRpcDeviceByNameServesTwoEnginesAtOnce) {
  const std::string& server = testing::TestRpcServer();
  ASSERT_FALSE(server.empty()) << "rpc-server " << PREFIXD_LLAMA_RPC_SERVER_BIN << " did not start";
  EngineOptions o = Options();
  o.rpc_servers = {server};
  o.devices = {"RPC0"};
  o.n_gpu_layers = -1;
  auto a = Engine::Create(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Engine::Create(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*a)->GetStats().devices, "RPC0 (" + server + ")");
  auto prompt = (*a)->PrepareText("<|im_start|>user\nhello there<|im_end|>\n");
  ASSERT_TRUE(prompt.ok());
  CompletionRequest req;
  req.prompt = *prompt;
  req.max_tokens = 6;
  auto ra = (*a)->Complete(req);
  auto rb = (*b)->Complete(req);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->tokens, rb->tokens);  // the same device, the same calls
  EXPECT_EQ(ra->tokens.size(), 6u);
}

size_t RecordFiles(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/records")) n += e.is_regular_file();
  return n;
}

// The rpc-server dies under a serving engine (patch 0008, docs/llama-patches.md): the request
// then in flight and every later one fail with "backend lost" (never an abort, never zeros
// taken for logits), the engine says so in its stats, and nothing after the loss reaches a
// tier: the records on disk are the ones saved before.
TEST(Devices, ALostRpcServerFailsRequestsCleanlyAndPublishesNothing) {
  const int port = testing::FreeLocalPort();
  const pid_t rpc = testing::SpawnRpcServer(PREFIXD_LLAMA_RPC_SERVER_BIN, port);
  ASSERT_GT(rpc, 0);
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  for (int i = 0; i < 200 && !ProbeTcp(endpoint, 100).ok(); ++i) usleep(20000);
  const std::string dir = TestDir() + "/lost";
  EngineOptions o = Options("qwen35");
  o.rpc_servers = {endpoint};
  o.n_gpu_layers = -1;
  o.cache_dir = dir;
  auto e = Engine::Create(o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string turn =
      "<|im_start|>system\nYou are a coding agent; answer in one line.<|im_end|>\n"
      "<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n";
  auto ask = [&](const std::string& text) {
    auto prompt = (*e)->PrepareText(text);
    EXPECT_TRUE(prompt.ok());
    CompletionRequest req;
    req.prompt = *prompt;
    req.max_tokens = 8;
    return (*e)->Complete(req);
  };
  auto before = ask(turn);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  (*e)->FlushCache();
  const size_t saved = RecordFiles(dir);
  ASSERT_GT(saved, 0u);
  EXPECT_EQ((*e)->GetStats().backend_lost, "");

  kill(rpc, SIGKILL);
  waitpid(rpc, nullptr, 0);
  // The next turn restores the first (a write to the lost device) and decodes; the one after
  // shares nothing. Both fail with the loss, and the engine keeps answering.
  for (const std::string& text : {turn + "ls<|im_end|>\n<|im_start|>user\nAnd src?<|im_end|>\n",
                                  std::string("<|im_start|>user\nSomething new.<|im_end|>\n")}) {
    auto after = ask(text);
    ASSERT_FALSE(after.ok());
    EXPECT_EQ(after.status().code(), Status::Code::kIOError);
    EXPECT_NE(after.status().message().find("backend lost: the rpc-server at " + endpoint),
              std::string::npos) << after.status().message();
  }
  EXPECT_NE((*e)->GetStats().backend_lost.find(endpoint), std::string::npos);
  (*e)->FlushCache();
  EXPECT_EQ(RecordFiles(dir), saved);  // nothing computed after the loss was published
}

// Serves `text` (max 4 tokens) on a fresh engine over `dir` with K and V of `type`; returns
// the cached tokens, after flushing the engine's records to disk.
int32_t CachedOnFreshEngine(const std::string& dir, KvType type, const std::string& text) {
  EngineOptions o = Options("qwen35");
  o.cache_dir = dir;
  o.cache_type_k = o.cache_type_v = type;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return -1;
  EXPECT_EQ((*e)->GetStats().cache_type_v, std::string(KvTypeName(type)));
  auto prompt = (*e)->PrepareText(text);
  EXPECT_TRUE(prompt.ok());
  CompletionRequest req;
  req.prompt = *prompt;
  req.max_tokens = 4;
  auto r = (*e)->Complete(req);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  (*e)->FlushCache();
  return r.ok() ? r->usage.cached_tokens : -1;
}

TEST(KvTypes, AHeadThatIsNotWholeBlocksIsRefusedNamingTheFlag) {
  EngineOptions o = Options();  // llama tiny: heads of 16 values
  o.cache_type_v = KvType::kQ8_0;
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "--cache-type-v q8_0: the model's V head size 16 is not a multiple of the type's "
            "block of 32 values");
  o.cache_type_v = KvType::kBF16;  // an unquantized type has no blocks
  EXPECT_TRUE(Engine::Create(o).ok());
}

TEST(KvTypes, ARecordOfOneTypeIsNeverRestoredUnderAnother) {
  const std::string dir = TestDir() + "/kv-domains";
  const std::string text =
      "<|im_start|>system\nYou are a coding agent with tools to read and write files and run "
      "commands; keep every answer short and exact.<|im_end|>\n<|im_start|>user\nList the "
      "files.<|im_end|>\n<|im_start|>assistant\n";
  ASSERT_EQ(CachedOnFreshEngine(dir, KvType::kF16, text), 0);   // cold: the f16 record saved
  EXPECT_EQ(CachedOnFreshEngine(dir, KvType::kQ8_0, text), 0);  // not read as q8_0
  EXPECT_EQ(CachedOnFreshEngine(dir, KvType::kQ4_0, text), 0);  // nor as q4_0
  EXPECT_GT(CachedOnFreshEngine(dir, KvType::kF16, text), 0);   // f16 finds its own
  EXPECT_GT(CachedOnFreshEngine(dir, KvType::kQ8_0, text), 0);  // and q8_0 its own
}

}  // namespace
}  // namespace prefixd::engine
