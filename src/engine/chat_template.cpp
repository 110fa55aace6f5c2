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

Result<std::string> ChatTemplate::Render(const std::string& messages_json,
                                         const ChatRenderOptions& options) const {
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
  try {
    return common_chat_templates_apply(impl_->templates.get(), inputs).prompt;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template failed: ") + e.what());
  }
}

}  // namespace prefixd::engine
