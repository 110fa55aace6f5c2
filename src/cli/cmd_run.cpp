// prefixd run: one prompt in, generated text out (greedy by default, the same every time).
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "engine/context.h"
#include "engine/generate.h"
#include "engine/model.h"

namespace prefixd::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  int64_t n_predict = 32;
  int64_t ctx = 4096;
  double temperature = 0.0;
  int64_t seed = 0;
};

int Run(const RunArgs& a) {
  auto model = engine::Model::Load({.path = a.model});
  if (!model.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", model.status().ToString().c_str());
    return 1;
  }
  engine::ContextOptions copt;
  copt.n_ctx_per_seq = uint32_t(a.ctx);
  auto ctx = engine::Context::Create(**model, copt);
  if (!ctx.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  std::vector<engine::Token> prompt = (*model)->Tokenize(a.prompt, true);
  if (prompt.empty() || prompt.size() >= size_t(a.ctx)) {
    std::fprintf(stderr, "prefixd run: prompt has %zu tokens; need 1..%lld\n", prompt.size(),
                 (long long)a.ctx - 1);
    return 2;
  }
  Status st = engine::Prefill(**ctx, 0, prompt, 0);
  engine::GenerateOptions gopt;
  gopt.max_tokens = int(a.n_predict);
  gopt.sampling.temperature = a.temperature;
  gopt.sampling.seed = uint64_t(a.seed);
  auto out = st.ok() ? engine::Generate(**ctx, 0, int32_t(prompt.size()), gopt)
                     : Result<std::vector<engine::Token>>(st);
  if (!out.ok()) {
    std::fprintf(stderr, "prefixd run: %s\n", out.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", (*model)->Detokenize(*out, false).c_str());
  return 0;
}

}  // namespace

int CmdRun(int argc, char** argv) {
  RunArgs a;
  Flags flags("run", "Generate text for one prompt with a GGUF model and print it.");
  flags.String("-m,--model", &a.model, "GGUF model file");
  flags.String("-p,--prompt", &a.prompt, "prompt text (special tokens such as <|im_start|> are parsed)");
  flags.Int("-n,--n-predict", &a.n_predict, "tokens to generate at most");
  flags.Int("-c,--ctx", &a.ctx, "context length");
  flags.Double("--temperature", &a.temperature, "sampling temperature; 0 is greedy");
  flags.Int("--seed", &a.seed, "sampling seed");
  return RunWithFlags(flags, argc, argv, [&] {
    if (a.model.empty()) {
      std::fprintf(stderr, "prefixd run: -m/--model is required\n");
      return 2;
    }
    return Run(a);
  });
}

}  // namespace prefixd::cli
