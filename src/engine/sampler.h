// Sampler: picks the next token from a decode's logits with llama.cpp common's sampler
// (common_sampler): logit bias, repetition / presence / frequency penalties, top-k, top-p,
// min-p, temperature, a seeded distribution, and a GBNF grammar — lazy ones start at a
// trigger. Greedy by default (temperature <= 0): the highest logit, the lowest id on ties,
// which makes output a pure function of the prompt — what the cache-correctness tests rely on.
// Not thread-safe; one per generating request, used on the scheduler thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/chat/chat_output.h"
#include "engine/codec/types.h"
#include "util/status.h"

struct llama_context;
struct common_sampler;

namespace prefixd::engine {

class Model;

struct SamplingOptions {
  double temperature = 0.0;  // <= 0: greedy
  double top_p = 1.0;
  int top_k = 0;             // 0: off
  double min_p = 0.0;        // 0: off
  uint64_t seed = 0;
  bool ignore_eos = false;   // never pick an end-of-generation token (llama-server's ignore_eos)
  double presence_penalty = 0.0;    // subtracted once from every token already generated
  double frequency_penalty = 0.0;   // subtracted per earlier occurrence
  double repetition_penalty = 1.0;  // llama.cpp's repeat_penalty (divides positive logits)
  int penalty_last_n = 64;          // the generated tokens the penalties look back on
  std::vector<std::pair<Token, float>> logit_bias;  // added to the logits; -inf bans
  GrammarSpec grammar;       // none by default
  // The most tokens a reasoning block may take (the template's thinking tags), after which its
  // end tag is forced (common's reasoning-budget sampler, llama-server's
  // reasoning_budget_tokens). -1: no limit.
  int reasoning_budget = -1;
  int top_logprobs = -1;     // -1: no logprobs; else the alternatives reported per token
};

// One token and its log-probability under the model (before sampling changes the logits).
struct TokenProb {
  Token token = -1;
  std::string piece;  // the token's text (filled by the caller that knows the vocabulary)
  float logprob = 0.0f;
};

struct TokenLogprobs {
  TokenProb chosen;
  std::vector<TokenProb> top;  // the most likely tokens, most likely first
};

// log-softmax of `logits` at `chosen` and the `n_top` most likely tokens (lowest id first on
// ties). Pieces are left empty.
TokenLogprobs ComputeLogprobs(const float* logits, int n_vocab, Token chosen, int n_top);

class Sampler {
 public:
  // InvalidArgument when the grammar does not parse or a value is out of range.
  static Result<std::unique_ptr<Sampler>> Create(const Model& model,
                                                 const SamplingOptions& options);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Picks a token from the logits of the `idx`-th output of the last decode on `ctx` (-1: the
  // last) and accepts it (the grammar and the penalties see it). Never throws: what common's
  // sampler throws (a grammar with no way on, as when it has ended and the end-of-generation
  // tokens are masked) is an Aborted status naming it; the sampler is then spent.
  // With GrammarSpec::forced_call, the call header's tokens come out instead of samples
  // (accepted by the grammar like any sample) once no reasoning block is open.
  Result<Token> Sample(llama_context* ctx, int32_t idx);
  bool has_grammar() const { return has_grammar_; }

 private:
  Sampler(common_sampler* s, int n_vocab, bool has_grammar)
      : sampler_(s), n_vocab_(n_vocab), has_grammar_(has_grammar) {}
  // The forced call's tokens and when they start: `after` empty, at once; else after the
  // sampled tokens end with one of its sequences (the reasoning block's end tags). Then, with
  // several tools, `rests` (GrammarSpec::forced_call_rests, tokenized, as far as the grammar
  // accepts each): the model chooses among their next tokens until one rest is left, and that
  // one's remaining tokens are decoded.
  struct ForcedCall {
    std::vector<Token> tokens;
    std::vector<std::vector<Token>> after;
    std::vector<Token> recent;  // the last sampled tokens, as long as the longest of `after`
    size_t next = 0;            // tokens[next] goes out next once started
    bool started = false;
    std::vector<std::vector<Token>> rests;
    std::vector<Token> chosen;  // the tokens out since `tokens`, all on some rest
  };
  static ForcedCall PlanForcedCall(const Model& model, const GrammarSpec& g);
  // The next forced token, or -1 while none is due; NoteSampled starts the forcing when the
  // sampled tokens end with one of `after`.
  Token NextForced();
  void NoteSampled(Token t);
  std::vector<Token> NextChoices() const;
  Token SampleChoice(llama_context* ctx, int32_t idx, const std::vector<Token>& choices);
  common_sampler* sampler_;  // null for plain greedy: the argmax, without a pass through
                             // common's chain (which softmaxes the whole vocabulary per token)
  int n_vocab_;
  bool has_grammar_;
  ForcedCall forced_;
};

}  // namespace prefixd::engine
