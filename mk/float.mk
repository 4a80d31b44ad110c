# mk/float.mk — float32 text (server/api/f32text.c) beyond the unit tests.
#
#   make float-roundtrip-all   every one of the 2^32 float32 bit patterns through
#                              f32text_write: each reads back (strtof, and strtod then
#                              a cast), no decimal one digit shorter does, a negative's
#                              text is its magnitude's with a '-'; one thread per core,
#                              the time printed (bench/README.md); not part of make test
#   make bench-f32text         ns per float against "%.9g" and "%.17g", and µs per
#                              embedding of a whole answer, jansson tree against the
#                              writer (bench/README.md)

FLOAT_ALL := $(BUILD)/float_roundtrip_all

.PHONY: float-roundtrip-all bench-f32text

$(FLOAT_ALL): $(BUILD)/obj/tests/float/roundtrip_all.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

float-roundtrip-all: $(FLOAT_ALL)
	$(FLOAT_ALL)

bench-f32text: $(BUILD)/bench_f32text
	$(BUILD)/bench_f32text
