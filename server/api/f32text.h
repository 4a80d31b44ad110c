/* f32text.h — float32 as the shortest decimal text that reads back to it.
 *
 * Answers carry hundreds of floats per vector; printing each with "%.9g"
 * costs more than the rest of the answer. This writes, without printf, the
 * fewest significant digits that read back to the float both ways clients
 * read JSON numbers: a correct strtof, and a correct strtod then a cast to
 * float (which rounds twice, so a decimal within half a double's ulp of the
 * float's rounding interval's excluded end is avoided); of those, the
 * closest to the float (Schubfach, R. Giulietti, "The Schubfach way to
 * render doubles", 2020, here for binary32). */
#ifndef ATTN_F32TEXT_H
#define ATTN_F32TEXT_H

#include <stddef.h>

/* The longest text f32text_write writes: "-1.2345678e-45" is 14 bytes. */
#define F32TEXT_MAX 16

/* Writes v at out (F32TEXT_MAX bytes of room, no terminating NUL) and
 * returns the length. The text is a JSON number, compact and always read as
 * a float: plain notation ("0.5", "-0.031", "1.0") unless exponent notation
 * ("1e-7", "1.5e20") is shorter; "0.0" and "-0.0" for zeros. NaN and the
 * infinities have no JSON number: they are written "null", as JavaScript's
 * JSON.stringify does, so that the text stays valid JSON whatever the caller
 * passes (the routes refuse non-finite vectors before writing them). */
size_t f32text_write(char *out, float v);

#endif
