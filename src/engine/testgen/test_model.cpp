// MakeTestModel: metadata (test_model_arch.cpp, test_model_tokenizer.cpp; or llama.cpp's
// generator, test_model_upstream.cpp) -> llama.cpp builds the model with random weights
// (test_model_weights.cpp) and writes it (test_model_writer.cpp).
#include "engine/testgen/test_model.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/testgen/test_model_internal.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

using test_model::BaseDims;
using test_model::TokenizerChoice;
using test_model::GgufPtr;
using test_model::Weights;
using test_model::WriteModel;

Result<GgufPtr> BuildMetadata(const TestModelSpec& spec, const TokenizerChoice& tokenizer,
                              const BaseDims& dims, uint32_t* n_layer) {
  GgufPtr meta(gguf_init_empty());
  PREFIXD_RETURN_IF_ERROR(
      test_model::AddArchMetadata(meta.get(), spec.arch, dims, n_layer, spec.nextn_layers));
  const std::string name = "prefixd-test-" + spec.arch + "-" + spec.shape +
                           (spec.nextn_layers > 0 ? "-mtp" : "");
  gguf_set_val_str(meta.get(), "general.name", name.c_str());
  test_model::AddTokenizer(meta.get(), tokenizer, dims.n_vocab);
  test_model::AddWeightTypes(meta.get(), *n_layer, dims.weight_type);
  test_model::AddVocabTensorTypes(meta.get(), dims.n_vocab);
  return meta;
}

std::string Seed(uint64_t seed) { return "seed " + std::to_string(seed); }

// ", tokenizer of ggml-vocab-qwen35.gguf, template Qwen3.5-4B" for the description.
std::string TokenizerNote(const TestModelSpec& spec, const TokenizerChoice& tokenizer) {
  std::string note;
  if (tokenizer.vocab) {
    note += ", tokenizer of " + tokenizer.vocab_path.substr(tokenizer.vocab_path.rfind('/') + 1);
  }
  if (tokenizer.has_template) note += ", chat template " + spec.chat_template;
  return note;
}

// An arch prefixd describes itself (test_model_arch.cpp), with prefixd's weights.
Status MakeOwn(const TestModelSpec& spec, const TokenizerChoice& tokenizer,
               const std::string& out_path) {
  if (spec.predictable && spec.nextn_layers == 0) {
    return Status::InvalidArgument("a predictable test model is one with an MTP head (--nextn 1)");
  }
  BaseDims dims;
  PREFIXD_RETURN_IF_ERROR(test_model::ShapeDims(spec.shape, &dims));
  if (spec.f16_weights) dims.weight_type = GGML_TYPE_F16;
  dims.n_vocab = test_model::VocabSize(tokenizer, dims.n_vocab);
  uint32_t n_layer = 0;
  PREFIXD_ASSIGN_OR_RETURN(GgufPtr meta, BuildMetadata(spec, tokenizer, dims, &n_layer));
  test_model::WeightInit init;
  init.seed = spec.seed;
  init.predictable = spec.predictable || !spec.script.empty();
  init.n_layer = n_layer - spec.nextn_layers;  // the trunk's scales: its weights stay the same
  Weights weights = {test_model::FillTensor, &init, &init.error, nullptr};
  if (!spec.script.empty()) {
    if (spec.arch != "qwen35" && spec.arch != "qwen3next") {
      return Status::InvalidArgument("a scripted test model is made for qwen35 and qwen3next");
    }
    weights.finish = [&spec](const llama_model* model, const auto& tensors) {
      return test_model::ApplyScript(model, tensors, spec.script);
    };
  }
  const std::string desc = "prefixd test model: random weights (" + Seed(spec.seed) +
                           TokenizerNote(spec, tokenizer) +
                           (spec.nextn_layers > 0 ? ", an MTP head" : "") +
                           (spec.script.empty() ? "" : ", a scripted answer") + "), not trained";
  return WriteModel(meta.get(), weights, desc, out_path, spec.nextn_layers > 0);
}

std::string ValidArchs() {
  std::string valid;
  for (const auto* list : {&TestModelArchs(), &ExtraTestModelArchs()}) {
    for (const std::string& a : *list) valid += (valid.empty() ? "" : ", ") + a;
  }
  return valid;
}

// "prefixd-test-<arch>-tiny". llama.cpp's vocabulary loader gives Phi-3's token attributes
// (which need a "</s>" token) to any model whose general.name contains "phi3", so phi3 is
// named "phi_3" there.
std::string UpstreamName(const TestModelSpec& spec) {
  std::string arch = spec.arch;
  if (const size_t at = arch.find("phi3"); at != std::string::npos) arch.replace(at, 4, "phi_3");
  return "prefixd-test-" + arch + "-tiny" + (spec.nextn_layers > 0 ? "-mtp" : "");
}

// An arch of llama.cpp's generator, rebuilt with prefixd's tokenizer (test_model_upstream.cpp).
Status MakeFromUpstream(const TestModelSpec& spec, const TokenizerChoice& tokenizer,
                        const std::string& out_path) {
  const auto& mtp = NextnTestModelArchs();
  if (spec.nextn_layers > 0 && std::find(mtp.begin(), mtp.end(), spec.arch) == mtp.end()) {
    return Status::InvalidArgument("test model arch '" + spec.arch + "' takes no NextN layers "
                                   "(MTP heads: " + test_model::NextnArchList() + ")");
  }
  if (spec.nextn_layers > 1) return Status::InvalidArgument(spec.arch + " takes one NextN layer");
  if (!spec.script.empty()) {
    return Status::InvalidArgument("a scripted test model is made for qwen35 and qwen3next");
  }
  if (spec.predictable) {
    return Status::InvalidArgument("test model arch '" + spec.arch + "' comes from llama.cpp's "
                                   "generator: predictable MTP heads are made for qwen35 and "
                                   "qwen3next");
  }
  if (spec.f16_weights) {
    return Status::InvalidArgument("test model arch '" + spec.arch + "' comes from llama.cpp's "
                                   "generator: F16 weights are made for prefixd's own archs");
  }
  if (spec.shape != "tiny") {
    return Status::InvalidArgument("test model arch '" + spec.arch +
                                   "' comes from llama.cpp's generator, which has one shape: tiny");
  }
  auto upstream = test_model::UpstreamModel::Generate(spec.arch, spec.seed, out_path);
  if (!upstream.ok() && upstream.status().code() == Status::Code::kInvalidArgument) {
    return Status::InvalidArgument("unknown test model arch '" + spec.arch + "' (valid: " +
                                   ValidArchs() + ", or another arch that llama.cpp's "
                                   "test-llama-archs writes)");
  }
  PREFIXD_RETURN_IF_ERROR(upstream.status());
  test_model::UpstreamModel& model = *upstream.value();
  BaseDims dims;
  dims.n_vocab = test_model::VocabSize(tokenizer, dims.n_vocab);
  const GgufPtr meta = model.BuildMetadata(tokenizer, dims.n_vocab, dims.n_ctx_train,
                                           UpstreamName(spec), spec.nextn_layers);
  const Weights weights = {test_model::UpstreamModel::FillTensor, &model, &model.error(), nullptr};
  const std::string desc = "prefixd test model: llama.cpp test-llama-archs " + spec.arch + "-" +
                           model.variant() + " (" + Seed(spec.seed) +
                           TokenizerNote(spec, tokenizer) +
                           (spec.nextn_layers > 0 ? ", an MTP head" : "") +
                           "); random weights, not trained";
  return WriteModel(meta.get(), weights, desc, out_path, spec.nextn_layers > 0);
}

}  // namespace

const std::vector<std::string>& TestModelArchs() {
  static const std::vector<std::string> kArchs = {
      "llama", "qwen35", "qwen3next", "nemotron_h", "granitehybrid",
      "lfm2",  "mamba2", "gemma3",    "gpt-oss",
  };
  return kArchs;
}

const std::vector<std::string>& ExtraTestModelArchs() {
  static const std::vector<std::string> kArchs = {
      "gemma4",   "qwen4exp",    "deepseek4", "deepseek2", "glm-dsa",    "qwen35moe",
      "nemotron_h_moe", "kimi-linear", "jamba", "falcon-h1", "minimax-m3",
  };
  return kArchs;
}

const std::vector<std::string>& NextnTestModelArchs() {
  // Own archs, then archs of llama.cpp's generator.
  static const std::vector<std::string> kArchs = {"qwen35",   "qwen3next", "qwen35moe",
                                                  "glm4moe",  "deepseek2", "glm-dsa"};
  return kArchs;
}

const std::vector<std::string>& TestModelShapes() {
  static const std::vector<std::string> kShapes = {"tiny", "small", "medium"};
  return kShapes;
}

Status MakeTestModel(const TestModelSpec& spec, const std::string& out_path) {
  auto tokenizer = test_model::LoadTokenizerChoice(spec.vocab, spec.chat_template);
  if (!tokenizer.ok()) return tokenizer.status();
  const Status st = test_model::HasArchMetadata(spec.arch)
                        ? MakeOwn(spec, *tokenizer, out_path)
                        : MakeFromUpstream(spec, *tokenizer, out_path);
  if (st.ok() || st.code() == Status::Code::kInvalidArgument) return st;
  return st.WithContext("make test model " + spec.arch);
}

}  // namespace prefixd::engine
