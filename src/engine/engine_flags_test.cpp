#include "engine/engine_flags.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace prefixd::engine {
namespace {

constexpr EngineFlagSet kEveryGroup =
    EngineFlagSet::kModel | EngineFlagSet::kCacheDir | EngineFlagSet::kCacheSizes |
    EngineFlagSet::kBlockSize | EngineFlagSet::kSlots | EngineFlagSet::kContext |
    EngineFlagSet::kThreads | EngineFlagSet::kBatch | EngineFlagSet::kGpuLayers |
    EngineFlagSet::kMaxQueue | EngineFlagSet::kNoCache | EngineFlagSet::kWholeState |
    EngineFlagSet::kFlashAttn | EngineFlagSet::kChatTemplate | EngineFlagSet::kRemoteCache;

// argv for Parse() of a stand-alone program: argv[0], then the flags.
struct Argv {
  explicit Argv(std::vector<std::string> args) : strings(std::move(args)) {
    strings.insert(strings.begin(), "prog");
    for (std::string& s : strings) ptrs.push_back(s.data());
  }
  int argc() const { return int(ptrs.size()); }
  char** argv() { return ptrs.data(); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

// Declares `which`, parses `args` and converts.
Result<EngineOptions> Convert(EngineFlagSet which, std::vector<std::string> args) {
  EngineFlagValues values;
  Flags flags("test", "engine flags");
  DeclareEngineFlags(flags, values, which);
  Argv argv(std::move(args));
  PREFIXD_RETURN_IF_ERROR(flags.Parse(argv.argc(), argv.argv(), 1));
  return ToEngineOptions(values);
}

void ExpectSameOptions(const EngineOptions& got, const EngineOptions& want) {
  EXPECT_EQ(got.model_path, want.model_path);
  EXPECT_EQ(got.cache_dir, want.cache_dir);
  EXPECT_EQ(got.remote_cache_url, want.remote_cache_url);
  EXPECT_EQ(got.remote_cache_password, want.remote_cache_password);
  EXPECT_EQ(got.record_key.has_value(), want.record_key.has_value());
  EXPECT_EQ(got.ram_budget_bytes, want.ram_budget_bytes);
  EXPECT_EQ(got.disk_quota_bytes, want.disk_quota_bytes);
  EXPECT_EQ(got.block_size, want.block_size);
  EXPECT_EQ(got.n_slots, want.n_slots);
  EXPECT_EQ(got.n_ctx_per_slot, want.n_ctx_per_slot);
  EXPECT_EQ(got.n_batch, want.n_batch);
  EXPECT_EQ(got.n_ubatch, want.n_ubatch);
  EXPECT_EQ(got.n_threads, want.n_threads);
  EXPECT_EQ(got.n_threads_batch, want.n_threads_batch);
  EXPECT_EQ(got.cache_enabled, want.cache_enabled);
  EXPECT_EQ(got.n_gpu_layers, want.n_gpu_layers);
  EXPECT_EQ(got.flash_attn, want.flash_attn);
  EXPECT_EQ(got.max_queue, want.max_queue);
  EXPECT_EQ(got.whole_state, want.whole_state);
  EXPECT_EQ(got.disk_hits_through_ram, want.disk_hits_through_ram);
  EXPECT_EQ(got.chat_template, want.chat_template);
  EXPECT_EQ(got.rpc_servers, want.rpc_servers);
  EXPECT_EQ(got.devices, want.devices);
  EXPECT_EQ(got.cache_type_k, want.cache_type_k);
  EXPECT_EQ(got.cache_type_v, want.cache_type_v);
  EXPECT_EQ(got.memory_warming, want.memory_warming);
}

TEST(EngineFlags, DefaultsAreEngineOptionsDefaults) {
  Result<EngineOptions> plain = ToEngineOptions(EngineFlagValues{});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ExpectSameOptions(*plain, EngineOptions{});
  Result<EngineOptions> parsed = Convert(kEveryGroup, {});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameOptions(*parsed, EngineOptions{});
}

TEST(EngineFlags, ParsedValuesReachTheOptions) {
  Result<EngineOptions> o = Convert(
      kEveryGroup, {"-m", "m.gguf", "--cache-dir", "/c", "--ram-budget", "512M", "--disk-quota",
                    "1TiB", "--block-size", "64", "--slots", "4", "-c", "2048", "-t", "3", "-tb",
                    "5", "--batch", "1024", "--ubatch", "256", "-ngl", "-1", "--max-queue", "0",
                    "--whole-state", "--no-flash-attn", "--remote-cache", "redis://h:6379",
                    "--warm-memory", "thread"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->model_path, "m.gguf");
  EXPECT_EQ(o->cache_dir, "/c");
  EXPECT_EQ(o->ram_budget_bytes, 512ull << 20);
  EXPECT_EQ(o->disk_quota_bytes, 1ull << 40);
  EXPECT_EQ(o->block_size, 64u);
  EXPECT_EQ(o->n_slots, 4u);
  EXPECT_EQ(o->n_ctx_per_slot, 2048u);
  EXPECT_EQ(o->n_threads, 3);
  EXPECT_EQ(o->n_threads_batch, 5);
  EXPECT_EQ(o->n_batch, 1024u);
  EXPECT_EQ(o->n_ubatch, 256u);
  EXPECT_EQ(o->n_gpu_layers, -1);
  EXPECT_EQ(o->max_queue, 0u);
  EXPECT_TRUE(o->whole_state);
  EXPECT_FALSE(o->flash_attn);
  EXPECT_TRUE(o->cache_enabled);
  EXPECT_EQ(o->remote_cache_url, "redis://h:6379");
  EXPECT_EQ(o->memory_warming, MemoryWarming::kThread);
}

TEST(EngineFlags, PlacementAndKvTypesReachTheOptions) {
  Result<EngineOptions> o =
      Convert(kEveryGroup, {"--rpc", "127.0.0.1:50052, h:1", "-dev", "RPC0,CPU", "-ctk", "q8_0",
                            "-ctv", "q4_0", "--swa-full"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->swa_full);
  EXPECT_FALSE(Convert(kEveryGroup, {})->swa_full);
  EXPECT_EQ(o->rpc_servers, (std::vector<std::string>{"127.0.0.1:50052", "h:1"}));
  EXPECT_EQ(o->devices, (std::vector<std::string>{"RPC0", "CPU"}));
  EXPECT_EQ(o->cache_type_k, KvType::kQ8_0);
  EXPECT_EQ(o->cache_type_v, KvType::kQ4_0);
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0}) {
    EXPECT_EQ(ParseKvType(KvTypeName(t)), t);
  }
  Result<EngineOptions> cpu = Convert(kEveryGroup, {"--device", "none"});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->devices, (std::vector<std::string>{"none"}));
}

TEST(EngineFlags, BadValuesGiveTheExactError) {
  const std::string threads =
      "--threads, --threads-batch, --batch, --ubatch, --gpu-layers: out of range";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ctx", "15"}, "--ctx: 0 (the model's) or 16..16777216"},
      {{"--ctx", "16777217"}, "--ctx: 0 (the model's) or 16..16777216"},
      {{"--slots", "0"}, "--slots: 1..256"},
      {{"--slots", "257"}, "--slots: 1..256"},
      {{"--block-size", "0"}, "--block-size: 1..1048576"},
      {{"--max-queue", "-1"}, "--max-queue: 0..100000"},
      {{"--threads", "-1"}, threads},
      {{"--threads-batch", "-1"}, threads},
      {{"--batch", "0"}, threads},
      {{"--ubatch", "0"}, threads},
      {{"--gpu-layers", "-2"}, threads},
      {{"--ram-budget", "2X"}, "--ram-budget: expected a size such as 512M or 2G, got '2X'"},
      {{"--disk-quota", "-1G"}, "--disk-quota: expected a size such as 512M or 2G, got '-1G'"},
      {{"-ctk", "q5_1"}, "--cache-type-k: 'q5_1' is not f32, f16, bf16, q8_0 or q4_0"},
      {{"-ctv", "F16"}, "--cache-type-v: 'F16' is not f32, f16, bf16, q8_0 or q4_0"},
      {{"--device", "none,RPC0"}, "--device: 'none' (the CPU only) stands alone"},
      {{"--warm-memory", "always"}, "--warm-memory: 'always' is not auto, idle, thread or off"},
  };
  for (const auto& [args, message] : cases) {
    Result<EngineOptions> o = Convert(kEveryGroup, args);
    ASSERT_FALSE(o.ok()) << args[0] << " " << args[1];
    EXPECT_EQ(o.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(o.status().message(), message);
  }
  Result<EngineOptions> qv = Convert(kEveryGroup, {"--no-flash-attn", "-ctv", "q8_0"});
  ASSERT_FALSE(qv.ok());
  EXPECT_EQ(qv.status().message(),
            "--cache-type-v q8_0: a quantized V cache needs flash attention (drop --no-flash-attn)");
  Result<EngineOptions> tmpl = Convert(kEveryGroup, {"--chat-template", "No-Such-Template"});
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(tmpl.status().message().rfind("--chat-template: ", 0), 0u) << tmpl.status().message();
}

TEST(EngineFlags, GroupNotDeclaredIsAnUnknownFlag) {
  const EngineFlagSet run_like = EngineFlagSet::kBlockSize | EngineFlagSet::kNoCache;
  ASSERT_TRUE(Convert(run_like, {"--block-size", "32", "--no-cache"}).ok());
  for (const std::string flag : {"--ctx", "-c", "--remote-cache", "--slots", "-m"}) {
    Result<EngineOptions> o = Convert(run_like, {flag, "1"});
    ASSERT_FALSE(o.ok()) << flag;
    EXPECT_EQ(o.status().message(), "unknown flag '" + flag + "'");
  }
}

TEST(EngineFlags, NoCacheDropsTheDiskDirAndTheSharedTier) {
  Result<EngineOptions> off = Convert(
      kEveryGroup, {"--no-cache", "--cache-dir", "/c", "--remote-cache", "redis://h:1",
                    "--remote-cache-password-file", "/no/such/file"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();  // the password file is not read
  EXPECT_FALSE(off->cache_enabled);
  EXPECT_EQ(off->cache_dir, "");
  EXPECT_EQ(off->remote_cache_url, "");
  Result<EngineOptions> ram_only = Convert(kEveryGroup, {"--cache-dir", "none"});
  ASSERT_TRUE(ram_only.ok());
  EXPECT_TRUE(ram_only->cache_enabled);
  EXPECT_EQ(ram_only->cache_dir, "");
}

TEST(EngineFlags, DeclaresInBitOrderOneSetAtATime) {
  EngineFlagValues values;
  values.ctx = 4096;  // a program's own default shows in --help
  Flags flags("test", "engine flags");
  DeclareEngineFlags(flags, values, EngineFlagSet::kThreads | EngineFlagSet::kContext);
  DeclareEngineFlags(flags, values, EngineFlagSet::kBlockSize);
  const std::string help = flags.Help();
  const size_t ctx = help.find("-c, --ctx <value>");
  const size_t threads = help.find("-t, --threads <value>");
  const size_t block = help.find("--block-size <value>");
  ASSERT_NE(ctx, std::string::npos) << help;
  EXPECT_LT(ctx, threads);
  EXPECT_LT(threads, block);
  EXPECT_NE(help.find("(default: 4096)"), std::string::npos) << help;
}

TEST(EngineFlags, PasswordIsTheFileFirstLine) {
  const std::string path = ::testing::TempDir() + "/engine_flags_password";
  auto write = [&](const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  };
  RemoteCacheFlags remote;
  EXPECT_EQ(*remote.Password(), "");  // no file: no AUTH
  remote.password_file = path;
  write("s3cret\r\nsecond line\n");
  Result<std::string> password = remote.Password();
  ASSERT_TRUE(password.ok()) << password.status().ToString();
  EXPECT_EQ(*password, "s3cret");
  write("\n");
  EXPECT_EQ(remote.Password().status().message(),
            "--remote-cache-password-file " + path + " is empty");
  std::remove(path.c_str());
  EXPECT_FALSE(remote.Password().ok());
}

}  // namespace
}  // namespace prefixd::engine
