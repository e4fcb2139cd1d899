// bench/bench_tokenizer.cpp — encoder throughput on a jsonl dataset (GSM8K train: question + "\n" + answer per
// row), one thread and N threads (std::thread over rows, one shared immutable Tokenizer). Not a test; run by
// scripts/bench/bench_tokenizer.sh next to Hugging Face tokenizers on the same rows:
//   build/bench/bench_tokenizer --name qwen3 --tokenizer DIR|tokenizer.json|FILE.gguf --data train.jsonl
//       [--gpt2 encoder.json vocab.bpe] [--threads N] [--reps 3] [--ids_out ids.txt]
//
// Invariants: add_special_tokens=false, parse_special=true (as HF's encode_batch(texts, add_special_tokens=False));
// reports the first pass on the freshly loaded tokenizer ("cold": its word cache empty) and the best of --reps
// runs after it ("warm"); the N-thread ids must equal the one-thread ids (else it
// says so and exits 1); --ids_out writes the one-thread ids, one row per line, space-separated. The last line
// is machine-readable: "RESULT name=... rows=... tokens=... load_s=... cold_s=... t1_s=... tn_s=... threads=...".
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::string> read_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("bench_tokenizer: cannot open --data " + path);
  std::vector<std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line);
    rows.push_back(j.at("question").get<std::string>() + "\n" + j.at("answer").get<std::string>());
  }
  return rows;
}

using Ids = std::vector<std::vector<int32_t>>;

void encode_rows(const swift::text::Tokenizer& tok, const std::vector<std::string>& rows, Ids& out, int threads) {
  std::atomic<size_t> next{0};
  constexpr size_t kChunk = 8;
  auto work = [&] {
    for (;;) {
      size_t begin = next.fetch_add(kChunk);
      if (begin >= rows.size()) return;
      for (size_t i = begin; i < std::min(rows.size(), begin + kChunk); ++i) out[i] = tok.encode(rows[i], false);
    }
  };
  if (threads <= 1) return work();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
  for (auto& th : pool) th.join();
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_tokenizer --name NAME (--tokenizer PATH | --gpt2 ENCODER_JSON VOCAB_BPE) --data FILE.jsonl\n"
               "                       [--threads N] [--reps R] [--ids_out FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name, tokenizer_path, gpt2_vocab, gpt2_merges, data, ids_out;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), reps = 3;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](int k) -> std::string {
      if (i + k >= argc) throw std::runtime_error(std::string("bench_tokenizer: ") + argv[i] + " needs a value");
      return argv[i + k];
    };
    std::string a = argv[i];
    if (a == "--name") name = arg(1), ++i;
    else if (a == "--tokenizer") tokenizer_path = arg(1), ++i;
    else if (a == "--gpt2") gpt2_vocab = arg(1), gpt2_merges = arg(2), i += 2;
    else if (a == "--data") data = arg(1), ++i;
    else if (a == "--threads") threads = std::stoi(arg(1)), ++i;
    else if (a == "--reps") reps = std::stoi(arg(1)), ++i;
    else if (a == "--ids_out") ids_out = arg(1), ++i;
    else return usage();
  }
  if (name.empty() || data.empty() || (tokenizer_path.empty() == gpt2_vocab.empty())) return usage();

  try {
    const std::vector<std::string> rows = read_rows(data);
    size_t bytes = 0;
    for (const auto& r : rows) bytes += r.size();

    std::unique_ptr<swift::text::Tokenizer> tok;
    double load_s = seconds([&] {
      tok = gpt2_vocab.empty() ? swift::text::Tokenizer::load(tokenizer_path)
                               : swift::text::Tokenizer::from_gpt2_files(gpt2_vocab, gpt2_merges);
    });

    Ids one(rows.size()), many(rows.size());
    double cold = seconds([&] { encode_rows(*tok, rows, one, 1); });  // also the warm-up
    double t1 = 1e30, tn = 1e30;
    for (int r = 0; r < reps; ++r) t1 = std::min(t1, seconds([&] { encode_rows(*tok, rows, one, 1); }));
    encode_rows(*tok, rows, many, threads);
    for (int r = 0; r < reps; ++r) tn = std::min(tn, seconds([&] { encode_rows(*tok, rows, many, threads); }));

    size_t tokens = 0, differing = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      tokens += one[i].size();
      differing += one[i] != many[i];
    }
    std::printf("%s: %zu rows, %.2f MB, %zu tokens; load %.3f s\n", name.c_str(), rows.size(), bytes / 1e6, tokens,
                load_s);
    std::printf("  1 thread, cold: %.3f s  %12.0f tokens/s  %7.2f MB/s\n", cold, tokens / cold, bytes / 1e6 / cold);
    std::printf("  1 thread:       %.3f s  %12.0f tokens/s  %7.2f MB/s\n", t1, tokens / t1, bytes / 1e6 / t1);
    std::printf("  %d threads:     %.3f s  %12.0f tokens/s  %7.2f MB/s\n", threads, tn, tokens / tn, bytes / 1e6 / tn);
    if (!ids_out.empty()) {
      std::FILE* f = std::fopen(ids_out.c_str(), "w");
      if (!f) throw std::runtime_error("bench_tokenizer: cannot write --ids_out " + ids_out);
      for (const auto& row : one) {
        for (size_t k = 0; k < row.size(); ++k) std::fprintf(f, k ? " %d" : "%d", row[k]);
        std::fputc('\n', f);
      }
      std::fclose(f);
    }
    std::printf("RESULT name=%s rows=%zu tokens=%zu load_s=%.4f cold_s=%.5f t1_s=%.5f tn_s=%.5f threads=%d\n",
                name.c_str(), rows.size(), tokens, load_s, cold, t1, tn, threads);
    if (differing) {
      std::fprintf(stderr, "%s: %zu rows differ between 1 and %d threads: the tokenizer is not thread-safe\n",
                   name.c_str(), differing, threads);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
