// data/template_encoder.cpp — TemplateChatEncoder: data's bridge to text::encode_chat. Kept in its own file so
// code that uses other ChatEncoders (tests) does not pull the chat templates in.
#include <fmt/format.h>

#include "data/encode.h"
#include "data/hash.h"

namespace swift::data {

TemplateChatEncoder::TemplateChatEncoder(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                                         text::TemplateOptions options, text::LossScale loss_scale)
    : tokenizer_(tokenizer), template_(chat_template), options_(std::move(options)), loss_scale_(loss_scale) {
  nlohmann::json opts = {
      {"template", template_.name()},
      {"system", options_.system ? nlohmann::json(*options_.system) : nlohmann::json(nullptr)},
      {"enable_thinking", options_.enable_thinking},
      {"tools", options_.tools.dump()},
      {"date_string", options_.date_string ? nlohmann::json(*options_.date_string) : nlohmann::json(nullptr)},
      {"loss_scale", static_cast<int>(loss_scale_)},
  };
  fingerprint_ = fmt::format("template:{}:{}", tokenizer_fingerprint(tokenizer_), hex64(xxh64(opts.dump())));
}

text::EncodedChat TemplateChatEncoder::encode(const std::vector<text::ChatMessage>& messages,
                                              const nlohmann::ordered_json& tools, bool add_generation_prompt) const {
  text::TemplateOptions opts = options_;
  opts.add_generation_prompt = add_generation_prompt;
  if (!tools.is_null() && !tools.empty()) opts.tools = tools;
  return text::encode_chat(tokenizer_, template_, messages, opts, loss_scale_);
}

std::string TemplateChatEncoder::fingerprint() const { return fingerprint_; }

}  // namespace swift::data
