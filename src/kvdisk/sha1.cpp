#include "kvdisk/sha1.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace ds4::kvdisk {

namespace {
EVP_MD_CTX* new_ctx() {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  if (!c) fail("sha1: EVP_MD_CTX_new failed (out of memory)");
  return c;
}
}  // namespace

Sha1::Sha1() : ctx_(new_ctx()) {
  if (EVP_DigestInit_ex(ctx_, EVP_sha1(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    fail("sha1: EVP_DigestInit_ex failed");
  }
}

Sha1::Sha1(const Sha1& o) : ctx_(new_ctx()) {
  if (EVP_MD_CTX_copy_ex(ctx_, o.ctx_) != 1) {
    EVP_MD_CTX_free(ctx_);
    fail("sha1: EVP_MD_CTX_copy_ex failed");
  }
}

Sha1& Sha1::operator=(const Sha1& o) {
  if (this != &o && EVP_MD_CTX_copy_ex(ctx_, o.ctx_) != 1) fail("sha1: EVP_MD_CTX_copy_ex failed");
  return *this;
}

Sha1::~Sha1() { EVP_MD_CTX_free(ctx_); }

void Sha1::update(std::string_view b) {
  if (!b.empty() && EVP_DigestUpdate(ctx_, b.data(), b.size()) != 1) fail("sha1: EVP_DigestUpdate failed");
}

Digest Sha1::digest() const {
  Sha1 copy(*this);
  Digest d{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(copy.ctx_, d.data(), &n) != 1 || n != d.size()) fail("sha1: EVP_DigestFinal_ex failed");
  return d;
}

Digest Sha1::of(std::string_view b) {
  Sha1 s;
  s.update(b);
  return s.digest();
}

std::string to_hex(const Digest& d) {
  static const char* hx = "0123456789abcdef";
  std::string s;
  s.reserve(40);
  for (uint8_t c : d) {
    s += hx[c >> 4];
    s += hx[c & 15];
  }
  return s;
}

bool from_hex(std::string_view h, Digest& out) {
  if (h.size() != 40) return false;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < 20; ++i) {
    int a = val(h[2 * i]), b = val(h[2 * i + 1]);
    if (a < 0 || b < 0) return false;
    out[i] = static_cast<uint8_t>(a * 16 + b);
  }
  return true;
}

}  // namespace ds4::kvdisk
