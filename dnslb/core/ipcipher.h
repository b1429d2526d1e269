/*
 * ipcipher.h - ipcipher address pseudonymisation (dnsdist's makeIPCipherKey
 * and ComboAddress:ipencrypt/ipdecrypt): IPv4 with ipcrypt, IPv6 with
 * AES-128, a 16-byte key.
 *
 * Thread: any.
 */
#ifndef DNSLB_IPCIPHER_H
#define DNSLB_IPCIPHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLB_IPCIPHER_KEY 16

/** The key of @password (PBKDF2-HMAC-SHA1, salt "ipcipheripcipher", 50,000 rounds). */
void dlb_ipcipher_key(const char *password, size_t len, uint8_t key[DLB_IPCIPHER_KEY]);
/** Encrypt (or decrypt) the address @addr in place: @len 4 (IPv4) or 16 (IPv6). */
void dlb_ipcipher(const uint8_t key[DLB_IPCIPHER_KEY], uint8_t *addr, size_t len, bool decrypt);

#endif
