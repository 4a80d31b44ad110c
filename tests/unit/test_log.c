/* test_log.c — log lines: the JSON shape, text escaping, levels, cutting
 * long values, and whole lines from many threads at once. Lines go to a
 * temporary file through log_set_fd and are read back. */
#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/ops/log.h"

static FILE *sink;

static void open_sink(void) {
    sink = tmpfile();
    cr_assert_not_null(sink);
    log_set_fd(fileno(sink));
    cr_assert_eq(log_configure("debug", "json"), 0);
}

static void close_sink(void) {
    log_set_fd(2);
    fclose(sink);
}

TestSuite(log, .init = open_sink, .fini = close_sink);

/* Everything written so far (caller frees). */
static char *read_sink(void) {
    long n = lseek(fileno(sink), 0, SEEK_END);
    char *buf = calloc((size_t)n + 1, 1);
    cr_assert_eq(pread(fileno(sink), buf, (size_t)n, 0), n);
    return buf;
}

/* The only line written so far, parsed (caller decrefs). */
static json_t *only_json_line(void) {
    char *text = read_sink();
    size_t len = strlen(text);
    cr_assert_gt(len, 0, "nothing was logged");
    cr_assert_eq(text[len - 1], '\n', "a line ends with a newline");
    cr_assert_null(memchr(text, '\n', len - 1), "one line expected, got: %s", text);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    cr_assert_not_null(j, "not JSON (%s): %s", jerr.text, text);
    free(text);
    return j;
}

Test(log, json_line_carries_ts_level_msg_and_typed_fields) {
    json_t *embedded = json_pack("{s:i, s:[s]}", "port", 8080, "list", "x");
    bool flag = true;
    unsigned long long big = 18446744073709551615ULL;
    log_info("request", LOG_KV("request_id", "ab12"), LOG_KV("status", 200),
             LOG_KV("bytes", (size_t)512), LOG_KV("total_ms", 3.25), LOG_KV("ok", flag),
             LOG_STR("none", NULL), LOG_JSON("config", embedded), LOG_DBL("bad", NAN),
             LOG_INT("neg", -7), LOG_KV("huge", big));
    json_decref(embedded);
    json_t *j = only_json_line();
    const char *ts = json_string_value(json_object_get(j, "ts"));
    cr_assert_not_null(ts);
    /* 2024-05-01T12:00:00.123Z */
    cr_assert_eq(strlen(ts), 24, "%s", ts);
    cr_assert_eq(ts[10], 'T');
    cr_assert_eq(ts[19], '.');
    cr_assert_eq(ts[23], 'Z');
    cr_assert_str_eq(json_string_value(json_object_get(j, "level")), "info");
    cr_assert_str_eq(json_string_value(json_object_get(j, "msg")), "request");
    cr_assert_str_eq(json_string_value(json_object_get(j, "request_id")), "ab12");
    cr_assert_eq(json_integer_value(json_object_get(j, "status")), 200);
    cr_assert(json_is_integer(json_object_get(j, "bytes")));
    cr_assert_eq(json_integer_value(json_object_get(j, "bytes")), 512);
    cr_assert_eq(json_real_value(json_object_get(j, "total_ms")), 3.25);
    cr_assert(json_is_true(json_object_get(j, "ok")));
    cr_assert(json_is_null(json_object_get(j, "none")));
    cr_assert(json_is_null(json_object_get(j, "bad")), "NaN is not JSON");
    cr_assert_eq(json_integer_value(json_object_get(j, "neg")), -7);
    cr_assert(json_is_real(json_object_get(j, "huge")), "past INT64_MAX becomes a number");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "config"), "port")), 8080);
    /* Keys keep the order they were given in. */
    const char *expected[] = {"ts", "level", "msg", "request_id", "status", "bytes", "total_ms"};
    void *it = json_object_iter(j);
    for (size_t i = 0; i < sizeof expected / sizeof expected[0];
         i++, it = json_object_iter_next(j, it))
        cr_assert_str_eq(json_object_iter_key(it), expected[i]);
    json_decref(j);
}

Test(log, json_doubles_print_short) {
    log_info("t", LOG_KV("ms", 0.41));
    char *text = read_sink();
    cr_assert_not_null(strstr(text, "\"ms\":0.41}"), "%s", text);
    free(text);
}

Test(log, json_escapes_what_clients_send) {
    log_warn("bad \"input\"\n", LOG_KV("id", "a\"b\\c\nd\te\x01"), LOG_KV("utf8", "é✓"),
             LOG_KV("broken", "ok\xff\xfe!"));
    json_t *j = only_json_line();
    cr_assert_str_eq(json_string_value(json_object_get(j, "level")), "warn");
    cr_assert_str_eq(json_string_value(json_object_get(j, "msg")), "bad \"input\"\n");
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "a\"b\\c\nd\te\x01");
    cr_assert_str_eq(json_string_value(json_object_get(j, "utf8")), "é✓");
    /* Invalid UTF-8 cannot be JSON; the line survives with '?' in its place. */
    cr_assert_str_eq(json_string_value(json_object_get(j, "broken")), "ok?"
                                                                      "?!");
    json_decref(j);
}

Test(log, long_values_are_cut) {
    char *big = malloc(LOG_VALUE_MAX * 3);
    memset(big, 'x', LOG_VALUE_MAX * 3 - 1);
    big[LOG_VALUE_MAX * 3 - 1] = '\0';
    log_error("big", LOG_KV("v", big));
    free(big);
    json_t *j = only_json_line();
    const char *v = json_string_value(json_object_get(j, "v"));
    cr_assert_eq(strlen(v), LOG_VALUE_MAX + 3);
    cr_assert_str_eq(v + LOG_VALUE_MAX, "...");
    json_decref(j);
}

Test(log, cutting_never_splits_a_utf8_character) {
    /* One ASCII byte then two-byte characters: the cut falls mid-character. */
    size_t n = LOG_VALUE_MAX + 10;
    char *s = malloc(n + 1);
    s[0] = 'a';
    for (size_t i = 1; i + 1 < n; i += 2)
        memcpy(s + i, "\xc3\xa9", 2);
    s[n - 1] = '\0';
    log_info("u", LOG_KV("v", s));
    free(s);
    json_t *j = only_json_line();
    const char *v = json_string_value(json_object_get(j, "v"));
    cr_assert_not_null(v, "the cut produced invalid UTF-8");
    cr_assert_eq(strlen(v), LOG_VALUE_MAX - 1 + 3);
    cr_assert_null(strchr(v, '?'));
    json_decref(j);
}

Test(log, levels_filter_and_skip_argument_evaluation) {
    cr_assert_eq(log_configure("warn", "json"), 0);
    int evaluated = 0;
    log_debug("no", LOG_KV("n", ++evaluated));
    log_info("no", LOG_KV("n", ++evaluated));
    cr_assert_eq(evaluated, 0, "arguments of a disabled line were evaluated");
    cr_assert_not(log_enabled(LOG_INFO));
    cr_assert(log_enabled(LOG_WARN));
    log_warn("yes");
    log_error("yes too");
    char *text = read_sink();
    int lines = 0;
    for (char *p = text; (p = strchr(p, '\n')); p++)
        lines++;
    cr_assert_eq(lines, 2, "%s", text);
    cr_assert_null(strstr(text, "\"no\""));
    free(text);
}

Test(log, configure_refuses_unknown_names_and_changes_nothing) {
    cr_assert_eq(log_configure("loud", "json"), -1);
    cr_assert_eq(log_configure("info", "xml"), -1);
    cr_assert_eq(log_configure(NULL, "text"), -1);
    cr_assert(log_enabled(LOG_DEBUG), "the level set before must stay");
    log_info("still json");
    json_decref(only_json_line());
}

Test(log, text_line_is_readable_and_escaped) {
    log_set_format(LOG_TEXT);
    log_info("request done", LOG_KV("route", "/v1/attention"), LOG_KV("status", 200),
             LOG_KV("id", "x\ny z"), LOG_KV("q", "say \"hi\""), LOG_KV("empty", ""),
             LOG_KV("ms", 1.5), LOG_KV("ok", (bool)false), LOG_STR("nil", NULL));
    char *text = read_sink();
    size_t len = strlen(text);
    cr_assert_eq(text[len - 1], '\n');
    cr_assert_null(memchr(text, '\n', len - 1), "a value broke the line: %s", text);
    cr_assert_eq(text[23], 'Z');
    cr_assert_not_null(strstr(text, "Z INFO  request done route=/v1/attention status=200 "
                                    "id=\"x\\ny z\" q=\"say \\\"hi\\\"\" empty=\"\" ms=1.5 "
                                    "ok=false nil=null\n"),
                       "%s", text);
    free(text);
}

Test(log, text_embeds_json_compactly) {
    log_set_format(LOG_TEXT);
    json_t *j = json_pack("{s:i}", "a", 1);
    log_debug("cfg", LOG_JSON("config", j));
    json_decref(j);
    char *text = read_sink();
    cr_assert_not_null(strstr(text, "DEBUG cfg config={\"a\":1}\n"), "%s", text);
    free(text);
}

Test(log, writev_takes_an_array) {
    log_field f[40];
    char keys[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        f[i] = LOG_INT(keys[i], i);
    }
    log_writev(LOG_INFO, "many", f, 40);
    json_t *j = only_json_line();
    cr_assert_eq(json_object_size(j), 43);
    cr_assert_eq(json_integer_value(json_object_get(j, "k39")), 39);
    json_decref(j);
}

#define THREADS 8
#define LINES   500

static void *writer(void *arg) {
    long id = (long)(intptr_t)arg;
    /* Long enough lines that a torn write would show. */
    char pad[600];
    memset(pad, 'a' + (int)id, sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < LINES; i++)
        log_info("line", LOG_KV("thread", id), LOG_KV("i", i), LOG_KV("pad", pad));
    return NULL;
}

Test(log, lines_from_many_threads_never_interleave) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *text = read_sink();
    int count[THREADS] = {0}, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        cr_assert_not_null(j, "torn line %d: %.80s", lines, line);
        long id = (long)json_integer_value(json_object_get(j, "thread"));
        cr_assert_eq(json_integer_value(json_object_get(j, "i")), count[id]++,
                     "lines of one thread out of order");
        const char *pad = json_string_value(json_object_get(j, "pad"));
        cr_assert_eq(strspn(pad, (char[]){(char)('a' + id), 0}), 599);
        json_decref(j);
    }
    cr_assert_eq(lines, THREADS * LINES);
    free(text);
}
