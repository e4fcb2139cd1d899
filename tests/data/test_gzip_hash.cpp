// tests/data/test_gzip_hash.cpp — gzip through zlib (stored, fixed, dynamic blocks; every header flag;
// multi-member; zero padding; truncation and corruption name the file), XXH64 through libxxhash against the
// xxHash sanity vectors (streaming in any chunking equals one shot), and the portable Rng.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/error.h"
#include "data/gzip.h"
#include "data/hash.h"
#include "data/random.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::fixtures_dir;
using testing::read_bytes;

std::string gz(const std::string& name) { return fixtures_dir() + "/gzip/" + name; }

std::string gunzip_file(const std::string& path) {
  std::string bytes = read_bytes(path);
  return gunzip(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

// xxHash's own sanity vectors (xxhsum's self-test): a buffer filled from a PRIME32-seeded generator, hashed at
// several lengths with seed 0 and seed PRIME32.
std::string xxhash_sanity_buffer(size_t len) {
  std::string buf(len, '\0');
  uint64_t gen = 2654435761ull;  // PRIME32
  for (size_t i = 0; i < len; ++i) {
    buf[i] = static_cast<char>(gen >> 56);
    gen *= 11400714785074694797ull;  // PRIME64
  }
  return buf;
}

TEST(DataHash, Xxh64SpecificationVectors) {
  const std::string buf = xxhash_sanity_buffer(222);
  const uint64_t prime = 2654435761ull;
  EXPECT_EQ(xxh64(buf.data(), 0, 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64(buf.data(), 0, prime), 0xAC75FDA2929B17EFull);
  EXPECT_EQ(xxh64(buf.data(), 1, 0), 0xE934A84ADB052768ull);
  EXPECT_EQ(xxh64(buf.data(), 1, prime), 0x5014607643A9B4C3ull);
  EXPECT_EQ(xxh64(buf.data(), 4, 0), 0x9136A0DCA57457EEull);
  EXPECT_EQ(xxh64(buf.data(), 14, 0), 0x8282DCC4994E35C8ull);
  EXPECT_EQ(xxh64(buf.data(), 14, prime), 0xC3BD6BF63DEB6DF0ull);
  EXPECT_EQ(xxh64(buf.data(), 222, 0), 0xB641AE8CB691C174ull);
  EXPECT_EQ(xxh64(buf.data(), 222, prime), 0x20CB8AB7AE10C14Aull);
  // Text overload and hex form (the cache file names).
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 0), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh64("abc", 0), 0x44BC2CF5AD770999ull);
  EXPECT_EQ(hex64(0xEF46DB3751D8E999ull), "ef46db3751d8e999");
}

TEST(DataHash, StreamingStateCopiesAndMoves) {
  Xxh64 a(5);
  a.update("common prefix ");
  Xxh64 b = a;  // branch after the prefix
  a.update("left");
  b.update("right");
  EXPECT_EQ(a.digest(), xxh64("common prefix left", 5));
  EXPECT_EQ(b.digest(), xxh64("common prefix right", 5));
  Xxh64 c(0);
  c = std::move(b);
  EXPECT_EQ(c.digest(), xxh64("common prefix right", 5));
  EXPECT_EQ(a.digest(), a.digest()) << "digest() must not change the state";
}

TEST(DataHash, StreamingEqualsOneShotForAnyChunking) {
  std::mt19937 rng(3);
  std::string data(5000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{100}, size_t{5000}}) {
    uint64_t want = xxh64(data.data(), len, 17);
    for (int trial = 0; trial < 20; ++trial) {
      Xxh64 h(17);
      size_t pos = 0;
      while (pos < len) {
        size_t take = std::min(len - pos, size_t(rng() % 70));
        h.update(data.data() + pos, take);
        pos += take;
      }
      ASSERT_EQ(h.digest(), want) << "length " << len;
    }
  }
}

TEST(DataGzip, FixedHuffmanBlock) { EXPECT_EQ(gunzip_file(gz("fixed.txt.gz")), read_bytes(gz("fixed.txt"))); }

TEST(DataGzip, StoredBlocksAcrossTheirSizeLimit) {
  EXPECT_EQ(gunzip_file(gz("stored.bin.gz")), read_bytes(gz("stored.bin")));
}

TEST(DataGzip, DynamicHuffmanWithEveryHeaderFlag) {
  // FEXTRA, FNAME, FCOMMENT and FHCRC all set.
  EXPECT_EQ(gunzip_file(gz("dynamic.txt.gz")), read_bytes(gz("dynamic.txt")));
}

TEST(DataGzip, MultipleMembersAndZeroPadding) {
  EXPECT_EQ(gunzip_file(gz("multi.txt.gz")), read_bytes(gz("multi.txt")));
}

TEST(DataGzip, RealDatasetSlice) {
  std::string text = gunzip_file(fixtures_dir() + "/hh-rlhf-harmless-base-50.jsonl.gz");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 50);
  EXPECT_EQ(text.rfind("{\"chosen\": ", 0), 0u);
}

TEST(DataGzip, TruncatedStreamThrowsNamingTheFile) {
  std::string bytes = read_bytes(gz("dynamic.txt.gz"));
  for (size_t cut : {size_t{12}, size_t{40}, bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
    std::string part = bytes.substr(0, cut);
    try {
      gunzip(reinterpret_cast<const uint8_t*>(part.data()), part.size(), "cut.gz");
      FAIL() << "no error for a stream cut at " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.gz"), std::string::npos) << e.what();
    }
  }
}

TEST(DataGzip, CorruptionIsDetected) {
  std::string bytes = read_bytes(gz("stored.bin.gz"));
  bytes[1000] ^= 0x40;  // inside stored data: only the CRC can tell
  try {
    gunzip(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "bad.gz");
    FAIL() << "CRC error not detected";
  } catch (const Error& e) {
    // zlib's reason for a CRC-32 mismatch, with the file's name.
    EXPECT_NE(std::string(e.what()).find("incorrect data check"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.gz"), std::string::npos) << e.what();
  }
  // Flipping bits of compressed data either fails to decode or fails the CRC; it never passes silently.
  std::string dyn = read_bytes(gz("dynamic.txt.gz"));
  size_t start = dyn.find("comment") + 10;
  for (size_t i = start; i < dyn.size() - 9; ++i) {  // not the last DEFLATE byte: its high bits may be padding
    std::string bad = dyn;
    bad[i] ^= 0x10;
    EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), "flip.gz"), Error) << i;
  }
  std::string garbage = read_bytes(gz("fixed.txt.gz")) + "xyz";
  EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(), "g.gz"), Error);
  std::string plain = "not gzip at all, just text";
  EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(plain.data()), plain.size(), "p.gz"), Error);
}

TEST(DataGzip, TruncatedSecondMemberAndGarbageAfterPadding) {
  // A whole first member followed by the start of a second: an error, never the first member's data alone.
  const std::string one = read_bytes(gz("fixed.txt.gz"));
  const std::string two = one + one.substr(0, one.size() / 2);
  try {
    gunzip(reinterpret_cast<const uint8_t*>(two.data()), two.size(), "two.gz");
    FAIL() << "a cut second member passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two.gz"), std::string::npos) << e.what();
  }
  const std::string padded = one + std::string(7, '\0');
  EXPECT_EQ(gunzip(reinterpret_cast<const uint8_t*>(padded.data()), padded.size(), "pad.gz"), read_bytes(gz("fixed.txt")));
  const std::string junk = padded + "x";
  EXPECT_THROW(gunzip(reinterpret_cast<const uint8_t*>(junk.data()), junk.size(), "junk.gz"), Error);
  const std::string twice = one + one;
  EXPECT_EQ(gunzip(reinterpret_cast<const uint8_t*>(twice.data()), twice.size(), "twice.gz"),
            read_bytes(gz("fixed.txt")) + read_bytes(gz("fixed.txt")));
}

TEST(DataRandom, EngineIsTheStandardOne) {
  // The C++ standard fixes mt19937_64's 10000th output for the default seed; our Rng draws from that engine.
  Rng rng(5489u);
  uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.next();
  EXPECT_EQ(v, 9981545732273789042ull);
}

TEST(DataRandom, BelowAndPermutation) {
  Rng a(42), b(42);
  for (int i = 0; i < 1000; ++i) {
    uint64_t x = a.below(7);
    ASSERT_LT(x, 7u);
    ASSERT_EQ(x, b.below(7));
  }
  auto p = Rng(1).permutation(1000);
  std::set<int64_t> seen(p.begin(), p.end());
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
  EXPECT_NE(p, Rng(2).permutation(1000));
  EXPECT_EQ(p, Rng(1).permutation(1000));
  EXPECT_NE(derive_seed(42, 0), derive_seed(42, 1));
  EXPECT_NE(derive_seed(42, 0, 1), derive_seed(42, 1, 0));
}

}  // namespace
}  // namespace swift::data
