// text/tokenizer_load_json.cpp — loaders for tokenizer.json (+ tokenizer_config.json) and GPT-2's
// vocab.json/encoder.json + merges.txt/vocab.bpe, and the post-processor and special-token rules they share.
//
// Invariants:
//  - Every malformed field throws swift::Error naming the file and the dotted field path.
//  - add_special_tokens follows the post_processor (TemplateProcessing, RobertaProcessing, BertProcessing,
//    ByteLevel, Sequence) unless tokenizer_config.json sets add_bos_token/add_eos_token, which then rebuild it
//    from bos/eos as transformers 5 does.
//  - clean_up_tokenization_spaces is recorded but never applied: transformers 5 skips it for BPE models.
//  - The chat template is tokenizer_config.json's "chat_template" (a string, or the "default" of a named list), else
//    chat_template.jinja beside tokenizer.json.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/tokenizer_impl.h"

namespace swift::text {

namespace {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tokenizer: cannot open '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("tokenizer: '{}' is not valid JSON: {}", path, e.what());
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tokenizer: cannot open '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::pair<std::string, int32_t>> vocab_from_json(const JsonField& vocab) {
  vocab.expect_object();
  std::vector<std::pair<std::string, int32_t>> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.json().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      throw Error(fmt::format("{}: field '{}[\"{}\"]' must be a non-negative integer id, found {}", vocab.file(),
                              vocab.path(), token, id.dump()));
    }
    out.emplace_back(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> merges_from_json(const JsonField& merges) {
  merges.expect_array();
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    JsonField m = merges[i];
    if (m.is_string()) {
      std::string s = m.str();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        m.error(fmt::format("must be two tokens separated by one space, found '{}'", s));
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      out.emplace_back(m[0].str(), m[1].str());
    } else {
      m.error("must be a string \"a b\" or a pair [a, b]");
    }
  }
  return out;
}

std::unique_ptr<Model> model_from_json(const JsonField& m) {
  const std::string type = m.str_or("type", "BPE");
  if (type != "BPE") {
    m.at("type").error(fmt::format("'{}' is not a supported model (supported: BPE)", type));
  }
  BpeOptions options;
  if (m.has("unk_token")) options.unk_token = m.at("unk_token").str();
  options.byte_fallback = m.bool_or("byte_fallback", false);
  options.fuse_unk = m.bool_or("fuse_unk", false);
  options.ignore_merges = m.bool_or("ignore_merges", false);
  options.continuing_subword_prefix = m.str_or("continuing_subword_prefix", "");
  options.end_of_word_suffix = m.str_or("end_of_word_suffix", "");
  if (m.has("dropout") && m.at("dropout").number() > 0.0) {
    m.at("dropout").error("is set: BPE dropout (random merges) is not supported; set it to null for inference");
  }
  return std::make_unique<BpeModel>(vocab_from_json(m.at("vocab")), merges_from_json(m.at("merges")),
                                    std::move(options), m.file());
}

// Ids a post-processor puts before and after one sequence.
void post_processor_from_json(const JsonField& j, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix,
                              const TokenizerImpl& tok) {
  const std::string type = j.at("type").str();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    JsonField list = j.at("processors");
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) {
      std::vector<int32_t> p, s;
      post_processor_from_json(list[i], p, s, tok);
      prefix.insert(prefix.begin(), p.begin(), p.end());
      suffix.insert(suffix.end(), s.begin(), s.end());
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) {
      JsonField pair = j.at(key);
      if (!pair.is_array() || pair.size() != 2) pair.error("must be a pair [token, id]");
      return static_cast<int32_t>(pair[1].integer());
    };
    prefix = {id_of("cls")};
    suffix = {id_of("sep")};
    return;
  }
  if (type == "TemplateProcessing") {
    JsonField single = j.at("single");
    single.expect_array();
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      JsonField item = single[i];
      if (item.has("Sequence")) {
        seen_sequence = true;
        continue;
      }
      JsonField special = item.at("SpecialToken");
      std::string name = special.at("id").str();
      std::vector<int32_t> ids;
      if (j.has("special_tokens") && j.at("special_tokens").json().contains(name)) {
        JsonField entry = j.at("special_tokens").at(name.c_str());
        JsonField list = entry.at("ids");
        list.expect_array();
        for (size_t k = 0; k < list.size(); ++k) ids.push_back(static_cast<int32_t>(list[k].integer()));
      } else {
        int32_t id = tok.token_to_id(name);
        if (id < 0) special.at("id").error(fmt::format("names '{}', which is neither in special_tokens nor a token", name));
        ids.push_back(id);
      }
      std::vector<int32_t>& target = seen_sequence ? suffix : prefix;
      target.insert(target.end(), ids.begin(), ids.end());
    }
    return;
  }
  j.at("type").error(fmt::format("'{}' is not a supported post-processor (supported: TemplateProcessing, "
                                 "RobertaProcessing, BertProcessing, ByteLevel, Sequence)",
                                 type));
}

AddedToken added_token_from_json(const JsonField& t, int32_t id) {
  AddedToken a;
  a.id = id;
  a.content = t.at("content").str();
  a.special = t.bool_or("special", false);
  a.lstrip = t.bool_or("lstrip", false);
  a.rstrip = t.bool_or("rstrip", false);
  a.single_word = t.bool_or("single_word", false);
  a.normalized = t.bool_or("normalized", !a.special);
  return a;
}

// Adds `token` as HF's AddedVocabulary::add_tokens does: the id is not taken from the file but is the id the
// content already has (an added token, then the model's vocabulary), else the next free id after the model's
// vocabulary (its entry count) and the added tokens. An exact duplicate is ignored.
void add_token_like_hf(TokenizerImpl& tok, AddedToken token) {
  if (token.content.empty()) return;
  if (const AddedToken* same = tok.added.by_content(token.content)) {
    if (same->special == token.special && same->lstrip == token.lstrip && same->rstrip == token.rstrip &&
        same->single_word == token.single_word && same->normalized == token.normalized) {
      return;
    }
  }
  int32_t id = tok.token_to_id(token.content);
  if (id < 0) {
    const int64_t model_size = tok.model->entry_count();
    int64_t max_added = -1;
    for (const AddedToken& t : tok.added.tokens()) max_added = std::max<int64_t>(max_added, t.id);
    id = static_cast<int32_t>(max_added < 0 ? model_size
                                            : (max_added >= model_size || model_size == 0 ? max_added + 1 : model_size));
  }
  token.id = id;
  tok.added.add(std::move(token));
}

// A tokenizer_config.json token field: a string, or an AddedToken object with "content".
std::string config_token_text(const JsonField& j) {
  if (j.is_string()) return j.str();
  if (j.is_object()) return j.at("content").str();
  j.error("must be a string or an object with \"content\"");
}

}  // namespace

bool apply_tokenizer_config(TokenizerImpl& tok, const std::string& config_path) {
  const nlohmann::json json = read_json_file(config_path);
  JsonField root(json, config_path, "");
  root.expect_object();
  if (root.has("chat_template")) {
    JsonField t = root.at("chat_template");
    if (t.is_string()) {
      tok.chat_template_text = t.str();
    } else {
      t.expect_array();  // [{"name": ..., "template": ...}]: the "default" one, else the first
      for (size_t i = 0; i < t.size(); ++i) {
        if (i == 0 || t[i].str_or("name", "") == "default") tok.chat_template_text = t[i].at("template").str();
      }
    }
  }
  if (root.has("added_tokens_decoder")) {  // transformers adds those missing from tokenizer.json
    JsonField decoder = root.at("added_tokens_decoder");
    decoder.expect_object();
    for (const auto& [key, value] : decoder.json().items()) {
      char* end = nullptr;
      long id = std::strtol(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0' || id < 0) {
        throw Error(fmt::format("{}: field 'added_tokens_decoder' has a key '{}' that is not a token id", config_path, key));
      }
      JsonField entry(value, config_path, "added_tokens_decoder." + key);
      AddedToken a = added_token_from_json(entry, static_cast<int32_t>(id));
      if (!tok.added.by_content(a.content)) add_token_like_hf(tok, std::move(a));
    }
  }
  struct Field {
    const char* key;
    std::string* text;
  };
  for (const Field& f : {Field{"bos_token", &tok.specials.bos_text}, Field{"eos_token", &tok.specials.eos_text},
                         Field{"pad_token", &tok.specials.pad_text}, Field{"unk_token", &tok.specials.unk_text}}) {
    if (root.json().contains(f.key)) {
      *f.text = root.has(f.key) ? config_token_text(root.at(f.key)) : std::string();
    }
  }
  tok.clean_up_tokenization_spaces = root.bool_or("clean_up_tokenization_spaces", false);
  const bool has_bos = root.json().contains("add_bos_token"), has_eos = root.json().contains("add_eos_token");
  if (has_bos || has_eos) {  // transformers rebuilds the post-processor from bos/eos
    const bool add_bos = root.bool_or("add_bos_token", false), add_eos = root.bool_or("add_eos_token", false);
    tok.prefix_ids.clear();
    tok.suffix_ids.clear();
    if (add_bos && !tok.specials.bos_text.empty()) {
      int32_t id = tok.token_to_id(tok.specials.bos_text);
      if (id < 0) root.at("bos_token").error(fmt::format("'{}' is not a token", tok.specials.bos_text));
      tok.prefix_ids.push_back(id);
    }
    if (add_eos && !tok.specials.eos_text.empty()) {
      int32_t id = tok.token_to_id(tok.specials.eos_text);
      if (id < 0) root.at("eos_token").error(fmt::format("'{}' is not a token", tok.specials.eos_text));
      tok.suffix_ids.push_back(id);
    }
  }
  return has_bos || has_eos;
}

void resolve_special_tokens(TokenizerImpl& tok) {
  SpecialTokens& s = tok.specials;
  auto resolve = [&](const std::string& text, int32_t& id) {
    if (!text.empty()) id = tok.token_to_id(text);
  };
  resolve(s.bos_text, s.bos);
  resolve(s.eos_text, s.eos);
  resolve(s.pad_text, s.pad);
  resolve(s.unk_text, s.unk);
  s.add_bos = !tok.prefix_ids.empty();
  s.add_eos = !tok.suffix_ids.empty();
  if (s.add_bos && s.bos < 0) {
    s.bos = tok.prefix_ids.front();
    s.bos_text = tok.id_to_token(s.bos);
  }
  if (s.add_eos && s.eos < 0) {
    s.eos = tok.suffix_ids.back();
    s.eos_text = tok.id_to_token(s.eos);
  }
}

std::unique_ptr<TokenizerImpl> load_tokenizer_json(const std::string& path, const std::string& config_path) {
  const nlohmann::json json = read_json_file(path);
  JsonField root(json, path, "");
  root.expect_object();
  auto tok = std::make_unique<TokenizerImpl>();
  tok->source = path;
  JsonField model = root.at("model");
  tok->model = model_from_json(model);
  if (model.has("unk_token")) tok->specials.unk_text = model.at("unk_token").str();
  if (root.has("normalizer")) tok->normalizer = normalizer_from_json(root.at("normalizer"));
  if (root.has("pre_tokenizer")) tok->pre_tokenizer = pretokenizer_from_json(root.at("pre_tokenizer"));
  if (root.has("decoder")) tok->decoder = decoder_from_json(root.at("decoder"));
  if (root.has("added_tokens")) {
    JsonField list = root.at("added_tokens");
    list.expect_array();
    for (size_t i = 0; i < list.size(); ++i) {
      JsonField t = list[i];
      int64_t id = t.at("id").integer();
      if (id < 0 || id > INT32_MAX) t.at("id").error(fmt::format("{} is not a valid token id", id));
      add_token_like_hf(*tok, added_token_from_json(t, static_cast<int32_t>(id)));
    }
  }
  // add_bos_token/add_eos_token in the config replace the file's post-processor (transformers 5).
  const bool config_decides = !config_path.empty() && apply_tokenizer_config(*tok, config_path);
  if (tok->chat_template_text.empty()) {  // newer repositories keep the template in its own file
    const std::filesystem::path jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
    if (std::filesystem::exists(jinja)) tok->chat_template_text = read_text_file(jinja.string());
  }
  if (!config_decides && root.has("post_processor")) {
    post_processor_from_json(root.at("post_processor"), tok->prefix_ids, tok->suffix_ids, *tok);
  }
  tok->finalize();
  resolve_special_tokens(*tok);
  return tok;
}

std::unique_ptr<TokenizerImpl> load_gpt2_files(const std::string& vocab_json, const std::string& merges_txt) {
  const nlohmann::json json = read_json_file(vocab_json);
  auto vocab = vocab_from_json(JsonField(json, vocab_json, ""));
  const std::string text = read_text_file(merges_txt);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.starts_with("#version")) continue;
    size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      fail("{}: line {} must be two tokens separated by one space, found '{}'", merges_txt, line_no, line);
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  auto tok = std::make_unique<TokenizerImpl>();
  tok->source = vocab_json;
  const std::string eot = "<|endoftext|>";
  int32_t eot_id = -1;
  for (const auto& [token, id] : vocab) {
    if (token == eot) eot_id = id;
  }
  tok->model = std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{}, merges_txt);
  tok->pre_tokenizer = make_byte_level_pretokenizer(false, true);
  tok->decoder = make_byte_level_decoder();
  if (eot_id >= 0) {
    AddedToken t;  // as the gpt2 hub tokenizer.json has it
    t.content = eot;
    t.id = eot_id;
    t.special = true;
    t.normalized = true;
    tok->added.add(std::move(t));
    tok->specials.bos_text = tok->specials.eos_text = tok->specials.unk_text = eot;
  }
  tok->finalize();
  resolve_special_tokens(*tok);
  return tok;
}

}  // namespace swift::text
