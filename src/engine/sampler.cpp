#include "engine/sampler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <stdexcept>

#include "common.h"
#include "engine/model/model.h"
#include "llama.h"
#include "sampling.h"

namespace prefixd::engine {

namespace {

common_grammar_trigger ToCommon(const GrammarTrigger& t) {
  common_grammar_trigger out;
  switch (t.type) {
    case GrammarTrigger::Type::kToken: out.type = COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN; break;
    case GrammarTrigger::Type::kWord: out.type = COMMON_GRAMMAR_TRIGGER_TYPE_WORD; break;
    case GrammarTrigger::Type::kPattern: out.type = COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN; break;
    case GrammarTrigger::Type::kPatternFull:
      out.type = COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL;
      break;
  }
  out.value = t.value;
  out.token = t.token;
  return out;
}

common_grammar_type ToCommon(GrammarKind k) {
  switch (k) {
    case GrammarKind::kNone: return COMMON_GRAMMAR_TYPE_NONE;
    case GrammarKind::kUser: return COMMON_GRAMMAR_TYPE_USER;
    case GrammarKind::kOutputFormat: return COMMON_GRAMMAR_TYPE_OUTPUT_FORMAT;
    case GrammarKind::kToolCalls: return COMMON_GRAMMAR_TYPE_TOOL_CALLS;
  }
  return COMMON_GRAMMAR_TYPE_NONE;
}

// The generation prompt's tokens as common feeds them to the grammar and the reasoning budget
// (some tokenizers add a space before the first special token; common skips it).
std::vector<Token> PrefillTokens(const Model& model, const std::string& generation_prompt) {
  std::vector<Token> out = model.Tokenize(generation_prompt, true, false);
  if (!out.empty() && !generation_prompt.empty()) {
    const std::string piece = model.TokenPiece(out.front());
    if (!piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) &&
        !std::isspace(static_cast<unsigned char>(generation_prompt[0]))) {
      out.erase(out.begin());
    }
  }
  return out;
}

// How many of `prefill`'s tokens follow the last whole `start` in it (0 without one).
size_t TokensAfterLast(const std::vector<Token>& prefill, const std::vector<Token>& start) {
  if (start.empty() || prefill.size() < start.size()) return 0;
  for (size_t end = prefill.size(); end >= start.size(); --end) {
    if (std::equal(start.begin(), start.end(), prefill.begin() + long(end - start.size()))) {
      return prefill.size() - end;
    }
  }
  return 0;
}

// As llama-server: the thinking tags make common add its reasoning-budget sampler (with no
// budget), which keeps a lazy grammar from starting inside the thinking block. Common counts the
// generation prompt's tokens after the start tag against the budget (Apriel's opens the block
// with "Here are my reasoning steps:\n", ten tokens: a budget of 8 ran out inside the prompt and
// forced its end tag from the middle, "FINAL RESPONSE]"); a budget is what the model writes, so
// those tokens are added to it.
void SetThinking(const Model& model, const GrammarSpec& g, int budget, common_params_sampling& p) {
  if (g.thinking_start.empty() || g.thinking_end.empty()) return;
  p.reasoning_budget_start = model.Tokenize(g.thinking_start, true, false);
  for (const std::string& tag : g.thinking_end) {
    if (!tag.empty()) p.reasoning_budget_end.push_back(model.Tokenize(tag, true, false));
  }
  if (!p.reasoning_budget_end.empty()) p.reasoning_budget_forced = p.reasoning_budget_end.front();
  const size_t in_prompt =
      TokensAfterLast(PrefillTokens(model, g.generation_prompt), p.reasoning_budget_start);
  p.reasoning_budget_tokens = budget < 0 ? budget : budget + int(in_prompt);
  p.generation_prompt = g.generation_prompt;  // where the block opened: inside it from the start
}

void SetGrammar(const GrammarSpec& g, common_params_sampling& p) {
  if (g.empty()) return;
  p.grammar = common_grammar(ToCommon(g.kind), g.gbnf);
  p.grammar_lazy = g.lazy;
  for (const GrammarTrigger& t : g.triggers) {
    p.grammar_triggers.push_back(ToCommon(t));
    if (t.type == GrammarTrigger::Type::kToken) p.preserved_tokens.insert(t.token);
  }
  p.generation_prompt = g.generation_prompt;
}

// The chain llama-server builds, reduced to what the options ask for. Greedy keeps only the
// penalties and a zero temperature: the highest logit wins, the lowest id on ties (the
// temperature sampler keeps the first maximum of the unsorted candidates).
common_params_sampling ToCommon(const SamplingOptions& o) {
  common_params_sampling p;
  p.seed = uint32_t(o.seed);
  p.top_k = o.top_k;
  p.top_p = float(o.top_p);
  p.min_p = float(o.min_p);
  p.temp = o.temperature <= 0.0 ? 0.0f : float(o.temperature);
  p.penalty_last_n = o.penalty_last_n;
  p.penalty_repeat = float(o.repetition_penalty);
  p.penalty_freq = float(o.frequency_penalty);
  p.penalty_present = float(o.presence_penalty);
  p.no_perf = true;
  for (const auto& [token, bias] : o.logit_bias) p.logit_bias.push_back({token, bias});
  if (o.temperature <= 0.0) {
    p.samplers = {COMMON_SAMPLER_TYPE_PENALTIES, COMMON_SAMPLER_TYPE_TEMPERATURE};
  } else {
    p.samplers = {COMMON_SAMPLER_TYPE_PENALTIES, COMMON_SAMPLER_TYPE_TOP_K,
                  COMMON_SAMPLER_TYPE_TOP_P, COMMON_SAMPLER_TYPE_MIN_P,
                  COMMON_SAMPLER_TYPE_TEMPERATURE};
  }
  SetGrammar(o.grammar, p);
  return p;
}

// Greedy with nothing that changes the logits: the argmax is all common's chain would do.
bool IsPlainGreedy(const SamplingOptions& o) {
  return o.temperature <= 0.0 && o.grammar.empty() && o.logit_bias.empty() &&
         o.presence_penalty == 0.0 && o.frequency_penalty == 0.0 && o.repetition_penalty == 1.0 &&
         o.reasoning_budget < 0;
}

}  // namespace

TokenLogprobs ComputeLogprobs(const float* logits, int n_vocab, Token chosen, int n_top) {
  float max = -INFINITY;
  for (int t = 0; t < n_vocab; ++t) max = std::max(max, logits[t]);
  double sum = 0;
  for (int t = 0; t < n_vocab; ++t) sum += std::exp(double(logits[t]) - max);
  const float log_z = max + float(std::log(sum));
  TokenLogprobs out;
  out.chosen = {chosen, "", logits[chosen] - log_z};
  n_top = std::clamp(n_top, 0, n_vocab);
  std::vector<Token> ids(static_cast<size_t>(n_vocab));
  for (int t = 0; t < n_vocab; ++t) ids[size_t(t)] = t;
  std::partial_sort(ids.begin(), ids.begin() + n_top, ids.end(), [&](Token a, Token b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int i = 0; i < n_top; ++i) {
    const Token t = ids[size_t(i)];
    out.top.push_back({t, "", logits[t] - log_z});
  }
  return out;
}

Result<std::unique_ptr<Sampler>> Sampler::Create(const Model& model,
                                                 const SamplingOptions& options) {
  if (options.repetition_penalty <= 0.0) {
    return Status::InvalidArgument("sampler: repetition_penalty must be greater than 0");
  }
  if (IsPlainGreedy(options)) return std::unique_ptr<Sampler>(new Sampler(nullptr, model.n_vocab(), false));
  common_params_sampling params = ToCommon(options);
  if (!options.grammar.empty() || options.reasoning_budget >= 0) {
    SetThinking(model, options.grammar, options.reasoning_budget, params);
  }
  common_sampler* s = nullptr;
  try {
    s = common_sampler_init(model.raw(), params);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("sampler: ") + e.what());
  }
  if (s == nullptr) return Status::InvalidArgument("sampler: cannot be built");
  std::unique_ptr<Sampler> out(new Sampler(s, model.n_vocab(), !options.grammar.empty()));
  if (!options.grammar.empty()) out->forced_ = PlanForcedCall(model, options.grammar);
  return out;
}

namespace {

// Whether the grammar takes `t` next (as common's rejection check: a single candidate).
bool GrammarTakes(llama_sampler* grammar, Token t) {
  llama_token_data d{t, 1.0f, 0.0f};
  llama_token_data_array one{&d, 1, -1, false};
  llama_sampler_apply(grammar, &one);
  return d.logit != -INFINITY;
}

// How many of `tokens` the grammar takes in order; it is advanced past them.
size_t Take(llama_sampler* grammar, const std::vector<Token>& tokens) {
  size_t taken = 0;
  for (; taken < tokens.size() && GrammarTakes(grammar, tokens[taken]); ++taken) {
    llama_sampler_accept(grammar, tokens[taken]);
  }
  return taken;
}

// The call header's tokens the grammar accepts: the longest start of the shared `forced` after
// the generation prompt (as common feeds it) and `before` (a reasoning block's end tag, the
// block itself taken as empty), and after a whole shared part, the longest start of each rest
// (an empty one when none of it is taken). The header comes from renders of the template, which
// a grammar may write differently (spacing, an id's shape): the model writes the rest under the
// grammar. One parse of the grammar, cloned per rest.
void KeepAccepted(const Model& model, const GrammarSpec& g, const std::vector<Token>& before,
                  std::vector<Token>& forced, std::vector<std::vector<Token>>& rests) {
  llama_sampler* grammar = llama_sampler_init_grammar(model.vocab(), g.gbnf.c_str(), "root");
  const size_t whole = forced.size();
  size_t taken = 0;
  try {
    if (grammar == nullptr) throw std::runtime_error("grammar");
    for (Token t : PrefillTokens(model, g.generation_prompt)) llama_sampler_accept(grammar, t);
    for (Token t : before) llama_sampler_accept(grammar, t);
    taken = Take(grammar, forced);
    for (std::vector<Token>& rest : rests) {
      if (taken < whole) {
        rest.clear();
        continue;
      }
      llama_sampler* branch = llama_sampler_clone(grammar);
      rest.resize(Take(branch, rest));
      llama_sampler_free(branch);
    }
  } catch (const std::exception&) {
    taken = 0;
    rests.clear();
  }
  if (grammar != nullptr) llama_sampler_free(grammar);
  forced.resize(taken);
  std::erase_if(rests, [](const std::vector<Token>& r) { return r.empty(); });
}

}  // namespace

// The reasoning block is open when the generation prompt opened it last and did not close it.
Sampler::ForcedCall Sampler::PlanForcedCall(const Model& model, const GrammarSpec& g) {
  ForcedCall f;
  if ((g.forced_call.empty() && g.forced_call_rests.empty()) || g.lazy) return f;
  f.tokens = model.Tokenize(g.forced_call, true, false);
  const size_t open = g.thinking_start.empty() ? std::string::npos
                                               : g.generation_prompt.rfind(g.thinking_start);
  bool closed = open == std::string::npos;
  for (const std::string& tag : g.thinking_end) {
    if (!closed && !tag.empty() && g.generation_prompt.find(tag, open) != std::string::npos) closed = true;
  }
  if (!closed) {
    for (const std::string& tag : g.thinking_end) {
      if (!tag.empty()) f.after.push_back(model.Tokenize(tag, true, false));
    }
    if (f.after.empty()) return ForcedCall{};  // an open block with no known end: never forced
  }
  const std::vector<Token> before = f.after.empty() ? std::vector<Token>{} : f.after.front();
  for (const std::string& rest : g.forced_call_rests) f.rests.push_back(model.Tokenize(rest, true, false));
  KeepAccepted(model, g, before, f.tokens, f.rests);
  f.started = f.after.empty();
  return f;
}

Token Sampler::NextForced() {
  if (!forced_.started || forced_.next >= forced_.tokens.size()) return -1;
  return forced_.tokens[forced_.next++];
}

void Sampler::NoteSampled(Token t) {
  if (forced_.started || forced_.after.empty()) return;
  size_t longest = 0;
  for (const auto& a : forced_.after) longest = std::max(longest, a.size());
  forced_.recent.push_back(t);
  if (forced_.recent.size() > longest) forced_.recent.erase(forced_.recent.begin());
  for (const auto& a : forced_.after) {
    if (!a.empty() && forced_.recent.size() >= a.size() &&
        std::equal(a.begin(), a.end(), forced_.recent.end() - std::ptrdiff_t(a.size()))) {
      forced_.started = true;
    }
  }
}

// Once the header every tool shares is out, the model chooses the tool: the next token is one
// that goes on some tool's rest (the model's logits decide among them; one candidate is decoded
// as it is), until the tokens so far fit one rest, whose remainder is then decoded. Empty when
// no choice is due.
std::vector<Token> Sampler::NextChoices() const {
  std::vector<Token> out;
  if (!forced_.started || forced_.next < forced_.tokens.size()) return out;
  const std::vector<Token>& so_far = forced_.chosen;
  for (const std::vector<Token>& r : forced_.rests) {
    if (r.size() > so_far.size() && std::equal(so_far.begin(), so_far.end(), r.begin()) &&
        std::find(out.begin(), out.end(), r[so_far.size()]) == out.end()) {
      out.push_back(r[so_far.size()]);
    }
  }
  return out;
}

Token Sampler::SampleChoice(llama_context* ctx, int32_t idx, const std::vector<Token>& choices) {
  Token t = choices.front();
  if (choices.size() > 1) {
    float* logits = llama_get_logits_ith(ctx, idx);
    std::vector<float> kept(choices.size());
    for (size_t i = 0; i < choices.size(); ++i) kept[i] = logits[choices[i]];
    std::fill(logits, logits + n_vocab_, -INFINITY);
    for (size_t i = 0; i < choices.size(); ++i) logits[choices[i]] = kept[i];
    t = common_sampler_sample(sampler_, ctx, idx);
  }
  common_sampler_accept(sampler_, t, /*is_generated=*/true);
  forced_.chosen.push_back(t);
  if (NextChoices().empty()) forced_.rests.clear();  // the tool's whole rest is out
  return t;
}

Sampler::~Sampler() {
  if (sampler_ != nullptr) common_sampler_free(sampler_);
}

Result<Token> Sampler::Sample(llama_context* ctx, int32_t idx) {
  if (sampler_ == nullptr) {  // lowest id wins ties, as common's zero temperature
    const float* logits = llama_get_logits_ith(ctx, idx);
    Token best = 0;
    for (Token t = 1; t < n_vocab_; ++t) {
      if (logits[t] > logits[best]) best = t;
    }
    return best;
  }
  try {
    if (const Token forced = NextForced(); forced >= 0) {
      common_sampler_accept(sampler_, forced, /*is_generated=*/true);
      return forced;
    }
    if (const std::vector<Token> choices = NextChoices(); !choices.empty()) {
      return SampleChoice(ctx, idx, choices);
    }
    const Token t = common_sampler_sample(sampler_, ctx, idx);
    common_sampler_accept(sampler_, t, /*is_generated=*/true);
    NoteSampled(t);
    return t;
  } catch (const std::exception& e) {
    return Status::Aborted(std::string("sampling: ") + e.what());
  }
}

}  // namespace prefixd::engine
