/*
 * tee.h - TeeAction's socket, reader thread and figures (rules/tee.c).
 */
#ifndef DNSLB_RULES_TEE_H
#define DNSLB_RULES_TEE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

/* getStats()'s figures, in dnsdist 1.7.3's names (dlb_tee_names) */
enum dlb_tee_stat {
	DLB_TEE_QUERIES,
	DLB_TEE_RESPONSES,
	DLB_TEE_RECV_ERRORS,
	DLB_TEE_SEND_ERRORS,
	DLB_TEE_NOERRORS,
	DLB_TEE_NXDOMAINS,
	DLB_TEE_REFUSEDS,
	DLB_TEE_SERVFAILS,
	DLB_TEE_OTHER_RCODE,
	DLB_TEE_TCP_DROPS,
	DLB_TEE__COUNT
};

extern const char *const dlb_tee_names[DLB_TEE__COUNT];

struct dlb_tee;

/** A UDP socket connected to @ss and its reader thread. @return NULL with @err. */
struct dlb_tee *dlb_tee_new(const struct sockaddr_storage *ss, socklen_t len, char *err,
			    size_t errlen);
/** Send a copy of query @pkt (any thread); over TCP (@tcp) only counted as a drop. */
void dlb_tee_send(struct dlb_tee *t, const uint8_t *pkt, size_t len, bool tcp);
uint64_t dlb_tee_stat(const struct dlb_tee *t, enum dlb_tee_stat s);
/** Stop the reader, close the socket. */
void dlb_tee_free(struct dlb_tee *t);

#endif
