// Chat: renders OpenAI-style message lists to prompt text with the model's Jinja template
// (llama.cpp common's engine), and finds the message boundaries the cache captures at.
// Thread-safe after construction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "util/status.h"

namespace prefixd::engine {

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string tools_json;  // OpenAI "tools" array as JSON text, or ""
};

class ChatTemplate {
 public:
  // Uses the model's template, or `override_template` when not empty.
  static Result<std::unique_ptr<ChatTemplate>> Create(const Model& model,
                                                      const std::string& override_template = "");
  ~ChatTemplate();

  // Renders an OpenAI "messages" array given as JSON text. Bad messages (not an array, unknown
  // role, wrong types) give InvalidArgument naming the problem.
  Result<std::string> Render(const std::string& messages_json,
                             const ChatRenderOptions& options) const;

  // Renders messages[:i] without a generation prompt for i = 1 .. n-1 and i = n when the full
  // render adds one (the tail), and for i < n also messages[:i] followed by an empty user
  // message (so that templates which strip reasoning before the last user message render the
  // prefix as the full conversation does). Used to find message boundaries.
  Result<std::vector<std::string>> RenderPrefixes(const std::string& messages_json,
                                                  const ChatRenderOptions& options) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixd::engine
