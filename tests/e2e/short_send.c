/* short_send.c — an LD_PRELOAD shim for one e2e test (test_catalogue.py,
 * test_early_413_written_in_part_is_never_followed_by_another): the early
 * 413 that http.c writes itself (one send with MSG_DONTWAIT, starting with
 * its status line and "Connection: close") goes out only in part, as it
 * would into a nearly full socket buffer. Every other send is untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

static const char prefix[] = "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n";

ssize_t send(int fd, const void *buf, size_t n, int flags) {
    ssize_t (*real)(int, const void *, size_t, int) =
        (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if ((flags & MSG_DONTWAIT) && n > sizeof prefix - 1 &&
        memcmp(buf, prefix, sizeof prefix - 1) == 0)
        n = sizeof prefix - 1; /* the status line and one header only */
    return real(fd, buf, n, flags);
}
