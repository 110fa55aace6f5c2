#include "engine/chat_template.h"

#include <exception>

#include "chat.h"
#include "json.h"

namespace prefixd::engine {

struct ChatTemplate::Impl {
  common_chat_templates_ptr templates;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::Create(const Model& model,
                                                           const std::string& override_template) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->templates = common_chat_templates_init(model.raw(), override_template);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template: ") + e.what());
  }
  if (!impl->templates) return Status::InvalidArgument("chat template: cannot be parsed");
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(impl)));
}

namespace {

Result<common_chat_templates_inputs> ParseInputs(const std::string& messages_json,
                                                 const ChatRenderOptions& options) {
  common_chat_templates_inputs inputs;
  inputs.add_generation_prompt = options.add_generation_prompt;
  inputs.use_jinja = true;
  try {
    inputs.messages = common_chat_msgs_parse_oaicompat(common_json::parse(messages_json));
    if (!options.tools_json.empty()) {
      inputs.tools = common_chat_tools_parse_oaicompat(common_json::parse(options.tools_json));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("messages: ") + e.what());
  }
  if (inputs.messages.empty()) return Status::InvalidArgument("messages: empty");
  return inputs;
}

Result<std::string> Apply(const common_chat_templates* t,
                          const common_chat_templates_inputs& inputs) {
  try {
    return common_chat_templates_apply(t, inputs).prompt;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template failed: ") + e.what());
  }
}

}  // namespace

Result<std::string> ChatTemplate::Render(const std::string& messages_json,
                                         const ChatRenderOptions& options) const {
  PREFIXD_ASSIGN_OR_RETURN(common_chat_templates_inputs inputs,
                           ParseInputs(messages_json, options));
  return Apply(impl_->templates.get(), inputs);
}

Result<std::vector<std::string>> ChatTemplate::RenderPrefixes(
    const std::string& messages_json, const ChatRenderOptions& options) const {
  PREFIXD_ASSIGN_OR_RETURN(common_chat_templates_inputs full,
                           ParseInputs(messages_json, options));
  std::vector<std::string> out;
  const size_t n = full.messages.size();
  const size_t last = options.add_generation_prompt ? n : n - 1;
  common_chat_msg placeholder;
  placeholder.role = "user";
  for (size_t i = 1; i <= last; ++i) {
    common_chat_templates_inputs part = full;
    part.messages.resize(i);
    part.add_generation_prompt = false;
    auto rendered = Apply(impl_->templates.get(), part);
    if (rendered.ok()) out.push_back(std::move(rendered).value());  // a template may refuse
    if (i == n) continue;                                           // a prefix: skip it
    // Templates that strip reasoning from assistant turns before the last user message render
    // messages[:i] differently when a user message follows; a placeholder user message makes
    // the prefix render as it does inside the full conversation.
    part.messages.push_back(placeholder);
    auto followed = Apply(impl_->templates.get(), part);
    if (followed.ok()) out.push_back(std::move(followed).value());
  }
  return out;
}

}  // namespace prefixd::engine
