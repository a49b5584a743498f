// SHA-256 (FIPS 180-4), enough for the launcher to check the runtime it unpacks without linking
// a crypto library into a program that must stay small and static.
#pragma once
#include <stddef.h>
#include <stdint.h>

struct sha256 {
  uint32_t state[8];
  uint64_t length;
  uint8_t block[64];
  size_t used;
};

void sha256_init(struct sha256 *h);
void sha256_update(struct sha256 *h, const void *data, size_t len);
void sha256_final(struct sha256 *h, uint8_t out[32]);
