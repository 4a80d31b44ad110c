/* test_config.c — the settings table: precedence, every error path, API
 * keys, --print-config round trip and SIGHUP reload.
 *
 * Each test runs in its own process (Criterion forks), inside a fresh
 * temporary directory with no ATTNSERVE_* variables, so the repository's
 * config/attnserve.json and the caller's environment never leak in. */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/config.h"

extern char **environ;

static char tmpdir[64];
static char repo_dir[1024]; /* where the tests were started */

static void clear_env(void) {
    for (;;) {
        char **e = environ;
        while (*e && strncmp(*e, "ATTNSERVE_", 10) != 0)
            e++;
        if (!*e)
            return;
        char name[256];
        size_t n = strcspn(*e, "=");
        snprintf(name, sizeof name, "%.*s", (int)n, *e);
        unsetenv(name);
    }
}

static void enter_tmpdir(void) {
    clear_env();
    cr_assert_not_null(getcwd(repo_dir, sizeof repo_dir));
    snprintf(tmpdir, sizeof tmpdir, "/tmp/attnserve-config-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    cr_assert_eq(chdir(tmpdir), 0);
}

static void leave_tmpdir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(config, .init = enter_tmpdir, .fini = leave_tmpdir);

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Loads with the given flags (NULL-terminated); returns config_load's rc. */
static int load(config *cfg, config_action *action, char *err, size_t err_len, ...) {
    char *argv[32] = {"attnserve"};
    int argc = 1;
    va_list ap;
    va_start(ap, err_len);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    return config_load(cfg, argc, argv, action, err, err_len);
}

#define LOAD_OK(cfg, ...)                                                                          \
    do {                                                                                           \
        config_action action_;                                                                     \
        char err_[512] = "";                                                                       \
        int rc_ = load(cfg, &action_, err_, sizeof err_, __VA_ARGS__);                             \
        cr_assert_eq(rc_, 0, "config_load failed: %s", err_);                                      \
        cr_assert_eq(action_, CONFIG_RUN);                                                         \
    } while (0)

/* Expects a failure whose message contains every given fragment. */
static void expect_error(const char *const *fragments, ...) {
    char *argv[32] = {"attnserve"};
    int argc = 1;
    va_list ap;
    va_start(ap, fragments);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    config cfg;
    config_action action;
    char err[512] = "";
    cr_assert_eq(config_load(&cfg, argc, argv, &action, err, sizeof err), -1, "expected an error");
    for (const char *const *f = fragments; *f; f++)
        cr_assert_not_null(strstr(err, *f), "message \"%s\" lacks \"%s\"", err, *f);
    /* On error nothing is left to free. */
    cr_assert_null(cfg.host);
    cr_assert_null(cfg.argv);
}
/* The message fragments an expect_error call looks for. */
#define FRAGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- defaults and the config file ------------------------------------------------ */

Test(config, defaults_without_a_config_file) {
    config c;
    LOAD_OK(&c, NULL);
    cr_assert_str_eq(c.host, "127.0.0.1");
    cr_assert_eq(c.port, 8080);
    cr_assert_str_eq(c.backend, "auto");
    cr_assert_eq(c.threads, 0);
    cr_assert_eq(c.max_batch_tokens, 16384);
    cr_assert_eq(c.max_batch_requests, 64);
    cr_assert_eq(c.max_wait_us, 0);
    cr_assert_eq(c.pool_spin_us, 50);
    cr_assert_eq(c.max_queue, 1024);
    cr_assert_str_eq(c.log_level, "info");
    cr_assert_str_eq(c.log_format, "text");
    cr_assert_str_eq(c.model, "models/all-MiniLM-L6-v2");
    cr_assert_str_eq(c.fallback_backends, "fused,naive");
    cr_assert(c.truncate);
    cr_assert_not(c.metrics_require_key);
    cr_assert_float_eq(c.verify_sample_rate, 0.001, 1e-15);
    cr_assert_str_eq(c.api_key_file, "");
    cr_assert_eq(c.n_api_keys, 0);
    /* The default path is optional: absent, nothing was read. */
    cr_assert_null(c.config_path);
    cr_assert_not(c.config_explicit);
    config_free(&c);
    config_free(&c); /* twice is harmless */
}

Test(config, default_file_is_read_when_present) {
    cr_assert_eq(system("mkdir -p config"), 0);
    write_file("config/attnserve.json", "{\"port\": 9000}");
    config c;
    LOAD_OK(&c, NULL);
    cr_assert_eq(c.port, 9000);
    cr_assert_str_eq(c.config_path, "config/attnserve.json");
    config_free(&c);
}

Test(config, file_sets_every_type) {
    write_file("a.json", "{\"host\": \"0.0.0.0\", \"port\": 1, \"backend\": \"naive\","
                         " \"truncate\": false, \"verify_sample_rate\": 1,"
                         " \"fallback_backends\": \"\", \"log_format\": \"json\"}");
    config c;
    LOAD_OK(&c, "--config", "a.json", NULL);
    cr_assert_str_eq(c.host, "0.0.0.0");
    cr_assert_eq(c.port, 1);
    cr_assert_str_eq(c.backend, "naive");
    cr_assert_not(c.truncate);
    cr_assert_float_eq(c.verify_sample_rate, 1.0, 0);
    cr_assert_str_eq(c.fallback_backends, "");
    cr_assert_str_eq(c.log_format, "json");
    cr_assert_str_eq(c.config_path, "a.json");
    cr_assert(c.config_explicit);
    config_free(&c);
}

Test(config, explicit_config_file_must_exist) {
    expect_error(FRAGS("missing.json", "given by --config", "No such file"), "--config",
                 "missing.json", NULL);
}

Test(config, config_file_from_environment_must_exist) {
    setenv("ATTNSERVE_CONFIG", "gone.json", 1);
    expect_error(FRAGS("gone.json", "given by $ATTNSERVE_CONFIG"), NULL);
}

Test(config, config_file_from_environment_is_read) {
    write_file("e.json", "{\"max_queue\": 7}");
    setenv("ATTNSERVE_CONFIG", "e.json", 1);
    config c;
    LOAD_OK(&c, NULL);
    cr_assert_eq(c.max_queue, 7);
    config_free(&c);
}

Test(config, config_flag_without_path) {
    expect_error(FRAGS("--config needs a value"), "--config", NULL);
}

Test(config, config_file_that_is_a_directory) {
    cr_assert_eq(system("mkdir d"), 0);
    expect_error(FRAGS("is a directory"), "--config=d", NULL);
}

Test(config, unknown_key_in_file) {
    write_file("u.json", "{\"prot\": 80}");
    expect_error(FRAGS("config file u.json", "unknown setting \"prot\"", "did you mean port?"),
                 "--config=u.json", NULL);
}

Test(config, unknown_key_without_near_miss) {
    write_file("u.json", "{\"frobnicate\": 1}");
    config c;
    config_action a;
    char err[512];
    cr_assert_eq(load(&c, &a, err, sizeof err, "--config=u.json", NULL), -1);
    cr_assert_not_null(strstr(err, "unknown setting \"frobnicate\""));
    cr_assert_null(strstr(err, "did you mean"));
}

Test(config, wrong_json_types) {
    static const char *const bad[][2] = {
        {"{\"port\": \"8080\"}", "not a JSON integer"},
        {"{\"port\": 8080.5}", "not a JSON integer"},
        {"{\"port\": null}", "not a JSON integer"},
        {"{\"truncate\": 1}", "not a JSON boolean"},
        {"{\"verify_sample_rate\": \"0.5\"}", "not a JSON number"},
        {"{\"backend\": 1}", "not a JSON string"},
        {"{\"model\": [\"m\"]}", "not a JSON string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("t.json", bad[i][0]);
        config c;
        config_action a;
        char err[512];
        cr_assert_eq(load(&c, &a, err, sizeof err, "--config=t.json", NULL), -1, "%s", bad[i][0]);
        cr_assert_not_null(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
        cr_assert_not_null(strstr(err, "config file t.json"), "%s", err);
        cr_assert_not_null(strstr(err, "allowed:"), "%s", err);
    }
}

Test(config, out_of_range_in_file) {
    write_file("r.json", "{\"port\": 0}");
    expect_error(FRAGS("\"port\"", "0 from config file r.json is out of range", "1..65535"),
                 "--config=r.json", NULL);
}

Test(config, out_of_range_high_in_file) {
    write_file("r.json", "{\"max_batch_tokens\": 1048577}");
    expect_error(FRAGS("max_batch_tokens", "1048577", "out of range", "1..1048576"),
                 "--config=r.json", NULL);
}

Test(config, bad_enum_in_file) {
    write_file("b.json", "{\"backend\": \"cuda\"}");
    expect_error(FRAGS("\"backend\"", "\"cuda\"", "one of naive, fused, bf16, auto"),
                 "--config=b.json", NULL);
}

Test(config, malformed_json) {
    write_file("m.json", "{\n  \"port\": 8080,\n}\n");
    expect_error(FRAGS("m.json:3:", "malformed JSON"), "--config=m.json", NULL);
}

Test(config, empty_file_is_malformed) {
    write_file("m.json", "");
    expect_error(FRAGS("m.json", "malformed JSON"), "--config=m.json", NULL);
}

Test(config, top_level_must_be_an_object) {
    write_file("a.json", "[1, 2]");
    expect_error(FRAGS("must hold one JSON object"), "--config=a.json", NULL);
}

Test(config, duplicate_keys_are_refused) {
    write_file("d.json", "{\"port\": 1, \"port\": 2}");
    expect_error(FRAGS("d.json", "duplicate"), "--config=d.json", NULL);
}

Test(config, api_key_in_file_is_refused) {
    write_file("k.json", "{\"api_key\": \"hunter2hunter2\"}");
    config c;
    config_action a;
    char err[512];
    cr_assert_eq(load(&c, &a, err, sizeof err, "--config=k.json", NULL), -1);
    cr_assert_not_null(strstr(err, "api_key_file"), "%s", err);
    cr_assert_null(strstr(err, "hunter2"), "the key leaked into: %s", err);
}

/* ---- environment ----------------------------------------------------------------- */

Test(config, environment_parsing) {
    setenv("ATTNSERVE_PORT", "9001", 1);
    setenv("ATTNSERVE_TRUNCATE", "off", 1);
    setenv("ATTNSERVE_METRICS_REQUIRE_KEY", "YES", 1);
    setenv("ATTNSERVE_VERIFY_SAMPLE_RATE", "0.25", 1);
    setenv("ATTNSERVE_BACKEND", "fused", 1);
    setenv("ATTNSERVE_MODEL", "/models/x", 1);
    setenv("ATTNSERVE_THREADS", "+4", 1);
    /* Kubernetes service links for a service named attnserve: ignored. */
    setenv("ATTNSERVE_SERVICE_HOST", "10.0.0.1", 1);
    setenv("ATTNSERVE_PORT_8080_TCP", "tcp://10.0.0.1:8080", 1);
    config c;
    LOAD_OK(&c, NULL);
    cr_assert_eq(c.port, 9001);
    cr_assert_not(c.truncate);
    cr_assert(c.metrics_require_key);
    cr_assert_float_eq(c.verify_sample_rate, 0.25, 0);
    cr_assert_str_eq(c.backend, "fused");
    cr_assert_str_eq(c.model, "/models/x");
    cr_assert_eq(c.threads, 4);
    config_free(&c);
}

Test(config, environment_errors_name_the_variable) {
    static const char *const bad[][3] = {
        {"ATTNSERVE_PORT", "80x", "not an integer"},
        {"ATTNSERVE_PORT", "", "not an integer"},
        {"ATTNSERVE_PORT", " 80", "not an integer"},
        {"ATTNSERVE_PORT", "99999999999999999999", "out of range"},
        {"ATTNSERVE_MAX_QUEUE", "0", "out of range"},
        {"ATTNSERVE_TRUNCATE", "maybe", "not a boolean"},
        {"ATTNSERVE_VERIFY_SAMPLE_RATE", "nan", "not a finite number"},
        {"ATTNSERVE_VERIFY_SAMPLE_RATE", "-0.5", "out of range"},
        {"ATTNSERVE_LOG_LEVEL", "INFO", "not an allowed value"},
        {"ATTNSERVE_HOST", "", "is empty"},
        {"ATTNSERVE_MODEL", "a\nb", "control character"},
        {"ATTNSERVE_MODEL", "caf\xe9", "not valid UTF-8"}, /* tests/fuzz/config found it */
        {"ATTNSERVE_FALLBACK_BACKENDS", "fused, naive", "unknown backend"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_env();
        setenv(bad[i][0], bad[i][1], 1);
        config c;
        config_action a;
        char err[512];
        cr_assert_eq(load(&c, &a, err, sizeof err, NULL), -1, "%s=%s", bad[i][0], bad[i][1]);
        cr_assert_not_null(strstr(err, bad[i][2]), "%s=%s: %s", bad[i][0], bad[i][1], err);
        char var[96];
        snprintf(var, sizeof var, "environment variable %s", bad[i][0]);
        cr_assert_not_null(strstr(err, var), "%s", err);
    }
}

/* ---- flags ---------------------------------------------------------------------- */

Test(config, flag_forms) {
    config c;
    LOAD_OK(&c, "--port=81", "--max-queue", "5", "--truncate", "--metrics_require_key",
            "--log_level", "debug", "--backend=naive", "--host", "::1", NULL);
    cr_assert_eq(c.port, 81);
    cr_assert_eq(c.max_queue, 5);
    cr_assert(c.truncate);
    cr_assert(c.metrics_require_key);
    cr_assert_str_eq(c.log_level, "debug");
    cr_assert_str_eq(c.backend, "naive");
    cr_assert_str_eq(c.host, "::1");
    config_free(&c);
}

Test(config, bare_bool_flag_takes_a_following_bool_word) {
    config c;
    LOAD_OK(&c, "--truncate", "false", "--metrics-require-key", "--port=82", NULL);
    cr_assert_not(c.truncate);
    cr_assert(c.metrics_require_key);
    cr_assert_eq(c.port, 82);
    config_free(&c);
}

Test(config, unknown_flag_with_suggestion) {
    expect_error(FRAGS("unknown flag --max_queu", "did you mean --max_queue?"), "--max-queu=3",
                 NULL);
}

/* A setting that no longer exists says what took its place, from a flag or
 * from a file. */
Test(config, retired_setting_names_its_replacement) {
    expect_error(FRAGS("unknown flag --tokenize_offload_bytes", "removed", "codec_workers"),
                 "--tokenize_offload_bytes=0", NULL);
    write_file("r.json", "{\"tokenize_offload_bytes\": 0}");
    expect_error(FRAGS("unknown setting \"tokenize_offload_bytes\"", "codec_workers"),
                 "--config=r.json", NULL);
}

Test(config, positional_argument_is_refused) {
    expect_error(FRAGS("unexpected argument \"serve\""), "serve", NULL);
}

Test(config, single_dash_flag_is_refused) {
    expect_error(FRAGS("unexpected argument \"-p\""), "-p", "80", NULL);
}

Test(config, flag_missing_its_value) {
    expect_error(FRAGS("--port needs a value"), "--port", NULL);
}

Test(config, flag_value_must_not_be_another_flag) {
    expect_error(FRAGS("--host needs a value"), "--host", "--port=1", NULL);
}

Test(config, flag_errors_name_the_flag) {
    expect_error(FRAGS("\"port\"", "\"65536\" from flag --port is out of range", "1..65535"),
                 "--port=65536", NULL);
    expect_error(
        FRAGS("\"backend\"", "\"gpu\" from flag --backend", "one of naive, fused, bf16, auto"),
        "--backend", "gpu", NULL);
    expect_error(FRAGS("from flag --max_wait_us is out of range"), "--max-wait-us=-1", NULL);
    expect_error(FRAGS("names \"naive\" twice"), "--fallback_backends=naive,fused,naive", NULL);
    expect_error(FRAGS("ends with a comma"), "--fallback_backends=naive,", NULL);
}

Test(config, api_key_flags_are_refused_without_echoing_the_key) {
    static const char *const forms[][2] = {
        {"--api_key=s3cretvalue", NULL},
        {"--api-key", "s3cretvalue"},
        {"--api_keys=s3cretvalue", NULL},
    };
    for (size_t i = 0; i < 3; i++) {
        config c;
        config_action a;
        char err[512];
        cr_assert_eq(load(&c, &a, err, sizeof err, forms[i][0], forms[i][1], NULL), -1);
        cr_assert_not_null(strstr(err, "never from the command line"), "%s", err);
        cr_assert_not_null(strstr(err, "ATTNSERVE_API_KEY"), "%s", err);
        cr_assert_null(strstr(err, "s3cret"), "the key leaked into: %s", err);
    }
}

/* ---- precedence ------------------------------------------------------------------ */

Test(config, precedence_default_file_env_flag) {
    write_file("p.json", "{\"port\": 1001, \"max_queue\": 11, \"threads\": 3, "
                         "\"log_level\": \"warn\"}");
    setenv("ATTNSERVE_MAX_QUEUE", "22", 1);
    setenv("ATTNSERVE_THREADS", "5", 1);
    config c;
    LOAD_OK(&c, "--config=p.json", "--threads=7", "--threads=8", NULL);
    cr_assert_eq(c.max_batch_tokens, 16384); /* default */
    cr_assert_eq(c.port, 1001);              /* file over default */
    cr_assert_str_eq(c.log_level, "warn");   /* file over default */
    cr_assert_eq(c.max_queue, 22);           /* env over file */
    cr_assert_eq(c.threads, 8);              /* flag over env; last flag wins */
    config_free(&c);
}

Test(config, flags_are_applied_after_the_file_whatever_their_order) {
    write_file("o.json", "{\"port\": 1001}");
    config c;
    LOAD_OK(&c, "--port=2002", "--config", "o.json", NULL);
    cr_assert_eq(c.port, 2002);
    config_free(&c);
}

Test(config, flag_overrides_an_invalid_environment_value_still_fails) {
    /* Every source is validated, even one a later source overrides. */
    setenv("ATTNSERVE_PORT", "http", 1);
    expect_error(FRAGS("environment variable ATTNSERVE_PORT"), "--port=80", NULL);
}

/* ---- actions, help and printing ------------------------------------------------ */

Test(config, help_and_version_win_over_bad_flags) {
    config c;
    config_action a;
    char err[256];
    cr_assert_eq(load(&c, &a, err, sizeof err, "--bogus", "--help", NULL), 0);
    cr_assert_eq(a, CONFIG_HELP);
    config_free(&c);
    cr_assert_eq(load(&c, &a, err, sizeof err, "-h", NULL), 0);
    cr_assert_eq(a, CONFIG_HELP);
    config_free(&c);
    cr_assert_eq(load(&c, &a, err, sizeof err, "--version", "--port=0", NULL), 0);
    cr_assert_eq(a, CONFIG_VERSION);
    config_free(&c);
}

Test(config, print_config_action_loads_everything) {
    config c;
    config_action a;
    char err[256];
    cr_assert_eq(load(&c, &a, err, sizeof err, "--print-config", "--port=99", NULL), 0);
    cr_assert_eq(a, CONFIG_PRINT);
    cr_assert_eq(c.port, 99);
    config_free(&c);
    cr_assert_eq(load(&c, &a, err, sizeof err, "--print-config", "--port=0", NULL), -1);
}

Test(config, help_lists_every_setting) {
    config c;
    LOAD_OK(&c, NULL);
    json_t *all = config_to_json(&c);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    config_print_help(out, "attnserve");
    fclose(out);
    const char *key;
    json_t *v;
    json_object_foreach(all, key, v) {
        char flag[96];
        snprintf(flag, sizeof flag, "--%s=", key);
        cr_assert_not_null(strstr(text, flag), "--help lacks %s", flag);
    }
    cr_assert_not_null(strstr(text, "env ATTNSERVE_MAX_BATCH_TOKENS"));
    cr_assert_not_null(strstr(text, "default 16384; allowed: an integer in 1..1048576"));
    cr_assert_not_null(strstr(text, "one of naive, fused, bf16, auto"));
    cr_assert_not_null(strstr(text, "reloadable on SIGHUP"));
    cr_assert_not_null(strstr(text, "needs a restart"));
    cr_assert_not_null(strstr(text, "default 0.001"));
    free(text);
    json_decref(all);
    config_free(&c);
}

Test(config, print_config_round_trips) {
    config a, b;
    setenv("ATTNSERVE_API_KEY", "round-trip-key", 1);
    LOAD_OK(&a, "--host=h \"q\" \\ ü", "--verify_sample_rate=0.1", "--backend=fused",
            "--truncate=false", "--max_wait_us=0", "--fallback_backends=", "--port=65535",
            "--max_body_bytes=1073741824", "--log_format=json", NULL);
    FILE *f = fopen("printed.json", "w");
    cr_assert_eq(config_print(&a, f), 0);
    fclose(f);
    LOAD_OK(&b, "--config=printed.json", NULL);
    json_t *ja = config_to_json(&a), *jb = config_to_json(&b);
    cr_assert(json_equal(ja, jb));
    cr_assert_str_eq(b.host, "h \"q\" \\ ü");
    cr_assert_eq(b.verify_sample_rate, 0.1);
    /* Every setting in the table. */
    cr_assert_eq(json_object_size(ja), 41);
    /* Keys are never printed. */
    char *dump = json_dumps(ja, 0);
    cr_assert_null(strstr(dump, "round-trip-key"));
    free(dump);
    json_decref(ja);
    json_decref(jb);
    config_free(&a);
    config_free(&b);
}

Test(config, shipped_config_file_matches_the_defaults) {
    /* config/attnserve.json documents every setting at its default. */
    char path[sizeof repo_dir + 32];
    snprintf(path, sizeof path, "%s/config/attnserve.json", repo_dir);
    if (access(path, R_OK) != 0)
        cr_skip_test("run from the repository root to check %s", path);
    config shipped, defaults;
    LOAD_OK(&shipped, "--config", path, NULL);
    LOAD_OK(&defaults, NULL);
    json_t *a = config_to_json(&shipped), *b = config_to_json(&defaults);
    cr_assert(json_equal(a, b), "config/attnserve.json differs from the built-in defaults");
    json_decref(a);
    json_decref(b);
    config_free(&shipped);
    config_free(&defaults);
}

/* ---- API keys ---------------------------------------------------------------------- */

Test(config, api_keys_from_file_and_environment) {
    write_file("keys", "# team A\n  key-one  \n\nkey-two\r\n#key-three\n");
    setenv("ATTNSERVE_API_KEY", "env-key\n", 1);
    config c;
    LOAD_OK(&c, "--api_key_file=keys", NULL);
    cr_assert_eq(c.n_api_keys, 3);
    cr_assert_str_eq(c.api_keys[0], "key-one");
    cr_assert_str_eq(c.api_keys[1], "key-two");
    cr_assert_str_eq(c.api_keys[2], "env-key");
    config_free(&c);
}

Test(config, api_key_errors_never_show_the_key) {
    write_file("empty", "# nothing\n\n");
    expect_error(FRAGS("holds no keys"), "--api_key_file=empty", NULL);
    expect_error(FRAGS("api_key_file nope", "No such file"), "--api_key_file=nope", NULL);
    write_file("spaced", "good-key\nbad key-xyz\n");
    config c;
    config_action a;
    char err[512];
    cr_assert_eq(load(&c, &a, err, sizeof err, "--api_key_file=spaced", NULL), -1);
    cr_assert_not_null(strstr(err, "line 2"), "%s", err);
    cr_assert_null(strstr(err, "xyz"), "the key leaked into: %s", err);
    setenv("ATTNSERVE_API_KEY", "  ", 1);
    expect_error(FRAGS("ATTNSERVE_API_KEY", "empty"), NULL);
}

/* ---- reload ---------------------------------------------------------------------- */

typedef struct change_log {
    char lines[16][256];
    int n;
} change_log;

static void record(void *ctx, const char *name, const char *was, const char *now, bool applied) {
    change_log *log = ctx;
    cr_assert_lt(log->n, 16);
    snprintf(log->lines[log->n++], 256, "%s %s->%s %s", name, was, now,
             applied ? "applied" : "kept");
}

static bool has_change(const change_log *log, const char *line) {
    for (int i = 0; i < log->n; i++)
        if (strcmp(log->lines[i], line) == 0)
            return true;
    return false;
}

Test(config, reload_applies_reloadable_and_keeps_the_rest) {
    write_file("r.json", "{\"backend\": \"naive\", \"port\": 8080, \"max_wait_us\": 100,"
                         " \"log_level\": \"warn\"}");
    config cur, next;
    LOAD_OK(&cur, "--config=r.json", "--log_level=debug", NULL);
    write_file("r.json", "{\"backend\": \"fused\", \"port\": 9090, \"max_wait_us\": 200,"
                         " \"log_level\": \"error\", \"verify_sample_rate\": 0.5}");
    change_log log = {0};
    char err[512];
    cr_assert_eq(config_reload(&cur, &next, record, &log, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(next.backend, "fused");
    cr_assert_eq(next.max_wait_us, 200);
    cr_assert_eq(next.port, 8080, "a restart-only setting must keep its running value");
    cr_assert_str_eq(next.log_level, "debug", "the original flag still wins");
    cr_assert_eq(log.n, 4);
    cr_assert(has_change(&log, "backend \"naive\"->\"fused\" applied"));
    cr_assert(has_change(&log, "port 8080->9090 kept"));
    cr_assert(has_change(&log, "max_wait_us 100->200 applied"));
    cr_assert(has_change(&log, "verify_sample_rate 0.001->0.5 applied"));
    cr_assert_str_eq(cur.backend, "naive", "cur is left as it was");
    config_free(&cur);
    config_free(&next);
}

Test(config, reload_with_no_change_reports_nothing) {
    config cur, next;
    LOAD_OK(&cur, "--port=1234", NULL);
    change_log log = {0};
    char err[256];
    cr_assert_eq(config_reload(&cur, &next, record, &log, err, sizeof err), 0);
    cr_assert_eq(log.n, 0);
    cr_assert_eq(next.port, 1234);
    config_free(&next);
    cr_assert_eq(config_reload(&cur, &next, NULL, NULL, err, sizeof err), 0,
                 "a NULL callback is allowed");
    config_free(&next);
    config_free(&cur);
}

Test(config, reload_with_a_broken_file_keeps_the_old_config) {
    write_file("r.json", "{\"backend\": \"naive\"}");
    config cur, next;
    LOAD_OK(&cur, "--config=r.json", NULL);
    write_file("r.json", "{\"backend\": \"naive\", \"max_queue\": -1}");
    change_log log = {0};
    char err[512];
    cr_assert_eq(config_reload(&cur, &next, record, &log, err, sizeof err), -1);
    cr_assert_not_null(strstr(err, "max_queue"), "%s", err);
    cr_assert_null(next.host, "next is zeroed on failure");
    cr_assert_eq(log.n, 0);
    cr_assert_str_eq(cur.backend, "naive");
    config_free(&cur);
}

Test(config, reload_rereads_api_keys) {
    write_file("keys", "first\n");
    config cur, next;
    LOAD_OK(&cur, "--api_key_file=keys", NULL);
    write_file("keys", "second\nthird\n");
    change_log log = {0};
    char err[256];
    cr_assert_eq(config_reload(&cur, &next, record, &log, err, sizeof err), 0, "%s", err);
    cr_assert_eq(next.n_api_keys, 2);
    cr_assert_str_eq(next.api_keys[0], "second");
    cr_assert(has_change(&log, "api_keys 1 keys->2 keys applied"));
    for (int i = 0; i < log.n; i++)
        cr_assert_null(strstr(log.lines[i], "second"), "a key reached the report");
    config_free(&cur);
    config_free(&next);
}

Test(config, reload_picks_up_a_default_file_that_appeared) {
    config cur, next;
    LOAD_OK(&cur, NULL);
    cr_assert_eq(system("mkdir config"), 0);
    write_file("config/attnserve.json", "{\"max_inputs_per_request\": 8, \"threads\": 2}");
    change_log log = {0};
    char err[256];
    cr_assert_eq(config_reload(&cur, &next, record, &log, err, sizeof err), 0, "%s", err);
    cr_assert_eq(next.max_inputs_per_request, 8);
    cr_assert_eq(next.threads, 0);
    cr_assert(has_change(&log, "max_inputs_per_request 2048->8 applied"));
    cr_assert(has_change(&log, "threads 0->2 kept"));
    config_free(&cur);
    config_free(&next);
}

/* ---- several models ------------------------------------------------------------------ */

/* The tests run in a fresh directory: two model directories to name. */
static void model_dirs(void) {
    cr_assert_eq(system("mkdir -p m/a m/b"), 0);
}

Test(config, models_from_the_file_as_an_array_of_objects) {
    model_dirs();
    write_file("a.json",
               "{\"models\": [{\"name\": \"emb\", \"path\": \"m/a\", \"aliases\": "
               "[\"x\", \"y\"]}, {\"name\": \"rr\", \"path\": \"m/b\", "
               "\"max_seq_length\": 128, \"truncate\": false, \"precision\": \"bf16\"}]}");
    config c;
    LOAD_OK(&c, "--config", "a.json", NULL);
    config_model m[CONFIG_MAX_MODELS];
    size_t n = 0;
    char err[256];
    cr_assert_eq(config_models_parse(c.models, m, CONFIG_MAX_MODELS, &n, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(m[0].name, "emb");
    cr_assert_str_eq(m[0].path, "m/a");
    cr_assert_str_eq(m[0].aliases, "x,y");
    cr_assert_eq(m[0].max_seq_length, -1);
    cr_assert_eq(m[0].truncate, -1);
    cr_assert_str_eq(m[0].precision, "");
    cr_assert_str_eq(m[1].name, "rr");
    cr_assert_eq(m[1].max_seq_length, 128);
    cr_assert_eq(m[1].truncate, 0);
    cr_assert_str_eq(m[1].precision, "bf16");
    /* Printed back as the file's array, which reads back the same. */
    json_t *j = config_to_json(&c);
    json_t *models = json_object_get(j, "models");
    cr_assert(json_is_array(models) && json_array_size(models) == 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(models, 0), "name")), "emb");
    cr_assert_eq(json_array_size(json_object_get(json_array_get(models, 0), "aliases")), 2);
    json_decref(j);
    config_free(&c);
}

Test(config, models_from_a_flag_in_the_compact_form) {
    model_dirs();
    config c;
    LOAD_OK(&c, "--models=emb=m/a;aliases=x|y,rr=m/b;max_seq_length=64", NULL);
    config_model m[CONFIG_MAX_MODELS];
    size_t n = 0;
    char err[256];
    cr_assert_eq(config_models_parse(c.models, m, CONFIG_MAX_MODELS, &n, err, sizeof err), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(m[0].aliases, "x,y");
    cr_assert_eq(m[1].max_seq_length, 64);
    config_free(&c);
    /* Empty: the one `model`. */
    LOAD_OK(&c, "--models=", NULL);
    cr_assert_str_eq(c.models, "");
    config_free(&c);
}

/* The one walk over a list of model names that every reader of aliases
 * uses: spaces around a name are not part of it, an empty name comes back
 * empty (for validation to refuse), the list's end is NULL. */
Test(config, names_next_walks_a_list_of_names) {
    const char *want[] = {"a", "b c", "", "d", NULL};
    const char *p = " a ,b c,, d ";
    size_t len, i = 0;
    for (const char *name; (name = config_names_next(&p, ',', &len)); i++) {
        cr_assert(want[i], "more names than given");
        cr_assert_eq(len, strlen(want[i]));
        cr_assert(strncmp(name, want[i], len) == 0, "name %zu", i);
    }
    cr_assert_null(want[i]);
    p = "x|y";
    cr_assert_not_null(config_names_next(&p, '|', &len));
    cr_assert_eq(len, 1);
    cr_assert_str_eq(p, "y");
    p = NULL;
    cr_assert_null(config_names_next(&p, ',', &len));
    json_t *j = config_names_json(" a, ,b");
    char *text = json_dumps(j, JSON_COMPACT);
    cr_assert_str_eq(text, "[\"a\",\"b\"]");
    free(text);
    json_decref(j);
    /* The same walk validates the flag form: an empty alias is refused,
     * spaces around one are not part of it. */
    model_dirs();
    expect_error(FRAGS("\"models\"", "alias \"\" is empty"), "--models=a=m/a;aliases=x||y", NULL);
    config c;
    LOAD_OK(&c, "--models=a=m/a;aliases= x | y", NULL);
    config_model m[CONFIG_MAX_MODELS];
    size_t n = 0;
    char err[256];
    cr_assert_eq(config_models_parse(c.models, m, CONFIG_MAX_MODELS, &n, err, sizeof err), 0);
    cr_assert_str_eq(m[0].aliases, "x,y");
    config_free(&c);
}

Test(config, models_refuses_duplicates_empty_names_and_bad_paths) {
    model_dirs();
    expect_error(FRAGS("\"models\"", "\"emb\" is taken twice"), "--models=emb=m/a,emb=m/b", NULL);
    expect_error(FRAGS("\"models\"", "\"x\" is taken twice"), "--models=emb=m/a;aliases=x,x=m/b",
                 NULL);
    expect_error(FRAGS("\"models\"", "model name \"\" is empty"), "--models==m/a", NULL);
    expect_error(FRAGS("\"models\"", "not NAME=PATH"), "--models=m/a", NULL);
    expect_error(FRAGS("\"models\"", "the path is empty"), "--models=a=", NULL);
    expect_error(FRAGS("\"models\"", "unknown key \"colour\""), "--models=a=m/a;colour=red", NULL);
    expect_error(FRAGS("\"models\"", "precision \"fp64\""), "--models=a=m/a;precision=fp64", NULL);
    write_file("b.json", "{\"models\": [{\"name\": \"a\"}]}");
    expect_error(FRAGS("\"models\"", "string \"name\" and \"path\""), "--config", "b.json", NULL);
    write_file("c.json", "{\"models\": [{\"name\": \"a\", \"path\": \"m/a\"}, "
                         "{\"name\": \"a\", \"path\": \"m/b\"}]}");
    expect_error(FRAGS("\"models\"", "taken twice"), "--config", "c.json", NULL);
}

/* Per-model values in the file have exact JSON types, as every setting. */
Test(config, models_file_values_have_exact_types) {
    model_dirs();
    write_file("t.json", "{\"models\": [{\"name\": \"a\", \"path\": \"m/a\", \"truncate\": "
                         "\"true\"}]}");
    expect_error(FRAGS("\"models\"", "\"truncate\" is not a JSON boolean"), "--config", "t.json",
                 NULL);
    write_file("s.json", "{\"models\": [{\"name\": \"a\", \"path\": \"m/a\", "
                         "\"max_seq_length\": \"64\"}]}");
    expect_error(FRAGS("\"models\"", "\"max_seq_length\" is not a JSON integer"), "--config",
                 "s.json", NULL);
    write_file("e.json", "{\"models\": [{\"name\": \"a\", \"path\": \"m/a\", \"engine\": 3}]}");
    expect_error(FRAGS("\"models\"", "\"engine\" is not a JSON string"), "--config", "e.json",
                 NULL);
    write_file("k.json", "{\"models\": [{\"name\": \"a\", \"path\": \"m/a\", \"colour\": 1}]}");
    expect_error(FRAGS("\"models\"", "unknown key \"colour\""), "--config", "k.json", NULL);
}

/* Validation is syntactic: a model directory that is gone (renamed after
 * start) must not block a reload; start reports it when loading. */
Test(config, models_paths_are_not_looked_at) {
    config c;
    LOAD_OK(&c, "--models=a=m/none-such", NULL);
    cr_assert_str_eq(c.models, "a=m/none-such");
    config_free(&c);
}

/* model_aliases takes the names a `models` entry's aliases take. */
Test(config, model_aliases_are_checked_as_model_names) {
    config c;
    LOAD_OK(&c, "--model-aliases= sentence-transformers/all-MiniLM-L6-v2 , minilm@v2", NULL);
    config_free(&c);
    expect_error(FRAGS("model_aliases", "\"a b\""), "--model-aliases=x,a b", NULL);
    expect_error(FRAGS("model_aliases", "names \"\""), "--model-aliases=x,,y", NULL);
    expect_error(FRAGS("model_aliases", "ends with a comma"), "--model-aliases=x,", NULL);
    expect_error(FRAGS("model_aliases", "\"x\" twice"), "--model-aliases=x,y, x", NULL);
}

/* With `models` set, `model` and model_aliases would be ignored: refused. */
Test(config, models_refuses_model_and_model_aliases_beside_it) {
    model_dirs();
    expect_error(FRAGS("\"models\"", "model_aliases"), "--models=a=m/a", "--model-aliases=x", NULL);
    expect_error(FRAGS("\"models\"", "`model`"), "--models=a=m/a", "--model=m/b", NULL);
}
