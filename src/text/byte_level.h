// text/byte_level.h — GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable Unicode
// character in vocabularies of byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2/3, SmolLM2).
//
// Invariants: byte_level_encode and byte_level_decode are inverse bijections on byte strings; decoding a
// character outside the alphabet throws swift::Error naming it.
#pragma once

#include <string>
#include <string_view>

namespace swift::text {

// Raw bytes -> UTF-8 string of alphabet characters (e.g. " hi" -> "Ġhi").
std::string byte_level_encode(std::string_view bytes);
// Alphabet characters (UTF-8) -> raw bytes (e.g. "Ġhi" -> " hi").
std::string byte_level_decode(std::string_view token);

}  // namespace swift::text
