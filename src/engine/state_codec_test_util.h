// Test support for the state codec tests: one tiny generated model per architecture (made once
// per test binary in a temporary folder), contexts, prompts and state capture.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/context.h"
#include "engine/prefill.h"
#include "engine/model/model.h"
#include "engine/codec/state_codec.h"
#include "engine/testgen/test_model.h"
#include "engine/test_temp_dir.h"

namespace prefixd::engine::testing {

class CodecModels {
 public:
  static CodecModels& Get() {
    static CodecModels* models = new CodecModels();
    return *models;
  }
  // The tiny model of `arch` (seed 1 unless given), or nullptr after a test failure.
  const Model* Load(const std::string& arch, uint64_t seed = 1) {
    const std::string key = arch + "-" + std::to_string(seed);
    auto it = models_.find(key);
    if (it != models_.end()) return it->second.get();
    const std::string path = dir_ + "/" + key + ".gguf";
    Status st = MakeTestModel({arch, "tiny", seed}, path);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return nullptr;
    auto model = Model::Load({path, 0});
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return nullptr;
    return (models_[key] = std::move(model).value()).get();
  }

 private:
  CodecModels() {
    EnsureBackendInitialized();
    char tmpl[] = "/tmp/prefixd-codec-models-XXXXXX";
    dir_ = RemoveAtExit(mkdtemp(tmpl));
  }
  std::string dir_;
  std::map<std::string, std::unique_ptr<Model>> models_;
};

// Models of llama.cpp's own generator (tests/test-llama-archs.cpp of the pinned llama.cpp,
// PREFIXD_LLAMA_ARCHS_BIN), for the memory types prefixd's test models do not have. Made once
// per test binary in a temporary folder, for the archs of kGeneratedArchs, with a fixed seed
// (the generator draws one at random without -s: the weights, and so the last bits a test
// measures, would change from run to run).
inline constexpr const char* kGeneratedArchs =
    "deepseek2|mistral4|exaone4|qwen4exp|glm-dsa|deepseek32|hy_v4|minimax-m3|dots3note|"
    "kimi-linear|kimi-k3|bailingmoe3|lfm2|deepseek4|plamo2";

class GeneratedModels {
 public:
  static GeneratedModels& Get() {
    static GeneratedModels* m = new GeneratedModels();
    return *m;
  }
  // The model of `arch` (one of kGeneratedArchs), or nullptr after a test failure.
  const Model* Load(const std::string& arch) {
    auto it = models_.find(arch);
    if (it != models_.end()) return it->second.get();
    for (const char* kind : {"-dense.gguf", "-moe.gguf"}) {
      const std::string path = dir_ + "/" + arch + kind;
      if (!std::filesystem::exists(path)) continue;
      auto model = Model::Load({path, 0});
      EXPECT_TRUE(model.ok()) << model.status().ToString();
      if (!model.ok()) return nullptr;
      return (models_[arch] = std::move(model).value()).get();
    }
    ADD_FAILURE() << "test-llama-archs wrote no model for " << arch << " into " << dir_;
    return nullptr;
  }

 private:
  GeneratedModels() {
    EnsureBackendInitialized();
    char tmpl[] = "/tmp/prefixd-codec-archs-XXXXXX";
    dir_ = RemoveAtExit(mkdtemp(tmpl));
    const std::string cmd = std::string("'") + PREFIXD_LLAMA_ARCHS_BIN + "' -s 1 -a '^(" +
                            kGeneratedArchs + ")$' -o '" + dir_ + "/' > '" + dir_ +
                            "/gen.log' 2>&1";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
  }
  std::string dir_;
  std::map<std::string, std::unique_ptr<Model>> models_;
};

// A test-name suffix for an arch ("glm-dsa" -> "glm_dsa").
inline std::string ArchTestName(std::string arch) {
  for (char& ch : arch) {
    if (ch == '-') ch = '_';
  }
  return arch;
}

// Deterministic tokens over the whole (tiny, 128-token) vocabulary of a generated model.
inline std::vector<Token> GeneratedTokens(const Model& model, int n) {
  std::vector<Token> t(n);
  uint32_t x = 11;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = Token((x >> 8) % uint32_t(model.n_vocab()));
  }
  return t;
}

// n_batch 128 (a chunk never splits below a chunk end), n_ubatch 32 (chunks are split into
// several micro-batches), two sequences (two streams).
inline ContextOptions CodecContextOptions(bool flash_attn) {
  ContextOptions o;
  o.n_ctx_per_seq = 256;
  o.n_seq = 2;
  o.n_batch = 128;
  o.n_ubatch = 32;
  o.n_threads = 2;
  o.flash_attn = flash_attn;
  return o;
}

// Deterministic ordinary tokens (no specials in the low ids of the test vocabulary matter).
inline std::vector<Token> PromptTokens(const Model& model, int n, uint32_t seed = 7) {
  std::vector<Token> t(n);
  const uint32_t span = uint32_t(model.n_vocab()) - 300;
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = Token(100 + (x >> 8) % span);
  }
  return t;
}

// Prefills [0, q) of `tokens` into `seq` in chunks ending at each of `ends` (and q), and takes
// the partial state at each of `ends` (with its sliding-window cell layout) and the whole state
// at the end.
struct Captured {
  std::map<int32_t, std::vector<uint8_t>> partial_at;
  std::map<int32_t, std::vector<uint8_t>> whole_at;
  std::map<int32_t, std::vector<uint8_t>> layout_at;  // cell_layout.h; empty without SWA
  std::vector<uint8_t> whole;
};
inline Result<Captured> PrefillAndCapture(Context& ctx, int32_t seq,
                                          const std::vector<Token>& tokens, int32_t q,
                                          const std::vector<int32_t>& ends) {
  Captured c;
  auto hook = [&](int32_t pos) -> Status {
    for (int32_t e : ends) {
      if (e != pos) continue;
      PREFIXD_ASSIGN_OR_RETURN(c.partial_at[pos], ctx.GetState(seq, StatePart::kPartial));
      PREFIXD_ASSIGN_OR_RETURN(c.whole_at[pos],
                               ctx.GetState(seq, StatePart::kWhole, &c.layout_at[pos]));
    }
    return Status::OK();
  };
  ctx.SeqClear(seq);
  PREFIXD_RETURN_IF_ERROR(
      Prefill(ctx, seq, std::span<const Token>(tokens.data(), size_t(q)), 0, ends, hook));
  PREFIXD_ASSIGN_OR_RETURN(c.whole, ctx.GetState(seq, StatePart::kWhole));
  return c;
}

inline std::vector<float> LastLogits(const Context& ctx) {
  const float* l = ctx.Logits(-1);
  return std::vector<float>(l, l + ctx.model().n_vocab());
}

// Decodes [p, p+k) of `tokens` into `seq` as one chunk and returns the last logits.
inline Result<std::vector<float>> DecodeTail(Context& ctx, int32_t seq,
                                             const std::vector<Token>& tokens, int32_t p,
                                             int32_t k) {
  PREFIXD_RETURN_IF_ERROR(
      ctx.DecodeChunk(seq, std::span<const Token>(tokens.data() + p, size_t(k)), p, true));
  return LastLogits(ctx);
}

inline bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The largest |a - b| (infinity for different sizes or a NaN).
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return INFINITY;
    max_diff = std::max(max_diff, d);
  }
  return max_diff;
}

// For a failure message: how far apart two logit vectors are.
inline std::string LogitsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n_diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n_diff += a[i] != b[i];
  char buf[128];
  std::snprintf(buf, sizeof buf, "%zu of %zu/%zu differ, max |diff| %.3g", n_diff, a.size(),
                b.size(), MaxAbsDiff(a, b));
  return buf;
}

}  // namespace prefixd::engine::testing
