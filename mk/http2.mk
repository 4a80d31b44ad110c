# mk/http2.mk — test-only LD_PRELOAD shims: $(BUILD)/short_send.so makes the
# early 413 of http.c go out only in part (tests/e2e/short_send.c), for the
# e2e test that no second answer follows it; $(BUILD)/stall_until_reset.so
# holds the I/O thread after a marked answer until the client resets
# (tests/e2e/stall_until_reset.c), for the test of how such answers count.
# Built without the sanitizers (the tests put the binary's sanitizer runtime
# first when it has one); never installed or shipped. The e2e tests find
# them beside the binary.
SHORT_SEND_SO := $(BUILD)/short_send.so
STALL_SO      := $(BUILD)/stall_until_reset.so

$(SHORT_SEND_SO) $(STALL_SO): $(BUILD)/%.so: tests/e2e/%.c
	$(CC) -O2 -g -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

e2e-build: $(SHORT_SEND_SO) $(STALL_SO)
