// Images through the engine with a real projector (libmtmd's encoder over the random-weight
// projectors the test-model generator writes): the answer with the cache on equals the answer
// with it off on conversations with images, a different image stops the reuse at its first row,
// the same pixels in another file are the same image, a restart restores an image conversation
// without encoding it, and a broken file is a clean error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/codec/state_codec.h"
#include "engine/context.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/test_temp_dir.h"
#include "engine/testgen/test_model.h"
#include "engine/testgen/test_projector.h"
#include "engine/vision/image_prompt.h"
#include "engine/vision/image_tokens.h"
#include "engine/vision/projector.h"
#include "llama.h"

namespace prefixd::engine {
namespace {

struct Files {
  std::string model, mmproj;
};

Files MakeFiles(const std::string& arch) {
  static std::map<std::string, Files> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  auto dir = std::filesystem::temp_directory_path() /
             ("prefixd-image-prompt-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(testing::RemoveAtExit(dir.string()));
  Files f{(dir / (arch + ".gguf")).string(), (dir / (arch + "-mmproj.gguf")).string()};
  Status st = MakeTestModel({arch, "tiny", 5}, f.model);
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = MakeTestProjector({arch, "tiny", 5}, f.mmproj);
  EXPECT_TRUE(st.ok()) << st.ToString();
  made[arch] = f;
  return f;
}

std::unique_ptr<Engine> MakeEngine(const std::string& arch, bool cache,
                                   const std::string& cache_dir = "", uint32_t n_ubatch = 512) {
  const Files f = MakeFiles(arch);
  EngineOptions o;
  o.model_path = f.model;
  o.projector.path = f.mmproj;
  o.projector.n_threads = 2;
  o.n_slots = 1;
  o.n_ctx_per_slot = 4096;
  o.n_threads = 2;
  o.cache_enabled = cache;
  o.cache_dir = cache_dir;
  o.n_ubatch = n_ubatch;
  o.ram_budget_bytes = 256ull << 20;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// RGB pixels of a w x h picture drawn from `seed`: blocks of colour, so that a resize keeps it
// an image and not noise.
std::vector<uint8_t> Picture(uint32_t w, uint32_t h, uint32_t seed) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      uint32_t v = (x / 8 + 7 * (y / 8) + 1) * 2654435761u ^ seed * 40503u;
      for (int c = 0; c < 3; ++c) px[(size_t(y) * w + x) * 3 + c] = uint8_t(v >> (8 * c));
    }
  }
  return px;
}

void PutLe(std::string* s, uint32_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(char((v >> (8 * i)) & 0xff));
}
void PutBe(std::string* s, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) s->push_back(char((v >> shift) & 0xff));
}

// A 24-bit BMP of the pixels (bottom-up rows padded to 4 bytes).
std::string Bmp(uint32_t w, uint32_t h, const std::vector<uint8_t>& px) {
  const uint32_t row = (w * 3 + 3) / 4 * 4;
  std::string s = "BM";
  PutLe(&s, 54 + row * h, 4);
  PutLe(&s, 0, 4);
  PutLe(&s, 54, 4);
  PutLe(&s, 40, 4);
  PutLe(&s, w, 4);
  PutLe(&s, h, 4);
  PutLe(&s, 1, 2);
  PutLe(&s, 24, 2);
  for (int i = 0; i < 6; ++i) PutLe(&s, 0, 4);
  for (uint32_t y = h; y-- > 0;) {
    for (uint32_t x = 0; x < w; ++x) {
      const uint8_t* p = &px[(size_t(y) * w + x) * 3];
      s.push_back(char(p[2])), s.push_back(char(p[1])), s.push_back(char(p[0]));
    }
    s.append(row - w * 3, '\0');
  }
  return s;
}

uint32_t Crc32(const std::string& data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

// An RGB PNG of the pixels, its image data in stored (uncompressed) deflate blocks.
std::string Png(uint32_t w, uint32_t h, const std::vector<uint8_t>& px) {
  std::string raw;
  for (uint32_t y = 0; y < h; ++y) {
    raw.push_back('\0');  // filter: none
    raw.append(reinterpret_cast<const char*>(&px[size_t(y) * w * 3]), size_t(w) * 3);
  }
  std::string z = "\x78\x01";
  for (size_t at = 0; at < raw.size();) {
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    z.push_back(char(at + n == raw.size()));
    PutLe(&z, uint32_t(n), 2);
    PutLe(&z, uint32_t(~n & 0xffff), 2);
    z.append(raw, at, n);
    at += n;
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  PutBe(&z, (b << 16) | a);
  auto chunk = [](std::string* s, const char* type, const std::string& data) {
    PutBe(s, uint32_t(data.size()));
    const std::string body = type + data;
    s->append(body);
    PutBe(s, Crc32(body));
  };
  std::string s = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  PutBe(&ihdr, w);
  PutBe(&ihdr, h);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  chunk(&s, "IHDR", ihdr);
  chunk(&s, "IDAT", z);
  chunk(&s, "IEND", "");
  return s;
}

// A conversation as the server hands it to the engine: each image's part is a text part
// holding the marker, its file in options.images (server/image_part.h).
struct Turn {
  std::string role;
  std::string text;
  bool image = false;
};

std::string MessagesJson(const std::vector<Turn>& turns) {
  std::string out = "[";
  for (size_t i = 0; i < turns.size(); ++i) {
    out += std::string(i ? "," : "") + "{\"role\":\"" + turns[i].role + "\",\"content\":";
    if (turns[i].image) {
      out += "[{\"type\":\"text\",\"text\":\"" + turns[i].text +
             "\"},{\"type\":\"text\",\"text\":\"" + kImageMarker + "\"}]}";
    } else {
      out += "\"" + turns[i].text + "\"}";
    }
  }
  return out + "]";
}

Prompt Prepare(Engine& e, const std::vector<Turn>& turns, std::vector<std::string> images) {
  ChatRenderOptions o;
  o.images = std::move(images);
  auto p = e.PrepareChat(MessagesJson(turns), o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Prompt{};
}

CompletionResult Complete(Engine& e, const Prompt& p, int max_tokens = 4) {
  CompletionRequest req;
  req.prompt = p;
  req.max_tokens = max_tokens;
  req.sampling.ignore_eos = true;
  req.sampling.top_logprobs = 8;
  auto r = e.Complete(req);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : CompletionResult{};
}

bool SameLogprobs(const CompletionResult& a, const CompletionResult& b) {
  if (a.logprobs.size() != b.logprobs.size()) return false;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    const auto& x = a.logprobs[i].top;
    const auto& y = b.logprobs[i].top;
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) {
      if (x[k].token != y[k].token || std::memcmp(&x[k].logprob, &y[k].logprob, 4) != 0) {
        return false;
      }
    }
  }
  return true;
}

std::vector<Turn> Conversation(int n_turns) {
  std::vector<Turn> t = {{"system", "You look at pictures and answer in one line."},
                         {"user", "What is in this screenshot?", true}};
  static const char* kWords[] = {"the", "cache", "window", "button", "red", "list", "of", "file"};
  for (int i = 0; i < n_turns; ++i) {
    std::string text;
    for (int w = 0; w < 20 + 13 * i; ++w) text += std::string(w ? " " : "") + kWords[(w * 5 + i) % 8];
    t.push_back({i % 2 == 0 ? "assistant" : "user", text});
  }
  if (t.back().role == "assistant") t.push_back({"user", "and then?"});
  return t;
}

class ImagePromptTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#if defined(__aarch64__) || defined(__arm__)
    GTEST_SKIP() << "bit-identity is claimed on x86 kernels only (exactness_test.cpp)";
#endif
  }
};

TEST_P(ImagePromptTest, CacheOnEqualsCacheOffAcrossImageTurns) {
  auto on = MakeEngine(GetParam(), true);
  auto off = MakeEngine(GetParam(), false);
  ASSERT_TRUE(on && off);
  const std::string a = Png(48, 40, Picture(48, 40, 1));
  const std::string b = Png(40, 48, Picture(40, 48, 2));
  // Turns grow one message at a time; a second image arrives on the fourth.
  std::vector<Token> previous;  // the previous turn's prompt
  int32_t first_rows = 0;       // the first image's
  for (int turn = 0; turn < 5; ++turn) {
    std::vector<Turn> t = Conversation(turn);
    std::vector<std::string> files = {a};
    if (turn >= 3) {
      t.push_back({"user", "and this one?", true});
      files.push_back(b);
    }
    const Prompt p = Prepare(*on, t, files);
    ASSERT_EQ(p.images.size(), files.size());
    first_rows = p.images[0].image->n_tokens();
    const CompletionResult r_on = Complete(*on, p);
    const CompletionResult r_off = Complete(*off, Prepare(*off, t, files));
    EXPECT_EQ(r_on.tokens, r_off.tokens) << "turn " << turn;
    EXPECT_TRUE(SameLogprobs(r_on, r_off)) << "turn " << turn;
    if (turn > 0) {
      // Everything up to the end of the previous prompt came from the cache: the image too.
      EXPECT_GT(r_on.usage.cached_tokens, p.images[0].end()) << "turn " << turn;
      // ... and every reusable token: the prefix shared with the previous turn's prompt.
      size_t reusable = 0;
      while (reusable < previous.size() && reusable < p.tokens.size() &&
             previous[reusable] == p.tokens[reusable]) {
        ++reusable;
      }
      EXPECT_GE(r_on.usage.cached_tokens, 0.99 * double(reusable)) << "turn " << turn;
    }
    previous = p.tokens;
  }
  const EngineStats s = on->GetStats();
  EXPECT_EQ(s.images_encoded, 2u) << "each image encoded once with the cache on";
  EXPECT_GE(s.image_tokens_restored, 4u * uint64_t(first_rows))
      << "the first image's rows came back on every later turn";
  EXPECT_EQ(off->GetStats().image_tokens_restored, 0u);
  // Every capture point was taken: an image inside a resumed call would have split the call its
  // captures were set for.
  EXPECT_EQ(s.cache_errors.count(CacheWork::kCapture), 0u);
  EXPECT_EQ(off->GetStats().images_encoded, 2u) << "the encoder cache works without the prompt cache";
}

TEST_P(ImagePromptTest, AnotherImageOfTheSameSizeStopsReuseAtItsFirstRow) {
  auto e = MakeEngine(GetParam(), true);
  ASSERT_TRUE(e);
  const std::vector<Turn> t = Conversation(2);
  const Prompt p1 = Prepare(*e, t, {Png(48, 40, Picture(48, 40, 1))});
  Complete(*e, p1);
  const Prompt p2 = Prepare(*e, t, {Png(48, 40, Picture(48, 40, 3))});
  ASSERT_EQ(p2.images.size(), 1u);
  ASSERT_EQ(p1.tokens.size(), p2.tokens.size());
  const CompletionResult r = Complete(*e, p2);
  EXPECT_EQ(r.cache.diverged_at, p2.images[0].offset);
  EXPECT_LE(r.usage.cached_tokens, p2.images[0].offset);
  EXPECT_GT(r.usage.cached_tokens, 0);
  for (int32_t i = p2.images[0].offset; i < p2.images[0].end(); ++i) {
    EXPECT_NE(p1.tokens[size_t(i)], p2.tokens[size_t(i)]) << "row " << i - p2.images[0].offset;
    EXPECT_TRUE(IsImageToken(p2.tokens[size_t(i)]));
  }
}

TEST_P(ImagePromptTest, TheSamePixelsInAnotherFileAreTheSameImage) {
  auto e = MakeEngine(GetParam(), true);
  ASSERT_TRUE(e);
  const std::vector<uint8_t> px = Picture(48, 40, 1);
  const std::vector<Turn> t = Conversation(1);
  const Prompt png = Prepare(*e, t, {Png(48, 40, px)});
  const Prompt bmp = Prepare(*e, t, {Bmp(48, 40, px)});
  EXPECT_EQ(png.tokens, bmp.tokens);
  Complete(*e, png);
  const CompletionResult r = Complete(*e, bmp);
  EXPECT_GT(r.usage.cached_tokens, png.images[0].end());
  EXPECT_EQ(e->GetStats().images_encoded, 1u);
}

TEST_P(ImagePromptTest, ARestartRestoresAnImageConversationWithoutEncoding) {
  const std::string dir = testing::RemoveAtExit(
      (std::filesystem::temp_directory_path() /
       ("prefixd-image-restart-" + GetParam() + "-" + std::to_string(getpid())))
          .string());
  const std::string a = Png(48, 40, Picture(48, 40, 5));
  std::vector<Turn> t = Conversation(2);
  {
    auto e = MakeEngine(GetParam(), true, dir);
    ASSERT_TRUE(e);
    Complete(*e, Prepare(*e, t, {a}));
    e->FlushCache();
  }
  auto e = MakeEngine(GetParam(), true, dir);
  ASSERT_TRUE(e);
  t.push_back({"assistant", "a list of files"});
  t.push_back({"user", "which one is red?"});
  const Prompt p = Prepare(*e, t, {a});
  const CompletionResult r = Complete(*e, p);
  EXPECT_EQ(r.cache.tier, CacheTier::kDisk);
  EXPECT_GT(r.usage.cached_tokens, p.images[0].end());
  EXPECT_EQ(e->GetStats().images_encoded, 0u) << "the image's rows came back from disk";
}

// The embeddings file of an image under `dir` (store::RecordKind::kEmbeddings), "" when none.
std::string EmbeddingsFile(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".embd") return e.path().string();
  }
  return "";
}

TEST_P(ImagePromptTest, AnotherSessionAfterARestartReadsTheEmbeddingsFromDisk) {
  const std::string dir = testing::RemoveAtExit(
      (std::filesystem::temp_directory_path() /
       ("prefixd-image-embd-" + GetParam() + "-" + std::to_string(getpid())))
          .string());
  const std::string a = Png(48, 40, Picture(48, 40, 7));
  auto session = [](const std::string& system) {
    std::vector<Turn> t = Conversation(1);
    t[0].text = system;
    return t;
  };
  {
    auto e = MakeEngine(GetParam(), true, dir);
    ASSERT_TRUE(e);
    Complete(*e, Prepare(*e, session("First session."), {a}));
    e->FlushCache();
    EXPECT_EQ(e->GetStats().images_encoded, 1u);
  }
  ASSERT_NE(EmbeddingsFile(dir), "");
  CompletionResult from_disk;
  {
    auto e = MakeEngine(GetParam(), true, dir);
    ASSERT_TRUE(e);
    const Prompt p = Prepare(*e, session("Another session, another system prompt."), {a});
    from_disk = Complete(*e, p);
    EXPECT_LT(from_disk.usage.cached_tokens, p.images[0].offset) << "no prefix of it was cached";
    const EngineStats s = e->GetStats();
    EXPECT_EQ(s.images_encoded, 0u);
    EXPECT_EQ(s.image_encoder_hits_disk, 1u);
  }
  // A damaged record is a clean miss: encoded again, the same answer.
  const std::string f = EmbeddingsFile(dir);
  ASSERT_NE(f, "");
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(0, std::ios::end);
    const std::streamoff size = io.tellg();
    io.seekp(size - 64);
    char c = 0;
    io.seekg(size - 64);
    io.read(&c, 1);
    io.seekp(size - 64);
    c = char(c ^ 0x5a);
    io.write(&c, 1);
  }
  auto e = MakeEngine(GetParam(), true, dir);
  ASSERT_TRUE(e);
  auto off = MakeEngine(GetParam(), false);
  ASSERT_TRUE(off);
  const std::vector<Turn> third = session("A third session.");
  const CompletionResult again = Complete(*e, Prepare(*e, third, {a}));
  EXPECT_EQ(again.tokens, Complete(*off, Prepare(*off, third, {a})).tokens);
  const EngineStats s = e->GetStats();
  EXPECT_EQ(s.image_encoder_hits_disk, 0u);
  EXPECT_EQ(s.images_encoded, 1u);
}

TEST_P(ImagePromptTest, ABrokenFileOrAMissingPlaceIsACleanError) {
  auto e = MakeEngine(GetParam(), true);
  ASSERT_TRUE(e);
  const std::vector<Turn> t = Conversation(0);
  ChatRenderOptions o;
  std::string png = Png(48, 40, Picture(48, 40, 1));
  o.images = {png.substr(0, png.size() / 2)};
  auto p = e->PrepareChat(MessagesJson(t), o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("image 1"), std::string::npos) << p.status().ToString();
  o.images = {png, png};  // two files, one place
  p = e->PrepareChat(MessagesJson(t), o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("1 image places for 2 images"), std::string::npos)
      << p.status().ToString();
  // The engine serves on.
  o.images = {png};
  EXPECT_TRUE(e->PrepareChat(MessagesJson(t), o).ok());
}

// lfm2's projector cuts a picture larger than about 724x724 into tiles and a thumbnail, and
// looks the thumbnail's marker up in the vocabulary; the test model's vocabulary has none, so
// the request is a clean error naming it, not a decode of LLAMA_TOKEN_NULL, and the engine
// serves the next one.
TEST(ImagePromptTiles, AWrappingTokenTheVocabularyLacksIsACleanError) {
  auto e = MakeEngine("lfm2", true);
  ASSERT_TRUE(e);
  const std::vector<Turn> t = Conversation(1);
  ChatRenderOptions o;
  o.images = {Png(800, 800, Picture(800, 800, 4))};
  auto p = e->PrepareChat(MessagesJson(t), o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("vocabulary lacks"), std::string::npos) << p.status().ToString();
  const Prompt small = Prepare(*e, t, {Png(48, 40, Picture(48, 40, 4))});
  EXPECT_EQ(Complete(*e, small).tokens.size(), 4u);
}

// A projector that cannot serve is refused when the engine starts, never later.
TEST(ImageProjectorRefusals, NotAProjectorOrBesideADraftContextAreRefusedAtStart) {
  const Files g3 = MakeFiles("gemma3");
  auto refused = [&](const std::string& mmproj, std::vector<SpecType> spec,
                     const std::string& model = "") {
    EngineOptions o;
    o.model_path = model.empty() ? g3.model : model;
    o.projector.path = mmproj;
    o.cache_enabled = false;
    o.n_threads = 2;
    o.spec.types = std::move(spec);
    auto e = Engine::Create(o);
    return e.ok() ? std::string() : e.status().message();
  };
  EXPECT_NE(refused(g3.model, {}).find("not a multimodal projector"), std::string::npos);
  const Files q35 = MakeFiles("qwen35");
  EXPECT_EQ(refused(q35.mmproj, {}, q35.model), "") << "M-RoPE images are served";
  EXPECT_NE(refused(g3.mmproj, {SpecType::kDraftMtp}).find("draft"), std::string::npos);
  EXPECT_EQ(refused(g3.mmproj, {}), "");
}

// gemma4's images attend to each other both ways, so one is one call: an image of more rows than
// the ubatch is a clean error before the request queues, and the engine serves on.
TEST(ImageProjectorRefusals, ANonCausalImageLargerThanTheUbatchIsACleanError) {
  auto e = MakeEngine("gemma4", true, "", 64);
  ASSERT_TRUE(e);
  const std::vector<Turn> t = Conversation(0);
  ChatRenderOptions ro;
  ro.images = {Png(64, 48, Picture(64, 48, 1))};
  auto p = e->PrepareChat(MessagesJson(t), ro);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("more than the ubatch of 64"), std::string::npos)
      << p.status().ToString();
  EXPECT_TRUE(e->PrepareChat(MessagesJson({{"user", "hello"}}), ChatRenderOptions{}).ok());
}

// llama.cpp patch 0021 (docs/llama-patches.md): on an M-RoPE model (qwen35) prefixd decodes an
// image's rows at cell positions one per row, apart from the rows' rope positions, and the text
// after it at cells that go on from there. The unpatched way (libmtmd's helper, llama-server)
// puts the cells at the rope times: every row of the image in one cell position, the text after
// it max(nx, ny) on. The logits after text, image and text are the same bit for bit: the same
// rotations, the same cells attended to. What differs is what the sequence's positions can do:
// with cell positions the state cuts at any row like text (here: after the image's fifth row,
// and the rest decoded again gives the same logits), unpatched the rows share one position.
TEST(ImageMRope, CellPositionsApartFromRopeGiveTheUnpatchedLogitsAndCutLikeText) {
#if defined(__aarch64__) || defined(__arm__)
  GTEST_SKIP() << "bit-identity is claimed on x86 kernels only (exactness_test.cpp)";
#endif
  const Files f = MakeFiles("qwen35");
  auto model = Model::Load({f.model});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ProjectorOptions po;
  po.path = f.mmproj;
  po.n_threads = 2;
  auto projector = Projector::Load(**model, po);
  ASSERT_TRUE(projector.ok()) << projector.status().ToString();
  ASSERT_TRUE((*projector)->mrope());
  auto insert = (*projector)->Prepare(Png(64, 48, Picture(64, 48, 9)));
  ASSERT_TRUE(insert.ok()) << insert.status().ToString();
  // Text, the projector's wrapping and image, text.
  std::vector<Token> before = (*model)->Tokenize("<|im_start|>user\nWhat is on this screen? ");
  std::vector<Token> after;
  std::shared_ptr<const PreparedImage> image;
  for (const ImagePiece& piece : insert->pieces) {
    std::vector<Token>& to = image ? after : before;
    if (piece.image) image = piece.image;
    else to.insert(to.end(), piece.text.begin(), piece.text.end());
  }
  ASSERT_TRUE(image);
  const std::vector<Token> tail = (*model)->Tokenize("It shows a list.<|im_end|>\n");
  after.insert(after.end(), tail.begin(), tail.end());
  const int32_t n_rows = image->n_tokens();
  ASSERT_LT(image->n_pos(), n_rows) << "the rows share time steps";
  auto rows = (*projector)->Embeddings(*image);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const int32_t n_embd = (*projector)->n_embd();

  ContextOptions co;
  co.n_ctx_per_seq = 1024;
  co.n_seq = 1;
  co.n_batch = co.n_ubatch = 512;
  co.n_threads = 2;
  const int32_t n_vocab = (*model)->n_vocab();
  auto last_logits = [&](Context& c) {
    const float* l = c.Logits(-1);
    return std::vector<float>(l, l + n_vocab);
  };

  // Unpatched: the cells at the rope times, as libmtmd's mtmd_helper_eval_chunks.
  auto plain = Context::Create(**model, co);
  ASSERT_TRUE(plain.ok());
  {
    llama_context* lc = (*plain)->raw();
    int32_t t = 0;
    auto decode_text = [&](const std::vector<Token>& tokens, bool logits) {
      llama_batch b = llama_batch_init(int32_t(tokens.size()), 0, 1);
      for (size_t i = 0; i < tokens.size(); ++i) {
        b.token[i] = tokens[i];
        b.pos[i] = t++;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = logits && i + 1 == tokens.size();
      }
      b.n_tokens = int32_t(tokens.size());
      EXPECT_EQ(llama_decode(lc, b), 0);
      llama_batch_free(b);
    };
    decode_text(before, false);
    std::vector<int32_t> rope = image->RopePositions(t, 0, n_rows);
    llama_batch b = llama_batch_init(n_rows, n_embd, 1);
    std::memcpy(b.embd, (*rows)->data(), (*rows)->size() * sizeof(float));
    llama_pos* own = b.pos;
    b.pos = rope.data();
    for (int32_t i = 0; i < n_rows; ++i) b.n_seq_id[i] = 1, b.seq_id[i][0] = 0, b.logits[i] = 0;
    b.n_tokens = n_rows;
    ASSERT_EQ(llama_decode(lc, b), 0);
    b.pos = own;
    llama_batch_free(b);
    EXPECT_EQ((*plain)->SeqPosMax(0), int32_t(before.size())) << "every row at one position";
    t += image->n_pos();
    decode_text(after, true);
  }
  const std::vector<float> want = last_logits(**plain);

  // Patched: cells one per row, rope from the layout.
  auto cells = Context::Create(**model, co);
  ASSERT_TRUE(cells.ok());
  Context& c = **cells;
  const int32_t img0 = int32_t(before.size());
  c.SetRopeLayout(0, RopeLayout({{img0, n_rows, image->n_pos()}}));
  auto decode_rows = [&](int32_t r0, int32_t r1) {
    Status st = c.DecodeEmbeddings(0, (*rows)->data() + size_t(r0) * size_t(n_embd), r1 - r0,
                                   img0 + r0, false, false,
                                   image->RopePositions(img0, r0, r1));
    ASSERT_TRUE(st.ok()) << st.ToString();
  };
  ASSERT_TRUE(c.DecodeChunk(0, before, 0, false).ok());
  decode_rows(0, n_rows);
  const int32_t text1 = img0 + n_rows;
  EXPECT_EQ(c.SeqPosMax(0), text1 - 1) << "one cell position per row";
  ASSERT_TRUE(c.DecodeChunk(0, after, text1, true).ok());
  EXPECT_EQ(c.SeqPosMax(0), text1 + int32_t(after.size()) - 1);
  const std::vector<float> got = last_logits(c);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
      << "the logits differ from the unpatched decode's";

  // The state's attention rows slice by position as text's: the rows of [0, the fifth row)
  // make a rows payload. Unpatched the positions repeat, and the codec refuses to slice them.
  auto sliced = [&](Context& ctx) {
    auto bytes = ctx.GetState(0, StatePart::kWhole);
    EXPECT_TRUE(bytes.ok());
    auto parsed = ParseState(*bytes, (*model)->state_format());
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    return parsed.ok() && EncodeRows(*parsed, 0, img0 + 5).ok();
  };
  EXPECT_TRUE(sliced(c));
  EXPECT_FALSE(sliced(**plain));
  // Decoded as a restore that ended after the fifth row, then the rest: the same logits.
  c.SeqClear(0);
  ASSERT_TRUE(c.DecodeChunk(0, before, 0, false).ok());
  decode_rows(0, 5);
  EXPECT_EQ(c.SeqPosMax(0), img0 + 4);
  decode_rows(5, n_rows);
  ASSERT_TRUE(c.DecodeChunk(0, after, text1, true).ok());
  const std::vector<float> resumed = last_logits(c);
  EXPECT_EQ(std::memcmp(resumed.data(), want.data(), want.size() * sizeof(float)), 0)
      << "rows decoded in two calls differ";
}

INSTANTIATE_TEST_SUITE_P(Projectors, ImagePromptTest, ::testing::Values("gemma3", "lfm2", "qwen35"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace prefixd::engine
