// text/chat_template_encode.cpp — encode_chat: the rendered conversation as token ids plus the ms-swift loss mask
// (rules in chat_template.h).
//
// Invariants:
//  - ids == tokenizer.encode(render_text(...), add_special_tokens=false, parse_special=true): the text is
//    tokenized once, whole, exactly as Hugging Face's apply_chat_template(tokenize=True) does.
//  - The mask is constant on each run of segments with the same training value; a run boundary at byte b maps to
//    the token index t(b) = number of leading tokens of the text that end at or before b. Special tokens are
//    found in the text in order (their strings are literal there) and pin the boundaries exactly; a boundary
//    inside plain text between two special tokens at bytes [a, c) is placed by tokenizing text[a, b) alone
//    (Hugging Face tokenizers split at special tokens first, so the pieces between them are tokenized
//    independently): t(b) = the length of the common prefix of those ids and the piece's ids. A token that
//    straddles b therefore belongs to the later run.
//  - loss_mask[0] == 0 (nothing predicts the first token); the generation prompt is never trained.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/chat_template_internal.h"
#include "text/tokenizer.h"

namespace swift::text {
namespace {

// The training value of one segment under `scale`.
uint8_t segment_value(const TemplateSegment& s, const std::vector<ChatMessage>& messages, int last_user,
                      LossScale scale) {
  if (s.generation_prompt) return 0;
  if (!s.response) return scale == LossScale::All ? 1 : 0;
  const int i = s.message_index;
  std::optional<bool> loss;
  if (i >= 0 && static_cast<size_t>(i) < messages.size()) loss = messages[static_cast<size_t>(i)].loss;
  bool trained = scale == LossScale::LastRound ? i > last_user : true;
  if (loss) trained = *loss;
  if (s.end_of_turn && scale == LossScale::All) return 1;  // ms-swift: the end-of-turn is trained under `all`
  return trained ? 1 : 0;
}

// A special token located in the text: bytes [begin, end) are token `token`.
struct Anchor {
  size_t begin, end, token;
};

class BoundaryMapper {
 public:
  BoundaryMapper(const Tokenizer& tok, const std::string& text, const std::vector<int32_t>& ids)
      : tok_(tok), text_(text), ids_(ids) {
    size_t pos = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      if (!tok.is_special(ids[t])) continue;
      const std::string s = tok.id_to_token(ids[t]);
      const size_t p = s.empty() ? std::string::npos : text.find(s, pos);
      if (p == std::string::npos) break;  // cannot pin more (e.g. a normalizer rewrote it): prefixes take over
      anchors_.push_back({p, p + s.size(), t});
      pos = p + s.size();
    }
  }

  // Number of tokens before byte `b` (a token straddling b counts as after it).
  size_t token_at(size_t b) const {
    // The first anchor that does not end before b.
    auto it = std::lower_bound(anchors_.begin(), anchors_.end(), b,
                               [](const Anchor& a, size_t byte) { return a.end <= byte; });
    if (it != anchors_.end() && it->begin <= b) return it->token;  // b at (or inside) a special token
    size_t run_begin = 0, first_token = 0;
    if (it != anchors_.begin()) {
      run_begin = std::prev(it)->end;
      first_token = std::prev(it)->token + 1;
    }
    const size_t run_end_token = it != anchors_.end() ? it->token : ids_.size();
    if (b <= run_begin) return first_token;
    const std::vector<int32_t> prefix =
        tok_.encode(std::string_view(text_).substr(run_begin, b - run_begin), /*add_special_tokens=*/false,
                    /*parse_special=*/true);
    size_t n = 0;
    while (n < prefix.size() && first_token + n < run_end_token && prefix[n] == ids_[first_token + n]) ++n;
    return first_token + n;
  }

 private:
  const Tokenizer& tok_;
  const std::string& text_;
  const std::vector<int32_t>& ids_;
  std::vector<Anchor> anchors_;
};

}  // namespace

EncodedChat encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, const TemplateOptions& options, LossScale loss_scale) {
  const std::vector<TemplateSegment> segments = chat_template.render(messages, options);
  int last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = static_cast<int>(i);
  }
  // Runs of equal training value: (first byte, value).
  std::string text;
  std::vector<std::pair<size_t, uint8_t>> runs;
  for (const TemplateSegment& s : segments) {
    if (s.text.empty()) continue;
    const uint8_t v = segment_value(s, messages, last_user, loss_scale);
    if (runs.empty() || runs.back().second != v) runs.emplace_back(text.size(), v);
    text += s.text;
  }

  EncodedChat out;
  out.ids = tokenizer.encode(text, /*add_special_tokens=*/false, /*parse_special=*/true);
  out.loss_mask.assign(out.ids.size(), 0);
  if (runs.size() == 1) {
    std::fill(out.loss_mask.begin(), out.loss_mask.end(), runs[0].second);
  } else if (runs.size() > 1) {
    BoundaryMapper mapper(tokenizer, text, out.ids);
    size_t start = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      size_t end = r + 1 < runs.size() ? std::max(start, mapper.token_at(runs[r + 1].first)) : out.ids.size();
      end = std::min(end, out.ids.size());
      std::fill(out.loss_mask.begin() + static_cast<std::ptrdiff_t>(start),
                out.loss_mask.begin() + static_cast<std::ptrdiff_t>(end), runs[r].second);
      start = end;
    }
  }
  if (!out.loss_mask.empty()) out.loss_mask[0] = 0;
  return out;
}

}  // namespace swift::text
