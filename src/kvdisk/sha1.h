#pragma once
// SHA-1 through OpenSSL's libcrypto (EVP interface): the key of a disk KV cache file is the
// SHA-1 of the rendered text its state covers. Incremental, and copyable so that one pass
// over a prompt yields the digest of every prefix length of interest.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace ds4::kvdisk {

using Digest = std::array<uint8_t, 20>;

class Sha1 {
 public:
  Sha1();
  Sha1(const Sha1& other);
  Sha1& operator=(const Sha1& other);
  ~Sha1();

  void update(std::string_view bytes);
  // Digest of everything fed so far; the object can keep being updated afterwards.
  Digest digest() const;

  static Digest of(std::string_view bytes);

 private:
  evp_md_ctx_st* ctx_ = nullptr;
};

std::string to_hex(const Digest& d);
// Parses 40 lowercase hex digits; false for anything else.
bool from_hex(std::string_view hex, Digest& out);

}  // namespace ds4::kvdisk
