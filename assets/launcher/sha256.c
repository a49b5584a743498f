#include "sha256.h"

#include <immintrin.h>
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress_block(uint32_t s[8], const uint8_t b[64]) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++) w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 | (uint32_t)b[4 * i + 2] << 8 | b[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = bb;
    bb = a;
    a = t1 + t2;
  }
  s[0] += a;
  s[1] += bb;
  s[2] += c;
  s[3] += d;
  s[4] += e;
  s[5] += f;
  s[6] += g;
  s[7] += h;
}


static void compress_sw(uint32_t s[8], const uint8_t *p, size_t blocks) {
  for (; blocks; blocks--, p += 64) compress_block(s, p);
}

/*
 * The same with the SHA extensions of x86 CPUs (SHA-NI): about four times as fast, which is most
 * of what the launcher's first run spends on 110 MB. State lanes are kept as ABEF / CDGH, the
 * layout sha256rnds2 works on; each group of four message words is scheduled with
 * sha256msg1 / sha256msg2 from the four groups before it.
 */
__attribute__((target("sha,sse4.1"))) static void compress_ni(uint32_t s[8], const uint8_t *p, size_t blocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128((const __m128i *)&s[0]), hgfe = _mm_loadu_si128((const __m128i *)&s[4]);
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1), efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8), cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks; blocks--, p += 64) {
    __m128i abef0 = abef, cdgh0 = cdgh, w[4];
    for (int g = 0; g < 16; g++) {
      if (g < 4) {
        w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
      } else {
        __m128i t = _mm_sha256msg1_epu32(w[g % 4], w[(g + 1) % 4]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(g + 3) % 4], w[(g + 2) % 4], 4));
        w[g % 4] = _mm_sha256msg2_epu32(t, w[(g + 3) % 4]);
      }
      __m128i wk = _mm_add_epi32(w[g % 4], _mm_loadu_si128((const __m128i *)&K[4 * g]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B), dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i *)&s[0], _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128((__m128i *)&s[4], _mm_alignr_epi8(dchg, feba, 8));
}

static void (*compress)(uint32_t s[8], const uint8_t *p, size_t blocks);

#ifndef SHA256_SOFTWARE_ONLY // tests build the software path on CPUs that have SHA-NI too
#define SHA256_SOFTWARE_ONLY 0
#endif

void sha256_init(struct sha256 *h) {
  if (!compress) {
    __builtin_cpu_init();
    int ni = !SHA256_SOFTWARE_ONLY && __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
    compress = ni ? compress_ni : compress_sw;
  }
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(h->state, iv, sizeof iv);
  h->length = 0;
  h->used = 0;
}

void sha256_update(struct sha256 *h, const void *data, size_t len) {
  const uint8_t *p = data;
  h->length += len;
  if (h->used) {
    size_t take = 64 - h->used < len ? 64 - h->used : len;
    memcpy(h->block + h->used, p, take);
    h->used += take;
    p += take;
    len -= take;
    if (h->used < 64) return;
    compress(h->state, h->block, 1);
    h->used = 0;
  }
  size_t blocks = len / 64;
  if (blocks) compress(h->state, p, blocks);
  p += blocks * 64;
  len -= blocks * 64;
  memcpy(h->block, p, len);
  h->used = len;
}

void sha256_final(struct sha256 *h, uint8_t out[32]) {
  uint64_t bits = h->length * 8;
  uint8_t pad = 0x80;
  sha256_update(h, &pad, 1);
  uint8_t zero = 0;
  while (h->used != 56) sha256_update(h, &zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  sha256_update(h, len, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(h->state[i] >> 24);
    out[4 * i + 1] = (uint8_t)(h->state[i] >> 16);
    out[4 * i + 2] = (uint8_t)(h->state[i] >> 8);
    out[4 * i + 3] = (uint8_t)h->state[i];
  }
}
