/* What the two fake GPU libraries share (fake_nvml/fake_nvml.c, fake_amdsmi/fake_amdsmi.c): the
 * scenario file of key=value lines, the load marker whose age is how long the load has run, and the
 * power log through which a limit set in one process holds in every other. Each library passes the
 * names of its own environment variables. */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Every "key=value" line of the file $env names ('#' starts a comment): a key `global` takes
 * (it returns 1) is the library's; else "gpuN.key" is GPU N's and a bare key every GPU's. */
static void read_scenario(const char *env, int gpus, int (*global)(const char *key, const char *val),
                          void (*per_gpu)(int gpu, const char *key, const char *val)) {
    const char *path = getenv(env);
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[600];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq) continue;
        *eq = 0;
        const char *key = line, *val = eq + 1;
        if (global(key, val)) continue;
        if (!strncmp(key, "gpu", 3) && strchr(key, '.')) {
            int i = atoi(key + 3);
            if (i >= 0 && i < gpus) per_gpu(i, strchr(key, '.') + 1, val);
        } else for (int i = 0; i < gpus; i++) per_gpu(i, key, val);
    }
    if (f) fclose(f);
}

/* The length of a function's name without its version suffix ("nvmlDeviceGetCount_v2": 18). */
static size_t bare_length(const char *name, size_t len) {
    for (size_t i = 0; i + 2 < len; i++)
        if (name[i] == '_' && name[i + 1] == 'v' && name[i + 2] >= '0' && name[i + 2] <= '9') return i;
    return len;
}

/* The error a "NAME:CODE,NAME:CODE" list (a scenario's errors= or errors_load=) injects into the
 * function `func`, 0 for none. A name matches the function with or without its version suffix
 * ("nvmlDeviceGetCount" is nvmlDeviceGetCount_v2), as the bindings name it. */
static int injected(const char *list, const char *func) {
    size_t len = bare_length(func, strlen(func));
    for (const char *p = list; p && *p;) {
        const char *colon = strchr(p, ':'), *comma = strchr(p, ',');
        if (!colon) break;
        if (bare_length(p, (size_t)(colon - p)) == len && !strncmp(p, func, len)) return (int)strtol(colon + 1, NULL, 0);
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Appends "FUNC idle|load" to the file $env names, where set: which calls a run made, and when
 * (the sweep's tests check the error tables list every call the health check makes). */
static void trace_call(const char *env, const char *func, int loaded) {
    const char *path = getenv(env);
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) { fprintf(f, "%s %s\n", func, loaded ? "load" : "idle"); fclose(f); }
}

/* Seconds since `since` (wall clock), 0 if it is later. */
static double seconds_since(struct timespec since) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double s = (double)(now.tv_sec - since.tv_sec) + (double)(now.tv_nsec - since.tv_nsec) / 1e9;
    return s > 0 ? s : 0;
}

/* Seconds since the load marker $env names was made; -1 while there is none (no load). */
static double load_age_s(const char *env) {
    const char *marker = getenv(env);
    struct stat st;
    if (!marker || stat(marker, &st) != 0) return -1;
    return seconds_since(st.st_mtim);
}

/* The GPU's last value in the power log $env names ("gpuN VALUE PID" lines), else `otherwise`. */
static unsigned long long power_log_last(const char *env, int gpu, unsigned long long otherwise) {
    const char *path = getenv(env);
    FILE *f = path ? fopen(path, "r") : NULL;
    unsigned long long value = otherwise, read;
    int index;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "gpu%d %llu", &index, &read) == 2 && index == gpu) value = read;
    if (f) fclose(f);
    return value;
}

/* Appends "gpuN VALUE PID" to the power log $env names, in one write (so lines stay whole):
 * 0 when written, -1 without a log or when the write fails. */
static int power_log_append(const char *env, int gpu, unsigned long long value) {
    const char *path = getenv(env);
    if (!path) return -1;
    char line[128];
    int n = snprintf(line, sizeof line, "gpu%d %llu %d\n", gpu, value, (int)getpid());
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return -1;
    int wrote = (int)write(fd, line, (size_t)n);
    close(fd);
    return wrote == n ? 0 : -1;
}

#endif
