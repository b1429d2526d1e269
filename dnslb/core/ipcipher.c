/*
 * ipcipher.c - ipcipher, the address pseudonymisation dnsdist offers
 * (makeIPCipherKey, ComboAddress:ipencrypt/ipdecrypt): IPv4 addresses
 * through ipcrypt (a 4-byte ARX permutation with four round keys), IPv6
 * addresses through one AES-128 block, both keyed with 16 bytes; a key from
 * a password is PBKDF2-HMAC-SHA1 with the salt "ipcipheripcipher" and
 * 50,000 iterations.
 *
 * The primitives are written here (libsodium has neither SHA-1 nor
 * AES-128): they serve pseudonymisation only, never secrecy of traffic,
 * and run on the control plane. The AES S-boxes are computed (inverse in
 * GF(2^8), then the affine map) rather than typed in.
 *
 * Thread: any (the tables are built once, under pthread_once).
 */
#include "dnslb/core/ipcipher.h"

#include <pthread.h>
#include <string.h>

/* ---- SHA-1, HMAC-SHA1, PBKDF2 ------------------------------------------------ */

struct sha1 {
	uint32_t h[5];
	uint64_t len;
	uint8_t buf[64];
	size_t n;
};

static inline uint32_t
rol32(uint32_t x, int k)
{
	return x << k | x >> (32 - k);
}

static void
sha1_block(struct sha1 *s, const uint8_t *p)
{
	uint32_t w[80], a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	for (int i = 0; i < 80; i++) {
		uint32_t f, k, t;

		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		t = rol32(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol32(b, 30);
		b = a;
		a = t;
	}
	s->h[0] += a;
	s->h[1] += b;
	s->h[2] += c;
	s->h[3] += d;
	s->h[4] += e;
}

static void
sha1_init(struct sha1 *s)
{
	static const uint32_t iv[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476,
					0xc3d2e1f0 };

	memcpy(s->h, iv, sizeof(iv));
	s->len = 0;
	s->n = 0;
}

static void
sha1_update(struct sha1 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->len += len;
	while (len > 0) {
		size_t k = 64 - s->n < len ? 64 - s->n : len;

		memcpy(s->buf + s->n, p, k);
		s->n += k;
		p += k;
		len -= k;
		if (s->n == 64) {
			sha1_block(s, s->buf);
			s->n = 0;
		}
	}
}

static void
sha1_final(struct sha1 *s, uint8_t out[20])
{
	uint64_t bits = s->len * 8;
	uint8_t pad = 0x80, zero = 0, l[8];

	sha1_update(s, &pad, 1);
	while (s->n != 56)
		sha1_update(s, &zero, 1);
	for (int i = 0; i < 8; i++)
		l[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha1_update(s, l, 8);
	for (int i = 0; i < 5; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

/* HMAC-SHA1's two keyed states, computed once per password. */
struct hmac {
	struct sha1 inner, outer;
};

static void
hmac_init(struct hmac *h, const void *key, size_t keylen)
{
	uint8_t k[64] = { 0 }, pad[64];

	if (keylen > 64) {
		struct sha1 s;

		sha1_init(&s);
		sha1_update(&s, key, keylen);
		sha1_final(&s, k);
	} else {
		memcpy(k, key, keylen);
	}
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sha1_init(&h->inner);
	sha1_update(&h->inner, pad, 64);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sha1_init(&h->outer);
	sha1_update(&h->outer, pad, 64);
}

static void
hmac(const struct hmac *h, const void *msg, size_t len, uint8_t out[20])
{
	struct sha1 s = h->inner;
	uint8_t in[20];

	sha1_update(&s, msg, len);
	sha1_final(&s, in);
	s = h->outer;
	sha1_update(&s, in, 20);
	sha1_final(&s, out);
}

void
dlb_ipcipher_key(const char *password, size_t len, uint8_t key[DLB_IPCIPHER_KEY])
{
	static const char salt[] = "ipcipheripcipher";
	uint8_t msg[sizeof(salt) - 1 + 4], u[20], t[20];
	struct hmac h;

	/* PBKDF2: 16 bytes are the first 16 of block 1 */
	hmac_init(&h, password, len);
	memcpy(msg, salt, sizeof(salt) - 1);
	msg[sizeof(salt) - 1] = 0;
	msg[sizeof(salt)] = 0;
	msg[sizeof(salt) + 1] = 0;
	msg[sizeof(salt) + 2] = 1;
	hmac(&h, msg, sizeof(msg), u);
	memcpy(t, u, 20);
	for (int i = 1; i < 50000; i++) {
		hmac(&h, u, 20, u);
		for (int j = 0; j < 20; j++)
			t[j] ^= u[j];
	}
	memcpy(key, t, DLB_IPCIPHER_KEY);
}

/* ---- ipcrypt (IPv4) ----------------------------------------------------------- */

static inline uint8_t
rol8(uint8_t x, int k)
{
	return (uint8_t)(x << k | x >> (8 - k));
}

static void
ipcrypt_fwd(uint8_t s[4])
{
	s[0] = (uint8_t)(s[0] + s[1]);
	s[2] = (uint8_t)(s[2] + s[3]);
	s[1] = rol8(s[1], 2);
	s[3] = rol8(s[3], 5);
	s[1] ^= s[0];
	s[3] ^= s[2];
	s[0] = rol8(s[0], 4);
	s[0] = (uint8_t)(s[0] + s[3]);
	s[2] = (uint8_t)(s[2] + s[1]);
	s[1] = rol8(s[1], 3);
	s[3] = rol8(s[3], 7);
	s[1] ^= s[2];
	s[3] ^= s[0];
	s[2] = rol8(s[2], 4);
}

static void
ipcrypt_bwd(uint8_t s[4])
{
	s[2] = rol8(s[2], 4);
	s[1] ^= s[2];
	s[3] ^= s[0];
	s[1] = rol8(s[1], 5);
	s[3] = rol8(s[3], 1);
	s[0] = (uint8_t)(s[0] - s[3]);
	s[2] = (uint8_t)(s[2] - s[1]);
	s[0] = rol8(s[0], 4);
	s[1] ^= s[0];
	s[3] ^= s[2];
	s[1] = rol8(s[1], 6);
	s[3] = rol8(s[3], 3);
	s[0] = (uint8_t)(s[0] - s[1]);
	s[2] = (uint8_t)(s[2] - s[3]);
}

static void
xor4(uint8_t s[4], const uint8_t *k)
{
	for (int i = 0; i < 4; i++)
		s[i] ^= k[i];
}

/* ---- AES-128 (IPv6) ----------------------------------------------------------- */

static uint8_t sbox[256], inv_sbox[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static uint8_t
gmul(uint8_t a, uint8_t b)
{
	uint8_t p = 0;

	while (b != 0) {
		if (b & 1)
			p ^= a;
		a = (uint8_t)(a << 1 ^ (a & 0x80 ? 0x1b : 0));
		b >>= 1;
	}
	return p;
}

static void
make_tables(void)
{
	for (int x = 0; x < 256; x++) {
		uint8_t inv = 0, s;

		/* the multiplicative inverse (0 for 0) */
		for (int y = 1; y < 256 && x != 0; y++)
			if (gmul((uint8_t)x, (uint8_t)y) == 1) {
				inv = (uint8_t)y;
				break;
			}
		s = (uint8_t)(inv ^ rol8(inv, 1) ^ rol8(inv, 2) ^ rol8(inv, 3) ^ rol8(inv, 4) ^ 0x63);
		sbox[x] = s;
		inv_sbox[s] = (uint8_t)x;
	}
}

static void
aes_expand(const uint8_t key[16], uint8_t rk[176])
{
	uint8_t rcon = 1;

	memcpy(rk, key, 16);
	for (int i = 16; i < 176; i += 4) {
		uint8_t t[4];

		memcpy(t, rk + i - 4, 4);
		if (i % 16 == 0) {
			uint8_t x = t[0];

			t[0] = (uint8_t)(sbox[t[1]] ^ rcon);
			t[1] = sbox[t[2]];
			t[2] = sbox[t[3]];
			t[3] = sbox[x];
			rcon = gmul(rcon, 2);
		}
		for (int j = 0; j < 4; j++)
			rk[i + j] = rk[i - 16 + j] ^ t[j];
	}
}

static void
add_key(uint8_t s[16], const uint8_t *k)
{
	for (int i = 0; i < 16; i++)
		s[i] ^= k[i];
}

/* The state is column-major: byte r + 4c is row r, column c. */
static void
shift_rows(uint8_t s[16], bool inv)
{
	uint8_t t[16];

	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 4; c++)
			t[r + 4 * c] = inv ? s[r + 4 * ((c + 4 - r) % 4)] : s[r + 4 * ((c + r) % 4)];
	memcpy(s, t, 16);
}

static void
mix_columns(uint8_t s[16], bool inv)
{
	for (int c = 0; c < 4; c++) {
		uint8_t *a = s + 4 * c, b[4];

		for (int r = 0; r < 4; r++) {
			if (inv)
				b[r] = gmul(a[r], 14) ^ gmul(a[(r + 1) % 4], 11) ^
				       gmul(a[(r + 2) % 4], 13) ^ gmul(a[(r + 3) % 4], 9);
			else
				b[r] = gmul(a[r], 2) ^ gmul(a[(r + 1) % 4], 3) ^ a[(r + 2) % 4] ^
				       a[(r + 3) % 4];
		}
		memcpy(a, b, 4);
	}
}

static void
aes_encrypt(const uint8_t key[16], uint8_t s[16])
{
	uint8_t rk[176];

	aes_expand(key, rk);
	add_key(s, rk);
	for (int round = 1; round <= 10; round++) {
		for (int i = 0; i < 16; i++)
			s[i] = sbox[s[i]];
		shift_rows(s, false);
		if (round < 10)
			mix_columns(s, false);
		add_key(s, rk + 16 * round);
	}
}

static void
aes_decrypt(const uint8_t key[16], uint8_t s[16])
{
	uint8_t rk[176];

	aes_expand(key, rk);
	add_key(s, rk + 160);
	for (int round = 9; round >= 0; round--) {
		shift_rows(s, true);
		for (int i = 0; i < 16; i++)
			s[i] = inv_sbox[s[i]];
		add_key(s, rk + 16 * round);
		if (round > 0)
			mix_columns(s, true);
	}
}

void
dlb_ipcipher(const uint8_t key[DLB_IPCIPHER_KEY], uint8_t *addr, size_t len, bool decrypt)
{
	if (len == 4) {
		if (!decrypt) {
			xor4(addr, key);
			for (int i = 1; i < 4; i++) {
				ipcrypt_fwd(addr);
				xor4(addr, key + 4 * i);
			}
		} else {
			xor4(addr, key + 12);
			for (int i = 2; i >= 0; i--) {
				ipcrypt_bwd(addr);
				xor4(addr, key + 4 * i);
			}
		}
		return;
	}
	pthread_once(&tables_once, make_tables);
	if (decrypt)
		aes_decrypt(key, addr);
	else
		aes_encrypt(key, addr);
}
