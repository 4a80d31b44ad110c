# mk/http2.mk — test-only: $(BUILD)/short_send.so, an LD_PRELOAD shim that
# makes the early 413 of http.c go out only in part (tests/e2e/short_send.c),
# for the e2e test that no second answer follows it. Built without the
# sanitizers (the test puts the binary's sanitizer runtime first when it has
# one); never installed or shipped. The e2e tests find it beside the binary.
SHORT_SEND_SO := $(BUILD)/short_send.so

$(SHORT_SEND_SO): tests/e2e/short_send.c
	$(CC) -O2 -g -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

e2e-build: $(SHORT_SEND_SO)
