/* config.c — fuzzes the config loader: a config file's JSON, ATTNSERVE_*
 * environment values and flags, all through config_load as main calls it.
 *
 * The input is split at NUL bytes: the first part is the config file (given
 * with --config), each further part is an environment assignment when it
 * starts with ATTNSERVE_ and has an '=', else one command-line argument.
 * Inputs naming dev/, proc/ or sys/ are skipped: the loader opens the paths
 * it is given (--config, api_key_file), and a path such as /dev/stdin
 * would block the fuzzer rather than find anything.
 *
 * Checks for a loaded configuration, beyond no crash, leak or undefined
 * behaviour: a reload from the same sources succeeds and reports no change;
 * and --print-config's output, fed back as the only source, yields the same
 * settings (as config.h promises). A refusal has a message. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "server/config.h"

#define MAX_PARTS 16

extern char **environ;

static char dir[64], file_path[96], print_path[96];

static void cleanup(void) {
    unlink(file_path);
    unlink(print_path);
    rmdir(dir);
}

/* A scratch directory for the two files, and an environment holding no
 * ATTNSERVE_* variable but those an input sets. */
static void init(void) {
    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "/tmp/attn-fuzz-config-XXXXXX");
    FUZZ_CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(file_path, sizeof file_path, "%s/attnserve.json", dir);
    snprintf(print_path, sizeof print_path, "%s/printed.json", dir);
    atexit(cleanup);
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "ATTNSERVE_", 10) == 0) {
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                unsetenv(name);
                again = 1;
                break;
            }
    }
}

static void write_file(const char *path, const uint8_t *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    FUZZ_CHECK(fp && fwrite(data, 1, n, fp) == n && fclose(fp) == 0, "cannot write %s", path);
}

static void on_change(void *ctx, const char *name, const char *old_value, const char *new_value,
                      bool applied) {
    (void)ctx;
    (void)applied;
    FUZZ_CHECK(0, "reload from the same sources changed %s from %.80s to %.80s", name, old_value,
               new_value);
}

static bool names_special_path(const uint8_t *data, size_t size) {
    static const char *const bad[] = {"dev/", "proc/", "sys/"};
    for (size_t b = 0; b < 3; b++)
        if (memmem(data, size, bad[b], strlen(bad[b])))
            return true;
    return false;
}

/* --print-config's output as the only source gives the same settings. */
static void check_printed(const config *cfg) {
    FILE *fp = fopen(print_path, "w");
    FUZZ_CHECK(fp && config_print(cfg, fp) == 0 && fclose(fp) == 0, "cannot print");
    char *argv[] = {"attnserve", "--config", print_path, NULL};
    config again;
    config_action action;
    char err[1024] = "";
    FUZZ_CHECK(config_load(&again, 3, argv, &action, err, sizeof err) == 0,
               "the printed configuration is refused: %s", err);
    json_t *a = config_to_json(cfg), *b = config_to_json(&again);
    FUZZ_CHECK(a && b && json_equal(a, b), "the printed configuration loads differently");
    json_decref(a);
    json_decref(b);
    config_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    if (names_special_path(data, size))
        return 0;
    /* Parts, copied so that each is NUL-terminated. */
    char *copy = malloc(size + 1);
    FUZZ_CHECK(copy, "out of memory");
    memcpy(copy, data, size);
    copy[size] = '\0';
    size_t file_len = strnlen(copy, size);
    write_file(file_path, data, file_len);

    char *argv[3 + MAX_PARTS + 1] = {"attnserve", "--config", file_path};
    int argc = 3;
    char *envs[MAX_PARTS];
    int nenv = 0;
    for (size_t at = file_len + 1; at <= size && argc + nenv < 3 + MAX_PARTS;) {
        char *part = copy + at;
        at += strlen(part) + 1;
        char *eq = strchr(part, '=');
        if (strncmp(part, "ATTNSERVE_", 10) == 0 && eq && eq > part + 10) {
            *eq = '\0';
            FUZZ_CHECK(setenv(part, eq + 1, 1) == 0, "setenv %s", part);
            envs[nenv++] = part;
        } else {
            argv[argc++] = part;
        }
    }
    argv[argc] = NULL;

    config cfg;
    config_action action;
    char err[1024] = "";
    if (config_load(&cfg, argc, argv, &action, err, sizeof err) != 0) {
        FUZZ_CHECK(err[0], "refused without a message");
    } else {
        if (action == CONFIG_RUN || action == CONFIG_PRINT) {
            config next;
            FUZZ_CHECK(config_reload(&cfg, &next, on_change, NULL, err, sizeof err) == 0,
                       "reload from the same sources fails: %s", err);
            config_free(&next);
        }
        for (int i = 0; i < nenv; i++)
            unsetenv(envs[i]);
        nenv = 0;
        check_printed(&cfg);
        config_free(&cfg);
    }
    for (int i = 0; i < nenv; i++)
        unsetenv(envs[i]);
    free(copy);
    return 0;
}
