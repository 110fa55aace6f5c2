// Test-only: comparing two greedy answers whose logits may differ in their last bits, and the
// speculation the tests run that drafts most and is wrong most (engine_test, speculation_test).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "engine/options.h"
#include "engine/request.h"

namespace prefixd::engine::testing {

// Two greedy answers whose logits may differ in their last bits (rows decoded one token at a
// time, another decode batch): equal, or equal up to a step where the cold answer's two most
// likely tokens were within kNearTie of each other, where a last bit may pick either. A wrong
// state changes far more than a near-tie. REQUIRES: `cold` was run with top_logprobs >= 2.
inline constexpr float kNearTie = 2e-3f;

inline ::testing::AssertionResult SameUpToNearTie(const CompletionResult& got,
                                                  const CompletionResult& cold) {
  size_t k = 0;
  while (k < got.tokens.size() && k < cold.tokens.size() && got.tokens[k] == cold.tokens[k]) ++k;
  if (k == got.tokens.size() && k == cold.tokens.size()) return ::testing::AssertionSuccess();
  if (k >= cold.logprobs.size() || cold.logprobs[k].top.size() < 2) {
    return ::testing::AssertionFailure() << "the answers differ at token " << k
                                         << ", where the cold answer ended";
  }
  const float gap = cold.logprobs[k].top[0].logprob - cold.logprobs[k].top[1].logprob;
  if (gap <= kNearTie) {
    std::printf("[ near-tie ] the answers part at token %zu, where the top two were %.2e apart\n",
                k, double(gap));
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the answers differ at token " << k
                                       << ", where the cold answer's top two were " << gap
                                       << " apart (no near-tie)";
}

// ngram-simple on 2-token keys proposes whatever followed the last two tokens anywhere before:
// a draft at nearly every step, mostly wrong, so a run goes through rejections (and their
// rollbacks) far more often than through full acceptances.
inline SpecOptions EagerNgram() {
  SpecOptions s;
  s.types = {SpecType::kNgramSimple};
  s.ngram_simple.size_n = 2;
  s.ngram_simple.size_m = 6;
  return s;
}

}  // namespace prefixd::engine::testing
