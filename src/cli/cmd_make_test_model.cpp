// prefixd make-test-model: writes a random-weight GGUF model of a real architecture, for tests
// and benchmarks without downloads (see docs/test-models.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/testgen/test_model.h"
#include "engine/testgen/test_projector.h"
#include "util/flags.h"

namespace prefixd::cli {
namespace {

using json = nlohmann::json;

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Refuses --mmproj for an arch without a projector before anything is written.
bool CheckMmproj(const engine::TestModelSpec& spec, const std::string& mmproj) {
  const auto& archs = engine::ProjectorTestModelArchs();
  if (mmproj.empty() || std::find(archs.begin(), archs.end(), spec.arch) != archs.end()) {
    return true;
  }
  std::fprintf(stderr,
               "prefixd make-test-model: --mmproj: arch %s has no image projector (%s do)\n",
               spec.arch.c_str(), Join(archs).c_str());
  return false;
}

// --script-json: {"parts": [TEXT, ...], "ranks": {TOKEN: [NEXT, ...]}} into `out`.
bool ParseScript(const std::string& text, engine::TestScript* out) {
  const json j = json::parse(text, nullptr, false);
  const auto is_strings = [](const json& a) {
    return a.is_array() && std::all_of(a.begin(), a.end(), [](const json& s) { return s.is_string(); });
  };
  bool ok = j.is_object() && j.contains("parts") && is_strings(j["parts"]) && !j["parts"].empty();
  const json ranks = j.is_object() ? j.value("ranks", json::object()) : json();
  ok = ok && ranks.is_object();
  for (auto it = ranks.begin(); ok && it != ranks.end(); ++it) ok = is_strings(it.value());
  if (!ok) {
    std::fprintf(stderr, "prefixd make-test-model: --script-json: want {\"parts\": [TEXT, ...], "
                         "\"ranks\": {TOKEN: [NEXT, ...]}} with at least one part\n");
    return false;
  }
  out->parts = j["parts"].get<std::vector<std::string>>();
  for (auto it = ranks.begin(); it != ranks.end(); ++it) {
    out->ranks[it.key()] = it.value().get<std::vector<std::string>>();
  }
  return true;
}

int Fail(const Status& st) {
  std::fprintf(stderr, "prefixd make-test-model: %s\n", st.ToString().c_str());
  return st.code() == Status::Code::kInvalidArgument ? 2 : 1;
}

int Make(const engine::TestModelSpec& spec, const std::string& out, const std::string& mmproj) {
  if (out.empty()) {
    std::fprintf(stderr, "prefixd make-test-model: --out is required\n");
    return 2;
  }
  if (!CheckMmproj(spec, mmproj)) return 2;
  const auto start = std::chrono::steady_clock::now();
  if (const Status st = engine::MakeTestModel(spec, out); !st.ok()) return Fail(st);
  if (!mmproj.empty()) {
    if (const Status st = engine::MakeTestProjector(spec, mmproj); !st.ok()) return Fail(st);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s%s%s (%s, %s, seed %llu) in %.1f s\n", out.c_str(),
              mmproj.empty() ? "" : " and ", mmproj.c_str(), spec.arch.c_str(),
              spec.shape.c_str(), static_cast<unsigned long long>(spec.seed), secs);
  return 0;
}

}  // namespace

int CmdMakeTestModel(int argc, char** argv) {
  std::string arch = "llama";
  std::string shape = "tiny";
  int64_t seed = 1;
  std::string out;
  std::string vocab;
  std::string chat_template;
  int64_t nextn = 0;
  bool predictable = false;
  std::string script;
  std::string script_json;
  std::string mmproj;
  Flags flags("make-test-model",
              "write a random-weight GGUF model of a real architecture, with a byte-level BPE "
              "tokenizer and a Qwen3-style chat template, or a real tokenizer and template "
              "(--vocab, --template; docs/test-models.md)");
  flags.String("-a,--arch", &arch,
               "architecture: " + Join(engine::TestModelArchs()) + ", " +
                   Join(engine::ExtraTestModelArchs()) +
                   " (qwen4exp and after: made by llama.cpp's test-llama-archs, which also "
                   "takes any other arch it writes)");
  flags.String("-s,--shape", &shape,
               "tiny (a few MB, for tests), small (~0.5B, F16) or medium (~3B, Q8_0); "
               "archs from llama.cpp's generator are tiny only");
  flags.Int("--seed", &seed, "selects the random weights; the same seed gives the same file");
  flags.String("--vocab", &vocab,
               "a real tokenizer (and its chat template, when it has one): NAME of the pinned "
               "source's models/ggml-vocab-NAME.gguf (qwen35, gemma-4, llama-bpe, ...) or a "
               "vocab GGUF FILE; default: prefixd's own 640-token BPE");
  flags.String("--template", &chat_template,
               "the chat template: NAME of the pinned source's models/templates/NAME.jinja "
               "(Qwen3.5-4B, openai-gpt-oss-120b, ...) or a Jinja FILE; default: the "
               "tokenizer's own");
  flags.Int("--nextn", &nextn,
            "multi-token-prediction heads (NextN layers, for --spec-type draft-mtp): " +
                Join(engine::NextnTestModelArchs()) + " takes 1; default 0");
  flags.Bool("--predictable", &predictable,
             "with --nextn on qwen35 or qwen3next: a trunk that answers by its last token only "
             "(every residual branch writes zero) and an MTP head built to predict it, so "
             "drafts are accepted; for tests and benches of accepted drafts");
  flags.String("--script", &script,
               "qwen35 or qwen3next: the model's answer to any prompt is TEXT, then the end of "
               "the turn (each token of TEXT at most once; at most 63 tokens on tiny)");
  flags.String("--script-json", &script_json,
               "as --script, a script whose tokens may repeat: {\"parts\": [TEXT, ...], "
               "\"ranks\": {TOKEN: [NEXT, ...], ...}}, each part tokenized on its own, and a "
               "repeated token's followers in order of preference (\"\": the end of the turn), "
               "for a grammar to choose among (docs/test-models.md)");
  flags.String("-o,--out", &out, "the .gguf file to write (required)");
  flags.String("--mmproj", &mmproj,
               "also write a random-weight image projector for libmtmd (serve --mmproj) that "
               "fits the model, to this .gguf file: " + Join(engine::ProjectorTestModelArchs()) +
                   " (other archs refuse it; docs/test-models.md)");
  return RunWithFlags(flags, argc, argv, [&] {
    engine::TestModelSpec spec{arch, shape, static_cast<uint64_t>(seed)};
    spec.vocab = vocab;
    spec.chat_template = chat_template;
    if (nextn < 0) {
      std::fprintf(stderr, "prefixd make-test-model: --nextn must be 0 or more\n");
      return 2;
    }
    spec.nextn_layers = uint32_t(nextn);
    spec.predictable = predictable;
    if (!script.empty() && !script_json.empty()) {
      std::fprintf(stderr, "prefixd make-test-model: --script and --script-json are exclusive\n");
      return 2;
    }
    if (!script.empty()) spec.script.parts = {script};
    if (!script_json.empty() && !ParseScript(script_json, &spec.script)) return 2;
    return Make(spec, out, mmproj);
  });
}

}  // namespace prefixd::cli
