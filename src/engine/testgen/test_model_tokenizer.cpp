// The test models' tokenizer and chat template.
//
// Tokenizer: GPT-2 style byte-level BPE ("gpt2" model, "qwen2" pre-tokenizer). Ids 0-255 are
// the 256 byte symbols (byte b is token b), then merges learned at build time by running BPE
// on a small built-in English/JSON corpus (so ordinary text takes ~2-3 characters per token),
// then, for large vocabularies, filler merges joining existing tokens, and last the special
// tokens (kSpecials). Everything is derived from constants: the vocabulary never changes.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/testgen/test_model_internal.h"

namespace prefixd::engine::test_model {
namespace {

// GGUF token types (llama.h's llama_token_type).
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

struct Special {
  const char* text;
  int32_t type;
};
// Control tokens print only when asked to; user-defined ones are plain text that always maps
// to one token (as Qwen3 marks <think>).
constexpr Special kSpecials[] = {
    {"<|endoftext|>", kTypeControl},    {"<|im_start|>", kTypeControl},
    {"<|im_end|>", kTypeControl},       {"<think>", kTypeUserDefined},
    {"</think>", kTypeUserDefined},     {"<tool_call>", kTypeUserDefined},
    {"</tool_call>", kTypeUserDefined}, {"<tool_response>", kTypeUserDefined},
    {"</tool_response>", kTypeUserDefined},
};
constexpr uint32_t kNumSpecials = sizeof(kSpecials) / sizeof(kSpecials[0]);

const char kCorpus[] =
    "The quick brown fox jumps over the lazy dog. This is a test of the system, and it "
    "should work well for most of the people who use it every day. You are a helpful "
    "assistant. Please answer the question below and think about it step by step before "
    "you give the final answer. What is the capital of France? The capital of France is "
    "Paris. How many tokens are there in this sentence? There are more than ten of them. "
    "I would like to know how the function works, because the result was not what we "
    "expected when we called it with these arguments. Let me check the file and read the "
    "code again. The user asked for a summary of the document, so here is a short one: "
    "the report describes the state of the project, the work that has been done, and what "
    "remains to be done next. We need to update the configuration, run the tests, and then "
    "write the results to the output directory. If something goes wrong, the error message "
    "will tell you which line of the input could not be parsed. Thank you for your help! "
    "Can you also explain why the cache was not used for the second request? Because the "
    "prompt was different after the first turn, only the common prefix could be reused. "
    "In the beginning there was nothing, and then there were many things: people, places, "
    "numbers, words, and stories that they told each other about their own time and world. "
    "Here is the information that you requested, together with some other details that "
    "might be important for your decision. The model generated an answer, then called a "
    "tool to search for more data, and finally returned the answer to the user. "
    "{\"name\": \"search\", \"arguments\": {\"query\": \"weather in Paris\", \"limit\": 10}} "
    "{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"description\": "
    "\"Read a file from the disk\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"]}}} "
    "def main(): return self.value if value is not None else None # return the result "
    "for (int i = 0; i < n; i++) { if (x[i] == 0) continue; sum += x[i]; } return sum; "
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their been has would when "
    "who will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me even "
    "most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world "
    "still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right "
    "used take three states himself few house use during without again place around "
    "however home small found thought went say part once general high upon school every "
    "does got united left number course war until always away something fact though water "
    "less public put think almost hand enough far took head yet government system better "
    "set told nothing night end why called didn eyes find going look asked later knew "
    "point next program city business give group toward young days let room president side "
    "social given present several order national possible rather second face per among "
    "form important often things looked early white case john become large big need four "
    "within felt along children saw best church ever least power development light thing "
    "seemed family interest want members mind country area others done turned although "
    "open problem certain kind began different door thus help sense means whole matter "
    "perhaps itself york times law human line above name example action company hands "
    "local show whether five history gave today either act feet across taken past quite "
    "anything seen having death week experience body word half really field am car words "
    "already information tell together college shall money period held keep sure free "
    "seems real behind cannot miss political air question making office brought whose "
    "special heard major problems ago became federal moment study available known result "
    "street economic boy reason change position south board individual job areas society "
    "west close turn love community true court force full seem value";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 and up.
std::vector<std::string> ByteSymbols() {
  std::vector<int> code(256, -1);
  auto keep = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) code[b] = b;
  };
  keep('!', '~');
  keep(0xA1, 0xAC);
  keep(0xAE, 0xFF);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (code[b] < 0) code[b] = next++;
  }
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int c = code[b];  // < 0x800: one or two UTF-8 bytes
    if (c < 0x80) {
      out[b] = std::string(1, char(c));
    } else {
      out[b] = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
    }
  }
  return out;
}

// Splits text roughly as the qwen2 pre-tokenizer does: an optional leading space or symbol
// with a run of letters, single digits, runs of punctuation, runs of spaces.
std::vector<std::string> PreTokenize(const std::string& text) {
  auto is_alpha = [](unsigned char c) { return std::isalpha(c) != 0; };
  auto is_digit = [](unsigned char c) { return std::isdigit(c) != 0; };
  auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    const unsigned char c = text[i];
    if (is_digit(c)) {
      j = i + 1;
    } else if (is_alpha(c) || (i + 1 < text.size() && !is_digit(c) && is_alpha(text[i + 1]))) {
      j = i + 1;
      while (j < text.size() && is_alpha(text[j])) ++j;
    } else if (is_space(c) && !(i + 1 < text.size() && !is_space(text[i + 1]))) {
      while (j < text.size() && is_space(text[j])) ++j;
    } else {
      j = i + 1;
      while (j < text.size() && !is_alpha(text[j]) && !is_digit(text[j]) && !is_space(text[j])) {
        ++j;
      }
    }
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
};

// Learns up to `n_merges` merges from kCorpus (pairs seen at least twice), most frequent
// first, ties broken by the pair's text so the result is the same everywhere.
void LearnMerges(const std::vector<std::string>& bytes, size_t n_merges, Vocab* v) {
  std::map<std::string, int> word_counts;
  for (const std::string& w : PreTokenize(kCorpus)) ++word_counts[w];
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [w, n] : word_counts) {
    std::vector<std::string> syms;
    for (unsigned char c : w) syms.push_back(bytes[c]);
    words.emplace_back(std::move(syms), n);
  }
  std::set<std::string> known(v->tokens.begin(), v->tokens.end());
  while (v->merges.size() < n_merges) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [syms, n] : words) {
      for (size_t k = 0; k + 1 < syms.size(); ++k) pairs[{syms[k], syms[k + 1]}] += n;
    }
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (known.count(it->first.first + it->first.second)) continue;
      if (best == pairs.end() || it->second > best->second) best = it;
    }
    if (best == pairs.end() || best->second < 2) break;
    const auto [a, b] = best->first;
    for (auto& [syms, n] : words) {
      std::vector<std::string> merged;
      for (size_t k = 0; k < syms.size(); ++k) {
        if (k + 1 < syms.size() && syms[k] == a && syms[k + 1] == b) {
          merged.push_back(a + b);
          ++k;
        } else {
          merged.push_back(syms[k]);
        }
      }
      syms = std::move(merged);
    }
    v->merges.push_back(a + " " + b);
    v->tokens.push_back(a + b);
    v->types.push_back(kTypeNormal);
    known.insert(a + b);
  }
}

// Adds merges joining a word-start token ("Ġ" + letters) with a continuation (letters only)
// until the vocabulary has `n_tokens` entries: rarely used, but valid BPE.
void PadMerges(size_t n_tokens, Vocab* v) {
  const std::string space = "\xC4\xA0";  // "Ġ", the symbol of byte 0x20
  auto letters = [](const std::string& s, size_t from) {
    if (from >= s.size()) return false;
    for (size_t k = from; k < s.size(); ++k) {
      if (!std::isalpha(static_cast<unsigned char>(s[k]))) return false;
    }
    return true;
  };
  std::vector<std::string> heads, tails;
  for (const std::string& t : v->tokens) {
    if (t.rfind(space, 0) == 0 && letters(t, space.size())) heads.push_back(t);
    if (letters(t, 0)) tails.push_back(t);
  }
  std::set<std::string> known(v->tokens.begin(), v->tokens.end());
  for (size_t round = 0; v->tokens.size() < n_tokens; ++round) {
    const size_t n_heads = heads.size();
    for (size_t h = 0; h < n_heads && v->tokens.size() < n_tokens; ++h) {
      const std::string& tail = tails[(h * 7919 + round) % tails.size()];
      const std::string merged = heads[h] + tail;
      if (known.count(merged)) continue;
      v->merges.push_back(heads[h] + " " + tail);
      v->tokens.push_back(merged);
      v->types.push_back(kTypeNormal);
      known.insert(merged);
      heads.push_back(merged);
    }
  }
}

Vocab BuildVocab(uint32_t n_vocab) {
  Vocab v;
  const std::vector<std::string> bytes = ByteSymbols();
  v.tokens = bytes;
  v.types.assign(256, kTypeNormal);
  const size_t n_normal = n_vocab - kNumSpecials;
  LearnMerges(bytes, n_normal - 256, &v);
  PadMerges(n_normal, &v);
  for (const Special& s : kSpecials) {
    v.tokens.push_back(s.text);
    v.types.push_back(s.type);
  }
  return v;
}

void SetStrings(gguf_context* ctx, const char* key, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  for (const std::string& s : values) ptrs.push_back(s.c_str());
  gguf_set_arr_str(ctx, key, ptrs.data(), ptrs.size());
}

uint32_t SpecialId(uint32_t n_vocab, const char* text) {
  for (uint32_t k = 0; k < kNumSpecials; ++k) {
    if (std::string(kSpecials[k].text) == text) return n_vocab - kNumSpecials + k;
  }
  return 0;  // unreachable for the names used below
}

}  // namespace

void AddTokenizer(gguf_context* ctx, uint32_t n_vocab) {
  const Vocab v = BuildVocab(n_vocab);
  gguf_set_val_str(ctx, "tokenizer.ggml.model", "gpt2");
  gguf_set_val_str(ctx, "tokenizer.ggml.pre", "qwen2");
  SetStrings(ctx, "tokenizer.ggml.tokens", v.tokens);
  gguf_set_arr_data(ctx, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.types.data(),
                    v.types.size());
  SetStrings(ctx, "tokenizer.ggml.merges", v.merges);
  const uint32_t endoftext = SpecialId(n_vocab, "<|endoftext|>");
  const uint32_t im_end = SpecialId(n_vocab, "<|im_end|>");
  // As Qwen: bos is <|endoftext|> but never added; a turn ends with <|im_end|>.
  gguf_set_val_u32(ctx, "tokenizer.ggml.bos_token_id", endoftext);
  gguf_set_val_u32(ctx, "tokenizer.ggml.eos_token_id", im_end);
  gguf_set_val_u32(ctx, "tokenizer.ggml.eot_token_id", im_end);
  gguf_set_val_u32(ctx, "tokenizer.ggml.padding_token_id", endoftext);
  gguf_set_val_bool(ctx, "tokenizer.ggml.add_bos_token", false);
  gguf_set_val_bool(ctx, "tokenizer.ggml.add_eos_token", false);
  gguf_set_val_str(ctx, "tokenizer.chat_template", ChatTemplate().c_str());
}

// Qwen3-style: <|im_start|>role\n...<|im_end|>\n turns, tools in the system turn, tool results
// as <tool_response> blocks in a user turn. An assistant turn keeps its reasoning
// (reasoning_content, or a <think>...</think> prefix of its content) only when it comes after
// the last user message; earlier turns lose it, as in Qwen3 and most reasoning models.
const std::string& ChatTemplate() {
  static const std::string kTemplate = R"TMPL({%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages and messages[0].role == 'system' -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions. Their signatures:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call a function, write <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'user' or m.role == 'system' -%}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- elif m.role == 'assistant' -%}
{%- set content = m.content if m.content is string else '' -%}
{%- set reasoning = '' -%}
{%- if m.reasoning_content is string -%}
{%- set reasoning = m.reasoning_content -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
{{- '<|im_start|>assistant\n' -}}
{%- if loop.index0 > ns.last_user and reasoning.strip('\n') -%}
{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' -}}
{%- endif -%}
{{- content -}}
{%- if m.tool_calls -%}
{%- for tc in m.tool_calls -%}
{%- set f = tc.function if tc.function is defined else tc -%}
{%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": "' + f.name + '", "arguments": ' -}}
{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
)TMPL";
  return kTemplate;
}

}  // namespace prefixd::engine::test_model
