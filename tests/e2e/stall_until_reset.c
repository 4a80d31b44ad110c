/* stall_until_reset.c — an LD_PRELOAD shim for one e2e test (test_catalogue.py,
 * test_answer_received_in_full_counts_under_its_status): once libmicrohttpd
 * has written an answer whole in one sendmsg, and the answer carries an
 * x-request-id that starts with "stall-until-reset", the I/O thread waits
 * (up to ten seconds) for the client to close or reset the connection
 * before it goes on, as one busy with other connections would. The reset
 * then always comes before libmicrohttpd marks the answer complete, which
 * otherwise happens within microseconds and leaves the reset's path to
 * chance. Every other call is untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

static const char marker[] = "\r\nx-request-id: stall-until-reset";

static int marked_answer(const struct msghdr *msg, ssize_t sent) {
    size_t total = 0;
    for (size_t i = 0; i < msg->msg_iovlen; i++)
        total += msg->msg_iov[i].iov_len;
    if (sent <= 0 || (size_t)sent != total || msg->msg_iovlen == 0)
        return 0;
    const char *head = msg->msg_iov[0].iov_base;
    const size_t n = msg->msg_iov[0].iov_len;
    return n > 9 && memcmp(head, "HTTP/1.1 ", 9) == 0 &&
           memmem(head, n, marker, sizeof marker - 1) != NULL;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    ssize_t (*real)(int, const struct msghdr *, int) =
        (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    ssize_t sent = real(fd, msg, flags);
    if (marked_answer(msg, sent)) {
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        (void)poll(&p, 1, 10000);
    }
    return sent;
}
