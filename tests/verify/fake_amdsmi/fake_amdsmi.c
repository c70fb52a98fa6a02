/* A fake libamd_smi.so for gpuenv's tests: the real `amdsmi` Python bindings (7.0.2) load it from
 * $ROCM_PATH/lib and get the answers of a scenario file (FAKE_AMDSMI_SCENARIO), one key=value a
 * line. A key applies to every GPU, or to one with a "gpuN." prefix. Functions a scenario lists in
 * "unsupported" return AMDSMI_STATUS_NOT_SUPPORTED. The bindings bind every C function of the API
 * when they are imported, so every name they bind is defined here: the ones gpuenv reads answer
 * from the scenario, the others (at the end of this file) answer NOT_SUPPORTED.
 * Units as the real library gives them on bare metal: temperatures in degrees Celsius, the power
 * cap in microwatts (power_cap_w, power_default_w here in watts), power draw in watts, clocks MHz.
 * Per GPU: name (market name), gfx (target graphics version, hex: 0x942), ecc_uncorrected,
 * ecc_corrected, bad_pages (retired), bad_pages_pending, bad_pages_unreservable, temp and temp_crit (hotspot, current and
 * critical), power_w, power_cap_w, power_default_w, gfx_clk, gfx_clk_max, xgmi_links, xgmi_down
 * (the number of a link that is down), procs (that many compute processes, pids 4000+), thermal
 * (1: the socket thermal limit holds the clocks down now, as AMD SMI's violation status says). Global:
 * count, driver, init_error (an amdsmi_status_t amdsmi_init returns).
 * Power caps, as the fake NVML keeps its limits: amdsmi_set_power_cap appends "gpuN <microwatts>
 * <pid>" to FAKE_AMDSMI_POWER_LOG (without it: NOT_SUPPORTED), and every read of the cap takes
 * the GPU's last line there (else power_cap_w), so a test reads what every process set, in order.
 * power_min_w is the floor AMD SMI gives (0, as on MI300X, by default); power_set_denied=1 makes a
 * set NO_PERM (not root). The energy counter grows at min(power_w, the cap) watts from amdsmi_init.
 * Under load, as the fake NVML: while the file FAKE_AMDSMI_LOAD_MARKER names exists (the stand-in
 * load of GPUENV_TEST_FAULT=nvml:standin makes it), gfx_clk_load (default gfx_clk_max) and
 * temp_load (default temp) answer instead of the idle values, and the violation status's limits
 * load_prochot, load_ppt, load_socket, load_vr, load_hbm (1: active under load) are active; an
 * active limit's residency counter (acc_*) grows as acc_counter does (1000 a second since
 * amdsmi_init) for every second since the marker was made; load_host_limit (1: the GFX clock held
 * below the host's limit, a configured cap) too. gfx_activity (default 0 at idle, 100 under load:
 * gfx_activity_load) is the GFX engine's busy share; temp_mem, temp_mem_crit and temp_mem_load the
 * memory (VRAM) temperature; ecc_deferred the deferred (poisoned) error count. soak_s=N holds the _load values back until the load has run N
 * seconds. xgmi_all_down=1 reports every XGMI link down (a card without its bridge).
 * Faults, for the sweep of every call the health check makes (as the fake NVML's): errors=FUNC:CODE,...
 * makes a GPU's functions answer those amdsmi_status_t codes (errors_load=: only under load);
 * node_errors= and node_errors_load= do the same for amdsmi_get_processor_handles; lost=1 makes
 * every call on the GPU answer AMDSMI_STATUS_IO (lost_load=1: only under load). FAKE_AMDSMI_TRACE
 * names a file each call made is appended to, with whether the load ran. */
#include <stdint.h>

#include "../fake_gpu.h"

#define MAXGPU 16
#define OK 0
#define E_INVAL 1
#define E_NOT_SUPPORTED 2
#define E_NO_PERM 10
#define E_IO 12
#define E_NOT_INIT 32
#define E_INSUFFICIENT 41

typedef struct {
    int index;
    char name[96], serial[32], unsupported[512];
    unsigned long long gfx, ecc_uncorrected, ecc_corrected;
    int bad_pages, bad_pages_pending, bad_pages_unreservable, temp, temp_crit, power_w, power_cap_w, power_default_w;
    int gfx_clk, gfx_clk_max, xgmi_links, xgmi_down, procs, thermal, power_min_w, power_set_denied;
    int gfx_clk_load, temp_load, load_prochot, load_ppt, load_socket, load_vr, load_hbm;
    char errors[512], errors_load[512];
    int lost, lost_load, soak_s, xgmi_all_down, gfx_activity, gfx_activity_load, temp_mem, temp_mem_crit, temp_mem_load;
    int ecc_deferred, load_host_limit;
} gpu_t;

#pragma pack(push, 1)
typedef struct {
    char market_name[256]; uint32_t vendor_id; char vendor_name[256]; uint32_t subvendor_id;
    uint64_t device_id; uint32_t rev_id; char asic_serial[256]; uint32_t oam_id, num_of_compute_units;
    uint8_t pad[4]; uint64_t target_graphics_version; uint32_t subsystem_id, reserved[21];
} asic_info_t;
typedef struct { char model_number[256], product_serial[256], fru_id[256], product_name[256], manufacturer_name[256]; uint64_t reserved[64]; } board_info_t;
typedef struct { char driver_version[256], driver_date[256], driver_name[256]; } driver_info_t;
typedef struct { uint64_t correctable, uncorrectable, deferred, reserved[5]; } error_count_t;
typedef struct { uint64_t page_address, page_size; uint32_t status; uint8_t pad[4]; } page_record_t;
typedef struct { uint64_t power_cap, default_power_cap, dpm_cap, min_power_cap, max_power_cap, reserved[3]; } power_cap_info_t;
typedef struct {
    uint64_t socket_power; uint32_t current_socket_power, average_socket_power;
    uint64_t gfx_voltage, soc_voltage, mem_voltage; uint32_t power_limit; uint8_t pad[4]; uint64_t reserved[18];
} power_info_t;
typedef struct { uint32_t clk, min_clk, max_clk; uint8_t locked, deep_sleep, pad[2]; uint32_t reserved[4]; } clk_info_t;
typedef struct { uint32_t total_links, status[8]; uint8_t pad[4]; uint64_t reserved[7]; } xgmi_status_t;
typedef struct {
    char name[256]; uint32_t pid; uint8_t pad[4]; uint64_t mem;
    struct { uint64_t gfx, enc; uint32_t reserved[12]; } engine_usage;
    struct { uint64_t gtt_mem, cpu_mem, vram_mem; uint32_t reserved[10]; } memory_usage;
    char container_name[256]; uint32_t cu_occupancy, reserved[11];
} proc_info_t;
/* the leading fields of amdsmi_violation_status_t (the rest, per-XCP arrays, is left as the caller made it) */
typedef struct {
    uint64_t reference_timestamp, violation_timestamp, acc_counter, acc_prochot_thrm, acc_ppt_pwr, acc_socket_thrm;
    uint64_t acc_vr_thrm, acc_hbm_thrm, acc_gfx_clk_below_host_limit, per_prochot_thrm, per_ppt_pwr, per_socket_thrm;
    uint64_t per_vr_thrm, per_hbm_thrm, per_gfx_clk_below_host_limit;
    uint8_t active_prochot_thrm, active_ppt_pwr, active_socket_thrm, active_vr_thrm, active_hbm_thrm, active_gfx_clk_below;
} violation_head_t;
#pragma pack(pop)

static gpu_t gpus[MAXGPU];
static int count = 8, init_error = 0, initialised = 0;
static char driver[64] = "6.10.5", unsupported_all[512] = "", node_errors[512] = "", node_errors_load[512] = "";
static int socket_token;
static struct timespec started, started_wall;

static void defaults(void) {
    for (int i = 0; i < MAXGPU; i++) {
        gpu_t *g = &gpus[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        strcpy(g->name, "AMD Instinct MI300X");
        snprintf(g->serial, sizeof g->serial, "692251001%04d", i);
        g->gfx = 0x942; g->temp = 42; g->temp_crit = 105;
        g->power_w = 140; g->power_cap_w = g->power_default_w = 750;
        g->gfx_clk = 132; g->gfx_clk_max = 2100; g->xgmi_links = 7; g->xgmi_down = -1;
        g->gfx_clk_load = g->temp_load = -1;
        g->gfx_activity_load = 100; g->temp_mem = 45; g->temp_mem_crit = 100; g->temp_mem_load = -1;
    }
}

static void set(int gpu, const char *key, const char *val) {
    gpu_t *g = &gpus[gpu];
    unsigned long long n = strtoull(val, NULL, 0);
    if (!strcmp(key, "name")) snprintf(g->name, sizeof g->name, "%s", val);
    else if (!strcmp(key, "serial")) snprintf(g->serial, sizeof g->serial, "%s", val);
    else if (!strcmp(key, "unsupported")) snprintf(g->unsupported, sizeof g->unsupported, "%s", val);
    else if (!strcmp(key, "errors")) snprintf(g->errors, sizeof g->errors, "%s", val);
    else if (!strcmp(key, "errors_load")) snprintf(g->errors_load, sizeof g->errors_load, "%s", val);
#define INT(k) else if (!strcmp(key, #k)) g->k = (int)strtol(val, NULL, 0);
#define ULL(k) else if (!strcmp(key, #k)) g->k = n;
    ULL(gfx) ULL(ecc_uncorrected) ULL(ecc_corrected)
    INT(bad_pages) INT(bad_pages_pending) INT(bad_pages_unreservable) INT(temp) INT(temp_crit) INT(power_w) INT(power_cap_w)
    INT(power_default_w) INT(gfx_clk) INT(gfx_clk_max) INT(xgmi_links) INT(xgmi_down) INT(procs) INT(thermal)
    INT(power_min_w) INT(power_set_denied) INT(gfx_clk_load) INT(temp_load)
    INT(load_prochot) INT(load_ppt) INT(load_socket) INT(load_vr) INT(load_hbm)
    INT(lost) INT(lost_load) INT(soak_s) INT(xgmi_all_down) INT(gfx_activity) INT(gfx_activity_load)
    INT(temp_mem) INT(temp_mem_crit) INT(temp_mem_load) INT(ecc_deferred) INT(load_host_limit)
}

static int global(const char *key, const char *val) {
    if (!strcmp(key, "count")) count = atoi(val);
    else if (!strcmp(key, "driver")) snprintf(driver, sizeof driver, "%s", val);
    else if (!strcmp(key, "init_error")) init_error = atoi(val);
    else if (!strcmp(key, "unsupported")) snprintf(unsupported_all, sizeof unsupported_all, "%s", val);
    else if (!strcmp(key, "node_errors")) snprintf(node_errors, sizeof node_errors, "%s", val);
    else if (!strcmp(key, "node_errors_load")) snprintf(node_errors_load, sizeof node_errors_load, "%s", val);
    else return 0;
    return 1;
}

static void load(void) {  /* every amdsmi_init reads the scenario afresh: nothing of a former one stays */
    defaults();
    count = 8; init_error = 0;
    snprintf(driver, sizeof driver, "6.10.5");
    unsupported_all[0] = node_errors[0] = node_errors_load[0] = 0;
    read_scenario("FAKE_AMDSMI_SCENARIO", MAXGPU, global, set);
}

static int unsupported(gpu_t *g, const char *fn) {
    return strstr(unsupported_all, fn) || (g && strstr(g->unsupported, fn));
}

/* Seconds since the load marker was made; -1 without a load. */
static double loaded_s(void) { return load_age_s("FAKE_AMDSMI_LOAD_MARKER"); }
/* Under load for soak_s seconds or more: the GPU answers its scenario's _load values. */
static int soaked(gpu_t *g) { return loaded_s() >= 0 && loaded_s() >= g->soak_s; }

/* What a call on GPU g answers instead of its reading (see the header), 0 for the reading. */
static int fault(gpu_t *g, const char *fn) {
    int loaded = loaded_s() >= 0, e = injected(g->errors, fn);
    trace_call("FAKE_AMDSMI_TRACE", fn, loaded);
    if (g->lost || (g->lost_load && loaded)) return E_IO;
    return e ? e : loaded ? injected(g->errors_load, fn) : 0;
}

#define GPU(h) gpu_t *g = (gpu_t *)(h); if (!initialised) return E_NOT_INIT; \
    if (g < gpus || g >= gpus + count) return E_INVAL; \
    { int e_ = fault(g, __func__); if (e_) return e_; } \
    if (unsupported(g, __func__)) return E_NOT_SUPPORTED;

int amdsmi_init(uint64_t flags) {
    (void)flags; load(); clock_gettime(CLOCK_MONOTONIC, &started); clock_gettime(CLOCK_REALTIME, &started_wall);
    if (init_error) return init_error;
    initialised = 1; return OK;
}
int amdsmi_shut_down(void) { initialised = 0; return OK; }
int amdsmi_get_socket_handles(uint32_t *n, void **handles) {
    if (!initialised) return E_NOT_INIT;
    if (handles) { if (*n < 1) return E_INSUFFICIENT; handles[0] = &socket_token; }
    *n = 1; return OK;
}
int amdsmi_get_processor_handles(void *socket, uint32_t *n, void **handles) {
    if (!initialised) return E_NOT_INIT;
    trace_call("FAKE_AMDSMI_TRACE", __func__, loaded_s() >= 0);
    { int e_ = injected(node_errors, __func__); if (!e_ && loaded_s() >= 0) e_ = injected(node_errors_load, __func__); if (e_) return e_; }
    if (socket != &socket_token) return E_INVAL;
    if (handles) for (int i = 0; i < count && i < (int)*n; i++) handles[i] = &gpus[i];
    *n = (uint32_t)count; return OK;
}
int amdsmi_get_processor_type(void *h, uint32_t *t) { GPU(h) *t = 1; return OK; }
int amdsmi_get_gpu_asic_info(void *h, asic_info_t *a) {
    GPU(h) memset(a, 0, sizeof *a);
    snprintf(a->market_name, sizeof a->market_name, "%s", g->name);
    a->vendor_id = 0x1002; snprintf(a->vendor_name, sizeof a->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
    a->device_id = 0x74a1; a->rev_id = 0; a->oam_id = (uint32_t)g->index; a->num_of_compute_units = 304;
    snprintf(a->asic_serial, sizeof a->asic_serial, "%016llX", 0x5F00000000000000ULL + (unsigned long long)g->index);
    a->target_graphics_version = g->gfx; a->subsystem_id = 0x74a1;
    return OK;
}
int amdsmi_get_gpu_board_info(void *h, board_info_t *b) {
    GPU(h) memset(b, 0, sizeof *b);
    snprintf(b->product_serial, sizeof b->product_serial, "%s", g->serial);
    snprintf(b->product_name, sizeof b->product_name, "%s", g->name);
    return OK;
}
int amdsmi_get_gpu_device_uuid(void *h, uint32_t *len, char *buf) {
    GPU(h) snprintf(buf, *len, "%02xff74a1-0000-1000-80c6-0000000000%02d", g->index, g->index); return OK;
}
int amdsmi_get_gpu_device_bdf(void *h, uint64_t *bdf) {
    GPU(h) uint64_t bus = 0x05 + 0x10 * (uint64_t)g->index;
    *bdf = (bus << 8); /* function 0 (bits 0-2), device 0 (3-7), bus (8-15), domain 0 (16-63) */
    return OK;
}
int amdsmi_get_gpu_driver_info(void *h, driver_info_t *d) {
    GPU(h) memset(d, 0, sizeof *d);
    snprintf(d->driver_name, sizeof d->driver_name, "amdgpu");
    snprintf(d->driver_version, sizeof d->driver_version, "%s", driver);
    snprintf(d->driver_date, sizeof d->driver_date, "2015/01/01 00:00");
    return OK;
}
int amdsmi_get_gpu_total_ecc_count(void *h, error_count_t *e) {
    GPU(h) memset(e, 0, sizeof *e); e->uncorrectable = g->ecc_uncorrected; e->correctable = g->ecc_corrected;
    e->deferred = (uint64_t)g->ecc_deferred; return OK;
}
int amdsmi_get_gpu_bad_page_info(void *h, uint32_t *n, page_record_t *pages) {
    GPU(h) int total = g->bad_pages + g->bad_pages_pending + g->bad_pages_unreservable;
    if (pages) for (int i = 0; i < total && i < (int)*n; i++) {
        pages[i].page_address = 0x100000ULL * (uint64_t)(i + 1); pages[i].page_size = 4096;
        /* RESERVED (retired), then PENDING, then UNRESERVABLE */
        pages[i].status = i < g->bad_pages ? 0 : i < g->bad_pages + g->bad_pages_pending ? 1 : 2;
    }
    *n = (uint32_t)total; return OK;
}
/* The hotspot (junction, 1) and memory (VRAM, 2) sensors, as on MI300X: current (0) and critical (5). */
int amdsmi_get_temp_metric(void *h, uint32_t sensor, uint32_t metric, int64_t *t) {
    GPU(h) if (sensor != 1 && sensor != 2) return E_NOT_SUPPORTED;
    int now = sensor == 1 ? (soaked(g) && g->temp_load >= 0 ? g->temp_load : g->temp)
                          : (soaked(g) && g->temp_mem_load >= 0 ? g->temp_mem_load : g->temp_mem);
    if (metric == 0) *t = now; else if (metric == 5) *t = sensor == 1 ? g->temp_crit : g->temp_mem_crit; else return E_NOT_SUPPORTED;
    return OK;
}
/* The cap in force (microwatts): the GPU's last line in FAKE_AMDSMI_POWER_LOG, else the scenario's. */
static uint64_t current_cap(gpu_t *g) {
    return power_log_last("FAKE_AMDSMI_POWER_LOG", g->index, (uint64_t)g->power_cap_w * 1000000);
}
int amdsmi_get_power_cap_info(void *h, uint32_t sensor, power_cap_info_t *p) {
    GPU(h) (void)sensor; memset(p, 0, sizeof *p);
    p->power_cap = current_cap(g); p->default_power_cap = (uint64_t)g->power_default_w * 1000000;
    p->min_power_cap = (uint64_t)g->power_min_w * 1000000; p->max_power_cap = (uint64_t)g->power_default_w * 1000000;
    p->dpm_cap = 2100;
    return OK;
}
int amdsmi_set_power_cap(void *h, uint32_t sensor, uint64_t cap) {
    GPU(h) (void)sensor; if (g->power_set_denied) return E_NO_PERM;
    if (cap < (uint64_t)g->power_min_w * 1000000 || cap > (uint64_t)g->power_default_w * 1000000) return E_INVAL;
    return power_log_append("FAKE_AMDSMI_POWER_LOG", g->index, cap) ? E_NOT_SUPPORTED : OK;
}
/* Counts of 15.259 microjoules (MI300X's resolution), at min(power_w, the cap) since amdsmi_init. */
int amdsmi_get_energy_count(void *h, uint64_t *energy, float *resolution, uint64_t *timestamp) {
    GPU(h) struct timespec now; clock_gettime(CLOCK_MONOTONIC, &now);
    double seconds = (double)(now.tv_sec - started.tv_sec) + (double)(now.tv_nsec - started.tv_nsec) / 1e9;
    double watts = (double)g->power_w, capped = (double)current_cap(g) / 1e6;
    if (capped < watts) watts = capped;
    *resolution = 15.259f; *energy = (uint64_t)(seconds * watts * 1e6 / 15.259);
    *timestamp = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
    return OK;
}
int amdsmi_get_power_info(void *h, power_info_t *p) {
    GPU(h) memset(p, 0, sizeof *p);
    p->socket_power = (uint64_t)g->power_w; p->current_socket_power = (uint32_t)g->power_w;
    p->average_socket_power = 0xFFFF; p->power_limit = (uint32_t)(current_cap(g) / 1000000);
    return OK;
}
int amdsmi_get_clock_info(void *h, uint32_t type, clk_info_t *c) {
    GPU(h) if (type != 0) return E_NOT_SUPPORTED;
    int loaded = loaded_s() >= 0, clk = !loaded ? g->gfx_clk : soaked(g) && g->gfx_clk_load >= 0 ? g->gfx_clk_load : g->gfx_clk_max;
    memset(c, 0, sizeof *c); c->clk = (uint32_t)clk; c->min_clk = 500; c->max_clk = (uint32_t)g->gfx_clk_max;
    return OK;
}
int amdsmi_get_gpu_xgmi_link_status(void *h, xgmi_status_t *s) {
    GPU(h) memset(s, 0, sizeof *s); s->total_links = (uint32_t)g->xgmi_links;
    for (int i = 0; i < 8; i++) s->status[i] = g->xgmi_all_down || i == g->xgmi_down ? 0 : 1; /* DOWN : UP */
    return OK;
}
int amdsmi_get_violation_status(void *h, violation_head_t *v) {
    GPU(h) memset(v, 0, sizeof *v);
    double load = loaded_s(), ticks = load > 0 && soaked(g) ? load * 1000 : 0;
    int on = soaked(g), socket = g->thermal || (on && g->load_socket);
    v->reference_timestamp = 1000; v->violation_timestamp = 1000;
    v->acc_counter = 100 + (uint64_t)(seconds_since(started_wall) * 1000);
    v->acc_socket_thrm = (g->thermal ? 100 : 0) + (uint64_t)(g->load_socket ? ticks : 0);
    v->acc_prochot_thrm = (uint64_t)(g->load_prochot ? ticks : 0);
    v->acc_ppt_pwr = (uint64_t)(g->load_ppt ? ticks : 0);
    v->acc_vr_thrm = (uint64_t)(g->load_vr ? ticks : 0);
    v->acc_hbm_thrm = (uint64_t)(g->load_hbm ? ticks : 0);
    v->per_socket_thrm = socket ? 100 : 0;
    v->active_socket_thrm = (uint8_t)socket;
    v->active_prochot_thrm = (uint8_t)(on && g->load_prochot);
    v->active_ppt_pwr = (uint8_t)(on && g->load_ppt);
    v->active_vr_thrm = (uint8_t)(on && g->load_vr);
    v->active_hbm_thrm = (uint8_t)(on && g->load_hbm);
    v->acc_gfx_clk_below_host_limit = (uint64_t)(g->load_host_limit ? ticks : 0);
    v->active_gfx_clk_below = (uint8_t)(on && g->load_host_limit);
    return OK;
}
typedef struct { uint32_t gfx_activity, umc_activity, mm_activity; } activity_t;
int amdsmi_get_gpu_activity(void *h, activity_t *a) {
    GPU(h) a->gfx_activity = (uint32_t)(loaded_s() >= 0 ? g->gfx_activity_load : g->gfx_activity);
    a->umc_activity = 0; a->mm_activity = 0; return OK;
}
int amdsmi_get_gpu_process_list(void *h, uint32_t *n, proc_info_t *procs) {
    GPU(h) if ((int)*n < g->procs) { *n = (uint32_t)g->procs; return E_INSUFFICIENT; }
    for (int i = 0; i < g->procs; i++) {
        memset(&procs[i], 0, sizeof procs[i]);
        snprintf(procs[i].name, sizeof procs[i].name, "python3"); procs[i].pid = 4000 + (uint32_t)i;
        procs[i].mem = 1ULL << 30;
    }
    *n = (uint32_t)g->procs; return OK;
}

/* Bound by the bindings, not read by gpuenv: NOT_SUPPORTED (arguments ignored; the caller cleans the stack). */
int amdsmi_clean_gpu_local_data(void) { return E_NOT_SUPPORTED; }
int amdsmi_cpu_apb_disable(void) { return E_NOT_SUPPORTED; }
int amdsmi_cpu_apb_enable(void) { return E_NOT_SUPPORTED; }
int amdsmi_first_online_core_on_cpu_socket(void) { return E_NOT_SUPPORTED; }
int amdsmi_free_name_value_pairs(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_afids_from_cper(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_clk_freq(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_affinity_with_scope(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_cclk_limit(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_core_boostlimit(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_core_current_freq_limit(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_core_energy(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_cores_per_socket(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_current_io_bandwidth(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_current_xgmi_bw(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_ddr_bw(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_dimm_power_consumption(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_dimm_temp_range_and_refresh_rate(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_dimm_thermal_sensor(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_family(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_fclk_mclk(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_handles(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_hsmp_driver_version(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_hsmp_proto_ver(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_model(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_model_name(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_prochot_status(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_pwr_svi_telemetry_all_rails(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_smu_fw_version(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_c0_residency(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_count(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_current_active_freq_limit(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_energy(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_freq_range(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_lclk_dpm_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_power(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_power_cap(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_power_cap_max(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpu_socket_temperature(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_cpucore_handles(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_esmi_err_msg(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_fw_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_accelerator_partition_profile(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_accelerator_partition_profile_config(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_available_counters(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_bad_page_threshold(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_bdf_id(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_busy_percent(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_cache_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_compute_partition(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_compute_process_gpus(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_compute_process_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_compute_process_info_by_pid(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_cper_entries(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_ecc_count(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_ecc_enabled(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_ecc_status(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_enumeration_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_event_notification(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_fan_rpms(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_fan_speed(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_fan_speed_max(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_id(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_kfd_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_mem_overdrive_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_memory_partition(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_memory_partition_config(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_memory_reserved_pages(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_memory_total(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_memory_usage(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_metrics_header_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_metrics_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_od_volt_curve_regions(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_od_volt_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_overdrive_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_pci_bandwidth(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_pci_replay_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_pci_throughput(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_perf_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_pm_metrics_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_power_profile_presets(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_process_isolation(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_ras_block_features_enabled(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_ras_feature_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_reg_table_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_revision(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_subsystem_id(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_subsystem_name(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_topo_numa_affinity(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_vbios_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_vendor_name(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_virtualization_mode(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_volt_metric(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_vram_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_vram_usage(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_vram_vendor(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_gpu_xcd_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_hsmp_metrics_table(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_hsmp_metrics_table_version(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_lib_version(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_link_metrics(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_link_topology_nearest(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_minmax_bandwidth_between_processors(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_pcie_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_processor_count_from_handles(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_processor_handle_from_bdf(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_processor_handles_by_type(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_processor_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_soc_pstate(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_socket_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_threads_per_core(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_utilization_count(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_xgmi_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_get_xgmi_plpd(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_control_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_counter_group_supported(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_create_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_destroy_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_driver_reload(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_read_counter(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_validate_ras_eeprom(void) { return E_NOT_SUPPORTED; }
int amdsmi_gpu_xgmi_error_status(void) { return E_NOT_SUPPORTED; }
int amdsmi_init_gpu_event_notification(void) { return E_NOT_SUPPORTED; }
int amdsmi_is_P2P_accessible(void) { return E_NOT_SUPPORTED; }
int amdsmi_is_gpu_power_management_enabled(void) { return E_NOT_SUPPORTED; }
int amdsmi_reset_gpu(void) { return E_NOT_SUPPORTED; }
int amdsmi_reset_gpu_fan(void) { return E_NOT_SUPPORTED; }
int amdsmi_reset_gpu_xgmi_error(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_clk_freq(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_core_boostlimit(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_df_pstate_range(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_gmi3_link_width_range(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_pcie_link_rate(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_pwr_efficiency_mode(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_socket_boostlimit(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_socket_lclk_dpm_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_socket_power_cap(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_cpu_xgmi_width(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_accelerator_partition_profile(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_clk_limit(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_clk_range(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_compute_partition(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_event_notification_mask(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_fan_speed(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_memory_partition(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_memory_partition_mode(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_od_clk_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_od_volt_info(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_overdrive_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_pci_bandwidth(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_perf_determinism_mode(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_perf_level(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_power_profile(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_gpu_process_isolation(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_soc_pstate(void) { return E_NOT_SUPPORTED; }
int amdsmi_set_xgmi_plpd(void) { return E_NOT_SUPPORTED; }
int amdsmi_status_code_to_string(void) { return E_NOT_SUPPORTED; }
int amdsmi_stop_gpu_event_notification(void) { return E_NOT_SUPPORTED; }
int amdsmi_topo_get_link_type(void) { return E_NOT_SUPPORTED; }
int amdsmi_topo_get_link_weight(void) { return E_NOT_SUPPORTED; }
int amdsmi_topo_get_numa_node_number(void) { return E_NOT_SUPPORTED; }
int amdsmi_topo_get_p2p_status(void) { return E_NOT_SUPPORTED; }
